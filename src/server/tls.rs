//! Serving certificate: loading, hot reload, and the rustls configuration (SPEC §2.1, §9).
//!
//! The certificate files are polled rather than watched with inotify because Kubernetes
//! Secret volumes change by swapping the `..data` symlink: the watched paths
//! (`tls.crt -> ..data/tls.crt`) never receive an event of their own. Comparing file
//! contents on every poll catches that swap, cert-manager rewrites, and hand edits alike.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::{
    ClientHello, ResolvesServerCert, ServerSessionMemoryCache, WebPkiClientVerifier,
};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::ServerError;
use crate::metrics::Metrics;
use crate::readiness::Readiness;

/// Sessions remembered for resumption by id. The cache is allocated whole at start (4,096
/// held 400 KB); the webhook's clients are the API servers' connection pools, a few
/// connections each, so rustls's default of 256 covers them with room to spare.
const SESSION_CACHE_SIZE: usize = 256;

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The files as read in one poll.
#[derive(PartialEq, Eq)]
struct PairBytes {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// A pair that parsed and matched.
struct Parsed {
    key: Arc<CertifiedKey>,
    /// Unix seconds of the leaf's notAfter.
    not_after: i64,
}

/// Serves the newest good certificate pair and keeps the previous one when a new pair is bad.
pub(crate) struct CertReloader {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    readiness: Arc<Readiness>,
    metrics: Metrics,
    current: RwLock<Arc<CertifiedKey>>,
    /// Contents of the pair now serving, compared on each poll.
    loaded: Mutex<PairBytes>,
    /// What the last failure was about (the bad contents, or the I/O error), so one bad
    /// version is counted and logged once rather than on every poll.
    last_failure: Mutex<Option<Failure>>,
}

#[derive(PartialEq, Eq)]
enum Failure {
    Contents(PairBytes),
    Io(String),
}

impl std::fmt::Debug for CertReloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertReloader")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // Nothing panics while the lock is held, so poisoning cannot happen; recovering the
        // guard anyway keeps the handshake path panic-free.
        Some(
            self.current
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone(),
        )
    }
}

impl CertReloader {
    /// Load the initial pair; a bad pair here is a startup error naming both files.
    pub(crate) fn load(
        cert_path: &Path,
        key_path: &Path,
        provider: Arc<CryptoProvider>,
        readiness: Arc<Readiness>,
        metrics: Metrics,
    ) -> Result<Arc<CertReloader>, ServerError> {
        let tls_err = |reason: String| ServerError::Certificate {
            cert: cert_path.to_path_buf(),
            key: key_path.to_path_buf(),
            reason,
        };
        let bytes = read_pair_blocking(cert_path, key_path).map_err(tls_err)?;
        let parsed = parse_pair(&bytes, &provider).map_err(tls_err)?;
        metrics.tls_certificate_expiry.set(parsed.not_after);
        // Both series exist from the start so `increase(...{result="error"}[..])` alerts work
        // before the first failure.
        metrics.tls_reloads.with_label_values(&["success"]);
        metrics.tls_reloads.with_label_values(&["error"]);
        readiness.set_tls_loaded(true);
        readiness.set_tls_error(None);
        tracing::info!(
            cert = %cert_path.display(),
            not_after = parsed.not_after,
            "serving certificate loaded"
        );
        Ok(Arc::new(CertReloader {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            provider,
            readiness,
            metrics,
            current: RwLock::new(parsed.key),
            loaded: Mutex::new(bytes),
            last_failure: Mutex::new(None),
        }))
    }

    /// Poll the files every `interval` until the task is dropped.
    pub(crate) async fn watch(self: Arc<Self>, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate and the files were just loaded.
        ticker.tick().await;
        loop {
            ticker.tick().await;
            let this = self.clone();
            // File reads and PEM parsing are blocking work; keep them off the reactor threads
            // that serve requests.
            match tokio::task::spawn_blocking(move || this.poll_once()).await {
                Ok(()) => {}
                Err(e) => tracing::error!(error = %e, "certificate reload check failed"),
            }
        }
    }

    /// One reload check. Public to the crate so tests can drive it without timing.
    pub(crate) fn poll_once(&self) {
        let bytes = match read_pair_blocking(&self.cert_path, &self.key_path) {
            Ok(b) => b,
            Err(reason) => {
                self.fail(Failure::Io(reason.clone()), reason);
                return;
            }
        };
        let unchanged = *lock(&self.loaded) == bytes;
        if unchanged {
            // The files went back to what is serving (a bad update was reverted): nothing is
            // wrong any more.
            if lock(&self.last_failure).take().is_some() {
                self.readiness.set_tls_error(None);
                tracing::info!("certificate files are back to the pair in use");
            }
            return;
        }
        match parse_pair(&bytes, &self.provider) {
            Ok(parsed) => {
                *self
                    .current
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = parsed.key;
                *lock(&self.loaded) = bytes;
                *lock(&self.last_failure) = None;
                self.metrics.tls_certificate_expiry.set(parsed.not_after);
                self.metrics
                    .tls_reloads
                    .with_label_values(&["success"])
                    .inc();
                self.readiness.set_tls_error(None);
                tracing::info!(
                    cert = %self.cert_path.display(),
                    not_after = parsed.not_after,
                    "serving certificate reloaded; new connections use it"
                );
            }
            Err(reason) => self.fail(Failure::Contents(bytes), reason),
        }
    }

    fn fail(&self, failure: Failure, reason: String) {
        let mut last = lock(&self.last_failure);
        if last.as_ref() == Some(&failure) {
            return;
        }
        *last = Some(failure);
        drop(last);
        let detail = format!(
            "cannot reload {} / {}: {reason}",
            self.cert_path.display(),
            self.key_path.display()
        );
        self.metrics.tls_reloads.with_label_values(&["error"]).inc();
        self.readiness.set_tls_error(Some(detail.clone()));
        tracing::error!(
            error = %detail,
            "serving certificate reload failed; the previous certificate keeps serving"
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Read both files so that they come from the same version of a Secret volume: if the
/// certificate changed while the key was read (a `..data` swap in between), read again.
fn read_pair_blocking(cert_path: &Path, key_path: &Path) -> Result<PairBytes, String> {
    let read = |p: &Path, what: &str| {
        std::fs::read(p).map_err(|e| format!("cannot read the {what} file {}: {e}", p.display()))
    };
    let mut cert = read(cert_path, "certificate")?;
    for _ in 0..3 {
        let key = read(key_path, "private key")?;
        let again = read(cert_path, "certificate")?;
        if again == cert {
            return Ok(PairBytes { cert, key });
        }
        cert = again;
    }
    Err(format!(
        "{} keeps changing while being read; will retry on the next poll",
        cert_path.display()
    ))
}

fn parse_pair(bytes: &PairBytes, provider: &CryptoProvider) -> Result<Parsed, String> {
    let chain = CertificateDer::pem_slice_iter(&bytes.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the certificate file is not valid PEM: {e}"))?;
    let Some(leaf) = chain.first() else {
        return Err("the certificate file contains no CERTIFICATE block".to_string());
    };
    let not_after = match x509_parser::parse_x509_certificate(leaf) {
        Ok((_, cert)) => cert.validity().not_after.timestamp(),
        Err(e) => return Err(format!("the certificate is not valid X.509: {e}")),
    };
    let key = PrivateKeyDer::from_pem_slice(&bytes.key).map_err(|e| {
        format!("the key file holds no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}")
    })?;
    let certified = CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => "the private key does not belong to the certificate \
             (if the files are updated one at a time, the next poll picks up the finished pair)"
            .to_string(),
        other => format!("the private key cannot be used: {other}"),
    })?;
    Ok(Parsed {
        key: Arc::new(certified),
        not_after,
    })
}

/// rustls configuration: TLS 1.3 and 1.2 (rustls prefers 1.3), ALPN `h2` then `http/1.1`,
/// session resumption on, client certificates required only when a CA is given.
pub(crate) fn server_config(
    resolver: Arc<CertReloader>,
    client_ca_file: Option<&Path>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<ServerConfig>, ServerError> {
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| ServerError::TlsConfig(e.to_string()))?;
    let builder = match client_ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let client_ca_err = |reason: String| ServerError::ClientCa {
                path: path.to_path_buf(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| client_ca_err(e.to_string()))?;
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| client_ca_err(format!("not valid PEM: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| client_ca_err(format!("not a usable CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(client_ca_err("contains no CERTIFICATE block".to_string()));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| client_ca_err(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_SIZE);
    config.ticketer = rustls::crypto::ring::Ticketer::new()
        .map_err(|e| ServerError::TlsConfig(format!("cannot create the session ticketer: {e}")))?;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs;

    fn pair(c: &certs::DevCerts) -> PairBytes {
        PairBytes {
            cert: c.tls_cert_pem.clone().into_bytes(),
            key: c.tls_key_pem.clone().into_bytes(),
        }
    }

    #[test]
    fn parses_good_pair_and_rejects_bad_ones() {
        let p = provider();
        let a = certs::generate(&["localhost".to_string()]).expect("a");
        let b = certs::generate(&["localhost".to_string()]).expect("b");
        let good = parse_pair(&pair(&a), &p).expect("good pair");
        assert!(good.not_after > 0);

        let mismatched = PairBytes {
            cert: a.tls_cert_pem.clone().into_bytes(),
            key: b.tls_key_pem.clone().into_bytes(),
        };
        let e = parse_pair(&mismatched, &p).err().expect("mismatch");
        assert!(e.contains("does not belong"), "{e}");

        let e = parse_pair(
            &PairBytes {
                cert: b"garbage".to_vec(),
                key: a.tls_key_pem.clone().into_bytes(),
            },
            &p,
        )
        .err()
        .expect("no cert");
        assert!(e.contains("no CERTIFICATE"), "{e}");

        let e = parse_pair(
            &PairBytes {
                cert: a.tls_cert_pem.clone().into_bytes(),
                key: b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_vec(),
            },
            &p,
        )
        .err()
        .expect("bad key");
        assert!(e.contains("private key"), "{e}");
    }

    #[test]
    fn reloader_keeps_old_pair_on_error_and_counts_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        let a = certs::generate(&["localhost".to_string()]).expect("a");
        let b = certs::generate(&["localhost".to_string()]).expect("b");
        std::fs::write(&cert, &a.tls_cert_pem).expect("write");
        std::fs::write(&key, &a.tls_key_pem).expect("write");
        let readiness = Arc::new(Readiness::new());
        let metrics = Metrics::new();
        let r = CertReloader::load(&cert, &key, provider(), readiness.clone(), metrics.clone())
            .expect("load");
        let served = |r: &CertReloader| r.current.read().expect("lock").cert[0].as_ref().to_vec();
        let original = served(&r);
        let errors = || metrics.tls_reloads.with_label_values(&["error"]).get();
        let successes = || metrics.tls_reloads.with_label_values(&["success"]).get();

        r.poll_once();
        assert_eq!(
            (errors(), successes()),
            (0, 0),
            "unchanged files are no reload"
        );

        // Only the certificate updated so far.
        std::fs::write(&cert, &b.tls_cert_pem).expect("write");
        r.poll_once();
        r.poll_once();
        assert_eq!(errors(), 1, "one bad version is counted once");
        assert_eq!(served(&r), original);
        assert!(
            readiness
                .tls_error()
                .is_some_and(|e| e.contains("does not belong"))
        );

        std::fs::write(&key, &b.tls_key_pem).expect("write");
        r.poll_once();
        assert_eq!(successes(), 1);
        assert_ne!(served(&r), original);
        assert!(readiness.tls_error().is_none());

        std::fs::remove_file(&key).expect("rm");
        r.poll_once();
        assert_eq!(errors(), 2);
        assert!(readiness.tls_error().is_some_and(|e| e.contains("tls.key")));
        std::fs::write(&key, &b.tls_key_pem).expect("write");
        r.poll_once();
        assert!(
            readiness.tls_error().is_none(),
            "back to the serving pair clears the error"
        );
        assert_eq!(successes(), 1);
    }

    #[test]
    fn startup_error_names_the_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = dir.path().join("missing.crt");
        let key = dir.path().join("missing.key");
        let e = CertReloader::load(
            &cert,
            &key,
            provider(),
            Arc::new(Readiness::new()),
            Metrics::new(),
        )
        .expect_err("missing files");
        let text = e.to_string();
        assert!(text.contains("missing.crt"), "{text}");
    }

    #[test]
    fn client_ca_errors_name_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        let a = certs::generate(&["localhost".to_string()]).expect("a");
        std::fs::write(&cert, &a.tls_cert_pem).expect("write");
        std::fs::write(&key, &a.tls_key_pem).expect("write");
        let r = CertReloader::load(
            &cert,
            &key,
            provider(),
            Arc::new(Readiness::new()),
            Metrics::new(),
        )
        .expect("load");
        let ca = dir.path().join("client-ca.crt");
        std::fs::write(&ca, "nothing here").expect("write");
        let e = server_config(r.clone(), Some(&ca), provider()).expect_err("empty CA");
        assert!(e.to_string().contains("client-ca.crt"), "{e}");
        std::fs::write(&ca, &a.ca_cert_pem).expect("write");
        server_config(r, Some(&ca), provider()).expect("valid CA");
    }
}
