//! Which webhook path serves which resource, and which versions of it (SPEC §2.1).

use crate::policy::Layer;

/// One `/validate/<resource>` path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WebhookResource {
    Gateways,
    HttpRoutes,
    TlsRoutes,
    Ingresses,
    Namespaces,
    Tenants,
    Packages,
}

impl WebhookResource {
    pub const ALL: [WebhookResource; 7] = [
        WebhookResource::Gateways,
        WebhookResource::HttpRoutes,
        WebhookResource::TlsRoutes,
        WebhookResource::Ingresses,
        WebhookResource::Namespaces,
        WebhookResource::Tenants,
        WebhookResource::Packages,
    ];

    /// The plural resource name, as in `request.resource.resource` and in the path.
    pub fn resource(self) -> &'static str {
        match self {
            WebhookResource::Gateways => "gateways",
            WebhookResource::HttpRoutes => "httproutes",
            WebhookResource::TlsRoutes => "tlsroutes",
            WebhookResource::Ingresses => "ingresses",
            WebhookResource::Namespaces => "namespaces",
            WebhookResource::Tenants => "tenants",
            WebhookResource::Packages => "packages",
        }
    }

    pub fn group(self) -> &'static str {
        match self {
            WebhookResource::Gateways
            | WebhookResource::HttpRoutes
            | WebhookResource::TlsRoutes => "gateway.networking.k8s.io",
            WebhookResource::Ingresses => "networking.k8s.io",
            WebhookResource::Namespaces => "",
            WebhookResource::Tenants => "apps.cozystack.io",
            WebhookResource::Packages => "cozystack.io",
        }
    }

    /// Served versions with the shape the layer reads.
    pub fn versions(self) -> &'static [&'static str] {
        match self {
            WebhookResource::Gateways | WebhookResource::HttpRoutes => &["v1", "v1beta1"],
            WebhookResource::TlsRoutes => &["v1", "v1alpha3", "v1alpha2"],
            WebhookResource::Ingresses | WebhookResource::Namespaces => &["v1"],
            WebhookResource::Tenants | WebhookResource::Packages => &["v1alpha1"],
        }
    }

    /// The kind, for messages when the request carries none.
    pub fn kind(self) -> &'static str {
        match self {
            WebhookResource::Gateways => "Gateway",
            WebhookResource::HttpRoutes => "HTTPRoute",
            WebhookResource::TlsRoutes => "TLSRoute",
            WebhookResource::Ingresses => "Ingress",
            WebhookResource::Namespaces => "Namespace",
            WebhookResource::Tenants => "Tenant",
            WebhookResource::Packages => "Package",
        }
    }

    pub fn layer(self) -> Layer {
        match self {
            WebhookResource::Gateways => Layer::Gateway,
            WebhookResource::HttpRoutes | WebhookResource::TlsRoutes => Layer::Route,
            WebhookResource::Ingresses => Layer::Ingress,
            WebhookResource::Namespaces => Layer::Namespace,
            WebhookResource::Tenants => Layer::Tenant,
            WebhookResource::Packages => Layer::Package,
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
            .find(|r| r.group() == group && r.resource() == resource)
    }

    /// Pick the path for an object by apiVersion group and kind (used by `check`).
    pub fn from_group_kind(group: &str, kind: &str) -> Option<WebhookResource> {
        WebhookResource::ALL
            .into_iter()
            .find(|r| r.group() == group && r.kind() == kind)
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
        assert_eq!(WebhookResource::from_path("/validate/pods"), None);
        assert_eq!(WebhookResource::from_path("/validate/httproutes/x"), None);
        assert_eq!(WebhookResource::from_path("/metrics"), None);
    }
}
