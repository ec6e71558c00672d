//! Namespace context for the admission layers: either a static snapshot (`--namespaces FILE`)
//! or a metadata-only watch of the cluster with a live GET on a miss.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use serde::Deserialize;
use serde_json::Value;

use crate::metrics::Metrics;
use crate::policy::NamespaceContext;
use crate::server::health::Readiness;

/// How long the live GET on an index miss may take before the request is denied with
/// "retry": well inside the API server's 5 s webhook timeout.
pub const LIVE_GET_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the API server returned an error: {0}")]
    Api(#[from] kube::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot read namespace snapshot {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("namespace snapshot {path} is not valid YAML/JSON: {source}")]
    Parse {
        path: String,
        source: serde_yaml::Error,
    },
    #[error(
        "namespace snapshot {path}: document {index} is a {kind:?}, expected Namespace objects (as printed by `kubectl get ns -o yaml`)"
    )]
    NotNamespace {
        path: String,
        index: usize,
        kind: String,
    },
    #[error("namespace snapshot {path}: document {index} has no metadata.name")]
    Unnamed { path: String, index: usize },
}

/// Where namespace labels come from.
#[derive(Clone)]
pub enum NamespaceSource {
    Static(Arc<StaticNamespaces>),
    Live(Arc<LiveNamespaces>),
}

impl NamespaceSource {
    pub async fn lookup(&self, name: &str) -> Result<NamespaceContext, LookupError> {
        match self {
            NamespaceSource::Static(s) => Ok(s.lookup(name)),
            NamespaceSource::Live(l) => l.lookup(name).await,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            NamespaceSource::Static(s) => s.by_name.len(),
            NamespaceSource::Live(l) => l.store.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Namespaces read once from a file; nothing changes at run time.
#[derive(Debug, Default, Clone)]
pub struct StaticNamespaces {
    by_name: HashMap<String, BTreeMap<String, String>>,
}

impl StaticNamespaces {
    pub fn from_file(path: &Path) -> Result<StaticNamespaces, SnapshotError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| SnapshotError::Read {
            path: p.clone(),
            source,
        })?;
        StaticNamespaces::from_yaml(&text, &p)
    }

    /// Accepts a `kind: List` / `NamespaceList`, multi-document YAML, or JSON.
    pub fn from_yaml(text: &str, origin: &str) -> Result<StaticNamespaces, SnapshotError> {
        let mut out = StaticNamespaces::default();
        let mut index = 0usize;
        for doc in serde_yaml::Deserializer::from_str(text) {
            let value = Value::deserialize(doc).map_err(|source| SnapshotError::Parse {
                path: origin.to_string(),
                source,
            })?;
            for item in flatten_list(value) {
                index += 1;
                out.add(item, origin, index)?;
            }
        }
        Ok(out)
    }

    fn add(&mut self, item: Value, origin: &str, index: usize) -> Result<(), SnapshotError> {
        let kind = item.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind != "Namespace" {
            return Err(SnapshotError::NotNamespace {
                path: origin.to_string(),
                index,
                kind: kind.to_string(),
            });
        }
        let name = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or_else(|| SnapshotError::Unnamed {
                path: origin.to_string(),
                index,
            })?;
        let labels = item
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.by_name.insert(name.to_string(), labels);
        Ok(())
    }

    pub fn insert(&mut self, name: &str, labels: BTreeMap<String, String>) {
        self.by_name.insert(name.to_string(), labels);
    }

    pub fn lookup(&self, name: &str) -> NamespaceContext {
        match self.by_name.get(name) {
            Some(labels) => NamespaceContext::Found {
                labels: labels.clone(),
            },
            None => NamespaceContext::NotFound,
        }
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// Expand `kind: List` (and `*List`) documents into their items; drop empty documents.
pub fn flatten_list(value: Value) -> Vec<Value> {
    match value {
        Value::Null => Vec::new(),
        Value::Object(ref m)
            if m.get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"))
                && m.get("items").is_some_and(Value::is_array) =>
        {
            match value {
                Value::Object(mut m) => match m.remove("items") {
                    Some(Value::Array(items)) => items.into_iter().flat_map(flatten_list).collect(),
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            }
        }
        other => vec![other],
    }
}

/// A metadata-only reflector of all Namespaces, plus a live GET for misses.
pub struct LiveNamespaces {
    store: Store<PartialObjectMeta<Namespace>>,
    api: Api<PartialObjectMeta<Namespace>>,
    readiness: Arc<Readiness>,
}

impl LiveNamespaces {
    /// Start the watch in the background. Readiness turns on when the first list completes.
    pub fn start(
        client: Client,
        readiness: Arc<Readiness>,
        metrics: Metrics,
    ) -> Arc<LiveNamespaces> {
        // `Api<PartialObjectMeta<_>>` makes metadata-only list/watch/get requests.
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
        let (store, writer) = reflector::store();
        let stream = watcher::watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            // Only labels are read; dropping managedFields and annotations keeps the index
            // small (10,000 namespaces within the memory target).
            .modify(|ns: &mut PartialObjectMeta<Namespace>| {
                ns.metadata.managed_fields = None;
                ns.metadata.annotations = None;
                ns.metadata.owner_references = None;
            });
        let ready = readiness.clone();
        let reader = store.clone();
        tokio::spawn(async move {
            let mut stream = reflector::reflector(writer, stream).boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(Event::InitDone) => {
                        ready.set_index_synced(true);
                        metrics.namespace_index_size.set(reader.len() as i64);
                        tracing::info!(namespaces = reader.len(), "namespace index synced");
                    }
                    Ok(Event::Apply(_)) | Ok(Event::Delete(_)) => {
                        metrics.namespace_index_size.set(reader.len() as i64);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "namespace watch error; retrying with backoff")
                    }
                }
            }
            tracing::error!("namespace watch ended");
        });
        Arc::new(LiveNamespaces {
            store,
            api,
            readiness,
        })
    }

    pub async fn lookup(&self, name: &str) -> Result<NamespaceContext, LookupError> {
        if self.readiness.index_synced()
            && let Some(ns) = self.store.get(&ObjectRef::new(name))
        {
            return Ok(NamespaceContext::Found {
                labels: ns.metadata.labels.clone().unwrap_or_default(),
            });
        }
        // A miss may be cache lag for a namespace created a moment ago: ask the API server
        // once before concluding it does not exist.
        match tokio::time::timeout(LIVE_GET_TIMEOUT, self.api.get_opt(name)).await {
            Err(_) => Err(LookupError::Timeout(LIVE_GET_TIMEOUT)),
            Ok(Err(e)) => Err(LookupError::Api(e)),
            Ok(Ok(None)) => Ok(NamespaceContext::NotFound),
            Ok(Ok(Some(ns))) => Ok(NamespaceContext::Found {
                labels: ns.metadata.labels.unwrap_or_default(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reads_list_and_multidoc() {
        let list = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata:
    name: tenant-alice
    labels:
      namespace.cozystack.io/host: alice.example.org
- apiVersion: v1
  kind: Namespace
  metadata:
    name: tenant-bare
"#;
        let s = StaticNamespaces::from_yaml(list, "t").expect("parses");
        assert_eq!(s.len(), 2);
        assert_eq!(s.lookup("tenant-alice").apex(), Some("alice.example.org"));
        assert_eq!(s.lookup("tenant-bare").apex(), None);
        assert_eq!(s.lookup("tenant-missing"), NamespaceContext::NotFound);

        let multi = "kind: Namespace\nmetadata:\n  name: a\n---\nkind: Namespace\nmetadata:\n  name: b\n  labels: {x: y}\n---\n";
        let s = StaticNamespaces::from_yaml(multi, "t").expect("parses");
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn snapshot_rejects_other_kinds_and_bad_yaml() {
        let e = StaticNamespaces::from_yaml("kind: Pod\nmetadata: {name: x}\n", "f.yaml")
            .expect_err("pod is not a namespace");
        assert!(e.to_string().contains("Pod"), "{e}");
        let e = StaticNamespaces::from_yaml("kind: [unclosed", "f.yaml").expect_err("bad yaml");
        assert!(e.to_string().contains("f.yaml"), "{e}");
        let e = StaticNamespaces::from_yaml("kind: Namespace\nmetadata: {}\n", "f.yaml")
            .expect_err("no name");
        assert!(e.to_string().contains("metadata.name"), "{e}");
    }
}
