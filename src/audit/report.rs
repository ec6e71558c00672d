//! What `tenant-gateway audit` prints (SPEC §1, §3.9): a violation per line, or JSON, and the
//! exit code — 0 nothing found, 1 violations, 2 something could not be judged (an object that
//! does not decode or has a field of the wrong type, a kind whose listing failed).

use serde::Serialize;

use super::store::Store;
use super::{AuditResult, Outcome};

/// A kind that was not judged, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotAudited {
    pub kind: String,
    pub reason: String,
    /// The kind should have been judged but could not be (unreadable, or its layer is on but
    /// lacks `--root-host`; the exit code says so); not an error: its CRD is not installed, or
    /// the configuration turns its layer off.
    pub error: bool,
}

/// Counts for the summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Namespaces with an apex-table result.
    pub namespaces: usize,
    /// Objects judged.
    pub objects: usize,
    /// Results that fail.
    pub violations: usize,
    /// Results that could not be judged, and input that could not be read.
    pub errors: usize,
}

/// The outcome of one audit.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Every result that is not a pass.
    pub results: Vec<AuditResult>,
    pub not_audited: Vec<NotAudited>,
    /// Input that is no object at all (a snapshot document that does not parse), with where.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    pub summary: Summary,
}

impl Report {
    pub fn new(store: &Store, not_audited: Vec<NotAudited>, unreadable: Vec<String>) -> Report {
        let results = store.violations();
        let (namespaces, objects) = store.audited();
        let violations = results
            .iter()
            .filter(|r| r.outcome == Outcome::Fail)
            .count();
        let errors = results.len() - violations + unreadable.len();
        Report {
            results,
            not_audited,
            unreadable,
            summary: Summary {
                namespaces,
                objects,
                violations,
                errors,
            },
        }
    }

    /// 2 when something could not be judged, else 1 when something violates, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.summary.errors > 0 || self.not_audited.iter().any(|n| n.error) {
            2
        } else if self.summary.violations > 0 {
            1
        } else {
            0
        }
    }

    /// One line per violation message (`RESULT LAYER KIND OBJECT MESSAGE`), then the kinds
    /// not audited and a summary line.
    pub fn table(&self) -> String {
        let mut rows: Vec<[String; 5]> = vec![[
            "RESULT".into(),
            "LAYER".into(),
            "KIND".into(),
            "OBJECT".into(),
            "MESSAGE".into(),
        ]];
        for r in &self.results {
            for m in &r.messages {
                rows.push([
                    r.outcome.as_str().to_ascii_uppercase(),
                    r.layer.as_str().to_string(),
                    r.object.kind.clone(),
                    r.object.display(),
                    m.clone(),
                ]);
            }
        }
        for u in &self.unreadable {
            rows.push([
                "ERROR".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                u.clone(),
            ]);
        }
        let mut out = String::new();
        if rows.len() > 1 {
            let mut width = [0usize; 4];
            for row in &rows {
                for (w, cell) in width.iter_mut().zip(row.iter()) {
                    *w = (*w).max(cell.chars().count());
                }
            }
            for row in &rows {
                for (w, cell) in width.iter().zip(row.iter()) {
                    out.push_str(cell);
                    out.push_str(&" ".repeat(w - cell.chars().count() + 2));
                }
                out.push_str(&row[4]);
                out.push('\n');
            }
        }
        for n in &self.not_audited {
            let what = if n.error { "error" } else { "not audited" };
            out.push_str(&format!("{what}: {}: {}\n", n.kind, n.reason));
        }
        let s = self.summary;
        let found = if s.violations + s.errors == 0 {
            "no violations".to_string()
        } else {
            format!(
                "{} violation{}, {} error{}",
                s.violations,
                plural(s.violations),
                s.errors,
                plural(s.errors)
            )
        };
        out.push_str(&format!(
            "audited {} object{} and {} namespace{}: {found}\n",
            s.objects,
            plural(s.objects),
            s.namespaces,
            plural(s.namespaces)
        ));
        out
    }

    pub fn json(&self) -> String {
        // Strings, numbers and lists only: serializing cannot fail.
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::audit::kinds::GuardedKind;
    use crate::cluster::apex::ApexMap;
    use crate::policy::PolicyConfig;

    fn store_with(hostnames: &[&str], broken: bool) -> Store {
        let cfg = PolicyConfig {
            root_host: Some("example.org".into()),
            ..PolicyConfig::default()
        };
        let mut s = Store::new(Arc::new(cfg));
        let apexes = ApexMap::default();
        s.namespace("tenant-a", true, Some("a.example.org"), &apexes);
        s.apply(
            GuardedKind::HttpRoute,
            "tenant-a",
            "web",
            None,
            &json!({"spec": {"hostnames": hostnames}}),
            &apexes,
        );
        if broken {
            s.apply_unreadable(GuardedKind::Gateway, "tenant-a", "gw", "bad");
        }
        s
    }

    #[test]
    fn exit_codes() {
        let none = Report::new(&store_with(&["w.a.example.org"], false), vec![], vec![]);
        assert_eq!(none.exit_code(), 0);
        assert!(
            none.table()
                .ends_with("audited 1 object and 1 namespace: no violations\n")
        );
        let some = Report::new(&store_with(&["w.b.example.org"], false), vec![], vec![]);
        assert_eq!(some.exit_code(), 1);
        let broken = Report::new(&store_with(&["w.b.example.org"], true), vec![], vec![]);
        assert_eq!(broken.exit_code(), 2, "an object that cannot be judged");
        let unreadable = Report::new(
            &store_with(&["w.a.example.org"], false),
            vec![],
            vec!["a.yaml#2: not YAML".into()],
        );
        assert_eq!(unreadable.exit_code(), 2);
        let missing = NotAudited {
            kind: "TLSRoute".into(),
            reason: "not served".into(),
            error: false,
        };
        let r = Report::new(
            &store_with(&["w.a.example.org"], false),
            vec![missing.clone()],
            vec![],
        );
        assert_eq!(r.exit_code(), 0, "a kind the cluster lacks is a note");
        assert!(r.table().contains("not audited: TLSRoute: not served\n"));
        let failed = NotAudited {
            error: true,
            ..missing
        };
        let r = Report::new(
            &store_with(&["w.a.example.org"], false),
            vec![failed],
            vec![],
        );
        assert_eq!(r.exit_code(), 2, "a kind that could not be listed");
    }

    #[test]
    fn a_line_per_message_and_json_for_machines() {
        let r = Report::new(
            &store_with(&["w.b.example.org", "x.b.example.org"], true),
            vec![],
            vec![],
        );
        let table = r.table();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("RESULT  LAYER"), "{table}");
        assert_eq!(lines.len(), 5, "header, 3 messages, summary: {table}");
        assert!(
            lines[1].starts_with("ERROR   gateway  Gateway    tenant-a/gw"),
            "{table}"
        );
        assert!(
            lines[2].starts_with("FAIL    route    HTTPRoute  tenant-a/web"),
            "{table}"
        );
        assert!(
            lines[2].contains("\"w.b.example.org\" is not allowed"),
            "{table}"
        );
        assert_eq!(
            lines[4],
            "audited 2 objects and 1 namespace: 1 violation, 1 error"
        );
        let v: Value = serde_json::from_str(&r.json()).expect("json");
        assert_eq!(
            v["summary"],
            json!({"namespaces": 1, "objects": 2, "violations": 1, "errors": 1})
        );
        let route = &v["results"][1];
        assert_eq!(route["kind"], "HTTPRoute");
        assert_eq!(route["namespace"], "tenant-a");
        assert_eq!(route["layer"], "route");
        assert_eq!(route["rule"], "route-hostnames-within-apex");
        assert_eq!(route["result"], "fail");
        assert_eq!(route["messages"].as_array().map(Vec::len), Some(2));
        assert_eq!(v["notAudited"], json!([]));
    }
}
