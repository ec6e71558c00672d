//! Namespace labels and annotations (SPEC §3.5).
//!
//! The TenantGateway's namespace and each attachedNamespaces entry get
//! `namespace.cozystack.io/gateway=<ns>` plus the annotation
//! `gateway.cozystack.io/attached-by=<ns>`, which marks the label as ours. Only marked labels
//! are ever changed or removed: a gateway label the platform wrote (no annotation) is never
//! touched. The platform's own TenantGateway controller marks its attachments with
//! `cozystack.io/gateway-attached-by=<ns>` (SPEC §3.8): that mark counts as ours for the
//! same TenantGateway namespace (ours to change or remove, not to be stolen) and is replaced
//! by ours on the next write, so a platform switching controllers keeps its attachments.
//!
//! Everything here is hostile input a tenant may have written (a TenantGateway, an annotation),
//! so the rules hold without the webhook:
//! - only valid TenantGateways claim: the edge passes only those in `other_claims`, and `plan`
//!   runs only for a valid one;
//! - the reconciler never writes or removes labels on a tenant-scope namespace other than its
//!   own TenantGateway's (tenant entries are skipped by `settings`, and a forged attached-by
//!   annotation on a tenant namespace is ignored);
//! - an existing attachment is never stolen: a namespace whose annotation names another valid
//!   TenantGateway that still lists it stays there, and ours stays ours;
//! - between new claims the TenantGateway whose apex contains the other's wins, then the
//!   smaller namespace name;
//! - messages never name the TenantGateway or namespace that holds an entry (a tenant may not
//!   be able to read it).

use std::collections::{BTreeMap, BTreeSet};

use super::inputs::{AttachClaim, Inputs, Settings, TgwFacts};
use crate::cluster::nsmeta::NamespaceMeta;
use crate::hostname;
use crate::platform::Scope;

/// A change to one namespace's metadata.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum NamespaceWrite {
    /// Set the gateway label and the attached-by annotation to `gateway`.
    Attach { namespace: String, gateway: String },
    /// Remove the attached-by annotation, and the gateway label when it still says `gateway`.
    Detach { namespace: String, gateway: String },
}

impl NamespaceWrite {
    pub fn namespace(&self) -> &str {
        match self {
            NamespaceWrite::Attach { namespace, .. } | NamespaceWrite::Detach { namespace, .. } => {
                namespace
            }
        }
    }
}

/// The namespace side of one reconcile.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelPlan {
    pub writes: Vec<NamespaceWrite>,
    /// Attached namespaces whose routes this Gateway admits (held, or not created yet).
    pub held: BTreeSet<String>,
    /// One sentence per namespace not attached, sorted.
    pub problems: Vec<String>,
}

/// The attach claim another TenantGateway makes, when it may make one (SPEC §3.5): not being
/// deleted, not a Duplicate, a spec that passes its checks, and in tenant scope the apex of
/// its own namespace. Its usable entries only: tenant-scope entries are never honoured.
pub fn valid_claim(
    facts: &TgwFacts,
    deleting: bool,
    older_sibling: bool,
    namespace_apex: Option<&str>,
    scope: &Scope,
) -> Option<AttachClaim> {
    if deleting || older_sibling {
        return None;
    }
    let settings = facts.settings(scope).ok()?;
    if super::inputs::apex_problem(&facts.namespace, namespace_apex, &settings.apex, scope)
        .is_some()
    {
        return None;
    }
    Some(AttachClaim {
        namespace: facts.namespace.clone(),
        name: facts.name.clone(),
        apex: settings.apex,
        attached_namespaces: settings.attached,
    })
}

/// True when a claim from `a` (namespace, apex) beats one from `b` for a namespace nobody
/// holds yet: the apex that strictly contains the other's, then the smaller namespace.
fn beats(a: (&str, &str), b: (&str, &str)) -> bool {
    let (a_ns, a_apex) = a;
    let (b_ns, b_apex) = b;
    let a_contains_b = hostname::within(b_apex, a_apex);
    let b_contains_a = hostname::within(a_apex, b_apex);
    match (a_contains_b, b_contains_a) {
        (true, false) => true,
        (false, true) => false,
        _ => a_ns < b_ns,
    }
}

/// Plan the labels for `inputs.tgw` with checked `settings`.
pub fn plan(inputs: &Inputs, settings: &Settings, scope: &Scope) -> LabelPlan {
    let own = inputs.tgw.namespace.as_str();
    let mut out = LabelPlan::default();
    let mut targets: Vec<&str> = vec![own];
    targets.extend(settings.attached.iter().map(String::as_str));
    let mut keep: BTreeSet<&str> = BTreeSet::new();

    // namespace -> the rival claims listing it; built once, so the plan stays linear in the
    // claims' entries rather than targets × claims.
    let wanted: BTreeSet<&str> = targets.iter().copied().collect();
    let mut rivals: BTreeMap<&str, Vec<&AttachClaim>> = BTreeMap::new();
    for c in inputs.other_claims.iter().filter(|c| c.namespace != own) {
        for a in c.attached_namespaces.iter().map(String::as_str) {
            if wanted.contains(a) {
                rivals.entry(a).or_default().push(c);
            }
        }
    }
    let namespaces: BTreeMap<&str, &NamespaceMeta> =
        inputs.namespaces.iter().map(|n| (n.name(), &**n)).collect();

    for t in targets {
        let ns = namespaces.get(t).copied();
        if t != own {
            let claims = rivals.get(t).map(Vec::as_slice).unwrap_or_default();
            let holder = ns.and_then(|n| n.attached_by());
            let held_elsewhere = match holder {
                // Ours already: never given up to a later claim.
                Some(h) if h == own => false,
                Some(h) if claims.iter().any(|c| c.namespace == h) => true,
                // Nobody (valid) holds it: the best new claim takes it.
                _ => claims
                    .iter()
                    .any(|c| beats((&c.namespace, &c.apex), (own, &settings.apex))),
            };
            if held_elsewhere {
                out.problems.push(format!(
                    "attachedNamespaces entry {t} is attached to another TenantGateway; not \
                     attached here"
                ));
                continue;
            }
        }
        let Some(ns) = ns else {
            // Not created yet: admit its routes now, label it when it appears.
            if t != own {
                out.held.insert(t.to_string());
            }
            continue;
        };
        match (ns.gateway(), ns.attached_by()) {
            // Ours, unless the mark is still the platform controller's: replaced by ours.
            (Some(g), Some(by)) if g == own && by == own && !ns.platform_mark() => {}
            // The platform wrote it with the right value: nothing to mark.
            (Some(g), None) if g == own => {}
            (Some(_), None) => {
                out.problems.push(format!(
                    "attachedNamespaces entry {t} already publishes through another Gateway \
                     (its namespace.cozystack.io/gateway label, not written by a \
                     TenantGateway); not attached here"
                ));
                continue;
            }
            _ => out.writes.push(NamespaceWrite::Attach {
                namespace: t.to_string(),
                gateway: own.to_string(),
            }),
        }
        keep.insert(t);
        if t != own {
            out.held.insert(t.to_string());
        }
    }

    for ns in &inputs.namespaces {
        if ours_to_remove(ns, own, scope) && !keep.contains(ns.name()) {
            out.writes.push(NamespaceWrite::Detach {
                namespace: ns.name().to_string(),
                gateway: own.to_string(),
            });
        }
    }
    out.writes.sort();
    out.writes.dedup();
    out.problems.sort();
    out
}

/// A mark this TenantGateway may undo: its annotation names us, and the namespace is our own
/// or outside tenant scope (a tenant can write the annotation on its own namespace; we never
/// wrote it there, so we never act on it).
fn ours_to_remove(ns: &NamespaceMeta, own: &str, scope: &Scope) -> bool {
    ns.attached_by() == Some(own) && (ns.name() == own || !scope.is_tenant(ns.name()))
}

/// Everything to undo when the TenantGateway goes (finalizer).
pub fn cleanup(inputs: &Inputs, scope: &Scope) -> Vec<NamespaceWrite> {
    let own = inputs.tgw.namespace.as_str();
    let mut writes: Vec<NamespaceWrite> = inputs
        .namespaces
        .iter()
        .filter(|n| ours_to_remove(n, own, scope))
        .map(|n| NamespaceWrite::Detach {
            namespace: n.name().to_string(),
            gateway: own.to_string(),
        })
        .collect();
    writes.sort();
    writes.dedup();
    writes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::{ATTACHED_BY_ANNOTATION, GATEWAY_LABEL};
    use crate::reconcile::inputs::AttachClaim;
    use crate::reconcile::testing::{self, namespace};

    fn attach(ns: &str) -> NamespaceWrite {
        NamespaceWrite::Attach {
            namespace: ns.into(),
            gateway: "tenant-alice".into(),
        }
    }

    fn detach(ns: &str) -> NamespaceWrite {
        NamespaceWrite::Detach {
            namespace: ns.into(),
            gateway: "tenant-alice".into(),
        }
    }

    fn run(w: &Inputs) -> LabelPlan {
        plan(
            w,
            &w.tgw.settings(&Default::default()).expect("valid spec"),
            &Scope::default(),
        )
    }

    #[test]
    fn attaches_own_and_listed_namespaces() {
        let mut w = testing::world();
        w.tgw.spec.attached_namespaces = vec!["cozy-harbor".into(), "cozy-missing".into()];
        w.namespaces.push(namespace("cozy-harbor", &[], &[]));
        let p = run(&w);
        // tenant-alice carries the platform's gateway label already: left alone.
        assert_eq!(p.writes, vec![attach("cozy-harbor")]);
        assert_eq!(
            p.held,
            ["cozy-harbor", "cozy-missing"].map(String::from).into()
        );
        assert!(p.problems.is_empty());
    }

    #[test]
    fn removes_only_what_it_wrote() {
        let mut w = testing::world();
        w.namespaces.push(namespace(
            "cozy-old",
            &[(GATEWAY_LABEL, "tenant-alice")],
            &[(ATTACHED_BY_ANNOTATION, "tenant-alice")],
        ));
        // Same label, no annotation: the platform's, never removed.
        w.namespaces.push(namespace(
            "cozy-platform",
            &[(GATEWAY_LABEL, "tenant-alice")],
            &[],
        ));
        // Another TenantGateway's write.
        w.namespaces.push(namespace(
            "cozy-other",
            &[(GATEWAY_LABEL, "tenant-bob")],
            &[(ATTACHED_BY_ANNOTATION, "tenant-bob")],
        ));
        let p = run(&w);
        assert_eq!(p.writes, vec![detach("cozy-old")]);
        assert_eq!(cleanup(&w, &Scope::default()), vec![detach("cozy-old")]);
    }

    #[test]
    fn never_steals_a_platform_label() {
        let mut w = testing::world();
        w.tgw.spec.attached_namespaces = vec!["cozy-x".into()];
        w.namespaces
            .push(namespace("cozy-x", &[(GATEWAY_LABEL, "tenant-root")], &[]));
        let p = run(&w);
        assert!(p.writes.is_empty());
        assert!(p.held.is_empty());
        assert_eq!(p.problems.len(), 1);
        assert!(
            p.problems[0].contains("cozy-x already publishes through another Gateway")
                && !p.problems[0].contains("tenant-root"),
            "{:?}",
            p.problems
        );
    }

    #[test]
    fn closest_to_root_keeps_a_contested_namespace() {
        let mut w = testing::world();
        w.tgw.spec.attached_namespaces = vec!["cozy-x".into()];
        w.namespaces.push(namespace(
            "cozy-x",
            &[(GATEWAY_LABEL, "tenant-root")],
            &[(ATTACHED_BY_ANNOTATION, "tenant-root")],
        ));
        let root = AttachClaim {
            namespace: "tenant-root".into(),
            name: "gw".into(),
            apex: "example.org".into(),
            attached_namespaces: vec!["cozy-x".into()],
        };
        w.other_claims.push(root.clone());
        let p = run(&w);
        assert!(p.writes.is_empty(), "{:?}", p.writes);
        // Held by the root: said without naming who holds it.
        assert!(
            p.problems[0].contains("cozy-x is attached to another TenantGateway")
                && !p.problems[0].contains("tenant-root"),
            "{:?}",
            p.problems
        );

        // The root stops listing it: ours now, the stale mark is overwritten.
        w.other_claims.clear();
        assert_eq!(run(&w).writes, vec![attach("cozy-x")]);

        // A deeper TenantGateway (longer apex) loses to us; same apex length: namespace name.
        let deeper = AttachClaim {
            namespace: "tenant-alice-x".into(),
            name: "gw".into(),
            apex: "x.alice.example.org".into(),
            attached_namespaces: vec!["cozy-x".into()],
        };
        w.other_claims = vec![deeper];
        assert_eq!(run(&w).writes, vec![attach("cozy-x")]);
        let twin = AttachClaim {
            namespace: "tenant-aaa".into(),
            apex: "aaaaa.example.org".into(),
            ..root
        };
        w.other_claims = vec![twin];
        assert!(run(&w).writes.is_empty());
    }

    #[test]
    fn an_existing_attachment_is_never_stolen() {
        // Ours (our mark): a later rival, even one closer to the root, does not take it.
        let mut w = testing::world();
        w.tgw.spec.attached_namespaces = vec!["cozy-x".into()];
        w.namespaces.push(namespace(
            "cozy-x",
            &[(GATEWAY_LABEL, "tenant-alice")],
            &[(ATTACHED_BY_ANNOTATION, "tenant-alice")],
        ));
        w.other_claims.push(AttachClaim {
            namespace: "tenant-root".into(),
            name: "gw".into(),
            apex: "example.org".into(),
            attached_namespaces: vec!["cozy-x".into()],
        });
        let p = run(&w);
        assert!(p.writes.is_empty(), "{:?}", p.writes);
        assert!(p.held.contains("cozy-x"));

        // The root's (its mark, it still lists it): a TenantGateway whose apex would win a
        // new claim does not take it either.
        let mut w = testing::world();
        w.tgw.spec.attached_namespaces = vec!["cozy-x".into()];
        w.namespaces.push(namespace(
            "cozy-x",
            &[(GATEWAY_LABEL, "tenant-alice-x")],
            &[(ATTACHED_BY_ANNOTATION, "tenant-alice-x")],
        ));
        w.other_claims.push(AttachClaim {
            namespace: "tenant-alice-x".into(),
            name: "gw".into(),
            apex: "x.alice.example.org".into(),
            attached_namespaces: vec!["cozy-x".into()],
        });
        let p = run(&w);
        assert!(p.writes.is_empty(), "{:?}", p.writes);
        assert!(!p.held.contains("cozy-x"));
    }

    /// Issue 20 item 1: who may claim at all. (namespace, apex, attached, deleting, older
    /// sibling, namespace label, claims?, entries kept)
    #[test]
    fn only_valid_tenant_gateways_claim() {
        type Case<'a> = (
            &'a str,
            &'a str,
            &'a [&'a str],
            bool,
            bool,
            Option<&'a str>,
            bool,
            &'a [&'a str],
        );
        let cases: &[Case] = &[
            // The attacker: apex "a", platform namespaces listed.
            (
                "tenant-alice",
                "a",
                &["cozy-dashboard"],
                false,
                false,
                Some("alice.example.org"),
                false,
                &[],
            ),
            // A shorter custom apex than its namespace's.
            (
                "tenant-alice",
                "example.org",
                &["cozy-dashboard"],
                false,
                false,
                Some("alice.example.org"),
                false,
                &[],
            ),
            // No apex label on a tenant namespace: fail closed.
            (
                "tenant-alice",
                "alice.example.org",
                &["cozy-x"],
                false,
                false,
                None,
                false,
                &[],
            ),
            // Being deleted, or a Duplicate.
            (
                "tenant-root",
                "example.org",
                &["cozy-x"],
                true,
                false,
                Some("example.org"),
                false,
                &[],
            ),
            (
                "tenant-root",
                "example.org",
                &["cozy-x"],
                false,
                true,
                Some("example.org"),
                false,
                &[],
            ),
            // Valid: tenant-scope entries dropped, the rest kept.
            (
                "tenant-root",
                "Example.org",
                &["cozy-x", "tenant-bob"],
                false,
                false,
                Some("example.org"),
                true,
                &["cozy-x"],
            ),
            // Outside tenant scope the apex is not tied to a label.
            (
                "cozy-public",
                "public.example.org",
                &["cozy-x"],
                false,
                false,
                None,
                true,
                &["cozy-x"],
            ),
        ];
        for &(ns, apex, attached, deleting, older, label, claims, kept) in cases {
            let mut f = testing::world().tgw;
            f.namespace = ns.into();
            f.spec.apex = apex.into();
            f.spec.attached_namespaces = attached.iter().map(|s| s.to_string()).collect();
            let got = valid_claim(&f, deleting, older, label, &Scope::default());
            assert_eq!(got.is_some(), claims, "{ns} {apex} {attached:?}");
            if let Some(c) = got {
                assert_eq!(c.attached_namespaces, kept, "{ns}");
                assert_eq!(c.apex, apex.to_ascii_lowercase());
            }
        }
    }

    /// The attackers' objects of issue 20: the edge passes only valid rivals, and a tenant's
    /// annotation on a tenant namespace means nothing.
    #[test]
    fn tenant_written_marks_are_ignored() {
        // A forged attached-by on tenant-bob, whose gateway label the platform wrote: the
        // root TenantGateway neither removes the label nor the annotation.
        let mut w = testing::world();
        w.tgw.namespace = "tenant-root".into();
        w.tgw.spec.apex = "example.org".into();
        w.namespaces = vec![
            namespace("tenant-root", &[(GATEWAY_LABEL, "tenant-root")], &[]),
            namespace(
                "tenant-bob",
                &[(GATEWAY_LABEL, "tenant-root")],
                &[(ATTACHED_BY_ANNOTATION, "tenant-root")],
            ),
        ];
        let p = run(&w);
        assert!(p.writes.is_empty(), "{:?}", p.writes);
        assert!(cleanup(&w, &Scope::default()).is_empty());

        // The same mark on a platform namespace is ours to remove.
        w.namespaces.push(namespace(
            "cozy-old",
            &[(GATEWAY_LABEL, "tenant-root")],
            &[(ATTACHED_BY_ANNOTATION, "tenant-root")],
        ));
        let gone = NamespaceWrite::Detach {
            namespace: "cozy-old".into(),
            gateway: "tenant-root".into(),
        };
        assert_eq!(run(&w).writes, vec![gone.clone()]);
        assert_eq!(cleanup(&w, &Scope::default()), vec![gone]);
    }

    /// SPEC §3.8: the platform controller's mark counts as ours (same TenantGateway
    /// namespace) and is replaced by ours; one naming a rival that still lists the namespace
    /// holds it; one forged on a tenant namespace means nothing, as ours does not.
    #[test]
    fn the_platform_controllers_mark_counts_as_ours() {
        let plat = crate::platform::PLATFORM_ATTACHED_BY_ANNOTATION;
        let mut w = testing::world();
        w.tgw.spec.attached_namespaces = vec!["cozy-harbor".into(), "cozy-held".into()];
        w.namespaces = vec![
            namespace(
                "tenant-alice",
                &[(GATEWAY_LABEL, "tenant-alice")],
                &[(plat, "tenant-alice")],
            ),
            namespace(
                "cozy-harbor",
                &[(GATEWAY_LABEL, "tenant-alice")],
                &[(plat, "tenant-alice")],
            ),
            // Attached by the platform's controller for us, no longer listed.
            namespace(
                "cozy-old",
                &[(GATEWAY_LABEL, "tenant-alice")],
                &[(plat, "tenant-alice")],
            ),
            // Attached by the platform's controller for a rival that still lists it.
            namespace(
                "cozy-held",
                &[(GATEWAY_LABEL, "tenant-root")],
                &[(plat, "tenant-root")],
            ),
            // A tenant's own namespace with a forged platform mark naming us.
            namespace(
                "tenant-alice-kid",
                &[(GATEWAY_LABEL, "tenant-alice")],
                &[(plat, "tenant-alice")],
            ),
            // Both marks, ours first: ours decides, the platform's goes with our next write.
            namespace(
                "cozy-both",
                &[(GATEWAY_LABEL, "tenant-alice")],
                &[
                    (ATTACHED_BY_ANNOTATION, "tenant-alice"),
                    (plat, "tenant-bob"),
                ],
            ),
        ];
        w.tgw.spec.attached_namespaces.push("cozy-both".into());
        w.other_claims.push(AttachClaim {
            namespace: "tenant-root".into(),
            name: "gw".into(),
            apex: "example.org".into(),
            attached_namespaces: vec!["cozy-held".into()],
        });
        let p = run(&w);
        let mut want = vec![
            attach("cozy-both"),
            attach("cozy-harbor"),
            attach("tenant-alice"),
            detach("cozy-old"),
        ];
        want.sort();
        assert_eq!(p.writes, want);
        assert_eq!(
            p.held,
            ["cozy-both", "cozy-harbor"].map(String::from).into()
        );
        assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
        assert!(p.problems[0].contains("cozy-held is attached to another TenantGateway"));
        let mut gone = vec![
            detach("cozy-both"),
            detach("cozy-harbor"),
            detach("cozy-old"),
            detach("tenant-alice"),
        ];
        gone.sort();
        assert_eq!(cleanup(&w, &Scope::default()), gone);

        // Once replaced by ours, nothing more to write.
        w.namespaces.retain(|n| n.name() != "cozy-old");
        for n in w.namespaces.iter_mut() {
            if ["tenant-alice", "cozy-harbor", "cozy-both"].contains(&n.name()) {
                *n = namespace(
                    n.name(),
                    &[(GATEWAY_LABEL, "tenant-alice")],
                    &[(ATTACHED_BY_ANNOTATION, "tenant-alice")],
                );
            }
        }
        assert!(run(&w).writes.is_empty());
    }

    #[test]
    fn new_claims_go_to_the_containing_apex_then_the_name() {
        // (rival namespace, rival apex, do we win?) for a namespace nobody holds; ours is
        // tenant-alice with apex alice.example.org.
        let cases = [
            ("tenant-root", "example.org", false),
            ("tenant-alice-x", "x.alice.example.org", true),
            // Unrelated apexes, however long: the namespace name decides.
            ("tenant-aaa", "a", false),
            ("tenant-zed", "a", true),
            ("tenant-aaa", "very.long.unrelated.example.com", false),
            ("tenant-zed", "b.example.com", true),
        ];
        for (rival_ns, rival_apex, we_win) in cases {
            let mut w = testing::world();
            w.tgw.spec.attached_namespaces = vec!["cozy-x".into()];
            w.namespaces.push(namespace("cozy-x", &[], &[]));
            w.other_claims.push(AttachClaim {
                namespace: rival_ns.into(),
                name: "gw".into(),
                apex: rival_apex.into(),
                attached_namespaces: vec!["cozy-x".into()],
            });
            let p = run(&w);
            assert_eq!(
                p.writes == vec![attach("cozy-x")],
                we_win,
                "{rival_ns} {rival_apex}: {p:?}"
            );
        }
    }
}
