//! Settings shared by all commands (SPEC §2.6). Every flag also reads an environment
//! variable `TENANT_GATEWAY_<FLAG_IN_UPPER_SNAKE_CASE>`; repeatable flags take a
//! comma-separated list from the environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::cluster::{NamespaceSource, StaticNamespaces};
use crate::hostname;
use crate::policy::{
    DEFAULT_TRUSTED_GROUPS, Enforcement, Layer, Mode, PolicyConfig, default_guarded_annotations,
    default_guarded_labels,
};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "--enforcement {0:?}: expected LAYER=MODE with LAYER one of gateway, package, tenant, namespace, route, ingress, tenantgateway and MODE one of deny, warn, audit, off"
    )]
    Enforcement(String),
    #[error(
        "the ingress layer is enabled but --root-host (TENANT_GATEWAY_ROOT_HOST) is not set: without the platform root apex every tenant Ingress host would be unchecked. Set --root-host to the platform apex (e.g. example.org) or disable the layer with --enforcement ingress=off"
    )]
    MissingRootHost,
    #[error("--root-host {host:?} is not a valid hostname: {reason}")]
    BadRootHost { host: String, reason: String },
    #[error("--tenant-prefix must not be empty: every namespace would be tenant scope")]
    EmptyTenantPrefix,
    #[error("--trusted-group values must not be empty strings")]
    EmptyTrustedGroup,
    #[error(
        "--trusted-group {value:?} (TENANT_GATEWAY_TRUSTED_GROUP) is not a valid group name: {reason}; list groups separated by commas, e.g. system:masters,system:serviceaccounts:cozy-system"
    )]
    BadTrustedGroup { value: String, reason: String },
    #[error(
        "--guarded-label {value:?} (TENANT_GATEWAY_GUARDED_LABEL) is not a valid label key: {reason}; a label key is an optional DNS subdomain prefix and \"/\", then a name of at most 63 characters (letters, digits, \"-\", \"_\", \".\", starting and ending with a letter or digit), e.g. namespace.cozystack.io/host"
    )]
    BadGuardedLabel { value: String, reason: String },
    #[error(
        "--guarded-annotation {value:?} (TENANT_GATEWAY_GUARDED_ANNOTATION) is not a valid annotation key: {reason}; an annotation key is an optional DNS subdomain prefix and \"/\", then a name of at most 63 characters (letters, digits, \"-\", \"_\", \".\", starting and ending with a letter or digit), e.g. gateway.cozystack.io/attached-by"
    )]
    BadGuardedAnnotation { value: String, reason: String },
    #[error(transparent)]
    Snapshot(#[from] crate::cluster::snapshot::SnapshotError),
}

/// Policy flags read by `serve`, `review` and `check` alike.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Platform root apex (e.g. example.org); `serve` requires it while the ingress layer is
    /// enabled, the offline commands only to evaluate an Ingress.
    #[arg(long, env = "TENANT_GATEWAY_ROOT_HOST")]
    pub root_host: Option<String>,

    /// Namespaces with this prefix are tenant namespaces.
    #[arg(long, env = "TENANT_GATEWAY_TENANT_PREFIX", default_value = "tenant-")]
    pub tenant_prefix: String,

    /// Platform namespaces; they win hostname conflicts.
    #[arg(long, env = "TENANT_GATEWAY_SYSTEM_PREFIX", default_value = "cozy-")]
    pub system_prefix: String,

    /// Group that makes a caller trusted (repeatable; replaces the default list when given).
    #[arg(
        long = "trusted-group",
        env = "TENANT_GATEWAY_TRUSTED_GROUP",
        value_delimiter = ','
    )]
    pub trusted_groups: Vec<String>,

    /// Namespace label only trusted callers may write (repeatable; replaces the default list).
    #[arg(
        long = "guarded-label",
        env = "TENANT_GATEWAY_GUARDED_LABEL",
        value_delimiter = ','
    )]
    pub guarded_labels: Vec<String>,

    /// Namespace annotation only trusted callers may write (repeatable; replaces the default
    /// list).
    #[arg(
        long = "guarded-annotation",
        env = "TENANT_GATEWAY_GUARDED_ANNOTATION",
        value_delimiter = ','
    )]
    pub guarded_annotations: Vec<String>,

    /// Per-layer enforcement, LAYER=MODE (repeatable), e.g. route=warn.
    #[arg(
        long = "enforcement",
        env = "TENANT_GATEWAY_ENFORCEMENT",
        value_delimiter = ','
    )]
    pub enforcement: Vec<String>,

    /// A file of Namespace objects (`kubectl get ns -o yaml`) used instead of watching a cluster.
    #[arg(long, env = "TENANT_GATEWAY_NAMESPACES")]
    pub namespaces: Option<PathBuf>,
}

impl PolicyArgs {
    /// Validate the flags into the configuration every layer reads.
    pub fn policy_config(&self) -> Result<PolicyConfig, ConfigError> {
        let cfg = self.policy_config_offline()?;
        if cfg.root_host.is_none() && cfg.enforcement.mode(Layer::Ingress) != Mode::Off {
            return Err(ConfigError::MissingRootHost);
        }
        Ok(cfg)
    }

    /// The configuration for the offline commands, which need `--root-host` only when they
    /// meet an Ingress (they refuse that object then, naming the flag).
    pub fn policy_config_offline(&self) -> Result<PolicyConfig, ConfigError> {
        let mut enforcement = Enforcement::default();
        for item in &self.enforcement {
            let item = &item.trim().to_string();
            let (layer, mode) = item
                .split_once('=')
                .ok_or_else(|| ConfigError::Enforcement(item.clone()))?;
            let layer =
                Layer::parse(layer.trim()).ok_or_else(|| ConfigError::Enforcement(item.clone()))?;
            let mode =
                Mode::parse(mode.trim()).ok_or_else(|| ConfigError::Enforcement(item.clone()))?;
            enforcement.set(layer, mode);
        }
        if self.tenant_prefix.is_empty() {
            return Err(ConfigError::EmptyTenantPrefix);
        }
        // List entries are trimmed (`a, b` from the environment is two entries, not "a" and
        // " b"), and an entry that cannot be a group or a label key refuses to start: a typo
        // must never silently unguard a label or untrust a controller.
        let trusted_groups: Vec<String> = if self.trusted_groups.is_empty() {
            DEFAULT_TRUSTED_GROUPS
                .iter()
                .map(|s| s.to_string())
                .collect()
        } else {
            let groups: Vec<String> = self
                .trusted_groups
                .iter()
                .map(|g| g.trim().to_string())
                .collect();
            if groups.iter().any(String::is_empty) {
                return Err(ConfigError::EmptyTrustedGroup);
            }
            for g in &groups {
                if let Some(reason) = group_problem(g) {
                    return Err(ConfigError::BadTrustedGroup {
                        value: g.clone(),
                        reason,
                    });
                }
            }
            groups
        };
        let guarded_annotations = guarded_keys(
            &self.guarded_annotations,
            default_guarded_annotations,
            |value, reason| ConfigError::BadGuardedAnnotation { value, reason },
        )?;
        let guarded_labels = guarded_keys(
            &self.guarded_labels,
            default_guarded_labels,
            |value, reason| ConfigError::BadGuardedLabel { value, reason },
        )?;
        let root_host = match self.root_host.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(h) => Some(
                hostname::parse_apex(h).map_err(|e| ConfigError::BadRootHost {
                    host: h.to_string(),
                    reason: e.to_string(),
                })?,
            ),
        };
        Ok(PolicyConfig {
            tenant_prefix: self.tenant_prefix.clone(),
            system_prefix: self.system_prefix.clone(),
            root_host,
            trusted_groups,
            guarded_labels,
            guarded_annotations,
            enforcement,
        })
    }

    /// The static snapshot, when `--namespaces` is given.
    pub fn static_namespaces(&self) -> Result<Option<NamespaceSource>, ConfigError> {
        match &self.namespaces {
            None => Ok(None),
            Some(path) => {
                let snapshot = StaticNamespaces::from_file(path)?;
                // Build the apex map at start-up rather than in the first review that needs it.
                snapshot.apexes();
                Ok(Some(NamespaceSource::Static(Arc::new(snapshot))))
            }
        }
    }
}

/// A guarded-key list (`--guarded-label`, `--guarded-annotation`): the default when none is
/// given, else the entries trimmed, each a valid label/annotation key or the error `bad`
/// builds for the first one that is not.
fn guarded_keys(
    given: &[String],
    default: fn() -> Vec<String>,
    bad: fn(String, String) -> ConfigError,
) -> Result<Vec<String>, ConfigError> {
    if given.is_empty() {
        return Ok(default());
    }
    let keys: Vec<String> = given.iter().map(|k| k.trim().to_string()).collect();
    for k in &keys {
        if let Err(reason) = label_key_problem(k) {
            return Err(bad(k.clone(), reason));
        }
    }
    Ok(keys)
}

/// Why `g` cannot be a group name of `request.userInfo.groups`, if it cannot. Kubernetes
/// allows nearly any string; whitespace and control characters only come from typos.
fn group_problem(g: &str) -> Option<String> {
    g.chars()
        .find(|c| c.is_whitespace() || c.is_control())
        .map(|c| format!("it contains {c:?}"))
}

/// Checks a label key: `[prefix/]name`, the prefix a DNS-1123 subdomain of at most 253
/// characters, the name at most 63 characters of `[A-Za-z0-9_.-]`, alphanumeric at both ends
/// (Kubernetes' qualified name).
fn label_key_problem(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("it is empty".to_string());
    }
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err("the prefix before \"/\" is empty".to_string());
        }
        if hostname::is_wildcard(p) {
            return Err(format!("the prefix {p:?} is not a DNS subdomain"));
        }
        hostname::validate(p)
            .map_err(|e| format!("the prefix {p:?} is not a DNS subdomain: {e}"))?;
    }
    if name.is_empty() {
        return Err("the name part is empty".to_string());
    }
    if name.len() > 63 {
        return Err(format!(
            "the name part is {} characters long (at most 63)",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!("the name part contains {c:?}"));
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !alnum(name.chars().next()) || !alnum(name.chars().last()) {
        return Err("the name part must start and end with a letter or digit".to_string());
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Logging flags, global to every command.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(
        long,
        env = "TENANT_GATEWAY_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,

    /// Log level or tracing filter (e.g. info, debug, tenant_gateway=debug). Default: info for
    /// `serve`, error for the offline commands (their verdicts are the output).
    #[arg(long, env = "TENANT_GATEWAY_LOG_LEVEL", global = true)]
    pub log_level: Option<String>,
}

impl LogArgs {
    /// Install the global subscriber; logs go to stderr so `review`/`check` stdout stays data.
    pub fn init(&self, default_level: &str) {
        let level = self.log_level.as_deref().unwrap_or(default_level);
        let filter = tracing_subscriber::EnvFilter::try_new(level)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr);
        crate::logfield::set_json_format(self.log_format == LogFormat::Json);
        let _ = match self.log_format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().flatten_event(true).try_init(),
        };
    }
}

/// `serve` flags beyond the policy ones.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Webhook HTTPS address.
    #[arg(long, env = "TENANT_GATEWAY_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,

    /// Plain HTTP address for /metrics, /healthz, /readyz.
    #[arg(
        long,
        env = "TENANT_GATEWAY_METRICS_LISTEN",
        default_value = "0.0.0.0:9090"
    )]
    pub metrics_listen: SocketAddr,

    /// Serving certificate (PEM); reloaded when it changes.
    #[arg(long, env = "TENANT_GATEWAY_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,

    /// Serving key (PEM); reloaded when it changes.
    #[arg(long, env = "TENANT_GATEWAY_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,

    /// When set, clients must present a certificate signed by this CA (mTLS).
    #[arg(long, env = "TENANT_GATEWAY_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,

    /// Kubeconfig file; default: in-cluster, then $KUBECONFIG, then ~/.kube/config.
    #[arg(long, env = "TENANT_GATEWAY_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Do not run the admission webhook.
    #[arg(long, env = "TENANT_GATEWAY_NO_WEBHOOK")]
    pub no_webhook: bool,

    /// Do not run the TenantGateway reconciler.
    #[arg(long, env = "TENANT_GATEWAY_NO_CONTROLLER")]
    pub no_controller: bool,

    /// Do not run the wildcard-Secret replicator.
    #[arg(long, env = "TENANT_GATEWAY_NO_REPLICATOR")]
    pub no_replicator: bool,

    /// Namespace of the platform values Secret the replicator reads
    /// (`_cluster.wildcard-secret-name`, `_cluster.expose-ingress`).
    #[arg(
        long,
        env = "TENANT_GATEWAY_VALUES_SECRET_NAMESPACE",
        default_value = "cozy-system"
    )]
    pub values_secret_namespace: String,

    /// Name of the platform values Secret.
    #[arg(
        long,
        env = "TENANT_GATEWAY_VALUES_SECRET_NAME",
        default_value = "cozystack-values"
    )]
    pub values_secret_name: String,

    /// Key of the platform values Secret holding the values YAML.
    #[arg(
        long,
        env = "TENANT_GATEWAY_VALUES_SECRET_KEY",
        default_value = "values.yaml"
    )]
    pub values_secret_key: String,

    /// Namespace of the leader-election Lease (default: the pod's own namespace).
    #[arg(long, env = "TENANT_GATEWAY_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "TENANT_GATEWAY_LEADER_ELECTION_NAME",
        default_value = "tenant-gateway"
    )]
    pub leader_election_name: String,

    /// List both HTTPRoute and TLSRoute on every port-443 listener the reconciler renders
    /// (for data planes that merge port-443 listeners whose kinds differ, cilium#45559).
    #[arg(long, env = "TENANT_GATEWAY_UNIFORM_PORT_KINDS")]
    pub uniform_port_kinds: bool,

    /// Publish the audit's results as one wgpolicyk8s.io/v1alpha2 PolicyReport per
    /// namespace, named tenant-gateway (SPEC §3.9), written by the reconciler's Lease holder
    /// (refused with --no-audit, --no-controller or --namespaces). Needs the PolicyReport CRD
    /// installed (the chart's audit.installPolicyReportCRD, or Kyverno's).
    #[arg(long, env = "TENANT_GATEWAY_POLICY_REPORTS")]
    pub policy_reports: bool,
    /// Where a dns01/existingSecret TenantGateway's TLS-passthrough listeners go: `shared`
    /// keeps them on its Gateway beside the wildcard listener that covers their hostnames
    /// (the platform's layout; the TenantGateway reports ListenersOverlap), `separate` puts
    /// them on a second Gateway `<name>-passthrough` (for data planes that refuse such pairs,
    /// Cilium from 1.19.6).
    #[arg(
        long,
        env = "TENANT_GATEWAY_PASSTHROUGH_GATEWAY",
        value_enum,
        default_value_t = crate::platform::PassthroughGateway::Shared
    )]
    pub passthrough_gateway: crate::platform::PassthroughGateway,

    /// How often the certificate files are checked for changes, in seconds.
    #[arg(long, env = "TENANT_GATEWAY_TLS_RELOAD_INTERVAL", default_value = "2", value_parser = parse_secs)]
    pub tls_reload_interval: Duration,

    /// Longest time to finish in-flight requests after SIGTERM, in seconds.
    #[arg(long, env = "TENANT_GATEWAY_SHUTDOWN_GRACE", default_value = "20", value_parser = parse_secs)]
    pub shutdown_grace: Duration,

    /// Most concurrent client connections on the webhook port.
    #[arg(long, env = "TENANT_GATEWAY_MAX_CONNECTIONS", default_value = "1024")]
    pub max_connections: usize,

    /// Bytes of request bodies buffered at once across all connections (suffixes Ki, Mi,
    /// Gi); a request that cannot get its bytes within 1 s gets 503. At least the 36 MiB
    /// body limit.
    #[arg(long, env = "TENANT_GATEWAY_MAX_INFLIGHT_BYTES", default_value = "64Mi", value_parser = parse_bytes)]
    pub max_inflight_bytes: usize,

    /// Concurrent HTTP/2 streams per webhook connection.
    #[arg(long, env = "TENANT_GATEWAY_MAX_CONCURRENT_STREAMS", default_value = "32", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams: u32,

    /// Keep an own CA and serving pair in this Secret (self-managed certificates; needs the
    /// reconciler's Lease): the leader renews the pair at two thirds of its life and keeps the
    /// webhook configuration's caBundle; every replica serves the pair from --self-cert-dir.
    #[arg(long, env = "TENANT_GATEWAY_SELF_CERT_SECRET")]
    pub self_cert_secret: Option<String>,

    /// Namespace of --self-cert-secret (default: the pod's own namespace).
    #[arg(long, env = "TENANT_GATEWAY_SELF_CERT_NAMESPACE")]
    pub self_cert_namespace: Option<String>,

    /// DNS names / IP addresses of the self-managed serving certificate (repeatable).
    #[arg(
        long = "self-cert-host",
        env = "TENANT_GATEWAY_SELF_CERT_HOST",
        value_delimiter = ','
    )]
    pub self_cert_hosts: Vec<String>,

    /// Lifetime of a self-managed serving certificate, in seconds.
    #[arg(long, env = "TENANT_GATEWAY_SELF_CERT_VALIDITY", default_value = "31536000", value_parser = parse_validity)]
    pub self_cert_validity: Duration,

    /// Directory the self-managed pair is written to (Secret-volume layout).
    #[arg(
        long,
        env = "TENANT_GATEWAY_SELF_CERT_DIR",
        default_value = "/run/tenant-gateway/tls"
    )]
    pub self_cert_dir: PathBuf,

    /// Do not audit the objects already in the cluster (SPEC §3.9: the guarded kinds judged
    /// continuously, tenant_gateway_audit_* metrics, Warning events from the Lease holder).
    #[arg(long, env = "TENANT_GATEWAY_NO_AUDIT")]
    pub no_audit: bool,

    /// ValidatingWebhookConfiguration whose caBundle the self-managed CA keeps current.
    #[arg(
        long,
        env = "TENANT_GATEWAY_WEBHOOK_CONFIGURATION_NAME",
        default_value = "tenant-gateway"
    )]
    pub webhook_configuration_name: String,
}

/// `check` flags beyond the policy ones.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Manifest file, directory, or `-` (repeatable).
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        env = "TENANT_GATEWAY_FILENAME",
        value_delimiter = ','
    )]
    pub files: Vec<PathBuf>,
    /// Read the subdirectories of directories given with -f too.
    #[arg(short = 'R', long, env = "TENANT_GATEWAY_RECURSIVE")]
    pub recursive: bool,
    /// User to evaluate as.
    #[arg(long = "as", env = "TENANT_GATEWAY_AS", default_value = "check-user")]
    pub as_user: String,
    /// Group of that user (repeatable).
    #[arg(
        long = "as-group",
        env = "TENANT_GATEWAY_AS_GROUP",
        value_delimiter = ','
    )]
    pub as_groups: Vec<String>,
    /// Namespace for namespaced objects that name none (default: the kubeconfig context's
    /// namespace when --kubeconfig or $KUBECONFIG is in use, else `default`, as kubectl).
    #[arg(short = 'n', long = "namespace", env = "TENANT_GATEWAY_NAMESPACE")]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        env = "TENANT_GATEWAY_OUTPUT",
        default_value = "table"
    )]
    pub output: CheckOutput,
    /// Read namespaces (and existing objects) from this cluster instead of a snapshot.
    /// Read-only: check never writes.
    #[arg(long, env = "TENANT_GATEWAY_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (implies reading the cluster).
    #[arg(long, env = "TENANT_GATEWAY_CONTEXT")]
    pub context: Option<String>,
    /// With a cluster: evaluate every object as a CREATE, even when it exists already.
    #[arg(long, env = "TENANT_GATEWAY_CREATE_ONLY")]
    pub create_only: bool,
    /// HTTPRoute/TLSRoute objects and TenantGateways (`kubectl get
    /// httproutes,tlsroutes,tenantgateways -A -o yaml`) to warn
    /// about hostname conflicts and the listener budget as the server would (with a
    /// cluster, its routes are read instead).
    #[arg(long, env = "TENANT_GATEWAY_ROUTES")]
    pub routes: Option<PathBuf>,
}

/// `check --output`, `audit --output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckOutput {
    Table,
    Json,
}

/// `audit` flags beyond the policy ones: a cluster (`--kubeconfig`, `--context`), or a
/// snapshot (`--namespaces FILE -f DIR`).
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// A snapshot of the objects to audit instead of a cluster: files or directories of
    /// `kubectl get … -o yaml` output, or `-` (repeatable; needs --namespaces).
    #[arg(
        short = 'f',
        long = "filename",
        env = "TENANT_GATEWAY_FILENAME",
        value_delimiter = ','
    )]
    pub files: Vec<PathBuf>,
    /// Read the subdirectories of directories given with -f too.
    #[arg(short = 'R', long, env = "TENANT_GATEWAY_RECURSIVE")]
    pub recursive: bool,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        env = "TENANT_GATEWAY_OUTPUT",
        default_value = "table"
    )]
    pub output: CheckOutput,
    /// Kubeconfig file of the cluster to audit; default: in-cluster, then $KUBECONFIG, then
    /// ~/.kube/config. Read-only: audit never writes.
    #[arg(long, env = "TENANT_GATEWAY_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long, env = "TENANT_GATEWAY_CONTEXT")]
    pub context: Option<String>,
}

/// A byte count: a plain number, or one with a binary suffix (`64Mi`, `512Ki`, `1Gi`).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => {
            return Err(format!(
                "{s:?}: expected a number of bytes, optionally with Ki, Mi or Gi (e.g. 64Mi)"
            ));
        }
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{s:?}: expected a number of bytes (e.g. 67108864 or 64Mi)"))?;
    n.checked_mul(1usize << shift)
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("{s:?}: must be more than 0 and fit in memory"))
}

fn parse_validity(s: &str) -> Result<Duration, String> {
    let v: u64 = s
        .trim_end_matches('s')
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number of seconds"))?;
    // Under 30 s the renewal (at two thirds) would chase itself; over ten years the CA
    // (ten years) would expire first.
    if !(30..=315_360_000).contains(&v) {
        return Err(format!("{s:?} must be between 30 seconds and ten years"));
    }
    Ok(Duration::from_secs(v))
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim_end_matches('s')
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    // Zero would make the reload poll spin and the drain cut every request.
    if !(v > 0.0 && v <= 3600.0) {
        return Err(format!(
            "{s:?} must be more than 0 and at most 3600 seconds"
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{ATTACHED_BY_ANNOTATION, GATEWAY_LABEL, HOST_LABEL, INGRESS_LABEL};

    #[test]
    fn byte_counts_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("64Mi"), Ok(64 * 1024 * 1024));
        assert_eq!(parse_bytes("512Ki"), Ok(512 * 1024));
        assert_eq!(parse_bytes("1Gi"), Ok(1 << 30));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        for bad in [
            "",
            "0",
            "64MB",
            "-1",
            "Mi",
            "1.5Mi",
            "99999999999999999999Gi",
        ] {
            assert!(parse_bytes(bad).is_err(), "{bad:?}");
        }
    }

    fn args(enforcement: &[&str], root: Option<&str>) -> PolicyArgs {
        PolicyArgs {
            root_host: root.map(str::to_string),
            tenant_prefix: "tenant-".into(),
            system_prefix: "cozy-".into(),
            trusted_groups: vec![],
            guarded_labels: vec![],
            guarded_annotations: vec![],
            enforcement: enforcement.iter().map(|s| s.to_string()).collect(),
            namespaces: None,
        }
    }

    #[test]
    fn ingress_layer_needs_root_host() {
        let e = args(&[], None).policy_config().expect_err("no root host");
        assert!(matches!(e, ConfigError::MissingRootHost));
        assert!(e.to_string().contains("--root-host"));
        let cfg = args(&[], None)
            .policy_config_offline()
            .expect("offline commands check the root host per object");
        assert_eq!(cfg.root_host, None);
        let cfg = args(&["ingress=off"], None)
            .policy_config()
            .expect("layer off");
        assert_eq!(cfg.enforcement.mode(Layer::Ingress), Mode::Off);
        let cfg = args(&[], Some("Example.ORG"))
            .policy_config()
            .expect("root set");
        assert_eq!(cfg.root_host.as_deref(), Some("example.org"));
    }

    #[test]
    fn enforcement_parses_and_rejects() {
        let cfg = args(&["route=warn", "gateway=audit"], Some("example.org"))
            .policy_config()
            .expect("valid");
        assert_eq!(cfg.enforcement.mode(Layer::Route), Mode::Warn);
        assert_eq!(cfg.enforcement.mode(Layer::Gateway), Mode::Audit);
        assert_eq!(cfg.enforcement.mode(Layer::Tenant), Mode::Deny);
        for bad in ["route", "routes=deny", "route=block", "=deny"] {
            assert!(
                args(&[bad], Some("example.org")).policy_config().is_err(),
                "{bad} must be rejected"
            );
        }
    }

    #[test]
    fn list_entries_are_trimmed_and_validated() {
        let with = |groups: &[&str], labels: &[&str], enf: &[&str]| PolicyArgs {
            trusted_groups: groups.iter().map(|s| s.to_string()).collect(),
            guarded_labels: labels.iter().map(|s| s.to_string()).collect(),
            ..args(enf, Some("example.org"))
        };
        // As clap splits TENANT_GATEWAY_GUARDED_LABEL="a, b": both are guarded.
        let cfg = with(
            &[" system:masters", "team:ops "],
            &["namespace.cozystack.io/host", " example.com/b"],
            &[" route = warn", "ingress=audit "],
        )
        .policy_config()
        .expect("valid after trimming");
        assert_eq!(cfg.trusted_groups, vec!["system:masters", "team:ops"]);
        assert_eq!(
            cfg.guarded_labels,
            vec!["namespace.cozystack.io/host", "example.com/b"]
        );
        assert_eq!(cfg.enforcement.mode(Layer::Route), Mode::Warn);
        assert_eq!(cfg.enforcement.mode(Layer::Ingress), Mode::Audit);

        // (labels, phrase of the error)
        let bad_labels: &[(&str, &str)] = &[
            ("", "it is empty"),
            ("  ", "it is empty"),
            ("a b", "contains ' '"),
            ("/host", "prefix before \"/\" is empty"),
            ("namespace.cozystack.io/", "name part is empty"),
            ("Namespace.Cozystack.io/host", "not a DNS subdomain"),
            ("a/b/c", "contains '/'"),
            ("-host", "start and end"),
            ("host.", "start and end"),
            ("*.x.io/host", "not a DNS subdomain"),
            ("namespace.cozystack.io/h\u{e9}st", "contains"),
        ];
        let long = "a".repeat(64);
        for (label, phrase) in bad_labels
            .iter()
            .copied()
            .chain([(long.as_str(), "at most 63")])
        {
            let e = with(&[], &["namespace.cozystack.io/host", label], &[])
                .policy_config()
                .expect_err(label);
            assert!(
                matches!(e, ConfigError::BadGuardedLabel { .. }),
                "{label:?}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.contains(phrase) && text.contains("--guarded-label"),
                "{label:?}: {text}"
            );
        }
        for ok in ["team", "a.b-c_d", "x.io/A_b.9", "k8s.io/x"] {
            assert!(with(&[], &[ok], &[]).policy_config().is_ok(), "{ok}");
        }
        let annotations = |keys: &[&str]| PolicyArgs {
            guarded_annotations: keys.iter().map(|s| s.to_string()).collect(),
            ..args(&[], Some("example.org"))
        };
        let cfg = annotations(&[" example.com/a", "b "])
            .policy_config()
            .expect("valid after trimming");
        assert_eq!(cfg.guarded_annotations, vec!["example.com/a", "b"]);
        for (key, phrase) in bad_labels {
            let e = annotations(&["example.com/a", key])
                .policy_config()
                .expect_err(key);
            assert!(
                matches!(e, ConfigError::BadGuardedAnnotation { .. }),
                "{key:?}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.contains(phrase) && text.contains("--guarded-annotation"),
                "{key:?}: {text}"
            );
        }

        for (group, empty) in [
            ("", true),
            (" ", true),
            ("system:masters x", false),
            ("a\tb", false),
        ] {
            let e = with(&["system:masters", group], &[], &[])
                .policy_config()
                .expect_err(group);
            if empty {
                assert!(
                    matches!(e, ConfigError::EmptyTrustedGroup),
                    "{group:?}: {e:?}"
                );
            } else {
                assert!(
                    matches!(e, ConfigError::BadTrustedGroup { .. }),
                    "{group:?}: {e:?}"
                );
                assert!(e.to_string().contains("--trusted-group"), "{e}");
            }
        }
        assert!(
            with(&[], &[], &["route=warn", " "])
                .policy_config()
                .is_err()
        );
    }

    #[test]
    fn defaults_match_spec() {
        let cfg = args(&[], Some("example.org"))
            .policy_config()
            .expect("valid");
        assert_eq!(cfg.trusted_groups.len(), 5);
        assert!(
            cfg.trusted_groups
                .contains(&"system:serviceaccounts:cozy-fluxcd".to_string())
        );
        assert_eq!(
            cfg.guarded_labels,
            vec![
                HOST_LABEL.to_string(),
                GATEWAY_LABEL.to_string(),
                INGRESS_LABEL.to_string()
            ]
        );
        assert_eq!(
            cfg.guarded_annotations,
            vec![
                ATTACHED_BY_ANNOTATION.to_string(),
                crate::platform::PLATFORM_ATTACHED_BY_ANNOTATION.to_string()
            ]
        );
        let e = args(&[], Some("*.example.org"))
            .policy_config()
            .expect_err("wildcard root");
        assert!(e.to_string().contains("wildcard"));
    }
}
