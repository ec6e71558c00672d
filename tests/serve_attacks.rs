//! Hostile clients against the real `serve` binary (SPEC §9, issue 6 items 6–9), each
//! bounded in time and size. While each attack runs, a well-behaved client (standing in for
//! the API server) keeps doing real reviews and must keep getting answers.
//!
//! `TG_ATTACK_SCALE=N` multiplies the attack sizes (the named long run, `scripts/attack`,
//! uses 4); the default sizes still fail against the behaviour before the fixes (checked
//! by pointing `TG_SERVE_BIN` at a binary built from the commit before them).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use support::http::{client, client_h1, rustls_client, tls_connect};
use support::poll::{DEADLINE, poll_async};
use support::process::{RssWatch, Serve, http_get_within, rss_mib, start};
use support::review::admitted;
use tokio::io::AsyncWriteExt;

const RSS_LIMIT_MIB: f64 = 256.0;
const MIB: usize = 1024 * 1024;

fn scale() -> usize {
    std::env::var("TG_ATTACK_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1)
}

/// A review the typed decode refuses (`operation` is a number) whose object is `size` bytes
/// of small JSON objects: the shape that used to be decoded into a full JSON tree.
fn undecodable_body(size: usize) -> Bytes {
    let mut s = String::with_capacity(size + 200);
    s.push_str(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"evil","operation":5,"object":["#);
    while s.len() < size {
        s.push_str(r#"{"a":1},"#);
    }
    s.push_str(r#"{"a":1}]}}"#);
    Bytes::from(s)
}

/// A valid review of `size` bytes, the bulk in an annotation no layer reads.
fn big_valid_body(size: usize) -> Bytes {
    let mut v = admitted("big");
    v["request"]["object"]["metadata"]["annotations"] = json!({"pad": "x".repeat(size)});
    Bytes::from(serde_json::to_vec(&v).expect("json"))
}

/// The API server's part: real reviews in a loop until stopped, on its own connection.
struct GoodClient {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    busy: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl GoodClient {
    fn start(s: &Serve, http2: bool) -> GoodClient {
        let c = if http2 {
            client(s.ca_pem())
        } else {
            client_h1(s.ca_pem())
        };
        let url = s.url("/validate/httproutes");
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let busy = Arc::new(AtomicU64::new(0));
        let (st, okc, bc) = (stop.clone(), ok.clone(), busy.clone());
        let task = tokio::spawn(async move {
            let mut failures = Vec::new();
            let mut n = 0u64;
            while !st.load(Ordering::Relaxed) {
                n += 1;
                let uid = format!("good-{n}");
                let started = Instant::now();
                let r = c
                    .post(&url)
                    .timeout(Duration::from_secs(5))
                    .json(&admitted(&uid))
                    .send()
                    .await;
                match r {
                    Ok(resp) if resp.status() == 200 => {
                        let v: Value = resp.json().await.unwrap_or_default();
                        if v["response"]["uid"] == uid.as_str() && v["response"]["allowed"] == true
                        {
                            okc.fetch_add(1, Ordering::Relaxed);
                        } else {
                            failures.push(format!("{uid}: unexpected answer {v}"));
                        }
                    }
                    // The byte budget's answer: allowed, bounded below.
                    Ok(resp) if resp.status() == 503 => {
                        bc.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(resp) => failures.push(format!("{uid}: HTTP {}", resp.status())),
                    Err(e) => failures.push(format!("{uid}: {e} after {:?}", started.elapsed())),
                }
                // Not a synchronisation: the pace of an API server's steady reviews.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            failures
        });
        GoodClient {
            stop,
            ok,
            busy,
            task,
        }
    }

    /// Stop and assert it saw no failures, at least one answer, and 503s for at most a
    /// quarter of its requests.
    async fn finish(self, what: &str) {
        self.stop.store(true, Ordering::Relaxed);
        let failures = self.task.await.expect("good client task");
        let (ok, busy) = (
            self.ok.load(Ordering::Relaxed),
            self.busy.load(Ordering::Relaxed),
        );
        eprintln!("{what}: good client: {ok} answered, {busy} × 503");
        assert!(failures.is_empty(), "{what}: {failures:?}");
        assert!(ok > 0, "{what}: the good client got no answers");
        assert!(
            busy * 4 <= ok + busy,
            "{what}: {busy} of {} requests got 503",
            ok + busy
        );
    }
}

/// Item 6: big bodies over one HTTP/2 connection (the stream cap and the byte budget), then
/// a burst over many HTTP/1.1 connections; RSS stays under 256 MiB during and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_under_big_bodies_on_http2_and_http1() {
    let s = start(&["--root-host", "example.org"]);
    let idle = rss_mib(s.pid()).expect("rss");
    let watch = RssWatch::start(s.pid());
    let good = GoodClient::start(&s, true);
    let started = Instant::now();

    // One connection, 16 × 8 MiB streams at once (the server allows 32 at a time; before
    // the fixes all were buffered and half decoded into JSON trees: far over 256 MiB).
    let streams = 16 * scale();
    // Just under the old 8 MiB limit, so the same attack runs against the old build.
    let bad = undecodable_body(8 * MIB - 4096);
    let valid = big_valid_body(8 * MIB - 8192);
    let h2 = support::http::client_builder(s.ca_pem())
        .http2_prior_knowledge()
        .build()
        .expect("client");
    let url = s.url("/validate/httproutes");
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..streams {
        let body = if i % 2 == 0 {
            bad.clone()
        } else {
            valid.clone()
        };
        tasks.spawn(post_status(h2.clone(), url.clone(), body));
    }
    let statuses = status_counts(tasks).await;
    eprintln!(
        "h2: {streams} × 8 MiB in {:?}: {statuses:?}, RSS max {:.0} MiB",
        started.elapsed(),
        watch.max_mib()
    );
    assert!(
        statuses.keys().all(|s| [200, 503].contains(s)),
        "every big review is answered, or refused for budget: {statuses:?}"
    );
    assert!(statuses.get(&200).is_some_and(|n| *n > 0), "{statuses:?}");

    // HTTP/1.1 burst: 8 connections at once, each one 8 MiB review.
    let burst = 8 * scale();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..burst {
        // A client per request: each gets its own connection.
        let c = client_h1(s.ca_pem());
        let body = if i % 2 == 0 {
            bad.clone()
        } else {
            valid.clone()
        };
        tasks.spawn(post_status(c, url.clone(), body));
    }
    let statuses = status_counts(tasks).await;
    eprintln!(
        "h1: {burst} × 8 MiB done at {:?}: {statuses:?}, RSS max {:.0} MiB",
        started.elapsed(),
        watch.max_mib()
    );
    assert!(
        statuses.keys().all(|s| [200, 503].contains(s)),
        "{statuses:?}"
    );
    good.finish("memory attack").await;

    let during = watch.max_mib();
    // After: what the allocator keeps once the attack is over (sampled for 3 s; the
    // largest sample counts).
    let settle = Instant::now() + Duration::from_secs(3);
    let mut after = 0f64;
    while Instant::now() < settle {
        after = after.max(rss_mib(s.pid()).expect("rss"));
        // Not a synchronisation: the sampling interval of the measured window.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let settled = rss_mib(s.pid()).expect("rss");
    eprintln!(
        "RSS idle {idle:.0} MiB, max during {during:.0} MiB, max in the 3 s after {after:.0} MiB, then {settled:.0} MiB"
    );
    assert!(
        during < RSS_LIMIT_MIB,
        "RSS during the attack: {during:.0} MiB"
    );
    assert!(
        after < RSS_LIMIT_MIB,
        "RSS after the attack: {after:.0} MiB"
    );
}

/// An HTTP/2 connection that completes the handshake and preface, sends no request, and
/// PINGs every `every` to look alive. Runs until the server closes it or the task is dropped.
/// The error says which step failed.
async fn pinging_h2(s: &Serve, every: Duration) -> Result<tokio::task::JoinHandle<()>, String> {
    let tls = tls_connect(s.webhook_addr(), rustls_client(s.ca_pem(), &[b"h2"]))
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (send, mut conn) = h2::client::handshake(tls)
        .await
        .map_err(|e| format!("h2 handshake: {e}"))?;
    let mut pings = conn.ping_pong().ok_or("ping_pong taken")?;
    Ok(tokio::spawn(async move {
        let pinger = async {
            loop {
                if pings.ping(h2::Ping::opaque()).await.is_err() {
                    return;
                }
                tokio::time::sleep(every).await;
            }
        };
        tokio::select! {
            _ = conn => {}
            _ = pinger => {}
        }
        drop(send);
    }))
}

/// Item 7: as many idle PINGing HTTP/2 connections as `--max-connections`, plus as many
/// stalled TLS handshakes, cannot lock out new clients that do real reviews.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_stalled_connections_cannot_lock_out_new_clients() {
    let max = 40 * scale();
    let max_s = max.to_string();
    // Listener debug logs name each closed handshake and connection, for the failure message.
    let s = start(&[
        "--root-host",
        "example.org",
        "--max-connections",
        &max_s,
        "--log-level",
        "info,tenant_gateway::server=debug",
    ]);
    let good = GoodClient::start(&s, true);
    let mut hostile = Vec::new();
    let mut errors = Vec::new();
    for _ in 0..max {
        // A few attempts each: the premise is that the flood is in, not that every connect
        // of a loaded CI machine succeeds first time.
        for _attempt in 0..3 {
            match pinging_h2(&s, Duration::from_millis(100)).await {
                Ok(t) => {
                    hostile.push(t);
                    break;
                }
                Err(e) => errors.push(e),
            }
        }
    }
    let mut stalled = Vec::new();
    for _ in 0..max {
        // TCP only: a TLS handshake that never starts.
        if let Ok(t) = tokio::net::TcpStream::connect(s.webhook_addr()).await {
            stalled.push(t);
        }
    }
    assert!(
        hostile.len() * 2 >= max,
        "most hostile connections got in first ({} of {max}; first errors {:?}); serve log:\n{}",
        hostile.len(),
        &errors[..errors.len().min(3)],
        s.stderr_text()
    );
    // New clients, each on a fresh connection, as an API server replica starting up would.
    let url = s.url("/validate/httproutes");
    for i in 0..20 {
        let c = client(s.ca_pem());
        let uid = format!("new-{i}");
        let resp = c
            .post(&url)
            .timeout(Duration::from_secs(5))
            .json(&admitted(&uid))
            .send()
            .await
            .unwrap_or_else(|e| panic!("new connection {i} locked out: {e}"));
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.expect("json");
        assert_eq!(v["response"]["uid"], uid.as_str());
    }
    good.finish("connection flood").await;
    for t in hostile {
        t.abort();
    }
    drop(stalled);
}

/// Item 8: a flood of stalled request heads on the metrics port; probes answer within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_within_a_second_while_the_metrics_port_is_flooded() {
    let s = start(&["--root-host", "example.org"]);
    let flood = 200 * scale();
    let addr = s.metrics.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    // Keep `flood` half-sent heads open, reopening those the server closes.
    let flooder = {
        let stop = stop.clone();
        let rounds = rounds.clone();
        let addr = addr.clone();
        tokio::spawn(async move {
            let mut open: Vec<tokio::net::TcpStream> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                open.retain(|c| {
                    let mut b = [0u8; 1];
                    // Still open: nothing to read yet. Closed by the server: EOF or an error.
                    matches!(c.try_read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                });
                while open.len() < flood {
                    let Ok(mut c) = tokio::net::TcpStream::connect(&addr).await else {
                        break;
                    };
                    let _ = c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
                    open.push(c);
                }
                rounds.fetch_add(1, Ordering::Relaxed);
                // Not a synchronisation: the flooder's pace between two top-ups.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    poll_async(DEADLINE, "the flood to fill the port", || async {
        (rounds.load(Ordering::Relaxed) > 0).then_some(())
    })
    .await;
    let mut worst = Duration::ZERO;
    for i in 0..30 {
        let path = if i % 2 == 0 { "/healthz" } else { "/readyz" };
        let a = addr.clone();
        let started = Instant::now();
        let r =
            tokio::task::spawn_blocking(move || http_get_within(&a, path, Duration::from_secs(1)))
                .await
                .expect("probe");
        let took = started.elapsed();
        worst = worst.max(took);
        assert_eq!(
            r.map(|r| r.0),
            Some(200),
            "probe {i} {path} failed after {took:?}"
        );
        assert!(took < Duration::from_secs(1), "probe {i} took {took:?}");
        // Not a synchronisation: the kubelet's probes come spaced, not back to back.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("health flood of {flood}: worst probe {worst:?}");
    stop.store(true, Ordering::Relaxed);
    let _ = flooder.await;
}

/// Item 9: with hostile connections open (PING floods, stalled bodies, stalled handshakes,
/// a client that never reads), the process exits within the grace period plus one second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exits_within_grace_plus_one_second_whatever_clients_do() {
    let grace = Duration::from_secs(2);
    let mut s = start(&["--root-host", "example.org", "--shutdown-grace", "2"]);
    let mut keep = Vec::new();
    // PING floods with a stream whose body never finishes.
    for _ in 0..4 {
        let tls = tls_connect(s.webhook_addr(), rustls_client(s.ca_pem(), &[b"h2"]))
            .await
            .expect("tls");
        let (send, mut conn) = h2::client::handshake(tls).await.expect("h2");
        let mut pings = conn.ping_pong().expect("ping");
        let mut send = send.ready().await.expect("ready");
        let req = http::Request::post(s.url("/validate/httproutes"))
            .header("content-length", "100000")
            .body(())
            .expect("request");
        let (_resp, mut body) = send.send_request(req, false).expect("stream");
        body.send_data(Bytes::from_static(b"{\"request\":"), false)
            .expect("data");
        keep.push(tokio::spawn(async move {
            let flood = async { while pings.ping(h2::Ping::opaque()).await.is_ok() {} };
            tokio::select! { _ = conn => {} _ = flood => {} }
            drop((send, body));
        }));
    }
    let mut raw = Vec::new();
    // HTTP/1.1 stalled bodies.
    for _ in 0..4 {
        let mut tls = tls_connect(s.webhook_addr(), rustls_client(s.ca_pem(), &[b"http/1.1"]))
            .await
            .expect("tls");
        tls.write_all(
            b"POST /validate/httproutes HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"a\":",
        )
        .await
        .expect("write");
        raw.push(tls);
    }
    // A reader that never reads: pipelined requests, answers pile up unread.
    let mut slow = tls_connect(s.webhook_addr(), rustls_client(s.ca_pem(), &[b"http/1.1"]))
        .await
        .expect("tls");
    let one = serde_json::to_vec(&admitted("slow")).expect("json");
    let mut pipelined = Vec::new();
    for _ in 0..200 {
        pipelined.extend_from_slice(
            format!(
                "POST /validate/httproutes HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
                one.len()
            )
            .as_bytes(),
        );
        pipelined.extend_from_slice(&one);
    }
    let writer = tokio::spawn(async move {
        let _ = tokio::time::timeout(DEADLINE, slow.write_all(&pipelined)).await;
        slow
    });
    // Stalled handshakes.
    let mut tcp = Vec::new();
    for _ in 0..8 {
        tcp.push(
            tokio::net::TcpStream::connect(s.webhook_addr())
                .await
                .expect("tcp"),
        );
    }
    // Kept as a pause: the server shows no sign of having accepted these connections (no
    // gauge, no log at this level), and a connection it has not seen yet only makes the exit
    // easier, never the test flaky.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    s.sigterm();
    let status = tokio::task::block_in_place(|| s.wait_exit(grace + Duration::from_secs(3)));
    let took = started.elapsed();
    eprintln!("exit after SIGTERM: {took:?} ({status:?})");
    assert!(status.is_some(), "still running {took:?} after SIGTERM");
    assert!(
        took <= grace + Duration::from_secs(1),
        "exit took {took:?}, more than the grace period plus one second"
    );
    for k in keep {
        k.abort();
    }
    writer.abort();
    drop((raw, tcp));
}

/// POST `body` to `url`: the HTTP status, 0 when no answer came.
async fn post_status(c: reqwest::Client, url: String, body: bytes::Bytes) -> u16 {
    match c.post(&url).body(body).send().await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// How many of `tasks` ended with each status.
async fn status_counts(
    mut tasks: tokio::task::JoinSet<u16>,
) -> std::collections::BTreeMap<u16, usize> {
    let mut statuses = std::collections::BTreeMap::new();
    while let Some(r) = tasks.join_next().await {
        *statuses.entry(r.expect("task")).or_default() += 1;
    }
    statuses
}
