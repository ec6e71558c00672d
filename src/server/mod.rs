//! HTTPS webhook server and the plain-HTTP health/metrics server (SPEC §2.1, §6, §9).
//!
//! - [`handler`]: what a review is handed to ([`ReviewHandler`], implemented by
//!   [`Admission`](crate::admission::Admission) and the benchmark baseline [`AlwaysAllow`]).
//! - `webhook`: the axum router of the webhook port (validate paths only); a handler that
//!   panics is answered with a denial naming the request's uid
//!   ([`review_uid`](crate::admission::review_uid)).
//! - `budget`: the byte budget for request bodies buffered at once, and the body limit.
//! - `tls`: certificate loading, hot reload, rustls configuration.
//! - `listener`: accept loop, connection limit, timeouts, graceful drain.
//! - `metrics_http`: `/metrics`, `/healthz`, `/readyz` on the metrics port.
//!
//! [`bind`] and [`Bound::serve`] are split so tests (and `serve`'s startup log) can learn
//! the real addresses when binding port 0.
//!
//! Direction: the server imports `admission` (the handler trait's implementation and the
//! answer types) and the leaves (`metrics`, `readiness`, `certs`), nothing else; decoding,
//! deciding and the `review` span are the handler's.

mod budget;
pub mod handler;
mod listener;
mod metrics_http;
mod tls;
mod webhook;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::metrics::Metrics;
use crate::readiness::Readiness;
pub use handler::{AlwaysAllow, ReviewHandler};
use listener::ConnSettings;
use tls::CertReloader;

pub use budget::{BUDGET_WAIT, DEFAULT_MAX_INFLIGHT_BYTES, MAX_BODY_BYTES, body_limit};

/// `--max-concurrent-streams` default: the API server multiplexes reviews on a few
/// connections; 32 streams each is plenty, and bounds what one connection can ask for.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 32;

/// A sensible `--max-connections`: API server replicas keep a handful of connections each;
/// the limit only has to stop a flood from exhausting file descriptors and memory.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Everything `serve` needs to run the two listeners.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub metrics_listen: SocketAddr,
    pub tls_cert_file: PathBuf,
    pub tls_key_file: PathBuf,
    pub client_ca_file: Option<PathBuf>,
    /// How often the certificate files are checked for changes.
    pub tls_reload_interval: Duration,
    /// Time to finish in-flight requests after SIGTERM.
    pub shutdown_grace: Duration,
    /// Open connections on the webhook port; connections beyond it are closed at once.
    pub max_connections: usize,
}

/// Protection against slow or hostile clients (SPEC §9). [`Limits::default`] is what
/// `serve` uses; tests shorten the timeouts through [`bind_with_limits`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Request body limit; larger bodies get 413 (SPEC §2.1: 36 MiB).
    pub max_body_bytes: usize,
    /// Bytes of request bodies buffered at once across all connections
    /// (`--max-inflight-bytes`); a request that cannot get its bytes within `budget_wait`
    /// gets 503.
    pub max_inflight_bytes: usize,
    /// Longest total wait of one request for budget.
    pub budget_wait: Duration,
    /// From TCP accept to a finished TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// HTTP/1: to receive a complete request head, on the webhook port counted from the
    /// head's first byte (a keep-alive connection waits for its next request up to
    /// `idle_timeout`); a client silent after the TLS handshake is cut after it too.
    pub header_read_timeout: Duration,
    /// To receive a complete request body once the head arrived; 408 after it.
    pub body_read_timeout: Duration,
    /// A connection without a request in progress this long (PINGs and other control
    /// frames do not count), or with one but no byte moving, is shut down gracefully
    /// (HTTP/2 GOAWAY). Longer than Go's default client idle timeout (90 s) so the
    /// API server normally closes first and never races a request against our close.
    pub idle_timeout: Duration,
    /// HTTP/2 streams per connection (`--max-concurrent-streams`).
    pub h2_max_concurrent_streams: u32,
    /// Share of `--max-connections` kept for connections that have completed a request:
    /// connections that have not may hold at most the rest.
    pub connection_reserve_percent: u8,
    /// Open connections on the metrics port (probes and scrapes need a handful). When it is
    /// full, the oldest connection without a request in progress is closed for a new one.
    pub metrics_max_connections: usize,
    /// Metrics port: to receive a complete request head (probes send theirs at once).
    pub metrics_header_read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: MAX_BODY_BYTES,
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
            budget_wait: BUDGET_WAIT,
            tls_handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            h2_max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            connection_reserve_percent: 25,
            metrics_max_connections: 64,
            metrics_header_read_timeout: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(
        "cannot load the serving certificate {cert} with key {key}: {reason}; check --tls-cert-file/--tls-key-file (`tenant-gateway certs` writes a development pair)"
    )]
    Certificate {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error("cannot use client CA file {path}: {reason}; check --client-ca-file")]
    ClientCa { path: PathBuf, reason: String },
    #[error("cannot build the TLS configuration: {0}")]
    TlsConfig(String),
    #[error("cannot listen on {addr} for the {listener} port: {source}; pick a free address")]
    Bind {
        listener: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("invalid server option: {0}")]
    InvalidOption(String),
}

/// Both listeners bound, the certificate loaded; nothing is served until [`Bound::serve`].
pub struct Bound<H> {
    opts: ServeOptions,
    limits: Limits,
    handler: Arc<H>,
    readiness: Arc<Readiness>,
    metrics: Metrics,
    webhook: TcpListener,
    webhook_addr: SocketAddr,
    health: HealthServer,
    tls: Arc<rustls::ServerConfig>,
    reloader: Arc<CertReloader>,
}

/// The plain-HTTP metrics/health port, bound (SPEC §6). It runs with the webhook, or alone
/// under `serve --no-webhook` so probes and scrapes still work.
pub struct HealthServer {
    listener: TcpListener,
    addr: SocketAddr,
    settings: ConnSettings,
}

/// Bind the metrics/health port alone.
pub async fn bind_health(addr: SocketAddr, limits: &Limits) -> Result<HealthServer, ServerError> {
    if limits.metrics_max_connections == 0 {
        return Err(ServerError::InvalidOption(
            "connection and stream limits must be at least 1".to_string(),
        ));
    }
    let (listener, addr) = listen("metrics", addr).await?;
    let settings = ConnSettings {
        name: "metrics",
        max_connections: limits.metrics_max_connections,
        max_unproven: limits.metrics_max_connections,
        handshake_timeout: limits.tls_handshake_timeout,
        header_read_timeout: limits.metrics_header_read_timeout,
        idle_timeout: limits.idle_timeout,
        h2_max_concurrent_streams: limits.h2_max_concurrent_streams,
    };
    Ok(HealthServer {
        listener,
        addr,
        settings,
    })
}

impl HealthServer {
    /// Where `/metrics`, `/healthz` and `/readyz` are served (the real port for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve until `close` resolves with the instant by which open connections must be done;
    /// they get at least a moment so idle probe connections close cleanly instead of being cut.
    pub async fn serve(
        self,
        readiness: Arc<Readiness>,
        metrics: Metrics,
        close: impl Future<Output = tokio::time::Instant>,
    ) {
        let running = listener::spawn(
            self.listener,
            None,
            metrics_http::router(metrics, readiness),
            self.settings,
        );
        let deadline = close.await;
        let floor = tokio::time::Instant::now() + Duration::from_millis(250);
        running.shutdown(deadline.max(floor)).await;
    }
}

/// The webhook port and its certificate, without the metrics/health port
/// ([`Bound::split`]).
pub struct WebhookServer<H> {
    opts: ServeOptions,
    limits: Limits,
    handler: Arc<H>,
    readiness: Arc<Readiness>,
    metrics: Metrics,
    webhook: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    reloader: Arc<CertReloader>,
}

/// Load the certificate and bind both ports with the default [`Limits`].
pub async fn bind<H: ReviewHandler>(
    opts: ServeOptions,
    handler: Arc<H>,
    readiness: Arc<Readiness>,
    metrics: Metrics,
) -> Result<Bound<H>, ServerError> {
    bind_with_limits(opts, Limits::default(), handler, readiness, metrics).await
}

/// [`bind`] with explicit limits.
///
/// Fails, naming the file or address, when the certificate pair or client CA cannot be used
/// or a port cannot be bound. Marks TLS loaded and then the listeners bound on `readiness`.
pub async fn bind_with_limits<H: ReviewHandler>(
    opts: ServeOptions,
    limits: Limits,
    handler: Arc<H>,
    readiness: Arc<Readiness>,
    metrics: Metrics,
) -> Result<Bound<H>, ServerError> {
    validate(&opts, &limits)?;
    let provider = tls::provider();
    let reloader = CertReloader::load(
        &opts.tls_cert_file,
        &opts.tls_key_file,
        provider.clone(),
        readiness.clone(),
        metrics.clone(),
    )?;
    let tls = tls::server_config(reloader.clone(), opts.client_ca_file.as_deref(), provider)?;

    let (webhook, webhook_addr) = listen("webhook", opts.listen).await?;
    let health = bind_health(opts.metrics_listen, &limits).await?;
    readiness.set_bound(true);
    tracing::info!(
        webhook = %webhook_addr,
        metrics = %health.addr(),
        mtls = opts.client_ca_file.is_some(),
        max_connections = opts.max_connections,
        max_inflight_bytes = limits.max_inflight_bytes,
        max_concurrent_streams = limits.h2_max_concurrent_streams,
        max_body_bytes = limits.max_body_bytes,
        "listening"
    );
    Ok(Bound {
        opts,
        limits,
        handler,
        readiness,
        metrics,
        webhook,
        webhook_addr,
        health,
        tls,
        reloader,
    })
}

fn validate(opts: &ServeOptions, limits: &Limits) -> Result<(), ServerError> {
    if opts.max_connections == 0 {
        return Err(ServerError::InvalidOption(
            "max connections must be at least 1".to_string(),
        ));
    }
    if opts.tls_reload_interval.is_zero() {
        return Err(ServerError::InvalidOption(
            "the TLS reload interval must be positive (e.g. 10s)".to_string(),
        ));
    }
    if limits.metrics_max_connections == 0 || limits.h2_max_concurrent_streams == 0 {
        return Err(ServerError::InvalidOption(
            "connection and stream limits must be at least 1".to_string(),
        ));
    }
    if limits.max_inflight_bytes < limits.max_body_bytes {
        return Err(ServerError::InvalidOption(format!(
            "the in-flight byte budget ({} bytes) must hold at least one body at the body limit ({} bytes), or a large review could never be read",
            limits.max_inflight_bytes, limits.max_body_bytes
        )));
    }
    if limits.connection_reserve_percent >= 100 {
        return Err(ServerError::InvalidOption(
            "the connection reserve must be below 100 %".to_string(),
        ));
    }
    Ok(())
}

async fn listen(
    listener: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), ServerError> {
    let err = |source| ServerError::Bind {
        listener,
        addr,
        source,
    };
    let l = TcpListener::bind(addr).await.map_err(err)?;
    let local = l.local_addr().map_err(err)?;
    Ok((l, local))
}

impl<H: ReviewHandler> Bound<H> {
    /// Where the HTTPS webhook listens (the real port when port 0 was asked for).
    pub fn webhook_addr(&self) -> SocketAddr {
        self.webhook_addr
    }

    /// Where `/metrics`, `/healthz` and `/readyz` are served over plain HTTP.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.health.addr()
    }

    /// The webhook and the metrics/health port as parts `serve` runs as separate tasks. The
    /// health port must outlive the webhook's drain: close it with what
    /// [`WebhookServer::serve`] returns.
    pub fn split(self) -> (WebhookServer<H>, HealthServer) {
        let Bound {
            opts,
            limits,
            handler,
            readiness,
            metrics,
            webhook,
            health,
            tls,
            reloader,
            ..
        } = self;
        (
            WebhookServer {
                opts,
                limits,
                handler,
                readiness,
                metrics,
                webhook,
                tls,
                reloader,
            },
            health,
        )
    }

    /// Serve until `shutdown` resolves, then: readiness turns false, the webhook port stops
    /// accepting (new connections are refused), in-flight requests finish (HTTP/2 gets
    /// GOAWAY) within `shutdown_grace`, connections still busy after it are cut, and the
    /// metrics port closes last so probes see "not ready" during the drain.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        let readiness = self.readiness.clone();
        let metrics = self.metrics.clone();
        let (webhook, health) = self.split();
        let reload = tokio::spawn(webhook.cert_reload());
        let (close_tx, close_rx) = tokio::sync::oneshot::channel();
        let health = tokio::spawn(health.serve(readiness, metrics, async move {
            close_rx
                .await
                .unwrap_or_else(|_| tokio::time::Instant::now())
        }));
        let close = webhook.serve(shutdown).await;
        reload.abort();
        let _ = close_tx.send(close);
        if let Err(e) = health.await {
            tracing::error!(error = %e, "the metrics/health server task failed");
        }
        Ok(())
    }
}

impl<H: ReviewHandler> WebhookServer<H> {
    /// The serving pair's hot reload (SPEC §2.1): a task of its own that never ends.
    pub fn cert_reload(&self) -> impl Future<Output = ()> + Send + 'static {
        self.reloader.clone().watch(self.opts.tls_reload_interval)
    }

    /// Serve until `shutdown` resolves, then: readiness turns false, the port stops
    /// accepting, in-flight requests finish (HTTP/2 gets GOAWAY) within `shutdown_grace`, and
    /// connections still busy after it are cut. Returns the end of the grace period, by
    /// which the metrics/health port should close (so probes see "not ready" meanwhile).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> tokio::time::Instant {
        let WebhookServer {
            opts,
            limits,
            handler,
            readiness,
            metrics,
            webhook,
            tls,
            ..
        } = self;
        let reserve = opts.max_connections * usize::from(limits.connection_reserve_percent) / 100;
        let webhook_settings = ConnSettings {
            name: "webhook",
            max_connections: opts.max_connections,
            // Only connections that completed a request may use the reserve.
            max_unproven: opts.max_connections.saturating_sub(reserve).max(1),
            handshake_timeout: limits.tls_handshake_timeout,
            header_read_timeout: limits.header_read_timeout,
            idle_timeout: limits.idle_timeout,
            h2_max_concurrent_streams: limits.h2_max_concurrent_streams,
        };
        let webhook_router = webhook::router(
            handler,
            metrics,
            limits.max_body_bytes,
            limits.body_read_timeout,
            budget::Budget::new(limits.max_inflight_bytes, limits.budget_wait),
        );
        let webhook = listener::spawn(
            webhook,
            Some(TlsAcceptor::from(tls)),
            webhook_router,
            webhook_settings,
        );

        shutdown.await;
        let deadline = tokio::time::Instant::now() + opts.shutdown_grace;
        // Readiness first, so anything probing during the drain is told to go elsewhere.
        readiness.set_shutting_down();
        tracing::info!(grace = ?opts.shutdown_grace, "shutting down: no new connections, finishing in-flight reviews");
        let report = webhook.shutdown(deadline).await;
        if report.cut == 0 {
            tracing::info!("all in-flight reviews finished");
        }
        deadline
    }
}

/// Bind and serve until `shutdown` resolves, then drain (see [`Bound::serve`]).
pub async fn run<H: ReviewHandler>(
    opts: ServeOptions,
    handler: Arc<H>,
    readiness: Arc<Readiness>,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    bind(opts, handler, readiness, metrics)
        .await?
        .serve(shutdown)
        .await
}
