//! Graceful shutdown (SPEC §9): readiness turns false first, no new connections, in-flight
//! reviews finish, `serve` returns; and the grace period bounds the wait.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use reqwest::StatusCode;
use serde_json::json;
use tenant_gateway::admission::{Reply, WebhookResource};
use tenant_gateway::server::{AlwaysAllow, Limits, ReviewHandler};
use tokio::sync::watch;

/// Holds every review until released, then answers like [`AlwaysAllow`].
struct Gate {
    started: AtomicUsize,
    open: watch::Receiver<bool>,
}

impl ReviewHandler for Gate {
    async fn handle(&self, _target: WebhookResource, body: Bytes) -> Reply {
        self.started.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.clone();
        // An error means the sender is gone: release rather than hang.
        let _ = open.wait_for(|o| *o).await;
        AlwaysAllow::decide(&body)
    }
}

struct Gated {
    server: TestServer,
    gate: Arc<Gate>,
    release: watch::Sender<bool>,
    pki: tenant_gateway::certs::DevCerts,
    _dir: tempfile::TempDir,
}

async fn gated(grace: Duration) -> Gated {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki();
    let (cert, key) = write_pair(dir.path(), &pki);
    let mut opts = options(cert, key);
    opts.shutdown_grace = grace;
    let (release, open) = watch::channel(false);
    let gate = Arc::new(Gate {
        started: AtomicUsize::new(0),
        open,
    });
    let handler = gate.clone();
    let server = TestServer::start(opts, Limits::default(), move |_| handler, true).await;
    Gated {
        server,
        gate,
        release,
        pki,
        _dir: dir,
    }
}

/// Start `n` reviews on each of an HTTP/2 client (one multiplexed connection) and an
/// HTTP/1.1 client (one connection per request); return their handles.
fn start_requests(
    g: &Gated,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<(StatusCode, serde_json::Value), reqwest::Error>>> {
    let mut handles = Vec::new();
    for (proto, c) in [
        ("h2", client(&g.pki.ca_cert_pem)),
        ("h1", client_h1(&g.pki.ca_cert_pem)),
    ] {
        for i in 0..n {
            let c = c.clone();
            let url = g.server.url("/validate/httproutes");
            let uid = format!("uid-{proto}-{i}");
            handles.push(tokio::spawn(async move {
                let body =
                    namespace_create(&uid, "tenant-x", json!({}), "admin", &["system:masters"]);
                let resp = c.post(url).json(&body).send().await?;
                let status = resp.status();
                let v = resp.json().await?;
                Ok((status, v))
            }));
        }
    }
    handles
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_reviews_finish_and_new_connections_are_refused() {
    let mut g = gated(Duration::from_secs(30)).await;
    let n = 3;
    let handles = start_requests(&g, n);
    let gate = g.gate.clone();
    eventually("all requests to reach the handler", DEADLINE, || async {
        (gate.started.load(Ordering::SeqCst) == 2 * n).then_some(())
    })
    .await;

    g.server.trigger_shutdown();

    // The webhook listener closes: new TCP connections are refused.
    let addr = g.server.webhook;
    eventually("new connections to be refused", DEADLINE, || async {
        match tokio::net::TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(()),
            _ => None,
        }
    })
    .await;
    // Readiness turned false before that, and the health port still answers during the
    // drain, so probes see 503 rather than a dead port.
    assert!(g.server.readiness.shutting_down());
    let resp = plain_client()
        .get(g.server.metrics_url("/readyz"))
        .send()
        .await
        .expect("readyz during drain");
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(resp.text().await.expect("text").contains("shutting down"));

    // Nothing has been answered yet: the reviews are still held by the gate.
    assert!(handles.iter().all(|h| !h.is_finished()));

    g.release.send(true).expect("release");
    for h in handles {
        let (status, v) = tokio::time::timeout(DEADLINE, h)
            .await
            .expect("request finishes")
            .expect("request task")
            .expect("in-flight request completes during the drain");
        assert_eq!(status, StatusCode::OK);
        assert_eq!(v["response"]["allowed"], true);
        assert!(
            v["response"]["uid"]
                .as_str()
                .is_some_and(|u| u.starts_with("uid-"))
        );
    }
    g.server.join(DEADLINE).await.expect("serve returns Ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_gives_up_after_the_grace_period() {
    let grace = Duration::from_millis(500);
    let mut g = gated(grace).await;
    let handles = start_requests(&g, 2);
    let gate = g.gate.clone();
    eventually("all requests to reach the handler", DEADLINE, || async {
        (gate.started.load(Ordering::SeqCst) == 4).then_some(())
    })
    .await;
    let started = tokio::time::Instant::now();
    g.server.trigger_shutdown();
    // Never released: serve must still return, soon after the grace period.
    g.server.join(DEADLINE).await.expect("serve returns Ok");
    let took = started.elapsed();
    assert!(took >= grace, "returned before the grace period: {took:?}");
    assert!(took < grace + Duration::from_secs(5), "took {took:?}");
    // The cut requests fail; none of them is reported as a success.
    for h in handles {
        let res = tokio::time::timeout(DEADLINE, h)
            .await
            .expect("request ends")
            .expect("request task");
        assert!(res.is_err(), "a cut request must not succeed: {res:?}");
    }
    drop(g.release);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_server_shuts_down_at_once() {
    let mut g = gated(Duration::from_secs(30)).await;
    // An idle keep-alive connection must not hold up shutdown.
    let c = client(&g.pki.ca_cert_pem);
    g.release.send(true).expect("release");
    let body = namespace_create(
        "uid-idle",
        "tenant-x",
        json!({}),
        "admin",
        &["system:masters"],
    );
    let (status, _, _) = post_json(&c, &g.server.url("/validate/namespaces"), &body).await;
    assert_eq!(status, StatusCode::OK);
    let started = tokio::time::Instant::now();
    g.server.trigger_shutdown();
    g.server.join(DEADLINE).await.expect("serve returns Ok");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}
