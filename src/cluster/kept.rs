//! What the caches of the shared watches keep of each object, and the caches themselves.
//! Decoded Kubernetes structs cost several times their JSON, so an object of an owned kind
//! is kept as the metadata the reconciler reads plus its spec and status as packed or
//! deflated JSON text ([`Kept`], [`KeptJson`]), and restored when a reconcile reads it;
//! [`ObjectCache`] holds them by namespace with relist bookkeeping.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::intern::{Interner, intern};
use super::managed_fields;
use super::watch::Key;
use crate::platform::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, TGW_KIND};

/// One value kept as its JSON text, packed or deflated as [`Kept`] bodies are, and decoded
/// when read: for parts of objects that are read once per reconcile but held for the life of
/// the process.
#[derive(Clone, PartialEq)]
pub struct KeptJson<T> {
    body: Body,
    kind: std::marker::PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned> KeptJson<T> {
    pub fn new(value: &T) -> Result<Self, serde_json::Error> {
        Ok(KeptJson::of_text(serde_json::to_string(value)?))
    }

    /// Keeps `text`, which must be `T`'s JSON (what `serde_json` writes for it).
    pub fn of_text(text: String) -> Self {
        KeptJson {
            body: Body::new(text),
            kind: std::marker::PhantomData,
        }
    }

    /// The value; `None` (logged) when the kept text does not decode, which only a bug can
    /// cause: the text is what `new` wrote.
    pub fn get(&self) -> Option<T> {
        match self.body.text() {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| tracing::warn!(error = %e, "a kept value does not decode"))
                .ok(),
            Err(e) => {
                tracing::warn!(error = %e, "a kept value does not unpack");
                None
            }
        }
    }
}

impl<T> std::fmt::Debug for KeptJson<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.body.fmt(f)
    }
}

/// An object as three parts, for the kinds generated with a spec and a status.
pub trait Split: Sized {
    type Spec: Serialize + DeserializeOwned;
    type Status: Serialize + DeserializeOwned;
    fn split(self) -> (ObjectMeta, Self::Spec, Option<Self::Status>);
    fn join(meta: ObjectMeta, spec: Self::Spec, status: Option<Self::Status>) -> Self;
}

/// An object of an owned kind as its cache keeps it: of the metadata only what the
/// reconciler reads (name, uid, generation, deletion, our managed-by label, TenantGateway
/// ownerReferences, and of managedFields only whether another manager owns fields we manage,
/// [`managed_fields::foreign_owned`]), and spec and status (as decoded, so unknown fields are gone) as compact
/// JSON text, deflated when large. Decoded structs cost several times their JSON: a Gateway's
/// 41 listeners held 62 KB, mostly inline optional fields and the spare capacity of every
/// small list that serde grows to four; the text is 17 KB of listeners that differ only in
/// their hostname, deflated about 1 KB, and a reconcile decodes only the objects of its own
/// namespace. The strings shared by an owner's objects (its name and uid) are interned.
///
/// Tens of thousands are kept (a Certificate per hostname), so an object is two allocations:
/// the `Arc` of this struct (72 bytes with its counts) and `data`, which holds the flags, the
/// name and the body together; what few objects have (a uid not in UUID form, another
/// managed-by value, several owners, a deletion) is boxed in `rare`.
#[derive(Clone, PartialEq)]
pub struct Kept<K: Split> {
    /// The flags (`UID_*`, `LABEL_*`, [`DEFLATED`]), the name's length (LEB128) and the name,
    /// then `[spec, status]`: packed text ([`pack`], the name itself packed too), or when
    /// [`DEFLATED`] the text's length (4 bytes, little-endian) and the deflated text.
    data: Box<[u8]>,
    /// The uid's bytes (big-endian) when it is a UUID in the API server's form ([`UID_UUID`]),
    /// else zeros.
    uid: [u8; 16],
    /// [`NO_GENERATION`] when absent: an `Option` would take 16 bytes for 8.
    generation: i64,
    rare: Option<Box<Rare>>,
    /// The TenantGateway ownerReference, when there is exactly one (shared by the owner's
    /// objects: its 40 Certificates hold one copy); several are in `rare`.
    owner: Option<Arc<Owner>>,
    kind: std::marker::PhantomData<fn() -> K>,
}

/// `Kept::data`'s first byte: where the uid is, ...
const UID_MASK: u8 = 0b11;
const UID_UUID: u8 = 1;
const UID_TEXT: u8 = 2;
/// ... the managed-by label, ...
const LABEL_MASK: u8 = 0b1100;
const LABEL_OURS: u8 = 0b0100;
const LABEL_OTHER: u8 = 0b1000;
/// ... and whether the body is deflated.
const DEFLATED: u8 = 0b1_0000;

/// What few objects carry, and only for a while (a deletion in progress, fields another
/// manager owns until the reconciler takes them over, SPEC §3.8) or never in the reconciler's
/// own objects (a uid not in UUID form, another managed-by value, several TenantGateway
/// owners).
#[derive(Debug, Clone, PartialEq, Default)]
struct Rare {
    deletion: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    foreign_owned: bool,
    /// [`UID_TEXT`].
    uid: Option<Box<str>>,
    /// [`LABEL_OTHER`].
    label: Option<Box<str>>,
    /// Two or more TenantGateway ownerReferences, in order.
    owners: Box<[Arc<Owner>]>,
}

/// `metadata.generation` absent (the API server's start at 1).
const NO_GENERATION: i64 = i64::MIN;

/// Bodies from this size on are kept deflated: below it deflate saves little.
pub const DEFLATE_FROM: usize = 512;

/// `[spec, status]` as JSON text with its most common fragments packed, or deflated with the
/// text's length.
#[derive(Clone, PartialEq)]
enum Body {
    Text(Packed),
    Deflated { len: u32, bytes: Box<[u8]> },
}

/// The fragments every kept Certificate, Issuer and redirect route spells out (keys of the
/// cert-manager and Gateway API types as they serialise), each packed into two bytes: `0xFF`,
/// which never occurs in UTF-8 text, and its index here. A ready Certificate of ours is its name,
/// its hostname, its Issuer's name and a few marks.
const FRAGMENTS: &[&str] = &[
    // A Certificate of ours, whole spans first: `[{"secretName":"<name>","dnsNames":["<host>"],
    // "issuerRef":{…,"name":"<issuer>"}}, <status>]`, and cert-manager's ready status as kept.
    "[{\"secretName\":\"",
    "\",\"dnsNames\":[\"",
    "\"],\"issuerRef\":{\"group\":\"cert-manager.io\",\"kind\":\"Issuer\",\"name\":\"",
    "{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"Ready\",\"message\":\"Certificate is up to date and has not expired\"}]}]",
    "\"dnsNames\":[\"",
    "\"issuerRef\":{",
    "\"group\":\"cert-manager.io\"",
    "\"kind\":\"Issuer\"",
    "\"kind\":\"ClusterIssuer\"",
    "\"secretName\":\"",
    "\"name\":\"",
    "\"conditions\":[{",
    "\"lastTransitionTime\":\"",
    "\"message\":\"",
    "\"observedGeneration\":",
    "\"reason\":\"",
    "\"status\":\"True\"",
    "\"status\":\"False\"",
    "\"type\":\"Ready\"",
    "\"notAfter\":\"",
    "\"notBefore\":\"",
    "\"renewalTime\":\"",
    "\"revision\":",
    "\"group\":\"gateway.networking.k8s.io\"",
    "\"kind\":\"Gateway\"",
    "\"parentRefs\":[{",
    "\"sectionName\":\"",
    "\"namespace\":\"",
    // Our route status conditions (`reconcile::status`).
    "\"type\":\"Accepted\"",
    "\"reason\":\"Accepted\"",
    "\"message\":\"hostname(s) \\\"",
    "\\\" served by TenantGateway ",
    // cert-manager's message for a ready Certificate.
    "Certificate is up to date and has not expired",
];

/// The bytes a fragment starts with: a packed text is scanned for fragments only there.
const FRAGMENT_STARTS: [bool; 256] = {
    let mut starts = [false; 256];
    let mut i = 0;
    while i < FRAGMENTS.len() {
        starts[FRAGMENTS[i].as_bytes()[0] as usize] = true;
        i += 1;
    }
    starts
};

const PACK_MARK: u8 = 0xFF;

/// JSON text with [`FRAGMENTS`] packed: exact, and as comparable as the text (packing is a
/// function of the text).
#[derive(Clone, PartialEq)]
struct Packed(Box<[u8]>);

impl Packed {
    fn new(text: &str) -> Packed {
        let mut out = Vec::with_capacity(text.len());
        pack(text, "", &mut out);
        Packed(out.into_boxed_slice())
    }

    fn text(&self) -> Result<String, String> {
        unpack(&self.0, "")
    }
}

/// The fragment index that stands for the object's own name (a Certificate's secretName is
/// its name): no fragment has it.
const NAME_MARK: u8 = 0xFE;
const _: () = assert!(FRAGMENTS.len() < NAME_MARK as usize);

/// Appends `text` to `out` with [`FRAGMENTS`] packed, and `name` (when longer than its
/// mark) too: exact ([`unpack`] with the same name), and a function of the text and the
/// name, so packed texts of one name are equal exactly when the texts are.
fn pack(text: &str, name: &str, out: &mut Vec<u8>) {
    let b = text.as_bytes();
    let name = name.as_bytes();
    let name = (name.len() > 2).then_some(name);
    let mut i = 0;
    while i < b.len() {
        let hit = if FRAGMENT_STARTS[usize::from(b[i])] {
            FRAGMENTS
                .iter()
                .position(|f| b[i..].starts_with(f.as_bytes()))
        } else {
            None
        };
        match hit.and_then(|k| u8::try_from(k).ok().map(|k8| (k, k8))) {
            Some((k, k8)) => {
                out.extend([PACK_MARK, k8]);
                i += FRAGMENTS[k].len();
            }
            None => match name {
                Some(n) if b[i..].starts_with(n) => {
                    out.extend([PACK_MARK, NAME_MARK]);
                    i += n.len();
                }
                _ => {
                    out.push(b[i]);
                    i += 1;
                }
            },
        }
    }
}

/// The text [`pack`] packed with `name`.
fn unpack(packed: &[u8], name: &str) -> Result<String, String> {
    let mut out = Vec::with_capacity(packed.len() * 2);
    let mut it = packed.iter();
    while let Some(&c) = it.next() {
        if c == PACK_MARK {
            let f = match it.next() {
                Some(&NAME_MARK) => name,
                k => k
                    .and_then(|&k| FRAGMENTS.get(usize::from(k)))
                    .ok_or("a packed body names no fragment")?,
            };
            out.extend_from_slice(f.as_bytes());
        } else {
            out.push(c);
        }
    }
    String::from_utf8(out).map_err(|e| e.to_string())
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.text())
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Text(t) => write!(f, "{}", t.text().unwrap_or_default()),
            Body::Deflated { len, bytes } => write!(f, "<{len} bytes deflated to {}>", bytes.len()),
        }
    }
}

impl Body {
    fn new(text: String) -> Body {
        match u32::try_from(text.len()) {
            Ok(len) if text.len() >= DEFLATE_FROM => {
                let bytes = miniz_oxide::deflate::compress_to_vec(text.as_bytes(), 6);
                if bytes.len() < text.len() {
                    return Body::Deflated {
                        len,
                        bytes: bytes.into_boxed_slice(),
                    };
                }
                Body::Text(Packed::new(&text))
            }
            _ => Body::Text(Packed::new(&text)),
        }
    }

    fn text(&self) -> Result<Cow<'_, str>, String> {
        match self {
            Body::Text(t) => t.text().map(Cow::Owned),
            Body::Deflated { len, bytes } => {
                let limit = usize::try_from(*len).map_err(|e| e.to_string())?;
                let raw = miniz_oxide::inflate::decompress_to_vec_with_limit(bytes, limit)
                    .map_err(|e| format!("does not inflate: {e}"))?;
                String::from_utf8(raw)
                    .map(Cow::Owned)
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// A uid: 16 bytes when it is a UUID in the API server's form (lowercase hex, 8-4-4-4-12),
/// else the text.
#[derive(Clone, PartialEq, Eq)]
enum Uid {
    /// Big-endian bytes, not a `u128`: its 16-byte alignment would pad every `Kept`.
    Uuid([u8; 16]),
    Text(Box<str>),
}

impl std::fmt::Debug for Uid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_text())
    }
}

impl Uid {
    fn new(s: String) -> Uid {
        Uid::parse(&s).map_or_else(
            || Uid::Text(s.into_boxed_str()),
            |v| Uid::Uuid(v.to_be_bytes()),
        )
    }

    fn parse(s: &str) -> Option<u128> {
        let b = s.as_bytes();
        if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
            return None;
        }
        let hex: String = s.chars().filter(|c| *c != '-').collect();
        if hex.len() != 32 || !hex.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        u128::from_str_radix(&hex, 16).ok()
    }

    fn to_text(&self) -> String {
        match self {
            Uid::Text(t) => t.to_string(),
            Uid::Uuid(v) => {
                let h = format!("{:032x}", u128::from_be_bytes(*v));
                format!(
                    "{}-{}-{}-{}-{}",
                    &h[0..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..32]
                )
            }
        }
    }
}

/// A TenantGateway ownerReference (the kind is known).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Owner {
    api_version: Arc<str>,
    name: Arc<str>,
    uid: Arc<str>,
    controller: Option<bool>,
    block_owner_deletion: Option<bool>,
}

impl Owner {
    fn shared(r: &OwnerReference) -> Arc<Owner> {
        static OWNERS: Interner<Owner> = Interner::new();
        let o = Owner {
            api_version: intern(&r.api_version),
            name: intern(&r.name),
            uid: intern(&r.uid),
            controller: r.controller,
            block_owner_deletion: r.block_owner_deletion,
        };
        OWNERS.shared(&o, |o| Arc::new(o.clone()))
    }

    fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.to_string(),
            kind: TGW_KIND.to_string(),
            name: self.name.to_string(),
            uid: self.uid.to_string(),
            controller: self.controller,
            block_owner_deletion: self.block_owner_deletion,
        }
    }
}

impl<K: Split> Kept<K> {
    /// `None` when spec and status do not encode (cannot happen for decoded values; the
    /// object is then treated as not seen, and logged).
    pub fn keep(k: K) -> Option<Self> {
        let (meta, spec, status) = k.split();
        let name = meta.name.unwrap_or_default();
        let text = match serde_json::to_string(&(spec, status)) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(name = %name, error = %e, "cannot keep a watched object; skipped");
                return None;
            }
        };
        let mut rare = Rare {
            deletion: meta.deletion_timestamp,
            foreign_owned: managed_fields::foreign_owned(
                meta.managed_fields.as_deref().unwrap_or_default(),
            ),
            ..Rare::default()
        };
        let mut flags = 0;
        let mut uid = [0; 16];
        match meta.uid.map(Uid::new) {
            None => {}
            Some(Uid::Uuid(v)) => {
                flags |= UID_UUID;
                uid = v;
            }
            Some(Uid::Text(t)) => {
                flags |= UID_TEXT;
                rare.uid = Some(t);
            }
        }
        match meta.labels.and_then(|mut l| l.remove(MANAGED_BY_LABEL)) {
            None => {}
            Some(v) if v == MANAGED_BY_VALUE => flags |= LABEL_OURS,
            Some(v) => {
                flags |= LABEL_OTHER;
                rare.label = Some(v.into_boxed_str());
            }
        }
        let mut owners: Vec<Arc<Owner>> = meta
            .owner_references
            .unwrap_or_default()
            .iter()
            .filter(|r| r.kind == TGW_KIND)
            .map(Owner::shared)
            .collect();
        let owner = if owners.len() == 1 {
            owners.pop()
        } else {
            None
        };
        rare.owners = owners.into_boxed_slice();
        let deflated = match u32::try_from(text.len()) {
            Ok(len) if text.len() >= DEFLATE_FROM => {
                let bytes = miniz_oxide::deflate::compress_to_vec(text.as_bytes(), 6);
                (bytes.len() < text.len()).then_some((len, bytes))
            }
            _ => None,
        };
        let mut data = Vec::with_capacity(name.len() + text.len() + 8);
        data.push(flags | if deflated.is_some() { DEFLATED } else { 0 });
        let mut n = name.len();
        loop {
            // LEB128: seven bits a byte, the high bit set on all but the last.
            let low = (n & 0x7F) as u8;
            n >>= 7;
            if n == 0 {
                data.push(low);
                break;
            }
            data.push(low | 0x80);
        }
        data.extend_from_slice(name.as_bytes());
        match deflated {
            Some((len, bytes)) => {
                data.extend_from_slice(&len.to_le_bytes());
                data.extend_from_slice(&bytes);
            }
            None => pack(&text, &name, &mut data),
        }
        Some(Kept {
            data: data.into_boxed_slice(),
            uid,
            generation: meta.generation.unwrap_or(NO_GENERATION),
            rare: (rare != Rare::default()).then(|| Box::new(rare)),
            owner,
            kind: std::marker::PhantomData,
        })
    }

    fn flags(&self) -> u8 {
        self.data.first().copied().unwrap_or(0)
    }

    /// The name, and where the body starts in `data`.
    fn name_and_body(&self) -> (&str, usize) {
        let (mut len, mut shift, mut at) = (0usize, 0u32, 1usize);
        while let Some(&b) = self.data.get(at) {
            at += 1;
            len |= usize::from(b & 0x7F).checked_shl(shift).unwrap_or(0);
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        let end = at.saturating_add(len).min(self.data.len());
        // `keep` wrote the name's UTF-8 there; only a bug can leave it empty.
        let name = std::str::from_utf8(&self.data[at.min(end)..end]).unwrap_or_default();
        (name, end)
    }

    /// `[spec, status]` as JSON text.
    fn body_text(&self) -> Result<String, String> {
        let (name, at) = self.name_and_body();
        let body = &self.data[at..];
        if self.flags() & DEFLATED == 0 {
            return unpack(body, name);
        }
        let (len, bytes) = body
            .split_at_checked(4)
            .ok_or("a deflated body without length")?;
        let mut len4 = [0; 4];
        len4.copy_from_slice(len);
        let limit = usize::try_from(u32::from_le_bytes(len4)).map_err(|e| e.to_string())?;
        let raw = miniz_oxide::inflate::decompress_to_vec_with_limit(bytes, limit)
            .map_err(|e| format!("does not inflate: {e}"))?;
        String::from_utf8(raw).map_err(|e| e.to_string())
    }

    /// The TenantGateway ownerReferences, in order.
    fn owners(&self) -> &[Arc<Owner>] {
        match (&self.owner, &self.rare) {
            (Some(o), _) => std::slice::from_ref(o),
            (None, Some(r)) => &r.owners,
            (None, None) => &[],
        }
    }

    fn uid_text(&self) -> Option<String> {
        match self.flags() & UID_MASK {
            UID_UUID => Some(Uid::Uuid(self.uid).to_text()),
            UID_TEXT => self
                .rare
                .as_ref()
                .and_then(|r| r.uid.as_deref())
                .map(str::to_string),
            _ => None,
        }
    }

    fn label(&self) -> Option<&str> {
        match self.flags() & LABEL_MASK {
            LABEL_OURS => Some(MANAGED_BY_VALUE),
            LABEL_OTHER => self.rare.as_ref().and_then(|r| r.label.as_deref()),
            _ => None,
        }
    }

    /// The object with what was kept (`None`, logged, if the text does not decode back).
    pub fn restore(&self) -> Option<K> {
        let parts = self
            .body_text()
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()));
        let (spec, status) = match parts {
            Ok(parts) => parts,
            Err(e) => {
                tracing::warn!(name = %self.name(), error = %e, "a kept object does not decode");
                return None;
            }
        };
        let owners = self.owners();
        let meta = ObjectMeta {
            name: Some(self.name().to_string()),
            uid: self.uid_text(),
            generation: (self.generation != NO_GENERATION).then_some(self.generation),
            deletion_timestamp: self.rare.as_ref().and_then(|r| r.deletion.clone()),
            managed_fields: self
                .rare
                .as_ref()
                .is_some_and(|r| r.foreign_owned)
                .then(|| vec![managed_fields::stand_in()]),
            labels: self
                .label()
                .map(|v| BTreeMap::from([(MANAGED_BY_LABEL.to_string(), v.to_string())])),
            owner_references: (!owners.is_empty())
                .then(|| owners.iter().map(|o| o.reference()).collect()),
            ..ObjectMeta::default()
        };
        Some(K::join(meta, spec, status))
    }
}

impl<K: Split> std::fmt::Debug for Kept<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("name", &self.name())
            .field("uid", &self.uid_text())
            .field("generation", &self.generation)
            .field("label", &self.label())
            .field("owners", &self.owners())
            .field("rare", &self.rare)
            .field("body", &self.body_text())
            .finish()
    }
}

/// What a cache orders a namespace's objects by.
pub trait Named {
    fn name(&self) -> &str;
}

impl<K: Split> Named for Kept<K> {
    fn name(&self) -> &str {
        self.name_and_body().0
    }
}

/// Decoded objects of one kind by namespace, with relist bookkeeping: after a relist the
/// objects not seen again are dropped.
pub struct ObjectCache<T> {
    inner: RwLock<CacheInner<T>>,
}

/// A namespace's objects are one list sorted by name, not a map keyed by a copy of the name:
/// a few dozen objects per namespace, and a B-tree's half-empty nodes of 384 bytes were the
/// allocator size class left most fragmented after the initial lists (jemalloc's bin
/// statistics of a restart against 12,600 owned objects: 26 % of those pages in use).
struct CacheInner<T> {
    by_ns: HashMap<Box<str>, Vec<Arc<T>>>,
    relist: Option<HashSet<Key>>,
}

impl<T> Default for ObjectCache<T> {
    fn default() -> Self {
        ObjectCache {
            inner: RwLock::new(CacheInner {
                by_ns: HashMap::new(),
                relist: None,
            }),
        }
    }
}

impl<T: Named> ObjectCache<T> {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CacheInner<T>> {
        // A panic while holding the lock leaves plain maps behind: still usable.
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, CacheInner<T>> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Insert or replace; `None` (did not decode) removes any previous version. A value is
    /// filed under its own name, which is `key`'s (both come from the object's metadata).
    pub fn apply(&self, key: Key, value: Option<T>) {
        let mut g = self.write();
        if let Some(seen) = g.relist.as_mut() {
            seen.insert(key.clone());
        }
        match value {
            Some(v) => {
                let list = g.by_ns.entry(key.0.into_boxed_str()).or_default();
                match position(list, v.name()) {
                    Ok(i) => list[i] = Arc::new(v),
                    Err(i) => {
                        reserve_one(list);
                        list.insert(i, Arc::new(v))
                    }
                }
            }
            None => remove(&mut g.by_ns, &key),
        }
    }

    pub fn delete(&self, key: &Key) {
        remove(&mut self.write().by_ns, key);
    }

    pub fn relist_started(&self) {
        self.write().relist = Some(HashSet::new());
    }

    /// Drop what the relist did not see; returns the dropped keys.
    pub fn relist_done(&self) -> Vec<Key> {
        let mut g = self.write();
        let Some(seen) = g.relist.take() else {
            return Vec::new();
        };
        let gone: Vec<Key> = g
            .by_ns
            .iter()
            .flat_map(|(ns, list)| {
                list.iter()
                    .map(move |o| (ns.to_string(), o.name().to_string()))
            })
            .filter(|k| !seen.contains(k))
            .collect();
        for k in &gone {
            remove(&mut g.by_ns, k);
        }
        for list in g.by_ns.values_mut() {
            list.shrink_to_fit();
        }
        gone
    }

    /// A namespace's objects in name order.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<T>> {
        self.read()
            .by_ns
            .get(namespace)
            .cloned()
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.read().by_ns.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Room for one more in a sorted list that grows one insert at a time: an eighth more when
/// full, not twice as much (a namespace's 40 Certificates took 64 slots, a third of them
/// empty); the insert moves the list's tail anyway, so the copies this adds are of its order.
pub(crate) fn reserve_one<T>(list: &mut Vec<T>) {
    if list.len() == list.capacity() {
        list.reserve_exact(list.len() / 8 + 1);
    }
}

/// Where `name` is in a namespace's sorted list (`Err`: where it would go).
fn position<T: Named>(list: &[Arc<T>], name: &str) -> Result<usize, usize> {
    list.binary_search_by(|o| o.name().cmp(name))
}

fn remove<T: Named>(by_ns: &mut HashMap<Box<str>, Vec<Arc<T>>>, key: &Key) {
    if let Some(list) = by_ns.get_mut(key.0.as_str()) {
        if let Ok(i) = position(list, &key.1) {
            list.remove(i);
        }
        if list.is_empty() {
            by_ns.remove(key.0.as_str());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(ns: &str, n: &str) -> Key {
        (ns.to_string(), n.to_string())
    }

    /// A cached value: its name and a payload.
    #[derive(Debug, PartialEq)]
    struct V(&'static str, u32);

    impl Named for V {
        fn name(&self) -> &str {
            self.0
        }
    }

    fn put(c: &ObjectCache<V>, ns: &str, name: &'static str, n: u32) {
        c.apply(k(ns, name), Some(V(name, n)));
    }

    fn payloads(c: &ObjectCache<V>, ns: &str) -> Vec<u32> {
        c.in_namespace(ns).iter().map(|v| v.1).collect()
    }

    #[test]
    fn relist_drops_what_was_not_seen_again() {
        let c: ObjectCache<V> = ObjectCache::default();
        put(&c, "a", "x", 1);
        put(&c, "a", "y", 2);
        put(&c, "b", "z", 3);
        c.relist_started();
        put(&c, "a", "x", 10);
        let gone = c.relist_done();
        assert_eq!(gone.len(), 2);
        assert_eq!(payloads(&c, "a"), [10]);
        assert!(c.in_namespace("b").is_empty());
    }

    #[test]
    fn a_namespace_lists_in_name_order_whatever_the_arrival_order() {
        let c: ObjectCache<V> = ObjectCache::default();
        for (name, n) in [("m", 2), ("z", 3), ("a", 1), ("q", 9)] {
            put(&c, "ns", name, n);
        }
        put(&c, "ns", "q", 4);
        c.delete(&k("ns", "z"));
        c.delete(&k("ns", "absent"));
        c.delete(&k("other", "m"));
        assert_eq!(payloads(&c, "ns"), [1, 2, 4], "a, m, q: replaced in place");
        assert_eq!(c.len(), 3);
        for name in ["a", "m", "q"] {
            c.delete(&k("ns", name));
        }
        assert!(c.is_empty());
    }

    /// The caches hold one `Arc<Kept>` per owned object (20,000 Certificates for 20,000
    /// routes): 16 bytes of counts and the object must stay within jemalloc's 80-byte size
    /// class.
    #[test]
    fn kept_fits_its_size_class() {
        let arc_inner = 2 * std::mem::size_of::<usize>()
            + std::mem::size_of::<Kept<crate::reconcile::certmanager::Certificate>>();
        assert!(arc_inner <= 80, "Arc<Kept> takes {arc_inner} bytes");
    }

    #[test]
    fn a_list_grown_one_insert_at_a_time_stays_near_its_length() {
        let mut list: Vec<u32> = Vec::new();
        for n in 0..1000u32 {
            reserve_one(&mut list);
            let cap = list.capacity();
            list.insert(list.len() / 2, n);
            assert_eq!(list.capacity(), cap, "reserved before the insert");
            assert!(
                cap <= list.len() + list.len() / 8 + 1,
                "{} for {}",
                cap,
                list.len()
            );
        }
    }

    #[test]
    fn undecodable_update_removes_the_old_version() {
        let c: ObjectCache<V> = ObjectCache::default();
        put(&c, "a", "x", 1);
        c.apply(k("a", "x"), None);
        assert!(c.is_empty());
    }

    #[test]
    fn packing_scans_only_where_a_fragment_can_start() {
        // The scan without the first-byte filter, for reference.
        let full = |text: &str| {
            let b = text.as_bytes();
            let (mut out, mut i) = (Vec::new(), 0);
            while i < b.len() {
                match FRAGMENTS
                    .iter()
                    .position(|f| b[i..].starts_with(f.as_bytes()))
                {
                    Some(k) => {
                        out.extend([PACK_MARK, u8::try_from(k).expect("few fragments")]);
                        i += FRAGMENTS[k].len();
                    }
                    None => {
                        out.push(b[i]);
                        i += 1;
                    }
                }
            }
            out
        };
        let every: String = FRAGMENTS.iter().map(|f| format!("x{f}y")).collect();
        let ready = r#"[{"dnsNames":["a.example.org"],"issuerRef":{"group":"cert-manager.io","kind":"Issuer","name":"gw"},"secretName":"gw-a-tls"},{"conditions":[{"message":"Certificate is up to date and has not expired","reason":"Ready","status":"True","type":"Ready"}]}]"#;
        for t in [
            every.as_str(),
            ready,
            "Certificate is up to date",
            "CCertificate",
        ] {
            assert_eq!(&*Packed::new(t).0, &full(t)[..], "{t:?}");
            assert_eq!(Packed::new(t).text().as_deref(), Ok(t), "{t:?}");
        }
        assert!(
            Packed::new(ready).0.len() < 100,
            "a ready Certificate packs its message: {} bytes",
            Packed::new(ready).0.len()
        );
    }

    #[test]
    fn packed_text_round_trips_exactly() {
        let cert = r#"[{"dnsNames":["h07.b0000.example.org"],"issuerRef":{"group":"cert-manager.io","kind":"Issuer","name":"gw-gateway"},"secretName":"gw-h07-tls"},null]"#;
        let p = Packed::new(cert);
        assert_eq!(p.text().as_deref(), Ok(cert));
        assert!(
            p.0.len() * 2 < cert.len() + 10,
            "{} of {}",
            p.0.len(),
            cert.len()
        );
        for t in [
            "",
            "plain",
            "\"name\":\"",
            "\"name\":\"\"name\":\"x\"kind\":\"Issuer\"",
            "\"nam\"name\":\"é\u{1F600}\"dnsNames\":[\"",
            "\"dnsNames\":[",
        ] {
            assert_eq!(Packed::new(t).text().as_deref(), Ok(t), "{t:?}");
        }
        assert_ne!(Packed::new("\"name\":\"a"), Packed::new("\"name\":\"b"));
        assert!(
            Packed(Box::new([b'a', PACK_MARK])).text().is_err(),
            "mark at the end"
        );
        assert!(
            Packed(Box::new([PACK_MARK, 250])).text().is_err(),
            "unknown fragment"
        );
    }

    #[test]
    fn objects_of_one_owner_share_its_reference_and_restore_it_whole() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
        let owner = OwnerReference {
            api_version: "gateway.cozystack.io/v1alpha1".into(),
            kind: TGW_KIND.into(),
            name: "gw-share-test".into(),
            uid: "e44238f1-8a9c-44d9-8e77-fe1ecbe4c8c5".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let obj = |name: &str, deleted: bool| Obj {
            meta: ObjectMeta {
                name: Some(name.into()),
                uid: Some("943ab560-e10d-4bd6-b83d-7e423b7a074b".into()),
                owner_references: Some(vec![owner.clone()]),
                deletion_timestamp: deleted
                    .then(|| Time("2026-12-01T11:32:29Z".parse().expect("a timestamp"))),
                ..ObjectMeta::default()
            },
            spec: 1,
            status: None,
        };
        let a = Kept::keep(obj("a", false)).expect("kept");
        let b = Kept::keep(obj("b", true)).expect("kept");
        assert!(
            Arc::ptr_eq(&a.owners()[0], &b.owners()[0]),
            "one copy per owner"
        );
        assert_eq!(a.restore(), Some(obj("a", false)));
        assert_eq!(b.restore(), Some(obj("b", true)), "deletion time kept");
        let other = OwnerReference {
            controller: Some(false),
            ..owner.clone()
        };
        let mut c = obj("c", false);
        c.meta.owner_references = Some(vec![other.clone()]);
        let c = Kept::keep(c).expect("kept");
        assert!(!Arc::ptr_eq(&a.owners()[0], &c.owners()[0]));
        assert_eq!(
            c.restore().and_then(|o| o.meta.owner_references),
            Some(vec![other]),
            "a reference differing in one field is its own value"
        );
    }

    #[derive(Debug, Clone, PartialEq)]
    struct Obj {
        meta: ObjectMeta,
        spec: u8,
        status: Option<u8>,
    }

    impl Split for Obj {
        type Spec = u8;
        type Status = u8;
        fn split(self) -> (ObjectMeta, u8, Option<u8>) {
            (self.meta, self.spec, self.status)
        }
        fn join(meta: ObjectMeta, spec: u8, status: Option<u8>) -> Self {
            Obj { meta, spec, status }
        }
    }

    #[test]
    fn kept_objects_restore_what_the_diff_reads() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let owner = |kind: &str| OwnerReference {
            api_version: "v".into(),
            kind: kind.into(),
            name: "gw".into(),
            uid: "1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let meta = ObjectMeta {
            name: Some("c".into()),
            uid: Some("u".into()),
            generation: Some(3),
            resource_version: Some("77".into()),
            labels: Some(BTreeMap::from([
                (MANAGED_BY_LABEL.to_string(), "yes".to_string()),
                ("other".to_string(), "x".to_string()),
            ])),
            annotations: Some(BTreeMap::from([("a".to_string(), "b".to_string())])),
            owner_references: Some(vec![owner("ConfigMap"), owner(TGW_KIND)]),
            ..ObjectMeta::default()
        };
        let o = Kept::keep(Obj {
            meta,
            spec: 5,
            status: Some(6),
        })
        .and_then(|k| k.restore())
        .expect("kept and restored");
        let m = &o.meta;
        assert_eq!(m.name.as_deref(), Some("c"));
        assert_eq!(m.uid.as_deref(), Some("u"));
        assert_eq!(m.generation, Some(3));
        assert_eq!(m.resource_version, None);
        assert_eq!(m.annotations, None);
        assert_eq!(
            m.labels,
            Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_string(),
                "yes".to_string()
            )]))
        );
        assert_eq!(m.owner_references, Some(vec![owner(TGW_KIND)]));
        assert_eq!((o.spec, o.status), (5, Some(6)));
        let bare = Obj {
            meta: ObjectMeta {
                name: Some("b".into()),
                ..ObjectMeta::default()
            },
            spec: 1,
            status: None,
        };
        assert_eq!(
            Kept::keep(bare.clone()).and_then(|k| k.restore()),
            Some(bare),
            "nothing added"
        );
    }

    /// Of managedFields the projection keeps one flag, computed when the object is kept: an
    /// adopted object (our apply entry only, or other managers holding only what we do not
    /// manage) costs nothing, and one still holding another manager's fields restores as
    /// such for the diff, deleted or not.
    #[test]
    fn of_managed_fields_only_foreign_ownership_is_kept() {
        use crate::platform::FIELD_MANAGER;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
        let entry = |manager: &str, op: &str, f: serde_json::Value| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(op.into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(f)),
            ..Default::default()
        };
        let obj = |entries: Vec<ManagedFieldsEntry>, deleted: bool| Obj {
            meta: ObjectMeta {
                name: Some("c".into()),
                managed_fields: Some(entries),
                deletion_timestamp: deleted
                    .then(|| Time("2026-12-01T11:32:29Z".parse().expect("a timestamp"))),
                ..ObjectMeta::default()
            },
            spec: 1,
            status: None,
        };
        let ours = entry(
            FIELD_MANAGER,
            "Apply",
            serde_json::json!({"f:spec": {"f:a": {}}}),
        );
        let label = entry(
            "kubectl-label",
            "Update",
            serde_json::json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
        );
        let platform = entry(
            "cozystack-controller",
            "Update",
            serde_json::json!({"f:spec": {"f:b": {}}}),
        );
        let adopted = Kept::keep(obj(vec![ours.clone(), label.clone()], false)).expect("kept");
        assert!(
            adopted.rare.is_none(),
            "nothing boxed for an adopted object"
        );
        assert_eq!(adopted.restore().map(|o| o.meta.managed_fields), Some(None));
        for deleted in [false, true] {
            let kept = Kept::keep(obj(
                vec![ours.clone(), label.clone(), platform.clone()],
                deleted,
            ))
            .expect("kept");
            let back = kept.restore().expect("restored");
            let entries = back.meta.managed_fields.expect("a stand-in");
            assert_eq!(entries.len(), 1);
            assert!(managed_fields::foreign_owned(&entries));
            assert_eq!(back.meta.deletion_timestamp.is_some(), deleted);
            assert_ne!(Kept::keep(obj(vec![ours.clone()], deleted)), Some(kept));
        }
    }

    #[derive(Debug, Clone, PartialEq)]
    struct Big {
        meta: ObjectMeta,
        spec: Vec<String>,
        status: Option<Vec<String>>,
    }

    impl Split for Big {
        type Spec = Vec<String>;
        type Status = Vec<String>;
        fn split(self) -> (ObjectMeta, Vec<String>, Option<Vec<String>>) {
            (self.meta, self.spec, self.status)
        }
        fn join(meta: ObjectMeta, spec: Vec<String>, status: Option<Vec<String>>) -> Self {
            Big { meta, spec, status }
        }
    }

    fn big(n: usize, odd: &str) -> Big {
        let mut spec: Vec<String> = (0..n)
            .map(|i| format!("h{i:03}.tenant.example.org"))
            .collect();
        spec.push(odd.to_string());
        Big {
            meta: ObjectMeta {
                name: Some("gw".into()),
                ..ObjectMeta::default()
            },
            spec,
            status: Some(vec!["Accepted".into()]),
        }
    }

    #[test]
    fn large_bodies_are_deflated_and_restore_exactly() {
        let b = big(200, "x");
        let kept = Kept::keep(b.clone()).expect("kept");
        let text_len = serde_json::to_string(&(&b.spec, &b.status))
            .expect("encodes")
            .len();
        assert!(
            kept.flags() & DEFLATED != 0,
            "a {text_len}-byte body is kept deflated"
        );
        let body = &kept.data[kept.name_and_body().1..];
        assert_eq!(body[..4], (text_len as u32).to_le_bytes());
        assert!(body.len() * 4 < text_len, "{} of {text_len}", body.len());
        assert_eq!(kept.restore(), Some(b.clone()));
        // Equal objects keep equal; one changed entry does not.
        assert_eq!(Kept::keep(b.clone()), Some(kept.clone()));
        let other = Kept::keep(big(200, "y")).expect("kept");
        assert_ne!(other, kept);
        assert_eq!(other.restore(), Some(big(200, "y")));
        // Small bodies stay text.
        let small = Kept::keep(big(1, "x")).expect("kept");
        assert_eq!(small.flags() & DEFLATED, 0, "{small:?}");
        assert_eq!(small.restore(), Some(big(1, "x")));
    }

    /// The reconciler's diff through the cache: rendered objects kept and restored compare
    /// equal to what it renders (a resync writes nothing), and one edited listener of a
    /// deflated Gateway is still found and put back.
    #[test]
    fn kept_objects_diff_like_the_objects_themselves() {
        use crate::reconcile::Options;
        use crate::reconcile::diff::{self, Object, Write};
        use crate::reconcile::inputs::Observed;
        use crate::reconcile::render::{ListenerInputs, render};
        use crate::reconcile::testing;

        fn through<K: Split + Clone>(o: &K) -> K {
            Kept::keep(o.clone())
                .and_then(|k| k.restore())
                .expect("kept and restored")
        }
        let w = testing::world();
        let s = w.tgw.settings(&Default::default()).expect("valid");
        let li = ListenerInputs {
            port443_namespaces: ["tenant-alice".to_string()].into(),
            hosts: (0..40).map(|i| format!("h{i}.alice.example.org")).collect(),
            child_apexes: Default::default(),
            sticky: Default::default(),
        };
        let d = render(&w.tgw, &s, &li, &Options::default());
        assert!(
            Kept::keep(d.gateway.clone()).is_some_and(|k| k.flags() & DEFLATED != 0),
            "a Gateway with 41 listeners is kept deflated"
        );
        let observed = Observed {
            gateways: vec![through(&d.gateway)],
            issuers: d.issuer.iter().map(through).collect(),
            certificates: d.certificates.iter().map(through).collect(),
            http_routes: vec![through(&d.redirect)],
        };
        assert_eq!(observed.certificates.len(), 40);
        let (writes, refused) = diff::objects(&d, &observed, &w.tgw);
        assert!(
            writes.is_empty() && refused.is_empty(),
            "{writes:?} {refused:?}"
        );

        let mut edited = d.gateway.clone();
        edited.spec.listeners[7].port = 8443;
        let changed = Observed {
            gateways: vec![through(&edited)],
            ..observed.clone()
        };
        let (writes, _) = diff::objects(&d, &changed, &w.tgw);
        assert!(
            matches!(writes.as_slice(), [Write::Apply(Object::Gateway(_))]),
            "{writes:?}"
        );
        let mut cert = d.certificates[3].clone();
        cert.spec.dns_names.push("extra.alice.example.org".into());
        let mut certs = observed.certificates.clone();
        certs[3] = through(&cert);
        let changed = Observed {
            certificates: certs,
            ..observed
        };
        let (writes, _) = diff::objects(&d, &changed, &w.tgw);
        assert!(
            matches!(writes.as_slice(), [Write::Apply(Object::Certificate(_))]),
            "{writes:?}"
        );
    }

    /// A ready Certificate of ours, as rendered and as cert-manager reports it, keeps in a
    /// few dozen bytes beside its name and hostname, and restores exactly; the same with any
    /// other status, name or spec (the whole spans only shorten the common case).
    #[test]
    fn a_ready_certificate_of_ours_packs_to_its_names() {
        use crate::reconcile::Options;
        use crate::reconcile::certmanager::{CertManagerCondition, CertificateStatus};
        use crate::reconcile::render::{ListenerInputs, render};
        let w = crate::reconcile::testing::world();
        let s = w.tgw.settings(&Default::default()).expect("valid");
        let li = ListenerInputs {
            port443_namespaces: ["tenant-alice".to_string()].into(),
            hosts: ["h07.alice.example.org".to_string()].into(),
            ..ListenerInputs::default()
        };
        let mut c = render(&w.tgw, &s, &li, &Options::default()).certificates[0].clone();
        // Not kept: the cache is by namespace.
        c.metadata.namespace = None;
        c.metadata.uid = Some("5d0c9f1a-3e2b-4c7d-8f6a-000000000007".into());
        let ready = CertManagerCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("Ready".into()),
            message: Some("Certificate is up to date and has not expired".into()),
        };
        c.status = Some(CertificateStatus {
            conditions: vec![ready.clone()],
        });
        let kept = Kept::keep(c.clone()).expect("kept");
        assert_eq!(kept.restore(), Some(c.clone()));
        let name = c.metadata.name.as_deref().expect("a name");
        let fixed = kept.data.len() - name.len() - c.spec.dns_names[0].len();
        let issuer = c.spec.issuer_ref.name.len();
        assert!(
            fixed <= issuer + 16,
            "{} bytes for {name}: {fixed} besides its names",
            kept.data.len()
        );
        type Edit = Box<dyn Fn(&mut crate::reconcile::certmanager::Certificate)>;
        let variants: Vec<Edit> = vec![
            Box::new(|c| c.status = None),
            Box::new(|c| c.status = Some(CertificateStatus::default())),
            Box::new(|c| {
                if let Some(s) = c.status.as_mut() {
                    s.conditions[0].status = "False".into();
                }
            }),
            Box::new(|c| {
                if let Some(s) = c.status.as_mut() {
                    s.conditions[0].message = Some("Certificate is up to date".into());
                }
            }),
            Box::new(|c| {
                if let Some(s) = c.status.as_mut() {
                    s.conditions.push(s.conditions[0].clone());
                }
            }),
            Box::new(|c| c.spec.secret_name = "other".into()),
            Box::new(|c| c.spec.secret_name = format!("{}-x", c.spec.secret_name)),
            Box::new(|c| c.spec.issuer_ref.kind = "ClusterIssuer".into()),
            Box::new(|c| c.spec.dns_names.push("b.alice.example.org".into())),
            Box::new(|c| c.spec.dns_names.clear()),
            Box::new(|c| c.metadata.name = Some("gw".into())),
            Box::new(|c| c.metadata.name = Some("Certificate".into())),
            Box::new(|c| c.metadata.name = Some(c.spec.dns_names[0].clone())),
        ];
        let mut all = vec![c.clone()];
        for (i, v) in variants.iter().enumerate() {
            let mut o = c.clone();
            v(&mut o);
            let k = Kept::keep(o.clone()).expect("kept");
            assert_eq!(k.restore(), Some(o.clone()), "variant {i}");
            assert_ne!(k, kept, "variant {i}");
            all.push(o);
        }
        for a in &all {
            for b in &all {
                assert_eq!(Kept::keep(a.clone()) == Kept::keep(b.clone()), a == b);
            }
        }
    }

    /// Kept objects are equal exactly when what they restore is (the diff compares restored
    /// objects; the caches compare kept ones): over every combination of the metadata the
    /// projection keeps, in each of its forms, and bodies with and without the name in them.
    #[test]
    fn kept_objects_are_equal_exactly_when_their_restorations_are() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
        let owner = |n: &str| OwnerReference {
            api_version: "gateway.cozystack.io/v1alpha1".into(),
            kind: TGW_KIND.into(),
            name: n.into(),
            uid: format!("uid-{n}"),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let names = ["", "c", "abc", "a-long-name", "\u{e9}t\u{e9}"];
        let uids = [
            None,
            Some("943ab560-e10d-4bd6-b83d-7e423b7a074b"),
            Some("943ab560-e10d-4bd6-b83d-7e423b7a074c"),
            Some("u"),
            Some(""),
        ];
        let labels = [None, Some(MANAGED_BY_VALUE), Some("other"), Some("")];
        let owner_lists = [
            vec![],
            vec![owner("a")],
            vec![owner("b")],
            vec![owner("a"), owner("b")],
            vec![owner("b"), owner("a")],
        ];
        let bodies = [
            vec![],
            vec!["abc".to_string()],
            vec!["a-long-name".to_string(), "\"name\":\"".to_string()],
        ];
        let mut objects = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut pick = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..400 {
            let o = Big {
                meta: ObjectMeta {
                    name: Some(names[pick(names.len())].to_string()),
                    uid: uids[pick(uids.len())].map(str::to_string),
                    generation: [None, Some(1), Some(i64::MAX)][pick(3)],
                    labels: labels[pick(labels.len())]
                        .map(|v| BTreeMap::from([(MANAGED_BY_LABEL.to_string(), v.to_string())])),
                    owner_references: Some(owner_lists[pick(owner_lists.len())].clone())
                        .filter(|l| !l.is_empty()),
                    deletion_timestamp: (pick(4) == 0)
                        .then(|| Time("2026-12-01T11:32:29Z".parse().expect("a timestamp"))),
                    ..ObjectMeta::default()
                },
                spec: bodies[pick(bodies.len())].clone(),
                status: [None, Some(vec!["abc".to_string()])][pick(2)].clone(),
            };
            let k = Kept::keep(o.clone()).expect("kept");
            assert_eq!(k.restore(), Some(o.clone()), "{o:?}");
            objects.push((o, k));
        }
        for (a, ka) in &objects {
            for (b, kb) in &objects {
                assert_eq!(ka == kb, a == b, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn packing_with_a_name_round_trips_exactly() {
        for name in [
            "",
            "a",
            "ab",
            "abc",
            "name",
            "\"name\":\"",
            "gw-h07-tls",
            "\u{e9}\u{e9}",
        ] {
            for text in [
                "",
                "abc",
                "abcabc",
                "ababc",
                "\"name\":\"gw-h07-tls\"",
                "[{\"secretName\":\"gw-h07-tls\",\"dnsNames\":[\"gw-h07-tls\"]}]",
                "\u{e9}\u{e9}\u{e9}",
                "name\"name\":\"",
            ] {
                let mut out = Vec::new();
                pack(text, name, &mut out);
                assert_eq!(unpack(&out, name).as_deref(), Ok(text), "{name:?} {text:?}");
                assert!(out.len() <= text.len(), "{name:?} {text:?}");
            }
        }
    }

    #[test]
    fn a_damaged_deflated_body_is_not_restored() {
        let mut kept = Kept::keep(big(200, "x")).expect("kept");
        assert_ne!(kept.flags() & DEFLATED, 0);
        // Claims less text than it inflates to: the limit stops it.
        let at = kept.name_and_body().1;
        let mut data = kept.data.to_vec();
        let len = u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        data[at..at + 4].copy_from_slice(&(len / 2).to_le_bytes());
        kept.data = data.into_boxed_slice();
        assert_eq!(kept.restore(), None);
    }

    #[test]
    fn uids_round_trip_in_either_form() {
        for uid in [
            "8bef6697-f0a5-447e-bc59-c9828a4de1c6",
            "00000000-0000-0000-0000-000000000000",
            "8BEF6697-F0A5-447E-BC59-C9828A4DE1C6",
            "8bef6697f0a5447ebc59c9828a4de1c6",
            "8bef6697-f0a5-447e-bc59-c9828a4de1c",
            "8bef6697+f0a5-447e-bc59-c9828a4de1c6",
            "zzzzzzzz-f0a5-447e-bc59-c9828a4de1c6",
            "",
            "u",
        ] {
            let u = Uid::new(uid.to_string());
            assert_eq!(u.to_text(), uid);
            let compact = matches!(u, Uid::Uuid(_));
            assert_eq!(
                compact,
                uid.len() == 36
                    && uid
                        .chars()
                        .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c))
                    && uid.matches('-').count() == 4,
                "{uid}"
            );
        }
    }

    #[test]
    fn labels_other_than_ours_are_kept_as_they_are() {
        for v in [Some("yes"), Some(MANAGED_BY_VALUE), Some(""), None] {
            let o = Obj {
                meta: ObjectMeta {
                    name: Some("c".into()),
                    labels: v
                        .map(|v| BTreeMap::from([(MANAGED_BY_LABEL.to_string(), v.to_string())])),
                    ..ObjectMeta::default()
                },
                spec: 1,
                status: None,
            };
            assert_eq!(
                Kept::keep(o.clone()).and_then(|k| k.restore()),
                Some(o),
                "{v:?}"
            );
        }
    }
}
