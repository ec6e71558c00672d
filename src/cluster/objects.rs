//! What `check --kubeconfig/--context` reads from a cluster, read-only: the kubeconfig
//! context's namespace, every namespace with its labels (one paged LIST, no watch), and the
//! live object a manifest would update. Nothing here writes.

use std::path::Path;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;

use super::StaticNamespaces;
use crate::admission::WebhookResource;

#[derive(Debug, thiserror::Error)]
pub enum ClusterReadError {
    #[error("cannot read kubeconfig {path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error("kubeconfig has no context {0:?}")]
    NoContext(String),
    #[error("cannot connect with the kubeconfig: {0}")]
    Connect(String),
    #[error("cannot list namespaces: {0}")]
    Namespaces(Box<kube::Error>),
    #[error("cannot read {what} from the cluster: {source}")]
    Get {
        what: String,
        source: Box<kube::Error>,
    },
}

/// The kubeconfig kubectl would use: the named file, else `$KUBECONFIG` (its list of files
/// merged), else none. `~/.kube/config` alone does not count: without a flag or the variable
/// `check` stays offline, as its output would otherwise depend on a file nobody named.
fn load(path: Option<&Path>) -> Result<Option<Kubeconfig>, ClusterReadError> {
    match path {
        Some(p) => Kubeconfig::read_from(p)
            .map(Some)
            .map_err(|e| ClusterReadError::Kubeconfig {
                path: p.display().to_string(),
                reason: e.to_string(),
            }),
        None if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) => Kubeconfig::read()
            .map(Some)
            .map_err(|e| ClusterReadError::Kubeconfig {
                path: "$KUBECONFIG".to_string(),
                reason: e.to_string(),
            }),
        None => Ok(None),
    }
}

/// `(context, namespace)` of the selected context when it names a namespace.
pub fn context_namespace(
    path: Option<&Path>,
    context: Option<&str>,
) -> Result<Option<(String, String)>, ClusterReadError> {
    let Some(kc) = load(path)? else {
        return Ok(None);
    };
    let Some(name) = context
        .map(str::to_string)
        .or_else(|| kc.current_context.clone())
    else {
        return Ok(None);
    };
    let named = kc
        .contexts
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| ClusterReadError::NoContext(name.clone()))?;
    Ok(named
        .context
        .as_ref()
        .and_then(|c| c.namespace.clone())
        .filter(|n| !n.is_empty())
        .map(|n| (name, n)))
}

/// A client for the selected kubeconfig and context.
pub async fn client(
    path: Option<&Path>,
    context: Option<&str>,
) -> Result<Client, ClusterReadError> {
    let kc = match load(path)? {
        Some(kc) => kc,
        None => Kubeconfig::read().map_err(|e| ClusterReadError::Kubeconfig {
            path: "~/.kube/config".to_string(),
            reason: e.to_string(),
        })?,
    };
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .map_err(|e| ClusterReadError::Connect(e.to_string()))?;
    Client::try_from(config).map_err(|e| ClusterReadError::Connect(e.to_string()))
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

/// The object as it is in the cluster, or `None` when it does not exist (or its kind is not
/// served there).
pub async fn live_object(
    client: &Client,
    target: WebhookResource,
    api_version: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, ClusterReadError> {
    if name.is_empty() {
        return Ok(None);
    }
    let version = api_version.rsplit('/').next().unwrap_or_default();
    let resource = ApiResource {
        group: target.group().to_string(),
        version: version.to_string(),
        api_version: api_version.to_string(),
        kind: target.kind().to_string(),
        plural: target.resource().to_string(),
    };
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let what = match namespace {
        Some(ns) => format!("{} {ns}/{name}", target.kind()),
        None => format!("{} {name}", target.kind()),
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
