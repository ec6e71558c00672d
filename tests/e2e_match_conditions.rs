//! The registration's matchConditions (`admission::registration::match_conditions`) through a
//! real kube-apiserver: a matchCondition that is false makes the API server admit the request
//! without calling the webhook, so each one must be false only for requests the webhook
//! admits anyway (the webhook fails closed; a condition that skipped a request a layer must
//! judge would open it).
//!
//! Every request of the table is sent twice: once with the registration's matchConditions
//! removed, so every request reaches the webhook, and once with the registration as
//! `tenant-gateway webhook-configuration` prints it. The decisions (allowed, and the denial
//! as kubectl shows it) must be the same; the requests the API server spared the webhook in
//! the second run must be exactly the ones the table says, and each of those was allowed by
//! the webhook in the first run. The webhook's request counter tells which requests reached
//! it (the requests are sent one at a time).

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::control_plane::*;
use support::poll::poll;
use support::process::*;

/// One request of the table.
struct Case {
    name: &'static str,
    /// kubectl arguments (impersonation included).
    args: Vec<String>,
    stdin: Option<String>,
    /// The registration's matchConditions spare the webhook this request.
    spared: bool,
}

/// What one run of a case gave.
#[derive(Debug)]
struct Seen {
    outcome: Outcome,
    /// The webhook counted a review for it.
    called: bool,
}

const ALICE: &[&str] = &["--as", "alice", "--as-group", E2E_GROUP];
const FLUX: &[&str] = &[
    "--as",
    "flux",
    "--as-group",
    E2E_GROUP,
    "--as-group",
    "system:serviceaccounts:cozy-fluxcd",
];
const SERVER_ALIAS: &str = "nginx.ingress.kubernetes.io/server-alias";

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `kubectl create --dry-run=server` of `obj` (no last-applied annotation, unlike `apply`).
fn create(who: &[&str], obj: &Value) -> (Vec<String>, Option<String>) {
    let mut a = strings(&["create", "--dry-run=server", "-f", "-"]);
    a.extend(strings(who));
    (a, Some(obj.to_string()))
}

/// `kubectl patch --type=merge --dry-run=server` of `kind/name` (in `ns` when given), through
/// `subresource` when given.
fn patch(
    who: &[&str],
    kind: &str,
    ns: Option<&str>,
    name: &str,
    subresource: Option<&str>,
    body: &Value,
) -> (Vec<String>, Option<String>) {
    let mut a = strings(&["patch", kind, name, "--type=merge", "--dry-run=server"]);
    if let Some(ns) = ns {
        a.extend(strings(&["-n", ns]));
    }
    if let Some(sub) = subresource {
        a.push(format!("--subresource={sub}"));
    }
    a.push("-p".to_string());
    a.push(body.to_string());
    a.extend(strings(who));
    (a, None)
}

fn case(name: &'static str, spared: bool, (args, stdin): (Vec<String>, Option<String>)) -> Case {
    Case {
        name,
        args,
        stdin,
        spared,
    }
}

fn tenant(name: &str, spec: Option<Value>) -> Value {
    let mut t = json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Tenant",
        "metadata": {"name": name, "namespace": "tenant-alice"}});
    if let Some(spec) = spec {
        t["spec"] = spec;
    }
    t
}

fn package(name: &str, spec: Option<Value>) -> Value {
    let mut p = json!({"apiVersion": "cozystack.io/v1alpha1", "kind": "Package",
        "metadata": {"name": name}});
    if let Some(spec) = spec {
        p["spec"] = spec;
    }
    p
}

fn attached(list: Value) -> Option<Value> {
    Some(json!({"components": {"platform": {"values": {"gateway": {"attachedNamespaces": list}}}}}))
}

fn ingress(ns: &str, name: &str, host: &str, annotations: Value) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
}

fn route(ns: &str, name: &str, host: &str) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [{"name": "gw", "namespace": "tenant-root"}], "hostnames": [host]}})
}

/// Objects the cases update, written by the admin before any webhook is registered: some
/// of them break rules the webhook enforces (as objects from before its installation do).
fn seed(cp: &ControlPlane) {
    for obj in [
        tenant("dave", Some(json!({"host": "dave.alice.example.org"}))),
        // Open schema: a host that is not a string reaches admission.
        tenant("odd", Some(json!({"host": 5}))),
        ingress(
            "tenant-alice",
            "legacy",
            "shop.bob.example.org",
            json!({SERVER_ALIAS: "www.bob.example.org"}),
        ),
        ingress("tenant-alice", "web", "www.alice.example.org", json!({})),
    ] {
        cp.apply_json(&obj);
    }
}

fn cases(cp: &ControlPlane) -> Vec<Case> {
    let mut finalize_same: Value = serde_json::from_str(
        &cp.kubectl_ok(&["get", "ns", "tenant-bob", "-o", "json"], None)
            .stdout,
    )
    .expect("namespace json");
    let mut finalize_relabel = finalize_same.clone();
    finalize_relabel["metadata"]["labels"]["namespace.cozystack.io/host"] = json!("example.org");
    finalize_same["spec"]["finalizers"] = json!([]);
    let finalize = |body: &Value| {
        let mut a = strings(&[
            "replace",
            "--raw",
            "/api/v1/namespaces/tenant-bob/finalize?dryRun=All",
            "-f",
            "-",
        ]);
        a.extend(strings(ALICE));
        (a, Some(body.to_string()))
    };
    let ns_patch =
        |sub: Option<&str>, body: Value| patch(ALICE, "ns", None, "tenant-alice", sub, &body);
    let ten_patch = |who: &[&str], name: &str, sub: Option<&str>, body: Value| {
        patch(who, "tenant", Some("tenant-alice"), name, sub, &body)
    };
    let ing_patch = |name: &str, sub: Option<&str>, body: Value| {
        patch(ALICE, "ingress", Some("tenant-alice"), name, sub, &body)
    };
    let guarded_host = "namespace.cozystack.io/host";
    vec![
        // --- namespaces: labels-or-annotations-changed ---
        case(
            "namespace create without guarded labels",
            false,
            create(
                ALICE,
                &json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "tenant-alice-new", "labels": {"team": "a"}}}),
            ),
        ),
        case(
            "namespace create with the host label",
            false,
            create(
                ALICE,
                &json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "tenant-alice-new", "labels": {guarded_host: "x.example.org"}}}),
            ),
        ),
        case(
            "namespace update of its finalizers only",
            true,
            ns_patch(
                None,
                json!({"metadata": {"finalizers": ["example.com/keep"]}}),
            ),
        ),
        case(
            "namespace update of an unguarded label",
            false,
            ns_patch(None, json!({"metadata": {"labels": {"team": "blue"}}})),
        ),
        case(
            "namespace update of the host label",
            false,
            ns_patch(
                None,
                json!({"metadata": {"labels": {guarded_host: "example.org"}}}),
            ),
        ),
        case(
            "namespace update removing the gateway label",
            false,
            ns_patch(
                None,
                json!({"metadata": {"labels": {"namespace.cozystack.io/gateway": null}}}),
            ),
        ),
        case(
            "namespace update forging the attached-by annotation",
            false,
            ns_patch(
                None,
                json!({"metadata": {"annotations": {"gateway.cozystack.io/attached-by": "tenant-root"}}}),
            ),
        ),
        case(
            "namespaces/status writing a condition only",
            true,
            ns_patch(
                Some("status"),
                json!({"status": {"conditions": [{"type": "Example", "status": "True"}]}}),
            ),
        ),
        case(
            "namespaces/status rewriting the host label",
            false,
            ns_patch(
                Some("status"),
                json!({"metadata": {"labels": {guarded_host: "example.org"}}}),
            ),
        ),
        case(
            "namespaces/finalize emptying the finalizers",
            true,
            finalize(&finalize_same),
        ),
        case(
            "namespaces/finalize rewriting the host label",
            false,
            finalize(&finalize_relabel),
        ),
        // --- tenants: host-set-or-changed ---
        case(
            "tenant create without spec",
            true,
            create(ALICE, &tenant("t1", None)),
        ),
        case(
            "tenant create without host",
            true,
            create(ALICE, &tenant("t2", Some(json!({"gateway": true})))),
        ),
        case(
            "tenant create with an empty host",
            true,
            create(ALICE, &tenant("t3", Some(json!({"host": ""})))),
        ),
        case(
            "tenant create with a null host",
            true,
            create(ALICE, &tenant("t4", Some(json!({"host": null})))),
        ),
        case(
            "tenant create with a host",
            false,
            create(
                ALICE,
                &tenant("t5", Some(json!({"host": "t5.alice.example.org"}))),
            ),
        ),
        case(
            "tenant create with a host by a trusted group",
            false,
            create(
                FLUX,
                &tenant("t6", Some(json!({"host": "t6.alice.example.org"}))),
            ),
        ),
        case(
            "tenant create with a number as host",
            false,
            create(ALICE, &tenant("t7", Some(json!({"host": 7})))),
        ),
        case(
            "tenant create with an object as host",
            false,
            create(ALICE, &tenant("t8", Some(json!({"host": {"name": "x"}})))),
        ),
        case(
            "tenant update keeping the host",
            true,
            ten_patch(
                ALICE,
                "dave",
                None,
                json!({"metadata": {"labels": {"team": "a"}}, "spec": {"gateway": true}}),
            ),
        ),
        case(
            "tenant update changing the host",
            false,
            ten_patch(
                ALICE,
                "dave",
                None,
                json!({"spec": {"host": "evil.example.org"}}),
            ),
        ),
        case(
            "tenant update clearing the host",
            false,
            ten_patch(ALICE, "dave", None, json!({"spec": {"host": null}})),
        ),
        case(
            "tenant update changing the host by a trusted group",
            false,
            ten_patch(
                FLUX,
                "dave",
                None,
                json!({"spec": {"host": "dave2.alice.example.org"}}),
            ),
        ),
        case(
            "tenant update keeping a host that is not a string",
            false,
            ten_patch(
                ALICE,
                "odd",
                None,
                json!({"metadata": {"labels": {"team": "a"}}}),
            ),
        ),
        case(
            "tenants/status write",
            true,
            ten_patch(
                ALICE,
                "dave",
                Some("status"),
                json!({"status": {"phase": "Ready"}}),
            ),
        ),
        // --- packages: attached-namespaces-present ---
        case(
            "package without spec",
            true,
            create(ALICE, &package("p1", None)),
        ),
        case(
            "package without components",
            true,
            create(ALICE, &package("p2", Some(json!({"x": 1})))),
        ),
        case(
            "package gateway values without the list",
            true,
            create(
                ALICE,
                &package(
                    "p3",
                    Some(
                        json!({"components": {"platform": {"values": {"gateway": {"enabled": true}}}}}),
                    ),
                ),
            ),
        ),
        case(
            "package with a null list",
            true,
            create(ALICE, &package("p4", attached(Value::Null))),
        ),
        case(
            "package whose values are a string",
            true,
            create(
                ALICE,
                &package(
                    "p5",
                    Some(json!({"components": {"platform": {"values": "gateway: {}"}}})),
                ),
            ),
        ),
        case(
            "package whose components are a list",
            true,
            create(
                ALICE,
                &package("p6", Some(json!({"components": [{"platform": {}}]}))),
            ),
        ),
        case(
            "package attaching a platform namespace",
            false,
            create(ALICE, &package("p7", attached(json!(["cozy-monitoring"])))),
        ),
        case(
            "package attaching a tenant namespace",
            false,
            create(ALICE, &package("p8", attached(json!(["tenant-bob"])))),
        ),
        case(
            "package whose list is a string",
            false,
            create(ALICE, &package("p9", attached(json!("cozy-monitoring")))),
        ),
        case(
            "package with an empty list",
            false,
            create(ALICE, &package("p10", attached(json!([])))),
        ),
        // --- ingresses: tenant-scope and main-resource-or-read-field-changed ---
        case(
            "ingresses/status write of the load balancer",
            true,
            ing_patch(
                "legacy",
                Some("status"),
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}}),
            ),
        ),
        case(
            "ingresses/status write of an annotation the layer does not read",
            false,
            ing_patch(
                "legacy",
                Some("status"),
                json!({"metadata": {"annotations": {"team": "a"}}}),
            ),
        ),
        case(
            "ingresses/status write of a foreign server-alias",
            false,
            ing_patch(
                "web",
                Some("status"),
                json!({"metadata": {"annotations": {SERVER_ALIAS: "dashboard.example.org"}}}),
            ),
        ),
        case(
            "ingress update of a label",
            false,
            ing_patch("web", None, json!({"metadata": {"labels": {"team": "a"}}})),
        ),
        case(
            "ingress update of a label on an object outside the apex",
            false,
            ing_patch(
                "legacy",
                None,
                json!({"metadata": {"labels": {"team": "a"}}}),
            ),
        ),
        case(
            "ingress create outside tenant scope",
            true,
            create(
                ALICE,
                &ingress("default", "any", "shop.bob.example.org", json!({})),
            ),
        ),
        // --- routes: tenant-scope only ---
        case(
            "route create outside tenant scope",
            true,
            create(ALICE, &route("default", "any", "shop.bob.example.org")),
        ),
        case(
            "route create in tenant scope",
            false,
            create(
                ALICE,
                &route("tenant-alice", "web", "shop.alice.example.org"),
            ),
        ),
        case(
            "route create in tenant scope outside the apex",
            false,
            create(ALICE, &route("tenant-alice", "web", "shop.bob.example.org")),
        ),
    ]
}

/// The registration with or without its matchConditions.
fn registration(hook: &Webhook, conditions: bool) -> String {
    let mut v: Value = serde_json::from_str(&hook.configuration()).expect("configuration json");
    if !conditions {
        for h in v["webhooks"].as_array_mut().expect("webhooks") {
            h.as_object_mut()
                .expect("webhook")
                .remove("matchConditions");
        }
    }
    v.to_string()
}

fn reviews(hook: &Webhook) -> f64 {
    metric_sum(
        &hook.metrics_addr(),
        "tenant_gateway_admission_requests_total",
    )
    .expect("the webhook's metrics")
}

fn run(cp: &ControlPlane, hook: &Webhook, c: &Case) -> Seen {
    let before = reviews(hook);
    let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
    let outcome = cp.kubectl(&args, c.stdin.as_deref());
    Seen {
        called: reviews(hook) > before,
        outcome,
    }
}

/// The denial as the user sees it, without kubectl's prefix (which names the object the same
/// way in both runs anyway).
fn denial(o: &Outcome) -> &str {
    o.stderr.trim()
}

#[test]
fn match_conditions_spare_only_requests_the_webhook_allows() {
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    cp.install_crds();
    cp.grant_impersonated_users();
    cp.create_tenant_namespaces();
    seed(&cp);
    let cases = cases(&cp);
    let hook = Webhook::start(&cp);

    // Every request reaches the webhook.
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&registration(&hook, false)));
    let probe = route("tenant-alice", "probe", "probe.bob.example.org").to_string();
    poll(Duration::from_secs(60), "the webhook to be called", || {
        let o = cp.dry_run("alice", &[E2E_GROUP], &probe);
        o.stderr.contains("denied the request").then_some(())
    });
    let without: Vec<Seen> = cases.iter().map(|c| run(&cp, &hook, c)).collect();

    // The same with the registration's matchConditions: wait until a request they spare
    // no longer reaches the webhook.
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&registration(&hook, true)));
    let spared_probe = cases
        .iter()
        .find(|c| c.name == "namespace update of its finalizers only")
        .expect("probe case");
    poll(
        Duration::from_secs(60),
        "the matchConditions to take effect",
        || (!run(&cp, &hook, spared_probe).called).then_some(()),
    );
    let with: Vec<Seen> = cases.iter().map(|c| run(&cp, &hook, c)).collect();

    let mut failures = Vec::new();
    for ((c, a), b) in cases.iter().zip(&without).zip(&with) {
        if !a.called {
            failures.push(format!(
                "{}: did not reach the webhook without matchConditions: {:?}",
                c.name, a.outcome
            ));
        }
        if a.outcome.allowed != b.outcome.allowed || denial(&a.outcome) != denial(&b.outcome) {
            failures.push(format!(
                "{}: decided differently: without matchConditions {:?}, with them {:?}",
                c.name, a.outcome, b.outcome
            ));
        }
        if b.called == c.spared {
            failures.push(format!(
                "{}: expected the webhook to be {} with matchConditions, it was {}",
                c.name,
                if c.spared { "spared" } else { "called" },
                if b.called { "called" } else { "spared" },
            ));
        }
        if !b.called && !a.outcome.allowed {
            failures.push(format!(
                "{}: spared, but the webhook denies it: {}",
                c.name,
                denial(&a.outcome)
            ));
        }
    }
    // Not vacuous: both kinds of request are in the table and decided as they should be.
    let denied = without.iter().filter(|s| !s.outcome.allowed).count();
    let spared = with.iter().filter(|s| !s.called).count();
    assert!(
        denied >= 10 && spared >= 10,
        "denied {denied}, spared {spared}"
    );
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
