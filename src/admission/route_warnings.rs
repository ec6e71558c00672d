//! Admission warnings from the route index (SPEC §3.4, §2.5): what the reconciler will do
//! with an HTTPRoute/TLSRoute being admitted, said while it is admitted (the reconciler's
//! rules decide; these never deny).
//!
//! [`warnings`] is a pure function of the route being admitted, the index's snapshot of each
//! Gateway it references, and the system prefix. It judges claims the way
//! `reconcile::routes::analyse` does: only an HTTPRoute parentRef without a sectionName or
//! naming an `https…` listener claims a hostname; the winner of a hostname claimed from
//! several namespaces is [`claims::winner_for`], the function the reconciler's analysis
//! calls, with each namespace's apex from the namespace index (a summary is kept per route
//! snapshot, so a host label changed since the Gateway's routes last changed is seen with
//! the next route change; the reconciler, not the warning, decides).
//!
//! A route in the index counts as published on a Gateway when a parentRef targets it *and*
//! it carries our status entry for it: the reconciler writes that entry only for routes that
//! attach (allowed namespace), so a route that merely names a Gateway it may not use, or one
//! created a moment ago and not reconciled yet, does not count. `kubectl get -o yaml` prints
//! the status, so an offline snapshot (`--routes FILE`) is judged exactly like the live index.
//!
//! The listener budget is counted from the same routes: the `http` listener, one passthrough
//! listener per `tls-…` section a published TLSRoute names, and one listener per distinct
//! listenable (valid, not wildcard) hostname published by claiming HTTPRoutes; of
//! [`MAX_LISTENERS`]. When a route needs more listeners than are left and other namespaces
//! publish on the Gateway too, the warning is the fair share's
//! (`reconcile::routes::share_warning`, SPEC §3.3): a namespace within its share takes its
//! listeners from the others and is not warned. The index does not know a Gateway's certMode, so the count is the
//! http01 one (dns01/existingSecret Gateways have no per-hostname listeners; their routes
//! rarely come near 63 distinct hostnames, and the warning says what it assumes).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};

use crate::claims::{self, ApexClaimant, Claimant};
use crate::cluster::routes::{GatewayRoutes, RouteIndex};
use crate::hostname;
use crate::platform::{ApexOwners, GATEWAY_API_GROUP};
use crate::reconcile::inputs::{ParentRef, RouteFacts, RouteKind};
use crate::reconcile::routes::{MAX_LISTENERS, section_claims_https, share_warning};

/// Why a warning was given: the `reason` label of its counter (a closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Another namespace publishes the hostname on the same Gateway (HTTPRoute).
    HostnameConflict,
    /// The Gateway's listeners would run out.
    ListenerBudget,
    /// Another namespace passes the hostname through on the same Gateway (TLSRoute).
    PassthroughShared,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::HostnameConflict => "hostname_conflict",
            Reason::ListenerBudget => "listener_budget",
            Reason::PassthroughShared => "passthrough_shared",
        }
    }

    pub const ALL: [Reason; 3] = [
        Reason::HostnameConflict,
        Reason::ListenerBudget,
        Reason::PassthroughShared,
    ];
}

/// One warning: at most [`super::MAX_WARNING_LEN`] characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteWarning {
    pub reason: Reason,
    pub text: String,
}

/// The route being admitted, as the warnings read it: borrowed from the review's projected
/// object ([`admitted`]) or from route facts ([`Admitted::of`]), so a review allocates
/// nothing for it but two lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted<'a> {
    pub kind: RouteKind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub hostnames: Vec<&'a str>,
    /// Those with a name (the index drops the others).
    pub parent_refs: Vec<ParentOf<'a>>,
}

/// One parentRef of an [`Admitted`] route: [`ParentRef`], borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParentOf<'a> {
    pub group: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub section_name: Option<&'a str>,
    pub port: Option<i32>,
}

impl<'a> Admitted<'a> {
    /// The route of `f` (its status left out: the admitted object's is not ours to read).
    pub fn of(f: &'a RouteFacts) -> Admitted<'a> {
        Admitted {
            kind: f.kind,
            namespace: &f.namespace,
            name: &f.name,
            hostnames: f.hostnames.iter().map(String::as_str).collect(),
            parent_refs: f.parent_refs.iter().map(|p| ParentOf::of(p)).collect(),
        }
    }

    fn claimant(&self) -> Claimant<'a> {
        Claimant {
            namespace: self.namespace,
            name: self.name,
        }
    }

    /// An indexed route is this one (an earlier version of it).
    fn is(&self, r: &RouteFacts) -> bool {
        (r.kind, &*r.namespace, &*r.name) == (self.kind, self.namespace, self.name)
    }

    /// The Gateways its parentRefs name, each once, in order (`cluster::routes::gateways_of`
    /// without the status).
    fn gateways(&self) -> Vec<(&'a str, &'a str)> {
        let mut v: Vec<(&str, &str)> = self
            .parent_refs
            .iter()
            .filter(|p| p.is_gateway())
            .map(|p| (p.namespace.unwrap_or(self.namespace), p.name))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Its parentRefs that target Gateway `on`: their sectionNames.
    fn sections_on<'s>(
        &'s self,
        on: &'s Gateway<'_>,
    ) -> impl Iterator<Item = Option<&'a str>> + 's {
        self.parent_refs
            .iter()
            .filter(|p| {
                p.is_gateway()
                    && p.namespace.unwrap_or(self.namespace) == on.namespace
                    && p.name == on.name
            })
            .map(|p| p.section_name)
    }
}

impl<'a> ParentOf<'a> {
    fn of(p: &'a ParentRef) -> ParentOf<'a> {
        ParentOf {
            group: p.group.as_deref(),
            kind: p.kind.as_deref(),
            namespace: p.namespace.as_deref(),
            name: &p.name,
            section_name: p.section_name.as_deref(),
            port: p.port,
        }
    }

    /// A Gateway once Gateway API's defaults apply (as `ParentRef::targets` reads it).
    fn is_gateway(&self) -> bool {
        self.group.unwrap_or(GATEWAY_API_GROUP) == GATEWAY_API_GROUP
            && self.kind.unwrap_or("Gateway") == "Gateway"
    }
}

/// The warnings for admitting `route`. `snapshot(namespace, name)` is the index's routes of
/// one Gateway; `system_prefix` the conflict rule's (`--system-prefix`); `publishes_through`
/// the route namespace's `namespace.cozystack.io/gateway` label when its labels are known
/// (`""` without the label): a tenant namespace reaches another namespace's Gateway only
/// through that label (layer 1), so a route naming any other Gateway will not attach and gets
/// no warning about it. `None` (labels not read: outside tenant scope) judges every Gateway.
///
/// This summarises each snapshot afresh; the server reads the summaries through a
/// [`SummaryCache`] instead ([`warnings_from`]).
pub fn warnings(
    route: &RouteFacts,
    snapshot: impl Fn(&str, &str) -> Arc<GatewayRoutes>,
    system_prefix: &str,
    publishes_through: Option<&str>,
    apexes: &dyn ApexOwners,
) -> Vec<RouteWarning> {
    warnings_from(
        route,
        |ns, name| {
            let routes = snapshot(ns, name);
            let summary = Arc::new(GatewaySummary::of(&routes, ns, name, system_prefix, apexes));
            (routes, summary)
        },
        system_prefix,
        publishes_through,
        apexes,
    )
}

/// [`warnings`] from each Gateway's snapshot and its [`GatewaySummary`]: a few lookups per
/// hostname of `route`, whatever the number of routes on the Gateway.
pub fn warnings_from(
    route: &RouteFacts,
    summary: impl Fn(&str, &str) -> (Arc<GatewayRoutes>, Arc<GatewaySummary>),
    system_prefix: &str,
    publishes_through: Option<&str>,
    apexes: &dyn ApexOwners,
) -> Vec<RouteWarning> {
    warnings_for(
        &Admitted::of(route),
        summary,
        system_prefix,
        publishes_through,
        apexes,
    )
}

/// [`warnings_from`] for a borrowed route (the server's path: [`admitted`]).
pub fn warnings_for(
    route: &Admitted<'_>,
    summary: impl Fn(&str, &str) -> (Arc<GatewayRoutes>, Arc<GatewaySummary>),
    system_prefix: &str,
    publishes_through: Option<&str>,
    apexes: &dyn ApexOwners,
) -> Vec<RouteWarning> {
    let mut out = Vec::new();
    for (gw_ns, gw_name) in route.gateways() {
        if *gw_ns != *route.namespace && publishes_through.is_some_and(|g| g != gw_ns) {
            continue;
        }
        let (routes, summary) = summary(gw_ns, gw_name);
        let on = Gateway {
            namespace: gw_ns,
            name: gw_name,
        };
        match route.kind {
            RouteKind::HttpRoute => http_route(
                route,
                &on,
                &routes,
                &summary,
                system_prefix,
                apexes,
                &mut out,
            ),
            RouteKind::TlsRoute => tls_route(route, &summary, &on, &mut out),
        }
    }
    for w in &mut out {
        // Within the bound in bytes is within it in characters: no copy.
        if w.text.len() > super::MAX_WARNING_LEN {
            w.text = super::decision::truncate_warning(&w.text);
        }
    }
    out
}

/// A summary's maps by hostname. Every review looks each of its hostnames up: foldhash (the
/// hasher of `hashbrown`, seeded per process) costs a fraction of std's SipHash on these
/// short keys (bench/RESULTS.md, the 20,000-route profile).
type HostMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// What the published routes of one Gateway claim, from one snapshot of its routes: what a
/// review needs, gathered once instead of scanning every route on the Gateway per review.
#[derive(Debug, Default)]
pub struct GatewaySummary {
    /// Hostnames (as written) of the published HTTPRoutes that claim HTTPS listeners here.
    https: HostMap<HostClaims>,
    /// How many of those hostnames get a listener (valid, not a wildcard).
    listenable: usize,
    /// Those listenable hostnames by the namespace of their winning claimant (the fair
    /// share's demands, SPEC §3.3).
    per_namespace: BTreeMap<String, usize>,
    /// The apex of each claiming namespace (`None`: no host label), as the conflict order
    /// reads it.
    apex: HashMap<String, Option<String>>,
    /// Distinct `tls-…` sections published TLSRoutes name here (one listener each).
    passthrough: usize,
    /// Hostnames of published TLSRoutes: one route per namespace passing each through, by
    /// namespace.
    tls: HostMap<Vec<Arc<RouteFacts>>>,
}

#[derive(Debug, Default)]
struct HostClaims {
    /// The claiming routes, each once, in [`claims::compare_for`] order (the winner first).
    ranked: Vec<Arc<RouteFacts>>,
    /// One claiming route per namespace, by namespace.
    namespaces: Vec<Arc<RouteFacts>>,
}

/// `r` as the conflict order reads it, with its namespace's apex from `apex`.
fn apex_claimant<'a>(
    r: &'a RouteFacts,
    apex: &'a HashMap<String, Option<String>>,
) -> ApexClaimant<'a> {
    ApexClaimant {
        namespace: &r.namespace,
        name: &r.name,
        apex: apex.get(&*r.namespace).and_then(|a| a.as_deref()),
    }
}

fn same_route(a: &RouteFacts, b: &RouteFacts) -> bool {
    (a.kind, &a.namespace, &a.name) == (b.kind, &b.namespace, &b.name)
}

/// Sorted by namespace, one route per namespace.
fn by_namespace(mut v: Vec<Arc<RouteFacts>>) -> Vec<Arc<RouteFacts>> {
    v.sort_by(|a, b| a.namespace.cmp(&b.namespace));
    v.dedup_by(|a, b| a.namespace == b.namespace);
    v
}

impl GatewaySummary {
    /// The summary of `routes`, the snapshot of Gateway `namespace/name`.
    pub fn of(
        routes: &GatewayRoutes,
        namespace: &str,
        name: &str,
        system_prefix: &str,
        apexes: &dyn ApexOwners,
    ) -> GatewaySummary {
        let on = Gateway { namespace, name };
        let mut https: HostMap<Vec<Arc<RouteFacts>>> = HostMap::default();
        let mut tls: HostMap<Vec<Arc<RouteFacts>>> = HostMap::default();
        let mut sections: BTreeSet<&str> = BTreeSet::new();
        for r in routes.values().filter(|r| on.published_by(r)) {
            match r.kind {
                RouteKind::HttpRoute => {
                    if on.claimed_by(r) {
                        for h in &r.hostnames {
                            https.entry(h.clone()).or_default().push(r.clone());
                        }
                    }
                }
                RouteKind::TlsRoute => {
                    sections.extend(
                        on.targeted_by(r)
                            .flatten()
                            .filter(|s| s.starts_with("tls-")),
                    );
                    for h in &r.hostnames {
                        tls.entry(h.clone()).or_default().push(r.clone());
                    }
                }
            }
        }
        let mut apex: HashMap<String, Option<String>> = HashMap::new();
        for rs in https.values() {
            for r in rs {
                if !apex.contains_key(&*r.namespace) {
                    apex.insert(r.namespace.to_string(), apexes.apex_of(&r.namespace));
                }
            }
        }
        let https: HostMap<HostClaims> = https
            .into_iter()
            .map(|(h, mut ranked)| {
                ranked.sort_by(|a, b| {
                    claims::compare_for(
                        &h,
                        &apex_claimant(a, &apex),
                        &apex_claimant(b, &apex),
                        system_prefix,
                    )
                });
                // A route listing a hostname twice is one claimant.
                ranked.dedup_by(|a, b| same_route(a, b));
                let namespaces = by_namespace(ranked.clone());
                (h, HostClaims { ranked, namespaces })
            })
            .collect();
        let mut listenable_count = 0;
        let mut per_namespace: BTreeMap<String, usize> = BTreeMap::new();
        for (h, c) in &https {
            if !listenable(h) {
                continue;
            }
            listenable_count += 1;
            if let Some(w) = c.ranked.first() {
                *per_namespace.entry(w.namespace.to_string()).or_default() += 1;
            }
        }
        GatewaySummary {
            https,
            listenable: listenable_count,
            per_namespace,
            apex,
            passthrough: sections.len(),
            tls: tls.into_iter().map(|(h, v)| (h, by_namespace(v))).collect(),
        }
    }
}

/// A hostname that gets an HTTPS listener of its own under http01.
fn listenable(h: &str) -> bool {
    !hostname::is_wildcard(h) && hostname::validate(h).is_ok()
}

/// How many namespaces `routes` (one route per namespace, by namespace) has other than
/// `except`.
fn count_except(routes: &[Arc<RouteFacts>], except: &str) -> usize {
    let mine = routes
        .binary_search_by(|r| (*r.namespace).cmp(except))
        .is_ok();
    routes.len() - usize::from(mine)
}

/// Those `n` namespaces ([`count_except`]) named: "a", "a and b", "a and 2 more". Only a
/// warning that names them builds it.
fn names_except(routes: &[Arc<RouteFacts>], except: &str, n: usize) -> String {
    let mut it = routes
        .iter()
        .map(|r| &*r.namespace)
        .filter(|ns| *ns != except);
    match (it.next(), it.next()) {
        (None, _) => String::new(),
        (Some(a), None) => a.to_string(),
        (Some(a), Some(b)) if n == 2 => concat(&[a, " and ", b]),
        (Some(a), Some(_)) => concat(&[a, " and ", &(n - 1).to_string(), " more"]),
    }
}

/// A warning's text from its pieces. Every warning given is built on the review's path;
/// `format!` costs a few times the copy (bench/RESULTS.md, the 20,000-route profile).
fn concat(parts: &[&str]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        s.push_str(p);
    }
    s
}

/// Summaries of the Gateways that reviews asked about, each kept with a weak handle on the
/// index snapshot it was computed from. The index replaces a Gateway's snapshot (copy on
/// write, `Arc::make_mut`) whenever one of its routes changes, so a summary is reused exactly
/// as long as its snapshot is the current one: the same answers as summarising on every
/// review. The weak handle keeps the old snapshot's allocation, so a newer snapshot never
/// gets its address, and it makes the index move a snapshot it changes rather than clone it.
///
/// One cache per [`super::Admission`]: summaries depend on its `system_prefix`.
#[derive(Debug, Default)]
pub struct SummaryCache {
    entries: Mutex<CacheEntries>,
}

type Cached = (Weak<GatewayRoutes>, Arc<GatewaySummary>);

#[derive(Debug, Default)]
struct CacheEntries {
    /// By Gateway namespace, then name: looked up without building a key, with foldhash
    /// (every review with warnings on looks its Gateways up here).
    by_gateway: HostMap<HostMap<Cached>>,
    /// Entries in `by_gateway`.
    len: usize,
    /// At this many entries, the summaries of snapshots that are gone are dropped.
    sweep_at: usize,
}

/// Gateways with fewer routes are summarised on each review, which keeps the thousands of
/// small tenant Gateways out of the cache. Summarising costs ~2–3 k instructions per route
/// (callgrind, bench/RESULTS.md session 15), so below 8 routes it stays under ~20 k, a sixth of
/// a review; from 8 routes up the summary is kept (its size is proportional to the routes).
const CACHE_FROM: usize = 8;

impl SummaryCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheEntries> {
        // Plain maps survive a panicking holder.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gateway `namespace/name`'s current snapshot in `index`, with its summary.
    pub fn get(
        &self,
        index: &RouteIndex,
        namespace: &str,
        name: &str,
        system_prefix: &str,
        apexes: &dyn ApexOwners,
    ) -> (Arc<GatewayRoutes>, Arc<GatewaySummary>) {
        let routes = index.for_gateway(namespace, name);
        if routes.len() < CACHE_FROM {
            let summary = GatewaySummary::of(&routes, namespace, name, system_prefix, apexes);
            return (routes, Arc::new(summary));
        }
        if let Some((seen, summary)) = self
            .lock()
            .by_gateway
            .get(namespace)
            .and_then(|m| m.get(name))
            && std::ptr::eq(seen.as_ptr(), Arc::as_ptr(&routes))
        {
            return (routes, summary.clone());
        }
        // Computed without the lock; reviews racing on a new snapshot each compute it once.
        let summary = Arc::new(GatewaySummary::of(
            &routes,
            namespace,
            name,
            system_prefix,
            apexes,
        ));
        let mut g = self.lock();
        if g.len >= g.sweep_at {
            g.by_gateway.retain(|_, m| {
                m.retain(|_, (seen, _)| seen.strong_count() > 0);
                !m.is_empty()
            });
            g.len = g.by_gateway.values().map(HostMap::len).sum();
            g.sweep_at = (2 * g.len).max(64);
        }
        let added = g
            .by_gateway
            .entry(namespace.to_string())
            .or_default()
            .insert(name.to_string(), (Arc::downgrade(&routes), summary.clone()))
            .is_none();
        g.len += usize::from(added);
        (routes, summary)
    }

    /// Gateways with a summary kept (for tests and metrics).
    pub fn len(&self) -> usize {
        self.lock().len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

struct Gateway<'a> {
    namespace: &'a str,
    name: &'a str,
}

impl Gateway<'_> {
    fn targeted_by<'r>(&self, r: &'r RouteFacts) -> impl Iterator<Item = Option<&'r str>> {
        r.parent_refs
            .iter()
            .filter(|p| p.targets(&r.namespace, self.namespace, self.name))
            .map(|p| p.section_name.as_deref())
    }

    /// Its parentRefs claim HTTPS listeners here (an HTTPRoute, as the reconciler judges).
    fn claimed_by(&self, r: &RouteFacts) -> bool {
        r.kind == RouteKind::HttpRoute && self.targeted_by(r).any(section_claims_https)
    }

    fn published_by(&self, r: &RouteFacts) -> bool {
        self.targeted_by(r).next().is_some()
            && r.our_status.iter().any(|e| {
                e.parent_ref
                    .targets(&r.namespace, self.namespace, self.name)
            })
    }
}

impl std::fmt::Display for Gateway<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Its valid hostnames, each once, in order.
fn valid_hostnames<'a>(r: &Admitted<'a>) -> Vec<&'a str> {
    let mut v: Vec<&str> = Vec::with_capacity(r.hostnames.len());
    v.extend(
        r.hostnames
            .iter()
            .copied()
            .filter(|h| hostname::validate(h).is_ok()),
    );
    v.sort_unstable();
    v.dedup();
    v
}

fn http_route<'g>(
    route: &Admitted<'_>,
    on: &Gateway<'_>,
    routes: &GatewayRoutes,
    summary: &'g GatewaySummary,
    system_prefix: &str,
    apexes: &dyn ApexOwners,
    out: &mut Vec<RouteWarning>,
) {
    if route.kind != RouteKind::HttpRoute || !route.sections_on(on).any(section_claims_https) {
        // sectionName `http` or `tls-…`: no HTTPS listener, no hostname claimed.
        return;
    }
    let me = route.claimant();
    let is_me = |r: &RouteFacts| route.is(r);
    // The summary counts the route itself when an earlier version of it is published here;
    // it is judged against the others only.
    let best_other =
        |claims: &'g HostClaims| claims.ranked.iter().find(|r| !is_me(r)).map(|r| &**r);
    /// One of its hostnames, looked up once: its claims here, and the best claimant other
    /// than this route (none: no one else claims it).
    struct Mine<'h, 's> {
        h: &'h str,
        claims: Option<&'s HostClaims>,
        best: Option<&'s RouteFacts>,
    }
    let mine: Vec<Mine<'_, '_>> = valid_hostnames(route)
        .into_iter()
        .map(|h| {
            let claims = summary.https.get(h);
            Mine {
                h,
                claims,
                best: claims.and_then(best_other),
            }
        })
        .collect();
    // Looked up once, and only for a route that meets another namespace's claim.
    let mut my_apex: Option<Option<String>> = None;
    for Mine { h, claims, best } in &mine {
        let Some(claims) = claims else {
            continue;
        };
        // The route's own namespace shares the hostname: only other namespaces conflict.
        let foreign = count_except(&claims.namespaces, me.namespace);
        if foreign == 0 {
            continue;
        }
        let my_apex = my_apex.get_or_insert_with(|| apexes.apex_of(me.namespace));
        let me_ac = ApexClaimant {
            namespace: me.namespace,
            name: me.name,
            apex: my_apex.as_deref(),
        };
        let best = best.map(|r| apex_claimant(r, &summary.apex));
        let Some(winner) = claims::winner_for(h, best.into_iter().chain([me_ac]), system_prefix)
            .map(|w| w.claimant())
        else {
            continue;
        };
        let text = if claims::shares_with(&me, &winner) {
            let names = names_except(&claims.namespaces, me.namespace, foreign);
            concat(&[
                "HostnameConflict for ",
                &names,
                ": ",
                h,
                " is also on ",
                on.namespace,
                "/",
                on.name,
                "; this route wins",
            ])
        } else {
            concat(&[
                "HostnameConflict: ",
                h,
                " is already on ",
                on.namespace,
                "/",
                on.name,
                " from ",
                winner.namespace,
                ", which wins",
            ])
        };
        out.push(RouteWarning {
            reason: Reason::HostnameConflict,
            text,
        });
    }
    let claimed_by_others = |h: &str| summary.https.get(h).and_then(best_other).is_some();

    // The budget, as http01 counts it: hostnames only this route's published version claims
    // are the ones it would take over, not listeners in use by others.
    let own_only = routes
        .get(&(route.kind, route.namespace.into(), route.name.into()))
        .filter(|r| on.published_by(r) && on.claimed_by(r))
        .map_or(0, |r| {
            r.hostnames
                .iter()
                .map(String::as_str)
                .collect::<BTreeSet<&str>>()
                .into_iter()
                .filter(|h| listenable(h) && !claimed_by_others(h))
                .count()
        });
    let with_listener = summary
        .listenable
        .saturating_sub(own_only)
        .min(MAX_LISTENERS);
    let in_use = 1 + summary.passthrough + with_listener;
    let left = MAX_LISTENERS.saturating_sub(in_use);
    let new = mine
        .iter()
        .filter(|m| !hostname::is_wildcard(m.h) && m.best.is_none())
        .count();
    if new == 0 || new < left {
        return;
    }
    // What each namespace publishes without this route's own published version: where that
    // version wins a hostname, the best other claimant's namespace would hold it instead.
    let mut published = summary.per_namespace.clone();
    if let Some(old) = routes
        .get(&(route.kind, route.namespace.into(), route.name.into()))
        .filter(|r| on.published_by(r) && on.claimed_by(r))
    {
        let hosts: BTreeSet<&str> = old
            .hostnames
            .iter()
            .map(String::as_str)
            .filter(|h| listenable(h))
            .collect();
        for h in hosts {
            let Some(c) = summary.https.get(h) else {
                continue;
            };
            if !c.ranked.first().is_some_and(|w| is_me(w)) {
                continue;
            }
            if let Some(n) = published.get_mut(me.namespace) {
                *n = n.saturating_sub(1);
            }
            if let Some(next) = best_other(c) {
                *published.entry(next.namespace.to_string()).or_default() += 1;
            }
        }
    }
    let others_publish = published
        .iter()
        .any(|(ns, n)| ns.as_str() != me.namespace && *n > 0);
    if new == left || !others_publish {
        // Alone on the Gateway (or taking exactly what is left) the share is the whole
        // budget: the plain count says it.
        out.push(budget_warning(on, left, new));
        return;
    }
    let budget = MAX_LISTENERS.saturating_sub(1 + summary.passthrough);
    // Within its share the route takes its listeners from a namespace over its share, and
    // that namespace's routes are the ones cut: nothing to warn this one about.
    if let Some(text) = share_warning(
        (on.namespace, on.name),
        me.namespace,
        &published,
        new,
        budget,
        system_prefix,
    ) {
        out.push(RouteWarning {
            reason: Reason::ListenerBudget,
            text,
        });
    }
}

/// The listener-budget warning: `new` hostnames need a listener, `left` are free (`new ≥ left`).
fn budget_warning(on: &Gateway<'_>, left: usize, new: usize) -> RouteWarning {
    let (left_s, max) = (left.to_string(), MAX_LISTENERS.to_string());
    let text = if new == left {
        concat(&[
            "Gateway ",
            on.namespace,
            "/",
            on.name,
            ": this route takes the last ",
            &left_s,
            " of ",
            &max,
            " listeners (http01); more need certMode dns01",
        ])
    } else {
        concat(&[
            "Gateway ",
            on.namespace,
            "/",
            on.name,
            ": ",
            &left_s,
            " of ",
            &max,
            " listeners left, ",
            &new.to_string(),
            " needed, ",
            &(new - left).to_string(),
            " hostname(s) get none (http01); use certMode dns01",
        ])
    };
    RouteWarning {
        reason: Reason::ListenerBudget,
        text,
    }
}

fn tls_route(
    route: &Admitted<'_>,
    summary: &GatewaySummary,
    on: &Gateway<'_>,
    out: &mut Vec<RouteWarning>,
) {
    for h in valid_hostnames(route) {
        let Some(passing) = summary.tls.get(h) else {
            continue;
        };
        // Its own namespace (the route itself included) shares a passthrough.
        let n = count_except(passing, route.namespace);
        if n == 0 {
            continue;
        }
        let names = names_except(passing, route.namespace, n);
        out.push(RouteWarning {
            reason: Reason::PassthroughShared,
            text: concat(&[
                h,
                " also passes through ",
                on.namespace,
                "/",
                on.name,
                " from ",
                &names,
                "; the data plane picks one",
            ]),
        });
    }
}

/// The edge: the admitted object's projection (metadata, `spec.hostnames`,
/// `spec.parentRefs`) read the way the index reads a watched route, judged against the
/// index, counted per reason.
impl super::Admission {
    pub(super) fn index_warnings(
        &self,
        resource: super::WebhookResource,
        review: &crate::policy::Review<'_>,
        ns: &crate::policy::NamespaceContext,
    ) -> Vec<String> {
        let kind = match resource {
            super::WebhookResource::HttpRoutes => RouteKind::HttpRoute,
            super::WebhookResource::TlsRoutes => RouteKind::TlsRoute,
            _ => return Vec::new(),
        };
        // Nothing indexed (a snapshot without routes, no reconciler, `--namespaces` mode):
        // no work on the hot path. Without an index attached, not even the index's lock:
        // both server threads taking it on every review bounce its cache line.
        if !self.warns || self.routes.is_empty() {
            return Vec::new();
        }
        let fallback;
        let route = match read_admitted(kind, review) {
            Some(route) => route,
            None => {
                fallback = admitted_through_index(kind, review);
                Admitted::of(&fallback)
            }
        };
        let publishes_through = match ns {
            crate::policy::NamespaceContext::Found { labels } => Some(
                labels
                    .get(crate::platform::GATEWAY_LABEL)
                    .map_or("", String::as_str),
            ),
            crate::policy::NamespaceContext::NotFound => None,
        };
        let prefix = &self.cfg.system_prefix;
        let apexes = self.namespaces.apex_owners();
        let found = warnings_for(
            &route,
            |ns, name| self.summaries.get(&self.routes, ns, name, prefix, apexes),
            prefix,
            publishes_through,
            apexes,
        );
        found
            .into_iter()
            .map(|w| {
                self.counters.warning(resource, w.reason);
                w.text
            })
            .collect()
    }
}

/// The route being admitted: what the index's projection reads from the whole object
/// (`cluster::routes::project`), read straight from the review's projected object
/// (src/admission/project.rs kept `spec.hostnames` and `spec.parentRefs` with their JSON
/// types) and borrowed from it. Parts of the wrong type are dropped as the index drops them.
/// `None` for a shape only the index's serde reading knows how to take (a list where it
/// reads a struct: serde takes its fields by position): the caller reads that one through
/// [`admitted_through_index`], so every shape reads alike
/// (`the_admitted_route_reads_as_the_whole_object`).
fn read_admitted<'a>(kind: RouteKind, review: &crate::policy::Review<'a>) -> Option<Admitted<'a>> {
    use serde_json::Value;
    let mut route = Admitted {
        kind,
        namespace: review.namespace,
        name: review.name,
        hostnames: Vec::new(),
        parent_refs: Vec::new(),
    };
    let object: &'a Value = review.object;
    let spec = match object.get("spec") {
        Some(Value::Object(spec)) => spec,
        Some(Value::Array(_)) => return None,
        // Absent, null or a scalar: the index reads no spec.
        _ => return Some(route),
    };
    if let Some(Value::Array(hosts)) = spec.get("hostnames") {
        // Each element that is not a string is dropped; so is a list that is not one.
        route.hostnames.reserve_exact(hosts.len());
        route
            .hostnames
            .extend(hosts.iter().filter_map(Value::as_str));
    }
    if let Some(Value::Array(refs)) = spec.get("parentRefs") {
        route.parent_refs.reserve_exact(refs.len());
        for r in refs {
            match r {
                Value::Object(r) => route.parent_refs.extend(parent_ref(r)),
                Value::Array(_) => return None,
                _ => {}
            }
        }
    }
    Some(route)
}

/// One parentRef object, or `None` when a field it reads has the wrong type (the index then
/// drops the whole parentRef: `ParentRefView` does not decode) or its name is empty.
fn parent_ref(r: &serde_json::Map<String, serde_json::Value>) -> Option<ParentOf<'_>> {
    use serde_json::Value;
    // An optional string: absent and null are none, a string is kept, anything else fails.
    let text = |key: &str| match r.get(key) {
        None | Some(Value::Null) => Some(None),
        Some(Value::String(s)) => Some(Some(s.as_str())),
        Some(_) => None,
    };
    let name = match r.get("name") {
        Some(Value::String(s)) if !s.is_empty() => s,
        _ => return None,
    };
    let port = match r.get("port") {
        None | Some(Value::Null) => None,
        // An integer outside i32 is kept as none, as the index keeps it.
        Some(Value::Number(n)) => i32::try_from(n.as_i64()?).ok(),
        Some(_) => return None,
    };
    Some(ParentOf {
        group: text("group")?,
        kind: text("kind")?,
        namespace: text("namespace")?,
        name,
        section_name: text("sectionName")?,
        port,
    })
}

/// The route being admitted through the index's own projection: object to JSON text, read
/// as a watched route is.
fn admitted_through_index(kind: RouteKind, review: &crate::policy::Review<'_>) -> RouteFacts {
    // The admission codec kept only the fields a layer reads (src/admission/project.rs):
    // this spec is hostnames and parentRefs, not the rules.
    let spec = review
        .object
        .get("spec")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let object = kube::api::DynamicObject {
        types: None,
        metadata: kube::api::ObjectMeta {
            name: Some(review.name.to_string()),
            namespace: Some(review.namespace.to_string()),
            ..Default::default()
        },
        data: serde_json::json!({ "spec": spec }),
    };
    crate::cluster::routes::project(kind, &object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::routes::{RouteIndex, project};
    use crate::platform::CONTROLLER_NAME;
    use kube::api::DynamicObject;
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    const GW: (&str, &str) = ("tenant-root", "tenant-root");

    /// A route as the API server holds it. `section`: the parentRef's sectionName;
    /// `published`: carries our status entry for the Gateway.
    fn obj(
        kind: &str,
        ns: &str,
        name: &str,
        section: Option<&str>,
        hosts: &[&str],
        published: bool,
    ) -> RouteFacts {
        let mut parent = json!({"name": GW.1, "namespace": GW.0});
        if let Some(s) = section {
            parent["sectionName"] = json!(s);
        }
        let status = if published {
            json!({"parents": [{"controllerName": CONTROLLER_NAME, "parentRef": parent,
                "conditions": []}]})
        } else {
            Value::Null
        };
        let api = if kind == "TLSRoute" {
            "gateway.networking.k8s.io/v1alpha2"
        } else {
            "gateway.networking.k8s.io/v1"
        };
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": api, "kind": kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": {"parentRefs": [parent], "hostnames": hosts},
            "status": status,
        }))
        .expect("dynamic object");
        let k = if kind == "TLSRoute" {
            RouteKind::TlsRoute
        } else {
            RouteKind::HttpRoute
        };
        project(k, &o)
    }

    fn http(ns: &str, name: &str, hosts: &[&str]) -> RouteFacts {
        obj("HTTPRoute", ns, name, None, hosts, true)
    }

    fn run(index: &[RouteFacts], route: &RouteFacts) -> Vec<RouteWarning> {
        let idx = RouteIndex::default();
        for r in index {
            idx.apply(r.clone());
        }
        warnings(
            route,
            |ns, n| idx.for_gateway(ns, n),
            "cozy-",
            None,
            &crate::platform::NoApexOwners,
        )
    }

    #[test]
    fn hostname_conflicts_say_who_wins() {
        let h = "dashboard.alice.example.org";
        // (index, admitted route, expected (reason, substrings) per warning)
        type Case = (
            &'static str,
            Vec<RouteFacts>,
            RouteFacts,
            Vec<(Reason, Vec<&'static str>)>,
        );
        let cases: Vec<Case> = vec![
            (
                "a cozy-* route already publishes it: cozy wins",
                vec![http("cozy-dashboard", "dashboard", &[h])],
                http("tenant-alice", "web", &[h]),
                vec![(
                    Reason::HostnameConflict,
                    vec![
                        "HostnameConflict: dashboard.alice.example.org is already on tenant-root/tenant-root from cozy-dashboard, which wins",
                    ],
                )],
            ),
            (
                "the admitted cozy route wins over a published tenant route",
                vec![http("tenant-alice", "web", &[h])],
                http("cozy-dashboard", "dashboard", &[h]),
                vec![(
                    Reason::HostnameConflict,
                    vec![
                        "HostnameConflict for tenant-alice: dashboard.alice.example.org is also on tenant-root/tenant-root; this route wins",
                    ],
                )],
            ),
            (
                "tenants: the smaller namespace wins, whatever came first",
                vec![http("tenant-bob", "a", &[h])],
                http("tenant-alice", "z", &[h]),
                vec![(
                    Reason::HostnameConflict,
                    vec!["HostnameConflict for tenant-bob:", "this route wins"],
                )],
            ),
            (
                "tenants: a larger namespace loses",
                vec![http("tenant-alice", "z", &[h])],
                http("tenant-bob", "a", &[h]),
                vec![(
                    Reason::HostnameConflict,
                    vec!["from tenant-alice, which wins"],
                )],
            ),
            (
                "several losers are named by count",
                vec![
                    http("tenant-bob", "a", &[h]),
                    http("tenant-carol", "a", &[h]),
                    http("tenant-dave", "a", &[h]),
                ],
                http("cozy-x", "a", &[h]),
                vec![(
                    Reason::HostnameConflict,
                    vec!["HostnameConflict for tenant-bob and 2 more:"],
                )],
            ),
            (
                "the winner is decided among all claimants, not against the first",
                vec![http("tenant-bob", "a", &[h]), http("cozy-x", "a", &[h])],
                http("tenant-alice", "a", &[h]),
                vec![(Reason::HostnameConflict, vec!["from cozy-x, which wins"])],
            ),
            (
                "one namespace shares a hostname among its routes",
                vec![http("tenant-alice", "other", &[h])],
                http("tenant-alice", "web", &[h]),
                vec![],
            ),
            (
                "an UPDATE of the publishing route itself is no conflict",
                vec![http("tenant-alice", "web", &[h])],
                http("tenant-alice", "web", &[h]),
                vec![],
            ),
            (
                "a route without our status entry does not publish (not attached, or new)",
                vec![obj("HTTPRoute", "cozy-dashboard", "d", None, &[h], false)],
                http("tenant-alice", "web", &[h]),
                vec![],
            ),
            (
                "a route on sectionName http claims nothing",
                vec![obj(
                    "HTTPRoute",
                    "cozy-dashboard",
                    "d",
                    Some("http"),
                    &[h],
                    true,
                )],
                http("tenant-alice", "web", &[h]),
                vec![],
            ),
            (
                "the admitted route on a tls- section claims nothing",
                vec![http("cozy-dashboard", "d", &[h])],
                obj(
                    "HTTPRoute",
                    "tenant-alice",
                    "web",
                    Some("tls-api"),
                    &[h],
                    false,
                ),
                vec![],
            ),
            (
                "a named https section claims",
                vec![obj(
                    "HTTPRoute",
                    "cozy-dashboard",
                    "d",
                    Some("https-dash"),
                    &[h],
                    true,
                )],
                http("tenant-alice", "web", &[h]),
                vec![(
                    Reason::HostnameConflict,
                    vec!["from cozy-dashboard, which wins"],
                )],
            ),
            (
                "a TLSRoute with the hostname is no HTTPS claimant",
                vec![obj(
                    "TLSRoute",
                    "cozy-dashboard",
                    "d",
                    Some("tls-api"),
                    &[h],
                    true,
                )],
                http("tenant-alice", "web", &[h]),
                vec![],
            ),
            (
                "another Gateway's routes do not matter",
                vec![{
                    let mut r = http("cozy-dashboard", "d", &[h]);
                    r.parent_refs[0].name = "other".into();
                    r.our_status[0].parent_ref.name = "other".into();
                    r
                }],
                http("tenant-alice", "web", &[h]),
                vec![],
            ),
            (
                "each conflicting hostname is one warning; invalid ones are not judged",
                vec![http(
                    "cozy-a",
                    "a",
                    &["a.alice.example.org", "b.alice.example.org", "Bad_"],
                )],
                http(
                    "tenant-alice",
                    "web",
                    &[
                        "b.alice.example.org",
                        "a.alice.example.org",
                        "a.alice.example.org",
                        "Bad_",
                    ],
                ),
                vec![
                    (Reason::HostnameConflict, vec![": a.alice.example.org is"]),
                    (Reason::HostnameConflict, vec![": b.alice.example.org is"]),
                ],
            ),
            (
                "TLSRoutes: another namespace's passthrough of the hostname",
                vec![obj(
                    "TLSRoute",
                    "cozy-kubevirt",
                    "vm",
                    Some("tls-vm"),
                    &[h],
                    true,
                )],
                obj(
                    "TLSRoute",
                    "tenant-alice",
                    "vm",
                    Some("tls-vm"),
                    &[h],
                    false,
                ),
                vec![(
                    Reason::PassthroughShared,
                    vec![
                        "dashboard.alice.example.org also passes through tenant-root/tenant-root from cozy-kubevirt; the data plane picks one",
                    ],
                )],
            ),
            (
                "TLSRoutes: the same namespace, or an HTTPRoute, is no passthrough conflict",
                vec![
                    obj(
                        "TLSRoute",
                        "tenant-alice",
                        "vm2",
                        Some("tls-vm"),
                        &[h],
                        true,
                    ),
                    http("cozy-dashboard", "d", &[h]),
                ],
                obj(
                    "TLSRoute",
                    "tenant-alice",
                    "vm",
                    Some("tls-vm"),
                    &[h],
                    false,
                ),
                vec![],
            ),
        ];
        for (what, index, route, want) in cases {
            let got = run(&index, &route);
            assert_eq!(got.len(), want.len(), "{what}: {got:?}");
            for (g, (reason, parts)) in got.iter().zip(&want) {
                assert_eq!(g.reason, *reason, "{what}: {g:?}");
                for p in parts {
                    assert!(g.text.contains(p), "{what}: {:?} lacks {p:?}", g.text);
                }
                assert!(
                    g.text.chars().count() <= crate::admission::MAX_WARNING_LEN,
                    "{what}: {:?}",
                    g.text
                );
            }
        }
    }

    /// `n` published routes in `tenant-root` with one distinct hostname each.
    fn run_with(
        index: &[RouteFacts],
        route: &RouteFacts,
        apexes: &[(&str, &str)],
    ) -> Vec<RouteWarning> {
        let idx = RouteIndex::default();
        for r in index {
            idx.apply(r.clone());
        }
        let mut map = crate::cluster::apex::ApexMap::default();
        for (ns, apex) in apexes {
            map.set(
                ns,
                &BTreeMap::from([(crate::platform::HOST_LABEL.to_string(), apex.to_string())]),
            );
        }
        warnings(route, |ns, n| idx.for_gateway(ns, n), "cozy-", None, &map)
    }

    /// Issue 20 items 8 and 9 as admission sees them: the fair share decides who is warned
    /// about listeners (a later tenant within its share is not; the flooding one is), and the
    /// most specific apex owner wins the conflict whatever the namespace order.
    #[test]
    fn warnings_follow_the_fair_share_and_the_apex_owner() {
        let flood: Vec<RouteFacts> = (0..63)
            .map(|i| {
                let h = format!("f{i:02}.bob.example.org");
                http("tenant-bob", &format!("f{i:02}"), &[h.as_str()])
            })
            .collect();
        let budget = |w: &[RouteWarning]| -> Vec<String> {
            w.iter()
                .filter(|w| w.reason == Reason::ListenerBudget)
                .map(|w| w.text.clone())
                .collect()
        };
        // A later tenant's route: within its share (1 of 63), it takes a listener from
        // tenant-bob; no warning for it.
        let late = http("tenant-late", "shop", &["shop.late.example.org"]);
        assert_eq!(budget(&run_with(&flood, &late, &[])), Vec::<String>::new());
        // The flooding tenant's next route, alone on the Gateway: the plain count.
        let more = http("tenant-bob", "f63", &["f63.bob.example.org"]);
        let w = budget(&run_with(&flood, &more, &[]));
        assert!(
            w.len() == 1 && w[0].contains("0 of 64 listeners left"),
            "{w:?}"
        );
        // With the later tenant published too: past its fair share.
        let mut two = flood.clone();
        two.push(http("tenant-late", "shop", &["shop.late.example.org"]));
        let w = budget(&run_with(&two, &more, &[]));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("fair share is 62/63") && w[0].contains("1 hostname(s) get none"),
            "{w:?}"
        );
        // The later tenant's second route is still within its share.
        let late2 = http("tenant-late", "cart", &["cart.late.example.org"]);
        assert_eq!(budget(&run_with(&two, &late2, &[])), Vec::<String>::new());
        assert!(
            w.iter()
                .all(|t| t.chars().count() <= super::super::MAX_WARNING_LEN)
        );
        // Alone on the Gateway: the plain count, as before.
        let w = budget(&run(
            &filled(63),
            &http("tenant-root", "x", &["new.example.org"]),
        ));
        assert!(w[0].contains("0 of 64 listeners left"), "{w:?}");

        let host = "shop.kid.alice.example.org";
        let apexes = [
            ("tenant-alice", "alice.example.org"),
            ("tenant-alice-kid", "kid.alice.example.org"),
        ];
        let conflict = |w: &[RouteWarning]| -> Vec<String> {
            w.iter()
                .filter(|w| w.reason == Reason::HostnameConflict)
                .map(|w| w.text.clone())
                .collect()
        };
        // The parent published it first; the child owning the apex is told it wins.
        let parent = http("tenant-alice", "takes-kid", &[host]);
        let kid = http("tenant-alice-kid", "shop", &[host]);
        let w = conflict(&run_with(std::slice::from_ref(&parent), &kid, &apexes));
        assert!(w.len() == 1 && w[0].contains("this route wins"), "{w:?}");
        let w = conflict(&run_with(std::slice::from_ref(&kid), &parent, &apexes));
        assert!(w[0].contains("from tenant-alice-kid, which wins"), "{w:?}");
        // Without apexes known, the namespace order of before.
        let w = conflict(&run_with(std::slice::from_ref(&parent), &kid, &[]));
        assert!(w[0].contains("from tenant-alice, which wins"), "{w:?}");
    }

    fn filled(n: usize) -> Vec<RouteFacts> {
        (0..n)
            .map(|i| {
                let h = format!("h{i:02}.example.org");
                http("tenant-root", &format!("r{i:02}"), &[h.as_str()])
            })
            .collect()
    }

    #[test]
    fn listener_budget_counts_what_is_left() {
        // (what, routes in the index, admitted hostnames, expected substrings; none = no warning)
        type Case = (
            &'static str,
            Vec<RouteFacts>,
            Vec<&'static str>,
            Option<Vec<&'static str>>,
        );
        let cases: Vec<Case> = vec![
            ("plenty left", filled(10), vec!["new.example.org"], None),
            (
                "63 listeners in use (http + 62): the next hostname takes the last one",
                filled(62),
                vec!["new.example.org"],
                Some(vec![
                    "Gateway tenant-root/tenant-root: this route takes the last 1 of 64 listeners (http01); more need certMode dns01",
                ]),
            ),
            (
                "63 in use, two new hostnames: one gets none",
                filled(62),
                vec!["new.example.org", "new2.example.org"],
                Some(vec![
                    "Gateway tenant-root/tenant-root: 1 of 64 listeners left, 2 needed, 1 hostname(s) get none (http01); use certMode dns01",
                ]),
            ),
            (
                "full: nothing left",
                filled(63),
                vec!["new.example.org"],
                Some(vec![
                    "0 of 64 listeners left, 1 needed, 1 hostname(s) get none",
                ]),
            ),
            (
                "over the cap already (70 published): still 0 left",
                filled(70),
                vec!["new.example.org"],
                Some(vec!["0 of 64 listeners left"]),
            ),
            (
                "a hostname already published needs no listener",
                filled(63),
                vec!["h05.example.org"],
                None,
            ),
            (
                "a wildcard needs no per-host listener",
                filled(63),
                vec!["*.example.org"],
                None,
            ),
            (
                "62 in use: http, 60 hosts, one passthrough listener named by two TLSRoutes",
                {
                    let mut v = filled(60);
                    v.push(obj(
                        "TLSRoute",
                        "cozy-k",
                        "api",
                        Some("tls-api"),
                        &["api.example.org"],
                        true,
                    ));
                    v.push(obj(
                        "TLSRoute",
                        "cozy-k",
                        "api2",
                        Some("tls-api"),
                        &["api.example.org"],
                        true,
                    ));
                    v
                },
                vec!["a.example.org", "b.example.org"],
                Some(vec!["takes the last 2 of 64"]),
            ),
            (
                "routes that are not published do not use listeners",
                (0..70)
                    .map(|i| {
                        let h = format!("h{i:02}.example.org");
                        obj(
                            "HTTPRoute",
                            "tenant-root",
                            &format!("r{i:02}"),
                            None,
                            &[h.as_str()],
                            false,
                        )
                    })
                    .collect(),
                vec!["new.example.org"],
                None,
            ),
        ];
        for (what, index, hosts, want) in cases {
            let route = obj("HTTPRoute", "tenant-root", "new", None, &hosts, false);
            let got: Vec<RouteWarning> = run(&index, &route)
                .into_iter()
                .filter(|w| w.reason == Reason::ListenerBudget)
                .collect();
            match want {
                None => assert!(got.is_empty(), "{what}: {got:?}"),
                Some(parts) => {
                    assert_eq!(got.len(), 1, "{what}: {got:?}");
                    for p in parts {
                        assert!(
                            got[0].text.contains(p),
                            "{what}: {:?} lacks {p:?}",
                            got[0].text
                        );
                    }
                    assert!(got[0].text.chars().count() <= crate::admission::MAX_WARNING_LEN);
                }
            }
        }
    }

    #[test]
    fn long_names_are_cut_to_120_characters() {
        let h = format!("{}.{}.example.org", "a".repeat(63), "b".repeat(63));
        let index = vec![http("cozy-dashboard", "d", &[h.as_str()])];
        let got = run(&index, &http("tenant-alice", "web", &[h.as_str()]));
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].text.chars().count(),
            crate::admission::MAX_WARNING_LEN
        );
        assert!(got[0].text.ends_with('…'));
    }

    #[test]
    fn a_route_on_two_gateways_is_judged_on_each() {
        let h = "x.example.org";
        let mut other = http("cozy-a", "a", &[h]);
        other.parent_refs[0].name = "gw2".into();
        other.our_status[0].parent_ref.name = "gw2".into();
        let index = vec![http("cozy-b", "b", &[h]), other];
        let mut route = http("tenant-alice", "web", &[h]);
        let mut second = route.parent_refs[0].clone();
        second.name = "gw2".into();
        crate::reconcile::testing::push(&mut route.parent_refs, second);
        let got = run(&index, &route);
        let texts: Vec<&str> = got.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(got.len(), 2, "{texts:?}");
        // Gateways in (namespace, name) order.
        assert!(
            texts[0].contains("tenant-root/gw2 from cozy-a"),
            "{texts:?}"
        );
        assert!(
            texts[1].contains("tenant-root/tenant-root from cozy-b"),
            "{texts:?}"
        );
    }

    fn review(ns: &str, hosts: &[&str], parent: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "gateway.networking.k8s.io", "version": "v1", "kind": "HTTPRoute"},
                "resource": {"group": "gateway.networking.k8s.io", "version": "v1", "resource": "httproutes"},
                "name": "web", "namespace": ns, "operation": "CREATE",
                "userInfo": {"username": "alice", "groups": ["g"]},
                "object": {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                    "metadata": {"name": "web", "namespace": ns},
                    "spec": {"parentRefs": [parent], "hostnames": hosts,
                             "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}
            }
        }))
        .expect("json")
    }

    /// Through `Admission::handle`, as the server and `review` call it: the warning is in the
    /// response, the route is still admitted, the counter has a bounded label set; a denial
    /// carries no index warning; an empty index costs nothing and says nothing.
    #[tokio::test]
    async fn the_decision_path_adds_index_warnings_and_counts_them() {
        use crate::admission::{Admission, WebhookResource};
        use crate::cluster::{NamespaceSource, StaticNamespaces};
        use crate::metrics::Metrics;
        use crate::platform::GATEWAY_LABEL;
        use crate::policy::{HOST_LABEL, PolicyConfig};
        use std::collections::BTreeMap;

        let h = "dash.alice.example.org";
        let mut ns = StaticNamespaces::default();
        ns.insert(
            "tenant-alice",
            BTreeMap::from([
                (HOST_LABEL.to_string(), "alice.example.org".to_string()),
                (GATEWAY_LABEL.to_string(), "tenant-root".to_string()),
            ]),
        );
        let ns = NamespaceSource::Static(Arc::new(ns));
        let idx = Arc::new(RouteIndex::default());
        idx.apply(http("cozy-dashboard", "dashboard", &[h]));
        let metrics = Metrics::new();
        let a = Admission::new(
            Arc::new(PolicyConfig::default()),
            ns.clone(),
            metrics.clone(),
        )
        .with_routes(idx);
        let parent = json!({"name": GW.1, "namespace": GW.0});
        async fn post(a: &Admission, body: Vec<u8>) -> Value {
            let r = a.handle(Some(WebhookResource::HttpRoutes), &body).await;
            serde_json::from_slice::<Value>(&r.body).expect("json")
        }
        let v = post(&a, review("tenant-alice", &[h], parent.clone())).await;
        assert_eq!(v["response"]["allowed"], json!(true), "{v}");
        let w = v["response"]["warnings"].as_array().expect("warnings");
        assert_eq!(w.len(), 1, "{v}");
        assert!(
            w[0].as_str()
                .unwrap_or_default()
                .contains("from cozy-dashboard, which wins")
        );
        let text = metrics.render();
        assert!(
            text.contains(
                "tenant_gateway_admission_warnings_total{reason=\"hostname_conflict\",resource=\"httproutes\"} 1"
            ),
            "{text}"
        );

        // Denied by layer 7 (outside the apex): no index warning with the denial.
        let v = post(
            &a,
            review("tenant-alice", &["dash.bob.example.org"], parent.clone()),
        )
        .await;
        assert_eq!(v["response"]["allowed"], json!(false));
        assert!(v["response"].get("warnings").is_none(), "{v}");

        // Another Gateway: nothing to say.
        let v = post(&a, review("tenant-alice", &[h], json!({"name": "gw2"}))).await;
        assert!(v["response"].get("warnings").is_none(), "{v}");

        // No index given: nothing to say.
        let plain = Admission::new(Arc::new(PolicyConfig::default()), ns, Metrics::new());
        let v = post(&plain, review("tenant-alice", &[h], parent)).await;
        assert_eq!(v["response"]["allowed"], json!(true));
        assert!(v["response"].get("warnings").is_none(), "{v}");
    }

    #[test]
    fn a_tenant_route_is_judged_only_on_gateways_it_may_attach_to() {
        let h = "dashboard.alice.example.org";
        let idx = RouteIndex::default();
        idx.apply(http("cozy-dashboard", "dashboard", &[h]));
        let route = http("tenant-alice", "web", &[h]);
        let run = |through: Option<&str>| {
            warnings(
                &route,
                |ns, n| idx.for_gateway(ns, n),
                "cozy-",
                through,
                &crate::platform::NoApexOwners,
            )
            .len()
        };
        // (gateway label of tenant-alice, warnings)
        for (through, want) in [
            (Some("tenant-root"), 1),
            (None, 1),
            (Some("tenant-bob"), 0),
            (Some(""), 0),
        ] {
            assert_eq!(run(through), want, "{through:?}");
        }
        // Its own namespace's Gateway needs no label.
        let idx = RouteIndex::default();
        let mut other = http("tenant-alice", "x", &[h]);
        other.namespace = "tenant-alice-2".into();
        let mut own = http("tenant-alice", "web", &[h]);
        for r in [&mut other, &mut own] {
            r.parent_refs[0].namespace = Some("tenant-alice".into());
            if let Some(e) = r.our_status.first_mut() {
                e.parent_ref.namespace = Some("tenant-alice".into());
            }
        }
        idx.apply(other);
        let got = warnings(
            &own,
            |ns, n| idx.for_gateway(ns, n),
            "cozy-",
            Some(""),
            &crate::platform::NoApexOwners,
        );
        assert_eq!(got.len(), 1, "{got:?}");
    }

    /// A route on the Gateways of `parents` (name, sectionName), in `tenant-root`; our status
    /// entry for each Gateway of `published`.
    fn routed(
        kind: RouteKind,
        ns: &str,
        name: &str,
        parents: &[(&str, Option<&str>)],
        hosts: &[&str],
        published: &[&str],
    ) -> RouteFacts {
        let parent = |gw: &str, section: Option<&str>| {
            let mut p = json!({"name": gw, "namespace": GW.0});
            if let Some(s) = section {
                p["sectionName"] = json!(s);
            }
            p
        };
        let refs: Vec<Value> = parents.iter().map(|(g, s)| parent(g, *s)).collect();
        let status: Vec<Value> = published
            .iter()
            .map(|g| {
                let section = parents.iter().find(|(x, _)| x == g).and_then(|(_, s)| *s);
                json!({"controllerName": CONTROLLER_NAME, "parentRef": parent(g, section),
                       "conditions": []})
            })
            .collect();
        let (api, k) = match kind {
            RouteKind::TlsRoute => ("gateway.networking.k8s.io/v1alpha2", "TLSRoute"),
            RouteKind::HttpRoute => ("gateway.networking.k8s.io/v1", "HTTPRoute"),
        };
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": api, "kind": k,
            "metadata": {"name": name, "namespace": ns},
            "spec": {"parentRefs": refs, "hostnames": hosts},
            "status": {"parents": status},
        }))
        .expect("dynamic object");
        project(kind, &o)
    }

    /// A random route over small pools of namespaces, names, sections and hostnames (so that
    /// claims collide, repeat and cross Gateways), `hosts` distinct listenable hostnames.
    fn random_route(rng: &mut fastrand::Rng, hosts: usize) -> RouteFacts {
        const NS: &[&str] = &[
            "cozy-a",
            "cozy-b",
            "tenant-root",
            "tenant-alice",
            "tenant-alice-x",
            "tenant-bob",
            "tenant-c",
        ];
        const SECTIONS: &[Option<&str>] = &[
            None,
            None,
            Some("https"),
            Some("https-x"),
            Some("http"),
            Some("tls-a"),
            Some("tls-b"),
        ];
        let kind = if rng.u8(0..5) == 0 {
            RouteKind::TlsRoute
        } else {
            RouteKind::HttpRoute
        };
        let ns = NS[rng.usize(0..NS.len())];
        let name = format!("r{}", rng.usize(0..40));
        let mut parents = vec![(GW.1, SECTIONS[rng.usize(0..SECTIONS.len())])];
        if rng.u8(0..8) == 0 {
            parents.push(("gw2", SECTIONS[rng.usize(0..SECTIONS.len())]));
        }
        if rng.u8(0..10) == 0 {
            // Twice on the same Gateway, another section.
            parents.push((GW.1, SECTIONS[rng.usize(0..SECTIONS.len())]));
        }
        let names: Vec<String> = (0..rng.usize(0..4))
            .map(|_| match rng.u8(0..20) {
                0 => "*.example.org".to_string(),
                1 => "Bad_".to_string(),
                _ => format!("h{}.example.org", rng.usize(0..hosts.max(1))),
            })
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let published: Vec<&str> = parents
            .iter()
            .map(|(g, _)| *g)
            .filter(|_| rng.u8(0..4) != 0)
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .collect();
        routed(kind, ns, &name, &parents, &names, &published)
    }

    /// The summaries give the naive scan's warnings, word for word, on random Gateways from
    /// empty to 5,000 routes (listener budgets below, at and past 64; reviews of routes that
    /// are already indexed, as an UPDATE is), through `warnings` and through the cache.
    #[test]
    fn summaries_answer_as_the_naive_scan_does() {
        let mut compared = 0usize;
        let mut warned: BTreeMap<Reason, usize> = BTreeMap::new();
        // Apexes that contain the random hostnames at different depths, so the most
        // specific owner rule (SPEC §3.3) decides some conflicts.
        let mut apexes = crate::cluster::apex::ApexMap::default();
        for (ns, apex) in [
            ("tenant-root", "example.org"),
            ("tenant-bob", "h1.example.org"),
            ("tenant-c", "h2.example.org"),
            ("cozy-a", "h3.example.org"),
        ] {
            apexes.set(
                ns,
                &BTreeMap::from([(crate::platform::HOST_LABEL.to_string(), apex.to_string())]),
            );
        }
        for seed in 0..40u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let size = [0, 3, 30, 60, 200, 1000][rng.usize(0..6)];
            let size = if seed == 39 { 5000 } else { size };
            let hosts = [5, 40, 62, 70, 400][rng.usize(0..5)];
            let idx = RouteIndex::default();
            let mut indexed = Vec::new();
            for _ in 0..size {
                let r = random_route(&mut rng, hosts);
                indexed.push(r.clone());
                idx.apply(r);
            }
            let cache = SummaryCache::default();
            let prefix = ["cozy-", ""][rng.usize(0..2)];
            for i in 0..24 {
                let mut route = random_route(&mut rng, hosts);
                if i % 3 == 0 && !indexed.is_empty() {
                    // An indexed route again (an UPDATE): with other hostnames, or its own
                    // plus one.
                    let o = &indexed[rng.usize(0..indexed.len())];
                    if rng.bool() {
                        (route.kind, route.namespace, route.name) =
                            (o.kind, o.namespace.clone(), o.name.clone());
                    } else {
                        let extra = route.hostnames.first().cloned();
                        route = o.clone();
                        if let Some(h) = extra {
                            crate::reconcile::testing::push(&mut route.hostnames, h);
                        }
                    }
                }
                for through in [None, Some("tenant-root"), Some("")] {
                    let want = naive_scan::warnings(
                        &route,
                        |ns, n| idx.for_gateway(ns, n),
                        prefix,
                        through,
                        &apexes,
                    );
                    let got = warnings(
                        &route,
                        |ns, n| idx.for_gateway(ns, n),
                        prefix,
                        through,
                        &apexes,
                    );
                    assert_eq!(got, want, "seed {seed}, review {i}: {route:?}");
                    let cached = warnings_from(
                        &route,
                        |ns, n| cache.get(&idx, ns, n, prefix, &apexes),
                        prefix,
                        through,
                        &apexes,
                    );
                    assert_eq!(cached, want, "seed {seed}, review {i} (cached)");
                    compared += 1;
                    for w in &want {
                        *warned.entry(w.reason).or_default() += 1;
                    }
                }
            }
        }
        // The inputs exercise every warning, not only the silent path.
        for reason in [
            Reason::HostnameConflict,
            Reason::ListenerBudget,
            Reason::PassthroughShared,
        ] {
            let n = warned.get(&reason).copied().unwrap_or(0);
            assert!(n >= 20, "{reason:?}: {n} in {compared} reviews");
        }
    }

    /// The admitted object's facts are those the index projects from the whole object,
    /// whatever shape the spec has.
    #[test]
    fn the_admitted_route_reads_as_the_whole_object() {
        let rules = json!([{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                            "backendRefs": [{"name": "web", "port": 80}]}]);
        let big = json!(u64::MAX);
        let specs = [
            json!({"parentRefs": [{"name": "gw", "sectionName": "https"}],
                   "hostnames": ["a.example.org", 7, "b.example.org"], "rules": rules}),
            json!({"hostnames": ["a.example.org"], "rules": rules}),
            json!({"parentRefs": "not a list", "hostnames": ["a.example.org"]}),
            json!({"rules": rules}),
            json!("not an object"),
            Value::Null,
            json!(7),
            json!({"hostnames": "a.example.org", "parentRefs": {"name": "gw"}}),
            json!({"hostnames": [null, ["a.example.org"], {"h": 1}, true, "b.example.org"],
                   "parentRefs": null}),
            json!({"hostnames": null, "parentRefs": [null, "gw", 5, {"name": "gw"}]}),
            // Each field of a parentRef with every type: a wrong one drops that parentRef.
            json!({"parentRefs": [
                {"name": "a", "group": null, "kind": null, "namespace": null,
                 "sectionName": null, "port": null},
                {"name": "b", "group": "gateway.networking.k8s.io", "kind": "Gateway",
                 "namespace": "tenant-root", "sectionName": "https-x", "port": 443},
                {"name": "c", "group": 5},
                {"name": "d", "kind": ["Gateway"]},
                {"name": "e", "namespace": {"x": 1}},
                {"name": "f", "sectionName": true},
                {"name": "g", "port": "443"},
                {"name": "h", "port": 443.0},
                {"name": "i", "port": -1},
                {"name": "j", "port": 4_294_967_296_i64},
                {"name": "k", "port": big},
                {"name": null},
                {"name": 5},
                {"name": ""},
                {"namespace": "tenant-root"},
                {"name": "l", "unknown": [1, 2], "Name": "m"},
                {"name": "n", "kind": "ListenerSet", "group": "x.io"}
            ], "hostnames": ["a.example.org", "", "*.example.org", "A.Example.Org"]}),
            // Lists where a struct is read: serde takes a struct's fields by position.
            json!([["a.example.org"], [{"name": "gw"}]]),
            json!([["a.example.org"]]),
            json!([["a.example.org"], [], 1]),
            json!([]),
            json!({"parentRefs": [["g", "Gateway", "tenant-root", "gw"], {"name": "x"}]}),
            json!({"parentRefs": [[null, null, null, "gw", "https", 443]]}),
            json!({"parentRefs": [[]]}),
        ];
        let mut direct = 0;
        let n = specs.len();
        for spec in specs {
            let object = json!({"apiVersion": "gateway.networking.k8s.io/v1",
                                "kind": "HTTPRoute",
                                "metadata": {"name": "web", "namespace": "tenant-alice"},
                                "spec": spec});
            let review = crate::policy::Review {
                operation: crate::policy::Operation::Create,
                kind: "HTTPRoute",
                namespace: "tenant-alice",
                name: "web",
                object: &object,
                old_object: None,
                username: "alice",
                groups: &[],
            };
            let whole: DynamicObject =
                serde_json::from_value(object.clone()).expect("dynamic object");
            let want = project(RouteKind::HttpRoute, &whole);
            assert_eq!(
                admitted_through_index(RouteKind::HttpRoute, &review),
                want,
                "{spec}"
            );
            // And from what the admission codec keeps of it, as the server reads it: the same
            // as the text round trip reads it there. (Not always `want`: arrays are transparent
            // to the codec, so a spec that is a list loses its elements' unread keys; the API
            // server's schema refuses such a spec before any webhook sees it.)
            let raw = serde_json::value::to_raw_value(&object).expect("raw");
            let kept = crate::admission::project::project(
                &raw,
                crate::admission::project::layer_paths(crate::policy::Layer::Route),
            )
            .expect("projects");
            let review_kept = crate::policy::Review {
                object: &kept,
                ..review
            };
            let through = admitted_through_index(RouteKind::HttpRoute, &review_kept);
            if let Some(read) = read_admitted(RouteKind::HttpRoute, &review_kept) {
                assert_eq!(read, Admitted::of(&through), "kept: {spec}");
            }
            if let Some(read) = read_admitted(RouteKind::HttpRoute, &review) {
                assert_eq!(read, Admitted::of(&want), "read directly: {spec}");
                direct += 1;
            }
        }
        // Only the list-for-a-struct shapes (seven) take the text round trip.
        assert_eq!(direct, n - 7);
    }

    /// An UPDATE is counted against the others: the listeners its own published version
    /// holds alone are not in use by anyone else.
    #[test]
    fn an_update_does_not_count_its_own_listeners() {
        // (what, hostnames of the UPDATE of tenant-root/r00, expected substring)
        let cases = [
            (
                "its old hostname frees the 64th listener for the new one",
                vec!["new.example.org"],
                "this route takes the last 1 of 64 listeners",
            ),
            (
                "keeping its hostname and adding one: that one is short",
                vec!["h00.example.org", "new.example.org"],
                "1 of 64 listeners left, 2 needed, 1 hostname(s) get none",
            ),
        ];
        for (what, hosts, want) in cases {
            let route = http("tenant-root", "r00", &hosts);
            let got: Vec<RouteWarning> = run(&filled(63), &route)
                .into_iter()
                .filter(|w| w.reason == Reason::ListenerBudget)
                .collect();
            assert_eq!(got.len(), 1, "{what}: {got:?}");
            assert!(got[0].text.contains(want), "{what}: {:?}", got[0].text);
        }
        // Shared with another route, the hostname stays in use.
        let mut index = filled(63);
        index.push(http("tenant-root", "copy", &["h00.example.org"]));
        let got = run(&index, &http("tenant-root", "r00", &["new.example.org"]));
        assert!(
            got.iter()
                .any(|w| w.text.contains("0 of 64 listeners left")),
            "{got:?}"
        );
    }

    /// A summary is reused while the Gateway's snapshot is current and recomputed once a
    /// route on it changes: the answers follow the index.
    #[test]
    fn the_cache_follows_the_index() {
        let idx = RouteIndex::default();
        for r in filled(40) {
            idx.apply(r);
        }
        let cache = SummaryCache::default();
        let h = "dashboard.alice.example.org";
        let route = http("tenant-alice", "web", &[h]);
        let run = || {
            warnings_from(
                &route,
                |ns, n| cache.get(&idx, ns, n, "cozy-", &crate::platform::NoApexOwners),
                "cozy-",
                None,
                &crate::platform::NoApexOwners,
            )
        };
        assert!(run().is_empty());
        let (first, _) = cache.get(&idx, GW.0, GW.1, "cozy-", &crate::platform::NoApexOwners);
        let (_, s1) = cache.get(&idx, GW.0, GW.1, "cozy-", &crate::platform::NoApexOwners);
        let (_, s2) = cache.get(&idx, GW.0, GW.1, "cozy-", &crate::platform::NoApexOwners);
        assert!(
            Arc::ptr_eq(&s1, &s2),
            "the same snapshot reuses its summary"
        );
        drop(first);
        idx.apply(http("cozy-dashboard", "dashboard", &[h]));
        let got = run();
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].text.contains("from cozy-dashboard, which wins"));
        let (_, s3) = cache.get(&idx, GW.0, GW.1, "cozy-", &crate::platform::NoApexOwners);
        assert!(
            !Arc::ptr_eq(&s1, &s3),
            "a changed Gateway gets a new summary"
        );
        idx.delete(RouteKind::HttpRoute, "cozy-dashboard", "dashboard");
        assert!(run().is_empty());
        assert_eq!(cache.len(), 1);
    }

    /// Summaries of Gateways that are gone from the index are dropped once the cache has
    /// grown to twice what it kept at its last sweep.
    #[test]
    fn the_cache_drops_gateways_that_are_gone() {
        let idx = RouteIndex::default();
        let on = |gw: usize, i: usize| {
            let mut r = http("tenant-root", &format!("r{gw}-{i}"), &["a.example.org"]);
            let name = format!("gw{gw}");
            r.parent_refs[0].name = name.clone();
            r.our_status[0].parent_ref.name = name;
            r
        };
        let cache = SummaryCache::default();
        for gw in 0..70 {
            for i in 0..CACHE_FROM {
                idx.apply(on(gw, i));
            }
            cache.get(
                &idx,
                "tenant-root",
                &format!("gw{gw}"),
                "cozy-",
                &crate::platform::NoApexOwners,
            );
        }
        assert_eq!(cache.len(), 70);
        for gw in 0..70 {
            for i in 0..CACHE_FROM {
                idx.delete(RouteKind::HttpRoute, "tenant-root", &format!("r{gw}-{i}"));
            }
        }
        for gw in 100..200 {
            for i in 0..CACHE_FROM {
                idx.apply(on(gw, i));
            }
            cache.get(
                &idx,
                "tenant-root",
                &format!("gw{gw}"),
                "cozy-",
                &crate::platform::NoApexOwners,
            );
        }
        // Swept at 128 entries (twice the 64 of the first sweep): the 70 gone ones left.
        assert_eq!(cache.len(), 100);
    }

    /// The oracle: every review's warnings computed by scanning all the Gateway's routes, with
    /// no summary, no cache and its own counting; only the wording is shared.
    mod naive_scan {
        use super::super::*;
        use crate::cluster::routes::gateways_of;

        /// Its valid hostnames, each once, in order.
        fn valid_hostnames(r: &RouteFacts) -> BTreeSet<&str> {
            r.hostnames
                .iter()
                .map(String::as_str)
                .filter(|h| hostname::validate(h).is_ok())
                .collect()
        }

        /// "a", "a and b", "a and 2 more".
        fn some_of(names: &BTreeSet<&str>) -> String {
            let mut it = names.iter();
            match (it.next(), names.len()) {
                (None, _) => String::new(),
                (Some(a), 1) => (*a).to_string(),
                (Some(a), 2) => format!("{a} and {}", it.next().copied().unwrap_or_default()),
                (Some(a), n) => format!("{a} and {} more", n - 1),
            }
        }
        use std::collections::{BTreeMap, HashSet};

        pub fn warnings(
            route: &RouteFacts,
            snapshot: impl Fn(&str, &str) -> Arc<GatewayRoutes>,
            system_prefix: &str,
            publishes_through: Option<&str>,
            apexes: &dyn ApexOwners,
        ) -> Vec<RouteWarning> {
            // Only the Gateways its parentRefs name (the admitted object's status is not ours to read).
            let targets = RouteFacts {
                our_status: Box::default(),
                ..route.clone()
            };
            let mut out = Vec::new();
            for (gw_ns, gw_name) in gateways_of(&targets) {
                if *gw_ns != *route.namespace && publishes_through.is_some_and(|g| g != gw_ns) {
                    continue;
                }
                let routes = snapshot(&gw_ns, &gw_name);
                let on = Gateway {
                    namespace: &gw_ns,
                    name: &gw_name,
                };
                let published: Vec<&RouteFacts> = routes
                    .values()
                    .map(|r| &**r)
                    .filter(|r| {
                        (r.kind, &r.namespace, &r.name)
                            != (route.kind, &route.namespace, &route.name)
                    })
                    .filter(|r| on.published_by(r))
                    .collect();
                match route.kind {
                    RouteKind::HttpRoute => {
                        http_route(route, &on, &published, system_prefix, apexes, &mut out)
                    }
                    RouteKind::TlsRoute => tls_route(route, &on, &published, &mut out),
                }
            }
            for w in &mut out {
                w.text = crate::admission::decision::truncate_warning(&w.text);
            }
            out
        }

        fn http_route(
            route: &RouteFacts,
            on: &Gateway<'_>,
            published: &[&RouteFacts],
            system_prefix: &str,
            apexes: &dyn ApexOwners,
            out: &mut Vec<RouteWarning>,
        ) {
            if !on.claimed_by(route) {
                // sectionName `http` or `tls-…`: no HTTPS listener, no hostname claimed.
                return;
            }
            let mine = valid_hostnames(route);
            // One pass over the Gateway's routes: who else claims each of our hostnames, and the
            // distinct hostnames with a listener, counted only up to the cap (past it nothing is
            // left either way, so a large Gateway costs a scan, not a set of all its hostnames).
            let mut claimed: BTreeMap<&str, Vec<Claimant<'_>>> = BTreeMap::new();
            let mut with_listener: HashSet<&str> = HashSet::new();
            for r in published.iter().filter(|r| on.claimed_by(r)) {
                for h in r.hostnames.iter().map(String::as_str) {
                    if mine.contains(h) {
                        claimed.entry(h).or_default().push(Claimant {
                            namespace: &r.namespace,
                            name: &r.name,
                        });
                    }
                    if with_listener.len() < MAX_LISTENERS
                        && !hostname::is_wildcard(h)
                        && hostname::validate(h).is_ok()
                    {
                        with_listener.insert(h);
                    }
                }
            }
            let me = Claimant {
                namespace: &route.namespace,
                name: &route.name,
            };
            let apex_of = |ns: &str| apexes.apex_of(ns);
            for h in &mine {
                let Some(others) = claimed.get(h) else {
                    continue;
                };
                let foreign: BTreeSet<&str> = others
                    .iter()
                    .filter(|c| !claims::shares_with(c, &me))
                    .map(|c| c.namespace)
                    .collect();
                if foreign.is_empty() {
                    continue;
                }
                let owned: Vec<(Claimant<'_>, Option<String>)> = others
                    .iter()
                    .copied()
                    .chain([me])
                    .map(|c| (c, apex_of(c.namespace)))
                    .collect();
                let Some(winner) = claims::winner_for(
                    h,
                    owned.iter().map(|(c, a)| ApexClaimant {
                        namespace: c.namespace,
                        name: c.name,
                        apex: a.as_deref(),
                    }),
                    system_prefix,
                )
                .map(|w| w.claimant()) else {
                    continue;
                };
                let text = if claims::shares_with(&me, &winner) {
                    format!(
                        "HostnameConflict for {}: {h} is also on {on}; this route wins",
                        some_of(&foreign)
                    )
                } else {
                    format!(
                        "HostnameConflict: {h} is already on {on} from {}, which wins",
                        winner.namespace
                    )
                };
                out.push(RouteWarning {
                    reason: Reason::HostnameConflict,
                    text,
                });
            }

            // The budget, as http01 counts it.
            let passthrough: BTreeSet<&str> = published
                .iter()
                .filter(|r| r.kind == RouteKind::TlsRoute)
                .flat_map(|r| on.targeted_by(r))
                .flatten()
                .filter(|s| s.starts_with("tls-"))
                .collect();
            let in_use = 1 + passthrough.len() + with_listener.len();
            let left = MAX_LISTENERS.saturating_sub(in_use);
            let new = mine
                .iter()
                .filter(|h| !hostname::is_wildcard(h) && !claimed.contains_key(*h))
                .count();
            if new == 0 || new < left {
                return;
            }
            // The fair share's demands, counted naively: every listenable hostname the others
            // publish, for the namespace of its winning claimant.
            let mut by_host: BTreeMap<&str, Vec<&RouteFacts>> = BTreeMap::new();
            for r in published.iter().filter(|r| on.claimed_by(r)) {
                for h in r.hostnames.iter().map(String::as_str) {
                    if !hostname::is_wildcard(h) && hostname::validate(h).is_ok() {
                        by_host.entry(h).or_default().push(r);
                    }
                }
            }
            let mut demands: BTreeMap<String, usize> = BTreeMap::new();
            for (h, rs) in &by_host {
                let owned: Vec<(&RouteFacts, Option<String>)> =
                    rs.iter().map(|r| (*r, apex_of(&r.namespace))).collect();
                let w = claims::winner_for(
                    h,
                    owned.iter().map(|(r, a)| ApexClaimant {
                        namespace: &r.namespace,
                        name: &r.name,
                        apex: a.as_deref(),
                    }),
                    system_prefix,
                );
                if let Some(w) = w {
                    *demands.entry(w.namespace.to_string()).or_default() += 1;
                }
            }
            let others_publish = demands
                .iter()
                .any(|(ns, n)| ns.as_str() != me.namespace && *n > 0);
            // The oracle counts on its own; only the wording is shared.
            if new == left || !others_publish {
                out.push(budget_warning(on, left, new));
                return;
            }
            let budget = MAX_LISTENERS.saturating_sub(1 + passthrough.len());
            if let Some(text) = share_warning(
                (on.namespace, on.name),
                me.namespace,
                &demands,
                new,
                budget,
                system_prefix,
            ) {
                out.push(RouteWarning {
                    reason: Reason::ListenerBudget,
                    text,
                });
            }
        }

        fn tls_route(
            route: &RouteFacts,
            on: &Gateway<'_>,
            published: &[&RouteFacts],
            out: &mut Vec<RouteWarning>,
        ) {
            for h in valid_hostnames(route) {
                let others: BTreeSet<&str> = published
                    .iter()
                    .filter(|r| r.kind == RouteKind::TlsRoute && r.namespace != route.namespace)
                    .filter(|r| r.hostnames.iter().any(|x| x == h))
                    .map(|r| &*r.namespace)
                    .collect();
                if others.is_empty() {
                    continue;
                }
                out.push(RouteWarning {
                    reason: Reason::PassthroughShared,
                    text: format!(
                        "{h} also passes through {on} from {}; the data plane picks one",
                        some_of(&others)
                    ),
                });
            }
        }
    }
}
