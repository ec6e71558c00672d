//! Plain-HTTP GETs against the metrics port, and the server-side latency histogram.

use std::net::SocketAddr;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

pub const DURATION_METRIC: &str = "tenant_gateway_admission_duration_seconds";

/// `GET path` over a fresh plain-HTTP/1.1 connection: (status, body).
pub async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let tcp = TcpStream::connect(addr).await?;
    let (mut send, conn) = http1::handshake(TokioIo::new(tcp)).await?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = Request::get(path)
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())?;
    let resp = send.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    driver.abort();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Cumulative bucket counts `(le, count)` of the duration histogram for one resource label,
/// in exposition order (ascending `le`, `+Inf` last).
#[derive(Debug, Clone, Default)]
pub struct Buckets(pub Vec<(f64, u64)>);

impl Buckets {
    pub fn parse(text: &str, resource: &str) -> Buckets {
        let prefix = format!("{DURATION_METRIC}_bucket{{");
        let label = format!("resource=\"{resource}\"");
        let mut out = Vec::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(&prefix) else {
                continue;
            };
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            if !labels.split(',').any(|l| l == label) {
                continue;
            }
            let Some(le) = labels
                .split(',')
                .find_map(|l| l.strip_prefix("le=\""))
                .and_then(|v| v.strip_suffix('"'))
            else {
                continue;
            };
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                match le.parse() {
                    Ok(v) => v,
                    Err(_) => continue,
                }
            };
            if let Ok(n) = value.trim().parse::<f64>() {
                out.push((le, n as u64));
            }
        }
        Buckets(out)
    }

    /// Observations made between `before` and `self` (same bucket layout).
    pub fn since(&self, before: &Buckets) -> Buckets {
        Buckets(
            self.0
                .iter()
                .map(|&(le, n)| {
                    let b = before
                        .0
                        .iter()
                        .find(|(l, _)| *l == le)
                        .map_or(0, |&(_, c)| c);
                    (le, n.saturating_sub(b))
                })
                .collect(),
        )
    }

    pub fn count(&self) -> u64 {
        self.0.last().map_or(0, |&(_, n)| n)
    }

    /// Share of observations at or below `le` (exact when `le` is a bucket bound).
    pub fn fraction_le(&self, le: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let at = self
            .0
            .iter()
            .rev()
            .find(|(l, _)| *l <= le)
            .map_or(0, |&(_, n)| n);
        Some(at as f64 / total as f64)
    }

    /// The quantile formatted with its resolution: `≤ 50 µs` when it falls in the first
    /// bucket (the interpolated value would be an artefact there), else `~value`.
    pub fn quantile_text(&self, q: f64) -> String {
        let Some(v) = self.quantile(q) else {
            return "-".to_string();
        };
        let first = self.0.first().map_or(0.0, |&(le, _)| le);
        if v <= first {
            format!("≤ {}", crate::fmt_ns((first * 1e9) as u64))
        } else {
            format!("~{}", crate::fmt_ns((v * 1e9) as u64))
        }
    }

    /// The `q` quantile in seconds, interpolated linearly inside its bucket as Prometheus'
    /// `histogram_quantile` does (the first bucket's lower bound is 0; a quantile landing in
    /// `+Inf` reports the highest finite bound).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q * total as f64;
        let mut lower = 0.0;
        let mut below = 0u64;
        for &(le, n) in &self.0 {
            if n as f64 >= rank {
                if le.is_infinite() {
                    return Some(lower);
                }
                let in_bucket = (n - below) as f64;
                if in_bucket == 0.0 {
                    return Some(le);
                }
                return Some(lower + (le - lower) * (rank - below as f64) / in_bucket);
            }
            lower = le;
            below = n;
        }
        Some(lower)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_interpolates() {
        let text = "\
# TYPE tenant_gateway_admission_duration_seconds histogram
tenant_gateway_admission_duration_seconds_bucket{resource=\"httproutes\",le=\"0.0001\"} 50
tenant_gateway_admission_duration_seconds_bucket{resource=\"httproutes\",le=\"0.001\"} 150
tenant_gateway_admission_duration_seconds_bucket{resource=\"httproutes\",le=\"+Inf\"} 200
tenant_gateway_admission_duration_seconds_bucket{resource=\"gateways\",le=\"+Inf\"} 7
";
        let b = Buckets::parse(text, "httproutes");
        assert_eq!(b.count(), 200);
        let d = b.since(&Buckets(vec![
            (0.0001, 50),
            (0.001, 50),
            (f64::INFINITY, 100),
        ]));
        assert_eq!(d.0, vec![(0.0001, 0), (0.001, 100), (f64::INFINITY, 100)]);
        // rank 50 of 100, all in (0.0001, 0.001]: halfway through that bucket.
        let p50 = d.quantile(0.5).expect("some");
        assert!((p50 - 0.00055).abs() < 1e-9, "{p50}");
        assert_eq!(d.fraction_le(0.001), Some(1.0));
    }
}
