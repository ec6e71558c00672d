//! Names of the listeners and objects the reconciler renders (SPEC §3.2).
//!
//! Every name is a DNS-1123 label of at most 63 characters whatever the input (a 253-character
//! TenantGateway name with dots included), and the names of one Gateway are unique: listener
//! names key `status.listeners`, and a Certificate's name is its Secret's name and a label
//! value cert-manager writes, so both must stay labels.
//!
//! http01 listener names are stable functions of the hostname and apex: `https-apex` for the
//! apex, `https-<label>` for a direct child `<label>.<apex>` (the platform's naming), and the
//! hashed `https-<label>-<h8>` for anything deeper, for a reserved short form, and for any name
//! that would clash. `h8` is the first 8 hex digits of SHA-256 of the lowercased hostname. When
//! two hashed forms still clash, the hash grows until they do not.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use crate::hostname::MAX_LABEL_LEN;

/// Listener `http` (port 80).
pub const HTTP_LISTENER: &str = "http";
/// dns01/existingSecret wildcard listener (`*.<apex>`).
pub const WILDCARD_LISTENER: &str = "https";
/// The apex listener, every mode.
pub const APEX_LISTENER: &str = "https-apex";

const HTTPS_PREFIX: &str = "https-";
const CHILD_PREFIX: &str = "https-child-";
const TLS_PREFIX: &str = "tls-";
/// Stems a direct child may not take in its short form: `apex` is the apex's, `gateway` gives
/// `<name>-gateway-tls`, the dns01 Certificate, and `child-…` looks like a dns01 child listener.
const RESERVED_STEMS: [&str; 2] = ["apex", "gateway"];
/// Hex digits of the hash at each escalation level (level 0 is the unhashed form).
const HASH_LEVELS: [usize; 5] = [0, 8, 16, 32, 48];

/// True when `s` is a DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL_LEN
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// The first `n` hex digits of SHA-256 of `s` (lowercased).
pub fn hash_hex(s: &str, n: usize) -> String {
    let digest = Sha256::digest(s.to_ascii_lowercase().as_bytes());
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex.truncate(n.min(64));
    hex
}

/// `h8` of SPEC §3.2.
pub fn h8(s: &str) -> String {
    hash_hex(s, 8)
}

/// Keep what can stand in a label: lowercase letters, digits, `-` (anything else becomes `-`),
/// cut to `max` bytes, without edge hyphens.
fn label_head(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(max)
        .collect();
    while out.ends_with('-') {
        out.pop();
    }
    out.trim_start_matches('-').to_string()
}

/// `base + suffix` when that is a label; otherwise a label made of as much of `base` as fits,
/// `-<h8(base)>` and `suffix`. `suffix` is a constant label tail such as `-tls`.
pub fn fit(base: &str, suffix: &str) -> String {
    let full = format!("{base}{suffix}");
    if is_dns_label(&full) {
        return full;
    }
    let hash = h8(base);
    let room = MAX_LABEL_LEN.saturating_sub(suffix.len() + 1 + hash.len());
    let head = label_head(base, room);
    if head.is_empty() {
        format!("{hash}{suffix}")
    } else {
        format!("{head}-{hash}{suffix}")
    }
}

/// Issuer `<name>-gateway`.
pub fn issuer(tgw: &str) -> String {
    fit(tgw, "-gateway")
}

/// ACME account key Secret `<name>-acme-account`.
pub fn acme_account_secret(tgw: &str) -> String {
    fit(tgw, "-acme-account")
}

/// Redirect HTTPRoute `<name>-http-redirect`.
pub fn redirect_route(tgw: &str) -> String {
    fit(tgw, "-http-redirect")
}

/// The dns01 wildcard Certificate `<name>-gateway-tls`.
pub fn wildcard_certificate(tgw: &str) -> String {
    fit(tgw, "-gateway-tls")
}

/// `tls-<svc>`, or `None` when `svc` cannot make a label (the caller reports it).
pub fn passthrough_listener(svc: &str) -> Option<String> {
    let name = format!("{TLS_PREFIX}{svc}");
    (is_dns_label(svc) && is_dns_label(&name)).then_some(name)
}

/// The names one http01 hostname gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNames {
    pub listener: String,
    pub certificate: String,
}

/// Listener and Certificate names for each http01 hostname. `hostnames` are listenable (valid,
/// lowercase, not wildcards, within `apex`); the result is unique per hostname.
pub fn http01(tgw: &str, apex: &str, hostnames: &BTreeSet<String>) -> BTreeMap<String, HostNames> {
    let stems = unique(hostnames, |h, level| http01_stem(h, apex, level));
    stems
        .into_iter()
        .map(|(h, stem)| {
            let names = HostNames {
                listener: format!("{HTTPS_PREFIX}{stem}"),
                certificate: fit(&format!("{tgw}-{stem}"), "-tls"),
            };
            (h, names)
        })
        .collect()
}

/// The part after `https-` at escalation `level`: `apex`, the label, or `<label>-<hash>`.
fn http01_stem(h: &str, apex: &str, level: usize) -> String {
    if h == apex {
        // Only the apex reaches here as "apex" (a child named apex is reserved below), so it
        // can never clash and never needs a hash.
        return "apex".to_string();
    }
    let label = h.split('.').next().unwrap_or(h);
    let room = MAX_LABEL_LEN - HTTPS_PREFIX.len();
    let direct = h.strip_suffix(apex).and_then(|rest| rest.strip_suffix('.')) == Some(label);
    let reserved = RESERVED_STEMS.contains(&label) || label.starts_with("child-");
    let short_ok = direct && !reserved && label.len() <= room;
    // A name without a short form starts at the first hashed level.
    let hex = if short_ok {
        HASH_LEVELS[level]
    } else {
        HASH_LEVELS[(level + 1).min(HASH_LEVELS.len() - 1)]
    };
    if hex == 0 {
        return label.to_string();
    }
    let head = label_head(label, room - 1 - hex);
    if head.is_empty() {
        hash_hex(h, hex)
    } else {
        format!("{head}-{}", hash_hex(h, hex))
    }
}

/// dns01/existingSecret listener of one inheriting child apex: `https-child-<label>-<h8>`.
/// Unique over `child_apexes`.
pub fn child_listeners(child_apexes: &BTreeSet<String>) -> BTreeMap<String, String> {
    unique(child_apexes, |c, level| {
        let hex = HASH_LEVELS[(level + 1).min(HASH_LEVELS.len() - 1)];
        let label = c.split('.').next().unwrap_or(c);
        let room = MAX_LABEL_LEN - CHILD_PREFIX.len() - 1 - hex;
        let head = label_head(label, room);
        if head.is_empty() {
            format!("{CHILD_PREFIX}{}", hash_hex(c, hex))
        } else {
            format!("{CHILD_PREFIX}{head}-{}", hash_hex(c, hex))
        }
    })
}

/// Assigns `form(key, level)` to every key, raising the level (the hash length) of the keys
/// whose names clash until none does (SHA-256 prefixes of distinct inputs part long before the
/// last level).
fn unique<F>(keys: &BTreeSet<String>, form: F) -> BTreeMap<String, String>
where
    F: Fn(&str, usize) -> String,
{
    let mut level: BTreeMap<&str, usize> = keys.iter().map(|k| (k.as_str(), 0)).collect();
    loop {
        let names: BTreeMap<&str, String> = level.iter().map(|(k, l)| (*k, form(k, *l))).collect();
        let mut users: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (k, n) in &names {
            users.entry(n.as_str()).or_default().push(k);
        }
        let clashing: Vec<&str> = users
            .values()
            .filter(|ks| ks.len() > 1)
            .flatten()
            .copied()
            .collect();
        let mut raised = false;
        for k in clashing {
            if let Some(l) = level.get_mut(k)
                && *l + 1 < HASH_LEVELS.len()
            {
                *l += 1;
                raised = true;
            }
        }
        if !raised {
            return names.into_iter().map(|(k, n)| (k.to_string(), n)).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const APEX: &str = "alice.example.org";

    fn set(hosts: &[&str]) -> BTreeSet<String> {
        hosts.iter().map(|h| h.to_string()).collect()
    }

    #[test]
    fn h8_is_sha256_prefix() {
        // sha256("harbor.bob.alice.example.org"), computed independently with `sha256sum`.
        assert_eq!(h8("harbor.bob.alice.example.org"), "c9e4203f");
        assert_eq!(h8("HARBOR.bob.alice.example.org"), "c9e4203f");
    }

    #[test]
    fn http01_names_follow_spec() {
        let hosts = set(&[
            APEX,
            "harbor.alice.example.org",
            "harbor.bob.alice.example.org",
            "apex.alice.example.org",
            "gateway.alice.example.org",
        ]);
        let n = http01("tgw", APEX, &hosts);
        let l = |h: &str| n[h].listener.as_str();
        let c = |h: &str| n[h].certificate.as_str();
        assert_eq!(l(APEX), "https-apex");
        assert_eq!(c(APEX), "tgw-apex-tls");
        assert_eq!(l("harbor.alice.example.org"), "https-harbor");
        assert_eq!(c("harbor.alice.example.org"), "tgw-harbor-tls");
        let deep = format!("https-harbor-{}", h8("harbor.bob.alice.example.org"));
        assert_eq!(l("harbor.bob.alice.example.org"), deep);
        assert_eq!(
            c("harbor.bob.alice.example.org"),
            format!("tgw-harbor-{}-tls", h8("harbor.bob.alice.example.org"))
        );
        // Reserved short forms take the hash.
        assert_eq!(
            l("apex.alice.example.org"),
            format!("https-apex-{}", h8("apex.alice.example.org"))
        );
        assert_eq!(
            l("gateway.alice.example.org"),
            format!("https-gateway-{}", h8("gateway.alice.example.org"))
        );
    }

    #[test]
    fn a_short_form_equal_to_a_hashed_form_is_hashed_too() {
        let deep = "web.bob.alice.example.org";
        let lookalike = format!("web-{}.{APEX}", h8(deep));
        let n = http01("tgw", APEX, &set(&[deep, &lookalike]));
        assert_ne!(n[deep].listener, n[lookalike.as_str()].listener);
        assert_ne!(n[deep].certificate, n[lookalike.as_str()].certificate);
        // Neither keeps the contested name.
        let contested = format!("https-web-{}", h8(deep));
        assert!(n.values().all(|v| v.listener != contested), "{n:?}");
    }

    #[test]
    fn long_inputs_still_give_labels() {
        let long_label = "a".repeat(63);
        let host = format!("{long_label}.{APEX}");
        let tgw = format!("{}.{}", "t".repeat(120), "u".repeat(120));
        let n = http01(&tgw, APEX, &set(&[&host, APEX]));
        for v in n.values() {
            assert!(is_dns_label(&v.listener), "{v:?}");
            assert!(is_dns_label(&v.certificate), "{v:?}");
        }
        assert!(n[host.as_str()].listener.starts_with("https-aaaa"));
        for name in [
            issuer(&tgw),
            acme_account_secret(&tgw),
            redirect_route(&tgw),
            wildcard_certificate(&tgw),
        ] {
            assert!(is_dns_label(&name), "{name}");
        }
        assert_ne!(issuer(&tgw), wildcard_certificate(&tgw));
    }

    #[test]
    fn fit_keeps_short_names_and_hashes_long_ones() {
        assert_eq!(fit("tgw", "-gateway"), "tgw-gateway");
        assert_eq!(fit("my-tgw", "-http-redirect"), "my-tgw-http-redirect");
        let dotted = fit("a.b", "-tls");
        assert_eq!(dotted, format!("a-b-{}-tls", h8("a.b")));
        assert_ne!(fit("a.b", "-tls"), fit("a-b", "-tls"));
        let long = "x".repeat(70);
        let got = fit(&long, "-tls");
        assert_eq!(got.len(), 63);
        assert!(got.ends_with(&format!("-{}-tls", h8(&long))));
    }

    #[test]
    fn passthrough_and_child_names() {
        assert_eq!(passthrough_listener("api").as_deref(), Some("tls-api"));
        assert_eq!(passthrough_listener("Api"), None);
        assert_eq!(passthrough_listener(&"a".repeat(60)), None);
        assert_eq!(passthrough_listener(""), None);
        let kids = child_listeners(&set(&["bob.alice.example.org", "customer1.io"]));
        assert_eq!(
            kids["bob.alice.example.org"],
            format!("https-child-bob-{}", h8("bob.alice.example.org"))
        );
        assert_eq!(
            kids["customer1.io"],
            format!("https-child-customer1-{}", h8("customer1.io"))
        );
    }

    #[test]
    fn label_check() {
        for ok in ["a", "a-b", "0", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }
}
