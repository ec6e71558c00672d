//! Serving certificate rotation without restart (SPEC §9), including the Kubernetes
//! Secret-volume layout where `tls.crt -> ..data/tls.crt` and `..data` is a symlink swapped
//! atomically by rename.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::*;
use reqwest::StatusCode;
use serde_json::json;
use tenant_gateway::certs::DevCerts;
use tokio::sync::Mutex;

/// A Secret volume as the kubelet lays it out.
struct SecretVolume {
    dir: PathBuf,
    generation: usize,
}

impl SecretVolume {
    fn new(dir: &Path, cert_pem: &str, key_pem: &str) -> SecretVolume {
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

    fn cert(&self) -> PathBuf {
        self.dir.join("tls.crt")
    }

    fn key(&self) -> PathBuf {
        self.dir.join("tls.key")
    }

    /// Write a timestamped directory and return its name (relative, as the kubelet does).
    fn write_generation(&mut self, cert_pem: &str, key_pem: &str) -> String {
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
    fn swap(&mut self, cert_pem: &str, key_pem: &str) {
        let name = self.write_generation(cert_pem, key_pem);
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&name, &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("atomic swap");
    }
}

/// DER of the certificate a brand-new connection is served, using a client that trusts
/// every CA in `trusted`.
async fn served_cert(s: &TestServer, trusted: &[&DevCerts]) -> Option<Vec<u8>> {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .timeout(DEADLINE);
    for p in trusted {
        b = b.add_root_certificate(
            reqwest::Certificate::from_pem(p.ca_cert_pem.as_bytes()).expect("ca"),
        );
    }
    let resp = b
        .build()
        .expect("client")
        .post(s.url("/validate/namespaces"))
        .json(&namespace_create(
            "uid-probe",
            "tenant-x",
            json!({}),
            "admin",
            &["system:masters"],
        ))
        .send()
        .await
        .ok()?;
    if resp.status() != StatusCode::OK {
        return None;
    }
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()?
        .peer_certificate()
        .map(<[u8]>::to_vec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_volume_swap_rotates_certificate_without_breaking_keep_alive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = pki();
    let b = pki();
    let mut vol = SecretVolume::new(dir.path(), &a.tls_cert_pem, &a.tls_key_pem);
    let s = Arc::new(TestServer::admission(options(vol.cert(), vol.key())).await);
    assert_eq!(
        served_cert(&s, &[&a]).await,
        Some(leaf_der(&a.tls_cert_pem))
    );

    // Requests on a keep-alive client created while certificate A served (it trusts only
    // CA A) must keep succeeding across the swap: the reload must not disturb open
    // connections. (A reconnect could resume the TLS session without seeing a certificate,
    // so this checks that no request fails, not that no reconnect happened.)
    let keepalive = client(&a.ca_cert_pem);
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failure: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let background = {
        let (s, stop, ok, failure) = (s.clone(), stop.clone(), ok.clone(), failure.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let uid = format!("uid-bg-{i}");
                let body =
                    namespace_create(&uid, "tenant-x", json!({}), "admin", &["system:masters"]);
                let res = keepalive
                    .post(s.url("/validate/namespaces"))
                    .json(&body)
                    .send()
                    .await;
                match res {
                    Ok(r) if r.status() == StatusCode::OK => {
                        ok.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(r) => {
                        *failure.lock().await = Some(format!("status {}", r.status()));
                        return;
                    }
                    Err(e) => {
                        *failure.lock().await = Some(format!("{e:?}"));
                        return;
                    }
                }
            }
        })
    };
    eventually("background requests to run", DEADLINE, || async {
        (ok.load(Ordering::SeqCst) >= 5).then_some(())
    })
    .await;

    vol.swap(&b.tls_cert_pem, &b.tls_key_pem);
    let at_swap = ok.load(Ordering::SeqCst);

    // A new connection, trusting only CA B, is eventually served certificate B.
    let b_der = leaf_der(&b.tls_cert_pem);
    eventually(
        "a new connection to be served certificate B",
        DEADLINE,
        || async { (served_cert(&s, &[&b]).await.as_ref() == Some(&b_der)).then_some(()) },
    )
    .await;
    // Requests kept flowing on the old connection across the reload.
    eventually(
        "more keep-alive requests after the swap",
        DEADLINE,
        || async { (ok.load(Ordering::SeqCst) >= at_swap + 5).then_some(()) },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    background.await.expect("background loop");
    assert_eq!(
        *failure.lock().await,
        None,
        "a keep-alive request failed during rotation"
    );

    assert_eq!(
        metric(&s, r#"tenant_gateway_tls_reloads_total{result="success"}"#).await,
        Some(1.0)
    );
    let (_, b_cert) = x509_parser::parse_x509_certificate(&b_der).expect("x509");
    assert_eq!(
        metric(
            &s,
            "tenant_gateway_tls_certificate_expiry_timestamp_seconds"
        )
        .await,
        Some(b_cert.validity().not_after.timestamp() as f64)
    );

    // A broken pair (certificate C with key D): certificate B keeps serving, the error is
    // counted, and /readyz stays ready but says what is wrong.
    let c = pki();
    let d = pki();
    vol.swap(&c.tls_cert_pem, &d.tls_key_pem);
    eventually("the failed reload to be counted", DEADLINE, || async {
        (metric(&s, r#"tenant_gateway_tls_reloads_total{result="error"}"#).await == Some(1.0))
            .then_some(())
    })
    .await;
    assert_eq!(served_cert(&s, &[&b, &c]).await, Some(b_der.clone()));
    let resp = plain_client()
        .get(s.metrics_url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.expect("text");
    assert!(text.contains("tls reload failed"), "{text}");
    assert!(text.contains("does not belong"), "{text}");
    assert_eq!(
        metric(&s, r#"tenant_gateway_tls_reloads_total{result="success"}"#).await,
        Some(1.0)
    );

    // Fixing it (a good pair C) recovers and clears the readiness detail.
    vol.swap(&c.tls_cert_pem, &c.tls_key_pem);
    let c_der = leaf_der(&c.tls_cert_pem);
    eventually("certificate C to be served", DEADLINE, || async {
        (served_cert(&s, &[&c]).await.as_ref() == Some(&c_der)).then_some(())
    })
    .await;
    assert_eq!(s.readiness.tls_error(), None);
    assert_eq!(
        metric(&s, r#"tenant_gateway_tls_reloads_total{result="error"}"#).await,
        Some(1.0),
        "one bad version is counted once, however many polls saw it"
    );

    match Arc::try_unwrap(s) {
        Ok(s) => s.stop().await,
        Err(_) => panic!("server still shared"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_updated_plain_files_keep_the_old_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = pki();
    let b = pki();
    let (cert, key) = write_pair(dir.path(), &a);
    let s = TestServer::admission(options(cert.clone(), key.clone())).await;
    let a_der = leaf_der(&a.tls_cert_pem);

    // Only the certificate is new so far.
    std::fs::write(&cert, &b.tls_cert_pem).expect("write cert");
    eventually("the mismatch to be reported", DEADLINE, || async {
        (metric(&s, r#"tenant_gateway_tls_reloads_total{result="error"}"#).await == Some(1.0))
            .then_some(())
    })
    .await;
    assert_eq!(served_cert(&s, &[&a, &b]).await, Some(a_der));
    assert!(s.readiness.tls_error().is_some());

    // Then the key: the pair matches and is picked up.
    std::fs::write(&key, &b.tls_key_pem).expect("write key");
    let b_der = leaf_der(&b.tls_cert_pem);
    eventually("certificate B to be served", DEADLINE, || async {
        (served_cert(&s, &[&a, &b]).await.as_ref() == Some(&b_der)).then_some(())
    })
    .await;
    assert_eq!(s.readiness.tls_error(), None);

    // Garbage in the certificate file is a reload error too, not a crash.
    std::fs::write(&cert, "not a certificate").expect("write");
    eventually("the garbage to be reported", DEADLINE, || async {
        (metric(&s, r#"tenant_gateway_tls_reloads_total{result="error"}"#).await == Some(2.0))
            .then_some(())
    })
    .await;
    assert_eq!(served_cert(&s, &[&b]).await, Some(b_der));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_fails_clearly_on_a_bad_pair() {
    use tenant_gateway::metrics::Metrics;
    use tenant_gateway::readiness::Readiness;
    use tenant_gateway::server::{self, AlwaysAllow};
    let dir = tempfile::tempdir().expect("tempdir");
    let a = pki();
    let b = pki();
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    std::fs::write(&cert, &a.tls_cert_pem).expect("write");
    std::fs::write(&key, &b.tls_key_pem).expect("write");
    let readiness = Arc::new(Readiness::new());
    let err = server::bind(
        options(cert.clone(), key.clone()),
        Arc::new(AlwaysAllow),
        readiness.clone(),
        Metrics::new(),
    )
    .await
    .err()
    .expect("a mismatched pair must not start");
    let text = err.to_string();
    assert!(
        text.contains("tls.crt") && text.contains("tls.key"),
        "{text}"
    );
    assert!(text.contains("does not belong"), "{text}");
    assert!(readiness.check().is_err());

    let err = server::bind(
        options(dir.path().join("absent.crt"), key),
        Arc::new(AlwaysAllow),
        readiness,
        Metrics::new(),
    )
    .await
    .err()
    .expect("a missing file must not start");
    assert!(err.to_string().contains("absent.crt"), "{err}");
}
