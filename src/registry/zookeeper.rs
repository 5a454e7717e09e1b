//! The ZooKeeper store: each `Registry` operation as zookeeper-client calls on the current
//! session (see `zk_session`), each bounded by `op_timeout`, with errors mapped to ours.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use tokio::sync::watch;
use zookeeper_client as zk;

use super::path::{join, validate};
use super::zk_batch;
use super::zk_session::{self, acls, call, map_err, Shared};
use super::{CreateMode, Error, Node, Op, OpResult, Result, SessionState, Stat, Watch, ZkSettings};

/// Reads in flight at once per level of `read_tree`.
const READ_BATCH: usize = 256;

fn stat(s: &zk::Stat) -> Stat {
    Stat {
        czxid: s.czxid,
        mzxid: s.mzxid,
        pzxid: s.pzxid,
        ctime: s.ctime,
        mtime: s.mtime,
        version: s.version,
        cversion: s.cversion,
        ephemeral_owner: s.ephemeral_owner,
        num_children: s.num_children,
    }
}

/// A node as read. The client hands a node's data back in the buffer its request and the whole
/// reply were written to, with that buffer's capacity; a sidecar keeps the nodes of a thousand
/// jobs, so the data is moved into an allocation of its own length.
fn node(mut data: Vec<u8>, st: &zk::Stat) -> Node {
    data.shrink_to_fit();
    Node {
        data,
        stat: stat(st),
    }
}

fn mode(m: CreateMode) -> zk::CreateMode {
    match m {
        CreateMode::Persistent => zk::CreateMode::Persistent,
        CreateMode::Ephemeral => zk::CreateMode::Ephemeral,
        CreateMode::PersistentSequential => zk::CreateMode::PersistentSequential,
        CreateMode::EphemeralSequential => zk::CreateMode::EphemeralSequential,
        CreateMode::Container => zk::CreateMode::Container,
    }
}

/// "shardcar", "/a/b/", "" → "/shardcar", "/a/b", "".
fn namespace_root(namespace: &str) -> Result<String> {
    let trimmed = namespace.trim_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    let root = format!("/{trimmed}");
    validate(&root)
        .map_err(|_| Error::Other(format!("invalid ZooKeeper namespace {namespace:?}")))?;
    Ok(root)
}

/// Checks every path of `ops` before anything is sent.
fn validate_ops(ops: &[Op]) -> Result<()> {
    for op in ops {
        validate(op_path(op))?;
    }
    Ok(())
}

fn op_path(op: &Op) -> &str {
    let (Op::Create { path, .. }
    | Op::SetData { path, .. }
    | Op::Delete { path, .. }
    | Op::Check { path, .. }) = op;
    path
}

/// Sends `ops` as one multi-op on `client`. The request leaves during this call, so requests sent
/// one after another reach the server in that order whenever their answers are awaited.
pub(super) fn send_multi<'a>(
    client: &'a zk::Client,
    ops: impl IntoIterator<Item = &'a Op>,
    acls: zk::Acls<'static>,
) -> std::result::Result<
    impl std::future::Future<
            Output = std::result::Result<Vec<zk::MultiWriteResult>, zk::MultiWriteError>,
        > + Send
        + 'a,
    zk::Error,
> {
    let mut w = client.new_multi_writer();
    for op in ops {
        match op {
            Op::Create {
                path,
                data,
                mode: m,
            } => w.add_create(path, data, &mode(*m).with_acls(acls))?,
            Op::SetData {
                path,
                data,
                version,
            } => w.add_set_data(path, data, *version)?,
            Op::Delete { path, version } => w.add_delete(path, *version)?,
            Op::Check { path, version } => w.add_check_version(path, *version)?,
        }
    }
    Ok(w.commit())
}

/// What each of `ops` did, from the server's answer to them.
pub(super) fn op_results(ops: &[Op], results: Vec<zk::MultiWriteResult>) -> Vec<OpResult> {
    results
        .into_iter()
        .zip(ops.iter())
        .map(|(r, op)| match r {
            zk::MultiWriteResult::Check => OpResult::Checked,
            zk::MultiWriteResult::Delete => OpResult::Deleted,
            zk::MultiWriteResult::Create { path, stat: st } => OpResult::Created {
                // The path asked for, unless the server added a sequence number (the client
                // hands back the server's path, which is under the chroot).
                path: match op {
                    Op::Create {
                        path: asked, mode, ..
                    } if !mode.is_sequential() => asked.clone(),
                    _ => path,
                },
                stat: (!st.is_invalid()).then(|| stat(&st)),
            },
            zk::MultiWriteResult::SetData { stat: st } => OpResult::DataSet { stat: stat(&st) },
            // A result kind this crate does not know yet: nothing to tell.
            _ => OpResult::Checked,
        })
        .collect()
}

/// What the multi-op `ops` got: each operation's result, or the error of the operation that
/// failed or of the request.
pub(super) fn answer(
    ops: &[Op],
    answer: std::result::Result<Vec<zk::MultiWriteResult>, zk::MultiWriteError>,
) -> Result<Vec<OpResult>> {
    match answer {
        Ok(results) => Ok(op_results(ops, results)),
        Err(zk::MultiWriteError::RequestFailed { source }) => {
            Err(zk_session::map_err(source, "multi"))
        }
        Err(zk::MultiWriteError::OperationFailed { index, source }) => {
            Err(op_failed(ops, index, source))
        }
    }
}

/// The error of a multi-op whose operation `index` (of `ops`) failed with `source`.
pub(super) fn op_failed(ops: &[Op], index: usize, source: zk::Error) -> Error {
    let path = ops.get(index).map_or("?", op_path);
    Error::MultiFailed {
        index,
        source: Box::new(zk_session::map_err(source, path)),
    }
}

/// A session on ZooKeeper; clones share it.
#[derive(Clone)]
pub(crate) struct ZkSession {
    shared: Arc<Shared>,
}

impl ZkSession {
    /// How many of the session's tasks are running.
    #[cfg(test)]
    pub(crate) fn tasks_running(&self) -> usize {
        self.shared.tasks.len()
    }

    pub(crate) async fn connect(settings: ZkSettings) -> Result<ZkSession> {
        let namespace = namespace_root(&settings.namespace)?;
        let client = zk_session::open(&settings, &namespace).await?;
        let shared = Arc::new(Shared::new(settings, namespace));
        zk_session::spawn(shared.clone(), client, 1);
        // The session task publishes Connected before anything else; wait for it.
        let mut state_rx = shared.state_tx.subscribe();
        let _ = state_rx
            .wait_for(|s| matches!(s, SessionState::Connected { .. }))
            .await;
        Ok(ZkSession { shared })
    }

    pub(crate) async fn create(
        &self,
        path: &str,
        data: &[u8],
        m: CreateMode,
    ) -> Result<(String, Stat)> {
        validate(path)?;
        let acls = acls(&self.shared.settings);
        let (st, seq) = call(&self.shared, path, None, |c| async move {
            let options = mode(m).with_acls(acls);
            c.create(path, data, &options).await
        })
        .await?;
        let actual = if m.is_sequential() {
            format!("{path}{seq}")
        } else {
            path.to_string()
        };
        Ok((actual, stat(&st)))
    }

    pub(crate) async fn get(&self, path: &str) -> Result<Option<Node>> {
        validate(path)?;
        match call(&self.shared, path, None, |c| async move {
            c.get_data(path).await
        })
        .await
        {
            Ok((data, st)) => Ok(Some(node(data, &st))),
            Err(Error::NoNode(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn get_many(&self, paths: &[String]) -> Result<Vec<Option<Node>>> {
        for p in paths {
            validate(p)?;
        }
        let first = paths.first().map(String::as_str).unwrap_or("/");
        let results = call(&self.shared, first, None, |c| async move {
            let mut reader = c.new_multi_reader();
            for p in paths {
                reader.add_get_data(p)?;
            }
            reader.commit().await
        })
        .await?;
        paths
            .iter()
            .zip(results)
            .map(|(path, r)| match r {
                zk::MultiReadResult::Data { data, stat: st } => Ok(Some(node(data, &st))),
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => Ok(None),
                zk::MultiReadResult::Error { err } => Err(map_err(err, path)),
                _ => Err(Error::Other(format!(
                    "{path}: the multi-read answered something other than data"
                ))),
            })
            .collect()
    }

    pub(crate) async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        validate(path)?;
        let st = call(&self.shared, path, None, |c| async move {
            c.check_stat(path).await
        })
        .await?;
        Ok(st.as_ref().map(stat))
    }

    pub(crate) async fn set(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<Stat> {
        validate(path)?;
        let st = call(&self.shared, path, None, |c| async move {
            c.set_data(path, data, version).await
        })
        .await?;
        Ok(stat(&st))
    }

    pub(crate) async fn delete(&self, path: &str, version: Option<i32>) -> Result<()> {
        validate(path)?;
        call(&self.shared, path, None, |c| async move {
            c.delete(path, version).await
        })
        .await
    }

    pub(crate) async fn children(&self, path: &str) -> Result<Vec<String>> {
        validate(path)?;
        let mut names = call(&self.shared, path, None, |c| async move {
            c.list_children(path).await
        })
        .await?;
        names.sort();
        Ok(names)
    }

    pub(crate) async fn ensure_path(&self, path: &str) -> Result<()> {
        validate(path)?;
        if path == "/" {
            return Ok(());
        }
        let options = zk::CreateMode::Persistent.with_acls(acls(&self.shared.settings));
        let options = &options;
        call(&self.shared, path, None, |c| async move {
            c.mkdir(path, options).await
        })
        .await
    }

    pub(crate) async fn delete_recursive(&self, path: &str) -> Result<()> {
        validate(path)?;
        // Children may be added concurrently; a few passes settle it.
        let mut attempts = 0;
        loop {
            let tree = self.read_tree(path).await?;
            let mut failed = None;
            // Deepest first: reverse lexicographic order puts descendants before ancestors.
            for p in tree.keys().rev().filter(|p| p.as_str() != "/") {
                match self.delete(p, None).await {
                    Ok(()) | Err(Error::NoNode(_)) => {}
                    Err(Error::NotEmpty(_)) => failed = Some(Error::NotEmpty(p.clone())),
                    Err(e) => return Err(e),
                }
            }
            match failed {
                None => return Ok(()),
                Some(e) if attempts >= 5 => return Err(e),
                Some(_) => attempts += 1,
            }
        }
    }

    pub(crate) async fn multi(&self, generation: Option<u64>, ops: &[Op]) -> Result<Vec<OpResult>> {
        validate_ops(ops)?;
        let acls = acls(&self.shared.settings);
        let r = call(&self.shared, "multi", generation, |c| async move {
            // A request that failed as a whole is the client's error (it proves nothing about the
            // session); a failed operation is the server's answer.
            match send_multi(&c, ops, acls)?.await {
                Err(zk::MultiWriteError::RequestFailed { source }) => Err(source),
                other => Ok(other),
            }
        })
        .await?;
        answer(ops, r)
    }

    /// Like `multi` in `generation`, but sent through the session's batcher, which may join it
    /// with other callers' batched multi-ops into one request (`zk_batch`).
    pub(crate) async fn multi_batched(
        &self,
        generation: u64,
        ops: Arc<[Op]>,
    ) -> Result<Vec<OpResult>> {
        validate_ops(&ops)?;
        zk_batch::submit(&self.shared, generation, ops).await
    }

    pub(crate) async fn read_tree(&self, root: &str) -> Result<BTreeMap<String, Node>> {
        validate(root)?;
        let mut out = BTreeMap::new();
        let mut level = vec![root.to_string()];
        while !level.is_empty() {
            let mut next = Vec::new();
            for batch in level.chunks(READ_BATCH) {
                // Requests go out when the methods are called, so these are pipelined.
                let results = call(&self.shared, root, None, |c| async move {
                    let data: Vec<_> = batch.iter().map(|p| c.get_data(p)).collect();
                    let kids: Vec<_> = batch.iter().map(|p| c.list_children(p)).collect();
                    let (data, kids) = futures::join!(join_all(data), join_all(kids));
                    // An error from the client itself (not the server's answer) fails the whole
                    // batch here, so that it proves nothing about the session.
                    let client_error = data
                        .iter()
                        .filter_map(|r| r.as_ref().err())
                        .chain(kids.iter().filter_map(|r| r.as_ref().err()))
                        .find(|e| !zk_session::server_answered(e));
                    if let Some(e) = client_error {
                        return Err(e.clone());
                    }
                    Ok(data.into_iter().zip(kids).collect::<Vec<_>>())
                })
                .await?;
                for (path, (data, kids)) in batch.iter().zip(results) {
                    match (data, kids) {
                        (Ok((data, st)), Ok(names)) => {
                            next.extend(names.iter().map(|n| join(path, n)));
                            out.insert(path.clone(), node(data, &st));
                        }
                        // Deleted while we read: skip it and what was below it.
                        (Err(zk::Error::NoNode), _) | (_, Err(zk::Error::NoNode)) => {}
                        (Err(e), _) | (_, Err(e)) => return Err(zk_session::map_err(e, path)),
                    }
                }
            }
            level = next;
        }
        Ok(out)
    }

    pub(crate) async fn watch(&self, path: &str, recursive: bool) -> Result<Watch> {
        validate(path)?;
        let (reg, watch) = self.shared.register(path, recursive);
        let op_timeout = self.shared.settings.op_timeout;
        let (client, generation) = tokio::time::timeout(op_timeout, self.shared.client())
            .await
            .map_err(|_| Error::Timeout(op_timeout))??;
        zk_session::attach(&self.shared, &reg, &client, generation, false).await?;
        Ok(watch)
    }

    pub(crate) fn session(&self) -> watch::Receiver<SessionState> {
        self.shared.state_tx.subscribe()
    }

    pub(crate) fn last_proof(&self) -> Option<Instant> {
        self.shared.last_proof()
    }

    /// A hook that sends the session's heartbeat at once; it holds the session weakly.
    pub(crate) fn warm_up_hook(&self) -> impl Fn() + Send + Sync + 'static {
        let shared = std::sync::Arc::downgrade(&self.shared);
        move || {
            if let Some(shared) = shared.upgrade() {
                shared.warm_up.notify_one();
            }
        }
    }

    /// Closes the session for good and waits for its tasks to end (at most one operation
    /// timeout: a task stuck in a call ends with the call).
    pub(crate) async fn close(&self) {
        self.shared.close();
        // Let the client send its close request so our ephemerals go at once.
        tokio::task::yield_now().await;
        let tasks = &self.shared.tasks;
        if tokio::time::timeout(self.shared.settings.op_timeout, tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                left = tasks.len(),
                "registry tasks still running after close"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces() {
        assert_eq!(namespace_root("shardcar").unwrap(), "/shardcar");
        assert_eq!(namespace_root("/a/b/").unwrap(), "/a/b");
        assert_eq!(namespace_root("").unwrap(), "");
        assert!(namespace_root("a//b").is_err());
    }
}
