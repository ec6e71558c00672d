//! The offline commands as a user runs them: `review`, `check`, `certs`.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

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
    let mut v: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/reviews/httproute-hijack.json"
        ))
        .expect("example review"),
    )
    .expect("json");
    v["request"]["uid"] = Value::from(uid);
    v["request"]["object"]["spec"]["hostnames"] = serde_json::json!([host]);
    v.to_string()
}

const NS: &[&str] = &[
    "--namespaces",
    "examples/namespaces.yaml",
    "--root-host",
    "example.org",
];

#[test]
fn review_single_document_in_single_document_out() {
    let mut args = vec!["review"];
    args.extend_from_slice(NS);
    let out = run(&args, &review_doc("u-1", "shop.bob.example.org"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["response"]["uid"], "u-1");
    assert_eq!(v["response"]["allowed"], false);
    assert_eq!(v["response"]["status"]["code"], 403);
}

#[test]
fn review_ndjson_in_ndjson_out_line_per_line() {
    let input = format!(
        "{}\n{}\n\n{}\n",
        review_doc("a", "shop.alice.example.org"),
        review_doc("b", "shop.bob.example.org"),
        review_doc("c", "alice.example.org")
    );
    let mut args = vec!["review"];
    args.extend_from_slice(NS);
    let out = run(&args, &input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let out = run(
        &["review", "--namespaces", "examples/namespaces.yaml"],
        "{}",
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--root-host"), "{err}");
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
        "tenant-alice/carol",
    ];
    assert_eq!(lines.len(), expected.len(), "{text}");
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
    let v: Value = serde_json::from_slice(&out.stdout).expect("json array");
    assert_eq!(v.as_array().map(Vec::len), Some(1));
    assert_eq!(v[0]["allowed"], true);
    assert_eq!(v[0]["kind"], "HTTPRoute");
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
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid YAML"));
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
            v[0]["message"]
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
