//! What `check --kubeconfig/--context` reads from a cluster, read-only: every namespace with
//! its labels (one paged LIST, no watch), and the live object a manifest would update.
//! Nothing here writes; the client comes from `client`.

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::Value;

use super::StaticNamespaces;

#[derive(Debug, thiserror::Error)]
pub enum ClusterReadError {
    #[error("cannot list namespaces: {0}")]
    Namespaces(Box<kube::Error>),
    #[error("cannot read {what} from the cluster: {source}")]
    Get {
        what: String,
        source: Box<kube::Error>,
    },
}

/// Every namespace and its labels, listed in pages.
pub async fn namespaces(client: &Client) -> Result<StaticNamespaces, ClusterReadError> {
    let api: Api<Namespace> = Api::all(client.clone());
    let mut out = StaticNamespaces::default();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api
            .list_metadata(&params)
            .await
            .map_err(|e| ClusterReadError::Namespaces(Box::new(e)))?;
        for ns in page.items {
            if let Some(name) = ns.metadata.name.as_deref() {
                out.insert(name, ns.metadata.labels.unwrap_or_default());
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// A kind as the API addresses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    /// The plural resource name.
    pub plural: &'a str,
}

/// The object as it is in the cluster, or `None` when it does not exist (or its kind is not
/// served there).
pub async fn live_object(
    client: &Client,
    target: Kind<'_>,
    api_version: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, ClusterReadError> {
    if name.is_empty() {
        return Ok(None);
    }
    let version = api_version.rsplit('/').next().unwrap_or_default();
    let resource = ApiResource {
        group: target.group.to_string(),
        version: version.to_string(),
        api_version: api_version.to_string(),
        kind: target.kind.to_string(),
        plural: target.plural.to_string(),
    };
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let what = match namespace {
        Some(ns) => format!("{} {ns}/{name}", target.kind),
        None => format!("{} {name}", target.kind),
    };
    match api.get_opt(name).await {
        Ok(Some(obj)) => serde_json::to_value(obj)
            .map(Some)
            .map_err(|e| ClusterReadError::Get {
                what,
                source: Box::new(kube::Error::SerdeError(e)),
            }),
        Ok(None) => Ok(None),
        // The kind is not installed there: nothing exists to update.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(source) => Err(ClusterReadError::Get {
            what,
            source: Box::new(source),
        }),
    }
}
