//! Whole-plan tests: the scenarios of issue 7's "must show" list on the pure core, and the
//! properties (order independence, valid unique names, zero writes once converged).

use std::collections::{BTreeMap, BTreeSet};

use super::api::CertMode;
use super::diff::{Object, ObjectKind, Write};
use super::inputs::{Inputs, Sibling};
use super::testing::{
    self, Rng, at, busy_world, converge, dns01_spec, existing_secret_spec, make_ready,
    remote_route, route, shuffled, tenant, world,
};
use super::*;
use crate::platform::{ATTACHED_BY_ANNOTATION, GATEWAY_LABEL, PassthroughGateway};

fn cfg() -> Options {
    Options::default()
}

/// Plan, apply, and plan again until nothing is written (at most a few rounds).
fn settle(w: Inputs) -> (Inputs, Plan) {
    settle_with(w, &cfg())
}

fn listener_names(w: &Inputs) -> Vec<String> {
    w.observed.gateways[0]
        .spec
        .listeners
        .iter()
        .map(|l| l.name.clone())
        .collect()
}

fn cert_names(w: &Inputs) -> Vec<String> {
    let mut v: Vec<String> = w
        .observed
        .certificates
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    v.sort();
    v
}

fn accepted(w: &Inputs, ns: &str, name: &str) -> (String, String, String) {
    let e = testing::entries(w, ns, name);
    assert_eq!(e.len(), 1, "{ns}/{name}: {e:?}");
    let c = e[0].conditions.to_vec().swap_remove(0);
    (c.status, c.reason, c.message)
}

fn condition<'a>(
    p: &'a Plan,
    t: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    p.status
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .unwrap_or_else(|| panic!("no {t} condition: {:?}", p.status))
}

#[test]
fn http01_listener_certificate_and_route_status() {
    let mut w = world();
    w.routes.push(route(
        "tenant-alice",
        "harbor",
        &["harbor.alice.example.org"],
    ));
    w.routes.push(remote_route(
        "tenant-alice-x",
        "deep",
        &["harbor.bob.alice.example.org"],
    ));
    let (w, _) = settle(w);
    let deep = format!("harbor-{}", names::h8("harbor.bob.alice.example.org"));
    assert_eq!(
        listener_names(&w),
        [
            "http".to_string(),
            "https-harbor".into(),
            format!("https-{deep}"),
            "tls-api".into(),
            "tls-vm-exportproxy".into()
        ]
    );
    assert_eq!(
        cert_names(&w),
        [format!("gw-{deep}-tls"), "gw-harbor-tls".to_string()]
    );
    let harbor = w
        .observed
        .certificates
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some("gw-harbor-tls"))
        .expect("harbor certificate");
    assert_eq!(harbor.spec.dns_names, ["harbor.alice.example.org"]);
    assert_eq!(accepted(&w, "tenant-alice", "harbor").0, "True");
    assert_eq!(accepted(&w, "tenant-alice-x", "deep").0, "True");

    // Changing the hostname swaps listener and Certificate.
    let mut w2 = w.clone();
    w2.routes[0].set_hostnames(&["registry.alice.example.org"]);
    w2.routes[0].set_generation(Some(2));
    let p = plan(&w2, &cfg());
    assert!(p.writes.contains(&Write::Delete {
        kind: ObjectKind::Certificate,
        name: "gw-harbor-tls".into(),
        uid: Some("uid-gw-harbor-tls".into())
    }));
    let (w2, _) = settle(w2);
    assert!(listener_names(&w2).contains(&"https-registry".to_string()));
    assert!(!listener_names(&w2).contains(&"https-harbor".to_string()));
    assert_eq!(
        cert_names(&w2),
        [format!("gw-{deep}-tls"), "gw-registry-tls".to_string()]
    );

    // Deleting the route removes both.
    let mut w3 = w.clone();
    w3.routes.retain(|r| r.name() != "harbor");
    let (w3, _) = settle(w3);
    assert!(!listener_names(&w3).contains(&"https-harbor".to_string()));
    assert_eq!(cert_names(&w3), [format!("gw-{deep}-tls")]);
}

#[test]
fn a_bad_hostname_refuses_only_its_route() {
    let mut w = world();
    w.routes.push(route(
        "tenant-alice",
        "wild",
        &["*.alice.example.org", "good.alice.example.org"],
    ));
    w.routes
        .push(route("tenant-alice", "outside", &["shop.bob.example.org"]));
    w.routes
        .push(route("tenant-alice", "fine", &["fine.alice.example.org"]));
    let (w, _) = settle(w);
    let (status, reason, msg) = accepted(&w, "tenant-alice", "wild");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "HostnameNotListenable")
    );
    assert!(
        msg.contains("\"*.alice.example.org\" is a wildcard"),
        "{msg}"
    );
    let (status, _, msg) = accepted(&w, "tenant-alice", "outside");
    assert_eq!(status, "False");
    assert!(
        msg.contains("not within the apex alice.example.org"),
        "{msg}"
    );
    assert_eq!(accepted(&w, "tenant-alice", "fine").0, "True");
    let names = listener_names(&w);
    assert!(names.contains(&"https-good".to_string()), "{names:?}");
    assert!(names.contains(&"https-fine".to_string()), "{names:?}");
}

#[test]
fn cozy_wins_a_conflict_and_the_loser_recovers() {
    let mut w = world();
    w.tgw.spec.attached_namespaces = vec!["cozy-harbor".into()];
    w.namespaces
        .push(testing::namespace("cozy-harbor", &[], &[]));
    w.routes.push(remote_route(
        "cozy-harbor",
        "harbor",
        &["harbor.alice.example.org"],
    ));
    w.routes.push(remote_route(
        "tenant-alice-x",
        "harbor",
        &["harbor.alice.example.org"],
    ));
    let (w, p) = settle(w);
    assert_eq!(accepted(&w, "cozy-harbor", "harbor").0, "True");
    let (status, reason, msg) = accepted(&w, "tenant-alice-x", "harbor");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "HostnameConflict")
    );
    assert!(
        msg.contains("cozy-harbor") && msg.contains("tenant-alice/gw"),
        "{msg}"
    );
    assert_eq!(
        p.summary.hostname_owners["harbor.alice.example.org"],
        "cozy-harbor"
    );
    // The namespace label was written and marked.
    let ns = w
        .namespaces
        .iter()
        .find(|n| n.name() == "cozy-harbor")
        .expect("ns");
    assert_eq!(ns.label(GATEWAY_LABEL), Some("tenant-alice"));
    assert_eq!(ns.attached_by(), Some("tenant-alice"));

    let mut w = w;
    w.routes.retain(|r| &*r.namespace != "cozy-harbor");
    let (w, _) = settle(w);
    assert_eq!(accepted(&w, "tenant-alice-x", "harbor").0, "True");
    // The winner's entry went with it; the route index no longer lists it.
    assert!(testing::entries(&w, "cozy-harbor", "harbor").is_empty());
}

/// One namespace alone: its share is the whole budget, and within its share hostnames that
/// already have a listener go first, so an older route 71 of the same namespace evicts none
/// of its own listeners (SPEC §3.3).
#[test]
fn seventy_routes_make_sixty_four_listeners_and_route_71_evicts_nothing() {
    let mut w = world();
    w.tgw.spec.tls_passthrough_services.clear();
    for i in 0..70 {
        let mut r = route(
            "tenant-alice",
            &format!("r{i:02}"),
            &[&format!("app{i:02}.alice.example.org")],
        );
        r.set_creation(Some(at(1000 + i)));
        w.routes.push(r);
    }
    let (w, p) = settle(w);
    assert_eq!(listener_names(&w).len(), 64);
    let cap = condition(&p, status::LISTENER_CAPACITY);
    assert_eq!(
        (cap.status.as_str(), cap.reason.as_str()),
        ("False", "ListenerLimitReached")
    );
    assert!(
        cap.message.contains("7 hostname(s)") && cap.message.contains("dns01"),
        "{}",
        cap.message
    );
    for i in 63..70 {
        let (status, reason, _) = accepted(&w, "tenant-alice", &format!("r{i:02}"));
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "ListenerLimitReached"),
            "r{i}"
        );
    }
    let before = listener_names(&w);

    // Route 71, older than everyone, still evicts nothing: existing listeners stay.
    let mut w = w;
    let mut r = route("tenant-alice", "r70", &["app70.alice.example.org"]);
    r.set_creation(Some(at(1)));
    w.routes.push(r);
    let (w, _) = settle(w);
    assert_eq!(listener_names(&w), before);
    assert_eq!(
        accepted(&w, "tenant-alice", "r70").1,
        "ListenerLimitReached"
    );
}

#[test]
fn dns01_children_over_the_cap_get_advice_for_dns01() {
    // 70 inheriting children with apexes of their own, beside the world's x.alice.example.org:
    // 64 - 3 fit (after http, https, https-apex), 10 are cut; the advice is not "switch to
    // dns01", which this one already is.
    let mut w = world();
    w.tgw.spec = dns01_spec();
    w.tgw.spec.tls_passthrough_services.clear();
    for i in 0..70 {
        w.namespaces.push(tenant(
            &format!("tenant-alice-k{i:02}"),
            &format!("k{i:02}.alice.example.org"),
            "tenant-alice",
        ));
    }
    let (w, p) = settle(w);
    assert_eq!(w.observed.gateways[0].spec.listeners.len(), 64);
    let cap = condition(&p, status::LISTENER_CAPACITY);
    assert_eq!(
        (cap.status.as_str(), cap.reason.as_str()),
        ("False", "ListenerLimitReached")
    );
    assert!(
        cap.message.starts_with("10 child apex listener(s)")
            && cap.message.contains("\"*.k69.alice.example.org\"")
            && cap.message.contains("tenant.spec.gateway=true")
            && !cap.message.contains("switch certMode"),
        "{}",
        cap.message
    );
}

#[test]
fn dns01_children_then_existing_secret_then_http01() {
    let mut w = world();
    w.tgw.spec = dns01_spec();
    w.tgw.spec.tls_passthrough_services.clear();
    w.namespaces.push(tenant(
        "tenant-alice-bob",
        "bob.alice.example.org",
        "tenant-alice",
    ));
    w.routes
        .push(route("tenant-alice", "site", &["www.alice.example.org"]));
    let (w, _) = settle(w);
    let names = listener_names(&w);
    assert_eq!(names.len(), 5, "{names:?}");
    assert_eq!(&names[..3], ["http", "https", "https-apex"]);
    assert!(names[3..].iter().all(|n| n.starts_with("https-child-")));
    assert_eq!(cert_names(&w), ["gw-gateway-tls"]);
    assert_eq!(w.observed.certificates[0].spec.dns_names.len(), 6);
    assert_eq!(w.observed.issuers.len(), 1);

    let mut w = w;
    w.tgw.spec = existing_secret_spec();
    w.tgw.spec.tls_passthrough_services.clear();
    let p = plan(&w, &cfg());
    let deletes: Vec<(ObjectKind, &str)> = p
        .writes
        .iter()
        .filter_map(|x| match x {
            Write::Delete { kind, name, .. } => Some((*kind, name.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        deletes,
        [
            (ObjectKind::Issuer, "gw-gateway"),
            (ObjectKind::Certificate, "gw-gateway-tls")
        ]
    );
    let (w, _) = settle(w);
    assert!(w.observed.issuers.is_empty() && w.observed.certificates.is_empty());
    for l in &w.observed.gateways[0].spec.listeners {
        if l.protocol == "HTTPS" {
            let refs = l
                .tls
                .as_ref()
                .and_then(|t| t.certificate_refs.as_ref())
                .expect("refs");
            assert_eq!(refs[0].name, "wildcard-tls");
        }
    }

    let mut w = w;
    w.tgw.spec = testing::http01_spec();
    w.tgw.spec.tls_passthrough_services.clear();
    let (w, _) = settle(w);
    assert_eq!(cert_names(&w), ["gw-www-tls"]);
    assert_eq!(listener_names(&w), ["http", "https-www"]);
}

#[test]
fn layer1_namespaces_follow_inheritance() {
    let mut w = world();
    w.tgw.spec.attached_namespaces = vec!["cozy-harbor".into()];
    w.routes
        .push(route("tenant-alice", "a", &["a.alice.example.org"]));
    let (w, _) = settle(w);
    let values = |w: &Inputs, listener: &str| -> Vec<String> {
        let l = w.observed.gateways[0]
            .spec
            .listeners
            .iter()
            .find(|l| l.name == listener)
            .expect("listener");
        let ns = l
            .allowed_routes
            .as_ref()
            .and_then(|a| a.namespaces.as_ref())
            .expect("namespaces");
        let sel = ns.selector.as_ref().expect("selector");
        sel.match_expressions.as_ref().expect("exprs")[0]
            .values
            .clone()
            .unwrap_or_default()
    };
    assert_eq!(values(&w, "http"), ["cozy-cert-manager", "tenant-alice"]);
    assert_eq!(
        values(&w, "https-a"),
        ["cozy-harbor", "tenant-alice", "tenant-alice-x"]
    );
    assert_eq!(
        values(&w, "tls-api"),
        ["cozy-harbor", "tenant-alice", "tenant-alice-x"]
    );

    // A new inheriting namespace: one Gateway apply, nothing else but status.
    let mut w = w;
    w.namespaces.push(tenant(
        "tenant-alice-new",
        "new.alice.example.org",
        "tenant-alice",
    ));
    let p = plan(&w, &cfg());
    let applies: Vec<ObjectKind> = p
        .writes
        .iter()
        .filter_map(|x| match x {
            Write::Apply(o) => Some(o.kind()),
            _ => None,
        })
        .collect();
    assert_eq!(applies, [ObjectKind::Gateway]);
    let (w, _) = settle(w);
    assert!(values(&w, "https-a").contains(&"tenant-alice-new".to_string()));
}

#[test]
fn ready_once_programmed_and_certificates_ready() {
    let mut w = world();
    w.tgw.generation = Some(4);
    w.routes
        .push(route("tenant-alice", "a", &["a.alice.example.org"]));
    let (w, p) = settle(w);
    let ready = condition(&p, status::READY);
    assert_eq!(ready.status, "False");
    assert_eq!(p.status.observed_generation, Some(4));
    assert!(
        p.status.listeners.iter().all(|l| l.reason == "Pending"),
        "{:?}",
        p.status.listeners
    );

    let mut w = w;
    make_ready(&mut w);
    let (_, p) = settle(w.clone());
    let ready = condition(&p, status::READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Ready")
    );
    assert_eq!(condition(&p, status::PROGRAMMED).status, "True");
    assert!(p.status.listeners.iter().all(|l| l.ready));
    assert_eq!(ready.observed_generation, Some(4));

    // A certificate not ready yet: its listener says CertificatePending.
    w.observed.certificates[0].status = None;
    let p = plan(&w, &cfg());
    let l = p
        .status
        .listeners
        .iter()
        .find(|l| l.name == "https-a")
        .expect("listener");
    assert_eq!(l.reason, "CertificatePending");
    assert_eq!(condition(&p, status::READY).reason, "CertificatePending");
}

#[test]
fn foreign_gateway_is_left_alone_and_reported() {
    let mut w = world();
    let mut foreign = plan(&w, &cfg()).desired.expect("renders").gateway;
    foreign.metadata.owner_references = None;
    foreign.metadata.labels = None;
    foreign.spec.listeners.truncate(1);
    w.observed.gateways.push(foreign.clone());
    let p = plan(&w, &cfg());
    assert!(
        !p.writes.iter().any(|x| matches!(
            x,
            Write::Apply(Object::Gateway(_))
                | Write::Delete {
                    kind: ObjectKind::Gateway,
                    ..
                }
        )),
        "{:?}",
        p.writes
    );
    assert_eq!(condition(&p, status::READY).reason, "NotOwned");
    assert_eq!(p.notices[0].reason, "TakeoverRefused");
    let (w, _) = settle(w);
    assert_eq!(w.observed.gateways[0], foreign);
}

#[test]
fn cleanup_removes_what_it_wrote() {
    let mut w = world();
    w.tgw.spec.attached_namespaces = vec!["cozy-harbor".into()];
    w.namespaces
        .push(testing::namespace("cozy-harbor", &[], &[]));
    w.routes
        .push(route("tenant-alice", "a", &["a.alice.example.org"]));
    let mut other = route("tenant-alice", "b", &["b.alice.example.org"]);
    testing::push(
        &mut other.parent_refs,
        super::inputs::ParentRef {
            name: "other-gw".into(),
            ..Default::default()
        }
        .into(),
    );
    w.routes.push(other);
    let (mut w, _) = settle(w);
    // Another TenantGateway's entry on the same route must survive.
    testing::push(
        &mut w.routes[1].our_status,
        super::inputs::RouteParentStatus {
            parent_ref: super::inputs::ParentRef {
                name: "other-gw".into(),
                ..Default::default()
            }
            .into(),
            conditions: Vec::new().into(),
        },
    );
    let writes = cleanup(&w, &Scope::default());
    let p = Plan {
        desired: None,
        writes,
        status: Default::default(),
        refused: Vec::new(),
        summary: Default::default(),
        notices: Vec::new(),
    };
    let after = converge(&w, &p);
    let ns = after
        .namespaces
        .iter()
        .find(|n| n.name() == "cozy-harbor")
        .expect("ns");
    assert!(
        ns.label(GATEWAY_LABEL).is_none() && ns.attached_by().is_none(),
        "{ns:?}"
    );
    // The platform-written label of the own namespace stays.
    let own = after
        .namespaces
        .iter()
        .find(|n| n.name() == "tenant-alice")
        .expect("ns");
    assert_eq!(own.label(GATEWAY_LABEL), Some("tenant-alice"));
    assert!(testing::entries(&after, "tenant-alice", "a").is_empty());
    let left = testing::entries(&after, "tenant-alice", "b");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].parent_ref.name, "other-gw");
}

#[test]
fn a_duplicates_cleanup_leaves_the_publishers_namespace_marks() {
    // The publisher (no older sibling) attached cozy-harbor; the marks name the namespace,
    // not the TenantGateway, so a younger Duplicate's deletion must not take them away.
    let mut w = world();
    w.tgw.spec.attached_namespaces = vec!["cozy-harbor".into()];
    w.namespaces
        .push(testing::namespace("cozy-harbor", &[], &[]));
    let (mut w, _) = settle(w);
    let detaches = |w: &super::inputs::Inputs| {
        cleanup(w, &Scope::default())
            .iter()
            .filter(|x| matches!(x, Write::Namespace(_)))
            .count()
    };
    assert_eq!(detaches(&w), 1, "the publisher's own cleanup detaches");
    w.siblings.push(Sibling {
        name: "older".into(),
        creation: Some(at(1)),
    });
    assert_eq!(detaches(&w), 0, "a Duplicate detaches nothing");
    // A younger sibling does not make this one a Duplicate: it still cleans up.
    w.siblings = vec![Sibling {
        name: "younger".into(),
        creation: Some(at(900)),
    }];
    assert_eq!(detaches(&w), 1);
}

#[test]
fn duplicate_and_invalid_spec_write_status_only() {
    let mut w = world();
    w.siblings.push(Sibling {
        name: "older".into(),
        creation: Some(at(1)),
    });
    let p = plan(&w, &cfg());
    assert!(p.desired.is_none());
    assert!(
        matches!(p.writes.as_slice(), [Write::Status(_)]),
        "{:?}",
        p.writes
    );
    let ready = condition(&p, status::READY);
    assert_eq!(ready.reason, "Duplicate");
    assert!(
        ready.message.contains("tenant-alice/older"),
        "{}",
        ready.message
    );
    // A younger sibling does not block.
    w.siblings = vec![Sibling {
        name: "younger".into(),
        creation: Some(at(900)),
    }];
    assert!(plan(&w, &cfg()).desired.is_some());

    let mut w = world();
    w.tgw.spec.cert_mode = CertMode::Dns01;
    w.tgw.spec.apex = "*.alice.example.org".into();
    w.observed.certificates = plan(&world(), &cfg())
        .desired
        .expect("renders")
        .certificates;
    let p = plan(&w, &cfg());
    assert!(
        matches!(p.writes.as_slice(), [Write::Status(_)]),
        "never prune on a bad spec"
    );
    let msg = &condition(&p, status::READY).message;
    assert!(
        msg.contains("dns01 block") && msg.contains("wildcard"),
        "{msg}"
    );
    let (w, _) = settle(w);
    assert!(plan(&w, &cfg()).writes.is_empty());
}

#[test]
fn apex_must_equal_the_namespace_label() {
    // (apex, renders?) — in tenant scope only the namespace's own apex, in any case.
    for (apex, ok) in [
        ("example.org", false),
        ("a", false),
        ("shop.alice.example.org", false),
        ("lice.example.org", false),
        ("alice.example.org", true),
        ("Alice.Example.ORG", true),
    ] {
        let mut w = world();
        w.tgw.spec.apex = apex.into();
        let p = plan(&w, &cfg());
        assert_eq!(p.desired.is_some(), ok, "{apex}");
        if !ok {
            let ready = condition(&p, status::READY);
            assert_eq!(ready.reason, "InvalidSpec", "{apex}");
            assert!(ready.message.contains("must equal"), "{}", ready.message);
            assert!(
                p.writes.iter().all(|w| matches!(w, Write::Status(_))),
                "{apex}: an invalid TenantGateway writes only its status"
            );
        }
    }
    let mut w = world();
    // No label at all: fail closed, as layer 2 would.
    w.namespaces.retain(|n| n.name() != "tenant-alice");
    assert_eq!(
        condition(&plan(&w, &cfg()), status::READY).reason,
        "InvalidSpec"
    );
}

#[test]
fn summary_tells_admission_what_is_left() {
    let mut w = world();
    w.tgw.spec.tls_passthrough_services.clear();
    w.routes
        .push(route("tenant-alice", "a", &["a.alice.example.org"]));
    let p = plan(&w, &cfg());
    assert_eq!(p.summary.capacity_left, 62);
    assert_eq!(
        p.summary.listener_hostnames,
        BTreeSet::from(["a.alice.example.org".to_string()])
    );
}

/// Regression (issue 11 chaos test): a same-named Certificate someone else wrote, as the API
/// server serves it (no `issuerRef.group`, no managed-by label, no ownerReference), is refused
/// and reported; everything else of the TenantGateway is still written.
#[test]
fn foreign_certificate_as_served_is_refused_not_recreated() {
    let mut w = world();
    w.routes
        .push(route("tenant-alice", "r0", &["r0.alice.example.org"]));
    w.routes
        .push(route("tenant-alice", "r1", &["r1.alice.example.org"]));
    let foreign: certmanager::Certificate = serde_json::from_value(serde_json::json!({
        "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": "gw-r0-tls", "namespace": "tenant-alice", "uid": "uid-foreign",
                     "labels": {"team": "y"}},
        "spec": {"secretName": "someone-elses", "dnsNames": ["r0.alice.example.org"],
                 "issuerRef": {"name": "other", "kind": "Issuer"}}
    }))
    .expect("decodes");
    w.observed.certificates.push(foreign);
    let p = plan(&w, &cfg());
    let applied: Vec<String> = p
        .writes
        .iter()
        .filter_map(|x| match x {
            Write::Apply(o) => Some(format!("{} {}", o.kind().as_str(), o.name())),
            _ => None,
        })
        .collect();
    assert!(
        !applied.contains(&"Certificate gw-r0-tls".to_string()),
        "{applied:?}"
    );
    assert!(
        applied.contains(&"Certificate gw-r1-tls".to_string()),
        "{applied:?}"
    );
    assert!(applied.contains(&"Gateway gw".to_string()), "{applied:?}");
    assert_eq!(
        p.refused,
        vec![diff::Refused {
            kind: ObjectKind::Certificate,
            name: "gw-r0-tls".into()
        }]
    );
}

/// Regression (fuzz target reconcile_plan): a namespace this plan detaches (it left
/// attachedNamespaces) no longer counts as inheriting in the same plan, and one it attaches
/// already does: the Gateway is rendered once, as the labels will be, so the next reconcile
/// writes nothing (it used to apply the Gateway twice, admitting the detached namespace's
/// routes and its child apex for one more round).
#[test]
fn label_writes_of_the_plan_decide_inheritance_at_once() {
    let mut w = world();
    w.tgw.spec = dns01_spec();
    w.tgw.spec.attached_namespaces = vec!["cozy-new".into()];
    w.namespaces.push(testing::namespace(
        "cozy-old",
        &[
            (crate::platform::HOST_LABEL, "old.alice.example.org"),
            (GATEWAY_LABEL, "tenant-alice"),
        ],
        &[(ATTACHED_BY_ANNOTATION, "tenant-alice")],
    ));
    w.namespaces.push(testing::namespace(
        "cozy-new",
        &[(crate::platform::HOST_LABEL, "new.alice.example.org")],
        &[],
    ));
    let p = plan(&w, &cfg());
    let d = p.desired.clone().expect("rendered");
    let hosts: Vec<String> = d
        .gateway
        .spec
        .listeners
        .iter()
        .filter_map(|l| l.hostname.clone())
        .collect();
    assert!(
        hosts.contains(&"*.new.alice.example.org".to_string()),
        "{hosts:?}"
    );
    assert!(!hosts.iter().any(|h| h.contains("old.")), "{hosts:?}");
    let selector =
        serde_json::to_string(&d.gateway.spec.listeners[1].allowed_routes).expect("json");
    assert!(
        selector.contains("cozy-new") && !selector.contains("cozy-old"),
        "{selector}"
    );
    let mut next = converge(&w, &p);
    next.now = at(next.now.0.as_second() + 60);
    let again = plan(&next, &cfg());
    assert!(again.writes.is_empty(), "{:#?}", again.writes);
}

// ---- properties -------------------------------------------------------------------------

/// A random world: mode, TenantGateway name, namespaces, 0..80 routes.
fn random_world(rng: &mut Rng) -> Inputs {
    let mut w = busy_world(match rng.below(3) {
        0 => testing::http01_spec(),
        1 => dns01_spec(),
        _ => existing_secret_spec(),
    });
    w.tgw.name = rng
        .pick(&["gw", "a.b.c", &"long-name".repeat(20), "x"])
        .to_string();
    if rng.below(2) == 0 {
        w.tgw.spec.tls_passthrough_services = vec!["api".into(), "api".into(), "Bad_Svc".into()];
    }
    let gw_name = w.tgw.name.clone();
    let labels = [
        "www",
        "harbor",
        "apex",
        "gateway",
        "child-x",
        "a",
        "b",
        "api",
        "web-1",
        &"l".repeat(63),
    ];
    let suffixes = [
        "alice.example.org",
        "bob.alice.example.org",
        "x.alice.example.org",
        "example.org",
    ];
    let namespaces = [
        "tenant-alice",
        "tenant-alice-x",
        "tenant-alice-bob",
        "cozy-harbor",
        "tenant-mallory",
    ];
    for i in 0..rng.below(80) {
        let mut hosts = Vec::new();
        for _ in 0..=rng.below(3) {
            let h = match rng.below(8) {
                0 => "alice.example.org".to_string(),
                1 => format!("*.{}", rng.pick(&suffixes)),
                _ => format!(
                    "{}{}.{}",
                    rng.pick(&labels),
                    rng.below(40),
                    rng.pick(&suffixes)
                ),
            };
            hosts.push(h);
        }
        let refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
        let ns = rng.pick(&namespaces);
        let mut r = if rng.below(8) == 0 {
            testing::tls_route(ns, &format!("r{i}"), &refs)
        } else {
            remote_route(ns, &format!("r{i}"), &refs)
        };
        r.parent_refs[0].name = gw_name.clone();
        r.parent_refs[0].section_name = match rng.below(6) {
            0 => Some("http".into()),
            1 => Some("tls-api".into()),
            _ => None,
        };
        r.set_creation(Some(at(rng.below(50) as i64)));
        w.routes.push(r);
    }
    w
}

#[test]
fn property_shuffled_inputs_give_the_same_plan() {
    let mut rng = Rng::new(7);
    for case in 0..60 {
        let w = random_world(&mut rng);
        let want = plan(&w, &cfg());
        // Also from a converged world, where observed objects and status entries exist.
        let w2 = converge(&w, &want);
        let want2 = plan(&w2, &cfg());
        for _ in 0..3 {
            assert_eq!(plan(&shuffled(&w, &mut rng), &cfg()), want, "case {case}");
            assert_eq!(
                plan(&shuffled(&w2, &mut rng), &cfg()),
                want2,
                "case {case} converged"
            );
        }
    }
}

#[test]
fn property_names_are_valid_labels_and_unique() {
    let mut rng = Rng::new(11);
    for case in 0..80 {
        let w = random_world(&mut rng);
        let p = plan(&w, &cfg());
        let d = p.desired.expect("random worlds are valid");
        assert!(
            d.gateway.spec.listeners.len() <= crate::claims::MAX_LISTENERS,
            "case {case}"
        );
        assert_listener_names_unique(&d, &format!("case {case}"));
        let certs: Vec<&str> = d
            .certificates
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        let unique_certs: BTreeSet<&str> = certs.iter().copied().collect();
        assert_eq!(unique_certs.len(), certs.len(), "case {case}: {certs:?}");
        let mut all: Vec<&str> = d
            .gateway
            .spec
            .listeners
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        all.extend(certs.iter().copied());
        all.extend(d.issuer.iter().filter_map(|i| i.metadata.name.as_deref()));
        all.push(d.redirect.metadata.name.as_deref().unwrap_or_default());
        for n in all {
            assert!(crate::hostname::is_dns_label(n), "case {case}: {n:?}");
        }
        // Every hostname listener is listenable and within the apex.
        for l in &d.gateway.spec.listeners {
            if let Some(h) = &l.hostname {
                assert!(crate::hostname::validate(h).is_ok(), "{h}");
                assert!(crate::hostname::within(h, "alice.example.org"), "{h}");
            }
        }
    }
    // Adversarial: many hostnames whose short forms collide with hashed forms.
    let apex = "alice.example.org";
    let mut hosts = BTreeSet::new();
    for i in 0..200 {
        let deep = format!("w{}.deep.{apex}", i % 20);
        hosts.insert(format!("w{}-{}.{apex}", i % 20, names::h8(&deep)));
        hosts.insert(deep);
        hosts.insert(format!("w{i}.{apex}"));
    }
    let assigned = names::http01(
        &"t".repeat(253),
        apex,
        &hosts,
        &BTreeSet::new(),
        &Default::default(),
    );
    let l: BTreeSet<&String> = assigned.values().map(|n| &n.listener).collect();
    let c: BTreeSet<&String> = assigned.values().map(|n| &n.certificate).collect();
    assert_eq!(l.len(), hosts.len());
    assert_eq!(c.len(), hosts.len());
    assert!(
        assigned
            .values()
            .all(|n| crate::hostname::is_dns_label(&n.listener)
                && crate::hostname::is_dns_label(&n.certificate))
    );
}

#[test]
fn property_desired_fed_back_as_observed_yields_no_writes() {
    let mut rng = Rng::new(23);
    for case in 0..60 {
        let w = random_world(&mut rng);
        let p = plan(&w, &cfg());
        let mut w = converge(&w, &p);
        w.now = at(99_999);
        let again = plan(&w, &cfg());
        assert!(again.writes.is_empty(), "case {case}: {:#?}", again.writes);
        // Once the data plane reports ready, one status write, then nothing.
        make_ready(&mut w);
        let p = plan(&w, &cfg());
        assert!(
            p.writes.iter().all(|x| matches!(x, Write::Status(_))),
            "case {case}: {:#?}",
            p.writes
        );
        let w = converge(&w, &p);
        assert!(plan(&w, &cfg()).writes.is_empty(), "case {case}");

        // The finalizer leaves no mark of ours, and a second cleanup has nothing to do.
        let writes = cleanup(&w, &Scope::default());
        let done = converge(
            &w,
            &Plan {
                desired: None,
                writes,
                status: Default::default(),
                refused: Vec::new(),
                summary: Default::default(),
                notices: Vec::new(),
            },
        );
        assert!(
            done.namespaces
                .iter()
                .all(|n| n.attached_by() != Some("tenant-alice")),
            "case {case}"
        );
        let gw = (done.tgw.namespace.as_str(), done.tgw.name.as_str());
        for r in &done.routes {
            assert!(
                status::entries_for(&r.our_status, &r.namespace, gw).is_empty(),
                "case {case}"
            );
        }
        assert!(cleanup(&done, &Scope::default()).is_empty(), "case {case}");
    }
}

/// SPEC §3.7: our entries never push a route's `status.parents` past 32. Others' entries
/// (other controllers', and ours for other Gateways) stay; ours fill the room left in
/// parentRef order; the TenantGateway status and an event name the routes cut; every other
/// write of the plan still happens, and the converged world writes nothing more.
#[test]
fn route_status_never_pushes_parents_past_32() {
    use super::inputs::{ParentRef, ParentsLayout, RouteParentStatus};
    // (parentRefs to gw, other controllers' entries, our entries for another Gateway,
    //  entries of ours for gw expected)
    let cases: [(usize, usize, usize, usize); 9] = [
        (31, 1, 0, 31),
        (32, 1, 0, 31),
        (32, 0, 0, 32),
        (40, 0, 0, 32),
        (1, 31, 0, 1),
        (5, 32, 0, 0),
        (31, 0, 1, 31),
        (32, 0, 1, 31),
        (16, 10, 10, 12),
    ];
    for (refs, others, elsewhere, kept) in cases {
        let case = format!("{refs} parentRefs, {others} foreign, {elsewhere} ours elsewhere");
        let mut w = world();
        let mut big = route("tenant-alice", "big", &["big.alice.example.org"]);
        // Distinct parentRefs to the same Gateway: each gets its own entry.
        big.parent_refs = (0..refs)
            .map(|i| {
                ParentRef {
                    name: "gw".into(),
                    port: Some(i32::try_from(1000 + i).expect("small")),
                    ..ParentRef::default()
                }
                .into()
            })
            .collect();
        big.our_status = (0..elsewhere)
            .map(|i| RouteParentStatus {
                parent_ref: ParentRef {
                    name: format!("other-gw-{i}"),
                    ..ParentRef::default()
                }
                .into(),
                conditions: Default::default(),
            })
            .collect();
        big.set_parents_layout(Some(ParentsLayout {
            status: true,
            parents: Some(u32::try_from(others + elsewhere).expect("small")),
            ours_at: (others..others + elsewhere)
                .map(|i| u32::try_from(i).expect("small"))
                .collect(),
        }));
        w.routes.push(big);
        w.routes
            .push(route("tenant-alice", "small", &["small.alice.example.org"]));

        let first = plan(&w, &cfg());
        assert!(
            first.writes.iter().any(|w| matches!(w, Write::Apply(_))),
            "{case}: the objects are still written"
        );
        let (w, p) = settle(w);
        let mine: Vec<&RouteParentStatus> = testing::entries(&w, "tenant-alice", "big")
            .iter()
            .filter(|e| e.parent_ref.name == "gw")
            .collect();
        assert_eq!(mine.len(), kept, "{case}");
        assert!(others + elsewhere + mine.len() <= 32, "{case}");
        // Ours fill the room in parentRef order: the first `kept` parentRefs.
        let ports: BTreeSet<i32> = mine.iter().filter_map(|e| e.parent_ref.port).collect();
        let want: BTreeSet<i32> = (0..kept)
            .map(|i| i32::try_from(1000 + i).expect("small"))
            .collect();
        assert_eq!(ports, want, "{case}");
        // Our entries for other Gateways stay.
        let kept_elsewhere = testing::entries(&w, "tenant-alice", "big")
            .iter()
            .filter(|e| e.parent_ref.name != "gw")
            .count();
        assert_eq!(kept_elsewhere, elsewhere, "{case}");
        // Nothing else is affected.
        assert_eq!(accepted(&w, "tenant-alice", "small").0, "True", "{case}");
        assert!(
            listener_names(&w).contains(&"https-big".to_string()),
            "{case}: the route is still served"
        );

        let c = condition(&p, status::ROUTE_STATUS);
        let event = p.notices.iter().find(|n| n.reason == "RouteParentsFull");
        if kept == refs {
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                ("True", "Recorded"),
                "{case}"
            );
            assert!(event.is_none(), "{case}");
        } else {
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                ("False", "ParentsFull"),
                "{case}"
            );
            let named = format!(
                "HTTPRoute tenant-alice/big ({} of {refs} parentRefs)",
                refs - kept
            );
            assert!(c.message.contains(&named), "{case}: {}", c.message);
            assert!(c.message.starts_with("1 route(s)"), "{case}: {}", c.message);
            assert!(
                event.is_some_and(|n| n.message.contains("1 route(s)")),
                "{case}"
            );
        }
    }
}

/// SPEC §3.3, issue 20 item 8: one tenant's 70 hostnames fill a shared http01 Gateway; a
/// later tenant and a `cozy-*` namespace still get listeners: cozy first, then max-min fair
/// shares, and the share outranks the first tenant's existing listeners. Its hostnames that
/// keep a listener keep their names.
#[test]
fn listener_share_is_fair_between_namespaces() {
    // (tenant-alice hostnames, tenant-alice-x hostnames, cozy-mon hostnames, passthrough
    //  services, expected listeners of alice, alice-x, cozy-mon).
    // Hostname listeners = 64 - http - passthrough: 63 without passthrough services.
    type Case = (usize, usize, usize, usize, (usize, usize, usize));
    let cases: [Case; 6] = [
        (70, 3, 2, 0, (58, 3, 2)),
        (70, 0, 0, 0, (63, 0, 0)),
        (10, 3, 2, 0, (10, 3, 2)),
        // Two big tenants split evenly; the odd slot goes to the smaller namespace name.
        (70, 70, 0, 0, (32, 31, 0)),
        (70, 3, 2, 16, (42, 3, 2)),
        (70, 40, 2, 0, (31, 30, 2)),
    ];
    for (n_alice, n_kid, n_cozy, pass, (want_alice, want_kid, want_cozy)) in cases {
        let case = format!("{n_alice}/{n_kid}/{n_cozy} with {pass} passthrough");
        let mut w = world();
        w.tgw.spec.tls_passthrough_services = (0..pass).map(|i| format!("s{i}")).collect();
        w.tgw.spec.attached_namespaces = vec!["cozy-mon".into()];
        w.namespaces.push(testing::namespace("cozy-mon", &[], &[]));
        for i in 0..n_alice {
            let mut r = route(
                "tenant-alice",
                &format!("a{i:02}"),
                &[&format!("a{i:02}.alice.example.org")],
            );
            r.set_creation(Some(at(1000 + i as i64)));
            w.routes.push(r);
        }
        // The first tenant alone: it takes every listener it can.
        let (mut w, _) = settle(w);
        let alone_names = listener_names(&w);
        // Later, newer routes from the second tenant and from cozy-mon.
        for i in 0..n_kid {
            let mut r = remote_route(
                "tenant-alice-x",
                &format!("x{i:02}"),
                &[&format!("x{i:02}.x.alice.example.org")],
            );
            r.set_creation(Some(at(5000 + i as i64)));
            w.routes.push(r);
        }
        for i in 0..n_cozy {
            let mut r = remote_route(
                "cozy-mon",
                &format!("m{i}"),
                &[&format!("m{i}.alice.example.org")],
            );
            r.set_creation(Some(at(6000 + i as i64)));
            w.routes.push(r);
        }
        let (w, p) = settle(w);
        let gw = &w.observed.gateways[0].spec.listeners;
        assert!(gw.len() <= 64, "{case}");
        let count = |suffix: &str, prefix: char| {
            gw.iter()
                .filter_map(|l| l.hostname.as_deref())
                .filter(|h| h.starts_with(prefix) && h.ends_with(suffix))
                .count()
        };
        let got = (
            count(".alice.example.org", 'a'),
            count(".x.alice.example.org", 'x'),
            count(".alice.example.org", 'm'),
        );
        assert_eq!(got, (want_alice, want_kid, want_cozy), "{case}");
        // Who is cut: alice's youngest; everyone cut is told why.
        for i in 0..n_alice {
            let (status, reason, _) = accepted(&w, "tenant-alice", &format!("a{i:02}"));
            let want = if i < want_alice {
                ("True", "Accepted")
            } else {
                ("False", "ListenerLimitReached")
            };
            assert_eq!((status.as_str(), reason.as_str()), want, "{case}: a{i:02}");
        }
        for i in 0..n_kid {
            let want = if i < want_kid { "True" } else { "False" };
            assert_eq!(
                accepted(&w, "tenant-alice-x", &format!("x{i:02}")).0,
                want,
                "{case}"
            );
        }
        for i in 0..n_cozy {
            assert_eq!(
                accepted(&w, "cozy-mon", &format!("m{i}")).0,
                "True",
                "{case}"
            );
        }
        let cut = n_alice + n_kid + n_cozy - want_alice - want_kid - want_cozy;
        let cap = condition(&p, status::LISTENER_CAPACITY);
        if cut == 0 {
            assert_eq!(cap.status, "True", "{case}");
        } else {
            assert_eq!(
                (cap.status.as_str(), cap.reason.as_str()),
                ("False", "ListenerLimitReached"),
                "{case}"
            );
            assert!(
                cap.message.contains(&format!("{cut} hostname(s)"))
                    && cap.message.contains("dns01"),
                "{case}: {}",
                cap.message
            );
        }
        // Every listener that stays keeps the name it had (SPEC §3.2 stickiness).
        let now = listener_names(&w);
        for l in gw
            .iter()
            .filter(|l| l.hostname.as_deref().is_some_and(|h| h.starts_with('a')))
        {
            assert!(alone_names.contains(&l.name), "{case}: {} renamed", l.name);
        }
        assert!(now.len() <= 64, "{case}");
    }
}

/// Issue 20 item 9 on the whole plan: the parent tenant's route never takes
/// `shop.kid.alice.example.org` from the child that owns `kid.alice.example.org`, even when
/// the parent's route came first; the parent's route is told who holds it.
#[test]
fn parent_never_takes_a_hostname_from_the_child_apex_owner() {
    let h = "shop.kid.alice.example.org";
    let mut w = world();
    w.namespaces.push(tenant(
        "tenant-alice-kid",
        "kid.alice.example.org",
        "tenant-alice",
    ));
    let mut parent = route("tenant-alice", "shop", &[h]);
    parent.set_creation(Some(at(1)));
    w.routes.push(parent);
    let (w, _) = settle(w);
    assert_eq!(
        accepted(&w, "tenant-alice", "shop").0,
        "True",
        "alone it is served"
    );
    let before = listener_names(&w);

    let mut w = w;
    w.routes
        .push(remote_route("tenant-alice-kid", "shop", &[h]));
    let (w, p) = settle(w);
    assert_eq!(p.summary.hostname_owners[h], "tenant-alice-kid");
    assert_eq!(accepted(&w, "tenant-alice-kid", "shop").0, "True");
    let (status, reason, msg) = accepted(&w, "tenant-alice", "shop");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "HostnameConflict")
    );
    assert!(
        msg.contains("tenant-alice-kid") && msg.contains("most specific"),
        "{msg}"
    );
    // The listener stays (same hostname, now the child's) and keeps its name.
    assert_eq!(listener_names(&w), before);
}

/// A random adversarial hostname set under `apex`: direct children (one literally `apex`,
/// `gateway`, `child-…`), deep names, labels equal to another hostname's hashed listener
/// stem, labels equal to the hashed form `fit` gives a too-long Certificate name, long
/// labels; and random sticky names, some taken from another hostname's names, some equal to
/// names the rule gives new hostnames, some invalid.
fn adversarial_names(
    rng: &mut Rng,
    tgw: &str,
    apex: &str,
) -> (BTreeSet<String>, BTreeMap<String, names::StickyNames>) {
    use std::collections::BTreeMap;
    let mut hosts: BTreeSet<String> = BTreeSet::new();
    for _ in 0..rng.below(40) {
        let i = rng.below(10);
        let h = match rng.below(9) {
            0 => apex.to_string(),
            1 => format!(
                "{}.{apex}",
                rng.pick(&["apex", "gateway", "child-x", "www"])
            ),
            2 => format!("w{i}.deep.{apex}"),
            // The label of a deep hostname's hashed stem, as a direct child.
            3 => format!("w{i}-{}.{apex}", names::h8(&format!("w{i}.deep.{apex}"))),
            4 => {
                // A long direct child, and a twin whose label is the hashed form `fit` gives
                // the long one's Certificate name.
                let long = format!("{i}{}", "a".repeat(56));
                let base = format!("{tgw}-{long}");
                let cert = names::fit(&base, "-tls");
                if let Some(stem) = cert
                    .strip_prefix(&format!("{tgw}-"))
                    .and_then(|c| c.strip_suffix("-tls"))
                    .filter(|s| crate::hostname::is_dns_label(s) && s.len() <= 57)
                {
                    hosts.insert(format!("{stem}.{apex}"));
                }
                format!("{long}.{apex}")
            }
            5 => format!("{}.{apex}", "l".repeat(63)),
            _ => format!("h{}.{apex}", rng.below(30)),
        };
        hosts.insert(h);
    }
    let fixed = BTreeSet::from(["http".to_string(), "tls-api".to_string()]);
    let plain = names::http01(tgw, apex, &hosts, &fixed, &BTreeMap::new());
    let all: Vec<&names::HostNames> = plain.values().collect();
    let mut sticky = BTreeMap::new();
    for h in &hosts {
        let pick_other = |rng: &mut Rng| all[rng.below(all.len())].clone();
        let s = match rng.below(6) {
            0 => continue,
            // Its own names (as if rendered before).
            1 => {
                let n = plain[h].clone();
                names::StickyNames {
                    listener: Some(n.listener),
                    certificate: Some(n.certificate),
                }
            }
            // Another hostname's rule names: a new hostname would want them.
            2 => {
                let n = pick_other(rng);
                names::StickyNames {
                    listener: Some(n.listener),
                    certificate: Some(n.certificate),
                }
            }
            3 => names::StickyNames {
                listener: Some(
                    rng.pick(&["http", "tls-api", "https-apex", "Bad_Name"])
                        .into(),
                ),
                certificate: Some(
                    rng.pick(&[
                        &format!("{tgw}-acme-account"),
                        &format!("{tgw}-gateway-tls"),
                        "x.y.tls",
                        "UPPER",
                    ])
                    .to_string(),
                ),
            },
            4 => names::StickyNames {
                listener: Some(format!("https-old-{}", rng.below(5))),
                certificate: None,
            },
            _ => names::StickyNames {
                listener: None,
                certificate: Some(format!("old-{}.tls", rng.below(5))),
            },
        };
        sticky.insert(h.clone(), s);
    }
    (hosts, sticky)
}

/// Issue 20 item 10 (SPEC §3.2): Certificate names — and so their Secrets — are unique per
/// TenantGateway and valid DNS-1123 subdomains of at most 253 characters, like listener
/// names are unique labels, whatever the hostnames and the sticky names of the observed
/// Gateway; a valid sticky name not already taken is kept.
#[test]
fn property_certificate_names_are_unique_valid_subdomains() {
    let apex = "alice.example.org";
    let mut rng = Rng::new(31);
    for case in 0..400 {
        let tgw = rng
            .pick(&["gw", "a.b.c", &"t".repeat(253), "long-name-long-name"])
            .to_string();
        let (hosts, sticky) = adversarial_names(&mut rng, &tgw, apex);
        let fixed = BTreeSet::from(["http".to_string(), "tls-api".to_string()]);
        let n = names::http01(&tgw, apex, &hosts, &fixed, &sticky);
        assert_eq!(
            n.keys().collect::<Vec<_>>(),
            hosts.iter().collect::<Vec<_>>()
        );
        let ls: BTreeSet<&str> = n.values().map(|v| v.listener.as_str()).collect();
        let cs: BTreeSet<&str> = n.values().map(|v| v.certificate.as_str()).collect();
        assert_eq!(ls.len(), n.len(), "case {case}: listeners {n:?}");
        assert_eq!(cs.len(), n.len(), "case {case}: certificates {n:?}");
        let acme = names::acme_account_secret(&tgw);
        let wildcard = names::wildcard_certificate(&tgw);
        for (h, v) in &n {
            assert!(
                crate::hostname::is_dns_label(&v.listener),
                "case {case}: {h} {v:?}"
            );
            assert!(!fixed.contains(&v.listener), "case {case}: {h} {v:?}");
            assert!(
                crate::hostname::is_dns_subdomain(&v.certificate) && v.certificate.len() <= 253,
                "case {case}: {h} {v:?}"
            );
            assert!(
                v.certificate != acme && v.certificate != wildcard,
                "case {case}: {h} {v:?}"
            );
        }
        // Sticky names are kept unless invalid or taken before (hostname order).
        let mut seen_l: BTreeSet<String> = fixed.clone();
        let mut seen_c: BTreeSet<String> = BTreeSet::from([acme.clone(), wildcard.clone()]);
        for h in &hosts {
            let Some(s) = sticky.get(h) else { continue };
            if let Some(l) = &s.listener
                && crate::hostname::is_dns_label(l)
                && seen_l.insert(l.clone())
            {
                assert_eq!(&n[h].listener, l, "case {case}: {h} lost its listener name");
            }
            if let Some(c) = &s.certificate
                && crate::hostname::is_dns_subdomain(c)
                && seen_c.insert(c.clone())
            {
                assert_eq!(
                    &n[h].certificate, c,
                    "case {case}: {h} lost its certificate"
                );
            }
        }
    }
}

/// On the whole plan: an observed Gateway whose listener holds the name the rule gives a new
/// hostname keeps it; the new hostname gets another name, Certificates and Secrets stay
/// unique, and adding routes later never renames a listener or a Certificate.
#[test]
fn property_sticky_names_survive_new_routes() {
    let mut rng = Rng::new(37);
    for case in 0..40 {
        let mut w = random_world(&mut rng);
        w.tgw.spec = testing::http01_spec();
        let (w, _) = settle(w);
        let before = https_names(&w);
        let mut w = w;
        // New routes whose hostnames the rule would give an existing listener's name: a
        // direct child whose label is an existing hashed stem, and a deep twin of an existing
        // direct child (`<label>.deep.<apex>` has the stem `<label>-<h8>`).
        let mut added = 0;
        for (h, (listener, _)) in &before {
            let Some(stem) = listener.strip_prefix("https-") else {
                continue;
            };
            let label = h.split('.').next().unwrap_or("x");
            for nh in [
                format!("{stem}.alice.example.org"),
                format!("{label}.deep.alice.example.org"),
            ] {
                if &nh != h && crate::hostname::listenable(&nh, "alice.example.org").is_ok() {
                    w.routes
                        .push(route("tenant-alice", &format!("new-{added}"), &[&nh]));
                    added += 1;
                }
            }
            if added >= 6 {
                break;
            }
        }
        let (w, p) = settle(w);
        let after = https_names(&w);
        for (h, n) in &before {
            if let Some(m) = after.get(h) {
                assert_eq!(m, n, "case {case}: {h} renamed");
            }
        }
        let d = p.desired.expect("renders");
        let certs: Vec<(&str, &str)> = d
            .certificates
            .iter()
            .map(|c| {
                (
                    c.metadata.name.as_deref().unwrap_or_default(),
                    c.spec.secret_name.as_str(),
                )
            })
            .collect();
        let names_set: BTreeSet<&str> = certs.iter().map(|c| c.0).collect();
        let secrets: BTreeSet<&str> = certs.iter().map(|c| c.1).collect();
        assert_eq!(names_set.len(), certs.len(), "case {case}: {certs:?}");
        assert_eq!(secrets.len(), certs.len(), "case {case}: {certs:?}");
        assert!(!secrets.contains(names::acme_account_secret(&w.tgw.name).as_str()));
        assert_listener_names_unique(&d, &format!("case {case}"));
    }
}

/// No two listeners of the rendered Gateway share a name (the Gateway API rejects it).
fn assert_listener_names_unique(d: &render::Desired, at: &str) {
    let names: Vec<&str> = d
        .gateway
        .spec
        .listeners
        .iter()
        .map(|l| l.name.as_str())
        .collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len(), "{at}: {names:?}");
}

/// The HTTPS listeners of the observed Gateway: hostname → (listener name, certificateRef).
fn https_names(w: &Inputs) -> BTreeMap<String, (String, String)> {
    w.observed
        .gateways
        .iter()
        .flat_map(|g| g.spec.listeners.iter())
        .filter(|l| l.protocol == "HTTPS")
        .filter_map(|l| {
            let cert = l.tls.as_ref()?.certificate_refs.as_ref()?.first()?;
            Some((l.hostname.clone()?, (l.name.clone(), cert.name.clone())))
        })
        .collect()
}

/// Issue 22 item 2 (SPEC §3.2, names are sticky): over random sequences of route adds and
/// removes, each step's rendered objects fed back as the next step's observed ones, no
/// hostname that keeps a listener from one step to the next changes its listener name or its
/// certificateRef, and every name stays a unique DNS label. The pool is built to clash: one
/// first label under the apex, under an inheriting child apex and deeper; direct children
/// whose label is another hostname's hashed stem; the apex and the reserved `apex` label;
/// labels near 63 characters; a long label whose Certificate name `fit` hashes, and its twin;
/// an uppercase hostname (not listenable). The pool is far below the 64-listener cap, so no
/// hostname loses its listener to the fair share (SPEC §3.3), which the test checks.
#[test]
fn property_sticky_names_survive_adds_and_removes() {
    const APEX: &str = "alice.example.org";
    const KID: &str = "kid.alice.example.org";
    let mut rng = Rng::new(41);
    for case in 0..40 {
        let tgw = rng.pick(&["gw", "a.b.c", &"t".repeat(60)]).to_string();
        let long = format!("{}{}", rng.below(10), "a".repeat(56));
        let fitted = names::fit(&format!("{tgw}-{long}"), "-tls");
        let twin = fitted
            .strip_prefix(&format!("{tgw}-"))
            .and_then(|c| c.strip_suffix("-tls"))
            .unwrap_or("twin")
            .to_string();
        let deep = format!("foo.deep.{APEX}");
        let kid_foo = format!("foo.{KID}");
        let pool: Vec<(&str, String)> = vec![
            ("tenant-alice", APEX.to_string()),
            ("tenant-alice", format!("apex.{APEX}")),
            ("tenant-alice", format!("foo.{APEX}")),
            ("tenant-alice-kid", kid_foo.clone()),
            ("tenant-alice", deep.clone()),
            ("tenant-alice", format!("foo-{}.{APEX}", names::h8(&deep))),
            (
                "tenant-alice",
                format!("foo-{}.{APEX}", names::hash_hex(&deep, 16)),
            ),
            (
                "tenant-alice",
                format!("foo-{}.{APEX}", names::h8(&kid_foo)),
            ),
            ("tenant-alice", KID.to_string()),
            ("tenant-alice-kid", format!("apex.{KID}")),
            ("tenant-alice", format!("{}.{APEX}", "l".repeat(63))),
            ("tenant-alice-kid", format!("{}.{KID}", "l".repeat(63))),
            ("tenant-alice", format!("{long}.{APEX}")),
            ("tenant-alice", format!("{twin}.{APEX}")),
            ("tenant-alice", format!("gateway.{APEX}")),
            ("tenant-alice", format!("child-foo.{APEX}")),
            ("tenant-alice", format!("Foo.{APEX}")),
        ];
        let mut w = world();
        w.tgw.name = tgw.clone();
        w.namespaces
            .push(tenant("tenant-alice-kid", KID, "tenant-alice"));
        let mut present = vec![false; pool.len()];
        for step in 0..30 {
            for _ in 0..=rng.below(3) {
                let i = rng.below(pool.len());
                present[i] = !present[i];
            }
            w.routes = pool
                .iter()
                .zip(&present)
                .enumerate()
                .filter(|(_, (_, on))| **on)
                .map(|(i, ((ns, h), _))| {
                    let mut r = remote_route(ns, &format!("r{i}"), &[h]);
                    r.parent_refs[0].name = tgw.clone();
                    r.set_creation(Some(at(i as i64)));
                    r
                })
                .collect();
            // A Certificate the cache has not seen yet, whose write failed, or that someone
            // deleted: the listener's certificateRef still holds.
            if !w.observed.certificates.is_empty() && rng.below(3) == 0 {
                let i = rng.below(w.observed.certificates.len());
                w.observed.certificates.remove(i);
            }
            let before = https_names(&w);
            let (next, p) = settle(w);
            w = next;
            let after = https_names(&w);
            let at_step = format!("case {case} step {step}");
            assert_eq!(p.summary.over_cap, 0, "{at_step}");
            for (h, n) in &before {
                if let Some(m) = after.get(h) {
                    assert_eq!(m, n, "{at_step}: {h} renamed; before {before:#?}");
                }
            }
            let ls: BTreeSet<&str> = after.values().map(|(l, _)| l.as_str()).collect();
            let cs: BTreeSet<&str> = after.values().map(|(_, c)| c.as_str()).collect();
            assert_eq!(ls.len(), after.len(), "{at_step}: {after:#?}");
            assert_eq!(cs.len(), after.len(), "{at_step}: {after:#?}");
            let d = p.desired.as_ref().expect("renders");
            for (h, (l, c)) in &after {
                assert!(crate::hostname::is_dns_label(l), "{at_step}: {h} {l}");
                assert!(crate::hostname::is_dns_label(c), "{at_step}: {h} {c}");
                assert!(
                    d.certificates.iter().any(|x| {
                        x.metadata.name.as_deref() == Some(c.as_str())
                            && x.spec.secret_name == *c
                            && x.spec.dns_names == [h.clone()]
                    }),
                    "{at_step}: {h} refers to {c}, no such Certificate"
                );
            }
            assert_listener_names_unique(d, &at_step);
        }
    }
}

/// Issue 22 item 2 (SPEC §3.2): a listener whose Certificate is missing from the cache (its
/// write failed, the watch has not shown it yet, someone deleted it) keeps its
/// certificateRef, and the Certificate comes back under that name. Two hostnames that arrived
/// together and clashed took hashed forms, so the rule alone, asked again, gives the one
/// left a shorter name: that Certificate would be a new ACME order.
#[test]
fn a_listener_whose_certificate_is_missing_keeps_its_certificate_ref() {
    let deep = "foo.deep.alice.example.org";
    let twin = format!("foo-{}.alice.example.org", names::h8(deep));
    let mut w = world();
    w.routes.push(route("tenant-alice", "deep", &[deep]));
    w.routes
        .push(route("tenant-alice", "twin", &[twin.as_str()]));
    let (mut w, _) = settle(w);
    let before = https_names(&w);
    let stem = format!("foo-{}-{}", names::h8(deep), names::h8(&twin));
    assert_eq!(
        before[&twin],
        (format!("https-{stem}"), format!("gw-{stem}-tls"))
    );
    // The deep hostname goes, and the twin's Certificate is not in the cache.
    w.routes.retain(|r| r.name() != "deep");
    let cert = before[&twin].1.clone();
    w.observed
        .certificates
        .retain(|c| c.metadata.name.as_deref() != Some(cert.as_str()));
    let p = plan(&w, &cfg());
    let applied: Vec<String> = p
        .writes
        .iter()
        .filter_map(|x| match x {
            Write::Apply(Object::Certificate(c)) => c.metadata.name.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(applied, std::slice::from_ref(&cert));
    let (w, _) = settle(w);
    assert_eq!(https_names(&w)[&twin], before[&twin]);
    assert_eq!(cert_names(&w), [cert]);
}

/// The certificateRef of a listener is kept without its Certificate only when the status
/// records this listener waiting for that Certificate: the existingSecret Secret the apex
/// listener refers to never becomes the Secret of a Certificate after a switch to http01.
#[test]
fn an_existing_secret_ref_never_becomes_a_certificate() {
    let mut w = world();
    w.tgw.spec = existing_secret_spec();
    w.routes
        .push(route("tenant-alice", "site", &["alice.example.org"]));
    let (mut w, _) = settle(w);
    assert_eq!(
        https_names(&w)["alice.example.org"],
        ("https-apex".to_string(), "wildcard-tls".to_string())
    );
    w.tgw.spec = testing::http01_spec();
    let (w, _) = settle(w);
    assert_eq!(
        https_names(&w)["alice.example.org"],
        ("https-apex".to_string(), "gw-apex-tls".to_string())
    );
    assert_eq!(cert_names(&w), ["gw-apex-tls"]);
}

/// What the platform's own controller leaves in http01 (SPEC §3.8), as the caches restore
/// it: its names, labels and selectors, our TenantGateway's controller reference, and
/// managedFields showing its plain updates (the kept stand-in).
fn platform_world(hosts: &[&str]) -> Inputs {
    use crate::cluster::managed_fields::stand_in;
    use serde_json::{Value, json};
    let mut w = world();
    w.tgw.spec.tls_passthrough_services.clear();
    w.namespaces[0] = testing::namespace(
        "tenant-alice",
        &[
            (crate::platform::HOST_LABEL, "alice.example.org"),
            (GATEWAY_LABEL, "tenant-alice"),
        ],
        &[(
            crate::platform::PLATFORM_ATTACHED_BY_ANNOTATION,
            "tenant-alice",
        )],
    );
    let owner = serde_json::to_value(render::owner_reference(&w.tgw)).expect("encodes");
    let meta = |name: &str, labels: Value| {
        json!({"name": name, "namespace": "tenant-alice", "uid": format!("uid-platform-{name}"),
               "labels": labels, "ownerReferences": [owner.clone()],
               "managedFields": [serde_json::to_value(stand_in()).expect("encodes")]})
    };
    let stem = |h: &str| format!("{}-{}", h.split('.').next().unwrap_or(h), names::h8(h));
    let port443 = json!({"namespaces": {"from": "Selector",
            "selector": {"matchLabels": {GATEWAY_LABEL: "tenant-alice"}}},
        "kinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"},
                  {"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}]});
    let mut listeners = vec![json!({"name": "http", "port": 80, "protocol": "HTTP",
        "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In",
             "values": ["tenant-alice", "cozy-cert-manager"]}]}}}})];
    for h in hosts {
        listeners.push(json!({"name": format!("https-{}", stem(h)), "port": 443,
            "protocol": "HTTPS", "hostname": h, "allowedRoutes": port443,
            "tls": {"mode": "Terminate", "certificateRefs": [
                {"group": "", "kind": "Secret", "name": format!("gw-{}-tls", stem(h))}]}}));
    }
    let platform_labels = json!({"cozystack.io/managed-by": "cozystack-controller"});
    w.observed.gateways = vec![
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": meta("gw", json!({"cozystack.io/gateway": "tenant-alice",
                "cozystack.io/managed-by": "cozystack-controller"})),
            "spec": {"gatewayClassName": "cilium", "listeners": listeners}}))
        .expect("a Gateway"),
    ];
    w.observed.certificates = hosts
        .iter()
        .map(|h| {
            let name = format!("gw-{}-tls", stem(h));
            serde_json::from_value(json!({
                "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                "metadata": meta(&name, json!({"cozystack.io/managed-by": "cozystack-controller",
                    "cozystack.io/tenantgateway": "gw", "cozystack.io/per-listener-cert": "true"})),
                "spec": {"secretName": name, "dnsNames": [h],
                         "issuerRef": {"kind": "Issuer", "name": "gw-gateway"}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
            .expect("a Certificate")
        })
        .collect();
    w.observed.issuers = vec![
        serde_json::from_value(json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Issuer",
            "metadata": meta("gw-gateway", platform_labels.clone()),
            "spec": {"acme": {"server": "https://acme-v02.api.letsencrypt.org/directory",
                "privateKeySecretRef": {"name": "gw-acme-account"},
                "solvers": [{"http01": {"gatewayHTTPRoute": {"parentRefs": [
                    {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw",
                     "namespace": "tenant-alice", "sectionName": "http"}]}}}]}}}))
        .expect("an Issuer"),
    ];
    w.observed.http_routes = vec![
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": meta("gw-http-redirect", json!({
                "cozystack.io/managed-by": "cozystack-controller",
                "cozystack.io/tenantgateway": "gw"})),
            "spec": {"parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                "name": "gw", "sectionName": "http"}],
                "rules": [{"filters": [{"type": "RequestRedirect",
                    "requestRedirect": {"scheme": "https", "statusCode": 301}}]}]}}))
        .expect("an HTTPRoute"),
    ];
    w.routes = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| route("tenant-alice", &format!("r{i}"), &[h]))
        .collect();
    w
}

/// Issue 22 item 1 on the pure core (SPEC §3.8): the platform controller's world is owned
/// (its controller reference), nothing is refused, every hostname keeps its listener name
/// and Certificate, no Certificate is created or deleted, every object is applied once (the
/// edge takes the other manager's fields over first), the namespace mark is replaced; then
/// no write, a new route gets a listener of its own without renaming any, and a hostname
/// that goes takes its adopted Certificate with it.
#[test]
fn the_platform_controllers_world_is_adopted_in_place() {
    let hosts = ["harbor.alice.example.org", "docs.alice.example.org"];
    let w = platform_world(&hosts);
    let before = https_names(&w);
    let p = plan(&w, &cfg());
    assert!(p.refused.is_empty(), "{:?}", p.refused);
    let d = p.desired.as_ref().expect("renders");
    let rendered: BTreeMap<String, (String, String)> = d
        .gateway
        .spec
        .listeners
        .iter()
        .filter(|l| l.protocol == "HTTPS")
        .filter_map(|l| {
            let c = l.tls.as_ref()?.certificate_refs.as_ref()?.first()?;
            Some((l.hostname.clone()?, (l.name.clone(), c.name.clone())))
        })
        .collect();
    assert_eq!(rendered, before, "names kept");
    let mut applied: Vec<String> = Vec::new();
    for wr in &p.writes {
        match wr {
            Write::Apply(o) => applied.push(format!("{} {}", o.kind().as_str(), o.name())),
            Write::Delete { name, .. } => panic!("deleted {name}"),
            _ => {}
        }
    }
    let mut want: Vec<String> = vec![
        "Gateway gw".into(),
        "HTTPRoute gw-http-redirect".into(),
        "Issuer gw-gateway".into(),
    ];
    want.extend(before.values().map(|(_, c)| format!("Certificate {c}")));
    applied.sort();
    want.sort();
    assert_eq!(applied, want, "each object once, no new Certificate");
    assert!(
        p.writes
            .contains(&Write::Namespace(labels::NamespaceWrite::Attach {
                namespace: "tenant-alice".into(),
                gateway: "tenant-alice".into(),
            }))
    );

    let (w, _) = settle(w);
    assert_eq!(https_names(&w), before);
    assert!(plan(&w, &cfg()).writes.is_empty(), "converged");

    let mut grown = w.clone();
    grown
        .routes
        .push(route("tenant-alice", "new", &["new.alice.example.org"]));
    let (grown, _) = settle(grown);
    let after = https_names(&grown);
    for (h, names) in &before {
        assert_eq!(after.get(h), Some(names), "{h} renamed");
    }
    assert_eq!(
        after.get("new.alice.example.org"),
        Some(&("https-new".to_string(), "gw-new-tls".to_string()))
    );

    let mut shrunk = grown.clone();
    shrunk.routes.retain(|r| r.name() != "r0");
    let p = plan(&shrunk, &cfg());
    let deletes: Vec<(ObjectKind, &str)> = p
        .writes
        .iter()
        .filter_map(|w| match w {
            Write::Delete { kind, name, .. } => Some((*kind, name.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        deletes,
        [(ObjectKind::Certificate, before[hosts[0]].1.as_str())],
        "the adopted Certificate goes with its hostname"
    );
}

/// Issue 22 item 2 from the platform controller's names (SPEC §3.2, §3.8): a world it left
/// (a random subset of a pool named its way, `https-<label>-<h8>`), then random route adds
/// and removes. No hostname that keeps a listener from one step to the next changes its
/// listener or Certificate name, the platform's names included, and a new hostname never
/// takes a name already in use: the pool holds direct children whose short form is another
/// hostname's platform name (`foo-<h8(foo.<apex>)>.<apex>`) or our hashed form.
#[test]
fn property_platform_names_survive_adds_and_removes() {
    const APEX: &str = "alice.example.org";
    let foo = format!("foo.{APEX}");
    let deep = format!("foo.deep.{APEX}");
    let pool: Vec<String> = vec![
        APEX.to_string(),
        foo.clone(),
        deep.clone(),
        format!("foo.kid.{APEX}"),
        format!("apex.{APEX}"),
        format!("kid.{APEX}"),
        format!("foo-{}.{APEX}", names::h8(&foo)),
        format!("foo-{}.{APEX}", names::h8(&deep)),
        format!("alice-{}.{APEX}", names::h8(APEX)),
        format!("bar.{APEX}"),
    ];
    let mut rng = Rng::new(22);
    for case in 0..30 {
        let mut present: Vec<bool> = pool.iter().map(|_| rng.below(2) == 0).collect();
        let start: Vec<&str> = pool
            .iter()
            .zip(&present)
            .filter(|(_, on)| **on)
            .map(|(h, _)| h.as_str())
            .collect();
        let mut w = platform_world(&start);
        let platform_names = https_names(&w);
        let mut alive: BTreeSet<String> = platform_names.keys().cloned().collect();
        for step in 0..25 {
            w.routes = pool
                .iter()
                .zip(&present)
                .enumerate()
                .filter(|(_, (_, on))| **on)
                .map(|(i, (h, _))| route("tenant-alice", &format!("p{i}"), &[h]))
                .collect();
            let before = https_names(&w);
            let (next, p) = settle(w);
            w = next;
            let after = https_names(&w);
            let at_step = format!("case {case} step {step}");
            assert!(p.refused.is_empty(), "{at_step}: {:?}", p.refused);
            for (h, n) in &before {
                if let Some(m) = after.get(h) {
                    assert_eq!(m, n, "{at_step}: {h} renamed");
                }
            }
            // A hostname that has kept its listener since the switch has the platform's names.
            alive.retain(|h| after.contains_key(h));
            for h in &alive {
                assert_eq!(after[h], platform_names[h], "{at_step}: {h}");
            }
            let ls: BTreeSet<&str> = after.values().map(|(l, _)| l.as_str()).collect();
            let cs: BTreeSet<&str> = after.values().map(|(_, c)| c.as_str()).collect();
            assert_eq!(ls.len(), after.len(), "{at_step}: {after:#?}");
            assert_eq!(cs.len(), after.len(), "{at_step}: {after:#?}");
            let d = p.desired.as_ref().expect("renders");
            for (h, (_, c)) in &after {
                assert!(
                    d.certificates
                        .iter()
                        .any(|x| x.metadata.name.as_deref() == Some(c.as_str())
                            && x.spec.dns_names == [h.clone()]),
                    "{at_step}: {h} refers to {c}, no such Certificate"
                );
            }
            assert_listener_names_unique(d, &at_step);
            for _ in 0..=rng.below(3) {
                let i = rng.below(pool.len());
                present[i] = !present[i];
            }
        }
    }
}
// ---- listeners whose SNI overlaps (SPEC §3.10) ------------------------------------------

fn separate() -> Options {
    Options {
        passthrough_gateway: PassthroughGateway::Separate,
        ..Options::default()
    }
}

/// [`settle`] under `opts`.
fn settle_with(w: Inputs, opts: &Options) -> (Inputs, Plan) {
    crate::reconcile::testing::settle_with(w, opts)
}

fn gateway_named<'a>(w: &'a Inputs, name: &str) -> Option<&'a Gateway> {
    w.observed
        .gateways
        .iter()
        .find(|g| g.metadata.name.as_deref() == Some(name))
}

fn listeners_of(g: &Gateway) -> Vec<(&str, Option<&str>)> {
    g.spec
        .listeners
        .iter()
        .map(|l| (l.name.as_str(), l.hostname.as_deref()))
        .collect()
}

/// Our entry's Accepted condition for the route's parentRef to Gateway `gw`.
fn accepted_on(w: &Inputs, ns: &str, name: &str, gw: &str) -> (String, String, String) {
    let r = w
        .routes
        .iter()
        .find(|r| &*r.namespace == ns && r.name() == name)
        .expect("route");
    let e: Vec<_> = status::entries_for(&r.our_status, &r.namespace, ("tenant-alice", gw));
    assert_eq!(e.len(), 1, "{ns}/{name} on {gw}: {:?}", r.our_status);
    let c = e[0].conditions.to_vec().swap_remove(0);
    (c.status, c.reason, c.message)
}

/// A route to `tenant-alice/<gw>` (the test tenant's namespace).
fn route_to(kind: &str, name: &str, gw: &str, hosts: &[&str]) -> inputs::RouteFacts {
    let mut r = if kind == "TLSRoute" {
        testing::tls_route("tenant-alice", name, hosts)
    } else {
        route("tenant-alice", name, hosts)
    };
    r.parent_refs[0].name = gw.to_string();
    r
}

/// The data plane's listener status as Cilium 1.19.6 writes it for a refused pair:
/// Conflicted=True reason ProtocolConflict, Accepted=False, at the Gateway's generation.
fn cilium_conflicted(g: &mut Gateway, listeners: &[&str]) {
    let generation = g.metadata.generation;
    let cond =
        |t: &str, s: &str, r: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: t.to_string(),
            status: s.to_string(),
            reason: r.to_string(),
            message:
                "Listeners with the same port and intersecting hostnames have conflicting protocols"
                    .to_string(),
            observed_generation: generation,
            last_transition_time: at(1),
        };
    let st = g.status.get_or_insert_with(Default::default);
    for l in st.listeners.iter_mut().flatten() {
        if listeners.contains(&l.name.as_str()) {
            l.conditions = vec![
                cond("Accepted", "False", "ProtocolConflict"),
                cond("Conflicted", "True", "ProtocolConflict"),
                cond("Programmed", "False", "Invalid"),
            ];
        }
    }
}

/// http01: the declaration wins. No terminate listener or Certificate for `api.<apex>` (not
/// even one the Gateway already had), the route that claims it is told why, naming the
/// passthrough listener, and its other hostnames are served.
#[test]
fn http01_passthrough_hostname_gets_no_terminate_listener() {
    let mut w = world();
    w.routes.push(route(
        "tenant-alice",
        "api-web",
        &["api.alice.example.org", "www.alice.example.org"],
    ));
    w.routes.push(route(
        "tenant-alice",
        "api-only",
        &["API.alice.example.org"],
    ));
    let (w, p) = settle(w);
    let names = listener_names(&w);
    assert!(names.contains(&"https-www".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n == "https-api"), "{names:?}");
    assert_eq!(cert_names(&w), ["gw-www-tls"]);
    let d = p.desired.clone().expect("renders");
    assert!(
        d.gateway
            .spec
            .listeners
            .iter()
            .filter(|l| l.protocol == "HTTPS")
            .all(|l| l.hostname.as_deref() != Some("api.alice.example.org"))
    );
    for name in ["api-web", "api-only"] {
        let (status, reason, message) = accepted(&w, "tenant-alice", name);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "PassthroughHostname")
        );
        assert!(message.contains("tls-api"), "{message}");
        assert!(message.contains("tenant-alice/gw"), "{message}");
    }
    assert!(
        !accepted(&w, "tenant-alice", "api-web")
            .2
            .contains("www.alice.example.org"),
        "the served hostname is not refused"
    );
    assert_eq!(condition(&p, status::LISTENERS_OVERLAP).status, "False");
    assert_eq!(condition(&p, status::LISTENERS_OVERLAP).reason, "NoOverlap");

    // A Gateway that already had a terminate listener and a Certificate for it (rendered
    // before the rule): both go.
    let mut before = w.clone();
    before.tgw.spec.tls_passthrough_services = vec!["vm-exportproxy".into()];
    let (mut before, _) = settle(before);
    assert!(listener_names(&before).contains(&"https-api".to_string()));
    before.tgw.spec.tls_passthrough_services = vec!["api".into(), "vm-exportproxy".into()];
    let p = plan(&before, &cfg());
    assert!(
        p.writes.iter().any(|x| matches!(x, Write::Delete { kind: ObjectKind::Certificate, name, .. } if name == "gw-api-tls")),
        "{:#?}",
        p.writes
    );
    let (after, _) = settle(before);
    assert!(!listener_names(&after).contains(&"https-api".to_string()));
    assert!(listener_names(&after).contains(&"tls-api".to_string()));
    assert_eq!(cert_names(&after), ["gw-www-tls"]);

    // The flag changes nothing for http01: one Gateway, same objects.
    assert_eq!(plan(&w, &separate()).writes, Vec::<Write>::new());
}

/// dns01/existingSecret, `shared` (the default): one Gateway, and ListenersOverlap=True
/// naming each (terminate, passthrough) pair with hostnames and the flag.
#[test]
fn shared_layout_reports_each_overlapping_pair() {
    for spec in [dns01_spec(), existing_secret_spec()] {
        let mut w = world();
        w.tgw.spec = spec;
        let (w, p) = settle(w);
        assert_eq!(w.observed.gateways.len(), 1);
        let c = condition(&p, status::LISTENERS_OVERLAP);
        assert_eq!(c.status, "True", "{c:?}");
        assert_eq!(c.reason, "TerminateAndPassthrough");
        assert!(
            c.message.contains(
                "https (*.alice.example.org) and tls-api (api.alice.example.org), https \
                 (*.alice.example.org) and tls-vm-exportproxy (vm-exportproxy.alice.example.org)"
            ),
            "{}",
            c.message
        );
        assert!(
            c.message.contains("--passthrough-gateway shared"),
            "{}",
            c.message
        );
        assert!(
            c.message.contains("--passthrough-gateway separate"),
            "{}",
            c.message
        );
        assert!(c.message.contains("gw-passthrough"), "{}", c.message);
        // The pairs are a function of the world: shuffled inputs give the same text.
        let again = plan(&shuffled(&w, &mut Rng::new(3)), &cfg());
        assert_eq!(condition(&again, status::LISTENERS_OVERLAP), c);
        assert_eq!(p.status.gateways.len(), 1);
        assert_eq!(p.status.gateways[0].name, "gw");

        // No passthrough service: nothing overlaps.
        let mut none = w.clone();
        none.tgw.spec.tls_passthrough_services.clear();
        let p = plan(&none, &cfg());
        assert_eq!(condition(&p, status::LISTENERS_OVERLAP).status, "False");
    }
}

/// dns01/existingSecret, `separate`: `<name>-passthrough` with the passthrough listeners
/// only (same class, owned the same way, TLSRoute only even with uniform kinds), the first
/// Gateway without them; both in the status and in Programmed/Ready; a resync writes nothing.
#[test]
fn separate_layout_renders_the_second_gateway() {
    for spec in [dns01_spec(), existing_secret_spec()] {
        let mut w = world();
        w.tgw.spec = spec;
        w.tgw.spec.gateway_class_name = "cilium-edge".into();
        let opts = Options {
            uniform_port_kinds: true,
            ..separate()
        };
        let p = plan(&w, &opts);
        let kinds: Vec<String> = p
            .writes
            .iter()
            .filter_map(|x| match x {
                Write::Apply(o) => Some(format!("{} {}", o.kind().as_str(), o.name())),
                _ => None,
            })
            .collect();
        let gws: Vec<&String> = kinds.iter().filter(|k| k.starts_with("Gateway")).collect();
        assert_eq!(gws, ["Gateway gw", "Gateway gw-passthrough"], "{kinds:?}");
        let d = p.desired.clone().expect("renders");
        let second = d.passthrough_gateway.clone().expect("second Gateway");
        assert!(
            d.gateway.spec.listeners.iter().all(|l| l.protocol != "TLS"),
            "{:?}",
            listeners_of(&d.gateway)
        );
        assert_eq!(
            listeners_of(&second),
            [
                ("tls-api", Some("api.alice.example.org")),
                (
                    "tls-vm-exportproxy",
                    Some("vm-exportproxy.alice.example.org")
                )
            ]
        );
        assert_eq!(second.spec.gateway_class_name, "cilium-edge");
        assert_eq!(
            second.metadata.owner_references,
            d.gateway.metadata.owner_references
        );
        assert_eq!(second.metadata.labels, d.gateway.metadata.labels);
        assert_eq!(second.metadata.namespace.as_deref(), Some("tenant-alice"));
        for l in &second.spec.listeners {
            let json = serde_json::to_value(&l.allowed_routes).expect("json");
            assert_eq!(
                json["kinds"],
                serde_json::json!([{"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}])
            );
            assert_eq!(
                json["namespaces"],
                serde_json::to_value(&d.gateway.spec.listeners[1].allowed_routes).expect("json")["namespaces"],
                "layer 1 as on the first Gateway"
            );
        }
        assert!(render::overlapping_listeners(&d.gateway).is_empty());

        let (mut w, p) = settle_with(w, &opts);
        assert_eq!(w.observed.gateways.len(), 2);
        let c = condition(&p, status::LISTENERS_OVERLAP);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "SeparateGateway")
        );
        let named: Vec<&str> = p.status.gateways.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(named, ["gw", "gw-passthrough"]);
        assert_eq!(condition(&p, status::PROGRAMMED).status, "False");

        // Both count: the first programmed alone is not enough.
        make_ready(&mut w);
        if let Some(g) = w
            .observed
            .gateways
            .iter_mut()
            .find(|g| g.metadata.name.as_deref() == Some("gw-passthrough"))
        {
            g.status = None;
        }
        let p = plan(&w, &opts);
        let programmed = condition(&p, status::PROGRAMMED);
        assert_eq!(programmed.status, "False");
        assert!(
            programmed.message.contains("gw-passthrough"),
            "{programmed:?}"
        );
        assert_eq!(condition(&p, status::READY).status, "False");
        let tls = p
            .status
            .listeners
            .iter()
            .find(|l| l.name == "tls-api")
            .expect("listed");
        assert_eq!(
            tls.reason, "Pending",
            "read from the second Gateway's status"
        );

        // Both programmed, with addresses: Ready, and both addresses reported.
        make_ready(&mut w);
        for g in &mut w.observed.gateways {
            let ip = if g.metadata.name.as_deref() == Some("gw") {
                "10.0.0.1"
            } else {
                "10.0.0.2"
            };
            if let Some(s) = g.status.as_mut() {
                s.addresses = Some(vec![
                    gateway_api::apis::experimental::gateways::GatewayStatusAddresses {
                        r#type: Some("IPAddress".into()),
                        value: ip.into(),
                    },
                ]);
            }
        }
        let (w, p) = settle_with(w, &opts);
        assert_eq!(
            condition(&p, status::READY).status,
            "True",
            "{:?}",
            p.status
        );
        assert_eq!(
            condition(&p, status::PROGRAMMED).message,
            "Gateways gw and gw-passthrough are accepted and programmed"
        );
        let addresses: Vec<(&str, &str)> = p
            .status
            .gateways
            .iter()
            .flat_map(|g| {
                g.addresses
                    .iter()
                    .map(move |a| (g.name.as_str(), a.value.as_str()))
            })
            .collect();
        assert_eq!(
            addresses,
            [("gw", "10.0.0.1"), ("gw-passthrough", "10.0.0.2")]
        );
        // A resync writes nothing, whatever the order the caches list things in.
        assert!(plan(&w, &opts).writes.is_empty());
        assert!(
            plan(&shuffled(&w, &mut Rng::new(9)), &opts)
                .writes
                .is_empty()
        );
    }
}

/// Routes in the `separate` layout: TLSRoutes attach to `<name>-passthrough`; one still on
/// `<name>` is told where the listeners went; an HTTPRoute on the second Gateway is refused.
/// Switching back to `shared` removes every entry of ours for the second Gateway.
#[test]
fn separate_layout_route_entries() {
    let mut w = world();
    w.tgw.spec = dns01_spec();
    w.routes.push(route_to(
        "TLSRoute",
        "kube",
        "gw-passthrough",
        &["api.alice.example.org"],
    ));
    let mut named = route_to(
        "TLSRoute",
        "named",
        "gw-passthrough",
        &["api.alice.example.org"],
    );
    named.parent_refs[0].section_name = Some("tls-nope".into());
    w.routes.push(named);
    w.routes.push(route_to(
        "TLSRoute",
        "old",
        "gw",
        &["api.alice.example.org"],
    ));
    w.routes.push(route_to(
        "HTTPRoute",
        "web",
        "gw-passthrough",
        &["www.alice.example.org"],
    ));
    let (w, _) = settle_with(w, &separate());
    assert_eq!(
        accepted_on(&w, "tenant-alice", "kube", "gw-passthrough").0,
        "True"
    );
    assert_eq!(
        accepted_on(&w, "tenant-alice", "named", "gw-passthrough").1,
        "NoMatchingParent"
    );
    let (st, reason, msg) = accepted_on(&w, "tenant-alice", "old", "gw");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "NotAllowedByListeners")
    );
    assert!(msg.contains("tenant-alice/gw-passthrough"), "{msg}");
    let (st, reason, msg) = accepted_on(&w, "tenant-alice", "web", "gw-passthrough");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "NotAllowedByListeners")
    );
    assert!(
        msg.contains("HTTPRoutes to Gateway tenant-alice/gw"),
        "{msg}"
    );

    // Back to shared: the second Gateway is deleted, our entries for it removed, and the
    // TLSRoute on `<name>` is accepted again.
    let (back, _) = settle(w);
    assert!(gateway_named(&back, "gw-passthrough").is_none());
    for r in &back.routes {
        assert!(
            status::entries_for(
                &r.our_status,
                &r.namespace,
                ("tenant-alice", "gw-passthrough")
            )
            .is_empty(),
            "{}: {:?}",
            r.name(),
            r.our_status
        );
    }
    assert_eq!(accepted_on(&back, "tenant-alice", "old", "gw").0, "True");

    // The finalizer removes our entries for both Gateways.
    let (w, _) = settle_with(back, &separate());
    let writes = cleanup(&w, &Scope::default());
    let gws: BTreeSet<&str> = writes
        .iter()
        .filter_map(|x| match x {
            Write::RouteStatus(r) if r.entries.is_empty() => Some(r.gateway_name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(gws, BTreeSet::from(["gw", "gw-passthrough"]));
}

/// Switching either way converges with no orphan and nothing foreign touched: a same-named
/// `<name>-passthrough` the TenantGateway does not own is refused (never written, never
/// deleted), in both layouts.
#[test]
fn switching_layouts_converges_and_never_takes_a_foreign_gateway() {
    let mut w = world();
    w.tgw.spec = existing_secret_spec();
    let (shared, _) = settle(w.clone());
    let (sep, _) = settle_with(shared.clone(), &separate());
    assert_eq!(sep.observed.gateways.len(), 2);
    assert!(listener_names(&sep).iter().all(|n| !n.starts_with("tls-")));
    let (back, _) = settle(sep.clone());
    assert_eq!(back.observed.gateways.len(), 1);
    assert_eq!(
        listener_names(&back),
        listener_names(&shared),
        "the first Gateway as it was"
    );
    assert_eq!(back.observed.issuers, shared.observed.issuers);
    assert_eq!(back.observed.certificates, shared.observed.certificates);

    // A foreign Gateway of that name, before the switch.
    let mut foreign = sep
        .observed
        .gateways
        .iter()
        .find(|g| g.metadata.name.as_deref() == Some("gw-passthrough"))
        .expect("second Gateway")
        .clone();
    foreign.metadata.owner_references = None;
    foreign.metadata.labels = None;
    foreign.spec.listeners.truncate(1);
    let mut w = shared.clone();
    w.observed.gateways.push(foreign.clone());
    for opts in [separate(), cfg()] {
        let p = plan(&w, &opts);
        assert!(
            !p.writes.iter().any(|x| match x {
                Write::Apply(o) => o.name() == "gw-passthrough",
                Write::Delete { name, .. } => name == "gw-passthrough",
                _ => false,
            }),
            "{:#?}",
            p.writes
        );
        let (settled, p) = settle_with(w.clone(), &opts);
        assert_eq!(gateway_named(&settled, "gw-passthrough"), Some(&foreign));
        if opts.passthrough_gateway == PassthroughGateway::Separate {
            assert_eq!(condition(&p, status::READY).reason, "NotOwned");
            assert!(p.notices.iter().any(|n| n.reason == "TakeoverRefused"));
            assert!(p.refused.iter().any(|r| r.name == "gw-passthrough"));
        } else {
            assert!(p.refused.is_empty(), "shared renders no second Gateway");
        }
    }
}

/// A listener the data plane reports Conflicted (as Cilium 1.19.6 writes it) makes the
/// TenantGateway Ready=False, reason ListenersConflicted, naming the listeners and the fix;
/// a stale report (older than the Gateway's spec) is not read.
#[test]
fn conflicted_listeners_make_ready_false_with_the_fix() {
    let mut w = world();
    w.tgw.spec = dns01_spec();
    let (mut w, _) = settle(w);
    make_ready(&mut w);
    let g = w.observed.gateways.iter_mut().next().expect("gateway");
    cilium_conflicted(g, &["https", "tls-api", "tls-vm-exportproxy"]);
    let p = plan(&w, &cfg());
    let ready = condition(&p, status::READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ListenersConflicted")
    );
    assert!(
        ready.message.contains(
            "Gateway gw: https (ProtocolConflict), tls-api (ProtocolConflict), \
             tls-vm-exportproxy (ProtocolConflict)"
        ),
        "{}",
        ready.message
    );
    assert!(
        ready.message.contains("--passthrough-gateway separate"),
        "{}",
        ready.message
    );
    assert!(
        ready.message.contains("controller.passthroughGateway"),
        "{}",
        ready.message
    );
    let l = p
        .status
        .listeners
        .iter()
        .find(|l| l.name == "tls-api")
        .expect("listed");
    assert_eq!(l.reason, "NotAccepted");
    assert!(p.notices.iter().any(|n| n.reason == "ListenersConflicted"));
    // Deterministic: the same world in another order gives the same message.
    let again = plan(&shuffled(&w, &mut Rng::new(5)), &cfg());
    assert_eq!(condition(&again, status::READY).message, ready.message);

    // Stale: the Gateway's spec moved on since the report.
    let mut stale = w.clone();
    stale.observed.gateways[0].metadata.generation = Some(2);
    let p = plan(&stale, &cfg());
    assert_ne!(condition(&p, status::READY).reason, "ListenersConflicted");

    // The fix applied: the separate layout, programmed, is Ready.
    let (mut sep, _) = settle_with(w, &separate());
    make_ready(&mut sep);
    let (_, p) = settle_with(sep, &separate());
    assert_eq!(
        condition(&p, status::READY).status,
        "True",
        "{:?}",
        p.status
    );
}

/// The second Gateway's name is a label whatever the TenantGateway's name.
#[test]
fn second_gateway_name_is_a_label() {
    for name in ["gw", "a.b.c", &"long-name".repeat(20), &"x".repeat(52)] {
        let mut w = world();
        w.tgw.name = name.to_string();
        w.tgw.spec = dns01_spec();
        let d = plan(&w, &separate()).desired.expect("renders");
        let second = d.passthrough_gateway.expect("second Gateway");
        let n = second.metadata.name.as_deref().unwrap_or_default();
        assert!(crate::hostname::is_dns_label(n), "{name}: {n}");
        assert_eq!(n, names::passthrough_gateway(name));
        assert_ne!(Some(n), d.gateway.metadata.name.as_deref());
    }
}

/// Properties in the `separate` layout and across switches: shuffled inputs give the same
/// plan; the desired state fed back writes nothing; a switch either way settles with no
/// second Gateway or route entry of ours left behind in `shared`.
#[test]
fn property_separate_layout_converges_and_switches_cleanly() {
    let mut rng = Rng::new(31);
    for case in 0..40 {
        let mut w = random_world(&mut rng);
        if rng.below(2) == 0 {
            let mut r = testing::tls_route("tenant-alice", "pt", &["api.alice.example.org"]);
            r.parent_refs[0].name = names::passthrough_gateway(&w.tgw.name);
            w.routes.push(r);
        }
        let opts = separate();
        let want = plan(&w, &opts);
        assert_eq!(plan(&shuffled(&w, &mut rng), &opts), want, "case {case}");
        let (sep, _) = settle_with(w, &opts);
        let mut next = sep.clone();
        next.now = at(99_999);
        assert!(plan(&next, &opts).writes.is_empty(), "case {case}");
        let second = names::passthrough_gateway(&sep.tgw.name);
        let (back, _) = settle(sep);
        assert!(gateway_named(&back, &second).is_none(), "case {case}");
        for r in &back.routes {
            assert!(
                status::entries_for(&r.our_status, &r.namespace, ("tenant-alice", &second))
                    .is_empty(),
                "case {case}: {}",
                r.name()
            );
        }
        let (again, _) = settle_with(back, &opts);
        let separate_mode = !matches!(again.tgw.spec.cert_mode, CertMode::Http01)
            && !again.tgw.spec.tls_passthrough_services.is_empty();
        assert_eq!(
            gateway_named(&again, &second).is_some(),
            separate_mode,
            "case {case}"
        );
    }
}
