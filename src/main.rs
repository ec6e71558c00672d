//! `tenant-gateway` CLI: wiring only. Every decision lives in the library.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};

use tenant_gateway::admission::Admission;
use tenant_gateway::certs;
use tenant_gateway::cluster::{NamespaceSource, StaticNamespaces, objects, route_snapshot};
use tenant_gateway::config::{LogArgs, PolicyArgs, ServeArgs};
use tenant_gateway::metrics::Metrics;
use tenant_gateway::offline::check::{self, Caller};
use tenant_gateway::offline::manifests::{self, DefaultNamespace};
use tenant_gateway::offline::{self, verdict};
use tenant_gateway::policy::PolicyConfig;

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
        #[arg(short = 'f', long = "filename", env = "TENANT_GATEWAY_FILENAME")]
        file: Option<PathBuf>,
        /// HTTPRoute/TLSRoute objects (`kubectl get httproutes,tlsroutes -A -o yaml`) to warn
        /// about hostname conflicts and the listener budget as the server would.
        #[arg(long, env = "TENANT_GATEWAY_ROUTES")]
        routes: Option<PathBuf>,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Evaluate manifests as a chosen user would send them (CREATE, or UPDATE of the live
    /// object with --kubeconfig); exit 0 all allowed, 1 some denied, 2 input error.
    Check {
        #[command(flatten)]
        check: CheckArgs,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Run suite files (manifests, namespaces, caller, expected verdicts); exit 1 on any
    /// mismatch, 2 on a bad suite.
    Test {
        /// Suite file, or a directory of them (*.yaml, *.yml, recursively).
        #[arg(required = true, env = "TENANT_GATEWAY_SUITE", value_delimiter = ',')]
        paths: Vec<PathBuf>,
        /// Print only failures and the summary.
        #[arg(short = 'q', long, env = "TENANT_GATEWAY_QUIET")]
        quiet: bool,
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
        /// Base URL of the webhook (https), e.g. https://127.0.0.1:8443.
        #[arg(long, env = "TENANT_GATEWAY_URL")]
        url: String,
        /// CA certificate (PEM) that signed the serving certificate.
        #[arg(long, env = "TENANT_GATEWAY_CA_FILE")]
        ca_file: PathBuf,
        /// Object name.
        #[arg(long, env = "TENANT_GATEWAY_NAME", default_value = "tenant-gateway")]
        name: String,
    },
    /// Write a development CA and serving certificate.
    Certs {
        /// Output folder.
        #[arg(long, env = "TENANT_GATEWAY_OUT", default_value = "certs-dev")]
        out: PathBuf,
        /// Comma-separated DNS names / IPs for the serving certificate.
        #[arg(long, env = "TENANT_GATEWAY_HOSTS", value_delimiter = ',')]
        hosts: Vec<String>,
    },
}

/// `check` flags beyond the policy ones.
#[derive(Debug, Clone, clap::Args)]
struct CheckArgs {
    /// Manifest file, directory, or `-` (repeatable).
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        env = "TENANT_GATEWAY_FILENAME",
        value_delimiter = ','
    )]
    files: Vec<PathBuf>,
    /// Read the subdirectories of directories given with -f too.
    #[arg(short = 'R', long, env = "TENANT_GATEWAY_RECURSIVE")]
    recursive: bool,
    /// User to evaluate as.
    #[arg(long = "as", env = "TENANT_GATEWAY_AS", default_value = "check-user")]
    as_user: String,
    /// Group of that user (repeatable).
    #[arg(
        long = "as-group",
        env = "TENANT_GATEWAY_AS_GROUP",
        value_delimiter = ','
    )]
    as_groups: Vec<String>,
    /// Namespace for namespaced objects that name none (default: the kubeconfig context's
    /// namespace when --kubeconfig or $KUBECONFIG is in use, else `default`, as kubectl).
    #[arg(short = 'n', long = "namespace", env = "TENANT_GATEWAY_NAMESPACE")]
    namespace: Option<String>,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        env = "TENANT_GATEWAY_OUTPUT",
        default_value = "table"
    )]
    output: Output,
    /// Read namespaces (and existing objects) from this cluster instead of a snapshot.
    /// Read-only: check never writes.
    #[arg(long, env = "TENANT_GATEWAY_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (implies reading the cluster).
    #[arg(long, env = "TENANT_GATEWAY_CONTEXT")]
    context: Option<String>,
    /// With a cluster: evaluate every object as a CREATE, even when it exists already.
    #[arg(long, env = "TENANT_GATEWAY_CREATE_ONLY")]
    create_only: bool,
    /// HTTPRoute/TLSRoute objects (`kubectl get httproutes,tlsroutes -A -o yaml`) to warn
    /// about hostname conflicts and the listener budget as the server would (with a
    /// cluster, its routes are read instead).
    #[arg(long, env = "TENANT_GATEWAY_ROUTES")]
    routes: Option<PathBuf>,
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
        // The reader of stdout went away (`| head`): it has what it wanted.
        Err(e) if offline::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Write `text` to stdout; a closed stdout is reported as the error it is, never a panic.
fn print_out(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve { serve, policy } => tenant_gateway::serve::run(serve, policy).await,
        Command::Review {
            file,
            routes,
            policy,
        } => {
            let admission = with_route_snapshot(offline_admission(&policy)?, routes.as_deref())?;
            let input = manifests::read_input(file.as_deref())?;
            let mut stdout = std::io::stdout().lock();
            let summary = offline::review(&admission, &input, &mut stdout).await?;
            stdout.flush()?;
            if summary.unusable > 0 {
                eprintln!(
                    "error: {} of {} documents could not be reviewed (see the \"error\" lines)",
                    summary.unusable, summary.documents
                );
                return Ok(ExitCode::from(EXIT_USAGE));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { check, policy } => check_cmd(check, policy).await,
        Command::Test {
            paths,
            quiet,
            policy,
        } => {
            let mut stdout = std::io::stdout().lock();
            let code = match tenant_gateway::offline::suite::run(
                &paths,
                &policy,
                quiet,
                &mut stdout,
            )
            .await
            {
                Ok(report) => {
                    if report.failed > 0 {
                        1
                    } else {
                        0
                    }
                }
                Err(e) if e.is_broken_pipe() => return Ok(ExitCode::SUCCESS),
                Err(e) => {
                    let _ = stdout.flush();
                    eprintln!("error: {e}");
                    EXIT_USAGE
                }
            };
            stdout.flush()?;
            Ok(ExitCode::from(code))
        }
        Command::Crd => {
            print_out(&tenant_gateway::reconcile::api::crd_yaml()?)?;
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
            print_out(&tenant_gateway::policies::render(&cfg)?)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::WebhookConfiguration { url, ca_file, name } => {
            use tenant_gateway::admission::registration;
            registration::check_url(&url)?;
            let pem = std::fs::read(&ca_file)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", ca_file.display()))?;
            let ca = registration::ca_bundle(&ca_file.display().to_string(), &pem)?;
            let v = registration::by_url(&name, &url, &ca);
            print_out(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
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
            print_out(&format!(
                "wrote {}/ca.crt, {}/tls.crt, {}/tls.key for {}\n",
                out.display(),
                out.display(),
                out.display(),
                hosts.join(", ")
            ))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn check_cmd(check: CheckArgs, policy: PolicyArgs) -> anyhow::Result<ExitCode> {
    let cluster = check.kubeconfig.is_some() || check.context.is_some();
    if cluster && policy.namespaces.is_some() {
        anyhow::bail!(
            "--namespaces and --kubeconfig/--context both say where namespaces come from: give one"
        );
    }
    if cluster && check.routes.is_some() {
        anyhow::bail!(
            "--routes and --kubeconfig/--context both say where routes come from: give one"
        );
    }
    // Snapshots are context, not input, when they sit beside the manifests.
    let context_files: Vec<&std::path::Path> =
        [policy.namespaces.as_deref(), check.routes.as_deref()]
            .into_iter()
            .flatten()
            .collect();
    let mut manifests =
        manifests::read_manifests_skipping(&check.files, check.recursive, &context_files)?;
    for note in &manifests.notes {
        eprintln!("{note}");
    }
    let default_namespace = match &check.namespace {
        Some(n) if !n.trim().is_empty() => DefaultNamespace::Flag(n.trim().to_string()),
        _ => {
            match objects::context_namespace(check.kubeconfig.as_deref(), check.context.as_deref())
            {
                Ok(Some((context, namespace))) => DefaultNamespace::Context { context, namespace },
                Ok(None) => DefaultNamespace::Default,
                // Only $KUBECONFIG was in use: the namespace is a convenience, not worth failing.
                Err(e) if !cluster => {
                    eprintln!(
                        "note: {e}; objects without a namespace are evaluated in \"default\""
                    );
                    DefaultNamespace::Default
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let caller = Caller {
        username: check.as_user,
        groups: check.as_groups,
        default_namespace,
    };
    let cfg = policy.policy_config_offline()?;
    let admission = if cluster {
        let client = objects::client(check.kubeconfig.as_deref(), check.context.as_deref()).await?;
        let namespaces = objects::namespaces(&client).await?;
        if !check.create_only {
            for m in manifests.items.iter_mut() {
                let Ok(object) = &m.object else { continue };
                let Some(target) = manifests::target_of(object) else {
                    continue;
                };
                let namespace = manifests::namespaced(target)
                    .then(|| manifests::namespace_of(object, &caller.default_namespace).0);
                let name = object
                    .pointer("/metadata/name")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("");
                let api_version = object
                    .get("apiVersion")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("");
                m.live =
                    objects::live_object(&client, target, api_version, namespace.as_deref(), name)
                        .await?;
            }
        }
        let routes = route_snapshot::list(&client).await?;
        for note in &routes.notes {
            eprintln!("{note}");
        }
        Admission::new(
            Arc::new(cfg.clone()),
            NamespaceSource::Static(Arc::new(namespaces)),
            Metrics::new(),
        )
        .with_routes(Arc::new(routes.index))
    } else {
        with_route_snapshot(
            offline_admission_with(cfg.clone(), &policy)?,
            check.routes.as_deref(),
        )?
    };
    if let Some(note) =
        check::unnamespaced_note(check::unnamespaced(&manifests.items), &caller, &cfg)
    {
        eprintln!("{note}");
    }
    let verdicts = check::check(&admission, &manifests.items, &caller).await;
    let summary = verdict::Summary::of(&verdicts);
    let code = ExitCode::from(summary.exit_code());
    let mut stdout = std::io::stdout().lock();
    let printed = match check.output {
        Output::Table => verdict::print_table(&verdicts, &mut stdout),
        Output::Json => verdict::print_json(&verdicts, &mut stdout),
    }
    .and_then(|()| stdout.flush());
    match printed {
        Ok(()) => {}
        // `| head`: the verdicts still decide the exit code.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(code),
        Err(e) => return Err(e.into()),
    }
    if summary.errors > 0 {
        eprintln!(
            "error: {} of {} objects could not be evaluated (ERROR lines above)",
            summary.errors, summary.objects
        );
    }
    Ok(code)
}

/// `review` and `check` read namespaces from a snapshot unless `check` is given a cluster.
fn offline_admission(policy: &PolicyArgs) -> anyhow::Result<Admission> {
    offline_admission_with(policy.policy_config_offline()?, policy)
}

fn offline_admission_with(cfg: PolicyConfig, policy: &PolicyArgs) -> anyhow::Result<Admission> {
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

/// `--routes FILE`: the route index the warnings of SPEC §3.4 read offline.
fn with_route_snapshot(
    admission: Admission,
    routes: Option<&std::path::Path>,
) -> anyhow::Result<Admission> {
    Ok(match routes {
        Some(path) => admission.with_routes(Arc::new(route_snapshot::from_file(path)?)),
        None => admission,
    })
}

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
