//! The ValidatingWebhookConfiguration that registers every path (SPEC §5 settings: one
//! webhook per path, failurePolicy Fail, timeoutSeconds 5, sideEffects None, matchPolicy
//! Equivalent, admissionReviewVersions `[v1]`). The chart renders the in-cluster form; this is
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
            let cluster_scoped = r.cluster_scoped();
            let rules: Vec<Value> = r
                .api_resources()
                .iter()
                .map(|a| {
                    // The main resource plus the subresources whose writes the API server
                    // does not reset (`WebhookResource::evaluated_subresources`).
                    let mut resources = vec![a.resource.to_string()];
                    resources.extend(
                        r.evaluated_subresources()
                            .iter()
                            .map(|sub| format!("{}/{sub}", a.resource)),
                    );
                    json!({
                        "apiGroups": [a.group],
                        "apiVersions": a.versions,
                        "resources": resources,
                        "operations": r.operations(),
                        "scope": if cluster_scoped { "Cluster" } else { "Namespaced" },
                    })
                })
                .collect();
            let mut hook = json!({
                "name": format!("{}.tenant-gateway.cozystack.io", r.resource()),
                "clientConfig": {
                    "url": format!("{base}{}", r.path()),
                    "caBundle": ca_bundle_b64,
                },
                "rules": rules,
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

/// Why `webhook-configuration` refuses its input.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistrationError {
    #[error(
        "--url {0:?} is not an https:// URL: the API server calls webhooks over TLS only (e.g. https://127.0.0.1:8443)"
    )]
    NotHttps(String),
    #[error(
        "--url {0:?} has no host: give the base URL the API server should call, e.g. https://127.0.0.1:8443"
    )]
    NoHost(String),
    #[error(
        "{0}: no CERTIFICATE block found; --ca-file must hold the PEM certificate of the CA that signed the serving certificate (e.g. certs-dev/ca.crt), not a key"
    )]
    NoCertificate(String),
    #[error("{file}: certificate {index} is not a valid X.509 certificate: {reason}")]
    BadCertificate {
        file: String,
        index: usize,
        reason: String,
    },
}

/// The webhook's base URL, checked: https with a host, as the API server requires.
pub fn check_url(url: &str) -> Result<(), RegistrationError> {
    let Some(rest) = url.strip_prefix("https://") else {
        return Err(RegistrationError::NotHttps(url.to_string()));
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || host.starts_with(':') {
        return Err(RegistrationError::NoHost(url.to_string()));
    }
    Ok(())
}

/// The caBundle for `pem` (the contents of `file`): its CERTIFICATE blocks only, each a valid
/// X.509 certificate, as base64 of the PEM text. Anything else in the file (a private key
/// kept beside the CA) is left out, so it never lands in a cluster object.
pub fn ca_bundle(file: &str, pem: &[u8]) -> Result<String, RegistrationError> {
    use base64::Engine as _;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut out = String::new();
    for (i, cert) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let cert = cert.map_err(|e| RegistrationError::BadCertificate {
            file: file.to_string(),
            index: i + 1,
            reason: e.to_string(),
        })?;
        x509_parser::parse_x509_certificate(&cert).map_err(|e| {
            RegistrationError::BadCertificate {
                file: file.to_string(),
                index: i + 1,
                reason: e.to_string(),
            }
        })?;
        let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    if out.is_empty() {
        return Err(RegistrationError::NoCertificate(file.to_string()));
    }
    Ok(base64::engine::general_purpose::STANDARD.encode(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_bundle_keeps_certificates_and_refuses_keys_alone() {
        use base64::Engine as _;
        let dev = crate::certs::generate(&["localhost".to_string()]).expect("dev certs");
        let e = ca_bundle("tls.key", dev.ca_key_pem.as_bytes()).expect_err("a key is no CA");
        assert!(matches!(e, RegistrationError::NoCertificate(_)), "{e}");
        assert!(e.to_string().contains("CERTIFICATE"), "{e}");
        // A CA with its key beside it: only the certificate is embedded.
        let both = format!("{}{}", dev.ca_cert_pem, dev.ca_key_pem);
        let b64 = ca_bundle("both.pem", both.as_bytes()).expect("has a certificate");
        let text = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64"),
        )
        .expect("pem text");
        assert!(text.contains("BEGIN CERTIFICATE"), "{text}");
        assert!(!text.contains("PRIVATE KEY"), "{text}");
        assert_eq!(text.trim(), dev.ca_cert_pem.trim());
        let e = ca_bundle(
            "x",
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .expect_err("not x509");
        assert!(matches!(e, RegistrationError::BadCertificate { .. }), "{e}");
    }

    #[test]
    fn url_must_be_https_with_a_host() {
        assert!(check_url("https://127.0.0.1:8443").is_ok());
        assert!(check_url("https://webhook.example.org/base").is_ok());
        for bad in [
            "http://127.0.0.1:8443",
            "127.0.0.1:8443",
            "HTTPS//x",
            "https://",
            "https://:8443",
            "https:///x",
        ] {
            assert!(check_url(bad).is_err(), "{bad} must be refused");
        }
    }

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
            assert_eq!(h["rules"][0]["resources"][0], r.resource());
        }
    }

    fn hook<'a>(v: &'a Value, name: &str) -> &'a Value {
        v["webhooks"]
            .as_array()
            .expect("webhooks")
            .iter()
            .find(|h| h["name"] == format!("{name}.tenant-gateway.cozystack.io"))
            .expect("hook")
    }

    #[test]
    fn subresources_that_keep_read_fields_are_registered() {
        let v = by_url("tg", "https://127.0.0.1:8443", "Q0E=");
        let ns = hook(&v, "namespaces");
        assert_eq!(
            ns["rules"][0]["resources"],
            json!(["namespaces", "namespaces/status", "namespaces/finalize"])
        );
        assert_eq!(ns["rules"][0]["scope"], "Cluster");
        let ing = hook(&v, "ingresses");
        assert_eq!(
            ing["rules"][0]["resources"],
            json!(["ingresses", "ingresses/status"])
        );
        assert_eq!(
            hook(&v, "tenants")["rules"][0]["resources"],
            json!(["tenants", "tenants/status"])
        );
        // CRD status subresources reset everything but status: not registered.
        assert_eq!(
            hook(&v, "httproutes")["rules"][0]["resources"],
            json!(["httproutes"])
        );
    }

    #[test]
    fn new_paths_are_registered() {
        let v = by_url("tg", "https://127.0.0.1:8443", "Q0E=");
        let ls = hook(&v, "listenersets");
        assert_eq!(
            ls["clientConfig"]["url"],
            "https://127.0.0.1:8443/validate/listenersets"
        );
        assert_eq!(
            ls["rules"],
            json!([
                {"apiGroups": ["gateway.networking.k8s.io"], "apiVersions": ["v1"],
                 "resources": ["listenersets"], "operations": ["CREATE", "UPDATE"],
                 "scope": "Namespaced"},
                {"apiGroups": ["gateway.networking.x-k8s.io"], "apiVersions": ["v1alpha1"],
                 "resources": ["xlistenersets"], "operations": ["CREATE", "UPDATE"],
                 "scope": "Namespaced"},
            ])
        );
        let grpc = hook(&v, "grpcroutes");
        assert_eq!(
            grpc["rules"][0]["apiGroups"],
            json!(["gateway.networking.k8s.io"])
        );
        assert_eq!(grpc["rules"][0]["apiVersions"], json!(["v1"]));
        assert!(grpc["namespaceSelector"].is_object());
    }
}
