//! TenantGateway reconciler (SPEC §3). So far: the API types and their CRD; the controller
//! itself is the next piece of work.

pub mod api;
