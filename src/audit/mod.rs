//! The audit of objects already in the cluster (SPEC §3.9): what it found, judged by the
//! same layers as admission, and where it is published.
//!
//! | part | file |
//! |---|---|
//! | `wgpolicyk8s.io/v1alpha2` PolicyReports, one per namespace: the API types and CRD, the pure rendering of results into a report, the leader-gated writer | `policy_report/` |
//!
//! Imports: `cluster`, `policy` and leaves only (shared/design/layout-3.md).

pub mod policy_report;
