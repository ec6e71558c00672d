//! The AdmissionReview envelope as the API server sends it (SPEC §2.1): the fields of
//! `request` the pipeline reads, decoded borrowing from the body ([`AdmissionRequest`]), and
//! the envelope checks a decoded review must pass before it is decided ([`check_envelope`]).
//! The object itself is decoded by `project` while the envelope is parsed.
//!
//! The uid of a review is `request.uid`, a string, empty being none; when `request` comes
//! twice, the last one's. A review the typed decode takes is answered with the uid it
//! decoded; every other answer that names the request reads it through
//! [`uid_and_operation`] ([`review_uid`] from bytes; [`review_uid_checked`] from a body that
//! must be JSON throughout, for the server's benchmark baseline), which keeps reading past
//! what the typed decode refuses (a duplicate key, a `request` that is not an object, a
//! wrong type or a depth further on). The typed decode takes the envelope and `request`
//! only as JSON objects ([`Object`]), as the scan does, so the two cannot read different
//! uids from one body (`every_answer_names_the_uid_read_one_way`), and a review the typed
//! decode takes is still read once.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::project;
use super::resource::WebhookResource;

/// The only AdmissionReview version we speak (the API server sends what we register).
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";

/// `request.kind` / `request.resource` as sent by the API server. Strings borrow from the
/// body where they have no escapes: a review is decoded with a handful of allocations.
#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct GroupVersionKind<'a> {
    #[serde(borrow, default)]
    pub(super) kind: Cow<'a, str>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct GroupVersionResource<'a> {
    #[serde(borrow, default)]
    pub(super) group: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(super) version: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(super) resource: Cow<'a, str>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(super) struct UserInfo<'a> {
    #[serde(borrow, default)]
    pub(super) username: Option<Cow<'a, str>>,
    /// Borrowed: a review carries a handful of groups and most need no unescaping.
    #[serde(borrow, default)]
    pub(super) groups: Option<Vec<Cow<'a, str>>>,
}

/// The fields of `request` we read; everything else is ignored.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest<'a> {
    #[serde(borrow)]
    pub(super) uid: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) kind: GroupVersionKind<'a>,
    #[serde(borrow)]
    pub(super) resource: GroupVersionResource<'a>,
    #[serde(borrow, default)]
    pub(super) sub_resource: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) namespace: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(super) operation: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(super) user_info: UserInfo<'a>,
    /// Only the fields the layer reads are decoded (`project`).
    #[serde(borrow, default)]
    pub(super) object: Option<project::ObjectField<'a>>,
    #[serde(borrow, default)]
    pub(super) old_object: Option<project::ObjectField<'a>>,
}

impl<'a> AdmissionRequest<'a> {
    /// A CREATE request for `object` by the given caller: what `check` evaluates.
    pub fn create_for(
        uid: String,
        target: WebhookResource,
        api_version: &str,
        namespace: Option<String>,
        object: &'a RawValue,
        username: String,
        groups: Vec<String>,
    ) -> AdmissionRequest<'a> {
        let version = api_version
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        // The path's API resource of the object's group (ListenerSet or XListenerSet).
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let api = target
            .api_resources()
            .iter()
            .find(|a| a.group == group)
            .unwrap_or(target.primary());
        AdmissionRequest {
            uid: uid.into(),
            kind: GroupVersionKind {
                kind: api.kind.into(),
            },
            resource: GroupVersionResource {
                group: api.group.into(),
                version: version.into(),
                resource: api.resource.into(),
            },
            sub_resource: None,
            // The projection reads metadata.name when the request carries none.
            name: None,
            namespace: namespace.map(Cow::Owned),
            operation: "CREATE".into(),
            user_info: UserInfo {
                username: Some(username.into()),
                groups: Some(groups.into_iter().map(Cow::Owned).collect()),
            },
            object: Some(project::ObjectField::Raw(object)),
            old_object: None,
        }
    }

    /// The same request as an UPDATE of `old` (what `check` sends for an object that
    /// already exists in the cluster it reads).
    pub fn into_update(mut self, old: &'a RawValue) -> AdmissionRequest<'a> {
        self.operation = "UPDATE".into();
        self.old_object = Some(project::ObjectField::Raw(old));
        self
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Envelope<'a> {
    #[serde(borrow, default)]
    pub(super) api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) request: Option<Object<AdmissionRequest<'a>>>,
}

/// A struct decoded from a JSON object only. serde's derived decoding of a struct also takes
/// a JSON array, field by field in declaration order, where the scan ([`uid_and_operation`])
/// sees no uid; this takes the object through the same derived code and refuses anything
/// else with the message the derived code gives ("expected struct <name>").
#[derive(Debug)]
pub(super) struct Object<T>(pub(super) T);

/// The name serde's derived code gives the struct in its messages.
pub(super) trait StructName {
    const NAME: &'static str;
}

impl StructName for Envelope<'_> {
    const NAME: &'static str = "Envelope";
}

impl StructName for AdmissionRequest<'_> {
    const NAME: &'static str = "AdmissionRequest";
}

impl<'de, T: Deserialize<'de> + StructName> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + StructName> Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "struct {}", T::NAME)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Object)
            }
        }
        d.deserialize_map(ObjectVisitor(PhantomData))
    }
}

pub(super) fn check_envelope(e: &Envelope) -> Result<(), String> {
    match e.api_version.as_deref() {
        Some(ADMISSION_API_VERSION) => {}
        Some(other) => {
            return Err(format!(
                "not a usable AdmissionReview: apiVersion {other:?} is not supported, register the webhook with admissionReviewVersions: [v1]"
            ));
        }
        None => {
            return Err(
                "not a usable AdmissionReview: apiVersion is missing (expected admission.k8s.io/v1)"
                    .to_string(),
            );
        }
    }
    if e.kind.as_deref() != Some("AdmissionReview") {
        return Err(format!(
            "not a usable AdmissionReview: kind is {:?}, expected \"AdmissionReview\"",
            e.kind.as_deref().unwrap_or("")
        ));
    }
    if let Some(Object(r)) = &e.request
        && r.uid.is_empty()
    {
        return Err("not a usable AdmissionReview: request.uid is empty".to_string());
    }
    Ok(())
}

/// The uid of a review from its bytes, as `uid_and_operation` reads it; none for a body
/// that is not UTF-8 (so not JSON). For an answer that must name the request without a
/// decoded one (the server's answer for a handler that panicked).
pub fn review_uid(body: &[u8]) -> Option<String> {
    uid_and_operation(std::str::from_utf8(body).ok()?).0
}

/// Why a body is not JSON, for a 400 answer.
#[derive(Debug, thiserror::Error)]
pub enum NotJson {
    #[error("invalid UTF-8 at byte {0}")]
    Utf8(usize),
    #[error(transparent)]
    Syntax(#[from] serde_json::Error),
}

/// The uid of a review from its bytes, as [`review_uid`] reads it, from a body that must be
/// JSON throughout (UTF-8, no syntax error, nothing after the value). For a handler that
/// answers from the uid alone: the server's benchmark baseline.
pub fn review_uid_checked(body: &[u8]) -> Result<Option<String>, NotJson> {
    let body = std::str::from_utf8(body).map_err(|e| NotJson::Utf8(e.valid_up_to()))?;
    let (uid, _, read) = read_uid_and_operation(body);
    read?;
    Ok(uid)
}

/// `request.uid` and `request.operation` of a body, as far as they can be read: each is kept
/// as soon as it is seen, so an error later in the body (too deep, wrong shape elsewhere)
/// does not lose them. Nothing else is kept.
pub(super) fn uid_and_operation(body: &str) -> (Option<String>, Option<String>) {
    let (uid, operation, _) = read_uid_and_operation(body);
    (uid, operation)
}

/// [`uid_and_operation`], and the error that ended the reading, if any (trailing characters
/// included).
fn read_uid_and_operation(
    body: &str,
) -> (
    Option<String>,
    Option<String>,
    Result<(), serde_json::Error>,
) {
    use serde::de::{DeserializeSeed, IgnoredAny};

    #[derive(Default)]
    struct Found {
        uid: Option<String>,
        operation: Option<String>,
    }

    /// A string value, or anything else skipped.
    struct MaybeString(Option<String>);
    impl<'de> serde::Deserialize<'de> for MaybeString {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = MaybeString;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("any value")
                }
                fn visit_str<E>(self, v: &str) -> Result<MaybeString, E> {
                    Ok(MaybeString(Some(v.to_string())))
                }
                fn visit_bool<E>(self, _: bool) -> Result<MaybeString, E> {
                    Ok(MaybeString(None))
                }
                fn visit_i64<E>(self, _: i64) -> Result<MaybeString, E> {
                    Ok(MaybeString(None))
                }
                fn visit_u64<E>(self, _: u64) -> Result<MaybeString, E> {
                    Ok(MaybeString(None))
                }
                fn visit_f64<E>(self, _: f64) -> Result<MaybeString, E> {
                    Ok(MaybeString(None))
                }
                fn visit_unit<E>(self) -> Result<MaybeString, E> {
                    Ok(MaybeString(None))
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(
                    self,
                    mut a: A,
                ) -> Result<MaybeString, A::Error> {
                    while a.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(MaybeString(None))
                }
                fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<MaybeString, A::Error> {
                    while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(MaybeString(None))
                }
            }
            d.deserialize_any(V)
        }
    }

    /// Visits the envelope (`inner: false`) or `request` (`inner: true`).
    struct Seed<'f> {
        found: &'f mut Found,
        inner: bool,
    }
    impl<'de> DeserializeSeed<'de> for Seed<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    // Anything but an object is skipped, not an error: a later `request` (a duplicate key;
    // the last one is the one a JSON reader keeps) may still carry the uid.
    impl<'de> Visitor<'de> for Seed<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any value")
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
            while a.next_element::<IgnoredAny>()?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
            while let Some(key) = a.next_key::<std::borrow::Cow<'de, str>>()? {
                match (self.inner, key.as_ref()) {
                    (false, "request") => a.next_value_seed(Seed {
                        found: &mut *self.found,
                        inner: true,
                    })?,
                    (true, "uid") => self.found.uid = a.next_value::<MaybeString>()?.0,
                    (true, "operation") => self.found.operation = a.next_value::<MaybeString>()?.0,
                    _ => {
                        a.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }

    let mut found = Found::default();
    let mut de = serde_json::Deserializer::from_str(body);
    // An error ends the reading (the typed decode refused the body or will); what was read
    // before it is kept.
    let read = Seed {
        found: &mut found,
        inner: false,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    (found.uid.filter(|u| !u.is_empty()), found.operation, read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_and_operation_survive_later_errors() {
        let deep = "[".repeat(300);
        let body =
            format!(r#"{{"request": {{"uid": "u-1", "operation": "CREATE", "object": {deep}}}}}"#);
        assert_eq!(
            uid_and_operation(&body),
            (Some("u-1".into()), Some("CREATE".into()))
        );
        assert_eq!(
            uid_and_operation(r#"{"request": {"uid": 5, "kind": 1}}"#),
            (None, None)
        );
        assert_eq!(
            uid_and_operation(r#"{"kind": {"uid": "x"}, "request": {"uid": "a\nb"}}"#),
            (Some("a\nb".into()), None),
            "only request.uid, escapes decoded"
        );
        assert_eq!(uid_and_operation("[1]"), (None, None));
        // Found by fuzzing (fuzz/seeds/admission_decode/dup-request.bin): a first `request` that
        // is not an object ended the scan before the second one, which has the uid.
        for first in [r#""s""#, "1", "-1", "1.5", "true", "null", "[1, {}]"] {
            let body = format!(r#"{{"request": {first}, "request": {{"uid": "u-2"}}}}"#);
            assert_eq!(
                uid_and_operation(&body),
                (Some("u-2".to_string()), None),
                "{body}"
            );
        }
        // Duplicates: the last one read wins, as in a JSON reader.
        assert_eq!(
            uid_and_operation(r#"{"request": {"uid": "a"}, "request": {"uid": "b"}}"#).0,
            Some("b".to_string())
        );
    }
}
