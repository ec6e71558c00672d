//! `hostname::validate`, `within` and `is_wildcard` on arbitrary strings.
//!
//! Input layout: `HOST` or `HOST\nAPEX` (split at the first newline; invalid UTF-8 is replaced
//! with U+FFFD, so every input is used). Without an apex the host is checked against itself and
//! a few fixed apexes.
//!
//! Invariants (src/hostname.rs doc comments):
//! - `validate(h)` is Ok exactly when `h` is a DNS-1123 subdomain of at most 253 bytes,
//!   optionally preceded by one `*.` label (checked against an independent reference); so an
//!   Ok hostname is ASCII lowercase, does not start or end with '.', and is not bare `*`.
//! - an error's text stays bounded whatever the input's length.
//! - `within(h, apex)` is exactly `h == apex || h ends with "." + apex`, ASCII
//!   case-insensitively, and false for an empty apex; so `within(h, h)` for non-empty `h`,
//!   and `within(h, apex)` implies `h` ends with `apex` ignoring ASCII case.
//! - `is_wildcard(h)` is exactly `h.starts_with("*.")`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tenant_gateway::hostname::{self, MAX_HOSTNAME_LEN, MAX_LABEL_LEN};

/// Error texts quote at most 253 bytes of input (each escaped to at most 6 characters when it
/// is a control character) or an 80-byte label; 2 KiB leaves room for the prose.
const MAX_ERROR_LEN: usize = 2048;

const APEXES: [&str; 4] = ["example.org", "alice.example.org", "Example.ORG", "org"];

/// DNS-1123 subdomain with an optional leading `*.` label, written independently of
/// `hostname::validate`.
fn reference_valid(h: &str) -> bool {
    if h.is_empty() || h.len() > MAX_HOSTNAME_LEN {
        return false;
    }
    let rest = h.strip_prefix("*.").unwrap_or(h);
    !rest.is_empty()
        && rest.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= MAX_LABEL_LEN
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

fn reference_within(h: &str, apex: &str) -> bool {
    let (h, a) = (h.as_bytes(), apex.as_bytes());
    if a.is_empty() || h.len() < a.len() {
        return false;
    }
    let split = h.len() - a.len();
    h[split..].eq_ignore_ascii_case(a) && (split == 0 || h[split - 1] == b'.')
}

fn check_validate(h: &str) {
    match hostname::validate(h) {
        Ok(()) => {
            assert!(reference_valid(h), "validate accepted {h:?}");
            assert!(h.is_ascii() && !h.bytes().any(|b| b.is_ascii_uppercase()));
            assert!(h.len() <= MAX_HOSTNAME_LEN);
            assert!(!h.starts_with('.') && !h.ends_with('.') && h != "*");
            assert!(hostname::within(h, h), "valid {h:?} not within itself");
        }
        Err(e) => {
            assert!(!reference_valid(h), "validate rejected {h:?}: {e}");
            let text = e.to_string();
            assert!(
                text.len() <= MAX_ERROR_LEN,
                "{}-byte error for a {}-byte input",
                text.len(),
                h.len()
            );
        }
    }
    assert_eq!(hostname::is_wildcard(h), h.starts_with("*."), "{h:?}");
}

fn check_within(h: &str, apex: &str) {
    let got = hostname::within(h, apex);
    assert_eq!(got, reference_within(h, apex), "within({h:?}, {apex:?})");
    if got {
        assert!(!apex.is_empty());
        assert!(
            h.len() >= apex.len()
                && h.as_bytes()[h.len() - apex.len()..].eq_ignore_ascii_case(apex.as_bytes()),
            "within({h:?}, {apex:?}) but {h:?} does not end with the apex"
        );
    }
    // Case never matters, on either side.
    assert_eq!(
        got,
        hostname::within(&h.to_ascii_uppercase(), &apex.to_ascii_lowercase()),
        "within({h:?}, {apex:?}) depends on case"
    );
    if !h.is_empty() {
        assert!(hostname::within(h, h), "{h:?} not within itself");
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (h, apex) = match text.split_once('\n') {
        Some((h, apex)) => (h, Some(apex)),
        None => (&*text, None),
    };
    check_validate(h);
    match apex {
        Some(apex) => {
            check_validate(apex);
            check_within(h, apex);
            check_within(apex, h);
        }
        None => {
            check_within(h, h);
            for apex in APEXES {
                check_within(h, apex);
            }
        }
    }
});
