//! Charts tier (SPEC §7.4): `helm lint` and `helm template` of `charts/tenant-gateway` and
//! `charts/gateway` with value sets that must render (asserted on the rendered objects) and
//! value sets that must fail (each message asserted). The chart's webhook rules, CRD, flags
//! and metric names are compared with what the binary and the library actually have, so the
//! charts cannot drift from the code. helm is the harness's (`tests/k8s/control-plane
//! --build-only` prints where it is cached).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};
use support::control_plane::harness_bin;
use tenant_gateway::yaml::read_documents;

const RELEASE_NS: &str = "cozy-system";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tenant-gateway")
}

/// The harness's helm: built once and cached under ~/.cache/tenant-gateway.
fn helm() -> PathBuf {
    harness_bin("helm")
}

fn chart(name: &str) -> String {
    repo()
        .join("charts")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// `helm template` in `ns`; Ok(objects) or Err(stderr).
fn template(chart_name: &str, ns: &str, args: &[&str]) -> Result<Vec<Value>, String> {
    let out = Command::new(helm())
        .args(["template", "rel", &chart(chart_name), "--namespace", ns])
        .args(args)
        .output()
        .expect("helm runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).expect("utf-8");
    Ok(parse_docs(&text))
}

/// The objects as kubectl reads them (empty documents left out).
fn parse_docs(text: &str) -> Vec<Value> {
    read_documents(text)
        .into_iter()
        .map(|d| d.value.expect("rendered YAML parses"))
        .collect()
}

/// The install chart with the one value it requires.
fn tg(args: &[&str]) -> Vec<Value> {
    tg_in(RELEASE_NS, args)
}

fn tg_in(ns: &str, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--set", "rootHost=example.org"];
    all.extend_from_slice(args);
    template("tenant-gateway", ns, &all).unwrap_or_else(|e| panic!("render {args:?}: {e}"))
}

fn tg_fails(args: &[&str]) -> String {
    match template("tenant-gateway", RELEASE_NS, args) {
        Ok(_) => panic!("rendering with {args:?} must fail"),
        Err(e) => e,
    }
}

fn gw(args: &[&str]) -> Vec<Value> {
    template("gateway", "tenant-alice", args).unwrap_or_else(|e| panic!("render {args:?}: {e}"))
}

fn gw_fails(args: &[&str]) -> String {
    match template("gateway", "tenant-alice", args) {
        Ok(_) => panic!("rendering with {args:?} must fail"),
        Err(e) => e,
    }
}

fn find<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| o["kind"] == kind).collect()
}

fn one<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    let found = find(objs, kind);
    assert_eq!(found.len(), 1, "exactly one {kind}, got {}", found.len());
    found[0]
}

fn container(objs: &[Value]) -> &Value {
    &one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

fn args_of(objs: &[Value]) -> Vec<String> {
    container(objs)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect()
}

fn arg_value(args: &[String], flag: &str) -> Option<String> {
    let prefix = format!("{flag}=");
    args.iter()
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_string))
}

fn assert_contains(haystack: &str, needles: &[&str]) {
    for n in needles {
        assert!(haystack.contains(n), "{n:?} not in:\n{haystack}");
    }
}

// ---------------------------------------------------------------------------------------
// lint

#[test]
fn helm_lint_both_charts() {
    for (name, args) in [
        ("tenant-gateway", vec!["--set", "rootHost=example.org"]),
        (
            "gateway",
            vec!["--set", "_namespace.host=alice.example.org"],
        ),
    ] {
        let out = Command::new(helm())
            .args(["lint", "--strict", &chart(name)])
            .args(&args)
            .output()
            .expect("helm lint runs");
        assert!(
            out.status.success(),
            "helm lint {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

// ---------------------------------------------------------------------------------------
// tenant-gateway: webhook registration

/// The binary's by-URL registration (`tenant-gateway webhook-configuration`).
fn binary_registration() -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    // A real CA: webhook-configuration embeds only CERTIFICATE blocks and refuses anything else.
    let certs = Command::new(bin())
        .arg("certs")
        .arg("--out")
        .arg(dir.path())
        .output()
        .expect("tenant-gateway certs runs");
    assert!(
        certs.status.success(),
        "{}",
        String::from_utf8_lossy(&certs.stderr)
    );
    let ca = dir.path().join("ca.crt");
    let out = Command::new(bin())
        .args(["webhook-configuration", "--url", "https://127.0.0.1:8443"])
        .arg("--ca-file")
        .arg(&ca)
        .output()
        .expect("tenant-gateway runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = parse_docs(&String::from_utf8(out.stdout).expect("utf-8"));
    docs.into_iter().next().expect("one document")
}

/// The kinds whose layer checks only tenant namespaces (SPEC §2.2: layers 2, 7, 8; §2.3
/// layer 9).
const TENANT_SCOPED: [&str; 7] = [
    "gateways",
    "listenersets",
    "httproutes",
    "tlsroutes",
    "grpcroutes",
    "ingresses",
    "tenantgateways",
];

#[test]
fn webhook_rules_match_the_binary_registration() {
    let objs = tg(&[]);
    let chart = one(&objs, "ValidatingWebhookConfiguration");
    let binary = binary_registration();
    let chart_hooks = chart["webhooks"].as_array().expect("webhooks");
    let binary_hooks = binary["webhooks"].as_array().expect("webhooks");
    let names = |hs: &[Value]| -> Vec<String> {
        hs.iter()
            .map(|h| h["name"].as_str().expect("name").to_string())
            .collect()
    };
    assert_eq!(
        names(chart_hooks),
        names(binary_hooks),
        "same webhooks, same order"
    );
    assert_eq!(chart_hooks.len(), 10, "one webhook per path");
    for (c, b) in chart_hooks.iter().zip(binary_hooks) {
        let name = c["name"].as_str().expect("name");
        // Rules compared as sets of (group, version, resource, operation, scope), so
        // neither side's ordering of a list makes a difference.
        let flat = |h: &Value| -> BTreeSet<(String, String, String, String, String)> {
            let mut set = BTreeSet::new();
            for r in h["rules"].as_array().expect("rules") {
                for g in r["apiGroups"].as_array().expect("groups") {
                    for v in r["apiVersions"].as_array().expect("versions") {
                        for res in r["resources"].as_array().expect("resources") {
                            for op in r["operations"].as_array().expect("operations") {
                                set.insert((
                                    g.as_str().unwrap_or_default().into(),
                                    v.as_str().unwrap_or_default().into(),
                                    res.as_str().unwrap_or_default().into(),
                                    op.as_str().unwrap_or_default().into(),
                                    r["scope"].as_str().unwrap_or_default().into(),
                                ));
                            }
                        }
                    }
                }
            }
            set
        };
        assert_eq!(flat(c), flat(b), "{name}: rules differ from the binary's");
        for key in [
            "failurePolicy",
            "matchPolicy",
            "sideEffects",
            "timeoutSeconds",
            "admissionReviewVersions",
        ] {
            assert_eq!(c[key], b[key], "{name}: {key}");
        }
        // The binary's exclusions hold in the chart too (the chart adds its own namespace).
        for sel in ["namespaceSelector", "objectSelector"] {
            assert_eq!(c[sel].is_null(), b[sel].is_null(), "{name}: {sel} presence");
            if let Some(b_exprs) = b[sel]["matchExpressions"].as_array() {
                let b_values = &b_exprs[0]["values"];
                let c_values = c[sel]["matchExpressions"][0]["values"]
                    .as_array()
                    .expect("values");
                for v in b_values.as_array().expect("values") {
                    assert!(c_values.contains(v), "{name}: {sel} must exclude {v}");
                }
            }
        }
        // Word for word: each expression is false only for requests the layer admits
        // (src/admission/registration.rs), so a chart that drifted could skip a judged one.
        assert_eq!(
            c["matchConditions"], b["matchConditions"],
            "{name}: matchConditions differ from the binary's"
        );
        let path = c["clientConfig"]["service"]["path"].as_str().expect("path");
        assert_eq!(
            b["clientConfig"]["url"],
            format!("https://127.0.0.1:8443{path}"),
            "{name}: same path as the binary's"
        );
    }
}

#[test]
fn webhook_settings_exclusions_and_match_conditions() {
    let objs = tg(&[]);
    let vwc = one(&objs, "ValidatingWebhookConfiguration");
    let mut seen = BTreeSet::new();
    for h in vwc["webhooks"].as_array().expect("webhooks") {
        let name = h["name"].as_str().expect("name");
        let resource = name.split('.').next().expect("resource part");
        seen.insert(resource.to_string());
        assert_eq!(h["failurePolicy"], "Fail", "{name}");
        assert_eq!(h["timeoutSeconds"], 5, "{name}");
        assert_eq!(h["sideEffects"], "None", "{name}");
        assert_eq!(h["matchPolicy"], "Equivalent", "{name}");
        assert_eq!(h["admissionReviewVersions"], json!(["v1"]), "{name}");
        for r in h["rules"].as_array().expect("rules") {
            // Only a TenantGateway's deletion is judged (layer 9).
            let ops = if resource == "tenantgateways" {
                json!(["CREATE", "UPDATE", "DELETE"])
            } else {
                json!(["CREATE", "UPDATE"])
            };
            assert_eq!(r["operations"], ops, "{name}");
            for res in r["resources"].as_array().expect("resources") {
                let res = res.as_str().expect("resource");
                if let Some((_, sub)) = res.split_once('/') {
                    let allowed = matches!(
                        res,
                        "namespaces/status"
                            | "namespaces/finalize"
                            | "ingresses/status"
                            | "tenants/status"
                    );
                    assert!(allowed, "{name}: unexpected subresource {sub}");
                }
            }
        }
        assert_eq!(
            h["clientConfig"]["service"],
            json!({"name": "rel-tenant-gateway", "namespace": RELEASE_NS,
                   "path": format!("/validate/{resource}"), "port": 443}),
            "{name}"
        );
        let excluded = json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
            "operator": "NotIn", "values": ["kube-system", RELEASE_NS]}]});
        match resource {
            "namespaces" => {
                assert_eq!(h["objectSelector"], excluded, "{name}");
                assert!(h["namespaceSelector"].is_null());
            }
            "packages" => {
                assert!(h["objectSelector"].is_null() && h["namespaceSelector"].is_null());
            }
            _ => assert_eq!(h["namespaceSelector"], excluded, "{name}"),
        }
        let conditions: Vec<&str> = h["matchConditions"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| c["name"].as_str().expect("condition name"))
                    .collect()
            })
            .unwrap_or_default();
        if TENANT_SCOPED.contains(&resource) {
            assert_eq!(
                h["matchConditions"][0],
                json!({"name": "tenant-scope",
                       "expression": "request.namespace.startsWith('tenant-')"}),
                "{name}"
            );
        } else {
            assert!(
                !conditions.contains(&"tenant-scope"),
                "{name}: not tenant-scoped"
            );
        }
        // The conditions that spare calls whose answer is known, on their kinds only.
        let known_answer = match resource {
            "ingresses" => Some("main-resource-or-read-field-changed"),
            "namespaces" => Some("labels-or-annotations-changed"),
            "tenants" => Some("host-set-or-changed"),
            "packages" => Some("attached-namespaces-present"),
            _ => None,
        };
        let expected: Vec<&str> = TENANT_SCOPED
            .contains(&resource)
            .then_some("tenant-scope")
            .into_iter()
            .chain(known_answer)
            .collect();
        assert_eq!(conditions, expected, "{name}");
    }
    assert_eq!(seen.len(), 10);
    let ns_hook = &vwc["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .find(|h| h["name"] == "namespaces.tenant-gateway.cozystack.io")
        .expect("namespaces hook")["rules"][0]["resources"];
    assert_eq!(
        ns_hook,
        &json!(["namespaces", "namespaces/status", "namespaces/finalize"])
    );

    // Another release namespace and tenant prefix follow through.
    let objs = tg_in("platform", &["--set", "tenantPrefix=t-"]);
    let vwc = one(&objs, "ValidatingWebhookConfiguration");
    let gw_hook = &vwc["webhooks"][0];
    assert_eq!(
        gw_hook["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["kube-system", "platform"])
    );
    assert_eq!(
        gw_hook["matchConditions"][0]["expression"],
        "request.namespace.startsWith('t-')"
    );
}

#[test]
fn webhook_by_url_and_switched_off() {
    let objs = tg(&[
        "--set",
        "webhook.url=https://10.0.0.5:8443/",
        "--set",
        "certificates.mode=manual",
        "--set",
        "certificates.manual.secretName=tg-tls",
        "--set",
        "certificates.manual.caBundle=Q0E=",
    ]);
    let vwc = one(&objs, "ValidatingWebhookConfiguration");
    for h in vwc["webhooks"].as_array().expect("webhooks") {
        let resource = h["name"]
            .as_str()
            .expect("name")
            .split('.')
            .next()
            .unwrap_or("");
        assert_eq!(
            h["clientConfig"],
            json!({"url": format!("https://10.0.0.5:8443/validate/{resource}"), "caBundle": "Q0E="})
        );
    }
    let objs = tg(&["--set", "webhook.enabled=false"]);
    assert!(find(&objs, "ValidatingWebhookConfiguration").is_empty());
    assert!(args_of(&objs).contains(&"--no-webhook".to_string()));
}

// ---------------------------------------------------------------------------------------
// tenant-gateway: Deployment

#[test]
fn deployment_is_highly_available_probed_and_locked_down() {
    let objs = tg(&[]);
    let dep = one(&objs, "Deployment");
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(dep["spec"]["replicas"], 2);
    let anti =
        &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        anti["labelSelector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
    let pdb = one(&objs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"], dep["spec"]["selector"]);

    let c = container(&objs);
    let metrics_port = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == "metrics")
        .expect("metrics port")["containerPort"]
        .clone();
    assert_eq!(metrics_port, 9090);
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "metrics"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "metrics"})
    );
    let args = args_of(&objs);
    assert_eq!(
        arg_value(&args, "--metrics-listen").as_deref(),
        Some("0.0.0.0:9090")
    );
    assert_eq!(
        arg_value(&args, "--listen").as_deref(),
        Some("0.0.0.0:8443")
    );
    for k in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(c["resources"][k][r].is_string(), "resources.{k}.{r}");
        }
    }
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert!(pod["securityContext"]["runAsUser"].as_i64().unwrap_or(0) > 0);
    // The drain window of the binary fits in the pod's grace period.
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    assert_eq!(arg_value(&args, "--shutdown-grace").as_deref(), Some("20"));
    assert_eq!(pod["serviceAccountName"], "rel-tenant-gateway");

    let svc = one(&objs, "Service");
    let ports: BTreeMap<String, Value> = svc["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or("").to_string(),
                p["targetPort"].clone(),
            )
        })
        .collect();
    assert_eq!(ports["webhook"], "webhook");
    assert_eq!(ports["metrics"], "metrics");
}

#[test]
fn image_values_and_enforcement_per_layer() {
    let objs = tg(&[
        "--set",
        "image.repository=registry.example/tg",
        "--set",
        "image.tag=1.2.3",
        "--set",
        "image.pullPolicy=Always",
        "--set",
        "enforcement.route=warn",
        "--set",
        "enforcement.gateway=audit",
    ]);
    let c = container(&objs);
    assert_eq!(c["image"], "registry.example/tg:1.2.3");
    assert_eq!(c["imagePullPolicy"], "Always");
    let args = args_of(&objs);
    assert_eq!(
        arg_value(&args, "--enforcement").as_deref(),
        Some(
            "gateway=audit,ingress=deny,namespace=deny,package=deny,route=warn,tenant=deny,tenantgateway=deny"
        )
    );
    // Default tag: the chart's appVersion.
    let c = container(&tg(&[])).clone();
    assert!(
        c["image"].as_str().unwrap_or("").ends_with(":0.1.0"),
        "{}",
        c["image"]
    );

    // A values file that says `ingress: off` (YAML 1.1 false) still means the mode off,
    // and then rootHost is not required.
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("v.yaml");
    std::fs::write(&f, "enforcement:\n  ingress: off\n").expect("write values");
    let objs = template(
        "tenant-gateway",
        RELEASE_NS,
        &["-f", f.to_str().expect("path")],
    )
    .expect("renders without rootHost while ingress is off");
    let args = args_of(&objs);
    assert!(
        arg_value(&args, "--enforcement")
            .unwrap_or_default()
            .contains("ingress=off")
    );
    assert_eq!(arg_value(&args, "--root-host"), None);
}

/// Every flag of `tenant-gateway serve --help` is reachable from the chart's values.
#[test]
fn every_serve_flag_is_a_value() {
    let out = Command::new(bin())
        .args(["serve", "--help"])
        .output()
        .expect("tenant-gateway runs");
    let help = String::from_utf8(out.stdout).expect("utf-8");
    let flags: BTreeSet<String> = help
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .split('=')
                .next()
                .unwrap_or("")
                .to_string()
        })
        .filter(|f| f != "--help")
        .collect();
    assert!(flags.len() >= 20, "parsed the flags: {flags:?}");

    let mut rendered = BTreeSet::new();
    for set in [
        vec![
            "--set",
            "tls.clientCAConfigMap=client-ca",
            "--set",
            "guardedLabels={example.com/a}",
            "--set",
            "guardedAnnotations={example.com/b}",
            "--set",
            "controller.uniformPortKinds=true",
            "--set",
            "kubeconfig=/etc/kube/config",
            "--set",
            "namespacesFile=/etc/ns.yaml",
            "--set",
            "audit.policyReports=true",
        ],
        vec!["--set", "certificates.mode=self"],
        vec![
            "--set",
            "webhook.enabled=false",
            "--set",
            "controller.enabled=false",
            "--set",
            "replicator.enabled=false",
            "--set",
            "audit.enabled=false",
        ],
    ] {
        for a in args_of(&tg(&set)) {
            rendered.insert(a.split('=').next().unwrap_or("").to_string());
        }
    }
    let missing: Vec<&String> = flags.iter().filter(|f| !rendered.contains(*f)).collect();
    assert!(
        missing.is_empty(),
        "serve flags without a chart value: {missing:?}"
    );
}

/// SPEC §3.10: `controller.passthroughGateway` is `--passthrough-gateway`, `shared` unless set,
/// and the binary accepts what the chart renders (and refuses anything else).
#[test]
fn passthrough_gateway_value_is_the_flag() {
    for (set, want) in [(None, "shared"), (Some("separate"), "separate")] {
        let value = set.map(|v| format!("controller.passthroughGateway={v}"));
        let args: Vec<&str> = match &value {
            Some(v) => vec!["--set", v.as_str()],
            None => Vec::new(),
        };
        let rendered = args_of(&tg(&args));
        let flag = arg_value(&rendered, "--passthrough-gateway");
        assert_eq!(flag.as_deref(), Some(want), "{rendered:?}");
        let out = Command::new(bin())
            .args(["serve", &format!("--passthrough-gateway={want}"), "--help"])
            .output()
            .expect("tenant-gateway runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::new(bin())
        .args(["serve", "--passthrough-gateway=split", "--help"])
        .output()
        .expect("tenant-gateway runs");
    assert!(!out.status.success(), "an unknown layout is refused");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("separate"),
        "the error lists the values: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The policy flags the chart renders are accepted by the binary (same parser as serve).
#[test]
fn rendered_policy_flags_are_accepted_by_the_binary() {
    let objs = tg(&[
        "--set",
        "enforcement.route=warn",
        "--set",
        "guardedLabels={namespace.cozystack.io/host}",
        "--set",
        "guardedAnnotations={gateway.cozystack.io/attached-by}",
    ]);
    let policy: Vec<String> = args_of(&objs)
        .into_iter()
        .filter(|a| {
            [
                "--root-host=",
                "--tenant-prefix=",
                "--system-prefix=",
                "--trusted-group=",
                "--guarded-label=",
                "--guarded-annotation=",
                "--enforcement=",
            ]
            .iter()
            .any(|p| a.starts_with(p))
        })
        .collect();
    assert_eq!(policy.len(), 7, "{policy:?}");
    let dir = tempfile::tempdir().expect("tempdir");
    let ns = dir.path().join("ns.yaml");
    std::fs::write(
        &ns,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tenant-alice\n  labels:\n    namespace.cozystack.io/host: alice.example.org\n",
    )
    .expect("write snapshot");
    let route = dir.path().join("route.yaml");
    std::fs::write(
        &route,
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: r\n  namespace: tenant-alice\nspec:\n  hostnames: [shop.bob.example.org]\n",
    )
    .expect("write route");
    let out = Command::new(bin())
        .arg("check")
        .args(&policy)
        .arg("--namespaces")
        .arg(&ns)
        .arg("-f")
        .arg(&route)
        .output()
        .expect("tenant-gateway runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // route=warn from the chart: admitted with a warning, exit 0.
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("WARNED") && stdout.contains("shop.bob.example.org"),
        "route=warn admits with the violation: {stdout}"
    );
    // Without the override the chart's default (deny) denies it: exit 1.
    let deny: Vec<String> = policy
        .iter()
        .map(|a| {
            if a.starts_with("--enforcement=") {
                a.replace("route=warn", "route=deny")
            } else {
                a.clone()
            }
        })
        .collect();
    let out = Command::new(bin())
        .arg("check")
        .args(&deny)
        .arg("--namespaces")
        .arg(&ns)
        .arg("-f")
        .arg(&route)
        .output()
        .expect("tenant-gateway runs");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("DENIED"));
}

#[test]
fn trusted_groups_cover_the_charts_service_account() {
    let default_groups: Vec<String> = tenant_gateway::policy::DEFAULT_TRUSTED_GROUPS
        .iter()
        .map(|s| s.to_string())
        .collect();
    // Release namespace cozy-system: its SA group is one of the defaults, nothing added.
    let args = args_of(&tg(&[]));
    assert_eq!(
        arg_value(&args, "--trusted-group").expect("flag"),
        default_groups.join(","),
        "the chart's list is the binary's default list"
    );
    // Elsewhere the release namespace's SA group is appended: the reconciler writes the
    // guarded gateway label and must pass layer 5.
    let args = args_of(&tg_in("platform", &[]));
    let mut want = default_groups.clone();
    want.push("system:serviceaccounts:platform".into());
    assert_eq!(
        arg_value(&args, "--trusted-group").expect("flag"),
        want.join(",")
    );
    let args = args_of(&tg_in(
        "platform",
        &["--set", "trustReleaseNamespace=false"],
    ));
    assert_eq!(
        arg_value(&args, "--trusted-group").expect("flag"),
        default_groups.join(",")
    );
    let e = match template(
        "tenant-gateway",
        "platform",
        &[
            "--set",
            "rootHost=x.org",
            "--set",
            "trustReleaseNamespace=false",
            "--set",
            "trustedGroups=null",
        ],
    ) {
        Ok(_) => panic!("an empty trusted list must fail"),
        Err(e) => e,
    };
    assert_contains(&e, &["trustedGroups is empty"]);
}

// ---------------------------------------------------------------------------------------
// tenant-gateway: RBAC

type Rules = BTreeSet<(String, String, String, Option<String>)>;

fn rules_of(role: &Value) -> Rules {
    let mut set = BTreeSet::new();
    for r in role["rules"].as_array().expect("rules") {
        let names: Vec<Option<String>> = match r["resourceNames"].as_array() {
            Some(n) => n.iter().map(|x| x.as_str().map(str::to_string)).collect(),
            None => vec![None],
        };
        for g in r["apiGroups"].as_array().expect("groups") {
            for res in r["resources"].as_array().expect("resources") {
                for v in r["verbs"].as_array().expect("verbs") {
                    for n in &names {
                        set.insert((
                            g.as_str().unwrap_or("").to_string(),
                            res.as_str().unwrap_or("").to_string(),
                            v.as_str().unwrap_or("").to_string(),
                            n.clone(),
                        ));
                    }
                }
            }
        }
    }
    set
}

fn rules(list: &[(&str, &str, &[&str])]) -> Rules {
    let mut set = BTreeSet::new();
    for (g, r, verbs) in list {
        for v in *verbs {
            set.insert((g.to_string(), r.to_string(), v.to_string(), None));
        }
    }
    set
}

/// The verbs the code uses, each with its call site. Nothing else may be granted.
fn expected_cluster_rules() -> Rules {
    rules(&[
        // cluster/namespaces.rs: metadata watcher (list, watch) and the live GET on a cache
        // miss; reconcile/apply.rs: get before the label write, then a merge patch.
        ("", "namespaces", &["get", "list", "watch", "patch"]),
        // controller.rs: reflector + watcher on TenantGateways; kube-runtime's finalizer()
        // adds/removes the finalizer with a JSON patch; apply.rs status(): patch_status (SSA).
        (
            "gateway.cozystack.io",
            "tenantgateways",
            &["list", "watch", "patch"],
        ),
        ("gateway.cozystack.io", "tenantgateways/status", &["patch"]),
        // controller.rs watch_owned (cluster/watch.rs guarded watcher: list, watch);
        // apply.rs ssa(): server-side apply patch, which the API server also authorizes as
        // `create` when the object does not exist yet (tests/e2e_charts.rs hit exactly that
        // "forbidden"); apply.rs delete() of owned objects.
        (
            "gateway.networking.k8s.io",
            "gateways",
            &["list", "watch", "create", "patch", "delete"],
        ),
        (
            "cert-manager.io",
            "issuers",
            &["list", "watch", "create", "patch", "delete"],
        ),
        (
            "cert-manager.io",
            "certificates",
            &["list", "watch", "create", "patch", "delete"],
        ),
        // HTTPRoutes: watched for the route index, the redirect route applied/deleted,
        // apply.rs route_status(): a tested JSON Patch (patch_status), on a moved-on route
        // get_opt then replace_status.
        (
            "gateway.networking.k8s.io",
            "httproutes",
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        (
            "gateway.networking.k8s.io",
            "httproutes/status",
            &["patch", "update"],
        ),
        (
            "gateway.networking.k8s.io",
            "tlsroutes",
            &["get", "list", "watch"],
        ),
        (
            "gateway.networking.k8s.io",
            "tlsroutes/status",
            &["patch", "update"],
        ),
        // kube-runtime Recorder::publish: create, then patch to count a repeated event.
        ("events.k8s.io", "events", &["create", "patch"]),
        // audit/live.rs: every guarded kind watched as a projection (the reconciler's own
        // grants above cover gateways, httproutes, tlsroutes and tenantgateways already).
        (
            "gateway.networking.k8s.io",
            "listenersets",
            &["list", "watch"],
        ),
        (
            "gateway.networking.k8s.io",
            "grpcroutes",
            &["list", "watch"],
        ),
        (
            "gateway.networking.x-k8s.io",
            "xlistenersets",
            &["list", "watch"],
        ),
        ("networking.k8s.io", "ingresses", &["list", "watch"]),
        ("cozystack.io", "packages", &["list", "watch"]),
        // replicate/run.rs: the values Secret and the source name watched by field selector,
        // the replicas by label selector, in every namespace (list, watch); server-side apply
        // of a replica (patch, and create when it does not exist yet); the prune (delete).
        (
            "",
            "secrets",
            &["list", "watch", "create", "patch", "delete"],
        ),
    ])
}

#[test]
fn rbac_grants_exactly_the_verbs_the_code_uses() {
    let objs = tg(&[]);
    let cr = one(&objs, "ClusterRole");
    assert_eq!(rules_of(cr), expected_cluster_rules());
    let role = one(&objs, "Role");
    assert_eq!(role["metadata"]["namespace"], RELEASE_NS);
    // cluster/lease.rs step(): get_opt, create when absent, replace to renew/take over.
    let mut want = rules(&[("coordination.k8s.io", "leases", &["create"])]);
    for v in ["get", "update"] {
        want.insert((
            "coordination.k8s.io".into(),
            "leases".into(),
            v.into(),
            Some("tenant-gateway".into()),
        ));
    }
    assert_eq!(rules_of(role), want);
    for binding in [one(&objs, "ClusterRoleBinding"), one(&objs, "RoleBinding")] {
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "rel-tenant-gateway", "namespace": RELEASE_NS}])
        );
    }
    assert_eq!(
        one(&objs, "ServiceAccount")["metadata"]["name"],
        "rel-tenant-gateway"
    );
    // Secrets only for the replicator, and never `get` (nothing reads one Secret by name).
    assert!(
        !rules_of(cr)
            .iter()
            .any(|(_, r, v, _)| r == "secrets" && v == "get")
    );

    // The Lease follows leaderElection.*.
    let objs = tg(&[
        "--set",
        "leaderElection.namespace=cozy-leases",
        "--set",
        "leaderElection.name=tg-lock",
    ]);
    let role = one(&objs, "Role");
    assert_eq!(role["metadata"]["namespace"], "cozy-leases");
    assert_eq!(role["rules"][1]["resourceNames"], json!(["tg-lock"]));
    let args = args_of(&objs);
    assert_eq!(
        arg_value(&args, "--leader-election-namespace").as_deref(),
        Some("cozy-leases")
    );
    assert_eq!(
        arg_value(&args, "--leader-election-name").as_deref(),
        Some("tg-lock")
    );

    // Webhook only: read namespaces, nothing else.
    let objs = tg(&[
        "--set",
        "controller.enabled=false",
        "--set",
        "replicator.enabled=false",
        "--set",
        "audit.enabled=false",
    ]);
    assert_eq!(
        rules_of(one(&objs, "ClusterRole")),
        rules(&[("", "namespaces", &["get", "list", "watch"])])
    );
    assert!(find(&objs, "Role").is_empty());
    let args = args_of(&objs);
    assert!(args.contains(&"--no-controller".to_string()));
    assert!(args.contains(&"--no-replicator".to_string()));
    assert!(args.contains(&"--no-audit".to_string()));

    // The audit alone: read the guarded kinds; no events (they need the reconciler's Lease).
    let objs = tg(&[
        "--set",
        "controller.enabled=false",
        "--set",
        "replicator.enabled=false",
    ]);
    assert_eq!(
        rules_of(one(&objs, "ClusterRole")),
        rules(&[
            ("", "namespaces", &["get", "list", "watch"]),
            ("gateway.networking.k8s.io", "gateways", &["list", "watch"]),
            (
                "gateway.networking.k8s.io",
                "listenersets",
                &["list", "watch"]
            ),
            (
                "gateway.networking.k8s.io",
                "httproutes",
                &["list", "watch"]
            ),
            ("gateway.networking.k8s.io", "tlsroutes", &["list", "watch"]),
            (
                "gateway.networking.k8s.io",
                "grpcroutes",
                &["list", "watch"]
            ),
            (
                "gateway.networking.x-k8s.io",
                "xlistenersets",
                &["list", "watch"]
            ),
            ("networking.k8s.io", "ingresses", &["list", "watch"]),
            ("cozystack.io", "packages", &["list", "watch"]),
            ("gateway.cozystack.io", "tenantgateways", &["list", "watch"]),
        ])
    );
    assert!(find(&objs, "Role").is_empty());
    assert!(!args_of(&objs).contains(&"--no-audit".to_string()));
    assert!(!args.iter().any(|a| a.starts_with("--values-secret-")));

    // Replicator without the reconciler: Secrets, events and the Lease (it runs the
    // election itself), nothing of the reconciler's.
    let objs = tg(&[
        "--set",
        "controller.enabled=false",
        "--set",
        "audit.enabled=false",
    ]);
    assert_eq!(
        rules_of(one(&objs, "ClusterRole")),
        rules(&[
            ("", "namespaces", &["get", "list", "watch"]),
            (
                "",
                "secrets",
                &["list", "watch", "create", "patch", "delete"]
            ),
            ("events.k8s.io", "events", &["create", "patch"]),
        ])
    );
    assert_eq!(
        one(&objs, "Role")["rules"][0]["resources"],
        json!(["leases"])
    );
    assert!(
        find(&objs, "RoleBinding")
            .iter()
            .any(|b| b["roleRef"]["name"] == "rel-tenant-gateway-leader-election")
    );

    // replicator.secretNames narrows patch and delete to those names.
    let objs = tg(&[
        "--set",
        "controller.enabled=false",
        "--set",
        "audit.enabled=false",
        "--set",
        "replicator.secretNames={wild,wild-old}",
    ]);
    let mut want = rules(&[
        ("", "namespaces", &["get", "list", "watch"]),
        ("", "secrets", &["list", "watch", "create"]),
        ("events.k8s.io", "events", &["create", "patch"]),
    ]);
    for name in ["wild", "wild-old"] {
        for v in ["patch", "delete"] {
            want.insert(("".into(), "secrets".into(), v.into(), Some(name.into())));
        }
    }
    assert_eq!(rules_of(one(&objs, "ClusterRole")), want);

    // The values location reaches the flags.
    let objs = tg(&[
        "--set",
        "replicator.valuesSecret.namespace=platform",
        "--set",
        "replicator.valuesSecret.name=values",
        "--set",
        "replicator.valuesSecret.key=cluster.yaml",
    ]);
    let args = args_of(&objs);
    for (flag, value) in [
        ("--values-secret-namespace", "platform"),
        ("--values-secret-name", "values"),
        ("--values-secret-key", "cluster.yaml"),
    ] {
        assert_eq!(arg_value(&args, flag).as_deref(), Some(value), "{flag}");
    }
}

// ---------------------------------------------------------------------------------------
// tenant-gateway: certificates

#[test]
fn cert_manager_mode_with_its_own_ca_or_a_given_issuer() {
    let objs = tg(&[]);
    let vwc = one(&objs, "ValidatingWebhookConfiguration");
    assert_eq!(
        vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{RELEASE_NS}/rel-tenant-gateway-serving")
    );
    let certs = find(&objs, "Certificate");
    let serving = certs
        .iter()
        .find(|c| c["metadata"]["name"] == "rel-tenant-gateway-serving")
        .expect("serving certificate");
    assert_eq!(
        serving["spec"]["dnsNames"],
        json!([
            format!("rel-tenant-gateway.{RELEASE_NS}.svc"),
            format!("rel-tenant-gateway.{RELEASE_NS}.svc.cluster.local")
        ])
    );
    assert_eq!(
        serving["spec"]["issuerRef"]["name"],
        "rel-tenant-gateway-ca"
    );
    let ca = certs
        .iter()
        .find(|c| c["metadata"]["name"] == "rel-tenant-gateway-ca")
        .expect("CA certificate");
    assert_eq!(ca["spec"]["isCA"], true);
    let issuers = find(&objs, "Issuer");
    assert_eq!(issuers.len(), 2);
    assert!(issuers.iter().any(|i| i["spec"]["selfSigned"].is_object()));
    assert!(
        issuers
            .iter()
            .any(|i| i["spec"]["ca"]["secretName"] == "rel-tenant-gateway-ca")
    );
    // The pod mounts what the Certificate writes, and the flags read it.
    let pod = &one(&objs, "Deployment")["spec"]["template"]["spec"];
    let tls_volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "tls")
        .expect("tls volume");
    assert_eq!(
        tls_volume["secret"]["secretName"],
        serving["spec"]["secretName"]
    );
    let args = args_of(&objs);
    assert_eq!(
        arg_value(&args, "--tls-cert-file").as_deref(),
        Some("/tls/tls.crt")
    );
    assert_eq!(
        arg_value(&args, "--tls-key-file").as_deref(),
        Some("/tls/tls.key")
    );
    for h in vwc["webhooks"].as_array().expect("webhooks") {
        assert!(
            h["clientConfig"]["caBundle"].is_null(),
            "cainjector fills it"
        );
    }

    let objs = tg(&[
        "--set",
        "certificates.certManager.issuerRef.name=platform-ca",
        "--set",
        "certificates.certManager.issuerRef.kind=ClusterIssuer",
    ]);
    let certs = find(&objs, "Certificate");
    assert_eq!(certs.len(), 1);
    assert_eq!(
        certs[0]["spec"]["issuerRef"],
        json!({"name": "platform-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
    );
    assert!(find(&objs, "Issuer").is_empty());
}

#[test]
fn manual_mode_uses_the_given_secret_and_ca() {
    let objs = tg(&[
        "--set",
        "certificates.mode=manual",
        "--set",
        "certificates.manual.secretName=my-tls",
        "--set",
        "certificates.manual.caBundle=Q0E=",
    ]);
    assert!(find(&objs, "Certificate").is_empty());
    assert!(find(&objs, "Issuer").is_empty());
    let vwc = one(&objs, "ValidatingWebhookConfiguration");
    assert!(vwc["metadata"]["annotations"].is_null());
    for h in vwc["webhooks"].as_array().expect("webhooks") {
        assert_eq!(h["clientConfig"]["caBundle"], "Q0E=");
    }
    let pod = &one(&objs, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "my-tls");
}

#[test]
fn self_mode_runs_the_binarys_own_ca_with_its_rbac() {
    let objs = tg(&[
        "--set",
        "certificates.mode=self",
        "--set",
        "certificates.self.validity=86400",
        "--set",
        "certificates.self.extraHosts={10.0.0.5}",
    ]);
    assert!(find(&objs, "Certificate").is_empty());
    assert!(find(&objs, "Issuer").is_empty());
    let vwc = one(&objs, "ValidatingWebhookConfiguration");
    assert!(vwc["metadata"]["annotations"].is_null(), "no cainjector");
    for h in vwc["webhooks"].as_array().expect("webhooks") {
        assert!(
            h["clientConfig"]["caBundle"].is_null(),
            "the binary fills it"
        );
    }
    let args = args_of(&objs);
    assert_eq!(arg_value(&args, "--tls-cert-file"), None);
    assert_eq!(
        arg_value(&args, "--self-cert-secret").as_deref(),
        Some("rel-tenant-gateway-self-tls")
    );
    assert_eq!(
        arg_value(&args, "--self-cert-namespace").as_deref(),
        Some(RELEASE_NS)
    );
    assert_eq!(
        arg_value(&args, "--self-cert-host").as_deref(),
        Some(
            "rel-tenant-gateway.cozy-system.svc,rel-tenant-gateway.cozy-system.svc.cluster.local,10.0.0.5"
        )
    );
    assert_eq!(
        arg_value(&args, "--self-cert-validity").as_deref(),
        Some("86400")
    );
    assert_eq!(
        arg_value(&args, "--webhook-configuration-name"),
        vwc["metadata"]["name"].as_str().map(str::to_string)
    );
    // The pair lives in a writable emptyDir under the read-only root filesystem.
    let dir = arg_value(&args, "--self-cert-dir").expect("dir");
    let c = container(&objs);
    let mount = c["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| dir.starts_with(m["mountPath"].as_str().unwrap_or("?")))
        .expect("a mount holds --self-cert-dir");
    let pod = &one(&objs, "Deployment")["spec"]["template"]["spec"];
    let vol = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("its volume");
    assert!(vol["emptyDir"].is_object());

    // selfcert.rs: read + create + replace the one Secret; get + replace the one webhook
    // configuration. On top of the default rules, nothing else.
    let cr = rules_of(one(&objs, "ClusterRole"));
    let mut want = expected_cluster_rules();
    for v in ["get", "update"] {
        want.insert((
            "admissionregistration.k8s.io".into(),
            "validatingwebhookconfigurations".into(),
            v.into(),
            Some("rel-tenant-gateway".into()),
        ));
    }
    assert_eq!(cr, want);
    let role = find(&objs, "Role")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "rel-tenant-gateway-self-tls")
        .expect("the Secret role");
    let mut want = rules(&[("", "secrets", &["create"])]);
    for v in ["get", "update"] {
        want.insert((
            "".into(),
            "secrets".into(),
            v.into(),
            Some("rel-tenant-gateway-self-tls".into()),
        ));
    }
    assert_eq!(rules_of(role), want);
    assert!(
        find(&objs, "RoleBinding")
            .iter()
            .any(|b| b["roleRef"]["name"] == "rel-tenant-gateway-self-tls")
    );
}

#[test]
fn install_chart_value_sets_that_must_fail() {
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec![],
            vec!["rootHost is required while the ingress layer is enabled"],
        ),
        (
            vec!["--set", "rootHost=  "],
            vec!["rootHost is required while the ingress layer is enabled"],
        ),
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "enforcement.route=block",
            ],
            vec![
                "enforcement.route=block: unknown mode",
                "deny, warn, audit, off",
            ],
        ),
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "enforcement.routes=deny",
            ],
            vec!["enforcement.routes: unknown layer"],
        ),
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "certificates.mode=self",
                "--set",
                "controller.enabled=false",
            ],
            vec!["certificates.mode=self needs controller.enabled"],
        ),
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "audit.policyReports=true",
                "--set",
                "controller.enabled=false",
            ],
            vec!["audit.policyReports needs controller.enabled"],
        ),
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "audit.policyReports=true",
                "--set",
                "audit.enabled=false",
            ],
            vec!["audit.policyReports needs audit.enabled"],
        ),
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "certificates.mode=vault",
            ],
            vec!["certificates.mode=vault: unsupported"],
        ),
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "certificates.mode=manual",
                "--set",
                "certificates.manual.secretName=s",
            ],
            vec![
                "certificates.manual.caBundle",
                "is required when certificates.mode is manual",
            ],
        ),
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "certificates.mode=manual",
                "--set",
                "certificates.manual.caBundle=Q0E=",
            ],
            vec!["certificates.manual.secretName is required"],
        ),
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "networkPolicy.enabled=true",
            ],
            vec!["networkPolicy.apiServerCIDRs is required"],
        ),
        (
            vec!["--set", "rootHost=x.org", "--set", "tenantPrefix=Tenant_"],
            vec!["tenantPrefix=\"Tenant_\""],
        ),
        (
            vec!["--set", "rootHost=x.org", "--set", "log.format=xml"],
            vec!["log.format=xml: unsupported"],
        ),
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "controller.passthroughGateway=split",
            ],
            vec!["controller.passthroughGateway=split: unsupported (shared, separate)"],
        ),
        // Layer 6, list and comma-separated forms, entries trimmed.
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "gateway.attachedNamespaces={cozy-dashboard, tenant-bob}",
            ],
            vec![
                "entry \"tenant-bob\" is a tenant namespace",
                "tenant.spec.gateway=true",
                "must not contain tenant-*",
            ],
        ),
        (
            vec![
                "--set",
                "rootHost=x.org",
                "--set",
                "gateway.attachedNamespaces=default\\, tenant-root",
            ],
            vec!["entry \"tenant-root\"", "tenant.spec.gateway=true"],
        ),
    ];
    for (args, msgs) in cases {
        let e = tg_fails(&args);
        assert_contains(&e, &msgs);
    }
    // Allowed attached namespaces render.
    tg(&[
        "--set",
        "gateway.attachedNamespaces={cozy-dashboard,default}",
    ]);
}

// ---------------------------------------------------------------------------------------
// tenant-gateway: CRD, optional objects, observability

#[test]
fn chart_crd_matches_the_generator() {
    let path = repo().join("charts/tenant-gateway/crds/tenantgateways.gateway.cozystack.io.yaml");
    let out = Command::new(bin())
        .arg("crd")
        .output()
        .expect("tenant-gateway runs");
    assert!(out.status.success());
    let want = String::from_utf8(out.stdout).expect("utf-8");
    if std::env::var_os("UPDATE_CHARTS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).expect("write the CRD");
        return;
    }
    let got = std::fs::read_to_string(&path).expect("read the chart's CRD");
    assert!(
        got == want,
        "{} is out of date with `tenant-gateway crd`; regenerate with \
         `UPDATE_CHARTS=1 cargo test --test charts chart_crd` or \
         `cargo run -- crd > charts/tenant-gateway/crds/tenantgateways.gateway.cozystack.io.yaml`",
        path.display()
    );
}

/// The chart's optional PolicyReport CRD: `tenant-gateway crd --policy-report` with the
/// annotation that keeps it on uninstall (other tools' reports may live in it).
fn policy_report_crd_template() -> String {
    let out = Command::new(bin())
        .args(["crd", "--policy-report"])
        .output()
        .expect("tenant-gateway runs");
    assert!(out.status.success());
    let mut crd: Value =
        tenant_gateway::yaml::from_document(&String::from_utf8(out.stdout).expect("utf-8"))
            .expect("the CRD parses");
    crd["metadata"]["annotations"] = json!({"helm.sh/resource-policy": "keep"});
    format!(
        "{{{{- if .Values.audit.installPolicyReportCRD }}}}\n\
         # `tenant-gateway crd --policy-report` with the keep annotation; tests/charts.rs fails on\n\
         # drift (regenerate: UPDATE_CHARTS=1 cargo test --test charts policy_report_crd).\n\
         {}{{{{- end }}}}\n",
        tenant_gateway::yaml::to_document(&crd).expect("yaml")
    )
}

#[test]
fn policy_report_crd_matches_the_generator() {
    let path = repo().join("charts/tenant-gateway/templates/policyreport-crd.yaml");
    let want = policy_report_crd_template();
    if std::env::var_os("UPDATE_CHARTS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).expect("write the template");
        return;
    }
    let got = std::fs::read_to_string(&path).expect("read the chart's PolicyReport CRD");
    assert!(
        got == want,
        "{} is out of date with `tenant-gateway crd --policy-report`; regenerate with \
         `UPDATE_CHARTS=1 cargo test --test charts policy_report_crd`",
        path.display()
    );
}

/// audit.policyReports: the flag and exactly the writer's verbs on PolicyReports, nothing
/// when off; audit.installPolicyReportCRD: the generated CRD, kept on uninstall.
#[test]
fn policy_reports_flag_rbac_and_optional_crd() {
    let crds = |objs: &[Value]| -> Vec<Value> {
        find(objs, "CustomResourceDefinition")
            .into_iter()
            .cloned()
            .collect()
    };
    let objs = tg(&[]);
    assert!(!args_of(&objs).contains(&"--policy-reports".to_string()));
    assert!(
        !rules_of(one(&objs, "ClusterRole"))
            .iter()
            .any(|(g, ..)| g == "wgpolicyk8s.io"),
        "off by default, and so are its rights"
    );
    assert!(
        crds(&objs).is_empty(),
        "the CRD is not installed by default"
    );

    let objs = tg(&["--set", "audit.policyReports=true"]);
    assert!(args_of(&objs).contains(&"--policy-reports".to_string()));
    // audit/policy_report/writer.rs: the watch by metadata.name (list, watch), server-side
    // apply (patch, create when absent), delete; all but create on the one name.
    let mut want = expected_cluster_rules();
    want.insert((
        "wgpolicyk8s.io".into(),
        "policyreports".into(),
        "create".into(),
        None,
    ));
    for v in ["list", "watch", "patch", "delete"] {
        want.insert((
            "wgpolicyk8s.io".into(),
            "policyreports".into(),
            v.into(),
            Some("tenant-gateway".into()),
        ));
    }
    assert_eq!(rules_of(one(&objs, "ClusterRole")), want);
    assert!(crds(&objs).is_empty(), "the flag alone installs no CRD");

    let objs = tg(&["--set", "audit.installPolicyReportCRD=true"]);
    let crd = crds(&objs);
    assert_eq!(crd.len(), 1);
    assert_eq!(crd[0]["metadata"]["name"], "policyreports.wgpolicyk8s.io");
    assert_eq!(
        crd[0]["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let out = Command::new(bin())
        .args(["crd", "--policy-report"])
        .output()
        .expect("tenant-gateway runs");
    let generated: Value =
        tenant_gateway::yaml::from_document(&String::from_utf8(out.stdout).expect("utf-8"))
            .expect("the CRD parses");
    assert_eq!(crd[0]["spec"], generated["spec"]);
}

#[test]
fn optional_monitoring_and_network_policy() {
    let objs = tg(&[]);
    for kind in [
        "ServiceMonitor",
        "NetworkPolicy",
        "PrometheusRule",
        "ConfigMap",
    ] {
        assert!(find(&objs, kind).is_empty(), "{kind} is off by default");
    }
    let objs = tg(&[
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.apiServerCIDRs={10.0.0.1/32,10.0.0.2/32}",
        "--set",
        "dashboard.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
    ]);
    let sm = one(&objs, "ServiceMonitor");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
    assert_eq!(
        sm["spec"]["selector"]["matchLabels"],
        one(&objs, "Service")["spec"]["selector"]
    );

    let np = one(&objs, "NetworkPolicy");
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress"]));
    let ingress = np["spec"]["ingress"].as_array().expect("ingress rules");
    assert_eq!(ingress.len(), 2);
    assert_eq!(
        ingress[0]["ports"],
        json!([{"port": "webhook", "protocol": "TCP"}])
    );
    assert_eq!(
        ingress[0]["from"],
        json!([{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "10.0.0.2/32"}}])
    );
    assert_eq!(
        ingress[1]["ports"],
        json!([{"port": "metrics", "protocol": "TCP"}])
    );
    assert_eq!(
        ingress[1]["from"],
        json!([{"namespaceSelector": {"matchLabels":
            {"kubernetes.io/metadata.name": "cozy-monitoring"}}}])
    );

    let cm = one(&objs, "ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let file = std::fs::read_to_string(
        repo().join("charts/tenant-gateway/dashboards/tenant-gateway.json"),
    )
    .expect("dashboard file");
    let in_cm: Value =
        serde_json::from_str(cm["data"]["tenant-gateway.json"].as_str().expect("json"))
            .expect("parses");
    let in_file: Value = serde_json::from_str(&file).expect("parses");
    assert_eq!(in_cm, in_file);

    let rule = one(&objs, "PrometheusRule");
    let alerts: BTreeSet<String> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| r["alert"].as_str().unwrap_or("").to_string())
        .collect();
    for a in [
        "TenantGatewayAdmissionErrors",
        "TenantGatewayAdmissionLatencyHigh",
        "TenantGatewayCertificateExpiringSoon",
        "TenantGatewayReconcileErrors",
        "TenantGatewayNoLeader",
        "TenantGatewayListenerCapOverflow",
        "TenantGatewayAuditViolations",
    ] {
        assert!(alerts.contains(a), "alert {a} missing: {alerts:?}");
    }
    let expiry = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["alert"] == "TenantGatewayCertificateExpiringSoon")
        .expect("expiry alert");
    assert!(
        expiry["expr"].as_str().unwrap_or("").ends_with("< 604800"),
        "7 days"
    );
}

/// Names the metrics registry serves (what /metrics of `serve` exposes), including the
/// series suffixes of histograms.
fn served_metric_names() -> BTreeSet<String> {
    let m = tenant_gateway::metrics::Metrics::new();
    // Vector families only appear once they have a child.
    m.admission_requests
        .with_label_values(&["r", "o", "l", "d"])
        .inc();
    m.admission_duration
        .with_label_values(&["r"])
        .observe(0.001);
    m.tls_reloads.with_label_values(&["success"]).inc();
    m.reconcile_total.with_label_values(&["success"]).inc();
    m.tenantgateways.with_label_values(&["http01"]).set(1);
    m.reconcile_writes
        .with_label_values(&["Gateway", "apply"])
        .inc();
    m.wildcard_hold
        .with_label_values(&["source_missing"])
        .set(0);
    m.wildcard_writes.with_label_values(&["create"]).inc();
    m.audit_violations
        .with_label_values(&["route", "HTTPRoute"])
        .set(0);
    m.policy_report_namespaces
        .with_label_values(&["pending"])
        .set(0);
    m.policy_report_writes.with_label_values(&["apply"]).inc();
    let mut names = BTreeSet::new();
    for line in m.render().lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        names.insert(name);
    }
    names
}

fn metric_names_in(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let start_ok = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == '_');
        let rest: String = bytes[i..].iter().collect();
        if start_ok && (rest.starts_with("tenant_gateway_") || rest.starts_with("process_")) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            i += name.len();
            out.insert(name);
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn dashboard_and_alerts_use_only_metrics_that_exist() {
    let served = served_metric_names();
    assert!(served.contains("tenant_gateway_admission_duration_seconds_bucket"));
    let file = std::fs::read_to_string(
        repo().join("charts/tenant-gateway/dashboards/tenant-gateway.json"),
    )
    .expect("dashboard file");
    let dash: Value = serde_json::from_str(&file).expect("the dashboard JSON parses");
    assert!(dash["uid"].is_string() && dash["title"].is_string());
    assert!(dash["schemaVersion"].as_i64().unwrap_or(0) >= 30);
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10);
    let mut ids = BTreeSet::new();
    let mut used = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().expect("title");
        assert!(
            ids.insert(p["id"].as_i64().expect("numeric id")),
            "duplicate id in {title}"
        );
        for k in ["x", "y", "w", "h"] {
            assert!(p["gridPos"][k].is_i64(), "{title}: gridPos.{k}");
        }
        // A row only groups the panels below it.
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            let names = metric_names_in(expr);
            assert!(!names.is_empty(), "{title}: query names no metric: {expr}");
            used.extend(names);
        }
    }
    // What the issue asks the dashboard to show.
    for m in [
        "tenant_gateway_admission_requests_total",
        "tenant_gateway_admission_duration_seconds_bucket",
        "tenant_gateway_tls_certificate_expiry_timestamp_seconds",
        "tenant_gateway_reconcile_total",
        "tenant_gateway_reconcile_duration_seconds_bucket",
        "tenant_gateway_leader",
        "tenant_gateway_listener_cap_overflow",
        "tenant_gateway_hostname_conflicts",
        "tenant_gateway_audit_violations",
        "tenant_gateway_audit_last_change_timestamp_seconds",
        "tenant_gateway_policy_report_writes_total",
        "tenant_gateway_policy_report_namespaces",
    ] {
        assert!(used.contains(m), "the dashboard does not show {m}");
    }
    let objs = tg(&["--set", "prometheusRule.enabled=true"]);
    for r in one(&objs, "PrometheusRule")["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
    {
        let names = metric_names_in(r["expr"].as_str().expect("expr"));
        assert!(!names.is_empty(), "{}", r["alert"]);
        used.extend(names);
    }
    let unknown: Vec<&String> = used.iter().filter(|n| !served.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "metrics not served by tenant-gateway: {unknown:?}"
    );
}

// ---------------------------------------------------------------------------------------
// gateway chart

fn tgw(objs: &[Value]) -> &Value {
    let t = one(objs, "TenantGateway");
    // The rendered object is what the CRD types accept.
    let typed: tenant_gateway::reconcile::api::TenantGateway = serde_json::from_value(t.clone())
        .unwrap_or_else(|e| panic!("not a TenantGateway: {e}: {t}"));
    assert_eq!(
        typed.spec.apex,
        t["spec"]["apex"].as_str().unwrap_or_default()
    );
    t
}

const HOST: &str = "_namespace.host=alice.example.org";

#[test]
fn gateway_http01_defaults() {
    let objs = gw(&["--set", HOST]);
    let t = tgw(&objs);
    assert_eq!(t["metadata"]["namespace"], "tenant-alice");
    assert_eq!(t["metadata"]["name"], "rel");
    assert_eq!(
        t["spec"],
        json!({
            "apex": "alice.example.org",
            "gatewayClassName": "cilium",
            "certMode": "http01",
            "issuerName": "letsencrypt-prod",
            "attachedNamespaces": [],
            "tlsPassthroughServices": ["api", "vm-exportproxy", "cdi-uploadproxy"],
        })
    );
    let objs = gw(&[
        "--set",
        HOST,
        "--set",
        "_cluster.issuer-name=letsencrypt-stage",
        "--set",
        "gatewayClassName=envoy",
        "--set",
        "tlsPassthroughServices={api}",
        "--set",
        "_cluster.gateway-attached-namespaces=cozy-dashboard\\, default",
    ]);
    let t = tgw(&objs);
    assert_eq!(t["spec"]["issuerName"], "letsencrypt-stage");
    assert_eq!(t["spec"]["gatewayClassName"], "envoy");
    assert_eq!(t["spec"]["tlsPassthroughServices"], json!(["api"]));
    assert_eq!(
        t["spec"]["attachedNamespaces"],
        json!(["cozy-dashboard", "default"])
    );
}

#[test]
fn gateway_dns01_providers_with_their_secret_defaults() {
    let dns = ["--set", HOST, "--set", "_cluster.solver=dns01"];
    let with = |extra: &[&str]| {
        let mut a = dns.to_vec();
        a.extend_from_slice(extra);
        tgw(&gw(&a))["spec"].clone()
    };
    let s = with(&[]);
    assert_eq!(s["certMode"], "dns01");
    assert_eq!(
        s["dns01"],
        json!({"provider": "cloudflare", "cloudflare": {"apiTokenSecretRef":
            {"name": "cloudflare-api-token-secret", "key": "api-token"}}})
    );
    // The platform may pass empty strings: the defaults still apply.
    let s = with(&[
        "--set",
        "_cluster.dns01-cloudflare-secret-name=",
        "--set",
        "_cluster.dns01-cloudflare-secret-key=",
    ]);
    assert_eq!(
        s["dns01"]["cloudflare"]["apiTokenSecretRef"]["name"],
        "cloudflare-api-token-secret"
    );
    assert_eq!(
        s["dns01"]["cloudflare"]["apiTokenSecretRef"]["key"],
        "api-token"
    );

    let s = with(&[
        "--set",
        "_cluster.dns01-provider=route53",
        "--set",
        "_cluster.dns01-route53-region=eu-west-1",
        "--set",
        "_cluster.dns01-route53-access-key-id=AKIA1",
        "--set",
        "_cluster.dns01-route53-secret-name=aws",
    ]);
    assert_eq!(
        s["dns01"],
        json!({"provider": "route53", "route53": {"region": "eu-west-1", "accessKeyID": "AKIA1",
            "secretAccessKeySecretRef": {"name": "aws", "key": "secret-access-key"}}})
    );
    // Without static credentials (IRSA): region only.
    let s = with(&[
        "--set",
        "_cluster.dns01-provider=route53",
        "--set",
        "_cluster.dns01-route53-region=eu-west-1",
    ]);
    assert_eq!(s["dns01"]["route53"], json!({"region": "eu-west-1"}));

    let s = with(&["--set", "_cluster.dns01-provider=digitalocean"]);
    assert_eq!(
        s["dns01"],
        json!({"provider": "digitalocean", "digitalocean": {"tokenSecretRef":
            {"name": "digitalocean-api-token-secret", "key": "access-token"}}})
    );

    let s = with(&[
        "--set",
        "_cluster.dns01-provider=rfc2136",
        "--set",
        "_cluster.dns01-rfc2136-nameserver=10.0.0.53:53",
        "--set",
        "_cluster.dns01-rfc2136-tsig-key-name=acme",
        "--set",
        "_cluster.dns01-rfc2136-secret-name=tsig",
    ]);
    assert_eq!(
        s["dns01"],
        json!({"provider": "rfc2136", "rfc2136": {"nameserver": "10.0.0.53:53",
            "tsigKeyName": "acme", "tsigAlgorithm": "HMACSHA256",
            "tsigSecretSecretRef": {"name": "tsig", "key": "tsig-secret-key"}}})
    );
}

#[test]
fn gateway_existing_secret_wins_over_the_solver() {
    for solver in [
        vec![
            "--set",
            "_cluster.solver=dns01",
            "--set",
            "_cluster.dns01-provider=route53",
        ],
        // Even values that would fail on their own are ignored.
        vec![
            "--set",
            "_cluster.solver=tls-alpn01",
            "--set",
            "_cluster.issuer-name=zerossl",
        ],
        vec![],
    ] {
        let mut args = vec![
            "--set",
            HOST,
            "--set",
            "_cluster.wildcard-secret-name=wildcard-tls",
        ];
        args.extend(solver);
        let objs = gw(&args);
        let t = tgw(&objs);
        assert_eq!(t["spec"]["certMode"], "existingSecret");
        assert_eq!(
            t["spec"]["wildcardSecretRef"],
            json!({"name": "wildcard-tls"})
        );
        assert!(t["spec"]["dns01"].is_null());
        assert!(t["spec"]["issuerName"].is_null());
    }
}

#[test]
fn gateway_value_sets_that_must_fail() {
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec![], vec!["_namespace.host is empty"]),
        (
            vec!["--set", "_namespace.host= "],
            vec!["_namespace.host is empty"],
        ),
        (
            vec!["--set", HOST, "--set", "_cluster.solver=tls-alpn01"],
            vec![
                "_cluster.solver=\"tls-alpn01\" is not supported",
                "http01 or dns01",
            ],
        ),
        (
            vec!["--set", HOST, "--set", "_cluster.issuer-name=zerossl"],
            vec![
                "_cluster.issuer-name=\"zerossl\" is not supported",
                "letsencrypt-prod or letsencrypt-stage",
            ],
        ),
        (
            vec![
                "--set",
                HOST,
                "--set",
                "_cluster.solver=dns01",
                "--set",
                "_cluster.dns01-provider=gandi",
            ],
            vec![
                "_cluster.dns01-provider=\"gandi\" is not supported",
                "cloudflare, route53, digitalocean or rfc2136",
            ],
        ),
        (
            vec![
                "--set",
                HOST,
                "--set",
                "_cluster.solver=dns01",
                "--set",
                "_cluster.dns01-provider=route53",
            ],
            vec!["_cluster.dns01-route53-region is required"],
        ),
        (
            vec![
                "--set",
                HOST,
                "--set",
                "_cluster.solver=dns01",
                "--set",
                "_cluster.dns01-provider=rfc2136",
                "--set",
                "_cluster.dns01-rfc2136-tsig-key-name=k",
                "--set",
                "_cluster.dns01-rfc2136-secret-name=s",
            ],
            vec!["_cluster.dns01-rfc2136-nameserver is required"],
        ),
        (
            vec![
                "--set",
                HOST,
                "--set",
                "_cluster.solver=dns01",
                "--set",
                "_cluster.dns01-provider=rfc2136",
                "--set",
                "_cluster.dns01-rfc2136-nameserver=ns:53",
                "--set",
                "_cluster.dns01-rfc2136-secret-name=s",
            ],
            vec!["_cluster.dns01-rfc2136-tsig-key-name is required"],
        ),
        (
            vec!["--set", HOST, "--set", "name=Bad_Name"],
            vec!["name \"Bad_Name\"", "at most 50 characters"],
        ),
        // Layer 6: the issue's command (`\,` keeps helm from splitting the value) ...
        (
            vec![
                "--set",
                "_cluster.gateway-attached-namespaces=cozy-dashboard\\,tenant-bob",
                "--set",
                HOST,
            ],
            vec![
                "must not contain tenant-* namespaces",
                "entry \"tenant-bob\" is a tenant namespace",
                "tenant.spec.gateway=true",
            ],
        ),
        // ... a list with spaces, trimmed ...
        (
            vec![
                "--set",
                HOST,
                "--set",
                "_cluster.gateway-attached-namespaces={cozy-dashboard,  tenant-root}",
            ],
            vec!["entry \"tenant-root\"", "tenant.spec.gateway=true"],
        ),
        // ... and even with an existing wildcard Secret.
        (
            vec![
                "--set",
                HOST,
                "--set",
                "_cluster.wildcard-secret-name=w",
                "--set",
                "_cluster.gateway-attached-namespaces= tenant-x",
            ],
            vec!["entry \"tenant-x\""],
        ),
    ];
    for (args, msgs) in cases {
        let e = gw_fails(&args);
        assert_contains(&e, &msgs);
    }
}

#[test]
fn gateway_post_delete_hook_removes_the_acme_account_secret() {
    let objs = gw(&["--set", HOST, "--set", "name=gw"]);
    let secret = tenant_gateway::reconcile::names::acme_account_secret("gw");
    let job = one(&objs, "Job");
    assert_eq!(
        job["metadata"]["annotations"]["helm.sh/hook"],
        "post-delete"
    );
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["args"],
        json!([
            "delete",
            "secret",
            secret,
            "--namespace=tenant-alice",
            "--ignore-not-found"
        ])
    );
    let role = one(&objs, "Role");
    assert_eq!(
        role["metadata"]["annotations"]["helm.sh/hook"],
        "post-delete"
    );
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [secret],
                "verbs": ["get", "delete"]}])
    );
    for kind in ["ServiceAccount", "RoleBinding"] {
        assert_eq!(
            one(&objs, kind)["metadata"]["annotations"]["helm.sh/hook"],
            "post-delete"
        );
    }
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    let objs = gw(&["--set", HOST, "--set", "acmeAccountCleanup.enabled=false"]);
    assert!(find(&objs, "Job").is_empty());
}
