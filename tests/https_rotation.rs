//! Serving certificate rotation without restart (SPEC §9), including the Kubernetes
//! Secret-volume layout where `tls.crt -> ..data/tls.crt` and `..data` is a symlink swapped
//! atomically by rename.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use reqwest::StatusCode;
use serde_json::json;
use support::http::*;
use support::poll::{DEADLINE, poll_async};
use support::review::*;
use tenant_gateway::certs::DevCerts;
use tokio::sync::Mutex;

/// DER of the certificate a brand-new connection is served, using a client that trusts
/// every CA in `trusted`.
async fn served_cert(url: &str, trusted: &[&DevCerts]) -> Option<Vec<u8>> {
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
        .post(url)
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
        served_cert(&s.url("/validate/namespaces"), &[&a]).await,
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
    poll_async(DEADLINE, "background requests to run", || async {
        (ok.load(Ordering::SeqCst) >= 5).then_some(())
    })
    .await;

    vol.swap(&b.tls_cert_pem, &b.tls_key_pem);
    let at_swap = ok.load(Ordering::SeqCst);

    // A new connection, trusting only CA B, is eventually served certificate B.
    let b_der = leaf_der(&b.tls_cert_pem);
    poll_async(
        DEADLINE,
        "a new connection to be served certificate B",
        || async {
            (served_cert(&s.url("/validate/namespaces"), &[&b])
                .await
                .as_ref()
                == Some(&b_der))
            .then_some(())
        },
    )
    .await;
    // Requests kept flowing on the old connection across the reload.
    poll_async(
        DEADLINE,
        "more keep-alive requests after the swap",
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
    poll_async(DEADLINE, "the failed reload to be counted", || async {
        (metric(&s, r#"tenant_gateway_tls_reloads_total{result="error"}"#).await == Some(1.0))
            .then_some(())
    })
    .await;
    assert_eq!(
        served_cert(&s.url("/validate/namespaces"), &[&b, &c]).await,
        Some(b_der.clone())
    );
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
    poll_async(DEADLINE, "certificate C to be served", || async {
        (served_cert(&s.url("/validate/namespaces"), &[&c])
            .await
            .as_ref()
            == Some(&c_der))
        .then_some(())
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
    poll_async(DEADLINE, "the mismatch to be reported", || async {
        (metric(&s, r#"tenant_gateway_tls_reloads_total{result="error"}"#).await == Some(1.0))
            .then_some(())
    })
    .await;
    assert_eq!(
        served_cert(&s.url("/validate/namespaces"), &[&a, &b]).await,
        Some(a_der)
    );
    assert!(s.readiness.tls_error().is_some());

    // Then the key: the pair matches and is picked up.
    std::fs::write(&key, &b.tls_key_pem).expect("write key");
    let b_der = leaf_der(&b.tls_cert_pem);
    poll_async(DEADLINE, "certificate B to be served", || async {
        (served_cert(&s.url("/validate/namespaces"), &[&a, &b])
            .await
            .as_ref()
            == Some(&b_der))
        .then_some(())
    })
    .await;
    assert_eq!(s.readiness.tls_error(), None);

    // Garbage in the certificate file is a reload error too, not a crash.
    std::fs::write(&cert, "not a certificate").expect("write");
    poll_async(DEADLINE, "the garbage to be reported", || async {
        (metric(&s, r#"tenant_gateway_tls_reloads_total{result="error"}"#).await == Some(2.0))
            .then_some(())
    })
    .await;
    assert_eq!(
        served_cert(&s.url("/validate/namespaces"), &[&b]).await,
        Some(b_der)
    );
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

/// The real `serve` binary under load (issue 11): three Secret-volume swaps while HTTP/2,
/// HTTP/1.1 keep-alive and new-connection clients post reviews cost no request; each new
/// certificate reaches new connections. Then a corrupt certificate and a mismatched pair are
/// pushed the same way: the last good certificate keeps serving, no request fails, and the
/// problem is in `/readyz`'s detail, the reload metric and the log. A good pair clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_binary_rotates_under_load_and_survives_a_corrupt_push() {
    use support::load::Load;
    use support::process::{Tls, http_get, start_with_tls};
    let dir = tempfile::tempdir().expect("tempdir");
    let pairs: Vec<DevCerts> = (0..4).map(|_| pki()).collect();
    let cas: Vec<&str> = pairs.iter().map(|p| p.ca_cert_pem.as_str()).collect();
    let trusted: Vec<&DevCerts> = pairs.iter().collect();
    let mut vol = SecretVolume::new(dir.path(), &pairs[0].tls_cert_pem, &pairs[0].tls_key_pem);
    let (cert, key) = (vol.cert(), vol.key());
    let s = start_with_tls(
        &["--root-host", "example.org", "--tls-reload-interval", "0.2"],
        Tls {
            cert: &cert,
            key: &key,
            ca_pem: &pairs[0].ca_cert_pem,
        },
    );
    let url = s.url("/validate/httproutes");
    let metric = |series: &str| -> Option<f64> {
        let (_, text) = http_get(&s.metrics, "/metrics")?;
        metric_in(&text, series)
    };
    let load = Load::start(url.clone(), &cas, 3, true);
    poll_async(DEADLINE, "the load to run", || async {
        (load.ok() >= 50).then_some(())
    })
    .await;

    let mut swaps = 0;
    for p in &pairs[1..] {
        vol.swap(&p.tls_cert_pem, &p.tls_key_pem);
        swaps += 1;
        let der = leaf_der(&p.tls_cert_pem);
        poll_async(
            DEADLINE,
            "a new connection to get the new certificate",
            || async { (served_cert(&url, &trusted).await.as_ref() == Some(&der)).then_some(()) },
        )
        .await;
        let before = load.ok();
        poll_async(
            DEADLINE,
            "requests to keep flowing after the swap",
            || async { (load.ok() >= before + 30).then_some(()) },
        )
        .await;
        assert!(load.failures().is_empty(), "{:?}", load.failures());
    }
    assert_eq!(
        metric(r#"tenant_gateway_tls_reloads_total{result="success"}"#),
        Some(swaps as f64)
    );

    // Corrupt pushes: the last good pair (pairs[3]) keeps serving.
    let good = leaf_der(&pairs[3].tls_cert_pem);
    let corrupt = [
        (
            "-----BEGIN CERTIFICATE-----\nMIIBzzCCAXWgAwIBAgIU\n-----END CERTIFICATE-----\n"
                .to_string(),
            pairs[3].tls_key_pem.clone(),
        ),
        (pairs[1].tls_cert_pem.clone(), pairs[2].tls_key_pem.clone()),
    ];
    for (n, (c, k)) in corrupt.iter().enumerate() {
        vol.swap(c, k);
        let want = (n + 1) as f64;
        poll_async(DEADLINE, "the failed reload to be counted", || async {
            (metric(r#"tenant_gateway_tls_reloads_total{result="error"}"#) == Some(want))
                .then_some(())
        })
        .await;
        assert_eq!(served_cert(&url, &trusted).await, Some(good.clone()));
        let (code, body) = http_get(&s.metrics, "/readyz").expect("readyz");
        // Still ready (the old pair serves; failing every replica's probe on one bad
        // Secret would take the webhook down), with the failure named.
        assert_eq!(code, 200, "{body}");
        assert!(
            body.contains("tls reload failed, old certificate still serving"),
            "{body}"
        );
        let before = load.ok();
        poll_async(
            DEADLINE,
            "requests to keep flowing after the bad push",
            || async { (load.ok() >= before + 30).then_some(()) },
        )
        .await;
    }
    let log = s.stderr_text();
    assert!(
        log.matches("serving certificate reload failed").count() >= 2,
        "{log}"
    );
    assert_eq!(
        metric(r#"tenant_gateway_tls_reloads_total{result="success"}"#),
        Some(swaps as f64),
        "a bad push is not a successful reload"
    );

    // A good pair again: served, and the detail clears.
    vol.swap(&pairs[0].tls_cert_pem, &pairs[0].tls_key_pem);
    let first = leaf_der(&pairs[0].tls_cert_pem);
    poll_async(DEADLINE, "the fixed pair to be served", || async {
        (served_cert(&url, &trusted).await.as_ref() == Some(&first)).then_some(())
    })
    .await;
    let (code, body) = http_get(&s.metrics, "/readyz").expect("readyz");
    assert_eq!(
        (code, body.contains("tls reload failed")),
        (200, false),
        "{body}"
    );

    let (ok, failures) = load.stop().await;
    eprintln!(
        "rotation under load: {ok} requests, {} swaps, 2 bad pushes",
        swaps + 1
    );
    assert!(
        failures.is_empty(),
        "failed requests during rotation: {failures:?}"
    );
}
