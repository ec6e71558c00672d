//! The kube edge of the PolicyReports: one watch of the reports named
//! [`REPORT_NAME`](super::render::REPORT_NAME) in every namespace, and the leader-gated
//! writes that take each namespace's report to what [`plan`] says.
//!
//! - The watch (field selector `metadata.name=tenant-gateway`, small pages: a report may be
//!   large) keeps, per namespace, only what a plan compares: uid, resourceVersion, whether
//!   the report is ours (our managed-by label) and its results' fingerprints with their
//!   timestamps. Reports of other names are never listed; a report of our name without our
//!   label is never written or deleted (a warning says so, once per namespace).
//! - Nothing is written before that watch has listed: without the CRD the list answers
//!   404, which is logged once with what to do, and the writer waits (the watch retries
//!   with backoff) until the CRD appears.
//! - A namespace is planned again when its results change (the input's entry differs), when
//!   its report changes or disappears (someone else's edit, a delete), when this replica
//!   becomes the leader (every namespace), and when its retry is due. Changes within
//!   [`DEBOUNCE`] are planned together; planning runs off the async runtime.
//! - Writes only on the Lease holder, checked before each one: server-side apply with
//!   [`FIELD_MANAGER`] (create without `force`; update with `force` and the resourceVersion
//!   observed, so a report replaced since is not taken over), delete with the uid and
//!   resourceVersion observed as preconditions. At most [`PARALLEL_WRITES`] at once, each
//!   within [`WRITE_TIMEOUT`]. A failed namespace is retried alone with exponential backoff
//!   ([`BASE_DELAY`] to [`MAX_DELAY`]); the others go on.
//! - What a write returns is kept at once, so the watch's echo of it plans nothing: a
//!   namespace whose results did not change is never written (SPEC §3.9).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::api::{PolicyReport, PolicyReportResult, PolicyReportSummary, Timestamp};
use super::render::{Action, Content, Observed, REPORT_NAME, ReportResult, plan};
use crate::cluster::lease::Leader;
use crate::cluster::watch::{FromWatch, LARGE_OBJECT_PAGE_SIZE, Lenient, Watched};
use crate::platform::FIELD_MANAGER;

/// What the writer reports on: each namespace's results. A namespace absent or with no
/// results has no report. An entry may share its `Arc` with the previous map when it did
/// not change (then it is not even compared).
pub type ReportInput = BTreeMap<String, Arc<Vec<ReportResult>>>;

/// The writer's input channel: `None` until the audit has judged every object once (the
/// watches it reads have listed). Nothing is planned before: a half-judged cluster would
/// delete reports only to write them again, on every restart.
pub type InputChannel = watch::Receiver<Option<Arc<ReportInput>>>;

/// Changes arriving within this window are planned together.
pub const DEBOUNCE: Duration = Duration::from_millis(200);
/// Writes sent side by side.
pub const PARALLEL_WRITES: usize = 4;
/// The longest one write may take before it counts as failed.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// The first retry of a failed namespace; doubled per further failure up to [`MAX_DELAY`].
pub const BASE_DELAY: Duration = Duration::from_secs(1);
pub const MAX_DELAY: Duration = Duration::from_secs(300);
/// How often a replica that is not the leader looks again whether it has become one while
/// it has work (the Lease's own renew period).
const LEADER_RECHECK: Duration = Duration::from_secs(2);

/// What the writer has done so far, for readiness, metrics and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterStatus {
    /// `None` until the first list answered; `Some(false)` while the CRD is not installed.
    pub crd_installed: Option<bool>,
    /// The watch of our reports has listed: writes may go out.
    pub synced: bool,
    /// Changes of the input taken so far.
    pub inputs: u64,
    /// Namespaces waiting for a plan.
    pub pending: usize,
    /// Namespaces whose last write failed (retried with backoff).
    pub failing: usize,
    /// Namespaces with results but a report of our name that is another tool's (no report
    /// of ours there: worth an alert where tenants may write PolicyReports).
    pub foreign: usize,
    /// Passes that planned and wrote (as the leader, after the watch listed).
    pub passes: u64,
    /// Reports created or updated, and deleted.
    pub applied: u64,
    pub deleted: u64,
}

/// Why the writer stopped while its input was still open.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error("the watch of PolicyReports ended")]
    WatchEnded,
}

/// Why one namespace's write failed; it is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{verb} of PolicyReport {namespace}/{REPORT_NAME} failed: {source}")]
    Api {
        verb: &'static str,
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "{verb} of PolicyReport {namespace}/{REPORT_NAME} took longer than {secs} s; it is retried with backoff"
    )]
    Timeout {
        verb: &'static str,
        namespace: String,
        secs: u64,
    },
}

/// Run the writer until `input`'s sender is gone (`Ok`) or the watch ends (`Err`).
///
/// `leader` is the reconciler's Lease (`serve`'s `Reconciler::leader`): only its holder
/// writes. Wiring: `let (tx, rx) = watch::channel(None);` hand `rx` here, and send
/// `Some(map)` once the audit has judged everything and whenever its results change.
pub async fn run(client: Client, leader: Leader, input: InputChannel) -> Result<(), WriterError> {
    Writer::new(client, leader).run(input).await
}

/// The writer with its status channel ([`run`] is the plain form).
pub struct Writer {
    client: Client,
    leader: Leader,
    status: watch::Sender<WriterStatus>,
}

impl Writer {
    pub fn new(client: Client, leader: Leader) -> Writer {
        Writer {
            client,
            leader,
            status: watch::channel(WriterStatus::default()).0,
        }
    }

    /// What the writer has done so far.
    pub fn status(&self) -> watch::Receiver<WriterStatus> {
        self.status.subscribe()
    }

    /// See [`run`].
    pub async fn run(self, mut input: InputChannel) -> Result<(), WriterError> {
        let mut reports = Box::pin(report_watch(self.client.clone()));
        let mut claim = self.leader.watch();
        let mut claim_open = true;
        let mut state = State::new(input.borrow_and_update().clone());
        let mut pass_at: Option<Instant> = None;
        loop {
            if pass_at.is_none() && state.ready() && !state.dirty.is_empty() {
                let wait = if self.leader.is_leader() {
                    DEBOUNCE
                } else {
                    LEADER_RECHECK
                };
                pass_at = Some(Instant::now() + wait);
            }
            let retry_at = state.next_retry(Instant::now());
            tokio::select! {
                event = reports.next() => match event {
                    Some(event) => state.on_event(event),
                    None => return Err(WriterError::WatchEnded),
                },
                changed = input.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    let next = input.borrow_and_update().clone();
                    state.on_input(next, Instant::now());
                }
                changed = claim.changed(), if claim_open => match changed {
                    Ok(()) => {
                        if *claim.borrow_and_update() {
                            state.mark_all(Instant::now());
                            pass_at = None;
                        }
                    }
                    // A fixed claim (`Leader::always`) or the election is gone.
                    Err(_) => claim_open = false,
                },
                () = sleep_until(pass_at), if pass_at.is_some() => {
                    pass_at = None;
                    self.pass(&mut state).await;
                }
                () = sleep_until(retry_at), if retry_at.is_some() => {
                    state.release_due(Instant::now());
                }
            }
            self.status.send_replace(state.status());
        }
    }

    /// Plan every dirty namespace and execute the writes, as the leader once the watch has
    /// listed.
    async fn pass(&self, state: &mut State) {
        if !state.ready() || !self.leader.is_leader() {
            return;
        }
        state.passes += 1;
        let namespaces: Vec<String> = std::mem::take(&mut state.dirty).into_iter().collect();
        let observed: Vec<Option<Observed>> = namespaces
            .iter()
            .map(|ns| state.observed.get(ns).cloned())
            .collect();
        let input = state.input.clone();
        let now = timestamp_now();
        let planned = {
            let namespaces = namespaces.clone();
            tokio::task::spawn_blocking(move || {
                namespaces
                    .iter()
                    .zip(&observed)
                    .map(|(ns, o)| {
                        let results = input.get(ns).map_or(&[][..], |r| r.as_slice());
                        plan(ns, results, o.as_ref(), now)
                    })
                    .collect::<Vec<Action>>()
            })
            .await
        };
        let planned = match planned {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "planning the PolicyReports failed; retried with the next change");
                state.dirty.extend(namespaces);
                return;
            }
        };
        let mut work = Vec::new();
        for (ns, action) in namespaces.into_iter().zip(planned) {
            if !matches!(action, Action::LeaveForeign) {
                state.foreign.remove(&ns);
            }
            match action {
                Action::Keep => {
                    state.backoff.remove(&ns);
                }
                Action::LeaveForeign => {
                    state.backoff.remove(&ns);
                    if state.foreign.insert(ns.clone()) {
                        tracing::warn!(namespace = %ns,
                            "a PolicyReport named {REPORT_NAME} without app.kubernetes.io/managed-by=tenant-gateway belongs to another tool and is left alone; this namespace gets no tenant-gateway report until it is renamed or deleted");
                    }
                }
                action => work.push((ns, action)),
            }
        }
        let client = &self.client;
        let leader = &self.leader;
        let done: Vec<(String, Result<Written, WriteError>)> = futures::stream::iter(work)
            .map(|(ns, action)| async move {
                let r = execute(client, leader, &ns, action).await;
                (ns, r)
            })
            .buffer_unordered(PARALLEL_WRITES)
            .collect()
            .await;
        let now = Instant::now();
        for (ns, r) in done {
            match r {
                Ok(Written::Applied(o)) => {
                    state.applied += 1;
                    state.backoff.remove(&ns);
                    state.observed.insert(ns, o);
                }
                Ok(Written::Deleted) => {
                    state.deleted += 1;
                    state.backoff.remove(&ns);
                    state.observed.remove(&ns);
                }
                // The report changed since it was read; its watch event plans it again.
                Ok(Written::Stale) => {
                    state.backoff.remove(&ns);
                }
                Ok(Written::NotLeader) => {
                    state.dirty.insert(ns);
                }
                Err(e) => {
                    let delay = state.failed(&ns, now);
                    tracing::warn!(namespace = %ns, error = %e, retry_in = ?delay,
                        "PolicyReport write failed; this namespace is retried with backoff, the others go on");
                }
            }
        }
    }
}

/// What one namespace's write came to.
enum Written {
    /// Created or updated: the report as the API server stored it.
    Applied(Observed),
    Deleted,
    /// A precondition failed: the report changed (or went) since the watch saw it.
    Stale,
    /// The Lease was lost before the write went out.
    NotLeader,
}

async fn execute(
    client: &Client,
    leader: &Leader,
    namespace: &str,
    action: Action,
) -> Result<Written, WriteError> {
    if !leader.is_leader() {
        return Ok(Written::NotLeader);
    }
    let api: Api<PolicyReport> = Api::namespaced(client.clone(), namespace);
    let (verb, write) = match action {
        Action::Apply {
            mut report,
            resource_version,
            omitted,
        } => {
            if omitted > 0 {
                tracing::info!(
                    namespace,
                    omitted,
                    "the PolicyReport lists the failures first and leaves out passes over its size budget; the summary counts them all"
                );
            }
            let mut pp = PatchParams::apply(FIELD_MANAGER);
            // Ours already: take back any field another manager set. A create never forces,
            // so a same-named report that appeared since the watch saw none is not taken
            // over.
            pp.force = resource_version.is_some();
            report.metadata.resource_version = resource_version;
            let api = api.clone();
            let write = async move {
                api.patch(REPORT_NAME, &pp, &Patch::Apply(&*report))
                    .await
                    .map(|stored| Written::Applied(observed_of(&stored)))
            };
            ("server-side apply", write.boxed())
        }
        Action::Delete {
            uid,
            resource_version,
        } => {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: Some(resource_version),
                }),
                ..DeleteParams::default()
            };
            let write = async move {
                match api.delete(REPORT_NAME, &dp).await {
                    Ok(_) => Ok(Written::Deleted),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(Written::Deleted),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(Written::Stale),
                    Err(e) => Err(e),
                }
            };
            ("delete", write.boxed())
        }
        Action::Keep | Action::LeaveForeign => return Ok(Written::Stale),
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(r) => r.map_err(|source| WriteError::Api {
            verb,
            namespace: namespace.to_string(),
            source,
        }),
        Err(_) => Err(WriteError::Timeout {
            verb,
            namespace: namespace.to_string(),
            secs: WRITE_TIMEOUT.as_secs(),
        }),
    }
}

/// A report as the watch decodes it: the parts a plan compares, each read on its own so a
/// malformed part (another writer's) marks the report for a rewrite instead of hiding it.
#[derive(Debug, Clone, Deserialize)]
struct StoredReport {
    #[serde(default)]
    metadata: StoredMeta,
    #[serde(default)]
    results: Lenient<Vec<PolicyReportResult>>,
    #[serde(default)]
    summary: Lenient<PolicyReportSummary>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredMeta {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    labels: Lenient<BTreeMap<String, String>>,
}

impl FromWatch for StoredReport {
    fn from_watch(raw: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(raw)
    }
}

impl StoredReport {
    fn observed(self) -> Observed {
        let content = match (self.results, self.summary) {
            (Lenient::Bad, _) | (_, Lenient::Bad) => None,
            (results, summary) => Some(Content::of(
                &results.ok().unwrap_or_default(),
                summary.ok().unwrap_or_default(),
            )),
        };
        Observed::new(
            self.metadata.uid.unwrap_or_default(),
            self.metadata.resource_version.unwrap_or_default(),
            self.metadata.labels.ok().as_ref(),
            content,
        )
    }
}

fn observed_of(stored: &PolicyReport) -> Observed {
    let m = &stored.metadata;
    Observed::new(
        m.uid.clone().unwrap_or_default(),
        m.resource_version.clone().unwrap_or_default(),
        m.labels.as_ref(),
        Some(Content::of(&stored.results, stored.summary)),
    )
}

type ReportEvent = Result<Event<Watched<StoredReport>>, watcher::Error>;

fn report_watch(client: Client) -> impl Stream<Item = ReportEvent> + Send + 'static {
    let resource = ApiResource::erase::<PolicyReport>(&());
    let api: Api<Watched<StoredReport>> = Api::all_with(client, &resource);
    let cfg = watcher::Config::default()
        .fields(&format!("metadata.name={REPORT_NAME}"))
        .page_size(LARGE_OBJECT_PAGE_SIZE);
    watcher::watcher(api, cfg).default_backoff()
}

/// The list or watch answered 404: the PolicyReport CRD is not installed (or was removed).
fn crd_missing(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

fn timestamp_now() -> Timestamp {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    Timestamp {
        seconds: i64::try_from(secs).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The delay after the `failures`-th consecutive failure.
fn delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    BASE_DELAY
        .saturating_mul(2u32.saturating_pow(exp))
        .min(MAX_DELAY)
}

struct Failed {
    failures: u32,
    retry_at: Instant,
}

/// The writer's view: the input, our reports as last seen, and what is left to do.
struct State {
    input: Arc<ReportInput>,
    /// The audit has judged everything once (the first `Some` input).
    judged: bool,
    observed: BTreeMap<String, Observed>,
    relist: Option<BTreeMap<String, Observed>>,
    synced: bool,
    crd_installed: Option<bool>,
    dirty: BTreeSet<String>,
    backoff: BTreeMap<String, Failed>,
    /// Namespaces with results whose `tenant-gateway` report is another tool's.
    foreign: BTreeSet<String>,
    inputs: u64,
    passes: u64,
    applied: u64,
    deleted: u64,
}

impl State {
    fn new(input: Option<Arc<ReportInput>>) -> State {
        State {
            judged: input.is_some(),
            input: input.unwrap_or_default(),
            observed: BTreeMap::new(),
            relist: None,
            synced: false,
            crd_installed: None,
            dirty: BTreeSet::new(),
            backoff: BTreeMap::new(),
            foreign: BTreeSet::new(),
            inputs: 0,
            passes: 0,
            applied: 0,
            deleted: 0,
        }
    }

    /// Plans may run: the audit has judged everything and our reports are listed.
    fn ready(&self) -> bool {
        self.judged && self.synced
    }

    fn status(&self) -> WriterStatus {
        WriterStatus {
            crd_installed: self.crd_installed,
            synced: self.synced,
            inputs: self.inputs,
            pending: self.dirty.len(),
            failing: self.backoff.len(),
            foreign: self.foreign.len(),
            passes: self.passes,
            applied: self.applied,
            deleted: self.deleted,
        }
    }

    /// Plan `ns` at the next pass, unless it waits for its retry.
    fn mark(&mut self, ns: &str, now: Instant) {
        if self.backoff.get(ns).is_none_or(|f| f.retry_at <= now) {
            self.dirty.insert(ns.to_string());
        }
    }

    fn mark_all(&mut self, now: Instant) {
        let all: BTreeSet<String> = self
            .input
            .keys()
            .chain(self.observed.keys())
            .cloned()
            .collect();
        for ns in all {
            self.mark(&ns, now);
        }
    }

    fn on_input(&mut self, next: Option<Arc<ReportInput>>, now: Instant) {
        self.inputs += 1;
        let Some(next) = next else {
            return;
        };
        if !self.judged {
            self.judged = true;
            self.input = next;
            self.mark_all(now);
            return;
        }
        let prev = std::mem::replace(&mut self.input, next);
        let changed: Vec<String> = prev
            .keys()
            .chain(self.input.keys())
            .filter(|ns| {
                let (a, b) = (prev.get(*ns), self.input.get(*ns));
                match (a, b) {
                    (Some(a), Some(b)) => !Arc::ptr_eq(a, b) && a != b,
                    (Some(x), None) | (None, Some(x)) => !x.is_empty(),
                    (None, None) => false,
                }
            })
            .cloned()
            .collect();
        for ns in changed {
            self.mark(&ns, now);
        }
    }

    fn on_event(&mut self, event: ReportEvent) {
        let now = Instant::now();
        match event {
            Ok(Event::Apply(w)) => {
                let (ns, o) = entry(w);
                if self.observed.get(&ns) != Some(&o) {
                    self.observed.insert(ns.clone(), o);
                    self.mark(&ns, now);
                }
            }
            Ok(Event::Delete(w)) => {
                let (ns, _) = entry(w);
                if self.observed.remove(&ns).is_some() {
                    self.mark(&ns, now);
                }
            }
            Ok(Event::Init) => self.relist = Some(BTreeMap::new()),
            Ok(Event::InitApply(w)) => {
                let (ns, o) = entry(w);
                self.relist.get_or_insert_with(BTreeMap::new).insert(ns, o);
            }
            Ok(Event::InitDone) => {
                if let Some(list) = self.relist.take() {
                    self.observed = list;
                }
                if self.crd_installed == Some(false) {
                    tracing::info!("the PolicyReport CRD is installed; writing reports");
                }
                self.crd_installed = Some(true);
                self.synced = true;
                self.mark_all(now);
            }
            Err(e) if crd_missing(&e) => {
                if self.crd_installed != Some(false) {
                    tracing::warn!(
                        crd = super::api::CRD_NAME,
                        version = super::api::VERSION,
                        "the PolicyReport CRD is not installed: no PolicyReports are written until it is (chart value audit.installPolicyReportCRD=true, or the CRD of Kyverno or Policy Reporter); waiting for it"
                    );
                }
                self.crd_installed = Some(false);
                self.synced = false;
                self.relist = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "PolicyReport watch error; retrying with backoff");
            }
        }
    }

    fn failed(&mut self, ns: &str, now: Instant) -> Duration {
        let f = self.backoff.entry(ns.to_string()).or_insert(Failed {
            failures: 0,
            retry_at: now,
        });
        f.failures = f.failures.saturating_add(1);
        let d = delay(f.failures);
        f.retry_at = now + d;
        d
    }

    /// The next retry still to come that is not planned yet.
    fn next_retry(&self, now: Instant) -> Option<Instant> {
        self.backoff
            .iter()
            .filter(|(ns, f)| f.retry_at > now && !self.dirty.contains(*ns))
            .map(|(_, f)| f.retry_at)
            .min()
    }

    fn release_due(&mut self, now: Instant) {
        let due: Vec<String> = self
            .backoff
            .iter()
            .filter(|(_, f)| f.retry_at <= now)
            .map(|(ns, _)| ns.clone())
            .collect();
        self.dirty.extend(due);
    }
}

/// `(namespace, what a plan compares)` of a watched report; one that does not decode at all
/// counts as another tool's (never written or deleted).
fn entry(w: Watched<StoredReport>) -> (String, Observed) {
    let (ns, _) = w.key();
    let o = match w.body {
        Ok(r) => r.observed(),
        Err(e) => {
            tracing::warn!(namespace = %ns, error = %e,
                "PolicyReport {REPORT_NAME} does not decode; left alone");
            Observed::new(String::new(), String::new(), None, None)
        }
    };
    (ns, o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::policy_report::render::{ObjectRef, Outcome};
    use crate::policy::Layer;

    fn result(name: &str) -> ReportResult {
        ReportResult {
            object: ObjectRef {
                api_version: "gateway.networking.k8s.io/v1".into(),
                kind: "HTTPRoute".into(),
                namespace: Some("tenant-a".into()),
                name: name.into(),
                uid: None,
            },
            layer: Layer::Route,
            rule: "hostnames-within-apex".into(),
            outcome: Outcome::Fail,
            message: "outside".into(),
        }
    }

    fn input(entries: &[(&str, Arc<Vec<ReportResult>>)]) -> Option<Arc<ReportInput>> {
        Some(Arc::new(
            entries
                .iter()
                .map(|(ns, r)| (ns.to_string(), r.clone()))
                .collect(),
        ))
    }

    #[test]
    fn nothing_is_planned_before_the_audit_has_judged_everything() {
        let mut s = State::new(None);
        s.on_event(Ok(Event::Init));
        s.on_event(Ok(Event::InitDone));
        assert!(s.synced && !s.ready(), "listed, but not judged");
        s.on_input(None, Instant::now());
        assert!(!s.ready());
        s.on_input(
            input(&[("tenant-a", Arc::new(vec![result("a")]))]),
            Instant::now(),
        );
        assert!(s.ready());
        assert!(s.dirty.contains("tenant-a"), "every namespace planned once");
    }

    #[test]
    fn only_namespaces_whose_results_changed_are_planned() {
        let a = Arc::new(vec![result("a")]);
        let b = Arc::new(vec![result("b")]);
        let mut s = State::new(input(&[("tenant-a", a.clone()), ("tenant-b", b.clone())]));
        let now = Instant::now();
        // Same Arcs, an equal copy, an empty entry where there was none: nothing to plan.
        s.on_input(
            input(&[
                ("tenant-a", a.clone()),
                ("tenant-b", Arc::new(vec![result("b")])),
                ("tenant-c", Arc::new(vec![])),
            ]),
            now,
        );
        assert!(s.dirty.is_empty(), "{:?}", s.dirty);
        // One changed, one gone, one new.
        s.on_input(
            input(&[
                ("tenant-a", Arc::new(vec![result("a2")])),
                ("tenant-d", Arc::new(vec![result("d")])),
            ]),
            now,
        );
        let dirty: Vec<&str> = s.dirty.iter().map(String::as_str).collect();
        assert_eq!(dirty, ["tenant-a", "tenant-b", "tenant-d"]);
        assert_eq!(s.inputs, 2);
    }

    #[test]
    fn a_failed_namespace_waits_for_its_retry_alone() {
        let mut s = State::new(input(&[]));
        let t0 = Instant::now();
        assert_eq!(s.failed("tenant-a", t0), BASE_DELAY);
        assert_eq!(s.failed("tenant-a", t0), BASE_DELAY * 2);
        s.mark("tenant-a", t0);
        s.mark("tenant-b", t0);
        assert_eq!(
            s.dirty.iter().map(String::as_str).collect::<Vec<_>>(),
            ["tenant-b"],
            "a change does not cut a backoff short"
        );
        assert_eq!(s.next_retry(t0), Some(t0 + BASE_DELAY * 2));
        s.release_due(t0 + BASE_DELAY * 2);
        assert!(s.dirty.contains("tenant-a"));
        assert_eq!(s.next_retry(t0), None, "planned already");
        assert_eq!(
            s.status().failing,
            1,
            "still failing until a write succeeds"
        );
        assert_eq!(delay(40), MAX_DELAY);
    }

    #[test]
    fn the_watch_decodes_leniently_and_knows_a_missing_crd() {
        let ours = r#"{"metadata": {"name": "tenant-gateway", "namespace": "tenant-a", "uid": "u",
            "resourceVersion": "5", "labels": {"app.kubernetes.io/managed-by": "tenant-gateway"}},
            "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0},
            "results": [{"policy": "p", "result": "fail"}]}"#;
        let o = serde_json::from_str::<StoredReport>(ours)
            .expect("decodes")
            .observed();
        assert!(o.ours);
        assert_eq!((o.uid.as_str(), o.resource_version.as_str()), ("u", "5"));
        assert!(o.content.is_some());
        let bad_results = r#"{"metadata": {"uid": "u", "labels": {"app.kubernetes.io/managed-by": "tenant-gateway"}},
            "results": [{"result": "fail"}]}"#;
        let o = serde_json::from_str::<StoredReport>(bad_results)
            .expect("decodes")
            .observed();
        assert!(o.ours && o.content.is_none(), "rewritten, not skipped");
        let foreign =
            r#"{"metadata": {"uid": "u", "labels": {"app.kubernetes.io/managed-by": "kyverno"}}}"#;
        assert!(
            !serde_json::from_str::<StoredReport>(foreign)
                .expect("decodes")
                .observed()
                .ours
        );

        let status = |code| {
            Box::new(kube::core::Status {
                code,
                ..kube::core::Status::default()
            })
        };
        assert!(crd_missing(&watcher::Error::InitialListFailed(
            kube::Error::Api(status(404))
        )));
        assert!(!crd_missing(&watcher::Error::InitialListFailed(
            kube::Error::Api(status(403))
        )));
        let mut s = State::new(input(&[]));
        s.on_event(Err(watcher::Error::InitialListFailed(kube::Error::Api(
            status(404),
        ))));
        assert_eq!((s.crd_installed, s.synced), (Some(false), false));
        s.on_event(Ok(Event::Init));
        s.on_event(Ok(Event::InitDone));
        assert_eq!((s.crd_installed, s.synced), (Some(true), true));
    }
}
