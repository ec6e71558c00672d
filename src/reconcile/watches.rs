//! The shared watches that feed the controller (SPEC §3.7), and the fan-out from a watch
//! event to the TenantGateways it affects.
//!
//! One watch per kind per process: the Namespace reflector of the webhook (subscribed, not
//! duplicated), HTTPRoutes, TLSRoutes (once their CRD is served), Gateways, Issuers,
//! Certificates (once cert-manager's CRDs are served) and TenantGateways. Each watch task
//! updates its cache ([`Caches`]) first and only then sends the TenantGateways it affects to
//! the controller (the [`Trigger`]), so a reconcile always sees at least the change that
//! woke it.
//!
//! | concern | items |
//! |---|---|
//! | start every watch, wait for their first lists | [`spawn`], [`synced`] |
//! | namespaces → TenantGateways (links, attachments) | `watch_namespaces`, `rebuild_links`, `tgws_in` |
//! | routes → the Gateways they name → their TenantGateways; the redirect routes kept | `watch_routes`, `gateway_tgws` |
//! | Gateways, Issuers, Certificates → their owner (a Gateway also by name, `<name>` or `<name>-passthrough`) | `watch_owned`, `owner_of`, `gateway_tgws`, the `Split` impls |
//! | the route and Gateway watches' events told to the route index's taps (the continuous audit) | `watch_routes`, `gateway_events` |
//! | TenantGateways → siblings and rivals | [`tenant_gateways`], `related` |
//! | TenantGateways → their Gateway's listener layout in the route index (certMode) | `record_listeners` |
//! | optional CRDs (TLSRoute, cert-manager) | `wait_served` |

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::channel::mpsc::UnboundedSender;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use gateway_api::apis::experimental::gateways::{Gateway, GatewaySpec, GatewayStatus};
use gateway_api::apis::experimental::httproutes::{HttpRoute, HttpRouteSpec, HttpRouteStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use tokio::sync::broadcast::error::RecvError;

use super::api::TenantGateway;
use super::certmanager::{
    Certificate, CertificateSpec, CertificateStatus, Issuer, IssuerSpec, IssuerStatus,
};
use super::context::{Caches, links_of};
use super::inputs::RouteKind;
use crate::cluster::NamespaceChange;
use crate::cluster::kept::{Kept, ObjectCache, Split};
use crate::cluster::route_facts::{HttpsListeners, http01_passthrough};
use crate::cluster::routes::{AUDITED_GATEWAY_PATHS, RouteIndex, TappedRoute, WatchedRoute};
use crate::cluster::watch::{self as cw, FromWatch, Key, TapPaths, Tapped, Watched};
use crate::platform::{GATEWAY_API_GROUP, TGW_KIND};

/// How often an optional CRD (TLSRoute, cert-manager) is looked for until it is served.
const CRD_RECHECK: Duration = Duration::from_secs(20);

/// Where a watch sends the TenantGateways to reconcile.
pub type Trigger = UnboundedSender<ObjectRef<TenantGateway>>;

fn tgw_ref(namespace: &str, name: &str) -> ObjectRef<TenantGateway> {
    ObjectRef::new(name).within(namespace)
}

/// The TenantGateway controlling an object (our ownerReference).
fn owner_of(namespace: &str, meta: &ObjectMeta) -> Option<ObjectRef<TenantGateway>> {
    meta.owner_references
        .as_ref()
        .and_then(|refs| {
            refs.iter()
                .find(|r| r.controller == Some(true) && r.kind == TGW_KIND)
        })
        .map(|r| tgw_ref(namespace, &r.name))
}

macro_rules! owned_kinds {
    ($($t:ty => $spec:ty, $status:ty);* $(;)?) => {$(
        impl FromWatch for $t {
            fn from_watch(raw: &str) -> Result<Self, serde_json::Error> {
                serde_json::from_str(raw)
            }
        }

        impl Split for $t {
            type Spec = $spec;
            type Status = $status;
            fn split(self) -> (ObjectMeta, $spec, Option<$status>) {
                (self.metadata, self.spec, self.status)
            }
            fn join(metadata: ObjectMeta, spec: $spec, status: Option<$status>) -> Self {
                Self { metadata, spec, status }
            }
        }
    )*};
}

owned_kinds! {
    Gateway => GatewaySpec, GatewayStatus;
    Issuer => IssuerSpec, IssuerStatus;
    Certificate => CertificateSpec, CertificateStatus;
}

impl TapPaths for Gateway {
    const TAP_PATHS: &'static [crate::cluster::projection::Path] = AUDITED_GATEWAY_PATHS;
}

// The redirect route arrives with the route watch (`WatchedRoute`); only kept like the others.
impl Split for HttpRoute {
    type Spec = HttpRouteSpec;
    type Status = HttpRouteStatus;
    fn split(self) -> (ObjectMeta, HttpRouteSpec, Option<HttpRouteStatus>) {
        (self.metadata, self.spec, self.status)
    }
    fn join(metadata: ObjectMeta, spec: HttpRouteSpec, status: Option<HttpRouteStatus>) -> Self {
        Self {
            metadata,
            spec,
            status,
        }
    }
}

/// Start every watch but the TenantGateways' (that one is the controller's own stream,
/// [`tenant_gateways`]).
pub fn spawn(client: &Client, caches: &Arc<Caches>, trigger: &Trigger) {
    // The subscription is taken before anything else runs, so no namespace change is lost
    // between the first read of the store and the first event.
    tokio::spawn(watch_namespaces(
        caches.namespaces.subscribe(),
        caches.clone(),
        trigger.clone(),
    ));
    tokio::spawn(watch_routes(
        client.clone(),
        caches.clone(),
        trigger.clone(),
        RouteKind::HttpRoute,
    ));
    tokio::spawn(watch_routes(
        client.clone(),
        caches.clone(),
        trigger.clone(),
        RouteKind::TlsRoute,
    ));
    tokio::spawn(watch_owned::<Gateway>(
        client.clone(),
        caches.clone(),
        trigger.clone(),
        ("Gateway", GATEWAY_API_GROUP),
        |c| &c.gateways,
        gateway_events,
    ));
    tokio::spawn(watch_owned::<Issuer>(
        client.clone(),
        caches.clone(),
        trigger.clone(),
        ("Issuer", "cert-manager.io"),
        |c| &c.issuers,
        events,
    ));
    tokio::spawn(watch_owned::<Certificate>(
        client.clone(),
        caches.clone(),
        trigger.clone(),
        ("Certificate", "cert-manager.io"),
        |c| &c.certificates,
        events,
    ));
}

/// Wait until every watch listed once: reconciling before that could prune what a slow
/// watch has not delivered yet.
pub async fn synced(caches: &Caches) {
    let started = Instant::now();
    let mut waited = tokio::time::interval(Duration::from_millis(100));
    while !caches.all_synced() {
        waited.tick().await;
        if started.elapsed() > Duration::from_secs(30)
            && started.elapsed().as_millis() % 30_000 < 100
        {
            tracing::warn!(waiting_for = ?caches.unsynced(), "controller waits for the watches to list");
        }
    }
    tracing::info!(
        routes = caches.routes.len(),
        gateways = caches.gateways.len(),
        "watches synced; starting the TenantGateway controller"
    );
}

/// The TenantGateway watch the controller runs on: fills `writer` (statuses go to the
/// stash), and sends the TenantGateways whose plan depends on each changed one.
pub fn tenant_gateways(
    client: Client,
    store: Store<TenantGateway>,
    writer: reflector::store::Writer<TenantGateway>,
    caches: Arc<Caches>,
    fanout: Trigger,
) -> impl Stream<Item = Result<TenantGateway, watcher::Error>> + Send + 'static {
    let api: Api<TenantGateway> = Api::all(client);
    reflector::reflector(
        writer,
        watcher::watcher(
            api,
            watcher::Config::default().page_size(cw::LARGE_OBJECT_PAGE_SIZE),
        )
        .default_backoff()
        .map_ok(move |ev| {
            record_listeners(&caches.routes, &ev);
            caches.tgw_statuses.stash(ev)
        }),
    )
    .touched_objects()
    .inspect(move |r| {
        // Siblings (one per namespace) and rivals for attached namespaces depend on it.
        if let Ok(t) = r {
            for other in related(&store.state(), t) {
                let _ = fanout.unbounded_send(other);
            }
        }
    })
    .filter_map(|r| async move {
        match r {
            Ok(t) => Some(Ok(t)),
            Err(e) => {
                tracing::warn!(error = %e, "TenantGateway watch error; retrying with backoff");
                None
            }
        }
    })
}

/// How each TenantGateway's Gateway lists its HTTPS listeners (its certMode), kept in the
/// route index beside the Gateway's routes for the listener-budget warning (SPEC §3.4), and
/// the passthrough hostnames no HTTPRoute may claim on an http01 one (SPEC §3.10). From
/// the watch rather than a reconcile: every replica's webhook reads it, leader or not, and
/// a TenantGateway whose spec does not check still names its mode.
fn record_listeners(index: &RouteIndex, ev: &Event<TenantGateway>) {
    let set = |t: &TenantGateway, listeners| {
        let m = &t.metadata;
        index.set_listeners(
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
            listeners,
        );
    };
    let passthrough = |t: &TenantGateway, listeners| {
        let m = &t.metadata;
        index.set_passthrough(
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
            listeners,
        );
    };
    match ev {
        Event::Apply(t) | Event::InitApply(t) => {
            let mode = Some(t.spec.cert_mode.as_str());
            set(t, HttpsListeners::of_cert_mode(mode));
            passthrough(
                t,
                http01_passthrough(mode, &t.spec.apex, &t.spec.tls_passthrough_services),
            );
        }
        Event::Delete(t) => {
            set(t, None);
            passthrough(t, Vec::new());
        }
        Event::Init => index.listeners_relist_started(),
        Event::InitDone => index.listeners_relist_done(),
    }
}

/// TenantGateways whose plan depends on `t`: the others in its namespace and those listing
/// one of the namespaces it lists.
fn related(all: &[Arc<TenantGateway>], t: &TenantGateway) -> Vec<ObjectRef<TenantGateway>> {
    let ns = t.metadata.namespace.as_deref().unwrap_or_default();
    let mine: BTreeSet<&str> = t
        .spec
        .attached_namespaces
        .iter()
        .map(String::as_str)
        .collect();
    all.iter()
        .filter(|o| o.metadata.uid != t.metadata.uid)
        .filter(|o| {
            o.metadata.namespace.as_deref() == Some(ns)
                || o.spec
                    .attached_namespaces
                    .iter()
                    .any(|a| mine.contains(a.as_str()))
        })
        .map(|o| ObjectRef::from(o.as_ref()))
        .collect()
}

/// The TenantGateways whose plan reads Gateway `namespace/name` and the routes naming it:
/// the one named like it, and the one whose second Gateway `<name>-passthrough` it is (SPEC
/// §3.10; every layout: `shared` removes our route entries for it). A name that does not
/// round-trip through `names::passthrough_gateway` to an existing TenantGateway (a long name,
/// shortened with a hash) is looked up among the namespace's TenantGateways.
fn gateway_tgws(
    tgws: &Store<TenantGateway>,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<TenantGateway>> {
    let mut out = vec![tgw_ref(namespace, name)];
    if !name.ends_with(SECOND_GATEWAY_SUFFIX) {
        return out;
    }
    let base = name
        .strip_suffix(SECOND_GATEWAY_SUFFIX)
        .map(|base| tgw_ref(namespace, base));
    match base {
        // The common case, one lookup; a hashed name may strip to another name that
        // round-trips, so only a TenantGateway that exists counts.
        Some(base)
            if super::names::passthrough_gateway(&base.name) == name
                && tgws.get(&base).is_some() =>
        {
            out.push(base);
        }
        _ => out.extend(
            tgws.state()
                .iter()
                .filter(|t| t.metadata.namespace.as_deref() == Some(namespace))
                .filter(|t| {
                    t.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| super::names::passthrough_gateway(n) == name)
                })
                .map(|t| ObjectRef::from(t.as_ref())),
        ),
    }
    out
}

/// How every second Gateway's name ends (`names::passthrough_gateway`).
const SECOND_GATEWAY_SUFFIX: &str = "-passthrough";

fn tgws_in(caches: &Caches, namespaces: &BTreeSet<String>, trigger: &Trigger) {
    for t in caches.tgws.state() {
        let ns = t.metadata.namespace.as_deref().unwrap_or_default();
        if namespaces.contains(ns) {
            let _ = trigger.unbounded_send(ObjectRef::from(t.as_ref()));
        }
    }
}

fn rebuild_links(caches: &Caches) {
    let mut links = caches.links.write().unwrap_or_else(|p| p.into_inner());
    links.clear();
    for ns in caches.namespaces.all() {
        links.update(ns.name(), Some(links_of(&ns)));
    }
}

fn trigger_all(caches: &Caches, trigger: &Trigger) {
    for t in caches.tgws.state() {
        let _ = trigger.unbounded_send(ObjectRef::from(t.as_ref()));
    }
}

async fn watch_namespaces(
    mut rx: tokio::sync::broadcast::Receiver<NamespaceChange>,
    caches: Arc<Caches>,
    trigger: Trigger,
) {
    rebuild_links(&caches);
    loop {
        match rx.recv().await {
            Ok(NamespaceChange::Applied(name)) => {
                let links = caches.namespaces.cached(&name).map(|n| links_of(&n));
                let mut touched = caches
                    .links
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .update(&name, links);
                touched.insert(name.clone());
                tgws_in(&caches, &touched, &trigger);
                for t in caches.tgws.state() {
                    if t.spec.attached_namespaces.contains(&name) {
                        let _ = trigger.unbounded_send(ObjectRef::from(t.as_ref()));
                    }
                }
            }
            Ok(NamespaceChange::Deleted(name)) => {
                let mut touched = caches
                    .links
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .update(&name, None);
                touched.insert(name.clone());
                tgws_in(&caches, &touched, &trigger);
            }
            Ok(NamespaceChange::Resynced) | Err(RecvError::Lagged(_)) => {
                rebuild_links(&caches);
                trigger_all(&caches, &trigger);
            }
            Err(RecvError::Closed) => {
                tracing::error!(
                    "namespace watch ended; the controller sees no more namespace changes"
                );
                return;
            }
        }
    }
}

/// Wait until `group`/`kind` is served (re-checked, so installing the CRD later works).
async fn wait_served(
    client: &Client,
    caches: &Caches,
    group: &str,
    kind: &'static str,
) -> ApiResource {
    let mut first = true;
    loop {
        if let Some(ar) = cw::served(client, group, kind).await {
            return ar;
        }
        if first {
            tracing::info!(
                kind,
                "not served by the API server; watching it once its CRD is installed"
            );
            // Nothing to list yet: the controller need not wait for it.
            caches.mark_synced(kind);
            first = false;
        }
        tokio::time::sleep(CRD_RECHECK).await;
    }
}

async fn watch_routes(client: Client, caches: Arc<Caches>, trigger: Trigger, kind: RouteKind) {
    let ar = match kind {
        RouteKind::HttpRoute => caches.http_route.clone(),
        RouteKind::TlsRoute => {
            let ar = wait_served(&client, &caches, GATEWAY_API_GROUP, "TLSRoute").await;
            *caches.tls_route.write().unwrap_or_else(|p| p.into_inner()) = Some(ar.clone());
            ar
        }
    };
    let idx = caches.routes.clone();
    let send = |gws: BTreeSet<Key>| {
        for (ns, name) in gws {
            for t in gateway_tgws(&caches.tgws, &ns, &name) {
                let _ = trigger.unbounded_send(t);
            }
        }
    };
    // What the continuous audit reads of each route is decoded only when it listens.
    let mut stream = if idx.tapped() {
        cw::guarded::<TappedRoute>(client, &ar, kind.as_str(), cw::PAGE_SIZE)
            .map(|ev| cw::map_event(ev, |t| t.0))
            .boxed()
    } else {
        cw::guarded::<WatchedRoute>(client, &ar, kind.as_str(), cw::PAGE_SIZE).boxed()
    };
    while let Some(ev) = stream.next().await {
        // The continuous audit reads this watch too (not a second one of its own).
        idx.tell_taps(kind, &ev);
        match ev {
            Event::Init => {
                idx.relist_started(kind);
                if kind == RouteKind::HttpRoute {
                    caches.redirects.relist_started();
                }
            }
            Event::InitApply(o) | Event::Apply(o) => {
                let key = o.key();
                let Some(route) = o.decoded(kind.as_str()) else {
                    // Did not decode at all: forget any earlier version.
                    if kind == RouteKind::HttpRoute {
                        caches.redirects.apply(key.clone(), None);
                    }
                    send(idx.delete(kind, &key.0, &key.1));
                    continue;
                };
                if kind == RouteKind::HttpRoute {
                    // The redirect's status is read by nobody: not kept.
                    let redirect = route.redirect.and_then(|mut r| {
                        r.status = None;
                        Kept::keep(r)
                    });
                    caches.redirects.apply(key, redirect);
                }
                send(idx.apply(route.view.facts(kind)));
            }
            Event::Delete(o) => {
                let (ns, name) = o.key();
                if kind == RouteKind::HttpRoute {
                    caches.redirects.delete(&(ns.clone(), name.clone()));
                }
                send(idx.delete(kind, &ns, &name));
            }
            Event::InitDone => {
                if kind == RouteKind::HttpRoute {
                    caches.redirects.relist_done();
                }
                send(idx.relist_done(kind));
                caches.mark_synced(kind.as_str());
                tracing::info!(
                    kind = kind.as_str(),
                    routes = idx.len(),
                    "route index synced"
                );
            }
        }
    }
}

/// How a watch of owned objects opens its stream: [`events`], or [`gateway_events`].
type Open<T> =
    fn(Client, &ApiResource, &'static str, u32, &Caches) -> BoxStream<'static, Event<Watched<T>>>;

fn events<T>(
    client: Client,
    ar: &ApiResource,
    kind: &'static str,
    page: u32,
    _: &Caches,
) -> BoxStream<'static, Event<Watched<T>>>
where
    T: FromWatch + Clone + std::fmt::Debug + Send + 'static,
{
    cw::guarded::<T>(client, ar, kind, page).boxed()
}

/// The Gateways' events; while a tap listens (the continuous audit), each Gateway's
/// projection is decoded beside it and the tap told first, so the audit lists and watches
/// no Gateways of its own.
fn gateway_events(
    client: Client,
    ar: &ApiResource,
    kind: &'static str,
    page: u32,
    caches: &Caches,
) -> BoxStream<'static, Event<Watched<Gateway>>> {
    if !caches.routes.tapped() {
        return events(client, ar, kind, page, caches);
    }
    let idx = caches.routes.clone();
    cw::guarded::<Tapped<Gateway>>(client, ar, kind, page)
        .map(move |ev| {
            let (tapped, own) = cw::split_tapped(ev);
            idx.tell_gateway_taps(&tapped);
            own
        })
        .boxed()
}

async fn watch_owned<T>(
    client: Client,
    caches: Arc<Caches>,
    trigger: Trigger,
    (kind, group): (&'static str, &'static str),
    cache: fn(&Caches) -> &ObjectCache<Kept<T>>,
    open: Open<T>,
) where
    T: FromWatch + Split + Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    Kept<T>: Send + Sync,
{
    let ar = wait_served(&client, &caches, group, kind).await;
    let page = if kind == "Gateway" {
        cw::LARGE_OBJECT_PAGE_SIZE
    } else {
        cw::PAGE_SIZE
    };
    let mut stream = open(client, &ar, kind, page, &caches);
    let target = |key: &Key, o: Option<&T>| {
        // A Gateway is named like its TenantGateway or its second one (owned or not: a
        // same-named Gateway that appears or goes away changes the plan); other kinds carry
        // our ownerReference.
        let mut to: Vec<ObjectRef<TenantGateway>> = if kind == "Gateway" {
            gateway_tgws(&caches.tgws, &key.0, &key.1)
        } else {
            Vec::new()
        };
        if let Some(owner) = o.and_then(|o| owner_of(&key.0, o.meta()))
            && !to.contains(&owner)
        {
            to.push(owner);
        }
        to
    };
    while let Some(ev) = stream.next().await {
        let c = cache(&caches);
        match ev {
            Event::Init => c.relist_started(),
            Event::InitApply(o) | Event::Apply(o) => {
                let key = o.key();
                let o = o.decoded(kind);
                let to = target(&key, o.as_ref());
                c.apply(key, o.and_then(Kept::keep));
                for t in to {
                    let _ = trigger.unbounded_send(t);
                }
            }
            Event::Delete(o) => {
                let key = o.key();
                c.delete(&key);
                for t in target(&key, o.body.as_ref().ok()) {
                    let _ = trigger.unbounded_send(t);
                }
            }
            Event::InitDone => {
                c.relist_done();
                caches.mark_synced(kind);
                trigger_all(&caches, &trigger);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::testing;

    fn meta(v: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(v).expect("object metadata")
    }

    fn tgw(ns: &str, name: &str, uid: &str, attached: &[&str]) -> Arc<TenantGateway> {
        let mut spec = testing::world().tgw.spec;
        spec.attached_namespaces = attached.iter().map(|s| s.to_string()).collect();
        let mut t = TenantGateway::new(name, spec);
        t.metadata.namespace = Some(ns.into());
        t.metadata.uid = Some(uid.into());
        Arc::new(t)
    }

    #[test]
    fn related_are_siblings_and_rivals_for_attached_namespaces() {
        let me = tgw("tenant-a", "gw", "1", &["cozy-x"]);
        let all = vec![
            me.clone(),
            tgw("tenant-a", "second", "2", &[]),
            tgw("tenant-b", "gw", "3", &["cozy-x"]),
            tgw("tenant-c", "gw", "4", &["cozy-y"]),
        ];
        let got: Vec<String> = related(&all, &me).iter().map(|r| r.to_string()).collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got.iter().any(|r| r.contains("second.tenant-a")), "{got:?}");
        assert!(got.iter().any(|r| r.contains("gw.tenant-b")), "{got:?}");
    }

    #[test]
    fn the_watch_keeps_each_gateways_certmode_in_the_route_index() {
        use super::super::api::CertMode;
        let index = RouteIndex::default();
        let with = |ns: &str, mode: CertMode| {
            let mut t = (*tgw(ns, "gw", ns, &[])).clone();
            t.spec.cert_mode = mode;
            t
        };
        let seen = |ns: &str| index.gateway(ns, "gw").1;
        record_listeners(&index, &Event::Apply(with("a", CertMode::Dns01)));
        record_listeners(&index, &Event::Apply(with("b", CertMode::Http01)));
        assert_eq!(seen("a"), Some(HttpsListeners::PerApex));
        assert_eq!(seen("b"), Some(HttpsListeners::PerHostname));
        record_listeners(&index, &Event::Apply(with("a", CertMode::Http01)));
        assert_eq!(seen("a"), Some(HttpsListeners::PerHostname), "a switch");
        record_listeners(&index, &Event::Delete(with("a", CertMode::Http01)));
        assert_eq!(seen("a"), None, "deleted");
        record_listeners(&index, &Event::Init);
        record_listeners(
            &index,
            &Event::InitApply(with("c", CertMode::ExistingSecret)),
        );
        record_listeners(&index, &Event::InitDone);
        assert_eq!(seen("c"), Some(HttpsListeners::PerApex));
        assert_eq!(seen("b"), None, "deleted while the watch was down");
    }

    /// SPEC §3.10: the index also keeps what an http01 TenantGateway passes through (for the
    /// PassthroughHostname warning), and forgets it when the mode, the list or the object
    /// goes.
    #[test]
    fn the_watch_keeps_each_http01_gateways_passthrough_hostnames() {
        use super::super::api::CertMode;
        let index = RouteIndex::default();
        let with = |mode: CertMode, services: &[&str]| {
            let mut t = (*tgw("a", "gw", "a", &[])).clone();
            t.spec.cert_mode = mode;
            t.spec.tls_passthrough_services = services.iter().map(|s| s.to_string()).collect();
            t
        };
        let hosts = || -> Vec<String> {
            index
                .passthrough("a", "gw")
                .map(|l| l.iter().map(|p| p.hostname.clone()).collect())
                .unwrap_or_default()
        };
        record_listeners(
            &index,
            &Event::Apply(with(CertMode::Http01, &["api", "cdi"])),
        );
        assert_eq!(hosts(), ["api.alice.example.org", "cdi.alice.example.org"]);
        record_listeners(&index, &Event::Apply(with(CertMode::Dns01, &["api"])));
        assert!(
            hosts().is_empty(),
            "dns01 serves them on its wildcard listener"
        );
        record_listeners(&index, &Event::Apply(with(CertMode::Http01, &["api"])));
        assert_eq!(hosts(), ["api.alice.example.org"]);
        record_listeners(&index, &Event::Delete(with(CertMode::Http01, &["api"])));
        assert!(hosts().is_empty(), "deleted");
    }

    /// Gateways and the routes naming them reach the TenantGateway whose Gateway they are:
    /// `<name>`, or `<name>-passthrough` (also when a long name is shortened with a hash).
    #[test]
    fn second_gateways_map_to_their_tenantgateway() {
        let (store, mut writer) = reflector::store::<TenantGateway>();
        let long = "t".repeat(60);
        for (ns, name) in [("tenant-a", "gw"), ("tenant-a", long.as_str())] {
            writer.apply_watcher_event(&Event::Apply((*tgw(ns, name, name, &[])).clone()));
        }
        let refs = |ns: &str, name: &str| -> Vec<String> {
            gateway_tgws(&store, ns, name)
                .iter()
                .map(|r| r.name.clone())
                .collect()
        };
        assert_eq!(refs("tenant-a", "gw"), ["gw"]);
        assert_eq!(refs("tenant-a", "gw-passthrough"), ["gw-passthrough", "gw"]);
        let hashed = super::super::names::passthrough_gateway(&long);
        assert!(hashed.len() <= 63 && hashed != format!("{long}-passthrough"));
        assert_eq!(refs("tenant-a", &hashed), [hashed.clone(), long.clone()]);
        // Another namespace's TenantGateway of that name is not it.
        assert_eq!(refs("tenant-b", &hashed), [hashed]);
        // No TenantGateway of the stripped name: nothing more to wake.
        assert_eq!(refs("tenant-a", "x-passthrough"), ["x-passthrough"]);
    }

    #[test]
    fn owned_objects_map_to_their_tenantgateway() {
        let cert = Certificate::from_watch(
            &serde_json::json!({
                "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                "metadata": {"name": "gw-a-tls", "namespace": "tenant-a", "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "9"},
                    {"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
                     "name": "gw", "uid": "1", "controller": true}]},
                "spec": {"secretName": "s", "dnsNames": ["a.example.org"],
                         "issuerRef": {"group": "cert-manager.io", "kind": "Issuer", "name": "i"}}
            })
            .to_string(),
        )
        .expect("decodes");
        assert_eq!(
            owner_of("tenant-a", &cert.metadata),
            Some(tgw_ref("tenant-a", "gw")),
            "our ownerReference"
        );
        let foreign = meta(serde_json::json!({"name": "c", "namespace": "tenant-a"}));
        assert_eq!(owner_of("tenant-a", &foreign), None);
    }
}
