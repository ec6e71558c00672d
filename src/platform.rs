//! Names shared with the Cozystack platform (SPEC §0, §3): label and annotation keys, the
//! controller identity, and the tenant/system namespace scope.
//!
//! A leaf: it imports nothing from this crate, so `policy/`, `cluster/` and `reconcile/` can
//! all depend on it without depending on each other. These strings are an interface with the
//! platform's charts and controllers; changing one breaks interoperability.

use std::collections::BTreeMap;

/// Namespace label holding the tenant's apex domain (written by trusted platform automation).
pub const HOST_LABEL: &str = "namespace.cozystack.io/host";
/// Namespace label naming the namespace whose Gateway this namespace publishes through.
pub const GATEWAY_LABEL: &str = "namespace.cozystack.io/gateway";
/// Namespace label naming the namespace whose ingress controller this namespace uses.
pub const INGRESS_LABEL: &str = "namespace.cozystack.io/ingress";
/// Label written by the API server on every namespace; it cannot be forged, so listener
/// `allowedRoutes` selectors key on it (layer 1).
pub const METADATA_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Label on every object the reconciler renders.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY_VALUE: &str = "tenant-gateway";
/// Annotation marking a namespace label the reconciler wrote: its value is the namespace of
/// the TenantGateway that wrote it. Only marked labels are ever removed.
pub const ATTACHED_BY_ANNOTATION: &str = "gateway.cozystack.io/attached-by";
/// The platform's own TenantGateway controller (SPEC §3.8): the annotation it writes on the
/// namespaces it labels, the equivalent of [`ATTACHED_BY_ANNOTATION`] (its value is the
/// TenantGateway's namespace too). Read as ours and replaced by ours; never written.
pub const PLATFORM_ATTACHED_BY_ANNOTATION: &str = "cozystack.io/gateway-attached-by";
/// The labels the platform's controller writes on the objects it renders (SPEC §3.8). On an
/// object the TenantGateway owns they are the only labels besides ours the reconciler removes.
pub const PLATFORM_OBJECT_LABELS: [&str; 4] = [
    "cozystack.io/gateway",
    "cozystack.io/managed-by",
    "cozystack.io/tenantgateway",
    "cozystack.io/per-listener-cert",
];
/// Label on wildcard Secret replicas (SPEC §3.6).
pub const WILDCARD_COPY_LABEL: &str = "gateway.cozystack.io/wildcard-copy";
/// Annotation on wildcard Secret replicas: `namespace/name` of the Secret they copy.
pub const WILDCARD_SOURCE_ANNOTATION: &str = "gateway.cozystack.io/wildcard-source";

/// `controllerName` of our route status entries.
pub const CONTROLLER_NAME: &str = "gateway.cozystack.io/tenantgateway-controller";
/// The one server-side apply field manager of every reconciler write.
pub const FIELD_MANAGER: &str = "tenant-gateway";
/// Finalizer that lets the reconciler remove what it wrote outside owned objects.
pub const FINALIZER: &str = "gateway.cozystack.io/cleanup";

/// Namespace whose ACME HTTP-01 challenge routes may bind to port 80.
pub const CERT_MANAGER_NAMESPACE: &str = "cozy-cert-manager";

/// Gateway API group (routes' parentRef default, allowedRoutes kinds).
pub const GATEWAY_API_GROUP: &str = "gateway.networking.k8s.io";
/// The TenantGateway API group.
pub const TGW_API_GROUP: &str = "gateway.cozystack.io";
/// The TenantGateway API group and version.
pub const TGW_API_VERSION: &str = "gateway.cozystack.io/v1alpha1";
/// Kind of the TenantGateway.
pub const TGW_KIND: &str = "TenantGateway";

/// Which namespaces are tenants' and which are the platform's (SPEC §2.2, `--tenant-prefix`,
/// `--system-prefix`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub tenant_prefix: String,
    pub system_prefix: String,
}

impl Default for Scope {
    fn default() -> Self {
        Scope {
            tenant_prefix: "tenant-".to_string(),
            system_prefix: "cozy-".to_string(),
        }
    }
}

impl Scope {
    /// Tenant namespaces: checked by layers 2, 7, 8; never attached by name.
    pub fn is_tenant(&self, namespace: &str) -> bool {
        namespace.starts_with(&self.tenant_prefix)
    }

    /// Platform namespaces: they win hostname conflicts (SPEC §3.3).
    pub fn is_system(&self, namespace: &str) -> bool {
        !self.system_prefix.is_empty() && namespace.starts_with(&self.system_prefix)
    }
}

/// Where a dns01/existingSecret TenantGateway's TLS-passthrough listeners go (SPEC §3.10,
/// `--passthrough-gateway`, chart value `controller.passthroughGateway`). Its wildcard
/// listener `*.<apex>` covers every passthrough hostname `<svc>.<apex>`, and data planes that
/// refuse an HTTPS-terminate and a TLS-passthrough listener with intersecting hostnames on one
/// port (Cilium from 1.19.6) accept neither on one Gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PassthroughGateway {
    /// One Gateway, as the platform's controller renders it (the drop-in's layout).
    #[default]
    Shared,
    /// The passthrough listeners on a second Gateway `<name>-passthrough`.
    Separate,
}

impl PassthroughGateway {
    /// The flag's value as written.
    pub fn as_str(self) -> &'static str {
        match self {
            PassthroughGateway::Shared => "shared",
            PassthroughGateway::Separate => "separate",
        }
    }
}

/// The apex a namespace's labels carry: [`HOST_LABEL`], absent when missing or empty (an empty
/// apex must never mean "everything").
pub fn apex_label(labels: &BTreeMap<String, String>) -> Option<&str> {
    labels
        .get(HOST_LABEL)
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// What is known about the object's namespace.
///
/// The answer of a namespace lookup for the admission layers, not a namespace's metadata: the
/// namespace index's entry is `cluster::nsmeta::NamespaceMeta`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceContext {
    /// The namespace does not exist (after the index miss and the live GET).
    NotFound,
    /// The namespace exists with these labels.
    Found { labels: BTreeMap<String, String> },
}

impl NamespaceContext {
    /// The context for a namespace with `labels`, keeping only what is read (the host label
    /// for the layers, the gateway label for the route-index warnings, which judge a tenant
    /// route only on Gateways it may attach to): a lookup is on every review's path, and
    /// copying a namespace's whole label set per review was most of its cost.
    pub fn found(labels: &BTreeMap<String, String>) -> NamespaceContext {
        let labels = [HOST_LABEL, GATEWAY_LABEL]
            .into_iter()
            .filter_map(|key| labels.get_key_value(key))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        NamespaceContext::Found { labels }
    }

    /// The tenant apex: the host label, when present and non-empty.
    pub fn apex(&self) -> Option<&str> {
        match self {
            NamespaceContext::NotFound => None,
            NamespaceContext::Found { labels } => apex_label(labels),
        }
    }
}

/// Which apexes other namespaces carry (the namespace index's apex → namespaces lookup),
/// for layer 8's custom-domain branch. A lookup per host suffix, never a scan.
pub trait ApexOwners {
    /// True when a namespace other than `except` has `apex` (lowercase) as its
    /// `namespace.cozystack.io/host` label value (compared lowercased).
    fn owned_by_other(&self, apex: &str, except: &str) -> bool;

    /// The apex (lowercase) of `namespace`, when it has a non-empty host label. Route
    /// conflict warnings read it (SPEC §3.3: the most specific apex owner wins); an index that
    /// keeps no names answers `None`.
    fn apex_of(&self, _namespace: &str) -> Option<String> {
        None
    }

    /// A number that changes whenever [`Self::apex_of`] may answer differently for some
    /// namespace, so what was derived from its answers can tell it is stale; an index whose
    /// apexes never change answers 0.
    fn generation(&self) -> u64 {
        0
    }

    /// False while the index may lack some namespace's apex (a live index before its first
    /// list is in): a "nobody else owns it" answer is then not to be trusted, and what only
    /// that answer would admit is denied with a retry (SPEC §9: fail closed).
    fn complete(&self) -> bool {
        true
    }
}

/// No other namespace carries any apex (tests, fuzzing, callers without an index).
pub struct NoApexOwners;

impl ApexOwners for NoApexOwners {
    fn owned_by_other(&self, _apex: &str, _except: &str) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_prefixes() {
        let s = Scope::default();
        assert!(s.is_tenant("tenant-alice"));
        assert!(!s.is_tenant("cozy-harbor"));
        assert!(s.is_system("cozy-harbor"));
        assert!(!s.is_system("tenant-cozy"));
        let none = Scope {
            tenant_prefix: "tenant-".into(),
            system_prefix: String::new(),
        };
        assert!(
            !none.is_system("anything"),
            "an empty prefix grants nothing"
        );
    }

    #[test]
    fn apex_label_ignores_empty() {
        let mut labels = BTreeMap::new();
        assert_eq!(apex_label(&labels), None);
        labels.insert(HOST_LABEL.to_string(), String::new());
        assert_eq!(apex_label(&labels), None);
        labels.insert(HOST_LABEL.to_string(), "alice.example.org".into());
        assert_eq!(apex_label(&labels), Some("alice.example.org"));
    }
}
