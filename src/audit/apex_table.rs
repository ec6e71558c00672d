//! The namespace apex table (SPEC §3.9): layers 4 and 5 judge who writes a tenant's apex, not
//! what is stored, so what the audit judges of them is the table of apexes itself — an apex
//! outside `--root-host`, one apex carried by two namespaces, a tenant namespace without one.
//! Pure: a namespace's label and how many namespaces carry its apex in, findings out.

use std::collections::HashMap;

use super::judge::Verdict;
use crate::hostname;
use crate::platform::HOST_LABEL;
use crate::policy::PolicyConfig;

/// The apex as the table compares it: lowercased, `None` when the label is absent or empty.
pub fn apex_key(host: Option<&str>) -> Option<String> {
    host.filter(|h| !h.is_empty()).map(str::to_ascii_lowercase)
}

/// The findings about namespace `name`, whose host label is `host` as written (`Some("")` when
/// empty), when `owners` namespaces (itself included) carry the same apex. `None` when no
/// rule applies: a namespace outside tenant scope without an apex.
pub fn findings(
    cfg: &PolicyConfig,
    name: &str,
    host: Option<&str>,
    owners: usize,
) -> Option<Verdict> {
    let tenant = cfg.in_tenant_scope(name);
    let Some(apex) = apex_key(host) else {
        if !tenant {
            return None;
        }
        let how = match host {
            Some(_) => "its namespace.cozystack.io/host label is set to \"\"",
            None => "it has no namespace.cozystack.io/host label",
        };
        return Some(Verdict::Fail(
            vec![format!(
                "Namespace {name}: a tenant namespace without an apex: {how}, so every Gateway, \
                 route and Ingress in it is denied (fail closed) and stored ones publish under no \
                 known apex; the platform writes the label when it creates the tenant: set \
                 {HOST_LABEL} as trusted platform automation"
            )]
            .into(),
        ));
    };
    let written = host.unwrap_or_default();
    let mut problems = Vec::new();
    if let Some(root) = cfg.root_host.as_deref().filter(|r| !r.is_empty())
        && !hostname::within(&apex, root)
    {
        problems.push(format!(
            "Namespace {name}: apex {apex:?} ({HOST_LABEL}) is not within the platform root host \
             {root} (--root-host): the platform hands out tenant apexes under its root, so this \
             label was written by hand or by a misconfigured platform; check it, and every \
             hostname the namespace publishes under it"
        ));
    }
    if owners > 1 {
        let others = owners - 1;
        let plural = if others == 1 { "" } else { "s" };
        problems.push(format!(
            "Namespace {name}: apex {apex:?} ({HOST_LABEL}) is also the apex of {others} other \
             namespace{plural}: each of them may publish every hostname under it, the others' \
             included; give each tenant its own apex (find them with `kubectl get namespaces \
             -l {HOST_LABEL}={written}`)"
        ));
    }
    Some(if problems.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Fail(problems.into())
    })
}

/// The whole table over `namespaces` (name, host label as written), in their order: one
/// verdict for each namespace a rule applies to.
pub fn table<'a>(
    cfg: &PolicyConfig,
    namespaces: impl IntoIterator<Item = (&'a str, Option<&'a str>)> + Clone,
) -> Vec<(&'a str, Verdict)> {
    let mut owners: HashMap<String, usize> = HashMap::new();
    for (_, host) in namespaces.clone() {
        if let Some(apex) = apex_key(host) {
            *owners.entry(apex).or_default() += 1;
        }
    }
    namespaces
        .into_iter()
        .filter_map(|(name, host)| {
            let n = apex_key(host).map_or(0, |a| owners[&a]);
            findings(cfg, name, host, n).map(|v| (name, v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(root: Option<&str>) -> PolicyConfig {
        PolicyConfig {
            root_host: root.map(str::to_string),
            ..PolicyConfig::default()
        }
    }

    /// The messages' rule, for the table: which findings a namespace has.
    fn kinds(v: &Option<Verdict>) -> Option<Vec<&'static str>> {
        v.as_ref().map(|v| match v {
            Verdict::Pass => vec![],
            Verdict::Fail(m) => m
                .iter()
                .map(|m| {
                    if m.contains("without an apex") {
                        "missing"
                    } else if m.contains("not within the platform root") {
                        "outside-root"
                    } else if m.contains("also the apex of") {
                        "shared"
                    } else {
                        "?"
                    }
                })
                .collect(),
            Verdict::Error(_) => vec!["error"],
        })
    }

    #[test]
    fn one_namespace() {
        // (root host, namespace, host label, owners of its apex, findings; None: no rule applies)
        type Case<'a> = (
            Option<&'a str>,
            &'a str,
            Option<&'a str>,
            usize,
            Option<Vec<&'a str>>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                Some("example.org"),
                "tenant-alice",
                Some("alice.example.org"),
                1,
                Some(vec![]),
            ),
            (
                Some("example.org"),
                "tenant-root",
                Some("example.org"),
                1,
                Some(vec![]),
            ),
            (
                Some("example.org"),
                "tenant-alice",
                Some("Alice.Example.ORG"),
                1,
                Some(vec![]),
            ),
            (
                Some("example.org"),
                "tenant-alice",
                None,
                0,
                Some(vec!["missing"]),
            ),
            (
                Some("example.org"),
                "tenant-alice",
                Some(""),
                0,
                Some(vec!["missing"]),
            ),
            (Some("example.org"), "cozy-system", None, 0, None),
            (Some("example.org"), "default", Some(""), 0, None),
            (
                Some("example.org"),
                "tenant-shop",
                Some("shop.com"),
                1,
                Some(vec!["outside-root"]),
            ),
            (
                Some("example.org"),
                "tenant-evil",
                Some("evilexample.org"),
                1,
                Some(vec!["outside-root"]),
            ),
            // Outside tenant scope an apex is judged all the same: it is an apex for layer 8.
            (
                Some("example.org"),
                "cozy-x",
                Some("x.com"),
                1,
                Some(vec!["outside-root"]),
            ),
            (
                Some("example.org"),
                "tenant-a",
                Some("a.example.org"),
                2,
                Some(vec!["shared"]),
            ),
            (
                Some("example.org"),
                "tenant-a",
                Some("a.com"),
                3,
                Some(vec!["outside-root", "shared"]),
            ),
            // Without a root host that rule cannot run; the others still do.
            (None, "tenant-shop", Some("shop.com"), 1, Some(vec![])),
            (None, "tenant-a", Some("a.com"), 2, Some(vec!["shared"])),
            (None, "tenant-a", None, 0, Some(vec!["missing"])),
        ];
        for (root, name, host, owners, want) in cases {
            let got = findings(&cfg(root), name, host, owners);
            assert_eq!(
                kinds(&got),
                want,
                "{root:?} {name} {host:?} {owners}: {got:?}"
            );
        }
    }

    #[test]
    fn messages_name_the_namespace_the_rule_and_the_fix() {
        let c = cfg(Some("example.org"));
        let Some(Verdict::Fail(m)) = findings(&c, "tenant-a", Some("A.com"), 3) else {
            panic!("fails")
        };
        assert!(
            m[0].starts_with("Namespace tenant-a: apex \"a.com\""),
            "{}",
            m[0]
        );
        assert!(m[0].contains("example.org (--root-host)"), "{}", m[0]);
        assert!(m[1].contains("2 other namespaces"), "{}", m[1]);
        assert!(
            m[1].contains("-l namespace.cozystack.io/host=A.com"),
            "{}",
            m[1]
        );
        let Some(Verdict::Fail(m)) = findings(&c, "tenant-a", Some("a.example.org"), 2) else {
            panic!("fails")
        };
        assert!(m[0].contains("1 other namespace:"), "{}", m[0]);
        let Some(Verdict::Fail(m)) = findings(&c, "tenant-b", Some(""), 0) else {
            panic!("fails")
        };
        assert!(m[0].contains("set to \"\""), "{}", m[0]);
    }

    #[test]
    fn the_table_counts_owners_case_insensitively() {
        let c = cfg(Some("example.org"));
        let namespaces = [
            ("tenant-a", Some("shared.example.org")),
            ("tenant-b", Some("Shared.example.org")),
            ("tenant-c", Some("c.example.org")),
            ("tenant-d", None),
            ("kube-system", None),
            ("cozy-x", Some("c2.example.org")),
        ];
        let t = table(&c, namespaces.iter().copied());
        let got: Vec<(&str, Option<Vec<&str>>)> = t
            .iter()
            .map(|(n, v)| (*n, kinds(&Some(v.clone()))))
            .collect();
        assert_eq!(
            got,
            vec![
                ("tenant-a", Some(vec!["shared"])),
                ("tenant-b", Some(vec!["shared"])),
                ("tenant-c", Some(vec![])),
                ("tenant-d", Some(vec!["missing"])),
                ("cozy-x", Some(vec![])),
            ]
        );
    }
}
