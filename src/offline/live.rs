//! What `check --kubeconfig/--context` reads from the cluster, once and read-only: every
//! namespace with its labels, the live object each manifest would update (unless
//! `--create-only`), and every HTTPRoute/TLSRoute and TenantGateway for the warnings of SPEC
//! §3.4. The reads themselves are `cluster::client`, `cluster::objects` and
//! `cluster::route_snapshot`; nothing here writes.

use std::path::Path;
use std::sync::Arc;

use kube::Client;
use serde_json::Value;

use super::Sources;
use super::manifests::{DefaultNamespace, Manifest, namespace_of, namespaced, target_of};
use crate::cluster::objects::{self, ClusterReadError};
use crate::cluster::{NamespaceSource, client, route_snapshot};

/// Namespaces and routes from the cluster `kubeconfig`/`context` select; with `update`, the
/// live object of each manifest too, so that it is evaluated as an UPDATE of it. Notes
/// (route kinds the caller may not list) go to stderr.
pub async fn read(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    manifests: &mut [Manifest],
    default_namespace: &DefaultNamespace,
    update: bool,
) -> anyhow::Result<Sources> {
    let client = client::connect(kubeconfig, context).await?;
    let namespaces = objects::namespaces(&client).await?;
    if update {
        live_objects(&client, manifests, default_namespace).await?;
    }
    let routes = route_snapshot::list(&client).await?;
    for note in &routes.notes {
        eprintln!("{note}");
    }
    Ok(Sources {
        namespaces: NamespaceSource::Static(Arc::new(namespaces)),
        routes: Some(routes.index),
    })
}

/// Fill in `live` for every manifest of a validated kind that exists in the cluster.
async fn live_objects(
    client: &Client,
    manifests: &mut [Manifest],
    default_namespace: &DefaultNamespace,
) -> Result<(), ClusterReadError> {
    for m in manifests.iter_mut() {
        let Ok(object) = &m.object else { continue };
        let Some(target) = target_of(object) else {
            continue;
        };
        let namespace = namespaced(target).then(|| namespace_of(object, default_namespace).0);
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = objects::Kind {
            group: target.group(),
            kind: target.kind(),
            plural: target.resource(),
        };
        m.live =
            objects::live_object(client, kind, api_version, namespace.as_deref(), name).await?;
    }
    Ok(())
}
