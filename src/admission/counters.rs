//! Resolved handles of the admission metrics. `with_label_values` hashes the labels and
//! takes the vector's lock on every call; on the review path, with both server threads
//! counting, that lock's cache line bounced between cores on every request while the
//! do-nothing baseline touched no metric at all. Each label combination is resolved once
//! and then counted through a plain handle (one atomic add).

use std::sync::OnceLock;

use prometheus::{Histogram, IntCounter};

use super::route_warnings::Reason;
use super::{DecisionKind, WebhookResource};
use crate::metrics::Metrics;
use crate::policy::{Layer, Operation};

const OPS: [Operation; 4] = [
    Operation::Create,
    Operation::Update,
    Operation::Delete,
    Operation::Connect,
];
const KINDS: [DecisionKind; 5] = [
    DecisionKind::Allowed,
    DecisionKind::Denied,
    DecisionKind::Warned,
    DecisionKind::Audited,
    DecisionKind::Error,
];
/// Each dimension has one more slot than it has values: "unknown" / "none".
const R: usize = WebhookResource::ALL.len() + 1;
const O: usize = OPS.len() + 1;
const L: usize = Layer::ALL.len() + 1;
const K: usize = KINDS.len();

pub struct Counters {
    metrics: Metrics,
    requests: Box<[OnceLock<IntCounter>]>,
    durations: Box<[OnceLock<Histogram>]>,
    /// `admission_warnings` by resource and reason (the 20,000-route bench gives two
    /// warnings on every review).
    warnings: Box<[OnceLock<IntCounter>]>,
}

const REASONS: usize = Reason::ALL.len();

fn resource_index(label: &str) -> usize {
    WebhookResource::ALL
        .iter()
        .position(|r| r.resource() == label)
        .unwrap_or(R - 1)
}

fn op_index(label: &str) -> usize {
    OPS.iter()
        .position(|o| o.as_str() == label)
        .unwrap_or(O - 1)
}

fn layer_index(layer: Option<Layer>) -> usize {
    layer
        .and_then(|l| Layer::ALL.iter().position(|x| *x == l))
        .unwrap_or(L - 1)
}

fn kind_index(kind: DecisionKind) -> usize {
    KINDS.iter().position(|k| *k == kind).unwrap_or(0)
}

impl Counters {
    pub fn new(metrics: Metrics) -> Counters {
        Counters {
            metrics,
            requests: (0..R * O * L * K).map(|_| OnceLock::new()).collect(),
            durations: (0..R).map(|_| OnceLock::new()).collect(),
            warnings: (0..R * REASONS).map(|_| OnceLock::new()).collect(),
        }
    }

    /// `tenant_gateway_admission_warnings_total{resource,reason}` += 1.
    pub fn warning(&self, resource: WebhookResource, reason: Reason) {
        let r = resource_index(resource.resource());
        let i = r * REASONS + Reason::ALL.iter().position(|x| *x == reason).unwrap_or(0);
        self.warnings[i]
            .get_or_init(|| {
                self.metrics
                    .admission_warnings
                    .with_label_values(&[resource.resource(), reason.as_str()])
            })
            .inc();
    }

    /// `tenant_gateway_admission_requests_total{resource,operation,layer,decision}` += 1.
    /// Labels outside the known sets (there are none today) are counted uncached.
    pub fn request(&self, resource: &str, op: &str, layer: Option<Layer>, kind: DecisionKind) {
        let layer_label = layer.map(Layer::as_str).unwrap_or("none");
        let labels = [resource, op, layer_label, kind.as_str()];
        let (r, o) = (resource_index(resource), op_index(op));
        let known = (r < R - 1 || resource == "unknown") && (o < O - 1 || op == "unknown");
        if !known {
            self.metrics
                .admission_requests
                .with_label_values(&labels)
                .inc();
            return;
        }
        let i = ((r * O + o) * L + layer_index(layer)) * K + kind_index(kind);
        self.requests[i]
            .get_or_init(|| self.metrics.admission_requests.with_label_values(&labels))
            .inc();
    }

    /// `tenant_gateway_admission_duration_seconds{resource}` observes `secs`.
    pub fn duration(&self, resource: &str, secs: f64) {
        let r = resource_index(resource);
        if r == R - 1 && resource != "unknown" {
            self.metrics
                .admission_duration
                .with_label_values(&[resource])
                .observe(secs);
            return;
        }
        self.durations[r]
            .get_or_init(|| {
                self.metrics
                    .admission_duration
                    .with_label_values(&[resource])
            })
            .observe(secs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counting through the cache lands on exactly the series `with_label_values` names,
    /// for every combination, and distinct combinations never share a slot.
    #[test]
    fn every_combination_counts_its_own_series() {
        let metrics = Metrics::new();
        let c = Counters::new(metrics.clone());
        let resources: Vec<&str> = WebhookResource::ALL
            .iter()
            .map(|r| r.resource())
            .chain(["unknown"])
            .collect();
        let ops: Vec<&str> = OPS.iter().map(|o| o.as_str()).chain(["unknown"]).collect();
        let layers: Vec<Option<Layer>> =
            Layer::ALL.iter().copied().map(Some).chain([None]).collect();
        let mut n = 0u64;
        for r in &resources {
            for o in &ops {
                for l in &layers {
                    for k in KINDS {
                        n += 1;
                        // A distinct count per combination: a shared slot would sum two.
                        for _ in 0..(n % 3 + 1) {
                            c.request(r, o, *l, k);
                        }
                    }
                }
            }
        }
        let mut n = 0u64;
        for r in &resources {
            for o in &ops {
                for l in &layers {
                    for k in KINDS {
                        n += 1;
                        let got = metrics
                            .admission_requests
                            .with_label_values(&[
                                r,
                                o,
                                l.map(Layer::as_str).unwrap_or("none"),
                                k.as_str(),
                            ])
                            .get();
                        assert_eq!(got, n % 3 + 1, "{r} {o} {l:?} {k:?}");
                    }
                }
            }
        }
        // A label outside the tables is still counted.
        c.request("weird", "CREATE", None, DecisionKind::Error);
        assert_eq!(
            metrics
                .admission_requests
                .with_label_values(&["weird", "CREATE", "none", "error"])
                .get(),
            1
        );
        // Warnings: a distinct count per resource and reason.
        let mut n = 0u64;
        for r in WebhookResource::ALL {
            for reason in Reason::ALL {
                n += 1;
                for _ in 0..n {
                    c.warning(r, reason);
                }
            }
        }
        let mut n = 0u64;
        for r in WebhookResource::ALL {
            for reason in Reason::ALL {
                n += 1;
                let got = metrics
                    .admission_warnings
                    .with_label_values(&[r.resource(), reason.as_str()])
                    .get();
                assert_eq!(got, n, "{r:?} {reason:?}");
            }
        }
        c.duration("httproutes", 0.001);
        c.duration("httproutes", 0.002);
        c.duration("weird", 0.002);
        assert_eq!(
            metrics
                .admission_duration
                .with_label_values(&["httproutes"])
                .get_sample_count(),
            2
        );
        assert_eq!(
            metrics
                .admission_duration
                .with_label_values(&["weird"])
                .get_sample_count(),
            1
        );
    }
}
