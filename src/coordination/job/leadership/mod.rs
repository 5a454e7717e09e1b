//! Leadership: election and abdication under ElasticJob's latch ([`election`]), the leader's
//! eager resharding ([`sharding`], fenced by the leader node's version) and its clean-up of
//! items left by instances that are gone, and every sidecar's release of stale items of its own
//! host.
//!
//! The clean-up never hands over an item whose runner's sidecar is alive: that sidecar
//! (`shardcar/sidecars/{ip}`) knows whether a worker of its host may still be running it and
//! releases it itself once it cannot. A sidecar that is gone lost its session, so its workers'
//! leases ran out before anyone could see its instances disappear.

pub(super) mod election;
pub(super) mod reshard;
pub(super) mod sharding;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tracing::info;

use super::failover::Failover;
use super::instances::Instances;
use super::io::{Cx, Handed, Pending};
use super::runs::Runs;
use super::writes;
use super::{Action, LatchKey, Observation};
use crate::elasticjob::instance::ip_of;
use crate::registry::{CreateMode, Error as RegError, Op, OpResult};
use crate::schedule::CronSchedule;

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

/// The job's leadership as seen from this sidecar; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Leadership {
    /// A reshard waits for this instant: it would have moved items of a live owner too close
    /// to a fire instant.
    reshard_after: Option<Instant>,
    /// When this sidecar, leading, first saw the `necessary` flag set (cleared when it sees the
    /// flag gone or stops leading): a reshard that takes items from a live ElasticJob member
    /// waits [`ELASTICJOB_HOLD`] from then.
    necessary_seen: Option<Instant>,
    /// The sharding (`reshard::sharding_digest`) for which this sidecar last asked an
    /// ElasticJob leader to reshard.
    asked_reshard: Option<u64>,
    /// Whether one of the local instances leads the job (as last told to the observer).
    leading: bool,
    /// The ElasticJob member last warned of as the leader of this resident job.
    warned_jvm_leader: Option<String>,
}

impl Leadership {
    pub(super) fn reconcile(
        &mut self,
        cx: &mut Cx,
        runs: &mut Runs,
        instances: &Instances,
        failover: &Failover,
        cron: Option<&CronSchedule>,
    ) {
        // The leader node is ephemeral on this sidecar's session when it names an instance of
        // this host: if that instance is gone (its election committed while its stream ended,
        // say), nobody else can remove the node, and no election would ever happen again.
        if let Some((leader, version)) = cx.view().leader.clone() {
            if instances.is_gone_instance_of_this_host(&leader, &cx.settings().ip)
                && !cx.view().instances.contains_key(&leader)
                && !cx
                    .io
                    .in_flight(|p| matches!(p, Pending::Abdicate | Pending::Elect { .. }))
            {
                info!(job = %cx.name(), leader = %leader,
                      "the leader is an instance of this host that is gone: removing its node");
                let ops = vec![Op::Delete {
                    path: cx.paths().leader_election_instance(),
                    version: Some(version),
                }];
                cx.commit(Pending::Abdicate, ops, &[]);
                return;
            }
        }
        let live: Vec<String> = instances
            .iter()
            .filter(|(id, l)| l.live() && cx.view().instances.contains_key(*id))
            .map(|(id, _)| id.clone())
            .collect();
        let decision = election::decide(cx.view(), live.iter(), &cx.settings().ip);
        if !cx.view().necessary || !matches!(decision, election::Decision::Lead(_)) {
            self.necessary_seen = None;
        }
        match decision {
            election::Decision::Elect(id) => {
                let electing = cx
                    .io
                    .in_flight(|p| matches!(p, Pending::ElectLatch { .. } | Pending::Elect { .. }));
                if !electing {
                    let op = cx.io.start_op(Pending::ElectLatch { instance_id: id });
                    let dir = cx.paths().leader_election_latch();
                    cx.out.push(Action::AcquireLatch { op, dir });
                }
            }
            election::Decision::Abdicate(version) => {
                if !cx.io.in_flight(|p| matches!(p, Pending::Abdicate)) {
                    info!(job = %cx.name(), "own server disabled: giving up leadership");
                    let ops = vec![Op::Delete {
                        path: cx.paths().leader_election_instance(),
                        version: Some(version),
                    }];
                    cx.commit(Pending::Abdicate, ops, &[]);
                }
            }
            election::Decision::Lead(_) => {
                self.clean_up(cx, runs, instances, failover);
                self.reshard(cx, instances, cron);
            }
            election::Decision::Follow if !live.is_empty() => {
                self.ask_elasticjob_leader(cx, instances, &live)
            }
            election::Decision::Follow => {}
        }
        release_stale(cx, runs, instances);
    }

    /// The leader's clean-up of dead runners whose sidecar is gone. What a gone runner left
    /// running goes, in the clean-up itself, to a local worker with room, else to an idle worker
    /// of a peer sidecar: one write after the crash is known, as when a worker's stream ends.
    fn clean_up(
        &mut self,
        cx: &mut Cx,
        runs: &mut Runs,
        instances: &Instances,
        failover: &Failover,
    ) {
        if cx.io.in_flight(|p| matches!(p, Pending::Cleanup { .. })) {
            return;
        }
        let stale = |cx: &Cx, taker: Option<&str>| {
            let view = cx.view();
            writes::stale_ops(
                view,
                cx.paths(),
                |id, _| !view.instances.contains_key(id) && !view.sidecars.contains_key(ip_of(id)),
                |i| cx.io.is_locked(i),
                taker,
            )
        };
        let mut cleanup = stale(cx, None);
        // A taker is looked for only when there is something to clean up.
        let taker = if cleanup.ops.is_empty() {
            None
        } else {
            failover.taker(cx, runs, instances, "")
        };
        if let Some(taker) = &taker {
            cleanup = stale(cx, Some(taker.id()));
        }
        let writes::Stale {
            mut ops,
            touched: items,
            mut handed,
        } = cleanup;
        if ops.is_empty() {
            return;
        }
        info!(job = %cx.name(), items = ?items, "releasing items of instances that are gone");
        let handed = failover.prepare_hand_over(cx, runs, &mut ops, &mut handed, taker);
        let pending = Pending::Cleanup {
            items: items.clone(),
            handed,
        };
        cx.commit(pending, ops, &items);
    }

    /// The leader's clean-up landed (or not). Items it handed to a local instance start now; a
    /// peer's sidecar starts those it was handed when it reads the write.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cleaned_up(
        &mut self,
        cx: &mut Cx,
        runs: &mut Runs,
        instances: &mut Instances,
        failover: &mut Failover,
        items: &[i32],
        handed: Option<Handed>,
        ops: &[Op],
        result: Result<Vec<OpResult>, RegError>,
    ) {
        cx.io.unlock(items);
        match result {
            Ok(results) => failover.handed_over(cx, runs, instances, handed, ops, &results),
            Err(e) => {
                runs.forget_unclaimed(handed.and_then(Handed::execution));
                if !failover.latch_refused(cx, &e, ops) {
                    cx.write_failed("releasing items no one runs any more", &e);
                }
            }
        }
    }

    /// The election latch is held: the leader node is created under it, if there is still none
    /// and the candidate is still live.
    pub(super) fn elect_latched(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
        instance_id: String,
        latch: LatchKey,
    ) {
        let can = cx.view().leader.is_none()
            && cx.connected()
            && instances.get(&instance_id).is_some_and(|l| l.live());
        if !can {
            cx.out.push(Action::ReleaseLatch { latch });
            return;
        }
        let ops = vec![Op::create(
            cx.paths().leader_election_instance(),
            instance_id,
            CreateMode::Ephemeral,
        )];
        cx.commit(Pending::Elect { latch }, ops, &[]);
    }

    pub(super) fn elected(
        &mut self,
        cx: &mut Cx,
        latch: LatchKey,
        result: Result<Vec<OpResult>, RegError>,
    ) {
        cx.out.push(Action::ReleaseLatch { latch });
        match result {
            Ok(_) => {
                let leader = cx.view().leader.as_ref().map(|(id, _)| id.clone());
                info!(job = %cx.name(), leader = ?leader, "became leader");
            }
            Err(RegError::MultiFailed { source, .. })
                if matches!(*source, RegError::NodeExists(_)) => {}
            Err(e) => cx.write_failed("electing a leader", &e),
        }
    }

    pub(super) fn resharded(&mut self, cx: &mut Cx, result: Result<Vec<OpResult>, RegError>) {
        match result {
            Ok(_) => info!(job = %cx.name(), "resharded"),
            Err(e) => cx.write_failed("resharding", &e),
        }
    }

    /// The flag was set (or was there already: an ElasticJob member's listener sets it too).
    pub(super) fn flag_set(&mut self, cx: &mut Cx, result: Result<Vec<OpResult>, RegError>) {
        match result {
            Ok(_) => {}
            Err(RegError::MultiFailed { source, .. })
                if matches!(*source, RegError::NodeExists(_)) => {}
            Err(e) => cx.write_failed("setting the resharding flag", &e),
        }
    }

    /// Tells the observer when leadership of the job moves to or away from this sidecar.
    pub(super) fn observe(&mut self, cx: &mut Cx, instances: &Instances) {
        let leading = cx
            .view()
            .leader
            .as_ref()
            .is_some_and(|(id, _)| instances.get(id).is_some_and(|l| l.live()));
        if leading != self.leading {
            self.leading = leading;
            cx.observe(Observation::Leadership { leading });
        }
    }

    /// When the leader's reshard waits for (only ahead: once passed, the reshard is the
    /// leader's to decide again, if it still leads).
    pub(super) fn due(&self, now: Instant) -> Option<Instant> {
        self.reshard_after.filter(|t| *t > now)
    }
}

/// Items of this host whose runner no worker here is running any more: an instance of this
/// IP that is gone (from an earlier life of this sidecar, or a process of this host), or a
/// live local instance without an execution of the item (its execution was voided when a
/// session expired). Their workers have stopped, so they are released at once.
fn release_stale(cx: &mut Cx, runs: &Runs, instances: &Instances) {
    if cx
        .io
        .in_flight(|p| matches!(p, Pending::ReleaseStale { .. }))
    {
        return;
    }
    let ip = cx.settings().ip.clone();
    // (instance, item) of every execution here, gathered once rather than searched for each
    // item.
    let executing: BTreeSet<(&str, i32)> = runs.executing_on().collect();
    let view = cx.view();
    let writes::Stale {
        ops,
        touched: items,
        ..
    } = writes::stale_ops(
        view,
        cx.paths(),
        |id, i| {
            if ip_of(id) != ip {
                return false;
            }
            match instances.get(id) {
                Some(local) if local.gone().is_some() || !local.registered() => false,
                Some(_) => !executing.contains(&(id, i)),
                None => !view.instances.contains_key(id),
            }
        },
        |i| cx.io.is_locked(i),
        None,
    );
    if !ops.is_empty() {
        info!(job = %cx.name(), items = ?items, "releasing items this host no longer runs");
        let pending = Pending::ReleaseStale {
            items: items.clone(),
        };
        cx.commit(pending, ops, &items);
    }
}

/// A stale release landed (or not).
pub(super) fn released_stale(cx: &mut Cx, items: &[i32], result: Result<Vec<OpResult>, RegError>) {
    cx.io.unlock(items);
    if let Err(e) = result {
        cx.write_failed("releasing items no one runs any more", &e);
    }
}
