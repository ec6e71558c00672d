//! Tier 3 for the reconciler (SPEC §3, issue 7 "must show"): a real kube-apiserver from the
//! tests/k8s harness with the Gateway API, cert-manager and TenantGateway CRDs; the
//! reconciler runs in-process against it (its shared watches, Lease and controller, as
//! `serve` starts them); the test writes Gateway and Certificate status the way Cilium and
//! cert-manager would. Every wait has a deadline; scenarios use their own namespaces.
//!
//! Set TENANT_GATEWAY_SKIP_E2E=1 to skip (said loudly).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::control_plane::*;
use support::poll::poll;
use support::process::*;
use support::replica;

use tenant_gateway::metrics::Metrics;
use tenant_gateway::platform::CONTROLLER_NAME;

const WAIT: Duration = Duration::from_secs(60);

struct Cluster<'a> {
    cp: &'a ControlPlane,
}

impl Cluster<'_> {
    fn apply(&self, manifest: &Value) {
        self.cp.apply_json(manifest);
    }

    fn get(&self, kind: &str, ns: &str, name: &str) -> Option<Value> {
        self.cp.get_json(kind, ns, name)
    }

    fn get_cluster(&self, kind: &str, name: &str) -> Option<Value> {
        let o = self.cp.kubectl(&["get", kind, name, "-o", "json"], None);
        o.allowed
            .then(|| serde_json::from_str(&o.stdout).expect("kubectl prints JSON"))
    }

    fn delete(&self, kind: &str, ns: &str, name: &str) {
        self.cp.kubectl_ok(
            &[
                "delete",
                kind,
                "-n",
                ns,
                name,
                "--wait=false",
                "--ignore-not-found",
            ],
            None,
        );
    }

    /// Write a status subresource as another controller would.
    fn patch_status(&self, kind: &str, ns: &str, name: &str, patch: &Value) {
        self.cp.kubectl_ok(
            &[
                "patch",
                kind,
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

    fn namespace(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        self.apply(&json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}}));
    }

    fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        poll(WAIT, what, &mut f)
    }
}

fn tgw(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
        "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn http_route(ns: &str, name: &str, gw: (&str, &str), hosts: &[&str]) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [{"name": gw.1, "namespace": gw.0}], "hostnames": hosts,
                 "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}})
}

fn h8(host: &str) -> String {
    let d = Sha256::digest(host.as_bytes());
    d.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

fn listeners(gw: &Value) -> Vec<(String, Option<String>)> {
    gw["spec"]["listeners"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|l| {
                    (
                        l["name"].as_str().unwrap_or_default().to_string(),
                        l["hostname"].as_str().map(str::to_string),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Our `status.parents` entry's condition `type` on a route, if any.
fn route_condition(route: &Value, type_: &str) -> Option<(String, String)> {
    route["status"]["parents"].as_array()?.iter().find_map(|p| {
        (p["controllerName"] == CONTROLLER_NAME).then_some(())?;
        p["conditions"].as_array()?.iter().find_map(|c| {
            (c["type"] == type_).then(|| {
                (
                    c["status"].as_str().unwrap_or_default().to_string(),
                    c["reason"].as_str().unwrap_or_default().to_string(),
                )
            })
        })
    })
}

fn tgw_condition(t: &Value, type_: &str) -> Option<(String, String, String)> {
    t["status"]["conditions"].as_array()?.iter().find_map(|c| {
        (c["type"] == type_).then(|| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            )
        })
    })
}

fn rv(o: &Value) -> String {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Cilium's part: Accepted+Programmed on the Gateway and each listener, at its generation.
fn program_gateway(c: &Cluster, ns: &str, name: &str) {
    let gw = c.get("gateway", ns, name).expect("gateway exists");
    let generation = gw["metadata"]["generation"].as_i64().unwrap_or(1);
    let cond = |t: &str| {
        json!({"type": t, "status": "True", "reason": t, "message": "",
               "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let listeners: Vec<Value> = gw["spec"]["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| {
            json!({"name": l["name"], "attachedRoutes": 0,
                   "supportedKinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
                   "conditions": [cond("Accepted"), cond("Programmed"), cond("ResolvedRefs")]})
        })
        .collect();
    c.patch_status(
        "gateway",
        ns,
        name,
        &json!({"status": {"conditions": [cond("Accepted"), cond("Programmed")],
                           "listeners": listeners}}),
    );
}

/// cert-manager's part: Ready=True.
fn certificate_ready(c: &Cluster, ns: &str, name: &str) {
    c.patch_status(
        "certificate",
        ns,
        name,
        &json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
            "message": "issued", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
    );
}

/// Sum of a counter family's samples in the Prometheus text.
fn counter_sum(m: &Metrics, family: &str) -> u64 {
    m.render()
        .lines()
        .filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

fn writes_total(m: &Metrics) -> u64 {
    counter_sum(m, "tenant_gateway_reconcile_writes_total")
}

fn reconciles_total(m: &Metrics) -> u64 {
    counter_sum(m, "tenant_gateway_reconcile_total")
}

#[test]
fn reconciler_on_a_real_api_server() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    cp.install_crds();
    let c = Cluster { cp: &cp };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let one = replica::start(&rt, &cp, "tenant-gateway-e2e");
    c.wait("the replica to hold the Lease", || {
        (one.metrics.leader.get() == 1).then_some(())
    });

    http01_listener_certificate_and_route_status(&c);
    ready_once_gateway_programmed_and_certificates_ready(&c);
    unchanged_world_issues_no_writes(&c, &one.metrics);
    unlistenable_hostnames_refuse_only_their_route(&c);
    hostname_change_swaps_listener_and_certificate(&c);
    other_controllers_route_status_entries_are_kept(&c);
    layer1_allowed_routes_and_passthrough(&c);
    same_named_gateway_not_owned_is_left_alone(&c);
    conflict_cozy_wins_then_loser_accepted(&c);
    deleting_the_tgw_removes_what_it_wrote(&c);
    dns01_existing_secret_and_back(&c);
    listener_cap_of_64(&c);
    // Issue 20, with no webhook in the path (defense in depth in the reconciler itself).
    platform_namespaces_stay_with_the_root(&c);
    forged_attached_by_is_ignored(&c);
    route_status_never_exceeds_32_parents(&c);
    one_tenant_cannot_take_every_listener(&c);
    the_child_owning_the_apex_wins(&c);
    one_failed_write_stops_nothing_else(&c);
    certificate_names_never_clash(&c);

    // Two replicas: one Lease holder, only it writes; killing it hands over.
    let two = replica::start(&rt, &cp, "tenant-gateway-e2e");
    c.wait("the second replica's caches", || {
        (counter_sum(&two.metrics, "tenant_gateway_reconcile_total") > 0).then_some(())
    });
    assert_eq!(one.metrics.leader.get() + two.metrics.leader.get(), 1);
    assert_eq!(two.metrics.leader.get(), 0);
    c.apply(&http_route(
        "tenant-alice",
        "late",
        ("tenant-alice", "gw"),
        &["late.alice.example.org"],
    ));
    c.wait("the holder converges", || {
        let gw = c.get("gateway", "tenant-alice", "gw")?;
        listeners(&gw)
            .iter()
            .any(|(n, _)| n == "https-late")
            .then_some(())
    });
    c.wait("the holder finished (route status and TGW status)", || {
        let r = c.get("httproute", "tenant-alice", "late")?;
        let t = c.get("tenantgateway", "tenant-alice", "gw")?;
        let listed = t["status"]["listeners"]
            .as_array()?
            .iter()
            .any(|l| l["name"] == "https-late");
        (route_condition(&r, "Accepted")?.0 == "True" && listed).then_some(())
    });
    assert_eq!(writes_total(&two.metrics), 0, "the standby replica wrote");
    one.reconciler.done.abort();
    c.wait("the standby takes the Lease over", || {
        (two.metrics.leader.get() == 1).then_some(())
    });
    // Gaining the Lease reconciles every TenantGateway; the world is converged, so the new
    // holder's full resync issues no write.
    let at_gain = counter_sum(&two.metrics, "tenant_gateway_reconcile_total");
    c.wait("the takeover resync (4 TenantGateways)", || {
        let n = two
            .metrics
            .reconcile_total
            .with_label_values(&["success"])
            .get();
        (n >= 4).then_some(())
    });
    assert!(counter_sum(&two.metrics, "tenant_gateway_reconcile_total") >= at_gain);
    assert_eq!(
        writes_total(&two.metrics),
        0,
        "the resync of a converged world after a takeover wrote"
    );
    c.apply(&http_route(
        "tenant-alice",
        "later",
        ("tenant-alice", "gw"),
        &["later.alice.example.org"],
    ));
    c.wait("the new holder converges", || {
        let gw = c.get("gateway", "tenant-alice", "gw")?;
        listeners(&gw)
            .iter()
            .any(|(n, _)| n == "https-later")
            .then_some(())
    });
    // The listener is visible once the Gateway write landed; the new holder's write count
    // follows that write's answer, so wait for it rather than read it at once.
    c.wait("the new holder counts its writes", || {
        (writes_total(&two.metrics) > 0).then_some(())
    });
    two.reconciler.done.abort();
    drop(rt);

    webhook_and_reconciler_in_one_process(&c);
    two_serve_processes_one_lease_holder(&c);
}

/// Two `serve --no-webhook` processes on one Lease: one holds it and only it writes (counted
/// on each process's own `/metrics`); after the holder is killed with SIGKILL (no release),
/// the other takes the Lease once it expires and converges a change made after the kill.
fn two_serve_processes_one_lease_holder(c: &Cluster) {
    const WRITES: &str = "tenant_gateway_reconcile_writes_total";
    let flags = [
        "--no-webhook",
        "--leader-election-namespace",
        "default",
        "--leader-election-name",
        "tenant-gateway-replicas",
    ];
    // Lease duration 15 s, plus the watches' start and a reconcile: well within this.
    let within = Duration::from_secs(90);
    let mut a = Webhook::start_with(c.cp, "replica-a", &flags);
    // The health port runs without the webhook: probes and metrics work.
    assert_eq!(http_status(&a.metrics_addr(), "/healthz"), Some(200));
    poll(within, "replica a to hold the Lease", || {
        (a.metric("tenant_gateway_leader") == Some(1.0)).then_some(())
    });
    let b = Webhook::start_with(c.cp, "replica-b", &flags);
    poll(within, "replica b to compute (its caches synced)", || {
        let n = metric_sum(&b.metrics_addr(), "tenant_gateway_reconcile_total")?;
        (n > 0.0).then_some(())
    });
    assert_eq!(b.metric("tenant_gateway_leader"), Some(0.0));
    assert_eq!(a.metric("tenant_gateway_leader"), Some(1.0));

    c.namespace(
        "tenant-gina",
        &[("namespace.cozystack.io/host", "gina.example.org")],
    );
    c.apply(&tgw(
        "tenant-gina",
        "gw",
        json!({"apex": "gina.example.org"}),
    ));
    c.apply(&http_route(
        "tenant-gina",
        "one",
        ("tenant-gina", "gw"),
        &["one.gina.example.org"],
    ));
    let has_listener = |name: &str| {
        let gw = c.get("gateway", "tenant-gina", "gw")?;
        listeners(&gw).iter().any(|(n, _)| n == name).then_some(())
    };
    poll(within, "the holder renders https-one", || {
        has_listener("https-one")
    });
    poll(within, "the holder writes the route status", || {
        let r = c.get("httproute", "tenant-gina", "one")?;
        (route_condition(&r, "Accepted")?.0 == "True").then_some(())
    });
    let a_writes = metric_sum(&a.metrics_addr(), WRITES).expect("a's metrics");
    assert!(
        a_writes > 0.0,
        "the holder converged without a counted write"
    );
    assert_eq!(
        metric_sum(&b.metrics_addr(), WRITES),
        Some(0.0),
        "the standby process wrote"
    );

    a.kill();
    let killed = std::time::Instant::now();
    // A change the dead holder cannot have made.
    c.apply(&http_route(
        "tenant-gina",
        "two",
        ("tenant-gina", "gw"),
        &["two.gina.example.org"],
    ));
    poll(within, "replica b to take the Lease over", || {
        (b.metric("tenant_gateway_leader") == Some(1.0)).then_some(())
    });
    poll(within, "the new holder renders https-two", || {
        has_listener("https-two")
    });
    poll(within, "the new holder writes the route status", || {
        let r = c.get("httproute", "tenant-gina", "two")?;
        (route_condition(&r, "Accepted")?.0 == "True").then_some(())
    });
    assert!(
        metric_sum(&b.metrics_addr(), WRITES).expect("b's metrics") > 0.0,
        "the new holder converged without a counted write"
    );
    eprintln!(
        "two serve processes: SIGKILL of the holder to the change converged by the other: {:?}",
        killed.elapsed()
    );
    let log = b.log();
    assert!(!log.contains("reconcile failed"), "replica b log: {log}");
}

/// `serve` runs the webhook and the reconciler in one process; registered with the API
/// server, every write of the reconciler passes its own webhook (Gateway: layer 2, redirect
/// route: layer 7, namespace labels: layer 5 as a trusted caller).
fn webhook_and_reconciler_in_one_process(c: &Cluster) {
    let serve = Webhook::start_with(
        c.cp,
        "serve-both",
        &[
            "--leader-election-namespace",
            "default",
            "--leader-election-name",
            "tenant-gateway-serve",
        ],
    );
    c.cp.grant_impersonated_users();
    serve.register(c.cp);
    c.namespace(
        "tenant-frank",
        &[("namespace.cozystack.io/host", "frank.example.org")],
    );
    c.apply(&tgw(
        "tenant-frank",
        "gw",
        json!({"apex": "frank.example.org"}),
    ));
    c.apply(&http_route(
        "tenant-frank",
        "app",
        ("tenant-frank", "gw"),
        &["app.frank.example.org"],
    ));
    c.wait(
        "the serve process reconciled through its own webhook",
        || {
            let gw = c.get("gateway", "tenant-frank", "gw")?;
            let r = c.get("httproute", "tenant-frank", "app")?;
            let ns = c.get_cluster("namespace", "tenant-frank")?;
            let done = listeners(&gw).iter().any(|(n, _)| n == "https-app")
                && c.get("httproute", "tenant-frank", "gw-http-redirect")
                    .is_some()
                && c.get("certificate", "tenant-frank", "gw-app-tls").is_some()
                && route_condition(&r, "Accepted")?.0 == "True"
                && ns["metadata"]["labels"]["namespace.cozystack.io/gateway"] == "tenant-frank";
            done.then_some(())
        },
    );
    let log = serve.log();
    assert!(!log.contains("reconcile failed"), "serve log: {log}");
    // A tenant's own write that layer 2 denies proves the webhook was in the path.
    let foreign = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "x", "namespace": "tenant-frank"},
        "spec": {"gatewayClassName": "cilium", "listeners": [{"name": "https", "port": 443,
            "protocol": "HTTPS", "hostname": "x.example.com",
            "tls": {"mode": "Terminate", "certificateRefs": [{"name": "c"}]}}]}});
    let o = c.cp.dry_run("frank", &[E2E_GROUP], &foreign.to_string());
    assert!(
        !o.allowed,
        "layer 2 let an out-of-apex listener through: {}",
        o.stdout
    );
    serve.unregister(c.cp);
}

/// A wildcard or out-of-apex hostname is refused in that route's status only.
fn unlistenable_hostnames_refuse_only_their_route(c: &Cluster) {
    c.apply(&http_route(
        "tenant-alice",
        "wild",
        ("tenant-alice", "gw"),
        &["*.alice.example.org"],
    ));
    c.apply(&http_route(
        "tenant-alice",
        "outside",
        ("tenant-alice", "gw"),
        &["app.example.com"],
    ));
    for name in ["wild", "outside"] {
        c.wait("HostnameNotListenable on the bad route", || {
            let r = c.get("httproute", "tenant-alice", name)?;
            (route_condition(&r, "Accepted")?
                == ("False".to_string(), "HostnameNotListenable".to_string()))
                .then_some(())
        });
    }
    let gw = c.get("gateway", "tenant-alice", "gw").expect("gateway");
    let https: Vec<_> = listeners(&gw)
        .into_iter()
        .filter(|(n, _)| n.starts_with("https"))
        .collect();
    assert_eq!(
        https,
        vec![(
            "https-harbor".to_string(),
            Some("harbor.alice.example.org".to_string())
        )]
    );
    let r = c.get("httproute", "tenant-alice", "harbor").expect("route");
    assert_eq!(
        route_condition(&r, "Accepted").map(|c| c.0),
        Some("True".into())
    );
    c.delete("httproute", "tenant-alice", "wild");
    c.delete("httproute", "tenant-alice", "outside");
}

/// Another controller's `status.parents` entry, written before ours, stays verbatim and in
/// place when ours changes (the in-place status edit tested against the resourceVersion).
fn other_controllers_route_status_entries_are_kept(c: &Cluster) {
    let route = |host: &str| http_route("tenant-alice", "shop", ("tenant-alice", "gw"), &[host]);
    c.apply(&route("shop.alice.example.org"));
    let ours = c.wait("our entry on the shop route", || {
        let r = c.get("httproute", "tenant-alice", "shop")?;
        (route_condition(&r, "Accepted")?.0 == "True").then_some(())?;
        r["status"]["parents"].as_array().cloned()
    });
    let cilium = json!({"controllerName": "io.cilium/gateway-controller",
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                      "name": "gw", "namespace": "tenant-alice"},
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
            "message": "Accepted HTTPRoute", "observedGeneration": 1,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    let mut parents = vec![cilium.clone()];
    parents.extend(ours);
    c.patch_status(
        "httproute",
        "tenant-alice",
        "shop",
        &json!({"status": {"parents": parents}}),
    );
    c.apply(&route("shop2.alice.example.org"));
    c.wait(
        "our entry follows generation 2, Cilium's stays first",
        || {
            let r = c.get("httproute", "tenant-alice", "shop")?;
            let parents = r["status"]["parents"].as_array()?;
            let ours: Vec<&Value> = parents
                .iter()
                .filter(|p| p["controllerName"] == CONTROLLER_NAME)
                .collect();
            let fresh = ours.len() == 1
                && ours[0]["conditions"]
                    .as_array()?
                    .iter()
                    .all(|c| c["observedGeneration"] == r["metadata"]["generation"]);
            (fresh && r["metadata"]["generation"] == 2).then_some(())?;
            assert_eq!(parents.len(), 2, "{parents:?}");
            assert_eq!(
                parents[0], cilium,
                "the other controller's entry is kept verbatim"
            );
            Some(())
        },
    );
    c.delete("httproute", "tenant-alice", "shop");
}

/// Changing a route's hostname swaps its listener and Certificate.
fn hostname_change_swaps_listener_and_certificate(c: &Cluster) {
    c.apply(&http_route(
        "tenant-alice",
        "harbor",
        ("tenant-alice", "gw"),
        &["registry.alice.example.org"],
    ));
    c.wait("https-registry replaces https-harbor", || {
        let gw = c.get("gateway", "tenant-alice", "gw")?;
        let ls = listeners(&gw);
        let swapped = ls.iter().any(|(n, _)| n == "https-registry")
            && !ls.iter().any(|(n, _)| n == "https-harbor")
            && c.get("certificate", "tenant-alice", "gw-registry-tls")
                .is_some()
            && c.get("certificate", "tenant-alice", "gw-harbor-tls")
                .is_none();
        swapped.then_some(())
    });
}

fn selector_values(listener: &Value) -> Vec<String> {
    let mut v: Vec<String> =
        listener["allowedRoutes"]["namespaces"]["selector"]["matchExpressions"][0]["values"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
    v.sort();
    v
}

fn listener<'a>(gw: &'a Value, name: &str) -> Option<&'a Value> {
    gw["spec"]["listeners"]
        .as_array()?
        .iter()
        .find(|l| l["name"] == name)
}

/// Layer 1: port 80 admits the TGW namespace and cozy-cert-manager only; port-443 listeners
/// exactly the allowed namespaces (a new inheriting namespace within seconds); passthrough
/// listeners take TLSRoutes only.
fn layer1_allowed_routes_and_passthrough(c: &Cluster) {
    let gw = c.get("gateway", "tenant-alice", "gw").expect("gateway");
    let http = listener(&gw, "http").expect("http listener");
    assert_eq!(http["port"], 80);
    assert_eq!(http["allowedRoutes"]["namespaces"]["from"], "Selector");
    assert_eq!(
        http["allowedRoutes"]["namespaces"]["selector"]["matchExpressions"][0]["key"],
        "kubernetes.io/metadata.name"
    );
    assert_eq!(selector_values(http), ["cozy-cert-manager", "tenant-alice"]);
    let https = listener(&gw, "https-registry").expect("https listener");
    assert_eq!(selector_values(https), ["tenant-alice", "tenant-alice-bob"]);
    assert_eq!(
        https["allowedRoutes"]["kinds"],
        json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}])
    );
    c.namespace(
        "tenant-alice-new",
        &[
            ("namespace.cozystack.io/host", "new.alice.example.org"),
            ("namespace.cozystack.io/gateway", "tenant-alice"),
        ],
    );
    c.wait(
        "a new inheriting namespace in the port-443 selector",
        || {
            let gw = c.get("gateway", "tenant-alice", "gw")?;
            (selector_values(listener(&gw, "https-registry")?)
                == ["tenant-alice", "tenant-alice-bob", "tenant-alice-new"])
            .then_some(())
        },
    );
    c.apply(&tgw(
        "tenant-alice",
        "gw",
        json!({"apex": "alice.example.org", "tlsPassthroughServices": ["db"]}),
    ));
    let gw = c.wait("listener tls-db", || {
        let gw = c.get("gateway", "tenant-alice", "gw")?;
        listener(&gw, "tls-db").is_some().then_some(gw)
    });
    let tls = listener(&gw, "tls-db").expect("tls-db");
    assert_eq!(tls["protocol"], "TLS");
    assert_eq!(tls["hostname"], "db.alice.example.org");
    assert_eq!(tls["tls"]["mode"], "Passthrough");
    assert_eq!(
        tls["allowedRoutes"]["kinds"],
        json!([{"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}])
    );
    assert_eq!(
        listeners(&gw).last().map(|l| l.0.clone()),
        Some("tls-db".to_string()),
        "passthrough listeners come last"
    );
}

fn cert_refs(l: &Value) -> Vec<String> {
    l["tls"]["certificateRefs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// dns01 with two inheriting children: https, https-apex, two https-child-…, one Certificate
/// with six SANs; existingSecret: owned Issuer and Certificate deleted, every HTTPS listener
/// on the Secret; back to http01: per-host Certificates.
fn dns01_existing_secret_and_back(c: &Cluster) {
    c.namespace(
        "tenant-dave",
        &[("namespace.cozystack.io/host", "dave.example.org")],
    );
    for child in ["a", "b"] {
        c.namespace(
            &format!("tenant-dave-{child}"),
            &[
                (
                    "namespace.cozystack.io/host",
                    &format!("{child}.dave.example.org"),
                ),
                ("namespace.cozystack.io/gateway", "tenant-dave"),
            ],
        );
    }
    c.apply(&http_route(
        "tenant-dave",
        "app",
        ("tenant-dave", "gw"),
        &["app.dave.example.org"],
    ));
    c.apply(&tgw(
        "tenant-dave",
        "gw",
        json!({"apex": "dave.example.org", "certMode": "dns01",
               "dns01": {"provider": "cloudflare",
                         "cloudflare": {"apiTokenSecretRef": {"name": "cf", "key": "token"}}}}),
    ));
    let expected: Vec<String> = vec![
        "http".into(),
        "https".into(),
        "https-apex".into(),
        format!("https-child-a-{}", h8("a.dave.example.org")),
        format!("https-child-b-{}", h8("b.dave.example.org")),
    ];
    c.wait("dns01 listeners", || {
        let gw = c.get("gateway", "tenant-dave", "gw")?;
        let names: Vec<String> = listeners(&gw).into_iter().map(|l| l.0).collect();
        (names == expected).then_some(())
    });
    let cert = c.wait("the wildcard Certificate", || {
        c.get("certificate", "tenant-dave", "gw-gateway-tls")
    });
    let mut sans: Vec<String> = cert["spec"]["dnsNames"]
        .as_array()
        .expect("dnsNames")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    sans.sort();
    assert_eq!(
        sans,
        [
            "*.a.dave.example.org",
            "*.b.dave.example.org",
            "*.dave.example.org",
            "a.dave.example.org",
            "b.dave.example.org",
            "dave.example.org"
        ]
    );
    let issuer = c
        .get("issuer", "tenant-dave", "gw-gateway")
        .expect("issuer");
    assert!(issuer["spec"]["acme"]["solvers"][0]["dns01"]["cloudflare"].is_object());

    c.apply(&tgw(
        "tenant-dave",
        "gw",
        json!({"apex": "dave.example.org", "certMode": "existingSecret",
               "wildcardSecretRef": {"name": "wild"}}),
    ));
    c.wait(
        "existingSecret: Issuer and Certificate deleted, listeners on the Secret",
        || {
            let gw = c.get("gateway", "tenant-dave", "gw")?;
            let https: Vec<&Value> = gw["spec"]["listeners"]
                .as_array()?
                .iter()
                .filter(|l| l["protocol"] == "HTTPS")
                .collect();
            let on_secret = https.len() == 4 && https.iter().all(|l| cert_refs(l) == ["wild"]);
            (on_secret
                && c.get("issuer", "tenant-dave", "gw-gateway").is_none()
                && c.get("certificate", "tenant-dave", "gw-gateway-tls")
                    .is_none())
            .then_some(())
        },
    );

    c.apply(&tgw(
        "tenant-dave",
        "gw",
        json!({"apex": "dave.example.org"}),
    ));
    c.wait("http01 again: per-host Certificate", || {
        let gw = c.get("gateway", "tenant-dave", "gw")?;
        let l = listener(&gw, "https-app")?;
        (cert_refs(l) == ["gw-app-tls"]
            && c.get("certificate", "tenant-dave", "gw-app-tls").is_some()
            && c.get("issuer", "tenant-dave", "gw-gateway").is_some())
        .then_some(())
    });
}

/// 70 routes with distinct hostnames: exactly 64 listeners; the rest ListenerLimitReached;
/// ListenerCapacity=False; route 71 evicts nothing.
fn listener_cap_of_64(c: &Cluster) {
    c.namespace(
        "tenant-erin",
        &[("namespace.cozystack.io/host", "erin.example.org")],
    );
    c.apply(&tgw(
        "tenant-erin",
        "gw",
        json!({"apex": "erin.example.org"}),
    ));
    let items: Vec<Value> = (0..70)
        .map(|i| {
            http_route(
                "tenant-erin",
                &format!("r{i:02}"),
                ("tenant-erin", "gw"),
                &[&format!("h{i:02}.erin.example.org")],
            )
        })
        .collect();
    c.apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}));
    let gw = c.wait("64 listeners", || {
        let gw = c.get("gateway", "tenant-erin", "gw")?;
        (listeners(&gw).len() == 64).then_some(gw)
    });
    let before: Vec<_> = listeners(&gw);
    let over = c.wait("6 or 7 routes over the cap, the TGW says so", || {
        let o = c.cp.kubectl(
            &["get", "httproute", "-n", "tenant-erin", "-o", "json"],
            None,
        );
        let list: Value = serde_json::from_str(&o.stdout).ok()?;
        let reasons: Vec<(String, String)> = list["items"]
            .as_array()?
            .iter()
            .filter_map(|r| route_condition(r, "Accepted"))
            .collect();
        let over = reasons
            .iter()
            .filter(|r| r.1 == "ListenerLimitReached")
            .count();
        let accepted = reasons.iter().filter(|r| r.0 == "True").count();
        let t = c.get("tenantgateway", "tenant-erin", "gw")?;
        let cap = tgw_condition(&t, "ListenerCapacity")?;
        (reasons.len() == 70 && accepted == 63 && over == 7 && cap.0 == "False").then_some(over)
    });
    assert_eq!(over, 7);
    wait_event(c, "tenant-erin", "ListenerLimitReached");
    c.apply(&http_route(
        "tenant-erin",
        "r70",
        ("tenant-erin", "gw"),
        &["a.erin.example.org"],
    ));
    c.wait("route 71 over the cap", || {
        let r = c.get("httproute", "tenant-erin", "r70")?;
        (route_condition(&r, "Accepted")?.1 == "ListenerLimitReached").then_some(())
    });
    let after = listeners(&c.get("gateway", "tenant-erin", "gw").expect("gateway"));
    assert_eq!(before, after, "route 71 evicted a listener");
}

/// http01: route harbor.alice.example.org → listener https-harbor, Certificate
/// gw-harbor-tls, route Accepted=True; an inheriting namespace's route gets hashed names;
/// deleting the route removes listener and Certificate.
fn http01_listener_certificate_and_route_status(c: &Cluster) {
    c.namespace(
        "tenant-alice",
        &[("namespace.cozystack.io/host", "alice.example.org")],
    );
    c.namespace(
        "tenant-alice-bob",
        &[
            ("namespace.cozystack.io/host", "bob.alice.example.org"),
            ("namespace.cozystack.io/gateway", "tenant-alice"),
        ],
    );
    c.apply(&tgw(
        "tenant-alice",
        "gw",
        json!({"apex": "alice.example.org"}),
    ));
    c.apply(&http_route(
        "tenant-alice",
        "harbor",
        ("tenant-alice", "gw"),
        &["harbor.alice.example.org"],
    ));
    let gw = c.wait("listener https-harbor", || {
        let gw = c.get("gateway", "tenant-alice", "gw")?;
        listeners(&gw)
            .contains(&(
                "https-harbor".into(),
                Some("harbor.alice.example.org".into()),
            ))
            .then_some(gw)
    });
    assert_eq!(listeners(&gw)[0].0, "http", "port 80 first: {gw}");
    assert!(
        gw["spec"].get("allowedListeners").is_none(),
        "never allowedListeners"
    );
    let cert = c.wait("Certificate gw-harbor-tls", || {
        c.get("certificate", "tenant-alice", "gw-harbor-tls")
    });
    assert_eq!(
        cert["spec"]["dnsNames"],
        json!(["harbor.alice.example.org"])
    );
    assert_eq!(cert["spec"]["secretName"], "gw-harbor-tls");
    c.wait("route Accepted=True", || {
        let r = c.get("httproute", "tenant-alice", "harbor")?;
        (route_condition(&r, "Accepted")?.0 == "True").then_some(())
    });
    assert!(c.get("issuer", "tenant-alice", "gw-gateway").is_some());
    assert!(
        c.get("httproute", "tenant-alice", "gw-http-redirect")
            .is_some()
    );

    // An inheriting namespace's deeper hostname: hashed names.
    let host = "harbor.bob.alice.example.org";
    c.apply(&http_route(
        "tenant-alice-bob",
        "harbor",
        ("tenant-alice", "gw"),
        &[host],
    ));
    let listener = format!("https-harbor-{}", h8(host));
    c.wait("hashed listener for the inheriting namespace", || {
        let gw = c.get("gateway", "tenant-alice", "gw")?;
        listeners(&gw)
            .contains(&(listener.clone(), Some(host.into())))
            .then_some(())
    });
    let cert_name = format!("gw-harbor-{}-tls", h8(host));
    c.wait("hashed Certificate", || {
        c.get("certificate", "tenant-alice", &cert_name)
    });

    // Deleting the route removes its listener and Certificate.
    c.delete("httproute", "tenant-alice-bob", "harbor");
    c.wait("listener and Certificate gone with the route", || {
        let gw = c.get("gateway", "tenant-alice", "gw")?;
        let gone = !listeners(&gw).iter().any(|(n, _)| n == &listener)
            && c.get("certificate", "tenant-alice", &cert_name).is_none();
        gone.then_some(())
    });
}

/// Ready=True once the Gateway is Programmed and every Certificate Ready; observedGeneration.
fn ready_once_gateway_programmed_and_certificates_ready(c: &Cluster) {
    let t = c.get("tenantgateway", "tenant-alice", "gw").expect("tgw");
    assert_eq!(
        tgw_condition(&t, "Ready").map(|c| c.0),
        Some("False".to_string()),
        "not ready before the data plane and cert-manager answered: {}",
        t["status"]
    );
    program_gateway(c, "tenant-alice", "gw");
    certificate_ready(c, "tenant-alice", "gw-harbor-tls");
    let t = c.wait("TenantGateway Ready=True", || {
        let t = c.get("tenantgateway", "tenant-alice", "gw")?;
        (tgw_condition(&t, "Ready")?.0 == "True").then_some(t)
    });
    assert_eq!(
        t["status"]["observedGeneration"], t["metadata"]["generation"],
        "observedGeneration: {}",
        t["status"]
    );
    assert_eq!(
        tgw_condition(&t, "Programmed").map(|c| c.0),
        Some("True".into())
    );
    let ls = t["status"]["listeners"]
        .as_array()
        .expect("listener status");
    assert!(
        ls.iter()
            .any(|l| l["name"] == "https-harbor" && l["ready"] == true),
        "{ls:?}"
    );
}

/// Everything the reconciler manages for tenant-alice/gw, by resourceVersion.
fn versions(c: &Cluster) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (kind, ns, name) in [
        ("tenantgateway", "tenant-alice", "gw"),
        ("gateway", "tenant-alice", "gw"),
        ("issuer", "tenant-alice", "gw-gateway"),
        ("certificate", "tenant-alice", "gw-harbor-tls"),
        ("httproute", "tenant-alice", "gw-http-redirect"),
        ("httproute", "tenant-alice", "harbor"),
    ] {
        let o = c.get(kind, ns, name).expect("object exists");
        out.insert(format!("{kind} {ns}/{name}"), rv(&o));
    }
    let ns = c
        .get_cluster("namespace", "tenant-alice")
        .expect("namespace");
    out.insert("namespace tenant-alice".into(), rv(&ns));
    out
}

/// An unchanged world reconciled again (annotation poke, an unrelated namespace relabelled)
/// changes no resourceVersion and issues no write.
fn unchanged_world_issues_no_writes(c: &Cluster, m: &Metrics) {
    // Converged: two reconciles in a row without writes.
    c.wait("converged", || {
        let before = writes_total(m);
        let r = reconciles_total(m);
        c.cp.kubectl_ok(
            &[
                "annotate",
                "--overwrite",
                "tenantgateway",
                "-n",
                "tenant-alice",
                "gw",
                &format!("e2e/converge={r}"),
            ],
            None,
        );
        poll(WAIT, "a reconcile after the poke", || {
            (reconciles_total(m) > r).then_some(())
        });
        (writes_total(m) == before).then_some(())
    });
    let before = versions(c);
    let writes = writes_total(m);
    let r = reconciles_total(m);
    c.cp.kubectl_ok(
        &[
            "annotate",
            "--overwrite",
            "tenantgateway",
            "-n",
            "tenant-alice",
            "gw",
            "e2e/poke=1",
        ],
        None,
    );
    c.namespace("e2e-unrelated", &[("e2e/x", "1")]);
    c.namespace("e2e-unrelated", &[("e2e/x", "2")]);
    c.wait("a reconcile after the poke", || {
        (reconciles_total(m) > r).then_some(())
    });
    // The poke itself changed the TenantGateway's resourceVersion; nothing else may change.
    let mut after = versions(c);
    let mut before = before;
    before.remove("tenantgateway tenant-alice/gw");
    after.remove("tenantgateway tenant-alice/gw");
    assert_eq!(before, after, "an unchanged world changed resourceVersions");
    assert_eq!(writes_total(m), writes, "an unchanged world issued writes");
}

/// A Gateway named like the TenantGateway's but not owned by it: left alone, reported.
fn same_named_gateway_not_owned_is_left_alone(c: &Cluster) {
    c.namespace(
        "tenant-carol",
        &[("namespace.cozystack.io/host", "carol.example.org")],
    );
    c.apply(
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "tenant-carol"},
        "spec": {"gatewayClassName": "other",
                 "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}),
    );
    let before = c.get("gateway", "tenant-carol", "gw").expect("gateway");
    c.apply(&tgw(
        "tenant-carol",
        "gw",
        json!({"apex": "carol.example.org"}),
    ));
    let t = c.wait("NotOwned reported", || {
        let t = c.get("tenantgateway", "tenant-carol", "gw")?;
        let (s, reason, _) = tgw_condition(&t, "Programmed")?;
        (s == "False" && reason == "NotOwned").then_some(t)
    });
    assert_eq!(
        tgw_condition(&t, "Ready").map(|c| c.0),
        Some("False".into())
    );
    let after = c.get("gateway", "tenant-carol", "gw").expect("gateway");
    assert_eq!(rv(&before), rv(&after), "the foreign Gateway was written");
    assert_eq!(after["spec"]["gatewayClassName"], "other");
    wait_event(c, "tenant-carol", "TakeoverRefused");

    // One TenantGateway per namespace: a second one says Duplicate and renders nothing.
    c.apply(&tgw(
        "tenant-carol",
        "second",
        json!({"apex": "carol.example.org"}),
    ));
    c.wait("the second TenantGateway reports Duplicate", || {
        let t = c.get("tenantgateway", "tenant-carol", "second")?;
        let (s, reason, _) = tgw_condition(&t, "Ready")?;
        (s == "False" && reason == "Duplicate").then_some(())
    });
    assert!(c.get("gateway", "tenant-carol", "second").is_none());
    assert!(c.get("issuer", "tenant-carol", "second-gateway").is_none());

    // Deleting the Duplicate leaves the publisher's namespace marks alone: they name the
    // namespace, not the TenantGateway, and the Duplicate wrote none (its finalizer ran all
    // the same). The marked namespace is not written at all.
    c.namespace("cozy-carol-extra", &[]);
    c.apply(&tgw(
        "tenant-carol",
        "gw",
        json!({"apex": "carol.example.org", "attachedNamespaces": ["cozy-carol-extra"]}),
    ));
    let marked = c.wait("gw attaches cozy-carol-extra", || {
        let ns = c.get_cluster("namespace", "cozy-carol-extra")?;
        (ns["metadata"]["annotations"]["gateway.cozystack.io/attached-by"] == "tenant-carol")
            .then_some(ns)
    });
    c.wait("the Duplicate carries the finalizer", || {
        let t = c.get("tenantgateway", "tenant-carol", "second")?;
        t["metadata"]["finalizers"]
            .as_array()?
            .iter()
            .any(|f| f == "gateway.cozystack.io/cleanup")
            .then_some(())
    });
    c.delete("tenantgateway", "tenant-carol", "second");
    c.wait("the Duplicate is gone", || {
        c.get("tenantgateway", "tenant-carol", "second")
            .is_none()
            .then_some(())
    });
    let after = c
        .get_cluster("namespace", "cozy-carol-extra")
        .expect("namespace");
    assert_eq!(
        rv(&marked),
        rv(&after),
        "the Duplicate's deletion wrote the publisher's attached namespace: {after}"
    );
}

/// A Warning event with `reason` on a TenantGateway in `ns`.
fn wait_event(c: &Cluster, ns: &str, reason: &str) {
    c.wait(&format!("a {reason} event in {ns}"), || {
        let o = c.cp.kubectl(
            &["get", "events.events.k8s.io", "-n", ns, "-o", "json"],
            None,
        );
        let list: Value = serde_json::from_str(&o.stdout).ok()?;
        list["items"]
            .as_array()?
            .iter()
            .any(|e| e["reason"] == reason && e["regarding"]["kind"] == "TenantGateway")
            .then_some(())
    });
}

/// cozy-harbor and tenant-alice-x claim one hostname: cozy wins; when it goes, the other is
/// accepted.
fn conflict_cozy_wins_then_loser_accepted(c: &Cluster) {
    c.namespace(
        "tenant-root",
        &[("namespace.cozystack.io/host", "example.org")],
    );
    c.namespace("cozy-harbor", &[]);
    c.namespace(
        "tenant-alice-x",
        &[
            ("namespace.cozystack.io/host", "x.example.org"),
            ("namespace.cozystack.io/gateway", "tenant-root"),
        ],
    );
    c.apply(&tgw(
        "tenant-root",
        "gw",
        json!({"apex": "example.org", "attachedNamespaces": ["cozy-harbor"]}),
    ));
    let host = "harbor.example.org";
    c.apply(&http_route(
        "tenant-alice-x",
        "harbor",
        ("tenant-root", "gw"),
        &[host],
    ));
    c.wait("the tenant route accepted while alone", || {
        let r = c.get("httproute", "tenant-alice-x", "harbor")?;
        (route_condition(&r, "Accepted")?.0 == "True").then_some(())
    });
    c.wait("cozy-harbor attached by label", || {
        let ns = c.get_cluster("namespace", "cozy-harbor")?;
        (ns["metadata"]["labels"]["namespace.cozystack.io/gateway"] == "tenant-root").then_some(())
    });
    c.apply(&http_route(
        "cozy-harbor",
        "harbor",
        ("tenant-root", "gw"),
        &[host],
    ));
    c.wait("cozy wins, the tenant route shows HostnameConflict", || {
        let loser = c.get("httproute", "tenant-alice-x", "harbor")?;
        let winner = c.get("httproute", "cozy-harbor", "harbor")?;
        let l = route_condition(&loser, "Accepted")?;
        let w = route_condition(&winner, "Accepted")?;
        (l == ("False".into(), "HostnameConflict".into()) && w.0 == "True").then_some(())
    });
    wait_event(c, "tenant-root", "HostnameConflict");
    c.delete("httproute", "cozy-harbor", "harbor");
    c.wait("the loser becomes Accepted", || {
        let r = c.get("httproute", "tenant-alice-x", "harbor")?;
        (route_condition(&r, "Accepted")?.0 == "True").then_some(())
    });
}

/// Deleting the TenantGateway removes the namespace labels, annotations and route status
/// entries it wrote (owned objects go by garbage collection, which this API server alone
/// does not run).
fn deleting_the_tgw_removes_what_it_wrote(c: &Cluster) {
    let ns = c.get_cluster("namespace", "cozy-harbor").expect("ns");
    assert_eq!(
        ns["metadata"]["annotations"]["gateway.cozystack.io/attached-by"], "tenant-root",
        "{}",
        ns["metadata"]
    );
    c.delete("tenantgateway", "tenant-root", "gw");
    c.wait("the TenantGateway gone (finalizer done)", || {
        c.get("tenantgateway", "tenant-root", "gw")
            .is_none()
            .then_some(())
    });
    let ns = c.get_cluster("namespace", "cozy-harbor").expect("ns");
    assert!(
        ns["metadata"]["labels"]
            .get("namespace.cozystack.io/gateway")
            .is_none()
            && ns["metadata"]["annotations"]
                .get("gateway.cozystack.io/attached-by")
                .is_none(),
        "label/annotation left: {}",
        ns["metadata"]
    );
    let root = c.get_cluster("namespace", "tenant-root").expect("ns");
    assert!(
        root["metadata"]["annotations"]
            .get("gateway.cozystack.io/attached-by")
            .is_none(),
        "{}",
        root["metadata"]
    );
    let r = c
        .get("httproute", "tenant-alice-x", "harbor")
        .expect("route");
    assert_eq!(
        route_condition(&r, "Accepted"),
        None,
        "our entry left: {}",
        r["status"]
    );
}

/// Issue 20 item 1, the attacker's exact objects: a TenantGateway in a tenant namespace with
/// `apex: "a"` listing the root's platform namespaces is InvalidSpec and claims nothing; a
/// valid one with a shorter custom apex does not steal an existing attachment either. The
/// dashboard listener stays on the root Gateway and its route keeps its status.
fn platform_namespaces_stay_with_the_root(c: &Cluster) {
    c.namespace(
        "tenant-root",
        &[("namespace.cozystack.io/host", "example.org")],
    );
    c.namespace("cozy-dashboard", &[]);
    c.namespace("cozy-keycloak", &[]);
    c.apply(&tgw(
        "tenant-root",
        "root",
        json!({"apex": "example.org", "attachedNamespaces": ["cozy-dashboard", "cozy-keycloak"]}),
    ));
    c.apply(&http_route(
        "cozy-dashboard",
        "dashboard",
        ("tenant-root", "root"),
        &["dashboard.example.org"],
    ));
    let attached_to_root = |name: &str| {
        let ns = c.get_cluster("namespace", name)?;
        (ns["metadata"]["labels"]["namespace.cozystack.io/gateway"] == "tenant-root").then_some(())
    };
    let dashboard_served = || {
        let gw = c.get("gateway", "tenant-root", "root")?;
        let r = c.get("httproute", "cozy-dashboard", "dashboard")?;
        let listed = listeners(&gw)
            .iter()
            .any(|(_, h)| h.as_deref() == Some("dashboard.example.org"));
        (listed && route_condition(&r, "Accepted")?.0 == "True").then_some(())
    };
    c.wait("the root attaches its platform namespaces", || {
        attached_to_root("cozy-dashboard")?;
        attached_to_root("cozy-keycloak")?;
        dashboard_served()
    });

    c.namespace(
        "tenant-mallory",
        &[("namespace.cozystack.io/host", "mallory.example.org")],
    );
    c.apply(&tgw(
        "tenant-mallory",
        "gw",
        json!({"apex": "a", "attachedNamespaces": ["cozy-dashboard", "cozy-keycloak"]}),
    ));
    c.wait("the attacker's TenantGateway is InvalidSpec", || {
        let t = c.get("tenantgateway", "tenant-mallory", "gw")?;
        let ready = tgw_condition(&t, "Ready")?;
        (ready.1 == "InvalidSpec").then_some(())
    });
    // A valid TenantGateway with a shorter custom apex, listing the same namespaces.
    c.namespace("tenant-short", &[("namespace.cozystack.io/host", "x.io")]);
    c.apply(&tgw(
        "tenant-short",
        "gw",
        json!({"apex": "x.io", "attachedNamespaces": ["cozy-dashboard"]}),
    ));
    let t = c.wait(
        "the shorter apex is told its entry is held elsewhere",
        || {
            let t = c.get("tenantgateway", "tenant-short", "gw")?;
            let attached = tgw_condition(&t, "NamespacesAttached")?;
            (attached.0 == "False").then_some(t)
        },
    );
    let (_, _, message) = tgw_condition(&t, "NamespacesAttached").expect("condition");
    assert!(message.contains("cozy-dashboard"), "{message}");
    assert!(
        !message.contains("tenant-root"),
        "the message names the holder: {message}"
    );
    // Both were reconciled (statuses above); the root kept everything.
    attached_to_root("cozy-dashboard").expect("cozy-dashboard detached from the root");
    attached_to_root("cozy-keycloak").expect("cozy-keycloak detached from the root");
    dashboard_served().expect("the dashboard left the root Gateway or lost its status");
    for ns in ["tenant-mallory", "tenant-short"] {
        assert!(
            c.get("gateway", ns, "gw").is_none_or(|gw| !listeners(&gw)
                .iter()
                .any(|(_, h)| h.as_deref() == Some("dashboard.example.org"))),
            "{ns} took the dashboard hostname"
        );
    }
    c.delete("tenantgateway", "tenant-mallory", "gw");
    c.delete("tenantgateway", "tenant-short", "gw");
}

/// Issue 20 item 5: a forged `gateway.cozystack.io/attached-by` on a tenant namespace whose
/// gateway label the platform wrote (no mark of ours) does not make the root TenantGateway
/// remove that label.
fn forged_attached_by_is_ignored(c: &Cluster) {
    c.namespace(
        "tenant-bob",
        &[
            ("namespace.cozystack.io/host", "bob.example.org"),
            ("namespace.cozystack.io/gateway", "tenant-root"),
        ],
    );
    c.apply(&http_route(
        "tenant-bob",
        "site",
        ("tenant-root", "root"),
        &["bob.example.org"],
    ));
    let bob_served = || {
        let gw = c.get("gateway", "tenant-root", "root")?;
        let r = c.get("httproute", "tenant-bob", "site")?;
        let listed = listeners(&gw)
            .iter()
            .any(|(_, h)| h.as_deref() == Some("bob.example.org"));
        (listed && route_condition(&r, "Accepted")?.0 == "True").then_some(())
    };
    c.wait("bob's site on the root Gateway", bob_served);
    // The attacker's patch (the webhook is not registered here: the reconciler alone).
    c.cp.kubectl_ok(
        &[
            "annotate",
            "namespace",
            "tenant-bob",
            "gateway.cozystack.io/attached-by=tenant-root",
        ],
        None,
    );
    // Make the root reconcile after the forgery: a spec change whose effect is visible.
    c.apply(&tgw(
        "tenant-root",
        "root",
        json!({"apex": "example.org", "attachedNamespaces": ["cozy-dashboard", "cozy-keycloak"],
               "tlsPassthroughServices": ["forged-probe"]}),
    ));
    c.wait("the root reconciled after the forgery", || {
        let gw = c.get("gateway", "tenant-root", "root")?;
        listeners(&gw)
            .iter()
            .any(|(n, _)| n == "tls-forged-probe")
            .then_some(())
    });
    let t = c.wait("the root's status caught up", || {
        let t = c.get("tenantgateway", "tenant-root", "root")?;
        (t["status"]["observedGeneration"] == t["metadata"]["generation"]).then_some(t)
    });
    let ns = c.get_cluster("namespace", "tenant-bob").expect("namespace");
    assert_eq!(
        ns["metadata"]["labels"]["namespace.cozystack.io/gateway"], "tenant-root",
        "the root removed the platform-written label: {} ({})",
        ns["metadata"], t["status"]
    );
    bob_served().expect("bob's site left the root Gateway");
}

fn route_with_parents(ns: &str, name: &str, host: &str, n: usize) -> Value {
    let parents: Vec<Value> = (0..n)
        .map(|i| json!({"name": "root", "namespace": "tenant-root", "sectionName": format!("s{i:02}")}))
        .collect();
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": parents, "hostnames": [host],
                 "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}})
}

/// Issue 20 item 7, the attacker's sequence: a route with 31 parentRefs to the shared root
/// Gateway, one foreign status entry, then 32 parentRefs. Our entries fill the room left,
/// the foreign one stays, the TenantGateway says so, and the root keeps reconciling.
fn route_status_never_exceeds_32_parents(c: &Cluster) {
    c.apply(&route_with_parents(
        "tenant-bob",
        "many",
        "many.bob.example.org",
        31,
    ));
    let r = c.wait("31 entries of ours", || {
        let r = c.get("httproute", "tenant-bob", "many")?;
        let ours = r["status"]["parents"]
            .as_array()?
            .iter()
            .filter(|p| p["controllerName"] == CONTROLLER_NAME)
            .count();
        (ours == 31).then_some(r)
    });
    let mut parents = r["status"]["parents"].as_array().expect("parents").clone();
    parents.push(
        json!({"parentRef": {"name": "elsewhere", "namespace": "tenant-bob"},
        "controllerName": "example.com/other-controller",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
    );
    c.patch_status(
        "httproute",
        "tenant-bob",
        "many",
        &json!({"status": {"parents": parents}}),
    );
    c.apply(&route_with_parents(
        "tenant-bob",
        "many",
        "many.bob.example.org",
        32,
    ));
    let t = c.wait("the root says a route has no room", || {
        let t = c.get("tenantgateway", "tenant-root", "root")?;
        let cond = tgw_condition(&t, "RouteStatus")?;
        (cond.0 == "False" && cond.2.contains("tenant-bob/many")).then_some(t)
    });
    let r = c.get("httproute", "tenant-bob", "many").expect("route");
    let parents = r["status"]["parents"].as_array().expect("parents");
    assert!(parents.len() <= 32, "{} entries", parents.len());
    assert!(
        parents
            .iter()
            .any(|p| p["controllerName"] == "example.com/other-controller"),
        "the foreign entry was dropped: {}",
        r["status"]
    );
    assert_eq!(
        parents
            .iter()
            .filter(|p| p["controllerName"] == CONTROLLER_NAME)
            .count(),
        31,
        "{}",
        t["status"]
    );
    // Nothing else froze: a new route on the same Gateway is served and accepted.
    c.apply(&http_route(
        "tenant-bob",
        "after-many",
        ("tenant-root", "root"),
        &["after.bob.example.org"],
    ));
    c.wait("the root still reconciles other routes", || {
        let gw = c.get("gateway", "tenant-root", "root")?;
        let r = c.get("httproute", "tenant-bob", "after-many")?;
        let listed = listeners(&gw)
            .iter()
            .any(|(_, h)| h.as_deref() == Some("after.bob.example.org"));
        (listed && route_condition(&r, "Accepted")?.0 == "True").then_some(())
    });
    c.delete("httproute", "tenant-bob", "many");
    c.delete("httproute", "tenant-bob", "after-many");
}

/// Issue 20 item 8, the attacker's objects: 70 routes from one tenant on the shared root
/// Gateway, then a later tenant's route and a `cozy-*` route: both get a listener (the cozy
/// first, then the max-min fair share); the flooding tenant is the one cut.
fn one_tenant_cannot_take_every_listener(c: &Cluster) {
    let items: Vec<Value> = (0..70)
        .map(|i| {
            http_route(
                "tenant-bob",
                &format!("flood{i:02}"),
                ("tenant-root", "root"),
                &[&format!("f{i:02}.bob.example.org")],
            )
        })
        .collect();
    c.apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}));
    c.wait("the flood fills the Gateway", || {
        let t = c.get("tenantgateway", "tenant-root", "root")?;
        (tgw_condition(&t, "ListenerCapacity")?.0 == "False").then_some(())
    });
    c.namespace(
        "tenant-late",
        &[
            ("namespace.cozystack.io/host", "late.example.org"),
            ("namespace.cozystack.io/gateway", "tenant-root"),
        ],
    );
    c.apply(&http_route(
        "tenant-late",
        "shop",
        ("tenant-root", "root"),
        &["shop.late.example.org"],
    ));
    c.apply(&http_route(
        "cozy-keycloak",
        "keycloak",
        ("tenant-root", "root"),
        &["keycloak.example.org"],
    ));
    c.wait("the later tenant and the cozy route are served", || {
        let gw = c.get("gateway", "tenant-root", "root")?;
        let hosts: Vec<Option<String>> = listeners(&gw).into_iter().map(|(_, h)| h).collect();
        let late = c.get("httproute", "tenant-late", "shop")?;
        let keycloak = c.get("httproute", "cozy-keycloak", "keycloak")?;
        (hosts.len() <= 64
            && hosts.contains(&Some("shop.late.example.org".to_string()))
            && hosts.contains(&Some("keycloak.example.org".to_string()))
            && route_condition(&late, "Accepted")?.0 == "True"
            && route_condition(&keycloak, "Accepted")?.0 == "True")
            .then_some(())
    });
    let o = c.cp.kubectl(
        &["get", "httproute", "-n", "tenant-bob", "-o", "json"],
        None,
    );
    let list: Value = serde_json::from_str(&o.stdout).expect("json");
    let cut = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|r| route_condition(r, "Accepted").is_some_and(|a| a.1 == "ListenerLimitReached"))
        .count();
    assert!(cut > 0, "the flooding tenant kept every listener");
    let gw = c.get("gateway", "tenant-root", "root").expect("gateway");
    assert!(listeners(&gw).len() <= 64);
    for i in 0..70 {
        c.delete("httproute", "tenant-bob", &format!("flood{i:02}"));
    }
    c.delete("httproute", "tenant-late", "shop");
    c.delete("httproute", "cozy-keycloak", "keycloak");
    c.wait("the flood gone, capacity back", || {
        let t = c.get("tenantgateway", "tenant-root", "root")?;
        (tgw_condition(&t, "ListenerCapacity")?.0 == "True").then_some(())
    });
}

/// Issue 20 item 9: a parent tenant's route claiming `shop.kid.alice.example.org`, older
/// than the child's, does not take it from `tenant-alice-kid`, whose apex is
/// `kid.alice.example.org` — although `tenant-alice` sorts first.
fn the_child_owning_the_apex_wins(c: &Cluster) {
    let host = "shop.kid.alice.example.org";
    c.apply(&http_route(
        "tenant-alice",
        "takes-kid",
        ("tenant-alice", "gw"),
        &[host],
    ));
    c.wait("the parent's route accepted while alone", || {
        let r = c.get("httproute", "tenant-alice", "takes-kid")?;
        (route_condition(&r, "Accepted")?.0 == "True").then_some(())
    });
    c.namespace(
        "tenant-alice-kid",
        &[
            ("namespace.cozystack.io/host", "kid.alice.example.org"),
            ("namespace.cozystack.io/gateway", "tenant-alice"),
        ],
    );
    c.apply(&http_route(
        "tenant-alice-kid",
        "shop",
        ("tenant-alice", "gw"),
        &[host],
    ));
    c.wait(
        "the child wins its own apex, the parent shows HostnameConflict",
        || {
            let parent = c.get("httproute", "tenant-alice", "takes-kid")?;
            let kid = c.get("httproute", "tenant-alice-kid", "shop")?;
            let p = route_condition(&parent, "Accepted")?;
            let k = route_condition(&kid, "Accepted")?;
            (p == ("False".into(), "HostnameConflict".into()) && k.0 == "True").then_some(())
        },
    );
    c.delete("httproute", "tenant-alice", "takes-kid");
    c.delete("httproute", "tenant-alice-kid", "shop");
}

/// SPEC §3.7 failure isolation on the real API server: an admission policy denies one
/// Certificate (as a webhook or a quota could); the TenantGateway's other writes go on, its
/// status and an event name the object, and once the denial is lifted the object is retried
/// on its own and created.
fn one_failed_write_stops_nothing_else(c: &Cluster) {
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "e2e-deny-one-certificate"},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["cert-manager.io"],
                "apiVersions": ["*"], "resources": ["certificates"],
                "operations": ["CREATE", "UPDATE"]}]},
            "validations": [{"expression": "object.metadata.name != 'gw-denied-tls'",
                "message": "e2e: this Certificate is refused"}]}});
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "e2e-deny-one-certificate"},
        "spec": {"policyName": "e2e-deny-one-certificate", "validationActions": ["Deny"]}});
    c.apply(&policy);
    c.apply(&binding);
    let probe = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": "gw-denied-tls", "namespace": "tenant-alice"},
        "spec": {"secretName": "gw-denied-tls", "dnsNames": ["denied.alice.example.org"],
                 "issuerRef": {"name": "gw-gateway", "kind": "Issuer"}}});
    c.wait("the policy denies the Certificate", || {
        let o =
            c.cp.dry_run("admin", &["system:masters"], &probe.to_string());
        (!o.allowed && o.stderr.contains("this Certificate is refused")).then_some(())
    });
    c.apply(&http_route(
        "tenant-alice",
        "denied",
        ("tenant-alice", "gw"),
        &["denied.alice.example.org"],
    ));
    c.apply(&http_route(
        "tenant-alice",
        "fine",
        ("tenant-alice", "gw"),
        &["fine.alice.example.org"],
    ));
    c.wait(
        "the other writes went on; the status names the refused one",
        || {
            let gw = c.get("gateway", "tenant-alice", "gw")?;
            let t = c.get("tenantgateway", "tenant-alice", "gw")?;
            let fine = c.get("httproute", "tenant-alice", "fine")?;
            let ready = tgw_condition(&t, "Ready")?;
            let listed = listeners(&gw)
                .iter()
                .any(|(_, h)| h.as_deref() == Some("fine.alice.example.org"));
            (listed
                && c.get("certificate", "tenant-alice", "gw-fine-tls")
                    .is_some()
                && route_condition(&fine, "Accepted")?.0 == "True"
                && ready.1 == "WriteFailed"
                && ready.2.contains("gw-denied-tls"))
            .then_some(())
        },
    );
    assert!(
        c.get("certificate", "tenant-alice", "gw-denied-tls")
            .is_none()
    );
    wait_event(c, "tenant-alice", "WriteFailed");
    c.cp.kubectl_ok(
        &[
            "delete",
            "validatingadmissionpolicybinding",
            "e2e-deny-one-certificate",
        ],
        None,
    );
    c.wait(
        "the refused Certificate is retried on its own and created",
        || c.get("certificate", "tenant-alice", "gw-denied-tls"),
    );
    c.wait("the status no longer names it", || {
        let t = c.get("tenantgateway", "tenant-alice", "gw")?;
        (tgw_condition(&t, "Ready")?.1 != "WriteFailed").then_some(())
    });
    c.cp.kubectl_ok(
        &[
            "delete",
            "validatingadmissionpolicy",
            "e2e-deny-one-certificate",
        ],
        None,
    );
    c.delete("httproute", "tenant-alice", "denied");
    c.delete("httproute", "tenant-alice", "fine");
}

/// Issue 20 item 10 on the real API server: two hostnames whose Certificate names the naming
/// rule alone makes equal (a 57-letter direct child whose `gw-<label>-tls` is too long and
/// takes the shortened hashed form, and a direct child whose label is literally that form)
/// get two Certificates with two names, each for its own hostname, and both routes are served.
fn certificate_names_never_clash(c: &Cluster) {
    let long = "a".repeat(57);
    let long_host = format!("{long}.alice.example.org");
    let base = format!("gw-{long}");
    let twin_label = format!("{}-{}", &base[3..50], h8(&base));
    let twin_host = format!("{twin_label}.alice.example.org");
    // Both hostnames' rule name is `gw-<twin_label>-tls`.
    c.apply(&http_route(
        "tenant-alice",
        "long",
        ("tenant-alice", "gw"),
        &[&long_host],
    ));
    c.apply(&http_route(
        "tenant-alice",
        "twin",
        ("tenant-alice", "gw"),
        &[&twin_host],
    ));
    let certs = c.wait("both routes served, each with its own Certificate", || {
        for name in ["long", "twin"] {
            let r = c.get("httproute", "tenant-alice", name)?;
            (route_condition(&r, "Accepted")?.0 == "True").then_some(())?;
        }
        let o = c.cp.kubectl(
            &["get", "certificates", "-n", "tenant-alice", "-o", "json"],
            None,
        );
        let list: Value = serde_json::from_str(&o.stdout).ok()?;
        let for_host = |h: &str| -> Vec<String> {
            list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|cert| cert["spec"]["dnsNames"] == json!([h]))
                .filter_map(|cert| cert["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        };
        let (a, b) = (for_host(&long_host), for_host(&twin_host));
        (a.len() == 1 && b.len() == 1).then(|| (a[0].clone(), b[0].clone()))
    });
    // When both routes arrive in one reconcile neither hostname takes the rule name; when one
    // is reconciled alone first it keeps it (names are sticky, SPEC §3.2) and the other is
    // hashed further. Either way the names differ.
    assert_ne!(certs.0, certs.1, "one Certificate name for two hostnames");
    let gw = c.get("gateway", "tenant-alice", "gw").expect("gateway");
    let refs: Vec<String> = gw["spec"]["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .filter(|l| l["hostname"] == long_host.as_str() || l["hostname"] == twin_host.as_str())
        .flat_map(cert_refs)
        .collect();
    assert_eq!(refs.len(), 2, "{refs:?}");
    assert!(
        refs.contains(&certs.0) && refs.contains(&certs.1),
        "{refs:?} vs {certs:?}"
    );
    c.delete("httproute", "tenant-alice", "long");
    c.delete("httproute", "tenant-alice", "twin");
}
