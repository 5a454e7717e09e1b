//! The resident job's invariants and figures (#50). Its workers ([`crate::worker`]) hold each
//! item from its RESIDENT `Trigger` until a `Revoke` names it, their lease runs out or their
//! stream ends, then decline it once; they never end a hold themselves.
//!
//! - **(a) No two holds of an item overlap** ([`overlaps`]). A hold lasts from its trigger's
//!   receipt until the earliest of: the worker's own stop (on `Revoke`, at its lease's end, at
//!   its stream's end; its `Decline` follows), the end of its lease cover (the lease it had at
//!   the start, renewed without a gap: [`crate::history::StreamRec::lease_cover_end`]) and the
//!   death of its process. A frozen worker's hold is not ended by the freeze: it lasts to its
//!   lease's end, since the worker works on, unaware, the moment it resumes, and only its
//!   lease tells it to stop. A killed worker's hold ends with its process: a dead process runs
//!   nothing, and the contract lets the sidecar move the items of a stream the worker's side
//!   closed at once (`docs/architecture.md` §6, `src/api/connection.rs`); how often a
//!   hand-off came inside a killed holder's lease is a figure ([`Figures::in_killed_lease`]).
//! - **(b) Every item is held again after the last fault** ([`held_again`]): by a live worker
//!   (process alive and not stopped, stream open, lease valid), without a break to the end of
//!   the observation, from at most [`HELD_AGAIN`] after the last fault's end.
//! - **(c) Hand-off times** ([`handoffs`]), for the summary: on a join, from the joiner's
//!   `Registered` to its hold of each item it took from a live holder; on a leave (a worker
//!   killed, shut down remotely, or drained with its sidecar), from the leave to the item's
//!   next hold; after a worker's freeze and after its sidecar was lost, the same, apart.

use crate::check::{rel_ms, Violation, MS, SEC};
use crate::history::{History, Run};
use crate::spec::{JOBS, SESSION};
use std::collections::BTreeMap;
use std::time::Duration;

/// The bound of (b). `docs/guarantees.md` ("Resident jobs") bounds a leave, a killed or
/// frozen worker and a killed sidecar "as for any run (the table below), plus the reshard and
/// the start" and gives no one figure after the last of several faults; the issue (#50, "Done
/// when") asks for every item held by a live worker again "within twice the session timeout
/// after the last fault", as `holds_survive_leaves_kills_and_freezes_without_overlap` checks.
pub const HELD_AGAIN: Duration = Duration::from_secs(2 * SESSION.as_secs());

/// How long after a hold's end a `Shutdown` still counts as what ended it (the `Revoke` that
/// goes with a shutdown may come first).
const SHUTDOWN_WITH_REVOKE: u64 = 200 * MS;

/// How long after a join a hold of the joiner still counts as that join's hand-off.
const JOIN_WINDOW: u64 = 2 * SESSION.as_secs() * SEC;

pub fn is_resident(job: usize) -> bool {
    JOBS[job].resident
}

/// The resident figures of a soak.
#[derive(Default, Debug)]
pub struct Figures {
    pub holds: usize,
    /// Holds by how they ended.
    pub ended: BTreeMap<&'static str, usize>,
    /// Per item, when it was held by a live worker without a break to the end (`None`: not
    /// held at the end).
    pub held_since: Vec<(i32, Option<u64>)>,
    /// Hand-off samples by cause: (microseconds, or `None` when the item was not held again
    /// before the end; description).
    pub handoffs: BTreeMap<&'static str, Vec<(Option<u64>, String)>>,
    /// Hand-offs that started the next hold inside a killed holder's lease.
    pub in_killed_lease: Vec<String>,
}

/// When resident hold `r` ended by rule (a) ([`History::run_end`]: the worker's stop or
/// answer, its stream's end, its process's death, its lease cover's end; no pause), or `now`.
fn hold_end(h: &History, r: &Run, now: u64) -> u64 {
    h.run_end_or(r, now)
}

/// A hold: (start, end, index into the runs).
type Hold = (u64, u64, usize);

fn resident_runs(h: &History) -> impl Iterator<Item = (usize, &Run)> {
    h.runs
        .iter()
        .enumerate()
        .filter(|(_, r)| is_resident(r.job))
}

/// (a): every pair of holds of one resident item that overlap.
pub fn overlaps(h: &History, now: u64) -> Vec<Violation> {
    // (job, item) -> (start, end, run index) of every hold.
    let mut by_item: BTreeMap<(usize, i32), Vec<Hold>> = BTreeMap::new();
    for (i, r) in resident_runs(h) {
        let end = hold_end(h, r, now);
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
                out.push(Violation {
                    key: format!("hold-overlap {} {} {item}", a.exec, b.exec),
                    at: start,
                    class: "safety",
                    text: format!(
                        "{} item {item} held by two workers at once for {} (from {}), both under a lease:\n      A: {}\n      B: {}",
                        JOBS[job].name,
                        rel_ms((*other_end).min(end) - start),
                        h.rel(start),
                        h.describe(a),
                        h.describe(b)
                    ),
                });
            }
            active.push((end, i));
        }
    }
    out
}

/// When the worker of hold `r` stopped being live during it: its process's first pause after
/// the start (it is not gone: the hold ends with the process).
fn first_pause(h: &History, r: &Run) -> Option<u64> {
    h.procs
        .get(&r.pid)?
        .pauses
        .iter()
        .map(|(a, _)| *a)
        .filter(|a| *a >= r.start)
        .min()
}

/// The intervals in which a live worker held `item` of `job`: its holds, each cut at its
/// worker's first pause.
fn live_holds(h: &History, job: usize, item: i32, now: u64) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = resident_runs(h)
        .map(|(_, r)| r)
        .filter(|r| r.job == job && r.item == item && r.slot.is_some())
        .map(|r| {
            let end = hold_end(h, r, now);
            (r.start, first_pause(h, r).map_or(end, |p| p.min(end)))
        })
        .filter(|(a, b)| b > a)
        .collect();
    spans.sort_unstable();
    spans
}

/// Since when `item` of `job` has been held by a live worker without a break up to `now`
/// (`None`: it is not held at `now`).
pub fn held_since(h: &History, job: usize, item: i32, now: u64) -> Option<u64> {
    let mut since: Option<(u64, u64)> = None;
    for (a, b) in live_holds(h, job, item, now) {
        since = match since {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            _ => Some((a, b)),
        };
    }
    since.filter(|(_, e)| *e >= now).map(|(s, _)| s)
}

/// The resident items no live worker holds at `now` (for the wait after the last fault).
pub fn unheld(h: &History, now: u64) -> Vec<(usize, i32)> {
    (0..JOBS.len())
        .filter(|j| is_resident(*j))
        .flat_map(|j| (0..JOBS[j].items).map(move |i| (j, i)))
        .filter(|(j, i)| held_since(h, *j, *i, now).is_none())
        .collect()
}

/// (b): every resident item held by a live worker, without a break to `t_end`, from at most
/// [`HELD_AGAIN`] after `last_fault_end`. Judged only when the observation reached the bound.
pub fn held_again(
    h: &History,
    t_end: u64,
    last_fault_end: u64,
    fig: &mut Figures,
) -> Vec<Violation> {
    let limit = last_fault_end + HELD_AGAIN.as_micros() as u64;
    let mut out = Vec::new();
    fig.held_since.clear();
    for job in (0..JOBS.len()).filter(|j| is_resident(*j)) {
        for item in 0..JOBS[job].items {
            let since = held_since(h, job, item, t_end);
            fig.held_since.push((item, since));
            if t_end < limit || since.is_some_and(|s| s <= limit) {
                continue;
            }
            let last = resident_runs(h)
                .map(|(_, r)| r)
                .filter(|r| r.job == job && r.item == item)
                .max_by_key(|r| r.start);
            out.push(Violation {
                key: format!("held-again {job} {item}"),
                at: limit,
                class: "liveness",
                text: format!(
                    "{} item {item}: {} (bound: {} after the last fault, at {}; last hold: {})",
                    JOBS[job].name,
                    match since {
                        Some(s) => format!(
                            "held by a live worker again only at {}, {} after the last fault",
                            h.rel(s),
                            rel_ms(s - last_fault_end)
                        ),
                        None => format!("not held by a live worker at the end ({})", h.rel(t_end)),
                    },
                    rel_ms(HELD_AGAIN.as_micros() as u64),
                    h.rel(limit),
                    last.map_or("-".into(), |r| h.describe(r))
                ),
            });
        }
    }
    out
}

/// Whether `item` of `job` was held at `t` by a live hold of another stream than `(pid, gen)`.
fn held_by_other(h: &History, job: usize, item: i32, t: u64, not: (u32, u64), now: u64) -> bool {
    resident_runs(h).map(|(_, r)| r).any(|r| {
        r.job == job
            && r.item == item
            && (r.pid, r.gen) != not
            && r.start <= t
            && hold_end(h, r, now) > t
    })
}

/// The first hold of `r`'s item that started after `t`, `r` itself left out.
fn next_hold<'a>(h: &'a History, r: &Run, t: u64) -> Option<&'a Run> {
    resident_runs(h)
        .map(|(_, o)| o)
        .filter(|o| o.job == r.job && o.item == r.item && o.start > t)
        .filter(|o| !(o.pid == r.pid && o.gen == r.gen && o.exec == r.exec))
        .min_by_key(|o| o.start)
}

/// Why hold `r` ended, when, for the hand-off figures: its worker left (killed, shut down,
/// drained), froze, or lost its sidecar (its stream or lease ended with no leave of its own);
/// `None` for a hold that was revoked to move (a join, a disabled server or item: the join's
/// figure times the former), or that is still going.
fn leave_of(h: &History, r: &Run) -> Option<(&'static str, u64)> {
    let end = h.run_end(r)?;
    let stream = h.streams.get(&(r.pid, r.gen));
    if let Some(d) = h.procs.get(&r.pid).and_then(|p| p.gone()) {
        if d >= r.start && d <= end {
            return Some(("kill", d));
        }
    }
    // The `Revoke` of what runs may come just before the `Shutdown` it goes with.
    if let Some((t, kind)) = stream.and_then(|s| s.shutdown.map(|t| (t, s.shutdown_kind.as_str())))
    {
        if t >= r.start && t <= end + SHUTDOWN_WITH_REVOKE {
            let cause = if kind == "remote" {
                "remote shutdown"
            } else {
                "drain"
            };
            return Some((cause, t.min(end)));
        }
    }
    if let Some(p) = first_pause(h, r).filter(|p| *p <= end) {
        return Some(("freeze", p));
    }
    match r.stop.as_ref().map(|(t, why)| (*t, why.as_str())) {
        Some((t, "stream" | "lease")) => Some(("sidecar lost", t)),
        Some(_) => None,
        None => Some(("sidecar lost", end)),
    }
}

/// (c) and the other hand-off figures; the hand-offs inside a killed holder's lease.
pub fn handoffs(h: &History, now: u64, fig: &mut Figures) {
    fig.handoffs.clear();
    fig.in_killed_lease.clear();
    fig.ended.clear();
    fig.holds = 0;
    for (_, r) in resident_runs(h) {
        fig.holds += 1;
        let how = match (&r.stop, h.run_end(r)) {
            (_, None) => "still held at the end",
            (Some((_, why)), _) if why == "revoke" => "revoked",
            (Some((_, why)), _) if why == "lease" => "its lease ran out",
            (Some((_, why)), _) if why == "stream" => "its stream ended",
            _ if h.procs.get(&r.pid).and_then(|p| p.gone()).is_some() => "its worker was killed",
            _ => "its lease ran out",
        };
        *fig.ended.entry(how).or_default() += 1;
        if let Some((cause, at)) = leave_of(h, r) {
            let next = next_hold(h, r, at);
            let text = format!(
                "{cause} at {}: {} -> {}",
                h.rel(at),
                h.describe(r),
                next.map_or("never held again".into(), |n| format!(
                    "held by {} at {}",
                    h.who(n.pid, n.gen),
                    h.rel(n.start)
                ))
            );
            if cause == "kill" {
                let lease_end = h
                    .streams
                    .get(&(r.pid, r.gen))
                    .map_or(at, |s| s.lease_cover_end(r.start));
                if let Some(n) = next.filter(|n| n.start < lease_end) {
                    fig.in_killed_lease.push(format!(
                        "item {} held by {} at {}, {} after the kill, {} before the killed holder's lease would have ended",
                        r.item,
                        h.who(n.pid, n.gen),
                        h.rel(n.start),
                        rel_ms(n.start - at),
                        rel_ms(lease_end - n.start)
                    ));
                }
            }
            fig.handoffs
                .entry(cause)
                .or_default()
                .push((next.map(|n| n.start - at), text));
        }
    }
    // Joins: each resident slot worker's stream, from its Registered, for the items of the
    // first assignment that gave it any (the join's reshard) that a live worker held then.
    // Items that moved on before the joiner held them are left out; a hold that came later
    // for another reason (a server disabled, a leave) is not the join's.
    for s in h
        .streams
        .values()
        .filter(|s| is_resident(s.job) && s.slot.is_some())
    {
        let joined = s.opened;
        let Some((given, items)) = s
            .assignments
            .iter()
            .find(|(t, items)| *t >= joined && !items.is_empty())
        else {
            continue;
        };
        if *given > joined + JOIN_WINDOW {
            continue;
        }
        for item in items {
            if !held_by_other(h, s.job, *item, joined, (s.pid, s.gen), now) {
                continue; // not taken from a live holder: a leave's hand-off, timed there
            }
            let first = resident_runs(h)
                .map(|(_, r)| r)
                .filter(|r| (r.pid, r.gen) == (s.pid, s.gen) && r.item == *item)
                .filter(|r| r.start >= *given && r.start <= joined + JOIN_WINDOW)
                .min_by_key(|r| r.start);
            let Some(r) = first else { continue };
            fig.handoffs.entry("join").or_default().push((
                Some(r.start - joined),
                format!(
                    "join of {} at {}: item {item} assigned at {}, held at {}",
                    h.who(s.pid, s.gen),
                    h.rel(joined),
                    h.rel(*given),
                    h.rel(r.start)
                ),
            ));
        }
    }
}

/// The nearest-rank percentile `q` of sorted `v`.
fn percentile(v: &[u64], q: f64) -> u64 {
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// "median 0.120s, p99 0.310s, max 0.310s, n 12" over the samples of `causes`.
pub fn stats(fig: &Figures, causes: &[&str]) -> String {
    let samples: Vec<&(Option<u64>, String)> = causes
        .iter()
        .filter_map(|c| fig.handoffs.get(c))
        .flatten()
        .collect();
    let mut took: Vec<u64> = samples.iter().filter_map(|(t, _)| *t).collect();
    took.sort_unstable();
    let never = samples.len() - took.len();
    let mut text = if took.is_empty() {
        "no sample".to_string()
    } else {
        format!(
            "median {}, p99 {}, max {}, n {}",
            rel_ms(percentile(&took, 0.5)),
            rel_ms(percentile(&took, 0.99)),
            rel_ms(*took.last().expect("not empty")),
            took.len()
        )
    };
    if never > 0 {
        text.push_str(&format!(", {never} never held again before the end"));
    }
    text
}

/// The summary's lines.
pub fn lines(h: &History, fig: &Figures, last_fault_end: u64) -> Vec<String> {
    let name = (0..JOBS.len())
        .find(|j| is_resident(*j))
        .map_or("-", |j| JOBS[j].name);
    let mut lines = vec![format!(
        "resident holds ({name}): {} holds; ended: {}",
        fig.holds,
        fig.ended
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    )];
    let latest = fig
        .held_since
        .iter()
        .map(|(_, s)| s.map(|s| s.saturating_sub(last_fault_end)))
        .collect::<Option<Vec<u64>>>();
    lines.push(format!(
        "  held again after the last fault (at {}): {} [bound {}, twice the session timeout]",
        h.rel(last_fault_end),
        match latest {
            Some(v) if !v.is_empty() => format!(
                "every item by a live worker, the last {} after it",
                rel_ms(v.iter().copied().max().unwrap_or(0))
            ),
            Some(_) => "no item".into(),
            None => format!(
                "items {:?} not held at the end",
                fig.held_since
                    .iter()
                    .filter(|(_, s)| s.is_none())
                    .map(|(i, _)| *i)
                    .collect::<Vec<_>>()
            ),
        },
        rel_ms(HELD_AGAIN.as_micros() as u64)
    ));
    lines.push(format!(
        "  hand-off on a join (the joiner's Registered -> its hold of an item taken from a live holder): {}",
        stats(fig, &["join"])
    ));
    lines.push(format!(
        "  hand-off on a leave (worker killed, shut down remotely or drained -> the item's next hold): {}",
        stats(fig, &["kill", "remote shutdown", "drain"])
    ));
    for cause in ["kill", "remote shutdown", "drain", "freeze", "sidecar lost"] {
        lines.push(format!("    {cause}: {}", stats(fig, &[cause])));
    }
    for cause in ["join", "kill", "remote shutdown", "drain"] {
        let slowest = fig.handoffs.get(cause).and_then(|v| {
            v.iter()
                .max_by_key(|(t, _)| t.unwrap_or(u64::MAX))
                .map(|(_, text)| text)
        });
        if let Some(text) = slowest {
            lines.push(format!("    slowest {cause}: {text}"));
        }
    }
    lines.push(format!(
        "  next hold inside a killed holder's lease (allowed: its process was dead and had closed its stream): {}",
        fig.in_killed_lease.len()
    ));
    lines
}

/// The self-check's part: histories with and without overlapping holds, items held again in
/// time and too late, and the hand-off figures of a join.
pub fn self_check() -> Result<String, String> {
    use crate::check::synth::{history, worker, T0};
    use crate::spec::{RESIDENT, RESIDENT_JOB};
    let job = RESIDENT_JOB;
    let end = T0 + 30 * SEC;
    // A hold of `item` by `pid` from `start`, stopped at `stop` (why), else still held.
    let hold = |h: &mut History,
                pid: u32,
                item: i32,
                exec: &str,
                start: u64,
                stop: Option<(u64, &str)>| {
        let p = &h.procs[&pid];
        let (car, slot) = (p.car, p.slot);
        let i = h.runs.len();
        h.run_index.insert((pid, 1, exec.to_string(), item), i);
        h.runs.push(Run {
            job,
            item,
            exec: exec.into(),
            pid,
            gen: 1,
            slot,
            car,
            source: RESIDENT,
            token: 10 + i as i64,
            start,
            plan_ms: -1,
            stop: stop.map(|(t, why)| (t, why.to_string())),
            answer: stop.map(|(t, _)| (t, "decline".to_string())),
            answer_code: stop.map(|_| Some(0)),
            ..Default::default()
        });
    };
    // Workers 700 (car 0) and 701 (car 1) hold three items each from T0 + 1 s; at T0 + 10 s a
    // join of 702 (car 2) moves items 0 and 3 to it: 700 and 701 stop them on Revoke at
    // T0 + 10.05 s and 702 holds them from T0 + 10.1 s.
    let base = |h: &mut History| {
        worker(h, 700, 0, job, &[0, 1, 2], T0, end + 10 * SEC);
        worker(h, 701, 1, job, &[3, 4, 5], T0, end + 10 * SEC);
        worker(h, 702, 2, job, &[], T0 + 10 * SEC, end + 10 * SEC);
        let joiner = h.streams.get_mut(&(702, 1)).expect("702's stream");
        joiner.assignments.push((T0 + 10_040 * MS, vec![0, 3]));
        for item in 0..6 {
            let (pid, moved) = if item < 3 {
                (700, item == 0)
            } else {
                (701, item == 3)
            };
            let stop = moved.then_some((T0 + 10_050 * MS, "revoke"));
            hold(h, pid, item, &format!("h{item}"), T0 + SEC, stop);
        }
    };
    let mut h = history(end);
    base(&mut h);
    hold(&mut h, 702, 0, "j0", T0 + 10_100 * MS, None);
    hold(&mut h, 702, 3, "j3", T0 + 10_100 * MS, None);
    if let Some(v) = Some(overlaps(&h, end)).filter(|v| !v.is_empty()) {
        return Err(format!(
            "hand-offs after each holder stopped were reported: {v:#?}"
        ));
    }
    let mut fig = Figures::default();
    let v = held_again(&h, end, T0 + 10 * SEC, &mut fig);
    if !v.is_empty() {
        return Err(format!(
            "items held again 0.1 s after a join were reported: {v:#?}"
        ));
    }
    handoffs(&h, end, &mut fig);
    let joins: Vec<Option<u64>> = fig
        .handoffs
        .get("join")
        .map_or(Vec::new(), |v| v.iter().map(|(t, _)| *t).collect());
    if joins != [Some(100 * MS), Some(100 * MS)] {
        return Err(format!(
            "the join's two hand-offs were not timed at 0.1 s: {:?}",
            fig.handoffs
        ));
    }
    // The joiner starts item 3 before 701 stopped it: two holds at once.
    let mut h = history(end);
    base(&mut h);
    hold(&mut h, 702, 0, "j0", T0 + 10_100 * MS, None);
    hold(&mut h, 702, 3, "j3", T0 + 10 * SEC, None);
    let v = overlaps(&h, end);
    if v.len() != 1 || v[0].class != "safety" {
        return Err(format!(
            "a hold started 50 ms before its holder stopped was not one overlap: {v:#?}"
        ));
    }
    // A frozen holder's hold lasts to its lease's end, not to the freeze: 700 is stopped at
    // T0 + 12 s and its leases (renewed every 0.5 s for 2 s) end at T0 + 14 s at the latest.
    let frozen = |next_at: u64| {
        let mut h = history(end);
        base(&mut h);
        h.procs
            .get_mut(&700)
            .expect("700")
            .pauses
            .push((T0 + 12 * SEC, Some(T0 + 20 * SEC)));
        let s = h.streams.get_mut(&(700, 1)).expect("700's stream");
        s.leases.retain(|(t, _)| *t <= T0 + 12 * SEC);
        hold(&mut h, 701, 1, "after-freeze", next_at, None);
        overlaps(&h, end)
    };
    if frozen(T0 + 13 * SEC).is_empty() {
        return Err("a hold inside a frozen holder's lease was not an overlap".into());
    }
    if !frozen(T0 + 14_100 * MS).is_empty() {
        return Err("a hold after a frozen holder's lease ended was an overlap".into());
    }
    // A killed holder's hold ends with its process.
    let mut h = history(end);
    base(&mut h);
    hold(&mut h, 702, 0, "j0", T0 + 10_100 * MS, None);
    hold(&mut h, 702, 3, "j3", T0 + 10_100 * MS, None);
    h.procs.get_mut(&700).expect("700").killed = Some(T0 + 12 * SEC);
    hold(&mut h, 701, 2, "after-kill", T0 + 12_200 * MS, None);
    if !overlaps(&h, end).is_empty() {
        return Err("a hold after its holder's SIGKILL was an overlap".into());
    }
    let mut fig = Figures::default();
    handoffs(&h, end, &mut fig);
    if fig.in_killed_lease.len() != 1 || stats(&fig, &["kill"]).contains("no sample") {
        return Err(format!(
            "a hand-off inside a killed holder's lease was not counted: {fig:?}"
        ));
    }
    // (b): items 1 and 2, their holder killed at T0 + 12 s (the last fault's end), are never
    // held again; then item 1 is, 9 s later (past the 8 s bound), and item 2 after 2 s.
    let v = held_again(&h, end, T0 + 12 * SEC, &mut Figures::default());
    if v.len() != 1 || !v[0].text.contains("item 1: not held") {
        return Err(format!(
            "an item never held again after the last fault was not reported: {v:#?}"
        ));
    }
    hold(&mut h, 701, 1, "late", T0 + 21 * SEC, None);
    let v = held_again(&h, end, T0 + 12 * SEC, &mut Figures::default());
    if v.len() != 1 || !v[0].text.contains("only at") {
        return Err(format!(
            "an item held again 9 s after the last fault was not reported: {v:#?}"
        ));
    }
    Ok(format!(
        "resident holds: a hand-off after the holder stopped passes and one 50 ms early is an overlap; a frozen holder's hold lasts to its lease's end, a killed one's to its death; an item held again 9 s after the last fault, or never, is reported (bound {}); a join's hand-offs are timed",
        rel_ms(HELD_AGAIN.as_micros() as u64)
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_resident_checks_catch_overlaps_and_late_holds() {
        match super::self_check() {
            Ok(line) => eprintln!("{line}"),
            Err(e) => panic!("{e}"),
        }
    }
}
