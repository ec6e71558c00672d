//! YAML as kubectl reads it, checked against kubectl itself on a real API server (tests/k8s):
//! - a corpus with anchors, merge keys, multi-document files, comments, CRLF line ends, a
//!   UTF-8 byte-order mark, lists, JSON streams and YAML 1.1 scalars: `tenant-gateway`
//!   reads the same objects, field for field, as `kubectl create --dry-run=client -o json`;
//! - the merge-key HTTPRoute of examples/: DENIED offline, and denied by the live webhook;
//! - `check --kubeconfig`: namespaces from the cluster, an existing object evaluated as an
//!   UPDATE of the live one (`--create-only` opts out).
//!
//! Set TENANT_GATEWAY_SKIP_E2E=1 to skip on a machine without the harness (said loudly).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use support::control_plane::*;
use support::process::*;

/// Open-schema stand-in for the Gateway API's HTTPRoute (only the YAML reading is under test).
const HTTPROUTE_CRD: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"httproutes.gateway.networking.k8s.io","annotations":{"api-approved.kubernetes.io":"unapproved, test stand-in"}},
"spec":{"group":"gateway.networking.k8s.io","scope":"Namespaced",
"names":{"kind":"HTTPRoute","listKind":"HTTPRouteList","plural":"httproutes","singular":"httproute"},
"versions":[{"name":"v1","served":true,"storage":true,
"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}"#;

/// The corpus: (file name, text). Each file is also checked with CRLF line ends and with a
/// UTF-8 byte-order mark (see `variants`).
fn corpus() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "anchors-and-merges.yaml",
            r#"# Shared pieces, as charts and kustomize overlays write them.
x-common: &common
  labels: &labels
    app: web
    tier: frontend
  annotations:
    owner: team-a
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  <<: *common
  name: merged
  namespace: tenant-alice
  labels:
    <<: *labels
    tier: backend   # explicit key wins over the merged one
spec:
  <<: [{hostnames: [admin.example.org]}, {hostnames: [later.example.org], extra: yes}]
  parentRefs:
  - &gw {name: tenant-root, namespace: tenant-root}
  - *gw
"#,
        ),
        (
            "multi-document.yaml",
            r#"---
# first
apiVersion: v1
kind: ConfigMap
metadata:
  name: one
  namespace: tenant-alice
data:
  script: |
    #!/bin/sh
    echo "--- not a separator"
  folded: >
    a
    b
--- # a comment after the separator
apiVersion: v1
kind: ConfigMap
metadata: {name: two, namespace: tenant-alice}
data: {k: "v", empty: ""}
---
# only a comment: kubectl skips this document
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: three
  namespace: tenant-alice
  annotations:
    quoted: 'it''s'
    double: "tab\there"
    multi: "line one
      line two"
...
"#,
        ),
        (
            "scalars.yaml",
            r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: scalars, namespace: tenant-alice}
spec:
  yes: yes
  no: no
  on: On
  off: OFF
  y: y
  octal: 0755
  hex: 0x1F
  under: 1_000
  float: 1.5
  exp: 1e3
  neg: -7
  str: "0755"
  date: 2001-12-14
  tilde: ~
  nothing: null
  empty:
  bool: True
  list: [1, "1", a, 'b', true]
  nested: {a: {b: {c: [x, {d: e}]}}}
  0x1F: hex-key
  "yes": quoted-key
  dup: first
  dup: last
"#,
        ),
        (
            "list.yaml",
            r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: l1, namespace: tenant-alice}
- apiVersion: gateway.networking.k8s.io/v1
  kind: HTTPRoute
  metadata: {name: l2, namespace: tenant-alice}
  spec: {hostnames: [a.alice.example.org]}
"#,
        ),
        (
            "stream.json",
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j1", "namespace": "tenant-alice"}, "data": {"e": "\u00e9"}}
{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j2", "namespace": "tenant-alice"}}
"#,
        ),
        (
            "no-namespace.yaml",
            r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: defaulted
data:
  a: b
"#,
        ),
    ]
}

/// Each corpus file as written, with CRLF line ends, and with a UTF-8 BOM.
fn variants(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (name, text) in corpus() {
        let plain = dir.join(name);
        std::fs::write(&plain, text).expect("write corpus");
        out.push(plain);
        let crlf = dir.join(format!("crlf-{name}"));
        std::fs::write(&crlf, text.replace('\n', "\r\n")).expect("write corpus");
        out.push(crlf);
        let bom = dir.join(format!("bom-{name}"));
        let mut bytes = vec![0xEF, 0xBB, 0xBF];
        bytes.extend_from_slice(text.as_bytes());
        std::fs::write(&bom, bytes).expect("write corpus");
        out.push(bom);
    }
    out
}

/// Numbers compare by value: kubectl prints 1000 for `1e3`, serde_json keeps 1000.0.
fn normalize(v: &Value) -> Value {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
            _ => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), normalize(v))).collect())
        }
        other => other.clone(),
    }
}

/// kubectl's objects for `file`, one per object (a List is flattened).
fn kubectl_objects(cp: &ControlPlane, file: &Path) -> Vec<Value> {
    let o = cp.kubectl_ok(
        &[
            "create",
            "--dry-run=client",
            "--validate=false",
            "-o",
            "json",
            "-f",
            file.to_str().expect("utf-8 path"),
        ],
        None,
    );
    // One JSON object per created object, one after the other.
    let mut out = Vec::new();
    for v in serde_json::Deserializer::from_str(&o.stdout).into_iter::<Value>() {
        let v = v.expect("kubectl prints JSON");
        if v["kind"] == "List" {
            out.extend(v["items"].as_array().cloned().unwrap_or_default());
        } else {
            out.push(v);
        }
    }
    out
}

/// `check -o json` of `file`: what tenant-gateway read (every object, in order).
fn our_objects(file: &Path) -> Vec<Value> {
    let found =
        tenant_gateway::offline::manifests::read_manifests(&[file.to_path_buf()], false, None)
            .expect("tenant-gateway reads the file");
    found
        .items
        .into_iter()
        .map(|m| m.object.expect("every corpus document parses"))
        .collect()
}

fn tenant_gateway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("tenant-gateway runs")
}

#[test]
fn yaml_parity_merge_key_and_live_context_on_a_real_api_server() {
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    cp.kubectl_ok(&["apply", "-f", "-"], Some(HTTPROUTE_CRD));
    let tenant_crd = repo_root().join("tests/k8s/crds/tenants.apps.cozystack.io.yaml");
    cp.kubectl_ok(&["apply", "-f", tenant_crd.to_str().expect("utf-8")], None);
    cp.kubectl_ok(
        &[
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            "crd",
            "--all",
        ],
        None,
    );
    cp.grant_impersonated_users();
    cp.create_tenant_namespaces();
    let mut failures = Vec::new();

    // --- the corpus: the same objects, field for field ---
    let dir = tempfile::tempdir().expect("tmp");
    let files = variants(dir.path());
    for file in &files {
        let theirs: Vec<Value> = kubectl_objects(&cp, file).iter().map(normalize).collect();
        let mut ours: Vec<Value> = our_objects(file).iter().map(normalize).collect();
        // kubectl create fills in the context's namespace; check evaluates in it too.
        for o in &mut ours {
            if o.pointer("/metadata/namespace").is_none() {
                o["metadata"]["namespace"] = Value::from("default");
            }
        }
        if theirs != ours {
            failures.push(format!(
                "{}: kubectl read\n{}\ntenant-gateway read\n{}",
                file.display(),
                serde_json::to_string_pretty(&theirs).unwrap_or_default(),
                serde_json::to_string_pretty(&ours).unwrap_or_default()
            ));
        }
    }
    assert!(files.len() >= 18, "the corpus ran");

    // --- the merge-key route: denied live and offline ---
    let hook = Webhook::start(&cp);
    hook.register(&cp);
    let merge_key = repo_root().join("examples/httproute-merge-key.yaml");
    let live = cp.kubectl(
        &[
            "create",
            "--dry-run=server",
            "-f",
            merge_key.to_str().expect("utf-8"),
            "--as",
            "alice",
            "--as-group",
            E2E_GROUP,
        ],
        None,
    );
    if live.allowed || !live.stderr.contains("\"admin.example.org\" is not allowed") {
        failures.push(format!(
            "live webhook did not deny the merge-key route: {live:?}"
        ));
    }
    let offline = tenant_gateway(&[
        "check",
        "-f",
        "examples/httproute-merge-key.yaml",
        "--as",
        "alice",
        "--namespaces",
        "examples/namespaces.yaml",
    ]);
    let table = String::from_utf8_lossy(&offline.stdout);
    if offline.status.code() != Some(1)
        || !table.lines().any(|l| {
            l.contains("tenant-alice/merged")
                && l.contains("DENIED")
                && l.contains("\"admin.example.org\" is not allowed")
        })
    {
        failures.push(format!(
            "offline check did not deny the merge-key route: {table}"
        ));
    }

    // --- check --kubeconfig: namespaces and live objects from the cluster ---
    let dave = r#"{"apiVersion":"apps.cozystack.io/v1alpha1","kind":"Tenant","metadata":{"name":"dave","namespace":"tenant-alice"},"spec":{"host":"dave.alice.example.org"}}"#;
    // Created by the admin (system:masters is trusted), so the host is set.
    cp.kubectl_ok(&["apply", "-f", "-"], Some(dave));
    let manifest = dir.path().join("dave.yaml");
    std::fs::write(&manifest, dave).expect("write");
    let kubeconfig = cp.kubeconfig();
    let kc = kubeconfig.to_str().expect("utf-8");
    let m = manifest.to_str().expect("utf-8");
    let routes = dir.path().join("routes.yaml");
    std::fs::write(
        &routes,
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: tenant-bob}\nspec: {hostnames: [shop.bob.example.org]}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r2, namespace: tenant-bob}\nspec: {hostnames: [shop.alice.example.org]}\n",
    )
    .expect("write");
    let r = routes.to_str().expect("utf-8");

    // Unchanged host on an existing Tenant: an UPDATE that keeps it, allowed.
    let update = tenant_gateway(&[
        "check",
        "-f",
        m,
        "--as",
        "alice",
        "--kubeconfig",
        kc,
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&update.stdout).unwrap_or(Value::Null);
    if update.status.code() != Some(0)
        || v["items"][0]["operation"] != "UPDATE"
        || v["items"][0]["verdict"] != "ALLOWED"
    {
        failures.push(format!(
            "live check of an existing Tenant: expected an allowed UPDATE, got {} {}",
            String::from_utf8_lossy(&update.stdout),
            String::from_utf8_lossy(&update.stderr)
        ));
    }
    // --create-only: the same object as a CREATE that sets the host, denied.
    let create = tenant_gateway(&[
        "check",
        "-f",
        m,
        "--as",
        "alice",
        "--kubeconfig",
        kc,
        "--create-only",
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&create.stdout).unwrap_or(Value::Null);
    if create.status.code() != Some(1)
        || v["items"][0]["operation"] != "CREATE"
        || v["items"][0]["verdict"] != "DENIED"
    {
        failures.push(format!(
            "--create-only: expected a denied CREATE, got {}",
            String::from_utf8_lossy(&create.stdout)
        ));
    }
    // Namespaces come from the cluster (no snapshot given): bob's apex is known.
    let ns = tenant_gateway(&["check", "-f", r, "--as", "bob", "--kubeconfig", kc]);
    let table = String::from_utf8_lossy(&ns.stdout);
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or("")
            .to_string()
    };
    if ns.status.code() != Some(1)
        || !line("tenant-bob/r ").contains("ALLOWED")
        || !line("tenant-bob/r2").contains("DENIED")
    {
        failures.push(format!(
            "live namespaces: expected r allowed and r2 denied: {table}{}",
            String::from_utf8_lossy(&ns.stderr)
        ));
    }
    // check never writes: the route it evaluated does not exist afterwards.
    let after = cp.kubectl(&["get", "httproute", "-n", "tenant-bob", "r"], None);
    if after.allowed {
        failures.push("check created an object".to_string());
    }

    drop(hook);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
