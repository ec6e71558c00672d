//! Builders for the reconciler's tests (unit tests here, the golden drift test under
//! `tests/`), and [`converge`], which applies a plan's writes to the inputs the way the API
//! server would, so "feed the desired state back" is one call.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::api::{
    CertMode, Cloudflare, Dns01, Dns01Provider, IssuerName, LocalSecretRef, SecretKeyRef,
    TenantGatewaySpec,
};
use super::diff::{Object, Write};
use super::inputs::{
    Inputs, Observed, ParentRef, RouteFacts, RouteFactsParts, RouteKind, RouteParentStatus,
    TgwFacts,
};
use super::labels::NamespaceWrite;
use super::routes::{self, Analysis};
use super::{Options, Plan, labels};
use crate::cluster::nsmeta::NamespaceMeta;
use crate::platform::{ATTACHED_BY_ANNOTATION, GATEWAY_LABEL, HOST_LABEL, Scope};

/// A timestamp `secs` after the epoch.
pub fn at(secs: i64) -> Time {
    // In range for every value the tests use (jiff accepts ±~10^11 s).
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// A namespace with labels and annotations, as the namespace index keeps it.
pub fn namespace(
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Arc<NamespaceMeta> {
    Arc::new(NamespaceMeta::new(name, labels, annotations))
}

/// A tenant namespace with its apex, publishing through `gateway`.
pub fn tenant(name: &str, apex: &str, gateway: &str) -> Arc<NamespaceMeta> {
    namespace(name, &[(HOST_LABEL, apex), (GATEWAY_LABEL, gateway)], &[])
}

/// Append to one of [`RouteFacts`]'s lists (kept at their length, so not growable in place).
pub fn push<T>(list: &mut Box<[T]>, item: T) {
    let mut v = std::mem::take(list).into_vec();
    v.push(item);
    *list = v.into();
}

/// An HTTPRoute with one parentRef `{name: gw}` (all defaults).
pub fn route(ns: &str, name: &str, hostnames: &[&str]) -> RouteFacts {
    RouteFacts::from(RouteFactsParts {
        kind: RouteKind::HttpRoute,
        namespace: ns.into(),
        name: name.into(),
        creation: Some(at(500)),
        generation: Some(1),
        resource_version: Some("1".into()),
        hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
        parent_refs: [ParentRef {
            name: "gw".to_string(),
            ..ParentRef::default()
        }
        .into()]
        .into(),
        our_status: Box::default(),
        parents_layout: Some(Default::default()),
    })
}

/// An HTTPRoute from another namespace, pointing at `tenant-alice/gw`.
pub fn remote_route(ns: &str, name: &str, hostnames: &[&str]) -> RouteFacts {
    let mut r = route(ns, name, hostnames);
    r.parent_refs[0].namespace = Some("tenant-alice".to_string());
    r
}

/// A TLSRoute with one parentRef `{name: gw}`.
pub fn tls_route(ns: &str, name: &str, hostnames: &[&str]) -> RouteFacts {
    let mut r = route(ns, name, hostnames);
    r.kind = RouteKind::TlsRoute;
    r
}

/// The http01 spec of the test tenant.
pub fn http01_spec() -> TenantGatewaySpec {
    TenantGatewaySpec {
        apex: "alice.example.org".to_string(),
        cert_mode: CertMode::Http01,
        issuer_name: IssuerName::LetsencryptProd,
        dns01: None,
        wildcard_secret_ref: None,
        attached_namespaces: Vec::new(),
        tls_passthrough_services: vec!["api".to_string(), "vm-exportproxy".to_string()],
        gateway_class_name: "cilium".to_string(),
    }
}

/// dns01 with Cloudflare and the chart's default secret.
pub fn dns01_spec() -> TenantGatewaySpec {
    TenantGatewaySpec {
        cert_mode: CertMode::Dns01,
        dns01: Some(Dns01 {
            provider: Dns01Provider::Cloudflare,
            cloudflare: Some(Cloudflare {
                api_token_secret_ref: SecretKeyRef {
                    name: "cloudflare-api-token-secret".to_string(),
                    key: "api-token".to_string(),
                },
            }),
            route53: None,
            digitalocean: None,
            rfc2136: None,
        }),
        ..http01_spec()
    }
}

/// existingSecret with Secret `wildcard-tls`.
pub fn existing_secret_spec() -> TenantGatewaySpec {
    TenantGatewaySpec {
        cert_mode: CertMode::ExistingSecret,
        wildcard_secret_ref: Some(LocalSecretRef {
            name: "wildcard-tls".to_string(),
        }),
        ..http01_spec()
    }
}

/// TenantGateway `tenant-alice/gw` (http01), its namespace, an inheriting child
/// `tenant-alice-x` and an unrelated tenant; no routes, nothing observed.
pub fn world() -> Inputs {
    Inputs {
        tgw: TgwFacts {
            namespace: "tenant-alice".to_string(),
            name: "gw".to_string(),
            uid: "uid-gw".to_string(),
            generation: Some(1),
            creation: Some(at(100)),
            spec: http01_spec(),
            status: None,
        },
        siblings: Vec::new(),
        other_claims: Vec::new(),
        namespaces: vec![
            tenant("tenant-alice", "alice.example.org", "tenant-alice"),
            tenant("tenant-alice-x", "x.alice.example.org", "tenant-alice"),
            tenant("tenant-mallory", "mallory.example.org", "tenant-mallory"),
        ],
        routes: Vec::new(),
        observed: Observed::default(),
        now: at(10_000),
    }
}

/// The namespaces layer 1 admits, as `plan` computes them.
pub fn allowed(w: &Inputs) -> BTreeSet<String> {
    let settings = w
        .tgw
        .settings(&Scope::default())
        .expect("test spec is valid");
    let lp = labels::plan(w, &settings, &Scope::default());
    let mut allowed = BTreeSet::from([w.tgw.namespace.clone()]);
    allowed.extend(lp.held);
    allowed.extend(
        w.namespaces
            .iter()
            .filter(|n| n.gateway() == Some(w.tgw.namespace.as_str()))
            .map(|n| n.name().to_string()),
    );
    allowed
}

/// `routes::analyse` with nothing observed.
pub fn analyse(w: &Inputs) -> Analysis {
    let settings = w
        .tgw
        .settings(&Scope::default())
        .expect("test spec is valid");
    routes::analyse(
        w,
        &settings,
        &allowed(w),
        &BTreeSet::new(),
        &Scope::default(),
        ("tenant-alice", "gw-http-redirect"),
    )
}

/// Plan, apply and plan again under `opts` until nothing is written (at most a few rounds,
/// a minute apart); the settled inputs and their empty plan.
pub fn settle_with(mut w: Inputs, opts: &Options) -> (Inputs, Plan) {
    for _ in 0..4 {
        let p = super::plan(&w, opts);
        if p.writes.is_empty() {
            return (w, p);
        }
        w = converge(&w, &p);
        w.now = at(w.now.0.as_second() + 60);
    }
    let p = super::plan(&w, opts);
    assert!(p.writes.is_empty(), "no convergence: {:#?}", p.writes);
    (w, p)
}

/// The inputs after the API server has executed `plan.writes` (server fields added to the
/// objects, as a real server would).
pub fn converge(inputs: &Inputs, plan: &Plan) -> Inputs {
    let mut next = inputs.clone();
    fn upsert<T: Clone>(list: &mut Vec<T>, item: T, name_of: impl Fn(&T) -> Option<String>) {
        let name = name_of(&item);
        list.retain(|o| name_of(o) != name);
        list.push(item);
    }
    for w in &plan.writes {
        match w {
            Write::Apply(o) => {
                let stamp = |m: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                    m.uid = Some(format!("uid-{}", m.name.clone().unwrap_or_default()));
                    m.resource_version = Some("7".to_string());
                    m.generation = Some(1);
                };
                match o {
                    Object::Gateway(g) => {
                        let mut g = (**g).clone();
                        stamp(&mut g.metadata);
                        upsert(&mut next.observed.gateways, g, |x| x.metadata.name.clone());
                    }
                    Object::Issuer(i) => {
                        let mut i = (**i).clone();
                        stamp(&mut i.metadata);
                        upsert(&mut next.observed.issuers, i, |x| x.metadata.name.clone());
                    }
                    Object::Certificate(c) => {
                        let mut c = (**c).clone();
                        stamp(&mut c.metadata);
                        upsert(&mut next.observed.certificates, c, |x| {
                            x.metadata.name.clone()
                        });
                    }
                    Object::HttpRoute(r) => {
                        let mut r = (**r).clone();
                        stamp(&mut r.metadata);
                        upsert(&mut next.observed.http_routes, r, |x| {
                            x.metadata.name.clone()
                        });
                    }
                }
            }
            Write::Delete { kind, name, .. } => {
                let n = Some(name.clone());
                match kind {
                    super::diff::ObjectKind::Gateway => {
                        next.observed.gateways.retain(|o| o.metadata.name != n)
                    }
                    super::diff::ObjectKind::Issuer => {
                        next.observed.issuers.retain(|o| o.metadata.name != n)
                    }
                    super::diff::ObjectKind::Certificate => {
                        next.observed.certificates.retain(|o| o.metadata.name != n)
                    }
                    super::diff::ObjectKind::HttpRoute => {
                        next.observed.http_routes.retain(|o| o.metadata.name != n)
                    }
                }
            }
            Write::Namespace(nw) => {
                if let Some(ns) = next
                    .namespaces
                    .iter_mut()
                    .find(|n| n.name() == nw.namespace())
                {
                    let mut labels = ns.labels();
                    let attached_by = match nw {
                        NamespaceWrite::Attach { gateway, .. } => {
                            labels.insert(GATEWAY_LABEL.to_string(), gateway.clone());
                            Some((ATTACHED_BY_ANNOTATION, gateway.as_str()))
                        }
                        NamespaceWrite::Detach { gateway, .. } => {
                            if labels.get(GATEWAY_LABEL) == Some(gateway) {
                                labels.remove(GATEWAY_LABEL);
                            }
                            None
                        }
                    };
                    let labels: Vec<(&str, &str)> = labels
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    *ns = namespace(ns.name(), &labels, attached_by.as_slice());
                }
            }
            Write::RouteStatus(rs) => {
                for r in next.routes.iter_mut().filter(|r| {
                    r.kind == rs.kind && *r.namespace == *rs.namespace && *r.name() == *rs.name
                }) {
                    let ns = r.namespace.clone();
                    let mut entries = std::mem::take(&mut r.our_status).into_vec();
                    entries.retain(|e| {
                        !e.parent_ref
                            .targets(&ns, &rs.gateway_namespace, &rs.gateway_name)
                    });
                    entries.extend(rs.entries.iter().cloned());
                    r.our_status = entries.into();
                }
            }
            Write::Status(s) => next.tgw.status = Some(s.clone()),
        }
    }
    next
}

/// Report the Gateway and every Certificate as ready, the way Cilium and cert-manager would.
pub fn make_ready(inputs: &mut Inputs) {
    use gateway_api::apis::experimental::gateways::{GatewayStatus, GatewayStatusListeners};
    let ok = |t: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: t.to_string(),
        status: "True".to_string(),
        reason: t.to_string(),
        message: String::new(),
        observed_generation: Some(1),
        last_transition_time: at(1),
    };
    for g in &mut inputs.observed.gateways {
        let listeners = g
            .spec
            .listeners
            .iter()
            .map(|l| GatewayStatusListeners {
                name: l.name.clone(),
                attached_routes: 0,
                conditions: vec![ok("Accepted"), ok("Programmed")],
                supported_kinds: None,
            })
            .collect();
        g.status = Some(GatewayStatus {
            conditions: Some(vec![ok("Accepted"), ok("Programmed")]),
            listeners: Some(listeners),
            ..GatewayStatus::default()
        });
    }
    for c in &mut inputs.observed.certificates {
        c.status = Some(super::certmanager::CertificateStatus {
            conditions: vec![super::certmanager::CertManagerCondition {
                type_: "Ready".to_string(),
                status: "True".to_string(),
                reason: Some("Ready".to_string()),
                message: None,
            }],
        });
    }
}

/// A small deterministic generator for the property tests (no dependency, reproducible).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// splitmix64.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }

    pub fn pick<'a>(&mut self, items: &'a [&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// The inputs with every list shuffled.
pub fn shuffled(inputs: &Inputs, rng: &mut Rng) -> Inputs {
    let mut s = inputs.clone();
    rng.shuffle(&mut s.namespaces);
    rng.shuffle(&mut s.routes);
    rng.shuffle(&mut s.other_claims);
    rng.shuffle(&mut s.siblings);
    rng.shuffle(&mut s.observed.gateways);
    rng.shuffle(&mut s.observed.issuers);
    rng.shuffle(&mut s.observed.certificates);
    rng.shuffle(&mut s.observed.http_routes);
    for r in &mut s.routes {
        let mut hostnames: Vec<&str> = r.hostnames().collect();
        rng.shuffle(&mut hostnames);
        let hostnames: Vec<String> = hostnames.into_iter().map(str::to_string).collect();
        r.set_hostnames(&hostnames);
        rng.shuffle(&mut r.our_status);
    }
    s
}

/// A world with routes exercising every rule: the apex, a direct child, a deep child from an
/// inheriting namespace, a wildcard, an out-of-apex hostname, a conflict with cozy-*, a
/// TLSRoute, an HTTPRoute on a passthrough hostname and a port-80 route.
pub fn busy_world(spec: TenantGatewaySpec) -> Inputs {
    let mut w = world();
    w.tgw.spec = TenantGatewaySpec {
        attached_namespaces: vec!["cozy-harbor".to_string(), "cozy-monitoring".to_string()],
        ..spec
    };
    w.namespaces.push(namespace("cozy-harbor", &[], &[]));
    w.namespaces.push(tenant(
        "tenant-alice-bob",
        "bob.alice.example.org",
        "tenant-alice",
    ));
    w.namespaces
        .push(tenant("tenant-alice-ext", "customer1.io", "tenant-alice"));
    w.routes = vec![
        route(
            "tenant-alice",
            "site",
            &["alice.example.org", "www.alice.example.org"],
        ),
        route("tenant-alice", "harbor", &["harbor.alice.example.org"]),
        remote_route(
            "cozy-harbor",
            "harbor",
            &["harbor.alice.example.org", "registry.alice.example.org"],
        ),
        remote_route("tenant-alice-bob", "app", &["harbor.bob.alice.example.org"]),
        remote_route(
            "tenant-alice-x",
            "wild",
            &[
                "*.x.alice.example.org",
                "shop.bob.example.org",
                "ok.x.alice.example.org",
            ],
        ),
        tls_route("tenant-alice", "kube-api", &["api.alice.example.org"]),
        // Claims a passthrough hostname: in http01 the declaration wins (SPEC §3.10).
        route("tenant-alice", "api-web", &["api.alice.example.org"]),
        {
            let mut r = route("tenant-alice", "plain", &["plain.alice.example.org"]);
            r.parent_refs[0].section_name = Some("http".to_string());
            r
        },
    ];
    w
}

/// The golden cases: file stem and inputs.
pub fn golden_cases() -> Vec<(&'static str, Inputs, Options)> {
    vec![
        ("http01", busy_world(http01_spec()), Options::default()),
        ("dns01", busy_world(dns01_spec()), Options::default()),
        (
            "existing-secret",
            busy_world(existing_secret_spec()),
            Options::default(),
        ),
        (
            "http01-uniform-port-kinds",
            busy_world(http01_spec()),
            Options {
                uniform_port_kinds: true,
                ..Options::default()
            },
        ),
        // SPEC §3.10's layouts: `separate` moves a dns01/existingSecret TenantGateway's
        // passthrough listeners to `<name>-passthrough`; an http01 one keeps one Gateway.
        ("http01-separate", busy_world(http01_spec()), separate()),
        ("dns01-separate", busy_world(dns01_spec()), separate()),
        (
            "existing-secret-separate",
            busy_world(existing_secret_spec()),
            separate(),
        ),
    ]
}

fn separate() -> Options {
    Options {
        passthrough_gateway: crate::platform::PassthroughGateway::Separate,
        ..Options::default()
    }
}

/// The rendered objects of a plan as multi-document YAML, in apply order.
pub fn golden_yaml(plan: &Plan) -> Result<String, serde_saphyr::SerializeError> {
    let Some(d) = &plan.desired else {
        return Ok(String::new());
    };
    let mut docs = Vec::new();
    if let Some(i) = &d.issuer {
        docs.push(crate::yaml::to_document(i)?);
    }
    for c in &d.certificates {
        docs.push(crate::yaml::to_document(c)?);
    }
    docs.push(crate::yaml::to_document(&d.gateway)?);
    if let Some(g) = &d.passthrough_gateway {
        docs.push(crate::yaml::to_document(g)?);
    }
    docs.push(crate::yaml::to_document(&d.redirect)?);
    let mut out = String::from(
        "# Generated by the reconciler's golden test (tests/reconcile_golden.rs); do not edit.\n",
    );
    for doc in docs {
        out.push_str("---\n");
        out.push_str(&doc);
    }
    Ok(out)
}

/// Our route entries, for assertions.
pub fn entries<'a>(inputs: &'a Inputs, ns: &str, name: &str) -> &'a [RouteParentStatus] {
    inputs
        .routes
        .iter()
        .find(|r| &*r.namespace == ns && r.name() == name)
        .map(|r| &*r.our_status)
        .unwrap_or(&[])
}
