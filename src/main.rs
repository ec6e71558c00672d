//! `tenant-gateway` CLI: wiring only. Every decision lives in the library.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use tenant_gateway::certs;
use tenant_gateway::config::{AuditArgs, CheckArgs, CheckOutput, LogArgs, PolicyArgs, ServeArgs};
use tenant_gateway::offline::{self, EXIT_USAGE};

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
        /// HTTPRoute/TLSRoute objects and TenantGateways (`kubectl get
        /// httproutes,tlsroutes,tenantgateways -A -o yaml`) to warn
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
    /// Judge the objects already in a cluster (or a snapshot) by the same layers; exit 0 no
    /// violation, 1 some, 2 something could not be judged.
    Audit {
        #[command(flatten)]
        audit: AuditArgs,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Print the TenantGateway CustomResourceDefinition generated from the Rust types.
    Crd {
        /// Print the wgpolicyk8s.io/v1alpha2 PolicyReport CRD instead (what `serve
        /// --policy-reports` writes; the chart installs it with audit.installPolicyReportCRD).
        #[arg(long)]
        policy_report: bool,
    },
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
        /// The webhook's --tenant-prefix: objects outside it are not sent to the tenant-scoped
        /// layers (a matchCondition).
        #[arg(long, env = "TENANT_GATEWAY_TENANT_PREFIX", default_value = "tenant-")]
        tenant_prefix: String,
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

/// How long an idle thread of the blocking pool (planning, file reloads, DNS) lives on. Each
/// one holds a stack and an allocator cache; a burst of reconciles can leave two or three of
/// them behind (a plan's permit is released before its thread is idle again, so the next plan
/// may start another): 0.9 MiB more of `serve`'s RSS with three of them left after a 500 × 40
/// cold start (bench/RESULTS.md, session 37) for tokio's default 10 s. A second is jemalloc's
/// own decay time here; a busy planner keeps its thread.
const BLOCKING_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(1);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Serve { .. } => "info",
        _ => "error",
    };
    cli.log.init(default_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
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
        } => offline::review_cmd(file.as_deref(), routes.as_deref(), &policy).await,
        Command::Check { check, policy } => offline::check::run(check, policy).await,
        Command::Test {
            paths,
            quiet,
            policy,
        } => offline::suite::run_cmd(&paths, quiet, &policy).await,
        Command::Audit { audit, policy } => audit_cmd(audit, policy).await,
        Command::Crd { policy_report } => {
            let crd = if policy_report {
                tenant_gateway::audit::policy_report::api::crd_yaml()?
            } else {
                tenant_gateway::reconcile::api::crd_yaml()?
            };
            print_out(&crd)?;
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
        Command::WebhookConfiguration {
            url,
            ca_file,
            name,
            tenant_prefix,
        } => {
            use tenant_gateway::admission::registration;
            registration::check_url(&url)?;
            let pem = std::fs::read(&ca_file)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", ca_file.display()))?;
            let ca = registration::ca_bundle(&ca_file.display().to_string(), &pem)?;
            let v = registration::by_url(&name, &url, &ca, &tenant_prefix);
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

/// `audit`: a cluster (listed once, read-only) or a snapshot (`--namespaces FILE -f DIR`),
/// judged by `tenant_gateway::audit`; the report on stdout, its exit code.
async fn audit_cmd(args: AuditArgs, policy: PolicyArgs) -> anyhow::Result<ExitCode> {
    use tenant_gateway::audit::cli;
    use tenant_gateway::cluster::{StaticNamespaces, client};
    let cfg = std::sync::Arc::new(policy.policy_config_offline()?);
    let report = match (&policy.namespaces, args.files.is_empty()) {
        (None, true) => {
            let client =
                client::connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
            cli::live(&client, cfg).await?
        }
        (Some(file), false) => {
            if args.kubeconfig.is_some() || args.context.is_some() {
                anyhow::bail!(
                    "audit reads a cluster (--kubeconfig, --context) or a snapshot (--namespaces FILE -f DIR), not both"
                );
            }
            let namespaces = StaticNamespaces::from_file(file)?;
            let manifests =
                offline::manifests::read_manifests(&args.files, args.recursive, Some(file))?;
            for note in &manifests.notes {
                eprintln!("{note}");
            }
            let documents = manifests
                .items
                .into_iter()
                .map(|m| cli::Document {
                    source: m.source.to_string(),
                    object: m.object,
                })
                .collect();
            cli::snapshot(cfg, &namespaces, documents)
        }
        (None, false) => anyhow::bail!(
            "audit -f reads a snapshot and needs its namespaces: add --namespaces FILE (`kubectl get namespaces -o yaml`)"
        ),
        (Some(_), true) => anyhow::bail!(
            "audit --namespaces FILE audits a snapshot: give its objects with -f FILE|DIR (`kubectl get gateways,httproutes,ingresses,… -A -o yaml`)"
        ),
    };
    print_out(&match args.output {
        CheckOutput::Table => report.table(),
        CheckOutput::Json => report.json(),
    })?;
    Ok(ExitCode::from(report.exit_code()))
}

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
