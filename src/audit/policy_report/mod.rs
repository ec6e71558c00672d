//! `wgpolicyk8s.io/v1alpha2` PolicyReports of the audit (SPEC §3.9, issue 24 item 3): with
//! `serve --policy-reports`, one report named `tenant-gateway` per namespace with a result
//! per (object, layer), written by the leader only, and only when its results changed.
//!
//! | part | file |
//! |---|---|
//! | the PolicyReport API types, field for field, and the CRD generated from them (`tenant-gateway crd --policy-report`) | `api.rs` |
//! | one namespace's results as its report, and what to do about the report there (pure; the report's field choices are written down there) | `render.rs` |
//! | the watch of our reports, leader-gated server-side apply and delete, backoff | `writer.rs` |
//! | the continuous audit's results as the writer's input (mapping, incremental map), the writer's metrics, the part `serve` runs | `feed.rs` |
//!
//! Wiring: `serve --policy-reports` runs [`feed::run`] as a part, with the continuous
//! audit's [`Auditor`](crate::audit::live::Auditor) and the reconciler's
//! [`Leader`](crate::cluster::lease::Leader) (the flag is refused without either). A finding
//! about a Namespace of the apex table goes in that namespace's report; a Package, which
//! concerns no namespace, has no report (`feed.rs` says why). The chart grants the writer's
//! verbs and passes `--policy-reports` with `audit.policyReports`.

pub mod api;
pub mod feed;
pub mod render;
pub mod writer;

pub use render::{ObjectRef, Outcome, ReportResult};
pub use writer::{InputChannel, ReportInput, Writer, WriterStatus, run};
