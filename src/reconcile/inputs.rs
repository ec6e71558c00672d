//! Plain data gathered from the caches for one reconcile of one TenantGateway. Nothing past
//! this point sees `kube::Api`: the edge projects watch objects into these types, and every
//! decision (`plan`) is a function of them.
//!
//! The edge hands over only what is relevant to this TenantGateway: its namespace, the
//! namespaces its attachedNamespaces list, those labelled to publish through it, and those
//! carrying our attached-by annotation for it; the routes that reference its Gateway (or the
//! second Gateway `<name>-passthrough`, SPEC §3.10) or carry our status entry for one, each
//! once; the objects of the owned kinds in its namespace that are owned by
//! it or share a name with one it renders.

use std::sync::Arc;

use gateway_api::apis::experimental::gateways::Gateway;
use gateway_api::apis::experimental::httproutes::HttpRoute;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::api::{
    CertMode, Dns01, Dns01Provider, IssuerName, TenantGatewaySpec, TenantGatewayStatus,
};
use super::certmanager::{Certificate, Issuer};
use crate::cluster::nsmeta::NamespaceMeta;
pub use crate::cluster::route_facts::{
    Conditions, InPlaceEdit, ParentRef, ParentsLayout, PassthroughListener, RouteFacts,
    RouteFactsParts, RouteKind, RouteParentStatus, SharedRef, passthrough_listener,
    passthrough_listeners,
};
use crate::platform::{self, Scope};

/// Everything one reconcile reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    pub tgw: TgwFacts,
    /// Other TenantGateways in the same namespace (one per namespace, SPEC §3.7).
    pub siblings: Vec<Sibling>,
    /// Other TenantGateways' attach lists (the no-stealing rule of SPEC §3.5).
    pub other_claims: Vec<AttachClaim>,
    /// Its own namespace, its attachedNamespaces, the namespaces publishing through it and
    /// those we attached for it: a superset of the namespaces whose routes attach, so their
    /// host labels are also the claimant apexes of the conflict rule (SPEC §3.3).
    /// The namespace index's own entries, shared, not copied.
    pub namespaces: Vec<Arc<NamespaceMeta>>,
    pub routes: Vec<RouteFacts>,
    pub observed: Observed,
    /// The clock, for the lastTransitionTime of a condition that changes.
    pub now: Time,
}

/// The TenantGateway itself.
#[derive(Debug, Clone, PartialEq)]
pub struct TgwFacts {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: Option<i64>,
    pub creation: Option<Time>,
    pub spec: TenantGatewaySpec,
    pub status: Option<TenantGatewayStatus>,
}

/// Another TenantGateway in the same namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sibling {
    pub name: String,
    pub creation: Option<Time>,
}

/// Another TenantGateway's claim on namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachClaim {
    pub namespace: String,
    pub name: String,
    /// Its `spec.apex` as written (compared by length, SPEC §3.5).
    pub apex: String,
    pub attached_namespaces: Vec<String>,
}

/// Objects of the owned kinds found in the TenantGateway's namespace.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observed {
    pub gateways: Vec<Gateway>,
    pub issuers: Vec<Issuer>,
    pub certificates: Vec<Certificate>,
    pub http_routes: Vec<HttpRoute>,
}

/// The TenantGateway spec once checked (SPEC §3.1 cross-field rules, re-checked at reconcile
/// time): what rendering may rely on.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Lowercased, valid, not a wildcard.
    pub apex: String,
    pub mode: ModeSettings,
    pub issuer: IssuerName,
    pub gateway_class: String,
    /// Usable attachedNamespaces entries, de-duplicated, spec order.
    pub attached: Vec<String>,
    /// `(service, listener name)` per usable tlsPassthroughServices entry, de-duplicated,
    /// spec order.
    pub passthrough: Vec<(String, String)>,
    /// Entries skipped, one sentence each (reported, never fatal).
    pub skipped: Vec<String>,
}

/// Where certificates come from.
#[derive(Debug, Clone, PartialEq)]
pub enum ModeSettings {
    Http01,
    Dns01(Box<Dns01>),
    ExistingSecret { secret: String },
}

impl ModeSettings {
    pub fn cert_mode(&self) -> CertMode {
        match self {
            ModeSettings::Http01 => CertMode::Http01,
            ModeSettings::Dns01(_) => CertMode::Dns01,
            ModeSettings::ExistingSecret { .. } => CertMode::ExistingSecret,
        }
    }
}

impl TgwFacts {
    /// Check the spec. `Err` lists every problem that makes rendering impossible (the status
    /// says what is wrong and nothing is rendered or deleted); problems with single list
    /// entries only skip those entries.
    pub fn settings(&self, scope: &platform::Scope) -> Result<Settings, Vec<String>> {
        let spec = &self.spec;
        let mut fatal = Vec::new();
        let apex = match crate::hostname::parse_apex(&spec.apex) {
            Ok(a) => a,
            Err(e) => {
                fatal.push(format!("spec.apex: {e}"));
                String::new()
            }
        };
        if spec.gateway_class_name.trim().is_empty() {
            fatal.push("spec.gatewayClassName is empty; name the GatewayClass to use".into());
        }
        let mode = match spec.cert_mode {
            CertMode::Http01 => Some(ModeSettings::Http01),
            CertMode::Dns01 => match &spec.dns01 {
                None => {
                    fatal.push("certMode dns01 requires the dns01 block".into());
                    None
                }
                Some(d) => {
                    let (provider, present) = match d.provider {
                        Dns01Provider::Cloudflare => ("cloudflare", d.cloudflare.is_some()),
                        Dns01Provider::Route53 => ("route53", d.route53.is_some()),
                        Dns01Provider::Digitalocean => ("digitalocean", d.digitalocean.is_some()),
                        Dns01Provider::Rfc2136 => ("rfc2136", d.rfc2136.is_some()),
                    };
                    if !present {
                        fatal.push(format!(
                            "dns01.provider {provider} requires the dns01.{provider} block"
                        ));
                        None
                    } else if d
                        .route53
                        .as_ref()
                        .is_some_and(|r| r.region.trim().is_empty())
                        && d.provider == Dns01Provider::Route53
                    {
                        fatal.push("dns01.route53.region must not be empty".into());
                        None
                    } else {
                        Some(ModeSettings::Dns01(Box::new(d.clone())))
                    }
                }
            },
            CertMode::ExistingSecret => match spec.wildcard_secret_ref.as_ref() {
                Some(r) if !r.name.trim().is_empty() => Some(ModeSettings::ExistingSecret {
                    secret: r.name.clone(),
                }),
                _ => {
                    fatal.push("certMode existingSecret requires wildcardSecretRef.name".into());
                    None
                }
            },
        };
        // The schema's list bounds (SPEC §3.1) again: an object stored before the CRD carried
        // them, or written with the schema bypassed, must not make a reconcile plan past what
        // the schema allows. Too long is fatal (which entries to drop would be a guess); a
        // single malformed entry only skips that entry, as below.
        if spec.attached_namespaces.len() > super::api::MAX_ATTACHED_NAMESPACES {
            fatal.push(format!(
                "spec.attachedNamespaces has {} entries; at most {} are allowed",
                spec.attached_namespaces.len(),
                super::api::MAX_ATTACHED_NAMESPACES
            ));
        }
        if spec.tls_passthrough_services.len() > super::api::MAX_PASSTHROUGH_SERVICES {
            fatal.push(format!(
                "spec.tlsPassthroughServices has {} entries; at most {} are allowed",
                spec.tls_passthrough_services.len(),
                super::api::MAX_PASSTHROUGH_SERVICES
            ));
        }
        let mut skipped = Vec::new();
        let mut attached: Vec<String> = Vec::new();
        for ns in &spec.attached_namespaces {
            if !crate::hostname::is_dns_label(ns) {
                skipped.push(format!(
                    "attachedNamespaces entry {ns:?} is not a namespace name; skipped"
                ));
            } else if scope.is_tenant(ns) {
                skipped.push(format!(
                    "attachedNamespaces entry {ns:?} is a tenant namespace; tenants join a \
                     Gateway with tenant.spec.gateway=true, never through this list; skipped"
                ));
            } else if ns != &self.namespace && !attached.contains(ns) {
                attached.push(ns.clone());
            }
        }
        let mut passthrough: Vec<(String, String)> = Vec::new();
        for svc in &spec.tls_passthrough_services {
            // The route index's rule, so the admission warnings know the same listeners.
            let listener = passthrough_listener(svc);
            let host_ok = crate::hostname::validate(&format!("{svc}.{apex}")).is_ok();
            match listener {
                Some(l) if host_ok || apex.is_empty() => {
                    if !passthrough.iter().any(|(s, _)| s == svc) {
                        passthrough.push((svc.clone(), l));
                    }
                }
                _ => skipped.push(format!(
                    "tlsPassthroughServices entry {svc:?} does not make a listener name \
                     tls-<svc> and hostname <svc>.<apex> (a lowercase DNS label is needed); \
                     skipped"
                )),
            }
        }
        match mode {
            Some(mode) if fatal.is_empty() => Ok(Settings {
                apex,
                mode,
                issuer: spec.issuer_name,
                gateway_class: spec.gateway_class_name.clone(),
                attached,
                passthrough,
                skipped,
            }),
            _ => Err(fatal),
        }
    }
}

/// Why a TenantGateway in `namespace` (whose host label is `label`) may not use the lowercased
/// `apex`, or `None` when it may. Pure, shared by the plan and by the claim filter of the edge.
pub fn apex_problem(
    namespace: &str,
    label: Option<&str>,
    apex: &str,
    scope: &Scope,
) -> Option<String> {
    if !scope.is_tenant(namespace) {
        return None;
    }
    match label {
        Some(l) if l.eq_ignore_ascii_case(apex) => None,
        Some(l) => Some(format!(
            "spec.apex {apex} is not this namespace's apex (its {} label is {l}); in a tenant \
             namespace spec.apex must equal it: set spec.apex to {l}",
            platform::HOST_LABEL
        )),
        None => Some(format!(
            "namespace {namespace} has no {} label; the webhook denies Gateways in tenant \
             namespaces without one (retry once the namespace is labelled)",
            platform::HOST_LABEL
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn list_bounds_are_checked_again() {
        use crate::reconcile::testing;
        let base = testing::world().tgw;
        let names = |n: usize, p: &str| (0..n).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
        // (attachedNamespaces, tlsPassthroughServices, expected fatal fragment)
        let cases: [(usize, usize, Option<&str>); 4] = [
            (128, 16, None),
            (
                129,
                0,
                Some("spec.attachedNamespaces has 129 entries; at most 128"),
            ),
            (
                0,
                17,
                Some("spec.tlsPassthroughServices has 17 entries; at most 16"),
            ),
            (0, 0, None),
        ];
        for (a, t, want) in cases {
            let mut f = base.clone();
            f.spec.attached_namespaces = names(a, "cozy-n");
            f.spec.tls_passthrough_services = names(t, "svc");
            let got = f.settings(&Default::default());
            match want {
                None => assert!(got.is_ok(), "{a}/{t}: {got:?}"),
                Some(w) => {
                    let e = got.expect_err("over the bound");
                    assert!(e.iter().any(|m| m.contains(w)), "{a}/{t}: {e:?}");
                }
            }
        }
    }
}
