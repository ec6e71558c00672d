//! Development CA and serving certificate (`tenant-gateway certs`, SPEC §4).
//!
//! Everything here is for development and tests: the CA key never leaves memory unless a
//! caller writes it out on purpose, and validity periods are fixed (CA ten years, leaf
//! certificates one year) because nobody should run production on these.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Namespace and Service name the chart installs the webhook under; the default SANs cover
/// every form the API server or a developer may use to reach it.
const SERVICE: &str = "tenant-gateway";
const NAMESPACE: &str = "cozy-system";

const CA_VALIDITY_DAYS: i64 = 3650;
const LEAF_VALIDITY_DAYS: i64 = 365;

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("no hosts given: the serving certificate needs at least one DNS name or IP address")]
    NoHosts,
    #[error("host {host:?} cannot be put in a certificate: {reason}")]
    InvalidHost { host: String, reason: String },
    #[error("cannot generate the {what}: {source}")]
    Generate {
        what: &'static str,
        source: rcgen::Error,
    },
    #[error("cannot read the CA for signing: {0}")]
    BadCa(rcgen::Error),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// PEM texts of a development CA and a serving certificate signed by it.
#[derive(Clone)]
pub struct DevCerts {
    /// `ca.crt`: what clients (the API server's `caBundle`, test clients) trust.
    pub ca_cert_pem: String,
    /// The CA's private key, kept so tests can sign client certificates; [`write()`] does not
    /// write it.
    pub ca_key_pem: String,
    /// `tls.crt`.
    pub tls_cert_pem: String,
    /// `tls.key` (PKCS#8).
    pub tls_key_pem: String,
}

impl std::fmt::Debug for DevCerts {
    // Private keys stay out of logs and test failure output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevCerts")
            .field("ca_cert_pem", &self.ca_cert_pem)
            .field("tls_cert_pem", &self.tls_cert_pem)
            .finish_non_exhaustive()
    }
}

/// A client certificate and key, for mutual-TLS tests and development.
#[derive(Clone)]
pub struct ClientCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl ClientCert {
    /// Certificate followed by key, the single-PEM form most HTTP clients take as identity.
    pub fn identity_pem(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }
}

impl std::fmt::Debug for ClientCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCert")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// localhost, the loopback addresses and every name of the in-cluster Service.
pub fn default_hosts() -> Vec<String> {
    vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
        SERVICE.to_string(),
        format!("{SERVICE}.{NAMESPACE}"),
        format!("{SERVICE}.{NAMESPACE}.svc"),
        format!("{SERVICE}.{NAMESPACE}.svc.cluster.local"),
    ]
}

/// A fresh CA and a serving certificate for `hosts` (IP addresses become IP SANs, everything
/// else DNS SANs). Each call makes new keys, so two calls never produce the same certificate.
pub fn generate(hosts: &[String]) -> Result<DevCerts, CertsError> {
    let sans = subject_alt_names(hosts)?;
    let (ca_params, ca_key) = new_ca("tenant-gateway development CA")?;
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .map_err(|source| CertsError::Generate {
            what: "CA certificate",
            source,
        })?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut params = leaf_params(hosts.first().map(String::as_str).unwrap_or(SERVICE));
    params.subject_alt_names = sans;
    params
        .extended_key_usages
        .push(ExtendedKeyUsagePurpose::ServerAuth);
    let key = new_key("serving key")?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|source| CertsError::Generate {
            what: "serving certificate",
            source,
        })?;

    Ok(DevCerts {
        ca_cert_pem: ca_cert.pem(),
        ca_key_pem: issuer.key().serialize_pem(),
        tls_cert_pem: cert.pem(),
        tls_key_pem: key.serialize_pem(),
    })
}

/// A client certificate (extended key usage clientAuth, CN `common_name`) signed by the CA
/// whose certificate and key are given, e.g. [`DevCerts::ca_cert_pem`] / `ca_key_pem`.
/// For tests and development of `--client-ca-file`.
pub fn generate_client(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    common_name: &str,
) -> Result<ClientCert, CertsError> {
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(CertsError::BadCa)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(CertsError::BadCa)?;
    let mut params = leaf_params(common_name);
    params
        .extended_key_usages
        .push(ExtendedKeyUsagePurpose::ClientAuth);
    let key = new_key("client key")?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|source| CertsError::Generate {
            what: "client certificate",
            source,
        })?;
    Ok(ClientCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A CA for `serve`'s self-managed certificates (`--self-cert-secret`): PEM certificate and
/// key, valid for ten years from yesterday.
pub fn self_ca(common_name: &str) -> Result<(String, String), CertsError> {
    let (params, key) = new_ca(common_name)?;
    let cert = params
        .self_signed(&key)
        .map_err(|source| CertsError::Generate {
            what: "CA certificate",
            source,
        })?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A serving certificate for `hosts` signed by the given CA, valid between the two Unix
/// times (seconds). Returns the certificate and key PEM.
pub fn serving_signed_by(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    hosts: &[String],
    not_before: u64,
    not_after: u64,
) -> Result<(String, String), CertsError> {
    let sans = subject_alt_names(hosts)?;
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(CertsError::BadCa)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(CertsError::BadCa)?;
    let mut params = leaf_params(hosts.first().map(String::as_str).unwrap_or(SERVICE));
    params.subject_alt_names = sans;
    params
        .extended_key_usages
        .push(ExtendedKeyUsagePurpose::ServerAuth);
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + std::time::Duration::from_secs(not_before);
    params.not_after = epoch + std::time::Duration::from_secs(not_after);
    let key = new_key("serving key")?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|source| CertsError::Generate {
            what: "serving certificate",
            source,
        })?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Write `ca.crt`, `tls.crt` and `tls.key` (mode 0600) into `dir`, creating it if needed.
/// Returns the paths written.
pub fn write(dir: &Path, certs: &DevCerts) -> Result<Vec<PathBuf>, CertsError> {
    std::fs::create_dir_all(dir).map_err(|source| CertsError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let files = [
        ("ca.crt", certs.ca_cert_pem.as_str(), false),
        ("tls.crt", certs.tls_cert_pem.as_str(), false),
        ("tls.key", certs.tls_key_pem.as_str(), true),
    ];
    let mut written = Vec::with_capacity(files.len());
    for (name, contents, secret) in files {
        let path = dir.join(name);
        write_file(&path, contents.as_bytes(), secret).map_err(|source| CertsError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}

fn write_file(path: &Path, contents: &[u8], secret: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    // `mode` only applies when the file is created; an existing key file from an older run
    // may be world-readable, so tighten it before the key goes in.
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(contents)?;
    file.sync_all()
}

fn subject_alt_names(hosts: &[String]) -> Result<Vec<SanType>, CertsError> {
    if hosts.is_empty() {
        return Err(CertsError::NoHosts);
    }
    hosts
        .iter()
        .map(|raw| {
            let host = raw.trim();
            if host.is_empty() {
                return Err(CertsError::InvalidHost {
                    host: raw.clone(),
                    reason: "empty".to_string(),
                });
            }
            // `[::1]` is how IPv6 literals appear in URLs; accept it as the address.
            let unbracketed = host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host);
            if let Ok(ip) = unbracketed.parse::<IpAddr>() {
                return Ok(SanType::IpAddress(ip));
            }
            let valid = host.len() <= 253
                && host.split('.').enumerate().all(|(i, label)| {
                    (i == 0 && label == "*")
                        || (!label.is_empty()
                            && label.len() <= 63
                            && label
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                            && !label.starts_with('-')
                            && !label.ends_with('-'))
                });
            if !valid {
                return Err(CertsError::InvalidHost {
                    host: raw.clone(),
                    reason: "not an IP address nor a DNS name (letters, digits, '-' and '.', \
                             optionally starting with '*.')"
                        .to_string(),
                });
            }
            let name = host
                .to_ascii_lowercase()
                .try_into()
                .map_err(|e: rcgen::Error| CertsError::InvalidHost {
                    host: raw.clone(),
                    reason: e.to_string(),
                })?;
            Ok(SanType::DnsName(name))
        })
        .collect()
}

fn new_key(what: &'static str) -> Result<KeyPair, CertsError> {
    // ECDSA P-256: small, fast handshakes, and accepted by Go's crypto/tls (the API server).
    KeyPair::generate().map_err(|source| CertsError::Generate { what, source })
}

fn new_ca(common_name: &str) -> Result<(CertificateParams, KeyPair), CertsError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "tenant-gateway (development)");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, CA_VALIDITY_DAYS);
    let key = new_key("CA key")?;
    Ok((params, key))
}

fn leaf_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, LEAF_VALIDITY_DAYS);
    params
}

/// Valid from yesterday (tolerates clock skew between the machine that generates and the
/// one that verifies) for `days` days.
fn set_validity(params: &mut CertificateParams, days: i64) {
    let today = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| (d.as_secs() / 86_400) as i64)
        .unwrap_or(0);
    let (y, m, d) = civil_from_days(today - 1);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil_from_days(today + days);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day); H. Hinnant's
/// `civil_from_days`. Always yields a valid date, which `date_time_ymd` requires.
fn civil_from_days(z: i64) -> (i32, u8, u8) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year as i32, month as u8, day as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::extensions::GeneralName;
    use x509_parser::pem::parse_x509_pem;

    fn parse(pem: &str) -> Vec<u8> {
        let (_, p) = parse_x509_pem(pem.as_bytes()).expect("pem");
        p.contents
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn serving_cert_has_sans_and_is_signed_by_ca() {
        let certs = generate(&default_hosts()).expect("generate");
        let der = parse(&certs.tls_cert_pem);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("x509");
        let san = cert
            .subject_alternative_name()
            .expect("ext")
            .expect("has SAN");
        let mut dns = Vec::new();
        let mut ips = Vec::new();
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => dns.push(d.to_string()),
                GeneralName::IPAddress(ip) => ips.push(ip.len()),
                _ => {}
            }
        }
        assert!(dns.contains(&"localhost".to_string()));
        assert!(dns.contains(&"tenant-gateway.cozy-system.svc.cluster.local".to_string()));
        assert_eq!(ips, vec![4, 16], "127.0.0.1 and ::1 are IP SANs");

        let ca_der = parse(&certs.ca_cert_pem);
        let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).expect("ca");
        assert!(ca.is_ca());
        assert_eq!(cert.issuer(), ca.subject());
        cert.verify_signature(Some(ca.public_key()))
            .expect("leaf signed by the CA");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64;
        assert!(cert.validity().not_before.timestamp() < now);
        assert!(cert.validity().not_after.timestamp() > now + 300 * 86_400);
    }

    #[test]
    fn every_call_is_a_new_pki() {
        let hosts = vec!["localhost".to_string()];
        let a = generate(&hosts).expect("a");
        let b = generate(&hosts).expect("b");
        assert_ne!(a.ca_cert_pem, b.ca_cert_pem);
        assert_ne!(a.tls_key_pem, b.tls_key_pem);
    }

    #[test]
    fn rejects_bad_hosts() {
        assert!(matches!(generate(&[]), Err(CertsError::NoHosts)));
        for bad in ["", "under_score.example", "-a.example", "a..b", "exa mple"] {
            let err = generate(&[bad.to_string()]).expect_err(bad);
            assert!(
                matches!(err, CertsError::InvalidHost { .. }),
                "{bad}: {err}"
            );
        }
        generate(&["*.example.org".to_string(), "[::1]".to_string()]).expect("wildcard, ipv6");
    }

    #[test]
    fn client_cert_is_signed_by_given_ca() {
        let certs = generate(&default_hosts()).expect("generate");
        let client =
            generate_client(&certs.ca_cert_pem, &certs.ca_key_pem, "tester").expect("client");
        let der = parse(&client.cert_pem);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("x509");
        let ca_der = parse(&certs.ca_cert_pem);
        let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).expect("ca");
        cert.verify_signature(Some(ca.public_key()))
            .expect("client signed by the CA");
        let eku = cert.extended_key_usage().expect("ext").expect("has EKU");
        assert!(eku.value.client_auth);
        assert!(client.identity_pem().contains("PRIVATE KEY"));
        assert!(generate_client("not pem", &certs.ca_key_pem, "x").is_err());
    }

    #[test]
    fn write_creates_files_with_private_key_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("nested/certs-dev");
        let certs = generate(&default_hosts()).expect("generate");
        let written = write(&out, &certs).expect("write");
        assert_eq!(written.len(), 3);
        for name in ["ca.crt", "tls.crt", "tls.key"] {
            assert!(out.join(name).is_file(), "{name}");
        }
        assert!(!out.join("ca.key").exists(), "the CA key is not written");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(out.join("tls.key"))
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Re-writing over existing files works and keeps the mode.
        write(&out, &certs).expect("rewrite");
    }
}
