//! What the audit holds and how one change moves it (SPEC §3.9): each judged object with its
//! projection and verdict, each namespace's apex and apex-table verdict, and the counts the
//! metrics show. Pure: `serve`'s watches and the `audit` command feed it the same calls, and
//! every call returns what changed ([`Changes`]).
//!
//! What a change re-judges:
//! - an object that is new or whose projection or uid changed: that object (an unchanged
//!   projection, a status write for instance, judges nothing);
//! - a namespace whose existence or apex changed: the objects in it whose layer reads the
//!   apex, its own apex-table verdict and those of the namespaces sharing its old or new apex,
//!   and the Ingresses elsewhere with a host under its old or new apex (layer 8's "not within
//!   another namespace's apex" reads every namespace's);
//! - a namespace relist: the apex table and every Ingress.
//!
//! Objects outside tenant scope are not judged by layers 2, 7, 8 and 9 (admission admits them
//! unchecked) and are not kept; Packages (cluster-scoped) are kept under the namespace `""`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;

use self::entry::{Stored, Uid, decode, encode};

use super::apex_table::{self, apex_key};
use super::judge::{self, Verdict};
use super::kinds::{GuardedKind, rule_of};
use super::project::project;
use super::{AuditResult, ObjectRef, Outcome};
use crate::cluster::apex::{ApexMap, LiveApexIndex};
use crate::cluster::intern::intern;
use crate::platform::{ApexOwners, NamespaceContext};
use crate::policy::{Layer, Mode, PolicyConfig};

/// Which namespaces carry which apex (the namespace index's own map): layer 8 reads it, and
/// the apex table counts a group's members.
pub trait Apexes: ApexOwners {
    /// The namespaces whose apex is `apex` (lowercase).
    fn owners(&self, apex: &str) -> Vec<String>;
}

impl Apexes for ApexMap {
    fn owners(&self, apex: &str) -> Vec<String> {
        ApexMap::owners(self, apex).to_vec()
    }
}

impl Apexes for LiveApexIndex {
    fn owners(&self, apex: &str) -> Vec<String> {
        LiveApexIndex::owners(self, apex)
    }
}

/// What one call changed.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    /// Namespaces whose results changed (`""`: cluster-scoped objects).
    pub namespaces: BTreeSet<Arc<str>>,
    /// Objects that were not violating (or not known) and are now.
    pub started: Vec<Started>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty() && self.started.is_empty()
    }

    pub fn extend(&mut self, other: Changes) {
        self.namespaces.extend(other.namespaces);
        self.started.extend(other.started);
    }
}

/// An object that started violating, for its Warning event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub object: ObjectRef,
    pub layer: Layer,
    /// The first violation.
    pub message: String,
}

/// Where an object is kept: its namespace (`""` for Packages), kind and name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    namespace: Arc<str>,
    kind: GuardedKind,
    name: Box<str>,
}

/// A namespace as the audit keeps it: what its layers read of it, which apex-table verdict it
/// has, and its objects (a list sorted by kind and name: most namespaces hold a few, and a
/// map per namespace costs a node of eleven slots for one object).
#[derive(Debug, Default)]
struct NsState {
    /// The host label as written, shared with the namespace index (`intern`).
    host: Option<Arc<str>>,
    objects: Vec<Stored>,
    exists: bool,
    apex: ApexRule,
}

/// A namespace's apex-table verdict, the failing ones kept aside ([`Store::apex_failures`]):
/// tens of thousands of namespaces pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum ApexRule {
    /// No rule applies (outside tenant scope, no apex).
    #[default]
    None,
    Pass,
    Fail,
}

static PASS: Verdict = Verdict::Pass;

impl NsState {
    fn find(&self, kind: GuardedKind, name: &str) -> Result<usize, usize> {
        self.objects.binary_search_by(|o| o.is(kind, name))
    }

    fn get(&self, kind: GuardedKind, name: &str) -> Option<&Stored> {
        self.find(kind, name).ok().map(|i| &self.objects[i])
    }

    fn get_mut(&mut self, kind: GuardedKind, name: &str) -> Option<&mut Stored> {
        self.find(kind, name).ok().map(|i| &mut self.objects[i])
    }

    /// A new host label: the packed projections, relative to the label, packed again.
    fn rehost(&mut self, host: Option<Arc<str>>) {
        for o in &mut self.objects {
            let Some(body) = o.body() else { continue };
            match decode(o.kind, body, self.host.as_deref()) {
                Ok(v) => {
                    let packed = encode(o.kind, &v, host.as_deref());
                    o.set_body(Some(&packed));
                }
                // Only a bug makes a packed projection unreadable: without it the object
                // keeps its verdict until its next event.
                Err(e) => {
                    tracing::error!(kind = o.kind.kind(), name = o.name(), error = %e, "audit projection dropped");
                    o.set_body(None);
                }
            }
        }
        self.host = host;
    }
}

/// The audit's state (see the module doc).
pub struct Store {
    cfg: Arc<PolicyConfig>,
    /// Namespaces in tenant scope or carrying an apex (others are of no rule's concern), and
    /// those holding objects; `""` holds the Packages.
    namespaces: HashMap<Arc<str>, NsState>,
    /// Objects held, all namespaces together.
    objects: usize,
    /// The apex-table verdicts that do not pass.
    apex_failures: HashMap<Arc<str>, Verdict>,
    /// How many Ingresses each namespace holds: an apex change looks at these alone.
    ingresses: HashMap<Arc<str>, u32>,
    /// The apiVersion objects of a kind are named by (the served version a watch reads).
    versions: HashMap<GuardedKind, Arc<str>>,
    /// Per kind: the current relist generation, and whether a relist is under way.
    relists: HashMap<GuardedKind, (u32, bool)>,
    /// Violations (fail or error) per (layer, kind).
    counts: BTreeMap<(Layer, &'static str), i64>,
    judgements: u64,
}

const NAMESPACE_KIND: &str = "Namespace";

impl Store {
    pub fn new(cfg: Arc<PolicyConfig>) -> Store {
        let mut counts = BTreeMap::new();
        counts.insert((Layer::Namespace, NAMESPACE_KIND), 0);
        for k in GuardedKind::ALL {
            if not_audited(&cfg, k).is_none() {
                counts.insert((k.layer(), k.kind()), 0);
            }
        }
        Store {
            cfg,
            namespaces: HashMap::new(),
            objects: 0,
            apex_failures: HashMap::new(),
            ingresses: HashMap::new(),
            versions: HashMap::new(),
            relists: HashMap::new(),
            counts,
            judgements: 0,
        }
    }

    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// Why objects of `kind` are not judged with this configuration, if they are not.
    pub fn not_audited(&self, kind: GuardedKind) -> Option<String> {
        not_audited(&self.cfg, kind)
    }

    /// Whether `kind` is not judged because the configuration lacks what its enabled layer
    /// needs (an error of the audit, not a choice: see `lacks_root_host`).
    pub fn misconfigured(&self, kind: GuardedKind) -> bool {
        lacks_root_host(&self.cfg, kind)
    }

    /// Name objects of `kind` by `api_version` (the version the cluster serves). The
    /// namespaces holding objects of `kind` change when the name does: their results were
    /// given under the earlier name (or the kind's default, when the objects came before the
    /// version was known).
    pub fn set_version(&mut self, kind: GuardedKind, api_version: &str) -> Changes {
        let mut ch = Changes::default();
        if self.api_version(kind) == api_version {
            return ch;
        }
        self.versions.insert(kind, intern(api_version));
        ch.namespaces = self
            .namespaces
            .iter()
            .filter(|(_, s)| s.objects.iter().any(|o| o.kind == kind))
            .map(|(n, _)| n.clone())
            .collect();
        ch
    }

    /// The apiVersion objects of `kind` are named by now.
    fn api_version(&self, kind: GuardedKind) -> String {
        self.versions
            .get(&kind)
            .map(|v| v.to_string())
            .unwrap_or_else(|| format!("{}/{}", kind.group(), kind.default_version()))
    }

    /// Judgements made so far (each object judged once per call that re-judged it).
    pub fn judgements(&self) -> u64 {
        self.judgements
    }

    /// Objects held.
    pub fn len(&self) -> usize {
        self.objects
    }

    pub fn is_empty(&self) -> bool {
        self.objects == 0
    }

    /// Violations (fail or error) per (layer, kind); every audited kind is listed.
    pub fn counts(&self) -> &BTreeMap<(Layer, &'static str), i64> {
        &self.counts
    }

    /// Namespace `name` exists (`exists`) with host label `host` as written, or is gone.
    pub fn namespace(
        &mut self,
        name: &str,
        exists: bool,
        host: Option<&str>,
        apexes: &dyn Apexes,
    ) -> Changes {
        let mut ch = Changes::default();
        let relevant = self.cfg.in_tenant_scope(name) || apex_key(host).is_some();
        let old = self
            .namespaces
            .get(name)
            .map(|s| (s.exists, s.host.clone()));
        if old.is_none() && !(relevant && exists) {
            return ch;
        }
        let (old_exists, old_host) = old.unwrap_or_default();
        if old_exists == exists && old_host.as_deref() == host {
            return ch;
        }
        let key = intern(name);
        let state = self.namespaces.entry(key.clone()).or_default();
        state.exists = exists;
        if old_host.as_deref() != host {
            state.rehost(host.map(intern));
        }

        let (old_apex, new_apex) = (apex_key(old_host.as_deref()), apex_key(host));
        let mut group: BTreeSet<String> = BTreeSet::from([name.to_string()]);
        if old_apex != new_apex {
            for apex in [&old_apex, &new_apex].into_iter().flatten() {
                group.extend(apexes.owners(apex));
            }
        }
        for n in &group {
            self.rejudge_apex(n, apexes, &mut ch);
        }
        let context_changed = old_exists != exists
            || old_host.as_deref().map(str::to_ascii_lowercase)
                != host.map(str::to_ascii_lowercase);
        if context_changed {
            self.rejudge_objects_in(&key, apexes, &mut ch);
        }
        if old_apex != new_apex {
            let under: Vec<String> = [old_apex, new_apex].into_iter().flatten().collect();
            self.rejudge_ingresses(Some(&under), name, apexes, &mut ch);
        }
        self.forget_if_empty(&key);
        ch
    }

    /// After a relist of the namespaces: `all` is every namespace (name, host label); those
    /// not in it are gone. Re-judges the apex table and every Ingress (the apex index may have
    /// lagged the relist's items).
    pub fn resync_namespaces<'a>(
        &mut self,
        all: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
        apexes: &dyn Apexes,
    ) -> Changes {
        let mut ch = Changes::default();
        let mut seen = BTreeSet::new();
        for (name, host) in all {
            seen.insert(name.to_string());
            ch.extend(self.namespace(name, true, host, apexes));
        }
        let gone: Vec<Arc<str>> = self
            .namespaces
            .keys()
            .filter(|n| !seen.contains(&***n))
            .cloned()
            .collect();
        for name in gone {
            ch.extend(self.namespace(&name, false, None, apexes));
        }
        let names: Vec<String> = self.namespaces.keys().map(|n| n.to_string()).collect();
        for n in names {
            self.rejudge_apex(&n, apexes, &mut ch);
        }
        self.rejudge_ingresses(None, "", apexes, &mut ch);
        ch
    }

    /// Object `kind` `namespace/name` (`namespace` ignored for Packages) with `uid`, as stored:
    /// `body` is the object or a projection that keeps at least `kind`'s paths.
    pub fn apply(
        &mut self,
        kind: GuardedKind,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        body: &Value,
        apexes: &dyn Apexes,
    ) -> Changes {
        let Some(key) = self.key(kind, namespace, name) else {
            return Changes::default();
        };
        let projected = project(kind, body);
        let packed = encode(kind, &projected, self.host(&key.namespace).as_deref());
        let uid = Uid::new(uid);
        let seen = self.generation(kind);
        if let Some(old) = self.stored_mut(&key)
            && old.same(&uid, Some(&packed))
        {
            old.seen = seen;
            return Changes::default();
        }
        let verdict = self.judge(&key, &projected, apexes);
        self.put(key, uid, Some(&packed), verdict)
    }

    /// Object `kind` `namespace/name` is stored but cannot be read (`why`): an error result
    /// naming it, the other objects unaffected.
    pub fn apply_unreadable(
        &mut self,
        kind: GuardedKind,
        namespace: &str,
        name: &str,
        why: &str,
    ) -> Changes {
        let Some(key) = self.key(kind, namespace, name) else {
            return Changes::default();
        };
        let verdict = judge::undecodable(kind, &key.namespace, name, why);
        self.put(key, Uid::Absent, None, verdict)
    }

    pub fn delete(&mut self, kind: GuardedKind, namespace: &str, name: &str) -> Changes {
        let mut ch = Changes::default();
        let Some(key) = self.key(kind, namespace, name) else {
            return ch;
        };
        let Some(state) = self.namespaces.get_mut(&key.namespace) else {
            return ch;
        };
        let Ok(i) = state.find(kind, name) else {
            return ch;
        };
        let old = state.objects.remove(i);
        self.objects -= 1;
        if kind == GuardedKind::Ingress
            && let Some(n) = self.ingresses.get_mut(&key.namespace)
        {
            *n -= 1;
            if *n == 0 {
                self.ingresses.remove(&key.namespace);
            }
        }
        self.count(kind, old.verdict(), -1);
        ch.namespaces.insert(key.namespace.clone());
        self.forget_if_empty(&key.namespace);
        ch
    }

    /// A relist of `kind` starts: objects it does not list again are removed at
    /// [`Self::relist_done`].
    pub fn relist_started(&mut self, kind: GuardedKind) {
        let r = self.relists.entry(kind).or_default();
        r.0 = r.0.wrapping_add(1);
        r.1 = true;
    }

    pub fn relist_done(&mut self, kind: GuardedKind) -> Changes {
        let mut ch = Changes::default();
        let Some((generation, true)) = self.relists.get(&kind).copied() else {
            return ch;
        };
        self.relists.insert(kind, (generation, false));
        let gone: Vec<(Arc<str>, Box<str>)> = self
            .namespaces
            .iter()
            .flat_map(|(ns, s)| {
                s.objects
                    .iter()
                    .filter(|o| o.kind == kind && o.seen != generation)
                    .map(move |o| (ns.clone(), Box::<str>::from(o.name())))
            })
            .collect();
        for (ns, name) in gone {
            ch.extend(self.delete(kind, &ns, &name));
        }
        // The lists grew while the objects came; they keep what they hold now.
        for s in self.namespaces.values_mut() {
            s.objects.shrink_to_fit();
        }
        ch
    }

    /// Every result of namespace `namespace` (`""`: the cluster-scoped objects): the
    /// namespace's own apex-table result, then one per object, in kind and name order.
    pub fn results(&self, namespace: &str) -> Vec<AuditResult> {
        let Some((ns, state)) = self.namespaces.get_key_value(namespace) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(v) = self.namespace_verdict(namespace) {
            out.push(namespace_result(namespace, v));
        }
        out.extend(state.objects.iter().map(|o| self.result(ns, o)));
        out
    }

    /// The namespaces that have results (`""` when a Package is held), sorted.
    pub fn namespaces_with_results(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .namespaces
            .iter()
            .filter(|(_, s)| s.apex != ApexRule::None || !s.objects.is_empty())
            .map(|(n, _)| n.to_string())
            .collect();
        out.sort_unstable();
        out
    }

    /// Every violation (fail or error), namespaces' apex findings first, then objects, each
    /// sorted by namespace, kind and name.
    pub fn violations(&self) -> Vec<AuditResult> {
        let mut spaces: Vec<(&Arc<str>, &Verdict)> = self.apex_failures.iter().collect();
        spaces.sort_by(|a, b| a.0.cmp(b.0));
        let mut objects: Vec<(&Arc<str>, &Stored)> = self
            .namespaces
            .iter()
            .flat_map(|(n, s)| s.objects.iter().map(move |o| (n, o)))
            .filter(|(_, o)| o.verdict().is_violation())
            .collect();
        objects.sort_by(|a, b| (a.0, a.1.kind, a.1.name()).cmp(&(b.0, b.1.kind, b.1.name())));
        spaces
            .into_iter()
            .map(|(n, v)| namespace_result(n, v))
            .chain(objects.into_iter().map(|(n, o)| self.result(n, o)))
            .collect()
    }

    /// Results counted: (namespaces with an apex-table result, objects).
    pub fn audited(&self) -> (usize, usize) {
        let spaces = self
            .namespaces
            .values()
            .filter(|s| s.apex != ApexRule::None)
            .count();
        (spaces, self.objects)
    }

    /// The current verdict of an object, if held (for an event about to be sent).
    pub fn verdict(&self, kind: GuardedKind, namespace: &str, name: &str) -> Option<&Verdict> {
        let key = self.key(kind, namespace, name)?;
        self.namespaces
            .get(&key.namespace)?
            .get(kind, name)
            .map(Stored::verdict)
    }

    /// The apex-table verdict of a namespace, if a rule applies to it.
    pub fn namespace_verdict(&self, name: &str) -> Option<&Verdict> {
        match self.namespaces.get(name)?.apex {
            ApexRule::None => None,
            ApexRule::Pass => Some(&PASS),
            ApexRule::Fail => self.apex_failures.get(name),
        }
    }

    fn key(&self, kind: GuardedKind, namespace: &str, name: &str) -> Option<Key> {
        if self.not_audited(kind).is_some() {
            return None;
        }
        let namespace = if kind.namespaced() {
            // Admission admits objects outside tenant scope unchecked: nothing to judge.
            if !self.cfg.in_tenant_scope(namespace) {
                return None;
            }
            intern(namespace)
        } else {
            intern("")
        };
        Some(Key {
            namespace,
            kind,
            name: name.into(),
        })
    }

    fn stored(&self, key: &Key) -> Option<&Stored> {
        self.namespaces
            .get(&key.namespace)?
            .get(key.kind, &key.name)
    }

    fn stored_mut(&mut self, key: &Key) -> Option<&mut Stored> {
        self.namespaces
            .get_mut(&key.namespace)?
            .get_mut(key.kind, &key.name)
    }

    fn generation(&self, kind: GuardedKind) -> u32 {
        self.relists.get(&kind).map_or(0, |r| r.0)
    }

    fn context(&self, namespace: &str) -> NamespaceContext {
        match self.namespaces.get(namespace) {
            Some(s) => judge::namespace_context(s.exists, s.host.as_deref()),
            None => NamespaceContext::NotFound,
        }
    }

    /// The host label of `namespace` as written: the store's packed projections of its
    /// objects are relative to it (`entry`'s module doc).
    fn host(&self, namespace: &str) -> Option<Arc<str>> {
        self.namespaces.get(namespace).and_then(|s| s.host.clone())
    }

    fn judge(&mut self, key: &Key, body: &Value, apexes: &dyn Apexes) -> Verdict {
        self.judgements += 1;
        let ctx = self.context(&key.namespace);
        judge::judge(
            key.kind,
            &key.namespace,
            &key.name,
            body,
            &ctx,
            apexes,
            &self.cfg,
        )
    }

    /// The projection of a held object, read back (`None`: it could not be read when it
    /// came), or the error result a bug in the packing would give.
    fn unpacked(&self, key: &Key) -> Option<Result<Value, Verdict>> {
        let body = self.stored(key)?.body()?;
        Some(
            decode(key.kind, body, self.host(&key.namespace).as_deref()).map_err(|e| {
                judge::undecodable(key.kind, &key.namespace, &key.name, &e.to_string())
            }),
        )
    }

    /// Keep `key` with its new verdict and report what that changed.
    fn put(&mut self, key: Key, uid: Uid, body: Option<&[u8]>, verdict: Verdict) -> Changes {
        let mut ch = Changes::default();
        let seen = self.generation(key.kind);
        let stored = Stored::new(key.kind, &key.name, &uid, body, verdict, seen);
        let state = self.namespaces.entry(key.namespace.clone()).or_default();
        let (was, uid_changed) = match state.find(key.kind, &key.name) {
            Ok(i) => {
                let mut old = std::mem::replace(&mut state.objects[i], stored);
                let uid_changed = old.uid() != uid;
                (Some(old.set_verdict(Verdict::Pass)), uid_changed)
            }
            Err(i) => {
                if state.objects.len() == state.objects.capacity() {
                    // Grown by half, not doubled: most namespaces hold a handful of objects,
                    // and a doubled list of 48-byte entries would be a third empty.
                    state
                        .objects
                        .reserve_exact((state.objects.len() / 2).max(1));
                }
                state.objects.insert(i, stored);
                self.objects += 1;
                if key.kind == GuardedKind::Ingress {
                    *self.ingresses.entry(key.namespace.clone()).or_default() += 1;
                }
                (None, true)
            }
        };
        let Some(now) = self.stored(&key).map(|s| s.verdict().clone()) else {
            return ch;
        };
        if let Some(w) = &was {
            self.count(key.kind, w, -1);
        }
        self.count(key.kind, &now, 1);
        if was.as_ref() != Some(&now) || uid_changed {
            ch.namespaces.insert(key.namespace.clone());
        }
        if now.is_violation() && !was.as_ref().is_some_and(Verdict::is_violation) {
            self.record_start(&key, &mut ch);
        }
        ch
    }

    fn record_start(&self, key: &Key, ch: &mut Changes) {
        if let Some(s) = self.stored(key) {
            let r = self.result(&key.namespace, s);
            ch.started.push(Started {
                message: r.messages.first().cloned().unwrap_or_default(),
                object: r.object,
                layer: r.layer,
            });
        }
    }

    fn count(&mut self, kind: GuardedKind, verdict: &Verdict, by: i64) {
        if verdict.is_violation() {
            *self.counts.entry((kind.layer(), kind.kind())).or_default() += by;
        }
    }

    fn rejudge(&mut self, key: &Key, apexes: &dyn Apexes, ch: &mut Changes) {
        let verdict = match self.unpacked(key) {
            None => return,
            Some(Ok(body)) => self.judge(key, &body, apexes),
            Some(Err(bug)) => bug,
        };
        let Some(stored) = self.stored_mut(key) else {
            return;
        };
        if stored.verdict() == &verdict {
            return;
        }
        let old = stored.set_verdict(verdict.clone());
        self.count(key.kind, &old, -1);
        self.count(key.kind, &verdict, 1);
        ch.namespaces.insert(key.namespace.clone());
        if verdict.is_violation() && !old.is_violation() {
            self.record_start(key, ch);
        }
    }

    fn rejudge_objects_in(&mut self, namespace: &Arc<str>, apexes: &dyn Apexes, ch: &mut Changes) {
        let keys: Vec<Key> = self
            .namespaces
            .get(namespace)
            .map(|s| {
                s.objects
                    .iter()
                    .filter(|o| o.kind.reads_apex())
                    .map(|o| Key {
                        namespace: namespace.clone(),
                        kind: o.kind,
                        name: o.name().into(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        for key in keys {
            self.rejudge(&key, apexes, ch);
        }
    }

    /// Ingresses (outside `except`) with a host under one of `apexes_changed` (every Ingress
    /// when `None`). A host is looked for in every string of the projection, split at commas
    /// and spaces as the server-alias annotation is: more than the layer reads, never less.
    fn rejudge_ingresses(
        &mut self,
        apexes_changed: Option<&[String]>,
        except: &str,
        apexes: &dyn Apexes,
        ch: &mut Changes,
    ) {
        let keys: Vec<Key> = self
            .ingresses
            .keys()
            .filter(|ns| &***ns != except)
            .filter_map(|ns| Some((ns, self.namespaces.get(ns)?)))
            .flat_map(|(ns, s)| {
                s.objects
                    .iter()
                    .filter(|o| o.kind == GuardedKind::Ingress)
                    .filter(|o| match (apexes_changed, o.body()) {
                        (_, None) => false,
                        (None, Some(_)) => true,
                        (Some(changed), Some(body)) => {
                            mentions_host_under(o.kind, body, s.host.as_deref(), changed)
                        }
                    })
                    .map(move |o| Key {
                        namespace: ns.clone(),
                        kind: o.kind,
                        name: o.name().into(),
                    })
            })
            .collect();
        for key in keys {
            self.rejudge(&key, apexes, ch);
        }
    }

    fn rejudge_apex(&mut self, name: &str, apexes: &dyn Apexes, ch: &mut Changes) {
        let Some(state) = self.namespaces.get(name) else {
            return;
        };
        let verdict = if state.exists {
            let host = state.host.clone();
            let owners = apex_key(host.as_deref()).map_or(0, |a| apexes.owners(&a).len());
            apex_table::findings(&self.cfg, name, host.as_deref(), owners)
        } else {
            None
        };
        let old = self.namespace_verdict(name).cloned();
        if old == verdict {
            return;
        }
        let Some(n) = self.namespaces.get_key_value(name).map(|(n, _)| n.clone()) else {
            return;
        };
        let Some(state) = self.namespaces.get_mut(name) else {
            return;
        };
        state.apex = match &verdict {
            None => ApexRule::None,
            Some(Verdict::Pass) => ApexRule::Pass,
            Some(_) => ApexRule::Fail,
        };
        match &verdict {
            Some(v) if v.is_violation() => {
                self.apex_failures.insert(n.clone(), v.clone());
            }
            _ => {
                self.apex_failures.remove(name);
            }
        }
        let key = (Layer::Namespace, NAMESPACE_KIND);
        let violating = |v: &Option<Verdict>| v.as_ref().is_some_and(Verdict::is_violation);
        *self.counts.entry(key).or_default() +=
            i64::from(violating(&verdict)) - i64::from(violating(&old));
        ch.namespaces.insert(n);
        if violating(&verdict)
            && !violating(&old)
            && let Some(v) = &verdict
        {
            let r = namespace_result(name, v);
            ch.started.push(Started {
                message: r.messages.first().cloned().unwrap_or_default(),
                object: r.object,
                layer: r.layer,
            });
        }
    }

    /// Drop the state of a namespace that holds nothing and is gone or of no rule's concern
    /// any more (outside tenant scope, no apex).
    fn forget_if_empty(&mut self, namespace: &str) {
        let tenant = self.cfg.in_tenant_scope(namespace);
        let gone = self.namespaces.get(namespace).is_some_and(|s| {
            s.objects.is_empty()
                && s.apex == ApexRule::None
                && (!s.exists || (!tenant && apex_key(s.host.as_deref()).is_none()))
        });
        if gone {
            self.namespaces.remove(namespace);
        }
    }

    fn result(&self, namespace: &str, s: &Stored) -> AuditResult {
        let api_version = self.api_version(s.kind);
        let (outcome, messages) = outcome_of(s.verdict());
        AuditResult {
            object: ObjectRef {
                api_version,
                kind: s.kind.kind().to_string(),
                namespace: namespace.to_string(),
                name: s.name().to_string(),
                uid: s.uid().get(),
            },
            layer: s.kind.layer(),
            rule: rule_of(s.kind.layer()),
            outcome,
            messages,
        }
    }
}

/// Whether `kind`'s layer is on but cannot run for want of the platform root apex (layer 8
/// without `--root-host`): `serve` refuses to start so, `check` answers ERROR.
fn lacks_root_host(cfg: &PolicyConfig, kind: GuardedKind) -> bool {
    kind.layer() == Layer::Ingress
        && cfg.enforcement.mode(Layer::Ingress) != Mode::Off
        && cfg.root_host.as_deref().is_none_or(str::is_empty)
}

/// Why `kind` is not judged with `cfg`, if it is not.
fn not_audited(cfg: &PolicyConfig, kind: GuardedKind) -> Option<String> {
    let layer = kind.layer();
    if cfg.enforcement.mode(layer) == Mode::Off {
        return Some(format!(
            "the {layer} layer is off (--enforcement {layer}=off)"
        ));
    }
    if lacks_root_host(cfg, kind) {
        return Some(
            "no --root-host: Ingress hosts cannot be judged without the platform root apex"
                .to_string(),
        );
    }
    None
}

fn outcome_of(v: &Verdict) -> (Outcome, Vec<String>) {
    match v {
        Verdict::Pass => (Outcome::Pass, Vec::new()),
        Verdict::Fail(m) => (Outcome::Fail, m.to_vec()),
        Verdict::Error(e) => (Outcome::Error, vec![e.to_string()]),
    }
}

fn namespace_result(name: &str, v: &Verdict) -> AuditResult {
    let (outcome, messages) = outcome_of(v);
    AuditResult {
        object: ObjectRef {
            api_version: "v1".to_string(),
            kind: NAMESPACE_KIND.to_string(),
            namespace: String::new(),
            name: name.to_string(),
            uid: None,
        },
        layer: Layer::Namespace,
        rule: rule_of(Layer::Namespace),
        outcome,
        messages,
    }
}

/// True when a string of the packed projection `body` (relative to `host`, its namespace's
/// label), split at commas and whitespace, is a hostname within one of `apexes` (lowercase).
fn mentions_host_under(
    kind: GuardedKind,
    body: &[u8],
    host: Option<&str>,
    apexes: &[String],
) -> bool {
    fn walk(v: &Value, apexes: &[String]) -> bool {
        match v {
            Value::String(s) => s
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|h| !h.is_empty())
                .any(|h| apexes.iter().any(|a| crate::hostname::within(h, a))),
            Value::Array(items) => items.iter().any(|i| walk(i, apexes)),
            Value::Object(m) => m.values().any(|i| walk(i, apexes)),
            _ => false,
        }
    }
    // An unreadable projection cannot be judged either; nothing to re-judge.
    decode(kind, body, host).is_ok_and(|v| walk(&v, apexes))
}

mod entry;
#[cfg(test)]
mod tests;
