//! Per-object write backoff (SPEC §3.7 "Failure isolation"): which of a plan's writes run now,
//! what a failure costs, and the status message naming the failed objects. Pure: time is a
//! parameter.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::api::TenantGatewayStatus;
use super::status::{READY, condition};

/// The Ready reason while some of the plan's writes fail.
pub const WRITE_FAILED: &str = "WriteFailed";

/// The first retry of a failed object; doubled per further failure up to [`MAX_DELAY`].
pub const BASE_DELAY: Duration = Duration::from_secs(1);
/// The longest an object waits between attempts (cert-manager and kube-runtime cap at minutes).
pub const MAX_DELAY: Duration = Duration::from_secs(300);
/// Objects named in the status message; the others are counted ("and K more").
pub const NAMED: usize = 3;
/// Characters of one object's error kept in the status message.
pub const ERROR_CHARS: usize = 200;

/// One object whose last write failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub failures: u32,
    pub retry_at: Instant,
    pub error: String,
}

/// The failed objects of one TenantGateway, keyed by a stable object description such as
/// `Certificate tenant-a/gw-a-tls`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBackoff {
    failed: BTreeMap<String, Failed>,
}

/// The delay after the `failures`-th consecutive failure.
pub fn delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    BASE_DELAY
        .saturating_mul(2u32.saturating_pow(exp))
        .min(MAX_DELAY)
}

impl WriteBackoff {
    /// May the write of `key` be sent at `now`?
    pub fn due(&self, key: &str, now: Instant) -> bool {
        self.failed.get(key).is_none_or(|f| f.retry_at <= now)
    }

    /// Record a failure; returns true on the first failure of a run (worth an event).
    pub fn failed(&mut self, key: &str, error: &str, now: Instant) -> bool {
        let e = self.failed.entry(key.to_string()).or_insert(Failed {
            failures: 0,
            retry_at: now,
            error: String::new(),
        });
        e.failures = e.failures.saturating_add(1);
        e.retry_at = now + delay(e.failures);
        e.error = error.chars().take(ERROR_CHARS).collect();
        e.failures == 1
    }

    pub fn succeeded(&mut self, key: &str) {
        self.failed.remove(key);
    }

    /// Forget the objects the plan no longer writes: the world got where it should be
    /// without us (or the object is not wanted any more), so there is nothing to retry.
    pub fn keep_only(&mut self, planned: &BTreeSet<String>) {
        self.failed.retain(|k, _| planned.contains(k));
    }

    pub fn is_empty(&self) -> bool {
        self.failed.is_empty()
    }

    /// When the next failed object is due.
    pub fn next_retry(&self) -> Option<Instant> {
        self.failed.values().map(|f| f.retry_at).min()
    }

    /// The status message: deterministic (objects in name order, no times or counts of
    /// attempts, so an unchanged failure does not rewrite the status) and bounded.
    pub fn message(&self) -> Option<String> {
        if self.failed.is_empty() {
            return None;
        }
        let named: Vec<String> = self
            .failed
            .iter()
            .take(NAMED)
            .map(|(k, f)| format!("{k}: {}", f.error))
            .collect();
        let mut m = format!(
            "writes failed, retried with backoff while the others are applied: {}",
            named.join("; ")
        );
        let more = self.failed.len().saturating_sub(NAMED);
        if more > 0 {
            m.push_str(&format!("; and {more} more"));
        }
        Some(m)
    }
}

/// The status while writes fail: the planned status with Ready False naming the failed
/// objects. The transition time is judged against the status as observed (not the planned
/// one, which is Ready True), so an unchanged failure gives an unchanged status: no write.
pub fn failed_status(
    planned: &TenantGatewayStatus,
    observed: Option<&TenantGatewayStatus>,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> TenantGatewayStatus {
    let prev: &[Condition] = observed.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
    let ready = condition(READY, false, WRITE_FAILED, message, generation, now, prev);
    let mut conditions: Vec<Condition> = planned.conditions.clone();
    match conditions.iter_mut().find(|c| c.type_ == READY) {
        Some(c) => *c = ready,
        None => conditions.insert(0, ready),
    }
    TenantGatewayStatus {
        conditions,
        ..planned.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap_or_default())
    }

    #[test]
    fn failed_status_keeps_the_plan_and_is_stable_across_reconciles() {
        let planned = TenantGatewayStatus {
            observed_generation: Some(3),
            conditions: vec![
                condition(READY, true, "Ready", "ok".into(), Some(3), &at(10), &[]),
                condition(
                    "Programmed",
                    true,
                    "Programmed",
                    "p".into(),
                    Some(3),
                    &at(10),
                    &[],
                ),
            ],
            listeners: vec![Default::default()],
            gateways: Vec::new(),
        };
        let first = failed_status(&planned, None, "m".into(), Some(3), &at(20));
        assert_eq!(first.conditions.len(), 2);
        assert_eq!(first.conditions[0].type_, READY);
        assert_eq!(first.conditions[0].status, "False");
        assert_eq!(first.conditions[0].reason, WRITE_FAILED);
        assert_eq!(first.conditions[0].last_transition_time, at(20));
        assert_eq!(first.conditions[1], planned.conditions[1]);
        assert_eq!(first.listeners, planned.listeners);
        assert_eq!(first.observed_generation, Some(3));
        // Later, planned afresh (Ready True again at a new time): identical to what is stored.
        let mut replanned = planned.clone();
        replanned.conditions[0].last_transition_time = at(30);
        let again = failed_status(&replanned, Some(&first), "m".into(), Some(3), &at(30));
        assert_eq!(again, first, "no rewrite for an unchanged failure");
    }

    #[test]
    fn delay_doubles_from_one_second_and_is_capped() {
        let table = [
            (1, 1),
            (2, 2),
            (3, 4),
            (4, 8),
            (9, 256),
            (10, 300),
            (u32::MAX, 300),
        ];
        for (failures, secs) in table {
            assert_eq!(delay(failures), Duration::from_secs(secs), "{failures}");
        }
    }

    #[test]
    fn only_the_failed_object_waits() {
        let t0 = Instant::now();
        let mut b = WriteBackoff::default();
        assert!(
            b.failed("Certificate tenant-a/c1", "denied", t0),
            "first failure"
        );
        assert!(!b.due("Certificate tenant-a/c1", t0));
        assert!(
            b.due("Certificate tenant-a/c2", t0),
            "other objects are not held"
        );
        assert!(b.due("Gateway tenant-a/gw", t0));
        assert!(b.due("Certificate tenant-a/c1", t0 + Duration::from_secs(1)));
        assert!(
            !b.failed("Certificate tenant-a/c1", "denied", t0),
            "not the first"
        );
        assert!(!b.due("Certificate tenant-a/c1", t0 + Duration::from_secs(1)));
        assert!(b.due("Certificate tenant-a/c1", t0 + Duration::from_secs(2)));
        assert_eq!(b.next_retry(), Some(t0 + Duration::from_secs(2)));
        b.succeeded("Certificate tenant-a/c1");
        assert!(b.is_empty());
        assert_eq!(b.next_retry(), None);
        assert!(
            b.failed("Certificate tenant-a/c1", "denied", t0),
            "a new run"
        );
    }

    #[test]
    fn objects_no_longer_planned_are_forgotten() {
        let t0 = Instant::now();
        let mut b = WriteBackoff::default();
        b.failed("A", "x", t0);
        b.failed("B", "y", t0);
        b.keep_only(&["B".to_string()].into_iter().collect());
        assert!(b.due("A", t0));
        assert!(!b.due("B", t0));
    }

    #[test]
    fn the_message_is_sorted_bounded_and_time_free() {
        let t0 = Instant::now();
        let mut b = WriteBackoff::default();
        assert_eq!(b.message(), None);
        b.failed("Certificate tenant-a/b", "denied by policy", t0);
        assert_eq!(
            b.message().as_deref(),
            Some(
                "writes failed, retried with backoff while the others are applied: \
                 Certificate tenant-a/b: denied by policy"
            )
        );
        let once = b.message();
        b.failed(
            "Certificate tenant-a/b",
            "denied by policy",
            t0 + Duration::from_secs(9),
        );
        assert_eq!(
            b.message(),
            once,
            "another attempt does not change the message"
        );
        for k in ["e", "a", "d", "c"] {
            b.failed(&format!("Certificate tenant-a/{k}"), &"z".repeat(5000), t0);
        }
        let m = b.message().unwrap_or_default();
        assert!(m.ends_with("; and 2 more"), "{m}");
        let a = m.find("tenant-a/a:").unwrap_or(usize::MAX);
        let bb = m.find("tenant-a/b:").unwrap_or(usize::MAX);
        let c = m.find("tenant-a/c:").unwrap_or(usize::MAX);
        assert!(a < bb && bb < c, "name order: {m}");
        assert!(
            !m.contains("tenant-a/d") && !m.contains("tenant-a/e"),
            "{m}"
        );
        assert!(
            m.len() < 100 + NAMED * (ERROR_CHARS + 40),
            "bounded: {}",
            m.len()
        );
    }
}
