//! The nemesis: a randomized, seeded fault soak that finds coordination bugs on its own.
//!
//! It starts a real ZooKeeper ensemble, three real sidecars (each reaching every ZooKeeper node
//! through a harness TCP proxy) and one proto-only worker process per (sidecar, job) for four
//! cron jobs (1 s and 2 s, failover on and off, monitorExecution on, items of 0–1.5 s): strict
//! workers for two jobs, minimal ones (every MUST of the contract, none of its MAYs) for the
//! other two ([`worker`], [`spec::MINIMAL_JOBS`]).
//! It then injects faults from a schedule that depends on the seed only ([`schedule`]), records
//! everything on one clock ([`history`]), checks the invariants continuously and at the end
//! ([`check`], [`cluster::World::liveness_problems`]), prints the fault log, figures and every
//! violation, and last exactly one line: `nemesis: seed S, F faults, R runs, V violations`.
//! Exit status: 0 without violations, 1 with, 2 when the cluster could not be set up, 130 when
//! interrupted, 64 for bad arguments.
//!
//! Usage (scripts/nemesis.sh builds and runs it):
//!   nemesis [--seed N] [--duration 60s] [--ensemble 3] [--only 3,7] [--out DIR]
//!   nemesis --print-schedule [--seed N] [--duration 60s] [--ensemble 3]
//!   nemesis --self-check
//!   nemesis --recheck target/nemesis/seed-N/history.json
//! `--only` injects only the listed faults of the seed's schedule (to reduce a failing seed);
//! `--recheck` runs the end-of-soak checks again over a soak's saved history (no cluster).
//! The sidecar binary is `SHARDCAR_TEST_BIN`, else `shardcar` beside this example's directory.
//! Internal modes: `--worker ...` and `--joiner ...` (the child processes).
#![allow(
    clippy::disallowed_methods,
    reason = "tests, benchmarks and examples run against real time and real processes"
)]
#![forbid(unsafe_code)]

// The harness names the sidecar binary with `env!("CARGO_BIN_EXE_shardcar")`, which Cargo sets
// for tests and benches but not for examples. This shadows `env!` for that one key (textual
// macro scope reaches the harness modules below) and leaves every other use to the real macro.
macro_rules! env {
    ("CARGO_BIN_EXE_shardcar") => {
        $crate::default_sidecar_binary()
    };
    ($($arg:tt)*) => {
        ::std::env!($($arg)*)
    };
}

#[path = "../../tests/common/mod.rs"]
mod common;

mod check;
mod cluster;
mod ends;
mod history;
mod resident;
mod schedule;
mod spec;
mod store;
mod worker;

use history::History;
use schedule::Fault;
use spec::{wall_us, JOBS, LEASE, SESSION};
use std::collections::HashSet;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const EXIT_USAGE: u8 = 64;

/// `shardcar` next to the directory of this example (`target/debug/examples/nemesis` →
/// `target/debug/shardcar`), used when `SHARDCAR_TEST_BIN` is not set.
pub fn default_sidecar_binary() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("shardcar")))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "shardcar".into())
}

#[derive(Debug)]
struct Args {
    seed: Option<u64>,
    duration: Duration,
    ensemble: usize,
    only: Option<Vec<usize>>,
    out: Option<PathBuf>,
    self_check: bool,
    print_schedule: bool,
    recheck: Option<PathBuf>,
}

fn usage() -> &'static str {
    "usage: nemesis [--seed N] [--duration 60s] [--ensemble 3] [--only 3,7] [--out DIR]\n       \
     nemesis --print-schedule [--seed N] [--duration 60s] [--ensemble 3]\n       \
     nemesis --self-check\n       \
     nemesis --recheck target/nemesis/seed-N/history.json"
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("bad duration {text:?} (e.g. 60s, 2m)"))?;
    match unit {
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("bad duration unit in {text:?} (s or m)")),
    }
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut args = Args {
        seed: None,
        duration: Duration::from_secs(60),
        ensemble: 3,
        only: None,
        out: None,
        self_check: false,
        print_schedule: false,
        recheck: None,
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--seed" => {
                let v = value("--seed")?;
                args.seed = Some(v.parse().map_err(|_| format!("bad seed {v:?}"))?);
            }
            "--duration" => args.duration = parse_duration(&value("--duration")?)?,
            "--ensemble" => {
                let v = value("--ensemble")?;
                args.ensemble = v.parse().map_err(|_| format!("bad ensemble size {v:?}"))?;
                if !(1..=7).contains(&args.ensemble) || args.ensemble == 2 {
                    return Err("--ensemble must be 1 or 3..7".into());
                }
            }
            "--only" => {
                let v = value("--only")?;
                let ids = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.trim().trim_start_matches('#').parse::<usize>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| format!("bad fault list {v:?} (e.g. 3,7)"))?;
                args.only = Some(ids);
            }
            "--out" => args.out = Some(PathBuf::from(value("--out")?)),
            "--self-check" => args.self_check = true,
            "--recheck" => args.recheck = Some(PathBuf::from(value("--recheck")?)),
            "--print-schedule" => args.print_schedule = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.duration < Duration::from_secs(10) {
        return Err("--duration must be at least 10s".into());
    }
    Ok(args)
}

/// `--worker` / `--joiner`: the child processes.
fn child_main(argv: &[String]) -> ExitCode {
    let get = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .and_then(|i| argv.get(i + 1))
            .cloned()
            .unwrap_or_default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let job: usize = get("--job").parse().unwrap_or(0).min(JOBS.len() - 1);
    if argv[0] == "--joiner" {
        let delays = get("--delays")
            .split(',')
            .filter_map(|d| d.parse().ok())
            .collect();
        runtime.block_on(worker::run_joiner(get("--endpoint"), job, delays));
    } else {
        runtime.block_on(worker::run(worker::WorkerArgs {
            endpoint: get("--endpoint"),
            job,
            store: get("--store"),
            seed: get("--seed").parse().unwrap_or(0),
            minimal: argv.iter().any(|a| a == "--minimal"),
        }));
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if matches!(
        argv.first().map(String::as_str),
        Some("--worker" | "--joiner")
    ) {
        return child_main(&argv);
    }
    let args = match parse_args(&argv) {
        Ok(args) => args,
        Err(e) if e.is_empty() => {
            println!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("nemesis: {e}\n{}", usage());
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if let Some(path) = &args.recheck {
        return recheck(path);
    }
    if args.self_check {
        return match check::self_check() {
            Ok(lines) => {
                for line in lines {
                    println!("self-check: {line}");
                }
                println!("self-check: the checker reports every broken invariant");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("self-check FAILED: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let seed = args.seed.unwrap_or_else(|| wall_us() % 1_000_000);
    let full = schedule::generate(seed, args.duration, args.ensemble);
    let schedule: Vec<Fault> = full
        .iter()
        .filter(|f| args.only.as_ref().is_none_or(|only| only.contains(&f.id)))
        .cloned()
        .collect();
    if args.print_schedule {
        for line in header(&args, seed, &full, &schedule) {
            println!("{line}");
        }
        return ExitCode::SUCCESS;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let code = runtime.block_on(async {
        let soak = soak(&args, seed, &full, schedule);
        tokio::pin!(soak);
        tokio::select! {
            code = &mut soak => code,
            _ = interrupted() => {
                println!("nemesis: interrupted; stopping every process");
                let world = WORLD.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(world) = world {
                    world.teardown().await;
                }
                130
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
    ExitCode::from(code)
}

/// The cluster of the running soak, for the Ctrl-C path.
static WORLD: Mutex<Option<Arc<cluster::World>>> = Mutex::new(None);

async fn interrupted() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn header(args: &Args, seed: u64, full: &[Fault], schedule: &[Fault]) -> Vec<String> {
    let mut lines = vec![
        format!(
            "nemesis: seed {seed}, duration {}s, ZooKeeper ensemble of {}, sidecars {} ({}..{}), session timeout {:?}, lease {:?}",
            args.duration.as_secs(),
            args.ensemble,
            spec::SIDECARS,
            spec::car_ip(0),
            spec::car_ip(spec::SIDECARS - 1),
            SESSION,
            LEASE
        ),
        format!(
            "jobs: {}",
            JOBS.iter()
                .map(|j| if j.resident {
                    format!("{} (resident, {} items)", j.name, j.items)
                } else {
                    format!(
                        "{} (cron {:?}, {} items, failover {}, timeout {}s)",
                        j.name,
                        j.cron,
                        j.items,
                        if j.failover { "on" } else { "off" },
                        j.timeout_s
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        ),
        format!(
            "replay: scripts/nemesis.sh --seed {seed} --duration {}s --ensemble {}{}",
            args.duration.as_secs(),
            args.ensemble,
            args.only.as_ref().map_or(String::new(), |o| format!(
                " --only {}",
                o.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
            ))
        ),
        format!(
            "fault schedule (fingerprint {}, {} of {} faults injected; offsets from the soak's start):",
            schedule::fingerprint(full),
            schedule.len(),
            full.len()
        ),
    ];
    for f in full {
        let skipped = !schedule.iter().any(|s| s.id == f.id);
        lines.push(format!(
            "  {f}{}",
            if skipped { "   (skipped: --only)" } else { "" }
        ));
    }
    lines
}

async fn soak(args: &Args, seed: u64, full: &[Fault], schedule: Vec<Fault>) -> u8 {
    let exe = std::env::current_exe().expect("the nemesis executable");
    let out = args.out.clone().unwrap_or_else(|| {
        exe.parent()
            .and_then(|p| p.parent())
            .and_then(|p| p.parent())
            .map_or_else(|| PathBuf::from("nemesis-out"), |t| t.join("nemesis"))
            .join(format!("seed-{seed}"))
    });
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("create the output directory");
    let head = header(args, seed, full, &schedule);
    for line in &head {
        println!("{line}");
    }
    let _ = std::fs::write(out.join("schedule.txt"), head.join("\n") + "\n");
    let sidecar_bin = common::sidecar::binary();
    if !sidecar_bin.exists() {
        eprintln!(
            "nemesis: the sidecar binary {} does not exist (build it, or set SHARDCAR_TEST_BIN)",
            sidecar_bin.display()
        );
        return 2;
    }
    println!(
        "output: {} (sidecar binary {})",
        out.display(),
        sidecar_bin.display()
    );

    let history = Arc::new(Mutex::new(History {
        log: std::fs::File::create(out.join("events.log")).ok(),
        ..Default::default()
    }));
    let opts = cluster::Options {
        seed,
        exe,
        out: out.clone(),
        ensemble: args.ensemble,
    };
    let world = cluster::World::start(opts, history.clone()).await;
    *WORLD.lock().unwrap_or_else(|e| e.into_inner()) = Some(world.clone());
    world.say(&format!(
        "cluster up: ZooKeeper {}, {} sidecars; starting {} workers",
        world.zk_connect(),
        spec::SIDECARS,
        spec::SLOTS
    ));
    tokio::spawn(world.clone().supervise());
    tokio::spawn(world.clone().probe_holds());
    {
        let world = world.clone();
        std::thread::spawn(move || watch_host_clock(&world));
    }
    if let Err(problem) = world.wait_warm(Duration::from_secs(90)).await {
        world.say(&format!(
            "the cluster never settled before the soak: {problem}"
        ));
        world.teardown().await;
        return 2;
    }
    let t0 = wall_us();
    let t0_instant = tokio::time::Instant::now();
    history.lock().unwrap().t0 = t0;
    world.say("soak started: every worker subscribed, every item assigned");

    // Continuous checks: safety and fencing every second, fires every 5 s (those old enough to
    // judge), a heartbeat every 10 s. They run on a copy, so the store and the workers' reports
    // never wait for them.
    let seen: Arc<Mutex<HashSet<String>>> = Arc::default();
    let checker = {
        let (history, world, seen) = (history.clone(), world.clone(), seen.clone());
        tokio::spawn(async move {
            let mut beat = 0u64;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                beat += 1;
                let now = wall_us();
                let copy = {
                    let h = history.lock().unwrap_or_else(|e| e.into_inner());
                    History::from_snapshot(h.snapshot(now, 0, None, Vec::new()))
                };
                let mut fig = check::Figures::default();
                let mut found = check::safety(&copy, now);
                found.extend(check::fencing(&copy, &mut fig));
                if beat.is_multiple_of(5) {
                    let params = check::Params {
                        t_end: now,
                        eventually: false,
                    };
                    found.extend(check::lost_fires(&copy, &params, &mut fig));
                    found.extend(ends::executions_end(&copy, &params, &mut fig));
                }
                for v in found {
                    if seen.lock().unwrap().insert(v.key.clone()) {
                        world.say(&format!("VIOLATION [{}] {}", v.class, v.text));
                    }
                }
                if beat.is_multiple_of(10) {
                    world.say(&format!(
                        "progress: {} runs ({} completed), {} store writes ({} refused), {} faults started",
                        copy.runs.len(),
                        copy.runs.iter().filter(|r| r.completed()).count(),
                        copy.writes.len(),
                        copy.writes.iter().filter(|w| !w.accepted).count(),
                        copy.faults.len()
                    ));
                }
            }
        })
    };

    // The faults, each at its offset.
    let mut tasks = Vec::new();
    for fault in schedule.iter().cloned() {
        let world = world.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(t0_instant + fault.at).await;
            world.inject(fault).await;
        }));
    }
    for task in tasks {
        if let Err(e) = task.await {
            world.say(&format!("a fault task failed: {e}"));
        }
    }
    let last_fault_end = {
        let h = history.lock().unwrap();
        h.faults
            .iter()
            .filter_map(|f| f.end)
            .max()
            .unwrap_or(t0)
            .max(t0)
    };
    let limit = last_fault_end + (SESSION + Duration::from_secs(3)).as_micros() as u64;
    // A closure, so no guard outlives the call (`say` takes the lock too).
    let rel = |t: u64| history.lock().unwrap_or_else(|e| e.into_inner()).rel(t);
    world.say(&format!(
        "every fault is over (last at {}); liveness must hold by {}",
        rel(last_fault_end),
        rel(limit)
    ));

    // Liveness: within session timeout + 3 s after the last fault.
    let mut liveness: Vec<check::Violation> = Vec::new();
    let live_since = loop {
        let problems = world.liveness_problems(last_fault_end).await;
        let now = wall_us();
        if problems.is_empty() {
            break Some(now);
        }
        if now >= limit {
            // Keep looking a while, to tell late from never.
            let mut resolved = None;
            let give_up = now + 15_000_000;
            let mut latest = problems.clone();
            while wall_us() < give_up {
                tokio::time::sleep(Duration::from_millis(500)).await;
                latest = world.liveness_problems(last_fault_end).await;
                if latest.is_empty() {
                    resolved = Some(wall_us());
                    break;
                }
            }
            let h = history.lock().unwrap();
            let after = match resolved {
                Some(t) => format!("(all held at last at {})", h.rel(t)),
                None => format!(
                    "(still failing at {}: {})",
                    h.rel(wall_us()),
                    latest.join("; ")
                ),
            };
            for p in problems {
                liveness.push(check::Violation {
                    key: format!("liveness {p}"),
                    at: limit,
                    class: "liveness",
                    text: format!("at {} (the limit): {p} {after}", h.rel(limit)),
                });
            }
            break None;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    match live_since {
        Some(t) => world.say(&format!(
            "liveness holds at {} ({:.2}s after the last fault)",
            rel(t),
            (t - last_fault_end) as f64 / 1e6
        )),
        None => world.say("LIVENESS FAILED (see the violations)"),
    }
    // The resident items: held by live workers again within their own bound, which the
    // observation must reach before the end-of-soak check judges it (`resident::held_again`).
    let resident_limit = last_fault_end + resident::HELD_AGAIN.as_micros() as u64;
    loop {
        let now = wall_us();
        let unheld = resident::unheld(&history.lock().unwrap_or_else(|e| e.into_inner()), now);
        if unheld.is_empty() {
            world.say(&format!(
                "every resident item is held by a live worker at {} ({:.2}s after the last fault)",
                rel(now),
                now.saturating_sub(last_fault_end) as f64 / 1e6
            ));
            break;
        }
        if now > resident_limit + 1_000_000 {
            world.say(&format!(
                "resident items {unheld:?} not held by a live worker by {} (see the violations)",
                rel(resident_limit)
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Observe to the end of the soak's duration at least, then 2 s more.
    let soak_end = t0_instant + args.duration;
    if tokio::time::Instant::now() < soak_end {
        tokio::time::sleep_until(soak_end).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    checker.abort();
    let t_end = wall_us();
    world.stop_workers().await;
    world.copy_logs().await;

    // The final checks.
    let snapshot = {
        let h = history.lock().unwrap();
        let liveness = liveness
            .iter()
            .map(|v| (v.key.clone(), v.at, v.text.clone()))
            .collect();
        let mut snap = h.snapshot(t_end, last_fault_end, live_since, liveness);
        snap.seed = seed;
        snap.injected = schedule.len();
        snap
    };
    if let Ok(file) = std::fs::File::create(out.join("history.json")) {
        let _ = serde_json::to_writer(std::io::BufWriter::new(file), &snapshot);
    }
    let (text, summary, failed) = verdict(snapshot);
    for line in &text {
        println!("{line}");
    }
    if let Ok(mut file) = std::fs::File::create(out.join("report.txt")) {
        let _ = writeln!(file, "{}\n{}\n{summary}", head.join("\n"), text.join("\n"));
    }
    world.teardown().await;
    WORLD.lock().unwrap_or_else(|e| e.into_inner()).take();
    println!("{summary}");
    u8::from(failed)
}

/// How far the host's wall clock may run ahead of its monotonic clock between two looks
/// before the nemesis counts a host pause.
const HOST_PAUSE: Duration = Duration::from_millis(100);

/// Records the host's pauses as faults the schedule did not inject. When the host stops (a
/// virtual machine paused by its hypervisor), every process of the soak stops with it, and on
/// resuming the wall clock jumps ahead while the monotonic clock does not: workers count their
/// leases on the wall clock (the contract's `expires_at`), sidecars on the monotonic one. Every
/// 20 ms, on a thread of its own, this compares how far each clock moved; a wall clock ahead by
/// [`HOST_PAUSE`] or more is recorded as a `host-pause` on every sidecar (ids from 1001), so the
/// checker treats its effects as a fault's, not as the sidecar's doing.
fn watch_host_clock(world: &cluster::World) {
    let mut seen = 0usize;
    let (mut wall, mut mono) = (wall_us(), std::time::Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let (now_wall, now_mono) = (wall_us(), std::time::Instant::now());
        let moved = now_mono.duration_since(mono).as_micros() as u64;
        let ahead = now_wall.saturating_sub(wall).saturating_sub(moved);
        if ahead >= HOST_PAUSE.as_micros() as u64 {
            seen += 1;
            let hold = Duration::from_micros(ahead);
            let note = format!(
                "not injected: the host's wall clock jumped {:.3}s past its monotonic clock (every process stopped)",
                hold.as_secs_f64()
            );
            world
                .history
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .faults
                .push(history::FaultRec {
                    id: 1000 + seen,
                    kind: schedule::Kind::HostPause { hold },
                    start: wall,
                    end: Some(now_wall),
                    note: note.clone(),
                    victim: None,
                    fired: None,
                });
            world.say(&format!("#{} host-pause: {note}", 1000 + seen));
        }
        (wall, mono) = (now_wall, now_mono);
    }
}

/// The end-of-soak checks over a saved history: the report's lines, the summary line, and
/// whether any invariant was violated.
fn verdict(snapshot: history::Snapshot) -> (Vec<String>, String, bool) {
    let (seed, injected) = (snapshot.seed, snapshot.injected);
    let (t_end, last_fault_end, live_since) =
        (snapshot.t_end, snapshot.last_fault_end, snapshot.live_since);
    let mut violations: Vec<check::Violation> = Vec::new();
    let liveness: Vec<check::Violation> = snapshot
        .liveness
        .iter()
        .map(|(key, at, text)| check::Violation {
            key: key.clone(),
            at: *at,
            class: "liveness",
            text: text.clone(),
        })
        .collect();
    let h = History::from_snapshot(snapshot);
    let limit = last_fault_end + (SESSION + Duration::from_secs(3)).as_micros() as u64;
    let mut fig = check::Figures::default();
    violations.extend(check::all(
        &h,
        &check::Params {
            t_end,
            eventually: true,
        },
        &mut fig,
    ));
    violations.extend(liveness);
    violations.extend(resident::held_again(
        &h,
        t_end,
        last_fault_end,
        &mut fig.resident,
    ));
    resident::handoffs(&h, t_end, &mut fig.resident);
    let mut text = figures(&h, &fig, live_since, last_fault_end, limit);
    text.push("==== violations ====".into());
    if violations.is_empty() {
        text.push("none".into());
    }
    for v in &violations {
        text.push(format!("[{}] {} {}", v.class, h.rel(v.at), v.text));
    }
    let summary = format!(
        "nemesis: seed {seed}, {injected} faults, {} runs, {} violations",
        fig.runs,
        violations.len()
    );
    (text, summary, !violations.is_empty())
}

/// `--recheck FILE`: the checks again over a saved `history.json`.
fn recheck(path: &std::path::Path) -> ExitCode {
    let snapshot: history::Snapshot = match std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
    {
        Ok(snapshot) => snapshot,
        Err(e) => {
            eprintln!("nemesis: cannot read {}: {e}", path.display());
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let (text, summary, failed) = verdict(snapshot);
    for line in text {
        println!("{line}");
    }
    println!("{summary}");
    ExitCode::from(u8::from(failed))
}

fn figures(
    h: &History,
    fig: &check::Figures,
    live_since: Option<u64>,
    last_fault_end: u64,
    limit: u64,
) -> Vec<String> {
    let mut lines = vec!["==== fault log ====".to_string()];
    for f in &h.faults {
        lines.push(format!(
            "#{:02} {} .. {}  {}  -> {}",
            f.id,
            h.rel(f.start),
            f.end.map_or("(not over)".into(), |e| h.rel(e)),
            f.kind,
            f.note
        ));
    }
    lines.push("==== figures ====".into());
    lines.push(format!(
        "runs: {} item runs ({}), {} completed; stopped early: {:?}; triggers declined at once: {}",
        fig.runs,
        fig.by_source
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        fig.completed,
        fig.stopped,
        fig.declined_at_once
    ));
    lines.push(format!(
        "fencing store: {} writes, {} accepted, {} refused as stale ({} allowed: lease over or revoked)",
        fig.writes, fig.writes_accepted, fig.stale_refused, fig.stale_refused_allowed
    ));
    lines.push(format!(
        "fires: {} item fires checked: {} ran at their own instant, {} coalesced behind a busy run, {} disabled, {} excused from the strict rules ({}); all must end in a completed run",
        fig.fires,
        fig.fires_exact,
        fig.fires_coalesced,
        fig.fires_disabled,
        fig.fires_excused.values().sum::<usize>(),
        fig.fires_excused
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    lines.push(format!(
        "liveness: {} (limit {}, session + 3 s after the last fault at {})",
        live_since.map_or("NOT reached".into(), |t| format!(
            "reached at {}, {:.2}s after the last fault",
            h.rel(t),
            (t - last_fault_end) as f64 / 1e6
        )),
        h.rel(limit),
        h.rel(last_fault_end)
    ));
    lines.push(format!(
        "worst worker-crash failover (SIGKILL -> the item's next trigger): {} [bound 1 s with an idle member: {}]",
        check::worst(&fig.worker_crash, false),
        check::worst(&fig.worker_crash, true)
    ));
    lines.push(format!(
        "worst member-crash failover (sidecar kill/freeze/expiry -> the item's next trigger): {} [bound session + run + 1 s: {}]",
        check::worst(&fig.member_crash, false),
        check::worst(&fig.member_crash, true)
    ));
    for (latency, fair, text) in fig.worker_crash.iter().chain(fig.member_crash.iter()) {
        lines.push(format!(
            "  failover {}{}: {text}",
            latency.map_or("never".into(), |l| format!("{:.3}s", l as f64 / 1e6)),
            if *fair { "" } else { " (bound not applicable)" }
        ));
    }
    let worst = |w: &Option<(u64, String)>| {
        w.as_ref().map_or("none".to_string(), |(took, text)| {
            format!("{:.3}s ({text})", *took as f64 / 1e6)
        })
    };
    lines.push(format!(
        "executions let go by their worker: {} seen to leave ZooKeeper, {} still there at the end (within their bound); bounds: {:.2}s after an answer, {:.2}s after a fault on the way to ZooKeeper, {:.2}s after a silent worker",
        fig.ends_seen,
        fig.ends_pending,
        ends::CALM.as_secs_f64(),
        ends::AFTER_FAULT.as_secs_f64(),
        ends::AFTER_WORKER.as_secs_f64()
    ));
    lines.push(format!(
        "  slowest after an answer with no fault near: {}",
        worst(&fig.end_worst_calm)
    ));
    lines.push(format!("  slowest of all: {}", worst(&fig.end_worst)));
    lines.push(format!(
        "minimal workers' answers and declines, by the reply to their one call: {}",
        fig.minimal_replies
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    lines.push(format!(
        "answer-aimed faults: {} fired of {}",
        fig.aimed_fired, fig.aimed
    ));
    for line in &fig.aimed_lines {
        lines.push(format!("  {line}"));
    }
    lines.extend(resident::lines(h, &fig.resident, last_fault_end));
    if !h.subscribe_failures.is_empty() {
        lines.push(format!(
            "subscribe failures (retried): {:?}",
            h.subscribe_failures
        ));
    }
    lines.push(format!(
        "largest worker report lag: {:.1} ms",
        h.max_report_lag_us as f64 / 1e3
    ));
    lines
}
