use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::platform::HOST_LABEL;

/// A store and the apex index it reads, changed together as the namespace watch changes them.
struct World {
    store: Store,
    apexes: ApexMap,
}

fn cfg() -> PolicyConfig {
    PolicyConfig {
        root_host: Some("example.org".into()),
        ..PolicyConfig::default()
    }
}

impl World {
    fn new() -> World {
        World::with(cfg())
    }

    fn with(cfg: PolicyConfig) -> World {
        World {
            store: Store::new(Arc::new(cfg)),
            apexes: ApexMap::default(),
        }
    }

    fn ns(&mut self, name: &str, host: Option<&str>) -> Changes {
        let labels: BTreeMap<String, String> = host
            .map(|h| BTreeMap::from([(HOST_LABEL.to_string(), h.to_string())]))
            .unwrap_or_default();
        self.apexes.set(name, &labels);
        self.store.namespace(name, true, host, &self.apexes)
    }

    fn ns_gone(&mut self, name: &str) -> Changes {
        self.apexes.remove(name);
        self.store.namespace(name, false, None, &self.apexes)
    }

    fn route(&mut self, ns: &str, name: &str, hostnames: &[&str]) -> Changes {
        let body = json!({"metadata": {"name": name, "namespace": ns},
                          "spec": {"hostnames": hostnames, "rules": [{"backendRefs": []}]}});
        self.store.apply(
            GuardedKind::HttpRoute,
            ns,
            name,
            Some("0b1e6f36-6a43-4d1c-9d5c-0d7f3f7f9a01"),
            &body,
            &self.apexes,
        )
    }

    fn ingress(&mut self, ns: &str, name: &str, hosts: &[&str]) -> Changes {
        let rules: Vec<Value> = hosts.iter().map(|h| json!({"host": h})).collect();
        let body = json!({"spec": {"rules": rules}});
        self.store
            .apply(GuardedKind::Ingress, ns, name, None, &body, &self.apexes)
    }

    fn judged(&self) -> u64 {
        self.store.judgements()
    }

    fn outcome(&self, ns: &str, kind: &str, name: &str) -> Option<Outcome> {
        self.store
            .results(ns)
            .into_iter()
            .find(|r| r.object.kind == kind && r.object.name == name)
            .map(|r| r.outcome)
    }

    fn count(&self, layer: Layer, kind: &str) -> i64 {
        self.store
            .counts()
            .get(&(layer, kind))
            .copied()
            .unwrap_or(-1)
    }
}

fn names(ch: &Changes) -> Vec<&str> {
    ch.namespaces.iter().map(|n| &**n).collect()
}

#[test]
fn a_route_is_judged_once_and_its_result_kept() {
    let mut w = World::new();
    w.ns("tenant-alice", Some("alice.example.org"));
    let ch = w.route("tenant-alice", "web", &["shop.alice.example.org"]);
    assert_eq!(names(&ch), ["tenant-alice"], "a new object is a new result");
    assert!(ch.started.is_empty());
    let results = w.store.results("tenant-alice");
    assert_eq!(
        results.len(),
        2,
        "the namespace's apex result and the route's"
    );
    let r = &results[1];
    assert_eq!(
        (
            r.object.kind.as_str(),
            r.object.name.as_str(),
            r.outcome,
            r.rule
        ),
        (
            "HTTPRoute",
            "web",
            Outcome::Pass,
            "route-hostnames-within-apex"
        )
    );
    assert_eq!(r.object.api_version, "gateway.networking.k8s.io/v1");
    assert_eq!(
        r.object.uid.as_deref(),
        Some("0b1e6f36-6a43-4d1c-9d5c-0d7f3f7f9a01"),
        "the uid comes back as written"
    );
    assert_eq!(w.judged(), 1);

    // The same projection again (a status write, new rules): nothing judged, nothing changed.
    let ch = w.store.apply(
        GuardedKind::HttpRoute,
        "tenant-alice",
        "web",
        Some("0b1e6f36-6a43-4d1c-9d5c-0d7f3f7f9a01"),
        &json!({"spec": {"hostnames": ["shop.alice.example.org"], "rules": []},
                "status": {"parents": [{}]}}),
        &w.apexes,
    );
    assert!(ch.is_empty());
    assert_eq!(w.judged(), 1);

    // A hostname outside the apex: judged, violating, an event's worth.
    let ch = w.route("tenant-alice", "web", &["shop.bob.example.org"]);
    assert_eq!(w.judged(), 2);
    assert_eq!(names(&ch), ["tenant-alice"]);
    assert_eq!(ch.started.len(), 1);
    assert!(
        ch.started[0]
            .message
            .contains("\"shop.bob.example.org\" is not allowed"),
        "{:?}",
        ch.started
    );
    assert_eq!(ch.started[0].object.name, "web");
    assert_eq!(w.count(Layer::Route, "HTTPRoute"), 1);
    // Still violating, another way: a changed result, no second start.
    let ch = w.route(
        "tenant-alice",
        "web",
        &["shop.bob.example.org", "x.bob.example.org"],
    );
    assert_eq!(names(&ch), ["tenant-alice"]);
    assert!(ch.started.is_empty());
    assert_eq!(w.count(Layer::Route, "HTTPRoute"), 1);
    let ch = w
        .store
        .delete(GuardedKind::HttpRoute, "tenant-alice", "web");
    assert_eq!(names(&ch), ["tenant-alice"]);
    assert_eq!(w.count(Layer::Route, "HTTPRoute"), 0);
    assert_eq!(w.store.results("tenant-alice").len(), 1);
}

#[test]
fn objects_outside_tenant_scope_are_not_kept() {
    let mut w = World::new();
    w.ns("cozy-dashboard", None);
    let ch = w.route("cozy-dashboard", "grafana", &["grafana.bob.example.org"]);
    assert!(ch.is_empty());
    assert!(w.store.is_empty());
    assert_eq!(w.judged(), 0);
    assert!(w.store.namespaces_with_results().is_empty());
}

#[test]
fn an_apex_relabel_rejudges_only_that_namespaces_objects() {
    let mut w = World::new();
    for t in ["a", "b", "c"] {
        w.ns(&format!("tenant-{t}"), Some(&format!("{t}.example.org")));
        for i in 0..4 {
            w.route(
                &format!("tenant-{t}"),
                &format!("r{i}"),
                &[&format!("r{i}.{t}.example.org")],
            );
        }
    }
    assert_eq!(w.judged(), 12);
    assert_eq!(w.count(Layer::Route, "HTTPRoute"), 0);

    // tenant-b's apex moves: its four routes now publish outside it.
    let ch = w.ns("tenant-b", Some("b2.example.org"));
    assert_eq!(w.judged(), 16, "exactly tenant-b's routes");
    assert_eq!(names(&ch), ["tenant-b"]);
    assert_eq!(ch.started.len(), 4);
    assert_eq!(w.count(Layer::Route, "HTTPRoute"), 4);
    assert_eq!(
        w.outcome("tenant-b", "HTTPRoute", "r0"),
        Some(Outcome::Fail)
    );
    assert_eq!(
        w.outcome("tenant-a", "HTTPRoute", "r0"),
        Some(Outcome::Pass)
    );

    // The same value in other case: the same apex for every layer, nothing to re-judge
    // beyond that namespace, nothing changes.
    let ch = w.ns("tenant-b", Some("B2.example.org"));
    assert!(ch.is_empty(), "{ch:?}");
    assert_eq!(w.judged(), 16);

    // The fix: back to its apex.
    let ch = w.ns("tenant-b", Some("b.example.org"));
    assert_eq!(w.judged(), 20);
    assert_eq!(names(&ch), ["tenant-b"]);
    assert!(ch.started.is_empty());
    assert_eq!(w.count(Layer::Route, "HTTPRoute"), 0);

    // A label of another kind than the apex changes nothing and judges nothing (the store
    // is told the same host).
    let ch = w.ns("tenant-b", Some("b.example.org"));
    assert!(ch.is_empty());
    assert_eq!(w.judged(), 20);
}

#[test]
fn a_namespace_that_appears_late_or_goes_rejudges_its_objects() {
    let mut w = World::new();
    let ch = w.route("tenant-new", "web", &["a.new.example.org"]);
    assert_eq!(
        ch.started.len(),
        1,
        "no namespace: fail closed, as admission"
    );
    assert!(ch.started[0].message.contains("was not found"));
    let ch = w.ns("tenant-new", Some("new.example.org"));
    assert_eq!(
        w.outcome("tenant-new", "HTTPRoute", "web"),
        Some(Outcome::Pass)
    );
    assert_eq!(names(&ch), ["tenant-new"]);
    let ch = w.ns_gone("tenant-new");
    assert_eq!(names(&ch), ["tenant-new"]);
    assert_eq!(
        w.outcome("tenant-new", "HTTPRoute", "web"),
        Some(Outcome::Fail)
    );
    // The namespace's own result went with it; its route's stays until the route goes.
    assert_eq!(w.store.results("tenant-new").len(), 1);
    w.store.delete(GuardedKind::HttpRoute, "tenant-new", "web");
    assert!(w.store.results("tenant-new").is_empty());
    assert!(w.store.namespaces_with_results().is_empty());
}

#[test]
fn the_apex_table_follows_shared_and_missing_apexes() {
    let mut w = World::new();
    w.ns("tenant-a", Some("shared.example.org"));
    let ch = w.ns("tenant-b", Some("shared.example.org"));
    assert_eq!(
        names(&ch),
        ["tenant-a", "tenant-b"],
        "both members' results change"
    );
    assert_eq!(ch.started.len(), 2);
    assert!(ch.started.iter().all(|s| s.object.kind == "Namespace"));
    assert_eq!(w.count(Layer::Namespace, "Namespace"), 2);
    // tenant-b takes its own apex: both clear.
    let ch = w.ns("tenant-b", Some("b.example.org"));
    assert_eq!(names(&ch), ["tenant-a", "tenant-b"]);
    assert_eq!(w.count(Layer::Namespace, "Namespace"), 0);
    // A tenant without an apex, an apex outside the root.
    w.ns("tenant-c", None);
    w.ns("tenant-d", Some("d.other.com"));
    assert_eq!(w.count(Layer::Namespace, "Namespace"), 2);
    let v: Vec<String> = w
        .store
        .violations()
        .iter()
        .map(|r| r.object.name.clone())
        .collect();
    assert_eq!(v, ["tenant-c", "tenant-d"]);
    // Platform namespaces without an apex are of no rule's concern.
    let ch = w.ns("kube-system", None);
    assert!(ch.is_empty());
    assert!(w.store.results("kube-system").is_empty());
    // A deleted namespace takes its finding with it.
    let ch = w.ns_gone("tenant-c");
    assert_eq!(names(&ch), ["tenant-c"]);
    assert_eq!(w.count(Layer::Namespace, "Namespace"), 1);
}

#[test]
fn an_apex_change_rejudges_the_ingresses_under_it_elsewhere() {
    let mut w = World::new();
    w.ns("tenant-alice", Some("alice.example.org"));
    w.ns("tenant-shop", Some("shop.example.org"));
    w.ns("tenant-other", Some("other.example.org"));
    // A custom domain nobody carries: admitted (with a warning).
    w.ingress("tenant-alice", "custom", &["www.customer.com"]);
    w.ingress("tenant-alice", "unrelated", &["www.unrelated.io"]);
    w.ingress("tenant-other", "own", &["a.other.example.org"]);
    w.route("tenant-alice", "web", &["a.alice.example.org"]);
    let before = w.judged();
    assert_eq!(
        w.outcome("tenant-alice", "Ingress", "custom"),
        Some(Outcome::Pass)
    );

    // tenant-shop is handed customer.com: alice's custom domain is now inside another
    // namespace's apex. Re-judged: tenant-shop's own objects (none) and the Ingress whose host
    // is under the old or new apex, nothing else.
    let ch = w.ns("tenant-shop", Some("customer.com"));
    assert_eq!(w.judged(), before + 1);
    assert_eq!(
        w.outcome("tenant-alice", "Ingress", "custom"),
        Some(Outcome::Fail)
    );
    assert_eq!(names(&ch), ["tenant-alice", "tenant-shop"]);
    assert_eq!(
        ch.started.len(),
        2,
        "the Ingress, and tenant-shop's apex outside the root"
    );
    // And back.
    w.ns("tenant-shop", Some("shop.example.org"));
    assert_eq!(w.judged(), before + 2);
    assert_eq!(
        w.outcome("tenant-alice", "Ingress", "custom"),
        Some(Outcome::Pass)
    );
}

#[test]
fn a_relist_removes_what_it_did_not_list_again() {
    let mut w = World::new();
    w.ns("tenant-a", Some("a.example.org"));
    w.route("tenant-a", "keep", &["k.a.example.org"]);
    w.route("tenant-a", "gone", &["x.b.example.org"]);
    w.ingress("tenant-a", "other-kind", &["i.a.example.org"]);
    assert_eq!(w.count(Layer::Route, "HTTPRoute"), 1);
    w.store.relist_started(GuardedKind::HttpRoute);
    let before = w.judged();
    w.route("tenant-a", "keep", &["k.a.example.org"]);
    assert_eq!(w.judged(), before, "listed unchanged: not judged again");
    let ch = w.store.relist_done(GuardedKind::HttpRoute);
    assert_eq!(names(&ch), ["tenant-a"]);
    assert_eq!(w.count(Layer::Route, "HTTPRoute"), 0);
    let left: Vec<String> = w
        .store
        .results("tenant-a")
        .into_iter()
        .map(|r| r.object.name)
        .collect();
    assert_eq!(left, ["tenant-a", "keep", "other-kind"]);
    // A stray end of relist changes nothing.
    assert!(w.store.relist_done(GuardedKind::HttpRoute).is_empty());
}

#[test]
fn an_unreadable_object_is_an_error_beside_the_others() {
    let mut w = World::new();
    w.ns("tenant-a", Some("a.example.org"));
    w.route("tenant-a", "fine", &["f.a.example.org"]);
    let ch = w.store.apply_unreadable(
        GuardedKind::Gateway,
        "tenant-a",
        "broken",
        "invalid type: integer, expected a string",
    );
    assert_eq!(ch.started.len(), 1);
    let results = w.store.results("tenant-a");
    let broken = results
        .iter()
        .find(|r| r.object.name == "broken")
        .expect("reported");
    assert_eq!(broken.outcome, Outcome::Error);
    assert!(broken.messages[0].starts_with("Gateway tenant-a/broken: "));
    assert_eq!(
        w.outcome("tenant-a", "HTTPRoute", "fine"),
        Some(Outcome::Pass)
    );
    assert_eq!(w.count(Layer::Gateway, "Gateway"), 1);
    // A relabel cannot re-judge what could not be read: it stays an error.
    w.ns("tenant-a", Some("a2.example.org"));
    assert_eq!(
        w.outcome("tenant-a", "Gateway", "broken"),
        Some(Outcome::Error)
    );
}

#[test]
fn packages_are_the_cluster_scoped_results() {
    let mut w = World::new();
    let pkg = json!({"spec": {"components": {"platform": {"values": {"gateway": {
        "attachedNamespaces": ["cozy-a", "tenant-root"]}}}}}});
    let ch = w.store.apply(
        GuardedKind::Package,
        "",
        "cozystack.cozystack-platform",
        None,
        &pkg,
        &w.apexes,
    );
    assert_eq!(names(&ch), [""]);
    let r = &w.store.results("")[0];
    assert_eq!(
        (r.object.kind.as_str(), r.outcome),
        ("Package", Outcome::Fail)
    );
    assert!(r.messages[0].contains("must not contain tenant-"));
    assert_eq!(w.store.namespaces_with_results(), [""]);
    // No namespace change touches it.
    let before = w.judged();
    w.ns("tenant-root", Some("example.org"));
    assert_eq!(w.judged(), before);
}

#[test]
fn kinds_of_a_layer_that_is_off_or_cannot_run_are_not_audited() {
    let mut c = cfg();
    c.enforcement.set(Layer::Route, Mode::Off);
    c.root_host = None;
    let mut w = World::with(c);
    w.ns("tenant-a", Some("a.example.org"));
    assert!(w.route("tenant-a", "r", &["x.b.example.org"]).is_empty());
    assert!(w.ingress("tenant-a", "i", &[]).is_empty());
    assert!(
        w.store
            .not_audited(GuardedKind::GrpcRoute)
            .is_some_and(|r| r.contains("route=off"))
    );
    assert!(
        w.store
            .not_audited(GuardedKind::Ingress)
            .is_some_and(|r| r.contains("--root-host"))
    );
    assert!(w.store.not_audited(GuardedKind::Gateway).is_none());
    assert!(!w.store.counts().contains_key(&(Layer::Route, "HTTPRoute")));
    assert!(w.store.counts().contains_key(&(Layer::Gateway, "Gateway")));
    // Warn and audit modes are what the audit is for: judged.
    let mut c = cfg();
    c.enforcement.set(Layer::Route, Mode::Warn);
    let mut w = World::with(c);
    w.ns("tenant-a", Some("a.example.org"));
    assert_eq!(
        w.route("tenant-a", "r", &["x.b.example.org"]).started.len(),
        1
    );
}

#[test]
fn a_resync_forgets_namespaces_deleted_meanwhile() {
    let mut w = World::new();
    w.ns("tenant-a", Some("a.example.org"));
    w.ns("tenant-b", None);
    w.route("tenant-b", "r", &["r.b.example.org"]);
    assert_eq!(w.count(Layer::Namespace, "Namespace"), 1);
    w.apexes.remove("tenant-a");
    let ch = w
        .store
        .resync_namespaces([("tenant-b", Some("b.example.org"))], &w.apexes);
    assert_eq!(names(&ch), ["tenant-a", "tenant-b"]);
    assert!(w.store.results("tenant-a").is_empty());
    assert_eq!(w.count(Layer::Namespace, "Namespace"), 0);
    assert_eq!(w.outcome("tenant-b", "HTTPRoute", "r"), Some(Outcome::Pass));
}

#[test]
fn uids_round_trip() {
    for u in [
        "0b1e6f36-6a43-4d1c-9d5c-0d7f3f7f9a01",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        "0B1E6F36-6A43-4D1C-9D5C-0D7F3F7F9A01",
        "not-a-uuid",
        "0b1e6f366a434d1c9d5c0d7f3f7f9a01aaaa",
    ] {
        assert_eq!(Uid::new(Some(u)).get().as_deref(), Some(u), "{u}");
    }
    assert!(matches!(
        Uid::new(Some("0b1e6f36-6a43-4d1c-9d5c-0d7f3f7f9a01")),
        Uid::Uuid(_)
    ));
    assert_eq!(Uid::new(Some("")).get(), None);
    assert_eq!(Uid::new(None).get(), None);
}

/// One change re-judges only what it affects, over a world of many namespaces: counted.
#[test]
fn judgements_per_change_at_scale() {
    let mut w = World::new();
    let tenants = 200;
    for t in 0..tenants {
        w.ns(&format!("tenant-t{t}"), Some(&format!("t{t}.example.org")));
        for r in 0..2 {
            w.route(
                &format!("tenant-t{t}"),
                &format!("r{r}"),
                &[&format!("r{r}.t{t}.example.org")],
            );
        }
    }
    assert_eq!(w.judged(), 2 * tenants);
    let base = w.judged();
    w.route("tenant-t7", "r0", &["changed.t7.example.org"]);
    assert_eq!(w.judged(), base + 1, "one route changed: one judgement");
    w.ns("tenant-t9", Some("t9.other.example.org"));
    assert_eq!(
        w.judged(),
        base + 3,
        "one relabel: that namespace's two routes"
    );
    w.ns("tenant-t11", Some("t11.example.org"));
    assert_eq!(w.judged(), base + 3, "an unchanged apex: nothing");
    w.store.delete(GuardedKind::HttpRoute, "tenant-t12", "r1");
    assert_eq!(w.judged(), base + 3, "a delete judges nothing");
}

/// The incremental store always says what a store built from scratch says about the same
/// world, whatever the order of changes: random relabels, deletions and edits.
#[test]
fn incremental_results_equal_a_fresh_audit() {
    const APEXES: [Option<&str>; 7] = [
        Some("a.example.org"),
        Some("b.example.org"),
        Some("a.example.org"),
        Some("shop.com"),
        Some("A.example.org"),
        Some(""),
        None,
    ];
    const HOSTS: [&str; 7] = [
        "w.a.example.org",
        "x.b.example.org",
        "shop.com",
        "www.shop.com",
        "custom.io",
        "*.a.example.org",
        "example.org",
    ];
    let namespaces = ["tenant-n0", "tenant-n1", "tenant-n2", "tenant-n3"];
    for seed in 0..20u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut w = World::new();
        // The world as it is: namespace → host label (absent: deleted), object → hosts.
        let mut ns_state: BTreeMap<&str, Option<Option<&str>>> = BTreeMap::new();
        let mut objects: BTreeMap<(GuardedKind, &str, String), Vec<&str>> = BTreeMap::new();
        for step in 0..150 {
            match rng.u8(0..5) {
                0 => {
                    let n = namespaces[rng.usize(..namespaces.len())];
                    let host = APEXES[rng.usize(..APEXES.len())];
                    w.ns(n, host);
                    ns_state.insert(n, Some(host));
                }
                1 => {
                    let n = namespaces[rng.usize(..namespaces.len())];
                    w.ns_gone(n);
                    ns_state.insert(n, None);
                }
                2 | 3 => {
                    let kind = if rng.bool() {
                        GuardedKind::HttpRoute
                    } else {
                        GuardedKind::Ingress
                    };
                    let n = namespaces[rng.usize(..namespaces.len())];
                    let name = format!("o{}", rng.u8(0..3));
                    let hosts: Vec<&str> = (0..rng.usize(1..3))
                        .map(|_| HOSTS[rng.usize(..HOSTS.len())])
                        .collect();
                    match kind {
                        GuardedKind::Ingress => w.ingress(n, &name, &hosts),
                        _ => w.route(n, &name, &hosts),
                    };
                    objects.insert((kind, n, name), hosts);
                }
                _ => {
                    if let Some(key) = objects
                        .keys()
                        .nth(rng.usize(..objects.len().max(1)))
                        .cloned()
                    {
                        w.store.delete(key.0, key.1, &key.2);
                        objects.remove(&key);
                    }
                }
            }
            // From scratch: the namespaces first, then the objects.
            let mut fresh = World::new();
            for (n, host) in &ns_state {
                if let Some(host) = host {
                    fresh.ns(n, *host);
                }
            }
            for ((kind, n, name), hosts) in &objects {
                match kind {
                    GuardedKind::Ingress => fresh.ingress(n, name, hosts),
                    _ => fresh.route(n, name, hosts),
                };
            }
            let summary = |s: &Store| -> Vec<(String, String, Outcome, Vec<String>)> {
                namespaces
                    .iter()
                    .flat_map(|n| s.results(n))
                    .map(|r| (r.object.kind, r.object.name, r.outcome, r.messages))
                    .collect()
            };
            assert_eq!(
                summary(&w.store),
                summary(&fresh.store),
                "seed {seed}, step {step}"
            );
            assert_eq!(
                w.store.counts(),
                fresh.store.counts(),
                "seed {seed}, step {step}"
            );
        }
    }
}

/// The store keeps each projection relative to its namespace's label (`entry`): a relabel,
/// a namespace gone and back, or an object that came before its namespace, still judge and
/// report the hostnames as stored.
#[test]
fn a_relabel_judges_the_hostnames_as_stored() {
    let message = |w: &World, ns: &str| -> Vec<String> {
        w.store
            .results(ns)
            .into_iter()
            .filter(|r| r.object.kind == "HTTPRoute")
            .flat_map(|r| r.messages)
            .collect()
    };
    let mut w = World::new();
    // Before its namespace is known: not found, an error naming the route.
    w.route("tenant-a", "web", &["w.a.example.org", "a.example.org"]);
    w.ns("tenant-a", Some("a.example.org"));
    assert_eq!(
        w.outcome("tenant-a", "HTTPRoute", "web"),
        Some(Outcome::Pass)
    );
    w.ns("tenant-a", Some("b.example.org"));
    assert_eq!(
        w.outcome("tenant-a", "HTTPRoute", "web"),
        Some(Outcome::Fail)
    );
    let m = message(&w, "tenant-a");
    assert!(
        m.len() == 2 && m[0].contains("\"w.a.example.org\"") && m[1].contains("\"a.example.org\""),
        "{m:?}"
    );
    // Relabelled as written in another case, then removed, then back.
    w.ns("tenant-a", Some("A.example.org"));
    w.ns("tenant-a", None);
    w.ns_gone("tenant-a");
    w.ns("tenant-a", Some("a.example.org"));
    assert_eq!(
        w.outcome("tenant-a", "HTTPRoute", "web"),
        Some(Outcome::Pass)
    );
    // The same route again is no change: its packed form under the label is the same.
    let before = w.judged();
    assert!(
        w.route("tenant-a", "web", &["w.a.example.org", "a.example.org"])
            .is_empty()
    );
    assert_eq!(w.judged(), before);

    // An Ingress elsewhere with a custom domain follows tenant-a's relabels to and from an
    // apex above it, its own namespace relabelled in between.
    w.ns("tenant-b", Some("b.example.org"));
    w.ingress("tenant-b", "i", &["x.b.example.org", "shop.custom.test"]);
    assert_eq!(w.outcome("tenant-b", "Ingress", "i"), Some(Outcome::Pass));
    w.ns("tenant-b", Some("c.example.org"));
    w.ns("tenant-b", Some("b.example.org"));
    w.ns("tenant-a", Some("custom.test"));
    assert_eq!(
        w.outcome("tenant-b", "Ingress", "i"),
        Some(Outcome::Fail),
        "within another namespace's apex"
    );
    w.ns("tenant-a", Some("a.example.org"));
    assert_eq!(w.outcome("tenant-b", "Ingress", "i"), Some(Outcome::Pass));
}

/// Objects that reached the store before their kind's served version was known are named by
/// the kind's default; learning the version changes the namespaces holding them (so the
/// reports naming them are planned again), and the same version again changes nothing.
#[test]
fn a_served_version_renames_the_objects_already_held() {
    let mut w = World::new();
    w.ns("tenant-a", Some("a.example.org"));
    w.ns("tenant-b", Some("b.example.org"));
    w.route("tenant-a", "web", &["w.a.example.org"]);
    w.ingress("tenant-b", "site", &["s.b.example.org"]);
    let route_version = |w: &World| {
        w.store
            .results("tenant-a")
            .into_iter()
            .find(|r| r.object.kind == "HTTPRoute")
            .map(|r| r.object.api_version)
    };
    let default = format!(
        "gateway.networking.k8s.io/{}",
        GuardedKind::HttpRoute.default_version()
    );
    assert_eq!(route_version(&w), Some(default.clone()));

    let ch = w
        .store
        .set_version(GuardedKind::HttpRoute, "gateway.networking.k8s.io/v9");
    assert_eq!(
        ch.namespaces,
        BTreeSet::from([Arc::from("tenant-a")]),
        "only the namespace holding HTTPRoutes"
    );
    assert!(ch.started.is_empty());
    assert_eq!(
        route_version(&w).as_deref(),
        Some("gateway.networking.k8s.io/v9")
    );
    assert!(
        w.store
            .set_version(GuardedKind::HttpRoute, "gateway.networking.k8s.io/v9")
            .is_empty()
    );
    // The default named explicitly is no change either.
    let mut fresh = World::new();
    fresh.ns("tenant-a", Some("a.example.org"));
    fresh.route("tenant-a", "web", &["w.a.example.org"]);
    assert!(
        fresh
            .store
            .set_version(GuardedKind::HttpRoute, &default)
            .is_empty()
    );
}
