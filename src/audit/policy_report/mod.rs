//! `wgpolicyk8s.io/v1alpha2` PolicyReports of the audit (SPEC §3.9, issue 24 item 3): with
//! `serve --policy-reports`, one report named `tenant-gateway` per namespace with a result
//! per (object, layer), written by the leader only, and only when its results changed.
//!
//! | part | file |
//! |---|---|
//! | the PolicyReport API types, field for field, and the CRD generated from them (`tenant-gateway crd --policy-report`) | `api.rs` |
//! | one namespace's results as its report, and what to do about the report there (pure; the report's field choices are written down there) | `render.rs` |
//! | the watch of our reports, leader-gated server-side apply and delete, backoff | `writer.rs` |
//!
//! Wiring (serve): map the judge's findings onto [`ReportResult`]s by namespace and keep a
//! `tokio::sync::watch` of the map current (`None` until everything has been judged once);
//! run [`writer::run`]`(client, leader, rx)` as a part, with the reconciler's
//! [`Leader`](crate::cluster::lease::Leader). A finding about a cluster-scoped object goes
//! in the report of the namespace it concerns (a Namespace's apex finding in that
//! namespace's); a Package, which concerns no namespace, has no report. The chart grants
//! the writer's verbs and passes `--policy-reports` with `audit.policyReports`.

pub mod api;
pub mod render;
pub mod writer;

pub use render::{ObjectRef, Outcome, ReportResult};
pub use writer::{InputChannel, ReportInput, Writer, WriterStatus, run};
