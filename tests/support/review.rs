//! The AdmissionReview builder of the tests: [`review`] starts one for a webhook
//! resource, the methods set what a test varies, [`Review::build`] gives the JSON. A field no
//! method set is left out of the request (except `name` and `namespace`, which every review
//! carries, null when unset), so each test sends exactly the shape it means: the example
//! review, what the API server sends, or a bare minimum.
//!
//! The presets below are the reviews several tests share.

use serde_json::{Value, json};
use tenant_gateway::admission::WebhookResource;

/// An AdmissionReview v1 request, built up field by field.
#[derive(Debug, Clone)]
pub struct Review {
    target: WebhookResource,
    version: String,
    uid: String,
    operation: String,
    namespace: Option<String>,
    username: String,
    groups: Option<Vec<String>>,
    object: Value,
    old_object: Option<Value>,
    dry_run: Option<bool>,
    api_server_fields: bool,
}

/// A CREATE review of `target` (version `v1`) with an empty uid, user and object.
pub fn review(target: WebhookResource) -> Review {
    Review {
        target,
        version: "v1".to_string(),
        uid: String::new(),
        operation: "CREATE".to_string(),
        namespace: None,
        username: String::new(),
        groups: None,
        object: Value::Null,
        old_object: None,
        dry_run: None,
        api_server_fields: false,
    }
}

impl Review {
    /// The resource reviewed: `kind` and `resource` follow it.
    pub fn target(mut self, target: WebhookResource) -> Review {
        self.target = target;
        self
    }

    pub fn version(mut self, version: &str) -> Review {
        self.version = version.to_string();
        self
    }

    pub fn uid(mut self, uid: impl Into<String>) -> Review {
        self.uid = uid.into();
        self
    }

    pub fn operation(mut self, operation: &str) -> Review {
        self.operation = operation.to_string();
        self
    }

    pub fn namespace(mut self, namespace: &str) -> Review {
        self.namespace = Some(namespace.to_string());
        self
    }

    /// `userInfo.username` alone (no `groups` key).
    pub fn username(mut self, username: &str) -> Review {
        self.username = username.to_string();
        self
    }

    /// `userInfo` with its groups.
    pub fn user(mut self, username: &str, groups: &[&str]) -> Review {
        self.username = username.to_string();
        self.groups = Some(groups.iter().map(|g| g.to_string()).collect());
        self
    }

    /// The object; `request.name` is its `metadata.name`.
    pub fn object(mut self, object: Value) -> Review {
        self.object = object;
        self
    }

    /// `oldObject` (`Value::Null` writes an explicit null, as the API server does on CREATE).
    pub fn old_object(mut self, old: Value) -> Review {
        self.old_object = Some(old);
        self
    }

    pub fn dry_run(mut self, dry_run: bool) -> Review {
        self.dry_run = Some(dry_run);
        self
    }

    /// Add what the API server sends besides: `requestKind`, `requestResource` (the same as
    /// `kind` and `resource`) and the `CreateOptions`.
    pub fn api_server_fields(mut self) -> Review {
        self.api_server_fields = true;
        self
    }

    pub fn build(&self) -> Value {
        let t = self.target;
        let v = self.version.as_str();
        let kind = json!({"group": t.group(), "version": v, "kind": t.kind()});
        let resource = json!({"group": t.group(), "version": v, "resource": t.resource()});
        let name = self
            .object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut user = json!({"username": self.username});
        if let Some(groups) = &self.groups {
            user["groups"] = json!(groups);
        }
        let mut request = json!({
            "uid": self.uid,
            "kind": kind,
            "resource": resource,
            "name": name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": user,
            "object": self.object,
        });
        if let Some(old) = &self.old_object {
            request["oldObject"] = old.clone();
        }
        if let Some(dry_run) = self.dry_run {
            request["dryRun"] = json!(dry_run);
        }
        if self.api_server_fields {
            request["requestKind"] = kind;
            request["requestResource"] = resource;
            request["options"] = json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"});
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    }
}

/// The uid of `examples/reviews/httproute-hijack.json`.
pub const EXAMPLE_UID: &str = "7f0b2b8e-1d1c-4c2e-9a53-0c1c2f3e4d5a";

/// The review of `examples/reviews/httproute-hijack.json` (alice's HTTPRoute `hijack` in
/// `tenant-alice`) with `uid` and the single hostname `host`; with [`EXAMPLE_UID`] and
/// `shop.bob.example.org` it is that file, field for field.
pub fn example(uid: &str, host: &str) -> Review {
    review(WebhookResource::HttpRoutes)
        .uid(uid)
        .namespace("tenant-alice")
        .user("alice", &["tenant-alice-admins", "system:authenticated"])
        .object(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "hijack", "namespace": "tenant-alice"},
            "spec": {
                "parentRefs": [{"name": "tenant-root", "namespace": "tenant-root"}],
                "hostnames": [host],
                "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]
            }
        }))
        .old_object(Value::Null)
        .dry_run(false)
}

/// The example review of `shop.alice.example.org` (admitted with the example namespaces).
pub fn admitted(uid: &str) -> Value {
    example(uid, "shop.alice.example.org").build()
}

/// A Namespace CREATE review, as the API server sends it.
pub fn namespace_create(
    uid: &str,
    name: &str,
    labels: Value,
    user: &str,
    groups: &[&str],
) -> Value {
    review(WebhookResource::Namespaces)
        .uid(uid)
        .user(user, groups)
        .object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}))
        .old_object(Value::Null)
        .dry_run(false)
        .api_server_fields()
        .build()
}

/// A Gateway CREATE in `namespace` with one HTTPS listener for `hostname`, by the
/// platform's service account, as the API server sends it.
pub fn gateway_create(uid: &str, namespace: &str, hostname: &str) -> Value {
    review(WebhookResource::Gateways)
        .uid(uid)
        .namespace(namespace)
        .user(
            "system:serviceaccount:cozy-system:tenant-gateway",
            &["system:serviceaccounts:cozy-system", "system:authenticated"],
        )
        .object(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": namespace},
            "spec": {
                "gatewayClassName": "cilium",
                "listeners": [{"name": "https", "protocol": "HTTPS", "port": 443, "hostname": hostname}]
            }
        }))
        .old_object(Value::Null)
        .dry_run(false)
        .api_server_fields()
        .build()
}
