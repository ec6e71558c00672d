//! The byte budget for request bodies buffered at once (SPEC §9, `--max-inflight-bytes`) and
//! the body limit arithmetic (SPEC §2.1).
//!
//! Bodies are charged frame by frame as they arrive, not by their announced length: a client
//! that announces 36 MiB and sends nothing holds nothing. While a request waits for budget it
//! reads no more of its body, so HTTP/2 flow control and TCP push back on the sender. A
//! request that has waited [`BUDGET_WAIT`] in total gets 503: long enough for the reviews in
//! flight (well under a millisecond each) to finish and free their bytes, short against the
//! API server's webhook timeout (5 s in our registration), so the 503 arrives while the API
//! server still waits and it reports a clear failure instead of a timeout.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest object the API server stores (etcd's default request limit).
pub const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024;
/// UPDATE carries the object twice (`object` and `oldObject`).
pub const OBJECT_COPIES: usize = 2;
/// The API server's JSON encoder escapes `<`, `>` and `&` as `\u003c`: 6 bytes for 1.
pub const ESCAPE_FACTOR: usize = 6;

/// Body limit (413 beyond it): the worst the API server sends, 3 MiB × 2 × 6 = 36 MiB.
pub const fn body_limit(max_object: usize, copies: usize, escape_factor: usize) -> usize {
    max_object
        .saturating_mul(copies)
        .saturating_mul(escape_factor)
}

pub const MAX_BODY_BYTES: usize = body_limit(MAX_OBJECT_BYTES, OBJECT_COPIES, ESCAPE_FACTOR);

/// `--max-inflight-bytes` default.
pub const DEFAULT_MAX_INFLIGHT_BYTES: usize = 64 * 1024 * 1024;

/// Longest total time one request waits for budget before it gets 503.
pub const BUDGET_WAIT: Duration = Duration::from_secs(1);

/// Bytes of request bodies held in memory at once, across all connections.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    bytes: Arc<Semaphore>,
    total: usize,
    wait: Duration,
}

/// What one request holds; released when dropped (after its review is answered).
#[derive(Debug, Default)]
pub(crate) struct Held {
    permit: Option<OwnedSemaphorePermit>,
    /// Time spent waiting so far, against the request's [`BUDGET_WAIT`].
    waited: Duration,
}

/// The budget could not cover a request within the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exhausted {
    pub total: usize,
    pub wait: Duration,
}

impl Budget {
    pub(crate) fn new(total: usize, wait: Duration) -> Budget {
        // tokio caps a semaphore at usize::MAX >> 3 permits; far above any real budget.
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Budget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
            wait,
        }
    }

    /// Charge `n` more bytes to `held`, waiting (within what is left of the request's wait)
    /// for others to release theirs.
    pub(crate) async fn charge(&self, held: &mut Held, n: usize) -> Result<(), Exhausted> {
        if n == 0 {
            return Ok(());
        }
        let exhausted = Exhausted {
            total: self.total,
            wait: self.wait,
        };
        // More than the whole budget can never be granted (and tokio takes u32 counts).
        let Ok(count) = u32::try_from(n) else {
            return Err(exhausted);
        };
        if n > self.total {
            return Err(exhausted);
        }
        let permit = match self.bytes.clone().try_acquire_many_owned(count) {
            Ok(p) => p,
            Err(_) => {
                let left = self.wait.saturating_sub(held.waited);
                let started = tokio::time::Instant::now();
                let r =
                    tokio::time::timeout(left, self.bytes.clone().acquire_many_owned(count)).await;
                held.waited += started.elapsed();
                match r {
                    Ok(Ok(p)) => p,
                    // Timed out, or the semaphore was closed (never done here).
                    _ => return Err(exhausted),
                }
            }
        };
        match &mut held.permit {
            Some(p) => p.merge(permit),
            None => held.permit = Some(permit),
        }
        Ok(())
    }

    #[cfg(test)]
    fn available(&self) -> usize {
        self.bytes.available_permits()
    }
}

impl Held {
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_limit_covers_the_worst_the_api_server_sends() {
        assert_eq!(MAX_BODY_BYTES, 36 * 1024 * 1024);
        // The case seen: a 1.6 MB Ingress stored fine, full of `<`, sent on UPDATE.
        let ingress = 1_600_000;
        assert!(ingress * OBJECT_COPIES * ESCAPE_FACTOR <= MAX_BODY_BYTES);
        // The largest object, every byte escaped, twice.
        assert_eq!(
            body_limit(MAX_OBJECT_BYTES, 2, 6),
            MAX_OBJECT_BYTES * 12,
            "3 MiB, twice, six bytes for one"
        );
        // One review at the limit fits the default budget: it is never refused for size
        // alone.
        const { assert!(MAX_BODY_BYTES <= DEFAULT_MAX_INFLIGHT_BYTES) };
        assert_eq!(body_limit(usize::MAX, 2, 6), usize::MAX, "saturates");
    }

    #[tokio::test]
    async fn charges_add_up_and_release_on_drop() {
        let b = Budget::new(100, Duration::from_millis(50));
        let mut a = Held::default();
        b.charge(&mut a, 40).await.expect("fits");
        b.charge(&mut a, 40).await.expect("fits");
        assert_eq!(a.bytes(), 80);
        assert_eq!(b.available(), 20);
        let mut c = Held::default();
        assert!(
            b.charge(&mut c, 30).await.is_err(),
            "over the budget waits, then fails"
        );
        assert!(c.waited >= Duration::from_millis(50));
        drop(a);
        assert_eq!(b.available(), 100);
        // The wait is per request and used up: c gets no second wait.
        let mut d = Held::default();
        b.charge(&mut d, 100).await.expect("whole budget");
        assert!(b.charge(&mut c, 1).await.is_err());
        assert!(
            b.charge(&mut Held::default(), 101).await.is_err(),
            "never grantable"
        );
    }

    #[tokio::test]
    async fn a_waiting_request_gets_bytes_released_during_its_wait() {
        let b = Budget::new(10, Duration::from_secs(5));
        let mut first = Held::default();
        b.charge(&mut first, 10).await.expect("fits");
        let b2 = b.clone();
        let waiter = tokio::spawn(async move {
            let mut h = Held::default();
            b2.charge(&mut h, 5).await.map(|_| h.bytes())
        });
        // Let the waiter queue up, then release.
        tokio::task::yield_now().await;
        drop(first);
        assert_eq!(waiter.await.expect("task"), Ok(5));
    }
}
