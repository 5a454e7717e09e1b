//! The soak's workers: proto-only workers in child processes (the nemesis binary run again
//! with `--worker`), written against the generated `shardcar::proto` client and nothing else.
//! They keep the worker contract of `proto/shardcar/v1/shardcar.proto` to the letter:
//!
//! 1. Work only under a valid lease: until the earlier of receipt + `valid_for` and
//!    `expires_at`; a lease read after its `expires_at` is void. When it runs out, stop every
//!    item at once, answer none of them, and `Decline` each.
//! 2. A `Trigger` without a valid lease (or during shutdown) is declined at once.
//! 3. Answers belong to their stream: resent after a transport error while that stream is
//!    open, dropped once it has ended.
//! 4. `Revoke`: stop those items now, then `Decline` them.
//! 5. `Shutdown`: take no new work, finish and answer what runs while the lease lasts. Once
//!    the sidecar has ended the stream, `Shutdown.kind` says what follows: after a DRAIN (or
//!    a sidecar that leaves the kind unspecified) the worker subscribes again, with backoff,
//!    until the sidecar is back; after a REMOTE shutdown it does not subscribe to its job again
//!    and the process exits (the nemesis starts a new process for the slot a second later).
//!
//! At the end of an item the worker checks its lease and, only if it is valid, writes the run
//! into the fencing store with the item's token; the store's reply decides the answer
//! (`Complete` when accepted, `ReportFailure` when refused). Every step is reported to the
//! nemesis as one `EV {json}` line on stdout, stamped on the host's wall clock ([`wall_us`]).
//!
//! A worker of a cron job runs in one of two modes (`--minimal`; which slots run which:
//! [`spec::MINIMAL_JOBS`]):
//!
//! - **Strict** (the default) also does what the contract allows: it sends an answer or a
//!   decline again after a transport error (or no reply in 2 s) while its stream is open, it
//!   acknowledges a `Revoke` of an item it no longer runs with a `Decline` of the item's last
//!   execution, and it subscribes again 300 ms after a stream ended.
//! - **Minimal** keeps every MUST and none of the MAYs, so the sidecar alone must end every
//!   execution: each answer or decline is one call, never sent again whatever its reply
//!   (transport error, UNAVAILABLE, no reply at all); it declines only where a rule says it
//!   must (rule 1: items stopped at the end of the lease; rule 2: a trigger without a valid
//!   lease, and rule 5's new triggers during shutdown; rule 4: items it stopped on `Revoke`);
//!   and after a stream ends it subscribes again only once its last lease has run out, after a
//!   second's backoff (rule 5's "with backoff"), never sooner. It reports each reply with the
//!   time it took and whether an UNAVAILABLE carried the sidecar's details ("accepted, not yet
//!   recorded") or was a transport error.
//!
//! A worker of the resident job ([`spec::RESIDENT_JOB`]) **holds** each item from its
//! `Trigger` (source RESIDENT) until a `Revoke` names it, its lease runs out or its stream
//! ends, and never ends a hold itself (no `Complete`, no `ReportFailure`, no store write);
//! it then declines the item once, as a minimal worker answers: one call, never sent again,
//! and no acknowledgement of a revoke for an item it does not hold. After a stream ends it
//! subscribes again as a strict worker does (300 ms, then a backoff while subscribing fails).
//!
//! stdin carries behaviour changes from the schedule: `SLOW until_us` (items take 2–4.5 s, so
//! past the lease and the cron period; nothing for a resident worker) and `HANG until_us`
//! (never answering: items do not end on their own and nothing is answered for them, not even
//! a Decline, until then; the worker still stops them on Revoke and when its lease runs out; a
//! resident worker never declines a hold it was given then and stopped before the hang was
//! over, so the sidecar waits for the lease). An answer-aimed fault arms a worker with
//! `ARM until_us`: its next `Complete` or `ReportFailure` before then, if its lease has at
//! least [`ARM_LEASE_LEFT`] left, is announced as an `armed` event and held until the nemesis
//! says `GO {execution}` (it has cut or frozen the sidecar's ZooKeeper connections) or
//! [`GO_WAIT`] has passed; the lease is checked again before the call goes out (rule 1). When
//! stdin closes (the nemesis is gone) the worker exits.

use crate::spec::{self, wall_us, JOBS};
use serde_json::{json, Value};
use shardcar::proto::subscribe_response::Event;
use shardcar::proto::worker_service_client::WorkerServiceClient as WorkerClient;
use shardcar::proto::{
    CompleteRequest, DeclineRequest, ReportFailureRequest, ShutdownKind, SubscribeRequest,
    SubscribeResponse as WorkerEvent, Trigger,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};
use tonic::transport::{Channel, Endpoint};

/// How long an armed answer waits for the nemesis's `GO` at most.
pub const GO_WAIT: Duration = Duration::from_millis(300);
/// An answer is held for an armed fault only if the lease has this much left, so that it is
/// still valid when the call goes out after [`GO_WAIT`] at most.
pub const ARM_LEASE_LEFT: Duration = Duration::from_millis(600);
/// A minimal worker's deadline for one answer call: longer than the sidecar's own wait for an
/// unconfirmed write (half the session), so the sidecar's reply normally comes first. Expiring
/// is a transport error (DEADLINE_EXCEEDED), and nothing is sent again either way.
const MINIMAL_CALL_DEADLINE: Duration = Duration::from_secs(8);

/// How a worker process was started.
#[derive(Clone, Debug)]
pub struct WorkerArgs {
    pub endpoint: String,
    pub job: usize,
    pub store: String,
    pub seed: u64,
    /// Minimal mode (see the module docs).
    pub minimal: bool,
}

impl WorkerArgs {
    /// A worker of the resident job (see the module docs).
    fn resident(&self) -> bool {
        JOBS[self.job].resident
    }

    /// Whether each answer and decline is one call, and a revoke of an item the worker no
    /// longer runs goes unacknowledged: minimal and resident workers.
    fn answers_once(&self) -> bool {
        self.minimal || self.resident()
    }
}

/// A strict or resident worker's wait before it subscribes again after a stream ended.
const RESUBSCRIBE: Duration = Duration::from_millis(300);
/// The longest wait between two subscribe attempts that failed (the wait doubles from
/// [`RESUBSCRIBE`]).
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(2);

/// The answer-aimed faults' hold on the worker's next answer (`ARM`, `GO` on stdin).
struct Gate {
    /// Arm the next Complete or ReportFailure sent before this instant (µs; 0: disarmed).
    armed_until: AtomicU64,
    /// The execution the nemesis said `GO` for last.
    go: watch::Sender<String>,
}

/// One line to the nemesis.
pub fn emit(mut value: Value) {
    if value.get("t").is_none() {
        value["t"] = json!(wall_us());
    }
    println!("EV {value}");
}

/// Whether a call failed on its way rather than being answered by the sidecar (rule 3).
pub fn is_transport_error(status: &tonic::Status) -> bool {
    use tonic::Code;
    match status.code() {
        Code::Unavailable | Code::Cancelled | Code::Unknown | Code::DeadlineExceeded => true,
        Code::Internal => status.message().contains("h2 protocol error"),
        _ => false,
    }
}

/// How long item `item` of a run takes, in ms (`None`: it hangs), drawn from the seed and the
/// run's identity, not from the clock.
fn plan_ms(args: &WorkerArgs, t: &Trigger, item: i32, now: u64, modes: &Modes) -> Option<u64> {
    let fire_ms = t.fire_time.as_ref().map_or(0, |ts| {
        ts.seconds as u64 * 1000 + ts.nanos as u64 / 1_000_000
    });
    let h = spec::mix(
        args.seed
            ^ spec::mix(args.job as u64 * 1_000 + item as u64)
            ^ spec::mix(fire_ms ^ ((t.source as u64) << 56)),
    );
    if now < modes.hang_until {
        None
    } else if now < modes.slow_until {
        Some(2_000 + h % 2_500)
    } else {
        Some(h % 1_501)
    }
}

#[derive(Default, Clone, Copy)]
struct Modes {
    slow_until: u64,
    hang_until: u64,
}

#[derive(PartialEq, Eq, Clone, Copy, Debug)]
enum Phase {
    Working,
    Writing,
    Done,
}

struct ItemRun {
    token: i64,
    /// When the work is over (`None`: hanging, or a resident hold).
    end_at: Option<u64>,
    phase: Phase,
    /// A resident hold: it never ends on its own, only on Revoke, the lease's end or the
    /// stream's.
    hold: bool,
}

struct WriteResult {
    exec: String,
    item: i32,
    sent: u64,
    until: u64,
    reply: Result<(bool, i64), String>,
}

/// The state of one stream.
struct Stream {
    gen: u64,
    instance: String,
    lease_until: u64,
    /// The kind of the `Shutdown` the stream got, if it got one (rule 5).
    shutting_down: Option<ShutdownKind>,
    execs: BTreeMap<String, BTreeMap<i32, ItemRun>>,
    last_exec_of_item: HashMap<i32, String>,
    /// Executions received while the worker "never answers" (HANG): no Complete, failure or
    /// Decline goes out for them until the hang is over (it still stops on Revoke and at the
    /// end of its lease: the sidecar then waits for the lease to run out).
    muted: HashSet<String>,
}

impl Stream {
    fn lease_valid(&self, now: u64) -> bool {
        now < self.lease_until
    }

    /// Sends an answer, unless its execution is muted (see [`Stream::muted`]).
    fn answer(&self, answerer: &Answerer, exec: &str, answer: Answer) {
        if self.muted.contains(exec) {
            emit(json!({"k": "muted", "gen": self.gen, "exec": exec}));
            return;
        }
        answerer.send(&self.instance, exec, answer);
    }
}

/// The answering half of a stream: answers go out on its channel while it is open.
#[derive(Clone)]
struct Answerer {
    client: WorkerClient<Channel>,
    open: Arc<AtomicU64>,
    gen: u64,
    minimal: bool,
    gate: Arc<Gate>,
    /// The stream's lease end (µs), as [`Stream::lease_until`]: an armed answer checks it again
    /// after its wait.
    lease_until: Arc<AtomicU64>,
}

enum Answer {
    Complete(i32),
    Fail(i32, String),
    Decline(Vec<i32>, String),
}

impl Answer {
    fn kind(&self) -> &'static str {
        match self {
            Answer::Complete(_) => "complete",
            Answer::Fail(..) => "fail",
            Answer::Decline(..) => "decline",
        }
    }

    fn items(&self) -> Vec<i32> {
        match self {
            Answer::Complete(i) | Answer::Fail(i, _) => vec![*i],
            Answer::Decline(items, _) => items.clone(),
        }
    }
}

/// The sidecar's reply to one call: `Ok` or the status.
async fn call_once(
    mut client: WorkerClient<Channel>,
    instance: &str,
    exec: &str,
    answer: &Answer,
) -> Result<(), tonic::Status> {
    let (instance_id, execution_id) = (instance.to_string(), exec.to_string());
    match answer {
        Answer::Complete(i) => client
            .complete(CompleteRequest {
                instance_id,
                execution_id,
                items: vec![*i],
            })
            .await
            .map(|_| ()),
        Answer::Fail(i, error) => client
            .report_failure(ReportFailureRequest {
                instance_id,
                execution_id,
                item: *i,
                error: error.clone(),
            })
            .await
            .map(|_| ()),
        Answer::Decline(items, reason) => client
            .decline(DeclineRequest {
                instance_id,
                execution_id,
                items: items.clone(),
                reason: reason.clone(),
            })
            .await
            .map(|_| ()),
    }
}

impl Answerer {
    /// Takes the arm for this answer, if the worker is armed and its lease has enough left.
    fn take_arm(&self, answer: &Answer, now: u64) -> bool {
        if matches!(answer, Answer::Decline(..)) {
            return false;
        }
        let until = self.gate.armed_until.load(Ordering::SeqCst);
        let left = self.lease_until.load(Ordering::SeqCst).saturating_sub(now);
        now < until
            && left >= ARM_LEASE_LEFT.as_micros() as u64
            && self
                .gate
                .armed_until
                .compare_exchange(until, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    /// Sends one answer in the background, as rule 3 says (strict: again after a transport
    /// error while the stream is open; minimal: once).
    fn send(&self, instance: &str, exec: &str, answer: Answer) {
        let armed = self.take_arm(&answer, wall_us());
        if armed {
            emit(
                json!({"k": "armed", "gen": self.gen, "exec": exec, "items": answer.items(),
                        "kind": answer.kind()}),
            );
        } else {
            emit(
                json!({"k": "ans", "gen": self.gen, "exec": exec, "items": answer.items(),
                        "kind": answer.kind()}),
            );
        }
        let this = self.clone();
        let (instance, exec) = (instance.to_string(), exec.to_string());
        tokio::spawn(async move {
            let mut answer = answer;
            if armed {
                let mut go = this.gate.go.subscribe();
                let said = tokio::time::timeout(GO_WAIT, go.wait_for(|e| *e == exec))
                    .await
                    .is_ok();
                let now = wall_us();
                if this.open.load(Ordering::SeqCst) != this.gen {
                    emit(json!({"k": "ansres", "gen": this.gen, "exec": exec,
                                "items": answer.items(), "kind": answer.kind(), "code": null,
                                "tries": 0}));
                    return; // the stream ended meanwhile: the answer is void
                }
                if now >= this.lease_until.load(Ordering::SeqCst) {
                    // Rule 1: the lease ran out while the answer waited; answer nothing,
                    // decline what stopped.
                    for item in answer.items() {
                        emit(json!({"k": "stop", "t": now, "gen": this.gen, "exec": exec,
                                    "item": item, "why": "lease"}));
                    }
                    answer = Answer::Decline(answer.items(), "the lease ran out".into());
                }
                emit(json!({"k": "ans", "t": now, "gen": this.gen, "exec": exec,
                            "items": answer.items(), "kind": answer.kind(), "go": said}));
            }
            if this.minimal {
                this.send_once(&instance, &exec, &answer).await;
            } else {
                this.send_until_replied(&instance, &exec, &answer).await;
            }
        });
    }

    /// Strict: the call again after a transport error (or no reply in 2 s), while the stream
    /// is open.
    async fn send_until_replied(&self, instance: &str, exec: &str, answer: &Answer) {
        let mut tries = 0u32;
        let code = loop {
            if self.open.load(Ordering::SeqCst) != self.gen {
                break None; // the stream has ended: the answer is void
            }
            tries += 1;
            let call = call_once(self.client.clone(), instance, exec, answer);
            match tokio::time::timeout(Duration::from_secs(2), call).await {
                Ok(Ok(())) => break Some(0),
                Ok(Err(status)) if !is_transport_error(&status) => break Some(status.code() as i32),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        emit(
            json!({"k": "ansres", "gen": self.gen, "exec": exec, "items": answer.items(),
                    "kind": answer.kind(), "code": code, "tries": tries}),
        );
    }

    /// Minimal: one call, whatever its reply. `held` marks an UNAVAILABLE that carries the
    /// sidecar's details (accepted, not yet recorded), as opposed to a transport error.
    async fn send_once(&self, instance: &str, exec: &str, answer: &Answer) {
        if self.open.load(Ordering::SeqCst) != self.gen {
            emit(
                json!({"k": "ansres", "gen": self.gen, "exec": exec, "items": answer.items(),
                        "kind": answer.kind(), "code": null, "tries": 0}),
            );
            return; // the stream has ended: the answer is void
        }
        let sent = wall_us();
        let call = call_once(self.client.clone(), instance, exec, answer);
        let (code, held, message) = match tokio::time::timeout(MINIMAL_CALL_DEADLINE, call).await {
            Ok(Ok(())) => (0, false, String::new()),
            Ok(Err(status)) => (
                status.code() as i32,
                status.code() == tonic::Code::Unavailable && !status.details().is_empty(),
                status.message().to_string(),
            ),
            Err(_) => (
                tonic::Code::DeadlineExceeded as i32,
                false,
                "no reply within the call's deadline".to_string(),
            ),
        };
        emit(
            json!({"k": "ansres", "gen": self.gen, "exec": exec, "items": answer.items(),
                    "kind": answer.kind(), "code": code, "tries": 1, "held": held,
                    "ms": (wall_us() - sent) / 1_000, "msg": message}),
        );
    }
}

/// The worker process: subscribes, works, and subscribes again whenever its stream ends
/// (except after a REMOTE `Shutdown`, when it exits).
pub async fn run(args: WorkerArgs) {
    let (cmd_tx, mut cmd_rx) = mpsc::channel::<Modes>(16);
    let gate = Arc::new(Gate {
        armed_until: AtomicU64::new(0),
        go: watch::Sender::new(String::new()),
    });
    // A thread, not a task: blocking reads of stdin.
    let stdin_gate = gate.clone();
    std::thread::spawn(move || {
        let mut modes = Modes::default();
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            let parts: Vec<&str> = line.split_whitespace().collect();
            match parts.as_slice() {
                ["SLOW", until] => modes.slow_until = until.parse().unwrap_or(0),
                ["HANG", until] => modes.hang_until = until.parse().unwrap_or(0),
                ["ARM", until] => {
                    let until = until.parse().unwrap_or(0);
                    stdin_gate.armed_until.store(until, Ordering::SeqCst);
                    continue;
                }
                ["GO", exec] => {
                    stdin_gate.go.send_replace(exec.to_string());
                    continue;
                }
                _ => continue,
            }
            if cmd_tx.blocking_send(modes).is_err() {
                break;
            }
        }
        // stdin closed: the nemesis is gone, and so is the worker.
        std::process::exit(0);
    });
    let open = Arc::new(AtomicU64::new(0));
    let mut modes = Modes::default();
    let mut gen = 0u64;
    // Minimal: the end of the last lease of the stream that ended (no new stream before it).
    let mut last_lease_until = 0u64;
    // Strict and resident: the wait after the next failed subscribe (doubling while they fail).
    let mut backoff = RESUBSCRIBE;
    loop {
        gen += 1;
        if args.minimal && gen > 1 {
            // Rule 5's backoff, and never while the sidecar may still count on the old lease.
            let wait_until = last_lease_until.max(wall_us()) + 1_000_000;
            let wait = wait_until.saturating_sub(wall_us());
            tokio::time::sleep(Duration::from_micros(wait)).await;
        }
        let channel = Endpoint::from_shared(args.endpoint.clone())
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(1))
            .connect_lazy();
        let mut client = WorkerClient::new(channel);
        let request = SubscribeRequest {
            job_name: JOBS[args.job].name.to_string(),
            config: Some(spec::job_config(args.job)),
            overwrite: false,
            pid: std::process::id(),
            ..Default::default()
        };
        emit(json!({"k": "sub", "gen": gen}));
        let stream =
            match tokio::time::timeout(Duration::from_secs(5), client.subscribe(request)).await {
                Ok(Ok(response)) => response.into_inner(),
                Ok(Err(status)) => {
                    emit(
                        json!({"k": "subfail", "gen": gen, "code": status.code() as i32,
                            "msg": status.message()}),
                    );
                    if !args.minimal {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(RESUBSCRIBE_MAX);
                    }
                    continue;
                }
                Err(_) => {
                    emit(json!({"k": "subfail", "gen": gen, "code": -1, "msg": "no reply in 5 s"}));
                    continue;
                }
            };
        backoff = RESUBSCRIBE;
        open.store(gen, Ordering::SeqCst);
        let lease_until = Arc::new(AtomicU64::new(0));
        let answerer = Answerer {
            client,
            open: open.clone(),
            gen,
            minimal: args.answers_once(),
            gate: gate.clone(),
            lease_until: lease_until.clone(),
        };
        let shutdown = serve(&args, stream, answerer, &mut cmd_rx, &mut modes).await;
        open.store(0, Ordering::SeqCst);
        last_lease_until = lease_until.load(Ordering::SeqCst);
        match shutdown {
            Some(ShutdownKind::Remote) => {
                // An operator shut this instance down: never subscribe to the job again.
                emit(json!({"k": "exit", "gen": gen, "why": "remote shutdown"}));
                std::process::exit(0);
            }
            // A drain (or a sidecar that does not say): the sidecar is restarting; subscribe
            // again, with backoff, until it is back.
            Some(ShutdownKind::Drain | ShutdownKind::Unspecified) | None => {}
        }
        if !args.minimal {
            tokio::time::sleep(RESUBSCRIBE).await;
        }
    }
}

/// Serves one stream until it ends; returns the kind of the `Shutdown` that came, if one did.
async fn serve(
    args: &WorkerArgs,
    mut events: tonic::Streaming<WorkerEvent>,
    answerer: Answerer,
    cmd_rx: &mut mpsc::Receiver<Modes>,
    modes: &mut Modes,
) -> Option<ShutdownKind> {
    let mut st = Stream {
        gen: answerer.gen,
        instance: String::new(),
        lease_until: 0,
        shutting_down: None,
        execs: BTreeMap::new(),
        last_exec_of_item: HashMap::new(),
        muted: HashSet::new(),
    };
    let (write_tx, mut write_rx) = mpsc::unbounded_channel::<WriteResult>();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let end = loop {
        tokio::select! {
            biased;
            message = events.message() => match message {
                Ok(Some(event)) => on_event(args, &mut st, &answerer, event, modes),
                Ok(None) => break "finished".to_string(),
                Err(status) => break format!("{:?}: {}", status.code(), status.message()),
            },
            Some(result) = write_rx.recv() => on_write(&mut st, &answerer, result),
            Some(m) = cmd_rx.recv() => *modes = m,
            _ = tick.tick() => progress(args, &mut st, &answerer, &write_tx, modes),
        }
    };
    // Rule 3: every execution the stream delivered is void; nothing is answered any more.
    let now = wall_us();
    for (exec, items) in &st.execs {
        for (item, run) in items {
            if run.phase != Phase::Done {
                emit(
                    json!({"k": "stop", "t": now, "gen": st.gen, "exec": exec, "item": item,
                            "why": "stream"}),
                );
            }
        }
    }
    emit(json!({"k": "end", "t": now, "gen": st.gen, "status": end}));
    st.shutting_down
}

/// The name of a shutdown kind in the worker's events.
fn kind_name(kind: ShutdownKind) -> &'static str {
    match kind {
        ShutdownKind::Drain => "drain",
        ShutdownKind::Remote => "remote",
        ShutdownKind::Unspecified => "unspecified",
    }
}

/// Rule 1: a lease that ran out stops every item at once; each is declined once stopped.
fn check_lapse(st: &mut Stream, answerer: &Answerer, now: u64) {
    if st.lease_valid(now) {
        return;
    }
    let mut stopped = Vec::new();
    for (exec, items) in st.execs.iter_mut() {
        for (item, run) in items.iter_mut() {
            if run.phase != Phase::Done {
                run.phase = Phase::Done;
                stopped.push((exec.clone(), *item));
            }
        }
    }
    for (exec, item) in stopped {
        emit(
            json!({"k": "stop", "t": now, "gen": st.gen, "exec": exec, "item": item,
                    "why": "lease"}),
        );
        st.answer(
            answerer,
            &exec,
            Answer::Decline(vec![item], "the lease ran out".into()),
        );
    }
}

fn on_event(
    args: &WorkerArgs,
    st: &mut Stream,
    answerer: &Answerer,
    event: WorkerEvent,
    modes: &Modes,
) {
    let now = wall_us();
    check_lapse(st, answerer, now);
    let gen = st.gen;
    match event.event {
        Some(Event::Registered(r)) => {
            st.instance = r.instance_id.clone();
            emit(json!({"k": "reg", "t": now, "gen": gen, "inst": r.instance_id}));
        }
        Some(Event::Assignment(a)) => {
            let mut items: Vec<i32> = a.items.iter().map(|i| i.item).collect();
            items.sort_unstable();
            emit(
                json!({"k": "asg", "t": now, "gen": gen, "items": items, "epoch": a.epoch,
                        "leader": a.leader}),
            );
        }
        Some(Event::Lease(l)) => {
            let valid_for = l.valid_for.unwrap_or_default();
            let valid_for_us =
                valid_for.seconds.max(0) as u64 * 1_000_000 + valid_for.nanos.max(0) as u64 / 1_000;
            let expires = l
                .expires_at
                .map(|ts| ts.seconds.max(0) as u64 * 1_000_000 + ts.nanos.max(0) as u64 / 1_000)
                .unwrap_or(u64::MAX);
            // The latest lease rules; one read after its expires_at is void.
            let until = if now >= expires {
                now
            } else {
                (now + valid_for_us).min(expires)
            };
            st.lease_until = until;
            answerer.lease_until.store(until, Ordering::SeqCst);
            emit(
                json!({"k": "lease", "t": now, "gen": gen, "seq": l.sequence, "until": until,
                        "void": now >= expires}),
            );
        }
        Some(Event::Trigger(t)) => on_trigger(args, st, answerer, t, now, modes),
        Some(Event::Revoke(r)) => {
            emit(
                json!({"k": "revoke", "t": now, "gen": gen, "items": r.items,
                        "reason": r.reason}),
            );
            for item in &r.items {
                let mut active = Vec::new();
                for (exec, items) in st.execs.iter_mut() {
                    if let Some(run) = items.get_mut(item) {
                        if run.phase != Phase::Done {
                            run.phase = Phase::Done;
                            active.push(exec.clone());
                        }
                    }
                }
                for exec in &active {
                    emit(
                        json!({"k": "stop", "t": now, "gen": gen, "exec": exec, "item": item,
                                "why": "revoke"}),
                    );
                }
                if active.is_empty() && !args.answers_once() {
                    // Nothing runs it any more: acknowledge anyway (a Decline is always safe).
                    // A MAY: the minimal worker declines only what it stopped (rule 4).
                    active.extend(st.last_exec_of_item.get(item).cloned());
                }
                for exec in active {
                    st.answer(
                        answerer,
                        &exec,
                        Answer::Decline(vec![*item], "revoked".into()),
                    );
                }
            }
        }
        Some(Event::Shutdown(s)) => {
            let kind = ShutdownKind::try_from(s.kind).unwrap_or(ShutdownKind::Unspecified);
            st.shutting_down = Some(kind);
            emit(
                json!({"k": "shutdown", "t": now, "gen": gen, "reason": s.reason,
                        "kind": kind_name(kind)}),
            );
        }
        None => {}
    }
}

fn on_trigger(
    args: &WorkerArgs,
    st: &mut Stream,
    answerer: &Answerer,
    t: Trigger,
    now: u64,
    modes: &Modes,
) {
    let fire_us = t.fire_time.as_ref().map_or(0, |ts| {
        ts.seconds.max(0) as u64 * 1_000_000 + ts.nanos.max(0) as u64 / 1_000
    });
    let items: Vec<i32> = t.items.iter().map(|i| i.item).collect();
    if st.execs.contains_key(&t.execution_id) {
        // Delivered twice: the first delivery runs it.
        emit(json!({"k": "dup", "t": now, "gen": st.gen, "exec": t.execution_id}));
        return;
    }
    let refuse = if st.shutting_down.is_some() {
        Some("shutting down")
    } else if !st.lease_valid(now) {
        Some("no valid lease")
    } else {
        None
    };
    if let Some(why) = refuse {
        emit(
            json!({"k": "trig", "t": now, "gen": st.gen, "exec": t.execution_id,
                    "src": t.source, "fire": fire_us, "ok": false, "why": why,
                    "items": items.iter().map(|i| json!({"i": i,
                        "tok": t.fencing_tokens.get(i).copied().unwrap_or(-1), "plan": 0}))
                        .collect::<Vec<_>>()}),
        );
        answerer.send(
            &st.instance,
            &t.execution_id,
            Answer::Decline(items, format!("declined at once: {why}")),
        );
        return;
    }
    let mut runs = BTreeMap::new();
    let mut listed = Vec::new();
    // A resident worker holds what it is given until it is taken back (whatever the source:
    // the sidecar sends it nothing else).
    let hold = args.resident();
    for item in &items {
        let plan = if hold {
            None
        } else {
            plan_ms(args, &t, *item, now, modes)
        };
        let token = t.fencing_tokens.get(item).copied().unwrap_or(-1);
        listed.push(json!({"i": item, "tok": token, "plan": plan.map_or(-1, |p| p as i64)}));
        runs.insert(
            *item,
            ItemRun {
                token,
                end_at: plan.map(|p| now + p * 1_000),
                phase: Phase::Working,
                hold,
            },
        );
        st.last_exec_of_item.insert(*item, t.execution_id.clone());
    }
    emit(
        json!({"k": "trig", "t": now, "gen": st.gen, "exec": t.execution_id, "src": t.source,
                "fire": fire_us, "ok": true, "items": listed, "lease_until": st.lease_until}),
    );
    if now < modes.hang_until {
        st.muted.insert(t.execution_id.clone());
    }
    st.execs.insert(t.execution_id, runs);
}

/// Every 10 ms: lease lapses, hung items released, finished items written to the store.
fn progress(
    args: &WorkerArgs,
    st: &mut Stream,
    answerer: &Answerer,
    write_tx: &mpsc::UnboundedSender<WriteResult>,
    modes: &Modes,
) {
    let now = wall_us();
    if now >= modes.hang_until {
        st.muted.clear(); // the hang is over: answers go out again
    }
    check_lapse(st, answerer, now);
    let until = st.lease_until;
    for (exec, items) in st.execs.iter_mut() {
        for (item, run) in items.iter_mut() {
            if run.phase != Phase::Working || run.hold {
                continue;
            }
            if run.end_at.is_none() && now >= modes.hang_until {
                run.end_at = Some(now);
            }
            if run.end_at.is_none_or(|e| now < e) {
                continue;
            }
            // The work is over: write it, only while the lease is valid (it is: check_lapse).
            run.phase = Phase::Writing;
            let line = format!(
                "W {} {} {} {} {} {} {}\n",
                args.job,
                item,
                run.token,
                std::process::id(),
                st.gen,
                exec,
                until
            );
            let (store, tx, exec, item) =
                (args.store.clone(), write_tx.clone(), exec.clone(), *item);
            tokio::spawn(async move {
                let sent = wall_us();
                let reply = store_write(&store, &line).await;
                let _ = tx.send(WriteResult {
                    exec,
                    item,
                    sent,
                    until,
                    reply,
                });
            });
        }
    }
    st.execs
        .retain(|_, items| items.values().any(|r| r.phase != Phase::Done));
}

fn on_write(st: &mut Stream, answerer: &Answerer, result: WriteResult) {
    let now = wall_us();
    check_lapse(st, answerer, now);
    let (res, last) = match &result.reply {
        Ok((true, last)) => ("ok", *last),
        Ok((false, last)) => ("rej", *last),
        Err(_) => ("err", -1),
    };
    emit(
        json!({"k": "write", "t": now, "sent": result.sent, "gen": st.gen, "exec": result.exec,
                "item": result.item, "until": result.until, "res": res, "last": last}),
    );
    let Some(run) = st
        .execs
        .get_mut(&result.exec)
        .and_then(|items| items.get_mut(&result.item))
    else {
        return;
    };
    if run.phase != Phase::Writing {
        return; // stopped meanwhile (lease, revoke): already declined
    }
    run.phase = Phase::Done;
    let answer = match result.reply {
        Ok((true, _)) => Answer::Complete(result.item),
        Ok((false, last)) => Answer::Fail(
            result.item,
            format!(
                "the fencing store refused token {} (it holds {last})",
                run.token
            ),
        ),
        Err(e) => Answer::Fail(result.item, format!("the fencing store failed: {e}")),
    };
    st.answer(answerer, &result.exec, answer);
}

/// One write to the fencing store: `(accepted, last token held before)`.
async fn store_write(addr: &str, line: &str) -> Result<(bool, i64), String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        stream
            .write_all(line.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut reply = String::new();
        BufReader::new(stream)
            .read_line(&mut reply)
            .await
            .map_err(|e| e.to_string())?;
        let parts: Vec<&str> = reply.split_whitespace().collect();
        match parts.as_slice() {
            ["OK", last] => Ok((true, last.parse().unwrap_or(-1))),
            ["REJ", last] => Ok((false, last.parse().unwrap_or(-1))),
            _ => Err(format!("bad reply {reply:?}")),
        }
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .unwrap_or_else(|_| Err("no reply in 2 s".into()))
}

/// A worker that joins and goes away mid-join: each Subscribe is cancelled (the call or its
/// stream dropped) after the given number of milliseconds.
pub async fn run_joiner(endpoint: String, job: usize, delays_ms: Vec<u32>) {
    for delay in delays_ms {
        let channel = Endpoint::from_shared(endpoint.clone())
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(1))
            .connect_lazy();
        let mut client = WorkerClient::new(channel);
        let request = SubscribeRequest {
            job_name: JOBS[job].name.to_string(),
            config: Some(spec::job_config(job)),
            pid: std::process::id(),
            ..Default::default()
        };
        let started = wall_us();
        let mut seen: Vec<String> = Vec::new();
        let attempt = async {
            let mut stream = client.subscribe(request).await?.into_inner();
            while let Some(event) = stream.message().await? {
                let what = match event.event {
                    Some(Event::Registered(r)) => format!("registered {}", r.instance_id),
                    Some(Event::Assignment(_)) => "assignment".into(),
                    Some(Event::Lease(_)) => "lease".into(),
                    Some(Event::Trigger(_)) => "trigger".into(),
                    _ => "other".into(),
                };
                seen.push(what);
            }
            Ok::<(), tonic::Status>(())
        };
        let outcome =
            match tokio::time::timeout(Duration::from_millis(u64::from(delay)), attempt).await {
                Err(_) => "cancelled".to_string(),
                Ok(Ok(())) => "stream ended".to_string(),
                Ok(Err(status)) => format!("{:?}: {}", status.code(), status.message()),
            };
        emit(
            json!({"k": "join", "t": started, "delay_ms": delay, "outcome": outcome,
                    "seen": seen}),
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    emit(json!({"k": "exit", "gen": 0}));
}
