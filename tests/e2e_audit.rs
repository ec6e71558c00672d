//! Tier 3 for the audit of stored objects (SPEC §3.9, issue 24): a real kube-apiserver from
//! the tests/k8s harness and no webhook registered, so violating objects are stored as they
//! were before tenant-gateway was installed. `tenant-gateway audit --kubeconfig` must find
//! exactly the violators (exit 1; 2 once an object cannot be judged; 0 once all are fixed);
//! `serve --policy-reports` must show the same in its metrics and in one PolicyReport per
//! namespace (the PolicyReport CRD of `tenant-gateway crd --policy-report` installed; exactly
//! the violators fail, every other judged object passes), send a Warning event to a
//! violator, follow an apex relabel and its fix within seconds (metrics and reports), and
//! write nothing while nothing changes, nor after a restart.
//!
//! Set TENANT_GATEWAY_SKIP_E2E=1 to skip (said loudly).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::control_plane::*;
use support::poll::{poll, try_poll};
use support::process::*;

/// "Within seconds": how long serve may take to follow a change.
const FOLLOW: Duration = Duration::from_secs(10);
/// How long the first listing of everything may take.
const WAIT: Duration = Duration::from_secs(60);
/// How long "at rest" is watched for writes.
const REST: Duration = Duration::from_secs(8);

fn audit(cp: &ControlPlane) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args([
            "audit",
            "-o",
            "json",
            "--root-host",
            "example.org",
            "--kubeconfig",
        ])
        .arg(cp.kubeconfig())
        .output()
        .expect("tenant-gateway audit runs")
}

/// `(kind, namespace/name)` of every non-passing result, and the parsed report.
fn violators(out: &Output) -> (BTreeSet<(String, String)>, Value) {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "audit prints JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let set = v["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            let ns = r["namespace"].as_str().unwrap_or("");
            let name = r["name"].as_str().unwrap_or("");
            let object = if ns.is_empty() {
                name.to_string()
            } else {
                format!("{ns}/{name}")
            };
            (r["kind"].as_str().unwrap_or("").to_string(), object)
        })
        .collect();
    (set, v)
}

fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(k, o)| (k.to_string(), o.to_string()))
        .collect()
}

/// The value of `tenant_gateway_audit_violations` for (layer, kind), whatever the label order.
fn violations(hook: &Webhook, layer: &str, kind: &str) -> Option<f64> {
    let text = hook.metrics_text()?;
    let (l, k) = (format!("layer=\"{layer}\""), format!("kind=\"{kind}\""));
    text.lines()
        .filter(|line| line.starts_with("tenant_gateway_audit_violations{"))
        .find(|line| line.contains(&l) && line.contains(&k))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

fn wait_violations(hook: &Webhook, layer: &str, kind: &str, want: f64, within: Duration) {
    poll(
        within,
        &format!("tenant_gateway_audit_violations{{layer={layer},kind={kind}}} = {want}"),
        || (violations(hook, layer, kind) == Some(want)).then_some(()),
    );
}

/// PolicyViolation events from the audit: `(kind, namespace/name, uid, series count)`.
fn audit_events(cp: &ControlPlane) -> Vec<(String, String, String, i64)> {
    let o = cp.kubectl_ok(&["get", "events.events.k8s.io", "-A", "-o", "json"], None);
    let v: Value = serde_json::from_str(&o.stdout).expect("events as JSON");
    v["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|e| e["reason"] == "PolicyViolation" && e["type"] == "Warning")
        .map(|e| {
            let r = &e["regarding"];
            let ns = r["namespace"].as_str().unwrap_or("");
            let name = r["name"].as_str().unwrap_or("");
            (
                r["kind"].as_str().unwrap_or("").to_string(),
                if ns.is_empty() {
                    name.to_string()
                } else {
                    format!("{ns}/{name}")
                },
                r["uid"].as_str().unwrap_or("").to_string(),
                e["series"]["count"].as_i64().unwrap_or(1),
            )
        })
        .collect()
}

/// The PolicyReport CRD as `tenant-gateway crd --policy-report` prints it (the chart's
/// optional template is the same text, tests/charts.rs).
fn install_policy_report_crd(cp: &ControlPlane) {
    let crd = Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args(["crd", "--policy-report"])
        .output()
        .expect("tenant-gateway crd runs");
    assert!(
        crd.status.success(),
        "tenant-gateway crd --policy-report failed"
    );
    cp.kubectl_ok(
        &["apply", "--server-side", "-f", "-"],
        Some(&String::from_utf8_lossy(&crd.stdout)),
    );
    cp.kubectl_ok(
        &[
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            "crd/policyreports.wgpolicyk8s.io",
        ],
        None,
    );
}

/// One result of a report: (kind, name, result), as the report names its object.
type Line = (String, String, String);

/// Our PolicyReports (named tenant-gateway): namespace → (resourceVersion, its results
/// sorted, the summary's (pass, fail, error)).
type Reports = BTreeMap<String, (String, Vec<Line>, (i64, i64, i64))>;

fn reports(cp: &ControlPlane) -> Reports {
    lines_of(raw_reports(cp))
}

/// Stored reports (`raw_reports`) as their results' lines.
fn lines_of(raw: BTreeMap<String, Value>) -> Reports {
    raw.into_iter()
        .map(|(ns, r)| {
            let text = |v: &Value| v.as_str().unwrap_or("").to_string();
            let mut lines: Vec<Line> = r["results"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|x| {
                    let o = &x["resources"][0];
                    (text(&o["kind"]), text(&o["name"]), text(&x["result"]))
                })
                .collect();
            lines.sort();
            let s = &r["summary"];
            let n = |k: &str| s[k].as_i64().unwrap_or(0);
            (
                ns,
                (
                    text(&r["metadata"]["resourceVersion"]),
                    lines,
                    (n("pass"), n("fail"), n("error")),
                ),
            )
        })
        .collect()
}

/// What the reconciler renders for tenant-alice's TenantGateway while serve runs: judged
/// like everything else, but made and changed by the reconciler, not by this test.
const RECONCILED: [(&str, &str); 2] = [("Gateway", "gw"), ("HTTPRoute", "gw-http-redirect")];

fn reconciled(l: &Line) -> bool {
    RECONCILED.contains(&(l.0.as_str(), l.1.as_str()))
}

/// The reports' results without their resourceVersions, and without the reconciler's
/// objects.
fn contents(r: &Reports) -> BTreeMap<String, Vec<Line>> {
    r.iter()
        .map(|(ns, (_, l, _))| {
            let mine = l.iter().filter(|l| !reconciled(l)).cloned().collect();
            (ns.clone(), mine)
        })
        .collect()
}

/// Every report of ours as stored, by namespace: what a failure shows of a report that
/// changed.
fn raw_reports(cp: &ControlPlane) -> BTreeMap<String, Value> {
    let o = cp.kubectl_ok(
        &["get", "policyreports.wgpolicyk8s.io", "-A", "-o", "json"],
        None,
    );
    let v: Value = serde_json::from_str(&o.stdout).expect("reports as JSON");
    v["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|r| r["metadata"]["name"] == "tenant-gateway")
        .map(|r| {
            let ns = r["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            (ns, r.clone())
        })
        .collect()
}

/// The reports in `now` that differ from `before`, each with what it was, for a failure
/// message.
fn changed_reports(before: &BTreeMap<String, Value>, now: &BTreeMap<String, Value>) -> String {
    let mut out = String::new();
    for (ns, r) in now {
        let was = before.get(ns);
        if was.map(|w| &w["metadata"]["resourceVersion"]) != Some(&r["metadata"]["resourceVersion"])
        {
            out.push_str(&format!(
                "namespace {ns}\nbefore: {}\nnow: {:#}\n",
                was.map_or("none".to_string(), |w| format!("{:#}", w["results"])),
                r["results"],
            ));
        }
    }
    out
}

fn versions(r: &Reports) -> BTreeMap<String, String> {
    r.iter()
        .map(|(ns, (v, ..))| (ns.clone(), v.clone()))
        .collect()
}

/// A report's expected results: `(kind, name, result)`.
type Want = &'static [(&'static str, &'static str, &'static str)];

/// `namespace → [(kind, name, result)]`, as `reports` gives them.
fn expect(items: &[(&str, Want)]) -> BTreeMap<String, Vec<Line>> {
    items
        .iter()
        .map(|(ns, lines)| {
            let mut l: Vec<Line> = lines
                .iter()
                .map(|(k, n, r)| (k.to_string(), n.to_string(), r.to_string()))
                .collect();
            l.sort();
            (ns.to_string(), l)
        })
        .collect()
}

/// Wait until the reports hold `want` (results only), within `within`.
fn wait_reports(
    cp: &ControlPlane,
    want: &BTreeMap<String, Vec<Line>>,
    within: Duration,
    what: &str,
) -> Reports {
    let mut last = Reports::new();
    try_poll(within, Duration::from_millis(200), || {
        last = reports(cp);
        (contents(&last) == *want).then(|| last.clone())
    })
    .unwrap_or_else(|| panic!("{what}: want {want:#?}\ngot {:#?}", contents(&last)))
}

fn relabel(cp: &ControlPlane, ns: &str, host: &str) {
    cp.kubectl_ok(
        &[
            "label",
            "namespace",
            ns,
            "--overwrite",
            &format!("namespace.cozystack.io/host={host}"),
        ],
        None,
    );
}

fn route(kind: &str, ns: &str, name: &str, hostnames: Value) -> Value {
    let version = if kind == "TLSRoute" { "v1alpha2" } else { "v1" };
    let rule = if kind == "TLSRoute" {
        json!({"backendRefs": [{"name": "api", "port": 443}]})
    } else {
        json!({"backendRefs": [{"name": "web", "port": 80}]})
    };
    json!({"apiVersion": format!("gateway.networking.k8s.io/{version}"), "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [{"name": "elsewhere"}], "hostnames": hostnames, "rules": [rule]}})
}

fn ingress(ns: &str, name: &str, host: &str, annotations: Value) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
}

fn gateway(kind: &str, ns: &str, name: &str, hostname: &str) -> Value {
    let listener = json!({"name": "https", "port": 443, "protocol": "HTTPS", "hostname": hostname,
        "tls": {"mode": "Terminate", "certificateRefs": [{"name": "cert"}]}});
    match kind {
        "Gateway" => json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"gatewayClassName": "cilium", "listeners": [listener]}}),
        _ => json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"parentRef": {"name": "manual"}, "listeners": [listener]}}),
    }
}

fn tenant_gateway(ns: &str, apex: &str) -> Value {
    json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
        "metadata": {"name": "gw", "namespace": ns}, "spec": {"apex": apex}})
}

fn package(name: &str, attached: Value) -> Value {
    json!({"apiVersion": "cozystack.io/v1alpha1", "kind": "Package", "metadata": {"name": name},
        "spec": {"components": {"platform": {"values": {"gateway": {"attachedNamespaces": attached}}}}}})
}

#[test]
fn audit_of_objects_stored_before_the_webhook() {
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    cp.install_crds();
    install_policy_report_crd(&cp);
    // examples/namespaces.yaml: tenant-nolabel has no apex, tenant-cust's (customer1.io) is
    // outside the root: the apex table's two findings.
    cp.create_tenant_namespaces();

    // Stored with no webhook registered, as the platform's earlier policies let them through.
    for o in [
        route(
            "HTTPRoute",
            "tenant-alice",
            "shop",
            json!(["shop.alice.example.org"]),
        ),
        route(
            "HTTPRoute",
            "tenant-alice",
            "hijack",
            json!(["shop.bob.example.org"]),
        ),
        ingress("tenant-alice", "web", "web.alice.example.org", json!({})),
        tenant_gateway("tenant-alice", "alice.example.org"),
        gateway("Gateway", "tenant-bob", "manual", "*.example.org"),
        gateway(
            "ListenerSet",
            "tenant-bob",
            "extra",
            "extra.bob.example.org",
        ),
        route("GRPCRoute", "tenant-bob", "catchall", json!([])),
        route(
            "TLSRoute",
            "tenant-bob",
            "api",
            json!(["api.bob.example.org"]),
        ),
        ingress(
            "tenant-bob",
            "snippet",
            "shop.bob.example.org",
            json!({"nginx.ingress.kubernetes.io/server-snippet": "server_name evil.example.org;"}),
        ),
        tenant_gateway("tenant-bob", "alice.example.org"),
        package(
            "cozystack.cozystack-platform",
            json!(["cozy-dashboard", "tenant-root"]),
        ),
        // Platform namespaces are not judged by these layers.
        route(
            "HTTPRoute",
            "cozy-dashboard",
            "grafana",
            json!(["grafana.bob.example.org"]),
        ),
    ] {
        cp.apply_json(&o);
    }
    let violating = set(&[
        ("HTTPRoute", "tenant-alice/hijack"),
        ("Gateway", "tenant-bob/manual"),
        ("GRPCRoute", "tenant-bob/catchall"),
        ("Ingress", "tenant-bob/snippet"),
        ("TenantGateway", "tenant-bob/gw"),
        ("Package", "cozystack.cozystack-platform"),
        ("Namespace", "tenant-nolabel"),
        ("Namespace", "tenant-cust"),
    ]);

    // The command: exactly the violators, exit 1.
    let out = audit(&cp);
    let (found, report) = violators(&out);
    assert_eq!(found, violating, "{report:#}");
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    assert_eq!(
        report["notAudited"],
        json!([]),
        "every guarded kind is served here"
    );
    let hijack = cp
        .get_json("httproute", "tenant-alice", "hijack")
        .expect("stored");
    let hijack_uid = hijack["metadata"]["uid"].as_str().expect("uid").to_string();
    let result = report["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["name"] == "hijack")
        .expect("hijack reported")
        .clone();
    assert_eq!(result["uid"], hijack_uid.as_str());
    assert_eq!(result["apiVersion"], "gateway.networking.k8s.io/v1");
    assert!(
        result["messages"][0]
            .as_str()
            .unwrap_or("")
            .contains("hostnames must equal the namespace's namespace.cozystack.io/host label or be subdomains of it (alice.example.org)"),
        "{result:#}"
    );

    // An object its layer cannot judge (the Package CRD keeps any shape): an error, exit 2,
    // and the others still reported.
    cp.apply_json(&package("broken", json!("tenant-root")));
    let out = audit(&cp);
    let (found, report) = violators(&out);
    assert_eq!(out.status.code(), Some(2), "{report:#}");
    let mut with_broken = violating.clone();
    with_broken.insert(("Package".into(), "broken".into()));
    assert_eq!(found, with_broken);
    cp.kubectl_ok(&["delete", "package", "broken"], None);

    // serve: the same findings in its metrics and reports, a Warning event on a violator.
    let serve_args = [
        "--no-replicator",
        "--leader-election-namespace",
        "default",
        "--policy-reports",
    ];
    let hook = Webhook::start_with(&cp, "audit", &serve_args);
    for (layer, kind, n) in [
        ("route", "HTTPRoute", 1.0),
        ("route", "GRPCRoute", 1.0),
        ("route", "TLSRoute", 0.0),
        ("gateway", "Gateway", 1.0),
        ("gateway", "ListenerSet", 0.0),
        ("ingress", "Ingress", 1.0),
        ("tenantgateway", "TenantGateway", 1.0),
        ("package", "Package", 1.0),
        ("namespace", "Namespace", 2.0),
    ] {
        wait_violations(&hook, layer, kind, n, WAIT);
    }
    let event = poll(
        WAIT,
        "a PolicyViolation event on the hijacking route",
        || {
            audit_events(&cp)
                .into_iter()
                .find(|e| e.0 == "HTTPRoute" && e.1 == "tenant-alice/hijack")
        },
    );
    assert_eq!(event.2, hijack_uid, "the event names the object by uid");
    assert!(
        !audit_events(&cp).iter().any(|e| e.1 == "tenant-alice/shop"),
        "no event for a passing route"
    );

    // The reports: one per namespace with results, each judged object once, exactly the
    // violators failing. The Package (cluster-scoped) has no report; cozy-dashboard is
    // outside tenant scope (no result); tenant-root's apex is the root itself.
    let alice_ok: Want = &[
        ("HTTPRoute", "hijack", "fail"),
        ("HTTPRoute", "shop", "pass"),
        ("Ingress", "web", "pass"),
        ("Namespace", "tenant-alice", "pass"),
        ("TenantGateway", "gw", "pass"),
    ];
    let bob_as_stored: Want = &[
        ("GRPCRoute", "catchall", "fail"),
        ("Gateway", "manual", "fail"),
        ("Ingress", "snippet", "fail"),
        ("ListenerSet", "extra", "pass"),
        ("Namespace", "tenant-bob", "pass"),
        ("TLSRoute", "api", "pass"),
        ("TenantGateway", "gw", "fail"),
    ];
    let others: [(&str, Want); 3] = [
        ("tenant-cust", &[("Namespace", "tenant-cust", "fail")]),
        ("tenant-nolabel", &[("Namespace", "tenant-nolabel", "fail")]),
        ("tenant-root", &[("Namespace", "tenant-root", "pass")]),
    ];
    let with = |alice: Want| {
        let mut items = vec![("tenant-alice", alice), ("tenant-bob", bob_as_stored)];
        items.extend(others);
        expect(&items)
    };
    let first = wait_reports(&cp, &with(alice_ok), WAIT, "the first reports");
    assert_eq!(first["tenant-bob"].2, (3, 4, 0), "the summary counts");
    // The reconciler's own output passes its own audit. It is written beside the stored
    // objects, so it may reach the report after the lines waited for above.
    let mut made: Vec<Line> = Vec::new();
    let audited = try_poll(WAIT, Duration::from_millis(200), || {
        made = reports(&cp)
            .get("tenant-alice")
            .map(|(_, lines, _)| lines.iter().filter(|l| reconciled(l)).cloned().collect())
            .unwrap_or_default();
        (made.len() == RECONCILED.len()).then_some(())
    });
    assert!(
        audited.is_some() && made.iter().all(|l| l.2 == "pass"),
        "{made:?}"
    );
    let alice = cp
        .get_json(
            "policyreports.wgpolicyk8s.io",
            "tenant-alice",
            "tenant-gateway",
        )
        .expect("tenant-alice's report");
    assert_eq!(
        alice["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "tenant-gateway"
    );
    let line = |name: &str| {
        alice["results"]
            .as_array()
            .expect("results")
            .iter()
            .find(|r| r["resources"][0]["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {alice:#}"))
            .clone()
    };
    let hijacked = line("hijack");
    assert_eq!(
        (
            &hijacked["source"],
            &hijacked["policy"],
            &hijacked["rule"],
            &hijacked["properties"]["layer"]
        ),
        (
            &json!("tenant-gateway"),
            &json!("tenant-gateway-route-hostnames"),
            &json!("route-hostnames-within-apex"),
            &json!("7")
        ),
        "{hijacked:#}"
    );
    assert_eq!(
        hijacked["resources"][0],
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "namespace": "tenant-alice", "name": "hijack", "uid": hijack_uid}),
    );
    assert!(
        hijacked["message"]
            .as_str()
            .unwrap_or("")
            .contains("hostnames must equal the namespace's namespace.cozystack.io/host label or be subdomains of it (alice.example.org)"),
        "admission's message: {hijacked:#}"
    );
    let own = line("tenant-alice");
    assert_eq!(
        own["resources"][0],
        json!({"apiVersion": "v1", "kind": "Namespace", "name": "tenant-alice"}),
        "a Namespace is cluster-scoped"
    );

    // An apex relabel turns tenant-alice's stored objects wrong: followed within seconds.
    let relabelled = Instant::now();
    relabel(&cp, "tenant-alice", "alice2.example.org");
    let alice_relabelled: Want = &[
        ("HTTPRoute", "hijack", "fail"),
        ("HTTPRoute", "shop", "fail"),
        ("Ingress", "web", "fail"),
        ("Namespace", "tenant-alice", "pass"),
        ("TenantGateway", "gw", "fail"),
    ];
    let r = wait_reports(
        &cp,
        &with(alice_relabelled),
        FOLLOW,
        "tenant-alice's report after the relabel",
    );
    eprintln!("apex relabel in the report in {:?}", relabelled.elapsed());
    let untouched = |r: &Reports| {
        versions(r)
            .into_iter()
            .filter(|(ns, _)| ns != "tenant-alice")
    };
    assert!(
        untouched(&r).eq(untouched(&first)),
        "only tenant-alice's report was written"
    );
    wait_violations(&hook, "ingress", "Ingress", 2.0, FOLLOW);
    poll(
        FOLLOW,
        "tenant-alice's routes and TenantGateway re-judged",
        || {
            (violations(&hook, "route", "HTTPRoute")? >= 2.0
                && violations(&hook, "tenantgateway", "TenantGateway") == Some(2.0))
            .then_some(())
        },
    );
    eprintln!("apex relabel followed in {:?}", relabelled.elapsed());
    poll(
        WAIT,
        "an event for the route the relabel made wrong",
        || {
            audit_events(&cp)
                .into_iter()
                .find(|e| e.1 == "tenant-alice/shop")
        },
    );
    // And the fix.
    let fixed = Instant::now();
    relabel(&cp, "tenant-alice", "alice.example.org");
    wait_reports(
        &cp,
        &with(alice_ok),
        FOLLOW,
        "tenant-alice's report relabelled back",
    );
    wait_violations(&hook, "ingress", "Ingress", 1.0, FOLLOW);
    wait_violations(&hook, "route", "HTTPRoute", 1.0, FOLLOW);
    wait_violations(&hook, "tenantgateway", "TenantGateway", 1.0, FOLLOW);
    let route_fixed = Instant::now();
    cp.apply_json(&route(
        "HTTPRoute",
        "tenant-alice",
        "hijack",
        json!(["shop2.alice.example.org"]),
    ));
    let alice_fixed: Want = &[
        ("HTTPRoute", "hijack", "pass"),
        ("HTTPRoute", "shop", "pass"),
        ("Ingress", "web", "pass"),
        ("Namespace", "tenant-alice", "pass"),
        ("TenantGateway", "gw", "pass"),
    ];
    wait_reports(
        &cp,
        &with(alice_fixed),
        FOLLOW,
        "tenant-alice's report fixed",
    );
    eprintln!("route fix in the report in {:?}", route_fixed.elapsed());
    wait_violations(&hook, "route", "HTTPRoute", 0.0, FOLLOW);
    eprintln!("fix followed in {:?}", fixed.elapsed());

    // At rest: no event or report written, no result changed.
    let last_change = hook
        .metric("tenant_gateway_audit_last_change_timestamp_seconds")
        .expect("the audit's last change");
    let events = audit_events(&cp);
    let at_rest_raw = raw_reports(&cp);
    let at_rest = versions(&lines_of(at_rest_raw.clone()));
    let moved = try_poll(REST, Duration::from_millis(500), || {
        let now = audit_events(&cp);
        let change = hook.metric("tenant_gateway_audit_last_change_timestamp_seconds");
        let written = versions(&reports(&cp));
        (now != events || change != Some(last_change) || written != at_rest)
            .then_some((now, change, written))
    });
    assert_eq!(moved, None, "the audit wrote or changed something at rest");

    // A restart: the new process judges everything again, takes the Lease over once the old
    // one's runs out, plans every report, and writes none (their results did not change).
    drop(hook);
    let hook = Webhook::start_with(&cp, "audit-restarted", &serve_args);
    let writes = |verb: &str| {
        hook.metric(&format!(
            "tenant_gateway_policy_report_writes_total{{verb=\"{verb}\"}}"
        ))
    };
    poll(
        WAIT,
        "the restarted writer, leading, to have planned every report",
        || {
            (hook.metric("tenant_gateway_leader") == Some(1.0)
                && hook.metric("tenant_gateway_policy_report_synced") == Some(1.0)
                && hook.metric("tenant_gateway_policy_report_namespaces{state=\"pending\"}")
                    == Some(0.0))
            .then_some(())
        },
    );
    assert_eq!(
        (writes("apply"), writes("delete")),
        (Some(0.0), Some(0.0)),
        "{}\n{}",
        hook.log(),
        changed_reports(&at_rest_raw, &raw_reports(&cp))
    );
    assert_eq!(versions(&reports(&cp)), at_rest, "no report written");

    // Everything fixed: the command finds nothing (exit 0), serve shows no violation.
    for o in [
        gateway("Gateway", "tenant-bob", "manual", "manual.bob.example.org"),
        route(
            "GRPCRoute",
            "tenant-bob",
            "catchall",
            json!(["g.bob.example.org"]),
        ),
        ingress("tenant-bob", "snippet", "shop.bob.example.org", json!({})),
        tenant_gateway("tenant-bob", "bob.example.org"),
        package("cozystack.cozystack-platform", json!(["cozy-dashboard"])),
    ] {
        cp.apply_json(&o);
    }
    // Applied without the snippet: kubectl apply removes the annotation it had written.
    relabel(&cp, "tenant-nolabel", "nolabel.example.org");
    relabel(&cp, "tenant-cust", "cust.example.org");
    for (layer, kind) in [
        ("gateway", "Gateway"),
        ("route", "GRPCRoute"),
        ("ingress", "Ingress"),
        ("tenantgateway", "TenantGateway"),
        ("package", "Package"),
        ("namespace", "Namespace"),
    ] {
        wait_violations(&hook, layer, kind, 0.0, FOLLOW);
    }
    let out = audit(&cp);
    let (found, report) = violators(&out);
    assert!(found.is_empty(), "{report:#}");
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    let mut all_pass: Vec<(&str, Want)> = vec![
        ("tenant-alice", alice_fixed),
        (
            "tenant-bob",
            &[
                ("GRPCRoute", "catchall", "pass"),
                ("Gateway", "manual", "pass"),
                ("Ingress", "snippet", "pass"),
                ("ListenerSet", "extra", "pass"),
                ("Namespace", "tenant-bob", "pass"),
                ("TLSRoute", "api", "pass"),
                ("TenantGateway", "gw", "pass"),
            ],
        ),
        ("tenant-cust", &[("Namespace", "tenant-cust", "pass")]),
        ("tenant-nolabel", &[("Namespace", "tenant-nolabel", "pass")]),
    ];
    all_pass.push(others[2]);
    wait_reports(&cp, &expect(&all_pass), FOLLOW, "every report passing");
    assert!(hook.running(), "{}", hook.log());
}
