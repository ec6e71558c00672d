//! What the integration tests share, one concern per file:
//! - `http.rs`: generated PKI, the in-process server on 127.0.0.1:0 (SPEC §7 tier 2), HTTPS
//!   clients (reqwest and raw rustls), a kubelet-style Secret volume;
//! - `process.rs`: `tenant-gateway serve` as a real process (with the example namespace
//!   snapshot, or against a control plane as [`process::Webhook`]), its log, plain-HTTP GETs
//!   of its metrics/health port, signals, RSS sampling;
//! - `control_plane.rs`: the e2e tests' access to `tests/k8s/control-plane` (start, kubeconfig,
//!   the kube client, kubectl and helm, teardown);
//! - `review.rs`: the AdmissionReview presets several tests send (the example review, what
//!   the API server sends for a Namespace or a Gateway), built with the library's one
//!   builder, `tenant_gateway::admission::testing::review`;
//! - `poll.rs`: how a test waits: a retry loop with a deadline that names what it waited
//!   for;
//! - `load.rs`: the bounded load generator of the robustness tests;
//! - `replica.rs`: an in-process reconciler replica on a Lease, for the reconciler's e2e tests.
//!
//! Every test file declares `mod support;` and imports what it needs from these files.
// Each tests/*.rs is its own crate and uses a different subset of these helpers; the rest
// would be dead code there.
#![allow(dead_code)]

pub mod control_plane;
pub mod http;
pub mod load;
pub mod poll;
pub mod process;
pub mod replica;
pub mod review;
