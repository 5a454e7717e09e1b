//! The fault schedule: a pure function of the seed, the soak duration and the ensemble size.
//! Every random choice is drawn here, up front, from one `StdRng` seeded with the seed; nothing
//! at run time (timing, what the cluster did) changes what is injected, when, or against which
//! target. Where a target can only be resolved at run time (the ZooKeeper leader), the schedule
//! says which role to hit and the fault log says which node that was.
//!
//! Faults are spread over the soak with seed-drawn gaps. A few exclusion rules keep the cluster
//! recoverable: one fault per worker slot, per sidecar and per ZooKeeper role at a time (never two
//! ZooKeeper nodes down: the ensemble keeps its quorum), at most two sidecars faulted at once, and
//! every fault (restarts included) over before the soak's end.
//!
//! Answer-aimed faults (`answer-cut`, `answer-freeze`) are armed at their offset and fire the
//! moment a minimal worker of their sidecar sends an answer, within [`ARM_FOR`]: the schedule
//! says which sidecar and how long, the fault log says which answer it hit and when (or that
//! none came). Besides their own time they keep their sidecar and its minimal workers free of
//! other faults for the execution bound after a fault ([`crate::ends::AFTER_FAULT`]), so that
//! an execution the sidecar left stalled shows as a violation instead of being ended (or
//! excused) by the next fault on that sidecar.

use crate::spec::{self, JOBS, LEASE, SESSION, SIDECARS, SLOTS};

/// How long an answer-aimed fault waits for a minimal worker of its sidecar to answer. The
/// minimal jobs fire every 1 and 2 s and their items take up to 1.5 s, so a minimal worker that
/// owns an item answers within 3.5 s.
pub const ARM_FOR: Duration = Duration::from_secs(4);
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// What a fault does. Durations are seed-drawn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Kind {
    /// SIGKILL a worker process; its slot gets a new process `restart_after` later.
    WorkerKill {
        slot: usize,
        restart_after: Duration,
    },
    /// SIGSTOP a worker, SIGCONT after `hold`.
    WorkerPause { slot: usize, hold: Duration },
    /// A short-lived extra worker of `job` on `car` whose Subscribe calls are cancelled after
    /// these many milliseconds each, in the middle of the join.
    JoinCancel {
        car: usize,
        job: usize,
        delays_ms: Vec<u32>,
    },
    /// Items started by the worker during `hold` take 2–4.5 s.
    WorkerSlow { slot: usize, hold: Duration },
    /// The worker never answers during `hold`: items started then do not end on their own, and
    /// nothing (Complete, failure, Decline) is sent for them until it is over. It still stops
    /// them on Revoke and when its lease runs out (the sidecar then waits for the lease).
    WorkerHang { slot: usize, hold: Duration },
    /// SIGKILL a sidecar, start it again `restart_after` later.
    SidecarKill { car: usize, restart_after: Duration },
    /// SIGSTOP a sidecar for longer than the session timeout.
    SidecarPauseLong { car: usize, hold: Duration },
    /// SIGSTOP a sidecar for longer than the lease but less than the session timeout.
    SidecarPauseShort { car: usize, hold: Duration },
    /// SIGTERM a sidecar (graceful drain), start it again `restart_after` after it exited.
    SidecarTerm { car: usize, restart_after: Duration },
    /// SIGKILL the ZooKeeper leader (or a follower), start it again `restart_after` later.
    ZkKill {
        leader: bool,
        restart_after: Duration,
    },
    /// Partition a sidecar from every ZooKeeper node, shorter than the session timeout.
    Partition { car: usize, hold: Duration },
    /// Partition a sidecar long enough for ZooKeeper to expire its session.
    SessionExpiry { car: usize, hold: Duration },
    /// Every sidecar's ZooKeeper connections frozen (nothing in or out) for more than a quarter
    /// of the session timeout.
    ZkSilent { hold: Duration },
    /// ElasticJob's trigger-once for every instance of the job (`trigger/{id}` nodes).
    Trigger { job: usize },
    /// `sharding/{i}/disabled` for `hold`.
    DisableItem {
        job: usize,
        item: i32,
        hold: Duration,
    },
    /// `servers/{ip}` = DISABLED in one job for `hold`.
    DisableServer {
        job: usize,
        car: usize,
        hold: Duration,
    },
    /// Remote shutdown: delete `instances/{id}` of the slot's current instance. The worker
    /// finishes, its stream ends, it exits; the slot gets a new process a second later.
    RemoteShutdown { slot: usize },
    /// Armed on the minimal workers of sidecar `car`: when one sends an answer, every byte that
    /// sidecar sends to ZooKeeper is thrown away for `hold` (its connections stay open;
    /// ZooKeeper's replies still flow). The answer's write never reaches ZooKeeper; the sidecar
    /// must find that out and write it again itself (#53).
    AnswerCut { car: usize, hold: Duration },
    /// Armed as [`Kind::AnswerCut`]; when the answer comes, every sidecar's ZooKeeper
    /// connections are frozen (nothing in or out, then delivered) for `hold`: the answer's
    /// write, or its reply, waits past the sidecar's call deadline.
    AnswerFreeze { car: usize, hold: Duration },
    /// Never scheduled: the host stopped every process of the soak for `hold` (its wall clock
    /// jumped past its monotonic clock, or the nemesis's clock watch was not run at all), as a
    /// virtual machine's pause does. The nemesis records it when it sees it
    /// (`main::watch_host_clock`), as a fault it did not inject, on every sidecar.
    HostPause { hold: Duration },
}

/// What a fault may disturb, for the checker: fires inside a fault's window and scope are not
/// held to the strict "ran at its own fire instant" rule (they must still run eventually).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scope {
    /// Every job (ZooKeeper faults: every sidecar's session is disturbed).
    Global,
    /// The items owned by the workers of one sidecar (sidecar faults). Their effect on the
    /// other sidecars' items (reshards when its instances leave, failover claims that keep
    /// members busy) is seen by the checker itself: assignment changes and busy members.
    Car(usize),
    /// One job (worker faults reshard it; operations change it).
    Job(usize),
    /// One item of one job.
    Item(usize, i32),
    /// The items owned by one worker slot.
    Slot(usize),
}

/// One scheduled fault.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// 1-based, in schedule order.
    pub id: usize,
    /// Offset from the start of the soak.
    pub at: Duration,
    pub kind: Kind,
}

/// A resource a fault holds while it lasts, so that two faults never fight over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Res {
    Slot(usize),
    Car(usize),
    Zk,
    Trigger(usize),
    Item(usize, i32),
    Server(usize, usize),
}

fn secs(rng: &mut StdRng, lo: f64, hi: f64) -> Duration {
    // Millisecond resolution, so the printed schedule is the schedule.
    let ms = rng.random_range((lo * 1000.0) as u64..=(hi * 1000.0) as u64);
    Duration::from_millis(ms)
}

impl Kind {
    /// The short name used in the fault log.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::WorkerKill { .. } => "worker-kill",
            Kind::WorkerPause { .. } => "worker-pause",
            Kind::JoinCancel { .. } => "join-cancel",
            Kind::WorkerSlow { .. } => "worker-slow",
            Kind::WorkerHang { .. } => "worker-hang",
            Kind::SidecarKill { .. } => "sidecar-kill",
            Kind::SidecarPauseLong { .. } => "sidecar-pause-long",
            Kind::SidecarPauseShort { .. } => "sidecar-pause-short",
            Kind::SidecarTerm { .. } => "sidecar-term",
            Kind::ZkKill { leader: true, .. } => "zk-kill-leader",
            Kind::ZkKill { leader: false, .. } => "zk-kill-follower",
            Kind::Partition { .. } => "partition",
            Kind::SessionExpiry { .. } => "session-expiry",
            Kind::ZkSilent { .. } => "zk-silent",
            Kind::Trigger { .. } => "op-trigger",
            Kind::DisableItem { .. } => "op-disable-item",
            Kind::DisableServer { .. } => "op-disable-server",
            Kind::RemoteShutdown { .. } => "op-remote-shutdown",
            Kind::AnswerCut { .. } => "answer-cut",
            Kind::AnswerFreeze { .. } => "answer-freeze",
            Kind::HostPause { .. } => "host-pause",
        }
    }

    /// Whether the fault waits for an answer before it acts.
    pub fn aimed_at_answer(&self) -> bool {
        matches!(self, Kind::AnswerCut { .. } | Kind::AnswerFreeze { .. })
    }

    /// How long the fault holds its resources at most, from its start (restarts included).
    fn reservation(&self) -> Duration {
        let s = Duration::from_secs;
        match self {
            Kind::WorkerKill { restart_after, .. } => *restart_after + s(1),
            Kind::WorkerPause { hold, .. }
            | Kind::WorkerSlow { hold, .. }
            | Kind::WorkerHang { hold, .. }
            | Kind::SidecarPauseLong { hold, .. }
            | Kind::SidecarPauseShort { hold, .. }
            | Kind::Partition { hold, .. }
            | Kind::SessionExpiry { hold, .. }
            | Kind::ZkSilent { hold }
            | Kind::DisableItem { hold, .. }
            | Kind::DisableServer { hold, .. } => *hold + s(1),
            Kind::JoinCancel { .. } | Kind::Trigger { .. } => s(1),
            Kind::SidecarKill { restart_after, .. } => *restart_after + s(3),
            // The drain may take the whole default grace (10 s).
            Kind::SidecarTerm { restart_after, .. } => *restart_after + s(14),
            // A JVM restart on a busy machine.
            Kind::ZkKill { restart_after, .. } => *restart_after + s(15),
            Kind::RemoteShutdown { .. } => s(4),
            Kind::AnswerCut { hold, .. } | Kind::AnswerFreeze { hold, .. } => {
                ARM_FOR + *hold + s(1)
            }
            Kind::HostPause { hold } => *hold,
        }
    }

    /// What the fault holds and for how long from its start: every resource for its
    /// [`Kind::reservation`]; an answer-aimed fault also keeps its sidecar and that sidecar's
    /// minimal workers calm for the execution bound after it (see the module docs).
    fn claims(&self) -> Vec<(Res, Duration)> {
        let own = self.reservation();
        let mut claims: Vec<(Res, Duration)> =
            self.resources().into_iter().map(|r| (r, own)).collect();
        if self.aimed_at_answer() {
            let quiet = own + crate::ends::AFTER_FAULT;
            for (res, until) in claims.iter_mut() {
                if matches!(res, Res::Car(_) | Res::Slot(_)) {
                    *until = quiet;
                }
            }
        }
        claims
    }

    /// How long from its start until the fault and its claims are over.
    fn claimed_for(&self) -> Duration {
        self.claims()
            .iter()
            .map(|(_, d)| *d)
            .max()
            .unwrap_or_default()
    }

    fn resources(&self) -> Vec<Res> {
        match self {
            Kind::WorkerKill { slot, .. }
            | Kind::WorkerPause { slot, .. }
            | Kind::WorkerSlow { slot, .. }
            | Kind::WorkerHang { slot, .. }
            | Kind::RemoteShutdown { slot } => vec![Res::Slot(*slot)],
            Kind::JoinCancel { car, job, .. } => vec![Res::Slot(spec::slot_of(*car, *job))],
            Kind::SidecarKill { car, .. }
            | Kind::SidecarPauseLong { car, .. }
            | Kind::SidecarPauseShort { car, .. }
            | Kind::SidecarTerm { car, .. }
            | Kind::Partition { car, .. }
            | Kind::SessionExpiry { car, .. } => vec![Res::Car(*car)],
            Kind::ZkKill { .. } | Kind::ZkSilent { .. } => vec![Res::Zk],
            Kind::Trigger { job } => vec![Res::Trigger(*job)],
            Kind::DisableItem { job, item, .. } => vec![Res::Item(*job, *item)],
            Kind::DisableServer { job, car, .. } => vec![Res::Server(*job, *car)],
            Kind::AnswerCut { car, .. } => {
                let mut res = vec![Res::Car(*car)];
                res.extend(spec::minimal_slots(*car).into_iter().map(Res::Slot));
                res
            }
            Kind::AnswerFreeze { car, .. } => {
                let mut res = vec![Res::Zk, Res::Car(*car)];
                res.extend(spec::minimal_slots(*car).into_iter().map(Res::Slot));
                res
            }
            Kind::HostPause { .. } => Vec::new(),
        }
    }

    /// Which fires the fault may disturb (see [`Scope`]).
    pub fn scope(&self) -> Scope {
        match self {
            Kind::WorkerKill { slot, .. }
            | Kind::WorkerPause { slot, .. }
            | Kind::RemoteShutdown { slot } => Scope::Job(spec::job_of_slot(*slot)),
            Kind::JoinCancel { job, .. }
            | Kind::Trigger { job }
            | Kind::DisableServer { job, .. } => Scope::Job(*job),
            Kind::WorkerSlow { slot, .. } | Kind::WorkerHang { slot, .. } => Scope::Slot(*slot),
            Kind::DisableItem { job, item, .. } => Scope::Item(*job, *item),
            Kind::SidecarKill { car, .. }
            | Kind::SidecarPauseLong { car, .. }
            | Kind::SidecarPauseShort { car, .. }
            | Kind::SidecarTerm { car, .. }
            | Kind::Partition { car, .. }
            | Kind::SessionExpiry { car, .. }
            | Kind::AnswerCut { car, .. } => Scope::Car(*car),
            Kind::ZkKill { .. }
            | Kind::ZkSilent { .. }
            | Kind::AnswerFreeze { .. }
            | Kind::HostPause { .. } => Scope::Global,
        }
    }

    /// How long after the fault's end the cluster may still be settling (reshards, session
    /// expiry of a dead member, catch-ups): the checker's window is [start − 0.3 s, end + this]
    /// (for a ZooKeeper node kill, [start − 0.3 s, start + this]; for a sidecar fault, the end is
    /// at least start + the session timeout).
    pub fn settle(&self) -> Duration {
        let s = Duration::from_secs;
        match self {
            Kind::SidecarKill { .. }
            | Kind::SidecarPauseLong { .. }
            | Kind::SidecarPauseShort { .. }
            | Kind::Partition { .. }
            | Kind::SessionExpiry { .. } => s(3),
            // A drain that cannot reach ZooKeeper exits without closing its session, whose
            // instances (and the `running` nodes they hold) then last until it expires.
            Kind::SidecarTerm { .. } => SESSION + s(1),
            // From the kill (see `FaultRec::window`): a leader election, reconnections.
            Kind::ZkKill { .. } => SESSION + s(2),
            Kind::ZkSilent { .. } | Kind::AnswerCut { .. } | Kind::AnswerFreeze { .. } => s(3),
            // Every lease ran out on the wall clock meanwhile, as after a worker's pause.
            Kind::WorkerPause { .. } | Kind::HostPause { .. } => LEASE + s(2),
            Kind::WorkerSlow { .. } | Kind::WorkerHang { .. } => s(7),
            Kind::WorkerKill { .. } | Kind::JoinCancel { .. } | Kind::DisableItem { .. } => s(2),
            Kind::Trigger { .. } => s(3),
            Kind::DisableServer { .. } => s(3),
            Kind::RemoteShutdown { .. } => s(4),
        }
    }

    /// The sidecar a fault hits, if it hits one.
    pub fn car(&self) -> Option<usize> {
        match self {
            Kind::SidecarKill { car, .. }
            | Kind::SidecarPauseLong { car, .. }
            | Kind::SidecarPauseShort { car, .. }
            | Kind::SidecarTerm { car, .. }
            | Kind::Partition { car, .. }
            | Kind::SessionExpiry { car, .. }
            | Kind::AnswerCut { car, .. } => Some(*car),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |d: &Duration| format!("{:.3}s", d.as_secs_f64());
        let slot = |s: &usize| {
            format!(
                "slot={s} ({} on {})",
                JOBS[spec::job_of_slot(*s)].name,
                spec::car_ip(spec::car_of_slot(*s))
            )
        };
        let car = |c: &usize| format!("car={c} ({})", spec::car_ip(*c));
        write!(f, "{:<20}", self.name())?;
        match self {
            Kind::WorkerKill {
                slot: s,
                restart_after,
            } => write!(f, "{} restart-after={}", slot(s), d(restart_after)),
            Kind::WorkerPause { slot: s, hold }
            | Kind::WorkerSlow { slot: s, hold }
            | Kind::WorkerHang { slot: s, hold } => write!(f, "{} for={}", slot(s), d(hold)),
            Kind::JoinCancel {
                car: c,
                job,
                delays_ms,
            } => write!(
                f,
                "{} job={} cancel-after-ms={delays_ms:?}",
                car(c),
                JOBS[*job].name
            ),
            Kind::SidecarKill {
                car: c,
                restart_after,
            }
            | Kind::SidecarTerm {
                car: c,
                restart_after,
            } => write!(f, "{} restart-after={}", car(c), d(restart_after)),
            Kind::SidecarPauseLong { car: c, hold }
            | Kind::SidecarPauseShort { car: c, hold }
            | Kind::Partition { car: c, hold }
            | Kind::SessionExpiry { car: c, hold } => write!(f, "{} for={}", car(c), d(hold)),
            Kind::ZkKill { restart_after, .. } => {
                write!(f, "restart-after={}", d(restart_after))
            }
            Kind::ZkSilent { hold } => write!(f, "for={}", d(hold)),
            Kind::Trigger { job } => write!(f, "job={}", JOBS[*job].name),
            Kind::DisableItem { job, item, hold } => {
                write!(f, "job={} item={item} for={}", JOBS[*job].name, d(hold))
            }
            Kind::DisableServer { job, car: c, hold } => {
                write!(f, "job={} {} for={}", JOBS[*job].name, car(c), d(hold))
            }
            Kind::RemoteShutdown { slot: s } => write!(f, "{}", slot(s)),
            Kind::AnswerCut { car: c, hold } | Kind::AnswerFreeze { car: c, hold } => {
                write!(f, "{} for={}", car(c), d(hold))
            }
            Kind::HostPause { hold } => write!(f, "for={}", d(hold)),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{:02} +{:>7.3}s  {}",
            self.id,
            self.at.as_secs_f64(),
            self.kind
        )
    }
}

/// Relative weights of the fault kinds (ZooKeeper kills only with an ensemble).
const WEIGHTS: [(u32, &str); 20] = [
    (10, "worker-kill"),
    (6, "worker-pause"),
    (4, "join-cancel"),
    (4, "worker-slow"),
    (3, "worker-hang"),
    (5, "sidecar-kill"),
    (3, "sidecar-pause-long"),
    (4, "sidecar-pause-short"),
    (3, "sidecar-term"),
    (2, "zk-kill-leader"),
    (2, "zk-kill-follower"),
    (4, "partition"),
    (3, "session-expiry"),
    (4, "zk-silent"),
    (5, "op-trigger"),
    (4, "op-disable-item"),
    (3, "op-disable-server"),
    (4, "op-remote-shutdown"),
    (3, "answer-cut"),
    (2, "answer-freeze"),
];

fn draw_kind(rng: &mut StdRng, ensemble: usize) -> Kind {
    let usable: Vec<(u32, &str)> = WEIGHTS
        .iter()
        .copied()
        .filter(|(_, n)| ensemble >= 3 || !n.starts_with("zk-kill"))
        .collect();
    let total: u32 = usable.iter().map(|(w, _)| w).sum();
    let mut pick = rng.random_range(0..total);
    let mut name = usable[0].1;
    for (w, n) in &usable {
        if pick < *w {
            name = n;
            break;
        }
        pick -= w;
    }
    let slot = rng.random_range(0..SLOTS);
    let car = rng.random_range(0..SIDECARS);
    let job = rng.random_range(0..JOBS.len());
    let session = SESSION.as_secs_f64();
    let lease = LEASE.as_secs_f64();
    match name {
        "worker-kill" => Kind::WorkerKill {
            slot,
            restart_after: secs(rng, 0.5, 4.0),
        },
        "worker-pause" => Kind::WorkerPause {
            slot,
            hold: secs(rng, 0.3, 5.5),
        },
        "join-cancel" => {
            let n = rng.random_range(2..=4);
            Kind::JoinCancel {
                car,
                job,
                delays_ms: (0..n).map(|_| rng.random_range(0..=40)).collect(),
            }
        }
        "worker-slow" => Kind::WorkerSlow {
            slot,
            hold: secs(rng, 3.0, 10.0),
        },
        "worker-hang" => Kind::WorkerHang {
            slot,
            hold: secs(rng, 3.0, 9.0),
        },
        "sidecar-kill" => Kind::SidecarKill {
            car,
            restart_after: secs(rng, 1.0, 6.0),
        },
        "sidecar-pause-long" => Kind::SidecarPauseLong {
            car,
            hold: secs(rng, session + 0.5, session + 3.0),
        },
        "sidecar-pause-short" => Kind::SidecarPauseShort {
            car,
            hold: secs(rng, lease + 0.2, session - 0.4),
        },
        "sidecar-term" => Kind::SidecarTerm {
            car,
            restart_after: secs(rng, 0.5, 3.0),
        },
        "zk-kill-leader" | "zk-kill-follower" => Kind::ZkKill {
            leader: name == "zk-kill-leader",
            restart_after: secs(rng, 1.0, 6.0),
        },
        "partition" => Kind::Partition {
            car,
            hold: secs(rng, 1.0, session - 0.5),
        },
        "session-expiry" => Kind::SessionExpiry {
            car,
            hold: secs(rng, session + 1.5, session + 4.0),
        },
        "zk-silent" => Kind::ZkSilent {
            hold: secs(rng, session / 4.0 + 0.1, session / 2.0),
        },
        "op-trigger" => Kind::Trigger { job },
        "op-disable-item" => Kind::DisableItem {
            job,
            item: rng.random_range(0..JOBS[job].items),
            hold: secs(rng, 2.0, 6.0),
        },
        "op-disable-server" => Kind::DisableServer {
            job,
            car,
            hold: secs(rng, 2.0, 6.0),
        },
        // #53: an outage of 1.1-1.2 s lets the lease outlive it; from 1.3 s the lease lapses
        // first.
        "answer-cut" => Kind::AnswerCut {
            car,
            hold: secs(rng, 1.1, 1.5),
        },
        // #53's ZooKeeper freezes were 1.6 and 2.4 s; below 2/3 of the session, after which
        // every sidecar revokes every execution anyway.
        "answer-freeze" => Kind::AnswerFreeze {
            car,
            hold: secs(rng, 1.0, 2.5),
        },
        _ => Kind::RemoteShutdown { slot },
    }
}

/// The schedule of a soak of `duration` against `ensemble` ZooKeeper nodes, from `seed`.
pub fn generate(seed: u64, duration: Duration, ensemble: usize) -> Vec<Fault> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut faults: Vec<Fault> = Vec::new();
    let mut held: Vec<(Duration, Duration, Kind)> = Vec::new();
    let mut claimed: Vec<(Duration, Duration, Res)> = Vec::new();
    let mut at = Duration::from_millis(1500);
    loop {
        at += secs(&mut rng, 0.6, 2.8);
        if at >= duration {
            break;
        }
        // A few tries to find a fault that fits here; otherwise leave the gap empty.
        for _ in 0..4 {
            let kind = draw_kind(&mut rng, ensemble);
            let until = at + kind.reservation();
            if at + kind.claimed_for() > duration {
                continue;
            }
            let overlapping: Vec<&Kind> = held
                .iter()
                .filter(|(s, e, _)| *s < until && at < *e)
                .map(|(_, _, k)| k)
                .collect();
            let claims = kind.claims();
            if claims.iter().any(|(res, d)| {
                claimed
                    .iter()
                    .any(|(s, e, r)| r == res && *s < at + *d && at < *e)
            }) {
                continue;
            }
            if let Some(car) = kind.car() {
                let mut cars: Vec<usize> = overlapping.iter().filter_map(|k| k.car()).collect();
                cars.sort_unstable();
                cars.dedup();
                if !cars.contains(&car) && cars.len() >= SIDECARS - 1 {
                    continue;
                }
            }
            held.push((at, until, kind.clone()));
            claimed.extend(claims.into_iter().map(|(r, d)| (at, at + d, r)));
            faults.push(Fault {
                id: faults.len() + 1,
                at,
                kind,
            });
            break;
        }
    }
    faults
}

/// A short fingerprint of a schedule, printed with it: equal seeds give equal fingerprints.
pub fn fingerprint(faults: &[Fault]) -> String {
    let mut h: u64 = 0x1234_5678;
    for f in faults {
        for b in f.to_string().bytes() {
            h = spec::mix(h ^ u64::from(b));
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_depends_on_the_seed_only() {
        let d = Duration::from_secs(60);
        let a = generate(7, d, 3);
        let b = generate(7, d, 3);
        assert_eq!(a, b);
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&generate(8, d, 3)));
        assert!(a.len() >= 10, "a 60 s soak has many faults: {}", a.len());
    }

    #[test]
    fn faults_never_share_a_resource_and_end_in_time() {
        for seed in 0..200 {
            let d = Duration::from_secs(60);
            let faults = generate(seed, d, 3);
            for (i, a) in faults.iter().enumerate() {
                assert!(a.at + a.kind.claimed_for() <= d);
                for b in &faults[i + 1..] {
                    for (ra, da) in a.kind.claims() {
                        for (rb, db) in b.kind.claims() {
                            let overlap = a.at < b.at + db && b.at < a.at + da;
                            assert!(
                                !(overlap && ra == rb),
                                "seed {seed}: {a} and {b} overlap on {ra:?}"
                            );
                        }
                    }
                }
            }
            let single = generate(seed, d, 1);
            assert!(single
                .iter()
                .all(|f| !matches!(f.kind, Kind::ZkKill { .. })));
        }
    }

    #[test]
    fn answer_aimed_faults_keep_their_sidecar_and_minimal_workers_calm_after_them() {
        let d = Duration::from_secs(600);
        let mut aimed = 0;
        for seed in 0..20 {
            let faults = generate(seed, d, 3);
            for a in faults.iter().filter(|f| f.kind.aimed_at_answer()) {
                aimed += 1;
                let Some(car) = (match a.kind {
                    Kind::AnswerCut { car, .. } | Kind::AnswerFreeze { car, .. } => Some(car),
                    _ => None,
                }) else {
                    unreachable!()
                };
                let calm_until = a.at + a.kind.claimed_for();
                assert!(calm_until >= a.at + ARM_FOR + crate::ends::AFTER_FAULT);
                for b in faults.iter().filter(|b| b.id != a.id) {
                    let touches = b.kind.car() == Some(car)
                        || b.kind.resources().iter().any(
                            |r| matches!(r, Res::Slot(s) if spec::minimal_slots(car).contains(s)),
                        );
                    let overlaps = b.at < calm_until && a.at < b.at + b.kind.reservation();
                    assert!(
                        !(touches && overlaps),
                        "seed {seed}: {b} falls in the calm after {a}"
                    );
                }
            }
        }
        assert!(
            aimed >= 100,
            "600 s soaks have answer-aimed faults: {aimed} in 20"
        );
    }
}
