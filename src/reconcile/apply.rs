//! The write edge (SPEC §3.7): executes exactly the writes a plan produced, nothing more.
//!
//! - Objects: server-side apply with the one field manager; `force` only on an object we
//!   already own (a missing one is created without force, so a same-named object created in
//!   the meantime makes the apply fail instead of being taken over). When another field
//!   manager still owns fields we manage (SPEC §3.7, §3.8: the platform's controller, a
//!   `kubectl edit`), the apply is preceded by one JSON patch of `metadata.managedFields`,
//!   conditional on the resourceVersion just read and on the object still being ours, that
//!   moves those fields into our apply entry ([`crate::cluster::managed_fields::adopt`]); the
//!   apply then prunes what we no longer render. Counted as verb `adopt`.
//! - Deletes: only what the diff found owned, with the uid as precondition.
//! - Namespace labels: a merge patch conditional on the resourceVersion just read, re-checking
//!   that the label is still ours to change; the platform controller's annotation
//!   (`cozystack.io/gateway-attached-by`) counts as ours and is replaced by ours.
//! - Route status: `status.parents` is atomic for server-side apply (no listType), so it is
//!   read-modify-write with the resourceVersion read: other controllers' entries are copied
//!   verbatim, ours for this Gateway replaced; retried on conflict.
//! - TenantGateway status: server-side apply of the status subresource.
//!
//! Every write first checks the lease: losing it stops the writes at once.

use std::fmt::Debug;

use k8s_openapi::api::core::v1::Namespace;
use kube::Resource;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::Request;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::api::{TenantGateway, TenantGatewayStatus};
use super::context::Context;
use super::diff::{Object, ObjectKind, RouteStatusWrite, Write};
use super::error::Error;
use super::inputs::{InPlaceEdit, Inputs, ParentRef, RouteKind, RouteParentStatus};
use super::labels::NamespaceWrite;
use crate::cluster::managed_fields;
use crate::platform::{
    ATTACHED_BY_ANNOTATION, CONTROLLER_NAME, FIELD_MANAGER, GATEWAY_LABEL,
    PLATFORM_ATTACHED_BY_ANNOTATION, TGW_API_VERSION, TGW_KIND,
};

/// Attempts of one read-modify-write before the reconcile fails and backs off.
const CONFLICT_TRIES: usize = 5;
/// The longest one write (with its reads and conflict retries) may take before it counts as
/// failed; kube-apiserver's own request timeout is 60 s, a webhook's at most 30 s.
pub const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Params of the writes that are not server-side apply (the namespace marks, route status,
/// the managedFields takeover): they still carry our one field manager (SPEC §3.7), so
/// `managedFields` names us rather than the client's user agent.
fn named_manager() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Which writes may run side by side: writes of one class are independent (different
/// objects). The classes run in order, each a barrier for the next only where the order
/// matters:
/// - Issuer before its Certificates (cert-manager would report the Certificates' issuer
///   missing until it appears);
/// - the Gateway beside its Certificates, and first among them: a listener whose Secret
///   cert-manager has not issued yet is what the data plane sees either way (a Certificate
///   written first does not make its Secret exist), so a route's listener does not wait for
///   the Certificate writes; the Gateway before the redirect route that attaches to its
///   `http` listener;
/// - deletes after the Gateway stopped referencing what they delete;
/// - namespace labels before route status (a label decides which namespaces' routes are
///   admitted), route status after the listeners exist;
/// - the TenantGateway status last: it reports what the writes before it did.
///
/// Within a class the writes are a stream bounded by the process-wide write slots
/// ([`Context::write_slots`]), not batches waiting for their slowest member; they take the
/// slots in the order [`batches`] gives.
fn class(w: &Write) -> u8 {
    match w {
        Write::Apply(o) => match o.kind() {
            ObjectKind::Issuer => 0,
            ObjectKind::Certificate | ObjectKind::Gateway => 1,
            ObjectKind::HttpRoute => 2,
        },
        Write::Delete { .. } => 3,
        Write::Namespace(_) => 4,
        Write::RouteStatus(_) => 5,
        Write::Status(_) => 6,
    }
}

/// The writes' indices in the batches they run in: one batch per [`class`], in class order;
/// within a batch the Gateway writes first, then the rest in the plan's order.
pub fn batches(writes: &[Write]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..writes.len()).collect();
    let gateway_first = |w: &Write| !matches!(w, Write::Apply(Object::Gateway(_)));
    // Stable: the plan's order within each rank.
    order.sort_by_key(|&i| (class(&writes[i]), gateway_first(&writes[i])));
    order
        .chunk_by(|&a, &b| class(&writes[a]) == class(&writes[b]))
        .map(<[usize]>::to_vec)
        .collect()
}

/// Execute `writes` for the TenantGateway of `inputs`, every one of them whatever the others
/// came to (SPEC §3.7 "Failure isolation"). Returns one result per write, in order: `true`
/// when it was sent, `false` when nothing had to be sent or the lease was lost first.
pub async fn execute_each(
    ctx: &Context,
    inputs: &Inputs,
    writes: &[Write],
) -> Vec<Result<bool, Error>> {
    let mut out: Vec<Result<bool, Error>> = writes.iter().map(|_| Ok(false)).collect();
    for batch in batches(writes) {
        if !ctx.leader.is_leader() {
            tracing::info!("lost the lease; the remaining writes are left to the new holder");
            continue;
        }
        // Every write of the batch at once; the write slots bound what is really in flight.
        // Each is counted when it lands, not when its batch ends: a batch holds the Gateway
        // beside its Certificates, and the metric says which writes the API server has.
        let results = futures::future::join_all(batch.iter().map(|&i| async move {
            let r = paced(ctx, inputs, &writes[i]).await;
            if let Ok((kind, Some(verb))) = &r {
                ctx.metrics
                    .reconcile_writes
                    .with_label_values(&[*kind, *verb])
                    .inc();
            }
            r
        }))
        .await;
        for (&i, r) in batch.iter().zip(results) {
            out[i] = r.map(|(_, verb)| verb.is_some());
        }
    }
    out
}

/// [`execute_each`], then the first error if any write failed (the finalizer's writes: the
/// finalizer stays until all of them went through). Returns how many were issued.
pub async fn execute(ctx: &Context, inputs: &Inputs, writes: &[Write]) -> Result<usize, Error> {
    let mut issued = 0;
    let mut first_error = None;
    for r in execute_each(ctx, inputs, writes).await {
        match r {
            Ok(true) => issued += 1,
            Ok(false) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(issued),
    }
}

/// The object a write is about, as the status and events name it; also the key of its
/// backoff ([`super::backoff::WriteBackoff`]).
pub fn target(namespace: &str, w: &Write) -> String {
    match w {
        Write::Apply(o) => format!("{} {namespace}/{}", o.kind().as_str(), o.name()),
        Write::Delete { kind, name, .. } => format!("{} {namespace}/{name}", kind.as_str()),
        Write::Namespace(nw) => format!("Namespace {}", nw.namespace()),
        Write::RouteStatus(rs) => {
            format!("{} {}/{} status", rs.kind.as_str(), rs.namespace, rs.name)
        }
        Write::Status(_) => "TenantGateway status".to_string(),
    }
}

/// One write once a write slot is free.
async fn paced(
    ctx: &Context,
    inputs: &Inputs,
    w: &Write,
) -> Result<(&'static str, Option<&'static str>), Error> {
    // Nobody closes the semaphore; if it were closed, the write goes out unpaced rather
    // than not at all.
    let _slot = ctx.write_slots.acquire().await.ok();
    // Losing the lease stops the writes not yet sent.
    if !ctx.leader.is_leader() {
        return Ok(("", None));
    }
    // The client's own timeout is minutes; one stuck object must not hold the reconcile
    // (and its write slot) that long.
    match tokio::time::timeout(WRITE_TIMEOUT, one(ctx, inputs, w)).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout {
            what: target(&inputs.tgw.namespace, w),
            secs: WRITE_TIMEOUT.as_secs(),
        }),
    }
}

/// One write; returns the metric labels, verb `None` when nothing had to be sent after all.
async fn one(
    ctx: &Context,
    inputs: &Inputs,
    w: &Write,
) -> Result<(&'static str, Option<&'static str>), Error> {
    let ns = inputs.tgw.namespace.as_str();
    let c = ctx.client.clone();
    match w {
        Write::Apply(obj) => {
            let observed = observed_meta(inputs, obj.kind(), obj.name());
            let force = observed.is_some();
            let adopt = observed
                .is_some_and(|m| {
                    managed_fields::foreign_owned(m.managed_fields.as_deref().unwrap_or_default())
                })
                .then_some(inputs.tgw.uid.as_str());
            let kind = obj.kind().as_str();
            let adopted = match obj {
                Object::Gateway(o) => {
                    apply_object(Api::namespaced(c, ns), o.as_ref(), force, adopt).await?
                }
                Object::Issuer(o) => {
                    apply_object(Api::namespaced(c, ns), o.as_ref(), force, adopt).await?
                }
                Object::Certificate(o) => {
                    apply_object(Api::namespaced(c, ns), o.as_ref(), force, adopt).await?
                }
                Object::HttpRoute(o) => {
                    apply_object(Api::namespaced(c, ns), o.as_ref(), force, adopt).await?
                }
            };
            Ok((kind, Some(if adopted { "adopt" } else { "apply" })))
        }
        Write::Delete { kind, name, uid } => {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let res = match kind {
                ObjectKind::Gateway => {
                    delete::<gateway_api::apis::experimental::gateways::Gateway>(
                        Api::namespaced(c, ns),
                        name,
                        &dp,
                    )
                    .await
                }
                ObjectKind::Issuer => {
                    delete::<super::certmanager::Issuer>(Api::namespaced(c, ns), name, &dp).await
                }
                ObjectKind::Certificate => {
                    delete::<super::certmanager::Certificate>(Api::namespaced(c, ns), name, &dp)
                        .await
                }
                ObjectKind::HttpRoute => {
                    delete::<gateway_api::apis::experimental::httproutes::HttpRoute>(
                        Api::namespaced(c, ns),
                        name,
                        &dp,
                    )
                    .await
                }
            };
            res.map_err(|e| Error::kube(format!("delete {} {ns}/{name}", kind.as_str()), e))?;
            Ok((kind.as_str(), Some("delete")))
        }
        Write::Namespace(nw) => Ok(("Namespace", namespace(ctx, nw).await?)),
        Write::RouteStatus(rs) => Ok((rs.kind.as_str(), route_status(ctx, rs).await?)),
        Write::Status(s) => {
            status(ctx, ns, &inputs.tgw.name, s).await?;
            Ok(("TenantGateway", Some("status")))
        }
    }
}

/// The observed object of that kind and name (the diff applies only missing or owned ones).
fn observed_meta<'a>(
    inputs: &'a Inputs,
    kind: ObjectKind,
    name: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> {
    let o = &inputs.observed;
    let n = Some(name);
    match kind {
        ObjectKind::Gateway => o
            .gateways
            .iter()
            .map(|x| &x.metadata)
            .find(|m| m.name.as_deref() == n),
        ObjectKind::Issuer => o
            .issuers
            .iter()
            .map(|x| &x.metadata)
            .find(|m| m.name.as_deref() == n),
        ObjectKind::Certificate => o
            .certificates
            .iter()
            .map(|x| &x.metadata)
            .find(|m| m.name.as_deref() == n),
        ObjectKind::HttpRoute => o
            .http_routes
            .iter()
            .map(|x| &x.metadata)
            .find(|m| m.name.as_deref() == n),
    }
}

/// Server-side apply of `obj`, after taking over the fields other managers own when `adopt`
/// names the owner's uid. Returns whether fields were taken over.
async fn apply_object<K>(
    api: Api<K>,
    obj: &K,
    force: bool,
    adopt: Option<&str>,
) -> Result<bool, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let adopted = match adopt {
        Some(uid) => take_over_fields(&api, obj, uid).await?,
        None => false,
    };
    ssa(api, obj, force).await?;
    Ok(adopted)
}

/// Move the fields other managers own on the live object into our apply entry (see the
/// module doc): read, check it is still owned by `owner_uid`, write `managedFields` back with
/// a JSON patch that tests the resourceVersion read; when the object moved on, again (a
/// refusal of an object that did not move is an error, not a conflict). `false` when nothing
/// was left to move (or the object is gone: the apply recreates it).
async fn take_over_fields<K>(api: &Api<K>, obj: &K, owner_uid: &str) -> Result<bool, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let what = format!(
        "{} {}/{name}",
        K::kind(&()),
        obj.meta().namespace.as_deref().unwrap_or_default()
    );
    let action = format!("take over the fields of {what}");
    let mut refused: Option<(Option<String>, kube::Error)> = None;
    for _ in 0..CONFLICT_TRIES {
        let Some(live) = api
            .get_opt(&name)
            .await
            .map_err(|e| Error::kube(format!("read {what}"), e))?
        else {
            return Ok(false);
        };
        let meta = live.meta();
        if let Some((version, e)) = refused.take()
            && version == meta.resource_version
        {
            return Err(Error::kube(action, e));
        }
        let owned = meta
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true) && r.uid == owner_uid && r.kind == TGW_KIND);
        if !owned {
            return Err(Error::NotOwned { what });
        }
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let Some(entries) = managed_fields::adopt(
            meta.managed_fields.as_deref().unwrap_or_default(),
            owner_uid,
            &K::api_version(&()),
            &now,
        ) else {
            return Ok(false);
        };
        let ops = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta.resource_version},
            {"op": "replace", "path": "/metadata/managedFields", "value": entries},
        ]);
        let patch =
            Patch::<()>::Json(serde_json::from_value(ops).map_err(|source| Error::Encode {
                what: format!("{what} managedFields patch"),
                source,
            })?);
        match api.patch(&name, &named_manager(), &patch).await {
            Ok(_) => return Ok(true),
            Err(e) if stale_view(&e) => refused = Some((meta.resource_version.clone(), e)),
            Err(e) => return Err(Error::kube(action, e)),
        }
    }
    Err(Error::Conflict {
        what,
        tries: CONFLICT_TRIES,
    })
}

async fn ssa<K>(api: Api<K>, obj: &K, force: bool) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let mut pp = PatchParams::apply(FIELD_MANAGER);
    pp.force = force;
    let request = Request::new(api.resource_url());
    unread(
        &api.into_client(),
        request.patch(&name, &pp, &Patch::Apply(obj)),
        "patch",
    )
    .await
    .map_err(|e| {
        Error::kube(
            format!(
                "server-side apply of {} {}/{name}",
                K::kind(&()),
                obj.meta().namespace.as_deref().unwrap_or_default()
            ),
            e,
        )
    })?;
    Ok(())
}

/// Send one write and leave the object the API server answers with unread: nothing here
/// reads it (the watches deliver every written object to the caches), and decoding it (a
/// Gateway of 42 listeners, a route with its status, each with its managedFields) was ~5 %
/// of `serve`'s CPU in a cold start (perf, 300 x 40). Errors are the API's, as
/// [`Api::patch`] gives them.
async fn unread(
    client: &kube::Client,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    verb: &'static str,
) -> Result<(), kube::Error> {
    let mut request = request.map_err(kube::Error::BuildRequest)?;
    // The verb names the request in the client's trace spans, as `Api`'s methods do.
    request.extensions_mut().insert(verb);
    client.request_text(request).await.map(drop)
}

async fn delete<K>(api: Api<K>, name: &str, dp: &DeleteParams) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, dp).await {
        Ok(_) => Ok(()),
        // Already gone, or replaced by another object (uid precondition): nothing of ours.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The label change re-checked on the live object, conditional on its resourceVersion.
async fn namespace(ctx: &Context, w: &NamespaceWrite) -> Result<Option<&'static str>, Error> {
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let name = w.namespace();
    for _ in 0..CONFLICT_TRIES {
        let Some(ns) = api
            .get_opt(name)
            .await
            .map_err(|e| Error::kube(format!("read namespace {name}"), e))?
        else {
            return Ok(None);
        };
        let label = ns
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(GATEWAY_LABEL))
            .cloned();
        let annotation = |key: &str| {
            ns.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .cloned()
        };
        let Some(patch) = namespace_patch(
            w,
            label.as_deref(),
            annotation(ATTACHED_BY_ANNOTATION).as_deref(),
            annotation(PLATFORM_ATTACHED_BY_ANNOTATION).as_deref(),
        ) else {
            return Ok(None);
        };
        let mut patch = json!({ "metadata": patch });
        patch["metadata"]["resourceVersion"] = json!(ns.metadata.resource_version);
        let request =
            Request::new(api.resource_url()).patch(name, &named_manager(), &Patch::Merge(&patch));
        match unread(&ctx.client, request, "patch").await {
            Ok(()) => return Ok(Some("label")),
            Err(e) if Error::is_conflict(&e) => continue,
            Err(e) => return Err(Error::kube(format!("label namespace {name}"), e)),
        }
    }
    Err(Error::Conflict {
        what: format!("namespace {name}"),
        tries: CONFLICT_TRIES,
    })
}

/// The metadata merge patch of a namespace write, from the live gateway label and the two
/// attached-by annotations (ours, the platform controller's: equivalent marks, SPEC §3.8);
/// `None` when nothing is to change.
/// - Attach: the label and our annotation set to the gateway, the platform's annotation
///   removed (ours replaces it).
/// - Detach, only when the mark (ours, else the platform's) names the gateway: each of the
///   two annotations that names it removed, the label removed only while it still names it.
fn namespace_patch(
    w: &NamespaceWrite,
    label: Option<&str>,
    ours: Option<&str>,
    platform: Option<&str>,
) -> Option<Value> {
    match w {
        NamespaceWrite::Attach { gateway, .. } => {
            let g = Some(gateway.as_str());
            if label == g && ours == g && platform.is_none() {
                return None;
            }
            let mut annotations = json!({ ATTACHED_BY_ANNOTATION: gateway });
            if platform.is_some() {
                annotations[PLATFORM_ATTACHED_BY_ANNOTATION] = Value::Null;
            }
            Some(json!({"labels": {GATEWAY_LABEL: gateway}, "annotations": annotations}))
        }
        NamespaceWrite::Detach { gateway, .. } => {
            let g = Some(gateway.as_str());
            if ours.or(platform) != g {
                return None;
            }
            let mut labels = json!({});
            if label == g {
                labels[GATEWAY_LABEL] = Value::Null;
            }
            let mut annotations = json!({});
            for (key, value) in [
                (ATTACHED_BY_ANNOTATION, ours),
                (PLATFORM_ATTACHED_BY_ANNOTATION, platform),
            ] {
                if value == g {
                    annotations[key] = Value::Null;
                }
            }
            Some(json!({"labels": labels, "annotations": annotations}))
        }
    }
}

fn parent_ref_json(p: &ParentRef) -> Value {
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: &Option<String>| {
        if let Some(v) = v {
            m.insert(k.to_string(), Value::String(v.clone()));
        }
    };
    put("group", &p.group);
    put("kind", &p.kind);
    put("namespace", &p.namespace);
    put("sectionName", &p.section_name);
    m.insert("name".into(), Value::String(p.name.clone()));
    if let Some(port) = p.port {
        m.insert("port".into(), Value::from(port));
    }
    Value::Object(m)
}

fn entry_json(e: &RouteParentStatus) -> Result<Value, Error> {
    Ok(json!({
        "parentRef": parent_ref_json(&e.parent_ref),
        "controllerName": CONTROLLER_NAME,
        "conditions": serde_json::to_value(e.conditions.to_vec()).map_err(|source| Error::Encode {
            what: "route status conditions".into(),
            source,
        })?,
    }))
}

/// Is this `status.parents` entry ours for the Gateway of `w`?
fn ours_for(entry: &Value, route_ns: &str, w: &RouteStatusWrite) -> bool {
    if entry.get("controllerName").and_then(Value::as_str) != Some(CONTROLLER_NAME) {
        return false;
    }
    let p = entry.get("parentRef").unwrap_or(&Value::Null);
    let s = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_string);
    let pr = ParentRef {
        group: s("group"),
        kind: s("kind"),
        namespace: s("namespace"),
        name: s("name").unwrap_or_default(),
        section_name: None,
        port: None,
    };
    pr.targets(route_ns, &w.gateway_namespace, &w.gateway_name)
}

/// The new `status.parents`: others' entries verbatim and in place, ours for this Gateway
/// replaced by `w.entries` (appended) as far as the API's 32 entries allow. The plan already
/// cut `w.entries` to the room it saw; the route read here may hold more foreign entries than
/// the watched one did (or the plan had no exact view of them), and a list past the bound is
/// refused with 422, so the bound is kept here too: our later entries give way. `None` when
/// nothing changes.
pub fn merged_parents(
    current: &[Value],
    w: &RouteStatusWrite,
) -> Result<Option<Vec<Value>>, Error> {
    let mut out: Vec<Value> = current
        .iter()
        .filter(|e| !ours_for(e, &w.namespace, w))
        .cloned()
        .collect();
    let room = super::status::MAX_ROUTE_PARENTS.saturating_sub(out.len());
    if w.entries.len() > room {
        tracing::warn!(route = %format!("{} {}/{}", w.kind.as_str(), w.namespace, w.name),
            entries = w.entries.len(), room,
            "status.parents has less room than planned; our later entries are left out");
    }
    for e in w.entries.iter().take(room) {
        out.push(entry_json(e)?);
    }
    Ok((out != current).then_some(out))
}

async fn route_status(ctx: &Context, w: &RouteStatusWrite) -> Result<Option<&'static str>, Error> {
    let ar = match w.kind {
        RouteKind::HttpRoute => ctx.caches.http_route.clone(),
        RouteKind::TlsRoute => ctx
            .caches
            .tls_route
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(Error::NotServed { kind: "TLSRoute" })?,
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &w.namespace, &ar);
    let what = format!("{} {}/{} status", w.kind.as_str(), w.namespace, w.name);
    if let Some(edit) = &w.in_place {
        // One request: the edit applies only to the route as watched (the resourceVersion
        // test); a route changed since then is read and written below.
        let patch = Patch::<()>::Json(
            serde_json::from_value(parents_patch(edit, &w.entries)?).map_err(|source| {
                Error::Encode {
                    what: format!("{what} patch"),
                    source,
                }
            })?,
        );
        let request = Request::new(api.resource_url()).patch_subresource(
            "status",
            &w.name,
            &named_manager(),
            &patch,
        );
        match unread(&ctx.client, request, "patch_status").await {
            Ok(()) => return Ok(Some("status")),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
            Err(e) if stale_view(&e) => {
                tracing::debug!(route = %what, "route changed since it was watched; reading it");
            }
            Err(e) => return Err(Error::kube(format!("write {what}"), e)),
        }
    }
    for _ in 0..CONFLICT_TRIES {
        let Some(mut obj) = api
            .get_opt(&w.name)
            .await
            .map_err(|e| Error::kube(format!("read {what}"), e))?
        else {
            return Ok(None);
        };
        let current: Vec<Value> = obj
            .data
            .get("status")
            .and_then(|s| s.get("parents"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let Some(parents) = merged_parents(&current, w)? else {
            return Ok(None);
        };
        let status = obj
            .data
            .as_object_mut()
            .map(|m| m.entry("status").or_insert_with(|| json!({})));
        match status {
            Some(Value::Object(s)) => {
                s.insert("parents".into(), Value::Array(parents));
            }
            _ => {
                obj.data["status"] = json!({ "parents": parents });
            }
        }
        obj.metadata.managed_fields = None;
        // The replace is conditional on the resourceVersion in `obj` (the one just read).
        let body = serde_json::to_vec(&obj).map_err(|source| Error::Encode {
            what: format!("{what} body"),
            source,
        })?;
        let request = Request::new(api.resource_url()).replace_subresource(
            "status",
            &w.name,
            &PostParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PostParams::default()
            },
            body,
        );
        match unread(&ctx.client, request, "replace_status").await {
            Ok(()) => return Ok(Some("status")),
            Err(e) if Error::is_conflict(&e) => continue,
            Err(e) => return Err(Error::kube(format!("write {what}"), e)),
        }
    }
    Err(Error::Conflict {
        what,
        tries: CONFLICT_TRIES,
    })
}

/// A JSON Patch that turns the watched `status.parents` into [`merged_parents`]'s result:
/// test the resourceVersion, remove our entries for this Gateway (from the highest index
/// down), append the new ones.
pub fn parents_patch(edit: &InPlaceEdit, entries: &[RouteParentStatus]) -> Result<Value, Error> {
    let mut ops = vec![json!({
        "op": "test", "path": "/metadata/resourceVersion", "value": edit.resource_version,
    })];
    let new = entries
        .iter()
        .map(entry_json)
        .collect::<Result<Vec<_>, _>>()?;
    match (edit.status, edit.parents) {
        (_, Some(_)) => {
            ops.extend(
                edit.remove_at
                    .iter()
                    .map(|i| json!({"op": "remove", "path": format!("/status/parents/{i}")})),
            );
            ops.extend(
                new.into_iter()
                    .map(|e| json!({"op": "add", "path": "/status/parents/-", "value": e})),
            );
        }
        (true, None) => ops.push(json!({"op": "add", "path": "/status/parents", "value": new})),
        (false, None) => {
            ops.push(json!({"op": "add", "path": "/status", "value": {"parents": new}}))
        }
    }
    Ok(Value::Array(ops))
}

/// The API server's answer when a patch's `test` failed or the object moved on: the view the
/// edit was computed from is stale.
fn stale_view(e: &kube::Error) -> bool {
    Error::is_conflict(e) || matches!(e, kube::Error::Api(s) if s.code == 422 || s.code == 400)
}

/// Server-side apply of the whole status (we are its only writer).
pub async fn status(
    ctx: &Context,
    namespace: &str,
    name: &str,
    s: &TenantGatewayStatus,
) -> Result<(), Error> {
    let api: Api<TenantGateway> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = json!({"apiVersion": TGW_API_VERSION, "kind": TGW_KIND, "status": s});
    let request = Request::new(api.resource_url()).patch_subresource(
        "status",
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    );
    unread(&ctx.client, request, "patch_status")
        .await
        .map_err(|e| Error::kube(format!("write TenantGateway {namespace}/{name} status"), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;

    fn write(entries: Vec<RouteParentStatus>) -> RouteStatusWrite {
        RouteStatusWrite {
            kind: RouteKind::HttpRoute,
            namespace: "tenant-a".into(),
            name: "r".into(),
            resource_version: Some("1".into()),
            gateway_namespace: "tenant-root".into(),
            gateway_name: "gw".into(),
            entries,
            in_place: None,
        }
    }

    fn ours() -> RouteParentStatus {
        RouteParentStatus {
            parent_ref: ParentRef {
                group: Some("gateway.networking.k8s.io".into()),
                kind: Some("Gateway".into()),
                namespace: Some("tenant-root".into()),
                name: "gw".into(),
                section_name: None,
                port: None,
            }
            .into(),
            conditions: vec![Condition {
                type_: "Accepted".into(),
                status: "True".into(),
                reason: "Accepted".into(),
                message: "ok".into(),
                observed_generation: Some(1),
                last_transition_time: Time(Timestamp::from_second(100).expect("ts")),
            }]
            .into(),
        }
    }

    #[test]
    fn other_controllers_entries_are_kept_verbatim() {
        let cilium = json!({"controllerName": "io.cilium/gateway-controller",
            "parentRef": {"name": "gw", "namespace": "tenant-root"},
            "conditions": [{"type": "Accepted", "status": "True", "extra": 1}]});
        let old_ours = json!({"controllerName": CONTROLLER_NAME,
            "parentRef": {"name": "gw", "namespace": "tenant-root"}, "conditions": []});
        let ours_other_gw = json!({"controllerName": CONTROLLER_NAME,
            "parentRef": {"name": "gw2", "namespace": "tenant-root"}, "conditions": []});
        let current = vec![cilium.clone(), old_ours, ours_other_gw.clone()];
        let out = merged_parents(&current, &write(vec![ours()]))
            .expect("encodes")
            .expect("changed");
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], cilium);
        assert_eq!(out[1], ours_other_gw);
        assert_eq!(out[2]["controllerName"], CONTROLLER_NAME);
        assert_eq!(out[2]["conditions"][0]["reason"], "Accepted");
        assert_eq!(
            out[2]["conditions"][0]["lastTransitionTime"],
            "1970-01-01T00:01:40Z"
        );
        // Removing ours leaves the others.
        let out = merged_parents(&current, &write(vec![]))
            .expect("encodes")
            .expect("changed");
        assert_eq!(out, vec![cilium, ours_other_gw]);
    }

    /// The route read at write time may hold more foreign entries than the plan saw: the
    /// merge still never goes past 32, others' entries first, ours in order after them.
    #[test]
    fn merge_keeps_the_bound_of_32_entries() {
        let cilium = |i: usize| {
            json!({"controllerName": "io.cilium/gateway-controller",
                "parentRef": {"name": format!("gw{i}"), "namespace": "tenant-root"},
                "conditions": []})
        };
        let mut second = ours();
        second.parent_ref.section_name = Some("https-x".into());
        let old_ours = json!({"controllerName": CONTROLLER_NAME,
            "parentRef": {"name": "gw", "namespace": "tenant-root"}, "conditions": []});
        // (foreign entries, our old entry present, entries written, entries of ours kept)
        let cases: [(usize, bool, usize, usize); 6] = [
            (0, false, 2, 2),
            (30, false, 2, 2),
            (31, false, 2, 1),
            (31, true, 2, 1),
            (32, false, 2, 0),
            (32, true, 1, 0),
        ];
        for (foreign, with_old, written, kept) in cases {
            let mut current: Vec<Value> = (0..foreign).map(cilium).collect();
            if with_old {
                current.insert(0, old_ours.clone());
            }
            let entries = [ours(), second.clone()][..written].to_vec();
            let out = merged_parents(&current, &write(entries))
                .expect("encodes")
                .unwrap_or(current.clone());
            let case = format!("{foreign} foreign, old {with_old}, {written} written");
            assert!(out.len() <= 32, "{case}: {} entries", out.len());
            assert_eq!(
                out[..foreign],
                (0..foreign).map(cilium).collect::<Vec<_>>()[..],
                "{case}"
            );
            let mine: Vec<&Value> = out[foreign..].iter().collect();
            assert_eq!(mine.len(), kept, "{case}");
            if kept > 0 {
                assert!(
                    mine[0]["parentRef"].get("sectionName").is_none(),
                    "{case}: order"
                );
            }
        }
    }

    #[test]
    fn write_classes_follow_the_plan_order() {
        use crate::reconcile::labels::NamespaceWrite;
        let status = Write::Status(Default::default());
        let label = Write::Namespace(NamespaceWrite::Attach {
            namespace: "a".into(),
            gateway: "a".into(),
        });
        let route = Write::RouteStatus(write(vec![]));
        let delete = Write::Delete {
            kind: ObjectKind::Certificate,
            name: "x".into(),
            uid: None,
        };
        let order = [&delete, &label, &route, &status];
        assert!(order.windows(2).all(|w| class(w[0]) < class(w[1])));
    }

    /// The in-place edit computed from the watched layout gives exactly the read-modify-write
    /// result, whatever the mix and order of entries.
    #[test]
    fn in_place_edit_equals_read_modify_write() {
        let cilium = json!({"controllerName": "io.cilium/gateway-controller",
            "parentRef": {"name": "gw", "namespace": "tenant-root"}, "conditions": []});
        let old_ours = entry_json(&ours()).expect("encodes");
        let mut other_gw = ours();
        other_gw.parent_ref.name = "gw2".into();
        let ours_other_gw = entry_json(&other_gw).expect("encodes");
        let mut changed = ours();
        let mut c = changed.conditions.to_vec();
        c[0].reason = "HostnameConflict".into();
        changed.conditions = c.into();
        let layouts: Vec<(Value, Vec<RouteParentStatus>)> = vec![
            (json!({}), vec![]),
            (json!({"status": {}}), vec![]),
            (json!({"status": {"parents": []}}), vec![]),
            (json!({"status": {"parents": [cilium.clone()]}}), vec![]),
            (
                json!({"status": {"parents": [old_ours.clone(), cilium.clone()]}}),
                vec![ours()],
            ),
            (
                json!({"status": {"parents": [cilium.clone(), ours_other_gw.clone(),
                    old_ours.clone(), cilium.clone()]}}),
                vec![other_gw.clone(), ours()],
            ),
        ];
        for (doc, our_status) in layouts {
            for entries in [vec![], vec![changed.clone()], vec![ours(), changed.clone()]] {
                let current: Vec<Value> = doc["status"]["parents"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let ours_at: Vec<u32> = current
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e["controllerName"] == CONTROLLER_NAME)
                    .map(|(i, _)| i as u32)
                    .collect();
                let mut facts = crate::reconcile::testing::route("tenant-a", "r", &[]);
                facts.our_status = our_status.clone().into();
                facts.set_parents_layout(Some(crate::reconcile::inputs::ParentsLayout {
                    status: doc.get("status").is_some(),
                    parents: doc["status"]["parents"].as_array().map(|a| a.len() as u32),
                    ours_at: ours_at.into(),
                }));
                facts.set_resource_version(Some("5"));
                let edit = facts
                    .in_place_edit(("tenant-root", "gw"))
                    .expect("exact layout");
                let want = merged_parents(&current, &write(entries.clone())).expect("encodes");
                let mut obj = doc.clone();
                obj["metadata"] = json!({"resourceVersion": "5"});
                let patch: json_patch::Patch =
                    serde_json::from_value(parents_patch(&edit, &entries).expect("encodes"))
                        .expect("a JSON patch");
                json_patch::patch(&mut obj, &patch).expect("applies");
                let got = obj["status"]["parents"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                assert_eq!(got, want.unwrap_or(current.clone()), "{doc} -> {entries:?}");
                // A route changed since it was watched fails the test op.
                let mut moved = doc.clone();
                moved["metadata"] = json!({"resourceVersion": "6"});
                assert!(json_patch::patch(&mut moved, &patch).is_err());
            }
        }
    }

    /// The namespace writes on the live metadata, the platform controller's annotation
    /// (SPEC §3.8) counting as ours and replaced by ours.
    #[test]
    fn namespace_patches_treat_the_platform_mark_as_ours() {
        let attach = NamespaceWrite::Attach {
            namespace: "cozy-x".into(),
            gateway: "tenant-root".into(),
        };
        let detach = NamespaceWrite::Detach {
            namespace: "cozy-x".into(),
            gateway: "tenant-root".into(),
        };
        let root = Some("tenant-root");
        let bob = Some("tenant-bob");
        let (ours, plat) = (ATTACHED_BY_ANNOTATION, PLATFORM_ATTACHED_BY_ANNOTATION);
        // (case, write, label, our mark, platform mark, patch)
        let cases: Vec<(&str, &NamespaceWrite, _, _, _, Option<Value>)> = vec![
            ("attach: already ours", &attach, root, root, None, None),
            (
                "attach: fresh",
                &attach,
                None,
                None,
                None,
                Some(json!({"labels": {GATEWAY_LABEL: "tenant-root"},
                    "annotations": {ours: "tenant-root"}})),
            ),
            (
                "attach: the platform's mark is replaced",
                &attach,
                root,
                None,
                root,
                Some(json!({"labels": {GATEWAY_LABEL: "tenant-root"},
                    "annotations": {ours: "tenant-root", plat: null}})),
            ),
            (
                "attach: both marks, the platform's goes",
                &attach,
                root,
                root,
                root,
                Some(json!({"labels": {GATEWAY_LABEL: "tenant-root"},
                    "annotations": {ours: "tenant-root", plat: null}})),
            ),
            ("detach: no mark", &detach, root, None, None, None),
            ("detach: another's mark", &detach, root, bob, None, None),
            (
                "detach: the platform's mark of another",
                &detach,
                root,
                None,
                bob,
                None,
            ),
            (
                "detach: our mark",
                &detach,
                root,
                root,
                None,
                Some(json!({"labels": {GATEWAY_LABEL: null}, "annotations": {ours: null}})),
            ),
            (
                "detach: the platform's mark",
                &detach,
                root,
                None,
                root,
                Some(json!({"labels": {GATEWAY_LABEL: null}, "annotations": {plat: null}})),
            ),
            (
                "detach: the label moved on, only the marks go",
                &detach,
                bob,
                root,
                root,
                Some(json!({"labels": {}, "annotations": {ours: null, plat: null}})),
            ),
            (
                "detach: ours names us, the platform's another",
                &detach,
                root,
                root,
                bob,
                Some(json!({"labels": {GATEWAY_LABEL: null}, "annotations": {ours: null}})),
            ),
        ];
        for (case, w, label, o, p, want) in cases {
            assert_eq!(namespace_patch(w, label, o, p), want, "{case}");
        }
    }

    #[test]
    fn unchanged_parents_give_no_write() {
        let current = vec![entry_json(&ours()).expect("encodes")];
        assert_eq!(
            merged_parents(&current, &write(vec![ours()])).expect("encodes"),
            None
        );
    }

    /// The batches of a plan, each write named as the status names it.
    fn named_batches(inputs: &Inputs, writes: &[Write]) -> Vec<Vec<String>> {
        let ns = inputs.tgw.namespace.as_str();
        batches(writes)
            .into_iter()
            .map(|b| b.into_iter().map(|i| target(ns, &writes[i])).collect())
            .collect()
    }

    /// Every write in exactly one batch.
    fn assert_partition(writes: &[Write]) {
        let mut seen: Vec<usize> = batches(writes).concat();
        seen.sort_unstable();
        assert_eq!(seen, (0..writes.len()).collect::<Vec<_>>());
    }

    fn converged(w: Inputs) -> Inputs {
        crate::reconcile::testing::settle_with(w, &Default::default()).0
    }

    #[test]
    fn a_cold_start_writes_the_issuer_then_the_gateway_first_beside_its_certificates() {
        use crate::reconcile::testing::{route, world};
        let mut w = world();
        for name in ["harbor", "docs", "blog"] {
            w.routes.push(route(
                "tenant-alice",
                name,
                &[&format!("{name}.alice.example.org")],
            ));
        }
        let p = super::super::plan(&w, &Default::default());
        assert_partition(&p.writes);
        let b = named_batches(&w, &p.writes);
        assert_eq!(b[0], ["Issuer tenant-alice/gw-gateway"], "{b:#?}");
        assert_eq!(b[1][0], "Gateway tenant-alice/gw", "{b:#?}");
        let mut certs = b[1][1..].to_vec();
        certs.sort();
        assert_eq!(
            certs,
            [
                "Certificate tenant-alice/gw-blog-tls",
                "Certificate tenant-alice/gw-docs-tls",
                "Certificate tenant-alice/gw-harbor-tls"
            ],
            "{b:#?}"
        );
        // The redirect after the Gateway; the route statuses after the listeners; the status
        // last.
        assert_eq!(
            b[2..],
            [
                vec!["HTTPRoute tenant-alice/gw-http-redirect".to_string()],
                vec![
                    "HTTPRoute tenant-alice/blog status".into(),
                    "HTTPRoute tenant-alice/docs status".into(),
                    "HTTPRoute tenant-alice/harbor status".into()
                ],
                vec!["TenantGateway status".into()],
            ],
            "{b:#?}"
        );
    }

    /// A namespace label goes out after the object writes and before any route status.
    #[test]
    fn namespace_labels_run_between_the_objects_and_the_route_status() {
        use crate::reconcile::labels::NamespaceWrite;
        let mut w = crate::reconcile::testing::world();
        w.routes.push(crate::reconcile::testing::route(
            "tenant-alice",
            "harbor",
            &["harbor.alice.example.org"],
        ));
        let p = super::super::plan(&w, &Default::default());
        let mut writes = p.writes.clone();
        let label = Write::Namespace(NamespaceWrite::Attach {
            namespace: "tenant-alice-x".into(),
            gateway: "tenant-alice".into(),
        });
        // Given last, as a plan could list it: it still runs before the route status.
        writes.push(label);
        assert_partition(&writes);
        let b = named_batches(&w, &writes);
        let at = |what: &str| {
            b.iter()
                .position(|x| x.iter().any(|t| t.starts_with(what)))
                .unwrap_or_else(|| panic!("no {what} in {b:#?}"))
        };
        assert_eq!(b[at("Namespace ")], ["Namespace tenant-alice-x"], "{b:#?}");
        assert!(
            at("Namespace ") > at("HTTPRoute tenant-alice/gw-http-redirect"),
            "{b:#?}"
        );
        assert!(
            at("Namespace ") < at("HTTPRoute tenant-alice/harbor status"),
            "{b:#?}"
        );
        assert_eq!(b[b.len() - 1], ["TenantGateway status"], "{b:#?}");
    }

    #[test]
    fn a_route_added_writes_its_listener_first_and_its_certificate_beside_it() {
        use crate::reconcile::testing::{route, world};
        let mut w = world();
        w.routes.push(route(
            "tenant-alice",
            "harbor",
            &["harbor.alice.example.org"],
        ));
        let mut w = converged(w);
        w.routes
            .push(route("tenant-alice", "docs", &["docs.alice.example.org"]));
        let p = super::super::plan(&w, &Default::default());
        assert_partition(&p.writes);
        let b = named_batches(&w, &p.writes);
        assert_eq!(
            b,
            [
                vec![
                    "Gateway tenant-alice/gw".to_string(),
                    "Certificate tenant-alice/gw-docs-tls".into()
                ],
                vec!["HTTPRoute tenant-alice/docs status".into()],
                vec!["TenantGateway status".into()],
            ]
        );
    }
}
