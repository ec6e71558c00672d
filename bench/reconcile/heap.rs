//! What the shared watches keep, measured: heap bytes held by each cache once it holds a dumped
//! world (`kubectl get … -o json` of the bench world), counted by dhat (exact live bytes, not
//! RSS), and the peak while one kind is decoded. Each kind goes through the functions its
//! watch task calls (decode, strip, project, cache), so the numbers follow the code.
//!
//!   reconcile-heap DIR   (DIR holds namespaces.json, httproutes.json, certificates.json,
//!                         gateways.json, issuers.json, tenantgateways.json)
//!   reconcile-heap --synth N1,N2,…   (the per-route caches alone, filled with N routes shaped
//!                         as `bench/reconcile/run` writes them, 40 per TenantGateway, each with
//!                         the status entry the reconciler gives it, its Certificate, and the
//!                         Gateway of each 40 as the reconciler renders it; the marginal bytes
//!                         of a route are the difference of two sizes, measured in one process)
//!   reconcile-heap --synth-cold N1,N2,…   (the same routes as a cold world has them: no
//!                         status yet)

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

mod holder;

use holder::{Holder, Kind};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// `--synth-cold`: the synthetic routes have no status.
static COLD: AtomicBool = AtomicBool::new(false);

fn items(dir: &Path, file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| {
        eprintln!("{file}: {e}");
        std::process::exit(2)
    });
    let list: serde_json::Value = serde_json::from_str(&text).expect("a kubectl -o json list");
    list["items"]
        .as_array()
        .map(|a| a.iter().map(|o| o.to_string()).collect())
        .unwrap_or_default()
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// An HTTPRoute of `bench/reconcile/run`'s world as the API server holds it once reconciled:
/// route `r` of TenantGateway `i` (namespace `tenant-b{i}`, apex `b{i}.example.org`).
fn synth_route(i: usize, r: usize) -> String {
    let ns = format!("tenant-b{i:04}");
    let host = format!("h{r:02}.b{i:04}.example.org");
    let mut route = serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": format!("r{r:02}"), "namespace": ns, "generation": 1,
            "resourceVersion": format!("{}", 100_000 + i * 40 + r),
            "creationTimestamp": "2026-12-01T15:15:00Z",
            "uid": format!("7c3a1e52-0b4d-4f8e-9a6b-{:012x}", i * 40 + r)},
        "spec": {"parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                "name": "gw"}],
            "hostnames": [host.clone()],
            "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]},
        "status": {"parents": [{
            "controllerName": tenant_gateway::platform::CONTROLLER_NAME,
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                "observedGeneration": 1, "lastTransitionTime": "2026-12-01T15:16:02Z",
                "message": format!("hostname(s) \"{host}\" served by TenantGateway {ns}/gw")}]
        }]}
    });
    if COLD.load(Ordering::Relaxed) {
        route.as_object_mut().map(|o| o.remove("status"));
    }
    route.to_string()
}

/// What the reconciler renders for TenantGateway `i` (namespace `tenant-b{i}`, http01, the
/// spec as `bench/reconcile/run` writes it: an apex only) with its 40 routes' hostnames; the
/// last one rendered is kept, as the objects of one TenantGateway are made one after another.
fn rendered(i: usize) -> tenant_gateway::reconcile::render::Desired {
    use std::cell::RefCell;
    use tenant_gateway::reconcile::{Options, inputs::TgwFacts, render};
    thread_local! {
        static LAST: RefCell<Option<(usize, render::Desired)>> = const { RefCell::new(None) };
    }
    if let Some(d) =
        LAST.with_borrow(|l| l.as_ref().filter(|(j, _)| *j == i).map(|(_, d)| d.clone()))
    {
        return d;
    }
    let ns = format!("tenant-b{i:04}");
    let tgw = TgwFacts {
        namespace: ns.clone(),
        name: "gw".to_string(),
        uid: format!("0a1b2c3d-4e5f-4a6b-8c7d-{i:012x}"),
        generation: Some(1),
        creation: None,
        spec: serde_json::from_value(serde_json::json!({"apex": format!("b{i:04}.example.org")}))
            .expect("a TenantGateway spec"),
        status: None,
    };
    let opts = Options::default();
    let settings = tgw.settings(&opts.scope).expect("a valid spec");
    let li = render::ListenerInputs {
        port443_namespaces: [ns].into_iter().collect(),
        hosts: (0..40)
            .map(|r| format!("h{r:02}.b{i:04}.example.org"))
            .collect(),
        ..render::ListenerInputs::default()
    };
    let d = render::render(&tgw, &settings, &li, &opts);
    LAST.with_borrow_mut(|l| *l = Some((i, d.clone())));
    d
}

/// An object as the API server stores it: `o` with the metadata it adds.
fn stored(o: impl serde::Serialize, rv: usize, uid: String) -> serde_json::Value {
    let mut v = serde_json::to_value(o).expect("an object encodes");
    let m = &mut v["metadata"];
    m["generation"] = 1.into();
    m["resourceVersion"] = rv.to_string().into();
    m["uid"] = uid.into();
    m["creationTimestamp"] = "2026-12-01T15:15:01Z".into();
    v
}

/// The Certificate of route `r`'s hostname, as the reconciler renders it and cert-manager
/// reports it ready.
fn synth_certificate(i: usize, r: usize) -> String {
    let host = format!("h{r:02}.b{i:04}.example.org");
    let c = rendered(i)
        .certificates
        .into_iter()
        .find(|c| c.spec.dns_names == [host.as_str()])
        .expect("a Certificate for each hostname");
    let mut v = stored(
        c,
        200_000 + i * 40 + r,
        format!("5d0c9f1a-3e2b-4c7d-8f6a-{:012x}", i * 40 + r),
    );
    v["status"] = serde_json::json!({"conditions": [{"type": "Ready", "status": "True",
            "reason": "Ready", "message": "Certificate is up to date and has not expired",
            "lastTransitionTime": "2026-12-01T15:16:40Z", "observedGeneration": 1}],
        "notAfter": "2027-03-01T15:16:39Z", "notBefore": "2026-12-01T15:16:39Z",
        "renewalTime": "2027-01-30T15:16:39Z", "revision": 1});
    v.to_string()
}

/// The Gateway of TenantGateway `i` with its 40 routes' listeners, as the reconciler renders
/// it. No status: the bench world has no data plane.
fn synth_gateway(i: usize) -> String {
    stored(
        rendered(i).gateway,
        300_000 + i,
        format!("9b8a7c6d-5e4f-4a3b-8c2d-{i:012x}"),
    )
    .to_string()
}

/// Makes the objects of TenantGateway `i` for routes `0..r` of it: one a route, or (the
/// Gateway) one for them all.
type Synth = fn(usize, usize) -> Option<String>;

fn synth(sizes: &str) {
    let _profiler = dhat::Profiler::builder().testing().build();
    println!("| routes | cache | MiB | bytes/route | blocks/route |");
    println!("|---:|---|---:|---:|---:|");
    let mut last: [Option<(u64, u64, u64)>; 3] = [None; 3];
    // (bytes, blocks, routes) between the last two sizes.
    let mut marginal: [Option<(u64, u64, u64)>; 3] = [None; 3];
    let kinds: [(Kind, Synth, &str); 3] = [
        (
            Kind::HttpRoute,
            |i, r| Some(synth_route(i, r)),
            "route index",
        ),
        (
            Kind::Certificate,
            |i, r| Some(synth_certificate(i, r)),
            "Certificates",
        ),
        (
            Kind::Gateway,
            |i, r| (r == 0).then(|| synth_gateway(i)),
            "Gateways",
        ),
    ];
    for n in sizes
        .split(',')
        .filter_map(|n| n.trim().parse::<usize>().ok())
    {
        for (c, (kind, make, what)) in kinds.iter().enumerate() {
            let texts: Vec<String> = (0..n).filter_map(|k| make(k / 40, k % 40)).collect();
            let before = dhat::HeapStats::get();
            let caches = Holder::default();
            for t in &texts {
                caches.take(*kind, t);
            }
            let after = dhat::HeapStats::get();
            let held = (after.curr_bytes - before.curr_bytes) as u64;
            let blocks = (after.curr_blocks - before.curr_blocks) as u64;
            println!(
                "| {n} | {what} | {:.2} | {} | {:.1} |",
                mib(held),
                held / n as u64,
                blocks as f64 / n as f64
            );
            if let Some((m, h, b)) = last[c] {
                let dn = (n as u64).saturating_sub(m).max(1);
                println!(
                    "| {m} → {n} | {what}, marginal | | {} | {:.1} |",
                    held.saturating_sub(h) / dn,
                    blocks.saturating_sub(b) as f64 / dn as f64
                );
                marginal[c] = Some((held.saturating_sub(h), blocks.saturating_sub(b), dn));
            }
            last[c] = Some((n as u64, held, blocks));
            drop(caches);
        }
        if let [Some(a), Some(b), Some(c)] = marginal {
            println!(
                "| | **route + Certificate + Gateway share, marginal** | | **{}** | {:.1} |",
                (a.0 + b.0 + c.0) / a.2,
                (a.1 + b.1 + c.1) as f64 / a.2 as f64
            );
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("--synth") => {}
        Some("--synth-cold") => COLD.store(true, Ordering::Relaxed),
        _ => return measure_dumps(),
    }
    synth(&args.next().unwrap_or_else(|| "10000,20000".into()));
}

fn measure_dumps() {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: reconcile-heap DIR (the kubectl dumps)");
    let dir = Path::new(&dir);
    let _profiler = dhat::Profiler::builder().testing().build();
    let caches = Holder::default();
    println!("| cache | objects | held MiB | bytes/object | decode peak over held, MiB |");
    println!("|---|---:|---:|---:|---:|");
    let mut total = 0u64;
    for (kind, file) in [
        (Kind::Namespace, "namespaces.json"),
        (Kind::HttpRoute, "httproutes.json"),
        (Kind::RouteFacts, "httproutes.json"),
        (Kind::Certificate, "certificates.json"),
        (Kind::Gateway, "gateways.json"),
        (Kind::Issuer, "issuers.json"),
        (Kind::TenantGateway, "tenantgateways.json"),
    ] {
        let objects = items(dir, file);
        let n = objects.len() as u64;
        // The input texts are measured out: only what the cache keeps counts.
        let before = dhat::HeapStats::get();
        let base = before.curr_bytes as u64;
        // Peak while decoding, over the bytes held at the start.
        let mut peak = 0u64;
        for o in &objects {
            caches.take(kind, o);
            let s = dhat::HeapStats::get();
            peak = peak.max((s.curr_bytes as u64).saturating_sub(base));
        }
        let held = (dhat::HeapStats::get().curr_bytes as u64).saturating_sub(base);
        if !matches!(kind, Kind::RouteFacts) {
            total += held;
        }
        println!(
            "| {kind:?} | {n} | {:.2} | {} | {:.2} |",
            mib(held),
            held.checked_div(n).unwrap_or(0),
            mib(peak.saturating_sub(held))
        );
    }
    println!(
        "| total (the RouteFacts row is a second copy, left out) | | {:.2} | | |",
        mib(total)
    );
}
