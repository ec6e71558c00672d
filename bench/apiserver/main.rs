//! Latency of `create --dry-run=server` through a real kube-apiserver (SPEC §8: webhook vs
//! the equivalent ValidatingAdmissionPolicy, ratio ≤ 1.15), per guarded kind. It only
//! measures: the driver script `bench/apiserver-latency` decides what is registered (webhook,
//! policies, nothing).
//!
//! Direct API calls from one long-lived client, not `kubectl` processes: process start-up
//! would swamp the difference being measured.
//!
//! `apiserver-latency always-allow ...` is the other end of the comparison (SPEC §8: "vs a
//! do-nothing webhook registered the same way"): the product's TLS/HTTP server
//! (`server::bind` with its default limits, on a multi-thread runtime built as
//! `tenant-gateway serve` builds it, the same allocator) answering every review with
//! `AlwaysAllow`. The driver registers it with the ValidatingWebhookConfiguration
//! `tenant-gateway webhook-configuration` prints, on its own port and serving pair signed by
//! the same CA. `AlwaysAllow` cannot be selected in the product binary: a flag there would be
//! one environment variable away from a webhook that admits everything.

use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

struct Args {
    kubeconfig: String,
    requests: usize,
    warmup: usize,
    label: String,
    kind: Kind,
    /// Wait this long before each measured request: how a quiet cluster calls the webhook
    /// (whether its connection is still open then is what this shows).
    pause: Duration,
}

/// The kinds the webhook guards, each with an object every layer admits, created by the
/// caller the layer sees in a tenant cluster (issue 11: "for every kind").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    HttpRoute,
    TlsRoute,
    GrpcRoute,
    Gateway,
    ListenerSet,
    Ingress,
    Tenant,
    Namespace,
    Package,
}

const KINDS: [(&str, Kind); 9] = [
    ("httproute", Kind::HttpRoute),
    ("tlsroute", Kind::TlsRoute),
    ("grpcroute", Kind::GrpcRoute),
    ("gateway", Kind::Gateway),
    ("listenerset", Kind::ListenerSet),
    ("ingress", Kind::Ingress),
    ("tenant", Kind::Tenant),
    ("namespace", Kind::Namespace),
    ("package", Kind::Package),
];

struct ApiOf {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
}

impl Kind {
    fn name(self) -> &'static str {
        KINDS
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(n, _)| n)
    }

    fn api(self) -> ApiOf {
        let (group, version, kind, plural, namespaced) = match self {
            Kind::HttpRoute => (
                "gateway.networking.k8s.io",
                "v1",
                "HTTPRoute",
                "httproutes",
                true,
            ),
            Kind::TlsRoute => (
                "gateway.networking.k8s.io",
                "v1alpha2",
                "TLSRoute",
                "tlsroutes",
                true,
            ),
            Kind::GrpcRoute => (
                "gateway.networking.k8s.io",
                "v1",
                "GRPCRoute",
                "grpcroutes",
                true,
            ),
            Kind::Gateway => (
                "gateway.networking.k8s.io",
                "v1",
                "Gateway",
                "gateways",
                true,
            ),
            Kind::ListenerSet => (
                "gateway.networking.k8s.io",
                "v1",
                "ListenerSet",
                "listenersets",
                true,
            ),
            Kind::Ingress => ("networking.k8s.io", "v1", "Ingress", "ingresses", true),
            Kind::Tenant => ("apps.cozystack.io", "v1alpha1", "Tenant", "tenants", true),
            Kind::Namespace => ("", "v1", "Namespace", "namespaces", false),
            Kind::Package => ("cozystack.io", "v1alpha1", "Package", "packages", false),
        };
        ApiOf {
            group,
            version,
            kind,
            plural,
            namespaced,
        }
    }

    /// Who creates it: a tenant user, except Packages (cluster-scoped, the platform's).
    fn caller(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Kind::Package => ("admin", &["e2e:users", "system:masters"]),
            _ => ("alice", &["e2e:users", "tenant-alice-admins"]),
        }
    }

    fn spec(self) -> serde_json::Value {
        let route = json!({
            "parentRefs": [{"name": "gw", "namespace": "tenant-root"}],
            "hostnames": ["shop.alice.example.org", "api.alice.example.org"],
            "rules": [{"backendRefs": [{"name": "web", "port": 443}]}]
        });
        match self {
            Kind::HttpRoute | Kind::TlsRoute | Kind::GrpcRoute => route,
            Kind::Gateway => json!({
                "gatewayClassName": "cilium",
                "listeners": [
                    {"name": "http", "port": 80, "protocol": "HTTP"},
                    {"name": "https", "port": 443, "protocol": "HTTPS",
                     "hostname": "shop.alice.example.org",
                     "tls": {"mode": "Terminate", "certificateRefs": [{"name": "c"}]}}
                ]
            }),
            Kind::ListenerSet => json!({
                "parentRef": {"name": "gw", "namespace": "tenant-root"},
                "listeners": [{"name": "http", "port": 80, "protocol": "HTTP",
                               "hostname": "ls.alice.example.org"}]
            }),
            Kind::Ingress => json!({
                "rules": [{"host": "shop.alice.example.org", "http": {"paths": [{
                    "path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]
            }),
            Kind::Tenant => json!({"host": ""}),
            Kind::Namespace => serde_json::Value::Null,
            Kind::Package => json!({"components": {"platform": {"values": {"gateway": {
                "attachedNamespaces": ["cozy-monitoring", "default"]}}}}}),
        }
    }

    fn object(self, i: usize) -> DynamicObject {
        let api = self.api();
        let mut obj = DynamicObject::new(&format!("bench-{i}"), &self.resource());
        if api.namespaced {
            obj = obj.within("tenant-alice");
        }
        if self == Kind::Namespace {
            obj.metadata.name = Some(format!("tenant-alice-bench-{i}"));
            obj.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        } else {
            obj.data = json!({ "spec": self.spec() });
        }
        obj
    }

    fn resource(self) -> ApiResource {
        let api = self.api();
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(api.group, api.version, api.kind),
            api.plural,
        )
    }
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        kubeconfig: String::new(),
        requests: 500,
        warmup: 50,
        label: "run".to_string(),
        kind: Kind::HttpRoute,
        pause: Duration::ZERO,
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
            "--pause-ms" => {
                a.pause =
                    Duration::from_millis(value()?.parse().map_err(|e| format!("--pause-ms: {e}"))?)
            }
            "--kind" => {
                let v = value()?;
                a.kind = KINDS
                    .iter()
                    .find(|(name, _)| *name == v)
                    .map(|(_, k)| *k)
                    .ok_or_else(|| {
                        let names: Vec<&str> = KINDS.iter().map(|(n, _)| *n).collect();
                        format!("--kind {v}: expected one of {}", names.join(", "))
                    })?
            }
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

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

// The same global allocator as the `tenant-gateway` binary (src/main.rs), so the do-nothing
// server runs the product's stack as it is shipped.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("always-allow") {
        return always_allow::main();
    }
    let args = parse_args().map_err(|e| {
        format!(
            "{e}\nusage: apiserver-latency --kubeconfig FILE [--requests N] [--warmup N] [--label L] [--kind K] [--pause-ms MS]\n       apiserver-latency always-allow --listen ADDR --metrics-listen ADDR --tls-cert-file F --tls-key-file F"
        )
    })?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(measure(args))
}

async fn measure(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut config =
        tenant_gateway::cluster::client::config(Some(std::path::Path::new(&args.kubeconfig)), None)
            .await?;
    let (user, groups) = args.kind.caller();
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    let client = Client::try_from(config)?;
    let ar = args.kind.resource();
    let api: Api<DynamicObject> = if args.kind.api().namespaced {
        Api::namespaced_with(client, "tenant-alice", &ar)
    } else {
        Api::all_with(client, &ar)
    };
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for i in 0..args.warmup {
        api.create(&pp, &args.kind.object(i))
            .await
            .map_err(|e| format!("{} create (warm-up) refused: {e}", args.kind.name()))?;
    }
    let mut samples = Vec::with_capacity(args.requests);
    for i in 0..args.requests {
        let obj = args.kind.object(i);
        if !args.pause.is_zero() {
            tokio::time::sleep(args.pause).await;
        }
        let t = Instant::now();
        api.create(&pp, &obj)
            .await
            .map_err(|e| format!("{} create refused: {e}", args.kind.name()))?;
        samples.push(t.elapsed());
    }
    samples.sort();
    let mean =
        samples.iter().map(Duration::as_secs_f64).sum::<f64>() / samples.len() as f64 * 1000.0;
    println!(
        "{}",
        json!({
            "label": args.label,
            "kind": args.kind.name(),
            "requests": samples.len(),
            "mean_ms": (mean * 1000.0).round() / 1000.0,
            "p50_ms": percentile(&samples, 0.50),
            "p90_ms": percentile(&samples, 0.90),
            "p99_ms": percentile(&samples, 0.99),
        })
    );
    Ok(())
}

/// The do-nothing webhook (see the module doc).
mod always_allow {
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;

    use tenant_gateway::metrics::Metrics;
    use tenant_gateway::readiness::Readiness;
    use tenant_gateway::server::{self, AlwaysAllow, ServeOptions};

    struct Args {
        listen: SocketAddr,
        metrics_listen: SocketAddr,
        cert: PathBuf,
        key: PathBuf,
    }

    fn parse() -> Result<Args, String> {
        let (mut listen, mut metrics_listen, mut cert, mut key) = (None, None, None, None);
        let mut it = std::env::args().skip(2);
        while let Some(flag) = it.next() {
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let addr = || {
                value
                    .parse::<SocketAddr>()
                    .map_err(|e| format!("{flag} {value}: {e}"))
            };
            match flag.as_str() {
                "--listen" => listen = Some(addr()?),
                "--metrics-listen" => metrics_listen = Some(addr()?),
                "--tls-cert-file" => cert = Some(PathBuf::from(&value)),
                "--tls-key-file" => key = Some(PathBuf::from(&value)),
                other => return Err(format!("always-allow: unknown flag {other}")),
            }
        }
        let need = |name: &str| format!("always-allow: {name} is required");
        Ok(Args {
            listen: listen.ok_or_else(|| need("--listen"))?,
            metrics_listen: metrics_listen.ok_or_else(|| need("--metrics-listen"))?,
            cert: cert.ok_or_else(|| need("--tls-cert-file"))?,
            key: key.ok_or_else(|| need("--tls-key-file"))?,
        })
    }

    pub fn main() -> Result<(), Box<dyn std::error::Error>> {
        let a = parse()?;
        // As src/main.rs builds it for `serve`: one worker per core.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            // `serve`'s defaults for everything the flags do not set (src/config.rs).
            let opts = ServeOptions {
                listen: a.listen,
                metrics_listen: a.metrics_listen,
                tls_cert_file: a.cert,
                tls_key_file: a.key,
                client_ca_file: None,
                tls_reload_interval: Duration::from_secs(2),
                shutdown_grace: Duration::from_secs(20),
                max_connections: server::DEFAULT_MAX_CONNECTIONS,
            };
            let readiness = Arc::new(Readiness::new());
            // No namespace index to wait for: /readyz answers once TLS is loaded and bound.
            readiness.set_index_synced(true);
            let bound =
                server::bind(opts, Arc::new(AlwaysAllow), readiness, Metrics::new()).await?;
            eprintln!(
                "always-allow: webhook https://{} metrics http://{}",
                bound.webhook_addr(),
                bound.metrics_addr()
            );
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            bound
                .serve(async move {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                })
                .await?;
            Ok(())
        })
    }
}
