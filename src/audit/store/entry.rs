//! One judged object as the store keeps it, in the few bytes its results and a later
//! re-judgement need back: its name, uid, projection and verdict ([`Stored`]), and the
//! binary form the projection is kept in ([`encode`], [`decode`]).
//!
//! The store holds one per stored object of a guarded kind (tens of thousands of routes), so
//! the entry is one allocation beside its 48 bytes: the name, a uid that is no UUID and the
//! projection share it, a UUID is kept as its 16 bytes, and a pass (nearly every verdict)
//! allocates nothing.
//!
//! The projection's form: a string is its length and bytes (no quotes, no escapes), an
//! object key on a guarded kind's paths is one byte, the prefix every path of the kind
//! starts with (`spec.hostnames`) is left out when the projection is only that, and a string
//! that is the namespace's apex as written in its host label, or ends with `.` and it, keeps
//! only what precedes the apex. That last part makes the bytes depend on the label: the
//! store keeps every object's projection relative to its namespace's current label and
//! re-encodes them when the label changes. Every JSON value round-trips, with its type.

use std::sync::OnceLock;

use serde_json::{Map, Number, Value};

use super::super::judge::Verdict;
use super::super::kinds::GuardedKind;
use super::super::project::common_prefix;

/// An object's uid, kept in 16 bytes when it is the API server's usual UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Uid {
    Absent,
    Uuid([u8; 16]),
    Text(Box<str>),
}

impl Uid {
    pub(super) fn new(uid: Option<&str>) -> Uid {
        let Some(u) = uid.filter(|u| !u.is_empty()) else {
            return Uid::Absent;
        };
        let hex: Vec<u8> = u.bytes().filter(|b| *b != b'-').collect();
        let canonical = u.len() == 36
            && [8, 13, 18, 23].iter().all(|i| u.as_bytes()[*i] == b'-')
            && hex.len() == 32
            && hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !canonical {
            return Uid::Text(u.into());
        }
        let mut out = [0u8; 16];
        for (i, pair) in hex.chunks(2).enumerate() {
            let nibble = |b: u8| if b <= b'9' { b - b'0' } else { b - b'a' + 10 };
            out[i] = nibble(pair[0]) << 4 | nibble(pair[1]);
        }
        Uid::Uuid(out)
    }

    pub(super) fn get(&self) -> Option<String> {
        match self {
            Uid::Absent => None,
            Uid::Text(t) => Some(t.to_string()),
            Uid::Uuid(b) => Some(uuid_text(b)),
        }
    }
}

fn uuid_text(b: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{byte:02x}"));
    }
    s
}

static PASS: Verdict = Verdict::Pass;

/// `flags`: the uid is a UUID (in `uuid`), or text (in `data` after the name).
const UID_UUID: u8 = 1;
const UID_TEXT: u8 = 2;
/// `flags`: `data` ends with the packed projection; without it the object could not be read.
const BODY: u8 = 4;

/// One judged object (see the module doc).
#[derive(Debug)]
pub(super) struct Stored {
    /// The name's length and bytes, then a text uid's length and bytes (`UID_TEXT`), then the
    /// packed projection (`BODY`).
    data: Box<[u8]>,
    uuid: [u8; 16],
    /// `None`: a pass.
    verdict: Option<Box<Verdict>>,
    /// The relist generation of its kind that last saw it.
    pub(super) seen: u32,
    pub(super) kind: GuardedKind,
    flags: u8,
}

impl Stored {
    pub(super) fn new(
        kind: GuardedKind,
        name: &str,
        uid: &Uid,
        body: Option<&[u8]>,
        verdict: Verdict,
        seen: u32,
    ) -> Stored {
        let mut data = Vec::with_capacity(2 + name.len() + body.map_or(0, <[u8]>::len));
        put_bytes(&mut data, name.as_bytes());
        let (mut flags, mut uuid) = (0, [0; 16]);
        match uid {
            Uid::Absent => {}
            Uid::Uuid(b) => {
                flags |= UID_UUID;
                uuid = *b;
            }
            Uid::Text(t) => {
                flags |= UID_TEXT;
                put_bytes(&mut data, t.as_bytes());
            }
        }
        if let Some(b) = body {
            flags |= BODY;
            data.extend_from_slice(b);
        }
        let mut s = Stored {
            data: data.into_boxed_slice(),
            uuid,
            verdict: None,
            seen,
            kind,
            flags,
        };
        s.set_verdict(verdict);
        s
    }

    /// The name's bytes and where the text uid (or the body) starts.
    fn name_end(&self) -> (&[u8], usize) {
        // `new` wrote a length and that many bytes first.
        let mut r = Reader {
            bytes: &self.data,
            at: 0,
        };
        let name = r.bytes().unwrap_or_default();
        (name, r.at)
    }

    pub(super) fn name(&self) -> &str {
        // Written from a `&str` by `new`.
        std::str::from_utf8(self.name_end().0).unwrap_or_default()
    }

    /// Orders entries by kind, then name (a namespace's list is sorted so).
    pub(super) fn is(&self, kind: GuardedKind, name: &str) -> std::cmp::Ordering {
        (self.kind, self.name_end().0).cmp(&(kind, name.as_bytes()))
    }

    pub(super) fn uid(&self) -> Uid {
        if self.flags & UID_UUID != 0 {
            return Uid::Uuid(self.uuid);
        }
        if self.flags & UID_TEXT != 0 {
            let (_, at) = self.name_end();
            let mut r = Reader {
                bytes: &self.data,
                at,
            };
            // Written from a `&str` by `new`, after the name.
            let text = r.bytes().unwrap_or_default();
            return Uid::Text(String::from_utf8_lossy(text).into());
        }
        Uid::Absent
    }

    /// The packed projection ([`encode`]); `None` for an object that could not be read.
    pub(super) fn body(&self) -> Option<&[u8]> {
        if self.flags & BODY == 0 {
            return None;
        }
        let (_, mut at) = self.name_end();
        if self.flags & UID_TEXT != 0 {
            let mut r = Reader {
                bytes: &self.data,
                at,
            };
            // Written by `new`: it reads back.
            let _ = r.bytes();
            at = r.at;
        }
        self.data.get(at..)
    }

    /// The same uid and packed projection (`None`: unreadable) as this entry has.
    pub(super) fn same(&self, uid: &Uid, body: Option<&[u8]>) -> bool {
        self.body() == body && &self.uid() == uid
    }

    /// Its projection packed again (a namespace's label changed: see the module doc).
    pub(super) fn set_body(&mut self, body: Option<&[u8]>) {
        let uid = self.uid();
        let verdict = self.take_verdict();
        *self = Stored::new(self.kind, self.name(), &uid, body, verdict, self.seen);
    }

    pub(super) fn verdict(&self) -> &Verdict {
        self.verdict.as_deref().unwrap_or(&PASS)
    }

    /// Set the verdict, returning the previous one.
    pub(super) fn set_verdict(&mut self, v: Verdict) -> Verdict {
        let new = match v {
            Verdict::Pass => None,
            other => Some(Box::new(other)),
        };
        std::mem::replace(&mut self.verdict, new).map_or(Verdict::Pass, |b| *b)
    }

    fn take_verdict(&mut self) -> Verdict {
        self.set_verdict(Verdict::Pass)
    }
}

// Tags of the packed form.
const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
const NUMBER: u8 = 3;
const STRING: u8 = 4;
/// A string ending with `.` and the apex: what precedes it.
const UNDER_APEX: u8 = 5;
/// A string that is the apex.
const APEX: u8 = 6;
const ARRAY: u8 = 7;
const OBJECT: u8 = 8;
// The first byte: the projection whole, or only its value under the kind's common prefix.
const WHOLE: u8 = 0;
const UNDER_PREFIX: u8 = 1;

/// Every key on a guarded kind's paths: an object key among them is packed as its index + 1
/// (0: the key's text follows).
fn keys() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut all: Vec<&'static str> = GuardedKind::ALL
            .iter()
            .flat_map(|k| k.paths().iter())
            .flat_map(|p| p.iter().copied())
            .chain(["metadata", "uid"])
            .collect();
        all.sort_unstable();
        all.dedup();
        // One byte each, 0 reserved: there are a few dozen.
        all.truncate(usize::from(u8::MAX) - 1);
        all
    })
}

/// `projection` (of `kind`, see `project::project`) packed, strings relative to `apex` (the
/// namespace's host label as written; `None`: none).
pub(super) fn encode(kind: GuardedKind, projection: &Value, apex: Option<&str>) -> Vec<u8> {
    let apex = apex.filter(|a| !a.is_empty());
    let mut out = Vec::new();
    let prefix = common_prefix(kind);
    let mut inner = Some(projection);
    for key in prefix {
        inner = match inner {
            Some(Value::Object(m)) if m.len() == 1 => m.get(*key),
            _ => None,
        };
    }
    match inner {
        Some(v) if !prefix.is_empty() => {
            out.push(UNDER_PREFIX);
            put_value(&mut out, v, apex);
        }
        _ => {
            out.push(WHOLE);
            put_value(&mut out, projection, apex);
        }
    }
    out
}

/// What [`encode`] packed, with the same `apex`.
pub(super) fn decode(
    kind: GuardedKind,
    packed: &[u8],
    apex: Option<&str>,
) -> Result<Value, Unreadable> {
    let apex = apex.filter(|a| !a.is_empty());
    let mut r = Reader {
        bytes: packed,
        at: 0,
    };
    let form = r.byte()?;
    let mut v = r.value(apex)?;
    if r.at != packed.len() {
        return Err(Unreadable(r.at));
    }
    match form {
        WHOLE => {}
        UNDER_PREFIX => {
            for key in common_prefix(kind).iter().rev() {
                let mut m = Map::new();
                m.insert((*key).to_string(), v);
                v = Value::Object(m);
            }
        }
        _ => return Err(Unreadable(0)),
    }
    Ok(v)
}

/// A packed projection that does not read back: only a bug in [`encode`] or [`decode`]
/// makes one.
#[derive(Debug, thiserror::Error)]
#[error("the audit's stored projection is unreadable at byte {0} (a bug: please report it)")]
pub(super) struct Unreadable(usize);

fn put_len(out: &mut Vec<u8>, mut n: usize) {
    loop {
        // Seven bits a byte, the high bit set while more follow.
        let low = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_len(out, b.len());
    out.extend_from_slice(b);
}

fn put_value(out: &mut Vec<u8>, v: &Value, apex: Option<&str>) {
    match v {
        Value::Null => out.push(NULL),
        Value::Bool(false) => out.push(FALSE),
        Value::Bool(true) => out.push(TRUE),
        Value::Number(n) => {
            out.push(NUMBER);
            put_bytes(out, n.to_string().as_bytes());
        }
        Value::String(s) => match apex {
            Some(a) if s.as_str() == a => out.push(APEX),
            Some(a)
                if s.len() > a.len()
                    && s.ends_with(a)
                    && s.as_bytes()[s.len() - a.len() - 1] == b'.' =>
            {
                out.push(UNDER_APEX);
                put_bytes(out, &s.as_bytes()[..s.len() - a.len() - 1]);
            }
            _ => {
                out.push(STRING);
                put_bytes(out, s.as_bytes());
            }
        },
        Value::Array(items) => {
            out.push(ARRAY);
            put_len(out, items.len());
            for i in items {
                put_value(out, i, apex);
            }
        }
        Value::Object(m) => {
            out.push(OBJECT);
            put_len(out, m.len());
            for (k, v) in m {
                match keys().iter().position(|known| known == k) {
                    // `keys` holds fewer than 255.
                    Some(i) => out.push(u8::try_from(i + 1).unwrap_or(0)),
                    None => {
                        out.push(0);
                        put_bytes(out, k.as_bytes());
                    }
                }
                put_value(out, v, apex);
            }
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, Unreadable> {
        let b = *self.bytes.get(self.at).ok_or(Unreadable(self.at))?;
        self.at += 1;
        Ok(b)
    }

    fn len(&mut self) -> Result<usize, Unreadable> {
        let mut n: usize = 0;
        for shift in (0..usize::BITS).step_by(7) {
            let b = self.byte()?;
            n |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(Unreadable(self.at))
    }

    fn bytes(&mut self) -> Result<&'a [u8], Unreadable> {
        let n = self.len()?;
        let end = self.at.checked_add(n).ok_or(Unreadable(self.at))?;
        let b = self.bytes.get(self.at..end).ok_or(Unreadable(self.at))?;
        self.at = end;
        Ok(b)
    }

    fn text(&mut self) -> Result<String, Unreadable> {
        let at = self.at;
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| Unreadable(at))
    }

    fn value(&mut self, apex: Option<&str>) -> Result<Value, Unreadable> {
        let at = self.at;
        Ok(match self.byte()? {
            NULL => Value::Null,
            FALSE => Value::Bool(false),
            TRUE => Value::Bool(true),
            NUMBER => {
                let text = self.text()?;
                Value::Number(text.parse::<Number>().map_err(|_| Unreadable(at))?)
            }
            STRING => Value::String(self.text()?),
            UNDER_APEX => {
                let a = apex.ok_or(Unreadable(at))?;
                let mut s = self.text()?;
                s.push('.');
                s.push_str(a);
                Value::String(s)
            }
            APEX => Value::String(apex.ok_or(Unreadable(at))?.to_string()),
            ARRAY => {
                let n = self.len()?;
                // Each item takes a byte at least: a count past the end is no list.
                let mut items = Vec::with_capacity(n.min(self.bytes.len() - self.at));
                for _ in 0..n {
                    items.push(self.value(apex)?);
                }
                Value::Array(items)
            }
            OBJECT => {
                let n = self.len()?;
                let mut m = Map::new();
                for _ in 0..n {
                    let k = match self.byte()? {
                        0 => self.text()?,
                        i => (*keys()
                            .get(usize::from(i) - 1)
                            .ok_or(Unreadable(self.at - 1))?)
                        .to_string(),
                    };
                    let v = self.value(apex)?;
                    m.insert(k, v);
                }
                Value::Object(m)
            }
            _ => return Err(Unreadable(at)),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn projections_round_trip_with_and_without_an_apex() {
        let cases = [
            (
                GuardedKind::HttpRoute,
                json!({"spec": {"hostnames": ["a.t1.example.org", "t1.example.org",
                    "xt1.example.org", ".t1.example.org", "T1.example.org", 5, null, true,
                    -1.5, "ü.t1.example.org", ""]}}),
            ),
            (GuardedKind::HttpRoute, json!({"spec": {"hostnames": []}})),
            (GuardedKind::HttpRoute, json!({"spec": {}})),
            (GuardedKind::HttpRoute, json!({"spec": "x"})),
            (GuardedKind::HttpRoute, json!({})),
            (GuardedKind::HttpRoute, json!([1, {"odd key": [false]}])),
            (
                GuardedKind::Gateway,
                json!({"spec": {"listeners": [{"name": "https-0", "hostname": "*.t1.example.org"},
                    {"name": "http", "hostname": 7}, "odd"]}}),
            ),
            (
                GuardedKind::Ingress,
                json!({"metadata": {"annotations": {
                    "nginx.ingress.kubernetes.io/server-alias": "a.t1.example.org b.example.org"}},
                    "spec": {"rules": [{"host": "t1.example.org"}], "tls": {"hosts": ["x"]},
                    "defaultBackend": {"service": {"name": "s", "port": {"number": 80}}}}}),
            ),
            (
                GuardedKind::Package,
                json!({"spec": {"components": {"platform": {"values": {"gateway": {
                    "attachedNamespaces": ["cozy-a", 18446744073709551615u64]}}}}}}),
            ),
            (
                GuardedKind::TenantGateway,
                json!({"spec": {"apex": "t1.example.org", "attachedNamespaces": ["x"]}}),
            ),
        ];
        for (kind, v) in cases {
            for apex in [None, Some("t1.example.org"), Some("")] {
                let packed = encode(kind, &v, apex);
                let back = decode(kind, &packed, apex).expect("reads back");
                assert_eq!(back, v, "{kind} {apex:?}");
                assert_eq!(back.to_string(), v.to_string(), "key order kept");
            }
        }
    }

    #[test]
    fn hostnames_under_the_apex_keep_only_their_own_labels() {
        let v = json!({"spec": {"hostnames": ["web.t1.example.org", "www.web.t1.example.org"]}});
        let json_text = v["spec"]["hostnames"].to_string().len();
        let packed = encode(GuardedKind::HttpRoute, &v, Some("t1.example.org"));
        // form, list tag and count, then tag, length and labels of each.
        assert_eq!(packed.len(), 3 + (2 + 3) + (2 + 7));
        assert!(
            packed.len() * 2 < json_text,
            "{} vs {json_text}",
            packed.len()
        );
        // Read back with another apex, the strings follow it: the store re-encodes a
        // namespace's objects when its label changes for this reason.
        assert_eq!(
            decode(GuardedKind::HttpRoute, &packed, Some("t2.example.org")).expect("reads"),
            json!({"spec": {"hostnames": ["web.t2.example.org", "www.web.t2.example.org"]}})
        );
        assert!(decode(GuardedKind::HttpRoute, &packed, None).is_err());
    }

    #[test]
    fn truncated_or_foreign_bytes_are_an_error_not_a_panic() {
        let v = json!({"spec": {"listeners": [{"name": "a", "hostname": "h.example.org"}]}});
        let packed = encode(GuardedKind::Gateway, &v, Some("example.org"));
        for n in 0..packed.len() {
            assert!(
                decode(GuardedKind::Gateway, &packed[..n], Some("example.org")).is_err(),
                "{n}"
            );
        }
        let mut trailing = packed.clone();
        trailing.push(0);
        assert!(decode(GuardedKind::Gateway, &trailing, Some("example.org")).is_err());
        for junk in [
            &[9u8][..],
            &[0, 9],
            &[0, 7, 0xff],
            &[0, 8, 1, 250, 0],
            &[0, 4, 2, 0xff, 0xfe],
        ] {
            assert!(
                decode(GuardedKind::Gateway, junk, None).is_err(),
                "{junk:?}"
            );
        }
    }

    #[test]
    fn entries_keep_name_uid_body_and_verdict() {
        let uuid = "0b1e6f36-6a43-4d1c-9d5c-0d7f3f7f9a01";
        for uid in [
            Uid::new(Some(uuid)),
            Uid::new(Some("not-a-uuid")),
            Uid::Absent,
        ] {
            for body in [Some(&b"\x01\x07\x00"[..]), None] {
                let mut s = Stored::new(
                    GuardedKind::HttpRoute,
                    "web-é",
                    &uid,
                    body,
                    Verdict::Pass,
                    3,
                );
                assert_eq!(s.name(), "web-é");
                assert_eq!(s.uid(), uid);
                assert_eq!(s.body(), body);
                assert!(s.same(&uid, body));
                assert!(!s.same(&Uid::new(Some("other")), body));
                assert_eq!(s.verdict(), &Verdict::Pass);
                let fail = Verdict::Fail(Box::new(vec!["x".into()]));
                assert_eq!(s.set_verdict(fail.clone()), Verdict::Pass);
                s.set_body(Some(b"\x00\x00"));
                assert_eq!(
                    (s.name(), s.uid(), s.body(), s.verdict(), s.seen),
                    ("web-é", uid.clone(), Some(&b"\x00\x00"[..]), &fail, 3)
                );
                assert_eq!(
                    s.is(GuardedKind::HttpRoute, "web-é"),
                    std::cmp::Ordering::Equal
                );
                assert_eq!(
                    s.is(GuardedKind::HttpRoute, "web-é2"),
                    std::cmp::Ordering::Less
                );
                assert_eq!(s.is(GuardedKind::Gateway, "z"), std::cmp::Ordering::Greater);
            }
        }
        assert_eq!(std::mem::size_of::<Stored>(), 48);
    }
}
