//! One execution on a local instance: its items, tokens and epochs, the answers it holds and
//! how it was taken back; and the ids executions get.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use crate::coordination::events::{ItemOutcome, Source};
use crate::coordination::job::writes::Release;
use crate::elasticjob::paths::JobPaths;
use crate::registry::{Op, OpResult};

/// Why an execution no longer holds its items, and what becomes of their nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Void {
    pub(super) reason: String,
    pub(super) release: Release,
    /// `Revoke` was sent: the items are released once the worker declines them (or answers)
    /// or its lease runs out, whichever comes first.
    pub(super) waiting_ack: bool,
    /// A resident hold its worker gave back unasked: its release schedules the hold's
    /// restart after the job's restart backoff, as its end by `Complete` would, so that a
    /// worker that keeps declining is not handed the item again at once.
    pub(super) restart: bool,
}

/// One execution on a local instance.
#[derive(Debug, Clone)]
pub struct Execution {
    pub(super) id: String,
    pub(super) instance_id: String,
    pub(super) source: Source,
    pub(super) items: BTreeSet<i32>,
    pub(super) fire_time: chrono::DateTime<chrono::Utc>,
    pub(super) started: Instant,
    /// Wall-clock start, for the execution history.
    pub(super) started_at: std::time::SystemTime,
    /// Unanswered items fail after this long (`execution_timeout_seconds`).
    pub(super) timeout: Option<std::time::Duration>,
    /// Created `running` nodes (monitorExecution on when the execution started).
    pub(super) monitored: bool,
    /// The registry session it was started in.
    pub(super) generation: u64,
    /// The worker's lease epoch when the trigger was sent (see `WorkerLease::epoch`).
    pub(super) lease_epoch: u64,
    /// Whether the `Trigger` was sent (false while its `running` nodes are being written).
    pub(super) delivered: bool,
    pub(super) fencing_tokens: BTreeMap<i32, i64>,
    /// Per item: the data version of `sharding/{i}` after this execution started; ending the
    /// item is conditional on it.
    pub(super) versions: BTreeMap<i32, i32>,
    /// Items answered (or released), with how.
    pub(super) outcomes: BTreeMap<i32, ItemOutcome>,
    /// Answers received and not recorded yet, and the calls waiting to hear of them.
    pub(super) held: HeldAnswers,
    /// Items whose release is being written.
    pub(super) releasing: BTreeSet<i32>,
    /// Items the worker gave back (a `Decline` of some of them) whose release is still to be
    /// written: held like answers, and written by the reconcile until it lands.
    pub(super) declined: BTreeSet<i32>,
    /// Set once the execution no longer holds its items.
    pub(super) void: Option<Void>,
    /// Its trace (the `traceparent` its trigger carries) and what happened to it, for its span.
    pub(super) trace: crate::coordination::trace::TraceContext,
    pub(super) events: Vec<crate::coordination::trace::SpanEvent>,
    /// Which retry of its items this run is (0: a first run).
    pub(super) attempt: u32,
    /// The job parameter its trigger carries instead of the job's own (a trigger-once request
    /// that named one).
    pub(super) job_parameter: Option<String>,
    /// ElasticJob's task id, set when the trigger is sent.
    pub(super) task_id: String,
}

impl Execution {
    /// A new execution of `items` on `instance_id`, not yet started in the registry: nothing
    /// answered, nothing delivered.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: String,
        instance_id: String,
        source: Source,
        items: BTreeSet<i32>,
        fire_time: chrono::DateTime<chrono::Utc>,
        started: Instant,
        started_at: std::time::SystemTime,
        timeout: Option<std::time::Duration>,
        monitored: bool,
        generation: u64,
        trace: crate::coordination::trace::TraceContext,
    ) -> Execution {
        Execution {
            id,
            instance_id,
            source,
            items,
            fire_time,
            started,
            started_at,
            timeout,
            monitored,
            generation,
            lease_epoch: 0,
            delivered: false,
            fencing_tokens: BTreeMap::new(),
            versions: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            held: HeldAnswers::default(),
            releasing: BTreeSet::new(),
            declined: BTreeSet::new(),
            void: None,
            trace,
            events: Vec::new(),
            attempt: 0,
            job_parameter: None,
            task_id: String::new(),
        }
    }

    /// Items neither answered, nor being answered or released.
    pub fn unreleased(&self) -> Vec<i32> {
        self.items
            .iter()
            .copied()
            .filter(|i| {
                !self.outcomes.contains_key(i)
                    && !self.held.contains(*i)
                    && !self.releasing.contains(i)
            })
            .collect()
    }

    /// Whether every item has an outcome.
    pub fn is_done(&self) -> bool {
        self.outcomes.len() == self.items.len()
    }

    /// Records an event of its span.
    pub fn note(
        &mut self,
        at: std::time::SystemTime,
        name: &'static str,
        attributes: Vec<(&'static str, String)>,
    ) {
        self.events.push(crate::coordination::trace::SpanEvent {
            at,
            name,
            attributes,
        });
    }
}

/// How a waiting answer call ends: `Ok`, or the item taken back and why.
pub type AnswerSettled = Result<(), (i32, String)>;

/// Answers the sidecar received for an execution and has not recorded yet.
///
/// Once the sidecar holds an answer it records it itself: a write whose outcome is unknown is
/// resolved by a fresh read, and written again if it did not land, until it lands, the fence
/// refuses it, or the session it was decided in is gone. Nothing waits for the worker to send
/// it again (`docs/guarantees.md`, "Every wait on a worker").
#[derive(Debug, Clone, Default)]
pub struct HeldAnswers {
    items: BTreeMap<i32, HeldAnswer>,
    /// Answer calls waiting to hear how their items ended, with those items.
    waiting: Vec<(crate::coordination::job::ReplyId, BTreeSet<i32>)>,
}

/// One held answer.
#[derive(Debug, Clone)]
struct HeldAnswer {
    outcome: ItemOutcome,
    write: HeldWrite,
    /// An earlier write of it went unanswered: a refusal may then mean it landed after all,
    /// and is resolved by a read like an unanswered write.
    once_unknown: bool,
}

/// Where the write of a held answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldWrite {
    /// To be written: not tried yet (the session was not connected), or read back as not
    /// landed.
    Due,
    /// A write is in flight.
    InFlight,
    /// A write got no reply: a fresh read tells whether it landed.
    Unknown,
}

impl HeldAnswers {
    /// Whether item `i`'s answer is held.
    pub fn contains(&self, i: i32) -> bool {
        self.items.contains_key(&i)
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Holds `outcome` for item `i`, to be written (a held item keeps its first answer).
    pub fn hold(&mut self, i: i32, outcome: ItemOutcome) {
        self.items.entry(i).or_insert(HeldAnswer {
            outcome,
            write: HeldWrite::Due,
            once_unknown: false,
        });
    }

    /// The held items whose write is at `write`.
    pub fn at(&self, write: HeldWrite) -> Vec<i32> {
        self.items
            .iter()
            .filter(|(_, a)| a.write == write)
            .map(|(i, _)| *i)
            .collect()
    }

    /// Moves the writes of `items` to `write`.
    pub fn set(&mut self, items: &[i32], write: HeldWrite) {
        for i in items {
            if let Some(a) = self.items.get_mut(i) {
                a.write = write;
                a.once_unknown |= write == HeldWrite::Unknown;
            }
        }
    }

    /// Whether a write of any of `items` once went unanswered.
    pub fn once_unknown(&self, items: &[i32]) -> bool {
        items
            .iter()
            .any(|i| self.items.get(i).is_some_and(|a| a.once_unknown))
    }

    /// The held outcome of item `i`.
    pub fn outcome(&self, i: i32) -> Option<&ItemOutcome> {
        self.items.get(&i).map(|a| &a.outcome)
    }

    /// Lets go of `items` (recorded, or no longer recordable), with their outcomes.
    pub fn release(&mut self, items: &[i32]) -> Vec<(i32, ItemOutcome)> {
        items
            .iter()
            .filter_map(|i| self.items.remove(i).map(|a| (*i, a.outcome)))
            .collect()
    }

    /// Lets go of every held answer.
    pub fn release_all(&mut self) -> Vec<(i32, ItemOutcome)> {
        std::mem::take(&mut self.items)
            .into_iter()
            .map(|(i, a)| (i, a.outcome))
            .collect()
    }

    /// An answer call waits to hear how `items` end.
    pub fn wait(&mut self, reply: crate::coordination::job::ReplyId, items: BTreeSet<i32>) {
        self.waiting.push((reply, items));
    }

    /// The waiting calls whose items all have an outcome now: each with `Ok` when every item
    /// was answered, or the reason one was taken back instead.
    pub fn settled(
        &mut self,
        outcomes: &BTreeMap<i32, ItemOutcome>,
    ) -> Vec<(crate::coordination::job::ReplyId, AnswerSettled)> {
        let mut settled = Vec::new();
        self.waiting.retain(|(reply, items)| {
            if !items.iter().all(|i| outcomes.contains_key(i)) {
                return true;
            }
            let refused = items.iter().find_map(|i| match &outcomes[i] {
                ItemOutcome::Revoked(reason) => Some((*i, reason.clone())),
                _ => None,
            });
            settled.push((*reply, refused.map_or(Ok(()), Err)));
            false
        });
        settled
    }
}

/// The `n`th execution id drawn in a step whose random bits are `entropy`: 128 bits in hex,
/// unique within the step (an odd multiplier is a bijection of `n`) and as random as
/// `entropy` across steps.
pub fn execution_id(entropy: u128, n: u64) -> String {
    const ODD: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835;
    format!("{:032x}", entropy ^ u128::from(n).wrapping_mul(ODD))
}

/// The fencing tokens and item epochs a start (or claim) left, from its results.
pub(super) fn tokens_of(
    paths: &JobPaths,
    items: &[i32],
    ops: &[Op],
    results: &[OpResult],
) -> (BTreeMap<i32, i64>, BTreeMap<i32, i32>) {
    let mut tokens = BTreeMap::new();
    let mut versions = BTreeMap::new();
    // Each item's two paths, formatted once (not once per write of the multi-op).
    let mut running = HashMap::with_capacity(items.len());
    let mut fence = HashMap::with_capacity(items.len());
    for i in items {
        running.entry(paths.item_running(*i)).or_insert(*i);
        fence.entry(paths.item(*i)).or_insert(*i);
    }
    for (op, result) in ops.iter().zip(results) {
        let (Op::SetData { path, .. }, OpResult::DataSet { stat }) = (op, result) else {
            continue;
        };
        if let Some(i) = running.get(path) {
            tokens.insert(*i, stat.czxid);
        } else if let Some(i) = fence.get(path) {
            versions.insert(*i, stat.version);
            tokens.entry(*i).or_insert(stat.mzxid);
        }
    }
    (tokens, versions)
}
