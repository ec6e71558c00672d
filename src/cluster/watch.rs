//! Guarded watches: one per kind per process, on untyped objects, so that one object that does
//! not decode into our types is logged and skipped instead of failing the list (a typed
//! watcher fails the whole page and retries forever). "Is this kind served" for optional CRDs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

/// `(namespace, name)`.
pub type Key = (String, String);

/// The watch events of one kind as untyped objects; errors are logged and the watcher backs
/// off and resumes (never ends on an error).
pub fn guarded(
    client: Client,
    resource: &ApiResource,
    what: &'static str,
) -> impl Stream<Item = Event<DynamicObject>> + Send + 'static {
    let api: Api<DynamicObject> = Api::all_with(client, resource);
    watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(move |e| async move {
            match e {
                Ok(mut ev) => {
                    strip(&mut ev);
                    Some(ev)
                }
                Err(e) => {
                    tracing::warn!(kind = what, error = %e, "watch error; retrying with backoff");
                    None
                }
            }
        })
}

/// Drop what no reader needs before anything is kept.
fn strip(ev: &mut Event<DynamicObject>) {
    if let Event::Apply(o) | Event::InitApply(o) | Event::Delete(o) = ev {
        o.metadata.managed_fields = None;
        if let Some(a) = o.metadata.annotations.as_mut() {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
}

/// `(namespace, name)` of an untyped object.
pub fn key(o: &DynamicObject) -> Key {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

/// Decode an untyped object into `T`, logging and skipping one that does not fit.
pub fn decode<T: serde::de::DeserializeOwned>(o: &DynamicObject, what: &str) -> Option<T> {
    let v = match serde_json::to_value(o) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(kind = what, error = %e, "cannot re-encode a watched object; skipped");
            return None;
        }
    };
    match serde_json::from_value(v) {
        Ok(t) => Some(t),
        Err(e) => {
            let (ns, name) = key(o);
            tracing::warn!(kind = what, namespace = %ns, name = %name, error = %e,
                "object does not decode; skipped (fix or delete it)");
            None
        }
    }
}

/// Decoded objects of one kind by namespace, with relist bookkeeping: after a relist the
/// objects not seen again are dropped.
pub struct ObjectCache<T> {
    inner: RwLock<CacheInner<T>>,
}

struct CacheInner<T> {
    by_ns: HashMap<String, BTreeMap<String, Arc<T>>>,
    relist: Option<HashSet<Key>>,
}

impl<T> Default for ObjectCache<T> {
    fn default() -> Self {
        ObjectCache {
            inner: RwLock::new(CacheInner {
                by_ns: HashMap::new(),
                relist: None,
            }),
        }
    }
}

impl<T> ObjectCache<T> {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CacheInner<T>> {
        // A panic while holding the lock leaves plain maps behind: still usable.
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, CacheInner<T>> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Insert or replace; `None` (did not decode) removes any previous version.
    pub fn apply(&self, key: Key, value: Option<T>) {
        let mut g = self.write();
        if let Some(seen) = g.relist.as_mut() {
            seen.insert(key.clone());
        }
        match value {
            Some(v) => {
                g.by_ns.entry(key.0).or_default().insert(key.1, Arc::new(v));
            }
            None => remove(&mut g.by_ns, &key),
        }
    }

    pub fn delete(&self, key: &Key) {
        remove(&mut self.write().by_ns, key);
    }

    pub fn relist_started(&self) {
        self.write().relist = Some(HashSet::new());
    }

    /// Drop what the relist did not see; returns the dropped keys.
    pub fn relist_done(&self) -> Vec<Key> {
        let mut g = self.write();
        let Some(seen) = g.relist.take() else {
            return Vec::new();
        };
        let gone: Vec<Key> = g
            .by_ns
            .iter()
            .flat_map(|(ns, m)| m.keys().map(move |n| (ns.clone(), n.clone())))
            .filter(|k| !seen.contains(k))
            .collect();
        for k in &gone {
            remove(&mut g.by_ns, k);
        }
        gone
    }

    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<T>> {
        self.read()
            .by_ns
            .get(namespace)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.read().by_ns.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn remove<T>(by_ns: &mut HashMap<String, BTreeMap<String, Arc<T>>>, key: &Key) {
    if let Some(m) = by_ns.get_mut(&key.0) {
        m.remove(&key.1);
        if m.is_empty() {
            by_ns.remove(&key.0);
        }
    }
}

/// The recommended version of `group`/`kind` when the API server serves it.
pub async fn served(client: &Client, group: &str, kind: &str) -> Option<ApiResource> {
    match kube::discovery::group(client, group).await {
        Ok(g) => g.recommended_kind(kind).map(|(r, _)| r),
        Err(e) => {
            tracing::debug!(group, kind, error = %e, "API group not served");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(ns: &str, n: &str) -> Key {
        (ns.to_string(), n.to_string())
    }

    #[test]
    fn relist_drops_what_was_not_seen_again() {
        let c: ObjectCache<u32> = ObjectCache::default();
        c.apply(k("a", "x"), Some(1));
        c.apply(k("a", "y"), Some(2));
        c.apply(k("b", "z"), Some(3));
        c.relist_started();
        c.apply(k("a", "x"), Some(10));
        let gone = c.relist_done();
        assert_eq!(gone.len(), 2);
        assert_eq!(
            c.in_namespace("a").iter().map(|v| **v).collect::<Vec<_>>(),
            [10]
        );
        assert!(c.in_namespace("b").is_empty());
    }

    #[test]
    fn undecodable_update_removes_the_old_version() {
        let c: ObjectCache<u32> = ObjectCache::default();
        c.apply(k("a", "x"), Some(1));
        c.apply(k("a", "x"), None);
        assert!(c.is_empty());
    }

    #[test]
    fn decode_skips_a_bad_object() {
        #[derive(serde::Deserialize)]
        struct Needs {
            #[allow(dead_code)]
            spec: u32,
        }
        let o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "X", "metadata": {"name": "n", "namespace": "ns"},
            "spec": "not a number"
        }))
        .expect("dynamic object");
        assert!(decode::<Needs>(&o, "X").is_none());
    }
}
