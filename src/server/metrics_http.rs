//! The plain-HTTP metrics and health port (SPEC §6): `/metrics`, `/healthz`, `/readyz`.
//! Kept off the webhook port so probes and scrapes never need the serving certificate and the
//! webhook port exposes nothing but the validate paths.

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::metrics::Metrics;
use crate::readiness::Readiness;

const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const PLAIN_TEXT: &str = "text/plain; charset=utf-8";

pub(crate) fn router(metrics: Metrics, readiness: Arc<Readiness>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move { text(StatusCode::OK, PROMETHEUS_TEXT, metrics.render()) }
            }),
        )
        .route(
            "/healthz",
            get(|| async { text(StatusCode::OK, PLAIN_TEXT, "ok\n".to_string()) }),
        )
        .route(
            "/readyz",
            get(move || {
                let readiness = readiness.clone();
                async move { readyz(&readiness) }
            }),
        )
        .fallback(|| async {
            text(
                StatusCode::NOT_FOUND,
                PLAIN_TEXT,
                "not found: this port serves GET /metrics, /healthz and /readyz\n".to_string(),
            )
        })
}

fn readyz(readiness: &Readiness) -> Response {
    match readiness.check() {
        Ok(detail) => text(StatusCode::OK, PLAIN_TEXT, format!("{detail}\n")),
        Err(failing) => {
            let mut body = String::from("not ready:\n");
            for reason in &failing {
                body.push_str("- ");
                body.push_str(reason);
                body.push('\n');
            }
            // Worth knowing while not ready too: it may be why the old certificate is served.
            if let Some(e) = readiness.tls_error() {
                body.push_str("- tls reload failed, old certificate still serving: ");
                body.push_str(&e);
                body.push('\n');
            }
            text(StatusCode::SERVICE_UNAVAILABLE, PLAIN_TEXT, body)
        }
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
