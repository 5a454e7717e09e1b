//! Table tests of what a fire runs on a local instance.

use crate::coordination::job::mirror::ItemView;
use crate::coordination::job::mirror::JobView;
use crate::coordination::job::runs::{plan_fire, FirePlan};
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
