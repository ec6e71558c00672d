//! AdmissionReview v1 codec and routing (SPEC §2.1): bytes in, bytes out.
//!
//! This is the one decision path shared by `serve` (the HTTP handler hands us the body),
//! `review` (the CLI hands us each document) and `check` (which builds a request from a
//! manifest). Policy work itself lives in `crate::policy` and never sees JSON envelopes.
//!
//! | part | file |
//! |---|---|
//! | the pipeline: [`Admission::handle`] (UTF-8, decode, the answer for what does not decode, the one `review` span) and [`Admission::decide`], whose `decide_inner` steps (route, gate, project, identify, namespace, evaluate, mode, route warnings) each hand the next what it needs or end the decision; counting and logging it | `mod.rs` |
//! | the envelope: the fields of `request` read ([`AdmissionRequest`]), the apiVersion / kind / uid checks, how a review's uid is read ([`review_uid`] from bytes, [`review_uid_checked`] from a body that must be JSON) | `request.rs` |
//! | the decision model ([`Decision`], [`DecisionKind`]), enforcement modes and warn-mode warnings, the AdmissionReview answer ([`review_body`], [`Reply`]) | `decision.rs` |
//! | decoding only the object fields a layer reads, within an allowance of the body's size | `project.rs` |
//! | the envelope read straight from the bytes when the path names the layer: the typed decode's result at a fraction of its cost, or nothing (the typed decode then answers) | `reader.rs` |
//! | a body the typed decode refused: JSON or not (400), and how deep | `scan.rs` |
//! | the webhook paths and the resources and versions each validates ([`WebhookResource`]) | `resource.rs` |
//! | warnings from the route index (SPEC §3.4); tests in `route_warnings/tests.rs` | `route_warnings.rs` |
//! | the request, duration and warning counters, resolved once | `counters.rs` |
//! | the by-URL ValidatingWebhookConfiguration | `registration.rs` |
//! | the AdmissionReview builder of the unit tests, the integration tests and the load generator (not product code) | `testing.rs` |
//!
//! Rules:
//! - direction: admission imports `policy`, `cluster` and the leaves (`warning`, `metrics`,
//!   `platform`, ...), never `reconcile` or `server`; the server reaches it through its
//!   handler trait, `offline` calls it directly;
//! - fail closed: whatever cannot be evaluated (a bad envelope, a namespace read failing, a
//!   panicking layer) is denied with a message, never admitted;
//! - the body is never built into a tree: the envelope borrows from it and only the fields a
//!   layer reads are decoded (SPEC §9).

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tracing::Instrument;

use crate::cluster::NamespaceSource;
use crate::cluster::routes::RouteIndex;
use crate::logfield;
use crate::metrics::Metrics;
use crate::policy::{self, Layer, Mode, NamespaceContext, Operation, PolicyConfig, Review};

mod counters;
mod decision;
pub mod project;
mod reader;
pub mod registration;
mod request;
pub mod resource;
pub mod route_warnings;
pub mod scan;
#[doc(hidden)]
pub mod testing;

pub use decision::{Decision, DecisionKind, Reply, review_body};
use decision::{apply_mode_for, bad_request, review_reply};
pub use request::{
    ADMISSION_API_VERSION, AdmissionRequest, NotJson, review_uid, review_uid_checked,
};
use request::{Envelope, Object, check_envelope, uid_and_operation};
pub use resource::WebhookResource;

pub use crate::warning::MAX_WARNING_LEN;

/// The decision path: policy configuration plus where namespace labels come from.
pub struct Admission {
    cfg: Arc<PolicyConfig>,
    namespaces: NamespaceSource,
    metrics: Metrics,
    counters: counters::Counters,
    /// Routes per Gateway, for the warnings of SPEC §3.4 (empty: none are given).
    routes: Arc<RouteIndex>,
    /// A route index is attached ([`Admission::with_routes`]): route warnings are looked for.
    warns: bool,
    /// What each Gateway's routes in `routes` claim, following the index (per review: a
    /// lookup per hostname, not a scan of the Gateway's routes); with a route index only.
    summaries: Option<Arc<route_warnings::SummaryCache>>,
}

impl Admission {
    pub fn new(cfg: Arc<PolicyConfig>, namespaces: NamespaceSource, metrics: Metrics) -> Admission {
        Admission {
            cfg,
            namespaces,
            counters: counters::Counters::new(metrics.clone()),
            metrics,
            routes: Arc::default(),
            warns: false,
            summaries: None,
        }
    }

    /// Warn from this route index (the reconciler's, or a `--routes` snapshot).
    pub fn with_routes(mut self, routes: Arc<RouteIndex>) -> Admission {
        self.summaries = Some(route_warnings::SummaryCache::following(
            routes.clone(),
            &self.cfg.system_prefix,
            Arc::new(self.namespaces.clone()),
        ));
        self.routes = routes;
        self.warns = true;
        self
    }

    /// The fields of an object `layer` decodes: parentRefs only when a route index can
    /// use them.
    fn paths(&self, layer: Layer) -> &'static [project::Path] {
        project::layer_paths_for(layer, self.warns)
    }

    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Decide one HTTP body posted to `/validate/<target>`.
    ///
    /// `target` is `None` only for the offline `review` command, which routes by the
    /// request's own resource.
    pub async fn handle(&self, target: Option<WebhookResource>, body: &[u8]) -> Reply {
        let started = Instant::now();
        // The one span per review, for every caller (the server, `review`), at debug level:
        // free when debug logging is off. The uid is recorded once the envelope is decoded.
        let span = tracing::debug_span!(
            "review",
            resource = target.map(WebhookResource::resource).unwrap_or("unknown"),
            bytes = body.len(),
            uid = tracing::field::Empty,
        );
        let (reply, resource_label) = self.handle_inner(target, body).instrument(span).await;
        self.counters
            .duration(resource_label, started.elapsed().as_secs_f64());
        reply
    }

    async fn handle_inner(
        &self,
        target: Option<WebhookResource>,
        body: &[u8],
    ) -> (Reply, &'static str) {
        let target_label = target.map(WebhookResource::resource).unwrap_or("unknown");
        // serde skips unknown fields without checking their UTF-8, so check the whole body
        // first: JSON is UTF-8, and anything else is "not JSON" (400), not a review.
        let body = match std::str::from_utf8(body) {
            Ok(b) => b,
            Err(e) => {
                self.count(target_label, "unknown", None, DecisionKind::Error);
                return (
                    bad_request(&format!(
                        "request body is not JSON: invalid UTF-8 at byte {}",
                        e.valid_up_to()
                    )),
                    target_label,
                );
            }
        };
        // With the path known, the object is projected while the envelope is parsed.
        let paths = target.map(|t| self.paths(t.layer()));
        let allowance = project::allowance(body.len());
        // The reader gives the typed decode's envelope or nothing; for nothing the typed
        // decode runs and its answer (an error's message too) is the one given.
        let read = paths.and_then(|p| reader::envelope(body, p, allowance));
        let envelope: Envelope = match read {
            Some(e) => e,
            None => match project::decode_with(paths, allowance, || serde_json::from_str(body)) {
                Ok(Object(e)) => e,
                Err(typed_err) => {
                    return (
                        self.undecodable(target_label, body, &typed_err),
                        target_label,
                    );
                }
            },
        };

        let Some(Object(request)) = envelope.request.as_ref() else {
            self.count(target_label, "unknown", None, DecisionKind::Error);
            let d = Decision::error(
                None,
                "not a usable AdmissionReview: the \"request\" field is missing".to_string(),
            );
            return (review_reply("", &d), target_label);
        };
        let uid = request.uid.as_ref();
        tracing::Span::current().record("uid", tracing::field::display(logfield::Escaped(uid)));
        if let Err(msg) = check_envelope(&envelope) {
            self.count(
                target_label,
                op_label(&request.operation),
                None,
                DecisionKind::Error,
            );
            return (review_reply(uid, &Decision::error(None, msg)), target_label);
        }

        let (decision, label) = self.decide(target, request).await;
        (review_reply(uid, &decision), label)
    }

    /// The answer for a body the typed decode refused: "not JSON at all" is 400; JSON that
    /// is not a usable review (also JSON nested deeper than the decoder goes) is 200 + a
    /// denial, with the uid when one can be read. No tree of the body is built.
    fn undecodable(&self, target_label: &str, body: &str, typed_err: &serde_json::Error) -> Reply {
        let shape = match scan::scan(body.as_bytes()) {
            Ok(shape) => shape,
            Err(e) => {
                self.count(target_label, "unknown", None, DecisionKind::Error);
                return bad_request(&format!("request body is not JSON: {e}"));
            }
        };
        let (uid, op) = uid_and_operation(body);
        let op = op.as_deref().map(op_label).unwrap_or("unknown");
        self.count(target_label, op, None, DecisionKind::Error);
        // serde_json reports its depth limit only in the message text.
        let too_deep = typed_err
            .to_string()
            .starts_with("recursion limit exceeded");
        let message = if too_deep
            || shape.max_depth > scan::DECODER_DEPTH_LIMIT && typed_err.is_syntax()
        {
            format!(
                "not a usable AdmissionReview: a field tenant-gateway reads is nested too deep (the body nests objects and arrays {} levels deep; the fields read are decoded to at most {} levels)",
                shape.max_depth,
                scan::DECODER_DEPTH_LIMIT
            )
        } else {
            format!("not a usable AdmissionReview: {typed_err}")
        };
        let d = Decision::error(None, message);
        tracing::warn!(
            uid = %logfield::Escaped(uid.as_deref().unwrap_or("")),
            resource = target_label,
            message = %logfield::Escaped(d.message.as_deref().unwrap_or("")),
            "admission denied: body is not a usable AdmissionReview"
        );
        review_reply(uid.as_deref().unwrap_or(""), &d)
    }

    /// Decide a decoded request. Shared by the HTTP path, `review` and `check`.
    pub async fn decide(
        &self,
        target: Option<WebhookResource>,
        request: &AdmissionRequest<'_>,
    ) -> (Decision, &'static str) {
        let requested = WebhookResource::from_group_resource(
            &request.resource.group,
            &request.resource.resource,
        );
        let target_label = target
            .or(requested)
            .map(WebhookResource::resource)
            .unwrap_or("unknown");
        let op = op_label(&request.operation);
        let decision = self.decide_inner(target, requested, request).await;
        self.count(target_label, op, decision.layer, decision.kind);
        if !decision.allowed || decision.kind != DecisionKind::Allowed {
            self.log(request, &decision);
        }
        (decision, target_label)
    }

    /// The steps of a decision, in order; each step either hands the next what it needs or
    /// ends the decision (an early allow or a fail-closed error).
    async fn decide_inner(
        &self,
        target: Option<WebhookResource>,
        requested: Option<WebhookResource>,
        request: &AdmissionRequest<'_>,
    ) -> Decision {
        let resource = match route(target, requested, request) {
            Ok(r) => r,
            Err(d) => return d,
        };
        let gate = match self.gate(resource, request) {
            Ok(g) => g,
            Err(d) => return d,
        };
        let layer = gate.layer;
        let (object, old_projected) = match project_objects(&gate, self.paths(layer), request) {
            Ok(o) => o,
            Err(d) => return d,
        };
        let object: &Value = &object;
        let old_object: Option<&Value> = old_projected.as_deref();
        // A subresource write that leaves every field the layer reads as it was cannot
        // publish anything new (the main resource's writes are judged on their own): an
        // ingress controller updating the status of an Ingress admitted before the webhook
        // existed is not blocked by it.
        if gate.subresource && old_object == Some(object) {
            return Decision::allow(Some(layer));
        }
        let (namespace, name) = identify(resource, request, object);
        let empty_groups = Vec::new();
        let review = Review {
            operation: gate.operation,
            kind: gate.kind,
            namespace,
            name,
            object,
            old_object,
            username: request.user_info.username.as_deref().unwrap_or(""),
            groups: request.user_info.groups.as_ref().unwrap_or(&empty_groups),
        };
        let ns_ctx = match self.namespace_context(layer, &review).await {
            Ok(c) => c,
            Err(d) => return d,
        };
        let findings = match self.evaluate(layer, &review, &ns_ctx) {
            Ok(f) => f,
            Err(d) => return d,
        };
        // The route layer validated every hostname and found none wrong: the warnings below
        // read the same hostnames and need not validate them again.
        let hostnames_valid = layer == Layer::Route
            && findings.violations.is_empty()
            && policy::route::checks_every_hostname(&review, &ns_ctx, &self.cfg);
        let mut decision = apply_mode_for(layer, gate.mode, findings, ns_ctx.apex());
        if decision.allowed {
            decision.warnings.extend(self.index_warnings(
                resource,
                &review,
                &ns_ctx,
                hostnames_valid,
            ));
        }
        decision
    }

    /// Whether this request is judged at all: its operation, subresource, version and the
    /// layer's enforcement mode.
    fn gate<'r>(
        &self,
        resource: WebhookResource,
        request: &'r AdmissionRequest<'_>,
    ) -> Result<Gate<'r>, Decision> {
        let layer = resource.layer();
        let Some(operation) = Operation::parse(&request.operation) else {
            return Err(Decision::error(
                Some(layer),
                format!(
                    "unknown operation {:?}: expected CREATE, UPDATE, DELETE or CONNECT",
                    request.operation
                ),
            ));
        };
        // Deleting or connecting cannot publish a hostname; only the kinds registered for
        // DELETE (a TenantGateway's deletion gives up what it claimed, layer 9) judge it.
        if operation == Operation::Connect
            || (operation == Operation::Delete && !resource.operations().contains(&"DELETE"))
        {
            return Err(Decision::allow(Some(layer)));
        }
        // A subresource write is admitted unchecked only where the API server resets every
        // field the layer reads (`WebhookResource::trusted_subresources` says why per kind);
        // any other one (namespaces/status, namespaces/finalize, ingresses/status, or one we
        // do not know) is judged like an UPDATE of the main resource.
        let subresource = request.sub_resource.as_deref().filter(|s| !s.is_empty());
        if let Some(sub) = subresource
            && resource.trusted_subresources().contains(&sub)
        {
            return Err(Decision::allow(Some(layer)));
        }
        // The path's API resource the request is for (ListenerSet or XListenerSet).
        let api = resource
            .api_resource(&request.resource.group, &request.resource.resource)
            .unwrap_or(resource.primary());
        if !api.versions.contains(&request.resource.version.as_ref()) {
            return Err(Decision::error(
                Some(layer),
                format!(
                    "{}/{} {} is not a version tenant-gateway knows the shape of (known: {}); register the webhook with matchPolicy: Equivalent so the API server converts",
                    api.group,
                    request.resource.version,
                    api.resource,
                    api.versions.join(", ")
                ),
            ));
        }
        let mode = self.cfg.enforcement.mode(layer);
        if mode == Mode::Off {
            return Err(Decision::allow(Some(layer)));
        }
        let kind = if request.kind.kind.is_empty() {
            api.kind
        } else {
            request.kind.kind.as_ref()
        };
        Ok(Gate {
            layer,
            operation,
            mode,
            kind,
            subresource: subresource.is_some(),
        })
    }

    /// The namespace's labels, for the layers that read its apex in tenant scope.
    async fn namespace_context(
        &self,
        layer: Layer,
        review: &Review<'_>,
    ) -> Result<NamespaceContext, Decision> {
        let (kind, namespace, name) = (review.kind, review.namespace, review.name);
        // A DELETE is judged on the caller alone (layer 9): no namespace read can fail it.
        let ns_ctx = if layer.tenant_scoped()
            && review.operation != Operation::Delete
            && self.cfg.in_tenant_scope(namespace)
        {
            match self.namespaces.lookup(namespace).await {
                Ok(ctx) => ctx,
                Err(e) => {
                    return Err(Decision::error(
                        Some(layer),
                        format!(
                            "{kind} {namespace}/{name}: cannot read namespace {namespace} to check hostnames ({e}); retry the request"
                        ),
                    ));
                }
            }
        } else {
            NamespaceContext::NotFound
        };
        Ok(lowercase_apex(ns_ctx))
    }

    /// The layer's findings. A bug in a layer must deny, not crash the server or admit.
    fn evaluate(
        &self,
        layer: Layer,
        review: &Review<'_>,
        ns_ctx: &NamespaceContext,
    ) -> Result<policy::Findings, Decision> {
        let cfg = &self.cfg;
        let result = catch_unwind(AssertUnwindSafe(|| {
            policy::evaluate_with(layer, review, ns_ctx, self.namespaces.apex_owners(), cfg)
        }));
        match result {
            Ok(Ok(f)) => Ok(f),
            Ok(Err(shape)) => Err(Decision::error(Some(layer), shape.to_string())),
            Err(_) => Err(Decision::error(
                Some(layer),
                format!(
                    "{} {}: internal error while evaluating the {layer} policy; the request is denied to stay safe, please report this",
                    review.kind,
                    policy::object_ref(review)
                ),
            )),
        }
    }

    fn count(&self, resource: &str, op: &str, layer: Option<Layer>, kind: DecisionKind) {
        self.counters.request(resource, op, layer, kind);
    }

    fn log(&self, request: &AdmissionRequest<'_>, d: &Decision) {
        use logfield::Escaped as E;
        let layer = d.layer.map(Layer::as_str).unwrap_or("none");
        // Everything below but the layer and decision comes from the request: escaped, so a
        // newline in a uid or name cannot start a forged log line (SPEC §9).
        let uid = E(&request.uid);
        let kind = E(&request.kind.kind);
        let user = E(request.user_info.username.as_deref().unwrap_or(""));
        let ns = E(request.namespace.as_deref().unwrap_or(""));
        let name = E(request.name.as_deref().unwrap_or(""));
        let message = E(d.message.as_deref().unwrap_or(""));
        match d.kind {
            DecisionKind::Denied | DecisionKind::Error => tracing::warn!(
                uid = %uid, kind = %kind, namespace = %ns, name = %name, layer, user = %user,
                decision = d.kind.as_str(), message = %message, "admission denied"
            ),
            DecisionKind::Warned | DecisionKind::Audited => tracing::info!(
                uid = %uid, kind = %kind, namespace = %ns, name = %name, layer, user = %user,
                decision = d.kind.as_str(), message = %message, "admission policy violation admitted by enforcement mode"
            ),
            DecisionKind::Allowed => tracing::debug!(
                uid = %uid, kind = %kind, namespace = %ns, name = %name, layer,
                warnings = ?d.warnings, "admission allowed with warnings"
            ),
        }
    }
}

/// What [`Admission::gate`] lets through to the layer.
struct Gate<'r> {
    layer: Layer,
    operation: Operation,
    mode: Mode,
    /// The object's kind, for messages.
    kind: &'r str,
    /// A subresource write judged like an UPDATE of the main resource.
    subresource: bool,
}

/// The resource this request is for: the path's, which must be the request's own.
fn route(
    target: Option<WebhookResource>,
    requested: Option<WebhookResource>,
    request: &AdmissionRequest<'_>,
) -> Result<WebhookResource, Decision> {
    match (target, requested) {
        (Some(t), Some(r)) if t == r => Ok(t),
        (None, Some(r)) => Ok(r),
        (Some(t), _) => Err(Decision::error(
            None,
            format!(
                "webhook misconfiguration: {} only validates {}.{}, but received a request for resource \"{}\" in group \"{}\"; fix the rules of the ValidatingWebhookConfiguration entry that points at this path",
                t.path(),
                t.resource(),
                if t.group().is_empty() {
                    "core"
                } else {
                    t.group()
                },
                request.resource.resource,
                request.resource.group,
            ),
        )),
        (None, None) => Err(Decision::error(
            None,
            format!(
                "tenant-gateway does not validate resource \"{}\" in group \"{}\"",
                request.resource.resource, request.resource.group
            ),
        )),
    }
}

/// The object and, on UPDATE, the old object, projected to the fields the layer reads.
type Projected<'r> = (Cow<'r, Value>, Option<Cow<'r, Value>>);

fn project_objects<'r>(
    gate: &Gate<'_>,
    paths: &'static [project::Path],
    request: &'r AdmissionRequest<'_>,
) -> Result<Projected<'r>, Decision> {
    let (layer, kind) = (gate.layer, gate.kind);
    // A DELETE carries the object being deleted as oldObject (and object null): the layer
    // judges that object. Without one, an empty object: the caller alone decides then.
    if gate.operation == Operation::Delete {
        let object = match request.old_object.as_ref().map(|o| o.projected(paths)) {
            Some(Ok(o)) if o.is_object() => o,
            Some(Ok(o)) if o.is_null() => Cow::Owned(Value::Object(Default::default())),
            None => Cow::Owned(Value::Object(Default::default())),
            _ => {
                return Err(Decision::error(
                    Some(layer),
                    format!("{kind}: request.oldObject must be a JSON object for DELETE"),
                ));
            }
        };
        return Ok((object, None));
    }
    let object = match request.object.as_ref().map(|o| o.projected(paths)) {
        Some(Ok(o)) if o.is_object() => o,
        Some(Err(e)) => {
            // `review` and `check` project here what the server's reader refused up front:
            // the same answer for JSON nested too deep (SPEC §2.1: it is not "not JSON").
            let message = if e.to_string().starts_with("recursion limit exceeded") {
                format!(
                    "{kind}: not a usable AdmissionReview: request.object is nested too deep (a \
                     field tenant-gateway reads nests objects and arrays deeper than the {} \
                     levels it decodes)",
                    scan::DECODER_DEPTH_LIMIT
                )
            } else {
                format!("{kind}: request.object is not valid JSON: {e}")
            };
            return Err(Decision::error(Some(layer), message));
        }
        _ => {
            return Err(Decision::error(
                Some(layer),
                format!(
                    "{kind}: request.object must be a JSON object for {}",
                    gate.operation.as_str()
                ),
            ));
        }
    };
    let old = match (gate.operation, request.old_object.as_ref()) {
        (Operation::Update, Some(old)) => match old.projected(paths) {
            Ok(o) if o.is_object() => Some(o),
            Ok(o) if o.is_null() => None,
            _ => {
                return Err(Decision::error(
                    Some(layer),
                    format!("{kind}: request.oldObject must be a JSON object"),
                ));
            }
        },
        _ => None,
    };
    Ok((object, old))
}

/// The object's namespace and name for the layers and messages. For cluster-scoped kinds the
/// API server fills request.namespace with the object's own name (Namespaces); it is not a
/// scope, so messages say `Namespace x`, not `x/x`.
fn identify<'r>(
    resource: WebhookResource,
    request: &'r AdmissionRequest<'_>,
    object: &'r Value,
) -> (&'r str, &'r str) {
    let namespace = request
        .namespace
        .as_deref()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
        })
        .filter(|_| !resource.cluster_scoped())
        .unwrap_or("");
    let name = request
        .name
        .as_deref()
        .filter(|s| !s.is_empty())
        .or_else(|| object.pointer("/metadata/name").and_then(Value::as_str))
        .or_else(|| {
            object
                .pointer("/metadata/generateName")
                .and_then(Value::as_str)
        })
        .unwrap_or("<unnamed>");
    (namespace, name)
}

/// Apexes appear lowercased in messages, whatever the label's spelling. Matching ignores
/// ASCII case already, so no decision changes; the common, lowercase label costs nothing.
fn lowercase_apex(ctx: NamespaceContext) -> NamespaceContext {
    match ctx {
        NamespaceContext::Found { mut labels } => {
            if let Some(v) = labels.get_mut(policy::HOST_LABEL)
                && v.bytes().any(|b| b.is_ascii_uppercase())
            {
                *v = v.to_ascii_lowercase();
            }
            NamespaceContext::Found { labels }
        }
        other => other,
    }
}

fn op_label(op: &str) -> &'static str {
    Operation::parse(op)
        .map(Operation::as_str)
        .unwrap_or("unknown")
}

#[cfg(test)]
mod tests;
