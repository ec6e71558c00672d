//! The namespace index's entries and their store: of each namespace only its name, its
//! labels and the attached-by mark, ours or the platform controller's (SPEC §2.2, §3.5,
//! §3.8), in boxed slices. The entry is
//! the one type for a namespace's metadata: the replicator's plan and the reconciler's
//! `Inputs` hold the index's `Arc`s, never a copy of the labels. A `PartialObjectMeta` per
//! namespace held an inline `ObjectMeta` and a label `BTreeMap` node each (about 1.3 KB);
//! 10,000 of these were the largest cache of `serve`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::intern::intern;
use crate::platform::{
    ATTACHED_BY_ANNOTATION, GATEWAY_LABEL, HOST_LABEL, PLATFORM_ATTACHED_BY_ANNOTATION,
};

/// The label the API server sets on every namespace to its name.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// One namespace as the index keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamespaceMeta {
    name: Box<str>,
    /// Sorted by key; keys and values are the shared copies of `cluster::intern` (10,000
    /// namespaces spell the same few keys and values), and the label the API server puts on
    /// every namespace, `kubernetes.io/metadata.name` = its name, is not among them when it
    /// says just that (`name_label`).
    labels: Box<[(Arc<str>, Arc<str>)]>,
    name_label: bool,
    /// Our attached-by annotation, else the platform controller's.
    attached_by: Option<Box<str>>,
    /// The platform controller's annotation is present (ours is to replace it).
    platform_mark: bool,
    /// `metadata.deletionTimestamp` is set (the replicator skips terminating namespaces).
    terminating: bool,
}

impl NamespaceMeta {
    pub fn from_meta(meta: &ObjectMeta) -> NamespaceMeta {
        let name = meta.name.as_deref().unwrap_or_default();
        let annotation = |key: &str| {
            meta.annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .map(String::as_str)
        };
        let name_label = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(NAME_LABEL))
            .is_some_and(|v| v == name);
        NamespaceMeta {
            name: name.into(),
            // A BTreeMap iterates in key order: the slice is sorted.
            labels: meta
                .labels
                .iter()
                .flatten()
                .filter(|(k, _)| !(name_label && k.as_str() == NAME_LABEL))
                .map(|(k, v)| (intern(k), intern(v)))
                .collect(),
            name_label,
            attached_by: annotation(ATTACHED_BY_ANNOTATION)
                .or(annotation(PLATFORM_ATTACHED_BY_ANNOTATION))
                .map(Into::into),
            platform_mark: annotation(PLATFORM_ATTACHED_BY_ANNOTATION).is_some(),
            terminating: meta.deletion_timestamp.is_some(),
        }
    }

    /// The entry the index keeps of a namespace with these labels and annotations (tests,
    /// fuzz targets and benches build their worlds with it; the watch uses [`Self::from_meta`]).
    pub fn new(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> NamespaceMeta {
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        NamespaceMeta::from_meta(&ObjectMeta {
            name: Some(name.into()),
            labels: map(labels),
            annotations: map(annotations),
            ..ObjectMeta::default()
        })
    }

    pub fn terminating(&self) -> bool {
        self.terminating
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        if self.name_label && key == NAME_LABEL {
            return Some(&self.name);
        }
        self.labels
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.labels[i].1)
    }

    /// The labels as a map (what the admission layers read).
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut out: BTreeMap<String, String> = self
            .labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if self.name_label {
            out.insert(NAME_LABEL.to_string(), self.name.to_string());
        }
        out
    }

    /// Its apex: the host label, absent when missing or empty (an empty apex must never mean
    /// "everything"; `platform::apex_label` is the same rule over a label map).
    pub fn apex(&self) -> Option<&str> {
        self.label(HOST_LABEL).filter(|s| !s.is_empty())
    }

    /// The namespace whose Gateway it publishes through (its gateway label).
    pub fn gateway(&self) -> Option<&str> {
        self.label(GATEWAY_LABEL)
    }

    /// The attached-by mark: the TenantGateway namespace that wrote its gateway label, if a
    /// TenantGateway did. Ours, else the platform controller's, which says the same
    /// (SPEC §3.8): a platform switched to this reconciler keeps its attachments.
    pub fn attached_by(&self) -> Option<&str> {
        self.attached_by.as_deref()
    }

    /// The platform controller's annotation is there: a write of ours replaces it.
    pub fn platform_mark(&self) -> bool {
        self.platform_mark
    }
}

/// Namespaces by name, with relist bookkeeping: after a relist the names not seen again are
/// dropped.
#[derive(Default)]
pub struct NamespaceStore {
    inner: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    by_name: HashMap<Box<str>, Arc<NamespaceMeta>>,
    relist: Option<HashSet<Box<str>>>,
}

impl NamespaceStore {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        // Plain maps survive a panicking writer.
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, name: &str) -> Option<Arc<NamespaceMeta>> {
        self.read().by_name.get(name).cloned()
    }

    pub fn all(&self) -> Vec<Arc<NamespaceMeta>> {
        self.read().by_name.values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.read().by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn apply(&self, ns: NamespaceMeta) {
        let mut g = self.write();
        if let Some(seen) = g.relist.as_mut() {
            seen.insert(ns.name.clone());
        }
        g.by_name.insert(ns.name.clone(), Arc::new(ns));
    }

    pub fn delete(&self, name: &str) {
        self.write().by_name.remove(name);
    }

    pub fn relist_started(&self) {
        self.write().relist = Some(HashSet::new());
    }

    /// Drop what the relist did not see again.
    pub fn relist_done(&self) {
        let mut g = self.write();
        if let Some(seen) = g.relist.take() {
            g.by_name.retain(|name, _| seen.contains(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        ObjectMeta {
            name: Some(name.into()),
            labels: map(labels),
            annotations: map(annotations),
            uid: Some("u".into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn keeps_labels_and_only_our_annotation() {
        let m = NamespaceMeta::from_meta(&meta(
            "tenant-a",
            &[("z", "1"), ("a", "2"), ("m", "3")],
            &[(ATTACHED_BY_ANNOTATION, "tenant-root"), ("other", "x")],
        ));
        assert_eq!(m.name(), "tenant-a");
        assert_eq!(m.label("a"), Some("2"));
        assert_eq!(m.label("m"), Some("3"));
        assert_eq!(m.label("z"), Some("1"));
        assert_eq!(m.label("b"), None);
        assert_eq!(m.labels().len(), 3);
        assert_eq!(m.attached_by(), Some("tenant-root"));
        // The name label reads as it was, whether it names the namespace or not.
        let named = NamespaceMeta::from_meta(&meta(
            "tenant-b",
            &[(NAME_LABEL, "tenant-b"), ("k", "v")],
            &[],
        ));
        assert_eq!(named.label(NAME_LABEL), Some("tenant-b"));
        assert_eq!(named.label("k"), Some("v"));
        assert_eq!(
            named.labels(),
            BTreeMap::from([
                (NAME_LABEL.to_string(), "tenant-b".to_string()),
                ("k".to_string(), "v".to_string())
            ])
        );
        let odd = NamespaceMeta::from_meta(&meta("tenant-c", &[(NAME_LABEL, "other")], &[]));
        assert_eq!(odd.label(NAME_LABEL), Some("other"));
        assert_eq!(odd.labels().len(), 1);
        assert_ne!(named, odd);
        let unnamed = NamespaceMeta::from_meta(&meta("tenant-b", &[("k", "v")], &[]));
        assert_eq!(unnamed.label(NAME_LABEL), None);
        assert_ne!(
            named, unnamed,
            "a namespace without the label is not one with it"
        );
        let bare = NamespaceMeta::from_meta(&meta("n", &[], &[("other", "x")]));
        assert!(bare.labels().is_empty());
        assert_eq!(bare.attached_by(), None);
    }

    #[test]
    fn built_from_parts_as_the_watch_keeps_it() {
        let labels = [
            (HOST_LABEL, "alice.example.org"),
            (GATEWAY_LABEL, "tenant-root"),
        ];
        let annotations = [(ATTACHED_BY_ANNOTATION, "tenant-root"), ("other", "x")];
        let m = NamespaceMeta::new("tenant-alice", &labels, &annotations);
        assert_eq!(
            m,
            NamespaceMeta::from_meta(&meta("tenant-alice", &labels, &annotations))
        );
        assert_eq!(m.apex(), Some("alice.example.org"));
        assert_eq!(m.gateway(), Some("tenant-root"));
        assert_eq!(m.attached_by(), Some("tenant-root"));
        // An empty apex is no apex; an empty gateway label is still a label.
        let empty = NamespaceMeta::new("n", &[(HOST_LABEL, ""), (GATEWAY_LABEL, "")], &[]);
        assert_eq!(empty.apex(), None);
        assert_eq!(empty.label(HOST_LABEL), Some(""));
        assert_eq!(empty.gateway(), Some(""));
        let bare = NamespaceMeta::new("n", &[], &[]);
        assert_eq!(
            (bare.apex(), bare.gateway(), bare.attached_by()),
            (None, None, None)
        );
    }

    #[test]
    fn the_platform_mark_reads_as_ours_and_ours_comes_first() {
        // (annotations, attached_by, platform_mark)
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>, bool);
        let cases: [Case; 5] = [
            (&[], None, false),
            (
                &[(ATTACHED_BY_ANNOTATION, "tenant-root")],
                Some("tenant-root"),
                false,
            ),
            (
                &[(PLATFORM_ATTACHED_BY_ANNOTATION, "tenant-root")],
                Some("tenant-root"),
                true,
            ),
            (
                &[
                    (ATTACHED_BY_ANNOTATION, "tenant-root"),
                    (PLATFORM_ATTACHED_BY_ANNOTATION, "tenant-bob"),
                ],
                Some("tenant-root"),
                true,
            ),
            (&[("cozystack.io/other", "tenant-root")], None, false),
        ];
        for (annotations, by, platform) in cases {
            let m = NamespaceMeta::new("cozy-x", &[], annotations);
            assert_eq!(
                (m.attached_by(), m.platform_mark()),
                (by, platform),
                "{annotations:?}"
            );
        }
        assert!(
            std::mem::size_of::<NamespaceMeta>() <= 56,
            "the mark's flag fits beside the others"
        );
    }

    #[test]
    fn relist_drops_namespaces_not_seen_again() {
        let s = NamespaceStore::default();
        for n in ["a", "b", "c"] {
            s.apply(NamespaceMeta::from_meta(&meta(n, &[], &[])));
        }
        s.relist_started();
        s.apply(NamespaceMeta::from_meta(&meta("b", &[("k", "v")], &[])));
        s.relist_done();
        assert_eq!(s.len(), 1);
        assert_eq!(
            s.get("b").and_then(|m| m.label("k").map(str::to_string)),
            Some("v".into())
        );
        assert!(s.get("a").is_none());
        s.delete("b");
        assert!(s.is_empty());
    }
}
