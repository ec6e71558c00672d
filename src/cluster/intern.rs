//! Shared copies of the values repeated across tens of thousands of cached objects
//! (namespaces, Gateway names, owner uids, condition types and reasons, the parentRefs routes
//! name): one allocation per distinct value instead of one per object.
//!
//! Each table only grows by values a cached object holds, and it forgets a value once no
//! object holds it any more (checked whenever the table has doubled since the last sweep),
//! so objects that come and go with fresh names do not leave their values behind.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};

/// Values longer than this are rarely shared (messages, hostnames): kept as they are.
pub const MAX_INTERNED_LEN: usize = 128;

struct Table<T: ?Sized> {
    values: HashSet<Arc<T>>,
    /// Size after the last sweep.
    swept_at: usize,
}

impl<T: ?Sized> Default for Table<T> {
    fn default() -> Self {
        Table {
            values: HashSet::new(),
            swept_at: 0,
        }
    }
}

impl<T: ?Sized + Eq + Hash> Table<T> {
    fn shared<Q>(&mut self, v: &Q, make: impl FnOnce(&Q) -> Arc<T>) -> Arc<T>
    where
        Arc<T>: Borrow<Q>,
        Q: ?Sized + Eq + Hash,
    {
        if let Some(v) = self.values.get(v) {
            return v.clone();
        }
        if self.values.len() >= 2 * self.swept_at.max(1024) {
            // Only the table holds these: no cached object uses them any more.
            self.values.retain(|v| Arc::strong_count(v) > 1);
            self.swept_at = self.values.len();
        }
        let v = make(v);
        self.values.insert(v.clone());
        v
    }
}

/// A table of shared values of one type, for a `static`.
pub struct Interner<T: ?Sized>(OnceLock<Mutex<Table<T>>>);

impl<T: ?Sized + Eq + Hash> Interner<T> {
    pub const fn new() -> Self {
        Interner(OnceLock::new())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table<T>> {
        // A panic while holding the lock leaves a plain set behind: still usable.
        self.0
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The shared copy of `v`, made by `make` when there is none yet.
    pub fn shared<Q>(&self, v: &Q, make: impl FnOnce(&Q) -> Arc<T>) -> Arc<T>
    where
        Arc<T>: Borrow<Q>,
        Q: ?Sized + Eq + Hash,
    {
        self.lock().shared(v, make)
    }
}

impl<T: ?Sized + Eq + Hash> Default for Interner<T> {
    fn default() -> Self {
        Interner::new()
    }
}

static STRINGS: Interner<str> = Interner::new();

/// The shared copy of `s` (a fresh one when it is too long to be worth sharing).
pub fn intern(s: &str) -> Arc<str> {
    if s.len() > MAX_INTERNED_LEN {
        return Arc::from(s);
    }
    STRINGS.shared(s, |s: &str| Arc::<str>::from(s))
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
        let len = STRINGS.lock().values.len();
        // Other tests intern a few values at the same time; far fewer than the 40,000 made.
        assert!(len < 10_000, "table holds {len}");
        assert!(
            Arc::ptr_eq(&kept, &intern("intern-test-kept")),
            "a held value stays"
        );
    }
}
