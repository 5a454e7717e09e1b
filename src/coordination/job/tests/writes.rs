//! Table tests of the writes that start, end and hand over items.

use crate::coordination::job::mirror::ItemView;
use crate::coordination::job::mirror::JobView;
use crate::coordination::job::writes::*;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::paths::JobPaths;
use crate::registry::CachedStat;
use crate::registry::Op;
use std::sync::Arc;

const A: &str = "10.0.0.1@-@1";
const B: &str = "10.0.0.2@-@1";

fn view() -> JobView {
    let mut config = JobConfiguration::new("j", 3);
    config.failover = true;
    let mut v = JobView {
        config: Some(Arc::new(config)),
        ..JobView::default()
    };
    v.instances.insert(A.into(), "10.0.0.1".into());
    for i in 0..3 {
        v.items.insert(
            i,
            Box::new(ItemView {
                version: Some(4),
                owner: Some((A.into(), CachedStat::default())),
                ..ItemView::default()
            }),
        );
    }
    v
}

fn paths_of(ops: &[Op]) -> Vec<String> {
    ops.iter()
        .map(|op| match op {
            Op::Create { path, .. } => format!("+{path}"),
            Op::Delete { path, .. } => format!("-{path}"),
            Op::SetData { path, version, .. } => format!("={path}@{version:?}"),
            Op::Check { path, .. } => format!("?{path}"),
        })
        .collect()
}

#[test]
fn starting_fences_each_item_and_checks_the_instance() {
    let ops = start_ops(&view(), &JobPaths::new("j"), A, &[1]).unwrap();
    assert_eq!(
        paths_of(&ops),
        [
            "?/j/instances/10.0.0.1@-@1",
            "=/j/sharding/1@Some(4)",
            "?/j/sharding/1/instance",
            "+/j/sharding/1/running",
            "=/j/sharding/1/running@Some(0)"
        ]
    );
    // The owner check carries the version the view read: a reshard since then fails it.
    let mut v = view();
    v.items
        .get_mut(&1)
        .unwrap()
        .owner
        .as_mut()
        .unwrap()
        .1
        .version = 3;
    let ops = start_ops(&v, &JobPaths::new("j"), A, &[1]).unwrap();
    assert!(ops.iter().any(|op| matches!(op,
        Op::Check { path, version: 3 } if path == "/j/sharding/1/instance")));
    // A claimed item (someone else's) is fenced by its claim, not by an owner check.
    let claim = start_ops(&v, &JobPaths::new("j"), "10.0.0.9@-@9", &[1]).unwrap();
    assert!(!paths_of(&claim).iter().any(|p| p.ends_with("/instance")));
    let mut v = view();
    v.items.get_mut(&2).unwrap().version = None;
    assert!(start_ops(&v, &JobPaths::new("j"), A, &[2]).is_none());
}

#[test]
fn ending_uses_the_epoch_the_execution_left_and_only_our_running_node() {
    let mut v = view();
    v.items.get_mut(&0).unwrap().running = Some((A.into(), CachedStat::default()));
    let versions = [(0, 5)].into();
    let ops = finish_ops(&v, &JobPaths::new("j"), A, &[0], &versions, true);
    assert_eq!(
        paths_of(&ops),
        ["=/j/sharding/0@Some(5)", "-/j/sharding/0/running"]
    );
    assert!(matches!(
        ops[1],
        Op::Delete {
            version: Some(RUNNING_VERSION),
            ..
        }
    ));
    let released = release_ops(
        &v,
        &JobPaths::new("j"),
        A,
        &[0],
        &versions,
        true,
        Release::Abandoned,
    );
    assert_eq!(
        paths_of(&released),
        [
            "=/j/sharding/0@Some(5)",
            "-/j/sharding/0/running",
            "+/j/leader/failover/items/0"
        ]
    );
    assert!(release_ops(
        &v,
        &JobPaths::new("j"),
        A,
        &[0],
        &versions,
        true,
        Release::None
    )
    .is_empty());
}

#[test]
fn stale_nodes_are_left_to_a_live_runners_sidecar() {
    let mut v = view();
    v.items.get_mut(&1).unwrap().running = Some((B.into(), CachedStat::default()));
    let Stale {
        ops,
        touched: items,
        ..
    } = stale_ops(&v, &JobPaths::new("j"), |id, _| id == B, |_| false, None);
    assert_eq!(items, [1]);
    assert_eq!(
        paths_of(&ops),
        [
            "=/j/sharding/1@Some(4)",
            "+/j/leader/failover/items/1",
            "-/j/sharding/1/running"
        ]
    );
    let ops = stale_ops(&v, &JobPaths::new("j"), |_, _| false, |_| false, None).ops;
    assert!(
        ops.is_empty(),
        "nothing released while B's sidecar looks after it"
    );
}

#[test]
fn flagged_items_come_in_elasticjobs_order_and_claims_replace_stale_nodes() {
    let mut config = JobConfiguration::new("j", 12);
    config.failover = true;
    let mut v = JobView {
        config: Some(Arc::new(config)),
        failover_items: vec![2, 9, 10],
        ..JobView::default()
    };
    assert_eq!(flagged(&v, |_| false), [9, 2, 10]);
    assert_eq!(flagged(&v, |i| i == 9), [2, 10]);
    v.items.insert(
        9,
        Box::new(ItemView {
            version: Some(1),
            failovering: Some(B.into()),
            ..ItemView::default()
        }),
    );
    let ops = claim_ops(&v, &JobPaths::new("j"), A, &[9], true).unwrap();
    assert_eq!(
        paths_of(&ops),
        [
            "?/j/instances/10.0.0.1@-@1",
            "=/j/sharding/9@Some(1)",
            "-/j/leader/failover/items/9",
            "-/j/sharding/9/failovering",
            "+/j/sharding/9/failover",
            "+/j/sharding/9/failovering",
            "+/j/sharding/9/running",
            "=/j/sharding/9/running@Some(0)"
        ]
    );
}
