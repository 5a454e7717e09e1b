//! The one timer thread of every job's schedule, its handle [`Timer`], and its state
//! ([`Deadlines`]): the live schedules and the instants they fire next, kept without a clock (the
//! thread says what time it is), so that table tests step them by hand.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::task::TaskTracker;

use super::burst::Burst;
use super::cron::CronSchedule;
use super::fire::{Fire, FireRefused, FireSender};
use super::lead::ClaimLead;

struct Shared {
    state: Mutex<Deadlines>,
    /// The claim lead, told when each instant's notices went out.
    lead: ClaimLead,
    /// Wakes the timer's thread when a schedule changes or the timer closes.
    wake: Condvar,
    warm_up: Option<WarmUp>,
    burst: Arc<Burst>,
}

/// A hook the timer calls `lead` before every deadline (see [`Timer::spawn_with`]): once per
/// deadline, however many schedules share it; at once for a deadline already less than `lead`
/// away when it becomes the next. The hook runs on the timer's thread with its lock held: it must
/// return at once (wake a task, never wait). The sidecar sends ZooKeeper its heartbeat then, so
/// that the first write of a fire (or of a claim ahead of it) meets a server already awake.
pub struct WarmUp {
    pub lead: Duration,
    pub hook: Box<dyn Fn() + Send + Sync>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Deadlines> {
        // A panic while holding this lock cannot leave the state inconsistent in a way that
        // matters (at worst a deadline is lost), so a poisoned lock is used as is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Closes the timer thread when the last [`Timer`] handle is dropped.
struct CloseOnDrop(Arc<Shared>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.lock().close();
        self.0.wake.notify_all();
    }
}

/// A handle to the one thread that fires all schedules. Cheap to clone; the thread ends when the
/// last handle is dropped.
#[derive(Clone)]
pub struct Timer {
    shared: Arc<Shared>,
    _close: Arc<CloseOnDrop>,
}

/// The longest single sleep, so a step of the wall clock is noticed within this time.
const MAX_SLEEP: Duration = Duration::from_secs(1);

impl Timer {
    /// Starts the timer's thread (on the current tokio runtime's blocking pool).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn spawn() -> Timer {
        Timer::spawn_on(&TaskTracker::new())
    }

    /// [`Timer::spawn`], the thread tracked by `tracker`.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn spawn_on(tracker: &TaskTracker) -> Timer {
        Timer::spawn_with(tracker, ClaimLead::new(Duration::ZERO), None)
    }

    /// [`Timer::spawn_on`], with a claim lead and, optionally, a [`WarmUp`]. With a lead whose
    /// cap is not zero, each instant of a schedule is announced its lead before it (sized by
    /// [`ClaimLead`] from the fires due then) by a [`Fire`] whose `ahead` is set (a job claims
    /// the run's items then, so that its trigger goes out at the instant itself), and then
    /// fired at the instant as usual. The warm-up comes before each deadline, notices
    /// included: a claim's write is what it is for.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn spawn_with(tracker: &TaskTracker, lead: ClaimLead, warm_up: Option<WarmUp>) -> Timer {
        let shared = Arc::new(Shared {
            state: Mutex::new(Deadlines::new(lead.clone())),
            lead,
            wake: Condvar::new(),
            warm_up,
            burst: Arc::default(),
        });
        let thread = shared.clone();
        tracker.spawn_blocking(move || run(&thread));
        Timer {
            _close: Arc::new(CloseOnDrop(shared.clone())),
            shared,
        }
    }

    /// Fires `schedule` for `key` on `tx` from now on, replacing any schedule `key` had.
    #[allow(
        clippy::disallowed_methods,
        reason = "the timer is the I/O edge that turns the wall clock into fires"
    )]
    pub fn schedule(&self, key: String, schedule: CronSchedule, tx: FireSender) {
        self.shared.lock().schedule(key, schedule, tx, Utc::now());
        self.shared.wake.notify_all();
    }

    /// The claim lead its notices go out with.
    pub fn lead(&self) -> &ClaimLead {
        &self.shared.lead
    }

    /// The fires sent at their instants and not yet taken up by their jobs.
    pub fn burst(&self) -> &Burst {
        &self.shared.burst
    }

    /// Stops `key`'s schedule; it never fires again (a no-op for an unknown key).
    pub fn cancel(&self, key: &str) {
        self.shared.lock().cancel(key);
        self.shared.wake.notify_all();
    }

    /// Stops every schedule for good and ends the timer's thread (which `spawn_on`'s tracker
    /// then sees end), whatever handles are still held.
    pub fn close(&self) {
        self.shared.lock().close();
        self.shared.wake.notify_all();
    }
}

/// The timer's thread: sends every due fire, then waits on the condition variable until the
/// next deadline. A thread rather than a task, so that a fire goes out within the operating
/// system's timer slack (tens of microseconds) of its instant, not at the next millisecond
/// tick of the runtime's timer wheel.
///
/// With a warm-up, the thread also wakes its `lead` before each deadline and calls the hook once
/// for that deadline, then sleeps again until the deadline itself.
#[allow(
    clippy::disallowed_methods,
    reason = "the timer is the I/O edge that turns the wall clock into fires"
)]
fn run(shared: &Shared) {
    let mut state = shared.lock();
    // The deadline the warm-up hook was last called for.
    let mut warmed: Option<DateTime<Utc>> = None;
    loop {
        if state.is_closed() {
            return;
        }
        // Sending under the lock (`try_send` never waits) means that once `cancel` returns,
        // nothing more is sent for that key.
        let mut gone = Vec::new();
        let due = state.take_due(Utc::now());
        let noticed_at = std::time::Instant::now();
        for (instant, fires) in due.noticed {
            shared.lead.noticed(instant, fires, noticed_at);
        }
        for (tx, mut fire) in due.sends {
            if !fire.ahead {
                fire.taken = Some(shared.burst.count());
            }
            match tx.try_fire(fire) {
                Ok(()) => {}
                Err(FireRefused::Full(fire)) => {
                    tracing::warn!(key = %fire.key, fire_time = %fire.fire_time, "fire dropped: too many of the job's fires wait for it already (its driver is behind)");
                }
                Err(FireRefused::Closed(fire)) => gone.push(fire.key),
            }
        }
        for key in gone {
            if state.cancel_if_gone(&key) {
                tracing::debug!(%key, "fire receiver gone; cancelling its schedule");
            }
        }
        state = match state.next_deadline() {
            None => shared.wake.wait(state).unwrap_or_else(|p| p.into_inner()),
            Some(at) => {
                // Wall-clock deadline, recomputed at every wake (and at least every second,
                // so that a step of the wall clock is noticed).
                let mut wait = (at - Utc::now())
                    .to_std()
                    .unwrap_or(Duration::ZERO)
                    .min(MAX_SLEEP);
                if wait.is_zero() {
                    continue;
                }
                if let Some(w) = shared.warm_up.as_ref().filter(|_| warmed != Some(at)) {
                    match wait.checked_sub(w.lead) {
                        // Not yet: wake at the warm-up instant instead.
                        Some(before) if !before.is_zero() => wait = before,
                        // Within the lead: warm up now, once.
                        _ => {
                            warmed = Some(at);
                            (w.hook)();
                            continue;
                        }
                    }
                }
                shared
                    .wake
                    .wait_timeout(state, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests run against real time and real servers"
)]
mod tests;

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
struct DueNow {
    pub sends: Vec<(FireSender, Box<Fire>)>,
    pub noticed: Vec<(DateTime<Utc>, usize)>,
}

/// The timer's state: the live schedules, the instants they fire next (each with the schedules
/// that fire then), and whether the timer is closed. Each instant's notices go out its claim
/// lead before it, the lead sized by [`ClaimLead`] from the number of schedules firing then.
struct Deadlines {
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
    fn new(lead: ClaimLead) -> Deadlines {
        Deadlines {
            entries: HashMap::new(),
            instants: BTreeMap::new(),
            late: Vec::new(),
            closed: false,
            lead,
        }
    }

    /// Stops every schedule for good.
    fn close(&mut self) {
        self.closed = true;
    }

    fn is_closed(&self) -> bool {
        self.closed
    }

    /// Cancels `key`'s schedule when nothing takes its fires any more; whether it did.
    fn cancel_if_gone(&mut self, key: &str) -> bool {
        let gone = self.entries.get(key).is_some_and(|e| e.tx.is_closed());
        if gone {
            self.cancel(key);
        }
        gone
    }

    fn schedule(
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

    fn cancel(&mut self, key: &str) {
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
    fn take_due(&mut self, now: DateTime<Utc>) -> DueNow {
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
    fn next_deadline(&self) -> Option<DateTime<Utc>> {
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
