//! The per-job actor: one task per job with local instances on this sidecar.
//!
//! It owns the job's registry watch and its [`TreeCache`], the job's local instances (worker
//! streams) and their executions. Every input — a watch event, a worker command, a cron fire —
//! updates the cache or the local state and then runs [`JobActor::reconcile`], which rebuilds
//! the [`JobView`] and acts on what the pure functions of `sharding`, `execution` and
//! `election` decide. Being level-triggered, it needs no per-event logic and recovers from
//! lost events by reloading the cache (`WatchEvent::Resync`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::execution::{self, Execution, Finished, ItemOutcome};
use super::lease::EventSender;
use super::view::JobView;
use super::{election, failover, sharding, CoordError, ExecutionRecord, Shared};
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::instance::{instance_yaml, task_id};
use crate::elasticjob::paths::{JobPaths, ServerStatus};
use crate::proto::{self, worker_event::Event, TriggerSource, WorkerEvent};
use crate::registry::{
    CreateMode, Error as RegError, Op, SessionState, TreeCache, Watch, WatchEvent,
};
use crate::schedule::{CronSchedule, Fire};

/// How often executions are checked for timeouts and self-fencing.
const TICK: Duration = Duration::from_millis(100);

/// A command for a job actor.
pub enum JobCmd {
    Join {
        instance_id: String,
        /// Boxed: the config is large and most commands carry none.
        config: Option<Box<(JobConfiguration, JobExtras)>>,
        overwrite: bool,
        sink: EventSender,
        stream_key: u64,
        stop: CancellationToken,
        reply: oneshot::Sender<Result<JobConfiguration, CoordError>>,
    },
    Leave {
        instance_id: String,
        stream_key: u64,
        reason: String,
    },
    Answer {
        instance_id: String,
        execution_id: String,
        outcomes: Vec<(i32, ItemOutcome)>,
        reply: oneshot::Sender<Result<(), CoordError>>,
    },
    /// Graceful shutdown: tell every local worker, remove every local instance.
    Drain {
        reason: String,
        reply: oneshot::Sender<()>,
    },
}

/// One worker stream of this job on this sidecar.
struct Local {
    sink: EventSender,
    stream_key: u64,
    /// Cancelled when the instance leaves: ends the worker's stream once its events are read.
    stop: CancellationToken,
    /// The last assignment sent: items, leader flag, epoch.
    sent: Option<(Vec<i32>, bool, i64)>,
    /// The execution in flight, if any.
    busy: Option<String>,
    /// The session generation in which its instance node was created.
    generation: u64,
    /// Whether the cache has shown its instance node (so its absence means removal).
    seen: bool,
}

/// What becomes of the nodes of revoked items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// The items failed (timeout): remove `running`, as after a failure.
    Failed,
    /// The worker stopped without finishing: fail the items over (failover on) or free them.
    Abandoned,
    /// The registry cannot be written now; the reconcile after reconnecting releases them.
    Later,
}

pub(super) struct JobActor {
    name: String,
    paths: JobPaths,
    shared: Arc<Shared>,
    cmd_tx: mpsc::Sender<JobCmd>,
    cmd_rx: mpsc::Receiver<JobCmd>,
    fire_tx: mpsc::Sender<Fire>,
    fire_rx: mpsc::Receiver<Fire>,
    timer_key: String,
    watch: Option<Watch>,
    cache: Option<TreeCache>,
    view: JobView,
    locals: BTreeMap<String, Local>,
    executions: HashMap<String, Execution>,
    schedule: Option<(String, String)>,
    generation: u64,
    retry_at: Option<Instant>,
    /// Whether one of the local instances leads the job (as last told to the observer).
    leading: bool,
    /// When the job's subtree was last read whole.
    last_reload: Instant,
    /// Whether the cache changed since `view` was built.
    view_stale: bool,
}

fn event(e: Event) -> Result<WorkerEvent, tonic::Status> {
    Ok(WorkerEvent { event: Some(e) })
}

fn current_generation(state: &SessionState) -> Option<u64> {
    match state {
        SessionState::Connected { generation, .. } => Some(*generation),
        _ => None,
    }
}

impl JobActor {
    pub(super) fn new(
        name: String,
        shared: Arc<Shared>,
        cmd_tx: mpsc::Sender<JobCmd>,
        cmd_rx: mpsc::Receiver<JobCmd>,
    ) -> Self {
        let (fire_tx, fire_rx) = mpsc::channel(4);
        let timer_key = format!("{name}#{}", shared.next_key());
        JobActor {
            paths: JobPaths::new(&name),
            name,
            shared,
            cmd_tx,
            cmd_rx,
            fire_tx,
            fire_rx,
            timer_key,
            watch: None,
            cache: None,
            view: JobView::default(),
            locals: BTreeMap::new(),
            executions: HashMap::new(),
            schedule: None,
            generation: 0,
            retry_at: None,
            leading: false,
            last_reload: Instant::now(),
            view_stale: true,
        }
    }

    /// Runs the actor until its last local instance has left.
    pub(super) async fn run(mut self) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let retry = self.retry_at;
            tokio::select! {
                _ = tick.tick() => self.on_tick().await,
                cmd = self.cmd_rx.recv() => match cmd {
                    Some(cmd) => self.on_cmd(cmd).await,
                    None => return,
                },
                ev = next_event(&mut self.watch) => match ev {
                    Some(ev) => self.on_watch(ev).await,
                    None => {
                        warn!(job = %self.name, "registry watch ended; reloading");
                        self.watch = None;
                        self.retry_at = Some(Instant::now() + Duration::from_millis(200));
                    }
                },
                Some(fire) = self.fire_rx.recv() => {
                    self.on_fire(TriggerSource::Cron, fire.fire_time).await;
                }
                _ = sleep_until(retry) => {
                    self.retry_at = None;
                    self.resync().await;
                }
            }
            if self.locals.is_empty() && self.try_retire() {
                return;
            }
        }
    }

    /// Leaves the sidecar's job table when idle. Returns false if a command raced in.
    fn try_retire(&mut self) -> bool {
        let mut jobs = self.shared.jobs.lock().expect("job table poisoned");
        if !self.cmd_rx.is_empty() {
            return false;
        }
        if jobs
            .get(&self.name)
            .is_some_and(|tx| tx.same_channel(&self.cmd_tx))
        {
            jobs.remove(&self.name);
        }
        drop(jobs);
        let mut executions = self
            .shared
            .executions
            .lock()
            .expect("execution table poisoned");
        for id in self.executions.keys() {
            executions.remove(id);
        }
        drop(executions);
        self.shared.timer.cancel(&self.timer_key);
        debug!(job = %self.name, "job actor retired: no local instances left");
        true
    }

    async fn on_cmd(&mut self, cmd: JobCmd) {
        match cmd {
            JobCmd::Join {
                instance_id,
                config,
                overwrite,
                sink,
                stream_key,
                stop,
                reply,
            } => {
                let result = self
                    .join(
                        instance_id,
                        config.map(|c| *c),
                        overwrite,
                        sink,
                        stream_key,
                        stop,
                    )
                    .await;
                let _ = reply.send(result);
                self.reconcile().await;
            }
            JobCmd::Leave {
                instance_id,
                stream_key,
                reason,
            } => {
                if self
                    .locals
                    .get(&instance_id)
                    .is_some_and(|l| l.stream_key == stream_key)
                {
                    self.leave(&instance_id, &reason).await;
                    self.reconcile().await;
                }
            }
            JobCmd::Answer {
                instance_id,
                execution_id,
                outcomes,
                reply,
            } => {
                let result = self.answer(&instance_id, &execution_id, outcomes).await;
                let _ = reply.send(result);
            }
            JobCmd::Drain { reason, reply } => {
                for id in self.locals.keys().cloned().collect::<Vec<_>>() {
                    self.shut_down_instance(&id, &reason).await;
                }
                let _ = reply.send(());
            }
        }
    }

    async fn on_watch(&mut self, ev: WatchEvent) {
        let mut events = vec![ev];
        // Drain what is already queued so a burst (a reshard multi-op) costs one reconcile.
        while events.len() < 256 {
            match self.watch.as_mut().and_then(Watch::try_next) {
                Some(ev) => events.push(ev),
                None => break,
            }
        }
        for ev in &events {
            if let Err(e) = self.apply(ev).await {
                warn!(job = %self.name, error = %e, "could not refresh the job cache; retrying");
                self.retry_at = Some(Instant::now() + Duration::from_millis(200));
                return;
            }
        }
        self.reconcile().await;
    }

    /// Applies a registry event to the cache (also used for our own writes, so the cache
    /// reads them back at once).
    async fn apply(&mut self, ev: &WatchEvent) -> Result<(), RegError> {
        self.view_stale = true;
        match self.cache.as_mut() {
            Some(cache) => cache.apply(&self.shared.registry, ev).await,
            None => Ok(()),
        }
    }

    async fn apply_ops(&mut self, ops: &[Op]) {
        for op in ops {
            let ev = match op {
                Op::Create { path, .. } => WatchEvent::Created(path.clone()),
                Op::SetData { path, .. } => WatchEvent::DataChanged(path.clone()),
                Op::Delete { path, .. } => WatchEvent::Deleted(path.clone()),
                Op::Check { .. } => continue,
            };
            if self.apply(&ev).await.is_err() {
                self.retry_at = Some(Instant::now() + Duration::from_millis(200));
            }
        }
    }

    /// Reloads the cache (and the watch if it was lost), then reconciles.
    async fn resync(&mut self) {
        if self.locals.is_empty() {
            return;
        }
        let reg = self.shared.registry.clone();
        if self.watch.is_none() {
            match reg.watch_recursive(&self.paths.root()).await {
                Ok(w) => self.watch = Some(w),
                Err(e) => {
                    warn!(job = %self.name, error = %e, "cannot watch the job; retrying");
                    self.retry_at = Some(Instant::now() + Duration::from_secs(1));
                    return;
                }
            }
        }
        if let Err(e) = self.apply(&WatchEvent::Resync).await {
            warn!(job = %self.name, error = %e, "cannot reload the job; retrying");
            self.retry_at = Some(Instant::now() + Duration::from_secs(1));
            return;
        }
        self.reconcile().await;
    }

    // ----- joining and leaving -------------------------------------------------------------

    async fn join(
        &mut self,
        instance_id: String,
        config: Option<(JobConfiguration, JobExtras)>,
        overwrite: bool,
        sink: EventSender,
        stream_key: u64,
        stop: CancellationToken,
    ) -> Result<JobConfiguration, CoordError> {
        if self.locals.contains_key(&instance_id) {
            return Err(CoordError::AlreadyExists(format!(
                "instance {instance_id} already has a live stream for job {}; pass another pid or instance_id",
                self.name
            )));
        }
        if self.cache.is_none() {
            self.set_up(config.as_ref(), overwrite).await?;
        } else if let Some((config, extras)) = config.as_ref().filter(|_| overwrite) {
            self.write_config(config, extras).await?;
        }
        let reg = self.shared.registry.clone();
        let generation = current_generation(&reg.session().borrow()).unwrap_or(self.generation);
        let path = self.paths.instance(&instance_id);
        let data = instance_yaml(&instance_id, &self.shared.ip);
        match reg.create(&path, data.as_bytes(), CreateMode::Ephemeral).await {
            Ok(_) => {}
            Err(RegError::NodeExists(_)) => {
                return Err(CoordError::AlreadyExists(format!(
                    "instance {instance_id} of job {} is already registered by another process; pass another pid or instance_id",
                    self.name
                )))
            }
            Err(e) => return Err(e.into()),
        }
        self.apply(&WatchEvent::Created(path)).await?;
        self.refresh_view();
        let effective = self.view.config.clone().ok_or_else(|| {
            CoordError::FailedPrecondition(format!(
                "the config of job {} in the registry is unreadable: {}",
                self.name,
                self.view.config_error.clone().unwrap_or_default()
            ))
        })?;
        let registered = proto::Registered {
            instance_id: instance_id.clone(),
            config: Some(crate::api::convert::to_proto(&effective, &self.view.extras)),
        };
        let _ = sink.try_send(event(Event::Registered(registered)));
        self.locals.insert(
            instance_id.clone(),
            Local {
                sink: sink.clone(),
                stream_key,
                stop,
                sent: None,
                busy: None,
                generation,
                seen: true,
            },
        );
        self.push_assignment(&instance_id);
        self.shared.leases.add(stream_key, sink);
        info!(job = %self.name, instance = %instance_id, "worker subscribed");
        self.shared.observer.worker(&self.name, true);
        Ok(effective)
    }

    /// First local instance of the job: config, root, server node, watch, cache, schedule.
    async fn set_up(
        &mut self,
        config: Option<&(JobConfiguration, JobExtras)>,
        overwrite: bool,
    ) -> Result<(), CoordError> {
        let reg = self.shared.registry.clone();
        let existing = reg.get(&self.paths.config()).await?;
        match (existing, config) {
            (None, None) => {
                return Err(CoordError::NotFound(format!(
                    "job {} does not exist; subscribe with a config to create it",
                    self.name
                )))
            }
            (None, Some((config, extras))) => self.write_config(config, extras).await?,
            (Some(_), Some((config, extras))) if overwrite => {
                self.write_config(config, extras).await?
            }
            (Some(node), _) => {
                JobConfiguration::from_yaml(&node.data).map_err(|e| {
                    CoordError::FailedPrecondition(format!(
                        "the config of job {} in the registry is unreadable: {e}",
                        self.name
                    ))
                })?;
            }
        }
        let disabled = match reg.get(&self.paths.config()).await? {
            Some(node) => JobConfiguration::from_yaml(&node.data)
                .map(|c| c.disabled)
                .unwrap_or(false),
            None => false,
        };
        let status = if disabled {
            ServerStatus::Disabled
        } else {
            ServerStatus::Enabled
        };
        self.persist(
            &self.paths.server(&self.shared.ip),
            status.as_str().as_bytes(),
        )
        .await?;
        reg.ensure_path(&self.paths.instances()).await?;
        let watch = reg.watch_recursive(&self.paths.root()).await?;
        let cache = TreeCache::load(&reg, &self.paths.root()).await?;
        self.watch = Some(watch);
        self.cache = Some(cache);
        self.generation = current_generation(&reg.session().borrow()).unwrap_or(0);
        self.refresh_view();
        self.update_schedule();
        Ok(())
    }

    /// Writes `config` (and an empty job root if there is none), as ElasticJob's
    /// `ConfigurationService.setUpJobConfiguration` does; the root data is never rewritten.
    async fn write_config(
        &mut self,
        config: &JobConfiguration,
        extras: &JobExtras,
    ) -> Result<(), CoordError> {
        let reg = self.shared.registry.clone();
        match reg
            .create(&self.paths.root(), b"", CreateMode::Persistent)
            .await
        {
            Ok(_) | Err(RegError::NodeExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
        self.persist(&self.paths.config(), config.to_yaml().as_bytes())
            .await?;
        self.persist(&self.paths.shardcar(), extras.to_yaml().as_bytes())
            .await
    }

    /// ElasticJob's `persist`: create (parents included) or overwrite.
    async fn persist(&self, path: &str, data: &[u8]) -> Result<(), CoordError> {
        let reg = &self.shared.registry;
        match reg.set(path, data, None).await {
            Ok(_) => return Ok(()),
            Err(RegError::NoNode(_)) => {}
            Err(e) => return Err(e.into()),
        }
        if let Some((parent, _)) = path.rsplit_once('/') {
            if !parent.is_empty() {
                reg.ensure_path(parent).await?;
            }
        }
        match reg.create(path, data, CreateMode::Persistent).await {
            Ok(_) => Ok(()),
            Err(RegError::NodeExists(_)) => reg
                .set(path, data, None)
                .await
                .map(|_| ())
                .map_err(Into::into),
            Err(e) => Err(e.into()),
        }
    }

    /// A worker stream ended: remove its instance (and its in-flight execution) at once.
    async fn leave(&mut self, instance_id: &str, reason: &str) {
        let Some(local) = self.locals.remove(instance_id) else {
            return;
        };
        self.shared.leases.remove(local.stream_key);
        local.stop.cancel();
        let mut ops = vec![Op::delete(self.paths.instance(instance_id))];
        if let Some(exec_id) = local.busy {
            if let Some(exec) = self.executions.remove(&exec_id) {
                let pending = exec.pending();
                ops.extend(failover::release_ops(
                    &self.view,
                    &self.paths,
                    instance_id,
                    &pending,
                ));
                self.remember(
                    &exec_id,
                    instance_id,
                    Some(format!("worker left: {reason}")),
                );
                info!(job = %self.name, execution = %exec_id, instance = %instance_id, items = ?pending,
                      "execution abandoned: its worker left");
            }
        }
        if self
            .view
            .leader
            .as_ref()
            .is_some_and(|(id, _)| id == instance_id)
        {
            ops.push(Op::delete(self.paths.leader_election_instance()));
        }
        self.commit_or_each(ops).await;
        info!(job = %self.name, instance = %instance_id, reason, "worker left");
        self.shared.observer.worker(&self.name, false);
        self.observe_leadership();
    }

    /// Commits `ops` atomically; if that fails (the cache was stale), applies each on its own,
    /// ignoring nodes that are already gone or already there.
    async fn commit_or_each(&mut self, ops: Vec<Op>) {
        let reg = self.shared.registry.clone();
        if ops.is_empty() {
            return;
        }
        self.ensure_parents(&ops).await;
        if let Err(e) = reg.multi(ops.clone()).await {
            debug!(job = %self.name, error = %e, "multi-op failed; applying its operations one by one");
            for op in &ops {
                let result = match op {
                    Op::Create { path, data, mode } => {
                        reg.create(path, data, *mode).await.map(|_| ())
                    }
                    Op::SetData {
                        path,
                        data,
                        version,
                    } => reg.set(path, data, *version).await.map(|_| ()),
                    Op::Delete { path, version } => reg.delete(path, *version).await,
                    Op::Check { .. } => Ok(()),
                };
                match result {
                    Ok(()) | Err(RegError::NoNode(_)) | Err(RegError::NodeExists(_)) => {}
                    Err(e) => {
                        warn!(job = %self.name, error = %e, "registry write failed; will resync");
                        self.retry_at = Some(Instant::now() + Duration::from_millis(500));
                    }
                }
            }
        }
        self.apply_ops(&ops).await;
    }

    /// Creates the missing parents of the nodes `ops` creates (e.g. `leader/failover/items`).
    async fn ensure_parents(&self, ops: &[Op]) {
        let Some(cache) = self.cache.as_ref() else {
            return;
        };
        for op in ops {
            let Op::Create { path, .. } = op else {
                continue;
            };
            let Some((parent, _)) = path.rsplit_once('/') else {
                continue;
            };
            let created_here = ops
                .iter()
                .any(|o| matches!(o, Op::Create { path, .. } if path == parent));
            if !parent.is_empty() && !created_here && !cache.contains(parent) {
                if let Err(e) = self.shared.registry.ensure_path(parent).await {
                    warn!(job = %self.name, path = parent, error = %e, "cannot create a parent node");
                }
            }
        }
    }

    // ----- reconcile ----------------------------------------------------------------------

    /// Rebuilds the view from the cache, if the cache changed since the last build (a view
    /// build parses the config YAML: not something to repeat for every step of a fire).
    fn refresh_view(&mut self) {
        if !self.view_stale {
            return;
        }
        if let Some(cache) = self.cache.as_ref() {
            self.view = JobView::from_cache(cache, &self.paths);
        }
        self.view_stale = false;
    }
    /// Rebuilds the view and acts on it: re-registration after a new session, election,
    /// resharding, failover, trigger-once requests, remote shutdown, assignments.
    async fn reconcile(&mut self) {
        if self.cache.is_none() || self.locals.is_empty() {
            return;
        }
        let state = self.shared.registry.session().borrow().clone();
        let Some(generation) = current_generation(&state) else {
            return; // not connected: act once the session is back (the watch sends Resync)
        };
        if generation != self.generation {
            self.reregister(generation).await;
        }
        self.refresh_view();
        self.update_schedule();
        self.detect_remote_shutdown().await;
        if self.locals.is_empty() {
            return;
        }
        self.release_stale_running().await;
        self.lead().await;
        self.take_failover().await;
        self.run_trigger_requests().await;
        let ids: Vec<String> = self.locals.keys().cloned().collect();
        for id in ids {
            self.push_assignment(&id);
        }
        self.observe_leadership();
    }

    /// Tells the observer when leadership of the job moves to or away from this sidecar.
    fn observe_leadership(&mut self) {
        let leading = self
            .view
            .leader
            .as_ref()
            .is_some_and(|(id, _)| self.locals.contains_key(id));
        if leading != self.leading {
            self.leading = leading;
            self.shared.observer.leadership(&self.name, leading);
        }
    }

    /// After session expiry: a new session owns nothing; create the server node and every
    /// local instance again (DESIGN.md §2 rule 6 — expiry is not shutdown).
    async fn reregister(&mut self, generation: u64) {
        info!(job = %self.name, generation, "new registry session: registering local instances again");
        let ip = self.shared.ip.clone();
        let server = self.paths.server(&ip);
        let status = if self.view.server_enabled(&ip) {
            ServerStatus::Enabled
        } else {
            ServerStatus::Disabled
        };
        if let Err(e) = self.persist(&server, status.as_str().as_bytes()).await {
            warn!(job = %self.name, error = %e, "cannot write the server node");
        }
        let reg = self.shared.registry.clone();
        for id in self.locals.keys().cloned().collect::<Vec<_>>() {
            let path = self.paths.instance(&id);
            match reg
                .create(
                    &path,
                    instance_yaml(&id, &ip).as_bytes(),
                    CreateMode::Ephemeral,
                )
                .await
            {
                Ok(_) | Err(RegError::NodeExists(_)) => {
                    if let Some(local) = self.locals.get_mut(&id) {
                        local.generation = generation;
                    }
                }
                Err(e) => {
                    warn!(job = %self.name, instance = %id, error = %e, "cannot register the instance again");
                    self.retry_at = Some(Instant::now() + Duration::from_secs(1));
                    return;
                }
            }
        }
        self.generation = generation;
        let _ = self.apply(&WatchEvent::Resync).await;
    }

    /// A local instance whose node disappeared in its own session was shut down remotely
    /// (ElasticJob's console deletes `instances/{id}`): tell the worker and end its stream.
    async fn detect_remote_shutdown(&mut self) {
        let mut gone = Vec::new();
        for (id, local) in self.locals.iter_mut() {
            let present = self.view.instances.contains_key(id);
            if present {
                local.seen = true;
            } else if local.seen && local.generation == self.generation {
                gone.push(id.clone());
            }
        }
        for id in gone {
            self.shut_down_instance(&id, "instance removed from the registry (remote shutdown)")
                .await;
        }
    }

    /// Sends `Shutdown` to a local worker, then removes its instance and ends its stream.
    async fn shut_down_instance(&mut self, instance_id: &str, reason: &str) {
        if let Some(local) = self.locals.get(instance_id) {
            let shutdown = proto::Shutdown {
                reason: reason.to_string(),
            };
            let _ = local.sink.try_send(event(Event::Shutdown(shutdown)));
        }
        info!(job = %self.name, instance = %instance_id, reason, "shutting down worker");
        self.leave(instance_id, reason).await;
    }

    /// Election, abdication and eager resharding.
    async fn lead(&mut self) {
        let ip = self.shared.ip.clone();
        let decision = election::decide(&self.view, self.locals.keys(), &ip);
        let reg = self.shared.registry.clone();
        match decision {
            election::Decision::Elect(id) => match election::elect(&reg, &self.paths, &id).await {
                Ok(true) => {
                    info!(job = %self.name, leader = %id, "became leader");
                    self.apply(&WatchEvent::Created(self.paths.leader_election_instance()))
                        .await
                        .ok();
                    self.refresh_view();
                }
                Ok(false) => {}
                Err(e) => {
                    warn!(job = %self.name, error = %e, "election failed; retrying");
                    self.retry_at = Some(Instant::now() + Duration::from_millis(500));
                    return;
                }
            },
            election::Decision::Abdicate(version) => {
                info!(job = %self.name, "own server disabled: giving up leadership");
                let path = self.paths.leader_election_instance();
                match reg.delete(&path, Some(version)).await {
                    Ok(()) | Err(RegError::NoNode(_)) | Err(RegError::BadVersion(_)) => {}
                    Err(e) => warn!(job = %self.name, error = %e, "cannot give up leadership"),
                }
                self.apply(&WatchEvent::Deleted(path)).await.ok();
                return;
            }
            election::Decision::Lead(_) | election::Decision::Follow => {}
        }
        let Some((leader, version)) = self.view.leader.clone() else {
            return;
        };
        if !self.locals.contains_key(&leader) {
            return;
        }
        let cleanup = failover::cleanup_ops(&self.view, &self.paths);
        if !cleanup.is_empty() {
            info!(job = %self.name, ops = cleanup.len(), "clearing execution nodes of instances that are gone");
            self.commit_or_each(cleanup).await;
            self.refresh_view();
        }
        if let Some(plan) = sharding::plan(&self.view, &self.name) {
            let ops = sharding::commit_ops(&self.view, &self.paths, &plan, version);
            match reg.multi(ops.clone()).await {
                Ok(()) => {
                    info!(job = %self.name, reason = plan.reason, owners = ?plan.owners, "resharded");
                    self.apply_ops(&ops).await;
                    self.refresh_view();
                }
                Err(e) => {
                    debug!(job = %self.name, error = %e, "reshard did not commit; reloading");
                    self.retry_at = Some(Instant::now() + Duration::from_millis(100));
                }
            }
        }
    }

    /// `running` nodes naming a local instance that has no execution of them (revoked while
    /// cut off from the registry, or left by an earlier life of this sidecar): free them, or
    /// flag them for failover when failover is on, since they did not complete.
    async fn release_stale_running(&mut self) {
        let mut ops = Vec::new();
        for id in self.locals.keys() {
            let live: Vec<i32> = self
                .executions
                .values()
                .filter(|e| &e.instance_id == id)
                .flat_map(|e| e.items.iter().copied())
                .collect();
            let stale: Vec<i32> = self
                .view
                .items
                .iter()
                .filter(|(i, it)| {
                    it.running.as_ref().is_some_and(|(owner, _)| owner == id) && !live.contains(i)
                })
                .map(|(i, _)| *i)
                .collect();
            ops.extend(failover::release_ops(&self.view, &self.paths, id, &stale));
        }
        if !ops.is_empty() {
            info!(job = %self.name, ops = ops.len(), "releasing items left running by revoked executions");
            self.commit_or_each(ops).await;
            self.refresh_view();
        }
    }

    /// Periodic reconcile, self-fencing and execution timeouts.
    async fn on_tick(&mut self) {
        let interval = self
            .view
            .config
            .as_ref()
            .map_or(0, |c| c.reconcile_interval_minutes);
        if interval > 0 && self.last_reload.elapsed() >= Duration::from_secs(60 * interval as u64) {
            // ElasticJob's reconcile, as a safety net: reload the whole subtree (in case a
            // watch event was ever lost) and act on it.
            self.last_reload = Instant::now();
            self.resync().await;
        }
        if self.executions.is_empty() {
            return;
        }
        let silent = self.shared.registry.last_reply().elapsed();
        if silent > self.shared.session_timeout * 2 / 3 {
            let reason = format!(
                "self-fencing: no answer from ZooKeeper for {} ms (2/3 of the session timeout)",
                silent.as_millis()
            );
            let ids: Vec<String> = self.executions.keys().cloned().collect();
            for id in ids {
                self.revoke(&id, &reason, Release::Later).await;
            }
            return;
        }
        // A worker whose lease ran out stopped its work by contract: its execution is void.
        let lapsed: Vec<String> = self
            .executions
            .values()
            .filter(|e| {
                self.locals
                    .get(&e.instance_id)
                    .is_some_and(|l| self.shared.leases.lapses(l.stream_key) > e.lease_lapses)
            })
            .map(|e| e.id.clone())
            .collect();
        let connected = self.shared.leases.may_grant();
        for id in lapsed {
            let release = if connected {
                Release::Abandoned
            } else {
                Release::Later
            };
            self.revoke(
                &id,
                "the worker's lease ran out before the execution was answered",
                release,
            )
            .await;
        }
        let expired: Vec<(String, Duration)> = self
            .executions
            .values()
            .filter_map(|e| {
                e.timeout
                    .filter(|t| e.started.elapsed() > *t)
                    .map(|t| (e.id.clone(), t))
            })
            .collect();
        for (id, timeout) in expired {
            let reason = format!(
                "execution timeout: not answered within {} s",
                timeout.as_secs()
            );
            self.revoke(&id, &reason, Release::Failed).await;
        }
    }

    /// Takes back the unanswered items of an execution: the worker gets `Revoke`, later
    /// answers are refused, and their nodes are released as `release` says.
    async fn revoke(&mut self, execution_id: &str, reason: &str, release: Release) {
        let Some(exec) = self.executions.get_mut(execution_id) else {
            return;
        };
        let pending = exec.pending();
        for i in &pending {
            exec.outcomes
                .insert(*i, ItemOutcome::Revoked(reason.to_string()));
        }
        let (instance_id, monitored) = (exec.instance_id.clone(), exec.monitored);
        if let Some(local) = self.locals.get(&instance_id) {
            let revoke = proto::Revoke {
                items: pending.clone(),
                reason: reason.to_string(),
            };
            let _ = local.sink.try_send(event(Event::Revoke(revoke)));
        }
        warn!(job = %self.name, execution = %execution_id, instance = %instance_id, items = ?pending, reason,
              "items revoked");
        self.shared.observer.revoked(&self.name, &pending, reason);
        let ops = match release {
            Release::Failed => {
                failover::finish_ops(&self.view, &self.paths, &instance_id, &pending, monitored)
            }
            Release::Abandoned => {
                failover::release_ops(&self.view, &self.paths, &instance_id, &pending)
            }
            Release::Later => Vec::new(),
        };
        self.commit_or_each(ops).await;
        self.finish(execution_id).await;
    }

    /// Sends an `Assignment` to a local instance if its items, leader flag or epoch changed.
    fn push_assignment(&mut self, instance_id: &str) {
        let ip = self.shared.ip.clone();
        let items = self.view.items_of(instance_id, &ip);
        let leader = self
            .view
            .leader
            .as_ref()
            .is_some_and(|(id, _)| id == instance_id);
        let epoch = self.view.epoch();
        let params = self.item_parameters();
        let Some(local) = self.locals.get_mut(instance_id) else {
            return;
        };
        let next = (items, leader, epoch);
        if local.sent.as_ref() == Some(&next) {
            return;
        }
        let assignment = proto::Assignment {
            items: next.0.iter().map(|i| shard_item(*i, &params)).collect(),
            leader,
            epoch,
        };
        debug!(job = %self.name, instance = %instance_id, items = ?next.0, leader, epoch, "assignment");
        let _ = local.sink.try_send(event(Event::Assignment(assignment)));
        local.sent = Some(next);
    }

    fn item_parameters(&self) -> BTreeMap<i32, String> {
        self.view
            .config
            .as_ref()
            .and_then(|c| c.item_parameters().ok())
            .unwrap_or_default()
    }

    fn update_schedule(&mut self) {
        let wanted = self
            .view
            .config
            .as_ref()
            .map(|c| {
                (
                    c.cron.clone().unwrap_or_default(),
                    c.time_zone.clone().unwrap_or_default(),
                )
            })
            .filter(|(cron, _)| !cron.trim().is_empty());
        if wanted == self.schedule {
            return;
        }
        match &wanted {
            Some((cron, tz)) => match CronSchedule::parse(cron, tz) {
                Ok(schedule) => {
                    info!(job = %self.name, cron = %cron, time_zone = %tz, "scheduled");
                    self.shared.timer.schedule(
                        self.timer_key.clone(),
                        schedule,
                        self.fire_tx.clone(),
                    );
                }
                Err(e) => {
                    warn!(job = %self.name, cron = %cron, error = %e, "the job's cron cannot be used; the job will not fire");
                    self.shared.timer.cancel(&self.timer_key);
                }
            },
            None => self.shared.timer.cancel(&self.timer_key),
        }
        self.schedule = wanted;
    }

    // ----- executions ---------------------------------------------------------------------

    /// A fire (cron, or a trigger-once request): start an execution on every idle local
    /// instance with runnable items; flag `misfire` for busy ones.
    async fn on_fire(&mut self, source: TriggerSource, fire_time: chrono::DateTime<chrono::Utc>) {
        if self.cache.is_none() {
            return;
        }
        if !self.shared.leases.may_grant() {
            warn!(job = %self.name, "fire skipped: the registry session is not healthy");
            return;
        }
        self.refresh_view();
        let max_diff = self
            .view
            .config
            .as_ref()
            .map_or(-1, |c| c.max_time_diff_seconds);
        if max_diff >= 0 {
            if let Err(e) = self.check_clock(max_diff).await {
                warn!(job = %self.name, error = %e, "fire skipped");
                return;
            }
        }
        let ip = self.shared.ip.clone();
        let ids: Vec<String> = self.locals.keys().cloned().collect();
        for id in ids {
            let busy = self.locals.get(&id).is_some_and(|l| l.busy.is_some());
            let plan = execution::plan_fire(&self.view, &id, &ip, busy);
            if !plan.misfire.is_empty() {
                debug!(job = %self.name, instance = %id, items = ?plan.misfire, "still running: misfire");
                self.shared.observer.misfired(&self.name, &plan.misfire);
                let ops: Vec<Op> = plan
                    .misfire
                    .iter()
                    .map(|i| {
                        Op::create(
                            self.paths.item_misfire(*i),
                            Vec::new(),
                            CreateMode::Persistent,
                        )
                    })
                    .collect();
                self.commit_or_each(ops).await;
            }
            if !plan.run.is_empty() {
                self.start_execution(&id, plan.run, source, fire_time).await;
            }
        }
    }

    /// ElasticJob's `maxTimeDiffSeconds` check (elasticjob-layout.md §5.9): touch
    /// `systemTime/current` and compare its `mtime` with this host's clock.
    async fn check_clock(&mut self, max_seconds: i32) -> Result<(), CoordError> {
        let path = self.paths.system_time();
        let reg = self.shared.registry.clone();
        let stat = match reg.set(&path, b"", None).await {
            Ok(stat) => stat,
            Err(RegError::NoNode(_)) => {
                self.persist(&path, b"").await?;
                reg.exists(&path)
                    .await?
                    .ok_or_else(|| RegError::NoNode(path.clone()))?
            }
            Err(e) => return Err(e.into()),
        };
        let local = chrono::Utc::now().timestamp_millis();
        let diff = (local - stat.mtime).abs();
        if diff > i64::from(max_seconds) * 1000 {
            return Err(CoordError::FailedPrecondition(format!(
                "this host's clock differs from ZooKeeper's by {diff} ms, more than maxTimeDiffSeconds ({max_seconds} s) allows; \
                 synchronise the clock (NTP) or raise maxTimeDiffSeconds"
            )));
        }
        Ok(())
    }

    /// Creates the `running` nodes (one multi-op), then sends the `Trigger`.
    pub(super) async fn start_execution(
        &mut self,
        instance_id: &str,
        items: Vec<i32>,
        source: TriggerSource,
        fire_time: chrono::DateTime<chrono::Utc>,
    ) {
        let Some(config) = self.view.config.clone() else {
            return;
        };
        let reg = self.shared.registry.clone();
        let monitored = config.monitor_execution;
        let mut tokens = BTreeMap::new();
        if monitored {
            let mode = if config.failover {
                CreateMode::Persistent
            } else {
                CreateMode::Ephemeral
            };
            let ops: Vec<Op> = items
                .iter()
                .map(|i| Op::Create {
                    path: self.paths.item_running(*i),
                    data: instance_id.as_bytes().to_vec(),
                    mode,
                })
                .collect();
            if let Err(e) = reg.multi(ops.clone()).await {
                warn!(job = %self.name, instance = %instance_id, items = ?items, error = %e, "cannot mark items running; fire skipped");
                self.retry_at = Some(Instant::now() + Duration::from_millis(100));
                return;
            }
            // Reading our writes back into the cache gives each `running` node's czxid: the
            // fencing token (one multi-op, so one zxid for all its items).
            self.apply_ops(&ops).await;
            if let Some(cache) = self.cache.as_ref() {
                for i in &items {
                    if let Some(node) = cache.get(&self.paths.item_running(*i)) {
                        tokens.insert(*i, node.stat.czxid);
                    }
                }
            }
        } else {
            for i in &items {
                if let Some((_, stat)) = self.view.items.get(i).and_then(|it| it.owner.as_ref()) {
                    tokens.insert(*i, stat.mzxid);
                }
            }
        }
        let params = self.item_parameters();
        let execution_id = execution::new_execution_id();
        let trigger = proto::Trigger {
            execution_id: execution_id.clone(),
            task_id: task_id(&self.name, &items, instance_id),
            items: items.iter().map(|i| shard_item(*i, &params)).collect(),
            job_parameter: config.job_parameter.clone(),
            sharding_total_count: config.sharding_total_count,
            source: source as i32,
            fire_time: Some(prost_types::Timestamp {
                seconds: fire_time.timestamp(),
                nanos: fire_time.timestamp_subsec_nanos() as i32,
            }),
            fencing_tokens: tokens.iter().map(|(k, v)| (*k, *v)).collect(),
        };
        let sent = self
            .locals
            .get(instance_id)
            .map(|l| l.sink.try_send(event(Event::Trigger(trigger))).is_ok())
            .unwrap_or(false);
        if !sent {
            warn!(job = %self.name, instance = %instance_id, "worker stream full or gone: releasing it");
            if monitored {
                let ops = items
                    .iter()
                    .map(|i| Op::delete(self.paths.item_running(*i)))
                    .collect();
                self.commit_or_each(ops).await;
            }
            self.leave(instance_id, "event stream full or closed").await;
            return;
        }
        info!(job = %self.name, execution = %execution_id, instance = %instance_id, items = ?items,
              source = source.as_str_name(), "execution started");
        let timeout = match self.view.extras.execution_timeout_seconds {
            0 => None,
            s => Some(Duration::from_secs(u64::from(s))),
        };
        let lease_lapses = self
            .locals
            .get(instance_id)
            .map_or(0, |l| self.shared.leases.lapses(l.stream_key));
        let latency = (chrono::Utc::now() - fire_time)
            .to_std()
            .unwrap_or_default();
        self.shared
            .observer
            .trigger_sent(&self.name, source, &items, latency);
        let exec = Execution {
            started_at: std::time::SystemTime::now(),
            lease_lapses,
            timeout,
            id: execution_id.clone(),
            instance_id: instance_id.to_string(),
            source,
            items: items.iter().copied().collect(),
            outcomes: BTreeMap::new(),
            fencing_tokens: tokens,
            started: Instant::now(),
            monitored,
        };
        self.executions.insert(execution_id.clone(), exec);
        self.shared
            .executions
            .lock()
            .expect("execution table poisoned")
            .insert(execution_id.clone(), self.name.clone());
        if let Some(local) = self.locals.get_mut(instance_id) {
            local.busy = Some(execution_id);
        }
    }

    /// `Complete` / `ReportFailure` for items of an execution.
    async fn answer(
        &mut self,
        instance_id: &str,
        execution_id: &str,
        outcomes: Vec<(i32, ItemOutcome)>,
    ) -> Result<(), CoordError> {
        let Some(exec) = self.executions.get(execution_id) else {
            let remembered = self
                .shared
                .finished
                .lock()
                .expect("finished table poisoned")
                .reply(execution_id, instance_id);
            return remembered.unwrap_or_else(|| Err(CoordError::unknown_execution(execution_id)));
        };
        if exec.instance_id != instance_id {
            return Err(CoordError::PermissionDenied(format!(
                "execution {execution_id} belongs to instance {}, not {instance_id}",
                exec.instance_id
            )));
        }
        for (item, _) in &outcomes {
            if !exec.items.contains(item) {
                return Err(CoordError::InvalidArgument {
                    field: "items".into(),
                    message: format!(
                        "item {item} is not part of execution {execution_id} (its items are {:?})",
                        exec.items
                    ),
                });
            }
            if let Some(ItemOutcome::Revoked(reason)) = exec.outcomes.get(item) {
                return Err(CoordError::FailedPrecondition(format!(
                    "item {item} of execution {execution_id} was taken back ({reason}); its answer is refused"
                )));
            }
        }
        let fresh: Vec<(i32, ItemOutcome)> = outcomes
            .into_iter()
            .filter(|(i, _)| !exec.outcomes.contains_key(i))
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let items: Vec<i32> = fresh.iter().map(|(i, _)| *i).collect();
        let ops =
            failover::finish_ops(&self.view, &self.paths, instance_id, &items, exec.monitored);
        self.commit_or_each(ops).await;
        let exec = self
            .executions
            .get_mut(execution_id)
            .expect("checked above");
        for (item, outcome) in fresh {
            if let ItemOutcome::Failed(error) = &outcome {
                warn!(job = %self.name, execution = %execution_id, item, error = %error, "item failed");
            }
            exec.outcomes.insert(item, outcome);
        }
        if exec.is_done() {
            self.finish(execution_id).await;
        }
        Ok(())
    }

    /// The last item of an execution was answered: free the instance, then run a misfire
    /// catch-up or pick up failed-over items, as ElasticJob does after a run.
    async fn finish(&mut self, execution_id: &str) {
        let Some(exec) = self.executions.remove(execution_id) else {
            return;
        };
        let failed = exec
            .outcomes
            .values()
            .filter(|o| matches!(o, ItemOutcome::Failed(_)))
            .count();
        info!(job = %self.name, execution = %execution_id, instance = %exec.instance_id, items = ?exec.items,
              source = exec.source.as_str_name(), failed, elapsed_ms = exec.started.elapsed().as_millis() as u64,
              "execution finished");
        self.shared.observer.execution_finished(&ExecutionRecord {
            job: self.name.clone(),
            execution_id: exec.id.clone(),
            instance_id: exec.instance_id.clone(),
            source: exec.source,
            started_at: exec.started_at,
            duration: exec.started.elapsed(),
            items: exec.outcomes.clone(),
        });
        let revoked = exec.outcomes.values().find_map(|o| match o {
            ItemOutcome::Revoked(reason) => Some(reason.clone()),
            _ => None,
        });
        self.remember(execution_id, &exec.instance_id, revoked);
        if let Some(local) = self.locals.get_mut(&exec.instance_id) {
            local.busy = None;
        }
        if !self.shared.leases.may_grant() {
            return; // no registry writes while cut off; reconcile catches up later
        }
        self.refresh_view();
        let catch_up = execution::catch_up(&self.view, &exec.items);
        if !catch_up.is_empty() {
            let ops: Vec<Op> = catch_up
                .iter()
                .map(|i| Op::delete(self.paths.item_misfire(*i)))
                .collect();
            self.commit_or_each(ops).await;
            self.refresh_view();
            let ip = self.shared.ip.clone();
            let plan = execution::plan_fire(&self.view, &exec.instance_id, &ip, false);
            if !plan.run.is_empty() && self.shared.leases.may_grant() {
                self.start_execution(
                    &exec.instance_id,
                    plan.run,
                    TriggerSource::Misfire,
                    chrono::Utc::now(),
                )
                .await;
                return;
            }
        }
        self.take_failover().await;
    }

    /// Remembers a finished execution in the sidecar, so later answers get a precise reply.
    fn remember(&mut self, execution_id: &str, instance_id: &str, revoked: Option<String>) {
        self.shared
            .executions
            .lock()
            .expect("execution table poisoned")
            .remove(execution_id);
        let finished = Finished {
            instance_id: instance_id.to_string(),
            revoked,
        };
        self.shared
            .finished
            .lock()
            .expect("finished table poisoned")
            .insert(execution_id, finished);
    }

    /// ElasticJob's `failoverIfNecessary` for every idle local instance: take one flagged
    /// item each under the failover latch and run it with source FAILOVER.
    async fn take_failover(&mut self) {
        let Some(config) = self.view.config.as_ref() else {
            return;
        };
        if !config.failover
            || self.view.failover_items.is_empty()
            || !self.shared.leases.may_grant()
        {
            return;
        }
        let ip = self.shared.ip.clone();
        let idle: Vec<String> = self
            .locals
            .iter()
            .filter(|(id, l)| {
                l.busy.is_none()
                    && self.view.server_enabled(&ip)
                    && self.view.instances.contains_key(*id)
            })
            .map(|(id, _)| id.clone())
            .collect();
        let reg = self.shared.registry.clone();
        for id in idle {
            match failover::claim(&reg, &self.paths, &id).await {
                Ok(Some(item)) => {
                    info!(job = %self.name, instance = %id, item, "took over a failed item");
                    self.shared.observer.failover_taken(&self.name, item);
                    let ops = failover::claim_events(&self.paths, item);
                    self.apply_ops(&ops).await;
                    self.refresh_view();
                    self.start_execution(
                        &id,
                        vec![item],
                        TriggerSource::Failover,
                        chrono::Utc::now(),
                    )
                    .await;
                }
                Ok(None) => break,
                Err(e) => {
                    warn!(job = %self.name, error = %e, "failover claim failed; retrying");
                    self.retry_at = Some(Instant::now() + Duration::from_millis(500));
                    break;
                }
            }
        }
    }

    /// `trigger/{id}` nodes for local instances (ElasticJob's trigger-once): delete the node
    /// and run now, unless the instance is busy (then the request is dropped, as in Java).
    async fn run_trigger_requests(&mut self) {
        let requests: Vec<String> = self
            .view
            .triggers
            .iter()
            .filter(|id| self.locals.contains_key(*id))
            .cloned()
            .collect();
        if requests.is_empty() {
            return;
        }
        let reg = self.shared.registry.clone();
        for id in requests {
            let path = self.paths.trigger(&id);
            match reg.delete(&path, None).await {
                Ok(()) => {}
                Err(RegError::NoNode(_)) => continue,
                Err(e) => {
                    warn!(job = %self.name, error = %e, "cannot take a trigger request");
                    continue;
                }
            }
            self.apply(&WatchEvent::Deleted(path)).await.ok();
            self.refresh_view();
            if self.locals.get(&id).is_some_and(|l| l.busy.is_some()) {
                info!(job = %self.name, instance = %id, "trigger request dropped: the instance is busy");
                continue;
            }
            let ip = self.shared.ip.clone();
            let plan = execution::plan_fire(&self.view, &id, &ip, false);
            if !plan.run.is_empty() && self.shared.leases.may_grant() {
                self.start_execution(&id, plan.run, TriggerSource::Manual, chrono::Utc::now())
                    .await;
            }
        }
    }
}

fn shard_item(i: i32, params: &BTreeMap<i32, String>) -> proto::ShardItem {
    proto::ShardItem {
        item: i,
        parameter: params.get(&i).cloned().unwrap_or_default(),
    }
}

async fn next_event(watch: &mut Option<Watch>) -> Option<WatchEvent> {
    match watch {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
