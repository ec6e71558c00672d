//! The envelope of a review read straight from its bytes: the same [`Envelope`] the typed
//! decode (serde_json with the projection of `project`) gives, at a fraction of its cost.
//! Most of a review is fields nobody reads (`managedFields`, rules, options, requestKind);
//! serde_json visits each of them a byte at a time, and its parse of a 4 KiB body cost more
//! than the whole benchmark baseline (bench/RESULTS.md, session 32). Here unread values
//! are skipped by a loop over bytes that checks their syntax exactly as serde_json's skip does
//! (strings eight bytes at a time), and the read ones are built as the typed decode builds
//! them.
//!
//! The reader answers only for bodies it reads whole and is sure of: [`envelope`] gives
//! `None` for anything else, and the caller then runs the typed decode, whose answer (the
//! error message included) is the one given. So for every body, the reader either gives what
//! the typed decode gives or nothing; it never accepts what the typed decode refuses. It
//! gives up on (the typed decode then decides):
//! - any syntax error, and trailing characters after the envelope;
//! - an escape (`\`) in a string it keeps or a key it compares (escaped text is rare; the
//!   typed decode unescapes it), while escapes in skipped strings are checked as serde_json
//!   checks them;
//! - a field of the wrong JSON type, a missing required field, a known field given twice,
//!   a struct written as an array;
//! - nesting deeper than [`MAX_DEPTH`] anywhere (the typed decode refuses 128 levels in the
//!   fields it reads and has no limit in the ones it skips; this reader stays well below
//!   both and needs no stack of its own beyond a fixed bit set);
//! - the kept fields exceeding the allowance (charged exactly as `project` charges them).
//!
//! `reader/tests.rs` holds the two equal over the test reviews (every layer's, the uid
//! table, an API-server-shaped route) and every truncation, deletion and substitution of a
//! byte in them.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::project::{self, ObjectField, Path};
use super::request::{
    AdmissionRequest, Envelope, GroupVersionKind, GroupVersionResource, Object, UserInfo,
};

/// Nesting this reader follows (objects and arrays, from the envelope down); deeper bodies
/// go to the typed decode. Below serde_json's 128 so nothing it refuses for depth is taken.
pub(super) const MAX_DEPTH: usize = 96;

/// The envelope of `body` with `request.object` / `request.oldObject` projected on `paths`
/// and their kept fields charged against `allowance`, or `None`: the typed decode decides.
pub(super) fn envelope<'a>(
    body: &'a str,
    paths: &'static [Path],
    allowance: usize,
) -> Option<Envelope<'a>> {
    let mut r = Reader {
        s: body,
        b: body.as_bytes(),
        i: 0,
        left: allowance,
    };
    let e = r.envelope(paths)?;
    r.ws();
    (r.i == r.b.len()).then_some(e)
}

struct Reader<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    /// What is left of the allowance for kept fields.
    left: usize,
}

/// Eight bytes, each `b`.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

/// The high bit of each byte of `x` that is `"`, `\` or below 0x20; the lowest set bit is
/// exact (higher ones may be false hits after a hit, which are never looked at).
fn specials(x: u64) -> u64 {
    let zero = |v: u64| v.wrapping_sub(splat(1)) & !v & splat(0x80);
    zero(x ^ splat(b'"'))
        | zero(x ^ splat(b'\\'))
        | (x.wrapping_sub(splat(0x20)) & !x & splat(0x80))
}

impl<'a> Reader<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline(always)]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// The next byte after whitespace, consumed when it is `want`.
    fn eat(&mut self, want: u8) -> Option<()> {
        self.ws();
        (self.peek()? == want).then(|| self.i += 1)
    }

    /// The index of the first `"`, `\` or control character at or after `i`, if any.
    #[inline(always)]
    fn special_from(&self, mut i: usize) -> Option<usize> {
        while let Some(chunk) = self.b.get(i..i + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let hits = specials(u64::from_le_bytes(word));
            if hits != 0 {
                return Some(i + (hits.trailing_zeros() / 8) as usize);
            }
            i += 8;
        }
        self.b[i.min(self.b.len())..]
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
            .map(|p| i + p)
    }

    /// A string without escapes, borrowed (the reader is at its opening quote).
    #[inline(always)]
    fn plain_str(&mut self) -> Option<&'a str> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.i + 1;
        let end = self.special_from(start)?;
        if self.b[end] != b'"' {
            return None;
        }
        self.i = end + 1;
        // Both ends are ASCII quotes in a `str`: character boundaries.
        self.s.get(start..end)
    }

    /// Skip a string as serde_json's skip does: escapes checked (`\u` with four hex digits,
    /// surrogates not paired), control characters refused.
    #[inline(always)]
    fn skip_str(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        let mut i = self.i + 1;
        loop {
            i = self.special_from(i)?;
            match self.b[i] {
                b'"' => {
                    self.i = i + 1;
                    return Some(());
                }
                b'\\' => {
                    i += match *self.b.get(i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                        b'u' => {
                            let hex = self.b.get(i + 2..i + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            6
                        }
                        _ => return None,
                    };
                }
                _ => return None,
            }
        }
    }

    /// A number's text: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn number(&mut self) -> Option<&'a str> {
        let start = self.i;
        let digits = |r: &mut Reader<'_>| {
            let from = r.i;
            while let Some(b'0'..=b'9') = r.peek() {
                r.i += 1;
            }
            r.i > from
        };
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                digits(self);
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !digits(self) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if !digits(self) {
                return None;
            }
        }
        self.s.get(start..self.i)
    }

    #[inline(always)]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// Skip any value (after whitespace), checking its syntax; `depth` is the nesting of
    /// the container holding it.
    fn skip(&mut self, depth: usize) -> Option<()> {
        // Which open containers are objects (bit set) or arrays, innermost at `open - 1`.
        let mut kinds = [0u64; MAX_DEPTH.div_ceil(64)];
        let mut open = 0usize;
        loop {
            // A value starts here.
            self.ws();
            let opened = match self.peek()? {
                b'"' => {
                    self.skip_str()?;
                    None
                }
                b'{' => Some(true),
                b'[' => Some(false),
                b'n' => self.literal(b"null").map(|()| None)?,
                b't' => self.literal(b"true").map(|()| None)?,
                b'f' => self.literal(b"false").map(|()| None)?,
                b'-' | b'0'..=b'9' => self.number().map(|_| None)?,
                _ => return None,
            };
            if let Some(object) = opened {
                if depth + open + 1 > MAX_DEPTH {
                    return None;
                }
                let (word, bit) = (open / 64, 1u64 << (open % 64));
                if object {
                    kinds[word] |= bit;
                } else {
                    kinds[word] &= !bit;
                }
                open += 1;
                self.i += 1;
                self.ws();
                let close = if object { b'}' } else { b']' };
                if self.peek()? != close {
                    if object {
                        self.key_colon()?;
                    }
                    continue;
                }
                self.i += 1;
                open -= 1;
            }
            // A value ended: close what it ends, or go on to the next element.
            loop {
                if open == 0 {
                    return Some(());
                }
                let object = kinds[(open - 1) / 64] & (1u64 << ((open - 1) % 64)) != 0;
                self.ws();
                match (self.peek()?, object) {
                    (b',', true) => {
                        self.i += 1;
                        self.key_colon()?;
                        break;
                    }
                    (b',', false) => {
                        self.i += 1;
                        break;
                    }
                    (b'}', true) | (b']', false) => {
                        self.i += 1;
                        open -= 1;
                    }
                    _ => return None,
                }
            }
        }
    }

    /// A skipped object's key and its colon.
    #[inline(always)]
    fn key_colon(&mut self) -> Option<()> {
        self.ws();
        self.skip_str()?;
        self.eat(b':')
    }

    /// The entries of an object (after whitespace), each key borrowed and handed to `entry`
    /// with the reader at its value.
    fn object(
        &mut self,
        depth: usize,
        mut entry: impl FnMut(&mut Reader<'a>, &'a str) -> Option<()>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            let key = self.plain_str()?;
            self.eat(b':')?;
            self.ws();
            entry(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn is_null(&mut self) -> Option<bool> {
        self.ws();
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(true);
        }
        Some(false)
    }

    /// A string field (`Cow<str>`): a string only.
    fn str_field(&mut self) -> Option<Cow<'a, str>> {
        self.ws();
        self.plain_str().map(Cow::Borrowed)
    }

    /// An `Option<Cow<str>>` field: null or a string.
    fn opt_str(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.is_null()? {
            return Some(None);
        }
        self.str_field().map(Some)
    }

    fn envelope(&mut self, paths: &'static [Path]) -> Option<Envelope<'a>> {
        let (mut api_version, mut kind, mut request) = (None, None, None);
        self.object(1, |r, key| match key {
            "apiVersion" => once(&mut api_version, r.opt_str()?),
            "kind" => once(&mut kind, r.opt_str()?),
            "request" => {
                let v = if r.is_null()? {
                    None
                } else {
                    Some(Object(r.request(paths)?))
                };
                once(&mut request, v)
            }
            _ => r.skip(1),
        })?;
        Some(Envelope {
            api_version: api_version.flatten(),
            kind: kind.flatten(),
            request: request.flatten(),
        })
    }

    fn request(&mut self, paths: &'static [Path]) -> Option<AdmissionRequest<'a>> {
        const DEPTH: usize = 2;
        let (mut uid, mut kind, mut resource, mut sub_resource) = (None, None, None, None);
        let (mut name, mut namespace, mut operation, mut user_info) = (None, None, None, None);
        let (mut object, mut old_object) = (None, None);
        self.object(DEPTH, |r, key| match key {
            "uid" => once(&mut uid, r.str_field()?),
            "kind" => {
                let mut k = None;
                r.object(DEPTH + 1, |r, key| match key {
                    "kind" => once(&mut k, r.str_field()?),
                    _ => r.skip(DEPTH + 1),
                })?;
                once(
                    &mut kind,
                    GroupVersionKind {
                        kind: k.unwrap_or_default(),
                    },
                )
            }
            "resource" => {
                let (mut g, mut v, mut res) = (None, None, None);
                r.object(DEPTH + 1, |r, key| match key {
                    "group" => once(&mut g, r.str_field()?),
                    "version" => once(&mut v, r.str_field()?),
                    "resource" => once(&mut res, r.str_field()?),
                    _ => r.skip(DEPTH + 1),
                })?;
                once(
                    &mut resource,
                    GroupVersionResource {
                        group: g.unwrap_or_default(),
                        version: v.unwrap_or_default(),
                        resource: res.unwrap_or_default(),
                    },
                )
            }
            "subResource" => once(&mut sub_resource, r.opt_str()?),
            "name" => once(&mut name, r.opt_str()?),
            "namespace" => once(&mut namespace, r.opt_str()?),
            "operation" => once(&mut operation, r.str_field()?),
            "userInfo" => {
                let v = r.user_info()?;
                once(&mut user_info, v)
            }
            "object" => {
                let v = r.object_field(paths)?;
                once(&mut object, v)
            }
            "oldObject" => {
                let v = r.object_field(paths)?;
                once(&mut old_object, v)
            }
            _ => r.skip(DEPTH),
        })?;
        Some(AdmissionRequest {
            uid: uid?,
            kind: kind?,
            resource: resource?,
            sub_resource: sub_resource.flatten(),
            name: name.flatten(),
            namespace: namespace.flatten(),
            operation: operation?,
            user_info: user_info.unwrap_or_default(),
            object: object.flatten(),
            old_object: old_object.flatten(),
        })
    }

    fn user_info(&mut self) -> Option<UserInfo<'a>> {
        const DEPTH: usize = 3;
        let (mut username, mut groups) = (None, None);
        self.object(DEPTH, |r, key| match key {
            "username" => once(&mut username, r.opt_str()?),
            "groups" => {
                let v = if r.is_null()? {
                    None
                } else {
                    let mut list = Vec::new();
                    r.array(DEPTH + 1, |r| {
                        list.push(r.str_field()?);
                        Some(())
                    })?;
                    Some(list)
                };
                once(&mut groups, v)
            }
            _ => r.skip(DEPTH),
        })?;
        Some(UserInfo {
            username: username.flatten(),
            groups: groups.flatten(),
        })
    }

    /// The elements of an array (after whitespace), each handed to `element` with the
    /// reader at it.
    fn array(
        &mut self,
        depth: usize,
        mut element: impl FnMut(&mut Reader<'a>) -> Option<()>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            element(self)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `request.object` / `request.oldObject`: null is none, anything else is projected.
    fn object_field(&mut self, paths: &'static [Path]) -> Option<Option<ObjectField<'a>>> {
        if self.is_null()? {
            return Some(None);
        }
        let (paths, live) = project::start(paths);
        let at = project::Step {
            live,
            depth: 0,
            all: false,
        };
        self.projected(paths, at, 3)
            .map(|v| Some(ObjectField::Projected(v)))
    }

    fn charge(&mut self, cost: usize) -> Option<()> {
        self.left = self.left.checked_sub(cost)?;
        Some(())
    }

    /// A value projected on `paths` from `at`, as `project`'s projector builds it (the
    /// same charges, keys kept by the same rule, the last of duplicate keys kept).
    fn projected(&mut self, paths: &[Path], at: project::Step, depth: usize) -> Option<Value> {
        self.ws();
        match self.peek()? {
            b'{' => {
                self.charge(project::VALUE_COST)?;
                let mut out = Map::new();
                self.object(depth, |r, key| {
                    let Some(below) = at.below(paths, key) else {
                        return r.skip(depth);
                    };
                    r.charge(project::ENTRY_COST + key.len())?;
                    let value = r.projected(paths, below, depth + 1)?;
                    out.insert(key.to_string(), value);
                    Some(())
                })?;
                Some(Value::Object(out))
            }
            b'[' => {
                self.charge(project::VALUE_COST)?;
                let mut out = Vec::new();
                self.array(depth, |r| {
                    out.push(r.projected(paths, at, depth + 1)?);
                    Some(())
                })?;
                Some(Value::Array(out))
            }
            b'"' => {
                let s = self.plain_str()?;
                self.charge(project::VALUE_COST + project::STRING_OVERHEAD + s.len())?;
                Some(Value::String(s.to_string()))
            }
            b'n' => {
                self.literal(b"null")?;
                self.charge(project::VALUE_COST)?;
                Some(Value::Null)
            }
            b't' => {
                self.literal(b"true")?;
                self.charge(project::VALUE_COST)?;
                Some(Value::Bool(true))
            }
            b'f' => {
                self.literal(b"false")?;
                self.charge(project::VALUE_COST)?;
                Some(Value::Bool(false))
            }
            _ => {
                // Numbers are rare in read fields: serde_json gives them their exact value
                // (integer or float, its range rules).
                let text = self.number()?;
                self.charge(project::VALUE_COST)?;
                serde_json::from_str(text).ok()
            }
        }
    }
}

/// Record a struct field's value; a field given twice is refused (serde's derived decode
/// refuses it with "duplicate field").
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

#[cfg(test)]
mod tests;
