//! The facts the route index keeps of each HTTPRoute and TLSRoute (SPEC §3.3, §3.4): what
//! the reconciler plans from, what the admission warnings compare against, and what a route
//! status write edits in place. Sized for tens of thousands of routes: parentRefs shared,
//! conditions packed.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::intern::{Interner, MAX_INTERNED_LEN};
use super::kept::KeptJson;
use crate::platform::GATEWAY_API_GROUP;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
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
#[derive(Debug, Clone, PartialEq)]
///
/// Sized for the index: tens of thousands are kept, each in one allocation of jemalloc's
/// 192-byte class (`facts_fit_their_size_class`), with the namespace interned and the name
/// shared with the index's keys, and lists at their length (`Box<[T]>`, no spare capacity).
pub struct RouteFacts {
    pub kind: RouteKind,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
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
        let others = self.parents_layout.as_ref().map_or(0, |l| {
            (l.parents.unwrap_or(0) as usize).saturating_sub(l.ours_at.len())
        });
        let ours_elsewhere = self
            .our_status
            .iter()
            .filter(|e| !e.parent_ref.targets(&self.namespace, gateway.0, gateway.1))
            .count();
        others + ours_elsewhere
    }

    /// The in-place edit that replaces our entries for Gateway `gateway` (`None`: read first).
    pub fn in_place_edit(&self, gateway: (&str, &str)) -> Option<InPlaceEdit> {
        let layout = self.parents_layout.as_ref()?;
        let rv = self.resource_version.clone()?;
        if layout.ours_at.len() != self.our_status.len() {
            return None;
        }
        let mut remove_at: Vec<u32> = self
            .our_status
            .iter()
            .zip(&layout.ours_at)
            .filter(|(e, _)| e.parent_ref.targets(&self.namespace, gateway.0, gateway.1))
            .map(|(_, i)| *i)
            .collect();
        remove_at.sort_unstable_by(|a, b| b.cmp(a));
        Some(InPlaceEdit {
            resource_version: rv.into(),
            status: layout.status,
            parents: layout.parents,
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

/// `tls-<svc>`, or `None` when `svc` cannot make a listener name (a lowercase DNS label whose
/// `tls-` form is still a label).
pub fn passthrough_listener(svc: &str) -> Option<String> {
    let name = format!("tls-{svc}");
    (crate::hostname::is_dns_label(svc) && crate::hostname::is_dns_label(&name)).then_some(name)
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

/// The conditions of one of our route status entries, held as their JSON text with its
/// common fragments packed ([`KeptJson`]): the route index keeps one entry per
/// route, tens of thousands of them, and a decoded condition is ~250 bytes of struct and
/// small strings where its packed text is about half that. Read by decoding
/// ([`Conditions::to_vec`]); equal exactly when the conditions are (the text is a function of
/// them).
#[derive(Clone, PartialEq)]
pub struct Conditions(KeptJson<Vec<Condition>>);

impl Conditions {
    pub fn new(conditions: &[Condition]) -> Conditions {
        Conditions(KeptJson::of_text(
            // Cannot fail: a Condition is strings, an integer and a timestamp.
            serde_json::to_string(conditions).unwrap_or_else(|_| "[]".to_string()),
        ))
    }

    /// The conditions; none when the kept text does not decode (logged; only a bug can cause
    /// it, and the entry is then rewritten as any changed entry is).
    pub fn to_vec(&self) -> Vec<Condition> {
        self.0.get().unwrap_or_default()
    }
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
        self.to_vec().fmt(f)
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
    /// must stay within jemalloc's 192-byte size class (they took a 256-byte one before).
    #[test]
    fn facts_fit_their_size_class() {
        let arc_inner = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<RouteFacts>();
        assert!(arc_inner <= 192, "Arc<RouteFacts> takes {arc_inner} bytes");
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
