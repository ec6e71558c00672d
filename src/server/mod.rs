//! HTTPS webhook server and the plain-HTTP health/metrics server (SPEC §2.1, §6, §9).

pub mod health;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::admission::Admission;
use crate::metrics::Metrics;
use health::Readiness;

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
    pub max_connections: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("not implemented")]
    Todo,
}

/// Run both servers until `shutdown` resolves, then drain.
pub async fn run(
    _opts: ServeOptions,
    _admission: Arc<Admission>,
    _readiness: Arc<Readiness>,
    _metrics: Metrics,
    _shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    Err(ServerError::Todo)
}
