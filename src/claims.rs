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
//!
//! The listener rules both sides count with live here too: Gateway API's [`MAX_LISTENERS`],
//! which parentRefs claim HTTPS listeners ([`section_claims_https`]), and each namespace's fair
//! share of an http01 Gateway's listeners ([`listener_shares`]), with the admission warning
//! for a route past it ([`share_warning`], SPEC §3.3, §3.4).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

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

/// Gateway API's limit on `spec.listeners`.
pub const MAX_LISTENERS: usize = 64;

/// Whether a parentRef with this sectionName claims HTTPS listeners.
pub fn section_claims_https(section: Option<&str>) -> bool {
    match section {
        None => true,
        Some(s) => s.starts_with("https"),
    }
}

/// Namespaces with how many listeners they ask for (or get).
type Demands<'a> = Vec<(&'a str, usize)>;

/// Max-min fair shares of `slots` among namespaces asking for `demands` listeners
/// (water-filling): a namespace asking for no more than an equal split of what is left gets
/// all it asks; the others split the rest equally. So no namespace is cut while another
/// holds more than it (SPEC §3.3). When the split does not come out even, the spare slots go
/// to the namespaces cut, one each, in name order (deterministic). O(k log k) in the number
/// of namespaces.
pub fn fair_shares<'a>(
    demands: impl IntoIterator<Item = (&'a str, usize)>,
    slots: usize,
) -> BTreeMap<&'a str, usize> {
    let mut asks: Vec<(usize, &str)> = demands
        .into_iter()
        .filter(|(_, d)| *d > 0)
        .map(|(ns, d)| (d, ns))
        .collect();
    asks.sort_unstable();
    let mut shares = BTreeMap::new();
    let mut left = slots;
    let mut rest = asks.len();
    let mut cut: Vec<(&str, usize)> = Vec::new();
    for (d, ns) in asks {
        // `rest` ≥ 1 here: it counts this namespace and the larger ones after it.
        let level = left / rest;
        if cut.is_empty() && d <= level {
            shares.insert(ns, d);
            left -= d;
            rest -= 1;
        } else {
            cut.push((ns, d));
        }
    }
    if !cut.is_empty() {
        let level = left / cut.len();
        let mut spare = left % cut.len();
        cut.sort_unstable();
        for (ns, d) in cut {
            // Every cut namespace asks for more than `level` (the demands are ascending).
            let extra = usize::from(spare > 0);
            spare -= extra;
            shares.insert(ns, (level + extra).min(d));
        }
    }
    shares
}

/// The listener share of each namespace on an http01 Gateway with `budget` hostname
/// listeners (SPEC §3.3): `cozy-*` (system) namespaces first, fair among themselves; the
/// rest shared max-min fair among the other namespaces that ask.
pub fn listener_shares<'a>(
    demands: impl IntoIterator<Item = (&'a str, usize)>,
    budget: usize,
    system_prefix: &str,
) -> BTreeMap<&'a str, usize> {
    let (system, tenants): (Demands<'a>, Demands<'a>) = demands
        .into_iter()
        .partition(|(ns, _)| is_system(ns, system_prefix));
    let mut shares = fair_shares(system, budget);
    let used: usize = shares.values().sum();
    shares.extend(fair_shares(tenants, budget.saturating_sub(used)));
    shares
}

/// The demands of an http01 Gateway's namespaces, split the way [`listener_shares`] reads
/// them and grouped by demand, so one namespace's share ([`SortedDemands::share_of`]) is one
/// walk over the distinct demands without allocating, and one namespace's demand changes in
/// O(log k) ([`SortedDemands::add`], [`SortedDemands::remove`]): kept per Gateway beside its
/// routes and updated with them, read by every review of a route on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SortedDemands {
    /// System namespaces that ask.
    system: Asks,
    /// The other namespaces that ask.
    tenants: Asks,
    /// What the system namespaces ask for in all.
    system_total: usize,
}

/// Positive demands by namespace, and how many namespaces ask for each demand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Asks {
    by_name: BTreeMap<Arc<str>, usize>,
    /// Demand → namespaces asking for it.
    by_demand: BTreeMap<usize, usize>,
}

impl Asks {
    fn add(&mut self, namespace: &Arc<str>, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let d = match self.by_name.get_mut(&**namespace) {
            Some(d) => {
                leave(&mut self.by_demand, *d);
                *d += n;
                *d
            }
            None => {
                self.by_name.insert(namespace.clone(), n);
                n
            }
        };
        *self.by_demand.entry(d).or_default() += 1;
        n
    }

    /// Lowers `namespace`'s demand by up to `n`; returns by how much it fell.
    fn remove(&mut self, namespace: &str, n: usize) -> usize {
        let Some(d) = self.by_name.get_mut(namespace) else {
            return 0;
        };
        let fell = n.min(*d);
        if fell == 0 {
            return 0;
        }
        leave(&mut self.by_demand, *d);
        *d -= fell;
        if *d == 0 {
            self.by_name.remove(namespace);
        } else {
            *self.by_demand.entry(*d).or_default() += 1;
        }
        fell
    }
}

/// One namespace fewer asks for `d`.
fn leave(by_demand: &mut BTreeMap<usize, usize>, d: usize) {
    if let Some(c) = by_demand.get_mut(&d) {
        *c -= 1;
        if *c == 0 {
            by_demand.remove(&d);
        }
    }
}

impl SortedDemands {
    pub fn new<'a>(
        demands: impl IntoIterator<Item = (&'a str, usize)>,
        system_prefix: &str,
    ) -> SortedDemands {
        let mut s = SortedDemands::default();
        for (ns, d) in demands {
            s.add(&Arc::from(ns), d, system_prefix);
        }
        s
    }

    /// `namespace` asks for `n` more listeners.
    pub fn add(&mut self, namespace: &Arc<str>, n: usize, system_prefix: &str) {
        if is_system(namespace, system_prefix) {
            self.system_total += self.system.add(namespace, n);
        } else {
            self.tenants.add(namespace, n);
        }
    }

    /// `namespace` asks for `n` fewer listeners (never below none).
    pub fn remove(&mut self, namespace: &str, n: usize, system_prefix: &str) {
        if is_system(namespace, system_prefix) {
            self.system_total -= self.system.remove(namespace, n);
        } else {
            self.tenants.remove(namespace, n);
        }
    }

    /// What `namespace` asks for (`None`: nothing).
    pub fn get(&self, namespace: &str) -> Option<usize> {
        self.system
            .by_name
            .get(namespace)
            .or_else(|| self.tenants.by_name.get(namespace))
            .copied()
    }

    /// Whether a namespace other than `except` asks for anything.
    pub fn others_ask(&self, except: &str) -> bool {
        let asking = self.system.by_name.len() + self.tenants.by_name.len();
        asking > usize::from(self.get(except).is_some())
    }

    /// Every namespace that asks, with its demand (for [`share_warning`]).
    pub fn to_map(&self) -> BTreeMap<String, usize> {
        self.system
            .by_name
            .iter()
            .chain(&self.tenants.by_name)
            .map(|(ns, d)| (ns.to_string(), *d))
            .collect()
    }

    /// `namespace`'s entry of [`listener_shares`] over these demands with its own demand
    /// replaced by `mine`, in `budget` listeners. O(log k + budget) for k namespaces asking
    /// (see `fair_share_of`), no allocation.
    pub fn share_of(
        &self,
        namespace: &str,
        mine: usize,
        budget: usize,
        system_prefix: &str,
    ) -> usize {
        if is_system(namespace, system_prefix) {
            return fair_share_of(&self.system, namespace, mine, budget);
        }
        // Water-filling hands out every slot asked for: the system pass uses
        // min(asked, budget), whoever gets it.
        let used = self.system_total.min(budget);
        fair_share_of(&self.tenants, namespace, mine, budget - used)
    }
}

/// `namespace`'s entry of [`fair_shares`] over `asks` with its own entry, if any, replaced by
/// `mine`: the same water-filling, a group of equal demands at a time.
///
/// Equal demands are served or cut together: if the first of them fits the level
/// (`d ≤ left / rest`, that is `left ≥ d · rest`), the next one fits what is left after it
/// (`left − d ≥ d · (rest − 1)`). So the walk needs the demands only, not their names, until
/// the cut; there the spare slots go one each to the cut namespaces in name order, which is
/// the one place names are read. Every group walked before the cut was served, and each
/// served namespace took at least one of `slots`: the walk is O(slots) groups.
fn fair_share_of(asks: &Asks, namespace: &str, mine: usize, slots: usize) -> usize {
    if mine == 0 {
        return 0;
    }
    let own = asks.by_name.get(namespace).copied();
    // Every ask still to serve, this namespace's (with `mine`) among them.
    let mut rest = asks.by_name.len() - usize::from(own.is_some()) + 1;
    let mut left = slots;
    let mut others = asks
        .by_demand
        .iter()
        .map(|(&d, &c)| (d, c - usize::from(own == Some(d))))
        .filter(|&(_, c)| c > 0)
        .peekable();
    loop {
        // The next group of equal demands; this namespace joins the one equal to `mine`,
        // or is a group of its own before the first larger one.
        let (d, c, with_me) = match others.peek() {
            Some(&(d, c)) if d < mine => {
                others.next();
                (d, c, false)
            }
            Some(&(d, c)) if d == mine => (d, c + 1, true),
            _ => (mine, 1, true),
        };
        // `rest` ≥ 1: this namespace is still to serve.
        if d <= left / rest {
            if with_me {
                return mine;
            }
            // `c ≤ rest` and `d · rest ≤ left`: no underflow.
            left -= d * c;
            rest -= c;
            continue;
        }
        // This group and every larger one are cut, this namespace among them: `left` split
        // evenly among the `rest`, the spare slots one each to the first in name order. It
        // gets one when fewer than `spare` cut namespaces sort before it. The walk over the
        // names before it stops at `spare` cut ones and skips only served ones, each of which
        // took a slot: at most 2 × `slots` steps, however many namespaces ask.
        let spare = left % rest;
        let cut_before = asks
            .by_name
            .range::<str, _>((Bound::Unbounded, Bound::Excluded(namespace)))
            .filter(|&(_, &x)| x >= d)
            .take(spare)
            .count();
        return (left / rest + usize::from(cut_before < spare)).min(mine);
    }
}

/// The admission warning of SPEC §3.3/§3.4 for a route that would push its namespace past
/// its fair listener share on an http01 Gateway, or `None` when it stays within it.
///
/// `published` is how many listenable hostnames each namespace publishes on the Gateway now
/// (the admitted route's own published hostnames not counted), `new` how many more distinct
/// listenable hostnames the admitted route asks for in `namespace`, `budget` the hostname
/// listeners the Gateway has (64 minus `http` and passthrough listeners). At most
/// [`crate::warning::MAX_WARNING_LEN`] characters.
pub fn share_warning(
    gateway: (&str, &str),
    namespace: &str,
    published: &BTreeMap<String, usize>,
    new: usize,
    budget: usize,
    system_prefix: &str,
) -> Option<String> {
    if new == 0 {
        return None;
    }
    let mine = published.get(namespace).copied().unwrap_or(0) + new;
    let demands = published
        .iter()
        .filter(|(ns, _)| ns.as_str() != namespace)
        .map(|(ns, d)| (ns.as_str(), *d))
        .chain([(namespace, mine)]);
    let share = listener_shares(demands, budget, system_prefix)
        .get(namespace)
        .copied()
        .unwrap_or(0);
    share_text(gateway, mine, share, new, budget)
}

/// [`share_warning`] over presorted demands: `published` holds what every other namespace
/// publishes (its entry for `namespace`, if any, is not read), `mine_published` what
/// `namespace` publishes without the admitted route.
pub fn share_warning_sorted(
    gateway: (&str, &str),
    namespace: &str,
    published: &SortedDemands,
    mine_published: usize,
    new: usize,
    budget: usize,
    system_prefix: &str,
) -> Option<String> {
    if new == 0 {
        return None;
    }
    let mine = mine_published + new;
    let share = published.share_of(namespace, mine, budget, system_prefix);
    share_text(gateway, mine, share, new, budget)
}

fn share_text(
    gateway: (&str, &str),
    mine: usize,
    share: usize,
    new: usize,
    budget: usize,
) -> Option<String> {
    if mine <= share {
        return None;
    }
    // Short enough for the usual names; `clip` keeps longer ones within the limit. Built
    // from its pieces: this warning comes with every review of a full http01 Gateway, and
    // `format!` costs a few times the copy.
    let (share, budget, none) = (
        share.to_string(),
        budget.to_string(),
        (mine - share).min(new).to_string(),
    );
    let parts = [
        "Gateway ",
        gateway.0,
        "/",
        gateway.1,
        ": namespace fair share is ",
        &share,
        "/",
        &budget,
        " listeners (http01); ",
        &none,
        " hostname(s) get none; use dns01",
    ];
    let mut text = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        text.push_str(p);
    }
    Some(crate::warning::clip(&text, crate::warning::MAX_WARNING_LEN))
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

    #[test]
    fn fair_shares_water_fill() {
        // (demands, slots, expected shares)
        let cases: Vec<(Demands<'_>, usize, Demands<'_>)> = vec![
            (vec![], 63, vec![]),
            (vec![("a", 0)], 5, vec![]),
            (vec![("a", 70)], 63, vec![("a", 63)]),
            (vec![("a", 5), ("b", 5)], 63, vec![("a", 5), ("b", 5)]),
            // The small asker gets all it asks, the big one the rest.
            (vec![("a", 70), ("b", 3)], 63, vec![("a", 60), ("b", 3)]),
            // Two big askers split evenly; the odd slot goes by name order.
            (vec![("b", 70), ("a", 70)], 63, vec![("a", 32), ("b", 31)]),
            // a fully served; b and c cut at 17, the spare one to b (name order).
            (
                vec![("c", 40), ("a", 10), ("b", 20)],
                45,
                vec![("a", 10), ("b", 18), ("c", 17)],
            ),
            (vec![("a", 3), ("b", 9)], 0, vec![("a", 0), ("b", 0)]),
            // Exactly enough.
            (vec![("a", 30), ("b", 33)], 63, vec![("a", 30), ("b", 33)]),
        ];
        for (demands, slots, want) in cases {
            let got: Vec<(&str, usize)> = fair_shares(demands.iter().copied(), slots)
                .into_iter()
                .collect();
            assert_eq!(got, want, "{demands:?} in {slots}");
        }
    }

    #[test]
    fn listener_shares_put_cozy_first() {
        // (demands, budget, expected)
        let cases: Vec<(Demands<'_>, usize, Demands<'_>)> = vec![
            (
                vec![("tenant-a", 70), ("tenant-b", 3), ("cozy-mon", 2)],
                63,
                vec![("cozy-mon", 2), ("tenant-a", 58), ("tenant-b", 3)],
            ),
            // Cozy namespaces may take everything; they share fairly among themselves.
            (
                vec![("cozy-a", 70), ("cozy-b", 1), ("tenant-a", 5)],
                63,
                vec![("cozy-a", 62), ("cozy-b", 1), ("tenant-a", 0)],
            ),
        ];
        for (demands, budget, want) in cases {
            let got: Vec<(&str, usize)> = listener_shares(demands.iter().copied(), budget, "cozy-")
                .into_iter()
                .collect();
            assert_eq!(got, want, "{demands:?}");
        }
        // Without a system prefix nobody goes first.
        let got = listener_shares([("cozy-a", 70), ("tenant-a", 70)], 63, "");
        assert_eq!(got["cozy-a"] + got["tenant-a"], 63);
        assert!(got["tenant-a"] >= 31, "{got:?}");
    }

    /// Random demands: shares never exceed demands, use every slot that is asked for, and
    /// are max-min fair (a cut namespace holds at least as much as any other, minus the one
    /// spare slot of an uneven split).
    #[test]
    fn property_fair_shares_are_max_min_fair() {
        let mut rng = crate::reconcile::testing::Rng::new(8);
        for round in 0..500 {
            let names: Vec<String> = (0..rng.below(12)).map(|i| format!("ns{i}")).collect();
            let demands: Vec<(&str, usize)> =
                names.iter().map(|n| (n.as_str(), rng.below(80))).collect();
            let slots = rng.below(100);
            let shares = fair_shares(demands.iter().copied(), slots);
            let total: usize = demands.iter().map(|(_, d)| d).sum();
            assert_eq!(shares.values().sum::<usize>(), total.min(slots), "{round}");
            for (ns, d) in &demands {
                let s = shares.get(ns).copied().unwrap_or(0);
                assert!(s <= *d, "{round}: {ns} gets more than it asks");
                if s < *d {
                    for (other, o) in &shares {
                        assert!(
                            *o <= s + 1,
                            "{round}: {ns} cut at {s} while {other} holds {o}: {demands:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn share_warning_says_what_the_share_leaves() {
        let gw = ("tenant-root", "gw");
        let pub_of = |kv: &[(&str, usize)]| -> BTreeMap<String, usize> {
            kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        // (published, namespace, new, budget, expected fragment or None)
        type Case<'a> = (BTreeMap<String, usize>, &'a str, usize, Option<&'a str>);
        let cases: Vec<Case<'_>> = vec![
            // Room for everyone: no warning.
            (pub_of(&[("tenant-a", 10)]), "tenant-b", 3, None),
            (pub_of(&[]), "tenant-a", 0, None),
            // A full Gateway still has a fair share for a newcomer that asks little.
            (pub_of(&[("tenant-a", 63)]), "tenant-b", 3, None),
            // The big tenant past its share (another namespace asks): it is warned.
            (
                pub_of(&[("tenant-a", 60), ("tenant-b", 3)]),
                "tenant-a",
                1,
                Some("fair share is 60/63 listeners (http01); 1 hostname(s) get none"),
            ),
            // Two big tenants: the newcomer's share is half.
            (
                pub_of(&[("tenant-a", 63)]),
                "tenant-b",
                40,
                Some("fair share is 31/63 listeners (http01); 9 hostname(s) get none"),
            ),
            // cozy-* goes first, whatever the tenants hold.
            (pub_of(&[("tenant-a", 63)]), "cozy-mon", 2, None),
        ];
        for (published, ns, new, want) in cases {
            let got = share_warning(gw, ns, &published, new, 63, "cozy-");
            match want {
                None => assert_eq!(got, None, "{published:?} {ns} +{new}"),
                Some(f) => {
                    let text = got.unwrap_or_else(|| panic!("{published:?} {ns} +{new}: none"));
                    assert!(text.contains(f), "{text}");
                    assert!(text.starts_with("Gateway tenant-root/gw: "), "{text}");
                    assert!(text.contains("dns01"), "{text}");
                    assert!(
                        text.chars().count() <= crate::warning::MAX_WARNING_LEN,
                        "{text}"
                    );
                }
            }
        }
        // The whole text, as SPEC §3.3's warning reads.
        assert_eq!(
            share_warning(
                gw,
                "tenant-a",
                &pub_of(&[("tenant-a", 60), ("tenant-b", 3)]),
                1,
                63,
                "cozy-"
            )
            .as_deref(),
            Some(
                "Gateway tenant-root/gw: namespace fair share is 60/63 listeners (http01); \
                 1 hostname(s) get none; use dns01"
            )
        );
        // Long Gateway names are clipped to the limit.
        let long = "g".repeat(200);
        let text = share_warning(
            ("tenant-root", &long),
            "tenant-b",
            &pub_of(&[("tenant-a", 63)]),
            40,
            63,
            "cozy-",
        )
        .expect("past the share");
        assert_eq!(text.chars().count(), crate::warning::MAX_WARNING_LEN);
    }

    /// The one-namespace share over presorted demands is the full computation's entry, and
    /// the warnings of both paths are the same: random namespaces (system and tenant, ties
    /// on demand, zero demands, the reviewed one present or not), budgets and demands.
    #[test]
    fn property_share_of_matches_listener_shares() {
        let mut rng = crate::reconcile::testing::Rng::new(21);
        let pool = [
            "cozy-a", "cozy-b", "cozy-mon", "cozy-z", "a", "b", "ns0", "ns1", "ns2", "ns3",
            "tenant-a", "tenant-b", "tenant-c", "tenant-d", "tenant-e", "z",
        ];
        let gw = ("tenant-root", "gw");
        for round in 0..20_000 {
            let prefix = if rng.below(8) == 0 { "" } else { "cozy-" };
            let mut names: Vec<&str> = pool.to_vec();
            rng.shuffle(&mut names);
            names.truncate(rng.below(pool.len() + 1));
            // Few distinct demands make ties on demand common.
            let spread = [3, 10, 100][rng.below(3)];
            let published: BTreeMap<String, usize> = names
                .iter()
                .map(|n| (n.to_string(), rng.below(spread)))
                .collect();
            let namespace = if rng.below(3) == 0 || names.is_empty() {
                pool[rng.below(pool.len())]
            } else {
                names[rng.below(names.len())]
            };
            let budget = rng.below(71);
            let mine = rng.below(spread);
            let sorted =
                SortedDemands::new(published.iter().map(|(n, d)| (n.as_str(), *d)), prefix);
            let demands = published
                .iter()
                .filter(|(ns, _)| ns.as_str() != namespace)
                .map(|(ns, d)| (ns.as_str(), *d))
                .chain([(namespace, mine)]);
            let want = listener_shares(demands, budget, prefix)
                .get(namespace)
                .copied()
                .unwrap_or(0);
            assert_eq!(
                sorted.share_of(namespace, mine, budget, prefix),
                want,
                "{round}: {namespace} asking {mine} of {budget} with {published:?} ({prefix:?})"
            );
            let new = rng.below(spread);
            let mine_published = published.get(namespace).copied().unwrap_or(0);
            assert_eq!(
                share_warning_sorted(gw, namespace, &sorted, mine_published, new, budget, prefix),
                share_warning(gw, namespace, &published, new, budget, prefix),
                "{round}: {namespace} +{new} of {budget} with {published:?} ({prefix:?})"
            );
        }
    }

    /// Demands changed one namespace at a time are the demands built at once: random adds
    /// and removes (removes past a namespace's demand among them) over system and tenant
    /// namespaces, compared after each step.
    #[test]
    fn property_demands_changed_in_place_equal_demands_built_at_once() {
        let mut rng = crate::reconcile::testing::Rng::new(22);
        let pool = [
            "cozy-a", "cozy-b", "a", "ns0", "ns1", "tenant-a", "tenant-b", "z",
        ];
        for round in 0..2_000 {
            let prefix = if rng.below(8) == 0 { "" } else { "cozy-" };
            let mut model: BTreeMap<String, usize> = BTreeMap::new();
            let mut kept = SortedDemands::default();
            for step in 0..40 {
                let ns = pool[rng.below(pool.len())];
                let n = rng.below(4);
                if rng.below(3) == 0 {
                    kept.remove(ns, n, prefix);
                    if let Some(d) = model.get_mut(ns) {
                        *d -= n.min(*d);
                        if *d == 0 {
                            model.remove(ns);
                        }
                    }
                } else {
                    kept.add(&Arc::from(ns), n, prefix);
                    if n > 0 {
                        *model.entry(ns.to_string()).or_default() += n;
                    }
                }
                let built = SortedDemands::new(model.iter().map(|(n, d)| (n.as_str(), *d)), prefix);
                assert_eq!(kept, built, "{round}/{step}: {model:?}");
                assert_eq!(kept.to_map(), model, "{round}/{step}");
                let asking = pool[rng.below(pool.len())];
                assert_eq!(kept.get(asking), model.get(asking).copied());
                assert_eq!(
                    kept.others_ask(asking),
                    model.keys().any(|k| k != asking),
                    "{round}/{step}: {asking} {model:?}"
                );
            }
        }
    }
}
