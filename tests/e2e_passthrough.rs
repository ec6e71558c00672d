//! Tier 3 for listeners whose SNI overlaps (SPEC §3.10, issue 23): `serve` (webhook and
//! reconciler in one process) against a real kube-apiserver from the tests/k8s harness, run
//! with `--passthrough-gateway shared`, then `separate`, then `shared` again, as an operator
//! switches the chart value. The test writes Gateway status the way Cilium 1.19.6 does,
//! including the `Conflicted` listeners it reports for an HTTPS-terminate and a
//! TLS-passthrough listener whose hostnames intersect. Every wait has a deadline.
//!
//! Set TENANT_GATEWAY_SKIP_E2E=1 to skip (said loudly).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use support::control_plane::*;
use support::poll::poll;
use support::process::*;

use tenant_gateway::platform::CONTROLLER_NAME;

const WAIT: Duration = Duration::from_secs(90);

/// What alice is told for an HTTPRoute on her Gateway's passthrough hostname.
const PASSTHROUGH: &str = "PassthroughHostname: api.alice.example.org is passed through by tenant-alice/gw (tls-api); no HTTPS listener for it";

const HOST: &str = "namespace.cozystack.io/host";
const GATEWAY: &str = "namespace.cozystack.io/gateway";

fn namespace(cp: &ControlPlane, name: &str, apex: &str) {
    cp.apply_json(&json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {HOST: apex, GATEWAY: name}}}));
}

fn get(cp: &ControlPlane, kind: &str, ns: &str, name: &str) -> Option<Value> {
    cp.get_json(kind, ns, name)
}

fn tgw(ns: &str, spec: Value) -> Value {
    json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
        "metadata": {"name": "gw", "namespace": ns}, "spec": spec})
}

fn http_route(ns: &str, name: &str, hosts: &[&str]) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [{"name": "gw"}], "hostnames": hosts,
                 "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}})
}

fn tls_route(ns: &str, name: &str, gw: &str, hosts: &[&str]) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TLSRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [{"name": gw}], "hostnames": hosts,
                 "rules": [{"backendRefs": [{"name": "kube-api", "port": 6443}]}]}})
}

/// Our `status.parents` entries: Gateway name → (status, reason, message) of Accepted.
fn our_entries(route: &Value) -> BTreeMap<String, (String, String, String)> {
    let mut out = BTreeMap::new();
    for p in route["status"]["parents"].as_array().into_iter().flatten() {
        if p["controllerName"] != CONTROLLER_NAME {
            continue;
        }
        let gw = p["parentRef"]["name"].as_str().unwrap_or_default();
        if let Some(c) = p["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Accepted"))
        {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            out.insert(gw.to_string(), (s("status"), s("reason"), s("message")));
        }
    }
    out
}

fn condition(t: &Value, type_: &str) -> Option<(String, String, String)> {
    t["status"]["conditions"].as_array()?.iter().find_map(|c| {
        (c["type"] == type_).then(|| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("status"), s("reason"), s("message"))
        })
    })
}

fn listeners(gw: &Value) -> Vec<(String, Option<String>)> {
    gw["spec"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            (
                l["name"].as_str().unwrap_or_default().to_string(),
                l["hostname"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn names(gw: &Value) -> Vec<String> {
    listeners(gw).into_iter().map(|(n, _)| n).collect()
}

fn rv(o: &Value) -> String {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The data plane's status, at the Gateway's generation, the way Cilium 1.19.6 writes it:
/// the Gateway Accepted and Programmed, the listeners in `conflicted` Conflicted=True reason
/// ProtocolConflict and Accepted=False, every other listener accepted and programmed;
/// `address` in `status.addresses`.
fn cilium_status(cp: &ControlPlane, ns: &str, name: &str, conflicted: &[&str], address: &str) {
    let gw = get(cp, "gateway", ns, name).expect("gateway exists");
    let generation = gw["metadata"]["generation"].as_i64().unwrap_or(1);
    let cond = |t: &str, ok: bool, reason: &str| {
        json!({"type": t, "status": if ok { "True" } else { "False" }, "reason": reason,
               "message": "", "observedGeneration": generation,
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let ls: Vec<Value> = names(&gw)
        .iter()
        .map(|l| {
            let conditions = if conflicted.contains(&l.as_str()) {
                vec![
                    cond("Accepted", false, "ProtocolConflict"),
                    cond("Conflicted", true, "ProtocolConflict"),
                    cond("Programmed", false, "Invalid"),
                    cond("ResolvedRefs", true, "ResolvedRefs"),
                ]
            } else {
                vec![
                    cond("Accepted", true, "Accepted"),
                    cond("Conflicted", false, "NoConflicts"),
                    cond("Programmed", true, "Programmed"),
                    cond("ResolvedRefs", true, "ResolvedRefs"),
                ]
            };
            json!({"name": l, "attachedRoutes": 0,
                   "supportedKinds": [{"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}],
                   "conditions": conditions})
        })
        .collect();
    let patch = json!({"status": {
        "addresses": [{"type": "IPAddress", "value": address}],
        "conditions": [cond("Accepted", true, "Accepted"), cond("Programmed", true, "Programmed")],
        "listeners": ls}});
    cp.kubectl_ok(
        &[
            "patch",
            "gateway",
            "-n",
            ns,
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
        None,
    );
}

fn serve(cp: &ControlPlane, name: &str, layout: &str) -> Webhook {
    let lease = format!("tenant-gateway-{name}");
    let flag = format!("--passthrough-gateway={layout}");
    let hook = Webhook::start_with(
        cp,
        name,
        &[
            "--leader-election-namespace",
            "default",
            "--leader-election-name",
            &lease,
            &flag,
        ],
    );
    hook.register(cp);
    hook
}

/// Wait until a poke of every TenantGateway is reconciled without a write, then poke once
/// more: nothing but the poked objects may change (SPEC §3.7 zero writes).
fn resync_writes_nothing(cp: &ControlPlane, hook: &Webhook, watched: &[(&str, &str, &str)]) {
    let writes = || hook_sum(hook, "tenant_gateway_reconcile_writes_total");
    let reconciles = || hook_sum(hook, "tenant_gateway_reconcile_total");
    let poke = |n: f64| {
        for ns in ["tenant-alice", "tenant-bob", "tenant-carol"] {
            cp.kubectl_ok(
                &[
                    "annotate",
                    "--overwrite",
                    "tenantgateway",
                    "-n",
                    ns,
                    "gw",
                    &format!("e2e/poke={n}"),
                ],
                None,
            );
        }
    };
    poll(WAIT, "two reconciles in a row without writes", || {
        let before = writes();
        let r = reconciles();
        poke(r);
        poll(WAIT, "the reconciles after the poke", || {
            (reconciles() >= r + 3.0).then_some(())
        });
        (writes() == before).then_some(())
    });
    let versions = || -> Vec<String> {
        watched
            .iter()
            .map(|(k, ns, n)| get(cp, k, ns, n).map(|o| rv(&o)).unwrap_or_default())
            .collect()
    };
    let before = versions();
    let w = writes();
    let r = reconciles();
    poke(r + 0.5);
    poll(WAIT, "the reconciles after the last poke", || {
        (reconciles() >= r + 3.0).then_some(())
    });
    assert_eq!(
        versions(),
        before,
        "an unchanged world changed resourceVersions"
    );
    assert_eq!(writes(), w, "an unchanged world issued writes");
}

fn hook_sum(hook: &Webhook, family: &str) -> f64 {
    metric_sum(&hook.metrics_addr(), family).unwrap_or(0.0)
}

#[test]
fn passthrough_layouts_on_a_real_api_server() {
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    cp.install_crds();
    cp.grant_impersonated_users();
    namespace(&cp, "tenant-alice", "alice.example.org");
    namespace(&cp, "tenant-bob", "bob.example.org");
    namespace(&cp, "tenant-carol", "carol.example.org");
    let dir = tempfile::tempdir().expect("temp dir");

    // ---- shared (the default) -------------------------------------------------------------
    let mut hook = serve(&cp, "shared", "shared");

    // http01: the declaration wins, and admission says so first.
    cp.apply_json(&tgw(
        "tenant-alice",
        json!({"apex": "alice.example.org", "tlsPassthroughServices": ["api"]}),
    ));
    let route = http_route(
        "tenant-alice",
        "api-web",
        &["api.alice.example.org", "www.alice.example.org"],
    );
    poll(WAIT, "the webhook to warn PassthroughHostname", || {
        let o = cp.apply(
            &["--as", "alice", "--as-group", E2E_GROUP, "--dry-run=server"],
            &route.to_string(),
        );
        assert!(o.allowed, "a warning never denies: {}", o.stderr);
        o.stderr
            .lines()
            .any(|l| l.strip_prefix("Warning: ") == Some(PASSTHROUGH))
            .then_some(())
    });
    let o = cp.apply(
        &["--as", "alice", "--as-group", E2E_GROUP],
        &route.to_string(),
    );
    assert!(o.allowed, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!("Warning: {PASSTHROUGH}")),
        "kubectl apply: {}",
        o.stderr
    );
    let entry = poll(WAIT, "the route refused for api.<apex>", || {
        let r = get(&cp, "httproute", "tenant-alice", "api-web")?;
        our_entries(&r).remove("gw")
    });
    assert_eq!(
        (entry.0.as_str(), entry.1.as_str()),
        ("False", "PassthroughHostname")
    );
    assert!(entry.2.contains("tls-api"), "{}", entry.2);
    let gw = poll(WAIT, "the www listener", || {
        let g = get(&cp, "gateway", "tenant-alice", "gw")?;
        names(&g).contains(&"https-www".to_string()).then_some(g)
    });
    assert!(
        listeners(&gw)
            .iter()
            .all(|(n, h)| n == "tls-api" || h.as_deref() != Some("api.alice.example.org")),
        "a terminate listener for the passthrough hostname: {:?}",
        listeners(&gw)
    );
    assert!(get(&cp, "certificate", "tenant-alice", "gw-www-tls").is_some());
    let certs = cp.kubectl_ok(
        &["get", "certificates", "-n", "tenant-alice", "-o", "name"],
        None,
    );
    assert!(!certs.stdout.contains("api"), "{}", certs.stdout);
    // Offline, from a snapshot of the same objects and from the live cluster.
    let manifest = dir.path().join("route.json");
    std::fs::write(&manifest, route.to_string()).expect("write the route");
    let snapshot = dir.path().join("routes.yaml");
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
    std::fs::write(&snapshot, o.stdout).expect("write the snapshot");
    let namespaces = dir.path().join("namespaces.yaml");
    let o = cp.kubectl_ok(&["get", "namespaces", "-o", "yaml"], None);
    std::fs::write(&namespaces, o.stdout).expect("write the namespaces");
    for context in [
        vec![
            "--namespaces",
            path_str(&namespaces),
            "--routes",
            path_str(&snapshot),
        ],
        vec!["--kubeconfig", path_str(&cp.kubeconfig())],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
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
            .args(&context)
            .output()
            .expect("check runs");
        let v: Value = serde_json::from_slice(&out.stdout).expect("a report");
        assert_eq!(
            v["items"][0]["warnings"],
            json!([PASSTHROUGH]),
            "{context:?}: {v}"
        );
    }

    // existingSecret: the wildcard listener covers every passthrough hostname.
    let bob_spec = json!({"apex": "bob.example.org", "certMode": "existingSecret",
        "wildcardSecretRef": {"name": "wildcard-tls"},
        "tlsPassthroughServices": ["api", "cdi-uploadproxy"]});
    cp.apply_json(&tgw("tenant-bob", bob_spec));
    cp.apply_json(&tls_route(
        "tenant-bob",
        "kube",
        "gw",
        &["api.bob.example.org"],
    ));
    let overlap = poll(WAIT, "ListenersOverlap=True", || {
        let t = get(&cp, "tenantgateway", "tenant-bob", "gw")?;
        condition(&t, "ListenersOverlap").filter(|c| c.0 == "True")
    });
    assert!(
        overlap.2.contains(
            "https (*.bob.example.org) and tls-api (api.bob.example.org), https \
             (*.bob.example.org) and tls-cdi-uploadproxy (cdi-uploadproxy.bob.example.org)"
        ),
        "{}",
        overlap.2
    );
    assert!(
        overlap.2.contains("--passthrough-gateway shared"),
        "{}",
        overlap.2
    );
    poll(WAIT, "the TLSRoute accepted on gw", || {
        let r = get(&cp, "tlsroute", "tenant-bob", "kube")?;
        (our_entries(&r).get("gw")?.0 == "True").then_some(())
    });
    // The data plane refuses the pairs: Ready names the listeners and the fix.
    cilium_status(
        &cp,
        "tenant-bob",
        "gw",
        &["https", "tls-api", "tls-cdi-uploadproxy"],
        "10.0.0.1",
    );
    let ready = poll(WAIT, "Ready=False ListenersConflicted", || {
        let t = get(&cp, "tenantgateway", "tenant-bob", "gw")?;
        condition(&t, "Ready").filter(|c| c.1 == "ListenersConflicted")
    });
    assert_eq!(ready.0, "False");
    assert!(
        ready.2.contains(
            "Gateway gw: https (ProtocolConflict), tls-api (ProtocolConflict), \
             tls-cdi-uploadproxy (ProtocolConflict)"
        ),
        "{}",
        ready.2
    );
    assert!(
        ready.2.contains("--passthrough-gateway separate"),
        "{}",
        ready.2
    );

    // A Gateway named like carol's second one, not hers: never to be taken over.
    cp.apply_json(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw-passthrough", "namespace": "tenant-carol"},
        "spec": {"gatewayClassName": "other", "listeners": [
            {"name": "x", "port": 443, "protocol": "TLS", "hostname": "x.carol.example.org",
             "tls": {"mode": "Passthrough"}}]}}),
    );
    let foreign = get(&cp, "gateway", "tenant-carol", "gw-passthrough").expect("foreign");
    cp.apply_json(&tgw(
        "tenant-carol",
        json!({"apex": "carol.example.org", "certMode": "existingSecret",
               "wildcardSecretRef": {"name": "wildcard-tls"}, "tlsPassthroughServices": ["api"]}),
    ));
    poll(WAIT, "carol's Gateway", || {
        get(&cp, "gateway", "tenant-carol", "gw").map(|_| ())
    });
    // The operator switches the chart value: the next process starts with the other layout.
    hook.unregister(&cp);
    drop(hook);

    // ---- separate ---------------------------------------------------------------------------
    hook = serve(&cp, "separate", "separate");
    let second = poll(WAIT, "bob's second Gateway", || {
        get(&cp, "gateway", "tenant-bob", "gw-passthrough")
    });
    let bob = get(&cp, "tenantgateway", "tenant-bob", "gw").expect("bob's TenantGateway");
    assert_eq!(
        second["metadata"]["ownerReferences"][0]["uid"],
        bob["metadata"]["uid"]
    );
    assert_eq!(second["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(second["spec"]["gatewayClassName"], "cilium");
    assert_eq!(
        listeners(&second),
        [
            (
                "tls-api".to_string(),
                Some("api.bob.example.org".to_string())
            ),
            (
                "tls-cdi-uploadproxy".to_string(),
                Some("cdi-uploadproxy.bob.example.org".to_string())
            )
        ]
    );
    for l in second["spec"]["listeners"].as_array().expect("listeners") {
        assert_eq!(
            l["allowedRoutes"]["kinds"],
            json!([{"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}])
        );
    }
    poll(
        WAIT,
        "the first Gateway without the passthrough listeners",
        || {
            let g = get(&cp, "gateway", "tenant-bob", "gw")?;
            names(&g)
                .iter()
                .all(|n| !n.starts_with("tls-"))
                .then_some(())
        },
    );
    // The TLSRoute still on gw is told where the listeners went; moved, it is accepted.
    let (st, reason, msg) = poll(WAIT, "the TLSRoute told to move", || {
        let r = get(&cp, "tlsroute", "tenant-bob", "kube")?;
        our_entries(&r).remove("gw").filter(|e| e.1 != "Accepted")
    });
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "NotAllowedByListeners")
    );
    assert!(msg.contains("tenant-bob/gw-passthrough"), "{msg}");
    cp.apply_json(&tls_route(
        "tenant-bob",
        "kube",
        "gw-passthrough",
        &["api.bob.example.org"],
    ));
    poll(WAIT, "the TLSRoute accepted on gw-passthrough only", || {
        let r = get(&cp, "tlsroute", "tenant-bob", "kube")?;
        let e = our_entries(&r);
        (e.len() == 1 && e.get("gw-passthrough")?.0 == "True").then_some(())
    });
    // Both Gateways programmed: Ready, both addresses reported, nothing overlaps.
    poll(WAIT, "gw's new generation", || {
        let g = get(&cp, "gateway", "tenant-bob", "gw")?;
        (g["metadata"]["generation"].as_i64()? > 1).then_some(())
    });
    cilium_status(&cp, "tenant-bob", "gw", &[], "10.0.0.1");
    cilium_status(&cp, "tenant-bob", "gw-passthrough", &[], "10.0.0.2");
    let t = poll(WAIT, "bob Ready", || {
        let t = get(&cp, "tenantgateway", "tenant-bob", "gw")?;
        (condition(&t, "Ready")?.0 == "True").then_some(t)
    });
    assert_eq!(
        t["status"]["gateways"],
        json!([{"name": "gw", "addresses": [{"type": "IPAddress", "value": "10.0.0.1"}]},
               {"name": "gw-passthrough",
                "addresses": [{"type": "IPAddress", "value": "10.0.0.2"}]}])
    );
    assert_eq!(
        condition(&t, "Programmed").map(|c| c.2),
        Some("Gateways gw and gw-passthrough are accepted and programmed".to_string())
    );
    assert_eq!(
        condition(&t, "ListenersOverlap").map(|c| (c.0, c.1)),
        Some(("False".to_string(), "SeparateGateway".to_string()))
    );
    // carol's same-named Gateway is refused, never written.
    let ready = poll(WAIT, "carol NotOwned", || {
        let t = get(&cp, "tenantgateway", "tenant-carol", "gw")?;
        condition(&t, "Ready").filter(|c| c.1 == "NotOwned")
    });
    assert!(ready.2.contains("gw-passthrough"), "{}", ready.2);
    let now = get(&cp, "gateway", "tenant-carol", "gw-passthrough").expect("still there");
    assert_eq!(rv(&now), rv(&foreign), "the foreign Gateway was written");
    resync_writes_nothing(
        &cp,
        &hook,
        &[
            ("gateway", "tenant-bob", "gw"),
            ("gateway", "tenant-bob", "gw-passthrough"),
            ("gateway", "tenant-carol", "gw-passthrough"),
            ("tlsroute", "tenant-bob", "kube"),
            ("httproute", "tenant-alice", "api-web"),
        ],
    );
    hook.unregister(&cp);
    drop(hook);

    // ---- back to shared ----------------------------------------------------------------------
    let hook = serve(&cp, "shared-again", "shared");
    poll(WAIT, "bob's second Gateway deleted", || {
        get(&cp, "gateway", "tenant-bob", "gw-passthrough")
            .is_none()
            .then_some(())
    });
    poll(WAIT, "the passthrough listeners back on gw", || {
        let g = get(&cp, "gateway", "tenant-bob", "gw")?;
        names(&g).contains(&"tls-api".to_string()).then_some(())
    });
    poll(WAIT, "no entry of ours left for gw-passthrough", || {
        let r = get(&cp, "tlsroute", "tenant-bob", "kube")?;
        our_entries(&r).is_empty().then_some(())
    });
    poll(WAIT, "ListenersOverlap=True again", || {
        let t = get(&cp, "tenantgateway", "tenant-bob", "gw")?;
        (condition(&t, "ListenersOverlap")?.0 == "True").then_some(())
    });
    let now = get(&cp, "gateway", "tenant-carol", "gw-passthrough").expect("still there");
    assert_eq!(rv(&now), rv(&foreign), "the foreign Gateway was touched");
    drop(hook);
}
