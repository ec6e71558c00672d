//! `serve`'s continuous audit (SPEC §3.9): the namespace index's changes and a light watch
//! of each guarded kind feed the [`Store`]; every change updates the metrics
//! (`tenant_gateway_audit_violations{layer,kind}`,
//! `tenant_gateway_audit_last_change_timestamp_seconds`), wakes the [`ChangeFeed`]s, and an
//! object that starts violating gets a Warning event from the Lease holder.
//!
//! - Namespaces come from the index admission reads (subscribed, not watched again);
//!   HTTPRoutes, TLSRoutes and Gateways from the reconciler's watches when it runs
//!   ([`RouteFeed`]: one LIST/WATCH of each per process); the other guarded kinds (and
//!   these without the reconciler) are watched as projections ([`Projected`]: the uid and
//!   the fields their layer reads, decoded without the rest), each kind once its CRD is
//!   served, re-checked every [`CRD_RECHECK`] until then.
//! - Nothing is judged before the namespace index has synced, so an object is never found
//!   violating for want of a namespace the index has not listed yet.
//! - Results name each kind by the version the API server serves. A kind the reconciler's
//!   watch delivers counts as listed only once discovery has told that version too, so the
//!   first results handed out (the PolicyReports' input) never name a default version that
//!   a moment later changes and rewrites every report holding the kind.
//! - Events: queued per object (a set, at most [`EVENT_QUEUE`]), sent at most
//!   [`EVENTS_PER_SECOND`] a second while this replica holds the Lease, each checked against
//!   the object's current verdict when it is sent; a replica that gains the Lease sends what
//!   it queued meanwhile. Without a Lease (`--no-controller`) no event is sent.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::ApiResource;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::Event;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;

use super::cli::served;
use super::judge::Verdict;
use super::kinds::GuardedKind;
use super::project::{Projected, pack, project, unpack};
use super::store::{Apexes, Changes, Started, Store};
use super::{AuditResult, ObjectRef};
use crate::cluster::lease::Leader;
use crate::cluster::route_facts::RouteKind;
use crate::cluster::routes::{RouteWatchTap, WatchedRoute};
use crate::cluster::watch::{self as cw, Watched};
use crate::cluster::{LiveNamespaces, NamespaceChange};
use crate::metrics::Metrics;
use crate::platform::HOST_LABEL;
use crate::policy::PolicyConfig;

/// How often a kind whose CRD is not served is looked for again.
pub const CRD_RECHECK: Duration = Duration::from_secs(20);
/// Warning events sent per second at most.
pub const EVENTS_PER_SECOND: u32 = 10;
/// Objects waiting for their event at most; beyond, new ones get none (logged).
pub const EVENT_QUEUE: usize = 1024;

/// The continuous audit's results, shared with the parts that read them.
#[derive(Clone)]
pub struct Auditor {
    shared: Arc<Shared>,
}

struct Shared {
    store: Mutex<Store>,
    metrics: Metrics,
    feeds: Mutex<Vec<Weak<FeedState>>>,
    /// Kinds not judged, and why (a CRD not served yet, a layer the flags leave out).
    not_audited: Mutex<BTreeMap<GuardedKind, String>>,
    /// Kinds and the namespaces not listed yet; empty once everything listed once.
    unsynced: Mutex<BTreeSet<&'static str>>,
    synced: tokio::sync::watch::Sender<bool>,
    events: Option<EventQueue>,
}

impl Auditor {
    /// Every result of namespace `namespace` (`""`: the cluster-scoped Packages); see the
    /// module doc of `audit` for what they are.
    pub fn results(&self, namespace: &str) -> Vec<AuditResult> {
        self.shared.store().results(namespace)
    }

    /// The namespaces that have results, sorted.
    pub fn namespaces(&self) -> Vec<String> {
        self.shared.store().namespaces_with_results()
    }

    /// Every current violation.
    pub fn violations(&self) -> Vec<AuditResult> {
        self.shared.store().violations()
    }

    /// Kinds not judged now, and why.
    pub fn not_audited(&self) -> BTreeMap<GuardedKind, String> {
        lock(&self.shared.not_audited).clone()
    }

    /// True once the namespaces and every served kind were listed once.
    pub fn synced(&self) -> bool {
        *self.shared.synced.borrow()
    }

    /// A feed of the namespaces whose results change (see [`ChangeFeed::next`]).
    pub fn subscribe(&self) -> ChangeFeed {
        let state = Arc::new(FeedState {
            dirty: Mutex::new(Dirty::All),
            notify: Notify::new(),
        });
        lock(&self.shared.feeds).push(Arc::downgrade(&state));
        ChangeFeed {
            state,
            shared: self.shared.clone(),
        }
    }
}

/// Which namespaces' results changed since a feed last looked.
enum Dirty {
    /// Not looked yet: every namespace.
    All,
    Some(BTreeSet<String>),
}

struct FeedState {
    dirty: Mutex<Dirty>,
    notify: Notify,
}

/// The namespaces whose results change, for one reader.
pub struct ChangeFeed {
    state: Arc<FeedState>,
    shared: Arc<Shared>,
}

impl ChangeFeed {
    /// The namespaces whose results changed since the last call; the first call waits until
    /// the audit has listed everything once and returns every namespace with results. A
    /// namespace whose results are gone is among them (its results are then empty). Waits
    /// while nothing changes.
    pub async fn next(&mut self) -> BTreeSet<String> {
        let mut synced = self.shared.synced.subscribe();
        // The sender lives as long as `shared`, which this feed holds.
        let _ = synced.wait_for(|s| *s).await;
        loop {
            let notified = self.state.notify.notified();
            let taken =
                std::mem::replace(&mut *lock(&self.state.dirty), Dirty::Some(BTreeSet::new()));
            match taken {
                Dirty::All => {
                    return self
                        .shared
                        .store()
                        .namespaces_with_results()
                        .into_iter()
                        .collect();
                }
                Dirty::Some(set) if !set.is_empty() => return set,
                Dirty::Some(_) => notified.await,
            }
        }
    }
}

impl Shared {
    fn new(
        store: Store,
        metrics: Metrics,
        not_audited: BTreeMap<GuardedKind, String>,
        unsynced: BTreeSet<&'static str>,
        events: bool,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            store: Mutex::new(store),
            metrics,
            feeds: Mutex::new(Vec::new()),
            not_audited: Mutex::new(not_audited),
            unsynced: Mutex::new(unsynced),
            synced: tokio::sync::watch::channel(false).0,
            events: events.then(EventQueue::default),
        })
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        lock(&self.store)
    }

    /// Apply `f` to the store, then tell everyone what changed.
    fn change(&self, f: impl FnOnce(&mut Store) -> Changes) {
        let (ch, counts) = {
            let mut store = self.store();
            let ch = f(&mut store);
            let counts = (!ch.namespaces.is_empty()).then(|| store.counts().clone());
            (ch, counts)
        };
        if let Some(counts) = counts {
            for ((layer, kind), n) in counts {
                self.metrics
                    .audit_violations
                    .with_label_values(&[layer.as_str(), kind])
                    .set(n);
            }
            self.metrics.audit_last_change.set(unix_now());
            let mut feeds = lock(&self.feeds);
            feeds.retain(|f| f.strong_count() > 0);
            for feed in feeds.iter().filter_map(Weak::upgrade) {
                match &mut *lock(&feed.dirty) {
                    Dirty::All => {}
                    Dirty::Some(set) => set.extend(ch.namespaces.iter().map(|n| n.to_string())),
                }
                feed.notify.notify_one();
            }
        }
        if let Some(q) = &self.events {
            for s in ch.started {
                q.push(s);
            }
        }
    }

    fn listed(&self, what: &'static str) {
        let mut unsynced = lock(&self.unsynced);
        unsynced.remove(what);
        if unsynced.is_empty() {
            self.synced.send_replace(true);
        }
    }
}

/// Start the continuous audit on the namespace index `namespaces`. `leader` gates the Warning
/// events (none without it). The future runs the audit and ends only when the namespace
/// index's changes end (the process should end then).
///
/// `routes`: the route watches' events when another part watches HTTPRoutes and TLSRoutes
/// (the reconciler's route index, [`RouteFeed`]); without it the audit watches them itself.
pub fn start(
    client: Client,
    namespaces: Arc<LiveNamespaces>,
    cfg: Arc<PolicyConfig>,
    metrics: Metrics,
    leader: Option<Leader>,
    routes: Option<Arc<RouteFeed>>,
) -> (
    Auditor,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let store = Store::new(cfg);
    let mut not_audited = BTreeMap::new();
    let mut watched = Vec::new();
    for kind in GuardedKind::ALL {
        match store.not_audited(kind) {
            Some(reason) => {
                not_audited.insert(kind, reason);
            }
            None => watched.push(kind),
        }
    }
    // Every gauge exists from the start (0), so an alert on `> 0` sees the series.
    for ((layer, kind), n) in store.counts() {
        metrics
            .audit_violations
            .with_label_values(&[layer.as_str(), kind])
            .set(*n);
    }
    let mut unsynced: BTreeSet<&'static str> = watched.iter().map(|k| k.kind()).collect();
    unsynced.insert("Namespace");
    if routes.is_some() {
        unsynced.extend(watched.iter().filter_map(|k| version_key(*k)));
    }
    let shared = Shared::new(store, metrics, not_audited, unsynced, leader.is_some());
    let auditor = Auditor {
        shared: shared.clone(),
    };
    // Subscribed before anything is read: no namespace change falls in between.
    let changes = namespaces.subscribe();
    let run = async move {
        wait_for_index(&namespaces).await;
        resync(&shared, &namespaces);
        shared.listed("Namespace");
        if let (Some(q), Some(leader)) = (&shared.events, leader) {
            // Events are best effort: their sender ending stops nothing else.
            tokio::spawn(
                q.clone()
                    .send(client.clone(), leader, Arc::downgrade(&shared)),
            );
        }
        let mut watches = tokio::task::JoinSet::new();
        for kind in watched {
            if routes.is_some() && FED_KINDS.contains(&kind) {
                watches.spawn(follow_served(shared.clone(), client.clone(), kind));
            } else {
                watches.spawn(watch_kind(
                    shared.clone(),
                    client.clone(),
                    namespaces.clone(),
                    kind,
                ));
            }
        }
        if let Some(feed) = &routes {
            feed.open(&shared, namespaces.clone());
        }
        let any_watch_ended = async move {
            match watches.join_next().await {
                Some(_) => tracing::error!("an audit watch ended"),
                // No kind to watch: the namespaces alone.
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = follow_namespaces(&shared, &namespaces, changes) => {}
            () = any_watch_ended => {}
        }
    };
    (auditor, run)
}

async fn wait_for_index(namespaces: &LiveNamespaces) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while !namespaces.synced() {
        tick.tick().await;
    }
}

fn resync(shared: &Shared, namespaces: &LiveNamespaces) {
    let all = namespaces.all();
    shared.change(|store| {
        store.resync_namespaces(
            all.iter().map(|n| (n.name(), n.label(HOST_LABEL))),
            namespaces.apexes(),
        )
    });
}

async fn follow_namespaces(
    shared: &Shared,
    namespaces: &LiveNamespaces,
    mut changes: tokio::sync::broadcast::Receiver<NamespaceChange>,
) {
    loop {
        match changes.recv().await {
            Ok(NamespaceChange::Applied(name)) => {
                let meta = namespaces.cached(&name);
                let host = meta.as_ref().and_then(|m| m.label(HOST_LABEL));
                shared.change(|s| s.namespace(&name, meta.is_some(), host, namespaces.apexes()));
            }
            Ok(NamespaceChange::Deleted(name)) => {
                shared.change(|s| s.namespace(&name, false, None, namespaces.apexes()));
            }
            Ok(NamespaceChange::Resynced) | Err(RecvError::Lagged(_)) => resync(shared, namespaces),
            Err(RecvError::Closed) => {
                tracing::error!("namespace index ended; the audit sees no more namespace changes");
                return;
            }
        }
    }
}

/// The kinds the reconciler's watches deliver ([`RouteFeed`]): the routes and Gateways.
/// TenantGateways are not among them: the reconciler reads them through a typed reflector,
/// where one object that does not decode fails its whole page, and the audit must report
/// that object as an error with its name and judge the others (SPEC §3.9): their light
/// watch stays the audit's own.
const FED_KINDS: [GuardedKind; 3] = [
    GuardedKind::HttpRoute,
    GuardedKind::TlsRoute,
    GuardedKind::Gateway,
];

/// The key in [`Shared::unsynced`] of a [`FED_KINDS`] kind's served version. Its objects can
/// reach the store before discovery answers (another part's watch delivers them), and their
/// results name that version: the audit is not synced until it is known, so no report is
/// planned under the kind's default version and rewritten moments later.
fn version_key(kind: GuardedKind) -> Option<&'static str> {
    match kind {
        GuardedKind::HttpRoute => Some("HTTPRoute's served version"),
        GuardedKind::TlsRoute => Some("TLSRoute's served version"),
        GuardedKind::Gateway => Some("Gateway's served version"),
        _ => None,
    }
}

/// Wait until `kind` is served (re-checked every [`CRD_RECHECK`]); until then it is listed as
/// not audited, with nothing to list.
async fn wait_served(shared: &Shared, client: &Client, kind: GuardedKind) -> ApiResource {
    let mut told = false;
    let resource = loop {
        match served(client, kind).await {
            Ok(Some(r)) => break r,
            Ok(None) => {
                if !told {
                    tracing::info!(
                        kind = kind.kind(),
                        "not served by the API server; audited once its CRD is installed"
                    );
                    lock(&shared.not_audited).insert(
                        kind,
                        format!(
                            "{} {} is not served (its CRD is not installed)",
                            kind.group(),
                            kind.kind()
                        ),
                    );
                    // Nothing to list yet, under any version.
                    shared.listed(kind.kind());
                    if let Some(key) = version_key(kind) {
                        shared.listed(key);
                    }
                    told = true;
                }
            }
            Err(e) => {
                tracing::warn!(kind = kind.kind(), error = %e, "cannot tell whether the kind is served; retrying")
            }
        }
        tokio::time::sleep(CRD_RECHECK).await;
    };
    served_at(shared, kind, &resource.api_version);
    resource
}

/// `kind` is served at `api_version`: audited, its results named by that version.
fn served_at(shared: &Shared, kind: GuardedKind, api_version: &str) {
    lock(&shared.not_audited).remove(&kind);
    shared.change(|s| s.set_version(kind, api_version));
    if let Some(key) = version_key(kind) {
        shared.listed(key);
    }
}

/// A kind another part's watch delivers ([`RouteFeed`]): only whether it is served and at
/// which version is the audit's own to find out. Never ends (the watch's end ends its part).
async fn follow_served(shared: Arc<Shared>, client: Client, kind: GuardedKind) {
    wait_served(&shared, &client, kind).await;
    std::future::pending::<()>().await;
}

/// Watch `kind` once it is served, into the store.
async fn watch_kind(
    shared: Arc<Shared>,
    client: Client,
    namespaces: Arc<LiveNamespaces>,
    kind: GuardedKind,
) {
    let resource = wait_served(&shared, &client, kind).await;
    // A page's text is held at once: the kinds whose objects grow with their listeners list
    // fewer a page.
    let page = match kind {
        GuardedKind::Gateway
        | GuardedKind::ListenerSet
        | GuardedKind::XListenerSet
        | GuardedKind::TenantGateway => cw::LARGE_OBJECT_PAGE_SIZE,
        _ => cw::PAGE_SIZE,
    };
    let mut stream = std::pin::pin!(cw::guarded::<Projected>(
        client,
        &resource,
        kind.kind(),
        page
    ));
    let apexes = namespaces.apexes();
    while let Some(ev) = stream.next().await {
        let ev = match ev {
            Event::Init => Fed::Init,
            Event::InitApply(o) | Event::Apply(o) => {
                let (namespace, name) = o.key();
                Fed::Apply {
                    namespace,
                    name,
                    body: o.body,
                }
            }
            Event::Delete(o) => {
                let (namespace, name) = o.key();
                Fed::Delete { namespace, name }
            }
            Event::InitDone => Fed::InitDone,
        };
        apply(&shared, apexes, kind, ev);
    }
}

/// One event of a watch of a guarded kind, as the store takes it.
#[derive(Debug)]
enum Fed {
    Init,
    Apply {
        namespace: String,
        name: String,
        body: Result<Projected, Arc<str>>,
    },
    Delete {
        namespace: String,
        name: String,
    },
    InitDone,
}

fn apply(shared: &Shared, apexes: &dyn Apexes, kind: GuardedKind, ev: Fed) {
    match ev {
        Fed::Init => shared.store().relist_started(kind),
        Fed::Apply {
            namespace,
            name,
            body,
        } => shared.change(|s| match &body {
            Ok(p) => s.apply(kind, &namespace, &name, p.uid.as_deref(), &p.body, apexes),
            Err(e) => s.apply_unreadable(kind, &namespace, &name, e),
        }),
        Fed::Delete { namespace, name } => shared.change(|s| s.delete(kind, &namespace, &name)),
        Fed::InitDone => {
            shared.change(|s| s.relist_done(kind));
            shared.listed(kind.kind());
            tracing::info!(
                kind = kind.kind(),
                audited = shared.store().len(),
                "audit watch listed"
            );
        }
    }
}

/// The HTTPRoute, TLSRoute and Gateway watches' events, from the reconciler's watches that
/// fill the route index and its Gateway cache (`RouteIndex::tap`): each kind listed and
/// watched once per process, the audit keeping its own projection of each object (its uid
/// and what its layer reads, as stored). Until the audit judges
/// (the namespace index not listed yet) each route's latest version waits, packed as the
/// store keeps it (a relist starts its kind afresh), and is applied when it starts; later
/// events are applied as they arrive, on the watch's task (a few microseconds each).
pub struct RouteFeed {
    gate: Mutex<Gate>,
}

enum Gate {
    /// What each kind's events amount to so far.
    Waiting(BTreeMap<GuardedKind, Pending>),
    Open {
        shared: Arc<Shared>,
        namespaces: Arc<dyn ApexSource>,
    },
}

/// A route's uid and its projection packed (`project::pack`).
type PackedRoute = (Option<String>, Box<str>);

/// One kind's routes as its watch left them before the audit judged: the store holds none of
/// them yet, so each route's last version is all that matters.
#[derive(Default)]
struct Pending {
    /// By `(namespace, name)`: the uid and the projection packed (`project::pack`), or why
    /// the route could not be read.
    routes: BTreeMap<(String, String), Result<PackedRoute, Arc<str>>>,
    /// Its first list is complete.
    listed: bool,
}

impl Pending {
    fn take(&mut self, kind: GuardedKind, ev: Fed) {
        match ev {
            // A relist delivers every route again: those it leaves out are gone.
            Fed::Init => *self = Pending::default(),
            Fed::Apply {
                namespace,
                name,
                body,
            } => {
                let packed = body.map(|p| (p.uid, pack(kind, &project(kind, &p.body)).into()));
                self.routes.insert((namespace, name), packed);
            }
            Fed::Delete { namespace, name } => {
                self.routes.remove(&(namespace, name));
            }
            Fed::InitDone => self.listed = true,
        }
    }

    /// Into the store, as the events would have gone.
    fn apply(self, shared: &Shared, apexes: &dyn Apexes, kind: GuardedKind) {
        apply(shared, apexes, kind, Fed::Init);
        for ((namespace, name), packed) in self.routes {
            let body = packed.and_then(|(uid, text)| {
                // Packed by `take` from a projection: it reads back.
                unpack(kind, &text)
                    .map(|body| Projected { uid, body })
                    .map_err(|e| Arc::from(e.to_string()))
            });
            apply(
                shared,
                apexes,
                kind,
                Fed::Apply {
                    namespace,
                    name,
                    body,
                },
            );
        }
        if self.listed {
            apply(shared, apexes, kind, Fed::InitDone);
        }
    }
}

/// Where a judgement reads which namespaces carry which apex: the live namespace index.
trait ApexSource: Send + Sync {
    fn apexes(&self) -> &dyn Apexes;
}

impl ApexSource for LiveNamespaces {
    fn apexes(&self) -> &dyn Apexes {
        LiveNamespaces::apexes(self)
    }
}

impl RouteFeed {
    /// A feed to register on the route index before its watches start.
    pub fn new() -> Arc<RouteFeed> {
        Arc::new(RouteFeed {
            gate: Mutex::new(Gate::Waiting(BTreeMap::new())),
        })
    }

    /// Apply what waited, then every event as it arrives.
    fn open(&self, shared: &Arc<Shared>, namespaces: Arc<dyn ApexSource>) {
        let mut gate = lock(&self.gate);
        if let Gate::Waiting(waiting) = &mut *gate {
            for (kind, pending) in std::mem::take(waiting) {
                pending.apply(shared, namespaces.apexes(), kind);
            }
        }
        *gate = Gate::Open {
            shared: shared.clone(),
            namespaces,
        };
    }
}

impl RouteFeed {
    fn take(&self, kind: GuardedKind, ev: Fed) {
        // Under the gate: events of one kind reach the store in their order.
        let mut gate = lock(&self.gate);
        match &mut *gate {
            Gate::Waiting(waiting) => waiting.entry(kind).or_default().take(kind, ev),
            Gate::Open { shared, namespaces } => apply(shared, namespaces.apexes(), kind, ev),
        }
    }
}

/// A tapped watch's event as the store takes it; `projection` reads what the tap got of an
/// object.
fn fed<T>(event: &Event<Watched<T>>, projection: impl Fn(&T) -> Value) -> Fed {
    match event {
        Event::Init => Fed::Init,
        Event::InitApply(o) | Event::Apply(o) => {
            let (namespace, name) = o.key();
            Fed::Apply {
                namespace,
                name,
                body: match &o.body {
                    Ok(r) => Ok(Projected::of_projection(projection(r))),
                    Err(e) => Err(e.clone()),
                },
            }
        }
        Event::Delete(o) => {
            let (namespace, name) = o.key();
            Fed::Delete { namespace, name }
        }
        Event::InitDone => Fed::InitDone,
    }
}

impl RouteWatchTap for RouteFeed {
    fn event(&self, kind: RouteKind, event: &Event<Watched<WatchedRoute>>) {
        let kind = match kind {
            RouteKind::HttpRoute => GuardedKind::HttpRoute,
            RouteKind::TlsRoute => GuardedKind::TlsRoute,
        };
        self.take(kind, fed(event, |r| r.audited.clone()));
    }

    fn gateway_event(&self, event: &Event<Watched<Value>>) {
        self.take(GuardedKind::Gateway, fed(event, Value::clone));
    }
}

/// The objects waiting for their Warning event.
#[derive(Clone, Default)]
struct EventQueue {
    inner: Arc<QueueInner>,
}

/// `(kind, namespace, name)` of an object waiting for its event.
type Waiting = (String, String, String);

#[derive(Default)]
struct QueueInner {
    /// In arrival order, and the same as a set (an object waits once).
    pending: Mutex<(VecDeque<Started>, HashSet<Waiting>)>,
    notify: Notify,
}

impl EventQueue {
    fn push(&self, s: Started) {
        let mut p = lock(&self.inner.pending);
        let key = (
            s.object.kind.clone(),
            s.object.namespace.clone(),
            s.object.name.clone(),
        );
        if p.1.contains(&key) {
            return;
        }
        if p.0.len() >= EVENT_QUEUE {
            tracing::debug!(kind = %s.object.kind, name = %s.object.name, "audit event queue full; no event for this object");
            return;
        }
        p.1.insert(key);
        p.0.push_back(s);
        drop(p);
        self.inner.notify.notify_one();
    }

    fn pop(&self) -> Option<Started> {
        let mut p = lock(&self.inner.pending);
        let s = p.0.pop_front()?;
        p.1.remove(&(
            s.object.kind.clone(),
            s.object.namespace.clone(),
            s.object.name.clone(),
        ));
        Some(s)
    }

    /// Send the queued events, at most [`EVENTS_PER_SECOND`], while the Lease is held.
    async fn send(self, client: Client, leader: Leader, shared: Weak<Shared>) {
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "tenant-gateway".into(),
                instance: Some(crate::cluster::lease::identity()),
            },
        );
        let mut pace = tokio::time::interval(Duration::from_secs(1) / EVENTS_PER_SECOND);
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut claim = leader.watch();
        loop {
            let notified = self.inner.notify.notified();
            if lock(&self.inner.pending).0.is_empty() {
                notified.await;
                continue;
            }
            if !leader.is_leader() {
                if *claim.borrow_and_update() {
                    // Claimed but past the last renewal's deadline: the election decides soon.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                } else if claim.changed().await.is_err() {
                    // The election is gone: no Lease any more, nothing will be sent.
                    return;
                }
                continue;
            }
            pace.tick().await;
            let Some(started) = self.pop() else { continue };
            let Some(shared) = shared.upgrade() else {
                return;
            };
            // Still violating? The event carries the current message.
            let Some(message) = current_violation(&shared.store(), &started) else {
                continue;
            };
            let ev = KubeEvent {
                type_: EventType::Warning,
                reason: "PolicyViolation".into(),
                note: Some(clip_note(&message)),
                action: "Audit".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&ev, &reference(&started.object)).await {
                tracing::warn!(kind = %started.object.kind, name = %started.object.name, error = %e, "cannot record the audit event");
            }
        }
    }
}

/// The first message of the object's current violation, if it still violates.
fn current_violation(store: &Store, s: &Started) -> Option<String> {
    let o = &s.object;
    let verdict = match GuardedKind::ALL.into_iter().find(|k| k.kind() == o.kind) {
        Some(kind) => store.verdict(kind, &o.namespace, &o.name),
        None => store.namespace_verdict(&o.name),
    }?;
    match verdict {
        Verdict::Pass => None,
        Verdict::Fail(m) => m.first().cloned(),
        Verdict::Error(e) => Some(e.to_string()),
    }
}

fn reference(o: &ObjectRef) -> ObjectReference {
    ObjectReference {
        api_version: Some(o.api_version.clone()),
        kind: Some(o.kind.clone()),
        namespace: (!o.namespace.is_empty()).then(|| o.namespace.clone()),
        name: Some(o.name.clone()),
        uid: o.uid.clone(),
        ..ObjectReference::default()
    }
}

/// An event's note is at most 1 KiB.
fn clip_note(message: &str) -> String {
    const MAX: usize = 1024;
    if message.len() <= MAX {
        return message.to_string();
    }
    let mut end = MAX - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

// The store's maps stay consistent through a panic in one call (each change is applied
// whole or not at all per object), so a poisoned lock is read on.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use serde_json::json;

    use super::*;
    use crate::cluster::apex::ApexMap;

    /// An auditor without a cluster: its store fed by hand, as the watches feed it.
    fn detached(events: bool) -> (Auditor, Arc<Shared>) {
        let cfg = PolicyConfig {
            root_host: Some("example.org".into()),
            ..PolicyConfig::default()
        };
        let unsynced = BTreeSet::from(["Namespace"]);
        let shared = Shared::new(
            Store::new(Arc::new(cfg)),
            Metrics::new(),
            BTreeMap::new(),
            unsynced,
            events,
        );
        (
            Auditor {
                shared: shared.clone(),
            },
            shared,
        )
    }

    fn route(shared: &Shared, ns: &str, name: &str, hostname: &str) {
        let apexes = ApexMap::default();
        shared.change(|s| {
            s.apply(
                GuardedKind::HttpRoute,
                ns,
                name,
                Some("0b1e6f36-6a43-4d1c-9d5c-0d7f3f7f9a01"),
                &json!({"spec": {"hostnames": [hostname]}}),
                &apexes,
            )
        });
    }

    fn namespace(shared: &Shared, name: &str, host: &str) {
        let apexes = ApexMap::default();
        shared.change(|s| s.namespace(name, true, Some(host), &apexes));
    }

    #[test]
    fn a_feed_waits_for_the_first_listing_then_hands_out_what_changed() {
        let (auditor, shared) = detached(false);
        let mut feed = auditor.subscribe();
        namespace(&shared, "tenant-a", "a.example.org");
        namespace(&shared, "tenant-b", "b.example.org");
        route(&shared, "tenant-a", "web", "w.a.example.org");
        assert!(
            feed.next().now_or_never().is_none(),
            "nothing before the audit has listed everything"
        );
        shared.listed("Namespace");
        assert!(auditor.synced());
        let first = feed.next().now_or_never().expect("every namespace at once");
        assert_eq!(
            first,
            BTreeSet::from(["tenant-a".into(), "tenant-b".into()])
        );
        assert!(
            feed.next().now_or_never().is_none(),
            "nothing changed since"
        );
        // The same projection again: no change, no wake-up.
        route(&shared, "tenant-a", "web", "w.a.example.org");
        assert!(feed.next().now_or_never().is_none());
        route(&shared, "tenant-b", "api", "x.a.example.org");
        assert_eq!(
            feed.next().now_or_never(),
            Some(BTreeSet::from(["tenant-b".into()]))
        );
        let results = auditor.results("tenant-b");
        assert_eq!(results.len(), 2);
        assert_eq!(results[1].outcome, crate::audit::Outcome::Fail);
        // A second reader starts from everything.
        let mut other = auditor.subscribe();
        assert_eq!(other.next().now_or_never().map(|s| s.len()), Some(2));
        assert_eq!(auditor.namespaces(), ["tenant-a", "tenant-b"]);
        assert_eq!(auditor.violations().len(), 1);
    }

    /// A kind another part's watch delivers can be listed before discovery tells its served
    /// version: the feed waits for the version too, so its first value (what the
    /// PolicyReport writer plans from) never names the kind's default version. Found in CI:
    /// a restarted replica rewrote a report whose only change was the TLSRoute's
    /// `gateway.networking.k8s.io/v1alpha2` in place of `v1`.
    #[test]
    fn a_fed_kind_is_synced_only_once_its_served_version_is_known() {
        let (auditor, shared) = detached(false);
        let version = version_key(GuardedKind::HttpRoute).expect("a fed kind");
        lock(&shared.unsynced).extend(["HTTPRoute", version]);
        let mut feed = auditor.subscribe();
        let routes = RouteFeed::new();
        let tap: &dyn RouteWatchTap = &*routes;
        let http = RouteKind::HttpRoute;
        tap.event(http, &Event::Init);
        tap.event(
            http,
            &Event::InitApply(watched("tenant-a", "web", UID, json!(["w.a.example.org"]))),
        );
        tap.event(http, &Event::InitDone);
        namespace(&shared, "tenant-a", "a.example.org");
        shared.listed("Namespace");
        routes.open(&shared, Arc::new(ApexMap::default()));
        assert_eq!(auditor.results("tenant-a").len(), 2, "judged already");
        assert!(
            !auditor.synced() && feed.next().now_or_never().is_none(),
            "listed, but not synced before the version is known"
        );

        served_at(
            &shared,
            GuardedKind::HttpRoute,
            "gateway.networking.k8s.io/v1",
        );
        assert!(auditor.synced());
        assert_eq!(
            feed.next().now_or_never(),
            Some(BTreeSet::from(["tenant-a".into()]))
        );
        let route = auditor
            .results("tenant-a")
            .into_iter()
            .find(|r| r.object.kind == "HTTPRoute")
            .expect("the route's result");
        assert_eq!(route.object.api_version, "gateway.networking.k8s.io/v1");
        // The same version again changes nothing.
        served_at(
            &shared,
            GuardedKind::HttpRoute,
            "gateway.networking.k8s.io/v1",
        );
        assert!(feed.next().now_or_never().is_none());
    }

    /// Every kind another part's watch delivers has a version key, and no other kind has
    /// one (the audit's own watches learn the version before they list).
    #[test]
    fn version_keys_are_the_fed_kinds() {
        for kind in GuardedKind::ALL {
            assert_eq!(
                version_key(kind).is_some(),
                FED_KINDS.contains(&kind),
                "{kind:?}"
            );
        }
    }

    /// The PolicyReport writer's input: nothing before the first listing (a half-judged
    /// cluster would delete reports), then every namespace, then what each change touched.
    #[tokio::test]
    async fn the_policy_report_feed_follows_changes_and_relabels() {
        use crate::audit::policy_report::Outcome as R;
        use futures::poll;
        let (auditor, shared) = detached(false);
        namespace(&shared, "tenant-a", "a.example.org");
        namespace(&shared, "tenant-b", "b.example.org");
        route(&shared, "tenant-a", "web", "w.a.example.org");
        let (tx, mut rx) = tokio::sync::watch::channel(None);
        // Polled by hand: each poll runs the feed until it waits again.
        let mut follow = std::pin::pin!(crate::audit::policy_report::feed::follow(
            auditor.clone(),
            tx
        ));
        assert!(poll!(follow.as_mut()).is_pending());
        assert!(
            !rx.has_changed().expect("open"),
            "nothing before the audit has listed everything"
        );

        shared.listed("Namespace");
        assert!(poll!(follow.as_mut()).is_pending());
        assert!(rx.has_changed().expect("open"), "the first full map");
        let first = rx.borrow_and_update().clone().expect("judged");
        let outcomes = |m: &crate::audit::policy_report::ReportInput, ns: &str| -> Vec<R> {
            m.get(ns)
                .map(|r| r.iter().map(|r| r.outcome).collect())
                .unwrap_or_default()
        };
        assert_eq!(outcomes(&first, "tenant-a"), [R::Pass, R::Pass]);
        assert_eq!(outcomes(&first, "tenant-b"), [R::Pass]);
        // Nothing changed: nothing sent.
        assert!(poll!(follow.as_mut()).is_pending());
        assert!(!rx.has_changed().expect("open"));

        // A route in tenant-b: tenant-b's entry alone is new.
        route(&shared, "tenant-b", "api", "x.a.example.org");
        assert!(poll!(follow.as_mut()).is_pending());
        let second = rx.borrow_and_update().clone().expect("judged");
        assert_eq!(outcomes(&second, "tenant-b"), [R::Pass, R::Fail]);
        assert!(Arc::ptr_eq(&first["tenant-a"], &second["tenant-a"]));

        // tenant-a relabelled: its stored route turns wrong, then right again.
        namespace(&shared, "tenant-a", "a2.example.org");
        assert!(poll!(follow.as_mut()).is_pending());
        let relabelled = rx.borrow_and_update().clone().expect("judged");
        assert_eq!(outcomes(&relabelled, "tenant-a"), [R::Pass, R::Fail]);
        assert!(
            relabelled["tenant-a"][1].message.contains("a2.example.org"),
            "{:?}",
            relabelled["tenant-a"][1]
        );
        namespace(&shared, "tenant-a", "a.example.org");
        assert!(poll!(follow.as_mut()).is_pending());
        let fixed = rx.borrow_and_update().clone().expect("judged");
        assert_eq!(outcomes(&fixed, "tenant-a"), [R::Pass, R::Pass]);
    }

    #[test]
    fn changes_set_the_gauges_and_the_last_change() {
        let (_, shared) = detached(false);
        let gauge = || {
            shared
                .metrics
                .audit_violations
                .with_label_values(&["route", "HTTPRoute"])
                .get()
        };
        namespace(&shared, "tenant-a", "a.example.org");
        route(&shared, "tenant-a", "web", "w.b.example.org");
        assert_eq!(gauge(), 1);
        assert!(shared.metrics.audit_last_change.get() > 1_700_000_000);
        route(&shared, "tenant-a", "web", "w.a.example.org");
        assert_eq!(gauge(), 0);
    }

    #[test]
    fn an_object_waits_once_for_its_event_and_only_while_it_violates() {
        let (_, shared) = detached(true);
        namespace(&shared, "tenant-a", "a.example.org");
        route(&shared, "tenant-a", "web", "w.b.example.org");
        let q = shared.events.clone().expect("events on");
        // Fixed and broken again before its event went out: it waits once.
        route(&shared, "tenant-a", "web", "w.a.example.org");
        route(&shared, "tenant-a", "web", "x.b.example.org");
        let first = q.pop().expect("queued");
        assert_eq!(first.object.name, "web");
        assert!(q.pop().is_none(), "once");
        assert_eq!(
            current_violation(&shared.store(), &first).as_deref(),
            Some(
                "HTTPRoute tenant-a/web: hostname \"x.b.example.org\" is not allowed: hostnames \
                 must equal the namespace's namespace.cozystack.io/host label or be subdomains \
                 of it (a.example.org)"
            ),
            "the current message, not the one it started with"
        );
        route(&shared, "tenant-a", "web", "w.a.example.org");
        assert_eq!(
            current_violation(&shared.store(), &first),
            None,
            "fixed: no event"
        );
        // Bounded.
        for i in 0..EVENT_QUEUE + 10 {
            route(&shared, "tenant-a", &format!("r{i}"), "w.b.example.org");
        }
        let mut n = 0;
        while q.pop().is_some() {
            n += 1;
        }
        assert_eq!(n, EVENT_QUEUE);
        // Without a Lease nothing is queued at all.
        let (_, quiet) = detached(false);
        namespace(&quiet, "tenant-a", "a.example.org");
        route(&quiet, "tenant-a", "web", "w.b.example.org");
        assert!(quiet.events.is_none());
    }

    impl ApexSource for ApexMap {
        fn apexes(&self) -> &dyn Apexes {
            self
        }
    }

    /// A route watch's event as the route index's watch delivers it.
    fn watched(
        ns: &str,
        name: &str,
        uid: &str,
        hostnames: serde_json::Value,
    ) -> Watched<WatchedRoute> {
        let object = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "7",
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"hostnames": hostnames, "parentRefs": [{"name": "gw"}],
                     "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]},
            "status": {"parents": []}
        });
        // As the route watch decodes it while a tap listens.
        serde_json::from_value::<Watched<crate::cluster::routes::TappedRoute>>(object)
            .expect("a watched route")
            .map(|t| t.0)
    }

    const UID: &str = "0b1e6f36-6a43-4d1c-9d5c-0d7f3f7f9a01";

    /// Fed from the route index's watch: nothing is judged before the audit opens the feed
    /// (the namespaces listed), then what waited is applied in order; later events, a
    /// change, an apex relabel and a delete move the results as the audit's own watch does.
    #[test]
    fn the_route_feed_follows_the_shared_watch_changes_and_relabels() {
        let (auditor, shared) = detached(false);
        let feed = RouteFeed::new();
        let tap: &dyn RouteWatchTap = &*feed;
        let http = RouteKind::HttpRoute;
        tap.event(http, &Event::Init);
        tap.event(
            http,
            &Event::InitApply(watched("tenant-a", "gone", UID, json!(["g.a.example.org"]))),
        );
        // A relist (the watch reconnected) that no longer lists `gone`.
        tap.event(http, &Event::Init);
        tap.event(
            http,
            &Event::InitApply(watched("tenant-a", "web", UID, json!(["w.b.example.org"]))),
        );
        // Fixed before the audit judged anything: the later version wins.
        tap.event(
            http,
            &Event::InitApply(watched("tenant-a", "web", UID, json!(["w.a.example.org"]))),
        );
        tap.event(
            http,
            &Event::InitApply(watched("tenant-a", "odd", UID, json!("w.a.example.org"))),
        );
        tap.event(http, &Event::InitDone);
        assert!(
            auditor.results("tenant-a").is_empty(),
            "waits for the namespaces"
        );
        assert!(lock(&shared.unsynced).contains("Namespace"));

        namespace(&shared, "tenant-a", "a.example.org");
        namespace(&shared, "tenant-b", "b.example.org");
        feed.open(&shared, Arc::new(ApexMap::default()));
        let results = auditor.results("tenant-a");
        let outcome = |name: &str| {
            auditor
                .results("tenant-a")
                .into_iter()
                .find(|r| r.object.name == name)
                .map(|r| (r.outcome, r.messages))
        };
        assert_eq!(results.len(), 3, "the namespace, web and odd: {results:?}");
        assert_eq!(outcome("gone"), None, "left out of the relist");
        let web = results
            .iter()
            .find(|r| r.object.name == "web")
            .expect("web");
        assert_eq!(web.outcome, crate::audit::Outcome::Pass);
        assert_eq!(web.object.uid.as_deref(), Some(UID));
        assert_eq!(web.object.kind, "HTTPRoute");
        // hostnames as stored (a string, not a list): the layer's shape error, as the
        // audit's own projection gives it.
        assert_eq!(
            outcome("odd"),
            Some((
                crate::audit::Outcome::Error,
                vec!["HTTPRoute tenant-a/odd: spec.hostnames must be a list, got a string".into()]
            ))
        );

        // A change after the feed opened: applied as it arrives.
        tap.event(
            http,
            &Event::Apply(watched("tenant-a", "web", UID, json!(["w.b.example.org"]))),
        );
        assert_eq!(
            outcome("web").map(|o| o.0),
            Some(crate::audit::Outcome::Fail)
        );
        tap.event(
            http,
            &Event::Apply(watched("tenant-a", "web", UID, json!(["w.a.example.org"]))),
        );
        assert_eq!(
            outcome("web").map(|o| o.0),
            Some(crate::audit::Outcome::Pass)
        );

        // tenant-a relabelled: the fed route turns wrong, and right again.
        namespace(&shared, "tenant-a", "a2.example.org");
        let (o, messages) = outcome("web").expect("web");
        assert_eq!(o, crate::audit::Outcome::Fail);
        assert!(messages[0].contains("a2.example.org"), "{messages:?}");
        namespace(&shared, "tenant-a", "a.example.org");
        assert_eq!(
            outcome("web").map(|o| o.0),
            Some(crate::audit::Outcome::Pass)
        );

        tap.event(
            http,
            &Event::Delete(watched("tenant-a", "odd", UID, json!([]))),
        );
        assert_eq!(outcome("odd"), None, "deleted");
        // A relist that no longer lists `web` forgets it.
        tap.event(http, &Event::Init);
        tap.event(http, &Event::InitDone);
        assert_eq!(outcome("web"), None, "gone in the relist");
        assert_eq!(shared.store().len(), 0);
    }

    /// The shared watches decode what the audit's layer reads: the route kinds' paths are
    /// among those `WatchedRoute` keeps, the Gateway's among the Gateway watch's.
    #[test]
    fn the_shared_watches_keep_every_path_the_layers_read() {
        use crate::cluster::routes::{AUDITED_GATEWAY_PATHS, AUDITED_PATHS};
        for kind in [GuardedKind::HttpRoute, GuardedKind::TlsRoute] {
            for path in kind.paths() {
                assert!(AUDITED_PATHS.contains(path), "{kind}: {path:?}");
            }
        }
        for path in GuardedKind::Gateway.paths() {
            assert!(AUDITED_GATEWAY_PATHS.contains(path), "Gateway: {path:?}");
        }
        for paths in [AUDITED_PATHS, AUDITED_GATEWAY_PATHS] {
            assert!(paths.contains(&["metadata", "uid"].as_slice()));
        }
    }

    /// A Gateway watch's event as the reconciler's watch hands it to a tap: decoded as a
    /// `Gateway` for its cache and projected for the audit from the same JSON.
    fn gateway_event(
        ev: fn(Watched<Value>) -> Event<Watched<Value>>,
        name: &str,
        listeners: serde_json::Value,
    ) -> Event<Watched<Value>> {
        use crate::cluster::watch::{Tapped, split_tapped};
        use gateway_api::apis::experimental::gateways::Gateway;
        let object = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": "tenant-a", "uid": UID,
                         "resourceVersion": "7", "managedFields": [{"manager": "x"}]},
            "spec": {"gatewayClassName": "cilium", "listeners": listeners},
            "status": {"listeners": []}
        });
        let w: Watched<Tapped<Gateway>> =
            serde_json::from_value(object).expect("a watched Gateway");
        let (tapped, _) = split_tapped(Event::Apply(w));
        match tapped {
            Event::Apply(w) => ev(w),
            _ => unreachable!("an Apply splits into Applies"),
        }
    }

    /// Gateways fed from the reconciler's Gateway watch: a relist, a change, a delete, and
    /// a Gateway that its cache cannot decode still judged from what is stored; JSON that
    /// does not read at all is an error naming the object, the others judged.
    #[test]
    fn the_gateway_feed_follows_the_shared_watch() {
        let (auditor, shared) = detached(false);
        let feed = RouteFeed::new();
        let tap: &dyn RouteWatchTap = &*feed;
        let listener = |host: &str| json!([{"name": "https", "hostname": host, "port": 443, "protocol": "HTTPS"}]);
        tap.gateway_event(&Event::Init);
        tap.gateway_event(&gateway_event(
            Event::InitApply,
            "gone",
            listener("g.a.example.org"),
        ));
        tap.gateway_event(&Event::Init);
        tap.gateway_event(&gateway_event(
            Event::InitApply,
            "gw",
            listener("w.b.example.org"),
        ));
        // The listener's port is no number: the reconciler's typed cache skips this one, the
        // audit judges its listeners' hostnames as stored.
        tap.gateway_event(&gateway_event(
            Event::InitApply,
            "odd",
            json!([{"name": "https", "hostname": "x.b.example.org", "port": "443"}]),
        ));
        // Listeners of the wrong shape: the layer's shape error, naming the Gateway.
        tap.gateway_event(&gateway_event(Event::InitApply, "shape", json!("x")));
        // JSON the watch could not read: an error naming it.
        #[derive(Debug, Clone)]
        struct Unreadable;
        impl crate::cluster::watch::FromWatch for Unreadable {
            fn from_watch(_: &str) -> Result<Self, serde_json::Error> {
                Err(serde::de::Error::custom("not a Gateway"))
            }
        }
        let bad: Watched<Unreadable> = serde_json::from_value(
            json!({"metadata": {"name": "broken", "namespace": "tenant-a"}}),
        )
        .expect("the envelope reads");
        tap.gateway_event(&Event::InitApply(bad.map(|_| Value::Null)));
        tap.gateway_event(&Event::InitDone);
        namespace(&shared, "tenant-a", "a.example.org");
        feed.open(&shared, Arc::new(ApexMap::default()));
        let outcome = |name: &str| {
            auditor
                .results("tenant-a")
                .into_iter()
                .find(|r| r.object.kind == "Gateway" && r.object.name == name)
                .map(|r| (r.outcome, r.messages))
        };
        assert_eq!(outcome("gone"), None, "left out of the relist");
        let (o, m) = outcome("gw").expect("judged");
        assert_eq!(o, crate::audit::Outcome::Fail);
        assert!(m[0].contains("\"w.b.example.org\""), "{m:?}");
        assert_eq!(
            outcome("odd").map(|o| o.0),
            Some(crate::audit::Outcome::Fail)
        );
        let (o, m) = outcome("shape").expect("judged");
        assert_eq!(o, crate::audit::Outcome::Error);
        assert!(m[0].starts_with("Gateway tenant-a/shape: "), "{m:?}");
        let (o, m) = outcome("broken").expect("reported");
        assert_eq!(o, crate::audit::Outcome::Error);
        assert!(
            m[0].contains("broken") && m[0].contains("not a Gateway"),
            "{m:?}"
        );
        assert!(!lock(&shared.unsynced).contains("Gateway"));

        tap.gateway_event(&gateway_event(
            Event::Apply,
            "gw",
            listener("w.a.example.org"),
        ));
        assert_eq!(
            outcome("gw").map(|o| o.0),
            Some(crate::audit::Outcome::Pass)
        );
        tap.gateway_event(&gateway_event(Event::Delete, "odd", json!([])));
        assert_eq!(outcome("odd"), None, "deleted");
    }

    #[test]
    fn notes_are_clipped_to_a_kibibyte_on_a_character() {
        assert_eq!(clip_note("short"), "short");
        let long = "é".repeat(600);
        let c = clip_note(&long);
        assert!(c.len() <= 1024 && c.ends_with('…'), "{}", c.len());
    }

    #[test]
    fn references_leave_the_namespace_out_for_cluster_scoped_objects() {
        let o = ObjectRef {
            api_version: "cozystack.io/v1alpha1".into(),
            kind: "Package".into(),
            namespace: String::new(),
            name: "p".into(),
            uid: Some("u".into()),
        };
        let r = reference(&o);
        assert_eq!(r.namespace, None);
        assert_eq!(r.uid.as_deref(), Some("u"));
    }
}
