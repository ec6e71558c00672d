//! ValidatingAdmissionPolicy manifests equivalent to the webhook layers (SPEC §5).
//!
//! `tenant-gateway policies` prints what [`render`] returns: one ValidatingAdmissionPolicy and
//! one ValidatingAdmissionPolicyBinding per layer (2, 3, 4, 5, 7, 8), in CEL, for a given
//! [`PolicyConfig`]. They are a second line of defence for clusters that want one, and the
//! oracle the end-to-end tests compare the webhook against, so every rule below mirrors the
//! matching module of `src/policy/` decision for decision; `policies/README.md` lists the
//! places where CEL or the API server make that impossible.
//!
//! The objects are built from the typed k8s-openapi structs rather than `serde_json::Value`:
//! their `Serialize` impls emit fields in a fixed order, so the output is byte-for-byte
//! deterministic whatever serde_json features the build happens to unify (the drift test
//! compares bytes).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::hostname;
use crate::platform::TGW_API_GROUP;
use crate::policy::{self, HOST_LABEL, Layer, Mode, PolicyConfig};

/// Every policy and binding name starts with this.
pub const NAME_PREFIX: &str = "tenant-gateway-";
/// Label marking the objects as ours, so operators can list or delete them in one go.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "tenant-gateway";
/// Label naming the webhook layer a policy mirrors (the `--enforcement` layer name).
pub const LAYER_LABEL: &str = "tenant-gateway.cozystack.io/layer";
/// The platform root host the committed `policies/` are generated with; the end-to-end tests
/// use the same one. Operators regenerate with their own apex.
pub const COMMITTED_ROOT_HOST: &str = "example.org";
/// Where the committed manifests live, relative to the crate root.
pub const COMMITTED_FILE: &str = "policies/policies.yaml";

/// A DNS-1123 subdomain, optionally preceded by one `*.` label. Together with the 253-byte
/// length limit this is exactly `hostname::validate`: ASCII only, lowercase only, labels of
/// 1-63 characters that start and end with a letter or digit, `*` only as the whole first
/// label. (CEL counts code points, not bytes, but only ASCII strings get past the regex.)
const HOSTNAME_RE: &str =
    r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$";
/// A DNS-1123 label: what a namespace name must be.
const DNS_LABEL_RE: &str = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";

/// Errors of [`render`].
#[derive(Debug, thiserror::Error)]
pub enum PoliciesError {
    /// The root host would end up inside CEL; an invalid one would silently weaken layer 8.
    #[error("root host {host:?} is not a valid hostname: {reason}")]
    InvalidRootHost { host: String, reason: String },
    #[error("cannot serialize {name} as YAML: {source}")]
    Serialize {
        name: String,
        #[source]
        source: serde_saphyr::SerializeError,
    },
}

/// The configuration `policies/` is generated with: the defaults, plus the placeholder root
/// host `example.org` so that layer 8 is present. The drift test and the CLI both use it.
pub fn committed_config() -> PolicyConfig {
    PolicyConfig {
        root_host: Some(COMMITTED_ROOT_HOST.to_string()),
        ..PolicyConfig::default()
    }
}

/// One policy with its binding.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyPair {
    pub layer: Layer,
    pub policy: ValidatingAdmissionPolicy,
    pub binding: ValidatingAdmissionPolicyBinding,
}

/// The policies and bindings for `cfg`, in layer order.
///
/// A layer in mode `off` is left out, as is layer 8 when `cfg.root_host` is `None` (without
/// the platform root the Ingress rule cannot be written; the webhook refuses to start in that
/// case instead). Layers 3 and 4 come with a second policy for malformed objects that is
/// always bound with `Deny`, because the webhook denies a malformed object in every mode but
/// `off`.
pub fn policies(cfg: &PolicyConfig) -> Result<Vec<PolicyPair>, PoliciesError> {
    let root_host = match cfg.root_host.as_deref() {
        None => None,
        Some(h) => Some(checked_root_host(h)?),
    };
    let mut out = Vec::new();
    for layer in Layer::ALL {
        let mode = cfg.enforcement.mode(layer);
        let Some(actions) = validation_actions(mode) else {
            continue;
        };
        let defs = match layer {
            Layer::Gateway => vec![gateway(cfg)],
            Layer::Package => vec![package_shape(), package(cfg)],
            Layer::Tenant => vec![tenant_shape(), tenant(cfg)],
            Layer::Namespace => vec![namespace(cfg)],
            Layer::Route => vec![route(cfg)],
            Layer::Ingress => match &root_host {
                Some(root) => vec![ingress(cfg, root)],
                None => Vec::new(),
            },
            Layer::TenantGateway => vec![tenant_gateway(cfg)],
        };
        for def in defs {
            let actions = if def.shape_only {
                vec!["Deny".to_string()]
            } else {
                actions.clone()
            };
            out.push(def.build(layer, actions));
        }
    }
    Ok(out)
}

/// Multi-document YAML of [`policies`], with a header saying how it was generated.
pub fn render(cfg: &PolicyConfig) -> Result<String, PoliciesError> {
    let pairs = policies(cfg)?;
    let mut out = String::new();
    out.push_str(
        "# Generated by `tenant-gateway policies`; do not edit, regenerate (see README.md).\n\
         # ValidatingAdmissionPolicies equivalent to the tenant-gateway webhook layers.\n",
    );
    // Debug formatting keeps odd configuration values on one comment line.
    let _ = writeln!(out, "#   tenant prefix: {:?}", cfg.tenant_prefix);
    match &cfg.root_host {
        Some(r) => {
            let _ = writeln!(out, "#   root host: {r:?}");
        }
        None => out.push_str("#   root host: none (the Ingress policy, layer 8, is omitted)\n"),
    }
    let _ = writeln!(out, "#   trusted groups: {:?}", cfg.trusted_groups);
    let _ = writeln!(out, "#   guarded labels: {:?}", cfg.guarded_labels);
    let _ = writeln!(
        out,
        "#   guarded annotations: {:?}",
        cfg.guarded_annotations
    );
    let modes: Vec<String> = Layer::ALL
        .iter()
        .map(|l| format!("{}={}", l.as_str(), cfg.enforcement.mode(*l).as_str()))
        .collect();
    let _ = writeln!(out, "#   enforcement: {}", modes.join(" "));
    for pair in &pairs {
        push_document(&mut out, &pair.policy, &pair.policy.metadata.name)?;
        push_document(&mut out, &pair.binding, &pair.binding.metadata.name)?;
    }
    Ok(out)
}

fn push_document<T: serde::Serialize>(
    out: &mut String,
    object: &T,
    name: &Option<String>,
) -> Result<(), PoliciesError> {
    let yaml = crate::yaml::to_document(object).map_err(|source| PoliciesError::Serialize {
        name: name.clone().unwrap_or_default(),
        source,
    })?;
    out.push_str("---\n");
    out.push_str(&yaml);
    Ok(())
}

/// The root host as the policies compare it: [`hostname::parse_apex`], the parser `config`
/// applies to `--root-host` and the reconciler to `spec.apex`.
fn checked_root_host(h: &str) -> Result<String, PoliciesError> {
    hostname::parse_apex(h).map_err(|e| PoliciesError::InvalidRootHost {
        host: h.to_string(),
        reason: e.to_string(),
    })
}

/// The binding's `validationActions` for a mode; `None` means the layer is not rendered.
fn validation_actions(mode: Mode) -> Option<Vec<String>> {
    let action = match mode {
        Mode::Deny => "Deny",
        Mode::Warn => "Warn",
        Mode::Audit => "Audit",
        Mode::Off => return None,
    };
    Some(vec![action.to_string()])
}

// ---------------------------------------------------------------------------------------------
// Building blocks

/// A policy before it becomes typed objects.
struct PolicyDef {
    /// Name without [`NAME_PREFIX`].
    name: &'static str,
    rules: Vec<NamedRuleWithOperations>,
    match_conditions: Vec<MatchCondition>,
    variables: Vec<Variable>,
    validations: Vec<Validation>,
    /// Shape checks: bound with `Deny` whatever the layer's mode.
    shape_only: bool,
}

impl PolicyDef {
    fn build(self, layer: Layer, actions: Vec<String>) -> PolicyPair {
        let name = format!("{NAME_PREFIX}{}", self.name);
        let labels: BTreeMap<String, String> = [
            (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
            (LAYER_LABEL.to_string(), layer.as_str().to_string()),
        ]
        .into_iter()
        .collect();
        let metadata = ObjectMeta {
            name: Some(name.clone()),
            labels: Some(labels),
            ..ObjectMeta::default()
        };
        let policy = ValidatingAdmissionPolicy {
            metadata: metadata.clone(),
            spec: Some(ValidatingAdmissionPolicySpec {
                // An evaluation error (cost budget, unexpected data) must deny, as the webhook
                // does on anything unexpected (SPEC §9).
                failure_policy: Some("Fail".to_string()),
                match_constraints: Some(MatchResources {
                    // Other served versions of the same kinds are converted to a listed one.
                    match_policy: Some("Equivalent".to_string()),
                    resource_rules: Some(self.rules),
                    ..MatchResources::default()
                }),
                match_conditions: (!self.match_conditions.is_empty())
                    .then_some(self.match_conditions),
                variables: (!self.variables.is_empty()).then_some(self.variables),
                validations: Some(self.validations),
                ..ValidatingAdmissionPolicySpec::default()
            }),
            status: None,
        };
        let binding = ValidatingAdmissionPolicyBinding {
            metadata,
            spec: Some(ValidatingAdmissionPolicyBindingSpec {
                policy_name: Some(name),
                validation_actions: Some(actions),
                ..ValidatingAdmissionPolicyBindingSpec::default()
            }),
        };
        PolicyPair {
            layer,
            policy,
            binding,
        }
    }
}

/// CREATE and UPDATE of `resources` in `group` at `versions`. Subresources match only where
/// they are listed (`namespaces/status`, `namespaces/finalize`, `ingresses/status`: the API
/// server keeps metadata changes made through them), as in the webhook registration.
fn rule(group: &str, versions: &[&str], resources: &[&str]) -> NamedRuleWithOperations {
    rule_for(group, versions, resources, &["CREATE", "UPDATE"])
}

/// [`rule`] with its own operations (layer 9 also judges DELETE).
fn rule_for(
    group: &str,
    versions: &[&str],
    resources: &[&str],
    operations: &[&str],
) -> NamedRuleWithOperations {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    NamedRuleWithOperations {
        api_groups: Some(vec![group.to_string()]),
        api_versions: Some(strings(versions)),
        operations: Some(strings(operations)),
        resources: Some(strings(resources)),
        ..NamedRuleWithOperations::default()
    }
}

fn variable(name: &str, expression: String) -> Variable {
    Variable {
        name: name.to_string(),
        expression,
    }
}

/// A validation that denies with HTTP 403 like the webhook (the API server's default reason
/// for a policy denial is `Invalid`, 422). `message` is the fallback when the message
/// expression fails.
fn validation(expression: String, message: &str, message_expression: String) -> Validation {
    Validation {
        expression,
        message: Some(message.to_string()),
        message_expression: Some(message_expression),
        reason: Some("Forbidden".to_string()),
    }
}

/// `s` as a CEL string literal. Configuration values (prefix, groups, labels, root host) end
/// up inside expressions; escaping keeps a stray quote from changing the expression.
fn lit(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `[a, b, …]` of CEL string literals.
fn list_lit(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|s| lit(s)).collect();
    format!("[{}]", items.join(", "))
}

/// CEL: `h` is a valid hostname (see [`HOSTNAME_RE`]).
fn valid_hostname(h: &str) -> String {
    format!("({h}.size() <= 253 && {h}.matches(r'{HOSTNAME_RE}'))")
}

/// CEL: `within(h, apex)` for a valid (hence lowercase) `h` and a lowercased, non-empty
/// `apex` — `hostname::within` in CEL.
fn within(h: &str, apex: &str) -> String {
    format!("({h} == {apex} || {h}.endsWith('.' + {apex}))")
}

/// CEL: `within(h, root)` for a constant, lowercase `root`.
fn within_lit(h: &str, root: &str) -> String {
    format!(
        "({h} == {} || {h}.endsWith({}))",
        lit(root),
        lit(&format!(".{root}"))
    )
}

/// CEL string concatenation, one operand per line so that long message expressions stay
/// readable (and serialize as YAML block scalars rather than quoted one-liners).
fn concat<S: AsRef<str>>(parts: &[S]) -> String {
    let parts: Vec<&str> = parts.iter().map(AsRef::as_ref).collect();
    parts.join(" +\n  ")
}

/// CEL: the values in list `list` (strings) as `"a", "b"` for messages.
fn quoted_list(list: &str) -> String {
    format!("{list}.map(x, '\"' + x + '\"').join(', ')")
}

/// The matchCondition of layer 8 for `ingresses/status`: the status strategy resets `spec`
/// but keeps annotations, so a status write is judged only when it changes one of the
/// annotations the layer reads (as the webhook judges a subresource write only when a read
/// field changes).
fn status_changes_annotations() -> MatchCondition {
    let side =
        |o: &str| format!("(has({o}.metadata.annotations) ? {o}.metadata.annotations : {{}})");
    let (new, old) = (side("object"), side("oldObject"));
    MatchCondition {
        name: "main-resource-or-read-annotation-changed".to_string(),
        expression: format!(
            "request.subResource == '' || oldObject == null ||\n\
             {}.exists(k,\n\
             \x20 (k in {new}) != (k in {old}) ||\n\
             \x20 (k in {new} && {new}[k] != {old}[k]))",
            list_lit(
                &policy::ingress::ANNOTATIONS
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
            )
        ),
    }
}

/// The matchCondition limiting a policy to tenant namespaces (layers 2, 7, 8).
fn tenant_scope(cfg: &PolicyConfig) -> MatchCondition {
    MatchCondition {
        name: "tenant-namespace".to_string(),
        expression: format!("request.namespace.startsWith({})", lit(&cfg.tenant_prefix)),
    }
}

/// Variables shared by the tenant-scoped hostname layers: the namespace apex label as
/// written (`apexLabel`, for messages), lowercased (`apex`, for matching) and the object
/// reference for messages.
///
/// `namespaceObject` is the namespace from the API server's informer, with a live GET on a
/// miss — the same lookup the webhook does. A namespace that does not exist fails the
/// request before any policy runs.
fn apex_variables() -> Vec<Variable> {
    let host = lit(HOST_LABEL);
    vec![
        variable(
            "apexLabel",
            format!(
                "has(namespaceObject.metadata.labels) && {host} in namespaceObject.metadata.labels\n\
                 \x20 ? namespaceObject.metadata.labels[{host}]\n\
                 \x20 : ''"
            ),
        ),
        variable("apex", "variables.apexLabel.lowerAscii()".to_string()),
        variable(
            "objectRef",
            "request.kind.kind + ' ' + request.namespace + '/' + object.metadata.name".to_string(),
        ),
    ]
}

/// The fail-closed validation of layers 2, 7 and 8 when the namespace has no apex. `what`
/// names the checked hostnames as the webhook's message does.
fn missing_apex(what: &str) -> Validation {
    let tail = format!(
        " has no {HOST_LABEL} label (or it is empty); {what} in tenant namespaces are only \
         admitted within that apex, so the request is denied until the label is set. If the \
         namespace is being created, retry in a few seconds."
    );
    validation(
        "variables.apex != ''".to_string(),
        &format!("the namespace{tail}"),
        concat(&[
            "variables.objectRef + ': namespace ' + request.namespace",
            &lit(&tail),
        ]),
    )
}

/// CEL: the caller is trusted (`PolicyConfig::is_trusted`): one of its groups is one of the
/// configured ones. The username never counts.
fn trusted(cfg: &PolicyConfig) -> String {
    format!(
        "has(request.userInfo.groups) &&\n  request.userInfo.groups.exists(g, g in {})",
        list_lit(&cfg.trusted_groups)
    )
}

/// "groups: a, b" as the webhook words the trusted callers.
fn trusted_text(cfg: &PolicyConfig) -> String {
    if cfg.trusted_groups.is_empty() {
        "no trusted groups are configured".to_string()
    } else {
        format!("groups: {}", cfg.trusted_groups.join(", "))
    }
}

/// What a valid hostname is, for messages (CEL cannot say which rule an invalid one broke).
const HOSTNAME_RULE: &str = "); a hostname must also be a valid lowercase DNS name, with \"*.\" only as the whole first label";

/// CEL: `request.userInfo.username` quoted for messages.
const BY_USER: &str =
    "'\"' + (has(request.userInfo.username) ? request.userInfo.username : '') + '\"'";

// ---------------------------------------------------------------------------------------------
// The layers

/// Layer 2 — Gateway listener hostnames (`policy::gateway`).
fn gateway(cfg: &PolicyConfig) -> PolicyDef {
    let mut variables = apex_variables();
    let ok = format!(
        "{} && {}",
        valid_hostname("l.hostname"),
        within("l.hostname", "variables.apex")
    );
    variables.push(variable(
        "badHostnames",
        format!(
            "variables.apex == '' || !has(object.spec) || !has(object.spec.listeners)\n\
             \x20 ? []\n\
             \x20 : object.spec.listeners\n\
             \x20     .filter(l, has(l.hostname) && !({ok}))\n\
             \x20     .map(l, l.hostname)"
        ),
    ));
    PolicyDef {
        name: "gateway-hostnames",
        rules: vec![
            rule(
                "gateway.networking.k8s.io",
                &["v1", "v1beta1"],
                &["gateways"],
            ),
            rule("gateway.networking.k8s.io", &["v1"], &["listenersets"]),
            rule(
                "gateway.networking.x-k8s.io",
                &["v1alpha1"],
                &["xlistenersets"],
            ),
        ],
        match_conditions: vec![tenant_scope(cfg)],
        variables,
        validations: vec![
            missing_apex("Gateway listener hostnames"),
            validation(
                "variables.badHostnames.size() == 0".to_string(),
                "Gateway listener hostnames must equal the namespace's namespace.cozystack.io/host \
                 label or end with . followed by it, and must be valid lowercase DNS names",
                concat(&[
                    format!(
                        "variables.objectRef + ': listener hostname(s) ' + {}",
                        quoted_list("variables.badHostnames")
                    ),
                    "' not allowed: listener hostnames must equal ' + variables.apexLabel".into(),
                    "' or end with .' + variables.apexLabel".into(),
                    format!(
                        "{} + request.namespace",
                        lit(&format!(" (the {HOST_LABEL} label of namespace "))
                    ),
                    lit(HOSTNAME_RULE),
                ]),
            ),
        ],
        shape_only: false,
    }
}

/// The variable chain of layer 3: `spec.components.platform.values.gateway.attachedNamespaces`
/// when the whole path exists, else `null`. A step that is missing, `null` or not an object
/// ends the path, as in `policy::package`. Everything goes through `dyn` because `spec` is
/// free-form (`values` is Helm input), so the type checker must not expect declared fields.
fn attached_namespaces_variables() -> Vec<Variable> {
    let step = |name: &str, from: &str, field: &str| {
        variable(
            name,
            format!(
                "type(variables.{from}) == map && has(variables.{from}.{field})\n\
                 \x20 ? variables.{from}.{field}\n\
                 \x20 : null"
            ),
        )
    };
    vec![
        variable(
            "spec",
            "has(object.spec) ? dyn(object.spec) : null".to_string(),
        ),
        step("components", "spec", "components"),
        step("platform", "components", "platform"),
        step("values", "platform", "values"),
        step("gateway", "values", "gateway"),
        step("attached", "gateway", "attachedNamespaces"),
        variable(
            "objectRef",
            "request.kind.kind + ' ' + object.metadata.name".to_string(),
        ),
    ]
}

const ATTACHED_FIELD: &str = "spec.components.platform.values.gateway.attachedNamespaces";

/// Layer 3, malformed objects: the list must be a list of strings.
fn package_shape() -> PolicyDef {
    PolicyDef {
        name: "package-attached-namespaces-shape",
        rules: package_rules(),
        match_conditions: Vec::new(),
        variables: attached_namespaces_variables(),
        validations: vec![
            validation(
                "type(variables.attached) == null_type || type(variables.attached) == list"
                    .to_string(),
                &format!("{ATTACHED_FIELD} must be a list of namespace names"),
                concat(&[
                    "variables.objectRef".to_string(),
                    lit(&format!(
                        ": {ATTACHED_FIELD} must be a list of namespace names"
                    )),
                ]),
            ),
            validation(
                "type(variables.attached) != list ||\n  \
                 variables.attached.all(e, type(e) == string)"
                    .to_string(),
                &format!("{ATTACHED_FIELD} entries must be strings (namespace names)"),
                concat(&[
                    "variables.objectRef".to_string(),
                    lit(&format!(
                        ": {ATTACHED_FIELD} entries must be strings (namespace names)"
                    )),
                ]),
            ),
        ],
        shape_only: true,
    }
}

fn package_rules() -> Vec<NamedRuleWithOperations> {
    vec![rule("cozystack.io", &["v1alpha1"], &["packages"])]
}

/// Layer 3 — Package attached namespaces (`policy::package`). No caller is exempt.
fn package(cfg: &PolicyConfig) -> PolicyDef {
    let prefix = &cfg.tenant_prefix;
    let mut variables = attached_namespaces_variables();
    variables.push(variable(
        "tenantEntries",
        format!(
            "type(variables.attached) != list\n\
             \x20 ? []\n\
             \x20 : variables.attached.filter(e, type(e) == string && e.startsWith({}))",
            lit(prefix)
        ),
    ));
    variables.push(variable(
        "invalidEntries",
        format!(
            "type(variables.attached) != list\n\
             \x20 ? []\n\
             \x20 : variables.attached.filter(e, type(e) == string && !e.matches(r'{DNS_LABEL_RE}'))"
        ),
    ));
    let rule_text = format!(
        "attachedNamespaces must not contain {prefix}* namespaces (this includes {prefix}root); \
         tenants join a Gateway with tenant.spec.gateway=true, never through this list. Remove \
         the entries; only platform namespaces may be listed"
    );
    PolicyDef {
        name: "package-attached-namespaces",
        rules: package_rules(),
        match_conditions: Vec::new(),
        variables,
        validations: vec![
            validation(
                "variables.tenantEntries.size() == 0".to_string(),
                &format!("{ATTACHED_FIELD}: {rule_text}"),
                concat(&[
                    format!("variables.objectRef + ': {ATTACHED_FIELD} lists '"),
                    quoted_list("variables.tenantEntries"),
                    lit(&format!(": {rule_text}")),
                ]),
            ),
            validation(
                "variables.invalidEntries.size() == 0".to_string(),
                &format!(
                    "{ATTACHED_FIELD} entries must be valid namespace names (DNS-1123 labels)"
                ),
                concat(&[
                    format!("variables.objectRef + ': {ATTACHED_FIELD} lists '"),
                    quoted_list("variables.invalidEntries"),
                    lit(&format!(
                        ", which are not valid namespace names: entries must be existing \
                         platform namespace names (DNS-1123 labels: lowercase letters, digits \
                         and \"-\", at most 63), never {prefix}* namespaces"
                    )),
                ]),
            ),
        ],
        shape_only: false,
    }
}

/// Variables of layer 4: `spec` of object and oldObject as `dyn` (the Tenant schema may leave
/// `spec` open) and the hosts, `""` when absent or null (`policy::tenant::host`).
fn tenant_variables() -> Vec<Variable> {
    let host = |spec: &str| {
        format!(
            "type(variables.{spec}) == map && has(variables.{spec}.host) &&\n\
             \x20   type(variables.{spec}.host) == string\n\
             \x20 ? variables.{spec}.host\n\
             \x20 : ''"
        )
    };
    vec![
        variable(
            "spec",
            "has(object.spec) ? dyn(object.spec) : null".to_string(),
        ),
        variable(
            "oldSpec",
            "oldObject != null && has(oldObject.spec) ? dyn(oldObject.spec) : null".to_string(),
        ),
        variable("newHost", host("spec")),
        variable("oldHost", host("oldSpec")),
        variable(
            "objectRef",
            "request.kind.kind + ' ' + request.namespace + '/' + object.metadata.name".to_string(),
        ),
    ]
}

fn tenant_rules() -> Vec<NamedRuleWithOperations> {
    // tenants/status too: Cozystack serves Tenants from an aggregated API server whose status
    // strategy is not the CRD one (`WebhookResource::evaluated_subresources`).
    vec![rule(
        "apps.cozystack.io",
        &["v1alpha1"],
        &["tenants", "tenants/status"],
    )]
}

/// Layer 4, malformed objects: `spec.host` must be a string when present.
fn tenant_shape() -> PolicyDef {
    PolicyDef {
        name: "tenant-host-shape",
        rules: vec![rule("apps.cozystack.io", &["v1alpha1"], &["tenants"])],
        match_conditions: Vec::new(),
        variables: tenant_variables(),
        validations: vec![validation(
            "type(variables.spec) != map || !has(variables.spec.host) ||\n  \
             type(variables.spec.host) == string || type(variables.spec.host) == null_type"
                .to_string(),
            "spec.host must be a string",
            concat(&["variables.objectRef", "': spec.host must be a string'"]),
        )],
        shape_only: true,
    }
}

/// Layer 4 — Tenant apex (`policy::tenant`): any difference in `spec.host` (exact
/// comparison) needs a trusted caller.
fn tenant(cfg: &PolicyConfig) -> PolicyDef {
    let mut variables = tenant_variables();
    variables.push(variable("trusted", trusted(cfg)));
    let rule_text = format!(
        ": spec.host can only be set or changed by trusted platform automation ({}); this \
         request by ",
        trusted_text(cfg)
    );
    PolicyDef {
        name: "tenant-host",
        rules: tenant_rules(),
        match_conditions: Vec::new(),
        variables,
        validations: vec![validation(
            "variables.oldHost == variables.newHost || variables.trusted".to_string(),
            &format!(
                "spec.host can only be set or changed by trusted platform automation ({}); the \
                 host becomes the tenant's apex domain, so ask a platform operator to change it",
                trusted_text(cfg)
            ),
            format!(
                "variables.objectRef + {} + {BY_USER} + ' would ' +\n  \
                 (variables.oldHost == ''\n    \
                 ? 'set it to \"' + variables.newHost + '\"'\n    \
                 : variables.newHost == ''\n      \
                 ? 'clear it (it is \"' + variables.oldHost + '\")'\n      \
                 : 'change it from \"' + variables.oldHost + '\" to \"' + variables.newHost + '\"') +\n  \
                 '. The host becomes the tenant\\'s apex domain, so ask a platform operator to \
                 change it'",
                lit(&rule_text)
            ),
        )],
        shape_only: false,
    }
}

/// Layer 5 — Namespace guarded labels and annotations (`policy::namespace`): any difference
/// in presence or value of a guarded key needs a trusted caller. `oldObject` is null on
/// CREATE, so every guarded key present then is a first write. One validation per metadata
/// map, so a request that touches both is denied naming one of them (the webhook names both).
fn namespace(cfg: &PolicyConfig) -> PolicyDef {
    let mut variables = Vec::new();
    let mut validations = Vec::new();
    let rule_text = format!(
        " is immutable once set and can only be written by trusted platform automation ({}); \
         this request by ",
        trusted_text(cfg)
    );
    for (field, word, keys, var) in [
        ("labels", "label", &cfg.guarded_labels, "Labels"),
        (
            "annotations",
            "annotation",
            &cfg.guarded_annotations,
            "Annotations",
        ),
    ] {
        // A key listed twice is still one check, as in the webhook.
        let mut guarded: Vec<String> = Vec::new();
        for k in keys {
            if !guarded.contains(k) {
                guarded.push(k.clone());
            }
        }
        if guarded.is_empty() {
            continue;
        }
        let (old, new, changed) = (
            format!("old{var}"),
            format!("new{var}"),
            format!("changed{var}"),
        );
        variables.push(variable(
            &old,
            format!(
                "oldObject != null && has(oldObject.metadata.{field})\n\
                 \x20 ? oldObject.metadata.{field}\n\
                 \x20 : {{}}"
            ),
        ));
        variables.push(variable(
            &new,
            format!("has(object.metadata.{field}) ? object.metadata.{field} : {{}}"),
        ));
        // `k in new` is only read when the presence is equal, so the lookups never miss.
        variables.push(variable(
            &changed,
            format!(
                "{}.filter(k,\n\
                 \x20 (k in variables.{old}) != (k in variables.{new}) ||\n\
                 \x20 (k in variables.{new} && variables.{old}[k] != variables.{new}[k]))",
                list_lit(&guarded)
            ),
        ));
        validations.push(validation(
            format!("variables.{changed}.size() == 0 || variables.trusted"),
            &format!(
                "the guarded namespace {field} ({}) are immutable once set and can only be \
                 written by trusted platform automation ({})",
                guarded.join(", "),
                trusted_text(cfg)
            ),
            format!(
                "request.kind.kind + ' ' + object.metadata.name + ': ' +\n  \
                 (variables.{changed}.size() == 1\n    \
                 ? '{word} ' + variables.{changed}[0]\n    \
                 : '{field} ' + variables.{changed}.join(', ') + ': each') +\n  \
                 {} + {BY_USER} + ' would ' +\n  \
                 variables.{changed}.map(k,\n    \
                 !(k in variables.{new})\n      \
                 ? 'remove ' + k + ' (it was \"' + variables.{old}[k] + '\")'\n      \
                 : k in variables.{old}\n        \
                 ? 'change ' + k + ' from \"' + variables.{old}[k] + '\" to \"' + variables.{new}[k] + '\"'\n        \
                 : 'set ' + k + ' to \"' + variables.{new}[k] + '\" (it was absent)'\n  \
                 ).join(' and ')",
                lit(&rule_text)
            ),
        ));
    }
    variables.push(variable("trusted", trusted(cfg)));
    PolicyDef {
        name: "namespace-guarded-labels",
        rules: vec![rule(
            "",
            &["v1"],
            &["namespaces", "namespaces/status", "namespaces/finalize"],
        )],
        match_conditions: Vec::new(),
        variables,
        validations,
        shape_only: false,
    }
}

/// Layer 9 — TenantGateways are platform objects (`policy::tenantgateway`). In tenant
/// namespaces only trusted callers may create, update or delete one; for every caller the
/// apex equals the namespace's and attachedNamespaces lists platform namespaces, judged on
/// CREATE and on an UPDATE that changes either (a metadata-only update, the controller's
/// finalizer, passes). On DELETE `object` is null and only the caller is judged.
fn tenant_gateway(cfg: &PolicyConfig) -> PolicyDef {
    let host = lit(HOST_LABEL);
    let side = |o: &str, field: &str, empty: &str| {
        format!(
            "{o} != null && has({o}.spec) && has({o}.spec.{field}) ? {o}.spec.{field} : {empty}"
        )
    };
    let managed = " is managed by the platform: ";
    let variables = vec![
        variable(
            "objectRef",
            "request.kind.kind + ' ' + request.namespace + '/' + request.name".to_string(),
        ),
        variable("trusted", trusted(cfg)),
        variable(
            "apex",
            format!(
                "has(namespaceObject.metadata.labels) && {host} in namespaceObject.metadata.labels\n\
                 \x20 ? namespaceObject.metadata.labels[{host}].lowerAscii()\n\
                 \x20 : ''"
            ),
        ),
        variable("newApex", side("object", "apex", "''")),
        variable("oldApex", side("oldObject", "apex", "''")),
        variable("newAttached", side("object", "attachedNamespaces", "[]")),
        variable("oldAttached", side("oldObject", "attachedNamespaces", "[]")),
        variable(
            "judged",
            "request.operation == 'CREATE' ||\n\
             \x20 (request.operation == 'UPDATE' && (oldObject == null ||\n\
             \x20   variables.oldApex != variables.newApex ||\n\
             \x20   variables.oldAttached != variables.newAttached))"
                .to_string(),
        ),
        variable(
            "badAttached",
            format!(
                "variables.newAttached.filter(n,\n\
                 \x20 n.startsWith({}) || n.size() > 63 || !n.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",
                lit(&cfg.tenant_prefix)
            ),
        ),
    ];
    let trust_tail = format!(
        "TenantGateways in tenant namespaces are rendered by the platform's gateway chart \
         (through Flux), and only trusted platform automation ({}) may create, update or \
         delete them; this request by ",
        trusted_text(cfg)
    );
    let missing_tail = format!(
        " has no {HOST_LABEL} label (or it is empty); a TenantGateway in a tenant namespace \
         must carry that apex, so the request is denied until the label is set. If the \
         namespace is being created, retry in a few seconds."
    );
    let apex_tail = format!(
        "spec.apex must equal the namespace's {HOST_LABEL} label: a TenantGateway publishes \
         only its own tenant's apex ("
    );
    let attached_tail = format!(
        "spec.attachedNamespaces may list only valid platform namespace names, never {}* \
         namespaces (tenants join a Gateway through the platform, tenant.spec.gateway=true): ",
        cfg.tenant_prefix
    );
    PolicyDef {
        name: "tenantgateway-platform-objects",
        rules: vec![rule_for(
            TGW_API_GROUP,
            &["v1alpha1"],
            &["tenantgateways"],
            &["CREATE", "UPDATE", "DELETE"],
        )],
        match_conditions: vec![tenant_scope(cfg)],
        variables,
        validations: vec![
            validation(
                "variables.trusted".to_string(),
                &format!("the TenantGateway{managed}{trust_tail}a tenant would write it"),
                concat(&[
                    "variables.objectRef",
                    &lit(&format!("{managed}{trust_tail}")),
                    BY_USER,
                    "' would ' + request.operation.lowerAscii() + ' it'",
                ]),
            ),
            validation(
                "!variables.judged || variables.apex != ''".to_string(),
                &format!("the namespace{missing_tail}"),
                concat(&[
                    "variables.objectRef + ': namespace ' + request.namespace",
                    &lit(&missing_tail),
                ]),
            ),
            validation(
                "!variables.judged || variables.apex == '' ||\n  \
                 variables.newApex.lowerAscii() == variables.apex"
                    .to_string(),
                &format!("the TenantGateway{managed}{apex_tail}the namespace's apex)"),
                concat(&[
                    "variables.objectRef",
                    &lit(managed),
                    &lit(&apex_tail),
                    "variables.apex + '), got \"' + variables.newApex + '\"'",
                ]),
            ),
            validation(
                "!variables.judged || variables.badAttached.size() == 0".to_string(),
                &format!("the TenantGateway{managed}{attached_tail}"),
                concat(&[
                    "variables.objectRef",
                    &lit(managed),
                    &lit(&attached_tail),
                    &quoted_list("variables.badAttached"),
                ]),
            ),
        ],
        shape_only: false,
    }
}

/// Layer 7 — HTTPRoute / TLSRoute hostnames (`policy::route`). Fails closed on a missing apex
/// even without hostnames: such a route matches every hostname of its listeners.
fn route(cfg: &PolicyConfig) -> PolicyDef {
    let mut variables = apex_variables();
    let ok = format!(
        "{} && {}",
        valid_hostname("h"),
        within("h", "variables.apex")
    );
    variables.push(variable(
        "badHostnames",
        format!(
            "variables.apex == '' || !has(object.spec) || !has(object.spec.hostnames)\n\
             \x20 ? []\n\
             \x20 : object.spec.hostnames.filter(h, !({ok}))"
        ),
    ));
    let rule_text =
        format!("hostnames must equal the namespace's {HOST_LABEL} label or be subdomains of it");
    PolicyDef {
        name: "route-hostnames",
        rules: vec![
            rule(
                "gateway.networking.k8s.io",
                &["v1", "v1beta1"],
                &["httproutes"],
            ),
            rule(
                "gateway.networking.k8s.io",
                &["v1", "v1alpha3", "v1alpha2"],
                &["tlsroutes"],
            ),
            rule("gateway.networking.k8s.io", &["v1"], &["grpcroutes"]),
        ],
        match_conditions: vec![tenant_scope(cfg)],
        variables,
        validations: vec![
            missing_apex("route hostnames"),
            validation(
                "has(object.spec) && has(object.spec.hostnames) && object.spec.hostnames.size() > 0"
                    .to_string(),
                &format!(
                    "a route without hostnames takes every hostname of the listeners it \
                     attaches to; list its hostnames: {rule_text}"
                ),
                concat(&[
                    "variables.objectRef".to_string(),
                    lit(&format!(
                        ": spec.hostnames is empty or absent: a route without hostnames takes \
                         every hostname of the listeners it attaches to, other tenants' \
                         included; list the hostnames it serves: {rule_text} ("
                    )),
                    "variables.apexLabel + ')'".to_string(),
                ]),
            ),
            validation(
                "variables.badHostnames.size() == 0".to_string(),
                &format!("{rule_text}, and must be valid lowercase DNS names"),
                concat(&[
                    format!(
                        "variables.objectRef + ': hostname(s) ' + {}",
                        quoted_list("variables.badHostnames")
                    ),
                    lit(&format!(" not allowed: {rule_text} (")),
                    "variables.apexLabel".into(),
                    lit(HOSTNAME_RULE),
                ]),
            ),
        ],
        shape_only: false,
    }
}

/// Layer 8 — Ingress hostnames (`policy::ingress`), for the platform root `root`
/// (lowercase, valid).
fn ingress(cfg: &PolicyConfig, root: &str) -> PolicyDef {
    // acceptable(h): valid, and within the apex, or an exact name outside the platform root.
    // `indent` lines the continuation up under the expression it is embedded in.
    let acceptable = |h: &str, indent: &str| {
        format!(
            "({valid} &&\n\
             {indent}  ({within_apex} ||\n\
             {indent}   (!{h}.startsWith('*.') && !{within_root})))",
            valid = valid_hostname(h),
            within_apex = within(h, "variables.apex"),
            within_root = within_lit(h, root),
        )
    };
    let mut variables = apex_variables();
    variables.extend([
        variable(
            "rules",
            "has(object.spec) && has(object.spec.rules) ? object.spec.rules : []".to_string(),
        ),
        variable(
            "tls",
            "has(object.spec) && has(object.spec.tls) ? object.spec.tls : []".to_string(),
        ),
        variable(
            "allowed",
            format!(
                "'Ingress hosts must be within the namespace apex ' + variables.apexLabel +\n  \
                 {}",
                lit(&format!(", or outside the platform root {root}"))
            ),
        ),
        // Hosts are judged only with an apex: without one the missing-apex validation denies.
        variable(
            "badRuleHosts",
            format!(
                "variables.apex == ''\n\
                 \x20 ? []\n\
                 \x20 : variables.rules\n\
                 \x20     .filter(r, has(r.host) && r.host != '' &&\n\
                 \x20       !{})\n\
                 \x20     .map(r, r.host)",
                acceptable("r.host", "        ")
            ),
        ),
        // One string per spec.tls entry with bad hosts: CEL before Kubernetes 1.34 has no
        // flatten(), so the nested lists are joined entry by entry.
        variable(
            "badTlsHosts",
            format!(
                "variables.apex == ''\n\
                 \x20 ? []\n\
                 \x20 : variables.tls\n\
                 \x20     .filter(t, has(t.hosts))\n\
                 \x20     .map(t, {})\n\
                 \x20     .filter(s, s != '')",
                quoted_list(&format!(
                    "t.hosts.filter(h,\n        !{})",
                    acceptable("h", "        ")
                ))
            ),
        ),
    ]);
    // ingress-nginx annotations (`policy::ingress`): server-alias entries split on commas
    // and ASCII whitespace, like the webhook; snippets with content are denied.
    let annotation = |key: &str| {
        format!(
            "{k} in variables.annotations ? variables.annotations[{k}] : ''",
            k = lit(key)
        )
    };
    variables.extend([
        variable(
            "annotations",
            "has(object.metadata.annotations) ? object.metadata.annotations : {}".to_string(),
        ),
        variable(
            "aliases",
            format!(
                "({})\n\
                 \x20 .replace(',', ' ').replace('\\t', ' ').replace('\\n', ' ')\n\
                 \x20 .replace('\\r', ' ').replace('\\f', ' ')\n\
                 \x20 .split(' ').filter(h, h != '')",
                annotation(policy::ingress::SERVER_ALIAS)
            ),
        ),
        variable(
            "badAliases",
            format!(
                "variables.apex == ''\n\
                 \x20 ? []\n\
                 \x20 : variables.aliases.filter(h,\n\
                 \x20     !{})",
                acceptable("h", "      ")
            ),
        ),
        variable(
            "snippets",
            format!(
                "{}.filter(k,\n\
                 \x20 k in variables.annotations && variables.annotations[k].trim() != '')",
                list_lit(&[
                    policy::ingress::SERVER_SNIPPET.to_string(),
                    policy::ingress::CONFIGURATION_SNIPPET.to_string(),
                ])
            ),
        ),
    ]);
    let host_rule = "; wildcard hosts are only allowed within the namespace apex, and every host \
                     must be a valid lowercase DNS name";
    PolicyDef {
        name: "ingress-hostnames",
        rules: vec![rule(
            "networking.k8s.io",
            &["v1"],
            &["ingresses", "ingresses/status"],
        )],
        match_conditions: vec![tenant_scope(cfg), status_changes_annotations()],
        variables,
        validations: vec![
            missing_apex("Ingress hosts"),
            validation(
                "variables.snippets.size() == 0".to_string(),
                "the ingress-nginx snippet annotations are not allowed in tenant namespaces: a \
                 snippet is raw nginx configuration and can set any server_name",
                concat(&[
                    "variables.objectRef + ': annotation ' + variables.snippets.join(', ')",
                    "' is not allowed in tenant namespaces: a snippet is raw nginx configuration \
                     for the shared ingress controller and can set any server_name; remove it \
                     and publish hosts with spec.rules[].host ('",
                    "variables.allowed + ')'",
                ]),
            ),
            validation(
                "variables.badAliases.size() == 0".to_string(),
                "nginx.ingress.kubernetes.io/server-alias entries must be within the namespace \
                 apex, or outside the platform root",
                concat(&[
                    format!(
                        "variables.objectRef + {} + {}",
                        lit(&format!(
                            ": annotation {} entries ",
                            policy::ingress::SERVER_ALIAS
                        )),
                        quoted_list("variables.badAliases")
                    ),
                    "' not allowed: ' + variables.allowed".to_string(),
                    lit(host_rule),
                ]),
            ),
            validation(
                "!has(object.spec) || !has(object.spec.defaultBackend)".to_string(),
                "spec.defaultBackend is not allowed in tenant namespaces: it catches traffic for \
                 every hostname no rule matches; route with spec.rules[].host instead",
                concat(&[
                    "variables.objectRef",
                    "': spec.defaultBackend is not allowed in tenant namespaces: it catches \
                     traffic for every hostname no rule matches; route with spec.rules[].host \
                     instead ('",
                    "variables.allowed + ')'",
                ]),
            ),
            validation(
                "variables.rules.all(r, has(r.host) && r.host != '')".to_string(),
                "every Ingress rule in a tenant namespace must carry a host: a rule without a \
                 host catches every hostname",
                concat(&[
                    "variables.objectRef + ': '",
                    "string(variables.rules.filter(r, !has(r.host) || r.host == '').size())",
                    "' of spec.rules have no host: a rule without a host catches every hostname; \
                     every rule must carry a host ('",
                    "variables.allowed + ')'",
                ]),
            ),
            validation(
                "variables.badRuleHosts.size() == 0".to_string(),
                "Ingress hosts in spec.rules must be within the namespace apex, or outside the \
                 platform root",
                concat(&[
                    "variables.objectRef + ': spec.rules[].host '".to_string(),
                    quoted_list("variables.badRuleHosts"),
                    "' not allowed: ' + variables.allowed".to_string(),
                    lit(host_rule),
                ]),
            ),
            validation(
                "variables.badTlsHosts.size() == 0".to_string(),
                "Ingress hosts in spec.tls must be within the namespace apex, or outside the \
                 platform root",
                concat(&[
                    "variables.objectRef + ': spec.tls[].hosts '".to_string(),
                    "variables.badTlsHosts.join(', ')".to_string(),
                    "' not allowed: ' + variables.allowed".to_string(),
                    lit(host_rule),
                ]),
            ),
        ],
        shape_only: false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The documents as kubectl reads them; the header comment is no document.
    fn docs(yaml: &str) -> Vec<Value> {
        crate::yaml::read_documents(yaml)
            .into_iter()
            .map(|d| d.value.expect("valid YAML document"))
            .collect()
    }

    fn render_docs(cfg: &PolicyConfig) -> Vec<Value> {
        docs(&render(cfg).expect("renders"))
    }

    fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
    }

    fn names(docs: &[Value], kind: &str) -> Vec<String> {
        docs.iter()
            .filter(|d| d["kind"] == kind)
            .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_string))
            .collect()
    }

    fn strings(v: &Value) -> Vec<&str> {
        v.as_array()
            .expect("a list")
            .iter()
            .map(|s| s.as_str().expect("a string"))
            .collect()
    }

    /// Every CEL expression of a policy (variables, conditions, validations, messages).
    fn expressions(policy: &Value) -> Vec<String> {
        let spec = &policy["spec"];
        let mut out = Vec::new();
        for key in ["variables", "matchConditions", "validations"] {
            for item in spec[key].as_array().into_iter().flatten() {
                for field in ["expression", "messageExpression"] {
                    if let Some(e) = item[field].as_str() {
                        out.push(e.to_string());
                    }
                }
            }
        }
        out
    }

    fn with_modes(modes: &[(Layer, Mode)]) -> PolicyConfig {
        let mut cfg = committed_config();
        for (l, m) in modes {
            cfg.enforcement.set(*l, *m);
        }
        cfg
    }

    const ALL_POLICIES: [&str; 9] = [
        "tenant-gateway-gateway-hostnames",
        "tenant-gateway-package-attached-namespaces-shape",
        "tenant-gateway-package-attached-namespaces",
        "tenant-gateway-tenant-host-shape",
        "tenant-gateway-tenant-host",
        "tenant-gateway-namespace-guarded-labels",
        "tenant-gateway-route-hostnames",
        "tenant-gateway-ingress-hostnames",
        "tenant-gateway-tenantgateway-platform-objects",
    ];

    #[test]
    fn render_is_deterministic() {
        let cfg = committed_config();
        let a = render(&cfg).expect("renders");
        let b = render(&cfg).expect("renders");
        assert_eq!(a, b);
        assert!(a.starts_with("# Generated by `tenant-gateway policies`"));
        // No trailing whitespace: it would force quoted instead of block scalars.
        for (i, line) in a.lines().enumerate() {
            assert_eq!(
                line,
                line.trim_end(),
                "line {} has trailing whitespace",
                i + 1
            );
        }
    }

    #[test]
    fn every_layer_present_with_binding() {
        let d = render_docs(&committed_config());
        assert_eq!(names(&d, "ValidatingAdmissionPolicy"), ALL_POLICIES);
        assert_eq!(names(&d, "ValidatingAdmissionPolicyBinding"), ALL_POLICIES);
        for name in ALL_POLICIES {
            let p = find(&d, "ValidatingAdmissionPolicy", name).expect("policy");
            let b = find(&d, "ValidatingAdmissionPolicyBinding", name).expect("binding");
            assert_eq!(p["apiVersion"], "admissionregistration.k8s.io/v1");
            assert_eq!(b["apiVersion"], "admissionregistration.k8s.io/v1");
            assert_eq!(p["spec"]["failurePolicy"], "Fail", "{name}");
            assert_eq!(
                p["spec"]["matchConstraints"]["matchPolicy"], "Equivalent",
                "{name}"
            );
            assert_eq!(b["spec"]["policyName"], name);
            assert_eq!(strings(&b["spec"]["validationActions"]), ["Deny"]);
            for obj in [p, b] {
                assert_eq!(
                    obj["metadata"]["labels"][MANAGED_BY_LABEL], MANAGED_BY_VALUE,
                    "{name}"
                );
                assert!(obj["metadata"]["labels"][LAYER_LABEL].is_string());
            }
            for v in p["spec"]["validations"].as_array().expect("validations") {
                assert_eq!(v["reason"], "Forbidden", "{name}");
                assert!(v["message"].as_str().is_some_and(|m| !m.contains('\n')));
                assert!(v["messageExpression"].is_string());
            }
        }
    }

    #[test]
    fn resources_versions_and_operations() {
        let d = render_docs(&committed_config());
        // (group, versions, resources) of one resource rule.
        type Rule<'a> = (&'a str, Vec<&'a str>, Vec<&'a str>);
        let want: Vec<(&str, Vec<Rule>)> = vec![
            (
                "tenant-gateway-gateway-hostnames",
                vec![
                    (
                        "gateway.networking.k8s.io",
                        vec!["v1", "v1beta1"],
                        vec!["gateways"],
                    ),
                    (
                        "gateway.networking.k8s.io",
                        vec!["v1"],
                        vec!["listenersets"],
                    ),
                    (
                        "gateway.networking.x-k8s.io",
                        vec!["v1alpha1"],
                        vec!["xlistenersets"],
                    ),
                ],
            ),
            (
                "tenant-gateway-package-attached-namespaces",
                vec![("cozystack.io", vec!["v1alpha1"], vec!["packages"])],
            ),
            (
                "tenant-gateway-package-attached-namespaces-shape",
                vec![("cozystack.io", vec!["v1alpha1"], vec!["packages"])],
            ),
            (
                "tenant-gateway-tenant-host",
                vec![(
                    "apps.cozystack.io",
                    vec!["v1alpha1"],
                    vec!["tenants", "tenants/status"],
                )],
            ),
            (
                "tenant-gateway-tenant-host-shape",
                vec![("apps.cozystack.io", vec!["v1alpha1"], vec!["tenants"])],
            ),
            (
                "tenant-gateway-namespace-guarded-labels",
                vec![(
                    "",
                    vec!["v1"],
                    vec!["namespaces", "namespaces/status", "namespaces/finalize"],
                )],
            ),
            (
                "tenant-gateway-route-hostnames",
                vec![
                    (
                        "gateway.networking.k8s.io",
                        vec!["v1", "v1beta1"],
                        vec!["httproutes"],
                    ),
                    (
                        "gateway.networking.k8s.io",
                        vec!["v1", "v1alpha3", "v1alpha2"],
                        vec!["tlsroutes"],
                    ),
                    ("gateway.networking.k8s.io", vec!["v1"], vec!["grpcroutes"]),
                ],
            ),
            (
                "tenant-gateway-ingress-hostnames",
                vec![(
                    "networking.k8s.io",
                    vec!["v1"],
                    vec!["ingresses", "ingresses/status"],
                )],
            ),
            (
                "tenant-gateway-tenantgateway-platform-objects",
                vec![(
                    "gateway.cozystack.io",
                    vec!["v1alpha1"],
                    vec!["tenantgateways"],
                )],
            ),
        ];
        for (name, rules) in want {
            let p = find(&d, "ValidatingAdmissionPolicy", name).expect("policy");
            let got = p["spec"]["matchConstraints"]["resourceRules"]
                .as_array()
                .expect("rules");
            assert_eq!(got.len(), rules.len(), "{name}");
            for (g, (group, versions, resources)) in got.iter().zip(rules) {
                assert_eq!(strings(&g["apiGroups"]), [group], "{name}");
                assert_eq!(strings(&g["apiVersions"]), versions, "{name}");
                assert_eq!(strings(&g["resources"]), resources, "{name}");
                // Deleting a TenantGateway gives up what it claimed (layer 9); nothing
                // else is judged on DELETE.
                let ops: &[&str] = if name.ends_with("-tenantgateway-platform-objects") {
                    &["CREATE", "UPDATE", "DELETE"]
                } else {
                    &["CREATE", "UPDATE"]
                };
                assert_eq!(strings(&g["operations"]), ops, "{name}");
                // Subresources are matched only where the API server keeps metadata changes.
                assert!(resources.iter().all(|r| {
                    !r.contains('/')
                        || [
                            "namespaces/status",
                            "namespaces/finalize",
                            "ingresses/status",
                            "tenants/status",
                        ]
                        .contains(r)
                }));
            }
        }
    }

    #[test]
    fn tenant_scope_only_on_hostname_layers() {
        let d = render_docs(&committed_config());
        for name in ALL_POLICIES {
            let p = find(&d, "ValidatingAdmissionPolicy", name).expect("policy");
            let scoped =
                name.ends_with("-hostnames") || name.ends_with("-tenantgateway-platform-objects");
            let conds = &p["spec"]["matchConditions"];
            if scoped {
                assert_eq!(
                    conds[0]["expression"], "request.namespace.startsWith('tenant-')",
                    "{name}"
                );
            } else {
                assert!(conds.is_null(), "{name}");
            }
        }
        let cfg = PolicyConfig {
            tenant_prefix: "t-'x".to_string(),
            ..committed_config()
        };
        let d = render_docs(&cfg);
        let p = find(
            &d,
            "ValidatingAdmissionPolicy",
            "tenant-gateway-route-hostnames",
        )
        .expect("policy");
        assert_eq!(
            p["spec"]["matchConditions"][0]["expression"],
            r"request.namespace.startsWith('t-\'x')"
        );
    }

    #[test]
    fn modes_map_to_validation_actions() {
        for (mode, action) in [
            (Mode::Deny, "Deny"),
            (Mode::Warn, "Warn"),
            (Mode::Audit, "Audit"),
        ] {
            let modes: Vec<(Layer, Mode)> = Layer::ALL.iter().map(|l| (*l, mode)).collect();
            let d = render_docs(&with_modes(&modes));
            for name in ALL_POLICIES {
                let b = find(&d, "ValidatingAdmissionPolicyBinding", name).expect("binding");
                // Malformed objects are denied in every mode, as the webhook does.
                let want = if name.ends_with("-shape") {
                    "Deny"
                } else {
                    action
                };
                assert_eq!(strings(&b["spec"]["validationActions"]), [want], "{name}");
            }
        }
        let d = render_docs(&with_modes(&[(Layer::Route, Mode::Warn)]));
        let b = find(
            &d,
            "ValidatingAdmissionPolicyBinding",
            "tenant-gateway-route-hostnames",
        )
        .expect("binding");
        assert_eq!(strings(&b["spec"]["validationActions"]), ["Warn"]);
        let b = find(
            &d,
            "ValidatingAdmissionPolicyBinding",
            "tenant-gateway-gateway-hostnames",
        )
        .expect("binding");
        assert_eq!(strings(&b["spec"]["validationActions"]), ["Deny"]);
    }

    #[test]
    fn layer_off_is_omitted() {
        for layer in Layer::ALL {
            let d = render_docs(&with_modes(&[(layer, Mode::Off)]));
            for doc in &d {
                assert_ne!(doc["metadata"]["labels"][LAYER_LABEL], layer.as_str());
            }
            let policies = names(&d, "ValidatingAdmissionPolicy");
            let bindings = names(&d, "ValidatingAdmissionPolicyBinding");
            assert_eq!(policies, bindings);
            let expected = match layer {
                Layer::Package | Layer::Tenant => ALL_POLICIES.len() - 2,
                _ => ALL_POLICIES.len() - 1,
            };
            assert_eq!(policies.len(), expected, "{layer}");
        }
        let all_off: Vec<(Layer, Mode)> = Layer::ALL.iter().map(|l| (*l, Mode::Off)).collect();
        assert!(render_docs(&with_modes(&all_off)).is_empty());
    }

    #[test]
    fn no_root_host_no_ingress_policy() {
        let cfg = PolicyConfig::default();
        let d = render_docs(&cfg);
        let policies = names(&d, "ValidatingAdmissionPolicy");
        assert!(
            !policies.iter().any(|n| n.contains("ingress")),
            "{policies:?}"
        );
        assert_eq!(policies.len(), ALL_POLICIES.len() - 1);
        assert!(
            render(&cfg)
                .expect("renders")
                .contains("layer 8, is omitted")
        );
    }

    #[test]
    fn root_host_is_checked_and_lowercased() {
        let cfg = PolicyConfig {
            root_host: Some("Example.ORG".to_string()),
            ..PolicyConfig::default()
        };
        let d = render_docs(&cfg);
        let p = find(
            &d,
            "ValidatingAdmissionPolicy",
            "tenant-gateway-ingress-hostnames",
        )
        .expect("policy");
        let all = expressions(p).join("\n");
        assert!(all.contains("'example.org'"), "{all}");
        assert!(!all.contains("Example.ORG"));
        for bad in ["", "*.example.org", "exa mple.org", "example.org'", "a..b"] {
            let cfg = PolicyConfig {
                root_host: Some(bad.to_string()),
                ..PolicyConfig::default()
            };
            assert!(
                matches!(render(&cfg), Err(PoliciesError::InvalidRootHost { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn messages_keep_the_webhook_key_phrases() {
        let d = render_docs(&committed_config());
        let phrases = [
            (
                "tenant-gateway-gateway-hostnames",
                "or end with .' + variables.apexLabel",
            ),
            (
                "tenant-gateway-gateway-hostnames",
                "listener hostnames must equal ' + variables.apexLabel",
            ),
            (
                "tenant-gateway-route-hostnames",
                r"hostnames must equal the namespace\'s namespace.cozystack.io/host label or be subdomains of it",
            ),
            ("tenant-gateway-ingress-hostnames", "must be within"),
            (
                "tenant-gateway-tenant-host",
                "spec.host can only be set or changed by",
            ),
            (
                "tenant-gateway-namespace-guarded-labels",
                "is immutable once set",
            ),
            (
                "tenant-gateway-package-attached-namespaces",
                "must not contain tenant-*",
            ),
            ("tenant-gateway-gateway-hostnames", "retry in a few seconds"),
            (
                "tenant-gateway-route-hostnames",
                "has no namespace.cozystack.io/host label",
            ),
            (
                "tenant-gateway-ingress-hostnames",
                "has no namespace.cozystack.io/host label",
            ),
        ];
        for (name, phrase) in phrases {
            let p = find(&d, "ValidatingAdmissionPolicy", name).expect("policy");
            let all = expressions(p).join("\n");
            assert!(all.contains(phrase), "{name} lacks {phrase:?}");
        }
    }

    #[test]
    fn configuration_reaches_the_expressions() {
        let cfg = PolicyConfig {
            trusted_groups: vec!["ops".to_string(), "it's".to_string()],
            guarded_labels: vec!["a/b".to_string(), "a/b".to_string(), "c".to_string()],
            ..committed_config()
        };
        let d = render_docs(&cfg);
        let ns = find(
            &d,
            "ValidatingAdmissionPolicy",
            "tenant-gateway-namespace-guarded-labels",
        )
        .expect("policy");
        let all = expressions(ns).join("\n");
        assert!(all.contains("['a/b', 'c'].filter("), "{all}");
        assert!(all.contains(r"g in ['ops', 'it\'s']"), "{all}");
        let t = find(
            &d,
            "ValidatingAdmissionPolicy",
            "tenant-gateway-tenant-host",
        )
        .expect("policy");
        assert!(expressions(t).join("\n").contains("groups: ops, it"));
        let empty = PolicyConfig {
            trusted_groups: Vec::new(),
            ..committed_config()
        };
        let d = render_docs(&empty);
        let t = find(
            &d,
            "ValidatingAdmissionPolicy",
            "tenant-gateway-tenant-host",
        )
        .expect("policy");
        let all = expressions(t).join("\n");
        assert!(all.contains("g in []") && all.contains("no trusted groups are configured"));
    }

    #[test]
    fn cel_literals_escape() {
        assert_eq!(lit("tenant-"), "'tenant-'");
        assert_eq!(lit(r"a'b\c"), r"'a\'b\\c'");
        assert_eq!(lit("a\nb\u{1}"), r"'a\nb\u0001'");
        assert_eq!(list_lit(&["x".to_string(), "y".to_string()]), "['x', 'y']");
        assert_eq!(list_lit(&[]), "[]");
    }

    #[test]
    fn hostname_regex_agrees_with_hostname_validate() {
        // The CEL regex runs in the API server; here we only check that it is written the way
        // the validator behaves, on the edges hostname.rs names, via a tiny hand matcher of
        // the same grammar: split on dots, optional "*" first label, DNS-1123 labels.
        fn grammar(h: &str) -> bool {
            let mut labels: Vec<&str> = h.split('.').collect();
            if labels.len() > 1 && labels[0] == "*" {
                labels.remove(0);
            }
            h.len() <= 253
                && labels.iter().all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                })
        }
        let long = format!("{}.org", "a".repeat(64));
        let cases = [
            "example.org",
            "*.example.org",
            "*",
            "*.",
            "",
            "a..b",
            ".a",
            "a.",
            "A.org",
            "a_b.org",
            "foo.*.org",
            "*.*.org",
            "-a.org",
            "a-.org",
            "xn--80ak6aa92e.com",
            &long,
            "\u{430}.org",
            "a b.org",
        ];
        for h in cases {
            assert_eq!(grammar(h), hostname::validate(h).is_ok(), "{h:?}");
        }
        assert!(HOSTNAME_RE.contains("{0,61}"));
    }

    #[test]
    fn typed_objects_round_trip() {
        let yaml = render(&committed_config()).expect("renders");
        let mut n = 0;
        for v in docs(&yaml) {
            match v["kind"].as_str() {
                Some("ValidatingAdmissionPolicy") => {
                    let _: ValidatingAdmissionPolicy =
                        serde_json::from_value(v).expect("typed policy");
                }
                Some("ValidatingAdmissionPolicyBinding") => {
                    let _: ValidatingAdmissionPolicyBinding =
                        serde_json::from_value(v).expect("typed binding");
                }
                other => panic!("unexpected kind {other:?}"),
            }
            n += 1;
        }
        assert_eq!(n, 2 * ALL_POLICIES.len());
    }
}
