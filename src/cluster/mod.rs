//! Cluster-facing state: the namespace index the admission layers read (SPEC §2.2), the
//! shared watches of the reconciler (one per kind per process), the route index, and the
//! leader Lease.
//!
//! | concern | file |
//! |---|---|
//! | connecting to the API server: kubeconfig, context, in-cluster (SPEC §2.6) | `client.rs` |
//! | guarded watch streams: each object decoded alone, "is this kind served"; a watch that also hands a tap each object's projection (`Tapped`) | `watch.rs` |
//! | what the caches keep of an owned object (packed, deflated) and the caches | `kept.rs` |
//! | who owns an owned object's fields (managedFields): the foreign-owner test, moving them to us | `managed_fields.rs` |
//! | shared copies of values repeated across cached objects | `intern.rs` |
//! | the namespace index: a snapshot or the live watch, with a GET on a miss | `namespaces.rs` |
//! | namespace snapshot files (`--namespaces`) and list flattening | `snapshot.rs` |
//! | the live GETs for namespaces the index lacks, coalesced, misses remembered | `miss.rs` |
//! | the index's compact namespace entries and their store | `nsmeta.rs` |
//! | which namespaces carry which apex (layer 8) | `apex.rs` |
//! | decoding a few paths of an object's JSON, the rest skipped (the audit's projections) | `projection.rs` |
//! | the route index, grouped by Gateway, and its projection of a route; each TenantGateway's Gateway's certMode | `routes.rs` |
//! | the facts it keeps of each route (read by the reconciler and the warnings) | `route_facts.rs` |
//! | a route index from a file or one listing, for `review`/`check` | `route_snapshot.rs` |
//! | what `check` reads from a cluster: namespaces, the live object | `objects.rs` |
//! | leader election on a Lease | `lease.rs` |
//!
//! Direction: this module imports only the leaves (`platform`, `hostname`, `metrics`,
//! `readiness`, `yaml`, ...), never `admission`, `reconcile` or another part; they import it.
//! The types it shares with them are defined here (the route facts, the kept objects), or in
//! a leaf when `policy` reads them too (`platform::NamespaceContext`, a lookup's answer). A
//! part that needs its own handling of a kind does it on its side: `reconcile::context` keeps
//! the TenantGateway status stash, `check` maps its webhook kinds to [`objects::Kind`].

pub mod apex;
pub mod client;
pub mod intern;
pub mod kept;
pub mod lease;
pub mod managed_fields;
pub mod miss;
pub mod namespaces;
pub mod nsmeta;
pub mod objects;
pub mod projection;
pub mod route_facts;
pub mod route_snapshot;
pub mod routes;
pub mod snapshot;
pub mod watch;

pub use miss::LookupError;
pub use namespaces::{LiveNamespaces, NamespaceChange, NamespaceSource};
pub use snapshot::StaticNamespaces;
