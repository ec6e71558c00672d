//! Protection against slow or hostile clients and TLS properties (SPEC §2.1, §9): handshake
//! and header timeouts, the connection limit, TLS versions/ALPN, session resumption, and a
//! panicking handler turning into a denial.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::json;
use support::http::*;
use support::poll::{DEADLINE, poll_async};
use support::review::*;
use tenant_gateway::admission::{Reply, WebhookResource};
use tenant_gateway::server::{AlwaysAllow, Limits, ReviewHandler};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Setup {
    server: TestServer,
    pki: tenant_gateway::certs::DevCerts,
    _dir: tempfile::TempDir,
}

async fn setup<H: ReviewHandler>(limits: Limits, max_connections: usize, handler: Arc<H>) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki();
    let (cert, key) = write_pair(dir.path(), &pki);
    let mut opts = options(cert, key);
    opts.max_connections = max_connections;
    let server = TestServer::start(opts, limits, move |_| handler, true).await;
    Setup {
        server,
        pki,
        _dir: dir,
    }
}

/// Read until EOF or error; returns true when the server closed the connection.
async fn closed_by_server<R: AsyncReadExt + Unpin>(r: &mut R) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(DEADLINE, r.read(&mut buf)).await {
            Err(_) => return false, // still open after the deadline
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_client_is_cut_by_the_handshake_timeout() {
    let limits = Limits {
        tls_handshake_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let s = setup(limits, 64, Arc::new(AlwaysAllow)).await;
    let started = tokio::time::Instant::now();
    let mut tcp = tokio::net::TcpStream::connect(s.server.webhook)
        .await
        .expect("connect");
    assert!(
        closed_by_server(&mut tcp).await,
        "server kept a silent connection open"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    s.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_request_head_is_cut_by_the_header_timeout() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let s = setup(limits, 64, Arc::new(AlwaysAllow)).await;
    let cfg = rustls_client(&s.pki.ca_cert_pem, &[b"http/1.1"]);
    let mut tls = tls_connect(s.server.webhook, cfg).await.expect("handshake");
    // Half a request head, then nothing.
    tls.write_all(b"POST /validate/namespaces HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    tls.flush().await.expect("flush");
    let started = tokio::time::Instant::now();
    assert!(
        closed_by_server(&mut tls).await,
        "server kept a slow-header connection open"
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
    s.server.stop().await;
}

/// One review on a kept-alive HTTP/1.1 connection: writes the request and reads exactly its
/// response (by Content-Length); `None` when the connection is closed instead.
async fn review_on<S: AsyncReadExt + AsyncWriteExt + Unpin>(
    tls: &mut S,
    uid: &str,
) -> Option<String> {
    let body =
        namespace_create(uid, "tenant-x", json!({}), "admin", &["system:masters"]).to_string();
    let head = format!(
        "POST /validate/namespaces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.ok()?;
    tls.write_all(body.as_bytes()).await.ok()?;
    tls.flush().await.ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(DEADLINE, tls.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        let Some((head, rest)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().to_string())
            })
            .and_then(|v| v.parse().ok())?;
        if rest.len() >= len {
            return Some(text);
        }
    }
}

/// The API server keeps an idle webhook connection for 90 s and speaks HTTP/1.1 to every
/// webhook registered by Service: between requests the header timeout must not run, or each
/// review after a quiet moment pays a new handshake (and may race our close).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http1_keep_alive_connection_outlives_the_header_timeout() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let s = setup(limits, 64, Arc::new(AlwaysAllow)).await;
    let cfg = rustls_client(&s.pki.ca_cert_pem, &[b"http/1.1"]);
    let mut tls = tls_connect(s.server.webhook, cfg).await.expect("handshake");
    let first = review_on(&mut tls, "uid-1")
        .await
        .expect("first review answered");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    // Idle for three header timeouts: the connection stays open.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let second = review_on(&mut tls, "uid-2")
        .await
        .expect("the idle connection was kept for the next review");
    assert!(
        second.starts_with("HTTP/1.1 200") && second.contains("uid-2"),
        "{second}"
    );
    s.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_head_on_a_kept_alive_connection_is_cut_by_the_header_timeout() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let s = setup(limits, 64, Arc::new(AlwaysAllow)).await;
    let cfg = rustls_client(&s.pki.ca_cert_pem, &[b"http/1.1"]);
    let mut tls = tls_connect(s.server.webhook, cfg).await.expect("handshake");
    let first = review_on(&mut tls, "uid-1")
        .await
        .expect("first review answered");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Half of the next request head, then nothing: cut one header timeout later, long
    // before the idle timeout (120 s).
    tls.write_all(b"POST /validate/namespaces HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    tls.flush().await.expect("flush");
    let started = tokio::time::Instant::now();
    assert!(
        closed_by_server(&mut tls).await,
        "server kept a slow-header connection open"
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
    s.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http1_connection_is_closed_after_the_idle_timeout() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(400),
        header_read_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let s = setup(limits, 64, Arc::new(AlwaysAllow)).await;
    let cfg = rustls_client(&s.pki.ca_cert_pem, &[b"http/1.1"]);
    let mut tls = tls_connect(s.server.webhook, cfg).await.expect("handshake");
    let first = review_on(&mut tls, "uid-1")
        .await
        .expect("first review answered");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let started = tokio::time::Instant::now();
    assert!(
        closed_by_server(&mut tls).await,
        "server kept an idle connection open"
    );
    assert!(started.elapsed() >= Duration::from_millis(350));
    s.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_http2_client_is_cut_by_the_header_timeout() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let s = setup(limits, 64, Arc::new(AlwaysAllow)).await;
    let cfg = rustls_client(&s.pki.ca_cert_pem, &[b"h2"]);
    // Negotiates h2, then never sends the connection preface.
    let mut tls = tls_connect(s.server.webhook, cfg).await.expect("handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    assert!(
        closed_by_server(&mut tls).await,
        "server kept a silent HTTP/2 connection open"
    );
    s.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_body_gets_408() {
    let limits = Limits {
        body_read_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let s = setup(limits, 64, Arc::new(AlwaysAllow)).await;
    let cfg = rustls_client(&s.pki.ca_cert_pem, &[b"http/1.1"]);
    let mut tls = tls_connect(s.server.webhook, cfg).await.expect("handshake");
    tls.write_all(
        b"POST /validate/namespaces HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"request\":",
    )
    .await
    .expect("write");
    tls.flush().await.expect("flush");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, tls.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    s.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_closes_the_oldest_idle_connection_and_refuses_only_busy_ones() {
    let s = setup(Limits::default(), 2, Arc::new(AlwaysAllow)).await;
    let cfg = rustls_client(&s.pki.ca_cert_pem, &[b"http/1.1"]);
    let mut first = tls_connect(s.server.webhook, cfg.clone())
        .await
        .expect("first");
    let _second = tls_connect(s.server.webhook, cfg.clone())
        .await
        .expect("second");
    // Both slots hold idle connections that never sent a request: a third gets in, and the
    // oldest idle one is closed for it.
    let mut third = tls_connect(s.server.webhook, cfg.clone())
        .await
        .expect("third");
    assert!(
        closed_by_server(&mut first).await,
        "the oldest idle connection makes room"
    );
    // Connections with a request in progress are never closed for others: with both slots
    // busy, a new connection is closed right after its handshake.
    let stalled_body =
        b"POST /validate/namespaces HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{";
    third.write_all(stalled_body).await.expect("write");
    third.flush().await.expect("flush");
    let mut fourth = tls_connect(s.server.webhook, cfg.clone())
        .await
        .expect("fourth handshake");
    fourth.write_all(stalled_body).await.expect("write");
    fourth.flush().await.expect("flush");
    // `_second` was the oldest idle one: closed for `fourth`. Now both slots are busy.
    let mut fifth = tls_connect(s.server.webhook, cfg.clone())
        .await
        .expect("the handshake has its own pool");
    assert!(
        closed_by_server(&mut fifth).await,
        "no idle connection left to close: refused"
    );
    drop((third, fourth));
    // Slots free up again: reviews work.
    let c = client(&s.pki.ca_cert_pem);
    let body = namespace_create(
        "uid-limit",
        "tenant-x",
        json!({}),
        "admin",
        &["system:masters"],
    );
    let url = s.server.url("/validate/namespaces");
    poll_async(DEADLINE, "a slot to free up", || async {
        let resp = c.post(&url).json(&body).send().await.ok()?;
        (resp.status() == StatusCode::OK).then_some(())
    })
    .await;
    s.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_versions_alpn_and_resumption() {
    let s = setup(Limits::default(), 64, Arc::new(AlwaysAllow)).await;
    let ca = &s.pki.ca_cert_pem;

    let tls13 = tls_connect(s.server.webhook, rustls_client(ca, &[b"h2", b"http/1.1"]))
        .await
        .expect("tls 1.3");
    assert_eq!(
        tls13.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    assert_eq!(tls13.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));

    let h1 = tls_connect(s.server.webhook, rustls_client(ca, &[b"http/1.1"]))
        .await
        .expect("http/1.1 alpn");
    assert_eq!(h1.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));

    let tls12_cfg = rustls_client_versions(ca, &[b"h2"], &[&rustls::version::TLS12]);
    let tls12 = tls_connect(s.server.webhook, tls12_cfg)
        .await
        .expect("tls 1.2");
    assert_eq!(
        tls12.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );

    // Session resumption: a second connection from the same client config resumes.
    let cfg = rustls_client(ca, &[b"h2"]);
    let mut first = tls_connect(s.server.webhook, cfg.clone())
        .await
        .expect("first");
    // TLS 1.3 tickets arrive after the handshake; a round trip makes sure they were read.
    first
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .expect("preface");
    let mut buf = [0u8; 64];
    let _ = tokio::time::timeout(DEADLINE, first.read(&mut buf)).await;
    let second = tls_connect(s.server.webhook, cfg).await.expect("second");
    assert_eq!(
        second.get_ref().1.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed),
        "handshakes must be cheap for reconnecting clients"
    );
    // These raw connections never send a request; close them so shutdown needs no drain.
    drop((tls13, h1, tls12, first, second));
    s.server.stop().await;
}

/// Panics on every review, like a bug would.
struct Panics;

impl ReviewHandler for Panics {
    async fn handle(&self, target: WebhookResource, _body: Bytes) -> Reply {
        panic!("bug while reviewing {}", target.resource());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_denies_and_never_succeeds() {
    let s = setup(Limits::default(), 64, Arc::new(Panics)).await;
    let c = client(&s.pki.ca_cert_pem);
    let url = s.server.url("/validate/gateways");

    // With a readable uid: a denial the API server can show.
    let body = gateway_create("uid-panic", "tenant-alice", "www.alice.example.org");
    let (status, _, v) = post_json(&c, &url, &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["response"]["uid"], "uid-panic");
    assert_eq!(v["response"]["allowed"], false);
    assert_eq!(v["response"]["status"]["code"], 403);
    assert!(
        v["response"]["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("internal error")),
        "{v}"
    );

    // Without one: a 500 JSON error, which the API server treats as a failed call.
    let (status, _, v) = post_json(&c, &url, &json!({"no": "uid"})).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(v["error"].is_string());

    // The connection and the server survive.
    let (status, _, _) = post_json(&c, &url, &body).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        metric(
            &s.server,
            r#"tenant_gateway_admission_requests_total{decision="error",layer="none",operation="unknown",resource="gateways"}"#
        )
        .await
        .is_some_and(|v| v >= 3.0)
    );
    s.server.stop().await;
}

/// Act as a minimal HTTP/2 client that sends no requests: read frames until the server
/// closes, acknowledging PINGs (a graceful GOAWAY waits for a PING round trip). Returns the
/// types of all frames received.
async fn h2_frames_until_close(
    tls: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) -> Vec<u8> {
    let mut types = Vec::new();
    loop {
        let mut head = [0u8; 9];
        match tokio::time::timeout(DEADLINE, tls.read_exact(&mut head)).await {
            Ok(Ok(_)) => {}
            _ => return types,
        }
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        if !matches!(
            tokio::time::timeout(DEADLINE, tls.read_exact(&mut payload)).await,
            Ok(Ok(_))
        ) {
            return types;
        }
        types.push(head[3]);
        if head[3] == PING && head[4] & 0x1 == 0 {
            let mut ack = vec![0, 0, 8, PING, 0x1, 0, 0, 0, 0];
            ack.extend_from_slice(&payload);
            if tls.write_all(&ack).await.is_err() {
                return types;
            }
        }
    }
}

const PING: u8 = 0x6;
const H2_PREFACE_AND_SETTINGS: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
const GOAWAY: u8 = 0x7;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connection_gets_goaway() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let s = setup(limits, 64, Arc::new(AlwaysAllow)).await;
    let mut tls = tls_connect(
        s.server.webhook,
        rustls_client(&s.pki.ca_cert_pem, &[b"h2"]),
    )
    .await
    .expect("handshake");
    tls.write_all(H2_PREFACE_AND_SETTINGS)
        .await
        .expect("preface");
    let started = tokio::time::Instant::now();
    let frames = h2_frames_until_close(&mut tls).await;
    assert!(frames.contains(&GOAWAY), "frames: {frames:?}");
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(
        started.elapsed() < DEADLINE,
        "the server closed the idle connection"
    );
    s.server.stop().await;
}

/// PINGs are not activity (SPEC §9): a connection that only PINGs is closed after the idle
/// timeout like a silent one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_pings_do_not_keep_an_idle_connection_open() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(400),
        ..Limits::default()
    };
    let s = setup(limits, 64, Arc::new(AlwaysAllow)).await;
    let tls = tls_connect(
        s.server.webhook,
        rustls_client(&s.pki.ca_cert_pem, &[b"h2"]),
    )
    .await
    .expect("handshake");
    let (_send, mut conn) = h2::client::handshake(tls).await.expect("h2");
    let mut pings = conn.ping_pong().expect("ping_pong");
    let started = tokio::time::Instant::now();
    let pinged = async {
        let mut n = 0u32;
        // A PING every 50 ms: eight per idle period.
        while pings.ping(h2::Ping::opaque()).await.is_ok() {
            n += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        n
    };
    let closed = tokio::time::timeout(DEADLINE, async {
        tokio::select! {
            _ = &mut conn => None,
            n = pinged => Some(n),
        }
    })
    .await
    .expect("the server closed a connection that only PINGs");
    assert!(started.elapsed() >= Duration::from_millis(350));
    if let Some(n) = closed {
        assert!(
            n >= 4,
            "the client kept PINGing ({n}) until the server closed"
        );
    }
    s.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sends_goaway_to_open_http2_connections() {
    let mut s = setup(Limits::default(), 64, Arc::new(AlwaysAllow)).await;
    let mut tls = tls_connect(
        s.server.webhook,
        rustls_client(&s.pki.ca_cert_pem, &[b"h2"]),
    )
    .await
    .expect("handshake");
    tls.write_all(H2_PREFACE_AND_SETTINGS)
        .await
        .expect("preface");
    // Wait for the server's SETTINGS so the connection is fully established.
    let mut head = [0u8; 9];
    tokio::time::timeout(DEADLINE, tls.read_exact(&mut head))
        .await
        .expect("server settings in time")
        .expect("server settings");
    assert_eq!(head[3], 0x4, "first server frame is SETTINGS");
    let mut settings = vec![0u8; (usize::from(head[1]) << 8) | usize::from(head[2])];
    tls.read_exact(&mut settings)
        .await
        .expect("settings payload");
    let started = tokio::time::Instant::now();
    s.server.trigger_shutdown();
    let frames = h2_frames_until_close(&mut tls).await;
    assert!(frames.contains(&GOAWAY), "frames: {frames:?}");
    s.server.join(DEADLINE).await.expect("serve returns Ok");
    // The default grace is 10 s: an idle connection must not have used it up.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

/// The in-flight byte budget (SPEC §9): while one body holds it, another request waits
/// `budget_wait`, then gets 503 with Retry-After; once the bytes are released, requests are
/// served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_byte_budget_a_request_waits_then_gets_503() {
    let limits = Limits {
        max_body_bytes: 1 << 20,
        max_inflight_bytes: 1 << 20,
        budget_wait: Duration::from_millis(300),
        ..Limits::default()
    };
    let s = setup(limits, 64, Arc::new(AlwaysAllow)).await;
    let cfg = rustls_client(&s.pki.ca_cert_pem, &[b"http/1.1"]);
    let mut hog = tls_connect(s.server.webhook, cfg).await.expect("handshake");
    // 1 MiB announced, 1 MiB - 1 sent: the budget is all held, the body never completes.
    let len = 1 << 20;
    hog.write_all(
        format!("POST /validate/namespaces HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .expect("head");
    hog.write_all(&vec![b' '; len - 1]).await.expect("body");
    hog.flush().await.expect("flush");
    let c = client(&s.pki.ca_cert_pem);
    let url = s.server.url("/validate/namespaces");
    let body = namespace_create(
        "uid-budget",
        "tenant-x",
        json!({}),
        "admin",
        &["system:masters"],
    );
    let resp = poll_async(DEADLINE, "the budget to be held", || async {
        let started = tokio::time::Instant::now();
        let resp = c.post(&url).json(&body).send().await.ok()?;
        (resp.status() == StatusCode::SERVICE_UNAVAILABLE).then_some((resp, started.elapsed()))
    })
    .await;
    let (resp, waited) = resp;
    assert!(
        waited >= Duration::from_millis(250),
        "it waited first: {waited:?}"
    );
    assert_eq!(
        resp.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let v: serde_json::Value = resp.json().await.expect("json error");
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("in flight")),
        "{v}"
    );
    // The hog finishes its body (whitespace then nothing: not JSON, 400) and releases it.
    hog.write_all(b" ").await.expect("last byte");
    hog.flush().await.expect("flush");
    poll_async(DEADLINE, "the budget to be released", || async {
        let resp = c.post(&url).json(&body).send().await.ok()?;
        (resp.status() == StatusCode::OK).then_some(())
    })
    .await;
    drop(hog);
    s.server.stop().await;
}
