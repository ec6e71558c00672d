//! The caches of the shared watches, filled one object at a time the way the watch tasks
//! fill them.

use gateway_api::apis::experimental::gateways::Gateway;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use std::cell::RefCell;
use tenant_gateway::cluster::kept::{Kept, ObjectCache};
use tenant_gateway::cluster::nsmeta::{NamespaceMeta, NamespaceStore};
use tenant_gateway::cluster::route_facts::{RouteFacts, RouteKind};
use tenant_gateway::cluster::routes::{RouteIndex, WatchedRoute};
use tenant_gateway::cluster::watch::{FromWatch, Watched};
use tenant_gateway::reconcile::api::TenantGateway;
use tenant_gateway::reconcile::certmanager::{Certificate, Issuer};

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Namespace,
    HttpRoute,
    /// HTTPRoute facts in a Vec, without the index.
    RouteFacts,
    Certificate,
    Gateway,
    Issuer,
    TenantGateway,
}

pub struct Holder {
    namespaces: NamespaceStore,
    routes: RouteIndex,
    /// The facts alone, to tell the index's own overhead.
    facts: RefCell<Vec<RouteFacts>>,
    certificates: ObjectCache<Kept<Certificate>>,
    gateways: ObjectCache<Kept<Gateway>>,
    issuers: ObjectCache<Kept<Issuer>>,
    tgws: RefCell<Writer<TenantGateway>>,
}

impl Default for Holder {
    fn default() -> Self {
        Holder {
            namespaces: NamespaceStore::default(),
            routes: RouteIndex::default(),
            facts: RefCell::new(Vec::new()),
            certificates: ObjectCache::default(),
            gateways: ObjectCache::default(),
            issuers: ObjectCache::default(),
            tgws: RefCell::new(reflector::store().1),
        }
    }
}

/// A watched object as the watch decodes it.
fn watched<T: FromWatch>(text: &str) -> Watched<T> {
    serde_json::from_str(text).expect("an object")
}

impl Holder {
    pub fn take(&self, kind: Kind, text: &str) {
        match kind {
            Kind::Namespace => {
                let ns: PartialObjectMeta<Namespace> =
                    serde_json::from_str(text).expect("a namespace");
                self.namespaces
                    .apply(NamespaceMeta::from_meta(&ns.metadata));
            }
            Kind::HttpRoute => {
                let w = watched::<WatchedRoute>(text);
                if let Some(r) = w.decoded("HTTPRoute") {
                    self.routes.apply(r.view.facts(RouteKind::HttpRoute));
                }
            }
            Kind::RouteFacts => {
                let w = watched::<WatchedRoute>(text);
                if let Some(r) = w.decoded("HTTPRoute") {
                    self.facts
                        .borrow_mut()
                        .push(r.view.facts(RouteKind::HttpRoute));
                }
            }
            Kind::Certificate => {
                let w = watched::<Certificate>(text);
                self.certificates
                    .apply(w.key(), w.decoded("Certificate").and_then(Kept::keep));
            }
            Kind::Gateway => {
                let w = watched::<Gateway>(text);
                self.gateways
                    .apply(w.key(), w.decoded("Gateway").and_then(Kept::keep));
            }
            Kind::Issuer => {
                let w = watched::<Issuer>(text);
                self.issuers
                    .apply(w.key(), w.decoded("Issuer").and_then(Kept::keep));
            }
            Kind::TenantGateway => {
                let mut t: TenantGateway = serde_json::from_str(text).expect("a TenantGateway");
                tenant_gateway::reconcile::context::trim_tenant_gateway(&mut t);
                self.tgws.borrow_mut().apply_watcher_event(&Event::Apply(t));
            }
        }
    }
}
