//! The cluster under test and the hands that hurt it: a real ZooKeeper ensemble, three real
//! sidecars that reach every ZooKeeper node through a harness [`Proxy`] each (so a sidecar can
//! be partitioned from ZooKeeper, or ZooKeeper made silent, or the sidecar's bytes to it thrown
//! away, without root), one worker process per (sidecar, job) slot kept alive by a supervisor
//! (strict or minimal, see [`crate::worker`]), the fencing store, and a ZooKeeper client of the
//! nemesis's own for ElasticJob operations, the liveness checks and the probe of every
//! execution a worker let go of ([`World::probe_holds`]).

use crate::common::process::open_log;
use crate::common::proxy::{Mode, Proxy};
use crate::common::{Sidecar, SidecarOptions, ZooKeeper};
use crate::history::{FaultRec, History, Proc};
use crate::schedule::{Fault, Kind};
use crate::spec::{self, car_ip, wall_us, JOBS, NAMESPACE, SESSION, SIDECARS, SLOTS};
use answers::{on_armed, Arms};
use std::collections::{BTreeSet, HashSet};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use zookeeper_client::{Acls, CreateMode};

mod answers;
mod probe;

/// How the soak was started.
#[derive(Clone, Debug)]
pub struct Options {
    pub seed: u64,
    /// This program, run again for workers.
    pub exe: PathBuf,
    /// Where logs and the report go.
    pub out: PathBuf,
    pub ensemble: usize,
}

struct Slot {
    child: Option<tokio::process::Child>,
    pid: u32,
    cmd_tx: Option<mpsc::UnboundedSender<String>>,
    /// When the supervisor may start a new process (`None`: a second after an exit).
    respawn_at: Option<Instant>,
    slow_until: u64,
    hang_until: u64,
}

#[derive(Default)]
struct Net {
    partitioned: [u32; SIDECARS],
    /// Bytes from the sidecar to ZooKeeper thrown away (an answer-aimed cut).
    cut: [u32; SIDECARS],
    frozen: u32,
}

pub struct World {
    pub opts: Options,
    pub history: Arc<Mutex<History>>,
    zk: tokio::sync::Mutex<ZooKeeper>,
    zk_connect: String,
    /// `proxies[car][node]`.
    proxies: Vec<Vec<Proxy>>,
    net: Mutex<Net>,
    cars: Vec<tokio::sync::Mutex<Sidecar>>,
    car_endpoints: Vec<String>,
    car_logs: Vec<PathBuf>,
    slots: Vec<Mutex<Slot>>,
    store: String,
    ops: zookeeper_client::Client,
    stopping: AtomicBool,
    log: Mutex<std::fs::File>,
    arms: Arms,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl World {
    /// Starts ZooKeeper, the proxies, the sidecars, the store and the ops client.
    pub async fn start(opts: Options, history: Arc<Mutex<History>>) -> Arc<World> {
        let log = open_log(&opts.out.join("nemesis.log"));
        let zk = if opts.ensemble >= 2 {
            ZooKeeper::ensemble(opts.ensemble).await
        } else {
            ZooKeeper::start().await
        };
        let zk_connect = zk.connect_string();
        let mut proxies = Vec::new();
        for _ in 0..SIDECARS {
            let mut row = Vec::new();
            for node in 0..zk.len() {
                let target = SocketAddr::from(([127, 0, 0, 1], zk.client_port(node)));
                row.push(Proxy::start(target).await);
            }
            proxies.push(row);
        }
        let mut cars = Vec::new();
        for (car, row) in proxies.iter().enumerate() {
            let connect = row
                .iter()
                .map(|p| p.addr().to_string())
                .collect::<Vec<_>>()
                .join(",");
            let options = SidecarOptions {
                namespace: NAMESPACE.into(),
                session_timeout: SESSION,
                ..SidecarOptions::zk(connect, car_ip(car))
            };
            cars.push(Sidecar::start(options).await);
        }
        let store = crate::store::start(history.clone()).await;
        let ops = zookeeper_client::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&zk_connect)
            .await
            .expect("the nemesis's own ZooKeeper session")
            .chroot(format!("/{NAMESPACE}"))
            .unwrap_or_else(|_| panic!("chroot /{NAMESPACE}"));
        let slots = (0..SLOTS)
            .map(|_| {
                Mutex::new(Slot {
                    child: None,
                    pid: 0,
                    cmd_tx: None,
                    respawn_at: None,
                    slow_until: 0,
                    hang_until: 0,
                })
            })
            .collect();
        Arc::new(World {
            car_endpoints: cars.iter().map(Sidecar::endpoint).collect(),
            car_logs: cars.iter().map(|c| c.log_path().to_path_buf()).collect(),
            cars: cars.into_iter().map(tokio::sync::Mutex::new).collect(),
            zk: tokio::sync::Mutex::new(zk),
            zk_connect,
            proxies,
            net: Mutex::new(Net::default()),
            slots,
            store,
            ops,
            stopping: AtomicBool::new(false),
            log: Mutex::new(log),
            arms: Arms::default(),
            history,
            opts,
        })
    }

    /// Prints a line of the run log (time relative to the soak's start) and keeps it.
    pub fn say(&self, text: &str) {
        let t0 = lock(&self.history).t0;
        let line = if t0 == 0 {
            format!("[setup] {text}")
        } else {
            format!("[{:+8.3}s] {text}", (wall_us() as f64 - t0 as f64) / 1e6)
        };
        println!("{line}");
        let _ = writeln!(lock(&self.log), "{line}");
    }

    // ----- workers ----------------------------------------------------------------------------

    fn spawn_process(
        &self,
        args: Vec<String>,
        log_name: &str,
        proc_: Proc,
    ) -> Option<(tokio::process::Child, u32, mpsc::UnboundedSender<String>)> {
        let log = open_log(&self.opts.out.join(log_name));
        let mut command = tokio::process::Command::new(&self.opts.exe);
        command
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                self.say(&format!("cannot start a worker process: {e}"));
                return None;
            }
        };
        let pid = child.id().unwrap_or(0);
        lock(&self.history).procs.insert(pid, proc_);
        let stdout = child.stdout.take().expect("piped stdout");
        let history = self.history.clone();
        let (cmd_tx, mut cmd_rx) = mpsc::unbounded_channel::<String>();
        let (arms, go_tx) = (self.arms.clone(), cmd_tx.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(event) = line.strip_prefix("EV ") {
                    let recv = wall_us();
                    lock(&history).ingest(pid, recv, event);
                    if event.contains(r#""k":"armed""#) {
                        on_armed(&arms, pid, event, &go_tx);
                    }
                }
            }
        });
        let mut stdin = child.stdin.take().expect("piped stdin");
        tokio::spawn(async move {
            while let Some(line) = cmd_rx.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
            }
            // Dropping stdin tells the worker the nemesis is gone.
        });
        Some((child, pid, cmd_tx))
    }

    fn spawn_worker(&self, index: usize, slot: &mut Slot) {
        let (car, job) = (spec::car_of_slot(index), spec::job_of_slot(index));
        let minimal = spec::is_minimal(index);
        let mut args = vec![
            "--worker".to_string(),
            "--endpoint".into(),
            self.car_endpoints[car].clone(),
            "--job".into(),
            job.to_string(),
            "--store".into(),
            self.store.clone(),
            "--seed".into(),
            self.opts.seed.to_string(),
        ];
        if minimal {
            args.push("--minimal".into());
        }
        let proc_ = Proc {
            slot: Some(index),
            car,
            job,
            minimal,
            ..Default::default()
        };
        if let Some((child, pid, cmd_tx)) =
            self.spawn_process(args, &format!("worker-slot-{index:02}.log"), proc_)
        {
            let now = wall_us();
            if slot.slow_until > now {
                let _ = cmd_tx.send(format!("SLOW {}\n", slot.slow_until));
            }
            if slot.hang_until > now {
                let _ = cmd_tx.send(format!("HANG {}\n", slot.hang_until));
            }
            slot.child = Some(child);
            slot.pid = pid;
            slot.cmd_tx = Some(cmd_tx);
        }
    }

    /// Keeps every slot's worker running: reaps exits, starts new processes when due.
    pub async fn supervise(self: Arc<Self>) {
        while !self.stopping.load(Ordering::SeqCst) {
            for (index, slot) in self.slots.iter().enumerate() {
                let mut slot = lock(slot);
                let exited = match slot.child.as_mut() {
                    Some(child) => matches!(child.try_wait(), Ok(Some(_))),
                    None => false,
                };
                if exited {
                    if let Some(p) = lock(&self.history).procs.get_mut(&slot.pid) {
                        p.exited.get_or_insert(wall_us());
                    }
                    slot.child = None;
                    slot.cmd_tx = None;
                    slot.respawn_at
                        .get_or_insert(Instant::now() + Duration::from_secs(1));
                }
                if slot.child.is_none() && slot.respawn_at.is_none_or(|t| Instant::now() >= t) {
                    slot.respawn_at = None;
                    self.spawn_worker(index, &mut slot);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every slot's worker holds an open stream, every item of every job is
    /// assigned to one of them, and every resident item is held.
    pub async fn wait_warm(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let now = wall_us();
            // Slot locks before the history lock, never the other way round.
            let pids: Vec<u32> = self.slots.iter().map(|s| lock(s).pid).collect();
            let problem = {
                let h = lock(&self.history);
                let mut problem = None;
                for (index, pid) in pids.iter().enumerate() {
                    if !h.streams.values().any(|s| s.pid == *pid && s.open_at(now)) {
                        problem = Some(format!("slot {index} (pid {pid}) has no open stream"));
                    }
                }
                for (job, spec) in JOBS.iter().enumerate() {
                    let assigned: BTreeSet<i32> = h
                        .streams
                        .values()
                        .filter(|s| s.job == job && s.open_at(now))
                        .flat_map(|s| s.items_at(now).to_vec())
                        .collect();
                    if assigned.len() != spec.items as usize {
                        problem = Some(format!("{} has items {assigned:?} assigned", spec.name));
                    }
                }
                let unheld = crate::resident::unheld(&h, now);
                if !unheld.is_empty() {
                    problem = Some(format!("resident items {unheld:?} are not held"));
                }
                problem
            };
            match problem {
                None => return Ok(()),
                Some(p) if Instant::now() >= deadline => return Err(p),
                Some(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    // ----- faults -----------------------------------------------------------------------------

    /// Injects one fault (and undoes it when its time is up), recording it in the history.
    pub async fn inject(self: Arc<Self>, fault: Fault) {
        let start = wall_us();
        let index = {
            let mut h = lock(&self.history);
            h.faults.push(FaultRec {
                id: fault.id,
                kind: fault.kind.clone(),
                start,
                end: None,
                note: String::new(),
                victim: None,
                fired: None,
            });
            h.faults.len() - 1
        };
        self.say(&format!("#{:02} start {}", fault.id, fault.kind));
        let (note, victim) = if fault.kind.aimed_at_answer() {
            self.clone().act_on_answer(&fault.kind, index).await
        } else {
            self.clone().act(&fault.kind).await
        };
        {
            let mut h = lock(&self.history);
            let rec = &mut h.faults[index];
            rec.end = Some(wall_us());
            rec.note = note.clone();
            if rec.victim.is_none() {
                rec.victim = victim;
            }
        }
        self.say(&format!(
            "#{:02} end   {}: {note}",
            fault.id,
            fault.kind.name()
        ));
    }

    async fn set_server(&self, path: &str, value: &str) -> String {
        self.zk_op(|| async {
            self.ops
                .set_data(path, value.as_bytes(), None)
                .await
                .map(|_| value.to_string())
        })
        .await
    }

    async fn act(self: Arc<Self>, kind: &Kind) -> (String, Option<u32>) {
        let sleep = tokio::time::sleep;
        match kind {
            Kind::WorkerKill {
                slot,
                restart_after,
            } => {
                let pid = {
                    let mut s = lock(&self.slots[*slot]);
                    let pid = s.pid;
                    let alive = s
                        .child
                        .as_mut()
                        .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
                    if !alive {
                        return ("no live process to kill".into(), None);
                    }
                    let at = wall_us();
                    if let Some(p) = lock(&self.history).procs.get_mut(&pid) {
                        p.killed = Some(at);
                    }
                    if let Some(c) = s.child.as_mut() {
                        let _ = c.start_kill();
                    }
                    s.respawn_at = Some(Instant::now() + *restart_after);
                    pid
                };
                sleep(*restart_after).await;
                // Done when the slot has its new process.
                let deadline = Instant::now() + Duration::from_secs(5);
                while lock(&self.slots[*slot]).pid == pid && Instant::now() < deadline {
                    sleep(Duration::from_millis(20)).await;
                }
                let new = lock(&self.slots[*slot]).pid;
                (format!("pid {pid} killed; pid {new} started"), Some(pid))
            }
            Kind::WorkerPause { slot, hold } => {
                let pid = lock(&self.slots[*slot]).pid;
                signal(pid, "STOP");
                // The pause begins once every thread has stopped: what the worker does before
                // then is not done while it was paused.
                tokio::task::spawn_blocking(move || crate::common::process::wait_stopped(pid))
                    .await
                    .expect("waiting for the worker's threads to stop");
                if let Some(p) = lock(&self.history).procs.get_mut(&pid) {
                    p.pauses.push((wall_us(), None));
                }
                sleep(*hold).await;
                signal(pid, "CONT");
                if let Some(p) = lock(&self.history).procs.get_mut(&pid) {
                    if let Some(last) = p.pauses.last_mut() {
                        last.1 = Some(wall_us());
                    }
                }
                (format!("pid {pid} stopped and continued"), Some(pid))
            }
            Kind::WorkerSlow { slot, hold } | Kind::WorkerHang { slot, hold } => {
                let until = wall_us() + hold.as_micros() as u64;
                let verb = if matches!(kind, Kind::WorkerSlow { .. }) {
                    "SLOW"
                } else {
                    "HANG"
                };
                let pid = {
                    let mut s = lock(&self.slots[*slot]);
                    if verb == "SLOW" {
                        s.slow_until = until;
                    } else {
                        s.hang_until = until;
                    }
                    if let Some(tx) = &s.cmd_tx {
                        let _ = tx.send(format!("{verb} {until}\n"));
                    }
                    s.pid
                };
                sleep(*hold).await;
                (format!("pid {pid} {verb} until then"), Some(pid))
            }
            Kind::JoinCancel {
                car,
                job,
                delays_ms,
            } => {
                let delays = delays_ms
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                let args = vec![
                    "--joiner".to_string(),
                    "--endpoint".into(),
                    self.car_endpoints[*car].clone(),
                    "--job".into(),
                    job.to_string(),
                    "--delays".into(),
                    delays,
                ];
                let proc_ = Proc {
                    slot: None,
                    car: *car,
                    job: *job,
                    ..Default::default()
                };
                let Some((mut child, pid, _tx)) = self.spawn_process(args, "joiners.log", proc_)
                else {
                    return ("could not start the joiner".into(), None);
                };
                let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
                if status.is_err() {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
                if let Some(p) = lock(&self.history).procs.get_mut(&pid) {
                    p.exited = Some(wall_us());
                }
                let outcomes: Vec<String> = {
                    let h = lock(&self.history);
                    h.joins
                        .iter()
                        .filter(|j| j.pid == pid)
                        .map(|j| format!("{}ms (at {}): {}", j.delay_ms, h.rel(j.at), j.outcome))
                        .collect()
                };
                (
                    format!(
                        "joiner pid {pid} ({}@-@{pid}): {}",
                        car_ip(*car),
                        outcomes.join("; ")
                    ),
                    Some(pid),
                )
            }
            Kind::SidecarKill { car, restart_after } => {
                self.cars[*car].lock().await.kill();
                sleep(*restart_after).await;
                self.cars[*car].lock().await.restart().await;
                ("killed; restarted and accepting connections".into(), None)
            }
            Kind::SidecarPauseLong { car, hold } | Kind::SidecarPauseShort { car, hold } => {
                self.cars[*car].lock().await.pause();
                sleep(*hold).await;
                self.cars[*car].lock().await.resume();
                ("stopped and continued".into(), None)
            }
            Kind::SidecarTerm { car, restart_after } => {
                let mut sidecar = self.cars[*car].lock().await;
                sidecar.terminate();
                let began = Instant::now();
                let status = sidecar.wait_exit(Duration::from_secs(15)).await;
                let drained = began.elapsed();
                drop(sidecar);
                sleep(*restart_after).await;
                self.cars[*car].lock().await.restart().await;
                (
                    match status {
                        Some(s) => format!("drained and exited ({s}) in {drained:.2?}; restarted"),
                        None => "still running 15 s after SIGTERM: killed; restarted".into(),
                    },
                    None,
                )
            }
            Kind::ZkKill {
                leader,
                restart_after,
            } => {
                let (victim, role) = {
                    let zk = self.zk.lock().await;
                    let current = zk.leader().await;
                    match (current, leader) {
                        (Some(l), true) => (l, "leader"),
                        (Some(l), false) => (
                            (0..zk.len())
                                .find(|i| *i != l && zk.pid(*i).is_some())
                                .unwrap_or((l + 1) % zk.len()),
                            "follower",
                        ),
                        (None, _) => (0, "no leader was elected; node 0"),
                    }
                };
                self.zk.lock().await.kill(victim);
                sleep(*restart_after).await;
                self.zk.lock().await.start_no_wait(victim);
                let deadline = Instant::now() + Duration::from_secs(60);
                let mode = loop {
                    let mode = self.zk.lock().await.mode(victim).await;
                    if let Some(m) = mode.filter(|m| m == "leader" || m == "follower") {
                        break m;
                    }
                    if Instant::now() >= deadline {
                        break "not serving after 60 s".into();
                    }
                    sleep(Duration::from_millis(200)).await;
                };
                (
                    format!("node {victim} ({role}) killed; back as {mode}"),
                    None,
                )
            }
            Kind::Partition { car, hold } | Kind::SessionExpiry { car, hold } => {
                lock(&self.net).partitioned[*car] += 1;
                self.apply_net();
                sleep(*hold).await;
                lock(&self.net).partitioned[*car] -= 1;
                self.apply_net();
                (
                    "partitioned from every ZooKeeper node, then healed".into(),
                    None,
                )
            }
            Kind::ZkSilent { hold } => {
                lock(&self.net).frozen += 1;
                self.apply_net();
                sleep(*hold).await;
                lock(&self.net).frozen -= 1;
                self.apply_net();
                (
                    "every sidecar's ZooKeeper connections frozen, then delivered".into(),
                    None,
                )
            }
            Kind::Trigger { job } => {
                let name = JOBS[*job].name;
                let result = self
                    .zk_op(|| async {
                        let ids = self
                            .ops
                            .list_children(&format!("/{name}/instances"))
                            .await?;
                        let mode = CreateMode::Persistent.with_acls(Acls::anyone_all());
                        match self
                            .ops
                            .create(&format!("/{name}/trigger"), b"", &mode)
                            .await
                        {
                            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                            Err(e) => return Err(e),
                        }
                        for id in &ids {
                            match self
                                .ops
                                .create(&format!("/{name}/trigger/{id}"), b"", &mode)
                                .await
                            {
                                Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                                Err(e) => return Err(e),
                            }
                        }
                        Ok(ids.join(", "))
                    })
                    .await;
                (format!("trigger/ for {}", result), None)
            }
            Kind::DisableItem { job, item, hold } => {
                let path = format!("/{}/sharding/{item}/disabled", JOBS[*job].name);
                let on = self
                    .zk_op(|| async {
                        let mode = CreateMode::Persistent.with_acls(Acls::anyone_all());
                        match self.ops.create(&path, b"", &mode).await {
                            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {
                                Ok("created".into())
                            }
                            Err(e) => Err(e),
                        }
                    })
                    .await;
                sleep(*hold).await;
                let off = self
                    .zk_op(|| async {
                        match self.ops.delete(&path, None).await {
                            Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok("deleted".into()),
                            Err(e) => Err(e),
                        }
                    })
                    .await;
                (format!("{path}: {on}, then {off}"), None)
            }
            Kind::DisableServer { job, car, hold } => {
                let path = format!("/{}/servers/{}", JOBS[*job].name, car_ip(*car));
                let on = self.set_server(&path, "DISABLED").await;
                sleep(*hold).await;
                let off = self.set_server(&path, "ENABLED").await;
                (format!("{path}: {on}, then {off}"), None)
            }
            Kind::RemoteShutdown { slot } => {
                let pid = lock(&self.slots[*slot]).pid;
                let instance = {
                    let h = lock(&self.history);
                    h.streams
                        .values()
                        .filter(|s| s.pid == pid && s.ended.is_none())
                        .max_by_key(|s| s.gen)
                        .map(|s| s.instance.clone())
                };
                let Some(instance) = instance else {
                    return (format!("pid {pid} has no open stream"), Some(pid));
                };
                let path = format!(
                    "/{}/instances/{instance}",
                    JOBS[spec::job_of_slot(*slot)].name
                );
                let result = self
                    .zk_op(|| async {
                        match self.ops.delete(&path, None).await {
                            Ok(()) => Ok("deleted".into()),
                            Err(zookeeper_client::Error::NoNode) => Ok("already gone".into()),
                            Err(e) => Err(e),
                        }
                    })
                    .await;
                (format!("{path}: {result}"), Some(pid))
            }
            Kind::AnswerCut { .. } | Kind::AnswerFreeze { .. } => {
                unreachable!("answer-aimed faults act in act_on_answer")
            }
            Kind::HostPause { .. } => unreachable!("a host pause is seen, never injected"),
        }
    }

    /// A ZooKeeper operation of the nemesis, tried up to five times (ZooKeeper may be faulted).
    async fn zk_op<F, Fut>(&self, op: F) -> String
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<String, zookeeper_client::Error>>,
    {
        let mut last = String::new();
        for _ in 0..5 {
            match tokio::time::timeout(Duration::from_secs(3), op()).await {
                Ok(Ok(done)) => return done,
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "timed out".into(),
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        format!("FAILED ({last})")
    }

    /// Sets every proxy's mode from the faults in force: a partition of its sidecar wins over a
    /// cut of its bytes, which wins over a silent ZooKeeper, which wins over forwarding.
    fn apply_net(&self) {
        let net = lock(&self.net);
        for (car, row) in self.proxies.iter().enumerate() {
            let mode = if net.partitioned[car] > 0 {
                Mode::Partition
            } else if net.cut[car] > 0 {
                Mode::DropFromClient
            } else if net.frozen > 0 {
                Mode::Freeze
            } else {
                Mode::Forward
            };
            for proxy in row {
                if proxy.mode() != mode {
                    proxy.set_mode(mode);
                }
            }
        }
    }

    // ----- liveness ---------------------------------------------------------------------------

    /// What keeps the cluster from being live now (empty: live). `since`: runs must have
    /// completed after this instant.
    pub async fn liveness_problems(&self, since: u64) -> Vec<String> {
        let mut problems = Vec::new();
        let now = wall_us();
        let (live, ran): (Vec<HashSet<String>>, Vec<Vec<bool>>) = {
            let h = lock(&self.history);
            let live = (0..JOBS.len())
                .map(|job| {
                    h.streams
                        .values()
                        .filter(|s| s.job == job && s.ended.is_none())
                        .filter(|s| {
                            h.procs
                                .get(&s.pid)
                                .is_some_and(|p| p.gone().is_none() && !p.paused_during(now, now))
                        })
                        .map(|s| s.instance.clone())
                        .collect()
                })
                .collect();
            let ran = JOBS
                .iter()
                .enumerate()
                .map(|(job, spec)| {
                    (0..spec.items)
                        .map(|item| {
                            h.runs.iter().any(|r| {
                                r.job == job && r.item == item && r.start >= since && r.completed()
                            })
                        })
                        .collect()
                })
                .collect();
            (live, ran)
        };
        for (job, spec) in JOBS.iter().enumerate() {
            let name = spec.name;
            let read = async {
                let instances: HashSet<String> = self
                    .ops
                    .list_children(&format!("/{name}/instances"))
                    .await?
                    .into_iter()
                    .collect();
                let mut items = Vec::new();
                for item in 0..spec.items {
                    let mut nodes = Vec::new();
                    for node in ["instance", "running", "failover", "failovering", "disabled"] {
                        match self
                            .ops
                            .get_data(&format!("/{name}/sharding/{item}/{node}"))
                            .await
                        {
                            Ok((data, _)) => {
                                nodes.push((node, String::from_utf8_lossy(&data).into_owned()))
                            }
                            Err(zookeeper_client::Error::NoNode) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    items.push(nodes);
                }
                Ok::<_, zookeeper_client::Error>((instances, items))
            };
            let (instances, items) = match tokio::time::timeout(Duration::from_secs(3), read).await
            {
                Ok(Ok(found)) => found,
                Ok(Err(e)) => {
                    problems.push(format!("{name}: cannot read ZooKeeper: {e}"));
                    continue;
                }
                Err(_) => {
                    problems.push(format!("{name}: ZooKeeper did not answer within 3 s"));
                    continue;
                }
            };
            let mut ghosts: Vec<&String> = instances.difference(&live[job]).collect();
            ghosts.sort();
            if !ghosts.is_empty() {
                problems.push(format!(
                    "{name}: instances/ has ghosts {ghosts:?} (live streams: {:?})",
                    live[job]
                ));
            }
            let mut missing: Vec<&String> = live[job].difference(&instances).collect();
            missing.sort();
            if !missing.is_empty() {
                problems.push(format!(
                    "{name}: live streams {missing:?} are missing from instances/"
                ));
            }
            for (item, nodes) in items.iter().enumerate() {
                let owner = nodes
                    .iter()
                    .find(|(n, _)| *n == "instance")
                    .map(|(_, d)| d.clone());
                match owner {
                    Some(o) if live[job].contains(&o) => {}
                    Some(o) => problems.push(format!(
                        "{name}: sharding/{item}/instance = {o:?}, not a live instance"
                    )),
                    None => problems.push(format!("{name}: sharding/{item}/instance is missing")),
                }
                for (node, data) in nodes {
                    if matches!(*node, "running" | "failover" | "failovering")
                        && !data.is_empty()
                        && !live[job].contains(data)
                    {
                        problems.push(format!("{name}: sharding/{item}/{node} names {data:?}, which is not a live instance"));
                    }
                    if *node == "disabled" {
                        problems.push(format!("{name}: sharding/{item}/disabled is still set"));
                    }
                }
                // A resident item never completes: whether it is held again is
                // `resident::held_again`'s business, with its own bound.
                if !ran[job][item] && !spec.resident {
                    problems.push(format!(
                        "{name}: item {item} has not completed a run since the last fault"
                    ));
                }
            }
        }
        for (car, endpoint) in self.car_endpoints.iter().enumerate() {
            let check = async {
                let channel = tonic::transport::Endpoint::from_shared(endpoint.clone())
                    .map_err(|e| e.to_string())?
                    .connect()
                    .await
                    .map_err(|e| e.to_string())?;
                let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
                let reply = client
                    .check(tonic_health::pb::HealthCheckRequest {
                        service: String::new(),
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<i32, String>(reply.into_inner().status)
            };
            match tokio::time::timeout(Duration::from_secs(2), check).await {
                Ok(Ok(1)) => {}
                Ok(Ok(status)) => problems.push(format!(
                    "sidecar {} health status {status}, not SERVING",
                    car_ip(car)
                )),
                Ok(Err(e)) => {
                    problems.push(format!("sidecar {} health check failed: {e}", car_ip(car)))
                }
                Err(_) => problems.push(format!("sidecar {} health check timed out", car_ip(car))),
            }
        }
        problems
    }

    // ----- the end ----------------------------------------------------------------------------

    /// Stops the workers (no more reports), copies the logs into the output directory.
    pub async fn stop_workers(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for slot in &self.slots {
            let mut s = lock(slot);
            s.respawn_at = Some(Instant::now() + Duration::from_secs(3600));
            let pid = s.pid;
            if let Some(child) = s.child.as_mut() {
                signal(pid, "CONT");
                let _ = child.start_kill();
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    pub async fn copy_logs(&self) {
        for (car, path) in self.car_logs.iter().enumerate() {
            let _ = std::fs::copy(
                path,
                self.opts
                    .out
                    .join(format!("sidecar-{car}-{}.log", car_ip(car))),
            );
        }
        let zk = self.zk.lock().await;
        for i in 0..zk.len() {
            let _ = std::fs::write(self.opts.out.join(format!("zookeeper-{i}.log")), zk.log(i));
        }
    }

    /// Kills every process of the cluster (also on Ctrl-C): workers, sidecars, ZooKeeper.
    pub async fn teardown(&self) {
        self.stop_workers().await;
        for car in &self.cars {
            if let Ok(mut sidecar) = car.try_lock() {
                sidecar.kill();
            }
        }
        if let Ok(mut zk) = self.zk.try_lock() {
            for i in 0..zk.len() {
                zk.kill(i);
            }
        }
    }

    /// The ZooKeeper connect string of the real nodes.
    pub fn zk_connect(&self) -> &str {
        &self.zk_connect
    }
}
