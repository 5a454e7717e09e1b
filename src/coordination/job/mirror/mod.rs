//! The job's mirror of its ZooKeeper subtree ([`TreeCache`]) and the [`JobView`] parsed from
//! it, rebuilt whenever the mirror changes, so that every decision sees one consistent reading.
//!
//! The mirror changes only by what the registry answered: reads (an event is never applied as
//! such, it makes the node be read again), reloads, and the results of our own commits, which
//! every operation of one multi-op shares (one zxid, one time), so they are mirrored exactly.
//! The events of our own writes are not read again: each `SetData` and `Delete` we committed
//! expects one event on its path, and the first such event that comes is taken as that one.
//! It cannot be a later writer's: events come in zxid order, and ours are queued behind the
//! write itself, so they are matched only once its result is mirrored. One that is older than
//! our write was superseded by it anyway. Expectations go when the watch does (`Resync`).

mod view;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use tracing::{debug, error};

pub(crate) use view::{ItemView, JobView, ParseMemo};

use crate::elasticjob::paths::{JobNode, JobPaths};
use crate::registry::{CreateMode, Node, Op, OpResult, Stat, TreeCache, WatchEvent};

/// What a registry event asks of the job beyond the reads the mirror notes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Watched {
    /// Nothing more (a read of the named nodes is noted, or the event was our own write's).
    Noted,
    /// The watch attached again and events may have been lost: read the whole job.
    Reload,
    /// An owner node or the sharding's `processing` flag changed: read the owners at once.
    Owners,
    /// The failover latch's directory was seen created (true) or deleted (false).
    FailoverLatch(bool),
}

/// The mirror and its view; see the module docs.
#[derive(Debug)]
pub(crate) struct Mirror {
    paths: JobPaths,
    cache: TreeCache,
    /// Paths whose cached stat is not known exactly (created by a multi whose result had none).
    inexact: BTreeSet<String>,
    /// The data changes and deletions our own committed writes are still to be told of by
    /// the watch, per path: already mirrored from their results, they need no read.
    own_events: HashMap<String, u32>,
    /// Nodes the events of the step being taken name, in their order (repeats included),
    /// read together, each once, when it ends.
    event_reads: Vec<String>,
    view: JobView,
    /// The job's YAML nodes as last parsed, so a rebuilt view parses only what changed.
    parse_memo: ParseMemo,
}

impl Mirror {
    pub(super) fn new(paths: &JobPaths) -> Mirror {
        Mirror {
            cache: TreeCache::from_nodes(&paths.root(), BTreeMap::new()),
            paths: paths.clone(),
            inexact: BTreeSet::new(),
            own_events: HashMap::new(),
            event_reads: Vec::new(),
            view: JobView::default(),
            parse_memo: ParseMemo::default(),
        }
    }

    /// The job as last mirrored.
    pub(super) fn view(&self) -> &JobView {
        &self.view
    }

    /// The mirrored nodes themselves (their stats, for decisions a view does not carry).
    pub(super) fn cache(&self) -> &TreeCache {
        &self.cache
    }

    /// Whether `path` is mirrored with an exact stat (a creation event for it needs no read).
    pub(crate) fn knows(&self, path: &str) -> bool {
        self.cache.contains(path) && !self.inexact.contains(path)
    }

    /// Whether `path`'s mirrored stat is exact (not a creation inside a multi, unread since).
    pub(super) fn exact(&self, path: &str) -> bool {
        !self.inexact.contains(path)
    }

    /// Rebuilds the view from the cache after a change.
    fn rebuild(&mut self) {
        let view = JobView::from_cache_memo(&self.cache, &self.paths, &mut self.parse_memo);
        if view.config_error.is_some() && view.config_error != self.view.config_error {
            // The job stops here (no fires, no items), the sidecar's other jobs go on.
            error!(job = %self.paths.job_name(), error = view.config_error.as_deref().unwrap_or_default(),
                   "the job's config in the registry cannot be used: the job is stopped on this sidecar until it is fixed");
        }
        self.view = view;
    }

    /// The whole subtree as read (a setup, a reload).
    pub(super) fn replace_all(&mut self, nodes: BTreeMap<String, Node>) {
        self.cache.replace_all(nodes);
        self.inexact.clear();
        self.rebuild();
    }

    /// One node as read (`None`: absent).
    pub(super) fn put(&mut self, path: &str, node: Option<Node>) {
        self.inexact.remove(path);
        self.cache.put(path, node);
        self.rebuild();
    }

    /// Nodes read at one point in the registry's history.
    pub(super) fn apply_read(&mut self, paths: &[String], nodes: Vec<Option<Node>>) {
        for (path, node) in paths.iter().zip(nodes) {
            self.inexact.remove(path);
            match node {
                Some(node) => self.cache.put(path, Some(node)),
                None => self.cache.remove_subtree(path),
            }
        }
        self.rebuild();
    }

    /// A node (and what is below it) known gone by our own write.
    pub(super) fn forget(&mut self, path: &str) {
        self.cache.remove_subtree(path);
        self.rebuild();
    }

    /// Mirrors our own committed writes from their results, so the next decision sees them
    /// at once. Every operation of one multi shares one zxid and time; a `SetData` result
    /// tells them, which makes the stats of created nodes exact too. `session_id` owns the
    /// ephemeral nodes created.
    pub(super) fn apply_commit(&mut self, ops: &[Op], results: &[OpResult], session_id: i64) {
        let txn = results.iter().find_map(|r| match r {
            OpResult::DataSet { stat } => Some((stat.mzxid, stat.mtime)),
            _ => None,
        });
        for (op, result) in ops.iter().zip(results) {
            match (op, result) {
                (Op::Create { data, mode, .. }, OpResult::Created { path, stat }) => {
                    let owner = if mode.is_ephemeral() { session_id } else { 0 };
                    let exact = stat.or_else(|| {
                        txn.map(|(zxid, time)| Stat {
                            czxid: zxid,
                            mzxid: zxid,
                            pzxid: zxid,
                            ctime: time,
                            mtime: time,
                            ephemeral_owner: owner,
                            ..Stat::default()
                        })
                    });
                    let stat = match exact {
                        Some(stat) => {
                            self.inexact.remove(path);
                            stat
                        }
                        None => {
                            self.inexact.insert(path.clone());
                            Stat {
                                ephemeral_owner: owner,
                                ..Stat::default()
                            }
                        }
                    };
                    let node = Node {
                        data: data.clone(),
                        stat,
                    };
                    self.cache.put(path, Some(node));
                }
                (Op::SetData { path, data, .. }, OpResult::DataSet { stat }) => {
                    self.expect_own_event(path);
                    self.inexact.remove(path);
                    let node = Node {
                        data: data.clone(),
                        stat: *stat,
                    };
                    self.cache.put(path, Some(node));
                }
                (Op::Delete { path, .. }, _) => {
                    self.expect_own_event(path);
                    self.cache.remove_subtree(path);
                    self.inexact.remove(path);
                }
                _ => {}
            }
        }
        self.rebuild();
    }

    /// Notes a registry event: the nodes it names are read when the step ends
    /// ([`Mirror::take_event_reads`]), so that what is read is newer than anything mirrored.
    /// An event may arrive after the result of our own later write (its forwarding is not
    /// ordered with replies), so it is never applied as such: a late `Deleted` must not remove
    /// a node we created since.
    pub(super) fn on_watched(&mut self, ev: WatchEvent) -> Watched {
        match ev {
            WatchEvent::Resync => {
                debug!(job = %self.paths.job_name(), "watch attached again: re-reading the job");
                self.forget_own_events();
                Watched::Reload
            }
            // The event of our own committed write, mirrored from its result.
            WatchEvent::DataChanged(p) | WatchEvent::Deleted(p) if self.own_event(&p) => {
                Watched::Noted
            }
            // Latch contenders mean nothing to the view; the failover latch's directory is
            // noted for latch-free claims (a contender's node implies the directory).
            WatchEvent::Created(p) if self.latch_node(&p) => {
                if p.starts_with(self.paths.failover_latch().as_str()) {
                    Watched::FailoverLatch(true)
                } else {
                    Watched::Noted
                }
            }
            WatchEvent::Deleted(p) if self.latch_node(&p) => {
                if p == self.paths.failover_latch() {
                    Watched::FailoverLatch(false)
                } else {
                    Watched::Noted
                }
            }
            WatchEvent::DataChanged(p) if self.latch_node(&p) => Watched::Noted,
            // Our own creation, mirrored exactly from its result: nothing new to read.
            WatchEvent::Created(p) if self.knows(&p) => Watched::Noted,
            // A sharding is one transaction (shardcar's leader and ElasticJob's alike, the
            // latter under `processing`): its owners are read again all at once.
            WatchEvent::Created(p) | WatchEvent::DataChanged(p) | WatchEvent::Deleted(p)
                if matches!(
                    self.paths.classify(&p),
                    JobNode::ItemInstance(_) | JobNode::ShardingProcessing
                ) =>
            {
                Watched::Owners
            }
            // An item's epoch and its `running`, `failover`, `failovering` and pending retry nodes
            // are read together whichever of them an event names: a peer writes them in one multi-op,
            // and its events may come in more than one step. Read node by node, the mirror
            // could show the new `running` node without the rest (a hand-over to a worker here
            // would look like a stale runner of this host, and be released).
            WatchEvent::Created(p) | WatchEvent::DataChanged(p) | WatchEvent::Deleted(p) => {
                match self.paths.classify(&p) {
                    JobNode::Item(i)
                    | JobNode::ItemRunning(i)
                    | JobNode::ItemFailover(i)
                    | JobNode::ItemFailovering(i)
                    | JobNode::Retry(i) => {
                        self.event_reads.extend([
                            self.paths.item(i),
                            self.paths.item_running(i),
                            self.paths.item_failover(i),
                            self.paths.item_failovering(i),
                            self.paths.retry(i),
                        ]);
                    }
                    _ => self.event_reads.push(p),
                }
                Watched::Noted
            }
        }
    }

    /// The nodes the step's events named, each once, in the order the first event named it:
    /// read in one request once the step's inputs are handled and before anything its
    /// reconcile decides. A batch of events (a peer's multi-op brings one per node it wrote)
    /// costs the registry one request instead of one each.
    pub(super) fn take_event_reads(&mut self) -> Vec<String> {
        let mut paths = std::mem::take(&mut self.event_reads);
        if paths.len() > 1 {
            // Not by a scan of the list per event: a step holds up to a batch of events.
            let mut named = HashSet::with_capacity(paths.len());
            paths.retain(|p| named.insert(p.clone()));
        }
        paths
    }

    /// The watch is gone: the events of our own writes will not come.
    pub(super) fn forget_own_events(&mut self) {
        self.own_events = HashMap::new();
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
    /// `processing` flag: what a read of the owners reads.
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

    /// `ops` preceded by creations of the missing ancestors (within the job) of the nodes they
    /// create. A stale mirror makes such a creation fail, which is then re-decided on a fresh
    /// read like any refused write.
    pub(super) fn with_parents(&self, ops: Vec<Op>) -> Vec<Op> {
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
                    out.push(Op::create(parent, Vec::new(), CreateMode::Persistent));
                }
            }
            out.push(op.clone());
        }
        out
    }

    /// Frees what emptied: see [`super::io::Io::give_back_emptied`].
    pub(super) fn give_back_emptied(&mut self) {
        if self.inexact.is_empty() {
            self.inexact = BTreeSet::new();
        }
    }

    /// Replaces the mirror as a test arranges it.
    #[cfg(test)]
    pub(super) fn arrange(&mut self, nodes: BTreeMap<String, Node>) {
        self.replace_all(nodes);
    }

    #[cfg(test)]
    pub(super) fn inexact(&self) -> &BTreeSet<String> {
        &self.inexact
    }
}
