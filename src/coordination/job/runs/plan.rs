//! What a fire runs on a local instance (`docs/elasticjob-compat.md` §6), as pure functions
//! of the job's view.
//!
//! Like an ElasticJob instance, which has one Quartz thread per job, a shardcar instance runs
//! one execution of its job at a time: a fire that finds the instance still busy flags its
//! items `misfire` (when misfire is on) and a single catch-up run follows the busy one.

use crate::coordination::job::mirror::JobView;

/// What one fire does for one local instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FirePlan {
    /// Items to run now.
    pub run: Vec<i32>,
    /// Items to flag `misfire` (the instance is still busy with an earlier execution).
    pub misfire: Vec<i32>,
}

/// Decides what a fire does for `instance_id` (whose server is `server_ip`).
///
/// `busy` tells whether the instance still has an execution in flight.
pub fn plan_fire(view: &JobView, instance_id: &str, server_ip: &str, busy: bool) -> FirePlan {
    let Some(config) = view.config.as_ref() else {
        return FirePlan::default();
    };
    let local = view.items_of(instance_id, server_ip);
    if busy {
        let misfire = if config.misfire {
            local
                .into_iter()
                .filter(|i| !view.items.get(i).is_some_and(|it| it.misfire))
                .collect()
        } else {
            Vec::new()
        };
        return FirePlan {
            run: Vec::new(),
            misfire,
        };
    }
    if config.failover {
        let taken = view.failover_items_of(instance_id);
        if !taken.is_empty() {
            return FirePlan {
                run: runnable(view, taken, false, config.monitor_execution),
                misfire: Vec::new(),
            };
        }
    }
    FirePlan {
        run: runnable(view, local, config.failover, config.monitor_execution),
        misfire: Vec::new(),
    }
}

/// Removes disabled items, items taken over by failover (when `failover`) and items still
/// running anywhere (when `monitor`): an item is never started while its `running` node exists.
pub fn runnable(view: &JobView, items: Vec<i32>, failover: bool, monitor: bool) -> Vec<i32> {
    items
        .into_iter()
        .filter(|i| {
            let Some(item) = view.items.get(i) else {
                return true;
            };
            let taken = failover && item.failover.is_some();
            let running = monitor && item.running.is_some();
            !(item.disabled || taken || running)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::job::mirror::ItemView;
    use crate::elasticjob::config::JobConfiguration;
    use crate::registry::CachedStat;
    use std::sync::Arc;

    const ME: &str = "10.0.0.1@-@1";
    const OTHER: &str = "10.0.0.2@-@1";

    fn view(failover: bool) -> JobView {
        let mut config = JobConfiguration::new("j", 4);
        config.failover = failover;
        let mut v = JobView {
            config: Some(Arc::new(config)),
            ..JobView::default()
        };
        for i in 0..4 {
            let owner = if i < 3 { ME } else { OTHER };
            v.items.insert(
                i,
                Box::new(ItemView {
                    owner: Some((owner.into(), CachedStat::default())),
                    ..ItemView::default()
                }),
            );
        }
        v
    }

    #[test]
    fn runs_own_items_minus_disabled_and_running() {
        let mut v = view(false);
        v.items.get_mut(&1).unwrap().disabled = true;
        v.items.get_mut(&2).unwrap().running = Some((OTHER.into(), CachedStat::default()));
        assert_eq!(
            plan_fire(&v, ME, "10.0.0.1", false),
            FirePlan {
                run: vec![0],
                misfire: vec![]
            }
        );
        Arc::make_mut(v.config.as_mut().unwrap()).monitor_execution = false;
        assert_eq!(
            plan_fire(&v, ME, "10.0.0.1", false).run,
            vec![0, 2],
            "without monitoring, running is not tracked"
        );
    }

    #[test]
    fn disabled_server_runs_nothing() {
        let mut v = view(false);
        v.servers.insert("10.0.0.1".into(), false);
        assert_eq!(plan_fire(&v, ME, "10.0.0.1", false), FirePlan::default());
    }

    #[test]
    fn a_busy_instance_flags_misfire_once() {
        let mut v = view(false);
        v.items.get_mut(&0).unwrap().misfire = true;
        assert_eq!(
            plan_fire(&v, ME, "10.0.0.1", true),
            FirePlan {
                run: vec![],
                misfire: vec![1, 2]
            }
        );
        Arc::make_mut(v.config.as_mut().unwrap()).misfire = false;
        assert_eq!(plan_fire(&v, ME, "10.0.0.1", true), FirePlan::default());
    }

    #[test]
    fn failover_items_take_precedence_and_taken_items_are_skipped() {
        let mut v = view(true);
        v.items.get_mut(&3).unwrap().failover = Some(ME.into());
        assert_eq!(plan_fire(&v, ME, "10.0.0.1", false).run, vec![3]);
        let mut v = view(true);
        v.items.get_mut(&1).unwrap().failover = Some(OTHER.into());
        assert_eq!(plan_fire(&v, ME, "10.0.0.1", false).run, vec![0, 2]);
    }
}
