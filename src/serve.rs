//! Process orchestration for `serve`: the parts beside the webhook, each a task. Today: the
//! TenantGateway reconciler (its shared watches, the leader Lease, the controller). The lead
//! moves the rest of `serve`'s wiring here.

use std::path::Path;
use std::sync::Arc;

use kube::Client;

use crate::cluster::LiveNamespaces;
use crate::cluster::lease::{self, Leader, LeaseConfig};
use crate::cluster::routes::RouteIndex;
use crate::metrics::Metrics;
use crate::platform::Scope;
use crate::reconcile::context::ControllerConfig;
use crate::reconcile::controller::{self, Parts};
use crate::reconcile::render::RenderOptions;

/// What the reconciler needs from the command line.
#[derive(Debug, Clone)]
pub struct ReconcilerOptions {
    /// `--leader-election-namespace`; `None`: the pod's own, else `default`.
    pub lease_namespace: Option<String>,
    /// `--leader-election-name`.
    pub lease_name: String,
    /// `--uniform-port-kinds`.
    pub uniform_port_kinds: bool,
    pub scope: Scope,
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
    opts: ReconcilerOptions,
) -> Reconciler {
    let namespace = opts.lease_namespace.clone().unwrap_or_else(|| {
        lease::default_namespace(Path::new(lease::SERVICE_ACCOUNT_NAMESPACE_FILE))
    });
    let lease_cfg = LeaseConfig::new(namespace, opts.lease_name.clone());
    let instance = lease_cfg.identity.clone();
    let (tx, leader) = Leader::channel();
    let routes = controller::route_index();
    let parts = Parts {
        client: client.clone(),
        namespaces,
        metrics: metrics.clone(),
        leader: leader.clone(),
        cfg: ControllerConfig {
            plan: crate::reconcile::Config {
                scope: opts.scope.clone(),
                render: RenderOptions {
                    uniform_port_kinds: opts.uniform_port_kinds,
                },
            },
            concurrency: 8,
        },
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
