//! Readiness state shared by the parts of `serve` (SPEC §6: TLS loaded, namespace index
//! synced, server bound; readiness turns false first on shutdown). The TLS loader and the
//! webhook listener, the namespace index and the leader election each report their part;
//! the metrics/health port reads it. Holding the Lease is reported, never required: a
//! standby replica serves the webhook just as well.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

#[derive(Debug, Default)]
pub struct Readiness {
    tls_loaded: AtomicBool,
    index_synced: AtomicBool,
    bound: AtomicBool,
    shutting_down: AtomicBool,
    /// `serve --no-webhook`: there is no serving pair and no webhook listener to wait for.
    no_webhook: AtomicBool,
    /// The leader election's view: 0 until it has run (or without one).
    lease: AtomicU8,
    /// Last TLS reload problem, reported by `/readyz` as detail while the old pair serves.
    tls_error: std::sync::Mutex<Option<String>>,
}

const LEASE_STANDBY: u8 = 1;
const LEASE_HOLDER: u8 = 2;

impl Readiness {
    pub fn new() -> Readiness {
        Readiness::default()
    }

    /// For `serve --no-webhook`: ready once the namespace index is synced.
    pub fn without_webhook() -> Readiness {
        let r = Readiness::default();
        r.no_webhook.store(true, Ordering::SeqCst);
        r
    }

    /// Whether this replica holds the leader Lease (shown by `/readyz`, never required).
    pub fn set_lease_holder(&self, holder: bool) {
        let v = if holder { LEASE_HOLDER } else { LEASE_STANDBY };
        self.lease.store(v, Ordering::SeqCst);
    }

    pub fn set_tls_loaded(&self, v: bool) {
        self.tls_loaded.store(v, Ordering::SeqCst);
    }
    pub fn set_index_synced(&self, v: bool) {
        self.index_synced.store(v, Ordering::SeqCst);
    }
    pub fn set_bound(&self, v: bool) {
        self.bound.store(v, Ordering::SeqCst);
    }
    pub fn set_shutting_down(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }
    pub fn index_synced(&self) -> bool {
        self.index_synced.load(Ordering::SeqCst)
    }
    pub fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }
    /// The last TLS reload problem, if the newest files on disk could not be loaded.
    pub fn tls_error(&self) -> Option<String> {
        self.tls_error.lock().ok().and_then(|g| g.clone())
    }
    pub fn set_tls_error(&self, e: Option<String>) {
        if let Ok(mut g) = self.tls_error.lock() {
            *g = e;
        }
    }

    /// `Ok(detail)` when ready, `Err(reasons)` listing every failing check otherwise.
    pub fn check(&self) -> Result<String, Vec<String>> {
        let mut failing = Vec::new();
        if self.shutting_down.load(Ordering::SeqCst) {
            failing.push("shutting down".to_string());
        }
        let webhook = !self.no_webhook.load(Ordering::SeqCst);
        if webhook && !self.tls_loaded.load(Ordering::SeqCst) {
            failing.push("tls: serving certificate not loaded".to_string());
        }
        if !self.index_synced.load(Ordering::SeqCst) {
            failing.push("namespace index: not synced yet".to_string());
        }
        if webhook && !self.bound.load(Ordering::SeqCst) {
            failing.push("webhook listener: not bound yet".to_string());
        }
        if failing.is_empty() {
            let mut notes = Vec::new();
            if let Some(e) = self.tls_error.lock().ok().and_then(|g| g.clone()) {
                notes.push(format!(
                    "tls reload failed, old certificate still serving: {e}"
                ));
            }
            match self.lease.load(Ordering::SeqCst) {
                LEASE_HOLDER => notes.push("leader: holds the Lease".to_string()),
                LEASE_STANDBY => notes.push("leader: standby".to_string()),
                _ => {}
            }
            if !webhook {
                notes.push("no webhook".to_string());
            }
            if notes.is_empty() {
                Ok("ok".to_string())
            } else {
                Ok(format!("ok ({})", notes.join("; ")))
            }
        } else {
            Err(failing)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_readiness_needs_every_part() {
        let r = Readiness::new();
        let failing = r.check().unwrap_err();
        assert_eq!(failing.len(), 3, "{failing:?}");
        r.set_tls_loaded(true);
        r.set_index_synced(true);
        assert!(r.check().is_err(), "the listener is not bound yet");
        r.set_bound(true);
        assert_eq!(r.check(), Ok("ok".to_string()));
        r.set_lease_holder(false);
        assert_eq!(r.check(), Ok("ok (leader: standby)".to_string()));
        r.set_shutting_down();
        assert!(
            r.check()
                .unwrap_err()
                .contains(&"shutting down".to_string())
        );
    }

    #[test]
    fn without_webhook_only_the_index_counts() {
        let r = Readiness::without_webhook();
        assert_eq!(
            r.check(),
            Err(vec!["namespace index: not synced yet".to_string()])
        );
        r.set_index_synced(true);
        r.set_lease_holder(true);
        assert_eq!(
            r.check(),
            Ok("ok (leader: holds the Lease; no webhook)".to_string())
        );
    }
}
