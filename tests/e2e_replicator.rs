//! Tier 3 for the wildcard Secret replicator (SPEC §3.6, issue 9 "Replication" must-shows):
//! a real kube-apiserver from the tests/k8s harness; two replicators run in-process against
//! it, as `serve` starts them (the shared namespace index, a Lease each tries to hold), then
//! `serve` itself with the location flags. Every wait has a deadline.
//!
//! Set TENANT_GATEWAY_SKIP_E2E=1 to skip (said loudly).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::control_plane::*;
use support::poll::poll;
use support::process::*;

use tenant_gateway::cluster::LiveNamespaces;
use tenant_gateway::metrics::Metrics;
use tenant_gateway::readiness::Readiness;
use tenant_gateway::replicate::{Hold, ValuesLocation};
use tenant_gateway::serve::{ReplicatorOptions, start_replicator};

const WAIT: Duration = Duration::from_secs(60);
const COPY_LABEL: &str = "gateway.cozystack.io/wildcard-copy";
const SOURCE_ANNOTATION: &str = "gateway.cozystack.io/wildcard-source";

struct Cluster<'a> {
    cp: &'a ControlPlane,
}

impl Cluster<'_> {
    fn apply(&self, manifest: &Value) {
        self.cp.apply_json(manifest);
    }

    fn get(&self, kind: &str, ns: &str, name: &str) -> Option<Value> {
        self.cp.get_json(kind, ns, name)
    }

    fn delete(&self, kind: &str, ns: &str, name: &str) {
        self.cp.kubectl_ok(
            &["delete", kind, "-n", ns, name, "--ignore-not-found"],
            None,
        );
    }

    fn namespace(&self, name: &str, labels: Value) {
        self.apply(&json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}}));
    }

    /// Replace a namespace's labels entirely (apply would keep the ones dropped here only if
    /// kubectl did not own them; a JSON merge patch says exactly what changes).
    fn relabel(&self, name: &str, patch: Value) {
        self.cp.kubectl_ok(
            &[
                "patch",
                "namespace",
                name,
                "--type=merge",
                "-p",
                &json!({"metadata": {"labels": patch}}).to_string(),
            ],
            None,
        );
    }

    fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        poll(WAIT, what, &mut f)
    }
}

fn tls_secret(ns: &str, name: &str, cert: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": ns},
        "stringData": {"tls.crt": cert, "tls.key": format!("key-of-{cert}")}})
}

fn values_secret(ns: &str, name: &str, key: &str, yaml: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
        "stringData": {key: yaml}})
}

fn values_naming(wildcard: &str) -> Value {
    values_secret(
        "cozy-system",
        "cozystack-values",
        "values.yaml",
        &format!(
            "_cluster:\n  root-host: example.org\n  expose-ingress: tenant-root\n  wildcard-secret-name: {wildcard:?}\n"
        ),
    )
}

fn decoded(secret: &Value, key: &str) -> Option<String> {
    use base64::Engine as _;
    let b64 = secret["data"][key].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    String::from_utf8(bytes).ok()
}

fn rv(o: &Value) -> String {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A replica in `ns` equal to the source `name` carrying `cert`: same type, data, the copy
/// label and the source annotation.
fn replica(c: &Cluster, ns: &str, name: &str, cert: &str) -> Option<Value> {
    let s = c.get("secret", ns, name)?;
    let ok = s["type"] == "kubernetes.io/tls"
        && decoded(&s, "tls.crt").as_deref() == Some(cert)
        && decoded(&s, "tls.key") == Some(format!("key-of-{cert}"))
        && s["metadata"]["labels"][COPY_LABEL] == "true"
        && s["metadata"]["annotations"][SOURCE_ANNOTATION] == format!("tenant-root/{name}");
    ok.then_some(s)
}

fn counter_sum(m: &Metrics, family: &str) -> u64 {
    m.render()
        .lines()
        .filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

fn writes(m: &Metrics) -> u64 {
    counter_sum(m, "tenant_gateway_wildcard_writes_total")
}

fn holding(m: &Metrics, reason: &str) -> bool {
    m.wildcard_hold.with_label_values(&[reason]).get() == 1
}

struct Replica {
    metrics: Metrics,
    done: tokio::task::JoinHandle<&'static str>,
}

fn start(rt: &tokio::runtime::Runtime, cp: &ControlPlane, lease: &str) -> Replica {
    let lease = lease.to_string();
    rt.block_on(async move {
        let client = cp.kube_client().await;
        let metrics = Metrics::new();
        let live =
            LiveNamespaces::start(client.clone(), Arc::new(Readiness::new()), metrics.clone());
        // No reconciler: the replicator runs the election itself, on the one Lease both
        // replicas compete for.
        let done = start_replicator(
            client,
            live,
            metrics.clone(),
            None,
            ReplicatorOptions {
                values: ValuesLocation::default(),
                lease_namespace: Some("default".into()),
                lease_name: lease,
            },
        );
        Replica { metrics, done }
    })
}

#[test]
fn replicator_on_a_real_api_server() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let Some(cp) = ControlPlane::start_or_skip() else {
        return;
    };
    let c = Cluster { cp: &cp };
    let gw = "namespace.cozystack.io/gateway";
    let ing = "namespace.cozystack.io/ingress";
    c.namespace("cozy-system", json!({}));
    c.namespace(
        "tenant-root",
        json!({gw: "tenant-root", ing: "tenant-root"}),
    );
    c.namespace(
        "tenant-alice",
        json!({gw: "tenant-alice", ing: "tenant-root"}),
    );
    c.namespace("tenant-bob", json!({ing: "tenant-bob", gw: "tenant-root"}));
    // Inheriting their parent's Gateway and ingress: no replica.
    c.namespace(
        "tenant-carol",
        json!({gw: "tenant-root", ing: "tenant-root"}),
    );
    c.namespace(
        "tenant-dave",
        json!({gw: "tenant-alice", ing: "tenant-root"}),
    );
    // Owns its Gateway, but a same-named Secret of its own is already there.
    c.namespace("tenant-erin", json!({gw: "tenant-erin"}));
    c.apply(
        &json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "wild", "namespace": "tenant-erin"},
        "stringData": {"mine": "erin's own"}}),
    );
    // Unrelated Secrets that must survive everything.
    c.apply(&tls_secret("tenant-bob", "bob-own", "bob"));
    c.apply(&tls_secret("tenant-root", "wild", "v1"));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let one = start(&rt, &cp, "tenant-gateway-replicator-e2e");
    c.wait("the first replicator to hold the Lease", || {
        (one.metrics.leader.get() == 1).then_some(())
    });
    let two = start(&rt, &cp, "tenant-gateway-replicator-e2e");

    // --- the values name the operator's Secret: replicas where the labels name the namespace
    c.apply(&values_naming("wild"));
    for ns in ["tenant-alice", "tenant-bob"] {
        c.wait(&format!("the replica in {ns}"), || {
            replica(&c, ns, "wild", "v1")
        });
    }
    for ns in ["tenant-carol", "tenant-dave"] {
        assert!(
            c.get("secret", ns, "wild").is_none(),
            "{ns} inherits its Gateway and ingress: no replica"
        );
    }
    let source = c.get("secret", "tenant-root", "wild").expect("source");
    assert!(
        source["metadata"]["labels"].get(COPY_LABEL).is_none(),
        "the source is not made a replica"
    );

    // --- a foreign same-named Secret is untouched, and a Warning event says so
    c.wait("a Warning event on the foreign Secret", || {
        let o = c.cp.kubectl(
            &[
                "get",
                "events.events.k8s.io",
                "-n",
                "tenant-erin",
                "-o",
                "json",
            ],
            None,
        );
        let list: Value = serde_json::from_str(&o.stdout).ok()?;
        list["items"]
            .as_array()?
            .iter()
            .any(|e| {
                e["type"] == "Warning"
                    && e["reason"] == "WildcardSecretNotReplicated"
                    && e["regarding"]["kind"] == "Secret"
                    && e["regarding"]["name"] == "wild"
            })
            .then_some(())
    });
    let erin = c
        .get("secret", "tenant-erin", "wild")
        .expect("erin's Secret");
    assert_eq!(erin["type"], "Opaque");
    assert_eq!(decoded(&erin, "mine").as_deref(), Some("erin's own"));
    assert!(erin["metadata"]["labels"].get(COPY_LABEL).is_none());
    assert_eq!(one.metrics.wildcard_foreign.get(), 1);

    // --- the standby computes the same plan and writes nothing (3 targets: erin's is
    //     taken by its own Secret)
    c.wait("the standby's view (3 desired, 2 present)", || {
        (two.metrics.wildcard_replicas_desired.get() == 3
            && two.metrics.wildcard_replicas_present.get() == 2)
            .then_some(())
    });
    assert_eq!(two.metrics.leader.get(), 0);
    assert_eq!(one.metrics.wildcard_replicas_desired.get(), 3);
    assert!(one.metrics.wildcard_last_sync.get() > 0);
    assert_eq!(
        two.metrics.wildcard_last_sync.get(),
        0,
        "the standby synced nothing"
    );

    // --- rotation: every replica follows within seconds
    let rotated = Instant::now();
    c.apply(&tls_secret("tenant-root", "wild", "v2"));
    for ns in ["tenant-alice", "tenant-bob"] {
        c.wait(&format!("the rotated replica in {ns}"), || {
            replica(&c, ns, "wild", "v2")
        });
    }
    let took = rotated.elapsed();
    eprintln!("rotation reached every replica in {took:?}");
    // Measured 0.9–2.5 s with five other builds on the 2 cores, most of it kubectl polling.
    assert!(took < Duration::from_secs(10), "rotation took {took:?}");

    // --- transient absence keeps every replica, unchanged
    let versions = |c: &Cluster| -> Vec<String> {
        ["tenant-alice", "tenant-bob"]
            .iter()
            .map(|ns| rv(&c.get("secret", ns, "wild").expect("replica")))
            .collect()
    };
    let before = versions(&c);
    let writes_before = writes(&one.metrics);
    c.delete("secret", "cozy-system", "cozystack-values");
    c.wait("the hold on the missing values Secret", || {
        holding(&one.metrics, "values_secret_missing").then_some(())
    });
    c.apply(&values_secret(
        "cozy-system",
        "cozystack-values",
        "other.yaml",
        "_cluster: {wildcard-secret-name: \"\"}\n",
    ));
    c.wait("the hold on the missing key", || {
        holding(&one.metrics, "values_key_missing").then_some(())
    });
    c.delete("secret", "cozy-system", "cozystack-values");
    c.apply(&values_naming("wild"));
    c.delete("secret", "tenant-root", "wild");
    c.wait("the hold on the missing source", || {
        holding(&one.metrics, "source_missing").then_some(())
    });
    c.apply(
        &json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "wild", "namespace": "tenant-root"},
        "stringData": {"tls.crt": "v3", "tls.key": "key-of-v3"}}),
    );
    c.wait("the hold on a source that is not kubernetes.io/tls", || {
        holding(&one.metrics, "source_not_tls").then_some(())
    });
    assert_eq!(versions(&c), before, "a replica changed while holding");
    assert_eq!(writes(&one.metrics), writes_before, "a write while holding");
    c.delete("secret", "tenant-root", "wild");
    c.apply(&tls_secret("tenant-root", "wild", "v2"));
    c.wait("replication resumes", || {
        (!Hold::REASONS.iter().any(|r| holding(&one.metrics, r))
            && one.metrics.wildcard_replicas_present.get() == 2)
            .then_some(())
    });
    assert_eq!(
        versions(&c),
        before,
        "resuming on an equal source rewrote replicas"
    );

    // --- a namespace that stops owning its Gateway loses its replica; one that starts
    //     owning one gets it
    c.relabel("tenant-alice", json!({gw: "tenant-root"}));
    c.wait("the replica in tenant-alice to be pruned", || {
        c.get("secret", "tenant-alice", "wild")
            .is_none()
            .then_some(())
    });
    c.relabel("tenant-carol", json!({gw: "tenant-carol"}));
    c.wait("the replica in tenant-carol", || {
        replica(&c, "tenant-carol", "wild", "v2")
    });
    assert!(replica(&c, "tenant-bob", "wild", "v2").is_some());

    // --- a new source name: its replicas appear, the old name's go
    c.apply(&tls_secret("tenant-root", "wild2", "w1"));
    c.apply(&values_naming("wild2"));
    for ns in ["tenant-bob", "tenant-carol", "tenant-erin"] {
        c.wait(&format!("the wild2 replica in {ns}"), || {
            replica(&c, ns, "wild2", "w1")
        });
    }
    for ns in ["tenant-bob", "tenant-carol"] {
        c.wait(
            &format!("the old-name replica in {ns} to be pruned"),
            || c.get("secret", ns, "wild").is_none().then_some(()),
        );
    }
    assert!(
        c.get("secret", "tenant-root", "wild").is_some(),
        "the old source stays"
    );
    assert!(
        c.get("secret", "tenant-erin", "wild").is_some(),
        "erin's Secret stays"
    );

    // --- name set to "": every replica goes, nothing else
    c.apply(&values_naming(""));
    for ns in ["tenant-bob", "tenant-carol", "tenant-erin"] {
        c.wait(&format!("the wild2 replica in {ns} to be removed"), || {
            c.get("secret", ns, "wild2").is_none().then_some(())
        });
    }
    let labelled = c.cp.kubectl_ok(
        &["get", "secrets", "-A", "-l", COPY_LABEL, "-o", "name"],
        None,
    );
    assert_eq!(
        labelled.stdout.trim(),
        "",
        "replicas left: {}",
        labelled.stdout
    );
    for (ns, name) in [
        ("tenant-root", "wild"),
        ("tenant-root", "wild2"),
        ("tenant-erin", "wild"),
        ("tenant-bob", "bob-own"),
    ] {
        assert!(
            c.get("secret", ns, name).is_some(),
            "{ns}/{name} was removed"
        );
    }
    assert_eq!(one.metrics.wildcard_replicas_desired.get(), 0);

    // --- the standby never wrote
    assert!(writes(&one.metrics) > 0);
    assert_eq!(writes(&two.metrics), 0, "the standby replica wrote");
    assert_eq!(two.metrics.leader.get(), 0);

    // --- the holder gone, the standby takes the Lease over and writes from its own caches
    one.done.abort();
    c.wait("the standby takes the Lease over", || {
        (two.metrics.leader.get() == 1).then_some(())
    });
    c.apply(&values_naming("wild2"));
    for ns in ["tenant-bob", "tenant-carol", "tenant-erin"] {
        c.wait(&format!("the new holder's replica in {ns}"), || {
            replica(&c, ns, "wild2", "w1")
        });
    }
    assert!(writes(&two.metrics) > 0);
    two.done.abort();

    serve_runs_the_replicator_with_the_location_flags(&c);
    the_playground_manifest_replicates(&c, &rt);
}

/// examples/playground/wildcard-secret.yaml does what its header says.
fn the_playground_manifest_replicates(c: &Cluster, rt: &tokio::runtime::Runtime) {
    let r = start(rt, c.cp, "tenant-gateway-replicator-playground");
    let manifest = repo_root().join("examples/playground/wildcard-secret.yaml");
    c.cp.kubectl_ok(&["apply", "-f", path_str(&manifest)], None);
    let copy = c.wait("the playground's copy in tenant-shop", || {
        c.get("secret", "tenant-shop", "wildcard-example-org")
    });
    assert_eq!(copy["metadata"]["labels"][COPY_LABEL], "true");
    assert_eq!(
        copy["metadata"]["annotations"][SOURCE_ANNOTATION],
        "tenant-root/wildcard-example-org"
    );
    c.wait("the playground replicator counts the copy", || {
        (r.metrics.wildcard_replicas_present.get() >= 1).then_some(())
    });
    assert!(
        c.get("secret", "tenant-shop-docs", "wildcard-example-org")
            .is_none(),
        "tenant-shop-docs inherits: no copy"
    );
    r.done.abort();
}

/// `serve` (webhook + replicator, no reconciler: the replicator holds its own Lease) reads
/// the values where the flags say.
fn serve_runs_the_replicator_with_the_location_flags(c: &Cluster) {
    c.namespace("platform", json!({}));
    c.apply(&values_secret(
        "platform",
        "values",
        "cluster.yaml",
        "_cluster:\n  expose-ingress: tenant-root\n  wildcard-secret-name: served\n",
    ));
    c.apply(&tls_secret("tenant-root", "served", "s1"));
    let serve = Webhook::start_with(
        c.cp,
        "serve-replicator",
        &[
            "--no-controller",
            "--leader-election-namespace",
            "default",
            "--leader-election-name",
            "tenant-gateway-serve-replicator",
            "--values-secret-namespace",
            "platform",
            "--values-secret-name",
            "values",
            "--values-secret-key",
            "cluster.yaml",
        ],
    );
    for ns in ["tenant-bob", "tenant-carol", "tenant-erin"] {
        c.wait(&format!("serve's replica in {ns}"), || {
            let s = c.get("secret", ns, "served")?;
            (decoded(&s, "tls.crt").as_deref() == Some("s1")).then_some(())
        });
    }
    let metrics = format!("127.0.0.1:{}", serve.metrics_port);
    let text = c.wait("serve's metrics", || http_get(&metrics, "/metrics"));
    for family in [
        "tenant_gateway_wildcard_replicas_desired 3",
        "tenant_gateway_wildcard_replicas_present",
        "tenant_gateway_wildcard_last_sync_timestamp_seconds",
    ] {
        assert!(text.contains(family), "{family} missing: {text}");
    }
}

/// The body of a plain HTTP GET on loopback.
fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    Some(buf)
}
