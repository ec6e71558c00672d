//! The kube edge of the replicator: three Secret watches, the shared namespace index, and
//! the leader-gated writes of each [`Plan`].
//!
//! Watches (no polling; only the Secrets the rules need):
//! - the values Secret, by `metadata.name` field selector in its namespace;
//! - the current source name, by `metadata.name` field selector in every namespace: the
//!   source itself (its rotation), the replicas of that name with their data (to compare),
//!   and same-named Secrets that are not ours (to leave alone, and to notice when they go);
//!   restarted when the values name another Secret;
//! - the replicas, by the copy label, metadata only: replicas of an old name to prune.
//!
//! Namespaces come from the process's one namespace watch ([`LiveNamespaces`], subscribed).
//!
//! A pass runs shortly after anything changed, once every watch has listed: read the
//! setting, plan, publish the gauges; then, only on the Lease holder, execute. Writes are
//! server-side apply with the project's field manager: a create without `force` (it fails
//! rather than take over a same-named Secret that appeared since the watch saw none), an
//! update with `force` and the resourceVersion observed (refused if the object changed);
//! deletes carry the uid and resourceVersion observed as preconditions. A failed pass is
//! retried with backoff; a pass whose plan is empty writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::{self, BoxStream};
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::api::{
    Api, DeleteParams, ObjectMeta, PartialObjectMeta, Patch, PatchParams, Preconditions,
};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};

use super::plan::{
    self, Action, COPY_LABEL_VALUE, Hold, Observed, Plan, Replica, SecretView, Setting,
    ValuesLocation,
};
use crate::cluster::LiveNamespaces;
use crate::cluster::lease::Leader;
use crate::metrics::Metrics;
use crate::platform::{FIELD_MANAGER, WILDCARD_COPY_LABEL, WILDCARD_SOURCE_ANNOTATION};

/// Changes arriving within this window are planned together (a relist, a rotation that
/// touches many replicas).
const DEBOUNCE: Duration = Duration::from_millis(150);
/// Writes sent side by side.
const PARALLEL_WRITES: usize = 8;
/// Longest wait before a failed pass is retried.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("{verb} Secret {namespace}/{name}: {source}")]
    Api {
        verb: &'static str,
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

/// The objects of one watch by (namespace, name); a relist replaces them at once when it
/// completes, so a pass never sees half a list.
struct Cache<K> {
    items: BTreeMap<(String, String), K>,
    relist: Option<BTreeMap<(String, String), K>>,
    synced: bool,
}

impl<K> Default for Cache<K> {
    fn default() -> Self {
        Cache {
            items: BTreeMap::new(),
            relist: None,
            synced: false,
        }
    }
}

impl<K: Resource> Cache<K> {
    fn key(o: &K) -> (String, String) {
        let m = o.meta();
        (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        )
    }

    fn apply(&mut self, event: Event<K>) {
        match event {
            Event::Apply(o) => {
                self.items.insert(Self::key(&o), o);
            }
            Event::Delete(o) => {
                self.items.remove(&Self::key(&o));
            }
            Event::Init => self.relist = Some(BTreeMap::new()),
            Event::InitApply(o) => {
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(Self::key(&o), o);
            }
            Event::InitDone => {
                if let Some(items) = self.relist.take() {
                    self.items = items;
                }
                self.synced = true;
            }
        }
    }
}

fn view<'a>(
    m: &'a ObjectMeta,
    type_: Option<&'a str>,
    data: Option<&'a BTreeMap<String, k8s_openapi::ByteString>>,
) -> SecretView<'a> {
    SecretView {
        namespace: m.namespace.as_deref().unwrap_or_default(),
        name: m.name.as_deref().unwrap_or_default(),
        uid: m.uid.as_deref().unwrap_or_default(),
        resource_version: m.resource_version.as_deref().unwrap_or_default(),
        type_,
        labels: m.labels.as_ref(),
        annotations: m.annotations.as_ref(),
        data,
    }
}

/// Drop what no pass reads before it is kept (`kubectl apply` keeps a whole copy of the
/// object, data included, in an annotation).
fn strip(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.retain(|k, _| k == WILDCARD_SOURCE_ANNOTATION);
    }
}

fn secret_watch(
    api: Api<Secret>,
    cfg: watcher::Config,
    what: &'static str,
) -> BoxStream<'static, Event<Secret>> {
    watcher::watcher(api, cfg)
        .default_backoff()
        .modify(|s: &mut Secret| strip(&mut s.metadata))
        .filter_map(move |e| async move { log_err(e, what) })
        .boxed()
}

fn log_err<T>(e: Result<T, watcher::Error>, what: &'static str) -> Option<T> {
    match e {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(watch = what, error = %e, "replicator watch error; retrying with backoff");
            None
        }
    }
}

/// Run the replicator until the process ends (or the namespace index is gone).
pub async fn run(
    client: Client,
    namespaces: Arc<LiveNamespaces>,
    metrics: Metrics,
    leader: Leader,
    instance: String,
    values: ValuesLocation,
) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "tenant-gateway".into(),
            instance: Some(instance),
        },
    );
    // Subscribed before anything is read, so no namespace change falls in between.
    let mut ns_rx = namespaces.subscribe();
    let mut leader_rx = leader.watch();
    let mut claim_open = true;
    let key = values.key.clone();
    let mut values_stream = watcher::watcher(
        Api::<Secret>::namespaced(client.clone(), &values.namespace),
        watcher::Config::default().fields(&format!("metadata.name={}", values.name)),
    )
    .default_backoff()
    .modify(move |s: &mut Secret| {
        strip(&mut s.metadata);
        // Only the one key is read of the platform values.
        if let Some(d) = s.data.as_mut() {
            d.retain(|k, _| *k == key);
        }
        s.string_data = None;
    })
    .filter_map(|e| async move { log_err(e, "values Secret") })
    .boxed();
    let replica_api: Api<PartialObjectMeta<Secret>> = Api::all(client.clone());
    let mut replica_stream = watcher::watcher(
        replica_api,
        watcher::Config::default().labels(&format!("{WILDCARD_COPY_LABEL}={COPY_LABEL_VALUE}")),
    )
    .default_backoff()
    .modify(|s: &mut PartialObjectMeta<Secret>| strip(&mut s.metadata))
    .filter_map(|e| async move { log_err(e, "replicas") })
    .boxed();
    let mut named_stream: BoxStream<'static, Event<Secret>> = stream::pending().boxed();

    let mut state = State {
        client,
        metrics,
        leader,
        recorder,
        values,
        values_cache: Cache::default(),
        named: Cache::default(),
        named_for: None,
        replicas: Cache::default(),
        reported: BTreeSet::new(),
        last_hold: None,
        failures: 0,
    };
    let mut due: Option<tokio::time::Instant> = None;
    // The next pass: soon after a change, even when a retry was planned for later.
    let soon = |due: Option<tokio::time::Instant>| {
        let at = tokio::time::Instant::now() + DEBOUNCE;
        Some(due.map_or(at, |d| d.min(at)))
    };
    loop {
        tokio::select! {
            Some(e) = values_stream.next() => {
                state.values_cache.apply(e);
                due = soon(due);
            }
            Some(e) = named_stream.next() => {
                state.named.apply(e);
                due = soon(due);
            }
            Some(e) = replica_stream.next() => {
                state.replicas.apply(e);
                due = soon(due);
            }
            r = ns_rx.recv() => match r {
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    due = soon(due);
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    tracing::error!("the namespace index closed; the replicator stops");
                    return;
                }
            },
            r = leader_rx.changed(), if claim_open => {
                // A closed channel keeps its last claim (`Leader::always`, or an election
                // that ended, which ends the process): nothing more to wait for.
                claim_open = r.is_ok();
                // Gaining the Lease: the new holder completes what the plan says.
                due = soon(due);
            }
            _ = sleep_until(due), if due.is_some() => {
                due = None;
                if let Some(restart) = state.restart_named() {
                    named_stream = restart;
                    continue;
                }
                match state.pass(&namespaces).await {
                    Outcome::Done | Outcome::NotReady => {}
                    Outcome::Retry(after) => {
                        due = Some(tokio::time::Instant::now() + after);
                    }
                }
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

enum Outcome {
    Done,
    /// A watch has not listed yet (its first list triggers another pass).
    NotReady,
    Retry(Duration),
}

struct State {
    client: Client,
    metrics: Metrics,
    leader: Leader,
    recorder: Recorder,
    values: ValuesLocation,
    values_cache: Cache<Secret>,
    /// Secrets named like the current source, every namespace.
    named: Cache<Secret>,
    /// The name `named` watches.
    named_for: Option<String>,
    replicas: Cache<PartialObjectMeta<Secret>>,
    /// uids of foreign Secrets already reported by an event.
    reported: BTreeSet<String>,
    last_hold: Option<Hold>,
    failures: u32,
}

impl State {
    fn setting(&self) -> Option<Setting> {
        if !self.values_cache.synced {
            return None;
        }
        let key = (self.values.namespace.clone(), self.values.name.clone());
        let found = self.values_cache.items.get(&key).map(|s| {
            s.data
                .as_ref()
                .and_then(|d| d.get(&self.values.key))
                .map(|b| b.0.as_slice())
        });
        Some(plan::read_setting(&self.values, found))
    }

    /// A new watch when the values name another source than the one watched.
    fn restart_named(&mut self) -> Option<BoxStream<'static, Event<Secret>>> {
        let Some(Setting::Replicate { name, .. }) = self.setting() else {
            return None;
        };
        if self.named_for.as_deref() == Some(name.as_str()) {
            return None;
        }
        tracing::info!(name = %name, "watching the wildcard Secret name in every namespace");
        self.named = Cache::default();
        self.named_for = Some(name.clone());
        Some(secret_watch(
            Api::all(self.client.clone()),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
            "wildcard Secret",
        ))
    }

    async fn pass(&mut self, namespaces: &LiveNamespaces) -> Outcome {
        let Some(setting) = self.setting() else {
            return Outcome::NotReady;
        };
        let named_ready = match &setting {
            Setting::Replicate { name, .. } => {
                self.named.synced && self.named_for.as_deref() == Some(name.as_str())
            }
            _ => true,
        };
        if !named_ready || !self.replicas.synced || !namespaces.synced() {
            return Outcome::NotReady;
        }
        let all = namespaces.all();
        let plan = {
            // While the values name no source, the named cache holds the previous name's
            // Secrets: it only counts when it is the current name's.
            let named: Vec<SecretView> = match &setting {
                Setting::Replicate { .. } => self
                    .named
                    .items
                    .values()
                    .map(|s| view(&s.metadata, s.type_.as_deref(), s.data.as_ref()))
                    .collect(),
                _ => Vec::new(),
            };
            let replicas: Vec<SecretView> = self
                .replicas
                .items
                .values()
                .map(|s| view(&s.metadata, None, None))
                .collect();
            plan::plan(
                &setting,
                &all,
                Observed {
                    named: &named,
                    replicas: &replicas,
                },
            )
        };
        self.publish(&plan);
        tracing::debug!(desired = ?plan.desired, present = ?plan.present,
            actions = plan.actions.len(), hold = ?plan.hold.as_ref().map(Hold::reason),
            leader = self.leader.is_leader(), "wildcard Secret replication pass");
        if !self.leader.is_leader() {
            return Outcome::Done;
        }
        match self.execute(&plan).await {
            Ok(()) => {
                self.failures = 0;
                if plan.hold.is_none() {
                    self.metrics
                        .wildcard_last_sync
                        .set(k8s_openapi::jiff::Timestamp::now().as_second());
                }
                Outcome::Done
            }
            Err(e) => {
                self.failures = self.failures.saturating_add(1);
                let after = Duration::from_millis(500)
                    .saturating_mul(2u32.saturating_pow(self.failures.min(8)))
                    .min(MAX_BACKOFF);
                tracing::warn!(error = %e, retry_in_ms = after.as_millis() as u64,
                    "wildcard Secret replication failed; retrying");
                Outcome::Retry(after)
            }
        }
    }

    /// Gauges and the log line for a hold (once per distinct reason).
    fn publish(&mut self, plan: &Plan) {
        if let Some(d) = plan.desired {
            self.metrics.wildcard_replicas_desired.set(d as i64);
        }
        if let Some(p) = plan.present {
            self.metrics.wildcard_replicas_present.set(p as i64);
        }
        let foreign = plan
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Foreign { .. }))
            .count();
        self.metrics.wildcard_foreign.set(foreign as i64);
        let held = plan.hold.as_ref().map(Hold::reason);
        for reason in Hold::REASONS {
            self.metrics
                .wildcard_hold
                .with_label_values(&[reason])
                .set(i64::from(held == Some(reason)));
        }
        if plan.hold != self.last_hold {
            match &plan.hold {
                // A platform without a wildcard Secret never sets the name: not a warning.
                Some(h @ Hold::NotSet(_)) => {
                    tracing::info!(reason = h.reason(), "{h}; no wildcard Secret is replicated")
                }
                Some(h) => {
                    tracing::warn!(reason = h.reason(), "{h}; keeping every replica as it is")
                }
                None => tracing::info!(
                    desired = plan.desired.unwrap_or(0),
                    "wildcard Secret replication resumed"
                ),
            }
            self.last_hold = plan.hold.clone();
        }
    }

    async fn execute(&mut self, plan: &Plan) -> Result<(), WriteError> {
        let foreign_now: BTreeSet<&str> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Foreign { uid, .. } => Some(uid.as_str()),
                _ => None,
            })
            .collect();
        self.reported.retain(|u| foreign_now.contains(u.as_str()));
        for a in &plan.actions {
            if let Action::Foreign {
                namespace,
                name,
                uid,
            } = a
                && !self.reported.contains(uid)
                && self.leader.is_leader()
            {
                self.report_foreign(namespace, name, uid, plan.replica.as_ref())
                    .await;
                self.reported.insert(uid.clone());
            }
        }
        let writes: Vec<&Action> = plan.actions.iter().filter(|a| a.writes()).collect();
        if writes.is_empty() {
            return Ok(());
        }
        let replica = plan.replica.as_ref();
        let this = &*self;
        let mut first_error = None;
        for batch in writes.chunks(PARALLEL_WRITES) {
            let sent = futures::future::join_all(batch.iter().map(|a| this.one(a, replica)));
            for r in sent.await {
                if let Err(e) = r {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn one(&self, a: &Action, replica: Option<&Replica>) -> Result<(), WriteError> {
        // Losing the Lease stops the writes not yet sent.
        if !self.leader.is_leader() {
            return Ok(());
        }
        // A plan creates and updates only while it replicates, and then it carries the
        // replica; without one those actions are skipped, never written empty.
        match (a, replica) {
            (Action::Create { namespace }, Some(r)) => self.apply(namespace, r, None).await,
            (
                Action::Update {
                    namespace,
                    resource_version,
                },
                Some(r),
            ) => self.apply(namespace, r, Some(resource_version)).await,
            (
                Action::Recreate {
                    namespace,
                    uid,
                    resource_version,
                },
                Some(r),
            ) => {
                self.delete(namespace, &r.name, uid, resource_version)
                    .await?;
                self.apply(namespace, r, None).await
            }
            (Action::Create { .. } | Action::Update { .. } | Action::Recreate { .. }, None) => {
                Ok(())
            }
            (
                Action::Delete {
                    namespace,
                    name,
                    uid,
                    resource_version,
                    why,
                },
                _,
            ) => {
                tracing::info!(namespace = %namespace, name = %name, why = ?why, "pruning a wildcard Secret replica");
                self.delete(namespace, name, uid, resource_version).await
            }
            (Action::Foreign { .. }, _) => Ok(()),
        }
    }

    async fn apply(
        &self,
        namespace: &str,
        r: &Replica,
        resource_version: Option<&str>,
    ) -> Result<(), WriteError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = replica_object(namespace, r, resource_version);
        let mut params = PatchParams::apply(FIELD_MANAGER);
        let verb = if resource_version.is_some() {
            params = params.force();
            "update"
        } else {
            "create"
        };
        api.patch(&r.name, &params, &Patch::Apply(&secret))
            .await
            .map_err(|source| WriteError::Api {
                verb,
                namespace: namespace.to_string(),
                name: r.name.clone(),
                source,
            })?;
        self.metrics
            .wildcard_writes
            .with_label_values(&[verb])
            .inc();
        tracing::info!(namespace = %namespace, name = %r.name, verb, "wildcard Secret replica written");
        Ok(())
    }

    async fn delete(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        resource_version: &str,
    ) -> Result<(), WriteError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: Some(resource_version.to_string()),
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => {}
            // Gone already: what the plan wanted.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(source) => {
                return Err(WriteError::Api {
                    verb: "delete",
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    source,
                });
            }
        }
        self.metrics
            .wildcard_writes
            .with_label_values(&["delete"])
            .inc();
        Ok(())
    }

    async fn report_foreign(&self, namespace: &str, name: &str, uid: &str, r: Option<&Replica>) {
        let source = r
            .map(|r| r.source.as_str())
            .unwrap_or("the wildcard Secret");
        tracing::warn!(namespace = %namespace, name = %name,
            "a Secret of the wildcard name exists without the {WILDCARD_COPY_LABEL} label; not replicated there");
        let ev = KubeEvent {
            type_: EventType::Warning,
            reason: "WildcardSecretNotReplicated".into(),
            note: Some(format!(
                "Secret {namespace}/{name} exists without label {WILDCARD_COPY_LABEL}={COPY_LABEL_VALUE}: it is left as it is and {source} is not copied here; delete or rename it to get the replica"
            )),
            action: "Replicate".into(),
            secondary: None,
        };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
            namespace: Some(namespace.to_string()),
            name: Some(name.to_string()),
            uid: Some(uid.to_string()),
            ..ObjectReference::default()
        };
        if let Err(e) = self.recorder.publish(&ev, &reference).await {
            tracing::warn!(error = %e, "cannot record the event");
        }
    }
}

/// The replica Secret as applied: only the fields we own.
fn replica_object(namespace: &str, r: &Replica, resource_version: Option<&str>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(r.name.clone()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                WILDCARD_COPY_LABEL.to_string(),
                COPY_LABEL_VALUE.to_string(),
            )])),
            annotations: Some(BTreeMap::from([(
                WILDCARD_SOURCE_ANNOTATION.to_string(),
                r.source.clone(),
            )])),
            resource_version: resource_version.map(str::to_string),
            ..ObjectMeta::default()
        },
        type_: Some(r.type_.clone()),
        data: Some(r.data.clone()),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(ns: &str, name: &str, rv: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        }
    }

    fn keys(c: &Cache<Secret>) -> Vec<(String, String, String)> {
        c.items
            .iter()
            .map(|((n, m), s)| {
                (
                    n.clone(),
                    m.clone(),
                    s.metadata.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn the_cache_swaps_a_relist_in_only_when_it_completes() {
        let mut c = Cache::<Secret>::default();
        c.apply(Event::Init);
        c.apply(Event::InitApply(secret("a", "w", "1")));
        assert!(
            !c.synced && c.items.is_empty(),
            "half a list is never visible"
        );
        c.apply(Event::InitDone);
        assert!(c.synced);
        c.apply(Event::Apply(secret("b", "w", "2")));
        c.apply(Event::Apply(secret("a", "w", "3")));
        assert_eq!(
            keys(&c),
            vec![
                ("a".into(), "w".into(), "3".into()),
                ("b".into(), "w".into(), "2".into())
            ]
        );
        // A relist that misses "b": the old view stays until it is done, then "b" is gone.
        c.apply(Event::Init);
        c.apply(Event::InitApply(secret("a", "w", "4")));
        assert_eq!(keys(&c).len(), 2);
        c.apply(Event::InitDone);
        assert_eq!(keys(&c), vec![("a".into(), "w".into(), "4".into())]);
        c.apply(Event::Delete(secret("a", "w", "4")));
        assert!(c.items.is_empty() && c.synced);
    }

    #[test]
    fn the_applied_replica_holds_only_our_fields() {
        let r = Replica {
            name: "wild".into(),
            type_: plan::TLS_TYPE.into(),
            data: BTreeMap::from([(
                "tls.crt".to_string(),
                k8s_openapi::ByteString(b"c".to_vec()),
            )]),
            source: "tenant-root/wild".into(),
        };
        let v = serde_json::to_value(replica_object("tenant-a", &r, Some("42"))).expect("json");
        assert_eq!(
            v,
            serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "wild", "namespace": "tenant-a", "resourceVersion": "42",
                    "labels": {"gateway.cozystack.io/wildcard-copy": "true"},
                    "annotations": {"gateway.cozystack.io/wildcard-source": "tenant-root/wild"}},
                "type": "kubernetes.io/tls",
                "data": {"tls.crt": "Yw=="}
            })
        );
        let created = serde_json::to_value(replica_object("tenant-a", &r, None)).expect("json");
        assert!(created["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn strip_keeps_only_the_source_annotation() {
        let mut m = ObjectMeta {
            annotations: Some(BTreeMap::from([
                (
                    "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                    "{\"data\":{}}".to_string(),
                ),
                (WILDCARD_SOURCE_ANNOTATION.to_string(), "a/b".to_string()),
            ])),
            managed_fields: Some(vec![Default::default()]),
            ..ObjectMeta::default()
        };
        strip(&mut m);
        assert_eq!(m.managed_fields, None);
        assert_eq!(
            m.annotations,
            Some(BTreeMap::from([(
                WILDCARD_SOURCE_ANNOTATION.to_string(),
                "a/b".to_string()
            )]))
        );
    }
}
