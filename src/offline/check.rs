//! `check`: every manifest evaluated as a chosen user would send it, through the same
//! `Admission::decide` the server runs; objects outside what the webhook validates, or
//! outside tenant scope for a tenant layer, are SKIPPED with the reason. [`run`] is the
//! command as the CLI runs it, in steps; [`check`] is the evaluation `test` shares.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde_json::Value;

use super::manifests::{
    DefaultNamespace, Manifest, identity, namespace_of, read_manifests_skipping, target_of,
};
use super::verdict::{Summary, Verdict, VerdictKind, apply_decision, print_json, print_table};
use super::{OfflineError, Sources, live, root_host_refusal};
use crate::admission::{Admission, AdmissionRequest};
use crate::cluster::client;
use crate::config::{CheckArgs, CheckOutput, PolicyArgs};
use crate::policy::{Layer, Mode, PolicyConfig};

/// `check` as the command line runs it: the flags checked → the manifests and the caller →
/// where namespaces and routes come from (snapshot files or the live cluster) → the
/// Admission → verdicts → output and exit code (SPEC §4). Each step hands the next what it
/// needs or ends the run with an input error.
pub async fn run(args: CheckArgs, policy: PolicyArgs) -> anyhow::Result<ExitCode> {
    let origin = origin(&args, &policy)?;
    let mut manifests = manifests_to_check(&args, &policy)?;
    let caller = caller(&args, origin)?;
    let cfg = policy.policy_config_offline()?;
    let sources = match origin {
        Origin::Cluster => {
            live::read(
                args.kubeconfig.as_deref(),
                args.context.as_deref(),
                &mut manifests,
                &caller.default_namespace,
                !args.create_only,
            )
            .await?
        }
        Origin::Files => Sources::from_files(&policy, args.routes.as_deref())?,
    };
    let admission = sources.admission(cfg);
    if let Some(note) = unnamespaced_note(unnamespaced(&manifests), &caller, admission.config()) {
        eprintln!("{note}");
    }
    let verdicts = check(&admission, &manifests, &caller).await;
    output(&verdicts, args.output)
}

/// Where namespaces and routes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// `--namespaces` and `--routes` snapshots (or none).
    Files,
    /// `--kubeconfig` or `--context`: the cluster, read once.
    Cluster,
}

/// The flags agree on one origin for namespaces and one for routes.
fn origin(args: &CheckArgs, policy: &PolicyArgs) -> anyhow::Result<Origin> {
    if args.kubeconfig.is_none() && args.context.is_none() {
        return Ok(Origin::Files);
    }
    if policy.namespaces.is_some() {
        anyhow::bail!(
            "--namespaces and --kubeconfig/--context both say where namespaces come from: give one"
        );
    }
    if args.routes.is_some() {
        anyhow::bail!(
            "--routes and --kubeconfig/--context both say where routes come from: give one"
        );
    }
    Ok(Origin::Cluster)
}

/// The manifests of `-f`; notes on what was not read go to stderr.
fn manifests_to_check(
    args: &CheckArgs,
    policy: &PolicyArgs,
) -> Result<Vec<Manifest>, OfflineError> {
    // Snapshots are context, not input, when they sit beside the manifests.
    let context_files: Vec<&Path> = [policy.namespaces.as_deref(), args.routes.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    let manifests = read_manifests_skipping(&args.files, args.recursive, &context_files)?;
    for note in &manifests.notes {
        eprintln!("{note}");
    }
    Ok(manifests.items)
}

/// Who the manifests are evaluated as, and the namespace of those that name none: `-n`,
/// else the kubeconfig context's, else `default`, as kubectl.
fn caller(args: &CheckArgs, origin: Origin) -> anyhow::Result<Caller> {
    let default_namespace = match &args.namespace {
        Some(n) if !n.trim().is_empty() => DefaultNamespace::Flag(n.trim().to_string()),
        _ => {
            match client::context_namespace(args.kubeconfig.as_deref(), args.context.as_deref()) {
                Ok(Some((context, namespace))) => DefaultNamespace::Context { context, namespace },
                Ok(None) => DefaultNamespace::Default,
                // Only $KUBECONFIG was in use: the namespace is a convenience, not worth failing.
                Err(e) if origin == Origin::Files => {
                    eprintln!(
                        "note: {e}; objects without a namespace are evaluated in \"default\""
                    );
                    DefaultNamespace::Default
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    Ok(Caller {
        username: args.as_user.clone(),
        groups: args.as_groups.clone(),
        default_namespace,
    })
}

/// Print the verdicts as `format` asks; the exit code is the summary's, also when stdout
/// was closed early (`| head`).
fn output(verdicts: &[Verdict], format: CheckOutput) -> anyhow::Result<ExitCode> {
    let summary = Summary::of(verdicts);
    let code = ExitCode::from(summary.exit_code());
    let mut stdout = std::io::stdout().lock();
    let printed = match format {
        CheckOutput::Table => print_table(verdicts, &mut stdout),
        CheckOutput::Json => print_json(verdicts, &mut stdout),
    }
    .and_then(|()| stdout.flush());
    match printed {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(code),
        Err(e) => return Err(e.into()),
    }
    if summary.errors > 0 {
        eprintln!(
            "error: {} of {} objects could not be evaluated (ERROR lines above)",
            summary.errors, summary.objects
        );
    }
    Ok(code)
}

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
