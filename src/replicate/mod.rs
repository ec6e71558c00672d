//! Wildcard Secret replication, existingSecret mode (SPEC §3.6).
//!
//! The platform names one operator-provided `kubernetes.io/tls` Secret in its values
//! (`_cluster.wildcard-secret-name`, in the source namespace `_cluster.expose-ingress`); every
//! namespace that runs its own Gateway or ingress (its `namespace.cozystack.io/gateway` or
//! `namespace.cozystack.io/ingress` label names itself) gets a copy, so its listeners can
//! reference the certificate locally.
//!
//! | part | file |
//! |---|---|
//! | what the values say, which namespaces are targets, the writes and deletes that take the observed replicas to the desired ones (pure, table-tested) | `plan.rs` |
//! | the watches (values Secret and source by name, replicas by label, the shared namespace index), leader-gated server-side apply, events, metrics | `run.rs` |
//!
//! Rules the plan keeps whatever the edge sees:
//! - a same-named Secret without the copy label is never written or deleted (a Warning event
//!   says why the namespace has no replica);
//! - when the values or the source cannot be read (values Secret or key missing, unreadable
//!   YAML, source missing or not `kubernetes.io/tls`) nothing is written and nothing pruned;
//! - only Secrets carrying the copy label are ever deleted, and the source never is.

pub mod plan;
pub mod run;

pub use plan::{Hold, Setting, ValuesLocation};
pub use run::run;
