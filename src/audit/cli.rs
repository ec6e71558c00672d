//! `tenant-gateway audit` (SPEC §1, §3.9): the objects of a live cluster, listed once, or of a
//! snapshot (`--namespaces FILE -f DIR`), fed to the same [`Store`] `serve` keeps, and the
//! [`Report`] of what it holds. Read-only: nothing is written to the cluster.

use std::sync::Arc;

use kube::Client;
use kube::api::{Api, ApiResource, ListParams};
use serde_json::Value;

use super::kinds::GuardedKind;
use super::project::Projected;
use super::report::{NotAudited, Report};
use super::store::{Apexes, Store};
use crate::cluster::StaticNamespaces;
use crate::cluster::objects::{self, ClusterReadError};
use crate::cluster::watch::Watched;
use crate::platform::HOST_LABEL;
use crate::policy::PolicyConfig;

/// Objects per page of a kind's listing.
const PAGE: u32 = 500;

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Namespaces(#[from] ClusterReadError),
}

/// Feed every namespace of `namespaces` to `store`.
pub fn load_namespaces(store: &mut Store, namespaces: &StaticNamespaces) {
    let apexes = namespaces.apexes();
    for (name, labels) in namespaces.iter() {
        store.namespace(
            name,
            true,
            labels.get(HOST_LABEL).map(String::as_str),
            apexes,
        );
    }
}

/// Audit the cluster `client` reaches: its namespaces, then every guarded kind it serves.
/// A kind that is not served is reported as not audited; one whose listing fails is an error
/// of the report, and the other kinds are audited all the same.
pub async fn live(client: &Client, cfg: Arc<PolicyConfig>) -> Result<Report, AuditError> {
    let namespaces = objects::namespaces(client).await?;
    let mut store = Store::new(cfg);
    load_namespaces(&mut store, &namespaces);
    let mut not_audited = Vec::new();
    for kind in GuardedKind::ALL {
        if let Some(reason) = store.not_audited(kind) {
            not_audited.push(NotAudited {
                kind: kind.kind().to_string(),
                reason,
                error: store.misconfigured(kind),
            });
            continue;
        }
        let resource = match served(client, kind).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                not_audited.push(NotAudited {
                    kind: kind.kind().to_string(),
                    reason: format!(
                        "{} {} is not served by this cluster (its CRD is not installed)",
                        kind.group(),
                        kind.kind()
                    ),
                    error: false,
                });
                continue;
            }
            Err(e) => {
                not_audited.push(NotAudited {
                    kind: kind.kind().to_string(),
                    reason: format!("cannot tell whether {} is served: {e}", kind.group()),
                    error: true,
                });
                continue;
            }
        };
        store.set_version(kind, &resource.api_version);
        if let Err(e) = list(client, &resource, kind, &mut store, namespaces.apexes()).await {
            not_audited.push(NotAudited {
                kind: kind.kind().to_string(),
                reason: format!(
                    "cannot list {}: {e}; its objects were not audited",
                    resource.plural
                ),
                error: true,
            });
        }
    }
    Ok(Report::new(&store, not_audited, Vec::new()))
}

/// The recommended version of `kind`, `None` when its group or kind is not served.
pub async fn served(
    client: &Client,
    kind: GuardedKind,
) -> Result<Option<ApiResource>, kube::Error> {
    match kube::discovery::group(client, kind.group()).await {
        Ok(g) => Ok(g.recommended_kind(kind.kind()).map(|(r, _)| r)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every object of `kind`, a page at a time, into `store`.
async fn list(
    client: &Client,
    resource: &ApiResource,
    kind: GuardedKind,
    store: &mut Store,
    apexes: &dyn Apexes,
) -> Result<(), kube::Error> {
    let api: Api<Watched<Projected>> = Api::all_with(client.clone(), resource);
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        for item in page.items {
            let (namespace, name) = item.key();
            match item.body {
                Ok(p) => store.apply(kind, &namespace, &name, p.uid.as_deref(), &p.body, apexes),
                Err(e) => store.apply_unreadable(kind, &namespace, &name, &e),
            };
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// One document of a snapshot: where it was read, and the object or why it could not be.
#[derive(Debug, Clone)]
pub struct Document {
    pub source: String,
    pub object: Result<Value, String>,
}

/// Audit a snapshot: `namespaces` and the objects of `documents` (`kubectl get … -o yaml`);
/// objects of other kinds are left out, a document that cannot be read is an error of the
/// report.
pub fn snapshot(
    cfg: Arc<PolicyConfig>,
    namespaces: &StaticNamespaces,
    documents: Vec<Document>,
) -> Report {
    let mut store = Store::new(cfg);
    load_namespaces(&mut store, namespaces);
    let mut unreadable = Vec::new();
    for doc in documents {
        let object = match doc.object {
            Ok(o) => o,
            Err(e) => {
                unreadable.push(format!("{}: {e}", doc.source));
                continue;
            }
        };
        let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
        let api_version = text("/apiVersion");
        let Some(kind) = GuardedKind::of(api_version, text("/kind")) else {
            continue;
        };
        let name = text("/metadata/name");
        if name.is_empty() {
            unreadable.push(format!(
                "{}: a {} without metadata.name is not a stored object",
                doc.source,
                kind.kind()
            ));
            continue;
        }
        // As kubectl: an object that names no namespace is in `default`.
        let namespace = Some(text("/metadata/namespace"))
            .filter(|n| !n.is_empty())
            .unwrap_or("default");
        if store.not_audited(kind).is_none() {
            store.set_version(kind, api_version);
        }
        let p = Projected::of_value(&object);
        store.apply(
            kind,
            namespace,
            name,
            p.uid.as_deref(),
            &p.body,
            namespaces.apexes(),
        );
    }
    let not_audited = GuardedKind::ALL
        .into_iter()
        .filter_map(|k| {
            store.not_audited(k).map(|reason| NotAudited {
                kind: k.kind().to_string(),
                reason,
                error: store.misconfigured(k),
            })
        })
        .collect();
    Report::new(&store, not_audited, unreadable)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::audit::Outcome;

    #[test]
    fn a_snapshot_is_judged_kind_by_kind_and_bad_documents_are_errors() {
        let namespaces = StaticNamespaces::from_yaml(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tenant-a\n  labels:\n    \
             namespace.cozystack.io/host: a.example.org\n---\napiVersion: v1\nkind: Namespace\n\
             metadata:\n  name: tenant-b\n",
            "ns.yaml",
        )
        .expect("namespaces");
        let doc = |source: &str, object: Value| Document {
            source: source.into(),
            object: Ok(object),
        };
        let docs = vec![
            doc(
                "r.yaml#1",
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                       "metadata": {"name": "ok", "namespace": "tenant-a", "uid": "u1"},
                       "spec": {"hostnames": ["x.a.example.org"]}}),
            ),
            doc(
                "r.yaml#2",
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                       "metadata": {"name": "bad", "namespace": "tenant-a", "uid": "u2"},
                       "spec": {"hostnames": ["x.b.example.org"]}}),
            ),
            doc(
                "r.yaml#3",
                json!({"apiVersion": "apps/v1", "kind": "Deployment",
                       "metadata": {"name": "d", "namespace": "tenant-a"}}),
            ),
            doc(
                "r.yaml#4",
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                       "metadata": {"namespace": "tenant-a"}}),
            ),
            Document {
                source: "r.yaml#5".into(),
                object: Err("not valid YAML".into()),
            },
        ];
        let cfg = PolicyConfig::default();
        let r = snapshot(Arc::new(cfg), &namespaces, docs);
        let found: Vec<(String, String, Outcome)> = r
            .results
            .iter()
            .map(|r| (r.object.kind.clone(), r.object.display(), r.outcome))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "Namespace".to_string(),
                    "tenant-b".to_string(),
                    Outcome::Fail
                ),
                (
                    "HTTPRoute".to_string(),
                    "tenant-a/bad".to_string(),
                    Outcome::Fail
                ),
            ]
        );
        assert_eq!(r.results[1].object.uid.as_deref(), Some("u2"));
        assert_eq!(r.unreadable.len(), 2, "{:?}", r.unreadable);
        assert!(r.unreadable[0].starts_with("r.yaml#4: "));
        assert!(r.unreadable[1].starts_with("r.yaml#5: not valid YAML"));
        assert_eq!(r.exit_code(), 2);
        assert_eq!(r.summary.objects, 2);
        // Without --root-host the Ingress layer cannot run: said, and an error (exit 2), as
        // `check` and `serve` treat it.
        assert!(r.not_audited.iter().any(|n| n.kind == "Ingress" && n.error));
        assert!(
            r.not_audited
                .iter()
                .filter(|n| n.kind != "Ingress")
                .all(|n| !n.error)
        );
    }
}
