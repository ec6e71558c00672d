//! `tenant-gateway audit` over a snapshot, as a user runs it (SPEC §1, §3.9): the violators and
//! nothing else, the exit codes, the table and JSON forms, the usage errors.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const NAMESPACES: &str = "\
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: tenant-root, labels: {namespace.cozystack.io/host: example.org}}}
- {apiVersion: v1, kind: Namespace, metadata: {name: tenant-alice, labels: {namespace.cozystack.io/host: alice.example.org}}}
- {apiVersion: v1, kind: Namespace, metadata: {name: tenant-bob, labels: {namespace.cozystack.io/host: bob.example.org}}}
- {apiVersion: v1, kind: Namespace, metadata: {name: tenant-twin1, labels: {namespace.cozystack.io/host: twin.example.org}}}
- {apiVersion: v1, kind: Namespace, metadata: {name: tenant-twin2, labels: {namespace.cozystack.io/host: twin.example.org}}}
- {apiVersion: v1, kind: Namespace, metadata: {name: tenant-stray, labels: {namespace.cozystack.io/host: stray.io}}}
- {apiVersion: v1, kind: Namespace, metadata: {name: tenant-bare}}
- {apiVersion: v1, kind: Namespace, metadata: {name: cozy-system}}
";

/// Every guarded kind once in a good and once in a bad form, as `kubectl get -A -o yaml`
/// prints them (a List), plus objects the audit must leave alone.
const OBJECTS: &str = "\
apiVersion: v1
kind: List
items:
- apiVersion: gateway.networking.k8s.io/v1
  kind: HTTPRoute
  metadata: {name: shop, namespace: tenant-alice, uid: 11111111-1111-1111-1111-111111111111}
  spec: {hostnames: [shop.alice.example.org], rules: [{backendRefs: [{name: shop, port: 80}]}]}
  status: {parents: []}
- apiVersion: gateway.networking.k8s.io/v1
  kind: HTTPRoute
  metadata: {name: hijack, namespace: tenant-alice, uid: 22222222-2222-2222-2222-222222222222}
  spec: {hostnames: [shop.bob.example.org]}
- apiVersion: gateway.networking.k8s.io/v1
  kind: GRPCRoute
  metadata: {name: catchall, namespace: tenant-bob}
  spec: {rules: [{}]}
- apiVersion: gateway.networking.k8s.io/v1alpha2
  kind: TLSRoute
  metadata: {name: api, namespace: tenant-bob}
  spec: {hostnames: [api.bob.example.org]}
- apiVersion: gateway.networking.k8s.io/v1
  kind: HTTPRoute
  metadata: {name: platform, namespace: cozy-system}
  spec: {hostnames: [grafana.bob.example.org]}
- apiVersion: gateway.networking.k8s.io/v1
  kind: Gateway
  metadata: {name: gw, namespace: tenant-bob}
  spec:
    gatewayClassName: cilium
    listeners:
    - {name: http, port: 80, protocol: HTTP}
    - {name: wild, port: 443, protocol: HTTPS, hostname: '*.example.org'}
- apiVersion: gateway.networking.x-k8s.io/v1alpha1
  kind: XListenerSet
  metadata: {name: extra, namespace: tenant-bob}
  spec:
    parentRef: {name: gw}
    listeners: [{name: a, port: 443, protocol: HTTPS, hostname: a.bob.example.org}]
- apiVersion: networking.k8s.io/v1
  kind: Ingress
  metadata:
    name: snippet
    namespace: tenant-alice
    annotations: {nginx.ingress.kubernetes.io/server-snippet: 'server_name x;'}
  spec: {rules: [{host: www.alice.example.org}]}
- apiVersion: networking.k8s.io/v1
  kind: Ingress
  metadata: {name: custom, namespace: tenant-alice}
  spec: {rules: [{host: shop.customer.com}]}
- apiVersion: cozystack.io/v1alpha1
  kind: Package
  metadata: {name: cozystack.cozystack-platform}
  spec: {components: {platform: {values: {gateway: {attachedNamespaces: [cozy-dashboard, tenant-root]}}}}}
- apiVersion: gateway.cozystack.io/v1alpha1
  kind: TenantGateway
  metadata: {name: gw, namespace: tenant-alice}
  spec: {apex: bob.example.org}
- apiVersion: gateway.cozystack.io/v1alpha1
  kind: TenantGateway
  metadata: {name: gw, namespace: tenant-bob}
  spec: {apex: bob.example.org, attachedNamespaces: [cozy-dashboard]}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web, namespace: tenant-alice}
  spec: {replicas: 1}
";

struct Snapshot {
    dir: tempfile::TempDir,
}

impl Snapshot {
    fn new(objects: &str) -> Snapshot {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("namespaces.yaml"), NAMESPACES).expect("write");
        std::fs::create_dir(dir.path().join("objects")).expect("mkdir");
        std::fs::write(dir.path().join("objects/all.yaml"), objects).expect("write");
        Snapshot { dir }
    }

    fn path(&self, p: &str) -> String {
        self.dir.path().join(p).display().to_string()
    }

    fn audit(&self, extra: &[&str]) -> Output {
        let (ns, objects) = (self.path("namespaces.yaml"), self.path("objects"));
        let mut args = vec!["audit", "--namespaces", &ns, "-f", &objects];
        args.extend_from_slice(extra);
        run(&args)
    }
}

/// `(result, kind, object)` of every line of the table but the header and the summary.
fn lines(table: &str) -> Vec<(String, String, String)> {
    table
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("FAIL") || l.starts_with("ERROR"))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (
                cols[0].to_string(),
                cols[2].to_string(),
                cols[3].to_string(),
            )
        })
        .collect()
}

#[test]
fn audit_finds_exactly_the_violators_of_a_snapshot() {
    let snap = Snapshot::new(OBJECTS);
    let out = snap.audit(&["--root-host", "example.org"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let table = stdout(&out);
    let mut found = lines(&table);
    found.sort();
    found.dedup();
    let want: Vec<(String, String, String)> = [
        ("FAIL", "GRPCRoute", "tenant-bob/catchall"),
        ("FAIL", "Gateway", "tenant-bob/gw"),
        ("FAIL", "HTTPRoute", "tenant-alice/hijack"),
        ("FAIL", "Ingress", "tenant-alice/snippet"),
        ("FAIL", "Namespace", "tenant-bare"),
        ("FAIL", "Namespace", "tenant-stray"),
        ("FAIL", "Namespace", "tenant-twin1"),
        ("FAIL", "Namespace", "tenant-twin2"),
        ("FAIL", "Package", "cozystack.cozystack-platform"),
        ("FAIL", "TenantGateway", "tenant-alice/gw"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(found, want, "{table}");
    // Admission's own phrases (SPEC §2.4).
    for phrase in [
        "HTTPRoute tenant-alice/hijack: hostname \"shop.bob.example.org\" is not allowed: hostnames must equal the namespace's namespace.cozystack.io/host label or be subdomains of it (alice.example.org)",
        "must equal bob.example.org or end with .bob.example.org",
        "must not contain tenant-",
        "is managed by the platform",
        "nginx.ingress.kubernetes.io/server-snippet",
    ] {
        assert!(table.contains(phrase), "{phrase:?} in {table}");
    }
    assert!(
        table.contains("not within the platform root host example.org"),
        "{table}"
    );
    assert!(
        table.contains("also the apex of 1 other namespace"),
        "{table}"
    );
    assert!(
        !table.contains("cozy-system/platform"),
        "platform namespaces are not judged"
    );
    assert!(
        !table.contains("retry"),
        "no advice meant for a writer: {table}"
    );
    assert!(
        table.ends_with("audited 11 objects and 7 namespaces: 10 violations, 0 errors\n"),
        "{table}"
    );
}

#[test]
fn audit_json_carries_each_result_with_its_rule_and_reference() {
    let snap = Snapshot::new(OBJECTS);
    let out = snap.audit(&["--root-host", "example.org", "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 10);
    let hijack = results
        .iter()
        .find(|r| r["name"] == "hijack")
        .expect("the hijacking route");
    assert_eq!(hijack["apiVersion"], "gateway.networking.k8s.io/v1");
    assert_eq!(hijack["kind"], "HTTPRoute");
    assert_eq!(hijack["namespace"], "tenant-alice");
    assert_eq!(hijack["uid"], "22222222-2222-2222-2222-222222222222");
    assert_eq!(hijack["layer"], "route");
    assert_eq!(hijack["rule"], "route-hostnames-within-apex");
    assert_eq!(hijack["result"], "fail");
    let tgw = results
        .iter()
        .find(|r| r["kind"] == "TenantGateway")
        .expect("the TenantGateway");
    assert_eq!(tgw["layer"], "tenantgateway");
    assert_eq!(v["summary"]["violations"], 10);
    assert_eq!(v["summary"]["errors"], 0);
    assert_eq!(v["notAudited"], serde_json::json!([]));
}

#[test]
fn audit_exits_0_when_nothing_violates() {
    let good = "\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: tenant-alice}
spec: {hostnames: [shop.alice.example.org]}
";
    let dir = tempfile::tempdir().expect("tempdir");
    let ns = "\
apiVersion: v1
kind: Namespace
metadata: {name: tenant-alice, labels: {namespace.cozystack.io/host: alice.example.org}}
";
    std::fs::write(dir.path().join("ns.yaml"), ns).expect("write");
    std::fs::write(dir.path().join("routes.yaml"), good).expect("write");
    let path = |p: &str| dir.path().join(p).display().to_string();
    let (nsf, rf) = (path("ns.yaml"), path("routes.yaml"));
    let out = run(&[
        "audit",
        "--namespaces",
        &nsf,
        "-f",
        &rf,
        "--root-host",
        "example.org",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(
        stdout(&out),
        "audited 1 object and 1 namespace: no violations\n"
    );
}

#[test]
fn a_broken_document_is_an_error_that_hides_nothing_else() {
    let broken = format!("{OBJECTS}---\nkind: [unclosed\n");
    let snap = Snapshot::new(&broken);
    let out = snap.audit(&["--root-host", "example.org"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let table = stdout(&out);
    assert!(table.contains("all.yaml#2"), "names where: {table}");
    assert!(
        lines(&table)
            .iter()
            .any(|(_, _, o)| o == "tenant-alice/hijack"),
        "the other results stay: {table}"
    );
    assert!(table.ends_with("10 violations, 1 error\n"), "{table}");
}

#[test]
fn without_a_root_host_ingresses_are_said_not_audited() {
    // Layer 8 cannot run without the root apex: said, and exit 2 (an error, as `check` and
    // `serve` treat it), never 0 or 1 as if the Ingresses had been judged.
    let snap = Snapshot::new(OBJECTS);
    let out = snap.audit(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("error: Ingress: no --root-host"), "{table}");
    assert!(
        !lines(&table).iter().any(|(_, k, _)| k == "Ingress"),
        "{table}"
    );
}

#[test]
fn a_layer_that_is_off_is_not_audited_and_warn_mode_is() {
    let snap = Snapshot::new(OBJECTS);
    let out = snap.audit(&[
        "--root-host",
        "example.org",
        "--enforcement",
        "route=off,gateway=warn",
    ]);
    let table = stdout(&out);
    assert!(
        table.contains("not audited: HTTPRoute: the route layer is off"),
        "{table}"
    );
    let found = lines(&table);
    assert!(
        !found.iter().any(|(_, k, _)| k.ends_with("Route")),
        "{table}"
    );
    assert!(found.iter().any(|(_, k, _)| k == "Gateway"), "{table}");
}

#[test]
fn audit_usage_errors_exit_2_and_say_what_is_missing() {
    let snap = Snapshot::new(OBJECTS);
    let objects = snap.path("objects");
    let out = run(&["audit", "-f", &objects]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("needs its namespaces: add --namespaces FILE"),
        "{}",
        stderr(&out)
    );
    let ns = snap.path("namespaces.yaml");
    let out = run(&["audit", "--namespaces", &ns]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("give its objects with -f"),
        "{}",
        stderr(&out)
    );
    let out = run(&[
        "audit",
        "--namespaces",
        &ns,
        "-f",
        &objects,
        "--context",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not both"), "{}", stderr(&out));
    let missing = Path::new(&objects).join("nothing-here");
    let out = run(&[
        "audit",
        "--namespaces",
        &ns,
        "-f",
        &missing.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let out = run(&["audit", "--kubeconfig", "/nonexistent/kubeconfig"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("/nonexistent/kubeconfig"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn audit_exits_quietly_on_a_closed_stdout() {
    let snap = Snapshot::new(OBJECTS);
    let (ns, objects) = (snap.path("namespaces.yaml"), snap.path("objects"));
    for output in ["table", "json"] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
            .args(["audit", "--namespaces", &ns, "-f", &objects, "-o", output])
            .stdout(writer)
            .output()
            .expect("runs");
        let err = stderr(&out);
        assert!(
            !err.contains("panicked") && !err.to_lowercase().contains("broken pipe"),
            "{err}"
        );
        assert_ne!(out.status.code(), Some(101), "{err}");
    }
}
