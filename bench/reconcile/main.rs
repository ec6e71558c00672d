//! Reconciler at scale through a real kube-apiserver (issue 7): populate a world of
//! TenantGateways × routes plus filler namespaces, then wait until every TenantGateway's
//! status lists one listener per route (its last write of a plan), reading `serve`'s
//! /metrics for the writes it issued; add one route and time its listener and Certificate;
//! measure what the API server sustains on a trivial write loop. Driven by `bench/reconcile`.
//!
//!   reconcile-load populate --kubeconfig F --tgws N --routes R --namespaces M
//!   reconcile-load converge --kubeconfig F --tgws N --routes R --metrics HOST:PORT
//!       [--cp-pid PID --serve-pid PID [--timeline FILE]]   (where the CPU went meanwhile)
//!   reconcile-load add-route --kubeconfig F --routes R --metrics HOST:PORT
//!   reconcile-load populate-hot --kubeconfig F --routes R --hosts H
//!   reconcile-load converge --kubeconfig F --tgws 1 --expect H+1 --metrics HOST:PORT
//!   reconcile-load churn-hot --kubeconfig F --seconds S --metrics HOST:PORT [--pause-ms P]
//!   reconcile-load writeloop --kubeconfig F [--seconds S] [--concurrency C]
//!   reconcile-load costs --kubeconfig F --cp-pid PID [--routes N] [--listeners L] [--concurrency C]
//!   reconcile-load cpu-ms --kubeconfig F --cp-pid PID   (CPU ms of PID and its descendants)
//!   reconcile-load replay --kubeconfig F --cp-pid PID [--concurrency C] [--timeout S]
//!       (the cold start's writes undone and issued again: the API server's floor; replay.rs)
//!   reconcile-load undo --kubeconfig F --cp-pid PID [--concurrency C] [--timeout S]
//!       (the replay's undo alone: the world as before the cold start, for a second one)

mod replay;

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};

struct Args {
    cmd: String,
    kubeconfig: String,
    tgws: usize,
    routes: usize,
    namespaces: usize,
    metrics: String,
    timeout: u64,
    seconds: u64,
    concurrency: usize,
    cp_pid: u32,
    listeners: usize,
    /// Hostnames the hot Gateway's routes share (`populate-hot`).
    hosts: usize,
    /// Listeners each TenantGateway's status lists once converged (`converge`; default
    /// `routes + 1`).
    expect: Option<usize>,
    /// Pause after each change (`churn-hot`).
    pause_ms: u64,
    /// `serve`'s pid (`converge`: with `--cp-pid`, where the machine's CPU goes meanwhile).
    serve_pid: u32,
    /// Where `converge` writes its CPU timeline (CSV, one row per 0.5-s sample).
    timeline: Option<String>,

    /// Print how far `converge` got every this many seconds (0: silent), for runs that take
    /// half an hour (`bench/reconcile/scale`).
    progress: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let cmd = it.next().ok_or("populate or converge")?;
    let mut a = Args {
        cmd,
        kubeconfig: String::new(),
        tgws: 300,
        routes: 40,
        namespaces: 10_000,
        metrics: String::new(),
        timeout: 600,
        seconds: 15,
        concurrency: 64,
        cp_pid: 0,
        listeners: 41,
        hosts: 40,
        expect: None,
        pause_ms: 1000,
        serve_pid: 0,
        timeline: None,

        progress: 0,
    };
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--kubeconfig" => a.kubeconfig = value()?,
            "--tgws" => a.tgws = num(value()?)?,
            "--routes" => a.routes = num(value()?)?,
            "--namespaces" => a.namespaces = num(value()?)?,
            "--metrics" => a.metrics = value()?,
            "--timeout" => a.timeout = num(value()?)? as u64,
            "--seconds" => a.seconds = num(value()?)? as u64,
            "--concurrency" => a.concurrency = num(value()?)?,
            "--cp-pid" => a.cp_pid = num(value()?)? as u32,
            "--listeners" => a.listeners = num(value()?)?,
            "--hosts" => a.hosts = num(value()?)?,
            "--expect" => a.expect = Some(num(value()?)?),
            "--pause-ms" => a.pause_ms = num(value()?)? as u64,
            "--serve-pid" => a.serve_pid = num(value()?)? as u32,
            "--timeline" => a.timeline = Some(value()?),

            "--progress" => a.progress = num(value()?)? as u64,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.kubeconfig.is_empty() {
        return Err("--kubeconfig is required".into());
    }
    Ok(a)
}

fn ar(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

async fn create_all(client: &Client, objects: Vec<(ApiResource, DynamicObject)>) -> usize {
    let n = objects.len();
    let failed = futures::stream::iter(objects)
        .map(|(r, o)| {
            let client = client.clone();
            async move {
                let api: Api<DynamicObject> = match o.metadata.namespace.as_deref() {
                    Some(ns) => Api::namespaced_with(client, ns, &r),
                    None => Api::all_with(client, &r),
                };
                match api.create(&PostParams::default(), &o).await {
                    Ok(_) => 0,
                    Err(kube::Error::Api(s)) if s.code == 409 => 0,
                    Err(e) => {
                        eprintln!("create failed: {e}");
                        1
                    }
                }
            }
        })
        .buffer_unordered(32)
        .fold(0usize, |a, b| async move { a + b })
        .await;
    n - failed
}

fn obj(r: &ApiResource, ns: Option<&str>, name: &str, data: serde_json::Value) -> DynamicObject {
    let mut o = DynamicObject::new(name, r);
    if let Some(ns) = ns {
        o = o.within(ns);
    }
    o.data = data;
    o
}

async fn populate(client: &Client, a: &Args) {
    let ns_ar = ar("", "v1", "Namespace");
    let tgw_ar = ar("gateway.cozystack.io", "v1alpha1", "TenantGateway");
    let route_ar = ar("gateway.networking.k8s.io", "v1", "HTTPRoute");
    let t0 = Instant::now();
    let mut namespaces = Vec::new();
    for i in 0..a.namespaces {
        let (name, labels) = if i < a.tgws {
            (
                format!("tenant-b{i:04}"),
                serde_json::json!({"namespace.cozystack.io/host": format!("b{i:04}.example.org")}),
            )
        } else {
            (
                format!("filler-{i:05}"),
                serde_json::json!({"bench": "filler"}),
            )
        };
        let mut o = obj(&ns_ar, None, &name, serde_json::json!({}));
        o.metadata.labels = serde_json::from_value(labels).ok();
        namespaces.push((ns_ar.clone(), o));
    }
    // The namespaces of bench/loadgen's review (an HTTPRoute in tenant-alice), so the
    // admission load during the run finds them in the index.
    for (name, labels) in [
        (
            "tenant-root",
            serde_json::json!({"namespace.cozystack.io/host": "example.org"}),
        ),
        (
            "tenant-alice",
            serde_json::json!({"namespace.cozystack.io/host": "alice.example.org",
                               "namespace.cozystack.io/gateway": "tenant-root"}),
        ),
    ] {
        let mut o = obj(&ns_ar, None, name, serde_json::json!({}));
        o.metadata.labels = serde_json::from_value(labels).ok();
        namespaces.push((ns_ar.clone(), o));
    }
    let made = create_all(client, namespaces).await;
    eprintln!("namespaces: {made} in {:.1}s", t0.elapsed().as_secs_f64());
    let t1 = Instant::now();
    let mut rest = Vec::new();
    for i in 0..a.tgws {
        let ns = format!("tenant-b{i:04}");
        let apex = format!("b{i:04}.example.org");
        rest.push((
            tgw_ar.clone(),
            obj(
                &tgw_ar,
                Some(&ns),
                "gw",
                serde_json::json!({"spec": {"apex": apex}}),
            ),
        ));
        for r in 0..a.routes {
            rest.push((
                route_ar.clone(),
                obj(
                    &route_ar,
                    Some(&ns),
                    &format!("r{r:02}"),
                    serde_json::json!({"spec": {
                        "parentRefs": [{"name": "gw"}],
                        "hostnames": [format!("h{r:02}.{apex}")],
                        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
                ),
            ));
        }
    }
    let made = create_all(client, rest).await;
    eprintln!(
        "TenantGateways and routes: {made} in {:.1}s",
        t1.elapsed().as_secs_f64()
    );
}

/// Sum of a counter family in Prometheus text fetched from `addr`.
async fn metric(addr: &str, family: &str) -> Option<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).await.ok()?;
    Some(
        body.lines()
            .filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

async fn converge(client: &Client, a: &Args) -> Result<(), String> {
    let tgw_ar = ar("gateway.cozystack.io", "v1alpha1", "TenantGateway");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &tgw_ar);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(a.timeout);
    // Watched, not listed in a loop: a list of 300 TenantGateways with full status every
    // half second would load the API server the bench measures.
    let listeners = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
        (String, String),
        usize,
    >::new()));
    let watch = {
        let listeners = listeners.clone();
        tokio::spawn(async move {
            use kube::runtime::watcher::{self, Event};
            let mut stream = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(ev) = stream.next().await {
                let count = |t: &DynamicObject| {
                    (
                        (
                            t.metadata.namespace.clone().unwrap_or_default(),
                            t.metadata.name.clone().unwrap_or_default(),
                        ),
                        t.data["status"]["listeners"].as_array().map_or(0, Vec::len),
                    )
                };
                let mut m = listeners.lock().unwrap_or_else(|p| p.into_inner());
                match ev {
                    Ok(Event::Apply(t) | Event::InitApply(t)) => {
                        let (k, n) = count(&t);
                        m.insert(k, n);
                    }
                    Ok(Event::Delete(t)) => {
                        m.remove(&count(&t).0);
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("TenantGateway watch: {e}"),
                }
            }
        })
    };
    let sampler = (a.cp_pid != 0 && a.serve_pid != 0).then(|| {
        let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::<CpuSample>::new()));
        let (kept, cp, serve, addr) = (samples.clone(), a.cp_pid, a.serve_pid, a.metrics.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tick.tick().await;
                let s = CpuSample::take(started, cp, serve, &addr).await;
                kept.lock().unwrap_or_else(|p| p.into_inner()).push(s);
            }
        });
        (samples, task)
    });

    let mut told = started;
    loop {
        let done = listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            // At least: step 4b's world keeps the route step 3 added (one Gateway has one more).
            .filter(|n| **n >= a.expect.unwrap_or(a.routes + 1))
            .count();
        // Every TenantGateway reconciled by this process at least once (a resync run starts
        // with a converged world). Scraped only once the statuses say done (or for the
        // progress line): with the sampler's, seven scrapes a second (each a connection and
        // a render of every metric) were ~8 % of `serve`'s CPU samples in a 300 x 40 cold
        // start (perf), which the bench would count as the reconciler's.
        let progress_due = a.progress > 0 && told.elapsed() >= Duration::from_secs(a.progress);
        let reconciled = if done >= a.tgws || progress_due {
            metric(&a.metrics, "tenant_gateway_reconcile_total")
                .await
                .unwrap_or(0.0)
        } else {
            0.0
        };
        if progress_due {
            told = Instant::now();
            let writes = metric(&a.metrics, "tenant_gateway_reconcile_writes_total").await;
            eprintln!(
                "converge: {:.0}s, {done}/{} TenantGateways converged, {reconciled:.0} reconciles, {:.0} writes",
                started.elapsed().as_secs_f64(),
                a.tgws,
                writes.unwrap_or(-1.0)
            );
        }
        if done >= a.tgws && reconciled >= a.tgws as f64 {
            break;
        }
        if Instant::now() > deadline {
            watch.abort();
            return Err(format!("{done}/{} converged at the deadline", a.tgws));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    watch.abort();
    let converged = started.elapsed().as_secs_f64();
    let cpu = match sampler {
        Some((samples, task)) => {
            let last = CpuSample::take(started, a.cp_pid, a.serve_pid, &a.metrics).await;
            task.abort();
            let mut v = samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
            v.push(last);
            cpu_report(&v, a.timeline.as_deref())
        }
        None => "null".to_string(),
    };
    // Quiet: the writes counter stops moving.
    let last = quiet_writes(&a.metrics, deadline).await;
    let reconciles = metric(&a.metrics, "tenant_gateway_reconcile_total").await;
    println!(
        "{{\"converged_s\": {converged:.1}, \"writes\": {}, \"reconciles\": {}, \"cpu\": {cpu}}}",
        last.unwrap_or(-1.0),
        reconciles.unwrap_or(-1.0)
    );
    Ok(())
}

/// Where the machine's CPU was at one moment of a converge: CPU ms since boot of the
/// control plane's process tree, of `serve`, of the whole machine (busy and idle), and the
/// writes `serve` had issued.
#[derive(Clone, Copy)]
struct CpuSample {
    at_s: f64,
    cp_ms: u64,
    serve_ms: u64,
    busy_ms: u64,
    idle_ms: u64,
    writes: f64,
}

impl CpuSample {
    async fn take(started: Instant, cp: u32, serve: u32, metrics: &str) -> CpuSample {
        let writes = metric(metrics, "tenant_gateway_reconcile_writes_total")
            .await
            .unwrap_or(0.0);
        let (busy_ms, idle_ms) = machine_cpu_ms();
        CpuSample {
            at_s: started.elapsed().as_secs_f64(),
            cp_ms: tree_cpu_ms(cp),
            serve_ms: tree_cpu_ms(serve),
            busy_ms,
            idle_ms,
            writes,
        }
    }
}

/// The machine's CPU since boot in ms, (busy, idle), from /proc/stat's `cpu` line: idle is
/// idle + iowait, busy the other fields but guest time (already in user).
fn machine_cpu_ms() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    let idle = at(3) + at(4);
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    // USER_HZ is 100 on every Linux the bench runs on.
    (busy * 10, idle * 10)
}

/// Where the cores went over a converge, as JSON: the control plane's, `serve`'s, every other
/// process's (busy minus those two) and idle CPU-seconds. Idle cores while the world is not
/// converged are time the API server could have worked and did not: it waited for us (or
/// for its own disk). Per 10-s phase the same in cores, on stderr; every sample to
/// `timeline` as CSV.
fn cpu_report(v: &[CpuSample], timeline: Option<&str>) -> String {
    let (Some(first), Some(last)) = (v.first(), v.last()) else {
        return "null".to_string();
    };
    let d = |a: &CpuSample, b: &CpuSample| {
        let cp = b.cp_ms.saturating_sub(a.cp_ms) as f64 / 1000.0;
        let serve = b.serve_ms.saturating_sub(a.serve_ms) as f64 / 1000.0;
        let busy = b.busy_ms.saturating_sub(a.busy_ms) as f64 / 1000.0;
        let idle = b.idle_ms.saturating_sub(a.idle_ms) as f64 / 1000.0;
        (
            b.at_s - a.at_s,
            cp,
            serve,
            (busy - cp - serve).max(0.0),
            idle,
            b.writes - a.writes,
        )
    };
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    eprintln!("phase (s)   cores: control plane, serve, others, idle; writes/s");
    let mut from = first;
    for s in v {
        if s.at_s - from.at_s >= 10.0 || std::ptr::eq(s, last) {
            let (w, cp, serve, others, idle, writes) = d(from, s);
            if w > 0.0 {
                eprintln!(
                    "{:5.0}-{:<5.0} {:.2} {:.2} {:.2} {:.2}; {:.0}",
                    from.at_s,
                    s.at_s,
                    cp / w,
                    serve / w,
                    others / w,
                    idle / w,
                    writes / w
                );
            }
            from = s;
        }
    }
    if let Some(path) = timeline {
        let mut csv =
            String::from("at_s,cp_cores,serve_cores,others_cores,idle_cores,writes_per_s\n");
        for p in v.windows(2) {
            let (w, cp, serve, others, idle, writes) = d(&p[0], &p[1]);
            if w > 0.0 {
                csv.push_str(&format!(
                    "{:.1},{:.2},{:.2},{:.2},{:.2},{:.0}\n",
                    p[1].at_s,
                    cp / w,
                    serve / w,
                    others / w,
                    idle / w,
                    writes / w
                ));
            }
        }
        if let Err(e) = std::fs::write(path, csv) {
            eprintln!("{path}: {e}");
        }
    }
    let (w, cp, serve, others, idle, _) = d(first, last);
    format!(
        "{{\"wall_s\": {w:.1}, \"cores\": {cores}, \"cp_s\": {cp:.1}, \"serve_s\": {serve:.1}, \"others_s\": {others:.1}, \"idle_s\": {idle:.1}}}"
    )
}

/// Wait until the writes counter of `serve` stops moving for 3 s; returns its value.
async fn quiet_writes(addr: &str, deadline: Instant) -> Option<f64> {
    let mut last = metric(addr, "tenant_gateway_reconcile_writes_total").await;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = metric(addr, "tenant_gateway_reconcile_writes_total").await;
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// One more route in the first tenant: time until the Gateway has its listener and its
/// Certificate exists, and the writes that took.
async fn add_route(client: &Client, a: &Args) -> Result<(), String> {
    let ns = "tenant-b0000";
    let apex = "b0000.example.org";
    let label = format!("h{:02}", a.routes);
    let route_ar = ar("gateway.networking.k8s.io", "v1", "HTTPRoute");
    let gw_ar = ar("gateway.networking.k8s.io", "v1", "Gateway");
    let cert_ar = ar("cert-manager.io", "v1", "Certificate");
    let before = quiet_writes(&a.metrics, Instant::now() + Duration::from_secs(60))
        .await
        .ok_or("no /metrics")?;
    let route = obj(
        &route_ar,
        Some(ns),
        &format!("r{:02}", a.routes),
        serde_json::json!({"spec": {
            "parentRefs": [{"name": "gw"}],
            "hostnames": [format!("{label}.{apex}")],
            "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
    );
    let routes: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &route_ar);
    let gws: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &gw_ar);
    let certs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &cert_ar);
    let listener = format!("https-{label}");
    let cert = format!("gw-{label}-tls");
    let started = Instant::now();
    routes
        .create(&PostParams::default(), &route)
        .await
        .map_err(|e| format!("create route: {e}"))?;
    let deadline = started + Duration::from_secs(a.timeout);
    let (mut listener_at, mut cert_at) = (None, None);
    while listener_at.is_none() || cert_at.is_none() {
        if listener_at.is_none()
            && let Ok(gw) = gws.get("gw").await
            && gw.data["spec"]["listeners"]
                .as_array()
                .is_some_and(|l| l.iter().any(|x| x["name"] == listener.as_str()))
        {
            listener_at = Some(started.elapsed().as_secs_f64());
        }
        if cert_at.is_none() && matches!(certs.get_opt(&cert).await, Ok(Some(_))) {
            cert_at = Some(started.elapsed().as_secs_f64());
        }
        if Instant::now() > deadline {
            return Err(format!("no {listener} / {cert} at the deadline"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = quiet_writes(&a.metrics, deadline).await.unwrap_or(-1.0);
    println!(
        "{{\"listener_s\": {:.2}, \"certificate_s\": {:.2}, \"writes\": {}}}",
        listener_at.unwrap_or(-1.0),
        cert_at.unwrap_or(-1.0),
        after - before
    );
    Ok(())
}

/// The namespace, TenantGateway and Gateway of the hot world (`populate-hot`): the root
/// tenant, whose Gateway the load generator's review names.
const HOT: &str = "tenant-root";

/// One TenantGateway (`tenant-root/tenant-root`, http01, apex `example.org`) with `routes`
/// HTTPRoutes in its namespace sharing `hosts` hostnames (so its Gateway has `hosts + 1`
/// listeners, room left under 64), and the namespace of the load generator's review.
async fn populate_hot(client: &Client, a: &Args) {
    let ns_ar = ar("", "v1", "Namespace");
    let tgw_ar = ar("gateway.cozystack.io", "v1alpha1", "TenantGateway");
    let route_ar = ar("gateway.networking.k8s.io", "v1", "HTTPRoute");
    let t0 = Instant::now();
    let mut namespaces = Vec::new();
    for (name, labels) in [
        (
            HOT,
            serde_json::json!({"namespace.cozystack.io/host": "example.org"}),
        ),
        (
            "tenant-alice",
            serde_json::json!({"namespace.cozystack.io/host": "alice.example.org",
                               "namespace.cozystack.io/gateway": HOT}),
        ),
    ] {
        let mut o = obj(&ns_ar, None, name, serde_json::json!({}));
        o.metadata.labels = serde_json::from_value(labels).ok();
        namespaces.push((ns_ar.clone(), o));
    }
    create_all(client, namespaces).await;
    let mut rest = vec![(
        tgw_ar.clone(),
        obj(
            &tgw_ar,
            Some(HOT),
            HOT,
            serde_json::json!({"spec": {"apex": "example.org"}}),
        ),
    )];
    for r in 0..a.routes {
        rest.push((
            route_ar.clone(),
            obj(
                &route_ar,
                Some(HOT),
                &format!("r{r:05}"),
                serde_json::json!({"spec": {
                    "parentRefs": [{"name": HOT}],
                    "hostnames": [format!("h{:02}.example.org", r % a.hosts.max(1))],
                    "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
            ),
        ));
    }
    let made = create_all(client, rest).await;
    eprintln!(
        "hot Gateway: {made} objects in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}

/// Route changes on the hot Gateway for `seconds`: add a route with a hostname of its own,
/// time until the Gateway lists its listener, delete it, wait until the listener is gone;
/// again. A pause of `--pause-ms` (default 1000) after each change lets its reconcile end
/// (the controller settles on its own writes), so each add is one route added to a quiet
/// Gateway, not queued behind the previous change. Prints the listener latencies and the
/// writes per change.
async fn churn_hot(client: &Client, a: &Args) -> Result<(), String> {
    let route_ar = ar("gateway.networking.k8s.io", "v1", "HTTPRoute");
    let gw_ar = ar("gateway.networking.k8s.io", "v1", "Gateway");
    let routes: Api<DynamicObject> = Api::namespaced_with(client.clone(), HOT, &route_ar);
    let gws: Api<DynamicObject> = Api::namespaced_with(client.clone(), HOT, &gw_ar);
    let has_listener = |gw: &DynamicObject, name: &str| {
        gw.data["spec"]["listeners"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x["name"] == name))
    };
    let before = metric(&a.metrics, "tenant_gateway_reconcile_writes_total")
        .await
        .ok_or("no /metrics")?;
    let started = Instant::now();
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(a.seconds) {
        let name = format!("new-{i:03}");
        let listener = format!("https-{name}");
        let route = obj(
            &route_ar,
            Some(HOT),
            &name,
            serde_json::json!({"spec": {
                "parentRefs": [{"name": HOT}],
                "hostnames": [format!("{name}.example.org")],
                "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
        );
        for present in [true, false] {
            let t = Instant::now();
            if present {
                routes
                    .create(&PostParams::default(), &route)
                    .await
                    .map_err(|e| format!("create {name}: {e}"))?;
            } else {
                routes
                    .delete(&name, &Default::default())
                    .await
                    .map_err(|e| format!("delete {name}: {e}"))?;
            }
            loop {
                // A GET every 20 ms: the latency is up to one poll late.
                if let Ok(gw) = gws.get(HOT).await
                    && has_listener(&gw, &listener) == present
                {
                    break;
                }
                if t.elapsed() > Duration::from_secs(a.timeout) {
                    return Err(format!("{listener} present={present}: not at the deadline"));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let took = t.elapsed().as_secs_f64();
            if present {
                added.push(took)
            } else {
                removed.push(took)
            }
            tokio::time::sleep(Duration::from_millis(a.pause_ms)).await;
        }
        i += 1;
    }
    let after = quiet_writes(&a.metrics, Instant::now() + Duration::from_secs(60))
        .await
        .unwrap_or(-1.0);
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let q = |p: f64| {
            v.get(((v.len() as f64 - 1.0) * p).round() as usize)
                .copied()
                .unwrap_or(-1.0)
        };
        format!(
            "{{\"n\": {}, \"min_s\": {:.3}, \"p50_s\": {:.3}, \"max_s\": {:.3}}}",
            v.len(),
            q(0.0),
            q(0.5),
            q(1.0)
        )
    };
    let first = added.first().copied().unwrap_or(-1.0);
    println!(
        "{{\"first_listener_s\": {first:.3}, \"added\": {}, \"removed\": {}, \"writes_per_change\": {:.2}}}",
        stats(&mut added),
        stats(&mut removed),
        (after - before) / (2 * i).max(1) as f64
    );
    Ok(())
}

/// What the API server sustains on trivial writes (the ceiling for the reconciler's writes):
/// merge patches of one annotation on 64 ConfigMaps, then server-side applies creating small
/// Certificates (the reconciler's most frequent write), then plain creates of the same for
/// comparison, `concurrency` in flight each.
async fn writeloop(client: &Client, a: &Args) -> Result<(), String> {
    let ns = "bench-writeloop";
    let ns_ar = ar("", "v1", "Namespace");
    let cm_ar = ar("", "v1", "ConfigMap");
    let cert_ar = ar("cert-manager.io", "v1", "Certificate");
    create_all(
        client,
        vec![(ns_ar.clone(), obj(&ns_ar, None, ns, serde_json::json!({})))],
    )
    .await;
    let cms: Vec<_> = (0..64)
        .map(|i| {
            (
                cm_ar.clone(),
                obj(
                    &cm_ar,
                    Some(ns),
                    &format!("cm{i:02}"),
                    serde_json::json!({}),
                ),
            )
        })
        .collect();
    create_all(client, cms).await;
    let secs = Duration::from_secs(a.seconds);
    let counter = std::sync::atomic::AtomicU64::new(0);
    let run = |phase: &'static str| {
        let counter = &counter;
        let client = client.clone();
        let (cm_ar, cert_ar) = (cm_ar.clone(), cert_ar.clone());
        async move {
            let started = Instant::now();
            let ok = futures::stream::iter(0..a.concurrency)
                .map(|w| {
                    let client = client.clone();
                    let (cm_ar, cert_ar) = (cm_ar.clone(), cert_ar.clone());
                    async move {
                        let cms: Api<DynamicObject> =
                            Api::namespaced_with(client.clone(), ns, &cm_ar);
                        let certs: Api<DynamicObject> =
                            Api::namespaced_with(client, ns, &cert_ar);
                        let mut ok = 0u64;
                        while started.elapsed() < secs {
                            let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let r = if phase == "merge-patch ConfigMap" {
                                let patch = serde_json::json!({"metadata": {"annotations": {"n": n.to_string()}}});
                                cms.patch(
                                    &format!("cm{:02}", w % 64),
                                    &kube::api::PatchParams::default(),
                                    &kube::api::Patch::Merge(&patch),
                                )
                                .await
                                .map(|_| ())
                            } else if phase == "create Certificate (POST)" {
                                let name = format!("wp-{n}");
                                let c = obj(&cert_ar, Some(ns), &name, serde_json::json!({
                                    "spec": {"secretName": name,
                                        "dnsNames": [format!("p{n}.example.org")],
                                        "issuerRef": {"group": "cert-manager.io",
                                            "kind": "Issuer", "name": "i"}}}));
                                certs.create(&PostParams::default(), &c).await.map(|_| ())
                            } else {
                                let name = format!("wl-{n}");
                                let c = serde_json::json!({
                                    "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                                    "metadata": {"name": name, "namespace": ns,
                                        "labels": {"app.kubernetes.io/managed-by": "bench"}},
                                    "spec": {"secretName": name,
                                        "dnsNames": [format!("h{n}.example.org")],
                                        "issuerRef": {"group": "cert-manager.io",
                                            "kind": "Issuer", "name": "i"}}});
                                certs
                                    .patch(
                                        &name,
                                        &kube::api::PatchParams::apply("bench"),
                                        &kube::api::Patch::Apply(&c),
                                    )
                                    .await
                                    .map(|_| ())
                            };
                            match r {
                                Ok(()) => ok += 1,
                                Err(e) => eprintln!("{phase}: {e}"),
                            }
                        }
                        ok
                    }
                })
                .buffer_unordered(a.concurrency)
                .fold(0u64, |x, y| async move { x + y })
                .await;
            (phase, ok as f64 / started.elapsed().as_secs_f64())
        }
    };
    let mut out = Vec::new();
    for phase in [
        "merge-patch ConfigMap",
        "server-side apply Certificate (create)",
        "create Certificate (POST)",
    ] {
        let (phase, rps) = run(phase).await;
        out.push(format!("{{\"write\": \"{phase}\", \"per_s\": {rps:.0}}}"));
    }
    let nss: Api<DynamicObject> = Api::all_with(client.clone(), &ns_ar);
    let _ = nss.delete(ns, &Default::default()).await;
    println!(
        "{{\"concurrency\": {}, \"seconds\": {}, \"writes\": [{}]}}",
        a.concurrency,
        a.seconds,
        out.join(", ")
    );
    Ok(())
}

/// CPU (user + system) of `pid` and its descendants, in ms.
fn tree_cpu_ms(pid: u32) -> u64 {
    let mut kids: std::collections::HashMap<u32, Vec<u32>> = Default::default();
    let mut ticks: std::collections::HashMap<u32, u64> = Default::default();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        kids.entry(num(1) as u32).or_default().push(p);
        ticks.insert(p, num(11) + num(12));
    }
    let (mut todo, mut total) = (vec![pid], 0);
    while let Some(p) = todo.pop() {
        total += ticks.get(&p).copied().unwrap_or(0);
        todo.extend(kids.get(&p).into_iter().flatten());
    }
    // USER_HZ is 100 on every Linux the bench runs on.
    total * 10
}

/// What one write of each kind the reconciler issues costs the API server (CPU ms of the
/// control-plane process tree per write, measured around a batch of `routes` writes each at
/// `concurrency` in flight): where a cold start's CPU goes.
async fn costs(client: &Client, a: &Args) -> Result<(), String> {
    use kube::api::{Patch, PatchParams};
    use serde_json::json;
    // Each round of `bench/reconcile/run`'s step 4 writes into a namespace of its own: the
    // previous round's is still terminating.
    let ns_owned = std::env::var("COSTS_NS").unwrap_or_else(|_| "bench-costs".to_string());
    let ns = ns_owned.as_str();
    let n = a.routes.max(10);
    let ns_ar = ar("", "v1", "Namespace");
    let tgw_ar = ar("gateway.cozystack.io", "v1alpha1", "TenantGateway");
    let cert_ar = ar("cert-manager.io", "v1", "Certificate");
    let route_ar = ar("gateway.networking.k8s.io", "v1", "HTTPRoute");
    let gw_ar = ar("gateway.networking.k8s.io", "v1", "Gateway");
    create_all(
        client,
        vec![(ns_ar.clone(), obj(&ns_ar, None, ns, json!({})))],
    )
    .await;
    let tgws: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &tgw_ar);
    let tgw = tgws
        .create(
            &PostParams::default(),
            &obj(
                &tgw_ar,
                Some(ns),
                "gw",
                json!({"spec": {"apex": "costs.example.org"}}),
            ),
        )
        .await
        .map_err(|e| format!("TenantGateway: {e}"))?;
    let uid = tgw.metadata.uid.clone().unwrap_or_default();
    let meta = |name: &str| {
        json!({"name": name, "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "tenant-gateway"},
            "ownerReferences": [{"apiVersion": "gateway.cozystack.io/v1alpha1",
                "kind": "TenantGateway", "name": "gw", "uid": uid,
                "controller": true, "blockOwnerDeletion": true}]})
    };
    let listeners = |count: usize| {
        let mut l = vec![json!({"name": "http", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"kinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
                "namespaces": {"from": "Selector", "selector": {"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "In",
                    "values": ["cozy-cert-manager", ns]}]}}}})];
        for i in 0..count {
            l.push(json!({"name": format!("https-h{i:02}"), "port": 443, "protocol": "HTTPS",
                "hostname": format!("h{i:02}.costs.example.org"),
                "tls": {"mode": "Terminate", "certificateRefs": [{"group": "", "kind": "Secret",
                    "name": format!("gw-h{i:02}-tls")}]},
                "allowedRoutes": {"kinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
                    "namespaces": {"from": "Selector", "selector": {"matchExpressions": [{
                        "key": "kubernetes.io/metadata.name", "operator": "In",
                        "values": [ns]}]}}}}));
        }
        l
    };
    let cp = a.cp_pid;
    let mut out = Vec::new();
    // One phase: `count` writes built by `write(i)`, `concurrency` in flight.
    macro_rules! phase {
        ($name:expr, $count:expr, $write:expr) => {{
            if let Ok(pause) = std::env::var("COSTS_PAUSE_BEFORE") {
                if format!("{}", $name).contains(pause.as_str()) {
                    eprintln!("paused before {}: press enter", $name);
                    let _ = std::io::stdin().read_line(&mut String::new());
                }
            }
            let (t0, c0) = (Instant::now(), tree_cpu_ms(cp));
            let count = $count;
            let failed = futures::stream::iter(0..count)
                .map($write)
                .buffer_unordered(a.concurrency)
                .fold(0usize, |f, r: Result<(), kube::Error>| async move {
                    if let Err(e) = r {
                        eprintln!("{}: {e}", $name);
                        f + 1
                    } else {
                        f
                    }
                })
                .await;
            let (wall, cpu) = (t0.elapsed().as_secs_f64(), tree_cpu_ms(cp) - c0);
            out.push(format!(
                "{{\"write\": \"{}\", \"count\": {count}, \"failed\": {failed}, \"per_s\": {:.0}, \"cp_cpu_ms_each\": {:.2}}}",
                $name,
                count as f64 / wall,
                cpu as f64 / count as f64
            ));
            eprintln!("{}", out.last().map(String::as_str).unwrap_or_default());
        }};
    }
    let certs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &cert_ar);
    phase!("server-side apply: create Certificate", n, |i| {
        let certs = certs.clone();
        let name = format!("gw-h{i:04}-tls");
        let body = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": meta(&name),
            "spec": {"secretName": name, "dnsNames": [format!("h{i:04}.costs.example.org")],
                "issuerRef": {"group": "cert-manager.io", "kind": "Issuer", "name": "gw-gateway"}}});
        async move {
            certs
                .patch(
                    &name,
                    &PatchParams::apply("tenant-gateway"),
                    &Patch::Apply(&body),
                )
                .await
                .map(|_| ())
        }
    });
    let routes: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &route_ar);
    let versions = std::sync::Mutex::new(vec![String::new(); n]);
    phase!("create HTTPRoute (POST; the world)", n, |i| {
        let routes = routes.clone();
        let versions = &versions;
        let route_ar = &route_ar;
        async move {
            let r = obj(
                route_ar,
                Some(ns),
                &format!("r{i:04}"),
                json!({"spec": {
                "parentRefs": [{"name": "gw"}],
                "hostnames": [format!("h{i:04}.costs.example.org")],
                "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
            );
            let made = routes.create(&PostParams::default(), &r).await?;
            versions.lock().unwrap_or_else(|p| p.into_inner())[i] =
                made.metadata.resource_version.unwrap_or_default();
            Ok(())
        }
    });
    phase!("JSON patch: route status entry", n, |i| {
        let routes = routes.clone();
        let rv = versions.lock().unwrap_or_else(|p| p.into_inner())[i].clone();
        async move {
            let now = "2026-12-01T00:00:00Z";
            let cond = |t: &str, r: &str| {
                json!({"type": t, "status": "True", "reason": r,
                "message": "", "lastTransitionTime": now, "observedGeneration": 1})
            };
            let patch: json_patch::Patch = serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                {"op": "add", "path": "/status", "value": {"parents": [{
                    "parentRef": {"name": "gw"},
                    "controllerName": "gateway.cozystack.io/tenantgateway-controller",
                    "conditions": [cond("Accepted", "Accepted"), cond("ResolvedRefs", "ResolvedRefs")]}]}}
            ]))
            .map_err(kube::Error::SerdeError)?;
            routes
                .patch_status(
                    &format!("r{i:04}"),
                    &PatchParams::default(),
                    &Patch::<()>::Json(patch),
                )
                .await
                .map(|_| ())
        }
    });
    let few = (n / 10).max(5);
    let tgw_names: Vec<String> = (0..few).map(|i| format!("t{i:03}")).collect();
    phase!("create TenantGateway (POST; the world)", few, |i| {
        let tgws = tgws.clone();
        let t = obj(
            &tgw_ar,
            Some(ns),
            &tgw_names[i],
            json!({"spec": {"apex": format!("t{i}.costs.example.org")}}),
        );
        async move { tgws.create(&PostParams::default(), &t).await.map(|_| ()) }
    });
    let https = a.listeners;
    phase!(
        format!(
            "server-side apply: TenantGateway status, {} listeners",
            https + 1
        ),
        few,
        |i| {
            let tgws = tgws.clone();
            let now = "2026-12-01T00:00:00Z";
            let cond = |t: &str| {
                json!({"type": t, "status": "False", "reason": "Pending",
            "message": "waiting for the Gateway", "lastTransitionTime": now, "observedGeneration": 1})
            };
            let mut listeners = vec![json!({"name": "http", "ready": false, "reason": "Pending"})];
            listeners.extend((0..https).map(|l| {
                json!({"name": format!("https-h{l:02}"),
            "hostname": format!("h{l:02}.t{i}.costs.example.org"), "ready": false,
            "certificateName": format!("gw-h{l:02}-tls"), "reason": "Pending"})
            }));
            let body = json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
            "status": {"observedGeneration": 1,
                "conditions": [cond("Ready"), cond("Programmed"), cond("ListenerCapacity")],
                "listeners": listeners}});
            let name = tgw_names[i].clone();
            async move {
                tgws.patch_status(
                    &name,
                    &PatchParams::apply("tenant-gateway").force(),
                    &Patch::Apply(&body),
                )
                .await
                .map(|_| ())
            }
        }
    );
    let nss: Api<DynamicObject> = Api::all_with(client.clone(), &ns_ar);
    let ns_names: Vec<String> = (0..few).map(|i| format!("{ns}-{i:03}")).collect();
    create_all(
        client,
        ns_names
            .iter()
            .map(|n| (ns_ar.clone(), obj(&ns_ar, None, n, json!({}))))
            .collect(),
    )
    .await;
    phase!("GET + merge patch: namespace label", few, |i| {
        let nss = nss.clone();
        let name = ns_names[i].clone();
        async move {
            let cur = nss.get(&name).await?;
            let patch = json!({"metadata": {"resourceVersion": cur.metadata.resource_version,
                "labels": {"namespace.cozystack.io/gateway": "tenant-x"},
                "annotations": {"gateway.cozystack.io/attached-by": "tenant-x"}}});
            nss.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
        }
    });
    let gws: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &gw_ar);
    for per in [2usize, https] {
        phase!(
            format!("server-side apply: create Gateway, {} listeners", per + 1),
            few,
            |i| {
                let gws = gws.clone();
                let name = format!("gw{per}-{i:03}");
                let body = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": meta(&name),
                "spec": {"gatewayClassName": "cilium", "listeners": listeners(per)}});
                async move {
                    gws.patch(
                        &name,
                        &PatchParams::apply("tenant-gateway"),
                        &Patch::Apply(&body),
                    )
                    .await
                    .map(|_| ())
                }
            }
        );
    }
    // With COSTS_KEEP the caller deletes the namespaces once every round is measured: a
    // namespace's teardown (the namespace controller deleting ~1,300 objects) would otherwise
    // fall into the next round's windows.
    if std::env::var_os("COSTS_KEEP").is_none() {
        let _ = nss.delete(ns, &Default::default()).await;
        for n in &ns_names {
            let _ = nss.delete(n, &Default::default()).await;
        }
    }
    println!(
        "{{\"concurrency\": {}, \"writes\": [{}]}}",
        a.concurrency,
        out.join(", ")
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = parse_args().map_err(|e| format!("usage: {e}"))?;
    let mut cfg =
        tenant_gateway::cluster::client::config(Some(std::path::Path::new(&a.kubeconfig)), None)
            .await?;
    cfg.read_timeout = Some(Duration::from_secs(60));
    let client = Client::try_from(cfg)?;
    match a.cmd.as_str() {
        "populate" => populate(&client, &a).await,
        "converge" => converge(&client, &a).await?,
        "add-route" => add_route(&client, &a).await?,
        "populate-hot" => populate_hot(&client, &a).await,
        "churn-hot" => churn_hot(&client, &a).await?,
        "writeloop" => writeloop(&client, &a).await?,
        "costs" => costs(&client, &a).await?,
        "replay" => replay::replay(&client, &a).await?,
        "undo" => replay::undo(&client, &a).await?,
        "cpu-ms" => println!("{}", tree_cpu_ms(a.cp_pid)),
        other => return Err(format!("unknown command {other}").into()),
    }
    Ok(())
}
