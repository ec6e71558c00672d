//! TenantGateway reconciler (SPEC §3). The pure core: [`plan`] turns the facts gathered from
//! the caches ([`inputs::Inputs`]) into the exact writes one reconcile performs, and
//! [`cleanup`] into the writes of the finalizer. Nothing in it talks to a cluster; the kube
//! edge gathers, calls these, and executes the writes when it holds the lease.
//!
//! [`plan_with`] runs in steps, each handing the next what it needs: `admit` (Duplicate,
//! spec checks, the namespace's apex; ends the plan with the blocked status) → `attachment`
//! (namespace labels, who publishes here, child apexes) → `analyse` (routes against the
//! Gateway) → render and diff → `report` (TenantGateway status, route status writes) →
//! `notices` (Warning events).
//!
//! | SPEC part or concern | file |
//! |---|---|
//! | §3.1 the API, CRD; spec rules re-checked | `api.rs`; `inputs.rs` (`TgwFacts::settings`) |
//! | §3.2 names of listeners and objects | `names.rs` |
//! | §3.2 rendered Gateway (layer 1), Issuer, Certificates, redirect | `render.rs`, `certmanager.rs` |
//! | §3.3 attachment, listenable hostnames, conflicts, 64-listener cap | `routes.rs`, `crate::claims` |
//! | §3.3 route status entries; §3.7 conditions and listener status | `status.rs`, `route_status_write` |
//! | §3.5 namespace labels, no stealing, child apexes | `labels.rs`, `attachment` |
//! | §3.7 zero writes on an unchanged world, ownership, deletes | `diff.rs` |
//! | §3.7 one TenantGateway per namespace (Duplicate), finalizer | `admit`, [`cleanup`] |
//! | the reconciler's flags (scope, `--uniform-port-kinds`, `--passthrough-gateway`, the Lease) | [`Options`] |
//! | §3.10 listeners whose SNI overlaps: the second Gateway, overlapping pairs, Conflicted listeners | `render.rs` (`separate`, `overlapping_listeners`), `routes.rs` (PassthroughHostname), `status.rs` |
//! | the kube edge: caches, `gather` (caches → inputs), the TGW status stash | `context.rs` |
//! | the kube edge: watch loops, trigger fan-out | `watches.rs` |
//! | the kube edge: Controller, reconcile, settle, failure isolation, events | `controller.rs`, `backoff.rs`, `error.rs` |
//! | the kube edge: executing writes | `apply.rs` |
//! | planning off the admission runtime (§3.7) | `planner.rs` |
//! | shared test worlds (unit, golden, bench) | `testing.rs` |
//!
//! Rules: the pure files import only `api`, `inputs`, `crate::platform`, `crate::hostname`,
//! `crate::claims`, each other and the object types; only `apply`, `context`, `watches` and
//! `controller` see `kube::Api`. The reconciler imports `crate::cluster` and the leaves, never
//! `admission` or `replicate` (layout-3.md direction rules).

use std::collections::{BTreeMap, BTreeSet};

pub mod api;
pub mod apply;
pub mod backoff;
pub mod certmanager;
pub mod context;
pub mod controller;
pub mod diff;
pub mod error;
pub mod inputs;
pub mod labels;
pub mod names;
pub mod planner;
pub mod render;
pub mod routes;
pub mod status;
#[doc(hidden)]
pub mod testing;
pub mod watches;

use diff::{Refused, RouteStatusWrite, Write};
use gateway_api::apis::experimental::gateways::Gateway;
use inputs::{Inputs, ModeSettings, Settings};
use render::{Desired, ListenerInfo, ListenerInputs};
use status::{GatewayState, StatusFacts};

use crate::cluster::nsmeta::NamespaceMeta;
use crate::hostname;
use crate::platform::{PassthroughGateway, Scope};

/// The reconciler's options, from the `serve` flags: built once by `serve`, carried by the
/// [`Context`](context::Context) of every reconcile. The plan reads `scope` and
/// `uniform_port_kinds`; the Lease fields are for the election `serve` starts beside the
/// controller.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Options {
    /// `--tenant-prefix`, `--system-prefix`.
    pub scope: Scope,
    /// `--uniform-port-kinds`: every port-443 listener admits both HTTPRoute and TLSRoute
    /// (for data planes that merge port-443 listeners whose kinds differ, cilium#45559).
    pub uniform_port_kinds: bool,
    /// `--passthrough-gateway`: where a dns01/existingSecret TenantGateway's passthrough
    /// listeners go (SPEC §3.10).
    pub passthrough_gateway: PassthroughGateway,
    /// `--leader-election-namespace`; `None`: the pod's own, else `default`.
    pub lease_namespace: Option<String>,
    /// `--leader-election-name`.
    pub lease_name: String,
}

/// The outcome of one reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The rendered objects (`None` when nothing may be rendered: invalid spec, duplicate).
    pub desired: Option<Desired>,
    /// Exactly the writes to perform, in order; empty for an unchanged world.
    pub writes: Vec<Write>,
    /// The status this reconcile computes (written only when it differs, see `writes`).
    pub status: api::TenantGatewayStatus,
    /// Same-named objects left alone because we do not own them.
    pub refused: Vec<Refused>,
    /// For admission warnings (SPEC §3.4) and metrics.
    pub summary: Summary,
    /// Things worth a Warning event, sorted.
    pub notices: Vec<Notice>,
}

/// What the admission side may want to know about this Gateway.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Summary {
    /// Winning namespace per claimed hostname.
    pub hostname_owners: BTreeMap<String, String>,
    /// Listeners on the rendered Gateway.
    pub listeners: usize,
    /// http01: hostnames that have a listener (a new hostname outside it needs one).
    pub listener_hostnames: BTreeSet<String>,
    /// http01: hostname listeners that may still be added under the cap.
    pub capacity_left: usize,
    /// Routes refused by HostnameConflict.
    pub conflicts: usize,
    /// Hostnames (or child apexes) left out by the cap.
    pub over_cap: usize,
}

/// A Warning event to record (bounded reasons).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Notice {
    pub reason: &'static str,
    pub message: String,
}

/// Plan one reconcile of `inputs.tgw`, checking its spec first ([`plan_with`] takes the
/// checked spec from a caller that needs it too).
pub fn plan(inputs: &Inputs, opts: &Options) -> Plan {
    plan_with(inputs, &inputs.tgw.settings(&opts.scope), opts)
}

/// Plan one reconcile of `inputs.tgw` with its checked spec (`settings`, what
/// [`TgwFacts::settings`](inputs::TgwFacts::settings) returned for it): admit → attachment →
/// analyse → render and diff → status → notices. Each step hands the next what it needs;
/// `admit` ends the plan when nothing may be rendered.
pub fn plan_with(
    inputs: &Inputs,
    settings: &Result<Settings, Vec<String>>,
    opts: &Options,
) -> Plan {
    let settings = match admit(inputs, settings, opts) {
        Ok(s) => s,
        Err(Blocked { reason, message }) => return blocked(inputs, reason, message),
    };
    let Attachment {
        namespace_writes,
        allowed,
        child_apexes,
        child_over_cap,
        problems,
    } = attachment(inputs, settings, opts);
    let analysed = analyse(inputs, settings, &allowed, opts);
    let li = ListenerInputs {
        port443_namespaces: allowed,
        hosts: analysed.routes.listener_hosts.clone(),
        child_apexes,
        sticky: match settings.mode {
            ModeSettings::Http01 => sticky_names(inputs, analysed.gateway),
            _ => BTreeMap::new(),
        },
    };
    let desired = render::render(&inputs.tgw, settings, &li, opts);
    let (mut writes, refused) = diff::objects(&desired, &inputs.observed, &inputs.tgw);
    let reported = report(
        inputs,
        &desired,
        &refused,
        &analysed,
        &child_over_cap,
        &problems,
    );
    let conflicted = reported
        .status
        .conditions
        .iter()
        .any(|c| c.type_ == status::READY && c.reason == status::LISTENERS_CONFLICTED);
    writes.extend(namespace_writes.into_iter().map(Write::Namespace));
    writes.extend(reported.route_writes);
    if inputs.tgw.status.as_ref() != Some(&reported.status) {
        writes.push(Write::Status(reported.status.clone()));
    }
    let conflicts = analysed
        .routes
        .routes
        .iter()
        .filter(|v| !v.conflicts.is_empty())
        .count();
    let notices = notices(
        &inputs.tgw.namespace,
        &refused,
        conflicts,
        &reported.over_cap,
        &reported.parents_full,
        conflicted,
    );
    let analysis = analysed.routes;
    Plan {
        summary: Summary {
            capacity_left: analysis
                .host_budget
                .saturating_sub(analysis.listener_hosts.len()),
            hostname_owners: analysis.owners,
            listeners: desired.gateway.spec.listeners.len(),
            listener_hostnames: analysis.listener_hosts,
            conflicts,
            over_cap: reported.over_cap.len(),
        },
        desired: Some(desired),
        writes,
        status: reported.status,
        refused,
        notices,
    }
}

/// Why nothing may be rendered: the blocked status's reason and message.
struct Blocked {
    reason: &'static str,
    message: String,
}

/// The sibling that publishes this namespace when this TenantGateway does not (SPEC §3.7: the
/// oldest, then the smallest name, is reconciled; the others are Duplicate).
fn published_by_sibling(inputs: &Inputs) -> Option<&str> {
    let tgw = &inputs.tgw;
    let me = (
        tgw.creation.is_none(),
        tgw.creation.as_ref(),
        tgw.name.as_str(),
    );
    inputs
        .siblings
        .iter()
        .filter(|s| s.name != tgw.name)
        .map(|s| (s.creation.is_none(), s.creation.as_ref(), s.name.as_str()))
        .filter(|s| *s < me)
        .min()
        .map(|s| s.2)
}

/// Whether anything may be rendered (SPEC §3.7, §3.1, §3.5): one TenantGateway per
/// namespace is reconciled (the oldest, then the smallest name; the others are Duplicate),
/// its spec passes the checks, and in tenant scope its apex is its namespace's.
fn admit<'s>(
    inputs: &Inputs,
    settings: &'s Result<Settings, Vec<String>>,
    opts: &Options,
) -> Result<&'s Settings, Blocked> {
    let tgw = &inputs.tgw;
    if let Some(first) = published_by_sibling(inputs) {
        return Err(Blocked {
            reason: "Duplicate",
            message: format!(
                "TenantGateway {}/{first} already publishes this namespace; only one TenantGateway \
                 per namespace is reconciled: delete this one",
                tgw.namespace
            ),
        });
    }
    let invalid = |message| Blocked {
        reason: "InvalidSpec",
        message,
    };
    let settings = settings
        .as_ref()
        .map_err(|problems| invalid(problems.join("; ")))?;
    match apex_outside_namespace(inputs, settings, &opts.scope) {
        Some(problem) => Err(invalid(problem)),
        None => Ok(settings),
    }
}

/// The namespace side (SPEC §3.5): the label writes, and who publishes on this Gateway.
struct Attachment {
    namespace_writes: Vec<labels::NamespaceWrite>,
    /// Namespaces admitted on port 443: the own one, held attachments, inheriting ones.
    allowed: BTreeSet<String>,
    /// dns01/existingSecret child apexes that fit the listener budget, and those cut.
    child_apexes: BTreeSet<String>,
    child_over_cap: BTreeSet<String>,
    /// Sorted, de-duplicated sentences for the status.
    problems: Vec<String>,
}

fn attachment(inputs: &Inputs, settings: &Settings, opts: &Options) -> Attachment {
    let scope = &opts.scope;
    let label_plan = labels::plan(inputs, settings, scope);
    let own = inputs.tgw.namespace.as_str();
    // Inheriting as the label writes of this plan leave them: a namespace this plan detaches
    // stops publishing here, one it attaches starts. Reading the labels as they are now would
    // render a Gateway that the next reconcile changes again (and keep admitting a detached
    // namespace's routes for a round).
    let relabelled: BTreeMap<&str, bool> = label_plan
        .writes
        .iter()
        .map(|w| match w {
            labels::NamespaceWrite::Attach { namespace, .. } => (namespace.as_str(), true),
            labels::NamespaceWrite::Detach { namespace, .. } => (namespace.as_str(), false),
        })
        .collect();
    let inheriting: Vec<&NamespaceMeta> = inputs
        .namespaces
        .iter()
        .filter(|n| {
            relabelled
                .get(n.name())
                .copied()
                .unwrap_or(n.gateway() == Some(own))
        })
        .map(|n| &**n)
        .collect();
    let mut allowed: BTreeSet<String> = BTreeSet::from([own.to_string()]);
    allowed.extend(label_plan.held.iter().cloned());
    allowed.extend(inheriting.iter().map(|n| n.name().to_string()));

    let mut problems: Vec<String> = label_plan.problems;
    problems.extend(settings.skipped.iter().cloned());
    // The passthrough listeners share the budget unless they are on the second Gateway.
    let passthrough_here = if render::separate(settings, opts) {
        0
    } else {
        settings.passthrough.len()
    };
    let (child_apexes, child_over_cap) =
        child_apexes(settings, &inheriting, own, passthrough_here, &mut problems);
    problems.sort();
    problems.dedup();
    Attachment {
        namespace_writes: label_plan.writes,
        allowed,
        child_apexes,
        child_over_cap,
        problems,
    }
}

/// What the routes attaching to this Gateway come to (SPEC §3.3), judged against the
/// Gateway named like the TenantGateway, and those attaching to the second Gateway of the
/// `separate` layout (SPEC §3.10).
struct Analysed<'a> {
    /// The Gateway named like the TenantGateway, owned or not.
    gateway: Option<&'a Gateway>,
    redirect_name: String,
    routes: routes::Analysis,
    /// `<name>-passthrough`, and the Gateway of that name when one exists, owned or not.
    passthrough_name: String,
    passthrough_gateway: Option<&'a Gateway>,
    /// The `separate` layout renders it.
    separate: bool,
    /// The routes attaching to it (none unless `separate`: in the `shared` layout every
    /// entry of ours for it is removed).
    passthrough_routes: Vec<routes::RouteVerdict>,
}

fn analyse<'a>(
    inputs: &'a Inputs,
    settings: &Settings,
    allowed: &BTreeSet<String>,
    opts: &Options,
) -> Analysed<'a> {
    let scope = &opts.scope;
    let tgw = &inputs.tgw;
    let redirect_name = names::redirect_route(&tgw.name);
    let named = |name: &str| {
        inputs
            .observed
            .gateways
            .iter()
            .find(|g| g.metadata.name.as_deref() == Some(name))
    };
    let gateway = named(&tgw.name);
    let passthrough_name = names::passthrough_gateway(&tgw.name);
    let separate = render::separate(settings, opts);
    let passthrough_routes = if separate {
        routes::passthrough_gateway_routes(inputs, allowed, &passthrough_name)
    } else {
        Vec::new()
    };
    let existing_hosts: BTreeSet<String> = gateway
        .filter(|g| diff::owned(&g.metadata, tgw))
        .map(|g| {
            g.spec
                .listeners
                .iter()
                .filter(|l| l.protocol == "HTTPS")
                .filter_map(|l| l.hostname.clone())
                .collect()
        })
        .unwrap_or_default();
    let routes = routes::analyse(
        inputs,
        settings,
        allowed,
        &existing_hosts,
        scope,
        (tgw.namespace.as_str(), redirect_name.as_str()),
    );
    Analysed {
        gateway,
        redirect_name,
        routes,
        passthrough_gateway: named(&passthrough_name),
        passthrough_name,
        separate,
        passthrough_routes,
    }
}

/// The status side of the plan (SPEC §3.3, §3.7).
struct Reported {
    status: api::TenantGatewayStatus,
    /// In (kind, namespace, name) order.
    route_writes: Vec<Write>,
    parents_full: Vec<status::ParentsFull>,
    /// Hostnames and child apexes left out by the cap.
    over_cap: BTreeSet<String>,
}

fn report<'a>(
    inputs: &'a Inputs,
    desired: &Desired,
    refused: &[Refused],
    analysed: &Analysed<'a>,
    child_over_cap: &BTreeSet<String>,
    attach_problems: &[String],
) -> Reported {
    let tgw = &inputs.tgw;
    let state = |g: Option<&'a Gateway>| match g {
        None => GatewayState::Missing,
        Some(g) if !diff::owned(&g.metadata, tgw) => GatewayState::NotOwned,
        Some(g) => GatewayState::Owned(g),
    };
    let certificates: BTreeMap<String, &certmanager::Certificate> = inputs
        .observed
        .certificates
        .iter()
        .filter(|c| diff::owned(&c.metadata, tgw))
        .filter_map(|c| c.metadata.name.clone().map(|n| (n, c)))
        .collect();
    let mut listeners = vec![ListenerInfo {
        name: names::HTTP_LISTENER.to_string(),
        hostname: None,
        certificate: None,
        on_passthrough_gateway: false,
    }];
    listeners.extend(desired.listeners.iter().cloned());
    let not_owned: Vec<String> = refused
        .iter()
        .map(|r| {
            format!(
                "a {} named {} exists that this TenantGateway does not own; it is left alone \
                 (delete or rename it)",
                r.kind.as_str(),
                r.name
            )
        })
        .collect();
    let over_cap: BTreeSet<String> = analysed
        .routes
        .over_cap
        .iter()
        .chain(child_over_cap.iter())
        .cloned()
        .collect();
    let names_on = |second: bool| -> Vec<String> {
        listeners
            .iter()
            .filter(|l| l.on_passthrough_gateway == second)
            .map(|l| l.name.clone())
            .collect()
    };
    let (first_names, second_names) = (names_on(false), names_on(true));
    let gw = (tgw.namespace.as_str(), tgw.name.as_str());
    let pt = analysed.passthrough_name.as_str();
    let moved = analysed.separate.then_some(pt);
    let now = &inputs.now;
    let ordered = routes_in_order(inputs);
    let (mut writes, mut parents_full) = route_writes(
        inputs,
        &ordered,
        gw,
        &analysed.routes.routes,
        &analysed.redirect_name,
        |v, generation, current| {
            status::route_entries(v, gw, &first_names, moved, generation, now, current)
        },
    );
    // The second Gateway's entries: written in the `separate` layout, removed in `shared`.
    let (more_writes, more_full) = route_writes(
        inputs,
        &ordered,
        (gw.0, pt),
        &analysed.passthrough_routes,
        &analysed.redirect_name,
        |v, generation, current| {
            status::passthrough_route_entries(
                v,
                (gw.0, pt),
                gw.1,
                &second_names,
                generation,
                now,
                current,
            )
        },
    );
    writes.extend(more_writes);
    parents_full.extend(more_full);
    // (kind, namespace, name) order; a route's entries for the first Gateway first (stable).
    writes.sort_by(|a, b| route_key(a).cmp(&route_key(b)));
    parents_full.sort();
    let overlaps = render::overlapping_listeners(&desired.gateway);
    let status = status::tgw_status(&StatusFacts {
        gateway_name: &tgw.name,
        gateway: state(analysed.gateway),
        passthrough_gateway: (
            pt,
            analysed
                .separate
                .then(|| state(analysed.passthrough_gateway)),
        ),
        overlaps: &overlaps,
        listeners: &listeners,
        certificates: &certificates,
        over_cap: &over_cap,
        over_cap_children: !child_over_cap.is_empty(),
        listener_count: desired.gateway.spec.listeners.len(),
        not_owned: &not_owned,
        attach_problems,
        parents_full: &parents_full,
        generation: tgw.generation,
        now: &inputs.now,
        previous: tgw.status.as_ref(),
    });
    Reported {
        status,
        route_writes: writes,
        parents_full,
        over_cap,
    }
}

/// The (kind, namespace, name) of a route status write.
fn route_key(w: &Write) -> Option<(inputs::RouteKind, &str, &str)> {
    match w {
        Write::RouteStatus(r) => Some((r.kind, r.namespace.as_str(), r.name.as_str())),
        _ => None,
    }
}

/// The Warning events of the plan, sorted.
fn notices(
    own: &str,
    refused: &[Refused],
    conflicts: usize,
    over_cap: &BTreeSet<String>,
    parents_full: &[status::ParentsFull],
    listeners_conflicted: bool,
) -> Vec<Notice> {
    let mut notices: Vec<Notice> = refused
        .iter()
        .map(|r| Notice {
            reason: "TakeoverRefused",
            message: format!(
                "{} {}/{} exists and is not owned by this TenantGateway; left alone",
                r.kind.as_str(),
                own,
                r.name
            ),
        })
        .collect();
    if conflicts > 0 {
        notices.push(Notice {
            reason: "HostnameConflict",
            message: format!("{conflicts} route(s) lost a hostname to another namespace"),
        });
    }
    if !over_cap.is_empty() {
        notices.push(Notice {
            reason: "ListenerLimitReached",
            message: format!(
                "{} listener(s) did not fit in the {}-listener limit (the ListenerCapacity \
                 condition names them)",
                over_cap.len(),
                crate::claims::MAX_LISTENERS
            ),
        });
    }
    if !parents_full.is_empty() {
        notices.push(Notice {
            reason: "RouteParentsFull",
            message: format!(
                "{} route(s) have parentRefs to this Gateway without a status entry: \
                 status.parents holds at most {} entries",
                parents_full.len(),
                status::MAX_ROUTE_PARENTS
            ),
        });
    }
    if listeners_conflicted {
        notices.push(Notice {
            reason: status::LISTENERS_CONFLICTED,
            message: "the data plane reports conflicted listeners and accepts none of them; \
                      the TenantGateway's Ready condition names them and the fix"
                .to_string(),
        });
    }
    notices.sort();
    notices
}

/// The names each hostname's listener has on the owned Gateway (SPEC §3.2, names are
/// sticky): its listener name, and its certificateRef when that is an http01 Certificate of
/// ours for exactly this hostname. A ref to anything else, such as the dns01 wildcard
/// Certificate or an existingSecret Secret after a mode change, must not become the Secret of
/// a new Certificate. The Certificate itself may be missing from the cache (not seen yet, its
/// write failed, someone deleted it): the ref is then ours when the TenantGateway's status
/// records this listener waiting for that Certificate, which only an http01 render writes
/// (existingSecret listeners record none). The first listener of a hostname counts.
fn sticky_names(
    inputs: &Inputs,
    gateway: Option<&Gateway>,
) -> BTreeMap<String, names::StickyNames> {
    let tgw = &inputs.tgw;
    let Some(g) = gateway.filter(|g| diff::owned(&g.metadata, tgw)) else {
        return BTreeMap::new();
    };
    let certificates: BTreeMap<&str, &certmanager::Certificate> = inputs
        .observed
        .certificates
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
        .collect();
    // (listener, hostname, Certificate) as the last status reported them.
    let recorded: BTreeSet<(&str, &str, &str)> = tgw
        .status
        .iter()
        .flat_map(|s| s.listeners.iter())
        .filter_map(|l| {
            Some((
                l.name.as_str(),
                l.hostname.as_deref()?,
                l.certificate_name.as_deref()?,
            ))
        })
        .collect();
    let ours_for = |name: &str, listener: &str, h: &str| match certificates.get(name) {
        Some(c) => {
            diff::owned(&c.metadata, tgw)
                && c.spec.dns_names.len() == 1
                && c.spec.dns_names[0].eq_ignore_ascii_case(h)
        }
        None => recorded.contains(&(listener, h, name)),
    };
    let mut out = BTreeMap::new();
    for l in g.spec.listeners.iter().filter(|l| l.protocol == "HTTPS") {
        let Some(h) = &l.hostname else { continue };
        let certificate = l
            .tls
            .as_ref()
            .and_then(|t| t.certificate_refs.as_ref())
            .and_then(|refs| refs.first())
            .map(|r| r.name.clone())
            .filter(|n| ours_for(n, &l.name, h));
        out.entry(h.clone()).or_insert(names::StickyNames {
            listener: Some(l.name.clone()),
            certificate,
        });
    }
    out
}

/// In tenant scope a TenantGateway's apex is its namespace's apex (SPEC §3.5, layer 9): a
/// shorter or different apex would let it claim hostnames and attachments it was never given.
/// Say so up front instead of rendering anything.
fn apex_outside_namespace(inputs: &Inputs, settings: &Settings, scope: &Scope) -> Option<String> {
    let own = inputs.tgw.namespace.as_str();
    let label = inputs
        .namespaces
        .iter()
        .find(|n| n.name() == own)
        .and_then(|n| n.apex());
    inputs::apex_problem(own, label, &settings.apex, scope)
}

/// dns01/existingSecret child apexes (SPEC §3.5): inheriting namespaces other than the own one
/// with a host label different from the apex; sorted, de-duplicated; outside the apex or
/// invalid: reported, not rendered. Returns those that fit the listener budget and those cut.
fn child_apexes(
    settings: &Settings,
    inheriting: &[&NamespaceMeta],
    own: &str,
    passthrough_here: usize,
    problems: &mut Vec<String>,
) -> (BTreeSet<String>, BTreeSet<String>) {
    if matches!(settings.mode, ModeSettings::Http01) {
        return Default::default();
    }
    let mut all = BTreeSet::new();
    for ns in inheriting.iter().filter(|n| n.name() != own) {
        let Some(label) = ns.apex() else { continue };
        match hostname::parse_apex(label) {
            Ok(c) if c == settings.apex => {}
            Ok(c) if hostname::within(&c, &settings.apex) => {
                all.insert(c);
            }
            Ok(c) => problems.push(format!(
                "child apex {c} of namespace {} is outside the apex {}; not rendered",
                ns.name(),
                settings.apex
            )),
            Err(e) => problems.push(format!(
                "child apex of namespace {}: {e}; not rendered",
                ns.name()
            )),
        }
    }
    // http, https, https-apex, the passthrough listeners on this Gateway; the rest for
    // children.
    let budget = crate::claims::MAX_LISTENERS.saturating_sub(3 + passthrough_here);
    let fit: BTreeSet<String> = all.iter().take(budget).cloned().collect();
    let cut: BTreeSet<String> = all.iter().skip(budget).map(|c| format!("*.{c}")).collect();
    (fit, cut)
}

/// Route status writes for Gateway `gw`: every route of `ordered` ([`routes_in_order`]) whose
/// entries for it differ from the desired ones (new entries, changed entries, entries to remove when it stops attaching),
/// `entries` giving a verdict's desired entries from the route's generation and current
/// entries. The desired entries are cut to the room `status.parents` has left (SPEC §3.7): a
/// write past 32 entries would be refused, and with it every later status of the route; the
/// routes cut are returned, sorted, for the TenantGateway status and an event.
fn route_writes(
    inputs: &Inputs,
    ordered: &[&inputs::RouteFacts],
    gw: (&str, &str),
    verdict_list: &[routes::RouteVerdict],
    redirect_name: &str,
    entries: impl Fn(
        &routes::RouteVerdict,
        Option<i64>,
        &[inputs::RouteParentStatus],
    ) -> Vec<inputs::RouteParentStatus>,
) -> (Vec<Write>, Vec<status::ParentsFull>) {
    let tgw = &inputs.tgw;
    let mut out = Vec::new();
    let mut full = Vec::new();
    // One lookup per route, not a scan of the verdicts per route (which made planning
    // quadratic in the routes: ~1 ns per pair, 0.4 s of a 20,000-route plan; bench/).
    let mut verdicts: BTreeMap<(inputs::RouteKind, &str, &str), &routes::RouteVerdict> =
        BTreeMap::new();
    for v in verdict_list {
        // The first verdict of a route, as a scan would find it.
        verdicts
            .entry((v.kind, &*v.namespace, &*v.name))
            .or_insert(v);
    }
    for r in ordered.iter().copied() {
        if r.kind == inputs::RouteKind::HttpRoute
            && *r.namespace == *tgw.namespace
            && r.name() == redirect_name
        {
            continue;
        }
        let current: Vec<inputs::RouteParentStatus> =
            status::entries_for(&r.our_status, &r.namespace, gw)
                .into_iter()
                .cloned()
                .collect();
        let want = verdicts
            .get(&(r.kind, &*r.namespace, r.name()))
            .map(|v| entries(v, r.generation(), &current))
            .unwrap_or_default();
        let parent_refs = want.len();
        let (want, cut) = status::fit_parents(want, r.foreign_parents(gw));
        if cut > 0 {
            full.push(status::ParentsFull {
                kind: r.kind,
                namespace: r.namespace.to_string(),
                name: r.name().to_string(),
                without_entry: cut,
                parent_refs,
            });
        }
        let want = status::sorted(want);
        if status::sorted(current) != want {
            out.push(route_status_write(r, gw, want));
        }
    }
    // Already in (kind, namespace, name) order: the routes were walked in it.
    (out, full)
}

/// The routes of `inputs`, each once (its first fact), in (kind, namespace, name) order.
fn routes_in_order(inputs: &Inputs) -> Vec<&inputs::RouteFacts> {
    fn key(r: &inputs::RouteFacts) -> (inputs::RouteKind, &str, &str) {
        (r.kind, &r.namespace, r.name())
    }
    let mut ordered: Vec<&inputs::RouteFacts> = inputs.routes.iter().collect();
    // Stable: of the facts of one route the first stays first, and dedup keeps it.
    ordered.sort_by(|a, b| key(a).cmp(&key(b)));
    ordered.dedup_by(|a, b| key(a) == key(b));
    ordered
}

/// The write that sets route `r`'s entries for Gateway `gw` to `entries` (none: removes
/// them).
fn route_status_write(
    r: &inputs::RouteFacts,
    gw: (&str, &str),
    entries: Vec<inputs::RouteParentStatus>,
) -> Write {
    Write::RouteStatus(RouteStatusWrite {
        kind: r.kind,
        namespace: r.namespace.to_string(),
        name: r.name().to_string(),
        resource_version: r.resource_version().map(str::to_string),
        gateway_namespace: gw.0.to_string(),
        gateway_name: gw.1.to_string(),
        entries,
        in_place: r.in_place_edit(gw),
    })
}

/// Nothing may be rendered: report why, write nothing else (never prune on bad input).
fn blocked(inputs: &Inputs, reason: &str, message: String) -> Plan {
    let tgw = &inputs.tgw;
    let status = status::blocked_status(
        reason,
        message,
        tgw.generation,
        &inputs.now,
        tgw.status.as_ref(),
    );
    let writes = if tgw.status.as_ref() != Some(&status) {
        vec![Write::Status(status.clone())]
    } else {
        Vec::new()
    };
    Plan {
        desired: None,
        writes,
        status,
        refused: Vec::new(),
        summary: Summary::default(),
        notices: Vec::new(),
    }
}

/// The finalizer's writes when the TenantGateway is deleted: remove the namespace labels and
/// annotations and the route status entries it wrote. Owned objects go by garbage collection.
///
/// A Duplicate wrote no namespace marks, and the marks name a namespace, not a TenantGateway:
/// the ones there belong to the sibling that publishes it, so a Duplicate's deletion leaves
/// them alone.
pub fn cleanup(inputs: &Inputs, scope: &Scope) -> Vec<Write> {
    let tgw = &inputs.tgw;
    let second = names::passthrough_gateway(&tgw.name);
    let mut writes: Vec<Write> = if published_by_sibling(inputs).is_some() {
        Vec::new()
    } else {
        labels::cleanup(inputs, scope)
            .into_iter()
            .map(Write::Namespace)
            .collect()
    };
    for r in routes_in_order(inputs) {
        // Its entries for both Gateways (SPEC §3.10's second one, whatever the layout).
        for gw in [
            (tgw.namespace.as_str(), tgw.name.as_str()),
            (tgw.namespace.as_str(), second.as_str()),
        ] {
            if !status::entries_for(&r.our_status, &r.namespace, gw).is_empty() {
                writes.push(route_status_write(r, gw, Vec::new()));
            }
        }
    }
    writes
}

#[cfg(test)]
mod tests;
