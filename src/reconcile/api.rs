//! `gateway.cozystack.io/v1alpha1` TenantGateway (SPEC §3.1). The CRD YAML is generated from
//! these types (`tenant-gateway crd`); cross-field rules are CEL so `kubectl apply` rejects
//! an inconsistent spec up front. The reconciler checks them again.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Desired publishing setup of one tenant.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gateway.cozystack.io",
    version = "v1alpha1",
    kind = "TenantGateway",
    namespaced,
    status = "TenantGatewayStatus",
    shortname = "tgw",
    category = "cozystack",
    printcolumn = r#"{"name":"Apex","type":"string","jsonPath":".spec.apex"}"#,
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.certMode"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(
    validation = Rule::new("self.certMode != 'dns01' || has(self.dns01)").message("certMode dns01 requires the dns01 block"),
    validation = Rule::new("self.certMode != 'existingSecret' || has(self.wildcardSecretRef)").message("certMode existingSecret requires wildcardSecretRef.name")
)]
#[serde(rename_all = "camelCase")]
pub struct TenantGatewaySpec {
    /// The tenant's apex domain (its namespace's namespace.cozystack.io/host).
    // Bounds (SPEC §3.1): a DNS-1123 subdomain of at most 253 characters. Uppercase passes
    // the schema because the namespace label it must equal may carry it (SPEC §2.2); the
    // reconciler lowercases both sides.
    #[x_kube(validation = Rule::new("self != ''").message("apex must not be empty"))]
    #[schemars(length(min = 1, max = 253), regex(pattern = APEX_PATTERN))]
    pub apex: String,
    /// Where TLS certificates come from.
    #[serde(default)]
    pub cert_mode: CertMode,
    /// ACME issuer for http01 and dns01.
    #[serde(default)]
    pub issuer_name: IssuerName,
    /// DNS-01 solver settings (certMode dns01).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns01: Option<Dns01>,
    /// Operator-provided wildcard Secret in this namespace (certMode existingSecret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wildcard_secret_ref: Option<LocalSecretRef>,
    /// Extra namespaces whose routes may attach (never tenant namespaces).
    #[serde(default)]
    #[schemars(
        length(max = MAX_ATTACHED_NAMESPACES),
        inner(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))
    )]
    pub attached_namespaces: Vec<String>,
    /// Services published by TLS passthrough (one `tls-<svc>` listener each).
    #[serde(default)]
    #[schemars(
        length(max = MAX_PASSTHROUGH_SERVICES),
        inner(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))
    )]
    pub tls_passthrough_services: Vec<String>,
    /// GatewayClass of the rendered Gateway.
    #[serde(default = "default_gateway_class")]
    pub gateway_class_name: String,
}

/// Most attachedNamespaces entries a TenantGateway may list (SPEC §3.1).
pub const MAX_ATTACHED_NAMESPACES: usize = 128;
/// Most tlsPassthroughServices entries (SPEC §3.1).
pub const MAX_PASSTHROUGH_SERVICES: usize = 16;
/// A DNS-1123 label (namespace and Service names).
pub const DNS_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 subdomain whose labels are at most 63 characters, in either case.
pub const APEX_PATTERN: &str = "^[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?(\\.[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?)*$";

fn default_gateway_class() -> String {
    "cilium".to_string()
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum CertMode {
    #[default]
    #[serde(rename = "http01")]
    Http01,
    #[serde(rename = "dns01")]
    Dns01,
    #[serde(rename = "existingSecret")]
    ExistingSecret,
}

impl CertMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CertMode::Http01 => "http01",
            CertMode::Dns01 => "dns01",
            CertMode::ExistingSecret => "existingSecret",
        }
    }
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum IssuerName {
    #[default]
    #[serde(rename = "letsencrypt-prod")]
    LetsencryptProd,
    #[serde(rename = "letsencrypt-stage")]
    LetsencryptStage,
}

impl IssuerName {
    /// The ACME directory of each supported issuer.
    pub fn acme_server(self) -> &'static str {
        match self {
            IssuerName::LetsencryptProd => "https://acme-v02.api.letsencrypt.org/directory",
            IssuerName::LetsencryptStage => {
                "https://acme-staging-v02.api.letsencrypt.org/directory"
            }
        }
    }
}

/// `{name, key}` of a Secret in the TenantGateway's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

/// `{name}` of a Secret in the TenantGateway's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub struct LocalSecretRef {
    pub name: String,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Dns01Provider {
    #[default]
    Cloudflare,
    Route53,
    Digitalocean,
    Rfc2136,
}

/// DNS-01 solver: the provider and its block.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("self.provider != 'cloudflare' || has(self.cloudflare)").message("provider cloudflare requires the cloudflare block"),
    validation = Rule::new("self.provider != 'route53' || has(self.route53)").message("provider route53 requires the route53 block"),
    validation = Rule::new("self.provider != 'digitalocean' || has(self.digitalocean)").message("provider digitalocean requires the digitalocean block"),
    validation = Rule::new("self.provider != 'rfc2136' || has(self.rfc2136)").message("provider rfc2136 requires the rfc2136 block")
)]
#[serde(rename_all = "camelCase")]
pub struct Dns01 {
    #[serde(default)]
    pub provider: Dns01Provider,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloudflare: Option<Cloudflare>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route53: Option<Route53>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digitalocean: Option<DigitalOcean>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rfc2136: Option<Rfc2136>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cloudflare {
    pub api_token_secret_ref: SecretKeyRef,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Route53 {
    pub region: String,
    /// Omit with IRSA / ambient credentials.
    #[serde(
        rename = "accessKeyID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub access_key_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key_secret_ref: Option<SecretKeyRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DigitalOcean {
    pub token_secret_ref: SecretKeyRef,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rfc2136 {
    pub nameserver: String,
    pub tsig_key_name: String,
    #[serde(default = "default_tsig_algorithm")]
    pub tsig_algorithm: String,
    pub tsig_secret_secret_ref: SecretKeyRef,
}

fn default_tsig_algorithm() -> String {
    "HMACSHA256".to_string()
}

/// Observed state (SPEC §3.1, §3.7).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantGatewayStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Programmed, ListenerCapacity, NamespacesAttached, RouteStatus, ListenersOverlap.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub listeners: Vec<ListenerStatus>,
    /// The Gateways it renders (two when the controller runs with `--passthrough-gateway
    /// separate`: the passthrough listeners on `<name>-passthrough`) with the addresses their
    /// data plane reports: where DNS for the apex, and for the passthrough hostnames
    /// `<svc>.<apex>`, points.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<GatewayAddresses>,
}

/// One rendered Gateway and its addresses (`status.addresses` of the Gateway).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayAddresses {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<GatewayAddress>,
}

/// A Gateway address as the data plane reports it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayAddress {
    /// `IPAddress`, `Hostname`, or another type the data plane names.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    pub value: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_name: Option<String>,
    /// Pending, NotAccepted, NotProgrammed, CertificatePending (empty when ready).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The CRD as YAML, as `tenant-gateway crd` prints it.
pub fn crd_yaml() -> Result<String, serde_saphyr::SerializeError> {
    use kube::CustomResourceExt;
    crate::yaml::to_document(&TenantGateway::crd())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn crd_has_names_columns_status_and_cel_rules() {
        let crd = serde_json::to_value(TenantGateway::crd()).expect("crd serializes");
        assert_eq!(
            crd["metadata"]["name"],
            "tenantgateways.gateway.cozystack.io"
        );
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert_eq!(crd["spec"]["names"]["shortNames"][0], "tgw");
        let v = &crd["spec"]["versions"][0];
        assert_eq!(v["name"], "v1alpha1");
        assert!(v["subresources"]["status"].is_object());
        let cols: Vec<&str> = v["additionalPrinterColumns"]
            .as_array()
            .expect("columns")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(cols, ["Apex", "Mode", "Ready", "Age"]);
        let text = crd.to_string();
        for rule in [
            "certMode != 'dns01' || has(self.dns01)",
            "has(self.wildcardSecretRef)",
            "has(self.route53)",
        ] {
            assert!(text.contains(rule), "missing rule {rule}");
        }
        let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["required"], serde_json::json!(["apex"]));
        assert_eq!(spec["properties"]["gatewayClassName"]["default"], "cilium");
    }

    #[test]
    fn defaults_apply_on_deserialize() {
        let spec: TenantGatewaySpec =
            serde_json::from_value(serde_json::json!({"apex": "alice.example.org"}))
                .expect("minimal spec");
        assert_eq!(spec.cert_mode, CertMode::Http01);
        assert_eq!(spec.issuer_name, IssuerName::LetsencryptProd);
        assert_eq!(spec.gateway_class_name, "cilium");
        assert!(spec.attached_namespaces.is_empty());
    }
}
