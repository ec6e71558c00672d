//! Decoding the values on a few paths of an object's JSON and skipping the rest unbuilt
//! (still syntax-checked): what the continuous audit keeps of a watched object (SPEC §3.9),
//! read by the audit's own watches and by the route watch it shares with the route index.
//! The values keep their JSON types, so a layer's shape checks see what the API server
//! stored.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A path of object keys; arrays are transparent (`["spec", "rules", "host"]` is the `host` of
/// every rule). A path ends at the value kept whole.
pub type Path = &'static [&'static str];

/// Paths a projection can follow at once (a bit each).
pub const MAX_PATHS: usize = 63;

/// The values of `raw` (one JSON text) on `paths` (fewer than [`MAX_PATHS`]; the rest are
/// ignored), under their keys; a value of the wrong type where a path expects an object is
/// kept whole.
pub fn project_json(raw: &str, paths: &[Path]) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(raw);
    let v = Projector {
        paths: &paths[..paths.len().min(MAX_PATHS)],
        live: None,
        depth: 0,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// Decodes only the values on `paths`, skipping the rest unbuilt (still syntax-checked).
#[derive(Clone, Copy)]
struct Projector<'p> {
    paths: &'p [Path],
    /// Which of `paths` match the keys above this value (bit `i` for `paths[i]`), `None` at the
    /// top (every path).
    live: Option<u64>,
    depth: usize,
}

impl Projector<'_> {
    fn live(&self) -> u64 {
        // `project_json` passes at most `MAX_PATHS` (63) paths.
        self.live
            .unwrap_or((1u64 << self.paths.len().min(MAX_PATHS)) - 1)
    }
}

impl<'de> DeserializeSeed<'de> for Projector<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Projector<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        let live = self.live();
        while let Some(key) = map.next_key::<String>()? {
            let mut below = 0u64;
            let mut whole = false;
            for (i, p) in self.paths.iter().enumerate() {
                if live & (1 << i) != 0 && p.get(self.depth) == Some(&key.as_str()) {
                    below |= 1 << i;
                    whole |= p.len() == self.depth + 1;
                }
            }
            if below == 0 {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = if whole {
                map.next_value::<Value>()?
            } else {
                map.next_value_seed(Projector {
                    live: Some(below),
                    depth: self.depth + 1,
                    ..self
                })?
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keeps_the_values_on_the_paths_with_their_types() {
        let raw = json!({
            "metadata": {"uid": "u", "name": "n", "managedFields": [{"manager": "x"}]},
            "spec": {"hostnames": ["a", 5, null], "rules": [{"x": 1}]},
            "status": {"parents": []}
        })
        .to_string();
        let paths: &[Path] = &[&["metadata", "uid"], &["spec", "hostnames"]];
        assert_eq!(
            project_json(&raw, paths).expect("JSON"),
            json!({"metadata": {"uid": "u"}, "spec": {"hostnames": ["a", 5, null]}})
        );
        // A value of the wrong type where an object is expected is kept whole.
        assert_eq!(
            project_json(r#"{"spec": "x", "other": 1}"#, paths).expect("JSON"),
            json!({"spec": "x"})
        );
        // Arrays are transparent.
        let rules: &[Path] = &[&["spec", "rules", "host"]];
        assert_eq!(
            project_json(
                r#"{"spec": {"rules": [{"host": "a", "x": 1}, "odd"]}}"#,
                rules
            )
            .expect("JSON"),
            json!({"spec": {"rules": [{"host": "a"}, "odd"]}})
        );
        assert!(project_json("{", paths).is_err());
        assert!(project_json("{} x", paths).is_err(), "trailing text");
    }
}
