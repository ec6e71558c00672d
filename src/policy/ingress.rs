//! Layer 8 — Ingress hostnames (SPEC §2.3).
//!
//! Ingress is the default dataplane, so this is the layer most tenant apps actually meet. A
//! host is acceptable when it is inside the namespace apex, or when it is an exact name wholly
//! outside the platform root `R` (a tenant's own custom domain). Catch-alls — a rule without a
//! host, `spec.defaultBackend` — are denied because on a shared ingress controller they would
//! capture traffic for names the tenant does not own.

use super::util::{
    Violations, as_array, as_object, as_str, clip, get, missing_apex, quoted, root, shape_error,
};
use super::{
    Findings, HOST_LABEL, LayerResult, NamespaceContext, PolicyConfig, Review, ShapeError,
    object_ref,
};
use crate::hostname;

/// The API server relays admission warnings only up to this length (SPEC §2.5).
const MAX_WARNING: usize = 120;
/// Custom-domain warnings listed one by one before they are summarised.
const MAX_CUSTOM_DOMAIN_WARNINGS: usize = 8;

/// Something in the Ingress the layer judges, in document order.
enum Item<'a> {
    DefaultBackend,
    HostlessRule(usize),
    Host { at: HostAt, host: &'a str },
}

/// Where a host sits; rendered only when a message needs it, so admitted objects cost no
/// path strings.
#[derive(Clone, Copy)]
enum HostAt {
    Rule(usize),
    Tls(usize, usize),
}

impl std::fmt::Display for HostAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostAt::Rule(i) => write!(f, "spec.rules[{i}].host"),
            HostAt::Tls(i, j) => write!(f, "spec.tls[{i}].hosts[{j}]"),
        }
    }
}

pub fn evaluate(review: &Review<'_>, ns: &NamespaceContext, cfg: &PolicyConfig) -> LayerResult {
    if !cfg.in_tenant_scope(review.namespace) {
        return Ok(Findings::ok());
    }

    // Shape first: a ShapeError denies in every enforcement mode, the findings below may not.
    let items = parse(review)?;

    // An empty root would make every non-wildcard host "outside the root", i.e. admit
    // everything; treat it like a missing one.
    let Some(root_host) = cfg.root_host.as_deref().filter(|r| !r.is_empty()) else {
        return Ok(Findings::deny(format!(
            "{} {}: the webhook has no platform root host configured (--root-host), so Ingress \
             hosts in tenant namespaces cannot be checked and the request is denied; an \
             operator must set --root-host",
            review.kind,
            object_ref(review),
        )));
    };

    let apex = ns.apex();
    // Message pieces are built only when a message is, so admitted Ingresses pay nothing for them.
    let object = || format!("{} {}", review.kind, object_ref(review));
    let allowed = || match apex {
        Some(apex) => format!(
            "Ingress hosts must be within the namespace apex {apex}, or outside the platform \
             root {root_host}"
        ),
        None => format!(
            "Ingress hosts must be within the namespace apex (its {HOST_LABEL} label), or \
             outside the platform root {root_host}"
        ),
    };

    let mut violations = Violations::default();
    if apex.is_none() {
        violations.push(|| missing_apex(review, ns, "Ingress hosts"));
    }
    let mut custom_domains: Vec<&str> = Vec::new();
    for item in items {
        match item {
            Item::DefaultBackend => violations.push(|| {
                format!(
                    "{}: spec.defaultBackend is not allowed in tenant namespaces: it catches \
                     traffic for every hostname no rule matches; route with spec.rules[].host \
                     instead ({})",
                    object(),
                    allowed()
                )
            }),
            Item::HostlessRule(i) => violations.push(|| {
                format!(
                    "{}: spec.rules[{i}] has no host: a rule without a host catches every \
                     hostname; every rule must carry a host ({})",
                    object(),
                    allowed()
                )
            }),
            Item::Host { at, host } => {
                if let Err(e) = hostname::validate(host) {
                    violations.push(|| {
                        format!(
                            "{}: {at}: host {} is invalid: {e}; {}",
                            object(),
                            quoted(host),
                            allowed()
                        )
                    });
                    continue;
                }
                // Without an apex nothing can be accepted; the missing-apex denial says why.
                let Some(apex) = apex else { continue };
                if hostname::within(host, apex) {
                    continue;
                }
                if hostname::is_wildcard(host) {
                    violations.push(|| {
                        format!(
                            "{}: {at}: host {} is not allowed: wildcard hosts must be within the \
                             namespace apex {apex}; outside it only exact custom domains (not \
                             under the platform root {root_host}) are allowed",
                            object(),
                            quoted(host)
                        )
                    });
                } else if hostname::within(host, root_host) {
                    violations.push(|| {
                        format!(
                            "{}: {at}: host {} is not allowed: {}",
                            object(),
                            quoted(host),
                            allowed()
                        )
                    });
                } else {
                    custom_domains.push(host);
                }
            }
        }
    }
    Ok(Findings {
        violations: violations.finish(review),
        warnings: custom_domain_warnings(custom_domains, root_host),
    })
}

/// One warning per distinct accepted custom domain, in document order, at most
/// [`MAX_CUSTOM_DOMAIN_WARNINGS`] of them plus a summary: the API server shows every warning
/// to the user, and a wall of them hides the one that matters.
fn custom_domain_warnings(mut hosts: Vec<&str>, root_host: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::with_capacity(hosts.len());
    // Hosts are validated, hence lowercase: plain equality is the right dedup.
    hosts.retain(|h| seen.insert(*h));
    let mut warnings: Vec<String> = hosts
        .iter()
        .take(MAX_CUSTOM_DOMAIN_WARNINGS)
        .map(|h| custom_domain_warning(h, root_host))
        .collect();
    if hosts.len() > MAX_CUSTOM_DOMAIN_WARNINGS {
        let more = hosts.len() - MAX_CUSTOM_DOMAIN_WARNINGS;
        warnings.push(clip(
            &format!(
                "{more} more custom domains outside {root_host}; make sure their DNS points here"
            ),
            MAX_WARNING,
        ));
    }
    warnings
}

/// Reads the fields the layer judges, or the first one with the wrong type.
fn parse<'a>(review: &Review<'a>) -> Result<Vec<Item<'a>>, ShapeError> {
    let mut items = Vec::new();
    let object = root(review, review.object, "object")?;
    let spec = as_object(review, get(object, "spec"), || "spec".to_string())?;
    // Any non-null defaultBackend is a catch-all, whatever its content.
    if get(spec, "defaultBackend").is_some() {
        items.push(Item::DefaultBackend);
    }
    let rules = as_array(review, get(spec, "rules"), || "spec.rules".to_string())?;
    for (i, rule) in rules.unwrap_or_default().iter().enumerate() {
        let rule = as_object(review, Some(rule), || format!("spec.rules[{i}]"))?;
        match as_str(review, get(rule, "host"), || {
            format!("spec.rules[{i}].host")
        })? {
            None | Some("") => items.push(Item::HostlessRule(i)),
            Some(host) => items.push(Item::Host {
                at: HostAt::Rule(i),
                host,
            }),
        }
    }
    let tls = as_array(review, get(spec, "tls"), || "spec.tls".to_string())?;
    for (i, entry) in tls.unwrap_or_default().iter().enumerate() {
        let entry = as_object(review, Some(entry), || format!("spec.tls[{i}]"))?;
        let hosts = as_array(review, get(entry, "hosts"), || {
            format!("spec.tls[{i}].hosts")
        })?;
        for (j, host) in hosts.unwrap_or_default().iter().enumerate() {
            let at = HostAt::Tls(i, j);
            match host {
                serde_json::Value::String(h) => items.push(Item::Host { at, host: h }),
                // A null inside the list is not "absent", it is a malformed entry.
                other => return Err(shape_error(review, at.to_string(), "a string", other)),
            }
        }
    }
    Ok(items)
}

/// The note for an accepted custom domain, kept within the warning length limit by shortening
/// the host rather than dropping the advice.
fn custom_domain_warning(host: &str, root_host: &str) -> String {
    let render = |h: &str| {
        format!(
            "host \"{h}\" is a custom domain outside {root_host}; make sure its DNS points here"
        )
    };
    let full = render(host);
    if full.len() <= MAX_WARNING {
        return full;
    }
    let room = MAX_WARNING.saturating_sub(full.len() - host.len()).max(16);
    clip(&render(&clip(host, room)), MAX_WARNING)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::util::testing::{assert_mentions, cfg, missing_apexes, ns_apex, review};
    use super::*;

    fn ingress(rule_hosts: Value, tls_hosts: Value) -> Value {
        let rules: Vec<Value> = rule_hosts
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|h| {
                        json!({"host": h, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                        "backend": {"service": {"name": "svc", "port": {"number": 80}}}}]}})
                    })
                    .collect()
            })
            .unwrap_or_default();
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
               "metadata": {"name": "web", "namespace": "tenant-alice"},
               "spec": {"ingressClassName": "tenant-root", "rules": rules,
                        "tls": [{"hosts": tls_hosts, "secretName": "web-tls"}]}})
    }

    fn run(ns: &NamespaceContext, obj: &Value) -> LayerResult {
        evaluate(&review("Ingress", "tenant-alice", obj), ns, &cfg())
    }

    fn alice() -> NamespaceContext {
        ns_apex("alice.example.org")
    }

    /// (apex, rule hosts, tls hosts, offending values, warned hosts)
    type HostCase = (
        &'static str,
        Value,
        Value,
        Vec<&'static str>,
        Vec<&'static str>,
    );

    #[test]
    fn hosts() {
        // (apex, rule hosts, tls hosts, offending values, warned hosts)
        let cases: Vec<HostCase> = vec![
            (
                "alice.example.org",
                json!(["alice.example.org"]),
                json!(["alice.example.org"]),
                vec![],
                vec![],
            ),
            (
                "alice.example.org",
                json!(["a.alice.example.org"]),
                json!(["*.alice.example.org"]),
                vec![],
                vec![],
            ),
            (
                "alice.example.org",
                json!(["*.alice.example.org"]),
                json!([]),
                vec![],
                vec![],
            ),
            (
                "Alice.Example.org",
                json!(["a.alice.example.org"]),
                json!(null),
                vec![],
                vec![],
            ),
            // Custom domains outside the root: allowed, with a warning (once per host).
            (
                "alice.example.org",
                json!(["shop.customer.com"]),
                json!(["shop.customer.com"]),
                vec![],
                vec!["shop.customer.com"],
            ),
            // A name that merely ends in the root's text is outside it.
            (
                "alice.example.org",
                json!(["notexample.org"]),
                json!([]),
                vec![],
                vec!["notexample.org"],
            ),
            // Wildcards outside the own apex are denied, even outside the root.
            (
                "alice.example.org",
                json!(["*.customer.com"]),
                json!([]),
                vec!["\"*.customer.com\""],
                vec![],
            ),
            (
                "alice.example.org",
                json!([]),
                json!(["*.example.org"]),
                vec!["\"*.example.org\""],
                vec![],
            ),
            // The root itself and other names under it.
            (
                "alice.example.org",
                json!(["example.org"]),
                json!([]),
                vec!["\"example.org\""],
                vec![],
            ),
            (
                "alice.example.org",
                json!(["x.bob.example.org"]),
                json!([]),
                vec!["\"x.bob.example.org\""],
                vec![],
            ),
            (
                "alice.example.org",
                json!(["dashboard.example.org"]),
                json!([]),
                vec!["dashboard"],
                vec![],
            ),
            (
                "alice.example.org",
                json!(["EXAMPLE.org"]),
                json!([]),
                vec!["EXAMPLE"],
                vec![],
            ),
            (
                "alice.example.org",
                json!([]),
                json!(["x.bob.example.org"]),
                vec!["spec.tls[0].hosts[0]"],
                vec![],
            ),
            // Parent apex covers child apexes.
            (
                "example.org",
                json!(["x.alice.example.org", "example.org", "*.example.org"]),
                json!([]),
                vec![],
                vec![],
            ),
            // Independent apex outside the root.
            (
                "customer1.io",
                json!(["shop.customer1.io", "x.example.org"]),
                json!([]),
                vec!["\"x.example.org\""],
                vec![],
            ),
            // Invalid hosts.
            (
                "alice.example.org",
                json!(["a.alice.example.org."]),
                json!(["Shop.alice.example.org"]),
                vec!["trailing", "uppercase"],
                vec![],
            ),
        ];
        for (apex, rules, tls, offending, warned) in cases {
            let obj = ingress(rules.clone(), tls.clone());
            let f = run(&ns_apex(apex), &obj).expect("well-formed");
            assert_eq!(
                f.violations.len(),
                offending.len(),
                "{apex} {rules} {tls}: {f:?}"
            );
            for (msg, value) in f.violations.iter().zip(&offending) {
                assert_mentions(msg, &["Ingress tenant-alice/web", value]);
            }
            assert_eq!(
                f.warnings.len(),
                warned.len(),
                "{apex} {rules} {tls}: {f:?}"
            );
            for (w, host) in f.warnings.iter().zip(&warned) {
                assert_mentions(w, &[host, "custom domain", "example.org"]);
                assert!(w.len() <= MAX_WARNING);
            }
        }
    }

    #[test]
    fn not_allowed_message_says_must_be_within() {
        let obj = ingress(json!(["x.bob.example.org"]), json!([]));
        let f = run(&alice(), &obj).expect("ok");
        assert_mentions(
            &f.violations[0],
            &[
                "Ingress tenant-alice/web",
                "spec.rules[0].host",
                "host \"x.bob.example.org\" is not allowed",
                "must be within the namespace apex alice.example.org",
                "outside the platform root example.org",
            ],
        );
        let obj = ingress(json!(["*.customer.com"]), json!([]));
        let f = run(&alice(), &obj).expect("ok");
        assert_mentions(
            &f.violations[0],
            &["wildcard", "must be within", "alice.example.org"],
        );
    }

    #[test]
    fn catch_alls_are_denied() {
        let obj = json!({"spec": {
            "defaultBackend": {"service": {"name": "svc", "port": {"number": 80}}},
            "rules": [{"host": "a.alice.example.org"}, {"http": {}}, {"host": ""}, {"host": null}],
        }});
        let f = run(&alice(), &obj).expect("ok");
        assert_eq!(f.violations.len(), 4, "{f:?}");
        assert_mentions(&f.violations[0], &["spec.defaultBackend", "must be within"]);
        assert_mentions(
            &f.violations[1],
            &["spec.rules[1]", "no host", "must be within"],
        );
        assert_mentions(&f.violations[2], &["spec.rules[2]", "no host"]);
        assert_mentions(&f.violations[3], &["spec.rules[3]", "no host"]);
        // A defaultBackend of any shape is still a catch-all.
        let obj = json!({"spec": {"defaultBackend": "svc"}});
        assert_eq!(run(&alice(), &obj).expect("ok").violations.len(), 1);
        // An Ingress without rules or backend has nothing to deny.
        assert_eq!(run(&alice(), &json!({"spec": {}})), Ok(Findings::ok()));
        assert_eq!(run(&alice(), &json!({})), Ok(Findings::ok()));
    }

    #[test]
    fn violations_in_document_order() {
        let obj = json!({"spec": {
            "rules": [{"host": "x.evil.example.org"}, {}, {"host": "*.c.com"}],
            "tls": [{"hosts": ["a.alice.example.org", "BAD"]}],
            "defaultBackend": {},
        }});
        let f = run(&alice(), &obj).expect("ok");
        let order = [
            "defaultBackend",
            "spec.rules[0]",
            "spec.rules[1]",
            "spec.rules[2]",
            "spec.tls[0].hosts[1]",
        ];
        assert_eq!(f.violations.len(), order.len(), "{f:?}");
        for (msg, path) in f.violations.iter().zip(order) {
            assert!(msg.contains(path), "{msg} lacks {path}");
        }
    }

    #[test]
    fn missing_apex_fails_closed() {
        for (case, ns) in missing_apexes() {
            for obj in [
                ingress(json!(["alice.example.org"]), json!([])),
                ingress(json!(["shop.customer.com"]), json!([])),
                json!({}),
            ] {
                let f = run(&ns, &obj).expect("ok");
                assert_eq!(f.violations.len(), 1, "{case}: {f:?}");
                assert!(f.warnings.is_empty());
                assert_mentions(
                    &f.violations[0],
                    &[
                        "Ingress tenant-alice/web",
                        "has no namespace.cozystack.io/host label",
                        "retry",
                    ],
                );
            }
            // Problems that do not depend on the apex are still listed.
            let obj = json!({"spec": {"defaultBackend": {}, "rules": [{"host": "Bad"}]}});
            let f = run(&ns, &obj).expect("ok");
            assert_eq!(f.violations.len(), 3, "{case}: {f:?}");
        }
    }

    #[test]
    fn missing_root_host_denies() {
        for root_host in [None, Some(String::new())] {
            let c = PolicyConfig { root_host, ..cfg() };
            let obj = ingress(json!(["a.alice.example.org"]), json!([]));
            let f = evaluate(&review("Ingress", "tenant-alice", &obj), &alice(), &c).expect("ok");
            assert_eq!(f.violations.len(), 1);
            assert_mentions(
                &f.violations[0],
                &["Ingress tenant-alice/web", "--root-host"],
            );
            // Outside tenant scope nothing is checked, configuration included.
            let f = evaluate(&review("Ingress", "cozy-system", &obj), &alice(), &c);
            assert_eq!(f, Ok(Findings::ok()));
        }
    }

    #[test]
    fn outside_tenant_scope_is_unchecked() {
        let obj = json!({"spec": {"defaultBackend": {}, "rules": [{"host": "example.org"}, {}]}});
        for ns_name in ["cozy-system", "default", "kube-system"] {
            for (_, ns) in missing_apexes() {
                let r = review("Ingress", ns_name, &obj);
                assert_eq!(evaluate(&r, &ns, &cfg()), Ok(Findings::ok()));
            }
        }
    }

    #[test]
    fn warnings_stay_short() {
        let long = format!(
            "{}.{}.{}.customer.com",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63)
        );
        let obj = ingress(json!([long]), json!([]));
        let f = run(&alice(), &obj).expect("ok");
        assert_eq!(f.warnings.len(), 1);
        assert!(f.warnings[0].len() <= MAX_WARNING, "{}", f.warnings[0]);
        assert!(f.warnings[0].contains("custom domain"));
        let c = PolicyConfig {
            root_host: Some(format!("{}.org", "r".repeat(150))),
            ..cfg()
        };
        let r = review("Ingress", "tenant-alice", &obj);
        let f = evaluate(&r, &alice(), &c).expect("ok");
        assert!(f.warnings[0].len() <= MAX_WARNING);
    }

    #[test]
    fn custom_domain_warnings_are_deduplicated_and_capped() {
        let hosts: Vec<String> = (0..20).map(|i| format!("shop{i}.customer.com")).collect();
        let obj = ingress(json!(hosts), json!(hosts));
        let f = run(&alice(), &obj).expect("ok");
        assert!(f.violations.is_empty());
        assert_eq!(f.warnings.len(), MAX_CUSTOM_DOMAIN_WARNINGS + 1, "{f:?}");
        assert!(f.warnings[0].contains("shop0.customer.com"));
        assert_mentions(
            &f.warnings[MAX_CUSTOM_DOMAIN_WARNINGS],
            &["12 more", "example.org"],
        );
    }

    #[test]
    fn many_bad_hosts_are_capped() {
        let hosts: Vec<String> = (0..500).map(|i| format!("h{i}.bob.example.org")).collect();
        let obj = ingress(json!(hosts), json!([]));
        let f = run(&alice(), &obj).expect("ok");
        assert_eq!(f.violations.len(), super::super::util::MAX_VIOLATIONS + 1);
        assert!(f.violations[0].contains("h0.bob.example.org"));
        assert!(
            f.violations
                .last()
                .is_some_and(|m| m.contains("more problems"))
        );
    }

    #[test]
    fn wrong_shapes_are_shape_errors() {
        let cases = [
            (json!({"spec": []}), "spec"),
            (json!({"spec": {"rules": {"host": "a"}}}), "spec.rules"),
            (json!({"spec": {"rules": ["a"]}}), "spec.rules[0]"),
            (
                json!({"spec": {"rules": [{}, {"host": 1}]}}),
                "spec.rules[1].host",
            ),
            (json!({"spec": {"tls": "x"}}), "spec.tls"),
            (json!({"spec": {"tls": [1]}}), "spec.tls[0]"),
            (
                json!({"spec": {"tls": [{"hosts": "a.alice.example.org"}]}}),
                "spec.tls[0].hosts",
            ),
            (
                json!({"spec": {"tls": [{}, {"hosts": ["a", false]}]}}),
                "spec.tls[1].hosts[1]",
            ),
            (
                json!({"spec": {"tls": [{"hosts": [null]}]}}),
                "spec.tls[0].hosts[0]",
            ),
        ];
        for (obj, field) in cases {
            let err = run(&alice(), &obj).expect_err("shape");
            assert_eq!(err.field, field, "{obj}");
            assert_eq!(err.kind, "Ingress");
        }
    }
}
