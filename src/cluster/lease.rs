//! Leader election on a `coordination.k8s.io/v1` Lease (SPEC §3.7): every replica computes,
//! only the holder writes. The holder renews every `renew_every`; another replica takes the
//! Lease over once `renewTime + leaseDurationSeconds` has passed. A replica that cannot renew
//! stops counting itself leader before its Lease can expire, so two writers never overlap by
//! more than the clock skew between nodes.
//!
//! Small enough to write on the Lease API directly: no crate for kube 4.2 offered the
//! "lose it at once" signal as a watch channel.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use crate::metrics::Metrics;

/// Where the pod's own namespace is mounted.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The Lease namespace when none is given: the pod's own, else `default`.
pub fn default_namespace(file: &Path) -> String {
    std::fs::read_to_string(file)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// This replica's identity in the Lease: the pod name when set (`POD_NAME` or `HOSTNAME`),
/// plus a random suffix so two processes on one host never share it.
pub fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "tenant-gateway".to_string());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{base}-{:08x}", nanos ^ std::process::id())
}

#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
    pub renew_every: Duration,
}

impl LeaseConfig {
    pub fn new(namespace: String, name: String) -> LeaseConfig {
        LeaseConfig {
            namespace,
            name,
            identity: identity(),
            duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(2),
        }
    }
}

/// Whether this replica may write now.
///
/// Besides the claim the election publishes, a write checks the deadline its last renewal
/// gave: a process that was frozen (SIGSTOP, a paused VM) resumes with the claim still set
/// until the election's next tick, and by then the Lease may belong to another replica.
#[derive(Debug, Clone)]
pub struct Leader {
    rx: watch::Receiver<bool>,
    /// Writes are safe until then; `None` with `expires` set: not renewed.
    until: Arc<RwLock<Option<Instant>>>,
    expires: bool,
}

/// The election's side of a [`Leader`]: the claim and the deadline of the last renewal.
#[derive(Debug)]
pub struct LeaderSender {
    tx: watch::Sender<bool>,
    until: Arc<RwLock<Option<Instant>>>,
}

impl LeaderSender {
    /// Publish the claim; `until` is when writing stops being safe without a renewal.
    fn set(&self, held: bool, until: Option<Instant>) -> bool {
        if let Ok(mut u) = self.until.write() {
            *u = until.filter(|_| held);
        }
        self.tx.send_if_modified(|v| {
            let changed = *v != held;
            *v = held;
            changed
        })
    }

    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl Leader {
    /// A leader handle fed by `tx` (see [`run`]).
    pub fn channel() -> (LeaderSender, Leader) {
        let (tx, rx) = watch::channel(false);
        let until = Arc::new(RwLock::new(None));
        (
            LeaderSender {
                tx,
                until: until.clone(),
            },
            Leader {
                rx,
                until,
                expires: true,
            },
        )
    }

    /// Always the leader (a single replica without election, and tests).
    pub fn always() -> Leader {
        let (tx, rx) = watch::channel(true);
        // The receiver keeps the value after the sender is gone.
        drop(tx);
        Leader {
            rx,
            until: Arc::new(RwLock::new(None)),
            expires: false,
        }
    }

    pub fn is_leader(&self) -> bool {
        if !*self.rx.borrow() {
            return false;
        }
        !self.expires
            || self
                .until
                .read()
                .ok()
                .and_then(|u| *u)
                .is_some_and(|u| Instant::now() < u)
    }

    /// Changes of the claim.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }
}

fn now() -> Timestamp {
    Timestamp::now()
}

fn expired(spec: &LeaseSpec, at: Timestamp) -> bool {
    let Some(renew) = spec.renew_time.as_ref() else {
        return true;
    };
    let secs = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    renew
        .0
        .saturating_add(SignedDuration::from_secs(secs))
        .is_ok_and(|end| end < at)
        || renew.0
            > at.saturating_add(SignedDuration::from_secs(3600))
                .unwrap_or(at)
}

/// One step of the election: returns whether we hold the Lease after it.
async fn step(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<bool, kube::Error> {
    let t = now();
    let secs = i32::try_from(cfg.duration.as_secs()).unwrap_or(15);
    match api.get_opt(&cfg.name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(cfg.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(MicroTime(t)),
                    renew_time: Some(MicroTime(t)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            let holder = spec.holder_identity.clone().unwrap_or_default();
            if holder == cfg.identity {
                spec.renew_time = Some(MicroTime(t));
                spec.lease_duration_seconds = Some(secs);
            } else if holder.is_empty() || expired(spec, t) {
                spec.holder_identity = Some(cfg.identity.clone());
                spec.acquire_time = Some(MicroTime(t));
                spec.renew_time = Some(MicroTime(t));
                spec.lease_duration_seconds = Some(secs);
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            } else {
                return Ok(false);
            }
            // Conditional on the resourceVersion read: a concurrent taker wins, we retry.
            match api.replace(&cfg.name, &PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Run the election until the process ends, publishing the claim on `tx` and the
/// `tenant_gateway_leader` gauge.
pub async fn run(client: Client, cfg: LeaseConfig, tx: LeaderSender, metrics: Metrics) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    tracing::info!(namespace = %cfg.namespace, name = %cfg.name, identity = %cfg.identity,
        "leader election started");
    let mut last_renew: Option<Instant> = None;
    // Stop writing well before the Lease can expire for the others.
    let safe = cfg.duration.saturating_sub(cfg.renew_every);
    let mut ticker = tokio::time::interval(cfg.renew_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let held = match step(&api, &cfg).await {
            Ok(true) => {
                last_renew = Some(Instant::now());
                true
            }
            Ok(false) => {
                last_renew = None;
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read or renew the leader Lease");
                last_renew.is_some_and(|t| t.elapsed() < safe)
            }
        };
        // The gauge says 1 before this replica may write and 0 only once it has stopped, so
        // a write is never seen from a replica that does not show the Lease.
        if held {
            metrics.leader.set(1);
        }
        let changed = tx.set(held, last_renew.map(|t| t + safe));
        if !held {
            metrics.leader.set(0);
        }
        if changed {
            if held {
                tracing::info!(identity = %cfg.identity, "acquired the leader Lease; writing");
            } else {
                tracing::info!(identity = %cfg.identity, "not the Lease holder; computing only");
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_namespace_reads_the_file_or_falls_back() {
        let dir = tempfile::tempdir().expect("dir");
        let f = dir.path().join("namespace");
        assert_eq!(default_namespace(&f), "default");
        std::fs::write(&f, "cozy-gateway\n").expect("write");
        assert_eq!(default_namespace(&f), "cozy-gateway");
        std::fs::write(&f, "  \n").expect("write");
        assert_eq!(default_namespace(&f), "default");
    }

    #[test]
    fn expiry_uses_renew_time_and_duration() {
        let t = Timestamp::from_second(1_000_000).expect("ts");
        let spec = |renew: i64| LeaseSpec {
            renew_time: Some(MicroTime(Timestamp::from_second(renew).expect("ts"))),
            lease_duration_seconds: Some(15),
            ..Default::default()
        };
        assert!(!expired(&spec(1_000_000 - 10), t));
        assert!(expired(&spec(1_000_000 - 16), t));
        assert!(expired(&LeaseSpec::default(), t), "never renewed");
        assert!(
            expired(&spec(1_000_000 + 7200), t),
            "a renewTime far in the future is not trusted"
        );
    }

    #[test]
    fn always_leader_stays_leader() {
        assert!(Leader::always().is_leader());
        let (tx, l) = Leader::channel();
        assert!(!l.is_leader());
        assert!(tx.set(true, Some(Instant::now() + Duration::from_secs(60))));
        assert!(l.is_leader());
        assert!(l.clone().is_leader(), "clones share the deadline");
    }

    /// A frozen process resumes with the claim still set: the deadline of its last renewal
    /// stops its writes anyway, before the next election tick runs.
    #[test]
    fn a_claim_past_its_renewal_deadline_does_not_write() {
        let (tx, l) = Leader::channel();
        let renewed = Instant::now();
        assert!(tx.set(true, Some(renewed + Duration::from_millis(30))));
        assert!(l.is_leader());
        // Waiting for the deadline to pass is what is under test.
        std::thread::sleep(Duration::from_millis(40));
        assert!(!l.is_leader(), "past the deadline");
        assert!(
            *l.watch().borrow(),
            "the published claim itself did not change"
        );
        // A claim without a deadline (never renewed) never writes.
        tx.set(true, None);
        assert!(!l.is_leader());
        // Losing the claim clears the deadline.
        tx.set(false, Some(Instant::now() + Duration::from_secs(60)));
        assert!(!l.is_leader());
    }
}
