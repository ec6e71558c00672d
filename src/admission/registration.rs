//! The ValidatingWebhookConfiguration that registers every path (SPEC §5 settings: one
//! webhook per path, failurePolicy Fail, timeoutSeconds 5, sideEffects None, matchPolicy
//! Equivalent, admissionReviewVersions [v1]). The chart renders the in-cluster form; this is
//! the by-URL form for clusters where the webhook runs outside (the playground, the tests).

use serde_json::{Value, json};

use super::WebhookResource;

/// Namespaces whose objects never reach the webhook: the control plane's own, so a broken
/// webhook cannot lock operators out of repairing it.
pub const EXCLUDED_NAMESPACES: [&str; 1] = ["kube-system"];

/// `base_url` like `https://127.0.0.1:8443`; `ca_bundle_b64` is the base64 of the CA PEM.
pub fn by_url(name: &str, base_url: &str, ca_bundle_b64: &str) -> Value {
    let base = base_url.trim_end_matches('/');
    let webhooks: Vec<Value> = WebhookResource::ALL
        .into_iter()
        .map(|r| {
            let cluster_scoped =
                matches!(r, WebhookResource::Namespaces | WebhookResource::Packages);
            let mut hook = json!({
                "name": format!("{}.tenant-gateway.cozystack.io", r.resource()),
                "clientConfig": {
                    "url": format!("{base}{}", r.path()),
                    "caBundle": ca_bundle_b64,
                },
                "rules": [{
                    "apiGroups": [r.group()],
                    "apiVersions": r.versions(),
                    "resources": [r.resource()],
                    "operations": ["CREATE", "UPDATE"],
                    "scope": if cluster_scoped { "Cluster" } else { "Namespaced" },
                }],
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "timeoutSeconds": 5,
                "admissionReviewVersions": ["v1"],
            });
            if r == WebhookResource::Namespaces {
                // A Namespace's own name label is the selector target for namespaces.
                hook["objectSelector"] = json!({"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": EXCLUDED_NAMESPACES,
                }]});
            } else if !cluster_scoped {
                hook["namespaceSelector"] = json!({"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": EXCLUDED_NAMESPACES,
                }]});
            }
            hook
        })
        .collect();
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "tenant-gateway"},
        },
        "webhooks": webhooks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_webhook_per_path_with_the_required_settings() {
        let v = by_url("tg", "https://127.0.0.1:8443/", "Q0E=");
        let hooks = v["webhooks"].as_array().expect("webhooks");
        assert_eq!(hooks.len(), WebhookResource::ALL.len());
        for (h, r) in hooks.iter().zip(WebhookResource::ALL) {
            assert_eq!(
                h["clientConfig"]["url"],
                format!("https://127.0.0.1:8443/validate/{}", r.resource())
            );
            assert_eq!(h["failurePolicy"], "Fail");
            assert_eq!(h["sideEffects"], "None");
            assert_eq!(h["matchPolicy"], "Equivalent");
            assert_eq!(h["timeoutSeconds"], 5);
            assert_eq!(h["admissionReviewVersions"], json!(["v1"]));
            assert_eq!(h["rules"][0]["resources"], json!([r.resource()]));
        }
    }
}
