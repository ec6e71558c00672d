//! The offline commands as a user runs them: `review`, `check`, `certs`.

use std::io::Write;
use std::process::{Command, Output, Stdio};

mod support;

use serde_json::Value;
use support::review::{EXAMPLE_UID, example};
use tenant_gateway::admission::WebhookResource;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tenant-gateway"))
}

fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = bin()
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("binary finishes")
}

fn review_doc(uid: &str, host: &str) -> String {
    example(uid, host).build().to_string()
}

#[test]
fn the_review_builder_writes_the_example_review() {
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/reviews/httproute-hijack.json"
        ))
        .expect("example review"),
    )
    .expect("json");
    assert_eq!(example(EXAMPLE_UID, "shop.bob.example.org").build(), file);
}

const NS: &[&str] = &[
    "--namespaces",
    "examples/namespaces.yaml",
    "--root-host",
    "example.org",
];

/// `review` over `input` with the example namespaces; it must exit 0.
fn review_ok(input: &str) -> Output {
    let mut args = vec!["review"];
    args.extend_from_slice(NS);
    let out = run(&args, input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn review_single_document_in_single_document_out() {
    let out = review_ok(&review_doc("u-1", "shop.bob.example.org"));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["response"]["uid"], "u-1");
    assert_eq!(v["response"]["allowed"], false);
    assert_eq!(v["response"]["status"]["code"], 403);
    // One line in (it may be a one-line NDJSON stream) is one line out; a document written
    // over several lines comes back pretty, as a document.
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    let pretty = serde_json::to_string_pretty(
        &serde_json::from_str::<Value>(&review_doc("u-2", "shop.bob.example.org")).expect("doc"),
    )
    .expect("pretty");
    let out = review_ok(&pretty);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().count() > 1, "{text}");
    let v: Value = serde_json::from_str(&text).expect("one JSON document");
    assert_eq!(v["response"]["uid"], "u-2");
}

#[test]
fn review_names_the_depth_of_an_object_nested_too_deep() {
    // SPEC §2.1: valid JSON nested deeper than the decoder goes is not "not JSON": a denial
    // that names the depth, from `review` as from the server.
    let mut doc: Value = serde_json::from_str(&review_doc("deep", "shop.alice.example.org"))
        .expect("example review");
    doc["request"]["object"]["spec"]["hostnames"] = Value::String("DEEP".into());
    let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
    let out = review_ok(&doc.to_string().replace("\"DEEP\"", &deep));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["response"]["uid"], "deep");
    assert_eq!(v["response"]["allowed"], false);
    let message = v["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("nested too deep") && message.contains("127 levels"),
        "{message}"
    );
    assert!(!message.contains("not valid JSON"), "{message}");
}

#[test]
fn review_ndjson_in_ndjson_out_line_per_line() {
    let input = format!(
        "{}\n{}\n\n{}\n",
        review_doc("a", "shop.alice.example.org"),
        review_doc("b", "shop.bob.example.org"),
        review_doc("c", "alice.example.org")
    );
    let out = review_ok(&input);
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let got: Vec<(String, bool)> = lines
        .iter()
        .map(|v| {
            (
                v["response"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                v["response"]["allowed"].as_bool().unwrap_or(true),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![("a".into(), true), ("b".into(), false), ("c".into(), true)]
    );
}

#[test]
fn review_refuses_to_start_without_root_host_while_ingress_layer_is_on() {
    // Only an Ingress needs the root host: a route review runs without it.
    let out = run(
        &["review", "--namespaces", "examples/namespaces.yaml"],
        &review_doc("r", "shop.alice.example.org"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ingress = example("i", "x").target(WebhookResource::Ingresses).build();
    let out = run(
        &["review", "--namespaces", "examples/namespaces.yaml"],
        &ingress.to_string(),
    );
    assert_eq!(out.status.code(), Some(2));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("--root-host"), "{text}");
    let out = run(
        &[
            "review",
            "--namespaces",
            "examples/namespaces.yaml",
            "--enforcement",
            "ingress=off",
        ],
        &review_doc("x", "alice.example.org"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn review_of_non_json_exits_2() {
    let mut args = vec!["review"];
    args.extend_from_slice(NS);
    let out = run(&args, "this is not json\n");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn check_prints_one_verdict_per_object_and_exits_1_on_denial() {
    let mut args = vec![
        "check",
        "-f",
        "examples/",
        "--as",
        "alice",
        "--as-group",
        "tenant-alice-admins",
    ];
    args.extend_from_slice(NS);
    let out = run(&args, "");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    // Every manifest under examples/ except the namespace snapshot, one line each.
    let expected = [
        "tenant-alice/web",
        "tenant-alice/hijack",
        "tenant-alice/custom",
        "tenant-alice/merged",
        "tenant-alice/carol",
    ];
    // A header, a line per object, the summary.
    assert_eq!(lines.len(), expected.len() + 2, "{text}");
    assert!(lines[0].starts_with("KIND"), "{text}");
    assert_eq!(
        lines.last().copied(),
        Some("5 objects: 1 allowed, 1 warned, 3 denied, 0 skipped, 0 errors"),
        "{text}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("-R"),
        "the reviews/ subdirectory is mentioned: {stderr}"
    );
    for name in expected {
        assert!(
            lines.iter().any(|l| l.contains(name)),
            "{name} missing: {text}"
        );
    }
    let hijack = lines
        .iter()
        .find(|l| l.contains("/hijack"))
        .expect("hijack line");
    assert!(
        hijack.contains("DENIED") && hijack.contains("shop.bob.example.org"),
        "{hijack}"
    );
    let web = lines.iter().find(|l| l.contains("/web")).expect("web line");
    assert!(web.contains("ALLOWED"), "{web}");
}

#[test]
fn check_json_output_and_exit_0_when_all_allowed() {
    let mut args = vec![
        "check",
        "-f",
        "examples/httproute-allowed.yaml",
        "-o",
        "json",
        "--as",
        "alice",
    ];
    args.extend_from_slice(NS);
    let out = run(&args, "");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json report");
    let items = v["items"].as_array().expect("items");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["allowed"], true);
    assert_eq!(items[0]["verdict"], "ALLOWED");
    assert_eq!(items[0]["kind"], "HTTPRoute");
    assert_eq!(items[0]["namespace"], "tenant-alice");
    assert_eq!(items[0]["name"], "web");
    assert_eq!(
        items[0]["source"]["file"],
        "examples/httproute-allowed.yaml"
    );
    assert_eq!(items[0]["source"]["document"], 1);
    assert_eq!(v["summary"]["objects"], 1);
    assert_eq!(v["summary"]["allowed"], 1);
}

#[test]
fn check_trusted_group_may_set_tenant_host() {
    let mut args = vec![
        "check",
        "-f",
        "examples/tenant-host-change.yaml",
        "--as",
        "flux",
        "--as-group",
        "system:serviceaccounts:cozy-fluxcd",
    ];
    args.extend_from_slice(NS);
    let out = run(&args, "");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn check_reads_stdin_and_reports_bad_input_with_exit_2() {
    let mut args = vec!["check", "-f", "-"];
    args.extend_from_slice(NS);
    let out = run(&args, "kind: [unclosed");
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ERROR") && text.contains("not valid YAML"),
        "{text}"
    );
}

#[test]
fn certs_writes_a_ca_and_serving_pair() {
    let dir = tempfile::tempdir().expect("tmp");
    let out_dir = dir.path().to_str().expect("utf-8");
    let out = run(
        &["certs", "--out", out_dir, "--hosts", "localhost,127.0.0.1"],
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        let text = std::fs::read_to_string(dir.path().join(f)).expect(f);
        assert!(text.contains("-----BEGIN"), "{f}");
    }
}

/// SPEC §9: list entries from the environment are trimmed, and a bad one refuses to start.
/// Seen: TENANT_GATEWAY_GUARDED_LABEL="a, b" silently stopped guarding `b`.
#[test]
fn guarded_label_list_from_the_environment_is_trimmed_and_validated() {
    let run_env = |env: &[(&str, &str)], stdin: &str| {
        let mut cmd = bin();
        cmd.args(["check", "-f", "-", "--as", "mallory", "-o", "json"])
            .args(NS)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("binary starts");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("binary finishes")
    };
    let ns = |label: &str| {
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tenant-new\n  labels:\n    {label}: x\n"
        )
    };
    let env = [(
        "TENANT_GATEWAY_GUARDED_LABEL",
        "example.com/a, example.com/b",
    )];
    for label in ["example.com/a", "example.com/b"] {
        let out = run_env(&env, &ns(label));
        assert_eq!(
            out.status.code(),
            Some(1),
            "{label} must be guarded: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert!(
            v["items"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains(label) && m.contains("is immutable once set")),
            "{v}"
        );
    }
    let out = run_env(&env, &ns("team"));
    assert_eq!(out.status.code(), Some(0), "unguarded labels pass");

    for (var, value, phrase) in [
        (
            "TENANT_GATEWAY_GUARDED_LABEL",
            "example.com/a,example com/b",
            "is not a valid label key",
        ),
        (
            "TENANT_GATEWAY_GUARDED_LABEL",
            "example.com/a,,b",
            "is not a valid label key",
        ),
        (
            "TENANT_GATEWAY_TRUSTED_GROUP",
            "system:masters,ops team",
            "is not a valid group name",
        ),
        (
            "TENANT_GATEWAY_ENFORCEMENT",
            "route=warn, ingress=block",
            "--enforcement",
        ),
    ] {
        let out = run_env(&[(var, value)], &ns("team"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value:?}: {err}");
        assert!(err.contains(phrase), "{var}={value:?}: {err}");
    }
}

fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = bin();
    cmd.args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The table line for `object` (namespace/name).
fn line_of(table: &str, object: &str) -> String {
    table
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(object))
        .unwrap_or_else(|| panic!("no line for {object}: {table}"))
        .to_string()
}

#[test]
fn check_merge_key_route_is_denied_offline() {
    let mut args = vec![
        "check",
        "-f",
        "examples/httproute-merge-key.yaml",
        "--as",
        "alice",
    ];
    args.extend_from_slice(NS);
    let out = run_env(&args, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let line = line_of(&stdout(&out), "tenant-alice/merged");
    assert!(line.contains("DENIED"), "{line}");
    assert!(
        line.contains("\"admin.example.org\" is not allowed"),
        "{line}"
    );
    assert!(line.contains("(alice.example.org)"), "{line}");
}

#[test]
fn check_directory_of_subdirectories_needs_recursive() {
    let dir = tempfile::tempdir().expect("tmp");
    let sub = dir.path().join("charts/web");
    std::fs::create_dir_all(&sub).expect("mkdir");
    std::fs::copy("examples/httproute-allowed.yaml", sub.join("route.yaml")).expect("copy");
    let d = dir.path().to_str().expect("utf-8");
    let mut args = vec!["check", "-f", d];
    args.extend_from_slice(NS);
    let out = run_env(&args, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("no manifest") && err.contains("-R"), "{err}");
    assert!(stdout(&out).is_empty(), "nothing is printed as if checked");

    let mut args = vec!["check", "-R", "-f", d];
    args.extend_from_slice(NS);
    let out = run_env(&args, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).contains("route.yaml#1"), "{}", stdout(&out));

    // An empty directory is no pass either.
    let empty = tempfile::tempdir().expect("tmp");
    let mut args = vec!["check", "-f", empty.path().to_str().expect("utf-8")];
    args.extend_from_slice(NS);
    let out = run_env(&args, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no manifest"), "{}", stderr(&out));
    // Nor is a file of empty documents.
    let mut args = vec!["check", "-f", "-"];
    args.extend_from_slice(NS);
    let out = run(&args, "---\n# nothing\n---\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no object"), "{}", stderr(&out));
}

/// `helm template` output: namespaced objects with no metadata.namespace.
const HELM_TEMPLATE: &str = r#"---
# Source: web/templates/route.yaml
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: release-web
  labels:
    app.kubernetes.io/managed-by: Helm
spec:
  hostnames:
  - shop.bob.example.org
---
# Source: web/templates/ingress.yaml
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: release-web
spec:
  rules:
  - host: shop.bob.example.org
---
# Source: web/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: release-web
spec:
  ports:
  - port: 80
"#;

#[test]
fn check_helm_template_without_namespace_is_skipped_with_a_note() {
    let mut args = vec!["check", "-f", "-", "--as", "alice"];
    args.extend_from_slice(NS);
    let out = run(&args, HELM_TEMPLATE);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let err = stderr(&out);
    assert!(
        err.contains("2 namespaced objects") && err.contains("\"default\"") && err.contains("-n"),
        "{err}"
    );
    let table = stdout(&out);
    for kind in ["HTTPRoute", "Ingress"] {
        let line = table
            .lines()
            .find(|l| l.starts_with(kind))
            .unwrap_or_else(|| panic!("{kind}: {table}"));
        assert!(line.contains("default/release-web"), "{line}");
        assert!(line.contains("SKIPPED"), "{line}");
        assert!(line.contains("outside tenant scope"), "{line}");
        assert!(line.contains("no metadata.namespace"), "{line}");
    }
    let service = table
        .lines()
        .find(|l| l.starts_with("Service"))
        .expect("service line");
    assert!(
        service.contains("SKIPPED") && service.contains("kind not validated"),
        "{service}"
    );
    assert!(
        table.ends_with("3 objects: 0 allowed, 0 warned, 0 denied, 3 skipped, 0 errors\n"),
        "{table}"
    );

    // With -n the same output is checked where it will be installed, and denied.
    let mut args = vec!["check", "-f", "-", "--as", "alice", "-n", "tenant-alice"];
    args.extend_from_slice(NS);
    let out = run(&args, HELM_TEMPLATE);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(line_of(&stdout(&out), "tenant-alice/release-web").contains("DENIED"));
    assert!(
        !stderr(&out).contains("namespaced objects"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_takes_the_kubeconfig_context_namespace() {
    let dir = tempfile::tempdir().expect("tmp");
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: alice\ncontexts:\n- name: alice\n  context: {cluster: c, user: u, namespace: tenant-alice}\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n- name: u\n  user: {}\n",
    )
    .expect("write kubeconfig");
    let mut args = vec!["check", "-f", "-", "--as", "alice"];
    args.extend_from_slice(NS);
    let mut child = bin()
        .args(&args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KUBECONFIG", &kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(HELM_TEMPLATE.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("finishes");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(line_of(&stdout(&out), "tenant-alice/release-web").contains("DENIED"));
    assert!(
        stderr(&out).contains("kubeconfig context alice"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_reports_each_broken_document_once_and_checks_the_rest() {
    let input = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: a, namespace: tenant-alice}\nspec: {hostnames: [a.alice.example.org]}\n---\nkind: [unclosed\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: b, namespace: tenant-alice}\nspec: {hostnames: [b.bob.example.org]}\n";
    let mut args = vec!["check", "-f", "-", "--as", "alice"];
    args.extend_from_slice(NS);
    let out = run(&args, input);
    assert_eq!(out.status.code(), Some(2), "an error wins over a denial");
    let table = stdout(&out);
    assert!(
        line_of(&table, "tenant-alice/a").contains("ALLOWED"),
        "{table}"
    );
    assert!(
        line_of(&table, "tenant-alice/b").contains("DENIED"),
        "{table}"
    );
    let error = table
        .lines()
        .find(|l| l.contains("ERROR"))
        .expect("error line");
    assert!(error.contains("standard input#2"), "{error}");
    let all = format!("{table}{}", stderr(&out));
    assert_eq!(all.matches("unclosed").count(), 1, "printed once: {all}");
    assert!(
        table.ends_with("3 objects: 1 allowed, 0 warned, 1 denied, 0 skipped, 1 error\n"),
        "{table}"
    );
}

#[test]
fn check_needs_root_host_only_for_an_ingress_and_names_it() {
    let out = run_env(
        &[
            "check",
            "-f",
            "examples/httproute-allowed.yaml",
            "--as",
            "alice",
            "--namespaces",
            "examples/namespaces.yaml",
        ],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let out = run_env(
        &[
            "check",
            "-f",
            "examples/ingress-custom-domain.yaml",
            "--as",
            "alice",
            "--namespaces",
            "examples/namespaces.yaml",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let line = line_of(&stdout(&out), "tenant-alice/custom");
    assert!(
        line.contains("ERROR") && line.contains("--root-host"),
        "{line}"
    );
}

#[test]
fn check_flags_read_the_environment() {
    let out = run_env(
        &["check", "-f", "examples/tenant-host-change.yaml"],
        &[
            ("TENANT_GATEWAY_AS", "flux"),
            (
                "TENANT_GATEWAY_AS_GROUP",
                "x,system:serviceaccounts:cozy-fluxcd",
            ),
            ("TENANT_GATEWAY_NAMESPACES", "examples/namespaces.yaml"),
            ("TENANT_GATEWAY_OUTPUT", "json"),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json from TENANT_GATEWAY_OUTPUT");
    assert_eq!(v["items"][0]["verdict"], "ALLOWED");
}

#[test]
fn warn_mode_prints_the_violation_whole() {
    let mut args = vec![
        "check",
        "-f",
        "examples/httproute-hijack.yaml",
        "--as",
        "alice",
        "--enforcement",
        "route=warn",
    ];
    args.extend_from_slice(NS);
    let out = run_env(&args, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "warned counts as allowed: {}",
        stdout(&out)
    );
    let line = line_of(&stdout(&out), "tenant-alice/hijack");
    assert!(line.contains("WARNED"), "{line}");
    assert!(
        line.contains("(alice.example.org)"),
        "whole, with the apex: {line}"
    );
}

#[test]
fn test_command_runs_the_example_suite() {
    let out = run_env(&["test", "examples/suite/"], &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    let last = text.lines().last().expect("summary");
    assert!(last.ends_with("passed, 0 failed"), "{last}");
    // Every layer is exercised, allowed and denied.
    for (kind, verdicts) in [
        ("Gateway", ["ALLOWED", "DENIED"]),
        ("HTTPRoute", ["ALLOWED", "DENIED"]),
        ("TLSRoute", ["ALLOWED", "DENIED"]),
        ("Ingress", ["ALLOWED", "DENIED"]),
        ("Tenant", ["ALLOWED", "DENIED"]),
        ("Namespace", ["ALLOWED", "DENIED"]),
        ("Package", ["ALLOWED", "DENIED"]),
    ] {
        for v in verdicts {
            assert!(
                text.lines().any(|l| l.contains("PASS")
                    && l.contains(&format!(": {kind} "))
                    && l.ends_with(v)),
                "{kind} {v} not covered: {text}"
            );
        }
    }
}

#[test]
fn test_command_fails_on_a_mismatch_and_refuses_a_bad_suite() {
    let dir = tempfile::tempdir().expect("tmp");
    let root = env!("CARGO_MANIFEST_DIR");
    let suite = dir.path().join("suite.yaml");
    std::fs::write(
        &suite,
        format!(
            "namespaces: {root}/examples/namespaces.yaml\nrootHost: example.org\ntests:\n- name: wrong on purpose\n  caller: {{user: alice}}\n  manifests: [{root}/examples/httproute-hijack.yaml]\n  expect:\n  - {{kind: HTTPRoute, name: hijack, verdict: ALLOWED}}\n  - {{kind: HTTPRoute, name: hijack, verdict: DENIED, message: no such text}}\n  - {{kind: HTTPRoute, name: missing, verdict: DENIED}}\n"
        ),
    )
    .expect("write suite");
    let out = run_env(&["test", suite.to_str().expect("utf-8")], &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    assert_eq!(text.matches("FAIL").count(), 3, "{text}");
    assert!(text.contains("expected ALLOWED, got DENIED"), "{text}");
    assert!(text.contains("does not contain \"no such text\""), "{text}");
    assert!(text.contains("no such object"), "{text}");
    assert!(text.trim_end().ends_with("0 passed, 3 failed"), "{text}");

    std::fs::write(&suite, "tests:\n- name: x\n  manifests: []\n  expect: []\n").expect("write");
    let out = run_env(&["test", suite.to_str().expect("utf-8")], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    std::fs::write(&suite, "tests:\n- name: x\n  manifest: [a.yaml]\n").expect("write");
    let out = run_env(&["test", suite.to_str().expect("utf-8")], &[]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "unknown field: {}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("suite"), "{}", stderr(&out));
}

#[test]
fn every_command_exits_quietly_on_a_closed_stdout() {
    let dir = tempfile::tempdir().expect("tmp");
    let certs = dir.path().join("certs");
    let certs_dir = certs.to_str().expect("utf-8");
    let ok = run_env(&["certs", "--out", certs_dir, "--hosts", "localhost"], &[]);
    assert!(ok.status.success());
    let ca = certs.join("ca.crt");
    let review = review_doc("p", "shop.bob.example.org");
    let commands: Vec<(Vec<&str>, &str)> = vec![
        (vec!["crd"], ""),
        (vec!["policies", "--root-host", "example.org"], ""),
        (
            vec![
                "check",
                "-f",
                "examples/",
                "--namespaces",
                "examples/namespaces.yaml",
                "--root-host",
                "example.org",
            ],
            "",
        ),
        (
            vec![
                "check",
                "-o",
                "json",
                "-f",
                "examples/",
                "--namespaces",
                "examples/namespaces.yaml",
                "--root-host",
                "example.org",
            ],
            "",
        ),
        (
            vec!["review", "--namespaces", "examples/namespaces.yaml"],
            review.as_str(),
        ),
        (vec!["test", "examples/suite/"], ""),
        (
            vec![
                "webhook-configuration",
                "--url",
                "https://127.0.0.1:8443",
                "--ca-file",
                ca.to_str().expect("utf-8"),
            ],
            "",
        ),
        (
            vec!["certs", "--out", certs_dir, "--hosts", "localhost"],
            "",
        ),
        (vec!["--help"], ""),
    ];
    for (args, input) in commands {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let mut child = bin()
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::piped())
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts");
        let mut stdin = child.stdin.take().expect("stdin");
        let _ = stdin.write_all(input.as_bytes());
        drop(stdin);
        let out = child.wait_with_output().expect("finishes");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert!(
            !err.contains("Broken pipe") && !err.contains("broken pipe"),
            "{args:?}: {err}"
        );
        assert_ne!(out.status.code(), Some(101), "{args:?}: {err}");
    }
}

#[test]
fn webhook_configuration_refuses_a_key_and_plain_http() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().to_str().expect("utf-8");
    assert!(
        run_env(&["certs", "--out", d, "--hosts", "localhost"], &[])
            .status
            .success()
    );
    let key = dir.path().join("tls.key");
    let ca = dir.path().join("ca.crt");
    let out = run_env(
        &[
            "webhook-configuration",
            "--url",
            "https://127.0.0.1:8443",
            "--ca-file",
            key.to_str().expect("utf-8"),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("CERTIFICATE"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "no configuration with a key in it");
    let out = run_env(
        &[
            "webhook-configuration",
            "--url",
            "http://127.0.0.1:8443",
            "--ca-file",
            ca.to_str().expect("utf-8"),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("https"), "{}", stderr(&out));
    let out = run_env(
        &[
            "webhook-configuration",
            "--ca-file",
            ca.to_str().expect("utf-8"),
        ],
        &[("TENANT_GATEWAY_URL", "https://127.0.0.1:8443")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("PRIVATE"), "{}", stdout(&out));
}

/// SPEC §3.10 offline: `check --routes` with the TenantGateway in the snapshot warns an
/// HTTPRoute that claims an http01 Gateway's passthrough hostname, as the server does; the
/// same TenantGateway in dns01 declares nothing of the kind.
#[test]
fn check_warns_a_route_on_a_passthrough_hostname() {
    let dir = tempfile::tempdir().expect("tmp");
    let route = dir.path().join("route.yaml");
    std::fs::write(
        &route,
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: api-web, namespace: tenant-alice}\nspec:\n  parentRefs: [{name: gw}]\n  hostnames: [api.alice.example.org]\n",
    )
    .expect("write the route");
    let check = |cert_mode: &str| {
        let routes = dir.path().join(format!("routes-{cert_mode}.yaml"));
        std::fs::write(
            &routes,
            format!(
                "apiVersion: gateway.cozystack.io/v1alpha1\nkind: TenantGateway\nmetadata: {{name: gw, namespace: tenant-alice}}\nspec:\n  apex: alice.example.org\n  certMode: {cert_mode}\n  tlsPassthroughServices: [api, vm-exportproxy]\n"
            ),
        )
        .expect("write the snapshot");
        let mut args = vec![
            "check",
            "-o",
            "json",
            "--as",
            "alice",
            "-f",
            route.to_str().expect("utf-8"),
            "--routes",
            routes.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(NS);
        let out = run(&args, "");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).expect("json report");
        v["items"][0].clone()
    };
    let item = check("http01");
    assert_eq!(item["verdict"], "WARNED", "{item}");
    assert_eq!(
        item["warnings"],
        serde_json::json!([
            "PassthroughHostname: api.alice.example.org is passed through by tenant-alice/gw (tls-api); no HTTPS listener for it"
        ]),
        "{item}"
    );
    let item = check("dns01");
    assert_eq!(item["verdict"], "ALLOWED", "{item}");
}

/// What the webhook warns for alice's route given the playground's route snapshot (SPEC §3.4).
const DASHBOARD_CONFLICT: &str = "HostnameConflict: dashboard.alice.example.org is already on tenant-alice/gw from cozy-dashboard, which wins";

#[test]
fn check_and_review_warn_from_a_route_snapshot() {
    let check = |extra: &[&str]| {
        let mut args = vec![
            "check",
            "-f",
            "examples/playground/route-conflict.yaml",
            "-o",
            "json",
            "--as",
            "alice",
        ];
        args.extend_from_slice(NS);
        args.extend_from_slice(extra);
        run(&args, "")
    };
    let out = check(&["--routes", "examples/playground/routes.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json report");
    let item = &v["items"][0];
    assert_eq!(item["verdict"], "WARNED", "{v}");
    assert_eq!(item["allowed"], true);
    assert_eq!(
        item["warnings"],
        serde_json::json!([DASHBOARD_CONFLICT]),
        "{v}"
    );

    // Without the snapshot nothing is known about other routes.
    let out = check(&[]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert_eq!(v["items"][0]["verdict"], "ALLOWED", "{v}");

    // The snapshot beside the manifests is context, not a manifest.
    let mut args = vec![
        "check",
        "-f",
        "examples/playground/",
        "--as",
        "alice",
        "--routes",
        "examples/playground/routes.yaml",
    ];
    args.extend_from_slice(NS);
    let out = run(&args, "");
    let table = stdout(&out);
    assert!(!table.contains("routes.yaml"), "{table}");
    let route = table
        .lines()
        .find(|l| l.starts_with("HTTPRoute ") && l.contains(" tenant-alice/dashboard "))
        .unwrap_or_default();
    assert!(route.contains("WARNED"), "{table}");

    // A file of other objects is an input error naming what it found.
    let out = check(&["--routes", "examples/namespaces.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("examples/namespaces.yaml") && err.contains("expected HTTPRoute or TLSRoute"),
        "{err}"
    );

    // `review` gives the server's response, warning included.
    let mut review: Value =
        serde_json::from_str(&review_doc("u-9", "dashboard.alice.example.org")).expect("json");
    review["request"]["object"]["spec"]["parentRefs"] =
        serde_json::json!([{"name": "gw", "namespace": "tenant-alice"}]);
    let mut args = vec!["review", "--routes", "examples/playground/routes.yaml"];
    args.extend_from_slice(NS);
    let out = run(&args, &review.to_string());
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json response");
    assert_eq!(v["response"]["allowed"], true, "{v}");
    assert_eq!(
        v["response"]["warnings"],
        serde_json::json!([DASHBOARD_CONFLICT]),
        "{v}"
    );
}
