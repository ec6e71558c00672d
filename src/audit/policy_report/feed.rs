//! `serve --policy-reports`: the continuous audit's results as the writer's input, and the
//! writer's counters on `/metrics`.
//!
//! - [`report_result`] (pure): one [`AuditResult`] (an object judged by one layer) as the
//!   [`ReportResult`] a report lists: the object's reference (no namespace for a Namespace of
//!   the apex table), the layer, its rule, the outcome and one message: admission's denial
//!   message for a failure ([`crate::policy::combine_violations`]), the reason for an error,
//!   and `<object>: <rule> holds` for a pass (what Kyverno writes for a pass: the rule
//!   passed, nothing more).
//! - [`apply_changes`] (pure) and [`follow`]: the namespace → results map kept from the
//!   audit's [`ChangeFeed`], each change re-reading only the namespaces it names; the writer
//!   gets `None` until the audit has judged everything once, then the whole map (unchanged
//!   namespaces share their `Arc`, so the writer does not even compare them).
//! - Packages have no report. A PolicyReport is namespaced and a Package is cluster-scoped
//!   and concerns the platform, not one namespace (the audit keeps its results under
//!   namespace `""`). Kyverno reports cluster-scoped objects in a ClusterPolicyReport; this
//!   product does not write one (a second CRD and grant for one kind): a Package's
//!   violation shows in `tenant_gateway_audit_violations{layer="package"}`, in its Warning
//!   event and in `tenant-gateway audit`.
//! - [`run`]: the writer, the feed and the counters as one future, which `serve` runs as a
//!   part: `tenant_gateway_policy_report_namespaces{state}` (pending, failing, foreign),
//!   `tenant_gateway_policy_report_writes_total{verb}` (apply, delete) and
//!   `tenant_gateway_policy_report_synced`.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::Client;
use tokio::sync::watch;

use super::render::{ObjectRef, Outcome as ReportOutcome, ReportResult};
use super::writer::{ReportInput, Writer, WriterError, WriterStatus};
use crate::audit::live::Auditor;
use crate::audit::{AuditResult, Outcome};
use crate::cluster::lease::Leader;
use crate::metrics::Metrics;
use crate::policy::combine_violations;

/// The result a report lists for `r`.
pub fn report_result(r: &AuditResult) -> ReportResult {
    let o = &r.object;
    let message = match (r.outcome, r.messages.is_empty()) {
        (Outcome::Pass, _) => format!("{} {}: {} holds", o.kind, o.display(), r.rule),
        (Outcome::Fail | Outcome::Error, false) => combine_violations(&r.messages),
        // The judge always says why; should it not, the report still names the rule.
        (Outcome::Fail, true) => format!("{} {}: {} does not hold", o.kind, o.display(), r.rule),
        (Outcome::Error, true) => format!("{} {}: cannot be judged", o.kind, o.display()),
    };
    ReportResult {
        object: ObjectRef {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            namespace: (!o.namespace.is_empty()).then(|| o.namespace.clone()),
            name: o.name.clone(),
            uid: o.uid.clone(),
        },
        layer: r.layer,
        rule: r.rule.to_string(),
        outcome: match r.outcome {
            Outcome::Pass => ReportOutcome::Pass,
            Outcome::Fail => ReportOutcome::Fail,
            Outcome::Error => ReportOutcome::Error,
        },
        message,
    }
}

/// Take `changed` namespaces into `map`, reading each one's results with `results`: a
/// namespace with results gets them (a new `Arc`), one without leaves the map, and `""`
/// (the Packages) is skipped (see the module doc).
pub fn apply_changes(
    map: &mut ReportInput,
    changed: BTreeSet<String>,
    results: impl Fn(&str) -> Vec<AuditResult>,
) {
    for ns in changed {
        if ns.is_empty() {
            continue;
        }
        let listed: Vec<ReportResult> = results(&ns).iter().map(report_result).collect();
        if listed.is_empty() {
            map.remove(&ns);
        } else {
            map.insert(ns, Arc::new(listed));
        }
    }
}

/// Keep `tx` at the audit's results, namespace by namespace, for as long as the audit runs:
/// the first value once it has judged everything, then one per change.
pub async fn follow(auditor: Auditor, tx: watch::Sender<Option<Arc<ReportInput>>>) {
    let mut feed = auditor.subscribe();
    let mut map = ReportInput::new();
    loop {
        let changed = feed.next().await;
        apply_changes(&mut map, changed, |ns| auditor.results(ns));
        tx.send_replace(Some(Arc::new(map.clone())));
    }
}

/// Write the audit's results as PolicyReports on `leader`'s Lease, with the writer's
/// counters on `metrics`. Ends only when the writer does (its watch of the reports ended).
pub async fn run(
    client: Client,
    leader: Leader,
    auditor: Auditor,
    metrics: Metrics,
) -> Result<(), WriterError> {
    let (tx, rx) = watch::channel(None);
    let writer = Writer::new(client, leader);
    let status = writer.status();
    tokio::select! {
        ended = writer.run(rx) => ended,
        () = follow(auditor, tx) => Ok(()),
        () = export(status, metrics) => Ok(()),
    }
}

/// The writer's status on `/metrics` while it runs (never ends on its own).
async fn export(mut status: watch::Receiver<WriterStatus>, metrics: Metrics) {
    let mut before = WriterStatus::default();
    record(&metrics, &before, &before);
    loop {
        let now = status.borrow_and_update().clone();
        record(&metrics, &before, &now);
        before = now;
        if status.changed().await.is_err() {
            // The writer is gone: its end is what ends the part.
            std::future::pending::<()>().await;
        }
    }
}

/// Set the writer's metrics to `now`; the write counters grow by what `now` adds to `before`.
fn record(metrics: &Metrics, before: &WriterStatus, now: &WriterStatus) {
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    for (state, n) in [
        ("pending", now.pending),
        ("failing", now.failing),
        ("foreign", now.foreign),
    ] {
        metrics
            .policy_report_namespaces
            .with_label_values(&[state])
            .set(count(n));
    }
    for (verb, was, is) in [
        ("apply", before.applied, now.applied),
        ("delete", before.deleted, now.deleted),
    ] {
        metrics
            .policy_report_writes
            .with_label_values(&[verb])
            .inc_by(is.saturating_sub(was));
    }
    metrics.policy_report_synced.set(i64::from(now.synced));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::ObjectRef as AuditRef;
    use crate::policy::Layer;

    fn audit(
        kind: &str,
        namespace: &str,
        name: &str,
        layer: Layer,
        outcome: Outcome,
        messages: &[&str],
    ) -> AuditResult {
        AuditResult {
            object: AuditRef {
                api_version: if kind == "Namespace" {
                    "v1".into()
                } else {
                    "gateway.networking.k8s.io/v1".into()
                },
                kind: kind.into(),
                namespace: namespace.into(),
                name: name.into(),
                uid: (kind != "Namespace").then(|| format!("uid-{name}")),
            },
            layer,
            rule: crate::audit::kinds::rule_of(layer),
            outcome,
            messages: messages.iter().map(|m| m.to_string()).collect(),
        }
    }

    #[test]
    fn an_audit_result_is_one_report_result_with_admissions_message() {
        use Layer::*;
        use Outcome::*;
        // (case, result, namespace, outcome, message)
        let cases: Vec<(&str, AuditResult, Option<&str>, ReportOutcome, &str)> = vec![
            (
                "a pass says which rule held",
                audit("HTTPRoute", "tenant-a", "web", Route, Pass, &[]),
                Some("tenant-a"),
                ReportOutcome::Pass,
                "HTTPRoute tenant-a/web: route-hostnames-within-apex holds",
            ),
            (
                "one problem: its message as it is",
                audit(
                    "HTTPRoute",
                    "tenant-a",
                    "hijack",
                    Route,
                    Fail,
                    &["HTTPRoute tenant-a/hijack: hostname \"x.b.org\" is not allowed"],
                ),
                Some("tenant-a"),
                ReportOutcome::Fail,
                "HTTPRoute tenant-a/hijack: hostname \"x.b.org\" is not allowed",
            ),
            (
                "two problems: the object named once, as admission denies it",
                audit(
                    "Gateway",
                    "tenant-a",
                    "edge",
                    Gateway,
                    Fail,
                    &[
                        "Gateway tenant-a/edge: listener \"a\" hostname \"*.org\" is not allowed",
                        "Gateway tenant-a/edge: listener \"b\" has no hostname",
                    ],
                ),
                Some("tenant-a"),
                ReportOutcome::Fail,
                "Gateway tenant-a/edge: 2 problems: (1) listener \"a\" hostname \"*.org\" is not \
                 allowed; (2) listener \"b\" has no hostname",
            ),
            (
                "an error keeps its reason",
                audit(
                    "Ingress",
                    "tenant-a",
                    "legacy",
                    Ingress,
                    Error,
                    &["Ingress tenant-a/legacy: spec.rules must be an array, got a string"],
                ),
                Some("tenant-a"),
                ReportOutcome::Error,
                "Ingress tenant-a/legacy: spec.rules must be an array, got a string",
            ),
            (
                "a Namespace of the apex table is cluster-scoped",
                audit(
                    "Namespace",
                    "",
                    "tenant-x",
                    Namespace,
                    Fail,
                    &["Namespace tenant-x: no apex"],
                ),
                None,
                ReportOutcome::Fail,
                "Namespace tenant-x: no apex",
            ),
            (
                "a failure without a message still names its rule",
                audit("HTTPRoute", "tenant-a", "odd", Route, Fail, &[]),
                Some("tenant-a"),
                ReportOutcome::Fail,
                "HTTPRoute tenant-a/odd: route-hostnames-within-apex does not hold",
            ),
        ];
        for (case, input, namespace, outcome, message) in cases {
            let got = report_result(&input);
            assert_eq!(got.object.namespace.as_deref(), namespace, "{case}");
            assert_eq!(got.outcome, outcome, "{case}");
            assert_eq!(got.message, message, "{case}");
            assert_eq!(got.layer, input.layer, "{case}");
            assert_eq!(got.rule, input.rule, "{case}");
            assert_eq!(
                (
                    &got.object.api_version,
                    &got.object.kind,
                    &got.object.name,
                    &got.object.uid
                ),
                (
                    &input.object.api_version,
                    &input.object.kind,
                    &input.object.name,
                    &input.object.uid
                ),
                "{case}"
            );
        }
    }

    #[test]
    fn changes_reread_only_the_namespaces_named_and_leave_packages_out() {
        let world = |ns: &str| -> Vec<AuditResult> {
            match ns {
                "tenant-a" => vec![audit(
                    "HTTPRoute",
                    "tenant-a",
                    "web",
                    Layer::Route,
                    Outcome::Pass,
                    &[],
                )],
                "tenant-b" => vec![audit(
                    "HTTPRoute",
                    "tenant-b",
                    "api",
                    Layer::Route,
                    Outcome::Fail,
                    &["HTTPRoute tenant-b/api: outside"],
                )],
                "" => vec![audit(
                    "Package",
                    "",
                    "cozystack.cozystack-platform",
                    Layer::Package,
                    Outcome::Fail,
                    &["Package cozystack.cozystack-platform: attaches tenant-root"],
                )],
                _ => Vec::new(),
            }
        };
        let names = |v: &[&str]| -> BTreeSet<String> { v.iter().map(|s| s.to_string()).collect() };
        let mut map = ReportInput::new();
        apply_changes(&mut map, names(&["", "tenant-a", "tenant-b"]), world);
        assert_eq!(
            map.keys().map(String::as_str).collect::<Vec<_>>(),
            ["tenant-a", "tenant-b"],
            "Packages have no report"
        );
        assert_eq!(map["tenant-b"][0].outcome, ReportOutcome::Fail);
        let a_before = map["tenant-a"].clone();

        // tenant-b changed: emptied now; tenant-a not named, so not read again.
        let reads = std::cell::RefCell::new(Vec::new());
        apply_changes(&mut map, names(&["tenant-b"]), |ns| {
            reads.borrow_mut().push(ns.to_string());
            Vec::new()
        });
        assert_eq!(reads.into_inner(), ["tenant-b"]);
        assert_eq!(
            map.keys().map(String::as_str).collect::<Vec<_>>(),
            ["tenant-a"],
            "a namespace with nothing left leaves the map"
        );
        assert!(Arc::ptr_eq(&map["tenant-a"], &a_before), "untouched");
    }

    #[test]
    fn the_writers_status_becomes_bounded_metrics() {
        let m = Metrics::new();
        let zero = WriterStatus::default();
        record(&m, &zero, &zero);
        let text = m.render();
        for series in [
            "tenant_gateway_policy_report_namespaces{state=\"pending\"} 0",
            "tenant_gateway_policy_report_namespaces{state=\"failing\"} 0",
            "tenant_gateway_policy_report_namespaces{state=\"foreign\"} 0",
            "tenant_gateway_policy_report_writes_total{verb=\"apply\"} 0",
            "tenant_gateway_policy_report_writes_total{verb=\"delete\"} 0",
            "tenant_gateway_policy_report_synced 0",
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
        let one = WriterStatus {
            synced: true,
            pending: 3,
            failing: 1,
            applied: 5,
            deleted: 1,
            ..WriterStatus::default()
        };
        record(&m, &zero, &one);
        let two = WriterStatus {
            pending: 0,
            applied: 7,
            ..one.clone()
        };
        record(&m, &one, &two);
        let get = |state: &str| m.policy_report_namespaces.with_label_values(&[state]).get();
        assert_eq!((get("pending"), get("failing"), get("foreign")), (0, 1, 0));
        let writes = |verb: &str| m.policy_report_writes.with_label_values(&[verb]).get();
        assert_eq!((writes("apply"), writes("delete")), (7, 1), "counted once");
        assert_eq!(m.policy_report_synced.get(), 1);
    }
}
