//! The offline commands: the server's decision path without a server. They adapt input and
//! output only; every decision comes from `Admission`.
//!
//! - `mod.rs`: `review` (AdmissionReview JSON or NDJSON in, responses out) and its command,
//!   the usage exit code every command shares, the errors of
//!   reading and writing, the root-host refusal both `review` and `check` give, and
//!   [`Sources`]: the namespaces and routes decisions read (snapshot files here; the live
//!   cluster in `live.rs`).
//! - `manifests.rs`: reading manifests (files, directories, `-`, lists) and what each
//!   object names: its validated kind and its namespace.
//! - `check.rs`: `check`, each manifest decided as a chosen caller would send it, and the
//!   command's steps: flags → manifests and caller → where namespaces and routes come from →
//!   the Admission → verdicts → output and exit code.
//! - `live.rs`: what `check --kubeconfig/--context` reads from the cluster (read-only).
//! - `verdict.rs`: verdicts, their summary and exit code, the table and JSON output.
//! - `suite.rs`: `test`, suite files of manifests and expected verdicts run through `check`.
//!
//! Rules: nothing here writes to a cluster; a message printed offline says what to do
//! offline (no "retry"); exit codes follow SPEC §4.

pub mod check;
pub mod live;
pub mod manifests;
pub mod suite;
pub mod verdict;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::Value;

use crate::admission::Admission;
use crate::cluster::routes::RouteIndex;
use crate::cluster::{NamespaceSource, StaticNamespaces, route_snapshot};
use crate::config::PolicyArgs;
use crate::metrics::Metrics;
use crate::policy::{Layer, Mode, PolicyConfig};

#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{0}: no such file or directory")]
    Missing(String),
    #[error("{0}")]
    NoManifest(String),
    #[error("input is neither one JSON document nor NDJSON: {0}")]
    NotJson(String),
    #[error("cannot write output: {0}")]
    Write(#[from] std::io::Error),
}

/// True when `e` (or what caused it) is a write to a closed pipe (`| head`): the reader has
/// seen enough, which is not an error worth a message.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<OfflineError>().is_some_and(|o| {
                matches!(o, OfflineError::Write(io) if io.kind() == std::io::ErrorKind::BrokenPipe)
            })
            || c.downcast_ref::<serde_json::Error>()
                .and_then(|j| j.io_error_kind())
                .is_some_and(|k| k == std::io::ErrorKind::BrokenPipe)
    })
}

/// Where decisions read namespaces and routes from.
pub struct Sources {
    pub namespaces: NamespaceSource,
    /// The route index the warnings of SPEC §3.4 read; without one they are not given.
    pub routes: Option<RouteIndex>,
}

impl Sources {
    /// The snapshot files `--namespaces` and `--routes`. Without a namespace snapshot every
    /// namespace counts as missing (fail closed), which stderr says.
    pub fn from_files(policy: &PolicyArgs, routes: Option<&Path>) -> anyhow::Result<Sources> {
        let namespaces = match policy.static_namespaces()? {
            Some(s) => s,
            None => {
                eprintln!(
                    "note: no --namespaces snapshot given; every namespace counts as missing, so tenant-scoped layers deny (fail closed)"
                );
                NamespaceSource::Static(Arc::new(StaticNamespaces::default()))
            }
        };
        let routes = match routes {
            Some(path) => Some(route_snapshot::from_file(path)?),
            None => None,
        };
        Ok(Sources { namespaces, routes })
    }

    /// The decision path of the server, on these sources.
    pub fn admission(self, cfg: PolicyConfig) -> Admission {
        let admission = Admission::new(Arc::new(cfg), self.namespaces, Metrics::new());
        match self.routes {
            Some(routes) => admission.with_routes(Arc::new(routes)),
            None => admission,
        }
    }
}

/// Outcome of `review`: whether any line could not be reviewed at all.
pub struct ReviewSummary {
    pub documents: usize,
    pub unusable: usize,
}

/// The refusal when an Ingress is evaluated without `--root-host`: a usage error, since the
/// server would not start that way.
pub fn root_host_refusal() -> String {
    "an Ingress is evaluated but --root-host (TENANT_GATEWAY_ROOT_HOST) is not set: Ingress \
     hosts are judged against the platform root host. Pass --root-host with the platform \
     apex (e.g. --root-host example.org), or --enforcement ingress=off"
        .to_string()
}

/// An Ingress review that cannot be evaluated for want of a root host.
fn needs_root_host(cfg: &PolicyConfig, doc: &str) -> bool {
    if cfg.root_host.is_some() || cfg.enforcement.mode(Layer::Ingress) == Mode::Off {
        return false;
    }
    serde_json::from_str::<Value>(doc).is_ok_and(|v| {
        v.pointer("/request/resource/resource")
            .and_then(Value::as_str)
            == Some("ingresses")
    })
}

/// Exit code for usage and input errors (`check` uses 1 for "something denied").
pub const EXIT_USAGE: u8 = 2;

/// The `review` command: `file` (or stdin) through the decision path `policy` and `routes`
/// configure; exit [`EXIT_USAGE`] when a document could not be reviewed.
pub async fn review_cmd(
    file: Option<&Path>,
    routes: Option<&Path>,
    policy: &PolicyArgs,
) -> anyhow::Result<ExitCode> {
    let cfg = policy.policy_config_offline()?;
    let admission = Sources::from_files(policy, routes)?.admission(cfg);
    let input = manifests::read_input(file)?;
    let mut stdout = std::io::stdout().lock();
    let summary = review(&admission, &input, &mut stdout).await?;
    stdout.flush()?;
    if summary.unusable > 0 {
        eprintln!(
            "error: {} of {} documents could not be reviewed (see the \"error\" lines)",
            summary.unusable, summary.documents
        );
        return Ok(ExitCode::from(EXIT_USAGE));
    }
    Ok(ExitCode::SUCCESS)
}

/// `review`: one AdmissionReview document in → one response out (pretty JSON, or one line
/// when the document was one line: it may be a one-line NDJSON stream); NDJSON in → NDJSON
/// out, a line per line. Input that is not JSON at all gets the same `{"error": …}`
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
    let refusal = || serde_json::json!({ "error": root_host_refusal() });
    if serde_json::from_str::<Value>(trimmed).is_ok() {
        summary.documents = 1;
        let value = if needs_root_host(admission.config(), trimmed) {
            summary.unusable = 1;
            refusal()
        } else {
            let reply = admission.handle(None, trimmed.as_bytes()).await;
            if reply.status != 200 {
                summary.unusable = 1;
            }
            serde_json::from_slice(&reply.body).unwrap_or(Value::Null)
        };
        if trimmed.contains('\n') {
            serde_json::to_writer_pretty(&mut *out, &value).map_err(std::io::Error::from)?;
        } else {
            serde_json::to_writer(&mut *out, &value).map_err(std::io::Error::from)?;
        }
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
        if needs_root_host(admission.config(), line) {
            summary.unusable += 1;
            any_json = true;
            writeln!(out, "{}", refusal())?;
            continue;
        }
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
