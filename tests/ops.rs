//! Operating shardcar, end to end with real processes: `shardcar ctl` against a real sidecar in
//! standalone and ZooKeeper mode (and over a Unix socket), the Prometheus endpoint after a known
//! number of executions, health and the HTTP probes following ZooKeeper, reflection, settings
//! that are refused (an Admin API or console open to others without the admin token among
//! them; the console itself is tested in a browser by `tests/console.rs`), the execution spans
//! exported by OTLP (`ops/telemetry.rs`), ElasticJob's tracing tables on a real PostgreSQL
//! (`ops/tracing_db.rs`), SCRIPT and HTTP jobs run by the sidecars themselves
//! (`ops/typed_jobs.rs`), the jobs' error handlers against real HTTP and SMTP receivers
//! (`ops/alerts.rs`), and retry policies, retries and resident holds at the surfaces: refused
//! when out of range, shown by `ctl` and counted by the metrics (`ops/failures.rs`).
#![allow(
    clippy::disallowed_methods,
    reason = "tests, benchmarks and examples run against real time and real processes"
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::Duration;

use common::{
    free_port, job_config, subscribe_request, zk_tree, Sidecar, SidecarOptions, TestWorker,
    ZooKeeper,
};
use serde_json::Value;
use shardcar::proto::admin_service_client::AdminServiceClient;
use shardcar::proto::{SubscribeRequest, TriggerSource, WatchJobRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const WAIT: Duration = Duration::from_secs(30);
/// A cron that never fires during a test (1 January 2099).
const NEVER: &str = "0 0 0 1 1 ? 2099";

#[path = "ops/alerts.rs"]
mod alerts;
#[path = "ops/failures.rs"]
mod failures;
#[path = "ops/telemetry.rs"]
mod telemetry;
#[path = "ops/tracing_db.rs"]
mod tracing_db;
#[path = "ops/typed_jobs.rs"]
mod typed_jobs;

/// The output of one `shardcar` command.
struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Output {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }
}

/// Runs `shardcar ARGS` with a clean `SHARDCAR_*` environment plus `env`.
async fn shardcar(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_shardcar"));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().to_string();
        if key.starts_with("SHARDCAR_") || key == "RUST_LOG" {
            command.env_remove(key);
        }
    }
    command
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(WAIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("shardcar {args:?} did not finish within {WAIT:?}"))
        .expect("cannot run shardcar");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `shardcar ctl --target TARGET ARGS`, which must succeed.
async fn ctl(target: &str, args: &[&str]) -> Output {
    let mut all = vec!["ctl", "--target", target];
    all.extend_from_slice(args);
    let out = shardcar(&all, &[]).await;
    assert_eq!(
        out.code, 0,
        "shardcar {all:?} failed\nstdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    out
}

async fn ctl_json(target: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    ctl(target, &all).await.json()
}

/// `GET /metrics`, parsed into series (name with labels) → value.
async fn scrape(addr: &str) -> BTreeMap<String, f64> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the metrics endpoint {addr}: {e}"));
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("series value");
            let value = value
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("bad sample {l:?}"));
            (series.to_string(), value)
        })
        .collect()
}

fn metric(metrics: &BTreeMap<String, f64>, series: &str) -> f64 {
    *metrics
        .get(series)
        .unwrap_or_else(|| panic!("no series {series} in {metrics:#?}"))
}

fn write_file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn ctl_and_metrics_against_a_standalone_sidecar() {
    let dir = tempfile::tempdir().unwrap();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let history = dir.path().join("history.jsonl");
    let config = write_file(
        &dir,
        "shardcar.toml",
        &format!(
            "metrics_listen = \"{metrics_addr}\"\nhistory_size = 50\nhistory_file = \"{}\"\n",
            history.display()
        ),
    );
    let car = Sidecar::start(SidecarOptions {
        extra_args: vec!["--config".into(), config],
        ..SidecarOptions::standalone()
    })
    .await;
    let target = car.addr().to_string();

    // A job put from a file, then a worker for it.
    let job_file = write_file(
        &dir,
        "reports.yaml",
        &format!("job_name: reports\ncron: \"{NEVER}\"\nsharding_total_count: 2\nsharding_item_parameters: {{0: east, 1: west}}\n"),
    );
    let put = ctl(&target, &["job", "put", &job_file]).await;
    assert_eq!(put.stdout, "job reports created\n");
    let worker = TestWorker::subscribe(
        &car.endpoint(),
        subscribe_request(job_config("reports", NEVER, 2)),
    )
    .await
    .unwrap();
    worker.set_auto_complete(true);
    worker.wait_items(|i| i.len() == 2, WAIT).await.unwrap();

    // `--json` is the response in canonical proto3 JSON (what grpcurl prints).
    let jobs = ctl_json(&target, &["jobs"]).await;
    assert_eq!(jobs["jobs"][0]["jobName"], "reports");
    assert_eq!(jobs["jobs"][0]["state"], "JOB_STATE_OK");
    assert_eq!(jobs["jobs"][0]["instanceCount"], 1);
    let show = ctl(&target, &["job", "show", "reports"]).await.stdout;
    assert!(show.starts_with("Job reports  [OK]\n"), "{show}");
    assert!(
        show.contains(&format!(
            "  {}  127.0.0.2  yes     0,1\n",
            worker.instance_id()
        )),
        "{show}"
    );
    let job = ctl_json(&target, &["job", "show", "reports"]).await["job"].clone();
    assert_eq!(job["leader"], worker.instance_id());
    assert_eq!(job["items"][1]["parameter"], "west");
    assert_eq!(job["items"][1]["owner"], worker.instance_id());
    assert_eq!(job["servers"][0]["ip"], "127.0.0.2");

    // Three manual runs, each completed by the worker.
    for n in 1..=3 {
        let out = ctl(&target, &["trigger", "reports"]).await;
        assert_eq!(
            out.stdout,
            format!("job reports triggered on {}\n", worker.instance_id())
        );
        let trigger = worker.next_trigger(WAIT).await.unwrap();
        assert_eq!(trigger.source, TriggerSource::Manual as i32);
        assert_eq!(trigger.items.len(), 2);
        let done = common::eventually(WAIT, || async {
            (worker.auto_completed().len() >= n).then_some(())
        })
        .await;
        assert!(
            done.is_some(),
            "run {n} was not completed: {}",
            worker.summary()
        );
    }
    let executions = common::eventually(WAIT, || async {
        let list = ctl_json(&target, &["executions", "reports"]).await["executions"].clone();
        (list.as_array().map_or(0, Vec::len) == 3).then_some(list)
    })
    .await
    .expect("three executions in the history");
    assert_eq!(executions[0]["outcome"], "EXECUTION_OUTCOME_COMPLETED");
    assert_eq!(executions[0]["source"], "TRIGGER_SOURCE_MANUAL");
    assert_eq!(executions[0]["items"], serde_json::json!([0, 1]));
    assert_eq!(executions[0]["instanceId"], worker.instance_id());
    let table = ctl(&target, &["executions"]).await.stdout;
    assert!(table.starts_with("STARTED "), "{table}");
    assert_eq!(table.lines().count(), 4, "{table}");
    // The file is written by a thread of its own, a moment after the history in memory.
    let lines = common::eventually(WAIT, || async {
        let text = std::fs::read_to_string(&history).unwrap_or_default();
        (text.lines().count() == 3).then_some(text)
    })
    .await;
    assert!(
        lines.is_some(),
        "three lines in the history file: {:?}",
        std::fs::read_to_string(&history)
    );

    // The metrics agree.
    let m = scrape(&metrics_addr).await;
    assert_eq!(
        metric(
            &m,
            "shardcar_triggers_total{job_name=\"reports\",source=\"MANUAL\"}"
        ),
        3.0
    );
    assert_eq!(
        metric(
            &m,
            "shardcar_executions_total{job_name=\"reports\",outcome=\"completed\"}"
        ),
        3.0
    );
    assert_eq!(
        metric(&m, "shardcar_completions_total{job_name=\"reports\"}"),
        6.0
    );
    assert_eq!(
        metric(
            &m,
            "shardcar_execution_duration_seconds_count{job_name=\"reports\"}"
        ),
        3.0
    );
    assert_eq!(
        metric(
            &m,
            "shardcar_execution_duration_seconds_bucket{le=\"+Inf\",job_name=\"reports\"}"
        ),
        3.0
    );
    assert_eq!(
        metric(
            &m,
            "shardcar_trigger_latency_seconds_count{job_name=\"reports\"}"
        ),
        3.0
    );
    assert_eq!(metric(&m, "shardcar_workers{job_name=\"reports\"}"), 1.0);
    assert_eq!(metric(&m, "shardcar_leader_jobs"), 1.0);
    assert_eq!(metric(&m, "shardcar_zookeeper_connected"), 1.0);

    // Items, then the whole job, disabled and enabled again, seen by a watcher too.
    let mut admin = AdminServiceClient::connect(car.endpoint()).await.unwrap();
    let mut watch = admin
        .watch_job(WatchJobRequest {
            job_name: "reports".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert!(first.changes.is_empty());
    assert_eq!(first.job.unwrap().items.len(), 2);
    ctl(&target, &["disable", "reports", "--item", "1"]).await;
    let change = tokio::time::timeout(WAIT, watch.message())
        .await
        .expect("a change within 30 s")
        .unwrap()
        .unwrap();
    assert!(
        change
            .changes
            .iter()
            .any(|c| c == "created sharding/1/disabled"),
        "{change:?}"
    );
    assert!(change.job.unwrap().items[1].disabled);
    drop(watch);
    assert_eq!(
        ctl_json(&target, &["job", "show", "reports"]).await["job"]["items"][1]["disabled"],
        true
    );
    ctl(&target, &["enable", "reports", "--item", "1"]).await;
    assert_eq!(
        ctl_json(&target, &["job", "show", "reports"]).await["job"]["items"][1]["disabled"],
        Value::Null,
        "false, the default, is left out"
    );
    let off = ctl(&target, &["disable", "reports"]).await;
    assert_eq!(off.stdout, "job reports disabled on 127.0.0.2\n");
    worker.wait_items(|i| i.is_empty(), WAIT).await.unwrap();
    assert_eq!(
        ctl_json(&target, &["jobs"]).await["jobs"][0]["state"],
        "JOB_STATE_DISABLED"
    );
    ctl(&target, &["enable", "reports"]).await;
    worker.wait_items(|i| i.len() == 2, WAIT).await.unwrap();

    // Refusals: named, with the right exit codes.
    let missing = shardcar(&["ctl", "--target", &target, "job", "show", "nope"], &[]).await;
    assert_eq!(missing.code, 1);
    assert_eq!(
        missing.stderr,
        "shardcar ctl: not found: job \"nope\" does not exist in this namespace\n"
    );
    let bad_item = shardcar(
        &[
            "ctl", "--target", &target, "disable", "reports", "--item", "7",
        ],
        &[],
    )
    .await;
    assert_eq!(bad_item.code, 1);
    assert_eq!(
        bad_item.stderr,
        "shardcar ctl: invalid request: invalid items: item 7 is outside 0..2 (the job has 2 items)\n"
    );
    let bad_cron = write_file(
        &dir,
        "bad.yaml",
        "job_name: reports\ncron: every minute\nsharding_total_count: 2\n",
    );
    // A job file is checked before anything is sent: a usage error naming the field.
    let refused = shardcar(&["ctl", "--target", &target, "job", "put", &bad_cron], &[]).await;
    assert_eq!(refused.code, 64);
    assert!(
        refused.stderr.starts_with(&format!(
            "shardcar ctl: job file {bad_cron}: invalid config.cron: "
        )),
        "{}",
        refused.stderr
    );
    let bad_retry = write_file(
        &dir,
        "bad-retry.yaml",
        "job_name: reports\ncron: 0 0 0 1 1 ? 2099\nsharding_total_count: 2\nretry:\n  max_attempts: 3\n  initial_backoff: 1ms\n",
    );
    let refused = shardcar(&["ctl", "--target", &target, "job", "put", &bad_retry], &[]).await;
    assert_eq!(refused.code, 64);
    assert!(
        refused
            .stderr
            .contains("invalid config.retry.initial_backoff: "),
        "{}",
        refused.stderr
    );

    // Remote shutdown: the worker is told and its stream ends.
    let out = ctl(&target, &["shutdown", worker.instance_id()]).await;
    assert_eq!(
        out.stdout,
        format!("instance {} shut down in reports\n", worker.instance_id())
    );
    worker.wait_stream_end(WAIT).await.unwrap();
    assert_eq!(
        worker.shutdown().map(|s| s.kind),
        Some(shardcar::proto::ShutdownKind::Remote as i32),
        "{}",
        worker.summary()
    );
    let m = scrape(&metrics_addr).await;
    assert_eq!(metric(&m, "shardcar_workers{job_name=\"reports\"}"), 0.0);

    // Remove.
    assert_eq!(
        ctl(&target, &["job", "rm", "reports"]).await.stdout,
        "job reports removed (0 instance(s) shut down)\n"
    );
    assert_eq!(ctl_json(&target, &["jobs"]).await, serde_json::json!({}));
}

/// A standalone `shardcar run` listening on the Unix socket `socket`, once it accepts
/// connections there (killed when dropped).
async fn run_on_socket(socket: &std::path::Path) -> tokio::process::Child {
    let listen = format!("unix://{}", socket.display());
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_shardcar"))
        .args(["run", "--listen", &listen, "--advertise-ip", "127.0.0.2"])
        .env_remove("SHARDCAR_TARGET")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let ready = common::eventually(WAIT, || async {
        tokio::net::UnixStream::connect(socket)
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    assert!(ready.is_some(), "the sidecar never listened on {listen}");
    child
}

#[tokio::test(flavor = "multi_thread")]
async fn ctl_over_a_unix_socket_and_an_unreachable_target() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("shardcar.sock");
    let listen = format!("unix://{}", socket.display());
    let mut child = run_on_socket(&socket).await;
    let job_file = write_file(
        &dir,
        "j.json",
        r#"{"jobName": "once", "shardingTotalCount": 1}"#,
    );
    let put = shardcar(
        &["ctl", "job", "put", &job_file],
        &[("SHARDCAR_TARGET", &listen)],
    )
    .await;
    assert_eq!(
        (put.code, put.stdout.as_str()),
        (0, "job once created\n"),
        "{}",
        put.stderr
    );
    // A second sidecar on the same socket is refused and the first one keeps it.
    let second = shardcar(
        &["run", "--listen", &listen, "--advertise-ip", "127.0.0.3"],
        &[],
    )
    .await;
    assert_ne!(second.code, 0, "{}", second.stderr);
    assert!(
        second.stderr.contains(&format!(
            "cannot listen on {listen}: a running process accepts connections on {}; stop it or choose another path",
            socket.display()
        )),
        "{}",
        second.stderr
    );
    let jobs = shardcar(&["ctl", "--json", "jobs"], &[("SHARDCAR_TARGET", &listen)]).await;
    assert_eq!(jobs.json()["jobs"][0]["jobName"], "once");
    assert_eq!(jobs.json()["jobs"][0]["cron"], Value::Null);
    child.kill().await.unwrap();
    child.wait().await.unwrap();
    // Killed, it leaves its socket file behind; the next sidecar clears it and listens there.
    assert!(socket.exists());
    run_on_socket(&socket).await.kill().await.unwrap();

    // Nor is a file that is not a socket ever removed to make room for one.
    let file = write_file(&dir, "notes.txt", "keep me");
    let refused = shardcar(
        &[
            "run",
            "--listen",
            &format!("unix://{file}"),
            "--advertise-ip",
            "127.0.0.2",
        ],
        &[],
    )
    .await;
    assert_ne!(refused.code, 0, "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("exists and is not a socket; remove it or choose another path"),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

    let port = free_port();
    let target = format!("127.0.0.1:{port}");
    let out = shardcar(&["ctl", "--target", &target, "jobs"], &[]).await;
    assert_eq!(out.code, 69);
    assert!(
        out.stderr.starts_with(&format!(
            "shardcar ctl: cannot reach the sidecar at {target}: "
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("is `shardcar run` running there?"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ctl_against_zookeeper_sidecars() {
    let zk = ZooKeeper::start().await;
    let ns = "ops-ctl";
    let options = |ip: &str| SidecarOptions {
        namespace: ns.to_string(),
        ..SidecarOptions::zk(zk.connect_string(), ip)
    };
    let a = Sidecar::start(options("127.0.0.2")).await;
    let b = Sidecar::start(options("127.0.0.3")).await;
    let target = a.addr().to_string();
    let dir = tempfile::tempdir().unwrap();
    // ElasticJob's own config format is accepted as it is.
    let job_file = write_file(
        &dir,
        "config.yaml",
        &format!("cron: {NEVER}\njobName: billing\nshardingTotalCount: 4\nfailover: true\noverwrite: true\n"),
    );
    assert_eq!(
        ctl(&target, &["job", "put", &job_file]).await.stdout,
        "job billing created\n"
    );
    let request = || SubscribeRequest {
        config: None,
        ..subscribe_request(job_config("billing", NEVER, 4))
    };

    let wa = TestWorker::subscribe(&a.endpoint(), request())
        .await
        .unwrap();
    let wb = TestWorker::subscribe(&b.endpoint(), request())
        .await
        .unwrap();
    wa.wait_items(|i| i.len() == 2, WAIT).await.unwrap();
    wb.wait_items(|i| i.len() == 2, WAIT).await.unwrap();

    // Sidecar B's view and A's agree: they read the same namespace.
    let job = ctl_json(&b.addr().to_string(), &["job", "show", "billing"]).await["job"].clone();
    assert_eq!(job["servers"].as_array().unwrap().len(), 2);
    assert_eq!(job["instances"].as_array().unwrap().len(), 2);
    assert_eq!(job["config"]["failover"], true);

    // Disabling server B in every job moves its items to A; ZooKeeper holds ElasticJob's value.
    let out = ctl(&target, &["disable", "--server", "127.0.0.3"]).await;
    assert_eq!(out.stdout, "server 127.0.0.3 disabled in billing\n");
    wb.wait_items(|i| i.is_empty(), WAIT).await.unwrap();
    wa.wait_items(|i| i.len() == 4, WAIT).await.unwrap();
    let tree = zk_tree(&zk.connect_string(), ns).await;
    assert_eq!(
        tree.get("/ops-ctl/billing/servers/127.0.0.3")
            .map(|(d, _)| d.as_str()),
        Some("DISABLED")
    );
    ctl(&target, &["enable", "--server", "127.0.0.3", "billing"]).await;
    wb.wait_items(|i| i.len() == 2, WAIT).await.unwrap();

    // A trigger from sidecar A reaches the worker on B too.
    let out = ctl_json(&target, &["trigger", "billing"]).await;
    assert_eq!(out["instanceIds"].as_array().unwrap().len(), 2);
    let t = wb.next_trigger(WAIT).await.unwrap();
    assert_eq!(t.source, TriggerSource::Manual as i32);
    wa.next_trigger(WAIT).await.unwrap();

    // Removing the job shuts both workers down and leaves nothing behind.
    let out = ctl_json(&target, &["job", "rm", "billing"]).await;
    assert_eq!(out["instanceIds"].as_array().unwrap().len(), 2);
    wa.wait_stream_end(WAIT).await.unwrap();
    wb.wait_stream_end(WAIT).await.unwrap();
    let gone = common::eventually(WAIT, || async {
        let tree = zk_tree(&zk.connect_string(), ns).await;
        (!tree.contains_key("/ops-ctl/billing")).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "{:#?}",
        zk_tree(&zk.connect_string(), ns).await
    );
}

async fn health(endpoint: &str, service: &str) -> Option<ServingStatus> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_string())
        .ok()?
        .connect()
        .await
        .ok()?;
    let mut client = HealthClient::new(channel);
    let request = HealthCheckRequest {
        service: service.to_string(),
    };
    let response = tokio::time::timeout(Duration::from_secs(5), client.check(request))
        .await
        .ok()?
        .ok()?;
    ServingStatus::try_from(response.into_inner().status).ok()
}

async fn wait_health(endpoint: &str, service: &str, want: ServingStatus) {
    let seen = common::eventually(WAIT, || async {
        (health(endpoint, service).await == Some(want)).then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "health of {service:?} never became {want:?} (last: {:?})",
        health(endpoint, service).await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn health_follows_zookeeper_and_reflection_lists_services() {
    let mut zk = ZooKeeper::start().await;
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let car = Sidecar::start(SidecarOptions {
        namespace: "ops-health".into(),
        extra_args: vec!["--metrics-listen".into(), metrics_addr.clone()],
        ..SidecarOptions::zk(zk.connect_string(), "127.0.0.2")
    })
    .await;
    let endpoint = car.endpoint();
    for service in ["", "shardcar.v1.WorkerService", "shardcar.v1.AdminService"] {
        wait_health(&endpoint, service, ServingStatus::Serving).await;
    }
    // The HTTP probes (metrics_listen is the older name of http_listen).
    wait_probe(&metrics_addr, "/readyz", 200).await;
    assert_eq!(probe(&metrics_addr, "/healthz").await.0, 200);

    // Reflection, both versions, lists every service.
    let channel = tonic::transport::Endpoint::from_shared(endpoint.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    // No Date header on responses (src/api/serve.rs): each new date would enter the HPACK
    // table of every connection that gets an answer in that second.
    {
        let response = HealthClient::new(channel.clone())
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap();
        assert!(
            response.metadata().get("date").is_none(),
            "{:?}",
            response.metadata()
        );
    }
    {
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
        use tonic_reflection::pb::v1::ServerReflectionRequest;
        let mut client = ServerReflectionClient::new(channel.clone());
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        let response = stream.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
            panic!("not a service list: {response:?}");
        };
        let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        for want in [
            "shardcar.v1.WorkerService",
            "shardcar.v1.AdminService",
            "grpc.health.v1.Health",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
        }
    }
    {
        use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
        use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
        let mut client = ServerReflectionClient::new(channel);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        let response = stream.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
            panic!("not a service list: {response:?}");
        };
        assert!(list
            .service
            .iter()
            .any(|s| s.name == "shardcar.v1.AdminService"));
    }

    // ZooKeeper goes away: NOT_SERVING, and the metrics say so; it returns: SERVING again.
    zk.stop(0).await;
    wait_health(&endpoint, "", ServingStatus::NotServing).await;
    wait_health(
        &endpoint,
        "shardcar.v1.AdminService",
        ServingStatus::NotServing,
    )
    .await;
    let m = scrape(&metrics_addr).await;
    assert_eq!(metric(&m, "shardcar_zookeeper_connected"), 0.0);
    let not_ready = wait_probe(&metrics_addr, "/readyz", 503).await;
    assert!(
        not_ready.starts_with("not ready: ZooKeeper "),
        "{not_ready}"
    );
    assert_eq!(probe(&metrics_addr, "/healthz").await.0, 200, "still alive");
    zk.start_node(0).await;
    wait_probe(&metrics_addr, "/readyz", 200).await;
    wait_health(&endpoint, "", ServingStatus::Serving).await;
    wait_health(
        &endpoint,
        "shardcar.v1.WorkerService",
        ServingStatus::Serving,
    )
    .await;
    let m = scrape(&metrics_addr).await;
    assert_eq!(metric(&m, "shardcar_zookeeper_connected"), 1.0);
    let recoveries = metric(&m, "shardcar_zookeeper_reconnects_total")
        + metric(&m, "shardcar_zookeeper_session_expirations_total");
    assert!(recoveries >= 1.0, "{m:#?}");
}

/// `GET path` on the HTTP listener at `addr`: status and body.
async fn probe(addr: &str, path: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .timeout(WAIT)
        .send()
        .await
        .unwrap_or_else(|e| panic!("cannot GET {path} from {addr}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// Waits until `GET path` answers `status`; returns the body.
async fn wait_probe(addr: &str, path: &str, status: u16) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (got, body) = probe(addr, path).await;
        if got == status {
            return body;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("{path} never answered {status}; last: {got} {body}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Arguments after `run`, environment variables, the exact stderr expected.
type Case<'a> = (Vec<String>, Vec<(&'a str, &'a str)>, String);

#[tokio::test(flavor = "multi_thread")]
async fn bad_settings_are_refused_with_the_setting_named() {
    let dir = tempfile::tempdir().unwrap();
    let unknown = write_file(
        &dir,
        "unknown.toml",
        "zk = \"zk1.example:2181\"\nsession-timeout = \"5s\"\n",
    );
    let bad_listen = write_file(&dir, "listen.toml", "listen = \"nowhere\"\n");
    let not_toml = write_file(&dir, "broken.toml", "listen = \n");
    let ip = ["--advertise-ip", "127.0.0.2"];
    let cases: Vec<Case> = vec![
        (
            vec!["--config".into(), unknown.clone()],
            vec![],
            format!("shardcar: invalid setting session-timeout in {unknown}: is not a setting; write it as session_timeout\n"),
        ),
        (
            vec!["--config".into(), bad_listen.clone()],
            vec![],
            format!("shardcar: invalid setting listen in {bad_listen}: \"nowhere\" must be host:port (e.g. 127.0.0.1:50061) or unix:///path\n"),
        ),
        (
            vec![],
            vec![("SHARDCAR_CONFIG", not_toml.as_str())],
            format!("shardcar: invalid setting SHARDCAR_CONFIG: {not_toml} is not valid TOML (line 1): string values must be quoted, expected literal string\n"),
        ),
        (
            vec!["--metrics-listen".into(), "9090".into()],
            vec![],
            "shardcar: invalid setting --metrics-listen: \"9090\" must be host:port, e.g. 127.0.0.1:9090\n".into(),
        ),
        (
            vec!["--config".into(), bad_listen.clone(), "--listen".into(), "127.0.0.1:1".into(), "--session-timeout".into(), "1s".into()],
            vec![],
            "shardcar: invalid setting --session-timeout: must be between 2s and 120s\n".into(),
        ),
        (
            // A variable is read by the flag's name, and the flag wins over it.
            vec!["--session-timeout".into(), "1x".into()],
            vec![("SHARDCAR_SESSION_TIMEOUT", "5s")],
            "shardcar: invalid setting --session-timeout: \"1x\" has an unknown unit \"x\" (use ms, s, m or h)\n".into(),
        ),
        (
            vec![],
            vec![("SHARDCAR_SESSION_TIMEOUT", "1x")],
            "shardcar: invalid setting SHARDCAR_SESSION_TIMEOUT: \"1x\" has an unknown unit \"x\" (use ms, s, m or h)\n".into(),
        ),
        (
            // An empty variable is not set: the listen default stands.
            vec![],
            vec![("SHARDCAR_LISTEN", ""), ("SHARDCAR_LOG_FORMAT", "xml")],
            "shardcar: invalid setting SHARDCAR_LOG_FORMAT: \"xml\" must be text or json\n".into(),
        ),
        (
            vec![],
            vec![("SHARDCAR_HISTORY_SIZE", "lots")],
            "shardcar: invalid setting SHARDCAR_HISTORY_SIZE: \"lots\" must be a number from 0 to 1000000\n".into(),
        ),
        (
            vec!["--log-format".into(), "xml".into()],
            vec![],
            "shardcar: invalid setting --log-format: \"xml\" must be text or json\n".into(),
        ),
        (
            // Once a panic (#9): too long for a duration.
            vec!["--lease".into(), "99999999999999999999h".into()],
            vec![],
            "shardcar: invalid setting --lease: \"99999999999999999999h\" is too long to be a duration\n".into(),
        ),
        (
            // The Admin API reachable from other hosts, and no token.
            vec!["--listen".into(), "0.0.0.0:50061".into()],
            vec![],
            "shardcar: invalid setting --listen: 0.0.0.0:50061 is not a loopback address, so other hosts could use the Admin API: set admin_token (--admin-token, SHARDCAR_ADMIN_TOKEN) or admin_token_file, or listen on 127.0.0.1\n".into(),
        ),
        (
            vec![],
            vec![("SHARDCAR_HTTP_LISTEN", "0.0.0.0:8080")],
            "shardcar: invalid setting SHARDCAR_HTTP_LISTEN: 0.0.0.0:8080 is not a loopback address, so other hosts could use the console: set admin_token (--admin-token, SHARDCAR_ADMIN_TOKEN) or admin_token_file, or listen on 127.0.0.1\n".into(),
        ),
        (
            vec!["--listen".into(), "0.0.0.0:50061".into(), "--admin-token".into(), "secret".into()],
            vec![],
            "shardcar: invalid setting --admin-token: must be at least 16 characters long (e.g. the output of `openssl rand -hex 32`)\n".into(),
        ),
        (
            vec!["--shutdown-grace".into(), "1s".into()],
            vec![],
            "shardcar: invalid setting --shutdown-grace: must be at least the lease (5000 ms): a drain waits for its workers' leases to run out\n".into(),
        ),
    ];
    for (args, env, want) in cases {
        let mut all: Vec<&str> = vec!["run"];
        all.extend(ip);
        all.extend(args.iter().map(String::as_str));
        let out = shardcar(&all, &env).await;
        assert_eq!(out.code, 64, "{all:?}: {}", out.stderr);
        assert_eq!(out.stderr, want, "{all:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_world_accessible_unix_socket_needs_the_admin_token() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // Others may enter the directory: the socket's own mode decides.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("shardcar.sock");
    let listen = format!("unix://{}", socket.display());
    let start = |umask: &str, extra: &str| {
        tokio::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "umask {umask}; exec \"$0\" run --listen {listen} --advertise-ip 127.0.0.2 {extra}"
            ))
            .arg(env!("CARGO_BIN_EXE_shardcar"))
            .env_remove("SHARDCAR_ADMIN_TOKEN")
            .env_remove("SHARDCAR_LISTEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    // Every user may write to it, and there is no token: refused as a bad setting.
    let refused = tokio::time::timeout(WAIT, start("000", "").wait_with_output())
        .await
        .expect("the sidecar did not exit")
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "shardcar: invalid setting listen: {listen} is world-accessible"
        )) && stderr.contains("admin_token"),
        "{stderr}"
    );
    assert!(!socket.exists(), "the refused socket was left behind");
    // With a token, or a socket kept to its owner and group, it serves.
    for (umask, extra) in [("000", "--admin-token 0123456789abcdef-token"), ("007", "")] {
        let mut child = start(umask, extra);
        let ready = common::eventually(WAIT, || async {
            tokio::net::UnixStream::connect(&socket)
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        assert!(ready.is_some(), "umask {umask} {extra}: never listened");
        child.kill().await.unwrap();
        let _ = child.wait().await;
        let _ = std::fs::remove_file(&socket);
    }
}
