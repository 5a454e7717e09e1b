//! The fixed shape of a soak: the jobs, the sidecars, the worker slots and the timing settings
//! every other module reads. Nothing here depends on the seed.

use shardcar::proto::{JobConfig, TriggerSource};
use std::time::Duration;

/// Sidecars in the cluster (each one a "host": 127.0.0.2, 127.0.0.3, ...).
pub const SIDECARS: usize = 3;
/// The sidecars' ZooKeeper session timeout (the harness default), which makes leases 2 s.
pub const SESSION: Duration = Duration::from_secs(4);
/// Worker lease length: half the session timeout.
pub const LEASE: Duration = Duration::from_secs(2);
/// The ZooKeeper namespace of the soak.
pub const NAMESPACE: &str = "nemesis";

// The sidecar's and the harness's timing settings the execution bound is derived from
// (`ends::executions_end`). They are the defaults the harness runs the sidecars with; a unit
// test below ties them to `SESSION` where the sidecar derives them from it.

/// The sidecar's deadline for one ZooKeeper call: a quarter of the session timeout
/// (`op_timeout` in `src/sidecar.rs`). A write with no reply by then is "unconfirmed".
pub const ZK_OP: Duration = Duration::from_millis(1_000);
/// How long the sidecar waits before it reads a job again after a failed or unconfirmed write
/// (`RETRY` in `src/coordination/job/state.rs`).
pub const ZK_RETRY: Duration = Duration::from_millis(200);
/// The ZooKeeper ensemble's tick (`ZK_TICK` in the harness): sessions expire on tick
/// boundaries, so up to a tick after their timeout.
pub const ZK_TICK: Duration = Duration::from_millis(500);
/// The sidecar's HTTP/2 keepalive on worker connections, interval + timeout (the defaults,
/// 1 s + 3 s): how long a worker that stopped reading (frozen) keeps its stream, and with it
/// lease renewals the worker never reads.
pub const KEEPALIVE: Duration = Duration::from_secs(4);
/// How often the nemesis reads the `running` node of every execution a worker has let go of
/// (`cluster::World::probe_holds`).
pub const PROBE: Duration = Duration::from_millis(250);

/// One job of the soak.
#[derive(Clone, Copy, Debug)]
pub struct JobSpec {
    pub name: &'static str,
    /// Empty for the resident job.
    pub cron: &'static str,
    /// Seconds between fires (the cron fires on every multiple of it); 0 for the resident job.
    pub period_s: u64,
    pub items: i32,
    pub failover: bool,
    /// `execution_timeout_seconds` (0: none).
    pub timeout_s: u32,
    /// `JobConfig.resident`: each item held by one worker until a `Revoke` or its lease's end.
    pub resident: bool,
}

/// Cron jobs of 1 s and 2 s, failover on and off, and one resident job ([`RESIDENT_JOB`]);
/// monitorExecution on everywhere.
pub const JOBS: [JobSpec; 5] = [
    JobSpec {
        name: "nem-fo-1s",
        cron: "* * * * * ?",
        period_s: 1,
        items: 2,
        failover: true,
        timeout_s: 6,
        resident: false,
    },
    JobSpec {
        name: "nem-fo-2s",
        cron: "0/2 * * * * ?",
        period_s: 2,
        items: 4,
        failover: true,
        timeout_s: 6,
        resident: false,
    },
    JobSpec {
        name: "nem-nofo-1s",
        cron: "* * * * * ?",
        period_s: 1,
        items: 3,
        failover: false,
        timeout_s: 6,
        resident: false,
    },
    JobSpec {
        name: "nem-nofo-2s",
        cron: "0/2 * * * * ?",
        period_s: 2,
        items: 2,
        failover: false,
        timeout_s: 0,
        resident: false,
    },
    // #50: no cron, failover off, no timeout (the sidecar refuses them for a resident job).
    JobSpec {
        name: "nem-resident",
        cron: "",
        period_s: 0,
        items: 6,
        failover: false,
        timeout_s: 0,
        resident: true,
    },
];

/// The resident job: its workers hold each item from its `Trigger` (source RESIDENT) until a
/// `Revoke` or the end of their lease, then `Decline` it once, never sending anything again
/// ([`crate::worker`]); its invariants are [`crate::resident`]'s.
pub const RESIDENT_JOB: usize = 4;

/// The jobs whose workers are all minimal ([`crate::worker`]): they keep every MUST of the
/// contract and none of its MAYs (one call per answer or decline, whatever its reply; no
/// acknowledgement of a revoke for an item they do not run; no new stream before the last
/// lease has run out). nem-fo-2s (failover on, 4 items) and nem-nofo-1s (failover off, 3 items):
/// - a job with no strict member has no peer whose resent answers or extra declines could end
///   an execution for it: if the sidecar waited on a worker, the item would stall and show;
/// - one job of each failover setting: both kinds of `running` node (persistent with failover
///   on, ephemeral without) and both ways of giving an item back (flagged or handed over, and
///   left for the next fire);
/// - at least as many items as sidecars, so each minimal worker normally owns an item and
///   answers every 1–2 s: the answer-aimed faults, which wait for a minimal worker of their
///   sidecar to answer, fire promptly on every sidecar.
///
/// The other two jobs keep the strict workers (resends, acknowledgement declines), so both
/// kinds share every sidecar.
pub const MINIMAL_JOBS: [usize; 2] = [1, 2];

/// Whether the worker of `slot` is minimal (see [`MINIMAL_JOBS`]).
pub fn is_minimal(slot: usize) -> bool {
    MINIMAL_JOBS.contains(&job_of_slot(slot))
}

/// The slots of sidecar `car` whose workers are minimal.
pub fn minimal_slots(car: usize) -> Vec<usize> {
    MINIMAL_JOBS.iter().map(|job| slot_of(car, *job)).collect()
}

/// Worker slots: one worker process per (sidecar, job). A slot keeps its number when its
/// process is killed and started again (with a new pid, so a new instance id).
pub const SLOTS: usize = SIDECARS * JOBS.len();

pub fn slot_of(car: usize, job: usize) -> usize {
    car * JOBS.len() + job
}

pub fn car_of_slot(slot: usize) -> usize {
    slot / JOBS.len()
}

pub fn job_of_slot(slot: usize) -> usize {
    slot % JOBS.len()
}

/// The advertised IP of sidecar `car`.
pub fn car_ip(car: usize) -> String {
    format!("127.0.0.{}", car + 2)
}

/// Trigger sources as sent on the wire.
pub const CRON: i32 = TriggerSource::Cron as i32;
pub const FAILOVER: i32 = TriggerSource::Failover as i32;
pub const MISFIRE: i32 = TriggerSource::Misfire as i32;
pub const RESIDENT: i32 = TriggerSource::Resident as i32;

/// The configuration every worker of job `job` subscribes with.
pub fn job_config(job: usize) -> JobConfig {
    let spec = JOBS[job];
    JobConfig {
        job_name: spec.name.to_string(),
        cron: spec.cron.to_string(),
        sharding_total_count: spec.items,
        failover: spec.failover,
        // Misfire has no meaning for a resident job (nothing fires).
        misfire: Some(!spec.resident),
        monitor_execution: Some(true),
        execution_timeout_seconds: spec.timeout_s,
        description: "nemesis soak job".to_string(),
        resident: spec.resident,
        ..Default::default()
    }
}

/// The host's wall clock in microseconds since the epoch: the one clock of the soak. Every
/// process of the soak runs on this host, so the nemesis, its workers and the fencing store
/// all stamp events on the same clock (the one the contract's `expires_at` is on).
pub fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// A 64-bit mix (splitmix64): seeded, order-independent values for workers (item durations).
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timing_settings_match_the_sidecar_s_derivations() {
        assert_eq!(
            ZK_OP,
            SESSION / 4,
            "the sidecar's op timeout is a quarter of the session"
        );
        assert_eq!(LEASE, SESSION / 2, "the lease is half the session");
        assert!(PROBE < ZK_OP);
    }

    #[test]
    fn every_sidecar_has_minimal_workers_of_jobs_with_an_item_each() {
        for car in 0..SIDECARS {
            let slots: Vec<usize> = (0..SLOTS)
                .filter(|s| car_of_slot(*s) == car && is_minimal(*s))
                .collect();
            assert_eq!(slots, minimal_slots(car));
            assert_eq!(slots.len(), MINIMAL_JOBS.len());
            for slot in slots {
                assert!(is_minimal(slot));
                assert_eq!(car_of_slot(slot), car);
                assert!(JOBS[job_of_slot(slot)].items as usize >= SIDECARS);
            }
        }
        assert_eq!((0..SLOTS).filter(|s| is_minimal(*s)).count(), 6);
    }

    #[test]
    fn the_resident_job_is_one_the_sidecar_accepts() {
        let spec = JOBS[RESIDENT_JOB];
        assert!(spec.resident && JOBS.iter().filter(|j| j.resident).count() == 1);
        assert!(!MINIMAL_JOBS.contains(&RESIDENT_JOB));
        let config = job_config(RESIDENT_JOB);
        assert!(config.resident && config.cron.is_empty() && !config.failover);
        assert_eq!(config.monitor_execution, Some(true));
        assert_eq!(config.execution_timeout_seconds, 0);
        assert_eq!(config.sharding_total_count, 6);
        assert!(!job_config(0).resident);
    }
}
