//! Decode only what a layer reads. An admitted object is mostly fields no layer looks at
//! (rules, filters, backendRefs, managedFields); building a `serde_json::Value` for all of it
//! cost more than the whole policy decision (bench/RESULTS.md). This walks the raw JSON once,
//! skipping unread fields without allocating (they are still syntax-checked), and keeps the
//! read ones with their original JSON types, so the layers' shape checks see exactly what was
//! sent.
//!
//! What is kept is bounded (SPEC §9: decoding one review peaks at a small multiple of its
//! body): every kept value is charged an estimate of its decoded size against an allowance
//! of the body's own length (at least [`MIN_ALLOWANCE`]), and an object whose read fields
//! decode to more is refused instead of being built. A real object's read fields are a few
//! hundred bytes; only a client building, say, millions of one-letter hostnames meets it.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::policy::Layer;

/// A path of object keys. Arrays are transparent: `["spec", "rules", "host"]` keeps `host`
/// of every element of `spec.rules`. A path ends at the value kept whole.
pub type Path = &'static [&'static str];

/// Read by the admission codec for every kind (messages name the object).
const METADATA: [Path; 3] = [
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "generateName"],
];

/// The fields each layer reads (see `crate::policy`) and the route-index warnings read
/// (`route_warnings`: `spec.parentRefs`). A layer that starts reading another field must list
/// it here; the `projection_keeps_what_layers_read` test guards the known ones.
pub fn layer_paths(layer: Layer) -> &'static [Path] {
    layer_paths_for(layer, true)
}

/// [`layer_paths`], without what only the route-index warnings read when `warnings` is
/// false (no route index is attached: `--namespaces` mode without `--routes`). parentRefs are
/// the largest kept part of a route, so a webhook that cannot warn does not build them.
pub fn layer_paths_for(layer: Layer, warnings: bool) -> &'static [Path] {
    const GATEWAY: &[Path] = &[
        METADATA[0],
        METADATA[1],
        METADATA[2],
        &["spec", "listeners", "name"],
        &["spec", "listeners", "hostname"],
    ];
    const ROUTE: &[Path] = &[
        METADATA[0],
        METADATA[1],
        METADATA[2],
        &["spec", "hostnames"],
        // Read only for the route-index warnings (`route_warnings`), never for a denial.
        &["spec", "parentRefs"],
    ];
    const ROUTE_UNWARNED: &[Path] = ROUTE.split_at(ROUTE.len() - 1).0;
    const INGRESS: &[Path] = &[
        METADATA[0],
        METADATA[1],
        METADATA[2],
        &[
            "metadata",
            "annotations",
            crate::policy::ingress::ANNOTATIONS[0],
        ],
        &[
            "metadata",
            "annotations",
            crate::policy::ingress::ANNOTATIONS[1],
        ],
        &[
            "metadata",
            "annotations",
            crate::policy::ingress::ANNOTATIONS[2],
        ],
        &["spec", "defaultBackend"],
        &["spec", "rules", "host"],
        &["spec", "tls", "hosts"],
    ];
    const NAMESPACE: &[Path] = &[
        METADATA[0],
        METADATA[1],
        METADATA[2],
        &["metadata", "labels"],
        &["metadata", "annotations"],
    ];
    const TENANT_GATEWAY: &[Path] = &[
        METADATA[0],
        METADATA[1],
        METADATA[2],
        &["spec", "apex"],
        &["spec", "attachedNamespaces"],
    ];
    const TENANT: &[Path] = &[METADATA[0], METADATA[1], METADATA[2], &["spec", "host"]];
    const PACKAGE: &[Path] = &[
        METADATA[0],
        METADATA[1],
        METADATA[2],
        &crate::policy::package::PATH,
    ];
    match layer {
        Layer::Gateway => GATEWAY,
        Layer::Route if warnings => ROUTE,
        Layer::Route => ROUTE_UNWARNED,
        Layer::Ingress => INGRESS,
        Layer::Namespace => NAMESPACE,
        Layer::Tenant => TENANT,
        Layer::Package => PACKAGE,
        Layer::TenantGateway => TENANT_GATEWAY,
    }
}

/// Smallest allowance for the decoded size of the kept fields, whatever the body's size.
pub const MIN_ALLOWANCE: usize = 64 * 1024;

/// Estimated heap cost of kept values: a `Value` slot, a string's bytes plus allocation
/// overhead, a map entry (key and tree node).
pub(super) const VALUE_COST: usize = 32;
pub(super) const STRING_OVERHEAD: usize = 16;
pub(super) const ENTRY_COST: usize = 64;

/// The allowance for a body (or object) of `len` bytes.
pub fn allowance(len: usize) -> usize {
    len.max(MIN_ALLOWANCE)
}

/// The parts of `raw` on `paths`, with the same shape. A top level that is not an object is
/// returned whole (it is small, and the caller rejects it).
pub fn project(raw: &RawValue, paths: &[Path]) -> Result<Value, serde_json::Error> {
    let left = Cell::new(allowance(raw.get().len()));
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let v = Projector::new(paths, &left).deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

thread_local! {
    /// The paths to project `request.object` / `request.oldObject` on while an envelope is
    /// being decoded on this thread. serde's derive has no way to hand a runtime choice to a
    /// field's `Deserialize`; the decode is synchronous, so a scoped thread-local is exact.
    static DECODE_PATHS: Cell<Option<&'static [Path]>> = const { Cell::new(None) };
    /// What is left of the decode's allowance (shared by object and oldObject).
    static DECODE_LEFT: Cell<usize> = const { Cell::new(0) };
}

/// Run `decode` with objects projected on `paths` as they are parsed (one pass over the
/// body), or kept raw when `paths` is `None` (the layer is not known yet). `allowance` bounds
/// the decoded size of everything kept (see [`allowance`]).
pub fn decode_with<T>(
    paths: Option<&'static [Path]>,
    allowance: usize,
    decode: impl FnOnce() -> T,
) -> T {
    struct Reset(Option<&'static [Path]>, usize);
    impl Drop for Reset {
        fn drop(&mut self) {
            DECODE_PATHS.with(|c| c.set(self.0));
            DECODE_LEFT.with(|c| c.set(self.1));
        }
    }
    let _reset = Reset(
        DECODE_PATHS.with(|c| c.replace(paths)),
        DECODE_LEFT.with(|c| c.replace(allowance)),
    );
    decode()
}

/// `request.object` / `request.oldObject` as decoded: projected during the envelope decode
/// when the layer was known, else raw (borrowed) for a projection later.
#[derive(Debug, Clone)]
pub enum ObjectField<'a> {
    Projected(Value),
    Raw(&'a RawValue),
}

impl<'de: 'a, 'a> de::Deserialize<'de> for ObjectField<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match DECODE_PATHS.with(Cell::get) {
            Some(paths) => {
                let left = Cell::new(DECODE_LEFT.with(Cell::get));
                let r = Projector::new(paths, &left).deserialize(d);
                DECODE_LEFT.with(|c| c.set(left.get()));
                r.map(ObjectField::Projected)
            }
            None => <&'de RawValue>::deserialize(d).map(ObjectField::Raw),
        }
    }
}

impl ObjectField<'_> {
    /// The projection on `paths` (the layer's: a `Projected` field was made with them).
    pub fn projected(&self, paths: &[Path]) -> Result<Cow<'_, Value>, serde_json::Error> {
        match self {
            ObjectField::Projected(v) => Ok(Cow::Borrowed(v)),
            ObjectField::Raw(raw) => project(raw, paths).map(Cow::Owned),
        }
    }
}

#[derive(Clone, Copy)]
struct Projector<'p> {
    paths: &'p [Path],
    at: Step,
    /// Estimated bytes the kept values may still take.
    left: &'p Cell<usize>,
}

/// Where a value is on the paths: shared by the projector here and the envelope reader
/// (`reader`), so both keep a key by one rule.
#[derive(Clone, Copy)]
pub(super) struct Step {
    /// Which of `paths` match the keys above this value (bit `i` for `paths[i]`): a set
    /// instead of a filtered copy, so descending allocates nothing.
    pub(super) live: u64,
    pub(super) depth: usize,
    /// Below the end of a path: keep everything.
    pub(super) all: bool,
}

impl Step {
    /// Where the value of `key` in this object is, or `None`: the key is on no path and
    /// its value is skipped.
    pub(super) fn below(self, paths: &[Path], key: &str) -> Option<Step> {
        if self.all {
            return Some(Step {
                depth: self.depth + 1,
                ..self
            });
        }
        let mut live = 0u64;
        let mut all = false;
        for (i, p) in paths.iter().enumerate() {
            if self.live & (1 << i) != 0 && p.get(self.depth) == Some(&key) {
                live |= 1 << i;
                all |= p.len() == self.depth + 1;
            }
        }
        (live != 0).then_some(Step {
            live,
            depth: self.depth + 1,
            all,
        })
    }
}

/// Paths one projection can follow (`Step::live` has a bit per path); the layers list
/// at most ten (`layer_paths_fit` test).
const MAX_PATHS: usize = 64;

/// The paths a projection follows and the set of all of them.
pub(super) fn start(paths: &[Path]) -> (&[Path], u64) {
    // Paths are the static lists of `layer_paths`; `layer_paths_fit` holds them within
    // MAX_PATHS, so no path is ever left out of `live`.
    let n = paths.len().min(MAX_PATHS);
    let live = if n == MAX_PATHS {
        u64::MAX
    } else {
        (1u64 << n) - 1
    };
    (&paths[..n], live)
}

impl<'p> Projector<'p> {
    fn new(paths: &'p [Path], left: &'p Cell<usize>) -> Projector<'p> {
        let (paths, live) = start(paths);
        Projector {
            paths,
            at: Step {
                live,
                depth: 0,
                all: false,
            },
            left,
        }
    }

    fn charge<E: de::Error>(&self, cost: usize) -> Result<(), E> {
        match self.left.get().checked_sub(cost) {
            Some(rest) => {
                self.left.set(rest);
                Ok(())
            }
            None => Err(E::custom(
                "the fields tenant-gateway reads in this object decode to more than the body's own size; such an object is refused",
            )),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Projector<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// An object key, borrowed from the input when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Visitor<'de> for Projector<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.charge(VALUE_COST)?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.charge(VALUE_COST)?;
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.charge(VALUE_COST)?;
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.charge(VALUE_COST)?;
        Ok(Value::from(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.charge(VALUE_COST + STRING_OVERHEAD + v.len())?;
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.charge(VALUE_COST + STRING_OVERHEAD + v.len())?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.charge(VALUE_COST)?;
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.charge(VALUE_COST)?;
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        // Arrays are transparent: every element is projected with the same paths.
        self.charge(VALUE_COST)?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.charge(VALUE_COST)?;
        let mut out = Map::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let Some(at) = self.at.below(self.paths, &key) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            self.charge(ENTRY_COST + key.len())?;
            let value = map.next_value_seed(Projector { at, ..self })?;
            out.insert(key.into_owned(), value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The audit keeps its own projection of stored objects (`audit::kinds`, which may not
    /// import admission): every field it keeps for a layer is one the webhook's projection
    /// keeps for that layer, so a field a layer starts reading is not added to one list only.
    #[test]
    fn the_audit_keeps_only_fields_the_layers_read() {
        for kind in crate::audit::kinds::GuardedKind::ALL {
            let ours = layer_paths(kind.layer());
            for path in kind.paths() {
                assert!(
                    ours.contains(path),
                    "{kind}: the audit keeps {path:?}, which layer {} does not read here",
                    kind.layer()
                );
            }
        }
    }

    #[test]
    fn layer_paths_fit() {
        for layer in Layer::ALL {
            for warnings in [true, false] {
                assert!(
                    layer_paths_for(layer, warnings).len() <= MAX_PATHS,
                    "{layer}"
                );
            }
        }
    }

    fn raw(v: &Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(v).expect("raw")
    }

    #[test]
    fn keeps_read_fields_with_their_types_and_drops_the_rest() {
        let obj = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "web", "namespace": "tenant-alice", "labels": {"a": "b"},
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"hostnames": ["a.example.org", 5, null], "rules": [{"backendRefs": [{"name": "x"}]}]}
        });
        let p = project(&raw(&obj), layer_paths(Layer::Route)).expect("projects");
        assert_eq!(
            p,
            json!({"metadata": {"name": "web", "namespace": "tenant-alice"},
                   "spec": {"hostnames": ["a.example.org", 5, null]}})
        );
    }

    #[test]
    fn arrays_are_transparent_and_wrong_types_survive() {
        let obj = json!({"spec": {
            "rules": [{"host": "a", "http": {"paths": [1, 2]}}, "not-an-object", {"host": 7}],
            "tls": {"hosts": ["x"]},
            "defaultBackend": {"service": {"name": "s"}}
        }});
        let p = project(&raw(&obj), layer_paths(Layer::Ingress)).expect("projects");
        assert_eq!(
            p,
            json!({"spec": {
                "rules": [{"host": "a"}, "not-an-object", {"host": 7}],
                "tls": {"hosts": ["x"]},
                "defaultBackend": {"service": {"name": "s"}}
            }})
        );
        let p =
            project(&raw(&json!({"spec": "x"})), layer_paths(Layer::Ingress)).expect("projects");
        assert_eq!(p, json!({"spec": "x"}));
        let p = project(&raw(&json!([1, 2])), layer_paths(Layer::Ingress)).expect("projects");
        assert_eq!(p, json!([1, 2]));
    }

    #[test]
    fn escaped_keys_match_and_invalid_json_fails() {
        let text = r#"{"spe\u0063": {"host": "a\"b"}}"#;
        let r: Box<RawValue> = serde_json::from_str(text).expect("raw");
        let p = project(&r, layer_paths(Layer::Tenant)).expect("projects");
        assert_eq!(p, json!({"spec": {"host": "a\"b"}}));
    }

    #[test]
    fn one_pass_decode_equals_raw_then_project_and_resets() {
        #[derive(serde::Deserialize)]
        struct Doc<'a> {
            #[serde(borrow)]
            object: Option<ObjectField<'a>>,
        }
        let text = r#"{"object": {"metadata": {"name": "r", "uid": "x"}, "spec": {"hostnames": ["a"], "rules": [1]}}}"#;
        let paths = layer_paths(Layer::Route);
        let one: Doc<'_> = decode_with(Some(paths), MIN_ALLOWANCE, || serde_json::from_str(text))
            .expect("decodes");
        let two: Doc<'_> = serde_json::from_str(text).expect("decodes");
        assert!(matches!(one.object, Some(ObjectField::Projected(_))));
        assert!(
            matches!(two.object, Some(ObjectField::Raw(_))),
            "the paths must not leak past decode_with"
        );
        let a = one
            .object
            .as_ref()
            .expect("object")
            .projected(paths)
            .expect("ok")
            .into_owned();
        let b = two
            .object
            .as_ref()
            .expect("object")
            .projected(paths)
            .expect("ok")
            .into_owned();
        assert_eq!(a, b);
        assert_eq!(
            a,
            json!({"metadata": {"name": "r"}, "spec": {"hostnames": ["a"]}})
        );
    }

    #[test]
    fn kept_fields_are_bounded_by_the_allowance() {
        // 200,000 one-letter hostnames: 800 KB of JSON, ~14 MB as Values.
        let hosts: Vec<&str> = vec!["a"; 200_000];
        let obj = json!({"metadata": {"name": "r"}, "spec": {"hostnames": hosts}});
        let text = serde_json::to_string(&obj).expect("json");
        let e = project(&raw(&obj), layer_paths(Layer::Route)).expect_err("refused");
        assert!(
            e.to_string().contains("more than the body's own size"),
            "{e}"
        );
        // The same fields under an unread key cost nothing.
        let unread = json!({"metadata": {"name": "r"}, "spec": {"rules": hosts}});
        assert!(project(&raw(&unread), layer_paths(Layer::Route)).is_ok());
        // In the one-pass decode the allowance is shared by object and oldObject.
        #[derive(serde::Deserialize, Debug)]
        #[serde(rename_all = "camelCase")]
        #[allow(dead_code)]
        struct Doc<'a> {
            #[serde(borrow)]
            object: Option<ObjectField<'a>>,
            #[serde(borrow)]
            old_object: Option<ObjectField<'a>>,
        }
        let small = r#"{"spec": {"hostnames": ["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]}}"#;
        let doc = format!(r#"{{"object": {small}, "oldObject": {small}}}"#);
        let paths = layer_paths(Layer::Route);
        let alone = format!(r#"{{"object": {small}}}"#);
        let one = decode_with(Some(paths), 400, || serde_json::from_str::<Doc<'_>>(&alone));
        assert!(one.is_ok(), "one copy fits: {one:?}");
        let both = decode_with(Some(paths), 400, || serde_json::from_str::<Doc<'_>>(&doc));
        assert!(both.is_err(), "two copies do not");
        let both = decode_with(Some(paths), 800, || serde_json::from_str::<Doc<'_>>(&doc));
        assert!(both.is_ok(), "twice the allowance holds both");
        assert!(text.len() < 1_000_000);
    }

    /// Every layer decides the same on the projection as on the whole object.
    #[test]
    fn projection_keeps_what_layers_read() {
        use crate::policy::{self, HOST_LABEL, NamespaceContext, Operation, PolicyConfig, Review};
        use std::collections::BTreeMap;
        let cfg = PolicyConfig {
            root_host: Some("example.org".into()),
            ..PolicyConfig::default()
        };
        let ns = NamespaceContext::Found {
            labels: BTreeMap::from([(HOST_LABEL.to_string(), "alice.example.org".to_string())]),
        };
        let objects = [
            (
                Layer::Gateway,
                json!({"metadata": {"name": "g", "namespace": "tenant-alice"}, "spec": {"gatewayClassName": "c", "listeners": [{"name": "a", "port": 443, "hostname": "x.bob.example.org"}, {"name": "b", "hostname": 5}]}}),
            ),
            (
                Layer::Route,
                json!({"metadata": {"name": "r"}, "spec": {"hostnames": ["x.bob.example.org"], "rules": []}}),
            ),
            (
                Layer::Ingress,
                json!({"metadata": {"name": "i"}, "spec": {"defaultBackend": {}, "rules": [{"http": {}}, {"host": "dashboard.example.org"}], "tls": [{"hosts": ["*.customer.com"], "secretName": "s"}]}}),
            ),
            // Only the annotations are wrong: the projection must keep them.
            (
                Layer::Ingress,
                json!({"metadata": {"name": "i", "annotations": {"nginx.ingress.kubernetes.io/server-alias": "x.bob.example.org", "other": "y"}}, "spec": {"rules": [{"host": "a.alice.example.org"}]}}),
            ),
            (
                Layer::Ingress,
                json!({"metadata": {"name": "i", "annotations": {"nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers x;"}}, "spec": {"rules": [{"host": "a.alice.example.org"}]}}),
            ),
            (
                Layer::Route,
                json!({"metadata": {"name": "r"}, "spec": {"rules": [{"matches": [{"method": {"service": "s"}}]}]}}),
            ),
            (
                Layer::Namespace,
                json!({"metadata": {"name": "tenant-x", "labels": {HOST_LABEL: "evil.org", "team": "a"}}}),
            ),
            (
                Layer::Tenant,
                json!({"metadata": {"name": "t"}, "spec": {"host": "dashboard.example.org", "gateway": true}}),
            ),
            (
                Layer::Package,
                json!({"metadata": {"name": "p"}, "spec": {"components": {"platform": {"values": {"gateway": {"attachedNamespaces": ["tenant-root", "Bad_Name"]}, "other": 1}}}}}),
            ),
        ];
        for (layer, obj) in objects {
            let projected = project(&raw(&obj), layer_paths(layer)).expect("projects");
            let groups = vec![std::borrow::Cow::Borrowed("tenant-alice-admins")];
            let review = |o| Review {
                operation: Operation::Create,
                kind: "K",
                namespace: "tenant-alice",
                name: "n",
                object: o,
                old_object: None,
                username: "alice",
                groups: &groups,
            };
            let (a, b) = (review(&obj), review(&projected));
            let da = policy::evaluate(layer, &a, &ns, &cfg);
            let db = policy::evaluate(layer, &b, &ns, &cfg);
            assert_eq!(da, db, "{layer}");
            assert!(
                da.as_ref()
                    .map(|f| !f.violations.is_empty())
                    .unwrap_or(true),
                "{layer}: the sample must be denied"
            );
        }
    }
}
