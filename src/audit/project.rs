//! What the audit keeps of a stored object: its uid and the fields its layer reads
//! ([`GuardedKind::paths`]), with their original JSON types, so the layer's shape checks see
//! what the API server stored. Everything else (rules, backends, managedFields, status) is
//! skipped while the object's JSON is read, without being built.
//!
//! A watched object is read before its kind is known to the decoder, so it is projected on
//! the paths of every guarded kind ([`Projected`], with `cluster::projection`'s decoder);
//! the store projects it again on its own kind's paths ([`project`]) before keeping it. A
//! route from the reconciler's route watch comes projected on its own paths
//! (`cluster::routes::AUDITED_PATHS`, [`Projected::of_projection`]).

use std::sync::OnceLock;

use serde_json::{Map, Value};

use super::kinds::{GuardedKind, Path};
use crate::cluster::projection::project_json;
use crate::cluster::watch::FromWatch;

const UID: Path = &["metadata", "uid"];

/// The parts of `object` on `kind`'s paths. Arrays are transparent; a value of the wrong type
/// where a path expects an object is kept whole, so the layer reports it.
pub fn project(kind: GuardedKind, object: &Value) -> Value {
    prune(object, kind.paths(), 0)
}

fn prune(v: &Value, paths: &[Path], depth: usize) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (key, value) in m {
                let below: Vec<Path> = paths
                    .iter()
                    .copied()
                    .filter(|p| p.get(depth) == Some(&key.as_str()))
                    .collect();
                if below.is_empty() {
                    continue;
                }
                let kept = if below.iter().any(|p| p.len() == depth + 1) {
                    value.clone()
                } else {
                    prune(value, &below, depth + 1)
                };
                out.insert(key.clone(), kept);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|i| prune(i, paths, depth)).collect()),
        other => other.clone(),
    }
}

/// The keys every path of `kind` starts with (`spec`, `hostnames` for a route).
pub fn common_prefix(kind: GuardedKind) -> &'static [&'static str] {
    let paths = kind.paths();
    let Some(first) = paths.first() else {
        return &[];
    };
    let n = paths.iter().fold(first.len(), |n, p| {
        n.min(
            first
                .iter()
                .zip(p.iter())
                .take_while(|(a, b)| a == b)
                .count(),
        )
    });
    &first[..n]
}

/// A projection of `kind` as compact text: when it is only `kind`'s common prefix around one
/// value (`{"spec":{"hostnames":[…]}}`), that value's JSON after a `=` (no JSON text starts
/// with one), else the projection's JSON. The store keeps one per object: the prefix is most
/// of a small route's text.
pub fn pack(kind: GuardedKind, projected: &Value) -> String {
    let prefix = common_prefix(kind);
    let mut v = projected;
    for key in prefix {
        match v {
            Value::Object(m) if m.len() == 1 && m.contains_key(*key) => v = &m[*key],
            _ => return projected.to_string(),
        }
    }
    if prefix.is_empty() {
        return projected.to_string();
    }
    format!("={v}")
}

/// The projection [`pack`] wrote.
pub fn unpack(kind: GuardedKind, text: &str) -> Result<Value, serde_json::Error> {
    let Some(inner) = text.strip_prefix('=') else {
        return serde_json::from_str(text);
    };
    let mut v: Value = serde_json::from_str(inner)?;
    for key in common_prefix(kind).iter().rev() {
        let mut m = Map::new();
        m.insert((*key).to_string(), v);
        v = Value::Object(m);
    }
    Ok(v)
}

/// Every guarded kind's paths and the uid's: what a watched object keeps before its kind is
/// known.
fn union_paths() -> &'static [Path] {
    static PATHS: OnceLock<Vec<Path>> = OnceLock::new();
    PATHS.get_or_init(|| {
        let mut all: Vec<Path> = GuardedKind::ALL
            .iter()
            .flat_map(|k| k.paths().iter().copied())
            .chain([UID])
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    })
}

/// A listed or watched object of a guarded kind: its uid, and the fields of every guarded
/// kind's paths (see the module doc).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Projected {
    pub uid: Option<String>,
    pub body: Value,
}

impl Projected {
    /// The projection of an object given whole (a snapshot file's document).
    pub fn of_value(object: &Value) -> Projected {
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        Projected {
            uid,
            body: prune(object, union_paths(), 0),
        }
    }
}

impl Projected {
    /// A projection decoded elsewhere (the route watch the audit shares with the route index,
    /// `cluster::routes::WatchedRoute::stored`): its `metadata.uid` taken out as the uid.
    pub fn of_projection(mut body: Value) -> Projected {
        // The uid is the object's identity, not a field a layer reads.
        let uid = match body.get_mut("metadata").and_then(Value::as_object_mut) {
            Some(m) => match m.remove("uid") {
                Some(Value::String(u)) => Some(u),
                _ => None,
            },
            None => None,
        };
        Projected { uid, body }
    }
}

impl FromWatch for Projected {
    fn from_watch(raw: &str) -> Result<Self, serde_json::Error> {
        Ok(Projected::of_projection(project_json(raw, union_paths())?))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cluster::projection::MAX_PATHS;

    #[test]
    fn union_fits() {
        assert!(union_paths().len() <= MAX_PATHS);
    }

    #[test]
    fn keeps_what_the_layer_reads_with_its_types() {
        let route = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "web", "namespace": "tenant-a", "uid": "u-1",
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"hostnames": ["a.example.org", 5, null],
                     "rules": [{"backendRefs": [{"name": "x"}]}]},
            "status": {"parents": []}
        });
        let want = json!({"spec": {"hostnames": ["a.example.org", 5, null]}});
        assert_eq!(project(GuardedKind::HttpRoute, &route), want);
        let watched = Projected::from_watch(&route.to_string()).expect("decodes");
        assert_eq!(watched.uid.as_deref(), Some("u-1"));
        assert_eq!(project(GuardedKind::HttpRoute, &watched.body), want);
        assert_eq!(Projected::of_value(&route).uid.as_deref(), Some("u-1"));
        assert_eq!(
            project(GuardedKind::HttpRoute, &Projected::of_value(&route).body),
            want
        );

        let ingress = json!({
            "metadata": {"name": "i", "annotations": {
                "nginx.ingress.kubernetes.io/server-alias": "a.example.org b.example.org",
                "other": "x"}},
            "spec": {"rules": [{"host": "a", "http": {"paths": [1]}}, "odd", {"host": 7}],
                     "tls": {"hosts": ["x"]}, "defaultBackend": {"service": {"name": "s"}}}
        });
        let want = json!({
            "metadata": {"annotations": {
                "nginx.ingress.kubernetes.io/server-alias": "a.example.org b.example.org"}},
            "spec": {"rules": [{"host": "a"}, "odd", {"host": 7}], "tls": {"hosts": ["x"]},
                     "defaultBackend": {"service": {"name": "s"}}}
        });
        assert_eq!(project(GuardedKind::Ingress, &ingress), want);
        let watched = Projected::from_watch(&ingress.to_string()).expect("decodes");
        assert_eq!(project(GuardedKind::Ingress, &watched.body), want);

        // A spec of the wrong type survives: the layer reports it as the shape error it is.
        let odd = json!({"spec": "x", "metadata": {"uid": 7}});
        assert_eq!(project(GuardedKind::Gateway, &odd), json!({"spec": "x"}));
        let watched = Projected::from_watch(&odd.to_string()).expect("decodes");
        assert_eq!(watched.uid, None, "a uid that is no string is none");
        assert_eq!(
            project(GuardedKind::Gateway, &watched.body),
            json!({"spec": "x"})
        );
    }

    #[test]
    fn packed_text_reads_back_as_the_projection() {
        let cases = [
            (
                GuardedKind::HttpRoute,
                json!({"spec": {"hostnames": ["a.example.org"]}}),
                true,
            ),
            (
                GuardedKind::HttpRoute,
                json!({"spec": {"hostnames": []}}),
                true,
            ),
            (GuardedKind::HttpRoute, json!({"spec": {}}), false),
            (GuardedKind::HttpRoute, json!({"spec": "x"}), false),
            (GuardedKind::HttpRoute, json!({}), false),
            (GuardedKind::HttpRoute, json!([1]), false),
            (
                GuardedKind::Gateway,
                json!({"spec": {"listeners": [{"name": "a", "hostname": "h"}]}}),
                true,
            ),
            (
                GuardedKind::TenantGateway,
                json!({"spec": {"apex": "a", "attachedNamespaces": ["x"]}}),
                true,
            ),
            (
                GuardedKind::Ingress,
                json!({"spec": {"rules": [{"host": "a"}]}, "metadata": {"annotations": {}}}),
                false,
            ),
            (
                GuardedKind::Package,
                json!({"spec": {"components": {"platform": {"values": {"gateway": {
                    "attachedNamespaces": ["cozy-a"]}}}}}}),
                true,
            ),
        ];
        for (kind, v, short) in cases {
            let text = pack(kind, &v);
            assert_eq!(text.starts_with('='), short, "{kind} {v}: {text}");
            assert_eq!(unpack(kind, &text).expect("reads back"), v, "{kind} {text}");
        }
        assert_eq!(
            pack(
                GuardedKind::HttpRoute,
                &json!({"spec": {"hostnames": ["a.example.org"]}})
            ),
            "=[\"a.example.org\"]"
        );
    }

    #[test]
    fn text_that_is_no_object_is_an_error_or_an_empty_projection() {
        assert!(Projected::from_watch("{").is_err());
        let p = Projected::from_watch("[1]").expect("an array is JSON");
        assert_eq!(project(GuardedKind::HttpRoute, &p.body), json!([1]));
    }
}
