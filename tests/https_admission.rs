//! Admission over the real HTTPS stack: both HTTP versions, the wire contract for bad
//! requests, and the metrics/health port (SPEC §2.1, §6, §7 tier 2).

mod support;

use reqwest::{StatusCode, Version};
use serde_json::{Value, json};
use support::http::*;
use support::review::*;
use tenant_gateway::policy::HOST_LABEL;
use tenant_gateway::server::{AlwaysAllow, Limits, MAX_BODY_BYTES};

async fn server() -> (
    TestServer,
    tenant_gateway::certs::DevCerts,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki();
    let (cert, key) = write_pair(dir.path(), &pki);
    let s = TestServer::admission(options(cert, key)).await;
    (s, pki, dir)
}

fn response(v: &Value) -> &Value {
    &v["response"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_over_http1_and_http2() {
    let (s, pki, _dir) = server().await;
    let url = s.url("/validate/namespaces");
    for (client, expected) in [
        (client_h1(&pki.ca_cert_pem), Version::HTTP_11),
        (client(&pki.ca_cert_pem), Version::HTTP_2),
    ] {
        let uid = format!("uid-ns-{expected:?}");
        let body = namespace_create(
            &uid,
            "tenant-bob",
            json!({ HOST_LABEL: "bob.example.org" }),
            "admin",
            &["system:masters", "system:authenticated"],
        );
        let (status, version, v) = post_json(&client, &url, &body).await;
        assert_eq!(version, expected, "negotiated HTTP version");
        assert_eq!(status, StatusCode::OK);
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["kind"], "AdmissionReview");
        assert_eq!(response(&v)["uid"], uid.as_str());
        assert_eq!(response(&v)["allowed"], true, "{v}");

        // Layer 2 through the same stack: a hostname inside the apex is fine, one outside
        // is denied with a 403 status and a message naming the apex.
        let gw = s.url("/validate/gateways");
        let (status, _, v) = post_json(
            &client,
            &gw,
            &gateway_create("uid-gw-ok", "tenant-alice", "www.alice.example.org"),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response(&v)["allowed"], true, "{v}");
        let (status, _, v) = post_json(
            &client,
            &gw,
            &gateway_create("uid-gw-bad", "tenant-alice", "shop.bob.example.org"),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response(&v)["uid"], "uid-gw-bad");
        assert_eq!(response(&v)["allowed"], false, "{v}");
        assert_eq!(response(&v)["status"]["code"], 403);
        assert_eq!(response(&v)["status"]["reason"], "Forbidden");
        let msg = response(&v)["status"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("alice.example.org"), "{msg}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_user_cannot_set_the_host_label() {
    let (s, pki, _dir) = server().await;
    for client in [client_h1(&pki.ca_cert_pem), client(&pki.ca_cert_pem)] {
        let body = namespace_create(
            "uid-ns-untrusted",
            "tenant-mallory",
            json!({ HOST_LABEL: "alice.example.org" }),
            "mallory",
            &["system:authenticated"],
        );
        let (status, _, v) = post_json(&client, &s.url("/validate/namespaces"), &body).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response(&v)["uid"], "uid-ns-untrusted");
        assert_eq!(response(&v)["allowed"], false, "{v}");
        assert_eq!(response(&v)["status"]["code"], 403);
        let msg = response(&v)["status"]["message"].as_str().unwrap_or("");
        assert!(msg.contains(HOST_LABEL), "{msg}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_for_the_wrong_path_is_denied() {
    let (s, pki, _dir) = server().await;
    let body = namespace_create(
        "uid-wrong-path",
        "x",
        json!({}),
        "admin",
        &["system:masters"],
    );
    let (status, _, v) = post_json(
        &client(&pki.ca_cert_pem),
        &s.url("/validate/gateways"),
        &body,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(response(&v)["uid"], "uid-wrong-path");
    assert_eq!(response(&v)["allowed"], false);
    let msg = response(&v)["status"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("misconfiguration"), "{msg}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_get_the_documented_answers() {
    let (s, pki, _dir) = server().await;
    let url = s.url("/validate/httproutes");
    for client in [client_h1(&pki.ca_cert_pem), client(&pki.ca_cert_pem)] {
        // Not JSON: 400 with a JSON error body.
        let resp = client
            .post(&url)
            .body("this is not json")
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(resp.headers()["content-type"], "application/json");
        let v: Value = resp.json().await.expect("json error body");
        assert!(
            v["error"].as_str().is_some_and(|e| e.contains("not JSON")),
            "{v}"
        );

        // Empty body is not JSON either.
        let resp = client.post(&url).send().await.expect("send");
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

        // JSON without `request`: 200, allowed false, a message.
        let (status, _, v) = post_json(
            &client,
            &url,
            &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response(&v)["allowed"], false);
        assert!(
            response(&v)["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("request"))
        );

        // Wrong apiVersion with a readable uid: the uid is echoed in the denial.
        let mut wrong =
            namespace_create("uid-v1beta1", "x", json!({}), "admin", &["system:masters"]);
        wrong["apiVersion"] = json!("admission.k8s.io/v1beta1");
        let (status, _, v) = post_json(&client, &s.url("/validate/namespaces"), &wrong).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response(&v)["uid"], "uid-v1beta1");
        assert_eq!(response(&v)["allowed"], false);

        // Request of the wrong shape (object is a string).
        let mut shape = namespace_create("uid-shape", "x", json!({}), "admin", &["system:masters"]);
        shape["request"]["object"] = json!("not an object");
        let (status, _, v) = post_json(&client, &s.url("/validate/namespaces"), &shape).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response(&v)["allowed"], false, "{v}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_limit_is_36_mib() {
    let (s, pki, _dir) = server().await;
    let url = s.url("/validate/namespaces");
    // A JSON document of exactly the limit is read (and answered as a review without
    // `request`); one byte more is refused with 413.
    let exact = padded_json(MAX_BODY_BYTES);
    let over = padded_json(MAX_BODY_BYTES + 1);
    for client in [client_h1(&pki.ca_cert_pem), client(&pki.ca_cert_pem)] {
        let resp = client
            .post(&url)
            .body(exact.clone())
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), StatusCode::OK);
        let v: Value = resp.json().await.expect("json");
        assert_eq!(response(&v)["allowed"], false);

        let resp = client
            .post(&url)
            .body(over.clone())
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let v: Value = resp.json().await.expect("json error body");
        assert!(v["error"].is_string());

        // Same without a Content-Length (chunked / streamed): the limit applies while reading.
        let chunks: Vec<Result<hyper::body::Frame<bytes::Bytes>, std::io::Error>> = over
            .chunks(1 << 20)
            .map(|c| Ok(hyper::body::Frame::data(bytes::Bytes::copy_from_slice(c))))
            .collect();
        let stream = http_body_util::StreamBody::new(futures::stream::iter(chunks));
        let resp = client
            .post(&url)
            .body(reqwest::Body::wrap(stream))
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
    s.stop().await;
}

fn padded_json(len: usize) -> Vec<u8> {
    let head = br#"{"pad":""#;
    let tail = br#""}"#;
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(head);
    v.resize(len - tail.len(), b'x');
    v.extend_from_slice(tail);
    assert_eq!(v.len(), len);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_validate_paths_on_the_webhook_port() {
    let (s, pki, _dir) = server().await;
    for client in [client_h1(&pki.ca_cert_pem), client(&pki.ca_cert_pem)] {
        for path in [
            "/validate/pods",
            "/validate/",
            "/validate/namespaces/x",
            "/",
            "/metrics",
            "/healthz",
            "/readyz",
        ] {
            for method in [reqwest::Method::GET, reqwest::Method::POST] {
                let resp = client
                    .request(method.clone(), s.url(path))
                    .body("{}")
                    .send()
                    .await
                    .expect("send");
                assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{method} {path}");
                assert_eq!(resp.headers()["content-type"], "application/json");
                let v: Value = resp.json().await.expect("json");
                assert!(v["error"].is_string());
            }
        }
        for method in [
            reqwest::Method::GET,
            reqwest::Method::PUT,
            reqwest::Method::DELETE,
        ] {
            let resp = client
                .request(method.clone(), s.url("/validate/namespaces"))
                .send()
                .await
                .expect("send");
            assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED, "{method}");
            assert_eq!(resp.headers()["allow"], "POST");
            let v: Value = resp.json().await.expect("json");
            assert!(v["error"].is_string());
        }
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki();
    let (cert, key) = write_pair(dir.path(), &pki);
    // Namespace index not synced yet.
    let s = TestServer::start(options(cert, key), Limits::default(), admission, false).await;
    let http = plain_client();

    let resp = http
        .get(s.metrics_url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.text().await.expect("text").trim(), "ok");

    let resp = http
        .get(s.metrics_url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let text = resp.text().await.expect("text");
    assert!(text.contains("namespace index"), "{text}");
    assert!(!text.contains("tls:"), "TLS is loaded: {text}");
    assert!(!text.contains("listener"), "the listener is bound: {text}");

    s.readiness.set_index_synced(true);
    let resp = http
        .get(s.metrics_url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.text().await.expect("text").starts_with("ok"));

    let body = namespace_create("uid-m", "tenant-x", json!({}), "admin", &["system:masters"]);
    let (status, _, _) = post_json(
        &client(&pki.ca_cert_pem),
        &s.url("/validate/namespaces"),
        &body,
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    let resp = http
        .get(s.metrics_url("/metrics"))
        .send()
        .await
        .expect("metrics");
    assert_eq!(resp.status(), StatusCode::OK);
    let ct = resp.headers()["content-type"]
        .to_str()
        .expect("ct")
        .to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let text = resp.text().await.expect("text");
    assert!(
        metric_in(
            &text,
            r#"tenant_gateway_admission_requests_total{decision="allowed",layer="namespace",operation="CREATE",resource="namespaces"}"#
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
    assert!(
        text.contains("tenant_gateway_admission_duration_seconds_bucket{"),
        "{text}"
    );
    let expiry = metric_in(
        &text,
        "tenant_gateway_tls_certificate_expiry_timestamp_seconds",
    )
    .expect("expiry gauge");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    assert!(
        expiry > now,
        "expiry {expiry} is the loaded certificate's notAfter"
    );
    assert_eq!(
        metric_in(&text, r#"tenant_gateway_tls_reloads_total{result="error"}"#),
        Some(0.0)
    );

    let resp = http
        .get(s.metrics_url("/validate/namespaces"))
        .send()
        .await
        .expect("404");
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_runs_on_the_same_stack() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = pki();
    let (cert, key) = write_pair(dir.path(), &pki);
    let s = TestServer::start(
        options(cert, key),
        Limits::default(),
        |_| std::sync::Arc::new(AlwaysAllow),
        true,
    )
    .await;
    let c = client(&pki.ca_cert_pem);
    let body = namespace_create(
        "uid-aa",
        "tenant-x",
        json!({ HOST_LABEL: "evil.org" }),
        "mallory",
        &[],
    );
    let (status, version, v) = post_json(&c, &s.url("/validate/namespaces"), &body).await;
    assert_eq!((status, version), (StatusCode::OK, Version::HTTP_2));
    assert_eq!(response(&v)["uid"], "uid-aa");
    assert_eq!(response(&v)["allowed"], true);
    let resp = c
        .post(s.url("/validate/namespaces"))
        .body("nope")
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let resp = c
        .post(s.url("/nope"))
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reviews_multiplex_over_http2() {
    let (s, pki, _dir) = server().await;
    let c = client(&pki.ca_cert_pem);
    let url = s.url("/validate/namespaces");
    let mut tasks = Vec::new();
    for i in 0..64 {
        let c = c.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let body = namespace_create(
                &format!("uid-{i}"),
                "tenant-x",
                json!({}),
                "admin",
                &["system:masters"],
            );
            let (status, version, v) = post_json(&c, &url, &body).await;
            assert_eq!((status, version), (StatusCode::OK, Version::HTTP_2));
            assert_eq!(v["response"]["uid"], format!("uid-{i}"));
        }));
    }
    for t in tasks {
        t.await.expect("request task");
    }
    s.stop().await;
}

/// A review far larger than any per-connection buffer (hyper's 8 KiB read buffer and its
/// 64 KiB cap, rustls' records, the HTTP/2 windows of 128/256 KiB) but under the body limit
/// is read whole and answered on both HTTP versions, and the connection serves a small
/// review after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mebibyte_review_is_answered_on_both_http_versions() {
    let (s, pki, _dir) = server().await;
    let url = s.url("/validate/httproutes");
    for (client, expected) in [
        (client_h1(&pki.ca_cert_pem), Version::HTTP_11),
        (client(&pki.ca_cert_pem), Version::HTTP_2),
    ] {
        let uid = format!("uid-big-{expected:?}");
        let mut big = admitted(&uid);
        big["request"]["object"]["metadata"]["annotations"] = json!({
            "kubectl.kubernetes.io/last-applied-configuration": "x".repeat(1 << 20),
        });
        let len = serde_json::to_vec(&big).expect("encode").len();
        assert!(len > 1 << 20 && len < MAX_BODY_BYTES, "{len} bytes");
        let (status, version, v) = post_json(&client, &url, &big).await;
        assert_eq!(version, expected, "negotiated HTTP version");
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response(&v)["uid"], uid.as_str());
        assert_eq!(response(&v)["allowed"], true, "{v}");

        let small = format!("uid-small-{expected:?}");
        let (status, _, v) = post_json(&client, &url, &admitted(&small)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(response(&v)["uid"], small.as_str());
        assert_eq!(response(&v)["allowed"], true, "{v}");
    }
    s.stop().await;
}
