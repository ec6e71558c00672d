//! The webhook port's HTTP surface: `POST /validate/<resource>` and nothing else (SPEC §2.1,
//! §9). TLS and connection handling live in `listener`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use futures::FutureExt;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Deserialize;
use serde_json::json;

use super::handler::{ReviewHandler, json_reply};
use crate::admission::{self, Decision, DecisionKind, Reply, WebhookResource};
use crate::metrics::Metrics;

struct Ctx<H> {
    handler: Arc<H>,
    metrics: Metrics,
    max_body_bytes: usize,
    body_read_timeout: Duration,
}

/// The router for the webhook port.
pub(crate) fn router<H: ReviewHandler>(
    handler: Arc<H>,
    metrics: Metrics,
    max_body_bytes: usize,
    body_read_timeout: Duration,
) -> Router {
    let ctx = Arc::new(Ctx {
        handler,
        metrics,
        max_body_bytes,
        body_read_timeout,
    });
    let mut router = Router::new();
    for target in WebhookResource::ALL {
        let ctx = ctx.clone();
        let route =
            post(move |req: Request| review(ctx.clone(), target, req)).fallback(method_not_allowed);
        router = router.route(&target.path(), route);
    }
    router.fallback(not_found)
}

async fn review<H: ReviewHandler>(
    ctx: Arc<Ctx<H>>,
    target: WebhookResource,
    req: Request,
) -> Response {
    // Refuse early when the client announces an oversized body, before reading any of it.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > ctx.max_body_bytes as u64) {
        return too_large(ctx.max_body_bytes);
    }

    let limited = Limited::new(req.into_body(), ctx.max_body_bytes);
    let body = match tokio::time::timeout(ctx.body_read_timeout, limited.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return too_large(ctx.max_body_bytes);
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, path = %target.path(), "reading request body failed");
            return error(
                StatusCode::BAD_REQUEST,
                format!("cannot read the request body: {e}"),
            );
        }
        Err(_) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body was not received within {:?}",
                    ctx.body_read_timeout
                ),
            );
        }
    };

    // Bytes clones are reference counts: keep one so a panicking handler can still be
    // answered with the request's uid.
    let handler = ctx.handler.clone();
    let input = body.clone();
    let outcome = AssertUnwindSafe(async move { handler.handle(target, input).await })
        .catch_unwind()
        .await;
    match outcome {
        Ok(reply) => reply_response(reply),
        Err(panic) => reply_response(panicked(&ctx.metrics, target, &body, panic.as_ref())),
    }
}

/// Turn a handler panic into a denial: a 200 AdmissionReview with `allowed: false` when the
/// uid can be read (the API server then shows the message and never admits, whatever the
/// webhook's failurePolicy), else a 500 JSON error (the API server cannot match a response
/// without the uid anyway, so failurePolicy decides — `Fail` in our chart).
fn panicked(
    metrics: &Metrics,
    target: WebhookResource,
    body: &Bytes,
    panic: &(dyn std::any::Any + Send),
) -> Reply {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string());
    metrics
        .admission_requests
        .with_label_values(&[
            target.resource(),
            "unknown",
            "none",
            DecisionKind::Error.as_str(),
        ])
        .inc();
    let uid = read_uid(body);
    tracing::error!(path = %target.path(), uid = uid.as_deref().unwrap_or(""), panic = %what, "review handler panicked; denying");
    let message = format!(
        "internal error in tenant-gateway while reviewing this request ({}); it is denied to stay safe, please report this",
        target.path()
    );
    match uid {
        Some(uid) => {
            let decision = Decision {
                allowed: false,
                kind: DecisionKind::Error,
                layer: None,
                message: Some(message),
                warnings: Vec::new(),
            };
            json_reply(200, &admission::response_json(&uid, &decision))
        }
        None => json_reply(500, &json!({ "error": message })),
    }
}

fn read_uid(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Envelope {
        request: Option<Request>,
    }
    #[derive(Deserialize)]
    struct Request {
        uid: Option<String>,
    }
    serde_json::from_slice::<Envelope>(body)
        .ok()?
        .request?
        .uid
        .filter(|u| !u.is_empty())
}

fn reply_response(reply: Reply) -> Response {
    // A status outside 100..=999 can only come from a buggy handler; never let it pass as
    // anything but an error.
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, Body::from(reply.body))
}

fn json_response(status: StatusCode, body: Body) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

pub(crate) fn error(status: StatusCode, message: String) -> Response {
    let body = serde_json::to_vec(&json!({ "error": message })).unwrap_or_default();
    json_response(status, Body::from(body))
}

fn too_large(limit: usize) -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body exceeds the limit of {limit} bytes"),
    )
}

async fn method_not_allowed(req: Request) -> Response {
    let mut resp = error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} {}: admission reviews must be sent with POST",
            req.method(),
            req.uri().path()
        ),
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    resp
}

async fn not_found(req: Request) -> impl IntoResponse {
    let paths: Vec<String> = WebhookResource::ALL.iter().map(|r| r.path()).collect();
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no such path {:?} on the webhook port; it serves only POST to {} (metrics and health are on the separate metrics port)",
            req.uri().path(),
            paths.join(", ")
        ),
    )
}
