//! Which routes attach, which hostnames they claim, who wins each hostname, and which
//! hostnames get an HTTPS listener under the 64-listener cap (SPEC §3.3).
//!
//! A route attaches when it lives in an allowed namespace and has a parentRef to this
//! Gateway once Gateway API's defaults apply. An HTTPRoute claims HTTPS listeners through
//! parentRefs without a sectionName or naming an `https…` listener; naming `http` or a
//! `tls-<svc>` listener claims none, and a TLSRoute never claims one. A hostname that cannot
//! have a listener refuses only its route, never the others; in http01 neither can a
//! passthrough hostname `<svc>.<apex>`: the declaration wins (SPEC §3.10). The routes of the
//! `separate` layout's second Gateway are only attached, never claim
//! ([`passthrough_gateway_routes`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::inputs::{Inputs, ModeSettings, RouteFacts, RouteKind, Settings, SharedRef};
use super::names;
use crate::claims::{self, ApexClaimant, MAX_LISTENERS, listener_shares, section_claims_https};
use crate::hostname;
use crate::platform::Scope;

/// What the routes of one Gateway add up to.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Analysis {
    /// Every attaching route, in (kind, namespace, name) order.
    pub routes: Vec<RouteVerdict>,
    /// Winning namespace per claimed hostname (every mode).
    pub owners: BTreeMap<String, String>,
    /// http01: hostnames that get a listener and a Certificate.
    pub listener_hosts: BTreeSet<String>,
    /// http01: claimed hostnames left out by the cap.
    pub over_cap: BTreeSet<String>,
    /// http01: how many hostname listeners fit (64 minus `http` and passthrough listeners).
    pub host_budget: usize,
}

/// One attaching route and what happened to its claims.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteVerdict {
    pub kind: RouteKind,
    pub namespace: String,
    pub name: String,
    /// Its parentRefs to this Gateway, as written, each with whether it claims HTTPS.
    pub parents: Vec<(SharedRef, bool)>,
    /// Hostnames that can have no listener, with the reason (`hostname::NotListenable` text).
    pub not_listenable: BTreeMap<String, String>,
    /// http01: hostnames a passthrough listener declares, with that listener's name: the
    /// declaration wins, no terminate listener takes them (SPEC §3.10).
    pub passthrough: BTreeMap<String, String>,
    /// Hostnames won by another namespace, with the winner's namespace.
    pub conflicts: BTreeMap<String, String>,
    /// Hostnames it won that did not fit under the cap.
    pub over_cap: BTreeSet<String>,
    /// Hostnames it claims that are served (listener, or a wildcard listener outside http01).
    pub served: BTreeSet<String>,
}

/// Why a hostname cannot be claimed in this mode, `None` when it can.
fn claim_problem(h: &str, settings: &Settings) -> Option<String> {
    match settings.mode {
        ModeSettings::Http01 => hostname::listenable(h, &settings.apex)
            .err()
            .map(|e| e.to_string()),
        // Wildcard listeners cover wildcards; only validity and the apex matter.
        _ => match hostname::validate(h) {
            Err(e) => Some(hostname::NotListenable::Invalid(e).to_string()),
            Ok(()) if !hostname::within(h, &settings.apex) => Some(
                hostname::NotListenable::OutsideApex {
                    apex: settings.apex.clone(),
                }
                .to_string(),
            ),
            Ok(()) => None,
        },
    }
}

/// Analyse the routes of `inputs` for the Gateway `inputs.tgw.namespace/name`.
///
/// `allowed` are the namespaces layer 1 admits; `existing_hosts` the hostnames of HTTPS
/// listeners the owned Gateway has now (they keep their place under the cap); `skip` a route
/// never analysed (our own redirect route).
pub fn analyse(
    inputs: &Inputs,
    settings: &Settings,
    allowed: &BTreeSet<String>,
    existing_hosts: &BTreeSet<String>,
    scope: &Scope,
    skip: (&str, &str),
) -> Analysis {
    let gw_ns = inputs.tgw.namespace.as_str();
    let gw_name = inputs.tgw.name.as_str();
    // http01: passthrough hostname -> its listener (hostnames are compared lowercased).
    let passthrough: BTreeMap<String, &str> = match settings.mode {
        ModeSettings::Http01 => settings
            .passthrough
            .iter()
            .map(|(svc, l)| (format!("{svc}.{}", settings.apex), l.as_str()))
            .collect(),
        _ => BTreeMap::new(),
    };
    let mut attaching: Vec<&RouteFacts> = inputs
        .routes
        .iter()
        .filter(|r| allowed.contains(&*r.namespace))
        .filter(|r| !(r.kind == RouteKind::HttpRoute && (&*r.namespace, r.name()) == skip))
        .filter(|r| {
            r.parent_refs
                .iter()
                .any(|p| p.targets(&r.namespace, gw_ns, gw_name))
        })
        .collect();
    attaching
        .sort_by(|a, b| (a.kind, &a.namespace, &a.name()).cmp(&(b.kind, &b.namespace, &b.name())));
    attaching
        .dedup_by(|a, b| (a.kind, &a.namespace, &a.name()) == (b.kind, &b.namespace, &b.name()));

    let mut verdicts: Vec<RouteVerdict> = Vec::with_capacity(attaching.len());
    // hostname -> indexes of the claiming routes
    let mut claims: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for r in &attaching {
        let mut parents: Vec<(SharedRef, bool)> = Vec::new();
        for p in r
            .parent_refs
            .iter()
            .filter(|p| p.targets(&r.namespace, gw_ns, gw_name))
        {
            let claims_https =
                r.kind == RouteKind::HttpRoute && section_claims_https(p.section_name.as_deref());
            if !parents.iter().any(|(q, _)| q == p) {
                parents.push((p.clone(), claims_https));
            }
        }
        let claiming = parents.iter().any(|(_, c)| *c);
        let mut v = RouteVerdict {
            kind: r.kind,
            namespace: r.namespace.to_string(),
            name: r.name().to_string(),
            parents,
            not_listenable: BTreeMap::new(),
            passthrough: BTreeMap::new(),
            conflicts: BTreeMap::new(),
            over_cap: BTreeSet::new(),
            served: BTreeSet::new(),
        };
        if claiming {
            let idx = verdicts.len();
            let hosts: BTreeSet<&str> = r.hostnames().collect();
            for h in hosts {
                if let Some(l) = passthrough.get(&h.to_ascii_lowercase()) {
                    v.passthrough.insert(h.to_string(), (*l).to_string());
                    continue;
                }
                match claim_problem(h, settings) {
                    Some(why) => {
                        v.not_listenable.insert(h.to_string(), why);
                    }
                    None => claims.entry(h.to_string()).or_default().push(idx),
                }
            }
        }
        verdicts.push(v);
    }

    // Each claimant namespace's own apex (its host label), for the most-specific-apex rule of
    // SPEC §3.3. Every attaching route lives in an allowed namespace, and the edge gathers
    // each of those into `inputs.namespaces` (own, attachedNamespaces, inheriting); a label
    // that is not a valid apex gives the namespace no precedence.
    let apexes: BTreeMap<&str, String> = inputs
        .namespaces
        .iter()
        .filter_map(|n| Some((n.name(), hostname::parse_apex(n.apex()?).ok()?)))
        .collect();
    let mut owners = BTreeMap::new();
    // hostname -> the winning routes (winner's namespace)
    let mut winners: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (h, idxs) in &claims {
        let claimant = |i: &usize| ApexClaimant {
            namespace: &verdicts[*i].namespace,
            name: &verdicts[*i].name,
            apex: apexes
                .get(verdicts[*i].namespace.as_str())
                .map(String::as_str),
        };
        let Some(w) = claims::winner_for(h, idxs.iter().map(claimant), &scope.system_prefix) else {
            continue;
        };
        let winner_ns = w.namespace.to_string();
        let (won, lost): (Vec<usize>, Vec<usize>) = idxs
            .iter()
            .partition(|i| claims::shares_with(&claimant(i).claimant(), &w.claimant()));
        for i in lost {
            verdicts[i].conflicts.insert(h.clone(), winner_ns.clone());
        }
        owners.insert(h.clone(), winner_ns);
        winners.insert(h.clone(), won);
    }

    let mut analysis = Analysis {
        owners,
        ..Analysis::default()
    };
    match settings.mode {
        ModeSettings::Http01 => {
            let budget = MAX_LISTENERS.saturating_sub(1 + settings.passthrough.len());
            analysis.host_budget = budget;
            let oldest = |h: &str| {
                winners[h]
                    .iter()
                    .map(|i| attaching[*i].creation().clone())
                    .min_by(|a, b| match (a, b) {
                        // A route without a creation time sorts after every dated one.
                        (Some(a), Some(b)) => a.cmp(b),
                        (Some(_), None) => std::cmp::Ordering::Less,
                        (None, Some(_)) => std::cmp::Ordering::Greater,
                        (None, None) => std::cmp::Ordering::Equal,
                    })
                    .flatten()
            };
            // Each owner namespace's hostnames in the order its share is filled: those that
            // already have a listener, then older routes, then hostname order.
            let mut by_ns: BTreeMap<&str, Vec<ShareRank<'_>>> = BTreeMap::new();
            for h in winners.keys() {
                let created = oldest(h);
                by_ns
                    .entry(analysis.owners[h.as_str()].as_str())
                    .or_default()
                    .push((
                        !existing_hosts.contains(h.as_str()),
                        created.is_none(),
                        created,
                        h,
                    ));
            }
            for hosts in by_ns.values_mut() {
                hosts.sort_unstable();
            }
            let shares = listener_shares(
                by_ns.iter().map(|(ns, hosts)| (*ns, hosts.len())),
                budget,
                &scope.system_prefix,
            );
            for (ns, hosts) in &by_ns {
                let share = shares.get(ns).copied().unwrap_or(0);
                for (rank, (_, _, _, h)) in hosts.iter().enumerate() {
                    let h: &String = h;
                    if rank < share {
                        analysis.listener_hosts.insert(h.clone());
                        for i in &winners[h] {
                            verdicts[*i].served.insert(h.clone());
                        }
                    } else {
                        analysis.over_cap.insert(h.clone());
                        for i in &winners[h] {
                            verdicts[*i].over_cap.insert(h.clone());
                        }
                    }
                }
            }
        }
        _ => {
            for (h, idxs) in &winners {
                for i in idxs {
                    verdicts[*i].served.insert(h.clone());
                }
            }
        }
    }
    analysis.routes = verdicts;
    analysis
}

/// The routes attaching to the second Gateway `gateway` of the `separate` layout (SPEC
/// §3.10), in (kind, namespace, name) order: in an allowed namespace, with a parentRef to it.
/// It holds passthrough listeners only, so no parentRef claims a listener there.
pub fn passthrough_gateway_routes(
    inputs: &Inputs,
    allowed: &BTreeSet<String>,
    gateway: &str,
) -> Vec<RouteVerdict> {
    let gw_ns = inputs.tgw.namespace.as_str();
    let mut attaching: Vec<&RouteFacts> = inputs
        .routes
        .iter()
        .filter(|r| allowed.contains(&*r.namespace))
        .filter(|r| {
            r.parent_refs
                .iter()
                .any(|p| p.targets(&r.namespace, gw_ns, gateway))
        })
        .collect();
    attaching
        .sort_by(|a, b| (a.kind, &a.namespace, &a.name()).cmp(&(b.kind, &b.namespace, &b.name())));
    attaching
        .dedup_by(|a, b| (a.kind, &a.namespace, &a.name()) == (b.kind, &b.namespace, &b.name()));
    attaching
        .into_iter()
        .map(|r| {
            let mut parents: Vec<(SharedRef, bool)> = Vec::new();
            for p in r
                .parent_refs
                .iter()
                .filter(|p| p.targets(&r.namespace, gw_ns, gateway))
            {
                if !parents.iter().any(|(q, _)| q == p) {
                    parents.push((p.clone(), false));
                }
            }
            RouteVerdict {
                kind: r.kind,
                namespace: r.namespace.to_string(),
                name: r.name().to_string(),
                parents,
                not_listenable: BTreeMap::new(),
                passthrough: BTreeMap::new(),
                conflicts: BTreeMap::new(),
                over_cap: BTreeSet::new(),
                served: BTreeSet::new(),
            }
        })
        .collect()
}

/// A hostname's place within its namespace's listener share: (no listener yet, no creation
/// time, oldest claiming route's creation, hostname), ascending.
type ShareRank<'a> = (bool, bool, Option<Time>, &'a String);

/// Listener names every parentRef section may name on this Gateway; a section outside this
/// set matches nothing.
pub fn known_sections(listener_names: &[String]) -> BTreeSet<String> {
    let mut s: BTreeSet<String> = listener_names.iter().cloned().collect();
    s.insert(names::HTTP_LISTENER.to_string());
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::testing::{self, route, tls_route};

    fn hosts(a: &Analysis) -> Vec<&str> {
        a.listener_hosts.iter().map(String::as_str).collect()
    }

    fn verdict<'a>(a: &'a Analysis, ns: &str, name: &str) -> &'a RouteVerdict {
        a.routes
            .iter()
            .find(|v| v.namespace == ns && v.name == name)
            .unwrap_or_else(|| panic!("{ns}/{name} does not attach: {a:?}"))
    }

    #[test]
    fn parent_ref_defaults_and_sections() {
        let mut w = testing::world();
        // Defaults: group, kind, namespace from the route.
        w.routes
            .push(route("tenant-alice", "plain", &["a.alice.example.org"]));
        // Explicit namespace from an inheriting namespace.
        let mut r = route("tenant-alice-x", "child", &["b.alice.example.org"]);
        r.parent_refs[0].namespace = Some("tenant-alice".into());
        w.routes.push(r);
        // Same name, other namespace (defaults to the route's own): not ours.
        w.routes.push(route(
            "tenant-alice-x",
            "elsewhere",
            &["c.alice.example.org"],
        ));
        // Wrong kind.
        let mut r = route("tenant-alice", "kind", &["d.alice.example.org"]);
        r.parent_refs[0].kind = Some("Service".into());
        w.routes.push(r);
        // sectionName http and tls-api claim nothing.
        let mut r = route("tenant-alice", "port80", &["e.alice.example.org"]);
        r.parent_refs[0].section_name = Some("http".into());
        w.routes.push(r);
        let mut r = route("tenant-alice", "tls", &["f.alice.example.org"]);
        r.parent_refs[0].section_name = Some("tls-api".into());
        w.routes.push(r);
        // A named HTTPS section claims.
        let mut r = route("tenant-alice", "named", &["g.alice.example.org"]);
        r.parent_refs[0].section_name = Some("https-g".into());
        w.routes.push(r);
        // A TLSRoute never claims.
        w.routes
            .push(tls_route("tenant-alice", "pass", &["h.alice.example.org"]));
        // A namespace that is not allowed.
        let mut r = route("tenant-mallory", "evil", &["i.alice.example.org"]);
        r.parent_refs[0].namespace = Some("tenant-alice".into());
        w.routes.push(r);

        let a = testing::analyse(&w);
        assert_eq!(
            hosts(&a),
            [
                "a.alice.example.org",
                "b.alice.example.org",
                "g.alice.example.org"
            ]
        );
        assert!(
            a.routes
                .iter()
                .all(|v| v.name != "elsewhere" && v.name != "kind" && v.name != "evil")
        );
        assert!(!verdict(&a, "tenant-alice", "port80").parents[0].1);
        assert!(!verdict(&a, "tenant-alice", "pass").parents[0].1);
    }

    #[test]
    fn non_listenable_hostnames_refuse_only_their_route() {
        let mut w = testing::world();
        w.routes.push(route(
            "tenant-alice",
            "mixed",
            &[
                "*.alice.example.org",
                "ok.alice.example.org",
                "shop.bob.example.org",
            ],
        ));
        w.routes
            .push(route("tenant-alice", "fine", &["fine.alice.example.org"]));
        let a = testing::analyse(&w);
        assert_eq!(
            hosts(&a),
            ["fine.alice.example.org", "ok.alice.example.org"]
        );
        let v = verdict(&a, "tenant-alice", "mixed");
        assert_eq!(
            v.not_listenable
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            ["*.alice.example.org", "shop.bob.example.org"]
        );
        assert!(v.not_listenable["*.alice.example.org"].contains("wildcard"));
        assert!(v.not_listenable["shop.bob.example.org"].contains("not within"));
        assert!(
            verdict(&a, "tenant-alice", "fine")
                .not_listenable
                .is_empty()
        );
    }

    #[test]
    fn wildcards_are_fine_outside_http01() {
        let mut w = testing::world();
        w.tgw.spec = testing::dns01_spec();
        w.routes.push(route(
            "tenant-alice",
            "wild",
            &["*.alice.example.org", "x.other.org"],
        ));
        let a = testing::analyse(&w);
        let v = verdict(&a, "tenant-alice", "wild");
        assert!(v.served.contains("*.alice.example.org"));
        assert!(v.not_listenable.contains_key("x.other.org"));
        assert!(
            a.listener_hosts.is_empty(),
            "dns01 makes no per-host listeners"
        );
    }

    #[test]
    fn conflicts_cozy_first_then_apex_then_namespace_then_name() {
        let mut w = testing::world();
        w.tgw.spec.attached_namespaces = vec!["cozy-harbor".into()];
        let h = "harbor.alice.example.org";
        for (ns, name) in [
            ("tenant-alice-x", "a"),
            ("cozy-harbor", "z"),
            ("tenant-alice", "b"),
        ] {
            let mut r = route(ns, name, &[h]);
            r.parent_refs[0].namespace = Some("tenant-alice".into());
            w.routes.push(r);
        }
        // Two routes of the winner's namespace share.
        let mut r = route("cozy-harbor", "y", &[h]);
        r.parent_refs[0].namespace = Some("tenant-alice".into());
        w.routes.push(r);
        let a = testing::analyse(&w);
        assert_eq!(a.owners[h], "cozy-harbor");
        assert_eq!(
            verdict(&a, "tenant-alice-x", "a").conflicts[h],
            "cozy-harbor"
        );
        assert_eq!(verdict(&a, "tenant-alice", "b").conflicts[h], "cozy-harbor");
        assert!(verdict(&a, "cozy-harbor", "z").conflicts.is_empty());
        assert!(verdict(&a, "cozy-harbor", "y").conflicts.is_empty());

        // Without the cozy claimant the smaller namespace wins.
        w.routes.retain(|r| &*r.namespace != "cozy-harbor");
        let a = testing::analyse(&w);
        assert_eq!(a.owners[h], "tenant-alice");
        assert_eq!(
            verdict(&a, "tenant-alice-x", "a").conflicts[h],
            "tenant-alice"
        );
    }

    /// SPEC §3.3, issue 20 item 9: between tenants, the namespace whose own apex is the most
    /// specific one containing the hostname wins, whatever the namespace names; cozy-* beats
    /// it; equal apexes fall back to namespace, then route name order.
    #[test]
    fn conflicts_by_most_specific_apex_owner() {
        let h = "shop.kid.alice.example.org";
        // (claimants as (namespace, route), expected owner namespace, losers)
        type Case<'a> = (Vec<(&'a str, &'a str)>, &'a str, Vec<(&'a str, &'a str)>);
        let cases: Vec<Case<'_>> = vec![
            // tenant-alice sorts first, but tenant-alice-kid owns kid.alice.example.org.
            (
                vec![("tenant-alice", "shop"), ("tenant-alice-kid", "shop")],
                "tenant-alice-kid",
                vec![("tenant-alice", "shop")],
            ),
            // cozy-* still beats both.
            (
                vec![
                    ("tenant-alice", "shop"),
                    ("tenant-alice-kid", "shop"),
                    ("cozy-shop", "shop"),
                ],
                "cozy-shop",
                vec![("tenant-alice", "shop"), ("tenant-alice-kid", "shop")],
            ),
            // Equal apexes (tenant-alice-twin is labelled alice.example.org too): name order.
            (
                vec![("tenant-alice-twin", "a"), ("tenant-alice", "z")],
                "tenant-alice",
                vec![("tenant-alice-twin", "a")],
            ),
            // An apex not containing the hostname is no precedence: tenant-aaa (labelled
            // bob.example.org) sorts first, the apex owner tenant-alice wins.
            (
                vec![("tenant-aaa", "a"), ("tenant-alice", "z")],
                "tenant-alice",
                vec![("tenant-aaa", "a")],
            ),
            // The winner's namespace shares the hostname among its routes.
            (
                vec![
                    ("tenant-alice-kid", "b"),
                    ("tenant-alice", "a"),
                    ("tenant-alice-kid", "a"),
                ],
                "tenant-alice-kid",
                vec![("tenant-alice", "a")],
            ),
        ];
        for (claimants, owner, losers) in cases {
            let mut w = testing::world();
            w.tgw.spec.attached_namespaces = vec!["cozy-shop".into()];
            w.namespaces.extend([
                testing::tenant("tenant-alice-kid", "kid.alice.example.org", "tenant-alice"),
                testing::tenant("tenant-alice-twin", "alice.example.org", "tenant-alice"),
                testing::tenant("tenant-aaa", "bob.example.org", "tenant-alice"),
                testing::namespace("cozy-shop", &[], &[]),
            ]);
            for (ns, name) in &claimants {
                w.routes.push(testing::remote_route(ns, name, &[h]));
            }
            let a = testing::analyse(&w);
            assert_eq!(a.owners[h], owner, "{claimants:?}");
            assert!(a.listener_hosts.contains(h), "{claimants:?}");
            for (ns, name) in &claimants {
                let v = verdict(&a, ns, name);
                if losers.contains(&(*ns, *name)) {
                    assert_eq!(
                        v.conflicts.get(h).map(String::as_str),
                        Some(owner),
                        "{ns}/{name}"
                    );
                    assert!(!v.served.contains(h), "{ns}/{name}");
                } else {
                    assert!(v.conflicts.is_empty(), "{ns}/{name}: {v:?}");
                    assert!(v.served.contains(h), "{ns}/{name}");
                }
            }
        }
    }

    /// SPEC §3.3: `cozy-*` first; the rest max-min fair among the namespaces that ask;
    /// within a share: hostnames with a listener, then older routes, then hostname order.
    #[test]
    fn cap_cozy_first_then_fair_share_then_existing_older_hostname() {
        let mut w = testing::world();
        w.tgw.spec.tls_passthrough_services = vec![];
        w.tgw.spec.attached_namespaces = vec!["cozy-mon".into()];
        // 70 routes, route i created at second i.
        for i in 0..70 {
            let mut r = route(
                "tenant-alice",
                &format!("r{i:02}"),
                &[&format!("h{i:02}.alice.example.org")],
            );
            r.set_creation(Some(testing::at(1000 + i)));
            w.routes.push(r);
        }
        let a = testing::analyse(&w);
        assert_eq!(a.host_budget, 63);
        assert_eq!(a.listener_hosts.len(), 63);
        // One namespace asks: its share is all 63, the 7 youngest are out.
        let out: Vec<&str> = a.over_cap.iter().map(String::as_str).collect();
        assert_eq!(out.len(), 7);
        assert!(out.iter().all(|h| *h >= "h63"), "{out:?}");
        assert!(
            verdict(&a, "tenant-alice", "r69")
                .over_cap
                .contains("h69.alice.example.org")
        );

        // A newer route from cozy-* goes first: tenant-alice's share drops to 62.
        let mut r = route("cozy-mon", "grafana", &["grafana.alice.example.org"]);
        r.parent_refs[0].namespace = Some("tenant-alice".into());
        r.set_creation(Some(testing::at(5000)));
        w.routes.push(r);
        let a = testing::analyse(&w);
        assert!(a.listener_hosts.contains("grafana.alice.example.org"));
        assert!(a.over_cap.contains("h62.alice.example.org"));
        assert!(a.listener_hosts.contains("h61.alice.example.org"));

        // Within the share, hostnames that already have a listener go first, whatever
        // their age: the 7 youngest keep theirs and the share's last 7 older ones give way.
        let existing: BTreeSet<String> = (63..70)
            .map(|i| format!("h{i:02}.alice.example.org"))
            .collect();
        let settings = w.tgw.settings(&Scope::default()).expect("valid");
        let run = |w: &Inputs, existing: &BTreeSet<String>| {
            analyse(
                w,
                &settings,
                &testing::allowed(w),
                existing,
                &Scope::default(),
                ("", ""),
            )
        };
        let a = run(&w, &existing);
        for h in &existing {
            assert!(a.listener_hosts.contains(h), "{h} lost its listener");
        }
        let kept_old = (0..63)
            .filter(|i| {
                a.listener_hosts
                    .contains(&format!("h{i:02}.alice.example.org"))
            })
            .count();
        assert_eq!(kept_old, 55, "62 - 7 existing");
        assert!(a.listener_hosts.contains("h54.alice.example.org"));
        assert!(a.over_cap.contains("h55.alice.example.org"));

        // The share outranks stickiness: every tenant-alice hostname has a listener, then
        // the inheriting tenant-alice-x asks for 3: it gets them, and tenant-alice keeps the
        // rest (63 - 1 cozy - 3 = 59), its youngest listeners going first.
        let all: BTreeSet<String> = (0..70)
            .map(|i| format!("h{i:02}.alice.example.org"))
            .chain(["grafana.alice.example.org".to_string()])
            .collect();
        for i in 0..3 {
            let mut r = route(
                "tenant-alice-x",
                &format!("x{i}"),
                &[&format!("s{i}.x.alice.example.org")],
            );
            r.parent_refs[0].namespace = Some("tenant-alice".into());
            r.set_creation(Some(testing::at(9000 + i)));
            w.routes.push(r);
        }
        let a = run(&w, &all);
        assert_eq!(a.listener_hosts.len(), 63);
        for i in 0..3 {
            assert!(
                a.listener_hosts
                    .contains(&format!("s{i}.x.alice.example.org")),
                "{a:?}"
            );
        }
        assert!(a.listener_hosts.contains("grafana.alice.example.org"));
        let alice: Vec<&String> = a
            .listener_hosts
            .iter()
            .filter(|h| h.starts_with('h'))
            .collect();
        assert_eq!(alice.len(), 59);
        assert!(
            a.over_cap.iter().all(|h| h.as_str() >= "h59"),
            "{:?}",
            a.over_cap
        );

        // Same age: hostname order. The schema's 16 passthrough services leave 47 hostname
        // listeners (64 - http - 16); 48 same-aged routes, pushed in reverse order.
        let mut w = testing::world();
        w.tgw.spec.tls_passthrough_services = (0..16).map(|i| format!("s{i}")).collect();
        for i in (0..48).rev() {
            let h = format!("h{i:02}.alice.example.org");
            w.routes.push(route("tenant-alice", &h, &[&h]));
        }
        let a = testing::analyse(&w);
        assert_eq!(a.host_budget, 47);
        let kept = hosts(&a);
        assert_eq!(kept.len(), 47);
        assert!(!kept.iter().any(|h| h.starts_with("h47.")), "{kept:?}");
        assert!(kept.iter().any(|h| h.starts_with("h00.")), "{kept:?}");
    }
}
