//! When the leader reshards: at once on any change of membership, servers or item count, but
//! never within [`RESHARD_QUIET`] of a fire instant when it moves a live owner's items, and
//! [`ELASTICJOB_HOLD`] after the `necessary` flag when it takes items from a live ElasticJob
//! member. A member under an ElasticJob leader asks it for a reshard that its sharding owes a
//! local instance.

use std::time::Instant;

use tracing::{info, warn};

use super::{sharding, Leadership, ELASTICJOB_HOLD, RESHARD_QUIET};
use crate::coordination::job::instances::Instances;
use crate::coordination::job::io::{Cx, Pending};
use crate::elasticjob::config::JobConfiguration;
use crate::registry::{CreateMode, Op};
use crate::schedule::CronSchedule;

impl Leadership {
    /// The leader's reshard, when the sharding in place is not what the strategy wants.
    pub(super) fn reshard(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
        cron: Option<&CronSchedule>,
    ) {
        if cx.io.in_flight(|p| matches!(p, Pending::Reshard)) {
            return;
        }
        let Some((_, version)) = cx.view().leader.clone() else {
            return;
        };
        let Some(plan) = sharding::plan(cx.view(), cx.name()) else {
            self.reshard_after = None;
            return;
        };
        if takes_from_elasticjob(cx, instances, &plan) {
            if !cx.view().necessary {
                if !cx.io.in_flight(|p| matches!(p, Pending::ReshardFlag)) {
                    info!(job = %cx.name(), reason = plan.reason,
                          "setting the resharding flag: the reshard takes items from a live ElasticJob member");
                    set_flag(cx, Some(version));
                }
                self.reshard_after = None;
                return;
            }
            let until = *self.necessary_seen.get_or_insert(cx.env.now) + ELASTICJOB_HOLD;
            if until > cx.env.now {
                self.reshard_after = Some(until);
                return;
            }
        }
        if let Some(until) = quiet_until(cx, cron, &plan) {
            if self.reshard_after.is_none_or(|t| t <= cx.env.now) {
                info!(job = %cx.name(), reason = plan.reason,
                      wait_ms = until.saturating_duration_since(cx.env.now).as_millis() as u64,
                      "resharding after the fire instant: it would move items of a live owner");
            }
            self.reshard_after = Some(until);
            return;
        }
        self.reshard_after = None;
        info!(job = %cx.name(), reason = plan.reason, owners = ?plan.owners, "resharding");
        let ops = sharding::commit_ops(cx.view(), cx.paths(), &plan, version);
        cx.commit(Pending::Reshard, ops, &[]);
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
    pub(super) fn ask_elasticjob_leader(
        &mut self,
        cx: &mut Cx,
        instances: &Instances,
        live: &[String],
    ) {
        let Some((leader, _)) = cx.view().leader.clone() else {
            return;
        };
        if cx.view().resident() && is_elasticjob_member(cx, instances, &leader) {
            if self.warned_jvm_leader.as_deref() != Some(leader.as_str()) {
                warn!(job = %cx.name(), leader = %leader,
                      "an ElasticJob JVM leads this resident job: it knows nothing of holds, and no item moves until a sidecar's instance leads again (docs/elasticjob-compat.md)");
                self.warned_jvm_leader = Some(leader);
            }
            return;
        }
        // A strategy this sidecar does not know would make its plan differ from the leader's.
        let known_strategy = |c: &JobConfiguration| c.strategy().is_ok();
        if !is_elasticjob_member(cx, instances, &leader)
            || !cx.view().config.as_deref().is_some_and(known_strategy)
            || cx.resharding_pending()
            || cx.io.in_flight(|p| matches!(p, Pending::ReshardFlag))
        {
            return;
        }
        let Some(plan) = sharding::plan(cx.view(), cx.name()) else {
            return;
        };
        // Only for a local instance the sharding in place leaves without items while the
        // strategy gives it some: the loss this is for.
        let left_out = |id: &String| {
            plan.owners.values().any(|owner| owner == id)
                && !cx
                    .view()
                    .items
                    .values()
                    .any(|item| item.owner.as_ref().is_some_and(|(o, _)| o == id))
        };
        if !live.iter().any(left_out) {
            return;
        }
        let sharding = sharding_digest(cx, &plan);
        if self.asked_reshard == Some(sharding) {
            return;
        }
        self.asked_reshard = Some(sharding);
        info!(job = %cx.name(), leader = %leader,
              "asking the ElasticJob leader to reshard at its next fire: its sharding leaves an instance here without the items the strategy gives it");
        set_flag(cx, None);
    }
}

/// Whether instance `id` is an ElasticJob member's: neither local nor a sidecar's (its node on
/// the session of a `shardcar/sidecars/{ip}` node, [`JobView::via_sidecar`]).
///
/// [`JobView::via_sidecar`]: crate::coordination::job::mirror::JobView::via_sidecar
fn is_elasticjob_member(cx: &Cx, instances: &Instances, id: &str) -> bool {
    !instances.contains(id) && !cx.view().via_sidecar(id)
}

/// Whether `plan` moves an item away from a live ElasticJob member, which starts its items
/// unfenced ([`ELASTICJOB_HOLD`]).
fn takes_from_elasticjob(cx: &Cx, instances: &Instances, plan: &sharding::ShardingPlan) -> bool {
    let view = cx.view();
    plan.owners.iter().any(|(i, new)| {
        view.owner(*i).is_some_and(|old| {
            old != new
                && view.instances.contains_key(old)
                && is_elasticjob_member(cx, instances, old)
        })
    })
}

/// Creates `leader/sharding/necessary`, fenced on the leader node's version when given (the
/// leader's own flag).
fn set_flag(cx: &mut Cx, leader_version: Option<i32>) {
    let fence = leader_version.map(|version| Op::Check {
        path: cx.paths().leader_election_instance(),
        version,
    });
    let create = Op::create(
        cx.paths().sharding_necessary(),
        Vec::new(),
        CreateMode::Persistent,
    );
    let ops = fence.into_iter().chain([create]).collect();
    cx.commit(Pending::ReshardFlag, ops, &[]);
}

/// A digest of the item owners in place and of those `plan` wants, to ask for a reshard once
/// per sharding and membership.
fn sharding_digest(cx: &Cx, plan: &sharding::ShardingPlan) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for (i, item) in &cx.view().items {
        (i, item.owner.as_ref().map(|(id, _)| id)).hash(&mut hasher);
    }
    plan.owners.hash(&mut hasher);
    hasher.finish()
}

/// When a reshard that moves an item away from a live owner would land within
/// [`RESHARD_QUIET`] of one of the job's fire instants (or of the claim lead before it,
/// `Env::claim_lead`), the instant it may be written instead ([`RESHARD_QUIET`] after the fire
/// instant).
///
/// Every member fires on the owners it has read by the fire instant. A reshard written just
/// before the instant but not yet read by the new owner, or written just after it while the old
/// owner held its fire for it, leaves a moved item run by neither for that fire: the old owner
/// runs its new items, the new owner ran its old ones. Written after the instant and its fires,
/// the reshard moves items between runs, as any other time. Items whose owner is gone are not
/// held back: no one else would run them at that fire.
pub(in crate::coordination::job) fn quiet_until(
    cx: &Cx,
    cron: Option<&CronSchedule>,
    plan: &sharding::ShardingPlan,
) -> Option<Instant> {
    let cron = cron?;
    let view = cx.view();
    let moves_live = plan.owners.iter().any(|(i, new)| {
        view.owner(*i)
            .is_some_and(|old| old != new && view.instances.contains_key(old))
    });
    if !moves_live {
        return None;
    }
    let quiet = chrono::Duration::from_std(RESHARD_QUIET).ok()?;
    // Members claim a fire's run the claim lead before its instant, on the owners they have read
    // by then: the quiet time starts that much earlier.
    let ahead = chrono::Duration::from_std(cx.env.claim_lead).ok()?;
    // The first fire instant strictly after `wall - quiet`: the one just passed, if any.
    let wall = cx.env.wall;
    let fire = cron.next_after(wall - quiet)?;
    if fire > wall + ahead + quiet {
        return None;
    }
    let wait = (fire + quiet - wall).to_std().unwrap_or_default();
    Some(cx.env.now + wait)
}
