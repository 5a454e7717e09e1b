//! Failover and clean-up of execution nodes (elasticjob-layout.md §5.5).
//!
//! Nodes and rules are ElasticJob's: a crashed instance's running items are flagged under
//! `leader/failover/items/{i}`; an idle instance takes one under the `leader/failover/latch`
//! mutex (the first in descending string order), writes `sharding/{i}/failover` (ephemeral) and
//! `failovering` (persistent) with its id, and runs it. shardcar flags the items of a worker
//! the moment its stream ends (in the same multi-op that deletes its instance), and the
//! leader clears nodes left by instances that are gone, so none stays stuck (#2429).

use crate::coordination::view::JobView;
use crate::elasticjob::paths::{sort_descending, JobPaths};
use crate::registry::{CreateMode, Error, Op, Registry};

fn failover_on(view: &JobView) -> bool {
    view.config.as_ref().is_some_and(|c| c.failover)
}

/// Operations that release the in-flight `items` of `instance_id`, whose worker is gone:
/// with failover on, flag each running item for failover; then end them as [`finish_ops`].
pub fn release_ops(view: &JobView, paths: &JobPaths, instance_id: &str, items: &[i32]) -> Vec<Op> {
    let mut ops: Vec<Op> = items
        .iter()
        .filter(|i| {
            failover_on(view) && runs(view, **i, instance_id) && !view.failover_items.contains(i)
        })
        .map(|i| Op::create(paths.failover_item(*i), Vec::new(), CreateMode::Persistent))
        .collect();
    ops.extend(finish_ops(view, paths, instance_id, items, true));
    ops
}

/// Whether `instance_id` holds item `i`'s `running` node.
fn runs(view: &JobView, i: i32, instance_id: &str) -> bool {
    view.items
        .get(&i)
        .and_then(|it| it.running.as_ref())
        .is_some_and(|(id, _)| id == instance_id)
}

/// Operations that end items of `instance_id`'s execution: delete its `running` (when the
/// execution was monitored) and its `failover` / `failovering` nodes.
pub fn finish_ops(
    view: &JobView,
    paths: &JobPaths,
    instance_id: &str,
    items: &[i32],
    monitored: bool,
) -> Vec<Op> {
    let mut ops = Vec::new();
    for i in items {
        let Some(item) = view.items.get(i) else {
            continue;
        };
        if monitored && runs(view, *i, instance_id) {
            ops.push(Op::delete(paths.item_running(*i)));
        }
        if item.failover.as_deref() == Some(instance_id) {
            ops.push(Op::delete(paths.item_failover(*i)));
        }
        if item.failovering.as_deref() == Some(instance_id) {
            ops.push(Op::delete(paths.item_failovering(*i)));
        }
    }
    ops
}

/// The leader's clean-up: execution nodes that name an instance that is no longer live.
/// A `running` item of a dead instance is flagged for failover (failover on) or freed.
pub fn cleanup_ops(view: &JobView, paths: &JobPaths) -> Vec<Op> {
    let live = |id: &str| view.instances.contains_key(id);
    let mut ops = Vec::new();
    for (i, item) in view.items.range(..view.total()) {
        let dead_runner = item
            .running
            .as_ref()
            .is_some_and(|(id, _)| !id.is_empty() && !live(id));
        if dead_runner {
            let taken = item.failover.as_deref().is_some_and(live);
            if failover_on(view) && !taken && !view.failover_items.contains(i) {
                ops.push(Op::create(
                    paths.failover_item(*i),
                    Vec::new(),
                    CreateMode::Persistent,
                ));
            }
            ops.push(Op::delete(paths.item_running(*i)));
        }
        if item.failover.as_deref().is_some_and(|id| !live(id)) {
            ops.push(Op::delete(paths.item_failover(*i)));
        }
        if item.failovering.as_deref().is_some_and(|id| !live(id)) {
            ops.push(Op::delete(paths.item_failovering(*i)));
        }
    }
    ops
}

/// ElasticJob's `failoverIfNecessary` callback: under the failover latch, take the first
/// flagged item in descending string order for `instance_id`. Returns the item taken.
///
/// # Errors
/// Registry errors; the latch is released either way.
pub async fn claim(
    registry: &Registry,
    paths: &JobPaths,
    instance_id: &str,
) -> Result<Option<i32>, Error> {
    let latch = registry.acquire_latch(&paths.failover_latch()).await?;
    let result = async {
        let mut flagged = match registry.children(&paths.failover_items()).await {
            Ok(children) => children,
            Err(Error::NoNode(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        sort_descending(&mut flagged);
        let Some(item) = flagged.iter().find_map(|name| name.parse::<i32>().ok()) else {
            return Ok(None);
        };
        let mut ops = Vec::new();
        for path in [paths.item_failover(item), paths.item_failovering(item)] {
            if registry.exists(&path).await?.is_some() {
                ops.push(Op::Delete {
                    path,
                    version: None,
                });
            }
        }
        ops.extend(claim_events(paths, item).into_iter().map(|op| match op {
            Op::Create { path, mode, .. } => Op::Create {
                path,
                data: instance_id.as_bytes().to_vec(),
                mode,
            },
            other => other,
        }));
        registry.multi(ops).await?;
        Ok(Some(item))
    }
    .await;
    latch.release().await?;
    result
}

/// The writes of a claim of `item` (data left empty: for applying to a cache).
pub fn claim_events(paths: &JobPaths, item: i32) -> Vec<Op> {
    vec![
        Op::create(paths.item_failover(item), Vec::new(), CreateMode::Ephemeral),
        Op::create(
            paths.item_failovering(item),
            Vec::new(),
            CreateMode::Persistent,
        ),
        Op::delete(paths.failover_item(item)),
    ]
}
