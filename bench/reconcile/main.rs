//! Reconciler at scale through a real kube-apiserver (issue 7): populate a world of
//! TenantGateways × routes plus filler namespaces, then wait until every TenantGateway's
//! status lists one listener per route (its last write of a plan), reading `serve`'s
//! /metrics for the writes it issued. Driven by `bench/reconcile`.
//!
//!   reconcile-load populate --kubeconfig F --tgws N --routes R --namespaces M
//!   reconcile-load converge --kubeconfig F --tgws N --routes R --metrics HOST:PORT

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

struct Args {
    cmd: String,
    kubeconfig: String,
    tgws: usize,
    routes: usize,
    namespaces: usize,
    metrics: String,
    timeout: u64,
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
    loop {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let done = list
            .items
            .iter()
            .filter(|t| {
                t.data["status"]["listeners"]
                    .as_array()
                    .is_some_and(|l| l.len() == a.routes + 1)
            })
            .count();
        // Every TenantGateway reconciled by this process at least once (a resync run starts
        // with a converged world).
        let reconciled = metric(&a.metrics, "tenant_gateway_reconcile_total")
            .await
            .unwrap_or(0.0);
        if done >= a.tgws && reconciled >= a.tgws as f64 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{done}/{} converged at the deadline", a.tgws));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let converged = started.elapsed().as_secs_f64();
    // Quiet: the writes counter stops moving.
    let mut last = metric(&a.metrics, "tenant_gateway_reconcile_writes_total").await;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = metric(&a.metrics, "tenant_gateway_reconcile_writes_total").await;
        if now == last || Instant::now() > deadline {
            break;
        }
        last = now;
    }
    let reconciles = metric(&a.metrics, "tenant_gateway_reconcile_total").await;
    println!(
        "{{\"converged_s\": {converged:.1}, \"writes\": {}, \"reconciles\": {}}}",
        last.unwrap_or(-1.0),
        reconciles.unwrap_or(-1.0)
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = parse_args().map_err(|e| format!("usage: {e}"))?;
    let kc = Kubeconfig::read_from(&a.kubeconfig)?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    cfg.read_timeout = Some(Duration::from_secs(60));
    let client = Client::try_from(cfg)?;
    match a.cmd.as_str() {
        "populate" => populate(&client, &a).await,
        "converge" => converge(&client, &a).await?,
        other => return Err(format!("unknown command {other}").into()),
    }
    Ok(())
}
