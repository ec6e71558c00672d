//! Tier 3 for the PolicyReport writer (SPEC §3.9, issue 24 item 3): a real kube-apiserver
//! from the tests/k8s harness, the writer in-process with a fixed input, as a user holding
//! exactly the rights the chart grants it (`audit.policyReports=true`).
//!
//! Without the CRD it waits and writes nothing; once the chart's CRD is installed the
//! reports appear (server-side apply, our field manager); an identical input
//! and a restart write nothing (resourceVersions unchanged); a namespace whose results empty
//! out loses its report; a deleted report comes back; other tools' reports (another name, or
//! our name without our label) are never touched; a replica without the Lease writes
//! nothing. Every wait has a deadline.
//!
//! Set TENANT_GATEWAY_SKIP_E2E=1 to skip (said loudly).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};
use support::control_plane::*;
use support::poll::poll_async;
use tokio::sync::watch;

use tenant_gateway::audit::policy_report::api::PolicyReport;
use tenant_gateway::audit::policy_report::{
    ObjectRef, Outcome, ReportInput, ReportResult, Writer, WriterStatus,
};
use tenant_gateway::cluster::lease::Leader;
use tenant_gateway::policy::Layer;

const WAIT: Duration = Duration::from_secs(60);
/// The identity the writer runs as: only the chart's PolicyReport rules are bound to it.
const WRITER: &str = "policy-report-writer";
const REPORT: &str = "tenant-gateway";

fn result(ns: &str, kind: &str, name: &str, layer: Layer, outcome: Outcome) -> ReportResult {
    ReportResult {
        object: ObjectRef {
            api_version: "gateway.networking.k8s.io/v1".into(),
            kind: kind.into(),
            namespace: Some(ns.into()),
            name: name.into(),
            uid: Some(format!("uid-{ns}-{name}")),
        },
        layer,
        rule: "hostnames-within-apex".into(),
        outcome,
        message: format!("{kind} {ns}/{name}: {outcome:?}"),
    }
}

fn input(entries: Vec<(&str, Vec<ReportResult>)>) -> Option<Arc<ReportInput>> {
    Some(Arc::new(
        entries
            .into_iter()
            .map(|(ns, r)| (ns.to_string(), Arc::new(r)))
            .collect(),
    ))
}

/// tenant-a: a failing and a passing route; tenant-b: an Ingress that could not be judged;
/// tenant-c: a result, but its `tenant-gateway` report is another tool's.
fn first_input() -> Option<Arc<ReportInput>> {
    input(vec![
        (
            "tenant-a",
            vec![
                result("tenant-a", "HTTPRoute", "web", Layer::Route, Outcome::Pass),
                result("tenant-a", "HTTPRoute", "shop", Layer::Route, Outcome::Fail),
            ],
        ),
        (
            "tenant-b",
            vec![result(
                "tenant-b",
                "Ingress",
                "legacy",
                Layer::Ingress,
                Outcome::Error,
            )],
        ),
        (
            "tenant-c",
            vec![result(
                "tenant-c",
                "Gateway",
                "edge",
                Layer::Gateway,
                Outcome::Fail,
            )],
        ),
    ])
}

/// A user bound to exactly the PolicyReport rules the chart renders for the writer.
fn grant_the_charts_rules(cp: &ControlPlane) {
    let chart = repo_root().join("charts/tenant-gateway");
    let out = cp.helm(&[
        "template",
        "tg",
        path_str(&chart),
        "-n",
        "cozy-system",
        "--set",
        "rootHost=example.org",
        "--set",
        "audit.policyReports=true",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let role = tenant_gateway::yaml::read_documents(&text)
        .into_iter()
        .filter_map(|d| d.value.ok())
        .find(|v| v["kind"] == "ClusterRole")
        .expect("a ClusterRole");
    let rules: Vec<Value> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| r["apiGroups"] == json!(["wgpolicyk8s.io"]))
        .cloned()
        .collect();
    assert!(!rules.is_empty(), "the chart grants the writer its verbs");
    cp.grant_only(WRITER, &Value::Array(rules).to_string());
}

async fn writer_client(cp: &ControlPlane) -> kube::Client {
    let mut config = tenant_gateway::cluster::client::config(Some(&cp.kubeconfig()), None)
        .await
        .expect("kubeconfig");
    config.auth_info.impersonate = Some(WRITER.into());
    kube::Client::try_from(config).expect("client")
}

/// The chart's optional CRD (`audit.installPolicyReportCRD`; tests/charts.rs holds it equal
/// to `tenant-gateway crd --policy-report`).
fn install_the_charts_crd(cp: &ControlPlane) {
    let chart = repo_root().join("charts/tenant-gateway");
    let out = cp.helm(&[
        "template",
        "tg",
        path_str(&chart),
        "-n",
        "cozy-system",
        "--set",
        "rootHost=example.org",
        "--set",
        "audit.installPolicyReportCRD=true",
        "-s",
        "templates/policyreport-crd.yaml",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cp.kubectl_ok(
        &["apply", "--server-side", "-f", "-"],
        Some(&String::from_utf8_lossy(&out.stdout)),
    );
    cp.kubectl_ok(
        &[
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            "crd/policyreports.wgpolicyk8s.io",
        ],
        None,
    );
}

/// A report as another tool writes it.
fn foreign_report(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
        "metadata": {"name": name, "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "kyverno"}},
        "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0},
        "results": [{"policy": "disallow-latest-tag", "rule": "validate-image-tag",
            "result": "fail", "source": "kyverno"}]})
}

struct Cluster {
    admin: kube::Client,
}

impl Cluster {
    async fn report(&self, ns: &str, name: &str) -> Option<PolicyReport> {
        Api::<PolicyReport>::namespaced(self.admin.clone(), ns)
            .get_opt(name)
            .await
            .expect("read a PolicyReport")
    }

    async fn rv(&self, ns: &str, name: &str) -> Option<String> {
        self.report(ns, name)
            .await
            .and_then(|r| r.metadata.resource_version)
    }

    /// Our report in `ns` once it has `fail`/`pass`/`error` results.
    async fn wait_report(&self, ns: &str, pass: i64, fail: i64, error: i64) -> PolicyReport {
        poll_async(
            WAIT,
            &format!("the report of {ns} with {pass} pass, {fail} fail, {error} error"),
            || async {
                self.report(ns, REPORT).await.filter(|r| {
                    (r.summary.pass, r.summary.fail, r.summary.error) == (pass, fail, error)
                })
            },
        )
        .await
    }
}

/// Waits until the writer has taken more than `inputs_after` input changes and has nothing
/// left to plan or retry.
async fn settled(status: &mut watch::Receiver<WriterStatus>, inputs_after: u64) -> WriterStatus {
    tokio::time::timeout(
        WAIT,
        status.wait_for(|s| s.inputs > inputs_after && s.pending == 0 && s.failing == 0),
    )
    .await
    .expect("the writer settles")
    .expect("the writer runs")
    .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_are_written_once_kept_at_rest_and_removed_when_empty() {
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    for ns in ["tenant-a", "tenant-b", "tenant-c", "tenant-d"] {
        cp.kubectl_ok(&["create", "namespace", ns], None);
    }
    grant_the_charts_rules(&cp);
    let c = Cluster {
        admin: cp.kube_client().await,
    };
    let client = writer_client(&cp).await;

    // No CRD: the writer waits and says so.
    let (tx, rx) = watch::channel(None);
    let writer = Writer::new(client.clone(), Leader::always());
    let mut status = writer.status();
    let task = tokio::spawn(writer.run(rx));
    tokio::time::timeout(
        WAIT,
        status.wait_for(|s| s.crd_installed == Some(false) && !s.synced),
    )
    .await
    .expect("the missing CRD is noticed")
    .expect("the writer runs");
    assert_eq!(status.borrow().passes, 0, "nothing planned without the CRD");

    // The CRD appears; other tools' reports are there before ours.
    install_the_charts_crd(&cp);
    cp.apply_json(&foreign_report("tenant-a", "polr-kyverno"));
    cp.apply_json(&foreign_report("tenant-c", REPORT));
    let foreign_a = c.rv("tenant-a", "polr-kyverno").await.expect("created");
    let foreign_c = c.rv("tenant-c", REPORT).await.expect("created");
    // Listed, but the audit has not judged everything yet: nothing is planned.
    let s = tokio::time::timeout(WAIT, status.wait_for(|s| s.synced))
        .await
        .expect("the writer lists the reports once the CRD is there")
        .expect("runs")
        .clone();
    assert_eq!((s.crd_installed, s.passes), (Some(true), 0), "{s:?}");
    assert!(c.report("tenant-a", REPORT).await.is_none());
    tx.send_replace(first_input());

    let a = c.wait_report("tenant-a", 1, 1, 0).await;
    let b = c.wait_report("tenant-b", 0, 0, 1).await;
    assert_eq!(status.borrow().crd_installed, Some(true));
    // Server-side apply by the one field manager, our label, one result per object.
    let managers: Vec<(String, String)> = a
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        managers,
        [("tenant-gateway".to_string(), "Apply".to_string())]
    );
    assert_eq!(
        a.metadata.labels,
        Some(BTreeMap::from([(
            "app.kubernetes.io/managed-by".to_string(),
            "tenant-gateway".to_string()
        )]))
    );
    let names: Vec<(Option<String>, Option<String>)> = a
        .results
        .iter()
        .map(|r| {
            let o = &r.resources[0];
            (o.name.clone(), r.source.clone())
        })
        .collect();
    assert_eq!(
        names,
        [
            (Some("shop".into()), Some("tenant-gateway".into())),
            (Some("web".into()), Some("tenant-gateway".into())),
        ]
    );
    assert_eq!(b.results[0].policy, "tenant-gateway-ingress-hostnames");
    // Another tool's report of our name is not taken over; another name is not touched.
    let c_report = c.report("tenant-c", REPORT).await.expect("still there");
    assert_eq!(
        c_report.metadata.resource_version.as_deref(),
        Some(foreign_c.as_str())
    );
    assert_eq!(c_report.results[0].source.as_deref(), Some("kyverno"));
    let s = settled(&mut status, 0).await;
    assert_eq!(s.applied, 2, "tenant-a and tenant-b, not tenant-c: {s:?}");
    assert_eq!(s.foreign, 1, "tenant-c's report is another tool's");
    let rv_a = a.metadata.resource_version.clone().expect("rv");
    let rv_b = b.metadata.resource_version.clone().expect("rv");

    // The same results again (another map, equal content): zero writes.
    let inputs = status.borrow().inputs;
    tx.send_replace(first_input());
    let s = settled(&mut status, inputs).await;
    assert_eq!(c.rv("tenant-a", REPORT).await, Some(rv_a.clone()));
    assert_eq!(c.rv("tenant-b", REPORT).await, Some(rv_b.clone()));
    let applied = s.applied;

    // One namespace's results change: that report alone is written.
    let mut changed = first_input().expect("input").as_ref().clone();
    changed.insert(
        "tenant-b".into(),
        Arc::new(vec![result(
            "tenant-b",
            "Ingress",
            "legacy",
            Layer::Ingress,
            Outcome::Pass,
        )]),
    );
    let inputs = status.borrow().inputs;
    tx.send_replace(Some(Arc::new(changed.clone())));
    let s = settled(&mut status, inputs).await;
    assert_eq!(s.applied, applied + 1, "one write");
    let b = c.wait_report("tenant-b", 1, 0, 0).await;
    assert_ne!(b.metadata.resource_version.as_deref(), Some(rv_b.as_str()));
    assert_eq!(c.rv("tenant-a", REPORT).await, Some(rv_a.clone()));
    let rv_b = b.metadata.resource_version.clone().expect("rv");

    // A restart (a new writer, nothing in memory): zero writes. The clock first passes
    // every stored timestamp, so results stamped anew would differ from the stored ones.
    let newest = [c.report("tenant-a", REPORT).await, Some(b.clone())]
        .into_iter()
        .flatten()
        .flat_map(|r| r.results)
        .filter_map(|r| r.timestamp.map(|t| t.seconds))
        .max()
        .expect("stamped results");
    poll_async(WAIT, "the clock to pass the stored timestamps", || async {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        (i64::try_from(now).expect("seconds") > newest).then_some(())
    })
    .await;
    task.abort();
    let _ = task.await;
    let (tx, rx) = watch::channel(Some(Arc::new(changed.clone())));
    let writer = Writer::new(client.clone(), Leader::always());
    let mut status = writer.status();
    let task = tokio::spawn(writer.run(rx));
    let s = tokio::time::timeout(
        WAIT,
        status.wait_for(|s| s.synced && s.passes >= 1 && s.pending == 0),
    )
    .await
    .expect("the restarted writer plans every namespace")
    .expect("runs")
    .clone();
    assert_eq!((s.applied, s.deleted, s.failing), (0, 0, 0), "{s:?}");
    assert_eq!(c.rv("tenant-a", REPORT).await, Some(rv_a.clone()));
    assert_eq!(c.rv("tenant-b", REPORT).await, Some(rv_b.clone()));

    // Our report deleted by someone: it comes back.
    Api::<PolicyReport>::namespaced(c.admin.clone(), "tenant-a")
        .delete(REPORT, &DeleteParams::default())
        .await
        .expect("delete");
    let a = c.wait_report("tenant-a", 1, 1, 0).await;
    assert_ne!(a.metadata.resource_version.as_deref(), Some(rv_a.as_str()));

    // tenant-b has nothing left to report: its report goes; tenant-c's foreign one stays.
    changed.remove("tenant-b");
    changed.insert("tenant-c".into(), Arc::new(Vec::new()));
    let inputs = status.borrow().inputs;
    tx.send_replace(Some(Arc::new(changed.clone())));
    poll_async(WAIT, "tenant-b's report to go", || async {
        c.report("tenant-b", REPORT).await.is_none().then_some(())
    })
    .await;
    let s = settled(&mut status, inputs).await;
    assert_eq!(
        (s.deleted, s.foreign),
        (1, 0),
        "tenant-c has nothing to say now"
    );
    assert_eq!(c.rv("tenant-c", REPORT).await, Some(foreign_c.clone()));
    assert_eq!(
        c.rv("tenant-a", "polr-kyverno").await,
        Some(foreign_a.clone())
    );

    // A replica without the Lease computes but never writes.
    let (claim, follower) = Leader::channel();
    drop(claim);
    let mut with_d = changed.clone();
    with_d.insert(
        "tenant-d".into(),
        Arc::new(vec![result(
            "tenant-d",
            "HTTPRoute",
            "api",
            Layer::Route,
            Outcome::Fail,
        )]),
    );
    let (_follower_tx, follower_rx) = watch::channel(Some(Arc::new(with_d)));
    let writer = Writer::new(client.clone(), follower);
    let mut follower_status = writer.status();
    let follower_task = tokio::spawn(writer.run(follower_rx));
    let s = tokio::time::timeout(
        WAIT,
        follower_status.wait_for(|s| s.synced && s.pending > 0),
    )
    .await
    .expect("the follower has work")
    .expect("runs")
    .clone();
    assert_eq!((s.passes, s.applied), (0, 0), "{s:?}");
    assert!(c.report("tenant-d", REPORT).await.is_none());

    follower_task.abort();
    task.abort();
    drop(tx);
}
