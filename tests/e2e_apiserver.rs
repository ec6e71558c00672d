//! Tier 3 (SPEC §7): a real kube-apiserver (tests/k8s harness), the real `tenant-gateway
//! serve` registered as a ValidatingWebhookConfiguration by URL, and kubectl acting as
//! tenants and trusted callers. Then the same requests with only `policies/` installed.
//!
//! The harness is built from Go modules by `tests/k8s/control-plane` (cached after the first
//! build; `scripts/test` builds it before `cargo test`). Set TENANT_GATEWAY_SKIP_E2E=1 to skip
//! this tier on a machine without Go; it is never skipped silently otherwise.

mod support;

use std::time::{Duration, Instant};

use support::control_plane::*;
use support::poll::{EVERY, poll, try_poll};
use support::process::*;
use tenant_gateway::admission::WebhookResource;
use tenant_gateway::admission::testing::review;

/// One request of the differential set.
struct Case {
    name: &'static str,
    /// `--as`, `--as-group`s
    user: &'static str,
    groups: &'static [&'static str],
    manifest: String,
    allowed: bool,
    /// Text the kubectl user must see on a denial.
    phrase: &'static str,
    /// The VAPs decide differently on purpose (listed in policies/README.md).
    vap_differs: bool,
}

const TENANT: &[&str] = &[E2E_GROUP, "tenant-alice-admins"];
const FLUX: &[&str] = &[
    E2E_GROUP,
    "system:serviceaccounts:cozy-fluxcd",
    "system:serviceaccounts",
];

fn route(kind: &str, api: &str, ns: &str, name: &str, hosts: &[&str]) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    format!(
        r#"{{"apiVersion":"{api}","kind":"{kind}","metadata":{{"name":"{name}","namespace":"{ns}"}},
"spec":{{"parentRefs":[{{"name":"gw","namespace":"tenant-root"}}],"hostnames":[{}],"rules":[{{"backendRefs":[{{"name":"web","port":443}}]}}]}}}}"#,
        hosts.join(",")
    )
}

fn gateway(ns: &str, name: &str, host: &str) -> String {
    format!(
        r#"{{"apiVersion":"gateway.networking.k8s.io/v1","kind":"Gateway","metadata":{{"name":"{name}","namespace":"{ns}"}},
"spec":{{"gatewayClassName":"cilium","listeners":[{{"name":"http","port":80,"protocol":"HTTP"}},{{"name":"https","port":443,"protocol":"HTTPS","hostname":"{host}","tls":{{"mode":"Terminate","certificateRefs":[{{"name":"c"}}]}}}}]}}}}"#
    )
}

fn ingress(ns: &str, name: &str, host: &str) -> String {
    format!(
        r#"{{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{{"name":"{name}","namespace":"{ns}"}},
"spec":{{"rules":[{{"host":"{host}","http":{{"paths":[{{"path":"/","pathType":"Prefix","backend":{{"service":{{"name":"web","port":{{"number":80}}}}}}}}]}}}}]}}}}"#
    )
}

fn ingress_annotated(ns: &str, name: &str, host: &str, key: &str, value: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&ingress(ns, name, host)).expect("json");
    v["metadata"]["annotations"] = serde_json::json!({ key: value });
    v.to_string()
}

fn listenerset(api: &str, kind: &str, ns: &str, name: &str, host: &str) -> String {
    format!(
        r#"{{"apiVersion":"{api}","kind":"{kind}","metadata":{{"name":"{name}","namespace":"{ns}"}},
"spec":{{"parentRef":{{"name":"gw","namespace":"tenant-root"}},"listeners":[{{"name":"http","port":80,"protocol":"HTTP","hostname":"{host}"}}]}}}}"#
    )
}

const SERVER_ALIAS: &str = "nginx.ingress.kubernetes.io/server-alias";

fn tenant(ns: &str, name: &str, host: &str) -> String {
    format!(
        r#"{{"apiVersion":"apps.cozystack.io/v1alpha1","kind":"Tenant","metadata":{{"name":"{name}","namespace":"{ns}"}},"spec":{{"host":"{host}"}}}}"#
    )
}

fn namespace(name: &str, labels: &[(&str, &str)]) -> String {
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("\"{k}\":\"{v}\""))
        .collect();
    format!(
        r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{name}","labels":{{{}}}}}}}"#,
        labels.join(",")
    )
}

fn namespace_annotated(name: &str, key: &str, value: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&namespace(name, &[])).expect("json");
    v["metadata"]["annotations"] = serde_json::json!({ key: value });
    v.to_string()
}

fn tgw(ns: &str, name: &str, spec: serde_json::Value) -> String {
    serde_json::json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
        "metadata": {"name": name, "namespace": ns}, "spec": spec})
    .to_string()
}

fn package(name: &str, attached: &[&str]) -> String {
    let list: Vec<String> = attached.iter().map(|h| format!("\"{h}\"")).collect();
    format!(
        r#"{{"apiVersion":"cozystack.io/v1alpha1","kind":"Package","metadata":{{"name":"{name}"}},
"spec":{{"components":{{"platform":{{"values":{{"gateway":{{"attachedNamespaces":[{}]}}}}}}}}}}}}"#,
        list.join(",")
    )
}

fn cases() -> Vec<Case> {
    let httproute = |ns, name, hosts: &[&str]| {
        route("HTTPRoute", "gateway.networking.k8s.io/v1", ns, name, hosts)
    };
    let tlsroute = |ns, name, hosts: &[&str]| {
        route(
            "TLSRoute",
            "gateway.networking.k8s.io/v1alpha2",
            ns,
            name,
            hosts,
        )
    };
    let grpcroute = |ns, name, hosts: &[&str]| {
        route("GRPCRoute", "gateway.networking.k8s.io/v1", ns, name, hosts)
    };
    let lset = |ns, name, host| {
        listenerset(
            "gateway.networking.k8s.io/v1",
            "ListenerSet",
            ns,
            name,
            host,
        )
    };
    let xlset = |ns, name, host| {
        listenerset(
            "gateway.networking.x-k8s.io/v1alpha1",
            "XListenerSet",
            ns,
            name,
            host,
        )
    };
    vec![
        // Layer 2 on ListenerSets (v1) and XListenerSets (x-k8s v1alpha1): one path.
        Case {
            name: "listenerset inside apex",
            user: "alice",
            groups: TENANT,
            manifest: lset("tenant-alice", "ls-ok", "ls.alice.example.org"),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "listenerset outside apex",
            user: "alice",
            groups: TENANT,
            manifest: lset("tenant-alice", "ls-bad", "ls.bob.example.org"),
            allowed: false,
            phrase: "must equal alice.example.org or end with .alice.example.org",
            vap_differs: false,
        },
        Case {
            name: "xlistenerset inside apex",
            user: "alice",
            groups: TENANT,
            manifest: xlset("tenant-alice", "xls-ok", "xls.alice.example.org"),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "xlistenerset outside apex",
            user: "alice",
            groups: TENANT,
            manifest: xlset("tenant-alice", "xls-bad", "dashboard.example.org"),
            allowed: false,
            phrase: "must equal alice.example.org or end with .alice.example.org",
            vap_differs: false,
        },
        // Layer 7: GRPCRoute, and catch-all routes of every kind.
        Case {
            name: "grpcroute inside apex",
            user: "alice",
            groups: TENANT,
            manifest: grpcroute("tenant-alice", "grpc", &["grpc.alice.example.org"]),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "grpcroute hijacks sibling",
            user: "alice",
            groups: TENANT,
            manifest: grpcroute("tenant-alice", "grpc-bad", &["grpc.bob.example.org"]),
            allowed: false,
            phrase: "hostnames must equal the namespace's namespace.cozystack.io/host label or be subdomains of it",
            vap_differs: false,
        },
        Case {
            name: "grpcroute without hostnames",
            user: "alice",
            groups: TENANT,
            manifest: grpcroute("tenant-alice", "grpc-all", &[]),
            allowed: false,
            phrase: "spec.hostnames is empty or absent",
            vap_differs: false,
        },
        Case {
            name: "httproute without hostnames",
            user: "alice",
            groups: TENANT,
            manifest: route(
                "HTTPRoute",
                "gateway.networking.k8s.io/v1",
                "tenant-alice",
                "catch-all",
                &[],
            ),
            allowed: false,
            phrase: "spec.hostnames is empty or absent",
            vap_differs: false,
        },
        Case {
            // TLSRoute v1 and v1alpha3 require at least one hostname in the CRD schema, so
            // only v1alpha2 lets a catch-all reach admission.
            name: "tlsroute v1alpha2 without hostnames",
            user: "alice",
            groups: TENANT,
            manifest: tlsroute("tenant-alice", "catch-all-tls", &[]),
            allowed: false,
            phrase: "spec.hostnames is empty or absent",
            vap_differs: false,
        },
        // Layer 8: ingress-nginx annotations and other tenants' custom apexes.
        Case {
            name: "ingress server-alias inside apex",
            user: "alice",
            groups: TENANT,
            manifest: ingress_annotated(
                "tenant-alice",
                "alias-ok",
                "www.alice.example.org",
                SERVER_ALIAS,
                "a.alice.example.org, b.alice.example.org",
            ),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "ingress server-alias claims platform name",
            user: "alice",
            groups: TENANT,
            manifest: ingress_annotated(
                "tenant-alice",
                "alias-bad",
                "www.alice.example.org",
                SERVER_ALIAS,
                "a.alice.example.org dashboard.example.org",
            ),
            allowed: false,
            phrase: SERVER_ALIAS,
            vap_differs: false,
        },
        Case {
            name: "ingress server-snippet",
            user: "alice",
            groups: TENANT,
            manifest: ingress_annotated(
                "tenant-alice",
                "snippet",
                "www.alice.example.org",
                "nginx.ingress.kubernetes.io/server-snippet",
                "server_name dashboard.example.org;",
            ),
            allowed: false,
            phrase: "is not allowed in tenant namespaces",
            vap_differs: false,
        },
        Case {
            name: "ingress configuration-snippet",
            user: "alice",
            groups: TENANT,
            manifest: ingress_annotated(
                "tenant-alice",
                "snippet2",
                "www.alice.example.org",
                "nginx.ingress.kubernetes.io/configuration-snippet",
                "more_set_headers \"X: y\";",
            ),
            allowed: false,
            phrase: "is not allowed in tenant namespaces",
            vap_differs: false,
        },
        Case {
            name: "ingress custom domain of another tenant",
            user: "alice",
            groups: TENANT,
            manifest: ingress("tenant-alice", "steal", "shop.customer1.io"),
            allowed: false,
            phrase: "another tenant's namespace",
            // CEL sees only the object's own namespace (policies/README.md).
            vap_differs: true,
        },
        Case {
            name: "ingress custom apex by its owner",
            user: "cust",
            groups: &[E2E_GROUP],
            manifest: ingress("tenant-cust", "shop", "shop.customer1.io"),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        // Layer 2: Gateway listener hostnames.
        Case {
            name: "gateway inside apex",
            user: "alice",
            groups: TENANT,
            manifest: gateway("tenant-alice", "gw-ok", "shop.alice.example.org"),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "gateway outside apex",
            user: "alice",
            groups: TENANT,
            manifest: gateway("tenant-alice", "gw-bad", "shop.bob.example.org"),
            allowed: false,
            phrase: "must equal alice.example.org or end with .alice.example.org",
            vap_differs: false,
        },
        Case {
            name: "gateway in namespace without host label",
            user: "alice",
            groups: TENANT,
            manifest: gateway("tenant-nolabel", "gw", "x.example.org"),
            allowed: false,
            phrase: "namespace.cozystack.io/host",
            vap_differs: false,
        },
        // Layer 3: Package attached namespaces.
        Case {
            name: "package with cozy namespaces",
            user: "admin",
            groups: &[E2E_GROUP, "system:masters"],
            manifest: package("cozystack.platform", &["cozy-monitoring", "default"]),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "package with tenant-root",
            user: "admin",
            groups: &[E2E_GROUP, "system:masters"],
            manifest: package("cozystack.platform", &["cozy-monitoring", "tenant-root"]),
            allowed: false,
            phrase: "must not contain tenant-",
            vap_differs: false,
        },
        // Layer 4: Tenant apex.
        Case {
            name: "tenant user creates tenant without host",
            user: "alice",
            groups: TENANT,
            manifest: tenant("tenant-alice", "carol", ""),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "tenant user sets host",
            user: "alice",
            groups: TENANT,
            manifest: tenant("tenant-alice", "carol", "dashboard.example.org"),
            allowed: false,
            phrase: "spec.host can only be set or changed by",
            vap_differs: false,
        },
        Case {
            name: "flux sets host",
            user: "system:serviceaccount:cozy-fluxcd:flux",
            groups: FLUX,
            manifest: tenant("tenant-alice", "carol", "carol.alice.example.org"),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        // Layer 5: Namespace guarded labels.
        Case {
            name: "tenant user creates namespace without guarded labels",
            user: "alice",
            groups: TENANT,
            manifest: namespace("tenant-alice-dev", &[("team", "a")]),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "tenant user stamps host label",
            user: "alice",
            groups: TENANT,
            manifest: namespace(
                "tenant-alice-dev",
                &[("namespace.cozystack.io/host", "example.org")],
            ),
            allowed: false,
            phrase: "is immutable once set",
            vap_differs: false,
        },
        Case {
            name: "tenant user stamps gateway label",
            user: "alice",
            groups: TENANT,
            manifest: namespace(
                "tenant-alice-dev",
                &[("namespace.cozystack.io/gateway", "tenant-root")],
            ),
            allowed: false,
            phrase: "is immutable once set",
            vap_differs: false,
        },
        // Issue 20 item 4: the replicator copies the platform's wildcard key to a namespace
        // whose ingress label names itself.
        Case {
            name: "tenant user stamps ingress label naming its own namespace",
            user: "alice",
            groups: TENANT,
            manifest: namespace(
                "tenant-alice-dev",
                &[("namespace.cozystack.io/ingress", "tenant-alice-dev")],
            ),
            allowed: false,
            phrase: "label namespace.cozystack.io/ingress is immutable once set",
            vap_differs: false,
        },
        // Issue 20 item 5: a forged attachment mark.
        Case {
            name: "tenant user forges the attached-by annotation",
            user: "alice",
            groups: TENANT,
            manifest: namespace_annotated(
                "tenant-alice-dev",
                "gateway.cozystack.io/attached-by",
                "tenant-root",
            ),
            allowed: false,
            phrase: "annotation gateway.cozystack.io/attached-by is immutable once set",
            vap_differs: false,
        },
        Case {
            name: "tenant user writes an ordinary annotation",
            user: "alice",
            groups: TENANT,
            manifest: namespace_annotated("tenant-alice-dev", "example.com/note", "hi"),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "flux stamps host label",
            user: "system:serviceaccount:cozy-fluxcd:flux",
            groups: FLUX,
            manifest: namespace(
                "tenant-alice-dev",
                &[("namespace.cozystack.io/host", "dev.alice.example.org")],
            ),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        // Layer 9: TenantGateways are platform objects.
        Case {
            name: "tenant user creates its own TenantGateway",
            user: "alice",
            groups: TENANT,
            manifest: tgw(
                "tenant-alice",
                "gw",
                serde_json::json!({"apex": "alice.example.org"}),
            ),
            allowed: false,
            phrase: "is managed by the platform",
            vap_differs: false,
        },
        Case {
            name: "flux renders the tenant's TenantGateway",
            user: "system:serviceaccount:cozy-fluxcd:flux",
            groups: FLUX,
            manifest: tgw(
                "tenant-alice",
                "gw",
                serde_json::json!({"apex": "alice.example.org",
                    "attachedNamespaces": ["cozy-dashboard"]}),
            ),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        // Issue 20 item 1, the attacker's exact spec (even a trusted writer may not).
        Case {
            name: "TenantGateway with a one-letter apex attaching platform namespaces",
            user: "system:serviceaccount:cozy-fluxcd:flux",
            groups: FLUX,
            manifest: tgw(
                "tenant-alice",
                "gw",
                serde_json::json!({"apex": "a",
                    "attachedNamespaces": ["cozy-dashboard", "cozy-keycloak"]}),
            ),
            allowed: false,
            phrase: "must equal the namespace's namespace.cozystack.io/host label",
            vap_differs: false,
        },
        Case {
            name: "TenantGateway attaching another tenant's namespace",
            user: "system:serviceaccount:cozy-fluxcd:flux",
            groups: FLUX,
            manifest: tgw(
                "tenant-alice",
                "gw",
                serde_json::json!({"apex": "alice.example.org",
                    "attachedNamespaces": ["tenant-bob"]}),
            ),
            allowed: false,
            phrase: "is managed by the platform",
            vap_differs: false,
        },
        // Issue 20 item 2: a tenant's TenantGateway attaching platform namespaces.
        Case {
            name: "tenant TenantGateway attaching kube-public, default, cozy-system",
            user: "alice",
            groups: TENANT,
            manifest: tgw(
                "tenant-alice",
                "gw",
                serde_json::json!({"apex": "alice.example.org", "attachedNamespaces":
                    ["kube-public", "default", "cozy-system", "kube-node-lease"]}),
            ),
            allowed: false,
            phrase: "is managed by the platform",
            vap_differs: false,
        },
        // Issue 20 item 3: a tenant's TenantGateway in existingSecret mode, which would make
        // the controller label its own namespace and the replicator copy the wildcard key.
        Case {
            name: "tenant TenantGateway asking for the wildcard Secret",
            user: "alice",
            groups: TENANT,
            manifest: tgw(
                "tenant-alice",
                "gw",
                serde_json::json!({"apex": "alice.example.org", "certMode": "existingSecret",
                    "wildcardSecretRef": {"name": "wildcard-tls"}}),
            ),
            allowed: false,
            phrase: "is managed by the platform",
            vap_differs: false,
        },
        Case {
            name: "TenantGateway outside tenant scope is platform-managed",
            user: "alice",
            groups: TENANT,
            manifest: tgw(
                "cozy-dashboard",
                "gw",
                serde_json::json!({"apex": "dashboard.example.org"}),
            ),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        // Layer 7: routes.
        Case {
            name: "httproute inside apex",
            user: "alice",
            groups: TENANT,
            manifest: httproute(
                "tenant-alice",
                "web",
                &["shop.alice.example.org", "alice.example.org"],
            ),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "httproute hijacks sibling",
            user: "alice",
            groups: TENANT,
            manifest: httproute("tenant-alice", "hijack", &["shop.bob.example.org"]),
            allowed: false,
            phrase: "hostnames must equal the namespace's namespace.cozystack.io/host label or be subdomains of it",
            vap_differs: false,
        },
        Case {
            name: "httproute child claims parent apex",
            user: "alice",
            groups: TENANT,
            manifest: httproute("tenant-alice", "parent", &["example.org"]),
            allowed: false,
            phrase: "hostnames must equal",
            vap_differs: false,
        },
        Case {
            name: "httproute parent publishes under child",
            user: "root",
            groups: &[E2E_GROUP],
            manifest: httproute("tenant-root", "child", &["x.alice.example.org"]),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "httproute in namespace without host label",
            user: "alice",
            groups: TENANT,
            manifest: httproute("tenant-nolabel", "web", &[]),
            allowed: false,
            phrase: "namespace.cozystack.io/host",
            vap_differs: false,
        },
        Case {
            name: "httproute outside tenant scope",
            user: "admin",
            groups: &[E2E_GROUP],
            manifest: httproute("cozy-dashboard", "web", &["dashboard.example.org"]),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "tlsroute v1alpha2 inside apex",
            user: "alice",
            groups: TENANT,
            manifest: tlsroute("tenant-alice", "api", &["api.alice.example.org"]),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "tlsroute v1alpha2 outside apex",
            user: "alice",
            groups: TENANT,
            manifest: tlsroute("tenant-alice", "api-bad", &["api.example.org"]),
            allowed: false,
            phrase: "hostnames must equal",
            vap_differs: false,
        },
        // Layer 8: Ingress.
        Case {
            name: "ingress inside apex",
            user: "alice",
            groups: TENANT,
            manifest: ingress("tenant-alice", "web", "www.alice.example.org"),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "ingress custom domain",
            user: "alice",
            groups: TENANT,
            manifest: ingress("tenant-alice", "custom", "shop.customer.com"),
            allowed: true,
            phrase: "",
            vap_differs: false,
        },
        Case {
            name: "ingress platform name outside apex",
            user: "alice",
            groups: TENANT,
            manifest: ingress("tenant-alice", "bad", "dashboard.example.org"),
            allowed: false,
            phrase: "must be within",
            vap_differs: false,
        },
    ]
}

#[test]
fn webhook_and_policies_through_a_real_api_server() {
    let t0 = Instant::now();
    let phase = |what: &str| eprintln!("e2e: {what} done at {:.1?}", t0.elapsed());
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    phase("control plane");
    cp.install_crds();
    cp.grant_impersonated_users();
    cp.create_tenant_namespaces();
    let mut failures = Vec::new();
    check_tenantgateway_crd(&cp, &mut failures);
    phase("setup");
    check_subresource_strategies(&cp, &mut failures);
    let subresource_cases = subresource_cases(&cp);
    phase("subresource strategies");

    // --- the webhook ---
    let hook = Webhook::start(&cp);
    hook.register(&cp);
    for (c, o) in subresource_cases
        .iter()
        .zip(run_subresource_cases(&cp, &subresource_cases))
    {
        check_subresource_outcome("webhook", c, &o, &mut failures);
    }
    phase("webhook subresource cases");
    cache_miss_flood(&cp, &hook, &mut failures);
    phase("cache-miss flood");
    let cases = cases();
    let webhook_results: Vec<Outcome> =
        par_map(&cases, |c| cp.dry_run(c.user, c.groups, &c.manifest));
    for (c, r) in cases.iter().zip(&webhook_results) {
        if r.allowed != c.allowed {
            failures.push(format!(
                "webhook: {}: expected allowed={}, got {r:?}",
                c.name, c.allowed
            ));
        } else if !c.allowed && !r.stderr.contains(c.phrase) {
            failures.push(format!(
                "webhook: {}: denial does not contain {:?}: {}",
                c.name, c.phrase, r.stderr
            ));
        } else if !c.allowed && !r.stderr.contains("denied the request") {
            failures.push(format!(
                "webhook: {}: not denied by the webhook: {}",
                c.name, r.stderr
            ));
        }
    }

    phase("webhook cases");
    apex_index_follows_the_watch(&cp, &mut failures);
    phase("apex index");

    // A namespace created a moment before a route in it must not be denied for cache lag.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&namespace(
            "tenant-fresh",
            &[("namespace.cozystack.io/host", "fresh.example.org")],
        )),
    );
    let fresh = cp.apply(
        &["--as", "alice", "--as-group", E2E_GROUP],
        &route(
            "HTTPRoute",
            "gateway.networking.k8s.io/v1",
            "tenant-fresh",
            "web",
            &["fresh.example.org"],
        ),
    );
    if !fresh.allowed {
        failures.push(format!(
            "webhook: route right after namespace create was denied: {}",
            fresh.stderr
        ));
    }

    // Real creates and an UPDATE (a separate object, so the dry-run set sees the same state in
    // both phases): the Tenant host is immutable for tenants, not for Flux.
    let dave = tenant("tenant-alice", "dave", "dave.alice.example.org");
    let created = cp.apply(
        &[
            "--as",
            "flux",
            "--as-group",
            FLUX[1],
            "--as-group",
            E2E_GROUP,
        ],
        &dave,
    );
    if !created.allowed {
        failures.push(format!(
            "webhook: flux could not create tenant: {}",
            created.stderr
        ));
    }
    let changed = cp.apply(
        &["--as", "alice", "--as-group", E2E_GROUP],
        &tenant("tenant-alice", "dave", "dashboard.example.org"),
    );
    if changed.allowed
        || !changed
            .stderr
            .contains("spec.host can only be set or changed by")
    {
        failures.push(format!(
            "webhook: tenant user changed a Tenant host: {changed:?}"
        ));
    }
    let relabel = cp.kubectl(
        &[
            "label",
            "ns",
            "tenant-alice",
            "--overwrite",
            "namespace.cozystack.io/host=example.org",
            "--as",
            "alice",
            "--as-group",
            E2E_GROUP,
        ],
        None,
    );
    if relabel.allowed || !relabel.stderr.contains("is immutable once set") {
        failures.push(format!(
            "webhook: tenant user relabelled its namespace: {relabel:?}"
        ));
    }
    let other_label = cp.kubectl(
        &[
            "label",
            "ns",
            "tenant-alice",
            "--overwrite",
            "team=blue",
            "--as",
            "alice",
            "--as-group",
            E2E_GROUP,
        ],
        None,
    );
    if !other_label.allowed {
        failures.push(format!(
            "webhook: tenant user could not set an unguarded label: {other_label:?}"
        ));
    }
    tgw_deletes("webhook", &cp, &mut failures);
    hook.unregister(&cp);
    drop(hook);
    phase("webhook phase");

    // --- the same requests with only policies/ ---
    cp.apply_policies();
    // Each policy and each binding takes effect when the API server's policy informers have
    // it, one object at a time: one effective binding says nothing of the others. Wait until
    // every request the policies must deny is denied (a deadline each, no sleep), so the
    // checks below read the policies' answers and not the informers' lag; a policy that never
    // denies still fails, by the deadline.
    let must_deny: Vec<&Case> = cases
        .iter()
        .filter(|c| !c.allowed && !c.vap_differs)
        .collect();
    par_map(&must_deny, |c| {
        cp.wait_until_denied(c.user, c.groups, &c.manifest)
    });
    let sub_must_deny: Vec<&SubCase> = subresource_cases.iter().filter(|c| !c.allowed).collect();
    par_map(&sub_must_deny, |c| {
        poll(
            Duration::from_secs(90),
            "the subresource policy to take effect",
            || (!run_subresource_cases(&cp, std::slice::from_ref(*c))[0].allowed).then_some(()),
        )
    });
    for (c, o) in subresource_cases
        .iter()
        .zip(run_subresource_cases(&cp, &subresource_cases))
    {
        check_subresource_outcome("policies", c, &o, &mut failures);
    }
    let mut differences = Vec::new();
    let policy_results = par_map(&cases, |c| cp.dry_run(c.user, c.groups, &c.manifest));
    for ((c, w), v) in cases.iter().zip(&webhook_results).zip(policy_results) {
        if v.allowed != w.allowed && !c.vap_differs {
            differences.push(format!(
                "{}: webhook allowed={}, policies allowed={} ({})",
                c.name,
                w.allowed,
                v.allowed,
                v.stderr.trim()
            ));
        }
        if !v.allowed && !c.phrase.is_empty() && !v.stderr.contains(c.phrase) && !c.vap_differs {
            differences.push(format!(
                "{}: policy denial lacks {:?}: {}",
                c.name,
                c.phrase,
                v.stderr.trim()
            ));
        }
    }
    failures.extend(differences);
    tgw_deletes("policies", &cp, &mut failures);
    phase("policies phase");
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Layer 9 on DELETE, which `kubectl apply --dry-run` cannot reach: a tenant may not delete
/// the platform's TenantGateway in its namespace (the cases above cover writes); Flux may.
fn tgw_deletes(what: &str, cp: &ControlPlane, failures: &mut Vec<String>) {
    let manifest = tgw(
        "tenant-bob",
        "platform-gw",
        serde_json::json!({"apex": "bob.example.org"}),
    );
    let flux = [
        "--as",
        "flux",
        "--as-group",
        FLUX[1],
        "--as-group",
        E2E_GROUP,
    ];
    let created = cp.apply(&flux, &manifest);
    if !created.allowed {
        failures.push(format!(
            "{what}: flux could not create a TenantGateway: {}",
            created.stderr
        ));
        return;
    }
    let delete = |who: &[&str]| {
        let mut args = vec![
            "delete",
            "tenantgateway",
            "platform-gw",
            "-n",
            "tenant-bob",
            "--dry-run=server",
        ];
        args.extend_from_slice(who);
        cp.kubectl(&args, None)
    };
    let o = delete(&["--as", "bob", "--as-group", E2E_GROUP]);
    if o.allowed || !o.stderr.contains("is managed by the platform") {
        failures.push(format!(
            "{what}: a tenant deleted the platform's TenantGateway: {o:?}"
        ));
    }
    let o = delete(&flux);
    if !o.allowed {
        failures.push(format!(
            "{what}: flux could not delete a TenantGateway: {}",
            o.stderr
        ));
    }
    cp.kubectl_ok(
        &[
            "delete",
            "tenantgateway",
            "platform-gw",
            "-n",
            "tenant-bob",
            "--wait=false",
        ],
        None,
    );
}

/// The generated TenantGateway CRD is accepted by a real API server and its CEL rules reject
/// an inconsistent spec up front.
fn check_tenantgateway_crd(cp: &ControlPlane, failures: &mut Vec<String>) {
    let tgw = |spec: &str| {
        format!(
            r#"{{"apiVersion":"gateway.cozystack.io/v1alpha1","kind":"TenantGateway","metadata":{{"name":"tgw","namespace":"tenant-root"}},"spec":{spec}}}"#
        )
    };
    let ok = cp.dry_run(
        "admin",
        &["system:masters"],
        &tgw(r#"{"apex":"example.org"}"#),
    );
    if !ok.allowed {
        failures.push(format!(
            "crd: minimal TenantGateway rejected: {}",
            ok.stderr
        ));
    }
    for (spec, phrase) in [
        (
            r#"{"apex":"example.org","certMode":"dns01"}"#,
            "certMode dns01 requires the dns01 block",
        ),
        (
            r#"{"apex":"example.org","certMode":"existingSecret"}"#,
            "requires wildcardSecretRef",
        ),
        (
            r#"{"apex":"example.org","certMode":"dns01","dns01":{"provider":"route53"}}"#,
            "provider route53 requires the route53 block",
        ),
        (
            r#"{"apex":"example.org","certMode":"tls-magic"}"#,
            "Unsupported value",
        ),
    ] {
        let o = cp.dry_run("admin", &["system:masters"], &tgw(spec));
        if o.allowed || !o.stderr.contains(phrase) {
            failures.push(format!(
                "crd: {spec} should be rejected with {phrase:?}: {o:?}"
            ));
        }
    }
    // Issue 20 item 6: the attack used 24,000 attachedNamespaces; the schema's bounds (SPEC
    // §3.1) stop such a list at the API server, before any reconcile sees it.
    let names = |n: usize, f: &dyn Fn(usize) -> String| {
        (0..n)
            .map(|i| format!("\"{}\"", f(i)))
            .collect::<Vec<_>>()
            .join(",")
    };
    for (spec, phrase) in [
        (
            format!(
                r#"{{"apex":"example.org","attachedNamespaces":[{}]}}"#,
                names(24_000, &|i| format!("cozy-n{i}"))
            ),
            "must have at most 128 items",
        ),
        (
            format!(
                r#"{{"apex":"example.org","attachedNamespaces":[{}]}}"#,
                names(129, &|i| format!("cozy-n{i}"))
            ),
            "must have at most 128 items",
        ),
        (
            format!(
                r#"{{"apex":"example.org","tlsPassthroughServices":[{}]}}"#,
                names(17, &|i| format!("svc-{i}"))
            ),
            "must have at most 16 items",
        ),
        (
            r#"{"apex":"example.org","attachedNamespaces":["Not_A_Namespace"]}"#.to_string(),
            "attachedNamespaces[0]",
        ),
        (r#"{"apex":"*.example.org"}"#.to_string(), "spec.apex"),
    ] {
        let o = cp.dry_run("admin", &["system:masters"], &tgw(&spec));
        if o.allowed || !o.stderr.contains(phrase) {
            failures.push(format!(
                "crd: {}… should be rejected with {phrase:?}: {}",
                spec.chars().take(120).collect::<String>(),
                o.stderr.chars().take(400).collect::<String>()
            ));
        }
    }
}

/// A write through a subresource by a user who holds only that subresource's rights.
struct SubCase {
    name: &'static str,
    /// kubectl arguments (impersonation included); `stdin` for `replace --raw`.
    args: Vec<String>,
    stdin: Option<String>,
    allowed: bool,
    phrase: &'static str,
}

/// mallory may only get/patch/update `namespaces/status` and update `namespaces/finalize`;
/// ingrid may only get/patch/update `ingresses/status` (kubectl patch reads the subresource
/// first). Every write is a server-side dry run, so both
/// phases see the same objects.
fn subresource_cases(cp: &ControlPlane) -> Vec<SubCase> {
    cp.grant_only(
        "mallory",
        r#"[{"apiGroups":[""],"resources":["namespaces/status"],"verbs":["get","patch","update"]},
{"apiGroups":[""],"resources":["namespaces/finalize"],"verbs":["update"]}]"#,
    );
    cp.grant_only(
        "ingrid",
        r#"[{"apiGroups":["networking.k8s.io"],"resources":["ingresses/status"],"verbs":["get","patch","update"]}]"#,
    );
    // The Ingress whose status ingrid writes.
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&ingress(
            "tenant-alice",
            "status-web",
            "www.alice.example.org",
        )),
    );
    let mut finalize_body: serde_json::Value = serde_json::from_str(
        &cp.kubectl_ok(&["get", "ns", "tenant-bob", "-o", "json"], None)
            .stdout,
    )
    .expect("namespace json");
    finalize_body["metadata"]["labels"]["namespace.cozystack.io/host"] =
        serde_json::json!("example.org");
    let finalize_body = finalize_body.to_string();
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let patch_ns = |who: &[&str], labels: &str| {
        let mut a = strings(&[
            "patch",
            "ns",
            "tenant-alice",
            "--subresource=status",
            "--type=merge",
            "--dry-run=server",
            "-p",
        ]);
        a.push(format!(r#"{{"metadata":{{"labels":{labels}}}}}"#));
        a.extend(strings(who));
        a
    };
    let finalize = |who: &[&str]| {
        let mut a = strings(&[
            "replace",
            "--raw",
            "/api/v1/namespaces/tenant-bob/finalize?dryRun=All",
            "-f",
            "-",
        ]);
        a.extend(strings(who));
        a
    };
    let patch_ing = |patch: &str| {
        let mut a = strings(&[
            "patch",
            "ingress",
            "status-web",
            "-n",
            "tenant-alice",
            "--subresource=status",
            "--type=merge",
            "--dry-run=server",
            "--as",
            "ingrid",
            "-p",
        ]);
        a.push(patch.to_string());
        a
    };
    // Issue 20 item 4: a user holding only namespace patch rights.
    cp.grant_only(
        "nora",
        r#"[{"apiGroups":[""],"resources":["namespaces"],"verbs":["get","patch"]}]"#,
    );
    let patch_meta = |sub: bool, who: &[&str], meta: &str| {
        let mut a = strings(&["patch", "ns", "tenant-alice"]);
        if sub {
            a.push("--subresource=status".to_string());
        }
        a.extend(strings(&["--type=merge", "--dry-run=server", "-p"]));
        a.push(format!(r#"{{"metadata":{meta}}}"#));
        a.extend(strings(who));
        a
    };
    let mallory: &[&str] = &["--as", "mallory"];
    let mallory_trusted: &[&str] = &[
        "--as",
        "mallory",
        "--as-group",
        "system:serviceaccounts:cozy-fluxcd",
    ];
    vec![
        SubCase {
            name: "namespaces/status rewrites the host label",
            args: patch_ns(mallory, r#"{"namespace.cozystack.io/host":"example.org"}"#),
            stdin: None,
            allowed: false,
            phrase: "is immutable once set",
        },
        SubCase {
            name: "namespaces/status sets the ingress label to its own name (issue 20 item 4)",
            args: patch_meta(
                true,
                mallory,
                r#"{"labels":{"namespace.cozystack.io/ingress":"tenant-alice"}}"#,
            ),
            stdin: None,
            allowed: false,
            phrase: "label namespace.cozystack.io/ingress is immutable once set",
        },
        SubCase {
            name: "a namespace patch sets the ingress label to its own name (issue 20 item 4)",
            args: patch_meta(
                false,
                &["--as", "nora"],
                r#"{"labels":{"namespace.cozystack.io/ingress":"tenant-alice"}}"#,
            ),
            stdin: None,
            allowed: false,
            phrase: "label namespace.cozystack.io/ingress is immutable once set",
        },
        SubCase {
            name: "namespaces/status forges the attached-by annotation (issue 20 item 5)",
            args: patch_meta(
                true,
                mallory,
                r#"{"annotations":{"gateway.cozystack.io/attached-by":"tenant-root"}}"#,
            ),
            stdin: None,
            allowed: false,
            phrase: "annotation gateway.cozystack.io/attached-by is immutable once set",
        },
        SubCase {
            name: "a namespace patch forges the attached-by annotation (issue 20 item 5)",
            args: patch_meta(
                false,
                &["--as", "nora"],
                r#"{"annotations":{"gateway.cozystack.io/attached-by":"tenant-root"}}"#,
            ),
            stdin: None,
            allowed: false,
            phrase: "annotation gateway.cozystack.io/attached-by is immutable once set",
        },
        SubCase {
            name: "a namespace patch writes an unguarded annotation",
            args: patch_meta(
                false,
                &["--as", "nora"],
                r#"{"annotations":{"team":"blue"}}"#,
            ),
            stdin: None,
            allowed: true,
            phrase: "",
        },
        SubCase {
            name: "namespaces/status sets an unguarded label",
            args: patch_ns(mallory, r#"{"team":"blue"}"#),
            stdin: None,
            allowed: true,
            phrase: "",
        },
        SubCase {
            name: "namespaces/status host label by a trusted group",
            args: patch_ns(
                mallory_trusted,
                r#"{"namespace.cozystack.io/host":"example.org"}"#,
            ),
            stdin: None,
            allowed: true,
            phrase: "",
        },
        SubCase {
            name: "namespaces/finalize rewrites the host label",
            args: finalize(mallory),
            stdin: Some(finalize_body.clone()),
            allowed: false,
            phrase: "is immutable once set",
        },
        SubCase {
            name: "namespaces/finalize host label by a trusted group",
            args: finalize(mallory_trusted),
            stdin: Some(finalize_body),
            allowed: true,
            phrase: "",
        },
        SubCase {
            name: "ingresses/status adds a foreign server-alias",
            args: patch_ing(&format!(
                r#"{{"metadata":{{"annotations":{{"{SERVER_ALIAS}":"dashboard.example.org"}}}}}}"#
            )),
            stdin: None,
            allowed: false,
            phrase: SERVER_ALIAS,
        },
        SubCase {
            name: "ingresses/status adds a server-alias inside the apex",
            args: patch_ing(&format!(
                r#"{{"metadata":{{"annotations":{{"{SERVER_ALIAS}":"a.alice.example.org"}}}}}}"#
            )),
            stdin: None,
            allowed: true,
            phrase: "",
        },
        SubCase {
            name: "ingresses/status writes the load balancer status",
            args: patch_ing(r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.1"}]}}}"#),
            stdin: None,
            allowed: true,
            phrase: "",
        },
    ]
}

fn run_subresource_cases(cp: &ControlPlane, cases: &[SubCase]) -> Vec<Outcome> {
    par_map(cases, |c| {
        let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
        cp.kubectl(&args, c.stdin.as_deref())
    })
}

/// `f` over `items` on a few threads, results in order: the dry-run requests are independent
/// and each kubectl run is mostly process start-up, so this keeps the tier's wall time low.
fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    const THREADS: usize = 4;
    let chunk = items.len().div_ceil(THREADS).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| s.spawn(|| part.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker thread"))
            .collect()
    })
}

fn check_subresource_outcome(phase: &str, c: &SubCase, o: &Outcome, failures: &mut Vec<String>) {
    if o.allowed != c.allowed {
        failures.push(format!(
            "{phase}: {}: expected allowed={}, got {o:?}",
            c.name, c.allowed
        ));
    } else if !c.allowed && !o.stderr.contains(c.phrase) {
        failures.push(format!(
            "{phase}: {}: denial lacks {:?}: {}",
            c.name, c.phrase, o.stderr
        ));
    }
}

/// What the API server's strategies keep from a write through `/status` (and `/finalize`),
/// the facts `WebhookResource::{evaluated,trusted}_subresources` rest on. Real writes as
/// admin, before any admission is registered, on scratch objects.
fn check_subresource_strategies(cp: &ControlPlane, failures: &mut Vec<String>) {
    let json = |args: &[&str]| -> serde_json::Value {
        serde_json::from_str(&cp.kubectl_ok(args, None).stdout).expect("json")
    };
    // (resource, object, kind, namespace, spec change sent through /status)
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&namespace("scratch-status", &[("team", "a")])),
    );
    let items = [
        (
            "httproutes",
            route(
                "HTTPRoute",
                "gateway.networking.k8s.io/v1",
                "tenant-alice",
                "strategy",
                &["s.alice.example.org"],
            ),
            "httproute",
            "tenant-alice",
            r#"{"hostnames":["evil.example.org"]}"#,
        ),
        (
            "listenersets",
            listenerset(
                "gateway.networking.k8s.io/v1",
                "ListenerSet",
                "tenant-alice",
                "strategy",
                "s.alice.example.org",
            ),
            "listenerset",
            "tenant-alice",
            r#"{"listeners":[{"name":"http","port":80,"protocol":"HTTP","hostname":"evil.example.org"}]}"#,
        ),
        (
            "tenants",
            tenant("tenant-alice", "strategy", "s.alice.example.org"),
            "tenant",
            "tenant-alice",
            r#"{"host":"evil.example.org"}"#,
        ),
        (
            "ingresses",
            ingress("tenant-alice", "strategy", "s.alice.example.org"),
            "ingress",
            "tenant-alice",
            r#"{"rules":[{"host":"evil.example.org"}]}"#,
        ),
        (
            "namespaces",
            namespace("scratch-status", &[("team", "a")]),
            "namespace",
            "",
            r#"{"finalizers":["example.com/evil"]}"#,
        ),
    ];
    let results = par_map(&items, |item| -> Option<String> {
        let (what, manifest, kind, ns, spec_patch) =
            (item.0, item.1.as_str(), item.2, item.3, item.4);
        cp.kubectl_ok(&["apply", "-f", "-"], Some(manifest));
        let name = if kind == "namespace" {
            "scratch-status"
        } else {
            "strategy"
        };
        let mut args = vec!["patch", kind, name, "--subresource=status", "--type=merge"];
        if !ns.is_empty() {
            args.extend(["-n", ns]);
        }
        let patch = format!(
            r#"{{"metadata":{{"labels":{{"changed":"yes"}},"annotations":{{"{SERVER_ALIAS}":"evil.example.org"}}}},"spec":{spec_patch}}}"#
        );
        args.extend(["-p", &patch]);
        let o = cp.kubectl(&args, None);
        if !o.allowed {
            return Some(format!(
                "strategy {what}: status patch failed: {}",
                o.stderr
            ));
        }
        let mut get = vec!["get", kind, name, "-o", "json"];
        if !ns.is_empty() {
            get.extend(["-n", ns]);
        }
        let after = json(&get);
        let label_kept = after["metadata"]["labels"]["changed"] == "yes";
        let annotation_kept = after["metadata"]["annotations"][SERVER_ALIAS] == "evil.example.org";
        let spec_text = after["spec"].to_string();
        let spec_changed = spec_text.contains("evil");
        // Built-in Namespace and Ingress status strategies reset spec only; the CRD status
        // strategy keeps nothing but status.
        let keeps_metadata = matches!(what, "namespaces" | "ingresses");
        (label_kept != keeps_metadata || annotation_kept != keeps_metadata || spec_changed).then(|| {
            format!(
                "strategy {what}: after a /status patch labels kept={label_kept}, annotations kept={annotation_kept}, spec changed={spec_changed} (expected metadata kept={keeps_metadata}, spec unchanged): {after}"
            )
        })
    });
    failures.extend(results.into_iter().flatten());
}

/// SPEC §2.2 / issue 6 item 10: thousands of reviews for unknown tenant namespaces, sent
/// straight to the real `serve` (as a client that reaches the webhook port would), cost a
/// bounded number of API GETs, counted by the API server itself.
fn cache_miss_flood(cp: &ControlPlane, hook: &Webhook, failures: &mut Vec<String>) {
    const REVIEWS: usize = 3000;
    const NAMES: usize = 30;
    const CONCURRENCY: usize = 64;
    /// `tenant_gateway::cluster::miss::NEGATIVE_TTL`.
    const TTL_SECS: f64 = 3.0;
    let before = cp.namespace_get_404s();
    let ca = hook.ca_pem.clone();
    let url = format!("https://127.0.0.1:{}/validate/httproutes", hook.port);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let started = Instant::now();
    let (denied_not_found, other) = rt.block_on(async move {
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("ca"))
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let workers: Vec<_> = (0..CONCURRENCY)
            .map(|_| {
                let (client, url, next) = (client.clone(), url.clone(), next.clone());
                tokio::spawn(async move {
                    let (mut ok, mut other) = (0usize, Vec::new());
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if i >= REVIEWS {
                            return (ok, other);
                        }
                        let ns = format!("tenant-ghost-{}", i % NAMES);
                        let body = review(WebhookResource::HttpRoutes)
                            .uid(format!("flood-{i}"))
                            .namespace(&ns)
                            .username("mallory")
                            .object(serde_json::json!({
                                "metadata": {"name": "web", "namespace": ns},
                                "spec": {"hostnames": [format!("x.{ns}.example.org")]}
                            }))
                            .build();
                        let reply = client.post(&url).json(&body).send().await;
                        let text = match reply {
                            Ok(r) => r.text().await.unwrap_or_default(),
                            Err(e) => e.to_string(),
                        };
                        if text.contains("\"allowed\":false") && text.contains("was not found") {
                            ok += 1;
                        } else if other.len() < 3 {
                            other.push(text);
                        }
                    }
                })
            })
            .collect();
        let (mut ok, mut other) = (0, Vec::new());
        for w in workers {
            let (o, mut x) = w.await.expect("worker");
            ok += o;
            other.append(&mut x);
        }
        (ok, other)
    });
    let elapsed = started.elapsed();
    let gets = cp.namespace_get_404s() - before;
    let windows = 1.0 + (elapsed.as_secs_f64() / TTL_SECS).ceil();
    let bound = NAMES as f64 * windows;
    eprintln!(
        "cache-miss flood: {REVIEWS} reviews for {NAMES} unknown namespaces in {elapsed:?}: {gets} namespace GETs answered 404 (bound {bound})"
    );
    if denied_not_found != REVIEWS {
        failures.push(format!(
            "flood: {denied_not_found} of {REVIEWS} reviews were denied as not found; others: {other:?}"
        ));
    }
    if gets < 1.0 || gets > bound {
        failures.push(format!(
            "flood: {gets} namespace GETs for {REVIEWS} reviews of {NAMES} names in {elapsed:?}, expected 1..={bound}"
        ));
    }
    if elapsed > Duration::from_secs(30) {
        failures.push(format!("flood: took {elapsed:?}"));
    }

    // A namespace created right after it was looked up as missing is not denied for seconds:
    // the watch event for it clears the remembered "not found".
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&namespace(
            "tenant-ghost-0",
            &[("namespace.cozystack.io/host", "ghost.example.org")],
        )),
    );
    let created = Instant::now();
    let probe = route(
        "HTTPRoute",
        "gateway.networking.k8s.io/v1",
        "tenant-ghost-0",
        "web",
        &["ghost.example.org"],
    );
    // Back to back: the bound under test is the latency itself.
    let mut last = String::new();
    let admitted = try_poll(Duration::from_millis(1500), Duration::ZERO, || {
        let o = cp.dry_run("alice", &[E2E_GROUP], &probe);
        if o.allowed {
            return Some(());
        }
        last = o.stderr;
        None
    });
    if admitted.is_none() {
        failures.push(format!(
            "flood: a route in tenant-ghost-0 was still denied {:?} after the namespace was created: {last}",
            created.elapsed(),
        ));
    }
}

/// The webhook's apex → namespaces index follows the namespace watch: a custom apex handed to
/// a new namespace is taken from other tenants at once, and freed when the label goes.
fn apex_index_follows_the_watch(cp: &ControlPlane, failures: &mut Vec<String>) {
    let probe = ingress("tenant-alice", "watch", "shop.customer2.io");
    let mut wait = |what: &str, denied: bool| {
        let mut last = None;
        let seen = try_poll(Duration::from_secs(10), EVERY, || {
            let o = cp.dry_run("alice", TENANT, &probe);
            if o.allowed != denied && (!denied || o.stderr.contains("another tenant's namespace")) {
                return Some(());
            }
            last = Some(o);
            None
        });
        if let (None, Some(o)) = (seen, last) {
            failures.push(format!("apex index: {what}: {o:?}"));
        }
    };
    wait("custom domain before any namespace owns it", false);
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&namespace(
            "tenant-cust2",
            &[("namespace.cozystack.io/host", "customer2.io")],
        )),
    );
    wait("custom domain after tenant-cust2 got customer2.io", true);
    cp.kubectl_ok(
        &[
            "label",
            "ns",
            "tenant-cust2",
            "namespace.cozystack.io/host-",
        ],
        None,
    );
    wait("custom domain after the label was removed", false);
}
