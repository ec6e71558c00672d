//! Where planning runs (SPEC §3.7): gather, plan and cleanup are CPU work, linear in a
//! TenantGateway's inputs but large for the biggest one the schema allows, so they run on
//! tokio's blocking pool, never on the runtime threads that answer admission reviews, and a
//! semaphore bounds how many plans take a core at once. `bench/` measures the webhook's
//! latency with this and without it (`loadgen planning`).

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::error::Error;

/// Runs planning work off the async runtime, at most `permits` at once.
#[derive(Debug, Clone)]
pub struct Planner {
    slots: Arc<Semaphore>,
}

impl Planner {
    pub fn new(permits: usize) -> Planner {
        Planner {
            slots: Arc::new(Semaphore::new(permits.max(1))),
        }
    }

    /// Half the cores (at least one): reconciles of huge TenantGateways leave the other half
    /// to the runtime that answers admission.
    pub fn for_this_machine() -> Planner {
        Planner::new(
            std::thread::available_parallelism()
                .map(|n| n.get() / 2)
                .unwrap_or(1),
        )
    }

    /// Run `f` on the blocking pool under a slot. The permit moves into the task, so a
    /// cancelled reconcile still holds it until its planning really ends.
    pub async fn run<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        // The semaphore is never closed, so acquiring only waits.
        let permit = self.slots.clone().acquire_owned().await.ok();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f()
        })
        .await
        .map_err(|e| Error::Planning(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// At most `permits` plans run at once, whatever the number waiting; a panicking plan is
    /// an error, not a crash, and frees its slot.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bounded_and_panic_safe() {
        let p = Planner::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (p, running, most) = (p.clone(), running.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                p.run(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // Long enough for the others to pile up behind the slots.
                    std::thread::sleep(Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                })
                .await
            }));
        }
        for t in tasks {
            t.await.expect("joined").expect("planned");
        }
        assert!(most.load(Ordering::SeqCst) <= 2, "{most:?}");
        let e = p.run(|| panic!("a bug in planning")).await;
        assert!(matches!(e, Err(Error::Planning(_))), "{e:?}");
        let again: Result<u8, Error> = p.run(|| 7).await;
        assert_eq!(again.expect("the slot came back"), 7);
    }
}
