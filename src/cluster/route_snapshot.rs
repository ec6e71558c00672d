//! A route index without a reconciler, for `review`/`check` (SPEC §3.4): from a file of
//! HTTPRoute/TLSRoute objects (`--routes FILE`, as `kubectl get httproutes,tlsroutes -A -o
//! yaml` prints them: a List, multi-document YAML, or JSON), or listed once from a cluster
//! (`check --kubeconfig`). Both go through the index's own projection
//! (`routes::project`), so a snapshot warns exactly as the live index of `serve` does.
//! TenantGateways in the file (`kubectl get httproutes,tlsroutes,tenantgateways -A -o yaml`),
//! and those the listing finds, give their Gateway's certMode, as the TenantGateway watch
//! does for `serve`: without them every Gateway's listener budget is counted as http01's.

use std::path::Path;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::Value;

use super::route_facts::{
    HttpsListeners, PassthroughListener, RouteFacts, RouteKind, http01_passthrough,
};
use super::routes::{RouteIndex, project};
use super::snapshot::flatten_list;
use super::watch;
use crate::platform::{GATEWAY_API_GROUP, TGW_API_GROUP, TGW_KIND};

#[derive(Debug, thiserror::Error)]
pub enum RouteSnapshotError {
    #[error("cannot read route snapshot {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("route snapshot {path}: document {index} is not valid YAML/JSON: {reason}")]
    Parse {
        path: String,
        index: usize,
        reason: String,
    },
    #[error(
        "route snapshot {path}: object {index} is a {kind:?} of {api_version:?}, expected HTTPRoute or TLSRoute objects of {GATEWAY_API_GROUP}, or TenantGateways (as printed by `kubectl get httproutes,tlsroutes,tenantgateways -A -o yaml`)"
    )]
    NotRoute {
        path: String,
        index: usize,
        kind: String,
        api_version: String,
    },
    #[error(
        "route snapshot {path}: object {index} ({kind}) has no metadata.name or metadata.namespace"
    )]
    Unnamed {
        path: String,
        index: usize,
        kind: String,
    },
    #[error("route snapshot {path}: object {index} ({kind}) is not a Kubernetes object: {reason}")]
    Shape {
        path: String,
        index: usize,
        kind: String,
        reason: String,
    },
    #[error("cannot list {what} from the cluster: {source}")]
    List {
        what: &'static str,
        source: Box<kube::Error>,
    },
}

/// Read `--routes FILE` (a byte-order mark is handled as kubectl handles it).
pub fn from_file(path: &Path) -> Result<RouteIndex, RouteSnapshotError> {
    let p = path.display().to_string();
    let read_err = |reason: String| RouteSnapshotError::Read {
        path: p.clone(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| read_err(e.to_string()))?;
    let text = crate::yaml::decode(bytes).map_err(|e| read_err(e.to_string()))?;
    from_text(&text, &p)
}

/// Read a snapshot's text; `origin` names it in errors. Every object must be a route or a
/// TenantGateway: a wrong file (namespaces given as routes) is an error, not an empty index.
pub fn from_text(text: &str, origin: &str) -> Result<RouteIndex, RouteSnapshotError> {
    let index = RouteIndex::default();
    let mut n = 0usize;
    for doc in crate::yaml::read_documents(text) {
        let value = doc.value.map_err(|e| RouteSnapshotError::Parse {
            path: origin.to_string(),
            index: doc.index,
            reason: e.to_string(),
        })?;
        for item in flatten_list(value) {
            n += 1;
            match object_of(item, origin, n)? {
                Item::Route(facts) => {
                    index.apply(facts);
                }
                Item::TenantGateway {
                    namespace,
                    name,
                    listeners,
                    passthrough,
                } => {
                    index.set_listeners(&namespace, &name, listeners);
                    index.set_passthrough(&namespace, &name, passthrough);
                }
            }
        }
    }
    Ok(index)
}

/// One object of a snapshot, as the index keeps it.
enum Item {
    Route(RouteFacts),
    /// The Gateway a TenantGateway renders carries its namespace and name (SPEC §3.2).
    TenantGateway {
        namespace: String,
        name: String,
        listeners: Option<HttpsListeners>,
        /// Its passthrough listeners whose hostnames no HTTPRoute may claim (http01).
        passthrough: Vec<PassthroughListener>,
    },
}

/// How a listed TenantGateway's Gateway lists its HTTPS listeners (`spec.certMode`).
fn listeners_of(tgw: &Value) -> Option<HttpsListeners> {
    HttpsListeners::of_cert_mode(tgw.pointer("/spec/certMode").and_then(Value::as_str))
}

/// A listed TenantGateway's passthrough listeners whose hostnames no HTTPRoute may claim
/// (http01: `spec.apex`, `spec.tlsPassthroughServices`; entries that are not strings are
/// skipped, as the reconciler never sees them).
fn passthrough_of(tgw: &Value) -> Vec<PassthroughListener> {
    let services: Vec<String> = tgw
        .pointer("/spec/tlsPassthroughServices")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    http01_passthrough(
        tgw.pointer("/spec/certMode").and_then(Value::as_str),
        tgw.pointer("/spec/apex")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        &services,
    )
}

fn object_of(item: Value, origin: &str, index: usize) -> Result<Item, RouteSnapshotError> {
    let s = |k: &str| {
        item.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (kind_s, api_version) = (s("kind"), s("apiVersion"));
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = match kind_s.as_str() {
        "HTTPRoute" if group == GATEWAY_API_GROUP => RouteKind::HttpRoute,
        "TLSRoute" if group == GATEWAY_API_GROUP => RouteKind::TlsRoute,
        TGW_KIND if group == TGW_API_GROUP => {
            let meta = |k: &str| {
                item.pointer(&format!("/metadata/{k}"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let (namespace, name) = (meta("namespace"), meta("name"));
            if namespace.is_empty() || name.is_empty() {
                return Err(RouteSnapshotError::Unnamed {
                    path: origin.to_string(),
                    index,
                    kind: kind_s,
                });
            }
            return Ok(Item::TenantGateway {
                listeners: listeners_of(&item),
                passthrough: passthrough_of(&item),
                namespace,
                name,
            });
        }
        _ => {
            return Err(RouteSnapshotError::NotRoute {
                path: origin.to_string(),
                index,
                kind: kind_s,
                api_version,
            });
        }
    };
    let object: DynamicObject =
        serde_json::from_value(item).map_err(|e| RouteSnapshotError::Shape {
            path: origin.to_string(),
            index,
            kind: kind_s.clone(),
            reason: e.to_string(),
        })?;
    let named = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
    if !named(&object.metadata.name) || !named(&object.metadata.namespace) {
        return Err(RouteSnapshotError::Unnamed {
            path: origin.to_string(),
            index,
            kind: kind_s,
        });
    }
    Ok(Item::Route(project(kind, &object)))
}

/// What [`list`] read, with notes for stderr.
#[derive(Default)]
pub struct Listed {
    pub index: RouteIndex,
    /// Kinds the caller may not list: their warnings are not given (said, not hidden).
    pub notes: Vec<String>,
}

/// List every HTTPRoute, TLSRoute and TenantGateway of the cluster once (paged; read-only).
/// A kind whose CRD is not served contributes nothing; one the caller may not list is a note
/// (the warnings are advice, and the verdicts do not depend on them); any other error fails.
pub async fn list(client: &Client) -> Result<Listed, RouteSnapshotError> {
    let mut out = Listed::default();
    for (kind, what, name) in [
        (RouteKind::HttpRoute, "HTTPRoutes", "HTTPRoute"),
        (RouteKind::TlsRoute, "TLSRoutes", "TLSRoute"),
    ] {
        let Some(ar) = watch::served(client, GATEWAY_API_GROUP, name).await else {
            continue;
        };
        let index = &out.index;
        match list_each(client, &ar, |o| {
            index.apply(project(kind, o));
        })
        .await
        {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 403 => out.notes.push(format!(
                "note: cannot list {what} cluster-wide ({}); hostname-conflict and listener-budget warnings for them are not given",
                e.message
            )),
            Err(e) => {
                return Err(RouteSnapshotError::List {
                    what,
                    source: Box::new(e),
                });
            }
        }
    }
    if let Some(ar) = watch::served(client, TGW_API_GROUP, TGW_KIND).await {
        let index = &out.index;
        // The Gateway a TenantGateway renders carries its namespace and name (SPEC §3.2).
        let listed = list_each(client, &ar, |o| {
            if let (Some(namespace), Some(name)) = (&o.metadata.namespace, &o.metadata.name) {
                index.set_listeners(namespace, name, listeners_of(&o.data));
                index.set_passthrough(namespace, name, passthrough_of(&o.data));
            }
        });
        match listed.await {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 403 => out.notes.push(format!(
                "note: cannot list TenantGateways cluster-wide ({}); listener-budget warnings count every Gateway as http01",
                e.message
            )),
            Err(e) => {
                return Err(RouteSnapshotError::List {
                    what: "TenantGateways",
                    source: Box::new(e),
                });
            }
        }
    }
    Ok(out)
}

/// Every object of kind `ar` in the cluster, page by page, handed to `each`.
async fn list_each(
    client: &Client,
    ar: &ApiResource,
    mut each: impl FnMut(&DynamicObject),
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        page.items.iter().for_each(&mut each);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: gateway.networking.k8s.io/v1
  kind: HTTPRoute
  metadata: {name: dashboard, namespace: cozy-dashboard}
  spec:
    parentRefs: [{name: gw, namespace: tenant-root}]
    hostnames: [dash.alice.example.org]
  status:
    parents:
    - controllerName: gateway.cozystack.io/tenantgateway-controller
      parentRef: {name: gw, namespace: tenant-root}
      conditions: []
- apiVersion: gateway.networking.k8s.io/v1alpha2
  kind: TLSRoute
  metadata: {name: api, namespace: cozy-k}
  spec:
    parentRefs: [{name: gw, namespace: tenant-root, sectionName: tls-api}]
    hostnames: [api.example.org]
"#;

    #[test]
    fn reads_a_list_and_multi_document_yaml_and_json() {
        let idx = from_text(LIST, "routes.yaml").expect("valid");
        assert_eq!(idx.len(), 2);
        let gw = idx.for_gateway("tenant-root", "gw");
        assert_eq!(gw.len(), 2);
        let dash = gw
            .values()
            .find(|r| r.name() == "dashboard")
            .expect("dashboard");
        assert_eq!(
            dash.hostnames().collect::<Vec<_>>(),
            ["dash.alice.example.org"]
        );
        assert_eq!(
            dash.our_status.len(),
            1,
            "the status is read: it says published"
        );

        // (`n` alone would be YAML 1.1's false, as kubectl reads it.)
        let multi = "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: a, namespace: ns1}\nspec: {parentRefs: [{name: gw}]}\n---\n# empty\n---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: HTTPRoute\nmetadata: {name: b, namespace: ns1}\n";
        let idx = from_text(multi, "m.yaml").expect("valid");
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.for_gateway("ns1", "gw").len(), 1);

        let json = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"a","namespace":"n"},"spec":{"parentRefs":[{"name":"gw"}]}}]}"#;
        assert_eq!(from_text(json, "r.json").expect("valid").len(), 1);
        assert!(
            from_text("", "empty.yaml")
                .expect("empty is fine")
                .is_empty()
        );
    }

    #[test]
    fn tenant_gateways_give_their_gateways_certmode() {
        let text = r#"
apiVersion: v1
kind: List
items:
- apiVersion: gateway.cozystack.io/v1alpha1
  kind: TenantGateway
  metadata: {name: gw, namespace: tenant-a}
  spec: {apex: a.example.org, certMode: dns01}
- apiVersion: gateway.cozystack.io/v1alpha1
  kind: TenantGateway
  metadata: {name: gw, namespace: tenant-b}
  spec: {apex: b.example.org}
- apiVersion: gateway.cozystack.io/v1alpha1
  kind: TenantGateway
  metadata: {name: gw, namespace: tenant-c}
  spec: {apex: c.example.org, certMode: existingSecret}
- apiVersion: gateway.networking.k8s.io/v1
  kind: HTTPRoute
  metadata: {name: a, namespace: tenant-a}
  spec: {parentRefs: [{name: gw}]}
"#;
        let idx = from_text(text, "r.yaml").expect("valid");
        assert_eq!(idx.len(), 1, "TenantGateways are not routes");
        for (ns, want) in [
            ("tenant-a", Some(HttpsListeners::PerApex)),
            ("tenant-b", Some(HttpsListeners::PerHostname)),
            ("tenant-c", Some(HttpsListeners::PerApex)),
            ("tenant-d", None),
        ] {
            assert_eq!(idx.gateway(ns, "gw").1, want, "{ns}");
        }
        let e = from_text(
            "apiVersion: gateway.cozystack.io/v1alpha1\nkind: TenantGateway\nmetadata: {name: gw}\n",
            "r.yaml",
        )
        .err()
        .map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("(TenantGateway) has no metadata.name")),
            "{e:?}"
        );
    }

    /// SPEC §3.10: an http01 TenantGateway in the snapshot declares the passthrough
    /// hostnames no HTTPRoute may claim on its Gateway (defaults applied as the API server
    /// would: certMode http01); other modes and other entries declare none.
    #[test]
    fn tenant_gateways_give_their_http01_passthrough_hostnames() {
        let text = r#"
apiVersion: v1
kind: List
items:
- apiVersion: gateway.cozystack.io/v1alpha1
  kind: TenantGateway
  metadata: {name: gw, namespace: tenant-a}
  spec: {apex: A.example.org, tlsPassthroughServices: [api, api, 7, Bad_Svc, cdi]}
- apiVersion: gateway.cozystack.io/v1alpha1
  kind: TenantGateway
  metadata: {name: gw, namespace: tenant-b}
  spec: {apex: b.example.org, certMode: dns01, tlsPassthroughServices: [api]}
- apiVersion: gateway.cozystack.io/v1alpha1
  kind: TenantGateway
  metadata: {name: gw, namespace: tenant-c}
  spec: {apex: c.example.org}
"#;
        let idx = from_text(text, "r.yaml").expect("valid");
        let hosts = |ns: &str| -> Vec<String> {
            idx.passthrough(ns, "gw")
                .map(|l| {
                    l.iter()
                        .map(|p| format!("{} {}", p.listener, p.hostname))
                        .collect()
                })
                .unwrap_or_default()
        };
        assert_eq!(
            hosts("tenant-a"),
            ["tls-api api.a.example.org", "tls-cdi cdi.a.example.org"]
        );
        assert!(hosts("tenant-b").is_empty());
        assert!(hosts("tenant-c").is_empty());
    }

    #[test]
    fn anything_but_routes_is_an_error_naming_the_object() {
        // (text, expected substrings of the error)
        let cases: Vec<(&str, Vec<&str>)> = vec![
            (
                "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n",
                vec![
                    "object 1",
                    "\"Namespace\"",
                    "expected HTTPRoute or TLSRoute",
                ],
            ),
            (
                "apiVersion: example.com/v1\nkind: HTTPRoute\nmetadata: {name: x, namespace: ns1}\n",
                vec!["\"example.com/v1\""],
            ),
            (
                "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: x}\n",
                vec!["object 1 (HTTPRoute) has no metadata.name or metadata.namespace"],
            ),
            (
                "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: [x], namespace: ns1}\n",
                vec!["not a Kubernetes object"],
            ),
            ("a: [unclosed\n", vec!["document 1 is not valid YAML/JSON"]),
            ("- just\n- a list\n", vec!["expected HTTPRoute"]),
        ];
        for (text, want) in cases {
            let e = from_text(text, "r.yaml").err().map(|e| e.to_string());
            let e = e.unwrap_or_else(|| panic!("{text:?} was accepted"));
            for w in want {
                assert!(e.contains(w), "{text:?}: {e:?} lacks {w:?}");
            }
            assert!(e.contains("r.yaml"), "{e}");
        }
    }
}
