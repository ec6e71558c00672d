//! Who owns the fields of an owned object, as its `metadata.managedFields` records them
//! (SPEC §3.7 "Exactly the desired state", §3.8). Pure functions over the entries.
//!
//! Server-side apply removes a field the applier stops applying only when the applier owned
//! it and nobody else does. Fields another manager wrote (the platform's controller with plain
//! creates and updates, `kubectl edit`) survive our apply: a listener it rendered, the
//! `matchLabels` of its port-443 selectors beside our `matchExpressions`, its labels. The
//! object then never equals what we render, and the Gateway API's own validation can refuse
//! two listeners for one hostname. So, for an object the TenantGateway owns (controller
//! ownerReference), the fields we manage are first moved into our own `Apply` entry
//! ([`adopt`], written back with one JSON patch conditional on the resourceVersion), and the
//! apply that follows prunes what we no longer apply: what kubectl does when it upgrades
//! client-side to server-side apply.
//!
//! What "the fields we manage" are: everything under `spec`, our managed-by label, the
//! platform controller's labels ([`PLATFORM_OBJECT_LABELS`], the only other labels we ever
//! remove) and the ownerReference to the TenantGateway. Other labels, annotations and
//! finalizers stay with whoever wrote them; entries of a subresource (`status`) are never
//! touched.
//!
//! [`foreign_owned`] is the test the kept projection (`kept.rs`) records as one flag; a
//! restored object carries that flag back as the single entry [`stand_in`], which
//! [`foreign_owned`] reads like the real ones.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
use serde_json::{Map, Value};

use crate::platform::{FIELD_MANAGER, MANAGED_BY_LABEL, PLATFORM_OBJECT_LABELS};

const APPLY: &str = "Apply";
const FIELDS_V1: &str = "FieldsV1";
const SPEC: &str = "f:spec";
const METADATA: &str = "f:metadata";
const LABELS: &str = "f:labels";
const OWNER_REFERENCES: &str = "f:ownerReferences";
/// A set's own membership (the map or list itself), beside its members.
const ITSELF: &str = ".";
/// The manager named by [`stand_in`].
const STAND_IN_MANAGER: &str = "tenant-gateway/another-manager";

/// The label keys we take over from other managers.
fn adopted_labels() -> impl Iterator<Item = &'static str> {
    std::iter::once(MANAGED_BY_LABEL).chain(PLATFORM_OBJECT_LABELS)
}

/// Our own entry: server-side apply under our field manager.
fn ours(e: &ManagedFieldsEntry) -> bool {
    e.manager.as_deref() == Some(FIELD_MANAGER) && e.operation.as_deref() == Some(APPLY)
}

/// An entry of the object itself, not of a subresource such as `status`.
fn main_resource(e: &ManagedFieldsEntry) -> bool {
    e.subresource.as_deref().is_none_or(str::is_empty)
}

fn fields(e: &ManagedFieldsEntry) -> Option<&Map<String, Value>> {
    e.fields_v1.as_ref().and_then(|f| f.0.as_object())
}

/// True when a manager other than our server-side apply owns a field we manage: any field
/// under `spec`, our managed-by label or a label of the platform's controller. Then the
/// object can hold fields we do not render whatever we apply, and [`adopt`] is due.
pub fn foreign_owned(entries: &[ManagedFieldsEntry]) -> bool {
    entries
        .iter()
        .filter(|e| main_resource(e) && !ours(e))
        .filter_map(fields)
        .any(|f| {
            f.contains_key(SPEC)
                || f.get(METADATA)
                    .and_then(|m| m.get(LABELS))
                    .and_then(Value::as_object)
                    .is_some_and(|l| adopted_labels().any(|k| l.contains_key(&format!("f:{k}"))))
        })
}

/// The one entry a kept object restores when [`foreign_owned`] held for it.
pub fn stand_in() -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(STAND_IN_MANAGER.to_string()),
        operation: Some("Update".to_string()),
        fields_type: Some(FIELDS_V1.to_string()),
        fields_v1: Some(FieldsV1(serde_json::json!({ SPEC: {} }))),
        ..ManagedFieldsEntry::default()
    }
}

/// `entries` with every field we manage moved from the other managers' entries into our
/// `Apply` entry (created, as `api_version`, at `now` when missing). Other managers keep
/// everything else; an entry left with nothing is dropped; subresource entries are kept as
/// they are. `None` when nothing is to move. `owner_uid` is the TenantGateway's uid: the
/// ownerReference to it is ours, others are not.
pub fn adopt(
    entries: &[ManagedFieldsEntry],
    owner_uid: &str,
    api_version: &str,
    now: &Time,
) -> Option<Vec<ManagedFieldsEntry>> {
    let mut taken = Map::new();
    let mut out = Vec::with_capacity(entries.len() + 1);
    let mut ours_at = None;
    for e in entries {
        let foreign = main_resource(e) && !ours(e);
        let Some(mut f) = fields(e).filter(|_| foreign).cloned() else {
            if main_resource(e) && ours(e) && ours_at.is_none() {
                ours_at = Some(out.len());
            }
            out.push(e.clone());
            continue;
        };
        let moved = take_managed(&mut f, owner_uid);
        if moved.is_empty() {
            out.push(e.clone());
            continue;
        }
        merge(&mut taken, moved);
        if !f.is_empty() {
            out.push(ManagedFieldsEntry {
                fields_v1: Some(FieldsV1(Value::Object(f))),
                ..e.clone()
            });
        }
    }
    if taken.is_empty() {
        return None;
    }
    match ours_at.and_then(|i| out.get_mut(i)) {
        Some(e) => {
            let mut f = fields(e).cloned().unwrap_or_default();
            merge(&mut f, taken);
            e.fields_v1 = Some(FieldsV1(Value::Object(f)));
        }
        None => out.push(ManagedFieldsEntry {
            api_version: Some(api_version.to_string()),
            fields_type: Some(FIELDS_V1.to_string()),
            fields_v1: Some(FieldsV1(Value::Object(taken))),
            manager: Some(FIELD_MANAGER.to_string()),
            operation: Some(APPLY.to_string()),
            subresource: None,
            time: Some(now.clone()),
        }),
    }
    Some(out)
}

/// Remove the fields we manage from one entry's set `f`; returns them as a set.
fn take_managed(f: &mut Map<String, Value>, owner_uid: &str) -> Map<String, Value> {
    let mut moved = Map::new();
    if let Some(spec) = f.remove(SPEC) {
        moved.insert(SPEC.to_string(), spec);
    }
    let mut moved_meta = Map::new();
    if let Some(Value::Object(meta)) = f.get_mut(METADATA) {
        let label_keys: Vec<String> = adopted_labels().map(|k| format!("f:{k}")).collect();
        take_members(meta, LABELS, &mut moved_meta, |k| {
            label_keys.iter().any(|l| l == k)
        });
        take_members(meta, OWNER_REFERENCES, &mut moved_meta, |k| {
            owner_key_uid(k).is_some_and(|u| u == owner_uid)
        });
        if meta.is_empty() {
            f.remove(METADATA);
        }
    }
    if !moved_meta.is_empty() {
        moved.insert(METADATA.to_string(), Value::Object(moved_meta));
    }
    moved
}

/// Move the members of `parent[set]` that `pick` selects into `into[set]`; when only the
/// set's own membership is left, it moves too and the set goes.
fn take_members(
    parent: &mut Map<String, Value>,
    set: &str,
    into: &mut Map<String, Value>,
    pick: impl Fn(&str) -> bool,
) {
    let Some(Value::Object(members)) = parent.get_mut(set) else {
        return;
    };
    let picked: Vec<String> = members.keys().filter(|k| pick(k)).cloned().collect();
    if picked.is_empty() {
        return;
    }
    let mut moved = Map::new();
    for k in picked {
        if let Some(v) = members.remove(&k) {
            moved.insert(k, v);
        }
    }
    if members.keys().all(|k| k == ITSELF) {
        if let Some(v) = members.remove(ITSELF) {
            moved.insert(ITSELF.to_string(), v);
        }
        parent.remove(set);
    }
    into.insert(set.to_string(), Value::Object(moved));
}

/// The uid an ownerReference member key names (`k:{"uid":"…"}`).
fn owner_key_uid(key: &str) -> Option<String> {
    let v: Value = serde_json::from_str(key.strip_prefix("k:")?).ok()?;
    v.get("uid")?.as_str().map(str::to_string)
}

/// Union of two field sets (both are trees of objects).
fn merge(into: &mut Map<String, Value>, from: Map<String, Value>) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(Value::Object(a)), Value::Object(b)) => merge(a, b),
            (Some(_), _) => {}
            (None, v) => {
                into.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const UID: &str = "11111111-2222-3333-4444-555555555555";

    fn entry(
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        f: Value,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("gateway.networking.k8s.io/v1".into()),
            fields_type: Some(FIELDS_V1.into()),
            fields_v1: Some(FieldsV1(f)),
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(str::to_string),
            time: None,
        }
    }

    fn owner_key(uid: &str) -> String {
        format!("k:{}", json!({ "uid": uid }))
    }

    /// What the platform's controller leaves on a Gateway it created (the shape the API
    /// server records for a create with `fieldManager=cozystack-controller`).
    fn platform_gateway() -> ManagedFieldsEntry {
        entry(
            "cozystack-controller",
            "Update",
            None,
            json!({
                "f:metadata": {
                    "f:labels": {".": {}, "f:cozystack.io/gateway": {},
                                 "f:cozystack.io/managed-by": {}},
                    "f:ownerReferences": {".": {}, owner_key(UID): {}}
                },
                "f:spec": {".": {}, "f:gatewayClassName": {}, "f:listeners": {".": {},
                    "k:{\"name\":\"https-foo-abcd1234\"}": {".": {}, "f:name": {}}}}
            }),
        )
    }

    #[test]
    fn foreign_owned_names_managers_that_hold_fields_we_manage() {
        let labels = |keys: &[&str]| {
            let m: Map<String, Value> =
                keys.iter().map(|k| (format!("f:{k}"), json!({}))).collect();
            json!({"f:metadata": {"f:labels": m}})
        };
        let spec = json!({"f:spec": {"f:listeners": {}}});
        // (case, entries, foreign)
        let cases: Vec<(&str, Vec<ManagedFieldsEntry>, bool)> = vec![
            ("no entries", vec![], false),
            (
                "our apply owns spec",
                vec![entry(FIELD_MANAGER, "Apply", None, spec.clone())],
                false,
            ),
            (
                "our manager with a plain update",
                vec![entry(FIELD_MANAGER, "Update", None, spec.clone())],
                true,
            ),
            ("the platform's create", vec![platform_gateway()], true),
            (
                "kubectl edit of spec",
                vec![entry("kubectl-edit", "Update", None, spec.clone())],
                true,
            ),
            (
                "another manager's apply of spec",
                vec![entry("helm", "Apply", None, spec.clone())],
                true,
            ),
            (
                "a label of someone else",
                vec![entry("kubectl-label", "Update", None, labels(&["team"]))],
                false,
            ),
            (
                "the platform's label alone",
                vec![entry(
                    "x",
                    "Update",
                    None,
                    labels(&["cozystack.io/per-listener-cert"]),
                )],
                true,
            ),
            (
                "our label by another manager",
                vec![entry("x", "Update", None, labels(&[MANAGED_BY_LABEL]))],
                true,
            ),
            (
                "status subresource",
                vec![entry(
                    "cilium",
                    "Update",
                    Some("status"),
                    json!({"f:status": {}}),
                )],
                false,
            ),
            (
                "only the ownerReference",
                vec![entry(
                    "x",
                    "Update",
                    None,
                    json!({"f:metadata": {"f:ownerReferences": {".": {}, owner_key(UID): {}}}}),
                )],
                false,
            ),
            (
                "annotations and finalizers",
                vec![entry(
                    "x",
                    "Update",
                    None,
                    json!({"f:metadata": {"f:annotations": {"f:a": {}}, "f:finalizers": {}}}),
                )],
                false,
            ),
            ("the kept stand-in", vec![stand_in()], true),
            (
                "no field set",
                vec![ManagedFieldsEntry {
                    manager: Some("x".into()),
                    ..Default::default()
                }],
                false,
            ),
        ];
        for (case, entries, want) in cases {
            assert_eq!(foreign_owned(&entries), want, "{case}");
        }
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).expect("a time"))
    }

    fn set(e: &ManagedFieldsEntry) -> Value {
        e.fields_v1.as_ref().expect("fields").0.clone()
    }

    #[test]
    fn adopt_moves_what_we_manage_into_our_apply_entry() {
        let someone = entry(
            "someone",
            "Update",
            None,
            json!({"f:metadata": {"f:labels": {"f:keep": {}}}}),
        );
        let cilium = entry(
            "cilium",
            "Update",
            Some("status"),
            json!({"f:status": {"f:conditions": {}}}),
        );
        let entries = vec![platform_gateway(), someone.clone(), cilium.clone()];
        let out = adopt(&entries, UID, "gateway.networking.k8s.io/v1", &now()).expect("moves");
        assert_eq!(out.len(), 3, "the platform's entry is gone: {out:#?}");
        assert_eq!(out[0], someone, "other managers' labels stay theirs");
        assert_eq!(out[1], cilium, "subresource entries are untouched");
        let ours = &out[2];
        assert_eq!(
            (
                ours.manager.as_deref(),
                ours.operation.as_deref(),
                ours.api_version.as_deref()
            ),
            (
                Some(FIELD_MANAGER),
                Some(APPLY),
                Some("gateway.networking.k8s.io/v1")
            )
        );
        assert_eq!(ours.time, Some(now()));
        assert_eq!(
            set(ours),
            set(&platform_gateway()),
            "everything it held was ours to take"
        );
        assert!(!foreign_owned(&out));
        assert_eq!(adopt(&out, UID, "v", &now()), None, "nothing left to move");
    }

    #[test]
    fn adopt_leaves_what_is_not_ours() {
        let other = "99999999-2222-3333-4444-555555555555";
        let mixed = entry(
            "cozystack-controller",
            "Update",
            None,
            json!({
                "f:metadata": {
                    "f:labels": {".": {}, "f:cozystack.io/managed-by": {}, "f:team": {}},
                    "f:annotations": {".": {}, "f:note": {}},
                    "f:ownerReferences": {".": {}, owner_key(UID): {}, owner_key(other): {}}
                },
                "f:spec": {"f:dnsNames": {}}
            }),
        );
        let existing = entry(
            FIELD_MANAGER,
            "Apply",
            None,
            json!({
                "f:metadata": {"f:labels": {"f:app.kubernetes.io/managed-by": {}}},
                "f:spec": {"f:secretName": {}}
            }),
        );
        let out = adopt(&[existing, mixed], UID, "v", &now()).expect("moves");
        assert_eq!(out.len(), 2, "{out:#?}");
        assert_eq!(
            set(&out[0]),
            json!({
                "f:metadata": {
                    "f:labels": {"f:app.kubernetes.io/managed-by": {}, "f:cozystack.io/managed-by": {}},
                    "f:ownerReferences": {owner_key(UID): {}}
                },
                "f:spec": {"f:secretName": {}, "f:dnsNames": {}}
            }),
            "merged into the entry we had"
        );
        assert_eq!(out[0].time, None, "an existing entry keeps its time");
        assert_eq!(
            set(&out[1]),
            json!({"f:metadata": {
                "f:labels": {".": {}, "f:team": {}},
                "f:annotations": {".": {}, "f:note": {}},
                "f:ownerReferences": {".": {}, owner_key(other): {}}
            }}),
            "its other label, annotation and the other owner stay with it"
        );
        assert!(!foreign_owned(&out));
    }

    #[test]
    fn nothing_to_move_is_none() {
        let entries = vec![
            entry(FIELD_MANAGER, "Apply", None, json!({"f:spec": {"f:a": {}}})),
            entry(
                "kubectl-label",
                "Update",
                None,
                json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
            ),
            entry(
                "cert-manager",
                "Update",
                Some("status"),
                json!({"f:status": {}}),
            ),
        ];
        assert_eq!(adopt(&entries, UID, "v", &now()), None);
        assert_eq!(adopt(&[], UID, "v", &now()), None);
    }

    #[test]
    fn owner_keys_are_read_as_json() {
        assert_eq!(owner_key_uid(&owner_key(UID)).as_deref(), Some(UID));
        assert_eq!(owner_key_uid("k:{\"uid\": \"u\"}").as_deref(), Some("u"));
        assert_eq!(owner_key_uid("f:uid"), None);
        assert_eq!(owner_key_uid("k:not json"), None);
        assert_eq!(owner_key_uid("k:{\"name\":\"u\"}"), None);
    }
}
