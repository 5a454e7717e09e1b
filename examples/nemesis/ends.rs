//! The execution-end invariant (liveness): once its worker has let go of a run (answered or
//! declined it once, stopped it, or went away), the item's `running` node carrying the run's
//! fencing token must leave ZooKeeper — the answer recorded or the item released — within a
//! bound derived from the settings. Nothing obliges a worker to send an answer twice (rule 3
//! of the contract), so no execution may wait for that: the minimal workers never do, and
//! the answer-aimed faults make the sidecar's write of their answer go unconfirmed (#53).
//!
//! The nemesis probes the node of every run let go of (`cluster::World::probe_holds`) and
//! records when it last saw it held and first saw it gone; this module turns those sightings
//! into violations ([`executions_end`]) and figures. The bounds: [`CALM`] after an answer,
//! [`AFTER_WORKER`] after a worker that went silent, [`AFTER_FAULT`] after a fault on the
//! sidecar's way to ZooKeeper.

use crate::check::{rel_ms, Figures, Params, Violation, MS, SEC};
use crate::history::{FaultRec, History, Run, UNAVAILABLE};
use crate::schedule::{Kind, Scope};
use crate::spec::{JOBS, KEEPALIVE, LEASE, PROBE, SESSION, ZK_OP, ZK_RETRY, ZK_TICK};
use std::time::Duration;

const fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

/// How long an execution may outlive its worker's answer while its sidecar reaches ZooKeeper:
/// the answer's write gets no reply within the sidecar's call deadline ([`ZK_OP`]), the
/// sidecar reads the job again after [`ZK_RETRY`] (another call) and finds the write did not
/// land, and writes it again (a third call); plus [`PROBE`], the longest the node's removal
/// can go unseen. With the soak's settings: 3 × 1 s + 0.2 s + 0.25 s = 3.45 s.
pub const CALM: Duration = Duration::from_micros(3 * us(ZK_OP) + us(ZK_RETRY) + us(PROBE));

/// How long an execution may outlive the end of a fault that kept its sidecar from ZooKeeper
/// (the sidecar's bytes cut or frozen, the sidecar partitioned, stopped, killed or drained, a
/// ZooKeeper node killed). Within the session timeout of the fault's end the sidecar is
/// connected again in its session (its client must reconnect within the session timeout, or
/// the session is lost) or ZooKeeper has expired the session, on its first tick after the
/// timeout ([`ZK_TICK`]). An expired session's `running` nodes go with it (failover off:
/// ephemeral) or are released by a session that works: the sidecar's next one after its first
/// reads (one more call, [`ZK_OP`]) or a peer's leader; then as [`CALM`]. With the soak's
/// settings: 4 s + 0.5 s + 1 s + 3.45 s = 8.95 s.
pub const AFTER_FAULT: Duration =
    Duration::from_micros(us(SESSION) + us(ZK_TICK) + us(ZK_OP) + us(CALM));

/// How long an execution may outlive the moment its worker went silent (its stream ended, its
/// process died, or it was stopped): the sidecar may learn of it only by its keepalive
/// ([`KEEPALIVE`]), renewing the lease until then, and holds the execution until that lease has
/// run out ([`LEASE`]); then as [`CALM`]. With the soak's settings: 4 s + 2 s + 3.45 s = 9.45 s.
pub const AFTER_WORKER: Duration = Duration::from_micros(us(KEEPALIVE) + us(LEASE) + us(CALM));

/// When the worker of `r` let go of it, how (for messages), and the bound before any fault
/// extends it: an answer or a decline is the sidecar's to record at once ([`CALM`]); a run
/// stopped without one (its Decline muted by a hang) is released when the lease ends, at most
/// a lease after a Revoke that stops renewals; a run whose stream ended, whose process died or
/// whose lease ran out unnoticed (a paused worker) waits as [`AFTER_WORKER`] says.
fn let_go(h: &History, r: &Run, now: u64) -> Option<(u64, String, u64)> {
    if let Some((t, kind)) = &r.answer {
        return Some((*t, format!("answered {kind}"), *t + us(CALM)));
    }
    if let Some((t, why)) = r.stop.as_ref().filter(|(_, why)| why != "stream") {
        return Some((
            *t,
            format!("stopped ({why}), no decline sent"),
            *t + us(LEASE) + us(CALM),
        ));
    }
    let stream = h.streams.get(&(r.pid, r.gen));
    let silent = [
        h.procs.get(&r.pid).and_then(|p| p.gone()),
        stream.and_then(|s| s.ended),
        stream
            .map(|s| s.lease_cover_end(r.start))
            .filter(|e| *e <= now),
    ]
    .into_iter()
    .flatten()
    .filter(|t| *t >= r.start)
    .min()?;
    Some((
        silent,
        "its worker went silent".into(),
        silent + us(AFTER_WORKER),
    ))
}

/// Session-losing faults of a sidecar: while its session may be lost, its items can also be
/// released by a peer's leader, so faults on the other sidecars matter too.
fn loses_session(kind: &Kind) -> bool {
    matches!(
        kind,
        Kind::SidecarKill { .. }
            | Kind::SidecarPauseLong { .. }
            | Kind::SessionExpiry { .. }
            | Kind::SidecarTerm { .. }
    )
}

/// When a fault stops keeping a sidecar from ZooKeeper: its end (healed, resumed, restarted);
/// for a ZooKeeper node kill, once its settling is over (a leader election and the clients'
/// moves to live nodes; see [`Kind::settle`]), not when the node is back.
fn clear_of(fr: &FaultRec, now: u64) -> u64 {
    if matches!(fr.kind, Kind::ZkKill { .. }) {
        fr.start + us(fr.kind.settle())
    } else {
        fr.end.unwrap_or(now)
    }
}

/// The instant by which the execution of run `r` must have left ZooKeeper, once its worker let
/// go at `t` with `base` as the calm bound: every fault on the sidecar's way to ZooKeeper (its
/// own sidecar, ZooKeeper itself; every sidecar while its own may have lost its session) that
/// starts before the bound and whose effect could reach past `t` moves it to the fault's end +
/// [`AFTER_FAULT`]; the worker's own pause, stream end or death moves it as [`AFTER_WORKER`]
/// says. Faults that start after the bound excuse nothing: the execution was due before them.
/// Returns the bound and the faults that moved it.
fn end_bound(h: &History, r: &Run, t: u64, base: u64, now: u64) -> (u64, Vec<String>) {
    let mut bound = base;
    let mut why: Vec<String> = Vec::new();
    let proc_ = h.procs.get(&r.pid);
    let stream = h.streams.get(&(r.pid, r.gen));
    loop {
        let mut next = bound;
        let mut reasons: Vec<String> = Vec::new();
        let mut extend = |to: u64, reason: String| {
            if to > next {
                next = to;
                reasons.push(reason);
            }
        };
        // The worker's own silences after it let go.
        if let Some(p) = proc_ {
            for (a, b) in &p.pauses {
                let b = b.unwrap_or(now);
                if *a <= bound && b >= t {
                    let to = b.max(*a + us(KEEPALIVE) + us(LEASE)) + us(CALM);
                    extend(to, format!("its worker paused at {}", h.rel(*a)));
                }
            }
            if let Some(g) = p.gone().filter(|g| *g >= t && *g <= bound) {
                extend(
                    g + us(AFTER_WORKER),
                    format!("its worker gone at {}", h.rel(g)),
                );
            }
        }
        if let Some(e) = stream
            .and_then(|s| s.ended)
            .filter(|e| *e >= t && *e <= bound)
        {
            extend(
                e + us(AFTER_WORKER),
                format!("its stream ended at {}", h.rel(e)),
            );
        }
        // Faults on the sidecar's way to ZooKeeper.
        let lost = h.faults.iter().any(|fr| {
            fr.kind.car() == Some(r.car)
                && loses_session(&fr.kind)
                && fr.start <= bound
                && clear_of(fr, now) + us(AFTER_FAULT) > t
        });
        for fr in &h.faults {
            let relevant = match fr.scope() {
                Scope::Global => true,
                Scope::Car(c) => c == r.car || lost,
                _ => false,
            };
            let clear = clear_of(fr, now);
            if relevant && fr.start <= bound && clear + us(AFTER_FAULT) > t {
                extend(
                    clear + us(AFTER_FAULT),
                    format!("fault #{} {} until {}", fr.id, fr.kind.name(), h.rel(clear)),
                );
            }
        }
        if next == bound {
            return (bound, why);
        }
        bound = next;
        why.extend(reasons);
    }
}

/// Every execution ends: a run its worker let go of must leave ZooKeeper (its `running` node
/// with its token gone) by its bound ([`end_bound`]). Only sightings count: the probe's last
/// sighting of the node after the bound is the violation. Also gathers the figures of the
/// minimal workers' answers and of the answer-aimed faults.
pub fn executions_end(h: &History, p: &Params, fig: &mut Figures) -> Vec<Violation> {
    let now = p.t_end;
    let mut out = Vec::new();
    fig.ends_seen = 0;
    fig.ends_pending = 0;
    fig.end_worst = None;
    fig.end_worst_calm = None;
    fig.minimal_replies.clear();
    for r in &h.runs {
        if h.procs.get(&r.pid).is_some_and(|p| p.minimal) {
            if let Some((_, kind)) = &r.answer {
                let reply = match r.answer_code {
                    None => "no reply yet".to_string(),
                    Some(None) => "void (stream ended)".to_string(),
                    Some(Some(0)) => "OK".to_string(),
                    Some(Some(UNAVAILABLE)) if r.answer_held => {
                        "UNAVAILABLE, held by the sidecar".to_string()
                    }
                    Some(Some(c)) => format!("{:?}", tonic::Code::from(c)),
                };
                *fig.minimal_replies
                    .entry(format!("{kind}: {reply}"))
                    .or_default() += 1;
            }
        }
        let Some((t, how, base)) = let_go(h, r, now) else {
            continue;
        };
        let (bound, why) = end_bound(h, r, t, base, now);
        match r.gone_seen {
            Some(g) => {
                fig.ends_seen += 1;
                let took = g.saturating_sub(t);
                let text = format!("{} ({how}) -> gone {}", h.describe(r), h.rel(g));
                if fig.end_worst.as_ref().is_none_or(|(w, _)| took > *w) {
                    fig.end_worst = Some((took, text.clone()));
                }
                let calm = why.is_empty() && r.answer.is_some();
                if calm && fig.end_worst_calm.as_ref().is_none_or(|(w, _)| took > *w) {
                    fig.end_worst_calm = Some((took, text));
                }
            }
            None if r.held_seen.is_some() => fig.ends_pending += 1,
            None => {}
        }
        let Some(seen) = r.held_seen.filter(|s| *s > bound) else {
            continue;
        };
        out.push(Violation {
            key: format!("outlived {} {}", r.exec, r.item),
            at: bound,
            class: "liveness",
            text: format!(
                "{} item {}: execution {} outlived its bound: its worker let go at {} ({how}), it had to leave ZooKeeper by {} ({}), but its running node (token {}) was still there at {}{}:\n      {}",
                JOBS[r.job].name,
                r.item,
                r.exec,
                h.rel(t),
                h.rel(bound),
                if why.is_empty() {
                    format!("{} after it", rel_ms(bound - t))
                } else {
                    format!("moved by {}", why.join(", "))
                },
                r.token,
                h.rel(seen),
                r.gone_seen
                    .map_or(" and never seen gone".into(), |g| format!(", gone at {}", h.rel(g))),
                h.describe(r)
            ),
        });
    }
    fig.aimed = 0;
    fig.aimed_fired = 0;
    fig.aimed_lines.clear();
    for fr in h.faults.iter().filter(|f| f.kind.aimed_at_answer()) {
        fig.aimed += 1;
        let Some(aim) = &fr.fired else { continue };
        fig.aimed_fired += 1;
        let runs: Vec<String> = aim
            .items
            .iter()
            .filter_map(|i| {
                h.runs.iter().find(|r| {
                    r.pid == aim.pid && r.gen == aim.gen && r.exec == aim.exec && r.item == *i
                })
            })
            .map(|r| {
                let reply = match (r.answer_code, r.answer_held) {
                    (Some(Some(0)), _) => "OK".to_string(),
                    (Some(Some(UNAVAILABLE)), true) => "UNAVAILABLE (held)".to_string(),
                    (Some(Some(c)), _) => format!("{:?}", tonic::Code::from(c)),
                    (Some(None), _) => "void".to_string(),
                    (None, _) => "no reply".to_string(),
                };
                let answered = r.answer.as_ref().map(|(t, k)| (*t, k.clone()));
                format!(
                    "item {} {} -> {reply}{}; node gone {}",
                    r.item,
                    answered.as_ref().map_or("-".into(), |(_, k)| k.clone()),
                    r.answer_ms
                        .map_or(String::new(), |ms| format!(" after {ms} ms")),
                    match (r.gone_seen, answered) {
                        (Some(g), Some((t, _))) => format!(
                            "{:.2}s after the answer, {:.2}s after the fault's end",
                            g.saturating_sub(t) as f64 / 1e6,
                            g as f64 / 1e6 - aim.until as f64 / 1e6
                        ),
                        (Some(g), None) => h.rel(g),
                        (None, _) => "never seen".into(),
                    }
                )
            })
            .collect();
        fig.aimed_lines.push(format!(
            "#{:02} {} {:.3}s at {} on {} {}: {}",
            fr.id,
            fr.kind.name(),
            aim.until.saturating_sub(aim.at) as f64 / 1e6,
            h.rel(aim.at),
            h.who(aim.pid, aim.gen),
            aim.exec,
            runs.join("; ")
        ));
    }
    out
}

/// The self-check's part: histories that break the invariant (and some that do not). `clean`
/// makes the self-check's clean history (job 2, worker 100 on sidecar 0, every fire run).
pub fn self_check(p: &Params, clean: &dyn Fn() -> History) -> Result<String, String> {
    use crate::check::synth::T0;
    // Every execution ends: item 0's run of the fire at T0 + 10 s, answered once by a minimal
    // worker (UNAVAILABLE: held by the sidecar), its running node probed after the answer.
    let a_fire = T0 + 10 * SEC;
    let stalled = |held_for: u64, gone_after: Option<u64>, faults: Vec<FaultRec>| {
        let mut h = clean();
        h.procs.get_mut(&100).expect("worker 100").minimal = true;
        let r = h
            .runs
            .iter_mut()
            .find(|r| r.item == 0 && r.fire_us == a_fire)
            .expect("the run of item 0 at T0 + 10 s");
        let answered = r.answer.as_ref().expect("answered").0;
        r.answer_code = Some(Some(UNAVAILABLE));
        r.answer_held = true;
        r.held_seen = Some(answered + held_for);
        r.gone_seen = gone_after.map(|g| answered + g);
        h.faults.extend(faults);
        let v = executions_end(&h, p, &mut Figures::default());
        (answered, v)
    };
    let outlived = |v: &[Violation]| v.iter().filter(|v| v.key.starts_with("outlived")).count();
    let (_, v) = stalled(2 * SEC, Some(2_200 * MS), Vec::new());
    if !v.is_empty() {
        return Err(format!(
            "an execution that left ZooKeeper 2.2 s after its answer was reported: {v:?}"
        ));
    }
    let (answered, v) = stalled(20 * SEC, None, Vec::new());
    if outlived(&v) != 1 || v.iter().any(|v| v.class != "liveness") {
        return Err(format!(
            "an execution still held 20 s after its worker's only answer, no fault near, was not one liveness violation: {v:?}"
        ));
    }
    // An answer-aimed cut on its sidecar (car 0) from just before the answer for 1.3 s moves
    // the bound to the cut's end + AFTER_FAULT, no further; a fault that starts after that
    // bound excuses nothing.
    let cut = |id: usize, kind: Kind, start: u64, end: u64| FaultRec {
        id,
        kind,
        start,
        end: Some(end),
        note: String::new(),
        victim: None,
        fired: None,
    };
    let answer_cut = cut(
        1,
        Kind::AnswerCut {
            car: 0,
            hold: std::time::Duration::from_millis(1_300),
        },
        answered - SEC,
        answered + 1_300 * MS,
    );
    let (_, v) = stalled(9 * SEC, Some(10 * SEC), vec![answer_cut.clone()]);
    if !v.is_empty() {
        return Err(format!(
            "an execution that left ZooKeeper within the bound after an answer-aimed cut was reported: {v:?}"
        ));
    }
    let late_kill = cut(
        2,
        Kind::SidecarKill {
            car: 0,
            restart_after: std::time::Duration::from_secs(1),
        },
        answered + 12 * SEC,
        answered + 13 * SEC,
    );
    let (_, v) = stalled(15 * SEC, Some(16 * SEC), vec![answer_cut, late_kill]);
    if outlived(&v) != 1 {
        return Err(format!(
            "an execution held 15 s after its answer, past the bound after an answer-aimed cut, and ended only by a later sidecar kill, was not reported: {v:?}"
        ));
    }
    // A fault on another sidecar moves nothing.
    let other = cut(
        3,
        Kind::Partition {
            car: 1,
            hold: std::time::Duration::from_secs(2),
        },
        answered,
        answered + 2 * SEC,
    );
    let (_, v) = stalled(8 * SEC, None, vec![other]);
    if outlived(&v) != 1 {
        return Err(format!(
            "a partition of another sidecar excused an execution held 8 s after its answer: {v:?}"
        ));
    }
    Ok(format!(
        "executions end: one held 20 s after its only answer caught, 2.2 s passes; an answer-aimed cut moves the bound to its end + {:.2}s and no further; a later sidecar kill or another sidecar's partition excuses nothing",
        AFTER_FAULT.as_secs_f64()
    ))
}
