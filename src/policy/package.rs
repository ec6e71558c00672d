//! Layer 3 — Package attached namespaces (SPEC §2.3).
//!
//! The platform Package's `gateway.attachedNamespaces` lets namespaces attach routes to the
//! platform Gateway. A tenant namespace there could publish under the platform apex, so tenant
//! entries are refused; tenants get their own Gateway with `tenant.spec.gateway=true` instead.
//! This guards administrators against a mistaken `kubectl edit`; no caller is exempt.

use serde_json::Value;

use super::util::{Violations, namespace_name_problem, quoted, shape_error};
use super::{Findings, LayerResult, PolicyConfig, Review, object_ref};

/// Where the Package keeps the namespaces attached to the platform Gateway (also the field
/// the admission projection keeps for this layer).
pub const PATH: [&str; 6] = [
    "spec",
    "components",
    "platform",
    "values",
    "gateway",
    "attachedNamespaces",
];
const FIELD: &str = "spec.components.platform.values.gateway.attachedNamespaces";

pub fn evaluate(review: &Review<'_>, cfg: &PolicyConfig) -> LayerResult {
    // Walk the path; stop at the first missing step. A step that exists but is not an object
    // is treated as "path absent" too: it cannot hold the list, so nothing attaches through
    // it, and `values` is free-form Helm input whose shape is not ours to police (Helm rejects
    // a non-map `values` itself). Only the list itself is judged for type.
    let mut current = review.object;
    for key in PATH {
        match current.get(key) {
            Some(v) if !v.is_null() => current = v,
            _ => return Ok(Findings::ok()),
        }
    }
    let Value::Array(entries) = current else {
        return Err(shape_error(
            review,
            FIELD.to_string(),
            "a list of namespace names",
            current,
        ));
    };

    let mut violations = Violations::default();
    for (i, entry) in entries.iter().enumerate() {
        let Value::String(name) = entry else {
            return Err(shape_error(
                review,
                format!("{FIELD}[{i}]"),
                "a string (a namespace name)",
                entry,
            ));
        };
        let prefix = &cfg.tenant_prefix;
        if name.starts_with(prefix.as_str()) {
            violations.push(|| {
                format!(
                    "{} {}: {FIELD}[{i}] is {}: attachedNamespaces must not contain {prefix}* \
                     namespaces (the root tenant's included); tenants join a Gateway with \
                     tenant.spec.gateway=true, never through this list. Remove the entry; only \
                     platform namespaces may be listed",
                    review.kind,
                    object_ref(review),
                    quoted(name),
                )
            });
        }
        if let Some(problem) = namespace_name_problem(name) {
            violations.push(|| {
                format!(
                    "{} {}: {FIELD}[{i}] {} is not a valid namespace name: {problem}; entries \
                     must be platform namespace names (DNS-1123 labels), never {prefix}* \
                     namespaces",
                    review.kind,
                    object_ref(review),
                    quoted(name),
                )
            });
        }
    }
    Ok(Findings {
        violations: violations.finish(review),
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::util::testing::{assert_mentions, cfg, groups};
    use super::*;

    fn package(attached: Value) -> Value {
        json!({"apiVersion": "cozystack.io/v1alpha1", "kind": "Package",
               "metadata": {"name": "cozystack.cozystack-platform"},
               "spec": {"variant": "default", "components": {"platform": {"values": {
                   "gateway": {"attachedNamespaces": attached, "enabled": true}}}}}})
    }

    fn run(obj: &Value) -> LayerResult {
        let g = groups(&["system:masters"]);
        let r = Review {
            operation: super::super::Operation::Update,
            kind: "Package",
            namespace: "",
            name: "cozystack.cozystack-platform",
            object: obj,
            old_object: Some(obj),
            username: "admin",
            groups: &g,
        };
        evaluate(&r, &cfg())
    }

    #[test]
    fn path_absent_or_partial_is_fine() {
        let cases = [
            json!({}),
            json!({"spec": null}),
            json!({"spec": {}}),
            json!({"spec": {"components": {}}}),
            json!({"spec": {"components": {"platform": {"values": {}}}}}),
            json!({"spec": {"components": {"platform": {"values": {"gateway": {}}}}}}),
            json!({"spec": {"components": {"other": {"values": {"gateway": {"attachedNamespaces": ["tenant-x"]}}}}}}),
            // Non-object intermediates cannot hold the list.
            json!({"spec": {"components": {"platform": {"values": "gateway: {}"}}}}),
            json!({"spec": {"components": {"platform": {"values": {"gateway": ["tenant-x"]}}}}}),
            json!({"spec": "x"}),
            json!([]),
            package(json!(null)),
            package(json!([])),
        ];
        for obj in cases {
            assert_eq!(run(&obj), Ok(Findings::ok()), "{obj}");
        }
    }

    #[test]
    fn entries() {
        // (entries, offending values in order)
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (json!(["cozy-dashboard", "default", "cozy-system"]), vec![]),
            (json!(["tenant-root"]), vec!["\"tenant-root\""]),
            (
                json!(["cozy-a", "tenant-alice", "default", "tenant-bob"]),
                vec!["\"tenant-alice\"", "\"tenant-bob\""],
            ),
            (json!(["Cozy-A"]), vec!["\"Cozy-A\""]),
            (json!([""]), vec!["\"\""]),
            (json!(["a.b"]), vec!["\"a.b\""]),
            (json!(["-a", "a-"]), vec!["\"-a\"", "\"a-\""]),
            (json!(["a_b"]), vec!["\"a_b\""]),
            (
                json!(["t\u{435}nant-root"]),
                vec!["not a valid namespace name"],
            ),
            (json!(["a".repeat(64)]), vec!["64"]),
            // Both a tenant namespace and an invalid name: two problems.
            (
                json!(["tenant-Root"]),
                vec!["must not contain tenant-", "not a valid namespace name"],
            ),
        ];
        for (entries, offending) in cases {
            let f = run(&package(entries.clone())).expect("well-formed");
            assert_eq!(f.violations.len(), offending.len(), "{entries}: {f:?}");
            for (msg, value) in f.violations.iter().zip(&offending) {
                assert_mentions(msg, &["Package cozystack.cozystack-platform", value]);
            }
        }
    }

    #[test]
    fn tenant_message_says_how_tenants_join() {
        let f = run(&package(json!(["cozy-x", "tenant-root"]))).expect("ok");
        assert_mentions(
            &f.violations[0],
            &[
                "Package cozystack.cozystack-platform",
                "attachedNamespaces[1]",
                "\"tenant-root\"",
                "must not contain tenant-",
                "tenant.spec.gateway=true",
            ],
        );
    }

    #[test]
    fn configured_prefix() {
        let c = PolicyConfig {
            tenant_prefix: "t-".to_string(),
            ..cfg()
        };
        let obj = package(json!(["t-alice", "tenant-alice"]));
        let r = Review {
            operation: super::super::Operation::Create,
            kind: "Package",
            namespace: "",
            name: "p",
            object: &obj,
            old_object: None,
            username: "admin",
            groups: &[],
        };
        let f = evaluate(&r, &c).expect("ok");
        assert_eq!(f.violations.len(), 1);
        assert_mentions(&f.violations[0], &["\"t-alice\"", "must not contain t-*"]);
    }

    #[test]
    fn wrong_shapes_are_shape_errors() {
        let cases = [
            (package(json!("tenant-root")), FIELD.to_string()),
            (package(json!({"a": "b"})), FIELD.to_string()),
            (package(json!(1)), FIELD.to_string()),
            (package(json!(["cozy-a", 1])), format!("{FIELD}[1]")),
            (package(json!([null])), format!("{FIELD}[0]")),
            (package(json!([["tenant-root"]])), format!("{FIELD}[0]")),
        ];
        for (obj, field) in cases {
            let err = run(&obj).expect_err("shape");
            assert_eq!(err.field, field);
            assert_eq!(err.object, "cozystack.cozystack-platform");
            assert!(
                err.problem.contains("list") || err.problem.contains("string"),
                "{}",
                err.problem
            );
        }
    }
}
