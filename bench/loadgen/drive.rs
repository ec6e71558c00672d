//! `drive`: admission load against a `serve` that is already running (the reconciler bench
//! starts it against a real API server), sampling that process's VmRSS while the load runs.
//! A closed loop (peak), or with `--rate` an open loop at that many requests a second; with
//! `--metrics`, the server-side percentiles from `serve`'s admission histogram over the
//! window. Prints one JSON line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use clap::Args;

use crate::client::{self, Pool, Proto, Target};
use crate::{parse_proto, payload, runtime};

#[derive(Debug, Args)]
pub struct DriveArgs {
    /// The webhook's address.
    #[arg(long)]
    pub addr: SocketAddr,
    /// CA certificate (PEM) the webhook's certificate is issued by.
    #[arg(long)]
    pub ca_file: PathBuf,
    /// The `serve` process whose VmRSS is sampled.
    #[arg(long)]
    pub pid: u32,
    /// Seconds of closed-loop load per protocol.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Requests in flight.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    #[arg(long, value_delimiter = ',', default_value = "h2,h1", value_parser = parse_proto)]
    pub protocols: Vec<Proto>,
    /// Open loop at this many requests a second (after 1 s at the same rate, not counted)
    /// instead of the closed loop.
    #[arg(long)]
    pub rate: Option<f64>,
    /// `serve`'s metrics address: the server-side p50/p99 of the window from its admission
    /// histogram.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
}

fn vm_rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub fn run(a: DriveArgs) -> ExitCode {
    let ca_pem = match std::fs::read_to_string(&a.ca_file) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {}: {e}", a.ca_file.display());
            return ExitCode::from(2);
        }
    };
    let idle = vm_rss_kib(a.pid).unwrap_or(0);
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(idle));
    let sampler = {
        let (stop, peak, pid) = (stop.clone(), peak.clone(), a.pid);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(rss) = vm_rss_kib(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let rt = runtime("client", 2);
    let target = Target {
        addr: a.addr,
        ca_pem,
    };
    let review = payload::httproute_review();
    let mut results = Vec::new();
    for &proto in &a.protocols {
        let r = rt.block_on(async {
            let mut pool = Pool::open(&target, proto, a.concurrency, 2).await?;
            let window = Duration::from_secs_f64(a.duration);
            let warm = Duration::from_secs(1);
            let warmed = match a.rate {
                Some(rate) => client::open_loop(&mut pool, &review, rate, warm).await,
                None => client::closed_loop(&mut pool, &review, warm, Duration::ZERO).await,
            };
            let before = match a.metrics {
                Some(m) => Some(crate::scrape(m).await),
                None => None,
            };
            let mut measured = match a.rate {
                Some(rate) => client::open_loop(&mut pool, &review, rate, window).await,
                None => client::closed_loop(&mut pool, &review, Duration::ZERO, window).await,
            };
            let server = match (a.metrics, before) {
                (Some(m), Some(b)) => Some(crate::scrape(m).await.since(&b)),
                _ => None,
            };
            measured.failures.merge(warmed.failures);
            let failures = measured.failures.total();
            anyhow::Ok((measured, failures, server))
        });
        match r {
            Ok((r, failures, server)) => results.push(format!(
                "{{\"proto\": \"{}\", \"rps\": {:.0}, \"client_p50_us\": {:.0}, \"client_p99_us\": {:.0}, \"server_p50\": \"{}\", \"server_p99\": \"{}\", \"server_p99_s\": {}, \"server_le_1ms\": {}, \"failures\": {}}}",
                proto.label(),
                r.rps(),
                r.latency.value_at_quantile(0.5) as f64 / 1e3,
                r.latency.value_at_quantile(0.99) as f64 / 1e3,
                server.as_ref().map_or("-".to_string(), |b| b.quantile_text(0.5)),
                server.as_ref().map_or("-".to_string(), |b| b.quantile_text(0.99)),
                server
                    .as_ref()
                    .and_then(|b| b.quantile(0.99))
                    .map_or("null".to_string(), |q| format!("{q:.6}")),
                server
                    .as_ref()
                    .and_then(|b| b.fraction_le(0.001))
                    .map_or("null".to_string(), |f| format!("{f:.5}")),
                failures
            )),
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                eprintln!("error: cannot connect to {}: {e}", a.addr);
                return ExitCode::from(1);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    println!(
        "{{\"rss_before_kib\": {idle}, \"rss_peak_kib\": {}, \"load\": [{}]}}",
        peak.load(Ordering::Relaxed),
        results.join(", ")
    );
    ExitCode::SUCCESS
}
