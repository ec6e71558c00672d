//! Client certificates: required and verified against `client_ca_file` when it is set, not
//! asked for when it is not.

mod support;

use reqwest::StatusCode;
use serde_json::json;
use support::http::*;
use support::review::*;
use tenant_gateway::certs;

fn identity(c: &certs::ClientCert) -> reqwest::Identity {
    reqwest::Identity::from_pem(c.identity_pem().as_bytes()).expect("identity")
}

fn body() -> serde_json::Value {
    namespace_create(
        "uid-mtls",
        "tenant-x",
        json!({}),
        "admin",
        &["system:masters"],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ca_set_requires_a_certificate_from_that_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server_pki = pki();
    let client_pki = pki(); // a separate CA for clients, as the API server's would be
    let stranger_pki = pki();
    let (cert, key) = write_pair(dir.path(), &server_pki);
    let ca_path = dir.path().join("client-ca.crt");
    std::fs::write(&ca_path, &client_pki.ca_cert_pem).expect("write client ca");
    let mut opts = options(cert, key);
    opts.client_ca_file = Some(ca_path);
    let s = TestServer::admission(opts).await;
    let url = s.url("/validate/namespaces");

    // No certificate: the handshake is refused, no HTTP response at all.
    for c in [
        client(&server_pki.ca_cert_pem),
        client_h1(&server_pki.ca_cert_pem),
    ] {
        let err = c
            .post(&url)
            .json(&body())
            .send()
            .await
            .expect_err("a client without a certificate must be refused");
        assert!(err.is_connect() || err.is_request(), "{err:?}");
    }

    // A certificate from another CA: refused too.
    let stranger = certs::generate_client(&stranger_pki.ca_cert_pem, &stranger_pki.ca_key_pem, "x")
        .expect("stranger cert");
    let c = client_builder(&server_pki.ca_cert_pem)
        .identity(identity(&stranger))
        .build()
        .expect("client");
    c.post(&url)
        .json(&body())
        .send()
        .await
        .expect_err("a certificate from an unknown CA must be refused");

    // A certificate signed by the client CA: accepted, over both HTTP versions.
    let good = certs::generate_client(
        &client_pki.ca_cert_pem,
        &client_pki.ca_key_pem,
        "kube-apiserver",
    )
    .expect("client cert");
    for builder in [
        client_builder(&server_pki.ca_cert_pem),
        client_builder(&server_pki.ca_cert_pem).http1_only(),
    ] {
        let c = builder.identity(identity(&good)).build().expect("client");
        let (status, _, v) = post_json(&c, &url, &body()).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(v["response"]["uid"], "uid-mtls");
        assert_eq!(v["response"]["allowed"], true);
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_ca_means_no_client_certificate_needed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pki();
    let (cert, key) = write_pair(dir.path(), &p);
    let s = TestServer::admission(options(cert, key)).await;
    let url = s.url("/validate/namespaces");

    let (status, _, v) = post_json(&client(&p.ca_cert_pem), &url, &body()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["response"]["allowed"], true);

    // A client that has a certificate anyway is not bothered either.
    let other = pki();
    let id = certs::generate_client(&other.ca_cert_pem, &other.ca_key_pem, "x").expect("cert");
    let c = client_builder(&p.ca_cert_pem)
        .identity(identity(&id))
        .build()
        .expect("client");
    let (status, _, _) = post_json(&c, &url, &body()).await;
    assert_eq!(status, StatusCode::OK);
    s.stop().await;
}
