//! Every e2e test's access to `tests/k8s/control-plane` (a real kube-apiserver and etcd, built
//! from Go modules and cached under ~/.cache/tenant-gateway): start and teardown, its
//! kubeconfig and the kube client on it, kubectl and helm, and the cluster setup the e2e
//! tests share (CRDs, RBAC for impersonated users, the demo tenants, the policies).
//! `tenant-gateway serve` against it is [`super::process::Webhook`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::poll::{poll, try_poll};
use super::process::terminate;

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
        let child = &mut cp.child;
        let started = try_poll(
            Duration::from_secs(40 * 60),
            Duration::from_millis(200),
            || {
                if ready.exists() {
                    return Some(Ok(()));
                }
                match child.try_wait() {
                    Ok(Some(status)) => Some(Err(status)),
                    _ => None,
                }
            },
        );
        match started {
            Some(Ok(())) => {}
            Some(Err(status)) => panic!("control plane exited with {status}: {}", cp.log_tail()),
            None => panic!("control plane not ready: {}", cp.log_tail()),
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

    /// The kube client of the tests' own code (reconciler, replicator) for this control
    /// plane: its admin kubeconfig, default context.
    pub async fn kube_client(&self) -> kube::Client {
        tenant_gateway::cluster::client::connect(Some(&self.kubeconfig()), None)
            .await
            .expect("a kube client for the control plane")
    }

    /// `helm` of the harness against this cluster.
    pub fn helm(&self, args: &[&str]) -> std::process::Output {
        Command::new(self.bin("helm"))
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .output()
            .expect("helm runs")
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
        poll(Duration::from_secs(90), "the policy to take effect", || {
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

/// A binary of the harness (`kubectl`, `helm`) without a running control plane:
/// `control-plane --build-only` builds what is missing (once per test binary) and prints the
/// cached bin directory.
pub fn harness_bin(name: &str) -> PathBuf {
    static BIN_DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = BIN_DIR.get_or_init(|| {
        let out = Command::new(repo_root().join("tests/k8s/control-plane"))
            .arg("--build-only")
            .output()
            .expect("tests/k8s/control-plane runs");
        assert!(
            out.status.success(),
            "control-plane --build-only failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(stdout.lines().last().expect("the bin directory").trim())
    });
    let bin = dir.join(name);
    assert!(bin.exists(), "no {name} at {}", bin.display());
    bin
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}
