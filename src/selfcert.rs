//! Self-managed serving certificate (`--self-cert-secret`, the chart's
//! `certificates.mode=self`): the process keeps its own CA and serving pair in one Secret,
//! renews the serving certificate once less than a third of its lifetime is left, and keeps
//! the `caBundle` of its ValidatingWebhookConfiguration equal to the CA. Only the leader
//! writes (the Secret and the webhook configuration); every replica copies the pair from the
//! Secret into a local directory with the Secret-volume layout (`..data` symlink swapped
//! atomically), where the existing hot reload picks it up.
//!
//! The decision is pure ([`decide`]); [`run`] only reads, writes and sleeps.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};

use crate::certs::{self, CertsError};
use crate::cluster::lease::Leader;

pub const CA_CERT_KEY: &str = "ca.crt";
pub const CA_KEY_KEY: &str = "ca.key";
pub const TLS_CERT_KEY: &str = "tls.crt";
pub const TLS_KEY_KEY: &str = "tls.key";

/// Certificates are valid from a little before they are made: tolerates clock skew between
/// the replica that issues and the API server that verifies.
const SKEW: u64 = 300;

#[derive(Debug, Clone)]
pub struct SelfCertConfig {
    pub namespace: String,
    pub secret: String,
    pub webhook_configuration: String,
    pub hosts: Vec<String>,
    pub validity: Duration,
    /// Where the pair is written: `<dir>/tls.crt`, `<dir>/tls.key`.
    pub dir: PathBuf,
}

impl SelfCertConfig {
    pub fn cert_file(&self) -> PathBuf {
        self.dir.join(TLS_CERT_KEY)
    }
    pub fn key_file(&self) -> PathBuf {
        self.dir.join(TLS_KEY_KEY)
    }
    /// How often the Secret is checked: often enough to renew well inside the last third.
    pub fn check_every(&self) -> Duration {
        (self.validity / 30).clamp(Duration::from_secs(1), Duration::from_secs(10))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SelfCertError {
    #[error("cannot make the self-managed certificates: {0}")]
    Certs(#[from] CertsError),
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("cannot write the serving pair into {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> SelfCertError {
    let action = action.into();
    move |source| SelfCertError::Kube {
        action,
        source: Box::new(source),
    }
}

/// What the Secret holds, as text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Material {
    pub ca_cert: String,
    pub ca_key: String,
    pub tls_cert: String,
    pub tls_key: String,
}

impl Material {
    fn from_secret(s: &Secret) -> Material {
        let get = |k: &str| {
            s.data
                .as_ref()
                .and_then(|d| d.get(k))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                .unwrap_or_default()
        };
        Material {
            ca_cert: get(CA_CERT_KEY),
            ca_key: get(CA_KEY_KEY),
            tls_cert: get(TLS_CERT_KEY),
            tls_key: get(TLS_KEY_KEY),
        }
    }

    fn data(&self) -> BTreeMap<String, ByteString> {
        [
            (CA_CERT_KEY, &self.ca_cert),
            (CA_KEY_KEY, &self.ca_key),
            (TLS_CERT_KEY, &self.tls_cert),
            (TLS_KEY_KEY, &self.tls_key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect()
    }
}

/// What the leader has to do with the Secret's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Keep,
    /// A new CA and a new serving pair (no usable CA).
    NewCa {
        reason: String,
    },
    /// A new serving pair from the existing CA.
    Renew {
        reason: String,
    },
}

/// Decide from the Secret's contents (`None`: no Secret), the wanted SANs, the configured
/// lifetime and the time now (Unix seconds).
pub fn decide(m: Option<&Material>, hosts: &[String], validity: Duration, now: u64) -> Decision {
    let Some(m) = m else {
        return Decision::NewCa {
            reason: "no Secret yet".into(),
        };
    };
    let Some(ca) = pem_der(&m.ca_cert) else {
        return Decision::NewCa {
            reason: "the CA certificate does not parse".into(),
        };
    };
    let Ok((_, ca)) = x509_parser::parse_x509_certificate(&ca) else {
        return Decision::NewCa {
            reason: "the CA certificate does not parse".into(),
        };
    };
    if m.ca_key.trim().is_empty() {
        return Decision::NewCa {
            reason: "the CA key is missing".into(),
        };
    }
    let ca_end = u64::try_from(ca.validity().not_after.timestamp()).unwrap_or(0);
    if ca_end <= now + validity.as_secs() {
        return Decision::NewCa {
            reason: "the CA expires before a new serving certificate would".into(),
        };
    }
    let Some(leaf) = pem_der(&m.tls_cert) else {
        return Decision::Renew {
            reason: "no serving certificate".into(),
        };
    };
    let Ok((_, leaf)) = x509_parser::parse_x509_certificate(&leaf) else {
        return Decision::Renew {
            reason: "the serving certificate does not parse".into(),
        };
    };
    if m.tls_key.trim().is_empty() {
        return Decision::Renew {
            reason: "the serving key is missing".into(),
        };
    }
    // Same subject is not enough (every CA made here has the same name): the leaf's
    // authority key identifier must be the CA's subject key identifier.
    if leaf.issuer().as_raw() != ca.subject().as_raw()
        || authority_key_id(&leaf).is_none()
        || authority_key_id(&leaf) != subject_key_id(&ca)
    {
        return Decision::Renew {
            reason: "the serving certificate is not from this CA".into(),
        };
    }
    let end = u64::try_from(leaf.validity().not_after.timestamp()).unwrap_or(0);
    // Renew at two thirds of the configured lifetime: less than a third left.
    if end <= now + validity.as_secs() / 3 {
        return Decision::Renew {
            reason: "less than a third of its lifetime left".into(),
        };
    }
    let mut have: Vec<String> = leaf
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|g| match g {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                    x509_parser::extensions::GeneralName::IPAddress(b) => ip_text(b),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let mut want: Vec<String> = hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
    have.sort();
    want.sort();
    if have != want {
        return Decision::Renew {
            reason: "the hosts changed".into(),
        };
    }
    Decision::Keep
}

fn authority_key_id(c: &x509_parser::certificate::X509Certificate<'_>) -> Option<Vec<u8>> {
    c.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(a) => {
                a.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => None,
        })
}

fn subject_key_id(c: &x509_parser::certificate::X509Certificate<'_>) -> Option<Vec<u8>> {
    c.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0.to_vec()),
            _ => None,
        })
}

fn ip_text(b: &[u8]) -> Option<String> {
    match b.len() {
        4 => <[u8; 4]>::try_from(b)
            .ok()
            .map(|a| std::net::Ipv4Addr::from(a).to_string()),
        16 => <[u8; 16]>::try_from(b)
            .ok()
            .map(|a| std::net::Ipv6Addr::from(a).to_string()),
        _ => None,
    }
}

fn pem_der(pem: &str) -> Option<Vec<u8>> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    Some(p.contents)
}

/// The material after `d` (`None` when there is nothing to write).
pub fn apply(
    d: &Decision,
    current: Option<&Material>,
    hosts: &[String],
    validity: Duration,
    now: u64,
) -> Result<Option<Material>, CertsError> {
    let (ca_cert, ca_key) = match (d, current) {
        (Decision::Keep, _) => return Ok(None),
        (Decision::NewCa { .. }, _) | (Decision::Renew { .. }, None) => {
            certs::self_ca("tenant-gateway self-managed CA")?
        }
        (Decision::Renew { .. }, Some(m)) => (m.ca_cert.clone(), m.ca_key.clone()),
    };
    let (tls_cert, tls_key) = certs::serving_signed_by(
        &ca_cert,
        &ca_key,
        hosts,
        now.saturating_sub(SKEW),
        now + validity.as_secs(),
    )?;
    Ok(Some(Material {
        ca_cert,
        ca_key,
        tls_cert,
        tls_key,
    }))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One leader step: the Secret, then the webhook configuration's caBundle.
async fn lead(client: &Client, cfg: &SelfCertConfig) -> Result<(), SelfCertError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let existing = api.get_opt(&cfg.secret).await.map_err(kube_err(format!(
        "get Secret {}/{}",
        cfg.namespace, cfg.secret
    )))?;
    let current = existing.as_ref().map(Material::from_secret);
    let t = now();
    let d = decide(current.as_ref(), &cfg.hosts, cfg.validity, t);
    let ca = if let Some(next) = apply(&d, current.as_ref(), &cfg.hosts, cfg.validity, t)? {
        tracing::info!(decision = ?d, secret = %cfg.secret, "issuing the self-managed serving certificate");
        let mut secret = existing.unwrap_or_else(|| Secret {
            metadata: ObjectMeta {
                name: Some(cfg.secret.clone()),
                namespace: Some(cfg.namespace.clone()),
                labels: Some(
                    [(
                        crate::platform::MANAGED_BY_LABEL.to_string(),
                        crate::platform::MANAGED_BY_VALUE.to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            type_: Some("Opaque".into()),
            ..Default::default()
        });
        secret.data = Some(next.data());
        let pp = PostParams::default();
        // Replace is conditional on the resourceVersion read: a concurrent writer wins.
        let res = if secret.metadata.resource_version.is_some() {
            api.replace(&cfg.secret, &pp, &secret).await
        } else {
            api.create(&pp, &secret).await
        };
        match res {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(e) => return Err(kube_err(format!("write Secret {}", cfg.secret))(e)),
        }
        next.ca_cert
    } else {
        current.map(|m| m.ca_cert).unwrap_or_default()
    };
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let Some(mut vwc) = vwcs
        .get_opt(&cfg.webhook_configuration)
        .await
        .map_err(kube_err(format!(
            "get ValidatingWebhookConfiguration {}",
            cfg.webhook_configuration
        )))?
    else {
        tracing::debug!(name = %cfg.webhook_configuration, "no webhook configuration to keep the caBundle of");
        return Ok(());
    };
    let mut changed = false;
    for w in vwc.webhooks.iter_mut().flatten() {
        // caBundle is base64 on the wire; ByteString holds the decoded PEM bytes.
        let want = ByteString(ca.as_bytes().to_vec());
        if w.client_config.ca_bundle.as_ref() != Some(&want) {
            w.client_config.ca_bundle = Some(want);
            changed = true;
        }
    }
    if changed {
        match vwcs
            .replace(&cfg.webhook_configuration, &PostParams::default(), &vwc)
            .await
        {
            Ok(_) => {
                tracing::info!(name = %cfg.webhook_configuration, "webhook caBundle set to the self-managed CA")
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => {
                return Err(kube_err(format!(
                    "update ValidatingWebhookConfiguration {}",
                    cfg.webhook_configuration
                ))(e));
            }
        }
    }
    Ok(())
}

/// Every replica: copy the pair into `dir` when it differs from what is there, with one
/// atomic symlink swap (the Secret-volume layout), so the reloader never sees half a pair
/// for longer than one poll.
pub fn write_pair(dir: &Path, cert: &str, key: &str) -> Result<bool, SelfCertError> {
    let werr = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SelfCertError::Write { path, source }
    };
    let cert_file = dir.join(TLS_CERT_KEY);
    let key_file = dir.join(TLS_KEY_KEY);
    if std::fs::read_to_string(&cert_file).is_ok_and(|c| c == cert)
        && std::fs::read_to_string(&key_file).is_ok_and(|k| k == key)
    {
        return Ok(false);
    }
    std::fs::create_dir_all(dir).map_err(werr(dir))?;
    let stamp = format!(
        "..{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let gen_dir = dir.join(&stamp);
    std::fs::create_dir_all(&gen_dir).map_err(werr(&gen_dir))?;
    for (name, text) in [(TLS_CERT_KEY, cert), (TLS_KEY_KEY, key)] {
        let p = gen_dir.join(name);
        write_private(&p, text).map_err(werr(&p))?;
    }
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&stamp, &tmp_link).map_err(werr(&tmp_link))?;
    let data = dir.join("..data");
    let old = std::fs::read_link(&data).ok();
    std::fs::rename(&tmp_link, &data).map_err(werr(&data))?;
    for name in [TLS_CERT_KEY, TLS_KEY_KEY] {
        let link = dir.join(name);
        if std::fs::read_link(&link).is_err() {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link)
                .map_err(werr(&link))?;
        }
    }
    if let Some(old) = old.filter(|o| o != Path::new(&stamp)) {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(true)
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

/// One step of every replica: lead when leader, then copy the pair from the Secret.
pub async fn step(
    client: &Client,
    cfg: &SelfCertConfig,
    leader: &Leader,
) -> Result<bool, SelfCertError> {
    if leader.is_leader() {
        lead(client, cfg).await?;
    }
    let api: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let Some(s) = api.get_opt(&cfg.secret).await.map_err(kube_err(format!(
        "get Secret {}/{}",
        cfg.namespace, cfg.secret
    )))?
    else {
        return Ok(false);
    };
    let m = Material::from_secret(&s);
    if m.tls_cert.is_empty() || m.tls_key.is_empty() {
        return Ok(false);
    }
    write_pair(&cfg.dir, &m.tls_cert, &m.tls_key)
}

/// Until the process ends.
pub async fn run(client: Client, cfg: SelfCertConfig, leader: Leader) {
    let mut ticker = tokio::time::interval(cfg.check_every());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match step(&client, &cfg, &leader).await {
            Ok(true) => {
                tracing::info!(dir = %cfg.dir.display(), "self-managed serving pair written")
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "self-managed certificate step failed; retrying"),
        }
    }
}

/// Wait until the pair is on disk (the leader creates it on its first step), checking every
/// `every`.
pub async fn wait_for_pair(
    client: &Client,
    cfg: &SelfCertConfig,
    leader: &Leader,
) -> Result<(), SelfCertError> {
    let mut warned = false;
    loop {
        match step(client, cfg, leader).await {
            Ok(_) if cfg.cert_file().exists() && cfg.key_file().exists() => return Ok(()),
            Ok(_) => {}
            Err(e) if !warned => {
                tracing::warn!(error = %e, "waiting for the self-managed certificate");
                warned = true;
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> Vec<String> {
        vec!["tg.cozy-system.svc".into(), "127.0.0.1".into()]
    }

    const DAY: Duration = Duration::from_secs(86_400);

    fn fresh(now: u64, validity: Duration) -> Material {
        apply(
            &Decision::NewCa {
                reason: String::new(),
            },
            None,
            &hosts(),
            validity,
            now,
        )
        .expect("issue")
        .expect("material")
    }

    #[test]
    fn nothing_yet_makes_a_ca_and_a_pair_then_keeps_it() {
        let now = 1_900_000_000;
        assert!(matches!(
            decide(None, &hosts(), DAY, now),
            Decision::NewCa { .. }
        ));
        let m = fresh(now, DAY);
        assert_eq!(decide(Some(&m), &hosts(), DAY, now), Decision::Keep);
        // Until two thirds of the lifetime, then renewal from the same CA.
        assert_eq!(
            decide(Some(&m), &hosts(), DAY, now + DAY.as_secs() * 2 / 3 - 60),
            Decision::Keep
        );
        let later = now + DAY.as_secs() * 2 / 3 + 1;
        let d = decide(Some(&m), &hosts(), DAY, later);
        assert!(matches!(d, Decision::Renew { .. }), "{d:?}");
        let renewed = apply(&d, Some(&m), &hosts(), DAY, later)
            .expect("renew")
            .expect("material");
        assert_eq!(
            renewed.ca_cert, m.ca_cert,
            "the CA stays: the caBundle need not change"
        );
        assert_ne!(renewed.tls_cert, m.tls_cert);
        assert_eq!(decide(Some(&renewed), &hosts(), DAY, later), Decision::Keep);
    }

    #[test]
    fn changed_hosts_foreign_or_broken_pairs_renew_and_a_broken_ca_is_replaced() {
        let now = 1_900_000_000;
        let m = fresh(now, DAY);
        let other = vec!["other.svc".to_string()];
        assert!(matches!(
            decide(Some(&m), &other, DAY, now),
            Decision::Renew { .. }
        ));
        let foreign = fresh(now, DAY);
        let mixed = Material {
            tls_cert: foreign.tls_cert.clone(),
            ..m.clone()
        };
        assert!(matches!(
            decide(Some(&mixed), &hosts(), DAY, now),
            Decision::Renew { .. }
        ));
        let no_key = Material {
            tls_key: String::new(),
            ..m.clone()
        };
        assert!(matches!(
            decide(Some(&no_key), &hosts(), DAY, now),
            Decision::Renew { .. }
        ));
        let bad_ca = Material {
            ca_cert: "garbage".into(),
            ..m.clone()
        };
        assert!(matches!(
            decide(Some(&bad_ca), &hosts(), DAY, now),
            Decision::NewCa { .. }
        ));
        let no_ca_key = Material {
            ca_key: String::new(),
            ..m
        };
        assert!(matches!(
            decide(Some(&no_ca_key), &hosts(), DAY, now),
            Decision::NewCa { .. }
        ));
    }

    #[test]
    fn pair_is_written_with_one_symlink_swap_and_only_when_it_changed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().join("tls");
        assert!(write_pair(&d, "C1", "K1").expect("write"));
        assert!(!write_pair(&d, "C1", "K1").expect("same"));
        assert_eq!(
            std::fs::read_to_string(d.join("tls.crt")).expect("read"),
            "C1"
        );
        assert!(write_pair(&d, "C2", "K2").expect("write"));
        assert_eq!(
            std::fs::read_to_string(d.join("tls.crt")).expect("read"),
            "C2"
        );
        assert_eq!(
            std::fs::read_to_string(d.join("tls.key")).expect("read"),
            "K2"
        );
        // Old generations are removed.
        let gens = std::fs::read_dir(&d)
            .expect("dir")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("..1"))
            })
            .count();
        assert_eq!(gens, 1);
    }
}
