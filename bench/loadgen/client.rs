//! The HTTPS client: connections opened (TLS handshake included) before any measurement,
//! then driven closed-loop (each worker sends its next request as soon as the previous one
//! is answered) or open-loop (requests issued on a fixed schedule).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::ClientConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::payload::{self, Review};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/2 (ALPN h2): a few connections multiplexing all streams.
    H2,
    /// HTTP/1.1 keep-alive (ALPN http/1.1): one connection per in-flight request.
    H1,
}

impl Proto {
    pub fn label(self) -> &'static str {
        match self {
            Proto::H2 => "HTTP/2",
            Proto::H1 => "HTTP/1.1",
        }
    }
}

/// Where and how to connect.
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub ca_pem: String,
}

/// Latency histograms are in nanoseconds, 3 significant digits, up to a minute.
pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("valid histogram bounds")
}

fn tls_config(ca_pem: &str, proto: Proto) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.expect("the CA PEM parses"))
            .expect("the CA certificate is usable as a root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = match proto {
        Proto::H2 => vec![b"h2".to_vec()],
        Proto::H1 => vec![b"http/1.1".to_vec()],
    };
    Arc::new(cfg)
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// Open one TLS connection and run the HTTP handshake for `proto`.
async fn connect(target: &Target, cfg: Arc<ClientConfig>, proto: Proto) -> anyhow::Result<Sender> {
    let tcp = TcpStream::connect(target.addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from("localhost")?;
    let tls = TlsConnector::from(cfg).connect(name, tcp).await?;
    let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    let io = TokioIo::new(tls);
    match proto {
        Proto::H2 => {
            anyhow::ensure!(
                alpn.as_deref() == Some(b"h2"),
                "server did not negotiate h2 (ALPN {alpn:?})"
            );
            let (send, conn) = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .handshake(io)
                .await?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(Sender::H2(send))
        }
        Proto::H1 => {
            anyhow::ensure!(
                alpn.as_deref() == Some(b"http/1.1"),
                "server did not negotiate http/1.1 (ALPN {alpn:?})"
            );
            let (send, conn) = http1::Builder::new().handshake(io).await?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(Sender::H1(send))
        }
    }
}

/// Connections for one phase: `workers` senders (HTTP/2 ones share `h2_conns` connections).
pub struct Pool {
    builder: RequestBuilder,
    senders: Vec<Sender>,
}

impl Pool {
    /// Open every connection now, so no TLS handshake happens while measuring.
    pub async fn open(
        target: &Target,
        proto: Proto,
        workers: usize,
        h2_conns: usize,
    ) -> anyhow::Result<Pool> {
        let cfg = tls_config(&target.ca_pem, proto);
        let mut senders = Vec::with_capacity(workers);
        match proto {
            Proto::H2 => {
                let n = h2_conns.clamp(1, workers.max(1));
                let mut conns = Vec::with_capacity(n);
                for _ in 0..n {
                    match connect(target, cfg.clone(), proto).await? {
                        Sender::H2(s) => conns.push(s),
                        Sender::H1(_) => unreachable!("connect(H2) returns an HTTP/2 sender"),
                    }
                }
                for i in 0..workers {
                    senders.push(Sender::H2(conns[i % n].clone()));
                }
            }
            Proto::H1 => {
                let opened = futures::future::join_all(
                    (0..workers).map(|_| connect(target, cfg.clone(), proto)),
                )
                .await;
                for s in opened {
                    senders.push(s?);
                }
            }
        }
        Ok(Pool {
            builder: RequestBuilder::new(proto, target.addr.port()),
            senders,
        })
    }
}

/// Why a request did not count as a success.
#[derive(Debug, Default, Clone)]
pub struct Failures {
    /// Connection or protocol errors (the worker stops on these).
    pub transport: u64,
    /// An HTTP status other than 200.
    pub status: u64,
    /// 200, but not `"allowed":true` for the request's uid.
    pub not_allowed: u64,
    /// The first failure seen, for the report.
    pub first: Option<String>,
}

impl Failures {
    pub fn total(&self) -> u64 {
        self.transport + self.status + self.not_allowed
    }

    pub fn merge(&mut self, o: Failures) {
        self.transport += o.transport;
        self.status += o.status;
        self.not_allowed += o.not_allowed;
        if self.first.is_none() {
            self.first = o.first;
        }
    }
}

enum Outcome {
    Ok,
    Transport(String),
    Status(StatusCode, String),
    NotAllowed(String),
}

async fn send_one(sender: &mut Sender, req: Request<Full<Bytes>>, uid: &[u8; 36]) -> Outcome {
    let resp = match sender {
        Sender::H1(s) => match s.ready().await {
            Ok(()) => s.send_request(req).await,
            Err(e) => Err(e),
        },
        Sender::H2(s) => match s.ready().await {
            Ok(()) => s.send_request(req).await,
            Err(e) => Err(e),
        },
    };
    let resp = match resp {
        Ok(r) => r,
        Err(e) => return Outcome::Transport(e.to_string()),
    };
    let status = resp.status();
    let body = match resp.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Outcome::Transport(format!("reading the response body: {e}")),
    };
    if status != StatusCode::OK {
        return Outcome::Status(status, String::from_utf8_lossy(&body).into_owned());
    }
    if !payload::allowed_for(&body, uid) {
        return Outcome::NotAllowed(String::from_utf8_lossy(&body).into_owned());
    }
    Outcome::Ok
}

/// What one phase measured.
pub struct PhaseResult {
    /// Successful requests that completed inside the measured window.
    pub ok: u64,
    pub failures: Failures,
    /// Length of the measured window.
    pub secs: f64,
    /// Client latency (request issued → whole response body read), ns.
    pub latency: Histogram<u64>,
    /// Open loop only: how late each request was issued relative to its schedule, ns.
    pub lag: Option<Histogram<u64>>,
}

impl PhaseResult {
    pub fn rps(&self) -> f64 {
        self.ok as f64 / self.secs
    }
}

struct WorkerOut {
    ok: u64,
    failures: Failures,
    latency: Histogram<u64>,
    lag: Histogram<u64>,
}

fn record(out: &mut WorkerOut, outcome: Outcome, latency: Duration, in_window: bool) -> bool /* keep going */
{
    let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
    match outcome {
        Outcome::Ok => {
            if in_window {
                out.ok += 1;
                out.latency.saturating_record(nanos);
            }
            true
        }
        Outcome::Transport(e) => {
            out.failures.transport += 1;
            out.failures.first.get_or_insert(format!("transport: {e}"));
            false
        }
        Outcome::Status(s, b) => {
            out.failures.status += 1;
            out.failures
                .first
                .get_or_insert(format!("HTTP {s}: {}", truncate(&b)));
            true
        }
        Outcome::NotAllowed(b) => {
            out.failures.not_allowed += 1;
            out.failures
                .first
                .get_or_insert(format!("not allowed: {}", truncate(&b)));
            true
        }
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(300).collect()
}

fn merge(outs: Vec<WorkerOut>, secs: f64, open: bool) -> PhaseResult {
    let mut r = PhaseResult {
        ok: 0,
        failures: Failures::default(),
        secs,
        latency: new_hist(),
        lag: open.then(new_hist),
    };
    for o in outs {
        r.ok += o.ok;
        r.failures.merge(o.failures);
        r.latency.add(&o.latency).expect("same histogram bounds");
        if let Some(l) = r.lag.as_mut() {
            l.add(&o.lag).expect("same histogram bounds");
        }
    }
    r
}

/// Closed loop: every worker keeps one request in flight for `warmup + duration`; only
/// requests completing inside the last `duration` are counted.
pub async fn closed_loop(
    pool: &mut Pool,
    review: &Review,
    warmup: Duration,
    duration: Duration,
) -> PhaseResult {
    let start = Instant::now();
    let window_start = start + warmup;
    let end = window_start + duration;
    let senders = std::mem::take(&mut pool.senders);
    let mut tasks = Vec::with_capacity(senders.len());
    for (w, mut sender) in senders.into_iter().enumerate() {
        let review = review.clone();
        let builder = pool.builder.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = WorkerOut {
                ok: 0,
                failures: Failures::default(),
                latency: new_hist(),
                lag: new_hist(),
            };
            let mut seq = 0u64;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let uid = payload::uid(w as u32, seq);
                seq += 1;
                let req = builder.build(review.with_uid(&uid));
                let outcome = send_one(&mut sender, req, &uid).await;
                let t1 = Instant::now();
                let in_window = t0 >= window_start && t1 <= end;
                if !record(&mut out, outcome, t1 - t0, in_window) {
                    break;
                }
            }
            (out, sender)
        }));
    }
    let outs = collect(tasks, pool).await;
    merge(outs, duration.as_secs_f64(), false)
}

/// Open loop: request `k` is due at `start + k / rate`, whatever happened to earlier ones.
/// Workers take the next due slot when free; latency is counted from when a request is
/// actually issued, and how late that was against its slot is kept separately (`lag`).
pub async fn open_loop(
    pool: &mut Pool,
    review: &Review,
    rate: f64,
    duration: Duration,
) -> PhaseResult {
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let total = (rate * duration.as_secs_f64()).floor() as u64;
    let start = Instant::now() + Duration::from_millis(20);
    let next = Arc::new(AtomicU64::new(0));
    let senders = std::mem::take(&mut pool.senders);
    let mut tasks = Vec::with_capacity(senders.len());
    for (w, mut sender) in senders.into_iter().enumerate() {
        let review = review.clone();
        let next = next.clone();
        let builder = pool.builder.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = WorkerOut {
                ok: 0,
                failures: Failures::default(),
                latency: new_hist(),
                lag: new_hist(),
            };
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= total {
                    break;
                }
                let due = start + interval.mul_f64(k as f64);
                tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
                let t0 = Instant::now();
                let lag = t0.saturating_duration_since(due);
                out.lag
                    .saturating_record(u64::try_from(lag.as_nanos()).unwrap_or(u64::MAX));
                let uid = payload::uid(w as u32, k);
                let req = builder.build(review.with_uid(&uid));
                let outcome = send_one(&mut sender, req, &uid).await;
                if !record(&mut out, outcome, t0.elapsed(), true) {
                    break;
                }
            }
            (out, sender)
        }));
    }
    let outs = collect(tasks, pool).await;
    merge(outs, duration.as_secs_f64(), true)
}

/// One review on every sender, answers read; the connections stay open, idle, for whoever
/// measures them. The first sender's review goes alone, so an HTTP/2 connection has the
/// server's SETTINGS (its stream limit) before the rest go at once as concurrent streams.
// Called by `conn-heap` (bench/connheap), which shares this file; loadgen does not.
#[allow(dead_code)]
pub async fn each_once(pool: &mut Pool, review: &Review) -> Failures {
    let builder = &pool.builder;
    let mut out = WorkerOut {
        ok: 0,
        failures: Failures::default(),
        latency: new_hist(),
        lag: new_hist(),
    };
    let Some((first, rest)) = pool.senders.split_first_mut() else {
        return out.failures;
    };
    async fn one(b: &RequestBuilder, review: &Review, w: usize, sender: &mut Sender) -> Outcome {
        let uid = payload::uid(w as u32, 0);
        send_one(sender, b.build(review.with_uid(&uid)), &uid).await
    }
    record(
        &mut out,
        one(builder, review, 0, first).await,
        Duration::ZERO,
        true,
    );
    let sends = rest
        .iter_mut()
        .enumerate()
        .map(|(w, s)| one(builder, review, w + 1, s));
    for outcome in futures::future::join_all(sends).await {
        record(&mut out, outcome, Duration::ZERO, true);
    }
    out.failures
}

async fn collect(
    tasks: Vec<tokio::task::JoinHandle<(WorkerOut, Sender)>>,
    pool: &mut Pool,
) -> Vec<WorkerOut> {
    let mut outs = Vec::with_capacity(tasks.len());
    for t in tasks {
        let (out, sender) = t.await.expect("a load worker panicked");
        outs.push(out);
        pool.senders.push(sender);
    }
    outs
}

/// Builds the POST for one review; cloned into every worker.
#[derive(Clone)]
struct RequestBuilder {
    proto: Proto,
    uri: http::Uri,
    host: http::HeaderValue,
}

impl RequestBuilder {
    fn new(proto: Proto, port: u16) -> RequestBuilder {
        let authority = format!("localhost:{port}");
        let uri = match proto {
            // HTTP/2 carries scheme and authority as pseudo-headers, taken from the URI.
            Proto::H2 => format!("https://{authority}{}", payload::PATH),
            Proto::H1 => payload::PATH.to_string(),
        };
        RequestBuilder {
            proto,
            uri: uri.parse().expect("a valid request URI"),
            host: http::HeaderValue::from_str(&authority).expect("a valid Host header"),
        }
    }

    fn build(&self, body: Vec<u8>) -> Request<Full<Bytes>> {
        let mut b = Request::post(self.uri.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, */*")
            .header(header::USER_AGENT, "kube-apiserver-admission");
        if self.proto == Proto::H1 {
            b = b.header(header::HOST, self.host.clone());
        }
        b.body(Full::new(Bytes::from(body)))
            .expect("a request with a static path and headers builds")
    }
}
