//! Audit of the objects already in the cluster (SPEC §3.9): every stored object of a guarded
//! kind judged by the layer admission runs for it, as a CREATE by an untrusted caller in its
//! namespace, with admission's messages; every TenantGateway by layer 9's content rules; and
//! the namespace apex table, which is what layers 4 and 5 leave behind.
//!
//! | concern | file |
//! |---|---|
//! | the guarded kinds, their layer and the fields it reads; the rule name of each layer | `kinds.rs` |
//! | the projection of a stored object: its uid and the fields its layer reads | `project.rs` |
//! | the judge: one object through `crate::policy`'s layer, as admission calls it | `judge.rs` |
//! | the apex table: apex outside `--root-host`, one apex in two namespaces, a tenant namespace without one | `apex_table.rs` |
//! | the state and what one change re-judges ([`store::Store`], [`store::Changes`]) | `store.rs` |
//! | one held object in 48 bytes and one allocation, its projection packed relative to its namespace's apex | `store/entry.rs` |
//! | `tenant-gateway audit`: a cluster listed once, or a snapshot; the table, JSON and exit code | `cli.rs`, `report.rs` |
//! | `wgpolicyk8s.io/v1alpha2` PolicyReports, one per namespace: the API types and CRD, the pure rendering of results into a report, the leader-gated writer | `policy_report/` |
//! | `serve`'s continuous audit: the watches, metrics, Warning events and the [`live::Auditor`] handle | `live.rs` |
//!
//! Rules:
//! - direction: audit imports `policy`, `cluster` and the leaves, never `admission`,
//!   `reconcile` or `offline`; `serve.rs` and `main.rs` wire it;
//! - one code path: the verdict is `crate::policy`'s (`judge.rs` only builds the request), and
//!   the command and `serve` feed the same [`store::Store`];
//! - nothing here writes to an object: the continuous audit's only writes are Warning events,
//!   from the Lease holder, rate-bounded.
//!
//! Results for other parts ([`AuditResult`]): one per (object, layer), with the object's
//! reference, the layer, the layer's rule name ([`kinds::rule_of`]), pass/fail/error and the
//! messages. A namespace's results ([`live::Auditor::results`]) are its own apex-table
//! result (a Namespace is cluster-scoped: its reference has no namespace) and one per guarded
//! object in it; the cluster-scoped Packages are the results of namespace `""`. Objects
//! outside tenant scope have no results (layers 2, 7, 8 and 9 admit them unchecked).
//! [`live::Auditor::subscribe`] hands out a [`live::ChangeFeed`] whose `next()` resolves with
//! the namespaces whose results changed since the last call (all of them on the first call):
//! a PolicyReport writer re-reads only those, and nothing fires while nothing changes.

use serde::Serialize;

use crate::policy::Layer;

pub mod apex_table;
pub mod cli;

pub mod judge;
pub mod kinds;
pub mod live;
pub mod policy_report;

pub mod project;
pub mod report;

pub mod store;

/// The object a result is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    /// Empty for cluster-scoped objects (Packages, Namespaces).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl ObjectRef {
    /// `namespace/name`, or the name of a cluster-scoped object.
    pub fn display(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

/// What a layer found about an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    /// Admission would deny the object (its messages say why).
    Fail,
    /// The object could not be judged: it does not decode, or a field the layer reads has the
    /// wrong type (admission denies such an object in every mode).
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Error => "error",
        }
    }
}

/// One result: an object judged by one layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditResult {
    #[serde(flatten)]
    pub object: ObjectRef,
    #[serde(serialize_with = "layer_name")]
    pub layer: Layer,
    /// The layer's rule ([`kinds::rule_of`]).
    pub rule: &'static str,
    #[serde(rename = "result")]
    pub outcome: Outcome,
    /// Each complete on its own; empty for a pass.
    pub messages: Vec<String>,
}

fn layer_name<S: serde::Serializer>(layer: &Layer, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(layer.as_str())
}
