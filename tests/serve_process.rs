//! `tenant-gateway serve` as a process: flags, readiness, both HTTP versions, SIGTERM.
//! (Draining of in-flight requests is proven in-process by https_shutdown.rs; this checks the
//! binary wires the signal to that path and exits 0.)

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::poll::{DEADLINE, try_poll};
use support::process::{Serve, http_get, start};
use support::review::{EXAMPLE_UID, example};

fn review(host: &str) -> Value {
    example(EXAMPLE_UID, host).build()
}

async fn post(s: &Serve, http2: bool, body: &Value) -> (reqwest::Version, Value) {
    let ca = reqwest::Certificate::from_pem(&s.ca).expect("ca");
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca);
    b = if http2 {
        b.http2_prior_knowledge()
    } else {
        b.http1_only()
    };
    let client = b.build().expect("client");
    let resp = client
        .post(format!("https://127.0.0.1:{}/validate/httproutes", s.port))
        .json(body)
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 200);
    let version = resp.version();
    (version, resp.json().await.expect("json"))
}

#[tokio::test]
async fn serves_both_http_versions_and_exits_cleanly_on_sigterm() {
    let mut s = start(&["--root-host", "example.org"]);
    for http2 in [true, false] {
        let (version, v) = post(&s, http2, &review("shop.bob.example.org")).await;
        assert_eq!(
            version,
            if http2 {
                reqwest::Version::HTTP_2
            } else {
                reqwest::Version::HTTP_11
            }
        );
        assert_eq!(v["response"]["allowed"], false, "{v}");
        let (_, v) = post(&s, http2, &review("shop.alice.example.org")).await;
        assert_eq!(v["response"]["allowed"], true, "{v}");
    }
    let (_, metrics) = http_get(&s.metrics, "/metrics").expect("metrics");
    assert!(metrics.contains("decision=\"denied\""), "{metrics}");

    s.sigterm();
    let status = s
        .wait_exit(DEADLINE)
        .expect("serve did not exit after SIGTERM");
    assert!(status.success(), "exit status after SIGTERM: {status}");
}

#[test]
fn refuses_to_start_without_root_host_or_certificates() {
    let out = Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args([
            "serve",
            "--namespaces",
            "examples/namespaces.yaml",
            "--tls-cert-file",
            "x",
            "--tls-key-file",
            "y",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--root-host"));

    let out = Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args([
            "serve",
            "--root-host",
            "example.org",
            "--namespaces",
            "examples/namespaces.yaml",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-cert-file"));

    let out = Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args([
            "serve",
            "--root-host",
            "example.org",
            "--tls-reload-interval",
            "0",
        ])
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(2),
        "zero reload interval must be refused"
    );
}

/// `serve --no-webhook` still runs the metrics/health port: probes and `/metrics` answer even
/// while the cluster is unreachable (not ready, saying why), and SIGTERM ends it with 0.
#[test]
fn no_webhook_still_serves_probes_and_metrics() {
    let dir = tempfile::tempdir().expect("tmp");
    // An API server address nothing listens on: the namespace index never syncs.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n",
            support::process::free_port()
        ),
    )
    .expect("write kubeconfig");
    let mport = support::process::free_port();
    let metrics = format!("127.0.0.1:{mport}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args(["serve", "--no-webhook", "--root-host", "example.org"])
        .args(["--metrics-listen", &metrics])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--leader-election-namespace", "default"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve starts");
    let exited = try_poll(DEADLINE, Duration::from_millis(50), || {
        if http_get(&metrics, "/healthz").map(|r| r.0) == Some(200) {
            return Some(None);
        }
        child.try_wait().ok().flatten().map(Some)
    });
    match exited {
        Some(None) => {}
        Some(Some(st)) => panic!("serve --no-webhook exited with {st}"),
        None => panic!("no health port under --no-webhook"),
    }
    let (code, body) = http_get(&metrics, "/readyz").expect("readyz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("namespace index: not synced yet"), "{body}");
    assert!(
        !body.contains("tls") && !body.contains("webhook listener"),
        "no webhook runs, so none of its checks apply: {body}"
    );
    let (code, body) = http_get(&metrics, "/metrics").expect("metrics");
    assert_eq!(code, 200);
    assert!(body.contains("tenant_gateway_leader 0"), "{body}");

    let status = support::process::sigterm_and_wait(&mut child, DEADLINE)
        .expect("serve did not exit after SIGTERM");
    assert!(status.success(), "exit status after SIGTERM: {status}");
}
