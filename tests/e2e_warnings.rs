//! Tier 3 for the route-index warnings (SPEC §3.4, issue 9 "must show"): `serve` runs the
//! webhook and the reconciler in one process against a real kube-apiserver (tests/k8s
//! harness); `kubectl apply` prints the warnings the webhook returns while the route is
//! still created; the reconciler then decides (HostnameConflict); `check --routes FILE` and
//! `check --kubeconfig` give the same warnings offline for the same objects.
//!
//! Set TENANT_GATEWAY_SKIP_E2E=1 to skip (said loudly).

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::control_plane::*;
use support::poll::poll;
use support::process::*;

use tenant_gateway::platform::CONTROLLER_NAME;

const WAIT: Duration = Duration::from_secs(90);

/// What alice is told when cozy-dashboard already publishes her hostname.
const CONFLICT: &str = "HostnameConflict: dashboard.alice.example.org is already on tenant-root/tenant-root from cozy-dashboard, which wins";
/// The route that takes the 64th listener.
const LAST: &str = "Gateway tenant-erin/gw: this route takes the last 1 of 64 listeners (http01); more need certMode dns01";
/// The route after it.
const FULL: &str = "Gateway tenant-erin/gw: 0 of 64 listeners left, 1 needed, 1 hostname(s) get none (http01); use certMode dns01";
/// Past the fair share (SPEC §3.3): 63 hostname listeners (64 minus `http`), two namespaces,
/// the other asks for one.
const SHARE: &str = "Gateway tenant-erin/gw: namespace fair share is 62/63 listeners (http01); 1 hostname(s) get none; use dns01";

fn namespace(cp: &ControlPlane, name: &str, labels: Value) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels}});
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&ns.to_string()));
}

fn http_route(ns: &str, name: &str, gw: (&str, &str), hosts: &[&str]) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [{"name": gw.1, "namespace": gw.0}], "hostnames": hosts,
                 "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}})
}

fn get(cp: &ControlPlane, kind: &str, ns: &str, name: &str) -> Option<Value> {
    let o = cp.kubectl(&["get", kind, "-n", ns, name, "-o", "json"], None);
    o.allowed
        .then(|| serde_json::from_str(&o.stdout).expect("kubectl prints JSON"))
}

/// Our `status.parents` entry's Accepted condition: (status, reason).
fn accepted(route: &Value) -> Option<(String, String)> {
    route["status"]["parents"].as_array()?.iter().find_map(|p| {
        (p["controllerName"] == CONTROLLER_NAME).then_some(())?;
        p["conditions"].as_array()?.iter().find_map(|c| {
            (c["type"] == "Accepted").then(|| {
                (
                    c["status"].as_str().unwrap_or_default().to_string(),
                    c["reason"].as_str().unwrap_or_default().to_string(),
                )
            })
        })
    })
}

/// The `Warning:` lines kubectl printed (it prints each admission warning on its own line).
fn warnings(o: &Outcome) -> Vec<String> {
    o.stderr
        .lines()
        .filter_map(|l| l.strip_prefix("Warning: "))
        .map(str::to_string)
        .collect()
}

/// `kubectl apply` as a tenant user (impersonated; RBAC lets it reach admission).
fn apply_as(cp: &ControlPlane, user: &str, dry_run: bool, manifest: &Value) -> Outcome {
    let mut extra = vec!["--as", user, "--as-group", E2E_GROUP];
    if dry_run {
        extra.push("--dry-run=server");
    }
    cp.apply(&extra, &manifest.to_string())
}

/// Retry a server-side dry run until the webhook's index has caught up with what the
/// reconciler wrote (the watch of the serve process is a moment behind our kubectl).
fn wait_for_warning(cp: &ControlPlane, user: &str, manifest: &Value, want: &str) {
    poll(WAIT, &format!("the webhook to warn {want:?}"), || {
        let o = apply_as(cp, user, true, manifest);
        assert!(o.allowed, "a warning must never deny: {}", o.stderr);
        warnings(&o).iter().any(|w| w == want).then_some(())
    });
}

fn metrics_text(port: u16) -> String {
    let addr = format!("127.0.0.1:{port}");
    let mut s = TcpStream::connect(&addr).expect("metrics port");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut buf = String::new();
    s.read_to_string(&mut buf).expect("response");
    buf
}

fn counter(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// `tenant-gateway check -o json` with `args`; the warnings of its one object (WARNED when
/// there are any, ALLOWED otherwise).
fn check_warnings(args: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args(["check", "-o", "json", "--root-host", "example.org"])
        .args(args)
        .output()
        .expect("check runs");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "check printed no report: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{v}");
    let items = v["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{v}");
    let warnings: Vec<String> = items[0]["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let verdict = if warnings.is_empty() {
        "ALLOWED"
    } else {
        "WARNED"
    };
    assert_eq!(items[0]["verdict"], verdict, "{v}");
    warnings
}

/// The same object judged offline from snapshots taken with kubectl, and live with
/// `--kubeconfig`: the warnings kubectl printed for it.
fn offline_matches(
    cp: &ControlPlane,
    dir: &std::path::Path,
    user: &str,
    route: &Value,
    want: &[&str],
) {
    let manifest = dir.join("route.json");
    std::fs::write(&manifest, route.to_string()).expect("write manifest");
    let routes = dir.join("routes.yaml");
    let o = cp.kubectl_ok(
        &[
            "get",
            "httproutes,tlsroutes,tenantgateways",
            "-A",
            "-o",
            "yaml",
        ],
        None,
    );
    std::fs::write(&routes, o.stdout).expect("write routes");
    let namespaces = dir.join("namespaces.yaml");
    let o = cp.kubectl_ok(&["get", "namespaces", "-o", "yaml"], None);
    std::fs::write(&namespaces, o.stdout).expect("write namespaces");
    let want: Vec<String> = want.iter().map(|w| w.to_string()).collect();
    let snapshot = check_warnings(&[
        "-f",
        path_str(&manifest),
        "--as",
        user,
        "--namespaces",
        path_str(&namespaces),
        "--routes",
        path_str(&routes),
    ]);
    assert_eq!(snapshot, want, "check --routes");
    let live = check_warnings(&[
        "-f",
        path_str(&manifest),
        "--as",
        user,
        "--kubeconfig",
        path_str(&cp.kubeconfig()),
    ]);
    assert_eq!(live, want, "check --kubeconfig");
}

/// `check --kubeconfig` by someone who may list namespaces and get routes but not list
/// routes: the verdicts still come, the warnings are said to be missing.
fn may_not_list_routes(cp: &ControlPlane, dir: &std::path::Path, route: &Value) {
    cp.grant_only(
        "e2e-lister",
        r#"[{"apiGroups":[""],"resources":["namespaces"],"verbs":["list"]},
            {"apiGroups":["gateway.networking.k8s.io"],"resources":["httproutes","tlsroutes"],"verbs":["get"]}]"#,
    );
    let o = cp.kubectl_ok(&["config", "view", "--raw", "-o", "json"], None);
    let mut kc: Value = serde_json::from_str(&o.stdout).expect("kubeconfig JSON");
    for u in kc["users"].as_array_mut().expect("users") {
        u["user"]["as"] = json!("e2e-lister");
    }
    let kubeconfig = dir.join("lister.kubeconfig");
    std::fs::write(&kubeconfig, kc.to_string()).expect("write kubeconfig");
    let manifest = dir.join("route.json");
    std::fs::write(&manifest, route.to_string()).expect("write manifest");
    let out = Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args([
            "check",
            "-o",
            "json",
            "--root-host",
            "example.org",
            "--as",
            "alice",
        ])
        .arg("-f")
        .arg(&manifest)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .expect("check runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("cannot list HTTPRoutes cluster-wide"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("report");
    assert_eq!(v["items"][0]["verdict"], "ALLOWED", "{v}");
    assert_eq!(
        v["items"][0]["operation"], "UPDATE",
        "the live object was read: {v}"
    );
}

#[test]
fn route_index_warnings_on_a_real_api_server() {
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    cp.install_crds();
    cp.grant_impersonated_users();
    let gw_label = "namespace.cozystack.io/gateway";
    let host_label = "namespace.cozystack.io/host";
    namespace(
        &cp,
        "tenant-root",
        json!({host_label: "example.org", gw_label: "tenant-root"}),
    );
    namespace(
        &cp,
        "tenant-alice",
        json!({host_label: "alice.example.org", gw_label: "tenant-root"}),
    );
    namespace(&cp, "cozy-dashboard", json!({}));
    namespace(
        &cp,
        "tenant-erin",
        json!({host_label: "erin.example.org", gw_label: "tenant-erin"}),
    );
    let serve = Webhook::start_with(
        &cp,
        "serve",
        &[
            "--leader-election-namespace",
            "default",
            "--leader-election-name",
            "tenant-gateway-warnings",
        ],
    );
    serve.register(&cp);
    let dir = tempfile::tempdir().expect("temp dir");

    // A hostname cozy-dashboard already publishes on the root Gateway.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
                "metadata": {"name": "tenant-root", "namespace": "tenant-root"},
                "spec": {"apex": "example.org", "attachedNamespaces": ["cozy-dashboard"],
                         "tlsPassthroughServices": []}})
            .to_string(),
        ),
    );
    let gw = ("tenant-root", "tenant-root");
    let host = "dashboard.alice.example.org";
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&http_route("cozy-dashboard", "dashboard", gw, &[host]).to_string()),
    );
    poll(WAIT, "the dashboard route accepted", || {
        let r = get(&cp, "httproute", "cozy-dashboard", "dashboard")?;
        (accepted(&r)?.0 == "True").then_some(())
    });
    let alice = http_route("tenant-alice", "dashboard", gw, &[host]);
    wait_for_warning(&cp, "alice", &alice, CONFLICT);
    let o = apply_as(&cp, "alice", false, &alice);
    assert!(o.allowed, "the route must be created: {}", o.stderr);
    assert_eq!(warnings(&o), [CONFLICT], "kubectl apply: {}", o.stderr);
    assert!(get(&cp, "httproute", "tenant-alice", "dashboard").is_some());
    poll(WAIT, "the reconciler marks it HostnameConflict", || {
        let r = get(&cp, "httproute", "tenant-alice", "dashboard")?;
        (accepted(&r)? == ("False".into(), "HostnameConflict".into())).then_some(())
    });
    let text = metrics_text(serve.metrics_port);
    assert!(
        counter(
            &text,
            "tenant_gateway_admission_warnings_total{reason=\"hostname_conflict\",resource=\"httproutes\"}"
        ) >= 2.0,
        "the warnings are counted: {text}"
    );
    offline_matches(&cp, dir.path(), "alice", &alice, &[CONFLICT]);
    may_not_list_routes(&cp, dir.path(), &alice);

    // 63 listeners in use (http + 62 hostnames): the next route takes the last one.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
                "metadata": {"name": "gw", "namespace": "tenant-erin"},
                "spec": {"apex": "erin.example.org", "tlsPassthroughServices": []}})
            .to_string(),
        ),
    );
    let erin_gw = ("tenant-erin", "gw");
    let items: Vec<Value> = (0..62)
        .map(|i| {
            http_route(
                "tenant-erin",
                &format!("r{i:02}"),
                erin_gw,
                &[&format!("h{i:02}.erin.example.org")],
            )
        })
        .collect();
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()),
    );
    poll(WAIT, "63 listeners and 62 accepted routes", || {
        let g = get(&cp, "gateway", "tenant-erin", "gw")?;
        let n = g["spec"]["listeners"].as_array()?.len();
        let o = cp.kubectl(
            &["get", "httproute", "-n", "tenant-erin", "-o", "json"],
            None,
        );
        let list: Value = serde_json::from_str(&o.stdout).ok()?;
        let ok = list["items"]
            .as_array()?
            .iter()
            .filter(|r| accepted(r).is_some_and(|a| a.0 == "True"))
            .count();
        (n == 63 && ok == 62).then_some(())
    });
    let next = http_route("tenant-erin", "r62", erin_gw, &["h62.erin.example.org"]);
    wait_for_warning(&cp, "erin", &next, LAST);
    let o = apply_as(&cp, "erin", false, &next);
    assert!(o.allowed, "{}", o.stderr);
    assert_eq!(warnings(&o), [LAST], "kubectl apply: {}", o.stderr);
    offline_matches(&cp, dir.path(), "erin", &next, &[LAST]);
    poll(WAIT, "64 listeners", || {
        let g = get(&cp, "gateway", "tenant-erin", "gw")?;
        (g["spec"]["listeners"].as_array()?.len() == 64).then_some(())
    });
    let over = http_route("tenant-erin", "r63", erin_gw, &["h63.erin.example.org"]);
    wait_for_warning(&cp, "erin", &over, FULL);
    let o = apply_as(&cp, "erin", false, &over);
    assert!(o.allowed, "{}", o.stderr);
    assert_eq!(warnings(&o), [FULL], "kubectl apply: {}", o.stderr);
    poll(WAIT, "the 65th listener refused", || {
        let r = get(&cp, "httproute", "tenant-erin", "r63")?;
        (accepted(&r)?.1 == "ListenerLimitReached").then_some(())
    });
    // Issue 20 item 8: a later namespace on the full Gateway is within its fair share (one of
    // 63 hostname listeners): no listener warning, and it is served; the flooding namespace is
    // then past its share (63 - 1 = 62) and its next route is warned so.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-erin-kid",
                "labels": {"namespace.cozystack.io/host": "kid.erin.example.org",
                           "namespace.cozystack.io/gateway": "tenant-erin"}}})
            .to_string(),
        ),
    );
    let kid = http_route(
        "tenant-erin-kid",
        "shop",
        erin_gw,
        &["shop.kid.erin.example.org"],
    );
    let o = apply_as(&cp, "erin", true, &kid);
    assert!(o.allowed, "{}", o.stderr);
    assert!(
        !warnings(&o).iter().any(|w| w.contains("listeners")),
        "a namespace within its fair share was warned: {}",
        o.stderr
    );
    let o = apply_as(&cp, "erin", false, &kid);
    assert!(o.allowed, "{}", o.stderr);
    poll(
        WAIT,
        "the later namespace served on the full Gateway",
        || {
            let r = get(&cp, "httproute", "tenant-erin-kid", "shop")?;
            (accepted(&r)?.0 == "True").then_some(())
        },
    );
    let past = http_route("tenant-erin", "r64", erin_gw, &["h64.erin.example.org"]);
    wait_for_warning(&cp, "erin", &past, SHARE);
    offline_matches(&cp, dir.path(), "erin", &past, &[SHARE]);
    let text = metrics_text(serve.metrics_port);
    assert!(
        counter(
            &text,
            "tenant_gateway_admission_warnings_total{reason=\"listener_budget\",resource=\"httproutes\"}"
        ) >= 3.0,
        "{text}"
    );
    // Issue 22 item 4: in dns01 mode the Gateway has one wildcard listener per apex, no
    // listener per hostname: the same route is not warned about listeners, by the webhook
    // or offline.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
                "metadata": {"name": "gw", "namespace": "tenant-erin"},
                "spec": {"apex": "erin.example.org", "tlsPassthroughServices": [],
                         "certMode": "dns01",
                         "dns01": {"provider": "cloudflare", "cloudflare":
                             {"apiTokenSecretRef": {"name": "cf", "key": "token"}}}}})
            .to_string(),
        ),
    );
    poll(WAIT, "no listener warning on the dns01 Gateway", || {
        let o = apply_as(&cp, "erin", true, &past);
        assert!(o.allowed, "{}", o.stderr);
        warnings(&o).is_empty().then_some(())
    });
    offline_matches(&cp, dir.path(), "erin", &past, &[]);
    serve.unregister(&cp);
}
