//! The timer's schedules and their deadlines, without a clock: the thread ([`super::timer`])
//! says what time it is.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::cron::CronSchedule;
use super::fire::{Fire, FireSender};

/// A live schedule, where its fires go, and its generation (a replaced schedule gets a new one).
struct Entry {
    generation: u64,
    schedule: CronSchedule,
    tx: FireSender,
}

/// One deadline of the heap: when, the schedule's generation and key, and whether it is the
/// notice `ahead` of an instant (the instant is then the deadline plus the lead).
type Deadline = (DateTime<Utc>, u64, String, bool);

/// The timer's state: the live schedules and a min-heap of their next deadlines, and whether
/// the timer is closed. Heap entries of cancelled or replaced schedules are recognised by their
/// generation and dropped.
#[derive(Default)]
pub(super) struct Deadlines {
    entries: HashMap<String, Entry>,
    heap: BinaryHeap<Reverse<Deadline>>,
    next_generation: u64,
    closed: bool,
    /// The claim lead: how long before each instant its notice goes out (zero: none).
    ahead: Duration,
}

impl Deadlines {
    /// No schedule yet; each instant's notice goes out `ahead` before it (zero: none).
    pub(super) fn new(ahead: Duration) -> Deadlines {
        Deadlines {
            ahead,
            ..Deadlines::default()
        }
    }

    /// Stops every schedule for good.
    pub(super) fn close(&mut self) {
        self.closed = true;
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Cancels `key`'s schedule when nothing takes its fires any more; whether it did.
    pub(super) fn cancel_if_gone(&mut self, key: &str) -> bool {
        let gone = self.entries.get(key).is_some_and(|e| e.tx.is_closed());
        if gone {
            self.cancel(key);
        }
        gone
    }

    pub(super) fn schedule(
        &mut self,
        key: String,
        schedule: CronSchedule,
        tx: FireSender,
        now: DateTime<Utc>,
    ) {
        self.next_generation += 1;
        let generation = self.next_generation;
        if let Some(at) = schedule.next_after(now) {
            self.push(at, generation, &key);
        }
        self.entries.insert(
            key,
            Entry {
                generation,
                schedule,
                tx,
            },
        );
    }

    pub(super) fn cancel(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Puts instant `at` of schedule `key` on the heap, and its notice the claim lead before it.
    fn push(&mut self, at: DateTime<Utc>, generation: u64, key: &str) {
        if let Some(lead) = chrono::Duration::from_std(self.ahead)
            .ok()
            .filter(|lead| !lead.is_zero())
        {
            self.heap
                .push(Reverse((at - lead, generation, key.to_owned(), true)));
        }
        self.heap
            .push(Reverse((at, generation, key.to_owned(), false)));
    }

    /// Pops every deadline due at `now` and returns what to send. Each due schedule fires
    /// once, for its scheduled instant, and is rescheduled after `now`: instants missed while
    /// the process was stalled are skipped (Quartz's DO_NOTHING). A notice ahead of an instant
    /// that has already come is dropped: the fire itself goes out at once.
    pub(super) fn take_due(&mut self, now: DateTime<Utc>) -> Vec<(FireSender, Box<Fire>)> {
        let mut out = Vec::new();
        let lead = chrono::Duration::from_std(self.ahead).unwrap_or_default();
        while let Some(Reverse((at, _, _, _))) = self.heap.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((at, generation, key, ahead))) = self.heap.pop() else {
                break;
            };
            let Some(entry) = self
                .entries
                .get(&key)
                .filter(|e| e.generation == generation)
            else {
                continue; // cancelled or replaced
            };
            if ahead {
                let fire_time = at + lead;
                if fire_time > now {
                    out.push((
                        entry.tx.clone(),
                        Box::new(Fire {
                            key,
                            fire_time,
                            ahead: true,
                            taken: None,
                        }),
                    ));
                }
                continue;
            }
            out.push((
                entry.tx.clone(),
                Box::new(Fire {
                    key: key.clone(),
                    fire_time: at,
                    ahead: false,
                    taken: None,
                }),
            ));
            if let Some(next) = entry.schedule.next_after(now.max(at)) {
                self.push(next, generation, &key);
            }
        }
        out
    }

    /// The earliest deadline of a live schedule (stale heap entries are dropped on the way).
    pub(super) fn next_deadline(&mut self) -> Option<DateTime<Utc>> {
        while let Some(Reverse((at, generation, key, _))) = self.heap.peek() {
            if self
                .entries
                .get(key)
                .is_some_and(|e| e.generation == *generation)
            {
                return Some(*at);
            }
            self.heap.pop();
        }
        None
    }
}
