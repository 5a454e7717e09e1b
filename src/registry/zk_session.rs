//! The ZooKeeper session behind a `Registry`: one task owns it, publishes its state, replaces it
//! after expiry (generation + 1), keeps its proof of liveness (`last_proof`) fresh with a light
//! heartbeat, and keeps every live watch attached to whichever session is current.
//!
//! A proof is the instant a request was *sent* that the server answered, never the instant the
//! answer arrived: after a pause of this process an answer read late (or one the server sent
//! just before expiring the session) proves nothing about now.
//!
//! Rules kept here (see STACK-NOTES): a `PersistentWatcher` is never polled after a terminal
//! session event (it panics); persistent watches may lose events across a reconnect
//! (ZOOKEEPER-4698), so their owners get `Resync` after Disconnected → SyncConnected and after a
//! new session.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use zookeeper_client as zk;

use super::zk_batch;
use super::{Error, Result, SessionState, Watch, WatchEvent, WatchSender, ZkSettings};

/// Lock a std mutex; a poisoned one still holds consistent data (no section here can panic
/// half-way through an update).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A watch registration, re-attached to every new session.
pub(super) struct WatchReg {
    pub(super) path: String,
    pub(super) recursive: bool,
    pub(super) events_tx: WatchSender,
    /// The generation this watch is attached to (0: none). Async lock: held across `addWatch`.
    attached: tokio::sync::Mutex<u64>,
}

/// State shared by the clones of one `Registry` and its session task.
pub(super) struct Shared {
    pub(super) settings: ZkSettings,
    /// "/shardcar", or "" when no namespace.
    pub(super) namespace: String,
    /// The current session's client and generation; `None` while a new one is being opened.
    /// Only the ops hold clones, briefly, so taking it out closes the session.
    pub(super) current: Mutex<Option<(zk::Client, u64)>>,
    pub(super) state_tx: watch::Sender<SessionState>,
    pub(super) closed: AtomicBool,
    /// The latest proof of liveness: (generation, send instant of an answered request).
    proof: Mutex<Option<(u64, Instant)>>,
    pub(super) watches: Mutex<HashMap<u64, Arc<WatchReg>>>,
    next_watch: AtomicU64,
    /// Every task of the session (its loop, the heartbeat, watch forwarders and re-attachers):
    /// `close` waits for them.
    pub(super) tasks: TaskTracker,
    /// Cancelled by `close`: tasks that sleep wake at once.
    pub(super) closing: CancellationToken,
    /// Sends the heartbeat at once (`Registry::warm_up_hook`).
    pub(super) warm_up: tokio::sync::Notify,
    /// Multi-ops queued for the batcher (`zk_batch`), and its end of the queue until it starts.
    pub(super) batch_tx: mpsc::UnboundedSender<zk_batch::Request>,
    pub(super) batch_rx: Mutex<Option<mpsc::UnboundedReceiver<zk_batch::Request>>>,
}

impl Shared {
    pub(super) fn new(settings: ZkSettings, namespace: String) -> Shared {
        let (batch_tx, batch_rx) = zk_batch::channel();
        Shared {
            batch_tx,
            batch_rx,
            settings,
            namespace,
            current: Mutex::new(None),
            state_tx: watch::channel(SessionState::Closed).0,
            closed: AtomicBool::new(false),
            proof: Mutex::new(None),
            watches: Mutex::new(HashMap::new()),
            next_watch: AtomicU64::new(1),
            tasks: TaskTracker::new(),
            closing: CancellationToken::new(),
            warm_up: tokio::sync::Notify::new(),
        }
    }

    /// Records that a request of session `generation` sent at `sent` was answered.
    pub(super) fn prove(&self, generation: u64, sent: Instant) {
        let mut proof = lock(&self.proof);
        match *proof {
            Some((g, at)) if g == generation && at >= sent => {}
            Some((g, _)) if g > generation => {}
            _ => *proof = Some((generation, sent)),
        }
    }

    /// The latest proof for the current session, if any.
    pub(super) fn last_proof(&self) -> Option<Instant> {
        let current = lock(&self.current).as_ref().map(|(_, g)| *g)?;
        match *lock(&self.proof) {
            Some((g, at)) if g == current => Some(at),
            _ => None,
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// The current client, waiting (within the caller's timeout) while a new session is opened.
    pub(super) async fn client(&self) -> Result<(zk::Client, u64)> {
        let mut state_rx = self.state_tx.subscribe();
        loop {
            if self.is_closed() {
                return Err(Error::Closed);
            }
            if let Some(cur) = lock(&self.current).clone() {
                return Ok(cur);
            }
            if state_rx.changed().await.is_err() {
                return Err(Error::Closed);
            }
        }
    }

    /// Registers a watch; it is attached to each session from now on until the guard drops.
    pub(super) fn register(
        self: &Arc<Self>,
        path: &str,
        recursive: bool,
    ) -> (Arc<WatchReg>, Watch) {
        let (events_tx, mut watch) = Watch::channel(None);
        let reg = Arc::new(WatchReg {
            path: path.to_string(),
            recursive,
            events_tx,
            attached: tokio::sync::Mutex::new(0),
        });
        let id = self.next_watch.fetch_add(1, Ordering::Relaxed);
        lock(&self.watches).insert(id, reg.clone());
        watch.set_guard(Box::new(WatchGuard {
            shared: Arc::downgrade(self),
            id,
        }));
        (reg, watch)
    }

    /// Closes for good: publishes `Closed`, ends watches, drops the client (closing the session).
    pub(super) fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.state_tx.send_replace(SessionState::Closed);
        self.closing.cancel();
        self.tasks.close();
        lock(&self.watches).clear();
        let client = lock(&self.current).take();
        drop(client);
    }
}

/// Removes a watch registration when the `Watch` is dropped.
pub(super) struct WatchGuard {
    shared: Weak<Shared>,
    id: u64,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            lock(&shared.watches).remove(&self.id);
        }
    }
}

/// Maps the client's errors; `path` names the node for node-specific errors.
pub(super) fn map_err(e: zk::Error, path: &str) -> Error {
    match e {
        zk::Error::NoNode => Error::NoNode(path.to_string()),
        zk::Error::NodeExists => Error::NodeExists(path.to_string()),
        zk::Error::BadVersion => Error::BadVersion(path.to_string()),
        zk::Error::NotEmpty => Error::NotEmpty(path.to_string()),
        zk::Error::NoAuth | zk::Error::AuthFailed | zk::Error::InvalidAcl => {
            Error::NoAuth(path.to_string())
        }
        zk::Error::SessionExpired => Error::SessionExpired,
        zk::Error::ConnectionLoss => Error::ConnectionLoss,
        zk::Error::ClientClosed => Error::Closed,
        zk::Error::NoChildrenForEphemerals => Error::Other(format!(
            "cannot create {path}: its parent is an ephemeral node"
        )),
        // "no response from connection in 2400ms": the request was in flight on a dead connection.
        zk::Error::Custom(c) if c.to_string().contains("no response") => Error::ConnectionLoss,
        other => Error::Other(format!("ZooKeeper error on {path}: {other}")),
    }
}

/// Whether an error is the server's own answer, and so still proves the session was alive when
/// the request was sent (for `last_proof`). A whitelist: every other error may come from the
/// client alone (a dropped request on a dead connection reads as `UnexpectedError`, a stalled
/// one as a custom "no response" error) and proves nothing.
pub(super) fn server_answered(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::NoNode
            | zk::Error::NodeExists
            | zk::Error::BadVersion
            | zk::Error::NotEmpty
            | zk::Error::NoAuth
            | zk::Error::InvalidAcl
            | zk::Error::NoChildrenForEphemerals
            | zk::Error::NoWatcher
            | zk::Error::QuotaExceeded
    )
}

/// Runs one call on the current session within `op_timeout`, mapping errors and recording the
/// proof of liveness it gives. With `generation`, the call is made only on that session: a
/// decision taken in a session that has since expired must not land in the next one.
#[allow(
    clippy::disallowed_methods,
    reason = "the session times its requests: proofs of liveness are instants a request was sent"
)]
pub(super) async fn call<T, F, Fut>(
    shared: &Shared,
    path: &str,
    generation: Option<u64>,
    f: F,
) -> Result<T>
where
    F: FnOnce(zk::Client) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, zk::Error>>,
{
    let op_timeout = shared.settings.op_timeout;
    let r = tokio::time::timeout(op_timeout, async {
        let (client, current) = shared.client().await?;
        if generation.is_some_and(|g| g != current) {
            return Err(Error::SessionExpired);
        }
        let sent = Instant::now();
        let r = f(client).await;
        if r.as_ref().err().is_none_or(server_answered) {
            shared.prove(current, sent);
        }
        r.map_err(|e| map_err(e, path))
    })
    .await
    .unwrap_or(Err(Error::Timeout(op_timeout)));
    r
}

/// Opens a session on the ensemble, ensures the namespace and returns a client rooted there.
pub(super) async fn open(settings: &ZkSettings, namespace: &str) -> Result<zk::Client> {
    let mut connector = zk::Client::connector()
        .with_session_timeout(settings.session_timeout)
        .with_connection_timeout(settings.connection_timeout);
    if let Some(digest) = &settings.digest {
        connector = connector.with_auth("digest", digest.as_bytes());
    }
    let limit = settings.connection_timeout.max(settings.session_timeout);
    let client = match tokio::time::timeout(limit, connector.connect(&settings.connect)).await {
        Err(_) | Ok(Err(zk::Error::Timeout)) => return Err(Error::Timeout(limit)),
        Ok(Err(e)) => return Err(map_err(e, &settings.connect)),
        Ok(Ok(c)) => c,
    };
    if namespace.is_empty() {
        return Ok(client);
    }
    let acls = acls(settings);
    let options = zk::CreateMode::Persistent.with_acls(acls);
    let mkdir = client.mkdir(namespace, &options);
    match tokio::time::timeout(settings.op_timeout, mkdir).await {
        Err(_) => return Err(Error::Timeout(settings.op_timeout)),
        Ok(Err(e)) => return Err(map_err(e, namespace)),
        Ok(Ok(())) => {}
    }
    client
        .chroot(namespace)
        .map_err(|_| Error::Other(format!("invalid ZooKeeper namespace {namespace:?}")))
}

/// ACLs for every node we create: creator-only with digest credentials, else open.
pub(super) fn acls(settings: &ZkSettings) -> zk::Acls<'static> {
    if settings.digest.is_some() {
        zk::Acls::creator_all()
    } else {
        zk::Acls::anyone_all()
    }
}

/// Makes `client` (of `generation`) current and runs the session until close.
pub(super) fn spawn(shared: Arc<Shared>, client: zk::Client, generation: u64) {
    shared.tasks.spawn(run(shared.clone(), client, generation));
    shared.tasks.spawn(heartbeat(shared.clone()));
    zk_batch::spawn(&shared);
}

fn publish_connected(shared: &Shared, client: &zk::Client, generation: u64) {
    let session_id = client.session_id().0;
    shared.state_tx.send_replace(SessionState::Connected {
        generation,
        session_id,
    });
}

#[allow(
    clippy::disallowed_methods,
    reason = "the session times its requests: proofs of liveness are instants a request was sent"
)]
async fn run(shared: Arc<Shared>, first: zk::Client, mut generation: u64) {
    let mut client = Some(first);
    loop {
        let c = client.take().expect("a client for each generation");
        let mut states = c.state_watcher();
        *lock(&shared.current) = Some((c.clone(), generation));
        if shared.is_closed() {
            lock(&shared.current).take();
            return;
        }
        publish_connected(&shared, &c, generation);
        if generation > 1 {
            reattach_all(&shared, &c, generation);
        }
        drop(c); // only `current` holds the session now, so close() can end it.

        let mut closed_rx = shared.state_tx.subscribe();
        let end = loop {
            tokio::select! {
                state = states.changed() => match state {
                    zk::SessionState::Disconnected => {
                        let since = Instant::now();
                        tracing::warn!(generation, "ZooKeeper connection lost; reconnecting");
                        shared.state_tx.send_replace(SessionState::Disconnected { generation, since });
                    }
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                        tracing::info!(generation, "ZooKeeper connection re-established");
                        if let Some((c, _)) = lock(&shared.current).clone() {
                            publish_connected(&shared, &c, generation);
                        }
                    }
                    terminal => break terminal,
                },
                changed = closed_rx.changed() => {
                    if changed.is_err() || shared.is_closed() {
                        return;
                    }
                }
            }
        };
        lock(&shared.current).take();
        if shared.is_closed() {
            return;
        }
        tracing::warn!(generation, state = ?end, "ZooKeeper session ended; opening a new one");
        shared
            .state_tx
            .send_replace(SessionState::Expired { generation });
        let mut backoff = Duration::from_millis(100);
        loop {
            if shared.is_closed() {
                return;
            }
            match open(&shared.settings, &shared.namespace).await {
                Ok(c) => {
                    client = Some(c);
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, ?backoff, "cannot open a new ZooKeeper session yet");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        generation += 1;
    }
}

/// Keeps `last_proof` fresh on an idle session: a read every eighth of the session timeout, and
/// one at once when `warm_up` is signalled (the period then starts again).
async fn heartbeat(shared: Arc<Shared>) {
    let period = (shared.settings.session_timeout / 8).max(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shared.warm_up.notified() => {}
            _ = shared.closing.cancelled() => return,
        }
        if shared.is_closed() {
            return;
        }
        let _ = call(
            &shared,
            "/",
            None,
            |c| async move { c.check_stat("/").await },
        )
        .await;
    }
}

/// Attaches every registered watch to the new session, retrying while it lasts.
fn reattach_all(shared: &Arc<Shared>, client: &zk::Client, generation: u64) {
    let regs: Vec<Arc<WatchReg>> = lock(&shared.watches).values().cloned().collect();
    for reg in regs {
        let tasks = shared.tasks.clone();
        let (shared, client) = (shared.clone(), client.clone());
        tasks.spawn(async move {
            loop {
                match attach(&shared, &reg, &client, generation, true).await {
                    Ok(()) => return,
                    Err(e) => {
                        let moved_on = lock(&shared.current)
                            .as_ref()
                            .is_none_or(|(_, g)| *g != generation);
                        if moved_on || shared.is_closed() || reg.events_tx.is_closed() {
                            return;
                        }
                        tracing::warn!(path = %reg.path, error = %e, "re-adding a watch failed; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            _ = shared.closing.cancelled() => return,
                        }
                    }
                }
            }
        });
    }
}

/// Adds the persistent watch for `reg` on `client`.
async fn add_watch(
    shared: &Shared,
    reg: &WatchReg,
    client: &zk::Client,
) -> Result<zk::PersistentWatcher> {
    let mode = if reg.recursive {
        zk::AddWatchMode::PersistentRecursive
    } else {
        zk::AddWatchMode::Persistent
    };
    let op_timeout = shared.settings.op_timeout;
    match tokio::time::timeout(op_timeout, client.watch(&reg.path, mode)).await {
        Err(_) => Err(Error::Timeout(op_timeout)),
        Ok(r) => r.map_err(|e| map_err(e, &reg.path)),
    }
}

/// Adds the persistent watch for `reg` unless already attached for `generation`, and spawns
/// the task that forwards its events.
pub(super) async fn attach(
    shared: &Arc<Shared>,
    reg: &Arc<WatchReg>,
    client: &zk::Client,
    generation: u64,
    resync_first: bool,
) -> Result<()> {
    let mut attached = reg.attached.lock().await;
    if *attached >= generation {
        return Ok(());
    }
    let watcher = add_watch(shared, reg, client).await?;
    *attached = generation;
    shared.tasks.spawn(forward(
        shared.clone(),
        reg.clone(),
        watcher,
        generation,
        resync_first,
    ));
    Ok(())
}

/// After a reconnect in the same session, adds the watch again: zookeeper-client 0.11.2 with
/// ZooKeeper 3.8 leaves a persistent watch silent after Disconnected → SyncConnected (verified
/// here), while a fresh `addWatch` works. `None` when the session is over or the watch unwanted.
async fn rewatch(
    shared: &Shared,
    reg: &WatchReg,
    generation: u64,
) -> Option<zk::PersistentWatcher> {
    loop {
        let client = match lock(&shared.current).clone() {
            Some((c, g)) if g == generation => c,
            _ => return None,
        };
        match add_watch(shared, reg, &client).await {
            Ok(w) => return Some(w),
            Err(Error::SessionExpired | Error::Closed) => return None,
            Err(e) => {
                if shared.is_closed() || reg.events_tx.is_closed() {
                    return None;
                }
                tracing::warn!(path = %reg.path, error = %e, "re-adding a watch after reconnect failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Forwards node events; after a reconnect re-adds the watch and sends `Resync`; stops at a
/// terminal session event (never polling that watcher again) or when the `Watch` is dropped.
async fn forward(
    shared: Arc<Shared>,
    reg: Arc<WatchReg>,
    mut watcher: zk::PersistentWatcher,
    generation: u64,
    resync_first: bool,
) {
    let events_tx = &reg.events_tx;
    if resync_first && events_tx.send(WatchEvent::Resync).is_err() {
        return;
    }
    let mut disconnected = false;
    loop {
        let ev = tokio::select! {
            _ = events_tx.closed() => return,
            _ = shared.closing.cancelled() => return,
            ev = watcher.changed() => ev,
        };
        let out = match ev.event_type {
            zk::EventType::Session => match ev.session_state {
                zk::SessionState::Disconnected => {
                    disconnected = true;
                    continue;
                }
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    if !std::mem::take(&mut disconnected) {
                        continue;
                    }
                    // The new watcher is in place before the owner re-reads, so nothing is missed.
                    let Some(fresh) = rewatch(&shared, &reg, generation).await else {
                        return;
                    };
                    watcher = fresh;
                    WatchEvent::Resync
                }
                // Expired, AuthFailed, Closed: the watcher must not be polled again.
                _ => return,
            },
            zk::EventType::NodeCreated => WatchEvent::Created(ev.path),
            zk::EventType::NodeDeleted => WatchEvent::Deleted(ev.path),
            zk::EventType::NodeDataChanged => WatchEvent::DataChanged(ev.path),
            zk::EventType::NodeChildrenChanged => continue,
        };
        if events_tx.send(out).is_err() {
            return;
        }
    }
}
