//! Tier 3 for issue 22 item 1 (SPEC §3.8, §3.7 "Owned =", "Exactly the desired state"): a
//! platform switching from its own Go TenantGateway controller to this one, on a real
//! kube-apiserver from the tests/k8s harness.
//!
//! The world is built exactly as the platform controller leaves it, in every mode (http01
//! with an attached platform namespace, an inheriting child tenant, a passthrough service and
//! the terminate listener and Certificate it gives a TLSRoute's hostname; dns01 with a child
//! apex; existingSecret): its objects created and updated with
//! plain creates and patches under field manager `cozystack-controller`, its names, labels,
//! selectors and namespace annotation, the TenantGateway's controller ownerReference, issued
//! Secrets, Gateway status as Cilium writes it, Certificate status as cert-manager does,
//! route status entries under the shared controllerName (and one of Cilium's), a label a
//! third party put on a Gateway. Then the reconciler starts (as `serve` starts it) and the
//! test checks every bullet of §3.8: names and Secrets kept (uids), nothing of the old
//! manager left in spec, labels or managedFields, marks replaced, one entry per parentRef,
//! zero writes from a restarted replica (resourceVersions), a new route's listener, an
//! adopted Certificate garbage-collected with its hostname; and that a same-named object
//! owned by another controller, or by nobody, is still refused and untouched.
//!
//! Set TENANT_GATEWAY_SKIP_E2E=1 to skip (said loudly).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::control_plane::*;
use support::poll::poll;
use support::replica;

use tenant_gateway::metrics::Metrics;
use tenant_gateway::platform::CONTROLLER_NAME;

const WAIT: Duration = Duration::from_secs(90);
/// The platform controller's field manager.
const PLATFORM: &str = "cozystack-controller";
const PLATFORM_MARK: &str = "cozystack.io/gateway-attached-by";
const OUR_MARK: &str = "gateway.cozystack.io/attached-by";
const GATEWAY_LABEL: &str = "namespace.cozystack.io/gateway";
const HOST_LABEL: &str = "namespace.cozystack.io/host";
const PLATFORM_LABELS: [&str; 4] = [
    "cozystack.io/gateway",
    "cozystack.io/managed-by",
    "cozystack.io/tenantgateway",
    "cozystack.io/per-listener-cert",
];
const CILIUM: &str = "io.cilium/gateway-controller";
const LEASE: &str = "tenant-gateway-migration";

struct Cluster<'a> {
    cp: &'a ControlPlane,
}

impl Cluster<'_> {
    /// A plain create under `manager` (an Update operation in managedFields); the object as
    /// created.
    fn create(&self, manager: &str, obj: &Value) -> Value {
        let o = self.cp.kubectl_ok(
            &[
                "create",
                "-f",
                "-",
                "-o",
                "json",
                &format!("--field-manager={manager}"),
            ],
            Some(&obj.to_string()),
        );
        serde_json::from_str(&o.stdout).expect("kubectl prints JSON")
    }

    /// A merge patch under `manager`, of the object or (`status`) its status subresource.
    fn patch(
        &self,
        manager: &str,
        kind: &str,
        ns: Option<&str>,
        name: &str,
        p: &Value,
        status: bool,
    ) {
        let mut args = vec!["patch", kind, name, "--type=merge"];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        if status {
            args.push("--subresource=status");
        }
        let fm = format!("--field-manager={manager}");
        let body = p.to_string();
        args.extend([fm.as_str(), "-p", body.as_str()]);
        self.cp.kubectl_ok(&args, None);
    }

    fn get(&self, kind: &str, ns: &str, name: &str) -> Option<Value> {
        self.cp.get_json(kind, ns, name)
    }

    fn get_cluster(&self, kind: &str, name: &str) -> Value {
        let o = self.cp.kubectl_ok(
            &["get", kind, name, "-o", "json", "--show-managed-fields"],
            None,
        );
        serde_json::from_str(&o.stdout).expect("kubectl prints JSON")
    }

    /// The object with its managedFields.
    fn get_full(&self, kind: &str, ns: &str, name: &str) -> Option<Value> {
        let o = self.cp.kubectl(
            &[
                "get",
                kind,
                "-n",
                ns,
                name,
                "-o",
                "json",
                "--show-managed-fields",
            ],
            None,
        );
        o.allowed
            .then(|| serde_json::from_str(&o.stdout).expect("kubectl prints JSON"))
    }

    fn list(&self, kind: &str, ns: &str) -> Vec<Value> {
        let o = self
            .cp
            .kubectl_ok(&["get", kind, "-n", ns, "-o", "json"], None);
        let v: Value = serde_json::from_str(&o.stdout).expect("kubectl prints JSON");
        v["items"].as_array().cloned().unwrap_or_default()
    }

    fn wait<T>(&self, what: &str, f: impl FnMut() -> Option<T>) -> T {
        poll(WAIT, what, f)
    }
}

fn h8(host: &str) -> String {
    let d = Sha256::digest(host.to_ascii_lowercase().as_bytes());
    d.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// The platform's http01 names: `<first label>-<h8>`.
fn stem(host: &str) -> String {
    format!("{}-{}", host.split('.').next().unwrap_or(host), h8(host))
}

fn rv(o: &Value) -> String {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn uid(o: &Value) -> String {
    o["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn labels(o: &Value) -> BTreeMap<String, String> {
    o["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// One tenant's TenantGateway and what the platform controller rendered for it.
struct Tenant {
    ns: &'static str,
    apex: &'static str,
    spec: Value,
    /// Gateway listeners as the platform renders them.
    listeners: Vec<Value>,
    /// (name, dnsNames, labels) of its Certificates.
    certificates: Vec<(String, Vec<String>, Value)>,
    /// Secrets present (issued, or the wildcard one).
    secrets: Vec<String>,
    issuer_solver: Option<Value>,
    /// (namespace, name, hostname) of the tenants' routes.
    routes: Vec<(&'static str, &'static str, String)>,
    /// (name, hostname) of a TLSRoute the platform controller gave a terminate listener and
    /// a Certificate; this controller renders neither (SPEC §3.3), so both go.
    tls_route: Option<(&'static str, String)>,
}

impl Tenant {
    /// (listener, Certificate) of the TLSRoute's hostname, which do not survive the switch.
    fn dropped(&self) -> Option<(String, String)> {
        self.tls_route
            .as_ref()
            .map(|(_, h)| (format!("https-{}", stem(h)), format!("gw-{}-tls", stem(h))))
    }
}

fn port443_allowed(ns: &str) -> Value {
    json!({"namespaces": {"from": "Selector", "selector": {"matchLabels": {GATEWAY_LABEL: ns}}},
           "kinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"},
                     {"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}]})
}

fn http_listener(ns: &str) -> Value {
    json!({"name": "http", "port": 80, "protocol": "HTTP",
           "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {"matchExpressions": [
               {"key": "kubernetes.io/metadata.name", "operator": "In",
                "values": [ns, "cozy-cert-manager"]}]}}}})
}

fn https_listener(ns: &str, name: &str, host: &str, secret: &str) -> Value {
    json!({"name": name, "port": 443, "protocol": "HTTPS", "hostname": host,
           "tls": {"mode": "Terminate", "certificateRefs": [{"name": secret}]},
           "allowedRoutes": port443_allowed(ns)})
}

fn wildcard_tenant(
    ns: &'static str,
    apex: &'static str,
    spec: Value,
    secret: &str,
    children: &[&str],
) -> Tenant {
    let mut listeners = vec![
        http_listener(ns),
        https_listener(ns, "https", &format!("*.{apex}"), secret),
        https_listener(ns, "https-apex", apex, secret),
    ];
    for c in children {
        listeners.push(https_listener(
            ns,
            &format!("https-child-{}", stem(c)),
            &format!("*.{c}"),
            secret,
        ));
    }
    Tenant {
        ns,
        apex,
        spec,
        listeners,
        certificates: Vec::new(),
        secrets: vec![secret.to_string()],
        issuer_solver: None,
        routes: vec![(ns, "app", format!("app.{apex}"))],
        tls_route: None,
    }
}

fn tenants() -> Vec<Tenant> {
    let h = "tenant-migh";
    let apex = "migh.example.org";
    let routes = vec![
        (h, "harbor", format!("harbor.{apex}")),
        (h, "docs", format!("docs.{apex}")),
        ("cozy-mig", "dash", format!("dash.{apex}")),
        ("tenant-migh-kid", "foo", format!("foo.kid.{apex}")),
    ];
    let tls_route = ("db", format!("db.{apex}"));
    let mut hosts: Vec<String> = routes.iter().map(|r| r.2.clone()).collect();
    hosts.push(tls_route.1.clone());
    hosts.sort();
    let mut listeners = vec![http_listener(h)];
    let mut certificates = Vec::new();
    for host in &hosts {
        let cert = format!("gw-{}-tls", stem(host));
        listeners.push(https_listener(
            h,
            &format!("https-{}", stem(host)),
            host,
            &cert,
        ));
        certificates.push((
            cert,
            vec![host.clone()],
            json!({"cozystack.io/managed-by": PLATFORM, "cozystack.io/tenantgateway": "gw",
                   "cozystack.io/per-listener-cert": "true"}),
        ));
    }
    listeners.push(json!({"name": "tls-api", "port": 443, "protocol": "TLS",
        "hostname": format!("api.{apex}"), "tls": {"mode": "Passthrough"},
        "allowedRoutes": port443_allowed(h)}));
    let http01 = Tenant {
        ns: h,
        apex,
        spec: json!({"apex": apex, "attachedNamespaces": ["cozy-mig"],
                     "tlsPassthroughServices": ["api"]}),
        listeners,
        secrets: certificates.iter().map(|c| c.0.clone()).collect(),
        certificates,
        issuer_solver: Some(json!({"http01": {"gatewayHTTPRoute": {"parentRefs": [
            {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw",
             "namespace": h, "sectionName": "http"}]}}})),
        routes,
        tls_route: Some(tls_route),
    };
    let d = "tenant-migd";
    let mut dns01 = wildcard_tenant(
        d,
        "migd.example.org",
        json!({"apex": "migd.example.org", "certMode": "dns01",
               "dns01": {"provider": "cloudflare",
                         "cloudflare": {"apiTokenSecretRef": {"name": "cf", "key": "token"}}}}),
        "gw-gateway-tls",
        &["kid.migd.example.org"],
    );
    dns01.certificates.push((
        "gw-gateway-tls".into(),
        [
            "migd.example.org",
            "*.migd.example.org",
            "kid.migd.example.org",
            "*.kid.migd.example.org",
        ]
        .map(String::from)
        .to_vec(),
        json!({"cozystack.io/managed-by": PLATFORM}),
    ));
    dns01.issuer_solver = Some(json!({"dns01": {"cloudflare": {
        "apiTokenSecretRef": {"name": "cf", "key": "token"}}}}));
    let existing = wildcard_tenant(
        "tenant-mige",
        "mige.example.org",
        json!({"apex": "mige.example.org", "certMode": "existingSecret",
               "wildcardSecretRef": {"name": "wild"}}),
        "wild",
        &[],
    );
    vec![http01, dns01, existing]
}

fn namespace(c: &Cluster, name: &str, labels: Value) {
    c.create(
        "helm",
        &json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels}}),
    );
}

fn meta(ns: &str, name: &str, labels: Value, owner: &Value) -> Value {
    json!({"name": name, "namespace": ns, "labels": labels, "ownerReferences": [owner]})
}

fn condition(t: &str, generation: i64) -> Value {
    json!({"type": t, "status": "True", "reason": t, "message": "",
           "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// Cilium's part: Accepted+Programmed on the Gateway and every listener, at its generation.
fn program_gateway(c: &Cluster, ns: &str) {
    let gw = c.get("gateway", ns, "gw").expect("gateway exists");
    let generation = gw["metadata"]["generation"].as_i64().unwrap_or(1);
    let listeners: Vec<Value> = gw["spec"]["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| {
            json!({"name": l["name"], "attachedRoutes": 1,
                   "supportedKinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
                   "conditions": [condition("Accepted", generation), condition("Programmed", generation),
                                  condition("ResolvedRefs", generation)]})
        })
        .collect();
    c.patch(
        "cilium-operator-generic",
        "gateway",
        Some(ns),
        "gw",
        &json!({"status": {"conditions": [condition("Accepted", generation),
                                          condition("Programmed", generation)],
                           "listeners": listeners}}),
        true,
    );
}

/// The world the platform controller leaves for `t`; returns the TenantGateway's uid.
fn build_platform_world(c: &Cluster, t: &Tenant) -> String {
    let tgw = c.create(
        "helm",
        &json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
                "metadata": {"name": "gw", "namespace": t.ns}, "spec": t.spec}),
    );
    let tgw_uid = uid(&tgw);
    let owner = json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
        "name": "gw", "uid": tgw_uid, "controller": true, "blockOwnerDeletion": true});
    // ensureNamespaceLabels: its own namespace and each attachedNamespaces entry.
    let mut marked = vec![t.ns];
    marked.extend(
        t.spec["attachedNamespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str),
    );
    for ns in marked {
        c.patch(
            PLATFORM,
            "namespace",
            None,
            ns,
            &json!({"metadata": {"labels": {GATEWAY_LABEL: t.ns},
                                 "annotations": {PLATFORM_MARK: t.ns}}}),
            false,
        );
    }
    for (ns, name, host) in &t.routes {
        c.create(
            "helm",
            &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"parentRefs": [{"name": "gw", "namespace": t.ns}], "hostnames": [host],
                         "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
        );
    }
    if let Some((name, host)) = &t.tls_route {
        c.create(
            "helm",
            &json!({"apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TLSRoute",
                "metadata": {"name": name, "namespace": t.ns},
                "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [host],
                         "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}]}}),
        );
    }
    c.create(
        PLATFORM,
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": meta(t.ns, "gw", json!({"cozystack.io/gateway": t.ns,
                "cozystack.io/managed-by": PLATFORM}), &owner),
            "spec": {"gatewayClassName": "cilium", "listeners": t.listeners}}),
    );
    // A label someone else put on the Gateway: not ours to remove.
    c.patch(
        "kubectl-label",
        "gateway",
        Some(t.ns),
        "gw",
        &json!({"metadata": {"labels": {"example.com/team": "web"}}}),
        false,
    );
    if let Some(solver) = &t.issuer_solver {
        c.create(
            PLATFORM,
            &json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
                "metadata": meta(t.ns, "gw-gateway", json!({"cozystack.io/managed-by": PLATFORM}), &owner),
                "spec": {"acme": {"server": "https://acme-v02.api.letsencrypt.org/directory",
                    "privateKeySecretRef": {"name": "gw-acme-account"}, "solvers": [solver]}}}),
        );
    }
    for (name, dns, labels) in &t.certificates {
        c.create(
            PLATFORM,
            &json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                "metadata": meta(t.ns, name, labels.clone(), &owner),
                "spec": {"secretName": name, "dnsNames": dns,
                         "issuerRef": {"kind": "Issuer", "name": "gw-gateway"}}}),
        );
        c.patch(
            "cert-manager-certificates-readiness",
            "certificate",
            Some(t.ns),
            name,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True",
                "reason": "Ready", "message": "Certificate is up to date and has not expired",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
                "notAfter": "2027-01-01T00:00:00Z"}}),
            true,
        );
    }
    for name in &t.secrets {
        c.create(
            "cert-manager-certificates-issuing",
            &json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": name, "namespace": t.ns,
                             "annotations": {"cert-manager.io/issuer-name": "gw-gateway"}},
                "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}}),
        );
    }
    c.create(
        PLATFORM,
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": meta(t.ns, "gw-http-redirect", json!({"cozystack.io/managed-by": PLATFORM,
                "cozystack.io/tenantgateway": "gw"}), &owner),
            "spec": {"parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                     "name": "gw", "sectionName": "http"}],
                     "rules": [{"filters": [{"type": "RequestRedirect",
                         "requestRedirect": {"scheme": "https", "statusCode": 301}}]}]}}),
    );
    program_gateway(c, t.ns);
    // Route status (http01 only: in the wildcard modes it claims no hostnames and writes
    // none): one entry per parentRef under the shared controllerName; Cilium's too on the
    // first route.
    let http01 = t.spec.get("certMode").is_none();
    for (i, (ns, name, _)) in t.routes.iter().enumerate().filter(|_| http01) {
        let route = c.get("httproute", ns, name).expect("route");
        let parent = route["spec"]["parentRefs"][0].clone();
        let mut parents = vec![
            json!({"controllerName": CONTROLLER_NAME, "parentRef": parent,
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                "message": format!("Route attached to TenantGateway {}/gw", t.ns),
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        ];
        if i == 0 {
            parents.insert(
                0,
                json!({"controllerName": CILIUM, "parentRef": parent,
                "conditions": [condition("Accepted", 1)]}),
            );
        }
        c.patch(
            PLATFORM,
            "httproute",
            Some(ns),
            name,
            &json!({"status": {"parents": parents}}),
            true,
        );
    }
    let listeners: Vec<Value> = t
        .listeners
        .iter()
        .map(|l| {
            let mut s = json!({"name": l["name"], "ready": true});
            if let Some(h) = l["hostname"].as_str() {
                s["hostname"] = json!(h);
            }
            if let Some(cert) = l["tls"]["certificateRefs"][0]["name"].as_str() {
                s["certificateName"] = json!(cert);
            }
            s
        })
        .collect();
    c.patch(
        PLATFORM,
        "tenantgateway",
        Some(t.ns),
        "gw",
        &json!({"status": {"observedGeneration": 1, "listeners": listeners,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled",
                "message": format!("Gateway {}/gw programmed with {} listeners", t.ns, t.listeners.len()),
                "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
        true,
    );
    tgw_uid
}

/// hostname → (listener name, certificateRef) of a Gateway's HTTPS listeners.
fn https_names(gw: &Value) -> BTreeMap<String, (String, String)> {
    gw["spec"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["protocol"] == "HTTPS")
        .filter_map(|l| {
            Some((
                l["hostname"].as_str()?.to_string(),
                (
                    l["name"].as_str()?.to_string(),
                    l["tls"]["certificateRefs"][0]["name"].as_str()?.to_string(),
                ),
            ))
        })
        .collect()
}

/// name → uid of a namespace's objects of `kind`.
fn uids(c: &Cluster, kind: &str, ns: &str) -> BTreeMap<String, String> {
    c.list(kind, ns)
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                uid(o),
            )
        })
        .collect()
}

/// Every object of the scenario with its resourceVersion.
fn versions(c: &Cluster, ts: &[Tenant], extra_ns: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut namespaces: BTreeSet<&str> = extra_ns.iter().copied().collect();
    for t in ts {
        namespaces.insert(t.ns);
        namespaces.extend(t.routes.iter().map(|r| r.0));
    }
    for ns in &namespaces {
        for kind in [
            "tenantgateway",
            "gateway",
            "issuer",
            "certificate",
            "secret",
            "httproute",
            "tlsroute",
        ] {
            for o in c.list(kind, ns) {
                let name = o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                out.insert(format!("{kind} {ns}/{name}"), rv(&o));
            }
        }
        out.insert(
            format!("namespace {ns}"),
            rv(&c.get_cluster("namespace", ns)),
        );
    }
    out
}

/// The managers that own anything but a subresource, with the operation.
fn main_managers(o: &Value) -> Vec<(String, String)> {
    o["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["subresource"].as_str().unwrap_or_default().is_empty())
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or_default().to_string(),
                e["operation"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn counter_sum(m: &Metrics, family: &str, filter: &str) -> u64 {
    m.render()
        .lines()
        .filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
        .filter(|l| l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

fn writes(m: &Metrics) -> u64 {
    counter_sum(m, "tenant_gateway_reconcile_writes_total", "")
}

fn reconciles(m: &Metrics) -> u64 {
    counter_sum(m, "tenant_gateway_reconcile_total", "")
}

/// Poke every TenantGateway until a round of reconciles issues no write.
fn quiesce(c: &Cluster, m: &Metrics, ts: &[Tenant]) {
    c.wait("the reconciler to stop writing", || {
        let before = writes(m);
        let r = reconciles(m);
        for t in ts {
            c.cp.kubectl_ok(
                &[
                    "annotate",
                    "--overwrite",
                    "tenantgateway",
                    "-n",
                    t.ns,
                    "gw",
                    &format!("e2e/poke={r}"),
                ],
                None,
            );
        }
        poll(WAIT, "the pokes reconciled", || {
            (reconciles(m) >= r + ts.len() as u64).then_some(())
        });
        (writes(m) == before).then_some(())
    });
}

#[test]
fn switching_from_the_platform_controller() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    cp.install_crds();
    let c = Cluster { cp: &cp };

    // The namespaces as the platform's charts write them.
    namespace(
        &c,
        "tenant-migh",
        json!({HOST_LABEL: "migh.example.org", GATEWAY_LABEL: "tenant-migh"}),
    );
    namespace(
        &c,
        "tenant-migh-kid",
        json!({HOST_LABEL: "kid.migh.example.org", GATEWAY_LABEL: "tenant-migh"}),
    );
    namespace(&c, "cozy-mig", json!({}));
    namespace(
        &c,
        "tenant-migd",
        json!({HOST_LABEL: "migd.example.org", GATEWAY_LABEL: "tenant-migd"}),
    );
    namespace(
        &c,
        "tenant-migd-kid",
        json!({HOST_LABEL: "kid.migd.example.org", GATEWAY_LABEL: "tenant-migd"}),
    );
    namespace(
        &c,
        "tenant-mige",
        json!({HOST_LABEL: "mige.example.org", GATEWAY_LABEL: "tenant-mige"}),
    );
    let ts = tenants();
    let tgw_uids: BTreeMap<&str, String> = ts
        .iter()
        .map(|t| (t.ns, build_platform_world(&c, t)))
        .collect();
    let refused = refused_world(&c);

    // What the platform left, to compare with.
    let names_before: BTreeMap<&str, BTreeMap<String, (String, String)>> = ts
        .iter()
        .map(|t| {
            (
                t.ns,
                https_names(&c.get("gateway", t.ns, "gw").expect("gateway")),
            )
        })
        .collect();
    let uids_before: BTreeMap<(&str, &str), BTreeMap<String, String>> = ts
        .iter()
        .flat_map(|t| {
            ["gateway", "issuer", "certificate", "secret", "httproute"]
                .map(|k| ((t.ns, k), uids(&c, k, t.ns)))
        })
        .collect();
    let secrets_before: BTreeMap<String, String> = ts
        .iter()
        .flat_map(|t| {
            t.secrets.iter().map(|s| {
                let o = c.get("secret", t.ns, s).expect("secret");
                (format!("{}/{s}", t.ns), rv(&o))
            })
        })
        .collect();
    // Sanity of the world: the old manager holds the spec, as server-side apply alone
    // would leave it.
    let gw = c.get_full("gateway", "tenant-migh", "gw").expect("gateway");
    assert!(main_managers(&gw).contains(&(PLATFORM.into(), "Update".into())));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let started = Instant::now();
    let one = replica::start(&rt, &cp, LEASE);
    c.wait("the replica to hold the Lease", || {
        (one.metrics.leader.get() == 1).then_some(())
    });
    for t in &ts {
        c.wait(&format!("{}: the platform's labels replaced", t.ns), || {
            let objects: Vec<Value> = ["gateway", "issuer", "certificate"]
                .iter()
                .flat_map(|k| c.list(k, t.ns))
                .chain(c.get("httproute", t.ns, "gw-http-redirect"))
                .collect();
            objects
                .iter()
                .all(|o| {
                    let l = labels(o);
                    l.get("app.kubernetes.io/managed-by").map(String::as_str)
                        == Some("tenant-gateway")
                        && PLATFORM_LABELS.iter().all(|k| !l.contains_key(*k))
                })
                .then_some(())
        });
    }
    quiesce(&c, &one.metrics, &ts);
    let converged = started.elapsed();
    let first_writes = writes(&one.metrics);
    let adopts = counter_sum(
        &one.metrics,
        "tenant_gateway_reconcile_writes_total",
        "verb=\"adopt\"",
    );
    // Cilium programs the changed Gateways (new generation): the status follows, nothing else.
    for t in &ts {
        program_gateway(&c, t.ns);
    }
    for t in &ts {
        c.wait(&format!("{}: Ready", t.ns), || {
            let tgw = c.get("tenantgateway", t.ns, "gw")?;
            tgw["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                .then_some(())
        });
    }
    quiesce(&c, &one.metrics, &ts);

    for t in &ts {
        check_adopted(&c, t, &names_before[t.ns], &tgw_uids[t.ns], &uids_before);
    }
    for (key, version) in &secrets_before {
        let (ns, name) = key.split_once('/').expect("ns/name");
        assert_eq!(
            &rv(&c.get("secret", ns, name).expect("secret")),
            version,
            "{key} touched"
        );
    }
    check_refused(&c, &refused);

    // A restart on the adopted world: the new holder's full resync writes nothing.
    one.reconciler.done.abort();
    let before = versions(&c, &ts, &["cozy-mig", "tenant-mign"]);
    let two = replica::start(&rt, &cp, LEASE);
    c.wait("the second replica takes the Lease", || {
        (two.metrics.leader.get() == 1).then_some(())
    });
    c.wait("the takeover resync of every TenantGateway", || {
        let n = two
            .metrics
            .reconcile_total
            .with_label_values(&["success"])
            .get();
        (n >= ts.len() as u64 + 2).then_some(())
    });
    assert_eq!(
        writes(&two.metrics),
        0,
        "the resync of the adopted world wrote"
    );
    assert_eq!(
        versions(&c, &ts, &["cozy-mig", "tenant-mign"]),
        before,
        "the resync of the adopted world changed resourceVersions"
    );

    // A new route gets a listener of its own; nothing is renamed.
    let h = &ts[0];
    let kept = https_names(&c.get("gateway", h.ns, "gw").expect("gateway"));
    c.create(
        "helm",
        &json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "new", "namespace": h.ns},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [format!("new.{}", h.apex)],
                     "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
    );
    let grown = c.wait("a listener for the new route", || {
        let names = https_names(&c.get("gateway", h.ns, "gw")?);
        names
            .contains_key(&format!("new.{}", h.apex))
            .then_some(names)
    });
    assert_eq!(
        grown[&format!("new.{}", h.apex)],
        ("https-new".to_string(), "gw-new-tls".to_string())
    );
    for (host, n) in &kept {
        assert_eq!(grown.get(host), Some(n), "{host} renamed");
    }
    // SPEC §3.7 "Exactly the desired state" after the switch too: a listener someone adds
    // by hand (a plain update under another manager) is removed, and its manager goes.
    let extra = json!([{"op": "add", "path": "/spec/listeners/-", "value":
        https_listener(h.ns, "https-by-hand", &format!("hand.{}", h.apex), "by-hand")}]);
    c.cp.kubectl_ok(
        &[
            "patch",
            "gateway",
            "-n",
            h.ns,
            "gw",
            "--type=json",
            "--field-manager=kubectl-edit",
            "-p",
            &extra.to_string(),
        ],
        None,
    );
    c.wait("the hand-added listener removed", || {
        let gw = c.get_full("gateway", h.ns, "gw")?;
        let names = https_names(&gw);
        let managers = main_managers(&gw);
        (!names.contains_key(&format!("hand.{}", h.apex))
            && !managers.iter().any(|m| m.0 == "kubectl-edit"))
        .then_some(())
    });
    // A hostname that goes takes its adopted Certificate with it (its Secret stays).
    let gone = format!("docs.{}", h.apex);
    let gone_cert = kept[&gone].1.clone();
    c.cp.kubectl_ok(&["delete", "httproute", "-n", h.ns, "docs"], None);
    c.wait("the adopted Certificate deleted with its hostname", || {
        let names = https_names(&c.get("gateway", h.ns, "gw")?);
        (!names.contains_key(&gone) && c.get("certificate", h.ns, &gone_cert).is_none())
            .then_some(())
    });
    assert!(c.get("secret", h.ns, &gone_cert).is_some());
    let left = uids(&c, "certificate", h.ns);
    let dropped = h.dropped().map(|d| d.1);
    for (name, id) in &uids_before[&(h.ns, "certificate")] {
        if *name != gone_cert && Some(name) != dropped.as_ref() {
            assert_eq!(left.get(name), Some(id), "{name} re-created");
        }
    }
    two.reconciler.done.abort();
    drop(rt);
    eprintln!(
        "migration of 3 TenantGateways (http01 with 4 hostnames and a TLSRoute's, dns01, existingSecret): \
         converged {converged:?} after the start with {first_writes} writes ({adopts} of them \
         field take-overs); restart resync: 0 writes, 0 resourceVersions changed"
    );
}

/// Every bullet of SPEC §3.8 for one tenant, after the switch.
fn check_adopted(
    c: &Cluster,
    t: &Tenant,
    names_before: &BTreeMap<String, (String, String)>,
    tgw_uid: &str,
    uids_before: &BTreeMap<(&str, &str), BTreeMap<String, String>>,
) {
    let ns = t.ns;
    let gw = c.get_full("gateway", ns, "gw").expect("gateway");
    let (dropped_listener, dropped_cert) = t.dropped().unzip();
    // Names and Secrets kept; no object deleted, created or re-created but the TLSRoute's
    // listener and Certificate (its Secret stays).
    let mut kept = names_before.clone();
    if let Some((_, host)) = &t.tls_route {
        kept.remove(host);
    }
    assert_eq!(
        https_names(&gw),
        kept,
        "{ns}: listener names or certificateRefs"
    );
    for kind in ["gateway", "issuer", "certificate", "secret", "httproute"] {
        let mut now = uids(c, kind, ns);
        if kind == "httproute" {
            now.retain(|n, _| uids_before[&(ns, kind)].contains_key(n));
        }
        let mut want = uids_before[&(ns, kind)].clone();
        if kind == "certificate" {
            want.retain(|n, _| Some(n) != dropped_cert.as_ref());
        }
        assert_eq!(now, want, "{ns}: {kind} uids");
    }
    if let Some(cert) = &dropped_cert {
        assert!(c.get("certificate", ns, cert).is_none(), "{ns}/{cert}");
        assert!(
            c.get("secret", ns, cert).is_some(),
            "{ns}/{cert}: its Secret"
        );
    }
    // Exactly the rendered listeners: none of the old manager's selectors or kinds.
    for l in gw["spec"]["listeners"].as_array().expect("listeners") {
        let sel = &l["allowedRoutes"]["namespaces"]["selector"];
        assert!(sel.get("matchLabels").is_none(), "{ns}: {l}");
        assert_eq!(
            sel["matchExpressions"][0]["key"], "kubernetes.io/metadata.name",
            "{ns}: {l}"
        );
        let kinds = &l["allowedRoutes"]["kinds"];
        let want = if l["protocol"] == "TLS" {
            "TLSRoute"
        } else {
            "HTTPRoute"
        };
        assert_eq!(kinds.as_array().map(Vec::len), Some(1), "{ns}: {l}");
        assert_eq!(kinds[0]["kind"], want, "{ns}: {l}");
    }
    let names: Vec<&str> = gw["spec"]["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    let before: Vec<&str> = t
        .listeners
        .iter()
        .filter_map(|l| l["name"].as_str())
        .filter(|n| Some(*n) != dropped_listener.as_deref())
        .collect();
    assert_eq!(
        names.iter().collect::<BTreeSet<_>>(),
        before.iter().collect::<BTreeSet<_>>(),
        "{ns}: the listener set"
    );
    // Labels: ours in, the platform's out, a third party's kept.
    assert_eq!(
        labels(&gw).get("example.com/team").map(String::as_str),
        Some("web"),
        "{ns}"
    );
    // managedFields: only our apply and the third party's label on the objects themselves;
    // status entries of Cilium and cert-manager untouched.
    let mut owned: Vec<Value> = vec![gw.clone()];
    owned.extend(c.get_full("issuer", ns, "gw-gateway"));
    owned.extend(c.get_full("httproute", ns, "gw-http-redirect"));
    for (name, _, _) in t
        .certificates
        .iter()
        .filter(|c| Some(&c.0) != dropped_cert.as_ref())
    {
        owned.push(c.get_full("certificate", ns, name).expect("certificate"));
    }
    for o in &owned {
        let what = format!("{ns} {} {}", o["kind"], o["metadata"]["name"]);
        let mut managers = main_managers(o);
        managers.retain(|m| m.0 != "kubectl-label");
        assert_eq!(
            managers,
            [("tenant-gateway".to_string(), "Apply".to_string())],
            "{what}"
        );
        let l = labels(o);
        assert_eq!(
            l.get("app.kubernetes.io/managed-by").map(String::as_str),
            Some("tenant-gateway"),
            "{what}"
        );
        for k in PLATFORM_LABELS {
            assert!(!l.contains_key(k), "{what}: {k}");
        }
        let refs = o["metadata"]["ownerReferences"]
            .as_array()
            .expect("ownerReferences");
        assert_eq!(refs.len(), 1, "{what}");
        assert_eq!(refs[0]["uid"], tgw_uid, "{what}");
        let has_status_entry = o["metadata"]["managedFields"]
            .as_array()
            .expect("managedFields")
            .iter()
            .any(|e| e["subresource"] == "status");
        let written_status = o["kind"] != "Issuer" && o["kind"] != "HTTPRoute";
        assert_eq!(has_status_entry, written_status, "{what}: status entries");
    }
    for (name, dns, _) in t
        .certificates
        .iter()
        .filter(|c| Some(&c.0) != dropped_cert.as_ref())
    {
        let cert = c.get("certificate", ns, name).expect("certificate");
        assert_eq!(cert["spec"]["secretName"], json!(name), "{ns}/{name}");
        assert_eq!(cert["spec"]["dnsNames"], json!(dns), "{ns}/{name}");
        assert_eq!(
            cert["spec"]["issuerRef"]["name"], "gw-gateway",
            "{ns}/{name}"
        );
    }
    if t.issuer_solver.is_none() {
        assert!(c.get("issuer", ns, "gw-gateway").is_none());
    }
    // The namespace marks: ours in place of the platform's, the label kept.
    let mut marked = vec![ns];
    marked.extend(
        t.spec["attachedNamespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str),
    );
    for m in marked {
        let n = c.get_cluster("namespace", m);
        let a = &n["metadata"]["annotations"];
        assert!(a.get(PLATFORM_MARK).is_none(), "{m}: {a}");
        assert_eq!(a[OUR_MARK], ns, "{m}");
        assert_eq!(n["metadata"]["labels"][GATEWAY_LABEL], ns, "{m}");
    }
    // Route status: one entry of ours per parentRef, Cilium's kept first.
    for (i, (rns, name, _)) in t.routes.iter().enumerate() {
        let r = c.get("httproute", rns, name).expect("route");
        let parents = r["status"]["parents"].as_array().expect("status.parents");
        let ours: Vec<&Value> = parents
            .iter()
            .filter(|p| p["controllerName"] == CONTROLLER_NAME)
            .collect();
        assert_eq!(ours.len(), 1, "{rns}/{name}: {parents:?}");
        assert_eq!(ours[0]["conditions"][0]["status"], "True", "{rns}/{name}");
        assert_eq!(ours[0]["parentRef"]["name"], "gw");
        if i == 0 && t.spec.get("certMode").is_none() {
            assert_eq!(parents.len(), 2, "{rns}/{name}: {parents:?}");
            assert_eq!(parents[0]["controllerName"], CILIUM, "{rns}/{name}");
        }
    }
}

/// Same-named objects this TenantGateway does not own: a Gateway controlled by another
/// TenantGateway (the namespace's second one, a Duplicate), an Issuer and a redirect route
/// with the platform's labels but no ownerReference. Returns their resourceVersions.
fn refused_world(c: &Cluster) -> BTreeMap<String, String> {
    let ns = "tenant-mign";
    namespace(
        c,
        ns,
        json!({HOST_LABEL: "mign.example.org", GATEWAY_LABEL: ns}),
    );
    let tgw = |name: &str| {
        c.create(
            "helm",
            &json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"apex": "mign.example.org"}}),
        )
    };
    tgw("gw");
    let other = tgw("other");
    let other_owner = json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
        "name": "other", "uid": uid(&other), "controller": true, "blockOwnerDeletion": true});
    let platform = json!({"cozystack.io/managed-by": PLATFORM});
    let objects = [
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": meta(ns, "gw", platform.clone(), &other_owner),
            "spec": {"gatewayClassName": "cilium", "listeners": [http_listener(ns)]}}),
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
            "metadata": {"name": "gw-gateway", "namespace": ns, "labels": platform},
            "spec": {"acme": {"server": "https://acme-staging-v02.api.letsencrypt.org/directory",
                "privateKeySecretRef": {"name": "someone-elses"}, "solvers": []}}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "gw-http-redirect", "namespace": ns,
                         "labels": {"app.kubernetes.io/managed-by": "tenant-gateway"}},
            "spec": {"parentRefs": [{"name": "elsewhere"}]}}),
    ];
    objects
        .iter()
        .map(|o| {
            let created = c.create(PLATFORM, o);
            (
                format!("{} {}", o["kind"], o["metadata"]["name"]),
                rv(&created),
            )
        })
        .collect()
}

fn check_refused(c: &Cluster, before: &BTreeMap<String, String>) {
    let ns = "tenant-mign";
    let t = c.wait("the takeover refused in the status", || {
        let t = c.get("tenantgateway", ns, "gw")?;
        let programmed = t["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Programmed")?
            .clone();
        (programmed["reason"] == "NotOwned").then_some(t)
    });
    let message = t["status"]["conditions"].to_string();
    for what in [
        "Issuer named gw-gateway",
        "HTTPRoute named gw-http-redirect",
    ] {
        assert!(message.contains(what), "{what} not reported: {message}");
    }
    c.wait("a TakeoverRefused event", || {
        let o = c.cp.kubectl(
            &["get", "events.events.k8s.io", "-n", ns, "-o", "json"],
            None,
        );
        let list: Value = serde_json::from_str(&o.stdout).ok()?;
        list["items"]
            .as_array()?
            .iter()
            .any(|e| e["reason"] == "TakeoverRefused")
            .then_some(())
    });
    for (kind, name) in [
        ("gateway", "gw"),
        ("issuer", "gw-gateway"),
        ("httproute", "gw-http-redirect"),
    ] {
        let o = c.get(kind, ns, name).expect("still there");
        let key = format!("{} {}", o["kind"], o["metadata"]["name"]);
        assert_eq!(Some(&rv(&o)), before.get(&key), "{key} was written");
        assert_eq!(
            labels(&o).contains_key("app.kubernetes.io/managed-by"),
            kind == "httproute",
            "{key}: labels changed"
        );
    }
    assert!(c.get("certificate", ns, "gw-gateway-tls").is_none());
}
