//! `tenant-gateway serve` as a real process on loopback ports with generated certificates and
//! the example namespace snapshot, for the process and attack tests.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::DEADLINE;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// One `GET` over a fresh plain connection; `None` when anything fails or takes over `within`.
pub fn http_get_within(addr: &str, path: &str, within: Duration) -> Option<(u16, String)> {
    let sock: std::net::SocketAddr = addr.parse().ok()?;
    let mut s = TcpStream::connect_timeout(&sock, within).ok()?;
    s.set_read_timeout(Some(within)).ok()?;
    s.set_write_timeout(Some(within)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, buf))
}

pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    http_get_within(addr, path, Duration::from_secs(2))
}

pub struct Serve {
    pub child: Child,
    pub port: u16,
    /// `127.0.0.1:PORT` of the metrics/health port.
    pub metrics: String,
    pub ca: Vec<u8>,
    /// What the process wrote to stderr so far (the first [`STDERR_KEEP`] bytes).
    stderr: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    _dir: tempfile::TempDir,
}

/// Bytes of stderr kept for [`Serve::stderr_text`]; the rest is read and dropped.
pub const STDERR_KEEP: usize = 4 << 20;

/// The serving pair `serve` is started with.
pub struct Tls<'a> {
    pub cert: &'a std::path::Path,
    pub key: &'a std::path::Path,
    /// The CA clients trust ([`Serve::ca`]).
    pub ca_pem: &'a str,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `serve` with `extra` flags and wait for `/readyz`.
pub fn start(extra: &[&str]) -> Serve {
    start_with_env(extra, &[])
}

pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Serve {
    start_full(extra, env, None)
}

/// Start `serve` with the given certificate files instead of a fresh pair in its own folder.
pub fn start_with_tls(extra: &[&str], tls: Tls<'_>) -> Serve {
    start_full(extra, &[], Some(tls))
}

fn start_full(extra: &[&str], env: &[(&str, &str)], tls: Option<Tls<'_>>) -> Serve {
    let dir = tempfile::tempdir().expect("tmp");
    let (cert, key, ca) = match tls {
        Some(t) => (
            t.cert.to_path_buf(),
            t.key.to_path_buf(),
            t.ca_pem.as_bytes().to_vec(),
        ),
        None => {
            let hosts = vec!["127.0.0.1".to_string()];
            let certs = tenant_gateway::certs::generate(&hosts).expect("certs");
            tenant_gateway::certs::write(dir.path(), &certs).expect("write certs");
            (
                dir.path().join("tls.crt"),
                dir.path().join("tls.key"),
                certs.ca_cert_pem.clone().into_bytes(),
            )
        }
    };
    let port = free_port();
    let mport = free_port();
    // `TG_SERVE_BIN` runs the tests against another build (e.g. an older commit).
    let bin = std::env::var_os("TG_SERVE_BIN")
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tenant-gateway").into());
    let child = Command::new(bin)
        .arg("serve")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{mport}")])
        .arg("--tls-cert-file")
        .arg(&cert)
        .arg("--tls-key-file")
        .arg(&key)
        .args([
            "--namespaces",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples/namespaces.yaml"),
        ])
        .args(extra)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let metrics = format!("127.0.0.1:{mport}");
    let mut s = Serve {
        child,
        port,
        metrics,
        ca,
        stderr: Default::default(),
        _dir: dir,
    };
    let deadline = Instant::now() + DEADLINE;
    while http_get(&s.metrics, "/readyz").map(|r| r.0) != Some(200) {
        if let Ok(Some(st)) = s.child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = s.child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("serve exited with {st}: {err}");
        }
        assert!(Instant::now() < deadline, "serve not ready");
        // Polling interval, not synchronisation: readiness is re-checked each time.
        std::thread::sleep(Duration::from_millis(50));
    }
    // Drain stderr so the server never blocks on a full pipe; keep the start for the tests
    // that look at the log.
    if let Some(mut e) = s.child.stderr.take() {
        let keep = s.stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = e.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut k) = keep.lock() {
                    let room = STDERR_KEEP.saturating_sub(k.len());
                    k.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        });
    }
    s
}

impl Serve {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn webhook_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    pub fn ca_pem(&self) -> &str {
        std::str::from_utf8(&self.ca).expect("pem is ASCII")
    }

    /// The log so far (stderr after readiness, at most [`STDERR_KEEP`] bytes).
    pub fn stderr_text(&self) -> String {
        self.stderr
            .lock()
            .map(|k| String::from_utf8_lossy(&k).into_owned())
            .unwrap_or_default()
    }

    pub fn sigterm(&self) {
        let st = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(st.success());
    }

    /// Wait for the process to exit, at most `within`; `None` if it is still running.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// VmRSS of `pid` in MiB, from /proc.
pub fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Samples VmRSS every 20 ms on a thread until dropped; `max()` is the highest seen.
pub struct RssWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    max_kib: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssWatch {
    pub fn start(pid: u32) -> RssWatch {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let max_kib = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (s, m) = (stop.clone(), max_kib.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(mib) = rss_mib(pid) {
                    m.fetch_max((mib * 1024.0) as u64, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        RssWatch {
            stop,
            max_kib,
            thread: Some(thread),
        }
    }

    pub fn max_mib(&self) -> f64 {
        self.max_kib.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
