//! The route index (SPEC §3.3, §3.4): HTTPRoutes and TLSRoutes kept as projected facts, not
//! whole objects, grouped by the Gateway they reference (or carry our status entry for).
//! Copy-on-write per Gateway: a reconcile takes the `Arc` of one Gateway's routes and never
//! blocks the watch; an update clones only the map of the Gateways it touches. Beside each Gateway's routes, how it lists its HTTPS listeners
//! when its TenantGateway was seen (its certMode: the listener-budget warning counts only
//! per-hostname listeners).
//!
//! Whoever keeps something derived from a Gateway's routes (admission's per-Gateway route
//! summaries) follows the index ([`RouteFollower`]): it is told each route that changed on
//! each Gateway, under the index's write lock, and reads the routes with what it keeps under
//! the read lock ([`RouteIndex::read_gateway`]), so the two never disagree and one change
//! costs the follower that change, not a rebuild from every route on the Gateway.
//!
//! The facts (`route_facts`) are what the reconciler reads as its input and the admission
//! warnings compare against: the projection is written once, never converted.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::{Arc, RwLock, Weak};

use hashbrown::hash_table::{Entry, HashTable};

use gateway_api::apis::experimental::httproutes::HttpRoute;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde::Deserialize;
use serde_json::Value;

use super::intern::intern;
use super::projection::{Path, project_json};
use super::route_facts::{
    Conditions, HttpsListeners, ParentRef, ParentsLayout, PassthroughListener, RouteFacts,
    RouteFactsParts, RouteKind, RouteParentStatus, SharedRef,
};
use super::watch::{FromWatch, Key, Lenient, Watched};
use crate::platform::{
    CONTROLLER_NAME, GATEWAY_API_GROUP, MANAGED_BY_LABEL, MANAGED_BY_VALUE, TGW_KIND,
};

/// `(kind, namespace, name)` of a route (the namespace interned), for the index's bookkeeping:
/// the index itself holds the facts, which hold these.
pub type RouteKey = (RouteKind, Arc<str>, Box<str>);

/// One Gateway's routes, sorted by `(kind, namespace, name)`, each found by its borrowed
/// key. A sorted list, not a map: 8 bytes a route where a B-tree took a 40-byte copy of the
/// key and a value in nodes about two thirds full (~75 bytes a route), and a copy-on-write
/// clone is one copy of pointers. A change moves the pointers after it; the index copies the
/// whole list when a reader holds it anyway.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GatewayRoutes(Vec<Arc<RouteFacts>>);

impl GatewayRoutes {
    fn position(&self, kind: RouteKind, namespace: &str, name: &str) -> Result<usize, usize> {
        self.0
            .binary_search_by(|f| (f.kind, &*f.namespace, f.name()).cmp(&(kind, namespace, name)))
    }

    /// Route `kind` `namespace/name`, when it is indexed on this Gateway.
    pub fn get(&self, kind: RouteKind, namespace: &str, name: &str) -> Option<&Arc<RouteFacts>> {
        self.position(kind, namespace, name)
            .ok()
            .map(|i| &self.0[i])
    }

    /// The routes, in key order.
    pub fn values(&self) -> std::slice::Iter<'_, Arc<RouteFacts>> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Insert or replace the route with `facts`' key.
    fn insert(&mut self, facts: Arc<RouteFacts>) {
        match self.position(facts.kind, &facts.namespace, facts.name()) {
            Ok(i) => self.0[i] = facts,
            Err(i) => {
                super::kept::reserve_one(&mut self.0);
                self.0.insert(i, facts)
            }
        }
    }

    fn remove(&mut self, kind: RouteKind, namespace: &str, name: &str) {
        if let Ok(i) = self.position(kind, namespace, name) {
            self.0.remove(i);
        }
    }
}

impl FromIterator<Arc<RouteFacts>> for GatewayRoutes {
    /// The routes given, sorted; of routes with one key the last stays.
    fn from_iter<I: IntoIterator<Item = Arc<RouteFacts>>>(routes: I) -> GatewayRoutes {
        let mut out = GatewayRoutes::default();
        for r in routes {
            out.insert(r);
        }
        out
    }
}

/// The routes of a Gateway the index has none for.
static NO_ROUTES: GatewayRoutes = GatewayRoutes(Vec::new());

/// Keeps something derived from Gateways' routes, changed with them ([`RouteIndex::follow`]).
pub trait RouteFollower: Send + Sync {
    /// On Gateway `gateway`, route `old` (indexed there before; `None`: it was not) became
    /// `new` (indexed there now; `None`: gone from it); `routes` are the Gateway's routes
    /// after the change. Called under the index's write lock, in the order of the changes:
    /// it must not call the index.
    fn changed(
        &self,
        gateway: &Key,
        old: Option<&Arc<RouteFacts>>,
        new: Option<&Arc<RouteFacts>>,
        routes: &GatewayRoutes,
    );
}

/// The parts of a route the projection reads, decoded straight from its JSON: everything
/// else (rules, managedFields, annotations) is skipped without being built.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RouteView {
    #[serde(default)]
    metadata: MetaView,
    #[serde(default)]
    spec: Lenient<SpecView>,
    #[serde(default)]
    status: Lenient<StatusView>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaView {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    resource_version: Option<String>,
    // Read to tell a redirect route of ours from a tenant's route, not kept.
    #[serde(default)]
    labels: Lenient<BTreeMap<String, String>>,
    #[serde(default)]
    owner_references: Lenient<Vec<OwnerReference>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecView {
    #[serde(default)]
    hostnames: Lenient<Vec<Lenient<String>>>,
    #[serde(default)]
    parent_refs: Lenient<Vec<Lenient<ParentRefView>>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ParentRefView {
    group: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    #[serde(default)]
    name: String,
    section_name: Option<String>,
    port: Option<i64>,
}

impl ParentRefView {
    fn into_ref(self) -> Option<SharedRef> {
        (!self.name.is_empty()).then(|| {
            SharedRef::new(&ParentRef {
                group: self.group,
                kind: self.kind,
                namespace: self.namespace,
                name: self.name,
                section_name: self.section_name,
                port: self.port.and_then(|p| i32::try_from(p).ok()),
            })
        })
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
struct StatusView {
    #[serde(default)]
    parents: Lenient<Vec<EntryView>>,
}

/// One `status.parents` entry: only ours are decoded.
#[derive(Debug, Clone)]
enum EntryView {
    Others,
    /// Ours, with its parentRef when it has a name.
    Ours(Option<RouteParentStatus>),
}

impl<'de> Deserialize<'de> for EntryView {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Entry {
            #[serde(default)]
            controller_name: Lenient<String>,
            #[serde(default)]
            parent_ref: Lenient<ParentRefView>,
            #[serde(default)]
            conditions: Lenient<Vec<Condition>>,
        }
        let e = match Lenient::<Entry>::deserialize(d)? {
            Lenient::Ok(e) => e,
            Lenient::Absent | Lenient::Bad => return Ok(EntryView::Others),
        };
        if e.controller_name.ok().as_deref() != Some(CONTROLLER_NAME) {
            return Ok(EntryView::Others);
        }
        Ok(EntryView::Ours(
            e.parent_ref
                .ok()
                .and_then(ParentRefView::into_ref)
                .map(|parent_ref| RouteParentStatus {
                    parent_ref,
                    // Conditions that do not decode are rewritten by the next status write.
                    conditions: Conditions::observed(&e.conditions.ok().unwrap_or_default()),
                }),
        ))
    }
}

/// A watched HTTPRoute or TLSRoute: its projection, and the typed object when it may be our
/// redirect route (ours, or named like one, so a same-named route is seen and not taken over).
#[derive(Debug, Clone, Default)]
pub struct WatchedRoute {
    pub view: RouteView,
    pub redirect: Option<HttpRoute>,
    /// What the continuous audit reads of the route ([`AUDITED_PATHS`]), for the
    /// [`RouteWatchTap`]s; dropped with the event. `Null` unless decoded as a
    /// [`TappedRoute`].
    pub audited: Value,
}

/// A watched route with what the continuous audit reads of it ([`WatchedRoute::audited`]):
/// what the route watch decodes while a [`RouteWatchTap`] listens, and only then (a route's
/// projection costs ~2 KB of transient allocations, paid at every list and event).
#[derive(Debug, Clone, Default)]
pub struct TappedRoute(pub WatchedRoute);

impl FromWatch for TappedRoute {
    fn from_watch(raw: &str) -> Result<Self, serde_json::Error> {
        WatchedRoute::decode(raw, true).map(TappedRoute)
    }
}

/// The parts of a route the continuous audit judges (SPEC §3.9: layer 7 reads the
/// hostnames) and its uid, with their JSON types as stored.
pub const AUDITED_PATHS: &[Path] = &[&["metadata", "uid"], &["spec", "hostnames"]];

impl FromWatch for WatchedRoute {
    fn from_watch(raw: &str) -> Result<Self, serde_json::Error> {
        WatchedRoute::decode(raw, false)
    }
}

impl WatchedRoute {
    /// `audited`: with the audit's projection.
    fn decode(raw: &str, audited: bool) -> Result<Self, serde_json::Error> {
        let view: RouteView = serde_json::from_str(raw)?;
        let audited = if audited {
            project_json(raw, AUDITED_PATHS)?
        } else {
            Value::Null
        };
        let redirect = if view.is_redirect_candidate() {
            match serde_json::from_str::<HttpRoute>(raw) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::warn!(namespace = %view.metadata.namespace,
                        name = %view.metadata.name, error = %e,
                        "HTTPRoute named like a redirect route does not decode; skipped");
                    None
                }
            }
        } else {
            None
        };
        Ok(WatchedRoute {
            view,
            redirect,
            audited,
        })
    }
}

impl RouteView {
    /// Ours (managed-by label or our ownerReference) or named like our redirect route.
    pub fn is_redirect_candidate(&self) -> bool {
        let m = &self.metadata;
        let managed = match &m.labels {
            Lenient::Ok(l) => l
                .get(MANAGED_BY_LABEL)
                .is_some_and(|v| v == MANAGED_BY_VALUE),
            _ => false,
        };
        let owned = match &m.owner_references {
            Lenient::Ok(refs) => refs
                .iter()
                .any(|r| r.controller == Some(true) && r.kind == TGW_KIND),
            _ => false,
        };
        managed || owned || m.name.ends_with("-http-redirect")
    }

    /// The facts the reconciler reads. Malformed parts are dropped (a parentRef without a
    /// name, a hostname that is not a string, an entry of ours without a parentRef name);
    /// the route itself is always kept so its status can be written.
    pub fn facts(self, kind: RouteKind) -> RouteFacts {
        let RouteView {
            metadata: m,
            spec,
            status,
        } = self;
        let spec = spec.ok().unwrap_or_default();
        let hostnames = spec
            .hostnames
            .ok()
            .unwrap_or_default()
            .into_iter()
            .filter_map(Lenient::ok)
            .collect();
        let parent_refs = spec
            .parent_refs
            .ok()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| p.ok()?.into_ref())
            .collect();
        let mut our_status = Vec::new();
        let layout = match status {
            Lenient::Absent => Some(ParentsLayout::default()),
            Lenient::Bad => None,
            Lenient::Ok(st) => match st.parents {
                Lenient::Absent => Some(ParentsLayout {
                    status: true,
                    ..ParentsLayout::default()
                }),
                Lenient::Bad => None,
                Lenient::Ok(entries) => {
                    let mut exact = true;
                    let mut ours_at = Vec::new();
                    let len = entries.len();
                    for (i, e) in entries.into_iter().enumerate() {
                        match e {
                            EntryView::Others => {}
                            EntryView::Ours(Some(entry)) => {
                                our_status.push(entry);
                                ours_at.push(u32::try_from(i).unwrap_or(u32::MAX));
                            }
                            EntryView::Ours(None) => exact = false,
                        }
                    }
                    (exact && u32::try_from(len).is_ok()).then(|| ParentsLayout {
                        status: true,
                        parents: u32::try_from(len).ok(),
                        ours_at: ours_at.into(),
                    })
                }
            },
        };
        RouteFacts::from(RouteFactsParts {
            kind,
            namespace: intern(&m.namespace),
            name: m.name.into_boxed_str(),
            creation: m.creation_timestamp,
            generation: m.generation,
            resource_version: m.resource_version.map(String::into_boxed_str),
            hostnames,
            parent_refs,
            our_status: our_status.into(),
            parents_layout: layout,
        })
    }
}

/// Project an untyped route into the facts the reconciler reads (as the watch does from the
/// route's JSON).
pub fn project(kind: RouteKind, o: &DynamicObject) -> RouteFacts {
    serde_json::to_string(o)
        .ok()
        .and_then(|text| serde_json::from_str::<RouteView>(&text).ok())
        .unwrap_or_default()
        .facts(kind)
}

/// The Gateways a route is indexed under: those its parentRefs name, and those our status
/// entries name (so the finalizer and a detaching route still find it).
pub fn gateways_of(f: &RouteFacts) -> BTreeSet<Key> {
    f.parent_refs
        .iter()
        .chain(f.our_status.iter().map(|e| &e.parent_ref))
        .filter(|p| {
            p.group.as_deref().unwrap_or(GATEWAY_API_GROUP) == GATEWAY_API_GROUP
                && p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
        })
        .map(|p| {
            (
                p.namespace
                    .clone()
                    .unwrap_or_else(|| f.namespace.to_string()),
                p.name.clone(),
            )
        })
        .collect()
}

#[derive(Default)]
struct Inner {
    /// Every route once, found by its `(kind, namespace, name)`: a table of the facts alone
    /// (8 bytes a slot) rather than a map from a copy of the key (48 bytes a slot; the table
    /// has a power of two of them, 16,384 for 12,300 routes).
    routes: HashTable<Arc<RouteFacts>>,
    by_gateway: ByGateway,
    relist: HashMap<RouteKind, HashSet<RouteKey>>,
    /// How each Gateway whose TenantGateway was seen lists its HTTPS listeners, by the
    /// Gateway's key: a TenantGateway's Gateway carries its namespace and name (SPEC §3.2).
    listeners: hashbrown::HashMap<Key, HttpsListeners, foldhash::fast::RandomState>,
    /// The Gateways whose TenantGateway was seen since a relist of them started.
    listeners_relist: Option<HashSet<Key>>,
    /// The passthrough listeners of each http01 Gateway whose TenantGateway was seen and
    /// declares some (`route_facts::http01_passthrough`): their hostnames get no HTTPS
    /// listener (SPEC §3.10).
    passthrough: hashbrown::HashMap<Key, Arc<[PassthroughListener]>, foldhash::fast::RandomState>,
    /// Told of each change to a Gateway's routes.
    followers: Vec<Weak<dyn RouteFollower>>,
}

impl Inner {
    /// Tell the followers that on Gateway `gw` route `old` became `new`.
    fn notify(&self, gw: &Key, old: Option<&Arc<RouteFacts>>, new: Option<&Arc<RouteFacts>>) {
        if self.followers.is_empty() {
            return;
        }
        let routes = self
            .by_gateway
            .get(gw)
            .map_or(&NO_ROUTES, |routes| &**routes);
        for f in self.followers.iter().filter_map(Weak::upgrade) {
            f.changed(gw, old, new, routes);
        }
    }
}

/// Each Gateway's routes. Every review with warnings on looks its Gateways up here, so the
/// map is found by a borrowed key ([`GatewayOf`]) with foldhash: no two `String`s built and
/// no SipHash per lookup.
type ByGateway = hashbrown::HashMap<Key, Arc<GatewayRoutes>, foldhash::fast::RandomState>;

/// A Gateway's `(namespace, name)` borrowed. It hashes as the owned [`Key`] does: a tuple
/// and a tuple struct hash their fields in order, and `String` hashes as `str`.
#[derive(Hash)]
struct GatewayOf<'a>(&'a str, &'a str);

impl hashbrown::Equivalent<Key> for GatewayOf<'_> {
    fn equivalent(&self, k: &Key) -> bool {
        self.0 == k.0 && self.1 == k.1
    }
}

fn key_hash(kind: RouteKind, namespace: &str, name: &str) -> u64 {
    foldhash::fast::FixedState::with_seed(0).hash_one((kind, namespace, name))
}

fn hash_of(f: &Arc<RouteFacts>) -> u64 {
    key_hash(f.kind, &f.namespace, f.name())
}

fn is_route(kind: RouteKind, namespace: &str, name: &str) -> impl Fn(&Arc<RouteFacts>) -> bool {
    move |f| f.kind == kind && &*f.namespace == namespace && f.name() == name
}

/// What the continuous audit reads of a Gateway (SPEC §3.9: layer 2 reads its listeners'
/// names and hostnames) and its uid, with their JSON types as stored: the Gateway watch
/// decodes these beside the Gateway while a [`RouteWatchTap`] listens.
pub const AUDITED_GATEWAY_PATHS: &[Path] = &[
    &["metadata", "uid"],
    &["spec", "listeners", "name"],
    &["spec", "listeners", "hostname"],
];

/// A second reader of the watches that fill the index and the reconciler's Gateway cache
/// (the continuous audit, SPEC §3.9): told each event of the HTTPRoute, TLSRoute and Gateway
/// watches as it arrives, so each kind is listed and watched once per process. Called on
/// the watch's task, before the event is applied: it must not block.
pub trait RouteWatchTap: Send + Sync {
    fn event(&self, kind: RouteKind, event: &Event<Watched<WatchedRoute>>);
    /// An event of the Gateway watch: each Gateway's values on [`AUDITED_GATEWAY_PATHS`], or
    /// why its JSON could not be read.
    fn gateway_event(&self, event: &Event<Watched<Value>>);
}

/// Route facts per Gateway.
#[derive(Default)]
pub struct RouteIndex {
    inner: RwLock<Inner>,
    /// Told every event of the watches that fill the index.
    taps: RwLock<Vec<Arc<dyn RouteWatchTap>>>,
}

impl RouteIndex {
    /// Tell `tap` every event of the route watches from now on. Registered before the
    /// watches start, it sees every object from their first list on.
    pub fn tap(&self, tap: Arc<dyn RouteWatchTap>) {
        self.taps
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(tap);
    }

    /// True when a tap listens: the watch filling the index decodes what the taps read
    /// ([`TappedRoute`]).
    pub fn tapped(&self) -> bool {
        !self
            .taps
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// For the Gateway watch: tell the taps `event`.
    pub fn tell_gateway_taps(&self, event: &Event<Watched<Value>>) {
        for t in self.taps.read().unwrap_or_else(|p| p.into_inner()).iter() {
            t.gateway_event(event);
        }
    }

    /// For the watch filling the index: tell the taps `event` of `kind`'s watch.
    pub fn tell_taps(&self, kind: RouteKind, event: &Event<Watched<WatchedRoute>>) {
        for t in self.taps.read().unwrap_or_else(|p| p.into_inner()).iter() {
            t.event(kind, event);
        }
    }
}

impl RouteIndex {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        // Plain maps survive a panicking writer.
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The routes indexed under Gateway `namespace/name` (a snapshot).
    pub fn for_gateway(&self, namespace: &str, name: &str) -> Arc<GatewayRoutes> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.by_gateway
            .get(&GatewayOf(namespace, name))
            .cloned()
            .unwrap_or_default()
    }

    /// Gateway `namespace/name`'s routes ([`Self::for_gateway`]) and how it lists its HTTPS
    /// listeners when its TenantGateway was seen, in one read of the index.
    pub fn gateway(
        &self,
        namespace: &str,
        name: &str,
    ) -> (Arc<GatewayRoutes>, Option<HttpsListeners>) {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let key = GatewayOf(namespace, name);
        let routes = g.by_gateway.get(&key).cloned().unwrap_or_default();
        (routes, g.listeners.get(&key).copied())
    }

    /// Gateway `namespace/name`'s routes and how it lists its HTTPS listeners
    /// ([`Self::gateway`]), read by `f` under the index's read lock: what a follower keeps
    /// of the Gateway is then that of these routes. `f` must not call the index.
    pub fn read_gateway<R>(
        &self,
        namespace: &str,
        name: &str,
        f: impl FnOnce(&GatewayRoutes, Option<HttpsListeners>) -> R,
    ) -> R {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let key = GatewayOf(namespace, name);
        let routes = g.by_gateway.get(&key).map_or(&NO_ROUTES, |r| &**r);
        f(routes, g.listeners.get(&key).copied())
    }

    /// Tell `follower` of every later change to a Gateway's routes, until it is dropped.
    pub fn follow(&self, follower: Weak<dyn RouteFollower>) {
        let mut g = self.write();
        g.followers.retain(|f| f.strong_count() > 0);
        g.followers.push(follower);
    }

    /// Record how Gateway `namespace/name` lists its HTTPS listeners, from its TenantGateway
    /// (`None`: the TenantGateway is gone, or its certMode is not one the CRD allows).
    pub fn set_listeners(&self, namespace: &str, name: &str, listeners: Option<HttpsListeners>) {
        let mut g = self.write();
        let key = (namespace.to_string(), name.to_string());
        if let Some(seen) = g.listeners_relist.as_mut() {
            seen.insert(key.clone());
        }
        match listeners {
            Some(l) => {
                g.listeners.insert(key, l);
            }
            None => {
                g.listeners.remove(&key);
            }
        }
    }

    /// Record the passthrough listeners of Gateway `namespace/name` whose hostnames no
    /// HTTPRoute may claim, from its TenantGateway (`route_facts::http01_passthrough`; empty:
    /// none). Called beside [`Self::set_listeners`], whose relist bookkeeping covers it.
    pub fn set_passthrough(
        &self,
        namespace: &str,
        name: &str,
        listeners: Vec<PassthroughListener>,
    ) {
        let mut g = self.write();
        let key = GatewayOf(namespace, name);
        if listeners.is_empty() {
            g.passthrough.remove(&key);
        } else if g.passthrough.get(&key).map(|l| &l[..]) != Some(&listeners[..]) {
            g.passthrough
                .insert((namespace.to_string(), name.to_string()), listeners.into());
        }
    }

    /// Gateway `namespace/name`'s passthrough listeners whose hostnames no HTTPRoute may
    /// claim ([`Self::set_passthrough`]).
    pub fn passthrough(&self, namespace: &str, name: &str) -> Option<Arc<[PassthroughListener]>> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.passthrough.get(&GatewayOf(namespace, name)).cloned()
    }

    /// A relist of the TenantGateways starts: [`Self::set_listeners`] marks each one seen.
    pub fn listeners_relist_started(&self) {
        self.write().listeners_relist = Some(HashSet::new());
    }

    /// Forget the Gateways whose TenantGateway the relist did not see again.
    pub fn listeners_relist_done(&self) {
        let mut g = self.write();
        if let Some(seen) = g.listeners_relist.take() {
            g.listeners.retain(|k, _| seen.contains(k));
            g.passthrough.retain(|k, _| seen.contains(k));
        }
    }

    pub fn len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .routes
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// No route and no passthrough declaration: nothing a warning could come from.
    pub fn knows_nothing(&self) -> bool {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.routes.is_empty() && g.passthrough.is_empty()
    }

    /// Insert or replace a route; returns the Gateways whose routes changed.
    pub fn apply(&self, mut facts: RouteFacts) -> BTreeSet<Key> {
        let mut g = self.write();
        let hash = key_hash(facts.kind, &facts.namespace, facts.name());
        let found = is_route(facts.kind, &facts.namespace, facts.name());
        let (key, facts, old) = match g.routes.entry(hash, found, hash_of) {
            // The namespace already indexed, so the facts share it.
            Entry::Occupied(mut o) => {
                let seen = o.get();
                let key: RouteKey = (seen.kind, seen.namespace.clone(), Box::from(facts.name()));
                facts.namespace = key.1.clone();
                let facts = Arc::new(facts);
                let old = std::mem::replace(o.get_mut(), facts.clone());
                (key, facts, Some(old))
            }
            Entry::Vacant(v) => {
                facts.namespace = intern(&facts.namespace);
                let key: RouteKey = (facts.kind, facts.namespace.clone(), Box::from(facts.name()));
                let facts = Arc::new(facts);
                v.insert(facts.clone());
                (key, facts, None)
            }
        };
        if let Some(seen) = g.relist.get_mut(&key.0) {
            seen.insert(key.clone());
        }
        if old.as_deref() == Some(&*facts) {
            return BTreeSet::new();
        }
        let before = old.as_deref().map(gateways_of).unwrap_or_default();
        let after = gateways_of(&facts);
        for gw in before.difference(&after) {
            unindex(&mut g.by_gateway, gw, &key);
            g.notify(gw, old.as_ref(), None);
        }
        for gw in &after {
            let m = g.by_gateway.entry(gw.clone()).or_default();
            Arc::make_mut(m).insert(facts.clone());
            let was_here = old.as_ref().filter(|_| before.contains(gw));
            g.notify(gw, was_here, Some(&facts));
        }
        before.union(&after).cloned().collect()
    }

    /// Remove a route; returns the Gateways whose routes changed.
    pub fn delete(&self, kind: RouteKind, namespace: &str, name: &str) -> BTreeSet<Key> {
        let key: RouteKey = (kind, Arc::from(namespace), Box::from(name));
        let mut g = self.write();
        let Ok(found) = g.routes.find_entry(
            key_hash(kind, namespace, name),
            is_route(kind, namespace, name),
        ) else {
            return BTreeSet::new();
        };
        let (old, _) = found.remove();
        let gws = gateways_of(&old);
        for gw in &gws {
            unindex(&mut g.by_gateway, gw, &key);
            g.notify(gw, Some(&old), None);
        }
        gws
    }

    pub fn relist_started(&self, kind: RouteKind) {
        self.write().relist.insert(kind, HashSet::new());
    }

    /// Drop routes of `kind` the relist did not see again; returns the Gateways touched.
    pub fn relist_done(&self, kind: RouteKind) -> BTreeSet<Key> {
        let gone: Vec<RouteKey> = {
            let mut g = self.write();
            let Some(seen) = g.relist.remove(&kind) else {
                return BTreeSet::new();
            };
            g.routes
                .iter()
                .filter(|f| f.kind == kind)
                .map(|f| (f.kind, f.namespace.clone(), Box::from(f.name())))
                .filter(|k| !seen.contains(k))
                .collect()
        };
        gone.iter()
            .flat_map(|(k, ns, n)| self.delete(*k, ns, n))
            .collect()
    }
}

fn unindex(by_gateway: &mut ByGateway, gw: &Key, key: &RouteKey) {
    if let Some(m) = by_gateway.get_mut(gw) {
        Arc::make_mut(m).remove(key.0, &key.1, &key.2);
        if m.is_empty() {
            by_gateway.remove(gw);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::Value;

    #[test]
    fn a_gateway_is_found_by_its_borrowed_key() {
        let s = foldhash::fast::RandomState::default();
        for (ns, name) in [
            ("a", "b"),
            ("", ""),
            ("ab", ""),
            ("", "ab"),
            ("tenant-root", "gw"),
        ] {
            let owned: Key = (ns.to_string(), name.to_string());
            assert_eq!(s.hash_one(GatewayOf(ns, name)), s.hash_one(&owned));
        }
        // Moving a character between the two parts changes the hash and the answer.
        let mut m = ByGateway::default();
        m.insert(("ab".to_string(), "c".to_string()), Arc::default());
        assert!(m.get(&GatewayOf("ab", "c")).is_some());
        assert!(m.get(&GatewayOf("a", "bc")).is_none());
        assert!(m.get(&GatewayOf("ab", "")).is_none());
    }

    /// The sorted list answers as the map keyed by `RouteKey` it stands for: the same routes
    /// in the same order, found and replaced by key, over random inserts and removals.
    #[test]
    fn gateway_routes_answer_as_a_map_by_route_key() {
        let mut list = GatewayRoutes::default();
        let mut map: BTreeMap<RouteKey, Arc<RouteFacts>> = BTreeMap::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for step in 0..4_000 {
            let kind = if next(3) == 0 {
                RouteKind::TlsRoute
            } else {
                RouteKind::HttpRoute
            };
            // Names that are prefixes of one another, so the order is tested where it bites.
            let ns = ["a", "ab", "b", "a-b"][next(4) as usize];
            let name = ["r", "r1", "r10", "r2", "s"][next(5) as usize];
            let key: RouteKey = (kind, Arc::from(ns), Box::from(name));
            if next(4) == 0 {
                list.remove(kind, ns, name);
                map.remove(&key);
            } else {
                let f = Arc::new(RouteFacts::from(RouteFactsParts {
                    kind,
                    namespace: key.1.clone(),
                    name: key.2.clone(),
                    generation: Some(step),
                    ..RouteFactsParts::default()
                }));
                list.insert(f.clone());
                map.insert(key, f);
            }
            assert_eq!(list.len(), map.len(), "step {step}");
            assert!(
                list.values().eq(map.values()),
                "step {step}: the same routes in key order"
            );
            for (k, v) in &map {
                assert_eq!(list.get(k.0, &k.1, &k.2), Some(v), "step {step}");
            }
            assert_eq!(list.get(kind, ns, "absent"), None);
        }
        let collected: GatewayRoutes = map.values().rev().cloned().collect();
        assert_eq!(collected, list, "collected in any order: sorted");
    }

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("dynamic object")
    }

    fn route(ns: &str, name: &str, parent: Value, status: Value) -> DynamicObject {
        obj(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "7", "generation": 2},
            "spec": {"parentRefs": [parent], "hostnames": ["a.example.org", 5]},
            "status": status
        }))
    }

    #[test]
    fn projection_keeps_only_what_is_read() {
        let o = route(
            "tenant-a",
            "r",
            serde_json::json!({"name": "gw", "namespace": "tenant-root", "sectionName": "https-a"}),
            serde_json::json!({"parents": [
                {"controllerName": "other.io/c", "parentRef": {"name": "gw"}, "conditions": []},
                {"controllerName": CONTROLLER_NAME, "parentRef": {"name": "gw2"},
                 "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                   "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
                {"controllerName": CONTROLLER_NAME, "parentRef": {}}
            ]}),
        );
        let f = project(RouteKind::HttpRoute, &o);
        assert_eq!(
            f.hostnames().collect::<Vec<_>>(),
            ["a.example.org"],
            "a non-string hostname is dropped"
        );
        assert_eq!(f.parent_refs.len(), 1);
        assert_eq!(f.parent_refs[0].section_name.as_deref(), Some("https-a"));
        assert_eq!(f.our_status.len(), 1, "only our well-formed entries");
        assert_eq!(f.our_status[0].parent_ref.name, "gw2");
        let accepted: Condition = serde_json::from_value(serde_json::json!({"type": "Accepted",
            "status": "True", "reason": "Accepted", "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}))
        .expect("a condition");
        assert_eq!(
            f.our_status[0].conditions,
            Conditions::new(std::slice::from_ref(&accepted))
        );
        assert_eq!(
            f.our_status[0].conditions.accepted_since(true),
            Some(accepted.last_transition_time.clone())
        );
        assert_eq!(f.resource_version(), Some("7"));
        let gws = gateways_of(&f);
        assert_eq!(
            gws.into_iter().collect::<Vec<_>>(),
            [
                ("tenant-a".to_string(), "gw2".to_string()),
                ("tenant-root".to_string(), "gw".to_string())
            ]
        );
    }

    /// The audit's projection is decoded for a tap only: the index's own watch skips it.
    #[test]
    fn the_audit_projection_is_decoded_only_for_a_tap() {
        let raw = serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "web", "namespace": "a", "uid": "u-1"},
            "spec": {"hostnames": ["a.example.org", 5], "parentRefs": [{"name": "gw"}]}
        })
        .to_string();
        let plain = WatchedRoute::from_watch(&raw).expect("decodes");
        let tapped = TappedRoute::from_watch(&raw).expect("decodes").0;
        assert_eq!(plain.audited, Value::Null);
        assert_eq!(
            tapped.audited,
            serde_json::json!({"metadata": {"uid": "u-1"},
                               "spec": {"hostnames": ["a.example.org", 5]}})
        );
        assert_eq!(
            tapped.view.facts(RouteKind::HttpRoute),
            plain.view.facts(RouteKind::HttpRoute),
            "the same view either way"
        );
        let index = RouteIndex::default();
        assert!(!index.tapped());
        struct Deaf;
        impl RouteWatchTap for Deaf {
            fn event(&self, _: RouteKind, _: &Event<Watched<WatchedRoute>>) {}
            fn gateway_event(&self, _: &Event<Watched<Value>>) {}
        }
        index.tap(Arc::new(Deaf));
        assert!(index.tapped());
    }

    #[test]
    fn redirect_candidates_include_same_named_foreign_routes() {
        let watched = |meta: Value| {
            WatchedRoute::from_watch(
                &serde_json::json!({
                    "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                    "metadata": meta, "spec": {"parentRefs": [{"name": "gw"}]}
                })
                .to_string(),
            )
            .expect("decodes")
        };
        let named = watched(serde_json::json!({"name": "gw-http-redirect", "namespace": "a"}));
        assert!(
            named.redirect.is_some(),
            "must be seen to refuse a takeover"
        );
        let labelled = watched(serde_json::json!({"name": "x", "namespace": "a",
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}}));
        assert!(labelled.redirect.is_some());
        let owned = watched(serde_json::json!({"name": "y", "namespace": "a",
            "ownerReferences": [{"apiVersion": "gateway.cozystack.io/v1alpha1",
                "kind": TGW_KIND, "name": "gw", "uid": "1", "controller": true}]}));
        assert!(owned.redirect.is_some());
        let tenant = watched(serde_json::json!({"name": "harbor", "namespace": "a"}));
        assert!(
            tenant.redirect.is_none(),
            "tenant routes are kept as facts only"
        );
        assert_eq!(tenant.view.facts(RouteKind::HttpRoute).parent_refs.len(), 1);
    }

    #[test]
    fn status_layout_is_exact_or_absent() {
        let ours = |name: &str| {
            serde_json::json!({"controllerName": CONTROLLER_NAME,
            "parentRef": {"name": name}, "conditions": []})
        };
        let other =
            serde_json::json!({"controllerName": "io.cilium/x", "parentRef": {"name": "gw"}});
        let facts = |status: Value| {
            project(
                RouteKind::HttpRoute,
                &route("n", "r", serde_json::json!({"name": "gw"}), status),
            )
        };
        let f =
            facts(serde_json::json!({"parents": [other.clone(), ours("gw"), other, ours("gw2")]}));
        let layout = f.parents_layout().expect("exact");
        assert_eq!((layout.status, layout.parents), (true, Some(4)));
        assert_eq!(*layout.ours_at, [1, 3]);
        assert_eq!(f.our_status.len(), 2);
        assert_eq!(
            facts(Value::Null).parents_layout(),
            Some(ParentsLayout::default())
        );
        let no_list = facts(serde_json::json!({}))
            .parents_layout()
            .expect("exact");
        assert_eq!((no_list.status, no_list.parents), (true, None));
        assert_eq!(
            facts(serde_json::json!({"parents": "x"})).parents_layout(),
            None,
            "not a list: read before writing"
        );
        assert_eq!(
            facts(serde_json::json!({"parents": [
                {"controllerName": CONTROLLER_NAME, "parentRef": {}}]}))
            .parents_layout(),
            None,
            "an entry of ours without a name: read before writing"
        );
    }

    #[test]
    fn index_moves_a_route_between_gateways_copy_on_write() {
        let idx = RouteIndex::default();
        let a = project(
            RouteKind::HttpRoute,
            &route("n", "r", serde_json::json!({"name": "gw1"}), Value::Null),
        );
        let touched = idx.apply(a.clone());
        assert_eq!(touched.len(), 1);
        let snapshot = idx.for_gateway("n", "gw1");
        assert_eq!(snapshot.len(), 1);
        // The same facts again touch nothing.
        assert!(idx.apply(a).is_empty());
        let b = project(
            RouteKind::HttpRoute,
            &route("n", "r", serde_json::json!({"name": "gw2"}), Value::Null),
        );
        let touched = idx.apply(b);
        assert_eq!(touched.len(), 2, "old and new Gateway");
        assert!(idx.for_gateway("n", "gw1").is_empty());
        assert_eq!(
            snapshot.len(),
            1,
            "a reader's snapshot is not changed under it"
        );
        assert_eq!(idx.for_gateway("n", "gw2").len(), 1);
        assert_eq!(idx.delete(RouteKind::HttpRoute, "n", "r").len(), 1);
        assert!(idx.is_empty());
    }

    /// What a follower is told, per change and Gateway: (Gateway, old route's hostnames,
    /// new route's hostnames, routes on the Gateway after the change).
    type Told = (String, Option<Vec<String>>, Option<Vec<String>>, usize);

    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<Told>>);

    impl RouteFollower for Recorder {
        fn changed(
            &self,
            gateway: &Key,
            old: Option<&Arc<RouteFacts>>,
            new: Option<&Arc<RouteFacts>>,
            routes: &GatewayRoutes,
        ) {
            let hosts = |r: Option<&Arc<RouteFacts>>| {
                r.map(|r| r.hostnames().map(str::to_string).collect::<Vec<_>>())
            };
            self.0.lock().expect("not poisoned").push((
                gateway.1.clone(),
                hosts(old),
                hosts(new),
                routes.len(),
            ));
        }
    }

    /// A follower is told each change on each Gateway, in order, with the Gateway's routes
    /// after it; nothing when nothing changed; nothing once it is dropped.
    #[test]
    fn followers_are_told_each_change_per_gateway() {
        let idx = RouteIndex::default();
        let rec = Arc::new(Recorder::default());
        let follower: Weak<Recorder> = Arc::downgrade(&rec);
        idx.follow(follower);
        let on = |gw: &str, host: &str| {
            let mut r = project(
                RouteKind::HttpRoute,
                &route("n", "r", serde_json::json!({"name": gw}), Value::Null),
            );
            r.set_hostnames(&[host]);
            r
        };
        let told = || std::mem::take(&mut *rec.0.lock().expect("not poisoned"));
        let h = |s: &str| Some(vec![s.to_string()]);
        idx.apply(on("gw1", "a"));
        assert_eq!(told(), [("gw1".into(), None, h("a"), 1)]);
        idx.apply(on("gw1", "a"));
        assert_eq!(told(), [], "the same facts: no change");
        idx.apply(on("gw1", "b"));
        assert_eq!(told(), [("gw1".into(), h("a"), h("b"), 1)]);
        idx.apply(on("gw2", "c"));
        assert_eq!(
            told(),
            [
                ("gw1".into(), h("b"), None, 0),
                ("gw2".into(), None, h("c"), 1)
            ],
            "moved: gone from one Gateway, new on the other"
        );
        idx.read_gateway("n", "gw2", |routes, listeners| {
            assert_eq!((routes.len(), listeners), (1, None));
        });
        idx.read_gateway("n", "gw1", |routes, _| assert!(routes.is_empty()));
        idx.delete(RouteKind::HttpRoute, "n", "r");
        assert_eq!(told(), [("gw2".into(), h("c"), None, 0)]);
        let gone = Arc::downgrade(&rec);
        drop(rec);
        idx.apply(on("gw1", "a"));
        assert!(gone.upgrade().is_none());
        idx.follow(Weak::<Recorder>::new());
        assert_eq!(
            idx.inner.read().expect("not poisoned").followers.len(),
            1,
            "dropped followers are forgotten"
        );
    }

    #[test]
    fn routes_share_equal_parent_refs_and_a_change_is_seen() {
        let parent = serde_json::json!({"name": "gw-shared", "namespace": "tenant-root",
            "group": "gateway.networking.k8s.io", "kind": "Gateway"});
        let ours = serde_json::json!({"parents": [{"controllerName": CONTROLLER_NAME,
            "parentRef": parent.clone(), "conditions": [{"type": "Accepted", "status": "True",
            "reason": "Accepted", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]});
        let a = project(
            RouteKind::HttpRoute,
            &route("tenant-a", "a", parent.clone(), ours.clone()),
        );
        let b = project(
            RouteKind::HttpRoute,
            &route("tenant-b", "b", parent.clone(), ours.clone()),
        );
        let shared = |x: &SharedRef, y: &SharedRef| std::ptr::eq(&**x, &**y);
        assert!(shared(&a.parent_refs[0], &b.parent_refs[0]));
        assert!(shared(&a.parent_refs[0], &a.our_status[0].parent_ref));
        // Changing one route's copy leaves the shared value alone.
        let mut c = a.clone();
        c.parent_refs[0].section_name = Some("https-x".into());
        assert_eq!(a.parent_refs[0].section_name, None);
        assert_eq!(b.parent_refs[0].section_name, None);
        assert_ne!(a, c);

        let idx = RouteIndex::default();
        assert_eq!(idx.apply(a.clone()).len(), 1);
        assert!(
            idx.apply(a.clone()).is_empty(),
            "equal facts: nothing to do"
        );
        let mut status_changed = a.clone();
        let changed: Condition = serde_json::from_value(serde_json::json!({"type": "Accepted",
            "status": "True", "reason": "HostnameConflict", "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}))
        .expect("a condition");
        status_changed.our_status[0].conditions = vec![changed].into();
        assert_eq!(
            idx.apply(status_changed).len(),
            1,
            "a changed entry of ours is seen"
        );
        let mut section_changed = a;
        section_changed.parent_refs[0].section_name = Some("https-y".into());
        assert_eq!(
            idx.apply(section_changed).len(),
            1,
            "a changed parentRef too"
        );
    }

    #[test]
    fn listeners_follow_the_tenant_gateways_and_their_relist() {
        let idx = RouteIndex::default();
        idx.apply(project(
            RouteKind::HttpRoute,
            &route("n", "r", serde_json::json!({"name": "gw"}), Value::Null),
        ));
        assert_eq!(idx.gateway("n", "gw").1, None, "no TenantGateway seen");
        idx.set_listeners("n", "gw", Some(HttpsListeners::PerApex));
        idx.set_listeners("n", "other", Some(HttpsListeners::PerHostname));
        let (routes, listeners) = idx.gateway("n", "gw");
        assert_eq!(
            (routes.len(), listeners),
            (1, Some(HttpsListeners::PerApex))
        );
        assert_eq!(
            idx.gateway("n", "other"),
            (Arc::default(), Some(HttpsListeners::PerHostname)),
            "known without routes"
        );
        idx.set_listeners("n", "gw", None);
        assert_eq!(idx.gateway("n", "gw").1, None, "deleted");
        idx.set_listeners("n", "gw", Some(HttpsListeners::PerHostname));
        idx.listeners_relist_started();
        idx.set_listeners("n", "gw", Some(HttpsListeners::PerHostname));
        idx.listeners_relist_done();
        assert_eq!(idx.gateway("n", "gw").1, Some(HttpsListeners::PerHostname));
        assert_eq!(
            idx.gateway("n", "other").1,
            None,
            "not listed again: gone while disconnected"
        );
    }

    #[test]
    fn certmode_reads_as_the_crd_writes_it() {
        for (mode, want) in [
            (None, Some(HttpsListeners::PerHostname)),
            (Some("http01"), Some(HttpsListeners::PerHostname)),
            (Some("dns01"), Some(HttpsListeners::PerApex)),
            (Some("existingSecret"), Some(HttpsListeners::PerApex)),
            (Some("DNS01"), None),
            (Some(""), None),
        ] {
            assert_eq!(HttpsListeners::of_cert_mode(mode), want, "{mode:?}");
        }
    }

    #[test]
    fn relist_removes_routes_deleted_while_disconnected() {
        let idx = RouteIndex::default();
        for n in ["a", "b"] {
            idx.apply(project(
                RouteKind::HttpRoute,
                &route("n", n, serde_json::json!({"name": "gw"}), Value::Null),
            ));
        }
        // A route of the other kind, same name, not seen by this relist: it stays.
        idx.apply(project(
            RouteKind::TlsRoute,
            &route("n", "b", serde_json::json!({"name": "gw"}), Value::Null),
        ));
        idx.relist_started(RouteKind::HttpRoute);
        idx.apply(project(
            RouteKind::HttpRoute,
            &route("n", "a", serde_json::json!({"name": "gw"}), Value::Null),
        ));
        let touched = idx.relist_done(RouteKind::HttpRoute);
        assert_eq!(touched.len(), 1);
        assert_eq!(idx.len(), 2);
        let left: Vec<RouteKey> = idx
            .for_gateway("n", "gw")
            .values()
            .map(|f| (f.kind, f.namespace.clone(), Box::from(f.name())))
            .collect();
        assert_eq!(
            left,
            [
                (RouteKind::HttpRoute, "n".into(), "a".into()),
                (RouteKind::TlsRoute, "n".into(), "b".into()),
            ]
        );
    }
}
