//! Leadership: election and abdication under ElasticJob's latch, the leader's eager
//! resharding (fenced by the leader node's version) and its clean-up of items left by
//! instances that are gone, and every sidecar's release of stale items of its own host.
//!
//! The clean-up never hands over an item whose runner's sidecar is alive: that sidecar
//! (`shardcar/sidecars/{ip}`) knows whether a worker of its host may still be running it and
//! releases it itself once it cannot. A sidecar that is gone lost its session, so its workers'
//! leases ran out before anyone could see its instances disappear.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tracing::{debug, info};

use super::state::{Handed, JobState, Pending};
use super::{Action, Env, LatchKey};
use crate::coordination::{election, failover, sharding};
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::instance::ip_of;
use crate::registry::{CreateMode, Error as RegError, Op, OpResult};

/// How far from a fire instant the leader keeps a reshard that moves items of a live owner:
/// long enough for every member to have read what was written before it and to have fired
/// (members' clocks are assumed to agree to within a few milliseconds, as cron jobs on
/// several hosts need anyway).
pub(crate) const RESHARD_QUIET: Duration = Duration::from_millis(100);

/// How long after the `necessary` flag is set the leader holds a reshard that takes an item from
/// a live ElasticJob member.
///
/// An ElasticJob member starts an execution by checking the flag (it waits while it is set),
/// then reads its items from its cache, checks their `running` nodes and writes them, replacing
/// any it finds then: nothing fences it. A reshard that moves one of its items in between lets
/// the new owner start the item while the member goes on to run it too. Set first, the flag
/// stops members that have not checked it yet; the hold lets those past the check write their
/// `running` nodes (milliseconds, tens under load), which the new owner then waits for. A member
/// slower than the hold from the check to its `running` write can still run a moved item, as
/// under ElasticJob's own leader, which does not wait at all.
pub(crate) const ELASTICJOB_HOLD: Duration = Duration::from_millis(500);

impl JobState {
    pub(super) fn reconcile_leadership(&mut self, env: &Env, out: &mut Vec<Action>) {
        // The leader node is ephemeral on this sidecar's session when it names an instance of
        // this host: if that instance is gone (its election committed while its stream ended,
        // say), nobody else can remove the node, and no election would ever happen again.
        if let Some((leader, version)) = &self.view.leader {
            if self.is_gone_instance_of_this_host(leader)
                && !self.view.instances.contains_key(leader)
                && !self.in_flight(|p| matches!(p, Pending::Abdicate | Pending::Elect { .. }))
            {
                info!(job = %self.name, leader = %leader,
                      "the leader is an instance of this host that is gone: removing its node");
                let ops = vec![Op::Delete {
                    path: self.paths.leader_election_instance(),
                    version: Some(*version),
                }];
                self.commit(Pending::Abdicate, ops, &[], out);
                return;
            }
        }
        let live: Vec<String> = self
            .locals
            .iter()
            .filter(|(id, l)| l.live() && self.view.instances.contains_key(*id))
            .map(|(id, _)| id.clone())
            .collect();
        let decision = election::decide(&self.view, live.iter(), &self.settings.ip);
        if !self.view.necessary || !matches!(decision, election::Decision::Lead(_)) {
            self.necessary_seen = None;
        }
        match decision {
            election::Decision::Elect(id) => {
                if !self
                    .in_flight(|p| matches!(p, Pending::ElectLatch { .. } | Pending::Elect { .. }))
                {
                    let op = self.start_op(Pending::ElectLatch { instance_id: id });
                    out.push(Action::AcquireLatch {
                        op,
                        dir: self.paths.leader_election_latch(),
                    });
                }
            }
            election::Decision::Abdicate(version) => {
                if !self.in_flight(|p| matches!(p, Pending::Abdicate)) {
                    info!(job = %self.name, "own server disabled: giving up leadership");
                    let ops = vec![Op::Delete {
                        path: self.paths.leader_election_instance(),
                        version: Some(version),
                    }];
                    self.commit(Pending::Abdicate, ops, &[], out);
                }
            }
            election::Decision::Lead(_) => self.lead(env, out),
            election::Decision::Follow if !live.is_empty() => {
                self.ask_elasticjob_leader(&live, out)
            }
            election::Decision::Follow => {}
        }
        let _ = env;
        self.release_stale(out);
    }

    /// The leader's work: clean-up of dead runners whose sidecar is gone, then resharding.
    fn lead(&mut self, env: &Env, out: &mut Vec<Action>) {
        if !self.in_flight(|p| matches!(p, Pending::Cleanup { .. })) {
            let view = &self.view;
            let locked = &self.locked;
            let stale = |taker: Option<&str>| {
                failover::stale_ops(
                    view,
                    &self.paths,
                    |id, _| {
                        !view.instances.contains_key(id) && !view.sidecars.contains_key(ip_of(id))
                    },
                    |i| locked.contains(&i),
                    taker,
                )
            };
            let mut cleanup = stale(None);
            // What a gone runner left running goes, in the clean-up itself, to a local worker
            // with room, else to an idle worker of a peer sidecar: one write after the crash
            // is known, as when a worker's stream ends (`leave`). A taker is looked for only
            // when there is something to clean up.
            let taker = if cleanup.ops.is_empty() {
                None
            } else {
                self.taker("", env)
            };
            if let Some(taker) = &taker {
                cleanup = stale(Some(taker.id()));
            }
            let failover::Stale {
                mut ops,
                touched: items,
                mut handed,
            } = cleanup;
            if !ops.is_empty() {
                info!(job = %self.name, items = ?items, "releasing items of instances that are gone");
                let handed = self.prepare_hand_over(&mut ops, &mut handed, taker, env);
                self.commit(
                    Pending::Cleanup {
                        items: items.clone(),
                        handed,
                    },
                    ops,
                    &items,
                    out,
                );
            }
        }
        if self.in_flight(|p| matches!(p, Pending::Reshard)) {
            return;
        }
        let Some((_, version)) = self.view.leader.clone() else {
            return;
        };
        let Some(plan) = sharding::plan(&self.view, &self.name) else {
            self.reshard_after = None;
            return;
        };
        if self.takes_from_elasticjob(&plan) {
            if !self.view.necessary {
                if !self.in_flight(|p| matches!(p, Pending::ReshardFlag)) {
                    info!(job = %self.name, reason = plan.reason,
                          "setting the resharding flag: the reshard takes items from a live ElasticJob member");
                    self.set_flag(Some(version), out);
                }
                self.reshard_after = None;
                return;
            }
            let until = *self.necessary_seen.get_or_insert(env.now) + ELASTICJOB_HOLD;
            if until > env.now {
                self.reshard_after = Some(until);
                return;
            }
        }
        if let Some(until) = self.quiet_until(&plan, env) {
            if self.reshard_after.is_none_or(|t| t <= env.now) {
                info!(job = %self.name, reason = plan.reason,
                      wait_ms = until.saturating_duration_since(env.now).as_millis() as u64,
                      "resharding after the fire instant: it would move items of a live owner");
            }
            self.reshard_after = Some(until);
            return;
        }
        self.reshard_after = None;
        info!(job = %self.name, reason = plan.reason, owners = ?plan.owners, "resharding");
        let ops = sharding::commit_ops(&self.view, &self.paths, &plan, version);
        self.commit(Pending::Reshard, ops, &[], out);
    }

    /// Whether instance `id` is an ElasticJob member's: neither local nor of a host with a
    /// sidecar (`shardcar/sidecars/{ip}`).
    fn is_elasticjob_member(&self, id: &str) -> bool {
        !self.locals.contains_key(id) && !self.view.sidecars.contains_key(ip_of(id))
    }

    /// Whether `plan` moves an item away from a live ElasticJob member, which starts its items
    /// unfenced ([`ELASTICJOB_HOLD`]).
    fn takes_from_elasticjob(&self, plan: &sharding::ShardingPlan) -> bool {
        plan.owners.iter().any(|(i, new)| {
            self.view.owner(*i).is_some_and(|old| {
                old != new
                    && self.view.instances.contains_key(old)
                    && self.is_elasticjob_member(old)
            })
        })
    }

    /// Under an ElasticJob leader, sets the `necessary` flag when the sharding in place leaves a
    /// live local instance without items that the job's strategy would give it over the
    /// available instances, so that the leader reshards at its next fire. Such a leader
    /// reshards only at a fire that finds the flag, and it reads the servers' statuses from its
    /// cache: a sharding made on a stale one (every item to itself, just after the console
    /// enabled the job) or on instances read before one registered is otherwise kept until
    /// membership or a server's status changes again.
    ///
    /// Asked once for a given sharding and membership: a leader that shards otherwise is not
    /// asked to reshard at each of its fires (nor at all under a strategy shardcar does not
    /// know).
    fn ask_elasticjob_leader(&mut self, live: &[String], out: &mut Vec<Action>) {
        let Some((leader, _)) = &self.view.leader else {
            return;
        };
        // A strategy this sidecar does not know would make its plan differ from the leader's.
        let known_strategy = |c: &JobConfiguration| c.strategy().is_ok();
        if !self.is_elasticjob_member(leader)
            || !self.view.config.as_deref().is_some_and(known_strategy)
            || self.resharding_pending()
            || self.in_flight(|p| matches!(p, Pending::ReshardFlag))
        {
            return;
        }
        let Some(plan) = sharding::plan(&self.view, &self.name) else {
            return;
        };
        // Only for a local instance the sharding in place leaves without items while the
        // strategy gives it some: the loss this is for.
        let left_out = |id: &String| {
            plan.owners.values().any(|owner| owner == id)
                && !self
                    .view
                    .items
                    .values()
                    .any(|item| item.owner.as_ref().is_some_and(|(o, _)| o == id))
        };
        if !live.iter().any(left_out) {
            return;
        }
        let sharding = self.sharding_digest(&plan);
        if self.asked_reshard == Some(sharding) {
            return;
        }
        self.asked_reshard = Some(sharding);
        info!(job = %self.name, leader = %leader,
              "asking the ElasticJob leader to reshard at its next fire: its sharding leaves an instance here without the items the strategy gives it");
        self.set_flag(None, out);
    }

    /// Creates `leader/sharding/necessary`, fenced on the leader node's version when given (the
    /// leader's own flag).
    fn set_flag(&mut self, leader_version: Option<i32>, out: &mut Vec<Action>) {
        let fence = leader_version.map(|version| Op::Check {
            path: self.paths.leader_election_instance(),
            version,
        });
        let create = Op::create(
            self.paths.sharding_necessary(),
            Vec::new(),
            CreateMode::Persistent,
        );
        let ops = fence.into_iter().chain([create]).collect();
        self.commit(Pending::ReshardFlag, ops, &[], out);
    }

    /// A digest of the item owners in place and of those `plan` wants, to ask for a reshard
    /// once per sharding and membership.
    fn sharding_digest(&self, plan: &sharding::ShardingPlan) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for (i, item) in &self.view.items {
            (i, item.owner.as_ref().map(|(id, _)| id)).hash(&mut hasher);
        }
        plan.owners.hash(&mut hasher);
        hasher.finish()
    }

    /// The flag was set (or was there already: an ElasticJob member's listener sets it too).
    pub(super) fn on_flag_set(&mut self, result: Result<Vec<OpResult>, RegError>, env: &Env) {
        match result {
            Ok(_) => {}
            Err(RegError::MultiFailed { source, .. })
                if matches!(*source, RegError::NodeExists(_)) => {}
            Err(e) => self.write_failed("setting the resharding flag", &e, env),
        }
    }

    /// When a reshard that moves an item away from a live owner would land within
    /// [`RESHARD_QUIET`] of one of the job's fire instants (or of the claim lead before it,
    /// `claim_ahead`), the instant it may be written instead ([`RESHARD_QUIET`] after the fire
    /// instant).
    ///
    /// Every member fires on the owners it has read by the fire instant. A reshard written just
    /// before the instant but not yet read by the new owner, or written just after it while the
    /// old owner held its fire for it, leaves a moved item run by neither for that fire: the old
    /// owner runs its new items, the new owner ran its old ones. Written after the instant and
    /// its fires, the reshard moves items between runs, as any other time. Items whose owner
    /// is gone are not held back: no one else would run them at that fire.
    fn quiet_until(&self, plan: &sharding::ShardingPlan, env: &Env) -> Option<Instant> {
        let cron = self.cron.as_ref()?;
        let moves_live = plan.owners.iter().any(|(i, new)| {
            self.view
                .owner(*i)
                .is_some_and(|old| old != new && self.view.instances.contains_key(old))
        });
        if !moves_live {
            return None;
        }
        let quiet = chrono::Duration::from_std(RESHARD_QUIET).ok()?;
        // Members claim a fire's run `claim_ahead` before its instant, on the owners they have
        // read by then: the quiet time starts that much earlier.
        let ahead = chrono::Duration::from_std(self.settings.claim_ahead).ok()?;
        // The first fire instant strictly after `wall - quiet`: the one just passed, if any.
        let fire = cron.next_after(env.wall - quiet)?;
        if fire > env.wall + ahead + quiet {
            return None;
        }
        let wait = (fire + quiet - env.wall).to_std().unwrap_or_default();
        Some(env.now + wait)
    }

    /// Items of this host whose runner no worker here is running any more: an instance of this
    /// IP that is gone (from an earlier life of this sidecar, or a process of this host), or a
    /// live local instance without an execution of the item (its execution was voided when a
    /// session expired). Their workers have stopped, so they are released at once.
    fn release_stale(&mut self, out: &mut Vec<Action>) {
        if self.in_flight(|p| matches!(p, Pending::ReleaseStale { .. })) {
            return;
        }
        let ip = self.settings.ip.clone();
        let view = &self.view;
        let locals = &self.locals;
        // (instance, item) of every execution here, gathered once rather than searched for
        // each item.
        let executing: BTreeSet<(&str, i32)> = self
            .executions
            .values()
            .flat_map(|e| e.items.iter().map(|i| (e.instance_id.as_str(), *i)))
            .collect();
        let locked = &self.locked;
        let failover::Stale {
            ops,
            touched: items,
            ..
        } = failover::stale_ops(
            view,
            &self.paths,
            |id, i| {
                if ip_of(id) != ip {
                    return false;
                }
                match locals.get(id) {
                    Some(local) if local.gone.is_some() || !local.registered => false,
                    Some(_) => !executing.contains(&(id, i)),
                    None => !view.instances.contains_key(id),
                }
            },
            |i| locked.contains(&i),
            None,
        );
        if !ops.is_empty() {
            info!(job = %self.name, items = ?items, "releasing items this host no longer runs");
            self.commit(
                Pending::ReleaseStale {
                    items: items.clone(),
                },
                ops,
                &items,
                out,
            );
        }
    }

    /// The leader's clean-up landed (or not). Items it handed to a local instance start
    /// now; a peer's sidecar starts those it was handed when it reads the write.
    pub(super) fn on_cleaned_up(
        &mut self,
        items: &[i32],
        handed: Option<Handed>,
        ops: &[Op],
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        self.unlock(items);
        match result {
            Ok(results) => self.handed_over(handed, ops, &results, env, out),
            Err(e) => {
                self.forget_unclaimed(handed.and_then(Handed::execution));
                if !self.latch_refused(&e, ops) {
                    self.write_failed("releasing items no one runs any more", &e, env);
                }
            }
        }
    }

    pub(super) fn on_latched(
        &mut self,
        pending: Pending,
        result: Result<LatchKey, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        match (pending, result) {
            (Pending::ElectLatch { instance_id }, Ok(latch)) => {
                self.refresh_view();
                let can = self.view.leader.is_none()
                    && self.connected(env)
                    && self.locals.get(&instance_id).is_some_and(|l| l.live());
                if !can {
                    out.push(Action::ReleaseLatch { latch });
                    return;
                }
                let ops = vec![Op::create(
                    self.paths.leader_election_instance(),
                    instance_id,
                    CreateMode::Ephemeral,
                )];
                self.commit(Pending::Elect { latch }, ops, &[], out);
            }
            (Pending::ClaimLatch, Ok(latch)) => self.claim_now(Some(latch), env, out),
            (_, Err(e)) => self.write_failed("taking a latch", &e, env),
            (pending, Ok(latch)) => {
                debug!(job = %self.name, ?pending, "latch for nothing; released");
                out.push(Action::ReleaseLatch { latch });
            }
        }
    }

    pub(super) fn on_elected(
        &mut self,
        latch: LatchKey,
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        out.push(Action::ReleaseLatch { latch });
        match result {
            Ok(_) => {
                self.refresh_view();
                let leader = self.view.leader.as_ref().map(|(id, _)| id.clone());
                info!(job = %self.name, leader = ?leader, "became leader");
            }
            Err(RegError::MultiFailed { source, .. })
                if matches!(*source, RegError::NodeExists(_)) => {}
            Err(e) => self.write_failed("electing a leader", &e, env),
        }
    }

    pub(super) fn on_resharded(&mut self, result: Result<Vec<OpResult>, RegError>, env: &Env) {
        match result {
            Ok(_) => info!(job = %self.name, "resharded"),
            Err(e) => self.write_failed("resharding", &e, env),
        }
    }
}
