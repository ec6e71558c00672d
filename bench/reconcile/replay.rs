//! `reconcile-load replay`: the API server's own CPU for a cold start's writes, measured by
//! issuing those same writes again (SPEC §8's floor, `bench/reconcile/run` step 4).
//!
//! Run on a world `serve` has converged, after it exited. It reads back what the cold start
//! wrote — the objects a TenantGateway owns (controller ownerReference), our entries in
//! route status, the namespaces we marked, each TenantGateway's finalizer and status —
//! undoes all of it, waits until the API server is idle, and then writes it again the way a
//! client with nothing to decide would: the same verbs and bodies as `serve`'s writes
//! (`src/reconcile/apply.rs`), no reads but the namespace's GET that `serve` does too,
//! `--concurrency` in flight. The control plane's CPU over those writes is the floor; it is
//! measured on the same API server, with the same world, as the cold start, and amortises
//! the API server's garbage collections over as many writes as the cold start did (a few
//! hundred writes of one kind, step 5, catch one collection or none: 2–4× apart between
//! runs, bench/RESULTS.md session 32).
//!
//! What differs from the cold start, each on the floor's side: no `serve` watches the
//! writes (the API server sends it every event; ~3 % of its CPU, session 32's profile), no
//! initial lists, and the replayed objects' bodies are read back with the API server's
//! defaults filled in (slightly larger than `serve`'s own).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tenant_gateway::platform::{
    ATTACHED_BY_ANNOTATION, CONTROLLER_NAME, FIELD_MANAGER, FINALIZER, GATEWAY_LABEL,
    MANAGED_BY_LABEL, MANAGED_BY_VALUE,
};

use crate::{Args, ar, tree_cpu_ms};

type Write = Pin<Box<dyn Future<Output = Result<&'static str, String>> + Send>>;

/// One owned object as `serve` applies it: identity, marks, ownerReferences and spec.
fn apply_body(o: &DynamicObject) -> Value {
    let m = &o.metadata;
    let mut meta = json!({"name": m.name, "namespace": m.namespace});
    if let Some(l) = &m.labels {
        meta["labels"] = json!(l);
    }
    if let Some(a) = &m.annotations {
        meta["annotations"] = json!(a);
    }
    if let Some(r) = &m.owner_references {
        meta["ownerReferences"] = json!(r);
    }
    let t = o.types.clone().unwrap_or_default();
    json!({"apiVersion": t.api_version, "kind": t.kind, "metadata": meta,
        "spec": o.data.get("spec").cloned().unwrap_or(Value::Null)})
}

fn owned_by_tgw(o: &DynamicObject) -> bool {
    o.metadata.owner_references.iter().flatten().any(|r| {
        r.controller == Some(true)
            && r.kind == "TenantGateway"
            && r.api_version.starts_with("gateway.cozystack.io/")
    })
}

async fn list_all(api: &Api<DynamicObject>, lp: ListParams) -> Result<Vec<DynamicObject>, String> {
    let mut out = Vec::new();
    let mut lp = lp.limit(500);
    loop {
        let page = api.list(&lp).await.map_err(|e| format!("list: {e}"))?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        out.extend(page.items);
        match next {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(out),
        }
    }
}

fn name_ns(o: &DynamicObject) -> (String, String) {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

fn split_parents(route: &DynamicObject) -> (Vec<Value>, Vec<Value>) {
    route.data["status"]["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .cloned()
        .partition(|p| p["controllerName"] == CONTROLLER_NAME)
}

/// Our entries written the way `serve` writes into a route it saw (`apply::parents_patch`):
/// conditional on the resourceVersion, appended after the other controllers' entries, or
/// the whole `status` when there is none.
fn status_patch(rv: &str, others: bool, ours: &[Value]) -> Result<json_patch::Patch, String> {
    let mut ops = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})];
    if others {
        ops.extend(
            ours.iter()
                .map(|e| json!({"op": "add", "path": "/status/parents/-", "value": e})),
        );
    } else {
        ops.push(json!({"op": "add", "path": "/status", "value": {"parents": ours}}));
    }
    serde_json::from_value(Value::Array(ops)).map_err(|e| format!("status patch: {e}"))
}

/// serve's writes that are not server-side apply carry its field manager too.
fn named_manager() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Wait until the control plane's process tree uses under 0.3 cores for 3 s in a row (the
/// teardown's deletes, the garbage collector after them), at most `limit`.
async fn settle(cp: u32, limit: Duration) -> f64 {
    let t0 = Instant::now();
    let mut quiet = 0;
    while quiet < 3 && t0.elapsed() < limit {
        let c0 = tree_cpu_ms(cp);
        tokio::time::sleep(Duration::from_secs(1)).await;
        quiet = if tree_cpu_ms(cp) - c0 < 300 {
            quiet + 1
        } else {
            0
        };
    }
    t0.elapsed().as_secs_f64()
}

async fn run(writes: Vec<Write>, concurrency: usize) -> (BTreeMap<&'static str, usize>, usize) {
    futures::stream::iter(writes)
        .buffer_unordered(concurrency.max(1))
        .fold(
            (BTreeMap::new(), 0usize),
            |(mut kinds, mut failed), r| async move {
                match r {
                    Ok(kind) => *kinds.entry(kind).or_insert(0) += 1,
                    Err(e) => {
                        if failed < 5 {
                            eprintln!("replay: {e}");
                        }
                        failed += 1;
                    }
                }
                (kinds, failed)
            },
        )
        .await
}

pub async fn replay(client: &Client, a: &Args) -> Result<(), String> {
    undo_then(client, a, true).await
}

/// Steps 1 and 2 alone: the world as it was before the cold start, on an API server that
/// has held it converged (`bench/reconcile/run`'s step 4b starts a new `serve` on it).
pub async fn undo(client: &Client, a: &Args) -> Result<(), String> {
    undo_then(client, a, false).await
}

async fn undo_then(client: &Client, a: &Args, rewrite: bool) -> Result<(), String> {
    let tgw_ar = ar("gateway.cozystack.io", "v1alpha1", "TenantGateway");
    let ns_ar = ar("", "v1", "Namespace");
    let route_ar = ar("gateway.networking.k8s.io", "v1", "HTTPRoute");
    let owned_ars = [
        ("Issuer", ar("cert-manager.io", "v1", "Issuer")),
        ("Gateway", ar("gateway.networking.k8s.io", "v1", "Gateway")),
        ("Certificate", ar("cert-manager.io", "v1", "Certificate")),
        ("HTTPRoute", route_ar.clone()),
    ];
    let ns_of = |ar: &kube::api::ApiResource, ns: &str| {
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar)
    };

    // 1. What the cold start left.
    let managed = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
    let mut owned = Vec::new();
    for (kind, ar) in &owned_ars {
        let all = list_all(&Api::all_with(client.clone(), ar), managed.clone()).await?;
        owned.extend(
            all.into_iter()
                .filter(owned_by_tgw)
                .map(|o| (*kind, ar.clone(), o)),
        );
    }
    let routes: Vec<(DynamicObject, Vec<Value>, Vec<Value>)> = list_all(
        &Api::all_with(client.clone(), &route_ar),
        ListParams::default(),
    )
    .await?
    .into_iter()
    .filter_map(|r| {
        let (ours, others) = split_parents(&r);
        (!ours.is_empty()).then_some((r, ours, others))
    })
    .collect();
    let namespaces: Vec<(String, String, String)> = list_all(
        &Api::all_with(client.clone(), &ns_ar),
        ListParams::default().labels(GATEWAY_LABEL),
    )
    .await?
    .into_iter()
    .filter_map(|n| {
        let mark = n
            .metadata
            .annotations
            .as_ref()?
            .get(ATTACHED_BY_ANNOTATION)?
            .clone();
        let label = n.metadata.labels.as_ref()?.get(GATEWAY_LABEL)?.clone();
        Some((n.metadata.name.clone().unwrap_or_default(), label, mark))
    })
    .collect();
    let tgws: Vec<DynamicObject> = list_all(
        &Api::all_with(client.clone(), &tgw_ar),
        ListParams::default(),
    )
    .await?
    .into_iter()
    .filter(|t| {
        t.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == FINALIZER)
    })
    .collect();
    eprintln!(
        "replay: read back {} owned objects, {} routes' status, {} namespaces, {} TenantGateways",
        owned.len(),
        routes.len(),
        namespaces.len(),
        tgws.len()
    );

    // 2. Undo it (not measured).
    let t_down = Instant::now();
    let mut undo: Vec<Write> = Vec::new();
    for (_, ar, o) in &owned {
        let (ns, name) = name_ns(o);
        let api = ns_of(ar, &ns);
        undo.push(Box::pin(async move {
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => Ok("delete"),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok("delete"),
                Err(e) => Err(format!("delete {ns}/{name}: {e}")),
            }
        }));
    }
    // The route's resourceVersion after the undo: the replay's patch is conditional on it,
    // as `serve`'s is on the one it watched.
    let route_rvs = std::sync::Arc::new(std::sync::Mutex::new(
        BTreeMap::<(String, String), String>::new(),
    ));
    // Owned routes (the redirect routes) are deleted above; their status comes back after
    // their create, so it is looked up by key there.
    let owned_routes: std::collections::HashSet<(String, String)> = owned
        .iter()
        .filter(|(k, _, _)| *k == "HTTPRoute")
        .map(|(_, _, o)| name_ns(o))
        .collect();
    let mut owned_route_status = BTreeMap::new();
    for (r, ours, others) in &routes {
        let (ns, name) = name_ns(r);
        if owned_routes.contains(&(ns.clone(), name.clone())) {
            owned_route_status.insert((ns, name), ours.clone());
            continue;
        }
        let api = ns_of(&route_ar, &ns);
        let ops = if others.is_empty() {
            json!([{"op": "remove", "path": "/status"}])
        } else {
            json!([{"op": "replace", "path": "/status/parents", "value": others}])
        };
        let rvs = route_rvs.clone();
        undo.push(Box::pin(async move {
            let p: json_patch::Patch = serde_json::from_value(ops).map_err(|e| e.to_string())?;
            let made = api
                .patch_status(&name, &PatchParams::default(), &Patch::<()>::Json(p))
                .await
                .map_err(|e| format!("undo status {ns}/{name}: {e}"))?;
            let rv = made.metadata.resource_version.unwrap_or_default();
            rvs.lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((ns, name), rv);
            Ok("route status")
        }));
    }
    for (name, _, _) in &namespaces {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ns_ar);
        let name = name.clone();
        undo.push(Box::pin(async move {
            let p = json!({"metadata": {"labels": {GATEWAY_LABEL: null},
                "annotations": {ATTACHED_BY_ANNOTATION: null}}});
            api.patch(&name, &named_manager(), &Patch::Merge(&p))
                .await
                .map(|_| "namespace")
                .map_err(|e| format!("undo namespace {name}: {e}"))
        }));
    }
    for t in &tgws {
        let (ns, name) = name_ns(t);
        let api = ns_of(&tgw_ar, &ns);
        let finalizers: Vec<String> = t.metadata.finalizers.clone().unwrap_or_default();
        let others: Vec<&String> = finalizers.iter().filter(|f| *f != FINALIZER).collect();
        let ops = if others.is_empty() {
            json!([{"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                   {"op": "remove", "path": "/metadata/finalizers"}])
        } else {
            json!([{"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                   {"op": "replace", "path": "/metadata/finalizers", "value": others}])
        };
        undo.push(Box::pin(async move {
            let p: json_patch::Patch = serde_json::from_value(ops).map_err(|e| e.to_string())?;
            api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(p))
                .await
                .map_err(|e| format!("undo finalizer {ns}/{name}: {e}"))?;
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": null})),
            )
            .await
            .map_err(|e| format!("undo status {ns}/{name}: {e}"))?;
            Ok("TenantGateway")
        }));
    }
    let undone = undo.len();
    let (_, undo_failed) = run(undo, a.concurrency).await;
    if undo_failed > 0 {
        return Err(format!("{undo_failed} writes of the undo failed"));
    }
    // A delete without finalizers removes the object before it answers (none of these
    // carries one: no cert-manager or Gateway controller runs here); checked anyway.
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    for (kind, ar) in &owned_ars {
        let api = Api::<DynamicObject>::all_with(client.clone(), ar);
        while !api
            .list_metadata(&managed.clone().limit(1))
            .await
            .map_err(|e| format!("list {kind}: {e}"))?
            .items
            .is_empty()
        {
            if Instant::now() > deadline {
                return Err(format!("{kind}s still there after the undo"));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let teardown_s = t_down.elapsed().as_secs_f64();
    let settle_s = settle(a.cp_pid, Duration::from_secs(120)).await;
    if !rewrite {
        println!(
            "{{\"undone\": {undone}, \"teardown_s\": {teardown_s:.1}, \"settle_s\": {settle_s:.1}}}"
        );
        return Ok(());
    }

    // 3. The same writes again, measured.
    let mut writes: Vec<Write> = Vec::new();
    let ssa = PatchParams::apply(FIELD_MANAGER);
    for t in &tgws {
        let (ns, name) = name_ns(t);
        let api = ns_of(&tgw_ar, &ns);
        let others: Vec<String> = t
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        // kube-runtime's finalizer helper: test the list, add ours.
        let ops = if others.is_empty() {
            json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                   {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}])
        } else {
            json!([{"op": "test", "path": "/metadata/finalizers", "value": others},
                   {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}])
        };
        writes.push(Box::pin(async move {
            let p: json_patch::Patch = serde_json::from_value(ops).map_err(|e| e.to_string())?;
            api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(p))
                .await
                .map(|_| "finalizer")
                .map_err(|e| format!("finalizer {ns}/{name}: {e}"))
        }));
    }
    for (kind, ar, o) in &owned {
        let (ns, name) = name_ns(o);
        let api = ns_of(ar, &ns);
        let body = apply_body(o);
        let (ssa, named) = (ssa.clone(), named_manager());
        // An owned route with our status entry (the redirect route): its status after it.
        let status = match *kind {
            "HTTPRoute" => owned_route_status.get(&(ns.clone(), name.clone())).cloned(),
            _ => None,
        };
        let kind = *kind;
        writes.push(Box::pin(async move {
            let made = api
                .patch(&name, &ssa, &Patch::Apply(&body))
                .await
                .map_err(|e| format!("apply {kind} {ns}/{name}: {e}"))?;
            if let Some(ours) = status {
                let rv = made.metadata.resource_version.unwrap_or_default();
                let p = status_patch(&rv, false, &ours)?;
                api.patch_status(&name, &named, &Patch::<()>::Json(p))
                    .await
                    .map_err(|e| format!("status {ns}/{name}: {e}"))?;
            }
            Ok(kind)
        }));
    }
    for (name, label, mark) in &namespaces {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ns_ar);
        let (name, label, mark) = (name.clone(), label.clone(), mark.clone());
        writes.push(Box::pin(async move {
            let cur = api
                .get(&name)
                .await
                .map_err(|e| format!("namespace {name}: {e}"))?;
            let p = json!({"metadata": {"resourceVersion": cur.metadata.resource_version,
                "labels": {GATEWAY_LABEL: label}, "annotations": {ATTACHED_BY_ANNOTATION: mark}}});
            api.patch(&name, &named_manager(), &Patch::Merge(&p))
                .await
                .map(|_| "namespace")
                .map_err(|e| format!("namespace {name}: {e}"))
        }));
    }
    let rvs = route_rvs.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (r, ours, others) in &routes {
        let key = name_ns(r);
        let Some(rv) = rvs.get(&key) else { continue };
        let api = ns_of(&route_ar, &key.0);
        let p = status_patch(rv, !others.is_empty(), ours)?;
        writes.push(Box::pin(async move {
            api.patch_status(&key.1, &named_manager(), &Patch::<()>::Json(p))
                .await
                .map(|_| "route status")
                .map_err(|e| format!("status {}/{}: {e}", key.0, key.1))
        }));
    }
    for t in &tgws {
        let Some(status) = t.data.get("status").cloned() else {
            continue;
        };
        let (ns, name) = name_ns(t);
        let api = ns_of(&tgw_ar, &ns);
        let body = json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway", "status": status});
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        writes.push(Box::pin(async move {
            api.patch_status(&name, &pp, &Patch::Apply(&body))
                .await
                .map(|_| "TenantGateway status")
                .map_err(|e| format!("status {ns}/{name}: {e}"))
        }));
    }
    let count = writes.len();
    // This client's own CPU beside the control plane's: what a client with nothing to decide
    // spends on the same writes (TLS, JSON, the kube client), to hold `serve`'s CPU against.
    let me = std::process::id();
    let (t0, c0, m0) = (Instant::now(), tree_cpu_ms(a.cp_pid), tree_cpu_ms(me));
    let (kinds, failed) = run(writes, a.concurrency).await;
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), tree_cpu_ms(a.cp_pid) - c0);
    let client_cpu = tree_cpu_ms(me) - m0;
    // Redirect routes' status writes ride with their create: one more write each.
    let status_with_create = owned_route_status.len();
    println!(
        "{{\"writes\": {}, \"failed\": {failed}, \"by_kind\": {}, \"concurrency\": {}, \"wall_s\": {wall:.1}, \"cp_cpu_ms\": {cpu}, \"client_cpu_ms\": {client_cpu}, \"teardown_s\": {teardown_s:.1}, \"settle_s\": {settle_s:.1}}}",
        count + status_with_create,
        serde_json::to_string(&kinds).unwrap_or_default(),
        a.concurrency,
    );
    Ok(())
}
