//! Plain data gathered from the caches for one reconcile of one TenantGateway. Nothing past
//! this point sees `kube::Api`: the edge projects watch objects into these types, and every
//! decision (`plan`) is a function of them.
//!
//! The edge hands over only what is relevant to this TenantGateway: its namespace, the
//! namespaces its attachedNamespaces list, those labelled to publish through it, and those
//! carrying our attached-by annotation for it; the routes that reference its Gateway or carry
//! our status entry for it; the objects of the owned kinds in its namespace that are owned by
//! it or share a name with one it renders.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use gateway_api::apis::experimental::gateways::Gateway;
use gateway_api::apis::experimental::httproutes::HttpRoute;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::api::{
    CertMode, Dns01, Dns01Provider, IssuerName, TenantGatewaySpec, TenantGatewayStatus,
};
use super::certmanager::{Certificate, Issuer};
use crate::platform::{self, GATEWAY_API_GROUP, Scope};

/// Everything one reconcile reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    pub tgw: TgwFacts,
    /// Other TenantGateways in the same namespace (one per namespace, SPEC §3.7).
    pub siblings: Vec<Sibling>,
    /// Other TenantGateways' attach lists (the no-stealing rule of SPEC §3.5).
    pub other_claims: Vec<AttachClaim>,
    /// Its own namespace, its attachedNamespaces, the namespaces publishing through it and
    /// those we attached for it: a superset of the namespaces whose routes attach, so their
    /// host labels are also the claimant apexes of the conflict rule (SPEC §3.3).
    pub namespaces: Vec<NamespaceFacts>,
    pub routes: Vec<RouteFacts>,
    pub observed: Observed,
    /// The clock, for the lastTransitionTime of a condition that changes.
    pub now: Time,
}

/// The TenantGateway itself.
#[derive(Debug, Clone, PartialEq)]
pub struct TgwFacts {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: Option<i64>,
    pub creation: Option<Time>,
    pub spec: TenantGatewaySpec,
    pub status: Option<TenantGatewayStatus>,
}

/// Another TenantGateway in the same namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sibling {
    pub name: String,
    pub creation: Option<Time>,
}

/// Another TenantGateway's claim on namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachClaim {
    pub namespace: String,
    pub name: String,
    /// Its `spec.apex` as written (compared by length, SPEC §3.5).
    pub apex: String,
    pub attached_namespaces: Vec<String>,
}

/// A namespace's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamespaceFacts {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl NamespaceFacts {
    /// Its apex label, when present and non-empty.
    pub fn apex(&self) -> Option<&str> {
        platform::apex_label(&self.labels)
    }

    /// The namespace whose Gateway it publishes through.
    pub fn gateway(&self) -> Option<&str> {
        self.labels.get(platform::GATEWAY_LABEL).map(String::as_str)
    }

    /// The TenantGateway namespace that wrote its gateway label, if we did.
    pub fn attached_by(&self) -> Option<&str> {
        self.annotations
            .get(platform::ATTACHED_BY_ANNOTATION)
            .map(String::as_str)
    }
}

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
        SharedRef(crate::cluster::intern::intern_parent_ref(p))
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
/// common fragments packed (`cluster::watch::KeptJson`): the route index keeps one entry per
/// route, tens of thousands of them, and a decoded condition is ~250 bytes of struct and
/// small strings where its packed text is about half that. Read by decoding
/// ([`Conditions::to_vec`]); equal exactly when the conditions are (the text is a function of
/// them).
#[derive(Clone, PartialEq)]
pub struct Conditions(crate::cluster::watch::KeptJson<Vec<Condition>>);

impl Conditions {
    pub fn new(conditions: &[Condition]) -> Conditions {
        Conditions(crate::cluster::watch::KeptJson::of_text(
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

/// Objects of the owned kinds found in the TenantGateway's namespace.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observed {
    pub gateways: Vec<Gateway>,
    pub issuers: Vec<Issuer>,
    pub certificates: Vec<Certificate>,
    pub http_routes: Vec<HttpRoute>,
}

/// The TenantGateway spec once checked (SPEC §3.1 cross-field rules, re-checked at reconcile
/// time): what rendering may rely on.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Lowercased, valid, not a wildcard.
    pub apex: String,
    pub mode: ModeSettings,
    pub issuer: IssuerName,
    pub gateway_class: String,
    /// Usable attachedNamespaces entries, de-duplicated, spec order.
    pub attached: Vec<String>,
    /// `(service, listener name)` per usable tlsPassthroughServices entry, de-duplicated,
    /// spec order.
    pub passthrough: Vec<(String, String)>,
    /// Entries skipped, one sentence each (reported, never fatal).
    pub skipped: Vec<String>,
}

/// Where certificates come from.
#[derive(Debug, Clone, PartialEq)]
pub enum ModeSettings {
    Http01,
    Dns01(Box<Dns01>),
    ExistingSecret { secret: String },
}

impl ModeSettings {
    pub fn cert_mode(&self) -> CertMode {
        match self {
            ModeSettings::Http01 => CertMode::Http01,
            ModeSettings::Dns01(_) => CertMode::Dns01,
            ModeSettings::ExistingSecret { .. } => CertMode::ExistingSecret,
        }
    }
}

impl TgwFacts {
    /// Check the spec. `Err` lists every problem that makes rendering impossible (the status
    /// says what is wrong and nothing is rendered or deleted); problems with single list
    /// entries only skip those entries.
    pub fn settings(&self, scope: &platform::Scope) -> Result<Settings, Vec<String>> {
        let spec = &self.spec;
        let mut fatal = Vec::new();
        let apex = match crate::hostname::parse_apex(&spec.apex) {
            Ok(a) => a,
            Err(e) => {
                fatal.push(format!("spec.apex: {e}"));
                String::new()
            }
        };
        if spec.gateway_class_name.trim().is_empty() {
            fatal.push("spec.gatewayClassName is empty; name the GatewayClass to use".into());
        }
        let mode = match spec.cert_mode {
            CertMode::Http01 => Some(ModeSettings::Http01),
            CertMode::Dns01 => match &spec.dns01 {
                None => {
                    fatal.push("certMode dns01 requires the dns01 block".into());
                    None
                }
                Some(d) => {
                    let (provider, present) = match d.provider {
                        Dns01Provider::Cloudflare => ("cloudflare", d.cloudflare.is_some()),
                        Dns01Provider::Route53 => ("route53", d.route53.is_some()),
                        Dns01Provider::Digitalocean => ("digitalocean", d.digitalocean.is_some()),
                        Dns01Provider::Rfc2136 => ("rfc2136", d.rfc2136.is_some()),
                    };
                    if !present {
                        fatal.push(format!(
                            "dns01.provider {provider} requires the dns01.{provider} block"
                        ));
                        None
                    } else if d
                        .route53
                        .as_ref()
                        .is_some_and(|r| r.region.trim().is_empty())
                        && d.provider == Dns01Provider::Route53
                    {
                        fatal.push("dns01.route53.region must not be empty".into());
                        None
                    } else {
                        Some(ModeSettings::Dns01(Box::new(d.clone())))
                    }
                }
            },
            CertMode::ExistingSecret => match spec.wildcard_secret_ref.as_ref() {
                Some(r) if !r.name.trim().is_empty() => Some(ModeSettings::ExistingSecret {
                    secret: r.name.clone(),
                }),
                _ => {
                    fatal.push("certMode existingSecret requires wildcardSecretRef.name".into());
                    None
                }
            },
        };
        // The schema's list bounds (SPEC §3.1) again: an object stored before the CRD carried
        // them, or written with the schema bypassed, must not make a reconcile plan past what
        // the schema allows. Too long is fatal (which entries to drop would be a guess); a
        // single malformed entry only skips that entry, as below.
        if spec.attached_namespaces.len() > super::api::MAX_ATTACHED_NAMESPACES {
            fatal.push(format!(
                "spec.attachedNamespaces has {} entries; at most {} are allowed",
                spec.attached_namespaces.len(),
                super::api::MAX_ATTACHED_NAMESPACES
            ));
        }
        if spec.tls_passthrough_services.len() > super::api::MAX_PASSTHROUGH_SERVICES {
            fatal.push(format!(
                "spec.tlsPassthroughServices has {} entries; at most {} are allowed",
                spec.tls_passthrough_services.len(),
                super::api::MAX_PASSTHROUGH_SERVICES
            ));
        }
        let mut skipped = Vec::new();
        let mut attached: Vec<String> = Vec::new();
        for ns in &spec.attached_namespaces {
            if !super::names::is_dns_label(ns) {
                skipped.push(format!(
                    "attachedNamespaces entry {ns:?} is not a namespace name; skipped"
                ));
            } else if scope.is_tenant(ns) {
                skipped.push(format!(
                    "attachedNamespaces entry {ns:?} is a tenant namespace; tenants join a \
                     Gateway with tenant.spec.gateway=true, never through this list; skipped"
                ));
            } else if ns != &self.namespace && !attached.contains(ns) {
                attached.push(ns.clone());
            }
        }
        let mut passthrough: Vec<(String, String)> = Vec::new();
        for svc in &spec.tls_passthrough_services {
            let listener = super::names::passthrough_listener(svc);
            let host_ok = crate::hostname::validate(&format!("{svc}.{apex}")).is_ok();
            match listener {
                Some(l) if host_ok || apex.is_empty() => {
                    if !passthrough.iter().any(|(s, _)| s == svc) {
                        passthrough.push((svc.clone(), l));
                    }
                }
                _ => skipped.push(format!(
                    "tlsPassthroughServices entry {svc:?} does not make a listener name \
                     tls-<svc> and hostname <svc>.<apex> (a lowercase DNS label is needed); \
                     skipped"
                )),
            }
        }
        match mode {
            Some(mode) if fatal.is_empty() => Ok(Settings {
                apex,
                mode,
                issuer: spec.issuer_name,
                gateway_class: spec.gateway_class_name.clone(),
                attached,
                passthrough,
                skipped,
            }),
            _ => Err(fatal),
        }
    }
}

/// Why a TenantGateway in `namespace` (whose host label is `label`) may not use the lowercased
/// `apex`, or `None` when it may. Pure, shared by the plan and by the claim filter of the edge.
pub fn apex_problem(
    namespace: &str,
    label: Option<&str>,
    apex: &str,
    scope: &Scope,
) -> Option<String> {
    if !scope.is_tenant(namespace) {
        return None;
    }
    match label {
        Some(l) if l.eq_ignore_ascii_case(apex) => None,
        Some(l) => Some(format!(
            "spec.apex {apex} is not this namespace's apex (its {} label is {l}); in a tenant \
             namespace spec.apex must equal it: set spec.apex to {l}",
            platform::HOST_LABEL
        )),
        None => Some(format!(
            "namespace {namespace} has no {} label; the webhook denies Gateways in tenant \
             namespaces without one (retry once the namespace is labelled)",
            platform::HOST_LABEL
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index holds one `Arc<RouteFacts>` per route: 16 bytes of counts and the facts
    /// must stay within jemalloc's 192-byte size class (they took a 256-byte one before).
    #[test]
    fn list_bounds_are_checked_again() {
        use crate::reconcile::testing;
        let base = testing::world().tgw;
        let names = |n: usize, p: &str| (0..n).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
        // (attachedNamespaces, tlsPassthroughServices, expected fatal fragment)
        let cases: [(usize, usize, Option<&str>); 4] = [
            (128, 16, None),
            (
                129,
                0,
                Some("spec.attachedNamespaces has 129 entries; at most 128"),
            ),
            (
                0,
                17,
                Some("spec.tlsPassthroughServices has 17 entries; at most 16"),
            ),
            (0, 0, None),
        ];
        for (a, t, want) in cases {
            let mut f = base.clone();
            f.spec.attached_namespaces = names(a, "cozy-n");
            f.spec.tls_passthrough_services = names(t, "svc");
            let got = f.settings(&Default::default());
            match want {
                None => assert!(got.is_ok(), "{a}/{t}: {got:?}"),
                Some(w) => {
                    let e = got.expect_err("over the bound");
                    assert!(e.iter().any(|m| m.contains(w)), "{a}/{t}: {e:?}");
                }
            }
        }
    }

    #[test]
    fn facts_fit_their_size_class() {
        let arc_inner = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<RouteFacts>();
        assert!(arc_inner <= 192, "Arc<RouteFacts> takes {arc_inner} bytes");
    }
}
