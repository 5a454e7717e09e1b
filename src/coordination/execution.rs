//! Executions: what a fire runs on a local instance, and the bookkeeping of the executions
//! in flight (`docs/elasticjob-compat.md` §6).
//!
//! Like an ElasticJob instance, which has one Quartz thread per job, a shardcar instance runs
//! one execution of its job at a time: a fire that finds the instance still busy flags its
//! items `misfire` (when misfire is on) and a single catch-up run follows the busy one.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::BuildHasher;

use std::time::Instant;

use crate::coordination::events::Source;
pub use crate::coordination::failover::Release;
use crate::coordination::view::JobView;

/// What one fire does for one local instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FirePlan {
    /// Items to run now.
    pub run: Vec<i32>,
    /// Items to flag `misfire` (the instance is still busy with an earlier execution).
    pub misfire: Vec<i32>,
}

/// Decides what a fire does for `instance_id` (whose server is `server_ip`).
///
/// `busy` tells whether the instance still has an execution in flight.
pub fn plan_fire(view: &JobView, instance_id: &str, server_ip: &str, busy: bool) -> FirePlan {
    let Some(config) = view.config.as_ref() else {
        return FirePlan::default();
    };
    let local = view.items_of(instance_id, server_ip);
    if busy {
        let misfire = if config.misfire {
            local
                .into_iter()
                .filter(|i| !view.items.get(i).is_some_and(|it| it.misfire))
                .collect()
        } else {
            Vec::new()
        };
        return FirePlan {
            run: Vec::new(),
            misfire,
        };
    }
    if config.failover {
        let taken = view.failover_items_of(instance_id);
        if !taken.is_empty() {
            return FirePlan {
                run: runnable(view, taken, false, config.monitor_execution),
                misfire: Vec::new(),
            };
        }
    }
    FirePlan {
        run: runnable(view, local, config.failover, config.monitor_execution),
        misfire: Vec::new(),
    }
}

/// Removes disabled items, items taken over by failover (when `failover`) and items still
/// running anywhere (when `monitor`): an item is never started while its `running` node exists.
pub fn runnable(view: &JobView, items: Vec<i32>, failover: bool, monitor: bool) -> Vec<i32> {
    items
        .into_iter()
        .filter(|i| {
            let Some(item) = view.items.get(i) else {
                return true;
            };
            let taken = failover && item.failover.is_some();
            let running = monitor && item.running.is_some();
            !(item.disabled || taken || running)
        })
        .collect()
}

/// Items of a finished execution that are due a misfire catch-up run.
pub fn catch_up(view: &JobView, items: &BTreeSet<i32>) -> Vec<i32> {
    let Some(config) = view.config.as_ref() else {
        return Vec::new();
    };
    if !config.misfire || view.necessary {
        return Vec::new();
    }
    items
        .iter()
        .copied()
        .filter(|i| view.items.get(i).is_some_and(|it| it.misfire))
        .collect()
}

/// How an item of an execution ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemOutcome {
    Completed,
    Failed(String),
    /// The sidecar took the item back (revoke, timeout, fencing, decline); answers are refused.
    Revoked(String),
}

impl ItemOutcome {
    /// `completed`, `failed` or `revoked`.
    pub fn kind(&self) -> &'static str {
        match self {
            ItemOutcome::Completed => "completed",
            ItemOutcome::Failed(_) => "failed",
            ItemOutcome::Revoked(_) => "revoked",
        }
    }
}

/// Why an execution no longer holds its items, and what becomes of their nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Void {
    pub reason: String,
    pub release: Release,
    /// `Revoke` was sent: the items are released once the worker declines them (or answers)
    /// or its lease runs out, whichever comes first.
    pub waiting_ack: bool,
}

/// One execution on a local instance.
#[derive(Debug, Clone)]
pub struct Execution {
    pub id: String,
    pub instance_id: String,
    pub source: Source,
    pub items: BTreeSet<i32>,
    pub fire_time: chrono::DateTime<chrono::Utc>,
    pub started: Instant,
    /// Wall-clock start, for the execution history.
    pub started_at: std::time::SystemTime,
    /// Unanswered items fail after this long (`execution_timeout_seconds`).
    pub timeout: Option<std::time::Duration>,
    /// Created `running` nodes (monitorExecution on when the execution started).
    pub monitored: bool,
    /// The registry session it was started in.
    pub generation: u64,
    /// The worker's lease epoch when the trigger was sent (see `WorkerLease::epoch`).
    pub lease_epoch: u64,
    /// Whether the `Trigger` was sent (false while its `running` nodes are being written).
    pub delivered: bool,
    pub fencing_tokens: BTreeMap<i32, i64>,
    /// Per item: the data version of `sharding/{i}` after this execution started; ending the
    /// item is conditional on it.
    pub versions: BTreeMap<i32, i32>,
    /// Items answered (or released), with how.
    pub outcomes: BTreeMap<i32, ItemOutcome>,
    /// Answers received and not recorded yet, and the calls waiting to hear of them.
    pub held: HeldAnswers,
    /// Items whose release is being written.
    pub releasing: BTreeSet<i32>,
    /// Set once the execution no longer holds its items.
    pub void: Option<Void>,
    /// Its trace (the `traceparent` its trigger carries) and what happened to it, for its span.
    pub trace: crate::coordination::trace::TraceContext,
    pub events: Vec<crate::coordination::trace::SpanEvent>,
    /// ElasticJob's task id, set when the trigger is sent.
    pub task_id: String,
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
            void: None,
            trace,
            events: Vec::new(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::view::ItemView;
    use crate::elasticjob::config::JobConfiguration;
    use crate::registry::CachedStat;
    use std::sync::Arc;

    const ME: &str = "10.0.0.1@-@1";
    const OTHER: &str = "10.0.0.2@-@1";

    fn view(failover: bool) -> JobView {
        let mut config = JobConfiguration::new("j", 4);
        config.failover = failover;
        let mut v = JobView {
            config: Some(Arc::new(config)),
            ..JobView::default()
        };
        for i in 0..4 {
            let owner = if i < 3 { ME } else { OTHER };
            v.items.insert(
                i,
                Box::new(ItemView {
                    owner: Some((owner.into(), CachedStat::default())),
                    ..ItemView::default()
                }),
            );
        }
        v
    }

    #[test]
    fn runs_own_items_minus_disabled_and_running() {
        let mut v = view(false);
        v.items.get_mut(&1).unwrap().disabled = true;
        v.items.get_mut(&2).unwrap().running = Some((OTHER.into(), CachedStat::default()));
        assert_eq!(
            plan_fire(&v, ME, "10.0.0.1", false),
            FirePlan {
                run: vec![0],
                misfire: vec![]
            }
        );
        Arc::make_mut(v.config.as_mut().unwrap()).monitor_execution = false;
        assert_eq!(
            plan_fire(&v, ME, "10.0.0.1", false).run,
            vec![0, 2],
            "without monitoring, running is not tracked"
        );
    }

    #[test]
    fn disabled_server_runs_nothing() {
        let mut v = view(false);
        v.servers.insert("10.0.0.1".into(), false);
        assert_eq!(plan_fire(&v, ME, "10.0.0.1", false), FirePlan::default());
    }

    #[test]
    fn a_busy_instance_flags_misfire_once() {
        let mut v = view(false);
        v.items.get_mut(&0).unwrap().misfire = true;
        assert_eq!(
            plan_fire(&v, ME, "10.0.0.1", true),
            FirePlan {
                run: vec![],
                misfire: vec![1, 2]
            }
        );
        Arc::make_mut(v.config.as_mut().unwrap()).misfire = false;
        assert_eq!(plan_fire(&v, ME, "10.0.0.1", true), FirePlan::default());
        let items: BTreeSet<i32> = [0, 1].into();
        Arc::make_mut(v.config.as_mut().unwrap()).misfire = true;
        assert_eq!(catch_up(&v, &items), vec![0]);
        v.necessary = true;
        assert!(
            catch_up(&v, &items).is_empty(),
            "no catch-up while a reshard is pending"
        );
    }

    #[test]
    fn failover_items_take_precedence_and_taken_items_are_skipped() {
        let mut v = view(true);
        v.items.get_mut(&3).unwrap().failover = Some(ME.into());
        assert_eq!(plan_fire(&v, ME, "10.0.0.1", false).run, vec![3]);
        let mut v = view(true);
        v.items.get_mut(&1).unwrap().failover = Some(OTHER.into());
        assert_eq!(plan_fire(&v, ME, "10.0.0.1", false).run, vec![0, 2]);
    }
}

/// How a finished execution is remembered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub instance_id: String,
    /// Why its items were taken back, if they were: later answers are refused.
    pub revoked: Option<String>,
}

/// The sidecar's memory of recently finished executions (bounded, oldest forgotten first),
/// so a repeated answer is idempotent and a late one gets a precise refusal — also after
/// the job's actor has retired.
///
/// Full, it holds [`super::FINISHED_MEMORY`] executions for as long as the sidecar runs, so
/// each is kept small: a ring of `capacity` slots in the order they were remembered, the 128
/// bits of a sidecar's own execution id rather than its text, each instance id once (shared by
/// its executions' slots), and an index holding only a slot's number.
#[derive(Debug)]
pub struct FinishedExecutions {
    /// The remembered executions; once full, the next one replaces the slot at `oldest`.
    ring: Vec<Slot>,
    oldest: usize,
    capacity: usize,
    /// The slot of each remembered execution, by its key's hash.
    index: hashbrown::HashTable<u32>,
    hasher: std::hash::RandomState,
    /// Each instance id of a remembered execution, once.
    instances: std::collections::HashSet<std::sync::Arc<str>>,
}

/// An execution id as [`FinishedExecutions`] keys it: the bits of an id [`execution_id`]
/// made (32 lowercase hex digits, so each text has exactly one key), any other text as it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum IdKey {
    Bits([u8; 16]),
    Text(Box<str>),
}

impl IdKey {
    fn of(execution_id: &str) -> IdKey {
        let hex = execution_id.len() == 32
            && execution_id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if hex {
            if let Ok(bits) = u128::from_str_radix(execution_id, 16) {
                return IdKey::Bits(bits.to_be_bytes());
            }
        }
        IdKey::Text(execution_id.into())
    }
}

/// [`Finished`] as it is kept, with its key.
#[derive(Debug)]
struct Slot {
    key: IdKey,
    instance_id: std::sync::Arc<str>,
    revoked: Option<Box<str>>,
}

impl FinishedExecutions {
    pub fn new(capacity: usize) -> Self {
        assert!(
            u32::try_from(capacity).is_ok(),
            "slots are numbered in 32 bits"
        );
        // Both are sized once: the ring's untouched pages cost nothing until it fills, and the
        // index never grows (so never holds two tables at once).
        FinishedExecutions {
            ring: Vec::with_capacity(capacity),
            oldest: 0,
            capacity,
            index: hashbrown::HashTable::with_capacity(capacity),
            hasher: Default::default(),
            instances: Default::default(),
        }
    }

    pub fn insert(&mut self, execution_id: &str, finished: Finished) {
        if self.capacity == 0 {
            return;
        }
        let key = IdKey::of(execution_id);
        let hash = self.hasher.hash_one(&key);
        let instance_id = self.intern(finished.instance_id);
        let revoked = finished.revoked.map(String::into_boxed_str);
        let ring = &mut self.ring;
        if let Some(&at) = self.index.find(hash, |&s| ring[s as usize].key == key) {
            // Remembered already: its outcome is replaced, its place in the order kept.
            let slot = &mut ring[at as usize];
            let old = std::mem::replace(&mut slot.instance_id, instance_id);
            slot.revoked = revoked;
            self.release(old);
            return;
        }
        let slot = Slot {
            key,
            instance_id,
            revoked,
        };
        let at = if self.ring.len() < self.capacity {
            self.ring.push(slot);
            self.ring.len() - 1
        } else {
            let at = self.oldest;
            self.oldest = (at + 1) % self.capacity;
            let old = std::mem::replace(&mut self.ring[at], slot);
            let old_hash = self.hasher.hash_one(&old.key);
            if let Ok(entry) = self.index.find_entry(old_hash, |&s| s as usize == at) {
                entry.remove();
            }
            self.release(old.instance_id);
            at
        };
        let (ring, hasher) = (&self.ring, &self.hasher);
        self.index
            .insert_unique(hash, at as u32, |&s| hasher.hash_one(&ring[s as usize].key));
    }

    /// The shared copy of `instance_id`, made on its first execution.
    fn intern(&mut self, instance_id: String) -> std::sync::Arc<str> {
        if let Some(shared) = self.instances.get(instance_id.as_str()) {
            return shared.clone();
        }
        let shared: std::sync::Arc<str> = instance_id.into();
        self.instances.insert(shared.clone());
        shared
    }

    /// Drops a slot's instance id, and the shared copy with its last slot.
    fn release(&mut self, instance_id: std::sync::Arc<str>) {
        // Held by the set and by `instance_id` alone: no other slot has it.
        if std::sync::Arc::strong_count(&instance_id) == 2 {
            self.instances.remove(&instance_id);
        }
    }

    /// The reply to an answer for a finished execution, or `None` if it is not remembered.
    pub fn reply(
        &self,
        execution_id: &str,
        instance_id: &str,
    ) -> Option<Result<(), super::CoordError>> {
        use super::CoordError;
        let key = IdKey::of(execution_id);
        let at = self.index.find(self.hasher.hash_one(&key), |&s| {
            self.ring[s as usize].key == key
        })?;
        let finished = &self.ring[*at as usize];
        Some(if &*finished.instance_id != instance_id {
            Err(CoordError::PermissionDenied(format!(
                "execution {execution_id} belongs to instance {}, not {instance_id}",
                finished.instance_id
            )))
        } else if let Some(reason) = &finished.revoked {
            Err(CoordError::FailedPrecondition(format!(
                "execution {execution_id} was taken back ({reason}); its answers are refused"
            )))
        } else {
            Ok(())
        })
    }
}

#[cfg(test)]
mod finished_tests {
    use super::*;
    use crate::coordination::CoordError;

    #[test]
    fn replies_and_forgets_the_oldest() {
        let mut f = FinishedExecutions::new(2);
        f.insert(
            "a",
            Finished {
                instance_id: "i".into(),
                revoked: None,
            },
        );
        f.insert(
            "b",
            Finished {
                instance_id: "i".into(),
                revoked: Some("timeout".into()),
            },
        );
        assert!(matches!(f.reply("a", "i"), Some(Ok(()))));
        assert!(matches!(
            f.reply("a", "j"),
            Some(Err(CoordError::PermissionDenied(_)))
        ));
        assert!(matches!(
            f.reply("b", "i"),
            Some(Err(CoordError::FailedPrecondition(_)))
        ));
        f.insert(
            "c",
            Finished {
                instance_id: "i".into(),
                revoked: None,
            },
        );
        assert!(f.reply("a", "i").is_none(), "the oldest is forgotten");
        assert!(f.reply("c", "i").is_some());
    }

    #[test]
    fn own_ids_are_kept_as_bits_and_answer_only_to_their_exact_text() {
        let id = execution_id(0x5eed, 1);
        assert!(matches!(IdKey::of(&id), IdKey::Bits(_)));
        let mut f = FinishedExecutions::new(4);
        let finished = |revoked: Option<&str>| Finished {
            instance_id: "10.0.0.1@-@1".into(),
            revoked: revoked.map(String::from),
        };
        f.insert(&id, finished(None));
        assert!(matches!(f.reply(&id, "10.0.0.1@-@1"), Some(Ok(()))));
        assert!(matches!(
            f.reply(&id, "10.0.0.2@-@1"),
            Some(Err(CoordError::PermissionDenied(m))) if m.contains("10.0.0.1@-@1")
        ));
        // The same bits spelled otherwise are another id, which no execution had.
        assert!(f.reply(&id.to_uppercase(), "10.0.0.1@-@1").is_none());
        assert!(f.reply(&format!("+{}", &id[1..]), "10.0.0.1@-@1").is_none());
        // Text that is not 32 lowercase hex digits is kept as text.
        let odd = "x".repeat(32);
        assert!(matches!(IdKey::of(&odd), IdKey::Text(_)));
        f.insert(&odd, finished(Some("lease expired")));
        assert!(matches!(
            f.reply(&odd, "10.0.0.1@-@1"),
            Some(Err(CoordError::FailedPrecondition(m))) if m.contains("lease expired")
        ));
        // Inserting an id again keeps one entry.
        f.insert(&id, finished(None));
        assert_eq!((f.index.len(), f.ring.len()), (2, 2));
    }

    #[test]
    fn a_full_ring_forgets_in_order_and_keeps_each_instance_id_once_while_it_has_executions() {
        let done = |instance: &str| Finished {
            instance_id: instance.into(),
            revoked: None,
        };
        let mut f = FinishedExecutions::new(3);
        for (id, instance) in [("a", "i"), ("b", "i"), ("c", "j"), ("d", "j"), ("e", "j")] {
            f.insert(id, done(instance));
        }
        assert!(f.reply("a", "i").is_none() && f.reply("b", "i").is_none());
        for id in ["c", "d", "e"] {
            assert!(matches!(f.reply(id, "j"), Some(Ok(()))), "{id}");
        }
        // "i" has no execution left; "j" is held once, by the set and its three slots.
        assert_eq!(f.instances.len(), 1);
        assert_eq!(
            std::sync::Arc::strong_count(f.instances.get("j").unwrap()),
            4
        );
        // An id remembered already gets its new outcome in its old place in the order.
        f.insert(
            "d",
            Finished {
                instance_id: "k".into(),
                revoked: Some("lease expired".into()),
            },
        );
        assert!(matches!(
            f.reply("d", "k"),
            Some(Err(CoordError::FailedPrecondition(_)))
        ));
        assert_eq!(f.instances.len(), 2);
        f.insert("f", done("j"));
        assert!(f.reply("c", "j").is_none(), "c was the oldest");
        assert!(f.reply("d", "k").is_some());
        f.insert("g", done("j"));
        assert!(f.reply("d", "k").is_none(), "then d");
        assert_eq!(f.instances.len(), 1, "k left with its only execution");
        // Round after round, the index follows the ring.
        for n in 0..100 {
            f.insert(&n.to_string(), done("j"));
        }
        assert_eq!((f.index.len(), f.ring.len()), (3, 3));
        assert!(f.reply("96", "j").is_none());
        for n in 97..100 {
            assert!(matches!(f.reply(&n.to_string(), "j"), Some(Ok(()))));
        }
    }

    #[test]
    fn a_memory_of_no_executions_remembers_none() {
        let mut f = FinishedExecutions::new(0);
        f.insert(
            "a",
            Finished {
                instance_id: "i".into(),
                revoked: None,
            },
        );
        assert!(f.reply("a", "i").is_none());
        assert!(f.instances.is_empty());
    }
}
