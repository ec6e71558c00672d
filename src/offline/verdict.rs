//! What `check` and `test` print for each object: the [`Verdict`] a decision reads as
//! offline (advice meant for a live caller is reworded), the [`Summary`] with its exit code
//! (SPEC §4), and the table and JSON forms of the output.

use std::io::Write;

use serde::Serialize;

use super::manifests::Source;
use crate::admission::{Decision, DecisionKind};

/// The verdict of one object, as printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum VerdictKind {
    Allowed,
    Warned,
    Denied,
    Skipped,
    Error,
}

impl VerdictKind {
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Allowed => "ALLOWED",
            VerdictKind::Warned => "WARNED",
            VerdictKind::Denied => "DENIED",
            VerdictKind::Skipped => "SKIPPED",
            VerdictKind::Error => "ERROR",
        }
    }

    pub fn parse(s: &str) -> Option<VerdictKind> {
        match s.to_ascii_uppercase().as_str() {
            "ALLOWED" => Some(VerdictKind::Allowed),
            "WARNED" => Some(VerdictKind::Warned),
            "DENIED" => Some(VerdictKind::Denied),
            "SKIPPED" => Some(VerdictKind::Skipped),
            "ERROR" => Some(VerdictKind::Error),
            _ => None,
        }
    }
}

/// One verdict line of `check`.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub kind: String,
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    pub verdict: VerdictKind,
    /// Whether the API server would admit the object (ALLOWED, WARNED, SKIPPED).
    pub allowed: bool,
    /// CREATE, or UPDATE when evaluated against the live object.
    pub operation: &'static str,
    pub layer: Option<String>,
    /// The denial, the warn-mode violation, the reason for SKIPPED or ERROR; whole.
    pub message: String,
    /// Warnings, whole (the API server would show them cut at 120 characters).
    pub warnings: Vec<String>,
    pub source: Source,
}

impl Verdict {
    /// `namespace/name`, or the name of a cluster-scoped object.
    pub fn object(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

/// Advice the webhook gives a live caller that means nothing offline: a snapshot does not
/// change by waiting, and a run of `check` is not a request to retry.
const LIVE_ONLY_ADVICE: [(&str, &str); 2] = [
    (
        " If the namespace is being created, retry in a few seconds.",
        "",
    ),
    (
        " and retry to see the rest",
        " and run again to see the rest",
    ),
];

fn offline_text(message: &str) -> String {
    LIVE_ONLY_ADVICE
        .iter()
        .fold(message.to_string(), |m, (from, to)| m.replace(from, to))
}

pub(super) fn apply_decision(v: &mut Verdict, d: &Decision) {
    v.allowed = d.allowed;
    v.layer = d.layer.map(|l| l.as_str().to_string()).or(v.layer.take());
    v.message = offline_text(d.message.as_deref().unwrap_or_default());
    v.warnings = d.warnings.clone();
    v.verdict = match d.kind {
        DecisionKind::Allowed if d.warnings.is_empty() => VerdictKind::Allowed,
        DecisionKind::Allowed | DecisionKind::Warned => VerdictKind::Warned,
        DecisionKind::Audited => {
            v.message = format!("audit mode, admitted: {}", v.message);
            VerdictKind::Allowed
        }
        DecisionKind::Denied => VerdictKind::Denied,
        DecisionKind::Error => VerdictKind::Error,
    };
    if d.kind == DecisionKind::Warned {
        // The message is the whole violation; the warnings repeat it cut to 120 characters.
        if let Some(layer) = d.layer {
            let prefix = format!("[{layer} warn");
            v.warnings.retain(|w| !w.starts_with(&prefix));
        }
    }
}

/// Counts per verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub objects: usize,
    pub allowed: usize,
    pub warned: usize,
    pub denied: usize,
    pub skipped: usize,
    pub errors: usize,
}

impl Summary {
    pub fn of(verdicts: &[Verdict]) -> Summary {
        let mut s = Summary {
            objects: verdicts.len(),
            ..Summary::default()
        };
        for v in verdicts {
            match v.verdict {
                VerdictKind::Allowed => s.allowed += 1,
                VerdictKind::Warned => s.warned += 1,
                VerdictKind::Denied => s.denied += 1,
                VerdictKind::Skipped => s.skipped += 1,
                VerdictKind::Error => s.errors += 1,
            }
        }
        s
    }

    /// SPEC §4: 2 when anything could not be evaluated (the run is incomplete), else 1 when
    /// something is denied, else 0. WARNED and SKIPPED objects are admitted by the API
    /// server, so they count as allowed.
    pub fn exit_code(&self) -> u8 {
        if self.errors > 0 {
            super::EXIT_USAGE
        } else if self.denied > 0 {
            1
        } else {
            0
        }
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} object{}: {} allowed, {} warned, {} denied, {} skipped, {} error{}",
            self.objects,
            if self.objects == 1 { "" } else { "s" },
            self.allowed,
            self.warned,
            self.denied,
            self.skipped,
            self.errors,
            if self.errors == 1 { "" } else { "s" }
        )
    }
}

/// The message column: the message, then the warnings, all whole.
fn message_column(v: &Verdict) -> String {
    let mut parts: Vec<&str> = Vec::new();
    if !v.message.is_empty() {
        parts.push(&v.message);
    }
    parts.extend(v.warnings.iter().map(String::as_str));
    let text = parts.join("; ");
    if v.verdict == VerdictKind::Warned && v.message.is_empty() {
        format!("warning: {text}")
    } else {
        text
    }
}

/// Human table: a header, one line per object, the summary line.
pub fn print_table(verdicts: &[Verdict], out: &mut dyn Write) -> std::io::Result<()> {
    let rows: Vec<[String; 5]> = verdicts
        .iter()
        .map(|v| {
            [
                if v.kind.is_empty() {
                    "-".to_string()
                } else {
                    v.kind.clone()
                },
                if v.object().is_empty() {
                    "-".to_string()
                } else {
                    v.object()
                },
                v.verdict.as_str().to_string(),
                v.source.to_string(),
                message_column(v),
            ]
        })
        .collect();
    let header = [
        "KIND".to_string(),
        "NAMESPACE/NAME".to_string(),
        "VERDICT".to_string(),
        "SOURCE".to_string(),
        "MESSAGE".to_string(),
    ];
    let mut width = [0usize; 4];
    for row in std::iter::once(&header).chain(rows.iter()) {
        for (w, cell) in width.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(rows.iter()) {
        let line = format!(
            "{:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            w0 = width[0],
            w1 = width[1],
            w2 = width[2],
            w3 = width[3],
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    writeln!(out, "{}", Summary::of(verdicts))?;
    Ok(())
}

/// `-o json`: the same fields as the table, and the summary.
pub fn print_json(verdicts: &[Verdict], out: &mut dyn Write) -> std::io::Result<()> {
    #[derive(Serialize)]
    struct Report<'a> {
        items: &'a [Verdict],
        summary: Summary,
    }
    serde_json::to_writer_pretty(
        &mut *out,
        &Report {
            items: verdicts,
            summary: Summary::of(verdicts),
        },
    )?;
    writeln!(out)
}
