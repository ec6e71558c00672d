//! Live GETs for namespaces the index does not hold (SPEC §2.2): coalesced per name and
//! with "not found" remembered briefly, so a flood of reviews for unknown namespaces costs a
//! bounded number of API requests.
//!
//! Through the API server a review never names a namespace that does not exist (the
//! NamespaceLifecycle plugin rejects such requests before webhooks run), so misses come from
//! cache lag — the GET finds the namespace — or from a client that reaches the webhook port
//! directly. The negative memory is therefore short, capped in size, and cleared by every
//! namespace watch event (an event may be the namespace being created).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OnceCell, Semaphore};

use crate::platform::NamespaceContext;

/// How long the live GET on an index miss may take before the request is denied with
/// "retry": well inside the API server's 5 s webhook timeout.
pub const LIVE_GET_TIMEOUT: Duration = Duration::from_secs(2);

/// Cloned to every review that waited for the same GET ([`MissCache`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum LookupError {
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the API server returned an error: {0}")]
    Api(Arc<kube::Error>),
}

/// How long a "not found" answers for its name.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(3);
/// Most names remembered as missing; the oldest are dropped first. About 100 KiB at most.
pub const NEGATIVE_CAP: usize = 1024;
/// Most live GETs in flight at once, over all names: distinct unknown names cannot turn the
/// webhook into a request amplifier against the API server. A review that cannot get a
/// permit within [`LIVE_GET_TIMEOUT`] is denied with "retry".
pub const MAX_CONCURRENT_GETS: usize = 16;

type Outcome = Result<NamespaceContext, LookupError>;

/// The shared state of the misses of one namespace source.
pub struct MissCache {
    inflight: Mutex<HashMap<String, Arc<OnceCell<Outcome>>>>,
    negative: Mutex<Negative>,
    /// Bumped by every watch event: a GET that started before an event must not remember
    /// "not found" after it (the event may be the namespace's creation).
    epoch: AtomicU64,
    permits: Semaphore,
    ttl: Duration,
}

impl Default for MissCache {
    fn default() -> Self {
        MissCache::new(NEGATIVE_TTL, NEGATIVE_CAP)
    }
}

impl MissCache {
    pub fn new(ttl: Duration, cap: usize) -> MissCache {
        MissCache {
            inflight: Mutex::new(HashMap::new()),
            negative: Mutex::new(Negative::new(cap)),
            epoch: AtomicU64::new(0),
            permits: Semaphore::new(MAX_CONCURRENT_GETS),
            ttl,
        }
    }

    /// The namespace `name` per the API server: a remembered "not found", or the answer of the
    /// one GET (`fetch`) in flight for that name, started by whichever caller came first. If
    /// that caller goes away mid-GET, the next waiter runs its own `fetch`.
    pub async fn lookup<F, Fut>(&self, name: &str, fetch: F) -> Outcome
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Outcome>,
    {
        if lock(&self.negative).contains(name, Instant::now()) {
            return Ok(NamespaceContext::NotFound);
        }
        let cell = lock(&self.inflight)
            .entry(name.to_string())
            .or_default()
            .clone();
        let outcome = cell
            .get_or_init(|| async {
                let epoch = self.epoch.load(Ordering::SeqCst);
                let outcome = tokio::time::timeout(LIVE_GET_TIMEOUT, async {
                    // Closed only if the semaphore is closed, which it never is.
                    let _permit = self.permits.acquire().await;
                    fetch().await
                })
                .await
                .unwrap_or(Err(LookupError::Timeout(LIVE_GET_TIMEOUT)));
                if matches!(outcome, Ok(NamespaceContext::NotFound))
                    && self.epoch.load(Ordering::SeqCst) == epoch
                {
                    let now = Instant::now();
                    lock(&self.negative).insert(name, now + self.ttl, now);
                }
                outcome
            })
            .await
            .clone();
        // The answer served the callers that waited for it; the next miss asks again.
        let mut inflight = lock(&self.inflight);
        if inflight.get(name).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            inflight.remove(name);
        }
        outcome
    }

    /// A watch event for `name` (created, changed, deleted) or a relist: forget what a GET
    /// said about it.
    pub fn forget(&self, name: &str) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        lock(&self.negative).remove(name);
    }

    /// Names currently remembered as missing (for tests and metrics).
    pub fn negative_len(&self) -> usize {
        lock(&self.negative).map.len()
    }
}

/// Names known missing until an instant, oldest first, at most `cap` of them.
struct Negative {
    map: HashMap<String, Instant>,
    /// Insertion order = expiry order (one TTL). Entries whose name was re-inserted or
    /// forgotten are stale and skipped; the queue is capped like the map.
    order: VecDeque<(String, Instant)>,
    cap: usize,
}

impl Negative {
    fn new(cap: usize) -> Negative {
        Negative {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    fn contains(&mut self, name: &str, now: Instant) -> bool {
        match self.map.get(name) {
            Some(until) if *until > now => true,
            Some(_) => {
                self.map.remove(name);
                false
            }
            None => false,
        }
    }

    fn insert(&mut self, name: &str, until: Instant, now: Instant) {
        while let Some((front, at)) = self.order.front() {
            if *at > now && self.order.len() < self.cap {
                break;
            }
            if self.map.get(front) == Some(at) {
                self.map.remove(front);
            }
            self.order.pop_front();
        }
        self.map.insert(name.to_string(), until);
        self.order.push_back((name.to_string(), until));
    }

    fn remove(&mut self, name: &str) {
        self.map.remove(name);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a few map operations; a panic in one leaves data that is
    // still safe to read, and poisoning must not turn later reviews into panics.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    async fn count_fetch(n: &AtomicUsize, answer: Outcome) -> Outcome {
        n.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        answer
    }

    #[tokio::test]
    async fn concurrent_misses_for_one_name_share_one_get() {
        let cache = Arc::new(MissCache::default());
        let gets = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let (cache, gets) = (cache.clone(), gets.clone());
                tokio::spawn(async move {
                    let name = format!("tenant-ghost-{}", i % 4);
                    cache
                        .lookup(&name, || count_fetch(&gets, Ok(NamespaceContext::NotFound)))
                        .await
                })
            })
            .collect();
        for t in tasks {
            let r = t.await.expect("joins");
            assert!(matches!(r, Ok(NamespaceContext::NotFound)), "{r:?}");
        }
        assert_eq!(gets.load(Ordering::SeqCst), 4, "one GET per name");
        assert_eq!(cache.negative_len(), 4);
        // Remembered: later misses cost nothing.
        for _ in 0..100 {
            let r = cache
                .lookup("tenant-ghost-0", || {
                    count_fetch(&gets, Ok(NamespaceContext::NotFound))
                })
                .await;
            assert!(matches!(r, Ok(NamespaceContext::NotFound)), "{r:?}");
        }
        assert_eq!(gets.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn found_and_errors_are_shared_but_not_remembered() {
        let cache = MissCache::default();
        let gets = AtomicUsize::new(0);
        let found = NamespaceContext::Found {
            labels: BTreeMap::new(),
        };
        for _ in 0..3 {
            let r = cache
                .lookup("tenant-a", || count_fetch(&gets, Ok(found.clone())))
                .await;
            assert!(matches!(&r, Ok(f) if *f == found), "{r:?}");
            let r = cache
                .lookup("tenant-b", || {
                    count_fetch(&gets, Err(LookupError::Timeout(Duration::from_secs(1))))
                })
                .await;
            assert!(r.is_err());
        }
        assert_eq!(
            gets.load(Ordering::SeqCst),
            6,
            "each sequential miss asks again"
        );
        assert_eq!(cache.negative_len(), 0);
    }

    #[tokio::test]
    async fn not_found_expires_and_a_watch_event_clears_it() {
        let cache = MissCache::new(Duration::from_millis(50), 16);
        let gets = AtomicUsize::new(0);
        let nf = || count_fetch(&gets, Ok(NamespaceContext::NotFound));
        cache.lookup("tenant-x", nf).await.expect("ok");
        cache.lookup("tenant-x", nf).await.expect("ok");
        assert_eq!(gets.load(Ordering::SeqCst), 1);
        cache.forget("tenant-x");
        cache.lookup("tenant-x", nf).await.expect("ok");
        assert_eq!(
            gets.load(Ordering::SeqCst),
            2,
            "forgotten after a watch event"
        );
        tokio::time::sleep(Duration::from_millis(80)).await;
        cache.lookup("tenant-x", nf).await.expect("ok");
        assert_eq!(gets.load(Ordering::SeqCst), 3, "expired");
    }

    #[tokio::test]
    async fn an_event_during_the_get_keeps_not_found_from_being_remembered() {
        let cache = MissCache::default();
        let r = cache
            .lookup("tenant-new", || async {
                // The namespace is created while the GET is on the wire.
                cache.forget("tenant-new");
                Ok(NamespaceContext::NotFound)
            })
            .await;
        assert!(matches!(r, Ok(NamespaceContext::NotFound)), "{r:?}");
        assert_eq!(cache.negative_len(), 0);
    }

    #[test]
    fn negative_memory_is_capped() {
        let mut n = Negative::new(8);
        let now = Instant::now();
        let until = now + Duration::from_secs(60);
        for i in 0..10_000 {
            n.insert(&format!("tenant-{i}"), until, now);
            // Re-inserting and forgetting leave stale queue entries; they are capped too.
            n.insert(&format!("tenant-{i}"), until, now);
            if i % 3 == 0 {
                n.remove(&format!("tenant-{i}"));
            }
            assert!(n.map.len() <= 8 && n.order.len() <= 8, "{i}");
        }
        assert!(n.contains("tenant-9998", now));
        assert!(!n.contains("tenant-0", now), "oldest dropped");
        // Expired entries are dropped on the next insert and never answer.
        let later = until + Duration::from_secs(1);
        assert!(!n.contains("tenant-9998", later));
        n.insert("tenant-z", later + Duration::from_secs(1), later);
        assert_eq!(n.map.len(), 1);
    }
}
