//! Layer 9 — TenantGateways are platform objects (SPEC §2.3).
//!
//! A TenantGateway makes the trusted controller write guarded namespace labels, take
//! listeners on a shared Gateway and, in existingSecret mode, receive the platform's wildcard
//! private key. The platform's gateway chart renders it through Flux, so in tenant scope only
//! trusted callers may create, update or delete one. Whoever writes it, its content must not
//! reach past the namespace: `spec.apex` equals the namespace's apex and `attachedNamespaces`
//! names platform namespaces only (the reconciler checks both again, for when this layer is
//! off or in audit mode).
//!
//! The content rules run on CREATE and on an UPDATE that changes `spec.apex` or
//! `spec.attachedNamespaces`, never on DELETE or on a metadata-only UPDATE: the controller's
//! own finalizer writes must pass even for a TenantGateway that no longer fits its namespace
//! (its host label changed), or it could never be deleted.

use serde_json::Value;

use super::util::{
    Violations, as_array, as_object, as_str, get, missing_apex_why, namespace_name_problem, quoted,
    shape_error, side_root, trusted_groups,
};
use super::{
    Findings, HOST_LABEL, LayerResult, NamespaceContext, Operation, PolicyConfig, Review,
    object_ref,
};

/// The spec fields this layer reads (also what the admission projection keeps).
#[derive(Debug, PartialEq, Eq)]
struct Content<'a> {
    apex: Option<&'a str>,
    attached: Vec<&'a str>,
}

pub fn evaluate(review: &Review<'_>, ns: &NamespaceContext, cfg: &PolicyConfig) -> LayerResult {
    if !cfg.in_tenant_scope(review.namespace) {
        return Ok(Findings::ok());
    }
    // Shape first, both sides: a ShapeError denies in every enforcement mode.
    let new = content(review, review.object, "")?;
    let old = match review.old_object {
        Some(o) => Some(content(review, o, "oldObject.")?),
        None => None,
    };

    let mut violations = Violations::default();
    if !cfg.is_trusted(review.groups) {
        let verb = match review.operation {
            Operation::Create => "create",
            Operation::Delete => "delete",
            Operation::Update | Operation::Connect => "update",
        };
        violations.push(|| {
            format!(
                "{} {} is managed by the platform: TenantGateways in tenant namespaces are \
                 rendered by the platform's gateway chart (through Flux), and only trusted \
                 platform automation ({}) may create, update or delete them; this request by {} \
                 would {verb} it. A tenant gets its Gateway from the platform with \
                 tenant.spec.gateway=true; ask a platform operator",
                review.kind,
                object_ref(review),
                trusted_groups(cfg),
                quoted(review.username),
            )
        });
    }

    let judge_content = match review.operation {
        Operation::Create => true,
        Operation::Update => old.as_ref() != Some(&new),
        Operation::Delete | Operation::Connect => false,
    };
    if judge_content {
        content_rules(review, ns, cfg, &new, &mut violations);
    }
    Ok(Findings {
        violations: violations.finish(review),
        warnings: Vec::new(),
    })
}

/// The content rules alone (apex equal to the namespace's, attached entries outside tenant
/// scope), whoever the caller: what the audit of stored TenantGateways judges (SPEC §3.9),
/// with the messages admission gives.
pub fn evaluate_content(
    review: &Review<'_>,
    ns: &NamespaceContext,
    cfg: &PolicyConfig,
) -> LayerResult {
    if !cfg.in_tenant_scope(review.namespace) {
        return Ok(Findings::ok());
    }
    let new = content(review, review.object, "")?;
    let mut violations = Violations::default();
    content_rules(review, ns, cfg, &new, &mut violations);
    Ok(Findings {
        violations: violations.finish(review),
        warnings: Vec::new(),
    })
}

fn content_rules(
    review: &Review<'_>,
    ns: &NamespaceContext,
    cfg: &PolicyConfig,
    new: &Content<'_>,
    violations: &mut Violations,
) {
    match ns.apex() {
        // Every layer-9 denial carries the phrase operators grep for (SPEC §2.4).
        None => violations.push(|| {
            format!(
                "{} {} is managed by the platform: {}",
                review.kind,
                object_ref(review),
                missing_apex_why(review, ns, "TenantGateway apexes")
            )
        }),
        // Case-insensitive, as hostnames compare everywhere (the label may carry uppercase).
        Some(apex) if new.apex.is_some_and(|a| a.eq_ignore_ascii_case(apex)) => {}
        Some(apex) => violations.push(|| {
            let got = match new.apex {
                Some(a) => quoted(a),
                None => "absent".to_string(),
            };
            format!(
                "{} {} is managed by the platform: spec.apex is {got}, but in tenant namespaces \
                 it must equal the namespace's {HOST_LABEL} label ({apex}): a TenantGateway \
                 publishes only its own tenant's apex",
                review.kind,
                object_ref(review),
            )
        }),
    }
    let prefix = &cfg.tenant_prefix;
    for (i, name) in new.attached.iter().enumerate() {
        if name.starts_with(prefix.as_str()) {
            violations.push(|| {
                format!(
                    "{} {} is managed by the platform: spec.attachedNamespaces[{i}] is {}, a \
                     {prefix}* namespace; tenants join a Gateway through the platform \
                     (tenant.spec.gateway=true), never by being listed. Only platform \
                     namespaces may be listed",
                    review.kind,
                    object_ref(review),
                    quoted(name),
                )
            });
        } else if let Some(problem) = namespace_name_problem(name) {
            violations.push(|| {
                format!(
                    "{} {} is managed by the platform: spec.attachedNamespaces[{i}] {} is not a \
                     valid namespace name: {problem}; list platform namespace names \
                     (DNS-1123 labels)",
                    review.kind,
                    object_ref(review),
                    quoted(name),
                )
            });
        }
    }
}

/// `spec.apex` and `spec.attachedNamespaces` of one side, type-checked.
fn content<'a>(
    review: &Review<'_>,
    object: &'a Value,
    prefix: &str,
) -> Result<Content<'a>, crate::policy::ShapeError> {
    let root = side_root(review, object, prefix)?;
    let spec = as_object(review, get(root, "spec"), || format!("{prefix}spec"))?;
    let apex = as_str(review, get(spec, "apex"), || format!("{prefix}spec.apex"))?;
    let entries = as_array(review, get(spec, "attachedNamespaces"), || {
        format!("{prefix}spec.attachedNamespaces")
    })?
    .unwrap_or_default();
    let mut attached = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let Value::String(name) = entry else {
            return Err(shape_error(
                review,
                format!("{prefix}spec.attachedNamespaces[{i}]"),
                "a string (a namespace name)",
                entry,
            ));
        };
        attached.push(name.as_str());
    }
    Ok(Content { apex, attached })
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use serde_json::json;

    use super::super::util::testing::{assert_mentions, cfg, groups, missing_apexes, ns_apex};
    use super::*;

    const APEX: &str = "alice.example.org";
    const FLUX: &str = "system:serviceaccounts:cozy-fluxcd";

    fn tgw(spec: Value) -> Value {
        json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
               "metadata": {"name": "gw", "namespace": "tenant-alice"}, "spec": spec})
    }

    fn run(
        operation: Operation,
        namespace: &str,
        old: Option<&Value>,
        new: &Value,
        g: &[Cow<'_, str>],
        ns: &NamespaceContext,
    ) -> LayerResult {
        let r = Review {
            operation,
            kind: "TenantGateway",
            namespace,
            name: "gw",
            object: new,
            old_object: old,
            username: "alice",
            groups: g,
        };
        evaluate(&r, ns, &cfg())
    }

    #[test]
    fn only_trusted_callers_write_tenant_gateways_in_tenant_scope() {
        let ok = tgw(json!({"apex": APEX}));
        let ns = ns_apex(APEX);
        let tenant = groups(&["system:authenticated", "tenant-alice-admins"]);
        let trusted = groups(&["x", FLUX]);
        // (operation, namespace, old, caller's groups, violations)
        type Case<'a> = (
            Operation,
            &'a str,
            Option<&'a Value>,
            &'a [Cow<'a, str>],
            usize,
        );
        let cases: Vec<Case<'_>> = vec![
            (Operation::Create, "tenant-alice", None, &tenant, 1),
            (Operation::Update, "tenant-alice", Some(&ok), &tenant, 1),
            (Operation::Delete, "tenant-alice", None, &tenant, 1),
            (Operation::Create, "tenant-alice", None, &[], 1),
            (Operation::Create, "tenant-alice", None, &trusted, 0),
            (Operation::Update, "tenant-alice", Some(&ok), &trusted, 0),
            (Operation::Delete, "tenant-alice", None, &trusted, 0),
            // Outside tenant scope: platform-managed, unchecked.
            (Operation::Create, "cozy-system", None, &tenant, 0),
            (Operation::Delete, "default", None, &tenant, 0),
        ];
        for (op, namespace, old, g, want) in cases {
            let f = run(op, namespace, old, &ok, g, &ns).expect("well-formed");
            assert_eq!(f.violations.len(), want, "{op:?} {namespace} {g:?}: {f:?}");
        }
        let f = run(Operation::Delete, "tenant-alice", None, &ok, &tenant, &ns).expect("ok");
        assert_mentions(
            &f.violations[0],
            &[
                "TenantGateway tenant-alice/gw is managed by the platform",
                "gateway chart",
                FLUX,
                "\"alice\" would delete it",
            ],
        );
    }

    /// Issue 20 items 1 and 3: the attacker's objects, written by a trusted caller (the
    /// layer's content rules hold for everyone) or with the trust rule in audit mode.
    #[test]
    fn content_must_stay_inside_the_namespace() {
        let trusted = groups(&[FLUX]);
        let ns = ns_apex(APEX);
        // (spec, offending values in order)
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (json!({"apex": APEX}), vec![]),
            (json!({"apex": "Alice.Example.ORG"}), vec![]),
            (
                json!({"apex": APEX, "attachedNamespaces": ["cozy-dashboard"]}),
                vec![],
            ),
            (
                json!({"apex": "a", "attachedNamespaces": ["cozy-dashboard", "cozy-keycloak"]}),
                vec!["\"a\""],
            ),
            (json!({"apex": "example.org"}), vec!["\"example.org\""]),
            (
                json!({"apex": "shop.alice.example.org"}),
                vec!["\"shop.alice.example.org\""],
            ),
            (json!({}), vec!["absent"]),
            (
                json!({"apex": APEX, "attachedNamespaces": ["tenant-bob", "Bad_Name", "", "ok"]}),
                vec!["\"tenant-bob\"", "\"Bad_Name\"", "\"\""],
            ),
            (
                json!({"apex": APEX, "attachedNamespaces": ["tenant-alice"]}),
                vec!["\"tenant-alice\""],
            ),
        ];
        for (spec, want) in cases {
            let obj = tgw(spec.clone());
            let f = run(Operation::Create, "tenant-alice", None, &obj, &trusted, &ns)
                .expect("well-formed");
            assert_eq!(f.violations.len(), want.len(), "{spec}: {f:?}");
            for (v, w) in f.violations.iter().zip(&want) {
                assert_mentions(v, &["is managed by the platform", w]);
            }
        }
        let obj = tgw(json!({"apex": "a"}));
        let f = run(Operation::Create, "tenant-alice", None, &obj, &trusted, &ns).expect("ok");
        assert_mentions(
            &f.violations[0],
            &[
                "spec.apex is \"a\"",
                "namespace.cozystack.io/host label (alice.example.org)",
            ],
        );
    }

    #[test]
    fn missing_apex_fails_closed() {
        let trusted = groups(&[FLUX]);
        let obj = tgw(json!({"apex": APEX}));
        for (what, ns) in missing_apexes() {
            let f = run(Operation::Create, "tenant-alice", None, &obj, &trusted, &ns).expect("ok");
            assert_eq!(f.violations.len(), 1, "{what}");
            assert_mentions(
                &f.violations[0],
                &[
                    "TenantGateway tenant-alice/gw is managed by the platform: namespace",
                    "has no namespace.cozystack.io/host label",
                    "retry",
                ],
            );
            // Deleting needs no apex.
            let f = run(Operation::Delete, "tenant-alice", None, &obj, &trusted, &ns).expect("ok");
            assert!(f.violations.is_empty(), "{what}");
        }
    }

    /// The controller adds and removes its finalizer with metadata-only updates; they pass for
    /// a trusted caller even when the spec no longer fits the namespace.
    #[test]
    fn content_is_judged_only_when_it_changes() {
        let trusted = groups(&[FLUX]);
        let stale = tgw(json!({"apex": "old.example.org", "attachedNamespaces": ["tenant-x"]}));
        let mut with_finalizer = stale.clone();
        with_finalizer["metadata"]["finalizers"] = json!(["gateway.cozystack.io/cleanup"]);
        let ns = ns_apex(APEX);
        let f = run(
            Operation::Update,
            "tenant-alice",
            Some(&stale),
            &with_finalizer,
            &trusted,
            &ns,
        )
        .expect("ok");
        assert!(f.violations.is_empty(), "{f:?}");
        // A changed spec is judged, even when the old one was already wrong.
        let changed = tgw(json!({"apex": "old.example.org", "attachedNamespaces": ["tenant-y"]}));
        let f = run(
            Operation::Update,
            "tenant-alice",
            Some(&stale),
            &changed,
            &trusted,
            &ns,
        )
        .expect("ok");
        assert_eq!(f.violations.len(), 2, "{f:?}");
        // An UPDATE without its old object is judged like a CREATE (fails closed).
        let f = run(
            Operation::Update,
            "tenant-alice",
            None,
            &stale,
            &trusted,
            &ns,
        )
        .expect("ok");
        assert_eq!(f.violations.len(), 2, "{f:?}");
    }

    #[test]
    fn wrong_shapes_are_shape_errors() {
        let trusted = groups(&[FLUX]);
        let ns = ns_apex(APEX);
        let cases: Vec<(Option<Value>, Value, &str)> = vec![
            (None, tgw(json!("x")), "spec"),
            (None, tgw(json!({"apex": 1})), "spec.apex"),
            (
                None,
                tgw(json!({"apex": APEX, "attachedNamespaces": "cozy-a"})),
                "spec.attachedNamespaces",
            ),
            (
                None,
                tgw(json!({"apex": APEX, "attachedNamespaces": ["cozy-a", 2]})),
                "spec.attachedNamespaces[1]",
            ),
            (
                Some(tgw(json!({"apex": []}))),
                tgw(json!({"apex": APEX})),
                "oldObject.spec.apex",
            ),
        ];
        for (old, new, field) in cases {
            let err = run(
                Operation::Update,
                "tenant-alice",
                old.as_ref(),
                &new,
                &trusted,
                &ns,
            )
            .expect_err(field);
            assert_eq!(err.field, field);
            assert_eq!(err.object, "tenant-alice/gw");
        }
    }

    #[test]
    fn content_alone_judges_what_is_stored_whoever_wrote_it() {
        let ns = ns_apex(APEX);
        let trusted = groups(&[FLUX]);
        let content = |t: &Value, namespace: &str| {
            let r = Review {
                operation: Operation::Create,
                kind: "TenantGateway",
                namespace,
                name: "gw",
                object: t,
                old_object: None,
                username: "",
                groups: &[],
            };
            evaluate_content(&r, &ns, &cfg())
        };
        // (spec, violations): the content rules, none about the caller.
        let cases: Vec<(Value, usize)> = vec![
            (json!({"apex": APEX, "attachedNamespaces": ["cozy-x"]}), 0),
            (json!({"apex": "Alice.Example.org"}), 0),
            (json!({"apex": "bob.example.org"}), 1),
            (json!({}), 1),
            (
                json!({"apex": "bob.example.org", "attachedNamespaces": ["tenant-bob", "Bad"]}),
                3,
            ),
        ];
        for (spec, want) in cases {
            let t = tgw(spec.clone());
            let f = content(&t, "tenant-alice").expect("well-formed");
            assert_eq!(f.violations.len(), want, "{spec}: {f:?}");
            assert!(
                f.violations.iter().all(|v| !v.contains("would create")),
                "{f:?}"
            );
            // The same messages as a trusted caller's CREATE, whose caller passes.
            let admitted = run(Operation::Create, "tenant-alice", None, &t, &trusted, &ns)
                .expect("well-formed");
            assert_eq!(f.violations, admitted.violations, "{spec}");
        }
        let t = tgw(json!({"apex": "bob.example.org"}));
        assert!(
            content(&t, "cozy-system")
                .expect("ok")
                .violations
                .is_empty()
        );
        let err = content(&tgw(json!({"apex": 1})), "tenant-alice").expect_err("shape");
        assert_eq!(err.field, "spec.apex");
    }
}
