//! How a test waits: retry a check until it yields `Some` or the deadline passes,
//! then fail naming what was awaited. [`poll`] for threads, [`poll_async`] inside a tokio
//! runtime (where a blocking sleep would stall the server under test); [`try_poll`] when the
//! caller reports a timeout itself.

use std::future::Future;
use std::time::{Duration, Instant};

/// Generous upper bound for anything that should happen "soon"; tests poll and finish as
/// soon as the condition holds, so this only matters when something is broken.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Pause between two checks of [`poll`].
pub const EVERY: Duration = Duration::from_millis(100);

/// Pause between two checks of [`poll_async`] (cheap in-process checks).
pub const EVERY_ASYNC: Duration = Duration::from_millis(20);

/// Check `f` every `every` until it yields `Some`; `None` once `within` has passed.
pub fn try_poll<T>(
    within: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// Check `f` every `every` until it yields `Some`, failing the test after `within`.
pub fn poll_every<T>(
    within: Duration,
    every: Duration,
    what: &str,
    f: impl FnMut() -> Option<T>,
) -> T {
    match try_poll(within, every, f) {
        Some(v) => v,
        None => panic!("timed out after {within:?} waiting for {what}"),
    }
}

/// Check `f` until it yields `Some`, failing the test after `within`.
pub fn poll<T>(within: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    poll_every(within, EVERY, what, f)
}

/// [`poll`] for async checks, without blocking the runtime.
pub async fn poll_async<T, F, Fut>(within: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(EVERY_ASYNC).await;
    }
}
