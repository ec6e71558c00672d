//! `tenant-gateway` CLI: wiring only. Every decision lives in the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};

use tenant_gateway::admission::Admission;
use tenant_gateway::certs;
use tenant_gateway::cluster::{LiveNamespaces, NamespaceSource, StaticNamespaces};
use tenant_gateway::config::{LogArgs, PolicyArgs, ServeArgs};
use tenant_gateway::metrics::Metrics;
use tenant_gateway::offline::{self, Caller};
use tenant_gateway::server::{self, ServeOptions, health::Readiness};

#[derive(Debug, Parser)]
#[command(
    name = "tenant-gateway",
    version,
    about = "Admission webhook and TenantGateway reconciler for Cozystack tenants"
)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start-up and matched once: the size of the `serve` variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTPS admission webhook and the metrics/health server.
    Serve {
        #[command(flatten)]
        serve: ServeArgs,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Answer AdmissionReview JSON (one document or NDJSON) offline, as the server would.
    Review {
        /// Input file; `-` or absent reads standard input.
        #[arg(short = 'f', long = "filename")]
        file: Option<PathBuf>,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Evaluate manifests as CREATE requests by a chosen user; exit 1 if any is denied.
    Check {
        /// Manifest file, directory, or `-` (repeatable).
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
        /// Recurse into subdirectories of directories given with -f.
        #[arg(short = 'R', long)]
        recursive: bool,
        /// User to evaluate as.
        #[arg(long = "as", default_value = "check-user")]
        as_user: String,
        /// Group of that user (repeatable).
        #[arg(long = "as-group")]
        as_groups: Vec<String>,
        /// Namespace for namespaced objects that name none.
        #[arg(short = 'n', long = "namespace", default_value = "default")]
        namespace: String,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: Output,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Print the TenantGateway CustomResourceDefinition generated from the Rust types.
    Crd,
    /// Print the ValidatingAdmissionPolicy manifests equivalent to the webhook layers.
    Policies {
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Print a ValidatingWebhookConfiguration that registers the webhook by URL (for a
    /// webhook running outside the cluster; the chart renders the in-cluster form).
    WebhookConfiguration {
        /// Base URL of the webhook, e.g. https://127.0.0.1:8443.
        #[arg(long)]
        url: String,
        /// CA certificate (PEM) that signed the serving certificate.
        #[arg(long)]
        ca_file: PathBuf,
        /// Object name.
        #[arg(long, default_value = "tenant-gateway")]
        name: String,
    },
    /// Write a development CA and serving certificate.
    Certs {
        /// Output folder.
        #[arg(long, default_value = "certs-dev")]
        out: PathBuf,
        /// Comma-separated DNS names / IPs for the serving certificate.
        #[arg(long, value_delimiter = ',')]
        hosts: Vec<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    Json,
}

/// Exit code for usage and input errors (`check` uses 1 for "something denied").
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Serve { .. } => "info",
        _ => "error",
    };
    cli.log.init(default_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve { serve, policy } => serve_cmd(serve, policy).await,
        Command::Review { file, policy } => {
            let admission = offline_admission(&policy)?;
            let input = offline::read_input(file.as_deref())?;
            let mut stdout = std::io::stdout().lock();
            let summary = offline::review(&admission, &input, &mut stdout).await?;
            if summary.unusable > 0 {
                eprintln!(
                    "error: {} of {} documents were not JSON (see the \"error\" lines)",
                    summary.unusable, summary.documents
                );
                return Ok(ExitCode::from(EXIT_USAGE));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            files,
            recursive,
            as_user,
            as_groups,
            namespace,
            output,
            policy,
        } => {
            let admission = offline_admission(&policy)?;
            let manifests =
                offline::read_manifests(&files, recursive, policy.namespaces.as_deref())?;
            let caller = Caller {
                username: as_user,
                groups: as_groups,
                default_namespace: namespace,
            };
            let verdicts = offline::check(&admission, &manifests, &caller).await;
            let mut stdout = std::io::stdout().lock();
            match output {
                Output::Table => offline::print_table(&verdicts, &mut stdout)?,
                Output::Json => {
                    serde_json::to_writer_pretty(&mut stdout, &verdicts)?;
                    println!();
                }
            }
            if verdicts.iter().any(|v| v.decision == "error" && !v.allowed) {
                return Ok(ExitCode::from(1));
            }
            Ok(if verdicts.iter().all(|v| v.allowed) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Crd => {
            print!("{}", tenant_gateway::reconcile::api::crd_yaml()?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Policies { mut policy } => {
            // Without a root host the Ingress policy cannot be written; leave it out rather
            // than refuse, and say so.
            if policy
                .root_host
                .as_deref()
                .is_none_or(|h| h.trim().is_empty())
            {
                eprintln!(
                    "note: no --root-host given: the ingress hostname policy (layer 8) is left out"
                );
                policy.enforcement.push("ingress=off".to_string());
            }
            let cfg = policy.policy_config()?;
            print!("{}", tenant_gateway::policies::render(&cfg)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::WebhookConfiguration { url, ca_file, name } => {
            use base64::Engine as _;
            let ca = std::fs::read(&ca_file)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", ca_file.display()))?;
            let ca = base64::engine::general_purpose::STANDARD.encode(ca);
            let v = tenant_gateway::admission::registration::by_url(&name, &url, &ca);
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Certs { out, hosts } => {
            let hosts = if hosts.is_empty() {
                certs::default_hosts()
            } else {
                hosts
            };
            let generated = certs::generate(&hosts)?;
            certs::write(&out, &generated)?;
            println!(
                "wrote {}/ca.crt, {}/tls.crt, {}/tls.key for {}",
                out.display(),
                out.display(),
                out.display(),
                hosts.join(", ")
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `review` and `check` read namespaces from a snapshot, never from a cluster.
fn offline_admission(policy: &PolicyArgs) -> anyhow::Result<Admission> {
    let cfg = policy.policy_config()?;
    let namespaces = match policy.static_namespaces()? {
        Some(s) => s,
        None => {
            eprintln!(
                "note: no --namespaces snapshot given; every namespace counts as missing, so tenant-scoped layers deny (fail closed)"
            );
            NamespaceSource::Static(Arc::new(StaticNamespaces::default()))
        }
    };
    Ok(Admission::new(Arc::new(cfg), namespaces, Metrics::new()))
}

async fn serve_cmd(serve: ServeArgs, policy: PolicyArgs) -> anyhow::Result<ExitCode> {
    let cfg = policy.policy_config()?;
    let metrics = Metrics::new();
    let readiness = Arc::new(Readiness::new());
    let reconciler_opts = tenant_gateway::serve::ReconcilerOptions {
        lease_namespace: serve.leader_election_namespace.clone(),
        lease_name: serve.leader_election_name.clone(),
        uniform_port_kinds: serve.uniform_port_kinds,
        scope: tenant_gateway::platform::Scope {
            tenant_prefix: policy.tenant_prefix.clone(),
            system_prefix: policy.system_prefix.clone(),
        },
    };
    if serve.no_webhook {
        if serve.no_controller || policy.namespaces.is_some() {
            anyhow::bail!(
                "--no-webhook leaves nothing to run: the reconciler needs a cluster (drop --no-controller and --namespaces)"
            );
        }
        let client = kube_client(serve.kubeconfig.as_deref()).await?;
        let live = LiveNamespaces::start(client.clone(), readiness.clone(), metrics.clone());
        let r = tenant_gateway::serve::start_reconciler(client, live, metrics, reconciler_opts);
        tokio::select! {
            ended = r.done => anyhow::bail!("{}", ended.unwrap_or("the reconciler task panicked")),
            _ = shutdown_signal() => {}
        }
        tracing::info!("stopped");
        return Ok(ExitCode::SUCCESS);
    }
    let self_cert =
        serve
            .self_cert_secret
            .clone()
            .map(|secret| tenant_gateway::selfcert::SelfCertConfig {
                namespace: serve.self_cert_namespace.clone().unwrap_or_else(|| {
                    tenant_gateway::cluster::lease::default_namespace(std::path::Path::new(
                        tenant_gateway::cluster::lease::SERVICE_ACCOUNT_NAMESPACE_FILE,
                    ))
                }),
                secret,
                webhook_configuration: serve.webhook_configuration_name.clone(),
                hosts: serve.self_cert_hosts.clone(),
                validity: serve.self_cert_validity,
                dir: serve.self_cert_dir.clone(),
            });
    let (cert, key) = match (
        &self_cert,
        serve.tls_cert_file.clone(),
        serve.tls_key_file.clone(),
    ) {
        (Some(c), None, None) => {
            if c.hosts.is_empty() {
                anyhow::bail!(
                    "--self-cert-secret needs --self-cert-host (the names the API server calls the webhook by)"
                );
            }
            if serve.no_controller || policy.namespaces.is_some() {
                anyhow::bail!(
                    "--self-cert-secret needs the reconciler's leader Lease and a cluster: drop --no-controller and --namespaces"
                );
            }
            (c.cert_file(), c.key_file())
        }
        (Some(_), _, _) => anyhow::bail!(
            "--self-cert-secret manages the serving pair itself: drop --tls-cert-file and --tls-key-file"
        ),
        (None, Some(cert), Some(key)) => (cert, key),
        (None, _, _) => anyhow::bail!(
            "--tls-cert-file and --tls-key-file are required for the webhook (create a development pair with `tenant-gateway certs`)"
        ),
    };
    let namespaces = match policy.static_namespaces()? {
        Some(s) => {
            readiness.set_index_synced(true);
            metrics.namespace_index_size.set(s.len() as i64);
            tracing::info!(
                namespaces = s.len(),
                "using the static namespace snapshot; no controller runs"
            );
            s
        }
        None => {
            let client = kube_client(serve.kubeconfig.as_deref()).await?;
            let live = LiveNamespaces::start(client.clone(), readiness.clone(), metrics.clone());
            if !serve.no_controller {
                let r = tenant_gateway::serve::start_reconciler(
                    client.clone(),
                    live.clone(),
                    metrics.clone(),
                    reconciler_opts,
                );
                if let Some(c) = self_cert.clone() {
                    // The server starts on the pair: wait until the leader (maybe this
                    // replica) has made it and it is on disk.
                    tenant_gateway::selfcert::wait_for_pair(&client, &c, &r.leader).await?;
                    tokio::spawn(tenant_gateway::selfcert::run(
                        client.clone(),
                        c,
                        r.leader.clone(),
                    ));
                }
                // The reconciler ending is fatal: the process exits so it restarts.
                tokio::spawn(async move {
                    let why = r.done.await.unwrap_or("the reconciler task panicked");
                    tracing::error!("{why}; exiting");
                    std::process::exit(1);
                });
            }
            NamespaceSource::Live(live)
        }
    };
    let admission = Arc::new(Admission::new(Arc::new(cfg), namespaces, metrics.clone()));
    let opts = ServeOptions {
        listen: serve.listen,
        metrics_listen: serve.metrics_listen,
        tls_cert_file: cert,
        tls_key_file: key,
        client_ca_file: serve.client_ca_file.clone(),
        tls_reload_interval: serve.tls_reload_interval,
        shutdown_grace: serve.shutdown_grace,
        max_connections: serve.max_connections,
    };
    server::run(opts, admission, readiness, metrics, shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
                    _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the server");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// In-cluster first, then $KUBECONFIG, then ~/.kube/config (SPEC §2.6), unless a file is named.
async fn kube_client(path: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let config = match path {
        Some(p) => {
            let kc = Kubeconfig::read_from(p)
                .map_err(|e| anyhow::anyhow!("cannot read kubeconfig {}: {e}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => match kube::Config::incluster() {
            Ok(c) => c,
            Err(_) => kube::Config::from_kubeconfig(&KubeConfigOptions::default())
                .await
                .map_err(|e| {
                    anyhow::anyhow!("no in-cluster config and no usable kubeconfig: {e}")
                })?,
        },
    };
    Ok(kube::Client::try_from(config)?)
}
