//! Errors of the kube edge of the reconciler: messages say what failed and what happens next;
//! [`Error::metric_label`] is bounded (SPEC §6: never built from error text or names).

/// One failed reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} failed: {source}; retrying with backoff")]
    Kube {
        action: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error(
        "{what} kept changing under the write ({tries} attempts with a fresh resourceVersion); \
         retrying with backoff"
    )]
    Conflict { what: String, tries: usize },
    #[error("cannot encode {what}: {source}")]
    Encode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{what} no longer carries this TenantGateway's controller ownerReference (it changed \
         since it was read); left alone, the next reconcile reports it"
    )]
    NotOwned { what: String },
    #[error("{kind} is not served by the API server (install its CRD); retrying with backoff")]
    NotServed { kind: &'static str },
    #[error("{what} got no answer within {secs} s; retrying with backoff")]
    Timeout { what: String, secs: u64 },
    #[error("planning stopped unexpectedly ({0}); retrying with backoff")]
    Planning(String),
    #[error("finalizer gateway.cozystack.io/cleanup: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Error {
        Error::Kube {
            action: action.into(),
            source: Box::new(source),
        }
    }

    /// A fixed label for `tenant_gateway_reconcile_total{result}`-style counters.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "kube",
            Error::Conflict { .. } => "conflict",
            Error::Encode { .. } => "encode",
            Error::NotOwned { .. } => "not_owned",
            Error::NotServed { .. } => "not_served",
            Error::Timeout { .. } => "timeout",
            Error::Planning(_) => "planning",
            Error::Finalizer(_) => "finalizer",
        }
    }

    /// True when the API server refused on a resourceVersion/uid precondition.
    pub fn is_conflict(e: &kube::Error) -> bool {
        matches!(e, kube::Error::Api(s) if s.code == 409)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded_and_messages_say_what_happens_next() {
        let e = Error::Conflict {
            what: "HTTPRoute tenant-a/r status".into(),
            tries: 5,
        };
        assert_eq!(e.metric_label(), "conflict");
        assert!(e.to_string().contains("retrying with backoff"));
        let e = Error::NotServed { kind: "TLSRoute" };
        assert!(e.to_string().contains("install its CRD"));
    }
}
