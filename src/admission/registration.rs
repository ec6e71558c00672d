//! The ValidatingWebhookConfiguration that registers every path (SPEC §5 settings: one
//! webhook per path, failurePolicy Fail, timeoutSeconds 5, sideEffects None, matchPolicy
//! Equivalent, admissionReviewVersions `[v1]`). The chart renders the in-cluster form; this is
//! the by-URL form for clusters where the webhook runs outside (the playground, the tests).
//! Both carry the same [`match_conditions`] (tests/charts.rs compares them).

use serde_json::{Value, json};

use super::WebhookResource;

/// Namespaces whose objects never reach the webhook: the control plane's own, so a broken
/// webhook cannot lock operators out of repairing it.
pub const EXCLUDED_NAMESPACES: [&str; 1] = ["kube-system"];

/// The matchConditions of `r`'s webhook. The API server evaluates them before it calls out
/// and skips the call when one is false, so each one is false only for requests the layer
/// admits whatever the cluster holds and whoever asks, judged from the request alone: a
/// skipped call is a review we would have answered `allowed: true` without a warning (routes
/// are never skipped in tenant scope: their warnings depend on the route index). Spared:
/// the call's round trip for the API server, and the review for us.
///
/// None of them may fail to evaluate: with failurePolicy Fail, an evaluation error rejects
/// the request without calling us. Every field read on `object`/`oldObject` is therefore
/// guarded (`has()`, a type check, or `null` first), relying on CEL's `&&`/`||`, which
/// absorb an error on one side when the other side decides the result.
///
/// - `tenant-scope` (layers 2, 7, 8, 9): objects outside tenant scope are admitted unchecked
///   (SPEC §2.2).
/// - `main-resource-or-read-field-changed` (Ingress): an `ingresses/status` write that keeps
///   the name, generateName, every annotation and the whole spec; the webhook admits a
///   subresource write that changes no field the layer reads (`Admission::decide`), and
///   these are a superset of those fields.
/// - `labels-or-annotations-changed` (Namespace): an UPDATE (also through `status` and
///   `finalize`) that keeps every label and annotation changes no guarded key, whatever the
///   configured lists are (layer 5).
/// - `host-set-or-changed` (Tenant): `spec.host` the same on both sides (absent, null and
///   `""` alike, as layer 4 reads it), with `spec` an object or absent and the host a string
///   or absent on both; any other shape is sent to the layer, which denies it.
/// - `attached-namespaces-present` (Package): layer 3 judges only objects where every step of
///   `spec.components.platform.values.gateway.attachedNamespaces` is an object and the list
///   is present and not null.
pub fn match_conditions(r: WebhookResource, tenant_prefix: &str) -> Vec<Value> {
    let mut conditions = Vec::new();
    if r.layer().tenant_scoped() {
        conditions.push(condition(
            "tenant-scope",
            format!(
                "request.namespace.startsWith({})",
                cel_string(tenant_prefix)
            ),
        ));
    }
    match r {
        WebhookResource::Ingresses => conditions.push(condition(
            "main-resource-or-read-field-changed",
            [
                // The field is absent, not empty, for the main resource.
                "!has(request.subResource) || request.subResource == '' || oldObject == null ||"
                    .to_string(),
                "object.metadata.name != oldObject.metadata.name ||".to_string(),
                format!("{} ||", differs("metadata.generateName", "''")),
                format!("{} ||", differs("metadata.annotations", "{}")),
                differs("spec", "{}"),
            ]
            .join("\n"),
        )),
        WebhookResource::Namespaces => conditions.push(condition(
            "labels-or-annotations-changed",
            [
                "request.operation != 'UPDATE' || oldObject == null ||".to_string(),
                format!("{} ||", differs("metadata.labels", "{}")),
                differs("metadata.annotations", "{}"),
            ]
            .join("\n"),
        )),
        WebhookResource::Tenants => {
            // `spec` absent, null or an object whose host is absent, null or a string.
            let shape_ok = |o: &str| {
                format!(
                    "(!has({o}.spec) || {o}.spec == null || type({o}.spec) == map &&\n  \
                     (!has({o}.spec.host) || {o}.spec.host == null || type({o}.spec.host) == string))"
                )
            };
            // The host as layer 4 reads it: `""` when anything on the way is absent or null.
            let host = |o: &str| {
                format!(
                    "(!has({o}.spec) || {o}.spec == null || !has({o}.spec.host) || {o}.spec.host == null ? '' : {o}.spec.host)"
                )
            };
            conditions.push(condition(
                "host-set-or-changed",
                format!(
                    "!(\n{} &&\n(oldObject == null || {}) &&\n{} ==\n{}\n)",
                    shape_ok("object"),
                    shape_ok("oldObject"),
                    host("object"),
                    host("oldObject"),
                ),
            ));
        }
        WebhookResource::Packages => {
            let mut steps = Vec::new();
            let mut path = String::from("object");
            let [walk @ .., last] = crate::policy::package::PATH;
            for key in walk {
                path = format!("{path}.{key}");
                steps.push(format!("has({path}) && type({path}) == map"));
            }
            path = format!("{path}.{last}");
            steps.push(format!("has({path}) && {path} != null"));
            conditions.push(condition(
                "attached-namespaces-present",
                steps.join(" &&\n"),
            ));
        }
        _ => {}
    }
    conditions
}

fn condition(name: &str, expression: String) -> Value {
    json!({"name": name, "expression": expression})
}

/// CEL: `object.<field>` and `oldObject.<field>` differ, an absent field reading as `empty`.
/// Only called where `oldObject` is known not to be null.
fn differs(field: &str, empty: &str) -> String {
    let side = |o: &str| {
        let (parent, key) = field.rsplit_once('.').unwrap_or(("", field));
        let parent = if parent.is_empty() {
            o.to_string()
        } else {
            format!("{o}.{parent}")
        };
        format!("(has({parent}.{key}) ? {parent}.{key} : {empty})")
    };
    format!("{} != {}", side("object"), side("oldObject"))
}

/// A CEL string literal.
fn cel_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `base_url` like `https://127.0.0.1:8443`; `ca_bundle_b64` is the base64 of the CA PEM;
/// `tenant_prefix` as `serve --tenant-prefix` (the tenant-scope matchConditions).
pub fn by_url(name: &str, base_url: &str, ca_bundle_b64: &str, tenant_prefix: &str) -> Value {
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
            let conditions = match_conditions(r, tenant_prefix);
            if !conditions.is_empty() {
                hook["matchConditions"] = Value::Array(conditions);
            }
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
        let v = by_url("tg", "https://127.0.0.1:8443/", "Q0E=", "tenant-");
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
        let v = by_url("tg", "https://127.0.0.1:8443", "Q0E=", "tenant-");
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
    fn match_conditions_per_path() {
        let names = |r| -> Vec<String> {
            match_conditions(r, "tenant-")
                .iter()
                .map(|c| c["name"].as_str().expect("name").to_string())
                .collect()
        };
        for r in WebhookResource::ALL {
            let expected: Vec<&str> = match r {
                WebhookResource::Ingresses => {
                    vec!["tenant-scope", "main-resource-or-read-field-changed"]
                }
                WebhookResource::Namespaces => vec!["labels-or-annotations-changed"],
                WebhookResource::Tenants => vec!["host-set-or-changed"],
                WebhookResource::Packages => vec!["attached-namespaces-present"],
                _ => vec!["tenant-scope"],
            };
            assert_eq!(names(r), expected, "{r:?}");
        }
        // Registered as computed, on the path's webhook.
        let v = by_url("tg", "https://127.0.0.1:8443", "Q0E=", "t-");
        assert_eq!(
            hook(&v, "httproutes")["matchConditions"],
            json!([{"name": "tenant-scope", "expression": "request.namespace.startsWith('t-')"}])
        );
        assert_eq!(
            hook(&v, "packages")["matchConditions"],
            json!(match_conditions(WebhookResource::Packages, "t-"))
        );
    }

    #[test]
    fn tenant_prefix_is_a_cel_string_literal() {
        let c = &match_conditions(WebhookResource::Gateways, r"a'b\c")[0];
        assert_eq!(c["expression"], r"request.namespace.startsWith('a\'b\\c')");
    }

    #[test]
    fn package_condition_walks_every_step_of_the_layer_path() {
        let c = &match_conditions(WebhookResource::Packages, "tenant-")[0];
        let e = c["expression"].as_str().expect("expression");
        let mut path = String::from("object");
        for (i, key) in crate::policy::package::PATH.iter().enumerate() {
            path = format!("{path}.{key}");
            assert!(e.contains(&format!("has({path})")), "{e}");
            // Every step but the list itself must be an object for the layer to look further.
            let is_map = e.contains(&format!("type({path}) == map"));
            assert_eq!(
                is_map,
                i + 1 < crate::policy::package::PATH.len(),
                "{path}: {e}"
            );
        }
        assert!(e.ends_with(&format!("{path} != null")), "{e}");
    }

    #[test]
    fn new_paths_are_registered() {
        let v = by_url("tg", "https://127.0.0.1:8443", "Q0E=", "tenant-");
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
