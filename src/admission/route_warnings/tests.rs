//! Tests of the route warnings (SPEC §3.4): tables for each warning (conflicts, the fair
//! share, the listener budget, Gateways a route may attach to), the decision path counting
//! them, the summary cache following the index, and `naive_scan`, an oracle that scans every
//! route of a Gateway for each review, which the summaries must answer alike.

use super::*;
use crate::cluster::routes::{RouteIndex, project};
use crate::platform::CONTROLLER_NAME;
use crate::platform::NoApexOwners;
use kube::api::DynamicObject;
use serde_json::{Value, json};
use std::collections::BTreeMap;

const GW: (&str, &str) = ("tenant-root", "tenant-root");

/// A route as the API server holds it. `section`: the parentRef's sectionName;
/// `published`: carries our status entry for the Gateway.
fn obj(
    kind: &str,
    ns: &str,
    name: &str,
    section: Option<&str>,
    hosts: &[&str],
    published: bool,
) -> RouteFacts {
    let mut parent = json!({"name": GW.1, "namespace": GW.0});
    if let Some(s) = section {
        parent["sectionName"] = json!(s);
    }
    let status = if published {
        json!({"parents": [{"controllerName": CONTROLLER_NAME, "parentRef": parent,
            "conditions": []}]})
    } else {
        Value::Null
    };
    let api = if kind == "TLSRoute" {
        "gateway.networking.k8s.io/v1alpha2"
    } else {
        "gateway.networking.k8s.io/v1"
    };
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": api, "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [parent], "hostnames": hosts},
        "status": status,
    }))
    .expect("dynamic object");
    let k = if kind == "TLSRoute" {
        RouteKind::TlsRoute
    } else {
        RouteKind::HttpRoute
    };
    project(k, &o)
}

fn http(ns: &str, name: &str, hosts: &[&str]) -> RouteFacts {
    obj("HTTPRoute", ns, name, None, hosts, true)
}

fn run(index: &[RouteFacts], route: &RouteFacts) -> Vec<RouteWarning> {
    let idx = RouteIndex::default();
    for r in index {
        idx.apply(r.clone());
    }
    warnings(
        route,
        |ns, n| idx.for_gateway(ns, n),
        "cozy-",
        None,
        &crate::platform::NoApexOwners,
    )
}

#[test]
fn hostname_conflicts_say_who_wins() {
    let h = "dashboard.alice.example.org";
    // (index, admitted route, expected (reason, substrings) per warning)
    type Case = (
        &'static str,
        Vec<RouteFacts>,
        RouteFacts,
        Vec<(Reason, Vec<&'static str>)>,
    );
    let cases: Vec<Case> = vec![
        (
            "a cozy-* route already publishes it: cozy wins",
            vec![http("cozy-dashboard", "dashboard", &[h])],
            http("tenant-alice", "web", &[h]),
            vec![(
                Reason::HostnameConflict,
                vec![
                    "HostnameConflict: dashboard.alice.example.org is already on tenant-root/tenant-root from cozy-dashboard, which wins",
                ],
            )],
        ),
        (
            "the admitted cozy route wins over a published tenant route",
            vec![http("tenant-alice", "web", &[h])],
            http("cozy-dashboard", "dashboard", &[h]),
            vec![(
                Reason::HostnameConflict,
                vec![
                    "HostnameConflict for tenant-alice: dashboard.alice.example.org is also on tenant-root/tenant-root; this route wins",
                ],
            )],
        ),
        (
            "tenants: the smaller namespace wins, whatever came first",
            vec![http("tenant-bob", "a", &[h])],
            http("tenant-alice", "z", &[h]),
            vec![(
                Reason::HostnameConflict,
                vec!["HostnameConflict for tenant-bob:", "this route wins"],
            )],
        ),
        (
            "tenants: a larger namespace loses",
            vec![http("tenant-alice", "z", &[h])],
            http("tenant-bob", "a", &[h]),
            vec![(
                Reason::HostnameConflict,
                vec!["from tenant-alice, which wins"],
            )],
        ),
        (
            "several losers are named by count",
            vec![
                http("tenant-bob", "a", &[h]),
                http("tenant-carol", "a", &[h]),
                http("tenant-dave", "a", &[h]),
            ],
            http("cozy-x", "a", &[h]),
            vec![(
                Reason::HostnameConflict,
                vec!["HostnameConflict for tenant-bob and 2 more:"],
            )],
        ),
        (
            "the winner is decided among all claimants, not against the first",
            vec![http("tenant-bob", "a", &[h]), http("cozy-x", "a", &[h])],
            http("tenant-alice", "a", &[h]),
            vec![(Reason::HostnameConflict, vec!["from cozy-x, which wins"])],
        ),
        (
            "one namespace shares a hostname among its routes",
            vec![http("tenant-alice", "other", &[h])],
            http("tenant-alice", "web", &[h]),
            vec![],
        ),
        (
            "an UPDATE of the publishing route itself is no conflict",
            vec![http("tenant-alice", "web", &[h])],
            http("tenant-alice", "web", &[h]),
            vec![],
        ),
        (
            "a route without our status entry does not publish (not attached, or new)",
            vec![obj("HTTPRoute", "cozy-dashboard", "d", None, &[h], false)],
            http("tenant-alice", "web", &[h]),
            vec![],
        ),
        (
            "a route on sectionName http claims nothing",
            vec![obj(
                "HTTPRoute",
                "cozy-dashboard",
                "d",
                Some("http"),
                &[h],
                true,
            )],
            http("tenant-alice", "web", &[h]),
            vec![],
        ),
        (
            "the admitted route on a tls- section claims nothing",
            vec![http("cozy-dashboard", "d", &[h])],
            obj(
                "HTTPRoute",
                "tenant-alice",
                "web",
                Some("tls-api"),
                &[h],
                false,
            ),
            vec![],
        ),
        (
            "a named https section claims",
            vec![obj(
                "HTTPRoute",
                "cozy-dashboard",
                "d",
                Some("https-dash"),
                &[h],
                true,
            )],
            http("tenant-alice", "web", &[h]),
            vec![(
                Reason::HostnameConflict,
                vec!["from cozy-dashboard, which wins"],
            )],
        ),
        (
            "a TLSRoute with the hostname is no HTTPS claimant",
            vec![obj(
                "TLSRoute",
                "cozy-dashboard",
                "d",
                Some("tls-api"),
                &[h],
                true,
            )],
            http("tenant-alice", "web", &[h]),
            vec![],
        ),
        (
            "another Gateway's routes do not matter",
            vec![{
                let mut r = http("cozy-dashboard", "d", &[h]);
                r.parent_refs[0].name = "other".into();
                r.our_status[0].parent_ref.name = "other".into();
                r
            }],
            http("tenant-alice", "web", &[h]),
            vec![],
        ),
        (
            "each conflicting hostname is one warning; invalid ones are not judged",
            vec![http(
                "cozy-a",
                "a",
                &["a.alice.example.org", "b.alice.example.org", "Bad_"],
            )],
            http(
                "tenant-alice",
                "web",
                &[
                    "b.alice.example.org",
                    "a.alice.example.org",
                    "a.alice.example.org",
                    "Bad_",
                ],
            ),
            vec![
                (Reason::HostnameConflict, vec![": a.alice.example.org is"]),
                (Reason::HostnameConflict, vec![": b.alice.example.org is"]),
            ],
        ),
        (
            "TLSRoutes: another namespace's passthrough of the hostname",
            vec![obj(
                "TLSRoute",
                "cozy-kubevirt",
                "vm",
                Some("tls-vm"),
                &[h],
                true,
            )],
            obj(
                "TLSRoute",
                "tenant-alice",
                "vm",
                Some("tls-vm"),
                &[h],
                false,
            ),
            vec![(
                Reason::PassthroughShared,
                vec![
                    "dashboard.alice.example.org also passes through tenant-root/tenant-root from cozy-kubevirt; the data plane picks one",
                ],
            )],
        ),
        (
            "TLSRoutes: the same namespace, or an HTTPRoute, is no passthrough conflict",
            vec![
                obj(
                    "TLSRoute",
                    "tenant-alice",
                    "vm2",
                    Some("tls-vm"),
                    &[h],
                    true,
                ),
                http("cozy-dashboard", "d", &[h]),
            ],
            obj(
                "TLSRoute",
                "tenant-alice",
                "vm",
                Some("tls-vm"),
                &[h],
                false,
            ),
            vec![],
        ),
    ];
    for (what, index, route, want) in cases {
        let got = run(&index, &route);
        assert_eq!(got.len(), want.len(), "{what}: {got:?}");
        for (g, (reason, parts)) in got.iter().zip(&want) {
            assert_eq!(g.reason, *reason, "{what}: {g:?}");
            for p in parts {
                assert!(g.text.contains(p), "{what}: {:?} lacks {p:?}", g.text);
            }
            assert!(
                g.text.chars().count() <= crate::admission::MAX_WARNING_LEN,
                "{what}: {:?}",
                g.text
            );
        }
    }
}

/// `n` published routes in `tenant-root` with one distinct hostname each.
fn run_with(
    index: &[RouteFacts],
    route: &RouteFacts,
    apexes: &[(&str, &str)],
) -> Vec<RouteWarning> {
    let idx = RouteIndex::default();
    for r in index {
        idx.apply(r.clone());
    }
    let mut map = crate::cluster::apex::ApexMap::default();
    for (ns, apex) in apexes {
        map.set(
            ns,
            &BTreeMap::from([(crate::platform::HOST_LABEL.to_string(), apex.to_string())]),
        );
    }
    warnings(route, |ns, n| idx.for_gateway(ns, n), "cozy-", None, &map)
}

/// Issue 20 items 8 and 9 as admission sees them: the fair share decides who is warned
/// about listeners (a later tenant within its share is not; the flooding one is), and the
/// most specific apex owner wins the conflict whatever the namespace order.
#[test]
fn warnings_follow_the_fair_share_and_the_apex_owner() {
    let flood: Vec<RouteFacts> = (0..63)
        .map(|i| {
            let h = format!("f{i:02}.bob.example.org");
            http("tenant-bob", &format!("f{i:02}"), &[h.as_str()])
        })
        .collect();
    let budget = |w: &[RouteWarning]| -> Vec<String> {
        w.iter()
            .filter(|w| w.reason == Reason::ListenerBudget)
            .map(|w| w.text.clone())
            .collect()
    };
    // A later tenant's route: within its share (1 of 63), it takes a listener from
    // tenant-bob; no warning for it.
    let late = http("tenant-late", "shop", &["shop.late.example.org"]);
    assert_eq!(budget(&run_with(&flood, &late, &[])), Vec::<String>::new());
    // The flooding tenant's next route, alone on the Gateway: the plain count.
    let more = http("tenant-bob", "f63", &["f63.bob.example.org"]);
    let w = budget(&run_with(&flood, &more, &[]));
    assert!(
        w.len() == 1 && w[0].contains("0 of 64 listeners left"),
        "{w:?}"
    );
    // With the later tenant published too: past its fair share.
    let mut two = flood.clone();
    two.push(http("tenant-late", "shop", &["shop.late.example.org"]));
    let w = budget(&run_with(&two, &more, &[]));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("fair share is 62/63") && w[0].contains("1 hostname(s) get none"),
        "{w:?}"
    );
    // The later tenant's second route is still within its share.
    let late2 = http("tenant-late", "cart", &["cart.late.example.org"]);
    assert_eq!(budget(&run_with(&two, &late2, &[])), Vec::<String>::new());
    assert!(
        w.iter()
            .all(|t| t.chars().count() <= super::super::MAX_WARNING_LEN)
    );
    // Alone on the Gateway: the plain count, as before.
    let w = budget(&run(
        &filled(63),
        &http("tenant-root", "x", &["new.example.org"]),
    ));
    assert!(w[0].contains("0 of 64 listeners left"), "{w:?}");

    let host = "shop.kid.alice.example.org";
    let apexes = [
        ("tenant-alice", "alice.example.org"),
        ("tenant-alice-kid", "kid.alice.example.org"),
    ];
    let conflict = |w: &[RouteWarning]| -> Vec<String> {
        w.iter()
            .filter(|w| w.reason == Reason::HostnameConflict)
            .map(|w| w.text.clone())
            .collect()
    };
    // The parent published it first; the child owning the apex is told it wins.
    let parent = http("tenant-alice", "takes-kid", &[host]);
    let kid = http("tenant-alice-kid", "shop", &[host]);
    let w = conflict(&run_with(std::slice::from_ref(&parent), &kid, &apexes));
    assert!(w.len() == 1 && w[0].contains("this route wins"), "{w:?}");
    let w = conflict(&run_with(std::slice::from_ref(&kid), &parent, &apexes));
    assert!(w[0].contains("from tenant-alice-kid, which wins"), "{w:?}");
    // Without apexes known, the namespace order of before.
    let w = conflict(&run_with(std::slice::from_ref(&parent), &kid, &[]));
    assert!(w[0].contains("from tenant-alice, which wins"), "{w:?}");
}

fn filled(n: usize) -> Vec<RouteFacts> {
    (0..n)
        .map(|i| {
            let h = format!("h{i:02}.example.org");
            http("tenant-root", &format!("r{i:02}"), &[h.as_str()])
        })
        .collect()
}

#[test]
fn listener_budget_counts_what_is_left() {
    // (what, routes in the index, admitted hostnames, expected substrings; none = no warning)
    type Case = (
        &'static str,
        Vec<RouteFacts>,
        Vec<&'static str>,
        Option<Vec<&'static str>>,
    );
    let cases: Vec<Case> = vec![
        ("plenty left", filled(10), vec!["new.example.org"], None),
        (
            "63 listeners in use (http + 62): the next hostname takes the last one",
            filled(62),
            vec!["new.example.org"],
            Some(vec![
                "Gateway tenant-root/tenant-root: this route takes the last 1 of 64 listeners (http01); more need certMode dns01",
            ]),
        ),
        (
            "63 in use, two new hostnames: one gets none",
            filled(62),
            vec!["new.example.org", "new2.example.org"],
            Some(vec![
                "Gateway tenant-root/tenant-root: 1 of 64 listeners left, 2 needed, 1 hostname(s) get none (http01); use certMode dns01",
            ]),
        ),
        (
            "full: nothing left",
            filled(63),
            vec!["new.example.org"],
            Some(vec![
                "0 of 64 listeners left, 1 needed, 1 hostname(s) get none",
            ]),
        ),
        (
            "over the cap already (70 published): still 0 left",
            filled(70),
            vec!["new.example.org"],
            Some(vec!["0 of 64 listeners left"]),
        ),
        (
            "a hostname already published needs no listener",
            filled(63),
            vec!["h05.example.org"],
            None,
        ),
        (
            "a wildcard needs no per-host listener",
            filled(63),
            vec!["*.example.org"],
            None,
        ),
        (
            "62 in use: http, 60 hosts, one passthrough listener named by two TLSRoutes",
            {
                let mut v = filled(60);
                v.push(obj(
                    "TLSRoute",
                    "cozy-k",
                    "api",
                    Some("tls-api"),
                    &["api.example.org"],
                    true,
                ));
                v.push(obj(
                    "TLSRoute",
                    "cozy-k",
                    "api2",
                    Some("tls-api"),
                    &["api.example.org"],
                    true,
                ));
                v
            },
            vec!["a.example.org", "b.example.org"],
            Some(vec!["takes the last 2 of 64"]),
        ),
        (
            "routes that are not published do not use listeners",
            (0..70)
                .map(|i| {
                    let h = format!("h{i:02}.example.org");
                    obj(
                        "HTTPRoute",
                        "tenant-root",
                        &format!("r{i:02}"),
                        None,
                        &[h.as_str()],
                        false,
                    )
                })
                .collect(),
            vec!["new.example.org"],
            None,
        ),
    ];
    for (what, index, hosts, want) in cases {
        let route = obj("HTTPRoute", "tenant-root", "new", None, &hosts, false);
        let got: Vec<RouteWarning> = run(&index, &route)
            .into_iter()
            .filter(|w| w.reason == Reason::ListenerBudget)
            .collect();
        match want {
            None => assert!(got.is_empty(), "{what}: {got:?}"),
            Some(parts) => {
                assert_eq!(got.len(), 1, "{what}: {got:?}");
                for p in parts {
                    assert!(
                        got[0].text.contains(p),
                        "{what}: {:?} lacks {p:?}",
                        got[0].text
                    );
                }
                assert!(got[0].text.chars().count() <= crate::admission::MAX_WARNING_LEN);
            }
        }
    }
}

#[test]
fn long_names_are_cut_to_120_characters() {
    let h = format!("{}.{}.example.org", "a".repeat(63), "b".repeat(63));
    let index = vec![http("cozy-dashboard", "d", &[h.as_str()])];
    let got = run(&index, &http("tenant-alice", "web", &[h.as_str()]));
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].text.chars().count(),
        crate::admission::MAX_WARNING_LEN
    );
    assert!(got[0].text.ends_with('…'));
}

#[test]
fn a_route_on_two_gateways_is_judged_on_each() {
    let h = "x.example.org";
    let mut other = http("cozy-a", "a", &[h]);
    other.parent_refs[0].name = "gw2".into();
    other.our_status[0].parent_ref.name = "gw2".into();
    let index = vec![http("cozy-b", "b", &[h]), other];
    let mut route = http("tenant-alice", "web", &[h]);
    let mut second = route.parent_refs[0].clone();
    second.name = "gw2".into();
    crate::reconcile::testing::push(&mut route.parent_refs, second);
    let got = run(&index, &route);
    let texts: Vec<&str> = got.iter().map(|w| w.text.as_str()).collect();
    assert_eq!(got.len(), 2, "{texts:?}");
    // Gateways in (namespace, name) order.
    assert!(
        texts[0].contains("tenant-root/gw2 from cozy-a"),
        "{texts:?}"
    );
    assert!(
        texts[1].contains("tenant-root/tenant-root from cozy-b"),
        "{texts:?}"
    );
}

/// alice's CREATE of the HTTPRoute `web` in `ns` on `parent`.
fn review(ns: &str, hosts: &[&str], parent: Value) -> Vec<u8> {
    let review = crate::admission::testing::review(crate::admission::WebhookResource::HttpRoutes)
        .uid("u1")
        .namespace(ns)
        .user("alice", &["g"])
        .object(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"parentRefs": [parent], "hostnames": hosts,
                     "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
        )
        .build();
    serde_json::to_vec(&review).expect("json")
}

/// Through `Admission::handle`, as the server and `review` call it: the warning is in the
/// response, the route is still admitted, the counter has a bounded label set; a denial
/// carries no index warning; an empty index costs nothing and says nothing.
#[tokio::test]
async fn the_decision_path_adds_index_warnings_and_counts_them() {
    use crate::admission::{Admission, WebhookResource};
    use crate::cluster::{NamespaceSource, StaticNamespaces};
    use crate::metrics::Metrics;
    use crate::platform::GATEWAY_LABEL;
    use crate::policy::{HOST_LABEL, PolicyConfig};
    use std::collections::BTreeMap;

    let h = "dash.alice.example.org";
    let mut ns = StaticNamespaces::default();
    ns.insert(
        "tenant-alice",
        BTreeMap::from([
            (HOST_LABEL.to_string(), "alice.example.org".to_string()),
            (GATEWAY_LABEL.to_string(), "tenant-root".to_string()),
        ]),
    );
    let ns = NamespaceSource::Static(Arc::new(ns));
    let idx = Arc::new(RouteIndex::default());
    idx.apply(http("cozy-dashboard", "dashboard", &[h]));
    let metrics = Metrics::new();
    let a = Admission::new(
        Arc::new(PolicyConfig::default()),
        ns.clone(),
        metrics.clone(),
    )
    .with_routes(idx);
    let parent = json!({"name": GW.1, "namespace": GW.0});
    async fn post(a: &Admission, body: Vec<u8>) -> Value {
        let r = a.handle(Some(WebhookResource::HttpRoutes), &body).await;
        serde_json::from_slice::<Value>(&r.body).expect("json")
    }
    let v = post(&a, review("tenant-alice", &[h], parent.clone())).await;
    assert_eq!(v["response"]["allowed"], json!(true), "{v}");
    let w = v["response"]["warnings"].as_array().expect("warnings");
    assert_eq!(w.len(), 1, "{v}");
    assert!(
        w[0].as_str()
            .unwrap_or_default()
            .contains("from cozy-dashboard, which wins")
    );
    let text = metrics.render();
    assert!(
        text.contains(
            "tenant_gateway_admission_warnings_total{reason=\"hostname_conflict\",resource=\"httproutes\"} 1"
        ),
        "{text}"
    );

    // Denied by layer 7 (outside the apex): no index warning with the denial.
    let v = post(
        &a,
        review("tenant-alice", &["dash.bob.example.org"], parent.clone()),
    )
    .await;
    assert_eq!(v["response"]["allowed"], json!(false));
    assert!(v["response"].get("warnings").is_none(), "{v}");

    // Another Gateway: nothing to say.
    let v = post(&a, review("tenant-alice", &[h], json!({"name": "gw2"}))).await;
    assert!(v["response"].get("warnings").is_none(), "{v}");

    // No index given: nothing to say.
    let plain = Admission::new(Arc::new(PolicyConfig::default()), ns, Metrics::new());
    let v = post(&plain, review("tenant-alice", &[h], parent)).await;
    assert_eq!(v["response"]["allowed"], json!(true));
    assert!(v["response"].get("warnings").is_none(), "{v}");
}

/// The warnings skip validating the review's hostnames only where the route layer
/// validated them and found none wrong: an invalid hostname admitted in warn mode, or from a
/// namespace the layer does not judge, is still left out of the warnings, even when a
/// published route claims that very spelling.
#[tokio::test]
async fn hostnames_the_route_layer_did_not_validate_are_validated_for_the_warnings() {
    use crate::admission::{Admission, WebhookResource};
    use crate::cluster::{NamespaceSource, StaticNamespaces};
    use crate::metrics::Metrics;
    use crate::platform::GATEWAY_LABEL;
    use crate::policy::{HOST_LABEL, Layer, Mode, PolicyConfig};
    use std::collections::BTreeMap;

    let (bad, good) = ("Dash.alice.example.org", "dash.alice.example.org");
    let mut ns = StaticNamespaces::default();
    ns.insert(
        "tenant-alice",
        BTreeMap::from([
            (HOST_LABEL.to_string(), "alice.example.org".to_string()),
            (GATEWAY_LABEL.to_string(), "tenant-root".to_string()),
        ]),
    );
    let ns = NamespaceSource::Static(Arc::new(ns));
    let idx = Arc::new(RouteIndex::default());
    idx.apply(http("cozy-dashboard", "dashboard", &[bad, good]));
    let mut cfg = PolicyConfig::default();
    cfg.enforcement.set(Layer::Route, Mode::Warn);
    let a = Admission::new(Arc::new(cfg), ns, Metrics::new()).with_routes(idx);
    let parent = json!({"name": GW.1, "namespace": GW.0});
    let warnings = |v: &Value| -> Vec<String> {
        v["response"]["warnings"]
            .as_array()
            .map(|w| {
                w.iter()
                    .map(|x| x.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    for (namespace, hosts, conflicts) in [
        // Valid and checked: the conflict is warned.
        ("tenant-alice", vec![good], vec![good]),
        // Admitted by warn mode with an invalid hostname: only the valid one conflicts.
        ("tenant-alice", vec![bad, good], vec![good]),
        ("tenant-alice", vec![bad], vec![]),
        // Outside tenant scope the layer checks nothing: the warnings validate.
        ("cozy-other", vec![bad], vec![]),
        ("cozy-other", vec![bad, good], vec![good]),
    ] {
        let body = review(namespace, &hosts, parent.clone());
        let r = a.handle(Some(WebhookResource::HttpRoutes), &body).await;
        let v: Value = serde_json::from_slice(&r.body).expect("json");
        assert_eq!(v["response"]["allowed"], json!(true), "{v}");
        let got: Vec<String> = warnings(&v)
            .into_iter()
            .filter(|w| w.starts_with("HostnameConflict"))
            .collect();
        assert_eq!(got.len(), conflicts.len(), "{namespace} {hosts:?}: {v}");
        for (w, h) in got.iter().zip(&conflicts) {
            assert!(
                w.starts_with(&format!("HostnameConflict: {h} is already on ")),
                "{namespace} {hosts:?}: {w}"
            );
        }
    }
}

#[test]
fn a_tenant_route_is_judged_only_on_gateways_it_may_attach_to() {
    let h = "dashboard.alice.example.org";
    let idx = RouteIndex::default();
    idx.apply(http("cozy-dashboard", "dashboard", &[h]));
    let route = http("tenant-alice", "web", &[h]);
    let run = |through: Option<&str>| {
        warnings(
            &route,
            |ns, n| idx.for_gateway(ns, n),
            "cozy-",
            through,
            &crate::platform::NoApexOwners,
        )
        .len()
    };
    // (gateway label of tenant-alice, warnings)
    for (through, want) in [
        (Some("tenant-root"), 1),
        (None, 1),
        (Some("tenant-bob"), 0),
        (Some(""), 0),
    ] {
        assert_eq!(run(through), want, "{through:?}");
    }
    // Its own namespace's Gateway needs no label.
    let idx = RouteIndex::default();
    let mut other = http("tenant-alice", "x", &[h]);
    other.namespace = "tenant-alice-2".into();
    let mut own = http("tenant-alice", "web", &[h]);
    for r in [&mut other, &mut own] {
        r.parent_refs[0].namespace = Some("tenant-alice".into());
        if let Some(e) = r.our_status.first_mut() {
            e.parent_ref.namespace = Some("tenant-alice".into());
        }
    }
    idx.apply(other);
    let got = warnings(
        &own,
        |ns, n| idx.for_gateway(ns, n),
        "cozy-",
        Some(""),
        &crate::platform::NoApexOwners,
    );
    assert_eq!(got.len(), 1, "{got:?}");
}

/// A route on the Gateways of `parents` (name, sectionName), in `tenant-root`; our status
/// entry for each Gateway of `published`.
fn routed(
    kind: RouteKind,
    ns: &str,
    name: &str,
    parents: &[(&str, Option<&str>)],
    hosts: &[&str],
    published: &[&str],
) -> RouteFacts {
    let parent = |gw: &str, section: Option<&str>| {
        let mut p = json!({"name": gw, "namespace": GW.0});
        if let Some(s) = section {
            p["sectionName"] = json!(s);
        }
        p
    };
    let refs: Vec<Value> = parents.iter().map(|(g, s)| parent(g, *s)).collect();
    let status: Vec<Value> = published
        .iter()
        .map(|g| {
            let section = parents.iter().find(|(x, _)| x == g).and_then(|(_, s)| *s);
            json!({"controllerName": CONTROLLER_NAME, "parentRef": parent(g, section),
                   "conditions": []})
        })
        .collect();
    let (api, k) = match kind {
        RouteKind::TlsRoute => ("gateway.networking.k8s.io/v1alpha2", "TLSRoute"),
        RouteKind::HttpRoute => ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    };
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": api, "kind": k,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": refs, "hostnames": hosts},
        "status": {"parents": status},
    }))
    .expect("dynamic object");
    project(kind, &o)
}

/// A random route over small pools of namespaces, names, sections and hostnames (so that
/// claims collide, repeat and cross Gateways), `hosts` distinct listenable hostnames.
fn random_route(rng: &mut fastrand::Rng, hosts: usize) -> RouteFacts {
    const NS: &[&str] = &[
        "cozy-a",
        "cozy-b",
        "tenant-root",
        "tenant-alice",
        "tenant-alice-x",
        "tenant-bob",
        "tenant-c",
    ];
    const SECTIONS: &[Option<&str>] = &[
        None,
        None,
        Some("https"),
        Some("https-x"),
        Some("http"),
        Some("tls-a"),
        Some("tls-b"),
    ];
    let kind = if rng.u8(0..5) == 0 {
        RouteKind::TlsRoute
    } else {
        RouteKind::HttpRoute
    };
    let ns = NS[rng.usize(0..NS.len())];
    let name = format!("r{}", rng.usize(0..40));
    let mut parents = vec![(GW.1, SECTIONS[rng.usize(0..SECTIONS.len())])];
    if rng.u8(0..8) == 0 {
        parents.push(("gw2", SECTIONS[rng.usize(0..SECTIONS.len())]));
    }
    if rng.u8(0..10) == 0 {
        // Twice on the same Gateway, another section.
        parents.push((GW.1, SECTIONS[rng.usize(0..SECTIONS.len())]));
    }
    let names: Vec<String> = (0..rng.usize(0..4))
        .map(|_| match rng.u8(0..20) {
            0 => "*.example.org".to_string(),
            1 => "Bad_".to_string(),
            _ => format!("h{}.example.org", rng.usize(0..hosts.max(1))),
        })
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let published: Vec<&str> = parents
        .iter()
        .map(|(g, _)| *g)
        .filter(|_| rng.u8(0..4) != 0)
        .collect::<BTreeSet<&str>>()
        .into_iter()
        .collect();
    routed(kind, ns, &name, &parents, &names, &published)
}

/// The summaries give the naive scan's warnings, word for word, on random Gateways from
/// empty to 5,000 routes (listener budgets below, at and past 64; reviews of routes that
/// are already indexed, as an UPDATE is), through `warnings` and through the cache.
#[test]
fn summaries_answer_as_the_naive_scan_does() {
    let mut compared = 0usize;
    let mut warned: BTreeMap<Reason, usize> = BTreeMap::new();
    // Apexes that contain the random hostnames at different depths, so the most
    // specific owner rule (SPEC §3.3) decides some conflicts.
    let mut apexes = crate::cluster::apex::ApexMap::default();
    for (ns, apex) in [
        ("tenant-root", "example.org"),
        ("tenant-bob", "h1.example.org"),
        ("tenant-c", "h2.example.org"),
        ("cozy-a", "h3.example.org"),
    ] {
        apexes.set(
            ns,
            &BTreeMap::from([(crate::platform::HOST_LABEL.to_string(), apex.to_string())]),
        );
    }
    for seed in 0..40u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let size = [0, 3, 30, 60, 200, 1000][rng.usize(0..6)];
        let size = if seed == 39 { 5000 } else { size };
        let hosts = [5, 40, 62, 70, 400][rng.usize(0..5)];
        let idx = Arc::new(RouteIndex::default());
        let prefix = ["cozy-", ""][rng.usize(0..2)];
        // Following the index from the start: the Gateway's summary, once kept, is changed
        // route by route as the rest are indexed.
        let cache = SummaryCache::following(idx.clone(), prefix, Arc::new(apexes.clone()));
        let mut indexed = Vec::new();
        for k in 0..size {
            let r = random_route(&mut rng, hosts);
            indexed.push(r.clone());
            idx.apply(r);
            if k == size / 2 {
                cache.with(GW.0, GW.1, |_| ());
            }
        }
        for i in 0..24 {
            let mut route = random_route(&mut rng, hosts);
            if i % 3 == 0 && !indexed.is_empty() {
                // An indexed route again (an UPDATE): with other hostnames, or its own
                // plus one.
                let o = &indexed[rng.usize(0..indexed.len())];
                if rng.bool() {
                    (route.kind, route.namespace) = (o.kind, o.namespace.clone());
                    route.set_name(o.name());
                } else {
                    let extra = route.hostnames().next().map(str::to_string);
                    route = o.clone();
                    if let Some(h) = extra {
                        let mut hostnames: Vec<String> =
                            route.hostnames().map(str::to_string).collect();
                        hostnames.push(h);
                        route.set_hostnames(&hostnames);
                    }
                }
            }
            for through in [None, Some("tenant-root"), Some("")] {
                let want = naive_scan::warnings(
                    &route,
                    |ns, n| idx.for_gateway(ns, n),
                    prefix,
                    through,
                    &apexes,
                );
                let got = warnings(
                    &route,
                    |ns, n| idx.for_gateway(ns, n),
                    prefix,
                    through,
                    &apexes,
                );
                assert_eq!(got, want, "seed {seed}, review {i}: {route:?}");
                let cached = warnings_from(
                    &route,
                    |ns, n, f| cache.with(ns, n, f),
                    prefix,
                    through,
                    &apexes,
                );
                assert_eq!(cached, want, "seed {seed}, review {i} (cached)");
                compared += 1;
                for w in &want {
                    *warned.entry(w.reason).or_default() += 1;
                }
            }
        }
    }
    // The inputs exercise every warning, not only the silent path.
    for reason in [
        Reason::HostnameConflict,
        Reason::ListenerBudget,
        Reason::PassthroughShared,
    ] {
        let n = warned.get(&reason).copied().unwrap_or(0);
        assert!(n >= 20, "{reason:?}: {n} in {compared} reviews");
    }
}

/// Issue 22 item 4: a kept summary changed route by route is the summary built from the
/// routes afresh, and gives the same warnings, whatever the changes: random adds, updates
/// (other hostnames, sectionNames, kind, Gateways, published or not) and deletes over
/// several namespaces sharing hostnames, on two Gateways, with certMode switches and apex
/// changes of claiming namespaces (a summary reads each apex once).
#[test]
fn kept_summaries_equal_summaries_built_afresh() {
    use crate::cluster::apex::LiveApexIndex;
    use crate::cluster::route_facts::HttpsListeners;
    let labels = |apex: Option<&str>| {
        apex.map(|a| (crate::platform::HOST_LABEL.to_string(), a.to_string()))
            .into_iter()
            .collect::<BTreeMap<String, String>>()
    };
    const APEXES: &[Option<&str>] = &[
        None,
        Some("example.org"),
        Some("h1.example.org"),
        Some("h2.example.org"),
        Some("h3.example.org"),
    ];
    const NS: &[&str] = &[
        "cozy-a",
        "tenant-root",
        "tenant-alice",
        "tenant-bob",
        "tenant-c",
    ];
    let (mut kept_compared, mut changes) = (0usize, 0usize);
    let mut warned: BTreeMap<Reason, usize> = BTreeMap::new();
    for seed in 0..24u64 {
        let mut rng = fastrand::Rng::with_seed(2200 + seed);
        let prefix = ["cozy-", "cozy-", ""][rng.usize(0..3)];
        let hosts = [3, 40, 70, 120][rng.usize(0..4)];
        let apexes = Arc::new(LiveApexIndex::default());
        for (ns, apex) in [
            ("tenant-root", "example.org"),
            ("tenant-bob", "h1.example.org"),
            ("tenant-c", "h2.example.org"),
            ("cozy-a", "h3.example.org"),
        ] {
            apexes.apply(ns, &labels(Some(apex)));
        }
        let idx = Arc::new(RouteIndex::default());
        let cache = SummaryCache::following(idx.clone(), prefix, apexes.clone());
        let mut indexed: Vec<RouteFacts> = Vec::new();
        // Most Gateways start with routes (listener budgets near or past 64), summarised at
        // the first review; the changes below are then made to that summary.
        for _ in 0..[0, 150, 400, 400][rng.usize(0..4)] {
            let r = random_route(&mut rng, hosts);
            indexed
                .retain(|o| (o.kind, &o.namespace, &o.name()) != (r.kind, &r.namespace, &r.name()));
            indexed.push(r.clone());
            idx.apply(r);
        }
        for step in 0..300 {
            match rng.u8(0..20) {
                0..=11 => {
                    let r = random_route(&mut rng, hosts);
                    indexed.retain(|o| {
                        (o.kind, &o.namespace, &o.name()) != (r.kind, &r.namespace, &r.name())
                    });
                    indexed.push(r.clone());
                    idx.apply(r);
                }
                12..=15 if !indexed.is_empty() => {
                    // The same route changed: hostnames, sections, Gateways, published or not.
                    let at = rng.usize(0..indexed.len());
                    let mut r = random_route(&mut rng, hosts);
                    (r.kind, r.namespace) = (indexed[at].kind, indexed[at].namespace.clone());
                    r.set_name(indexed[at].name());
                    indexed[at] = r.clone();
                    idx.apply(r);
                }
                16..=17 if !indexed.is_empty() => {
                    let r = indexed.swap_remove(rng.usize(0..indexed.len()));
                    idx.delete(r.kind, &r.namespace, r.name());
                }
                18 => {
                    let listeners = [
                        None,
                        Some(HttpsListeners::PerHostname),
                        Some(HttpsListeners::PerApex),
                    ][rng.usize(0..3)];
                    idx.set_listeners(GW.0, [GW.1, "gw2"][rng.usize(0..2)], listeners);
                }
                _ => {
                    let ns = NS[rng.usize(0..NS.len())];
                    apexes.apply(ns, &labels(APEXES[rng.usize(0..APEXES.len())]));
                }
            }
            changes += 1;
            if step % 3 != 0 {
                continue;
            }
            let mut admitted = random_route(&mut rng, hosts);
            if rng.bool() && !indexed.is_empty() {
                admitted = indexed[rng.usize(0..indexed.len())].clone();
            }
            for through in [None, Some("tenant-root"), Some("")] {
                let got = warnings_from(
                    &admitted,
                    |ns, n, f| cache.with(ns, n, f),
                    prefix,
                    through,
                    &*apexes,
                );
                let afresh = warnings_from(
                    &admitted,
                    |ns, n, f| {
                        idx.read_gateway(ns, n, |routes, listeners| {
                            let summary = GatewaySummary::of(routes, ns, n, prefix, &*apexes);
                            f(GatewayView {
                                routes,
                                summary: &summary,
                                listeners,
                            })
                        })
                    },
                    prefix,
                    through,
                    &*apexes,
                );
                assert_eq!(got, afresh, "seed {seed}, step {step}: {admitted:?}");
                for w in &got {
                    *warned.entry(w.reason).or_default() += 1;
                }
            }
            for gw in [GW.1, "gw2"] {
                // A review of the Gateway first: it checks the apexes the summary read.
                cache.with(GW.0, gw, |_| ());
                if let Some(kept) = cache.kept(GW.0, gw) {
                    let routes = idx.for_gateway(GW.0, gw);
                    let afresh = GatewaySummary::of(&routes, GW.0, gw, prefix, &*apexes);
                    assert!(
                        kept == afresh,
                        "seed {seed}, step {step}, Gateway {gw}: the kept summary is not the \
                         summary of the routes:\n{kept:?}\n{afresh:?}"
                    );
                    kept_compared += 1;
                }
            }
        }
    }
    // Kept summaries were changed in place and compared throughout, and every warning came.
    assert!(
        kept_compared > 2_000,
        "{kept_compared} compared, {changes} changes"
    );
    // PassthroughHostname comes from the declarations, apart from the summaries.
    for reason in Reason::ALL
        .into_iter()
        .filter(|r| *r != Reason::PassthroughHostname)
    {
        let n = warned.get(&reason).copied().unwrap_or(0);
        assert!(n >= 20, "{reason:?}: {n}");
    }
}

/// The admitted object's facts are those the index projects from the whole object,
/// whatever shape the spec has.
#[test]
fn the_admitted_route_reads_as_the_whole_object() {
    let rules = json!([{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                        "backendRefs": [{"name": "web", "port": 80}]}]);
    let big = json!(u64::MAX);
    let specs = [
        json!({"parentRefs": [{"name": "gw", "sectionName": "https"}],
               "hostnames": ["a.example.org", 7, "b.example.org"], "rules": rules}),
        json!({"hostnames": ["a.example.org"], "rules": rules}),
        json!({"parentRefs": "not a list", "hostnames": ["a.example.org"]}),
        json!({"rules": rules}),
        json!("not an object"),
        Value::Null,
        json!(7),
        json!({"hostnames": "a.example.org", "parentRefs": {"name": "gw"}}),
        json!({"hostnames": [null, ["a.example.org"], {"h": 1}, true, "b.example.org"],
               "parentRefs": null}),
        json!({"hostnames": null, "parentRefs": [null, "gw", 5, {"name": "gw"}]}),
        // Each field of a parentRef with every type: a wrong one drops that parentRef.
        json!({"parentRefs": [
            {"name": "a", "group": null, "kind": null, "namespace": null,
             "sectionName": null, "port": null},
            {"name": "b", "group": "gateway.networking.k8s.io", "kind": "Gateway",
             "namespace": "tenant-root", "sectionName": "https-x", "port": 443},
            {"name": "c", "group": 5},
            {"name": "d", "kind": ["Gateway"]},
            {"name": "e", "namespace": {"x": 1}},
            {"name": "f", "sectionName": true},
            {"name": "g", "port": "443"},
            {"name": "h", "port": 443.0},
            {"name": "i", "port": -1},
            {"name": "j", "port": 4_294_967_296_i64},
            {"name": "k", "port": big},
            {"name": null},
            {"name": 5},
            {"name": ""},
            {"namespace": "tenant-root"},
            {"name": "l", "unknown": [1, 2], "Name": "m"},
            {"name": "n", "kind": "ListenerSet", "group": "x.io"}
        ], "hostnames": ["a.example.org", "", "*.example.org", "A.Example.Org"]}),
        // Lists where a struct is read: serde takes a struct's fields by position.
        json!([["a.example.org"], [{"name": "gw"}]]),
        json!([["a.example.org"]]),
        json!([["a.example.org"], [], 1]),
        json!([]),
        json!({"parentRefs": [["g", "Gateway", "tenant-root", "gw"], {"name": "x"}]}),
        json!({"parentRefs": [[null, null, null, "gw", "https", 443]]}),
        json!({"parentRefs": [[]]}),
    ];
    let mut direct = 0;
    let n = specs.len();
    for spec in specs {
        let object = json!({"apiVersion": "gateway.networking.k8s.io/v1",
                            "kind": "HTTPRoute",
                            "metadata": {"name": "web", "namespace": "tenant-alice"},
                            "spec": spec});
        let review = crate::policy::Review {
            operation: crate::policy::Operation::Create,
            kind: "HTTPRoute",
            namespace: "tenant-alice",
            name: "web",
            object: &object,
            old_object: None,
            username: "alice",
            groups: &[],
        };
        let whole: DynamicObject = serde_json::from_value(object.clone()).expect("dynamic object");
        let want = project(RouteKind::HttpRoute, &whole);
        assert_eq!(
            admitted_through_index(RouteKind::HttpRoute, &review),
            want,
            "{spec}"
        );
        // And from what the admission codec keeps of it, as the server reads it: the same
        // as the text round trip reads it there. (Not always `want`: arrays are transparent
        // to the codec, so a spec that is a list loses its elements' unread keys; the API
        // server's schema refuses such a spec before any webhook sees it.)
        let raw = serde_json::value::to_raw_value(&object).expect("raw");
        let kept = crate::admission::project::project(
            &raw,
            crate::admission::project::layer_paths(crate::policy::Layer::Route),
        )
        .expect("projects");
        let review_kept = crate::policy::Review {
            object: &kept,
            ..review
        };
        let through = admitted_through_index(RouteKind::HttpRoute, &review_kept);
        if let Some(read) = read_admitted(RouteKind::HttpRoute, &review_kept) {
            assert_eq!(read, Admitted::of(&through), "kept: {spec}");
        }
        if let Some(read) = read_admitted(RouteKind::HttpRoute, &review) {
            assert_eq!(read, Admitted::of(&want), "read directly: {spec}");
            direct += 1;
        }
    }
    // Only the list-for-a-struct shapes (seven) take the text round trip.
    assert_eq!(direct, n - 7);
}

/// An UPDATE is counted against the others: the listeners its own published version
/// holds alone are not in use by anyone else.
#[test]
fn an_update_does_not_count_its_own_listeners() {
    // (what, hostnames of the UPDATE of tenant-root/r00, expected substring)
    let cases = [
        (
            "its old hostname frees the 64th listener for the new one",
            vec!["new.example.org"],
            "this route takes the last 1 of 64 listeners",
        ),
        (
            "keeping its hostname and adding one: that one is short",
            vec!["h00.example.org", "new.example.org"],
            "1 of 64 listeners left, 2 needed, 1 hostname(s) get none",
        ),
    ];
    for (what, hosts, want) in cases {
        let route = http("tenant-root", "r00", &hosts);
        let got: Vec<RouteWarning> = run(&filled(63), &route)
            .into_iter()
            .filter(|w| w.reason == Reason::ListenerBudget)
            .collect();
        assert_eq!(got.len(), 1, "{what}: {got:?}");
        assert!(got[0].text.contains(want), "{what}: {:?}", got[0].text);
    }
    // Shared with another route, the hostname stays in use.
    let mut index = filled(63);
    index.push(http("tenant-root", "copy", &["h00.example.org"]));
    let got = run(&index, &http("tenant-root", "r00", &["new.example.org"]));
    assert!(
        got.iter()
            .any(|w| w.text.contains("0 of 64 listeners left")),
        "{got:?}"
    );
}

/// A kept summary changes with the index: the answers follow each route added or deleted,
/// without summarising the Gateway again.
#[test]
fn the_cache_follows_the_index() {
    let idx = Arc::new(RouteIndex::default());
    for r in filled(40) {
        idx.apply(r);
    }
    let cache = SummaryCache::following(idx.clone(), "cozy-", Arc::new(NoApexOwners));
    let h = "dashboard.alice.example.org";
    let route = http("tenant-alice", "web", &[h]);
    let run = || {
        warnings_from(
            &route,
            |ns, n, f| cache.with(ns, n, f),
            "cozy-",
            None,
            &NoApexOwners,
        )
    };
    assert!(run().is_empty());
    assert_eq!(cache.len(), 1, "40 routes: the summary is kept");
    let rebuilt = |idx: &RouteIndex| {
        GatewaySummary::of(
            &idx.for_gateway(GW.0, GW.1),
            GW.0,
            GW.1,
            "cozy-",
            &NoApexOwners,
        )
    };
    idx.apply(http("cozy-dashboard", "dashboard", &[h]));
    assert_eq!(
        cache.kept(GW.0, GW.1),
        Some(rebuilt(&idx)),
        "changed in place"
    );
    let got = run();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].text.contains("from cozy-dashboard, which wins"));
    idx.delete(RouteKind::HttpRoute, "cozy-dashboard", "dashboard");
    assert_eq!(cache.kept(GW.0, GW.1), Some(rebuilt(&idx)));
    assert!(run().is_empty());
    assert_eq!(cache.len(), 1);
}

/// The summary of a Gateway whose routes are all gone from the index is dropped with them;
/// Gateways of fewer than [`CACHE_FROM`] routes are summarised per review, never kept.
#[test]
fn the_cache_drops_gateways_that_are_gone() {
    let idx = Arc::new(RouteIndex::default());
    let on = |gw: usize, i: usize| {
        let mut r = http("tenant-root", &format!("r{gw}-{i}"), &["a.example.org"]);
        let name = format!("gw{gw}");
        r.parent_refs[0].name = name.clone();
        r.our_status[0].parent_ref.name = name;
        r
    };
    let cache = SummaryCache::following(idx.clone(), "cozy-", Arc::new(NoApexOwners));
    for gw in 0..70 {
        for i in 0..CACHE_FROM {
            idx.apply(on(gw, i));
        }
        cache.with("tenant-root", &format!("gw{gw}"), |_| ());
    }
    for i in 0..CACHE_FROM - 1 {
        idx.apply(on(70, i));
    }
    cache.with("tenant-root", "gw70", |v| {
        assert_eq!(v.summary.listenable, 1)
    });
    assert_eq!(cache.len(), 70, "the small Gateway is not kept");
    for gw in 0..30 {
        for i in 0..CACHE_FROM {
            idx.delete(RouteKind::HttpRoute, "tenant-root", &format!("r{gw}-{i}"));
        }
    }
    assert_eq!(cache.len(), 40);
    // One route left on a Gateway keeps its summary, still in step with the index.
    for i in 1..CACHE_FROM {
        idx.delete(RouteKind::HttpRoute, "tenant-root", &format!("r40-{i}"));
    }
    assert_eq!(cache.len(), 40);
    idx.delete(RouteKind::HttpRoute, "tenant-root", "r40-0");
    assert_eq!(cache.len(), 39);
    assert_eq!(cache.kept("tenant-root", "gw40"), None);
}

/// The oracle: every review's warnings computed by scanning all the Gateway's routes, with
/// no summary, no cache and its own counting; only the wording is shared.
mod naive_scan {
    use super::super::*;
    use crate::cluster::routes::gateways_of;

    /// Its valid hostnames, each once, in order.
    fn valid_hostnames(r: &RouteFacts) -> BTreeSet<&str> {
        r.hostnames()
            .filter(|h| hostname::validate(h).is_ok())
            .collect()
    }

    /// "a", "a and b", "a and 2 more".
    fn some_of(names: &BTreeSet<&str>) -> String {
        let mut it = names.iter();
        match (it.next(), names.len()) {
            (None, _) => String::new(),
            (Some(a), 1) => (*a).to_string(),
            (Some(a), 2) => format!("{a} and {}", it.next().copied().unwrap_or_default()),
            (Some(a), n) => format!("{a} and {} more", n - 1),
        }
    }
    use std::collections::{BTreeMap, HashSet};

    pub fn warnings(
        route: &RouteFacts,
        snapshot: impl Fn(&str, &str) -> Arc<GatewayRoutes>,
        system_prefix: &str,
        publishes_through: Option<&str>,
        apexes: &dyn ApexOwners,
    ) -> Vec<RouteWarning> {
        // Only the Gateways its parentRefs name (the admitted object's status is not ours to read).
        let mut targets = route.clone();
        targets.our_status = Box::default();
        let mut out = Vec::new();
        for (gw_ns, gw_name) in gateways_of(&targets) {
            if *gw_ns != *route.namespace && publishes_through.is_some_and(|g| g != gw_ns) {
                continue;
            }
            let routes = snapshot(&gw_ns, &gw_name);
            let on = Gateway {
                namespace: &gw_ns,
                name: &gw_name,
            };
            let published: Vec<&RouteFacts> = routes
                .values()
                .map(|r| &**r)
                .filter(|r| {
                    (r.kind, &r.namespace, &r.name())
                        != (route.kind, &route.namespace, &route.name())
                })
                .filter(|r| on.published_by(r))
                .collect();
            match route.kind {
                RouteKind::HttpRoute => {
                    http_route(route, &on, &published, system_prefix, apexes, &mut out)
                }
                RouteKind::TlsRoute => tls_route(route, &on, &published, &mut out),
            }
        }
        for w in &mut out {
            w.text = crate::admission::decision::truncate_warning(&w.text);
        }
        out
    }

    fn http_route(
        route: &RouteFacts,
        on: &Gateway<'_>,
        published: &[&RouteFacts],
        system_prefix: &str,
        apexes: &dyn ApexOwners,
        out: &mut Vec<RouteWarning>,
    ) {
        if !on.claimed_by(route) {
            // sectionName `http` or `tls-…`: no HTTPS listener, no hostname claimed.
            return;
        }
        let mine = valid_hostnames(route);
        // One pass over the Gateway's routes: who else claims each of our hostnames, and the
        // distinct hostnames with a listener, counted only up to the cap (past it nothing is
        // left either way, so a large Gateway costs a scan, not a set of all its hostnames).
        let mut claimed: BTreeMap<&str, Vec<Claimant<'_>>> = BTreeMap::new();
        let mut with_listener: HashSet<&str> = HashSet::new();
        for r in published.iter().filter(|r| on.claimed_by(r)) {
            for h in r.hostnames() {
                if mine.contains(h) {
                    claimed.entry(h).or_default().push(Claimant {
                        namespace: &r.namespace,
                        name: r.name(),
                    });
                }
                if with_listener.len() < MAX_LISTENERS
                    && !hostname::is_wildcard(h)
                    && hostname::validate(h).is_ok()
                {
                    with_listener.insert(h);
                }
            }
        }
        let me = Claimant {
            namespace: &route.namespace,
            name: route.name(),
        };
        let apex_of = |ns: &str| apexes.apex_of(ns);
        for h in &mine {
            let Some(others) = claimed.get(h) else {
                continue;
            };
            let foreign: BTreeSet<&str> = others
                .iter()
                .filter(|c| !claims::shares_with(c, &me))
                .map(|c| c.namespace)
                .collect();
            if foreign.is_empty() {
                continue;
            }
            let owned: Vec<(Claimant<'_>, Option<String>)> = others
                .iter()
                .copied()
                .chain([me])
                .map(|c| (c, apex_of(c.namespace)))
                .collect();
            let Some(winner) = claims::winner_for(
                h,
                owned.iter().map(|(c, a)| ApexClaimant {
                    namespace: c.namespace,
                    name: c.name,
                    apex: a.as_deref(),
                }),
                system_prefix,
            )
            .map(|w| w.claimant()) else {
                continue;
            };
            let text = if claims::shares_with(&me, &winner) {
                format!(
                    "HostnameConflict for {}: {h} is also on {on}; this route wins",
                    some_of(&foreign)
                )
            } else {
                format!(
                    "HostnameConflict: {h} is already on {on} from {}, which wins",
                    winner.namespace
                )
            };
            out.push(RouteWarning {
                reason: Reason::HostnameConflict,
                text,
            });
        }

        // The budget, as http01 counts it.
        let passthrough: BTreeSet<&str> = published
            .iter()
            .filter(|r| r.kind == RouteKind::TlsRoute)
            .flat_map(|r| on.targeted_by(r))
            .flatten()
            .filter(|s| s.starts_with("tls-"))
            .collect();
        let in_use = 1 + passthrough.len() + with_listener.len();
        let left = MAX_LISTENERS.saturating_sub(in_use);
        let new = mine
            .iter()
            .filter(|h| !hostname::is_wildcard(h) && !claimed.contains_key(*h))
            .count();
        if new == 0 || new < left {
            return;
        }
        // The fair share's demands, counted naively: every listenable hostname the others
        // publish, for the namespace of its winning claimant.
        let mut by_host: BTreeMap<&str, Vec<&RouteFacts>> = BTreeMap::new();
        for r in published.iter().filter(|r| on.claimed_by(r)) {
            for h in r.hostnames() {
                if !hostname::is_wildcard(h) && hostname::validate(h).is_ok() {
                    by_host.entry(h).or_default().push(r);
                }
            }
        }
        let mut demands: BTreeMap<String, usize> = BTreeMap::new();
        for (h, rs) in &by_host {
            let owned: Vec<(&RouteFacts, Option<String>)> =
                rs.iter().map(|r| (*r, apex_of(&r.namespace))).collect();
            let w = claims::winner_for(
                h,
                owned.iter().map(|(r, a)| ApexClaimant {
                    namespace: &r.namespace,
                    name: r.name(),
                    apex: a.as_deref(),
                }),
                system_prefix,
            );
            if let Some(w) = w {
                *demands.entry(w.namespace.to_string()).or_default() += 1;
            }
        }
        let others_publish = demands
            .iter()
            .any(|(ns, n)| ns.as_str() != me.namespace && *n > 0);
        // The oracle counts on its own; only the wording is shared.
        if new == left || !others_publish {
            out.push(budget_warning(on, left, new));
            return;
        }
        let budget = MAX_LISTENERS.saturating_sub(1 + passthrough.len());
        if let Some(text) = share_warning(
            (on.namespace, on.name),
            me.namespace,
            &demands,
            new,
            budget,
            system_prefix,
        ) {
            out.push(RouteWarning {
                reason: Reason::ListenerBudget,
                text,
            });
        }
    }

    fn tls_route(
        route: &RouteFacts,
        on: &Gateway<'_>,
        published: &[&RouteFacts],
        out: &mut Vec<RouteWarning>,
    ) {
        for h in valid_hostnames(route) {
            let others: BTreeSet<&str> = published
                .iter()
                .filter(|r| r.kind == RouteKind::TlsRoute && r.namespace != route.namespace)
                .filter(|r| r.hostnames().any(|x| x == h))
                .map(|r| &*r.namespace)
                .collect();
            if others.is_empty() {
                continue;
            }
            out.push(RouteWarning {
                reason: Reason::PassthroughShared,
                text: format!(
                    "{h} also passes through {on} from {}; the data plane picks one",
                    some_of(&others)
                ),
            });
        }
    }
}

/// The listener budget is http01's alone (SPEC §3.2, §3.3): a Gateway whose TenantGateway is
/// in dns01 or existingSecret mode has a wildcard listener per apex, so its routes get no
/// budget warning; one whose TenantGateway the index has not seen is counted as http01.
/// The hostname-conflict warning is the same in every mode.
mod cert_modes {
    use super::*;
    use crate::cluster::route_facts::HttpsListeners;
    use crate::platform::NoApexOwners;

    /// The Gateway's TenantGateway as the index saw it: its certMode, or none seen.
    const HTTP01: Option<&str> = Some("http01");
    const DNS01: Option<&str> = Some("dns01");
    const EXISTING_SECRET: Option<&str> = Some("existingSecret");
    const UNKNOWN: Option<&str> = None;

    fn index(routes: &[RouteFacts], cert_mode: Option<&str>) -> Arc<RouteIndex> {
        let idx = Arc::new(RouteIndex::default());
        for r in routes {
            idx.apply(r.clone());
        }
        if cert_mode.is_some() {
            idx.set_listeners(GW.0, GW.1, HttpsListeners::of_cert_mode(cert_mode));
        }
        idx
    }

    /// The server's path: the summaries through the cache, with the certMode the index knows.
    fn judge(cache: &SummaryCache, route: &RouteFacts) -> Vec<RouteWarning> {
        warnings_from(
            route,
            |ns, n, f| cache.with(ns, n, f),
            "cozy-",
            None,
            &NoApexOwners,
        )
    }

    /// 63 hostnames of tenant-bob and one of tenant-late: the Gateway is full and tenant-bob
    /// is at its fair share.
    fn shared() -> Vec<RouteFacts> {
        let mut v: Vec<RouteFacts> = (0..63)
            .map(|i| {
                let h = format!("f{i:02}.bob.example.org");
                http("tenant-bob", &format!("f{i:02}"), &[h.as_str()])
            })
            .collect();
        v.push(http("tenant-late", "shop", &["shop.late.example.org"]));
        v
    }

    #[test]
    fn the_budget_warning_is_given_only_for_http01() {
        // Whole within 120 characters for the platform's root Gateway, advice included.
        let past_share = "Gateway tenant-root/tenant-root: namespace fair share is 62/63 listeners (http01); 1 hostname(s) get none; use dns01";
        let none_left = "Gateway tenant-root/tenant-root: 0 of 64 listeners left, 1 needed, 1 hostname(s) get none (http01); use certMode dns01";
        let the_last = "Gateway tenant-root/tenant-root: this route takes the last 1 of 64 listeners (http01); more need certMode dns01";
        let conflict = "HostnameConflict: dash.example.org is already on tenant-root/tenant-root from cozy-dashboard, which wins";
        let with_cozy = || {
            let mut v = filled(62);
            v.push(http("cozy-dashboard", "dashboard", &["dash.example.org"]));
            v
        };
        let bob = http("tenant-bob", "f63", &["f63.bob.example.org"]);
        let root = http("tenant-root", "x", &["new.example.org"]);
        let both = http("tenant-root", "x", &["dash.example.org", "new.example.org"]);
        // (what, routes in the index, certMode, admitted route, expected warnings)
        type Case = (
            &'static str,
            Vec<RouteFacts>,
            Option<&'static str>,
            RouteFacts,
            Vec<(Reason, &'static str)>,
        );
        let cases: Vec<Case> = vec![
            (
                "past its fair share, http01",
                shared(),
                HTTP01,
                bob.clone(),
                vec![(Reason::ListenerBudget, past_share)],
            ),
            (
                "past its fair share, dns01",
                shared(),
                DNS01,
                bob.clone(),
                vec![],
            ),
            (
                "past its fair share, existingSecret",
                shared(),
                EXISTING_SECRET,
                bob.clone(),
                vec![],
            ),
            (
                "past its fair share, no TenantGateway seen",
                shared(),
                UNKNOWN,
                bob,
                vec![(Reason::ListenerBudget, past_share)],
            ),
            (
                "none left, http01",
                filled(63),
                HTTP01,
                root.clone(),
                vec![(Reason::ListenerBudget, none_left)],
            ),
            ("none left, dns01", filled(63), DNS01, root.clone(), vec![]),
            (
                "none left, existingSecret",
                filled(63),
                EXISTING_SECRET,
                root.clone(),
                vec![],
            ),
            (
                "none left, no TenantGateway seen",
                filled(63),
                UNKNOWN,
                root.clone(),
                vec![(Reason::ListenerBudget, none_left)],
            ),
            (
                "the last one, http01",
                filled(62),
                HTTP01,
                root.clone(),
                vec![(Reason::ListenerBudget, the_last)],
            ),
            (
                "the last one, dns01",
                filled(62),
                DNS01,
                root.clone(),
                vec![],
            ),
            (
                "the last one, existingSecret",
                filled(62),
                EXISTING_SECRET,
                root.clone(),
                vec![],
            ),
            (
                "the last one, no TenantGateway seen",
                filled(62),
                UNKNOWN,
                root,
                vec![(Reason::ListenerBudget, the_last)],
            ),
            (
                "a conflict on a full Gateway, http01",
                with_cozy(),
                HTTP01,
                both.clone(),
                vec![
                    (Reason::HostnameConflict, conflict),
                    (Reason::ListenerBudget, past_share),
                ],
            ),
            (
                "a conflict on a full Gateway, dns01: the conflict alone",
                with_cozy(),
                DNS01,
                both.clone(),
                vec![(Reason::HostnameConflict, conflict)],
            ),
            (
                "a conflict on a full Gateway, existingSecret: the conflict alone",
                with_cozy(),
                EXISTING_SECRET,
                both.clone(),
                vec![(Reason::HostnameConflict, conflict)],
            ),
            (
                "a conflict on a full Gateway, no TenantGateway seen",
                with_cozy(),
                UNKNOWN,
                both,
                vec![
                    (Reason::HostnameConflict, conflict),
                    (Reason::ListenerBudget, past_share),
                ],
            ),
        ];
        for (what, routes, cert_mode, route, want) in cases {
            let idx = index(&routes, cert_mode);
            let cache = SummaryCache::following(idx, "cozy-", Arc::new(NoApexOwners));
            let got = judge(&cache, &route);
            let got: Vec<(Reason, &str)> =
                got.iter().map(|w| (w.reason, w.text.as_str())).collect();
            assert_eq!(got, want, "{what}");
            if cert_mode.is_none() {
                // Not knowing the certMode is judging from the routes alone ([`warnings`]).
                let alone = run(&routes, &route);
                let alone: Vec<(Reason, &str)> =
                    alone.iter().map(|w| (w.reason, w.text.as_str())).collect();
                assert_eq!(alone, want, "{what}: the snapshot alone");
            }
        }
    }

    /// A certMode switch changes no route, so the Gateway's snapshot stays the same: the
    /// cached summary must still follow it.
    #[test]
    fn the_cache_follows_a_certmode_switch() {
        let idx = index(&filled(63), UNKNOWN);
        let cache = SummaryCache::following(idx.clone(), "cozy-", Arc::new(NoApexOwners));
        let route = http("tenant-root", "x", &["new.example.org"]);
        let budget = |w: Vec<RouteWarning>| w.iter().any(|w| w.reason == Reason::ListenerBudget);
        assert!(budget(judge(&cache, &route)), "no TenantGateway seen");
        for (cert_mode, warned) in [
            (DNS01, false),
            (HTTP01, true),
            (EXISTING_SECRET, false),
            (UNKNOWN, true),
        ] {
            idx.set_listeners(
                GW.0,
                GW.1,
                cert_mode.and_then(|m| HttpsListeners::of_cert_mode(Some(m))),
            );
            assert_eq!(budget(judge(&cache, &route)), warned, "{cert_mode:?}");
        }
        assert_eq!(cache.len(), 1, "one Gateway, its summary kept");
    }
}

/// SPEC §3.10: an HTTPRoute claiming a passthrough hostname of an http01 Gateway is warned
/// (the reconciler refuses that hostname, PassthroughHostname), whatever the published
/// routes; only parentRefs that claim HTTPS listeners, only Gateways the route may attach
/// to, only what the Gateway's TenantGateway declares.
mod passthrough_hostname {
    use super::*;
    use crate::cluster::route_facts::{PassthroughListener, http01_passthrough};

    fn declared(idx: &RouteIndex, cert_mode: &str, services: &[&str]) {
        let services: Vec<String> = services.iter().map(|s| s.to_string()).collect();
        idx.set_passthrough(
            GW.0,
            GW.1,
            http01_passthrough(Some(cert_mode), "Example.org", &services),
        );
    }

    fn judge(idx: &RouteIndex, route: &RouteFacts, through: Option<&str>) -> Vec<RouteWarning> {
        passthrough_hostname_warnings(
            &Admitted::of(route),
            |ns, n| idx.passthrough(ns, n),
            through,
        )
    }

    #[test]
    fn a_claim_on_a_declared_passthrough_hostname_is_warned() {
        let idx = RouteIndex::default();
        declared(&idx, "http01", &["api", "vm-exportproxy", "Bad_Svc"]);
        assert_eq!(
            idx.passthrough(GW.0, GW.1).as_deref(),
            Some(
                &[
                    PassthroughListener {
                        listener: "tls-api".into(),
                        hostname: "api.example.org".into()
                    },
                    PassthroughListener {
                        listener: "tls-vm-exportproxy".into(),
                        hostname: "vm-exportproxy.example.org".into()
                    }
                ][..]
            ),
            "the apex lowercased, an entry that makes no listener left out"
        );
        // (route, warned hostnames)
        let cases: Vec<(RouteFacts, Vec<&str>)> = vec![
            (
                obj(
                    "HTTPRoute",
                    "tenant-root",
                    "a",
                    None,
                    &["api.example.org", "www.example.org"],
                    false,
                ),
                vec!["api.example.org"],
            ),
            (
                obj(
                    "HTTPRoute",
                    "tenant-root",
                    "b",
                    Some("https-api"),
                    &["vm-exportproxy.example.org"],
                    false,
                ),
                vec!["vm-exportproxy.example.org"],
            ),
            // Port 80 or the passthrough listener itself: no HTTPS listener claimed.
            (
                obj(
                    "HTTPRoute",
                    "tenant-root",
                    "c",
                    Some("http"),
                    &["api.example.org"],
                    false,
                ),
                vec![],
            ),
            (
                obj(
                    "HTTPRoute",
                    "tenant-root",
                    "d",
                    Some("tls-api"),
                    &["api.example.org"],
                    false,
                ),
                vec![],
            ),
            // The TLSRoute the listener is for.
            (
                obj(
                    "TLSRoute",
                    "tenant-root",
                    "e",
                    None,
                    &["api.example.org"],
                    false,
                ),
                vec![],
            ),
            (
                obj(
                    "HTTPRoute",
                    "tenant-root",
                    "f",
                    None,
                    &["apis.example.org"],
                    false,
                ),
                vec![],
            ),
        ];
        for (route, want) in cases {
            let got = judge(&idx, &route, None);
            let hosts: Vec<&str> = got
                .iter()
                .map(|w| {
                    assert_eq!(w.reason, Reason::PassthroughHostname);
                    w.text.split(' ').nth(1).unwrap_or_default()
                })
                .collect();
            assert_eq!(hosts, want, "{}: {got:?}", route.name());
        }
        let got = judge(
            &idx,
            &obj(
                "HTTPRoute",
                "tenant-root",
                "a",
                None,
                &["api.example.org"],
                false,
            ),
            None,
        );
        assert_eq!(
            got[0].text,
            "PassthroughHostname: api.example.org is passed through by tenant-root/tenant-root \
             (tls-api); no HTTPS listener for it"
        );
        // A tenant namespace publishing through another Gateway is not judged on this one.
        let r = obj(
            "HTTPRoute",
            "tenant-alice",
            "a",
            None,
            &["api.example.org"],
            false,
        );
        assert_eq!(judge(&idx, &r, Some("tenant-alice")).len(), 0);
        assert_eq!(judge(&idx, &r, Some(GW.0)).len(), 1);
    }

    #[test]
    fn only_an_http01_declaration_counts() {
        let idx = RouteIndex::default();
        let route = obj(
            "HTTPRoute",
            "tenant-root",
            "a",
            None,
            &["api.example.org"],
            false,
        );
        assert!(
            judge(&idx, &route, None).is_empty(),
            "no TenantGateway seen"
        );
        for (mode, warned) in [
            ("dns01", false),
            ("http01", true),
            ("existingSecret", false),
        ] {
            declared(&idx, mode, &["api"]);
            assert_eq!(
                judge(&idx, &route, None).len(),
                usize::from(warned),
                "{mode}"
            );
        }
        declared(&idx, "http01", &[]);
        assert!(judge(&idx, &route, None).is_empty(), "the service removed");
        // A relist that does not see the TenantGateway again forgets its declaration.
        declared(&idx, "http01", &["api"]);
        idx.listeners_relist_started();
        idx.listeners_relist_done();
        assert!(idx.passthrough(GW.0, GW.1).is_none());
    }

    /// Through `Admission::handle`: the warning is in the response, counted under its reason.
    #[tokio::test]
    async fn the_decision_path_warns_and_counts_it() {
        use crate::admission::{Admission, WebhookResource};
        use crate::cluster::{NamespaceSource, StaticNamespaces};
        use crate::metrics::Metrics;
        use crate::policy::{HOST_LABEL, PolicyConfig};

        let mut ns = StaticNamespaces::default();
        ns.insert(
            "tenant-root",
            BTreeMap::from([(HOST_LABEL.to_string(), "example.org".to_string())]),
        );
        let idx = Arc::new(RouteIndex::default());
        declared(&idx, "http01", &["api"]);
        idx.apply(http("tenant-root", "other", &["www.example.org"]));
        let metrics = Metrics::new();
        let a = Admission::new(
            Arc::new(PolicyConfig::default()),
            NamespaceSource::Static(Arc::new(ns)),
            metrics.clone(),
        )
        .with_routes(idx);
        let body = review("tenant-root", &["api.example.org"], json!({"name": GW.1}));
        let r = a.handle(Some(WebhookResource::HttpRoutes), &body).await;
        let v: Value = serde_json::from_slice(&r.body).expect("json");
        assert_eq!(v["response"]["allowed"], json!(true), "{v}");
        let w = v["response"]["warnings"].as_array().expect("warnings");
        assert_eq!(w.len(), 1, "{v}");
        assert!(
            w[0].as_str()
                .unwrap_or_default()
                .starts_with("PassthroughHostname: api.example.org"),
            "{v}"
        );
        assert!(
            metrics.render().contains(
                "tenant_gateway_admission_warnings_total{reason=\"passthrough_hostname\",resource=\"httproutes\"} 1"
            ),
            "{}",
            metrics.render()
        );
    }
}
