//! A bounded load generator for the robustness tests (issue 11): worker loops posting
//! reviews over HTTP/2 (one multiplexed connection), HTTP/1.1 keep-alive, and a fresh
//! connection per request (a full TLS handshake each time, so rotation is seen by new
//! connections while old ones keep going). Every outcome is recorded with its time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::task::JoinHandle;

use super::poll::DEADLINE;
use super::review::admitted;

/// How a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureKind {
    /// No connection (refused, reset during the handshake).
    Connect,
    /// The request was sent or being sent and no response head came back.
    NoResponse,
    /// A response other than 200.
    Status(u16),
    /// The head came back, the body did not (or was not JSON).
    Body,
    /// A 200 whose review does not answer this request.
    Mismatch,
}

#[derive(Debug, Clone)]
pub struct Failure {
    pub at: Instant,
    pub client: &'static str,
    pub kind: FailureKind,
    pub detail: String,
}

pub struct Load {
    stop: Arc<AtomicBool>,
    pub ok: Arc<AtomicUsize>,
    failures: Arc<std::sync::Mutex<Vec<Failure>>>,
    tasks: Vec<JoinHandle<()>>,
}

fn builder(cas: &[&str]) -> reqwest::ClientBuilder {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .timeout(DEADLINE);
    for ca in cas {
        b = b.add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("ca"));
    }
    b
}

impl Load {
    /// Start `per_kind` loops for each client kind against `url` (`/validate/httproutes`),
    /// trusting every CA in `cas`. A loop stops at its first failure when `stop_on_failure`.
    pub fn start(url: String, cas: &[&str], per_kind: usize, stop_on_failure: bool) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
        let h2 = builder(cas)
            .http2_prior_knowledge()
            .build()
            .expect("client");
        let h1 = builder(cas).http1_only().build().expect("client");
        let fresh = builder(cas)
            .pool_max_idle_per_host(0)
            .build()
            .expect("client");
        let mut tasks = Vec::new();
        for (name, client) in [("h2", h2), ("h1", h1), ("fresh", fresh)] {
            for w in 0..per_kind {
                let (client, url) = (client.clone(), url.clone());
                let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
                tasks.push(tokio::spawn(async move {
                    let mut i = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        i += 1;
                        let uid = format!("uid-{name}-{w}-{i}");
                        match one(&client, &url, &uid).await {
                            Ok(()) => {
                                ok.fetch_add(1, Ordering::SeqCst);
                            }
                            Err((kind, detail)) => {
                                if let Ok(mut f) = failures.lock() {
                                    f.push(Failure {
                                        at: Instant::now(),
                                        client: name,
                                        kind,
                                        detail,
                                    });
                                }
                                if stop_on_failure {
                                    return;
                                }
                                // Not a synchronisation: pace retries against a dead port.
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        }
                    }
                }));
            }
        }
        Load {
            stop,
            ok,
            failures,
            tasks,
        }
    }

    pub fn ok(&self) -> usize {
        self.ok.load(Ordering::SeqCst)
    }

    pub fn failures(&self) -> Vec<Failure> {
        self.failures.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// True once every loop has ended (stopped, or ended at a failure).
    pub fn all_ended(&self) -> bool {
        self.tasks.iter().all(JoinHandle::is_finished)
    }

    /// Stop the loops and wait for them; returns (successes, failures).
    pub async fn stop(self) -> (usize, Vec<Failure>) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let _ = tokio::time::timeout(DEADLINE, t).await;
        }
        let ok = self.ok.load(Ordering::SeqCst);
        let f = self.failures.lock().map(|f| f.clone()).unwrap_or_default();
        (ok, f)
    }
}

async fn one(client: &reqwest::Client, url: &str, uid: &str) -> Result<(), (FailureKind, String)> {
    let resp = client
        .post(url)
        .json(&admitted(uid))
        .send()
        .await
        .map_err(|e| {
            let kind = if e.is_connect() {
                FailureKind::Connect
            } else {
                FailureKind::NoResponse
            };
            (kind, format!("{e:?}"))
        })?;
    let status = resp.status().as_u16();
    if status != 200 {
        return Err((FailureKind::Status(status), String::new()));
    }
    let v: Value = resp
        .json()
        .await
        .map_err(|e| (FailureKind::Body, format!("{e:?}")))?;
    if v["response"]["uid"] != uid || v["response"]["allowed"] != true {
        return Err((FailureKind::Mismatch, v.to_string()));
    }
    Ok(())
}
