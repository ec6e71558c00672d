//! Desired vs observed owned objects → the writes (SPEC §3.7).
//!
//! An object is applied only when it is missing or differs from the desired one in what we
//! manage (spec, our label, our ownerReference), or another field manager still owns fields
//! we manage (SPEC §3.7 "Exactly the desired state": the apply takes them over first), so an
//! unchanged world yields no write. Owned = carries a controller ownerReference to this
//! TenantGateway's uid, as the platform's controller defines it (SPEC §3.7, §3.8): the
//! managed-by label is ours to write, not the proof. An owned object is deleted when it is no
//! longer desired; a same-named object we do not own is never written: it is reported
//! instead.

use std::collections::BTreeSet;

use gateway_api::apis::experimental::gateways::Gateway;
use gateway_api::apis::experimental::httproutes::HttpRoute;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::api::TenantGatewayStatus;
use super::certmanager::{Certificate, Issuer};
use super::inputs::{InPlaceEdit, Observed, RouteKind, RouteParentStatus, TgwFacts};
use super::labels::NamespaceWrite;
use super::render::{Desired, owner_reference};
use crate::cluster::managed_fields;
use crate::platform::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, TGW_KIND};

/// The owned kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    Issuer,
    Certificate,
    Gateway,
    HttpRoute,
}

impl ObjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Issuer => "Issuer",
            ObjectKind::Certificate => "Certificate",
            ObjectKind::Gateway => "Gateway",
            ObjectKind::HttpRoute => "HTTPRoute",
        }
    }
}

/// One rendered object.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Issuer(Box<Issuer>),
    Certificate(Box<Certificate>),
    Gateway(Box<Gateway>),
    HttpRoute(Box<HttpRoute>),
}

impl Object {
    pub fn kind(&self) -> ObjectKind {
        match self {
            Object::Issuer(_) => ObjectKind::Issuer,
            Object::Certificate(_) => ObjectKind::Certificate,
            Object::Gateway(_) => ObjectKind::Gateway,
            Object::HttpRoute(_) => ObjectKind::HttpRoute,
        }
    }

    pub fn meta(&self) -> &ObjectMeta {
        match self {
            Object::Issuer(o) => &o.metadata,
            Object::Certificate(o) => &o.metadata,
            Object::Gateway(o) => &o.metadata,
            Object::HttpRoute(o) => &o.metadata,
        }
    }

    pub fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }
}

/// Replace our entries for one Gateway in a route's `status.parents`.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteStatusWrite {
    pub kind: RouteKind,
    pub namespace: String,
    pub name: String,
    /// The resourceVersion read: the write is conditional on it.
    pub resource_version: Option<String>,
    /// The Gateway whose entries (under our controllerName) are replaced.
    pub gateway_namespace: String,
    pub gateway_name: String,
    /// The new entries; empty removes ours.
    pub entries: Vec<RouteParentStatus>,
    /// The same change as an edit of the watched `status.parents` (one request instead of a
    /// read and a write); `None`: read the route first.
    pub in_place: Option<InPlaceEdit>,
}

/// One write the edge performs.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Server-side apply with the field manager.
    Apply(Object),
    /// Delete, with the uid as precondition.
    Delete {
        kind: ObjectKind,
        name: String,
        uid: Option<String>,
    },
    Namespace(NamespaceWrite),
    RouteStatus(RouteStatusWrite),
    /// The TenantGateway's status subresource.
    Status(TenantGatewayStatus),
}

/// A same-named object we render but may not write.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Refused {
    pub kind: ObjectKind,
    pub name: String,
}

/// True when `meta` carries a controller ownerReference to this TenantGateway (its uid;
/// uids are never reused, so the name does not matter). Labels and field managers do not
/// count: the platform's controller leaves its objects with its own labels and manager.
pub fn owned(meta: &ObjectMeta, tgw: &TgwFacts) -> bool {
    meta.owner_references.as_ref().is_some_and(|refs| {
        refs.iter()
            .any(|r| r.controller == Some(true) && r.uid == tgw.uid && r.kind == TGW_KIND)
    })
}

/// Our label and ownerReference present as rendered, and no other field manager holding
/// fields we manage. The ownerReference compares whole: one the platform wrote for the same
/// uid but differing in a field is rewritten once by the apply, then equal.
fn meta_current(observed: &ObjectMeta, tgw: &TgwFacts) -> bool {
    let ours = owner_reference(tgw);
    observed
        .owner_references
        .as_ref()
        .is_some_and(|refs| refs.contains(&ours))
        && observed
            .labels
            .as_ref()
            .and_then(|l| l.get(MANAGED_BY_LABEL))
            .is_some_and(|v| v == MANAGED_BY_VALUE)
        && !managed_fields::foreign_owned(observed.managed_fields.as_deref().unwrap_or_default())
}

struct Diff<'a> {
    tgw: &'a TgwFacts,
    writes: Vec<Write>,
    refused: Vec<Refused>,
}

impl Diff<'_> {
    fn one<T: PartialEq>(
        &mut self,
        kind: ObjectKind,
        want: Object,
        want_spec: &T,
        observed: Option<(&ObjectMeta, &T)>,
    ) {
        match observed {
            None => self.writes.push(Write::Apply(want)),
            Some((meta, _)) if !owned(meta, self.tgw) => self.refused.push(Refused {
                kind,
                name: want.name().to_string(),
            }),
            Some((meta, spec)) if spec == want_spec && meta_current(meta, self.tgw) => {}
            Some(_) => self.writes.push(Write::Apply(want)),
        }
    }

    fn prune<'m>(
        &mut self,
        kind: ObjectKind,
        observed: impl Iterator<Item = &'m ObjectMeta>,
        desired: &BTreeSet<&str>,
    ) {
        for meta in observed {
            let name = meta.name.as_deref().unwrap_or_default();
            if !desired.contains(name) && owned(meta, self.tgw) && meta.deletion_timestamp.is_none()
            {
                self.writes.push(Write::Delete {
                    kind,
                    name: name.to_string(),
                    uid: meta.uid.clone(),
                });
            }
        }
    }
}

/// The object writes: applies in dependency order (Issuer, Certificates, Gateway, redirect),
/// then deletes.
pub fn objects(
    desired: &Desired,
    observed: &Observed,
    tgw: &TgwFacts,
) -> (Vec<Write>, Vec<Refused>) {
    let mut d = Diff {
        tgw,
        writes: Vec::new(),
        refused: Vec::new(),
    };
    let named = |m: &ObjectMeta, n: &Option<String>| m.name == *n;

    if let Some(want) = &desired.issuer {
        let found = observed
            .issuers
            .iter()
            .find(|o| named(&o.metadata, &want.metadata.name))
            .map(|o| (&o.metadata, &o.spec));
        d.one(
            ObjectKind::Issuer,
            Object::Issuer(Box::new(want.clone())),
            &want.spec,
            found,
        );
    }
    for want in &desired.certificates {
        let found = observed
            .certificates
            .iter()
            .find(|o| named(&o.metadata, &want.metadata.name))
            .map(|o| (&o.metadata, &o.spec));
        d.one(
            ObjectKind::Certificate,
            Object::Certificate(Box::new(want.clone())),
            &want.spec,
            found,
        );
    }
    // The second Gateway of SPEC §3.10's `separate` layout, when rendered, after the first.
    for want in std::iter::once(&desired.gateway).chain(&desired.passthrough_gateway) {
        let found = observed
            .gateways
            .iter()
            .find(|o| named(&o.metadata, &want.metadata.name))
            .map(|o| (&o.metadata, &o.spec));
        d.one(
            ObjectKind::Gateway,
            Object::Gateway(Box::new(want.clone())),
            &want.spec,
            found,
        );
    }
    let want = &desired.redirect;
    let found = observed
        .http_routes
        .iter()
        .find(|o| named(&o.metadata, &want.metadata.name))
        .map(|o| (&o.metadata, &o.spec));
    d.one(
        ObjectKind::HttpRoute,
        Object::HttpRoute(Box::new(want.clone())),
        &want.spec,
        found,
    );

    fn name_set<'a>(names: impl Iterator<Item = &'a Option<String>>) -> BTreeSet<&'a str> {
        names.filter_map(|n| n.as_deref()).collect()
    }
    let issuers = name_set(desired.issuer.iter().map(|i| &i.metadata.name));
    let certs = name_set(desired.certificates.iter().map(|c| &c.metadata.name));
    let gws = name_set(
        std::iter::once(&desired.gateway)
            .chain(&desired.passthrough_gateway)
            .map(|g| &g.metadata.name),
    );
    let routes = name_set(std::iter::once(&desired.redirect.metadata.name));
    d.prune(
        ObjectKind::Issuer,
        observed.issuers.iter().map(|o| &o.metadata),
        &issuers,
    );
    d.prune(
        ObjectKind::Certificate,
        observed.certificates.iter().map(|o| &o.metadata),
        &certs,
    );
    d.prune(
        ObjectKind::Gateway,
        observed.gateways.iter().map(|o| &o.metadata),
        &gws,
    );
    d.prune(
        ObjectKind::HttpRoute,
        observed.http_routes.iter().map(|o| &o.metadata),
        &routes,
    );
    d.refused.sort();
    // Deletes in a fixed order whatever order the cache listed them in.
    let first_delete = d
        .writes
        .iter()
        .position(|w| matches!(w, Write::Delete { .. }))
        .unwrap_or(d.writes.len());
    d.writes[first_delete..].sort_by(|a, b| match (a, b) {
        (
            Write::Delete {
                kind: ka, name: na, ..
            },
            Write::Delete {
                kind: kb, name: nb, ..
            },
        ) => (ka, na).cmp(&(kb, nb)),
        _ => std::cmp::Ordering::Equal,
    });
    (d.writes, d.refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::Options;
    use crate::reconcile::render::{ListenerInputs, render};
    use crate::reconcile::testing;

    fn desired(w: &crate::reconcile::inputs::Inputs) -> Desired {
        let s = w.tgw.settings(&Default::default()).expect("valid");
        let li = ListenerInputs {
            port443_namespaces: ["tenant-alice".to_string()].into(),
            hosts: ["a.alice.example.org".to_string()].into(),
            child_apexes: Default::default(),
            sticky: Default::default(),
        };
        render(&w.tgw, &s, &li, &Options::default())
    }

    fn observed_from(d: &Desired) -> Observed {
        Observed {
            gateways: vec![d.gateway.clone()],
            issuers: d.issuer.iter().cloned().collect(),
            certificates: d.certificates.clone(),
            http_routes: vec![d.redirect.clone()],
        }
    }

    fn kinds(writes: &[Write]) -> Vec<String> {
        writes
            .iter()
            .map(|w| match w {
                Write::Apply(o) => format!("apply {} {}", o.kind().as_str(), o.name()),
                Write::Delete { kind, name, .. } => format!("delete {} {name}", kind.as_str()),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn missing_objects_are_applied_in_order() {
        let w = testing::world();
        let (writes, refused) = objects(&desired(&w), &Observed::default(), &w.tgw);
        assert_eq!(
            kinds(&writes),
            [
                "apply Issuer gw-gateway",
                "apply Certificate gw-a-tls",
                "apply Gateway gw",
                "apply HTTPRoute gw-http-redirect"
            ]
        );
        assert!(refused.is_empty());
    }

    #[test]
    fn equal_objects_give_no_write_and_changes_do() {
        let w = testing::world();
        let d = desired(&w);
        let mut obs = observed_from(&d);
        assert!(objects(&d, &obs, &w.tgw).0.is_empty());
        // Status and server fields do not matter.
        obs.gateways[0].metadata.resource_version = Some("42".into());
        obs.gateways[0].metadata.uid = Some("u".into());
        assert!(objects(&d, &obs, &w.tgw).0.is_empty());
        // A listener edited by hand is put back.
        obs.gateways[0].spec.listeners[1].port = 8443;
        assert_eq!(kinds(&objects(&d, &obs, &w.tgw).0), ["apply Gateway gw"]);
    }

    #[test]
    fn deletes_only_owned_leftovers() {
        let w = testing::world();
        let d = desired(&w);
        let mut obs = observed_from(&d);
        let mut stale = d.certificates[0].clone();
        stale.metadata.name = Some("gw-old-tls".into());
        stale.metadata.uid = Some("uid-old".into());
        obs.certificates.push(stale.clone());
        // Owner reference with the platform's labels instead of ours: ours to delete too.
        let mut platform = stale.clone();
        platform.metadata.name = Some("gw-old-1a2b3c4d-tls".into());
        platform.metadata.uid = Some("uid-platform".into());
        platform.metadata.labels = Some(
            [
                ("cozystack.io/managed-by", "cozystack-controller"),
                ("cozystack.io/per-listener-cert", "true"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
        );
        obs.certificates.push(platform);
        // Another owner.
        let mut other = stale.clone();
        other.metadata.name = Some("other-tls".into());
        if let Some(refs) = other.metadata.owner_references.as_mut() {
            refs[0].uid = "uid-other".into();
        }
        obs.certificates.push(other);
        // Being deleted already.
        let mut going = stale.clone();
        going.metadata.name = Some("gw-going-tls".into());
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1).expect("a time"),
            ));
        obs.certificates.push(going);
        let (writes, _) = objects(&d, &obs, &w.tgw);
        assert_eq!(
            writes,
            vec![
                Write::Delete {
                    kind: ObjectKind::Certificate,
                    name: "gw-old-1a2b3c4d-tls".into(),
                    uid: Some("uid-platform".into())
                },
                Write::Delete {
                    kind: ObjectKind::Certificate,
                    name: "gw-old-tls".into(),
                    uid: Some("uid-old".into())
                }
            ]
        );
    }

    #[test]
    fn same_named_foreign_object_is_refused() {
        let w = testing::world();
        let d = desired(&w);
        let mut obs = observed_from(&d);
        obs.gateways[0].metadata.owner_references = None;
        obs.gateways[0].spec.listeners.clear();
        let (writes, refused) = objects(&d, &obs, &w.tgw);
        assert!(writes.is_empty(), "{writes:?}");
        assert_eq!(
            refused,
            vec![Refused {
                kind: ObjectKind::Gateway,
                name: "gw".into()
            }]
        );
    }

    /// Issue 22 item 3 (SPEC §3.7): owned means a controller ownerReference to this
    /// TenantGateway's uid, whatever the labels say; an owned object is written (taken over
    /// when the labels are not ours yet), anything else refused.
    #[test]
    fn ownership_is_the_controller_reference_to_our_uid() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let w = testing::world();
        let d = desired(&w);
        let ours = owner_reference(&w.tgw);
        let label = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<std::collections::BTreeMap<_, _>>(),
            )
        };
        let with = |refs: Vec<OwnerReference>| refs;
        // (case, labels, ownerReferences, owned)
        let cases = [
            (
                "ours with our label",
                label(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)]),
                with(vec![ours.clone()]),
                true,
            ),
            ("ours without a label", None, with(vec![ours.clone()]), true),
            (
                "ours with the platform's labels",
                label(&[
                    ("cozystack.io/managed-by", "cozystack-controller"),
                    ("cozystack.io/gateway", "tenant-alice"),
                ]),
                with(vec![ours.clone()]),
                true,
            ),
            (
                "ours among others",
                None,
                with(vec![
                    OwnerReference {
                        controller: None,
                        uid: "u-cm".into(),
                        kind: "ConfigMap".into(),
                        ..ours.clone()
                    },
                    ours.clone(),
                ]),
                true,
            ),
            (
                "the platform's reference without blockOwnerDeletion, our label",
                label(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)]),
                with(vec![OwnerReference {
                    block_owner_deletion: None,
                    ..ours.clone()
                }]),
                true,
            ),
            (
                "another controller, our label",
                label(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)]),
                with(vec![OwnerReference {
                    uid: "u-other-controller".into(),
                    kind: "Deployment".into(),
                    ..ours.clone()
                }]),
                false,
            ),
            (
                "a non-controller reference to us",
                label(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)]),
                with(vec![OwnerReference {
                    controller: Some(false),
                    ..ours.clone()
                }]),
                false,
            ),
            (
                "controller unset",
                None,
                with(vec![OwnerReference {
                    controller: None,
                    ..ours.clone()
                }]),
                false,
            ),
            (
                "another TenantGateway of the same name",
                label(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)]),
                with(vec![OwnerReference {
                    uid: "uid-of-a-deleted-one".into(),
                    ..ours.clone()
                }]),
                false,
            ),
            (
                "our uid under another kind",
                None,
                with(vec![OwnerReference {
                    kind: "ConfigMap".into(),
                    ..ours.clone()
                }]),
                false,
            ),
            (
                "no reference, our label",
                label(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)]),
                vec![],
                false,
            ),
        ];
        for (case, labels, refs, want) in cases {
            let mut obs = observed_from(&d);
            let g = &mut obs.gateways[0];
            g.metadata.labels = labels;
            g.metadata.owner_references = Some(refs);
            g.metadata.uid = Some("uid-gw".into());
            assert_eq!(owned(&g.metadata, &w.tgw), want, "{case}");
            let (writes, refused) = objects(&d, &obs, &w.tgw);
            if want {
                assert!(refused.is_empty(), "{case}: {refused:?}");
                let current = kinds(&writes).is_empty();
                assert_eq!(current, case == "ours with our label", "{case}: {writes:?}");
            } else {
                assert!(writes.is_empty(), "{case}: {writes:?}");
                assert_eq!(
                    refused,
                    vec![Refused {
                        kind: ObjectKind::Gateway,
                        name: "gw".into()
                    }],
                    "{case}"
                );
            }
        }
    }

    /// SPEC §3.7 "Exactly the desired state": an owned object equal to the desired one but
    /// with fields another manager owns is applied (the apply takes them over), once: the
    /// adopted object gives no write.
    #[test]
    fn fields_of_another_manager_make_an_equal_object_written() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let w = testing::world();
        let d = desired(&w);
        let mut obs = observed_from(&d);
        let entry = |manager: &str, op: &str, f: serde_json::Value| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(op.into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(f)),
            ..Default::default()
        };
        obs.issuers[0].metadata.managed_fields = Some(vec![
            entry("tenant-gateway", "Apply", serde_json::json!({"f:spec": {}})),
            entry(
                "cozystack-controller",
                "Update",
                serde_json::json!({"f:spec": {"f:acme": {}}}),
            ),
        ]);
        assert_eq!(
            kinds(&objects(&d, &obs, &w.tgw).0),
            ["apply Issuer gw-gateway"]
        );
        obs.issuers[0].metadata.managed_fields = Some(vec![
            entry(
                "tenant-gateway",
                "Apply",
                serde_json::json!({"f:spec": {"f:acme": {}}}),
            ),
            entry(
                "cert-manager",
                "Update",
                serde_json::json!({"f:metadata": {"f:annotations": {}}}),
            ),
        ]);
        assert!(objects(&d, &obs, &w.tgw).0.is_empty());
        // A kept object brings the fact back as its stand-in entry.
        obs.issuers[0].metadata.managed_fields = Some(vec![managed_fields::stand_in()]);
        assert_eq!(
            kinds(&objects(&d, &obs, &w.tgw).0),
            ["apply Issuer gw-gateway"]
        );
    }
}
