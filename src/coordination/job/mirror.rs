//! The job's mirror of its ZooKeeper subtree, and the writes that change it.
//!
//! The mirror changes only by what the registry answered: reads (an event is never applied as
//! such, it makes the node be read again), reloads, and the results of our own commits, which
//! every operation of one multi-op shares (one zxid, one time), so they are mirrored exactly.
//! The events of our own writes are not read again: each `SetData` and `Delete` we committed
//! expects one event on its path, and the first such event that comes is taken as that one.
//! It cannot be a later writer's: events come in zxid order, and ours are queued behind the
//! write itself, so they are matched only once its result is mirrored. One that is older than
//! our write was superseded by it anyway. Expectations go when the watch does (`Resync`).
//! A write that is refused or whose outcome is unknown makes the job be read again before
//! anything else is decided.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, error, warn};

use super::{Action, Env, OpId};
use crate::coordination::view::JobView;
use crate::elasticjob::paths::JobNode;
use crate::registry::{
    CreateMode, Error as RegError, Node, Op, OpResult, SessionState, Stat, WatchEvent,
};

use super::state::{create_empty, JobState, Pending, Phase, RETRY};

impl JobState {
    // ----- the mirror of the subtree --------------------------------------------------------

    /// Rebuilds the view from the cache if the cache changed since the last build.
    pub(super) fn refresh_view(&mut self) {
        if self.view_stale {
            let view = JobView::from_cache_memo(&self.cache, &self.paths, &mut self.parse_memo);
            if view.config_error.is_some() && view.config_error != self.view.config_error {
                // The job stops here (no fires, no items), the sidecar's other jobs go on.
                error!(job = %self.name, error = view.config_error.as_deref().unwrap_or_default(),
                       "the job's config in the registry cannot be used: the job is stopped on this sidecar until it is fixed");
            }
            self.view = view;
            self.view_stale = false;
        }
    }

    /// Applies a registry event by reading what it names (issued when the step ends, with the
    /// other events' reads, [`Self::read_named`]), so its answer is newer than anything
    /// already mirrored. An event may arrive after the result of our own later write (its
    /// forwarding is not ordered with replies), so it is never applied as such: a late
    /// `Deleted` must not remove a node we created since.
    pub(crate) fn on_watched(&mut self, ev: WatchEvent) {
        if self.phase != Phase::Ready {
            return;
        }
        match ev {
            WatchEvent::Resync => {
                debug!(job = %self.name, "watch attached again: re-reading the job");
                self.reload_wanted = true;
                self.own_events = HashMap::new();
            }
            // The event of our own committed write, mirrored from its result.
            WatchEvent::DataChanged(p) | WatchEvent::Deleted(p) if self.own_event(&p) => {}
            // Latch contenders mean nothing to the view; the failover latch's directory is
            // noted for latch-free claims (a contender's node implies the directory).
            WatchEvent::Created(p) if self.latch_node(&p) => {
                if p.starts_with(self.paths.failover_latch().as_str()) {
                    self.claims.latch_dir = true;
                }
            }
            WatchEvent::Deleted(p) if self.latch_node(&p) => {
                if p == self.paths.failover_latch() {
                    self.claims.latch_dir = false;
                }
            }
            WatchEvent::DataChanged(p) if self.latch_node(&p) => {}
            // Our own creation, mirrored exactly from its result: nothing new to read.
            WatchEvent::Created(p) if self.knows(&p) => {}
            // A sharding is one transaction (shardcar's leader and ElasticJob's alike, the
            // latter under `processing`): its owners are read again all at once.
            WatchEvent::Created(p) | WatchEvent::DataChanged(p) | WatchEvent::Deleted(p)
                if matches!(
                    self.paths.classify(&p),
                    JobNode::ItemInstance(_) | JobNode::ShardingProcessing
                ) =>
            {
                self.owners_reread = true;
            }
            // An item's epoch and its `running`, `failover` and `failovering` nodes are read
            // together whichever of them an event names: a peer writes them in one multi-op,
            // and its events may come in more than one step. Read node by node, the mirror
            // could show the new `running` node without the rest (a hand-over to a worker here
            // would look like a stale runner of this host, and be released).
            WatchEvent::Created(p) | WatchEvent::DataChanged(p) | WatchEvent::Deleted(p) => {
                match self.paths.classify(&p) {
                    JobNode::Item(i)
                    | JobNode::ItemRunning(i)
                    | JobNode::ItemFailover(i)
                    | JobNode::ItemFailovering(i) => {
                        self.event_reads.extend([
                            self.paths.item(i),
                            self.paths.item_running(i),
                            self.paths.item_failover(i),
                            self.paths.item_failovering(i),
                        ]);
                    }
                    _ => self.event_reads.push(p),
                }
            }
        }
    }

    /// Reads the nodes the step's events named, in one request, once its inputs are handled
    /// and before anything its reconcile decides. Every answer is newer than what was mirrored
    /// when the events came. A batch of events (a peer's multi-op brings one per node it
    /// wrote) costs the registry one request instead of one each.
    pub(super) fn read_named(&mut self, out: &mut Vec<Action>) {
        let mut paths = std::mem::take(&mut self.event_reads);
        if paths.len() > 1 {
            // Each node once, where the first event named it (a step holds up to a batch of
            // events, so not by a scan of the list per event).
            let mut named = HashSet::with_capacity(paths.len());
            paths.retain(|p| named.insert(p.clone()));
        }
        match paths.len() {
            0 => {}
            1 => {
                let op = self.start_op(Pending::Read);
                let path = paths.pop().unwrap_or_default();
                out.push(Action::Read { op, path });
            }
            _ => {
                let op = self.start_op(Pending::Read);
                out.push(Action::ReadMany { op, paths });
            }
        }
    }

    /// Whether `path` is a latch's directory or one of its contenders' nodes.
    fn latch_node(&self, path: &str) -> bool {
        matches!(
            self.paths.classify(path),
            JobNode::ElectionLatch | JobNode::FailoverLatch
        )
    }

    /// Notes that the watch will tell of our own write of `path` (nodes of the job's subtree
    /// whose events are mirrored at all: not the latches').
    fn expect_own_event(&mut self, path: &str) {
        let watched = path
            .strip_prefix(self.paths.root().as_str())
            .is_some_and(|rest| rest.starts_with('/'))
            && !self.latch_node(path);
        if watched {
            *self.own_events.entry(path.to_string()).or_default() += 1;
        }
    }

    /// Takes one expected event of our own writes on `path`, if one is expected.
    fn own_event(&mut self, path: &str) -> bool {
        let Some(n) = self.own_events.get_mut(path) else {
            return false;
        };
        *n -= 1;
        if *n == 0 {
            self.own_events.remove(path);
            if self.own_events.is_empty() {
                // Between runs nothing is expected: give back the table a run of many items
                // grew, rather than keep it for each of a thousand idle jobs.
                self.own_events = HashMap::new();
            }
        }
        true
    }

    /// The owner node of every item the job has or the mirror knows, and the sharding's
    /// `processing` flag: what [`Pending::ReadOwners`] reads.
    pub(super) fn owner_paths(&self) -> Vec<String> {
        let total = self.view.total().max(0);
        let known = self
            .cache
            .children(&self.paths.sharding())
            .into_iter()
            .filter_map(|c| c.parse::<i32>().ok())
            .max()
            .map_or(0, |i| i + 1);
        let mut paths: Vec<String> = (0..total.max(known))
            .map(|i| self.paths.item_instance(i))
            .collect();
        paths.push(self.paths.sharding_processing());
        paths
    }

    /// Mirrors what a [`Pending::ReadOwners`] or [`Pending::Read`] of several nodes read.
    pub(super) fn apply_read(&mut self, paths: &[String], nodes: Vec<Option<Node>>) {
        for (path, node) in paths.iter().zip(nodes) {
            self.inexact.remove(path);
            match node {
                Some(node) => self.cache.put(path, Some(node)),
                None => self.cache.remove_subtree(path),
            }
        }
        self.view_stale = true;
    }

    /// Mirrors our own committed writes from their results, so the next decision sees them
    /// at once. Every operation of one multi shares one zxid and time; a `SetData` result
    /// tells them, which makes the stats of created nodes exact too.
    pub(super) fn apply_commit(&mut self, ops: &[Op], results: &[OpResult], env: &Env) {
        let txn = results.iter().find_map(|r| match r {
            OpResult::DataSet { stat } => Some((stat.mzxid, stat.mtime)),
            _ => None,
        });
        let session_id = match env.session {
            SessionState::Connected { session_id, .. } => session_id,
            _ => 0,
        };
        for (op, result) in ops.iter().zip(results) {
            match (op, result) {
                (Op::Create { data, mode, .. }, OpResult::Created { path, stat }) => {
                    let stat = stat.or_else(|| {
                        txn.map(|(zxid, time)| Stat {
                            czxid: zxid,
                            mzxid: zxid,
                            pzxid: zxid,
                            ctime: time,
                            mtime: time,
                            ephemeral_owner: if mode.is_ephemeral() { session_id } else { 0 },
                            ..Stat::default()
                        })
                    });
                    match stat {
                        Some(stat) => {
                            self.inexact.remove(path);
                            self.cache.put(
                                path,
                                Some(Node {
                                    data: data.clone(),
                                    stat,
                                }),
                            );
                        }
                        None => {
                            self.inexact.insert(path.clone());
                            let stat = Stat {
                                ephemeral_owner: if mode.is_ephemeral() { session_id } else { 0 },
                                ..Stat::default()
                            };
                            self.cache.put(
                                path,
                                Some(Node {
                                    data: data.clone(),
                                    stat,
                                }),
                            );
                        }
                    }
                }
                (Op::SetData { path, data, .. }, OpResult::DataSet { stat }) => {
                    self.expect_own_event(path);
                    self.inexact.remove(path);
                    self.cache.put(
                        path,
                        Some(Node {
                            data: data.clone(),
                            stat: *stat,
                        }),
                    );
                }
                (Op::Delete { path, .. }, _) => {
                    self.expect_own_event(path);
                    self.cache.remove_subtree(path);
                    self.inexact.remove(path);
                }
                _ => {}
            }
        }
        self.view_stale = true;
    }

    /// A write was refused or its outcome is unknown: the view was stale, or the session is in
    /// trouble. Re-read the job before deciding again.
    pub(super) fn write_failed(&mut self, what: &str, error: &RegError, env: &Env) {
        if error.is_connection_problem() {
            warn!(job = %self.name, error = %error, "{what}: no answer from the registry; will re-read");
        } else {
            debug!(job = %self.name, error = %error, "{what}: refused (the state changed); re-reading");
        }
        self.reload_wanted = true;
        self.retry_after(env, RETRY);
    }

    /// Asks for a [`Input::Tick`] after `delay`, keeping an earlier one.
    pub(super) fn retry_after(&mut self, env: &Env, delay: Duration) {
        let at = env.now + delay;
        self.retry_at = Some(self.retry_at.map_or(at, |r| r.min(at)));
    }

    /// `ops` preceded by creations of the missing ancestors (within the job) of the nodes they
    /// create. A stale mirror makes such a creation fail, which is then re-decided on a fresh
    /// read like any refused write.
    fn with_parents(&self, ops: Vec<Op>) -> Vec<Op> {
        let root = self.paths.root();
        let mut made: BTreeSet<String> = BTreeSet::new();
        let mut out = Vec::with_capacity(ops.len());
        for op in &ops {
            if let Op::Create { path, .. } = op {
                let mut missing = Vec::new();
                let mut at = path.as_str();
                while let Some((parent, _)) = at.rsplit_once('/') {
                    if parent.len() <= root.len()
                        || self.cache.contains(parent)
                        || made.contains(parent)
                    {
                        break;
                    }
                    let created_here = ops
                        .iter()
                        .any(|o| matches!(o, Op::Create { path, .. } if path == parent));
                    if created_here {
                        break;
                    }
                    missing.push(parent.to_string());
                    at = parent;
                }
                for parent in missing.into_iter().rev() {
                    made.insert(parent.clone());
                    out.push(create_empty(parent, CreateMode::Persistent));
                }
            }
            out.push(op.clone());
        }
        out
    }

    pub(super) fn lock(&mut self, items: &[i32]) {
        self.locked.extend(items.iter().copied());
    }

    pub(super) fn unlock(&mut self, items: &[i32]) {
        for i in items {
            self.locked.remove(i);
        }
    }

    /// Commits `ops` in our session as `pending`, locking `items` until the result is back.
    /// Parents of created nodes that the mirror does not have are created first, as ElasticJob
    /// creates missing parents (`leader/failover/items`, say).
    pub(super) fn commit(
        &mut self,
        pending: Pending,
        ops: Vec<Op>,
        items: &[i32],
        out: &mut Vec<Action>,
    ) -> OpId {
        let ops: Arc<[Op]> = self.with_parents(ops).into();
        self.lock(items);
        let op = self.start_op(pending);
        self.commit_ops.insert(op, Arc::clone(&ops));
        out.push(Action::Commit {
            op,
            generation: self.generation,
            ops,
        });
        op
    }
}
