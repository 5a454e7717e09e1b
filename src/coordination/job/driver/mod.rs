//! The driver of one job: a task that owns the job's I/O (its registry watch, the worker
//! streams' senders, held latches, the cron schedule) and its [`JobState`]. It turns commands,
//! registry events, results and time into [`Input`]s, and performs the [`Action`]s the state
//! returns, each with a deadline.
//!
//! Reads and writes go through one ordered queue: their results are fed back in the order they
//! were issued, which on one ZooKeeper session is the order the server answered them; a registry
//! event joins the same queue, so it applies after everything issued before it arrived. Latch
//! waits and the first setup run as the driver's own futures (`children`), so the loop never
//! blocks on ZooKeeper: an answer never waits behind an election. A fire goes through this file
//! twice: taken from the command queue and stepped, then its trigger performed onto the
//! worker's stream (`Driver::perform`). The driver's start and retirement are in `lifecycle`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, FuturesUnordered};
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

mod children;
mod lifecycle;
mod perform;

use perform::touch;

use super::state::JobState;
use super::{Action, Env, Input, IoResult, LatchKey, OpId, Reply, ReplyId, StreamKey};
use crate::coordination::events::{StreamEnd, WorkerEvent};
use crate::coordination::small_map::SmallMap;
use crate::coordination::{CoordError, Shared};
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::paths::JobPaths;
use crate::registry::{Error as RegError, Latch, RequestOrder, SessionState, Watch};
use crate::schedule::{FireQueue, Taken, ANSWER_WAIT_MAX};
use children::{next_event, set_up, sleep_until, Child};
pub(crate) use lifecycle::{spawn, JobCmd};

/// How long a latch may take to acquire before the attempt is given up (and retried).
const LATCH_DEADLINE: Duration = Duration::from_secs(10);
/// How many results and events already at hand are stepped as one (see [`Driver::gather`]):
/// enough for every event of a run of the largest jobs, few enough that a batch never holds
/// the loop for long.
const MAX_BATCH: usize = 1024;

/// A worker stream's sending end. Boxed events: a tokio queue allocates its slots 32 at a time,
/// and a worker's queue is empty most of the time.
pub(crate) type EventSender = mpsc::Sender<Box<WorkerEvent>>;

/// The sending end of a job driver's commands. Boxed: a tokio queue allocates its slots 32 at
/// a time, and most drivers' queues are empty most of the time.
pub(crate) type JobSender = mpsc::Sender<Box<JobCmd>>;

enum ReplyTx {
    Join(oneshot::Sender<Result<JobConfiguration, CoordError>>),
    Answer(oneshot::Sender<Result<(), CoordError>>),
    Drain(oneshot::Sender<bool>),
}

struct Sink {
    tx: EventSender,
    /// Cancelled to end the stream: lets go of the end-watcher's sender.
    stop: CancellationToken,
}

/// One entry of the ordered queue.
enum Queued {
    Done(OpId, IoResult),
    Watched(crate::registry::WatchEvent),
}

impl From<Queued> for Input {
    fn from(queued: Queued) -> Input {
        match queued {
            Queued::Done(op, result) => Input::Done { op, result },
            Queued::Watched(ev) => Input::Watched(ev),
        }
    }
}

struct Driver {
    shared: Arc<Shared>,
    paths: JobPaths,
    state: JobState,
    cmd_rx: mpsc::Receiver<Box<JobCmd>>,
    fires: Arc<FireQueue<JobCmd>>,
    /// The burst's count of the fire being stepped, dropped once the step is done.
    taken: Option<Taken>,
    timer_key: String,
    session_rx: watch::Receiver<SessionState>,
    watch: Option<Watch>,
    /// Entries boxed: an output that is ready before an earlier one waits in a heap, which
    /// keeps its capacity.
    io: FuturesOrdered<BoxFuture<'static, Box<Queued>>>,
    /// Polled by the driver's own loop, not spawned: a queue to hear back from spawned tasks
    /// would cost every job its slots and its channel (~1 KB), and the driver is in its loop
    /// whenever it is not stepping. Dropped with the driver, which retires only when nothing
    /// is in flight (a latch being acquired deletes its contender node when dropped).
    children: FuturesUnordered<BoxFuture<'static, Child>>,
    /// Most jobs have one worker stream here (a hash table would allocate room for three).
    sinks: SmallMap<StreamKey, Sink>,
    replies: HashMap<ReplyId, ReplyTx>,
    latches: HashMap<LatchKey, Latch>,
    next_reply: ReplyId,
    next_latch: LatchKey,
    /// Inputs that performing actions produced (a full stream), fed after them.
    followups: Vec<Input>,
    /// The order of the job's reads and writes: results come back in the order ZooKeeper
    /// applied them, group-committed writes included.
    order: RequestOrder,
}

impl Driver {
    /// Queues `request` in the ordered queue, sent in its turn ([`RequestOrder`]).
    fn push_request(
        &mut self,
        commit: bool,
        request: impl std::future::Future<Output = Queued> + Send + 'static,
    ) {
        let request = self
            .order
            .in_turn(commit, async move { Box::new(request.await) });
        self.io.push_back(request);
    }

    async fn run(mut self: Box<Self>) {
        loop {
            let env = self.env();
            let wake = self.state.next_wakeup(&env);
            // The rest of a fire's reconcile, owed until the instant's fires are all taken up
            // (at most `ANSWER_WAIT_MAX`, as answers wait).
            let owed = self.state.reconcile_owed().then(|| self.shared.clone());
            let input = tokio::select! {
                biased;
                Some(queued) = self.io.next(), if !self.io.is_empty() => {
                    let batch = self.gather((*queued).into());
                    self.feed_all(batch);
                    if self.state.idle() && self.try_retire() {
                        return;
                    }
                    continue;
                }
                Some(child) = self.children.next(), if !self.children.is_empty() => {
                    match self.on_child(child) {
                        Some(input) => input,
                        None => continue,
                    }
                }
                ev = next_event(&mut self.watch) => match ev {
                    // Through the ordered queue, behind the reads and writes already issued.
                    Some(ev) => {
                        let ev = Box::new(Queued::Watched(ev));
                        self.io.push_back(futures::future::ready(ev).boxed());
                        continue;
                    }
                    None => {
                        self.watch = None;
                        warn!(job = %self.state.name(), "registry watch ended");
                        Input::WatchLost
                    }
                },
                cmd = self.cmd_rx.recv() => match cmd {
                    Some(cmd) => match self.on_cmd(*cmd) {
                        Some(input) => input,
                        None => continue,
                    },
                    None => return,
                },
                changed = self.session_rx.changed() => match changed {
                    Ok(()) => Input::Session(self.session_rx.borrow_and_update().clone()),
                    Err(_) => return,
                },
                _ = async {
                    if let Some(shared) = &owed {
                        shared.timer.burst().settled(ANSWER_WAIT_MAX).await;
                    }
                }, if owed.is_some() => Input::Tick,
                _ = sleep_until(wake) => Input::Tick,
            };
            self.feed(input);
            // The fire is taken up: its trigger is queued (or its claim sent).
            self.taken = None;
            if self.state.idle() && self.try_retire() {
                return;
            }
        }
    }

    /// The world as the next step sees it: the clocks, the session and fresh random bits. The
    /// one place a job reads a clock or draws randomness; the state decides on this snapshot.
    #[allow(
        clippy::disallowed_methods,
        reason = "the driver is the job's I/O edge: it reads the clocks and randomness for the step"
    )]
    fn env(&self) -> Env {
        Env {
            now: Instant::now(),
            wall: chrono::Utc::now(),
            session: self.shared.registry.session().borrow().clone(),
            proof: self.shared.registry.last_proof(),
            entropy: rand::random(),
            claim_lead: self.shared.timer.lead().current(),
        }
    }

    /// Steps `input`.
    fn feed(&mut self, input: Input) {
        let env = self.env();
        let actions = self.state.step(input, &env);
        self.perform_all(actions);
    }

    /// Steps `inputs` as one (see [`JobState::step_all`]), then what performing their
    /// actions produced, one at a time.
    fn feed_all(&mut self, inputs: impl IntoIterator<Item = Input>) {
        let env = self.env();
        let actions = self.state.step_all(inputs, &env);
        self.perform_all(actions);
    }

    fn perform_all(&mut self, actions: Vec<Action>) {
        for action in actions {
            self.perform(action);
        }
        while let Some(input) = self.followups.pop() {
            let env = self.env();
            for action in self.state.step(input, &env) {
                self.perform(action);
            }
        }
        self.give_back_emptied();
    }

    /// Performs one action the state returned: a registry request in its turn, an event on a
    /// worker's stream, a reply, a latch, the timer's schedule, the observer.
    fn perform(&mut self, action: Action) {
        let registry = self.shared.registry.clone();
        match action {
            Action::Send { stream, event } => {
                let Some(sink) = self.sinks.get(&stream) else {
                    return;
                };
                if let Err(mpsc::error::TrySendError::Full(_)) = sink.tx.try_send(Box::new(event)) {
                    warn!(job = %self.state.name(), stream, "worker stream full: the worker is not reading its events; ending it");
                    self.followups.push(Input::StreamEnded {
                        stream,
                        end: StreamEnd::BySidecar,
                    });
                }
            }
            Action::EndStream { stream } => {
                if let Some(sink) = self.sinks.remove(&stream) {
                    sink.stop.cancel();
                }
            }
            Action::Reply { reply, result } => match (self.replies.remove(&reply), result) {
                (Some(ReplyTx::Join(tx)), Reply::Joined(r)) => {
                    let _ = tx.send(r.map(|c| *c));
                }
                (Some(ReplyTx::Answer(tx)), Reply::Answered(r)) => {
                    let _ = tx.send(r);
                }
                (Some(ReplyTx::Drain(tx)), Reply::Drained { released }) => {
                    let _ = tx.send(released);
                }
                _ => {}
            },
            Action::Remembered {
                reply,
                execution_id,
                instance_id,
                decline,
            } => {
                if let Some(ReplyTx::Answer(tx)) = self.replies.remove(&reply) {
                    let _ = tx.send(self.shared.remembered(&execution_id, &instance_id, decline));
                }
            }
            Action::SetUp {
                op,
                config,
                overwrite,
            } => {
                let (paths, ip) = (self.paths.clone(), self.shared.ip.clone());
                self.children.push(
                    async move {
                        Child::SetUp(op, set_up(&registry, &paths, &ip, config, overwrite).await)
                    }
                    .boxed(),
                );
            }
            Action::Commit {
                op,
                generation,
                ops,
            } => self.push_request(true, async move {
                let result = registry.multi_at_batched(generation, ops).await;
                Queued::Done(op, IoResult::Committed(result))
            }),
            Action::Persist { op, path, data } => self.push_request(false, async move {
                let result = registry.persist(&path, &data).await;
                Queued::Done(op, IoResult::Persisted(result))
            }),
            Action::Read { op, path } => self.push_request(false, async move {
                let node = registry.get(&path).await;
                Queued::Done(op, IoResult::Read { path, node })
            }),
            Action::ReadMany { op, paths } => self.push_request(false, async move {
                let nodes = registry.get_many(&paths).await;
                Queued::Done(op, IoResult::ReadMany { paths, nodes })
            }),
            Action::Reload { op } => {
                let root = self.paths.root();
                self.push_request(false, async move {
                    Queued::Done(op, IoResult::Loaded(registry.read_tree(&root).await))
                })
            }
            Action::Watch { op } => {
                let root = self.paths.root();
                self.children.push(
                    async move { Child::Watching(op, registry.watch_recursive(&root).await) }
                        .boxed(),
                );
            }
            Action::AcquireLatch { op, dir } => {
                self.children.push(
                    async move {
                        let result =
                            tokio::time::timeout(LATCH_DEADLINE, registry.acquire_latch(&dir))
                                .await
                                .unwrap_or(Err(RegError::Timeout(LATCH_DEADLINE)));
                        Child::Latched(op, result)
                    }
                    .boxed(),
                );
            }
            Action::ReleaseLatch { latch } => {
                if let Some(latch) = self.latches.remove(&latch) {
                    self.shared.tracker.spawn(async move {
                        if let Err(e) = latch.release().await {
                            debug!(error = %e, "latch release failed; its node goes with the session");
                        }
                    });
                }
            }
            Action::TouchClock { op } => {
                let path = self.paths.system_time();
                self.push_request(false, async move {
                    Queued::Done(op, IoResult::Clock(touch(&registry, &path).await))
                })
            }
            Action::Schedule(wanted) => self.schedule(wanted),
            Action::Observe(observation) => self.observe(observation),
            Action::TrackExecution { id } => {
                self.shared
                    .executions
                    .lock()
                    .expect("execution table poisoned")
                    .insert(id, self.state.name().to_string());
            }
            Action::ForgetExecution { id, finished } => {
                self.shared
                    .executions
                    .lock()
                    .expect("execution table poisoned")
                    .remove(&id);
                self.shared
                    .finished
                    .lock()
                    .expect("finished table poisoned")
                    .insert(&id, finished);
            }
        }
    }

    /// Frees what the steps emptied, as [`JobState`] does its own: between its runs a job
    /// holds no reply, latch or follow-up, and waits for no request.
    fn give_back_emptied(&mut self) {
        self.order.forget_answered();
        if self.followups.is_empty() {
            self.followups = Vec::new();
        }
        if self.replies.is_empty() {
            self.replies = HashMap::new();
        }
        if self.latches.is_empty() {
            self.latches = HashMap::new();
        }
    }

    /// `first` and whatever else the ordered queue holds ready behind it, in order, up to
    /// [`MAX_BATCH`]. Registry events already delivered join the queue first, behind the
    /// reads and writes issued before (the place they would take one at a time).
    fn gather(&mut self, first: Input) -> Vec<Input> {
        let mut batch = vec![first];
        if let Some(watch) = self.watch.as_mut() {
            while let Some(ev) = watch.try_next() {
                let ev = Box::new(Queued::Watched(ev));
                self.io.push_back(futures::future::ready(ev).boxed());
            }
        }
        while batch.len() < MAX_BATCH {
            match self.io.next().now_or_never() {
                Some(Some(queued)) => batch.push((*queued).into()),
                _ => break,
            }
        }
        batch
    }

    fn on_cmd(&mut self, cmd: JobCmd) -> Option<Input> {
        match cmd {
            JobCmd::Join {
                instance_id,
                config,
                overwrite,
                max_concurrent,
                sink,
                connection,
                reply,
            } => {
                let stream = self.shared.next_key();
                let reply_id = self.reply_id(ReplyTx::Join(reply));
                let stop = CancellationToken::new();
                self.sinks.insert(
                    stream,
                    Sink {
                        tx: sink.clone(),
                        stop: stop.clone(),
                    },
                );
                // The driver itself watches for the end of the stream, from the moment it
                // knows of it: a Subscribe cancelled at any point ends as if its stream ended.
                self.children.push(
                    async move {
                        Child::Ended(tokio::select! {
                            _ = sink.closed() => Some((stream, connection.end())),
                            _ = stop.cancelled() => None,
                        })
                    }
                    .boxed(),
                );
                Some(Input::Join {
                    reply: reply_id,
                    stream,
                    instance_id,
                    config,
                    overwrite,
                    max_concurrent,
                })
            }
            JobCmd::Answer {
                instance_id,
                execution_id,
                outcomes,
                reply,
            } => {
                let reply = self.reply_id(ReplyTx::Answer(reply));
                Some(Input::Answer {
                    reply,
                    instance_id,
                    execution_id,
                    outcomes,
                })
            }
            JobCmd::Decline {
                instance_id,
                execution_id,
                items,
                reason,
                reply,
            } => {
                let reply = self.reply_id(ReplyTx::Answer(reply));
                Some(Input::Decline {
                    reply,
                    instance_id,
                    execution_id,
                    items,
                    reason,
                })
            }
            JobCmd::Drain { deadline, reply } => {
                let reply = self.reply_id(ReplyTx::Drain(reply));
                Some(Input::Drain { reply, deadline })
            }
            JobCmd::ContinueTrace {
                parent,
                for_,
                reply,
            } => {
                // The input is stepped right after this returns, in this same turn of the loop.
                let _ = reply.send(());
                Some(Input::ContinueTrace { parent, for_ })
            }
            JobCmd::Fire(mut fire) => {
                self.fires.taken_out();
                // Held until the fire's step is done (`run`).
                self.taken = fire.taken.take();
                Some(match fire.ahead {
                    true => Input::FireAhead {
                        fire_time: fire.fire_time,
                    },
                    false => Input::Fire {
                        fire_time: fire.fire_time,
                    },
                })
            }
        }
    }

    fn reply_id(&mut self, tx: ReplyTx) -> ReplyId {
        self.next_reply += 1;
        self.replies.insert(self.next_reply, tx);
        self.next_reply
    }
}
