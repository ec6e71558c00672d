//! Layer 8 — Ingress hostnames (SPEC §2.3).
//!
//! Ingress is the default dataplane, so this is the layer most tenant apps actually meet. A
//! host is acceptable when it is inside the namespace apex, or when it is an exact name wholly
//! outside the platform root `R` (a tenant's own custom domain). Catch-alls — a rule without a
//! host, `spec.defaultBackend` — are denied because on a shared ingress controller they would
//! capture traffic for names the tenant does not own.
//!
//! ingress-nginx also takes hostnames from annotations: `server-alias` adds names to the
//! server block (judged like rule hosts), and the snippet annotations paste raw nginx
//! configuration, `server_name` included, so they are denied outright in tenant scope. A
//! custom domain is never one inside another namespace's apex (`ApexOwners`): that name
//! belongs to the tenant whose namespace carries it.

use super::util::{
    Violations, as_array, as_object, as_str, clip, get, missing_apex, quoted, root, shape_error,
};
use super::{
    ApexOwners, Findings, HOST_LABEL, LayerResult, NamespaceContext, NoApexOwners, PolicyConfig,
    Review, ShapeError, object_ref,
};
use crate::hostname;

/// The API server relays admission warnings only up to this length (SPEC §2.5).
const MAX_WARNING: usize = crate::warning::MAX_WARNING_LEN;
/// Custom-domain warnings listed one by one before they are summarised.
const MAX_CUSTOM_DOMAIN_WARNINGS: usize = 8;

/// ingress-nginx: extra server names for the Ingress's hosts, separated by commas or spaces.
pub const SERVER_ALIAS: &str = "nginx.ingress.kubernetes.io/server-alias";
/// ingress-nginx: raw nginx configuration pasted into the server block / every location.
pub const SERVER_SNIPPET: &str = "nginx.ingress.kubernetes.io/server-snippet";
pub const CONFIGURATION_SNIPPET: &str = "nginx.ingress.kubernetes.io/configuration-snippet";
/// The annotations the layer reads (the projection decodes exactly these).
pub const ANNOTATIONS: [&str; 3] = [SERVER_ALIAS, SERVER_SNIPPET, CONFIGURATION_SNIPPET];

/// Something in the Ingress the layer judges, in document order.
enum Item<'a> {
    /// A snippet annotation with content.
    Snippet(&'static str),
    DefaultBackend,
    HostlessRule(usize),
    Host {
        at: HostAt,
        host: &'a str,
    },
}

/// Where a host sits; rendered only when a message needs it, so admitted objects cost no
/// path strings.
#[derive(Clone, Copy)]
enum HostAt {
    /// The n-th entry of the server-alias annotation.
    Alias(usize),
    Rule(usize),
    Tls(usize, usize),
}

impl std::fmt::Display for HostAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostAt::Alias(i) => write!(f, "annotation {SERVER_ALIAS} entry {}", i + 1),
            HostAt::Rule(i) => write!(f, "spec.rules[{i}].host"),
            HostAt::Tls(i, j) => write!(f, "spec.tls[{i}].hosts[{j}]"),
        }
    }
}

pub fn evaluate(review: &Review<'_>, ns: &NamespaceContext, cfg: &PolicyConfig) -> LayerResult {
    evaluate_with(review, ns, &NoApexOwners, cfg)
}

/// [`evaluate`] knowing which apexes other namespaces carry.
pub fn evaluate_with(
    review: &Review<'_>,
    ns: &NamespaceContext,
    others: &dyn ApexOwners,
    cfg: &PolicyConfig,
) -> LayerResult {
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
            Item::Snippet(key) => violations.push(|| {
                format!(
                    "{}: annotation {key} is not allowed in tenant namespaces: a snippet is raw \
                     nginx configuration for the shared ingress controller and can set any \
                     server_name; remove it and publish hosts with spec.rules[].host ({})",
                    object(),
                    allowed()
                )
            }),
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
                } else if !others.complete() {
                    violations.push(|| {
                        format!(
                            "{}: {at}: host {} cannot be judged yet: a custom domain must not \
                             be within another namespace's apex, and the webhook's namespace \
                             index has not finished reading every namespace's apex; retry in a \
                             few seconds ({})",
                            object(),
                            quoted(host),
                            allowed()
                        )
                    });
                } else if let Some(taken) = other_apex(host, others, review.namespace) {
                    // The owner is not named: which tenant holds which domain is not this
                    // tenant's business; an operator finds it with a label selector.
                    violations.push(|| {
                        format!(
                            "{}: {at}: host {} is not allowed: it is within {taken}, the apex \
                             of another tenant's namespace ({HOST_LABEL}={taken}); a custom \
                             domain must not be within another namespace's apex ({})",
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

/// The suffix of `host` (itself included) that another namespace than `own` carries as its
/// apex, walking `a.b.c`, `b.c`, `c`: one lookup per label, no scan of the namespaces.
fn other_apex<'h>(host: &'h str, others: &dyn ApexOwners, own: &str) -> Option<&'h str> {
    let mut suffix = host;
    loop {
        if others.owned_by_other(suffix, own) {
            return Some(suffix);
        }
        suffix = suffix.split_once('.')?.1;
    }
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
    let metadata = as_object(review, get(object, "metadata"), || "metadata".to_string())?;
    let annotations = as_object(review, get(metadata, "annotations"), || {
        "metadata.annotations".to_string()
    })?;
    for key in [SERVER_SNIPPET, CONFIGURATION_SNIPPET] {
        let value = as_str(review, get(annotations, key), || {
            format!("metadata.annotations[{key}]")
        })?;
        // An empty snippet configures nothing.
        if value.is_some_and(|v| !v.trim().is_empty()) {
            items.push(Item::Snippet(key));
        }
    }
    let aliases = as_str(review, get(annotations, SERVER_ALIAS), || {
        format!("metadata.annotations[{SERVER_ALIAS}]")
    })?;
    for (i, host) in aliases
        .unwrap_or_default()
        .split(|c: char| c == ',' || c.is_ascii_whitespace())
        .filter(|h| !h.is_empty())
        .enumerate()
    {
        items.push(Item::Host {
            at: HostAt::Alias(i),
            host,
        });
    }
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
                assert!(w.chars().count() <= MAX_WARNING);
            }
        }
    }

    /// Apexes other namespaces carry, as the namespace index would report them.
    struct Others(&'static [(&'static str, &'static str)]);

    impl ApexOwners for Others {
        fn owned_by_other(&self, apex: &str, except: &str) -> bool {
            self.0.iter().any(|(ns, a)| *a == apex && *ns != except)
        }
    }

    const OTHERS: Others = Others(&[
        ("tenant-cust", "customer1.io"),
        ("tenant-shop", "shop.customer2.io"),
        ("tenant-alice", "alice-own.io"),
        ("tenant-root", "example.org"),
    ]);

    /// An index whose first list is not in yet.
    struct Listing;

    impl ApexOwners for Listing {
        fn owned_by_other(&self, _apex: &str, _except: &str) -> bool {
            false
        }

        fn complete(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_custom_domain_waits_for_the_apex_index() {
        // Before the namespace index has every apex, "nobody else owns it" is unknown: a
        // custom domain is denied with a retry; hosts within the own apex do not need it.
        let ns = ns_apex("alice.example.org");
        let run_with = |obj: &Value| {
            let r = review("Ingress", "tenant-alice", obj);
            evaluate_with(&r, &ns, &Listing, &cfg()).expect("well-formed")
        };
        let f = run_with(&ingress(json!(["shop.customer.com"]), json!([])));
        assert_eq!(f.violations.len(), 1, "{f:?}");
        assert_mentions(
            &f.violations[0],
            &[
                "shop.customer.com",
                "cannot be judged yet",
                "retry",
                "must be within",
            ],
        );
        let f = run_with(&ingress(json!(["www.alice.example.org"]), json!([])));
        assert!(f.violations.is_empty(), "{f:?}");
    }

    #[test]
    fn custom_domains_within_another_namespaces_apex_are_denied() {
        // (own apex, host, denied?)
        let cases = [
            ("alice.example.org", "customer1.io", true),
            ("alice.example.org", "shop.customer1.io", true),
            ("alice.example.org", "a.b.customer1.io", true),
            ("alice.example.org", "notcustomer1.io", false),
            ("alice.example.org", "customer1.io.evil.com", false),
            ("alice.example.org", "shop.customer2.io", true),
            ("alice.example.org", "x.shop.customer2.io", true),
            // The parent of another apex is not inside it.
            ("alice.example.org", "customer2.io", false),
            ("alice.example.org", "www.customer2.io", false),
            // The object's own namespace is never "another".
            ("alice.example.org", "alice-own.io", false),
            ("alice.example.org", "www.alice-own.io", false),
            // Inside the own apex first: a parent publishing under a child's custom apex.
            ("customer1.io", "shop.customer1.io", false),
            ("customer2.io", "shop.customer2.io", false),
        ];
        for (apex, host, denied) in cases {
            let obj = ingress(json!([host]), json!([host]));
            let r = review("Ingress", "tenant-alice", &obj);
            let f = evaluate_with(&r, &ns_apex(apex), &OTHERS, &cfg()).expect("ok");
            if denied {
                assert_eq!(f.violations.len(), 2, "{apex} {host}: {f:?}");
                for (v, at) in f.violations.iter().zip(["spec.rules[0]", "spec.tls[0]"]) {
                    assert_mentions(
                        v,
                        &[
                            at,
                            &format!("host \"{host}\" is not allowed"),
                            "another tenant's namespace",
                            "must not be within another namespace's apex",
                            "must be within",
                        ],
                    );
                    assert!(
                        !v.contains("tenant-cust") && !v.contains("tenant-shop"),
                        "{v}"
                    );
                }
                assert!(f.warnings.is_empty(), "{f:?}");
            } else {
                assert!(f.violations.is_empty(), "{apex} {host}: {f:?}");
            }
        }
        // Without an index nothing is taken (offline callers, the plain `evaluate`).
        let obj = ingress(json!(["customer1.io"]), json!([]));
        assert!(run(&alice(), &obj).expect("ok").violations.is_empty());
    }

    fn annotated(annotations: Value, rule_hosts: Value) -> Value {
        let mut obj = ingress(rule_hosts, json!([]));
        obj["metadata"]["annotations"] = annotations;
        obj
    }

    #[test]
    fn server_alias_entries_are_judged_like_rule_hosts() {
        // (server-alias value, offending values in order, warned custom domains)
        let cases: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
            ("", vec![], vec![]),
            ("  , ,", vec![], vec![]),
            ("a.alice.example.org", vec![], vec![]),
            ("a.alice.example.org,b.alice.example.org", vec![], vec![]),
            (
                "a.alice.example.org b.alice.example.org\t*.alice.example.org",
                vec![],
                vec![],
            ),
            (
                "dashboard.example.org",
                vec!["entry 1", "\"dashboard.example.org\""],
                vec![],
            ),
            (
                "a.alice.example.org, x.bob.example.org",
                vec!["entry 2", "\"x.bob.example.org\""],
                vec![],
            ),
            ("shop.customer.com", vec![], vec!["shop.customer.com"]),
            ("*.customer.com", vec!["entry 1", "wildcard"], vec![]),
            (
                "customer1.io",
                vec!["entry 1", "another tenant's namespace"],
                vec![],
            ),
            (
                "a.alice.example.org;server_name",
                vec!["entry 1", "is invalid"],
                vec![],
            ),
            (
                "Shop.alice.example.org",
                vec!["entry 1", "uppercase"],
                vec![],
            ),
        ];
        for (alias, offending, warned) in cases {
            let obj = annotated(
                json!({SERVER_ALIAS: alias, "other": "x"}),
                json!(["www.alice.example.org"]),
            );
            let r = review("Ingress", "tenant-alice", &obj);
            let f = evaluate_with(&r, &alice(), &OTHERS, &cfg()).expect("ok");
            if offending.is_empty() {
                assert!(f.violations.is_empty(), "{alias:?}: {f:?}");
            } else {
                assert_eq!(f.violations.len(), 1, "{alias:?}: {f:?}");
                let mut phrases = vec![SERVER_ALIAS, "Ingress tenant-alice/web"];
                phrases.extend(&offending);
                assert_mentions(&f.violations[0], &phrases);
            }
            assert_eq!(f.warnings.len(), warned.len(), "{alias:?}: {f:?}");
        }
    }

    #[test]
    fn snippet_annotations_are_denied_in_tenant_scope() {
        for key in [SERVER_SNIPPET, CONFIGURATION_SNIPPET] {
            let obj = annotated(
                json!({key: "server_name dashboard.example.org;"}),
                json!(["www.alice.example.org"]),
            );
            let f = run(&alice(), &obj).expect("ok");
            assert_eq!(f.violations.len(), 1, "{key}: {f:?}");
            assert_mentions(
                &f.violations[0],
                &[
                    "Ingress tenant-alice/web",
                    key,
                    "not allowed in tenant namespaces",
                    "server_name",
                ],
            );
            // Empty snippets configure nothing.
            for empty in ["", "  \n"] {
                let obj = annotated(json!({key: empty}), json!(["www.alice.example.org"]));
                assert_eq!(run(&alice(), &obj), Ok(Findings::ok()), "{key} {empty:?}");
            }
            // Platform namespaces may use them.
            let obj = annotated(
                json!({key: "return 403;"}),
                json!(["dashboard.example.org"]),
            );
            let r = review("Ingress", "cozy-dashboard", &obj);
            assert_eq!(evaluate(&r, &alice(), &cfg()), Ok(Findings::ok()));
        }
        // Both snippets and an alias: every problem listed, annotations first.
        let obj = annotated(
            json!({SERVER_SNIPPET: "x", CONFIGURATION_SNIPPET: "y", SERVER_ALIAS: "x.bob.example.org"}),
            json!(["x.evil.example.org"]),
        );
        let f = run(&alice(), &obj).expect("ok");
        let order = [
            SERVER_SNIPPET,
            CONFIGURATION_SNIPPET,
            SERVER_ALIAS,
            "spec.rules[0]",
        ];
        assert_eq!(f.violations.len(), order.len(), "{f:?}");
        for (v, what) in f.violations.iter().zip(order) {
            assert!(v.contains(what), "{v} lacks {what}");
        }
    }

    #[test]
    fn annotation_shapes_are_shape_errors() {
        let cases = [
            (
                json!({"metadata": {"annotations": []}}),
                "metadata.annotations".to_string(),
            ),
            (json!({"metadata": "x"}), "metadata".to_string()),
            (
                json!({"metadata": {"annotations": {SERVER_ALIAS: 5}}}),
                format!("metadata.annotations[{SERVER_ALIAS}]"),
            ),
            (
                json!({"metadata": {"annotations": {SERVER_SNIPPET: ["x"]}}}),
                format!("metadata.annotations[{SERVER_SNIPPET}]"),
            ),
        ];
        for (obj, field) in cases {
            let err = run(&alice(), &obj).expect_err("shape");
            assert_eq!(err.field, field, "{obj}");
        }
        // Null annotations read as absent.
        let obj = json!({"metadata": {"annotations": {SERVER_ALIAS: null}}, "spec": {}});
        assert_eq!(run(&alice(), &obj), Ok(Findings::ok()));
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
        assert!(
            f.warnings[0].chars().count() <= MAX_WARNING,
            "{}",
            f.warnings[0]
        );
        assert!(f.warnings[0].contains("custom domain"));
        let c = PolicyConfig {
            root_host: Some(format!("{}.org", "r".repeat(150))),
            ..cfg()
        };
        let r = review("Ingress", "tenant-alice", &obj);
        let f = evaluate(&r, &alice(), &c).expect("ok");
        assert!(f.warnings[0].chars().count() <= MAX_WARNING);
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
