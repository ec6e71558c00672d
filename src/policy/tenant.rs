//! Layer 4 — Tenant apex (SPEC §2.3).
//!
//! `spec.host` is the one user-supplied field that becomes a security boundary: the tenant
//! chart copies it into the namespace host label, which every hostname layer trusts. So only
//! trusted platform automation may set, change or clear it.

use super::util::{as_object, as_str, get, quoted, side_root, trusted_groups};
use super::{Findings, LayerResult, PolicyConfig, Review, object_ref};

pub fn evaluate(review: &Review<'_>, cfg: &PolicyConfig) -> LayerResult {
    let new = host(review, Some(review.object), "")?;
    // No old object (CREATE) reads as "no host": creating a Tenant with a host is a first
    // write and needs trust like any other change.
    let old = host(review, review.old_object, "oldObject.")?;
    // Exact comparison: a case change still rewrites the namespace label, so it counts.
    if old == new || cfg.is_trusted(review.groups) {
        return Ok(Findings::ok());
    }
    let change = match (old.is_empty(), new.is_empty()) {
        (true, _) => format!("set it to {}", quoted(new)),
        (false, true) => format!("clear it (it is {})", quoted(old)),
        (false, false) => format!("change it from {} to {}", quoted(old), quoted(new)),
    };
    Ok(Findings::deny(format!(
        "{} {}: spec.host can only be set or changed by trusted platform automation ({}); \
         this request by {} would {change}. The host becomes the tenant's apex domain, so ask a \
         platform operator to change it",
        review.kind,
        object_ref(review),
        trusted_groups(cfg),
        quoted(review.username),
    )))
}

/// `spec.host` of `object`, `""` when the object, its spec or the host is absent.
fn host<'a>(
    review: &Review<'_>,
    object: Option<&'a serde_json::Value>,
    prefix: &str,
) -> Result<&'a str, super::ShapeError> {
    let Some(object) = object else {
        return Ok("");
    };
    let object = side_root(review, object, prefix)?;
    let spec = as_object(review, get(object, "spec"), || format!("{prefix}spec"))?;
    let host = as_str(review, get(spec, "host"), || format!("{prefix}spec.host"))?;
    Ok(host.unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::Operation;
    use super::super::util::testing::{assert_mentions, cfg, groups};
    use super::*;

    fn tenant(host: Value) -> Value {
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Tenant",
               "metadata": {"name": "alice", "namespace": "tenant-root"},
               "spec": {"host": host, "gateway": true}})
    }

    fn run(old: Option<&Value>, new: &Value, g: &[std::borrow::Cow<'_, str>]) -> LayerResult {
        let r = Review {
            operation: if old.is_some() {
                Operation::Update
            } else {
                Operation::Create
            },
            kind: "Tenant",
            namespace: "tenant-root",
            name: "alice",
            object: new,
            old_object: old,
            username: "system:admin",
            groups: g,
        };
        evaluate(&r, &cfg())
    }

    #[test]
    fn host_changes_need_trust() {
        let untrusted = groups(&["system:authenticated", "tenant-alice-admins"]);
        let trusted = groups(&["system:authenticated", "system:serviceaccounts:cozy-fluxcd"]);
        let none = groups(&[]);
        // (old object, new object, denied for untrusted)
        let cases: Vec<(Option<Value>, Value, bool)> = vec![
            // CREATE
            (None, tenant(json!(null)), false),
            (None, tenant(json!("")), false),
            (None, json!({"metadata": {"name": "alice"}}), false),
            (None, json!({"spec": null}), false),
            (None, tenant(json!("alice.example.org")), true),
            // UPDATE
            (
                Some(tenant(json!("a.example.org"))),
                tenant(json!("a.example.org")),
                false,
            ),
            (Some(json!({})), json!({"spec": {}}), false),
            (Some(tenant(json!(null))), tenant(json!("")), false),
            (
                Some(json!({})),
                tenant(json!("dashboard.example.org")),
                true,
            ),
            (
                Some(tenant(json!("a.example.org"))),
                tenant(json!("b.example.org")),
                true,
            ),
            (
                Some(tenant(json!("a.example.org"))),
                tenant(json!("")),
                true,
            ),
            (
                Some(tenant(json!("a.example.org"))),
                json!({"metadata": {}}),
                true,
            ),
            (
                Some(tenant(json!("a.example.org"))),
                tenant(json!("A.example.org")),
                true,
            ),
        ];
        for (old, new, denied) in cases {
            let f = run(old.as_ref(), &new, &untrusted).expect("well-formed");
            assert_eq!(!f.violations.is_empty(), denied, "{old:?} -> {new}");
            let f = run(old.as_ref(), &new, &none).expect("well-formed");
            assert_eq!(
                !f.violations.is_empty(),
                denied,
                "no groups: {old:?} -> {new}"
            );
            let f = run(old.as_ref(), &new, &trusted).expect("well-formed");
            assert!(f.violations.is_empty(), "trusted: {old:?} -> {new}");
        }
    }

    #[test]
    fn every_default_trusted_group_may_change_it() {
        for g in super::super::DEFAULT_TRUSTED_GROUPS {
            let f = run(
                Some(&tenant(json!("a.example.org"))),
                &tenant(json!("b.example.org")),
                &groups(&[g]),
            );
            assert_eq!(f, Ok(Findings::ok()), "{g}");
        }
        // Near misses are not trusted: exact group names only.
        for g in [
            "system:master",
            "system:serviceaccounts:cozy-system:x",
            "System:Masters",
            "system:serviceaccounts",
        ] {
            let f = run(None, &tenant(json!("b.example.org")), &groups(&[g])).expect("ok");
            assert_eq!(f.violations.len(), 1, "{g}");
        }
    }

    #[test]
    fn message_names_values_and_trusted_groups() {
        let f = run(
            Some(&tenant(json!("alice.example.org"))),
            &tenant(json!("dashboard.example.org")),
            &[],
        )
        .expect("ok");
        assert_mentions(
            &f.violations[0],
            &[
                "Tenant tenant-root/alice",
                "spec.host can only be set or changed by",
                "system:masters",
                "system:serviceaccounts:cozy-fluxcd",
                "\"alice.example.org\"",
                "\"dashboard.example.org\"",
            ],
        );
        let f = run(
            Some(&tenant(json!("alice.example.org"))),
            &tenant(json!(null)),
            &[],
        )
        .expect("ok");
        assert_mentions(&f.violations[0], &["clear", "\"alice.example.org\""]);
    }

    #[test]
    fn configured_trusted_groups() {
        let c = PolicyConfig {
            trusted_groups: vec!["platform-admins".to_string()],
            ..cfg()
        };
        let obj = tenant(json!("x.example.org"));
        let g = groups(&["platform-admins"]);
        let r = Review {
            operation: Operation::Create,
            kind: "Tenant",
            namespace: "tenant-root",
            name: "alice",
            object: &obj,
            old_object: None,
            username: "bob",
            groups: &g,
        };
        assert_eq!(evaluate(&r, &c), Ok(Findings::ok()));
        let g = groups(&["system:masters"]);
        let f = evaluate(&Review { groups: &g, ..r }, &c).expect("ok");
        assert_mentions(&f.violations[0], &["platform-admins"]);
    }

    #[test]
    fn wrong_shapes_are_shape_errors() {
        let cases: Vec<(Option<Value>, Value, &str)> = vec![
            (None, tenant(json!(5)), "spec.host"),
            (None, tenant(json!(["a"])), "spec.host"),
            (None, json!({"spec": "x"}), "spec"),
            (None, json!([]), "object"),
            (
                Some(tenant(json!(true))),
                tenant(json!("a")),
                "oldObject.spec.host",
            ),
            (
                Some(json!({"spec": 1})),
                tenant(json!("a")),
                "oldObject.spec",
            ),
        ];
        for (old, new, field) in cases {
            let err = run(old.as_ref(), &new, &groups(&["system:masters"])).expect_err("shape");
            assert_eq!(err.field, field);
            assert_eq!(err.object, "tenant-root/alice");
        }
    }
}
