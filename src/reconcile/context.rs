//! What every reconcile shares: the reconciler's [`Options`], the caches filled by the shared
//! watches, the leader handle, metrics and the event recorder; and `gather`, which turns the caches into the plain
//! [`Inputs`] of one TenantGateway (no API call).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use gateway_api::apis::experimental::gateways::Gateway;
use gateway_api::apis::experimental::httproutes::HttpRoute;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::ApiResource;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

use super::api::TenantGateway;
use super::certmanager::{Certificate, Issuer};
use super::inputs::{Inputs, Observed, Sibling, TgwFacts};
use super::{Notice, Options};
use crate::cluster::LiveNamespaces;
use crate::cluster::kept::{Kept, KeptJson, ObjectCache};
use crate::cluster::lease::Leader;
use crate::cluster::nsmeta::NamespaceMeta;
use crate::cluster::routes::RouteIndex;
use crate::cluster::watch::{Key, key_of};
use crate::metrics::Metrics;
use crate::platform::Scope;

/// Which TenantGateway namespaces each namespace points at (gateway label, attached-by
/// annotation), kept from the namespace watch so a change can be mapped to the
/// TenantGateways it affects before and after, and so `gather` finds the inheriting
/// namespaces without scanning all of them.
#[derive(Default)]
pub struct NamespaceLinks {
    of: HashMap<String, (Option<String>, Option<String>)>,
    by_gateway: HashMap<String, BTreeSet<String>>,
    by_attached: HashMap<String, BTreeSet<String>>,
}

impl NamespaceLinks {
    /// Record namespace `name`'s links (`None`: deleted); returns the TenantGateway
    /// namespaces it pointed at before or points at now.
    pub fn update(
        &mut self,
        name: &str,
        links: Option<(Option<String>, Option<String>)>,
    ) -> BTreeSet<String> {
        let mut touched = BTreeSet::new();
        if let Some((g, a)) = self.of.remove(name) {
            if let Some(g) = g {
                unlink(&mut self.by_gateway, &g, name);
                touched.insert(g);
            }
            if let Some(a) = a {
                unlink(&mut self.by_attached, &a, name);
                touched.insert(a);
            }
        }
        if let Some((g, a)) = links {
            if let Some(g) = &g {
                self.by_gateway
                    .entry(g.clone())
                    .or_default()
                    .insert(name.to_string());
                touched.insert(g.clone());
            }
            if let Some(a) = &a {
                self.by_attached
                    .entry(a.clone())
                    .or_default()
                    .insert(name.to_string());
                touched.insert(a.clone());
            }
            if g.is_some() || a.is_some() {
                self.of.insert(name.to_string(), (g, a));
            }
        }
        touched
    }

    /// Namespaces whose gateway label or attached-by annotation names `gateway_ns`.
    pub fn linked_to(&self, gateway_ns: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for m in [&self.by_gateway, &self.by_attached] {
            if let Some(s) = m.get(gateway_ns) {
                out.extend(s.iter().cloned());
            }
        }
        out
    }

    pub fn clear(&mut self) {
        *self = NamespaceLinks::default();
    }
}

fn unlink(m: &mut HashMap<String, BTreeSet<String>>, key: &str, name: &str) {
    if let Some(s) = m.get_mut(key) {
        s.remove(name);
        if s.is_empty() {
            m.remove(key);
        }
    }
}

/// The links a namespace's metadata carries.
pub fn links_of(ns: &NamespaceMeta) -> (Option<String>, Option<String>) {
    (
        ns.gateway().map(str::to_string),
        ns.attached_by().map(str::to_string),
    )
}

/// The caches the shared watches fill (one watch per kind per process).
pub struct Caches {
    pub namespaces: Arc<LiveNamespaces>,
    pub links: RwLock<NamespaceLinks>,
    pub routes: Arc<RouteIndex>,
    pub gateways: ObjectCache<Kept<Gateway>>,
    pub issuers: ObjectCache<Kept<Issuer>>,
    pub certificates: ObjectCache<Kept<Certificate>>,
    /// HTTPRoutes that may be our redirect route (ours, or named like one), typed.
    pub redirects: ObjectCache<Kept<HttpRoute>>,
    /// Their objects without status: the statuses are kept in `tgw_statuses`.
    pub tgws: Store<TenantGateway>,
    pub tgw_statuses: TgwStatuses,
    pub http_route: ApiResource,
    /// Set once the TLSRoute CRD is served.
    pub tls_route: RwLock<Option<ApiResource>>,
    /// One flag per watch: its first list completed.
    pub synced: Vec<(&'static str, AtomicBool)>,
}

impl Caches {
    pub fn mark_synced(&self, what: &str) {
        for (k, f) in &self.synced {
            if *k == what {
                f.store(true, Ordering::Release);
            }
        }
    }

    /// Every watch has listed once (reconciling before that could prune what a slow watch
    /// has not delivered yet).
    pub fn all_synced(&self) -> bool {
        self.namespaces.synced() && self.synced.iter().all(|(_, f)| f.load(Ordering::Acquire))
    }

    pub fn unsynced(&self) -> Vec<&'static str> {
        self.synced
            .iter()
            .filter(|(_, f)| !f.load(Ordering::Acquire))
            .map(|(k, _)| *k)
            .collect()
    }
}

/// The statuses of the watched TenantGateways, kept beside the reflector's store instead of
/// in it: a status lists every listener (41 entries here, 6.5 KB decoded, ~1 KB deflated)
/// and is read once per reconcile of its own TenantGateway, while the store's objects are
/// scanned whole for siblings and rival claims. Filled from the same events as the store,
/// before the store sees them, so a reconcile finds the status of the object it was given or
/// a newer one.
#[derive(Default)]
pub struct TgwStatuses {
    inner: std::sync::Mutex<StatusesInner>,
}

type TgwStatus = super::api::TenantGatewayStatus;

#[derive(Default)]
struct StatusesInner {
    by_key: HashMap<Key, KeptJson<TgwStatus>>,
    relist: Option<HashSet<Key>>,
}

impl TgwStatuses {
    fn lock(&self) -> std::sync::MutexGuard<'_, StatusesInner> {
        // Plain maps behind the lock: still usable after a panic elsewhere.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves `t`'s status into the table (trimmed as the store's objects are) and returns
    /// the watch event with the status taken out.
    pub fn stash(&self, ev: Event<TenantGateway>) -> Event<TenantGateway> {
        match ev {
            Event::Apply(mut t) => {
                self.take(&mut t, false);
                Event::Apply(t)
            }
            Event::InitApply(mut t) => {
                self.take(&mut t, true);
                Event::InitApply(t)
            }
            Event::Delete(mut t) => {
                trim_tenant_gateway(&mut t);
                t.status = None;
                self.lock().by_key.remove(&key_of(&t.metadata));
                Event::Delete(t)
            }
            Event::Init => {
                self.lock().relist = Some(HashSet::new());
                Event::Init
            }
            Event::InitDone => {
                let mut g = self.lock();
                if let Some(seen) = g.relist.take() {
                    g.by_key.retain(|k, _| seen.contains(k));
                }
                Event::InitDone
            }
        }
    }

    fn take(&self, t: &mut TenantGateway, listing: bool) {
        trim_tenant_gateway(t);
        let key = key_of(&t.metadata);
        let kept = t.status.take().and_then(|s| {
            KeptJson::new(&s)
                .map_err(|e| tracing::warn!(error = %e, "a TenantGateway status does not encode"))
                .ok()
        });
        let mut g = self.lock();
        if listing && let Some(seen) = g.relist.as_mut() {
            seen.insert(key.clone());
        }
        match kept {
            Some(k) => {
                g.by_key.insert(key, k);
            }
            None => {
                g.by_key.remove(&key);
            }
        }
    }

    /// `t` with its status from the table; `t` itself when the table has none for it (a
    /// status-less object, or one that did not come through [`TgwStatuses::stash`]).
    pub fn restore(&self, t: Arc<TenantGateway>) -> Arc<TenantGateway> {
        let status = self.lock().by_key.get(&key_of(&t.metadata)).cloned();
        match status.and_then(|k| k.get()) {
            Some(s) => {
                let mut full = (*t).clone();
                full.status = Some(s);
                Arc::new(full)
            }
            None => t,
        }
    }

    pub fn len(&self) -> usize {
        self.lock().by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A watched TenantGateway as the reflector keeps it: without managedFields (a status with one
/// entry per listener makes them most of the object) and kubectl's last-applied copy, and with
/// its lists at their length (serde doubles a list's capacity as it grows: 41 listeners are
/// held in room for 64).
pub fn trim_tenant_gateway(t: &mut TenantGateway) {
    let m = &mut t.metadata;
    m.managed_fields = None;
    if let Some(a) = m.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    if let Some(f) = m.finalizers.as_mut() {
        f.shrink_to_fit();
    }
    if let Some(o) = m.owner_references.as_mut() {
        o.shrink_to_fit();
    }
    t.spec.attached_namespaces.shrink_to_fit();
    t.spec.tls_passthrough_services.shrink_to_fit();
    if let Some(s) = t.status.as_mut() {
        s.conditions.shrink_to_fit();
        s.listeners.shrink_to_fit();
    }
}

/// What the reconciler remembers per TenantGateway between reconciles (metrics, events,
/// backoff).
#[derive(Debug, Clone, Default)]
pub struct TgwState {
    pub mode: &'static str,
    pub conflicts: usize,
    pub over_cap: usize,
    pub notices: Vec<Notice>,
    pub failures: u32,
    /// The objects whose last write failed, each retried on its own backoff.
    pub writes: super::backoff::WriteBackoff,
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub opts: Options,
    pub caches: Arc<Caches>,
    pub leader: Leader,
    pub metrics: Metrics,
    pub recorder: Recorder,
    pub state: Mutex<HashMap<ObjectRef<TenantGateway>, TgwState>>,
    /// One permit per write in flight, shared by every reconcile: the API server is kept
    /// busy at the window it sustains (its write rate stops growing past ~64 in flight on
    /// two cores, `bench/reconcile` step 4), whatever the number of reconciles and the size
    /// of their plans.
    pub write_slots: tokio::sync::Semaphore,
    /// Where gather, plan and cleanup run: never on the runtime threads that answer
    /// admission, at most half the cores at once (SPEC §3.7).
    pub planner: super::planner::Planner,
}

impl Context {
    pub fn with_state<T>(
        &self,
        key: &ObjectRef<TenantGateway>,
        f: impl FnOnce(&mut TgwState) -> T,
    ) -> T {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(g.entry(key.clone()).or_default())
    }

    pub fn forget(&self, key: &ObjectRef<TenantGateway>) {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        g.remove(key);
        self.refresh_gauges(&g);
    }

    /// Recompute the gauges from the remembered states.
    pub fn publish_gauges(&self) {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh_gauges(&g);
    }

    fn refresh_gauges(&self, g: &HashMap<ObjectRef<TenantGateway>, TgwState>) {
        let mut modes: BTreeMap<&str, i64> = ["http01", "dns01", "existingSecret", "invalid"]
            .into_iter()
            .map(|m| (m, 0))
            .collect();
        let (mut conflicts, mut over) = (0i64, 0i64);
        for s in g.values() {
            *modes.entry(s.mode).or_default() += 1;
            conflicts += s.conflicts as i64;
            over += s.over_cap as i64;
        }
        for (m, n) in modes {
            if !m.is_empty() {
                self.metrics.tenantgateways.with_label_values(&[m]).set(n);
            }
        }
        self.metrics.hostname_conflicts.set(conflicts);
        self.metrics.listener_cap_overflow.set(over);
    }
}

/// The clock at whole seconds: condition times are stored at that precision, so a time
/// read back compares equal to the one written.
pub fn now() -> Time {
    let t = Timestamp::now();
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

/// The order that picks the one reconciled TenantGateway of a namespace (SPEC §3.7): oldest,
/// then smallest name; an object without a creation time (not stored yet) sorts last.
fn sibling_key(t: &TenantGateway) -> (bool, Option<Time>, Option<&str>) {
    (
        t.metadata.creation_timestamp.is_none(),
        t.metadata.creation_timestamp.clone(),
        t.metadata.name.as_deref(),
    )
}

pub fn tgw_facts(tgw: &TenantGateway) -> TgwFacts {
    TgwFacts {
        namespace: tgw.metadata.namespace.clone().unwrap_or_default(),
        name: tgw.metadata.name.clone().unwrap_or_default(),
        uid: tgw.metadata.uid.clone().unwrap_or_default(),
        generation: tgw.metadata.generation,
        creation: tgw.metadata.creation_timestamp.clone(),
        spec: tgw.spec.clone(),
        status: tgw.status.clone(),
    }
}

/// The inputs of one reconcile of `tgw`, from the caches only.
pub fn gather(tgw: &TenantGateway, caches: &Caches, scope: &Scope, now: Time) -> Inputs {
    let facts = tgw_facts(tgw);
    let ns = facts.namespace.clone();
    let all = caches.tgws.state();
    let siblings = all
        .iter()
        .filter(|t| t.metadata.namespace.as_deref() == Some(ns.as_str()))
        .map(|t| Sibling {
            name: t.metadata.name.clone().unwrap_or_default(),
            creation: t.metadata.creation_timestamp.clone(),
        })
        .collect();
    // Only TenantGateways that list one of our targets can contest them; of those only the
    // valid ones claim (SPEC §3.5): a blocked or dying one never makes us give a namespace up.
    let targets: BTreeSet<&str> = std::iter::once(ns.as_str())
        .chain(facts.spec.attached_namespaces.iter().map(String::as_str))
        .collect();
    let other_claims = all
        .iter()
        .filter(|t| t.metadata.uid != tgw.metadata.uid)
        .filter(|t| {
            t.spec
                .attached_namespaces
                .iter()
                .any(|a| targets.contains(a.as_str()))
        })
        .filter_map(|t| {
            let older_sibling = all.iter().any(|s| {
                s.metadata.namespace == t.metadata.namespace
                    && s.metadata.uid != t.metadata.uid
                    && sibling_key(s) < sibling_key(t)
            });
            let f = tgw_facts(t);
            let label = caches.namespaces.cached(&f.namespace);
            super::labels::valid_claim(
                &f,
                t.metadata.deletion_timestamp.is_some(),
                older_sibling,
                label.as_deref().and_then(NamespaceMeta::apex),
                scope,
            )
        })
        .collect();
    let mut names: BTreeSet<String> = BTreeSet::from([ns.clone()]);
    names.extend(facts.spec.attached_namespaces.iter().cloned());
    names.extend(
        caches
            .links
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .linked_to(&ns),
    );
    let namespaces = names
        .iter()
        .filter_map(|n| caches.namespaces.cached(n))
        .collect();
    // The routes of both Gateways, each once: SPEC §3.10's second one has routes to write
    // entries for in the `separate` layout, and to remove ours from in `shared`.
    let first = caches.routes.for_gateway(&ns, &facts.name);
    let second = caches
        .routes
        .for_gateway(&ns, &super::names::passthrough_gateway(&facts.name));
    let routes = first
        .values()
        .chain(
            second
                .values()
                .filter(|r| first.get(r.kind, &r.namespace, r.name()).is_none()),
        )
        .map(|r| (**r).clone())
        .collect();
    let observed = Observed {
        gateways: caches
            .gateways
            .in_namespace(&ns)
            .iter()
            .filter_map(|o| o.restore())
            .collect(),
        issuers: caches
            .issuers
            .in_namespace(&ns)
            .iter()
            .filter_map(|o| o.restore())
            .collect(),
        certificates: caches
            .certificates
            .in_namespace(&ns)
            .iter()
            .filter_map(|o| o.restore())
            .collect(),
        http_routes: caches
            .redirects
            .in_namespace(&ns)
            .iter()
            .filter_map(|o| o.restore())
            .collect(),
    };
    Inputs {
        tgw: facts,
        siblings,
        other_claims,
        namespaces,
        routes,
        observed,
        now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_report_old_and_new_targets() {
        let mut l = NamespaceLinks::default();
        let t = l.update("tenant-a", Some((Some("tenant-root".into()), None)));
        assert_eq!(t, BTreeSet::from(["tenant-root".to_string()]));
        assert_eq!(
            l.linked_to("tenant-root"),
            BTreeSet::from(["tenant-a".to_string()])
        );
        // Moved to another Gateway: both are touched.
        let t = l.update(
            "tenant-a",
            Some((Some("tenant-b".into()), Some("tenant-b".into()))),
        );
        assert_eq!(
            t,
            BTreeSet::from(["tenant-b".to_string(), "tenant-root".to_string()])
        );
        assert!(l.linked_to("tenant-root").is_empty());
        let t = l.update("tenant-a", None);
        assert_eq!(t, BTreeSet::from(["tenant-b".to_string()]));
        assert!(l.linked_to("tenant-b").is_empty());
        assert!(l.of.is_empty());
    }

    fn tgw(ns: &str, name: &str, listeners: usize) -> TenantGateway {
        let listeners: Vec<serde_json::Value> = (0..listeners)
            .map(|i| {
                serde_json::json!({"name": format!("https-h{i}"), "hostname": format!("h{i}.alice.example.org"),
                    "ready": i % 2 == 0, "certificateName": format!("gw-h{i}-tls"), "reason": if i % 2 == 0 { "" } else { "CertificatePending" }})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
            "metadata": {"namespace": ns, "name": name, "uid": "u",
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"apex": "alice.example.org"},
            "status": {"observedGeneration": 3,
                "conditions": [{"type": "Ready", "status": "False", "reason": "Pending",
                    "message": "waiting", "lastTransitionTime": "2026-12-01T10:00:00Z"}],
                "listeners": listeners}
        }))
        .expect("a TenantGateway")
    }

    fn stashed(ev: Event<TenantGateway>) -> TenantGateway {
        match ev {
            Event::Apply(t) | Event::InitApply(t) | Event::Delete(t) => t,
            Event::Init | Event::InitDone => panic!("not an object event"),
        }
    }

    #[test]
    fn tenant_gateway_statuses_are_kept_beside_the_store_and_restored_exactly() {
        let statuses = TgwStatuses::default();
        let original = tgw("alice", "gw", 41);
        let in_store = stashed(statuses.stash(Event::Apply(original.clone())));
        assert!(in_store.status.is_none(), "the store's copy has no status");
        assert!(
            in_store.metadata.managed_fields.is_none(),
            "trimmed as before"
        );
        let restored = statuses.restore(Arc::new(in_store.clone()));
        assert_eq!(restored.status, original.status);
        assert_eq!(restored.spec, original.spec);
        // A later version replaces the kept status; one without status removes it.
        let mut newer = original.clone();
        if let Some(s) = newer.status.as_mut() {
            s.listeners.truncate(3);
        }
        let in_store = stashed(statuses.stash(Event::Apply(newer.clone())));
        assert_eq!(statuses.restore(Arc::new(in_store)).status, newer.status);
        let mut bare = original.clone();
        bare.status = None;
        let in_store = stashed(statuses.stash(Event::Apply(bare)));
        assert!(statuses.restore(Arc::new(in_store)).status.is_none());
        assert!(statuses.is_empty());
    }

    #[test]
    fn tenant_gateway_statuses_follow_deletes_and_relists() {
        let statuses = TgwStatuses::default();
        for (ns, name) in [("alice", "gw"), ("bob", "gw"), ("carol", "gw")] {
            statuses.stash(Event::Apply(tgw(ns, name, 2)));
        }
        statuses.stash(Event::Delete(tgw("carol", "gw", 2)));
        assert_eq!(statuses.len(), 2);
        // A relist that sees only bob's forgets alice's.
        statuses.stash(Event::Init);
        statuses.stash(Event::InitApply(tgw("bob", "gw", 2)));
        assert_eq!(
            statuses.len(),
            2,
            "nothing dropped before the relist is done"
        );
        statuses.stash(Event::InitDone);
        assert_eq!(statuses.len(), 1);
        let mut alice = tgw("alice", "gw", 2);
        alice.status = None;
        assert!(
            statuses.restore(Arc::new(alice)).status.is_none(),
            "a forgotten status is not restored"
        );
        // An object the table never saw keeps its own status (tests fill stores directly).
        let own = tgw("dave", "gw", 1);
        assert_eq!(statuses.restore(Arc::new(own.clone())).status, own.status);
    }
}
