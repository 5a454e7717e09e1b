//! A real gRPC worker for tests: it subscribes to a sidecar and a background task records every
//! event of its stream, timestamped, in a shared log. Tests wait on that log with timeouts and
//! answer triggers with `complete`/`report_failure`; `close` ends the stream like a worker that
//! goes away. Dropping a `TestWorker` ends its stream too.
//!
//! [`TestWorker::set_strict`] makes it a worker that follows the contract of the proto to the
//! letter on its own: it works only under a valid lease (until the earlier of receipt +
//! `valid_for` and `expires_at`), declines a trigger that comes without one, stops at the end of
//! its lease or on `Revoke` and declines what it stopped, and answers only on the stream that
//! delivered the trigger. Its runs are recorded ([`TestWorker::strict_runs`]).
use shardcar::proto::subscribe_response::Event;
use shardcar::proto::worker_service_client::WorkerServiceClient;
use shardcar::proto::{
    Assignment, CompleteRequest, DeclineRequest, JobConfig, Lease, Registered,
    ReportFailureRequest, Revoke, Shutdown, SubscribeRequest, SubscribeResponse, Trigger,
};
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::Status;

/// How long `subscribe` waits for the `Registered` event.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(15);

/// One received event and when it arrived.
pub type TimedEvent = (Instant, SubscribeResponse);

/// How a worker's stream ended.
#[derive(Clone, Debug)]
pub enum StreamEnd {
    /// The test called [`TestWorker::close`].
    Closed,
    /// The sidecar ended the stream with OK.
    Finished,
    /// The stream failed with this status (sidecar error, or the connection broke).
    Failed(Status),
}

/// A wait that did not succeed; its message lists the events seen so far.
#[derive(Debug)]
pub struct WaitError {
    pub what: String,
    pub waited: Duration,
    pub ended: Option<StreamEnd>,
    pub summary: String,
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gave up waiting for {} after {:?}",
            self.what, self.waited
        )?;
        if let Some(end) = &self.ended {
            write!(f, " (the stream had ended: {end:?})")?;
        }
        write!(f, "\nevents seen:\n{}", self.summary)
    }
}

impl std::error::Error for WaitError {}

#[derive(Default)]
struct Log {
    events: Vec<TimedEvent>,
    end: Option<StreamEnd>,
    /// Index into the triggers handed out by `next_trigger`.
    triggers_taken: usize,
    /// Answers sent by auto-complete: execution id and outcome.
    auto_completed: Vec<(String, Result<(), Status>)>,
    /// Every answer sent (auto or not): execution id and when it was sent.
    answered: Vec<(String, Instant)>,
    /// Runs of the strict mode.
    strict_runs: Vec<StrictRun>,
}

/// How a run of the strict worker ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Its work was done under a valid lease and `Complete` was sent (the reply in `reply`).
    Completed,
    /// It stopped before the end: lease ran out, revoked, or the stream ended.
    Stopped(String),
    /// Declined at once: it came without a valid lease.
    Declined,
}

/// One trigger handled by the strict worker.
#[derive(Clone, Debug)]
pub struct StrictRun {
    pub execution_id: String,
    pub items: Vec<i32>,
    pub source: i32,
    pub tokens: std::collections::HashMap<i32, i64>,
    pub start: Instant,
    pub end: Option<Instant>,
    pub outcome: Option<RunEnd>,
    /// The sidecar's reply to the answer or decline (`None`: none was sent or none came).
    pub reply: Option<Result<(), tonic::Code>>,
}

/// The strict worker's lease: when it ends, on this process's monotonic clock.
#[derive(Default)]
struct StrictState {
    work: Option<Duration>,
    lease_until: Option<Instant>,
    revoked: std::collections::HashSet<(String, i32)>,
}

struct Shared {
    // Locked only for short sections without `.await`: pushes and snapshots.
    log: Mutex<Log>,
    changed_tx: watch::Sender<u64>,
    /// Auto-complete, and how long each trigger is worked on before its answer (`None`: off).
    auto_complete: Mutex<Option<Duration>>,
    strict: Mutex<StrictState>,
    started: Instant,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn auto_complete(&self) -> MutexGuard<'_, Option<Duration>> {
        self.auto_complete.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.changed_tx.send_modify(|v| *v += 1);
    }
}

/// Whether the sidecar answered with the ErrorInfo reason REGISTRY_UNAVAILABLE.
fn registry_unavailable(status: &Status) -> bool {
    tonic_types::StatusExt::get_error_details(status)
        .error_info()
        .is_some_and(|info| info.reason == "REGISTRY_UNAVAILABLE")
}

/// A subscribed worker; see the module docs.
pub struct TestWorker {
    endpoint: String,
    client: WorkerServiceClient<Channel>,
    shared: Arc<Shared>,
    instance_id: String,
    close_tx: Option<oneshot::Sender<()>>,
    reader: Option<JoinHandle<()>>,
}

impl TestWorker {
    /// Connects to `endpoint`, subscribes with `request` and waits (up to 15 s) for the
    /// `Registered` event.
    ///
    /// # Errors
    /// The status of the call, or of the stream if it ends before `Registered`
    /// (`DEADLINE_EXCEEDED` if nothing came within 15 s).
    pub async fn subscribe(
        endpoint: &str,
        request: SubscribeRequest,
    ) -> Result<TestWorker, Status> {
        Self::subscribe_with(endpoint, request, None).await
    }

    /// [`TestWorker::subscribe`] as a strict worker from its first event on (see
    /// [`TestWorker::set_strict`]): no trigger can come before the mode is set and be left
    /// unanswered.
    pub async fn subscribe_strict(
        endpoint: &str,
        request: SubscribeRequest,
        work: Duration,
    ) -> Result<TestWorker, Status> {
        Self::subscribe_with(endpoint, request, Some(work)).await
    }

    /// [`TestWorker::subscribe`] over `channel`, a connection to `endpoint` that other workers
    /// may share, as the jobs of one worker process do with either client.
    pub async fn subscribe_on(
        endpoint: &str,
        channel: Channel,
        request: SubscribeRequest,
    ) -> Result<TestWorker, Status> {
        Self::subscribe_over(endpoint, channel, request, None).await
    }

    async fn subscribe_with(
        endpoint: &str,
        request: SubscribeRequest,
        strict_work: Option<Duration>,
    ) -> Result<TestWorker, Status> {
        let channel = shardcar::ctl::connect(endpoint)
            .await
            .map_err(|e| Status::unavailable(format!("cannot connect to {endpoint}: {e}")))?;
        Self::subscribe_over(endpoint, channel, request, strict_work).await
    }

    /// Subscribes again, with backoff, while the sidecar answers REGISTRY_UNAVAILABLE (ZooKeeper
    /// did not answer within its call deadline: a slow or loaded ensemble), as the contract lets
    /// a worker and both clients do, for up to [`REGISTER_TIMEOUT`]. Every other error, and
    /// UNAVAILABLE for other reasons (a draining sidecar), is returned at once.
    async fn subscribe_over(
        endpoint: &str,
        channel: Channel,
        request: SubscribeRequest,
        strict_work: Option<Duration>,
    ) -> Result<TestWorker, Status> {
        let deadline = Instant::now() + REGISTER_TIMEOUT;
        let mut backoff = Duration::from_millis(100);
        loop {
            match Self::subscribe_once(endpoint, channel.clone(), request.clone(), strict_work)
                .await
            {
                Err(status)
                    if registry_unavailable(&status) && Instant::now() + backoff < deadline =>
                {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                done => return done,
            }
        }
    }

    async fn subscribe_once(
        endpoint: &str,
        channel: Channel,
        request: SubscribeRequest,
        strict_work: Option<Duration>,
    ) -> Result<TestWorker, Status> {
        let mut client = WorkerServiceClient::new(channel);
        let stream = client.subscribe(request).await?.into_inner();
        let (changed_tx, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            log: Mutex::new(Log::default()),
            changed_tx,
            auto_complete: Mutex::new(None),
            strict: Mutex::new(StrictState {
                work: strict_work,
                ..StrictState::default()
            }),
            started: Instant::now(),
        });
        let (close_tx, close_rx) = oneshot::channel();
        let reader = tokio::spawn(read_events(
            stream,
            close_rx,
            shared.clone(),
            client.clone(),
        ));
        let mut worker = TestWorker {
            endpoint: endpoint.to_string(),
            client,
            shared,
            instance_id: String::new(),
            close_tx: Some(close_tx),
            reader: Some(reader),
        };
        match worker.wait_registered(REGISTER_TIMEOUT).await {
            Ok(registered) => {
                worker.instance_id = registered.instance_id;
                Ok(worker)
            }
            Err(e) => Err(match e.ended {
                Some(StreamEnd::Failed(status)) => status,
                Some(_) => Status::aborted(format!("the stream ended before Registered\n{e}")),
                None => Status::deadline_exceeded(e.to_string()),
            }),
        }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A clone of this worker's gRPC client.
    pub fn client(&self) -> WorkerServiceClient<Channel> {
        self.client.clone()
    }

    /// The instance id from `Registered`.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The first `Registered` event.
    pub fn registered(&self) -> Option<Registered> {
        self.find_map(|e| match e {
            Event::Registered(r) => Some(r.clone()),
            _ => None,
        })
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<TimedEvent> {
        self.shared.lock().events.clone()
    }

    /// Every `Assignment` so far, oldest first.
    pub fn assignments(&self) -> Vec<(Instant, Assignment)> {
        self.collect(|e| match e {
            Event::Assignment(a) => Some(a.clone()),
            _ => None,
        })
    }

    /// The latest `Assignment`.
    pub fn assignment(&self) -> Option<Assignment> {
        self.assignments().pop().map(|(_, a)| a)
    }

    /// The items of the latest `Assignment`, sorted (empty before the first).
    pub fn current_items(&self) -> Vec<i32> {
        self.assignment().map(|a| items_of(&a)).unwrap_or_default()
    }

    /// Whether the latest `Assignment` says this instance is the job's leader.
    pub fn is_leader(&self) -> bool {
        self.assignment().is_some_and(|a| a.leader)
    }

    /// Every `Trigger` so far.
    pub fn triggers(&self) -> Vec<(Instant, Trigger)> {
        self.collect(|e| match e {
            Event::Trigger(t) => Some(t.clone()),
            _ => None,
        })
    }

    pub fn revokes(&self) -> Vec<(Instant, Revoke)> {
        self.collect(|e| match e {
            Event::Revoke(r) => Some(r.clone()),
            _ => None,
        })
    }

    pub fn leases(&self) -> Vec<(Instant, Lease)> {
        self.collect(|e| match e {
            Event::Lease(l) => Some(*l),
            _ => None,
        })
    }

    pub fn shutdown(&self) -> Option<Shutdown> {
        self.find_map(|e| match e {
            Event::Shutdown(s) => Some(s.clone()),
            _ => None,
        })
    }

    /// Whether the stream has ended (for any reason).
    pub fn stream_ended(&self) -> bool {
        self.shared.lock().end.is_some()
    }

    /// How the stream ended, if it has.
    pub fn end(&self) -> Option<StreamEnd> {
        self.shared.lock().end.clone()
    }

    /// The events as readable lines, relative to the subscription.
    pub fn summary(&self) -> String {
        let log = self.shared.lock();
        summarize(&log, self.shared.started)
    }

    /// Waits until `pred` holds for the events so far.
    ///
    /// # Errors
    /// After `timeout`, or as soon as the stream has ended and `pred` still fails.
    pub async fn wait_for<F>(&self, mut pred: F, timeout: Duration) -> Result<(), WaitError>
    where
        F: FnMut(&[TimedEvent]) -> bool,
    {
        // `pred` runs on a copy, without the lock: it may call this worker's methods.
        self.wait_until("a condition on the events", timeout, |log| {
            let events = log.lock().events.clone();
            pred(&events).then_some(())
        })
        .await
    }

    /// Waits for the `Registered` event.
    pub async fn wait_registered(&self, timeout: Duration) -> Result<Registered, WaitError> {
        self.wait_until("Registered", timeout, |log| {
            log.lock().events.iter().find_map(|(_, e)| match &e.event {
                Some(Event::Registered(r)) => Some(r.clone()),
                _ => None,
            })
        })
        .await
    }

    /// Waits until the latest assignment satisfies `pred`, and returns it.
    pub async fn wait_assignment<F>(
        &self,
        mut pred: F,
        timeout: Duration,
    ) -> Result<Assignment, WaitError>
    where
        F: FnMut(&Assignment) -> bool,
    {
        self.wait_until("an assignment", timeout, |log| {
            let latest = latest_assignment(&log.lock());
            latest.filter(|a| pred(a))
        })
        .await
    }

    /// Waits until the (sorted) items of the latest assignment satisfy `pred`, and returns them.
    /// Before the first assignment the items are empty.
    pub async fn wait_items<F>(&self, mut pred: F, timeout: Duration) -> Result<Vec<i32>, WaitError>
    where
        F: FnMut(&[i32]) -> bool,
    {
        self.wait_until("assigned items", timeout, |log| {
            let items = latest_assignment(&log.lock())
                .map(|a| items_of(&a))
                .unwrap_or_default();
            pred(&items).then_some(items)
        })
        .await
    }

    /// The next trigger not yet returned by `next_trigger` (waiting for it if needed).
    pub async fn next_trigger(&self, timeout: Duration) -> Result<Trigger, WaitError> {
        self.wait_until("the next trigger", timeout, |shared| {
            let mut log = shared.lock();
            let next = log
                .events
                .iter()
                .filter_map(|(_, e)| match &e.event {
                    Some(Event::Trigger(t)) => Some(t.clone()),
                    _ => None,
                })
                .nth(log.triggers_taken);
            if next.is_some() {
                log.triggers_taken += 1;
            }
            next
        })
        .await
    }

    /// Waits until the stream ends, and says how.
    pub async fn wait_stream_end(&self, timeout: Duration) -> Result<StreamEnd, WaitError> {
        self.wait_until("the end of the stream", timeout, |log| {
            log.lock().end.clone()
        })
        .await
    }

    /// Answers every trigger from now on with `Complete` for all its items (outcomes in
    /// [`TestWorker::auto_completed`]).
    pub fn set_auto_complete(&self, on: bool) {
        *self.shared.auto_complete() = on.then_some(Duration::ZERO);
    }

    /// [`TestWorker::set_auto_complete`], each trigger worked on for `work` before its answer,
    /// as a job that takes that long would be.
    pub fn set_auto_complete_after(&self, work: Duration) {
        *self.shared.auto_complete() = Some(work);
    }

    /// Follows the contract on its own from now on (see the module docs): each trigger under a
    /// valid lease is worked on for `work`, then completed.
    pub fn set_strict(&self, work: Duration) {
        self.shared
            .strict
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .work = Some(work);
    }

    /// The runs of the strict mode so far.
    pub fn strict_runs(&self) -> Vec<StrictRun> {
        self.shared.lock().strict_runs.clone()
    }

    /// Execution ids answered by auto-complete, with the outcome of each `Complete`.
    pub fn auto_completed(&self) -> Vec<(String, Result<(), Status>)> {
        self.shared.lock().auto_completed.clone()
    }

    /// Every answer sent so far (`Complete` or `ReportFailure`, auto or not): execution id and
    /// when it was sent — the end of that work, for [`crate::common::ledger::Ledger`].
    pub fn answers(&self) -> Vec<(String, Instant)> {
        self.shared.lock().answered.clone()
    }

    /// Sends `Complete` for `items` of `execution_id`.
    pub async fn complete(&self, execution_id: &str, items: &[i32]) -> Result<(), Status> {
        let request = CompleteRequest {
            instance_id: self.instance_id.clone(),
            execution_id: execution_id.to_string(),
            items: items.to_vec(),
        };
        self.shared
            .lock()
            .answered
            .push((execution_id.to_string(), Instant::now()));
        self.client.clone().complete(request).await.map(|_| ())
    }

    /// Sends `ReportFailure` for one item of `execution_id`.
    pub async fn report_failure(
        &self,
        execution_id: &str,
        item: i32,
        error: &str,
    ) -> Result<(), Status> {
        let request = ReportFailureRequest {
            instance_id: self.instance_id.clone(),
            execution_id: execution_id.to_string(),
            item,
            error: error.to_string(),
        };
        self.shared
            .lock()
            .answered
            .push((execution_id.to_string(), Instant::now()));
        self.client
            .clone()
            .report_failure(request)
            .await
            .map(|_| ())
    }

    /// Ends the stream by dropping it (as a worker that goes away does) and returns once it is
    /// dropped.
    pub async fn close(&mut self) {
        if let Some(close_tx) = self.close_tx.take() {
            let _ = close_tx.send(());
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.await;
        }
    }

    fn collect<T>(&self, mut f: impl FnMut(&Event) -> Option<T>) -> Vec<(Instant, T)> {
        let log = self.shared.lock();
        log.events
            .iter()
            .filter_map(|(at, e)| e.event.as_ref().and_then(&mut f).map(|v| (*at, v)))
            .collect()
    }

    fn find_map<T>(&self, mut f: impl FnMut(&Event) -> Option<T>) -> Option<T> {
        let log = self.shared.lock();
        log.events
            .iter()
            .find_map(|(_, e)| e.event.as_ref().and_then(&mut f))
    }

    /// Re-evaluates `check` on every change of the log until it returns `Some`. `check` takes
    /// the lock itself, for as short as it can.
    async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&Shared) -> Option<T>,
    ) -> Result<T, WaitError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changed_rx = self.shared.changed_tx.subscribe();
        loop {
            changed_rx.borrow_and_update();
            if let Some(value) = check(&self.shared) {
                return Ok(value);
            }
            let ended = self.shared.lock().end.clone();
            let timed_out = ended.is_some()
                || tokio::time::timeout_at(deadline, changed_rx.changed())
                    .await
                    .is_err();
            if timed_out {
                let log = self.shared.lock();
                return Err(WaitError {
                    what: format!("{what} (worker {})", self.instance_id),
                    waited: started.elapsed(),
                    ended: log.end.clone(),
                    summary: summarize(&log, self.shared.started),
                });
            }
        }
    }
}

impl Drop for TestWorker {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.abort();
        }
    }
}

/// The background task: records events until the stream ends or the test closes it.
async fn read_events(
    mut stream: tonic::Streaming<SubscribeResponse>,
    mut close_rx: oneshot::Receiver<()>,
    shared: Arc<Shared>,
    client: WorkerServiceClient<Channel>,
) {
    let mut instance_id = String::new();
    let end = loop {
        let message = tokio::select! {
            _ = &mut close_rx => break StreamEnd::Closed,
            message = stream.message() => message,
        };
        let event = match message {
            Ok(Some(event)) => event,
            Ok(None) => break StreamEnd::Finished,
            Err(status) => break StreamEnd::Failed(status),
        };
        let now = Instant::now();
        let auto_work = *shared.auto_complete();
        match &event.event {
            Some(Event::Registered(r)) => instance_id = r.instance_id.clone(),
            Some(Event::Lease(l)) => {
                let valid_for = l
                    .valid_for
                    .map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32))
                    .unwrap_or_default();
                let mut until = now + valid_for;
                if let Some(ts) = l.expires_at {
                    let expires = std::time::UNIX_EPOCH
                        + Duration::new(ts.seconds.max(0) as u64, ts.nanos.max(0) as u32);
                    let left = expires
                        .duration_since(std::time::SystemTime::now())
                        .unwrap_or_default();
                    until = until.min(now + left);
                }
                let mut strict = shared.strict.lock().unwrap_or_else(|e| e.into_inner());
                // A renewal read after the lease ran out starts a new lease; read after its
                // own end it is void.
                if until > now {
                    strict.lease_until = Some(until);
                }
            }
            Some(Event::Revoke(r)) => {
                let mut strict = shared.strict.lock().unwrap_or_else(|e| e.into_inner());
                let open: Vec<(String, i32)> = shared
                    .lock()
                    .strict_runs
                    .iter()
                    .filter(|run| run.end.is_none())
                    .flat_map(|run| {
                        run.items
                            .iter()
                            .filter(|i| r.items.contains(i))
                            .map(|i| (run.execution_id.clone(), *i))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                strict.revoked.extend(open);
            }
            Some(Event::Trigger(t))
                if shared
                    .strict
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .work
                    .is_some() =>
            {
                tokio::spawn(strict_run(
                    client.clone(),
                    shared.clone(),
                    instance_id.clone(),
                    t.clone(),
                    now,
                ));
            }
            Some(Event::Trigger(t)) if auto_work.is_some() => {
                let work = auto_work.unwrap_or_default();
                tokio::spawn(auto_complete(
                    client.clone(),
                    shared.clone(),
                    instance_id.clone(),
                    t.clone(),
                    work,
                ));
            }
            _ => {}
        }
        shared.lock().events.push((Instant::now(), event));
        shared.bump();
    };
    drop(stream);
    shared.lock().end = Some(end);
    shared.bump();
}

/// One trigger of the strict worker (see the module docs).
async fn strict_run(
    mut client: WorkerServiceClient<Channel>,
    shared: Arc<Shared>,
    instance_id: String,
    trigger: Trigger,
    received: Instant,
) {
    let items: Vec<i32> = trigger.items.iter().map(|i| i.item).collect();
    let (work, valid) = {
        let strict = shared.strict.lock().unwrap_or_else(|e| e.into_inner());
        (
            strict.work.unwrap_or_default(),
            strict.lease_until.is_some_and(|u| received < u),
        )
    };
    let index = {
        let mut log = shared.lock();
        log.strict_runs.push(StrictRun {
            execution_id: trigger.execution_id.clone(),
            items: items.clone(),
            source: trigger.source,
            tokens: trigger.fencing_tokens.clone(),
            start: received,
            end: None,
            outcome: None,
            reply: None,
        });
        log.strict_runs.len() - 1
    };
    let finish = |outcome: RunEnd, at: Instant| {
        let mut log = shared.lock();
        let run = &mut log.strict_runs[index];
        run.end = Some(at);
        run.outcome = Some(outcome);
    };
    let decline = |reason: &str| DeclineRequest {
        instance_id: instance_id.clone(),
        execution_id: trigger.execution_id.clone(),
        items: items.clone(),
        reason: reason.to_string(),
    };
    if !valid {
        finish(RunEnd::Declined, received);
        let reply = client.decline(decline("no valid lease")).await;
        shared.lock().strict_runs[index].reply = Some(reply.map(|_| ()).map_err(|s| s.code()));
        shared.bump();
        return;
    }
    let done_at = received + work;
    let stopped = loop {
        let now = Instant::now();
        let (lease_ok, revoked) = {
            let strict = shared.strict.lock().unwrap_or_else(|e| e.into_inner());
            (
                strict.lease_until.is_some_and(|u| now < u),
                items
                    .iter()
                    .any(|i| strict.revoked.contains(&(trigger.execution_id.clone(), *i))),
            )
        };
        let ended = shared.lock().end.is_some();
        if ended {
            break Some("the stream ended");
        }
        if !lease_ok {
            break Some("the lease ran out");
        }
        if revoked {
            break Some("revoked");
        }
        if now >= done_at {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(5).min(done_at - now)).await;
    };
    let now = Instant::now();
    match stopped {
        Some(why) => {
            finish(RunEnd::Stopped(why.to_string()), now);
            if shared.lock().end.is_none() {
                let reply = client.decline(decline(why)).await;
                shared.lock().strict_runs[index].reply =
                    Some(reply.map(|_| ()).map_err(|s| s.code()));
            }
        }
        None => {
            finish(RunEnd::Completed, now);
            let request = CompleteRequest {
                instance_id,
                execution_id: trigger.execution_id.clone(),
                items,
            };
            shared
                .lock()
                .answered
                .push((trigger.execution_id.clone(), now));
            let reply = client.complete(request).await;
            shared.lock().strict_runs[index].reply = Some(reply.map(|_| ()).map_err(|s| s.code()));
        }
    }
    shared.bump();
}

async fn auto_complete(
    mut client: WorkerServiceClient<Channel>,
    shared: Arc<Shared>,
    instance_id: String,
    trigger: Trigger,
    work: Duration,
) {
    if !work.is_zero() {
        tokio::time::sleep(work).await;
    }
    let request = CompleteRequest {
        instance_id,
        execution_id: trigger.execution_id.clone(),
        items: trigger.items.iter().map(|i| i.item).collect(),
    };
    shared
        .lock()
        .answered
        .push((trigger.execution_id.clone(), Instant::now()));
    let outcome = client.complete(request).await.map(|_| ());
    shared
        .lock()
        .auto_completed
        .push((trigger.execution_id, outcome));
    shared.bump();
}

fn latest_assignment(log: &Log) -> Option<Assignment> {
    log.events.iter().rev().find_map(|(_, e)| match &e.event {
        Some(Event::Assignment(a)) => Some(a.clone()),
        _ => None,
    })
}

fn items_of(assignment: &Assignment) -> Vec<i32> {
    let mut items: Vec<i32> = assignment.items.iter().map(|i| i.item).collect();
    items.sort_unstable();
    items
}

fn summarize(log: &Log, started: Instant) -> String {
    let mut lines: Vec<String> = log
        .events
        .iter()
        .map(|(at, e)| {
            let t = at.saturating_duration_since(started).as_secs_f64();
            let what = match &e.event {
                Some(Event::Registered(r)) => format!("Registered {}", r.instance_id),
                Some(Event::Assignment(a)) => format!(
                    "Assignment items={:?} leader={} epoch={}",
                    items_of(a),
                    a.leader,
                    a.epoch
                ),
                Some(Event::Trigger(t)) => format!(
                    "Trigger {} items={:?} source={} total={}",
                    t.execution_id,
                    t.items.iter().map(|i| i.item).collect::<Vec<_>>(),
                    t.source,
                    t.sharding_total_count
                ),
                Some(Event::Revoke(r)) => {
                    format!("Revoke items={:?} reason={:?}", r.items, r.reason)
                }
                Some(Event::Shutdown(s)) => {
                    format!("Shutdown reason={:?} kind={}", s.reason, s.kind)
                }
                Some(Event::Lease(l)) => {
                    format!("Lease #{} valid_for={:?}", l.sequence, l.valid_for)
                }
                None => "(empty event)".to_string(),
            };
            format!("  +{t:.3}s {what}")
        })
        .collect();
    if let Some(end) = &log.end {
        lines.push(format!("  stream ended: {end:?}"));
    }
    if lines.is_empty() {
        "  (none)".to_string()
    } else {
        lines.join("\n")
    }
}

static FAKE_PID: AtomicU32 = AtomicU32::new(40_000);

/// A distinct made-up pid per call, so that the `{ip}@-@{pid}` instance ids of several workers
/// on one sidecar differ.
pub fn next_fake_pid() -> u32 {
    FAKE_PID.fetch_add(1, Ordering::SeqCst)
}

/// A job configuration with the contract's defaults: `name`, Quartz `cron` (empty for a one-off
/// job), `total` items, no failover, the sidecar's time zone, AVG_ALLOCATION.
pub fn job_config(name: &str, cron: &str, total: i32) -> JobConfig {
    JobConfig {
        job_name: name.to_string(),
        cron: cron.to_string(),
        sharding_total_count: total,
        description: "written by the shardcar test harness".to_string(),
        ..Default::default()
    }
}

/// A `Subscribe` request for `config`'s job carrying the config (not overwriting an existing
/// one), with a fresh fake pid (see [`next_fake_pid`]).
pub fn subscribe_request(config: JobConfig) -> SubscribeRequest {
    SubscribeRequest {
        job_name: config.job_name.clone(),
        config: Some(config),
        overwrite: false,
        pid: next_fake_pid(),
        ..Default::default()
    }
}
