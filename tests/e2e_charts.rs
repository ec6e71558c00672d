//! `helm install charts/tenant-gateway` into the real API server of the tests/k8s harness
//! (issue 10 "must show"): the release's objects are accepted by the server; the binary runs
//! outside the cluster as the release's workload would — with the container arguments the
//! chart rendered and a token of the chart's ServiceAccount — and the webhook is registered
//! by URL through `webhook.url` with `certificates.mode=manual`. `kubectl auth can-i --as`
//! the ServiceAccount confirms every verb the code needs and denies samples it must not have;
//! the reconciler then works with exactly that RBAC, its guarded label write passing its own
//! webhook, and so do the replicator and the PolicyReport writer (`audit.policyReports` with
//! the chart's CRD, `audit.installPolicyReportCRD`).
//!
//! Set TENANT_GATEWAY_SKIP_E2E=1 to skip (said loudly).

mod support;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::control_plane::*;
use support::poll::{EVERY, poll, try_poll};
use support::process::*;
use tenant_gateway::yaml::read_documents;

const NS: &str = "cozy-system";
const SA: &str = "tg-tenant-gateway";
const WAIT: Duration = Duration::from_secs(60);

struct Serve {
    child: Child,
    log: std::path::PathBuf,
}

impl Serve {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(20));
    }
}

/// [`poll`] that shows the workload's log when the deadline passes.
fn wait_logged<T>(serve: &Serve, what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    try_poll(timeout, EVERY, f).unwrap_or_else(|| {
        panic!(
            "timed out after {timeout:?} waiting for {what}; serve log:\n{}",
            serve.log()
        )
    })
}

fn metrics_text(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to /metrics");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut buf = String::new();
    s.read_to_string(&mut buf).expect("read /metrics");
    buf
}

/// Metric names (`tenant_gateway_*`, `process_*`) a text mentions.
fn metric_names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text
        .match_indices("tenant_gateway_")
        .chain(text.match_indices("process_"))
    {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = text[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        out.insert(name);
    }
    out
}

/// A copy of the control plane's kubeconfig that authenticates as the chart's ServiceAccount
/// (a bound token), as the release's pod would.
fn service_account_kubeconfig(cp: &ControlPlane, dir: &std::path::Path) -> std::path::PathBuf {
    let token = cp.kubectl_ok(&["create", "token", SA, "-n", NS, "--duration=1h"], None);
    let kubeconfig = dir.join("sa.kubeconfig");
    std::fs::copy(cp.kubeconfig(), &kubeconfig).expect("copy kubeconfig");
    let kc = path_str(&kubeconfig);
    let token = token.stdout.trim();
    cp.kubectl_ok(
        &[
            "config",
            "--kubeconfig",
            kc,
            "set-credentials",
            "sa",
            "--token",
            token,
        ],
        None,
    );
    cp.kubectl_ok(
        &[
            "config",
            "--kubeconfig",
            kc,
            "set-context",
            "--current",
            "--user",
            "sa",
        ],
        None,
    );
    kubeconfig
}

fn get(cp: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    let o = cp.kubectl(&a, None);
    o.allowed
        .then(|| serde_json::from_str(&o.stdout).expect("kubectl prints JSON"))
}

/// The Deployment `helm template` renders for the release with `values` (the container
/// arguments its pods would run with).
fn rendered_deployment(cp: &ControlPlane, chart: &std::path::Path, values: &[String]) -> Value {
    let mut tpl: Vec<&str> = vec!["template", "tg", path_str(chart), "-n", NS];
    tpl.extend(values.iter().map(String::as_str));
    let out = cp.helm(&tpl);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = String::from_utf8(out.stdout).expect("utf-8");
    read_documents(&rendered)
        .into_iter()
        .filter_map(|d| d.value.ok())
        .find(|v| v["kind"] == "Deployment")
        .expect("a Deployment")
}

fn can_i(cp: &ControlPlane, verb: &str, resource: &str, ns: Option<&str>) -> bool {
    let user = format!("system:serviceaccount:{NS}:{SA}");
    // `resource/name`, or `resource#subresource`.
    let (resource, sub) = match resource.split_once('#') {
        Some((r, s)) => (r, Some(format!("--subresource={s}"))),
        None => (resource, None),
    };
    let mut args = vec!["auth", "can-i", verb, resource, "--as", &user];
    if let Some(s) = &sub {
        args.push(s);
    }
    if let Some(ns) = ns {
        args.extend_from_slice(&["-n", ns]);
    } else {
        args.push("--all-namespaces");
    }
    // can-i exits 1 on "no": read the answer, not the exit code.
    let o = cp.kubectl(&args, None);
    match o.stdout.trim() {
        "yes" => true,
        "no" => false,
        other => panic!(
            "kubectl auth can-i {verb} {resource}: {other:?} {}",
            o.stderr
        ),
    }
}

#[test]
fn helm_install_then_run_with_the_charts_rbac() {
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    cp.install_crds();
    cp.grant_impersonated_users();
    cp.create_tenant_namespaces();
    cp.kubectl_ok(&["create", "namespace", NS], None);

    // Serving certificate for the out-of-cluster webhook.
    let dir = cp.dir.path().join("chart-install");
    std::fs::create_dir_all(&dir).expect("dir");
    let certs = tenant_gateway::certs::generate(&["127.0.0.1".to_string()]).expect("certs");
    tenant_gateway::certs::write(&dir, &certs).expect("write certs");
    let ca_b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(dir.join("ca.crt")).expect("ca.crt"))
    };
    let port = free_port();
    let metrics_port = free_port();
    let url = format!("https://127.0.0.1:{port}");
    let chart = repo_root().join("charts/tenant-gateway");
    let values = [
        "--set".to_string(),
        "rootHost=example.org".to_string(),
        "--set".to_string(),
        format!("webhook.url={url}"),
        "--set".to_string(),
        "certificates.mode=manual".to_string(),
        "--set".to_string(),
        "certificates.manual.secretName=tg-serving".to_string(),
        "--set".to_string(),
        format!("certificates.manual.caBundle={ca_b64}"),
        "--set".to_string(),
        "audit.policyReports=true".to_string(),
        "--set".to_string(),
        "audit.installPolicyReportCRD=true".to_string(),
    ];
    let helm = |args: &[&str]| cp.helm(args);

    // The container arguments the release's pods would run with.
    let deployment = rendered_deployment(&cp, &chart, &values);
    let container_args: Vec<String> =
        deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("string").to_string())
            .collect();

    // Install: every object accepted by the API server (no --wait: no kubelet here).
    let mut install: Vec<&str> = vec!["install", "tg", path_str(&chart), "-n", NS];
    install.extend(values.iter().map(String::as_str));
    // The workload is not running yet and the webhook fails closed: writes it guards would
    // fail until it is. The chart's own objects are in its excluded namespace or are not
    // guarded kinds, so the install itself goes through.
    let out = helm(&install);
    assert!(
        out.status.success(),
        "helm install: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for (kind, ns, name) in [
        ("deployment", Some(NS), SA),
        ("service", Some(NS), SA),
        ("serviceaccount", Some(NS), SA),
        ("poddisruptionbudget", Some(NS), SA),
        ("role", Some(NS), "tg-tenant-gateway-leader-election"),
        ("rolebinding", Some(NS), "tg-tenant-gateway-leader-election"),
        ("clusterrole", None, SA),
        ("clusterrolebinding", None, SA),
        ("validatingwebhookconfiguration", None, SA),
        ("crd", None, "tenantgateways.gateway.cozystack.io"),
        ("crd", None, "policyreports.wgpolicyk8s.io"),
    ] {
        let mut a = vec![kind, name];
        if let Some(ns) = ns {
            a.extend_from_slice(&["-n", ns]);
        }
        assert!(get(&cp, &a).is_some(), "{kind} {name} was not created");
    }

    // RBAC as the ServiceAccount: every verb the code needs ...
    let needed: &[(&str, &str, Option<&str>)] = &[
        ("get", "namespaces", None),
        ("list", "namespaces", None),
        ("watch", "namespaces", None),
        ("patch", "namespaces", None),
        ("list", "tenantgateways.gateway.cozystack.io", None),
        ("watch", "tenantgateways.gateway.cozystack.io", None),
        (
            "patch",
            "tenantgateways.gateway.cozystack.io",
            Some("tenant-alice"),
        ),
        (
            "patch",
            "tenantgateways.gateway.cozystack.io#status",
            Some("tenant-alice"),
        ),
        ("list", "gateways.gateway.networking.k8s.io", None),
        ("watch", "gateways.gateway.networking.k8s.io", None),
        (
            "create",
            "gateways.gateway.networking.k8s.io",
            Some("tenant-alice"),
        ),
        (
            "patch",
            "gateways.gateway.networking.k8s.io",
            Some("tenant-alice"),
        ),
        (
            "delete",
            "gateways.gateway.networking.k8s.io",
            Some("tenant-alice"),
        ),
        (
            "get",
            "httproutes.gateway.networking.k8s.io",
            Some("tenant-bob"),
        ),
        ("list", "httproutes.gateway.networking.k8s.io", None),
        ("watch", "httproutes.gateway.networking.k8s.io", None),
        (
            "create",
            "httproutes.gateway.networking.k8s.io",
            Some("tenant-alice"),
        ),
        (
            "patch",
            "httproutes.gateway.networking.k8s.io",
            Some("tenant-alice"),
        ),
        (
            "delete",
            "httproutes.gateway.networking.k8s.io",
            Some("tenant-alice"),
        ),
        (
            "update",
            "httproutes.gateway.networking.k8s.io#status",
            Some("tenant-bob"),
        ),
        (
            "get",
            "tlsroutes.gateway.networking.k8s.io",
            Some("tenant-bob"),
        ),
        ("list", "tlsroutes.gateway.networking.k8s.io", None),
        ("watch", "tlsroutes.gateway.networking.k8s.io", None),
        (
            "update",
            "tlsroutes.gateway.networking.k8s.io#status",
            Some("tenant-bob"),
        ),
        ("list", "issuers.cert-manager.io", None),
        ("watch", "issuers.cert-manager.io", None),
        ("create", "issuers.cert-manager.io", Some("tenant-alice")),
        ("patch", "issuers.cert-manager.io", Some("tenant-alice")),
        ("delete", "issuers.cert-manager.io", Some("tenant-alice")),
        ("list", "certificates.cert-manager.io", None),
        ("watch", "certificates.cert-manager.io", None),
        (
            "create",
            "certificates.cert-manager.io",
            Some("tenant-alice"),
        ),
        (
            "patch",
            "certificates.cert-manager.io",
            Some("tenant-alice"),
        ),
        (
            "delete",
            "certificates.cert-manager.io",
            Some("tenant-alice"),
        ),
        ("create", "events.events.k8s.io", Some("tenant-alice")),
        ("patch", "events.events.k8s.io", Some("tenant-alice")),
        // The continuous audit: every guarded kind watched.
        ("list", "packages.cozystack.io", None),
        ("watch", "packages.cozystack.io", None),
        ("list", "ingresses.networking.k8s.io", None),
        ("watch", "ingresses.networking.k8s.io", None),
        ("list", "grpcroutes.gateway.networking.k8s.io", None),
        ("watch", "grpcroutes.gateway.networking.k8s.io", None),
        ("list", "listenersets.gateway.networking.k8s.io", None),
        ("watch", "xlistenersets.gateway.networking.x-k8s.io", None),
        // The replicator: watches by field and label selector in every namespace,
        // server-side apply of replicas, prune.
        ("list", "secrets", None),
        ("watch", "secrets", None),
        ("create", "secrets", Some("tenant-alice")),
        ("patch", "secrets", Some("tenant-alice")),
        ("delete", "secrets", Some("tenant-alice")),
        // The PolicyReport writer (audit.policyReports): its watch by name, server-side
        // apply and delete of the reports named tenant-gateway.
        ("list", "policyreports.wgpolicyk8s.io/tenant-gateway", None),
        ("watch", "policyreports.wgpolicyk8s.io/tenant-gateway", None),
        (
            "create",
            "policyreports.wgpolicyk8s.io",
            Some("tenant-alice"),
        ),
        (
            "patch",
            "policyreports.wgpolicyk8s.io/tenant-gateway",
            Some("tenant-alice"),
        ),
        (
            "delete",
            "policyreports.wgpolicyk8s.io/tenant-gateway",
            Some("tenant-alice"),
        ),
        ("create", "leases.coordination.k8s.io", Some(NS)),
        ("get", "leases.coordination.k8s.io/tenant-gateway", Some(NS)),
        (
            "update",
            "leases.coordination.k8s.io/tenant-gateway",
            Some(NS),
        ),
    ];
    for (verb, res, ns) in needed {
        assert!(
            can_i(&cp, verb, res, *ns),
            "the ServiceAccount cannot {verb} {res} in {ns:?}"
        );
    }
    // ... and samples it must not have.
    let denied: &[(&str, &str, Option<&str>)] = &[
        ("get", "secrets", Some("tenant-alice")),
        ("update", "secrets", Some("tenant-alice")),
        ("delete", "namespaces", None),
        ("update", "namespaces", None),
        (
            "update",
            "gateways.gateway.networking.k8s.io",
            Some("tenant-alice"),
        ),
        (
            "patch",
            "tlsroutes.gateway.networking.k8s.io",
            Some("tenant-alice"),
        ),
        (
            "delete",
            "tenantgateways.gateway.cozystack.io",
            Some("tenant-alice"),
        ),
        (
            "update",
            "leases.coordination.k8s.io/someone-else",
            Some(NS),
        ),
        ("create", "leases.coordination.k8s.io", Some("tenant-alice")),
        ("create", "pods", Some(NS)),
        ("patch", "validatingwebhookconfigurations", None),
        ("create", "packages.cozystack.io", None),
        // Other tools' PolicyReports.
        (
            "patch",
            "policyreports.wgpolicyk8s.io/polr-kyverno",
            Some("tenant-alice"),
        ),
        (
            "delete",
            "policyreports.wgpolicyk8s.io/polr-kyverno",
            Some("tenant-alice"),
        ),
    ];
    for (verb, res, ns) in denied {
        assert!(
            !can_i(&cp, verb, res, *ns),
            "the ServiceAccount must not {verb} {res} in {ns:?}"
        );
    }

    // The workload, outside the cluster: the chart's arguments, loopback ports, the
    // ServiceAccount's token.
    let kubeconfig = service_account_kubeconfig(&cp, &dir);
    let kc = path_str(&kubeconfig);
    let args: Vec<String> = container_args
        .iter()
        .map(|a| {
            let (flag, _) = a.split_once('=').unwrap_or((a, ""));
            match flag {
                "--listen" => format!("--listen=127.0.0.1:{port}"),
                "--metrics-listen" => format!("--metrics-listen=127.0.0.1:{metrics_port}"),
                "--tls-cert-file" => format!("--tls-cert-file={}", dir.join("tls.crt").display()),
                "--tls-key-file" => format!("--tls-key-file={}", dir.join("tls.key").display()),
                _ => a.clone(),
            }
        })
        .chain([format!("--kubeconfig={kc}")])
        .collect();
    assert_eq!(args[0], "serve");
    let log = dir.join("serve.log");
    let child = Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args(&args)
        .env("POD_NAME", "tg-tenant-gateway-0")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("serve starts");
    let mut serve = Serve { child, log };
    let addr = format!("127.0.0.1:{metrics_port}");
    poll(WAIT, "serve ready", || {
        if let Ok(Some(st)) = serve.child.try_wait() {
            panic!("serve exited with {st}: {}", serve.log());
        }
        (http_status(&addr, "/readyz") == Some(200)).then_some(())
    });

    // The chart's registration reaches it: a tenant is denied, through the API server.
    let probe = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "probe", "namespace": "tenant-alice"},
        "spec": {"hostnames": ["probe.bob.example.org"]}})
    .to_string();
    poll(WAIT, "the chart's webhook to be called", || {
        let o = cp.dry_run("alice", &[E2E_GROUP], &probe);
        o.stderr.contains("denied the request").then_some(())
    });
    let o = cp.dry_run("alice", &[E2E_GROUP], &probe);
    assert!(o.stderr.contains("hostnames must equal"), "{}", o.stderr);
    // kube-system is excluded, so is the release namespace (matchConditions/selectors).
    let sys = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "probe", "namespace": NS},
        "spec": {"hostnames": ["anything.example.net"]}})
    .to_string();
    assert!(cp.dry_run("alice", &[E2E_GROUP], &sys).allowed);

    // The reconciler with exactly the chart's RBAC: Lease, finalizer, Gateway/Issuer by SSA,
    // the guarded namespace label (through its own webhook: the release namespace's SA
    // group is trusted), status, a route's Certificate and route status.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
                "metadata": {"name": "gw", "namespace": "tenant-alice"},
                "spec": {"apex": "alice.example.org", "attachedNamespaces": ["cozy-dashboard"]}})
            .to_string(),
        ),
    );
    let lease = wait_logged(&serve, "the Lease", WAIT, || {
        get(&cp, &["lease", "tenant-gateway", "-n", NS])
    });
    assert!(
        lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .starts_with("tg-tenant-gateway-0"),
        "{lease}"
    );
    wait_logged(&serve, "the Gateway", WAIT, || {
        get(&cp, &["gateway", "gw", "-n", "tenant-alice"])
    });
    // The PolicyReport writer with the chart's flag, CRD and RBAC: tenant-nolabel (no apex)
    // fails the apex table, tenant-alice passes it.
    for (ns, result) in [("tenant-nolabel", "fail"), ("tenant-alice", "pass")] {
        wait_logged(&serve, &format!("{ns}'s PolicyReport"), WAIT, || {
            let r = get(
                &cp,
                &["policyreports.wgpolicyk8s.io", "tenant-gateway", "-n", ns],
            )?;
            r["results"]
                .as_array()?
                .iter()
                .any(|x| x["resources"][0]["name"] == ns && x["result"] == result)
                .then_some(())
        });
    }
    wait_logged(&serve, "the Issuer", WAIT, || {
        get(&cp, &["issuer", "gw-gateway", "-n", "tenant-alice"])
    });
    wait_logged(&serve, "the redirect route", WAIT, || {
        get(
            &cp,
            &["httproute", "gw-http-redirect", "-n", "tenant-alice"],
        )
    });
    wait_logged(
        &serve,
        "the attached namespace's gateway label",
        WAIT,
        || {
            let ns = get(&cp, &["namespace", "cozy-dashboard"])?;
            (ns["metadata"]["labels"]["namespace.cozystack.io/gateway"] == "tenant-alice")
                .then_some(())
        },
    );
    wait_logged(
        &serve,
        "the TenantGateway's finalizer and status",
        WAIT,
        || {
            let t = get(&cp, &["tenantgateway", "gw", "-n", "tenant-alice"])?;
            let fin = t["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "gateway.cozystack.io/cleanup"));
            (fin && t["status"]["conditions"]
                .as_array()
                .is_some_and(|c| !c.is_empty()))
            .then_some(())
        },
    );
    // Layer 9 through the chart's registration: the controller's own finalizer write passed
    // (above, its ServiceAccount's group is trusted); a tenant's write and delete do not.
    for verb in [
        vec![
            "annotate",
            "tenantgateway",
            "gw",
            "-n",
            "tenant-alice",
            "x=y",
        ],
        vec![
            "delete",
            "tenantgateway",
            "gw",
            "-n",
            "tenant-alice",
            "--dry-run=server",
        ],
    ] {
        let mut args = verb.clone();
        args.extend(["--as", "alice", "--as-group", E2E_GROUP]);
        let o = cp.kubectl(&args, None);
        assert!(
            !o.allowed && o.stderr.contains("is managed by the platform"),
            "{verb:?} by a tenant: {o:?}"
        );
    }
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "web", "namespace": "tenant-alice"},
                "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["shop.alice.example.org"],
                         "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}})
            .to_string(),
        ),
    );
    wait_logged(&serve, "the route's Certificate", WAIT, || {
        get(&cp, &["certificate", "gw-shop-tls", "-n", "tenant-alice"])
    });
    wait_logged(&serve, "the route status entry", WAIT, || {
        let r = get(&cp, &["httproute", "web", "-n", "tenant-alice"])?;
        r["status"]["parents"]
            .as_array()
            .is_some_and(|p| {
                p.iter()
                    .any(|e| e["controllerName"] == tenant_gateway::platform::CONTROLLER_NAME)
            })
            .then_some(())
    });
    // Deletion: the finalizer's cleanup removes the label it wrote.
    cp.kubectl_ok(
        &[
            "delete",
            "tenantgateway",
            "gw",
            "-n",
            "tenant-alice",
            "--wait=false",
        ],
        None,
    );
    wait_logged(
        &serve,
        "the label cleanup and the TenantGateway gone",
        WAIT,
        || {
            let ns = get(&cp, &["namespace", "cozy-dashboard"])?;
            let gone = get(&cp, &["tenantgateway", "gw", "-n", "tenant-alice"]).is_none();
            (ns["metadata"]["labels"]["namespace.cozystack.io/gateway"].is_null() && gone)
                .then_some(())
        },
    );
    // The replicator with exactly the chart's RBAC: the values (at the chart's default
    // location) name a Secret of tenant-root; a namespace owning its Gateway gets the copy.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-repl",
                "labels": {"namespace.cozystack.io/gateway": "tenant-repl"}}})
            .to_string(),
        ),
    );
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": "wild", "namespace": "tenant-root"},
                "stringData": {"tls.crt": "crt", "tls.key": "key"}})
            .to_string(),
        ),
    );
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "cozystack-values", "namespace": NS},
                "stringData": {"values.yaml": "_cluster:\n  wildcard-secret-name: wild\n"}})
            .to_string(),
        ),
    );
    wait_logged(&serve, "the wildcard Secret replica", WAIT, || {
        let s = get(&cp, &["secret", "wild", "-n", "tenant-repl"])?;
        (s["metadata"]["labels"]["gateway.cozystack.io/wildcard-copy"] == "true").then_some(())
    });

    // Every metric the dashboard and the alerts query is on /metrics of this running serve.
    let exposed = metrics_text(&addr);
    let mut used = BTreeSet::new();
    let dash = std::fs::read_to_string(
        repo_root().join("charts/tenant-gateway/dashboards/tenant-gateway.json"),
    )
    .expect("dashboard");
    used.extend(metric_names_in(&dash));
    let mut tpl: Vec<&str> = vec![
        "template",
        "tg",
        path_str(&chart),
        "-n",
        NS,
        "--set",
        "prometheusRule.enabled=true",
    ];
    tpl.extend(values.iter().map(String::as_str));
    let out = helm(&tpl);
    assert!(out.status.success());
    used.extend(metric_names_in(&String::from_utf8_lossy(&out.stdout)));
    assert!(used.len() >= 10, "{used:?}");
    let missing: Vec<&String> = used
        .iter()
        .filter(|m| !exposed.lines().any(|l| l.starts_with(m.as_str())))
        .collect();
    assert!(missing.is_empty(), "not on /metrics of serve: {missing:?}");

    let log = serve.log();
    for forbidden in ["forbidden", "Forbidden"] {
        assert!(!log.contains(forbidden), "the workload hit RBAC: {log}");
    }

    // Other value sets, accepted by the API server with the real CRDs (cert-manager's,
    // the TenantGateway CRD's CEL rules): server-side dry runs of what helm renders.
    let dry = |chart_name: &str, release: &str, ns: &str, sets: &[&str]| {
        let chart = repo_root().join("charts").join(chart_name);
        let mut a: Vec<&str> = vec!["template", release, path_str(&chart), "-n", ns];
        a.extend_from_slice(sets);
        let out = helm(&a);
        assert!(
            out.status.success(),
            "{sets:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let manifest = String::from_utf8(out.stdout).expect("utf-8");
        let o = cp.kubectl(
            &["apply", "--dry-run=server", "-n", ns, "-f", "-"],
            Some(&manifest),
        );
        assert!(
            o.allowed,
            "{chart_name} {sets:?} refused by the API server: {}",
            o.stderr
        );
    };
    dry(
        "tenant-gateway",
        "tg2",
        NS,
        &[
            "--set",
            "rootHost=example.org",
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "networkPolicy.apiServerCIDRs={127.0.0.1/32}",
            "--set",
            "dashboard.enabled=true",
        ],
    );
    dry(
        "tenant-gateway",
        "tg3",
        NS,
        &[
            "--set",
            "rootHost=example.org",
            "--set",
            "certificates.certManager.issuerRef.name=platform",
            "--set",
            "certificates.certManager.issuerRef.kind=ClusterIssuer",
        ],
    );
    let host = "_namespace.host=alice.example.org";
    for sets in [
        vec!["--set", host],
        vec!["--set", host, "--set", "_cluster.solver=dns01"],
        vec![
            "--set",
            host,
            "--set",
            "_cluster.solver=dns01",
            "--set",
            "_cluster.dns01-provider=route53",
            "--set",
            "_cluster.dns01-route53-region=eu-west-1",
            "--set",
            "_cluster.dns01-route53-secret-name=aws",
        ],
        vec![
            "--set",
            host,
            "--set",
            "_cluster.solver=dns01",
            "--set",
            "_cluster.dns01-provider=digitalocean",
        ],
        vec![
            "--set",
            host,
            "--set",
            "_cluster.solver=dns01",
            "--set",
            "_cluster.dns01-provider=rfc2136",
            "--set",
            "_cluster.dns01-rfc2136-nameserver=10.0.0.53:53",
            "--set",
            "_cluster.dns01-rfc2136-tsig-key-name=acme",
            "--set",
            "_cluster.dns01-rfc2136-secret-name=tsig",
        ],
        vec![
            "--set",
            host,
            "--set",
            "_cluster.wildcard-secret-name=wildcard",
            "--set",
            "_cluster.gateway-attached-namespaces=cozy-dashboard\\,default",
        ],
    ] {
        dry("gateway", "alice", "tenant-alice", &sets);
    }

    // Uninstall: the webhook configuration goes with the release.
    let out = helm(&["uninstall", "tg", "-n", NS]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(get(&cp, &["validatingwebhookconfiguration", SA]).is_none());
}

/// `certificates.mode=self` against the real API server: the CA Secret appears, the webhook
/// configuration gets the caBundle, and a forced early renewal (the serving pair removed
/// from the Secret) swaps the serving certificate while a load loop of admission requests
/// through the API server runs across the swap without a single failed call.
#[test]
fn self_certificate_mode_bootstraps_and_renews_without_a_failed_admission() {
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    cp.install_crds();
    cp.grant_impersonated_users();
    cp.create_tenant_namespaces();
    cp.kubectl_ok(&["create", "namespace", NS], None);
    let dir = cp.dir.path().join("chart-self");
    std::fs::create_dir_all(&dir).expect("dir");
    let port = free_port();
    let metrics_port = free_port();
    let chart = repo_root().join("charts/tenant-gateway");
    let values = [
        "--set".to_string(),
        "rootHost=example.org".to_string(),
        "--set".to_string(),
        format!("webhook.url=https://127.0.0.1:{port}"),
        "--set".to_string(),
        "certificates.mode=self".to_string(),
        "--set".to_string(),
        "certificates.self.extraHosts={127.0.0.1}".to_string(),
    ];
    let helm = |args: &[&str]| cp.helm(args);
    let deployment = rendered_deployment(&cp, &chart, &values);
    let mut install: Vec<&str> = vec!["install", "tg", path_str(&chart), "-n", NS];
    install.extend(values.iter().map(String::as_str));
    let out = helm(&install);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let kubeconfig = service_account_kubeconfig(&cp, &dir);
    let kc = path_str(&kubeconfig);
    let tls_dir = dir.join("tls");
    let args: Vec<String> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string").to_string())
        .map(|a| {
            let (flag, _) = a.split_once('=').unwrap_or((&a, ""));
            match flag {
                "--listen" => format!("--listen=127.0.0.1:{port}"),
                "--metrics-listen" => format!("--metrics-listen=127.0.0.1:{metrics_port}"),
                "--self-cert-dir" => format!("--self-cert-dir={}", tls_dir.display()),
                "--tls-reload-interval" => "--tls-reload-interval=0.2".to_string(),
                _ => a.clone(),
            }
        })
        .chain([format!("--kubeconfig={kc}")])
        .collect();
    assert!(
        args.iter().any(|a| a.starts_with("--self-cert-secret=")),
        "{args:?}"
    );
    let log = dir.join("serve.log");
    let child = Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args(&args)
        .env("POD_NAME", "tg-tenant-gateway-0")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("serve starts");
    let mut serve = Serve { child, log };
    let addr = format!("127.0.0.1:{metrics_port}");
    poll(WAIT, "serve ready on its own certificate", || {
        if let Ok(Some(st)) = serve.child.try_wait() {
            panic!("serve exited with {st}: {}", serve.log());
        }
        (http_status(&addr, "/readyz") == Some(200)).then_some(())
    });

    // The CA Secret, and the caBundle on every webhook.
    let secret_name = "tg-tenant-gateway-self-tls";
    let secret = get(&cp, &["secret", secret_name, "-n", NS]).expect("the Secret");
    for k in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(secret["data"][k].is_string(), "{k} missing");
    }
    let ca_b64 = secret["data"]["ca.crt"].as_str().expect("ca").to_string();
    wait_logged(&serve, "the caBundle on every webhook", WAIT, || {
        let vwc = get(&cp, &["validatingwebhookconfiguration", SA])?;
        vwc["webhooks"]
            .as_array()?
            .iter()
            .all(|w| w["clientConfig"]["caBundle"] == ca_b64.as_str())
            .then_some(())
    });
    let probe = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "probe", "namespace": "tenant-alice"},
        "spec": {"hostnames": ["probe.bob.example.org"]}})
    .to_string();
    wait_logged(
        &serve,
        "the webhook called with the self-managed CA",
        WAIT,
        || {
            cp.dry_run("alice", &[E2E_GROUP], &probe)
                .stderr
                .contains("hostnames must equal")
                .then_some(())
        },
    );

    // Load across a forced early renewal: every request must come back as the webhook's
    // own denial, none as a failed call.
    let reloads = |text: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with("tenant_gateway_tls_reloads_total{result=\"success\"}"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let before = reloads(&metrics_text(&addr));
    let old_cert = secret["data"]["tls.crt"]
        .as_str()
        .expect("tls.crt")
        .to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let load = {
        let stop = stop.clone();
        let answered = answered.clone();
        let kubectl = cp.bin("kubectl");
        let kubeconfig = cp.kubeconfig();
        let probe = probe.clone();
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0u32, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut child = Command::new(&kubectl)
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["apply", "--dry-run=server", "-f", "-", "--as", "alice"])
                    .args(["--as-group", E2E_GROUP])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("kubectl");
                use std::io::Write as _;
                let _ = child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(probe.as_bytes());
                let out = child.wait_with_output().expect("kubectl ends");
                answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let err = String::from_utf8_lossy(&out.stderr).into_owned();
                if err.contains("hostnames must equal") {
                    ok += 1;
                } else {
                    failed.push(err);
                }
            }
            (ok, failed)
        })
    };
    poll(WAIT, "the load to run before the swap", || {
        (answered.load(std::sync::atomic::Ordering::Relaxed) > 0).then_some(())
    });
    cp.kubectl_ok(
        &[
            "patch",
            "secret",
            secret_name,
            "-n",
            NS,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/data/tls.crt"},{"op":"remove","path":"/data/tls.key"}]"#,
        ],
        None,
    );
    let renewed = wait_logged(
        &serve,
        "a new serving certificate in the Secret",
        WAIT,
        || {
            let s = get(&cp, &["secret", secret_name, "-n", NS])?;
            let c = s["data"]["tls.crt"].as_str()?.to_string();
            (c != old_cert).then_some(s)
        },
    );
    assert_eq!(
        renewed["data"]["ca.crt"],
        ca_b64.as_str(),
        "same CA: no caBundle change"
    );
    wait_logged(
        &serve,
        "the serving process to reload the new pair",
        WAIT,
        || (reloads(&metrics_text(&addr)) > before).then_some(()),
    );
    // Not a synchronisation: the load runs a while on the new certificate (the window under
    // test).
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = load.join().expect("load thread");
    assert!(
        failed.is_empty(),
        "{} admission calls failed across the swap: {failed:?}",
        failed.len()
    );
    assert!(ok >= 5, "the load loop ran ({ok} requests)");
    let vwc = get(&cp, &["validatingwebhookconfiguration", SA]).expect("vwc");
    assert!(
        vwc["webhooks"]
            .as_array()
            .expect("webhooks")
            .iter()
            .all(|w| w["clientConfig"]["caBundle"] == ca_b64.as_str())
    );
    let log = serve.log();
    assert!(!log.contains("orbidden"), "the workload hit RBAC: {log}");
    eprintln!("self mode: {ok} admission requests across the renewal, 0 failed");
}
