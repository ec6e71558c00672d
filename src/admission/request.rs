//! The AdmissionReview envelope as the API server sends it (SPEC §2.1): the fields of
//! `request` the pipeline reads, decoded borrowing from the body ([`AdmissionRequest`]), and
//! the envelope checks a decoded review must pass before it is decided ([`check_envelope`]).
//! The object itself is decoded by `project` while the envelope is parsed.

use std::borrow::Cow;

use serde::Deserialize;
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
    pub(super) request: Option<AdmissionRequest<'a>>,
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
    if let Some(r) = &e.request
        && r.uid.is_empty()
    {
        return Err("not a usable AdmissionReview: request.uid is empty".to_string());
    }
    Ok(())
}
