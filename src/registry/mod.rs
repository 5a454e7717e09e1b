//! The coordination store: one `Registry` handle over either a private in-memory tree (standalone
//! mode and fast tests of coordination logic with several simulated sidecars) or a ZooKeeper
//! ensemble (production, shared with Java ElasticJob processes).
//!
//! Both stores follow ZooKeeper's rules (parents must exist, versions, sequential suffixes from the
//! parent's `cversion`, ephemerals owned by a session, no children under ephemerals), so code that
//! passes its tests on [`MemoryStore`] behaves the same against ZooKeeper. This module owns the
//! session: one per `Registry` (clones share it), published on [`Registry::session`]. An expired
//! session is replaced by a new one with `generation + 1`; only [`Registry::close`] is terminal.
//!
//! Also here: recursive watches ([`Watch`]), a Curator-compatible mutex ([`Latch`], see
//! [`latch`]) and a local mirror of a subtree ([`TreeCache`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod cache;
mod latch;
mod memory;
mod order;
mod path;
mod watch;
mod zk_batch;
mod zk_session;
mod zookeeper;

#[cfg(test)]
mod memory_tests;
#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests run against real time and real servers"
)]
mod zk_server;
#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests run against real time and real servers"
)]
mod zk_tests;

pub use cache::{CachedNode, CachedStat, TreeCache};
pub use latch::Latch;
pub use memory::MemoryStore;
pub use order::RequestOrder;
pub(crate) use watch::WatchSender;
pub use watch::{Watch, WATCH_QUEUE};

/// Result of a registry operation.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a registry operation failed. The variants mirror ZooKeeper's error codes so callers can
/// react the same way whichever store is in use.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The node (or, for a create, its parent) does not exist.
    #[error("node {0} does not exist")]
    NoNode(String),
    /// A create found the node already there.
    #[error("node {0} already exists")]
    NodeExists(String),
    /// A conditional write saw another version than the one expected (a concurrent writer won).
    #[error("node {0} has another version than expected (concurrent update)")]
    BadVersion(String),
    /// A delete found children under the node.
    #[error("node {0} has children; delete them first or use delete_recursive")]
    NotEmpty(String),
    /// The ZooKeeper session expired: its ephemeral nodes are gone. A new session is being opened.
    #[error("ZooKeeper session expired; ephemeral nodes of this session are gone")]
    SessionExpired,
    /// The connection to ZooKeeper was lost while the request was in flight; it may or may not
    /// have been applied.
    #[error("connection to ZooKeeper lost; the request may or may not have been applied")]
    ConnectionLoss,
    /// No answer within the operation timeout (the client is probably disconnected).
    #[error("no answer from ZooKeeper within {0:?}; check connectivity to the ensemble")]
    Timeout(Duration),
    /// Operation `index` of an atomic multi failed, so none of them was applied.
    #[error("operation {index} of a multi-op failed, nothing was applied: {source}")]
    MultiFailed {
        /// Position of the failed operation in the submitted list.
        index: usize,
        /// Why it failed.
        source: Box<Error>,
    },
    /// The registry was closed by [`Registry::close`].
    #[error("registry closed")]
    Closed,
    /// The node's ACL denies this client (wrong or missing digest credentials).
    #[error("not authorized for {0}; check the registry digest credentials")]
    NoAuth(String),
    /// Anything else (invalid path, unexpected server answer, ephemeral parent…).
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// Errors after which the outcome of a write is unknown or the session must be re-checked.
    pub fn is_connection_problem(&self) -> bool {
        matches!(
            self,
            Error::SessionExpired | Error::ConnectionLoss | Error::Timeout(_)
        )
    }
}

/// How a node is created (ZooKeeper's create modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// Stays until deleted.
    Persistent,
    /// Deleted when the creating session closes or expires; may not have children.
    Ephemeral,
    /// Persistent, with a `%010d` suffix taken from the parent's `cversion`.
    PersistentSequential,
    /// Ephemeral, with a `%010d` suffix taken from the parent's `cversion`.
    EphemeralSequential,
    /// ZooKeeper reaps it some time after its last child goes; the memory store keeps it.
    Container,
}

impl CreateMode {
    /// Whether the node belongs to the creating session.
    pub fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }
    /// Whether the server appends a sequence number to the name.
    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential | CreateMode::EphemeralSequential
        )
    }
}

/// ZooKeeper's node metadata. Times are milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    /// Transaction that created the node.
    pub czxid: i64,
    /// Transaction that last changed the data.
    pub mzxid: i64,
    /// Transaction that last added or removed a child.
    pub pzxid: i64,
    /// Creation time (ms).
    pub ctime: i64,
    /// Last data change (ms).
    pub mtime: i64,
    /// Number of data changes.
    pub version: i32,
    /// Number of child additions and removals (the source of sequential suffixes).
    pub cversion: i32,
    /// Owning session id for an ephemeral node, else 0.
    pub ephemeral_owner: i64,
    /// Number of children.
    pub num_children: i32,
}

/// A node's data and metadata.
#[derive(Debug, Clone)]
pub struct Node {
    /// The payload.
    pub data: Vec<u8>,
    /// The metadata.
    pub stat: Stat,
}

/// One operation of an atomic [`Registry::multi`].
#[derive(Debug, Clone)]
pub enum Op {
    /// Create a node (the parent must exist).
    Create {
        /// Absolute path.
        path: String,
        /// Payload.
        data: Vec<u8>,
        /// Mode.
        mode: CreateMode,
    },
    /// Replace a node's data, optionally only at `version`.
    SetData {
        /// Absolute path.
        path: String,
        /// Payload.
        data: Vec<u8>,
        /// Expected version, `None` for any.
        version: Option<i32>,
    },
    /// Delete a childless node, optionally only at `version`.
    Delete {
        /// Absolute path.
        path: String,
        /// Expected version, `None` for any.
        version: Option<i32>,
    },
    /// Fail the multi unless the node exists at `version`.
    Check {
        /// Absolute path.
        path: String,
        /// Expected version.
        version: i32,
    },
}

impl Op {
    /// Create `path` with `data`.
    pub fn create(path: String, data: impl Into<Vec<u8>>, mode: CreateMode) -> Op {
        Op::Create {
            path,
            data: data.into(),
            mode,
        }
    }

    /// Delete `path`, whatever its version.
    pub fn delete(path: String) -> Op {
        Op::Delete {
            path,
            version: None,
        }
    }
}

/// What one operation of a [`Registry::multi_at`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// The node was created at `path` (with a suffix if sequential). `stat` is `None` when the
    /// server did not return a usable one (ZooKeeper 3.8 returns none for a create inside a
    /// multi, ZOOKEEPER-4026); every operation of one multi shares one zxid, so a `SetData` of
    /// the same multi tells it.
    Created {
        path: String,
        stat: Option<Stat>,
    },
    /// The node's data was replaced; its new stat.
    DataSet {
        stat: Stat,
    },
    Deleted,
    Checked,
}

/// A change seen by a recursive [`Watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// The node at this path was created.
    Created(String),
    /// The node at this path was deleted.
    Deleted(String),
    /// The data of the node at this path changed.
    DataChanged(String),
    /// events may have been lost (reconnect, new session): re-read everything
    Resync,
}

/// The state of a registry's session, published on [`Registry::session`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionState {
    /// Connected with session `session_id`; `generation` counts sessions of this registry from 1.
    Connected {
        /// Which session of this registry (1, 2, … after expiries).
        generation: u64,
        /// The server's session id (owner of our ephemerals).
        session_id: i64,
    },
    /// The connection dropped; the session may still be alive on the server.
    Disconnected {
        /// The session that is disconnected.
        generation: u64,
        /// When the connection dropped.
        since: Instant,
    },
    /// the session expired; a new one is being opened (generation + 1 when it is)
    Expired {
        /// The session that expired.
        generation: u64,
    },
    /// [`Registry::close`] was called. Terminal.
    Closed,
}

impl SessionState {
    /// The session generation this state refers to (0 for `Closed`).
    pub fn generation(&self) -> u64 {
        match self {
            SessionState::Connected { generation, .. }
            | SessionState::Disconnected { generation, .. }
            | SessionState::Expired { generation } => *generation,
            SessionState::Closed => 0,
        }
    }
}

/// How to reach ZooKeeper.
#[derive(Debug, Clone)]
pub struct ZkSettings {
    /// Ensemble, e.g. `"h1:2181,h2:2181"` (no chroot: use `namespace`).
    pub connect: String,
    /// Root of everything we touch, e.g. `"shardcar"`; may contain '/'. Created if missing.
    pub namespace: String,
    /// Requested session timeout (the server may clamp it to 2..20 ticks).
    pub session_timeout: Duration,
    /// How long to wait for a connection when opening a session.
    pub connection_timeout: Duration,
    /// `"user:pass"` for digest authentication; nodes are then created with creator-only ACLs.
    pub digest: Option<String>,
    /// Upper bound for every single call (requests issued while disconnected are queued by the
    /// client; this turns the wait into [`Error::Timeout`]).
    pub op_timeout: Duration,
}

/// A handle on the coordination store and its session. Cheap to clone; clones share the session.
#[derive(Clone)]
pub struct Registry {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Memory(memory::MemSession),
    ZooKeeper(zookeeper::ZkSession),
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match &$self.inner {
            Inner::Memory($s) => $e,
            Inner::ZooKeeper($s) => $e,
        }
    };
}

impl Registry {
    /// A fresh private [`MemoryStore`] with one session (standalone mode).
    pub fn standalone() -> Registry {
        MemoryStore::new().session()
    }

    /// Connects to ZooKeeper, ensures `/{namespace}` exists and roots every path there.
    ///
    /// # Errors
    /// `Timeout`/`ConnectionLoss` if no server answers within the connection timeout, `NoAuth`
    /// if the namespace exists with an ACL that denies us, `Other` for a malformed setting.
    pub async fn zookeeper(settings: ZkSettings) -> Result<Registry> {
        let session = zookeeper::ZkSession::connect(settings).await?;
        Ok(Registry {
            inner: Inner::ZooKeeper(session),
        })
    }

    pub(crate) fn from_memory(session: memory::MemSession) -> Registry {
        Registry {
            inner: Inner::Memory(session),
        }
    }

    pub(crate) fn as_memory(&self) -> Option<&memory::MemSession> {
        match &self.inner {
            Inner::Memory(m) => Some(m),
            Inner::ZooKeeper(_) => None,
        }
    }

    /// Whether this is the in-memory store (no ZooKeeper).
    pub fn is_standalone(&self) -> bool {
        matches!(self.inner, Inner::Memory(_))
    }

    /// Creates a node; returns its actual path (with the sequence suffix if sequential).
    ///
    /// # Errors
    /// `NodeExists`, `NoNode` (parent missing), `Other` (parent is ephemeral, bad path).
    pub async fn create(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<(String, Stat)> {
        dispatch!(self, s => s.create(path, data, mode).await)
    }

    /// The node's data and stat, `None` if absent.
    pub async fn get(&self, path: &str) -> Result<Option<Node>> {
        dispatch!(self, s => s.get(path).await)
    }

    /// Several nodes read at one point in the store's history (ZooKeeper's multi-read), so
    /// the nodes one transaction wrote are seen all changed or none; `None` for an absent one.
    pub async fn get_many(&self, paths: &[String]) -> Result<Vec<Option<Node>>> {
        dispatch!(self, s => s.get_many(paths).await)
    }

    /// The node's stat, `None` if absent.
    pub async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        dispatch!(self, s => s.exists(path).await)
    }

    /// Replaces the node's data, only at `version` if given.
    ///
    /// # Errors
    /// `NoNode`, `BadVersion`.
    pub async fn set(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat> {
        dispatch!(self, s => s.set(path, data, version).await)
    }

    /// Deletes a childless node, only at `version` if given.
    ///
    /// # Errors
    /// `NoNode` if absent, `NotEmpty`, `BadVersion`.
    pub async fn delete(&self, path: &str, version: Option<i32>) -> Result<()> {
        dispatch!(self, s => s.delete(path, version).await)
    }

    /// Deletes the node and everything under it; `Ok` if absent. Not atomic on ZooKeeper:
    /// children created concurrently are retried a few times.
    pub async fn delete_recursive(&self, path: &str) -> Result<()> {
        dispatch!(self, s => s.delete_recursive(path).await)
    }

    /// Names (not paths) of the node's children, sorted.
    ///
    /// # Errors
    /// `NoNode` if absent.
    pub async fn children(&self, path: &str) -> Result<Vec<String>> {
        dispatch!(self, s => s.children(path).await)
    }

    /// Creates the node and its missing ancestors (persistent, empty), like `mkdir -p`.
    pub async fn ensure_path(&self, path: &str) -> Result<()> {
        dispatch!(self, s => s.ensure_path(path).await)
    }

    /// Applies all operations atomically, or none.
    ///
    /// # Errors
    /// `MultiFailed { index, source }` naming the first failed operation.
    pub async fn multi(&self, ops: Vec<Op>) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        dispatch!(self, s => s.multi(None, &ops).await).map(drop)
    }

    /// Applies all operations atomically, or none, in session `generation` only: when the
    /// registry has moved on to another session (the one the caller decided in expired), the
    /// operations are not sent and the call fails with `SessionExpired`. Returns what each
    /// operation did.
    ///
    /// # Errors
    /// `SessionExpired` for another generation, `MultiFailed { index, source }` naming the
    /// first failed operation, connection errors (the outcome is then unknown).
    pub async fn multi_at(&self, generation: u64, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        dispatch!(self, s => s.multi(Some(generation), &ops).await)
    }

    /// `multi_at`, sent as part of a group commit: on ZooKeeper, the multi-ops that callers
    /// submit this way at about the same time go to the server together as one request
    /// (`zk_batch`). Each caller still gets exactly its own results or its own failure. Requests
    /// are not ordered with any the caller makes meanwhile, batched or not: a caller that needs
    /// its requests to land in order waits for this answer before making the next. The
    /// operations are shared, not copied: a caller keeps them to apply the results.
    ///
    /// # Errors
    /// As `multi_at`.
    pub async fn multi_at_batched(&self, generation: u64, ops: Arc<[Op]>) -> Result<Vec<OpResult>> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        match &self.inner {
            Inner::ZooKeeper(s) => s.multi_batched(generation, ops).await,
            Inner::Memory(s) => s.multi(Some(generation), &ops).await,
        }
    }

    /// ElasticJob's `persist`: replaces the node's data, or creates it (and its missing
    /// parents) if absent.
    pub async fn persist(&self, path: &str, data: &[u8]) -> Result<()> {
        match self.set(path, data, None).await {
            Ok(_) => return Ok(()),
            Err(Error::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
        if let Some((parent, _)) = path.rsplit_once('/') {
            if !parent.is_empty() {
                self.ensure_path(parent).await?;
            }
        }
        match self.create(path, data, CreateMode::Persistent).await {
            Ok(_) => Ok(()),
            Err(Error::NodeExists(_)) => self.set(path, data, None).await.map(drop),
            Err(e) => Err(e),
        }
    }

    /// The subtree at `path` (including `path`), keyed by absolute path; empty if absent.
    /// On ZooKeeper the reads of each level are pipelined; the result is not a snapshot.
    pub async fn read_tree(&self, path: &str) -> Result<BTreeMap<String, Node>> {
        dispatch!(self, s => s.read_tree(path).await)
    }

    /// Watches `path` and all its descendants (also when `path` does not exist yet).
    pub async fn watch_recursive(&self, path: &str) -> Result<Watch> {
        dispatch!(self, s => s.watch(path, true).await)
    }

    /// Returns once the node at `path` is absent.
    ///
    /// # Cancellation safety
    /// Cancel-safe.
    pub async fn wait_deleted(&self, path: &str) -> Result<()> {
        let mut watch = dispatch!(self, s => s.watch(path, false).await)?;
        loop {
            if self.exists(path).await?.is_none() {
                return Ok(());
            }
            // Wait for an event about the node itself; any of them (or a resync) means re-check.
            loop {
                match watch.next().await {
                    Some(WatchEvent::Deleted(p)) if p == path => return Ok(()),
                    Some(WatchEvent::Resync) => break,
                    Some(_) => continue,
                    None => return Err(Error::Closed),
                }
            }
        }
    }

    /// Acquires the Curator-LeaderLatch-compatible mutex in `dir`; see [`latch`](Latch).
    ///
    /// # Cancellation safety
    /// Cancel-safe: dropping the future deletes the contender node.
    pub async fn acquire_latch(&self, dir: &str) -> Result<Latch> {
        latch::acquire(self, dir).await
    }

    /// The session state, updated as it changes.
    pub fn session(&self) -> tokio::sync::watch::Receiver<SessionState> {
        dispatch!(self, s => s.session())
    }

    /// Proof that the current session is alive: the latest instant at which a request was
    /// *sent* that the server then answered in this session (memory store: now). The server
    /// cannot expire the session before this instant plus the session timeout, so a lease that
    /// ends before that is safe to grant. `None` until a request of the current session has
    /// been answered (so a new session, or one whose requests are all in flight after a pause
    /// of this process, proves nothing yet).
    pub fn last_proof(&self) -> Option<Instant> {
        dispatch!(self, s => s.last_proof())
    }

    /// On ZooKeeper, a hook that makes the session send its heartbeat (a read) at once, for the
    /// timer to call just before a fire ([`crate::schedule::WarmUp`]): a
    /// request on a session idle for a while waits for the server's threads to wake, and the
    /// read takes that wait instead of the fire's write. `None` standalone.
    pub fn warm_up_hook(&self) -> Option<impl Fn() + Send + Sync + 'static> {
        match &self.inner {
            Inner::Memory(_) => None,
            Inner::ZooKeeper(s) => Some(s.warm_up_hook()),
        }
    }

    /// Closes the session: its ephemeral nodes go at once, watches end, calls fail `Closed`.
    pub async fn close(&self) {
        dispatch!(self, s => s.close().await)
    }
}

impl Registry {
    /// How many tasks of a ZooKeeper session are running (0 in memory).
    #[cfg(test)]
    pub(crate) fn tasks_running(&self) -> usize {
        match &self.inner {
            Inner::Memory(_) => 0,
            Inner::ZooKeeper(s) => s.tasks_running(),
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Inner::Memory(_) => f.write_str("Registry(memory)"),
            Inner::ZooKeeper(_) => f.write_str("Registry(zookeeper)"),
        }
    }
}
