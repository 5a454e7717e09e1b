//! The invariant checker: pure functions over a [`History`], run every second during the soak
//! (safety, fencing) and once at the end (all of them). [`self_check`] feeds it synthetic
//! histories that break each invariant and asserts that it says so.
//!
//! - **Safety.** A run holds its item from its trigger's receipt until the earliest of its
//!   answer, its stop (lease lapse, Revoke, stream end), its process's death and the end of its
//!   lease cover (the lease it had at the start, renewed without a gap). No two runs of one item
//!   may hold it at the same instant: every pair of overlapping holds is a violation.
//! - **Fencing.** The store's decisions are replayed (every stale token must have been refused,
//!   no fresh one); a refused write is allowed only when the store received it after the
//!   writer's lease end or after the writer had been told `Revoke` for the item; any other
//!   refusal came from a run that believed it held a valid lease: a violation.
//! - **No lost fire.** For every cron instant f of every item: if it was disabled then, it is
//!   excused. Otherwise a completed run of the item must start at or after f (checked for fires
//!   at least 8 s before the end of the observation, and only while some live instance of the
//!   job existed). When the item's owner was unique and stable around f, its lease valid, and no
//!   fault window covered f: a CRON trigger with fire time f satisfies it; without one, if
//!   neither the owner nor the item was busy, the sidecar had every reason to run it at f: the
//!   fire is lost. If one of them was busy (ElasticJob coalesces such fires into one misfire),
//!   or the fire itself was taken by failover work (the owner's FAILOVER runs it decided, which
//!   go before the instance's own items), a run of the item must start within a period + 1.5 s
//!   of the busy run's end, unless a fault came in between.
//! - **Contract.** A worker that was not stopped, on a sidecar with no fault near, never
//!   receives a trigger without a valid lease (the sidecar renews the lease before a trigger).
//! - **Bounds.** A worker SIGKILLed mid-run on a healthy sidecar: its item must run again
//!   within 1 s when another member of the job sat idle through that second. A sidecar killed,
//!   frozen past its session or partitioned into session expiry: each of its running items must
//!   run again within session + the run's planned length + 1 s when another sidecar stayed
//!   healthy throughout with a worker of the job.
//! - **Resident holds** ([`crate::resident`]): no two holds of a resident item overlap; every
//!   item is held by a live worker again within twice the session timeout of the last fault.
//! - **Every execution ends** (liveness). Once its worker has let go of a run (answered or
//!   declined it once, stopped it, or went away), the item's `running` node carrying the run's
//!   token must leave ZooKeeper (the answer recorded, or the item released) within a bound
//!   derived from the settings ([`crate::ends`]). The nemesis probes the node
//!   (`cluster::World::probe_holds`); a sighting after the bound is a violation.

use crate::history::{source_name, FaultRec, History, Run, StreamRec};
use crate::schedule::{Kind, Scope};
use crate::spec::{self, JOBS, LEASE, SESSION};
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub const MS: u64 = 1_000;
pub const SEC: u64 = 1_000_000;

#[derive(Clone, Debug)]
pub struct Violation {
    /// Identifies the problem, so the continuous checks report it once.
    pub key: String,
    /// When it happened (for sorting).
    pub at: u64,
    pub class: &'static str,
    pub text: String,
}

/// Failover latencies seen: (microseconds, or `None` when it never came; whether the bound
/// applied; description).
pub type Samples = Vec<(Option<u64>, bool, String)>;

#[derive(Default, Debug)]
pub struct Figures {
    pub runs: usize,
    pub completed: usize,
    pub by_source: BTreeMap<&'static str, usize>,
    pub stopped: BTreeMap<String, usize>,
    pub declined_at_once: usize,
    pub writes: usize,
    pub writes_accepted: usize,
    pub stale_refused: usize,
    pub stale_refused_allowed: usize,
    pub fires: usize,
    pub fires_disabled: usize,
    /// Fires not held to the strict rules, by reason.
    pub fires_excused: BTreeMap<&'static str, usize>,
    pub fires_exact: usize,
    pub fires_coalesced: usize,
    pub worker_crash: Samples,
    pub member_crash: Samples,
    /// Runs let go of by their worker and seen to leave ZooKeeper.
    pub ends_seen: usize,
    /// Runs let go of and still seen held at the end (within their bound).
    pub ends_pending: usize,
    /// The longest time from an answer to its node's removal seen, where
    /// [`crate::ends::CALM`] applied.
    pub end_worst_calm: Option<(u64, String)>,
    /// The longest time from a worker letting go to its node's removal seen, any bound.
    pub end_worst: Option<(u64, String)>,
    /// Answer-aimed faults: injected, fired.
    pub aimed: usize,
    pub aimed_fired: usize,
    /// One line per fired answer-aimed fault: the answer's reply and when its node left.
    pub aimed_lines: Vec<String>,
    /// Minimal workers' answers and declines, by the reply to their one call.
    pub minimal_replies: BTreeMap<String, usize>,
    /// The resident job's holds and hand-offs.
    pub resident: crate::resident::Figures,
}

/// What the end-of-soak checks need besides the history.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// The end of the observation.
    pub t_end: u64,
    /// Whether to apply the "eventually a completed run" rule (only at the end: during the soak
    /// an item may still be held by a hung or slow worker).
    pub eventually: bool,
}

pub fn rel_ms(us: u64) -> String {
    format!("{:.3}s", us as f64 / 1e6)
}

/// When a run held its item: (start, end, index into the runs).
type Hold = (u64, u64, usize);

// ----- safety ---------------------------------------------------------------------------------

/// Every pair of runs of one item holding it at the same time (for the resident job, of holds:
/// [`crate::resident::overlaps`]).
pub fn safety(h: &History, now: u64) -> Vec<Violation> {
    // (job, item) -> (start, end, run index) of every hold.
    let mut by_item: BTreeMap<(usize, i32), Vec<Hold>> = BTreeMap::new();
    for (i, r) in h.runs.iter().enumerate() {
        if JOBS[r.job].resident {
            continue;
        }
        let end = h.run_end_or(r, now);
        if end > r.start {
            by_item
                .entry((r.job, r.item))
                .or_default()
                .push((r.start, end, i));
        }
    }
    let mut out = Vec::new();
    for ((job, item), mut holds) in by_item {
        holds.sort_unstable();
        let mut active: Vec<(u64, usize)> = Vec::new();
        for (start, end, i) in holds {
            active.retain(|(e, _)| *e > start);
            for (other_end, j) in &active {
                let (a, b) = (&h.runs[*j], &h.runs[i]);
                let overlap = (*other_end).min(end) - start;
                out.push(Violation {
                    key: format!("overlap {} {} {item}", a.exec, b.exec),
                    at: start,
                    class: "safety",
                    text: format!(
                        "{} item {item} held by two runs at once for {} (from {}):\n      A: {}\n      B: {}",
                        JOBS[job].name,
                        rel_ms(overlap),
                        h.rel(start),
                        h.describe(a),
                        h.describe(b)
                    ),
                });
            }
            active.push((end, i));
        }
    }
    out.extend(crate::resident::overlaps(h, now));
    out
}

// ----- fencing --------------------------------------------------------------------------------

fn find_run<'a>(h: &'a History, pid: u32, gen: u64, exec: &str, item: i32) -> Option<&'a Run> {
    h.runs
        .iter()
        .find(|r| r.pid == pid && r.gen == gen && r.exec == exec && r.item == item)
}

/// The store's decisions replayed, and every refusal classified.
pub fn fencing(h: &History, fig: &mut Figures) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut highest: BTreeMap<(usize, i32), i64> = BTreeMap::new();
    fig.writes = h.writes.len();
    fig.writes_accepted = h.writes.iter().filter(|w| w.accepted).count();
    fig.stale_refused = 0;
    fig.stale_refused_allowed = 0;
    for w in &h.writes {
        let max = highest.get(&(w.job, w.item)).copied().unwrap_or(i64::MIN);
        let writer = find_run(h, w.pid, w.gen, &w.exec, w.item);
        let writer_text =
            writer.map_or(format!("pid {} exec {}", w.pid, w.exec), |r| h.describe(r));
        if w.accepted && w.token < max {
            out.push(Violation {
                key: format!("store-accepted {} {}", w.exec, w.item),
                at: w.recv,
                class: "fencing",
                text: format!(
                    "the fencing store accepted stale token {} < {max} (it recorded {}) for {} item {}: {writer_text}",
                    w.token, w.last_before, JOBS[w.job].name, w.item
                ),
            });
        }
        if !w.accepted {
            if w.token >= max {
                out.push(Violation {
                    key: format!("store-refused {} {}", w.exec, w.item),
                    at: w.recv,
                    class: "fencing",
                    text: format!(
                        "the fencing store refused fresh token {} >= {max}: {writer_text}",
                        w.token
                    ),
                });
            }
            fig.stale_refused += 1;
            let lease_out = w.recv >= w.until;
            let revoked = h.streams.get(&(w.pid, w.gen)).is_some_and(|s| {
                s.revokes
                    .iter()
                    .any(|(t, items)| *t <= w.recv && items.contains(&w.item))
            }) || writer.is_some_and(|r| r.revoked.is_some_and(|t| t <= w.recv));
            if lease_out || revoked {
                fig.stale_refused_allowed += 1;
            } else {
                let winner = h
                    .writes
                    .iter()
                    .find(|o| o.accepted && o.job == w.job && o.item == w.item && o.token == max)
                    .and_then(|o| find_run(h, o.pid, o.gen, &o.exec, o.item))
                    .map_or("(unknown)".to_string(), |r| h.describe(r));
                out.push(Violation {
                    key: format!("stale-write {} {}", w.exec, w.item),
                    at: w.recv,
                    class: "fencing",
                    text: format!(
                        "{} item {}: write with token {} refused (store holds {max}) at {} while the writer's lease ran to {} and it had no Revoke:\n      writer: {writer_text}\n      holder: {winner}",
                        JOBS[w.job].name,
                        w.item,
                        w.token,
                        h.rel(w.recv),
                        h.rel(w.until)
                    ),
                });
            }
        }
        if w.accepted {
            highest.insert((w.job, w.item), max.max(w.token));
        }
    }
    out
}

// ----- lost fires -----------------------------------------------------------------------------

/// Streams of `job` that own `item` at `t`: open, alive, not stopped, and their latest
/// assignment names it.
fn owners_at(h: &History, job: usize, item: i32, t: u64) -> Vec<&StreamRec> {
    h.streams
        .values()
        .filter(|s| s.job == job && s.open_at(t) && s.items_at(t).contains(&item))
        .filter(|s| {
            h.procs
                .get(&s.pid)
                .is_some_and(|p| p.gone().is_none_or(|g| g > t) && !p.paused_during(t, t))
        })
        .collect()
}

fn fault_covers(fr: &FaultRec, t: u64, now: u64) -> bool {
    let (a, b) = fr.window(now);
    a <= t && t <= b
}

/// Whether a fault disturbs the fire at `f`: it covers `f`, or began while the fire's first
/// write could still be in flight (the sidecar's per-call deadline, a quarter of the session).
fn fault_disturbs_fire(fr: &FaultRec, f: u64, now: u64) -> bool {
    let (a, b) = fr.window(now);
    let in_flight = spec::SESSION.as_micros() as u64 / 4;
    a <= f + in_flight && f <= b
}

fn fault_in_scope(fr: &FaultRec, job: usize, item: i32, slots: &[usize]) -> bool {
    match fr.scope() {
        Scope::Global => true,
        Scope::Car(c) => slots.iter().any(|s| spec::car_of_slot(*s) == c),
        Scope::Job(j) => j == job,
        Scope::Item(j, i) => j == job && i == item,
        Scope::Slot(s) => slots.contains(&s),
    }
}

/// How the item of a failed run was taken over after the fault at `k` (for the bound reports).
fn takeover_text(h: &History, next: Option<&Run>, k: u64) -> String {
    next.map_or("never ran again".into(), |n| {
        format!(
            "{} at {} by {} after {}",
            source_name(n.source),
            h.rel(n.start),
            h.who(n.pid, n.gen),
            rel_ms(n.start - k)
        )
    })
}

/// How long after its instant a fire's own decisions (its claims of failover items) may be
/// stamped: the sidecar reads and writes before it triggers.
const FIRE_DECISION: u64 = 300 * MS;

/// Every fire instant of every item, classified; violations for lost ones.
pub fn lost_fires(h: &History, p: &Params, fig: &mut Figures) -> Vec<Violation> {
    let now = p.t_end;
    let mut out = Vec::new();
    for (job, spec) in JOBS.iter().enumerate().filter(|(_, s)| !s.resident) {
        let period = spec.period_s * SEC;
        let mut runs: Vec<&Run> = h.runs.iter().filter(|r| r.job == job).collect();
        runs.sort_by_key(|r| r.start);
        for item in 0..spec.items {
            let item_runs: Vec<&Run> = runs.iter().copied().filter(|r| r.item == item).collect();
            let mut stuck_from: Option<u64> = None;
            let mut stuck_fires = 0usize;
            let mut f = (h.t0 + SEC).div_ceil(period) * period;
            while f + 3 * SEC <= p.t_end {
                // Only while some live instance of the job could own the item.
                let ownable = h.streams.values().any(|s| {
                    s.job == job
                        && s.open_at(f)
                        && h.procs
                            .get(&s.pid)
                            .is_some_and(|p| p.gone().is_none_or(|g| g > f))
                });
                if !ownable {
                    f += period;
                    continue;
                }
                fig.fires += 1;
                let disabled = h.faults.iter().any(|fr| {
                    matches!(fr.kind, Kind::DisableItem { job: j, item: i, .. } if j == job && i == item)
                        && fault_covers(fr, f, now)
                });
                if disabled {
                    fig.fires_disabled += 1;
                    f += period;
                    continue;
                }
                // Eventually: a completed run starts at or after f.
                let next_done = item_runs
                    .iter()
                    .find(|r| r.start + 2 * MS >= f && r.completed())
                    .copied();
                if p.eventually && next_done.is_none() && f + 8 * SEC <= p.t_end {
                    stuck_from.get_or_insert(f);
                    stuck_fires += 1;
                }
                // The context of the fire.
                let before = owners_at(h, job, item, f.saturating_sub(SEC));
                let at = owners_at(h, job, item, f);
                let after = owners_at(h, job, item, f + 300 * MS);
                let key = |v: &[&StreamRec]| v.iter().map(|s| (s.pid, s.gen)).collect::<Vec<_>>();
                // The owners around f, and the last holder of the item before f: its sidecar's
                // state in ZooKeeper (an ephemeral `running` node, say) lingers until its own
                // faults are over.
                let slots: Vec<usize> = before
                    .iter()
                    .chain(at.iter())
                    .chain(after.iter())
                    .filter_map(|s| s.slot)
                    .chain(
                        item_runs
                            .iter()
                            .rev()
                            .find(|r| r.start < f)
                            .and_then(|r| r.slot),
                    )
                    .collect();
                let faulted = h.faults.iter().any(|fr| {
                    fault_disturbs_fire(fr, f, now) && fault_in_scope(fr, job, item, &slots)
                });
                let stable = at.len() == 1 && key(&before) == key(&at) && key(&after) == key(&at);
                let excuse = if faulted {
                    Some("a fault window")
                } else if !stable {
                    Some("owner changing")
                } else if !at[0].lease_valid_at(f) {
                    Some("owner without lease")
                } else {
                    None
                };
                if let Some(why) = excuse {
                    *fig.fires_excused.entry(why).or_default() += 1;
                    f += period;
                    continue;
                }
                let owner = at[0];
                // ElasticJob ran it at its own instant: done (its completion, or its failover
                // if it was interrupted, is the "eventually" rule's business).
                let exact = item_runs
                    .iter()
                    .any(|r| r.source == spec::CRON && r.fire_us.abs_diff(f) <= MS);
                // Busy: the owner (any run, the sidecar needs a moment to finish an execution)
                // or the item itself near f: ElasticJob coalesces the fire into a misfire. A
                // run is the sidecar's from its decision (a FAILOVER claim or a catch-up made
                // just before f reaches the worker just after it), not only from its receipt.
                // A fire that finds failover items for its instance runs those instead of the
                // instance's own items (ElasticJob's execution set), which are then flagged
                // misfired: the owner's FAILOVER runs decided by this fire make it busy too.
                let busy: Vec<&Run> = h
                    .runs
                    .iter()
                    .filter(|r| {
                        let own = r.pid == owner.pid && r.gen == owner.gen;
                        let taken_by_failover = own
                            && r.source == spec::FAILOVER
                            && decided(r) >= f
                            && decided(r) <= f + FIRE_DECISION;
                        ((own || (r.job == job && r.item == item))
                            && decided(r) < f
                            && h.run_end_or(r, now) + 500 * MS > f)
                            || taken_by_failover
                    })
                    .collect();
                // Or it was caught up before the next fire (a MISFIRE after the sidecar could not
                // prove its session at f, a FAILOVER): the fire ended in a run, as the
                // invariant asks; the eventual completion is the "eventually" rule's business.
                // Dated by the sidecar's decision, not the receipt: on a loaded host a catch-up
                // decided before the next fire reaches its worker after it.
                let caught_up = !exact
                    && item_runs
                        .iter()
                        .any(|r| r.source != spec::CRON && (f..f + period).contains(&decided(r)));
                if exact {
                    fig.fires_exact += 1;
                } else if caught_up {
                    *fig.fires_excused
                        .entry("caught up before the next fire")
                        .or_default() += 1;
                } else if busy.is_empty() {
                    let last = item_runs.iter().rev().find(|r| r.start < f);
                    let next = item_runs.iter().find(|r| r.start >= f);
                    let declined = h
                        .declined
                        .iter()
                        .filter(|d| d.job == job && d.items.contains(&item))
                        .filter(|d| d.at + 500 * MS >= f && d.at <= f + 2 * SEC)
                        .map(|d| {
                            format!(
                                "{} {} by {} at {} ({})",
                                source_name(d.source),
                                d.exec,
                                h.who(d.pid, d.gen),
                                h.rel(d.at),
                                d.why
                            )
                        })
                        .collect::<Vec<_>>();
                    out.push(Violation {
                        key: format!("lost {job} {item} {f}"),
                        at: f,
                        class: "lost-fire",
                        text: format!(
                            "{} item {item}: fire {} lost: owner {} was idle with a valid lease and no fault was near, but no CRON trigger for this instant came\n      previous run: {}\n      next run:     {}{}",
                            spec.name,
                            h.rel(f),
                            h.who(owner.pid, owner.gen),
                            last.map_or("-".into(), |r| h.describe(r)),
                            next.map_or("-".into(), |r| h.describe(r)),
                            if declined.is_empty() { String::new() } else { format!("\n      declined at once: {}", declined.join(", ")) }
                        ),
                    });
                } else {
                    // Coalesced: some run of the item (a MISFIRE catch-up, the next fire ...)
                    // must start within a period + 1.5 s of the busy run's end, unless a fault
                    // came in between.
                    let busy_end = busy.iter().map(|r| h.run_end_or(r, now)).max().unwrap_or(f);
                    let limit = busy_end.max(f) + period + 1_500 * MS;
                    // A fault on any car with a member of the job counts too: the member's
                    // loss makes the job reshard, and no item runs again until the leader has
                    // done that, which waits out the session of a dead leader.
                    let member_cars: Vec<usize> = h
                        .streams
                        .values()
                        .filter(|s| {
                            s.job == job && s.opened <= limit && s.ended.is_none_or(|e| e >= f)
                        })
                        .map(|s| s.car)
                        .collect();
                    let disturbed = h.faults.iter().any(|fr| {
                        let (a, b) = fr.window(now);
                        a <= limit
                            && f <= b
                            && (fault_in_scope(fr, job, item, &slots)
                                || matches!(fr.scope(), Scope::Car(c) if member_cars.contains(&c)))
                    });
                    // A run after the busy ones: a busy run that reached its worker after f
                    // (a late CRON run) is not the fire's catch-up.
                    let next = item_runs
                        .iter()
                        .find(|r| {
                            r.start > f
                                && !busy.iter().any(|b| b.exec == r.exec && b.item == r.item)
                        })
                        .copied();
                    if disturbed || limit + SEC > p.t_end {
                        *fig.fires_excused.entry("busy, then a fault").or_default() += 1;
                    } else {
                        fig.fires_coalesced += 1;
                        if next.is_none_or(|n| n.start > limit) {
                            out.push(Violation {
                                key: format!("late {job} {item} {f}"),
                                at: f,
                                class: "lost-fire",
                                text: format!(
                                    "{} item {item}: fire {} came while it was busy (until {}), but no run of it started by {} (a period + 1.5 s later):\n      busy: {}\n      next: {}",
                                    spec.name,
                                    h.rel(f),
                                    h.rel(busy_end),
                                    h.rel(limit),
                                    busy.iter().map(|r| h.describe(r)).collect::<Vec<_>>().join("\n            "),
                                    next.map_or("-".into(), |n| h.describe(n))
                                ),
                            });
                        }
                    }
                }
                f += period;
            }
            if let Some(from) = stuck_from {
                let last = item_runs.iter().rev().find(|r| r.completed());
                out.push(Violation {
                    key: format!("stuck {job} {item}"),
                    at: from,
                    class: "lost-fire",
                    text: format!(
                        "{} item {item}: {stuck_fires} fire(s) from {} on never ended in a completed run (last completed run: {}; last run: {})",
                        spec.name,
                        h.rel(from),
                        last.map_or("-".into(), |r| h.describe(r)),
                        item_runs.last().map_or("-".into(), |r| h.describe(r))
                    ),
                });
            }
        }
    }
    out
}

/// When the sidecar decided a run: its trigger's fire instant when that is before the receipt,
/// else the receipt. For a catch-up or a failover claim that is its decision; for a CRON run
/// (whose trigger never goes out before its instant) it is its instant, also when the run
/// reached its worker late: a claim ahead whose start was answered only after the next instant
/// (seed 7: a 1.26 s write on a loaded host) delivers the earlier fire's run after that instant,
/// and the instance is busy with it from its own instant on.
fn decided(r: &Run) -> u64 {
    if r.fire_us > 0 {
        r.start.min(r.fire_us)
    } else {
        r.start
    }
}

// ----- bounds ---------------------------------------------------------------------------------

/// Runs that held their item at `k` (started, not answered or stopped before, lease valid).
fn active_at(h: &History, k: u64, pick: impl Fn(&Run) -> bool) -> Vec<&Run> {
    h.runs
        .iter()
        .filter(|r| pick(r) && JOBS[r.job].failover && r.start <= k)
        .filter(|r| r.answer.as_ref().is_none_or(|(t, _)| *t >= k))
        .filter(|r| r.stop.as_ref().is_none_or(|(t, _)| *t >= k))
        .filter(|r| {
            h.streams
                .get(&(r.pid, r.gen))
                .is_some_and(|s| s.lease_cover_end(r.start) > k)
        })
        .collect()
}

/// The first run of the item after `k` by another stream than `r`'s.
fn takeover<'a>(h: &'a History, r: &Run, k: u64) -> Option<&'a Run> {
    h.runs
        .iter()
        .filter(|o| o.job == r.job && o.item == r.item && o.start > k)
        .filter(|o| (o.pid, o.gen) != (r.pid, r.gen))
        .min_by_key(|o| o.start)
}

/// Why a stream was not an idle member of its job at `a`, if it was not: open, alive and
/// leased through [a, b], running nothing from `a` to `a` + 200 ms (a member that starts a run
/// then was busy when the item was flagged), and no fault other than `except` touching its job,
/// its sidecar, its slot or everything during [a, b].
fn not_idle(
    h: &History,
    s: &StreamRec,
    a: u64,
    b: u64,
    except: usize,
    now: u64,
) -> Option<&'static str> {
    let alive = h
        .procs
        .get(&s.pid)
        .is_some_and(|p| p.gone().is_none_or(|g| g > b) && !p.paused_during(a, b));
    let idle_to = a + 200 * MS;
    let busy = h.runs.iter().any(|r| {
        r.pid == s.pid && r.gen == s.gen && r.start <= idle_to && h.run_end_or(r, now) >= a
    });
    let faulted = h.faults.iter().any(|fr| {
        if fr.id == except {
            return false;
        }
        let (fa, fb) = fr.window(now);
        let touches = match fr.scope() {
            Scope::Global => true,
            Scope::Car(c) => c == s.car,
            Scope::Job(j) => j == s.job,
            Scope::Item(j, _) => j == s.job,
            Scope::Slot(slot) => Some(slot) == s.slot,
        };
        touches && fa <= b && a <= fb
    });
    if !(s.open_at(a) && s.open_at(b) && alive) {
        Some("not live throughout")
    } else if !(s.lease_valid_at(a) && s.lease_valid_at(b)) {
        Some("no valid lease")
    } else if busy {
        Some("busy")
    } else if faulted {
        Some("another fault")
    } else {
        None
    }
}

/// The failover bounds, and the latencies seen.
pub fn bounds(h: &History, p: &Params, fig: &mut Figures) -> Vec<Violation> {
    let now = p.t_end;
    let mut out = Vec::new();
    for fr in &h.faults {
        let k = fr.start;
        match &fr.kind {
            Kind::WorkerKill { slot, .. } => {
                let Some(victim) = fr.victim else { continue };
                let job = spec::job_of_slot(*slot);
                // The victim's sidecar must see the stream end at once: no fault on it then.
                let car = spec::car_of_slot(*slot);
                let calm_car = !h.faults.iter().any(|o| {
                    o.id != fr.id
                        && (o.scope() == Scope::Global || o.scope() == Scope::Car(car))
                        && fault_covers(o, k, now)
                });
                for r in active_at(h, k, |r| r.pid == victim) {
                    let bound = SEC;
                    let next = takeover(h, r, k);
                    let latency = next.map(|n| n.start - k);
                    let members: Vec<String> = h
                        .streams
                        .values()
                        .filter(|s| s.job == job && s.pid != victim && s.open_at(k))
                        .map(|s| match not_idle(h, s, k, k + bound, fr.id, now) {
                            None => format!("{} idle", s.instance),
                            Some(why) => format!("{} {why}", s.instance),
                        })
                        .collect();
                    let fair = calm_car && members.iter().any(|m| m.ends_with(" idle"));
                    let text = format!(
                        "fault #{} worker SIGKILL at {}{}: {} -> {} [members: {}]",
                        fr.id,
                        h.rel(k),
                        if calm_car {
                            ""
                        } else {
                            " (its sidecar was faulted)"
                        },
                        h.describe(r),
                        takeover_text(h, next, k),
                        members.join(", ")
                    );
                    let late = latency.is_none_or(|l| l > bound);
                    if late && fair && k + bound + 2 * SEC <= p.t_end {
                        out.push(Violation {
                            key: format!("bound-worker {} {} {}", fr.id, r.exec, r.item),
                            at: k,
                            class: "bound",
                            text: format!("worker-crash failover over 1 s while an idle member existed: {text}"),
                        });
                    }
                    fig.worker_crash.push((latency, fair, text));
                }
            }
            Kind::SidecarKill { car, .. }
            | Kind::SidecarPauseLong { car, .. }
            | Kind::SessionExpiry { car, .. } => {
                for r in active_at(h, k, |r| r.car == *car && r.slot.is_some()) {
                    if r.plan_ms < 0 {
                        continue; // a hanging run has no length to add
                    }
                    let bound = SESSION.as_micros() as u64 + r.plan_ms as u64 * MS + SEC;
                    let next = takeover(h, r, k);
                    let latency = next.map(|n| n.start - k);
                    let other_cars_calm = |c: usize| {
                        !h.faults.iter().any(|o| {
                            let (fa, fb) = o.window(now);
                            o.id != fr.id
                                && (o.kind.car() == Some(c)
                                    || matches!(
                                        o.kind,
                                        Kind::ZkKill { .. }
                                            | Kind::ZkSilent { .. }
                                            | Kind::AnswerFreeze { .. }
                                    ))
                                && fa <= k + bound
                                && k <= fb
                        })
                    };
                    // Every other sidecar calm (the job's leader, which releases the items,
                    // may be on any of them), and one of them with a worker of the job.
                    let fair = (0..spec::SIDECARS)
                        .filter(|c| c != car)
                        .all(other_cars_calm)
                        && (0..spec::SIDECARS).filter(|c| c != car).any(|c| {
                        h.streams.values().any(|s| {
                                s.job == r.job
                                    && s.car == c
                                    && s.open_at(k)
                                    && s.open_at(k + bound)
                                    && !h.faults.iter().any(|o| {
                                        matches!(o.kind, Kind::WorkerSlow { slot, .. } | Kind::WorkerHang { slot, .. } | Kind::WorkerPause { slot, .. } if Some(slot) == s.slot)
                                            && o.window(now).0 <= k + bound
                                            && k <= o.window(now).1
                                    })
                            })
                    });
                    let text = format!(
                        "fault #{} {} at {}: {} -> {} (bound {})",
                        fr.id,
                        fr.kind.name(),
                        h.rel(k),
                        h.describe(r),
                        takeover_text(h, next, k),
                        rel_ms(bound)
                    );
                    let late = latency.is_none_or(|l| l > bound);
                    if late && fair && k + bound + 2 * SEC <= p.t_end {
                        out.push(Violation {
                            key: format!("bound-member {} {} {}", fr.id, r.exec, r.item),
                            at: k,
                            class: "bound",
                            text: format!("member-crash failover over session + run + 1 s: {text}"),
                        });
                    }
                    fig.member_crash.push((latency, fair, text));
                }
            }
            _ => {}
        }
    }
    out
}

/// Counts of runs by source and by how they ended.
pub fn tally(h: &History, fig: &mut Figures) {
    fig.runs = h.runs.len();
    fig.completed = h.runs.iter().filter(|r| r.completed()).count();
    fig.declined_at_once = h.declined.len();
    fig.by_source.clear();
    fig.stopped.clear();
    for r in &h.runs {
        *fig.by_source.entry(source_name(r.source)).or_default() += 1;
        if let Some((_, why)) = &r.stop {
            *fig.stopped.entry(why.clone()).or_default() += 1;
        }
    }
}

/// Rule 2's other half: the sidecar sends a fresh `Lease` before any trigger when the current
/// one is close to running out, so a worker that was not stopped, on a sidecar with no fault,
/// never receives a trigger without a valid lease.
pub fn contract(h: &History, p: &Params) -> Vec<Violation> {
    let now = p.t_end;
    let mut out = Vec::new();
    for d in h.declined.iter().filter(|d| d.why == "no valid lease") {
        let Some(proc_) = h.procs.get(&d.pid) else {
            continue;
        };
        let quiet_from = d.at.saturating_sub(LEASE.as_micros() as u64 + SEC);
        let paused = proc_.paused_during(quiet_from, d.at);
        let slots: Vec<usize> = proc_.slot.into_iter().collect();
        let faulted = h.faults.iter().any(|fr| {
            let (a, b) = fr.window(now);
            a <= d.at && quiet_from <= b && fault_in_scope(fr, d.job, -1, &slots)
        });
        if paused || faulted || d.at < h.t0 {
            continue;
        }
        let leases = h
            .streams
            .get(&(d.pid, d.gen))
            .map(|s| {
                s.leases
                    .iter()
                    .filter(|(t, _)| *t + 3 * SEC >= d.at && *t <= d.at)
                    .map(|(t, u)| format!("{} valid to {}", h.rel(*t), h.rel(*u)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        out.push(Violation {
            key: format!("no-lease {}", d.exec),
            at: d.at,
            class: "contract",
            text: format!(
                "{} trigger {} ({} items {:?}) reached {} at {} without a valid lease, with no fault near it or its sidecar (leases before: {leases})",
                JOBS[d.job].name,
                d.exec,
                source_name(d.source),
                d.items,
                h.who(d.pid, d.gen),
                h.rel(d.at)
            ),
        });
    }
    out
}

/// Every end-of-soak check.
pub fn all(h: &History, p: &Params, fig: &mut Figures) -> Vec<Violation> {
    tally(h, fig);
    let mut out = safety(h, p.t_end);
    out.extend(fencing(h, fig));
    out.extend(lost_fires(h, p, fig));
    out.extend(bounds(h, p, fig));
    out.extend(contract(h, p));
    out.extend(crate::ends::executions_end(h, p, fig));
    out.sort_by_key(|v| v.at);
    out
}

/// The worst latency of a set of samples, for the summary.
pub fn worst(samples: &Samples, fair_only: bool) -> String {
    let chosen: Vec<&(Option<u64>, bool, String)> = samples
        .iter()
        .filter(|(_, f, _)| !fair_only || *f)
        .collect();
    if chosen.is_empty() {
        return "no sample".into();
    }
    let never = chosen.iter().filter(|(l, _, _)| l.is_none()).count();
    let max = chosen.iter().filter_map(|(l, _, _)| *l).max();
    let mut text = match max {
        Some(m) => format!("{} over {} sample(s)", rel_ms(m), chosen.len()),
        None => format!("{} sample(s)", chosen.len()),
    };
    if never > 0 {
        let _ = write!(text, ", {never} never taken over before the end");
    }
    text
}

// ----- self-check -----------------------------------------------------------------------------

/// Synthetic histories that break each invariant (and one that breaks none): the checker must
/// report exactly the broken ones.
pub mod synth {
    use super::*;
    use crate::history::Proc;

    pub const T0: u64 = 1_000_000 * SEC; // a whole second, far from 0

    pub fn history(end: u64) -> History {
        History {
            t0: T0,
            frozen_now: Some(end),
            ..Default::default()
        }
    }

    /// A worker of `job` (slot on sidecar `car`) with one stream open from `open` with leases
    /// renewed every 0.5 s until `lease_to` and the given items assigned.
    pub fn worker(
        h: &mut History,
        pid: u32,
        car: usize,
        job: usize,
        items: &[i32],
        open: u64,
        lease_to: u64,
    ) {
        let slot = spec::slot_of(car, job);
        h.procs.insert(
            pid,
            Proc {
                slot: Some(slot),
                car,
                job,
                ..Default::default()
            },
        );
        let mut leases = Vec::new();
        let mut t = open;
        while t < lease_to {
            leases.push((t, (t + 2 * SEC).min(lease_to)));
            t += SEC / 2;
        }
        h.streams.insert(
            (pid, 1),
            StreamRec {
                pid,
                gen: 1,
                slot: Some(slot),
                car,
                job,
                instance: format!("{}@-@{pid}", spec::car_ip(car)),
                opened: open,
                leases,
                assignments: vec![(open, items.to_vec())],
                ..Default::default()
            },
        );
    }

    /// A completed run (answered at `end`).
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        h: &mut History,
        pid: u32,
        job: usize,
        item: i32,
        exec: &str,
        source: i32,
        fire: u64,
        start: u64,
        end: u64,
        token: i64,
    ) {
        let car = h.procs[&pid].car;
        let slot = h.procs[&pid].slot;
        h.runs.push(Run {
            job,
            item,
            exec: exec.into(),
            pid,
            gen: 1,
            slot,
            car,
            source,
            fire_us: fire,
            token,
            start,
            plan_ms: ((end - start) / MS) as i64,
            answer: Some((end, "complete".into())),
            answer_code: Some(Some(0)),
            ..Default::default()
        });
    }

    /// Completed CRON runs of every item of `job` at every fire in [from, to), 100 ms long,
    /// by the owner `pid` (which must own every item).
    pub fn steady(h: &mut History, pid: u32, job: usize, from: u64, to: u64) {
        let period = JOBS[job].period_s * SEC;
        let mut f = from.div_ceil(period) * period;
        let mut token = 1;
        while f < to {
            for item in 0..JOBS[job].items {
                let exec = format!("e{job}-{item}-{f}");
                run(
                    h,
                    pid,
                    job,
                    item,
                    &exec,
                    spec::CRON,
                    f,
                    f + 2 * MS,
                    f + 100 * MS,
                    token,
                );
            }
            token += 1;
            f += period;
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn write(
        h: &mut History,
        recv: u64,
        job: usize,
        item: i32,
        token: i64,
        pid: u32,
        exec: &str,
        until: u64,
    ) {
        h.store_write(recv, job, item, token, pid, 1, exec.into(), until);
    }
}

fn classes(v: &[Violation]) -> Vec<&'static str> {
    let mut c: Vec<&'static str> = v.iter().map(|v| v.class).collect();
    c.dedup();
    c
}

/// Feeds the checker histories that break each invariant; `Err` names a miss.
pub fn self_check() -> Result<Vec<String>, String> {
    use synth::*;
    let mut report = Vec::new();
    let end = T0 + 30 * SEC;
    let p = Params {
        t_end: end,
        eventually: true,
    };
    // Job 2 (nem-nofo-1s, 3 items) on one worker: a clean history has no violation.
    let clean = || {
        let mut h = history(end);
        worker(&mut h, 100, 0, 2, &[0, 1, 2], T0, end + 10 * SEC);
        steady(&mut h, 100, 2, T0, end);
        h
    };
    let h = clean();
    let v = all(&h, &p, &mut Figures::default());
    if !v.is_empty() {
        return Err(format!("a clean history gave violations: {:#?}", v));
    }
    report.push(format!(
        "clean history: no violation ({} runs)",
        h.runs.len()
    ));

    // Overlap: a second worker runs item 1 while the first one holds it.
    let mut h = clean();
    worker(&mut h, 200, 1, 2, &[], T0, end + 10 * SEC);
    let f = T0 + 10 * SEC;
    run(
        &mut h,
        200,
        2,
        1,
        "intruder",
        spec::FAILOVER,
        f,
        f + 50 * MS,
        f + 400 * MS,
        99,
    );
    let v = safety(&h, end);
    if v.is_empty() {
        return Err("an overlapping history gave no safety violation".into());
    }
    report.push(format!("overlapping runs: {} safety violation(s)", v.len()));

    // Lease bound: a frozen worker's run counts only to its lease end; a run after it is fine.
    let mut h = history(end);
    worker(&mut h, 300, 0, 2, &[0], T0, T0 + 3 * SEC);
    worker(&mut h, 301, 1, 2, &[], T0, end + 10 * SEC);
    run(
        &mut h,
        300,
        2,
        0,
        "frozen",
        spec::CRON,
        T0 + 2 * SEC,
        T0 + 2 * SEC,
        T0 + 9 * SEC,
        1,
    );
    h.runs.last_mut().unwrap().answer = Some((T0 + 9 * SEC, "decline".into()));
    run(
        &mut h,
        301,
        2,
        0,
        "taker",
        spec::FAILOVER,
        T0 + 4 * SEC,
        T0 + 4 * SEC,
        T0 + 5 * SEC,
        2,
    );
    if !safety(&h, end).is_empty() {
        return Err("a run after the previous holder's lease ended was reported as overlap".into());
    }
    run(
        &mut h,
        301,
        2,
        0,
        "early",
        spec::FAILOVER,
        T0 + 2 * SEC,
        T0 + 2_500 * MS,
        T0 + 2_600 * MS,
        3,
    );
    if safety(&h, end).is_empty() {
        return Err("a run inside the previous holder's lease was not reported".into());
    }
    report
        .push("lease-bounded holds: a run after the lease end passes, one inside it fails".into());

    // Fencing: a refused write from a run with a valid lease and no Revoke.
    let mut h = clean();
    let f = T0 + 5 * SEC;
    write(&mut h, f, 2, 0, 10, 100, &format!("e2-0-{f}"), f + SEC);
    write(
        &mut h,
        f + 10 * MS,
        2,
        0,
        9,
        100,
        &format!("e2-0-{}", f + SEC),
        f + SEC,
    );
    let mut fig = Figures::default();
    let v = fencing(&h, &mut fig);
    if v.is_empty() || fig.stale_refused != 1 {
        return Err(format!(
            "a stale refused write under a valid lease was not a violation: {v:?}"
        ));
    }
    // ... but not when the lease had run out before the store received it.
    let mut h = clean();
    write(&mut h, f, 2, 0, 10, 100, "x", f + SEC);
    write(&mut h, f + 2 * SEC, 2, 0, 9, 100, "y", f + SEC);
    let v = fencing(&h, &mut Figures::default());
    if !v.is_empty() {
        return Err(format!(
            "a refused write after the lease end was a violation: {v:?}"
        ));
    }
    // ... and a store that accepts a stale token is caught.
    let mut h = clean();
    write(&mut h, f, 2, 0, 10, 100, "x", f + SEC);
    write(&mut h, f + MS, 2, 0, 9, 100, "y", f + SEC);
    h.writes[1].accepted = true;
    if fencing(&h, &mut Figures::default())
        .iter()
        .all(|v| !v.text.contains("accepted stale"))
    {
        return Err("a store accepting a stale token was not caught".into());
    }
    report.push("fencing: refused write under a valid lease caught; after lease end allowed; store accepting a stale token caught".into());

    // Lost fire: the owner idle, healthy, and one CRON fire of item 2 missing.
    let mut h = clean();
    let lost = T0 + 12 * SEC;
    h.runs.retain(|r| !(r.item == 2 && r.fire_us == lost));
    let v = lost_fires(&h, &p, &mut Figures::default());
    if !classes(&v).contains(&"lost-fire") {
        return Err("a missing CRON run in a calm period was not a lost fire".into());
    }
    // ... excused when a fault covers it.
    h.faults.push(FaultRec {
        id: 1,
        kind: Kind::SidecarKill {
            car: 0,
            restart_after: std::time::Duration::from_secs(1),
        },
        start: lost - SEC,
        end: Some(lost),
        note: String::new(),
        victim: None,
        fired: None,
    });
    if !lost_fires(&h, &p, &mut Figures::default()).is_empty() {
        return Err("a fire missed during a sidecar fault was not excused".into());
    }
    // ... and a stuck item (never completes again) is a violation whatever the faults.
    let mut h = clean();
    h.runs
        .retain(|r| !(r.item == 1 && r.start >= T0 + 15 * SEC));
    h.faults.push(FaultRec {
        id: 1,
        kind: Kind::ZkSilent {
            hold: std::time::Duration::from_secs(2),
        },
        start: T0 + 14 * SEC,
        end: Some(T0 + 16 * SEC),
        note: String::new(),
        victim: None,
        fired: None,
    });
    let v = lost_fires(&h, &p, &mut Figures::default());
    if !v.iter().any(|v| v.key.starts_with("stuck")) {
        return Err(format!(
            "an item that never ran again was not reported: {v:?}"
        ));
    }
    // ... and a fire coalesced behind a long run whose catch-up never comes in time.
    let mut h = clean();
    let f = T0 + 12 * SEC;
    h.runs
        .retain(|r| !(r.item == 0 && r.fire_us >= f && r.fire_us < f + 4 * SEC));
    if let Some(r) = h
        .runs
        .iter_mut()
        .find(|r| r.item == 0 && r.fire_us == f - SEC)
    {
        r.answer = Some((f + 300 * MS, "complete".into()));
    }
    let v = lost_fires(&h, &p, &mut Figures::default());
    if !v.iter().any(|v| v.key.starts_with("late")) || !v.iter().any(|v| v.key.starts_with("lost"))
    {
        return Err(format!(
            "a coalesced fire without a catch-up, then idle fires, were not reported: {v:?}"
        ));
    }
    // ... unless a car with another member of the job fails in between: the job reshards, and
    // nothing runs until the (possibly dead) leader has done that.
    let late_of = |v: &[Violation]| v.iter().filter(|v| v.key.starts_with("late")).count();
    let late_before = late_of(&v);
    worker(&mut h, 500, 1, 2, &[], T0, end + 10 * SEC);
    h.faults.push(FaultRec {
        id: 1,
        kind: Kind::SidecarKill {
            car: 1,
            restart_after: std::time::Duration::from_secs(1),
        },
        start: f + 400 * MS,
        end: Some(f + 1_400 * MS),
        note: String::new(),
        victim: None,
        fired: None,
    });
    let v = lost_fires(&h, &p, &mut Figures::default());
    if late_of(&v) >= late_before {
        return Err(format!(
            "a coalesced fire whose catch-up a member's sidecar kill held back was not excused: {v:?}"
        ));
    }
    // A fire that finds failover items runs those first; the owner's own items are caught up
    // when they are done. Worker 300 (car 1) owns item 2 and is gone just before f; the fire at
    // f on worker 100 claims item 2 (a 1.4 s FAILOVER run), then item 2 is sharded to it.
    let taken_by_failover = |catch_up: bool| {
        let mut h = history(end);
        let f = T0 + 12 * SEC;
        worker(&mut h, 100, 0, 2, &[0, 1], T0, end + 10 * SEC);
        worker(&mut h, 300, 1, 2, &[2], T0, f - 500 * MS);
        let s = h.streams.get_mut(&(300, 1)).expect("stream of worker 300");
        s.ended = Some(f - 500 * MS);
        let s = h.streams.get_mut(&(100, 1)).expect("stream of worker 100");
        s.assignments.push((f + 1_500 * MS, vec![0, 1, 2]));
        steady(&mut h, 100, 2, T0, end);
        let slot_300 = h.procs[&300].slot;
        h.runs.retain(|r| {
            let gone_item = r.item == 2 && r.fire_us >= f && r.fire_us < f + 2 * SEC;
            // The owner's own fires it coalesced (and, without the catch-up, the next ones).
            let horizon = if catch_up { 2 } else { 4 };
            let caught_up = r.item != 2 && r.fire_us >= f && r.fire_us < f + horizon * SEC;
            !gone_item && !caught_up
        });
        for r in h.runs.iter_mut().filter(|r| r.item == 2 && r.fire_us < f) {
            (r.pid, r.car, r.slot) = (300, 1, slot_300);
            if r.fire_us == f - SEC {
                // Interrupted by the worker's death.
                (r.answer, r.answer_code) = (None, None);
                r.stop = Some((f - 500 * MS, "stream end".into()));
            }
        }
        run(
            &mut h,
            100,
            2,
            2,
            "fo",
            spec::FAILOVER,
            f + 10 * MS,
            f + 20 * MS,
            f + 1_400 * MS,
            50,
        );
        if catch_up {
            for item in [0, 1] {
                let exec = format!("mf{item}");
                let at = f + 1_450 * MS;
                run(
                    &mut h,
                    100,
                    2,
                    item,
                    &exec,
                    spec::MISFIRE,
                    at,
                    at + 5 * MS,
                    at + 100 * MS,
                    51,
                );
            }
        }
        lost_fires(&h, &p, &mut Figures::default())
    };
    let v = taken_by_failover(true);
    if !v.is_empty() {
        return Err(format!(
            "a fire taken by failover work, its own items caught up after it, was reported: {v:?}"
        ));
    }
    let v = taken_by_failover(false);
    let f = T0 + 12 * SEC;
    if !v.iter().any(|v| v.key == format!("late 2 0 {f}")) {
        return Err(format!(
            "a fire taken by failover work whose own items were never caught up was not reported: {v:?}"
        ));
    }
    // Seed 7 (nem-nofo-1s item 2): a CRON run claimed ahead whose start was answered only after
    // the next instant reaches its worker late, with its own fire time; that next fire finds
    // the instance busy, is flagged misfire and caught up once the run ends. Without a run after
    // it, that fire is late.
    let claimed_late = |catch_up: bool| {
        let mut h = clean();
        let f = T0 + 12 * SEC;
        let gone = if catch_up { 3 } else { 6 };
        h.runs
            .retain(|r| !(r.item == 2 && r.fire_us >= f && r.fire_us < f + gone * SEC));
        let (start, end) = (f + 1_228 * MS, f + 2_306 * MS);
        run(
            &mut h,
            100,
            2,
            2,
            "late-cron",
            spec::CRON,
            f,
            start,
            end,
            90,
        );
        if catch_up {
            let at = f + 2_340 * MS;
            run(
                &mut h,
                100,
                2,
                2,
                "mf2",
                spec::MISFIRE,
                at,
                at + 88 * MS,
                at + 500 * MS,
                91,
            );
        }
        lost_fires(&h, &p, &mut Figures::default())
    };
    let v = claimed_late(true);
    if !v.is_empty() {
        return Err(format!(
            "a fire behind a late-delivered CRON run, caught up after it, was reported: {v:?}"
        ));
    }
    let v = claimed_late(false);
    if !v
        .iter()
        .any(|v| v.key == format!("late 2 2 {}", T0 + 13 * SEC))
    {
        return Err(format!(
            "a fire behind a late-delivered CRON run with no run after it was not reported: {v:?}"
        ));
    }
    // The CI run of seed 1 under overload: a claim ahead unanswered past its instant, its item
    // flagged misfire; the catch-up was decided 0.88 s after the instant and reached the worker
    // 1.28 s after it, past the next instant. Decided within the period: caught up.
    let caught_up_late = |decided_at: u64| {
        let mut h = clean();
        let f = T0 + 12 * SEC;
        h.runs.retain(|r| !(r.item == 2 && r.fire_us == f));
        let start = f + decided_at + 402 * MS;
        run(
            &mut h,
            100,
            2,
            2,
            "mf-late",
            spec::MISFIRE,
            f + decided_at,
            start,
            start + 100 * MS,
            92,
        );
        lost_fires(&h, &p, &mut Figures::default())
    };
    let v = caught_up_late(879 * MS);
    if !v.is_empty() {
        return Err(format!(
            "a catch-up decided within the period but received after it was reported: {v:?}"
        ));
    }
    let v = caught_up_late(1_100 * MS);
    if !v
        .iter()
        .any(|v| v.key == format!("lost 2 2 {}", T0 + 12 * SEC))
    {
        return Err(format!(
            "a catch-up decided only after the next fire was taken for the fire's: {v:?}"
        ));
    }
    report.push(
        "lost fires: a missing CRON run in calm caught, excused under a fault; a stuck item caught; a coalesced fire without a timely catch-up caught, excused when a member's sidecar fails in between; a fire taken by failover work excused only with its catch-up; a fire behind a late-delivered CRON run excused only with its catch-up; a catch-up counted from its decision"
            .into(),
    );

    // Contract: a trigger that reached a running worker on a calm sidecar without a lease.
    let mut h = clean();
    h.declined.push(crate::history::Declined {
        pid: 100,
        gen: 1,
        job: 2,
        exec: "leaseless".into(),
        items: vec![0],
        at: T0 + 10 * SEC,
        why: "no valid lease".into(),
        source: spec::CRON,
    });
    if contract(&h, &p).is_empty() {
        return Err("a trigger without a lease on a calm sidecar was not reported".into());
    }
    h.procs
        .get_mut(&100)
        .unwrap()
        .pauses
        .push((T0 + 9 * SEC, Some(T0 + 10 * SEC)));
    if !contract(&h, &p).is_empty() {
        return Err("a trigger read by a worker just continued from SIGSTOP was reported".into());
    }
    report.push("contract: a trigger without a lease caught on a calm sidecar, excused after a worker pause".into());

    // Bounds: a worker killed mid-run, an idle member, no takeover for 3 s.
    let mut h = history(end);
    worker(&mut h, 400, 0, 0, &[0, 1], T0, end + 10 * SEC);
    worker(&mut h, 401, 1, 0, &[], T0, end + 10 * SEC);
    let k = T0 + 10 * SEC;
    h.runs.push(Run {
        job: 0,
        item: 1,
        exec: "victim".into(),
        pid: 400,
        gen: 1,
        slot: Some(spec::slot_of(0, 0)),
        car: 0,
        source: spec::CRON,
        fire_us: k - 200 * MS,
        token: 5,
        start: k - 200 * MS,
        plan_ms: 1000,
        ..Default::default()
    });
    h.procs.get_mut(&400).unwrap().killed = Some(k);
    h.faults.push(FaultRec {
        id: 1,
        kind: Kind::WorkerKill {
            slot: spec::slot_of(0, 0),
            restart_after: std::time::Duration::from_secs(1),
        },
        start: k,
        end: Some(k + SEC),
        note: String::new(),
        victim: Some(400),
        fired: None,
    });
    run(
        &mut h,
        401,
        0,
        1,
        "late-failover",
        spec::FAILOVER,
        k + 3 * SEC,
        k + 3 * SEC,
        k + 3_100 * MS,
        6,
    );
    let mut fig = Figures::default();
    let v = bounds(&h, &p, &mut fig);
    if !classes(&v).contains(&"bound") {
        return Err(format!(
            "a 3 s worker-crash failover with an idle member was not reported: {fig:?}"
        ));
    }
    h.runs.last_mut().unwrap().start = k + 300 * MS;
    if !bounds(&h, &p, &mut Figures::default()).is_empty() {
        return Err("a 0.3 s worker-crash failover was reported".into());
    }
    report.push(
        "bounds: a 3 s worker-crash failover with an idle member caught, 0.3 s passes".into(),
    );
    report.push(crate::ends::self_check(&p, &clean)?);
    report.push(crate::resident::self_check()?);
    Ok(report)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_checker_catches_every_broken_invariant() {
        match super::self_check() {
            Ok(lines) => {
                for l in lines {
                    eprintln!("{l}");
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
}
