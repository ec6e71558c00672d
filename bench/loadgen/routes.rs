//! `--routes N`: a route index shaped like a platform's, for the admission warnings of SPEC
//! §3.4 to run against (issue 11: "the route index holding 20,000 routes and the §3.4 warnings
//! on").
//!
//! Every route is built as the API server would hold it (spec and our `status.parents`
//! entry) and goes through `cluster::routes::project`, the projection the reconciler's watch
//! feeds the index with, so the handler sees the same facts as in `serve`.
//!
//! The layout, for N routes over the tenants of the namespace snapshot:
//! - a quarter on the root Gateway `tenant-root/tenant-root` (tenants publishing through it,
//!   two hostnames under their apex each; every 20th also names one of 100 shared
//!   `shared-J.example.org` hostnames, so those are in conflict between tenants), plus
//!   `cozy-dashboard` publishing `dashboard.example.org` and `grafana.alice.example.org`;
//! - the rest on per-tenant Gateways `tenant-X/tenant-X`, round-robin over the tenants.
//!
//! The benchmark's review (`tenant-alice/storefront`, seven hostnames on the root Gateway)
//! therefore gets a HostnameConflict warning (`grafana.alice.example.org`, which
//! `cozy-dashboard` wins) and a ListenerBudget one (the root Gateway's hostnames are far past
//! 64 listeners, as http01 counts them): the warning path runs in full on every request.

use kube::api::DynamicObject;
use serde_json::{Value, json};
use tenant_gateway::cluster::route_facts::{RouteFacts, RouteKind};
use tenant_gateway::cluster::routes::{RouteIndex, project};
use tenant_gateway::platform::CONTROLLER_NAME;
use tenant_gateway::policy::GATEWAY_LABEL;

use crate::payload::{self, Ns};

pub const ROOT_GATEWAY: &str = "tenant-root";

/// What was indexed, for the report.
pub struct Layout {
    pub index: RouteIndex,
    pub total: usize,
    pub on_root: usize,
    pub tenant_gateways: usize,
    /// The tenant (namespace, apex) whose route [`Churn`] changes.
    pub churn: Option<(String, String)>,
}

impl Layout {
    pub fn describe(&self) -> String {
        format!(
            "route index: {} routes; {} on {ROOT_GATEWAY}/{ROOT_GATEWAY}, {} on {} per-tenant Gateways",
            self.total,
            self.on_root,
            self.total - self.on_root,
            self.tenant_gateways
        )
    }
}

/// An HTTPRoute in `ns` on Gateway `gw_ns/gw_ns` (sectionName `https`), published there.
fn http_route(ns: &str, name: &str, gw_ns: &str, hostnames: &[String]) -> Value {
    let parent = json!({
        "group": "gateway.networking.k8s.io", "kind": "Gateway",
        "name": gw_ns, "namespace": gw_ns, "sectionName": "https"
    });
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns, "generation": 1, "resourceVersion": "1"},
        "spec": {
            "parentRefs": [parent],
            "hostnames": hostnames,
            "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]
        },
        "status": {"parents": [{
            "controllerName": CONTROLLER_NAME,
            "parentRef": parent,
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                            "lastTransitionTime": "2026-05-01T09:12:44Z", "message": ""}]
        }]}
    })
}

fn project_one(v: Value) -> RouteFacts {
    let o: DynamicObject = serde_json::from_value(v).expect("a generated route is an object");
    project(RouteKind::HttpRoute, &o)
}

fn apply(index: &RouteIndex, v: Value) {
    index.apply(project_one(v));
}

/// One route of a tenant on the root Gateway, changed again and again (`--churn`): each
/// change gives it another hostname, so the Gateway's routes change as when a tenant edits
/// a route, and what is derived from them has to follow. The versions are projected up
/// front: a change costs the index's update and what follows it, not building the route.
pub struct Churn {
    index: std::sync::Arc<RouteIndex>,
    versions: Vec<RouteFacts>,
}

impl Churn {
    pub fn new(index: std::sync::Arc<RouteIndex>, (namespace, apex): (String, String)) -> Churn {
        let versions = (0..64)
            .map(|k| {
                let host = vec![format!("churn-{k}.{apex}")];
                project_one(http_route(&namespace, "churn", ROOT_GATEWAY, &host))
            })
            .collect();
        Churn { index, versions }
    }

    /// The `k`th change: route `churn` names another hostname than before.
    pub fn change(&self, k: u64) {
        let at = usize::try_from(k % self.versions.len() as u64).unwrap_or_default();
        self.index.apply(self.versions[at].clone());
    }
}

/// `total` routes over the tenants of `namespaces` (those with the gateway label).
pub fn layout(total: usize, namespaces: &[Ns]) -> Layout {
    let index = RouteIndex::default();
    let tenants: Vec<(&str, String)> = namespaces
        .iter()
        .filter(|n| n.labels.contains_key(GATEWAY_LABEL) && n.name != ROOT_GATEWAY)
        .map(|n| {
            let apex = n
                .labels
                .get(tenant_gateway::policy::HOST_LABEL)
                .cloned()
                .unwrap_or_else(|| format!("{}.{}", n.name, payload::ROOT_HOST));
            (n.name.as_str(), apex)
        })
        .collect();
    if total == 0 || tenants.is_empty() {
        return Layout {
            index,
            total: 0,
            on_root: 0,
            tenant_gateways: 0,
            churn: None,
        };
    }
    let system = [
        format!("dashboard.{}", payload::ROOT_HOST),
        format!("grafana.{}", payload::TENANT_APEX),
    ];
    apply(
        &index,
        http_route("cozy-dashboard", "dashboard", ROOT_GATEWAY, &system),
    );
    let on_root = (total / 4).max(1);
    for k in 1..on_root {
        let (ns, apex) = &tenants[k % tenants.len()];
        let mut hosts = vec![format!("pub{k}.{apex}"), format!("www{k}.{apex}")];
        if k % 20 == 0 {
            hosts.push(format!("shared-{}.{}", (k / 20) % 100, payload::ROOT_HOST));
        }
        apply(
            &index,
            http_route(ns, &format!("pub-{k}"), ROOT_GATEWAY, &hosts),
        );
    }
    let mut gateways = std::collections::BTreeSet::new();
    for k in 0..total - on_root {
        let (ns, apex) = &tenants[k % tenants.len()];
        gateways.insert(*ns);
        apply(
            &index,
            http_route(ns, &format!("app-{k}"), ns, &[format!("app{k}.{apex}")]),
        );
    }
    Layout {
        total: index.len(),
        index,
        on_root,
        tenant_gateways: gateways.len(),
        churn: Some((tenants[0].0.to_string(), tenants[0].1.clone())),
    }
}

/// The warnings in an answer body (`response.warnings`), for the report.
pub fn warnings_in(body: &[u8]) -> Vec<String> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| {
            v["response"]["warnings"].as_array().map(|w| {
                w.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default()
}
