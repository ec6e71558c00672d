//! The kinds the audit judges (SPEC §3.9): each stored object of a guarded kind, judged by the
//! layer admission runs for it, and the fields that layer reads (what a projection keeps).

use crate::platform::{GATEWAY_API_GROUP, TGW_API_GROUP};
use crate::policy::Layer;

/// The experimental group where ListenerSet lived as XListenerSet.
const GATEWAY_API_X: &str = "gateway.networking.x-k8s.io";

/// A path of object keys; arrays are transparent (`["spec", "rules", "host"]` is the `host` of
/// every rule). A path ends at the value kept whole.
pub type Path = &'static [&'static str];

/// A kind whose stored objects are judged. Namespaces are judged too, by the apex table
/// (`apex_table`), and Tenants not at all: layers 4 and 5 judge who writes, not what is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GuardedKind {
    Gateway,
    ListenerSet,
    XListenerSet,
    HttpRoute,
    TlsRoute,
    GrpcRoute,
    Ingress,
    Package,
    TenantGateway,
}

impl GuardedKind {
    pub const ALL: [GuardedKind; 9] = [
        GuardedKind::Gateway,
        GuardedKind::ListenerSet,
        GuardedKind::XListenerSet,
        GuardedKind::HttpRoute,
        GuardedKind::TlsRoute,
        GuardedKind::GrpcRoute,
        GuardedKind::Ingress,
        GuardedKind::Package,
        GuardedKind::TenantGateway,
    ];

    pub fn kind(self) -> &'static str {
        match self {
            GuardedKind::Gateway => "Gateway",
            GuardedKind::ListenerSet => "ListenerSet",
            GuardedKind::XListenerSet => "XListenerSet",
            GuardedKind::HttpRoute => "HTTPRoute",
            GuardedKind::TlsRoute => "TLSRoute",
            GuardedKind::GrpcRoute => "GRPCRoute",
            GuardedKind::Ingress => "Ingress",
            GuardedKind::Package => "Package",
            GuardedKind::TenantGateway => "TenantGateway",
        }
    }

    pub fn group(self) -> &'static str {
        match self {
            GuardedKind::Gateway
            | GuardedKind::ListenerSet
            | GuardedKind::HttpRoute
            | GuardedKind::TlsRoute
            | GuardedKind::GrpcRoute => GATEWAY_API_GROUP,
            GuardedKind::XListenerSet => GATEWAY_API_X,
            GuardedKind::Ingress => "networking.k8s.io",
            GuardedKind::Package => "cozystack.io",
            GuardedKind::TenantGateway => TGW_API_GROUP,
        }
    }

    /// The version an object of this kind is named by when no served version is known.
    pub fn default_version(self) -> &'static str {
        match self {
            GuardedKind::XListenerSet | GuardedKind::TenantGateway | GuardedKind::Package => {
                "v1alpha1"
            }
            GuardedKind::TlsRoute => "v1alpha2",
            _ => "v1",
        }
    }

    /// The layer admission runs for this kind.
    pub fn layer(self) -> Layer {
        match self {
            GuardedKind::Gateway | GuardedKind::ListenerSet | GuardedKind::XListenerSet => {
                Layer::Gateway
            }
            GuardedKind::HttpRoute | GuardedKind::TlsRoute | GuardedKind::GrpcRoute => Layer::Route,
            GuardedKind::Ingress => Layer::Ingress,
            GuardedKind::Package => Layer::Package,
            GuardedKind::TenantGateway => Layer::TenantGateway,
        }
    }

    /// Packages are cluster-scoped; every other guarded kind lives in a namespace.
    pub fn namespaced(self) -> bool {
        self != GuardedKind::Package
    }

    /// True when the verdict depends on the namespace's apex (layers 2, 7, 8, 9 in tenant
    /// scope): such objects are judged again when their namespace's apex changes.
    pub fn reads_apex(self) -> bool {
        self.layer().tenant_scoped()
    }

    /// The kind of `apiVersion`'s group and `kind`, when it is guarded.
    pub fn of(api_version: &str, kind: &str) -> Option<GuardedKind> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        GuardedKind::ALL
            .into_iter()
            .find(|k| k.group() == group && k.kind() == kind)
    }

    /// The fields the layer reads (see `crate::policy`); the projection keeps exactly these.
    /// `metadata.name` and `metadata.namespace` are not among them: the object's key carries
    /// them.
    pub fn paths(self) -> &'static [Path] {
        const GATEWAY: &[Path] = &[
            &["spec", "listeners", "name"],
            &["spec", "listeners", "hostname"],
        ];
        const ROUTE: &[Path] = &[&["spec", "hostnames"]];
        const INGRESS: &[Path] = &[
            &[
                "metadata",
                "annotations",
                crate::policy::ingress::ANNOTATIONS[0],
            ],
            &[
                "metadata",
                "annotations",
                crate::policy::ingress::ANNOTATIONS[1],
            ],
            &[
                "metadata",
                "annotations",
                crate::policy::ingress::ANNOTATIONS[2],
            ],
            &["spec", "defaultBackend"],
            &["spec", "rules", "host"],
            &["spec", "tls", "hosts"],
        ];
        const PACKAGE: &[Path] = &[&crate::policy::package::PATH];
        const TENANT_GATEWAY: &[Path] = &[&["spec", "apex"], &["spec", "attachedNamespaces"]];
        match self.layer() {
            Layer::Gateway => GATEWAY,
            Layer::Route => ROUTE,
            Layer::Ingress => INGRESS,
            Layer::Package => PACKAGE,
            Layer::TenantGateway => TENANT_GATEWAY,
            // No guarded kind is judged by these layers (see the type's doc).
            Layer::Tenant | Layer::Namespace => &[],
        }
    }
}

impl std::fmt::Display for GuardedKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

/// The rule each audited layer reports under (a PolicyReport result's `rule`): one per
/// layer, named for what it requires.
pub fn rule_of(layer: Layer) -> &'static str {
    match layer {
        Layer::Gateway => "listener-hostnames-within-apex",
        Layer::Route => "route-hostnames-within-apex",
        Layer::Ingress => "ingress-hosts-within-apex",
        Layer::Package => "attached-namespaces-outside-tenants",
        Layer::TenantGateway => "tenantgateway-matches-namespace",
        // The apex table (layers 4 and 5 judge writes; what they leave behind is the table).
        Layer::Namespace | Layer::Tenant => "namespace-apex",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_found_by_group_and_kind_whatever_the_version() {
        let cases = [
            (
                "gateway.networking.k8s.io/v1beta1",
                "Gateway",
                Some(GuardedKind::Gateway),
            ),
            (
                "gateway.networking.k8s.io/v1",
                "ListenerSet",
                Some(GuardedKind::ListenerSet),
            ),
            (
                "gateway.networking.x-k8s.io/v1alpha1",
                "XListenerSet",
                Some(GuardedKind::XListenerSet),
            ),
            (
                "gateway.networking.k8s.io/v1alpha3",
                "TLSRoute",
                Some(GuardedKind::TlsRoute),
            ),
            (
                "networking.k8s.io/v1",
                "Ingress",
                Some(GuardedKind::Ingress),
            ),
            (
                "cozystack.io/v1alpha1",
                "Package",
                Some(GuardedKind::Package),
            ),
            (
                "gateway.cozystack.io/v1alpha1",
                "TenantGateway",
                Some(GuardedKind::TenantGateway),
            ),
            // Same kind name, another group: not ours.
            ("example.com/v1", "Gateway", None),
            ("v1", "Namespace", None),
            ("apps.cozystack.io/v1alpha1", "Tenant", None),
            ("gateway.networking.x-k8s.io/v1alpha1", "ListenerSet", None),
        ];
        for (api_version, kind, want) in cases {
            assert_eq!(
                GuardedKind::of(api_version, kind),
                want,
                "{api_version} {kind}"
            );
        }
    }

    #[test]
    fn every_guarded_kind_has_paths_and_a_rule() {
        for k in GuardedKind::ALL {
            assert!(!k.paths().is_empty(), "{k}");
            assert!(!rule_of(k.layer()).is_empty());
            assert_eq!(k.namespaced(), k != GuardedKind::Package);
        }
        let rules: std::collections::BTreeSet<_> = Layer::ALL.iter().map(|l| rule_of(*l)).collect();
        assert_eq!(
            rules.len(),
            6,
            "one rule per audited layer, the apex table's shared"
        );
    }
}
