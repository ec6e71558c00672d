//! Development CA and serving certificate (`tenant-gateway certs`).
