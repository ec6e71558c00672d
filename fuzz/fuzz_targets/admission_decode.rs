//! Raw bytes through the AdmissionReview decoder and every policy layer behind it.
//!
//! Input layout: byte 0 picks the webhook path and the enforcement mode, the rest is the HTTP
//! body. `b % 11` is the path (`0..=9` = `WebhookResource::ALL[b]`, 10 = no path, as the
//! offline `review` command routes), `(b / 11) % 3` the mode of every layer (deny, warn, audit).
//!
//! Invariants (src/admission/mod.rs): no panic (libFuzzer aborts on any panic, also one the
//! decoder's `catch_unwind` would have turned into a denial); status 200 or 400; 400 only for
//! a body that is not JSON, with `{"error": "..."}`, and every body that parses as JSON gets
//! 200; 200 is an AdmissionReview whose `response.uid` is a string (the request's uid whenever
//! one can be read) and `response.allowed` a bool; an allowed response has no `status`, a
//! denied one a `status.message`; every warning is at most `MAX_WARNING_LEN` characters.
//!
//! With `TG_FUZZ_STRICT=1` also: a body that is not UTF-8 (so not JSON) gets 400. This does
//! not hold yet: serde's typed decoding skips unknown fields without checking their UTF-8, so
//! `{"":"\xfe"}` gets a 200 denial and a usable review with such a field is decided normally.

#![no_main]

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tenant_gateway::admission::{Admission, MAX_WARNING_LEN, WebhookResource};
use tenant_gateway::cluster::{NamespaceSource, StaticNamespaces};
use tenant_gateway::metrics::Metrics;
use tenant_gateway::policy::{HOST_LABEL, Layer, Mode, PolicyConfig};

struct Fixture {
    rt: tokio::runtime::Runtime,
    /// One decision path per enforcement mode: deny, warn, audit.
    admissions: [Admission; 3],
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let mut snapshot = StaticNamespaces::default();
        let apex = |h: &str| BTreeMap::from([(HOST_LABEL.to_string(), h.to_string())]);
        snapshot.insert("tenant-alice", apex("alice.example.org"));
        snapshot.insert("tenant-root", apex("example.org"));
        snapshot.insert(
            "tenant-nolabel",
            BTreeMap::from([("team".to_string(), "x".to_string())]),
        );
        let namespaces = NamespaceSource::Static(Arc::new(snapshot));
        let admission = |mode: Mode| {
            let mut cfg = PolicyConfig {
                root_host: Some("example.org".into()),
                ..Default::default()
            };
            for layer in Layer::ALL {
                cfg.enforcement.set(layer, mode);
            }
            Admission::new(Arc::new(cfg), namespaces.clone(), Metrics::new())
        };
        Fixture {
            rt: tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("current-thread runtime"),
            admissions: [
                admission(Mode::Deny),
                admission(Mode::Warn),
                admission(Mode::Audit),
            ],
        }
    })
}

fn strict() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| std::env::var_os("TG_FUZZ_STRICT").is_some_and(|v| v == "1"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let fx = fixture();
    let target = WebhookResource::ALL
        .get(usize::from(selector % 11))
        .copied();
    let admission = &fx.admissions[usize::from(selector / 11) % 3];

    let reply = fx.rt.block_on(admission.handle(target, body));

    let as_json = serde_json::from_slice::<Value>(body).ok();
    if strict() && std::str::from_utf8(body).is_err() {
        assert_eq!(reply.status, 400, "a body that is not UTF-8 is not JSON");
    }
    match reply.status {
        400 => {
            assert!(
                as_json.is_none(),
                "400 for a body that is JSON: {:?}",
                String::from_utf8_lossy(&reply.body)
            );
            let v: Value = serde_json::from_slice(&reply.body).expect("400 body is JSON");
            assert!(v["error"].is_string(), "400 body without \"error\": {v}");
        }
        200 => {
            // (200 for a body serde_json cannot read as a Value is fine: numbers beyond f64
            // in fields the decoder skips are still JSON.)
            let v: Value = serde_json::from_slice(&reply.body).expect("200 body is JSON");
            assert_eq!(v["apiVersion"], "admission.k8s.io/v1", "{v}");
            assert_eq!(v["kind"], "AdmissionReview", "{v}");
            let response = &v["response"];
            let uid = response["uid"].as_str().expect("response.uid is a string");
            let allowed = response["allowed"]
                .as_bool()
                .expect("response.allowed is a bool");
            if allowed {
                assert!(
                    response.get("status").is_none(),
                    "allowed response carries a status: {v}"
                );
            } else {
                let message = response["status"]["message"]
                    .as_str()
                    .expect("denied response has status.message");
                assert!(
                    !message.contains("internal error while evaluating"),
                    "a policy layer panicked: {message}"
                );
            }
            if let Some(warnings) = response.get("warnings") {
                let warnings = warnings.as_array().expect("warnings is a list");
                assert!(!warnings.is_empty(), "empty warnings list is emitted");
                for w in warnings {
                    let w = w.as_str().expect("warning is a string");
                    assert!(
                        w.chars().count() <= MAX_WARNING_LEN,
                        "warning longer than {MAX_WARNING_LEN} chars: {w:?}"
                    );
                }
            }
            // The uid is echoed whenever the request carries one we can read.
            if let Some(Value::String(sent)) =
                as_json.as_ref().and_then(|j| j.pointer("/request/uid"))
            {
                assert_eq!(uid, sent, "uid not echoed");
            }
        }
        other => panic!("unexpected status {other}"),
    }
});
