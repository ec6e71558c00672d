//! The AdmissionReview presets several integration tests send, built with the one builder,
//! [`tenant_gateway::admission::testing::review`] (which a test that varies a review itself
//! imports from there).

use serde_json::{Value, json};
use tenant_gateway::admission::WebhookResource;
use tenant_gateway::admission::testing::{Review, review};

/// The uid of `examples/reviews/httproute-hijack.json`.
pub const EXAMPLE_UID: &str = "7f0b2b8e-1d1c-4c2e-9a53-0c1c2f3e4d5a";

/// The review of `examples/reviews/httproute-hijack.json` (alice's HTTPRoute `hijack` in
/// `tenant-alice`) with `uid` and the single hostname `host`; with [`EXAMPLE_UID`] and
/// `shop.bob.example.org` it is that file, field for field.
pub fn example(uid: &str, host: &str) -> Review {
    review(WebhookResource::HttpRoutes)
        .uid(uid)
        .namespace("tenant-alice")
        .user("alice", &["tenant-alice-admins", "system:authenticated"])
        .object(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "hijack", "namespace": "tenant-alice"},
            "spec": {
                "parentRefs": [{"name": "tenant-root", "namespace": "tenant-root"}],
                "hostnames": [host],
                "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]
            }
        }))
        .old_object(Value::Null)
        .dry_run(false)
}

/// The example review of `shop.alice.example.org` (admitted with the example namespaces).
pub fn admitted(uid: &str) -> Value {
    example(uid, "shop.alice.example.org").build()
}

/// A Namespace CREATE review, as the API server sends it.
pub fn namespace_create(
    uid: &str,
    name: &str,
    labels: Value,
    user: &str,
    groups: &[&str],
) -> Value {
    review(WebhookResource::Namespaces)
        .uid(uid)
        .user(user, groups)
        .object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}))
        .old_object(Value::Null)
        .dry_run(false)
        .api_server_fields()
        .build()
}

/// A Gateway CREATE in `namespace` with one HTTPS listener for `hostname`, by the
/// platform's service account, as the API server sends it.
pub fn gateway_create(uid: &str, namespace: &str, hostname: &str) -> Value {
    review(WebhookResource::Gateways)
        .uid(uid)
        .namespace(namespace)
        .user(
            "system:serviceaccount:cozy-system:tenant-gateway",
            &["system:serviceaccounts:cozy-system", "system:authenticated"],
        )
        .object(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": namespace},
            "spec": {
                "gatewayClassName": "cilium",
                "listeners": [{"name": "https", "protocol": "HTTPS", "port": 443, "hostname": hostname}]
            }
        }))
        .old_object(Value::Null)
        .dry_run(false)
        .api_server_fields()
        .build()
}
