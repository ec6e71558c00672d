//! Minimal cert-manager `Issuer` and `Certificate` (cert-manager.io/v1): only the fields the
//! reconciler writes, and the status conditions it reads (SPEC §3.2, §3.7).
//!
//! Fields the CRD defaults are written out (`group`/`kind` of the solver's parentRefs) so a
//! desired object compares equal to what the API server stores.
//!
//! Reading is lenient (`#[serde(default)]` on the specs): any Issuer or Certificate the API
//! server serves decodes, whatever optional fields it leaves out (`issuerRef.group`,
//! `dnsNames`, an Issuer that is not ACME). An object that failed to decode would be missing
//! from the cache, so a same-named one we do not own would look absent: the plan would create
//! it, the apply fail on the other field manager's fields, and the whole TenantGateway stay
//! unreconciled instead of reporting that one name.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// `spec` of an ACME Issuer.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "cert-manager.io",
    version = "v1",
    kind = "Issuer",
    namespaced,
    status = "IssuerStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(default)]
pub struct IssuerSpec {
    pub acme: Acme,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct Acme {
    pub server: String,
    pub private_key_secret_ref: SecretName,
    pub solvers: Vec<Solver>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(default)]
pub struct SecretName {
    pub name: String,
}

/// `{name, key}` of a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct SecretKeySelector {
    pub name: String,
    pub key: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Solver {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http01: Option<Http01Solver>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns01: Option<Dns01Solver>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Http01Solver {
    #[serde(rename = "gatewayHTTPRoute")]
    pub gateway_http_route: GatewayHttpRoute,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GatewayHttpRoute {
    pub parent_refs: Vec<SolverParentRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SolverParentRef {
    pub group: String,
    pub kind: String,
    pub name: String,
    pub namespace: String,
    pub section_name: String,
}

/// One provider block, as in the TenantGateway spec (SPEC §3.1).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Dns01Solver {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloudflare: Option<CloudflareSolver>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route53: Option<Route53Solver>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digitalocean: Option<DigitalOceanSolver>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rfc2136: Option<Rfc2136Solver>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CloudflareSolver {
    pub api_token_secret_ref: SecretKeySelector,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Route53Solver {
    pub region: String,
    #[serde(
        rename = "accessKeyID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub access_key_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key_secret_ref: Option<SecretKeySelector>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DigitalOceanSolver {
    pub token_secret_ref: SecretKeySelector,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Rfc2136Solver {
    pub nameserver: String,
    pub tsig_key_name: String,
    pub tsig_algorithm: String,
    pub tsig_secret_secret_ref: SecretKeySelector,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct IssuerStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<CertManagerCondition>,
}

/// `spec` of a Certificate.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "cert-manager.io",
    version = "v1",
    kind = "Certificate",
    namespaced,
    status = "CertificateStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase", default)]
pub struct CertificateSpec {
    pub secret_name: String,
    pub dns_names: Vec<String>,
    pub issuer_ref: IssuerRef,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(default)]
pub struct IssuerRef {
    pub group: String,
    pub kind: String,
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct CertificateStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<CertManagerCondition>,
}

/// cert-manager's condition shape (only what is read).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct CertManagerCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Certificate {
    /// cert-manager's `Ready=True`.
    pub fn is_ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_ready_is_read_from_cert_manager_json() {
        let json = serde_json::json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": "c", "namespace": "n"},
            "spec": {"secretName": "c", "dnsNames": ["a.example.org"],
                     "issuerRef": {"group": "cert-manager.io", "kind": "Issuer", "name": "i"},
                     "privateKey": {"rotationPolicy": "Always"}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                       "notAfter": "2027-01-01T00:00:00Z"}
        });
        let cert: Certificate = serde_json::from_value(json).expect("decodes with extra fields");
        assert!(cert.is_ready());
        let mut pending = cert.clone();
        pending.status = Some(CertificateStatus {
            conditions: vec![CertManagerCondition {
                type_: "Ready".into(),
                status: "False".into(),
                ..Default::default()
            }],
        });
        assert!(!pending.is_ready());
        pending.status = None;
        assert!(!pending.is_ready());
    }

    #[test]
    fn issuer_serializes_cert_manager_field_names() {
        let solver = Solver {
            http01: Some(Http01Solver {
                gateway_http_route: GatewayHttpRoute {
                    parent_refs: vec![SolverParentRef {
                        group: "gateway.networking.k8s.io".into(),
                        kind: "Gateway".into(),
                        name: "gw".into(),
                        namespace: "ns".into(),
                        section_name: "http".into(),
                    }],
                },
            }),
            dns01: None,
        };
        let v = serde_json::to_value(&solver).expect("serializes");
        assert_eq!(
            v["http01"]["gatewayHTTPRoute"]["parentRefs"][0]["sectionName"],
            "http"
        );
        let r53 = Route53Solver {
            region: "eu-west-1".into(),
            access_key_id: Some("AKIA".into()),
            secret_access_key_secret_ref: None,
        };
        let v = serde_json::to_value(&r53).expect("serializes");
        assert_eq!(v["accessKeyID"], "AKIA");
        assert!(v.get("secretAccessKeySecretRef").is_none());
    }

    /// Regression (issue 11 chaos test): a same-named Certificate someone else wrote without
    /// `issuerRef.group` (optional in cert-manager) did not decode, so it was invisible and
    /// wedged its TenantGateway. Foreign Issuers of another type must decode too.
    #[test]
    fn foreign_objects_with_optional_fields_left_out_decode() {
        let cert: Certificate = serde_json::from_value(serde_json::json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": "gw-r0-tls", "namespace": "n"},
            "spec": {"secretName": "someone-elses", "issuerRef": {"name": "other"},
                     "commonName": "r0.example.org"}
        }))
        .expect("a Certificate without issuerRef.group or dnsNames decodes");
        assert_eq!(cert.spec.issuer_ref.name, "other");
        assert!(cert.spec.dns_names.is_empty());
        let issuer: Issuer = serde_json::from_value(serde_json::json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Issuer",
            "metadata": {"name": "gw-gateway", "namespace": "n"},
            "spec": {"selfSigned": {}}
        }))
        .expect("a self-signed Issuer decodes");
        assert_eq!(issuer.spec, IssuerSpec::default());
    }
}
