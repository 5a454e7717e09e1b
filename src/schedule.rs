//! Cron schedules in Quartz syntax (what ElasticJob's `config.cron` holds) and the one timer
//! thread that fires every job's schedule.
//!
//! [`CronSchedule`] parses Quartz expressions (seconds first, 6 or 7 fields, `?`, `L`, `W`,
//! `#`, Quartz weekday numbering 1 = SUN … 7 = SAT) with croner and evaluates them in the job's
//! time zone. [`Timer`] is a handle to a single thread that keeps a heap of deadlines for all
//! jobs and sends a [`Fire`] at each instant, within the operating system's timer slack of it
//! (a task would wake at the runtime's next millisecond tick): no task or thread per job (ElasticJob runs a
//! Quartz scheduler and a thread per job, issue #510).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, FixedOffset, Local, TimeZone, Utc};
use croner::parser::{CronParser, Seconds};
use croner::Cron;
use tokio_util::task::TaskTracker;

const FIELDS: [&str; 7] = [
    "second",
    "minute",
    "hour",
    "day-of-month",
    "month",
    "day-of-week",
    "year",
];

/// A cron expression or time zone that cannot be used; the message names the bad part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("cron expression {cron:?} has {count} fields; Quartz expects 6 or 7: second minute hour day-of-month month day-of-week [year], e.g. \"0/5 * * * * ?\"")]
    FieldCount { cron: String, count: usize },
    #[error("cron expression {cron:?}: {reason}")]
    DayFields { cron: String, reason: &'static str },
    #[error("cron expression {cron:?}: invalid {field} field {value:?}: {reason}")]
    Field {
        cron: String,
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("cron expression {cron:?} is invalid: {reason}")]
    Invalid { cron: String, reason: String },
    #[error("time zone {zone:?} is not valid: use GMT, GMT+08:00, GMT-5, UTC or an IANA name such as Asia/Shanghai (empty means the host's local time)")]
    TimeZone { zone: String },
}

/// The zone a schedule is evaluated in.
#[derive(Debug, Clone)]
enum Zone {
    Local,
    Fixed(FixedOffset),
    /// An IANA zone from the database compiled into the binary (jiff's bundled copy): the
    /// same rules on every host, whatever its own zoneinfo holds.
    Named(jiff::tz::TimeZone),
}

/// Parses a time zone as ElasticJob users write it: `""` (local), `GMT`, `UTC`,
/// `GMT±H`, `GMT±HH`, `GMT±H:MM`, `GMT±HH:MM`, `GMT±HHMM` (Java's custom ids), or an IANA name.
fn parse_zone(zone: &str) -> Result<Zone, CronError> {
    let bad = || CronError::TimeZone {
        zone: zone.to_owned(),
    };
    match zone {
        "" => return Ok(Zone::Local),
        "GMT" | "UTC" | "Z" => return Ok(Zone::Fixed(FixedOffset::east_opt(0).ok_or_else(bad)?)),
        _ => {}
    }
    if let Some(rest) = zone.strip_prefix("GMT") {
        let (sign, digits) = match rest.as_bytes().first() {
            Some(b'+') => (1, &rest[1..]),
            Some(b'-') => (-1, &rest[1..]),
            _ => return Err(bad()),
        };
        let (h, m) = match digits.split_once(':') {
            Some((h, m)) if m.len() == 2 => (h, m),
            Some(_) => return Err(bad()),
            None if digits.len() == 4 => (&digits[..2], &digits[2..]),
            None => (digits, "0"),
        };
        if h.is_empty() || h.len() > 2 || !h.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let h: i32 = h.parse().map_err(|_| bad())?;
        let m: i32 = m.parse().map_err(|_| bad())?;
        if h > 23 || m > 59 {
            return Err(bad());
        }
        return FixedOffset::east_opt(sign * (h * 3600 + m * 60))
            .map(Zone::Fixed)
            .ok_or_else(bad);
    }
    // The database finds names whatever their case; Java's (and so ElasticJob's) does not, and
    // neither does this: `asia/shanghai` is refused, not read as Asia/Shanghai.
    match jiff::tz::TimeZone::get(zone) {
        Ok(named) if named.iana_name() == Some(zone) => Ok(Zone::Named(named)),
        _ => Err(bad()),
    }
}

/// `t` as an instant of jiff's, seen in `zone`.
fn zoned(t: DateTime<Utc>, zone: &jiff::tz::TimeZone) -> Option<jiff::Zoned> {
    jiff::Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32)
        .ok()
        .map(|at| at.to_zoned(zone.clone()))
}

/// Checks a time zone without a cron expression.
///
/// # Errors
/// [`CronError::TimeZone`] for a zone that is neither empty, a `GMT`/`UTC` form, nor IANA.
pub fn validate_time_zone(zone: &str) -> Result<(), CronError> {
    parse_zone(zone).map(|_| ())
}

/// A parsed Quartz cron expression in its time zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expression: String,
    time_zone: String,
    /// Shared with every schedule of the same pattern (see [`shared_pattern`]).
    cron: Arc<Cron>,
    zone: Zone,
}

impl PartialEq for CronSchedule {
    fn eq(&self, o: &Self) -> bool {
        self.expression == o.expression && self.time_zone == o.time_zone
    }
}

/// The parsed `pattern`, shared by every schedule that has it: a parsed pattern holds a few
/// KiB of bit fields (the year's alone is 10,000 bytes), and a sidecar may run thousands of
/// jobs on a handful of patterns. Entries no schedule holds any more are dropped as new
/// patterns come.
fn shared_pattern(pattern: &str) -> Result<Arc<Cron>, croner::errors::CronError> {
    static PATTERNS: std::sync::OnceLock<Mutex<HashMap<String, std::sync::Weak<Cron>>>> =
        std::sync::OnceLock::new();
    let mut patterns = PATTERNS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(cron) = patterns.get(pattern).and_then(std::sync::Weak::upgrade) {
        return Ok(cron);
    }
    let cron = Arc::new(parser().parse(pattern)?);
    patterns.retain(|_, held| held.strong_count() > 0);
    patterns.insert(pattern.to_owned(), Arc::downgrade(&cron));
    Ok(cron)
}

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Required)
        .alternative_weekdays(true)
        .sloppy_ranges(true)
        .dom_and_dow(true)
        .build()
}

impl CronSchedule {
    /// Parses a Quartz expression, to be evaluated in `time_zone` (see [`validate_time_zone`]).
    ///
    /// Quartz's rules apply: 6 or 7 fields, and exactly one of day-of-month and day-of-week is
    /// `?` (Quartz, and so every Java peer, rejects anything else). `L-n` is not supported.
    ///
    /// # Errors
    /// [`CronError`] naming the field or the zone that is wrong.
    pub fn parse(cron: &str, time_zone: &str) -> Result<CronSchedule, CronError> {
        let zone = parse_zone(time_zone)?;
        let fields: Vec<&str> = cron.split_whitespace().collect();
        if !(6..=7).contains(&fields.len()) {
            return Err(CronError::FieldCount {
                cron: cron.to_owned(),
                count: fields.len(),
            });
        }
        let field_err = |i: usize, reason: String| CronError::Field {
            cron: cron.to_owned(),
            field: FIELDS[i],
            value: fields[i].to_owned(),
            reason,
        };
        for (i, f) in fields.iter().enumerate() {
            if f.contains('?') && i != 3 && i != 5 {
                return Err(field_err(
                    i,
                    "'?' is only allowed in day-of-month and day-of-week".into(),
                ));
            }
            if f.contains('?') && *f != "?" {
                return Err(field_err(i, "'?' must stand alone".into()));
            }
            if i == 3 && f.to_ascii_uppercase().starts_with("L-") {
                return Err(field_err(
                    i,
                    "'L-n' (n days before the last day) is not supported".into(),
                ));
            }
        }
        match (fields[3] == "?", fields[5] == "?") {
            (true, false) | (false, true) => {}
            (true, true) => {
                return Err(CronError::DayFields {
                    cron: cron.to_owned(),
                    reason: "only one of day-of-month and day-of-week may be '?'",
                })
            }
            (false, false) => {
                return Err(CronError::DayFields {
                    cron: cron.to_owned(),
                    reason: "one of day-of-month and day-of-week must be '?' (Quartz rule), e.g. \"0 0 12 * * ?\" or \"0 0 12 ? * MON\"",
                })
            }
        }
        // Quartz reads a lone `L` in day-of-week as the last day of the week, Saturday.
        let mut normalized: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
        if normalized[5].eq_ignore_ascii_case("L") {
            normalized[5] = "7".into();
        }
        let pattern = normalized.join(" ");
        let cron_parsed = shared_pattern(&pattern).map_err(|e| {
            // Name the first field that fails on its own.
            let base = ["0", "0", "0", "*", "*", "*", "*"];
            for i in 0..normalized.len() {
                let mut probe: Vec<&str> = base[..normalized.len()].to_vec();
                probe[i] = &normalized[i];
                if let Err(fe) = parser().parse(&probe.join(" ")) {
                    return field_err(i, fe.to_string());
                }
            }
            CronError::Invalid {
                cron: cron.to_owned(),
                reason: e.to_string(),
            }
        })?;
        Ok(CronSchedule {
            expression: cron.to_owned(),
            time_zone: time_zone.to_owned(),
            cron: cron_parsed,
            zone,
        })
    }

    /// The expression as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The time zone as given.
    pub fn time_zone(&self) -> &str {
        &self.time_zone
    }

    /// The first fire instant strictly after `t`, or `None` if there is none (e.g. a year in
    /// the past). Across a DST gap a wall-clock time that does not exist fires at the first
    /// instant after the gap; in a repeated hour a fixed time fires once.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        fn next<Z: TimeZone>(c: &Cron, t: DateTime<Z>) -> Option<DateTime<Utc>> {
            c.find_next_occurrence(&t, false)
                .ok()
                .map(|n| n.with_timezone(&Utc))
        }
        match &self.zone {
            Zone::Local => next(&self.cron, t.with_timezone(&Local)),
            Zone::Fixed(z) => next(&self.cron, t.with_timezone(z)),
            Zone::Named(z) => {
                let n = self.cron.find_next_occurrence(&zoned(t, z)?, false).ok()?;
                let at = n.timestamp();
                DateTime::from_timestamp(at.as_second(), at.subsec_nanosecond() as u32)
            }
        }
    }
}

impl CronSchedule {
    /// The next `n` fire instants strictly after `t` (fewer when the schedule ends).
    pub fn next_times(&self, t: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(n);
        let mut at = t;
        while out.len() < n {
            match self.next_after(at) {
                Some(next) => {
                    out.push(next);
                    at = next;
                }
                None => break,
            }
        }
        out
    }

    /// An instant as the wall clock of this schedule's time zone shows it.
    pub fn in_zone(&self, t: DateTime<Utc>) -> DateTime<FixedOffset> {
        match &self.zone {
            Zone::Local => t.with_timezone(&Local).fixed_offset(),
            Zone::Fixed(z) => t.with_timezone(z).fixed_offset(),
            // Every zone's offset is within a day of UTC, and jiff's instants span years
            // -9999 to 9999: UTC is shown only outside both.
            Zone::Named(z) => zoned(t, z)
                .and_then(|at| FixedOffset::east_opt(at.offset().seconds()))
                .map_or_else(|| t.fixed_offset(), |offset| t.with_timezone(&offset)),
        }
    }
}

/// One fire of one schedule: `fire_time` is the scheduled instant (after a stall, the missed
/// instant; compare it with the clock to detect a misfire).
///
/// With a claim lead ([`Timer::spawn_with`]), each instant is announced twice: first `ahead`,
/// the lead before it (`fire_time` is still the instant to come), then at the instant itself.
#[derive(Debug, PartialEq, Eq)]
pub struct Fire {
    pub key: String,
    pub fire_time: DateTime<Utc>,
    /// The notice that comes the claim lead before the instant, not the fire itself.
    pub ahead: bool,
    /// A fire at its instant counts in the timer's [`Burst`] until this is dropped: its job
    /// holds it until it has taken the fire up (its trigger queued, or its claim sent).
    pub taken: Option<Taken>,
}

/// The fires of the instants just passed that their jobs have not taken up yet.
///
/// When many jobs fire at one instant, their triggers are the time-critical work of the moment,
/// and the workers' answers to the first triggers (each a write of its own, its watch events and
/// its reply) would otherwise share the two cores with the rest of the fires. An answer waits for
/// the burst to settle ([`Burst::settled`], at most [`ANSWER_WAIT_MAX`]) before its job sees it:
/// no answer is lost or reordered within its execution, it only comes after the instant's fires.
#[derive(Debug, Default)]
pub struct Burst {
    pending: std::sync::atomic::AtomicUsize,
    settled: tokio::sync::Notify,
}

/// The longest an answer waits for a burst of fires to settle: a job that cannot take its fire
/// up (a stall, a fire dropped with its retired job) holds no answer back for longer.
pub const ANSWER_WAIT_MAX: Duration = Duration::from_millis(100);

impl Burst {
    /// Counts one fire sent; it is taken up when the returned [`Taken`] is dropped.
    fn count(self: &Arc<Self>) -> Taken {
        self.pending
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Taken(self.clone())
    }

    /// The fires sent and not yet taken up.
    pub fn pending(&self) -> usize {
        self.pending.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Returns once every fire sent so far has been taken up, or after `max`.
    pub async fn settled(&self, max: Duration) {
        // Every answer comes through here, nearly always with nothing pending: no waiter is
        // registered then. Otherwise the count is read again once registered, so that a last
        // place given back in between is not missed.
        if self.pending() == 0 {
            return;
        }
        let notified = self.settled.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.pending() == 0 {
            return;
        }
        let _ = tokio::time::timeout(max, notified).await;
    }
}

/// One fire's place in its timer's [`Burst`], given back when dropped.
#[derive(Debug)]
pub struct Taken(Arc<Burst>);

impl Drop for Taken {
    fn drop(&mut self) {
        if self
            .0
            .pending
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            self.0.settled.notify_waiters();
        }
    }
}

/// Any two places compare equal: a fire is told from another by its key, instant and kind.
impl PartialEq for Taken {
    fn eq(&self, _: &Taken) -> bool {
        true
    }
}

impl Eq for Taken {}

/// Why a fire was not queued; the fire comes back with it.
#[derive(Debug)]
pub enum FireRefused {
    /// Too many fires of the schedule wait already: this one is dropped.
    Full(Box<Fire>),
    /// Nothing takes fires any more: the schedule is cancelled.
    Closed(Box<Fire>),
}

/// Where a schedule's fires go: its job's queue. [`FireSink::try_fire`] never waits (the timer
/// sends under its lock). Boxed fires: a queue holds pointers, and is empty nearly always.
pub trait FireSink: Send + Sync {
    /// Queues `fire`, or gives it back with the reason.
    fn try_fire(&self, fire: Box<Fire>) -> Result<(), FireRefused>;
    /// Whether nothing takes fires any more.
    fn is_closed(&self) -> bool;
}

/// A schedule's [`FireSink`], shared by the timer and its owner.
pub type FireSender = Arc<dyn FireSink>;

struct Entry {
    generation: u64,
    schedule: CronSchedule,
    tx: FireSender,
}

/// One deadline of the heap: when, the schedule's generation and key, and whether it is the
/// notice `ahead` of an instant (the instant is then the deadline plus the lead).
type Deadline = (DateTime<Utc>, u64, String, bool);

/// The timer's state: the live schedules and a min-heap of their next deadlines. Heap entries
/// of cancelled or replaced schedules are recognised by their generation and dropped.
#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    heap: BinaryHeap<Reverse<Deadline>>,
    next_generation: u64,
    closed: bool,
    /// The claim lead: how long before each instant its notice goes out (zero: none).
    ahead: Duration,
}

impl State {
    fn schedule(
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

    fn cancel(&mut self, key: &str) {
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
    fn take_due(&mut self, now: DateTime<Utc>) -> Vec<(FireSender, Box<Fire>)> {
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
    fn next_deadline(&mut self) -> Option<DateTime<Utc>> {
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

struct Shared {
    state: Mutex<State>,
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
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the state inconsistent in a way that
        // matters (at worst a deadline is lost), so a poisoned lock is used as is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Closes the timer thread when the last [`Timer`] handle is dropped.
struct CloseOnDrop(Arc<Shared>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.lock().closed = true;
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
        Timer::spawn_with(tracker, Duration::ZERO, None)
    }

    /// [`Timer::spawn_on`], with a claim lead and, optionally, a [`WarmUp`]. With a non-zero
    /// `ahead`, each instant of a schedule is announced `ahead` before it by a [`Fire`] whose
    /// `ahead` is set (a job claims the run's items then, so that its trigger goes out at the
    /// instant itself), and then fired at the instant as usual. The warm-up comes before each
    /// deadline, notices included: a claim's write is what it is for.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn spawn_with(tracker: &TaskTracker, ahead: Duration, warm_up: Option<WarmUp>) -> Timer {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                ahead,
                ..State::default()
            }),
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
        self.shared.lock().closed = true;
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
        if state.closed {
            return;
        }
        // Sending under the lock (`try_send` never waits) means that once `cancel` returns,
        // nothing more is sent for that key.
        let mut gone = Vec::new();
        for (tx, mut fire) in state.take_due(Utc::now()) {
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
            if state.entries.get(&key).is_some_and(|e| e.tx.is_closed()) {
                tracing::debug!(%key, "fire receiver gone; cancelling its schedule");
                state.cancel(&key);
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
#[path = "schedule_tests.rs"]
#[allow(
    clippy::disallowed_methods,
    reason = "tests run against real time and real servers"
)]
mod tests;
