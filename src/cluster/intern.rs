//! Shared copies of the short strings repeated across tens of thousands of cached objects
//! (namespaces, Gateway names, owner uids, condition types and reasons): one allocation per
//! distinct value instead of one per object.
//!
//! The table only grows by values a cached object holds, and it forgets a value once no
//! object holds it any more (checked whenever the table has doubled since the last sweep),
//! so objects that come and go with fresh names do not leave their strings behind.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

/// Values longer than this are rarely shared (messages, hostnames): kept as they are.
pub const MAX_INTERNED_LEN: usize = 128;

#[derive(Default)]
struct Table {
    values: HashSet<Arc<str>>,
    /// Size after the last sweep.
    swept_at: usize,
}

fn table() -> &'static Mutex<Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default)
}

/// The shared copy of `s` (a fresh one when it is too long to be worth sharing).
pub fn intern(s: &str) -> Arc<str> {
    if s.len() > MAX_INTERNED_LEN {
        return Arc::from(s);
    }
    // A panic while holding the lock leaves a plain set behind: still usable.
    let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(v) = t.values.get(s) {
        return v.clone();
    }
    if t.values.len() >= 2 * t.swept_at.max(1024) {
        // Only the table holds these: no cached object uses them any more.
        t.values.retain(|v| Arc::strong_count(v) > 1);
        t.swept_at = t.values.len();
    }
    let v: Arc<str> = Arc::from(s);
    t.values.insert(v.clone());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_allocation() {
        let a = intern("tenant-intern-test-a");
        let b = intern(&String::from("tenant-intern-test-a"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*a, "tenant-intern-test-a");
        let c = intern("tenant-intern-test-b");
        assert!(!Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn long_values_are_not_shared() {
        let long = "x".repeat(MAX_INTERNED_LEN + 1);
        let a = intern(&long);
        let b = intern(&long);
        assert_eq!(a, b);
        assert!(!Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn values_no_object_holds_are_forgotten() {
        // Many distinct values held by nobody: the table stays bounded by the sweeps.
        for i in 0..20_000 {
            drop(intern(&format!("intern-test-gone-{i}")));
        }
        let kept = intern("intern-test-kept");
        for i in 0..20_000 {
            drop(intern(&format!("intern-test-gone-again-{i}")));
        }
        let len = table().lock().map(|t| t.values.len()).unwrap_or(usize::MAX);
        // Other tests intern a few values at the same time; far fewer than the 40,000 made.
        assert!(len < 10_000, "table holds {len}");
        assert!(
            Arc::ptr_eq(&kept, &intern("intern-test-kept")),
            "a held value stays"
        );
    }
}
