//! Prometheus metrics (SPEC §6). One registry per process; labels never carry unbounded
//! values (no hostnames, no namespaces).

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Buckets from 50µs to 1s: policy work is sub-millisecond, the interesting tail is the
/// live namespace GET on a cache miss.
const ADMISSION_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Buckets from 500µs to 5s: a reconcile is gather, plan and the writes it issues.
const RECONCILE_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// labels: resource, operation, layer, decision (allowed|denied|warned|audited|error)
    pub admission_requests: IntCounterVec,
    /// labels: resource
    pub admission_duration: HistogramVec,
    /// labels: resource (httproutes|tlsroutes), reason (hostname_conflict|listener_budget|
    /// passthrough_shared|passthrough_hostname): warnings from the route index (SPEC §3.4,
    /// §3.10)
    pub admission_warnings: IntCounterVec,
    pub namespace_index_size: IntGauge,
    /// Not-after of the serving certificate currently in use.
    pub tls_certificate_expiry: IntGauge,
    /// labels: result (success|error)
    pub tls_reloads: IntCounterVec,
    /// labels: result (success|error)
    pub reconcile_total: IntCounterVec,
    pub reconcile_duration: Histogram,
    /// labels: mode
    pub tenantgateways: IntGaugeVec,
    pub hostname_conflicts: IntGauge,
    pub listener_cap_overflow: IntGauge,
    pub leader: IntGauge,
    /// labels: kind (Gateway|Issuer|Certificate|HTTPRoute|TLSRoute|Namespace|TenantGateway),
    /// verb (apply|delete|status|label)
    pub reconcile_writes: IntCounterVec,
    /// Namespaces that should hold a wildcard Secret replica (SPEC §3.6).
    pub wildcard_replicas_desired: IntGauge,
    /// Of those, the ones whose replica equals the source.
    pub wildcard_replicas_present: IntGauge,
    /// Same-named Secrets without the copy label where no replica is written.
    pub wildcard_foreign: IntGauge,
    /// Unix time of the last pass that left every replica as the plan wants (leader only).
    pub wildcard_last_sync: IntGauge,
    /// labels: verb (create|update|delete)
    pub wildcard_writes: IntCounterVec,
    /// labels: reason (the `Hold` reasons); 1 for the reason replication holds, else 0.
    pub wildcard_hold: IntGaugeVec,
    /// labels: layer, kind (the guarded kinds and Namespace): stored objects the audit finds
    /// violating or cannot judge (SPEC §3.9).
    pub audit_violations: IntGaugeVec,
    /// Unix time of the last change of the audit's results.
    pub audit_last_change: IntGauge,
    /// labels: state (pending|failing|foreign): namespaces whose PolicyReport waits for a
    /// write, whose last write failed, or whose `tenant-gateway` report is another tool's.
    /// Meaningful on the Lease holder: a replica without it keeps its namespaces pending.
    pub policy_report_namespaces: IntGaugeVec,
    /// labels: verb (apply|delete)
    pub policy_report_writes: IntCounterVec,
    /// 1 once the PolicyReport CRD is served and the reports are listed (writes may go out).
    pub policy_report_synced: IntGauge,
}

impl Metrics {
    /// Build and register every metric.
    ///
    /// Registration only fails on duplicate names or invalid label names, both fixed at
    /// compile time here, so the `expect`s here and in `counter_vec`, `gauge` and
    /// `gauge_vec` hold for any run that passes the unit test.
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::new(),
            admission_requests: counter_vec(
                "tenant_gateway_admission_requests_total",
                "Admission reviews by resource, operation, deciding layer and decision.",
                &["resource", "operation", "layer", "decision"],
            ),
            admission_duration: HistogramVec::new(
                HistogramOpts::new(
                    "tenant_gateway_admission_duration_seconds",
                    "Time to decide one admission review, from body received to response ready.",
                )
                .buckets(ADMISSION_BUCKETS.to_vec()),
                &["resource"],
            )
            .expect("valid metric"),
            admission_warnings: counter_vec(
                "tenant_gateway_admission_warnings_total",
                "Warnings from the route index on admitted routes, by resource and reason.",
                &["resource", "reason"],
            ),
            namespace_index_size: gauge(
                "tenant_gateway_namespace_index_size",
                "Namespaces in the in-memory index.",
            ),
            tls_certificate_expiry: gauge(
                "tenant_gateway_tls_certificate_expiry_timestamp_seconds",
                "Unix time at which the serving certificate in use expires.",
            ),
            tls_reloads: counter_vec(
                "tenant_gateway_tls_reloads_total",
                "Serving certificate reloads by result.",
                &["result"],
            ),
            reconcile_total: counter_vec(
                "tenant_gateway_reconcile_total",
                "TenantGateway reconciles by result.",
                &["result"],
            ),
            reconcile_duration: Histogram::with_opts(
                HistogramOpts::new(
                    "tenant_gateway_reconcile_duration_seconds",
                    "Duration of one TenantGateway reconcile (gather, plan and the writes).",
                )
                .buckets(RECONCILE_BUCKETS.to_vec()),
            )
            .expect("valid metric"),
            tenantgateways: gauge_vec(
                "tenant_gateway_tenantgateways",
                "TenantGateways by certificate mode.",
                &["mode"],
            ),
            hostname_conflicts: gauge(
                "tenant_gateway_hostname_conflicts",
                "Route hostnames currently losing a cross-namespace conflict.",
            ),
            listener_cap_overflow: gauge(
                "tenant_gateway_listener_cap_overflow",
                "Listenable hostnames left without a listener by the 64-listener cap.",
            ),
            leader: gauge(
                "tenant_gateway_leader",
                "1 when this replica holds the reconciler lease.",
            ),
            reconcile_writes: counter_vec(
                "tenant_gateway_reconcile_writes_total",
                "Writes issued by the reconciler, by object kind and verb.",
                &["kind", "verb"],
            ),
            wildcard_replicas_desired: gauge(
                "tenant_gateway_wildcard_replicas_desired",
                "Namespaces that should hold a copy of the wildcard Secret (unchanged while replication holds).",
            ),
            wildcard_replicas_present: gauge(
                "tenant_gateway_wildcard_replicas_present",
                "Target namespaces whose wildcard Secret copy equals the source.",
            ),
            wildcard_foreign: gauge(
                "tenant_gateway_wildcard_foreign_secrets",
                "Target namespaces holding a same-named Secret without the copy label (left alone).",
            ),
            wildcard_last_sync: gauge(
                "tenant_gateway_wildcard_last_sync_timestamp_seconds",
                "Unix time of the last replication pass that completed on the Lease holder.",
            ),
            wildcard_writes: counter_vec(
                "tenant_gateway_wildcard_writes_total",
                "Writes of wildcard Secret replicas, by verb.",
                &["verb"],
            ),
            wildcard_hold: gauge_vec(
                "tenant_gateway_wildcard_hold",
                "1 while wildcard Secret replication holds (writes and prunes nothing) for this reason.",
                &["reason"],
            ),
            audit_violations: gauge_vec(
                "tenant_gateway_audit_violations",
                "Stored objects the audit finds violating (or cannot judge), by layer and kind.",
                &["layer", "kind"],
            ),
            audit_last_change: gauge(
                "tenant_gateway_audit_last_change_timestamp_seconds",
                "Unix time of the last change of the audit's results.",
            ),
            policy_report_namespaces: gauge_vec(
                "tenant_gateway_policy_report_namespaces",
                "Namespaces whose PolicyReport waits for a write (pending; a replica without the Lease keeps them pending), whose last write failed and is retried (failing), or whose tenant-gateway report belongs to another tool (foreign).",
                &["state"],
            ),
            policy_report_writes: counter_vec(
                "tenant_gateway_policy_report_writes_total",
                "PolicyReport writes by verb (apply: created or updated; delete).",
                &["verb"],
            ),
            policy_report_synced: gauge(
                "tenant_gateway_policy_report_synced",
                "1 once the PolicyReport CRD is served and the reports are listed (writes may go out), 0 while it is not.",
            ),
        };
        m.register_all();
        m
    }

    fn register_all(&self) {
        let r = &self.registry;
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.admission_requests.clone()),
            Box::new(self.admission_duration.clone()),
            Box::new(self.admission_warnings.clone()),
            Box::new(self.namespace_index_size.clone()),
            Box::new(self.tls_certificate_expiry.clone()),
            Box::new(self.tls_reloads.clone()),
            Box::new(self.reconcile_total.clone()),
            Box::new(self.reconcile_duration.clone()),
            Box::new(self.tenantgateways.clone()),
            Box::new(self.hostname_conflicts.clone()),
            Box::new(self.listener_cap_overflow.clone()),
            Box::new(self.leader.clone()),
            Box::new(self.reconcile_writes.clone()),
            Box::new(self.wildcard_replicas_desired.clone()),
            Box::new(self.wildcard_replicas_present.clone()),
            Box::new(self.wildcard_foreign.clone()),
            Box::new(self.wildcard_last_sync.clone()),
            Box::new(self.wildcard_writes.clone()),
            Box::new(self.wildcard_hold.clone()),
            Box::new(self.audit_violations.clone()),
            Box::new(self.audit_last_change.clone()),
            Box::new(self.policy_report_namespaces.clone()),
            Box::new(self.policy_report_writes.clone()),
            Box::new(self.policy_report_synced.clone()),
        ];
        for c in collectors {
            r.register(c).expect("metric names are unique");
        }
        #[cfg(target_os = "linux")]
        {
            let pc = prometheus::process_collector::ProcessCollector::for_self();
            r.register(Box::new(pc))
                .expect("process collector registers once");
        }
    }

    /// Prometheus text exposition of everything registered.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let encoder = TextEncoder::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        if encoder.encode(&self.registry.gather(), &mut buf).is_err() {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).expect("valid metric")
}

fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_metrics_register_and_render() {
        let m = Metrics::new();
        m.admission_requests
            .with_label_values(&["httproutes", "CREATE", "route", "denied"])
            .inc();
        m.admission_duration
            .with_label_values(&["httproutes"])
            .observe(0.0002);
        let text = m.render();
        assert!(text.contains("tenant_gateway_admission_requests_total{"));
        assert!(text.contains("tenant_gateway_admission_duration_seconds_bucket{"));
        assert!(text.contains("tenant_gateway_leader 0"));
        m.reconcile_writes
            .with_label_values(&["Gateway", "apply"])
            .inc();
        assert!(
            m.render().contains(
                "tenant_gateway_reconcile_writes_total{kind=\"Gateway\",verb=\"apply\"} 1"
            )
        );
    }
}
