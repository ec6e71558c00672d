//! What is sent: a realistic ~4 KiB HTTPRoute AdmissionReview, and the namespace snapshot the
//! real handler looks the route's namespace up in.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::json;
use tenant_gateway::admission::{WebhookResource, testing};
use tenant_gateway::policy::{GATEWAY_LABEL, HOST_LABEL};

/// Where the route lives; its apex is [`TENANT_APEX`].
pub const TENANT_NS: &str = "tenant-alice";
pub const TENANT_APEX: &str = "alice.example.org";
/// The platform root apex passed to the real handler (`--root-host`).
pub const ROOT_HOST: &str = "example.org";
pub const PATH: &str = "/validate/httproutes";

/// Width of the per-request uid (a UUID); the template holds a placeholder of this width.
pub const UID_LEN: usize = 36;
const UID_PLACEHOLDER: &str = "00000000-0000-4000-8000-000000000000";

/// The review body with a fixed-width uid slot so each request gets its own uid cheaply.
#[derive(Clone)]
pub struct Review {
    bytes: Vec<u8>,
    uid_at: usize,
}

impl Review {
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The body with `uid` (exactly [`UID_LEN`] bytes) in place.
    pub fn with_uid(&self, uid: &[u8; UID_LEN]) -> Vec<u8> {
        let mut b = self.bytes.clone();
        b[self.uid_at..self.uid_at + UID_LEN].copy_from_slice(uid);
        b
    }
}

/// A UUID-shaped uid unique per (worker, sequence number).
pub fn uid(worker: u32, seq: u64) -> [u8; UID_LEN] {
    let s = format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        worker,
        (seq >> 48) & 0xffff,
        (seq >> 36) & 0xfff,
        (seq >> 24) & 0xfff,
        seq & 0xff_ffff_ffff
    );
    let mut out = [b'0'; UID_LEN];
    out.copy_from_slice(s.as_bytes());
    out
}

/// CREATE of an HTTPRoute in tenant-alice as the API server sends it: requestKind,
/// requestResource and options filled in, a user from an OIDC login with several groups, the
/// object with Helm labels/annotations and five rules using matches, filters and weighted
/// backendRefs. managedFields are left out (they would only add bytes every handler skips).
pub fn httproute_review() -> Review {
    review(Shape::Create4k)
}

/// The review bodies `loadgen throughput --payload` can send (issue 11: a 4 KiB CREATE, a
/// managedFields-heavy 64 KiB CREATE as real objects are, and an UPDATE carrying two of those).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// The ~4 KiB HTTPRoute CREATE without managedFields.
    #[value(name = "create-4k")]
    Create4k,
    /// The same route with ~60 KiB of managedFields (many field managers over the years).
    #[value(name = "create-64k")]
    Create64k,
    /// UPDATE: object and oldObject, each the 64 KiB route (a relabel by another manager).
    #[value(name = "update-2x64k")]
    Update2x64k,
}

impl Shape {
    pub fn label(self) -> &'static str {
        match self {
            Shape::Create4k => "create-4k",
            Shape::Create64k => "create-64k",
            Shape::Update2x64k => "update-2x64k",
        }
    }
}

/// About 60 KiB of `metadata.managedFields` in the shape the API server writes: one entry per
/// manager, each a `fieldsV1` tree of `f:`/`k:` keys ending in `{}`.
fn managed_fields(target_bytes: usize) -> serde_json::Value {
    let mut entries = Vec::new();
    let mut size = 0usize;
    let mut m = 0usize;
    while size < target_bytes {
        let mut rules = serde_json::Map::new();
        for r in 0..12 {
            let key = format!(
                "k:{{\"matches\":[{{\"path\":{{\"type\":\"PathPrefix\",\"value\":\"/svc-{m}-{r}\"}}}}]}}"
            );
            rules.insert(
                key,
                json!({".": {}, "f:backendRefs": {}, "f:filters": {}, "f:matches": {}, "f:timeouts": {".": {}, "f:request": {}}}),
            );
        }
        let entry = json!({
            "manager": format!("controller-{m}"),
            "operation": if m.is_multiple_of(3) { "Apply" } else { "Update" },
            "apiVersion": "gateway.networking.k8s.io/v1",
            "time": format!("2026-0{}-1{}T08:{:02}:00Z", 1 + m % 9, m % 10, m % 60),
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {
                    "f:annotations": {".": {}, "f:meta.helm.sh/release-name": {}, "f:meta.helm.sh/release-namespace": {}},
                    "f:labels": {".": {}, "f:app.kubernetes.io/instance": {}, "f:app.kubernetes.io/managed-by": {}, "f:app.kubernetes.io/name": {}, "f:helm.sh/chart": {}}
                },
                "f:spec": {".": {}, "f:hostnames": {}, "f:parentRefs": {}, "f:rules": rules}
            }
        });
        size += serde_json::to_vec(&entry).map_or(0, |b| b.len());
        entries.push(entry);
        m += 1;
    }
    serde_json::Value::Array(entries)
}

/// The review body of `shape` with a uid slot, its route on the root Gateway.
pub fn review(shape: Shape) -> Review {
    review_on(shape, "tenant-root")
}

/// [`review`] with the route on Gateway `gateway/gateway`.
pub fn review_on(shape: Shape, gateway: &str) -> Review {
    let hostnames: Vec<String> = ["shop", "www", "api", "admin", "static", "grafana"]
        .iter()
        .map(|h| format!("{h}.{TENANT_APEX}"))
        .chain(std::iter::once(TENANT_APEX.to_string()))
        .collect();
    let backend = |name: &str, port: u16, weight: u32| json!({"group": "", "kind": "Service", "name": name, "port": port, "weight": weight});
    let rules = json!([
        {
            "matches": [
                {"path": {"type": "PathPrefix", "value": "/api/v2"},
                 "headers": [{"type": "Exact", "name": "x-api-version", "value": "2"}],
                 "method": "GET"},
                {"path": {"type": "PathPrefix", "value": "/api/v2"},
                 "queryParams": [{"type": "Exact", "name": "format", "value": "json"}],
                 "method": "POST"}
            ],
            "filters": [
                {"type": "RequestHeaderModifier",
                 "requestHeaderModifier": {
                     "set": [{"name": "x-tenant", "value": "alice"}],
                     "add": [{"name": "x-forwarded-prefix", "value": "/api/v2"}],
                     "remove": ["x-internal-debug"]}},
                {"type": "URLRewrite",
                 "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}
            ],
            "backendRefs": [backend("api-v2", 8080, 90), backend("api-v2-canary", 8080, 10)],
            "timeouts": {"request": "30s", "backendRequest": "25s"}
        },
        {
            "matches": [
                {"path": {"type": "PathPrefix", "value": "/api"}},
                {"path": {"type": "Exact", "value": "/healthz"}, "method": "GET"},
                {"path": {"type": "PathPrefix", "value": "/api"},
                 "headers": [{"type": "RegularExpression", "name": "user-agent", "value": "^shop-mobile/[0-9.]+$"}]}
            ],
            "filters": [
                {"type": "ResponseHeaderModifier",
                 "responseHeaderModifier": {
                     "set": [{"name": "cache-control", "value": "no-store"},
                             {"name": "strict-transport-security", "value": "max-age=31536000"}]}}
            ],
            "backendRefs": [backend("api-v1", 8080, 1)]
        },
        {
            "matches": [
                {"path": {"type": "PathPrefix", "value": "/static"}},
                {"path": {"type": "RegularExpression", "value": "^/assets/[a-z0-9]+\\.(css|js|png)$"}}
            ],
            "filters": [
                {"type": "RequestMirror",
                 "requestMirror": {"backendRef": {"group": "", "kind": "Service", "name": "static-shadow", "port": 80}}}
            ],
            "backendRefs": [backend("static", 80, 1)]
        },
        {
            "matches": [{"path": {"type": "PathPrefix", "value": "/old-shop"}}],
            "filters": [
                {"type": "RequestRedirect",
                 "requestRedirect": {"scheme": "https", "hostname": format!("shop.{TENANT_APEX}"),
                                     "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"},
                                     "statusCode": 301}}
            ]
        },
        {
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "backendRefs": [backend("web", 80, 1)]
        }
    ]);
    let object = json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": "storefront",
            "namespace": TENANT_NS,
            "uid": "3c1d4a57-6f0e-4f59-9d4b-2a51f5d0e8b7",
            "generation": 1,
            "creationTimestamp": "2026-05-01T09:12:44Z",
            "labels": {
                "app.kubernetes.io/name": "storefront",
                "app.kubernetes.io/instance": "storefront-prod",
                "app.kubernetes.io/part-of": "shop",
                "app.kubernetes.io/managed-by": "Helm",
                "helm.sh/chart": "storefront-3.14.2"
            },
            "annotations": {
                "meta.helm.sh/release-name": "storefront-prod",
                "meta.helm.sh/release-namespace": TENANT_NS,
                "cozystack.io/owner": "alice",
                "cozystack.io/description": "Public storefront of the shop: catalogue, checkout API and static assets"
            }
        },
        "spec": {
            "parentRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                 "name": gateway, "namespace": gateway, "sectionName": "https"}
            ],
            "hostnames": hostnames,
            "rules": rules
        },
        "status": {"parents": []}
    });
    let mut object = object;
    let mut old_object = serde_json::Value::Null;
    if shape != Shape::Create4k {
        object["metadata"]["managedFields"] = managed_fields(60 * 1024);
    }
    if shape == Shape::Update2x64k {
        old_object = object.clone();
        old_object["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("storefront-old");
        object["metadata"]["generation"] = json!(2);
    }
    let operation = if shape == Shape::Update2x64k {
        "UPDATE"
    } else {
        "CREATE"
    };
    let review = testing::review(WebhookResource::HttpRoutes)
        .uid(UID_PLACEHOLDER)
        .namespace(TENANT_NS)
        .operation(operation)
        .user(
            "oidc:alice@alice.example.org",
            &[
                "oidc:tenant-alice-admins",
                "oidc:tenant-alice-developers",
                "oidc:shop-team",
                "system:authenticated",
            ],
        )
        .user_uid("9b2f6c0e-5d7a-4e0b-8c11-6e3f0a9d4b21")
        .user_extra(json!({
            "authentication.kubernetes.io/credential-id": ["JTI=4f7c2d1e-8a3b-4c5d-9e6f-0a1b2c3d4e5f"]
        }))
        .object(object)
        .old_object(old_object)
        .dry_run(false)
        .api_server_fields()
        .options(json!({
            "kind": if operation == "UPDATE" { "UpdateOptions" } else { "CreateOptions" },
            "apiVersion": "meta.k8s.io/v1",
            "fieldManager": "helm"
        }))
        .build();
    let bytes = serde_json::to_vec(&review).expect("a json! value serialises");
    let uid_at =
        find(&bytes, UID_PLACEHOLDER.as_bytes()).expect("the uid placeholder is in the body");
    Review { bytes, uid_at }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// True when `body` is an AdmissionReview answer allowing `uid`.
pub fn allowed_for(body: &[u8], uid: &[u8; UID_LEN]) -> bool {
    let mut pat = Vec::with_capacity(UID_LEN + 8);
    pat.extend_from_slice(b"\"uid\":\"");
    pat.extend_from_slice(uid);
    pat.push(b'"');
    find(body, b"\"allowed\":true").is_some() && find(body, &pat).is_some()
}

/// One namespace of the snapshot.
pub struct Ns {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// `count` namespaces as a Cozystack cluster has them: a handful of platform namespaces,
/// tenant-root/alice/bob, and numbered tenants with host and gateway labels.
pub fn namespaces(count: usize) -> Vec<Ns> {
    let mut out = Vec::with_capacity(count);
    let push = |out: &mut Vec<Ns>, name: String, host: Option<String>| {
        let mut labels = BTreeMap::new();
        labels.insert("kubernetes.io/metadata.name".to_string(), name.clone());
        if let Some(h) = host {
            labels.insert(HOST_LABEL.to_string(), h);
            labels.insert(GATEWAY_LABEL.to_string(), "tenant-root".to_string());
            labels.insert("tenant.cozystack.io/tenant".to_string(), name.clone());
        }
        out.push(Ns { name, labels });
    };
    for sys in [
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "cozy-system",
        "cozy-dashboard",
        "cozy-cert-manager",
    ] {
        push(&mut out, sys.to_string(), None);
    }
    push(
        &mut out,
        "tenant-root".to_string(),
        Some(ROOT_HOST.to_string()),
    );
    push(
        &mut out,
        TENANT_NS.to_string(),
        Some(TENANT_APEX.to_string()),
    );
    push(
        &mut out,
        "tenant-bob".to_string(),
        Some(format!("bob.{ROOT_HOST}")),
    );
    let mut i = 0usize;
    while out.len() < count {
        push(
            &mut out,
            format!("tenant-t{i:05}"),
            Some(format!("t{i:05}.{ROOT_HOST}")),
        );
        i += 1;
    }
    out.truncate(count.max(1));
    out
}

/// The snapshot as `kubectl get ns -o yaml` prints it (uid, resourceVersion, finalizers,
/// status and all), which is what `serve --namespaces FILE` is documented to read.
pub fn namespaces_yaml(ns: &[Ns]) -> String {
    let mut s = String::with_capacity(ns.len() * 520);
    s.push_str("apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\nitems:\n");
    for (i, n) in ns.iter().enumerate() {
        let _ = write!(
            s,
            "- apiVersion: v1\n  kind: Namespace\n  metadata:\n    creationTimestamp: \"2026-04-{:02}T{:02}:{:02}:{:02}Z\"\n    labels:\n",
            1 + i % 28,
            i % 24,
            i % 60,
            (i * 7) % 60
        );
        for (k, v) in &n.labels {
            let _ = writeln!(s, "      {k}: {v}");
        }
        let _ = write!(
            s,
            "    name: {}\n    resourceVersion: \"{}\"\n    uid: {:08x}-{:04x}-4{:03x}-9{:03x}-{:012x}\n  spec:\n    finalizers:\n    - kubernetes\n  status:\n    phase: Active\n",
            n.name,
            1000 + i * 3,
            i,
            i % 0xffff,
            i % 0xfff,
            (i * 13) % 0xfff,
            i * 7919
        );
    }
    s
}
