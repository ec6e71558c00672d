//! The facts the route index keeps of each HTTPRoute and TLSRoute (SPEC §3.3, §3.4): what
//! the reconciler plans from, what the admission warnings compare against, and what a route
//! status write edits in place. Sized for tens of thousands of routes: parentRefs shared,
//! conditions fingerprinted, a route's strings packed into one ([`RouteFacts`]).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::intern::{Interner, MAX_INTERNED_LEN};
use super::kept::KeptJson;
use crate::platform::GATEWAY_API_GROUP;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum RouteKind {
    #[default]
    HttpRoute,
    TlsRoute,
}

impl RouteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::HttpRoute => "HTTPRoute",
            RouteKind::TlsRoute => "TLSRoute",
        }
    }
}

/// The facts of one route the reconciler reads (SPEC §3.3).
///
/// Sized for the index: tens of thousands are kept, each in one allocation of jemalloc's
/// 112-byte class with its `Arc` counts (`facts_fit_their_size_class`). The name, the
/// resourceVersion, the status layout's numbers and the hostnames share one string of their
/// length (`text`, see [`RouteFacts::from`]), the optional scalars keep their presence in
/// one byte of flags, the namespace is interned, and the lists are at their length
/// (`Box<[T]>`, no allocation when empty). The plain form, [`RouteFactsParts`], is what
/// builders and tests write; readers go through the accessors.
#[derive(Clone, PartialEq)]
pub struct RouteFacts {
    pub kind: RouteKind,
    flags: u8,
    /// Where the name ends in `text` and where the resourceVersion ends.
    name_end: u32,
    rv_end: u32,
    /// The creation time's nanosecond (0 when absent).
    creation_nanosecond: i32,
    pub namespace: Arc<str>,
    text: Box<str>,
    /// The creation time's second (0 when absent).
    creation_second: i64,
    /// `metadata.generation` (0 when absent).
    generation: i64,
    pub parent_refs: Box<[SharedRef]>,
    /// The route's `status.parents` entries whose controllerName is ours (any Gateway).
    pub our_status: Box<[RouteParentStatus]>,
}

const HAS_RESOURCE_VERSION: u8 = 1;
const HAS_CREATION: u8 = 1 << 1;
const HAS_GENERATION: u8 = 1 << 2;
const HAS_LAYOUT: u8 = 1 << 3;
const LAYOUT_STATUS: u8 = 1 << 4;
const HAS_PARENTS: u8 = 1 << 5;
/// `text` holds the layout's numbers (its length of `status.parents`, then `ours_at`).
const LAYOUT_NUMBERS: u8 = 1 << 6;

/// A route's facts in plain form: what [`RouteFacts`] packs and restores exactly
/// ([`RouteFacts::parts`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RouteFactsParts {
    pub kind: RouteKind,
    pub namespace: Arc<str>,
    pub name: Box<str>,
    pub creation: Option<Time>,
    pub generation: Option<i64>,
    pub resource_version: Option<Box<str>>,
    pub hostnames: Box<[String]>,
    pub parent_refs: Box<[SharedRef]>,
    /// The route's `status.parents` entries whose controllerName is ours (any Gateway).
    pub our_status: Box<[RouteParentStatus]>,
    /// Where those entries sit in `status.parents`, so a status write can edit the list in
    /// place, conditional on `resource_version`, without reading the route first. `None` when
    /// the view is not exact (an entry under our controllerName that did not decode, a
    /// `status.parents` that is not a list): the write then reads the route.
    pub parents_layout: Option<ParentsLayout>,
}

/// The packing: `text` is the name, then the resourceVersion (empty when absent), then,
/// when the layout has any, its numbers in decimal each ended by `,` (the length of
/// `status.parents`, 0 when absent, then `ours_at`) and a `;`, then each hostname as
/// `<length>:<hostname>` (decimal length, so any string round-trips exactly, a `:`, `;` or
/// digit in it included).
impl From<RouteFactsParts> for RouteFacts {
    fn from(p: RouteFactsParts) -> RouteFacts {
        use std::fmt::Write;
        let mut flags = 0;
        let (creation_second, creation_nanosecond) = match &p.creation {
            Some(t) => {
                flags |= HAS_CREATION;
                (t.0.as_second(), t.0.subsec_nanosecond())
            }
            None => (0, 0),
        };
        if p.generation.is_some() {
            flags |= HAS_GENERATION;
        }
        let rv = p.resource_version.as_deref();
        if rv.is_some() {
            flags |= HAS_RESOURCE_VERSION;
        }
        let rv = rv.unwrap_or_default();
        let mut text = String::with_capacity(p.name.len() + rv.len());
        text.push_str(&p.name);
        text.push_str(rv);
        if let Some(l) = &p.parents_layout {
            flags |= HAS_LAYOUT;
            if l.status {
                flags |= LAYOUT_STATUS;
            }
            if l.parents.is_some() {
                flags |= HAS_PARENTS;
            }
            if l.parents.is_some() || !l.ours_at.is_empty() {
                flags |= LAYOUT_NUMBERS;
                for n in std::iter::once(l.parents.unwrap_or(0)).chain(l.ours_at.iter().copied()) {
                    // Cannot fail: writing to a String.
                    let _ = write!(text, "{n},");
                }
                text.push(';');
            }
        }
        for h in &p.hostnames {
            // Cannot fail: writing to a String.
            let _ = write!(text, "{}:{h}", h.len());
        }
        RouteFacts {
            kind: p.kind,
            flags,
            // Lengths from one API object: the API server takes requests of a few MiB.
            name_end: u32::try_from(p.name.len()).unwrap_or(u32::MAX),
            rv_end: u32::try_from(p.name.len() + rv.len()).unwrap_or(u32::MAX),
            creation_nanosecond,
            namespace: p.namespace,
            text: text.into_boxed_str(),
            creation_second,
            generation: p.generation.unwrap_or(0),
            parent_refs: p.parent_refs,
            our_status: p.our_status,
        }
    }
}

impl Default for RouteFacts {
    fn default() -> RouteFacts {
        RouteFacts::from(RouteFactsParts::default())
    }
}

impl std::fmt::Debug for RouteFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.parts().fmt(f)
    }
}

impl RouteFacts {
    /// The plain form, restored exactly.
    pub fn parts(&self) -> RouteFactsParts {
        RouteFactsParts {
            kind: self.kind,
            namespace: self.namespace.clone(),
            name: self.name().into(),
            creation: self.creation(),
            generation: self.generation(),
            resource_version: self.resource_version().map(Box::from),
            hostnames: self.hostnames().map(str::to_string).collect(),
            parent_refs: self.parent_refs.clone(),
            our_status: self.our_status.clone(),
            parents_layout: self.parents_layout(),
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.text.get(..self.name_end as usize).unwrap_or_default()
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        (self.flags & HAS_RESOURCE_VERSION != 0).then(|| {
            self.text
                .get(self.name_end as usize..self.rv_end as usize)
                .unwrap_or_default()
        })
    }

    /// The layout's numbers and the hostnames, packed.
    fn after_rv(&self) -> (&str, &str) {
        let rest = self.text.get(self.rv_end as usize..).unwrap_or_default();
        if self.flags & LAYOUT_NUMBERS == 0 {
            return ("", rest);
        }
        rest.split_once(';').unwrap_or((rest, ""))
    }

    /// `spec.hostnames` as written (the strings among them), in order.
    pub fn hostnames(&self) -> Hostnames<'_> {
        Hostnames {
            rest: self.after_rv().1,
        }
    }

    /// `metadata.creationTimestamp`.
    pub fn creation(&self) -> Option<Time> {
        if self.flags & HAS_CREATION == 0 {
            return None;
        }
        // Cannot fail: the parts are those of a timestamp (`From<RouteFactsParts>`).
        k8s_openapi::jiff::Timestamp::new(self.creation_second, self.creation_nanosecond)
            .ok()
            .map(Time)
    }

    /// `metadata.generation`.
    pub fn generation(&self) -> Option<i64> {
        (self.flags & HAS_GENERATION != 0).then_some(self.generation)
    }

    /// Where `our_status`'s entries sit in `status.parents` ([`RouteFactsParts::parents_layout`]).
    pub fn parents_layout(&self) -> Option<ParentsLayout> {
        (self.flags & HAS_LAYOUT != 0).then(|| ParentsLayout {
            status: self.flags & LAYOUT_STATUS != 0,
            parents: self.layout_parents(),
            ours_at: self.ours_at().collect(),
        })
    }

    /// The layout's numbers as packed: its length of `status.parents`, then `ours_at`.
    fn layout_numbers(&self) -> impl Iterator<Item = u32> + '_ {
        self.after_rv()
            .0
            .split_terminator(',')
            .filter_map(|n| n.parse().ok())
    }

    fn layout_parents(&self) -> Option<u32> {
        if self.flags & HAS_PARENTS == 0 {
            return None;
        }
        self.layout_numbers().next()
    }

    fn ours_at(&self) -> impl Iterator<Item = u32> + '_ {
        self.layout_numbers().skip(1)
    }

    /// Sets the name (builders and tests; the index never edits facts in place).
    pub fn set_name(&mut self, name: &str) {
        let mut p = self.parts();
        p.name = name.into();
        *self = RouteFacts::from(p);
    }

    /// Sets the hostnames (builders and tests).
    pub fn set_hostnames<S: AsRef<str>>(&mut self, hostnames: &[S]) {
        let mut p = self.parts();
        p.hostnames = hostnames.iter().map(|h| h.as_ref().to_string()).collect();
        *self = RouteFacts::from(p);
    }

    /// Sets the resourceVersion (builders and tests).
    pub fn set_resource_version(&mut self, rv: Option<&str>) {
        let mut p = self.parts();
        p.resource_version = rv.map(Box::from);
        *self = RouteFacts::from(p);
    }

    /// Sets the creation time (builders and tests).
    pub fn set_creation(&mut self, creation: Option<Time>) {
        let mut p = self.parts();
        p.creation = creation;
        *self = RouteFacts::from(p);
    }

    /// Sets the generation (builders and tests).
    pub fn set_generation(&mut self, generation: Option<i64>) {
        let mut p = self.parts();
        p.generation = generation;
        *self = RouteFacts::from(p);
    }

    /// Sets the layout (builders and tests).
    pub fn set_parents_layout(&mut self, layout: Option<ParentsLayout>) {
        let mut p = self.parts();
        p.parents_layout = layout;
        *self = RouteFacts::from(p);
    }
}

/// A route's hostnames ([`RouteFacts::hostnames`]), read from their packed form.
#[derive(Clone)]
pub struct Hostnames<'a> {
    rest: &'a str,
}

impl Hostnames<'_> {
    /// No hostnames left (a route with none takes every hostname of its listeners).
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

impl<'a> Iterator for Hostnames<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let (len, rest) = self.rest.split_once(':')?;
        let (h, rest) = rest.split_at_checked(len.parse().ok()?)?;
        self.rest = rest;
        Some(h)
    }
}

impl std::fmt::Debug for Hostnames<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.clone()).finish()
    }
}

/// The shape of a route's `status.parents` as watched.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParentsLayout {
    /// `status` is an object.
    pub status: bool,
    /// The length of `status.parents` when it is a list.
    pub parents: Option<u32>,
    /// The index in `status.parents` of each `our_status` entry, in the same order.
    pub ours_at: Box<[u32]>,
}

/// A status write that edits `status.parents` in place: remove the entries at `remove_at`,
/// append the new ones; others' entries stay as they are, where they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InPlaceEdit {
    /// The resourceVersion the layout was read at (the edit is tested against it).
    pub resource_version: String,
    pub status: bool,
    pub parents: Option<u32>,
    /// Descending, so earlier removals do not shift later ones.
    pub remove_at: Vec<u32>,
}

impl RouteFacts {
    /// How many `status.parents` entries are not ours for Gateway `gateway`: other
    /// controllers' entries (from the watched layout: its length minus our entries) and our
    /// entries for other Gateways. Both stay when we write ours, so they decide how much room
    /// is left under the API's 32 (SPEC §3.7). Without an exact layout the other controllers'
    /// entries are unknown here and count as none; the write edge then reads the route and
    /// keeps the bound itself.
    pub fn foreign_parents(&self, gateway: (&str, &str)) -> usize {
        let others = if self.flags & HAS_LAYOUT == 0 {
            0
        } else {
            (self.layout_parents().unwrap_or(0) as usize).saturating_sub(self.ours_at().count())
        };
        let ours_elsewhere = self
            .our_status
            .iter()
            .filter(|e| !e.parent_ref.targets(&self.namespace, gateway.0, gateway.1))
            .count();
        others + ours_elsewhere
    }

    /// The in-place edit that replaces our entries for Gateway `gateway` (`None`: read first).
    pub fn in_place_edit(&self, gateway: (&str, &str)) -> Option<InPlaceEdit> {
        if self.flags & HAS_LAYOUT == 0 {
            return None;
        }
        let rv = self.resource_version()?;
        if self.ours_at().count() != self.our_status.len() {
            return None;
        }
        let mut remove_at: Vec<u32> = self
            .our_status
            .iter()
            .zip(self.ours_at())
            .filter(|(e, _)| e.parent_ref.targets(&self.namespace, gateway.0, gateway.1))
            .map(|(_, i)| i)
            .collect();
        remove_at.sort_unstable_by(|a, b| b.cmp(a));
        Some(InPlaceEdit {
            resource_version: rv.into(),
            status: self.flags & LAYOUT_STATUS != 0,
            parents: self.layout_parents(),
            remove_at,
        })
    }
}

/// How the Gateway a TenantGateway renders lists its HTTPS listeners (its `spec.certMode`,
/// SPEC §3.2): what the index knows of a Gateway besides its routes, for the listener-budget
/// warning (SPEC §3.3, §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpsListeners {
    /// http01: one listener per listenable hostname, within the 64-listener cap.
    PerHostname,
    /// dns01, existingSecret: one wildcard listener per apex, whatever the hostnames.
    PerApex,
}

impl HttpsListeners {
    /// From a TenantGateway's `spec.certMode` as written (absent: the CRD's default, http01);
    /// `None` for a value the CRD does not allow.
    pub fn of_cert_mode(cert_mode: Option<&str>) -> Option<HttpsListeners> {
        match cert_mode.unwrap_or("http01") {
            "http01" => Some(HttpsListeners::PerHostname),
            "dns01" | "existingSecret" => Some(HttpsListeners::PerApex),
            _ => None,
        }
    }
}

/// A TLS-passthrough listener a TenantGateway declares (SPEC §3.2): `tls-<svc>` for the
/// hostname `<svc>.<apex>`. What the index knows of an http01 Gateway's passthrough
/// hostnames (an HTTPRoute claiming one gets no listener, SPEC §3.10), and the rule the
/// reconciler renders these listeners by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassthroughListener {
    pub listener: String,
    pub hostname: String,
}

/// `tls-<svc>`, or `None` when `svc` is not a lowercase DNS label (the schema's bound on the
/// entries). A listener name is a Gateway API SectionName (a DNS subdomain of up to 253
/// characters), so `tls-` and any label of up to 63 make one.
pub fn passthrough_listener(svc: &str) -> Option<String> {
    crate::hostname::is_dns_label(svc).then(|| format!("tls-{svc}"))
}

/// The passthrough listeners of a TenantGateway with `spec.apex` `apex` (as written) and
/// `spec.tlsPassthroughServices` `services`: de-duplicated, in spec order, without the entries
/// that make no listener name or no valid hostname. None when the apex is not one.
pub fn passthrough_listeners(apex: &str, services: &[String]) -> Vec<PassthroughListener> {
    let Ok(apex) = crate::hostname::parse_apex(apex) else {
        return Vec::new();
    };
    let mut out: Vec<PassthroughListener> = Vec::new();
    for svc in services {
        let hostname = format!("{svc}.{apex}");
        let Some(listener) = passthrough_listener(svc) else {
            continue;
        };
        if crate::hostname::validate(&hostname).is_ok()
            && !out.iter().any(|p| p.listener == listener)
        {
            out.push(PassthroughListener { listener, hostname });
        }
    }
    out
}

/// The passthrough listeners whose hostnames no HTTPRoute may claim (SPEC §3.10): an http01
/// TenantGateway's (`cert_mode` as written, absent: http01). dns01 and existingSecret
/// Gateways serve such a hostname on their wildcard listener: none.
pub fn http01_passthrough(
    cert_mode: Option<&str>,
    apex: &str,
    services: &[String],
) -> Vec<PassthroughListener> {
    match HttpsListeners::of_cert_mode(cert_mode) {
        Some(HttpsListeners::PerHostname) => passthrough_listeners(apex, services),
        _ => Vec::new(),
    }
}

/// A route's parentRef as written (defaults not applied).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ParentRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
    pub section_name: Option<String>,
    pub port: Option<i32>,
}

impl ParentRef {
    /// True when it points at Gateway `namespace/name` once Gateway API's defaults apply
    /// (group gateway.networking.k8s.io, kind Gateway, namespace = the route's).
    pub fn targets(&self, route_namespace: &str, namespace: &str, name: &str) -> bool {
        self.group.as_deref().unwrap_or(GATEWAY_API_GROUP) == GATEWAY_API_GROUP
            && self.kind.as_deref().unwrap_or("Gateway") == "Gateway"
            && self.namespace.as_deref().unwrap_or(route_namespace) == namespace
            && self.name == name
    }
}

/// A [`ParentRef`] as routes hold it: one shared copy per distinct value (tens of thousands of
/// routes name the same few Gateways and listeners), read through `Deref`; changing one
/// (tests) copies it first.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SharedRef(Arc<ParentRef>);

impl SharedRef {
    pub fn new(p: &ParentRef) -> SharedRef {
        SharedRef(intern_parent_ref(p))
    }
}

impl From<ParentRef> for SharedRef {
    fn from(p: ParentRef) -> SharedRef {
        SharedRef::new(&p)
    }
}

impl Deref for SharedRef {
    type Target = ParentRef;
    fn deref(&self) -> &ParentRef {
        &self.0
    }
}

impl DerefMut for SharedRef {
    fn deref_mut(&mut self) -> &mut ParentRef {
        Arc::make_mut(&mut self.0)
    }
}

impl PartialEq<ParentRef> for SharedRef {
    fn eq(&self, other: &ParentRef) -> bool {
        *self.0 == *other
    }
}

impl std::fmt::Debug for SharedRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One `status.parents` entry under our controllerName.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteParentStatus {
    pub parent_ref: SharedRef,
    pub conditions: Conditions,
}

/// The condition type of our route status entries (SPEC §3.7).
pub const ACCEPTED: &str = "Accepted";

/// The conditions of one of our route status entries.
///
/// The route index keeps one observed entry per route, tens of thousands of them, and the
/// planner reads an observed entry for two things only: is it equal to the entry it wants
/// (compared as a whole), and since when has its Accepted condition had the status it plans
/// (to keep that lastTransitionTime). So an observed entry ([`Conditions::observed`]) keeps a
/// fingerprint of its conditions and those two times, not their text; an entry the planner
/// builds to write ([`Conditions::new`]) keeps the text too (packed, [`KeptJson`]), as the
/// write sends it.
///
/// The fingerprint is a SipHash of the conditions' JSON text (`serde_json`'s, a function of
/// the conditions) under keys drawn once per process: a tenant can write its route's status,
/// and without the keys it cannot make a stale entry look like the wanted one.
#[derive(Clone)]
pub struct Conditions {
    fingerprint: u64,
    /// The lastTransitionTime of the first Accepted condition with status "True" / "False".
    accepted_since: [Since; 2],
    /// The conditions themselves, for an entry to be written (boxed: observed entries, the
    /// many, have none).
    text: Option<Box<KeptJson<Vec<Condition>>>>,
}

impl Conditions {
    /// Conditions to write.
    pub fn new(conditions: &[Condition]) -> Conditions {
        let mut c = Conditions::observed(conditions);
        c.text = Some(Box::new(KeptJson::of_text(Conditions::text_of(conditions))));
        c
    }

    /// Conditions as watched: what the planner compares with and keeps times from, without
    /// their text.
    pub fn observed(conditions: &[Condition]) -> Conditions {
        let since = |status: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == ACCEPTED && c.status == status)
                .map_or(Since::NONE, |c| Since::of(&c.last_transition_time))
        };
        Conditions {
            fingerprint: fingerprint(&Conditions::text_of(conditions)),
            accepted_since: [since("True"), since("False")],
            text: None,
        }
    }

    fn text_of(conditions: &[Condition]) -> String {
        // Cannot fail: a Condition is strings, an integer and a timestamp.
        serde_json::to_string(conditions).unwrap_or_else(|_| "[]".to_string())
    }

    /// The lastTransitionTime of the first Accepted condition whose status is `status`
    /// ("True" for `true`, "False" for `false`).
    pub fn accepted_since(&self, status: bool) -> Option<Time> {
        self.accepted_since[usize::from(!status)].time()
    }

    /// The conditions of an entry to be written; `None` for observed ones (their text is not
    /// kept) and, logged, when the kept text does not decode (only a bug can cause it).
    pub fn written(&self) -> Option<Vec<Condition>> {
        self.text.as_ref()?.get()
    }

    /// The conditions to write ([`Conditions::written`]), none for observed ones.
    pub fn to_vec(&self) -> Vec<Condition> {
        self.written().unwrap_or_default()
    }
}

impl PartialEq for Conditions {
    /// Equal when the conditions are: their fingerprints are (the times kept beside it are a
    /// function of the same conditions).
    fn eq(&self, other: &Conditions) -> bool {
        self.fingerprint == other.fingerprint
    }
}

/// An optional timestamp in 12 bytes (three 4-byte parts: an `i64` would align the pair of
/// them in an entry to 32 bytes), its absence a nanosecond no timestamp has.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Since {
    second_low: u32,
    second_high: i32,
    /// [`Since::ABSENT`] for none.
    nanosecond: i32,
}

impl Since {
    const ABSENT: i32 = i32::MIN;
    const NONE: Since = Since {
        second_low: 0,
        second_high: 0,
        nanosecond: Since::ABSENT,
    };

    fn of(t: &Time) -> Since {
        let second = t.0.as_second();
        Since {
            // The two halves of `second`, put back together by `time`.
            second_low: second as u32,
            second_high: (second >> 32) as i32,
            nanosecond: t.0.subsec_nanosecond(),
        }
    }

    fn time(self) -> Option<Time> {
        if self.nanosecond == Since::ABSENT {
            return None;
        }
        let second = (i64::from(self.second_high) << 32) | i64::from(self.second_low);
        // Cannot fail: the parts are those of a timestamp.
        k8s_openapi::jiff::Timestamp::new(second, self.nanosecond)
            .ok()
            .map(Time)
    }
}

impl std::fmt::Debug for Since {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.time().fmt(f)
    }
}

fn fingerprint(text: &str) -> u64 {
    use std::hash::BuildHasher;
    static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    KEYS.get_or_init(std::collections::hash_map::RandomState::new)
        .hash_one(text)
}

impl Default for Conditions {
    fn default() -> Self {
        Conditions::new(&[])
    }
}

impl From<Vec<Condition>> for Conditions {
    fn from(c: Vec<Condition>) -> Conditions {
        Conditions::new(&c)
    }
}

impl std::fmt::Debug for Conditions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.written() {
            Some(c) => c.fmt(f),
            None => f
                .debug_struct("ObservedConditions")
                .field("fingerprint", &format_args!("{:016x}", self.fingerprint))
                .field("accepted_since", &self.accepted_since)
                .finish(),
        }
    }
}

static PARENT_REFS: Interner<ParentRef> = Interner::new();

/// The shared copy of a parentRef: the 20,000 routes of a large world name a few hundred
/// Gateways and listeners between them.
fn intern_parent_ref(p: &ParentRef) -> Arc<ParentRef> {
    let long = [&p.group, &p.kind, &p.namespace, &p.section_name]
        .into_iter()
        .filter_map(Option::as_deref)
        .chain([p.name.as_str()])
        .any(|s| s.len() > MAX_INTERNED_LEN);
    if long {
        return Arc::new(p.clone());
    }
    PARENT_REFS.shared(p, |p| Arc::new(p.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index holds one `Arc<RouteFacts>` per route: 16 bytes of counts and the facts
    /// must stay within jemalloc's 112-byte size class (the unpacked facts took 192).
    #[test]
    fn facts_fit_their_size_class() {
        let arc_inner = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<RouteFacts>();
        assert!(arc_inner <= 112, "Arc<RouteFacts> takes {arc_inner} bytes");
    }

    /// Values of each field, the edges included: what the API server allows (names and
    /// hostnames up to 253 bytes, 16 hostnames) and what it would not (more, longer, empty,
    /// with the packing's own `:` and digits), as a tenant's objects may reach the index by
    /// other means than a validated write.
    fn field_values() -> FieldValues {
        let t = |s: i64, n: i32| {
            Some(Time(
                k8s_openapi::jiff::Timestamp::new(s, n).expect("a time"),
            ))
        };
        let long = |c: char, n: usize| std::iter::repeat_n(c, n).collect::<String>();
        let entry = |gw: &str, at: i64| RouteParentStatus {
            parent_ref: ParentRef {
                name: gw.to_string(),
                ..ParentRef::default()
            }
            .into(),
            conditions: Conditions::observed(&[cond(ACCEPTED, "True", "Accepted", "", at)]),
        };
        FieldValues {
            names: vec![
                String::new(),
                "r".into(),
                "r1".into(),
                long('n', 253),
                long('x', 70_000),
            ],
            rvs: vec![
                None,
                Some(String::new()),
                Some("7".into()),
                Some("18446744073709551615".into()),
                Some("1,2;3:".into()),
            ],
            hostnames: vec![
                vec![],
                vec!["a.example.org".into()],
                vec![String::new()],
                vec![String::new(), String::new()],
                vec![
                    "3:abc".into(),
                    ":".into(),
                    "12".into(),
                    ";".into(),
                    "1,;2:".into(),
                    "a.example.org".into(),
                ],
                vec![
                    "*.example.org".into(),
                    "a.example.org".into(),
                    "a.example.org".into(),
                ],
                (0..16)
                    .map(|i| format!("{}.{i}.example.org", long('h', 240)))
                    .collect(),
                (0..300).map(|i| format!("h{i}.example.org")).collect(),
                vec![long('h', 70_000)],
            ],
            creations: vec![
                None,
                t(0, 0),
                t(1_764_600_000, 0),
                t(1_764_600_000, 250_000_000),
                t(-1, -999_999_999),
                Some(Time(k8s_openapi::jiff::Timestamp::MIN)),
                Some(Time(k8s_openapi::jiff::Timestamp::MAX)),
            ],
            generations: vec![
                None,
                Some(0),
                Some(1),
                Some(-1),
                Some(i64::MIN),
                Some(i64::MAX),
            ],
            statuses: vec![
                vec![],
                vec![entry("gw", 100)],
                vec![entry("gw", 100), entry("gw2", 200)],
            ],
            layouts: vec![
                None,
                Some(ParentsLayout::default()),
                Some(ParentsLayout {
                    status: true,
                    ..ParentsLayout::default()
                }),
                Some(ParentsLayout {
                    status: true,
                    parents: Some(0),
                    ours_at: Box::default(),
                }),
                Some(ParentsLayout {
                    status: true,
                    parents: Some(1),
                    ours_at: [0].into(),
                }),
                Some(ParentsLayout {
                    status: true,
                    parents: Some(u32::MAX),
                    ours_at: [u32::MAX - 1, 0, 7].into(),
                }),
                // Not one the watch makes (`ours_at` without a list), kept all the same.
                Some(ParentsLayout {
                    status: false,
                    parents: None,
                    ours_at: [3].into(),
                }),
            ],
        }
    }

    struct FieldValues {
        names: Vec<String>,
        rvs: Vec<Option<String>>,
        hostnames: Vec<Vec<String>>,
        creations: Vec<Option<Time>>,
        generations: Vec<Option<i64>>,
        statuses: Vec<Vec<RouteParentStatus>>,
        layouts: Vec<Option<ParentsLayout>>,
    }

    fn random_parts(v: &FieldValues, rng: &mut fastrand::Rng) -> RouteFactsParts {
        fn pick<'a, T>(rng: &mut fastrand::Rng, of: &'a [T]) -> &'a T {
            &of[rng.usize(0..of.len())]
        }
        RouteFactsParts {
            kind: if rng.bool() {
                RouteKind::HttpRoute
            } else {
                RouteKind::TlsRoute
            },
            namespace: pick(rng, &["tenant-a", "", "tenant-b"]).to_string().into(),
            name: pick(rng, &v.names).as_str().into(),
            creation: pick(rng, &v.creations).clone(),
            generation: *pick(rng, &v.generations),
            resource_version: pick(rng, &v.rvs).as_deref().map(Box::from),
            hostnames: pick(rng, &v.hostnames).clone().into(),
            parent_refs: pick(rng, &[vec![], vec!["gw"], vec!["gw", "gw2"]])
                .iter()
                .map(|n| {
                    SharedRef::from(ParentRef {
                        name: n.to_string(),
                        ..ParentRef::default()
                    })
                })
                .collect(),
            our_status: pick(rng, &v.statuses).clone().into(),
            parents_layout: pick(rng, &v.layouts).clone(),
        }
    }

    /// The packed facts restore every field exactly, read the same through each accessor, are
    /// equal exactly when their plain forms are, and each setter makes what packing the
    /// changed plain form makes.
    #[test]
    fn packed_facts_round_trip_every_field_exactly() {
        let v = field_values();
        let mut rng = fastrand::Rng::with_seed(33);
        let cases: Vec<RouteFactsParts> = (0..600).map(|_| random_parts(&v, &mut rng)).collect();
        // Every value of every field at least once, beside random others.
        let mut all = cases.clone();
        let base = &cases[0];
        all.extend(v.names.iter().map(|n| RouteFactsParts {
            name: n.as_str().into(),
            ..base.clone()
        }));
        all.extend(v.rvs.iter().map(|r| RouteFactsParts {
            resource_version: r.as_deref().map(Box::from),
            ..base.clone()
        }));
        all.extend(v.hostnames.iter().map(|h| RouteFactsParts {
            hostnames: h.clone().into(),
            ..base.clone()
        }));
        all.extend(v.creations.iter().map(|c| RouteFactsParts {
            creation: c.clone(),
            ..base.clone()
        }));
        all.extend(v.generations.iter().map(|g| RouteFactsParts {
            generation: *g,
            ..base.clone()
        }));
        all.extend(v.statuses.iter().map(|s| RouteFactsParts {
            our_status: s.clone().into(),
            ..base.clone()
        }));
        all.extend(v.layouts.iter().map(|l| RouteFactsParts {
            parents_layout: l.clone(),
            ..base.clone()
        }));
        let packed: Vec<RouteFacts> = all.iter().cloned().map(RouteFacts::from).collect();
        for (p, f) in all.iter().zip(&packed) {
            assert_eq!(&f.parts(), p);
            assert_eq!(f.name(), &*p.name);
            assert_eq!(f.resource_version(), p.resource_version.as_deref());
            assert_eq!(
                f.hostnames().collect::<Vec<_>>(),
                p.hostnames.iter().map(String::as_str).collect::<Vec<_>>()
            );
            assert_eq!(f.hostnames().is_empty(), p.hostnames.is_empty());
            assert_eq!(f.creation(), p.creation);
            assert_eq!(f.generation(), p.generation);
            assert_eq!(f.parents_layout(), p.parents_layout);
        }
        for (i, (p, f)) in all.iter().zip(&packed).enumerate().step_by(7) {
            for (q, g) in all.iter().zip(&packed) {
                assert_eq!(f == g, p == q, "case {i}: {p:?} against {q:?}");
            }
        }
        for (p, q) in all.iter().zip(all.iter().skip(1)) {
            let mut f = RouteFacts::from(p.clone());
            f.set_name(&q.name);
            f.set_resource_version(q.resource_version.as_deref());
            f.set_hostnames(&q.hostnames);
            f.set_creation(q.creation.clone());
            f.set_generation(q.generation);
            f.set_parents_layout(q.parents_layout.clone());
            let want = RouteFactsParts {
                kind: p.kind,
                namespace: p.namespace.clone(),
                parent_refs: p.parent_refs.clone(),
                our_status: p.our_status.clone(),
                ..q.clone()
            };
            assert_eq!(f, RouteFacts::from(want.clone()));
            assert_eq!(f.parts(), want);
        }
    }

    fn cond(type_: &str, status: &str, reason: &str, message: &str, at: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(2),
            last_transition_time: Time(
                k8s_openapi::jiff::Timestamp::from_second(at).expect("a time"),
            ),
        }
    }

    /// Observed conditions equal written ones exactly when the conditions are equal: every
    /// field, the order and the count count.
    #[test]
    fn observed_conditions_equal_written_ones_exactly_when_the_conditions_do() {
        let base = vec![cond(ACCEPTED, "True", "Accepted", "served", 100)];
        let with = |f: &dyn Fn(&mut Condition)| {
            let mut c = base.clone();
            f(&mut c[0]);
            c
        };
        let two = vec![
            cond(ACCEPTED, "True", "Accepted", "served", 100),
            cond("ResolvedRefs", "True", "ResolvedRefs", "", 100),
        ];
        let swapped = vec![two[1].clone(), two[0].clone()];
        // (what, conditions, equal to `base`)
        let cases: Vec<(&str, Vec<Condition>, bool)> = vec![
            ("the same", base.clone(), true),
            ("none", vec![], false),
            ("type", with(&|c| c.type_ = "Programmed".into()), false),
            ("status", with(&|c| c.status = "False".into()), false),
            (
                "reason",
                with(&|c| c.reason = "NoMatchingParent".into()),
                false,
            ),
            ("message", with(&|c| c.message = "served ".into()), false),
            (
                "generation",
                with(&|c| c.observed_generation = Some(3)),
                false,
            ),
            (
                "no generation",
                with(&|c| c.observed_generation = None),
                false,
            ),
            (
                "time",
                with(&|c| c.last_transition_time = cond("", "", "", "", 101).last_transition_time),
                false,
            ),
            ("one more", two.clone(), false),
            ("duplicated", vec![base[0].clone(), base[0].clone()], false),
        ];
        for (what, c, equal) in &cases {
            let observed = Conditions::observed(c);
            assert_eq!(observed == Conditions::new(&base), *equal, "{what}");
            assert_eq!(Conditions::new(&base) == observed, *equal, "{what}");
            assert!(observed == Conditions::new(c), "{what}: itself");
            assert_eq!(observed.written(), None, "{what}: no text kept");
        }
        assert_ne!(
            Conditions::observed(&two),
            Conditions::observed(&swapped),
            "order"
        );
        assert_eq!(
            Conditions::new(&two).to_vec(),
            two,
            "written conditions read back"
        );
    }

    /// An observed entry keeps the time its Accepted condition has had each status since,
    /// from the first Accepted condition with that status, as a scan of the list finds it.
    #[test]
    fn observed_conditions_keep_the_accepted_transition_times() {
        let at = |s: i64| cond("", "", "", "", s).last_transition_time;
        let c = Conditions::observed(&[
            cond("Programmed", "True", "x", "", 1),
            cond(ACCEPTED, "False", "NoMatchingParent", "", 2),
            cond(ACCEPTED, "True", "Accepted", "", 3),
            cond(ACCEPTED, "True", "Accepted", "", 4),
        ]);
        assert_eq!(c.accepted_since(true), Some(at(3)));
        assert_eq!(c.accepted_since(false), Some(at(2)));
        let c = Conditions::observed(&[
            cond(ACCEPTED, "Unknown", "Pending", "", 5),
            cond("Programmed", "True", "x", "", 6),
        ]);
        assert_eq!(c.accepted_since(true), None);
        assert_eq!(c.accepted_since(false), None);
        assert_eq!(
            Conditions::new(&[cond(ACCEPTED, "True", "Accepted", "", 7)]).accepted_since(true),
            Some(at(7)),
            "written ones too"
        );
        for t in [
            k8s_openapi::jiff::Timestamp::new(1_800_000_000, 250_000_000),
            k8s_openapi::jiff::Timestamp::new(-1, -1),
            k8s_openapi::jiff::Timestamp::new(0, 0),
            k8s_openapi::jiff::Timestamp::new(1 << 32, 1),
            k8s_openapi::jiff::Timestamp::new((1 << 32) - 1, 999_999_999),
            k8s_openapi::jiff::Timestamp::new(-(1 << 32), 0),
            Ok(k8s_openapi::jiff::Timestamp::MIN),
            Ok(k8s_openapi::jiff::Timestamp::MAX),
        ] {
            let t = Time(t.expect("a time"));
            assert_eq!(Since::of(&t).time(), Some(t), "kept exactly");
        }
        assert_eq!(Since::NONE.time(), None);
    }

    /// Each route keeps its status entries in a list of their own: an observed entry is the
    /// parentRef, the fingerprint and the two times, with no room for text it does not keep.
    #[test]
    fn an_observed_status_entry_stays_small() {
        let size = std::mem::size_of::<RouteParentStatus>();
        assert!(size <= 48, "RouteParentStatus takes {size} bytes");
    }

    #[test]
    fn equal_parent_refs_share_one_allocation() {
        let p = |name: &str, section: Option<&str>| ParentRef {
            name: name.to_string(),
            section_name: section.map(str::to_string),
            ..ParentRef::default()
        };
        let a = intern_parent_ref(&p("intern-test-gw", Some("https-a")));
        let b = intern_parent_ref(&p("intern-test-gw", Some("https-a")));
        assert!(Arc::ptr_eq(&a, &b));
        let c = intern_parent_ref(&p("intern-test-gw", Some("https-b")));
        assert!(!Arc::ptr_eq(&a, &c), "another section is another value");
        assert_eq!(c.section_name.as_deref(), Some("https-b"));
        let long = p(&"g".repeat(MAX_INTERNED_LEN + 1), None);
        assert!(!Arc::ptr_eq(
            &intern_parent_ref(&long),
            &intern_parent_ref(&long)
        ));
    }
}
