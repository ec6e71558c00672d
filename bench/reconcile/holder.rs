//! The caches of the shared watches, filled one object at a time the way the watch tasks
//! fill them.

use gateway_api::apis::experimental::gateways::Gateway;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use std::cell::RefCell;
use tenant_gateway::cluster::routes::{RouteIndex, WatchedRoute};
use tenant_gateway::cluster::watch::{FromWatch, ObjectCache, Watched};
use tenant_gateway::reconcile::api::TenantGateway;
use tenant_gateway::reconcile::certmanager::{Certificate, Issuer};
use tenant_gateway::reconcile::inputs::RouteKind;

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Namespace,
    HttpRoute,
    Certificate,
    Gateway,
    Issuer,
    TenantGateway,
}

pub struct Holder {
    namespaces: RefCell<Writer<PartialObjectMeta<Namespace>>>,
    routes: RouteIndex,
    certificates: ObjectCache<Certificate>,
    gateways: ObjectCache<Gateway>,
    issuers: ObjectCache<Issuer>,
    tgws: RefCell<Writer<TenantGateway>>,
}

impl Default for Holder {
    fn default() -> Self {
        Holder {
            namespaces: RefCell::new(reflector::store().1),
            routes: RouteIndex::default(),
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
                let mut ns: PartialObjectMeta<Namespace> =
                    serde_json::from_str(text).expect("a namespace");
                tenant_gateway::cluster::namespaces::strip(&mut ns);
                self.namespaces
                    .borrow_mut()
                    .apply_watcher_event(&Event::Apply(ns));
            }
            Kind::HttpRoute => {
                let w = watched::<WatchedRoute>(text);
                if let Some(r) = w.decoded("HTTPRoute") {
                    self.routes.apply(r.view.facts(RouteKind::HttpRoute));
                }
            }
            Kind::Certificate => {
                let w = watched::<Certificate>(text);
                self.certificates.apply(w.key(), w.decoded("Certificate"));
            }
            Kind::Gateway => {
                let w = watched::<Gateway>(text);
                self.gateways.apply(w.key(), w.decoded("Gateway"));
            }
            Kind::Issuer => {
                let w = watched::<Issuer>(text);
                self.issuers.apply(w.key(), w.decoded("Issuer"));
            }
            Kind::TenantGateway => {
                let mut t: TenantGateway = serde_json::from_str(text).expect("a TenantGateway");
                t.metadata.managed_fields = None;
                self.tgws.borrow_mut().apply_watcher_event(&Event::Apply(t));
            }
        }
    }
}
