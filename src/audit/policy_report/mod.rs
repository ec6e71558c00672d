//! `wgpolicyk8s.io/v1alpha2` PolicyReports of the audit (SPEC §3.9, issue 24 item 3).
//!
//! | part | file |
//! |---|---|
//! | the PolicyReport API types, field for field, and the CRD generated from them | `api.rs` |
//! | one namespace's results as its report; what to do about the report there (pure) | `render.rs` |

pub mod api;
pub mod render;

pub use render::{ObjectRef, Outcome, ReportResult};
