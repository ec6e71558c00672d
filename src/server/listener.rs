//! Accept loop and per-connection driving shared by the webhook (TLS) and metrics (plain)
//! listeners: connection limits, handshake/idle timeouts, graceful drain (SPEC §9).
//!
//! Connection slots, so that idle or stalled clients cannot lock others out:
//! - a TLS handshake in progress holds a slot of its own pool; the connection slot is taken
//!   only once the handshake is done;
//! - a connection that has not yet completed a request ("unproven") may hold at most
//!   `max_unproven` slots; the rest of `max_connections` is the reserve for connections that
//!   have (the API server's, which keep completing reviews);
//! - when a pool is full, the oldest unproven connection (or handshake) without a request in
//!   progress is closed to make room, so a flood of idle or half-sent connections is turned
//!   over by new clients instead of refusing them. Only when every slot holds a proven
//!   connection or a request in progress is a new connection refused.
//!
//! Idleness: a connection without any request in progress for `idle_timeout` is closed
//! (HTTP/2 GOAWAY) whatever control frames (PINGs, SETTINGS) it exchanges; one with a
//! request in progress is idle when no byte has moved for `idle_timeout`.
//!
//! Request heads: on the webhook port the HTTP/1 header timeout counts from the first byte
//! of a head ([`HeadTimer`]), so a keep-alive connection waits for its next request up to
//! `idle_timeout`, as Go's net/http server separates `IdleTimeout` from `ReadHeaderTimeout`.
//! The API server reuses an idle webhook connection for 90 s (Go's default) and, for a
//! webhook registered by Service (every in-cluster one), speaks HTTP/1.1 only; closing its
//! connections after the header timeout would cost the next review a TCP and TLS handshake
//! and race it (Go does not resend a POST on a connection closed under it, and the webhook
//! fails closed).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use futures::future::Either;
use hyper::rt::{Sleep, Timer};
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// Pause after an accept error (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);
/// At most one "connection refused" warning per this period, with the count since the last.
const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(10);
/// HTTP/1 read buffer per connection.
const H1_MAX_BUF: usize = 64 * 1024;
/// HTTP/2 flow-control windows we grant (hyper's defaults are 1 MiB each).
const H2_STREAM_WINDOW: u32 = 128 * 1024;
const H2_CONN_WINDOW: u32 = 256 * 1024;
/// HTTP/2 request head size (the API server sends a few short headers).
const H2_MAX_HEADER_LIST: u32 = 16 * 1024;

/// Timeouts and protocol settings for one listener.
#[derive(Debug, Clone)]
pub(crate) struct ConnSettings {
    /// `webhook` or `metrics`, for logs.
    pub name: &'static str,
    pub max_connections: usize,
    /// Slots that connections which have not completed a request may hold.
    pub max_unproven: usize,
    pub handshake_timeout: Duration,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub h2_max_concurrent_streams: u32,
}

/// hyper's HTTP/1 and HTTP/2 builders, each used alone: on TLS the protocol is chosen by
/// ALPN, so no bytes are sniffed (sniffing would wait for a preface without any timeout), and
/// a connection's state holds its own protocol's machinery only (hyper-util's `auto`
/// connection is an enum sized for both protocols and a copy of the builder).
struct Builders {
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
}

impl Builders {
    fn new(s: &ConnSettings) -> Builders {
        let mut h1 = http1::Builder::new();
        h1
            // hyper starts this timer whenever it waits for a request head, so with it a
            // keep-alive HTTP/1 connection may sit idle only this long between requests; the
            // webhook's TLS connections replace it by a `HeadTimer`.
            .timer(TokioTimer::new())
            .header_read_timeout(s.header_read_timeout)
            // hyper buffers up to ~400 KiB per connection by default; request heads are
            // small and bodies stream through in pieces either way.
            .max_buf_size(H1_MAX_BUF)
            .keep_alive(true);
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_concurrent_streams(s.h2_max_concurrent_streams)
            // What a client may send before anyone reads it: bounded per stream and per
            // connection, so unread data stays small next to the body budget.
            .initial_stream_window_size(H2_STREAM_WINDOW)
            .initial_connection_window_size(H2_CONN_WINDOW)
            .max_header_list_size(H2_MAX_HEADER_LIST);
        Builders { h1, h2 }
    }
}

/// A listener whose accept loop is running.
pub(crate) struct Running {
    name: &'static str,
    stop: watch::Sender<bool>,
    drain: watch::Sender<bool>,
    task: tokio::task::JoinHandle<JoinSet<()>>,
    /// Connection tasks the accept loop holds: what the unit tests watch to see finished
    /// connections reaped without waiting for the next client.
    #[cfg(test)]
    tasks: watch::Receiver<usize>,
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DrainReport {
    /// Connections still open when the grace period ran out; they were closed abruptly.
    pub cut: usize,
}

pub(crate) fn spawn(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    settings: ConnSettings,
) -> Running {
    let (stop_tx, stop_rx) = watch::channel(false);
    let (drain_tx, drain_rx) = watch::channel(false);
    #[cfg(test)]
    let (tasks_tx, tasks_rx) = watch::channel(0);
    let control = Control {
        stop: stop_rx,
        drain: drain_rx,
        #[cfg(test)]
        tasks: tasks_tx,
    };
    let name = settings.name;
    let task = tokio::spawn(accept_loop(listener, tls, router, settings, control));
    Running {
        name,
        stop: stop_tx,
        drain: drain_tx,
        task,
        #[cfg(test)]
        tasks: tasks_rx,
    }
}

/// What [`Running`] tells the accept loop, and (in the unit tests) what the loop reports.
struct Control {
    stop: watch::Receiver<bool>,
    drain: watch::Receiver<bool>,
    #[cfg(test)]
    tasks: watch::Sender<usize>,
}

impl Running {
    /// Stop accepting (the listening socket closes, so new connections are refused), then let
    /// open connections finish their requests until `deadline`; cut the rest.
    pub(crate) async fn shutdown(self, deadline: tokio::time::Instant) -> DrainReport {
        // Receivers live as long as the accept loop; a send error means it already ended.
        let _ = self.stop.send(true);
        let mut conns = match self.task.await {
            Ok(set) => set,
            Err(e) => {
                tracing::error!(listener = self.name, error = %e, "accept loop failed");
                return DrainReport { cut: 0 };
            }
        };
        let open = conns.len();
        let _ = self.drain.send(true);
        if open > 0 {
            tracing::info!(
                listener = self.name,
                connections = open,
                "draining open connections"
            );
        }
        let all_done = async {
            while let Some(res) = conns.join_next().await {
                log_task_end(self.name, res);
            }
        };
        if tokio::time::timeout_at(deadline, all_done).await.is_ok() {
            return DrainReport { cut: 0 };
        }
        let cut = conns.len();
        conns.abort_all();
        tracing::warn!(
            listener = self.name,
            connections = cut,
            "shutdown grace period exceeded; cutting connections with requests still in flight"
        );
        while conns.join_next().await.is_some() {}
        DrainReport { cut }
    }
}

/// Take the connection tasks that have ended out of `conns` without waiting.
fn reap_finished(name: &'static str, conns: &mut JoinSet<()>) {
    while let Some(res) = conns.try_join_next() {
        log_task_end(name, res);
    }
}

fn log_task_end(name: &'static str, res: Result<(), tokio::task::JoinError>) {
    if let Err(e) = res
        && e.is_panic()
    {
        tracing::error!(listener = name, error = %e, "connection task panicked");
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    settings: ConnSettings,
    control: Control,
) -> JoinSet<()> {
    let mut stop = control.stop;
    let drain = control.drain;
    let builders = Arc::new(Builders::new(&settings));
    let settings = Arc::new(settings);
    let handshakes = Arc::new(Pool::new(
        settings.max_connections,
        settings.max_connections,
    ));
    let connections = Arc::new(Pool::new(settings.max_connections, settings.max_unproven));
    let mut conns = JoinSet::new();
    let mut refused = Refusals::default();
    loop {
        // Reap finished connections so the set only holds live ones.
        reap_finished(settings.name, &mut conns);
        #[cfg(test)]
        control.tasks.send_replace(conns.len());
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            // A finished connection is reaped as it ends, not at the next accept: after a
            // burst its task's memory would otherwise wait for the next client.
            Some(res) = conns.join_next(), if !conns.is_empty() => {
                log_task_end(settings.name, res);
                continue;
            }
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Per-connection errors (reset before accept) and resource exhaustion
                // (EMFILE) are both transient for a server; keep serving.
                tracing::warn!(listener = settings.name, error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        let activity = Arc::new(Activity::new());
        // A plain connection needs no handshake: it takes its connection slot now.
        let first_slot = match tls {
            Some(_) => handshakes.admit(&activity),
            None => connections.admit(&activity),
        };
        let Some(first_slot) = first_slot else {
            // Refuse rather than queue: a queued client would hang until its own timeout
            // (the API server's is 5 s) while a refused one fails fast and is retried, by
            // then possibly against another replica.
            drop(stream);
            refused.count(&settings);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let tls = tls.clone();
        let router = router.clone();
        let builders = builders.clone();
        let settings = settings.clone();
        let drain = drain.clone();
        let connections = connections.clone();
        conns.spawn(async move {
            let conn = Conn {
                activity,
                slot: first_slot,
                connections,
            };
            serve_connection(stream, tls, router, &builders, &settings, drain, conn).await;
            tracing::trace!(%peer, "connection closed");
        });
    }
    // Dropping the listener here closes the socket: from now on connections are refused.
    drop(listener);
    // `stop` wins over a connection that ended at the same moment: the drain counts only
    // open connections.
    reap_finished(settings.name, &mut conns);
    conns
}

/// Rate-limited "connection refused" warnings.
#[derive(Default)]
struct Refusals {
    since_log: u64,
    last_log: Option<Instant>,
}

impl Refusals {
    fn count(&mut self, settings: &ConnSettings) {
        self.since_log += 1;
        if self
            .last_log
            .is_none_or(|t| t.elapsed() >= REFUSAL_LOG_PERIOD)
        {
            tracing::warn!(
                listener = settings.name,
                limit = settings.max_connections,
                refused = self.since_log,
                "connection limit reached and no idle connection to close; closing new connections"
            );
            self.last_log = Some(Instant::now());
            self.since_log = 0;
        }
    }
}

/// One connection's state and the slot it holds (handshake slot first, then connection).
struct Conn {
    activity: Arc<Activity>,
    slot: Slot,
    connections: Arc<Pool>,
}

async fn serve_connection(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    router: Router,
    builders: &Builders,
    settings: &ConnSettings,
    mut drain: watch::Receiver<bool>,
    mut conn: Conn,
) {
    let activity = conn.activity.clone();
    let io = ActivityIo {
        inner: stream,
        activity: activity.clone(),
    };
    let service =
        TowerToHyperService::new(tracked(router, activity.clone(), conn.connections.clone()));
    // Each phase of a connection (handshake, HTTP/1, HTTP/2) runs boxed at its own size: the
    // task is spawned before the handshake, so inline it would be sized for the largest phase
    // (HTTP/2's) for as long as any connection lives, and would hold the TLS stream twice
    // (the handshake's copy beside the connection's).
    match tls {
        None => {
            let c = builders.h1.serve_connection(TokioIo::new(io), service);
            Box::pin(drive(Box::pin(c), &activity, settings, drain)).await;
        }
        Some(acceptor) => {
            // The TLS stream (1.2 KiB) is a local of this block only: one that lived to the
            // end of the arm would keep its space in the task beside the connection's copy
            // for as long as the connection is open.
            let connection = {
                let handshake = Box::pin(tokio::time::timeout(
                    settings.handshake_timeout,
                    acceptor.accept(io),
                ));
                let tls_stream = tokio::select! {
                    _ = drain.wait_for(|d| *d) => return,
                    _ = activity.evicted() => {
                        tracing::debug!(listener = settings.name, "handshake pool full; closing the oldest pending handshake");
                        return;
                    }
                    r = handshake => match r {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(listener = settings.name, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(listener = settings.name, "TLS handshake timed out");
                            return;
                        }
                    },
                };
                // The connection slot is taken only now: handshakes that never finish
                // cannot hold one. Release the handshake slot first so the two pools stay
                // apart.
                drop(std::mem::replace(
                    &mut conn.slot,
                    Slot::none(&conn.connections),
                ));
                let Some(slot) = conn.connections.admit(&activity) else {
                    tracing::debug!(
                        listener = settings.name,
                        "connection limit reached after the handshake; closing"
                    );
                    return;
                };
                conn.slot = slot;
                let h2 = tls_stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                // Which protocol the API server chose is worth seeing when latency is in
                // question: it offers HTTP/2 only to a webhook registered by a loopback URL.
                tracing::debug!(
                    listener = settings.name,
                    protocol = if h2 { "h2" } else { "http/1.1" },
                    "connection established"
                );
                if h2 {
                    // hyper's HTTP/2 server waits for the client preface without a timeout
                    // (and a graceful shutdown waits for it too); a client that negotiated h2
                    // and then stays silent is dropped after the header timeout, like a slow
                    // HTTP/1 request head.
                    activity.start_waiting_for_client();
                    let c = builders
                        .h2
                        .serve_connection(TokioIo::new(tls_stream), service);
                    Either::Left(Box::pin(drive(Box::pin(c), &activity, settings, drain)))
                } else {
                    let mut h1 = builders.h1.clone();
                    h1.timer(HeadTimer(activity.clone()));
                    let c = h1.serve_connection(TokioIo::new(tls_stream), service);
                    Either::Right(Box::pin(drive(Box::pin(c), &activity, settings, drain)))
                }
            };
            connection.await;
        }
    }
    drop(conn);
}

/// The router, counting requests in progress on `activity` and marking the connection
/// proven (out of the evictable pool) when a request completes with 200.
fn tracked(
    router: Router,
    activity: Arc<Activity>,
    pool: Arc<Pool>,
) -> impl tower::Service<
    http::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<axum::response::Response, std::convert::Infallible>> + Send,
> + Clone
+ Send {
    tower::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let router = router.clone();
        let activity = activity.clone();
        let pool = pool.clone();
        let guard = InProgress::start(activity.clone());
        async move {
            let resp = tower::ServiceExt::oneshot(router, req).await;
            if let Ok(r) = &resp
                && r.status() == http::StatusCode::OK
                && !activity.proven.swap(true, Ordering::Relaxed)
            {
                pool.prove(&activity);
            }
            drop(guard);
            resp
        }
    })
}

/// A request in progress on a connection; counted until dropped (also when cancelled).
struct InProgress(Arc<Activity>);

impl InProgress {
    fn start(a: Arc<Activity>) -> InProgress {
        a.open.fetch_add(1, Ordering::Relaxed);
        a.head_begun.store(false, Ordering::Relaxed);
        a.touch_request();
        InProgress(a)
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        self.0.touch_request();
    }
}

/// Connection slots of one kind (handshakes, or established connections).
struct Pool {
    max: usize,
    max_unproven: usize,
    inner: Mutex<PoolInner>,
}

#[derive(Default)]
struct PoolInner {
    total: usize,
    /// In arrival order: the front is the first candidate for eviction.
    unproven: VecDeque<Arc<Activity>>,
}

/// A slot in a [`Pool`], given back when dropped (unless the connection was evicted, which
/// gave it back already).
struct Slot {
    pool: Arc<Pool>,
    activity: Option<Arc<Activity>>,
}

impl Pool {
    fn new(max: usize, max_unproven: usize) -> Pool {
        Pool {
            max,
            max_unproven: max_unproven.min(max),
            inner: Mutex::new(PoolInner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        // The critical sections only move counters and queue entries: a panic inside one
        // cannot leave them half-updated in a way worse than a lost slot.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a new (unproven) connection, closing the oldest idle unproven one when
    /// the pool is full; `None` when nothing can be closed.
    fn admit(self: &Arc<Self>, a: &Arc<Activity>) -> Option<Slot> {
        let mut g = self.lock();
        if g.total >= self.max || g.unproven.len() >= self.max_unproven {
            let pos = g
                .unproven
                .iter()
                .position(|c| c.open.load(Ordering::Relaxed) == 0)?;
            let victim = g.unproven.remove(pos)?;
            victim.evict();
            g.total -= 1;
        }
        g.total += 1;
        g.unproven.push_back(a.clone());
        Some(Slot {
            pool: self.clone(),
            activity: Some(a.clone()),
        })
    }

    /// `a` completed a request: it may use the reserve and is no longer evicted for others.
    fn prove(&self, a: &Arc<Activity>) {
        let mut g = self.lock();
        if let Some(pos) = g.unproven.iter().position(|c| Arc::ptr_eq(c, a)) {
            g.unproven.remove(pos);
        }
    }

    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let g = self.lock();
        (g.total, g.unproven.len())
    }
}

impl Slot {
    /// A placeholder holding nothing.
    fn none(pool: &Arc<Pool>) -> Slot {
        Slot {
            pool: pool.clone(),
            activity: None,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(a) = self.activity.take() else {
            return;
        };
        let mut g = self.pool.lock();
        if a.is_evicted() {
            return;
        }
        g.total = g.total.saturating_sub(1);
        if let Some(pos) = g.unproven.iter().position(|c| Arc::ptr_eq(c, &a)) {
            g.unproven.remove(pos);
        }
    }
}

/// Run one HTTP connection to completion. A drain signal starts a graceful shutdown (HTTP/1:
/// finish the current request, then close; HTTP/2: GOAWAY, finish open streams). So does
/// being idle for `idle_timeout` (see the module docs); if the peer then stays idle for
/// another `idle_timeout`, the connection is dropped. Eviction drops it at once (it has no
/// request in progress).
///
/// The connection comes boxed: an argument pinned inside an async fn is held twice in its
/// future (the argument's slot and the pinned local's), ~1.8 KB on every open connection.
async fn drive<C>(
    mut conn: Pin<Box<C>>,
    activity: &Activity,
    settings: &ConnSettings,
    mut drain: watch::Receiver<bool>,
) where
    C: GracefulConnection,
    C::Error: std::fmt::Display,
{
    let mut graceful = false;
    let silent_deadline = tokio::time::sleep(settings.header_read_timeout);
    let mut silent_deadline = std::pin::pin!(silent_deadline);
    loop {
        tokio::select! {
            // The connection first, so work it has ready (a GOAWAY just requested) is done
            // before any timer is looked at.
            biased;
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(listener = settings.name, error = %e, "connection ended with an error");
                }
                return;
            }
            _ = drain.wait_for(|d| *d), if !graceful => {
                conn.as_mut().graceful_shutdown();
                graceful = true;
                // The peer gets a full idle period to answer the GOAWAY before it is cut.
                activity.touch();
                activity.touch_request();
            }
            _ = activity.evicted() => {
                tracing::debug!(listener = settings.name, "connection limit reached; closing the oldest idle connection that has completed no request");
                return;
            }
            _ = silent_deadline.as_mut(), if activity.waiting_for_client() => {
                // The guard was evaluated when this select started; the client may have
                // spoken since.
                if activity.waiting_for_client() {
                    tracing::debug!(listener = settings.name, "client sent nothing after the TLS handshake; dropping the connection");
                    return;
                }
            }
            _ = activity.idle_for(settings.idle_timeout) => {
                if graceful {
                    tracing::debug!(listener = settings.name, "idle connection did not close; dropping it");
                    return;
                }
                conn.as_mut().graceful_shutdown();
                graceful = true;
                activity.touch();
                activity.touch_request();
            }
        }
    }
}

/// What the idle and eviction rules look at on one connection.
struct Activity {
    /// tokio's clock, so the sleeps below agree with it.
    start: tokio::time::Instant,
    /// Milliseconds since `start` of the last byte read or written.
    last_ms: AtomicU64,
    /// Milliseconds since `start` of the last request start or end.
    last_request_ms: AtomicU64,
    /// Requests in progress.
    open: AtomicUsize,
    /// Completed a request with 200: no longer evictable.
    proven: AtomicBool,
    /// Closed to make room for a new connection.
    evicted: AtomicBool,
    evict_signal: Notify,
    /// Set after the handshake when the protocol needs the client to speak first; cleared
    /// by the first byte read.
    waiting: AtomicBool,
    /// Bytes arrived while no request was in progress: a request head has begun (on a new
    /// connection, the TLS handshake counts). Cleared when a request starts.
    head_begun: AtomicBool,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: tokio::time::Instant::now(),
            last_ms: AtomicU64::new(0),
            last_request_ms: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            proven: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            evict_signal: Notify::new(),
            waiting: AtomicBool::new(false),
            head_begun: AtomicBool::new(false),
        }
    }

    fn start_waiting_for_client(&self) {
        self.waiting.store(true, Ordering::Relaxed);
    }

    fn waiting_for_client(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    fn touch_request(&self) {
        self.last_request_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    fn evict(&self) {
        self.evicted.store(true, Ordering::SeqCst);
        // A stored permit: the connection sees it even if it is not waiting right now.
        self.evict_signal.notify_one();
    }

    fn is_evicted(&self) -> bool {
        self.evicted.load(Ordering::SeqCst)
    }

    async fn evicted(&self) {
        while !self.is_evicted() {
            self.evict_signal.notified().await;
        }
    }

    /// When the connection counts as idle if nothing changes: with no request in progress,
    /// `idle` after the last request (bytes do not count: PINGs are not activity); with
    /// one, `idle` after the last byte (a stalled transfer).
    fn idle_deadline(&self, idle: Duration) -> tokio::time::Instant {
        let since = if self.open.load(Ordering::Relaxed) == 0 {
            self.last_request_ms.load(Ordering::Relaxed)
        } else {
            self.last_ms.load(Ordering::Relaxed)
        };
        self.start + Duration::from_millis(since) + idle
    }

    /// Resolves once the connection has been idle for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let deadline = self.idle_deadline(idle);
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// hyper's HTTP/1 header-timeout clock for one webhook connection: a timer hyper starts
/// while it waits for a request head runs only once a byte of that head has arrived
/// ([`Activity::head_begun`]); until then the connection is idle, and `drive` closes it after
/// `idle_timeout`. A silent client is still cut after the header timeout: on a new
/// connection the TLS handshake counts as the head's beginning. Bytes of a pipelined next
/// request read together with the previous request's body do not count, so a client that
/// stalls inside such a head is closed after `idle_timeout`, like any idle connection.
/// hyper uses this timer for the header timeout only.
struct HeadTimer(Arc<Activity>);

impl Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        Box::pin(HeadSleep {
            activity: self.0.clone(),
            timeout: duration,
            running: None,
        })
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        self.sleep(deadline.saturating_duration_since(Instant::now()))
    }
}

struct HeadSleep {
    activity: Arc<Activity>,
    timeout: Duration,
    /// Started when the head's first byte was seen.
    running: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Future for HeadSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.running.is_none() {
            // No waker to register: bytes arrive through the connection's own reads, which
            // wake the task that polls this (hyper polls the timer right after a read that
            // left the head incomplete).
            if !self.activity.head_begun.load(Ordering::Relaxed) {
                return Poll::Pending;
            }
            let sleep = Box::pin(tokio::time::sleep(self.timeout));
            self.running = Some(sleep);
        }
        match self.running.as_mut() {
            Some(sleep) => sleep.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

impl Sleep for HeadSleep {}

/// A TCP stream that records when bytes last moved, for the idle timeout.
struct ActivityIo {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for ActivityIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
            self.activity.waiting.store(false, Ordering::Relaxed);
            if self.activity.open.load(Ordering::Relaxed) == 0 {
                self.activity.head_begun.store(true, Ordering::Relaxed);
            }
        }
        res
    }
}

impl AsyncWrite for ActivityIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        res
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Upper bound for what should happen at once; the waits end as soon as it does.
    const DEADLINE: Duration = Duration::from_secs(10);

    /// One HTTP/1 request on `c` that asks the server to close afterwards; the response.
    async fn get_and_close(c: &mut TcpStream) -> String {
        c.write_all(b"GET / HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n")
            .await
            .expect("send");
        let mut resp = Vec::new();
        tokio::time::timeout(DEADLINE, c.read_to_end(&mut resp))
            .await
            .expect("the server answers and closes")
            .expect("read");
        String::from_utf8_lossy(&resp).into_owned()
    }

    /// Whether the accept loop comes to hold exactly `n` connection tasks within [`DEADLINE`].
    async fn holds(tasks: &mut watch::Receiver<usize>, n: usize) -> bool {
        tokio::time::timeout(DEADLINE, tasks.wait_for(|t| *t == n))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    #[tokio::test]
    async fn finished_connections_are_reaped_without_waiting_for_the_next_client() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let max = 4;
        let settings = ConnSettings {
            name: "test",
            max_connections: max,
            max_unproven: max,
            handshake_timeout: DEADLINE,
            header_read_timeout: DEADLINE,
            idle_timeout: DEADLINE,
            h2_max_concurrent_streams: 1,
        };
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let running = spawn(listener, None, router, settings);
        let mut tasks = running.tasks.clone();

        // A burst up to the connection limit, every connection accepted before any ends.
        let mut burst = Vec::new();
        for _ in 0..max {
            burst.push(TcpStream::connect(addr).await.expect("connect"));
        }
        assert!(
            holds(&mut tasks, max).await,
            "every connection of the burst accepted"
        );
        for c in &mut burst {
            assert!(get_and_close(c).await.starts_with("HTTP/1.1 200"));
        }
        // No client connects from here on: the loop still sees each task end.
        assert!(
            holds(&mut tasks, 0).await,
            "finished connection tasks reaped; still held: {}",
            *tasks.borrow_and_update()
        );

        let mut next = TcpStream::connect(addr).await.expect("connect");
        assert!(get_and_close(&mut next).await.starts_with("HTTP/1.1 200"));
        let report = running
            .shutdown(tokio::time::Instant::now() + DEADLINE)
            .await;
        assert_eq!(report, DrainReport { cut: 0 });
    }

    #[tokio::test]
    async fn idle_waits_for_a_quiet_period_after_the_last_request() {
        let a = Arc::new(Activity::new());
        let idle = Duration::from_millis(100);
        let started = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(40)).await;
        drop(InProgress::start(a.clone()));
        a.idle_for(idle).await;
        // Only lower bounds: a loaded machine may run late, never early.
        assert!(
            started.elapsed() >= Duration::from_millis(140),
            "the request restarts the period"
        );
    }

    #[tokio::test]
    async fn bytes_without_a_request_are_not_activity() {
        let a = Arc::new(Activity::new());
        let idle = Duration::from_secs(10);
        tokio::time::sleep(Duration::from_millis(30)).await;
        a.touch(); // a PING
        assert_eq!(
            a.idle_deadline(idle),
            a.start + idle,
            "a PING does not move it"
        );
        let open = InProgress::start(a.clone());
        tokio::time::sleep(Duration::from_millis(30)).await;
        a.touch();
        assert!(
            a.idle_deadline(idle) >= a.start + idle + Duration::from_millis(60),
            "bytes of a request in progress do"
        );
        drop(open);
    }

    #[test]
    fn full_pool_closes_the_oldest_idle_unproven_connection() {
        let pool = Arc::new(Pool::new(3, 2));
        let conns: Vec<Arc<Activity>> = (0..5).map(|_| Arc::new(Activity::new())).collect();
        let s0 = pool.admit(&conns[0]).expect("room");
        let s1 = pool.admit(&conns[1]).expect("room");
        // Two unproven is the most: the third evicts the oldest idle one.
        let _busy = InProgress::start(conns[1].clone());
        let s2 = pool.admit(&conns[2]).expect("evicts");
        assert!(conns[0].is_evicted());
        assert!(
            !conns[1].is_evicted(),
            "a request in progress is never evicted"
        );
        drop(s0); // the evicted connection's task ends: its slot was given back already
        assert_eq!(pool.counts(), (2, 2));
        // A proven connection uses the reserve and is not evictable.
        pool.prove(&conns[1]);
        assert_eq!(pool.counts(), (2, 1));
        let s3 = pool.admit(&conns[3]).expect("reserve room");
        assert_eq!(pool.counts(), (3, 2));
        // Full: the oldest idle unproven (conns[2]) makes room.
        let s4 = pool.admit(&conns[4]).expect("evicts");
        assert!(conns[2].is_evicted() && !conns[3].is_evicted());
        // Nothing idle and unproven left once conns[3] and [4] are busy: refused.
        let _b3 = InProgress::start(conns[3].clone());
        let _b4 = InProgress::start(conns[4].clone());
        assert!(pool.admit(&Arc::new(Activity::new())).is_none());
        drop((s1, s2, s3, s4));
        assert_eq!(pool.counts(), (0, 0), "every slot given back exactly once");
    }
}
