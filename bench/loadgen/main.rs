//! Admission benchmark load generator (SPEC §8; see bench/README.md).
//!
//! `throughput`: the real handler ([`Admission`]) and the do-nothing [`AlwaysAllow`] are
//! served in this process by `server::bind` on 127.0.0.1:0, on a server tokio runtime of
//! their own (as many workers as `serve` gets: one per core); the client runs on a separate
//! runtime. Both handlers get the identical client, connections and payload, in the same run.
//!
//! `rss`: starts the real `tenant-gateway serve` binary with a generated 10,000-namespace
//! snapshot, measures startup-to-ready, drives load and reads VmRSS/VmHWM.

mod client;
mod drive;
mod payload;
mod planning;
mod prom;
mod routes;
mod rss;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tenant_gateway::admission::Admission;
use tenant_gateway::certs;
use tenant_gateway::cluster::{NamespaceSource, StaticNamespaces};
use tenant_gateway::metrics::Metrics;
use tenant_gateway::policy::PolicyConfig;
use tenant_gateway::readiness::Readiness;
use tenant_gateway::server::{self, AlwaysAllow, ReviewHandler, ServeOptions};
use tokio::runtime::Runtime;

use client::{PhaseResult, Pool, Proto, Target};
use prom::Buckets;

#[derive(Debug, Parser)]
#[command(
    name = "loadgen",
    about = "tenant-gateway admission benchmarks (SPEC §8)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Peak req/s and latency of the real handler vs AlwaysAllow, over HTTP/2 and HTTP/1.1.
    Throughput(ThroughputArgs),
    /// Startup-to-ready and RSS of the real `tenant-gateway serve` process under load.
    Rss(RssArgs),
    /// CPU time per review of each handler alone (no TLS, no HTTP), single thread.
    Micro(MicroArgs),
    /// Latency percentiles vs offered load for both handlers (open loop), as CSV for the
    /// plot (`bench/plot.py`).
    Sweep(SweepArgs),
    /// Admission load against a running `serve`, sampling its VmRSS (bench/reconcile).
    Drive(drive::DriveArgs),
    /// Webhook latency while the biggest TenantGateway plans: idle, through the Planner,
    /// inline on the runtime (SPEC §3.7).
    Planning(planning::PlanningArgs),
}

#[derive(Debug, Args)]
struct SweepArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Review body to send.
    #[arg(long, default_value = "create-4k")]
    payload: payload::Shape,
    /// Offered loads as fractions of the real handler's closed-loop peak.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0.1,0.25,0.5,0.75,0.9,1.0,1.2"
    )]
    fractions: Vec<f64>,
    /// Seconds per point (after one second at the same rate).
    #[arg(long, default_value_t = 4.0)]
    duration: f64,
    /// Seconds of the closed-loop peak measurement that sets the scale.
    #[arg(long, default_value_t = 4.0)]
    peak_duration: f64,
    /// Worker threads of the server runtime.
    #[arg(long, default_value_t = default_threads())]
    server_threads: usize,
    /// Where the CSV goes.
    #[arg(long, default_value = "bench/latency-vs-load.csv")]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct MicroArgs {
    /// Reviews per measurement.
    #[arg(long, default_value_t = 20_000)]
    iterations: u32,
    /// Namespaces in the snapshot.
    #[arg(long, default_value_t = 10_000)]
    namespaces: usize,
    /// Routes in the route index the warnings read (0: none, the warnings do no work); a
    /// quarter of them are on the review's Gateway (see bench/loadgen/routes.rs).
    #[arg(long, default_value_t = 0)]
    routes: usize,
    /// The Gateway the review's route names: `root` (tenant-root, 5,000 routes with
    /// `--routes 20000`: two warnings on every review) or `own` (tenant-alice's own Gateway,
    /// a route or two, no warning: the common case of a tenant's route).
    #[arg(long, default_value = "root", value_parser = ["root", "own"])]
    review_gateway: String,
    /// Also measure this many reviews each after one route on the root Gateway changed
    /// (bench/loadgen/routes.rs `Churn`): what a review pays when the Gateway's routes keep
    /// changing, the route change included. Needs `--routes`.
    #[arg(long, default_value_t = 0)]
    churn: u32,
}

#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Requests in flight (HTTP/2 streams in total; HTTP/1.1 connections).
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// HTTP/2 connections the streams are spread over.
    #[arg(long, default_value_t = 2)]
    pub h2_conns: usize,
    /// Worker threads of the client runtime.
    #[arg(long, default_value_t = 2)]
    pub client_threads: usize,
    /// Namespaces in the snapshot (tenant-alice among them).
    #[arg(long, default_value_t = 10_000)]
    pub namespaces: usize,
    /// Protocols to drive, in order.
    #[arg(long, value_delimiter = ',', default_value = "h2,h1", value_parser = parse_proto)]
    pub protocols: Vec<Proto>,
    /// Routes in the real handler's route index, for the SPEC §3.4 warnings (0: no index);
    /// a quarter of them on the review's Gateway (see bench/loadgen/routes.rs).
    #[arg(long, default_value_t = 0)]
    pub routes: usize,
}

#[derive(Debug, Args)]
struct ThroughputArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Seconds of closed-loop load before the measured window.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds of the measured closed-loop (peak) window.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of the open-loop run at half the real handler's peak.
    #[arg(long, default_value_t = 10.0)]
    open_duration: f64,
    /// Peak measurements per handler and protocol; the order alternates between rounds and
    /// the median is reported.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Worker threads of the server runtime (`serve` uses one per core).
    #[arg(long, default_value_t = default_threads())]
    server_threads: usize,
    /// Exit 3 when a target is missed (failures always exit 1).
    #[arg(long)]
    enforce_targets: bool,
    /// Drive only this handler (for a profiler run of one side; no ratio is printed).
    #[arg(long, value_parser = parse_which)]
    only: Option<Which>,
    /// Review bodies to send, in order (SPEC §8's target is for `create-4k`).
    #[arg(long = "payload", value_delimiter = ',', default_value = "create-4k")]
    payloads: Vec<payload::Shape>,
    /// Route changes per second on the review's Gateway while the load runs, both handlers'
    /// windows alike (one thread changes one tenant's route, bench/loadgen/routes.rs
    /// `Churn`): the admission figures while the Gateway's routes change. Needs `--routes`.
    #[arg(long, default_value_t = 0.0)]
    churn: f64,
}

#[derive(Debug, Args)]
pub struct RssArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// The `tenant-gateway` binary to start.
    #[arg(long, default_value = "target/release/tenant-gateway")]
    pub binary: PathBuf,
    /// Seconds of closed-loop load per protocol.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Keep the temporary folder (snapshot, certificates, server log).
    #[arg(long)]
    pub keep_dir: bool,
    /// Exit 3 when a target is missed.
    #[arg(long)]
    pub enforce_targets: bool,
}

// The same global allocator as the `tenant-gateway` binary (src/main.rs), so the bench
// measures the product's stack.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

fn parse_which(s: &str) -> Result<Which, String> {
    match s {
        "real" => Ok(Which::Real),
        "always" => Ok(Which::Always),
        _ => Err(format!("{s:?}: expected real or always")),
    }
}

pub fn parse_proto(s: &str) -> Result<Proto, String> {
    match s {
        "h2" => Ok(Proto::H2),
        "h1" => Ok(Proto::H1),
        _ => Err(format!("{s:?}: expected h2 or h1")),
    }
}

pub fn runtime(name: &str, threads: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Throughput(a) => throughput(a),
        Cmd::Rss(a) => rss::run(a),
        Cmd::Micro(a) => micro(a),
        Cmd::Sweep(a) => sweep(a),
        Cmd::Drive(a) => drive::run(a),
        Cmd::Planning(a) => planning::run(a),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Real,
    Always,
}

impl Which {
    fn label(self) -> &'static str {
        match self {
            Which::Real => "real (Admission)",
            Which::Always => "AlwaysAllow",
        }
    }
}

/// One server bound in this process.
struct InProcess {
    webhook: SocketAddr,
    metrics: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), server::ServerError>>,
}

fn start<H: ReviewHandler>(
    rt: &Runtime,
    handler: Arc<H>,
    metrics: Metrics,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> InProcess {
    let opts = ServeOptions {
        listen: "127.0.0.1:0".parse().expect("loopback address"),
        metrics_listen: "127.0.0.1:0".parse().expect("loopback address"),
        tls_cert_file: cert.to_path_buf(),
        tls_key_file: key.to_path_buf(),
        client_ca_file: None,
        tls_reload_interval: Duration::from_secs(3600),
        shutdown_grace: Duration::from_secs(2),
        max_connections: server::DEFAULT_MAX_CONNECTIONS,
    };
    let bound = rt
        .block_on(server::bind(
            opts,
            handler,
            Arc::new(Readiness::new()),
            metrics,
        ))
        .expect("the benchmark server binds");
    let (webhook, metrics) = (bound.webhook_addr(), bound.metrics_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = rt.spawn(bound.serve(async move {
        let _ = stopped.await;
    }));
    InProcess {
        webhook,
        metrics,
        stop,
        task,
    }
}

impl InProcess {
    fn shutdown(self, rt: &Runtime) {
        let _ = self.stop.send(());
        if let Err(e) = rt.block_on(self.task) {
            eprintln!("warning: benchmark server task failed: {e}");
        }
    }
}

/// One measured phase, with the server-side histogram delta when the handler records one.
struct Measured {
    result: PhaseResult,
    server: Option<Buckets>,
    /// CPU time of the server and client runtimes' threads during the phase, ns.
    cpu: (u64, u64),
}

/// Total on-CPU time (ns, from /proc/self/task/*/schedstat) of this process's threads whose
/// name is `name`: the tokio runtimes name theirs "server" and "client".
fn cpu_ns(name: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut total = 0;
    for t in tasks.flatten() {
        let dir = t.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        total += std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0u64);
    }
    total
}

/// CPU µs per successful request, for the report.
fn per_req(cpu_ns: u64, ok: u64) -> String {
    if ok == 0 {
        return "-".to_string();
    }
    format!("{:.1} µs", cpu_ns as f64 / ok as f64 / 1e3)
}

pub async fn scrape(addr: SocketAddr) -> Buckets {
    match prom::get(addr, "/metrics").await {
        Ok((200, text)) => Buckets::parse(&text, "httproutes"),
        Ok((s, _)) => panic!("GET /metrics answered {s}"),
        Err(e) => panic!("GET /metrics failed: {e}"),
    }
}

pub fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.0} µs", ns as f64 / 1e3)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn load_line(tag: &str, r: &PhaseResult) -> String {
    let mut s = format!(
        "{tag}: {:.0} req/s ({} ok in {:.1} s), client p50 {} p99 {} max {}",
        r.rps(),
        r.ok,
        r.secs,
        fmt_ns(r.latency.value_at_quantile(0.5)),
        fmt_ns(r.latency.value_at_quantile(0.99)),
        fmt_ns(r.latency.max()),
    );
    if let Some(l) = &r.lag {
        s.push_str(&format!(
            ", issue lag p99 {}",
            fmt_ns(l.value_at_quantile(0.99))
        ));
    }
    if r.failures.total() > 0 {
        s.push_str(&format!(
            ", FAILURES {} (transport {}, status {}, not allowed {}; first: {})",
            r.failures.total(),
            r.failures.transport,
            r.failures.status,
            r.failures.not_allowed,
            r.failures.first.as_deref().unwrap_or("")
        ));
    }
    s
}

/// The real handler, and what changes a route on its route index's root Gateway.
fn real_handler(
    namespaces: usize,
    routes: usize,
    metrics: Metrics,
) -> (Admission, Option<routes::Churn>) {
    let ns = payload::namespaces(namespaces);
    let mut snapshot = StaticNamespaces::default();
    for n in &ns {
        snapshot.insert(&n.name, n.labels.clone());
    }
    let cfg = PolicyConfig {
        root_host: Some(payload::ROOT_HOST.to_string()),
        ..PolicyConfig::default()
    };
    let admission = Admission::new(
        Arc::new(cfg),
        NamespaceSource::Static(Arc::new(snapshot)),
        metrics,
    );
    if routes == 0 {
        return (admission, None);
    }
    let layout = routes::layout(routes, &ns);
    println!("{}", layout.describe());
    let index = Arc::new(layout.index);
    let churn = layout
        .churn
        .map(|tenant| routes::Churn::new(index.clone(), tenant));
    (admission.with_routes(index), churn)
}

/// The warnings the real handler gives the review (printed, so a run shows that the warning
/// path ran); `None` when it did not allow it.
fn warnings_given(real: &Admission, review: &payload::Review) -> Option<Vec<String>> {
    let uid = payload::uid(u32::MAX, 0);
    let r = futures::executor::block_on(real.handle(
        Some(tenant_gateway::admission::WebhookResource::HttpRoutes),
        &review.with_uid(&uid),
    ));
    (r.status == 200 && payload::allowed_for(&r.body, &uid)).then(|| routes::warnings_in(&r.body))
}

/// "[20000 routes, 2 warnings]" for the verdict lines of a run with a route index.
fn scope(routes: usize, warnings: usize) -> String {
    if routes == 0 {
        String::new()
    } else {
        format!(" [{routes} routes indexed, {warnings} warning(s) per review]")
    }
}

/// Mean wall time of `f` over `n` calls on this (otherwise idle) thread, in ns.
fn time_per_call(n: u32, mut f: impl FnMut(u32)) -> f64 {
    for i in 0..n.min(1000) {
        f(i);
    }
    let t = std::time::Instant::now();
    for i in 0..n {
        f(i);
    }
    t.elapsed().as_nanos() as f64 / f64::from(n.max(1))
}

fn micro(a: MicroArgs) -> ExitCode {
    let review = match a.review_gateway.as_str() {
        "own" => payload::review_on(payload::Shape::Create4k, payload::TENANT_NS),
        _ => payload::httproute_review(),
    };
    let (real, churn) = real_handler(a.namespaces, a.routes, Metrics::new());
    let Some(given) = warnings_given(&real, &review) else {
        println!("INVALID RUN: the real handler did not allow the review");
        return ExitCode::from(1);
    };
    for w in &given {
        println!("warning given: {w}");
    }
    let bodies: Vec<Vec<u8>> = (0..64u32)
        .map(|w| review.with_uid(&payload::uid(w, 0)))
        .collect();
    let body = |i: u32| &bodies[i as usize % bodies.len()];
    let mut ok = true;
    let mut rows = Vec::new();
    let mut run = |name: &str, f: &mut dyn FnMut(u32)| {
        let ns = time_per_call(a.iterations, f);
        rows.push(format!("| {name} | {:.1} µs |", ns / 1e3));
    };
    run(
        "AlwaysAllow::decide (scan the body, read the uid, write the answer)",
        &mut |i| {
            let r = AlwaysAllow::decide(body(i));
            std::hint::black_box(r);
        },
    );
    run(
        "Admission::handle (the real handler, whole decision)",
        &mut |i| {
            let r = futures::executor::block_on(real.handle(
                Some(tenant_gateway::admission::WebhookResource::HttpRoutes),
                body(i),
            ));
            ok &= r.status == 200 && payload::allowed_for(&r.body, &payload::uid(i % 64, 0));
            std::hint::black_box(r);
        },
    );
    run(
        "reference: serde_json::from_slice::<IgnoredAny> (validate only)",
        &mut |i| {
            let r: serde::de::IgnoredAny =
                serde_json::from_slice(body(i)).expect("the payload is JSON");
            std::hint::black_box(r);
        },
    );
    run(
        "reference: serde_json::from_slice::<Value> + drop (whole body as a DOM)",
        &mut |i| {
            let v: serde_json::Value =
                serde_json::from_slice(body(i)).expect("the payload is JSON");
            std::hint::black_box(v);
        },
    );
    if let Some(churn) = churn.as_ref().filter(|_| a.churn > 0) {
        // No warm-up of a thousand calls here: one call may summarise a 5,000-route Gateway.
        let handle = |i: u32| {
            churn.change(u64::from(i));
            futures::executor::block_on(real.handle(
                Some(tenant_gateway::admission::WebhookResource::HttpRoutes),
                body(i),
            ))
        };
        let r = handle(0);
        ok &= r.status == 200;
        let t = std::time::Instant::now();
        for i in 1..=a.churn {
            let r = handle(i);
            ok &= r.status == 200 && payload::allowed_for(&r.body, &payload::uid(i % 64, 0));
            std::hint::black_box(r);
        }
        let ns = t.elapsed().as_nanos() as f64 / f64::from(a.churn);
        rows.push(format!(
            "| one route on the review's Gateway changed, then Admission::handle ({} times) | {:.1} µs |",
            a.churn,
            ns / 1e3
        ));
    }
    println!(
        "payload {} bytes, {} iterations each, one thread, no TLS/HTTP, {} routes indexed, {} warning(s) per review",
        review.len(),
        a.iterations,
        a.routes,
        given.len()
    );
    println!();
    println!("| operation | time per review |");
    println!("|---|---:|");
    for r in &rows {
        println!("{r}");
    }
    if !ok {
        println!("INVALID RUN: the real handler did not allow the review");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// Both handlers served in this process on one server runtime, and the client runtime.
struct Pair {
    /// Holds the development certificates the servers read.
    _dir: tempfile::TempDir,
    dev: certs::DevCerts,
    server_rt: Runtime,
    client_rt: Runtime,
    real_srv: InProcess,
    always_srv: InProcess,
    /// The real handler the server runs, for [`warnings_given`].
    real: Arc<Admission>,
    /// Changes a route on the real handler's root Gateway (with `--routes`).
    churn: Option<routes::Churn>,
}

impl Pair {
    fn start(load: &LoadArgs, server_threads: usize) -> Pair {
        let (namespaces, client_threads) = (load.namespaces, load.client_threads);
        let dir = tempfile::tempdir().expect("a temporary folder");
        let dev = certs::generate(&certs::default_hosts()).expect("development certificates");
        certs::write(dir.path(), &dev).expect("certificates written");
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let real_metrics = Metrics::new();
        let (real, churn) = real_handler(namespaces, load.routes, real_metrics.clone());
        let real = Arc::new(real);
        let server_rt = runtime("server", server_threads);
        let client_rt = runtime("client", client_threads);
        let real_srv = start(&server_rt, real.clone(), real_metrics, &cert, &key);
        let always_srv = start(
            &server_rt,
            Arc::new(AlwaysAllow),
            Metrics::new(),
            &cert,
            &key,
        );
        Pair {
            _dir: dir,
            dev,
            server_rt,
            client_rt,
            real_srv,
            always_srv,
            real,
            churn,
        }
    }
}

/// Changes the root Gateway's routes `per_s` times a second on a thread of its own until
/// dropped; counts the changes.
struct Churning {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Churning {
    fn start(churn: routes::Churn, per_s: f64) -> Churning {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let every = Duration::from_secs_f64(1.0 / per_s);
            let started = std::time::Instant::now();
            let mut k = 0u64;
            while !halt.load(std::sync::atomic::Ordering::Relaxed) {
                churn.change(k);
                k += 1;
                // On schedule, not after each change: k changes due by k · every.
                let due = started + every.mul_f64(k as f64);
                std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
            }
            k
        });
        Churning {
            stop,
            thread: Some(thread),
        }
    }

    /// Stop; the changes made.
    fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .take()
            .map_or(0, |t| t.join().unwrap_or_default())
    }
}

fn throughput(a: ThroughputArgs) -> ExitCode {
    let Pair {
        _dir,
        dev,
        server_rt,
        client_rt,
        real_srv,
        always_srv,
        real,
        churn,
    } = Pair::start(&a.load, a.server_threads);
    let churning = match churn {
        Some(churn) if a.churn > 0.0 => {
            println!(
                "route changes on the review's Gateway: {} per second while the load runs",
                a.churn
            );
            Some(Churning::start(churn, a.churn))
        }
        _ if a.churn > 0.0 => {
            eprintln!("--churn needs --routes");
            return ExitCode::from(2);
        }
        _ => None,
    };
    let target = |w: Which| Target {
        addr: match w {
            Which::Real => real_srv.webhook,
            Which::Always => always_srv.webhook,
        },
        ca_pem: dev.ca_cert_pem.clone(),
    };
    let metrics_of = |w: Which| match w {
        Which::Real => Some(real_srv.metrics),
        // AlwaysAllow records no admission histogram.
        Which::Always => None,
    };

    for &shape in &a.payloads {
        println!(
            "payload {}: {} bytes HTTPRoute AdmissionReview in {} -> {}; snapshot {} namespaces; {} routes indexed",
            shape.label(),
            payload::review(shape).len(),
            payload::TENANT_NS,
            payload::PATH,
            a.load.namespaces,
            a.load.routes
        );
    }
    println!(
        "server runtime {} workers, client runtime {} workers, {} in flight, HTTP/2 over {} connection(s); warm-up {} s, peak window {} s, open loop {} s, {} round(s)",
        a.server_threads,
        a.load.client_threads,
        a.load.concurrency,
        a.load.h2_conns,
        a.warmup,
        a.duration,
        a.open_duration,
        a.rounds
    );

    let warmup = Duration::from_secs_f64(a.warmup);
    let window = Duration::from_secs_f64(a.duration);
    let open_window = Duration::from_secs_f64(a.open_duration);
    let mut failures = 0u64;
    let mut rows_peak = Vec::new();
    let mut rows_half = Vec::new();
    let mut verdicts = Vec::new();

    for (&shape, &proto) in a
        .payloads
        .iter()
        .flat_map(|s| a.load.protocols.iter().map(move |p| (s, p)))
    {
        let review = payload::review(shape);
        let Some(given) = warnings_given(&real, &review) else {
            println!(
                "INVALID RUN: the real handler did not allow the {} review",
                shape.label()
            );
            return ExitCode::from(1);
        };
        for w in &given {
            println!("[{} {}] warning given: {w}", proto.label(), shape.label());
        }
        let scope = scope(a.load.routes, given.len());
        let tag = format!("{} {}", proto.label(), shape.label());
        let payload_col = if a.load.routes == 0 {
            shape.label().to_string()
        } else {
            format!("{} + {} routes", shape.label(), a.load.routes)
        };
        let mut peaks: Vec<(Which, Measured)> = Vec::new();
        for round in 0..a.rounds.max(1) {
            let order = if round % 2 == 0 {
                [Which::Real, Which::Always]
            } else {
                [Which::Always, Which::Real]
            };
            for w in order.into_iter().filter(|w| a.only.is_none_or(|o| o == *w)) {
                let m = client_rt.block_on(async {
                    let mut pool =
                        Pool::open(&target(w), proto, a.load.concurrency, a.load.h2_conns)
                            .await
                            .expect("connections open");
                    // The warm-up runs first, so the server histogram and the CPU times
                    // cover the measured window only.
                    let warm =
                        client::closed_loop(&mut pool, &review, warmup, Duration::ZERO).await;
                    let before = match metrics_of(w) {
                        Some(addr) => Some(scrape(addr).await),
                        None => None,
                    };
                    let cpu0 = (cpu_ns("server"), cpu_ns("client"));
                    let mut result =
                        client::closed_loop(&mut pool, &review, Duration::ZERO, window).await;
                    result.failures.merge(warm.failures);
                    let cpu = (
                        cpu_ns("server").saturating_sub(cpu0.0),
                        cpu_ns("client").saturating_sub(cpu0.1),
                    );
                    let server = match (metrics_of(w), before) {
                        (Some(addr), Some(b)) => Some(scrape(addr).await.since(&b)),
                        _ => None,
                    };
                    Measured {
                        result,
                        server,
                        cpu,
                    }
                });
                failures += m.result.failures.total();
                println!(
                    "{}; CPU per request: server {}, client {}",
                    load_line(
                        &format!("[{tag} peak r{}] {}", round + 1, w.label()),
                        &m.result
                    ),
                    per_req(m.cpu.0, m.result.ok),
                    per_req(m.cpu.1, m.result.ok),
                );
                peaks.push((w, m));
            }
        }
        let rps_of = |w: Which| {
            median(
                peaks
                    .iter()
                    .filter(|(x, _)| *x == w)
                    .map(|(_, m)| m.result.rps())
                    .collect(),
            )
        };
        let (real_rps, always_rps) = (rps_of(Which::Real), rps_of(Which::Always));
        let ratio = real_rps / always_rps;
        for w in [Which::Real, Which::Always] {
            // Latency columns from the round whose req/s is closest to the median.
            let rps = rps_of(w);
            let Some((_, m)) = peaks
                .iter()
                .filter(|(x, _)| *x == w)
                .min_by(|(_, x), (_, y)| {
                    (x.result.rps() - rps)
                        .abs()
                        .total_cmp(&(y.result.rps() - rps).abs())
                })
            else {
                continue;
            };
            rows_peak.push(format!(
                "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
                proto.label(),
                payload_col,
                w.label(),
                rps,
                per_req(m.cpu.0, m.result.ok),
                per_req(m.cpu.1, m.result.ok),
                fmt_ns(m.result.latency.value_at_quantile(0.5)),
                fmt_ns(m.result.latency.value_at_quantile(0.99)),
                fmt_ns(m.result.latency.value_at_quantile(0.999)),
                m.server
                    .as_ref()
                    .map_or("-".to_string(), |b| b.quantile_text(0.99)),
                if w == Which::Real {
                    format!("{ratio:.3}")
                } else {
                    String::new()
                },
            ));
        }
        verdicts.push(if shape == payload::Shape::Create4k {
            format!(
                "{} ratio{scope} real/AlwaysAllow req/s = {:.3} (target >= 0.80): {}",
                proto.label(),
                ratio,
                pass(ratio >= 0.8)
            )
        } else {
            // SPEC §8's target is stated for the 4 KiB review; the larger bodies are reported.
            format!(
                "{tag} ratio{scope} real/AlwaysAllow req/s = {ratio:.3} (reported; no SPEC target)"
            )
        });

        let rate = real_rps / 2.0;
        for w in [Which::Real, Which::Always] {
            let m = client_rt.block_on(async {
                let mut pool = Pool::open(&target(w), proto, a.load.concurrency, a.load.h2_conns)
                    .await
                    .expect("connections open");
                // A second at the target rate first, so the run starts in steady state.
                let warm =
                    client::open_loop(&mut pool, &review, rate, Duration::from_secs(1)).await;
                let before = match metrics_of(w) {
                    Some(addr) => Some(scrape(addr).await),
                    None => None,
                };
                let mut result = client::open_loop(&mut pool, &review, rate, open_window).await;
                result.failures.merge(warm.failures);
                let server = match (metrics_of(w), before) {
                    (Some(addr), Some(b)) => Some(scrape(addr).await.since(&b)),
                    _ => None,
                };
                Measured {
                    result,
                    server,
                    cpu: (0, 0),
                }
            });
            failures += m.result.failures.total();
            let mut line = load_line(
                &format!("[{tag} open @{:.0}/s] {}", rate, w.label()),
                &m.result,
            );
            if let Some(b) = &m.server {
                line.push_str(&format!(
                    "; server n={} p50 {} p99 {} p999 {} share<=1ms {:.4}",
                    b.count(),
                    b.quantile_text(0.5),
                    b.quantile_text(0.99),
                    b.quantile_text(0.999),
                    b.fraction_le(0.001).unwrap_or(0.0)
                ));
            }
            println!("{line}");
            rows_half.push(format!(
                "| {} | {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} |",
                proto.label(),
                payload_col,
                w.label(),
                rate,
                m.result.rps(),
                fmt_ns(m.result.latency.value_at_quantile(0.5)),
                fmt_ns(m.result.latency.value_at_quantile(0.99)),
                fmt_ns(m.result.latency.value_at_quantile(0.999)),
                fmt_ns(
                    m.result
                        .lag
                        .as_ref()
                        .map_or(0, |l| l.value_at_quantile(0.99))
                ),
                m.server
                    .as_ref()
                    .map_or("-".to_string(), |b| b.quantile_text(0.5)),
                m.server
                    .as_ref()
                    .map_or("-".to_string(), |b| b.quantile_text(0.99)),
                m.server
                    .as_ref()
                    .map_or("-".to_string(), |b| b.quantile_text(0.999)),
                m.server
                    .as_ref()
                    .and_then(|b| b.fraction_le(0.001))
                    .map_or(String::new(), |f| format!("{:.2} %", f * 100.0)),
            ));
            if w == Which::Real && shape == payload::Shape::Create4k {
                let p99 = m.server.as_ref().and_then(|b| b.quantile(0.99));
                verdicts.push(format!(
                    "{} server-side p99{scope} at half peak = {} (target < 1 ms): {}",
                    proto.label(),
                    m.server
                        .as_ref()
                        .map_or("-".to_string(), |b| b.quantile_text(0.99)),
                    pass(p99.is_some_and(|p| p < 0.001))
                ));
            }
        }
    }

    real_srv.shutdown(&server_rt);
    always_srv.shutdown(&server_rt);
    if let Some(c) = churning {
        println!("route changes made on the review's Gateway: {}", c.stop());
    }

    println!();
    println!("### Peak (closed loop, {} in flight)", a.load.concurrency);
    println!();
    println!(
        "| protocol | payload | handler | req/s | server CPU/req | client CPU/req | client p50 | client p99 | client p999 | server p99 | ratio real/AA |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows_peak {
        println!("{r}");
    }
    println!();
    println!("### Half of the real handler's peak (open loop, fixed-interval schedule)");
    println!();
    println!(
        "| protocol | payload | handler | target req/s | achieved req/s | client p50 | client p99 | client p999 | issue lag p99 | server p50 | server p99 | server p999 | server <= 1 ms |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows_half {
        println!("{r}");
    }
    println!();
    for v in &verdicts {
        println!("{v}");
    }
    if failures > 0 {
        println!("INVALID RUN: {failures} request(s) failed (see the lines above)");
        return ExitCode::from(1);
    }
    if a.enforce_targets && verdicts.iter().any(|v| v.ends_with("MISS")) {
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
}

pub fn pass(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

/// Open-loop latency at fractions of the real handler's peak, both handlers, one protocol.
fn sweep(a: SweepArgs) -> ExitCode {
    let review = payload::review(a.payload);
    let Pair {
        _dir,
        dev,
        server_rt,
        client_rt,
        real_srv,
        always_srv,
        real: _,
        churn: _,
    } = Pair::start(&a.load, a.server_threads);
    let Some(&proto) = a.load.protocols.first() else {
        eprintln!("--protocols is empty");
        return ExitCode::from(2);
    };
    let target = |w: Which| Target {
        addr: match w {
            Which::Real => real_srv.webhook,
            Which::Always => always_srv.webhook,
        },
        ca_pem: dev.ca_cert_pem.clone(),
    };
    let mut failures = 0u64;
    let peak = client_rt.block_on(async {
        let mut pool = Pool::open(
            &target(Which::Real),
            proto,
            a.load.concurrency,
            a.load.h2_conns,
        )
        .await
        .expect("connections open");
        client::closed_loop(
            &mut pool,
            &review,
            Duration::from_secs(1),
            Duration::from_secs_f64(a.peak_duration),
        )
        .await
    });
    failures += peak.failures.total();
    let peak_rps = peak.rps();
    println!(
        "sweep: {} {} peak of the real handler {:.0} req/s; {} points x 2 handlers, {} s each",
        proto.label(),
        a.payload.label(),
        peak_rps,
        a.fractions.len(),
        a.duration
    );
    let mut csv = String::from(
        "handler,protocol,payload,fraction,offered_rps,achieved_rps,client_p50_us,client_p99_us,client_p999_us,server_p50_us,server_p99_us,server_p999_us\n",
    );
    let us = |ns: u64| ns as f64 / 1e3;
    for &f in &a.fractions {
        let rate = peak_rps * f;
        for w in [Which::Real, Which::Always] {
            let (result, server) = client_rt.block_on(async {
                let mut pool = Pool::open(&target(w), proto, a.load.concurrency, a.load.h2_conns)
                    .await
                    .expect("connections open");
                let warm =
                    client::open_loop(&mut pool, &review, rate, Duration::from_secs(1)).await;
                let before = match w {
                    Which::Real => Some(scrape(real_srv.metrics).await),
                    Which::Always => None,
                };
                let mut result = client::open_loop(
                    &mut pool,
                    &review,
                    rate,
                    Duration::from_secs_f64(a.duration),
                )
                .await;
                result.failures.merge(warm.failures);
                let server = match before {
                    Some(b) => Some(scrape(real_srv.metrics).await.since(&b)),
                    None => None,
                };
                (result, server)
            });
            failures += result.failures.total();
            let sq = |q: f64| {
                server
                    .as_ref()
                    .and_then(|b| b.quantile(q))
                    .map_or(String::new(), |v| format!("{:.1}", v * 1e6))
            };
            println!(
                "{}",
                load_line(
                    &format!("[sweep {f:.2} @{rate:.0}/s] {}", w.label()),
                    &result
                )
            );
            csv.push_str(&format!(
                "{},{},{},{f},{rate:.0},{:.0},{:.1},{:.1},{:.1},{},{},{}\n",
                w.label(),
                proto.label(),
                a.payload.label(),
                result.rps(),
                us(result.latency.value_at_quantile(0.5)),
                us(result.latency.value_at_quantile(0.99)),
                us(result.latency.value_at_quantile(0.999)),
                sq(0.5),
                sq(0.99),
                sq(0.999),
            ));
        }
    }
    real_srv.shutdown(&server_rt);
    always_srv.shutdown(&server_rt);
    if let Err(e) = std::fs::write(&a.out, csv) {
        eprintln!("cannot write {}: {e}", a.out.display());
        return ExitCode::from(2);
    }
    println!("sweep written to {}", a.out.display());
    if failures > 0 {
        println!("INVALID RUN: {failures} request(s) failed (see the lines above)");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
