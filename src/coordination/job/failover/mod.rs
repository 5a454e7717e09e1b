//! Failover: items whose runner went away, taken over by a worker with room. Flagged items are
//! claimed by every local instance with room at once, while ElasticJob's failover latch is free;
//! a leaving instance's items, and those the leader cleans up, are handed in the very write that
//! releases them to a local instance with room, else to an idle worker of a peer sidecar, whose
//! sidecar runs them when it reads that write ([`Failover::reconcile_adoptions`]).
//!
//! The writes themselves are in [`super::writes`], as pure functions of the view.

use std::collections::{BTreeMap, BTreeSet};

use tracing::{debug, info};

use super::instances::Instances;
use super::io::{Cx, Handed, Pending, Taker};
use super::runs::Runs;
use super::writes;
use super::{Action, LatchKey, Observation};
use crate::registry::{Error as RegError, Op, OpResult};

/// What a latch-free failover claim goes on (see [`Pending::Claim`]).
#[derive(Debug, Default)]
pub(crate) struct FreeClaims {
    /// Whether the latch's directory is believed to exist. Only a hint: the latch's events are
    /// not read back, and a wrong guess costs one refused claim, which corrects it.
    pub(crate) latch_dir: bool,
    /// Latch-free claims refused in a row by the latch's state; at [`FreeClaims::LIMIT`] the
    /// next claim takes the latch.
    pub(crate) refused: u32,
}

impl FreeClaims {
    /// Refusals in a row after which a claim takes the latch instead.
    pub(crate) const LIMIT: u32 = 2;
}

/// The job's failover; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Failover {
    claims: FreeClaims,
}

impl Failover {
    /// Whether claims may go without the latch now.
    fn free(&self) -> bool {
        self.claims.refused < FreeClaims::LIMIT
    }

    /// The failover latch's directory was seen created or deleted.
    pub(super) fn latch_seen(&mut self, exists: bool) {
        self.claims.latch_dir = exists;
    }

    /// ElasticJob's `failoverIfNecessary`, for every local instance with room at once: flagged
    /// items are shared among them and started in one write. That write asserts that nobody
    /// holds or waits for ElasticJob's failover latch ([`writes::latch_free_ops`]), so it needs no
    /// latch of its own: one round trip instead of three. Only when such claims were refused by
    /// the latch's state ([`FreeClaims::LIMIT`] times in a row, or once because a contender is
    /// in it) does the claim take the latch, behind the contenders.
    pub(super) fn reconcile_claims(&mut self, cx: &mut Cx, runs: &mut Runs, instances: &Instances) {
        let failover = cx.view().failover_on();
        if !failover
            || cx.view().failover_items.is_empty()
            || cx
                .io
                .in_flight(|p| matches!(p, Pending::ClaimLatch | Pending::Claim { .. }))
        {
            return;
        }
        if claimable(cx, runs).is_empty() || runs.claim_locals(cx, instances).is_empty() {
            return;
        }
        if self.free() {
            self.claim_now(cx, runs, instances, None);
            return;
        }
        let op = cx.io.start_op(Pending::ClaimLatch);
        let dir = cx.paths().failover_latch();
        cx.out.push(Action::AcquireLatch { op, dir });
    }

    /// Decides the claim on the freshest view and writes it: under the failover latch when
    /// `latch` is held (released after), else with the latch-free assertion in the same write.
    pub(super) fn claim_now(
        &mut self,
        cx: &mut Cx,
        runs: &mut Runs,
        instances: &Instances,
        latch: Option<LatchKey>,
    ) {
        let release = |cx: &mut Cx| {
            if let Some(latch) = latch {
                cx.out.push(Action::ReleaseLatch { latch });
            }
        };
        let flagged = claimable(cx, runs);
        // Idle instances first: a busy one's worker shares its executor with what it runs.
        let (mut idle, busy): (Vec<String>, Vec<String>) = runs
            .claim_locals(cx, instances)
            .into_iter()
            .partition(|id| runs.idle(id));
        idle.extend(busy);
        if flagged.is_empty() || idle.is_empty() || !cx.connected() {
            return release(cx);
        }
        let monitored = cx
            .view()
            .config
            .as_ref()
            .is_some_and(|c| c.monitor_execution);
        let mut shares: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (k, item) in flagged.iter().enumerate() {
            shares
                .entry(idle[k % idle.len()].clone())
                .or_default()
                .push(*item);
        }
        let mut ops = match latch {
            Some(_) => Vec::new(),
            None => writes::latch_free_ops(cx.paths(), self.claims.latch_dir),
        };
        let mut starts = Vec::new();
        for (id, items) in &shares {
            match writes::claim_ops(cx.view(), cx.paths(), id, items, monitored) {
                Some(claim) => {
                    ops.extend(claim);
                    starts.push((id.clone(), items.clone()));
                }
                None => debug!(job = %cx.name(), items = ?items, "flagged items not claimable yet"),
            }
        }
        if starts.is_empty() {
            return release(cx);
        }
        let executions = starts
            .iter()
            .map(|(id, items)| runs.list_failover(cx, id, items, monitored))
            .collect();
        let items: Vec<i32> = starts.iter().flat_map(|(_, i)| i.iter().copied()).collect();
        cx.commit(Pending::Claim { latch, executions }, ops, &items);
    }

    /// The claim's write was answered (or not).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn claimed(
        &mut self,
        cx: &mut Cx,
        runs: &mut Runs,
        instances: &mut Instances,
        latch: Option<LatchKey>,
        executions: Vec<String>,
        ops: &[Op],
        result: Result<Vec<OpResult>, RegError>,
    ) {
        if let Some(latch) = latch {
            cx.out.push(Action::ReleaseLatch { latch });
        }
        let items = runs.items_of(&executions);
        cx.io.unlock(&items);
        match result {
            Ok(results) => {
                match latch {
                    None => self.claimed_free(cx, items),
                    Some(_) => {
                        self.claims.refused = 0;
                        cx.observe(Observation::FailoverTaken(items));
                    }
                }
                for execution_id in executions {
                    runs.deliver_claimed(cx, instances, &execution_id, ops, &results);
                }
            }
            Err(e) => {
                runs.forget_unclaimed(executions);
                if !self.latch_refused(cx, &e, ops) {
                    cx.write_failed("taking over failed items", &e);
                }
            }
        }
    }

    /// Whether `error` is a latch-free claim refused by the latch's state rather than by the
    /// items' (nothing else was wrong with the view, so nothing is read again): notes what it
    /// tells, and the claim is decided again at once, taking the latch if this keeps happening.
    pub(super) fn latch_refused(&mut self, cx: &Cx, error: &RegError, ops: &[Op]) -> bool {
        let RegError::MultiFailed { index, source } = error else {
            return false;
        };
        let dir = cx.paths().failover_latch();
        let at_latch = match ops.get(*index) {
            Some(Op::Create { path, .. } | Op::Delete { path, .. }) => *path == dir,
            _ => false,
        };
        if !at_latch {
            return false;
        }
        match **source {
            RegError::NoNode(_) => self.claims.latch_dir = false,
            RegError::NodeExists(_) => self.claims.latch_dir = true,
            // A process holds or waits for the latch: take it too, behind them.
            RegError::NotEmpty(_) => {
                self.claims.latch_dir = true;
                self.claims.refused = FreeClaims::LIMIT;
            }
            _ => return false,
        }
        self.claims.refused = self.claims.refused.saturating_add(1);
        debug!(job = %cx.name(), error = %error, refused = self.claims.refused, "latch-free failover claim refused by the latch's state; deciding again");
        true
    }

    /// Notes a FAILOVER hand-over or claim that landed without the latch.
    fn claimed_free(&mut self, cx: &mut Cx, items: Vec<i32>) {
        self.claims.refused = 0;
        self.claims.latch_dir = false;
        cx.observe(Observation::FailoverTaken(items));
    }

    // ----- hand-overs -------------------------------------------------------------------------

    /// Who takes, in the same write, the items a leaving instance `id` (or, with `""`, a gone
    /// runner) leaves running, if claims may go without the latch now: a local instance with
    /// room (an idle one first), else an idle worker of a peer sidecar.
    pub(super) fn taker(
        &self,
        cx: &Cx,
        runs: &Runs,
        instances: &Instances,
        id: &str,
    ) -> Option<Taker> {
        let failover = cx.view().failover_on();
        if !failover || !self.free() || !cx.connected() {
            return None;
        }
        let spare: Vec<String> = runs
            .claim_locals(cx, instances)
            .into_iter()
            .filter(|l| l != id)
            .collect();
        let local = spare
            .iter()
            .find(|l| runs.idle(l))
            .or(spare.first())
            .cloned();
        local
            .map(Taker::Here)
            .or_else(|| peer_taker(cx).map(Taker::Peer))
    }

    /// Makes `ops`, which hand `handed` over to `taker` (and check that its node is still
    /// there), a latch-free write: the latch-free assertion in front. A local taker's FAILOVER
    /// execution is listed until the write is answered.
    pub(super) fn prepare_hand_over(
        &self,
        cx: &Cx,
        runs: &mut Runs,
        ops: &mut Vec<Op>,
        handed: &mut [i32],
        taker: Option<Taker>,
    ) -> Option<Handed> {
        let taker = taker.filter(|_| !handed.is_empty())?;
        let mut all = writes::latch_free_ops(cx.paths(), self.claims.latch_dir);
        all.append(ops);
        *ops = all;
        handed.sort_unstable();
        Some(match taker {
            Taker::Here(id) => Handed::Here(runs.list_failover(cx, &id, handed, true)),
            Taker::Peer(id) => {
                info!(job = %cx.name(), taker = %id, items = ?handed,
                      "handing items whose runner is gone to a peer's idle worker");
                Handed::Peer
            }
        })
    }

    /// A write made by [`Failover::prepare_hand_over`] landed: a local taker's execution starts
    /// (its tokens from `results`); a peer's sidecar starts its own when it reads the write.
    pub(super) fn handed_over(
        &mut self,
        cx: &mut Cx,
        runs: &mut Runs,
        instances: &mut Instances,
        handed: Option<Handed>,
        ops: &[Op],
        results: &[OpResult],
    ) {
        match handed {
            Some(Handed::Here(execution_id)) => {
                let taken = runs.items_of(std::slice::from_ref(&execution_id));
                self.claimed_free(cx, taken);
                runs.deliver_claimed(cx, instances, &execution_id, ops, results);
            }
            Some(Handed::Peer) => {
                // Only the latch's directory is known gone here, as after any latch-free write.
                self.claims.refused = 0;
                self.claims.latch_dir = false;
            }
            None => {}
        }
    }

    /// Runs, as FAILOVER, items a peer's sidecar handed to a local instance in the write that
    /// removed their dead runner ([`peer_taker`]): `running`, `failover` and `failovering`
    /// name the instance, and no execution here has them. That write was the claim, so nothing
    /// is written: the tokens are the `running` nodes' as read, the epochs the items' as read.
    /// An instance with no room now is given none of them; the clean-up of this host's stale
    /// runners then flags them, as a claim's loser would leave them.
    ///
    /// Only a hand-over to the instance as registered now is run: the `running` node must
    /// have been written after the instance node (its `mzxid` above the instance's `czxid`,
    /// both as read). Nodes naming the same instance id from before (handed to its registration
    /// in an earlier session of this sidecar, or left by an execution here that was voided when
    /// a session expired) were for a runner that is gone: a leader may be cleaning them up and
    /// claiming them at this moment, seeing that runner gone, so running them with no write
    /// could run an item twice at once (nemesis seed 1). This host's clean-up of stale runners
    /// releases them instead, in a conditional write that meets any such claim.
    pub(super) fn reconcile_adoptions(
        &mut self,
        cx: &mut Cx,
        runs: &mut Runs,
        instances: &mut Instances,
    ) {
        let Some(config) = cx.view().config.as_ref() else {
            return;
        };
        if !cx.view().failover_on() || !config.monitor_execution || !cx.connected() {
            return;
        }
        let spare = runs.claim_locals(cx, instances);
        if spare.is_empty() {
            return;
        }
        let view = cx.view();
        let mut handed: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (i, item) in view.items.range(..view.total()) {
            let Some((runner, stat)) = &item.running else {
                continue;
            };
            if cx.io.is_locked(*i)
                || view.failover_items.contains(i)
                || stat.version != writes::RUNNING_VERSION
                || item.failover.as_ref() != Some(runner)
                || item.failovering.as_ref() != Some(runner)
                || item.version.is_none()
                || !spare.contains(runner)
                || !registered_before(cx, runner, stat.mzxid)
            {
                continue;
            }
            handed.entry(runner.clone()).or_default().push(*i);
        }
        if handed.is_empty() {
            return;
        }
        // Only items no execution here holds (gathered once, and only when there is a
        // candidate: this runs on every reconcile).
        let executing = runs.executing();
        for items in handed.values_mut() {
            items.retain(|i| !executing.contains(i));
        }
        handed.retain(|_, items| !items.is_empty());
        for (id, items) in handed {
            info!(job = %cx.name(), instance = %id, items = ?items,
                  "running items a peer's sidecar handed over");
            let mut tokens = BTreeMap::new();
            let mut versions = BTreeMap::new();
            for i in &items {
                let item = &cx.view().items[i];
                if let (Some((_, stat)), Some(version)) = (&item.running, item.version) {
                    tokens.insert(*i, stat.czxid);
                    versions.insert(*i, version);
                }
            }
            runs.adopt(cx, instances, &id, &items, tokens, versions);
        }
    }

    #[cfg(test)]
    pub(super) fn claims(&self) -> &FreeClaims {
        &self.claims
    }
}

/// Flagged failover items this sidecar may claim: none an action in flight touches, none in
/// one of its own executions.
fn claimable(cx: &Cx, runs: &Runs) -> Vec<i32> {
    let executing = runs.executing();
    writes::flagged(cx.view(), |i| cx.io.is_locked(i) || executing.contains(&i))
}

/// Whether instance `id`'s node, as read exactly, was created before transaction `zxid`.
fn registered_before(cx: &Cx, id: &str, zxid: i64) -> bool {
    let path = cx.paths().instance(id);
    cx.mirror.exact(&path)
        && cx
            .mirror
            .cache()
            .get(&path)
            .is_some_and(|node| node.stat.czxid < zxid)
}

/// An idle worker of a peer sidecar that may take, in the same write, the items a leaving
/// instance or a gone runner leaves when no local instance has room (else they would be
/// flagged, read by the peer, and claimed: two round trips more). Only an instance that is
/// certainly a shardcar worker: its node is ephemeral on the very session that holds its host's
/// `shardcar/sidecars/{ip}` (a Java process's is on its own session, and Java would never start
/// an item whose `running` node it did not write). It must be on an enabled server, and the
/// mirror must show it running nothing and about to take no trigger-once request. Its sidecar
/// runs the items as FAILOVER once it reads the write ([`Failover::reconcile_adoptions`]);
/// should its worker have no room by then, it flags them.
fn peer_taker(cx: &Cx) -> Option<String> {
    let view = cx.view();
    let cache = cx.mirror.cache();
    let paths = cx.paths();
    let busy: BTreeSet<&str> = view
        .items
        .values()
        .flat_map(|it| {
            [
                it.running.as_ref().map(|(id, _)| id.as_str()),
                it.failover.as_deref(),
                it.failovering.as_deref(),
            ]
        })
        .flatten()
        .chain(view.triggers.iter().map(String::as_str))
        .collect();
    // Among the idle ones, the one whose sidecar wrote to the job last: a sidecar moves the
    // epoch (`sharding/{i}`) of its instance's items with every run it starts and ends, so one
    // cut off from ZooKeeper or frozen stands out by having written nothing since. The writer
    // cannot tell otherwise while that sidecar's session lives, and items handed to it would
    // wait for it to come back (nemesis seed 7070: a hand-over to a peer partitioned 1.8 s
    // before, while another peer sat idle). Ties go to the first id.
    let last_write = |id: &str| {
        let items = view.items.iter().filter_map(|(i, it)| {
            let (owner, _) = it.owner.as_ref()?;
            (owner == id).then(|| cache.get(&paths.item(*i)))?
        });
        items
            .map(|n| n.stat.mzxid)
            .chain(cache.get(&paths.instance(id)).map(|n| n.stat.czxid))
            .max()
            .unwrap_or(0)
    };
    view.instances
        .iter()
        .filter(|(id, ip)| {
            *ip != &cx.settings().ip
                && !busy.contains(id.as_str())
                && view.server_enabled(ip)
                && view.sidecars.get(*ip).is_some_and(|owner| {
                    *owner != 0
                        && cache
                            .get(&paths.instance(id))
                            .is_some_and(|n| n.stat.ephemeral_owner == *owner)
                })
        })
        .map(|(id, _)| (last_write(id), id))
        .max_by_key(|(zxid, id)| (*zxid, std::cmp::Reverse(*id)))
        .map(|(_, id)| id.clone())
}
