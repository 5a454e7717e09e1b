//! The in-memory store: one tree shared by any number of sessions, following ZooKeeper's rules
//! (zxids, versions, cversion-based sequence numbers, ephemerals, atomic multi, ordered watch
//! events). Used for standalone mode and for fast tests with several simulated sidecars.
//!
//! Every operation runs under one mutex with no `.await` inside, so each is atomic and events
//! are delivered in commit order.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use super::path::{join, split, validate};
use super::{
    CreateMode, Error, Node, Op, OpResult, Registry, Result, SessionState, Stat, Watch, WatchEvent,
    WatchSender,
};

mod txn;
use txn::Txn;

/// Nodes are keyed by (parent path, name) so that a node's children are one contiguous range.
type Key = (String, String);

fn key(path: &str) -> Key {
    if path == "/" {
        (String::new(), String::new())
    } else {
        let (parent, name) = split(path);
        (parent.to_string(), name.to_string())
    }
}

#[allow(
    clippy::disallowed_methods,
    reason = "the in-memory registry stamps node times as ZooKeeper's server does"
)]
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[derive(Debug, Clone)]
struct MemNode {
    data: Vec<u8>,
    stat: Stat,
}

struct Handle {
    session_id: i64,
    generation: u64,
    state_tx: watch::Sender<SessionState>,
    closed: bool,
}

/// A watch, kept under the path it watches (see `Tree::watches`).
struct WatchEntry {
    handle: u64,
    recursive: bool,
    events_tx: WatchSender,
}

/// `path`, then each of its ancestors up to `/`.
fn self_and_ancestors(path: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(Some(path), |p| match p.rfind('/') {
        Some(0) if p.len() > 1 => Some("/"),
        Some(0) | None => None,
        Some(i) => Some(&p[..i]),
    })
}

impl WatchEntry {
    /// Whether this watch, kept under `at` (`path` or one of its ancestors), wants an event
    /// of `path`.
    fn wants(&self, at: &str, path: &str) -> bool {
        self.recursive || at == path
    }
}

struct Tree {
    nodes: BTreeMap<Key, MemNode>,
    zxid: i64,
    next_session_id: i64,
    next_handle: u64,
    handles: HashMap<u64, Handle>,
    /// By the path watched: a write looks up the watches of its path and its ancestors only,
    /// not every watch of every session (a sidecar of 1000 jobs holds 1000).
    watches: BTreeMap<String, Vec<WatchEntry>>,
}

impl Tree {
    fn node(&self, path: &str) -> Option<&MemNode> {
        self.nodes.get(&key(path))
    }

    fn child_names(&self, path: &str) -> Vec<String> {
        let start = (path.to_string(), String::new());
        self.nodes
            .range(start..)
            .take_while(|((p, _), _)| p == path)
            .map(|((_, n), _)| n.clone())
            .collect()
    }

    /// Paths of the subtree at `path`, parents before children.
    fn subtree(&self, path: &str) -> Vec<String> {
        let mut out = Vec::new();
        if self.node(path).is_none() {
            return out;
        }
        let mut stack = vec![path.to_string()];
        while let Some(p) = stack.pop() {
            for name in self.child_names(&p).into_iter().rev() {
                stack.push(join(&p, &name));
            }
            out.push(p);
        }
        out
    }

    fn deliver(&mut self, events: &[WatchEvent], skip_handle: Option<u64>) {
        let mut closed = false;
        for ev in events {
            let path = match ev {
                WatchEvent::Created(p) | WatchEvent::Deleted(p) | WatchEvent::DataChanged(p) => p,
                WatchEvent::Resync => continue,
            };
            for at in self_and_ancestors(path) {
                for w in self.watches.get(at).into_iter().flatten() {
                    if Some(w.handle) != skip_handle && w.wants(at, path) {
                        closed |= w.events_tx.send(ev.clone()).is_err();
                    }
                }
            }
        }
        if closed {
            self.drop_closed_watches();
        }
    }

    fn drop_closed_watches(&mut self) {
        self.watches.retain(|_, ws| {
            ws.retain(|w| !w.events_tx.is_closed());
            !ws.is_empty()
        });
    }

    fn watches(&self) -> impl Iterator<Item = &WatchEntry> {
        self.watches.values().flatten()
    }

    /// Deletes the ephemerals of `session_id` (one transaction), returning the events.
    fn drop_ephemerals(&mut self, session_id: i64) -> Vec<WatchEvent> {
        let owned: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.stat.ephemeral_owner == session_id)
            .map(|((p, n), _)| join(p, n))
            .collect();
        let mut txn = Txn::begin(self);
        for p in &owned {
            // Ephemerals have no children, so this cannot fail.
            let _ = txn.delete(p, None);
        }
        txn.commit()
    }
}

/// A tree shared by sessions. Each [`MemoryStore::session`] is an independent "client".
#[derive(Clone)]
pub struct MemoryStore {
    tree: Arc<Mutex<Tree>>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty tree (just "/").
    pub fn new() -> MemoryStore {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            key("/"),
            MemNode {
                data: Vec::new(),
                stat: Stat::default(),
            },
        );
        let tree = Tree {
            nodes,
            zxid: 0,
            next_session_id: 0x0100_0000_0000_0001,
            next_handle: 1,
            handles: HashMap::new(),
            watches: BTreeMap::new(),
        };
        MemoryStore {
            tree: Arc::new(Mutex::new(tree)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tree> {
        // A panic elsewhere cannot leave the tree half-changed (Txn applies or rolls back).
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a new session on this tree, as another process would.
    pub fn session(&self) -> Registry {
        let mut t = self.lock();
        let session_id = t.next_session_id;
        t.next_session_id += 1;
        let handle = t.next_handle;
        t.next_handle += 1;
        let (state_tx, _) = watch::channel(SessionState::Connected {
            generation: 1,
            session_id,
        });
        t.handles.insert(
            handle,
            Handle {
                session_id,
                generation: 1,
                state_tx,
                closed: false,
            },
        );
        drop(t);
        Registry::from_memory(MemSession {
            store: self.clone(),
            handle,
        })
    }

    /// Simulates expiry of `reg`'s session: its ephemerals vanish (others see `Deleted`), it
    /// publishes `Expired`, then `Connected { generation + 1 }` with a new session id, and its
    /// watches get `Resync`. Does nothing for a closed session or one of another store.
    pub fn expire(&self, reg: &Registry) {
        let Some(m) = reg.as_memory() else { return };
        if !Arc::ptr_eq(&m.store.tree, &self.tree) {
            return;
        }
        let mut t = self.lock();
        let Some(h) = t.handles.get(&m.handle) else {
            return;
        };
        if h.closed {
            return;
        }
        let old = h.session_id;
        let events = t.drop_ephemerals(old);
        t.deliver(&events, Some(m.handle));
        let new_id = t.next_session_id;
        t.next_session_id += 1;
        let h = t.handles.get_mut(&m.handle).expect("checked above");
        h.state_tx.send_replace(SessionState::Expired {
            generation: h.generation,
        });
        h.generation += 1;
        h.session_id = new_id;
        h.state_tx.send_replace(SessionState::Connected {
            generation: h.generation,
            session_id: new_id,
        });
        for w in t.watches().filter(|w| w.handle == m.handle) {
            let _ = w.events_tx.send(WatchEvent::Resync);
        }
    }
}

/// One session on a [`MemoryStore`].
#[derive(Clone)]
pub(crate) struct MemSession {
    store: MemoryStore,
    handle: u64,
}

impl MemSession {
    /// Runs `f` in one transaction as this session; commits and delivers events on success.
    fn write<T>(&self, f: impl FnOnce(&mut Txn<'_>, i64) -> Result<T>) -> Result<T> {
        let mut t = self.store.lock();
        let owner = session_of(&t, self.handle)?;
        let mut txn = Txn::begin(&mut t);
        match f(&mut txn, owner) {
            Ok(v) => {
                let events = txn.commit();
                t.deliver(&events, None);
                Ok(v)
            }
            Err(e) => {
                txn.rollback();
                Err(e)
            }
        }
    }

    fn read<T>(&self, f: impl FnOnce(&Tree) -> Result<T>) -> Result<T> {
        let t = self.store.lock();
        session_of(&t, self.handle)?;
        f(&t)
    }

    pub(crate) async fn create(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<(String, Stat)> {
        self.write(|txn, owner| txn.create(path, data, mode, owner))
    }

    pub(crate) async fn get(&self, path: &str) -> Result<Option<Node>> {
        validate(path)?;
        self.read(|t| {
            Ok(t.node(path).map(|n| Node {
                data: n.data.clone(),
                stat: n.stat,
            }))
        })
    }

    pub(crate) async fn get_many(&self, paths: &[String]) -> Result<Vec<Option<Node>>> {
        for p in paths {
            validate(p)?;
        }
        self.read(|t| {
            Ok(paths
                .iter()
                .map(|p| {
                    t.node(p).map(|n| Node {
                        data: n.data.clone(),
                        stat: n.stat,
                    })
                })
                .collect())
        })
    }

    pub(crate) async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        validate(path)?;
        self.read(|t| Ok(t.node(path).map(|n| n.stat)))
    }

    pub(crate) async fn set(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat> {
        self.write(|txn, _| txn.set(path, data, version))
    }

    pub(crate) async fn delete(&self, path: &str, version: Option<i32>) -> Result<()> {
        self.write(|txn, _| txn.delete(path, version))
    }

    pub(crate) async fn delete_recursive(&self, path: &str) -> Result<()> {
        validate(path)?;
        self.write(|txn, _| {
            let all = txn.tree.subtree(path);
            for p in all.iter().rev() {
                if p != "/" {
                    txn.delete(p, None)?;
                }
            }
            Ok(())
        })
    }

    pub(crate) async fn children(&self, path: &str) -> Result<Vec<String>> {
        validate(path)?;
        self.read(|t| match t.node(path) {
            Some(_) => Ok(t.child_names(path)),
            None => Err(Error::NoNode(path.to_string())),
        })
    }

    pub(crate) async fn ensure_path(&self, path: &str) -> Result<()> {
        validate(path)?;
        self.write(|txn, owner| {
            let mut at = String::new();
            for comp in path.split('/').filter(|c| !c.is_empty()) {
                at.push('/');
                at.push_str(comp);
                if txn.tree.node(&at).is_none() {
                    txn.create(&at, &[], CreateMode::Persistent, owner)?;
                }
            }
            Ok(())
        })
    }

    pub(crate) async fn multi(&self, generation: Option<u64>, ops: &[Op]) -> Result<Vec<OpResult>> {
        if let Some(generation) = generation {
            let t = self.store.lock();
            if t.handles.get(&self.handle).map(|h| h.generation) != Some(generation) {
                return Err(Error::SessionExpired);
            }
        }
        self.write(|txn, owner| {
            let mut results = Vec::with_capacity(ops.len());
            for (index, op) in ops.iter().enumerate() {
                let r = match op {
                    Op::Create { path, data, mode } => {
                        txn.create(path, data, *mode, owner)
                            .map(|(path, stat)| OpResult::Created {
                                path,
                                stat: Some(stat),
                            })
                    }
                    Op::SetData {
                        path,
                        data,
                        version,
                    } => txn
                        .set(path, data, *version)
                        .map(|stat| OpResult::DataSet { stat }),
                    Op::Delete { path, version } => {
                        txn.delete(path, *version).map(|()| OpResult::Deleted)
                    }
                    Op::Check { path, version } => {
                        txn.check(path, *version).map(|()| OpResult::Checked)
                    }
                };
                results.push(r.map_err(|e| Error::MultiFailed {
                    index,
                    source: Box::new(e),
                })?);
            }
            Ok(results)
        })
    }

    pub(crate) async fn read_tree(&self, path: &str) -> Result<BTreeMap<String, Node>> {
        validate(path)?;
        self.read(|t| {
            Ok(t.subtree(path)
                .into_iter()
                .map(|p| {
                    let n = t.node(&p).expect("listed by subtree");
                    let node = Node {
                        data: n.data.clone(),
                        stat: n.stat,
                    };
                    (p, node)
                })
                .collect())
        })
    }

    pub(crate) async fn watch(&self, path: &str, recursive: bool) -> Result<Watch> {
        validate(path)?;
        let mut t = self.store.lock();
        session_of(&t, self.handle)?;
        let (events_tx, watch) = Watch::channel(None);
        // Watches dropped since are let go of here (and whenever an event finds one).
        t.drop_closed_watches();
        t.watches
            .entry(path.to_string())
            .or_default()
            .push(WatchEntry {
                handle: self.handle,
                recursive,
                events_tx,
            });
        Ok(watch)
    }

    pub(crate) fn session(&self) -> watch::Receiver<SessionState> {
        let t = self.store.lock();
        match t.handles.get(&self.handle) {
            Some(h) => h.state_tx.subscribe(),
            None => watch::channel(SessionState::Closed).1,
        }
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "the in-memory registry answers at once: its proof of liveness is now"
    )]
    pub(crate) fn last_proof(&self) -> Option<Instant> {
        Some(Instant::now())
    }

    pub(crate) async fn close(&self) {
        let mut t = self.store.lock();
        let Some(h) = t.handles.get_mut(&self.handle) else {
            return;
        };
        if h.closed {
            return;
        }
        h.closed = true;
        h.state_tx.send_replace(SessionState::Closed);
        let sid = h.session_id;
        let events = t.drop_ephemerals(sid);
        let handle = self.handle;
        t.watches.retain(|_, ws| {
            ws.retain(|w| w.handle != handle);
            !ws.is_empty()
        });
        t.deliver(&events, None);
    }
}

fn session_of(t: &Tree, handle: u64) -> Result<i64> {
    match t.handles.get(&handle) {
        Some(h) if !h.closed => Ok(h.session_id),
        _ => Err(Error::Closed),
    }
}
