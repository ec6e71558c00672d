//! Layer 2 — Gateway listener hostnames (SPEC §2.3).
//!
//! A Gateway in a tenant namespace may only listen for hostnames inside the namespace apex.
//! No caller is exempt: the platform controller renders these Gateways and is checked too,
//! which is the point (a controller bug must not publish another tenant's names).

use super::util::{Violations, as_array, as_object, as_str, get, missing_apex, quoted, root};
use super::{
    Findings, HOST_LABEL, LayerResult, NamespaceContext, PolicyConfig, Review, object_ref,
};
use crate::hostname;

pub fn evaluate(review: &Review<'_>, ns: &NamespaceContext, cfg: &PolicyConfig) -> LayerResult {
    if !cfg.in_tenant_scope(review.namespace) {
        return Ok(Findings::ok());
    }

    // Shape first: a malformed object is denied whatever the enforcement mode, so it must not
    // be downgraded to a (possibly warn-only) missing-apex finding.
    let object = root(review, review.object, "object")?;
    let spec = as_object(review, get(object, "spec"), || "spec".to_string())?;
    let listeners = as_array(review, get(spec, "listeners"), || {
        "spec.listeners".to_string()
    })?
    .unwrap_or_default();
    let mut hostnames = Vec::new();
    for (i, listener) in listeners.iter().enumerate() {
        let listener = as_object(review, Some(listener), || format!("spec.listeners[{i}]"))?;
        let hostname = as_str(review, get(listener, "hostname"), || {
            format!("spec.listeners[{i}].hostname")
        })?;
        if let Some(h) = hostname {
            // The name only decorates the message, so a non-string name is not worth a denial.
            let name = get(listener, "name").and_then(|v| v.as_str());
            hostnames.push((i, name, h));
        }
    }

    // Without an apex nothing is within it: denied (fail closed), and the problems that need
    // no apex are listed beside it (SPEC §2.4: list them all).
    let apex = ns.apex();
    let mut violations = Violations::default();
    if apex.is_none() {
        violations.push(|| missing_apex(review, ns, "Gateway listener hostnames"));
    }
    for (i, name, h) in hostnames {
        let problem = match (hostname::validate(h), apex) {
            (Err(e), _) => format!("is invalid: {e};"),
            (Ok(()), Some(apex)) if !hostname::within(h, apex) => "is not allowed:".to_string(),
            (Ok(()), _) => continue,
        };
        violations.push(|| {
            let listener = match name {
                Some(n) => format!("listener {} (spec.listeners[{i}])", quoted(n)),
                None => format!("spec.listeners[{i}]"),
            };
            let rule = match apex {
                Some(apex) => format!(
                    "listener hostnames must equal {apex} or end with .{apex} (the {HOST_LABEL} \
                     label of namespace {})",
                    review.namespace
                ),
                None => format!(
                    "listener hostnames must equal the namespace's apex or end with .<apex> (its \
                     {HOST_LABEL} label, which namespace {} lacks)",
                    review.namespace
                ),
            };
            format!(
                "{} {}: {listener} hostname {} {problem} {rule}",
                review.kind,
                object_ref(review),
                quoted(h),
            )
        });
    }
    Ok(Findings {
        violations: violations.finish(review),
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::util::testing::{assert_mentions, cfg, missing_apexes, ns_apex, review};
    use super::*;

    fn gateway(hostnames: &[Value]) -> Value {
        let listeners: Vec<Value> = hostnames
            .iter()
            .enumerate()
            .map(|(i, h)| json!({"name": format!("l{i}"), "port": 443, "protocol": "HTTPS", "hostname": h}))
            .collect();
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "web", "namespace": "tenant-alice"},
               "spec": {"gatewayClassName": "cilium", "listeners": listeners}})
    }

    fn run(ns_name: &str, ns: &NamespaceContext, obj: &Value) -> LayerResult {
        evaluate(&review("Gateway", ns_name, obj), ns, &cfg())
    }

    #[test]
    fn hostnames_within_apex() {
        // (namespace apex, listener hostnames, number of violations)
        let cases: Vec<(&str, Vec<Value>, usize)> = vec![
            ("alice.example.org", vec![json!("alice.example.org")], 0),
            (
                "alice.example.org",
                vec![json!("shop.alice.example.org")],
                0,
            ),
            ("alice.example.org", vec![json!("*.alice.example.org")], 0),
            ("alice.example.org", vec![json!("a.b.alice.example.org")], 0),
            ("alice.example.org", vec![json!(null)], 0),
            ("alice.example.org", vec![], 0),
            // Uppercase apex label value still matches lowercase hostnames.
            (
                "Alice.Example.org",
                vec![json!("shop.alice.example.org")],
                0,
            ),
            // A child may not claim its parent's apex or siblings.
            ("alice.example.org", vec![json!("example.org")], 1),
            ("alice.example.org", vec![json!("*.example.org")], 1),
            ("alice.example.org", vec![json!("shop.bob.example.org")], 1),
            ("alice.example.org", vec![json!("evilalice.example.org")], 1),
            (
                "alice.example.org",
                vec![json!("alice.example.org.evil.com")],
                1,
            ),
            // A parent may publish under a child's apex.
            ("example.org", vec![json!("x.alice.example.org")], 0),
            // Invalid hostnames are denied even when textually under the apex.
            (
                "alice.example.org",
                vec![json!("Shop.alice.example.org")],
                1,
            ),
            (
                "alice.example.org",
                vec![json!("shop.alice.example.org.")],
                1,
            ),
            ("alice.example.org", vec![json!("*")], 1),
            ("alice.example.org", vec![json!("")], 1),
            (
                "alice.example.org",
                vec![json!("foo.*.alice.example.org")],
                1,
            ),
            (
                "alice.example.org",
                vec![json!("\u{430}.alice.example.org")],
                1,
            ),
            (
                "alice.example.org",
                vec![
                    json!("ok.alice.example.org"),
                    json!("a.bob.example.org"),
                    json!("x.evil.com"),
                ],
                2,
            ),
        ];
        for (apex, hostnames, want) in cases {
            let obj = gateway(&hostnames);
            let f = run("tenant-alice", &ns_apex(apex), &obj).expect("well-formed");
            assert_eq!(f.violations.len(), want, "{apex} {hostnames:?}: {f:?}");
            assert!(f.warnings.is_empty());
        }
    }

    #[test]
    fn message_names_object_value_and_rule() {
        let obj = gateway(&[json!("a.alice.example.org"), json!("shop.bob.example.org")]);
        let f = run("tenant-alice", &ns_apex("alice.example.org"), &obj).expect("ok");
        assert_eq!(f.violations.len(), 1);
        assert_mentions(
            &f.violations[0],
            &[
                "Gateway tenant-alice/web",
                "\"shop.bob.example.org\"",
                "spec.listeners[1]",
                "\"l1\"",
                "must equal alice.example.org or end with .alice.example.org",
            ],
        );
    }

    #[test]
    fn invalid_hostname_message_gives_reason() {
        let obj = gateway(&[json!("Shop.alice.example.org")]);
        let f = run("tenant-alice", &ns_apex("alice.example.org"), &obj).expect("ok");
        assert_mentions(
            &f.violations[0],
            &[
                "\"Shop.alice.example.org\"",
                "uppercase",
                "must equal alice.example.org or end with .alice.example.org",
            ],
        );
    }

    #[test]
    fn several_problems_listed_in_document_order() {
        let obj = gateway(&[
            json!("x.evil.com"),
            json!("ok.alice.example.org"),
            json!("BAD"),
        ]);
        let f = run("tenant-alice", &ns_apex("alice.example.org"), &obj).expect("ok");
        assert_eq!(f.violations.len(), 2);
        assert!(f.violations[0].contains("x.evil.com"));
        assert!(f.violations[1].contains("BAD"));
    }

    #[test]
    fn missing_apex_fails_closed() {
        for (case, ns) in missing_apexes() {
            for hostnames in [vec![json!("alice.example.org")], vec![]] {
                let obj = gateway(&hostnames);
                let f = run("tenant-alice", &ns, &obj).expect("well-formed");
                assert_eq!(f.violations.len(), 1, "{case}");
                assert_mentions(
                    &f.violations[0],
                    &[
                        "Gateway tenant-alice/web",
                        "has no namespace.cozystack.io/host label",
                        "retry",
                    ],
                );
            }
            // An invalid hostname is listed beside the missing apex (SPEC §2.4).
            let obj = gateway(&[json!("Bad_Host"), json!("shop.bob.example.org")]);
            let f = run("tenant-alice", &ns, &obj).expect("well-formed");
            assert_eq!(f.violations.len(), 2, "{case}: {:?}", f.violations);
            assert_mentions(
                &f.violations[1],
                &["listener \"l0\"", "\"Bad_Host\" is invalid", "must equal"],
            );
        }
    }

    #[test]
    fn outside_tenant_scope_is_unchecked() {
        let obj = gateway(&[json!("anything.evil.com"), json!("*")]);
        for ns_name in ["cozy-system", "default", "kube-system", "tenan-alice"] {
            for (_, ns) in missing_apexes() {
                assert_eq!(run(ns_name, &ns, &obj), Ok(Findings::ok()), "{ns_name}");
            }
        }
        let bad_shape = json!({"spec": {"listeners": "nope"}});
        assert_eq!(
            run("cozy-system", &ns_apex("x"), &bad_shape),
            Ok(Findings::ok())
        );
    }

    #[test]
    fn custom_tenant_prefix() {
        let c = PolicyConfig {
            tenant_prefix: "t-".to_string(),
            ..cfg()
        };
        let obj = gateway(&[json!("x.evil.com")]);
        let r = review("Gateway", "t-alice", &obj);
        let f = evaluate(&r, &ns_apex("alice.example.org"), &c).expect("ok");
        assert_eq!(f.violations.len(), 1);
        let r = review("Gateway", "tenant-alice", &obj);
        assert_eq!(
            evaluate(&r, &NamespaceContext::NotFound, &c),
            Ok(Findings::ok())
        );
    }

    #[test]
    fn trusted_callers_are_checked_too() {
        let obj = gateway(&[json!("x.evil.com")]);
        let g = vec![std::borrow::Cow::Borrowed("system:masters")];
        let r = Review {
            groups: &g,
            ..review("Gateway", "tenant-alice", &obj)
        };
        let f = evaluate(&r, &ns_apex("alice.example.org"), &cfg()).expect("ok");
        assert_eq!(f.violations.len(), 1);
    }

    #[test]
    fn lenient_parsing() {
        let ns = ns_apex("alice.example.org");
        let cases = [
            json!({}),
            json!({"spec": null}),
            json!({"spec": {}}),
            json!({"spec": {"listeners": null}}),
            json!({"spec": {"listeners": [{"name": "a"}, {"hostname": null, "x": [1]}]}}),
            json!({"spec": {"listeners": [{"name": 5, "hostname": "a.alice.example.org"}]}}),
            json!({"spec": {"unknown": 1, "listeners": []}, "status": "weird"}),
        ];
        for obj in cases {
            assert_eq!(run("tenant-alice", &ns, &obj), Ok(Findings::ok()), "{obj}");
        }
    }

    #[test]
    fn wrong_shapes_are_shape_errors() {
        let ns = ns_apex("alice.example.org");
        let cases = [
            (json!([]), "object"),
            (json!({"spec": "x"}), "spec"),
            (json!({"spec": {"listeners": {"a": 1}}}), "spec.listeners"),
            (json!({"spec": {"listeners": ["a"]}}), "spec.listeners[0]"),
            (
                json!({"spec": {"listeners": [{}, {}, {"hostname": 7}]}}),
                "spec.listeners[2].hostname",
            ),
            (
                json!({"spec": {"listeners": [{"hostname": ["a"]}]}}),
                "spec.listeners[0].hostname",
            ),
        ];
        for (obj, field) in cases {
            let err = run("tenant-alice", &ns, &obj).expect_err("shape");
            assert_eq!(err.field, field, "{obj}");
            assert_eq!(err.kind, "Gateway");
            assert_eq!(err.object, "tenant-alice/web");
            assert!(err.problem.starts_with("must be"), "{}", err.problem);
        }
        // The shape is judged before the apex.
        let obj = json!({"spec": {"listeners": [{"hostname": 7}]}});
        assert!(run("tenant-alice", &NamespaceContext::NotFound, &obj).is_err());
    }
}
