//! The desired objects of one TenantGateway (SPEC §3.2): Gateway, Issuer, Certificates and
//! the redirect HttpRoute, all in the TenantGateway's namespace with a controller
//! ownerReference to it and the managed-by label; in the `separate` layout of SPEC §3.10 a
//! second Gateway `<name>-passthrough` with the passthrough listeners ([`separate`]), and
//! the listener pairs a data plane may refuse in the `shared` one
//! ([`overlapping_listeners`]).
//!
//! Every field the API server would default is written out (allowedRoutes kinds' group, TLS
//! mode, certificateRefs group/kind, parentRef group/kind, the redirect's path match), so the
//! desired object equals the stored one field for field and an unchanged world renders no
//! write. `allowedListeners` is never set: a Gateway without it accepts no ListenerSet, and
//! ListenerSets would bypass layers 1 and 2.

use std::collections::{BTreeMap, BTreeSet};

use gateway_api::apis::experimental::gateways::{
    Gateway, GatewayListeners, GatewayListenersAllowedRoutes, GatewayListenersAllowedRoutesKinds,
    GatewayListenersAllowedRoutesNamespaces, GatewayListenersAllowedRoutesNamespacesFrom,
    GatewayListenersAllowedRoutesNamespacesSelector,
    GatewayListenersAllowedRoutesNamespacesSelectorMatchExpressions, GatewayListenersTls,
    GatewayListenersTlsCertificateRefs, GatewayListenersTlsMode, GatewaySpec,
};
use gateway_api::apis::experimental::httproutes::{
    HttpRoute, HttpRouteParentRefs, HttpRouteRules, HttpRouteRulesFilters,
    HttpRouteRulesFiltersRequestRedirect, HttpRouteRulesFiltersRequestRedirectScheme,
    HttpRouteRulesFiltersType, HttpRouteRulesMatches, HttpRouteRulesMatchesPath,
    HttpRouteRulesMatchesPathType, HttpRouteSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::Options;
use super::api::Dns01Provider;
use super::certmanager::{
    Acme, Certificate, CertificateSpec, CloudflareSolver, DigitalOceanSolver, Dns01Solver,
    GatewayHttpRoute, Http01Solver, Issuer, IssuerRef, IssuerSpec, Rfc2136Solver, Route53Solver,
    SecretKeySelector, SecretName, Solver, SolverParentRef,
};
use super::inputs::{ModeSettings, Settings, TgwFacts};
use super::names::{self, APEX_LISTENER, HTTP_LISTENER, WILDCARD_LISTENER};
use crate::platform::{
    CERT_MANAGER_NAMESPACE, GATEWAY_API_GROUP, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
    METADATA_NAME_LABEL, PassthroughGateway, TGW_API_VERSION, TGW_KIND,
};

/// What the listeners are built from (decided by `routes` and the namespace plan).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ListenerInputs {
    /// Namespaces admitted on port 443: the own namespace, attached, inheriting.
    pub port443_namespaces: BTreeSet<String>,
    /// http01: hostnames that get a listener and Certificate.
    pub hosts: BTreeSet<String>,
    /// dns01/existingSecret: inheriting child apexes that get a `*.C` listener.
    pub child_apexes: BTreeSet<String>,
    /// http01: the names hostnames' listeners have on the owned Gateway (kept, SPEC §3.2).
    pub sticky: BTreeMap<String, names::StickyNames>,
}

/// One listener as the TenantGateway status reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerInfo {
    pub name: String,
    pub hostname: Option<String>,
    /// The Certificate the listener waits for (none for existingSecret and passthrough).
    pub certificate: Option<String>,
    /// On the second Gateway `<name>-passthrough` (the `separate` layout, SPEC §3.10).
    pub on_passthrough_gateway: bool,
}

/// The desired owned objects.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub gateway: Gateway,
    /// `<name>-passthrough` with the passthrough listeners, in the `separate` layout of a
    /// dns01/existingSecret TenantGateway that declares some (SPEC §3.10).
    pub passthrough_gateway: Option<Gateway>,
    pub issuer: Option<Issuer>,
    /// Sorted by name.
    pub certificates: Vec<Certificate>,
    pub redirect: HttpRoute,
    /// Every listener but `http`, in Gateway order.
    pub listeners: Vec<ListenerInfo>,
}

/// Metadata of an owned object.
pub fn owned_meta(tgw: &TgwFacts, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(tgw.namespace.clone()),
        labels: Some(BTreeMap::from([(
            MANAGED_BY_LABEL.to_string(),
            MANAGED_BY_VALUE.to_string(),
        )])),
        owner_references: Some(vec![owner_reference(tgw)]),
        ..ObjectMeta::default()
    }
}

/// The controller ownerReference to the TenantGateway.
pub fn owner_reference(tgw: &TgwFacts) -> OwnerReference {
    OwnerReference {
        api_version: TGW_API_VERSION.to_string(),
        kind: TGW_KIND.to_string(),
        name: tgw.name.clone(),
        uid: tgw.uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn selector(namespaces: &BTreeSet<String>) -> GatewayListenersAllowedRoutesNamespaces {
    GatewayListenersAllowedRoutesNamespaces {
        from: Some(GatewayListenersAllowedRoutesNamespacesFrom::Selector),
        selector: Some(GatewayListenersAllowedRoutesNamespacesSelector {
            match_expressions: Some(vec![
                GatewayListenersAllowedRoutesNamespacesSelectorMatchExpressions {
                    key: METADATA_NAME_LABEL.to_string(),
                    operator: "In".to_string(),
                    // BTreeSet: sorted, de-duplicated.
                    values: Some(namespaces.iter().cloned().collect()),
                },
            ]),
            match_labels: None,
        }),
    }
}

fn kinds(list: &[&str]) -> Option<Vec<GatewayListenersAllowedRoutesKinds>> {
    Some(
        list.iter()
            .map(|k| GatewayListenersAllowedRoutesKinds {
                group: Some(GATEWAY_API_GROUP.to_string()),
                kind: (*k).to_string(),
            })
            .collect(),
    )
}

fn https_listener(
    name: &str,
    hostname: &str,
    secret: &str,
    namespaces: &BTreeSet<String>,
    opts: &Options,
) -> GatewayListeners {
    let kind_list: &[&str] = if opts.uniform_port_kinds {
        &["HTTPRoute", "TLSRoute"]
    } else {
        &["HTTPRoute"]
    };
    GatewayListeners {
        name: name.to_string(),
        hostname: Some(hostname.to_string()),
        port: 443,
        protocol: "HTTPS".to_string(),
        tls: Some(GatewayListenersTls {
            mode: Some(GatewayListenersTlsMode::Terminate),
            certificate_refs: Some(vec![GatewayListenersTlsCertificateRefs {
                group: Some(String::new()),
                kind: Some("Secret".to_string()),
                name: secret.to_string(),
                namespace: None,
            }]),
            options: None,
        }),
        allowed_routes: Some(GatewayListenersAllowedRoutes {
            kinds: kinds(kind_list),
            namespaces: Some(selector(namespaces)),
        }),
    }
}

/// Render the desired objects: the port-80 listener, the mode's HTTPS listeners and their
/// Certificates, the passthrough listeners, then the Gateway, Issuer and redirect around
/// them.
pub fn render(tgw: &TgwFacts, settings: &Settings, li: &ListenerInputs, opts: &Options) -> Desired {
    let issuer_name = names::issuer(&tgw.name);
    let of = Of {
        tgw,
        settings,
        li,
        opts,
        issuer_name: &issuer_name,
    };
    let mut parts = Listeners::default();
    parts.listeners.push(http_listener(tgw));
    match &settings.mode {
        ModeSettings::Http01 => http01_listeners(&of, &mut parts),
        ModeSettings::Dns01(_) | ModeSettings::ExistingSecret { .. } => {
            wildcard_listeners(&of, &mut parts)
        }
    }
    let passthrough_gateway = if separate(settings, opts) {
        let mut second = Listeners::default();
        passthrough_listeners(&of, &mut second, true);
        parts.infos.append(&mut second.infos);
        let name = names::passthrough_gateway(&tgw.name);
        Some(gateway(tgw, settings, &name, second.listeners))
    } else {
        passthrough_listeners(&of, &mut parts, false);
        None
    };
    let Listeners {
        listeners,
        infos,
        mut certificates,
    } = parts;
    certificates.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Desired {
        gateway: gateway(tgw, settings, &tgw.name, listeners),
        passthrough_gateway,
        issuer: issuer(tgw, settings, &issuer_name),
        certificates,
        redirect: redirect(tgw, &settings.apex),
        listeners: infos,
    }
}

/// Whether the passthrough listeners go on the second Gateway `<name>-passthrough` (SPEC
/// §3.10): in the `separate` layout, for dns01/existingSecret (whose wildcard listener covers
/// every passthrough hostname), when the spec declares any. An http01 Gateway never overlaps
/// (no terminate listener takes a passthrough hostname) and keeps one Gateway.
pub fn separate(settings: &Settings, opts: &Options) -> bool {
    opts.passthrough_gateway == PassthroughGateway::Separate
        && !matches!(settings.mode, ModeSettings::Http01)
        && !settings.passthrough.is_empty()
}

/// Pairs of listeners on one port of `gateway`, an HTTPS-terminate one and a TLS-passthrough
/// one, whose hostnames intersect (`hostname::intersects`; a listener without a hostname
/// matches every name): `(terminate, passthrough)` by listener name, sorted. Data planes that
/// refuse such pairs (Cilium from 1.19.6) mark both listeners Conflicted (SPEC §3.10).
pub fn overlapping_listeners(gateway: &Gateway) -> Vec<(String, String)> {
    let mode = |l: &GatewayListeners| l.tls.as_ref().and_then(|t| t.mode.clone());
    let terminate = |l: &&GatewayListeners| {
        l.protocol == "HTTPS" && mode(l) != Some(GatewayListenersTlsMode::Passthrough)
    };
    let passthrough = |l: &&GatewayListeners| {
        l.protocol == "TLS" && mode(l) == Some(GatewayListenersTlsMode::Passthrough)
    };
    let meet = |a: &Option<String>, b: &Option<String>| match (a, b) {
        (Some(a), Some(b)) => crate::hostname::intersects(a, b),
        _ => true,
    };
    let ls = &gateway.spec.listeners;
    let mut pairs: Vec<(String, String)> = ls
        .iter()
        .filter(terminate)
        .flat_map(|t| {
            ls.iter()
                .filter(passthrough)
                .filter(move |p| p.port == t.port && meet(&t.hostname, &p.hostname))
                .map(move |p| (t.name.clone(), p.name.clone()))
        })
        .collect();
    pairs.sort();
    pairs.dedup();
    pairs
}

/// What the listener steps render from.
struct Of<'a> {
    tgw: &'a TgwFacts,
    settings: &'a Settings,
    li: &'a ListenerInputs,
    opts: &'a Options,
    issuer_name: &'a str,
}

/// The listeners rendered so far, in Gateway order, with what the status reports of each
/// and the Certificates they wait for.
#[derive(Default)]
struct Listeners {
    listeners: Vec<GatewayListeners>,
    /// Every listener but `http`.
    infos: Vec<ListenerInfo>,
    certificates: Vec<Certificate>,
}

/// `http`: only the redirect route (own namespace) and ACME challenges.
fn http_listener(tgw: &TgwFacts) -> GatewayListeners {
    let port80: BTreeSet<String> = [tgw.namespace.clone(), CERT_MANAGER_NAMESPACE.to_string()]
        .into_iter()
        .collect();
    GatewayListeners {
        name: HTTP_LISTENER.to_string(),
        hostname: None,
        port: 80,
        protocol: "HTTP".to_string(),
        tls: None,
        allowed_routes: Some(GatewayListenersAllowedRoutes {
            kinds: kinds(&["HTTPRoute"]),
            namespaces: Some(selector(&port80)),
        }),
    }
}

/// A Certificate of ours from the TenantGateway's Issuer.
fn certificate(
    tgw: &TgwFacts,
    issuer_name: &str,
    name: &str,
    dns_names: Vec<String>,
) -> Certificate {
    Certificate {
        metadata: owned_meta(tgw, name),
        spec: CertificateSpec {
            secret_name: name.to_string(),
            dns_names,
            issuer_ref: IssuerRef {
                group: "cert-manager.io".to_string(),
                kind: "Issuer".to_string(),
                name: issuer_name.to_string(),
            },
        },
        status: None,
    }
}

/// http01: one listener and one Certificate per hostname, the apex first, then the
/// hostnames sorted.
fn http01_listeners(of: &Of, out: &mut Listeners) {
    let apex = of.settings.apex.as_str();
    // The Gateway's other listener names: no hostname listener may take them.
    let fixed: BTreeSet<String> = std::iter::once(HTTP_LISTENER.to_string())
        .chain(of.settings.passthrough.iter().map(|(_, l)| l.clone()))
        .collect();
    let assigned = names::http01(&of.tgw.name, apex, &of.li.hosts, &fixed, &of.li.sticky);
    let mut order: Vec<&String> = of.li.hosts.iter().collect();
    order.sort_by_key(|h| (h.as_str() != apex, (*h).clone()));
    for h in order {
        let n = &assigned[h.as_str()];
        out.listeners.push(https_listener(
            &n.listener,
            h,
            &n.certificate,
            &of.li.port443_namespaces,
            of.opts,
        ));
        out.infos.push(ListenerInfo {
            name: n.listener.clone(),
            hostname: Some(h.clone()),
            certificate: Some(n.certificate.clone()),
            on_passthrough_gateway: false,
        });
        out.certificates.push(certificate(
            of.tgw,
            of.issuer_name,
            &n.certificate,
            vec![h.clone()],
        ));
    }
}

/// dns01 and existingSecret: `*.apex`, the apex and one `*.C` per child apex, all on one
/// Secret (the wildcard Certificate's for dns01, the named one for existingSecret).
fn wildcard_listeners(of: &Of, out: &mut Listeners) {
    let apex = of.settings.apex.as_str();
    let (secret, cert) = match &of.settings.mode {
        ModeSettings::ExistingSecret { secret } => (secret.clone(), None),
        _ => {
            let n = names::wildcard_certificate(&of.tgw.name);
            (n.clone(), Some(n))
        }
    };
    let wildcard = format!("*.{apex}");
    let children = names::child_listeners(&of.li.child_apexes);
    let mut entries = vec![
        (WILDCARD_LISTENER.to_string(), wildcard.clone()),
        (APEX_LISTENER.to_string(), apex.to_string()),
    ];
    for c in &of.li.child_apexes {
        entries.push((children[c].clone(), format!("*.{c}")));
    }
    for (name, host) in entries {
        out.listeners.push(https_listener(
            &name,
            &host,
            &secret,
            &of.li.port443_namespaces,
            of.opts,
        ));
        out.infos.push(ListenerInfo {
            name,
            hostname: Some(host),
            certificate: cert.clone(),
            on_passthrough_gateway: false,
        });
    }
    if let Some(cert) = &cert {
        let mut dns_names = vec![apex.to_string(), wildcard];
        for c in &of.li.child_apexes {
            for n in [c.clone(), format!("*.{c}")] {
                if !dns_names.contains(&n) {
                    dns_names.push(n);
                }
            }
        }
        out.certificates
            .push(certificate(of.tgw, of.issuer_name, cert, dns_names));
    }
}

/// TLS passthrough, spec order; `second`: on the Gateway `<name>-passthrough`, where every
/// listener is a passthrough one and admits TLSRoutes only (no port-443 listener there has
/// other kinds, so `--uniform-port-kinds` has nothing to even out).
fn passthrough_listeners(of: &Of, out: &mut Listeners, second: bool) {
    let Of {
        settings, li, opts, ..
    } = *of;
    let tls_kinds: &[&str] = if opts.uniform_port_kinds && !second {
        &["HTTPRoute", "TLSRoute"]
    } else {
        &["TLSRoute"]
    };
    for (svc, name) in &settings.passthrough {
        let host = format!("{svc}.{}", settings.apex);
        out.listeners.push(GatewayListeners {
            name: name.clone(),
            hostname: Some(host.clone()),
            port: 443,
            protocol: "TLS".to_string(),
            tls: Some(GatewayListenersTls {
                mode: Some(GatewayListenersTlsMode::Passthrough),
                certificate_refs: None,
                options: None,
            }),
            allowed_routes: Some(GatewayListenersAllowedRoutes {
                kinds: kinds(tls_kinds),
                namespaces: Some(selector(&li.port443_namespaces)),
            }),
        });
        out.infos.push(ListenerInfo {
            name: name.clone(),
            hostname: Some(host),
            certificate: None,
            on_passthrough_gateway: second,
        });
    }
}

fn gateway(
    tgw: &TgwFacts,
    settings: &Settings,
    name: &str,
    listeners: Vec<GatewayListeners>,
) -> Gateway {
    Gateway {
        metadata: owned_meta(tgw, name),
        spec: GatewaySpec {
            gateway_class_name: settings.gateway_class.clone(),
            listeners,
            ..GatewaySpec::default()
        },
        status: None,
    }
}

/// The ACME Issuer with the mode's solver; none for existingSecret.
fn issuer(tgw: &TgwFacts, settings: &Settings, issuer_name: &str) -> Option<Issuer> {
    match &settings.mode {
        ModeSettings::ExistingSecret { .. } => None,
        mode => Some(Issuer {
            metadata: owned_meta(tgw, issuer_name),
            spec: IssuerSpec {
                acme: Acme {
                    server: settings.issuer.acme_server().to_string(),
                    private_key_secret_ref: SecretName {
                        name: names::acme_account_secret(&tgw.name),
                    },
                    solvers: vec![solver(tgw, mode)],
                },
            },
            status: None,
        }),
    }
}

fn key_ref(r: &super::api::SecretKeyRef) -> SecretKeySelector {
    SecretKeySelector {
        name: r.name.clone(),
        key: r.key.clone(),
    }
}

fn solver(tgw: &TgwFacts, mode: &ModeSettings) -> Solver {
    match mode {
        ModeSettings::Dns01(d) => {
            // Settings guarantee the provider's block is present; the selected one is the only
            // one written, whatever else the spec carries.
            let mut s = Dns01Solver::default();
            match d.provider {
                Dns01Provider::Cloudflare => {
                    s.cloudflare = d.cloudflare.as_ref().map(|c| CloudflareSolver {
                        api_token_secret_ref: key_ref(&c.api_token_secret_ref),
                    })
                }
                Dns01Provider::Route53 => {
                    s.route53 = d.route53.as_ref().map(|r| Route53Solver {
                        region: r.region.clone(),
                        access_key_id: r.access_key_id.clone(),
                        secret_access_key_secret_ref: r
                            .secret_access_key_secret_ref
                            .as_ref()
                            .map(key_ref),
                    })
                }
                Dns01Provider::Digitalocean => {
                    s.digitalocean = d.digitalocean.as_ref().map(|o| DigitalOceanSolver {
                        token_secret_ref: key_ref(&o.token_secret_ref),
                    })
                }
                Dns01Provider::Rfc2136 => {
                    s.rfc2136 = d.rfc2136.as_ref().map(|r| Rfc2136Solver {
                        nameserver: r.nameserver.clone(),
                        tsig_key_name: r.tsig_key_name.clone(),
                        tsig_algorithm: r.tsig_algorithm.clone(),
                        tsig_secret_secret_ref: key_ref(&r.tsig_secret_secret_ref),
                    })
                }
            }
            Solver {
                http01: None,
                dns01: Some(s),
            }
        }
        _ => Solver {
            http01: Some(Http01Solver {
                gateway_http_route: GatewayHttpRoute {
                    parent_refs: vec![SolverParentRef {
                        group: GATEWAY_API_GROUP.to_string(),
                        kind: "Gateway".to_string(),
                        name: tgw.name.clone(),
                        namespace: tgw.namespace.clone(),
                        section_name: HTTP_LISTENER.to_string(),
                    }],
                },
            }),
            dns01: None,
        },
    }
}

/// `<name>-http-redirect`: port 80 to https, 301, for the apex and everything under it.
fn redirect(tgw: &TgwFacts, apex: &str) -> HttpRoute {
    HttpRoute {
        metadata: owned_meta(tgw, &names::redirect_route(&tgw.name)),
        spec: HttpRouteSpec {
            // Layer 7 denies hostname-less routes in tenant namespaces; these two cover every
            // inheriting child under the apex.
            hostnames: Some(vec![apex.to_string(), format!("*.{apex}")]),
            parent_refs: Some(vec![HttpRouteParentRefs {
                group: Some(GATEWAY_API_GROUP.to_string()),
                kind: Some("Gateway".to_string()),
                name: tgw.name.clone(),
                namespace: None,
                port: None,
                section_name: Some(HTTP_LISTENER.to_string()),
            }]),
            rules: Some(vec![HttpRouteRules {
                matches: Some(vec![HttpRouteRulesMatches {
                    path: Some(HttpRouteRulesMatchesPath {
                        r#type: Some(HttpRouteRulesMatchesPathType::PathPrefix),
                        value: Some("/".to_string()),
                    }),
                    ..HttpRouteRulesMatches::default()
                }]),
                filters: Some(vec![HttpRouteRulesFilters {
                    r#type: HttpRouteRulesFiltersType::RequestRedirect,
                    request_redirect: Some(HttpRouteRulesFiltersRequestRedirect {
                        scheme: Some(HttpRouteRulesFiltersRequestRedirectScheme::Https),
                        status_code: Some(301),
                        ..HttpRouteRulesFiltersRequestRedirect::default()
                    }),
                    ..HttpRouteRulesFilters::default()
                }]),
                ..HttpRouteRules::default()
            }]),
            ..HttpRouteSpec::default()
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::reconcile::api::{Cloudflare, Dns01, Route53, SecretKeyRef};
    use crate::reconcile::testing;

    fn inputs(hosts: &[&str], children: &[&str]) -> ListenerInputs {
        ListenerInputs {
            port443_namespaces: ["tenant-alice", "cozy-harbor", "tenant-alice-x"]
                .map(String::from)
                .into(),
            hosts: hosts.iter().map(|s| s.to_string()).collect(),
            child_apexes: children.iter().map(|s| s.to_string()).collect(),
            sticky: Default::default(),
        }
    }

    fn run(w: &crate::reconcile::inputs::Inputs, li: &ListenerInputs, opts: &Options) -> Desired {
        let s = w.tgw.settings(&Default::default()).expect("valid");
        render(&w.tgw, &s, li, opts)
    }

    fn gw_json(d: &Desired) -> Value {
        serde_json::to_value(&d.gateway).expect("serializes")
    }

    fn listener<'a>(gw: &'a Value, name: &str) -> &'a Value {
        gw["spec"]["listeners"]
            .as_array()
            .and_then(|ls| ls.iter().find(|l| l["name"] == name))
            .unwrap_or_else(|| panic!("no listener {name}: {gw}"))
    }

    #[test]
    fn http01_gateway_layer1_and_order() {
        let w = testing::world();
        let d = run(
            &w,
            &inputs(
                &[
                    "z.alice.example.org",
                    "alice.example.org",
                    "harbor.alice.example.org",
                ],
                &[],
            ),
            &Options::default(),
        );
        let gw = gw_json(&d);
        let names: Vec<&str> = gw["spec"]["listeners"]
            .as_array()
            .expect("listeners")
            .iter()
            .filter_map(|l| l["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "http",
                "https-apex",
                "https-harbor",
                "https-z",
                "tls-api",
                "tls-vm-exportproxy"
            ]
        );
        assert!(gw["spec"].get("allowedListeners").is_none());
        assert_eq!(gw["spec"]["gatewayClassName"], "cilium");
        let http = listener(&gw, "http");
        assert_eq!(http["port"], 80);
        assert!(http.get("hostname").is_none());
        assert_eq!(
            http["allowedRoutes"],
            json!({"kinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
                   "namespaces": {"from": "Selector", "selector": {"matchExpressions": [
                       {"key": "kubernetes.io/metadata.name", "operator": "In",
                        "values": ["cozy-cert-manager", "tenant-alice"]}]}}})
        );
        let harbor = listener(&gw, "https-harbor");
        assert_eq!(harbor["hostname"], "harbor.alice.example.org");
        assert_eq!(harbor["protocol"], "HTTPS");
        assert_eq!(
            harbor["tls"],
            json!({"mode": "Terminate",
                   "certificateRefs": [{"group": "", "kind": "Secret", "name": "gw-harbor-tls"}]})
        );
        assert_eq!(
            harbor["allowedRoutes"]["namespaces"]["selector"]["matchExpressions"][0]["values"],
            json!(["cozy-harbor", "tenant-alice", "tenant-alice-x"])
        );
        assert_eq!(
            harbor["allowedRoutes"]["kinds"],
            json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}])
        );
        let tls = listener(&gw, "tls-api");
        assert_eq!(tls["hostname"], "api.alice.example.org");
        assert_eq!(tls["protocol"], "TLS");
        assert_eq!(tls["tls"], json!({"mode": "Passthrough"}));
        assert_eq!(
            tls["allowedRoutes"]["kinds"],
            json!([{"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}])
        );

        // One Certificate per host, a single dnsName, the tenant Issuer.
        let certs: Vec<Value> = d
            .certificates
            .iter()
            .map(|c| serde_json::to_value(c).expect("json"))
            .collect();
        assert_eq!(certs.len(), 3);
        let harbor_cert = certs
            .iter()
            .find(|c| c["metadata"]["name"] == "gw-harbor-tls")
            .expect("cert");
        assert_eq!(
            harbor_cert["spec"],
            json!({"secretName": "gw-harbor-tls", "dnsNames": ["harbor.alice.example.org"],
                   "issuerRef": {"group": "cert-manager.io", "kind": "Issuer", "name": "gw-gateway"}})
        );
        let issuer = serde_json::to_value(d.issuer.as_ref().expect("issuer")).expect("json");
        assert_eq!(
            issuer["spec"]["acme"],
            json!({"server": "https://acme-v02.api.letsencrypt.org/directory",
                   "privateKeySecretRef": {"name": "gw-acme-account"},
                   "solvers": [{"http01": {"gatewayHTTPRoute": {"parentRefs": [
                       {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw",
                        "namespace": "tenant-alice", "sectionName": "http"}]}}}]})
        );
    }

    #[test]
    fn uniform_port_kinds_lists_both_on_port_443_only() {
        let w = testing::world();
        let d = run(
            &w,
            &inputs(&["alice.example.org"], &[]),
            &Options {
                uniform_port_kinds: true,
                ..Options::default()
            },
        );
        let gw = gw_json(&d);
        let both = json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"},
                          {"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}]);
        assert_eq!(listener(&gw, "https-apex")["allowedRoutes"]["kinds"], both);
        assert_eq!(listener(&gw, "tls-api")["allowedRoutes"]["kinds"], both);
        assert_eq!(
            listener(&gw, "http")["allowedRoutes"]["kinds"],
            json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}])
        );
    }

    #[test]
    fn dns01_listeners_and_one_certificate() {
        let mut w = testing::world();
        w.tgw.spec = testing::dns01_spec();
        w.tgw.spec.issuer_name = crate::reconcile::api::IssuerName::LetsencryptStage;
        let d = run(
            &w,
            &inputs(&[], &["bob.alice.example.org", "carol.alice.example.org"]),
            &Options::default(),
        );
        let gw = gw_json(&d);
        let hosts: Vec<(&str, &str)> = gw["spec"]["listeners"]
            .as_array()
            .expect("listeners")
            .iter()
            .skip(1)
            .take(4)
            .map(|l| {
                (
                    l["name"].as_str().unwrap_or(""),
                    l["hostname"].as_str().unwrap_or(""),
                )
            })
            .collect();
        let bob = format!("https-child-bob-{}", names::h8("bob.alice.example.org"));
        let carol = format!("https-child-carol-{}", names::h8("carol.alice.example.org"));
        assert_eq!(
            hosts,
            [
                ("https", "*.alice.example.org"),
                ("https-apex", "alice.example.org"),
                (bob.as_str(), "*.bob.alice.example.org"),
                (carol.as_str(), "*.carol.alice.example.org"),
            ]
        );
        assert_eq!(d.certificates.len(), 1);
        assert_eq!(
            d.certificates[0].spec.dns_names,
            [
                "alice.example.org",
                "*.alice.example.org",
                "bob.alice.example.org",
                "*.bob.alice.example.org",
                "carol.alice.example.org",
                "*.carol.alice.example.org"
            ]
        );
        assert_eq!(
            d.certificates[0].metadata.name.as_deref(),
            Some("gw-gateway-tls")
        );
        assert_eq!(
            listener(&gw, "https")["tls"]["certificateRefs"][0]["name"],
            "gw-gateway-tls"
        );
        let issuer = serde_json::to_value(d.issuer.as_ref().expect("issuer")).expect("json");
        assert_eq!(
            issuer["spec"]["acme"]["server"],
            "https://acme-staging-v02.api.letsencrypt.org/directory"
        );
        assert_eq!(
            issuer["spec"]["acme"]["solvers"][0],
            json!({"dns01": {"cloudflare": {"apiTokenSecretRef":
                {"name": "cloudflare-api-token-secret", "key": "api-token"}}}})
        );
    }

    #[test]
    fn every_dns01_provider_block() {
        let key = |n: &str, k: &str| SecretKeyRef {
            name: n.into(),
            key: k.into(),
        };
        let cases: Vec<(Dns01, Value)> = vec![
            (
                Dns01 {
                    provider: Dns01Provider::Route53,
                    route53: Some(Route53 {
                        region: "eu-west-1".into(),
                        access_key_id: Some("AKIA1".into()),
                        secret_access_key_secret_ref: Some(key("r53", "secret-access-key")),
                    }),
                    // A block of another provider is ignored.
                    cloudflare: Some(Cloudflare {
                        api_token_secret_ref: key("cf", "t"),
                    }),
                    digitalocean: None,
                    rfc2136: None,
                },
                json!({"route53": {"region": "eu-west-1", "accessKeyID": "AKIA1",
                       "secretAccessKeySecretRef": {"name": "r53", "key": "secret-access-key"}}}),
            ),
            (
                Dns01 {
                    provider: Dns01Provider::Route53,
                    route53: Some(Route53 {
                        region: "us-east-1".into(),
                        access_key_id: None,
                        secret_access_key_secret_ref: None,
                    }),
                    cloudflare: None,
                    digitalocean: None,
                    rfc2136: None,
                },
                json!({"route53": {"region": "us-east-1"}}),
            ),
            (
                Dns01 {
                    provider: Dns01Provider::Digitalocean,
                    digitalocean: Some(crate::reconcile::api::DigitalOcean {
                        token_secret_ref: key("digitalocean-api-token-secret", "access-token"),
                    }),
                    cloudflare: None,
                    route53: None,
                    rfc2136: None,
                },
                json!({"digitalocean": {"tokenSecretRef":
                    {"name": "digitalocean-api-token-secret", "key": "access-token"}}}),
            ),
            (
                serde_json::from_value(json!({"provider": "rfc2136", "rfc2136": {
                    "nameserver": "10.0.0.53:53", "tsigKeyName": "tgw.",
                    "tsigSecretSecretRef": {"name": "tsig", "key": "tsig-secret-key"}}}))
                .expect("spec with the default tsigAlgorithm"),
                json!({"rfc2136": {"nameserver": "10.0.0.53:53", "tsigKeyName": "tgw.",
                       "tsigAlgorithm": "HMACSHA256",
                       "tsigSecretSecretRef": {"name": "tsig", "key": "tsig-secret-key"}}}),
            ),
        ];
        for (dns01, want) in cases {
            let mut w = testing::world();
            w.tgw.spec = testing::dns01_spec();
            w.tgw.spec.dns01 = Some(dns01);
            let d = run(&w, &inputs(&[], &[]), &Options::default());
            let issuer = serde_json::to_value(d.issuer.as_ref().expect("issuer")).expect("json");
            assert_eq!(issuer["spec"]["acme"]["solvers"][0]["dns01"], want);
        }
    }

    #[test]
    fn existing_secret_has_no_issuer_no_certificate() {
        let mut w = testing::world();
        w.tgw.spec = testing::existing_secret_spec();
        let d = run(
            &w,
            &inputs(&["ignored.alice.example.org"], &["bob.alice.example.org"]),
            &Options::default(),
        );
        assert!(d.issuer.is_none());
        assert!(d.certificates.is_empty());
        let gw = gw_json(&d);
        for l in gw["spec"]["listeners"].as_array().expect("listeners") {
            if l["protocol"] == "HTTPS" {
                assert_eq!(
                    l["tls"]["certificateRefs"][0]["name"], "wildcard-tls",
                    "{l}"
                );
            }
        }
        assert_eq!(gw["spec"]["listeners"].as_array().map(Vec::len), Some(6));
    }

    /// SPEC §3.10: the pairs a data plane may refuse, from the listener specs alone.
    #[test]
    fn overlapping_listeners_are_terminate_passthrough_pairs_of_one_port() {
        let mut w = testing::world();
        w.tgw.spec = testing::dns01_spec();
        w.tgw.spec.tls_passthrough_services = vec!["api".into(), "bob".into()];
        let d = run(
            &w,
            &inputs(&[], &["bob.alice.example.org"]),
            &Options::default(),
        );
        assert_eq!(
            overlapping_listeners(&d.gateway),
            [
                ("https".to_string(), "tls-api".to_string()),
                ("https".to_string(), "tls-bob".to_string())
            ],
            "*.bob.alice.example.org does not cover bob.alice.example.org, the apex listener \
             covers no child"
        );
        // http01: no terminate listener for a passthrough hostname is rendered at all; other
        // ports and the HTTP listener never pair.
        let w = testing::world();
        let d = run(
            &w,
            &inputs(&["alice.example.org", "www.alice.example.org"], &[]),
            &Options::default(),
        );
        assert!(overlapping_listeners(&d.gateway).is_empty());
        let mut g = d.gateway.clone();
        g.spec.listeners[1].hostname = Some("*.alice.example.org".into());
        assert_eq!(
            overlapping_listeners(&g),
            [
                ("https-apex".to_string(), "tls-api".to_string()),
                ("https-apex".to_string(), "tls-vm-exportproxy".to_string())
            ]
        );
        g.spec.listeners[1].port = 8443;
        assert!(overlapping_listeners(&g).is_empty(), "another port");
    }

    #[test]
    fn redirect_route_and_ownership() {
        let w = testing::world();
        let d = run(&w, &inputs(&[], &[]), &Options::default());
        let r = serde_json::to_value(&d.redirect).expect("json");
        assert_eq!(r["metadata"]["name"], "gw-http-redirect");
        assert_eq!(
            r["spec"],
            json!({"hostnames": ["alice.example.org", "*.alice.example.org"],
                   "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                   "name": "gw", "sectionName": "http"}],
                   "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                              "filters": [{"type": "RequestRedirect",
                                           "requestRedirect": {"scheme": "https", "statusCode": 301}}]}]})
        );
        for meta in [
            &d.gateway.metadata,
            &d.redirect.metadata,
            &d.issuer.as_ref().expect("issuer").metadata,
        ] {
            assert_eq!(meta.namespace.as_deref(), Some("tenant-alice"));
            assert_eq!(
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get("app.kubernetes.io/managed-by"))
                    .map(String::as_str),
                Some("tenant-gateway")
            );
            let owner = &meta.owner_references.as_ref().expect("owner")[0];
            assert_eq!(owner.kind, "TenantGateway");
            assert_eq!(owner.api_version, "gateway.cozystack.io/v1alpha1");
            assert_eq!(owner.uid, "uid-gw");
            assert_eq!(owner.controller, Some(true));
        }
    }
}
