//! The TenantGateway planner (`reconcile::plan`, `reconcile::cleanup`) on arbitrary specs,
//! namespaces, routes, sibling and rival TenantGateways and leftover objects.
//!
//! The whole input drives `arbitrary`: strings are drawn from pools of the values the planner
//! compares (apexes, near misses, reserved listener stems, namespace names) or are arbitrary
//! text, so both the interesting paths and garbage are reached.
//!
//! Invariants (SPEC §3.2, §3.3, §3.5, §3.7):
//! - no panic, in `plan`, `cleanup` and on every later round;
//! - listener names unique, DNS-1123 labels, at most 64 listeners; Certificate, Issuer and
//!   redirect names labels, Certificates unique; every hostname listener valid and within the
//!   checked apex; http01 Certificates one per HTTPS hostname listener;
//! - writes only to namespaces that exist, and never a namespace label or annotation the
//!   planner did not write (no stealing): an Attach only where the gateway label is absent or
//!   ours, a Detach only where our attached-by annotation is;
//! - applies only of objects carrying our controller ownerReference and managed-by label;
//!   deletes only of owned objects that are not desired; never a write to a same-named object
//!   it does not own;
//! - shuffling every input list gives the same plan;
//! - convergence: once the API server has executed the writes (`testing::converge`), the next
//!   plan has no writes (feeding desired back as observed is a fixed point); also after the
//!   data plane reports ready (one status write, then none);
//! - cleanup leaves no attached-by annotation and no route status entry of ours, and a second
//!   cleanup has nothing to do.

#![no_main]

use std::collections::BTreeSet;
use std::sync::Arc;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use tenant_gateway::cluster::nsmeta::NamespaceMeta;
use tenant_gateway::hostname;
use tenant_gateway::platform::{
    ATTACHED_BY_ANNOTATION, GATEWAY_LABEL, HOST_LABEL, MANAGED_BY_LABEL, PassthroughGateway, Scope,
};
use tenant_gateway::reconcile::api::{
    CertMode, Cloudflare, DigitalOcean, Dns01, Dns01Provider, IssuerName, LocalSecretRef, Rfc2136,
    Route53, SecretKeyRef, TenantGatewaySpec,
};
use tenant_gateway::reconcile::diff::{Object, Write};
use tenant_gateway::reconcile::inputs::{
    AttachClaim, Inputs, Observed, ParentRef, RouteFacts, RouteKind, RouteParentStatus, SharedRef,
    Sibling, TgwFacts,
};
use tenant_gateway::reconcile::labels::NamespaceWrite;
use tenant_gateway::reconcile::testing::{self, Rng, at};
use tenant_gateway::reconcile::{self, Options, Plan, status};

const APEX: &str = "alice.example.org";

/// Namespace names: the TenantGateway's, its children, platform ones, near misses.
fn namespace(u: &mut Unstructured<'_>) -> Result<String> {
    const POOL: [&str; 10] = [
        "tenant-alice",
        "tenant-alice-x",
        "tenant-alice-bob",
        "tenant-bob",
        "cozy-harbor",
        "cozy-monitoring",
        "cozy-cert-manager",
        "default",
        "tenant-",
        "cozy-",
    ];
    pick_or_any(u, &POOL)
}

/// A label of a hostname: reserved stems, lookalikes of generated names, anything.
fn host_label(u: &mut Unstructured<'_>) -> Result<String> {
    const POOL: [&str; 12] = [
        "www",
        "apex",
        "gateway",
        "child-x",
        "https",
        "a",
        "api",
        "tls-api",
        "web-1",
        "xn--80ak6aa92e",
        "-bad",
        "UPPER",
    ];
    Ok(match u.choose_index(4)? {
        0 => "l".repeat(u.int_in_range(1..=70)?),
        1 => format!("{}{}", pick_or_any(u, &POOL)?, u.int_in_range(0..=40u8)?),
        _ => pick_or_any(u, &POOL)?,
    })
}

/// Apexes and suffixes the planner compares hostnames with.
fn suffix(u: &mut Unstructured<'_>) -> Result<String> {
    const POOL: [&str; 8] = [
        APEX,
        "x.alice.example.org",
        "bob.alice.example.org",
        "example.org",
        "Alice.Example.ORG",
        "evilalice.example.org",
        "customer1.io",
        "alice.example.org.",
    ];
    pick_or_any(u, &POOL)
}

fn hostname(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u.choose_index(8)? {
        0 => suffix(u)?,
        1 => format!("*.{}", suffix(u)?),
        2 => format!("{}.{}.{}", host_label(u)?, host_label(u)?, suffix(u)?),
        3 => u.arbitrary()?,
        // A long chain: near and over the 253-byte limit.
        4 => {
            let n = u.int_in_range(1..=40)?;
            let mut h = String::new();
            for _ in 0..n {
                h.push_str(&host_label(u)?);
                h.push('.');
            }
            h.push_str(&suffix(u)?);
            h
        }
        _ => format!("{}.{}", host_label(u)?, suffix(u)?),
    })
}

/// A pool entry most of the time, arbitrary text otherwise.
fn pick_or_any(u: &mut Unstructured<'_>, pool: &[&str]) -> Result<String> {
    if u.ratio(1, 8)? {
        u.arbitrary()
    } else {
        Ok(pool[u.choose_index(pool.len())?].to_string())
    }
}

fn list<T>(
    u: &mut Unstructured<'_>,
    max: usize,
    mut item: impl FnMut(&mut Unstructured<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let n = u.int_in_range(0..=max)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(item(u)?);
    }
    Ok(out)
}

fn secret_ref(u: &mut Unstructured<'_>) -> Result<SecretKeyRef> {
    Ok(SecretKeyRef {
        name: pick_or_any(u, &["cloudflare-api-token-secret", ""])?,
        key: pick_or_any(u, &["api-token", ""])?,
    })
}

fn dns01(u: &mut Unstructured<'_>) -> Result<Dns01> {
    let provider = match u.choose_index(4)? {
        0 => Dns01Provider::Cloudflare,
        1 => Dns01Provider::Route53,
        2 => Dns01Provider::Digitalocean,
        _ => Dns01Provider::Rfc2136,
    };
    let cloudflare = if u.arbitrary()? {
        Some(Cloudflare {
            api_token_secret_ref: secret_ref(u)?,
        })
    } else {
        None
    };
    let route53 = if u.arbitrary()? {
        Some(Route53 {
            region: pick_or_any(u, &["eu-west-1", "", " "])?,
            access_key_id: u.arbitrary()?,
            secret_access_key_secret_ref: if u.arbitrary()? {
                Some(secret_ref(u)?)
            } else {
                None
            },
        })
    } else {
        None
    };
    let digitalocean = if u.arbitrary()? {
        Some(DigitalOcean {
            token_secret_ref: secret_ref(u)?,
        })
    } else {
        None
    };
    let rfc2136 = if u.arbitrary()? {
        Some(Rfc2136 {
            nameserver: pick_or_any(u, &["10.0.0.1:53", ""])?,
            tsig_key_name: u.arbitrary()?,
            tsig_algorithm: pick_or_any(u, &["HMACSHA256"])?,
            tsig_secret_secret_ref: secret_ref(u)?,
        })
    } else {
        None
    };
    Ok(Dns01 {
        provider,
        cloudflare,
        route53,
        digitalocean,
        rfc2136,
    })
}

fn spec(u: &mut Unstructured<'_>) -> Result<TenantGatewaySpec> {
    let cert_mode = match u.choose_index(3)? {
        0 => CertMode::Http01,
        1 => CertMode::Dns01,
        _ => CertMode::ExistingSecret,
    };
    // Mostly consistent with the mode, so rendering is reached; sometimes not.
    let consistent = u.ratio(7, 8)?;
    let dns01 = if (cert_mode == CertMode::Dns01) == consistent {
        Some(dns01(u)?)
    } else {
        None
    };
    let wildcard_secret_ref = if (cert_mode == CertMode::ExistingSecret) == consistent {
        Some(LocalSecretRef {
            name: pick_or_any(u, &["wildcard-tls", "", " "])?,
        })
    } else {
        None
    };
    Ok(TenantGatewaySpec {
        apex: if u.ratio(7, 8)? {
            APEX.to_string()
        } else {
            suffix(u)?
        },
        cert_mode,
        issuer_name: if u.arbitrary()? {
            IssuerName::LetsencryptProd
        } else {
            IssuerName::LetsencryptStage
        },
        dns01,
        wildcard_secret_ref,
        attached_namespaces: list(u, 6, namespace)?,
        tls_passthrough_services: list(u, 70, |u| {
            pick_or_any(
                u,
                &[
                    "api",
                    "vm-exportproxy",
                    "cdi-uploadproxy",
                    "Bad_Svc",
                    "",
                    "apex",
                ],
            )
        })?,
        gateway_class_name: pick_or_any(u, &["cilium", ""])?,
    })
}

/// A TenantGateway name: short, dotted, 253 bytes, or anything.
fn tgw_name(u: &mut Unstructured<'_>) -> Result<String> {
    let long = "n".repeat(253);
    pick_or_any(u, &["gw", "a.b.c", &long, "x", "gateway", "gw-apex"])
}

fn namespace_meta(u: &mut Unstructured<'_>) -> Result<Arc<NamespaceMeta>> {
    let name = namespace(u)?;
    let host = if u.ratio(3, 4)? {
        Some(suffix(u)?)
    } else {
        None
    };
    let gateway = if u.ratio(2, 3)? {
        Some(namespace(u)?)
    } else {
        None
    };
    let attached_by = if u.ratio(1, 3)? {
        Some(namespace(u)?)
    } else {
        None
    };
    let labels: Vec<(&str, &str)> = [(HOST_LABEL, &host), (GATEWAY_LABEL, &gateway)]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.as_deref()?)))
        .collect();
    let annotations: Vec<(&str, &str)> = attached_by
        .iter()
        .map(|a| (ATTACHED_BY_ANNOTATION, a.as_str()))
        .collect();
    Ok(testing::namespace(&name, &labels, &annotations))
}

fn parent_ref(u: &mut Unstructured<'_>, gw: &str) -> Result<SharedRef> {
    Ok(SharedRef::from(ParentRef {
        group: match u.choose_index(6)? {
            0 => Some("gateway.networking.k8s.io".to_string()),
            1 => Some(u.arbitrary()?),
            _ => None,
        },
        kind: match u.choose_index(6)? {
            0 => Some("Gateway".to_string()),
            1 => Some("ListenerSet".to_string()),
            _ => None,
        },
        namespace: if u.ratio(2, 3)? {
            Some("tenant-alice".to_string())
        } else if u.arbitrary()? {
            Some(namespace(u)?)
        } else {
            None
        },
        name: if u.ratio(7, 8)? {
            gw.to_string()
        } else {
            tgw_name(u)?
        },
        section_name: match u.choose_index(8)? {
            0 => Some("http".to_string()),
            1 => Some("tls-api".to_string()),
            2 => Some("https-apex".to_string()),
            3 => Some(format!("https-{}", host_label(u)?)),
            4 => Some(u.arbitrary()?),
            _ => None,
        },
        port: u.arbitrary()?,
    }))
}

fn route(u: &mut Unstructured<'_>, i: usize, gw: &str) -> Result<RouteFacts> {
    let kind = if u.ratio(1, 6)? {
        RouteKind::TlsRoute
    } else {
        RouteKind::HttpRoute
    };
    let mut parent_refs = vec![parent_ref(u, gw)?];
    parent_refs.extend(list(u, 2, |u| parent_ref(u, gw))?);
    Ok(RouteFacts {
        kind,
        namespace: namespace(u)?.into(),
        // Mostly distinct names; sometimes a repeat (the same route listed twice).
        name: if u.ratio(1, 16)? {
            "r0".into()
        } else {
            format!("r{i}").into()
        },
        creation: if u.ratio(7, 8)? {
            Some(at(i64::from(u.int_in_range(0..=60u8)?)))
        } else {
            None
        },
        generation: Some(i64::from(u.int_in_range(1..=3u8)?)),
        resource_version: Some(format!("{}", u.int_in_range(1..=9u8)?).into()),
        hostnames: list(u, 4, hostname)?.into(),
        parent_refs: parent_refs.into(),
        our_status: if u.ratio(1, 8)? {
            // A stale entry of ours from an earlier life of the Gateway.
            [RouteParentStatus {
                parent_ref: parent_ref(u, gw)?,
                conditions: Vec::new().into(),
            }]
            .into()
        } else {
            Box::default()
        },
        // The planner does not read where the entries sit (only the status write does).
        parents_layout: None,
    })
}

/// Objects found in the namespace before this reconcile: a same-named foreign object or an
/// owned leftover, by the names the planner renders.
fn observed(u: &mut Unstructured<'_>, tgw: &TgwFacts, cfg: &Options) -> Result<Observed> {
    let mut obs = Observed::default();
    if !u.ratio(1, 4)? {
        return Ok(obs);
    }
    // Render a plausible desired state and keep parts of it, foreign or owned.
    let seed = Inputs {
        tgw: tgw.clone(),
        siblings: Vec::new(),
        other_claims: Vec::new(),
        namespaces: Vec::new(),
        routes: Vec::new(),
        observed: Observed::default(),
        now: at(1),
    };
    let Some(d) = reconcile::plan(&seed, cfg).desired else {
        return Ok(obs);
    };
    let foreign =
        |m: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, how: u8| match how % 3
        {
            0 => m.owner_references = None,
            1 => {
                if let Some(l) = m.labels.as_mut() {
                    l.remove(MANAGED_BY_LABEL);
                }
            }
            _ => {}
        };
    if u.arbitrary()? {
        let mut g = d.gateway.clone();
        foreign(&mut g.metadata, u.arbitrary()?);
        if u.arbitrary()? {
            g.spec.listeners.truncate(1);
        }
        obs.gateways.push(g);
    }
    for c in &d.certificates {
        if u.arbitrary()? {
            let mut c = c.clone();
            foreign(&mut c.metadata, u.arbitrary()?);
            obs.certificates.push(c);
        }
    }
    // An owned leftover under a name no longer rendered.
    if let Some(c) = d.certificates.first()
        && u.arbitrary()?
    {
        let mut c = c.clone();
        c.metadata.name = Some(format!("{}-old-tls", tgw.name));
        c.metadata.uid = Some("uid-old".to_string());
        obs.certificates.push(c);
    }
    if let Some(i) = &d.issuer
        && u.arbitrary()?
    {
        let mut i = i.clone();
        foreign(&mut i.metadata, u.arbitrary()?);
        obs.issuers.push(i);
    }
    if u.arbitrary()? {
        let mut r = d.redirect.clone();
        foreign(&mut r.metadata, u.arbitrary()?);
        obs.http_routes.push(r);
    }
    Ok(obs)
}

fn world(u: &mut Unstructured<'_>) -> Result<(Inputs, Options)> {
    let cfg = Options {
        scope: if u.ratio(1, 8)? {
            Scope {
                tenant_prefix: pick_or_any(u, &["", "tenant-"])?,
                system_prefix: pick_or_any(u, &["", "cozy-"])?,
            }
        } else {
            Scope::default()
        },
        uniform_port_kinds: u.ratio(1, 4)?,
        passthrough_gateway: if u.ratio(1, 3)? {
            PassthroughGateway::Separate
        } else {
            PassthroughGateway::Shared
        },
        ..Options::default()
    };
    let tgw = TgwFacts {
        namespace: if u.ratio(7, 8)? {
            "tenant-alice".to_string()
        } else {
            namespace(u)?
        },
        name: tgw_name(u)?,
        uid: "uid-gw".to_string(),
        generation: Some(i64::from(u.int_in_range(1..=4u8)?)),
        creation: Some(at(100)),
        spec: spec(u)?,
        status: None,
    };
    let mut namespaces = vec![testing::tenant("tenant-alice", APEX, "tenant-alice")];
    if u.ratio(1, 8)? {
        namespaces.clear();
    }
    namespaces.extend(list(u, 10, namespace_meta)?);
    let siblings = list(u, 2, |u| {
        Ok(Sibling {
            name: tgw_name(u)?,
            creation: if u.arbitrary()? {
                Some(at(i64::from(u.int_in_range(0..=200u8)?)))
            } else {
                None
            },
        })
    })?;
    let other_claims = list(u, 3, |u| {
        Ok(AttachClaim {
            namespace: namespace(u)?,
            name: tgw_name(u)?,
            apex: suffix(u)?,
            attached_namespaces: list(u, 3, namespace)?,
        })
    })?;
    let n_routes = u.int_in_range(0..=100usize)?;
    let mut route_list = Vec::with_capacity(n_routes);
    for i in 0..n_routes {
        route_list.push(route(u, i, &tgw.name)?);
    }
    let mut observed = observed(u, &tgw, &cfg)?;
    // The edge reads each kind from a cache keyed by name: one namespace per name, one route
    // per (kind, namespace, name), one object per name and kind. Keep the first of each.
    let mut seen = BTreeSet::new();
    namespaces.retain(|n| seen.insert(n.name().to_string()));
    let mut seen = BTreeSet::new();
    route_list.retain(|r| seen.insert((r.kind, r.namespace.clone(), r.name.clone())));
    let mut seen = BTreeSet::new();
    observed
        .certificates
        .retain(|c| seen.insert(c.metadata.name.clone()));
    Ok((
        Inputs {
            tgw,
            siblings,
            other_claims,
            namespaces,
            routes: route_list,
            observed,
            now: at(10_000),
        },
        cfg,
    ))
}

fn is_ours(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, tgw: &TgwFacts) -> bool {
    reconcile::diff::owned(m, tgw)
}

/// The invariants of one plan against the inputs it was computed from.
fn check_plan(w: &Inputs, p: &Plan, cfg: &Options) {
    if let Some(d) = &p.desired {
        let listeners: Vec<&str> = d
            .gateway
            .spec
            .listeners
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        assert!(
            listeners.len() <= tenant_gateway::claims::MAX_LISTENERS,
            "{} listeners",
            listeners.len()
        );
        let unique: BTreeSet<&str> = listeners.iter().copied().collect();
        assert_eq!(
            unique.len(),
            listeners.len(),
            "duplicate listener: {listeners:?}"
        );
        for n in &listeners {
            assert!(
                tenant_gateway::hostname::is_dns_label(n),
                "listener name {n:?}"
            );
        }
        let certs: Vec<&str> = d
            .certificates
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        assert_eq!(certs.len(), d.certificates.len(), "unnamed certificate");
        let unique_certs: BTreeSet<&str> = certs.iter().copied().collect();
        assert_eq!(
            unique_certs.len(),
            certs.len(),
            "duplicate certificate: {certs:?}"
        );
        let mut names_all: Vec<&str> = certs.clone();
        names_all.extend(d.issuer.iter().filter_map(|i| i.metadata.name.as_deref()));
        names_all.push(d.redirect.metadata.name.as_deref().unwrap_or_default());
        names_all.push(d.gateway.metadata.name.as_deref().unwrap_or_default());
        names_all.extend(
            d.passthrough_gateway
                .iter()
                .filter_map(|g| g.metadata.name.as_deref()),
        );
        for n in names_all {
            // The Gateway keeps the TenantGateway's own name (a subdomain, not a label).
            let ok = if Some(n) == d.gateway.metadata.name.as_deref() {
                n == w.tgw.name
            } else {
                tenant_gateway::hostname::is_dns_label(n)
            };
            assert!(ok, "object name {n:?}");
        }
        let apex = w
            .tgw
            .settings(&cfg.scope)
            .expect("a rendered plan has valid settings")
            .apex;
        let second = d.passthrough_gateway.iter().flat_map(|g| &g.spec.listeners);
        for l in d.gateway.spec.listeners.iter().chain(second) {
            if let Some(h) = &l.hostname {
                assert!(hostname::validate(h).is_ok(), "listener hostname {h:?}");
                assert!(hostname::within(h, &apex), "{h} outside {apex}");
            }
        }
        if w.tgw.spec.cert_mode == CertMode::Http01 {
            let https = d
                .gateway
                .spec
                .listeners
                .iter()
                .filter(|l| l.protocol == "HTTPS")
                .count();
            assert_eq!(
                https,
                d.certificates.len(),
                "http01: one Certificate per listener"
            );
        }
    }
    for write in &p.writes {
        match write {
            Write::Apply(o) => {
                let m = match o {
                    Object::Gateway(g) => &g.metadata,
                    Object::Issuer(i) => &i.metadata,
                    Object::Certificate(c) => &c.metadata,
                    Object::HttpRoute(r) => &r.metadata,
                };
                assert!(
                    is_ours(m, &w.tgw),
                    "apply without our ownership: {:?}",
                    o.name()
                );
                let observed_foreign = match o {
                    Object::Gateway(_) => w
                        .observed
                        .gateways
                        .iter()
                        .any(|g| g.metadata.name == m.name && !is_ours(&g.metadata, &w.tgw)),
                    Object::Issuer(_) => w
                        .observed
                        .issuers
                        .iter()
                        .any(|g| g.metadata.name == m.name && !is_ours(&g.metadata, &w.tgw)),
                    Object::Certificate(_) => w
                        .observed
                        .certificates
                        .iter()
                        .any(|g| g.metadata.name == m.name && !is_ours(&g.metadata, &w.tgw)),
                    Object::HttpRoute(_) => w
                        .observed
                        .http_routes
                        .iter()
                        .any(|g| g.metadata.name == m.name && !is_ours(&g.metadata, &w.tgw)),
                };
                assert!(!observed_foreign, "overwrites a foreign {:?}", o.name());
            }
            Write::Delete { kind, name, .. } => {
                let metas: Vec<_> = match kind {
                    reconcile::diff::ObjectKind::Gateway => {
                        w.observed.gateways.iter().map(|o| &o.metadata).collect()
                    }
                    reconcile::diff::ObjectKind::Issuer => {
                        w.observed.issuers.iter().map(|o| &o.metadata).collect()
                    }
                    reconcile::diff::ObjectKind::Certificate => w
                        .observed
                        .certificates
                        .iter()
                        .map(|o| &o.metadata)
                        .collect(),
                    reconcile::diff::ObjectKind::HttpRoute => w
                        .observed
                        .http_routes
                        .iter()
                        .map(|o| &o.metadata)
                        .collect::<Vec<_>>(),
                };
                assert!(
                    metas
                        .iter()
                        .any(|m| m.name.as_deref() == Some(name.as_str()) && is_ours(m, &w.tgw)),
                    "deletes {name}, which is not ours"
                );
            }
            Write::Namespace(nw) => {
                let ns = w
                    .namespaces
                    .iter()
                    .find(|n| n.name() == nw.namespace())
                    .unwrap_or_else(|| panic!("write to a missing namespace: {nw:?}"));
                let own = w.tgw.namespace.as_str();
                match nw {
                    NamespaceWrite::Attach { gateway, .. } => {
                        assert_eq!(gateway, own);
                        // Only an absent label, or one we wrote, is (re)written.
                        let ours = ns.attached_by() == Some(own);
                        assert!(
                            ns.gateway().is_none() || ours || ns.attached_by().is_some(),
                            "steals {ns:?}"
                        );
                        // Never another TenantGateway's marked label while it lists it.
                        // (The own namespace is always labelled: no rival check there.)
                        if let Some(by) = ns.attached_by().filter(|b| *b != own && ns.name() != own)
                        {
                            let rival_lists = w.other_claims.iter().any(|c| {
                                c.namespace == by
                                    && c.attached_namespaces.iter().any(|a| a == ns.name())
                            });
                            let apex = w
                                .tgw
                                .settings(&cfg.scope)
                                .map(|s| s.apex)
                                .unwrap_or_default();
                            let closer = w.other_claims.iter().any(|c| {
                                c.namespace == by
                                    && c.attached_namespaces.iter().any(|a| a == ns.name())
                                    && (c.apex.len(), c.namespace.as_str()) < (apex.len(), own)
                            });
                            assert!(!closer, "steals {ns:?} from a closer claim ({rival_lists})");
                        }
                    }
                    NamespaceWrite::Detach { gateway, .. } => {
                        assert_eq!(gateway, own);
                        assert_eq!(
                            ns.attached_by(),
                            Some(own),
                            "detaches a label it did not write"
                        );
                    }
                }
            }
            Write::RouteStatus(rs) => {
                assert!(
                    w.routes.iter().any(|r| r.kind == rs.kind
                        && *r.namespace == *rs.namespace
                        && *r.name == *rs.name),
                    "status write to an unknown route"
                );
                assert_eq!(
                    (rs.gateway_namespace.as_str(), rs.gateway_name.as_str()),
                    (w.tgw.namespace.as_str(), w.tgw.name.as_str())
                );
            }
            Write::Status(_) => {}
        }
    }
}

fn no_writes(p: &Plan, what: &str, w: &Inputs) {
    assert!(
        p.writes.is_empty(),
        "{what}: {} writes after convergence: {:#?}\ninputs: {w:#?}",
        p.writes.len(),
        p.writes
    );
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok((w, cfg)) = world(&mut u) else {
        return;
    };
    let shuffle_seed: u64 = u.arbitrary().unwrap_or(0);

    let p = reconcile::plan(&w, &cfg);
    check_plan(&w, &p, &cfg);
    let mut rng = Rng::new(shuffle_seed);
    assert_eq!(
        reconcile::plan(&testing::shuffled(&w, &mut rng), &cfg),
        p,
        "plan depends on input order"
    );

    // The API server executes the writes; the next plan is a fixed point.
    let mut w2 = testing::converge(&w, &p);
    w2.now = at(20_000);
    let p2 = reconcile::plan(&w2, &cfg);
    check_plan(&w2, &p2, &cfg);
    no_writes(&p2, "second plan", &w2);

    // The data plane reports ready: at most a status write, then nothing.
    testing::make_ready(&mut w2);
    let p3 = reconcile::plan(&w2, &cfg);
    assert!(
        p3.writes.iter().all(|x| matches!(x, Write::Status(_))),
        "readiness changed more than the status: {:#?}",
        p3.writes
    );
    let mut w3 = testing::converge(&w2, &p3);
    w3.now = at(30_000);
    no_writes(&reconcile::plan(&w3, &cfg), "after ready", &w3);

    // The finalizer undoes our marks and is then done.
    let writes = reconcile::cleanup(&w3, &cfg.scope);
    let done = testing::converge(
        &w3,
        &Plan {
            desired: None,
            writes,
            status: Default::default(),
            refused: Vec::new(),
            summary: Default::default(),
            notices: Vec::new(),
        },
    );
    let own = done.tgw.namespace.as_str();
    // Marks on tenant namespaces other than our own were never ours (a tenant can write the
    // annotation there; SPEC §3.5): cleanup leaves them, and everything else of ours goes.
    assert!(
        done.namespaces
            .iter()
            .filter(|n| n.name() == own || !cfg.scope.is_tenant(n.name()))
            .all(|n| n.attached_by() != Some(own)),
        "cleanup left an attached-by annotation"
    );
    assert!(
        done.namespaces
            .iter()
            .filter(|n| n.name() != own && cfg.scope.is_tenant(n.name()))
            .zip(
                w3.namespaces
                    .iter()
                    .filter(|n| n.name() != own && cfg.scope.is_tenant(n.name()))
            )
            .all(|(after, before)| after == before),
        "cleanup touched a tenant namespace it never wrote"
    );
    let gw = (own, done.tgw.name.as_str());
    for r in &done.routes {
        assert!(
            status::entries_for(&r.our_status, &r.namespace, gw).is_empty(),
            "cleanup left a route status entry on {}/{}",
            r.namespace,
            r.name
        );
    }
    assert!(
        reconcile::cleanup(&done, &cfg.scope).is_empty(),
        "second cleanup writes"
    );
});
