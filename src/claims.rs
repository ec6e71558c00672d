//! Who wins a hostname claimed from several namespaces (SPEC §3.3), as one pure function.
//!
//! A leaf: the reconciler (route status, listeners) and the admission warnings (SPEC §3.4) both
//! call [`winner`], so they can never disagree about who owns a hostname. The order: a claimant
//! in a system (`cozy-*`) namespace first, then the lexicographically smaller namespace, then
//! the smaller route name. The winner's namespace shares the hostname among all its routes;
//! only claimants from other namespaces lose.

use std::cmp::Ordering;

/// One route claiming a hostname.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Claimant<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
}

/// True when `namespace` is a system (`cozy-*`) namespace; an empty prefix makes none.
pub fn is_system(namespace: &str, system_prefix: &str) -> bool {
    !system_prefix.is_empty() && namespace.starts_with(system_prefix)
}

/// The conflict order: `Less` means `a` beats `b`.
pub fn compare(a: &Claimant<'_>, b: &Claimant<'_>, system_prefix: &str) -> Ordering {
    let system = |c: &Claimant<'_>| is_system(c.namespace, system_prefix);
    // `true` sorts after `false`, so negate: system namespaces first.
    (!system(a), a.namespace, a.name).cmp(&(!system(b), b.namespace, b.name))
}

/// The winning claimant, `None` for no claimants. Independent of the input order.
pub fn winner<'a, I>(claimants: I, system_prefix: &str) -> Option<Claimant<'a>>
where
    I: IntoIterator<Item = Claimant<'a>>,
{
    claimants
        .into_iter()
        .min_by(|a, b| compare(a, b, system_prefix))
}

/// True when `c` keeps the hostname against `winner`: same namespace (one namespace shares).
pub fn shares_with(c: &Claimant<'_>, winner: &Claimant<'_>) -> bool {
    c.namespace == winner.namespace
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c<'a>(namespace: &'a str, name: &'a str) -> Claimant<'a> {
        Claimant { namespace, name }
    }

    #[test]
    fn conflict_order() {
        // (claimants, expected winner)
        let cases: Vec<(Vec<Claimant<'_>>, Option<Claimant<'_>>)> = vec![
            (vec![], None),
            (vec![c("tenant-a", "x")], Some(c("tenant-a", "x"))),
            // cozy-* beats a lexicographically smaller tenant namespace.
            (
                vec![c("tenant-alice-x", "web"), c("cozy-harbor", "harbor")],
                Some(c("cozy-harbor", "harbor")),
            ),
            (
                vec![c("a-first", "web"), c("cozy-z", "z")],
                Some(c("cozy-z", "z")),
            ),
            // Between two system namespaces: the smaller namespace.
            (
                vec![c("cozy-z", "a"), c("cozy-a", "z")],
                Some(c("cozy-a", "z")),
            ),
            // Tenants: smaller namespace, then route name.
            (
                vec![c("tenant-bob", "a"), c("tenant-alice", "z")],
                Some(c("tenant-alice", "z")),
            ),
            (
                vec![c("tenant-alice", "z"), c("tenant-alice", "b")],
                Some(c("tenant-alice", "b")),
            ),
        ];
        for (claimants, want) in cases {
            assert_eq!(winner(claimants.clone(), "cozy-"), want, "{claimants:?}");
            let mut reversed = claimants.clone();
            reversed.reverse();
            assert_eq!(winner(reversed, "cozy-"), want, "order must not matter");
        }
    }

    #[test]
    fn one_namespace_shares() {
        let w = c("tenant-alice", "a");
        assert!(shares_with(&c("tenant-alice", "z"), &w));
        assert!(!shares_with(&c("tenant-bob", "a"), &w));
    }

    #[test]
    fn empty_system_prefix_makes_nobody_special() {
        assert_eq!(
            winner([c("cozy-x", "a"), c("b", "a")], ""),
            Some(c("b", "a"))
        );
    }
}
