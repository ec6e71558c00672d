//! TenantGateway status and route parent entries (SPEC §3.3, §3.7, §3.10).
//!
//! Conditions `Ready`, `Programmed`, `ListenerCapacity`, `NamespacesAttached` (the
//! no-stealing report of §3.5), `RouteStatus` and `ListenersOverlap` (§3.10), in that order;
//! listener entries with the reasons `Pending`, `NotAccepted`, `NotProgrammed`,
//! `CertificatePending`; the rendered Gateways with their addresses; one route
//! `status.parents` entry per parentRef to one of the TenantGateway's Gateways. In the
//! `separate` layout both Gateways count in `Programmed` and `Ready`, and listeners the data
//! plane reports `Conflicted` make `Ready=False, reason ListenersConflicted`. Messages list
//! things sorted, so the same world always gives the same text, and a condition whose status
//! does not change keeps its lastTransitionTime: an unchanged world writes no status.

use std::collections::{BTreeMap, BTreeSet};

use gateway_api::apis::experimental::gateways::Gateway;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::api::{GatewayAddress, GatewayAddresses, ListenerStatus, TenantGatewayStatus};
use super::certmanager::Certificate;
use super::inputs::{ParentRef, RouteKind, RouteParentStatus, SharedRef};
use super::render::ListenerInfo;
use super::routes::{RouteVerdict, known_sections};
use crate::claims::MAX_LISTENERS;

pub const READY: &str = "Ready";
pub const PROGRAMMED: &str = "Programmed";
pub const LISTENER_CAPACITY: &str = "ListenerCapacity";
pub const NAMESPACES_ATTACHED: &str = "NamespacesAttached";
pub const ROUTE_STATUS: &str = "RouteStatus";
/// SPEC §3.10: an HTTPS-terminate and a TLS-passthrough listener of one port whose hostnames
/// intersect, on one Gateway.
pub const LISTENERS_OVERLAP: &str = "ListenersOverlap";
/// Ready's reason when the data plane reports a listener Conflicted (SPEC §3.10).
pub const LISTENERS_CONFLICTED: &str = "ListenersConflicted";
/// The API's bound on a route's `status.parents` (a longer list is refused with 422).
pub const MAX_ROUTE_PARENTS: usize = 32;
/// How many routes without room a condition message names; the count covers the rest.
const ROUTES_NAMED: usize = 10;
/// Route condition type.
pub const ACCEPTED: &str = crate::cluster::route_facts::ACCEPTED;

/// A condition, keeping the previous lastTransitionTime when the status is unchanged.
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
    previous: &[Condition],
) -> Condition {
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == if status { "True" } else { "False" })
        .map(|c| c.last_transition_time.clone());
    condition_since(type_, status, reason, message, generation, now, since)
}

/// A condition whose status, when unchanged, has held since `since` (`None`: it changes now).
fn condition_since(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
    since: Option<Time>,
) -> Condition {
    let last_transition_time = since.unwrap_or_else(|| now.clone());
    let status = if status { "True" } else { "False" }.to_string();
    Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

fn is_true(conditions: Option<&Vec<Condition>>, type_: &str) -> Option<bool> {
    conditions?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status == "True")
}

fn quoted_list<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    items
        .into_iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn pending_msg(gw: &str) -> String {
    format!("Gateway {gw} has no current Accepted and Programmed status yet")
}

/// The owned Gateway as found.
#[derive(Debug, Clone, Copy)]
pub enum GatewayState<'a> {
    Missing,
    NotOwned,
    Owned(&'a Gateway),
}

/// What the TenantGateway status is computed from.
pub struct StatusFacts<'a> {
    pub gateway_name: &'a str,
    pub gateway: GatewayState<'a>,
    /// The name of the second Gateway `<name>-passthrough` (SPEC §3.10), and its state when
    /// the `separate` layout renders it.
    pub passthrough_gateway: (&'a str, Option<GatewayState<'a>>),
    /// `(terminate, passthrough)` listener pairs of the rendered Gateway whose hostnames
    /// intersect (`render::overlapping_listeners`), sorted.
    pub overlaps: &'a [(String, String)],
    /// Every rendered listener, `http` first.
    pub listeners: &'a [ListenerInfo],
    /// Owned Certificates by name.
    pub certificates: &'a BTreeMap<String, &'a Certificate>,
    /// http01 hostnames or dns01 child apexes the cap left out.
    pub over_cap: &'a BTreeSet<String>,
    /// Whether `over_cap` holds child apexes' wildcards (dns01, existingSecret): the advice
    /// then is not dns01, which they already use.
    pub over_cap_children: bool,
    /// Listeners the Gateway has (rendered).
    pub listener_count: usize,
    /// One sentence per object we render but may not write (same name, not owned), sorted.
    pub not_owned: &'a [String],
    /// Namespace and list-entry problems, sorted.
    pub attach_problems: &'a [String],
    /// Routes whose `status.parents` had no room for some of our entries.
    pub parents_full: &'a [ParentsFull],
    pub generation: Option<i64>,
    pub now: &'a Time,
    pub previous: Option<&'a TenantGatewayStatus>,
}

/// The state of the Gateway listener `l` is rendered on.
fn state_of<'a>(l: &ListenerInfo, f: &StatusFacts<'a>) -> GatewayState<'a> {
    match f.passthrough_gateway {
        (_, Some(second)) if l.on_passthrough_gateway => second,
        _ => f.gateway,
    }
}

/// Status of one listener.
fn listener_status(l: &ListenerInfo, f: &StatusFacts<'_>) -> ListenerStatus {
    let reason = match state_of(l, f) {
        GatewayState::Missing | GatewayState::NotOwned => "Pending",
        GatewayState::Owned(gw) => {
            let st = gw
                .status
                .as_ref()
                .and_then(|s| s.listeners.as_ref())
                .and_then(|ls| ls.iter().find(|s| s.name == l.name));
            match st {
                None => "Pending",
                Some(s) => match (
                    is_true(Some(&s.conditions), "Accepted"),
                    is_true(Some(&s.conditions), "Programmed"),
                ) {
                    (Some(false), _) => "NotAccepted",
                    (None, _) => "Pending",
                    (Some(true), Some(false)) => "NotProgrammed",
                    (Some(true), None) => "Pending",
                    (Some(true), Some(true)) => {
                        let cert_ready = l
                            .certificate
                            .as_ref()
                            .is_none_or(|c| f.certificates.get(c).is_some_and(|c| c.is_ready()));
                        if cert_ready { "" } else { "CertificatePending" }
                    }
                },
            }
        }
    };
    ListenerStatus {
        name: l.name.clone(),
        hostname: l.hostname.clone(),
        ready: reason.is_empty(),
        certificate_name: l.certificate.clone(),
        reason: reason.to_string(),
    }
}

/// Whether Gateway `gw` is Accepted and Programmed for its current spec, with the reason and
/// message `Programmed` gives.
fn gateway_programmed(gw: &str, state: GatewayState<'_>) -> (bool, &'static str, String) {
    match state {
        // Same words as a created Gateway without status: creating it changes no status.
        GatewayState::Missing => (false, "Pending", pending_msg(gw)),
        GatewayState::NotOwned => (
            false,
            "NotOwned",
            format!(
                "a Gateway named {gw} exists that this TenantGateway does not own; it is left \
                 alone: delete or rename it to let the TenantGateway create its own"
            ),
        ),
        GatewayState::Owned(g) => {
            let conds = g.status.as_ref().and_then(|s| s.conditions.as_ref());
            // A status older than the spec says nothing about the spec.
            let fresh = |t: &str| {
                conds
                    .and_then(|cs| cs.iter().find(|c| c.type_ == t))
                    .filter(|c| {
                        c.observed_generation.unwrap_or(0) >= g.metadata.generation.unwrap_or(0)
                    })
            };
            let msg_of = |t: &str| fresh(t).map(|c| c.message.clone()).unwrap_or_default();
            match (
                fresh("Accepted").map(|c| c.status == "True"),
                fresh("Programmed").map(|c| c.status == "True"),
            ) {
                (Some(true), Some(true)) => (
                    true,
                    "Programmed",
                    format!("Gateway {gw} is accepted and programmed"),
                ),
                (Some(false), _) => (
                    false,
                    "NotAccepted",
                    format!("Gateway {gw} is not accepted: {}", msg_of("Accepted")),
                ),
                (Some(true), Some(false)) => (
                    false,
                    "NotProgrammed",
                    format!("Gateway {gw} is not programmed: {}", msg_of("Programmed")),
                ),
                _ => (
                    false,
                    "Pending",
                    format!("Gateway {gw} has no current Accepted and Programmed status yet"),
                ),
            }
        }
    }
}

/// Listeners the data plane reports `Conflicted=True` on an owned Gateway (SPEC §3.10), as
/// (Gateway, listener, reason), sorted: only the listeners rendered there, and conditions no
/// older than the Gateway's spec (one without observedGeneration counts as current).
fn conflicted_listeners(f: &StatusFacts<'_>) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let gateways = [
        (f.gateway_name, Some(f.gateway), false),
        (f.passthrough_gateway.0, f.passthrough_gateway.1, true),
    ];
    for (name, state, second) in gateways {
        let Some(GatewayState::Owned(g)) = state else {
            continue;
        };
        let rendered: BTreeSet<&str> = f
            .listeners
            .iter()
            .filter(|l| l.on_passthrough_gateway == second)
            .map(|l| l.name.as_str())
            .collect();
        let generation = g.metadata.generation.unwrap_or(0);
        let statuses = g.status.as_ref().and_then(|s| s.listeners.as_ref());
        for l in statuses.into_iter().flatten() {
            if !rendered.contains(l.name.as_str()) {
                continue;
            }
            let conflicted = l.conditions.iter().find(|c| {
                c.type_ == "Conflicted"
                    && c.status == "True"
                    && c.observed_generation.is_none_or(|o| o >= generation)
            });
            if let Some(c) = conflicted {
                out.push((name.to_string(), l.name.clone(), c.reason.clone()));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The overlapping pairs named with their hostnames: "https (*.a) and tls-api (api.a), …".
fn overlap_list(f: &StatusFacts<'_>) -> String {
    let host = |name: &str| {
        f.listeners
            .iter()
            .find(|l| l.name == name)
            .and_then(|l| l.hostname.as_deref())
            .map(|h| format!("{name} ({h})"))
            .unwrap_or_else(|| name.to_string())
    };
    f.overlaps
        .iter()
        .map(|(t, p)| format!("{} and {}", host(t), host(p)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `separate` layout's flag and what it does, for the messages that advise it.
fn separate_advice(f: &StatusFacts<'_>) -> String {
    let pt = f.passthrough_gateway.0;
    format!(
        "set --passthrough-gateway separate (chart value controller.passthroughGateway) to \
         move the passthrough listeners to a second Gateway {pt}, then point the TLSRoutes' \
         parentRefs at {pt} and DNS for the passthrough hostnames at its address"
    )
}

/// `ListenersOverlap` (SPEC §3.10): True naming each overlapping pair and the flag.
fn overlap_condition(f: &StatusFacts<'_>) -> (bool, &'static str, String) {
    let gw = f.gateway_name;
    if !f.overlaps.is_empty() {
        return (
            true,
            "TerminateAndPassthrough",
            format!(
                "HTTPS-terminate and TLS-passthrough listeners of Gateway {gw} on one port have \
                 intersecting hostnames (--passthrough-gateway shared): {}; data planes that \
                 refuse such pairs (Cilium from 1.19.6) accept neither listener of a pair: {}",
                overlap_list(f),
                separate_advice(f)
            ),
        );
    }
    match f.passthrough_gateway {
        (pt, Some(_)) => (
            false,
            "SeparateGateway",
            format!(
                "the passthrough listeners are on Gateway {pt} (--passthrough-gateway \
                 separate); no listener pair of one Gateway overlaps"
            ),
        ),
        _ => (
            false,
            "NoOverlap",
            format!(
                "no HTTPS-terminate listener of Gateway {gw} has a hostname that intersects a \
                 TLS-passthrough listener's on the same port"
            ),
        ),
    }
}

/// Ready's message when the data plane reports listeners Conflicted: the listeners by
/// Gateway, then the fix.
fn conflicted_message(f: &StatusFacts<'_>, conflicted: &[(String, String, String)]) -> String {
    let mut by_gateway: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (g, l, reason) in conflicted {
        by_gateway
            .entry(g.as_str())
            .or_default()
            .push(format!("{l} ({reason})"));
    }
    let named: Vec<String> = by_gateway
        .iter()
        .map(|(g, ls)| format!("Gateway {g}: {}", ls.join(", ")))
        .collect();
    let overlapping = conflicted
        .iter()
        .any(|(g, l, _)| g == f.gateway_name && f.overlaps.iter().any(|(t, p)| t == l || p == l));
    let fix = if overlapping {
        format!(
            "they are HTTPS-terminate and TLS-passthrough listeners of one port with \
             intersecting hostnames ({}), which this data plane refuses: {}",
            overlap_list(f),
            separate_advice(f)
        )
    } else {
        "the data plane refuses listeners of one port whose hostnames intersect: make them \
         disjoint (a tlsPassthroughServices entry whose hostname another listener serves), \
         and see the Gateway's status.listeners for its message"
            .to_string()
    };
    format!(
        "the data plane reports conflicted listeners and accepts none of them: {}; {fix}",
        named.join("; ")
    )
}

/// The rendered Gateways with the addresses their data plane reports (owned ones only).
fn gateway_addresses(f: &StatusFacts<'_>) -> Vec<GatewayAddresses> {
    let one = |name: &str, state: GatewayState<'_>| GatewayAddresses {
        name: name.to_string(),
        addresses: match state {
            GatewayState::Owned(g) => g
                .status
                .as_ref()
                .and_then(|s| s.addresses.as_ref())
                .into_iter()
                .flatten()
                .map(|a| GatewayAddress {
                    type_: a.r#type.clone(),
                    value: a.value.clone(),
                })
                .collect(),
            GatewayState::Missing | GatewayState::NotOwned => Vec::new(),
        },
    };
    let mut out = vec![one(f.gateway_name, f.gateway)];
    if let (pt, Some(state)) = f.passthrough_gateway {
        out.push(one(pt, state));
    }
    out
}

/// The TenantGateway status of a rendered world.
pub fn tgw_status(f: &StatusFacts<'_>) -> TenantGatewayStatus {
    let prev: &[Condition] = f.previous.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
    let cond = |t: &str, ok: bool, reason: &str, msg: String| {
        condition(t, ok, reason, msg, f.generation, f.now, prev)
    };
    let gw = f.gateway_name;
    let first = gateway_programmed(gw, f.gateway);
    // Both Gateways of the `separate` layout count (SPEC §3.10); the first one's reason
    // first.
    let (programmed, p_reason, p_msg) = match f.passthrough_gateway {
        (pt, Some(state)) => match (first, gateway_programmed(pt, state)) {
            ((true, _, _), (true, _, _)) => (
                true,
                "Programmed",
                format!("Gateways {gw} and {pt} are accepted and programmed"),
            ),
            ((true, _, _), second) => second,
            (first, _) => first,
        },
        _ => first,
    };

    let listeners: Vec<ListenerStatus> =
        f.listeners.iter().map(|l| listener_status(l, f)).collect();
    let capacity = if f.over_cap.is_empty() {
        cond(
            LISTENER_CAPACITY,
            true,
            "WithinLimit",
            format!("{} of {MAX_LISTENERS} listeners used", f.listener_count),
        )
    } else if f.over_cap_children {
        cond(
            LISTENER_CAPACITY,
            false,
            "ListenerLimitReached",
            format!(
                "{} child apex listener(s) did not fit in the {MAX_LISTENERS}-listener limit of \
                 a Gateway (one wildcard listener per inheriting child apex, in name order) and \
                 are not served: {}; give some of those child tenants a Gateway of their own \
                 (tenant.spec.gateway=true)",
                f.over_cap.len(),
                quoted_list(f.over_cap)
            ),
        )
    } else {
        cond(
            LISTENER_CAPACITY,
            false,
            "ListenerLimitReached",
            format!(
                "{} hostname(s) did not fit in the {MAX_LISTENERS}-listener limit of a Gateway \
                 (cozy-* namespaces first, the rest shared fairly between the namespaces that \
                 publish here) and are not served: {}; switch certMode to dns01 to serve every \
                 hostname under the apex with one wildcard listener",
                f.over_cap.len(),
                quoted_list(f.over_cap)
            ),
        )
    };
    let attached = if f.attach_problems.is_empty() {
        cond(
            NAMESPACES_ATTACHED,
            true,
            "Attached",
            "every listed namespace is attached".into(),
        )
    } else {
        cond(
            NAMESPACES_ATTACHED,
            false,
            "NotAttached",
            f.attach_problems.join("; "),
        )
    };

    let not_ready: Vec<String> = listeners
        .iter()
        .filter(|l| !l.ready)
        .map(|l| format!("{} ({})", l.name, l.reason))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let pending_certs: BTreeSet<&String> = f
        .listeners
        .iter()
        .filter_map(|l| l.certificate.as_ref())
        .filter(|c| !f.certificates.get(*c).is_some_and(|c| c.is_ready()))
        .collect();
    let conflicted = conflicted_listeners(f);
    let ready = if !f.not_owned.is_empty() {
        cond(READY, false, "NotOwned", f.not_owned.join("; "))
    } else if !conflicted.is_empty() {
        cond(
            READY,
            false,
            LISTENERS_CONFLICTED,
            conflicted_message(f, &conflicted),
        )
    } else if !programmed {
        cond(READY, false, p_reason, p_msg.clone())
    } else if !not_ready.is_empty() {
        let reason = if not_ready
            .iter()
            .all(|l| l.ends_with("(CertificatePending)"))
        {
            "CertificatePending"
        } else {
            "ListenersNotReady"
        };
        cond(
            READY,
            false,
            reason,
            format!("listeners not ready: {}", not_ready.join(", ")),
        )
    } else if !pending_certs.is_empty() {
        cond(
            READY,
            false,
            "CertificatePending",
            format!("certificates not ready: {}", quoted_list(pending_certs)),
        )
    } else {
        cond(
            READY,
            true,
            "Ready",
            "the Gateway is programmed and every certificate is ready".into(),
        )
    };
    let route_status = if f.parents_full.is_empty() {
        cond(
            ROUTE_STATUS,
            true,
            "Recorded",
            "every attaching route's parentRefs to this Gateway have a status entry".into(),
        )
    } else {
        cond(
            ROUTE_STATUS,
            false,
            "ParentsFull",
            parents_full_message(f.parents_full),
        )
    };
    let (overlap, o_reason, o_msg) = overlap_condition(f);
    TenantGatewayStatus {
        observed_generation: f.generation,
        conditions: vec![
            ready,
            cond(PROGRAMMED, programmed, p_reason, p_msg),
            capacity,
            attached,
            route_status,
            cond(LISTENERS_OVERLAP, overlap, o_reason, o_msg),
        ],
        listeners,
        gateways: gateway_addresses(f),
    }
}

/// A route some of whose parentRefs to this Gateway got no status entry: its
/// `status.parents` had no room left under [`MAX_ROUTE_PARENTS`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ParentsFull {
    pub kind: RouteKind,
    pub namespace: String,
    pub name: String,
    /// parentRefs to this Gateway that got no entry.
    pub without_entry: usize,
    /// parentRefs to this Gateway in all.
    pub parent_refs: usize,
}

/// The `RouteStatus=False` message: the count, then the routes in (kind, namespace, name)
/// order — at most [`ROUTES_NAMED`] of them, so a Gateway with thousands of such routes keeps
/// a bounded status — then what to do.
pub fn parents_full_message(full: &[ParentsFull]) -> String {
    let mut sorted: Vec<&ParentsFull> = full.iter().collect();
    sorted.sort();
    let named: Vec<String> = sorted
        .iter()
        .take(ROUTES_NAMED)
        .map(|r| {
            format!(
                "{} {}/{} ({} of {} parentRefs)",
                r.kind.as_str(),
                r.namespace,
                r.name,
                r.without_entry,
                r.parent_refs
            )
        })
        .collect();
    let more = sorted.len().saturating_sub(ROUTES_NAMED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "{} route(s) have parentRefs to this Gateway without a status entry because \
         status.parents holds at most {MAX_ROUTE_PARENTS} entries and other entries fill it: \
         {}{more}; they are served all the same, only those entries are missing (remove \
         parentRefs to make room)",
        sorted.len(),
        named.join(", ")
    )
}

/// Our entries for one route in parentRef order, cut to the room `status.parents` has left
/// once the `foreign` entries (other controllers', and ours for other Gateways) are counted:
/// those stay, ours fill what remains, in parentRef order (SPEC §3.7). Returns the entries
/// kept and how many got no room.
pub fn fit_parents(
    mut entries: Vec<RouteParentStatus>,
    foreign: usize,
) -> (Vec<RouteParentStatus>, usize) {
    let room = MAX_ROUTE_PARENTS.saturating_sub(foreign);
    let cut = entries.len().saturating_sub(room);
    entries.truncate(room);
    (entries, cut)
}

/// Status when nothing can be rendered (`reason` InvalidSpec or Duplicate): only `Ready`,
/// keeping the listener entries last reported.
pub fn blocked_status(
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
    previous: Option<&TenantGatewayStatus>,
) -> TenantGatewayStatus {
    let prev: &[Condition] = previous.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
    let mut conditions: Vec<Condition> = vec![condition(
        READY, false, reason, message, generation, now, prev,
    )];
    conditions.extend(prev.iter().filter(|c| c.type_ != READY).cloned());
    TenantGatewayStatus {
        observed_generation: generation,
        conditions,
        listeners: previous.map(|s| s.listeners.clone()).unwrap_or_default(),
        gateways: previous.map(|s| s.gateways.clone()).unwrap_or_default(),
    }
}

/// Our `status.parents` entries for one route attaching to the Gateway named like the
/// TenantGateway (`tgw`) with the listeners `listener_names`. `passthrough_on`: the second
/// Gateway holding the passthrough listeners in the `separate` layout (SPEC §3.10), which a
/// TLSRoute must name instead.
pub fn route_entries(
    v: &RouteVerdict,
    tgw: (&str, &str),
    listener_names: &[String],
    passthrough_on: Option<&str>,
    generation: Option<i64>,
    now: &Time,
    previous: &[RouteParentStatus],
) -> Vec<RouteParentStatus> {
    let (tgw_ns, tgw_name) = tgw;
    let sections = known_sections(listener_names);
    let mut out = Vec::new();
    for (p, claims) in &v.parents {
        let (ok, reason, message) = if *claims {
            claim_verdict(v, tgw_ns, tgw_name)
        } else {
            match (p.section_name.as_deref(), passthrough_on) {
                (_, Some(pt)) if v.kind == RouteKind::TlsRoute => (
                    false,
                    "NotAllowedByListeners",
                    format!(
                        "Gateway {tgw_ns}/{tgw_name} has no TLS passthrough listener: \
                         --passthrough-gateway separate puts them on Gateway {tgw_ns}/{pt}; \
                         point this parentRef at it"
                    ),
                ),
                (Some(s), _) if !sections.contains(s) => (
                    false,
                    "NoMatchingParent",
                    format!("Gateway {tgw_ns}/{tgw_name} has no listener named {s}"),
                ),
                _ if v.kind == RouteKind::TlsRoute => (
                    true,
                    "Accepted",
                    "TLSRoutes attach to the tls-<svc> passthrough listeners; no listener or \
                     certificate is created for them"
                        .to_string(),
                ),
                (section, _) => (
                    true,
                    "Accepted",
                    format!(
                        "attached to listener {}; it claims no HTTPS listener",
                        section.unwrap_or_default()
                    ),
                ),
            }
        };
        out.push(entry(p, (ok, reason, message), generation, now, previous));
    }
    out
}

/// Our `status.parents` entries for one route attaching to the `separate` layout's second
/// Gateway `gateway` (SPEC §3.10), whose listeners `listener_names` are all passthrough ones:
/// TLSRoutes only; `main` is the Gateway HTTPRoutes attach to.
pub fn passthrough_route_entries(
    v: &RouteVerdict,
    gateway: (&str, &str),
    main: &str,
    listener_names: &[String],
    generation: Option<i64>,
    now: &Time,
    previous: &[RouteParentStatus],
) -> Vec<RouteParentStatus> {
    let (ns, name) = gateway;
    let mut out = Vec::new();
    for (p, _) in &v.parents {
        let verdict = match p.section_name.as_deref() {
            _ if v.kind != RouteKind::TlsRoute => (
                false,
                "NotAllowedByListeners",
                format!(
                    "Gateway {ns}/{name} holds only TLS passthrough listeners, which admit \
                     TLSRoutes; attach {}s to Gateway {ns}/{main}",
                    v.kind.as_str()
                ),
            ),
            Some(s) if !listener_names.iter().any(|l| l == s) => (
                false,
                "NoMatchingParent",
                format!("Gateway {ns}/{name} has no listener named {s}"),
            ),
            _ => (
                true,
                "Accepted",
                format!(
                    "attached to the passthrough listeners of Gateway {ns}/{name}; no listener \
                     or certificate is created for TLSRoutes"
                ),
            ),
        };
        out.push(entry(p, verdict, generation, now, previous));
    }
    out
}

/// One entry with its Accepted condition, keeping the transition time of the previous one.
fn entry(
    p: &SharedRef,
    (ok, reason, message): (bool, &str, String),
    generation: Option<i64>,
    now: &Time,
    previous: &[RouteParentStatus],
) -> RouteParentStatus {
    let since = previous
        .iter()
        .find(|e| &e.parent_ref == p)
        .and_then(|e| e.conditions.accepted_since(ok));
    RouteParentStatus {
        parent_ref: p.clone(),
        conditions: vec![condition_since(
            ACCEPTED, ok, reason, message, generation, now, since,
        )]
        .into(),
    }
}

fn claim_verdict(v: &RouteVerdict, tgw_ns: &str, tgw_name: &str) -> (bool, &'static str, String) {
    let mut parts: Vec<String> = Vec::new();
    // Conflicts grouped by winner namespace.
    let mut by_winner: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for (h, w) in &v.conflicts {
        by_winner.entry(w.as_str()).or_default().push(h);
    }
    for (w, hosts) in &by_winner {
        parts.push(format!(
            "hostname(s) {} already published by namespace {w} on TenantGateway \
             {tgw_ns}/{tgw_name} (HostnameConflict: cozy-* namespaces win, then the \
             namespace whose own apex is the most specific one containing the hostname, then \
             the lexicographically smaller namespace, then the route name)",
            quoted_list(hosts.iter().copied())
        ));
    }
    if !v.over_cap.is_empty() {
        parts.push(format!(
            "hostname(s) {} not served: TenantGateway {tgw_ns}/{tgw_name} has reached the \
             {MAX_LISTENERS}-listener limit of a Gateway, and this namespace its fair share of \
             it (ListenerLimitReached)",
            quoted_list(&v.over_cap)
        ));
    }
    for (h, listener) in &v.passthrough {
        parts.push(format!(
            "hostname {h:?} is passed through by listener {listener} of TenantGateway \
             {tgw_ns}/{tgw_name} (tlsPassthroughServices): the declaration wins, no HTTPS \
             listener or certificate is made for it (PassthroughHostname; serve it with a \
             TLSRoute, or remove the service from the list)"
        ));
    }
    for (h, why) in &v.not_listenable {
        parts.push(format!("hostname {h:?} {why}"));
    }
    let reason = if !v.conflicts.is_empty() {
        "HostnameConflict"
    } else if !v.over_cap.is_empty() {
        "ListenerLimitReached"
    } else if !v.passthrough.is_empty() {
        "PassthroughHostname"
    } else if !v.not_listenable.is_empty() {
        "HostnameNotListenable"
    } else {
        let msg = if v.served.is_empty() {
            format!(
                "attached to TenantGateway {tgw_ns}/{tgw_name}; the route lists no hostname of its own"
            )
        } else {
            format!(
                "hostname(s) {} served by TenantGateway {tgw_ns}/{tgw_name}",
                quoted_list(&v.served)
            )
        };
        return (true, "Accepted", msg);
    };
    (false, reason, parts.join("; "))
}

/// Entries of `previous` that belong to Gateway `ns/name`.
pub fn entries_for<'a>(
    previous: &'a [RouteParentStatus],
    route_ns: &str,
    gateway: (&str, &str),
) -> Vec<&'a RouteParentStatus> {
    previous
        .iter()
        .filter(|e| e.parent_ref.targets(route_ns, gateway.0, gateway.1))
        .collect()
}

/// Sorted by parentRef, for comparison independent of order.
pub fn sorted(mut entries: Vec<RouteParentStatus>) -> Vec<RouteParentStatus> {
    entries.sort_by(|a, b| a.parent_ref.cmp(&b.parent_ref));
    entries
}

/// Helper for tests and the edge: does `p` equal any parentRef in the list.
pub fn has_parent(entries: &[RouteParentStatus], p: &ParentRef) -> bool {
    entries.iter().any(|e| &e.parent_ref == p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::testing::at;

    #[test]
    fn transition_time_kept_when_status_unchanged() {
        let t0 = at(100);
        let t1 = at(200);
        let first = condition(READY, false, "Pending", "a".into(), Some(1), &t0, &[]);
        assert_eq!(first.last_transition_time, t0);
        // Same status, new reason and message: time kept.
        let same = condition(
            READY,
            false,
            "NotProgrammed",
            "b".into(),
            Some(2),
            &t1,
            std::slice::from_ref(&first),
        );
        assert_eq!(same.last_transition_time, t0);
        assert_eq!(same.reason, "NotProgrammed");
        assert_eq!(same.observed_generation, Some(2));
        // Status flips: time moves.
        let flipped = condition(READY, true, "Ready", "c".into(), Some(2), &t1, &[first]);
        assert_eq!(flipped.last_transition_time, t1);
    }

    fn verdict() -> RouteVerdict {
        RouteVerdict {
            kind: RouteKind::HttpRoute,
            namespace: "tenant-alice-x".into(),
            name: "web".into(),
            parents: vec![(
                ParentRef {
                    name: "gw".into(),
                    ..Default::default()
                }
                .into(),
                true,
            )],
            not_listenable: BTreeMap::new(),
            passthrough: BTreeMap::new(),
            conflicts: BTreeMap::new(),
            over_cap: BTreeSet::new(),
            served: BTreeSet::new(),
        }
    }

    fn accepted(e: &[RouteParentStatus]) -> (String, String, String) {
        let c = e[0].conditions.to_vec().swap_remove(0);
        assert_eq!(c.type_, ACCEPTED);
        (c.status, c.reason, c.message)
    }

    #[test]
    fn route_reasons_and_sorted_messages() {
        let now = at(1);
        let gw = ("tenant-alice", "gw");
        let mut v = verdict();
        v.served.insert("a.alice.example.org".into());
        let e = route_entries(&v, gw, &[], None, Some(3), &now, &[]);
        assert_eq!(accepted(&e).0, "True");
        assert_eq!(e[0].conditions.to_vec()[0].observed_generation, Some(3));

        v.conflicts
            .insert("z.alice.example.org".into(), "cozy-harbor".into());
        v.conflicts
            .insert("b.alice.example.org".into(), "cozy-harbor".into());
        v.over_cap.insert("c.alice.example.org".into());
        v.not_listenable
            .insert("*.alice.example.org".into(), "is a wildcard".into());
        let e = route_entries(&v, gw, &[], None, Some(3), &now, &[]);
        let (status, reason, msg) = accepted(&e);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "HostnameConflict")
        );
        assert!(
            msg.contains("\"b.alice.example.org\", \"z.alice.example.org\" already published by namespace cozy-harbor on TenantGateway tenant-alice/gw"),
            "{msg}"
        );
        assert!(msg.contains("ListenerLimitReached"), "{msg}");
        assert!(
            msg.contains("\"*.alice.example.org\" is a wildcard"),
            "{msg}"
        );

        v.conflicts.clear();
        assert_eq!(
            accepted(&route_entries(&v, gw, &[], None, None, &now, &[])).1,
            "ListenerLimitReached"
        );
        v.over_cap.clear();
        assert_eq!(
            accepted(&route_entries(&v, gw, &[], None, None, &now, &[])).1,
            "HostnameNotListenable"
        );
    }

    #[test]
    fn non_claiming_sections() {
        let now = at(1);
        let gw = ("tenant-alice", "gw");
        let mut v = verdict();
        v.parents = vec![
            (
                ParentRef {
                    name: "gw".into(),
                    section_name: Some("http".into()),
                    ..Default::default()
                }
                .into(),
                false,
            ),
            (
                ParentRef {
                    name: "gw".into(),
                    section_name: Some("tls-nope".into()),
                    ..Default::default()
                }
                .into(),
                false,
            ),
        ];
        let e = route_entries(&v, gw, &["tls-api".to_string()], None, None, &now, &[]);
        assert_eq!(e[0].conditions.to_vec()[0].status, "True");
        assert_eq!(e[1].conditions.to_vec()[0].reason, "NoMatchingParent");
    }

    fn full(kind: RouteKind, ns: &str, name: &str) -> ParentsFull {
        ParentsFull {
            kind,
            namespace: ns.into(),
            name: name.into(),
            without_entry: 1,
            parent_refs: 32,
        }
    }

    /// The message is a function of the set (sorted, whatever the order given) and bounded.
    #[test]
    fn parents_full_message_is_sorted_and_bounded() {
        let a = full(RouteKind::HttpRoute, "tenant-b", "r");
        let b = full(RouteKind::HttpRoute, "tenant-a", "z");
        let c = full(RouteKind::TlsRoute, "tenant-a", "a");
        let m = parents_full_message(&[c.clone(), a.clone(), b.clone()]);
        assert_eq!(m, parents_full_message(&[b.clone(), c.clone(), a.clone()]));
        let pos = |s: &str| m.find(s).unwrap_or_else(|| panic!("{s} missing: {m}"));
        assert!(
            pos("HTTPRoute tenant-a/z") < pos("HTTPRoute tenant-b/r"),
            "{m}"
        );
        assert!(
            pos("HTTPRoute tenant-b/r") < pos("TLSRoute tenant-a/a"),
            "{m}"
        );
        assert!(m.starts_with("3 route(s)"), "{m}");

        let many: Vec<ParentsFull> = (0..25)
            .map(|i| full(RouteKind::HttpRoute, "tenant-a", &format!("r{i:02}")))
            .collect();
        let m = parents_full_message(&many);
        assert!(m.contains("r09 (1 of 32 parentRefs) and 15 more"), "{m}");
        assert!(!m.contains("r10"), "{m}");
    }

    #[test]
    fn fit_parents_cuts_in_order() {
        let entries: Vec<RouteParentStatus> = (0..40)
            .map(|i| RouteParentStatus {
                parent_ref: ParentRef {
                    name: "gw".into(),
                    port: Some(i),
                    ..Default::default()
                }
                .into(),
                conditions: Default::default(),
            })
            .collect();
        // (entries, foreign, kept, cut)
        for (n, foreign, kept, cut) in [
            (31, 1, 31, 0),
            (32, 1, 31, 1),
            (40, 0, 32, 8),
            (3, 40, 0, 3),
            (0, 32, 0, 0),
        ] {
            let (k, c) = fit_parents(entries[..n].to_vec(), foreign);
            assert_eq!((k.len(), c), (kept, cut), "{n}/{foreign}");
            assert_eq!(k[..], entries[..kept], "{n}/{foreign}: the first ones stay");
        }
    }
}
