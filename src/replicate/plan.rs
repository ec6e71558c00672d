//! The pure core of the replicator: values → [`Setting`]; setting + source + namespaces +
//! observed Secrets → [`Plan`]. No I/O; `run.rs` feeds it the caches and executes the plan.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::ByteString;

use crate::cluster::nsmeta::NamespaceMeta;
use crate::hostname::{is_dns_label, is_dns_subdomain};
use crate::platform::{GATEWAY_LABEL, INGRESS_LABEL, WILDCARD_COPY_LABEL};

/// Value of [`WILDCARD_COPY_LABEL`] on a replica.
pub const COPY_LABEL_VALUE: &str = "true";
/// The only Secret type that is replicated.
pub const TLS_TYPE: &str = "kubernetes.io/tls";
/// Source namespace when `_cluster.expose-ingress` is absent or empty.
pub const DEFAULT_SOURCE_NAMESPACE: &str = "tenant-root";
/// The values keys read (inside `_cluster`).
pub const NAME_KEY: &str = "wildcard-secret-name";
pub const NAMESPACE_KEY: &str = "expose-ingress";

/// Where the platform values live (`--values-secret-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValuesLocation {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

impl Default for ValuesLocation {
    fn default() -> Self {
        ValuesLocation {
            namespace: "cozy-system".into(),
            name: "cozystack-values".into(),
            key: "values.yaml".into(),
        }
    }
}

impl std::fmt::Display for ValuesLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} key {:?}", self.namespace, self.name, self.key)
    }
}

/// What the platform values ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    /// Replicate Secret `name` of `namespace`.
    Replicate { namespace: String, name: String },
    /// `wildcard-secret-name: ""`: no replica anywhere.
    Cleared,
    /// Nothing can be concluded: every replica stays as it is.
    Hold(Hold),
}

/// Why the replicator neither writes nor prunes (transient absence or a bad value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Hold {
    #[error("the values Secret {0} does not exist")]
    ValuesSecretMissing(String),
    #[error("the values Secret {secret} has no key {key:?}")]
    KeyMissing { secret: String, key: String },
    #[error("the values in {location} are not readable YAML: {reason}")]
    Unreadable { location: String, reason: String },
    #[error("_cluster.{NAME_KEY} is not set in {0}")]
    NotSet(String),
    #[error(
        "_cluster.{NAME_KEY} in {location} is {value}, not a Secret name (lowercase letters, digits, '-' and '.', at most 253 characters)"
    )]
    BadName { location: String, value: String },
    #[error(
        "_cluster.{NAMESPACE_KEY} in {location} is {value}, not a namespace name (lowercase letters, digits and '-', at most 63 characters)"
    )]
    BadNamespace { location: String, value: String },
    #[error("the source Secret {0} does not exist")]
    SourceMissing(String),
    #[error("the source Secret {secret} is of type {type_:?}, not {TLS_TYPE}")]
    SourceNotTls { secret: String, type_: String },
}

impl Hold {
    /// Every value [`Hold::reason`] returns.
    pub const REASONS: [&'static str; 8] = [
        "values_secret_missing",
        "values_key_missing",
        "values_unreadable",
        "name_not_set",
        "bad_name",
        "bad_namespace",
        "source_missing",
        "source_not_tls",
    ];

    /// Bounded metric/log label.
    pub fn reason(&self) -> &'static str {
        match self {
            Hold::ValuesSecretMissing(_) => "values_secret_missing",
            Hold::KeyMissing { .. } => "values_key_missing",
            Hold::Unreadable { .. } => "values_unreadable",
            Hold::NotSet(_) => "name_not_set",
            Hold::BadName { .. } => "bad_name",
            Hold::BadNamespace { .. } => "bad_namespace",
            Hold::SourceMissing(_) => "source_missing",
            Hold::SourceNotTls { .. } => "source_not_tls",
        }
    }
}

/// The values document: only `_cluster` is looked at, as an untyped value so that any other
/// content (and any type of it) is accepted.
#[derive(Debug, serde::Deserialize)]
struct Values {
    #[serde(rename = "_cluster", default)]
    cluster: Option<serde_json::Value>,
}

/// The setting from the values Secret: `found` is `None` when the Secret does not exist,
/// `Some(None)` when it lacks the key, else the key's bytes.
pub fn read_setting(loc: &ValuesLocation, found: Option<Option<&[u8]>>) -> Setting {
    let location = loc.to_string();
    let secret = format!("{}/{}", loc.namespace, loc.name);
    let bytes = match found {
        None => return Setting::Hold(Hold::ValuesSecretMissing(secret)),
        Some(None) => {
            return Setting::Hold(Hold::KeyMissing {
                secret,
                key: loc.key.clone(),
            });
        }
        Some(Some(b)) => b,
    };
    let unreadable = |reason: String| {
        Setting::Hold(Hold::Unreadable {
            location: location.clone(),
            reason,
        })
    };
    let text = match crate::yaml::decode(bytes.to_vec()) {
        Ok(t) => t,
        Err(e) => return unreadable(e.to_string()),
    };
    let values: Values = if text.trim().is_empty() {
        Values { cluster: None }
    } else {
        match crate::yaml::from_document(&text) {
            Ok(v) => v,
            Err(e) => return unreadable(e.to_string()),
        }
    };
    let cluster = match values.cluster {
        None | Some(serde_json::Value::Null) => {
            return Setting::Hold(Hold::NotSet(location));
        }
        Some(serde_json::Value::Object(m)) => m,
        Some(other) => {
            return unreadable(format!("_cluster is {}, not a mapping", kind_of(&other)));
        }
    };
    let name = match cluster.get(NAME_KEY) {
        None | Some(serde_json::Value::Null) => return Setting::Hold(Hold::NotSet(location)),
        Some(serde_json::Value::String(s)) if s.is_empty() => return Setting::Cleared,
        Some(serde_json::Value::String(s)) if is_dns_subdomain(s) => s.clone(),
        Some(other) => {
            return Setting::Hold(Hold::BadName {
                location,
                value: other.to_string(),
            });
        }
    };
    let namespace = match cluster.get(NAMESPACE_KEY) {
        None | Some(serde_json::Value::Null) => DEFAULT_SOURCE_NAMESPACE.to_string(),
        Some(serde_json::Value::String(s)) if s.is_empty() => DEFAULT_SOURCE_NAMESPACE.to_string(),
        Some(serde_json::Value::String(s)) if is_dns_label(s) => s.clone(),
        Some(other) => {
            return Setting::Hold(Hold::BadNamespace {
                location,
                value: other.to_string(),
            });
        }
    };
    Setting::Replicate { namespace, name }
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a mapping",
    }
}

/// Whether `ns` should hold a replica of a Secret from `source_namespace`: not the source,
/// not terminating, and its ingress or gateway label names itself.
pub fn is_target(ns: &NamespaceMeta, source_namespace: &str) -> bool {
    if ns.name() == source_namespace || ns.terminating() {
        return false;
    }
    [INGRESS_LABEL, GATEWAY_LABEL]
        .iter()
        .any(|k| ns.label(k) == Some(ns.name()))
}

/// A Secret as observed by a watch.
#[derive(Debug, Clone, Copy)]
pub struct SecretView<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub resource_version: &'a str,
    pub type_: Option<&'a str>,
    pub labels: Option<&'a BTreeMap<String, String>>,
    pub annotations: Option<&'a BTreeMap<String, String>>,
    /// `None` when seen only through the metadata watch of the replicas.
    pub data: Option<&'a BTreeMap<String, ByteString>>,
}

impl SecretView<'_> {
    /// Carries the copy label: it is a replica (ours to update and delete).
    pub fn is_replica(&self) -> bool {
        self.labels
            .and_then(|l| l.get(WILDCARD_COPY_LABEL))
            .is_some_and(|v| v == COPY_LABEL_VALUE)
    }

    fn key(&self) -> (&str, &str) {
        (self.namespace, self.name)
    }
}

/// The content every replica carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    pub name: String,
    pub type_: String,
    pub data: BTreeMap<String, ByteString>,
    /// Value of the source annotation: `namespace/name` of the source.
    pub source: String,
}

/// One step of the plan. Updates and deletes carry the uid / resourceVersion observed, so the
/// API server refuses them if the object changed since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// No Secret of that name in the namespace: create the replica (never over an existing one).
    Create { namespace: String },
    /// The replica differs from the source: apply it at this resourceVersion.
    Update {
        namespace: String,
        resource_version: String,
    },
    /// The replica has another type (immutable): delete it, then create it anew.
    Recreate {
        namespace: String,
        uid: String,
        resource_version: String,
    },
    /// A replica that must go (no longer a target, old source name, or name cleared).
    Delete {
        namespace: String,
        name: String,
        uid: String,
        resource_version: String,
        why: Prune,
    },
    /// A same-named Secret without the copy label: left alone, reported.
    Foreign {
        namespace: String,
        name: String,
        uid: String,
    },
}

impl Action {
    /// Whether executing it writes to the API server (a Foreign only records an event).
    pub fn writes(&self) -> bool {
        !matches!(self, Action::Foreign { .. })
    }
}

/// Why a replica is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prune {
    NotTarget,
    OldName,
    Cleared,
}

/// The outcome of one pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// What replicas carry (when replicating).
    pub replica: Option<Replica>,
    pub actions: Vec<Action>,
    /// Target namespaces (that should hold a replica); `None` while holding.
    pub desired: Option<usize>,
    /// Targets whose replica already equals the source; `None` while holding.
    pub present: Option<usize>,
    pub hold: Option<Hold>,
}

/// The observed Secrets: `named` from the watch on the current name (data included, any
/// label), `replicas` from the watch on the copy label (metadata only). Either may list an
/// object the other lists too.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed<'a> {
    pub named: &'a [SecretView<'a>],
    pub replicas: &'a [SecretView<'a>],
}

/// Everything to do so that the replicas match `setting`.
pub fn plan(setting: &Setting, namespaces: &[Arc<NamespaceMeta>], observed: Observed) -> Plan {
    match setting {
        Setting::Hold(h) => Plan {
            hold: Some(h.clone()),
            ..Plan::default()
        },
        Setting::Cleared => {
            let actions = every_replica(observed)
                .into_iter()
                .map(|s| delete(s, Prune::Cleared))
                .collect();
            Plan {
                actions,
                desired: Some(0),
                present: Some(0),
                ..Plan::default()
            }
        }
        Setting::Replicate { namespace, name } => replicate(namespace, name, namespaces, observed),
    }
}

fn delete(s: &SecretView, why: Prune) -> Action {
    Action::Delete {
        namespace: s.namespace.to_string(),
        name: s.name.to_string(),
        uid: s.uid.to_string(),
        resource_version: s.resource_version.to_string(),
        why,
    }
}

/// Every observed replica once, in (namespace, name) order; the named watch's copy wins (it
/// is the fuller view).
fn every_replica<'a>(observed: Observed<'a>) -> Vec<&'a SecretView<'a>> {
    let mut seen = BTreeMap::new();
    for s in observed.named.iter().chain(observed.replicas) {
        if s.is_replica() {
            seen.entry(s.key()).or_insert(s);
        }
    }
    seen.into_values().collect()
}

fn replicate(
    source_namespace: &str,
    name: &str,
    namespaces: &[Arc<NamespaceMeta>],
    observed: Observed,
) -> Plan {
    let source_key = format!("{source_namespace}/{name}");
    let hold = |h: Hold| Plan {
        hold: Some(h),
        ..Plan::default()
    };
    let Some(source) = observed
        .named
        .iter()
        .find(|s| s.namespace == source_namespace && s.name == name)
    else {
        return hold(Hold::SourceMissing(source_key));
    };
    let type_ = source.type_.unwrap_or("Opaque");
    if type_ != TLS_TYPE {
        return hold(Hold::SourceNotTls {
            secret: source_key,
            type_: type_.to_string(),
        });
    }
    let replica = Replica {
        name: name.to_string(),
        type_: TLS_TYPE.to_string(),
        data: source.data.cloned().unwrap_or_default(),
        source: source_key,
    };
    let targets: BTreeSet<&str> = namespaces
        .iter()
        .filter(|ns| is_target(ns, source_namespace))
        .map(|ns| ns.name())
        .collect();
    let same_name: BTreeMap<&str, &SecretView> = observed
        .named
        .iter()
        .filter(|s| s.name == name)
        .map(|s| (s.namespace, s))
        .collect();
    let mut actions = Vec::new();
    let mut present = 0;
    for &t in &targets {
        let Some(o) = same_name.get(t) else {
            actions.push(Action::Create {
                namespace: t.to_string(),
            });
            continue;
        };
        if !o.is_replica() {
            actions.push(Action::Foreign {
                namespace: t.to_string(),
                name: name.to_string(),
                uid: o.uid.to_string(),
            });
        } else if o.type_.unwrap_or("Opaque") != TLS_TYPE {
            actions.push(Action::Recreate {
                namespace: t.to_string(),
                uid: o.uid.to_string(),
                resource_version: o.resource_version.to_string(),
            });
        } else if up_to_date(o, &replica) {
            present += 1;
        } else {
            actions.push(Action::Update {
                namespace: t.to_string(),
                resource_version: o.resource_version.to_string(),
            });
        }
    }
    for s in every_replica(observed) {
        if s.namespace == source_namespace && s.name == name {
            // The source itself, even if someone labelled it.
            continue;
        }
        if s.name != name {
            actions.push(delete(s, Prune::OldName));
        } else if !targets.contains(s.namespace) {
            actions.push(delete(s, Prune::NotTarget));
        }
    }
    Plan {
        desired: Some(targets.len()),
        present: Some(present),
        replica: Some(replica),
        actions,
        hold: None,
    }
}

/// The replica carries exactly the source's type and data, the copy label and the source
/// annotation (other labels and annotations are someone else's and do not matter).
fn up_to_date(o: &SecretView, want: &Replica) -> bool {
    let empty = BTreeMap::new();
    o.type_ == Some(want.type_.as_str())
        && o.data.unwrap_or(&empty) == &want.data
        && o.annotations
            .and_then(|a| a.get(crate::platform::WILDCARD_SOURCE_ANNOTATION))
            .is_some_and(|v| *v == want.source)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use crate::platform::WILDCARD_SOURCE_ANNOTATION;

    fn loc() -> ValuesLocation {
        ValuesLocation::default()
    }

    fn setting_of(yaml: &str) -> Setting {
        read_setting(&loc(), Some(Some(yaml.as_bytes())))
    }

    fn replicate(ns: &str, name: &str) -> Setting {
        Setting::Replicate {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn values_to_setting() {
        let cases: &[(&str, Setting)] = &[
            (
                "_cluster:\n  wildcard-secret-name: wild\n",
                replicate("tenant-root", "wild"),
            ),
            (
                "_cluster:\n  wildcard-secret-name: wild\n  expose-ingress: tenant-edge\n",
                replicate("tenant-edge", "wild"),
            ),
            (
                "_cluster:\n  wildcard-secret-name: wild.tls\n  expose-ingress: \"\"\n",
                replicate("tenant-root", "wild.tls"),
            ),
            (
                "_cluster:\n  wildcard-secret-name: wild\n  expose-ingress: ~\n",
                replicate("tenant-root", "wild"),
            ),
            // Other content of any shape is not looked at.
            (
                "_namespace: {host: x}\nother: [1, 2]\n_cluster:\n  root-host: example.org\n  wildcard-secret-name: w\n  extra: {a: [b]}\n",
                replicate("tenant-root", "w"),
            ),
            // YAML as kubectl reads it: a merge key.
            (
                "base: &b {wildcard-secret-name: merged}\n_cluster:\n  <<: *b\n",
                replicate("tenant-root", "merged"),
            ),
            (
                "_cluster:\n  wildcard-secret-name: \"\"\n",
                Setting::Cleared,
            ),
            ("_cluster:\n  wildcard-secret-name: ''\n", Setting::Cleared),
        ];
        for (yaml, want) in cases {
            assert_eq!(&setting_of(yaml), want, "{yaml}");
        }
    }

    #[test]
    fn values_that_hold() {
        let l = loc();
        assert_eq!(
            read_setting(&l, None),
            Setting::Hold(Hold::ValuesSecretMissing(
                "cozy-system/cozystack-values".into()
            ))
        );
        assert_eq!(
            read_setting(&l, Some(None)),
            Setting::Hold(Hold::KeyMissing {
                secret: "cozy-system/cozystack-values".into(),
                key: "values.yaml".into()
            })
        );
        let cases: &[(&str, &str)] = &[
            ("", "name_not_set"),
            ("# nothing\n", "name_not_set"),
            ("other: 1\n", "name_not_set"),
            ("_cluster: ~\n", "name_not_set"),
            ("_cluster:\n  root-host: example.org\n", "name_not_set"),
            ("_cluster:\n  wildcard-secret-name: ~\n", "name_not_set"),
            ("_cluster: [a]\n", "values_unreadable"),
            ("_cluster: text\n", "values_unreadable"),
            (
                "_cluster: {wildcard-secret-name: [unclosed\n",
                "values_unreadable",
            ),
            ("- a list\n", "values_unreadable"),
            ("_cluster:\n  wildcard-secret-name: 42\n", "bad_name"),
            ("_cluster:\n  wildcard-secret-name: Wild\n", "bad_name"),
            ("_cluster:\n  wildcard-secret-name: \" wild\"\n", "bad_name"),
            ("_cluster:\n  wildcard-secret-name: wild_tls\n", "bad_name"),
            ("_cluster:\n  wildcard-secret-name: -wild\n", "bad_name"),
            ("_cluster:\n  wildcard-secret-name: a..b\n", "bad_name"),
            ("_cluster:\n  wildcard-secret-name: [a]\n", "bad_name"),
            (
                "_cluster:\n  wildcard-secret-name: w\n  expose-ingress: a.b\n",
                "bad_namespace",
            ),
            (
                "_cluster:\n  wildcard-secret-name: w\n  expose-ingress: 7\n",
                "bad_namespace",
            ),
        ];
        for (yaml, reason) in cases {
            match setting_of(yaml) {
                Setting::Hold(h) => assert_eq!(h.reason(), *reason, "{yaml}: {h}"),
                other => panic!("{yaml}: expected a hold ({reason}), got {other:?}"),
            }
        }
        let long = format!("_cluster:\n  wildcard-secret-name: {}\n", "a".repeat(254));
        assert!(matches!(
            setting_of(&long),
            Setting::Hold(Hold::BadName { .. })
        ));
        let ok = format!("_cluster:\n  wildcard-secret-name: {}\n", "a".repeat(63));
        assert!(matches!(setting_of(&ok), Setting::Replicate { .. }));
        // Messages name the place to fix.
        let Setting::Hold(h) = setting_of("_cluster:\n  wildcard-secret-name: Wild\n") else {
            panic!("hold");
        };
        let msg = h.to_string();
        assert!(
            msg.contains("cozy-system/cozystack-values") && msg.contains("\"Wild\""),
            "{msg}"
        );
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Test namespaces, made into index entries by `views`.
    struct Ns {
        name: String,
        labels: BTreeMap<String, String>,
        terminating: bool,
    }

    fn ns(name: &str, pairs: &[(&str, &str)]) -> Ns {
        Ns {
            name: name.into(),
            labels: labels(pairs),
            terminating: false,
        }
    }

    fn own_gateway(name: &str) -> Ns {
        ns(name, &[(GATEWAY_LABEL, name)])
    }

    fn views(list: &[Ns]) -> Vec<Arc<NamespaceMeta>> {
        list.iter()
            .map(|n| {
                Arc::new(NamespaceMeta::from_meta(&ObjectMeta {
                    name: Some(n.name.clone()),
                    labels: Some(n.labels.clone()),
                    deletion_timestamp: n
                        .terminating
                        .then(|| Time("2026-12-01T11:32:29Z".parse().expect("a timestamp"))),
                    ..ObjectMeta::default()
                }))
            })
            .collect()
    }

    #[derive(Clone)]
    struct Sec {
        ns: String,
        name: String,
        uid: String,
        rv: String,
        type_: Option<String>,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
        data: Option<BTreeMap<String, ByteString>>,
    }

    fn data(cert: &str) -> BTreeMap<String, ByteString> {
        BTreeMap::from([
            ("tls.crt".to_string(), ByteString(cert.as_bytes().to_vec())),
            ("tls.key".to_string(), ByteString(b"key".to_vec())),
        ])
    }

    fn source(ns: &str, name: &str, cert: &str) -> Sec {
        Sec {
            ns: ns.into(),
            name: name.into(),
            uid: format!("uid-{ns}-{name}"),
            rv: "1".into(),
            type_: Some(TLS_TYPE.into()),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            data: Some(data(cert)),
        }
    }

    /// A replica as we write it, copying `cert` from `from`.
    fn copy(ns: &str, name: &str, cert: &str, from: &str) -> Sec {
        Sec {
            labels: labels(&[(WILDCARD_COPY_LABEL, COPY_LABEL_VALUE)]),
            annotations: labels(&[(WILDCARD_SOURCE_ANNOTATION, from)]),
            rv: "7".into(),
            ..source(ns, name, cert)
        }
    }

    /// The metadata-only view of the label watch.
    fn meta(s: &Sec) -> Sec {
        Sec {
            data: None,
            type_: None,
            ..s.clone()
        }
    }

    fn sviews(list: &[Sec]) -> Vec<SecretView<'_>> {
        list.iter()
            .map(|s| SecretView {
                namespace: &s.ns,
                name: &s.name,
                uid: &s.uid,
                resource_version: &s.rv,
                type_: s.type_.as_deref(),
                labels: Some(&s.labels),
                annotations: Some(&s.annotations),
                data: s.data.as_ref(),
            })
            .collect()
    }

    fn run(setting: &Setting, nss: &[Ns], named: &[Sec], replicas: &[Sec]) -> Plan {
        let n = views(nss);
        let a = sviews(named);
        let b = sviews(replicas);
        plan(
            setting,
            &n,
            Observed {
                named: &a,
                replicas: &b,
            },
        )
    }

    fn create(ns: &str) -> Action {
        Action::Create {
            namespace: ns.into(),
        }
    }

    fn del(s: &Sec, why: Prune) -> Action {
        Action::Delete {
            namespace: s.ns.clone(),
            name: s.name.clone(),
            uid: s.uid.clone(),
            resource_version: s.rv.clone(),
            why,
        }
    }

    #[test]
    fn targets_are_namespaces_whose_gateway_or_ingress_label_names_themselves() {
        let mut terminating = own_gateway("tenant-gone");
        terminating.terminating = true;
        let nss = [
            own_gateway("tenant-root"),
            own_gateway("tenant-alice"),
            ns("tenant-bob", &[(INGRESS_LABEL, "tenant-bob")]),
            ns(
                "tenant-both",
                &[
                    (INGRESS_LABEL, "tenant-root"),
                    (GATEWAY_LABEL, "tenant-both"),
                ],
            ),
            // Inheriting from a parent: not a target.
            ns(
                "tenant-child",
                &[
                    (GATEWAY_LABEL, "tenant-alice"),
                    (INGRESS_LABEL, "tenant-root"),
                ],
            ),
            ns("tenant-bare", &[]),
            // The value must equal the name exactly.
            ns("tenant-case", &[(GATEWAY_LABEL, "Tenant-case")]),
            ns("tenant-other", &[("example.com/gateway", "tenant-other")]),
            terminating,
        ];
        let p = run(
            &replicate("tenant-root", "wild"),
            &nss,
            &[source("tenant-root", "wild", "v1")],
            &[],
        );
        assert_eq!(
            p.actions,
            vec![
                create("tenant-alice"),
                create("tenant-bob"),
                create("tenant-both")
            ]
        );
        assert_eq!((p.desired, p.present, p.hold), (Some(3), Some(0), None));
        let r = p.replica.expect("replica");
        assert_eq!(r.name, "wild");
        assert_eq!(r.type_, TLS_TYPE);
        assert_eq!(r.data, data("v1"));
        assert_eq!(r.source, "tenant-root/wild");
        // No labels map at all.
        let n = NamespaceMeta::from_meta(&ObjectMeta {
            name: Some("x".into()),
            ..ObjectMeta::default()
        });
        assert!(!is_target(&n, "tenant-root"));
    }

    #[test]
    fn replicas_follow_the_source_and_nothing_is_written_when_equal() {
        let nss = [
            own_gateway("tenant-root"),
            own_gateway("tenant-a"),
            own_gateway("tenant-b"),
        ];
        let src = source("tenant-root", "wild", "v2");
        let fresh = copy("tenant-a", "wild", "v2", "tenant-root/wild");
        let stale = copy("tenant-b", "wild", "v1", "tenant-root/wild");
        let named = [src.clone(), fresh.clone(), stale.clone()];
        let p = run(
            &replicate("tenant-root", "wild"),
            &nss,
            &named,
            &[meta(&fresh), meta(&stale)],
        );
        assert_eq!(
            p.actions,
            vec![Action::Update {
                namespace: "tenant-b".into(),
                resource_version: "7".into()
            }]
        );
        assert_eq!((p.desired, p.present), (Some(2), Some(1)));

        // Converged: zero actions.
        let b = copy("tenant-b", "wild", "v2", "tenant-root/wild");
        let p = run(
            &replicate("tenant-root", "wild"),
            &nss,
            &[src.clone(), fresh.clone(), b.clone()],
            &[meta(&fresh), meta(&b)],
        );
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        assert_eq!((p.desired, p.present), (Some(2), Some(2)));

        // Each difference is an update: a key more, a missing annotation, a foreign source
        // annotation. Extra labels and annotations of others are not.
        let mut extra_key = b.clone();
        extra_key
            .data
            .as_mut()
            .expect("data")
            .insert("ca.crt".into(), ByteString(b"x".to_vec()));
        let mut no_annotation = b.clone();
        no_annotation.annotations.clear();
        let other_source = copy("tenant-b", "wild", "v2", "tenant-edge/wild");
        for changed in [extra_key, no_annotation, other_source] {
            let p = run(
                &replicate("tenant-root", "wild"),
                &nss,
                &[src.clone(), fresh.clone(), changed.clone()],
                &[meta(&fresh), meta(&changed)],
            );
            assert_eq!(
                p.actions,
                vec![Action::Update {
                    namespace: "tenant-b".into(),
                    resource_version: "7".into()
                }]
            );
        }
        let mut decorated = b.clone();
        decorated.labels.insert("team".into(), "x".into());
        decorated.annotations.insert("note".into(), "kept".into());
        let p = run(
            &replicate("tenant-root", "wild"),
            &nss,
            &[src, fresh.clone(), decorated.clone()],
            &[meta(&fresh), meta(&decorated)],
        );
        assert!(p.actions.is_empty(), "{:?}", p.actions);
    }

    #[test]
    fn a_same_named_secret_without_the_label_is_never_written() {
        let nss = [own_gateway("tenant-a"), own_gateway("tenant-b")];
        let src = source("tenant-root", "wild", "v1");
        let mut foreign = source("tenant-a", "wild", "theirs");
        foreign.uid = "foreign-uid".into();
        // Label present but not "true": still not ours.
        let mut half = copy("tenant-b", "wild", "old", "tenant-root/wild");
        half.labels
            .insert(WILDCARD_COPY_LABEL.into(), "false".into());
        let p = run(
            &replicate("tenant-root", "wild"),
            &nss,
            &[src, foreign, half.clone()],
            &[],
        );
        assert_eq!(
            p.actions,
            vec![
                Action::Foreign {
                    namespace: "tenant-a".into(),
                    name: "wild".into(),
                    uid: "foreign-uid".into()
                },
                Action::Foreign {
                    namespace: "tenant-b".into(),
                    name: "wild".into(),
                    uid: half.uid.clone()
                },
            ]
        );
        assert!(p.actions.iter().all(|a| !a.writes()));
        assert_eq!(p.present, Some(0));
    }

    #[test]
    fn a_replica_of_another_type_is_recreated() {
        let nss = [own_gateway("tenant-a")];
        let mut odd = copy("tenant-a", "wild", "v1", "tenant-root/wild");
        odd.type_ = Some("Opaque".into());
        let p = run(
            &replicate("tenant-root", "wild"),
            &nss,
            &[source("tenant-root", "wild", "v1"), odd.clone()],
            &[meta(&odd)],
        );
        assert_eq!(
            p.actions,
            vec![Action::Recreate {
                namespace: "tenant-a".into(),
                uid: odd.uid.clone(),
                resource_version: "7".into()
            }]
        );
    }

    #[test]
    fn pruning_of_non_targets_old_names_and_a_cleared_name() {
        let nss = [
            own_gateway("tenant-root"),
            own_gateway("tenant-a"),
            // Stopped owning its Gateway.
            ns("tenant-b", &[(GATEWAY_LABEL, "tenant-root")]),
        ];
        let src = source("tenant-root", "wild", "v1");
        let a = copy("tenant-a", "wild", "v1", "tenant-root/wild");
        let b = copy("tenant-b", "wild", "v1", "tenant-root/wild");
        let old = copy("tenant-a", "old-wild", "v0", "tenant-root/old-wild");
        // A replica left in a namespace that is gone from the index.
        let orphan = copy("tenant-gone", "wild", "v1", "tenant-root/wild");
        // The source carrying the label (someone copied a replica to make it): never pruned.
        let mut labelled_source = src.clone();
        labelled_source
            .labels
            .insert(WILDCARD_COPY_LABEL.into(), COPY_LABEL_VALUE.into());
        let unrelated = source("tenant-b", "other", "x");
        let named = [
            labelled_source.clone(),
            a.clone(),
            b.clone(),
            orphan.clone(),
        ];
        let replicas = [
            meta(&a),
            meta(&b),
            meta(&old),
            meta(&orphan),
            meta(&labelled_source),
        ];
        let p = run(&replicate("tenant-root", "wild"), &nss, &named, &replicas);
        assert_eq!(
            p.actions,
            vec![
                del(&old, Prune::OldName),
                del(&b, Prune::NotTarget),
                del(&orphan, Prune::NotTarget),
            ]
        );
        assert_eq!((p.desired, p.present), (Some(1), Some(1)));

        // Name explicitly "": every replica goes, the source and other Secrets stay.
        let p = run(
            &Setting::Cleared,
            &nss,
            &[src.clone(), a.clone(), unrelated.clone()],
            &replicas,
        );
        let mut want = vec![
            del(&labelled_source, Prune::Cleared),
            del(&a, Prune::Cleared),
            del(&old, Prune::Cleared),
            del(&b, Prune::Cleared),
            del(&orphan, Prune::Cleared),
        ];
        let key = |x: &Action| match x {
            Action::Delete {
                namespace, name, ..
            } => (namespace.clone(), name.clone()),
            _ => (String::new(), String::new()),
        };
        want.sort_by_key(key);
        assert_eq!(p.actions, want);
        assert_eq!((p.desired, p.present), (Some(0), Some(0)));
        // Unlabelled Secrets are never in a cleared plan.
        assert!(
            p.actions
                .iter()
                .all(|x| key(x) != ("tenant-b".into(), "other".into()))
        );
    }

    #[test]
    fn transient_absence_writes_and_prunes_nothing() {
        let nss = [own_gateway("tenant-a"), ns("tenant-b", &[])];
        let a = copy("tenant-a", "wild", "v1", "tenant-root/wild");
        let b = copy("tenant-b", "wild", "v1", "tenant-root/wild");
        let old = copy("tenant-a", "old", "v1", "tenant-root/old");
        let replicas = [meta(&a), meta(&b), meta(&old)];
        let mut opaque = source("tenant-root", "wild", "v2");
        opaque.type_ = Some("Opaque".into());
        let mut untyped = source("tenant-root", "wild", "v2");
        untyped.type_ = None;
        let holds: Vec<(Setting, Vec<Sec>, &str)> = vec![
            (
                read_setting(&loc(), None),
                vec![a.clone(), b.clone()],
                "values_secret_missing",
            ),
            (
                read_setting(&loc(), Some(None)),
                vec![a.clone()],
                "values_key_missing",
            ),
            (
                setting_of("_cluster: {}\n"),
                vec![a.clone()],
                "name_not_set",
            ),
            (
                setting_of(": : :\n\t"),
                vec![a.clone()],
                "values_unreadable",
            ),
            (
                replicate("tenant-root", "wild"),
                vec![a.clone(), b.clone()],
                "source_missing",
            ),
            (
                replicate("tenant-root", "wild"),
                vec![opaque, a.clone(), b.clone()],
                "source_not_tls",
            ),
            (
                replicate("tenant-root", "wild"),
                vec![untyped, a.clone()],
                "source_not_tls",
            ),
        ];
        for (setting, named, reason) in holds {
            let p = run(&setting, &nss, &named, &replicas);
            assert!(p.actions.is_empty(), "{reason}: {:?}", p.actions);
            assert_eq!(p.hold.as_ref().map(Hold::reason), Some(reason));
            assert_eq!((p.desired, p.present), (None, None), "{reason}");
        }
    }

    #[test]
    fn a_moved_source_namespace_updates_annotations_and_skips_the_new_source() {
        // expose-ingress moved to tenant-edge: tenant-root becomes an ordinary target.
        let nss = [own_gateway("tenant-root"), own_gateway("tenant-edge")];
        let src = source("tenant-edge", "wild", "v1");
        let former = source("tenant-root", "wild", "v1");
        let p = run(
            &replicate("tenant-edge", "wild"),
            &nss,
            &[src, former.clone()],
            &[],
        );
        // The old operator Secret is not ours: reported, not written.
        assert_eq!(
            p.actions,
            vec![Action::Foreign {
                namespace: "tenant-root".into(),
                name: "wild".into(),
                uid: former.uid.clone()
            }]
        );
        assert_eq!(p.replica.expect("replica").source, "tenant-edge/wild");
    }

    #[test]
    fn hold_reasons_are_listed() {
        let l = "x".to_string();
        let all = [
            Hold::ValuesSecretMissing(l.clone()),
            Hold::KeyMissing {
                secret: l.clone(),
                key: l.clone(),
            },
            Hold::Unreadable {
                location: l.clone(),
                reason: l.clone(),
            },
            Hold::NotSet(l.clone()),
            Hold::BadName {
                location: l.clone(),
                value: l.clone(),
            },
            Hold::BadNamespace {
                location: l.clone(),
                value: l.clone(),
            },
            Hold::SourceMissing(l.clone()),
            Hold::SourceNotTls {
                secret: l.clone(),
                type_: l,
            },
        ];
        let reasons: BTreeSet<&str> = all.iter().map(Hold::reason).collect();
        assert_eq!(reasons, Hold::REASONS.into_iter().collect());
    }
}
