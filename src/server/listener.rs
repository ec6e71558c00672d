//! Accept loop and per-connection driving shared by the webhook (TLS) and metrics (plain)
//! listeners: connection limit, handshake/idle timeouts, graceful drain (SPEC §9).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulConnection;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// Pause after an accept error (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);
/// At most one "connection refused" warning per this period, with the count since the last.
const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(10);

/// Timeouts and protocol settings for one listener.
#[derive(Debug, Clone)]
pub(crate) struct ConnSettings {
    /// `webhook` or `metrics`, for logs.
    pub name: &'static str,
    pub max_connections: usize,
    pub handshake_timeout: Duration,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub h2_max_concurrent_streams: u32,
}

/// HTTP/1-only and HTTP/2-only variants of one configured builder: on TLS the protocol is
/// chosen by ALPN, so no bytes are sniffed (sniffing would wait for a preface without any
/// timeout).
struct Builders {
    h1: Builder<TokioExecutor>,
    h2: Builder<TokioExecutor>,
}

impl Builders {
    fn new(s: &ConnSettings) -> Builders {
        let mut b = Builder::new(TokioExecutor::new());
        b.http1()
            .timer(TokioTimer::new())
            // hyper starts this timer whenever it waits for a request head, so it also bounds
            // how long a keep-alive HTTP/1 connection may sit idle between requests.
            .header_read_timeout(s.header_read_timeout)
            .keep_alive(true);
        b.http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(s.h2_max_concurrent_streams);
        Builders {
            h1: b.clone().http1_only(),
            h2: b.http2_only(),
        }
    }
}

/// A listener whose accept loop is running.
pub(crate) struct Running {
    name: &'static str,
    stop: watch::Sender<bool>,
    drain: watch::Sender<bool>,
    task: tokio::task::JoinHandle<JoinSet<()>>,
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
    let name = settings.name;
    let task = tokio::spawn(accept_loop(
        listener, tls, router, settings, stop_rx, drain_rx,
    ));
    Running {
        name,
        stop: stop_tx,
        drain: drain_tx,
        task,
    }
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
    mut stop: watch::Receiver<bool>,
    drain: watch::Receiver<bool>,
) -> JoinSet<()> {
    let builders = Arc::new(Builders::new(&settings));
    let settings = Arc::new(settings);
    let permits = Arc::new(Semaphore::new(settings.max_connections));
    let mut conns = JoinSet::new();
    let mut refused: u64 = 0;
    let mut last_refusal_log: Option<Instant> = None;
    loop {
        // Reap finished connections so the set only holds live ones.
        while let Some(res) = conns.try_join_next() {
            log_task_end(settings.name, res);
        }
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
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
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // Refuse rather than queue: a queued client would hang until its own timeout
            // (the API server's is 5 s) while a refused one fails fast and is retried, by
            // then possibly against another replica.
            drop(stream);
            refused += 1;
            if last_refusal_log.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_PERIOD) {
                tracing::warn!(
                    listener = settings.name,
                    limit = settings.max_connections,
                    refused,
                    "connection limit reached; closing new connections"
                );
                last_refusal_log = Some(Instant::now());
                refused = 0;
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let tls = tls.clone();
        let router = router.clone();
        let builders = builders.clone();
        let settings = settings.clone();
        let drain = drain.clone();
        conns.spawn(async move {
            serve_connection(stream, tls, router, &builders, &settings, drain).await;
            tracing::trace!(%peer, "connection closed");
            drop(permit);
        });
    }
    // Dropping the listener here closes the socket: from now on connections are refused.
    drop(listener);
    conns
}

async fn serve_connection(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    router: Router,
    builders: &Builders,
    settings: &ConnSettings,
    mut drain: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new());
    let io = ActivityIo {
        inner: stream,
        activity: activity.clone(),
    };
    let service = TowerToHyperService::new(router);
    match tls {
        None => {
            let conn = builders.h1.serve_connection(TokioIo::new(io), service);
            drive(conn, &activity, settings, drain).await;
        }
        Some(acceptor) => {
            let handshake = tokio::time::timeout(settings.handshake_timeout, acceptor.accept(io));
            let tls_stream = tokio::select! {
                _ = drain.wait_for(|d| *d) => return,
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
            let h2 = tls_stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
            let conn = if h2 {
                // hyper's HTTP/2 server waits for the client preface without a timeout (and
                // a graceful shutdown waits for it too); a client that negotiated h2 and
                // then stays silent is dropped after the header timeout, like a slow HTTP/1
                // request head.
                activity.start_waiting_for_client();
                builders
                    .h2
                    .serve_connection(TokioIo::new(tls_stream), service)
            } else {
                builders
                    .h1
                    .serve_connection(TokioIo::new(tls_stream), service)
            };
            drive(conn, &activity, settings, drain).await;
        }
    }
}

/// Run one HTTP connection to completion. A drain signal starts a graceful shutdown (HTTP/1:
/// finish the current request, then close; HTTP/2: GOAWAY, finish open streams). So does
/// `idle_timeout` without any bytes in either direction; if the peer then stays silent for
/// another `idle_timeout`, the connection is dropped.
async fn drive<C>(
    conn: C,
    activity: &Activity,
    settings: &ConnSettings,
    mut drain: watch::Receiver<bool>,
) where
    C: GracefulConnection,
    C::Error: std::fmt::Display,
{
    let mut conn = std::pin::pin!(conn);
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
            }
        }
    }
}

/// Time of the last byte read or written on a connection.
struct Activity {
    /// tokio's clock, so the sleeps below agree with it.
    start: tokio::time::Instant,
    /// Milliseconds since `start`.
    last_ms: AtomicU64,
    /// Set after the handshake when the protocol needs the client to speak first; cleared
    /// by the first byte read.
    waiting: AtomicBool,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: tokio::time::Instant::now(),
            last_ms: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
        }
    }

    fn start_waiting_for_client(&self) {
        self.waiting.store(true, Ordering::Relaxed);
    }

    fn waiting_for_client(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> tokio::time::Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Resolves once nothing has moved for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let deadline = self.last() + idle;
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

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

    #[tokio::test]
    async fn idle_waits_for_a_quiet_period_after_the_last_byte() {
        let a = Activity::new();
        let idle = Duration::from_millis(100);
        let started = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(40)).await;
        a.touch();
        a.idle_for(idle).await;
        // Only lower bounds: a loaded machine may run late, never early.
        assert!(
            started.elapsed() >= Duration::from_millis(140),
            "the touch restarts the period"
        );
    }
}
