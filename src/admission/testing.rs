//! The one AdmissionReview builder, shared by the unit tests, the integration tests
//! (`tests/support/review.rs` keeps the presets several of them send) and the load generator
//! (`bench/loadgen`); and the table of bodies every reader of a review's uid must read alike
//! ([`uid_cases`]: the decoder's unit tests and the server's baseline). Not part of the
//! product: nothing outside tests and benches uses it.
//!
//! [`review`] starts a CREATE of a webhook resource, the methods set what a test varies,
//! [`Review::build`] gives the JSON. `uid`, `kind`, `resource`, `name`, `namespace`,
//! `operation`, `userInfo` and `object` are always written (`namespace` null when unset,
//! `name` the object's `metadata.name` unless set); any other field only when a method set
//! it, so each test sends exactly the shape it means: the example review, what the API
//! server sends, or a bare minimum.

use serde_json::{Value, json};

use super::WebhookResource;

/// An AdmissionReview v1 request, built up field by field.
#[derive(Debug, Clone)]
pub struct Review {
    group: String,
    resource: String,
    kind: String,
    version: String,
    uid: String,
    operation: String,
    sub_resource: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    username: String,
    groups: Option<Vec<String>>,
    user_uid: Option<String>,
    user_extra: Option<Value>,
    object: Value,
    old_object: Option<Value>,
    dry_run: Option<bool>,
    api_server_fields: bool,
    options: Option<Value>,
}

/// A CREATE review of `target` (version `v1`) with an empty uid, user and object.
pub fn review(target: WebhookResource) -> Review {
    Review {
        group: String::new(),
        resource: String::new(),
        kind: String::new(),
        version: "v1".to_string(),
        uid: String::new(),
        operation: "CREATE".to_string(),
        sub_resource: None,
        name: None,
        namespace: None,
        username: String::new(),
        groups: None,
        user_uid: None,
        user_extra: None,
        object: Value::Null,
        old_object: None,
        dry_run: None,
        api_server_fields: false,
        options: None,
    }
    .target(target)
}

impl Review {
    /// The resource reviewed: `kind` and `resource` are its main API resource's.
    pub fn target(self, target: WebhookResource) -> Review {
        let api = target.primary();
        self.api(api.group, api.resource, api.kind)
    }

    /// `kind` and `resource` of an API resource given by hand (one a path serves besides
    /// its main one, or one it does not serve).
    pub fn api(mut self, group: &str, resource: &str, kind: &str) -> Review {
        self.group = group.to_string();
        self.resource = resource.to_string();
        self.kind = kind.to_string();
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

    /// `subResource` (written even when empty).
    pub fn sub_resource(mut self, sub: &str) -> Review {
        self.sub_resource = Some(sub.to_string());
        self
    }

    /// `request.name` when it is not the object's `metadata.name` (a DELETE has no object).
    pub fn name(mut self, name: &str) -> Review {
        self.name = Some(name.to_string());
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

    /// `userInfo.uid`, as an authenticator that has one sets it.
    pub fn user_uid(mut self, uid: &str) -> Review {
        self.user_uid = Some(uid.to_string());
        self
    }

    /// `userInfo.extra`.
    pub fn user_extra(mut self, extra: Value) -> Review {
        self.user_extra = Some(extra);
        self
    }

    /// The object; `request.name` is its `metadata.name` unless [`Review::name`] is set.
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
    /// `kind` and `resource`) and `options` (`CreateOptions` unless [`Review::options`] is set).
    pub fn api_server_fields(mut self) -> Review {
        self.api_server_fields = true;
        self
    }

    /// `options`, as the API server writes them for the operation.
    pub fn options(mut self, options: Value) -> Review {
        self.options = Some(options);
        self
    }

    pub fn build(&self) -> Value {
        let v = self.version.as_str();
        let kind = json!({"group": self.group, "version": v, "kind": self.kind});
        let resource = json!({"group": self.group, "version": v, "resource": self.resource});
        let name = self.name.as_deref().unwrap_or_else(|| {
            self.object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
        });
        let mut user = json!({"username": self.username});
        if let Some(groups) = &self.groups {
            user["groups"] = json!(groups);
        }
        if let Some(uid) = &self.user_uid {
            user["uid"] = json!(uid);
        }
        if let Some(extra) = &self.user_extra {
            user["extra"] = extra.clone();
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
        if let Some(sub) = &self.sub_resource {
            request["subResource"] = json!(sub);
        }
        if let Some(old) = &self.old_object {
            request["oldObject"] = old.clone();
        }
        if let Some(dry_run) = self.dry_run {
            request["dryRun"] = json!(dry_run);
        }
        if self.api_server_fields {
            request["requestKind"] = kind;
            request["requestResource"] = resource;
        }
        let options = self.options.clone().or_else(|| {
            self.api_server_fields
                .then(|| json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}))
        });
        if let Some(options) = options {
            request["options"] = options;
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    }
}

/// alice's HTTPRoute `web` in `ns` with `hosts`, a dry run (uid `uid-1`).
pub fn route_review(op: &str, ns: &str, hosts: &[&str]) -> Value {
    review(WebhookResource::HttpRoutes)
        .uid("uid-1")
        .namespace(ns)
        .operation(op)
        .user("alice", &["tenant-alice-admins"])
        .object(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                       "metadata": {"name": "web", "namespace": ns},
                       "spec": {"hostnames": hosts}}),
        )
        .old_object(Value::Null)
        .dry_run(true)
        .build()
}

/// Nest `inner` in `depth` single-element arrays, as JSON text.
pub fn nested(depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
}

/// Bodies posted to `/validate/httproutes` that hide or mangle the uid of one review (the
/// admitted [`route_review`] of `shop.alice.example.org`, uid `uid-1`), each with the uid
/// every reader must read from it, empty for none: `(case, body, uid)`. The typed decode, the
/// scan that names what it refuses and the server's baseline answer each with that uid.
pub fn uid_cases() -> Vec<(&'static str, String, String)> {
    let review = |request: Value| {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
            .to_string()
    };
    let valid = route_review("CREATE", "tenant-alice", &["shop.alice.example.org"]);
    let with_uid = |uid: Value| {
        let mut r = valid["request"].clone();
        r["uid"] = uid;
        review(r)
    };
    let huge = "u".repeat(200_000);
    let cases = vec![
        ("decoded", valid.to_string(), "uid-1"),
        ("escapes", with_uid(json!("a\"b\nc\u{e9}")), "a\"b\nc\u{e9}"),
        ("huge", with_uid(json!(huge)), &huge),
        ("empty", with_uid(json!("")), ""),
        ("a number", with_uid(json!(5)), ""),
        ("null", with_uid(Value::Null), ""),
        (
            "missing",
            {
                let mut r = valid["request"].clone();
                if let Some(r) = r.as_object_mut() {
                    r.remove("uid");
                }
                review(r)
            },
            "",
        ),
        (
            "no request",
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).to_string(),
            "",
        ),
        ("request null", review(Value::Null), ""),
        ("request a string", review(json!("uid-1")), ""),
        (
            // serde's derived decoding would read this by position: uid first, then kind,
            // resource, subResource, name, namespace, operation (a CONNECT, admitted).
            "request an array",
            review(json!([
                "uid-positional",
                {"kind": "HTTPRoute"},
                {"group": "gateway.networking.k8s.io", "version": "v1", "resource": "httproutes"},
                null, "web", "tenant-alice", "CONNECT"
            ])),
            "",
        ),
        (
            "envelope an array",
            json!(["admission.k8s.io/v1", "AdmissionReview", valid["request"]]).to_string(),
            "",
        ),
        ("not an object", "[1]".to_string(), ""),
        (
            "wrong apiVersion",
            valid
                .to_string()
                .replace("admission.k8s.io/v1", "admission.k8s.io/v1beta1"),
            "uid-1",
        ),
        (
            "too deep further on",
            valid.to_string().replacen(
                r#""hostnames":["shop.alice.example.org"]"#,
                &format!(r#""hostnames":{}"#, nested(300, r#""x""#)),
                1,
            ),
            "uid-1",
        ),
        (
            "request twice, the first not an object",
            valid
                .to_string()
                .replacen("\"request\":", "\"request\":7,\"request\":", 1),
            "uid-1",
        ),
        (
            "request twice, the last one's uid",
            valid.to_string().replacen(
                "\"request\":",
                "\"request\":{\"uid\":\"first\"},\"request\":",
                1,
            ),
            "uid-1",
        ),
        (
            "uid twice",
            valid.to_string().replacen(
                "\"uid\":\"uid-1\"",
                "\"uid\":\"first\",\"uid\":\"uid-1\"",
                1,
            ),
            "uid-1",
        ),
    ];
    cases
        .into_iter()
        .map(|(case, body, uid)| (case, body, uid.to_string()))
        .collect()
}
