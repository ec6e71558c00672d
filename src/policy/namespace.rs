//! Layer 5 — Namespace guarded labels and annotations (SPEC §2.3).
//!
//! The host, gateway and ingress labels are what every other layer, the reconciler and the
//! replicator trust (the last two decide from them who receives the platform's wildcard
//! private key), and the attached-by annotation is how the reconciler knows which
//! attachments it made. So any write to a guarded key — first write, change, removal, even of
//! an empty value — is reserved to trusted platform automation. All other labels and
//! annotations stay free for everyone.

use serde_json::{Map, Value};

use super::util::{as_object, as_str, get, quoted, side_root, trusted_groups};
use super::{Findings, LayerResult, PolicyConfig, Review, ShapeError, object_ref};

/// The two metadata maps layer 5 guards: (metadata field, word in messages).
const MAPS: [(&str, &str); 2] = [("labels", "label"), ("annotations", "annotation")];

pub fn evaluate(review: &Review<'_>, cfg: &PolicyConfig) -> LayerResult {
    let mut changes = Vec::new();
    for ((field, word), guarded) in MAPS
        .iter()
        .zip([&cfg.guarded_labels, &cfg.guarded_annotations])
    {
        let new = map(review, Some(review.object), field, "")?;
        // A missing old object (CREATE, or an UPDATE the codec could not pair) reads as "no
        // labels": every guarded key present then counts as a first write, which fails closed.
        let old = map(review, review.old_object, field, "oldObject.")?;
        for (i, key) in guarded.iter().enumerate() {
            // A key listed twice in the configuration is still one problem.
            if guarded[..i].contains(key) {
                continue;
            }
            let before = value(review, old, field, key, "oldObject.")?;
            let after = value(review, new, field, key, "")?;
            if before != after {
                changes.push((*word, key, before, after));
            }
        }
    }
    if changes.is_empty() || cfg.is_trusted(review.groups) {
        return Ok(Findings::ok());
    }

    let mut findings = Findings::ok();
    for (word, key, before, after) in changes {
        let change = match (before, after) {
            (None, Some(v)) => format!("set it to {} (it was absent)", quoted(v)),
            (Some(v), None) => format!("remove it (it was {})", quoted(v)),
            (Some(a), Some(b)) => format!("change it from {} to {}", quoted(a), quoted(b)),
            (None, None) => continue,
        };
        findings.violations.push(format!(
            "{} {}: {word} {key} is immutable once set and can only be written by trusted \
             platform automation ({}); this request by {} would {change}",
            review.kind,
            object_ref(review),
            trusted_groups(cfg),
            quoted(review.username),
        ));
    }
    Ok(findings)
}

/// `metadata.<field>` of `object`; `None` when the object, metadata or the map are absent.
fn map<'a>(
    review: &Review<'_>,
    object: Option<&'a Value>,
    field: &str,
    prefix: &str,
) -> Result<Option<&'a Map<String, Value>>, ShapeError> {
    let Some(object) = object else {
        return Ok(None);
    };
    let object = side_root(review, object, prefix)?;
    let metadata = as_object(review, get(object, "metadata"), || {
        format!("{prefix}metadata")
    })?;
    as_object(review, get(metadata, field), || {
        format!("{prefix}metadata.{field}")
    })
}

/// One key's value; only guarded keys are read, so only their type is judged.
fn value<'a>(
    review: &Review<'_>,
    map: Option<&'a Map<String, Value>>,
    field: &str,
    key: &str,
    prefix: &str,
) -> Result<Option<&'a str>, ShapeError> {
    as_str(review, get(map, key), || {
        format!("{prefix}metadata.{field}[{key:?}]")
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::util::testing::{assert_mentions, cfg, groups};
    use super::super::{
        ATTACHED_BY_ANNOTATION, GATEWAY_LABEL, HOST_LABEL, INGRESS_LABEL, Operation,
    };
    use super::*;

    fn ns(labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "tenant-alice", "labels": labels}})
    }

    fn run_as(
        old: Option<&Value>,
        new: &Value,
        username: &str,
        g: &[std::borrow::Cow<'_, str>],
    ) -> LayerResult {
        let r = Review {
            operation: if old.is_some() {
                Operation::Update
            } else {
                Operation::Create
            },
            kind: "Namespace",
            namespace: "",
            name: "tenant-alice",
            object: new,
            old_object: old,
            username,
            groups: g,
        };
        evaluate(&r, &cfg())
    }

    fn run(old: Option<&Value>, new: &Value, g: &[std::borrow::Cow<'_, str>]) -> LayerResult {
        run_as(old, new, "someone", g)
    }

    #[test]
    fn guarded_label_writes_need_trust() {
        let untrusted = groups(&["system:authenticated"]);
        // (old labels or CREATE, new labels, violations for an untrusted caller)
        let cases: Vec<(Option<Value>, Value, usize)> = vec![
            // CREATE
            (None, json!({"team": "a"}), 0),
            (None, json!(null), 0),
            (None, json!({HOST_LABEL: "alice.example.org"}), 1),
            (None, json!({HOST_LABEL: ""}), 1),
            (
                None,
                json!({HOST_LABEL: "a", GATEWAY_LABEL: "tenant-root"}),
                2,
            ),
            // UPDATE: unchanged guarded labels, other labels edited freely.
            (
                Some(ns(json!({HOST_LABEL: "a.example.org", "x": "1"}))),
                ns(json!({HOST_LABEL: "a.example.org", "x": "2", "y": "3"})),
                0,
            ),
            (
                Some(ns(json!({HOST_LABEL: ""}))),
                ns(json!({HOST_LABEL: ""})),
                0,
            ),
            (Some(json!({})), json!({"metadata": {}}), 0),
            // first write on UPDATE
            (
                Some(ns(json!({"x": "1"}))),
                ns(json!({"x": "1", HOST_LABEL: "evil.example.org"})),
                1,
            ),
            (Some(ns(json!(null))), ns(json!({GATEWAY_LABEL: ""})), 1),
            // change
            (
                Some(ns(json!({HOST_LABEL: "a.example.org"}))),
                ns(json!({HOST_LABEL: "b.example.org"})),
                1,
            ),
            (
                Some(ns(json!({HOST_LABEL: "a.example.org"}))),
                ns(json!({HOST_LABEL: "A.example.org"})),
                1,
            ),
            (
                Some(ns(json!({HOST_LABEL: "a"}))),
                ns(json!({HOST_LABEL: ""})),
                1,
            ),
            (
                Some(ns(json!({GATEWAY_LABEL: "tenant-root"}))),
                ns(json!({GATEWAY_LABEL: "tenant-bob"})),
                1,
            ),
            // removal, including of an empty value and of the whole labels map
            (Some(ns(json!({HOST_LABEL: "a"}))), ns(json!({"x": "1"})), 1),
            (Some(ns(json!({HOST_LABEL: ""}))), ns(json!({})), 1),
            (
                Some(ns(json!({HOST_LABEL: "a", GATEWAY_LABEL: "b"}))),
                json!({"metadata": {"name": "x"}}),
                2,
            ),
            (Some(ns(json!({HOST_LABEL: null}))), ns(json!({})), 0),
        ];
        for (old, new, want) in cases {
            let new = if new.get("metadata").is_some() || new == json!({}) {
                new
            } else {
                ns(new)
            };
            let f = run(old.as_ref(), &new, &untrusted).expect("well-formed");
            assert_eq!(f.violations.len(), want, "{old:?} -> {new}: {f:?}");
            let f = run(old.as_ref(), &new, &[]).expect("well-formed");
            assert_eq!(f.violations.len(), want, "no groups: {old:?} -> {new}");
            for g in super::super::DEFAULT_TRUSTED_GROUPS {
                let f = run(old.as_ref(), &new, &groups(&["x", g])).expect("well-formed");
                assert!(f.violations.is_empty(), "{g}: {old:?} -> {new}");
            }
        }
    }

    #[test]
    fn username_never_grants_trust() {
        let new = ns(json!({HOST_LABEL: "alice.example.org"}));
        for user in [
            "system:admin",
            "system:masters",
            "system:serviceaccount:cozy-system:cozystack",
        ] {
            let f = run_as(None, &new, user, &[]).expect("ok");
            assert_eq!(f.violations.len(), 1, "{user}");
        }
    }

    #[test]
    fn message_names_label_values_and_groups() {
        let old = ns(json!({HOST_LABEL: "alice.example.org"}));
        let new = ns(json!({HOST_LABEL: "dashboard.example.org"}));
        let f = run(Some(&old), &new, &[]).expect("ok");
        assert_mentions(
            &f.violations[0],
            &[
                "Namespace tenant-alice",
                "label namespace.cozystack.io/host is immutable once set",
                "\"alice.example.org\"",
                "\"dashboard.example.org\"",
                "system:masters",
            ],
        );
        let f = run(Some(&old), &ns(json!({})), &[]).expect("ok");
        assert_mentions(&f.violations[0], &["remove", "\"alice.example.org\""]);
        let f = run(None, &old, &[]).expect("ok");
        assert_mentions(&f.violations[0], &["absent", "\"alice.example.org\""]);
        // Host before gateway: configuration order.
        let f = run(None, &ns(json!({GATEWAY_LABEL: "g", HOST_LABEL: "h"})), &[]).expect("ok");
        assert!(f.violations[0].contains(HOST_LABEL) && f.violations[1].contains(GATEWAY_LABEL));
    }

    #[test]
    fn configured_guarded_labels() {
        let c = PolicyConfig {
            guarded_labels: vec![
                "example.com/owner".to_string(),
                "example.com/owner".to_string(),
            ],
            ..cfg()
        };
        let obj = ns(json!({HOST_LABEL: "x", "example.com/owner": "me"}));
        let r = Review {
            operation: Operation::Create,
            kind: "Namespace",
            namespace: "",
            name: "tenant-alice",
            object: &obj,
            old_object: None,
            username: "u",
            groups: &[],
        };
        let f = evaluate(&r, &c).expect("ok");
        assert_eq!(f.violations.len(), 1);
        assert!(f.violations[0].contains("example.com/owner"));
    }

    #[test]
    fn wrong_shapes_are_shape_errors() {
        let trusted = groups(&["system:masters"]);
        let cases: Vec<(Option<Value>, Value, &str)> = vec![
            (None, ns(json!([])), "metadata.labels"),
            (None, ns(json!("a=b")), "metadata.labels"),
            (None, json!({"metadata": 1}), "metadata"),
            (
                None,
                ns(json!({HOST_LABEL: 1})),
                "metadata.labels[\"namespace.cozystack.io/host\"]",
            ),
            (
                None,
                ns(json!({GATEWAY_LABEL: {}})),
                "metadata.labels[\"namespace.cozystack.io/gateway\"]",
            ),
            (
                Some(ns(json!({HOST_LABEL: true}))),
                ns(json!({})),
                "oldObject.metadata.labels[\"namespace.cozystack.io/host\"]",
            ),
            (
                Some(json!({"metadata": {"labels": 3}})),
                ns(json!({})),
                "oldObject.metadata.labels",
            ),
        ];
        for (old, new, field) in cases {
            let err = run(old.as_ref(), &new, &trusted).expect_err("shape");
            assert_eq!(err.field, field);
            assert_eq!(err.object, "tenant-alice");
        }
        // Other labels are not read, so their type is not judged here.
        let f = run(None, &ns(json!({"x": 1})), &[]).expect("lenient");
        assert!(f.violations.is_empty());
    }

    fn ns_with(labels: Value, annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "tenant-alice", "labels": labels,
                            "annotations": annotations}})
    }

    /// Issue 20 items 4 and 5: the ingress label (the replicator copies the wildcard key to a
    /// namespace whose ingress label names itself) and the attached-by annotation (a forged one
    /// made the reconciler remove a platform-written gateway label) are guarded by default.
    #[test]
    fn ingress_label_and_attached_by_annotation_are_guarded() {
        let untrusted = groups(&["system:authenticated"]);
        // (old, new, violations for an untrusted caller)
        let cases: Vec<(Option<Value>, Value, usize)> = vec![
            (
                None,
                ns_with(json!({INGRESS_LABEL: "tenant-alice"}), json!(null)),
                1,
            ),
            (
                None,
                ns_with(json!(null), json!({ATTACHED_BY_ANNOTATION: "tenant-root"})),
                1,
            ),
            (
                None,
                ns_with(json!(null), json!({ATTACHED_BY_ANNOTATION: ""})),
                1,
            ),
            (
                Some(ns_with(json!({"x": "1"}), json!({"note": "a"}))),
                ns_with(
                    json!({"x": "1", INGRESS_LABEL: "tenant-alice"}),
                    json!({"note": "b"}),
                ),
                1,
            ),
            // The attacker's patch of issue 20 item 5: a forged mark on another's namespace.
            (
                Some(ns_with(json!({GATEWAY_LABEL: "tenant-root"}), json!(null))),
                ns_with(
                    json!({GATEWAY_LABEL: "tenant-root"}),
                    json!({ATTACHED_BY_ANNOTATION: "tenant-root"}),
                ),
                1,
            ),
            (
                Some(ns_with(
                    json!(null),
                    json!({ATTACHED_BY_ANNOTATION: "tenant-root"}),
                )),
                ns_with(json!(null), json!({ATTACHED_BY_ANNOTATION: "tenant-alice"})),
                1,
            ),
            (
                Some(ns_with(
                    json!(null),
                    json!({ATTACHED_BY_ANNOTATION: "tenant-root"}),
                )),
                ns_with(json!(null), json!({})),
                1,
            ),
            // Label and annotation at once: two problems.
            (
                None,
                ns_with(
                    json!({INGRESS_LABEL: "tenant-alice"}),
                    json!({ATTACHED_BY_ANNOTATION: "tenant-alice"}),
                ),
                2,
            ),
            // A guarded label key used as an annotation is not guarded, nor the reverse.
            (
                None,
                ns_with(
                    json!({ATTACHED_BY_ANNOTATION: "x"}),
                    json!({INGRESS_LABEL: "x"}),
                ),
                0,
            ),
            // The platform controller's mark, which the reconciler reads as its own (SPEC
            // §3.8): guarded the same way, both at once are two problems.
            (
                Some(ns_with(json!({GATEWAY_LABEL: "tenant-root"}), json!(null))),
                ns_with(
                    json!({GATEWAY_LABEL: "tenant-root"}),
                    json!({crate::platform::PLATFORM_ATTACHED_BY_ANNOTATION: "tenant-root"}),
                ),
                1,
            ),
            (
                None,
                ns_with(
                    json!(null),
                    json!({ATTACHED_BY_ANNOTATION: "a",
                           crate::platform::PLATFORM_ATTACHED_BY_ANNOTATION: "a"}),
                ),
                2,
            ),
            // Other annotations are free; an unchanged mark passes.
            (
                Some(ns_with(
                    json!(null),
                    json!({ATTACHED_BY_ANNOTATION: "tenant-root"}),
                )),
                ns_with(
                    json!({"team": "a"}),
                    json!({ATTACHED_BY_ANNOTATION: "tenant-root", "note": "x"}),
                ),
                0,
            ),
        ];
        for (old, new, want) in cases {
            let f = run(old.as_ref(), &new, &untrusted).expect("well-formed");
            assert_eq!(f.violations.len(), want, "{old:?} -> {new}: {f:?}");
            let f = run(old.as_ref(), &new, &groups(&["system:masters"])).expect("well-formed");
            assert!(f.violations.is_empty(), "trusted: {old:?} -> {new}");
        }
        let f = run(
            None,
            &ns_with(json!(null), json!({ATTACHED_BY_ANNOTATION: "tenant-root"})),
            &untrusted,
        )
        .expect("ok");
        assert_mentions(
            &f.violations[0],
            &[
                "annotation gateway.cozystack.io/attached-by is immutable once set",
                "\"tenant-root\"",
            ],
        );
        let f = run(
            None,
            &ns_with(json!({INGRESS_LABEL: "tenant-alice"}), json!(null)),
            &untrusted,
        )
        .expect("ok");
        assert_mentions(
            &f.violations[0],
            &["label namespace.cozystack.io/ingress is immutable"],
        );
    }

    #[test]
    fn configured_guarded_annotations_replace_the_default() {
        let c = PolicyConfig {
            guarded_annotations: vec!["example.com/owner".to_string()],
            ..cfg()
        };
        let obj = ns_with(
            json!(null),
            json!({ATTACHED_BY_ANNOTATION: "x", "example.com/owner": "me"}),
        );
        let r = Review {
            operation: Operation::Create,
            kind: "Namespace",
            namespace: "",
            name: "tenant-alice",
            object: &obj,
            old_object: None,
            username: "u",
            groups: &[],
        };
        let f = evaluate(&r, &c).expect("ok");
        assert_eq!(f.violations.len(), 1, "{f:?}");
        assert!(f.violations[0].contains("example.com/owner"));
        let bad = ns_with(json!(null), json!({"example.com/owner": 1}));
        let err = evaluate(&Review { object: &bad, ..r }, &c).expect_err("shape");
        assert_eq!(err.field, "metadata.annotations[\"example.com/owner\"]");
    }
}
