//! What the shared watches keep, measured: heap bytes held by each cache once it holds a dumped
//! world (`kubectl get … -o json` of the bench world), counted by dhat (exact live bytes, not
//! RSS), and the peak while one kind is decoded. Each kind goes through the functions its
//! watch task calls (decode, strip, project, cache), so the numbers follow the code.
//!
//!   reconcile-heap DIR   (DIR holds namespaces.json, httproutes.json, certificates.json,
//!                         gateways.json, issuers.json, tenantgateways.json)

use std::path::Path;

mod holder;

use holder::{Holder, Kind};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

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

fn main() {
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
