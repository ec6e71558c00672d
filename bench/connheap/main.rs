//! Live heap that open admission connections add to the webhook server (issue 25 item 1,
//! SPEC §8's "at load"), counted by dhat: exact bytes, whatever the machine's load.
//!
//! The server (`AlwaysAllow` behind the real `server::bind` stack: TLS 1.3, hyper, axum,
//! the connection slots and body budget) runs in this process under dhat. The client runs in
//! a child process (this executable again, `client`), so its own buffers are not counted:
//! it opens `--conns` HTTP/1.1 connections, or one HTTP/2 connection carrying `--conns`
//! streams, sends one review on each, reads every answer and then holds the connections
//! open and idle, as the API server does between reviews. The server's live heap is read
//! before the client connects and once the connections are idle; the difference divided by
//! the connections (or streams) is what each costs.
//!
//! `--hold`: the handler keeps every review until `--conns` of them (or, on HTTP/2, the
//! server's stream limit) are inside it at once; the heap is read then, so the figure is
//! what a connection with a review in progress holds (its body, hyper's and rustls' state
//! mid-request), the most a closed-loop load can have at one moment.
//!
//! `--dhat-file PATH` writes dhat's profile at the idle-connections moment (its "at end"
//! figures are then the held bytes by allocation site, for `dh_view` or a script).

// The load generator's client and payloads, so both benches send the same requests; what
// this tool does not call of them is the load generator's.
#[allow(dead_code)]
#[path = "../loadgen/client.rs"]
mod client;
#[allow(dead_code)]
#[path = "../loadgen/payload.rs"]
mod payload;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use tenant_gateway::admission::{Reply, WebhookResource};
use tenant_gateway::certs;
use tenant_gateway::metrics::Metrics;
use tenant_gateway::readiness::Readiness;
use tenant_gateway::server::{self, AlwaysAllow, ReviewHandler, ServeOptions};

use client::{Pool, Proto, Target};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[derive(Debug, Parser)]
#[command(name = "conn-heap", about = "live heap of idle admission connections")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Serve, drive the child client, print the server's held bytes.
    Measure(MeasureArgs),
    /// The child: connect, one review each (and `--rounds` more), report, hold until stdin
    /// closes. Also a client for a `tenant-gateway serve` under callgrind
    /// (`bench/connheap/callgrind`).
    Client(ClientArgs),
    /// Write what `tenant-gateway serve` needs for `bench/connheap/callgrind`: development
    /// certificates (`tls.crt`, `tls.key`, `ca.crt`) and a namespace snapshot.
    Files(FilesArgs),
}

#[derive(Debug, Args)]
struct FilesArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long, default_value_t = 10_000)]
    namespaces: usize,
}

#[derive(Debug, Args)]
struct MeasureArgs {
    /// `h1` (one connection per review) or `h2` (one connection, a stream per review).
    #[arg(long, value_parser = parse_proto)]
    proto: Proto,
    #[arg(long, default_value_t = 64)]
    conns: usize,
    #[arg(long, default_value = "create-4k")]
    payload: payload::Shape,
    /// Write dhat's profile here while the connections are held.
    #[arg(long)]
    dhat_file: Option<PathBuf>,
    /// Read the heap while the reviews are inside the handler, not after their answers.
    #[arg(long)]
    hold: bool,
}

/// `AlwaysAllow`; once armed (`--hold`), every review after the first waits for the
/// release (the client sends its first review alone and waits for its answer).
#[derive(Default)]
struct Holding {
    armed: AtomicBool,
    arrived: AtomicUsize,
    inside: AtomicUsize,
    release: tokio::sync::Notify,
    released: AtomicBool,
}

impl ReviewHandler for Holding {
    async fn handle(&self, _target: WebhookResource, body: bytes::Bytes) -> Reply {
        if self.armed.load(SeqCst) && self.arrived.fetch_add(1, SeqCst) > 0 {
            let released = self.release.notified();
            self.inside.fetch_add(1, SeqCst);
            if !self.released.load(SeqCst) {
                released.await;
            }
        }
        AlwaysAllow::decide(&body)
    }
}

#[derive(Debug, Args)]
struct ClientArgs {
    #[arg(long)]
    addr: std::net::SocketAddr,
    #[arg(long)]
    ca_file: PathBuf,
    #[arg(long, value_parser = parse_proto)]
    proto: Proto,
    #[arg(long)]
    conns: usize,
    #[arg(long)]
    payload: payload::Shape,
    /// Rounds of one review on every connection after the first, before reporting.
    #[arg(long, default_value_t = 0)]
    rounds: usize,
}

fn parse_proto(s: &str) -> Result<Proto, String> {
    match s {
        "h1" => Ok(Proto::H1),
        "h2" => Ok(Proto::H2),
        other => Err(format!("unknown protocol {other:?}: h1 or h2")),
    }
}

fn proto_arg(p: Proto) -> &'static str {
    match p {
        Proto::H1 => "h1",
        Proto::H2 => "h2",
    }
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Measure(a) => measure(a),
        Cmd::Client(a) => run_client(a),
        Cmd::Files(a) => files(a),
    }
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}

fn run_client(a: ClientArgs) -> ExitCode {
    let rt = runtime(1);
    let ca_pem = std::fs::read_to_string(&a.ca_file).expect("the CA file is readable");
    let target = Target {
        addr: a.addr,
        ca_pem,
    };
    let review = payload::review(a.payload);
    let mut pool = match rt.block_on(Pool::open(&target, a.proto, a.conns, 1)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("client: connecting: {e:#}");
            return ExitCode::from(1);
        }
    };
    let mut failures = rt.block_on(client::each_once(&mut pool, &review));
    for _ in 0..a.rounds {
        failures.merge(rt.block_on(client::each_once(&mut pool, &review)));
    }
    let sent = (a.conns * (a.rounds + 1)) as u64;
    println!(
        "answered {} failed {}",
        sent - failures.total(),
        failures.total()
    );
    if let Some(f) = failures.first {
        eprintln!("client: first failure: {f}");
    }
    let _ = std::io::stdout().flush();
    // Hold the connections until the parent closes our stdin.
    let mut sink = String::new();
    let _ = std::io::stdin().read_line(&mut sink);
    drop(pool);
    ExitCode::SUCCESS
}

fn files(a: FilesArgs) -> ExitCode {
    let dev = certs::generate(&certs::default_hosts()).expect("development certificates");
    certs::write(&a.dir, &dev).expect("certificates written");
    std::fs::write(a.dir.join("ca.crt"), &dev.ca_cert_pem).expect("the CA written");
    let ns = payload::namespaces(a.namespaces);
    std::fs::write(a.dir.join("namespaces.yaml"), payload::namespaces_yaml(&ns))
        .expect("snapshot written");
    ExitCode::SUCCESS
}

/// Live bytes and blocks once they stop moving (the server task answering, connection tasks
/// being reaped): read every 50 ms until two reads 200 ms apart agree, at most 10 s.
fn settled() -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let read = || {
        let s = dhat::HeapStats::get();
        (s.curr_bytes as u64, s.curr_blocks as u64)
    };
    let mut last = read();
    let mut same_since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let now = read();
        if now != last {
            last = now;
            same_since = Instant::now();
        } else if same_since.elapsed() >= Duration::from_millis(200) {
            break;
        }
    }
    last
}

struct Child {
    proc: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

fn spawn_client(
    addr: std::net::SocketAddr,
    ca: &std::path::Path,
    proto: Proto,
    conns: usize,
    shape: payload::Shape,
) -> Child {
    let exe = std::env::current_exe().expect("this executable's path");
    let shape = match shape {
        payload::Shape::Create4k => "create-4k",
        payload::Shape::Create64k => "create-64k",
        payload::Shape::Update2x64k => "update-2x64k",
    };
    let mut proc = Command::new(exe)
        .args(["client", "--addr", &addr.to_string(), "--ca-file"])
        .arg(ca)
        .args(["--proto", proto_arg(proto), "--conns", &conns.to_string()])
        .args(["--payload", shape, "--rounds", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the client process starts");
    let out = BufReader::new(proc.stdout.take().expect("piped stdout"));
    Child { proc, out }
}

impl Child {
    /// The client's "answered N failed M" line.
    fn answered(&mut self) -> String {
        let mut line = String::new();
        self.out
            .read_line(&mut line)
            .expect("the client reports its answers");
        line.trim().to_string()
    }

    fn finish(mut self) {
        drop(self.proc.stdin.take());
        let _ = self.proc.wait();
    }
}

fn measure(a: MeasureArgs) -> ExitCode {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let dev = certs::generate(&certs::default_hosts()).expect("development certificates");
    certs::write(dir.path(), &dev).expect("certificates written");
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, &dev.ca_cert_pem).expect("the CA written");
    let mut profiler = Some(match &a.dhat_file {
        Some(f) => dhat::Profiler::builder().file_name(f).build(),
        None => dhat::Profiler::builder().testing().build(),
    });
    // `serve` gets one worker a core; two is this machine's and the bench's.
    let rt = runtime(2);
    let opts = ServeOptions {
        listen: "127.0.0.1:0".parse().expect("loopback address"),
        metrics_listen: "127.0.0.1:0".parse().expect("loopback address"),
        tls_cert_file: dir.path().join("tls.crt"),
        tls_key_file: dir.path().join("tls.key"),
        client_ca_file: None,
        tls_reload_interval: Duration::from_secs(3600),
        shutdown_grace: Duration::from_secs(2),
        max_connections: server::DEFAULT_MAX_CONNECTIONS,
    };
    let handler = Arc::new(Holding::default());
    let bound = rt
        .block_on(server::bind(
            opts,
            handler.clone(),
            Arc::new(Readiness::new()),
            Metrics::new(),
        ))
        .expect("the server binds");
    let addr = bound.webhook_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = rt.spawn(bound.serve(async move {
        let _ = stopped.await;
    }));

    // One connection of the same protocol first, closed again: what the first review
    // initialises once (lazies, the runtime's worker state, TLS session tickets) is not
    // a connection's.
    let mut warm = spawn_client(addr, &ca, a.proto, 1, a.payload);
    let warm_line = warm.answered();
    warm.finish();
    let before = settled();

    handler.armed.store(a.hold, SeqCst);
    let mut child = spawn_client(addr, &ca, a.proto, a.conns, a.payload);
    let held = if a.hold {
        // All but the first review (h1), or as many as the stream limit lets in (h2).
        let expect = match a.proto {
            Proto::H1 => a.conns - 1,
            Proto::H2 => (a.conns - 1).min(server::DEFAULT_MAX_CONCURRENT_STREAMS as usize),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while handler.inside.load(SeqCst) < expect && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let inside = handler.inside.load(SeqCst);
        let held = settled();
        println!("reviews inside the handler when read: {inside} (expected {expect})");
        // The profile (if asked) with the reviews still inside.
        drop(profiler.take());
        handler.released.store(true, SeqCst);
        handler.release.notify_waiters();
        held
    } else {
        (0, 0)
    };
    let line = child.answered();
    let held = if a.hold { held } else { settled() };
    let per = (held.0 as f64 - before.0 as f64) / a.conns as f64;
    let per_blocks = (held.1 as f64 - before.1 as f64) / a.conns as f64;
    println!(
        "{} {} x {:?} ({}): warm-up {warm_line}; {line}",
        proto_arg(a.proto),
        a.conns,
        a.payload,
        match a.proto {
            Proto::H1 => "connections",
            Proto::H2 => "streams on one connection",
        }
    );
    println!(
        "server live heap: before {} B / {} blocks, held {} B / {} blocks: +{} B, {:.0} B and {:.1} blocks each",
        before.0,
        before.1,
        held.0,
        held.1,
        held.0 as i64 - before.0 as i64,
        per,
        per_blocks
    );
    // Writes the profile (if asked) with the connections still held.
    drop(profiler.take());
    child.finish();
    let _ = stop.send(());
    let _ = rt.block_on(task);
    if line.ends_with("failed 0") {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
