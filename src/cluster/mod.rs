//! Cluster-facing state: the namespace index the admission layers read (SPEC §2.2).

pub mod apex;
pub mod miss;
pub mod namespaces;

pub use namespaces::{LiveNamespaces, LookupError, NamespaceSource, StaticNamespaces};
