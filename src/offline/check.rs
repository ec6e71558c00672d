//! `check`: every manifest evaluated as a chosen user would send it, through the same
//! `Admission::decide` the server runs; objects outside what the webhook validates, or
//! outside tenant scope for a tenant layer, are SKIPPED with the reason.

use serde_json::Value;

use super::manifests::{DefaultNamespace, Manifest, identity, namespace_of, target_of};
use super::root_host_refusal;
use super::verdict::{Verdict, VerdictKind, apply_decision};
use crate::admission::{Admission, AdmissionRequest};
use crate::policy::{Layer, Mode, PolicyConfig};

/// Who `check` pretends to be.
#[derive(Debug, Clone)]
pub struct Caller {
    pub username: String,
    pub groups: Vec<String>,
    /// Namespace for namespaced objects that name none (kubectl's rule).
    pub default_namespace: DefaultNamespace,
}

/// Namespaced objects among `manifests` that name no namespace (for the stderr note).
pub fn unnamespaced(manifests: &[Manifest]) -> usize {
    manifests
        .iter()
        .filter(|m| match &m.object {
            Ok(o) => {
                target_of(o).is_some_and(|t| !t.cluster_scoped())
                    && o.pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
            }
            Err(_) => false,
        })
        .count()
}

/// The stderr note for objects evaluated in a namespace they do not name.
pub fn unnamespaced_note(count: usize, caller: &Caller, cfg: &PolicyConfig) -> Option<String> {
    // With -n the user said where they go: nothing to point out.
    if count == 0 || matches!(caller.default_namespace, DefaultNamespace::Flag(_)) {
        return None;
    }
    let ns = caller.default_namespace.name();
    let scope = if cfg.in_tenant_scope(ns) {
        String::new()
    } else {
        format!(
            ", which is outside tenant scope ({}*): their hostname layers do not run there (SKIPPED)",
            cfg.tenant_prefix
        )
    };
    let (objects, name) = if count == 1 {
        ("object", "names")
    } else {
        ("objects", "name")
    };
    let how = match &caller.default_namespace {
        DefaultNamespace::Default => format!(
            "{name} no metadata.namespace and no -n was given (as in `helm template` output without -n)"
        ),
        other => format!("{name} no metadata.namespace; {}", other.origin()),
    };
    Some(format!(
        "note: {count} namespaced {objects} {how}: evaluated in namespace {ns:?} as kubectl would create them{scope}. Pass -n NAMESPACE to check them where they will be installed"
    ))
}

/// `check`: evaluate every manifest as a CREATE by `caller` (an UPDATE when the live object
/// is known).
pub async fn check(admission: &Admission, manifests: &[Manifest], caller: &Caller) -> Vec<Verdict> {
    let mut verdicts = Vec::with_capacity(manifests.len());
    for (i, m) in manifests.iter().enumerate() {
        verdicts.push(check_one(admission, i, m, caller).await);
    }
    verdicts
}

async fn check_one(admission: &Admission, i: usize, m: &Manifest, caller: &Caller) -> Verdict {
    let cfg = admission.config();
    let mut v = Verdict {
        kind: String::new(),
        api_version: String::new(),
        namespace: String::new(),
        name: String::new(),
        verdict: VerdictKind::Error,
        allowed: false,
        operation: if m.live.is_some() { "UPDATE" } else { "CREATE" },
        layer: None,
        message: String::new(),
        warnings: Vec::new(),
        source: m.source.clone(),
    };
    let object = match &m.object {
        Ok(o) => o,
        Err(e) => {
            v.message = e.clone();
            return v;
        }
    };
    let id = identity(object);
    v.kind = id.kind.clone();
    v.api_version = id.api_version.clone();
    v.name = id.name.clone();
    if !object.is_object() || id.kind.is_empty() || id.api_version.is_empty() {
        v.message = "not a Kubernetes object: apiVersion and kind are required".to_string();
        return v;
    }
    let Some(target) = target_of(object) else {
        v.namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        v.verdict = VerdictKind::Skipped;
        v.allowed = true;
        v.message = format!(
            "kind not validated: tenant-gateway has no layer for {} ({})",
            id.kind, id.api_version
        );
        return v;
    };
    let layer = target.layer();
    v.layer = Some(layer.as_str().to_string());
    let (namespace, defaulted) = if target.cluster_scoped() {
        (None, false)
    } else {
        let (ns, d) = namespace_of(object, &caller.default_namespace);
        (Some(ns), d)
    };
    v.namespace = namespace.clone().unwrap_or_default();
    if layer == Layer::Ingress
        && cfg.root_host.is_none()
        && cfg.enforcement.mode(Layer::Ingress) != Mode::Off
        && cfg.in_tenant_scope(&v.namespace)
    {
        v.message = root_host_refusal();
        return v;
    }

    // Serializing a Value cannot fail (its keys are strings); if it ever did, the request
    // would carry no object and be denied, never admitted.
    let raw = serde_json::value::to_raw_value(object).ok();
    let old_raw = m
        .live
        .as_ref()
        .and_then(|o| serde_json::value::to_raw_value(o).ok());
    let null = serde_json::value::RawValue::NULL;
    let mut request = AdmissionRequest::create_for(
        format!("check-{i}"),
        target,
        &id.api_version,
        namespace.clone(),
        raw.as_deref().unwrap_or(null),
        caller.username.clone(),
        caller.groups.clone(),
    );
    if let Some(old) = old_raw.as_deref() {
        request = request.into_update(old);
    }
    let (decision, _) = admission.decide(Some(target), &request).await;
    apply_decision(&mut v, &decision);
    if v.verdict == VerdictKind::Allowed
        && layer.tenant_scoped()
        && !cfg.in_tenant_scope(&v.namespace)
    {
        v.verdict = VerdictKind::Skipped;
        v.message = if defaulted {
            format!(
                "evaluated in namespace {} ({}), which is outside tenant scope ({}*): the {layer} layer checks tenant namespaces only; pass -n to check it where it will be installed",
                v.namespace,
                caller.default_namespace.origin(),
                cfg.tenant_prefix
            )
        } else {
            format!(
                "namespace {} is outside tenant scope ({}*): the {layer} layer checks tenant namespaces only",
                v.namespace, cfg.tenant_prefix
            )
        };
    }
    v
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::cluster::{NamespaceSource, StaticNamespaces};
    use crate::metrics::Metrics;
    use crate::offline::manifests::Source;
    use crate::offline::verdict::Summary;

    fn admission() -> Admission {
        let cfg = PolicyConfig {
            root_host: Some("example.org".to_string()),
            ..PolicyConfig::default()
        };
        let mut ns = StaticNamespaces::default();
        ns.insert(
            "tenant-alice",
            [(
                crate::policy::HOST_LABEL.to_string(),
                "alice.example.org".to_string(),
            )]
            .into(),
        );
        Admission::new(
            Arc::new(cfg),
            NamespaceSource::Static(Arc::new(ns)),
            Metrics::new(),
        )
    }

    fn manifest(object: Value) -> Manifest {
        Manifest {
            source: Source {
                file: "t.yaml".into(),
                document: 1,
                item: None,
            },
            object: Ok(object),
            live: None,
        }
    }

    fn caller() -> Caller {
        Caller {
            username: "alice".into(),
            groups: vec![],
            default_namespace: DefaultNamespace::Default,
        }
    }

    #[tokio::test]
    async fn offline_denials_do_not_say_retry() {
        let many: Vec<String> = (0..80).map(|i| format!("h{i}.bob.example.org")).collect();
        let objects = [
            // Namespace not in the snapshot: the live webhook suggests retrying.
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                   "metadata": {"name": "r", "namespace": "tenant-new"},
                   "spec": {"hostnames": ["a.example.org"]}}),
            // More problems than are listed.
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                   "metadata": {"name": "r", "namespace": "tenant-alice"},
                   "spec": {"hostnames": many}}),
        ];
        let a = admission();
        for o in objects {
            let v = check(&a, &[manifest(o)], &caller()).await;
            assert_eq!(v[0].verdict, VerdictKind::Denied, "{v:?}");
            assert!(!v[0].message.contains("retry"), "{}", v[0].message);
            assert!(
                v[0].message.contains("namespace.cozystack.io/host")
                    || v[0].message.contains("run again to see the rest"),
                "{}",
                v[0].message
            );
        }
    }

    #[tokio::test]
    async fn verdicts_for_each_kind_of_outcome() {
        let a = admission();
        let route = |ns: Option<&str>| {
            let mut o = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                               "metadata": {"name": "r"}, "spec": {"hostnames": ["x.example.org"]}});
            if let Some(ns) = ns {
                o["metadata"]["namespace"] = json!(ns);
            }
            o
        };
        let ms = vec![
            manifest(route(None)),
            manifest(route(Some("cozy-dashboard"))),
            manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})),
            manifest(json!({"metadata": {"name": "nokind"}})),
            Manifest {
                object: Err("document 2 is not valid YAML/JSON: bad".into()),
                ..manifest(json!(null))
            },
        ];
        let v = check(&a, &ms, &caller()).await;
        let kinds: Vec<VerdictKind> = v.iter().map(|v| v.verdict).collect();
        assert_eq!(
            kinds,
            vec![
                VerdictKind::Skipped,
                VerdictKind::Skipped,
                VerdictKind::Skipped,
                VerdictKind::Error,
                VerdictKind::Error
            ]
        );
        assert!(
            v[0].message.contains("no metadata.namespace"),
            "{}",
            v[0].message
        );
        assert_eq!(v[0].namespace, "default");
        assert!(
            !v[1].message.contains("no metadata.namespace"),
            "{}",
            v[1].message
        );
        let s = Summary::of(&v);
        assert_eq!(
            s.to_string(),
            "5 objects: 0 allowed, 0 warned, 0 denied, 3 skipped, 2 errors"
        );
        assert_eq!(s.exit_code(), 2);
        assert_eq!(
            Summary {
                denied: 1,
                ..Summary::default()
            }
            .exit_code(),
            1
        );
        assert_eq!(
            Summary {
                warned: 1,
                skipped: 1,
                ..Summary::default()
            }
            .exit_code(),
            0
        );
    }
}
