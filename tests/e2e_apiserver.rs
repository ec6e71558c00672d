//! Tier 3 (SPEC §7): a real kube-apiserver (tests/k8s harness), the real `tenant-gateway
//! serve` registered as a ValidatingWebhookConfiguration by URL, and kubectl acting as
//! tenants and trusted callers. Then the same requests with only `policies/` installed.
//!
//! The harness is built from Go modules by `tests/k8s/control-plane` (cached after the first
//! build; `scripts/test` builds it before `cargo test`). Set TENANT_GATEWAY_SKIP_E2E=1 to skip
//! this tier on a machine without Go; it is never skipped silently otherwise.

mod common_e2e;

use common_e2e::*;

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
    vec![
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
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    cp.install_crds();
    cp.grant_impersonated_users();
    cp.create_tenant_namespaces();
    let mut failures = Vec::new();
    check_tenantgateway_crd(&cp, &mut failures);

    // --- the webhook ---
    let hook = Webhook::start(&cp);
    hook.register(&cp);
    let cases = cases();
    let webhook_results: Vec<Outcome> = cases
        .iter()
        .map(|c| cp.dry_run(c.user, c.groups, &c.manifest))
        .collect();
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
    hook.unregister(&cp);
    drop(hook);

    // --- the same requests with only policies/ ---
    cp.apply_policies();
    // Bindings take effect once the API server's policy informer has them: wait for a known
    // denial rather than sleeping.
    let probe = &cases
        .iter()
        .find(|c| c.name == "httproute hijacks sibling")
        .expect("probe case")
        .manifest;
    cp.wait_until_denied("alice", TENANT, probe);
    let mut differences = Vec::new();
    for (c, w) in cases.iter().zip(&webhook_results) {
        let v = cp.dry_run(c.user, c.groups, &c.manifest);
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
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
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
}
