//! Namespace labels and annotations (SPEC §3.5).
//!
//! The TenantGateway's namespace and each attachedNamespaces entry get
//! `namespace.cozystack.io/gateway=<ns>` plus the annotation
//! `gateway.cozystack.io/attached-by=<ns>`, which marks the label as ours. Only marked labels
//! are ever changed or removed: a gateway label the platform wrote (no annotation) is never
//! touched. A namespace listed by several TenantGateways is not stolen: the claim closest to
//! the root (shortest apex, then namespace name) holds it, and the others report it.

use std::collections::BTreeSet;

use super::inputs::{Inputs, Settings};

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

/// Plan the labels for `inputs.tgw` with checked `settings`.
pub fn plan(inputs: &Inputs, settings: &Settings) -> LabelPlan {
    let own = inputs.tgw.namespace.as_str();
    let mut out = LabelPlan::default();
    let mut targets: Vec<&str> = vec![own];
    targets.extend(settings.attached.iter().map(String::as_str));
    let mut keep: BTreeSet<&str> = BTreeSet::new();

    for t in targets {
        if t != own {
            // Closest to the root first: shortest apex, then namespace name.
            let rival = inputs
                .other_claims
                .iter()
                .filter(|c| c.namespace != own && c.attached_namespaces.iter().any(|a| a == t))
                .map(|c| (c.apex.len(), c.namespace.as_str(), c.name.as_str()))
                .min();
            if let Some(rival) = rival
                && (rival.0, rival.1) < (settings.apex.len(), own)
            {
                out.problems.push(format!(
                    "namespace {t} is attached to TenantGateway {}/{} (closer to the root); \
                     not attached here",
                    rival.1, rival.2
                ));
                continue;
            }
        }
        let Some(ns) = inputs.namespaces.iter().find(|n| n.name == t) else {
            // Not created yet: admit its routes now, label it when it appears.
            if t != own {
                out.held.insert(t.to_string());
            }
            continue;
        };
        match (ns.gateway(), ns.attached_by()) {
            (Some(g), Some(by)) if g == own && by == own => {}
            // The platform wrote it with the right value: nothing to mark.
            (Some(g), None) if g == own => {}
            (Some(g), None) => {
                out.problems.push(format!(
                    "namespace {t} publishes through {g} (its namespace.cozystack.io/gateway \
                     label, not written by a TenantGateway); not attached here"
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
        if ns.attached_by() == Some(own) && !keep.contains(ns.name.as_str()) {
            out.writes.push(NamespaceWrite::Detach {
                namespace: ns.name.clone(),
                gateway: own.to_string(),
            });
        }
    }
    out.writes.sort();
    out.writes.dedup();
    out.problems.sort();
    out
}

/// Everything to undo when the TenantGateway goes (finalizer).
pub fn cleanup(inputs: &Inputs) -> Vec<NamespaceWrite> {
    let own = inputs.tgw.namespace.as_str();
    let mut writes: Vec<NamespaceWrite> = inputs
        .namespaces
        .iter()
        .filter(|n| n.attached_by() == Some(own))
        .map(|n| NamespaceWrite::Detach {
            namespace: n.name.clone(),
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
        plan(w, &w.tgw.settings(&Default::default()).expect("valid spec"))
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
        assert_eq!(cleanup(&w), vec![detach("cozy-old")]);
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
            p.problems[0].contains("publishes through tenant-root"),
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
        assert!(p.problems[0].contains("tenant-root/gw"), "{:?}", p.problems);

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
    fn losing_a_namespace_removes_our_mark() {
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
        assert_eq!(run(&w).writes, vec![detach("cozy-x")]);
    }
}
