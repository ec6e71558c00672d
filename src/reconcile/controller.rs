//! The kube-runtime `Controller` on TenantGateways (SPEC §3.7): one reconcile, its failure
//! isolation and error policy. The watches that feed it are in [`watches`](super::watches).
//!
//! One reconcile: [`gather`](super::context::gather) from the caches → [`plan`](super::plan)
//! → publish the summary and metrics → if this replica holds the Lease: the finalizer helper
//! around apply (the plan's writes) or cleanup (the finalizer's writes).

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::channel::mpsc::unbounded;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ApiResource};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{self, ObjectRef};
use kube::{Client, Resource, ResourceExt};

use super::api::TenantGateway;
use super::api::TenantGatewayStatus;
use super::backoff::{self, WriteBackoff};
use super::context::{Caches, Context, NamespaceLinks, gather, now};
use super::diff::Write;
use super::error::Error;
use super::inputs::Inputs;
use super::inputs::{ModeSettings, Settings};
use super::planner::Planner;
use super::watches;
use super::{Options, Plan, apply, cleanup, plan, plan_with, status};
use crate::cluster::LiveNamespaces;
use crate::cluster::kept::ObjectCache;
use crate::cluster::lease::Leader;
use crate::cluster::routes::RouteIndex;
use crate::metrics::Metrics;
use crate::platform::{FINALIZER, GATEWAY_API_GROUP};

/// A TenantGateway is reconciled at least this often (drift repair, e.g. a missed event).
const RESYNC: Duration = Duration::from_secs(600);
/// The longest a reconcile waits for the watches to show its own writes ([`settle`]).
const SETTLE_MAX: Duration = Duration::from_secs(5);

/// How long the controller waits after a TenantGateway's last trigger before reconciling it
/// (trailing edge: each trigger within the window restarts it). A burst of route changes
/// (`kubectl apply` of many routes, ~10–20 ms apart) still folds into one reconcile, and what
/// arrives while a reconcile runs folds into the one after it whatever the window; a single
/// route change waits only this long before its listener is planned (SPEC §8: written < 1 s
/// later). A window this short also takes a faster stream of triggers to keep postponing a
/// TenantGateway's reconcile.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// TenantGateways reconciled at once. Their writes share [`WRITES_IN_FLIGHT`], so this only
/// has to be large enough to keep that window full while some reconciles plan or wait for
/// the watches to deliver their own writes.
const CONCURRENCY: u16 = 16;

/// Writes in flight to the API server across all reconciles. The API server is CPU-bound well
/// below this window on two cores (`bench/reconcile`: the cold start runs at its floor), and
/// each write in flight is an HTTP/1.1 connection of the kube client (it does not speak
/// HTTP/2), kept idle for 90 s after a burst with its TLS state and buffers: 64 of them held
/// ~3.5 MB more heap after a burst of Certificate creates than the 15 connections of the
/// watches do.
const WRITES_IN_FLIGHT: usize = 16;

/// Everything `run` needs.
pub struct Parts {
    pub client: Client,
    pub namespaces: Arc<LiveNamespaces>,
    pub metrics: Metrics,
    pub leader: Leader,
    pub opts: Options,
    /// Reporter instance (the Lease identity).
    pub instance: String,
}

/// Run the watches and the controller until the process ends: the caches, the context every
/// reconcile shares, the watches (listed once before the first reconcile), then the
/// controller on the TenantGateway watch.
pub async fn run(parts: Parts, routes: Arc<RouteIndex>) {
    let (tgw_store, tgw_writer) = reflector::store();
    let caches = caches(parts.namespaces.clone(), routes, tgw_store.clone());
    let client = parts.client.clone();
    let ctx = context(parts, caches.clone());
    let (trigger, triggers) = unbounded::<ObjectRef<TenantGateway>>();
    watches::spawn(&client, &caches, &trigger);
    watches::synced(&caches).await;
    let tgw_stream =
        watches::tenant_gateways(client, tgw_store.clone(), tgw_writer, caches, trigger);
    let gained = leadership_gains(&ctx.leader);
    let controller_cfg = kube::runtime::controller::Config::default()
        .concurrency(CONCURRENCY)
        .debounce(DEBOUNCE);
    Controller::for_stream(tgw_stream, tgw_store)
        .with_config(controller_cfg)
        .reconcile_on(triggers)
        .reconcile_all_on(gained)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            match r {
                Ok((o, _)) => tracing::debug!(tgw = %o, "reconciled"),
                Err(kube::runtime::controller::Error::ReconcilerFailed(e, o)) => {
                    tracing::warn!(tgw = %o, error = %e, "reconcile failed")
                }
                Err(e) => tracing::debug!(error = %e, "controller"),
            }
        })
        .await;
    tracing::error!("TenantGateway controller ended");
}

/// The caches the watches fill, empty; every watched kind not listed yet.
fn caches(
    namespaces: Arc<LiveNamespaces>,
    routes: Arc<RouteIndex>,
    tgws: reflector::Store<TenantGateway>,
) -> Arc<Caches> {
    let http_route = ApiResource {
        group: GATEWAY_API_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{GATEWAY_API_GROUP}/v1"),
        kind: "HTTPRoute".into(),
        plural: "httproutes".into(),
    };
    Arc::new(Caches {
        namespaces,
        links: RwLock::new(NamespaceLinks::default()),
        routes,
        gateways: ObjectCache::default(),
        issuers: ObjectCache::default(),
        certificates: ObjectCache::default(),
        redirects: ObjectCache::default(),
        tgws,
        tgw_statuses: Default::default(),
        http_route,
        tls_route: RwLock::new(None),
        synced: ["HTTPRoute", "TLSRoute", "Gateway", "Issuer", "Certificate"]
            .into_iter()
            .map(|k| (k, AtomicBool::new(false)))
            .collect(),
    })
}

/// What every reconcile shares: the parts, the caches, the event recorder (reporting as the
/// Lease identity), the write slots and the planner.
fn context(parts: Parts, caches: Arc<Caches>) -> Arc<Context> {
    let Parts {
        client,
        namespaces: _,
        metrics,
        leader,
        opts,
        instance,
    } = parts;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "tenant-gateway".into(),
            instance: Some(instance),
        },
    );
    let write_slots = tokio::sync::Semaphore::new(WRITES_IN_FLIGHT);
    Arc::new(Context {
        client,
        opts,
        caches,
        leader,
        metrics,
        recorder,
        state: Mutex::new(Default::default()),
        write_slots,
        planner: Planner::for_this_machine(),
    })
}

/// One item each time this replica gains the Lease (reconcile everything then); the claim
/// held when it starts does not count. Ends with the election.
fn leadership_gains(leader: &Leader) -> impl futures::Stream<Item = ()> + Send + 'static {
    let mut leader_rx = leader.watch();
    leader_rx.borrow_and_update();
    futures::stream::unfold(leader_rx, |mut rx| async move {
        loop {
            if rx.changed().await.is_err() {
                return None;
            }
            if *rx.borrow_and_update() {
                return Some(((), rx));
            }
        }
    })
}

/// The `tenantgateways` metric's mode of a checked spec.
fn mode_label(settings: &Result<Settings, Vec<String>>) -> &'static str {
    match settings.as_ref().map(|s| &s.mode) {
        Ok(ModeSettings::Http01) => "http01",
        Ok(ModeSettings::Dns01(_)) => "dns01",
        Ok(ModeSettings::ExistingSecret { .. }) => "existingSecret",
        Err(_) => "invalid",
    }
}

async fn reconcile(tgw: Arc<TenantGateway>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let tgw = ctx.caches.tgw_statuses.restore(tgw);
    let key = ObjectRef::from(tgw.as_ref());
    let result = reconcile_inner(&tgw, &ctx, &key).await;
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    let label = match &result {
        Ok(_) if !ctx.leader.is_leader() => "standby",
        Ok(_) => "success",
        Err(_) => "error",
    };
    ctx.metrics
        .reconcile_total
        .with_label_values(&[label])
        .inc();
    if let Err(e) = &result {
        // The status shows the last error (best effort: the error itself may be the API).
        if ctx.leader.is_leader() && tgw.metadata.deletion_timestamp.is_none() {
            let s = status::blocked_status(
                "ReconcileError",
                e.to_string(),
                tgw.metadata.generation,
                &now(),
                tgw.status.as_ref(),
            );
            if tgw.status.as_ref() != Some(&s) {
                let ns = tgw.namespace().unwrap_or_default();
                if apply::status(&ctx, &ns, &tgw.name_any(), &s).await.is_ok() {
                    ctx.metrics
                        .reconcile_writes
                        .with_label_values(&["TenantGateway", "status"])
                        .inc();
                }
            }
        }
    } else {
        ctx.with_state(&key, |s| s.failures = 0);
    }
    result
}

async fn reconcile_inner(
    tgw: &Arc<TenantGateway>,
    ctx: &Arc<Context>,
    key: &ObjectRef<TenantGateway>,
) -> Result<Action, Error> {
    let t = tgw.clone();
    // The spec is checked once: for the plan, the mode metric and settle's re-plans.
    let (inputs, settings, p) = off_runtime(ctx, move |c| {
        let inputs = gather(&t, &c.caches, &c.opts.scope, now());
        let settings = inputs.tgw.settings(&c.opts.scope);
        let p = plan_with(&inputs, &settings, &c.opts);
        (inputs, settings, p)
    })
    .await?;
    let mode = mode_label(&settings);
    let new_notices = ctx.with_state(key, |s| {
        s.mode = mode;
        s.conflicts = p.summary.conflicts;
        s.over_cap = p.summary.over_cap;
        // Recorded once published (the first reconcile may only add the finalizer).
        if s.notices == p.notices {
            Vec::new()
        } else {
            p.notices.clone()
        }
    });
    ctx.publish_gauges();
    if !ctx.leader.is_leader() {
        // Computed, not written: gaining the Lease reconciles everything.
        return Ok(Action::requeue(RESYNC));
    }
    let api: Api<TenantGateway> = Api::namespaced(ctx.client.clone(), &inputs.tgw.namespace);
    let has_finalizer = tgw.finalizers().iter().any(|f| f == FINALIZER);
    if !has_finalizer && tgw.metadata.deletion_timestamp.is_none() {
        ctx.metrics
            .reconcile_writes
            .with_label_values(&["TenantGateway", "finalizer"])
            .inc();
    }
    let ctx2 = ctx.clone();
    let inputs = Arc::new(inputs);
    let settings = Arc::new(settings);
    let action = finalizer(&api, FINALIZER, tgw.clone(), |ev| async move {
        match ev {
            Finalizer::Apply(t) => {
                for n in &new_notices {
                    publish(&ctx2, &t, n.reason, &n.message).await;
                }
                if !new_notices.is_empty() {
                    ctx2.with_state(&ObjectRef::from(t.as_ref()), |s| s.notices = new_notices);
                }
                apply_isolated(&ctx2, &t, &inputs, &settings, &p).await
            }
            Finalizer::Cleanup(t) => {
                let i = inputs.clone();
                let writes = off_runtime(&ctx2, move |c| cleanup(&i, &c.opts.scope)).await?;
                let issued = apply::execute(&ctx2, &inputs, &writes).await?;
                tracing::info!(tgw = %ObjectRef::from(t.as_ref()), writes = issued,
                    "cleaned up namespace labels and route status entries");
                ctx2.forget(&ObjectRef::from(t.as_ref()));
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))?;
    Ok(action)
}

/// Wait (at most [`SETTLE_MAX`]) until the caches show this reconcile's writes.
///
/// Every write comes back as a watch event that triggers this TenantGateway again. A
/// reconcile that runs before the last of them arrived plans from a world missing some of
/// its own writes: it sends them again (route status, a second TenantGateway status) and
/// wakes the watches once more. Waiting here, while the write slots serve other
/// reconciles, makes the next reconcile of this TenantGateway a no-op.
///
/// "Shown" is judged by the plan itself: re-planned from the caches at the same `now`, it
/// no longer repeats any write just issued. A write that differs from the one issued (the
/// world moved on, e.g. the Gateway became Programmed) is not waited for: it is the next
/// reconcile's.
async fn settle(
    ctx: &Arc<Context>,
    key: &ObjectRef<TenantGateway>,
    planned: &Arc<Inputs>,
    settings: &Arc<Result<Settings, Vec<String>>>,
    issued: &[Write],
) {
    let deadline = Instant::now() + SETTLE_MAX;
    let mut pause = Duration::from_millis(20);
    loop {
        tokio::time::sleep(pause).await;
        if !ctx.leader.is_leader() {
            return;
        }
        let Some(tgw) = ctx.caches.tgws.get(key) else {
            return;
        };
        let tgw = ctx.caches.tgw_statuses.restore(tgw);
        let (planned, settings) = (planned.clone(), settings.clone());
        let replanned = off_runtime(ctx, move |c| {
            let again = gather(&tgw, &c.caches, &c.opts.scope, planned.now.clone());
            // Checked again only when the spec was edited since the plan.
            if again.tgw.spec == planned.tgw.spec {
                plan_with(&again, &settings, &c.opts).writes
            } else {
                plan(&again, &c.opts).writes
            }
        })
        .await;
        let Ok(again) = replanned else {
            return;
        };
        let pending = again.iter().filter(|w| issued.contains(w)).count();
        if pending == 0 {
            return;
        }
        if Instant::now() >= deadline {
            tracing::debug!(tgw = %key, pending, "the watches did not show every write in time");
            return;
        }
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Planning (CPU work: gather, plan, cleanup) through the context's [`Planner`]: off the
/// runtime that answers admission, bounded (SPEC §3.7).
async fn off_runtime<T, F>(ctx: &Arc<Context>, f: F) -> Result<T, Error>
where
    T: Send + 'static,
    F: FnOnce(&Context) -> T + Send + 'static,
{
    let c = ctx.clone();
    ctx.planner.run(move || f(&c)).await
}

/// Which of the plan's writes go out now: every object write whose object is not waiting
/// out its backoff. The TenantGateway status is left out: it is decided after the others,
/// from what they came to.
fn due_writes(writes: &[Write], namespace: &str, b: &WriteBackoff, at: Instant) -> Vec<Write> {
    writes
        .iter()
        .filter(|w| !matches!(w, Write::Status(_)))
        .filter(|w| b.due(&apply::target(namespace, w), at))
        .cloned()
        .collect()
}

/// The status to write after the object writes, if any: the plan's own status write when
/// nothing failed; otherwise the failure status, only when it differs from the observed one.
fn status_to_write(
    writes: &[Write],
    b: &WriteBackoff,
    planned: &TenantGatewayStatus,
    observed: Option<&TenantGatewayStatus>,
    generation: Option<i64>,
    now: &Time,
) -> Option<TenantGatewayStatus> {
    match b.message() {
        None => writes.iter().find_map(|w| match w {
            Write::Status(s) => Some(s.clone()),
            _ => None,
        }),
        Some(m) => {
            let s = backoff::failed_status(planned, observed, m, generation, now);
            (observed != Some(&s)).then_some(s)
        }
    }
}

/// Apply the plan with failure isolation (SPEC §3.7): every due write is sent whatever the
/// others came to; a failed object is retried on its own backoff (the TenantGateway is
/// requeued for the earliest one, not failed); the status and an event name it. Only a
/// failed status write fails the reconcile: error_policy's backoff then keeps it from
/// looping hot.
async fn apply_isolated(
    ctx: &Arc<Context>,
    tgw: &TenantGateway,
    inputs: &Arc<Inputs>,
    settings: &Arc<Result<Settings, Vec<String>>>,
    p: &Plan,
) -> Result<Action, Error> {
    let key = ObjectRef::from(tgw);
    let ns = inputs.tgw.namespace.as_str();
    let at = Instant::now();
    let mut b = ctx.with_state(&key, |s| s.writes.clone());
    let planned: BTreeSet<String> = p
        .writes
        .iter()
        .filter(|w| !matches!(w, Write::Status(_)))
        .map(|w| apply::target(ns, w))
        .collect();
    b.keep_only(&planned);
    let send = due_writes(&p.writes, ns, &b, at);
    let results = apply::execute_each(ctx, inputs, &send).await;
    let mut sent = Vec::new();
    let mut first_failures = Vec::new();
    for (w, r) in send.iter().zip(results) {
        let target = apply::target(ns, w);
        match r {
            Ok(issued) => {
                b.succeeded(&target);
                if issued {
                    sent.push(w.clone());
                }
            }
            Err(e) => {
                let error = e.to_string();
                tracing::warn!(tgw = %key, object = %target, error = %error,
                    "write failed; the other writes go on, this one is retried with backoff");
                if b.failed(&target, &error, at) {
                    first_failures.push(format!("{target}: {error}"));
                }
            }
        }
    }
    ctx.with_state(&key, |s| s.writes = b.clone());
    for m in &first_failures {
        publish(ctx, tgw, backoff::WRITE_FAILED, m).await;
    }
    let status = status_to_write(
        &p.writes,
        &b,
        &p.status,
        tgw.status.as_ref(),
        tgw.metadata.generation,
        &inputs.now,
    );
    if let Some(s) = status
        && ctx.leader.is_leader()
    {
        apply::status(ctx, ns, &inputs.tgw.name, &s).await?;
        ctx.metrics
            .reconcile_writes
            .with_label_values(&["TenantGateway", "status"])
            .inc();
        sent.push(Write::Status(s));
    }
    if !sent.is_empty() {
        tracing::info!(tgw = %key, writes = sent.len(), "applied");
        settle(ctx, &key, inputs, settings, &sent).await;
    }
    let next = b
        .next_retry()
        .map(|t| {
            t.saturating_duration_since(Instant::now())
                .max(backoff::BASE_DELAY)
        })
        .map_or(RESYNC, |d| d.min(RESYNC));
    Ok(Action::requeue(next))
}

async fn publish(ctx: &Context, tgw: &TenantGateway, reason: &str, message: &str) {
    let ev = KubeEvent {
        type_: EventType::Warning,
        reason: reason.to_string(),
        note: Some(message.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &tgw.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "cannot record an event");
    }
}

fn error_policy(tgw: Arc<TenantGateway>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = ObjectRef::from(tgw.as_ref());
    let failures = ctx.with_state(&key, |s| {
        s.failures = s.failures.saturating_add(1);
        s.failures
    });
    let secs = 2u64.saturating_pow(failures.min(8)).min(300);
    tracing::warn!(tgw = %key, error = %err, retry_in_secs = secs, kind = err.metric_label(),
        "reconcile failed");
    Action::requeue(Duration::from_secs(secs))
}
