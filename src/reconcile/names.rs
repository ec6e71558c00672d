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
//! two hashed forms still clash, the hash grows until they do not. The Certificate name
//! `<name>-<stem>-tls` (also its Secret's name) is checked for clashes the same way: two
//! distinct stems can still give one Certificate name once `fit` hashes a long one.
//!
//! Names are sticky (SPEC §3.2): a hostname whose listener is on the observed Gateway keeps
//! that listener's name and Certificate, and the rule's names of new hostnames steer clear of
//! them, so adding or removing routes never renames an existing listener or Certificate.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use crate::hostname::{MAX_LABEL_LEN, is_dns_label, is_dns_subdomain};

/// Listener `http` (port 80).
pub const HTTP_LISTENER: &str = "http";
/// dns01/existingSecret wildcard listener (`*.<apex>`).
pub const WILDCARD_LISTENER: &str = "https";
/// The apex listener, every mode.
pub const APEX_LISTENER: &str = "https-apex";

const HTTPS_PREFIX: &str = "https-";
const CHILD_PREFIX: &str = "https-child-";
/// Stems a direct child may not take in its short form: `apex` is the apex's, `gateway` gives
/// `<name>-gateway-tls`, the dns01 Certificate, and `child-…` looks like a dns01 child listener.
const RESERVED_STEMS: [&str; 2] = ["apex", "gateway"];
/// Hex digits of the hash at each escalation level (level 0 is the unhashed form).
const HASH_LEVELS: [usize; 5] = [0, 8, 16, 32, 48];

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

/// The second Gateway `<name>-passthrough` of the `separate` layout (SPEC §3.10).
pub fn passthrough_gateway(tgw: &str) -> String {
    fit(tgw, "-passthrough")
}

/// The names one http01 hostname gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNames {
    pub listener: String,
    pub certificate: String,
}

/// Listener and Certificate names for each http01 hostname (SPEC §3.2). `hostnames` are
/// listenable (valid, lowercase, not wildcards, within `apex`); `fixed` are the Gateway's
/// other listener names (`http`, the passthrough listeners); `sticky` the names a hostname's
/// listener has on the observed Gateway (either part may be absent).
///
/// Listener names and Certificate names (a Certificate's name is its Secret's name) are both
/// unique over the TenantGateway: sticky names are kept in hostname order unless invalid or
/// already taken (by `fixed`, the ACME account key Secret, the dns01 Certificate, or a sticky
/// name kept before); every other hostname gets the naming rule's form, and a form whose
/// listener *or* Certificate name clashes with a taken name or with another new hostname's
/// takes the next, longer hashed form (and past the last, a numbered hash), so whatever the
/// input no two hostnames share a listener, a Certificate or a Secret.
pub fn http01(
    tgw: &str,
    apex: &str,
    hostnames: &BTreeSet<String>,
    fixed: &BTreeSet<String>,
    sticky: &BTreeMap<String, StickyNames>,
) -> BTreeMap<String, HostNames> {
    let mut taken_l: BTreeSet<String> = fixed.clone();
    // Secrets this TenantGateway writes besides the Certificates' (the ACME account key) and
    // the dns01 Certificate's name: a Certificate must never take them.
    let mut taken_c: BTreeSet<String> = [acme_account_secret(tgw), wildcard_certificate(tgw)]
        .into_iter()
        .collect();
    // Per hostname: the sticky parts kept.
    let mut kept: BTreeMap<&str, Kept> = BTreeMap::new();
    for h in hostnames {
        let s = sticky.get(h);
        let l = s
            .and_then(|s| s.listener.clone())
            .filter(|l| is_dns_label(l) && !taken_l.contains(l));
        if let Some(l) = &l {
            taken_l.insert(l.clone());
        }
        let c = s
            .and_then(|s| s.certificate.clone())
            .filter(|c| is_dns_subdomain(c) && !taken_c.contains(c));
        if let Some(c) = &c {
            taken_c.insert(c.clone());
        }
        kept.insert(h.as_str(), (l, c));
    }
    let cert_of = |stem: &str| fit(&format!("{tgw}-{stem}"), "-tls");
    // Hostnames that need at least one generated part, with their escalation level.
    let mut level: BTreeMap<&str, usize> = kept
        .iter()
        .filter(|(_, (l, c))| l.is_none() || c.is_none())
        .map(|(h, _)| (*h, 0))
        .collect();
    let generated = loop {
        let forms: BTreeMap<&str, (String, String)> = level
            .iter()
            .map(|(h, lv)| {
                let stem = http01_stem(h, apex, *lv);
                (*h, (format!("{HTTPS_PREFIX}{stem}"), cert_of(&stem)))
            })
            .collect();
        // The names each hostname would hold: only the parts it generates compete.
        let mut users_l: BTreeMap<&str, usize> = BTreeMap::new();
        let mut users_c: BTreeMap<&str, usize> = BTreeMap::new();
        for (h, (l, c)) in &forms {
            let (kl, kc) = &kept[h];
            if kl.is_none() {
                *users_l.entry(l.as_str()).or_default() += 1;
            }
            if kc.is_none() {
                *users_c.entry(c.as_str()).or_default() += 1;
            }
        }
        let clashing: Vec<&str> = forms
            .iter()
            .filter(|(h, (l, c))| {
                let (kl, kc) = &kept[*h];
                (kl.is_none() && (taken_l.contains(l) || users_l[l.as_str()] > 1))
                    || (kc.is_none() && (taken_c.contains(c) || users_c[c.as_str()] > 1))
            })
            .map(|(h, _)| *h)
            .collect();
        let mut raised = false;
        for h in &clashing {
            if let Some(lv) = level.get_mut(h)
                && *lv + 1 < HASH_LEVELS.len()
            {
                *lv += 1;
                raised = true;
            }
        }
        if !raised {
            break resolve_last(
                forms,
                &clashing,
                &kept,
                (&mut taken_l, &mut taken_c),
                &cert_of,
            );
        }
    };
    kept.into_iter()
        .map(|(h, (l, c))| {
            let g = generated.get(h);
            let names = HostNames {
                listener: l.or_else(|| g.map(|g| g.0.clone())).unwrap_or_default(),
                certificate: c.or_else(|| g.map(|g| g.1.clone())).unwrap_or_default(),
            };
            (h.to_string(), names)
        })
        .collect()
}

/// The sticky listener and Certificate names kept for one hostname.
type Kept = (Option<String>, Option<String>);

/// The hostnames still clashing at the last hash level (only an input built to collide in
/// 48 hex digits of SHA-256, or sticky names holding every form of a hostname, gets here):
/// each, in hostname order, takes the first numbered hash form (16 hex digits of
/// SHA-256 of `<hostname>#<i>`) whose generated parts are free. The other forms stay.
fn resolve_last<'a>(
    forms: BTreeMap<&'a str, (String, String)>,
    clashing: &[&str],
    kept: &BTreeMap<&str, Kept>,
    (taken_l, taken_c): (&mut BTreeSet<String>, &mut BTreeSet<String>),
    cert_of: &dyn Fn(&str) -> String,
) -> BTreeMap<&'a str, (String, String)> {
    let clashing: BTreeSet<&str> = clashing.iter().copied().collect();
    // The forms that do not clash are final: reserve their generated parts first.
    for (h, (l, c)) in forms.iter().filter(|(h, _)| !clashing.contains(*h)) {
        let (kl, kc) = &kept[h];
        if kl.is_none() {
            taken_l.insert(l.clone());
        }
        if kc.is_none() {
            taken_c.insert(c.clone());
        }
    }
    let mut out = BTreeMap::new();
    for (h, f) in forms {
        if !clashing.contains(h) {
            out.insert(h, f);
            continue;
        }
        let (kl, kc) = &kept[h];
        let mut i = 1usize;
        let (l, c) = loop {
            let stem = hash_hex(&format!("{h}#{i}"), 16);
            let (l, c) = (format!("{HTTPS_PREFIX}{stem}"), cert_of(&stem));
            if (kl.is_some() || !taken_l.contains(&l)) && (kc.is_some() || !taken_c.contains(&c)) {
                break (l, c);
            }
            i += 1;
        };
        if kl.is_none() {
            taken_l.insert(l.clone());
        }
        if kc.is_none() {
            taken_c.insert(c.clone());
        }
        out.insert(h, (l, c));
    }
    out
}

/// The names a hostname's listener has on the observed Gateway, as far as they may be kept.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StickyNames {
    pub listener: Option<String>,
    pub certificate: Option<String>,
}

/// The part after `https-` at escalation `level`: `apex`, the label, or `<label>-<hash>`.
fn http01_stem(h: &str, apex: &str, level: usize) -> String {
    let room = MAX_LABEL_LEN - HTTPS_PREFIX.len();
    // The apex's short form is `apex` (a direct child named `apex` is reserved below, so
    // only the apex has it); its hashed forms `apex-<hash of the apex>` are needed only when
    // a sticky name of another hostname holds `https-apex`.
    let (label, short_ok) = if h == apex {
        ("apex", true)
    } else {
        let label = h.split('.').next().unwrap_or(h);
        let direct = h.strip_suffix(apex).and_then(|rest| rest.strip_suffix('.')) == Some(label);
        let reserved = RESERVED_STEMS.contains(&label) || label.starts_with("child-");
        (label, direct && !reserved && label.len() <= room)
    };
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
        let n = http01("tgw", APEX, &hosts, &BTreeSet::new(), &BTreeMap::new());
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
        let n = http01(
            "tgw",
            APEX,
            &set(&[deep, &lookalike]),
            &BTreeSet::new(),
            &BTreeMap::new(),
        );
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
        let n = http01(
            &tgw,
            APEX,
            &set(&[&host, APEX]),
            &BTreeSet::new(),
            &BTreeMap::new(),
        );
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
        use crate::cluster::route_facts::passthrough_listener;
        assert_eq!(passthrough_listener("api").as_deref(), Some("tls-api"));
        assert_eq!(passthrough_listener("Api"), None);
        // Any entry the schema admits (a label of up to 63) makes a listener: a SectionName
        // may be 253 long.
        let longest = "a".repeat(63);
        assert_eq!(
            passthrough_listener(&longest),
            Some(format!("tls-{longest}"))
        );
        assert_eq!(passthrough_listener(&"a".repeat(64)), None);
        assert_eq!(passthrough_listener(""), None);
        assert_eq!(passthrough_gateway("gw"), "gw-passthrough");
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

    fn none() -> (BTreeSet<String>, BTreeMap<String, StickyNames>) {
        (BTreeSet::new(), BTreeMap::new())
    }

    fn sticky(l: Option<&str>, c: Option<&str>) -> StickyNames {
        StickyNames {
            listener: l.map(str::to_string),
            certificate: c.map(str::to_string),
        }
    }

    /// Issue 20 item 10: two hostnames with distinct listener stems whose Certificate names
    /// still clash — a long direct child whose `<name>-<label>-tls` is too long and takes
    /// `fit`'s hashed form, and a direct child whose label is literally that hashed form.
    #[test]
    fn certificate_names_are_checked_for_clashes_like_listener_stems() {
        let long = "a".repeat(57);
        let long_host = format!("{long}.{APEX}");
        let base = format!("gw-{long}");
        let twin_label = format!("{}-{}", &base[3..50], h8(&base));
        let twin_host = format!("{twin_label}.{APEX}");
        // The contested name, as the naming rule gives it to each alone.
        let contested = format!("gw-{twin_label}-tls");
        let (f, st) = none();
        assert_eq!(
            http01("gw", APEX, &set(&[&long_host]), &f, &st)[long_host.as_str()].certificate,
            contested
        );
        assert_eq!(
            http01("gw", APEX, &set(&[&twin_host]), &f, &st)[twin_host.as_str()].certificate,
            contested
        );
        // Together: the listener stems differ, the Certificates must too, and neither keeps
        // the contested name (a clash takes the hashed form, as for listener stems).
        let n = http01("gw", APEX, &set(&[&long_host, &twin_host]), &f, &st);
        assert_ne!(
            n[long_host.as_str()].listener,
            n[twin_host.as_str()].listener
        );
        assert_ne!(
            n[long_host.as_str()].certificate,
            n[twin_host.as_str()].certificate
        );
        assert!(n.values().all(|v| v.certificate != contested), "{n:?}");
        assert!(n.values().all(|v| is_dns_label(&v.certificate)), "{n:?}");
    }

    #[test]
    fn sticky_names_are_kept_and_new_names_avoid_them() {
        let harbor = "harbor.alice.example.org";
        let web = "web.alice.example.org";
        let shop = "shop.alice.example.org";
        let fixed: BTreeSet<String> = set(&["http", "tls-api"]);
        // (sticky names by hostname, hostname, expected listener, expected certificate;
        //  None: a generated name, checked only for being new)
        type Case<'a> = (
            Vec<(&'a str, StickyNames)>,
            Vec<(&'a str, Option<String>, Option<String>)>,
        );
        let hashed = |h: &str| format!("https-{}-{}", h.split('.').next().unwrap_or(h), h8(h));
        let cases: Vec<Case<'_>> = vec![
            // The platform's hashed forms stay as they are.
            (
                vec![(
                    harbor,
                    sticky(Some("https-harbor-1234abcd"), Some("old-harbor-tls")),
                )],
                vec![
                    (
                        harbor,
                        Some("https-harbor-1234abcd".into()),
                        Some("old-harbor-tls".into()),
                    ),
                    (web, Some("https-web".into()), Some("gw-web-tls".into())),
                ],
            ),
            // A sticky name equal to a new hostname's rule name: the new one is hashed.
            (
                vec![(harbor, sticky(Some("https-web"), Some("gw-web-tls")))],
                vec![
                    (harbor, Some("https-web".into()), Some("gw-web-tls".into())),
                    (
                        web,
                        Some(hashed(web)),
                        Some(format!("gw-{}-tls", &hashed(web)[6..])),
                    ),
                ],
            ),
            // A sticky `https-apex` on another hostname: the apex itself takes a hashed form.
            (
                vec![(harbor, sticky(Some("https-apex"), Some("gw-apex-tls")))],
                vec![
                    (
                        harbor,
                        Some("https-apex".into()),
                        Some("gw-apex-tls".into()),
                    ),
                    (APEX, Some(format!("https-apex-{}", h8(APEX))), None),
                ],
            ),
            // Names of other listeners and Secrets are never kept.
            (
                vec![
                    (harbor, sticky(Some("http"), Some("gw-acme-account"))),
                    (web, sticky(Some("tls-api"), Some("gw-gateway-tls"))),
                ],
                vec![
                    (
                        harbor,
                        Some("https-harbor".into()),
                        Some("gw-harbor-tls".into()),
                    ),
                    (web, Some("https-web".into()), Some("gw-web-tls".into())),
                ],
            ),
            // Two hostnames holding the same sticky names: the first in hostname order keeps
            // them, the other gets its own.
            (
                vec![
                    (web, sticky(Some("https-x"), Some("x-tls"))),
                    (harbor, sticky(Some("https-x"), Some("x-tls"))),
                ],
                vec![
                    (harbor, Some("https-x".into()), Some("x-tls".into())),
                    (web, Some("https-web".into()), Some("gw-web-tls".into())),
                ],
            ),
            // Invalid sticky names are not kept; a listener kept without its Certificate
            // gets the rule's Certificate name.
            (
                vec![
                    (harbor, sticky(Some("Https_Bad"), Some("UPPER"))),
                    (shop, sticky(Some("https-shop-old"), None)),
                ],
                vec![
                    (
                        harbor,
                        Some("https-harbor".into()),
                        Some("gw-harbor-tls".into()),
                    ),
                    (
                        shop,
                        Some("https-shop-old".into()),
                        Some("gw-shop-tls".into()),
                    ),
                ],
            ),
        ];
        for (st, want) in cases {
            let sticky_map: BTreeMap<String, StickyNames> =
                st.iter().map(|(h, s)| (h.to_string(), s.clone())).collect();
            let hosts: BTreeSet<String> = want.iter().map(|(h, _, _)| h.to_string()).collect();
            let n = http01("gw", APEX, &hosts, &fixed, &sticky_map);
            for (h, l, c) in &want {
                if let Some(l) = l {
                    assert_eq!(&n[*h].listener, l, "{st:?}");
                }
                if let Some(c) = c {
                    assert_eq!(&n[*h].certificate, c, "{st:?}");
                }
            }
            let ls: BTreeSet<&String> = n.values().map(|v| &v.listener).collect();
            let cs: BTreeSet<&String> = n.values().map(|v| &v.certificate).collect();
            assert_eq!((ls.len(), cs.len()), (n.len(), n.len()), "{st:?}: {n:?}");
            assert!(ls.iter().all(|l| !fixed.contains(*l)), "{n:?}");
        }
    }

    /// Issue 22 item 2 (SPEC §3.2): a hostname that has names keeps them when a hostname
    /// whose names would clash with them arrives, whichever of the two came first; the
    /// newcomer takes the next hashed form that is free.
    #[test]
    fn a_clashing_newcomer_never_renames_a_hostname_that_has_names() {
        let foo = "foo.alice.example.org";
        let kid_foo = "foo.kid.alice.example.org";
        let deep = "foo.deep.alice.example.org";
        // Direct children whose short forms are `deep`'s first two hashed forms.
        let twin = format!("foo-{}.{APEX}", h8(deep));
        let twin16 = format!("foo-{}.{APEX}", hash_hex(deep, 16));
        let apex_child = "apex.alice.example.org";
        let hashed = |h: &str, n: usize| {
            let label = h.split('.').next().unwrap_or(h);
            format!("https-{label}-{}", hash_hex(h, n))
        };
        let fixed = set(&["http", "tls-api"]);
        let alone = |h: &str| http01("gw", APEX, &set(&[h]), &fixed, &BTreeMap::new())[h].clone();
        let held = |l: &str, c: &str| {
            Some(HostNames {
                listener: l.to_string(),
                certificate: c.to_string(),
            })
        };
        // (hostnames there first, with their names (None: the rule's when alone), the
        //  newcomer, the newcomer's listener)
        type Case = (Vec<(String, Option<HostNames>)>, String, String);
        let cases: Vec<Case> = vec![
            // The same first label under the apex and under a child apex, both orders.
            (vec![(foo.into(), None)], kid_foo.into(), hashed(kid_foo, 8)),
            (vec![(kid_foo.into(), None)], foo.into(), "https-foo".into()),
            // A child-apex hostname holding the short form (another controller's naming):
            // the direct child arriving later takes the hashed form.
            (
                vec![(kid_foo.into(), held("https-foo", "gw-foo-tls"))],
                foo.into(),
                hashed(foo, 8),
            ),
            // A direct child whose short form is a deeper hostname's hashed form, both orders.
            (vec![(twin.clone(), None)], deep.into(), hashed(deep, 16)),
            (
                vec![(deep.into(), None)],
                twin.clone(),
                format!("https-foo-{}-{}", h8(deep), h8(&twin)),
            ),
            // Both of the deeper hostname's first hashed forms held: the next one.
            (
                vec![(twin.clone(), None), (twin16.clone(), None)],
                deep.into(),
                hashed(deep, 32),
            ),
            // The apex and the reserved direct child `apex`, both orders.
            (
                vec![(APEX.into(), None)],
                apex_child.into(),
                hashed(apex_child, 8),
            ),
            (
                vec![(apex_child.into(), None)],
                APEX.into(),
                "https-apex".into(),
            ),
            // A sticky `https-apex` on another hostname: the apex takes its hashed form.
            (
                vec![(foo.into(), held("https-apex", "gw-apex-tls"))],
                APEX.into(),
                format!("https-apex-{}", h8(APEX)),
            ),
        ];
        for (there, newcomer, want) in cases {
            let had: BTreeMap<String, HostNames> = there
                .iter()
                .map(|(h, n)| (h.clone(), n.clone().unwrap_or_else(|| alone(h))))
                .collect();
            let sticky_map: BTreeMap<String, StickyNames> = had
                .iter()
                .map(|(h, n)| {
                    let s = sticky(Some(&n.listener), Some(&n.certificate));
                    (h.clone(), s)
                })
                .collect();
            let mut hosts: BTreeSet<String> = had.keys().cloned().collect();
            hosts.insert(newcomer.clone());
            let n = http01("gw", APEX, &hosts, &fixed, &sticky_map);
            for (h, names) in &had {
                assert_eq!(&n[h], names, "{h} renamed when {newcomer} came");
            }
            let got = &n[newcomer.as_str()];
            assert_eq!(got.listener, want, "{newcomer} after {had:?}");
            let stem = &want["https-".len()..];
            assert_eq!(got.certificate, format!("gw-{stem}-tls"), "{newcomer}");
            let ls: BTreeSet<&String> = n.values().map(|v| &v.listener).collect();
            let cs: BTreeSet<&String> = n.values().map(|v| &v.certificate).collect();
            assert_eq!((ls.len(), cs.len()), (n.len(), n.len()), "{n:?}");
            assert!(n.values().all(|v| is_dns_label(&v.listener)), "{n:?}");
            assert!(n.values().all(|v| is_dns_label(&v.certificate)), "{n:?}");
        }
    }

    /// Sticky names holding every hashed form of a hostname still leave it a unique name.
    #[test]
    fn a_hostname_whose_every_form_is_taken_gets_a_numbered_hash() {
        let h = "deep.bob.alice.example.org";
        let mut st = BTreeMap::new();
        let mut hosts = set(&[h]);
        for lv in 0..HASH_LEVELS.len() {
            let other = format!("o{lv}.alice.example.org");
            let stem = http01_stem(h, APEX, lv);
            st.insert(
                other.clone(),
                sticky(
                    Some(&format!("https-{stem}")),
                    Some(&format!("gw-{stem}-tls")),
                ),
            );
            hosts.insert(other);
        }
        let n = http01("gw", APEX, &hosts, &BTreeSet::new(), &st);
        let stem = hash_hex(&format!("{h}#1"), 16);
        assert_eq!(n[h].listener, format!("https-{stem}"));
        assert_eq!(n[h].certificate, format!("gw-{stem}-tls"));
        let ls: BTreeSet<&String> = n.values().map(|v| &v.listener).collect();
        assert_eq!(ls.len(), n.len());
    }
}
