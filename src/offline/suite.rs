//! `tenant-gateway test`: suite files that a platform team keeps beside its charts. Each
//! suite names a namespace snapshot, optional policy settings, and tests: a caller, the
//! manifests it sends, and the verdict expected for each object (with an optional message
//! substring). Every decision comes from [`check::check`], the path `check` uses.
//!
//! ```yaml
//! namespaces: ../namespaces.yaml       # a file (relative to the suite), or a list of Namespaces
//! rootHost: example.org                # optional: policy settings, as the flags of the same name
//! enforcement: [route=deny]
//! guardedLabels: [...]                 # optional, as --guarded-label / --guarded-annotation
//! guardedAnnotations: [...]
//! tests:
//! - name: alice publishes under her apex only
//!   caller: {user: alice, groups: [tenant-alice-admins]}
//!   namespace: tenant-alice            # for objects that name none (optional)
//!   manifests:
//!   - ../httproute-allowed.yaml        # a file or directory, relative to the suite
//!   - object: {apiVersion: v1, kind: Namespace, metadata: {name: x}}   # inline
//!     oldObject: {...}                 # optional: evaluated as an UPDATE of it
//!   expect:
//!   - {kind: HTTPRoute, name: web, verdict: ALLOWED}
//!   - {kind: HTTPRoute, namespace: tenant-alice, name: hijack, verdict: DENIED, message: shop.bob.example.org}
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::check::{self, Caller};
use super::manifests::{self, DefaultNamespace, Manifest, Source};
use super::verdict::{Verdict, VerdictKind};
use crate::admission::Admission;
use crate::cluster::snapshot::string_labels;
use crate::cluster::{NamespaceSource, StaticNamespaces};
use crate::config::PolicyArgs;
use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("{0}: no such file or directory")]
    Missing(String),
    #[error("{0}: no suite file (*.yaml, *.yml) found")]
    Empty(String),
    #[error("suite {file}: {reason}")]
    Bad { file: String, reason: String },
    #[error("cannot write output: {0}")]
    Write(#[from] std::io::Error),
}

impl SuiteError {
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, SuiteError::Write(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SuiteFile {
    #[serde(default)]
    name: Option<String>,
    /// A path, or inline Namespace objects.
    #[serde(default)]
    namespaces: Option<Value>,
    #[serde(default)]
    root_host: Option<String>,
    #[serde(default)]
    tenant_prefix: Option<String>,
    #[serde(default)]
    trusted_groups: Option<Vec<String>>,
    #[serde(default)]
    guarded_labels: Option<Vec<String>>,
    #[serde(default)]
    guarded_annotations: Option<Vec<String>>,
    #[serde(default)]
    enforcement: Option<Vec<String>>,
    tests: Vec<TestCase>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TestCase {
    name: String,
    #[serde(default)]
    caller: CallerSpec,
    #[serde(default)]
    namespace: Option<String>,
    manifests: Vec<ManifestSpec>,
    expect: Vec<Expectation>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallerSpec {
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    groups: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ManifestSpec {
    Path(String),
    Inline {
        object: Value,
        #[serde(default, rename = "oldObject")]
        old_object: Option<Value>,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expectation {
    kind: String,
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    verdict: String,
    /// A substring the verdict's message (or a warning) must contain.
    #[serde(default)]
    message: Option<String>,
}

/// Totals of a run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub passed: usize,
    pub failed: usize,
}

/// The `test` command: [`run`] on stdout; exit 1 when an expectation failed,
/// [`EXIT_USAGE`](super::EXIT_USAGE) when a suite could not be read.
pub async fn run_cmd(
    paths: &[PathBuf],
    quiet: bool,
    defaults: &PolicyArgs,
) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    let code = match run(paths, defaults, quiet, &mut stdout).await {
        Ok(report) => u8::from(report.failed > 0),
        Err(e) if e.is_broken_pipe() => return Ok(ExitCode::SUCCESS),
        Err(e) => {
            let _ = stdout.flush();
            eprintln!("error: {e}");
            super::EXIT_USAGE
        }
    };
    stdout.flush()?;
    Ok(ExitCode::from(code))
}

/// Run every suite under `paths`; write a line per expectation (failures only when `quiet`)
/// and a summary.
pub async fn run(
    paths: &[PathBuf],
    defaults: &PolicyArgs,
    quiet: bool,
    out: &mut dyn Write,
) -> Result<Report, SuiteError> {
    let mut files = Vec::new();
    for p in paths {
        let before = files.len();
        collect(p, &mut files)?;
        if files.len() == before {
            return Err(SuiteError::Empty(p.display().to_string()));
        }
    }
    let mut report = Report::default();
    for f in &files {
        run_file(f, defaults, quiet, out, &mut report).await?;
    }
    writeln!(
        out,
        "{} expectation{} in {} suite file{}: {} passed, {} failed",
        report.passed + report.failed,
        if report.passed + report.failed == 1 {
            ""
        } else {
            "s"
        },
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        report.passed,
        report.failed
    )?;
    Ok(report)
}

fn collect(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), SuiteError> {
    if !p.exists() {
        return Err(SuiteError::Missing(p.display().to_string()));
    }
    if !p.is_dir() {
        out.push(p.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
        .map_err(|e| SuiteError::Bad {
            file: p.display().to_string(),
            reason: e.to_string(),
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in entries {
        if e.is_dir() {
            collect(&e, out)?;
        } else if matches!(e.extension().and_then(|x| x.to_str()), Some("yaml" | "yml"))
            && is_suite(&e)
        {
            out.push(e);
        }
    }
    Ok(())
}

/// In a directory, only files with a top-level `tests:` key are suites; the manifests and
/// snapshots beside them are not.
fn is_suite(p: &Path) -> bool {
    std::fs::read_to_string(p).is_ok_and(|t| t.lines().any(|l| l.starts_with("tests:")))
}

async fn run_file(
    file: &Path,
    defaults: &PolicyArgs,
    quiet: bool,
    out: &mut dyn Write,
    report: &mut Report,
) -> Result<(), SuiteError> {
    let shown = file.display().to_string();
    let bad = |reason: String| SuiteError::Bad {
        file: shown.clone(),
        reason,
    };
    let text = manifests::read_input(Some(file)).map_err(|e| bad(e.to_string()))?;
    let suite: SuiteFile = crate::yaml::from_document(&text).map_err(|e| bad(e.to_string()))?;
    if suite.tests.is_empty() {
        return Err(bad("it has no tests".to_string()));
    }
    let base = file.parent().unwrap_or(Path::new("."));

    let mut args = defaults.clone();
    if let Some(r) = &suite.root_host {
        args.root_host = Some(r.clone());
    }
    if let Some(p) = &suite.tenant_prefix {
        args.tenant_prefix = p.clone();
    }
    if let Some(g) = &suite.trusted_groups {
        args.trusted_groups = g.clone();
    }
    if let Some(l) = &suite.guarded_labels {
        args.guarded_labels = l.clone();
    }
    if let Some(a) = &suite.guarded_annotations {
        args.guarded_annotations = a.clone();
    }
    if let Some(e) = &suite.enforcement {
        args.enforcement = e.clone();
    }
    let cfg = args
        .policy_config_offline()
        .map_err(|e| bad(e.to_string()))?;
    let namespaces = match &suite.namespaces {
        None => match &defaults.namespaces {
            Some(p) => StaticNamespaces::from_file(p).map_err(|e| bad(e.to_string()))?,
            None => StaticNamespaces::default(),
        },
        Some(Value::String(p)) => {
            StaticNamespaces::from_file(&base.join(p)).map_err(|e| bad(e.to_string()))?
        }
        Some(Value::Array(items)) => inline_namespaces(items).map_err(&bad)?,
        Some(_) => {
            return Err(bad(
                "namespaces must be a path or a list of Namespace objects".to_string(),
            ));
        }
    };
    let admission = Admission::new(
        Arc::new(cfg),
        NamespaceSource::Static(Arc::new(namespaces)),
        Metrics::new(),
    );
    let title = suite.name.clone().unwrap_or_else(|| shown.clone());
    if !quiet {
        writeln!(out, "suite {title}")?;
    }
    for test in &suite.tests {
        if test.expect.is_empty() {
            return Err(bad(format!(
                "test {:?} has no expectations: it would pass without checking anything",
                test.name
            )));
        }
        let manifests = load_manifests(base, &shown, test).map_err(&bad)?;
        let caller = Caller {
            username: test
                .caller
                .user
                .clone()
                .unwrap_or_else(|| "test-user".into()),
            groups: test.caller.groups.clone(),
            default_namespace: match &test.namespace {
                Some(n) => DefaultNamespace::Flag(n.clone()),
                None => DefaultNamespace::Default,
            },
        };
        let verdicts = check::check(&admission, &manifests, &caller).await;
        for exp in &test.expect {
            let want = VerdictKind::parse(&exp.verdict).ok_or_else(|| {
                bad(format!(
                    "test {:?}: verdict {:?} is not one of ALLOWED, WARNED, DENIED, SKIPPED, ERROR",
                    test.name, exp.verdict
                ))
            })?;
            let (found, outcome) = judge(exp, want, &verdicts);
            let target = match (found, &exp.namespace) {
                (Some(v), _) => format!("{} {}", v.kind, v.object()),
                (None, Some(ns)) => format!("{} {ns}/{}", exp.kind, exp.name),
                (None, None) => format!("{} {}", exp.kind, exp.name),
            };
            match outcome {
                Ok(()) => {
                    report.passed += 1;
                    if !quiet {
                        writeln!(out, "  PASS  {}: {target} {}", test.name, want.as_str())?;
                    }
                }
                Err(why) => {
                    report.failed += 1;
                    if quiet {
                        writeln!(out, "suite {title}")?;
                    }
                    writeln!(out, "  FAIL  {}: {target}: {why}", test.name)?;
                }
            }
        }
    }
    Ok(())
}

/// The object an expectation is about, and whether it holds (the reason when it does not).
fn judge<'v>(
    exp: &Expectation,
    want: VerdictKind,
    verdicts: &'v [Verdict],
) -> (Option<&'v Verdict>, Result<(), String>) {
    let matching: Vec<&Verdict> = verdicts
        .iter()
        .filter(|v| {
            v.kind == exp.kind
                && v.name == exp.name
                && exp.namespace.as_ref().is_none_or(|ns| &v.namespace == ns)
        })
        .collect();
    let v = match matching.as_slice() {
        [] => {
            let seen: Vec<String> = verdicts
                .iter()
                .map(|v| {
                    if v.kind.is_empty() {
                        format!("ERROR at {}: {}", v.source, v.message)
                    } else {
                        format!("{} {}", v.kind, v.object())
                    }
                })
                .collect();
            return (
                None,
                Err(format!(
                    "no such object among the manifests (found: {})",
                    seen.join(", ")
                )),
            );
        }
        [one] => *one,
        many => {
            return (
                None,
                Err(format!(
                    "{} objects match; add namespace to the expectation",
                    many.len()
                )),
            );
        }
    };
    (Some(v), holds(v, exp, want))
}

fn holds(v: &Verdict, exp: &Expectation, want: VerdictKind) -> Result<(), String> {
    let text = std::iter::once(v.message.as_str())
        .chain(v.warnings.iter().map(String::as_str))
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if v.verdict != want {
        return Err(format!(
            "expected {}, got {}{}",
            want.as_str(),
            v.verdict.as_str(),
            if text.is_empty() {
                String::new()
            } else {
                format!(": {text}")
            }
        ));
    }
    if let Some(sub) = &exp.message
        && !text.contains(sub.as_str())
    {
        return Err(format!(
            "{} as expected, but the message does not contain {sub:?}: {text}",
            want.as_str()
        ));
    }
    Ok(())
}

fn inline_namespaces(items: &[Value]) -> Result<StaticNamespaces, String> {
    let mut out = StaticNamespaces::default();
    for (i, item) in items.iter().enumerate() {
        if item.get("kind").and_then(Value::as_str) != Some("Namespace") {
            return Err(format!("namespaces[{i}] is not a Namespace object"));
        }
        let name = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("namespaces[{i}] has no metadata.name"))?;
        out.insert(name, string_labels(item));
    }
    Ok(out)
}

fn load_manifests(base: &Path, file: &str, test: &TestCase) -> Result<Vec<Manifest>, String> {
    let mut out = Vec::new();
    for (i, spec) in test.manifests.iter().enumerate() {
        match spec {
            ManifestSpec::Path(p) => {
                let found = manifests::read_manifests(&[base.join(p)], true, None)
                    .map_err(|e| format!("test {:?}: {e}", test.name))?;
                out.extend(found.items);
            }
            ManifestSpec::Inline { object, old_object } => out.push(Manifest {
                source: Source {
                    file: format!("{file} tests[{}].manifests", test.name),
                    document: i + 1,
                    item: None,
                },
                object: Ok(object.clone()),
                live: old_object.clone(),
            }),
        }
    }
    if out.is_empty() {
        return Err(format!("test {:?} has no manifests", test.name));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Inline namespaces keep string labels only (as a snapshot file does) and name the
    /// entry that is not a named Namespace.
    #[test]
    fn inline_namespaces_read_like_a_snapshot() {
        let items = [json!({"kind": "Namespace", "metadata": {"name": "tenant-a",
            "labels": {"namespace.cozystack.io/host": "a.example.org", "n": 1, "b": true}}})];
        let ns = inline_namespaces(&items).expect("a Namespace");
        let labels = ns.labels("tenant-a").expect("indexed");
        assert_eq!(labels.len(), 1, "{labels:?}");
        assert_eq!(
            labels
                .get("namespace.cozystack.io/host")
                .map(String::as_str),
            Some("a.example.org")
        );
        assert!(ns.labels("tenant-b").is_none());

        let cases = [
            (
                json!({"kind": "Pod", "metadata": {"name": "p"}}),
                "namespaces[1] is not a Namespace object",
            ),
            (
                json!({"kind": "Namespace", "metadata": {}}),
                "namespaces[1] has no metadata.name",
            ),
        ];
        for (bad, want) in cases {
            let items = [items[0].clone(), bad];
            assert_eq!(inline_namespaces(&items).err().as_deref(), Some(want));
        }
    }
}
