//! One namespace's results as its PolicyReport, and what the writer does about the report
//! already there. Pure: the time is a parameter, the observed report a plain value.
//!
//! What a report holds (the choices Policy Reporter and Kyverno's tooling show well):
//! - name [`REPORT_NAME`] in the namespace of the objects, label
//!   `app.kubernetes.io/managed-by: tenant-gateway` (what makes it ours: a report of that
//!   name without the label is another tool's and is never written or deleted);
//! - no `scope`: a report covers every judged object of its namespace, which no single
//!   object reference describes; each result names its object in `resources` (one entry,
//!   with the uid when known), which is what Policy Reporter lists per result;
//! - per (object, layer, rule): `source: tenant-gateway` (Policy Reporter's top-level
//!   grouping), `category: Tenant isolation`, `policy` = one fixed name per layer
//!   ([`policy_name`]: the name of the layer's ValidatingAdmissionPolicy in `policies/`, so
//!   the same rule has the same name wherever an operator meets it), `rule` = the rule's
//!   name from the judge, `result` pass/fail/error, the judge's `message` (cut at
//!   [`MAX_MESSAGE_CHARS`]), `severity: high` (every layer guards tenant isolation),
//!   `scored: true`, `properties.layer` = the SPEC's layer number;
//! - results in a fixed order (object kind, name, then layer, rule), duplicates once;
//! - `summary` counts every result judged, listed or not (see below);
//! - `timestamp` = when the result was first found as it is: a result already in the
//!   observed report with the same content keeps its timestamp, so an unchanged
//!   namespace renders exactly the report it has and nothing is written (SPEC §3.9 "zero
//!   writes when nothing changed", across restarts too);
//! - at most [`RESULTS_BUDGET_BYTES`] of results (an object must stay well under etcd's
//!   1.5 MiB request limit whatever a tenant creates): failures and errors are kept first,
//!   then passes, in order; the summary still counts the omitted ones.
//!
//! The writer compares what it would write with what is there by fingerprint (a digest of
//! each result without its timestamp) and the summary, so it keeps no copy of the reports'
//! text.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::ObjectReference;
use sha2::{Digest, Sha256};

use super::api::{
    PolicyReport, PolicyReportResult, PolicyReportSummary, PolicyResult, Severity, Timestamp,
};
use crate::platform::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::policy::Layer;

/// `metadata.name` of every report this product writes (SPEC §3.9).
pub const REPORT_NAME: &str = "tenant-gateway";
/// `results[].source`.
pub const SOURCE: &str = "tenant-gateway";
/// `results[].category`.
pub const CATEGORY: &str = "Tenant isolation";
/// Characters of a message kept in a result.
pub const MAX_MESSAGE_CHARS: usize = 1024;
/// Bytes of JSON the results of one report may take.
pub const RESULTS_BUDGET_BYTES: usize = 1024 * 1024;
/// Bytes a result's timestamp adds to its JSON at most (`,"timestamp":{"seconds":…,"nanos":0}`).
const TIMESTAMP_BYTES: usize = 56;

/// The judged object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    /// `None` for a cluster-scoped object (a Namespace of the apex table).
    pub namespace: Option<String>,
    pub name: String,
    pub uid: Option<String>,
}

/// What one rule found for one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// The rule holds.
    Pass,
    /// The rule does not hold: what admission would deny.
    Fail,
    /// The object could not be judged (it does not decode, say).
    Error,
}

/// One line of the audit as the report writer takes it: the judge's findings mapped onto
/// plain data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReportResult {
    pub object: ObjectRef,
    pub layer: Layer,
    /// The rule's name within the layer (`results[].rule`).
    pub rule: String,
    pub outcome: Outcome,
    /// The admission message (or, for a pass, what held).
    pub message: String,
}

/// `results[].policy` of a layer's results: the name of the layer's ValidatingAdmissionPolicy
/// in `policies/` where the audit judges what that policy judges. Layer 5's audit is the
/// namespace apex table (SPEC §3.9), which no admission policy has: it gets its own name.
pub fn policy_name(layer: Layer) -> &'static str {
    match layer {
        Layer::Gateway => "tenant-gateway-gateway-hostnames",
        Layer::Package => "tenant-gateway-package-attached-namespaces",
        Layer::Tenant => "tenant-gateway-tenant-host",
        Layer::Namespace => "tenant-gateway-namespace-apexes",
        Layer::Route => "tenant-gateway-route-hostnames",
        Layer::Ingress => "tenant-gateway-ingress-hostnames",
        Layer::TenantGateway => "tenant-gateway-tenantgateway-platform-objects",
    }
}

/// The SPEC's number of a layer (§2.3).
pub fn layer_number(layer: Layer) -> u8 {
    match layer {
        Layer::Gateway => 2,
        Layer::Package => 3,
        Layer::Tenant => 4,
        Layer::Namespace => 5,
        Layer::Route => 7,
        Layer::Ingress => 8,
        Layer::TenantGateway => 9,
    }
}

/// A result's identity and content without its timestamp: equal fingerprints, equal
/// results up to the time they were found.
pub type Fingerprint = [u8; 16];

/// What decides whether a report must be rewritten: its results' fingerprints in order, and
/// the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    results: Vec<(Fingerprint, Option<Timestamp>)>,
    summary: PolicyReportSummary,
}

impl Content {
    /// The content of a stored report.
    pub fn of(results: &[PolicyReportResult], summary: PolicyReportSummary) -> Content {
        Content {
            results: results
                .iter()
                .map(|r| {
                    let mut bare = r.clone();
                    let stamp = bare.timestamp.take();
                    (fingerprint(&json_bytes(&bare)), stamp)
                })
                .collect(),
            summary,
        }
    }

    fn stamps(&self) -> HashMap<Fingerprint, Timestamp> {
        self.results
            .iter()
            .filter_map(|(f, t)| t.map(|t| (*f, t)))
            .collect()
    }

    fn same_as(&self, r: &Rendered) -> bool {
        self.summary == r.report.summary
            && self.results.len() == r.fingerprints.len()
            && self
                .results
                .iter()
                .zip(&r.fingerprints)
                .all(|((f, stamp), g)| f == g && stamp.is_some())
    }
}

/// A report named [`REPORT_NAME`] as the writer's watch last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub uid: String,
    pub resource_version: String,
    /// It carries our managed-by label.
    pub ours: bool,
    /// `None` when its results or summary did not decode (rewritten, when ours).
    pub content: Option<Content>,
}

impl Observed {
    pub fn new(
        uid: String,
        resource_version: String,
        labels: Option<&BTreeMap<String, String>>,
        content: Option<Content>,
    ) -> Observed {
        let ours = labels
            .and_then(|l| l.get(MANAGED_BY_LABEL))
            .is_some_and(|v| v == MANAGED_BY_VALUE);
        Observed {
            uid,
            resource_version,
            ours,
            content,
        }
    }
}

/// A namespace's report as it should be.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub report: PolicyReport,
    /// Of `report.results`, in order.
    pub fingerprints: Vec<Fingerprint>,
    /// Results counted in the summary but left out of `results` (over the budget).
    pub omitted: usize,
}

/// The report of `namespace` for `results`, `None` when there is nothing to report. A
/// result already in `observed` keeps its timestamp; the others are stamped `now`.
pub fn render(
    namespace: &str,
    results: &[ReportResult],
    observed: Option<&Content>,
    now: Timestamp,
) -> Option<Rendered> {
    let mut sorted: Vec<&ReportResult> = results.iter().collect();
    sorted.sort_unstable_by(|a, b| sort_key(a).cmp(&sort_key(b)));
    sorted.dedup_by(|a, b| a == b);
    if sorted.is_empty() {
        return None;
    }
    let mut summary = PolicyReportSummary::default();
    let entries: Vec<(PolicyReportResult, Vec<u8>)> = sorted
        .iter()
        .map(|r| {
            match r.outcome {
                Outcome::Pass => summary.pass += 1,
                Outcome::Fail => summary.fail += 1,
                Outcome::Error => summary.error += 1,
            }
            let result = to_result(r);
            let bytes = json_bytes(&result);
            (result, bytes)
        })
        .collect();
    let keep = within_budget(&sorted, &entries);
    let stamps = observed.map(Content::stamps).unwrap_or_default();
    let mut report = PolicyReport::new(namespace, REPORT_NAME);
    report.metadata.labels = Some(BTreeMap::from([(
        MANAGED_BY_LABEL.to_string(),
        MANAGED_BY_VALUE.to_string(),
    )]));
    report.summary = summary;
    let mut fingerprints = Vec::with_capacity(entries.len());
    for (i, (mut result, bytes)) in entries.into_iter().enumerate() {
        if !keep[i] {
            continue;
        }
        let f = fingerprint(&bytes);
        result.timestamp = Some(stamps.get(&f).copied().unwrap_or(now));
        fingerprints.push(f);
        report.results.push(result);
    }
    let omitted = sorted.len() - report.results.len();
    Some(Rendered {
        report,
        fingerprints,
        omitted,
    })
}

/// What the writer does for one namespace.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The report there is the report wanted (or there is none and none is wanted).
    Keep,
    /// Server-side apply of `report`; `resource_version` is the one observed when the report
    /// exists (the apply is refused if it changed since), `None` to create it.
    Apply {
        report: Box<PolicyReport>,
        resource_version: Option<String>,
        omitted: usize,
    },
    /// Delete our report: nothing is left to report.
    Delete {
        uid: String,
        resource_version: String,
    },
    /// A report of that name is another tool's: left alone, so this namespace has none of
    /// ours.
    LeaveForeign,
}

/// The action that takes `namespace` from `observed` to the report `results` call for.
pub fn plan(
    namespace: &str,
    results: &[ReportResult],
    observed: Option<&Observed>,
    now: Timestamp,
) -> Action {
    if observed.is_some_and(|o| !o.ours) {
        return if results.is_empty() {
            Action::Keep
        } else {
            Action::LeaveForeign
        };
    }
    let content = observed.and_then(|o| o.content.as_ref());
    match (render(namespace, results, content, now), observed) {
        (None, None) => Action::Keep,
        (None, Some(o)) => Action::Delete {
            uid: o.uid.clone(),
            resource_version: o.resource_version.clone(),
        },
        (Some(r), o) => {
            if content.is_some_and(|c| c.same_as(&r)) {
                return Action::Keep;
            }
            Action::Apply {
                report: Box::new(r.report),
                resource_version: o.map(|o| o.resource_version.clone()),
                omitted: r.omitted,
            }
        }
    }
}

type SortKey<'a> = (
    &'a str,
    &'a str,
    &'a str,
    Option<&'a str>,
    Option<&'a str>,
    Layer,
    &'a str,
    Outcome,
    &'a str,
);

fn sort_key(r: &ReportResult) -> SortKey<'_> {
    let o = &r.object;
    (
        &o.kind,
        &o.name,
        &o.api_version,
        o.namespace.as_deref(),
        o.uid.as_deref(),
        r.layer,
        &r.rule,
        r.outcome,
        &r.message,
    )
}

fn to_result(r: &ReportResult) -> PolicyReportResult {
    let o = &r.object;
    PolicyReportResult {
        source: Some(SOURCE.to_string()),
        policy: policy_name(r.layer).to_string(),
        rule: Some(r.rule.clone()),
        category: Some(CATEGORY.to_string()),
        severity: Some(Severity::High),
        timestamp: None,
        result: Some(match r.outcome {
            Outcome::Pass => PolicyResult::Pass,
            Outcome::Fail => PolicyResult::Fail,
            Outcome::Error => PolicyResult::Error,
        }),
        scored: Some(true),
        resources: vec![ObjectReference {
            api_version: Some(o.api_version.clone()),
            kind: Some(o.kind.clone()),
            namespace: o.namespace.clone(),
            name: Some(o.name.clone()),
            uid: o.uid.clone(),
            ..ObjectReference::default()
        }],
        resource_selector: None,
        message: Some(cut(&r.message)),
        properties: BTreeMap::from([("layer".to_string(), layer_number(r.layer).to_string())]),
    }
}

fn cut(message: &str) -> String {
    match message.char_indices().nth(MAX_MESSAGE_CHARS) {
        None => message.to_string(),
        Some((end, _)) => format!("{}…", &message[..end]),
    }
}

/// Which results fit the budget: all when they fit, else failures and errors first, then
/// passes, each group in order.
fn within_budget(sorted: &[&ReportResult], entries: &[(PolicyReportResult, Vec<u8>)]) -> Vec<bool> {
    let size = |i: usize| entries[i].1.len() + TIMESTAMP_BYTES + 1;
    let total: usize = (0..entries.len()).map(size).sum();
    if total <= RESULTS_BUDGET_BYTES {
        return vec![true; entries.len()];
    }
    let mut keep = vec![false; entries.len()];
    let mut used = 0;
    let failing = (0..entries.len()).filter(|&i| sorted[i].outcome != Outcome::Pass);
    let passing = (0..entries.len()).filter(|&i| sorted[i].outcome == Outcome::Pass);
    for i in failing.chain(passing) {
        if used + size(i) > RESULTS_BUDGET_BYTES {
            break;
        }
        used += size(i);
        keep[i] = true;
    }
    keep
}

fn json_bytes(r: &PolicyReportResult) -> Vec<u8> {
    // A struct of strings, maps with string keys and plain enums always serializes.
    serde_json::to_vec(r).unwrap_or_default()
}

fn fingerprint(bytes: &[u8]) -> Fingerprint {
    let digest = Sha256::digest(bytes);
    let mut f = [0u8; 16];
    f.copy_from_slice(&digest[..16]);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const T1: Timestamp = Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    };
    const T2: Timestamp = Timestamp {
        seconds: 1_700_000_600,
        nanos: 0,
    };

    fn obj(kind: &str, name: &str) -> ObjectRef {
        let api_version = match kind {
            "Ingress" => "networking.k8s.io/v1",
            "TenantGateway" => "gateway.cozystack.io/v1alpha1",
            _ => "gateway.networking.k8s.io/v1",
        };
        ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: Some("tenant-a".into()),
            name: name.into(),
            uid: Some(format!("uid-{name}")),
        }
    }

    fn res(kind: &str, name: &str, layer: Layer, outcome: Outcome, message: &str) -> ReportResult {
        ReportResult {
            object: obj(kind, name),
            layer,
            rule: format!("{}-rule", layer.as_str()),
            outcome,
            message: message.into(),
        }
    }

    fn rendered(results: &[ReportResult], observed: Option<&Content>, now: Timestamp) -> Rendered {
        render("tenant-a", results, observed, now).expect("a report")
    }

    /// `(kind, name, result, policy)` of each listed result, in order.
    fn lines(r: &Rendered) -> Vec<(String, String, String, String)> {
        r.report
            .results
            .iter()
            .map(|x| {
                let o = &x.resources[0];
                let v = serde_json::to_value(x.result).expect("result");
                (
                    o.kind.clone().unwrap_or_default(),
                    o.name.clone().unwrap_or_default(),
                    v.as_str().unwrap_or_default().to_string(),
                    x.policy.clone(),
                )
            })
            .collect()
    }

    fn counts(r: &Rendered) -> Value {
        serde_json::to_value(r.report.summary).expect("summary")
    }

    /// What the API server hands back: the report through JSON, as stored.
    fn stored(r: &Rendered, uid: &str, rv: &str) -> Observed {
        let back: PolicyReport =
            serde_json::from_slice(&serde_json::to_vec(&r.report).expect("json")).expect("back");
        Observed::new(
            uid.into(),
            rv.into(),
            back.metadata.labels.as_ref(),
            Some(Content::of(&back.results, back.summary)),
        )
    }

    #[test]
    fn renders_results_in_order_with_their_counts() {
        use Layer::*;
        use Outcome::*;
        type Case = (
            &'static str,
            Vec<ReportResult>,
            Vec<(&'static str, &'static str, &'static str, &'static str)>,
            Value,
        );
        let cases: Vec<Case> = vec![
            (
                "one pass",
                vec![res("HTTPRoute", "web", Route, Pass, "ok")],
                vec![("HTTPRoute", "web", "pass", "tenant-gateway-route-hostnames")],
                json!({"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0}),
            ),
            (
                "pass, fail and error mixed, given out of order",
                vec![
                    res("TenantGateway", "gw", TenantGateway, Fail, "apex differs"),
                    res("HTTPRoute", "zeta", Route, Pass, "ok"),
                    res("Ingress", "shop", Ingress, Error, "does not decode"),
                    res("HTTPRoute", "alpha", Route, Fail, "outside the apex"),
                    res("Gateway", "edge", Gateway, Pass, "ok"),
                ],
                vec![
                    (
                        "Gateway",
                        "edge",
                        "pass",
                        "tenant-gateway-gateway-hostnames",
                    ),
                    (
                        "HTTPRoute",
                        "alpha",
                        "fail",
                        "tenant-gateway-route-hostnames",
                    ),
                    (
                        "HTTPRoute",
                        "zeta",
                        "pass",
                        "tenant-gateway-route-hostnames",
                    ),
                    (
                        "Ingress",
                        "shop",
                        "error",
                        "tenant-gateway-ingress-hostnames",
                    ),
                    (
                        "TenantGateway",
                        "gw",
                        "fail",
                        "tenant-gateway-tenantgateway-platform-objects",
                    ),
                ],
                json!({"pass": 2, "fail": 2, "warn": 0, "error": 1, "skip": 0}),
            ),
            (
                "one object, two layers: a result each, by layer",
                vec![
                    res("Namespace", "tenant-a", Namespace, Fail, "no apex"),
                    res("Namespace", "tenant-a", Tenant, Pass, "ok"),
                ],
                vec![
                    (
                        "Namespace",
                        "tenant-a",
                        "pass",
                        "tenant-gateway-tenant-host",
                    ),
                    (
                        "Namespace",
                        "tenant-a",
                        "fail",
                        "tenant-gateway-namespace-apexes",
                    ),
                ],
                json!({"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0}),
            ),
            (
                "an identical result twice is listed and counted once",
                vec![
                    res("HTTPRoute", "web", Route, Fail, "outside"),
                    res("HTTPRoute", "web", Route, Fail, "outside"),
                ],
                vec![("HTTPRoute", "web", "fail", "tenant-gateway-route-hostnames")],
                json!({"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0}),
            ),
        ];
        for (name, input, want, summary) in cases {
            let r = rendered(&input, None, T1);
            let got = lines(&r);
            let want: Vec<(String, String, String, String)> = want
                .into_iter()
                .map(|(a, b, c, d)| (a.into(), b.into(), c.into(), d.into()))
                .collect();
            assert_eq!(got, want, "{name}");
            assert_eq!(counts(&r), summary, "{name}");
            assert_eq!(r.fingerprints.len(), r.report.results.len(), "{name}");
            assert_eq!(r.omitted, 0, "{name}");
            let mut reversed = input.clone();
            reversed.reverse();
            assert_eq!(
                rendered(&reversed, None, T1),
                r,
                "{name}: input order is irrelevant"
            );
        }
    }

    #[test]
    fn nothing_to_report_is_no_report() {
        assert_eq!(render("tenant-a", &[], None, T1), None);
    }

    #[test]
    fn a_result_carries_the_published_fields_policy_reporter_reads() {
        let r = rendered(
            &[res(
                "HTTPRoute",
                "web",
                Layer::Route,
                Outcome::Fail,
                "outside the apex",
            )],
            None,
            T1,
        );
        let report = serde_json::to_value(&r.report).expect("json");
        assert_eq!(report["apiVersion"], "wgpolicyk8s.io/v1alpha2");
        assert_eq!(report["kind"], "PolicyReport");
        assert_eq!(
            report["metadata"],
            json!({"name": "tenant-gateway", "namespace": "tenant-a",
                "labels": {"app.kubernetes.io/managed-by": "tenant-gateway"}})
        );
        assert!(
            report.get("scope").is_none(),
            "the results name their objects"
        );
        assert_eq!(
            report["results"][0],
            json!({
                "source": "tenant-gateway",
                "policy": "tenant-gateway-route-hostnames",
                "rule": "route-rule",
                "category": "Tenant isolation",
                "severity": "high",
                "timestamp": {"seconds": 1_700_000_000, "nanos": 0},
                "result": "fail",
                "scored": true,
                "resources": [{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                    "namespace": "tenant-a", "name": "web", "uid": "uid-web"}],
                "message": "outside the apex",
                "properties": {"layer": "7"}
            })
        );
    }

    #[test]
    fn every_layer_has_its_own_policy_and_number() {
        let names: std::collections::BTreeSet<&str> =
            Layer::ALL.iter().map(|l| policy_name(*l)).collect();
        assert_eq!(names.len(), Layer::ALL.len());
        let numbers: Vec<u8> = Layer::ALL.iter().map(|l| layer_number(*l)).collect();
        assert_eq!(numbers, [2, 3, 4, 5, 7, 8, 9]);
        // The layers that judge what their admission policy judges carry its name.
        let vaps = include_str!("../../../policies/policies.yaml");
        for l in [
            Layer::Gateway,
            Layer::Package,
            Layer::Tenant,
            Layer::Route,
            Layer::Ingress,
        ]
        .into_iter()
        .chain([Layer::TenantGateway])
        {
            assert!(
                vaps.contains(&format!("name: {}\n", policy_name(l))),
                "{l}: no ValidatingAdmissionPolicy named {}",
                policy_name(l)
            );
        }
    }

    #[test]
    fn long_messages_are_cut_on_a_character() {
        let long = "é".repeat(MAX_MESSAGE_CHARS + 10);
        let r = rendered(
            &[res("HTTPRoute", "web", Layer::Route, Outcome::Fail, &long)],
            None,
            T1,
        );
        let m = r.report.results[0].message.clone().expect("message");
        assert_eq!(m.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(m.ends_with('…'));
        let exact = "x".repeat(MAX_MESSAGE_CHARS);
        let r = rendered(
            &[res("HTTPRoute", "web", Layer::Route, Outcome::Fail, &exact)],
            None,
            T1,
        );
        assert_eq!(r.report.results[0].message.as_deref(), Some(exact.as_str()));
    }

    /// The timestamp of a result is when it was found as it is: an unchanged namespace
    /// renders the report it has (no write, across restarts: only the stored report is
    /// read), a changed result alone gets the new time.
    #[test]
    fn timestamps_stay_until_the_result_changes() {
        let before = vec![
            res("HTTPRoute", "a", Layer::Route, Outcome::Fail, "outside"),
            res("HTTPRoute", "b", Layer::Route, Outcome::Pass, "ok"),
        ];
        let first = rendered(&before, None, T1);
        let there = stored(&first, "u1", "10");
        assert!(there.ours);
        assert_eq!(plan("tenant-a", &before, Some(&there), T2), Action::Keep);

        let mut after = before.clone();
        after[1].outcome = Outcome::Fail;
        after[1].message = "outside".into();
        let Action::Apply {
            report,
            resource_version,
            omitted,
        } = plan("tenant-a", &after, Some(&there), T2)
        else {
            panic!("a changed result is written");
        };
        assert_eq!(
            resource_version.as_deref(),
            Some("10"),
            "conditional on what was read"
        );
        assert_eq!(omitted, 0);
        let stamps: Vec<i64> = report
            .results
            .iter()
            .map(|r| r.timestamp.expect("stamped").seconds)
            .collect();
        assert_eq!(stamps, [T1.seconds, T2.seconds]);
        assert_eq!(report.summary.fail, 2);
    }

    #[test]
    fn plans_from_what_is_there() {
        let some = vec![res(
            "HTTPRoute",
            "web",
            Layer::Route,
            Outcome::Fail,
            "outside",
        )];
        let ours = stored(&rendered(&some, None, T1), "u1", "10");
        let other = vec![res("HTTPRoute", "web", Layer::Route, Outcome::Pass, "ok")];
        let ours_other = stored(&rendered(&other, None, T1), "u1", "10");
        let foreign = Observed::new("u2".into(), "11".into(), None, ours.content.clone());
        let kyverno = BTreeMap::from([(MANAGED_BY_LABEL.to_string(), "kyverno".to_string())]);
        let foreign_labelled = Observed::new(
            "u3".into(),
            "12".into(),
            Some(&kyverno),
            ours.content.clone(),
        );
        let unreadable = Observed {
            content: None,
            ..ours.clone()
        };
        let mut edited = ours.clone();
        if let Some(c) = edited.content.as_mut() {
            c.summary.warn = 3;
        }

        // (case, results, observed, the action's shape)
        let cases: Vec<(&str, &[ReportResult], Option<&Observed>, &str)> = vec![
            ("nothing either way", &[], None, "keep"),
            ("results, no report", &some, None, "create"),
            ("results, the same report", &some, Some(&ours), "keep"),
            (
                "results, another report of ours",
                &some,
                Some(&ours_other),
                "update",
            ),
            ("our report no longer wanted", &[], Some(&ours), "delete"),
            (
                "another tool's report of that name",
                &some,
                Some(&foreign),
                "foreign",
            ),
            (
                "labelled by another tool",
                &some,
                Some(&foreign_labelled),
                "foreign",
            ),
            (
                "another tool's report, nothing to say",
                &[],
                Some(&foreign),
                "keep",
            ),
            (
                "ours, its results unreadable",
                &some,
                Some(&unreadable),
                "update",
            ),
            ("ours, its summary edited", &some, Some(&edited), "update"),
        ];
        for (name, results, observed, want) in cases {
            let got = match plan("tenant-a", results, observed, T2) {
                Action::Keep => "keep",
                Action::Apply {
                    resource_version: None,
                    ..
                } => "create",
                Action::Apply {
                    resource_version: Some(rv),
                    ..
                } => {
                    assert_eq!(rv, "10", "{name}");
                    "update"
                }
                Action::Delete {
                    uid,
                    resource_version,
                } => {
                    assert_eq!(
                        (uid.as_str(), resource_version.as_str()),
                        ("u1", "10"),
                        "{name}"
                    );
                    "delete"
                }
                Action::LeaveForeign => "foreign",
            };
            assert_eq!(got, want, "{name}");
        }
    }

    /// However many objects a tenant creates, the report stays well under etcd's request
    /// limit: failures and errors are listed first, and the summary counts everything.
    #[test]
    fn a_huge_namespace_keeps_its_failures_within_the_budget() {
        let long = "m".repeat(MAX_MESSAGE_CHARS);
        let mut input = Vec::new();
        for i in 0..1500 {
            input.push(res(
                "HTTPRoute",
                &format!("pass-{i:04}"),
                Layer::Route,
                Outcome::Pass,
                &long,
            ));
        }
        for i in 0..300 {
            input.push(res(
                "HTTPRoute",
                &format!("fail-{i:04}"),
                Layer::Route,
                Outcome::Fail,
                &long,
            ));
        }
        input.push(res(
            "Ingress",
            "broken",
            Layer::Ingress,
            Outcome::Error,
            &long,
        ));
        let r = rendered(&input, None, T1);
        assert_eq!(
            counts(&r),
            json!({"pass": 1500, "fail": 300, "warn": 0, "error": 1, "skip": 0})
        );
        let listed = r.report.results.len();
        assert!(listed < input.len() && listed > 301, "{listed}");
        assert_eq!(r.omitted, input.len() - listed);
        let failing = r
            .report
            .results
            .iter()
            .filter(|x| x.result != Some(PolicyResult::Pass))
            .count();
        assert_eq!(failing, 301, "every failure and error is listed");
        let size = serde_json::to_vec(&r.report).expect("json").len();
        assert!(size <= RESULTS_BUDGET_BYTES + 4096, "{size} bytes");
        // Still in the fixed order.
        let keys: Vec<(String, String)> = lines(&r).into_iter().map(|l| (l.0, l.1)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        // And stable: the same input over the stored report writes nothing.
        let there = stored(&r, "u", "1");
        assert_eq!(plan("tenant-a", &input, Some(&there), T2), Action::Keep);
    }
}
