//! Latency of `create --dry-run=server` through a real kube-apiserver (SPEC §8: webhook vs
//! the equivalent ValidatingAdmissionPolicy, ratio ≤ 1.15). It only measures: the driver
//! script `bench/apiserver-latency` decides what is registered (webhook, policies, nothing).
//!
//! Direct API calls from one long-lived client, not `kubectl` processes: process start-up
//! would swamp the difference being measured.

use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

struct Args {
    kubeconfig: String,
    requests: usize,
    warmup: usize,
    label: String,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        kubeconfig: String::new(),
        requests: 500,
        warmup: 50,
        label: "run".to_string(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--kubeconfig" => a.kubeconfig = value()?,
            "--requests" => {
                a.requests = value()?.parse().map_err(|e| format!("--requests: {e}"))?
            }
            "--warmup" => a.warmup = value()?.parse().map_err(|e| format!("--warmup: {e}"))?,
            "--label" => a.label = value()?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.kubeconfig.is_empty() {
        return Err("--kubeconfig is required".to_string());
    }
    if a.requests == 0 {
        return Err("--requests must be positive".to_string());
    }
    Ok(a)
}

fn route(i: usize) -> DynamicObject {
    let ar = api_resource();
    let mut obj = DynamicObject::new(&format!("bench-{i}"), &ar).within("tenant-alice");
    obj.data = serde_json::json!({
        "spec": {
            "parentRefs": [{"name": "gw", "namespace": "tenant-root"}],
            "hostnames": ["shop.alice.example.org", "api.alice.example.org"],
            "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]
        }
    });
    obj
}

fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute"),
        "httproutes",
    )
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args().map_err(|e| {
        format!("{e}\nusage: apiserver-latency --kubeconfig FILE [--requests N] [--warmup N] [--label L]")
    })?;
    let kc = Kubeconfig::read_from(&args.kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config)?;
    let api: Api<DynamicObject> = Api::namespaced_with(client, "tenant-alice", &api_resource());
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for i in 0..args.warmup {
        api.create(&pp, &route(i)).await?;
    }
    let mut samples = Vec::with_capacity(args.requests);
    for i in 0..args.requests {
        let obj = route(i);
        let t = Instant::now();
        api.create(&pp, &obj).await?;
        samples.push(t.elapsed());
    }
    samples.sort();
    let mean =
        samples.iter().map(Duration::as_secs_f64).sum::<f64>() / samples.len() as f64 * 1000.0;
    println!(
        "{{\"label\":\"{}\",\"requests\":{},\"mean_ms\":{:.3},\"p50_ms\":{:.3},\"p90_ms\":{:.3},\"p99_ms\":{:.3}}}",
        args.label,
        samples.len(),
        mean,
        percentile(&samples, 0.50),
        percentile(&samples, 0.90),
        percentile(&samples, 0.99)
    );
    Ok(())
}
