//! Who wins a hostname claimed from several namespaces (SPEC §3.3), as pure functions.
//!
//! A leaf: the reconciler (route status, listeners) and the admission warnings (SPEC §3.4)
//! both call [`winner_for`], so they never disagree about who owns a hostname. The order of
//! SPEC §3.3: a claimant in
//! a system (`cozy-*`) namespace first; then the namespace whose own apex (its host label) is
//! the most specific one containing the hostname, so a parent tenant publishing
//! `shop.kid.alice.example.org` never takes it from the child whose apex is
//! `kid.alice.example.org`; then the lexicographically smaller namespace, then the smaller
//! route name. The winner's namespace shares the hostname among all its routes; only
//! claimants from other namespaces lose.

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

/// One route claiming a hostname, with its namespace's apex (the host label, lowercased and
/// valid; `None` when the namespace has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ApexClaimant<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub apex: Option<&'a str>,
}

impl<'a> ApexClaimant<'a> {
    pub fn claimant(&self) -> Claimant<'a> {
        Claimant {
            namespace: self.namespace,
            name: self.name,
        }
    }
}

/// The conflict order of SPEC §3.3 for `hostname`: `Less` means `a` beats `b`.
pub fn compare_for(
    hostname: &str,
    a: &ApexClaimant<'_>,
    b: &ApexClaimant<'_>,
    system_prefix: &str,
) -> Ordering {
    // The length of the claimant's apex when it contains the hostname, else 0. Two apexes
    // that both contain one hostname are suffixes of it at label boundaries, so the longer
    // one is the more specific (lies within the other).
    let specificity = |c: &ApexClaimant<'_>| {
        c.apex
            .filter(|apex| crate::hostname::within(hostname, apex))
            .map_or(0, str::len)
    };
    let key = |c: &ApexClaimant<'_>| {
        (
            !is_system(c.namespace, system_prefix),
            std::cmp::Reverse(specificity(c)),
        )
    };
    key(a)
        .cmp(&key(b))
        .then_with(|| (a.namespace, a.name).cmp(&(b.namespace, b.name)))
}

/// The winning claimant of `hostname` in the order of SPEC §3.3, `None` for no claimants.
/// Independent of the input order.
pub fn winner_for<'a, I>(
    hostname: &str,
    claimants: I,
    system_prefix: &str,
) -> Option<ApexClaimant<'a>>
where
    I: IntoIterator<Item = ApexClaimant<'a>>,
{
    claimants
        .into_iter()
        .min_by(|a, b| compare_for(hostname, a, b, system_prefix))
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

    /// The winner among claimants whose namespaces carry no apex: the order without its apex
    /// step.
    fn winner<'a>(
        claimants: impl IntoIterator<Item = Claimant<'a>>,
        system_prefix: &str,
    ) -> Option<Claimant<'a>> {
        let with = claimants.into_iter().map(|c| ApexClaimant {
            namespace: c.namespace,
            name: c.name,
            apex: None,
        });
        winner_for("x.example.org", with, system_prefix).map(|w| w.claimant())
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

    fn a<'a>(namespace: &'a str, name: &'a str, apex: Option<&'a str>) -> ApexClaimant<'a> {
        ApexClaimant {
            namespace,
            name,
            apex,
        }
    }

    /// SPEC §3.3 and issue 20 item 9: the most specific apex owner wins among tenants.
    #[test]
    fn conflict_order_by_most_specific_apex() {
        let alice = a("tenant-alice", "shop", Some("alice.example.org"));
        let kid = a("tenant-alice-kid", "shop", Some("kid.alice.example.org"));
        let cozy = a("cozy-shop", "shop", Some("example.org"));
        let cozy_no_apex = a("cozy-shop", "shop", None);
        let bob = a("tenant-bob", "shop", Some("bob.example.org"));
        let none = a("tenant-aaa", "shop", None);
        let alice2 = a("tenant-alice2", "a", Some("alice.example.org"));
        let h = "shop.kid.alice.example.org";
        // (hostname, claimants, expected winner)
        let cases: Vec<(&str, Vec<ApexClaimant<'_>>, ApexClaimant<'_>)> = vec![
            // The child's own apex is more specific, although tenant-alice sorts first.
            (h, vec![alice, kid], kid),
            // Its apex equal to the hostname counts as containing it.
            ("kid.alice.example.org", vec![alice, kid], kid),
            // cozy-* still beats both, with or without an apex.
            (h, vec![alice, kid, cozy], cozy),
            (h, vec![kid, cozy_no_apex], cozy_no_apex),
            // An apex that does not contain the hostname gives no precedence.
            (h, vec![bob, alice], alice),
            (h, vec![none, bob], none),
            // Under the parent only, the parent's apex is the most specific.
            ("shop.alice.example.org", vec![kid, alice], alice),
            // Equal apexes: namespace name order, then the route name.
            (h, vec![alice2, alice], alice),
            (
                h,
                vec![a("tenant-alice", "z", Some("alice.example.org")), alice],
                alice,
            ),
            // Case does not matter for containment.
            ("SHOP.Kid.Alice.Example.Org", vec![alice, kid], kid),
            // `evilkid.alice.example.org` is not under `kid.alice.example.org`.
            ("evilkid.alice.example.org", vec![kid, alice], alice),
        ];
        for (host, claimants, want) in cases {
            assert_eq!(
                winner_for(host, claimants.clone(), "cozy-"),
                Some(want),
                "{host} {claimants:?}"
            );
            let mut reversed = claimants.clone();
            reversed.reverse();
            assert_eq!(
                winner_for(host, reversed, "cozy-"),
                Some(want),
                "order must not matter"
            );
        }
        assert_eq!(winner_for(h, [], "cozy-"), None);
    }
}
