//! HTTPS for the in-process tests (SPEC §7 tier 2): generated PKI, a real server on
//! 127.0.0.1:0 with the real decision path, reqwest and raw rustls clients, and a Secret
//! volume laid out as the kubelet does.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tenant_gateway::admission::Admission;
use tenant_gateway::certs::{self, DevCerts};
use tenant_gateway::cluster::{NamespaceSource, StaticNamespaces};
use tenant_gateway::metrics::Metrics;
use tenant_gateway::policy::{HOST_LABEL, PolicyConfig};
use tenant_gateway::readiness::Readiness;
use tenant_gateway::server::{self, Limits, ReviewHandler, ServeOptions, ServerError};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::poll::DEADLINE;

pub fn pki() -> DevCerts {
    certs::generate(&["localhost".to_string(), "127.0.0.1".to_string()]).expect("generate certs")
}

/// Write `tls.crt` / `tls.key` into `dir` (plain files) and return their paths.
pub fn write_pair(dir: &Path, c: &DevCerts) -> (PathBuf, PathBuf) {
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");
    std::fs::write(&cert, &c.tls_cert_pem).expect("write cert");
    std::fs::write(&key, &c.tls_key_pem).expect("write key");
    (cert, key)
}

pub fn options(cert: PathBuf, key: PathBuf) -> ServeOptions {
    ServeOptions {
        listen: "127.0.0.1:0".parse().expect("addr"),
        metrics_listen: "127.0.0.1:0".parse().expect("addr"),
        tls_cert_file: cert,
        tls_key_file: key,
        client_ca_file: None,
        tls_reload_interval: Duration::from_millis(100),
        shutdown_grace: Duration::from_secs(10),
        max_connections: 64,
    }
}

/// The real decision path with default policy and a snapshot holding `tenant-alice`
/// (apex alice.example.org).
pub fn admission(metrics: &Metrics) -> Arc<Admission> {
    let mut ns = StaticNamespaces::default();
    ns.insert(
        "tenant-alice",
        BTreeMap::from([(HOST_LABEL.to_string(), "alice.example.org".to_string())]),
    );
    ns.insert("cozy-system", BTreeMap::new());
    Arc::new(Admission::new(
        Arc::new(PolicyConfig::default()),
        NamespaceSource::Static(Arc::new(ns)),
        metrics.clone(),
    ))
}

pub struct TestServer {
    pub webhook: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub readiness: Arc<Readiness>,
    pub metrics: Metrics,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServerError>>>,
}

impl TestServer {
    /// Bind and serve `handler`; the namespace index counts as synced unless `synced` is
    /// false.
    pub async fn start<H: ReviewHandler>(
        opts: ServeOptions,
        limits: Limits,
        handler: impl FnOnce(&Metrics) -> Arc<H>,
        synced: bool,
    ) -> TestServer {
        let metrics = Metrics::new();
        let readiness = Arc::new(Readiness::new());
        readiness.set_index_synced(synced);
        let bound = server::bind_with_limits(
            opts,
            limits,
            handler(&metrics),
            readiness.clone(),
            metrics.clone(),
        )
        .await
        .expect("bind");
        let webhook = bound.webhook_addr();
        let metrics_addr = bound.metrics_addr();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(bound.serve(async move {
            let _ = rx.await;
        }));
        TestServer {
            webhook,
            metrics_addr,
            readiness,
            metrics,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// Admission with the default snapshot, default limits.
    pub async fn admission(opts: ServeOptions) -> TestServer {
        TestServer::start(opts, Limits::default(), admission, true).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.webhook.port())
    }

    pub fn metrics_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.metrics_addr.port())
    }

    /// Resolve the shutdown future given to `serve`.
    pub fn trigger_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Wait for `serve` to return, with a deadline.
    pub async fn join(&mut self, within: Duration) -> Result<(), ServerError> {
        let task = self.task.take().expect("serve task");
        tokio::time::timeout(within, task)
            .await
            .expect("serve() returns within the deadline")
            .expect("serve task did not panic")
    }

    pub async fn stop(mut self) {
        self.trigger_shutdown();
        self.join(DEADLINE).await.expect("serve returns Ok");
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// An HTTPS client trusting only `ca_pem`; HTTP/2 when the server offers it via ALPN.
pub fn client(ca_pem: &str) -> reqwest::Client {
    client_builder(ca_pem).build().expect("client")
}

/// An HTTPS client trusting only `ca_pem` that speaks HTTP/1.1 only.
pub fn client_h1(ca_pem: &str) -> reqwest::Client {
    client_builder(ca_pem).http1_only().build().expect("client")
}

pub fn client_builder(ca_pem: &str) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("ca pem"))
        .timeout(DEADLINE)
}

pub fn plain_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(DEADLINE)
        .build()
        .expect("client")
}

/// POST `body` and return status, HTTP version and parsed JSON body.
pub async fn post_json(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> (reqwest::StatusCode, reqwest::Version, Value) {
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).expect("encode"))
        .send()
        .await
        .expect("request");
    let status = resp.status();
    let version = resp.version();
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = resp.bytes().await.expect("body");
    assert_eq!(ct, "application/json", "webhook responses are JSON");
    let value = serde_json::from_slice(&bytes).expect("JSON body");
    (status, version, value)
}

/// Fetch `/metrics` and return the value of the first sample whose line starts with
/// `series` (name plus, optionally, the exact label set).
pub async fn metric(server: &TestServer, series: &str) -> Option<f64> {
    let text = plain_client()
        .get(server.metrics_url("/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    metric_in(&text, series)
}

pub fn metric_in(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let rest = l.strip_prefix(series)?;
        let value = rest.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// DER of the leaf certificate in a PEM text.
pub fn leaf_der(pem: &str) -> Vec<u8> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("certificate PEM")
        .as_ref()
        .to_vec()
}

/// A raw rustls client config trusting `ca_pem`, offering `alpn`.
pub fn rustls_client(ca_pem: &str, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    rustls_client_versions(ca_pem, alpn, rustls::DEFAULT_VERSIONS)
}

pub fn rustls_client_versions(
    ca_pem: &str,
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("pem")).expect("root");
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

/// Open a TLS connection to `addr` with `cfg`.
pub async fn tls_connect(
    addr: SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1")
        .expect("server name")
        .to_owned();
    tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
}

/// A Secret volume as the kubelet lays it out.
pub struct SecretVolume {
    dir: PathBuf,
    generation: usize,
}

impl SecretVolume {
    pub fn new(dir: &Path, cert_pem: &str, key_pem: &str) -> SecretVolume {
        let mut v = SecretVolume {
            dir: dir.to_path_buf(),
            generation: 0,
        };
        let data = v.write_generation(cert_pem, key_pem);
        std::os::unix::fs::symlink(&data, dir.join("..data")).expect("..data");
        std::os::unix::fs::symlink("..data/tls.crt", dir.join("tls.crt")).expect("tls.crt");
        std::os::unix::fs::symlink("..data/tls.key", dir.join("tls.key")).expect("tls.key");
        v
    }

    pub fn cert(&self) -> PathBuf {
        self.dir.join("tls.crt")
    }

    pub fn key(&self) -> PathBuf {
        self.dir.join("tls.key")
    }

    /// Write a timestamped directory and return its name (relative, as the kubelet does).
    pub fn write_generation(&mut self, cert_pem: &str, key_pem: &str) -> String {
        self.generation += 1;
        let name = format!(
            "..2026_11_29_10_00_0{}.12345678{}",
            self.generation, self.generation
        );
        let path = self.dir.join(&name);
        std::fs::create_dir(&path).expect("generation dir");
        std::fs::write(path.join("tls.crt"), cert_pem).expect("cert");
        std::fs::write(path.join("tls.key"), key_pem).expect("key");
        name
    }

    /// The kubelet's atomic update: new directory, temporary symlink, rename over `..data`.
    pub fn swap(&mut self, cert_pem: &str, key_pem: &str) {
        let name = self.write_generation(cert_pem, key_pem);
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&name, &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("atomic swap");
    }
}
