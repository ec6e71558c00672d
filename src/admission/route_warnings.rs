//! Admission warnings from the route index (SPEC §3.4, §2.5): what the reconciler will do
//! with an HTTPRoute/TLSRoute being admitted, said while it is admitted (the reconciler's
//! rules decide; these never deny).
//!
//! [`warnings`] is a pure function of the route being admitted, the index's snapshot of each
//! Gateway it references, and the system prefix. It judges claims the way
//! `reconcile::routes::analyse` does: only an HTTPRoute parentRef without a sectionName or
//! naming an `https…` listener claims a hostname; the winner of a hostname claimed from
//! several namespaces is [`claims::winner_for`], the function the reconciler's analysis
//! calls, with each namespace's apex from the namespace index.
//!
//! The server reads each Gateway through a [`SummaryCache`]: a [`GatewaySummary`] of the
//! Gateway's routes (what they claim, per hostname), kept for Gateways of 8 routes and more
//! and changed with the index one route at a time ([`GatewaySummary::change`], told by the
//! index as a `RouteFollower`), so a review costs a few lookups per hostname and a route
//! changing on a Gateway of thousands costs that route's hostnames, not a new summary
//! (SPEC §8). A host label changed since a summary read it is seen at the next review of
//! the Gateway (the namespace index counts its changes); the reconciler, not the warning,
//! decides.
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
//! (`claims::share_warning`, SPEC §3.3): a namespace within its share takes its
//! listeners from the others and is not warned. Only an http01 Gateway has a listener per
//! hostname: one whose TenantGateway the index saw in dns01 or existingSecret mode has a
//! wildcard listener per apex and gets no budget warning. A Gateway whose TenantGateway the
//! index has not seen (a `--routes` file without TenantGateways, the moment before their
//! watch lists, a Gateway no TenantGateway renders) is counted as http01, the CRD's default
//! mode, and the warning says "(http01)".
//!
//! An HTTPRoute claiming the hostname of an http01 Gateway's passthrough listener is warned
//! apart from the summaries ([`passthrough_hostname_warnings`], SPEC §3.10): the declaration
//! (`tlsPassthroughServices`, which the index keeps per Gateway from its TenantGateway)
//! decides, not the published routes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

use crate::claims::{
    self, ApexClaimant, Claimant, MAX_LISTENERS, SortedDemands, section_claims_https,
    share_warning, share_warning_sorted,
};
use crate::cluster::route_facts::{
    Hostnames, HttpsListeners, ParentRef, PassthroughListener, RouteFacts, RouteKind,
};
use crate::cluster::routes::{GatewayRoutes, RouteFollower, RouteIndex};
use crate::cluster::watch::Key;
use crate::hostname;
use crate::platform::{ApexOwners, GATEWAY_API_GROUP};

/// Why a warning was given: the `reason` label of its counter (a closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Another namespace publishes the hostname on the same Gateway (HTTPRoute).
    HostnameConflict,
    /// The Gateway's listeners would run out.
    ListenerBudget,
    /// Another namespace passes the hostname through on the same Gateway (TLSRoute).
    PassthroughShared,
    /// The hostname is an http01 Gateway's passthrough hostname (HTTPRoute, SPEC §3.10).
    PassthroughHostname,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::HostnameConflict => "hostname_conflict",
            Reason::ListenerBudget => "listener_budget",
            Reason::PassthroughShared => "passthrough_shared",
            Reason::PassthroughHostname => "passthrough_hostname",
        }
    }

    pub const ALL: [Reason; 4] = [
        Reason::HostnameConflict,
        Reason::ListenerBudget,
        Reason::PassthroughShared,
        Reason::PassthroughHostname,
    ];
}

/// One warning: at most [`super::MAX_WARNING_LEN`] characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteWarning {
    pub reason: Reason,
    pub text: String,
}

/// The route being admitted, as the warnings read it: borrowed from the review's projected
/// object (`read_admitted`) or from route facts ([`Admitted::of`]), so a review allocates
/// nothing for it but two lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted<'a> {
    pub kind: RouteKind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub hostnames: Vec<&'a str>,
    /// Every one of `hostnames` is known valid (the route layer checked them in this review,
    /// `policy::route::checks_every_hostname`), so the warnings do not check them again.
    pub hostnames_valid: bool,
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
            name: f.name(),
            hostnames: f.hostnames().collect(),
            hostnames_valid: false,
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
        (r.kind, &*r.namespace, r.name()) == (self.kind, self.namespace, self.name)
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
/// This summarises each snapshot afresh, and snapshots say nothing of a Gateway's certMode
/// (budgets are counted as http01's); the server reads the summaries, with the certMode the
/// index knows, through a [`SummaryCache`] instead ([`warnings_from`]).
pub fn warnings(
    route: &RouteFacts,
    snapshot: impl Fn(&str, &str) -> Arc<GatewayRoutes>,
    system_prefix: &str,
    publishes_through: Option<&str>,
    apexes: &dyn ApexOwners,
) -> Vec<RouteWarning> {
    warnings_from(
        route,
        |ns, name, f| {
            let routes = snapshot(ns, name);
            let summary = GatewaySummary::of(&routes, ns, name, system_prefix, apexes);
            f(GatewayView {
                routes: &routes,
                summary: &summary,
                listeners: None,
            })
        },
        system_prefix,
        publishes_through,
        apexes,
    )
}

/// [`warnings`] from each Gateway's routes and their [`GatewaySummary`]: `gateway(namespace,
/// name, f)` hands `f` the Gateway ([`SummaryCache::with`]). A few lookups per hostname of
/// `route`, whatever the number of routes on the Gateway.
pub fn warnings_from(
    route: &RouteFacts,
    gateway: impl Fn(&str, &str, &mut dyn FnMut(GatewayView<'_>)),
    system_prefix: &str,
    publishes_through: Option<&str>,
    apexes: &dyn ApexOwners,
) -> Vec<RouteWarning> {
    warnings_for(
        &Admitted::of(route),
        gateway,
        system_prefix,
        publishes_through,
        apexes,
    )
}

/// [`warnings_from`] for a borrowed route (the server's path: `read_admitted`).
pub fn warnings_for(
    route: &Admitted<'_>,
    gateway: impl Fn(&str, &str, &mut dyn FnMut(GatewayView<'_>)),
    system_prefix: &str,
    publishes_through: Option<&str>,
    apexes: &dyn ApexOwners,
) -> Vec<RouteWarning> {
    warnings_on(
        route,
        &route.gateways(),
        gateway,
        system_prefix,
        publishes_through,
        apexes,
    )
}

/// [`warnings_for`] on `gateways`, the route's ([`Admitted::gateways`]).
fn warnings_on(
    route: &Admitted<'_>,
    gateways: &[(&str, &str)],
    gateway: impl Fn(&str, &str, &mut dyn FnMut(GatewayView<'_>)),
    system_prefix: &str,
    publishes_through: Option<&str>,
    apexes: &dyn ApexOwners,
) -> Vec<RouteWarning> {
    let mut out = Vec::new();
    for &(gw_ns, gw_name) in gateways {
        if *gw_ns != *route.namespace && publishes_through.is_some_and(|g| g != gw_ns) {
            continue;
        }
        let on = Gateway {
            namespace: gw_ns,
            name: gw_name,
        };
        gateway(gw_ns, gw_name, &mut |view| match route.kind {
            RouteKind::HttpRoute => {
                http_route(route, &on, view, system_prefix, apexes, &mut out);
            }
            RouteKind::TlsRoute => tls_route(route, view.summary, &on, &mut out),
        });
    }
    for w in &mut out {
        // Within the bound in bytes is within it in characters: no copy.
        if w.text.len() > super::MAX_WARNING_LEN {
            w.text = super::decision::truncate_warning(&w.text);
        }
    }
    out
}

/// The warnings for an HTTPRoute that claims a hostname an http01 Gateway passes through
/// (SPEC §3.10: the declaration wins, and the reconciler refuses that hostname with
/// `Accepted=False, reason PassthroughHostname`). `passthrough(namespace, name)` is what the
/// index knows of a Gateway's passthrough listeners (`RouteIndex::passthrough`, from its
/// TenantGateway); the Gateways judged are those [`warnings_for`] judges, and only
/// parentRefs that claim HTTPS listeners claim a hostname. Apart from the summaries: the
/// declaration, not the published routes, decides.
pub fn passthrough_hostname_warnings(
    route: &Admitted<'_>,
    passthrough: impl Fn(&str, &str) -> Option<Arc<[PassthroughListener]>>,
    publishes_through: Option<&str>,
) -> Vec<RouteWarning> {
    passthrough_on(route, &route.gateways(), passthrough, publishes_through)
}

/// [`passthrough_hostname_warnings`] on `gateways`, the route's ([`Admitted::gateways`]).
fn passthrough_on(
    route: &Admitted<'_>,
    gateways: &[(&str, &str)],
    passthrough: impl Fn(&str, &str) -> Option<Arc<[PassthroughListener]>>,
    publishes_through: Option<&str>,
) -> Vec<RouteWarning> {
    let mut out = Vec::new();
    if route.kind != RouteKind::HttpRoute {
        return out;
    }
    for &(gw_ns, gw_name) in gateways {
        if *gw_ns != *route.namespace && publishes_through.is_some_and(|g| g != gw_ns) {
            continue;
        }
        let on = Gateway {
            namespace: gw_ns,
            name: gw_name,
        };
        if !route.sections_on(&on).any(section_claims_https) {
            continue;
        }
        let Some(listeners) = passthrough(gw_ns, gw_name) else {
            continue;
        };
        for h in valid_hostnames(route) {
            let Some(p) = listeners
                .iter()
                .find(|p| p.hostname.eq_ignore_ascii_case(h))
            else {
                continue;
            };
            let text = concat(&[
                "PassthroughHostname: ",
                h,
                " is passed through by ",
                gw_ns,
                "/",
                gw_name,
                " (",
                &p.listener,
                "); no HTTPS listener for it",
            ]);
            out.push(RouteWarning {
                reason: Reason::PassthroughHostname,
                text: super::decision::truncate_warning(&text),
            });
        }
    }
    out
}

/// A summary's maps by hostname. Every review looks each of its hostnames up: foldhash (the
/// hasher of `hashbrown`, seeded per process) costs a fraction of std's SipHash on these
/// short keys (bench/RESULTS.md, the 20,000-route profile).
type HostMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// Namespaces in name order, each with how many routes of it are counted there.
type Namespaces = Vec<(Arc<str>, usize)>;

/// The apex of each claiming namespace (`None`: no host label), with how many (hostname,
/// route) claims of it a summary holds.
type Apexes = HashMap<Arc<str>, (Option<String>, usize), foldhash::fast::RandomState>;

/// What the published routes of one Gateway claim: what a review needs, gathered from the
/// routes once ([`GatewaySummary::of`]) and then changed with them one route at a time
/// ([`GatewaySummary::change`]), instead of scanning every route on the Gateway per review.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GatewaySummary {
    /// Hostnames (as written) of the published HTTPRoutes that claim HTTPS listeners here.
    https: HostMap<HostClaims>,
    /// How many of those hostnames get a listener (valid, not a wildcard).
    listenable: usize,
    /// Those listenable hostnames by the namespace of their winning claimant (the fair
    /// share's demands, SPEC §3.3), grouped for one namespace's share.
    demands: SortedDemands,
    /// The apex of each claiming namespace, as the conflict order reads it. Read when the
    /// namespace's first claim here comes and kept while it has one, so `ranked` stays in
    /// the order it was sorted in; [`GatewaySummary::apexes_hold`] tells when it is stale.
    apex: Apexes,
    /// The `tls-…` sections published TLSRoutes name here (one listener each), with how many
    /// of them name each.
    sections: BTreeMap<Box<str>, usize>,
    /// Hostnames of published TLSRoutes: the namespaces passing each through.
    tls: HostMap<Namespaces>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct HostClaims {
    /// The claiming routes, each once, in [`claims::compare_for`] order (the winner first).
    ranked: Vec<Arc<RouteFacts>>,
    /// The claiming namespaces.
    namespaces: Namespaces,
}

/// `r` as the conflict order reads it, with its namespace's apex from `apex`.
fn apex_claimant<'a>(r: &'a RouteFacts, apex: &'a Apexes) -> ApexClaimant<'a> {
    ApexClaimant {
        namespace: &r.namespace,
        name: r.name(),
        apex: apex.get(&*r.namespace).and_then(|a| a.0.as_deref()),
    }
}

/// Its hostnames, each once: a route listing a hostname twice claims it once.
fn distinct(hosts: Hostnames<'_>) -> impl Iterator<Item = &str> {
    let all = hosts.clone();
    hosts
        .enumerate()
        .filter(move |(i, h)| !all.clone().take(*i).any(|seen| seen == *h))
        .map(|(_, h)| h)
}

/// Namespaces counted: in name order, with how often each came.
fn tally(mut namespaces: Vec<Arc<str>>) -> Namespaces {
    namespaces.sort_unstable();
    let mut out: Namespaces = Vec::new();
    for ns in namespaces {
        match out.last_mut() {
            Some((last, n)) if *last == ns => *n += 1,
            _ => out.push((ns, 1)),
        }
    }
    out
}

fn count_in(namespaces: &mut Namespaces, ns: &Arc<str>) {
    match namespaces.binary_search_by(|(n, _)| (**n).cmp(&**ns)) {
        Ok(i) => namespaces[i].1 += 1,
        Err(i) => namespaces.insert(i, (ns.clone(), 1)),
    }
}

fn count_out(namespaces: &mut Namespaces, ns: &str) {
    if let Ok(i) = namespaces.binary_search_by(|(n, _)| (**n).cmp(ns)) {
        namespaces[i].1 -= 1;
        if namespaces[i].1 == 0 {
            namespaces.remove(i);
        }
    }
}

impl GatewaySummary {
    /// The summary of `routes`, the routes of Gateway `namespace/name`.
    pub fn of(
        routes: &GatewayRoutes,
        namespace: &str,
        name: &str,
        system_prefix: &str,
        apexes: &dyn ApexOwners,
    ) -> GatewaySummary {
        let on = Gateway { namespace, name };
        let mut https: HostMap<Vec<Arc<RouteFacts>>> = HostMap::default();
        let mut tls: HostMap<Vec<Arc<str>>> = HostMap::default();
        let mut sections: BTreeMap<Box<str>, usize> = BTreeMap::new();
        let mut apex = Apexes::default();
        for r in routes.values().filter(|r| on.published_by(r)) {
            match r.kind {
                RouteKind::HttpRoute => {
                    if on.claimed_by(r) {
                        for h in distinct(r.hostnames()) {
                            https.entry(h.to_string()).or_default().push(r.clone());
                            apex.entry(r.namespace.clone())
                                .or_insert_with(|| (apexes.apex_of(&r.namespace), 0))
                                .1 += 1;
                        }
                    }
                }
                RouteKind::TlsRoute => {
                    for s in on.tls_sections(r) {
                        *sections.entry(s.into()).or_default() += 1;
                    }
                    for h in distinct(r.hostnames()) {
                        tls.entry(h.to_string())
                            .or_default()
                            .push(r.namespace.clone());
                    }
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
                let namespaces = tally(ranked.iter().map(|r| r.namespace.clone()).collect());
                (h, HostClaims { ranked, namespaces })
            })
            .collect();
        let mut listenable_count = 0;
        let mut won: HashMap<Arc<str>, usize> = HashMap::new();
        for (h, c) in &https {
            if !listenable(h) {
                continue;
            }
            listenable_count += 1;
            if let Some(w) = c.ranked.first() {
                *won.entry(w.namespace.clone()).or_default() += 1;
            }
        }
        let mut demands = SortedDemands::default();
        for (ns, d) in &won {
            demands.add(ns, *d, system_prefix);
        }
        GatewaySummary {
            https,
            listenable: listenable_count,
            demands,
            apex,
            sections,
            tls: tls.into_iter().map(|(h, v)| (h, tally(v))).collect(),
        }
    }

    /// On this Gateway, `namespace/name`, route `old` (counted here; `None`: it was not)
    /// became `new` (`None`: gone): the summary becomes that of the routes after the change.
    /// O(h · log n) for routes of h hostnames among n claims (plus moving the n pointers of
    /// one hostname's claimants when many routes claim it).
    pub fn change(
        &mut self,
        namespace: &str,
        name: &str,
        old: Option<&Arc<RouteFacts>>,
        new: Option<&Arc<RouteFacts>>,
        system_prefix: &str,
        apexes: &dyn ApexOwners,
    ) {
        let on = Gateway { namespace, name };
        if let Some(r) = old.filter(|r| on.published_by(r)) {
            self.remove(&on, r, system_prefix);
        }
        if let Some(r) = new.filter(|r| on.published_by(r)) {
            self.add(&on, r, system_prefix, apexes);
        }
    }

    fn add(
        &mut self,
        on: &Gateway<'_>,
        r: &Arc<RouteFacts>,
        system_prefix: &str,
        apexes: &dyn ApexOwners,
    ) {
        match r.kind {
            RouteKind::HttpRoute => {
                if on.claimed_by(r) {
                    for h in distinct(r.hostnames()) {
                        self.claim(h, r, system_prefix, apexes);
                    }
                }
            }
            RouteKind::TlsRoute => {
                for s in on.tls_sections(r) {
                    *self.sections.entry(s.into()).or_default() += 1;
                }
                for h in distinct(r.hostnames()) {
                    match self.tls.get_mut(h) {
                        Some(v) => count_in(v, &r.namespace),
                        None => {
                            self.tls
                                .insert(h.to_string(), vec![(r.namespace.clone(), 1)]);
                        }
                    }
                }
            }
        }
    }

    fn remove(&mut self, on: &Gateway<'_>, r: &Arc<RouteFacts>, system_prefix: &str) {
        match r.kind {
            RouteKind::HttpRoute => {
                if on.claimed_by(r) {
                    for h in distinct(r.hostnames()) {
                        self.unclaim(h, r, system_prefix);
                    }
                }
            }
            RouteKind::TlsRoute => {
                for s in on.tls_sections(r) {
                    if let Some(n) = self.sections.get_mut(s) {
                        *n -= 1;
                        if *n == 0 {
                            self.sections.remove(s);
                        }
                    }
                }
                for h in distinct(r.hostnames()) {
                    if let Some(v) = self.tls.get_mut(h) {
                        count_out(v, &r.namespace);
                        if v.is_empty() {
                            self.tls.remove(h);
                        }
                    }
                }
            }
        }
    }

    /// Route `r` claims `h` here.
    fn claim(
        &mut self,
        h: &str,
        r: &Arc<RouteFacts>,
        system_prefix: &str,
        apexes: &dyn ApexOwners,
    ) {
        let GatewaySummary {
            https,
            listenable: listenable_count,
            demands,
            apex,
            ..
        } = self;
        apex.entry(r.namespace.clone())
            .or_insert_with(|| (apexes.apex_of(&r.namespace), 0))
            .1 += 1;
        let Some(c) = https.get_mut(h) else {
            https.insert(
                h.to_string(),
                HostClaims {
                    ranked: vec![r.clone()],
                    namespaces: vec![(r.namespace.clone(), 1)],
                },
            );
            if listenable(h) {
                *listenable_count += 1;
                demands.add(&r.namespace, 1, system_prefix);
            }
            return;
        };
        let me = apex_claimant(r, apex);
        let at = match c.ranked.binary_search_by(|x| {
            claims::compare_for(h, &apex_claimant(x, apex), &me, system_prefix)
        }) {
            // Counted already (a change hands the old version over first): keep the newer.
            Ok(at) => {
                c.ranked[at] = r.clone();
                if let Some(a) = apex.get_mut(&*r.namespace) {
                    a.1 -= 1;
                }
                return;
            }
            Err(at) => at,
        };
        let was_winning = (at == 0).then(|| c.ranked[0].namespace.clone());
        c.ranked.insert(at, r.clone());
        count_in(&mut c.namespaces, &r.namespace);
        if let Some(lost) = was_winning
            && *lost != *r.namespace
            && listenable(h)
        {
            demands.remove(&lost, 1, system_prefix);
            demands.add(&r.namespace, 1, system_prefix);
        }
    }

    /// Route `r` no longer claims `h` here.
    fn unclaim(&mut self, h: &str, r: &Arc<RouteFacts>, system_prefix: &str) {
        let GatewaySummary {
            https,
            listenable: listenable_count,
            demands,
            apex,
            ..
        } = self;
        let Some(c) = https.get_mut(h) else {
            return;
        };
        let me = apex_claimant(r, apex);
        let Ok(at) = c.ranked.binary_search_by(|x| {
            claims::compare_for(h, &apex_claimant(x, apex), &me, system_prefix)
        }) else {
            return;
        };
        c.ranked.remove(at);
        count_out(&mut c.namespaces, &r.namespace);
        let next_winner = c.ranked.first().map(|w| w.namespace.clone());
        if c.ranked.is_empty() {
            https.remove(h);
            if listenable(h) {
                *listenable_count -= 1;
                demands.remove(&r.namespace, 1, system_prefix);
            }
        } else if let Some(next) = next_winner
            && at == 0
            && *next != *r.namespace
            && listenable(h)
        {
            demands.remove(&r.namespace, 1, system_prefix);
            demands.add(&next, 1, system_prefix);
        }
        // A namespace's apex is forgotten with its last claim here.
        if let Some(a) = apex.get_mut(&*r.namespace) {
            a.1 -= 1;
            if a.1 == 0 {
                apex.remove(&*r.namespace);
            }
        }
    }

    /// Whether every apex this summary read is still the namespace's (`apexes` changed).
    fn apexes_hold(&self, apexes: &dyn ApexOwners) -> bool {
        self.apex
            .iter()
            .all(|(ns, (apex, _))| apexes.apex_of(ns) == *apex)
    }
}

/// One Gateway as a review reads it: its routes, their summary, and how it lists its HTTPS
/// listeners when the index saw its TenantGateway.
#[derive(Debug, Clone, Copy)]
pub struct GatewayView<'a> {
    pub routes: &'a GatewayRoutes,
    pub summary: &'a GatewaySummary,
    pub listeners: Option<HttpsListeners>,
}

/// A hostname that gets an HTTPS listener of its own under http01.
fn listenable(h: &str) -> bool {
    !hostname::is_wildcard(h) && hostname::validate(h).is_ok()
}

/// How many of `namespaces` are not `except`.
fn count_except(namespaces: &[(Arc<str>, usize)], except: &str) -> usize {
    let mine = namespaces
        .binary_search_by(|(ns, _)| (**ns).cmp(except))
        .is_ok();
    namespaces.len() - usize::from(mine)
}

/// Those `n` namespaces ([`count_except`]) named: "a", "a and b", "a and 2 more". Only a
/// warning that names them builds it.
fn names_except(namespaces: &[(Arc<str>, usize)], except: &str, n: usize) -> String {
    let mut it = namespaces
        .iter()
        .map(|(ns, _)| &**ns)
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

/// The summaries of the Gateways that reviews ask about, for Gateways of [`CACHE_FROM`]
/// routes and more, each changed with its Gateway's routes: the cache follows the index
/// ([`RouteFollower`]), so a route changing on a Gateway of thousands costs the summary that
/// route's hostnames ([`GatewaySummary::change`]), not a summary of every route on it.
/// Reviews read a summary with the routes it summarises under the index's read lock
/// ([`RouteIndex::read_gateway`]): the same answers as summarising on every review.
///
/// A summary reads each claiming namespace's apex once; when the namespace index's apexes
/// change ([`ApexOwners::generation`]), the next review of the Gateway checks the ones it
/// read and summarises the routes afresh if one changed.
///
/// One cache per [`super::Admission`]: summaries depend on its `system_prefix`.
pub struct SummaryCache {
    index: Arc<RouteIndex>,
    system_prefix: String,
    apexes: Arc<dyn ApexOwners + Send + Sync>,
    /// By Gateway namespace, then name: looked up without building a key, with foldhash
    /// (every review with warnings on looks its Gateways up here).
    kept: RwLock<HostMap<HostMap<Kept>>>,
}

struct Kept {
    summary: GatewaySummary,
    /// The apexes' generation the summary was last known to agree with.
    generation: AtomicU64,
}

/// Gateways with fewer routes are summarised on each review, which keeps the thousands of
/// small tenant Gateways out of the cache. Summarising costs ~2–3 k instructions per route
/// (callgrind, bench/RESULTS.md session 15), so below 8 routes it stays under ~20 k, a sixth of
/// a review; from 8 routes up the summary is kept (its size is proportional to the routes).
const CACHE_FROM: usize = 8;

impl SummaryCache {
    /// A cache of the summaries of `index`'s Gateways, following the index.
    pub fn following(
        index: Arc<RouteIndex>,
        system_prefix: &str,
        apexes: Arc<dyn ApexOwners + Send + Sync>,
    ) -> Arc<SummaryCache> {
        let cache = Arc::new(SummaryCache {
            index,
            system_prefix: system_prefix.to_string(),
            apexes,
            kept: RwLock::default(),
        });
        let follower: Weak<SummaryCache> = Arc::downgrade(&cache);
        cache.index.follow(follower);
        cache
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HostMap<HostMap<Kept>>> {
        // Plain maps survive a panicking holder.
        self.kept.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HostMap<HostMap<Kept>>> {
        self.kept.write().unwrap_or_else(|p| p.into_inner())
    }

    /// `f` of Gateway `namespace/name` as the index holds it now.
    pub fn with<R>(&self, namespace: &str, name: &str, f: impl FnOnce(GatewayView<'_>) -> R) -> R {
        self.index
            .read_gateway(namespace, name, |routes, listeners| {
                // Read before the apexes are: a change after it is seen by the next review.
                let generation = self.apexes.generation();
                let kept = self.read();
                if let Some(k) = kept.get(namespace).and_then(|m| m.get(name)) {
                    if k.generation.load(Ordering::Relaxed) == generation
                        || k.summary.apexes_hold(&*self.apexes)
                    {
                        k.generation.store(generation, Ordering::Relaxed);
                        return f(GatewayView {
                            routes,
                            summary: &k.summary,
                            listeners,
                        });
                    }
                } else if routes.len() < CACHE_FROM {
                    drop(kept);
                    let summary = GatewaySummary::of(
                        routes,
                        namespace,
                        name,
                        &self.system_prefix,
                        &*self.apexes,
                    );
                    return f(GatewayView {
                        routes,
                        summary: &summary,
                        listeners,
                    });
                }
                drop(kept);
                // Built under the index's read lock, so no change is missed meanwhile; reviews
                // racing on it each build it once.
                let summary =
                    GatewaySummary::of(routes, namespace, name, &self.system_prefix, &*self.apexes);
                let mut kept = self.write();
                let slot = kept
                    .entry(namespace.to_string())
                    .or_default()
                    .entry(name.to_string())
                    .insert_entry(Kept {
                        summary,
                        generation: AtomicU64::new(generation),
                    })
                    .into_mut();
                f(GatewayView {
                    routes,
                    summary: &slot.summary,
                    listeners,
                })
            })
    }

    /// Gateways with a summary kept (for tests and metrics).
    pub fn len(&self) -> usize {
        self.read().values().map(HostMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The summary kept for Gateway `namespace/name`, if any (for tests).
    #[cfg(test)]
    fn kept(&self, namespace: &str, name: &str) -> Option<GatewaySummary> {
        self.read()
            .get(namespace)
            .and_then(|m| m.get(name))
            .map(|k| k.summary.clone())
    }
}

impl RouteFollower for SummaryCache {
    fn changed(
        &self,
        gateway: &Key,
        old: Option<&Arc<RouteFacts>>,
        new: Option<&Arc<RouteFacts>>,
        routes: &GatewayRoutes,
    ) {
        let (namespace, name) = (gateway.0.as_str(), gateway.1.as_str());
        let mut kept = self.write();
        let Some(m) = kept.get_mut(namespace) else {
            return;
        };
        if routes.is_empty() {
            // The Gateway is gone from the index: so is its summary.
            m.remove(name);
            if m.is_empty() {
                kept.remove(namespace);
            }
            return;
        }
        if let Some(k) = m.get_mut(name) {
            k.summary.change(
                namespace,
                name,
                old,
                new,
                &self.system_prefix,
                &*self.apexes,
            );
        }
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

    /// The distinct `tls-…` sections its parentRefs name here (a TLSRoute's passthrough
    /// listeners).
    fn tls_sections<'r>(&self, r: &'r RouteFacts) -> BTreeSet<&'r str> {
        self.targeted_by(r)
            .flatten()
            .filter(|s| s.starts_with("tls-"))
            .collect()
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
            .filter(|h| r.hostnames_valid || hostname::validate(h).is_ok()),
    );
    v.sort_unstable();
    v.dedup();
    v
}

fn http_route<'g>(
    route: &Admitted<'_>,
    on: &Gateway<'_>,
    view: GatewayView<'g>,
    system_prefix: &str,
    apexes: &dyn ApexOwners,
    out: &mut Vec<RouteWarning>,
) {
    if route.kind != RouteKind::HttpRoute || !route.sections_on(on).any(section_claims_https) {
        // sectionName `http` or `tls-…`: no HTTPS listener, no hostname claimed.
        return;
    }
    let GatewayView {
        routes,
        summary,
        listeners,
    } = view;
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
    if listeners == Some(HttpsListeners::PerApex) {
        // dns01/existingSecret: a wildcard listener per apex serves every hostname, so no
        // hostname needs a listener of its own and there is no budget to run out of.
        return;
    }
    let claimed_by_others = |h: &str| summary.https.get(h).and_then(best_other).is_some();

    // This route's published version here, if it claims hostnames here (looked up once: a
    // binary search among the Gateway's routes).
    let own = routes
        .get(route.kind, route.namespace, route.name)
        .filter(|r| on.published_by(r) && on.claimed_by(r));
    // The budget, as http01 counts it: hostnames only this route's published version claims
    // are the ones it would take over, not listeners in use by others.
    let own_only = own.map_or(0, |r| {
        r.hostnames()
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .filter(|h| listenable(h) && !claimed_by_others(h))
            .count()
    });
    let with_listener = summary
        .listenable
        .saturating_sub(own_only)
        .min(MAX_LISTENERS);
    let passthrough = summary.sections.len();
    let in_use = 1 + passthrough + with_listener;
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
    // Only this namespace's count and the (few) namespaces that gain are tracked; the others
    // publish what the summary counts.
    let mut mine_published = summary.demands.get(me.namespace);
    let mut others_gain: Vec<&str> = Vec::new();
    if let Some(old) = own {
        let hosts: BTreeSet<&str> = old.hostnames().filter(|h| listenable(h)).collect();
        for h in hosts {
            let Some(c) = summary.https.get(h) else {
                continue;
            };
            if !c.ranked.first().is_some_and(|w| is_me(w)) {
                continue;
            }
            if let Some(n) = mine_published.as_mut() {
                *n = n.saturating_sub(1);
            }
            if let Some(next) = best_other(c) {
                if *next.namespace == *me.namespace {
                    *mine_published.get_or_insert(0) += 1;
                } else {
                    others_gain.push(&next.namespace);
                }
            }
        }
    }
    let others_publish = !others_gain.is_empty() || summary.demands.others_ask(me.namespace);
    if new == left || !others_publish {
        // Alone on the Gateway (or taking exactly what is left) the share is the whole
        // budget: the plain count says it.
        out.push(budget_warning(on, left, new));
        return;
    }
    let budget = MAX_LISTENERS.saturating_sub(1 + passthrough);
    // Within its share the route takes its listeners from a namespace over its share, and
    // that namespace's routes are the ones cut: nothing to warn this one about.
    let warning = if others_gain.is_empty() {
        share_warning_sorted(
            (on.namespace, on.name),
            me.namespace,
            &summary.demands,
            mine_published.unwrap_or(0),
            new,
            budget,
            system_prefix,
        )
    } else {
        // An update whose published version wins hostnames another namespace claims too:
        // those namespaces' demands change, so the shares are counted in full.
        let mut published = summary.demands.to_map();
        match mine_published {
            Some(n) => {
                published.insert(me.namespace.to_string(), n);
            }
            None => {
                published.remove(me.namespace);
            }
        }
        for ns in others_gain {
            *published.entry(ns.to_string()).or_default() += 1;
        }
        share_warning(
            (on.namespace, on.name),
            me.namespace,
            &published,
            new,
            budget,
            system_prefix,
        )
    };
    if let Some(text) = warning {
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
        hostnames_valid: bool,
    ) -> Vec<String> {
        let kind = match resource {
            super::WebhookResource::HttpRoutes => RouteKind::HttpRoute,
            super::WebhookResource::TlsRoutes => RouteKind::TlsRoute,
            _ => return Vec::new(),
        };
        // Nothing indexed (a snapshot without routes or passthrough declarations, no
        // reconciler, `--namespaces` mode): no work on the hot path. Without an index
        // attached, not even the index's lock: both server threads taking it on every review
        // bounce its cache line.
        let Some(summaries) = self.summaries.as_deref() else {
            return Vec::new();
        };
        if self.routes.knows_nothing() {
            return Vec::new();
        }
        let fallback;
        let route = match read_admitted(kind, review) {
            Some(route) => Admitted {
                hostnames_valid,
                ..route
            },
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
        // The Gateways it names, listed once for both kinds of warning.
        let gateways = route.gateways();
        let mut found = warnings_on(
            &route,
            &gateways,
            |ns, name, f| summaries.with(ns, name, f),
            prefix,
            publishes_through,
            apexes,
        );
        found.extend(passthrough_on(
            &route,
            &gateways,
            |ns, name| self.routes.passthrough(ns, name),
            publishes_through,
        ));
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
        hostnames_valid: false,
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
mod tests;
