//! Readiness state shared by the parts of `serve` (SPEC §6: TLS loaded, namespace index
//! synced, server bound; readiness turns false first on shutdown).

use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, Default)]
pub struct Readiness {
    tls_loaded: AtomicBool,
    index_synced: AtomicBool,
    bound: AtomicBool,
    shutting_down: AtomicBool,
    /// Last TLS reload problem, reported by `/readyz` as detail while the old pair serves.
    tls_error: std::sync::Mutex<Option<String>>,
}

impl Readiness {
    pub fn new() -> Readiness {
        Readiness::default()
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
        if !self.tls_loaded.load(Ordering::SeqCst) {
            failing.push("tls: serving certificate not loaded".to_string());
        }
        if !self.index_synced.load(Ordering::SeqCst) {
            failing.push("namespace index: not synced yet".to_string());
        }
        if !self.bound.load(Ordering::SeqCst) {
            failing.push("webhook listener: not bound yet".to_string());
        }
        if failing.is_empty() {
            let detail = match self.tls_error.lock().ok().and_then(|g| g.clone()) {
                Some(e) => format!("ok (tls reload failed, old certificate still serving: {e})"),
                None => "ok".to_string(),
            };
            Ok(detail)
        } else {
            Err(failing)
        }
    }
}
