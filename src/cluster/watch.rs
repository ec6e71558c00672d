//! Guarded watches: one per kind per process. Each object is decoded straight from its JSON
//! into the small type its cache keeps (no `serde_json::Value` tree of the whole object,
//! no managedFields), and one object that does not decode is logged and skipped instead of
//! failing the list (a plain typed watcher fails the whole page and retries forever).
//! "Is this kind served" for optional CRDs. What the caches keep of each object is `kept`.

use std::borrow::Cow;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ApiResource};
use kube::core::DynamicResourceScope;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::projection::{Path, project_json};

/// `(namespace, name)`.
pub type Key = (String, String);

/// A part of an object read on its own: absent (or `null`), decoded, or present but not of
/// the expected shape. Lets a projection keep the rest of an object when one part is
/// malformed.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Lenient<T> {
    #[default]
    Absent,
    Ok(T),
    Bad,
}

impl<T> Lenient<T> {
    pub fn ok(self) -> Option<T> {
        match self {
            Lenient::Ok(t) => Some(t),
            Lenient::Absent | Lenient::Bad => None,
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The part's text is copied once (it is small next to the object) and decoded alone,
        // so a failure stays inside it.
        let raw = Box::<RawValue>::deserialize(d)?;
        if raw.get() == "null" {
            return Ok(Lenient::Absent);
        }
        Ok(serde_json::from_str(raw.get()).map_or(Lenient::Bad, Lenient::Ok))
    }
}

/// The identity of a watched object: what the watcher needs (the resourceVersion to resume
/// from) and what a log line names.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ident {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
}

/// One watched object: its identity, and `T` decoded from the object's JSON or why not.
#[derive(Debug, Clone)]
pub struct Watched<T> {
    meta: ObjectMeta,
    pub body: Result<T, Arc<str>>,
}

impl<T> Watched<T> {
    /// `(namespace, name)`.
    pub fn key(&self) -> Key {
        key_of(&self.meta)
    }

    /// The same object, its decoded body turned into `U`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Watched<U> {
        Watched {
            meta: self.meta,
            body: self.body.map(f),
        }
    }

    /// The decoded object; one that did not decode is logged (fix or delete it) and `None`.
    pub fn decoded(self, what: &str) -> Option<T> {
        match self.body {
            Ok(t) => Some(t),
            Err(e) => {
                let (ns, name) = (
                    self.meta.namespace.unwrap_or_default(),
                    self.meta.name.unwrap_or_default(),
                );
                tracing::warn!(kind = what, namespace = %ns, name = %name, error = %e,
                    "object does not decode; skipped (fix or delete it)");
                None
            }
        }
    }
}

/// How a watched object's JSON becomes what its cache keeps.
pub trait FromWatch: Sized {
    fn from_watch(raw: &str) -> Result<Self, serde_json::Error>;
}

impl<'de, T: FromWatch> Deserialize<'de> for Watched<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Head {
            #[serde(default)]
            metadata: Lenient<Ident>,
        }
        let raw = Box::<RawValue>::deserialize(d)?;
        let ident = serde_json::from_str::<Head>(raw.get())
            .ok()
            .and_then(|h| h.metadata.ok())
            .unwrap_or_default();
        let meta = ObjectMeta {
            name: ident.name,
            namespace: ident.namespace,
            resource_version: ident.resource_version,
            ..ObjectMeta::default()
        };
        let body = T::from_watch(raw.get()).map_err(|e| Arc::from(e.to_string()));
        Ok(Watched { meta, body })
    }
}

impl<T> kube::Resource for Watched<T> {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// The watch events of one kind, decoded into `T`, listed `page_size` objects a page; errors
/// are logged and the watcher backs off and resumes (never ends on an error).
pub fn guarded<T>(
    client: Client,
    resource: &ApiResource,
    what: &'static str,
    page_size: u32,
) -> impl Stream<Item = Event<Watched<T>>> + Send + 'static
where
    T: FromWatch + Clone + std::fmt::Debug + Send + 'static,
{
    let api: Api<Watched<T>> = Api::all_with(client, resource);
    watcher::watcher(api, watcher::Config::default().page_size(page_size))
        .default_backoff()
        .filter_map(move |e| async move {
            match e {
                Ok(ev) => Some(ev),
                Err(e) => {
                    tracing::warn!(kind = what, error = %e, "watch error; retrying with backoff");
                    None
                }
            }
        })
}

/// A kind whose watch can also hand a second reader (a tap) the values on [`Self::TAP_PATHS`]
/// of each object, decoded from the same JSON ([`Tapped`]).
pub trait TapPaths {
    const TAP_PATHS: &'static [Path];
}

/// An object decoded as `T` for its cache and, beside it, its values on `T::TAP_PATHS` for a
/// tap (the continuous audit, SPEC §3.9), so that one watch serves both. A `T` that does not
/// decode leaves the projection whole: the tap judges what is stored.
#[derive(Debug, Clone)]
pub struct Tapped<T> {
    pub inner: Result<T, Arc<str>>,
    pub projection: Value,
}

impl<T: FromWatch + TapPaths> FromWatch for Tapped<T> {
    fn from_watch(raw: &str) -> Result<Self, serde_json::Error> {
        let projection = project_json(raw, T::TAP_PATHS)?;
        let inner = T::from_watch(raw).map_err(|e| Arc::from(e.to_string()));
        Ok(Tapped { inner, projection })
    }
}

impl<T> Watched<Tapped<T>> {
    /// The projection for the tap, and the object for the cache.
    fn split(self) -> (Watched<Value>, Watched<T>) {
        let (tap, own) = match self.body {
            Ok(t) => (Ok(t.projection), t.inner),
            Err(e) => (Err(e.clone()), Err(e)),
        };
        (
            Watched {
                meta: self.meta.clone(),
                body: tap,
            },
            Watched {
                meta: self.meta,
                body: own,
            },
        )
    }
}

/// `ev` as the tap reads it (each object's projection) and as the cache keeps it.
pub fn split_tapped<T>(
    ev: Event<Watched<Tapped<T>>>,
) -> (Event<Watched<Value>>, Event<Watched<T>>) {
    match ev {
        Event::Init => (Event::Init, Event::Init),
        Event::InitApply(o) => {
            let (t, o) = o.split();
            (Event::InitApply(t), Event::InitApply(o))
        }
        Event::Apply(o) => {
            let (t, o) = o.split();
            (Event::Apply(t), Event::Apply(o))
        }
        Event::Delete(o) => {
            let (t, o) = o.split();
            (Event::Delete(t), Event::Delete(o))
        }
        Event::InitDone => (Event::InitDone, Event::InitDone),
    }
}

/// `ev` with each object's decoded body turned into `U`.
pub fn map_event<T, U>(ev: Event<Watched<T>>, f: impl Fn(T) -> U) -> Event<Watched<U>> {
    match ev {
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(o.map(f)),
        Event::Apply(o) => Event::Apply(o.map(f)),
        Event::Delete(o) => Event::Delete(o.map(f)),
        Event::InitDone => Event::InitDone,
    }
}

/// Objects per page of the initial list: a page's text and its decoded objects are held at
/// once, for every kind listing at the same time.
pub const PAGE_SIZE: u32 = 250;

/// Pages of the kinds whose objects grow with their listeners, Gateways and TenantGateways (a
/// status entry per listener): a decoded 42-listener Gateway holds ~175 KB, so a page of
/// [`PAGE_SIZE`] held 44 MB at once (heaptrack of a restart against 300 of them), more than
/// twice the process's whole live heap, and the pages it left behind stayed fragmented.
pub const LARGE_OBJECT_PAGE_SIZE: u32 = 16;

/// `(namespace, name)` of an object's metadata.
pub fn key_of(m: &ObjectMeta) -> Key {
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// The recommended version of `group`/`kind` when the API server serves it.
pub async fn served(client: &Client, group: &str, kind: &str) -> Option<ApiResource> {
    match kube::discovery::group(client, group).await {
        Ok(g) => g.recommended_kind(kind).map(|(r, _)| r),
        Err(e) => {
            tracing::debug!(group, kind, error = %e, "API group not served");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(ns: &str, n: &str) -> Key {
        (ns.to_string(), n.to_string())
    }

    #[derive(Debug, Clone, Deserialize)]
    struct Needs {
        spec: u32,
    }

    impl FromWatch for Needs {
        fn from_watch(raw: &str) -> Result<Self, serde_json::Error> {
            serde_json::from_str(raw)
        }
    }

    #[test]
    fn a_bad_object_in_a_list_is_skipped_not_the_page() {
        let page = r#"{"metadata": {"resourceVersion": "9"}, "items": [
            {"metadata": {"name": "a", "namespace": "n", "resourceVersion": "3"}, "spec": 1},
            {"metadata": {"name": "b", "namespace": "n"}, "spec": "not a number"},
            {"metadata": 7, "spec": 2}
        ]}"#;
        let list: kube::api::ObjectList<Watched<Needs>> =
            serde_json::from_str(page).expect("the page decodes");
        assert_eq!(list.items.len(), 3);
        let [a, b, c] = <[_; 3]>::try_from(list.items).expect("three items");
        assert_eq!(a.key(), k("n", "a"));
        assert_eq!(a.meta.resource_version.as_deref(), Some("3"));
        assert_eq!(a.decoded("X").map(|n| n.spec), Some(1));
        assert_eq!(b.key(), k("n", "b"));
        assert!(b.decoded("X").is_none());
        assert_eq!(
            c.decoded("X").map(|n| n.spec),
            Some(2),
            "odd metadata, body fine"
        );
    }

    #[test]
    fn a_watch_event_decodes_through_the_tagged_envelope() {
        let line = r#"{"type": "MODIFIED", "object":
            {"metadata": {"name": "a", "namespace": "n", "resourceVersion": "4"}, "spec": 5}}"#;
        match serde_json::from_str::<kube::api::WatchEvent<Watched<Needs>>>(line) {
            Ok(kube::api::WatchEvent::Modified(w)) => {
                assert_eq!(w.meta.resource_version.as_deref(), Some("4"));
                assert_eq!(w.decoded("X").map(|n| n.spec), Some(5));
            }
            other => panic!("unexpected {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn lenient_parts_keep_the_rest() {
        #[derive(Deserialize)]
        struct Two {
            #[serde(default)]
            a: Lenient<Vec<String>>,
            #[serde(default)]
            b: Lenient<u8>,
        }
        let t: Two = serde_json::from_str(r#"{"a": [1], "b": 3}"#).expect("decodes");
        assert_eq!((t.a, t.b), (Lenient::Bad, Lenient::Ok(3)));
        let t: Two = serde_json::from_str(r#"{"a": null}"#).expect("decodes");
        assert_eq!((t.a, t.b), (Lenient::Absent, Lenient::Absent));
    }
}
