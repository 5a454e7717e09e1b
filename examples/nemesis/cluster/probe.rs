//! The probe of every execution a worker has let go of: the sightings the execution-end
//! invariant ([`crate::ends`]) is checked on.

use super::{lock, World};
use crate::history::{History, Proc, Run};
use crate::spec::{wall_us, JOBS, PROBE};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl World {
    /// Every [`PROBE`], reads the `running` node of the item of every run its worker has let go
    /// of (answered, declined, stopped; its stream ended, its process died, or its lease ran
    /// out) and not yet seen gone: a node whose creation zxid is the run's fencing token (every
    /// soak job runs with monitorExecution on, where the token is that node's `czxid`) means
    /// the execution still holds the item in ZooKeeper. The sightings go into the history, for
    /// the execution-end invariant ([`crate::ends::executions_end`]). The nemesis's own
    /// session reaches ZooKeeper directly, not through the sidecars' proxies.
    pub async fn probe_holds(self: Arc<Self>) {
        let mut next = 0usize;
        let mut pending: Vec<usize> = Vec::new();
        while !self.stopping.load(Ordering::SeqCst) {
            tokio::time::sleep(PROBE).await;
            let now = wall_us();
            let targets: Vec<(usize, String, i64)> = {
                let h = lock(&self.history);
                pending.extend(next..h.runs.len());
                next = h.runs.len();
                pending.retain(|i| h.runs[*i].gone_seen.is_none() && h.runs[*i].token >= 0);
                pending
                    .iter()
                    .filter(|i| let_go(&h, &h.runs[**i], now))
                    .map(|i| {
                        let r = &h.runs[*i];
                        let path = format!("/{}/sharding/{}/running", JOBS[r.job].name, r.item);
                        (*i, path, r.token)
                    })
                    .collect()
            };
            if targets.is_empty() {
                continue;
            }
            let sent = wall_us();
            let reads = futures::future::join_all(targets.iter().map(|(_, path, _)| {
                tokio::time::timeout(Duration::from_secs(2), self.ops.check_stat(path))
            }))
            .await;
            let got = wall_us();
            let mut h = lock(&self.history);
            for ((i, _, token), read) in targets.iter().zip(reads) {
                let run = &mut h.runs[*i];
                match read {
                    Ok(Ok(Some(stat))) if stat.czxid == *token => run.held_seen = Some(sent),
                    Ok(Ok(_)) => {
                        run.gone_seen.get_or_insert(got);
                    }
                    _ => {} // no answer from ZooKeeper: nothing seen
                }
            }
        }
    }
}

/// Whether the worker of run `r` has let go of it by `now`: answered or declined it, stopped
/// it, or can no longer be running it (its process is gone, its stream ended, its latest
/// lease is over).
fn let_go(h: &History, r: &Run, now: u64) -> bool {
    if r.answer.is_some() || r.stop.is_some() {
        return true;
    }
    if h.procs.get(&r.pid).and_then(Proc::gone).is_some() {
        return true;
    }
    h.streams.get(&(r.pid, r.gen)).is_some_and(|s| {
        s.ended.is_some() || s.leases.last().is_none_or(|(_, until)| *until <= now)
    })
}
