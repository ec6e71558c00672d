//! The `wgpolicyk8s.io/v1alpha2` PolicyReport, field for field, and its CRD generated from
//! these types (`tenant-gateway crd --policy-report`; the chart's optional copy is
//! `charts/tenant-gateway/templates/policyreport-crd.yaml`, checked for drift by
//! tests/charts.rs).
//!
//! The API is the one Kyverno and Policy Reporter read: a report's content sits at the top
//! level (`scope`, `scopeSelector`, `summary`, `results`), not under `spec`, so the kube
//! `CustomResource` derive does not fit and the [`kube::Resource`] impl is written here. The
//! schema test in this file holds the published schema's field names, types and required
//! lists and compares the generated CRD with them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresources,
    CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::core::NamespaceResourceScope;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// API group of the policy report API.
pub const GROUP: &str = "wgpolicyk8s.io";
/// The version this product writes (the one Kyverno ≤ 1.13 and Policy Reporter read).
pub const VERSION: &str = "v1alpha2";
pub const API_VERSION: &str = "wgpolicyk8s.io/v1alpha2";
pub const KIND: &str = "PolicyReport";
pub const PLURAL: &str = "policyreports";
/// `metadata.name` of the CRD.
pub const CRD_NAME: &str = "policyreports.wgpolicyk8s.io";

/// The policy results of one namespace's objects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyReport {
    // apiVersion, kind and metadata are validated by the API server itself; the CRD lists
    // them as the published schema does (see `crd`).
    #[schemars(skip)]
    #[serde(default)]
    pub api_version: String,
    #[schemars(skip)]
    #[serde(default)]
    pub kind: String,
    #[schemars(skip)]
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The one object the whole report is about, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ObjectReference>,
    /// The objects the whole report is about, by label; not set together with scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope_selector: Option<LabelSelector>,
    /// How many results there are of each kind.
    #[serde(default)]
    pub summary: PolicyReportSummary,
    /// One entry per policy rule and checked object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<PolicyReportResult>,
}

impl PolicyReport {
    /// An empty report `name` in `namespace`, with apiVersion and kind set.
    pub fn new(namespace: &str, name: &str) -> PolicyReport {
        PolicyReport {
            api_version: API_VERSION.to_string(),
            kind: KIND.to_string(),
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            ..PolicyReport::default()
        }
    }
}

/// Counts of the results by outcome. Every count is written, zeros included, as the API's
/// own client writes them.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PolicyReportSummary {
    /// Results whose rule held.
    #[serde(default)]
    pub pass: i64,
    /// Results whose rule did not hold.
    #[serde(default)]
    pub fail: i64,
    /// Results whose unscored rule did not hold.
    #[serde(default)]
    pub warn: i64,
    /// Results that could not be judged.
    #[serde(default)]
    pub error: i64,
    /// Results whose rule was not applied.
    #[serde(default)]
    pub skip: i64,
}

/// The outcome of one rule for one object.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PolicyResult {
    Pass,
    Fail,
    Warn,
    Error,
    Skip,
}

/// How serious a result is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    High,
    Low,
    Medium,
    Info,
}

/// A point in time as protobuf writes it (`metav1.Timestamp`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Timestamp {
    /// Seconds since the Unix epoch, UTC.
    pub seconds: i64,
    /// Nanoseconds within the second (0 to 999,999,999).
    pub nanos: i32,
}

/// One rule's outcome for the objects it checked.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyReportResult {
    /// The tool that wrote the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The policy the rule belongs to.
    pub policy: String,
    /// The rule within the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// A group of policies, for display.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// How serious a failure of the rule is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    /// When the result was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Timestamp>,
    /// The outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<PolicyResult>,
    /// Whether the result counts towards a score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scored: Option<bool>,
    /// The checked objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ObjectReference>,
    /// The checked objects, by label (instead of resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_selector: Option<LabelSelector>,
    /// What was found, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// More about the result, as key/value pairs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

impl kube::Resource for PolicyReport {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        API_VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Why the CRD could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("the PolicyReport schema generated from the Rust types is not a valid CRD schema: {0}")]
    Schema(#[source] serde_json::Error),
    #[error("cannot write the PolicyReport CRD as YAML: {0}")]
    Yaml(#[source] serde_saphyr::SerializeError),
}

/// The `policyreports.wgpolicyk8s.io` CustomResourceDefinition, `v1alpha2` only, generated
/// from [`PolicyReport`].
pub fn crd() -> Result<CustomResourceDefinition, CrdError> {
    let schema: JSONSchemaProps =
        serde_json::from_value(schema_value()?).map_err(CrdError::Schema)?;
    let column = |name: &str, type_: &str, path: &str| CustomResourceColumnDefinition {
        name: name.to_string(),
        type_: type_.to_string(),
        json_path: path.to_string(),
        ..CustomResourceColumnDefinition::default()
    };
    Ok(CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(CRD_NAME.to_string()),
            ..ObjectMeta::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.to_string(),
            names: CustomResourceDefinitionNames {
                kind: KIND.to_string(),
                list_kind: Some(format!("{KIND}List")),
                plural: PLURAL.to_string(),
                singular: Some("policyreport".to_string()),
                short_names: Some(vec!["polr".to_string()]),
                ..CustomResourceDefinitionNames::default()
            },
            scope: "Namespaced".to_string(),
            versions: vec![CustomResourceDefinitionVersion {
                name: VERSION.to_string(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                additional_printer_columns: Some(vec![
                    column("Kind", "string", ".scope.kind"),
                    column("Name", "string", ".scope.name"),
                    column("Pass", "integer", ".summary.pass"),
                    column("Fail", "integer", ".summary.fail"),
                    column("Warn", "integer", ".summary.warn"),
                    column("Error", "integer", ".summary.error"),
                    column("Skip", "integer", ".summary.skip"),
                    column("Age", "date", ".metadata.creationTimestamp"),
                ]),
                subresources: Some(CustomResourceSubresources::default()),
                ..CustomResourceDefinitionVersion::default()
            }],
            ..CustomResourceDefinitionSpec::default()
        },
        status: None,
    })
}

/// The CRD as YAML, as `tenant-gateway crd --policy-report` prints it.
pub fn crd_yaml() -> Result<String, CrdError> {
    crate::yaml::to_document(&crd()?).map_err(CrdError::Yaml)
}

/// The openAPIV3Schema of [`PolicyReport`] as the API server takes it: subschemas inline,
/// `Option` as an absent field (never `nullable`: nothing here writes a null), and the
/// shape the published schema has where the Rust types alone say less.
fn schema_value() -> Result<Value, CrdError> {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .into_generator();
    let mut schema = serde_json::to_value(generator.into_root_schema_for::<PolicyReport>())
        .map_err(CrdError::Schema)?;
    strip(&mut schema, &["nullable", "default", "title"]);
    // An optional enum is an absent field, never a null value.
    strip_null_from_enums(&mut schema);
    // The counts are plain integers in the published schema (Go `int`).
    if let Some(counts) =
        at(&mut schema, &["properties", "summary", "properties"]).and_then(Value::as_object_mut)
    {
        for count in counts.values_mut() {
            if let Some(c) = count.as_object_mut() {
                c.remove("format");
            }
        }
    }
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": "The API version of this object."}),
        );
        props.insert(
            "kind".into(),
            json!({"type": "string", "description": "The kind of this object."}),
        );
        props.insert("metadata".into(), json!({"type": "object"}));
    }
    // Object references and selectors are one value each for server-side apply, as
    // Kubernetes declares them; schemars does not carry these markers.
    for path in [
        &["properties", "scope"][..],
        &["properties", "scopeSelector"],
        &[
            "properties",
            "results",
            "items",
            "properties",
            "resourceSelector",
        ],
        &[
            "properties",
            "results",
            "items",
            "properties",
            "resources",
            "items",
        ],
    ] {
        if let Some(s) = at(&mut schema, path).and_then(Value::as_object_mut) {
            s.insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
    }
    for selector in [
        &["properties", "scopeSelector"][..],
        &[
            "properties",
            "results",
            "items",
            "properties",
            "resourceSelector",
        ],
    ] {
        let expressions = [selector, &["properties", "matchExpressions"]].concat();
        if let Some(s) = at(&mut schema, &expressions).and_then(Value::as_object_mut) {
            s.insert("x-kubernetes-list-type".into(), json!("atomic"));
        }
        let values = [expressions.as_slice(), &["items", "properties", "values"]].concat();
        if let Some(s) = at(&mut schema, &values).and_then(Value::as_object_mut) {
            s.insert("x-kubernetes-list-type".into(), json!("atomic"));
        }
    }
    Ok(schema)
}

fn strip_null_from_enums(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(Value::Array(values)) = map.get_mut("enum") {
                values.retain(|x| !x.is_null());
            }
            map.values_mut().for_each(strip_null_from_enums);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_null_from_enums),
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, key| v.get_mut(*key))
}

/// Remove `keys` from every schema object below `v`, never from a `properties` map (where a
/// key is a field name).
fn strip(v: &mut Value, keys: &[&str]) {
    match v {
        Value::Object(map) => {
            for k in keys {
                map.remove(*k);
            }
            for (k, child) in map.iter_mut() {
                if k == "properties" {
                    if let Value::Object(fields) = child {
                        for field in fields.values_mut() {
                            strip(field, keys);
                        }
                    }
                } else {
                    strip(child, keys);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| strip(i, keys)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The published API's facts, written by hand from its CRD (the file names its source).
    fn published() -> Value {
        crate::yaml::from_document(include_str!(
            "../../../tests/fixtures/wgpolicyk8s-v1alpha2-policyreport.yaml"
        ))
        .expect("the fixture parses")
    }

    /// Every node of a schema by path, with the facts the fixture records.
    fn flatten(path: &str, node: &Value, out: &mut BTreeMap<String, Value>) {
        let mut facts = serde_json::Map::new();
        for key in [
            "type",
            "format",
            "enum",
            "x-kubernetes-map-type",
            "x-kubernetes-list-type",
        ] {
            if let Some(v) = node.get(key) {
                facts.insert(key.into(), v.clone());
            }
        }
        if let Some(req) = node.get("required").and_then(Value::as_array) {
            let mut req: Vec<&str> = req.iter().filter_map(Value::as_str).collect();
            req.sort_unstable();
            facts.insert("required".into(), json!(req));
        }
        if let Some(ap) = node.get("additionalProperties") {
            facts.insert("additionalProperties".into(), ap["type"].clone());
        }
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            let names: Vec<&String> = props.keys().collect();
            facts.insert("properties".into(), json!(names));
            for (name, child) in props {
                let child_path = if path == "." {
                    format!(".{name}")
                } else {
                    format!("{path}.{name}")
                };
                flatten(&child_path, child, out);
            }
        }
        if let Some(items) = node.get("items") {
            flatten(&format!("{path}[]"), items, out);
        }
        out.insert(path.to_string(), Value::Object(facts));
    }

    #[test]
    fn the_schema_is_the_published_api_field_for_field() {
        let crd = serde_json::to_value(crd().expect("the CRD builds")).expect("serializes");
        let version = &crd["spec"]["versions"][0];
        let mut ours = BTreeMap::new();
        flatten(".", &version["schema"]["openAPIV3Schema"], &mut ours);
        let want: BTreeMap<String, Value> =
            serde_json::from_value(published()["schema"].clone()).expect("schema facts");
        let missing: Vec<&String> = want.keys().filter(|k| !ours.contains_key(*k)).collect();
        let extra: Vec<&String> = ours.keys().filter(|k| !want.contains_key(*k)).collect();
        assert!(
            missing.is_empty(),
            "fields of the published API missing: {missing:?}"
        );
        assert!(
            extra.is_empty(),
            "fields the published API does not have: {extra:?}"
        );
        for (path, facts) in &want {
            assert_eq!(&ours[path], facts, "{path}");
        }
    }

    #[test]
    fn the_crd_has_the_published_names_version_and_columns() {
        let facts = &published()["crd"];
        let crd = serde_json::to_value(crd().expect("the CRD builds")).expect("serializes");
        let spec = &crd["spec"];
        assert_eq!(crd["metadata"]["name"], facts["name"]);
        assert_eq!(spec["group"], facts["group"]);
        assert_eq!(spec["scope"], facts["scope"]);
        for key in ["kind", "listKind", "plural", "singular", "shortNames"] {
            assert_eq!(spec["names"][key], facts[key], "names.{key}");
        }
        let versions = spec["versions"].as_array().expect("versions");
        assert_eq!(versions.len(), 1, "v1alpha2 only");
        let v = &versions[0];
        assert_eq!(v["name"], facts["version"]);
        assert_eq!(
            (v["served"].clone(), v["storage"].clone()),
            (json!(true), json!(true))
        );
        assert_eq!(v["subresources"], json!({}), "no status subresource");
        let columns: Vec<Value> = v["additionalPrinterColumns"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| json!([c["name"], c["type"], c["jsonPath"]]))
            .collect();
        assert_eq!(json!(columns), facts["printerColumns"]);
    }

    #[test]
    fn a_report_serializes_with_the_published_field_names() {
        let mut report = PolicyReport::new("tenant-a", "tenant-gateway");
        report.summary.fail = 1;
        report.results.push(PolicyReportResult {
            source: Some("tenant-gateway".into()),
            policy: "p".into(),
            rule: Some("r".into()),
            severity: Some(Severity::High),
            timestamp: Some(Timestamp {
                seconds: 7,
                nanos: 0,
            }),
            result: Some(PolicyResult::Fail),
            scored: Some(true),
            resources: vec![ObjectReference {
                kind: Some("HTTPRoute".into()),
                name: Some("web".into()),
                ..ObjectReference::default()
            }],
            message: Some("m".into()),
            properties: [("layer".to_string(), "7".to_string())].into(),
            ..PolicyReportResult::default()
        });
        let v = serde_json::to_value(&report).expect("serializes");
        assert_eq!(v["apiVersion"], "wgpolicyk8s.io/v1alpha2");
        assert_eq!(v["kind"], "PolicyReport");
        assert_eq!(
            v["summary"],
            json!({"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0}),
            "every count written"
        );
        assert_eq!(
            v["results"][0],
            json!({"source": "tenant-gateway", "policy": "p", "rule": "r", "severity": "high",
                "timestamp": {"seconds": 7, "nanos": 0}, "result": "fail", "scored": true,
                "resources": [{"kind": "HTTPRoute", "name": "web"}], "message": "m",
                "properties": {"layer": "7"}})
        );
        assert!(v.get("scope").is_none() && v.get("scopeSelector").is_none());
        let back: PolicyReport = serde_json::from_value(v).expect("reads back");
        assert_eq!(back, report);
    }

    #[test]
    fn the_yaml_is_one_document_helm_can_template() {
        let text = crd_yaml().expect("yaml");
        assert!(
            text.starts_with("apiVersion: apiextensions.k8s.io/v1\n"),
            "{text}"
        );
        assert!(
            !text.contains("{{"),
            "no template delimiters in the generated text"
        );
    }
}
