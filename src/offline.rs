//! Offline commands `review` and `check`: the server's decision path without a server.
//! Both adapt input and output only; every decision comes from `Admission`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::admission::{Admission, AdmissionRequest, Decision, DecisionKind, WebhookResource};
use crate::cluster::snapshot::flatten_list;
use crate::policy::{Layer, Mode, PolicyConfig};
use crate::yaml;

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

/// Read all of `path`, or stdin for `-`/`None`, with kubectl's byte-order-mark handling.
pub fn read_input(path: Option<&Path>) -> Result<String, OfflineError> {
    let (name, bytes) = match path {
        None => ("standard input".to_string(), read_stdin()?),
        Some(p) if p == Path::new("-") => ("standard input".to_string(), read_stdin()?),
        Some(p) => (
            p.display().to_string(),
            std::fs::read(p).map_err(|e| OfflineError::Read {
                path: p.display().to_string(),
                reason: e.to_string(),
            })?,
        ),
    };
    yaml::decode(bytes).map_err(|e| OfflineError::Read {
        path: name,
        reason: e.to_string(),
    })
}

fn read_stdin() -> Result<Vec<u8>, OfflineError> {
    let mut s = Vec::new();
    std::io::stdin()
        .read_to_end(&mut s)
        .map_err(|e| OfflineError::Read {
            path: "standard input".to_string(),
            reason: e.to_string(),
        })?;
    Ok(s)
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

/// Where an object came from: file and 1-based document number (and list item).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    pub file: String,
    pub document: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<usize>,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.file, self.document)?;
        if let Some(i) = self.item {
            write!(f, ".items[{i}]")?;
        }
        Ok(())
    }
}

/// One object read by `check`, or the document that could not be read.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub source: Source,
    pub object: Result<Value, String>,
    /// The object as it is in the cluster, when `check` reads one: evaluated as an UPDATE.
    pub live: Option<Value>,
}

/// What `read_manifests` found, with notes for stderr (skipped subdirectories).
#[derive(Debug, Default)]
pub struct Manifests {
    pub items: Vec<Manifest>,
    pub notes: Vec<String>,
}

/// Read manifests from files, a directory (its *.yaml, *.yml, *.json files, sorted; with
/// `recursive` its subdirectories too), or `-`. Files equal to `skip` (the namespace snapshot)
/// are context, not input. Finding nothing to check is an error that says why.
pub fn read_manifests(
    paths: &[PathBuf],
    recursive: bool,
    skip: Option<&Path>,
) -> Result<Manifests, OfflineError> {
    read_manifests_skipping(paths, recursive, skip.as_slice())
}

/// [`read_manifests`] with several context files (`--namespaces`, `--routes`) left out.
pub fn read_manifests_skipping(
    paths: &[PathBuf],
    recursive: bool,
    skip: &[&Path],
) -> Result<Manifests, OfflineError> {
    let skip: Vec<PathBuf> = skip
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    let mut out = Manifests::default();
    for p in paths {
        let mut found = Found::default();
        collect_files(p, recursive, &mut found)?;
        found.files.retain(|f| {
            f == Path::new("-")
                || std::fs::canonicalize(f)
                    .ok()
                    .is_none_or(|c| !skip.contains(&c))
        });
        if found.files.is_empty() {
            return Err(OfflineError::NoManifest(no_manifest_reason(p, &found)));
        }
        if found.skipped_dirs > 0 {
            out.notes.push(format!(
                "note: {}: {} subdirector{} not read (use -R to read them)",
                p.display(),
                found.skipped_dirs,
                if found.skipped_dirs == 1 { "y" } else { "ies" }
            ));
        }
        for f in found.files {
            read_file(&f, &mut out.items);
        }
    }
    if out.items.is_empty() {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(OfflineError::NoManifest(format!(
            "no object to check in {}: every document is empty",
            names.join(", ")
        )));
    }
    Ok(out)
}

fn no_manifest_reason(p: &Path, found: &Found) -> String {
    let what = format!(
        "{}: no manifest (*.yaml, *.yml, *.json) found, nothing was checked",
        p.display()
    );
    if found.skipped_dirs > 0 {
        format!(
            "{what}; it has {} subdirector{}, which are read only with -R (--recursive)",
            found.skipped_dirs,
            if found.skipped_dirs == 1 { "y" } else { "ies" }
        )
    } else if found.dirs_read > 0 {
        format!("{what} (the directory and its subdirectories are empty)")
    } else {
        what
    }
}

/// Read one file into manifests: a document that cannot be read is an error entry of its own.
fn read_file(f: &Path, out: &mut Vec<Manifest>) {
    let file = if f == Path::new("-") {
        "standard input".to_string()
    } else {
        f.display().to_string()
    };
    let text = match read_input(Some(f)) {
        Ok(t) => t,
        Err(e) => {
            out.push(Manifest {
                source: Source {
                    file,
                    document: 0,
                    item: None,
                },
                object: Err(e.to_string()),
                live: None,
            });
            return;
        }
    };
    for doc in yaml::read_documents(&text) {
        match doc.value {
            Err(e) => out.push(Manifest {
                source: Source {
                    file: file.clone(),
                    document: doc.index,
                    item: None,
                },
                object: Err(format!(
                    "document {} is not valid YAML/JSON: {e}",
                    doc.index
                )),
                live: None,
            }),
            Ok(value) => {
                let is_list = is_list(&value);
                for (i, object) in flatten_list(value).into_iter().enumerate() {
                    out.push(Manifest {
                        source: Source {
                            file: file.clone(),
                            document: doc.index,
                            item: is_list.then_some(i),
                        },
                        object: Ok(object),
                        live: None,
                    });
                }
            }
        }
    }
}

fn is_list(v: &Value) -> bool {
    v.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && v.get("items").is_some_and(Value::is_array)
}

#[derive(Default)]
struct Found {
    files: Vec<PathBuf>,
    skipped_dirs: usize,
    dirs_read: usize,
}

fn collect_files(p: &Path, recursive: bool, out: &mut Found) -> Result<(), OfflineError> {
    if p == Path::new("-") {
        out.files.push(p.to_path_buf());
        return Ok(());
    }
    if !p.exists() {
        return Err(OfflineError::Missing(p.display().to_string()));
    }
    if !p.is_dir() {
        out.files.push(p.to_path_buf());
        return Ok(());
    }
    out.dirs_read += 1;
    let entries = std::fs::read_dir(p).map_err(|e| OfflineError::Read {
        path: p.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            if recursive {
                collect_files(&path, recursive, out)?;
            } else {
                out.skipped_dirs += 1;
            }
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.files.push(path);
        }
    }
    Ok(())
}

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

/// Where the namespace of objects that name none comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultNamespace {
    /// `-n`.
    Flag(String),
    /// The kubeconfig context's namespace.
    Context { context: String, namespace: String },
    /// Nothing named one: kubectl's `default`.
    Default,
}

impl DefaultNamespace {
    pub fn name(&self) -> &str {
        match self {
            DefaultNamespace::Flag(n) => n,
            DefaultNamespace::Context { namespace, .. } => namespace,
            DefaultNamespace::Default => "default",
        }
    }

    fn origin(&self) -> String {
        match self {
            DefaultNamespace::Flag(_) => "from -n".to_string(),
            DefaultNamespace::Context { context, .. } => {
                format!("the namespace of kubeconfig context {context}")
            }
            DefaultNamespace::Default => "no metadata.namespace and no -n".to_string(),
        }
    }
}

/// Who `check` pretends to be.
#[derive(Debug, Clone)]
pub struct Caller {
    pub username: String,
    pub groups: Vec<String>,
    /// Namespace for namespaced objects that name none (kubectl's rule).
    pub default_namespace: DefaultNamespace,
}

/// True when objects of `target` live in a namespace.
pub fn namespaced(target: WebhookResource) -> bool {
    !target.cluster_scoped()
}

/// What `check` needs to know about one object before deciding.
struct Identity {
    kind: String,
    api_version: String,
    name: String,
}

fn identity(object: &Value) -> Identity {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut name = s("/metadata/name");
    if name.is_empty() {
        name = s("/metadata/generateName");
    }
    Identity {
        kind: s("/kind"),
        api_version: s("/apiVersion"),
        name,
    }
}

/// The namespace `check` evaluates a namespaced object in, and whether it was defaulted.
pub fn namespace_of(object: &Value, caller: &Caller) -> (String, bool) {
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        Some(ns) => (ns.to_string(), false),
        None => (caller.default_namespace.name().to_string(), true),
    }
}

/// The validated kind an object is, if any.
pub fn target_of(object: &Value) -> Option<WebhookResource> {
    let id = identity(object);
    let group = id
        .api_version
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or("");
    WebhookResource::from_group_kind(group, &id.kind)
}

/// Namespaced objects among `manifests` that name no namespace (for the stderr note).
pub fn unnamespaced(manifests: &[Manifest]) -> usize {
    manifests
        .iter()
        .filter(|m| match &m.object {
            Ok(o) => {
                target_of(o).is_some_and(|t| !t.cluster_scoped())
                    && o.pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
            }
            Err(_) => false,
        })
        .count()
}

/// The stderr note for objects evaluated in a namespace they do not name.
pub fn unnamespaced_note(count: usize, caller: &Caller, cfg: &PolicyConfig) -> Option<String> {
    // With -n the user said where they go: nothing to point out.
    if count == 0 || matches!(caller.default_namespace, DefaultNamespace::Flag(_)) {
        return None;
    }
    let ns = caller.default_namespace.name();
    let scope = if cfg.in_tenant_scope(ns) {
        String::new()
    } else {
        format!(
            ", which is outside tenant scope ({}*): their hostname layers do not run there (SKIPPED)",
            cfg.tenant_prefix
        )
    };
    let (objects, name) = if count == 1 {
        ("object", "names")
    } else {
        ("objects", "name")
    };
    let how = match &caller.default_namespace {
        DefaultNamespace::Default => format!(
            "{name} no metadata.namespace and no -n was given (as in `helm template` output without -n)"
        ),
        other => format!("{name} no metadata.namespace; {}", other.origin()),
    };
    Some(format!(
        "note: {count} namespaced {objects} {how}: evaluated in namespace {ns:?} as kubectl would create them{scope}. Pass -n NAMESPACE to check them where they will be installed"
    ))
}

/// `check`: evaluate every manifest as a CREATE by `caller` (an UPDATE when the live object
/// is known).
pub async fn check(admission: &Admission, manifests: &[Manifest], caller: &Caller) -> Vec<Verdict> {
    let mut verdicts = Vec::with_capacity(manifests.len());
    for (i, m) in manifests.iter().enumerate() {
        verdicts.push(check_one(admission, i, m, caller).await);
    }
    verdicts
}

async fn check_one(admission: &Admission, i: usize, m: &Manifest, caller: &Caller) -> Verdict {
    let cfg = admission.config();
    let mut v = Verdict {
        kind: String::new(),
        api_version: String::new(),
        namespace: String::new(),
        name: String::new(),
        verdict: VerdictKind::Error,
        allowed: false,
        operation: if m.live.is_some() { "UPDATE" } else { "CREATE" },
        layer: None,
        message: String::new(),
        warnings: Vec::new(),
        source: m.source.clone(),
    };
    let object = match &m.object {
        Ok(o) => o,
        Err(e) => {
            v.message = e.clone();
            return v;
        }
    };
    let id = identity(object);
    v.kind = id.kind.clone();
    v.api_version = id.api_version.clone();
    v.name = id.name.clone();
    if !object.is_object() || id.kind.is_empty() || id.api_version.is_empty() {
        v.message = "not a Kubernetes object: apiVersion and kind are required".to_string();
        return v;
    }
    let Some(target) = target_of(object) else {
        v.namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        v.verdict = VerdictKind::Skipped;
        v.allowed = true;
        v.message = format!(
            "kind not validated: tenant-gateway has no layer for {} ({})",
            id.kind, id.api_version
        );
        return v;
    };
    let layer = target.layer();
    v.layer = Some(layer.as_str().to_string());
    let (namespace, defaulted) = if target.cluster_scoped() {
        (None, false)
    } else {
        let (ns, d) = namespace_of(object, caller);
        (Some(ns), d)
    };
    v.namespace = namespace.clone().unwrap_or_default();
    if layer == Layer::Ingress
        && cfg.root_host.is_none()
        && cfg.enforcement.mode(Layer::Ingress) != Mode::Off
        && cfg.in_tenant_scope(&v.namespace)
    {
        v.message = root_host_refusal();
        return v;
    }

    // Serializing a Value cannot fail (its keys are strings); if it ever did, the request
    // would carry no object and be denied, never admitted.
    let raw = serde_json::value::to_raw_value(object).ok();
    let old_raw = m
        .live
        .as_ref()
        .and_then(|o| serde_json::value::to_raw_value(o).ok());
    let null = serde_json::value::RawValue::NULL;
    let mut request = AdmissionRequest::create_for(
        format!("check-{i}"),
        target,
        &id.api_version,
        namespace.clone(),
        raw.as_deref().unwrap_or(null),
        caller.username.clone(),
        caller.groups.clone(),
    );
    if let Some(old) = old_raw.as_deref() {
        request = request.into_update(old);
    }
    let (decision, _) = admission.decide(Some(target), &request).await;
    apply_decision(&mut v, &decision);
    if v.verdict == VerdictKind::Allowed
        && layer.tenant_scoped()
        && !cfg.in_tenant_scope(&v.namespace)
    {
        v.verdict = VerdictKind::Skipped;
        v.message = if defaulted {
            format!(
                "evaluated in namespace {} ({}), which is outside tenant scope ({}*): the {layer} layer checks tenant namespaces only; pass -n to check it where it will be installed",
                v.namespace,
                caller.default_namespace.origin(),
                cfg.tenant_prefix
            )
        } else {
            format!(
                "namespace {} is outside tenant scope ({}*): the {layer} layer checks tenant namespaces only",
                v.namespace, cfg.tenant_prefix
            )
        };
    }
    v
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

fn apply_decision(v: &mut Verdict, d: &Decision) {
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
            2
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::cluster::{NamespaceSource, StaticNamespaces};
    use crate::metrics::Metrics;

    fn admission() -> Admission {
        let cfg = PolicyConfig {
            root_host: Some("example.org".to_string()),
            ..PolicyConfig::default()
        };
        let mut ns = StaticNamespaces::default();
        ns.insert(
            "tenant-alice",
            [(
                crate::policy::HOST_LABEL.to_string(),
                "alice.example.org".to_string(),
            )]
            .into(),
        );
        Admission::new(
            Arc::new(cfg),
            NamespaceSource::Static(Arc::new(ns)),
            Metrics::new(),
        )
    }

    fn manifest(object: Value) -> Manifest {
        Manifest {
            source: Source {
                file: "t.yaml".into(),
                document: 1,
                item: None,
            },
            object: Ok(object),
            live: None,
        }
    }

    fn caller() -> Caller {
        Caller {
            username: "alice".into(),
            groups: vec![],
            default_namespace: DefaultNamespace::Default,
        }
    }

    #[tokio::test]
    async fn offline_denials_do_not_say_retry() {
        let many: Vec<String> = (0..80).map(|i| format!("h{i}.bob.example.org")).collect();
        let objects = [
            // Namespace not in the snapshot: the live webhook suggests retrying.
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                   "metadata": {"name": "r", "namespace": "tenant-new"},
                   "spec": {"hostnames": ["a.example.org"]}}),
            // More problems than are listed.
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                   "metadata": {"name": "r", "namespace": "tenant-alice"},
                   "spec": {"hostnames": many}}),
        ];
        let a = admission();
        for o in objects {
            let v = check(&a, &[manifest(o)], &caller()).await;
            assert_eq!(v[0].verdict, VerdictKind::Denied, "{v:?}");
            assert!(!v[0].message.contains("retry"), "{}", v[0].message);
            assert!(
                v[0].message.contains("namespace.cozystack.io/host")
                    || v[0].message.contains("run again to see the rest"),
                "{}",
                v[0].message
            );
        }
    }

    #[tokio::test]
    async fn verdicts_for_each_kind_of_outcome() {
        let a = admission();
        let route = |ns: Option<&str>| {
            let mut o = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                               "metadata": {"name": "r"}, "spec": {"hostnames": ["x.example.org"]}});
            if let Some(ns) = ns {
                o["metadata"]["namespace"] = json!(ns);
            }
            o
        };
        let ms = vec![
            manifest(route(None)),
            manifest(route(Some("cozy-dashboard"))),
            manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})),
            manifest(json!({"metadata": {"name": "nokind"}})),
            Manifest {
                object: Err("document 2 is not valid YAML/JSON: bad".into()),
                ..manifest(json!(null))
            },
        ];
        let v = check(&a, &ms, &caller()).await;
        let kinds: Vec<VerdictKind> = v.iter().map(|v| v.verdict).collect();
        assert_eq!(
            kinds,
            vec![
                VerdictKind::Skipped,
                VerdictKind::Skipped,
                VerdictKind::Skipped,
                VerdictKind::Error,
                VerdictKind::Error
            ]
        );
        assert!(
            v[0].message.contains("no metadata.namespace"),
            "{}",
            v[0].message
        );
        assert_eq!(v[0].namespace, "default");
        assert!(
            !v[1].message.contains("no metadata.namespace"),
            "{}",
            v[1].message
        );
        let s = Summary::of(&v);
        assert_eq!(
            s.to_string(),
            "5 objects: 0 allowed, 0 warned, 0 denied, 3 skipped, 2 errors"
        );
        assert_eq!(s.exit_code(), 2);
        assert_eq!(
            Summary {
                denied: 1,
                ..Summary::default()
            }
            .exit_code(),
            1
        );
        assert_eq!(
            Summary {
                warned: 1,
                skipped: 1,
                ..Summary::default()
            }
            .exit_code(),
            0
        );
    }
}
