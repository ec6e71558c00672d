//! Every policy layer on arbitrary objects, callers, namespaces and namespace contexts.
//!
//! Input layout: byte 0 is a header, the rest the object(s).
//! - bits 0-2: the review's namespace (`NAMESPACES`; 7 = the object's `metadata.namespace`)
//! - bit 3: the caller is in a trusted group
//! - bits 4-5: old object: 0 none (CREATE), 1 the object itself, 2 a second document,
//!   3 `{}` (UPDATE)
//! - bit 6: 0 = the rest is JSON text (one or two documents; non-JSON inputs are skipped),
//!   1 = the rest drives a structured JSON generator whose keys and strings are the ones the
//!   layers read (`Key`, `Str`), so deep paths are reached without spelling JSON
//! - bit 7: username: 0 = "alice", 1 = the object's `metadata.generateName` (any text, as the
//!   API server passes any username through), else a service account
//!
//! Each input is evaluated by every layer under every configuration in `configs()` and, for
//! the layers that read it, every namespace context in `contexts()`.
//!
//! Invariants (src/policy): no panic; a `ShapeError` names a field; at most
//! `MAX_VIOLATIONS` (64) violations plus one summary line, none empty; every warning at most
//! 120 bytes; layers 2, 7, 8 admit everything outside tenant scope and fail closed inside it
//! when the namespace has no apex; layers 4 and 5 never deny a trusted caller.
//! With `TG_FUZZ_STRICT=1` also: every violation is under 4096 bytes (the bound the
//! unit test `policy::util::tests::odd_inputs_never_panic` holds messages to). This does not
//! hold yet: `quoted` cuts values to 256 bytes before escaping, so control characters can grow
//! one quoted value to about 1.5 KB, and the Namespace layer's message quotes three (old
//! value, new value, username).

#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use tenant_gateway::policy::{
    self, ApexOwners, DEFAULT_TRUSTED_GROUPS, GATEWAY_LABEL, HOST_LABEL, Layer, NamespaceContext,
    NoApexOwners, Operation, PolicyConfig, Review,
};

/// `policy::util::MAX_VIOLATIONS` (private): violations listed before the summary line.
const MAX_VIOLATIONS: usize = 64;
/// Warnings are relayed by the API server only up to this length (policy::Findings).
const MAX_WARNING: usize = 120;
/// Kubernetes object names are at most this long; longer ones are replaced by "web" so message
/// lengths reflect the object's content, not an impossible name.
const MAX_NAME: usize = 253;

const NAMESPACES: [&str; 7] = [
    "tenant-alice",
    "tenant-root",
    "tenant-nolabel",
    "cozy-system",
    "",
    "default",
    "tenant-",
];

/// Keys the layers read, plus anything else.
#[derive(Arbitrary, Debug)]
enum Key {
    ApiVersion,
    Kind,
    Metadata,
    Name,
    Namespace,
    GenerateName,
    Labels,
    HostLabel,
    GatewayLabel,
    Spec,
    Listeners,
    Hostname,
    Hostnames,
    Rules,
    Host,
    Tls,
    Hosts,
    DefaultBackend,
    Components,
    Platform,
    Values,
    Gateway,
    AttachedNamespaces,
    Annotations,
    ServerAlias,
    ServerSnippet,
    ConfigurationSnippet,
    Other(String),
}

impl Key {
    fn into_string(self) -> String {
        match self {
            Key::ApiVersion => "apiVersion",
            Key::Kind => "kind",
            Key::Metadata => "metadata",
            Key::Name => "name",
            Key::Namespace => "namespace",
            Key::GenerateName => "generateName",
            Key::Labels => "labels",
            Key::HostLabel => HOST_LABEL,
            Key::GatewayLabel => GATEWAY_LABEL,
            Key::Spec => "spec",
            Key::Listeners => "listeners",
            Key::Hostname => "hostname",
            Key::Hostnames => "hostnames",
            Key::Rules => "rules",
            Key::Host => "host",
            Key::Tls => "tls",
            Key::Hosts => "hosts",
            Key::DefaultBackend => "defaultBackend",
            Key::Components => "components",
            Key::Platform => "platform",
            Key::Values => "values",
            Key::Gateway => "gateway",
            Key::AttachedNamespaces => "attachedNamespaces",
            Key::Annotations => "annotations",
            Key::ServerAlias => "nginx.ingress.kubernetes.io/server-alias",
            Key::ServerSnippet => "nginx.ingress.kubernetes.io/server-snippet",
            Key::ConfigurationSnippet => "nginx.ingress.kubernetes.io/configuration-snippet",
            Key::Other(s) => return s,
        }
        .to_string()
    }
}

/// Strings that matter to the layers (apexes, near misses, namespace names), plus anything.
#[derive(Arbitrary, Debug)]
enum Str {
    Apex,
    InApex,
    WildcardInApex,
    Root,
    WildcardRoot,
    OtherTenant,
    CustomDomain,
    /// Within the apex another namespace carries (`OtherOwners`).
    OtherApex,
    /// Several server-alias entries, comma and space separated.
    AliasList,
    Uppercase,
    TrailingDot,
    Star,
    Empty,
    TenantNamespace,
    PlatformNamespace,
    Other(String),
    /// `s` repeated `n` times: long labels and hostnames.
    Repeated(String, u8),
    /// `prefix` + "." + a chosen hostname.
    Prefixed(String, Box<Str>),
}

impl Str {
    fn into_string(self) -> String {
        match self {
            Str::Apex => "alice.example.org".into(),
            Str::InApex => "shop.alice.example.org".into(),
            Str::WildcardInApex => "*.alice.example.org".into(),
            Str::Root => "example.org".into(),
            Str::WildcardRoot => "*.example.org".into(),
            Str::OtherTenant => "shop.bob.example.org".into(),
            Str::CustomDomain => "shop.customer.com".into(),
            Str::OtherApex => "shop.customer1.io".into(),
            Str::AliasList => "shop.alice.example.org, customer1.io  shop.customer.com".into(),
            Str::Uppercase => "Shop.Alice.Example.ORG".into(),
            Str::TrailingDot => "shop.alice.example.org.".into(),
            Str::Star => "*".into(),
            Str::Empty => String::new(),
            Str::TenantNamespace => "tenant-bob".into(),
            Str::PlatformNamespace => "cozy-system".into(),
            Str::Other(s) => s,
            Str::Repeated(s, n) => s.repeat(usize::from(n)),
            Str::Prefixed(p, rest) => format!("{p}.{}", rest.into_string()),
        }
    }
}

/// A JSON value, at most `depth` levels deep (bounded so drops and walks cannot overflow the
/// stack; the layers read at most 7 levels).
fn value(u: &mut Unstructured<'_>, depth: u32) -> Result<Value> {
    let choices = if depth == 0 { 5 } else { 7 };
    Ok(match u.choose_index(choices)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => serde_json::Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        4 => Value::String(u.arbitrary::<Str>()?.into_string()),
        5 => {
            let n = u.int_in_range(0..=8)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(value(u, depth - 1)?);
            }
            Value::Array(items)
        }
        _ => object(u, depth - 1)?,
    })
}

fn object(u: &mut Unstructured<'_>, depth: u32) -> Result<Value> {
    let n = u.int_in_range(0..=6)?;
    let mut map = Map::new();
    for _ in 0..n {
        let key = u.arbitrary::<Key>()?.into_string();
        map.insert(key, value(u, depth)?);
    }
    Ok(Value::Object(map))
}

fn configs() -> &'static [PolicyConfig; 3] {
    static C: OnceLock<[PolicyConfig; 3]> = OnceLock::new();
    C.get_or_init(|| {
        [
            PolicyConfig {
                root_host: Some("example.org".into()),
                ..PolicyConfig::default()
            },
            // No root host: layer 8 cannot run and must deny in tenant scope.
            PolicyConfig::default(),
            PolicyConfig {
                tenant_prefix: String::new(),
                root_host: Some(String::new()),
                trusted_groups: Vec::new(),
                guarded_labels: vec![
                    HOST_LABEL.to_string(),
                    HOST_LABEL.to_string(),
                    "team".to_string(),
                ],
                ..PolicyConfig::default()
            },
        ]
    })
}

fn contexts() -> &'static [NamespaceContext; 5] {
    static C: OnceLock<[NamespaceContext; 5]> = OnceLock::new();
    C.get_or_init(|| {
        let labels = |pairs: &[(&str, &str)]| NamespaceContext::Found {
            labels: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        };
        [
            NamespaceContext::NotFound,
            labels(&[("team", "x")]),
            labels(&[(HOST_LABEL, "")]),
            labels(&[(HOST_LABEL, "alice.example.org")]),
            labels(&[(HOST_LABEL, "Example.ORG")]),
        ]
    })
}

/// `customer1.io` is the apex of `tenant-cust` (layer 8's other-tenant branch).
struct OtherOwners;

impl ApexOwners for OtherOwners {
    fn owned_by_other(&self, apex: &str, except: &str) -> bool {
        apex == "customer1.io" && except != "tenant-cust"
    }
}

fn strict_messages() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| std::env::var_os("TG_FUZZ_STRICT").is_some_and(|v| v == "1"))
}

/// The object and old object the header asks for.
fn documents(header: u8, body: &[u8]) -> Option<(Value, Option<Value>)> {
    let old_mode = (header >> 4) & 3;
    let (object, second) = if header & 0x40 == 0 {
        let mut docs = serde_json::Deserializer::from_slice(body).into_iter::<Value>();
        let object = docs.next()?.ok()?;
        let second = match old_mode {
            2 => Some(docs.next()?.ok()?),
            _ => None,
        };
        (object, second)
    } else {
        let mut u = Unstructured::new(body);
        let object = object(&mut u, 7).ok()?;
        let second = match old_mode {
            2 => Some(value(&mut u, 7).ok()?),
            _ => None,
        };
        (object, second)
    };
    let old = match old_mode {
        0 => None,
        1 => Some(object.clone()),
        2 => second,
        _ => Some(Value::Object(Map::new())),
    };
    Some((object, old))
}

fn check(
    layer: Layer,
    review: &Review<'_>,
    ns: &NamespaceContext,
    others: &dyn ApexOwners,
    cfg: &PolicyConfig,
) {
    let result = policy::evaluate_with(layer, review, ns, others, cfg);
    let findings = match result {
        Err(shape) => {
            assert!(
                !shape.field.is_empty(),
                "{layer}: ShapeError without a field"
            );
            return;
        }
        Ok(f) => f,
    };
    assert!(
        findings.violations.len() <= MAX_VIOLATIONS + 1,
        "{layer}: {} violations",
        findings.violations.len()
    );
    for v in &findings.violations {
        assert!(!v.is_empty(), "{layer}: empty violation");
        if strict_messages() {
            assert!(v.len() < 4096, "{layer}: {}-byte violation: {v}", v.len());
        }
    }
    for w in &findings.warnings {
        // Characters, as `crate::warning` clips them (an ellipsis is one character, three bytes).
        assert!(
            w.chars().count() <= MAX_WARNING,
            "{layer}: {}-character warning: {w}",
            w.chars().count()
        );
    }
    let reads_namespace = matches!(
        layer,
        Layer::Gateway | Layer::Route | Layer::Ingress | Layer::TenantGateway
    );
    // Layer 9 judges a TenantGateway's content on CREATE and on an UPDATE that changes it
    // only (a metadata-only update by a trusted caller passes without an apex).
    let judges_apex = layer != Layer::TenantGateway || review.operation == Operation::Create;
    if reads_namespace {
        if !cfg.in_tenant_scope(review.namespace) {
            assert!(
                findings.violations.is_empty() && findings.warnings.is_empty(),
                "{layer}: finding outside tenant scope ({:?}): {findings:?}",
                review.namespace
            );
        } else if ns.apex().is_none() && judges_apex {
            assert!(
                !findings.violations.is_empty(),
                "{layer}: admitted in tenant namespace {:?} without an apex",
                review.namespace
            );
        }
    }
    if matches!(layer, Layer::Tenant | Layer::Namespace) && cfg.is_trusted(review.groups) {
        assert!(
            findings.violations.is_empty(),
            "{layer}: trusted caller denied: {findings:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&header, body)) = data.split_first() else {
        return;
    };
    let Some((object, old_object)) = documents(header, body) else {
        return;
    };
    let namespace = match NAMESPACES.get(usize::from(header & 7)) {
        Some(ns) => *ns,
        None => object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(""),
    };
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| n.len() <= MAX_NAME)
        .unwrap_or("web");
    let username = if header & 0x80 == 0 {
        "alice"
    } else {
        object
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .unwrap_or("system:serviceaccount:tenant-alice:default")
    };
    let trusted = vec![
        std::borrow::Cow::Borrowed("system:authenticated"),
        std::borrow::Cow::Borrowed(DEFAULT_TRUSTED_GROUPS[2]),
    ];
    let untrusted = vec![std::borrow::Cow::Borrowed("system:authenticated")];
    let groups = if header & 8 != 0 {
        &trusted
    } else {
        &untrusted
    };
    let review = Review {
        operation: if old_object.is_some() {
            Operation::Update
        } else {
            Operation::Create
        },
        kind: "Kind",
        namespace,
        name,
        object: &object,
        old_object: old_object.as_ref(),
        username,
        groups,
    };
    for cfg in configs() {
        for layer in Layer::ALL {
            if matches!(
                layer,
                Layer::Gateway | Layer::Route | Layer::Ingress | Layer::TenantGateway
            ) {
                for ns in contexts() {
                    check(layer, &review, ns, &NoApexOwners, cfg);
                    if layer == Layer::Ingress {
                        check(layer, &review, ns, &OtherOwners, cfg);
                    }
                }
            } else {
                check(
                    layer,
                    &review,
                    &NamespaceContext::NotFound,
                    &NoApexOwners,
                    cfg,
                );
            }
        }
    }
});
