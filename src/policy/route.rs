//! Layer 7 — HTTPRoute / TLSRoute / GRPCRoute hostnames (SPEC §2.3).
//!
//! Routes in tenant namespaces may only claim hostnames inside the namespace apex. Claims
//! between namespaces inside one apex are not decided here: the reconciler resolves those
//! conflicts (SPEC §3.3), because admission cannot see the other namespace's routes reliably.

use super::util::{Violations, as_array, as_object, get, missing_apex, quoted, root, shape_error};
use super::{
    Findings, HOST_LABEL, LayerResult, NamespaceContext, PolicyConfig, Review, object_ref,
};
use crate::hostname;

/// Whether [`evaluate`] checks every hostname of `review` with `hostname::validate`: then a
/// result without violations says each one is valid, and the route-index warnings of the
/// same review need not check them again (`Admitted::hostnames_valid`).
pub fn checks_every_hostname(
    review: &Review<'_>,
    ns: &NamespaceContext,
    cfg: &PolicyConfig,
) -> bool {
    cfg.in_tenant_scope(review.namespace) && ns.apex().is_some()
}

pub fn evaluate(review: &Review<'_>, ns: &NamespaceContext, cfg: &PolicyConfig) -> LayerResult {
    if !cfg.in_tenant_scope(review.namespace) {
        return Ok(Findings::ok());
    }

    // Shape first: a ShapeError denies in every enforcement mode, a missing apex may not.
    let object = root(review, review.object, "object")?;
    let spec = as_object(review, get(object, "spec"), || "spec".to_string())?;
    let entries = as_array(review, get(spec, "hostnames"), || {
        "spec.hostnames".to_string()
    })?
    .unwrap_or_default();
    for (i, entry) in entries.iter().enumerate() {
        // A null entry is not "absent" inside a list: it can only be a malformed object.
        if !entry.is_string() {
            return Err(shape_error(
                review,
                format!("spec.hostnames[{i}]"),
                "a string",
                entry,
            ));
        }
    }

    // Fail closed even without hostnames: a route without hostnames matches every hostname of
    // the listeners it attaches to, which is only harmless when we know whose namespace it is.
    // The problems that need no apex are listed beside it (SPEC §2.4: list them all).
    let apex = ns.apex();
    let mut violations = Violations::default();
    if apex.is_none() {
        violations.push(|| missing_apex(review, ns, "route hostnames"));
    }

    // Built only for a violation: admitted routes, the common case, allocate nothing here.
    let rule = || match apex {
        Some(apex) => format!(
            "hostnames must equal the namespace's {HOST_LABEL} label or be subdomains of it \
             ({apex})"
        ),
        None => format!(
            "hostnames must equal the namespace's {HOST_LABEL} label or be subdomains of it"
        ),
    };
    // A route without hostnames takes every hostname of the listeners it attaches to: an
    // inherited Gateway's `*.<parent apex>`, other tenants' names included. Like an Ingress
    // rule without a host, it is a catch-all.
    if entries.is_empty() {
        violations.push(|| {
            format!(
                "{} {}: spec.hostnames is empty or absent: a route without hostnames takes every \
                 hostname of the listeners it attaches to, other tenants' included; list the \
                 hostnames it serves: {}",
                review.kind,
                object_ref(review),
                rule(),
            )
        });
    }
    for h in entries.iter().filter_map(serde_json::Value::as_str) {
        let problem = match (hostname::validate(h), apex) {
            (Err(e), _) => format!("is invalid: {e};"),
            (Ok(()), Some(apex)) if !hostname::within(h, apex) => "is not allowed:".to_string(),
            (Ok(()), _) => continue,
        };
        violations.push(|| {
            format!(
                "{} {}: hostname {} {problem} {}",
                review.kind,
                object_ref(review),
                quoted(h),
                rule(),
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

    const RULE: &str = "hostnames must equal the namespace's namespace.cozystack.io/host label \
                        or be subdomains of it";

    fn route(hostnames: Value) -> Value {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "web", "namespace": "tenant-alice"},
               "spec": {"parentRefs": [{"name": "gw"}], "hostnames": hostnames,
                        "rules": [{"backendRefs": [{"name": "svc", "port": 80}]}]}})
    }

    fn run(kind: &str, ns_name: &str, ns: &NamespaceContext, obj: &Value) -> LayerResult {
        evaluate(&review(kind, ns_name, obj), ns, &cfg())
    }

    #[test]
    fn spec_example_message() {
        let obj = route(json!(["shop.bob.example.org"]));
        let f = run(
            "HTTPRoute",
            "tenant-alice",
            &ns_apex("alice.example.org"),
            &obj,
        )
        .expect("ok");
        assert_eq!(
            f.violations,
            vec![format!(
                "HTTPRoute tenant-alice/web: hostname \"shop.bob.example.org\" is not allowed: \
                 {RULE} (alice.example.org)"
            )]
        );
    }

    #[test]
    fn hostnames_within_apex() {
        // (apex, hostnames, offending values in order)
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("alice.example.org", json!(["alice.example.org"]), vec![]),
            (
                "alice.example.org",
                json!(["shop.alice.example.org", "*.alice.example.org"]),
                vec![],
            ),
            // Catch-alls: no hostnames at all.
            (
                "alice.example.org",
                json!([]),
                vec!["spec.hostnames is empty or absent"],
            ),
            (
                "alice.example.org",
                json!(null),
                vec!["spec.hostnames is empty or absent"],
            ),
            (
                "ALICE.example.org",
                json!(["shop.alice.example.org"]),
                vec![],
            ),
            (
                "alice.example.org",
                json!(["example.org"]),
                vec!["\"example.org\""],
            ),
            (
                "alice.example.org",
                json!(["*.example.org"]),
                vec!["\"*.example.org\""],
            ),
            (
                "alice.example.org",
                json!(["evilalice.example.org"]),
                vec!["evilalice"],
            ),
            (
                "alice.example.org",
                json!(["alice.example.org.evil.com"]),
                vec!["evil.com"],
            ),
            (
                "example.org",
                json!(["x.alice.example.org", "example.org"]),
                vec![],
            ),
            (
                "customer1.io",
                json!(["shop.customer1.io", "x.example.org"]),
                vec!["x.example.org"],
            ),
            (
                "alice.example.org",
                json!([
                    "x.evil.com",
                    "ok.alice.example.org",
                    "Shop.alice.example.org",
                    "*",
                    "a..alice.example.org"
                ]),
                vec![
                    "\"x.evil.com\"",
                    "\"Shop.alice.example.org\"",
                    "\"*\"",
                    "\"a..alice.example.org\"",
                ],
            ),
        ];
        for (apex, hostnames, offending) in cases {
            let obj = route(hostnames.clone());
            let f = run("HTTPRoute", "tenant-alice", &ns_apex(apex), &obj).expect("ok");
            assert_eq!(
                f.violations.len(),
                offending.len(),
                "{apex} {hostnames}: {f:?}"
            );
            for (msg, value) in f.violations.iter().zip(&offending) {
                assert_mentions(msg, &["HTTPRoute tenant-alice/web", value, RULE, apex]);
            }
        }
    }

    #[test]
    fn catch_all_routes_of_every_kind_are_denied() {
        let apex = ns_apex("alice.example.org");
        // (object, catch-all?)
        let objects = [
            (route(json!([])), true),
            (route(json!(null)), true),
            (json!({"spec": {"parentRefs": [{"name": "gw"}]}}), true),
            (json!({"spec": {}}), true),
            (json!({}), true),
            (route(json!(["grpc.alice.example.org"])), false),
        ];
        for kind in ["HTTPRoute", "TLSRoute", "GRPCRoute"] {
            for (obj, catch_all) in &objects {
                let f = run(kind, "tenant-alice", &apex, obj).expect("ok");
                if *catch_all {
                    assert_eq!(f.violations.len(), 1, "{kind} {obj}: {f:?}");
                    assert_mentions(
                        &f.violations[0],
                        &[
                            &format!("{kind} tenant-alice/web"),
                            "spec.hostnames is empty or absent",
                            "takes every hostname of the listeners",
                            RULE,
                            "alice.example.org",
                        ],
                    );
                } else {
                    assert_eq!(f, Findings::ok(), "{kind} {obj}");
                }
            }
            // Outside tenant scope a catch-all is the platform's business.
            assert_eq!(
                run(kind, "cozy-system", &apex, &route(json!([]))),
                Ok(Findings::ok())
            );
        }
    }

    #[test]
    fn invalid_hostnames_say_why() {
        let cases = [
            ("Shop.alice.example.org", "uppercase"),
            ("shop.alice.example.org.", "trailing"),
            ("\u{430}lice.example.org", "punycode"),
            ("foo.*.alice.example.org", "first label"),
            ("", "empty"),
        ];
        for (h, why) in cases {
            let obj = route(json!([h]));
            let f = run(
                "TLSRoute",
                "tenant-alice",
                &ns_apex("alice.example.org"),
                &obj,
            )
            .expect("ok");
            assert_eq!(f.violations.len(), 1, "{h}");
            assert_mentions(
                &f.violations[0],
                &["TLSRoute tenant-alice/web", "is invalid", why],
            );
        }
    }

    #[test]
    fn missing_apex_fails_closed_even_without_hostnames() {
        for (case, ns) in missing_apexes() {
            for hostnames in [json!(["alice.example.org"]), json!([]), json!(null)] {
                for kind in ["HTTPRoute", "TLSRoute"] {
                    let obj = route(hostnames.clone());
                    let f = run(kind, "tenant-alice", &ns, &obj).expect("ok");
                    // Without hostnames the catch-all is listed too (the first is the apex).
                    let listed = if hostnames == json!(["alice.example.org"]) {
                        1
                    } else {
                        2
                    };
                    assert_eq!(f.violations.len(), listed, "{case}: {:?}", f.violations);
                    assert_mentions(
                        &f.violations[0],
                        &[
                            kind,
                            "tenant-alice/web",
                            "has no namespace.cozystack.io/host label",
                            "retry",
                        ],
                    );
                }
            }
        }
        let f = run(
            "HTTPRoute",
            "tenant-alice",
            &NamespaceContext::NotFound,
            &json!({}),
        )
        .expect("ok");
        assert_eq!(f.violations.len(), 2, "{:?}", f.violations);
        // Invalid hostnames are listed beside the missing apex; valid ones cannot be judged.
        let obj = route(json!(["Bad_Host", "*", "shop.bob.example.org"]));
        let f = run(
            "HTTPRoute",
            "tenant-alice",
            &NamespaceContext::NotFound,
            &obj,
        )
        .expect("ok");
        assert_eq!(f.violations.len(), 3, "{:?}", f.violations);
        assert_mentions(
            &f.violations[0],
            &["has no namespace.cozystack.io/host label"],
        );
        assert_mentions(&f.violations[1], &["\"Bad_Host\" is invalid", RULE]);
        assert_mentions(&f.violations[2], &["\"*\" is invalid", RULE]);
    }

    /// A result without violations where `checks_every_hostname` holds means every
    /// hostname is valid, whatever the lists, namespaces and labels.
    #[test]
    fn no_violation_where_every_hostname_is_checked_means_every_one_is_valid() {
        let pool = [
            "a.alice.example.org",
            "alice.example.org",
            "*.alice.example.org",
            "Shop.alice.example.org",
            "a..alice.example.org",
            "",
            "*",
            "x.evil.com",
            "\u{430}lice.example.org",
            "-a.alice.example.org",
        ];
        let contexts = [
            ns_apex("alice.example.org"),
            ns_apex("example.org"),
            NamespaceContext::NotFound,
        ];
        let mut checked_and_clean = 0;
        for ns_name in ["tenant-alice", "cozy-system", "default"] {
            for ns in &contexts {
                for a in 0..pool.len() {
                    for b in 0..=pool.len() {
                        let hosts: Vec<&str> = std::iter::once(pool[a])
                            .chain(pool.get(b).copied())
                            .collect();
                        let obj = route(json!(hosts));
                        let r = review("HTTPRoute", ns_name, &obj);
                        let Ok(f) = evaluate(&r, ns, &cfg()) else {
                            continue;
                        };
                        if f.violations.is_empty() && checks_every_hostname(&r, ns, &cfg()) {
                            checked_and_clean += 1;
                            for h in &hosts {
                                assert!(
                                    crate::hostname::validate(h).is_ok(),
                                    "{ns_name} {hosts:?}: {h:?} passed unchecked"
                                );
                            }
                        }
                    }
                }
            }
        }
        assert!(checked_and_clean > 0, "no case was checked and clean");
    }

    #[test]
    fn outside_tenant_scope_is_unchecked() {
        let obj = route(json!(["anything.evil.com"]));
        for ns_name in ["cozy-dashboard", "default", "kube-system"] {
            for (_, ns) in missing_apexes() {
                assert_eq!(run("HTTPRoute", ns_name, &ns, &obj), Ok(Findings::ok()));
            }
        }
    }

    #[test]
    fn wrong_shapes_are_shape_errors() {
        let ns = ns_apex("alice.example.org");
        let cases = [
            (
                json!({"spec": {"hostnames": "alice.example.org"}}),
                "spec.hostnames",
            ),
            (json!({"spec": {"hostnames": {"a": "b"}}}), "spec.hostnames"),
            (
                json!({"spec": {"hostnames": ["a.alice.example.org", 3]}}),
                "spec.hostnames[1]",
            ),
            (json!({"spec": {"hostnames": [null]}}), "spec.hostnames[0]"),
            (json!({"spec": {"hostnames": [["x"]]}}), "spec.hostnames[0]"),
            (json!({"spec": 1}), "spec"),
            (json!("route"), "object"),
        ];
        for (obj, field) in cases {
            let err = run("HTTPRoute", "tenant-alice", &ns, &obj).expect_err("shape");
            assert_eq!(err.field, field, "{obj}");
            assert_eq!(err.object, "tenant-alice/web");
        }
    }
}
