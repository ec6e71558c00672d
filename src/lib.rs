//! tenant-gateway: admission webhook and TenantGateway reconciler for Cozystack tenants.
//!
//! Module boundaries follow SPEC §1: pure decisions (`hostname`, `policy`) know nothing of
//! HTTP or the kube client; `admission` adapts AdmissionReview JSON to them; `server` and the
//! offline CLI (`offline`) only move bytes.

pub mod admission;
pub mod certs;
pub mod claims;
pub mod cluster;
pub mod config;
pub mod hostname;
pub mod logfield;
pub mod metrics;
pub mod offline;
pub mod platform;
pub mod policies;
pub mod policy;
pub mod readiness;
pub mod reconcile;
pub mod replicate;
pub mod selfcert;
pub mod serve;
pub mod server;
pub mod warning;
pub mod yaml;
