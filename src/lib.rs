//! tenant-gateway: admission webhook and TenantGateway reconciler for Cozystack tenants.
//!
//! Module boundaries follow SPEC §1: pure decisions know nothing of HTTP or the kube client;
//! the edges (HTTP server, kube watches and writes, CLI) only adapt.
//!
//! | concern | module |
//! |---|---|
//! | leaves: names and rules every side reads | `platform`, `hostname`, `claims`, `warning`, `logfield`, `yaml`, `metrics`, `readiness`, `certs` |
//! | the policy layers (SPEC §2), pure | `policy` |
//! | what the cluster holds: namespace and route indexes, watches, kept objects, the one client | `cluster` |
//! | AdmissionReview in, decision out (codec, pipeline, route warnings) | `admission` |
//! | HTTPS, limits, the metrics/health port | `server` |
//! | the TenantGateway reconciler (SPEC §3): pure plan, kube edge | `reconcile` |
//! | the wildcard-Secret replicator | `replicate` |
//! | the audit of stored objects (SPEC §3.9): pure judge over the indexes, `audit` command, `serve`'s continuous audit | `audit` |
//! | the webhook's self-managed serving certificate | `selfcert` |
//! | `review`, `check`, `test` without a server | `offline` |
//! | flags, the ValidatingAdmissionPolicy rendering | `config`, `policies` |
//! | `serve`: every part wired once | `serve` |
//!
//! Imports point down (shared/design/layout-3.md): leaves import no project module; `policy`
//! and `cluster` only leaves; `admission` `policy` and `cluster`; `reconcile`, `replicate`
//! and `selfcert` `cluster`; `audit` `cluster` and `policy`; `server` `admission`; `offline`
//! may import `admission`; only `serve` and the binary import everything.

pub mod admission;
pub mod audit;
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
