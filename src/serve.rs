//! `serve`: every part of the process as a named task (SPEC §1, §6, §9).
//!
//! The parts: the webhook server, the metrics/health server, the TLS certificate reload, the
//! namespace index, the TenantGateway reconciler (leader election and controller), the
//! self-managed certificate, the wildcard-Secret replicator, the continuous audit and the
//! PolicyReport writer. [`Tasks`] runs them; a part that ends before SIGTERM/SIGINT ends
//! the process with a message naming it (exit 1) so that it restarts, rather than serving on
//! with a part missing. On the signal, the webhook drains within the grace period, the
//! metrics/health port closes after it, and the other parts are stopped.
//!
//! [`run`] wires the parts in one sequence, the webhook one optional part of it: the flags
//! checked (`webhook_flags`, `audit_flags`) → where namespaces come from (`namespaces`: a
//! snapshot, or a cluster connection and the live index) → the cluster parts
//! (`cluster_parts`: the reconciler, the self-managed certificate, the replicator;
//! `start_audit`: the continuous audit and, with `--policy-reports`, its PolicyReport
//! writer) → the ports bound (`start_webhook`, or `health_alone` under `--no-webhook`) → the
//! metrics/health server → `finish`. Adding a part: start it in the step it belongs to and
//! hand its future to [`Tasks::spawn`].

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::task::JoinSet;

use crate::admission::Admission;
use crate::audit::live::{Auditor, RouteFeed};
use crate::cluster::lease::{self, Leader, LeaseConfig};
use crate::cluster::routes::{RouteIndex, RouteWatchTap};
use crate::cluster::{LiveNamespaces, NamespaceSource, client};
use crate::config::{PolicyArgs, ServeArgs};
use crate::metrics::Metrics;
use crate::platform::Scope;
use crate::policy::PolicyConfig;
use crate::readiness::Readiness;
use crate::reconcile::controller::{self, Parts};
use crate::selfcert::{self, SelfCertConfig};
use crate::server::{self, HealthServer, Limits, ServeOptions};

/// Why `serve` ended before it was asked to.
#[derive(Debug, thiserror::Error)]
pub enum PartEnded {
    #[error("the {part} stopped: {reason}; exiting so that the process restarts")]
    Failed { part: &'static str, reason: String },
    #[error("the {part} stopped unexpectedly; exiting so that the process restarts")]
    Returned { part: &'static str },
    #[error("the {part} panicked (see the log above); exiting so that the process restarts")]
    Panicked { part: &'static str },
}

type PartResult = anyhow::Result<()>;

/// The running parts of one `serve` process.
pub struct Tasks {
    set: JoinSet<PartResult>,
    names: HashMap<tokio::task::Id, &'static str>,
    /// Parts stopped at once on shutdown (the draining ones stop themselves).
    abort_on_stop: Vec<tokio::task::AbortHandle>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Default for Tasks {
    fn default() -> Self {
        Tasks::new()
    }
}

impl Tasks {
    pub fn new() -> Tasks {
        Tasks {
            set: JoinSet::new(),
            names: HashMap::new(),
            abort_on_stop: Vec::new(),
            stop: tokio::sync::watch::channel(false).0,
        }
    }

    /// Run `part` until shutdown, when it is aborted. It should never end before that: any
    /// end, an error or not, ends the process.
    pub fn spawn(
        &mut self,
        name: &'static str,
        part: impl Future<Output = PartResult> + Send + 'static,
    ) {
        let handle = self.start(name, part);
        self.abort_on_stop.push(handle);
    }

    /// Run `part`, which watches [`Tasks::stopping`] and finishes its own shutdown (a drain);
    /// shutdown waits for it.
    pub fn spawn_draining(
        &mut self,
        name: &'static str,
        part: impl Future<Output = PartResult> + Send + 'static,
    ) {
        self.start(name, part);
    }

    fn start(
        &mut self,
        name: &'static str,
        part: impl Future<Output = PartResult> + Send + 'static,
    ) -> tokio::task::AbortHandle {
        let handle = self.set.spawn(part);
        self.names.insert(handle.id(), name);
        handle
    }

    /// Resolves once shutdown has begun.
    pub fn stopping(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.stop.subscribe();
        async move {
            // An error means the sender is gone: shutting down as well.
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }

    /// Run until `shutdown` resolves (then stop every part: the draining ones finish, the rest
    /// are aborted) or until a part ends first, which is an error naming it.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), PartEnded> {
        tokio::select! {
            _ = shutdown => {}
            ended = self.set.join_next_with_id() => {
                let Some(ended) = ended else { return Ok(()) };
                let err = self.describe(ended);
                tracing::error!("{err}");
                return Err(err);
            }
        }
        let _ = self.stop.send(true);
        for part in &self.abort_on_stop {
            part.abort();
        }
        while let Some(ended) = self.set.join_next_with_id().await {
            match ended {
                Ok((_, Ok(()))) => {}
                Err(e) if e.is_cancelled() => {}
                other => tracing::warn!("during shutdown: {}", self.describe(other)),
            }
        }
        Ok(())
    }

    fn describe(
        &self,
        ended: Result<(tokio::task::Id, PartResult), tokio::task::JoinError>,
    ) -> PartEnded {
        let name = |id| self.names.get(&id).copied().unwrap_or("unnamed part");
        match ended {
            Ok((id, Ok(()))) => PartEnded::Returned { part: name(id) },
            Ok((id, Err(e))) => PartEnded::Failed {
                part: name(id),
                reason: format!("{e:#}"),
            },
            Err(e) if e.is_panic() => PartEnded::Panicked { part: name(e.id()) },
            Err(e) => PartEnded::Failed {
                part: name(e.id()),
                reason: e.to_string(),
            },
        }
    }
}

/// Run `serve` until SIGTERM/SIGINT (exit 0) or until a part ends (exit 1). Errors before
/// anything runs (flags, files, the cluster connection) are returned.
///
/// One wiring sequence, each step handing the next what it needs: the flags checked → where
/// namespaces come from (a snapshot, or the cluster's live index) → the cluster parts → the
/// ports bound (the webhook's, when it runs, and the metrics/health port) → every part run
/// until the signal.
pub async fn run(serve: ServeArgs, policy: PolicyArgs) -> anyhow::Result<ExitCode> {
    let cfg = policy.policy_config()?;
    let webhook = webhook_flags(&serve, &policy)?;
    audit_flags(&serve, &policy)?;
    let shared = Shared {
        metrics: Metrics::new(),
        readiness: Arc::new(match webhook {
            Some(_) => Readiness::new(),
            None => Readiness::without_webhook(),
        }),
    };
    let mut tasks = Tasks::new();
    let namespaces = namespaces(&mut tasks, &serve, &policy, &shared).await?;
    let self_cert = webhook.as_ref().and_then(|w| w.self_cert.as_ref());
    // The audit reads the reconciler's route watches when there are some: registered on its
    // route index before they start.
    let route_feed = (!serve.no_audit && !serve.no_controller).then(RouteFeed::new);
    let (routes, leader) = cluster_parts(
        &mut tasks,
        &serve,
        &policy,
        &namespaces,
        self_cert,
        &shared,
        route_feed.clone(),
    )
    .await?;
    start_audit(
        &mut tasks,
        &serve,
        &namespaces,
        &cfg,
        leader,
        &shared,
        route_feed,
    );
    let limits = Limits {
        max_inflight_bytes: serve.max_inflight_bytes,
        h2_max_concurrent_streams: serve.max_concurrent_streams,
        ..Limits::default()
    };
    let (health, close) = match webhook {
        Some(tls) => {
            let mut admission = Admission::new(
                Arc::new(cfg),
                namespaces.into_source(),
                shared.metrics.clone(),
            );
            if let Some(routes) = routes {
                admission = admission.with_routes(routes);
            }
            start_webhook(&mut tasks, &serve, tls, limits, admission, &shared).await?
        }
        None => health_alone(&tasks, &serve, &limits, &shared).await?,
    };
    let Shared { metrics, readiness } = shared;
    tasks.spawn_draining("metrics/health server", async move {
        health.serve(readiness, metrics, close).await;
        Ok(())
    });
    finish(tasks, serve.shutdown_grace).await
}

/// What every part shares.
struct Shared {
    metrics: Metrics,
    readiness: Arc<Readiness>,
}

/// The webhook's serving pair, as the flags name it.
struct WebhookTls {
    cert: PathBuf,
    key: PathBuf,
    /// `--self-cert-secret`: the pair is made and kept current by the leader.
    self_cert: Option<SelfCertConfig>,
}

/// The flags checked together: the serving pair when the webhook runs, `None` with
/// `--no-webhook` (which needs a cluster part to run).
fn webhook_flags(serve: &ServeArgs, policy: &PolicyArgs) -> anyhow::Result<Option<WebhookTls>> {
    if serve.no_webhook {
        if (serve.no_controller && serve.no_replicator) || policy.namespaces.is_some() {
            anyhow::bail!(
                "--no-webhook leaves nothing to run: the reconciler and the replicator need a cluster (drop --no-controller or --no-replicator, and --namespaces)"
            );
        }
        return Ok(None);
    }
    let self_cert = serve.self_cert_secret.clone().map(|secret| SelfCertConfig {
        namespace: serve.self_cert_namespace.clone().unwrap_or_else(|| {
            lease::default_namespace(Path::new(lease::SERVICE_ACCOUNT_NAMESPACE_FILE))
        }),
        secret,
        webhook_configuration: serve.webhook_configuration_name.clone(),
        hosts: serve.self_cert_hosts.clone(),
        validity: serve.self_cert_validity,
        dir: serve.self_cert_dir.clone(),
    });
    let (cert, key) = match (
        &self_cert,
        serve.tls_cert_file.clone(),
        serve.tls_key_file.clone(),
    ) {
        (Some(c), None, None) => {
            if c.hosts.is_empty() {
                anyhow::bail!(
                    "--self-cert-secret needs --self-cert-host (the names the API server calls the webhook by)"
                );
            }
            if serve.no_controller || policy.namespaces.is_some() {
                anyhow::bail!(
                    "--self-cert-secret needs the reconciler's leader Lease and a cluster: drop --no-controller and --namespaces"
                );
            }
            (c.cert_file(), c.key_file())
        }
        (Some(_), _, _) => anyhow::bail!(
            "--self-cert-secret manages the serving pair itself: drop --tls-cert-file and --tls-key-file"
        ),
        (None, Some(cert), Some(key)) => (cert, key),
        (None, _, _) => anyhow::bail!(
            "--tls-cert-file and --tls-key-file are required for the webhook (create a development pair with `tenant-gateway certs`)"
        ),
    };
    Ok(Some(WebhookTls {
        cert,
        key,
        self_cert,
    }))
}

/// `--policy-reports` publishes the continuous audit's results from the reconciler's Lease
/// holder: refused without either, or without a cluster.
fn audit_flags(serve: &ServeArgs, policy: &PolicyArgs) -> anyhow::Result<()> {
    if !serve.policy_reports {
        return Ok(());
    }
    if serve.no_audit {
        anyhow::bail!(
            "--policy-reports publishes the continuous audit's results: drop --no-audit (or --policy-reports)"
        );
    }
    if serve.no_controller {
        anyhow::bail!(
            "--policy-reports needs the reconciler's leader Lease (only its holder writes the reports): drop --no-controller (or --policy-reports)"
        );
    }
    if policy.namespaces.is_some() {
        anyhow::bail!(
            "--policy-reports needs a cluster to audit and write to: drop --namespaces (or --policy-reports)"
        );
    }
    Ok(())
}

/// Where the webhook reads namespaces from.
enum Namespaces {
    /// `--namespaces`: a snapshot; no cluster part runs.
    Snapshot(NamespaceSource),
    /// The cluster's live index, with the client the cluster parts share.
    Live {
        client: Client,
        index: Arc<LiveNamespaces>,
    },
}

impl Namespaces {
    fn into_source(self) -> NamespaceSource {
        match self {
            Namespaces::Snapshot(source) => source,
            Namespaces::Live { index, .. } => NamespaceSource::Live(index),
        }
    }
}

/// The `--namespaces` snapshot (counted as synced at once), else a cluster connection and
/// the live namespace index as a part.
async fn namespaces(
    tasks: &mut Tasks,
    serve: &ServeArgs,
    policy: &PolicyArgs,
    shared: &Shared,
) -> anyhow::Result<Namespaces> {
    if let Some(s) = policy.static_namespaces()? {
        shared.readiness.set_index_synced(true);
        shared.metrics.namespace_index_size.set(s.len() as i64);
        tracing::info!(
            namespaces = s.len(),
            "using the static namespace snapshot; no controller runs"
        );
        return Ok(Namespaces::Snapshot(s));
    }
    let client = client::connect(serve.kubeconfig.as_deref(), None).await?;
    let index = start_namespace_index(tasks, client.clone(), &shared.readiness, &shared.metrics);
    Ok(Namespaces::Live { client, index })
}

/// On a cluster: the reconciler (unless `--no-controller`), the self-managed certificate
/// (waited for, as the webhook starts on its pair) and the wildcard-Secret replicator (unless
/// `--no-replicator`). Returns the reconciler's route index, for the admission warnings of
/// SPEC §3.4, and its Lease.
async fn cluster_parts(
    tasks: &mut Tasks,
    serve: &ServeArgs,
    policy: &PolicyArgs,
    namespaces: &Namespaces,
    self_cert: Option<&SelfCertConfig>,
    shared: &Shared,
    route_feed: Option<Arc<RouteFeed>>,
) -> anyhow::Result<(Option<Arc<RouteIndex>>, Option<Leader>)> {
    let Namespaces::Live { client, index } = namespaces else {
        return Ok((None, None));
    };
    let mut leader = None;
    let mut routes = None;
    if !serve.no_controller {
        let reconciler_opts = crate::reconcile::Options {
            lease_namespace: serve.leader_election_namespace.clone(),
            lease_name: serve.leader_election_name.clone(),
            uniform_port_kinds: serve.uniform_port_kinds,
            passthrough_gateway: serve.passthrough_gateway,
            scope: Scope {
                tenant_prefix: policy.tenant_prefix.clone(),
                system_prefix: policy.system_prefix.clone(),
            },
        };
        let r = start_reconciler_tapped(
            client.clone(),
            index.clone(),
            shared.metrics.clone(),
            reconciler_opts,
            route_feed.map(|f| f as Arc<dyn RouteWatchTap>),
        );
        if let Some(c) = self_cert.cloned() {
            // The server starts on the pair: wait until the leader (maybe this replica) has
            // made it and it is on disk.
            selfcert::wait_for_pair(client, &c, &r.leader).await?;
            let (client, leader) = (client.clone(), r.leader.clone());
            tasks.spawn("self-managed certificate", async move {
                selfcert::run(client, c, leader).await;
                Ok(())
            });
        }
        leader = Some(r.leader.clone());
        routes = Some(r.routes.clone());
        spawn_reconciler(tasks, r, &shared.readiness);
    }
    spawn_replicator(
        tasks,
        serve,
        client.clone(),
        index.clone(),
        &shared.metrics,
        leader.clone(),
    );
    Ok((routes, leader))
}

/// On a cluster, unless `--no-audit`: the continuous audit of the stored objects (SPEC §3.9)
/// on the live namespace index and, with the reconciler, its route watches (`route_feed`),
/// its Warning events on the reconciler's Lease (none without one); with `--policy-reports`
/// (checked by `audit_flags`: the Lease is there) the PolicyReport writer fed by it.
fn start_audit(
    tasks: &mut Tasks,
    serve: &ServeArgs,
    namespaces: &Namespaces,
    cfg: &PolicyConfig,
    leader: Option<Leader>,
    shared: &Shared,
    route_feed: Option<Arc<RouteFeed>>,
) {
    let Namespaces::Live { client, index } = namespaces else {
        return;
    };
    if serve.no_audit {
        return;
    }
    let (auditor, run) = crate::audit::live::start(
        client.clone(),
        index.clone(),
        Arc::new(cfg.clone()),
        shared.metrics.clone(),
        leader.clone(),
        route_feed,
    );
    tasks.spawn("continuous audit", async move {
        run.await;
        anyhow::bail!("its namespace changes or a watch ended")
    });
    if let (true, Some(leader)) = (serve.policy_reports, leader) {
        spawn_policy_reports(tasks, client.clone(), leader, auditor, &shared.metrics);
    }
}

/// The PolicyReport writer as one part, fed by the audit's results.
fn spawn_policy_reports(
    tasks: &mut Tasks,
    client: Client,
    leader: Leader,
    auditor: Auditor,
    metrics: &Metrics,
) {
    let run = crate::audit::policy_report::feed::run(client, leader, auditor, metrics.clone());
    tasks.spawn("PolicyReport writer", async move {
        run.await?;
        anyhow::bail!("its input ended")
    });
}

/// When the metrics/health port closes, once shutdown has begun.
type Close = Pin<Box<dyn Future<Output = tokio::time::Instant> + Send>>;

/// The webhook bound on its pair (with the metrics/health port) and run as parts: the
/// certificate reload and the server. The health port closes after the webhook's drain, so
/// probes see "not ready" meanwhile.
async fn start_webhook(
    tasks: &mut Tasks,
    serve: &ServeArgs,
    tls: WebhookTls,
    limits: Limits,
    admission: Admission,
    shared: &Shared,
) -> anyhow::Result<(HealthServer, Close)> {
    let opts = ServeOptions {
        listen: serve.listen,
        metrics_listen: serve.metrics_listen,
        tls_cert_file: tls.cert,
        tls_key_file: tls.key,
        client_ca_file: serve.client_ca_file.clone(),
        tls_reload_interval: serve.tls_reload_interval,
        shutdown_grace: serve.shutdown_grace,
        max_connections: serve.max_connections,
    };
    let bound = server::bind_with_limits(
        opts,
        limits,
        Arc::new(admission),
        shared.readiness.clone(),
        shared.metrics.clone(),
    )
    .await?;
    let (webhook, health) = bound.split();
    let reload = webhook.cert_reload();
    tasks.spawn("TLS certificate reload", async move {
        reload.await;
        Ok(())
    });
    let (close_tx, close_rx) = tokio::sync::oneshot::channel();
    let stopping = tasks.stopping();
    tasks.spawn_draining("webhook server", async move {
        let close = webhook.serve(stopping).await;
        let _ = close_tx.send(close);
        Ok(())
    });
    let close = async move {
        close_rx
            .await
            .unwrap_or_else(|_| tokio::time::Instant::now())
    };
    Ok((health, Box::pin(close)))
}

/// Without the webhook, the metrics/health port alone; on the signal it reports "not ready"
/// and closes at once.
async fn health_alone(
    tasks: &Tasks,
    serve: &ServeArgs,
    limits: &Limits,
    shared: &Shared,
) -> anyhow::Result<(HealthServer, Close)> {
    let health = server::bind_health(serve.metrics_listen, limits).await?;
    tracing::info!(metrics = %health.addr(), "listening (no webhook)");
    let stopping = tasks.stopping();
    let ready = shared.readiness.clone();
    let close = async move {
        stopping.await;
        ready.set_shutting_down();
        tokio::time::Instant::now()
    };
    Ok((health, Box::pin(close)))
}

/// Run the parts until the signal (exit 0) or until one ends (exit 1).
async fn finish(tasks: Tasks, grace: Duration) -> anyhow::Result<ExitCode> {
    let shutdown = async move {
        shutdown_signal().await;
        arm_hard_deadline(grace + HARD_DEADLINE_MARGIN);
    };
    match tasks.run(shutdown).await {
        Ok(()) => {
            tracing::info!("stopped");
            Ok(ExitCode::SUCCESS)
        }
        Err(ended) => {
            // Also on stderr as plain text: the log may be JSON, and this is why the pod restarts.
            eprintln!("error: {ended}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn start_namespace_index(
    tasks: &mut Tasks,
    client: Client,
    readiness: &Arc<Readiness>,
    metrics: &Metrics,
) -> Arc<LiveNamespaces> {
    let (live, watch) = LiveNamespaces::start_task(client, readiness.clone(), metrics.clone());
    tasks.spawn("namespace index", async move {
        watch.await?;
        Ok(())
    });
    live
}

/// The reconciler as one part; while it runs, the Lease state is shown on `/readyz`.
fn spawn_reconciler(tasks: &mut Tasks, r: Reconciler, readiness: &Arc<Readiness>) {
    let Reconciler { done, leader, .. } = r;
    let readiness = readiness.clone();
    tasks.spawn("reconciler", async move {
        let mut claim = leader.watch();
        let report = async move {
            loop {
                readiness.set_lease_holder(*claim.borrow_and_update());
                if claim.changed().await.is_err() {
                    // The election is gone; `done` reports why.
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            why = done => anyhow::bail!("{}", why.unwrap_or("the reconciler task panicked")),
            () = report => Ok(()),
        }
    });
}

/// The wildcard-Secret replicator as one part (unless `--no-replicator`): on the
/// reconciler's Lease when it runs, else on its own election of the same Lease.
fn spawn_replicator(
    tasks: &mut Tasks,
    serve: &ServeArgs,
    client: Client,
    live: Arc<LiveNamespaces>,
    metrics: &Metrics,
    leader: Option<Leader>,
) {
    if serve.no_replicator {
        return;
    }
    let done = start_replicator(
        client,
        live,
        metrics.clone(),
        leader,
        ReplicatorOptions::from_args(serve),
    );
    tasks.spawn("wildcard-Secret replicator", async move {
        anyhow::bail!("{}", done.await.unwrap_or("the replicator task panicked"))
    });
}

/// After the grace period the drain cuts what is left; this much more is allowed for that
/// and for the runtime to wind down before the process is ended regardless (SPEC §9: exit
/// within the grace period plus one second).
const HARD_DEADLINE_MARGIN: Duration = Duration::from_millis(700);

/// End the process after `after`, whatever the runtime is doing: a plain thread, so no
/// task, blocked worker or connection can hold it up.
fn arm_hard_deadline(after: Duration) {
    let spawned = std::thread::Builder::new()
        .name("shutdown-deadline".into())
        .spawn(move || {
            std::thread::sleep(after);
            eprintln!(
                "tenant-gateway: shutdown did not finish within {after:?} of the signal; exiting now"
            );
            std::process::exit(1);
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the shutdown deadline thread; relying on the drain alone");
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
                    _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the server");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The running reconciler.
pub struct Reconciler {
    /// The route index it fills (for the webhook's warnings, SPEC §3.4).
    pub routes: Arc<RouteIndex>,
    /// Ends only when a part of the reconciler ended (an error worth ending the process on).
    pub done: tokio::task::JoinHandle<&'static str>,
    /// Whether this replica holds the Lease (gates the self-managed certificate writes too).
    pub leader: Leader,
}

/// Start the leader election and the controller on the shared namespace index.
pub fn start_reconciler(
    client: Client,
    namespaces: Arc<LiveNamespaces>,
    metrics: Metrics,
    opts: crate::reconcile::Options,
) -> Reconciler {
    start_reconciler_tapped(client, namespaces, metrics, opts, None)
}

/// [`start_reconciler`], with `tap` told every event of its route watches from their first
/// list on (`RouteIndex::tap`).
pub fn start_reconciler_tapped(
    client: Client,
    namespaces: Arc<LiveNamespaces>,
    metrics: Metrics,
    opts: crate::reconcile::Options,
    tap: Option<Arc<dyn RouteWatchTap>>,
) -> Reconciler {
    let namespace = opts.lease_namespace.clone().unwrap_or_else(|| {
        lease::default_namespace(Path::new(lease::SERVICE_ACCOUNT_NAMESPACE_FILE))
    });
    let lease_cfg = LeaseConfig::new(namespace, opts.lease_name.clone());
    let instance = lease_cfg.identity.clone();
    let (tx, leader) = Leader::channel();
    // The route index the controller fills and the webhook reads (SPEC §3.4).
    let routes = Arc::new(crate::cluster::routes::RouteIndex::default());
    if let Some(tap) = tap {
        routes.tap(tap);
    }
    let parts = Parts {
        client: client.clone(),
        namespaces,
        metrics: metrics.clone(),
        leader: leader.clone(),
        opts,
        instance,
    };
    let index = routes.clone();
    let done = tokio::spawn(async move {
        let election = lease::run(client, lease_cfg, tx, metrics);
        let controller = controller::run(parts, index);
        tokio::select! {
            _ = election => "the leader election ended",
            _ = controller => "the TenantGateway controller ended",
        }
    });
    Reconciler {
        routes,
        done,
        leader,
    }
}

/// What the wildcard-Secret replicator needs from the command line.
#[derive(Debug, Clone)]
pub struct ReplicatorOptions {
    /// `--values-secret-namespace`, `--values-secret-name`, `--values-secret-key`.
    pub values: crate::replicate::ValuesLocation,
    /// The Lease, when the replicator runs without the reconciler (`--no-controller`).
    pub lease_namespace: Option<String>,
    pub lease_name: String,
}

impl ReplicatorOptions {
    /// From the `serve` flags: where the platform values are, and the Lease it shares with
    /// the reconciler.
    pub fn from_args(serve: &crate::config::ServeArgs) -> ReplicatorOptions {
        ReplicatorOptions {
            values: crate::replicate::ValuesLocation {
                namespace: serve.values_secret_namespace.clone(),
                name: serve.values_secret_name.clone(),
                key: serve.values_secret_key.clone(),
            },
            lease_namespace: serve.leader_election_namespace.clone(),
            lease_name: serve.leader_election_name.clone(),
        }
    }
}

/// Start the wildcard-Secret replicator (SPEC §3.6) on the shared namespace index. It
/// writes only while `leader` holds the Lease; without one (the reconciler is off) it runs
/// the same election itself. The handle ends only when the replicator ended.
pub fn start_replicator(
    client: Client,
    namespaces: Arc<LiveNamespaces>,
    metrics: Metrics,
    leader: Option<Leader>,
    opts: ReplicatorOptions,
) -> tokio::task::JoinHandle<&'static str> {
    tokio::spawn(async move {
        let values = opts.values;
        match leader {
            Some(leader) => {
                let instance = lease::identity();
                crate::replicate::run(client, namespaces, metrics, leader, instance, values).await;
                "the wildcard-Secret replicator ended"
            }
            None => {
                let namespace = opts.lease_namespace.unwrap_or_else(|| {
                    lease::default_namespace(Path::new(lease::SERVICE_ACCOUNT_NAMESPACE_FILE))
                });
                let cfg = LeaseConfig::new(namespace, opts.lease_name);
                let instance = cfg.identity.clone();
                let (tx, leader) = Leader::channel();
                let election = lease::run(client.clone(), cfg, tx, metrics.clone());
                let replicator =
                    crate::replicate::run(client, namespaces, metrics, leader, instance, values);
                tokio::select! {
                    _ = election => "the leader election ended",
                    _ = replicator => "the wildcard-Secret replicator ended",
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn forever() -> impl Future<Output = PartResult> + Send + 'static {
        std::future::pending()
    }

    #[tokio::test]
    async fn a_part_that_fails_ends_the_run_naming_it() {
        let mut tasks = Tasks::new();
        tasks.spawn("namespace index", forever());
        tasks.spawn("reconciler", async {
            anyhow::bail!("the leader election ended")
        });
        let err = tasks
            .run(std::future::pending())
            .await
            .expect_err("a part ended");
        let text = err.to_string();
        assert!(
            text.contains("the reconciler stopped: the leader election ended"),
            "{text}"
        );
        assert!(matches!(
            err,
            PartEnded::Failed {
                part: "reconciler",
                ..
            }
        ));
    }

    #[tokio::test]
    async fn a_part_that_returns_or_panics_is_named_too() {
        let mut tasks = Tasks::new();
        tasks.spawn("TLS certificate reload", async { Ok(()) });
        let err = tasks.run(std::future::pending()).await.unwrap_err();
        assert!(matches!(
            err,
            PartEnded::Returned {
                part: "TLS certificate reload"
            }
        ));

        let mut tasks = Tasks::new();
        tasks.spawn("self-managed certificate", async { panic!("boom") });
        let err = tasks.run(std::future::pending()).await.unwrap_err();
        assert!(matches!(
            err,
            PartEnded::Panicked {
                part: "self-managed certificate"
            }
        ));
    }

    #[test]
    fn policy_reports_are_refused_without_the_audit_the_lease_or_a_cluster() {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            serve: ServeArgs,
            #[command(flatten)]
            policy: PolicyArgs,
        }
        // (flags, the error's advice; None: accepted)
        let cases: [(&[&str], Option<&str>); 5] = [
            (&["--policy-reports"], None),
            (&["--no-controller"], None),
            (&["--policy-reports", "--no-audit"], Some("drop --no-audit")),
            (
                &["--policy-reports", "--no-controller"],
                Some("drop --no-controller"),
            ),
            (
                &["--policy-reports", "--namespaces", "ns.yaml"],
                Some("drop --namespaces"),
            ),
        ];
        for (flags, want) in cases {
            let f = <Flags as clap::Parser>::try_parse_from(
                ["serve", "--root-host", "example.org"].iter().chain(flags),
            )
            .expect("the flags parse");
            let got = audit_flags(&f.serve, &f.policy)
                .err()
                .map(|e| e.to_string());
            match (want, got) {
                (None, None) => {}
                (Some(advice), Some(e)) => {
                    assert!(e.contains(advice), "{flags:?}: {e}");
                    assert!(e.starts_with("--policy-reports "), "{flags:?}: {e}");
                }
                (want, got) => panic!("{flags:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[tokio::test]
    async fn shutdown_waits_for_draining_parts_and_stops_the_rest() {
        let mut tasks = Tasks::new();
        let drained = Arc::new(AtomicBool::new(false));
        let stopping = tasks.stopping();
        let d = drained.clone();
        tasks.spawn_draining("webhook server", async move {
            stopping.await;
            // A drain that takes a moment: shutdown must wait for it.
            tokio::time::sleep(Duration::from_millis(50)).await;
            d.store(true, Ordering::SeqCst);
            Ok(())
        });
        tasks.spawn("reconciler", forever());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(tasks.run(async move {
            let _ = rx.await;
        }));
        tx.send(()).expect("run is waiting");
        let ended = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("shutdown finished: the never-ending part was aborted")
            .expect("no panic");
        assert!(ended.is_ok(), "{ended:?}");
        assert!(drained.load(Ordering::SeqCst), "the drain was cut short");
    }
}
