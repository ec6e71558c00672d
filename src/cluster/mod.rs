//! Cluster-facing state: the namespace index the admission layers read (SPEC §2.2), the
//! shared watches of the reconciler (one per kind per process), the route index, and the
//! leader Lease.

pub mod apex;
pub mod client;
pub mod intern;
pub mod kept;
pub mod lease;
pub mod miss;
pub mod namespaces;
pub mod nsmeta;
pub mod objects;
pub mod route_facts;
pub mod route_snapshot;
pub mod routes;
pub mod snapshot;
pub mod watch;

pub use miss::LookupError;
pub use namespaces::{LiveNamespaces, NamespaceChange, NamespaceSource};
pub use snapshot::StaticNamespaces;
