//! Hostname validation and apex matching (SPEC §2.2): the one source of truth.
//!
//! Every layer that judges a hostname goes through [`validate`] and [`within`], so the webhook,
//! the offline CLI and the reconciler can never disagree about what a hostname is or whose apex
//! it falls under.

/// Longest hostname we accept, the DNS-1123 subdomain limit (the wildcard label included,
/// as Gateway API counts it).
pub const MAX_HOSTNAME_LEN: usize = 253;
/// Longest label, the DNS-1123 label limit.
pub const MAX_LABEL_LEN: usize = 63;

/// Labels quoted in errors are cut to this many bytes: a message must stay readable even when
/// the offending input is megabytes long.
const MAX_QUOTED: usize = 80;

/// Why a hostname is invalid. The Display text is meant to be shown to the user as is: it says
/// what is wrong, where, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostnameError {
    #[error("the hostname is empty")]
    Empty,
    #[error("the hostname is {len} characters long; a hostname may be at most {MAX_HOSTNAME_LEN}")]
    TooLong { len: usize },
    #[error(
        "the hostname contains the non-ASCII character {ch:?} (U+{code:04X}) at position \
         {position}; internationalized domain names must be written in punycode (xn--...)"
    )]
    NonAscii {
        ch: char,
        code: u32,
        /// 1-based character position.
        position: usize,
    },
    #[error("uppercase letters are not allowed, use lowercase: {lowercase:?}")]
    Uppercase { lowercase: String },
    #[error(
        "a bare \"*\" is not a hostname; a wildcard needs a domain after it, as in \"*.example.org\""
    )]
    BareWildcard,
    #[error("the hostname starts with a dot; remove the leading \".\"")]
    LeadingDot,
    #[error(
        "the hostname ends with a dot; remove the trailing \".\" (the fully qualified form is not \
         accepted)"
    )]
    TrailingDot,
    #[error(
        "label {index} is empty (two dots in a row); every label between dots needs at least one \
         character"
    )]
    EmptyLabel {
        /// 1-based label position.
        index: usize,
    },
    #[error(
        "label {index} ({label}) contains \"*\"; a wildcard is only allowed as the whole first \
         label, as in \"*.example.org\""
    )]
    MisplacedWildcard { index: usize, label: String },
    #[error(
        "label {index} ({label}) is {len} characters long; a label may be at most {MAX_LABEL_LEN}"
    )]
    LabelTooLong {
        index: usize,
        label: String,
        len: usize,
    },
    #[error(
        "label {index} ({label}) contains {what}; labels may only contain lowercase letters a-z, \
         digits 0-9 and \"-\""
    )]
    InvalidCharacter {
        index: usize,
        label: String,
        what: String,
    },
    #[error("label {index} ({label}) must start and end with a letter or digit, not \"-\"")]
    HyphenAtEdge { index: usize, label: String },
}

/// Validate `h` as a DNS-1123 subdomain, optionally preceded by one `*.` label.
///
/// The checks run from the coarsest to the finest so the reported reason is the one a person
/// would fix first (an over-long or non-ASCII name is reported as such, not as "bad label 7").
pub fn validate(h: &str) -> Result<(), HostnameError> {
    // Every route and Ingress host of every review comes through here, and nearly all are
    // valid: one pass over the bytes answers those; the detailed checks below only run to
    // say what is wrong (`fast_path_agrees_with_the_detailed_checks` holds them equal).
    if is_plainly_valid(h.as_bytes()) {
        return Ok(());
    }
    validate_detailed(h)
}

/// Byte classes of [`is_plainly_valid`]: what may appear in a valid name.
const OTHER: u8 = 0;
const ALNUM: u8 = 1;
const HYPHEN: u8 = 2;
const DOT: u8 = 3;
const CLASS: [u8; 256] = {
    let mut t = [OTHER; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = match b as u8 {
            b'a'..=b'z' | b'0'..=b'9' => ALNUM,
            b'-' => HYPHEN,
            b'.' => DOT,
            _ => OTHER,
        };
        b += 1;
    }
    t
};

/// True exactly when [`validate_detailed`] accepts `h`, in one pass and without allocating
/// (a table lookup per byte: every host of every route review comes through here).
fn is_plainly_valid(h: &[u8]) -> bool {
    if h.is_empty() || h.len() > MAX_HOSTNAME_LEN {
        return false;
    }
    let rest = h.strip_prefix(b"*.").unwrap_or(h);
    // `start` is where the current label began; `prev` the class of the byte before.
    let (mut start, mut prev) = (0usize, DOT);
    for (i, &b) in rest.iter().enumerate() {
        let class = CLASS[usize::from(b)];
        match class {
            ALNUM => {}
            HYPHEN if prev != DOT => {}
            DOT if prev == ALNUM && i - start <= MAX_LABEL_LEN => start = i + 1,
            _ => return false,
        }
        prev = class;
    }
    prev == ALNUM && rest.len() - start <= MAX_LABEL_LEN
}

fn validate_detailed(h: &str) -> Result<(), HostnameError> {
    if h.is_empty() {
        return Err(HostnameError::Empty);
    }
    if h.len() > MAX_HOSTNAME_LEN {
        return Err(HostnameError::TooLong { len: h.len() });
    }
    if !h.is_ascii() {
        // Look-alikes (Cyrillic "а", full-width letters) are exactly what this catches, so the
        // message names the code point rather than relying on the reader to spot the glyph.
        if let Some((position, ch)) = h.chars().enumerate().find(|(_, c)| !c.is_ascii()) {
            return Err(HostnameError::NonAscii {
                ch,
                code: u32::from(ch),
                position: position + 1,
            });
        }
    }
    if h.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(HostnameError::Uppercase {
            lowercase: h.to_ascii_lowercase(),
        });
    }
    if h == "*" {
        return Err(HostnameError::BareWildcard);
    }
    if h.starts_with('.') {
        return Err(HostnameError::LeadingDot);
    }
    if h.ends_with('.') {
        return Err(HostnameError::TrailingDot);
    }
    for (i, label) in h.split('.').enumerate() {
        let index = i + 1;
        if i == 0 && label == "*" {
            continue;
        }
        check_label(label, index)?;
    }
    Ok(())
}

/// One non-wildcard label of an ASCII, lowercase hostname.
fn check_label(label: &str, index: usize) -> Result<(), HostnameError> {
    if label.is_empty() {
        return Err(HostnameError::EmptyLabel { index });
    }
    if label.contains('*') {
        return Err(HostnameError::MisplacedWildcard {
            index,
            label: quote_label(label),
        });
    }
    if label.len() > MAX_LABEL_LEN {
        return Err(HostnameError::LabelTooLong {
            index,
            label: quote_label(label),
            len: label.len(),
        });
    }
    if let Some(b) = label
        .bytes()
        .find(|b| !(b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-'))
    {
        return Err(HostnameError::InvalidCharacter {
            index,
            label: quote_label(label),
            what: describe_byte(b),
        });
    }
    if label.starts_with('-') || label.ends_with('-') {
        return Err(HostnameError::HyphenAtEdge {
            index,
            label: quote_label(label),
        });
    }
    Ok(())
}

/// Names an ASCII byte the way a person would read it; whitespace is otherwise invisible.
fn describe_byte(b: u8) -> String {
    match b {
        b' ' => "a space".to_string(),
        b'\t' => "a tab".to_string(),
        b'\n' | b'\r' => "a line break".to_string(),
        b'_' => "an underscore \"_\"".to_string(),
        _ if b.is_ascii_graphic() => format!("the character {:?}", char::from(b)),
        _ => format!("the control character 0x{b:02X}"),
    }
}

fn quote_label(label: &str) -> String {
    if label.len() <= MAX_QUOTED {
        return format!("{label:?}");
    }
    // Labels reaching here are ASCII, but stay on a char boundary anyway.
    let mut end = MAX_QUOTED;
    while !label.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}...", &label[..end])
}

/// True when `h` starts with the wildcard label `*.`.
pub fn is_wildcard(h: &str) -> bool {
    h.starts_with("*.")
}

/// `h == apex` or `h` ends with `"." + apex`, comparing ASCII case-insensitively.
///
/// The apex comes from a namespace label and may carry uppercase; the comparison is bytewise
/// so the admission hot path does not allocate. An empty apex matches nothing: an unset apex
/// must never mean "everything".
pub fn within(h: &str, apex: &str) -> bool {
    let (h, apex) = (h.as_bytes(), apex.as_bytes());
    if apex.is_empty() || h.len() < apex.len() {
        return false;
    }
    let split = h.len() - apex.len();
    if !h[split..].eq_ignore_ascii_case(apex) {
        return false;
    }
    // The byte before the suffix must be a dot so `evilapex` does not pass as under `apex`.
    split == 0 || h[split - 1] == b'.'
}

/// Whether two listener hostnames can match one request's name (SPEC §3.10), as Gateway API
/// matches a listener's hostname: an exact name matches itself; `*.S` matches every name
/// strictly under `S`, however deep (not `S` itself). So two names intersect when equal,
/// when one is `*.S` and the other lies strictly under `S`, or when both are wildcards and
/// one suffix lies within the other. ASCII case-insensitive, like [`within`].
pub fn intersects(a: &str, b: &str) -> bool {
    match (a.strip_prefix("*."), b.strip_prefix("*.")) {
        (None, None) => a.eq_ignore_ascii_case(b),
        (Some(s), None) => strictly_under(b, s),
        (None, Some(t)) => strictly_under(a, t),
        (Some(s), Some(t)) => within(s, t) || within(t, s),
    }
}

/// `h` lies under `suffix` by at least one label.
fn strictly_under(h: &str, suffix: &str) -> bool {
    h.len() > suffix.len() && within(h, suffix)
}

/// True when `s` is a DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters
/// (namespace, Service, listener names).
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL_LEN
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// True when `s` is a DNS-1123 subdomain: dot-separated labels, at most 253 characters (what
/// a Certificate's and a Secret's name must be).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_HOSTNAME_LEN && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC §3.10: which listener hostnames a data plane sees as overlapping.
    #[test]
    fn listener_hostnames_intersect_as_gateway_api_matches_them() {
        // (a, b, intersect)
        let cases = [
            ("api.alice.example.org", "api.alice.example.org", true),
            ("API.alice.example.org", "api.alice.example.org", true),
            ("api.alice.example.org", "www.alice.example.org", false),
            ("*.alice.example.org", "api.alice.example.org", true),
            ("*.alice.example.org", "a.b.alice.example.org", true),
            ("*.alice.example.org", "alice.example.org", false),
            ("*.alice.example.org", "evilalice.example.org", false),
            ("*.bob.alice.example.org", "api.alice.example.org", false),
            ("*.api.alice.example.org", "api.alice.example.org", false),
            ("*.alice.example.org", "*.bob.alice.example.org", true),
            ("*.alice.example.org", "*.alice.example.org", true),
            ("*.bob.example.org", "*.alice.example.org", false),
        ];
        for (a, b, want) in cases {
            assert_eq!(intersects(a, b), want, "{a} / {b}");
            assert_eq!(intersects(b, a), want, "{b} / {a}");
        }
    }

    fn label(n: usize) -> String {
        "a".repeat(n)
    }

    /// A hostname of exactly `len` bytes made of 63-byte labels and one shorter last label.
    fn hostname_of_len(len: usize) -> String {
        let mut parts = Vec::new();
        let mut left = len;
        while left > 0 {
            if left <= MAX_LABEL_LEN {
                parts.push(label(left));
                break;
            }
            // A full label plus the dot that follows it; keep at least one byte for the tail.
            let take = MAX_LABEL_LEN.min(left - 2);
            parts.push(label(take));
            left -= take + 1;
        }
        let h = parts.join(".");
        assert_eq!(h.len(), len);
        h
    }

    #[test]
    fn valid_hostnames() {
        let cases = [
            "example.org",
            "alice.example.org",
            "a.b.c.d.e.alice.example.org",
            "*.alice.example.org",
            "*.org",
            "localhost",
            "a",
            "0",
            "123.example.org",
            "a-b.example.org",
            "a--b.example.org",
            "xn--80ak6aa92e.com",
            "*.xn--80ak6aa92e.com",
        ];
        for h in cases {
            assert_eq!(validate(h), Ok(()), "{h}");
        }
        let l63 = format!("{}.example.org", label(63));
        assert_eq!(validate(&l63), Ok(()));
        let h253 = hostname_of_len(253);
        assert_eq!(validate(&h253), Ok(()));
        let w253 = format!("*.{}", hostname_of_len(251));
        assert_eq!(validate(&w253), Ok(()));
    }

    #[test]
    fn invalid_hostnames_say_why() {
        let l64 = format!("{}.example.org", label(64));
        let h254 = hostname_of_len(254);
        // (input, a phrase the reason must contain)
        let cases: Vec<(&str, &str)> = vec![
            ("", "empty"),
            ("*", "bare \"*\""),
            ("*.", "ends with a dot"),
            (
                "foo.*.org",
                "wildcard is only allowed as the whole first label",
            ),
            ("*.*.example.org", "whole first label"),
            ("*foo.example.org", "whole first label"),
            ("foo*.example.org", "whole first label"),
            ("example.org.", "ends with a dot"),
            (".example.org", "starts with a dot"),
            ("a..b", "empty"),
            (
                "Shop.example.org",
                "uppercase letters are not allowed, use lowercase",
            ),
            ("SHOP.EXAMPLE.ORG", "\"shop.example.org\""),
            // Cyrillic small a (U+0430) standing in for the Latin one.
            ("\u{430}lice.example.org", "U+0430"),
            ("\u{430}lice.example.org", "punycode"),
            // Full-width letters and a full-width dot.
            ("\u{ff41}lice.example.org", "non-ASCII"),
            ("alice\u{ff0e}example.org", "U+FF0E"),
            (&l64, "64 characters"),
            (&l64, "at most 63"),
            (&h254, "254 characters"),
            (&h254, "at most 253"),
            (
                "-foo.example.org",
                "must start and end with a letter or digit",
            ),
            (
                "foo-.example.org",
                "must start and end with a letter or digit",
            ),
            ("my shop.example.org", "a space"),
            (" example.org", "a space"),
            ("my_shop.example.org", "underscore"),
            ("shop.example.org/path", "'/'"),
            ("shop.example.org:443", "':'"),
            ("shop\u{0}.example.org", "control character"),
        ];
        for (h, phrase) in cases {
            let err = match validate(h) {
                Err(e) => e.to_string(),
                Ok(()) => panic!("{h:?} must be invalid"),
            };
            assert!(err.contains(phrase), "{h:?}: {err:?} lacks {phrase:?}");
        }
    }

    #[test]
    fn errors_name_the_label() {
        let err = validate("ok.bad_label.org").map_err(|e| e.to_string());
        let err = err.expect_err("underscore is invalid");
        assert!(err.contains("label 2"), "{err}");
        assert!(err.contains("\"bad_label\""), "{err}");
    }

    #[test]
    fn huge_and_odd_inputs_do_not_panic_and_stay_short() {
        let inputs = [
            "a".repeat(1 << 20),
            ".".repeat(300),
            "*.".repeat(100),
            "\u{ff41}".repeat(100),
            format!("{}.org", "a".repeat(200)),
            "-".to_string(),
            "*.-".to_string(),
            "\u{1F600}".to_string(),
        ];
        for h in &inputs {
            let err = validate(h).expect_err("invalid");
            assert!(err.to_string().len() < 400, "{err}");
        }
    }

    #[test]
    fn within_apex() {
        // (hostname, apex, expected)
        let cases = [
            ("alice.example.org", "alice.example.org", true),
            ("shop.alice.example.org", "alice.example.org", true),
            ("a.b.c.shop.alice.example.org", "alice.example.org", true),
            ("*.alice.example.org", "alice.example.org", true),
            ("evilalice.example.org", "alice.example.org", false),
            ("alice.example.org.evil.com", "alice.example.org", false),
            ("example.org", "alice.example.org", false),
            ("shop.bob.example.org", "alice.example.org", false),
            // The apex label value may carry uppercase; hostnames are compared lowercased.
            ("shop.alice.example.org", "Alice.Example.ORG", true),
            ("SHOP.alice.example.org", "alice.example.org", true),
            ("evilAlice.example.org", "Alice.example.org", false),
            // A parent apex contains its children's apexes, not the other way round.
            ("x.alice.example.org", "example.org", true),
            ("example.org", "alice.example.org", false),
            // An empty apex never means "anything".
            ("example.org", "", false),
            ("", "", false),
            ("", "example.org", false),
            (".example.org", "example.org", true),
            ("\u{430}.example.org", "example.org", true),
            ("x.\u{430}lice.org", "alice.org", false),
        ];
        for (h, apex, want) in cases {
            assert_eq!(within(h, apex), want, "within({h:?}, {apex:?})");
        }
    }

    #[test]
    fn wildcard_detection() {
        assert!(is_wildcard("*.example.org"));
        assert!(!is_wildcard("*"));
        assert!(!is_wildcard("example.org"));
        assert!(!is_wildcard("foo.*.org"));
    }
}

/// Why a value is not usable as an apex (a root host, a TenantGateway's `spec.apex`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApexError {
    #[error("the apex is empty; set it to the tenant's domain, as in \"alice.example.org\"")]
    Empty,
    #[error(
        "the apex {value:?} is a wildcard; an apex is a plain domain (drop the leading \"*.\")"
    )]
    Wildcard { value: String },
    #[error("the apex {value:?} is invalid: {source}")]
    Invalid {
        value: String,
        source: HostnameError,
    },
}

/// Parse an apex: surrounding whitespace trimmed, lowercased (namespace labels and flags may
/// carry uppercase), then a valid hostname that is not a wildcard.
pub fn parse_apex(value: &str) -> Result<String, ApexError> {
    let apex = value.trim().to_ascii_lowercase();
    if apex.is_empty() {
        return Err(ApexError::Empty);
    }
    if is_wildcard(&apex) || apex == "*" {
        return Err(ApexError::Wildcard { value: apex });
    }
    match validate(&apex) {
        Ok(()) => Ok(apex),
        Err(source) => Err(ApexError::Invalid {
            value: apex,
            source,
        }),
    }
}

/// Why a route hostname gets no HTTP-01 listener (SPEC §3.3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotListenable {
    #[error("is invalid: {0}")]
    Invalid(HostnameError),
    #[error(
        "is a wildcard; HTTP-01 cannot issue wildcard certificates (use certMode dns01 for \
         wildcards)"
    )]
    Wildcard,
    #[error("is not within the apex {apex}")]
    OutsideApex { apex: String },
}

/// Whether `h` can have its own HTTPS listener and HTTP-01 certificate under `apex`: valid,
/// not a wildcard, and within the apex.
pub fn listenable(h: &str, apex: &str) -> Result<(), NotListenable> {
    validate(h).map_err(NotListenable::Invalid)?;
    if is_wildcard(h) {
        return Err(NotListenable::Wildcard);
    }
    if !within(h, apex) {
        return Err(NotListenable::OutsideApex {
            apex: apex.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod fast_path_tests {
    use super::*;

    /// Every string over a small alphabet that stresses each rule (dots, hyphens, the
    /// wildcard, case, a non-ASCII letter), up to length 6, plus long and edge forms: the
    /// one-pass check and the detailed checks must agree on every one.
    #[test]
    fn fast_path_agrees_with_the_detailed_checks() {
        let alphabet = ['a', '0', '-', '.', '*', 'A', '_', 'é'];
        let mut inputs: Vec<String> = vec![String::new()];
        let mut frontier = vec![String::new()];
        for _ in 0..6 {
            let mut next = Vec::new();
            for p in &frontier {
                for c in alphabet {
                    let mut s = p.clone();
                    s.push(c);
                    next.push(s);
                }
            }
            inputs.extend(next.iter().cloned());
            frontier = next;
        }
        let l63 = "a".repeat(63);
        let l64 = "a".repeat(64);
        inputs.extend([
            format!("{l63}.example.org"),
            format!("{l64}.example.org"),
            format!("*.{l63}"),
            format!("*.{l64}"),
            [l63.as_str(); 4].join("."), // 255 bytes: too long
            format!("{}.a", [l63.as_str(); 3].join(".")), // 193 bytes: fine
            format!("{}.{}", [l63.as_str(); 3].join("."), "a".repeat(61)), // 253
            format!("{}.{}", [l63.as_str(); 3].join("."), "a".repeat(62)), // 254
        ]);
        let mut accepted = 0;
        for h in &inputs {
            let fast = is_plainly_valid(h.as_bytes());
            let detailed = validate_detailed(h).is_ok();
            assert_eq!(fast, detailed, "{h:?}: fast {fast}, detailed {detailed}");
            assert_eq!(validate(h).is_ok(), detailed, "{h:?}");
            accepted += usize::from(detailed);
        }
        // The corpus must exercise both outcomes in quantity, or the test proves nothing.
        assert!(accepted > 500, "only {accepted} valid inputs");
        assert!(inputs.len() - accepted > 100_000);
    }
}

#[cfg(test)]
mod apex_tests {
    use super::*;

    #[test]
    fn parse_apex_cases() {
        // (input, Ok(value) or the phrase the error contains)
        let cases: [(&str, Result<&str, &str>); 8] = [
            ("alice.example.org", Ok("alice.example.org")),
            ("  Alice.Example.ORG\n", Ok("alice.example.org")),
            ("org", Ok("org")),
            ("", Err("empty")),
            ("   ", Err("empty")),
            ("*.alice.example.org", Err("wildcard")),
            ("alice..org", Err("label 2 is empty")),
            ("alice.org.", Err("ends with a dot")),
        ];
        for (input, want) in cases {
            match (parse_apex(input), want) {
                (Ok(got), Ok(w)) => assert_eq!(got, w, "{input:?}"),
                (Err(e), Err(phrase)) => {
                    assert!(e.to_string().contains(phrase), "{input:?}: {e}")
                }
                (got, want) => panic!("{input:?}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(
            parse_apex("*"),
            Err(ApexError::Wildcard { value: "*".into() })
        );
    }

    #[test]
    fn listenable_cases() {
        let apex = "alice.example.org";
        assert_eq!(listenable("alice.example.org", apex), Ok(()));
        assert_eq!(listenable("harbor.alice.example.org", apex), Ok(()));
        assert_eq!(listenable("a.b.alice.example.org", apex), Ok(()));
        assert_eq!(
            listenable("*.alice.example.org", apex),
            Err(NotListenable::Wildcard)
        );
        assert_eq!(
            listenable("shop.bob.example.org", apex),
            Err(NotListenable::OutsideApex { apex: apex.into() })
        );
        assert!(matches!(
            listenable("Shop.alice.example.org", apex),
            Err(NotListenable::Invalid(HostnameError::Uppercase { .. }))
        ));
        let msg = listenable("*.alice.example.org", apex)
            .expect_err("wildcard")
            .to_string();
        assert!(msg.contains("dns01"), "{msg}");
    }
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn dns_labels() {
        for ok in ["a", "a-b", "0", "tenant-root", "a-1", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    #[test]
    fn dns_subdomains() {
        for ok in [
            "a",
            "a.b",
            "gw-x-tls",
            "wild-tls",
            "x.y.z",
            &format!("{}.{}", "a".repeat(63), "b".repeat(63)),
        ] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        let too_long = vec!["a".repeat(63); 4].join(".");
        for bad in ["", ".a", "a.", "a..b", "A.b", "a_b", too_long.as_str()] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }
}
