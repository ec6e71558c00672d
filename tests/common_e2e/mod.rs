//! Helpers for the real-API-server tier: the control plane from `tests/k8s`, the
//! `tenant-gateway serve` process against it, and kubectl invocations. Processes and HTTP:
//! `tests/common/process.rs`, shared with the other tests.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// The process and HTTP helpers are the ones the other tests use.
#[path = "../common/process.rs"]
pub mod process;
#[allow(unused_imports)] // each test binary uses a different subset
pub use process::{free_port, http_get, http_status, metric, metric_sum, terminate, wait_for};

/// Group bound to cluster-admin for impersonated test users, so RBAC lets every request
/// reach admission. It is not a trusted group: the policies decide on the others.
pub const E2E_GROUP: &str = "e2e:users";

/// What one kubectl call did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub allowed: bool,
    pub stdout: String,
    pub stderr: String,
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A running control plane from `tests/k8s/control-plane`.
pub struct ControlPlane {
    pub dir: tempfile::TempDir,
    child: Child,
}

impl ControlPlane {
    /// Start it, or return None when TENANT_GATEWAY_SKIP_E2E=1 (said loudly).
    pub fn start_or_skip() -> Option<ControlPlane> {
        if std::env::var("TENANT_GATEWAY_SKIP_E2E").as_deref() == Ok("1") {
            eprintln!("SKIPPED: TENANT_GATEWAY_SKIP_E2E=1, the real-API-server tier did not run");
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let log = std::fs::File::create(dir.path().join("control-plane.log")).expect("log file");
        let child = Command::new(repo_root().join("tests/k8s/control-plane"))
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("tests/k8s/control-plane starts");
        let mut cp = ControlPlane { dir, child };
        // A cold build of the harness takes minutes; scripts/test builds it first, so this
        // deadline only matters when cargo test runs alone on a fresh machine.
        let ready = cp.dir.path().join("ready");
        let deadline = Instant::now() + Duration::from_secs(40 * 60);
        while !ready.exists() {
            if let Ok(Some(status)) = cp.child.try_wait() {
                panic!("control plane exited with {status}: {}", cp.log_tail());
            }
            assert!(
                Instant::now() < deadline,
                "control plane not ready: {}",
                cp.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(cp)
    }

    pub fn log_tail(&self) -> String {
        let text =
            std::fs::read_to_string(self.dir.path().join("control-plane.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    pub fn bin(&self, name: &str) -> PathBuf {
        self.dir.path().join("bin").join(name)
    }

    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Outcome {
        let mut cmd = Command::new(self.bin("kubectl"));
        cmd.arg("--kubeconfig").arg(self.kubeconfig()).args(args);
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl runs");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("piped stdin")
                .write_all(input.as_bytes())
                .expect("write to kubectl");
        }
        let out = child.wait_with_output().expect("kubectl finishes");
        Outcome {
            allowed: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> Outcome {
        let o = self.kubectl(args, stdin);
        assert!(o.allowed, "kubectl {args:?} failed: {}", o.stderr);
        o
    }

    /// `kubectl apply -f -` of one object as JSON, as the admin; fails the test if refused.
    pub fn apply_json(&self, manifest: &serde_json::Value) {
        self.kubectl_ok(&["apply", "-f", "-"], Some(&manifest.to_string()));
    }

    /// The object as JSON, `None` when it does not exist (any other error fails the test).
    pub fn get_json(&self, kind: &str, ns: &str, name: &str) -> Option<serde_json::Value> {
        let o = self.kubectl(&["get", kind, "-n", ns, name, "-o", "json"], None);
        if !o.allowed {
            assert!(
                o.stderr.contains("NotFound") || o.stderr.contains("not found"),
                "kubectl get {kind} {ns}/{name}: {}",
                o.stderr
            );
            return None;
        }
        Some(serde_json::from_str(&o.stdout).expect("kubectl prints JSON"))
    }

    /// `kubectl apply -f -` with extra args (impersonation).
    pub fn apply(&self, extra: &[&str], manifest: &str) -> Outcome {
        let mut args = vec!["apply", "-f", "-"];
        args.extend_from_slice(extra);
        self.kubectl(&args, Some(manifest))
    }

    /// `kubectl apply --dry-run=server` as `user` with `groups`.
    pub fn dry_run(&self, user: &str, groups: &[&str], manifest: &str) -> Outcome {
        let mut args = vec!["apply", "--dry-run=server", "-f", "-", "--as", user];
        for g in groups {
            args.push("--as-group");
            args.push(g);
        }
        self.kubectl(&args, Some(manifest))
    }

    pub fn install_crds(&self) {
        let crds = self.dir.path().join("crds");
        let st = Command::new(repo_root().join("tests/k8s/fetch-crds"))
            .arg("--out")
            .arg(&crds)
            .status()
            .expect("fetch-crds runs");
        assert!(st.success(), "tests/k8s/fetch-crds failed");
        for dir in [crds.clone(), repo_root().join("tests/k8s/crds")] {
            self.kubectl_ok(
                &[
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "-f",
                    dir.to_str().expect("utf-8 path"),
                ],
                None,
            );
        }
        self.kubectl_ok(
            &[
                "wait",
                "--for",
                "condition=established",
                "--timeout=120s",
                "crd",
                "--all",
            ],
            None,
        );
        let crd = Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
            .arg("crd")
            .output()
            .expect("tenant-gateway crd runs");
        assert!(crd.status.success(), "tenant-gateway crd failed");
        self.kubectl_ok(
            &["apply", "--server-side", "-f", "-"],
            Some(&String::from_utf8_lossy(&crd.stdout)),
        );
        self.kubectl_ok(
            &[
                "wait",
                "--for",
                "condition=established",
                "--timeout=60s",
                "crd/tenantgateways.gateway.cozystack.io",
            ],
            None,
        );
    }

    pub fn grant_impersonated_users(&self) {
        let binding = format!(
            r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{{"name":"e2e-users"}},
"roleRef":{{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"}},
"subjects":[{{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"{E2E_GROUP}"}}]}}"#
        );
        self.kubectl_ok(&["apply", "-f", "-"], Some(&binding));
    }

    /// The demo tenant tree, `examples/namespaces.yaml` (the fixture the playground and the
    /// offline commands use too).
    pub fn create_tenant_namespaces(&self) {
        let tree = repo_root().join("examples/namespaces.yaml");
        self.kubectl_ok(&["apply", "-f", path_str(&tree)], None);
    }

    /// `kubectl get --raw /metrics` of the API server: how many namespace GETs answered 404
    /// so far (what the webhook's live lookups of unknown namespaces cost it).
    pub fn namespace_get_404s(&self) -> f64 {
        let o = self.kubectl_ok(&["get", "--raw", "/metrics"], None);
        o.stdout
            .lines()
            .filter(|l| {
                l.starts_with("apiserver_request_total{")
                    && l.contains("code=\"404\"")
                    && l.contains("resource=\"namespaces\"")
                    && l.contains("subresource=\"\"")
                    && l.contains("verb=\"GET\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// A user holding only `rules` (ClusterRole + binding named after the user), for
    /// requests that must reach admission with nothing but those rights.
    pub fn grant_only(&self, user: &str, rules: &str) {
        let role = format!(
            r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{{"name":"e2e-{user}"}},"rules":{rules}}}"#
        );
        let binding = format!(
            r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{{"name":"e2e-{user}"}},
"roleRef":{{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"e2e-{user}"}},
"subjects":[{{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"{user}"}}]}}"#
        );
        self.kubectl_ok(&["apply", "-f", "-"], Some(&role));
        self.kubectl_ok(&["apply", "-f", "-"], Some(&binding));
    }

    pub fn apply_policies(&self) {
        let dir = repo_root().join("policies");
        self.kubectl_ok(
            &[
                "apply",
                "--server-side",
                "-f",
                dir.to_str().expect("utf-8 path"),
            ],
            None,
        );
    }

    pub fn wait_until_denied(&self, user: &str, groups: &[&str], manifest: &str) {
        wait_for("the policy to take effect", Duration::from_secs(90), || {
            let o = self.dry_run(user, groups, manifest);
            (!o.allowed).then_some(())
        });
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(30));
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
        let process::ServeCommand {
            mut cmd,
            port,
            metrics_port,
            ca_pem,
        } = process::serve_command(&dir);
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
        let deadline = Instant::now() + Duration::from_secs(30);
        while process::http_status(&addr, "/readyz") != Some(200) {
            assert!(self.running(), "serve exited: {}", self.log());
            assert!(Instant::now() < deadline, "serve not ready: {}", self.log());
            std::thread::sleep(Duration::from_millis(100));
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
        )
        .to_string()
    }

    /// Register and wait until the API server calls us (a known denial comes back from the
    /// webhook).
    pub fn register(&self, cp: &ControlPlane) {
        cp.kubectl_ok(&["apply", "-f", "-"], Some(&self.configuration()));
        let probe = r#"{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"probe","namespace":"tenant-alice"},"spec":{"hostnames":["probe.bob.example.org"]}}"#;
        wait_for("the webhook to be called", Duration::from_secs(60), || {
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
        wait_for("the webhook to be gone", Duration::from_secs(60), || {
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

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}
