//! Namespace context for the admission layers: either a static snapshot (`--namespaces FILE`,
//! read by `snapshot`) or a metadata-only watch of the cluster, with a live GET on a miss
//! (`miss`).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::apex::LiveApexIndex;
use super::miss::{LookupError, MissCache};
use super::nsmeta::{NamespaceMeta, NamespaceStore};
use super::snapshot::StaticNamespaces;
use crate::metrics::Metrics;
use crate::platform::{ApexOwners, NamespaceContext};
use crate::readiness::Readiness;

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
            NamespaceSource::Live(l) => match l.indexed(name) {
                Some(found) => Ok(found),
                // The API request's future is large; boxed, it does not make every review's
                // future (moved several times on the way to the handler) that large too.
                None => Box::pin(l.lookup(name)).await,
            },
        }
    }

    pub fn len(&self) -> usize {
        match self {
            NamespaceSource::Static(s) => s.len(),
            NamespaceSource::Live(l) => l.store.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// apex → namespaces, for layer 8's "not within another namespace's apex".
    pub fn apex_owners(&self) -> &dyn ApexOwners {
        match self {
            NamespaceSource::Static(s) => s.apexes(),
            NamespaceSource::Live(l) => l.apexes.as_ref(),
        }
    }
}

/// The apexes of [`NamespaceSource::apex_owners`], for a holder that outlives a borrow
/// (admission's route summaries, updated as routes change).
impl ApexOwners for NamespaceSource {
    fn owned_by_other(&self, apex: &str, except: &str) -> bool {
        self.apex_owners().owned_by_other(apex, except)
    }

    fn apex_of(&self, namespace: &str) -> Option<String> {
        self.apex_owners().apex_of(namespace)
    }

    fn generation(&self) -> u64 {
        self.apex_owners().generation()
    }

    fn complete(&self) -> bool {
        self.apex_owners().complete()
    }
}

/// A metadata-only watch of all Namespaces into a compact index, plus a live GET for misses.
pub struct LiveNamespaces {
    store: Arc<NamespaceStore>,
    api: Api<PartialObjectMeta<Namespace>>,
    readiness: Arc<Readiness>,
    /// Fed by the same watch as `store`.
    apexes: Arc<LiveApexIndex>,
    misses: Arc<MissCache>,
    /// Sent after the store and the indexes took the event (`subscribe`).
    changes: tokio::sync::broadcast::Sender<NamespaceChange>,
}

/// What a subscriber learns from the namespace watch, after the store has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceChange {
    /// Created or changed (also every item of a relist).
    Applied(String),
    Deleted(String),
    /// A (re)list completed: the store holds the whole current set.
    Resynced,
}

impl LiveNamespaces {
    /// Start the watch in the background. Readiness turns on when the first list completes.
    pub fn start(
        client: Client,
        readiness: Arc<Readiness>,
        metrics: Metrics,
    ) -> Arc<LiveNamespaces> {
        Self::start_task(client, readiness, metrics).0
    }

    /// [`Self::start`], also returning the watch task, which ends only if the watch stream
    /// does (`serve` ends the process then: an index that stops updating must not serve).
    pub fn start_task(
        client: Client,
        readiness: Arc<Readiness>,
        metrics: Metrics,
    ) -> (Arc<LiveNamespaces>, tokio::task::JoinHandle<()>) {
        // `Api<PartialObjectMeta<_>>` makes metadata-only list/watch/get requests.
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
        let store = Arc::new(NamespaceStore::default());
        let stream = watcher::watcher(api.clone(), watcher::Config::default()).default_backoff();
        let ready = readiness.clone();
        let writer = store.clone();
        let apexes = Arc::new(LiveApexIndex::default());
        let misses = Arc::new(MissCache::default());
        let (apex_writer, miss_writer) = (apexes.clone(), misses.clone());
        let (changes, _) = tokio::sync::broadcast::channel(4096);
        let notify = changes.clone();
        let task = tokio::spawn(async move {
            let mut stream = stream.boxed();
            while let Some(event) = stream.next().await {
                if let Ok(event) = &event {
                    index_event(&apex_writer, &miss_writer, event);
                    let name = |ns: &PartialObjectMeta<Namespace>| {
                        ns.metadata.name.clone().unwrap_or_default()
                    };
                    // The index first, then the subscribers (no subscriber is fine: webhook
                    // only).
                    let _ = match event {
                        Event::Apply(ns) | Event::InitApply(ns) => {
                            writer.apply(NamespaceMeta::from_meta(&ns.metadata));
                            notify.send(NamespaceChange::Applied(name(ns)))
                        }
                        Event::Delete(ns) => {
                            writer.delete(ns.metadata.name.as_deref().unwrap_or_default());
                            notify.send(NamespaceChange::Deleted(name(ns)))
                        }
                        Event::InitDone => {
                            writer.relist_done();
                            notify.send(NamespaceChange::Resynced)
                        }
                        Event::Init => {
                            writer.relist_started();
                            Ok(0)
                        }
                    };
                }
                match event {
                    Ok(Event::InitDone) => {
                        ready.set_index_synced(true);
                        metrics.namespace_index_size.set(writer.len() as i64);
                        tracing::info!(namespaces = writer.len(), "namespace index synced");
                    }
                    Ok(Event::Apply(_)) | Ok(Event::Delete(_)) => {
                        metrics.namespace_index_size.set(writer.len() as i64);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "namespace watch error; retrying with backoff")
                    }
                }
            }
            tracing::error!("namespace watch ended");
        });
        let live = Arc::new(LiveNamespaces {
            store,
            api,
            readiness,
            apexes,
            misses,
            changes,
        });
        (live, task)
    }

    /// Changes after the store took them; a lagging receiver must re-read [`Self::all`].
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<NamespaceChange> {
        self.changes.subscribe()
    }

    /// One namespace from the index (no live GET).
    pub fn cached(&self, name: &str) -> Option<Arc<NamespaceMeta>> {
        self.store.get(name)
    }

    /// Every namespace in the index.
    pub fn all(&self) -> Vec<Arc<NamespaceMeta>> {
        self.store.all()
    }

    /// Which namespaces carry which apex, fed by the same watch.
    pub fn apexes(&self) -> &LiveApexIndex {
        &self.apexes
    }

    /// True once the first list completed.
    pub fn synced(&self) -> bool {
        self.readiness.index_synced()
    }

    /// The namespace from the synced index, without any request.
    fn indexed(&self, name: &str) -> Option<NamespaceContext> {
        if !self.readiness.index_synced() {
            return None;
        }
        let ns = self.store.get(name)?;
        // Only what the layers and the route-index warnings read
        // (`NamespaceContext::found`), without building the whole label map.
        let labels = [crate::platform::HOST_LABEL, crate::platform::GATEWAY_LABEL]
            .into_iter()
            .filter_map(|k| ns.label(k).map(|v| (k.to_string(), v.to_string())))
            .collect();
        Some(NamespaceContext::Found { labels })
    }

    pub async fn lookup(&self, name: &str) -> Result<NamespaceContext, LookupError> {
        if let Some(found) = self.indexed(name) {
            return Ok(found);
        }
        // A miss may be cache lag for a namespace created a moment ago: ask the API server
        // once before concluding it does not exist (coalesced per name, "not found"
        // remembered briefly: `MissCache`).
        self.misses
            .lookup(name, || async {
                match self.api.get_opt(name).await {
                    Err(e) => Err(LookupError::Api(Arc::new(e))),
                    Ok(None) => Ok(NamespaceContext::NotFound),
                    Ok(Some(ns)) => Ok(NamespaceContext::found(
                        &ns.metadata.labels.unwrap_or_default(),
                    )),
                }
            })
            .await
    }
}

/// Keep the apex map and the miss cache in step with one watch event.
fn index_event(
    apexes: &LiveApexIndex,
    misses: &MissCache,
    event: &Event<PartialObjectMeta<Namespace>>,
) {
    let empty = BTreeMap::new();
    let parts = |ns: &'_ PartialObjectMeta<Namespace>| -> (String, BTreeMap<String, String>) {
        (
            ns.metadata.name.clone().unwrap_or_default(),
            ns.metadata.labels.clone().unwrap_or_else(|| empty.clone()),
        )
    };
    match event {
        Event::Apply(ns) => {
            let (name, labels) = parts(ns);
            misses.forget(&name);
            apexes.apply(&name, &labels);
        }
        Event::Delete(ns) => {
            misses.forget(ns.metadata.name.as_deref().unwrap_or_default());
            apexes.delete(ns.metadata.name.as_deref().unwrap_or_default());
        }
        Event::Init => apexes.relist_started(),
        Event::InitApply(ns) => {
            let (name, labels) = parts(ns);
            misses.forget(&name);
            apexes.relist_item(&name, &labels);
        }
        Event::InitDone => apexes.relist_done(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn watch_events_keep_the_apex_map_and_the_miss_cache_current() {
        use kube::api::{ObjectMeta, PartialObjectMetaExt};
        let ns = |name: &str, apex: Option<&str>| {
            ObjectMeta {
                name: Some(name.to_string()),
                labels: apex.map(|a| {
                    BTreeMap::from([(crate::platform::HOST_LABEL.to_string(), a.to_string())])
                }),
                ..ObjectMeta::default()
            }
            .into_response_partial::<Namespace>()
        };
        let apexes = LiveApexIndex::default();
        let misses = MissCache::default();
        // "not found" remembered for tenant-cust before it exists.
        let r = misses
            .lookup("tenant-cust", || async { Ok(NamespaceContext::NotFound) })
            .await;
        assert!(matches!(r, Ok(NamespaceContext::NotFound)));
        assert_eq!(misses.negative_len(), 1);

        let steps: Vec<(Event<PartialObjectMeta<Namespace>>, bool)> = vec![
            (Event::Apply(ns("tenant-cust", Some("customer1.io"))), true),
            (Event::Apply(ns("tenant-cust", None)), false),
            (Event::Apply(ns("tenant-cust", Some("Customer1.io"))), true),
            (
                Event::Delete(ns("tenant-cust", Some("customer1.io"))),
                false,
            ),
            (Event::Init, false),
            (
                Event::InitApply(ns("tenant-cust", Some("customer1.io"))),
                false,
            ),
            (Event::InitDone, true),
        ];
        for (i, (event, owned)) in steps.iter().enumerate() {
            index_event(&apexes, &misses, event);
            assert_eq!(
                apexes.owned_by_other("customer1.io", "tenant-alice"),
                *owned,
                "step {i}"
            );
        }
        assert_eq!(misses.negative_len(), 0, "the watch event cleared the miss");
    }
}
