//! The timer's schedules and their deadlines, without a clock: the thread ([`super::timer`])
//! says what time it is.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use super::cron::CronSchedule;
use super::fire::{Fire, FireSender};
use super::lead::ClaimLead;

/// A live schedule, where its fires go, and the instant it fires next.
struct Entry {
    schedule: CronSchedule,
    tx: FireSender,
    next: Option<DateTime<Utc>>,
}

/// The schedules that fire at one instant, and whether their notices went out.
#[derive(Default)]
struct Due {
    keys: Vec<String>,
    noticed: bool,
}

/// What came due: the fires and notices to send, and the instants whose notices went out (with
/// how many fires each has), for the claim lead's measurements.
#[derive(Default)]
pub(super) struct DueNow {
    pub sends: Vec<(FireSender, Box<Fire>)>,
    pub noticed: Vec<(DateTime<Utc>, usize)>,
}

/// The timer's state: the live schedules, the instants they fire next (each with the schedules
/// that fire then), and whether the timer is closed. Each instant's notices go out its claim
/// lead before it, the lead sized by [`ClaimLead`] from the number of schedules firing then.
pub(super) struct Deadlines {
    entries: HashMap<String, Entry>,
    instants: BTreeMap<DateTime<Utc>, Due>,
    /// Schedules put at an instant whose notices went out already: theirs go out at once.
    late: Vec<String>,
    closed: bool,
    lead: ClaimLead,
}

impl Default for Deadlines {
    /// No schedule, no claim lead.
    fn default() -> Deadlines {
        Deadlines::new(ClaimLead::new(std::time::Duration::ZERO))
    }
}

impl Deadlines {
    /// No schedule yet; each instant's notice goes out as `lead` says (zero cap: none).
    pub(super) fn new(lead: ClaimLead) -> Deadlines {
        Deadlines {
            entries: HashMap::new(),
            instants: BTreeMap::new(),
            late: Vec::new(),
            closed: false,
            lead,
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
        self.cancel(&key);
        let next = schedule.next_after(now);
        self.entries.insert(
            key.clone(),
            Entry {
                schedule,
                tx,
                next: None,
            },
        );
        if let Some(at) = next {
            self.put(key, at);
        }
    }

    pub(super) fn cancel(&mut self, key: &str) {
        if let Some(at) = self.entries.remove(key).and_then(|e| e.next) {
            self.unlink(key, at);
        }
    }

    /// Schedule `key` fires next at `at`.
    fn put(&mut self, key: String, at: DateTime<Utc>) {
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.next = Some(at);
        }
        let due = self.instants.entry(at).or_default();
        if due.noticed {
            self.late.push(key.clone());
        }
        due.keys.push(key);
    }

    fn unlink(&mut self, key: &str, at: DateTime<Utc>) {
        if let Some(due) = self.instants.get_mut(&at) {
            due.keys.retain(|k| k != key);
            if due.keys.is_empty() {
                self.instants.remove(&at);
            }
        }
    }

    /// Takes every fire and notice due at `now`. Each due schedule fires once, for its
    /// scheduled instant, and is rescheduled after `now`: instants missed while the process was
    /// stalled are skipped (Quartz's DO_NOTHING). The notices of an instant to come go out once
    /// `now` is within its lead of it; an instant that has already come gets no notice: its
    /// fire goes out at once.
    pub(super) fn take_due(&mut self, now: DateTime<Utc>) -> DueNow {
        let mut taken = DueNow::default();
        while let Some(entry) = self.instants.first_entry() {
            if *entry.key() > now {
                break;
            }
            let (at, due) = entry.remove_entry();
            for key in due.keys {
                let Some(e) = self.entries.get_mut(&key) else {
                    continue;
                };
                e.next = None;
                taken.sends.push((e.tx.clone(), fire(&key, at, false)));
                if let Some(next) = e.schedule.next_after(now.max(at)) {
                    self.put(key, next);
                }
            }
        }
        let cap = self.lead.cap();
        if cap.is_zero() {
            self.late.clear();
            return taken;
        }
        for key in std::mem::take(&mut self.late) {
            if let Some(e) = self.entries.get(&key) {
                if let Some(at) = e.next.filter(|at| *at > now) {
                    taken.sends.push((e.tx.clone(), fire(&key, at, true)));
                }
            }
        }
        let horizon = chrono::Duration::from_std(cap).unwrap_or_default();
        for (at, due) in self.instants.iter_mut() {
            if *at - horizon > now {
                break; // no lead reaches this far
            }
            if due.noticed {
                continue;
            }
            let lead =
                chrono::Duration::from_std(self.lead.lead(due.keys.len())).unwrap_or_default();
            if now < *at - lead {
                continue;
            }
            due.noticed = true;
            taken.noticed.push((*at, due.keys.len()));
            for key in &due.keys {
                if let Some(e) = self.entries.get(key) {
                    taken.sends.push((e.tx.clone(), fire(key, *at, true)));
                }
            }
        }
        taken
    }

    /// The earliest deadline: the next instant, or an earlier notice of one to come.
    pub(super) fn next_deadline(&self) -> Option<DateTime<Utc>> {
        let (first, _) = self.instants.first_key_value()?;
        let mut next = *first;
        let cap = self.lead.cap();
        if cap.is_zero() {
            return Some(next);
        }
        let horizon = chrono::Duration::from_std(cap).unwrap_or_default();
        for (at, due) in &self.instants {
            if *at - horizon > next {
                break;
            }
            if due.noticed {
                continue;
            }
            let lead =
                chrono::Duration::from_std(self.lead.lead(due.keys.len())).unwrap_or_default();
            next = next.min(*at - lead);
        }
        Some(next)
    }
}

fn fire(key: &str, fire_time: DateTime<Utc>, ahead: bool) -> Box<Fire> {
    Box::new(Fire {
        key: key.to_owned(),
        fire_time,
        ahead,
        taken: None,
    })
}
