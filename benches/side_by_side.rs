//! The same scenario on real ElasticJob-Lite 3.0.4 JVMs and on shardcar, side by side on one real
//! ZooKeeper (each round of each system in a namespace of its own), ending in a markdown table
//! with ratios. It prints figures; it asserts nothing (timings on shared machines are noisy).
//!
//! Run: `cargo bench --bench side_by_side` (release build of the sidecar and of this program).
//! Needs Java 17, Maven (the ElasticJob member, `benches/elasticjob/`, is built here with
//! `mvn -q -f benches/elasticjob/pom.xml package` when its jar is missing or older than its
//! sources) and Debian's `zookeeper` package. Environment: `SIDE_BY_SIDE_ROUNDS` (default 5),
//! `SIDE_BY_SIDE_ONLY` (`elasticjob` or `shardcar`: run one system only),
//! `SIDE_BY_SIDE_MAX_CONCURRENT` (the shardcar workers' `max_concurrent_executions`, default 1),
//! `SIDE_BY_SIDE_JAVA_OPTS` (JVM options for the ElasticJob members, default none: the JVM's
//! defaults), `SHARDCAR_TEST_LOG_DIR` (where the sidecars' and the JVMs' logs and ZooKeeper's
//! transaction logs are kept; default a fresh directory under the temp dir, printed at the end).
//! The rounds of the two systems alternate (ElasticJob 1, shardcar 1, ElasticJob 2, …), so a
//! load that comes and goes on a shared machine falls on both.
//!
//! The scenario, for both systems, with a 10 s ZooKeeper session: two members, one job of 4 items
//! firing every 5 s (`0/5 * * * * ?`), each item held 3 s, failover on.
//! - member A starts alone and holds all 4 items; member B joins: the time until B holds items
//!   (ElasticJob: from the JVM's spawn to its first item START, ElasticJob reshards at the next
//!   fire; shardcar: from the worker's `Subscribe` to its first `Assignment` with items, and to
//!   its first `Trigger`);
//! - ZooKeeper transactions per execution of the 4 items (the server's zxid over 10 s of steady
//!   fires, both members running; the window starts a session timeout after the previous round,
//!   whose sessions' expiry would be counted otherwise), the write operations and version checks
//!   inside them (ZooKeeper's transaction log, read with its `TxnLogToolkit`), and each member's
//!   RSS and threads (/proc/<pid>/status);
//! - a member is SIGKILLed 1 s into its items: the time until those items START as FAILOVER on
//!   the other member (ElasticJob: the JVM; shardcar: the worker process, its sidecar living, and
//!   then the whole member, sidecar and worker);
//! - SIGTERM to the surviving member 1 s into its items: the time until the process exits
//!   (ElasticJob: the JVM; shardcar: the sidecar), at most 20 s; until its instance and leader
//!   nodes are gone from ZooKeeper; and until every ephemeral node of it is gone.
//!
//! A member of shardcar is a sidecar and a worker: A's worker is a process of its own (a child
//! worker, this program re-executed) that the program answers for after holding each item 3 s;
//! B's worker is in this process (a strict `TestWorker` that works 3 s under its lease).
#![allow(
    clippy::disallowed_methods,
    reason = "tests, benchmarks and examples run against real time and real processes"
)]

#[path = "../tests/failure/child.rs"]
mod child;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "shared/measure.rs"]
mod measure;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::zookeeper::four_letter_word;
use common::{job_config, subscribe_request, Sidecar, SidecarOptions, TestWorker, ZooKeeper};
use measure::{percentile, proc_field, zxid};
use shardcar::proto::subscribe_response::Event;
use shardcar::proto::{SubscribeRequest, Trigger, TriggerSource};

const JOB: &str = "sbs";
const CRON: &str = "0/5 * * * * ?";
const PERIOD_MS: f64 = 5000.0;
const ITEMS: i32 = 4;
const HOLD: Duration = Duration::from_secs(3);
const SESSION: Duration = Duration::from_secs(10);
/// How far into its items a member is SIGKILLed or SIGTERMed.
const INTO_ITEM: Duration = Duration::from_secs(1);
/// The steady window over which ZooKeeper transactions are counted: two whole fires.
const WINDOW_MS: f64 = 2.0 * PERIOD_MS;
const EXIT_CAP: Duration = Duration::from_secs(20);
const COMMAND: &str = "cargo bench --bench side_by_side";

// ---------------------------------------------------------------------------------------------
// Figures

mod fig {
    pub const READY: &str = "ready";
    pub const HOLDS: &str = "holds";
    pub const FIRST_RUN: &str = "first-run";
    pub const SPAWN_FIRST_RUN: &str = "spawn-first-run";
    pub const TXNS: &str = "txns";
    pub const OWN_TXNS: &str = "own-txns";
    pub const WRITE_OPS: &str = "write-ops";
    pub const CHECK_OPS: &str = "check-ops";
    pub const RSS_MEMBER: &str = "rss-member";
    pub const RSS_SIDECAR: &str = "rss-sidecar";
    pub const RSS_WORKER: &str = "rss-worker";
    pub const THREADS_MEMBER: &str = "threads-member";
    pub const THREADS_SIDECAR: &str = "threads-sidecar";
    pub const THREADS_WORKER: &str = "threads-worker";
    pub const FO_MEMBER_FIRST: &str = "failover-member-first";
    pub const FO_MEMBER: &str = "failover-member-all";
    pub const FO_WORKER_FIRST: &str = "failover-worker-first";
    pub const FO_WORKER: &str = "failover-worker-all";
    pub const SIGTERM: &str = "sigterm";
    pub const SIGTERM_GONE: &str = "sigterm-gone";
    pub const SIGTERM_ALL_GONE: &str = "sigterm-all-gone";
}

/// One system's samples (by figure) and what could not be measured.
#[derive(Default)]
struct Side {
    samples: BTreeMap<&'static str, Vec<f64>>,
    /// SIGTERMs after which the process had not exited within the cap.
    no_exit: usize,
    /// SIGTERMs after which the member's instance or leader node was still there at the cap.
    not_gone: usize,
    /// SIGTERMs after which an ephemeral node of the member was still there at the cap.
    not_all_gone: usize,
    /// SIGTERMs sent 1 s into an item, and how many of those items ended completed first.
    drained: (usize, usize),
    notes: Vec<String>,
    /// Set when the system could not be run at all.
    unavailable: Option<String>,
}

impl Side {
    fn add(&mut self, figure: &'static str, value: f64) {
        self.samples.entry(figure).or_default().push(value);
    }

    fn note(&mut self, note: String) {
        eprintln!("side_by_side: NOTE {note}");
        self.notes.push(note);
    }

    fn stats(&self, figure: &str) -> Option<Stats> {
        let mut samples = self.samples.get(figure)?.clone();
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
        Some(Stats {
            n: samples.len(),
            median: percentile(&samples, 50.0),
            p99: percentile(&samples, 99.0),
            min: samples[0],
            max: samples[samples.len() - 1],
        })
    }
}

struct Stats {
    n: usize,
    median: f64,
    p99: f64,
    min: f64,
    max: f64,
}

// ---------------------------------------------------------------------------------------------
// Clocks, ZooKeeper and /proc

/// The host's wall clock in epoch milliseconds (the ElasticJob members print theirs).
fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

async fn sleep_until_wall(at_ms: f64) {
    let left = at_ms - wall_ms();
    if left > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(left / 1000.0)).await;
    }
}

/// The next instant 4 s after a fire (every item of it has ended, the next fire is 1 s away),
/// at least 0.5 s from now.
fn next_window_start() -> f64 {
    let now = wall_ms();
    let mut start = (now / PERIOD_MS).floor() * PERIOD_MS + 4000.0;
    while start < now + 500.0 {
        start += PERIOD_MS;
    }
    start
}

/// `t` relative to `from`, in ms, negative when earlier.
fn signed_ms(from: Instant, t: Instant) -> f64 {
    if t >= from {
        ms_since(from, t)
    } else {
        -ms_since(t, from)
    }
}

fn ms_since(earlier: Instant, later: Instant) -> f64 {
    later.saturating_duration_since(earlier).as_secs_f64() * 1000.0
}

/// `VmRSS` (KiB) and `Threads` of a process, from /proc/<pid>/status.
fn proc_status(pid: u32) -> Option<(f64, f64)> {
    Some((proc_field(pid, "VmRSS:")?, proc_field(pid, "Threads:")?))
}

/// The 1, 5 and 15 minute load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn mib(kib: f64) -> f64 {
    kib / 1024.0
}

// ---------------------------------------------------------------------------------------------
// ElasticJob members

/// Where the ElasticJob member's jar and class path are, built if needed.
struct Java {
    classpath: String,
    opts: Vec<String>,
    version: String,
}

fn newest_mtime(path: &Path) -> Option<SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_file() {
        return meta.modified().ok();
    }
    let mut newest = None;
    for entry in std::fs::read_dir(path).ok()?.flatten() {
        if let Some(t) = newest_mtime(&entry.path()) {
            newest = newest.max(Some(t));
        }
    }
    newest
}

/// Builds `benches/elasticjob` with Maven unless its jar is newer than its sources.
fn build_elasticjob_member() -> Result<Java, String> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/benches/elasticjob"));
    let jar = dir.join("target/elasticjob-bench.jar");
    let classpath_file = dir.join("target/classpath.txt");
    let sources = newest_mtime(&dir.join("src")).max(newest_mtime(&dir.join("pom.xml")));
    let built = newest_mtime(&jar).min(newest_mtime(&classpath_file));
    if built.is_none() || sources > built {
        eprintln!("side_by_side: building the ElasticJob member: mvn -B -ntp -q -f benches/elasticjob/pom.xml package");
        let status = Command::new("mvn")
            .args(["-B", "-ntp", "-q", "-Dstyle.color=never", "-f"])
            .arg(dir.join("pom.xml"))
            .arg("package")
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run mvn: {e}"))?;
        if !status.success() {
            return Err(format!(
                "`mvn -q -f benches/elasticjob/pom.xml package` failed ({status})"
            ));
        }
    } else {
        eprintln!(
            "side_by_side: the ElasticJob member is up to date ({})",
            jar.display()
        );
    }
    let deps = std::fs::read_to_string(&classpath_file)
        .map_err(|e| format!("cannot read {}: {e}", classpath_file.display()))?;
    let version = Command::new("java")
        .arg("-version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .map_err(|e| format!("cannot run java: {e}"))?;
    Ok(Java {
        classpath: format!("{}:{}", jar.display(), deps.trim()),
        opts: std::env::var("SIDE_BY_SIDE_JAVA_OPTS")
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect(),
        version,
    })
}

#[derive(Clone, Debug)]
enum EjEvent {
    Ready { at: f64 },
    Start { at: f64, item: i32, source: String },
    End { at: f64, item: i32, outcome: String },
    Other,
}

fn parse_ej_line(line: &str) -> Option<EjEvent> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let field = |key: &str| {
        words
            .iter()
            .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .map(str::to_string)
    };
    let at: f64 = words.get(1)?.parse().ok()?;
    match (words.first()?, words.get(2)) {
        (&"READY", _) => Some(EjEvent::Ready { at }),
        (&"EVENT", Some(&"START")) => Some(EjEvent::Start {
            at,
            item: field("item")?.parse().ok()?,
            source: field("source")?,
        }),
        (&"EVENT", Some(&"END")) => Some(EjEvent::End {
            at,
            item: field("item")?.parse().ok()?,
            outcome: field("outcome")?,
        }),
        _ => Some(EjEvent::Other),
    }
}

/// One ElasticJob-Lite JVM (see benches/elasticjob); SIGKILLed and reaped on drop.
struct EjMember {
    name: String,
    child: Child,
    /// Wall clock (epoch ms) just before the spawn.
    spawned_at: f64,
    events: Arc<Mutex<Vec<EjEvent>>>,
    log: PathBuf,
    exited: bool,
}

#[derive(Clone, Debug)]
struct EjStart {
    at: f64,
    item: i32,
    source: String,
}

impl EjMember {
    fn spawn(
        java: &Java,
        zk: &ZooKeeper,
        ns: &str,
        name: &str,
        logs: &Path,
    ) -> Result<EjMember, String> {
        let log = logs.join(format!("{ns}-{name}.jvm.log"));
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let mut command = Command::new("java");
        command
            .args(&java.opts)
            .arg("-Dorg.slf4j.simpleLogger.showDateTime=true")
            .arg("-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS")
            .arg("-cp")
            .arg(&java.classpath)
            .arg("io.shardcar.bench.ElasticJobMember")
            .args([
                "--zk",
                &zk.connect_string(),
                "--namespace",
                ns,
                "--job",
                JOB,
            ])
            .args(["--cron", CRON, "--items", &ITEMS.to_string()])
            .args(["--hold-ms", &HOLD.as_millis().to_string()])
            .args(["--session-ms", &SESSION.as_millis().to_string()])
            .args(["--parent", &std::process::id().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err));
        let spawned_at = wall_ms();
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start java: {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let events = Arc::new(Mutex::new(Vec::new()));
        let writer = events.clone();
        // The member's own lines go into its log too, between ElasticJob's.
        let mut copy = std::fs::OpenOptions::new().append(true).open(&log).ok();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(file) = copy.as_mut() {
                    let _ = writeln!(file, "[stdout] {line}");
                }
                if let Some(event) = parse_ej_line(&line) {
                    writer.lock().unwrap().push(event);
                }
            }
        });
        Ok(EjMember {
            name: format!("{ns}/{name}"),
            child,
            spawned_at,
            events,
            log,
            exited: false,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn events(&self) -> Vec<EjEvent> {
        self.events.lock().unwrap().clone()
    }

    fn starts(&self) -> Vec<EjStart> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                EjEvent::Start { at, item, source } => Some(EjStart { at, item, source }),
                _ => None,
            })
            .collect()
    }

    /// Polls the member's events until `found` returns something; fails after `timeout` or
    /// when the JVM has exited (with the end of its log).
    async fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut found: impl FnMut(&[EjEvent]) -> Option<T>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(value) = found(&self.events()) {
                return Ok(value);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                self.exited = true;
                return Err(format!(
                    "ElasticJob member {} exited ({status}) before {what}; log {}:\n{}",
                    self.name,
                    self.log.display(),
                    common::log_tail(&self.log, 30)
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "ElasticJob member {}: no {what} within {timeout:?}; log {}:\n{}",
                    self.name,
                    self.log.display(),
                    common::log_tail(&self.log, 30)
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<f64, String> {
        self.wait_for("READY", timeout, |events| {
            events.iter().find_map(|e| match e {
                EjEvent::Ready { at } => Some(*at),
                _ => None,
            })
        })
        .await
    }

    /// The first START after wall time `after` that satisfies `pred`.
    async fn wait_start(
        &mut self,
        what: &str,
        after: f64,
        timeout: Duration,
        pred: impl Fn(&EjStart) -> bool,
    ) -> Result<EjStart, String> {
        self.wait_for(what, timeout, |events| {
            events.iter().find_map(|e| match e {
                EjEvent::Start { at, item, source } if *at > after => {
                    let s = EjStart {
                        at: *at,
                        item: *item,
                        source: source.clone(),
                    };
                    pred(&s).then_some(s)
                }
                _ => None,
            })
        })
        .await
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        if !self.exited {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), signal);
        }
    }

    fn kill(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
        self.exited = true;
    }

    /// Waits up to `timeout` for the JVM to exit; when it did, the wall time it was reaped.
    async fn wait_exit(&mut self, timeout: Duration) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.exited = true;
                return Some(Instant::now());
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for EjMember {
    fn drop(&mut self) {
        if !self.exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// shardcar's member A worker: a child process that holds each item 3 s

/// A child worker process (tests/failure/child.rs) and a task that answers `Complete` for each
/// of its triggers once the trigger has been held for [`HOLD`].
struct HeldChild {
    worker: Arc<tokio::sync::Mutex<child::ChildWorker>>,
    pid: u32,
    stop: Arc<AtomicBool>,
    driver: tokio::task::JoinHandle<()>,
}

impl HeldChild {
    async fn spawn(endpoint: &str, request: SubscribeRequest) -> HeldChild {
        let worker = child::ChildWorker::spawn(endpoint, request).await;
        let pid = worker.pid();
        let worker = Arc::new(tokio::sync::Mutex::new(worker));
        let stop = Arc::new(AtomicBool::new(false));
        let driver = tokio::spawn(hold_and_complete(worker.clone(), stop.clone()));
        HeldChild {
            worker,
            pid,
            stop,
            driver,
        }
    }

    async fn triggers(&self) -> Vec<(Instant, Trigger)> {
        self.worker.lock().await.triggers()
    }

    /// The first trigger received after `after`.
    async fn wait_trigger(
        &self,
        after: Instant,
        timeout: Duration,
    ) -> Result<(Instant, Trigger), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(found) = self
                .triggers()
                .await
                .into_iter()
                .find(|(at, _)| *at > after)
            {
                return Ok(found);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the child worker (pid {}) got no trigger within {timeout:?}",
                    self.pid
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The first `Assignment` with every item, waited for.
    async fn wait_items(&self, count: usize, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let latest = self
                .worker
                .lock()
                .await
                .events()
                .into_iter()
                .rev()
                .find_map(|(_, e)| match e.event {
                    Some(Event::Assignment(a)) => Some(a.items.len()),
                    _ => None,
                });
            if latest == Some(count) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the child worker (pid {}) was never assigned {count} items (latest: {latest:?})",
                    self.pid
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// SIGKILL; returns the instant just before the signal.
    async fn kill(&mut self) -> Instant {
        self.stop.store(true, Ordering::SeqCst);
        let mut worker = self.worker.lock().await;
        let at = Instant::now();
        worker.kill();
        at
    }
}

impl Drop for HeldChild {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.driver.abort();
    }
}

async fn hold_and_complete(
    worker: Arc<tokio::sync::Mutex<child::ChildWorker>>,
    stop: Arc<AtomicBool>,
) {
    let mut answered = HashSet::new();
    while !stop.load(Ordering::SeqCst) {
        let due: Vec<(String, Vec<i32>)> = worker
            .lock()
            .await
            .triggers()
            .into_iter()
            .filter(|(at, t)| at.elapsed() >= HOLD && !answered.contains(&t.execution_id))
            .map(|(_, t)| (t.execution_id, t.items.iter().map(|i| i.item).collect()))
            .collect();
        for (execution, items) in due {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            answered.insert(execution.clone());
            worker.lock().await.complete(&execution, &items).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn sidecar_options(zk: &ZooKeeper, ns: &str, ip: &str) -> SidecarOptions {
    SidecarOptions {
        namespace: ns.to_string(),
        session_timeout: SESSION,
        log_level: "info".into(),
        ..SidecarOptions::zk(zk.connect_string(), ip)
    }
}

/// The workers' `max_concurrent_executions`: `SIDE_BY_SIDE_MAX_CONCURRENT`, else 1 (one
/// execution at a time, as an ElasticJob instance).
fn max_concurrent() -> u32 {
    std::env::var("SIDE_BY_SIDE_MAX_CONCURRENT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

fn shardcar_request() -> SubscribeRequest {
    let config = shardcar::proto::JobConfig {
        failover: true,
        monitor_execution: Some(true),
        ..job_config(JOB, CRON, ITEMS)
    };
    SubscribeRequest {
        overwrite: true,
        max_concurrent_executions: max_concurrent(),
        ..subscribe_request(config)
    }
}

/// When every item of `items` has reached `worker` in a FAILOVER trigger received after
/// `after`: the first and the last of those arrivals.
async fn failover_arrivals(
    worker: &TestWorker,
    items: &BTreeSet<i32>,
    after: Instant,
    timeout: Duration,
) -> Result<(Instant, Instant), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut arrivals = Vec::new();
        let mut missing = items.clone();
        for (at, t) in worker.triggers() {
            if at > after && t.source == TriggerSource::Failover as i32 {
                for i in &t.items {
                    if missing.remove(&i.item) {
                        arrivals.push(at);
                    }
                }
            }
        }
        if let (true, Some(first), Some(last)) = (
            missing.is_empty(),
            arrivals.iter().min(),
            arrivals.iter().max(),
        ) {
            return Ok((*first, *last));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no FAILOVER trigger for items {missing:?} at the surviving worker within {timeout:?}; its events:\n{}",
                worker.summary()
            ));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until namespace `ns` has no instance of the job and no elected leader (the member that
/// got SIGTERM was the last one: what a peer waits for before it may take the items over), and
/// then until no ephemeral node of the member is left at all (shardcar's
/// `shardcar/sidecars/{ip}` too): when each was first seen, `None` if not within `timeout`.
async fn wait_member_gone(
    client: &zookeeper_client::Client,
    ns: &str,
    timeout: Duration,
) -> (Option<Instant>, Option<Instant>) {
    let deadline = Instant::now() + timeout;
    let children =
        |path: String| async move { client.list_children(&path).await.map_or(0, |c| c.len()) };
    let leader = format!("/{ns}/{JOB}/leader/election/instance");
    let mut member_gone = None;
    loop {
        let registered = children(format!("/{ns}/{JOB}/instances")).await;
        let leading = matches!(client.check_stat(&leader).await, Ok(Some(_)));
        let sidecars = children(format!("/{ns}/{JOB}/shardcar/sidecars")).await;
        let now = Instant::now();
        if member_gone.is_none() && registered == 0 && !leading {
            member_gone = Some(now);
        }
        if member_gone.is_some() && sidecars == 0 {
            return (member_gone, Some(now));
        }
        if now >= deadline {
            return (member_gone, None);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Records the SIGTERM figures: exit (`exited`) and the member's nodes gone (`gone`).
fn record_sigterm(
    side: &mut Side,
    round: usize,
    what: &str,
    sent: Instant,
    exited: Option<Instant>,
    (gone, all_gone): (Option<Instant>, Option<Instant>),
) -> String {
    match exited {
        Some(at) => side.add(fig::SIGTERM, ms_since(sent, at)),
        None => {
            side.no_exit += 1;
            side.note(format!(
                "round {round}: the {what} did not exit within {EXIT_CAP:?} of SIGTERM"
            ));
        }
    }
    match gone {
        Some(at) => side.add(fig::SIGTERM_GONE, ms_since(sent, at)),
        None => {
            side.not_gone += 1;
            side.note(format!(
                "round {round}: the instance or leader node of the {what} was still in ZooKeeper {EXIT_CAP:?} after SIGTERM"
            ));
        }
    }
    match all_gone {
        Some(at) => side.add(fig::SIGTERM_ALL_GONE, ms_since(sent, at)),
        None => {
            side.not_all_gone += 1;
            side.note(format!(
                "round {round}: an ephemeral node of the {what}'s member was still in ZooKeeper {EXIT_CAP:?} after SIGTERM"
            ));
        }
    }
    let show = |t: Option<Instant>| {
        t.map_or("not within 20 s".to_string(), |t| {
            format!("{:.0} ms", ms_since(sent, t))
        })
    };
    format!(
        "exit {}, instance and leader nodes gone {}, every ephemeral node gone {}",
        show(exited),
        show(gone),
        show(all_gone)
    )
}

/// What the surviving worker did between `from` and `to`: its runs, ms after `from`.
fn runs_between(worker: &TestWorker, from: Instant, to: Instant) -> String {
    let runs: Vec<String> = worker
        .strict_runs()
        .into_iter()
        .filter(|r| r.start > from && r.start <= to || r.end.is_some_and(|e| e > from && e <= to))
        .map(|r| {
            let source = TriggerSource::try_from(r.source)
                .map(|s| {
                    s.as_str_name()
                        .trim_start_matches("TRIGGER_SOURCE_")
                        .to_string()
                })
                .unwrap_or_default();
            format!(
                "{:?} {source} {:+.0}..{}",
                r.items,
                signed_ms(from, r.start),
                r.end.map_or("running".to_string(), |e| format!(
                    "{:+.0}",
                    signed_ms(from, e)
                ))
            )
        })
        .collect();
    runs.join(", ")
}

fn items_of(trigger: &Trigger) -> BTreeSet<i32> {
    trigger.items.iter().map(|i| i.item).collect()
}

/// Item runs whose fire time is in `[from, to)` (wall ms).
fn item_runs_fired_in(triggers: &[(Instant, Trigger)], from: f64, to: f64) -> usize {
    triggers
        .iter()
        .filter(|(_, t)| {
            t.fire_time.as_ref().is_some_and(|f| {
                let ms = f.seconds as f64 * 1000.0 + f.nanos as f64 / 1e6;
                ms >= from && ms < to
            })
        })
        .map(|(_, t)| t.items.len())
        .sum()
}

// ---------------------------------------------------------------------------------------------
// The rounds

struct Env {
    started: Instant,
    logs: PathBuf,
    java: Result<Java, String>,
    /// /proc/loadavg when the program started (the machine may be shared).
    load_at_start: String,
    /// Each transaction window: ElasticJob's (true) or shardcar's, the zxids before and after
    /// it, and the executions of the 4 items it saw.
    windows: Mutex<Vec<(bool, i64, i64, f64)>>,
    /// When the last round ended: a session it left behind may still expire (a transaction)
    /// until one session timeout later, so no transaction window starts before then.
    last_round_end: Mutex<Option<Instant>>,
}

impl Env {
    /// The start of the next transaction window (see [`next_window_start`]), after any session
    /// the previous round left behind has expired.
    async fn quiet_window_start(&self) -> f64 {
        let quiet = *self.last_round_end.lock().unwrap();
        if let Some(end) = quiet {
            let quiet_at = end + SESSION + Duration::from_millis(1500);
            tokio::time::sleep_until(quiet_at.into()).await;
        }
        next_window_start()
    }

    fn progress(&self, line: &str) {
        eprintln!(
            "side_by_side [{:>6.1}s] {line}",
            self.started.elapsed().as_secs_f64()
        );
    }
}

async fn elasticjob_round(
    env: &Env,
    zk: &ZooKeeper,
    watch: &zookeeper_client::Client,
    round: usize,
    side: &mut Side,
) -> Result<(), String> {
    let java = env.java.as_ref().map_err(Clone::clone)?;
    let ns = format!("sbs-elasticjob-{round}");
    env.progress(&format!(
        "ElasticJob round {round}: member A starts alone ({ns})"
    ));
    let mut a = EjMember::spawn(java, zk, &ns, "A", &env.logs)?;
    a.wait_ready(Duration::from_secs(60)).await?;
    // A alone holds all 4 items: it has started each of them.
    a.wait_for("a run of every item", Duration::from_secs(30), |events| {
        let started: BTreeSet<i32> = events
            .iter()
            .filter_map(|e| match e {
                EjEvent::Start { item, .. } => Some(*item),
                _ => None,
            })
            .collect();
        (started.len() == ITEMS as usize).then_some(())
    })
    .await?;

    // B joins.
    let mut b = EjMember::spawn(java, zk, &ns, "B", &env.logs)?;
    let spawned = b.spawned_at;
    let ready = b.wait_ready(Duration::from_secs(60)).await?;
    let first = b
        .wait_start("a first item run", 0.0, Duration::from_secs(30), |_| true)
        .await?;
    side.add(fig::READY, ready - spawned);
    side.add(fig::HOLDS, first.at - spawned);
    side.add(fig::FIRST_RUN, first.at - spawned);
    side.add(fig::SPAWN_FIRST_RUN, first.at - spawned);
    env.progress(&format!(
        "ElasticJob round {round}: B spawned -> READY {:.0} ms -> first START {:.0} ms (item {})",
        ready - spawned,
        first.at - spawned,
        first.item
    ));

    // Steady fires, both members: transactions, memory, threads.
    let from = env.quiet_window_start().await;
    sleep_until_wall(from).await;
    let before = zxid(zk).await?;
    sleep_until_wall(from + WINDOW_MS).await;
    let after = zxid(zk).await?;
    let in_window = |m: &EjMember| {
        m.starts()
            .iter()
            .filter(|s| s.at >= from && s.at < from + WINDOW_MS)
            .count()
    };
    let (runs_a, runs_b) = (in_window(&a), in_window(&b));
    let runs = runs_a + runs_b;
    if runs > 0 {
        let per = (after - before) as f64 / (runs as f64 / ITEMS as f64);
        side.add(fig::TXNS, per);
        env.windows
            .lock()
            .unwrap()
            .push((true, before, after, runs as f64 / ITEMS as f64));
        env.progress(&format!(
            "ElasticJob round {round}: {} transactions (zxid {before:#x}..{after:#x}) for {runs} item runs (A {runs_a}, B {runs_b}) = {per:.1} per execution of {ITEMS} items",
            after - before
        ));
    } else {
        side.note(format!(
            "round {round}: no item ran in the 10 s window, no transaction figure"
        ));
    }
    for m in [&a, &b] {
        match proc_status(m.pid()) {
            Some((rss, threads)) => {
                side.add(fig::RSS_MEMBER, mib(rss));
                side.add(fig::THREADS_MEMBER, threads);
            }
            None => side.note(format!("round {round}: no /proc status for {}", m.name)),
        }
    }

    // A is SIGKILLed 1 s into its items.
    let now = wall_ms();
    let fire = a
        .wait_start(
            "a run after the window",
            now,
            Duration::from_secs(15),
            |_| true,
        )
        .await?;
    sleep_until_wall(fire.at + INTO_ITEM.as_millis() as f64).await;
    let ended: HashSet<i32> = a
        .events()
        .iter()
        .filter_map(|e| match e {
            EjEvent::End { at, item, .. } if *at >= fire.at => Some(*item),
            _ => None,
        })
        .collect();
    let running: BTreeSet<i32> = a
        .starts()
        .iter()
        .filter(|s| s.at >= fire.at - 500.0 && !ended.contains(&s.item))
        .map(|s| s.item)
        .collect();
    let killed = wall_ms();
    a.kill();
    let (mut earliest, mut latest) = (f64::INFINITY, killed);
    for item in &running {
        let s = b
            .wait_start(
                &format!("a FAILOVER run of item {item}"),
                killed,
                Duration::from_secs(60),
                |s| s.item == *item && s.source == "FAILOVER",
            )
            .await?;
        earliest = earliest.min(s.at);
        latest = latest.max(s.at);
    }
    if running.is_empty() {
        return Err("A was running no item when it was killed".into());
    }
    side.add(fig::FO_MEMBER_FIRST, earliest - killed);
    side.add(fig::FO_MEMBER, latest - killed);
    // What B was doing meanwhile: its own runs since the kill (ms after it).
    let own: Vec<String> = b
        .events()
        .iter()
        .filter_map(|e| match e {
            EjEvent::Start { at, item, source } if *at > killed && *at <= latest => {
                Some(format!("START {item} {source} +{:.0}", at - killed))
            }
            EjEvent::End { at, item, .. } if *at > killed && *at <= latest => {
                Some(format!("END {item} +{:.0}", at - killed))
            }
            _ => None,
        })
        .collect();
    env.progress(&format!(
        "ElasticJob round {round}: A SIGKILLed running items {running:?} -> FAILOVER STARTs on B after {:.0} ms (first) / {:.0} ms (all) (B meanwhile: {})",
        earliest - killed,
        latest - killed,
        own.join(", ")
    ));

    // SIGTERM to B 1 s into its items.
    let now = wall_ms();
    let run = b
        .wait_start(
            "a run after the failover",
            now,
            Duration::from_secs(15),
            |_| true,
        )
        .await?;
    sleep_until_wall(run.at + INTO_ITEM.as_millis() as f64).await;
    let sent = Instant::now();
    let sent_wall = wall_ms();
    b.signal(nix::sys::signal::Signal::SIGTERM);
    let (exited, gone) = tokio::join!(
        b.wait_exit(EXIT_CAP),
        wait_member_gone(watch, &ns, EXIT_CAP)
    );
    let said = record_sigterm(side, round, "ElasticJob JVM", sent, exited, gone);
    if exited.is_some() {
        let completed = b.events().iter().any(|e| {
            matches!(e, EjEvent::End { at, item, outcome } if *item == run.item && *at > sent_wall && outcome == "completed")
        });
        side.drained.0 += 1;
        side.drained.1 += usize::from(completed);
        env.progress(&format!(
            "ElasticJob round {round}: SIGTERM -> {said} (item in flight ran to its end: {completed})"
        ));
    } else {
        env.progress(&format!(
            "ElasticJob round {round}: SIGTERM -> {said} (log {})",
            b.log.display()
        ));
        b.kill();
    }
    Ok(())
}

async fn shardcar_round(
    env: &Env,
    zk: &ZooKeeper,
    watch: &zookeeper_client::Client,
    round: usize,
    side: &mut Side,
) -> Result<(), String> {
    let ns = format!("sbs-shardcar-{round}");
    env.progress(&format!(
        "shardcar round {round}: member A starts alone ({ns})"
    ));
    let sidecar_a = Sidecar::start(sidecar_options(zk, &ns, "127.0.0.2")).await;
    let mut worker_a = HeldChild::spawn(&sidecar_a.endpoint(), shardcar_request()).await;
    worker_a
        .wait_items(ITEMS as usize, Duration::from_secs(30))
        .await?;
    worker_a
        .wait_trigger(
            Instant::now() - Duration::from_secs(60),
            Duration::from_secs(30),
        )
        .await?;

    // B joins: a second sidecar, then a worker subscribing on it.
    let spawned = Instant::now();
    let mut sidecar_b = Sidecar::start(sidecar_options(zk, &ns, "127.0.0.3")).await;
    let ready = Instant::now();
    let subscribed = Instant::now();
    let worker_b = TestWorker::subscribe_strict(&sidecar_b.endpoint(), shardcar_request(), HOLD)
        .await
        .map_err(|e| format!("B's worker cannot subscribe: {e}"))?;
    let holds = worker_b
        .wait_for(
            |events| {
                events.iter().any(
                    |(_, e)| matches!(&e.event, Some(Event::Assignment(a)) if !a.items.is_empty()),
                )
            },
            Duration::from_secs(30),
        )
        .await
        .map_err(|e| e.to_string())
        .map(|()| {
            worker_b
                .assignments()
                .into_iter()
                .find(|(_, a)| !a.items.is_empty())
                .map(|(at, _)| at)
                .unwrap()
        })?;
    worker_b
        .wait_for(
            |events| {
                events
                    .iter()
                    .any(|(_, e)| matches!(e.event, Some(Event::Trigger(_))))
            },
            Duration::from_secs(30),
        )
        .await
        .map_err(|e| e.to_string())?;
    let first_run = worker_b.triggers()[0].0;
    side.add(fig::READY, ms_since(spawned, ready));
    side.add(fig::HOLDS, ms_since(subscribed, holds));
    side.add(fig::FIRST_RUN, ms_since(subscribed, first_run));
    side.add(fig::SPAWN_FIRST_RUN, ms_since(spawned, first_run));
    env.progress(&format!(
        "shardcar round {round}: B's sidecar ready {:.0} ms; Subscribe -> items {:.0} ms -> first Trigger {:.0} ms",
        ms_since(spawned, ready),
        ms_since(subscribed, holds),
        ms_since(subscribed, first_run)
    ));

    // Steady fires, both members.
    let from = env.quiet_window_start().await;
    sleep_until_wall(from).await;
    let before = zxid(zk).await?;
    sleep_until_wall(from + WINDOW_MS).await;
    let after = zxid(zk).await?;
    let runs_a = item_runs_fired_in(&worker_a.triggers().await, from, from + WINDOW_MS);
    let runs_b = item_runs_fired_in(&worker_b.triggers(), from, from + WINDOW_MS);
    let runs = runs_a + runs_b;
    if runs > 0 {
        let per = (after - before) as f64 / (runs as f64 / ITEMS as f64);
        side.add(fig::TXNS, per);
        env.windows
            .lock()
            .unwrap()
            .push((false, before, after, runs as f64 / ITEMS as f64));
        env.progress(&format!(
            "shardcar round {round}: {} transactions (zxid {before:#x}..{after:#x}) for {runs} item runs (A {runs_a}, B {runs_b}) = {per:.1} per execution of {ITEMS} items",
            after - before
        ));
    } else {
        side.note(format!(
            "round {round}: no item ran in the 10 s window, no transaction figure"
        ));
    }
    let statuses = (
        proc_status(sidecar_a.pid()),
        proc_status(sidecar_b.pid()),
        proc_status(worker_a.pid),
    );
    match statuses {
        (Some(car_a), Some(car_b), Some(worker)) => {
            for car in [car_a, car_b] {
                side.add(fig::RSS_SIDECAR, mib(car.0));
                side.add(fig::THREADS_SIDECAR, car.1);
            }
            side.add(fig::RSS_WORKER, mib(worker.0));
            side.add(fig::THREADS_WORKER, worker.1);
            side.add(fig::RSS_MEMBER, mib(car_a.0 + worker.0));
            side.add(fig::THREADS_MEMBER, car_a.1 + worker.1);
        }
        _ => side.note(format!("round {round}: a /proc status could not be read")),
    }

    // A's worker process is SIGKILLed 1 s into its items; its sidecar lives.
    let (received, trigger) = worker_a
        .wait_trigger(Instant::now(), Duration::from_secs(15))
        .await?;
    tokio::time::sleep_until((received + INTO_ITEM).into()).await;
    let killed = worker_a.kill().await;
    let items = items_of(&trigger);
    let (first, at) = failover_arrivals(&worker_b, &items, killed, Duration::from_secs(60)).await?;
    side.add(fig::FO_WORKER_FIRST, ms_since(killed, first));
    side.add(fig::FO_WORKER, ms_since(killed, at));
    env.progress(&format!(
        "shardcar round {round}: A's worker SIGKILLed running items {items:?} -> FAILOVER Triggers at B after {:.0} ms (first) / {:.0} ms (all) (B's runs: {})",
        ms_since(killed, first),
        ms_since(killed, at),
        runs_between(&worker_b, killed, at)
    ));

    // A new worker on A's sidecar takes its share; then the whole member A (sidecar and worker)
    // is SIGKILLed 1 s into its items.
    let mut sidecar_a = sidecar_a;
    let mut worker_a2 = HeldChild::spawn(&sidecar_a.endpoint(), shardcar_request()).await;
    let (received, trigger) = worker_a2
        .wait_trigger(
            Instant::now() - Duration::from_secs(60),
            Duration::from_secs(30),
        )
        .await?;
    tokio::time::sleep_until((received + INTO_ITEM).into()).await;
    let killed = Instant::now();
    sidecar_a.kill();
    worker_a2.kill().await;
    let items = items_of(&trigger);
    let (first, at) = failover_arrivals(&worker_b, &items, killed, Duration::from_secs(60)).await?;
    side.add(fig::FO_MEMBER_FIRST, ms_since(killed, first));
    side.add(fig::FO_MEMBER, ms_since(killed, at));
    env.progress(&format!(
        "shardcar round {round}: member A (sidecar + worker) SIGKILLed running items {items:?} -> FAILOVER Triggers at B after {:.0} ms (first) / {:.0} ms (all) (B's runs: {})",
        ms_since(killed, first),
        ms_since(killed, at),
        runs_between(&worker_b, killed, at)
    ));

    // SIGTERM to B's sidecar 1 s into its items.
    let seen = worker_b.triggers().len();
    worker_b
        .wait_for(
            |events| {
                events
                    .iter()
                    .filter(|(_, e)| matches!(e.event, Some(Event::Trigger(_))))
                    .count()
                    > seen
            },
            Duration::from_secs(15),
        )
        .await
        .map_err(|e| e.to_string())?;
    let (received, trigger) = worker_b.triggers()[seen].clone();
    tokio::time::sleep_until((received + INTO_ITEM).into()).await;
    let sent = Instant::now();
    sidecar_b.terminate();
    let wait_exit = async {
        let status = sidecar_b.wait_exit(EXIT_CAP).await;
        status.map(|_| Instant::now())
    };
    let (exited, gone) = tokio::join!(wait_exit, wait_member_gone(watch, &ns, EXIT_CAP));
    let said = record_sigterm(side, round, "sidecar", sent, exited, gone);
    if exited.is_some() {
        let completed = worker_b.strict_runs().iter().any(|r| {
            r.execution_id == trigger.execution_id
                && r.outcome == Some(common::worker::RunEnd::Completed)
                && r.reply.is_some_and(|reply| reply.is_ok())
        });
        side.drained.0 += 1;
        side.drained.1 += usize::from(completed);
        env.progress(&format!(
            "shardcar round {round}: SIGTERM -> {said} (item in flight ran to its end and was completed: {completed})"
        ));
    } else {
        env.progress(&format!("shardcar round {round}: SIGTERM -> {said}"));
        sidecar_b.kill();
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The report

enum Unit {
    Millis,
    MiB,
    Count,
}

fn format_value(value: f64, unit: &Unit) -> String {
    match unit {
        Unit::Millis if value >= 1000.0 => format!("{:.2} s", value / 1000.0),
        Unit::Millis => format!("{value:.0} ms"),
        Unit::MiB => format!("{value:.1} MiB"),
        Unit::Count => format!("{value:.1}"),
    }
}

fn cell(side: &Side, figure: Option<&str>, unit: &Unit, absent: &str) -> String {
    if let Some(why) = &side.unavailable {
        return format!("not measured: {why}");
    }
    let Some(figure) = figure else {
        return absent.to_string();
    };
    match side.stats(figure) {
        Some(s) => format!(
            "{} (p99 {}, n={})",
            format_value(s.median, unit),
            format_value(s.p99, unit),
            s.n
        ),
        None => "not measured (see notes)".to_string(),
    }
}

/// ElasticJob's median over shardcar's, said in words (within 3 %: about the same).
fn ratio(ej: Option<Stats>, sc: Option<Stats>, better: &str, worse: &str) -> String {
    match (ej, sc) {
        (Some(ej), Some(sc)) if sc.median > 0.0 && ej.median > 0.0 => {
            let r = ej.median / sc.median;
            let x = |r: f64| {
                if r >= 10.0 {
                    format!("{r:.0}×")
                } else if r >= 2.0 {
                    format!("{r:.1}×")
                } else {
                    format!("{r:.2}×")
                }
            };
            if (0.97..=1.03).contains(&r) {
                format!("{} (about the same)", x(r))
            } else if r >= 1.0 {
                format!("{} (shardcar {better})", x(r))
            } else {
                format!("{} (shardcar {} {worse})", x(r), x(1.0 / r))
            }
        }
        _ => "—".to_string(),
    }
}

fn print_raw(name: &str, side: &Side) {
    for (figure, _) in side.samples.iter() {
        if let Some(s) = side.stats(figure) {
            println!(
                "{name} {figure}: n={} median={:.2} p99={:.2} min={:.2} max={:.2}",
                s.n, s.median, s.p99, s.min, s.max
            );
        }
    }
}

fn print_report(env: &Env, rounds: usize, zk_version: &str, ej: &Side, sc: &Side) {
    let kernel = std::fs::read_to_string("/proc/version")
        .unwrap_or_default()
        .trim()
        .to_string();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!();
    println!("## shardcar vs ElasticJob-Lite 3.0.4, side by side");
    println!();
    println!(
        "{} · {cores} cores · {kernel} · load average {} at the start, {} at the end · `{COMMAND}`",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        env.load_at_start,
        loadavg()
    );
    println!();
    let java = match &env.java {
        Ok(j) => format!(
            "{} (JVM options: {})",
            j.version,
            if j.opts.is_empty() {
                "none, the JVM's defaults".to_string()
            } else {
                j.opts.join(" ")
            }
        ),
        Err(e) => format!("unavailable: {e}"),
    };
    println!(
        "One ZooKeeper ({zk_version}, tick 500 ms), 10 s sessions; per system {rounds} rounds, each in a fresh namespace: \
         one job, 4 items, cron `{CRON}`, each item held 3 s, failover on; member A alone, then B joins; \
         SIGKILL and SIGTERM are sent 1 s into a member's items. ElasticJob member = one JVM ({java}); \
         shardcar member = a sidecar (`target/release/shardcar`) + a worker process, subscribed with \
         max_concurrent_executions {} ({}). \
         Cells: median (p99, n); p99 of a handful of samples is their maximum. Ratio = ElasticJob ÷ shardcar (medians).",
        max_concurrent(),
        if max_concurrent() == 1 {
            "one execution at a time, as ElasticJob; SIDE_BY_SIDE_MAX_CONCURRENT changes it"
        } else {
            "FAILOVER runs beside a run in progress"
        }
    );
    println!();
    println!("| figure | ElasticJob 3.0.4 | shardcar | ratio |");
    println!("|---|---|---|---|");
    // Times both systems measure the same way (the same figure on each side).
    for (label, figure) in [
        (
            "B joins: process spawn → ready (ElasticJob: job scheduled, `READY`; shardcar: sidecar accepts gRPC, polled every 50 ms)",
            fig::READY,
        ),
        (
            "B joins → B holds items (ElasticJob: from the JVM's spawn to its first item START, the reshard waits for the next fire; shardcar: from the worker's Subscribe to its first Assignment with items)",
            fig::HOLDS,
        ),
        (
            "B joins → B's first item runs (ElasticJob: spawn → first START; shardcar: Subscribe → first Trigger)",
            fig::FIRST_RUN,
        ),
        (
            "B's process spawn → B's first item runs (shardcar: sidecar spawn, then Subscribe)",
            fig::SPAWN_FIRST_RUN,
        ),
        (
            "member SIGKILLed 1 s into its 2 items → the first of them STARTs as FAILOVER on the other member (ElasticJob: the JVM; shardcar: sidecar + worker; ElasticJob: START, shardcar: Trigger received)",
            fig::FO_MEMBER_FIRST,
        ),
        (
            "member SIGKILLed 1 s into its 2 items → every one of them STARTs as FAILOVER on the other member",
            fig::FO_MEMBER,
        ),
    ] {
        println!(
            "| {label} | {} | {} | {} |",
            cell(ej, Some(figure), &Unit::Millis, ""),
            cell(sc, Some(figure), &Unit::Millis, "—"),
            ratio(ej.stats(figure), sc.stats(figure), "faster", "slower")
        );
    }
    // The worker alone has no ElasticJob counterpart: the ratio is against the JVM's SIGKILL.
    for (label, ej_fig, sc_fig) in [
        (
            "the first of them",
            fig::FO_MEMBER_FIRST,
            fig::FO_WORKER_FIRST,
        ),
        ("every one of them", fig::FO_MEMBER, fig::FO_WORKER),
    ] {
        println!(
            "| worker process SIGKILLed 1 s into its 2 items, its sidecar living → {label} FAILOVER on the other member (ratio against ElasticJob's JVM SIGKILL) | — (no such split: the JVM is the worker) | {} | {} |",
            cell(sc, Some(sc_fig), &Unit::Millis, "—"),
            if ej.unavailable.is_some() {
                "—".to_string()
            } else {
                ratio(ej.stats(ej_fig), sc.stats(sc_fig), "faster", "slower")
            }
        );
    }
    for (label, figure) in [
        (
            "ZooKeeper transactions per execution of the 4 items (zxid over 10 s of steady fires, both members)",
            fig::TXNS,
        ),
        (
            "… of them made by the members' sessions (ZooKeeper's transaction log; its own container reaper apart)",
            fig::OWN_TXNS,
        ),
        (
            "… their write operations (create, delete, setData; each operation of a multi counted)",
            fig::WRITE_OPS,
        ),
    ] {
        println!(
            "| {label} | {} | {} | {} |",
            cell(ej, Some(figure), &Unit::Count, ""),
            cell(sc, Some(figure), &Unit::Count, ""),
            ratio(ej.stats(figure), sc.stats(figure), "fewer", "more")
        );
    }
    println!(
        "| … and their version checks (check operations inside multis) | {} | {} | — |",
        cell(ej, Some(fig::CHECK_OPS), &Unit::Count, ""),
        cell(sc, Some(fig::CHECK_OPS), &Unit::Count, ""),
    );
    let sized =
        |label: &str, ej_fig: Option<&str>, sc_fig: &str, unit: Unit, better: &str, worse: &str| {
            println!(
                "| {label} | {} | {} | {} |",
                cell(ej, ej_fig, &unit, "— (one process)"),
                cell(sc, Some(sc_fig), &unit, ""),
                if ej_fig.is_some() {
                    ratio(
                        ej_fig.and_then(|f| ej.stats(f)),
                        sc.stats(sc_fig),
                        better,
                        worse,
                    )
                } else {
                    "—".to_string()
                }
            );
        };
    sized(
        "RSS per member (ElasticJob: the JVM; shardcar: sidecar + worker process)",
        Some(fig::RSS_MEMBER),
        fig::RSS_MEMBER,
        Unit::MiB,
        "smaller",
        "larger",
    );
    sized(
        "RSS: shardcar's sidecar alone (A's and B's; ElasticJob: the JVM)",
        Some(fig::RSS_MEMBER),
        fig::RSS_SIDECAR,
        Unit::MiB,
        "smaller",
        "larger",
    );
    sized(
        "RSS: shardcar's worker process alone (a Rust gRPC worker: this program re-executed)",
        None,
        fig::RSS_WORKER,
        Unit::MiB,
        "",
        "",
    );
    sized(
        "threads per member (ElasticJob: the JVM; shardcar: sidecar + worker process)",
        Some(fig::THREADS_MEMBER),
        fig::THREADS_MEMBER,
        Unit::Count,
        "fewer",
        "more",
    );
    sized(
        "threads: shardcar's sidecar alone (A's and B's; ElasticJob: the JVM)",
        Some(fig::THREADS_MEMBER),
        fig::THREADS_SIDECAR,
        Unit::Count,
        "fewer",
        "more",
    );
    sized(
        "threads: shardcar's worker process alone",
        None,
        fig::THREADS_WORKER,
        Unit::Count,
        "",
        "",
    );
    let exit_cell = |side: &Side| {
        let mut text = cell(side, Some(fig::SIGTERM), &Unit::Millis, "");
        if side.no_exit > 0 {
            let total = side.no_exit + side.samples.get(fig::SIGTERM).map_or(0, Vec::len);
            text = format!("{text}; no exit in 20 s: {}/{total}", side.no_exit);
        }
        if side.drained.0 > 0 {
            text = format!(
                "{text}; the item in flight ran to its end in {}/{}",
                side.drained.1, side.drained.0
            );
        }
        text
    };
    println!(
        "| SIGTERM 1 s into the member's items → process exit (ElasticJob: the JVM; shardcar: the sidecar) | {} | {} | {} |",
        exit_cell(ej),
        exit_cell(sc),
        ratio(ej.stats(fig::SIGTERM), sc.stats(fig::SIGTERM), "faster", "slower")
    );
    let gone_cell = |side: &Side, figure: &str, missing: usize| {
        let text = cell(side, Some(figure), &Unit::Millis, "");
        if missing > 0 {
            let total = missing + side.samples.get(figure).map_or(0, Vec::len);
            format!("{text}; still there after 20 s: {missing}/{total}")
        } else {
            text
        }
    };
    println!(
        "| SIGTERM (same) → the member's instance and leader nodes are gone from ZooKeeper (what a peer waits for to take over) | {} | {} | {} |",
        gone_cell(ej, fig::SIGTERM_GONE, ej.not_gone),
        gone_cell(sc, fig::SIGTERM_GONE, sc.not_gone),
        ratio(ej.stats(fig::SIGTERM_GONE), sc.stats(fig::SIGTERM_GONE), "faster", "slower")
    );
    println!(
        "| SIGTERM (same) → every ephemeral node of the member gone (shardcar's `shardcar/sidecars/{{ip}}` too) | {} | {} | {} |",
        gone_cell(ej, fig::SIGTERM_ALL_GONE, ej.not_all_gone),
        gone_cell(sc, fig::SIGTERM_ALL_GONE, sc.not_all_gone),
        ratio(ej.stats(fig::SIGTERM_ALL_GONE), sc.stats(fig::SIGTERM_ALL_GONE), "faster", "slower")
    );
    for (name, side) in [("ElasticJob", ej), ("shardcar", sc)] {
        for note in &side.notes {
            println!();
            println!("- {name}: {note}");
        }
    }
    println!();
    println!("Logs (sidecars, JVMs): {}", env.logs.display());
}

/// Copies ZooKeeper's transaction logs into the log directory, so every transaction a window
/// counted can be read afterwards (`java -cp /usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar
/// org.apache.zookeeper.server.persistence.TxnLogToolkit -d zookeeper-txnlog/log.N`).
fn keep_txn_logs(env: &Env, zk: &ZooKeeper) -> Option<PathBuf> {
    let config = zk.pid(0).and_then(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let last = cmdline
            .split(|b| *b == 0)
            .rfind(|a| !a.is_empty())?
            .to_vec();
        Some(PathBuf::from(String::from_utf8(last).ok()?))
    });
    let Some(data) = config.and_then(|c| c.parent().map(|d| d.join("data/version-2"))) else {
        eprintln!("side_by_side: cannot find ZooKeeper's data directory: its transaction logs are not kept");
        return None;
    };
    let kept = env.logs.join("zookeeper-txnlog");
    let _ = std::fs::create_dir_all(&kept);
    for entry in std::fs::read_dir(&data).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with("log.") {
            let _ = std::fs::copy(entry.path(), kept.join(entry.file_name()));
        }
    }
    Some(kept)
}

/// One transaction of ZooKeeper's log.
#[derive(Clone, Copy)]
struct Txn {
    /// Made by the server itself (session 0: its container reaper, `deleteContainer`), not by
    /// a client's session.
    server: bool,
    /// Write operations: create, delete, setData, …; a multi counts each of its operations.
    writes: u32,
    /// Version checks (inside multis).
    checks: u32,
}

/// Every transaction in ZooKeeper's logs (kept in `dir`) by zxid, read with ZooKeeper's own
/// `TxnLogToolkit`.
fn txn_operations(dir: &Path) -> Result<BTreeMap<i64, Txn>, String> {
    let classpath = "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar";
    let mut ops = BTreeMap::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for file in files {
        let out = Command::new("java")
            .args(["-cp", classpath])
            .arg("org.apache.zookeeper.server.persistence.TxnLogToolkit")
            .arg("-d")
            .arg(&file)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run ZooKeeper's TxnLogToolkit: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "ZooKeeper's TxnLogToolkit failed on {} ({})",
                file.display(),
                out.status
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        // Each record: "... session 0x.. cxid 0x.. zxid 0x<hex> <type> <body>", its body up to
        // the next record (bodies hold raw bytes, newlines among them).
        let starts: Vec<usize> = text.match_indices(" zxid 0x").map(|(i, _)| i).collect();
        for (n, start) in starts.iter().enumerate() {
            let end = starts.get(n + 1).copied().unwrap_or(text.len());
            let record = &text[start + " zxid 0x".len()..end];
            let Some((zxid, rest)) = record.split_once(' ') else {
                continue;
            };
            let Ok(zxid) = i64::from_str_radix(zxid, 16) else {
                continue;
            };
            let session = text[..*start]
                .rfind(" session 0x")
                .map(|at| &text[at + " session 0x".len()..*start])
                .and_then(|s| s.split(' ').next())
                .and_then(|s| u64::from_str_radix(s, 16).ok());
            let kind: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
            let count = |kind: &str| match kind {
                "check" => (0, 1),
                "create" | "create2" | "createContainer" | "createTTL" | "delete"
                | "deleteContainer" | "setData" | "setACL" => (1, 0),
                _ => (0, 0),
            };
            let (writes, checks) = if kind == "multi" {
                rest["multi".len()..]
                    .split(';')
                    .map(|op| {
                        let name: String = op
                            .trim_start()
                            .chars()
                            .take_while(|c| c.is_alphanumeric())
                            .collect();
                        count(&name)
                    })
                    .fold((0, 0), |(w, c), (dw, dc)| (w + dw, c + dc))
            } else {
                count(&kind)
            };
            ops.insert(
                zxid,
                Txn {
                    server: session == Some(0),
                    writes,
                    checks,
                },
            );
        }
    }
    Ok(ops)
}

/// Write operations and version checks per execution of the 4 items, for each window.
fn window_operations(env: &Env, dir: Option<PathBuf>, ej: &mut Side, sc: &mut Side) {
    let windows = env.windows.lock().unwrap().clone();
    if windows.is_empty() {
        return;
    }
    let ops = match dir
        .ok_or_else(|| "ZooKeeper's transaction logs were not kept".to_string())
        .and_then(|d| txn_operations(&d))
    {
        Ok(ops) => ops,
        Err(e) => {
            for side in [ej, sc] {
                side.note(format!("operations per transaction not measured: {e}"));
            }
            return;
        }
    };
    for (elasticjob, before, after, executions) in windows {
        let side = if elasticjob { &mut *ej } else { &mut *sc };
        let txns: Vec<Txn> = ops.range(before + 1..=after).map(|(_, t)| *t).collect();
        if txns.len() as i64 != after - before {
            side.note(format!(
                "the transaction log lacks some of zxid {before:#x}..{after:#x}: operations not counted there"
            ));
            continue;
        }
        let own: Vec<&Txn> = txns.iter().filter(|t| !t.server).collect();
        let reaped = txns.len() - own.len();
        if reaped > 0 {
            side.note(format!(
                "the window zxid {before:#x}..{after:#x} holds {reaped} transaction(s) of ZooKeeper's own container reaper (deleteContainer, session 0), counted in the zxid figure, not in the members' own"
            ));
        }
        side.add(fig::OWN_TXNS, own.len() as f64 / executions);
        side.add(
            fig::WRITE_OPS,
            f64::from(own.iter().map(|t| t.writes).sum::<u32>()) / executions,
        );
        side.add(
            fig::CHECK_OPS,
            f64::from(own.iter().map(|t| t.checks).sum::<u32>()) / executions,
        );
    }
}

fn main() {
    // The shardcar member's worker is this program re-executed.
    child::main_if_child();
    let started = Instant::now();
    let rounds: usize = std::env::var("SIDE_BY_SIDE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(5);
    let logs = match std::env::var_os("SHARDCAR_TEST_LOG_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let dir = std::env::temp_dir().join(format!(
                "shardcar-side-by-side-{}",
                chrono::Local::now().format("%Y%m%d-%H%M%S")
            ));
            // Set before any thread starts: the harness's sidecars copy their logs there.
            std::env::set_var("SHARDCAR_TEST_LOG_DIR", &dir);
            dir
        }
    };
    let _ = std::fs::create_dir_all(&logs);
    let java = build_elasticjob_member();
    if let Err(e) = &java {
        eprintln!("side_by_side: ElasticJob will not be measured: {e}");
    }
    let env = Env {
        started,
        logs,
        java,
        load_at_start: loadavg(),
        windows: Mutex::new(Vec::new()),
        last_round_end: Mutex::new(None),
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let zk = ZooKeeper::start().await;
        // Reads the namespaces after SIGTERMs (its own session makes no transactions).
        let watch = zookeeper_client::Client::connect(&zk.connect_string())
            .await
            .expect("a ZooKeeper client");
        let zk_version = four_letter_word(zk.client_port(0), "srvr")
            .await
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Zookeeper version: "))
                    .map(|v| v.split([',', '-']).next().unwrap_or(v).trim().to_string())
            })
            .unwrap_or_else(|| "version unknown".into());
        env.progress(&format!(
            "ZooKeeper {zk_version} at {}; {rounds} rounds per system, interleaved",
            zk.connect_string()
        ));
        let (mut ej, mut sc) = (Side::default(), Side::default());
        if let Err(e) = &env.java {
            ej.unavailable = Some(e.clone());
        }
        let only = std::env::var("SIDE_BY_SIDE_ONLY").unwrap_or_default();
        if only == "shardcar" {
            ej.unavailable = Some("left out (SIDE_BY_SIDE_ONLY=shardcar)".into());
        }
        let skip_shardcar = only == "elasticjob";
        if skip_shardcar {
            sc.unavailable = Some("left out (SIDE_BY_SIDE_ONLY=elasticjob)".into());
        }
        for round in 1..=rounds {
            if ej.unavailable.is_none() {
                if let Err(e) = elasticjob_round(&env, &zk, &watch, round, &mut ej).await {
                    ej.note(format!("round {round} stopped early: {e}"));
                }
                *env.last_round_end.lock().unwrap() = Some(Instant::now());
            }
            if skip_shardcar {
                continue;
            }
            if let Err(e) = shardcar_round(&env, &zk, &watch, round, &mut sc).await {
                sc.note(format!("round {round} stopped early: {e}"));
            }
            *env.last_round_end.lock().unwrap() = Some(Instant::now());
        }
        let kept = keep_txn_logs(&env, &zk);
        window_operations(&env, kept, &mut ej, &mut sc);
        println!();
        print_raw("ElasticJob", &ej);
        print_raw("shardcar", &sc);
        print_report(&env, rounds, &zk_version, &ej, &sc);
        env.progress("done");
    });
}
