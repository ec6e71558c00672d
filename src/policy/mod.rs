//! Pure policy layers (SPEC §2.3). Each layer is a function of plain data:
//! the decoded request, the namespace context and the configuration. No I/O here.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

pub mod gateway;
pub mod ingress;
pub mod namespace;
pub mod package;
pub mod route;
pub mod tenant;
pub mod tenantgateway;
mod util;

// The platform's names and the namespace-labels view live in `platform` (a leaf), so the
// watches in `cluster/` need not depend on the policy layers.
pub use crate::platform::{
    ATTACHED_BY_ANNOTATION, ApexOwners, GATEWAY_LABEL, HOST_LABEL, INGRESS_LABEL, NamespaceContext,
    NoApexOwners,
};

/// The default trusted groups of SPEC §2.2.
pub const DEFAULT_TRUSTED_GROUPS: [&str; 5] = [
    "system:masters",
    "system:serviceaccounts:cozy-system",
    "system:serviceaccounts:cozy-cert-manager",
    "system:serviceaccounts:cozy-fluxcd",
    "system:serviceaccounts:kube-system",
];

/// The policy layers the webhook enforces (layer 1 and 6 live elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    /// Layer 2: Gateway and ListenerSet listener hostnames.
    Gateway,
    /// Layer 3: Package attached namespaces.
    Package,
    /// Layer 4: Tenant apex.
    Tenant,
    /// Layer 5: Namespace guarded labels.
    Namespace,
    /// Layer 7: HTTPRoute / TLSRoute / GRPCRoute hostnames.
    Route,
    /// Layer 8: Ingress hostnames.
    Ingress,
    /// Layer 9: TenantGateways are platform objects.
    TenantGateway,
}

impl Layer {
    pub const ALL: [Layer; 7] = [
        Layer::Gateway,
        Layer::Package,
        Layer::Tenant,
        Layer::Namespace,
        Layer::Route,
        Layer::Ingress,
        Layer::TenantGateway,
    ];

    /// The name used in flags (`--enforcement route=warn`), metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Gateway => "gateway",
            Layer::Package => "package",
            Layer::Tenant => "tenant",
            Layer::Namespace => "namespace",
            Layer::Route => "route",
            Layer::Ingress => "ingress",
            Layer::TenantGateway => "tenantgateway",
        }
    }

    pub fn parse(s: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// Layers that judge only tenant namespaces, against the namespace's apex (layers 2, 7, 8,
    /// 9): the admission path reads the namespace for them, `check` skips them elsewhere.
    pub fn tenant_scoped(self) -> bool {
        matches!(
            self,
            Layer::Gateway | Layer::Route | Layer::Ingress | Layer::TenantGateway
        )
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Enforcement mode per layer (SPEC §2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Deny,
    Warn,
    Audit,
    Off,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Deny => "deny",
            Mode::Warn => "warn",
            Mode::Audit => "audit",
            Mode::Off => "off",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "deny" => Some(Mode::Deny),
            "warn" => Some(Mode::Warn),
            "audit" => Some(Mode::Audit),
            "off" => Some(Mode::Off),
            _ => None,
        }
    }
}

/// Per-layer modes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enforcement {
    modes: BTreeMap<Layer, Mode>,
}

impl Enforcement {
    pub fn mode(&self, layer: Layer) -> Mode {
        self.modes.get(&layer).copied().unwrap_or_default()
    }

    pub fn set(&mut self, layer: Layer, mode: Mode) {
        self.modes.insert(layer, mode);
    }
}

/// Settings every layer reads (built from flags in `config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyConfig {
    /// Namespaces starting with this prefix are tenant scope (layers 2, 7, 8) and may not be
    /// listed in a Package's attachedNamespaces (layer 3).
    pub tenant_prefix: String,
    /// Platform namespaces; they win hostname conflicts in the reconciler.
    pub system_prefix: String,
    /// Platform root apex for layer 8; `None` means layer 8 cannot run.
    pub root_host: Option<String>,
    /// Exact group names that make a caller trusted (layers 4, 5, 9).
    pub trusted_groups: Vec<String>,
    /// Namespace labels only trusted callers may write (layer 5).
    pub guarded_labels: Vec<String>,
    /// Namespace annotations only trusted callers may write (layer 5).
    pub guarded_annotations: Vec<String>,
    pub enforcement: Enforcement,
}

/// The guarded labels of layer 5: the apex, and the two labels that make the replicator copy
/// the platform's wildcard private key into a namespace (SPEC §3.6).
pub fn default_guarded_labels() -> Vec<String> {
    [HOST_LABEL, GATEWAY_LABEL, INGRESS_LABEL]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The guarded annotations of layer 5: the reconciler's mark of the attachments it made (a
/// forged one makes it remove a label the platform wrote, SPEC §3.5), and the platform
/// controller's mark, which the reconciler reads as its own (SPEC §3.8).
pub fn default_guarded_annotations() -> Vec<String> {
    vec![
        ATTACHED_BY_ANNOTATION.to_string(),
        crate::platform::PLATFORM_ATTACHED_BY_ANNOTATION.to_string(),
    ]
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            tenant_prefix: "tenant-".to_string(),
            system_prefix: "cozy-".to_string(),
            root_host: None,
            trusted_groups: DEFAULT_TRUSTED_GROUPS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            guarded_labels: default_guarded_labels(),
            guarded_annotations: default_guarded_annotations(),
            enforcement: Enforcement::default(),
        }
    }
}

impl PolicyConfig {
    /// True when `namespace` is tenant scope.
    pub fn in_tenant_scope(&self, namespace: &str) -> bool {
        namespace.starts_with(&self.tenant_prefix)
    }

    /// True when one of `groups` is a trusted group. The username never grants trust.
    pub fn is_trusted(&self, groups: &[Cow<'_, str>]) -> bool {
        groups
            .iter()
            .any(|g| self.trusted_groups.iter().any(|t| t == g))
    }
}

/// Admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn parse(s: &str) -> Option<Operation> {
        match s {
            "CREATE" => Some(Operation::Create),
            "UPDATE" => Some(Operation::Update),
            "DELETE" => Some(Operation::Delete),
            "CONNECT" => Some(Operation::Connect),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// A decoded admission request, reduced to what the layers read.
///
/// The admission codec has already handled CONNECT (always allowed), DELETE (allowed for every
/// kind but TenantGateway, whose layer sees it with the deleted object as `object`) and the
/// subresources whose writes cannot change what a layer reads, so layers otherwise only see
/// CREATE and UPDATE (of the main resource, or of `namespaces/status`, `namespaces/finalize`,
/// `ingresses/status`, judged the same way) with an `object`.
#[derive(Debug, Clone, Copy)]
pub struct Review<'a> {
    pub operation: Operation,
    /// `request.kind.kind`, e.g. `HTTPRoute`; used in messages.
    pub kind: &'a str,
    /// Empty for cluster-scoped objects.
    pub namespace: &'a str,
    /// `request.name`, or the object's metadata.name / generateName.
    pub name: &'a str,
    pub object: &'a Value,
    /// Present on UPDATE.
    pub old_object: Option<&'a Value>,
    pub username: &'a str,
    pub groups: &'a [Cow<'a, str>],
}

/// What a layer found. An empty `violations` means the object passes the layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// One message per problem, each complete on its own (SPEC §2.4).
    pub violations: Vec<String>,
    /// Notes for the user that are not denials, each at most 120 characters.
    pub warnings: Vec<String>,
}

impl Findings {
    pub fn ok() -> Self {
        Findings::default()
    }

    pub fn deny(message: impl Into<String>) -> Self {
        Findings {
            violations: vec![message.into()],
            warnings: Vec::new(),
        }
    }
}

/// One message for all of an object's problems (SPEC §2.4: list them all): when each names
/// the same object, it is named once and the problems are numbered after it. Admission's
/// denial message and the audit's report message are this one.
pub fn combine_violations(violations: &[String]) -> String {
    let [first, rest @ ..] = violations else {
        return String::new();
    };
    if rest.is_empty() {
        return first.clone();
    }
    if let Some((object, _)) = first.split_once(": ") {
        let head = format!("{object}: ");
        if violations.iter().all(|v| v.starts_with(&head)) {
            let problems: Vec<String> = violations
                .iter()
                .enumerate()
                .map(|(i, v)| format!("({}) {}", i + 1, &v[head.len()..]))
                .collect();
            return format!(
                "{object}: {} problems: {}",
                violations.len(),
                problems.join("; ")
            );
        }
    }
    violations.join("; ")
}

/// The object does not have the shape of its kind (e.g. `spec.hostnames` is a string).
/// Always a denial, whatever the enforcement mode: we cannot tell what it would publish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {object}: {field} {problem}")]
pub struct ShapeError {
    pub kind: String,
    /// `namespace/name` or `name`.
    pub object: String,
    /// JSON path of the bad field, e.g. `spec.listeners[2].hostname`.
    pub field: String,
    /// What is wrong, e.g. `must be a string, got a number`.
    pub problem: String,
}

/// The result of one layer.
pub type LayerResult = Result<Findings, ShapeError>;

/// `namespace/name` for namespaced objects, `name` otherwise; used in every message.
pub fn object_ref(review: &Review<'_>) -> String {
    if review.namespace.is_empty() {
        review.name.to_string()
    } else {
        format!("{}/{}", review.namespace, review.name)
    }
}

/// Which layer guards a resource, and whether it needs the namespace context. No other
/// namespace's apex is known: see [`evaluate_with`].
pub fn evaluate(
    layer: Layer,
    review: &Review<'_>,
    ns: &NamespaceContext,
    cfg: &PolicyConfig,
) -> LayerResult {
    evaluate_with(layer, review, ns, &NoApexOwners, cfg)
}

/// [`evaluate`] with the apexes of the other namespaces (layer 8 reads them).
pub fn evaluate_with(
    layer: Layer,
    review: &Review<'_>,
    ns: &NamespaceContext,
    others: &dyn ApexOwners,
    cfg: &PolicyConfig,
) -> LayerResult {
    match layer {
        Layer::Gateway => gateway::evaluate(review, ns, cfg),
        Layer::Package => package::evaluate(review, cfg),
        Layer::Tenant => tenant::evaluate(review, cfg),
        Layer::Namespace => namespace::evaluate(review, cfg),
        Layer::Route => route::evaluate(review, ns, cfg),
        Layer::Ingress => ingress::evaluate_with(review, ns, others, cfg),
        Layer::TenantGateway => tenantgateway::evaluate(review, ns, cfg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_problems_name_the_object_once() {
        let one = vec!["HTTPRoute a/b: hostname \"x\" is not allowed".to_string()];
        assert_eq!(combine_violations(&one), one[0]);
        let two = vec![
            "HTTPRoute a/b: hostname \"x\" is not allowed".to_string(),
            "HTTPRoute a/b: hostname \"y\" is invalid".to_string(),
        ];
        let m = combine_violations(&two);
        assert_eq!(m.matches("HTTPRoute a/b").count(), 1, "{m}");
        assert_eq!(
            m,
            "HTTPRoute a/b: 2 problems: (1) hostname \"x\" is not allowed; (2) hostname \"y\" is invalid"
        );
        // Different objects (never from one layer today): joined as they are.
        let mixed = vec!["A x: p".to_string(), "B y: q".to_string()];
        assert_eq!(combine_violations(&mixed), "A x: p; B y: q");
        assert_eq!(combine_violations(&[]), "");
    }
}
