//! Which webhook path serves which resource, and which versions of it (SPEC §2.1).

use crate::policy::Layer;

/// One `/validate/<resource>` path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WebhookResource {
    Gateways,
    ListenerSets,
    HttpRoutes,
    TlsRoutes,
    GrpcRoutes,
    Ingresses,
    Namespaces,
    Tenants,
    Packages,
    TenantGateways,
}

/// One API resource a path serves: a group, its plural resource name, the kind and the served
/// versions with the shape the layer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiResource {
    pub group: &'static str,
    pub resource: &'static str,
    pub kind: &'static str,
    pub versions: &'static [&'static str],
}

const GATEWAY_API: &str = "gateway.networking.k8s.io";
/// The experimental group where ListenerSet lived as XListenerSet before it reached v1.
const GATEWAY_API_X: &str = "gateway.networking.x-k8s.io";

impl WebhookResource {
    pub const ALL: [WebhookResource; 10] = [
        WebhookResource::Gateways,
        WebhookResource::ListenerSets,
        WebhookResource::HttpRoutes,
        WebhookResource::TlsRoutes,
        WebhookResource::GrpcRoutes,
        WebhookResource::Ingresses,
        WebhookResource::Namespaces,
        WebhookResource::Tenants,
        WebhookResource::Packages,
        WebhookResource::TenantGateways,
    ];

    /// Every API resource this path serves; the first one names the path. Only ListenerSets
    /// has two: `gateway.networking.k8s.io/v1` ListenerSet and its experimental predecessor
    /// `gateway.networking.x-k8s.io/v1alpha1` XListenerSet, same shape, different group and
    /// plural (matchPolicy Equivalent does not relate two CRDs, so both are registered).
    pub fn api_resources(self) -> &'static [ApiResource] {
        // A struct literal of constants is promoted to a `'static` borrow; a call is not.
        macro_rules! r {
            ($group:expr, $resource:expr, $kind:expr, $versions:expr $(,)?) => {
                ApiResource {
                    group: $group,
                    resource: $resource,
                    kind: $kind,
                    versions: $versions,
                }
            };
        }
        match self {
            WebhookResource::Gateways => {
                &[r!(GATEWAY_API, "gateways", "Gateway", &["v1", "v1beta1"])]
            }
            WebhookResource::ListenerSets => &[
                r!(GATEWAY_API, "listenersets", "ListenerSet", &["v1"]),
                r!(
                    GATEWAY_API_X,
                    "xlistenersets",
                    "XListenerSet",
                    &["v1alpha1"]
                ),
            ],
            WebhookResource::HttpRoutes => &[r!(
                GATEWAY_API,
                "httproutes",
                "HTTPRoute",
                &["v1", "v1beta1"],
            )],
            WebhookResource::TlsRoutes => &[r!(
                GATEWAY_API,
                "tlsroutes",
                "TLSRoute",
                &["v1", "v1alpha3", "v1alpha2"],
            )],
            WebhookResource::GrpcRoutes => &[r!(GATEWAY_API, "grpcroutes", "GRPCRoute", &["v1"])],
            WebhookResource::Ingresses => {
                &[r!("networking.k8s.io", "ingresses", "Ingress", &["v1"])]
            }
            WebhookResource::Namespaces => &[r!("", "namespaces", "Namespace", &["v1"])],
            WebhookResource::Tenants => {
                &[r!("apps.cozystack.io", "tenants", "Tenant", &["v1alpha1"])]
            }
            WebhookResource::Packages => {
                &[r!("cozystack.io", "packages", "Package", &["v1alpha1"])]
            }
            WebhookResource::TenantGateways => &[r!(
                crate::platform::TGW_API_GROUP,
                "tenantgateways",
                "TenantGateway",
                &["v1alpha1"],
            )],
        }
    }

    pub fn primary(self) -> &'static ApiResource {
        // Every arm of `api_resources` lists at least one entry (tested below).
        &self.api_resources()[0]
    }

    /// The plural resource name of the path (`/validate/<resource>`).
    pub fn resource(self) -> &'static str {
        self.primary().resource
    }

    /// The group of the path's main resource.
    pub fn group(self) -> &'static str {
        self.primary().group
    }

    /// Served versions of the path's main resource with the shape the layer reads.
    pub fn versions(self) -> &'static [&'static str] {
        self.primary().versions
    }

    /// The kind, for messages when the request carries none.
    pub fn kind(self) -> &'static str {
        self.primary().kind
    }

    /// The API resource of `group`/`resource` served by this path, if any.
    pub fn api_resource(self, group: &str, resource: &str) -> Option<&'static ApiResource> {
        self.api_resources()
            .iter()
            .find(|r| r.group == group && r.resource == resource)
    }

    pub fn layer(self) -> Layer {
        match self {
            WebhookResource::Gateways | WebhookResource::ListenerSets => Layer::Gateway,
            WebhookResource::HttpRoutes
            | WebhookResource::TlsRoutes
            | WebhookResource::GrpcRoutes => Layer::Route,
            WebhookResource::Ingresses => Layer::Ingress,
            WebhookResource::Namespaces => Layer::Namespace,
            WebhookResource::Tenants => Layer::Tenant,
            WebhookResource::Packages => Layer::Package,
            WebhookResource::TenantGateways => Layer::TenantGateway,
        }
    }

    /// Cluster-scoped kinds: the API server fills `request.namespace` with the object's own
    /// name for Namespaces; it is no scope.
    pub fn cluster_scoped(self) -> bool {
        matches!(
            self,
            WebhookResource::Namespaces | WebhookResource::Packages
        )
    }

    /// Subresources the webhook is registered for and evaluates exactly like an UPDATE of the
    /// main resource, because the API server's strategy for them keeps changes to fields the
    /// layer reads (SPEC §2.1). Checked against kube-apiserver v1.35 (tests/e2e_apiserver.rs,
    /// `check_subresource_strategies`):
    ///
    /// - `namespaces/status`, `namespaces/finalize`: the status strategy resets only `spec`,
    ///   the finalize strategy only `status`; both keep `metadata`, so a guarded label can be
    ///   rewritten through them (layer 5).
    /// - `ingresses/status`: the status strategy resets only `spec`; `metadata.annotations`
    ///   are kept, and layer 8 reads `nginx.ingress.kubernetes.io/server-alias` and the snippet
    ///   annotations from there.
    /// - `tenants/status`: in Cozystack, `apps.cozystack.io` is served by the cozystack-api
    ///   aggregated API server, not by a CRD, so the CRD strategy (below) cannot be assumed;
    ///   layer 4 compares `spec.host` of both sides, so judging status writes costs nothing
    ///   when the host is unchanged.
    pub fn evaluated_subresources(self) -> &'static [&'static str] {
        match self {
            WebhookResource::Namespaces => &["status", "finalize"],
            WebhookResource::Ingresses | WebhookResource::Tenants => &["status"],
            _ => &[],
        }
    }

    /// Subresources admitted without evaluation, because the API server resets every field the
    /// layer reads before storing (and before validating admission sees the object):
    ///
    /// - Gateway, ListenerSet/XListenerSet, HTTPRoute, TLSRoute, GRPCRoute (Gateway API CRDs)
    ///   and Package (a CRD in Cozystack and in the test stand-in): `status` is the only
    ///   subresource their CRDs declare, and the apiextensions status strategy copies the old
    ///   object whole and keeps only the new `status` (and managedFields), so spec, labels and
    ///   annotations cannot change through it. Verified on kube-apiserver v1.35 for HTTPRoute,
    ///   ListenerSet and a CRD-served Tenant (tests/e2e_apiserver.rs,
    ///   `check_subresource_strategies`); Gateway, the other routes and Package use the same
    ///   apiextensions strategy.
    /// - TenantGateway (our CRD): its `status` is the controller's (layer 9) and the same
    ///   strategy keeps spec and metadata as they were.
    ///
    /// Any other subresource (one a future API adds, or a registration we do not expect) is
    /// evaluated like an UPDATE rather than trusted.
    pub fn trusted_subresources(self) -> &'static [&'static str] {
        match self {
            WebhookResource::Gateways
            | WebhookResource::ListenerSets
            | WebhookResource::HttpRoutes
            | WebhookResource::TlsRoutes
            | WebhookResource::GrpcRoutes
            | WebhookResource::Packages
            | WebhookResource::TenantGateways => &["status"],
            WebhookResource::Ingresses | WebhookResource::Namespaces | WebhookResource::Tenants => {
                &[]
            }
        }
    }

    /// The operations registered and judged. Deleting an object publishes nothing, except
    /// that a TenantGateway's deletion gives up what it claimed (layer 9): only that kind is
    /// judged on DELETE.
    pub fn operations(self) -> &'static [&'static str] {
        match self {
            WebhookResource::TenantGateways => &["CREATE", "UPDATE", "DELETE"],
            _ => &["CREATE", "UPDATE"],
        }
    }

    /// `/validate/<resource>`.
    pub fn path(self) -> String {
        format!("/validate/{}", self.resource())
    }

    /// Parse the resource part of a `/validate/<resource>` path.
    pub fn from_path(path: &str) -> Option<WebhookResource> {
        let rest = path.strip_prefix("/validate/")?;
        WebhookResource::ALL
            .into_iter()
            .find(|r| r.resource() == rest)
    }

    /// Pick the path for a request's resource (used by the offline `review` command, which
    /// has no path of its own).
    pub fn from_group_resource(group: &str, resource: &str) -> Option<WebhookResource> {
        WebhookResource::ALL
            .into_iter()
            .find(|r| r.api_resource(group, resource).is_some())
    }

    /// Pick the path and API resource for an object by apiVersion group and kind (used by
    /// `check`).
    pub fn from_group_kind(group: &str, kind: &str) -> Option<WebhookResource> {
        WebhookResource::ALL.into_iter().find(|r| {
            r.api_resources()
                .iter()
                .any(|a| a.group == group && a.kind == kind)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip() {
        for r in WebhookResource::ALL {
            assert_eq!(WebhookResource::from_path(&r.path()), Some(r));
            assert_eq!(
                WebhookResource::from_group_resource(r.group(), r.resource()),
                Some(r)
            );
            assert_eq!(
                WebhookResource::from_group_kind(r.group(), r.kind()),
                Some(r)
            );
        }
        for r in WebhookResource::ALL {
            assert!(!r.api_resources().is_empty(), "{r:?}");
            for a in r.api_resources() {
                assert_eq!(
                    WebhookResource::from_group_resource(a.group, a.resource),
                    Some(r)
                );
                assert_eq!(WebhookResource::from_group_kind(a.group, a.kind), Some(r));
                assert!(!a.versions.is_empty());
            }
        }
        assert_eq!(
            WebhookResource::from_group_resource("gateway.networking.x-k8s.io", "xlistenersets"),
            Some(WebhookResource::ListenerSets)
        );
        assert_eq!(
            WebhookResource::from_path("/validate/listenersets"),
            Some(WebhookResource::ListenerSets)
        );
        assert_eq!(
            WebhookResource::from_path("/validate/grpcroutes"),
            Some(WebhookResource::GrpcRoutes)
        );
        // The experimental plural has no path of its own: one path serves both.
        assert_eq!(WebhookResource::from_path("/validate/xlistenersets"), None);
        assert_eq!(
            WebhookResource::from_group_resource("gateway.networking.k8s.io", "xlistenersets"),
            None
        );
        assert_eq!(WebhookResource::from_path("/validate/pods"), None);
        assert_eq!(WebhookResource::from_path("/validate/httproutes/x"), None);
        assert_eq!(WebhookResource::from_path("/metrics"), None);
    }
}
