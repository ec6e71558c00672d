//! `rss`: the real `tenant-gateway serve` process with a generated namespace snapshot.
//! Startup-to-ready (spawn → first `/readyz` 200), then VmRSS sampled while load runs, and
//! VmHWM (the kernel's peak RSS) at the end.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tenant_gateway::certs;
use tenant_gateway::cluster::StaticNamespaces;

use crate::client::{self, Pool, Target};
use crate::{RssArgs, load_line, pass, payload, prom, runtime};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const MIB: f64 = 1024.0 * 1024.0;

/// VmRSS and VmHWM of `pid`, in bytes.
fn memory(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
    l.local_addr().expect("local address")
}

struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Server {
    /// SIGTERM, then wait for the drain to finish.
    fn stop(mut self) -> Option<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

/// How much memory the namespace index takes in this process, built two ways: by `insert`
/// (the index alone) and by `StaticNamespaces::from_file` (what `serve --namespaces` does,
/// including the parse). Only growth is reported; the allocator may keep freed pages.
struct Breakdown {
    insert_rss: u64,
    file_rss: u64,
    file_hwm: u64,
}

fn index_breakdown(ns: &[payload::Ns], file: &std::path::Path) -> Breakdown {
    let me = std::process::id();
    let (rss0, _) = memory(me).unwrap_or((0, 0));
    let mut s = StaticNamespaces::default();
    for n in ns {
        s.insert(&n.name, n.labels.clone());
    }
    let (rss1, _) = memory(me).unwrap_or((0, 0));
    let insert_rss = rss1.saturating_sub(rss0);
    drop(s);
    let (rss2, hwm2) = memory(me).unwrap_or((0, 0));
    let parsed = StaticNamespaces::from_file(file).expect("the generated snapshot parses");
    assert_eq!(
        parsed.len(),
        ns.len(),
        "every generated namespace is read back"
    );
    let (rss3, hwm3) = memory(me).unwrap_or((0, 0));
    drop(parsed);
    Breakdown {
        insert_rss,
        file_rss: rss3.saturating_sub(rss2),
        file_hwm: hwm3.saturating_sub(hwm2.max(rss2)),
    }
}

pub fn run(a: RssArgs) -> ExitCode {
    if a.load.routes > 0 {
        eprintln!(
            "error: `serve --namespaces` (what this mode starts) has no route index; the RSS with routes is measured by bench/reconcile/run (see bench/README.md)"
        );
        return ExitCode::from(2);
    }
    if !a.binary.exists() {
        eprintln!(
            "error: {} does not exist; build it with `cargo build --release`",
            a.binary.display()
        );
        return ExitCode::from(2);
    }
    let dir = tempfile::Builder::new()
        .prefix("tenant-gateway-bench-")
        .tempdir()
        .expect("a temporary folder");
    let dev = certs::generate(&certs::default_hosts()).expect("development certificates");
    certs::write(dir.path(), &dev).expect("certificates written");
    let ns = payload::namespaces(a.load.namespaces);
    let snapshot = dir.path().join("namespaces.yaml");
    let yaml = payload::namespaces_yaml(&ns);
    std::fs::write(&snapshot, &yaml).expect("snapshot written");
    let breakdown = index_breakdown(&ns, &snapshot);
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).expect("server log file");
    let (webhook, metrics) = (free_port(), free_port());
    println!(
        "snapshot: {} namespaces, {:.1} MiB of `kubectl get ns -o yaml`; binary {}",
        ns.len(),
        yaml.len() as f64 / MIB,
        a.binary.display()
    );

    let client_rt = runtime("client", a.load.client_threads);
    let started = Instant::now();
    let child = Command::new(&a.binary)
        .arg("serve")
        .args(["--listen", &webhook.to_string()])
        .args(["--metrics-listen", &metrics.to_string()])
        .arg("--tls-cert-file")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.path().join("tls.key"))
        .arg("--namespaces")
        .arg(&snapshot)
        .args(["--root-host", payload::ROOT_HOST])
        .args(["--shutdown-grace", "2"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log handle"))
        .stderr(log)
        .spawn()
        .expect("tenant-gateway starts");
    let mut server = Server { child };
    let pid = server.child.id();

    // Startup to ready: poll /readyz until it answers 200.
    let ready = client_rt.block_on(async {
        loop {
            if started.elapsed() > READY_TIMEOUT {
                return None;
            }
            if let Ok(Some(_)) = server.child.try_wait() {
                return None;
            }
            if let Ok((200, _)) = prom::get(metrics, "/readyz").await {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let Some(startup) = ready else {
        eprintln!(
            "error: the server did not become ready within {READY_TIMEOUT:?}; its log:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
        return ExitCode::from(1);
    };
    let (idle_rss, _) = memory(pid).unwrap_or((0, 0));
    println!(
        "startup to ready: {:.0} ms; idle VmRSS {:.1} MiB",
        startup.as_secs_f64() * 1e3,
        idle_rss as f64 / MIB
    );

    // Sample VmRSS while the load runs.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(idle_rss));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some((rss, _)) = memory(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let review = payload::httproute_review();
    let target = Target {
        addr: webhook,
        ca_pem: dev.ca_cert_pem.clone(),
    };
    let mut failures = 0u64;
    let mut loaded_rss = 0u64;
    for &proto in &a.load.protocols {
        let r = client_rt.block_on(async {
            let mut pool = Pool::open(&target, proto, a.load.concurrency, a.load.h2_conns)
                .await
                .expect("connections open");
            let r = client::closed_loop(
                &mut pool,
                &review,
                Duration::from_secs(1),
                Duration::from_secs_f64(a.duration),
            )
            .await;
            // Read while this protocol's connections are still open.
            loaded_rss = loaded_rss.max(memory(pid).map_or(0, |m| m.0));
            r
        });
        failures += r.failures.total();
        println!(
            "{}",
            load_line(&format!("[{} load, real binary]", proto.label()), &r)
        );
    }
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let (end_rss, hwm) = memory(pid).unwrap_or((0, 0));
    let sampled_peak = peak.load(Ordering::Relaxed).max(loaded_rss);
    let exit = server.stop();

    println!();
    println!("| measure | value | target |");
    println!("|---|---:|---|");
    println!(
        "| startup to ready ({} namespaces) | {:.0} ms | < 2 s: {} |",
        ns.len(),
        startup.as_secs_f64() * 1e3,
        pass(startup < Duration::from_secs(2))
    );
    println!(
        "| VmRSS idle after ready | {:.1} MiB | |",
        idle_rss as f64 / MIB
    );
    println!(
        "| VmRSS peak sampled under load (no routes) | {:.1} MiB | <= 40 MiB: {} |",
        sampled_peak as f64 / MIB,
        pass(sampled_peak as f64 <= 40.0 * MIB)
    );
    println!(
        "| VmHWM (peak RSS, whole life; no routes) | {:.1} MiB | <= 40 MiB: {} |",
        hwm as f64 / MIB,
        pass(hwm as f64 <= 40.0 * MIB)
    );
    println!("| VmRSS after load | {:.1} MiB | |", end_rss as f64 / MIB);
    println!(
        "| diagnostic (this process): RSS growth for an index built by insert | {:.1} MiB | |",
        breakdown.insert_rss as f64 / MIB
    );
    println!(
        "| diagnostic (this process): RSS / VmHWM growth for `StaticNamespaces::from_file` | {:.1} / {:.1} MiB | |",
        breakdown.file_rss as f64 / MIB,
        breakdown.file_hwm as f64 / MIB
    );
    println!();
    println!(
        "note: this is the snapshot mode (10,000 namespaces, webhook only, no route index); SPEC §8's figure also counts 20,000 indexed routes: `bench/reconcile/run 500 40 10000` measures it on a real API server."
    );
    match exit {
        Some(s) if s.success() => {}
        Some(s) => println!("warning: the server exited with {s} after SIGTERM"),
        None => println!("warning: the server did not exit within 10 s of SIGTERM"),
    }
    if a.keep_dir {
        let kept = dir.keep();
        println!("kept {}", kept.display());
    }
    if failures > 0 {
        println!("INVALID RUN: {failures} request(s) failed");
        return ExitCode::from(1);
    }
    let missed = startup >= Duration::from_secs(2) || hwm as f64 > 40.0 * MIB;
    if a.enforce_targets && missed {
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
}
