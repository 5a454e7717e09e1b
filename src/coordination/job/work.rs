//! What local instances with room do next: take flagged failover items first (every flagged
//! item at once, shared among the instances with room, while ElasticJob's failover latch is
//! free), then trigger-once requests (idle instances only), then one misfire catch-up for the
//! fires they missed.
//!
//! An instance has room while it runs fewer executions than its worker's
//! `max_concurrent_executions` (1 unless the worker asks for more, which is ElasticJob's one
//! execution at a time): only FAILOVER and MISFIRE runs go to a busy instance with room.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tracing::{debug, info};

use super::state::{FreeClaims, Handed, JobState, Pending, Taker};
use super::{Action, Env, LatchKey, Observation};
use crate::coordination::events::Source;
use crate::coordination::execution::Execution;
use crate::coordination::failover::{self};
use crate::coordination::trace::TraceContext;
use crate::registry::{Error as RegError, Op, OpResult};

impl JobState {
    // ----- what idle instances do next --------------------------------------------------------

    /// For local instances with room, once flagged failover items are claimed (the reconcile
    /// does that first, [`Self::reconcile_claims`]: a crashed peer's work must not wait behind
    /// catch-ups): trigger-once requests, then one misfire catch-up.
    pub(super) fn reconcile_work(&mut self, env: &Env, out: &mut Vec<Action>) {
        if self.in_flight(|p| matches!(p, Pending::ClaimLatch | Pending::Claim { .. })) {
            // Idle instances are about to take flagged items: nothing else until then.
            return;
        }
        self.reconcile_trigger_requests(env, out);
        self.reconcile_deferred_fires(env, out);
        let Some(config) = self.view.config.clone() else {
            return;
        };
        for id in self.spare_locals(env) {
            let local_items = self.view.items_of(&id, &self.settings.ip);
            let flagged: Vec<i32> = local_items
                .iter()
                .copied()
                .filter(|i| self.view.items.get(i).is_some_and(|it| it.misfire))
                .collect();
            let missed = self.locals.get(&id).is_some_and(|l| l.missed);
            if !config.misfire {
                if let Some(local) = self.locals.get_mut(&id) {
                    local.missed = false;
                }
                continue;
            }
            if (flagged.is_empty() && !missed) || self.view.necessary {
                continue;
            }
            let run = self.runnable_now(&id);
            if run.is_empty() {
                continue;
            }
            // One catch-up for every fire missed so far: clear the flags of the items it runs
            // (ElasticJob clears those of its whole execution), in the same write that starts it.
            let clear: Vec<Op> = run
                .iter()
                .filter(|i| self.view.items.get(i).is_some_and(|it| it.misfire))
                .map(|i| Op::delete(self.paths.item_misfire(*i)))
                .collect();
            if let Some(local) = self.locals.get_mut(&id) {
                local.missed = false;
            }
            info!(job = %self.name, instance = %id, items = ?run, "misfire catch-up");
            self.start_execution(&id, run, Source::Misfire, env.wall, clear, env, out);
        }
    }

    /// Local instances that may be given any work now: live, running nothing, not shutting
    /// down, holding a valid lease (renewals come before this in every reconcile).
    pub(super) fn idle_locals(&self, env: &Env) -> Vec<String> {
        self.ready_locals(env, |l| l.idle())
    }

    /// Local instances that may be given a FAILOVER or MISFIRE run now: as
    /// [`Self::idle_locals`], but running fewer executions than their worker can.
    pub(super) fn spare_locals(&self, env: &Env) -> Vec<String> {
        self.ready_locals(env, |l| l.has_room())
    }

    /// Local instances that may take over failover items now: as [`Self::spare_locals`], but a
    /// run claimed ahead of its instant leaves room (`Local::has_room_for_failover`).
    pub(super) fn claim_locals(&self, env: &Env) -> Vec<String> {
        self.ready_locals(env, |l| l.has_room_for_failover())
    }

    fn ready_locals(&self, env: &Env, free: impl Fn(&super::state::Local) -> bool) -> Vec<String> {
        let ip = &self.settings.ip;
        if !self.view.server_enabled(ip) || !self.may_grant(env) {
            return Vec::new();
        }
        self.locals
            .iter()
            .filter(|(id, l)| {
                l.live()
                    && !l.shutting_down
                    && !l.withheld
                    && free(l)
                    && self.view.instances.contains_key(*id)
                    && l.lease.valid(env.now, self.settings.lease)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// ElasticJob's trigger-once: a `trigger/{id}` node for a local instance runs it now (the
    /// node is deleted first; a busy instance drops the request, as in Java).
    pub(super) fn reconcile_trigger_requests(&mut self, env: &Env, out: &mut Vec<Action>) {
        let requests: Vec<String> = self
            .view
            .triggers
            .iter()
            .filter(|id| self.locals.get(*id).is_some_and(|l| l.live()))
            .filter(|id| {
                !self.in_flight(
                    |p| matches!(p, Pending::TakeTrigger { instance_id } if instance_id == *id),
                )
            })
            .cloned()
            .collect();
        let _ = env;
        for id in requests {
            let ops = vec![Op::delete(self.paths.trigger(&id))];
            self.commit(Pending::TakeTrigger { instance_id: id }, ops, &[], out);
        }
    }

    pub(super) fn on_trigger_taken(
        &mut self,
        id: &str,
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        match result {
            Ok(_) => {
                self.cache.remove_subtree(&self.paths.trigger(id));
                self.view_stale = true;
                self.refresh_view();
                if !self.idle_locals(env).iter().any(|l| l == id) {
                    if self.promote_held(id, env, out) {
                        return;
                    }
                    info!(job = %self.name, instance = %id, "trigger request dropped: the instance is busy or cannot be given work now");
                    return;
                }
                if self.defer_if_resharding(id, Source::Manual, env.wall, env) {
                    return;
                }
                let run = self.runnable_now(id);
                if !run.is_empty() {
                    self.start_execution(id, run, Source::Manual, env.wall, Vec::new(), env, out);
                }
            }
            Err(e) => self.write_failed("taking a trigger request", &e, env),
        }
    }

    /// A trigger-once request for an instance whose only run is one claimed ahead of a cron
    /// instant to come: that run goes out now as the MANUAL run the request asks for (its items
    /// are the ones a MANUAL run would take, and they are claimed already), and the cron fire
    /// then finds the instance busy, as it would have had nothing been claimed ahead. Returns
    /// whether the request was taken so.
    fn promote_held(&mut self, id: &str, env: &Env, out: &mut Vec<Action>) -> bool {
        let ready = self.ready_locals(env, |l| l.executions.len() == 1 && l.held.is_some());
        if !ready.iter().any(|l| l == id) {
            return false;
        }
        let Some(execution_id) = self.locals.get_mut(id).and_then(|l| {
            l.claimed_fire = None;
            l.held.take()
        }) else {
            return false;
        };
        let trace = self.trace_for(id, Source::Manual, &execution_id, env);
        let Some(exec) = self.executions.get_mut(&execution_id) else {
            return false;
        };
        info!(job = %self.name, instance = %id, execution = %execution_id, items = ?exec.items,
              "trigger request runs the run claimed ahead of the next fire, now");
        exec.source = Source::Manual;
        exec.fire_time = env.wall;
        exec.started = env.now;
        exec.started_at = std::time::SystemTime::from(env.wall);
        exec.trace = trace;
        if !self.starting(&execution_id) {
            self.deliver(&execution_id, env, out);
        }
        true
    }

    // ----- failover claims --------------------------------------------------------------------

    /// ElasticJob's `failoverIfNecessary`, for every local instance with room at once: flagged
    /// items are shared among them and started in one write. That write asserts that nobody
    /// holds or waits for ElasticJob's failover latch ([`failover::latch_free_ops`]), so it
    /// needs no latch of its own: one round trip instead of three. Only when such claims were
    /// refused by the latch's state ([`FreeClaims::LIMIT`] times in a row, or once because a
    /// contender is in it) does the claim take the latch, behind the contenders.
    pub(super) fn reconcile_claims(&mut self, env: &Env, out: &mut Vec<Action>) {
        let failover = self.view.config.as_ref().is_some_and(|c| c.failover);
        if !failover
            || self.view.failover_items.is_empty()
            || self.in_flight(|p| matches!(p, Pending::ClaimLatch | Pending::Claim { .. }))
        {
            return;
        }
        if self.claimable().is_empty() || self.claim_locals(env).is_empty() {
            return;
        }
        if self.claims.refused < FreeClaims::LIMIT {
            self.claim_now(None, env, out);
            return;
        }
        let op = self.start_op(Pending::ClaimLatch);
        out.push(Action::AcquireLatch {
            op,
            dir: self.paths.failover_latch(),
        });
    }

    /// Decides the claim on the freshest view and writes it: under the failover latch when
    /// `latch` is held (released after), else with the latch-free assertion in the same write.
    pub(super) fn claim_now(&mut self, latch: Option<LatchKey>, env: &Env, out: &mut Vec<Action>) {
        let release = |out: &mut Vec<Action>| {
            if let Some(latch) = latch {
                out.push(Action::ReleaseLatch { latch });
            }
        };
        self.refresh_view();
        let flagged = self.claimable();
        // Idle instances first: a busy one's worker shares its executor with what it runs.
        let (mut idle, busy): (Vec<String>, Vec<String>) = self
            .claim_locals(env)
            .into_iter()
            .partition(|id| self.locals.get(id).is_some_and(|l| l.idle()));
        idle.extend(busy);
        if flagged.is_empty() || idle.is_empty() || !self.connected(env) {
            release(out);
            return;
        }
        let monitored = self
            .view
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
            None => failover::latch_free_ops(&self.paths, self.claims.latch_dir),
        };
        let mut starts = Vec::new();
        for (id, items) in &shares {
            match failover::claim_ops(&self.view, &self.paths, id, items, monitored) {
                Some(claim) => {
                    ops.extend(claim);
                    starts.push((id.clone(), items.clone()));
                }
                None => debug!(job = %self.name, items = ?items, "flagged items not claimable yet"),
            }
        }
        if starts.is_empty() {
            release(out);
            return;
        }
        let executions = starts
            .iter()
            .map(|(id, items)| self.failover_execution(id, items, monitored, env))
            .collect();
        let items: Vec<i32> = starts.iter().flat_map(|(_, i)| i.iter().copied()).collect();
        self.commit(Pending::Claim { latch, executions }, ops, &items, out);
    }

    /// A FAILOVER execution of `items` for local instance `id`, about to be claimed: listed,
    /// not yet sent (the claim's result gives its fencing tokens). Returns its id.
    pub(super) fn failover_execution(
        &mut self,
        id: &str,
        items: &[i32],
        monitored: bool,
        env: &Env,
    ) -> String {
        info!(job = %self.name, instance = %id, items = ?items, "taking over failed items");
        let execution_id = self.next_execution_id(env);
        let timeout = match self.view.extras.execution_timeout_seconds {
            0 => None,
            s => Some(Duration::from_secs(u64::from(s))),
        };
        self.executions.insert(
            execution_id.clone(),
            Box::new(Execution::new(
                execution_id.clone(),
                id.to_string(),
                Source::Failover,
                items.iter().copied().collect(),
                env.wall,
                env.now,
                std::time::SystemTime::from(env.wall),
                timeout,
                monitored,
                self.generation,
                TraceContext::for_execution(&execution_id, None),
            )),
        );
        if let Some(local) = self.locals.get_mut(id) {
            local.executions.push(execution_id.clone());
        }
        execution_id
    }

    /// Starts FAILOVER execution `execution_id`, whose claim (`ops`) landed with `results`:
    /// its fencing tokens and epochs from the results, then the trigger.
    pub(super) fn deliver_claimed(
        &mut self,
        execution_id: &str,
        ops: &[Op],
        results: &[OpResult],
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let Some(exec) = self.executions.get(execution_id) else {
            return;
        };
        let exec_items: Vec<i32> = exec.items.iter().copied().collect();
        let (tokens, versions) = self.tokens_of(&exec_items, ops, results);
        let exec = self.executions.get_mut(execution_id).expect("listed");
        exec.fencing_tokens = tokens;
        exec.versions = versions;
        self.deliver(execution_id, env, out);
    }

    /// Forgets FAILOVER executions whose claim failed: they were never sent.
    pub(super) fn forget_unclaimed(&mut self, executions: impl IntoIterator<Item = String>) {
        for execution_id in executions {
            if let Some(exec) = self.executions.remove(&execution_id) {
                if let Some(local) = self.locals.get_mut(&exec.instance_id) {
                    local.drop_execution(&execution_id);
                }
            }
        }
    }

    /// Who takes, in the same write, the items a leaving instance `id` (or, with `""`, a gone
    /// runner) leaves running, if claims may go without the latch now: a local instance with
    /// room (an idle one first), else an idle worker of a peer sidecar.
    pub(super) fn taker(&self, id: &str, env: &Env) -> Option<Taker> {
        let failover = self.view.config.as_ref().is_some_and(|c| c.failover);
        if !failover || self.claims.refused >= FreeClaims::LIMIT || !self.connected(env) {
            return None;
        }
        self.local_taker(id, env)
            .map(Taker::Here)
            .or_else(|| self.peer_taker().map(Taker::Peer))
    }

    /// A local instance with room other than `id`, an idle one first.
    fn local_taker(&self, id: &str, env: &Env) -> Option<String> {
        let spare: Vec<String> = self
            .claim_locals(env)
            .into_iter()
            .filter(|l| l != id)
            .collect();
        spare
            .iter()
            .find(|l| self.locals.get(*l).is_some_and(|l| l.idle()))
            .or(spare.first())
            .cloned()
    }

    /// An idle worker of a peer sidecar that may take, in the same write, the items a leaving
    /// instance or a gone runner leaves when no local instance has room (else they would be
    /// flagged, read by the peer, and claimed: two round trips more). Only an instance that is
    /// certainly a shardcar worker: its node is ephemeral on the very session that holds its
    /// host's `shardcar/sidecars/{ip}` (a Java process's is on its own session, and Java would
    /// never start an item whose `running` node it did not write). It must be on an enabled
    /// server, and the mirror must show it running nothing and about to take no trigger-once
    /// request. Its sidecar runs the items as FAILOVER once it reads the write
    /// ([`Self::reconcile_adoptions`]); should its worker have no room by then, it flags them.
    fn peer_taker(&self) -> Option<String> {
        let busy: BTreeSet<&str> = self
            .view
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
            .chain(self.view.triggers.iter().map(String::as_str))
            .collect();
        // Among the idle ones, the one whose sidecar wrote to the job last: a sidecar moves the
        // epoch (`sharding/{i}`) of its instance's items with every run it starts and ends, so
        // one cut off from ZooKeeper or frozen stands out by having written nothing since. The
        // writer cannot tell otherwise while that sidecar's session lives, and items handed to
        // it would wait for it to come back (nemesis seed 7070: a hand-over to a peer
        // partitioned 1.8 s before, while another peer sat idle). Ties go to the first id.
        let last_write = |id: &str| {
            let items = self.view.items.iter().filter_map(|(i, it)| {
                let (owner, _) = it.owner.as_ref()?;
                (owner == id).then(|| self.cache.get(&self.paths.item(*i)))?
            });
            items
                .map(|n| n.stat.mzxid)
                .chain(
                    self.cache
                        .get(&self.paths.instance(id))
                        .map(|n| n.stat.czxid),
                )
                .max()
                .unwrap_or(0)
        };
        self.view
            .instances
            .iter()
            .filter(|(id, ip)| {
                *ip != &self.settings.ip
                    && !busy.contains(id.as_str())
                    && self.view.server_enabled(ip)
                    && self.view.sidecars.get(*ip).is_some_and(|owner| {
                        *owner != 0
                            && self
                                .cache
                                .get(&self.paths.instance(id))
                                .is_some_and(|n| n.stat.ephemeral_owner == *owner)
                    })
            })
            .map(|(id, _)| (last_write(id), id))
            .max_by_key(|(zxid, id)| (*zxid, std::cmp::Reverse(*id)))
            .map(|(_, id)| id.clone())
    }

    /// Runs, as FAILOVER, items a peer's sidecar handed to a local instance in the write that
    /// removed their dead runner ([`Self::peer_taker`]): `running`, `failover` and
    /// `failovering` name the instance, and no execution here has them. That write was the
    /// claim, so nothing is written: the tokens are the `running` nodes' as read, the epochs
    /// the items' as read. An instance with no room now is given none of them; the clean-up
    /// of this host's stale runners then flags them, as a claim's loser would leave them.
    ///
    /// Only a hand-over to the instance as registered now is run: the `running` node must
    /// have been written after the instance node (its `mzxid` above the instance's `czxid`, both
    /// as read). Nodes naming the same instance id from before (handed to its registration in
    /// an earlier session of this sidecar, or left by an execution here that was voided when a
    /// session expired) were for a runner that is gone: a leader may be cleaning them up and
    /// claiming them at this moment, seeing that runner gone, so running them with no write
    /// could run an item twice at once (nemesis seed 1). This host's clean-up of stale runners
    /// releases them instead, in a conditional write that meets any such claim.
    pub(super) fn reconcile_adoptions(&mut self, env: &Env, out: &mut Vec<Action>) {
        let Some(config) = self.view.config.as_ref() else {
            return;
        };
        if !config.failover || !config.monitor_execution || !self.connected(env) {
            return;
        }
        let spare = self.claim_locals(env);
        if spare.is_empty() {
            return;
        }
        let mut handed: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (i, item) in self.view.items.range(..self.view.total()) {
            let Some((runner, stat)) = &item.running else {
                continue;
            };
            if self.locked.contains(i)
                || self.view.failover_items.contains(i)
                || stat.version != failover::RUNNING_VERSION
                || item.failover.as_ref() != Some(runner)
                || item.failovering.as_ref() != Some(runner)
                || item.version.is_none()
                || !spare.contains(runner)
                || !self.registered_before(runner, stat.mzxid)
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
        let executing = self.executing();
        for items in handed.values_mut() {
            items.retain(|i| !executing.contains(i));
        }
        handed.retain(|_, items| !items.is_empty());
        for (id, items) in handed {
            info!(job = %self.name, instance = %id, items = ?items,
                  "running items a peer's sidecar handed over");
            let execution_id = self.failover_execution(&id, &items, true, env);
            let mut tokens = BTreeMap::new();
            let mut versions = BTreeMap::new();
            for i in &items {
                let item = &self.view.items[i];
                if let (Some((_, stat)), Some(version)) = (&item.running, item.version) {
                    tokens.insert(*i, stat.czxid);
                    versions.insert(*i, version);
                }
            }
            let exec = self.executions.get_mut(&execution_id).expect("just listed");
            exec.fencing_tokens = tokens;
            exec.versions = versions;
            out.push(Action::Observe(Observation::FailoverTaken(items)));
            self.deliver(&execution_id, env, out);
        }
    }

    /// Whether instance `id`'s node, as read exactly, was created before transaction `zxid`.
    fn registered_before(&self, id: &str, zxid: i64) -> bool {
        let path = self.paths.instance(id);
        !self.inexact.contains(&path)
            && self
                .cache
                .get(&path)
                .is_some_and(|node| node.stat.czxid < zxid)
    }

    /// Makes `ops`, which hand `handed` over to `taker` (and check that its node is still
    /// there), a latch-free write: the latch-free assertion in front. A local taker's FAILOVER
    /// execution is listed until the write is answered.
    pub(super) fn prepare_hand_over(
        &mut self,
        ops: &mut Vec<Op>,
        handed: &mut [i32],
        taker: Option<Taker>,
        env: &Env,
    ) -> Option<Handed> {
        let taker = taker.filter(|_| !handed.is_empty())?;
        let mut all = failover::latch_free_ops(&self.paths, self.claims.latch_dir);
        all.append(ops);
        *ops = all;
        handed.sort_unstable();
        Some(match taker {
            Taker::Here(id) => Handed::Here(self.failover_execution(&id, handed, true, env)),
            Taker::Peer(id) => {
                info!(job = %self.name, taker = %id, items = ?handed,
                      "handing items whose runner is gone to a peer's idle worker");
                Handed::Peer
            }
        })
    }

    /// A write made by [`Self::prepare_hand_over`] landed: a local taker's execution starts
    /// (its tokens from `results`); a peer's sidecar starts its own when it reads the write.
    pub(super) fn handed_over(
        &mut self,
        handed: Option<Handed>,
        ops: &[Op],
        results: &[OpResult],
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        match handed {
            Some(Handed::Here(execution_id)) => {
                let taken = self
                    .executions
                    .get(&execution_id)
                    .map(|e| e.items.iter().copied().collect())
                    .unwrap_or_default();
                self.claimed_free(taken, out);
                self.deliver_claimed(&execution_id, ops, results, env, out);
            }
            Some(Handed::Peer) => {
                // Only the latch's directory is known gone here, as after any latch-free write.
                self.claims.refused = 0;
                self.claims.latch_dir = false;
            }
            None => {}
        }
    }

    /// Notes a FAILOVER hand-over or claim that landed without the latch.
    pub(super) fn claimed_free(&mut self, items: Vec<i32>, out: &mut Vec<Action>) {
        self.claims.refused = 0;
        self.claims.latch_dir = false;
        out.push(Action::Observe(Observation::FailoverTaken(items)));
    }

    /// Flagged failover items this sidecar may claim: none an action in flight touches, none
    /// in one of its own executions.
    fn claimable(&self) -> Vec<i32> {
        let executing = self.executing();
        failover::flagged(&self.view, |i| {
            self.locked.contains(&i) || executing.contains(&i)
        })
    }

    pub(super) fn on_claimed(
        &mut self,
        latch: Option<LatchKey>,
        executions: Vec<String>,
        ops: &[Op],
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        if let Some(latch) = latch {
            out.push(Action::ReleaseLatch { latch });
        }
        let items: Vec<i32> = executions
            .iter()
            .filter_map(|e| self.executions.get(e))
            .flat_map(|e| e.items.iter().copied())
            .collect();
        self.unlock(&items);
        match result {
            Ok(results) => {
                match latch {
                    None => self.claimed_free(items, out),
                    Some(_) => {
                        self.claims.refused = 0;
                        out.push(Action::Observe(Observation::FailoverTaken(items)));
                    }
                }
                for execution_id in executions {
                    self.deliver_claimed(&execution_id, ops, &results, env, out);
                }
            }
            Err(e) => {
                self.forget_unclaimed(executions);
                if !self.latch_refused(&e, ops) {
                    self.write_failed("taking over failed items", &e, env);
                }
            }
        }
    }

    /// Whether `error` is a latch-free claim refused by the latch's state rather than by the
    /// items' (nothing else was wrong with the view, so nothing is read again): notes what it
    /// tells, and the claim is decided again at once, taking the latch if this keeps happening.
    pub(super) fn latch_refused(&mut self, error: &RegError, ops: &[Op]) -> bool {
        let RegError::MultiFailed { index, source } = error else {
            return false;
        };
        let dir = self.paths.failover_latch();
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
        debug!(job = %self.name, error = %error, refused = self.claims.refused, "latch-free failover claim refused by the latch's state; deciding again");
        true
    }
}
