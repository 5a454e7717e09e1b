//! The writes that start, end and hand over items (`docs/elasticjob-compat.md`
//! §6, §7, §11), as pure functions of a [`JobView`].
//!
//! Nodes and rules are ElasticJob's: a running item has `sharding/{i}/running` (its runner's
//! id); an item left by an instance that went away is flagged under `leader/failover/items/{i}`;
//! an idle instance takes flagged items while no one is in the `leader/failover/latch` mutex
//! (proved in the claim's own write, [`latch_free_ops`], or by holding it), writing
//! `sharding/{i}/failover` (ephemeral) and `failovering` with its id, and runs them.
//!
//! What shardcar adds is a fence. Every write here that creates or deletes `running`,
//! `failover`, `failovering` or a failover flag of item `i` also replaces the (empty) data of
//! `sharding/{i}` *at the version it was decided from*. That version is the item's execution
//! epoch: it moves with every start and end of a run, so a write decided on a stale view —
//! a sidecar back from a pause, a leader racing a live execution — fails as a whole instead of
//! landing. `sharding/{i}` keeps its empty data, so ElasticJob sees nothing new. Our `running`
//! nodes are also set once after creation (version 1), so ending one never deletes a node an
//! ElasticJob process created in its place.

use std::collections::BTreeMap;

use crate::coordination::job::mirror::{ItemView, JobView};
use crate::elasticjob::extras::PendingRetry;
use crate::elasticjob::paths::{sort_descending, JobPaths};
use crate::registry::{CreateMode, Op};

/// The data version shardcar's `running` nodes have: created, then set once.
pub const RUNNING_VERSION: i32 = 1;

/// What becomes of the nodes of items an execution gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The items failed (execution timeout): end them as after a failure.
    Failed,
    /// The worker stopped without finishing: flag them for failover (failover on) or free them.
    Abandoned,
    /// Nothing to write: the session that held them is gone, and the sidecar that comes back
    /// (or the leader) releases what is left.
    None,
    /// The worker never got them (a run claimed ahead of its fire instant, given up before
    /// it): free them, flag nothing, hand nothing over; nothing ran.
    Unrun,
}

fn failover_on(view: &JobView) -> bool {
    view.failover_on()
}

/// Replaces `sharding/{i}`'s data at `version`: the fence of every write about item `i`.
pub fn bump(paths: &JobPaths, i: i32, version: i32) -> Op {
    Op::SetData {
        path: paths.item(i),
        data: Vec::new(),
        version: Some(version),
    }
}

/// The current execution epoch of item `i` (`None` when `sharding/{i}` is not there).
pub fn epoch(view: &JobView, i: i32) -> Option<i32> {
    view.items.get(&i).and_then(|it| it.version)
}

/// Whether `instance_id` holds item `i`'s `running` node.
fn runs(view: &JobView, i: i32, instance_id: &str) -> bool {
    view.items
        .get(&i)
        .and_then(|it| it.running.as_ref())
        .is_some_and(|(id, _)| id == instance_id)
}

/// The writes that start `items` on `instance_id` (monitorExecution on): each item's fence,
/// its `running` node (set once, so its stat tells the fencing token), and a check that the
/// instance is still registered. `None` if an item has no `sharding/{i}` node.
pub fn start_ops(
    view: &JobView,
    paths: &JobPaths,
    instance_id: &str,
    items: &[i32],
) -> Option<Vec<Op>> {
    let mode = if failover_on(view) {
        CreateMode::Persistent
    } else {
        CreateMode::Ephemeral
    };
    let mut ops = vec![Op::Check {
        path: paths.instance(instance_id),
        version: -1,
    }];
    for i in items {
        ops.push(bump(paths, *i, epoch(view, *i)?));
        // An item run as its owner's: fenced on the owner node too, so a start decided on a
        // view older than a reshard (even this sidecar's own) fails instead of running an item
        // that is already someone else's. A failover claim has its own fence (the claim).
        if let Some((owner, stat)) = view.items.get(i).and_then(|it| it.owner.as_ref()) {
            if owner == instance_id {
                ops.push(Op::Check {
                    path: paths.item_instance(*i),
                    version: stat.version,
                });
            }
        }
        ops.extend(running_ops(paths, *i, instance_id, mode));
    }
    Some(ops)
}

/// Item `i`'s `running` node for `instance_id`: created, then set once, so that its stat tells
/// the fencing token and only a node at [`RUNNING_VERSION`] is ever deleted as ours.
fn running_ops(paths: &JobPaths, i: i32, instance_id: &str, mode: CreateMode) -> [Op; 2] {
    [
        Op::create(paths.item_running(i), instance_id, mode),
        Op::SetData {
            path: paths.item_running(i),
            data: instance_id.as_bytes().to_vec(),
            version: Some(0),
        },
    ]
}

/// Item `i` taken over by `taker`: any `failover` / `failovering` node left replaced by its own.
fn take_ops(paths: &JobPaths, item: &ItemView, i: i32, taker: &str, ops: &mut Vec<Op>) {
    if item.failover.is_some() {
        ops.push(Op::delete(paths.item_failover(i)));
    }
    if item.failovering.is_some() {
        ops.push(Op::delete(paths.item_failovering(i)));
    }
    ops.push(Op::create(
        paths.item_failover(i),
        taker,
        CreateMode::Ephemeral,
    ));
    ops.push(Op::create(
        paths.item_failovering(i),
        taker,
        CreateMode::Persistent,
    ));
}

/// The write of item `i`'s pending retry once a run of it ended: `next`, the attempt due next
/// (created, or set over the one there), or with `None` the one there removed (the run
/// completed, or its failure stands). Goes in the multi-op that ends the run, whose fence on
/// the item's epoch covers it.
pub fn retry_ops(view: &JobView, paths: &JobPaths, i: i32, next: Option<PendingRetry>) -> Vec<Op> {
    let pending = view.items.get(&i).is_some_and(|it| it.retry.is_some());
    match (next, pending) {
        (Some(next), false) => vec![Op::create(
            paths.retry(i),
            next.to_data(),
            CreateMode::Persistent,
        )],
        (Some(next), true) => vec![Op::SetData {
            path: paths.retry(i),
            data: next.to_data(),
            version: None,
        }],
        (None, true) => vec![Op::delete(paths.retry(i))],
        (None, false) => Vec::new(),
    }
}

/// The writes that end `items` of `instance_id`'s execution (answered, or failed): its
/// `running` nodes (when `monitored`; only ours, at our version) and its `failover` /
/// `failovering` nodes, fenced by the epochs the execution left (`versions`). Should an item
/// have been taken away meanwhile, the write fails.
pub fn finish_ops(
    view: &JobView,
    paths: &JobPaths,
    instance_id: &str,
    items: &[i32],
    versions: &BTreeMap<i32, i32>,
    monitored: bool,
) -> Vec<Op> {
    let mut ops = Vec::new();
    for i in items {
        let item = view.items.get(i);
        let mut item_ops = Vec::new();
        if monitored && runs(view, *i, instance_id) {
            item_ops.push(Op::Delete {
                path: paths.item_running(*i),
                version: Some(RUNNING_VERSION),
            });
        }
        if item.is_some_and(|it| it.failover.as_deref() == Some(instance_id)) {
            item_ops.push(Op::delete(paths.item_failover(*i)));
        }
        if item.is_some_and(|it| it.failovering.as_deref() == Some(instance_id)) {
            item_ops.push(Op::delete(paths.item_failovering(*i)));
        }
        if item_ops.is_empty() {
            continue;
        }
        if let Some(v) = versions.get(i).copied().or_else(|| epoch(view, *i)) {
            ops.push(bump(paths, *i, v));
        }
        ops.extend(item_ops);
    }
    ops
}

/// The writes that give up `items` of `instance_id`'s execution as `release` says: for
/// `Abandoned` with failover on, each item it ran is flagged for failover; then they end as
/// [`finish_ops`].
pub fn release_ops(
    view: &JobView,
    paths: &JobPaths,
    instance_id: &str,
    items: &[i32],
    versions: &BTreeMap<i32, i32>,
    monitored: bool,
    release: Release,
) -> Vec<Op> {
    if release == Release::None {
        return Vec::new();
    }
    let mut ops = Vec::new();
    for i in items {
        let mut item_ops = finish_ops(view, paths, instance_id, &[*i], versions, monitored);
        let flag = release == Release::Abandoned
            && failover_on(view)
            && (monitored || runs(view, *i, instance_id))
            && !view.failover_items.contains(i);
        if flag {
            if item_ops.is_empty() {
                if let Some(v) = versions.get(i).copied().or_else(|| epoch(view, *i)) {
                    item_ops.push(bump(paths, *i, v));
                }
            }
            item_ops.push(Op::create(
                paths.failover_item(*i),
                Vec::new(),
                CreateMode::Persistent,
            ));
        }
        ops.extend(item_ops);
    }
    ops
}

/// What [`stale_ops`] writes: the operations, the items they touch, and those of them handed
/// straight to the taker.
#[derive(Debug, Default)]
pub struct Stale {
    pub ops: Vec<Op>,
    pub touched: Vec<i32>,
    pub handed: Vec<i32>,
}

/// `running` nodes (and `failover` / `failovering` nodes) of items `0..total` that the caller
/// may release: those naming an instance for which `release_for(instance, item)` holds. A
/// `running` item is flagged for failover (failover on) or freed; with a `taker` (another live
/// instance with room), an item that would be flagged is given to it instead, in the same
/// write, as [`handover_ops`] gives a leaving instance's items: its `failover`, `failovering`
/// and `running` nodes written for the taker, whose node must still exist. That write also
/// asserts that no one flagged the item meanwhile (ElasticJob's members flag a crashed member's
/// items by themselves: the flag is created and deleted again, refused with `NodeExists` if it
/// is there); a hand-over never coexists with a flag some process would claim.
pub fn stale_ops(
    view: &JobView,
    paths: &JobPaths,
    release_for: impl Fn(&str, i32) -> bool,
    skip: impl Fn(i32) -> bool,
    taker: Option<&str>,
) -> Stale {
    let live = |id: &str| view.instances.contains_key(id);
    let mut stale = Stale::default();
    for (i, item) in view.items.range(..view.total()) {
        if skip(*i) {
            continue;
        }
        let Some(v) = item.version else { continue };
        let mut item_ops = Vec::new();
        let dead_runner = item
            .running
            .as_ref()
            .map(|(id, _)| id.as_str())
            .filter(|id| !id.is_empty() && release_for(id, *i));
        let released =
            |node: &Option<String>| node.as_deref().is_some_and(|id| release_for(id, *i));
        if dead_runner.is_some() {
            // Taken over already by a live instance, unless the taker is the runner whose run
            // is given up here (a FAILOVER run interrupted, or handed to it and never started):
            // then it is flagged again.
            let taken = item
                .failover
                .as_deref()
                .is_some_and(|taker| live(taker) && Some(taker) != dead_runner);
            let flag = failover_on(view) && !taken && !view.failover_items.contains(i);
            let unclaimed = |node: &Option<String>| node.is_none() || released(node);
            if let Some(taker) =
                taker.filter(|_| flag && unclaimed(&item.failover) && unclaimed(&item.failovering))
            {
                item_ops.push(bump(paths, *i, v));
                item_ops.push(Op::delete(paths.item_running(*i)));
                item_ops.push(Op::create(
                    paths.failover_item(*i),
                    Vec::new(),
                    CreateMode::Persistent,
                ));
                item_ops.push(Op::delete(paths.failover_item(*i)));
                take_ops(paths, item, *i, taker, &mut item_ops);
                item_ops.extend(running_ops(paths, *i, taker, CreateMode::Persistent));
                stale.ops.extend(item_ops);
                stale.touched.push(*i);
                stale.handed.push(*i);
                continue;
            }
            if flag {
                item_ops.push(Op::create(
                    paths.failover_item(*i),
                    Vec::new(),
                    CreateMode::Persistent,
                ));
            }
            item_ops.push(Op::delete(paths.item_running(*i)));
        }
        if released(&item.failover) {
            item_ops.push(Op::delete(paths.item_failover(*i)));
        }
        if released(&item.failovering) {
            item_ops.push(Op::delete(paths.item_failovering(*i)));
        }
        if item_ops.is_empty() {
            continue;
        }
        stale.ops.push(bump(paths, *i, v));
        stale.ops.extend(item_ops);
        stale.touched.push(*i);
    }
    if let Some(taker) = taker.filter(|_| !stale.handed.is_empty()) {
        // As in a hand-over of a leaving instance's items: the taker must still be there.
        stale.ops.insert(
            0,
            Op::Check {
                path: paths.instance(taker),
                version: -1,
            },
        );
    }
    stale
}

/// The flagged items in the order ElasticJob takes them (descending string order: "9" before
/// "10"), leaving out those `skip` names.
pub fn flagged(view: &JobView, skip: impl Fn(i32) -> bool) -> Vec<i32> {
    let mut names: Vec<String> = view.failover_items.iter().map(|i| i.to_string()).collect();
    sort_descending(&mut names);
    names
        .iter()
        .filter_map(|n| n.parse().ok())
        .filter(|i| *i < view.total() && !skip(*i))
        .collect()
}

/// The writes that claim flagged `items` for `instance_id` and start them: the fence, the flag
/// removed, `failover` (ephemeral) and `failovering` written with its id (any stale ones
/// replaced), and, when `monitored`, the `running` nodes as [`start_ops`].
pub fn claim_ops(
    view: &JobView,
    paths: &JobPaths,
    instance_id: &str,
    items: &[i32],
    monitored: bool,
) -> Option<Vec<Op>> {
    let mode = if failover_on(view) {
        CreateMode::Persistent
    } else {
        CreateMode::Ephemeral
    };
    let mut ops = vec![Op::Check {
        path: paths.instance(instance_id),
        version: -1,
    }];
    for i in items {
        let item = view.items.get(i)?;
        ops.push(bump(paths, *i, item.version?));
        ops.push(Op::delete(paths.failover_item(*i)));
        take_ops(paths, item, *i, instance_id, &mut ops);
        if monitored {
            if item.running.is_some() {
                return None;
            }
            ops.extend(running_ops(paths, *i, instance_id, mode));
        }
    }
    Some(ops)
}

/// The writes that give `items`, which `instance_id`'s execution leaves running, straight to
/// `taker`, another live instance with room: what [`release_ops`] (`Abandoned`) and then
/// [`claim_ops`] would write, as one write fenced once per item by the epoch the execution
/// left (`versions`). No flag is written: the item is never unowned. `None` unless every item
/// is one the release would flag (monitored, running as `instance_id`'s, not flagged already,
/// no one else's `failover` node): the caller then releases them as usual.
pub fn handover_ops(
    view: &JobView,
    paths: &JobPaths,
    instance_id: &str,
    taker: &str,
    items: &[i32],
    versions: &BTreeMap<i32, i32>,
    monitored: bool,
) -> Option<Vec<Op>> {
    if !failover_on(view) || !monitored || items.is_empty() {
        return None;
    }
    let mut ops = vec![Op::Check {
        path: paths.instance(taker),
        version: -1,
    }];
    for i in items {
        let item = view.items.get(i)?;
        let theirs = |node: &Option<String>| node.as_deref().is_some_and(|id| id != instance_id);
        if !runs(view, *i, instance_id)
            || view.failover_items.contains(i)
            || theirs(&item.failover)
            || theirs(&item.failovering)
        {
            return None;
        }
        ops.push(bump(paths, *i, versions.get(i).copied().or(item.version)?));
        ops.push(Op::Delete {
            path: paths.item_running(*i),
            version: Some(RUNNING_VERSION),
        });
        take_ops(paths, item, *i, taker, &mut ops);
        ops.extend(running_ops(paths, *i, taker, CreateMode::Persistent));
    }
    Some(ops)
}

/// The writes that make a claim's multi-op assert that ElasticJob's failover latch is free:
/// no process holds it or waits for it. A claim that carries them needs no latch of its own.
///
/// A latch is a directory of contender nodes, so it is free exactly when its directory is
/// empty or absent. When `dir_exists`, the directory is deleted, which ZooKeeper refuses with
/// `NotEmpty` while any contender's node is under it (and with `NoNode` if it is gone); else it
/// is created and deleted again, which is refused with `NodeExists` if it is there after all.
/// Either way the multi-op leaves no directory, a state every contender already handles (it
/// creates missing parents, and ZooKeeper removes the empty container by itself anyway).
pub fn latch_free_ops(paths: &JobPaths, dir_exists: bool) -> Vec<Op> {
    let dir = paths.failover_latch();
    if dir_exists {
        vec![Op::delete(dir)]
    } else {
        vec![
            Op::create(dir.clone(), Vec::new(), CreateMode::Persistent),
            Op::delete(dir),
        ]
    }
}
