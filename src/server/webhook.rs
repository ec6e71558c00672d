//! The webhook port's HTTP surface: `POST /validate/<resource>` and nothing else (SPEC §2.1,
//! §9). TLS and connection handling live in `listener`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use http_body_util::BodyExt;
use serde_json::json;

use super::budget::{Budget, Exhausted, Held};
use super::handler::{ReviewHandler, json_reply};
use crate::admission::{self, Decision, DecisionKind, Reply, WebhookResource};
use crate::metrics::Metrics;

struct Ctx<H> {
    handler: Arc<H>,
    metrics: Metrics,
    max_body_bytes: usize,
    body_read_timeout: Duration,
    budget: Budget,
}

/// The router for the webhook port.
pub(crate) fn router<H: ReviewHandler>(
    handler: Arc<H>,
    metrics: Metrics,
    max_body_bytes: usize,
    body_read_timeout: Duration,
    budget: Budget,
) -> Router {
    let ctx = Arc::new(Ctx {
        handler,
        metrics,
        max_body_bytes,
        body_read_timeout,
        budget,
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
    // An HTTP/1 client writes the whole body before it reads the answer: if we answered 413
    // and closed, it would see a broken pipe instead of the 413. So over-limit HTTP/1
    // bodies are read and discarded (up to a cap) before answering. HTTP/2 resets just the
    // stream, and a client that sent `Expect: 100-continue` has not sent the body yet.
    let drain_excess = req.version() < Version::HTTP_2
        && !req
            .headers()
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let max = ctx.max_body_bytes;
    let mut body = req.into_body();
    let mut held = Held::default();
    // Refuse early when the client announces an oversized body: none of it is buffered.
    let read = async {
        if declared.is_some_and(|n| n > max as u64) {
            BodyRead::TooLarge
        } else {
            read_limited(&mut body, max, &ctx.budget, &mut held).await
        }
    };
    let body = match tokio::time::timeout(ctx.body_read_timeout, read).await {
        Ok(BodyRead::Complete(bytes)) => bytes,
        Ok(BodyRead::Busy(e)) => {
            tracing::debug!(path = %target.path(), "request body budget exhausted; answering 503");
            // As for 413: an HTTP/1 client must be able to finish writing to see the 503.
            // The rest is read and dropped, never kept, so it costs no budget.
            drop(held);
            if drain_excess {
                let cap = max.saturating_mul(DRAIN_FACTOR);
                let _ = tokio::time::timeout(ctx.body_read_timeout, discard(&mut body, cap)).await;
            }
            return busy(e);
        }
        Ok(BodyRead::TooLarge) => {
            if drain_excess {
                let cap = max.saturating_mul(DRAIN_FACTOR);
                let _ = tokio::time::timeout(ctx.body_read_timeout, discard(&mut body, cap)).await;
            }
            return too_large(max);
        }
        Ok(BodyRead::Failed(e)) => {
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
    // The review span is the handler's (`Admission::handle` opens it).
    let outcome = AssertUnwindSafe(async move { handler.handle(target, input).await })
        .catch_unwind()
        .await;
    let resp = match outcome {
        Ok(reply) => reply_response(reply),
        Err(panic) => reply_response(panicked(&ctx.metrics, target, &body, panic.as_ref())),
    };
    // The body's bytes are freed with `body` here; only then is the budget given back.
    drop(body);
    drop(held);
    resp
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
    let uid = admission::review_uid(body);
    tracing::error!(
        path = %target.path(),
        uid = %crate::logfield::Escaped(uid.as_deref().unwrap_or("")),
        panic = %crate::logfield::Escaped(&what),
        "review handler panicked; denying"
    );
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
            Reply {
                status: 200,
                body: admission::review_body(&uid, &decision),
            }
        }
        None => json_reply(500, &json!({ "error": message })),
    }
}

/// How much past the limit an HTTP/1 body is read and thrown away so the client can see
/// the 413; beyond it the connection is closed instead.
const DRAIN_FACTOR: usize = 4;

enum BodyRead {
    Complete(Bytes),
    TooLarge,
    /// The in-flight byte budget stayed exhausted for the whole wait.
    Busy(Exhausted),
    Failed(String),
}

/// Collect the body, stopping as soon as it exceeds `max`. What is kept is charged to
/// `budget` before it is kept: the first frame by its length, a growing buffer by its
/// capacity (the allocation is what takes memory, and a doubling buffer holds up to twice
/// its length).
async fn read_limited(body: &mut Body, max: usize, budget: &Budget, held: &mut Held) -> BodyRead {
    // Most reviews arrive in one frame: keep a copy of exactly its bytes, and only start a
    // buffer when a second frame comes. The frame itself is a view into the connection's
    // read buffer (hyper's 8-64 KiB HTTP/1 buffer, or h2's shared by many streams' frames):
    // kept, it would pin that whole allocation while the review is decided, make hyper
    // allocate a fresh one for its next read, and hold more than the budget was charged.
    let mut first: Option<Bytes> = None;
    let mut rest: Option<BytesMut> = None;
    let mut len = 0usize;
    let mut charged = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => return BodyRead::Failed(e.to_string()),
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers carry nothing a review needs
        };
        len = len.saturating_add(data.len());
        if len > max {
            return BodyRead::TooLarge;
        }
        let needed = match &rest {
            None if first.is_none() => data.len(),
            // Growing to `len` reallocates to at least twice the old capacity.
            None => len.max(charged.saturating_mul(2)),
            Some(buf) if buf.capacity() - buf.len() >= data.len() => buf.capacity(),
            Some(buf) => len.max(buf.capacity().saturating_mul(2)),
        }
        // Never more than the limit: the body cannot grow past it.
        .min(max);
        if needed > charged {
            if let Err(e) = budget.charge(held, needed - charged).await {
                return BodyRead::Busy(e);
            }
            charged = needed;
        }
        match (&mut first, &mut rest) {
            (None, _) => first = Some(Bytes::copy_from_slice(&data)),
            (Some(f), None) => {
                let mut buf = BytesMut::with_capacity(needed);
                buf.extend_from_slice(f);
                buf.extend_from_slice(&data);
                first = Some(Bytes::new());
                rest = Some(buf);
            }
            (Some(_), Some(buf)) => {
                if buf.capacity() - buf.len() < data.len() {
                    // Exactly `needed` (`reserve` may round up past what was charged).
                    let mut bigger = BytesMut::with_capacity(needed);
                    bigger.extend_from_slice(buf);
                    *buf = bigger;
                }
                buf.extend_from_slice(&data);
            }
        }
    }
    BodyRead::Complete(match (first, rest) {
        (_, Some(buf)) => buf.freeze(),
        (Some(f), None) => f,
        (None, None) => Bytes::new(),
    })
}

/// Read and drop up to `cap` more bytes of `body`.
async fn discard(body: &mut Body, cap: usize) {
    let mut seen = 0usize;
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            seen = seen.saturating_add(data.len());
            if seen > cap {
                return;
            }
        }
    }
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

fn busy(e: Exhausted) -> Response {
    let mut resp = error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "too many request bytes in flight (budget {} bytes, waited {:?}); retry",
            e.total, e.wait
        ),
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What a review's body keeps is its own bytes, charged exactly: one frame (a view into
    /// a larger read buffer, as hyper and h2 hand them out) is copied, so the buffer is not
    /// pinned while the review is decided; two frames are joined in a buffer of their own.
    #[tokio::test]
    async fn the_kept_body_holds_no_view_into_the_read_buffer() {
        let review = br#"{"kind":"AdmissionReview"}"#;
        for frames in [1usize, 2] {
            let mut read_buffer = BytesMut::with_capacity(8192);
            read_buffer.extend_from_slice(b"POST /validate/httproutes HTTP/1.1\r\n\r\n");
            read_buffer.extend_from_slice(review);
            let mut read_buffer = read_buffer.freeze();
            // hyper has parsed the head and let go of it; the body's frames are what is left.
            drop(read_buffer.split_to(read_buffer.len() - review.len()));
            let chunks: Vec<Result<_, std::convert::Infallible>> = match frames {
                1 => vec![Ok(hyper::body::Frame::data(read_buffer.clone()))],
                _ => vec![
                    Ok(hyper::body::Frame::data(read_buffer.slice(..10))),
                    Ok(hyper::body::Frame::data(read_buffer.slice(10..))),
                ],
            };
            let mut body = Body::new(http_body_util::StreamBody::new(futures::stream::iter(
                chunks,
            )));
            let budget = Budget::new(1 << 20, Duration::from_millis(10));
            let mut held = Held::default();
            let kept = match read_limited(&mut body, 1 << 20, &budget, &mut held).await {
                BodyRead::Complete(b) => b,
                _ => panic!("a small body is read whole"),
            };
            drop(body);
            assert_eq!(&kept[..], review, "{frames} frame(s)");
            assert!(
                read_buffer.is_unique(),
                "{frames} frame(s): the kept body shares the read buffer's allocation"
            );
            assert_eq!(held.bytes(), review.len(), "{frames} frame(s): charged");
        }
    }
}
