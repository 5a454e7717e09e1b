//! Benchmarks of the sidecar core against a real ZooKeeper and real `shardcar` processes.
//! ZooKeeper is one node whose JVM runs with its own defaults, as in production (full JIT;
//! the tests' JVM stops at the first compiler tier to start sooner), without fsync.
//! It prints figures; it asserts nothing (timings on shared machines are noisy).
//!
//! Run: `cargo bench --bench core` (release build of the sidecar and of this program);
//! `cargo bench --bench core -- trigger` runs only the figures whose names start so
//! (floor, resharding, growth, trigger, scale1000, scale500, standalone, transactions,
//! failover, retry, resident; `scale` runs both scale figures, or the shapes `SHARDCAR_BENCH_SCALE=200x64,1000x8`
//! names, and `standalone` runs the same shapes on a standalone sidecar).
//!
//! Figures:
//! 1. floor: ZooKeeper's own latency here for the writes a trigger makes (a plain client);
//! 2. resharding: a new worker's `Subscribe` → every worker of the job holds its new
//!    assignment (3 sidecars, 10 workers, 20 joins);
//! 3. growth: the same as one job's workers grow from 1 to 100 (per band of worker counts);
//! 4. trigger latency: cron fire instant → `Trigger` received (1 sidecar, 1 and 100 jobs
//!    firing every second, workers answering at once), stage by stage, and for many jobs the
//!    first, median and last trigger of each instant; the one-job window is
//!    10 s unless `SHARDCAR_BENCH_ONE_JOB_SECONDS` says otherwise (1000 s gives 1000 fires);
//!    with each: items answered per second, transactions per execution, the sidecar's CPU,
//!    memory and threads (the memory after the warm-up and the window: the executions the
//!    sidecar remembers fill up meanwhile). Before each window on ZooKeeper, the load runs
//!    until ZooKeeper's JIT compiler is quiet (at most 180 s): the figures are those of a
//!    warm ZooKeeper;
//! 5. scale: the same with 1000 jobs x 8 items and with 500 jobs x 64 items; `standalone`,
//!    the same shapes on a standalone sidecar (in-memory registry): what the sidecar itself
//!    does with no ZooKeeper sharing the machine's cores;
//! 6. transactions: ZooKeeper transactions per execution for 1, 8 and 64 items;
//! 7. failover: a worker process SIGKILLed mid-execution → its item's FAILOVER trigger at a
//!    worker on another sidecar, and at one on its own sidecar
//!    (`SHARDCAR_BENCH_FAILOVER_ROUNDS` rounds each, 10 by default); and the same for a
//!    sidecar SIGKILLed (default 10 s session);
//! 8. retry: a failed item's backoff's end → its RETRY trigger received (`core/retry.rs`);
//! 9. resident: hand-off times of a resident job's items on a join and a leave
//!    (`core/resident.rs`).
//!
//! The sidecars run at the default settings unless told otherwise:
//! `SHARDCAR_BENCH_CLAIM_AHEAD=<duration>` runs the trigger and scale sidecars with that
//! `--claim-ahead` (the longest lead; 500ms by default; `0s` claims each run at its instant),
//! `SHARDCAR_BENCH_CLAIM_LEAD=<duration>` with that lead fixed for every instant (`auto` by
//! default: sized for each instant).
//! `SHARDCAR_BENCH_TRANSPORT=unix` has their workers connect over a Unix socket instead of TCP
//! on 127.0.0.1.
//! `SHARDCAR_BENCH_JOBS_PER_CONNECTION=K` has the workers of K jobs share each connection (one
//! worker process running K jobs), instead of one connection per worker.
//! `SHARDCAR_BENCH_WORK=<duration>` has the trigger and scale workers work on each trigger for
//! that long before they answer, as a job that takes that long would (they answer at once
//! otherwise).
//!
//! With many jobs, the trigger figures also print the CPU each process used in the 50 ms around
//! each instant (from 5 ms before it): the sidecar, the workers (this program) and ZooKeeper
//! share the machine's cores, and an instant's last triggers wait for all three.
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
#[path = "core/resident.rs"]
mod resident;
#[path = "core/retry.rs"]
mod retry;

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{job_config, subscribe_request, Sidecar, SidecarOptions, TestWorker, ZooKeeper};
use measure::percentile;
use shardcar::proto::subscribe_response::Event;
use shardcar::proto::JobConfig;

const NEVER: &str = "0 0 0 1 1 ? 2099";

fn report(name: &str, unit: &str, mut samples: Vec<f64>) {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{name}: n={} median={:.2}{unit} p99={:.2}{unit} min={:.2}{unit} max={:.2}{unit}",
        samples.len(),
        percentile(&samples, 50.0),
        percentile(&samples, 99.0),
        samples.first().copied().unwrap_or(f64::NAN),
        samples.last().copied().unwrap_or(f64::NAN),
    );
}

/// With many jobs firing at each instant: whether a tail is a few instants slow as a whole or
/// every instant's last triggers. For each instant with a trigger from every job, the first and
/// the last of its triggers to arrive, and its median (a slow instant's first trigger is on time
/// if the timer was, and only the rest trail).
fn instant_spread(jobs: usize, per_instant: &std::collections::BTreeMap<i64, Vec<f64>>) {
    if jobs < 2 {
        return;
    }
    let whole: Vec<Vec<f64>> = per_instant
        .values()
        .filter(|v| v.len() >= jobs)
        .map(|v| {
            let mut v = v.clone();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v
        })
        .collect();
    let label = |what: &str| format!("  instants ({jobs} jobs): {what} of each instant");
    report(
        &label("first trigger"),
        "ms",
        whole.iter().map(|v| v[0]).collect(),
    );
    report(
        &label("median trigger"),
        "ms",
        whole.iter().map(|v| percentile(v, 50.0)).collect(),
    );
    report(
        &label("last trigger"),
        "ms",
        whole.iter().map(|v| v[v.len() - 1]).collect(),
    );
}

fn partitioned(workers: &[TestWorker], total: i32) -> bool {
    let mut seen = BTreeSet::new();
    for w in workers {
        for i in w.current_items() {
            if !seen.insert(i) {
                return false;
            }
        }
    }
    seen == (0..total).collect()
}

async fn wait_partitioned(workers: &[TestWorker], total: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !partitioned(workers, total) {
        assert!(
            Instant::now() < deadline,
            "workers never partitioned the items"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn last_assignment_at(w: &TestWorker) -> Option<Instant> {
    w.assignments().last().map(|(at, _)| *at)
}

async fn zxid(zk: &ZooKeeper) -> i64 {
    measure::zxid(zk).await.expect("ZooKeeper's zxid")
}

fn rss_kib(pid: u32) -> u64 {
    measure::proc_field(pid, "VmRSS:").unwrap_or(0.0) as u64
}

/// "RSS {total} KiB ({anon} anonymous, {file} mapped from files such as the binary)".
fn rss_parts(pid: u32) -> String {
    let field = |name: &str| measure::proc_field(pid, name).unwrap_or(0.0) as u64;
    format!(
        "{} KiB ({} anonymous, {} from files)",
        field("VmRSS:"),
        field("RssAnon:"),
        field("RssFile:")
    )
}

fn threads(pid: u32) -> u64 {
    measure::proc_field(pid, "Threads:").unwrap_or(0.0) as u64
}

/// Sleeps until the next wall-clock instant at `frac` of a second (0.5: half past), and
/// returns that instant in seconds since the epoch.
async fn at_fraction_of_second(frac: f64) -> f64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let target = (now - frac).floor() + 1.0 + frac;
    tokio::time::sleep(Duration::from_secs_f64(target - now)).await;
    target
}

/// The triggers `w` received for fires strictly between `from` and `to` (seconds since the
/// epoch).
fn fired_between(w: &TestWorker, from: f64, to: f64) -> usize {
    w.triggers()
        .into_iter()
        .filter(|(_, t)| {
            let fire = t.fire_time.as_ref().unwrap();
            let fire = fire.seconds as f64 + fire.nanos as f64 / 1e9;
            fire > from && fire < to
        })
        .count()
}

/// ZooKeeper transactions per execution for one job of `items` items, one worker answering at
/// once, firing every second: the start and the end are one multi-op each, whatever the count.
/// The window runs from half past one second to half past another, so it holds whole runs
/// (fires are on the second and answered within it); its runs are those fired inside it.
async fn bench_transactions_per_item_count() {
    // A ZooKeeper of its own: the count is ZooKeeper's whole zxid, which the sidecars of
    // earlier figures could still move (a sidecar stopped drains its jobs).
    let zk = &ZooKeeper::start_with_jvm_defaults().await;
    for items in [1, 8, 64] {
        let ns = format!("bench-txns-{items}");
        let options = SidecarOptions {
            namespace: ns.clone(),
            log_level: "warn".into(),
            ..SidecarOptions::zk(zk.connect_string(), "127.0.0.2")
        };
        let car = Sidecar::start(options).await;
        let w = TestWorker::subscribe(
            &car.endpoint(),
            subscribe_request(job_config("job", "* * * * * ?", items)),
        )
        .await
        .unwrap();
        w.set_auto_complete(true);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let from = at_fraction_of_second(0.5).await;
        let zxid_before = zxid(zk).await;
        tokio::time::sleep(Duration::from_secs(9)).await;
        let to = at_fraction_of_second(0.5).await;
        let zxid_after = zxid(zk).await;
        let runs = fired_between(&w, from, to);
        println!(
            "zookeeper: {items} items: {} transactions for {runs} executions = {:.2} per execution (threads: {})",
            zxid_after - zxid_before,
            (zxid_after - zxid_before) as f64 / runs.max(1) as f64,
            threads(car.pid())
        );
    }
    bench_requests_with_a_peer(zk).await;
}

/// The requests ZooKeeper has received from every session, pings included: the `Received`
/// line of `srvr`.
async fn requests_received(zk: &ZooKeeper) -> i64 {
    let srvr = common::zookeeper::four_letter_word(zk.client_port(0), "srvr")
        .await
        .expect("ZooKeeper answers srvr");
    srvr.lines()
        .find_map(|l| l.strip_prefix("Received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Received line in srvr")
}

/// Requests ZooKeeper receives per execution when two sidecars share a job of 8 items (a
/// worker on each, answering at once, a fire every second): each sidecar also reads what the
/// other's writes changed, which its watch tells it of node by node.
async fn bench_requests_with_a_peer(zk: &ZooKeeper) {
    let ns = "bench-requests-peer";
    let mut cars = Vec::new();
    let mut workers = Vec::new();
    for ip in ["127.0.0.2", "127.0.0.3"] {
        let options = SidecarOptions {
            namespace: ns.to_string(),
            log_level: "warn".into(),
            ..SidecarOptions::zk(zk.connect_string(), ip)
        };
        let car = Sidecar::start(options).await;
        let w = TestWorker::subscribe(
            &car.endpoint(),
            subscribe_request(job_config("job", "* * * * * ?", 8)),
        )
        .await
        .unwrap();
        w.set_auto_complete(true);
        cars.push(car);
        workers.push(w);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let from = at_fraction_of_second(0.5).await;
    let before = requests_received(zk).await;
    tokio::time::sleep(Duration::from_secs(9)).await;
    let to = at_fraction_of_second(0.5).await;
    let after = requests_received(zk).await;
    let runs: usize = workers.iter().map(|w| fired_between(w, from, to)).sum();
    println!(
        "zookeeper: 2 sidecars sharing 8 items: {} requests received for {runs} executions = {:.2} per execution (every session's, pings included)",
        after - before,
        (after - before) as f64 / runs.max(1) as f64,
    );
}

/// The floor: what ZooKeeper itself takes here for the writes a trigger makes, from one plain
/// client session (no sidecar): a create, a read and a 2-item start multi (check the instance;
/// per item: bump it, check its owner, create and set its `running` node), back to back; and
/// the same multi once every 250 ms, as a fire meets an idle machine (threads asleep on both
/// sides of the socket, which costs on a VM), and so again 2 ms after a read was sent, as the
/// sidecar warms the session up before a cron instant.
async fn bench_zookeeper_floor(zk: &ZooKeeper) {
    use zookeeper_client::{Acls, Client, CreateMode};
    let client = Client::connect(&zk.connect_string()).await.unwrap();
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    client
        .create("/bench-floor", b"", &persistent)
        .await
        .unwrap();
    client
        .create("/bench-floor/instance", b"", &ephemeral)
        .await
        .unwrap();
    for i in 0..2 {
        client
            .create(&format!("/bench-floor/item{i}"), b"", &persistent)
            .await
            .unwrap();
    }
    let start_multi = || async {
        let started = Instant::now();
        let mut w = client.new_multi_writer();
        w.add_check_version("/bench-floor/instance", -1).unwrap();
        for i in 0..2 {
            let item = format!("/bench-floor/item{i}");
            let running = format!("/bench-floor/running{i}");
            w.add_set_data(&item, b"", None).unwrap();
            w.add_check_version(&item, -1).unwrap();
            w.add_create(&running, b"i", &ephemeral).unwrap();
            w.add_set_data(&running, b"i", Some(0)).unwrap();
        }
        w.commit().await.unwrap();
        let took = started.elapsed().as_secs_f64() * 1000.0;
        for i in 0..2 {
            client
                .delete(&format!("/bench-floor/running{i}"), None)
                .await
                .unwrap();
        }
        took
    };
    let (mut create, mut get, mut multi) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..1000 {
        let started = Instant::now();
        client
            .create(&format!("/bench-floor/c{i}"), b"x", &persistent)
            .await
            .unwrap();
        create.push(started.elapsed().as_secs_f64() * 1000.0);
        let started = Instant::now();
        client.get_data("/bench-floor/item0").await.unwrap();
        get.push(started.elapsed().as_secs_f64() * 1000.0);
        multi.push(start_multi().await);
    }
    report("zookeeper floor: create, back to back", "ms", create);
    report("zookeeper floor: get_data, back to back", "ms", get);
    report(
        "zookeeper floor: 2-item start multi, back to back",
        "ms",
        multi,
    );
    // Alternately: the multi alone, and the multi 2 ms after a read was sent (the sidecar's
    // warm-up before a cron instant, `zk_warm_up`).
    let (mut paced, mut warmed) = (Vec::new(), Vec::new());
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        paced.push(start_multi().await);
        tokio::time::sleep(Duration::from_millis(248)).await;
        let reader = client.clone();
        tokio::spawn(async move { reader.check_stat("/bench-floor").await });
        tokio::time::sleep(Duration::from_millis(2)).await;
        warmed.push(start_multi().await);
    }
    report(
        "zookeeper floor: 2-item start multi, one every 250 ms",
        "ms",
        paced,
    );
    report(
        "zookeeper floor: 2-item start multi, one every 250 ms, 2 ms after a read",
        "ms",
        warmed,
    );
    bench_zookeeper_floor_many(&client, 100, 2, 100).await;
    bench_zookeeper_floor_many(&client, 1000, 8, 100).await;
}

/// ZooKeeper's floor for many jobs firing at once: `jobs` trees like a job's (an instance node,
/// `items` items), each watched recursively as the sidecar watches a job; then one start multi-op
/// per job (the sidecar's writes: fence, owner check, `running` node created and set), all sent
/// at once on the one session; and the same writes as multi-ops of `group` jobs each, all sent at
/// once (one multi-op for 100 jobs; 1000 jobs in one would pass ZooKeeper's 1 MB limit).
async fn bench_zookeeper_floor_many(
    client: &zookeeper_client::Client,
    jobs: usize,
    items: usize,
    group: usize,
) {
    use zookeeper_client::{Acls, AddWatchMode, CreateMode};
    const ROUNDS: usize = 20;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let root = |j: usize| format!("/bench-floor-{jobs}x{items}-{j}");
    let mut watchers = Vec::new();
    for j in 0..jobs {
        let mut w = client.new_multi_writer();
        w.add_create(&root(j), b"", &persistent).unwrap();
        w.add_create(&format!("{}/instance", root(j)), b"", &ephemeral)
            .unwrap();
        for i in 0..items {
            w.add_create(&format!("{}/item{i}", root(j)), b"", &persistent)
                .unwrap();
            w.add_create(&format!("{}/owner{i}", root(j)), b"", &persistent)
                .unwrap();
        }
        w.commit().await.unwrap();
        let mut watcher = client
            .watch(&root(j), AddWatchMode::PersistentRecursive)
            .await
            .unwrap();
        watchers.push(tokio::spawn(async move {
            loop {
                watcher.changed().await;
            }
        }));
    }
    let add_start = |w: &mut zookeeper_client::MultiWriter, j: usize| {
        w.add_check_version(&format!("{}/instance", root(j)), -1)
            .unwrap();
        for i in 0..items {
            let running = format!("{}/running{i}", root(j));
            w.add_set_data(&format!("{}/item{i}", root(j)), b"", None)
                .unwrap();
            w.add_check_version(&format!("{}/owner{i}", root(j)), 0)
                .unwrap();
            w.add_create(&running, b"i", &ephemeral).unwrap();
            w.add_set_data(&running, b"i", Some(0)).unwrap();
        }
    };
    let clean = || async {
        let mut w = client.new_multi_writer();
        for j in 0..jobs {
            for i in 0..items {
                w.add_delete(&format!("{}/running{i}", root(j)), None)
                    .unwrap();
            }
        }
        w.commit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Every job's start multi-op, in multi-ops of `size` jobs, all sent at once; when each was
    // answered (ms since the first was sent).
    let send_in = |size: usize| {
        let started = Instant::now();
        let commits = (0..jobs).step_by(size).map(move |first| {
            let mut w = client.new_multi_writer();
            for j in first..jobs.min(first + size) {
                add_start(&mut w, j);
            }
            async move {
                w.commit().await.unwrap();
                started.elapsed().as_secs_f64() * 1000.0
            }
        });
        futures::future::join_all(commits)
    };
    let (mut each, mut last, mut one) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let took = send_in(1).await;
        last.push(took.iter().copied().fold(0.0, f64::max));
        each.extend(took);
        clean().await;
        let took = send_in(group).await;
        one.push(took.iter().copied().fold(0.0, f64::max));
        clean().await;
    }
    let label = |what: &str| {
        format!("zookeeper floor: {jobs} watched {items}-item start multis sent at once, {what}")
    };
    report(&label("each"), "ms", each);
    report(&label("the last"), "ms", last);
    let grouped = if group >= jobs {
        "all as one multi".to_string()
    } else {
        format!("as multis of {group} jobs each, the last")
    };
    report(&label(&grouped), "ms", one);
    for w in watchers {
        w.abort();
    }
}

/// Three sidecars of namespace `ns`, as three hosts.
async fn three_sidecars(zk: &ZooKeeper, ns: &str) -> Vec<Sidecar> {
    let mut cars = Vec::new();
    for ip in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        let options = SidecarOptions {
            namespace: ns.into(),
            log_level: "warn".into(),
            ..SidecarOptions::zk(zk.connect_string(), ip)
        };
        cars.push(Sidecar::start(options).await);
    }
    cars
}

/// Waits (at most 10 s) until every worker has an assignment newer than the one it had
/// (`before`, by index; a new worker has none); returns when the last of them came.
async fn all_reassigned(workers: &[TestWorker], before: &[Option<Instant>]) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(10);
    while workers
        .iter()
        .zip(before)
        .any(|(w, b)| last_assignment_at(w) == *b)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    workers.iter().filter_map(last_assignment_at).max().unwrap()
}

async fn bench_resharding(zk: &ZooKeeper) {
    let ns = "bench-reshard";
    let cars = three_sidecars(zk, ns).await;
    let config = job_config("reshard", NEVER, 30);
    let mut workers = Vec::new();
    for i in 0..10 {
        workers.push(
            TestWorker::subscribe(&cars[i % 3].endpoint(), subscribe_request(config.clone()))
                .await
                .unwrap(),
        );
    }
    wait_partitioned(&workers, 30).await;
    let mut samples = Vec::new();
    for round in 0..20 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before: Vec<Option<Instant>> = workers.iter().map(last_assignment_at).collect();
        let started = Instant::now();
        let joiner = TestWorker::subscribe(
            &cars[round % 3].endpoint(),
            subscribe_request(config.clone()),
        )
        .await
        .unwrap();
        workers.push(joiner);
        wait_partitioned(&workers, 30).await;
        // Wait until every old worker saw a newer assignment (epoch changes for everyone).
        let done = all_reassigned(&workers, &before).await;
        samples.push(done.duration_since(started).as_secs_f64() * 1000.0);
        let mut leaver = workers.pop().unwrap();
        leaver.close().await;
        wait_partitioned(&workers, 30).await;
    }
    report(
        "reshard: Subscribe -> all 11 workers hold the new assignment (3 sidecars)",
        "ms",
        samples,
    );
}

/// Resharding as one job's workers grow from 1 to 100 (3 sidecars, 200 items): each new
/// worker's `Subscribe` -> every worker holds its assignment of the new sharding; reported per
/// band of worker counts.
async fn bench_growth(zk: &ZooKeeper) {
    let ns = "bench-growth";
    let cars = three_sidecars(zk, ns).await;
    let total = 200;
    let config = job_config("growth", NEVER, total);
    let mut workers: Vec<TestWorker> = Vec::new();
    let bands = [(2, 10), (11, 25), (26, 50), (51, 100)];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); bands.len()];
    for n in 1..=100usize {
        let before: Vec<Option<Instant>> = workers.iter().map(last_assignment_at).collect();
        let started = Instant::now();
        let joiner =
            TestWorker::subscribe(&cars[n % 3].endpoint(), subscribe_request(config.clone()))
                .await
                .unwrap();
        workers.push(joiner);
        wait_partitioned(&workers, total).await;
        let done = all_reassigned(&workers, &before).await;
        let took = done.duration_since(started).as_secs_f64() * 1000.0;
        if let Some(band) = bands.iter().position(|(lo, hi)| (*lo..=*hi).contains(&n)) {
            samples[band].push(took);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for ((lo, hi), band) in bands.iter().zip(samples) {
        report(
            &format!(
                "growth: Subscribe of worker {lo}..{hi} -> all hold the new assignment (1 job, {total} items, 3 sidecars)"
            ),
            "ms",
            band,
        );
    }
    println!(
        "memory: sidecars with 1 job and 100 workers: RSS {} KiB, {} KiB, {} KiB",
        rss_kib(cars[0].pid()),
        rss_kib(cars[1].pid()),
        rss_kib(cars[2].pid())
    );
}

/// ZooKeeper's JIT compiler counts as quiet once its threads have used at most this much CPU
/// (seconds) over the last `JIT_QUIET_OVER`; a warm-up gives up after `JIT_WAIT_MAX`.
const JIT_QUIET_CPU: f64 = 0.02;
const JIT_QUIET_OVER: Duration = Duration::from_secs(10);
const JIT_WAIT_MAX: Duration = Duration::from_secs(180);

/// Waits, under the load already running, until the JVM `pid`'s JIT compiler is quiet (or
/// `JIT_WAIT_MAX` has passed). Returns how long it waited and the compiler's CPU seconds over
/// the last `JIT_QUIET_OVER`.
async fn until_jit_quiet(pid: u32) -> (Duration, f64) {
    let start = Instant::now();
    let mut seen = std::collections::VecDeque::from([(start, jit_seconds(pid))]);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = (Instant::now(), jit_seconds(pid));
        seen.push_back(now);
        while seen[1].0 <= now.0 - JIT_QUIET_OVER {
            seen.pop_front();
        }
        let (since, cpu_then) = seen[0];
        let recent = now.1 - cpu_then;
        let waited = now.0 - start;
        if (now.0 - since >= JIT_QUIET_OVER && recent <= JIT_QUIET_CPU) || waited >= JIT_WAIT_MAX {
            return (waited, recent);
        }
    }
}

/// CPU seconds of a JVM's JIT compiler threads (HotSpot names them `C1 CompilerThread<n>`
/// and `C2 CompilerThread<n>`; the kernel keeps the first 15 bytes of a thread's name).
fn jit_seconds(pid: u32) -> f64 {
    threads_of(pid)
        .filter(|t| {
            std::fs::read_to_string(t.join("comm"))
                .is_ok_and(|c| c.starts_with("C1 Compiler") || c.starts_with("C2 Compiler"))
        })
        .map(|t| cpu_seconds_of(t.join("stat")))
        .sum()
}

/// The directories (`/proc/<pid>/task/<tid>`) of the threads of `pid` alive now; none if the
/// process is gone.
fn threads_of(pid: u32) -> impl Iterator<Item = std::path::PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|t| t.path())
}

/// From 5 ms before each whole second (the instants every job here fires at) to 45 ms after
/// it, until `until`: how long each window was as read, and the CPU (ms) each of `pids` used
/// in it. Runs on a thread of its own, so that a busy runtime does not delay the reads. The
/// windows are read in the order of `pids` before and in reverse after, so that the last
/// process's window holds none of the reading of the others (the caller's own process goes
/// last).
fn cpu_at_instants(pids: Vec<u32>, until: Instant) -> (Vec<f64>, Vec<Vec<f64>>) {
    let mut lengths = Vec::new();
    let mut used = vec![Vec::new(); pids.len()];
    loop {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        // The next window's start: 5 ms before the next whole second, or the one after it if
        // that is already past (in the last 5 ms of a second).
        let mut start = Duration::from_secs(now.as_secs() + 1) - Duration::from_millis(5);
        if start <= now {
            start += Duration::from_secs(1);
        }
        let to_start = start - now;
        if Instant::now() + to_start + Duration::from_millis(50) > until {
            return (lengths, used);
        }
        std::thread::sleep(to_start);
        let started = Instant::now();
        let before: Vec<u64> = pids.iter().map(|pid| cpu_ns(*pid)).collect();
        std::thread::sleep(Duration::from_millis(50));
        let mut after: Vec<u64> = pids.iter().rev().map(|pid| cpu_ns(*pid)).collect();
        after.reverse();
        lengths.push(started.elapsed().as_secs_f64() * 1000.0);
        for (i, (b, a)) in before.iter().zip(after).enumerate() {
            used[i].push(a.saturating_sub(*b) as f64 / 1e6);
        }
    }
}

/// CPU time (ns) the threads of `pid` alive now have used (`/proc/<pid>/task/*/schedstat`:
/// nanoseconds, where `stat` counts ticks of 10 ms, too coarse for a 50 ms window).
fn cpu_ns(pid: u32) -> u64 {
    threads_of(pid)
        .filter_map(|t| std::fs::read_to_string(t.join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// CPU time (user + system) the process has used, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    cpu_seconds_of(format!("/proc/{pid}/stat"))
}

/// CPU seconds of a process's or a thread's `stat` file.
fn cpu_seconds_of(stat_path: impl AsRef<std::path::Path>) -> f64 {
    let stat = std::fs::read_to_string(stat_path).unwrap_or_default();
    // The fields after the command (which may hold spaces) start after its closing paren.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
    (ticks(11) + ticks(12)) / clock_ticks_per_second()
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`), asked once: the warm-up reads
/// ZooKeeper's compiler threads every second.
fn clock_ticks_per_second() -> f64 {
    static HZ: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .unwrap_or(100.0)
    })
}

/// `jobs` jobs of `items` items each, one worker per job on one sidecar, firing every second,
/// workers answering at once: fire instant -> trigger latency (with its stages), items
/// triggered and answered per second, ZooKeeper transactions, the sidecar's CPU, memory and
/// threads. Measured over `window`.
/// With `zk` None, the sidecar runs standalone on its in-memory registry: what the sidecar
/// itself can do, with no ZooKeeper sharing the machine's cores.
async fn bench_triggers(zk: Option<&ZooKeeper>, jobs: usize, items: i32, window: Duration) {
    let ns = format!("bench-trigger-{jobs}x{items}");
    let registry = match zk {
        Some(zk) => SidecarOptions::zk(zk.connect_string(), "127.0.0.2"),
        None => SidecarOptions::standalone(),
    };
    let claim_ahead = std::env::var("SHARDCAR_BENCH_CLAIM_AHEAD").ok();
    let claim_lead = std::env::var("SHARDCAR_BENCH_CLAIM_LEAD").ok();
    let unix_socket = unix_socket_from_env();
    let per_connection = jobs_per_connection_from_env();
    let work = work_from_env();
    let options = SidecarOptions {
        namespace: ns.clone(),
        log_level: "warn".into(),
        unix_socket,
        // The default session timeout (the harness's is 4 s): ZooKeeper calls may take 2.5 s.
        session_timeout: Duration::from_secs(10),
        extra_args: claim_ahead
            .iter()
            .flat_map(|d| ["--claim-ahead".to_string(), d.clone()])
            .chain(
                claim_lead
                    .iter()
                    .flat_map(|d| ["--claim-lead".to_string(), d.clone()]),
            )
            .collect(),
        ..registry
    };
    let on = format!(
        "{}, claim_ahead {}, claim_lead {}, workers over {}{}{}",
        if zk.is_some() { "" } else { ", standalone" },
        claim_ahead.as_deref().unwrap_or("500ms (default)"),
        claim_lead.as_deref().unwrap_or("auto (default)"),
        if unix_socket {
            "a Unix socket"
        } else {
            "TCP loopback"
        },
        if per_connection > 1 {
            format!(", the workers of {per_connection} jobs on each connection")
        } else {
            String::new()
        },
        if work.is_zero() {
            String::new()
        } else {
            format!(", each trigger worked on for {work:?} before its answer")
        }
    );
    let car = Sidecar::start(options).await;
    let rss_idle = rss_parts(car.pid());
    let mut workers = Vec::new();
    let mut refusals = 0;
    // Jobs are set up not firing, then all armed at once (below): jobs firing while the rest
    // subscribe would slow the setup, and a sidecar past its capacity might not finish it.
    // Standalone, the jobs fire every second from the start: setting them up takes no
    // ZooKeeper round trips, so firing jobs hardly slow it.
    let cron = if zk.is_some() { NEVER } else { "* * * * * ?" };
    let mut channel = None;
    for j in 0..jobs {
        let request = subscribe_request(job_config(&format!("job{j}"), cron, items));
        if j % per_connection == 0 {
            channel = None;
        }
        // UNAVAILABLE ("subscribe again shortly") is retried as the clients do.
        let w = loop {
            let subscribed = if per_connection > 1 {
                let channel = match &channel {
                    Some(channel) => channel,
                    None => channel.insert(
                        shardcar::ctl::connect(&car.endpoint())
                            .await
                            .expect("a connection to the sidecar"),
                    ),
                };
                TestWorker::subscribe_on(&car.endpoint(), channel.clone(), request.clone()).await
            } else {
                TestWorker::subscribe(&car.endpoint(), request.clone()).await
            };
            match subscribed {
                Ok(w) => break Some(w),
                Err(e) if e.code() == tonic::Code::Unavailable && refusals < 100 => {
                    refusals += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    println!(
                        "setup ({jobs} jobs x {items} items): job{j} could not subscribe ({}: {}); measuring the {j} jobs that did",
                        e.code(),
                        e.message()
                    );
                    break None;
                }
            }
        };
        let Some(w) = w else { break };
        w.set_auto_complete_after(work);
        workers.push(w);
    }
    let jobs = workers.len();
    if refusals > 0 {
        println!("setup ({jobs} jobs x {items} items): {refusals} subscriptions refused as UNAVAILABLE and retried");
    }
    // Let it settle (every job set up, elected and sharded), arm every job to fire every
    // second (its config node rewritten, as ElasticJob's console does), then measure.
    tokio::time::sleep(Duration::from_secs(3 + (jobs / 200) as u64)).await;
    if let Some(zk) = zk {
        arm_every_second(zk, &ns, jobs).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // ZooKeeper's JVM compiles the code this load runs for a minute or more after the load
    // starts, its compiler threads taking most of a core in bursts; measured then, the figures
    // would be those of a ZooKeeper still warming up, not of one that has served for days.
    if let Some(zk) = zk {
        let (waited, recent) = until_jit_quiet(zk.pid(0).expect("ZooKeeper runs")).await;
        println!(
            "warm-up ({jobs} jobs x {items} items): ZooKeeper's JIT compiler {} after {:.0} s of this load ({:.0} ms of CPU in the last {} s)",
            if recent <= JIT_QUIET_CPU { "quiet" } else { "still busy, measuring anyway," },
            waited.as_secs_f64(),
            recent * 1000.0,
            JIT_QUIET_OVER.as_secs(),
        );
    }
    let zxid_before = match zk {
        Some(zk) => zxid(zk).await,
        None => 0,
    };
    let cpu_before = cpu_seconds(car.pid());
    // Where the rest of the machine goes: ZooKeeper's JVM, and the workers (this process).
    let zk_pid = zk.map(|zk| zk.pid(0).expect("ZooKeeper runs"));
    let others_before = (
        zk_pid.map_or(0.0, cpu_seconds),
        cpu_seconds(std::process::id()),
        zk_pid.map_or(0.0, jit_seconds),
    );
    let measured_from = Instant::now();
    let base_instant = Instant::now();
    let base_wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let window_start = workers.iter().map(|w| w.events().len()).collect::<Vec<_>>();
    // This process last: its window is read last before it and first after it, so that the
    // sampler's reads of the others are not counted as the workers' CPU.
    let mut at_instants_of = vec![("the sidecar", car.pid())];
    at_instants_of.extend(zk_pid.map(|pid| ("ZooKeeper", pid)));
    at_instants_of.push(("the workers", std::process::id()));
    let at_instants = (jobs > 1).then(|| {
        let pids = at_instants_of.iter().map(|(_, pid)| *pid).collect();
        tokio::task::spawn_blocking(move || cpu_at_instants(pids, measured_from + window))
    });
    tokio::time::sleep(window).await;
    let measured_to = Instant::now();
    let elapsed = measured_to.duration_since(measured_from).as_secs_f64();
    let cpu = cpu_seconds(car.pid()) - cpu_before;
    let zk_cpu = zk_pid.map_or(0.0, cpu_seconds) - others_before.0;
    let workers_cpu = cpu_seconds(std::process::id()) - others_before.1;
    let zk_jit_cpu = zk_pid.map_or(0.0, jit_seconds) - others_before.2;
    // Read while the load runs, before the stage breakdown's `ListExecutions` below: its
    // answer (the whole history, each execution with its events) is a heap peak of its own.
    let rss_loaded = rss_parts(car.pid());
    let zxid_after = match zk {
        Some(zk) => zxid(zk).await,
        None => 0,
    };
    let mut samples = Vec::new();
    // Fire instant (ms) -> the latencies of its triggers.
    let mut per_instant: std::collections::BTreeMap<i64, Vec<f64>> = Default::default();
    // Execution id -> when its trigger reached the worker (wall clock, seconds).
    let mut received = std::collections::HashMap::new();
    let mut items_triggered = 0usize;
    let mut sizes = std::collections::HashMap::new();
    for (w, skip) in workers.iter().zip(window_start) {
        for (at, event) in w.events().into_iter().skip(skip) {
            if let Some(Event::Trigger(t)) = event.event {
                let fire = t.fire_time.unwrap();
                let fire = fire.seconds as f64 + fire.nanos as f64 / 1e9;
                let arrival = if at >= base_instant {
                    base_wall + at.duration_since(base_instant).as_secs_f64()
                } else {
                    base_wall - base_instant.duration_since(at).as_secs_f64()
                };
                samples.push((arrival - fire) * 1000.0);
                // Whole milliseconds: the instants of one cron are whole seconds.
                per_instant
                    .entry((fire * 1000.0).round() as i64)
                    .or_default()
                    .push((arrival - fire) * 1000.0);
                items_triggered += t.items.len();
                sizes.insert(t.execution_id.clone(), t.items.len());
                received.insert(t.execution_id.clone(), arrival);
            }
        }
    }
    let mut items_answered = 0usize;
    let mut executions = 0usize;
    for w in &workers {
        for (execution, at) in w.answers() {
            if let Some(n) = sizes.get(&execution).filter(|_| at <= measured_to) {
                items_answered += n;
                executions += 1;
            }
        }
    }
    report(
        &format!(
            "trigger: cron fire instant -> Trigger received ({jobs} jobs x {items} items every second, 1 sidecar{on})"
        ),
        "ms",
        samples,
    );
    instant_spread(jobs, &per_instant);
    if let Some(at_instants) = at_instants {
        let (lengths, used) = at_instants.await.expect("the CPU sampler ends");
        let cores = std::thread::available_parallelism().map_or(0, usize::from);
        for ((name, _), used) in at_instants_of.iter().zip(used) {
            report(
                &format!("  cpu at the instants ({jobs} jobs): {name}, ms of CPU in the 50 ms from 5 ms before each instant ({cores} cores)"),
                "ms",
                used,
            );
        }
        report(
            &format!("  cpu at the instants ({jobs} jobs): the length of each window as read"),
            "ms",
            lengths,
        );
    }
    stage_breakdown(&car, jobs, &received).await;
    println!(
        "throughput ({jobs} jobs x {items} items{on}): {items_triggered} items triggered, {items_answered} answered and recorded in {elapsed:.1} s = {:.0} items/s; sidecar CPU {:.0}% of one core ({}the workers {:.0}%)",
        items_answered as f64 / elapsed,
        cpu / elapsed * 100.0,
        if zk.is_some() {
            format!(
                "ZooKeeper {:.0}% ({:.1}% of it compiling), ",
                zk_cpu / elapsed * 100.0,
                zk_jit_cpu / elapsed * 100.0
            )
        } else {
            String::new()
        },
        workers_cpu / elapsed * 100.0
    );
    let txns = zxid_after - zxid_before;
    if zk.is_some() {
        println!(
            "zookeeper: {txns} transactions for {executions} executions (1 instance each) = {:.2} transactions per execution per instance",
            txns as f64 / executions.max(1) as f64
        );
    }
    println!(
        "memory: sidecar RSS {} idle, {} with {jobs} jobs and {jobs} workers, {} after listing every execution of its history (ListExecutions); {} threads on {} cores",
        rss_idle,
        rss_loaded,
        rss_parts(car.pid()),
        threads(car.pid()),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
}

/// Rewrites the config node of `job0..job{jobs}` in namespace `ns` with the cron
/// `* * * * * ?` (every second).
async fn arm_every_second(zk: &ZooKeeper, ns: &str, jobs: usize) {
    use shardcar::elasticjob::config::JobConfiguration;
    let client = zookeeper_client::Client::connect(&zk.connect_string())
        .await
        .expect("a ZooKeeper client");
    for j in 0..jobs {
        let path = format!("/{ns}/job{j}/config");
        let (data, stat) = client.get_data(&path).await.expect("the job's config");
        let mut config = JobConfiguration::from_yaml(&data).expect("a readable config");
        config.cron = Some("* * * * * ?".into());
        client
            .set_data(&path, config.to_yaml().as_bytes(), Some(stat.version))
            .await
            .expect("the config rewritten");
    }
}

/// Where the time from a fire to its trigger goes, from the sidecar's own record of each
/// execution (`ListExecutions`: its start and the events of its span) and the worker's receipt.
async fn stage_breakdown(
    car: &Sidecar,
    jobs: usize,
    received: &std::collections::HashMap<String, f64>,
) {
    use shardcar::proto::admin_service_client::AdminServiceClient;
    let secs = |t: &prost_types::Timestamp| t.seconds as f64 + t.nanos as f64 / 1e9;
    // The whole history (1000 executions of 64 items each pass gRPC's default 4 MB limit).
    let mut admin = shardcar::ctl::connect(&car.endpoint())
        .await
        .map(AdminServiceClient::new)
        .unwrap()
        .max_decoding_message_size(256 << 20);
    let executions = admin
        .list_executions(shardcar::proto::ListExecutionsRequest {
            job_name: String::new(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .executions;
    // Runs claimed ahead of their instant (`claim_ahead`): the claim's write, how long before
    // the instant it was answered, and the instant (or the answer, if later) to the send. Runs
    // started at their instant: the timer's wake, the start's write, the send.
    let (mut claim, mut margin, mut at_instant) = (Vec::new(), Vec::new(), Vec::new());
    let (mut wake, mut write, mut send, mut wire) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for e in executions {
        let Some(arrival) = received.get(&e.execution_id) else {
            continue;
        };
        let at = |name: &str| {
            e.events
                .iter()
                .find(|v| v.name == name)
                .and_then(|v| v.at.as_ref())
                .map(secs)
        };
        let (Some(fire), Some(started), Some(written), Some(sent)) = (
            e.fire_time.as_ref().map(secs),
            e.started_at.as_ref().map(secs),
            at("running nodes written"),
            at("trigger sent"),
        ) else {
            continue;
        };
        match at("claimed ahead") {
            Some(claimed) => {
                claim.push((written - claimed) * 1000.0);
                margin.push((fire - written) * 1000.0);
                at_instant.push((sent - fire.max(written)) * 1000.0);
            }
            None => {
                wake.push((started - fire) * 1000.0);
                write.push((written - started) * 1000.0);
                send.push((sent - written) * 1000.0);
            }
        }
        wire.push((arrival - sent) * 1000.0);
    }
    let label = |stage: &str| format!("  stage ({jobs} jobs): {stage}");
    println!(
        "{}: {} runs claimed ahead of their instant, {} started at it",
        label("claim_ahead"),
        claim.len(),
        wake.len()
    );
    if !claim.is_empty() {
        report(
            &label("claimed ahead: notice -> running nodes written (the start multi-op)"),
            "ms",
            claim,
        );
        report(
            &label("claimed ahead: running nodes written -> fire instant (negative: late)"),
            "ms",
            margin,
        );
        report(
            &label("claimed ahead: fire instant (or the claim, if later) -> Trigger queued (timer wake, actor queue, lease check)"),
            "ms",
            at_instant,
        );
    }
    if !wake.is_empty() {
        report(
            &label("fire instant -> execution begun (timer wake, actor queue)"),
            "ms",
            wake,
        );
        report(
            &label("execution begun -> running nodes written (the start multi-op)"),
            "ms",
            write,
        );
        report(
            &label("running nodes written -> Trigger queued (lease check, send)"),
            "ms",
            send,
        );
    }
    report(
        &label("Trigger queued -> received by the worker (gRPC stream)"),
        "ms",
        wire,
    );
}

const FAILOVER_NEVER: &str = "0 0 0 1 1 ? 2099";

/// Starts a run of `instance` now (ElasticJob's trigger-once node).
async fn trigger_once(zk: &ZooKeeper, ns: &str, job: &str, instance: &str) {
    use zookeeper_client::{Acls, Client, CreateMode};
    let client = Client::connect(&zk.connect_string()).await.unwrap();
    let mode = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let _ = client
        .create(&format!("/{ns}/{job}/trigger"), b"", &mode)
        .await;
    client
        .create(&format!("/{ns}/{job}/trigger/{instance}"), b"", &mode)
        .await
        .unwrap();
}

/// Waits for a FAILOVER trigger naming `item` at `w`; returns when it arrived.
async fn failover_arrival(w: &TestWorker, item: i32) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = w.triggers().into_iter().find(|(_, t)| {
            t.source == shardcar::proto::TriggerSource::Failover as i32
                && t.items.iter().any(|i| i.item == item)
        });
        if let Some((at, _)) = found {
            return at;
        }
        assert!(
            Instant::now() < deadline,
            "no FAILOVER trigger for item {item}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Two sidecars of namespace `ns` (session `session`), a failover job on them, and an
/// answering worker on the second.
async fn failover_pair(
    zk: &ZooKeeper,
    ns: &str,
    session: Duration,
) -> (Vec<Sidecar>, JobConfig, TestWorker) {
    let mut cars = Vec::new();
    for ip in ["127.0.0.2", "127.0.0.3"] {
        let options = SidecarOptions {
            namespace: ns.to_string(),
            log_level: "warn".into(),
            session_timeout: session,
            ..SidecarOptions::zk(zk.connect_string(), ip)
        };
        cars.push(Sidecar::start(options).await);
    }
    let config = JobConfig {
        failover: true,
        ..job_config("fo", FAILOVER_NEVER, 2)
    };
    let survivor = TestWorker::subscribe(&cars[1].endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    survivor.set_auto_complete(true);
    (cars, config, survivor)
}

/// Waits until the answering worker holds its share (one item), i.e. the doomed worker has
/// joined and the leader resharded.
async fn wait_share(survivor: &TestWorker) {
    survivor
        .wait_items(|items| items.len() == 1, Duration::from_secs(30))
        .await
        .unwrap();
}

async fn bench_failover(zk: &ZooKeeper) {
    // `SHARDCAR_BENCH_FAILOVER_ROUNDS`: rounds of each worker-kill figure (10 by default).
    let rounds: usize = match std::env::var("SHARDCAR_BENCH_FAILOVER_ROUNDS") {
        Ok(v) => v.parse().ok().filter(|n| *n > 0).unwrap_or_else(|| {
            eprintln!("SHARDCAR_BENCH_FAILOVER_ROUNDS={v}: expected a whole number above 0");
            std::process::exit(2)
        }),
        Err(_) => 10,
    };
    // The doomed worker on the first sidecar (the survivor is on the second), then on the
    // survivor's own sidecar.
    for (doomed_car, label, tag) in [
        (0, "another sidecar", "worker"),
        (1, "its own sidecar (handed over in one write)", "same"),
    ] {
        let mut worker_kill = Vec::new();
        for round in 0..rounds {
            let ns = format!("bench-fo-{tag}-{round}");
            let (cars, config, survivor) = failover_pair(zk, &ns, Duration::from_secs(4)).await;
            let mut doomed =
                child::ChildWorker::spawn(&cars[doomed_car].endpoint(), subscribe_request(config))
                    .await;
            wait_share(&survivor).await;
            trigger_once(zk, &ns, "fo", &doomed.instance_id()).await;
            let (_, trigger) = doomed.first_trigger(Duration::from_secs(30)).await;
            let killed = Instant::now();
            doomed.kill();
            let at = failover_arrival(&survivor, trigger.items[0].item).await;
            worker_kill.push(at.duration_since(killed).as_secs_f64() * 1000.0);
        }
        report(
            &format!("failover: worker process SIGKILL -> FAILOVER trigger at a worker on {label}"),
            "ms",
            worker_kill,
        );
    }

    let mut sidecar_kill = Vec::new();
    for round in 0..5 {
        let ns = format!("bench-fo-sidecar-{round}");
        let (mut cars, config, survivor) = failover_pair(zk, &ns, Duration::from_secs(10)).await;
        let doomed = TestWorker::subscribe(&cars[0].endpoint(), subscribe_request(config))
            .await
            .unwrap();
        wait_share(&survivor).await;
        trigger_once(zk, &ns, "fo", doomed.instance_id()).await;
        let trigger = doomed.next_trigger(Duration::from_secs(30)).await.unwrap();
        let killed = Instant::now();
        cars[0].kill();
        let at = failover_arrival(&survivor, trigger.items[0].item).await;
        sidecar_kill.push(at.duration_since(killed).as_secs_f64() * 1000.0);
    }
    report(
        "failover: sidecar SIGKILL -> FAILOVER trigger on another sidecar (10 s session)",
        "ms",
        sidecar_kill,
    );
}

/// `SHARDCAR_BENCH_SCALE=200x64,100x8` (jobs x items, comma-separated): the scale figures to
/// run instead of 1000 x 8 and 500 x 64. Exits with a message naming the bad entry.
fn scale_shapes_from_env() -> Option<Vec<(usize, i32)>> {
    let spec = std::env::var("SHARDCAR_BENCH_SCALE").ok()?;
    let parse = |entry: &str| {
        let (jobs, items) = entry.trim().split_once('x')?;
        let jobs: usize = jobs.parse().ok().filter(|j| *j > 0)?;
        let items: i32 = items.parse().ok().filter(|i| (1..=1024).contains(i))?;
        Some((jobs, items))
    };
    let shapes: Option<Vec<_>> = spec.split(',').map(parse).collect();
    match shapes {
        Some(shapes) if !shapes.is_empty() => Some(shapes),
        _ => {
            eprintln!(
                "SHARDCAR_BENCH_SCALE={spec:?}: expected JOBSxITEMS[,JOBSxITEMS...] with JOBS >= 1 and ITEMS 1..=1024, e.g. 200x64,1000x8"
            );
            std::process::exit(64);
        }
    }
}

/// `SHARDCAR_BENCH_TRANSPORT=unix`: the trigger and scale figures' workers reach their sidecar
/// over a Unix socket (`--listen unix:///…`, as workers on its own host may) instead of TCP on
/// 127.0.0.1 (`tcp`, the default). Exits with a message on any other value.
fn unix_socket_from_env() -> bool {
    match std::env::var("SHARDCAR_BENCH_TRANSPORT") {
        Err(_) => false,
        Ok(t) if t == "tcp" => false,
        Ok(t) if t == "unix" => true,
        Ok(t) => {
            eprintln!("SHARDCAR_BENCH_TRANSPORT={t:?}: expected tcp (the default) or unix");
            std::process::exit(64);
        }
    }
}

/// `SHARDCAR_BENCH_JOBS_PER_CONNECTION=K`: the trigger and scale figures' workers of K jobs
/// share one connection, as the jobs of one worker process do with either client (1, the
/// default: each worker on a connection of its own, as 1000 processes of one job each would be).
/// Exits with a message on a value that is not a whole number above 0.
fn jobs_per_connection_from_env() -> usize {
    match std::env::var("SHARDCAR_BENCH_JOBS_PER_CONNECTION") {
        Err(_) => 1,
        Ok(v) => v.parse().ok().filter(|k| *k > 0).unwrap_or_else(|| {
            eprintln!("SHARDCAR_BENCH_JOBS_PER_CONNECTION={v:?}: expected a whole number above 0");
            std::process::exit(64);
        }),
    }
}

/// `SHARDCAR_BENCH_WORK=<duration>` (e.g. `200ms`): how long the trigger and scale figures'
/// workers work on each trigger before they answer (0, the default: at once). Exits with a
/// message on a value that is not a duration.
fn work_from_env() -> Duration {
    match std::env::var("SHARDCAR_BENCH_WORK") {
        Err(_) => Duration::ZERO,
        Ok(v) => shardcar::config::parse_duration(&v).unwrap_or_else(|e| {
            eprintln!("SHARDCAR_BENCH_WORK={v:?}: {e}; expected a duration like 200ms");
            std::process::exit(64);
        }),
    }
}

fn main() {
    // The failover benchmark re-executes this program as a worker process.
    child::main_if_child();
    // `cargo bench --bench core -- trigger failover` runs only the figures named (by prefix).
    let chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted =
        |name: &str| chosen.is_empty() || chosen.iter().any(|c| name.starts_with(c.as_str()));
    // Checked before anything starts (a bad value exits at once).
    let scale_shapes = scale_shapes_from_env();
    unix_socket_from_env();
    jobs_per_connection_from_env();
    work_from_env();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        // ZooKeeper's JVM as a production server runs it (the tests' is tuned to start fast).
        let zk = ZooKeeper::start_with_jvm_defaults().await;
        if wanted("floor") {
            bench_zookeeper_floor(&zk).await;
        }
        if wanted("resharding") {
            bench_resharding(&zk).await;
        }
        if wanted("growth") {
            bench_growth(&zk).await;
        }
        if wanted("trigger") {
            let one_job_window = std::env::var("SHARDCAR_BENCH_ONE_JOB_SECONDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(10);
            bench_triggers(Some(&zk), 1, 2, Duration::from_secs(one_job_window)).await;
            bench_triggers(Some(&zk), 100, 2, Duration::from_secs(10)).await;
        }
        if let Some(shapes) = scale_shapes.clone() {
            if wanted("scale") {
                for (jobs, items) in shapes.iter().copied() {
                    bench_triggers(Some(&zk), jobs, items, Duration::from_secs(10)).await;
                }
            }
            if wanted("standalone") {
                for (jobs, items) in shapes {
                    bench_triggers(None, jobs, items, Duration::from_secs(10)).await;
                }
            }
        } else {
            if wanted("scale1000") {
                bench_triggers(Some(&zk), 1000, 8, Duration::from_secs(10)).await;
            }
            if wanted("scale500") {
                bench_triggers(Some(&zk), 500, 64, Duration::from_secs(10)).await;
            }
            if wanted("standalone") {
                bench_triggers(None, 1000, 8, Duration::from_secs(10)).await;
                bench_triggers(None, 500, 64, Duration::from_secs(10)).await;
            }
        }
        if wanted("transactions") {
            bench_transactions_per_item_count().await;
        }
        if wanted("failover") {
            bench_failover(&zk).await;
        }
        if wanted("retry") {
            retry::bench_retry(&zk, 2).await;
        }
        if wanted("resident") {
            resident::bench_resident(&zk, 30).await;
        }
    });
}
