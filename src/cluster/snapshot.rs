//! Namespace snapshots read from a file (`--namespaces FILE`, as `kubectl get ns -o yaml` or
//! `-o json` prints them), and the list flattening the route snapshot shares: the admission
//! layers' namespace context when no cluster is watched.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::apex::ApexMap;
use crate::platform::NamespaceContext;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot read namespace snapshot {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("namespace snapshot {path}: document {index} is not valid YAML/JSON: {reason}")]
    Parse {
        path: String,
        index: usize,
        reason: String,
    },
    #[error(
        "namespace snapshot {path}: document {index} is a {kind:?}, expected Namespace objects (as printed by `kubectl get ns -o yaml`)"
    )]
    NotNamespace {
        path: String,
        index: usize,
        kind: String,
    },
    #[error("namespace snapshot {path}: document {index} has no metadata.name")]
    Unnamed { path: String, index: usize },
}

/// Namespaces read once from a file; nothing changes at run time.
#[derive(Debug, Default, Clone)]
pub struct StaticNamespaces {
    by_name: HashMap<String, BTreeMap<String, String>>,
    /// Built once from `by_name` on first use (after loading), never per review.
    apexes: std::sync::OnceLock<ApexMap>,
}

impl StaticNamespaces {
    pub fn from_file(path: &Path) -> Result<StaticNamespaces, SnapshotError> {
        let p = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| SnapshotError::Read {
            path: p.clone(),
            source,
        })?;
        // A byte-order mark is read as kubectl reads it.
        let text = crate::yaml::decode(bytes).map_err(|e| SnapshotError::Read {
            path: p.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
        })?;
        StaticNamespaces::from_yaml(&text, &p)
    }

    /// Accepts a `kind: List` / `NamespaceList`, multi-document YAML, or JSON.
    ///
    /// Each document is read into [`view::Doc`], which keeps only kind, metadata.name,
    /// string-valued metadata.labels and list items: a `serde_json::Value` of a 10,000-namespace
    /// `kubectl get ns -o yaml` held every uid, timestamp and status and raised the peak by
    /// tens of MiB that glibc then kept.
    pub fn from_yaml(text: &str, origin: &str) -> Result<StaticNamespaces, SnapshotError> {
        let mut out = StaticNamespaces::default();
        let mut index = 0usize;
        // A file that starts like JSON (`kubectl get ns -o json`) is tried as one JSON value
        // first; if that fails (YAML flow style, or a broken file) the YAML reader below
        // decides, so the outcome and the error messages are those of the YAML path.
        if text.trim_start().starts_with('{') {
            let mut de = serde_json::Deserializer::from_str(text);
            if let Ok(doc) = view::Doc::deserialize(&mut de).and_then(|doc| de.end().map(|()| doc))
            {
                out.add_document(doc, origin, &mut index)?;
                return Ok(out);
            }
        }
        // Documents split and parsed as kubectl reads them (src/yaml.rs): merge keys, YAML
        // 1.1 scalars, budgets. serde-saphyr hands events to the view as it parses, so a large
        // `kind: List` costs its text plus the index, not a buffer of all its events.
        for chunk in crate::yaml::split_documents(text) {
            let chunk = chunk.map_err(|(i, e)| SnapshotError::Parse {
                path: origin.to_string(),
                index: i,
                reason: e.to_string(),
            })?;
            // The whole document is read before any of it is indexed: a syntax error
            // anywhere in it wins over a wrong kind earlier in it.
            let doc: view::Doc =
                crate::yaml::from_document(chunk.text).map_err(|e| SnapshotError::Parse {
                    path: origin.to_string(),
                    index: chunk.index,
                    reason: e.to_string(),
                })?;
            out.add_document(doc, origin, &mut index)?;
        }
        Ok(out)
    }

    /// Index one document: skip it when empty, expand a `*List` with `items`, like
    /// [`flatten_list`] does for `Value`s.
    fn add_document(
        &mut self,
        doc: view::Doc,
        origin: &str,
        index: &mut usize,
    ) -> Result<(), SnapshotError> {
        match doc {
            view::Doc::Null => Ok(()),
            view::Doc::Object(object) if object.is_list() => {
                for item in object.items.unwrap_or_default() {
                    self.add_document(item, origin, index)?;
                }
                Ok(())
            }
            other => {
                *index += 1;
                self.add(other, origin, *index)
            }
        }
    }

    fn add(&mut self, item: view::Doc, origin: &str, index: usize) -> Result<(), SnapshotError> {
        let object = match item {
            view::Doc::Object(object) => object,
            // A scalar or a sequence has no kind, as `Value::get("kind")` found none.
            view::Doc::Null | view::Doc::Other => view::Object::default(),
        };
        match object.kind {
            Some(view::Kind::Namespace) => {}
            other => {
                return Err(SnapshotError::NotNamespace {
                    path: origin.to_string(),
                    index,
                    kind: other.map(view::Kind::into_string).unwrap_or_default(),
                });
            }
        }
        let name = object.metadata.name.ok_or_else(|| SnapshotError::Unnamed {
            path: origin.to_string(),
            index,
        })?;
        // Moved, not copied: the strings read from the file become the index.
        self.by_name.insert(name, object.metadata.labels);
        Ok(())
    }

    pub fn insert(&mut self, name: &str, labels: BTreeMap<String, String>) {
        self.by_name.insert(name.to_string(), labels);
        // Rebuilt on next use with the new entry.
        self.apexes = std::sync::OnceLock::new();
    }

    /// The apex map of the snapshot, built on first use.
    pub fn apexes(&self) -> &ApexMap {
        self.apexes.get_or_init(|| {
            let mut m = ApexMap::default();
            for (name, labels) in &self.by_name {
                m.set(name, labels);
            }
            m
        })
    }

    /// The labels the snapshot holds for `name` (all of them; a lookup keeps only what
    /// the layers read).
    pub fn labels(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.by_name.get(name)
    }

    /// Every namespace and its labels, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &BTreeMap<String, String>)> {
        self.by_name.iter().map(|(n, l)| (n.as_str(), l))
    }

    pub fn lookup(&self, name: &str) -> NamespaceContext {
        match self.by_name.get(name) {
            Some(labels) => NamespaceContext::found(labels),
            None => NamespaceContext::NotFound,
        }
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// The string-valued labels of an object given as JSON (other values are not labels the
/// API server would store; they are dropped, as the snapshot loader drops them).
pub fn string_labels(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Expand `kind: List` (and `*List`) documents into their items; drop empty documents.
pub fn flatten_list(value: Value) -> Vec<Value> {
    match value {
        Value::Null => Vec::new(),
        Value::Object(ref m)
            if m.get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"))
                && m.get("items").is_some_and(Value::is_array) =>
        {
            match value {
                Value::Object(mut m) => match m.remove("items") {
                    Some(Value::Array(items)) => items.into_iter().flat_map(flatten_list).collect(),
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            }
        }
        other => vec![other],
    }
}

/// The part of a snapshot document the index needs, read without building a `Value`.
///
/// Every position accepts any YAML/JSON value and keeps only what the index reads: a string
/// `kind`, a string `metadata.name`, the string values of a `metadata.labels` mapping, and
/// `items` when it is a sequence. Everything else (annotations, managedFields, spec, status,
/// non-string label values) is read and dropped without allocating. The visitors accept and
/// reject exactly what `serde_json::Value`'s visitor does (enum-tagged YAML nodes, non-string
/// keys, integers beyond 64 bits), with the same "expected" wording, so a file reads as it
/// would through a `Value` tree (the tests' `reference` reader), message for message.
/// Unknown fields are skipped, never an error.
mod view {
    use std::collections::BTreeMap;
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::{
        self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor,
    };

    /// What `serde_json::Value`'s visitor names when it meets a node it cannot take.
    const ANY_VALUE: &str = "any valid JSON value";

    /// One document or list item.
    #[derive(Debug, Default)]
    pub enum Doc {
        /// An empty document, `null` or `~`: skipped, as `flatten_list` skips `Value::Null`.
        Null,
        Object(Object),
        /// A scalar or a sequence: not a Namespace, and it has no kind.
        #[default]
        Other,
    }

    /// A mapping document or item.
    #[derive(Debug, Default)]
    pub struct Object {
        /// `kind`, when it is a string.
        pub kind: Option<Kind>,
        pub metadata: Metadata,
        /// `items`, when it is a sequence (only a `*List` uses it).
        pub items: Option<Vec<Doc>>,
    }

    impl Object {
        /// `flatten_list`'s test: a kind ending in `List` and an `items` sequence.
        pub fn is_list(&self) -> bool {
            matches!(&self.kind, Some(Kind::Other(k)) if k.ends_with("List"))
                && self.items.is_some()
        }
    }

    /// A string `kind`. `Namespace`, once per item, is not allocated.
    #[derive(Debug, PartialEq, Eq)]
    pub enum Kind {
        Namespace,
        Other(String),
    }

    impl Kind {
        pub fn into_string(self) -> String {
            match self {
                Kind::Namespace => "Namespace".to_string(),
                Kind::Other(k) => k,
            }
        }
    }

    /// `metadata`, when it is a mapping; empty otherwise, like a failed `Value::pointer`.
    #[derive(Debug, Default)]
    pub struct Metadata {
        /// `metadata.name`, when it is a string.
        pub name: Option<String>,
        /// The string-valued entries of `metadata.labels`, when it is a mapping.
        pub labels: BTreeMap<String, String>,
    }

    /// How a position of the view takes each kind of node. The defaults drop the node, still
    /// reading all of it so that the deserializer checks it as it did for `Value`.
    trait Take<'de>: Default {
        fn null() -> Self {
            Self::default()
        }

        fn string<E: de::Error>(_v: &str) -> Result<Self, E> {
            Ok(Self::default())
        }

        fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
            while seq.next_element::<Skip>()?.is_some() {}
            Ok(Self::default())
        }

        fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
            while map.next_key_seed(Key::<Field>::new())?.is_some() {
                map.next_value::<Skip>()?;
            }
            Ok(Self::default())
        }
    }

    /// The visitor for every `Take` position: the node types `Value`'s visitor accepts.
    struct TakeVisitor<T>(PhantomData<T>);

    impl<'de, T: Take<'de>> Visitor<'de> for TakeVisitor<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(ANY_VALUE)
        }

        fn visit_bool<E: de::Error>(self, _v: bool) -> Result<T, E> {
            Ok(T::default())
        }

        fn visit_i64<E: de::Error>(self, _v: i64) -> Result<T, E> {
            Ok(T::default())
        }

        fn visit_u64<E: de::Error>(self, _v: u64) -> Result<T, E> {
            Ok(T::default())
        }

        // The YAML reader reports integers beyond 64 bits this way; `Value` turns them into a
        // `Number`, which fails without arbitrary_precision. Same call, same error.
        fn visit_i128<E: de::Error>(self, v: i128) -> Result<T, E> {
            serde_json::Number::deserialize(de::value::I128Deserializer::<E>::new(v))?;
            Ok(T::default())
        }

        fn visit_u128<E: de::Error>(self, v: u128) -> Result<T, E> {
            serde_json::Number::deserialize(de::value::U128Deserializer::<E>::new(v))?;
            Ok(T::default())
        }

        fn visit_f64<E: de::Error>(self, _v: f64) -> Result<T, E> {
            Ok(T::default())
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            T::string(v)
        }

        fn visit_none<E: de::Error>(self) -> Result<T, E> {
            Ok(T::null())
        }

        fn visit_unit<E: de::Error>(self) -> Result<T, E> {
            Ok(T::null())
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
            d.deserialize_any(self)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
            T::seq(seq)
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::map(map)
        }
    }

    /// `Deserialize` for the `Take` positions (a blanket impl would collide with serde's).
    macro_rules! deserialize_by_take {
        ($($t:ty),*) => {$(
            impl<'de> Deserialize<'de> for $t {
                fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                    d.deserialize_any(TakeVisitor(PhantomData))
                }
            }
        )*};
    }

    deserialize_by_take!(Skip, Doc, Metadata, Str, KindField, Labels, Items);

    /// Any node, read and dropped.
    #[derive(Default)]
    struct Skip;

    impl Take<'_> for Skip {}

    impl<'de> Take<'de> for Doc {
        fn null() -> Self {
            Doc::Null
        }

        fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
            let mut object = Object::default();
            // A repeated key replaces the earlier value, as in a `Value` map.
            while let Some(field) = map.next_key_seed(Key::<Field>::new())? {
                match field {
                    Field::Kind => object.kind = map.next_value::<KindField>()?.0,
                    Field::Metadata => object.metadata = map.next_value()?,
                    Field::Items => object.items = map.next_value::<Items>()?.0,
                    Field::Name | Field::Labels | Field::Other => {
                        map.next_value::<Skip>()?;
                    }
                }
            }
            Ok(Doc::Object(object))
        }
    }

    impl<'de> Take<'de> for Metadata {
        fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
            let mut metadata = Metadata::default();
            while let Some(field) = map.next_key_seed(Key::<Field>::new())? {
                match field {
                    Field::Name => metadata.name = map.next_value::<Str>()?.0,
                    Field::Labels => metadata.labels = map.next_value::<Labels>()?.0,
                    Field::Kind | Field::Metadata | Field::Items | Field::Other => {
                        map.next_value::<Skip>()?;
                    }
                }
            }
            Ok(metadata)
        }
    }

    /// A string, or nothing for any other node.
    #[derive(Default)]
    struct Str(Option<String>);

    impl Take<'_> for Str {
        fn string<E: de::Error>(v: &str) -> Result<Self, E> {
            Ok(Str(Some(v.to_owned())))
        }
    }

    #[derive(Default)]
    struct KindField(Option<Kind>);

    impl Take<'_> for KindField {
        fn string<E: de::Error>(v: &str) -> Result<Self, E> {
            Ok(KindField(Some(match v {
                "Namespace" => Kind::Namespace,
                other => Kind::Other(other.to_owned()),
            })))
        }
    }

    /// Label values that are not strings are dropped, as `Value::as_str` dropped them.
    #[derive(Default)]
    struct Labels(BTreeMap<String, String>);

    impl<'de> Take<'de> for Labels {
        fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
            let mut labels = BTreeMap::new();
            while let Some(key) = map.next_key_seed(Key::<String>::new())? {
                // The last occurrence of a key decides, also when it is not a string.
                match map.next_value::<Str>()?.0 {
                    Some(value) => labels.insert(key, value),
                    None => labels.remove(&key),
                };
            }
            Ok(Labels(labels))
        }
    }

    #[derive(Default)]
    struct Items(Option<Vec<Doc>>);

    impl<'de> Take<'de> for Items {
        fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element::<Doc>()? {
                items.push(item);
            }
            Ok(Items(Some(items)))
        }
    }

    /// The keys the view looks at; anything else is skipped.
    enum Field {
        Kind,
        Metadata,
        Items,
        Name,
        Labels,
        Other,
    }

    /// A mapping key as `Value` reads one: `deserialize_str`, "a string key" when it is not
    /// a scalar.
    struct Key<K>(PhantomData<K>);

    impl<K> Key<K> {
        fn new() -> Self {
            Key(PhantomData)
        }
    }

    trait FromKey: Sized {
        fn from_key(key: &str) -> Self;
    }

    impl FromKey for Field {
        fn from_key(key: &str) -> Self {
            match key {
                "kind" => Field::Kind,
                "metadata" => Field::Metadata,
                "items" => Field::Items,
                "name" => Field::Name,
                "labels" => Field::Labels,
                _ => Field::Other,
            }
        }
    }

    impl FromKey for String {
        fn from_key(key: &str) -> Self {
            key.to_owned()
        }
    }

    impl<'de, K: FromKey> DeserializeSeed<'de> for Key<K> {
        type Value = K;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<K: FromKey> Visitor<'_> for Key<K> {
        type Value = K;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string key")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<K, E> {
            Ok(K::from_key(v))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reads_list_and_multidoc() {
        let list = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata:
    name: tenant-alice
    labels:
      namespace.cozystack.io/host: alice.example.org
- apiVersion: v1
  kind: Namespace
  metadata:
    name: tenant-bare
"#;
        let s = StaticNamespaces::from_yaml(list, "t").expect("parses");
        assert_eq!(s.len(), 2);
        assert_eq!(s.lookup("tenant-alice").apex(), Some("alice.example.org"));
        assert_eq!(s.lookup("tenant-bare").apex(), None);
        assert_eq!(s.lookup("tenant-missing"), NamespaceContext::NotFound);

        let multi = "kind: Namespace\nmetadata:\n  name: a\n---\nkind: Namespace\nmetadata:\n  name: b\n  labels: {x: y}\n---\n";
        let s = StaticNamespaces::from_yaml(multi, "t").expect("parses");
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn snapshot_rejects_other_kinds_and_bad_yaml() {
        let e = StaticNamespaces::from_yaml("kind: Pod\nmetadata: {name: x}\n", "f.yaml")
            .expect_err("pod is not a namespace");
        assert!(e.to_string().contains("Pod"), "{e}");
        let e = StaticNamespaces::from_yaml("kind: [unclosed", "f.yaml").expect_err("bad yaml");
        assert!(e.to_string().contains("f.yaml"), "{e}");
        let e = StaticNamespaces::from_yaml("kind: Namespace\nmetadata: {}\n", "f.yaml")
            .expect_err("no name");
        assert!(e.to_string().contains("metadata.name"), "{e}");
    }

    /// The loader before the typed view: every document as a `serde_json::Value`, then
    /// `flatten_list`. The view must give the same index or the same error on any input.
    fn reference(text: &str, origin: &str) -> Result<StaticNamespaces, SnapshotError> {
        let mut out = StaticNamespaces::default();
        let mut index = 0usize;
        for chunk in crate::yaml::split_documents(text) {
            let chunk = chunk.map_err(|(i, e)| SnapshotError::Parse {
                path: origin.to_string(),
                index: i,
                reason: e.to_string(),
            })?;
            let value: Value =
                crate::yaml::from_document(chunk.text).map_err(|e| SnapshotError::Parse {
                    path: origin.to_string(),
                    index: chunk.index,
                    reason: e.to_string(),
                })?;
            for item in flatten_list(value) {
                index += 1;
                let kind = item.get("kind").and_then(Value::as_str).unwrap_or("");
                if kind != "Namespace" {
                    return Err(SnapshotError::NotNamespace {
                        path: origin.to_string(),
                        index,
                        kind: kind.to_string(),
                    });
                }
                let name = item
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| SnapshotError::Unnamed {
                        path: origin.to_string(),
                        index,
                    })?;
                out.by_name.insert(name.to_string(), string_labels(&item));
            }
        }
        Ok(out)
    }

    /// The index as sorted (name, labels) pairs.
    type Entries = Vec<(String, BTreeMap<String, String>)>;

    /// The outcome as comparable data: the index, or the error's variant and message.
    fn outcome(r: Result<StaticNamespaces, SnapshotError>) -> Result<Entries, String> {
        match r {
            Ok(s) => {
                let mut v: Vec<_> = s.by_name.into_iter().collect();
                v.sort();
                Ok(v)
            }
            Err(e) => Err(format!("{e:?} / {e}")),
        }
    }

    #[test]
    fn view_matches_the_value_loader() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let cases: &[&str] = &[
            "",
            "---\n---\n",
            "~\n",
            "null\n",
            "kind: Namespace\nmetadata: {name: a}\n---\n~\n---\nkind: Namespace\nmetadata: {name: b}\n",
            "hello\n",
            "[kind, Namespace]\n",
            "42\n",
            "{}\n",
            "kind: List\n",
            "kind: List\nitems:\n",
            "kind: List\nitems: {a: b}\n",
            "kind: List\nitems: []\n",
            "kind: List\nitems: [~, {kind: Namespace, metadata: {name: a}}]\n",
            "kind: List\nitems: [5]\n",
            "kind: List\nitems: [[a]]\n",
            "kind: NotAList\nitems: [{kind: Namespace, metadata: {name: a}}]\n",
            "items: [{kind: Namespace, metadata: {name: a}}]\nkind: List\n",
            "kind: Namespace\nitems: [{kind: Pod}]\nmetadata: {name: a}\n",
            "kind: List\nitems:\n- kind: NamespaceList\n  items:\n  - kind: List\n    items: [{kind: Namespace, metadata: {name: deep}}]\n- {kind: Namespace, metadata: {name: top}}\n",
            "kind: 5\nmetadata: {name: a}\n",
            "kind: true\n",
            "kind: [Namespace]\n",
            "kind: {a: b}\n",
            "kind: '5'\n",
            "kind: !!str Namespace\nmetadata: {name: a}\n",
            "kind: !foo Namespace\nmetadata: {name: a}\n",
            "!foo {kind: Namespace}\n",
            "kind: Namespace\nspec: !foo {a: b}\nmetadata: {name: a}\n",
            "kind: Namespace\nmetadata: x\n",
            "kind: Namespace\nmetadata: [name, a]\n",
            "kind: Namespace\nmetadata: {name: 5}\n",
            "kind: Namespace\nmetadata: {name: ~}\n",
            "kind: Namespace\nmetadata: {name: !!str 5}\n",
            "kind: Namespace\nmetadata: {name: [a]}\n",
            "kind: Namespace\nmetadata: {name: a, labels: x}\n",
            "kind: Namespace\nmetadata: {name: a, labels: [x, y]}\n",
            "kind: Namespace\nmetadata: {name: a, labels: {s: x, i: 1, b: true, n: ~, f: 1.5, m: {x: y}, q: [1], t: '1'}}\n",
            "kind: Namespace\nmetadata: {name: a, labels: {x: y, x: 1}}\n",
            "kind: Namespace\nmetadata: {name: a, labels: {x: 1, x: y}}\n",
            "kind: Namespace\nkind: Pod\nmetadata: {name: a}\n",
            "kind: Pod\nkind: Namespace\nmetadata: {name: a}\n",
            "kind: Namespace\nmetadata: {name: a, labels: {x: y}}\nmetadata: {name: b}\n",
            "kind: Namespace\nmetadata: {name: a, name: 5}\n",
            "kind: Namespace\nmetadata: {name: a, labels: {1: one, true: yes, ~: nil}}\n",
            "kind: Namespace\nmetadata: {name: a, labels: {[x]: y}}\n",
            "kind: Namespace\nmetadata: {name: a, annotations: {[x]: y}}\n",
            "? [a]\n: b\nkind: Namespace\n",
            "kind: Namespace\nmetadata: {name: a}\nspec: {big: 99999999999999999999}\n",
            "kind: Namespace\nmetadata: {name: a}\nspec: {big: -99999999999999999999}\n",
            "kind: Namespace\nmetadata: {name: a}\nspec: {huge: 1e400, nan: .nan, inf: -.inf}\n",
            "kind: Namespace\nmetadata: {name: a, labels: {big: 99999999999999999999}}\n",
            "kind: Namespace\nmetadata: {name: a, labels: {b: !!binary aGVsbG8=}}\n",
            "base: &b {x: y}\nkind: Namespace\nmetadata: {name: a, labels: *b}\n",
            "kind: Namespace\nmetadata: {name: a, labels: *nope}\n",
            "kind: Namespace\nmetadata:\n  <<: {name: merged}\n",
            "kind: [unclosed",
            "kind: Pod\n---\nkind: [unclosed\n",
            "kind: List\nitems:\n- {kind: Pod}\n- [unclosed\n",
            &deep,
            "kind: Namespace\nmetadata: {name: a}\n---\nkind: Namespace\n",
            // JSON: read by serde_json, by the YAML reader in the reference.
            r#"{"kind": "List", "items": [{"kind": "Namespace", "metadata": {"name": "a", "labels": {"x": "y", "n": 1, "z": null}}, "status": {"phase": "Active"}}]}"#,
            r#"{"kind": "Namespace", "metadata": {"name": 5}}"#,
            r#"{"kind": "Pod", "metadata": {"name": "p"}}"#,
            r#"  {"kind": "Namespace", "metadata": {"name": "a", "labels": {"e": "\u00e9\n\"\/"}}}"#,
            r#"{"kind": "Namespace", "metadata": {"name": "a"}} {"kind": "Namespace"}"#,
            r#"{"kind": "Namespace", "metadata": {"name": "a"}}
---
kind: Namespace
metadata: {name: b}
"#,
            "{kind: Namespace, metadata: {name: flow}}\n",
            "{\"kind\": \"Namespace\", \"metadata\": {\"name\": \"a\",}}",
            "{\"kind\": \"Namespace\"",
        ];
        for case in cases {
            assert_eq!(
                outcome(StaticNamespaces::from_yaml(case, "f.yaml")),
                outcome(reference(case, "f.yaml")),
                "input: {case:?}"
            );
        }
    }

    #[test]
    fn snapshot_reads_nested_lists_and_namespace_list() {
        let nested = r#"
kind: List
items:
- kind: NamespaceList
  apiVersion: v1
  items:
  - kind: Namespace
    metadata: {name: a, labels: {x: "1"}}
  - kind: List
    items:
    - kind: Namespace
      metadata: {name: b}
- kind: Namespace
  metadata: {name: c}
"#;
        let s = StaticNamespaces::from_yaml(nested, "t").expect("parses");
        assert_eq!(s.len(), 3);
        assert_eq!(
            s.labels("a"),
            Some(&BTreeMap::from([("x".to_string(), "1".to_string())]))
        );
        assert!(matches!(s.lookup("b"), NamespaceContext::Found { .. }));

        let list = "apiVersion: v1\nkind: NamespaceList\nmetadata: {resourceVersion: \"7\"}\nitems:\n- {kind: Namespace, metadata: {name: only}}\n";
        let s = StaticNamespaces::from_yaml(list, "t").expect("parses");
        assert_eq!(s.len(), 1);
        assert!(matches!(s.lookup("only"), NamespaceContext::Found { .. }));
    }

    #[test]
    fn snapshot_reads_json() {
        // As `kubectl get ns -o json` prints it (keys sorted, items before kind).
        let json = r#"{
    "apiVersion": "v1",
    "items": [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "creationTimestamp": "2026-04-01T00:00:00Z",
                "labels": {
                    "kubernetes.io/metadata.name": "tenant-alice",
                    "namespace.cozystack.io/host": "alice.example.org"
                },
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:metadata": {}}}],
                "name": "tenant-alice",
                "uid": "0"
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"}
        }
    ],
    "kind": "List",
    "metadata": {"resourceVersion": ""}
}
"#;
        let s = StaticNamespaces::from_yaml(json, "t").expect("parses");
        assert_eq!(s.len(), 1);
        assert_eq!(s.lookup("tenant-alice").apex(), Some("alice.example.org"));

        // Starts like JSON but is YAML flow style: the YAML reader takes it.
        let flow = "{kind: Namespace, metadata: {name: flow}}\n";
        let s = StaticNamespaces::from_yaml(flow, "t").expect("parses");
        assert_eq!(s.len(), 1);

        // Escaped surrogate pairs, a JSON escape that libyaml-based YAML readers refuse, load.
        let emoji = r#"{"kind": "Namespace", "metadata": {"name": "e", "annotations": {"a": "\ud83d\ude00"}}}"#;
        let s = StaticNamespaces::from_yaml(emoji, "t").expect("parses as JSON");
        assert_eq!(s.len(), 1);

        // Broken JSON: the error is the YAML reader's, with the path.
        let e = StaticNamespaces::from_yaml("{\"kind\": \"Namespace\"", "f.json")
            .expect_err("unterminated");
        assert!(matches!(e, SnapshotError::Parse { .. }), "{e:?}");
        assert!(e.to_string().contains("f.json"), "{e}");
    }

    #[test]
    fn snapshot_drops_non_string_labels_and_ignores_unknown_fields() {
        let yaml = r#"
kind: Namespace
apiVersion: v1
metadata:
  name: a
  annotations: {note: "x", nested: {deep: [1, 2]}}
  managedFields:
  - manager: kubectl
    fieldsV1: {"f:metadata": {"f:labels": {}}}
  labels:
    keep: "yes"
    number: 1
    flag: true
    nothing: null
    list: [a]
    map: {a: b}
    quoted: "2"
spec: {finalizers: [kubernetes]}
status: {phase: Active}
extra: [whatever, {x: y}]
"#;
        let s = StaticNamespaces::from_yaml(yaml, "t").expect("parses");
        assert_eq!(
            s.labels("a"),
            Some(&BTreeMap::from([
                ("keep".to_string(), "yes".to_string()),
                ("quoted".to_string(), "2".to_string()),
            ]))
        );
    }

    #[test]
    fn lookup_keeps_the_host_label_the_layers_read() {
        let mut s = StaticNamespaces::default();
        s.insert(
            "t",
            BTreeMap::from([
                ("a".to_string(), "1".to_string()),
                (
                    crate::policy::HOST_LABEL.to_string(),
                    "t.example.org".to_string(),
                ),
                (
                    crate::platform::GATEWAY_LABEL.to_string(),
                    "tenant-root".to_string(),
                ),
                ("z".to_string(), "2".to_string()),
            ]),
        );
        s.insert(
            "empty",
            BTreeMap::from([("a".to_string(), "1".to_string())]),
        );
        let found = s.lookup("t");
        assert_eq!(found.apex(), Some("t.example.org"));
        assert_eq!(
            found,
            NamespaceContext::Found {
                labels: BTreeMap::from([
                    (
                        crate::policy::HOST_LABEL.to_string(),
                        "t.example.org".to_string()
                    ),
                    (
                        crate::platform::GATEWAY_LABEL.to_string(),
                        "tenant-root".to_string()
                    )
                ])
            }
        );
        // Found without a host label stays Found (the "has no host label" message).
        assert_eq!(
            s.lookup("empty"),
            NamespaceContext::Found {
                labels: BTreeMap::new()
            }
        );
        assert_eq!(s.lookup("nope"), NamespaceContext::NotFound);
    }

    #[test]
    fn snapshot_error_messages() {
        let e = StaticNamespaces::from_yaml(
            "kind: List\nitems:\n- {kind: Namespace, metadata: {name: a}}\n- {kind: ConfigMap, metadata: {name: b}}\n",
            "f.yaml",
        )
        .expect_err("a ConfigMap is not a namespace");
        assert!(
            matches!(&e, SnapshotError::NotNamespace { index: 2, kind, .. } if kind == "ConfigMap"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "namespace snapshot f.yaml: document 2 is a \"ConfigMap\", expected Namespace objects (as printed by `kubectl get ns -o yaml`)"
        );

        let e = StaticNamespaces::from_yaml("kind: List\n", "f.yaml").expect_err("no items");
        assert!(
            matches!(&e, SnapshotError::NotNamespace { index: 1, kind, .. } if kind == "List"),
            "{e:?}"
        );

        let e =
            StaticNamespaces::from_yaml("metadata: {name: a}\n", "f.yaml").expect_err("no kind");
        assert!(
            matches!(&e, SnapshotError::NotNamespace { kind, .. } if kind.is_empty()),
            "{e:?}"
        );

        let e = StaticNamespaces::from_yaml(
            "kind: Namespace\nmetadata: {name: a}\n---\nkind: Namespace\nmetadata: {labels: {x: y}}\n",
            "f.yaml",
        )
        .expect_err("no name");
        assert!(
            matches!(&e, SnapshotError::Unnamed { index: 2, .. }),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "namespace snapshot f.yaml: document 2 has no metadata.name"
        );

        let e = StaticNamespaces::from_file(Path::new("/nonexistent/ns.yaml"))
            .expect_err("missing file");
        assert!(matches!(e, SnapshotError::Read { .. }), "{e:?}");
        assert!(e.to_string().contains("/nonexistent/ns.yaml"), "{e}");
    }
}
