//! `audit-cost`: what the audit of stored objects (SPEC §3.9) costs at the SPEC's scale —
//! 10,000 namespaces and 20,000 routes — measured on the functions `serve` runs
//! (`audit::project::Projected::from_watch` on each route's JSON as the watch delivers it,
//! `audit::store::Store` fed as the namespace index and the watch feed it):
//!
//! - CPU of a full audit (on-CPU time of this thread, `/proc/thread-self/schedstat`): the
//!   projection of every route's JSON, the namespaces, the judgement of every route;
//! - the heap the store holds (live bytes, counted by dhat in a second pass over the same
//!   world), per route and per namespace;
//! - one change: how many objects it re-judges and its CPU (a route edited, a status write,
//!   a namespace relabelled, a route deleted);
//! - the heap it holds for Gateways of 41 listeners (dhat), beside the former form's bytes.
//!
//!   cargo run --release --example audit-cost -- [--namespaces N] [--routes N] [--gateways N]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::ObjectList;
use serde_json::json;
use tenant_gateway::audit::kinds::GuardedKind;
use tenant_gateway::audit::project::{Projected, pack, project};
use tenant_gateway::audit::store::Store;
use tenant_gateway::cluster::apex::ApexMap;
use tenant_gateway::cluster::projection::project_json;
use tenant_gateway::cluster::routes::AUDITED_PATHS;
use tenant_gateway::cluster::watch::{FromWatch, Watched};
use tenant_gateway::platform::{CONTROLLER_NAME, HOST_LABEL};
use tenant_gateway::policy::PolicyConfig;

// dhat counts live bytes exactly (`HeapStats::curr_bytes`) while its profiler runs, and
// forwards to the system allocator otherwise: the CPU pass runs without it.
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// On-CPU time of this thread so far.
fn cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns: u64 = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

/// `f`'s result and the on-CPU time it took (resolution: the scheduler's accounting, a few
/// milliseconds; used for phases of tens of milliseconds and more).
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = cpu();
    let out = f();
    (out, cpu().saturating_sub(start))
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A route as the API server holds it (spec, our status entry; no managedFields), about
/// 900 bytes of JSON.
fn route_json(ns: &str, name: &str, hostnames: &[String], uid: usize) -> String {
    let parent = json!({"group": "gateway.networking.k8s.io", "kind": "Gateway",
        "name": ns, "namespace": ns, "sectionName": "https"});
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns, "generation": 1, "resourceVersion": "1",
            "uid": format!("{:08x}-6a43-4d1c-9d5c-0d7f3f7f9a01", uid),
            "labels": {"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": name}},
        "spec": {"parentRefs": [parent], "hostnames": hostnames,
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                       "backendRefs": [{"name": "web", "port": 80}]}]},
        "status": {"parents": [{"controllerName": CONTROLLER_NAME, "parentRef": parent,
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                "lastTransitionTime": "2026-05-01T09:12:44Z", "message": ""}]}]}
    })
    .to_string()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let namespaces = arg("--namespaces", 10_000).max(2);
    let routes = arg("--routes", 20_000);
    let tenants = namespaces - 1;
    let cfg = PolicyConfig {
        root_host: Some("example.org".into()),
        ..PolicyConfig::default()
    };
    // The world: tenant-root and tenants t0…, each with its apex; routes round-robin over the
    // tenants, two hostnames under the apex each, every 50th publishing under another's.
    let ns_names: Vec<(String, String)> =
        std::iter::once(("tenant-root".to_string(), "example.org".to_string()))
            .chain((0..tenants).map(|i| (format!("tenant-t{i}"), format!("t{i}.example.org"))))
            .collect();
    let texts: Vec<(String, String, String)> = (0..routes)
        .map(|j| {
            let t = j % tenants;
            let ns = format!("tenant-t{t}");
            let name = format!("web-{j}");
            let owner = if j % 50 == 49 { (t + 1) % tenants } else { t };
            let hostnames = vec![
                format!("{name}.t{owner}.example.org"),
                format!("www.{name}.t{owner}.example.org"),
            ];
            let text = route_json(&ns, &name, &hostnames, j);
            (ns, name, text)
        })
        .collect();
    let bytes: usize = texts.iter().map(|t| t.2.len()).sum();
    println!(
        "audit-cost: {namespaces} namespaces, {routes} HTTPRoutes ({} bytes of JSON each on average)\n",
        bytes / routes.max(1)
    );

    let mut apexes = ApexMap::default();
    for (name, apex) in &ns_names {
        apexes.set(
            name,
            &BTreeMap::from([(HOST_LABEL.to_string(), apex.clone())]),
        );
    }
    let world = World {
        namespaces: &ns_names,
        routes: &texts,
        cfg: Arc::new(cfg),
    };

    let (mut store, [ns_cpu, project_cpu, judge_cpu]) = world.audit(&apexes, |_| {});
    let total = ns_cpu + project_cpu + judge_cpu;
    let violating = store.counts().values().sum::<i64>();
    println!("| full audit | CPU | target |");
    println!("|---|---:|---|");
    println!(
        "| {namespaces} namespaces into the store (apex table) | {} | |",
        ms(ns_cpu)
    );
    println!(
        "| {routes} routes' JSON projected (`Projected::from_watch`) | {} | |",
        ms(project_cpu)
    );
    println!(
        "| {routes} routes judged into the store | {} | |",
        ms(judge_cpu)
    );
    println!(
        "| **total** ({} judgements, {violating} violations) | **{}** | < 1 s: {} |",
        store.judgements(),
        ms(total),
        if total < Duration::from_secs(1) {
            "met"
        } else {
            "MISSED"
        }
    );
    println!();

    // One change at a time: how many objects it re-judges, and its time, the mean of
    // `REPEAT` runs alternating between two states so that each run changes something.
    const REPEAT: u32 = 200;
    let mut row = |what: &str,
                   a: &mut dyn FnMut(&mut Store, &mut ApexMap),
                   b: &mut dyn FnMut(&mut Store, &mut ApexMap)| {
        let before = store.judgements();
        a(&mut store, &mut apexes);
        let judged = store.judgements() - before;
        b(&mut store, &mut apexes);
        let started = std::time::Instant::now();
        for _ in 0..REPEAT {
            a(&mut store, &mut apexes);
            b(&mut store, &mut apexes);
        }
        let each = started.elapsed() / (2 * REPEAT);
        println!("| {what} | {judged} | {:.1} µs |", each.as_secs_f64() * 1e6);
    };
    println!(
        "| one change | objects judged | wall time (mean of {}) |",
        2 * REPEAT
    );
    println!("|---|---:|---:|");
    let route = |hostname: &str, status: &str| {
        route_json("tenant-t7", "web-7", &[hostname.to_string()], 7)
            .replace("2026-05-01T09:12:44Z", status)
    };
    let apply = |text: String| {
        move |s: &mut Store, a: &mut ApexMap| {
            let p = Projected::from_watch(&text).expect("json");
            s.apply(
                GuardedKind::HttpRoute,
                "tenant-t7",
                "web-7",
                p.uid.as_deref(),
                &p.body,
                a,
            );
        }
    };
    row(
        "a route's hostnames edited (projected and judged)",
        &mut apply(route("edited.t7.example.org", "2026-05-01T09:12:44Z")),
        &mut apply(route("web-7.t7.example.org", "2026-05-01T09:12:44Z")),
    );
    row(
        "a route's status rewritten (projected, nothing judged)",
        &mut apply(route("web-7.t7.example.org", "2026-05-02T10:00:00Z")),
        &mut apply(route("web-7.t7.example.org", "2026-05-01T09:12:44Z")),
    );
    let in_ns = routes / tenants + usize::from(9 < routes % tenants);
    let relabel = |apex: &'static str| {
        move |s: &mut Store, a: &mut ApexMap| {
            a.set(
                "tenant-t9",
                &BTreeMap::from([(HOST_LABEL.to_string(), apex.to_string())]),
            );
            s.namespace("tenant-t9", true, Some(apex), a);
        }
    };
    row(
        &format!("namespace tenant-t9 relabelled to another apex ({in_ns} routes in it)"),
        &mut relabel("t9.other.example.org"),
        &mut relabel("t9.example.org"),
    );
    row(
        "a namespace's labels rewritten, the same apex",
        &mut |s, a| {
            s.namespace("tenant-t11", true, Some("t11.example.org"), a);
        },
        &mut |s, a| {
            s.namespace("tenant-t11", true, Some("t11.example.org"), a);
        },
    );

    drop(store);

    // The same world again under dhat's profiler: the bytes the store holds.
    let profiler = dhat::Profiler::builder().testing().build();
    let live = || dhat::HeapStats::get().curr_bytes;
    let before = live();
    let mut after_namespaces = 0;
    let (mut store, _) = world.audit(&apexes, |_| after_namespaces = live());
    let held = live() - before;
    let held_ns = after_namespaces - before;
    let held_routes = held - held_ns;
    // The first list's end trims each namespace's list to what it holds (`serve` ends it
    // so; the lists grew by half as the routes came).
    store.relist_done(GuardedKind::HttpRoute);
    let trimmed = live() - before - held_ns;
    println!();
    println!("| held by the store | live bytes | per object |");
    println!("|---|---:|---:|");
    println!(
        "| namespaces: state, apex-table verdicts (names and label values shared with the index) | {:.2} MiB | {} |",
        mib(held_ns),
        held_ns / namespaces
    );
    println!(
        "| routes: key, uid, projection, verdict | {:.2} MiB | {} |",
        mib(held_routes),
        held_routes / routes.max(1)
    );
    println!("| **total** | **{:.2} MiB** | |", mib(held));
    println!(
        "| routes, once the first list ended (`relist_done` trims the lists) | {:.2} MiB | {} |",
        mib(trimmed),
        trimmed / routes.max(1)
    );
    drop(store);

    // Gateways as `bench/reconcile/run`'s TenantGateways render them (40 HTTPS listeners and
    // one HTTP listener each, hostnames under the namespace's apex), into a store holding
    // the namespaces: the bytes it holds for them, beside what the former form (an 80-byte
    // entry, the name and the projection's packed JSON text apart: `project::pack`) held.
    let gateways = arg("--gateways", 500).min(tenants);
    let mut gw_store = Store::new(world.cfg.clone());
    for (name, apex) in world.namespaces {
        gw_store.namespace(name, true, Some(apex), &apexes);
    }
    let gw_objects: Vec<(String, serde_json::Value)> = (0..gateways)
        .map(|g| {
            let apex = format!("t{g}.example.org");
            let mut listeners: Vec<serde_json::Value> = (0..40)
                .map(|j| {
                    json!({"name": format!("https-web-{j}-{:08x}", j * 7919 + g),
                           "hostname": format!("web-{j}.{apex}"), "port": 443,
                           "protocol": "HTTPS"})
                })
                .collect();
            listeners.push(json!({"name": "http", "hostname": format!("*.{apex}"),
                                  "port": 80, "protocol": "HTTP"}));
            let body = json!({"metadata": {"uid": format!("{g:08x}-6a43-4d1c-9d5c-0d7f3f7f9a02")},
                              "spec": {"gatewayClassName": "cilium", "listeners": listeners}});
            (format!("tenant-t{g}"), body)
        })
        .collect();
    let before = live();
    for (ns, body) in &gw_objects {
        let p = Projected::of_value(body);
        gw_store.apply(
            GuardedKind::Gateway,
            ns,
            ns,
            p.uid.as_deref(),
            &p.body,
            &apexes,
        );
    }
    gw_store.relist_done(GuardedKind::Gateway);
    let gw_held = live() - before;
    let former: usize = gw_objects
        .iter()
        .map(|(ns, body)| {
            80 + ns.len() + pack(GuardedKind::Gateway, &project(GuardedKind::Gateway, body)).len()
        })
        .sum();
    println!();
    println!("| {gateways} Gateways of 41 listeners held | live bytes | per Gateway |");
    println!("|---|---:|---:|");
    println!(
        "| the store (dhat) | {:.2} MiB | {} |",
        mib(gw_held),
        gw_held / gateways.max(1)
    );
    println!(
        "| the former form, computed (80-byte entry + name + packed JSON text) | {:.2} MiB | {} |",
        mib(former),
        former / gateways.max(1)
    );
    drop(gw_store);

    // What feeding the audit its routes allocates, all 20,000 together and at most at once:
    // a LIST of its own (`serve` before the route feed, and with `--no-controller`): the
    // pages' text, as the client buffers each, and each page decoded into projections; the
    // route feed (`serve` with the reconciler): the projection the shared route watch decodes
    // beside its view (`WatchedRoute::audited`) and its copy into the audit's queue.
    let page_texts: Vec<String> = texts
        .chunks(PAGE)
        .map(|page| {
            let items: Vec<&str> = page.iter().map(|(_, _, t)| t.as_str()).collect();
            format!(
                r#"{{"apiVersion":"v1","kind":"List","metadata":{{"resourceVersion":"9"}},"items":[{}]}}"#,
                items.join(",")
            )
        })
        .collect();
    // Total bytes and allocations of `f`; it reports what it holds at its fullest.
    let measure = |f: &mut dyn FnMut(&mut usize)| {
        let start = dhat::HeapStats::get();
        let mut peak = 0;
        f(&mut peak);
        let end = dhat::HeapStats::get();
        (
            end.total_bytes - start.total_bytes,
            end.total_blocks - start.total_blocks,
            peak.saturating_sub(start.curr_bytes),
        )
    };
    let own = measure(&mut |peak| {
        for text in &page_texts {
            // The client's buffer of the page's body, then the page decoded from it.
            let body = text.as_bytes().to_vec();
            let page: ObjectList<Watched<Projected>> =
                serde_json::from_slice(&body).expect("a page");
            *peak = (*peak).max(live());
            drop(body);
            std::hint::black_box(page);
        }
    });
    let fed = measure(&mut |peak| {
        for (_, _, text) in &texts {
            let audited = project_json(text, AUDITED_PATHS).expect("a route");
            let queued = Projected::of_projection(audited.clone());
            *peak = (*peak).max(live());
            std::hint::black_box((audited, queued));
        }
    });
    println!();
    println!(
        "| feeding the audit {routes} routes | bytes allocated | allocations | most held at once |"
    );
    println!("|---|---:|---:|---:|");
    for (what, (bytes, blocks, peak)) in [
        (format!("a LIST of its own ({PAGE} a page)"), own),
        (
            "the route feed (from the shared route watch)".to_string(),
            fed,
        ),
    ] {
        println!(
            "| {what} | {:.1} MiB ({} a route) | {blocks} | {:.2} MiB |",
            mib(bytes as usize),
            bytes / routes.max(1) as u64,
            mib(peak)
        );
    }
    drop(profiler);
}

/// Routes a page of a watch's initial list (`cluster::watch::PAGE_SIZE`).
const PAGE: usize = tenant_gateway::cluster::watch::PAGE_SIZE as usize;

/// The bench's world and how a full audit of it runs.
struct World<'a> {
    namespaces: &'a [(String, String)],
    routes: &'a [(String, String, String)],
    cfg: Arc<PolicyConfig>,
}

impl World<'_> {
    /// A store fed every namespace, then every route's JSON as the watch delivers it; the CPU
    /// of the namespaces, of the projections and of the judgements (each phase timed whole).
    /// `between` runs once the store holds the namespaces.
    fn audit(&self, apexes: &ApexMap, between: impl FnOnce(&Store)) -> (Store, [Duration; 3]) {
        let mut store = Store::new(self.cfg.clone());
        let (_, ns_cpu) = timed(|| {
            for (name, apex) in self.namespaces {
                store.namespace(name, true, Some(apex), apexes);
            }
        });
        between(&store);
        // As the watch's first list: `relist_done` (left to the caller) ends it.
        store.relist_started(GuardedKind::HttpRoute);
        let mut project = Duration::ZERO;
        let mut judge = Duration::ZERO;
        for (ns, name, text) in self.routes {
            let (p, d) = timed(|| Projected::from_watch(text).expect("a route's JSON"));
            project += d;
            let (_, d) = timed(|| {
                store.apply(
                    GuardedKind::HttpRoute,
                    ns,
                    name,
                    p.uid.as_deref(),
                    &p.body,
                    apexes,
                )
            });
            judge += d;
        }
        (store, [ns_cpu, project, judge])
    }
}

fn mib(b: usize) -> f64 {
    b as f64 / 1048576.0
}
