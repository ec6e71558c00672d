//! Graceful shutdown (SPEC §9): readiness turns false first, no new connections, in-flight
//! reviews finish, `serve` returns; and the grace period bounds the wait.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::json;
use support::http::*;
use support::poll::{DEADLINE, poll_async};
use support::review::*;
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
    poll_async(DEADLINE, "all requests to reach the handler", || async {
        (gate.started.load(Ordering::SeqCst) == 2 * n).then_some(())
    })
    .await;

    g.server.trigger_shutdown();

    // The webhook listener closes: new TCP connections are refused.
    let addr = g.server.webhook;
    poll_async(DEADLINE, "new connections to be refused", || async {
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
    poll_async(DEADLINE, "all requests to reach the handler", || async {
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

/// True when the server end of the loopback connection `server_port` <-> `client_port` has
/// nothing left unread in its kernel receive queue (`/proc/net/tcp`): the process has taken
/// every byte the client sent.
fn server_read_everything(server_port: u16, client_port: u16) -> bool {
    let local = format!("0100007F:{server_port:04X}");
    let remote = format!("0100007F:{client_port:04X}");
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 4
            && f[1] == local
            && f[2] == remote
            && f[4]
                .split(':')
                .nth(1)
                .is_some_and(|rx| rx.chars().all(|c| c == '0'))
    })
}

/// One HTTP/1.1 response from `stream`: status and body (Content-Length framing).
async fn read_h1_response<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> (u16, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.expect("read response head");
        assert!(n > 0, "connection closed before the response head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("content-length");
    while buf.len() < head_end + len {
        let n = stream.read(&mut chunk).await.expect("read response body");
        assert!(n > 0, "connection closed in the response body");
        buf.extend_from_slice(&chunk[..n]);
    }
    (status, buf[head_end..head_end + len].to_vec())
}

/// The real `serve` binary under load (issue 11): SIGTERM while HTTP/2, HTTP/1.1 keep-alive
/// and new-connection clients post reviews, with two reviews half uploaded (one per HTTP
/// version). Readiness turns false and the listener closes; every review the server decided
/// reached its client (the server's own count equals the clients' successes), no client saw
/// an error response or a cut body, the only errors are refused or unsent requests after the
/// signal; the half-uploaded reviews, finished after the signal, are answered; the process
/// exits 0 within the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_binary_answers_every_accepted_request_on_sigterm_under_load() {
    use support::load::{FailureKind, Load};
    use support::process::{http_get, start};
    use support::review::admitted;
    use tokio::io::AsyncWriteExt;
    let grace = Duration::from_secs(5);
    let mut s = start(&["--root-host", "example.org", "--shutdown-grace", "5"]);
    let url = s.url("/validate/httproutes");
    let load = Load::start(url.clone(), &[s.ca_pem()], 3, true);
    poll_async(DEADLINE, "the load to run", || async {
        (load.ok() >= 100).then_some(())
    })
    .await;

    // Two reviews accepted and half uploaded.
    let h1_body = serde_json::to_vec(&admitted("uid-held-h1")).expect("json");
    let (h1_first, h1_rest) = h1_body.split_at(h1_body.len() / 2);
    let mut h1 = tls_connect(s.webhook_addr(), rustls_client(s.ca_pem(), &[b"http/1.1"]))
        .await
        .expect("tls");
    h1.write_all(
        format!(
            "POST /validate/httproutes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            h1_body.len()
        )
        .as_bytes(),
    )
    .await
    .expect("head");
    h1.write_all(h1_first).await.expect("first half");
    h1.flush().await.expect("flush");

    let h2_body = serde_json::to_vec(&admitted("uid-held-h2")).expect("json");
    let (h2_first, h2_rest) = h2_body.split_at(h2_body.len() / 2);
    let tls = tls_connect(s.webhook_addr(), rustls_client(s.ca_pem(), &[b"h2"]))
        .await
        .expect("tls");
    let h2_port = tls.get_ref().0.local_addr().expect("addr").port();
    let (send, conn) = h2::client::handshake(tls).await.expect("h2");
    let conn = tokio::spawn(conn);
    let mut send = send.ready().await.expect("ready");
    let req = http::Request::post(&url)
        .header("content-type", "application/json")
        .header("content-length", h2_body.len())
        .body(())
        .expect("request");
    let (h2_resp, mut h2_stream) = send.send_request(req, false).expect("stream");
    h2_stream
        .send_data(Bytes::copy_from_slice(h2_first), false)
        .expect("first half");

    // Both are accepted: the server process has read every byte sent so far.
    let h1_port = h1.get_ref().0.local_addr().expect("addr").port();
    poll_async(DEADLINE, "the server to read both half uploads", || async {
        (server_read_everything(s.port, h1_port) && server_read_everything(s.port, h2_port))
            .then_some(())
    })
    .await;
    let sigterm_at = std::time::Instant::now();
    s.sigterm();

    poll_async(DEADLINE, "readiness to turn false", || async {
        http_get(&s.metrics, "/readyz")
            .filter(|(c, b)| *c == 503 && b.contains("shutting down"))
            .map(|_| ())
    })
    .await;
    let addr = s.webhook_addr();
    poll_async(DEADLINE, "new connections to be refused", || async {
        match tokio::net::TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(()),
            _ => None,
        }
    })
    .await;
    poll_async(
        DEADLINE,
        "every load loop to meet the closed server",
        || async { load.all_ended().then_some(()) },
    )
    .await;
    // The drain is held open by the two half-uploaded reviews: the health port still answers.
    let decided = http_get(&s.metrics, "/metrics")
        .and_then(|(_, t)| {
            metric_in(
                &t,
                r#"tenant_gateway_admission_duration_seconds_count{resource="httproutes"}"#,
            )
        })
        .expect("metrics during the drain");
    let (ok, failures) = load.stop().await;
    for f in &failures {
        assert!(
            f.at >= sigterm_at && matches!(f.kind, FailureKind::Connect | FailureKind::NoResponse),
            "a request failed other than by meeting the closed server: {f:?}"
        );
    }
    assert_eq!(
        decided, ok as f64,
        "reviews the server decided ({decided}) vs answers the clients got ({ok})"
    );

    // The accepted, half-uploaded reviews are answered.
    h1.write_all(h1_rest).await.expect("second half");
    h1.flush().await.expect("flush");
    let (status, body) = tokio::time::timeout(DEADLINE, read_h1_response(&mut h1))
        .await
        .expect("HTTP/1.1 answer in time");
    let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(
        (status, &v["response"]["uid"]),
        (200, &json!("uid-held-h1")),
        "{v}"
    );
    h2_stream
        .send_data(Bytes::copy_from_slice(h2_rest), true)
        .expect("second half");
    let resp = tokio::time::timeout(DEADLINE, h2_resp)
        .await
        .expect("HTTP/2 answer in time")
        .expect("HTTP/2 response");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("HTTP/2 body");
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    let v: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(v["response"]["uid"], "uid-held-h2", "{v}");

    let status = tokio::task::block_in_place(|| s.wait_exit(grace + Duration::from_secs(2)));
    let took = sigterm_at.elapsed();
    eprintln!(
        "SIGTERM under load: {ok} answered, {} refused after the signal, exit after {took:?}",
        failures.len()
    );
    let status = status.expect("serve exits after SIGTERM");
    assert!(status.success(), "exit status {status}");
    assert!(
        took <= grace,
        "exit took {took:?}, more than the grace period"
    );
    conn.abort();
}
