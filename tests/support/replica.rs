//! An in-process reconciler against the test control plane: `serve`'s own wiring
//! (`start_reconciler`) without the webhook, so a test reads its metrics directly and starts a
//! second replica on the same Lease to check a handover or a restart.

use std::sync::Arc;

use tenant_gateway::cluster::LiveNamespaces;
use tenant_gateway::metrics::Metrics;
use tenant_gateway::platform::Scope;
use tenant_gateway::readiness::Readiness;
use tenant_gateway::reconcile::Options;
use tenant_gateway::serve::{Reconciler, start_reconciler};

use super::control_plane::ControlPlane;

pub struct Replica {
    pub metrics: Metrics,
    pub reconciler: Reconciler,
}

/// A replica with the default options, contending for Lease `default/<lease>`.
pub fn start(rt: &tokio::runtime::Runtime, cp: &ControlPlane, lease: &str) -> Replica {
    rt.block_on(async move {
        let client = cp.kube_client().await;
        let metrics = Metrics::new();
        let readiness = Arc::new(Readiness::new());
        let live = LiveNamespaces::start(client.clone(), readiness, metrics.clone());
        let reconciler = start_reconciler(
            client,
            live,
            metrics.clone(),
            Options {
                lease_namespace: Some("default".into()),
                lease_name: lease.into(),
                uniform_port_kinds: false,
                scope: Scope::default(),
                ..Options::default()
            },
        );
        Replica {
            metrics,
            reconciler,
        }
    })
}
