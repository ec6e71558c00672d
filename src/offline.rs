//! Offline commands `review` and `check`: the server's decision path without a server.
//! Both adapt input and output only; every decision comes from `Admission`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::admission::{Admission, AdmissionRequest, Decision, WebhookResource};
use crate::cluster::namespaces::flatten_list;

#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not valid YAML/JSON: {source}")]
    Parse {
        path: String,
        source: serde_yaml::Error,
    },
    #[error("input is neither one JSON document nor NDJSON: {0}")]
    NotJson(String),
    #[error("cannot write output: {0}")]
    Write(#[from] std::io::Error),
}

/// Read all of `path`, or stdin for `-`/`None`.
pub fn read_input(path: Option<&Path>) -> Result<String, OfflineError> {
    match path {
        None => read_stdin(),
        Some(p) if p == Path::new("-") => read_stdin(),
        Some(p) => std::fs::read_to_string(p).map_err(|source| OfflineError::Read {
            path: p.display().to_string(),
            source,
        }),
    }
}

fn read_stdin() -> Result<String, OfflineError> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .map_err(|source| OfflineError::Read {
            path: "standard input".to_string(),
            source,
        })?;
    Ok(s)
}

/// Outcome of `review`: whether any line could not be reviewed at all.
pub struct ReviewSummary {
    pub documents: usize,
    pub unusable: usize,
}

/// `review`: one AdmissionReview document in → one response out (pretty JSON); NDJSON in →
/// NDJSON out, a line per line. Input that is not JSON at all gets the same `{"error": …}`
/// body the server answers with HTTP 400.
pub async fn review(
    admission: &Admission,
    input: &str,
    out: &mut dyn Write,
) -> Result<ReviewSummary, OfflineError> {
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Err(OfflineError::NotJson("the input is empty".to_string()));
    }
    let mut summary = ReviewSummary {
        documents: 0,
        unusable: 0,
    };
    if serde_json::from_str::<Value>(trimmed).is_ok() {
        let reply = admission.handle(None, trimmed.as_bytes()).await;
        summary.documents = 1;
        if reply.status != 200 {
            summary.unusable = 1;
        }
        let value: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
        serde_json::to_writer_pretty(&mut *out, &value).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(summary);
    }
    // NDJSON: every non-empty line is a document.
    let mut any_json = false;
    let mut first_error = None;
    for line in input.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        summary.documents += 1;
        let reply = admission.handle(None, line.as_bytes()).await;
        if reply.status == 200 {
            any_json = true;
        } else {
            summary.unusable += 1;
            if first_error.is_none() {
                first_error = Some(String::from_utf8_lossy(&reply.body).into_owned());
            }
        }
        out.write_all(&reply.body)?;
        writeln!(out)?;
    }
    if !any_json {
        return Err(OfflineError::NotJson(first_error.unwrap_or_default()));
    }
    Ok(summary)
}

/// One object read by `check`.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub source: String,
    pub object: Value,
}

/// Read manifests from files, a directory (its *.yaml, *.yml, *.json files, sorted), or `-`.
/// Files equal to `skip` (the namespace snapshot) are context, not input.
pub fn read_manifests(
    paths: &[PathBuf],
    recursive: bool,
    skip: Option<&Path>,
) -> Result<Vec<Manifest>, OfflineError> {
    let skip = skip.and_then(|p| std::fs::canonicalize(p).ok());
    let mut files = Vec::new();
    for p in paths {
        collect_files(p, recursive, &mut files)?;
    }
    let mut out = Vec::new();
    for f in files {
        if f != Path::new("-") && skip.is_some() && std::fs::canonicalize(&f).ok() == skip {
            continue;
        }
        let text = read_input(Some(&f))?;
        let origin = if f == Path::new("-") {
            "standard input".to_string()
        } else {
            f.display().to_string()
        };
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value: Value =
                serde::Deserialize::deserialize(doc).map_err(|source| OfflineError::Parse {
                    path: origin.clone(),
                    source,
                })?;
            for object in flatten_list(value) {
                out.push(Manifest {
                    source: origin.clone(),
                    object,
                });
            }
        }
    }
    Ok(out)
}

fn collect_files(p: &Path, recursive: bool, out: &mut Vec<PathBuf>) -> Result<(), OfflineError> {
    if p == Path::new("-") || !p.is_dir() {
        out.push(p.to_path_buf());
        return Ok(());
    }
    let entries = std::fs::read_dir(p).map_err(|source| OfflineError::Read {
        path: p.display().to_string(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            if recursive {
                collect_files(&path, recursive, out)?;
            }
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
    Ok(())
}

/// One verdict line of `check`.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub kind: String,
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    pub allowed: bool,
    /// allowed, denied, warned, audited, error, or skipped (a kind no layer checks).
    pub decision: String,
    pub layer: Option<String>,
    pub message: String,
    pub warnings: Vec<String>,
    pub source: String,
}

/// Who `check` pretends to be.
#[derive(Debug, Clone)]
pub struct Caller {
    pub username: String,
    pub groups: Vec<String>,
    /// Namespace for namespaced objects that name none (kubectl's default).
    pub default_namespace: String,
}

/// Cluster-scoped kinds among those we check.
fn cluster_scoped(target: WebhookResource) -> bool {
    matches!(
        target,
        WebhookResource::Namespaces | WebhookResource::Packages
    )
}

/// `check`: evaluate every manifest as a CREATE by `caller`.
pub async fn check(admission: &Admission, manifests: &[Manifest], caller: &Caller) -> Vec<Verdict> {
    let mut verdicts = Vec::with_capacity(manifests.len());
    for (i, m) in manifests.iter().enumerate() {
        let api_version = m
            .object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let kind = m
            .object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let name = m
            .object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let Some(target) = WebhookResource::from_group_kind(group, &kind) else {
            let message = if kind.is_empty() || api_version.is_empty() {
                "not a Kubernetes object: apiVersion and kind are required".to_string()
            } else {
                format!("{kind} ({api_version}) is not validated by tenant-gateway")
            };
            let bad = kind.is_empty() || api_version.is_empty();
            verdicts.push(Verdict {
                kind,
                api_version,
                namespace: String::new(),
                name,
                allowed: !bad,
                decision: if bad { "error" } else { "skipped" }.to_string(),
                layer: None,
                message,
                warnings: Vec::new(),
                source: m.source.clone(),
            });
            continue;
        };
        let namespace = if cluster_scoped(target) {
            None
        } else {
            Some(
                m.object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(&caller.default_namespace)
                    .to_string(),
            )
        };
        // Serializing a Value cannot fail (its keys are strings); if it ever did, the request
        // would carry no object and be denied, never admitted.
        let raw = serde_json::value::to_raw_value(&m.object).ok();
        let null = serde_json::value::RawValue::NULL;
        let request = AdmissionRequest::create_for(
            format!("check-{i}"),
            target,
            &api_version,
            namespace.clone(),
            raw.as_deref().unwrap_or(null),
            caller.username.clone(),
            caller.groups.clone(),
        );
        let (decision, _) = admission.decide(Some(target), &request).await;
        verdicts.push(verdict_from(
            kind,
            api_version,
            namespace.unwrap_or_default(),
            name,
            &decision,
            &m.source,
        ));
    }
    verdicts
}

fn verdict_from(
    kind: String,
    api_version: String,
    namespace: String,
    name: String,
    d: &Decision,
    source: &str,
) -> Verdict {
    Verdict {
        kind,
        api_version,
        namespace,
        name,
        allowed: d.allowed,
        decision: d.kind.as_str().to_string(),
        layer: d.layer.map(|l| l.as_str().to_string()),
        message: d.message.clone().unwrap_or_default(),
        warnings: d.warnings.clone(),
        source: source.to_string(),
    }
}

/// Human table: one line per object.
pub fn print_table(verdicts: &[Verdict], out: &mut dyn Write) -> std::io::Result<()> {
    for v in verdicts {
        let object = if v.namespace.is_empty() {
            v.name.clone()
        } else {
            format!("{}/{}", v.namespace, v.name)
        };
        let verdict = if v.allowed { "ALLOWED" } else { "DENIED" };
        let mut message = v.message.clone();
        if v.allowed && !v.warnings.is_empty() {
            message = format!("warning: {}", v.warnings.join("; "));
        } else if v.allowed && v.decision == "allowed" {
            message.clear();
        }
        if v.decision == "audited" {
            message = format!("audit: {message}");
        }
        writeln!(
            out,
            "{:<14} {:<40} {:<8} {}",
            v.kind, object, verdict, message
        )?;
    }
    Ok(())
}
