//! Sharding: when the leader must reshard, what the new assignment is, and the one multi-op
//! that commits it (`docs/elasticjob-compat.md` §5).
//!
//! ElasticJob reshards lazily at the leader's next fire; shardcar's leader does it eagerly, as
//! soon as membership, a server's status or the item count changes, and only rewrites the
//! owner nodes that change. The commit is fenced by the version of the leader node the leader
//! read (`docs/elasticjob-compat.md` §11) so a deposed leader's write fails instead of landing.

use std::collections::BTreeMap;

use crate::coordination::job::mirror::JobView;
use crate::elasticjob::paths::JobPaths;
use crate::elasticjob::strategy::{shard, StrategyType};
use crate::registry::{CreateMode, Op};

/// A new assignment decided by the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardingPlan {
    /// The owner of every item `0..total`.
    pub owners: BTreeMap<i32, String>,
    /// Why the leader reshards (for logs).
    pub reason: &'static str,
}

/// Decides whether the leader must reshard and, if so, the new owners.
///
/// Returns `None` when nothing is to be done: no config, no available instance, another
/// leader's reshard in progress (`processing`), or the current owners already match.
pub fn plan(view: &JobView, job_name: &str) -> Option<ShardingPlan> {
    let config = view.config.as_ref()?;
    let total = config.sharding_total_count;
    if total <= 0 || view.processing {
        return None;
    }
    let mut available = view.available_instances();
    if view.resident() {
        // An ElasticJob member knows nothing of holds: it is given no items of a resident job.
        available.retain(|id| view.via_sidecar(id));
    }
    if available.is_empty() {
        return None;
    }
    let count_changed =
        view.items.keys().any(|i| *i >= total) || (0..total).any(|i| !view.items.contains_key(&i));
    let unowned = (0..total).any(|i| view.owner(i).is_none());
    let static_locked = config.static_sharding && view.items.values().any(|it| it.owner.is_some());
    let strategy = config.strategy().unwrap_or(StrategyType::AvgAllocation);
    let assignment = if view.resident() {
        sticky(view, &available, total)
    } else {
        shard(strategy, job_name, &available, total)
    };
    // Item i's owner under the strategy (the last instance given it), compared without
    // copying a name: the leader asks this after every change it sees.
    let mut wanted: Vec<Option<&str>> = vec![None; total as usize];
    for (instance, items) in &assignment {
        for i in items {
            if let Some(slot) = usize::try_from(*i).ok().and_then(|i| wanted.get_mut(i)) {
                *slot = Some(instance.as_str());
            }
        }
    }
    let differs = (0..total).any(|i| view.owner(i) != wanted[i as usize]);
    let reason = if view.necessary {
        "resharding flag set"
    } else if count_changed {
        "item count changed"
    } else if unowned {
        "items without owner"
    } else if differs && !static_locked {
        "membership or server status changed"
    } else {
        return None;
    };
    let mut owners = BTreeMap::new();
    for (instance, items) in assignment {
        for i in items {
            owners.insert(i, instance.clone());
        }
    }
    Some(ShardingPlan { owners, reason })
}

/// A resident job's assignment: balanced (each instance `total / n` items, the first
/// `total % n` by current holdings one more) and moving as few items as it can, so that a join
/// or a leave interrupts no hold it need not. Instances keep their items up to their share
/// (lowest items first); the rest, and items without an available owner, go to the instances
/// below their share, in `instances_desc` order, lowest items first.
pub fn sticky(view: &JobView, instances_desc: &[String], total: i32) -> Vec<(String, Vec<i32>)> {
    let n = instances_desc.len();
    if n == 0 || total <= 0 {
        return Vec::new();
    }
    let mut kept: Vec<Vec<i32>> = instances_desc
        .iter()
        .map(|id| (0..total).filter(|i| view.owner(*i) == Some(id)).collect())
        .collect();
    // Shares: the larger ones to the instances that hold most already (ties in order).
    let base = total as usize / n;
    let extra = total as usize % n;
    let mut by_holdings: Vec<usize> = (0..n).collect();
    by_holdings.sort_by_key(|k| std::cmp::Reverse(kept[*k].len()));
    let mut share = vec![base; n];
    for k in by_holdings.into_iter().take(extra) {
        share[k] += 1;
    }
    let mut pool: Vec<i32> = (0..total)
        .filter(|i| !kept.iter().any(|items| items.contains(i)))
        .collect();
    for (k, items) in kept.iter_mut().enumerate() {
        if items.len() > share[k] {
            pool.extend(items.drain(share[k]..));
        }
    }
    pool.sort_unstable();
    let mut pool = pool.into_iter();
    for (k, items) in kept.iter_mut().enumerate() {
        while items.len() < share[k] {
            match pool.next() {
                Some(i) => items.push(i),
                None => break,
            }
        }
        items.sort_unstable();
    }
    instances_desc.iter().cloned().zip(kept).collect()
}

/// The multi-op that commits `plan`: a check of the leader node's version, the owner nodes
/// that change, removal of items beyond the total, and removal of the `necessary` flag.
pub fn commit_ops(
    view: &JobView,
    paths: &JobPaths,
    plan: &ShardingPlan,
    leader_version: i32,
) -> Vec<Op> {
    let mut ops = vec![Op::Check {
        path: paths.leader_election_instance(),
        version: leader_version,
    }];
    if !view.has_sharding_root {
        ops.push(Op::create(
            paths.sharding(),
            Vec::new(),
            CreateMode::Persistent,
        ));
    }
    for (i, owner) in &plan.owners {
        let item = view.items.get(i);
        if item.is_none() {
            ops.push(Op::create(
                paths.item(*i),
                Vec::new(),
                CreateMode::Persistent,
            ));
        }
        match item.and_then(|it| it.owner.as_ref()) {
            Some((current, _)) if current == owner => {}
            Some(_) => ops.push(Op::SetData {
                path: paths.item_instance(*i),
                data: owner.clone().into_bytes(),
                version: None,
            }),
            None => ops.push(Op::Create {
                path: paths.item_instance(*i),
                data: owner.clone().into_bytes(),
                mode: CreateMode::Persistent,
            }),
        }
    }
    let total = plan.owners.len() as i32;
    for (i, item) in view.items.range(total..) {
        let children = [
            (item.owner.is_some(), paths.item_instance(*i)),
            (item.running.is_some(), paths.item_running(*i)),
            (item.misfire, paths.item_misfire(*i)),
            (item.disabled, paths.item_disabled(*i)),
            (item.failover.is_some(), paths.item_failover(*i)),
            (item.failovering.is_some(), paths.item_failovering(*i)),
        ];
        for (present, path) in children {
            if present {
                ops.push(Op::Delete {
                    path,
                    version: None,
                });
            }
        }
        ops.push(Op::delete(paths.item(*i)));
    }
    if view.necessary {
        ops.push(Op::delete(paths.sharding_necessary()));
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::job::mirror::ItemView;
    use crate::elasticjob::config::JobConfiguration;
    use crate::registry::CachedStat;
    use std::sync::Arc;

    const A: &str = "10.0.0.1@-@1";
    const B: &str = "10.0.0.2@-@1";
    const C: &str = "10.0.0.3@-@1";

    fn view(total: i32, instances: &[&str], owners: &[(i32, &str)]) -> JobView {
        let mut v = JobView {
            config: Some(Arc::new(JobConfiguration::new("demoJob", total))),
            has_sharding_root: !owners.is_empty(),
            ..JobView::default()
        };
        for id in instances {
            v.instances
                .insert(id.to_string(), id.split("@-@").next().unwrap().to_string());
        }
        for (i, owner) in owners {
            v.items.insert(
                *i,
                Box::new(ItemView {
                    owner: Some((owner.to_string(), CachedStat::default())),
                    ..ItemView::default()
                }),
            );
        }
        v
    }

    fn owners(plan: &ShardingPlan) -> Vec<(i32, &str)> {
        plan.owners.iter().map(|(i, o)| (*i, o.as_str())).collect()
    }

    #[test]
    fn first_sharding_uses_the_strategy_on_descending_ids() {
        let plan = plan(&view(2, &[A, B, C], &[]), "demoJob").expect("a plan");
        // AVG over [C, B, A] with T=2: C[0] B[1] A[].
        assert_eq!(owners(&plan), vec![(0, C), (1, B)]);
        assert_eq!(plan.reason, "item count changed");
    }

    #[test]
    fn nothing_to_do_when_owners_match() {
        assert_eq!(
            plan(&view(2, &[A, B, C], &[(0, C), (1, B)]), "demoJob"),
            None
        );
    }

    #[test]
    fn membership_change_reshards_eagerly() {
        let plan = plan(&view(2, &[A, B], &[(0, C), (1, B)]), "demoJob").expect("a plan");
        assert_eq!(owners(&plan), vec![(0, B), (1, A)]);
        assert_eq!(plan.reason, "membership or server status changed");
    }

    #[test]
    fn disabled_servers_and_processing_and_static_sharding() {
        let mut v = view(2, &[A, B, C], &[(0, C), (1, B)]);
        v.servers.insert("10.0.0.3".into(), false);
        assert_eq!(owners(&plan(&v, "demoJob").unwrap()), vec![(0, B), (1, A)]);
        v.processing = true;
        assert_eq!(plan(&v, "demoJob"), None, "another leader is resharding");
        let mut v = view(2, &[A, B], &[(0, C), (1, B)]);
        Arc::make_mut(v.config.as_mut().unwrap()).static_sharding = true;
        assert_eq!(plan(&v, "demoJob"), None, "static sharding keeps owners");
        v.necessary = true;
        assert!(
            plan(&v, "demoJob").is_some(),
            "the resharding flag still counts"
        );
    }

    /// [`view`] of a resident job whose instances are each a sidecar's: its instance node
    /// and the sidecar's node belong to one session (one per host here).
    fn resident(total: i32, instances: &[&str], owners: &[(i32, &str)]) -> JobView {
        let mut v = view(total, instances, owners);
        v.extras.resident = true;
        for (n, id) in instances.iter().enumerate() {
            let session = 100 + n as i64;
            v.sidecars
                .insert(id.split("@-@").next().unwrap().to_string(), session);
            v.instance_sessions.insert(id.to_string(), session);
        }
        v
    }

    fn moved(before: &JobView, plan: &ShardingPlan) -> usize {
        plan.owners
            .iter()
            .filter(|(i, o)| before.owner(**i).is_some_and(|b| b != o.as_str()))
            .count()
    }

    #[test]
    fn a_resident_job_moves_only_the_items_a_join_or_a_leave_must() {
        // 6 items over A and B, 3 each; C joins: it takes one from each, the rest stay.
        let owned = [(0, A), (1, A), (2, A), (3, B), (4, B), (5, B)];
        let v = resident(6, &[A, B, C], &owned);
        let p = plan(&v, "j").expect("a reshard");
        assert_eq!(moved(&v, &p), 2, "{:?}", owners(&p));
        for who in [A, B, C] {
            assert_eq!(p.owners.values().filter(|o| *o == who).count(), 2);
        }
        // The avg strategy would have moved four: C[0,1] B[2,3] A[4,5] over [C, B, A].
        // B leaves: only its items move, and they are shared out.
        let owned: Vec<(i32, &str)> = p.owners.iter().map(|(i, o)| (*i, o.as_str())).collect();
        let v = resident(6, &[A, C], &owned);
        let p2 = plan(&v, "j").expect("a reshard");
        let from_b: Vec<i32> = owned
            .iter()
            .filter(|(_, o)| *o == B)
            .map(|(i, _)| *i)
            .collect();
        for (i, o) in &p2.owners {
            if !from_b.contains(i) {
                assert_eq!(v.owner(*i), Some(o.as_str()), "item {i} kept its holder");
            }
        }
        for who in [A, C] {
            assert_eq!(p2.owners.values().filter(|o| *o == who).count(), 3);
        }
        assert_eq!(
            plan(&resident(6, &[A, C], &owners(&p2)), "j"),
            None,
            "stable"
        );
    }

    #[test]
    fn a_resident_job_gives_elasticjob_members_no_items() {
        let mut v = resident(4, &[A, B], &[]);
        v.instances.insert(C.into(), "10.0.0.3".into()); // no sidecar on 10.0.0.3: Java
        v.instance_sessions.insert(C.into(), 7);
        let p = plan(&v, "j").expect("a first sharding");
        assert!(!p.owners.values().any(|o| o == C), "{:?}", owners(&p));
        assert_eq!(p.owners.len(), 4);
        // A JVM on a sidecar's own host: the host has a sidecar, but the JVM's node is its
        // own session's, not the sidecar's.
        let jvm = "10.0.0.1@-@4242";
        let mut v = resident(4, &[A, B], &[]);
        v.instances.insert(jvm.into(), "10.0.0.1".into());
        v.instance_sessions.insert(jvm.into(), 8);
        let p = plan(&v, "j").expect("a first sharding");
        assert!(!p.owners.values().any(|o| o == jvm), "{:?}", owners(&p));
        assert_eq!(p.owners.len(), 4);
    }

    #[test]
    fn no_available_instance_means_no_plan() {
        assert_eq!(plan(&view(2, &[], &[(0, C)]), "demoJob"), None);
    }

    #[test]
    fn commit_rewrites_only_changed_owners_and_drops_extra_items() {
        let paths = JobPaths::new("demoJob");
        let mut v = view(2, &[A, B], &[(0, B), (1, C), (2, C)]);
        v.items.get_mut(&2).unwrap().misfire = true;
        v.necessary = true;
        let plan = plan(&v, "demoJob").unwrap();
        let ops = commit_ops(&v, &paths, &plan, 7);
        let expected = vec![
            Op::Check {
                path: "/demoJob/leader/election/instance".into(),
                version: 7,
            },
            Op::SetData {
                path: "/demoJob/sharding/1/instance".into(),
                data: A.as_bytes().to_vec(),
                version: None,
            },
            Op::delete("/demoJob/sharding/2/instance".into()),
            Op::delete("/demoJob/sharding/2/misfire".into()),
            Op::delete("/demoJob/sharding/2".into()),
            Op::delete("/demoJob/leader/sharding/necessary".into()),
        ];
        assert_eq!(format!("{ops:?}"), format!("{expected:?}"));
    }
}
