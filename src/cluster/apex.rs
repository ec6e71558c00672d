//! Which namespaces carry which apex: the lookup behind layer 8's "not within another
//! tenant's apex" rule (SPEC §2.3). Kept next to the name → labels index (the static snapshot
//! or the watch), updated by the same events, so a review never scans the namespaces: it
//! walks the host's suffixes (`shop.customer1.io`, `customer1.io`, `io`) and looks each one up.
//!
//! What counts as an owner: every namespace whose `namespace.cozystack.io/host` label is set
//! and not empty, wherever it lives (tenant scope or not). Only trusted callers can write that
//! label (layer 5), so every value is an apex the platform handed out. The object's own
//! namespace is never "another" owner; two namespaces carrying the same apex both own it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use crate::platform::{ApexOwners, HOST_LABEL};

/// The apex of a label set as the map keys it: lowercased (hosts are compared lowercase, the
/// label may carry uppercase), `None` when absent or empty.
fn apex_key(labels: &BTreeMap<String, String>) -> Option<String> {
    labels
        .get(HOST_LABEL)
        .filter(|v| !v.is_empty())
        .map(|v| v.to_ascii_lowercase())
}

/// apex → namespaces, with the reverse map to undo a namespace's previous entry.
#[derive(Debug, Default, Clone)]
pub struct ApexMap {
    apex_of: HashMap<String, String>,
    /// Nearly always one namespace per apex; a Vec beats a set at that size.
    owners: HashMap<String, Vec<String>>,
}

impl ApexMap {
    /// Record `name`'s labels (a create or an update); true when its apex changed.
    pub fn set(&mut self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        let new = apex_key(labels);
        if self.apex_of.get(name) == new.as_ref() {
            return false;
        }
        self.remove(name);
        if let Some(apex) = new {
            let owners = self.owners.entry(apex.clone()).or_default();
            owners.push(name.to_string());
            self.apex_of.insert(name.to_string(), apex);
        }
        true
    }

    /// Forget `name` (deleted, or its host label removed); true when it had an apex.
    pub fn remove(&mut self, name: &str) -> bool {
        let Some(apex) = self.apex_of.remove(name) else {
            return false;
        };
        if let Some(owners) = self.owners.get_mut(&apex) {
            owners.retain(|n| n != name);
            if owners.is_empty() {
                self.owners.remove(&apex);
            }
        }
        true
    }

    /// True when a namespace other than `except` carries exactly `apex` (lowercase).
    pub fn owned_by_other(&self, apex: &str, except: &str) -> bool {
        self.owners
            .get(apex)
            .is_some_and(|owners| owners.iter().any(|n| n != except))
    }

    /// The namespaces that carry `apex` (lowercase), in the order they took it.
    pub fn owners(&self, apex: &str) -> &[String] {
        self.owners.get(apex).map_or(&[], Vec::as_slice)
    }

    /// Distinct apexes known.
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }
}

impl ApexOwners for ApexMap {
    fn owned_by_other(&self, apex: &str, except: &str) -> bool {
        ApexMap::owned_by_other(self, apex, except)
    }

    fn apex_of(&self, namespace: &str) -> Option<String> {
        self.apex_of.get(namespace).cloned()
    }
}

/// The apex map of the live index, fed by the namespace watch. A relist (`Init` …
/// `InitApply`… `InitDone`) builds a fresh map and swaps it in whole, so namespaces deleted
/// while the watch was down disappear, and reviews keep reading the previous map meanwhile.
#[derive(Debug, Default)]
pub struct LiveApexIndex {
    current: RwLock<ApexMap>,
    rebuilding: Mutex<Option<ApexMap>>,
    /// Counts the changes of `current` (an apex set, changed or removed; a relist swapped in).
    generation: AtomicU64,
    /// A first list has been swapped in: `current` knows every namespace.
    listed: AtomicBool,
}

impl LiveApexIndex {
    pub fn apply(&self, name: &str, labels: &BTreeMap<String, String>) {
        if write(&self.current).set(name, labels) {
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    pub fn delete(&self, name: &str) {
        if write(&self.current).remove(name) {
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    pub fn relist_started(&self) {
        *lock(&self.rebuilding) = Some(ApexMap::default());
    }

    pub fn relist_item(&self, name: &str, labels: &BTreeMap<String, String>) {
        if let Some(map) = lock(&self.rebuilding).as_mut() {
            map.set(name, labels);
        }
    }

    pub fn relist_done(&self) {
        if let Some(map) = lock(&self.rebuilding).take() {
            *write(&self.current) = map;
            self.generation.fetch_add(1, Ordering::Release);
            self.listed.store(true, Ordering::Release);
        }
    }

    /// [`ApexMap::owners`] of the current map.
    pub fn owners(&self, apex: &str) -> Vec<String> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .owners(apex)
            .to_vec()
    }
}

impl ApexOwners for LiveApexIndex {
    fn owned_by_other(&self, apex: &str, except: &str) -> bool {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .owned_by_other(apex, except)
    }

    fn apex_of(&self, namespace: &str) -> Option<String> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .apex_of
            .get(namespace)
            .cloned()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn complete(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }
}

// A panic while a map was being updated leaves it consistent enough to read (each update is a
// handful of inserts/removes); poisoning must not turn every later review into a panic.
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(apex: Option<&str>) -> BTreeMap<String, String> {
        let mut m = BTreeMap::from([("team".to_string(), "a".to_string())]);
        if let Some(a) = apex {
            m.insert(HOST_LABEL.to_string(), a.to_string());
        }
        m
    }

    #[test]
    fn tracks_creates_changes_and_deletes() {
        let mut m = ApexMap::default();
        // (step, expected owners of customer1.io other than tenant-alice)
        m.set("tenant-cust", &labels(Some("Customer1.IO")));
        assert!(m.owned_by_other("customer1.io", "tenant-alice"));
        assert!(!m.owned_by_other("customer1.io", "tenant-cust"), "own apex");
        assert!(
            !m.owned_by_other("Customer1.IO", "tenant-alice"),
            "keys are lowercase"
        );
        m.set("tenant-cust2", &labels(Some("customer1.io")));
        assert!(
            m.owned_by_other("customer1.io", "tenant-cust"),
            "shared apex"
        );
        assert_eq!(m.owners("customer1.io"), ["tenant-cust", "tenant-cust2"]);
        assert!(m.owners("Customer1.IO").is_empty(), "keys are lowercase");
        assert_eq!(m.len(), 1);
        m.set("tenant-cust", &labels(Some("customer2.io")));
        assert!(m.owned_by_other("customer2.io", "tenant-alice"));
        assert!(!m.owned_by_other("customer1.io", "tenant-cust2"));
        m.set("tenant-cust2", &labels(Some("")));
        assert!(
            !m.owned_by_other("customer1.io", "tenant-alice"),
            "empty label"
        );
        m.set("tenant-cust", &labels(None));
        assert!(
            !m.owned_by_other("customer2.io", "tenant-alice"),
            "label removed"
        );
        assert!(m.is_empty());
        m.set("tenant-cust", &labels(Some("customer2.io")));
        m.remove("tenant-cust");
        m.remove("tenant-never");
        assert!(m.is_empty());
        assert!(m.apex_of.is_empty());
    }

    #[test]
    fn complete_once_a_first_list_is_in() {
        let idx = LiveApexIndex::default();
        assert!(!idx.complete(), "nothing listed yet");
        idx.apply("tenant-a", &labels(Some("a.io")));
        idx.relist_done();
        assert!(
            !idx.complete(),
            "events and a stray InitDone are not a list"
        );
        idx.relist_started();
        idx.relist_item("tenant-a", &labels(Some("a.io")));
        assert!(!idx.complete(), "a list under way");
        idx.relist_done();
        assert!(idx.complete());
        // A later relist keeps serving the previous (complete) map meanwhile.
        idx.relist_started();
        assert!(idx.complete());
    }

    #[test]
    fn relist_replaces_the_map_whole() {
        let idx = LiveApexIndex::default();
        idx.apply("tenant-old", &labels(Some("old.io")));
        idx.relist_started();
        idx.relist_item("tenant-new", &labels(Some("new.io")));
        // Until the relist completes, reviews read the previous map.
        assert!(idx.owned_by_other("old.io", "x"));
        assert!(!idx.owned_by_other("new.io", "x"));
        idx.relist_done();
        assert!(
            !idx.owned_by_other("old.io", "x"),
            "deleted while the watch was down"
        );
        assert!(idx.owned_by_other("new.io", "x"));
        // A stray InitDone without Init changes nothing.
        idx.relist_done();
        assert!(idx.owned_by_other("new.io", "x"));
        assert_eq!(idx.owners("new.io"), ["tenant-new"]);
        idx.delete("tenant-new");
        assert!(!idx.owned_by_other("new.io", "x"));
        assert!(idx.owners("new.io").is_empty());
    }

    /// What was derived from the apexes can tell when they changed: every change moves the
    /// generation, and nothing else does.
    #[test]
    fn the_generation_moves_with_every_apex_change() {
        let idx = LiveApexIndex::default();
        let mut last = idx.generation();
        let mut step = |what: &str, changes: bool, f: &dyn Fn(&LiveApexIndex)| {
            f(&idx);
            let now = idx.generation();
            assert_eq!(now != last, changes, "{what}");
            last = now;
        };
        step("an apex set", true, &|i| {
            i.apply("tenant-a", &labels(Some("a.io")))
        });
        step("the same again", false, &|i| {
            i.apply("tenant-a", &labels(Some("A.io")))
        });
        step("no host label", false, &|i| {
            i.apply("tenant-b", &labels(None))
        });
        step("changed", true, &|i| {
            i.apply("tenant-a", &labels(Some("b.io")))
        });
        step("label removed", true, &|i| {
            i.apply("tenant-a", &labels(None))
        });
        step("deleted without an apex", false, &|i| i.delete("tenant-a"));
        step("set again", true, &|i| {
            i.apply("tenant-a", &labels(Some("a.io")))
        });
        step("deleted", true, &|i| i.delete("tenant-a"));
        step("a relist started", false, &|i| i.relist_started());
        step("a relist item", false, &|i| {
            i.relist_item("tenant-c", &labels(Some("c.io")))
        });
        step("a relist swapped in", true, &|i| i.relist_done());
        step("a stray InitDone", false, &|i| i.relist_done());
    }
}
