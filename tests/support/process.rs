//! `tenant-gateway serve` as a real process on loopback ports: [`Serve`] with generated
//! certificates and the example namespace snapshot (the process and attack tests),
//! [`Webhook`] against a control plane (the e2e tests); free ports, plain-HTTP GETs of the
//! metrics/health port, the process log, signals and RSS sampling.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use super::control_plane::{ControlPlane, E2E_GROUP};
use super::poll::{DEADLINE, EVERY, poll, try_poll};

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

/// The status code of a plain `GET` on loopback.
pub fn http_status(addr: &str, path: &str) -> Option<u16> {
    http_get(addr, path).map(|(code, _)| code)
}

/// The value of one sample (`name` with its labels, exactly as exposed, e.g.
/// `tenant_gateway_leader`) on the `/metrics` page at `addr`.
pub fn metric(addr: &str, sample: &str) -> Option<f64> {
    let (code, body) = http_get(addr, "/metrics")?;
    if code != 200 {
        return None;
    }
    body.lines().find_map(|l| {
        l.strip_prefix(sample)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The sum of every sample of `family` (all label sets) on the `/metrics` page at `addr`.
pub fn metric_sum(addr: &str, family: &str) -> Option<f64> {
    let (code, body) = http_get(addr, "/metrics")?;
    if code != 200 {
        return None;
    }
    Some(
        body.lines()
            .filter(|l| {
                l.strip_prefix(family)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// Send SIGTERM (without unsafe code) and wait for the child, killing it after `grace`.
pub fn terminate(child: &mut Child, grace: Duration) {
    if sigterm_and_wait(child, grace).is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Send SIGTERM and wait at most `within` for the exit; `None` if it is still running.
pub fn sigterm_and_wait(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    // Quiet: the child may have exited already.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stderr(Stdio::null())
        .status();
    wait_exit(child, within)
}

/// Wait at most `within` for `child` to exit; `None` if it is still running.
pub fn wait_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    try_poll(within, Duration::from_millis(10), || {
        child.try_wait().ok().flatten()
    })
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
#[derive(Clone, Copy)]
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

/// `tenant-gateway serve` on two free loopback ports with a development pair written to
/// `dir` (`ca.crt`, `tls.crt`, `tls.key`); the caller adds its flags and spawns it.
pub struct ServeCommand {
    pub cmd: Command,
    pub port: u16,
    pub metrics_port: u16,
    pub ca_pem: String,
}

pub fn serve_command(dir: &std::path::Path) -> ServeCommand {
    serve_command_with(dir, None)
}

/// [`serve_command`] with the given certificate files instead of a fresh pair in `dir`.
pub fn serve_command_with(dir: &std::path::Path, tls: Option<Tls<'_>>) -> ServeCommand {
    let (cert, key, ca_pem) = match tls {
        Some(t) => (
            t.cert.to_path_buf(),
            t.key.to_path_buf(),
            t.ca_pem.to_string(),
        ),
        None => {
            let hosts = vec!["127.0.0.1".to_string(), "localhost".to_string()];
            let certs = tenant_gateway::certs::generate(&hosts).expect("certs");
            tenant_gateway::certs::write(dir, &certs).expect("write certs");
            (dir.join("tls.crt"), dir.join("tls.key"), certs.ca_cert_pem)
        }
    };
    let port = free_port();
    let metrics_port = free_port();
    // `TG_SERVE_BIN` runs the tests against another build (e.g. an older commit).
    let bin = std::env::var_os("TG_SERVE_BIN")
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tenant-gateway").into());
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
        .arg("--tls-cert-file")
        .arg(cert)
        .arg("--tls-key-file")
        .arg(key);
    ServeCommand {
        cmd,
        port,
        metrics_port,
        ca_pem,
    }
}

/// Wait until `/readyz` on `metrics` answers 200; panics with `log()` if the process exits
/// first or `within` passes.
pub fn wait_ready(child: &mut Child, metrics: &str, within: Duration, log: impl Fn() -> String) {
    if let Err(exited) = ready_or_exited(child, metrics, within, log) {
        panic!("{exited}");
    }
}

/// [`wait_ready`], but a process that exits first is an `Err` with its status and log (so a
/// caller can start it again when a port it was given was taken meanwhile).
fn ready_or_exited(
    child: &mut Child,
    metrics: &str,
    within: Duration,
    log: impl Fn() -> String,
) -> Result<(), String> {
    let ready = try_poll(within, Duration::from_millis(50), || {
        if http_status(metrics, "/readyz") == Some(200) {
            return Some(Ok(()));
        }
        match child.try_wait() {
            Ok(Some(st)) => Some(Err(format!("serve exited with {st}: {}", log()))),
            _ => None,
        }
    });
    ready.unwrap_or_else(|| panic!("serve not ready: {}", log()))
}

/// Starts of one `serve` when its free ports were taken between the pick and the bind (by
/// another test's process or an outgoing connection's ephemeral port).
const PORT_RACE_ATTEMPTS: usize = 3;

pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Serve {
    start_full(extra, env, None)
}

/// Start `serve` with the given certificate files instead of a fresh pair in its own folder.
pub fn start_with_tls(extra: &[&str], tls: Tls<'_>) -> Serve {
    start_full(extra, &[], Some(tls))
}

fn start_full(extra: &[&str], env: &[(&str, &str)], tls: Option<Tls<'_>>) -> Serve {
    let mut attempt = 1;
    loop {
        match try_start(extra, env, tls) {
            Ok(s) => return s,
            Err(exited)
                if attempt < PORT_RACE_ATTEMPTS && exited.contains("Address already in use") =>
            {
                attempt += 1;
            }
            Err(exited) => panic!("{exited}"),
        }
    }
}

fn try_start(extra: &[&str], env: &[(&str, &str)], tls: Option<Tls<'_>>) -> Result<Serve, String> {
    let dir = tempfile::tempdir().expect("tmp");
    let ServeCommand {
        mut cmd,
        port,
        metrics_port: mport,
        ca_pem,
    } = serve_command_with(dir.path(), tls);
    let child = cmd
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
    let ca = ca_pem.into_bytes();
    let mut s = Serve {
        child,
        port,
        metrics,
        ca,
        stderr: Default::default(),
        _dir: dir,
    };
    let stderr = std::cell::RefCell::new(s.child.stderr.take());
    // Read only once the process has exited (a live one would block the read).
    let log = || {
        let mut err = String::new();
        if let Some(mut e) = stderr.borrow_mut().take() {
            let _ = e.read_to_string(&mut err);
        }
        err
    };
    ready_or_exited(&mut s.child, &s.metrics.clone(), DEADLINE, log)?;
    s.child.stderr = stderr.into_inner();
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
    Ok(s)
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
        wait_exit(&mut self.child, within)
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

/// `tenant-gateway serve` against the control plane.
pub struct Webhook {
    pub port: u16,
    pub metrics_port: u16,
    pub ca_pem: String,
    child: Child,
    dir: PathBuf,
}

impl Webhook {
    pub fn start(cp: &ControlPlane) -> Webhook {
        Webhook::start_with(cp, "webhook", &["--no-controller"])
    }

    /// `serve` with extra arguments, its files under `<control plane dir>/<name>`.
    pub fn start_with(cp: &ControlPlane, name: &str, extra: &[&str]) -> Webhook {
        let hook = Webhook::spawn(cp, name, extra, &cp.kubeconfig());
        hook.wait_ready();
        hook
    }

    /// Start `serve` against `kubeconfig` without waiting for it to be ready.
    pub fn spawn(cp: &ControlPlane, name: &str, extra: &[&str], kubeconfig: &Path) -> Webhook {
        let dir = cp.dir.path().join(name);
        std::fs::create_dir_all(&dir).expect("webhook dir");
        let ServeCommand {
            mut cmd,
            port,
            metrics_port,
            ca_pem,
        } = serve_command(&dir);
        let log = std::fs::File::create(dir.join("serve.log")).expect("log file");
        let child = cmd
            .args(["--root-host", "example.org"])
            .args(extra)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("tenant-gateway serve starts");
        Webhook {
            port,
            metrics_port,
            ca_pem,
            child,
            dir,
        }
    }

    /// Wait for `/readyz` (the process dying meanwhile fails the test with its log).
    pub fn wait_ready(&self) {
        let addr = format!("127.0.0.1:{}", self.metrics_port);
        let ready = try_poll(Duration::from_secs(30), EVERY, || {
            if http_status(&addr, "/readyz") == Some(200) {
                return Some(true);
            }
            (!self.running()).then_some(false)
        });
        match ready {
            Some(true) => {}
            Some(false) => panic!("serve exited: {}", self.log()),
            None => panic!("serve not ready: {}", self.log()),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the process has not exited.
    pub fn running(&self) -> bool {
        // `try_wait` needs `&mut`; /proc tells the same without reaping (a zombie counts as
        // exited).
        std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .map(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or_default()
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(false)
    }

    /// Send `signal` (`KILL`, `STOP`, `CONT`, `TERM`) to the process.
    pub fn signal(&self, signal: &str) {
        let st = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(st.success(), "kill -{signal} failed");
    }

    /// The Prometheus text of its metrics port, `None` when it does not answer in 2 s.
    pub fn metrics_text(&self) -> Option<String> {
        let addr = format!("127.0.0.1:{}", self.metrics_port);
        let mut s = TcpStream::connect(&addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).ok()?;
        buf.starts_with("HTTP/1.1 200").then_some(buf)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default()
    }

    /// `127.0.0.1:PORT` of the metrics/health port.
    pub fn metrics_addr(&self) -> String {
        format!("127.0.0.1:{}", self.metrics_port)
    }

    /// One sample of its `/metrics` (see [`metric`]).
    pub fn metric(&self, sample: &str) -> Option<f64> {
        metric(&self.metrics_addr(), sample)
    }

    /// SIGKILL, as a crashed node would: no drain, no Lease release.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The exit status, once it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The ValidatingWebhookConfiguration, one webhook per path, by URL with caBundle: the
    /// same object `tenant-gateway webhook-configuration` prints.
    pub fn configuration(&self) -> String {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes());
        tenant_gateway::admission::registration::by_url(
            "tenant-gateway-e2e",
            &format!("https://127.0.0.1:{}", self.port),
            &ca,
            "tenant-",
        )
        .to_string()
    }

    /// Register and wait until the API server calls us (a known denial comes back from the
    /// webhook).
    pub fn register(&self, cp: &ControlPlane) {
        cp.kubectl_ok(&["apply", "-f", "-"], Some(&self.configuration()));
        let probe = r#"{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"probe","namespace":"tenant-alice"},"spec":{"hostnames":["probe.bob.example.org"]}}"#;
        poll(Duration::from_secs(60), "the webhook to be called", || {
            let o = cp.dry_run("alice", &[E2E_GROUP], probe);
            o.stderr.contains("denied the request").then_some(())
        });
    }

    pub fn unregister(&self, cp: &ControlPlane) {
        cp.kubectl_ok(
            &[
                "delete",
                "validatingwebhookconfiguration",
                "tenant-gateway-e2e",
            ],
            None,
        );
        let probe = r#"{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"probe","namespace":"tenant-alice"},"spec":{"hostnames":["probe.bob.example.org"]}}"#;
        poll(Duration::from_secs(60), "the webhook to be gone", || {
            cp.dry_run("alice", &[E2E_GROUP], probe)
                .allowed
                .then_some(())
        });
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(20));
    }
}
