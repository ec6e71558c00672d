//! The judge: one stored object through the layer admission runs for its kind, as a CREATE
//! by an untrusted caller in its namespace (SPEC §3.9), with admission's messages. The layers
//! are `crate::policy`'s own functions; nothing is re-implemented here.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use serde_json::Value;

use super::kinds::GuardedKind;
use crate::platform::{ApexOwners, HOST_LABEL, NamespaceContext};
use crate::policy::{self, Layer, Operation, PolicyConfig, Review};

/// What the judge found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// The layer's violations, each complete on its own. Boxed, like the error: the store
    /// keeps a verdict per object, nearly always a pass, in 16 bytes.
    Fail(Box<Vec<String>>),
    /// The object could not be judged: a field of the wrong type (admission denies such an
    /// object whatever the mode), an object that does not decode, a bug in a layer.
    Error(Box<String>),
}

impl Verdict {
    pub fn is_violation(&self) -> bool {
        !matches!(self, Verdict::Pass)
    }
}

/// The namespace context a layer reads, as admission builds it: the host label (lowercased,
/// as admission shows apexes), `NotFound` when the namespace does not exist. `host` is the
/// label's value as written, `Some("")` for an empty one.
pub fn namespace_context(exists: bool, host: Option<&str>) -> NamespaceContext {
    if !exists {
        return NamespaceContext::NotFound;
    }
    let labels = host
        .map(|h| BTreeMap::from([(HOST_LABEL.to_string(), h.to_ascii_lowercase())]))
        .unwrap_or_default();
    NamespaceContext::Found { labels }
}

/// Judge the projection `body` of `kind` `namespace/name` (`namespace` empty for Packages).
pub fn judge(
    kind: GuardedKind,
    namespace: &str,
    name: &str,
    body: &Value,
    ns: &NamespaceContext,
    others: &dyn ApexOwners,
    cfg: &PolicyConfig,
) -> Verdict {
    let review = Review {
        operation: Operation::Create,
        kind: kind.kind(),
        namespace,
        name,
        object: body,
        old_object: None,
        username: "",
        groups: &[],
    };
    let layer = kind.layer();
    // A bug in a layer must not stop the audit of everything else (admission denies then).
    let result = catch_unwind(AssertUnwindSafe(|| match layer {
        // Layer 9 judges the caller too; a stored object has none, so only its content.
        Layer::TenantGateway => policy::tenantgateway::evaluate_content(&review, ns, cfg),
        _ => policy::evaluate_with(layer, &review, ns, others, cfg),
    }));
    match result {
        Ok(Ok(f)) if f.violations.is_empty() => Verdict::Pass,
        Ok(Ok(f)) => Verdict::Fail(Box::new(
            f.violations.iter().map(|m| stored_text(m)).collect(),
        )),
        Ok(Err(shape)) => Verdict::Error(shape.to_string().into()),
        Err(_) => Verdict::Error(
            format!(
                "{} {}: internal error while evaluating the {layer} policy; please report this",
                kind.kind(),
                policy::object_ref(&review)
            )
            .into(),
        ),
    }
}

/// The verdict of an object that could not be read at all.
pub fn undecodable(kind: GuardedKind, namespace: &str, name: &str, why: &str) -> Verdict {
    let object = if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    };
    Verdict::Error(
        format!(
            "{} {object}: the stored object cannot be read ({why}); it is not audited until it \
             is fixed or deleted",
            kind.kind()
        )
        .into(),
    )
}

/// Advice admission gives a caller that is writing, which means nothing for an object already
/// stored: the same messages otherwise.
const WRITE_ONLY_ADVICE: [(&str, &str); 2] = [
    (
        " If the namespace is being created, retry in a few seconds.",
        "",
    ),
    (" and retry to see the rest", " to see the rest"),
];

fn stored_text(message: &str) -> String {
    WRITE_ONLY_ADVICE
        .iter()
        .fold(message.to_string(), |m, (from, to)| m.replace(from, to))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::audit::project::project;
    use crate::cluster::apex::ApexMap;
    use crate::platform::NoApexOwners;

    fn cfg() -> PolicyConfig {
        PolicyConfig {
            root_host: Some("example.org".into()),
            ..PolicyConfig::default()
        }
    }

    fn alice() -> NamespaceContext {
        namespace_context(true, Some("Alice.Example.org"))
    }

    fn object(kind: GuardedKind, spec: Value) -> Value {
        json!({"apiVersion": format!("{}/{}", kind.group(), kind.default_version()),
               "kind": kind.kind(), "metadata": {"name": "x", "namespace": "tenant-alice"},
               "spec": spec})
    }

    fn run(kind: GuardedKind, namespace: &str, body: &Value, ns: &NamespaceContext) -> Verdict {
        judge(kind, namespace, "x", body, ns, &NoApexOwners, &cfg())
    }

    /// (kind, namespace, object, namespace context, expected: pass / fail count / error)
    #[test]
    fn each_kind_is_judged_by_its_layer_as_an_untrusted_create() {
        #[derive(Debug, PartialEq)]
        enum Want {
            Pass,
            Fail(usize),
            Error,
        }
        let listeners = |h: &[Value]| {
            json!({"listeners": h.iter().enumerate()
                .map(|(i, h)| json!({"name": format!("l{i}"), "hostname": h}))
                .collect::<Vec<_>>()})
        };
        let package = |attached: Value| {
            json!({"apiVersion": "cozystack.io/v1alpha1", "kind": "Package",
                   "metadata": {"name": "cozystack.cozystack-platform"},
                   "spec": {"components": {"platform": {"values": {
                       "gateway": {"attachedNamespaces": attached}}}}}})
        };
        let k = GuardedKind::HttpRoute;
        let cases: Vec<(GuardedKind, &str, Value, NamespaceContext, Want)> = vec![
            (
                k,
                "tenant-alice",
                object(k, json!({"hostnames": ["a.alice.example.org"]})),
                alice(),
                Want::Pass,
            ),
            (
                k,
                "tenant-alice",
                object(k, json!({"hostnames": ["a.bob.example.org"]})),
                alice(),
                Want::Fail(1),
            ),
            (
                k,
                "tenant-alice",
                object(k, json!({})),
                alice(),
                Want::Fail(1),
            ),
            (
                k,
                "tenant-alice",
                object(k, json!({"hostnames": [1]})),
                alice(),
                Want::Error,
            ),
            (
                k,
                "tenant-alice",
                object(k, json!({"hostnames": ["a.alice.example.org"]})),
                namespace_context(false, None),
                Want::Fail(1),
            ),
            (
                k,
                "tenant-alice",
                object(k, json!({"hostnames": ["a.alice.example.org"]})),
                namespace_context(true, Some("")),
                Want::Fail(1),
            ),
            // Outside tenant scope: platform-managed, admitted unchecked.
            (
                k,
                "cozy-dashboard",
                object(k, json!({"hostnames": ["a.bob.example.org"]})),
                namespace_context(true, None),
                Want::Pass,
            ),
            (
                GuardedKind::GrpcRoute,
                "tenant-alice",
                object(
                    GuardedKind::GrpcRoute,
                    json!({"hostnames": ["g.bob.example.org"]}),
                ),
                alice(),
                Want::Fail(1),
            ),
            (
                GuardedKind::TlsRoute,
                "tenant-alice",
                object(
                    GuardedKind::TlsRoute,
                    json!({"hostnames": ["t.alice.example.org"]}),
                ),
                alice(),
                Want::Pass,
            ),
            (
                GuardedKind::Gateway,
                "tenant-alice",
                object(
                    GuardedKind::Gateway,
                    listeners(&[json!("a.alice.example.org"), json!("*.example.org")]),
                ),
                alice(),
                Want::Fail(1),
            ),
            (
                GuardedKind::XListenerSet,
                "tenant-alice",
                object(GuardedKind::XListenerSet, listeners(&[json!(null)])),
                alice(),
                Want::Pass,
            ),
            (
                GuardedKind::ListenerSet,
                "tenant-alice",
                object(
                    GuardedKind::ListenerSet,
                    listeners(&[json!("x.bob.example.org")]),
                ),
                alice(),
                Want::Fail(1),
            ),
            (
                GuardedKind::Ingress,
                "tenant-alice",
                object(
                    GuardedKind::Ingress,
                    json!({"rules": [{"host": "shop.customer.com"}, {}]}),
                ),
                alice(),
                Want::Fail(1),
            ),
            (
                GuardedKind::Ingress,
                "tenant-alice",
                object(
                    GuardedKind::Ingress,
                    json!({"rules": [{"host": "a.alice.example.org"}]}),
                ),
                alice(),
                Want::Pass,
            ),
            (
                GuardedKind::Package,
                "",
                package(json!(["cozy-x", "tenant-root"])),
                namespace_context(false, None),
                Want::Fail(1),
            ),
            (
                GuardedKind::Package,
                "",
                package(json!("tenant-root")),
                namespace_context(false, None),
                Want::Error,
            ),
            // Layer 9's content only: an untrusted caller is not a finding about what is stored.
            (
                GuardedKind::TenantGateway,
                "tenant-alice",
                object(
                    GuardedKind::TenantGateway,
                    json!({"apex": "alice.example.org"}),
                ),
                alice(),
                Want::Pass,
            ),
            (
                GuardedKind::TenantGateway,
                "tenant-alice",
                object(
                    GuardedKind::TenantGateway,
                    json!({"apex": "bob.example.org", "attachedNamespaces": ["tenant-bob"]}),
                ),
                alice(),
                Want::Fail(2),
            ),
        ];
        for (kind, namespace, obj, ns, want) in cases {
            let got = run(kind, namespace, &obj, &ns);
            let got_want = match &got {
                Verdict::Pass => Want::Pass,
                Verdict::Fail(m) => Want::Fail(m.len()),
                Verdict::Error(_) => Want::Error,
            };
            assert_eq!(got_want, want, "{kind} {namespace} {obj}: {got:?}");
            // The projection keeps everything the verdict depends on.
            assert_eq!(
                run(kind, namespace, &project(kind, &obj), &ns),
                got,
                "{kind} {obj}"
            );
        }
    }

    #[test]
    fn messages_are_admissions_without_the_advice_for_writers() {
        let k = GuardedKind::HttpRoute;
        let obj = object(k, json!({"hostnames": ["shop.bob.example.org"]}));
        let Verdict::Fail(m) = run(k, "tenant-alice", &obj, &alice()) else {
            panic!("fails")
        };
        assert_eq!(
            *m,
            [
                "HTTPRoute tenant-alice/x: hostname \"shop.bob.example.org\" is not allowed: \
              hostnames must equal the namespace's namespace.cozystack.io/host label or be \
              subdomains of it (alice.example.org)"
                    .to_string()
            ]
        );
        let Verdict::Fail(m) = run(k, "tenant-alice", &obj, &namespace_context(false, None)) else {
            panic!("fails")
        };
        assert!(m[0].contains("was not found"), "{m:?}");
        assert!(!m[0].contains("retry"), "{m:?}");
        let Verdict::Error(e) = run(
            k,
            "tenant-alice",
            &object(k, json!({"hostnames": "a"})),
            &alice(),
        ) else {
            panic!("shape")
        };
        assert!(
            e.contains("spec.hostnames") && e.contains("tenant-alice/x"),
            "{e}"
        );
    }

    #[test]
    fn a_custom_domain_inside_another_namespaces_apex_fails() {
        let mut apexes = ApexMap::default();
        apexes.set(
            "tenant-shop",
            &BTreeMap::from([(HOST_LABEL.to_string(), "customer.com".to_string())]),
        );
        let k = GuardedKind::Ingress;
        let obj = object(k, json!({"rules": [{"host": "www.customer.com"}]}));
        let got = judge(k, "tenant-alice", "x", &obj, &alice(), &apexes, &cfg());
        assert!(
            matches!(&got, Verdict::Fail(m) if m[0].contains("another tenant")),
            "{got:?}"
        );
        let got = judge(
            k,
            "tenant-alice",
            "x",
            &obj,
            &alice(),
            &NoApexOwners,
            &cfg(),
        );
        assert_eq!(got, Verdict::Pass, "a custom domain nobody owns");
    }

    #[test]
    fn an_unreadable_object_is_an_error_naming_it() {
        let v = undecodable(GuardedKind::Ingress, "tenant-a", "web", "expected a string");
        assert!(
            matches!(&v, Verdict::Error(m) if m.starts_with("Ingress tenant-a/web: ") && m.contains("expected a string")),
            "{v:?}"
        );
        assert!(v.is_violation());
        let v = undecodable(GuardedKind::Package, "", "p", "x");
        assert!(matches!(&v, Verdict::Error(m) if m.starts_with("Package p: ")));
    }
}
