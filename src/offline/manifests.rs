//! Reading what `check` and `test` evaluate: manifests from files, directories or standard
//! input (kubectl's byte-order-mark handling, multi-document YAML, `*List` objects), and
//! what each object names before it is decided: its validated kind ([`target_of`]) and the
//! namespace it lands in ([`namespace_of`], kubectl's defaulting rule).

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::OfflineError;
use crate::admission::WebhookResource;
use crate::cluster::snapshot::flatten_list;
use crate::yaml;

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

    pub(super) fn origin(&self) -> String {
        match self {
            DefaultNamespace::Flag(_) => "from -n".to_string(),
            DefaultNamespace::Context { context, .. } => {
                format!("the namespace of kubeconfig context {context}")
            }
            DefaultNamespace::Default => "no metadata.namespace and no -n".to_string(),
        }
    }
}

/// True when objects of `target` live in a namespace.
pub fn namespaced(target: WebhookResource) -> bool {
    !target.cluster_scoped()
}

/// What `check` needs to know about one object before deciding.
pub(super) struct Identity {
    pub(super) kind: String,
    pub(super) api_version: String,
    pub(super) name: String,
}

pub(super) fn identity(object: &Value) -> Identity {
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
pub fn namespace_of(object: &Value, default: &DefaultNamespace) -> (String, bool) {
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        Some(ns) => (ns.to_string(), false),
        None => (default.name().to_string(), true),
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
