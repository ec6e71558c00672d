//! The route index (SPEC §3.3, §3.4): HTTPRoutes and TLSRoutes kept as projected facts, not
//! whole objects, grouped by the Gateway they reference (or carry our status entry for).
//! Copy-on-write per Gateway: a reader (a reconcile, later the webhook's warnings) takes the
//! `Arc` of one Gateway's routes and never blocks the watch; an update clones only the map of
//! the Gateways it touches.
//!
//! The facts are the reconciler's input types (`reconcile::inputs`): the one place this module
//! reaches into `reconcile`, so the projection is written once instead of converted twice.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::DynamicObject;
use serde_json::Value;

use super::watch::Key;
use crate::platform::{CONTROLLER_NAME, GATEWAY_API_GROUP};
use crate::reconcile::inputs::{ParentRef, RouteFacts, RouteKind, RouteParentStatus};

/// `(kind, namespace, name)` of a route.
pub type RouteKey = (RouteKind, String, String);

/// One Gateway's routes.
pub type GatewayRoutes = BTreeMap<RouteKey, Arc<RouteFacts>>;

/// Project a watched route into the facts the reconciler reads. Malformed parts are dropped
/// (a parentRef without a name, a hostname that is not a string, an entry of ours whose
/// conditions do not decode); the route itself is always kept so its status can be written.
pub fn project(kind: RouteKind, o: &DynamicObject) -> RouteFacts {
    let spec = o.data.get("spec");
    let hostnames = spec
        .and_then(|s| s.get("hostnames"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let parent_refs = spec
        .and_then(|s| s.get("parentRefs"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(parent_ref).collect())
        .unwrap_or_default();
    let our_status = o
        .data
        .get("status")
        .and_then(|s| s.get("parents"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|e| {
                    e.get("controllerName").and_then(Value::as_str) == Some(CONTROLLER_NAME)
                })
                .filter_map(|e| {
                    let parent_ref = parent_ref(e.get("parentRef")?)?;
                    let conditions: Vec<Condition> =
                        serde_json::from_value(e.get("conditions").cloned().unwrap_or(Value::Null))
                            .unwrap_or_default();
                    Some(RouteParentStatus {
                        parent_ref,
                        conditions,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    RouteFacts {
        kind,
        namespace: o.metadata.namespace.clone().unwrap_or_default(),
        name: o.metadata.name.clone().unwrap_or_default(),
        creation: o.metadata.creation_timestamp.clone(),
        generation: o.metadata.generation,
        resource_version: o.metadata.resource_version.clone(),
        hostnames,
        parent_refs,
        our_status,
    }
}

fn parent_ref(v: &Value) -> Option<ParentRef> {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    Some(ParentRef {
        group: s("group"),
        kind: s("kind"),
        namespace: s("namespace"),
        name: s("name").filter(|n| !n.is_empty())?,
        section_name: s("sectionName"),
        port: v
            .get("port")
            .and_then(Value::as_i64)
            .and_then(|p| i32::try_from(p).ok()),
    })
}

/// The Gateways a route is indexed under: those its parentRefs name, and those our status
/// entries name (so the finalizer and a detaching route still find it).
pub fn gateways_of(f: &RouteFacts) -> BTreeSet<Key> {
    f.parent_refs
        .iter()
        .chain(f.our_status.iter().map(|e| &e.parent_ref))
        .filter(|p| {
            p.group.as_deref().unwrap_or(GATEWAY_API_GROUP) == GATEWAY_API_GROUP
                && p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
        })
        .map(|p| {
            (
                p.namespace.clone().unwrap_or_else(|| f.namespace.clone()),
                p.name.clone(),
            )
        })
        .collect()
}

#[derive(Default)]
struct Inner {
    routes: HashMap<RouteKey, Arc<RouteFacts>>,
    by_gateway: HashMap<Key, Arc<GatewayRoutes>>,
    relist: HashMap<RouteKind, HashSet<RouteKey>>,
}

/// Route facts per Gateway.
#[derive(Default)]
pub struct RouteIndex {
    inner: RwLock<Inner>,
}

impl RouteIndex {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        // Plain maps survive a panicking writer.
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The routes indexed under Gateway `namespace/name` (a snapshot).
    pub fn for_gateway(&self, namespace: &str, name: &str) -> Arc<GatewayRoutes> {
        let g = self.inner.read().unwrap_or_else(|p| p.into_inner());
        g.by_gateway
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .routes
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Insert or replace a route; returns the Gateways whose routes changed.
    pub fn apply(&self, facts: RouteFacts) -> BTreeSet<Key> {
        let key: RouteKey = (facts.kind, facts.namespace.clone(), facts.name.clone());
        let mut g = self.write();
        if let Some(seen) = g.relist.get_mut(&facts.kind) {
            seen.insert(key.clone());
        }
        let facts = Arc::new(facts);
        let old = g.routes.insert(key.clone(), facts.clone());
        if old.as_deref() == Some(&*facts) {
            return BTreeSet::new();
        }
        let before = old.as_deref().map(gateways_of).unwrap_or_default();
        let after = gateways_of(&facts);
        for gw in before.difference(&after) {
            unindex(&mut g.by_gateway, gw, &key);
        }
        for gw in &after {
            let m = g.by_gateway.entry(gw.clone()).or_default();
            Arc::make_mut(m).insert(key.clone(), facts.clone());
        }
        before.union(&after).cloned().collect()
    }

    /// Remove a route; returns the Gateways whose routes changed.
    pub fn delete(&self, kind: RouteKind, namespace: &str, name: &str) -> BTreeSet<Key> {
        let key: RouteKey = (kind, namespace.to_string(), name.to_string());
        let mut g = self.write();
        let Some(old) = g.routes.remove(&key) else {
            return BTreeSet::new();
        };
        let gws = gateways_of(&old);
        for gw in &gws {
            unindex(&mut g.by_gateway, gw, &key);
        }
        gws
    }

    pub fn relist_started(&self, kind: RouteKind) {
        self.write().relist.insert(kind, HashSet::new());
    }

    /// Drop routes of `kind` the relist did not see again; returns the Gateways touched.
    pub fn relist_done(&self, kind: RouteKind) -> BTreeSet<Key> {
        let gone: Vec<RouteKey> = {
            let mut g = self.write();
            let Some(seen) = g.relist.remove(&kind) else {
                return BTreeSet::new();
            };
            g.routes
                .keys()
                .filter(|k| k.0 == kind && !seen.contains(*k))
                .cloned()
                .collect()
        };
        gone.iter()
            .flat_map(|(k, ns, n)| self.delete(*k, ns, n))
            .collect()
    }
}

fn unindex(by_gateway: &mut HashMap<Key, Arc<GatewayRoutes>>, gw: &Key, key: &RouteKey) {
    if let Some(m) = by_gateway.get_mut(gw) {
        Arc::make_mut(m).remove(key);
        if m.is_empty() {
            by_gateway.remove(gw);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("dynamic object")
    }

    fn route(ns: &str, name: &str, parent: Value, status: Value) -> DynamicObject {
        obj(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "7", "generation": 2},
            "spec": {"parentRefs": [parent], "hostnames": ["a.example.org", 5]},
            "status": status
        }))
    }

    #[test]
    fn projection_keeps_only_what_is_read() {
        let o = route(
            "tenant-a",
            "r",
            serde_json::json!({"name": "gw", "namespace": "tenant-root", "sectionName": "https-a"}),
            serde_json::json!({"parents": [
                {"controllerName": "other.io/c", "parentRef": {"name": "gw"}, "conditions": []},
                {"controllerName": CONTROLLER_NAME, "parentRef": {"name": "gw2"},
                 "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                   "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
                {"controllerName": CONTROLLER_NAME, "parentRef": {}}
            ]}),
        );
        let f = project(RouteKind::HttpRoute, &o);
        assert_eq!(
            f.hostnames,
            ["a.example.org"],
            "a non-string hostname is dropped"
        );
        assert_eq!(f.parent_refs.len(), 1);
        assert_eq!(f.parent_refs[0].section_name.as_deref(), Some("https-a"));
        assert_eq!(f.our_status.len(), 1, "only our well-formed entries");
        assert_eq!(f.our_status[0].parent_ref.name, "gw2");
        assert_eq!(f.our_status[0].conditions[0].reason, "Accepted");
        assert_eq!(f.resource_version.as_deref(), Some("7"));
        let gws = gateways_of(&f);
        assert_eq!(
            gws.into_iter().collect::<Vec<_>>(),
            [
                ("tenant-a".to_string(), "gw2".to_string()),
                ("tenant-root".to_string(), "gw".to_string())
            ]
        );
    }

    #[test]
    fn index_moves_a_route_between_gateways_copy_on_write() {
        let idx = RouteIndex::default();
        let a = project(
            RouteKind::HttpRoute,
            &route("n", "r", serde_json::json!({"name": "gw1"}), Value::Null),
        );
        let touched = idx.apply(a.clone());
        assert_eq!(touched.len(), 1);
        let snapshot = idx.for_gateway("n", "gw1");
        assert_eq!(snapshot.len(), 1);
        // The same facts again touch nothing.
        assert!(idx.apply(a).is_empty());
        let b = project(
            RouteKind::HttpRoute,
            &route("n", "r", serde_json::json!({"name": "gw2"}), Value::Null),
        );
        let touched = idx.apply(b);
        assert_eq!(touched.len(), 2, "old and new Gateway");
        assert!(idx.for_gateway("n", "gw1").is_empty());
        assert_eq!(
            snapshot.len(),
            1,
            "a reader's snapshot is not changed under it"
        );
        assert_eq!(idx.for_gateway("n", "gw2").len(), 1);
        assert_eq!(idx.delete(RouteKind::HttpRoute, "n", "r").len(), 1);
        assert!(idx.is_empty());
    }

    #[test]
    fn relist_removes_routes_deleted_while_disconnected() {
        let idx = RouteIndex::default();
        for n in ["a", "b"] {
            idx.apply(project(
                RouteKind::HttpRoute,
                &route("n", n, serde_json::json!({"name": "gw"}), Value::Null),
            ));
        }
        idx.relist_started(RouteKind::HttpRoute);
        idx.apply(project(
            RouteKind::HttpRoute,
            &route("n", "a", serde_json::json!({"name": "gw"}), Value::Null),
        ));
        let touched = idx.relist_done(RouteKind::HttpRoute);
        assert_eq!(touched.len(), 1);
        assert_eq!(idx.len(), 1);
        assert_eq!(idx.for_gateway("n", "gw").len(), 1);
    }
}
