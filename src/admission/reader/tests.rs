//! The reader gives the typed decode's envelope or nothing, over the test reviews and every
//! truncation, deletion and substitution of a byte in them.

use serde_json::{Value, json};

use super::*;
use crate::admission::WebhookResource;
use crate::admission::testing::{nested, review, route_review, uid_cases};

/// The typed decode's answer, as text: the envelope's `Debug` or the error's message.
fn typed(body: &str, paths: &'static [Path], allowance: usize) -> Result<String, String> {
    project::decode_with(Some(paths), allowance, || {
        serde_json::from_str::<Object<Envelope<'_>>>(body)
    })
    .map(|Object(e)| format!("{e:?}"))
    .map_err(|e| e.to_string())
}

/// Whether the reader read `body`; when it did, it read what the typed decode reads.
fn agrees(body: &str, paths: &'static [Path], allowance: usize) -> bool {
    match envelope(body, paths, allowance) {
        Some(e) => {
            assert_eq!(
                typed(body, paths, allowance),
                Ok(format!("{e:?}")),
                "the reader and the typed decode differ on {body}"
            );
            true
        }
        None => false,
    }
}

/// A route as the API server sends it: requestKind, options, a user with groups and
/// extra, managedFields with escaped keys, parentRefs, rules with numbers and booleans.
fn api_server_route() -> Value {
    review(WebhookResource::HttpRoutes)
        .uid("705ab4f5-6393-11e8-b7cc-42010a800002")
        .namespace("tenant-alice")
        .user("oidc:alice@example.org", &["tenant-alice-admins", "system:authenticated"])
        .user_uid("u-7")
        .user_extra(json!({"scopes": ["openid", "email"], "sessionid": ["a\u{e9}\"b"]}))
        .api_server_fields()
        .dry_run(false)
        .object(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {
                "name": "shop", "namespace": "tenant-alice", "generation": 3,
                "labels": {"app.kubernetes.io/name": "shop"},
                "annotations": {"meta.helm.sh/release-name": "shop \u{2603}"},
                "managedFields": [{
                    "manager": "helm", "operation": "Apply", "time": "2026-01-01T00:00:00Z",
                    "fieldsV1": {"f:spec": {"f:rules": {"k:{\"matches\":[{\"path\":{\"value\":\"/\"}}]}": {".": {}}}}}
                }]
            },
            "spec": {
                "parentRefs": [
                    {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gateway", "namespace": "tenant-root", "sectionName": "https", "port": 443},
                    {"name": "own"}
                ],
                "hostnames": ["shop.alice.example.org", "www.alice.example.org"],
                "rules": [{
                    "matches": [{"path": {"type": "PathPrefix", "value": "/api"}, "method": "GET"}],
                    "backendRefs": [{"name": "shop", "port": 8080, "weight": -1.5e-3}],
                    "timeouts": {"request": "10s"}, "sessionPersistence": null, "enabled": true, "off": false
                }]
            },
            "status": {"parents": [{"conditions": [{"type": "Accepted", "status": "True", "observedGeneration": 2}]}]}
        }))
        .build()
}

/// One review of each layer's kind, with the fields its layer reads.
fn layer_reviews() -> Vec<(WebhookResource, Value)> {
    vec![
        (
            WebhookResource::Gateways,
            review(WebhookResource::Gateways)
                .uid("g")
                .namespace("tenant-alice")
                .object(json!({"metadata": {"name": "g", "namespace": "tenant-alice"}, "spec": {"gatewayClassName": "c", "listeners": [{"name": "a", "port": 443, "hostname": "x.bob.example.org"}, {"name": "b", "hostname": 5}]}}))
                .build(),
        ),
        (
            WebhookResource::Ingresses,
            review(WebhookResource::Ingresses)
                .uid("i")
                .operation("UPDATE")
                .namespace("tenant-alice")
                .object(json!({"metadata": {"name": "i", "annotations": {"nginx.ingress.kubernetes.io/server-alias": "x.bob.example.org", "other": "y"}}, "spec": {"defaultBackend": {"service": {"name": "s", "port": {"number": 80}}}, "rules": [{"host": "a.alice.example.org", "http": {}}], "tls": [{"hosts": ["*.customer.com"], "secretName": "s"}]}}))
                .old_object(json!({"metadata": {"name": "i"}, "spec": {"rules": [{"host": "a.alice.example.org"}, "not-an-object"]}}))
                .sub_resource("status")
                .build(),
        ),
        (
            WebhookResource::Namespaces,
            review(WebhookResource::Namespaces)
                .uid("n")
                .object(json!({"metadata": {"name": "tenant-x", "labels": {"team": "a", "n": null}, "annotations": {}}}))
                .build(),
        ),
        (
            WebhookResource::TenantGateways,
            review(WebhookResource::TenantGateways)
                .uid("t")
                .operation("DELETE")
                .version("v1alpha1")
                .name("gw")
                .namespace("tenant-alice")
                .object(Value::Null)
                .old_object(json!({"metadata": {"name": "gw"}, "spec": {"apex": "alice.example.org", "attachedNamespaces": ["a", "b"]}}))
                .build(),
        ),
        (
            WebhookResource::HttpRoutes,
            route_review("CREATE", "tenant-alice", &["shop.alice.example.org"]),
        ),
        (WebhookResource::HttpRoutes, api_server_route()),
    ]
}

fn paths(target: WebhookResource, warnings: bool) -> &'static [Path] {
    project::layer_paths_for(target.layer(), warnings)
}

#[test]
fn reads_every_layers_review_as_the_typed_decode_does() {
    for (target, body) in layer_reviews() {
        for warnings in [true, false] {
            let p = paths(target, warnings);
            for text in [
                body.to_string(),
                serde_json::to_string_pretty(&body).expect("json"),
            ] {
                assert!(
                    agrees(&text, p, project::allowance(text.len())),
                    "{target:?}: the reader must read {text}"
                );
            }
        }
    }
}

#[test]
fn reviews_hiding_their_uid_are_read_alike_or_left_to_the_typed_decode() {
    let p = paths(WebhookResource::HttpRoutes, true);
    let mut read = Vec::new();
    for (case, body, _) in uid_cases() {
        if agrees(&body, p, project::allowance(body.len())) {
            read.push(case);
        }
    }
    // Those the typed decode takes without escapes in a read string; the others (a uid
    // with escapes, an array for request or envelope, request twice, uid twice, too deep,
    // a wrong type) go to the typed decode.
    assert_eq!(
        read,
        [
            "decoded",
            "huge",
            "empty",
            "no request",
            "request null",
            "wrong apiVersion"
        ]
    );
}

/// Bodies the reader must leave to the typed decode, each with why.
#[test]
fn leaves_what_it_is_not_sure_of_to_the_typed_decode() {
    let valid = route_review("CREATE", "tenant-alice", &["shop.alice.example.org"]).to_string();
    let p = paths(WebhookResource::HttpRoutes, true);
    let edit = |from: &str, to: &str| {
        let b = valid.replacen(from, to, 1);
        assert_ne!(b, valid, "{from}");
        b
    };
    let cases = [
        ("trailing characters", format!("{valid} x")),
        (
            "trailing comma",
            format!("{},}}", &valid[..valid.len() - 1]),
        ),
        ("truncated", valid[..valid.len() - 1].to_string()),
        (
            "an escape in a read string",
            edit("shop.alice", "sh\\u006fp.alice"),
        ),
        (
            "an escape in a compared key",
            edit("\"hostnames\"", "\"hostname\\u0073\""),
        ),
        (
            "an escape in a struct's key",
            edit("\"uid\"", "\"ui\\u0064\""),
        ),
        (
            "a control character in a skipped string",
            edit("CREATE\"", "CREATE\",\"x\":\"\u{1}\""),
        ),
        (
            "an unknown escape in a skipped string",
            edit("\"dryRun\"", "\"x\":\"\\q\",\"dryRun\""),
        ),
        (
            "a short \\u escape in a skipped string",
            edit("\"dryRun\"", "\"x\":\"\\u12\",\"dryRun\""),
        ),
        ("uid a number", edit("\"uid-1\"", "7")),
        ("uid null", edit("\"uid-1\"", "null")),
        ("kind null", edit("\"kind\":{", "\"kind\":null,\"k\":{")),
        (
            "resource an array",
            edit("\"resource\":{", "\"resource\":[],\"r\":{"),
        ),
        (
            "userInfo null",
            edit("\"userInfo\":{", "\"userInfo\":null,\"u\":{"),
        ),
        (
            "a group a number",
            edit("[\"tenant-alice-admins\"", "[5,\"tenant-alice-admins\""),
        ),
        (
            "namespace a number",
            edit(
                "\"namespace\":\"tenant-alice\",\"object\"",
                "\"namespace\":1,\"object\"",
            ),
        ),
        ("operation missing", edit("\"operation\":\"CREATE\",", "")),
        (
            "uid twice",
            edit("\"uid\":\"uid-1\"", "\"uid\":\"a\",\"uid\":\"uid-1\""),
        ),
        (
            "object twice",
            edit("\"object\":", "\"object\":null,\"object\":"),
        ),
        (
            "request twice",
            edit("\"request\":", "\"request\":null,\"request\":"),
        ),
        (
            "apiVersion twice",
            edit(
                "\"apiVersion\":\"admission",
                "\"apiVersion\":null,\"apiVersion\":\"admission",
            ),
        ),
        ("a leading zero", edit("\"dryRun\"", "\"x\":01,\"dryRun\"")),
        ("a bare minus", edit("\"dryRun\"", "\"x\":-,\"dryRun\"")),
        ("a bare point", edit("\"dryRun\"", "\"x\":1.,\"dryRun\"")),
        (
            "a bare exponent",
            edit("\"dryRun\"", "\"x\":1e+,\"dryRun\""),
        ),
        (
            "a broken literal",
            edit("\"dryRun\":true", "\"dryRun\":tru"),
        ),
        (
            "a key that is not a string",
            edit("\"dryRun\"", "\"x\":{1:2},\"dryRun\""),
        ),
        (
            "nested deeper than the reader goes, skipped",
            edit(
                "\"dryRun\"",
                &format!("\"x\":{},\"dryRun\"", nested(MAX_DEPTH, "1")),
            ),
        ),
        (
            "nested deeper than the reader goes, read",
            edit("[\"shop.alice.example.org\"]", &nested(MAX_DEPTH, "\"x\"")),
        ),
        (
            "a read number out of range",
            edit("[\"shop.alice.example.org\"]", "[1e999]"),
        ),
    ];
    for (case, body) in cases {
        assert!(
            envelope(&body, p, project::allowance(body.len())).is_none(),
            "{case}: the reader read {body}"
        );
    }
}

#[test]
fn reads_what_the_typed_decode_reads_where_it_is_sure() {
    let valid = route_review("CREATE", "tenant-alice", &["shop.alice.example.org"]).to_string();
    let p = paths(WebhookResource::HttpRoutes, true);
    let edit = |from: &str, to: &str| {
        let b = valid.replacen(from, to, 1);
        assert_ne!(b, valid, "{from}");
        b
    };
    let cases = [
        (
            "escapes and surrogates in a skipped string, unpaired too",
            edit(
                "\"dryRun\"",
                "\"x\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud800\\uDFFF\",\"dryRun\"",
            ),
        ),
        (
            "every number form, skipped",
            edit(
                "\"dryRun\"",
                "\"x\":[0,-0,12,-3.25,1e5,2E-7,6.5e+2,123456789012345678901234567890],\"dryRun\"",
            ),
        ),
        (
            "numbers read",
            edit(
                "[\"shop.alice.example.org\"]",
                "[0,-1,18446744073709551615,18446744073709551616,-9223372036854775809,1.5e300,2.5]",
            ),
        ),
        (
            "read values of every type",
            edit(
                "[\"shop.alice.example.org\"]",
                "[null,true,false,{},[],{\"a\":[1]},\"s\"]",
            ),
        ),
        (
            "a read key twice: the last is kept",
            edit("\"hostnames\":", "\"hostnames\":[\"a\"],\"hostnames\":"),
        ),
        (
            "an unknown key twice",
            edit("\"dryRun\"", "\"x\":1,\"x\":2,\"dryRun\""),
        ),
        (
            "whitespace everywhere",
            valid.replace(',', " \n\t,\r ").replace(':', " : "),
        ),
        (
            "nested as deep as the reader goes, skipped",
            edit(
                "\"dryRun\"",
                &format!("\"x\":{},\"dryRun\"", nested(MAX_DEPTH - 3, "1")),
            ),
        ),
        (
            "object a string",
            edit("\"object\":{", "\"object\":\"s\",\"o\":{"),
        ),
        ("no object", edit("\"object\":{", "\"o\":{")),
        (
            "groups null, username null",
            edit(
                "\"groups\":[\"tenant-alice-admins\"],\"username\":\"alice\"",
                "\"groups\":null,\"username\":null",
            ),
        ),
        ("empty objects", edit("\"kind\":{", "\"kind\":{},\"k\":{")),
    ];
    for (case, body) in cases {
        assert!(
            agrees(&body, p, project::allowance(body.len())),
            "{case}: the reader must read {body}"
        );
    }
}

#[test]
fn kept_fields_are_charged_as_the_projection_charges_them() {
    let body = api_server_route().to_string();
    let p = paths(WebhookResource::HttpRoutes, true);
    // Every allowance around the cost of what is kept: the reader reads exactly where the
    // typed decode does.
    let mut read = 0;
    for allowance in 0..4096 {
        let ours = envelope(&body, p, allowance).map(|e| format!("{e:?}"));
        let theirs = typed(&body, p, allowance);
        match ours {
            Some(e) => {
                assert_eq!(theirs, Ok(e), "allowance {allowance}");
                read += 1;
            }
            None => assert!(theirs.is_err(), "allowance {allowance}: {theirs:?}"),
        }
    }
    assert!(
        0 < read && read < 4096,
        "the bound must fall in the range: {read}"
    );
}

/// Every truncation, deletion of a byte and substitution of an ASCII byte by one of the
/// JSON syntax's own: whatever the reader reads, the typed decode reads alike.
#[test]
fn every_mangled_review_is_read_alike_or_left_to_the_typed_decode() {
    const BYTES: &[u8] = b"\"\\{}[],:0-.eEtn \x01/u";
    let mut bodies = vec![
        route_review("UPDATE", "tenant-alice", &["shop.alice.example.org"]).to_string(),
        api_server_route().to_string(),
    ];
    bodies.push(layer_reviews()[1].1.to_string());
    let mut taken = 0usize;
    let mut total = 0usize;
    for (n, body) in bodies.iter().enumerate() {
        let target = if n == 2 {
            WebhookResource::Ingresses
        } else {
            WebhookResource::HttpRoutes
        };
        let p = paths(target, true);
        let allowance = project::allowance(body.len());
        let bytes = body.as_bytes();
        let mut check = |b: Vec<u8>| {
            if let Ok(text) = String::from_utf8(b) {
                total += 1;
                taken += usize::from(agrees(&text, p, allowance));
            }
        };
        for i in 0..bytes.len() {
            check(bytes[..i].to_vec());
            let mut del = bytes.to_vec();
            del.remove(i);
            check(del);
            if bytes[i].is_ascii() {
                for &c in BYTES {
                    let mut sub = bytes.to_vec();
                    sub[i] = c;
                    check(sub);
                }
            }
        }
    }
    // Most mangled bodies are still JSON somewhere: the reader takes many of them.
    assert!(taken > total / 10, "{taken} of {total}");
}

#[test]
fn the_layer_paths_are_the_projections() {
    // The reader's kept object is the projection `project` gives of the same object.
    let body = api_server_route();
    let text = body.to_string();
    let p = paths(WebhookResource::HttpRoutes, true);
    let e = envelope(&text, p, project::allowance(text.len())).expect("read");
    let Some(Object(request)) = e.request else {
        panic!("a request")
    };
    let Some(ObjectField::Projected(object)) = request.object else {
        panic!("projected")
    };
    let raw = serde_json::value::to_raw_value(&body["request"]["object"]).expect("raw");
    assert_eq!(object, project::project(&raw, p).expect("projects"));
    assert_eq!(
        object["spec"]["parentRefs"][0]["port"],
        json!(443),
        "parentRefs are kept with the route-index warnings"
    );
}
