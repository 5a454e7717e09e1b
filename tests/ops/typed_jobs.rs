//! SCRIPT and HTTP jobs, run by the sidecars themselves: each sidecar joins the typed jobs of
//! its namespace as a worker of its own Worker API and runs its share of the items, as
//! ElasticJob's script and HTTP executors do (the sharding context JSON as the command's last
//! argument, or in the `shardingContext` header), under the same leases, revokes and history
//! as any worker's items.

use std::sync::{Arc, Mutex};

use shardcar::proto::{
    ExecutionOutcome, GetJobRequest, JobConfig, JobType, ListExecutionsRequest, PutJobRequest,
    ShutdownInstanceRequest, TriggerJobRequest,
};

use super::*;
use crate::common::eventually;

/// A cron that fires every second.
const EVERY_SECOND: &str = "* * * * * ?";

fn typed_job(name: &str, job_type: JobType, total: i32, props: &[(&str, &str)]) -> JobConfig {
    JobConfig {
        job_type: job_type as i32,
        props: props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..job_config(name, NEVER, total)
    }
}

async fn admin(car: &Sidecar) -> AdminServiceClient<tonic::transport::Channel> {
    AdminServiceClient::connect(car.endpoint()).await.unwrap()
}

/// The executions of `job` kept by `car`, newest first.
async fn executions(car: &Sidecar, job: &str) -> Vec<shardcar::proto::ExecutionInfo> {
    admin(car)
        .await
        .list_executions(ListExecutionsRequest {
            job_name: job.into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .executions
}

/// The live instances of `job`, as `GetJob` reports them.
async fn instances(car: &Sidecar, job: &str) -> Vec<shardcar::proto::InstanceInfo> {
    match admin(car)
        .await
        .get_job(GetJobRequest {
            job_name: job.into(),
        })
        .await
    {
        Ok(r) => r.into_inner().job.map(|j| j.instances).unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// An executable shell script `name` in `dir` with `body`; returns its path. (A command line
/// reaches its program as ElasticJob passes it, so `sh -c '...'` would get its script quoted:
/// scripts go in files.)
fn script(dir: &tempfile::TempDir, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// Waits until the sidecar's own instance of typed job `job` is live.
async fn wait_joined(car: &Sidecar, job: &str) {
    let joined = eventually(WAIT, || async {
        (instances(car, job).await.len() == 1).then_some(())
    })
    .await;
    assert!(joined.is_some(), "{job} never joined\n{}", car.log_tail(40));
}

/// Asks every instance of `job` to run it once now.
async fn trigger(car: &Sidecar, job: &str) {
    admin(car)
        .await
        .trigger_job(TriggerJobRequest {
            job_name: job.into(),
            job_parameter: None,
        })
        .await
        .unwrap();
}

/// The first finished execution of `job` that `pick` accepts.
async fn finished(
    car: &Sidecar,
    job: &str,
    pick: impl Fn(&shardcar::proto::ExecutionInfo) -> bool,
) -> shardcar::proto::ExecutionInfo {
    eventually(WAIT, || async {
        executions(car, job).await.into_iter().find(|e| pick(e))
    })
    .await
    .unwrap_or_else(|| panic!("no such execution of {job}\n{}", car.log_tail(40)))
}

/// Lines of a file, or none while it does not exist.
fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn script_jobs_run_on_every_sidecar_with_elasticjobs_sharding_context() {
    let zk = ZooKeeper::start().await;
    let a = Sidecar::start(SidecarOptions::zk(zk.connect_string(), "127.0.0.2")).await;
    let b = Sidecar::start(SidecarOptions::zk(zk.connect_string(), "127.0.0.3")).await;
    let dir = tempfile::tempdir().unwrap();
    // The JSON is the script's last argument.
    let script = script(
        &dir,
        "record.sh",
        &format!(
            "printf '%s %s\\n' \"$1\" \"$SHARDCAR_FENCING_TOKEN\" >> {}/item-$SHARDCAR_SHARDING_ITEM",
            dir.path().display()
        ),
    );
    let mut job = typed_job(
        "clean",
        JobType::Script,
        4,
        &[("script.command.line", script.as_str())],
    );
    job.cron = EVERY_SECOND.into();
    job.job_parameter = "mode=fast".into();
    job.sharding_item_parameters = [(0, "north"), (1, "south"), (2, "east"), (3, "west")]
        .into_iter()
        .map(|(i, p)| (i, p.to_string()))
        .collect();
    admin(&a)
        .await
        .put_job(PutJobRequest { config: Some(job) })
        .await
        .unwrap();
    // Both sidecars join (within their one-second look at the namespace) and share the items.
    let joined = eventually(WAIT, || async {
        (instances(&a, "clean").await.len() == 2).then_some(())
    })
    .await;
    assert!(joined.is_some(), "{}\n{}", a.log_tail(40), b.log_tail(40));
    let owners = |detail: shardcar::proto::JobDetail| -> BTreeMap<i32, String> {
        detail
            .items
            .iter()
            .filter(|i| !i.owner.is_empty())
            .map(|i| (i.item, i.owner.clone()))
            .collect()
    };
    let detail = admin(&a)
        .await
        .get_job(GetJobRequest {
            job_name: "clean".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    assert_eq!(
        detail.config.as_ref().unwrap().job_type,
        JobType::Script as i32
    );
    // Each item runs where it is owned: wait until every item's last run is its owner's.
    let ran_by_owner = eventually(WAIT, || async {
        let detail = admin(&a)
            .await
            .get_job(GetJobRequest {
                job_name: "clean".into(),
            })
            .await
            .ok()?
            .into_inner()
            .job?;
        let owners = owners(detail);
        // Both sidecars hold items: the leader reshards for the second one at once, or, near
        // a fire instant, just after it (`RESHARD_QUIET`).
        let hosts: BTreeSet<&str> = owners
            .values()
            .map(|id| id.split("@-@").next().unwrap())
            .collect();
        if owners.len() != 4 || hosts.len() != 2 {
            return None;
        }
        let mut last = BTreeMap::new();
        for item in 0..4 {
            let line = lines(&dir.path().join(format!("item-{item}"))).pop()?;
            let (json, token) = line.rsplit_once(' ')?;
            let context: Value = serde_json::from_str(json).ok()?;
            let task = context["taskId"].as_str()?.to_string();
            if !task.ends_with(&owners[&item]) {
                return None;
            }
            last.insert(item, (json.to_string(), task, token.to_string()));
        }
        Some((owners, last))
    })
    .await;
    let (owners, last) = ran_by_owner.unwrap_or_else(|| {
        panic!(
            "not every item ran on its owner\n{}\n{}",
            a.log_tail(40),
            b.log_tail(40)
        )
    });
    let hosts: BTreeSet<&str> = owners
        .values()
        .map(|id| id.split("@-@").next().unwrap())
        .collect();
    assert_eq!(hosts, ["127.0.0.2", "127.0.0.3"].into(), "{owners:?}");
    for (item, (json, task, token)) in &last {
        let parameter = ["north", "south", "east", "west"][*item as usize];
        // Byte for byte what ElasticJob's script executor passes (Gson escapes '=').
        assert_eq!(
            json,
            &format!(
                r#"{{"jobName":"clean","taskId":"{task}","shardingTotalCount":4,"jobParameter":"mode\u003dfast","shardingItem":{item},"shardingParameter":"{parameter}"}}"#
            )
        );
        assert!(task.starts_with("clean@-@"), "{task}");
        assert!(token.parse::<i64>().unwrap() > 0, "{token}");
    }
    // The job root names the type, as ElasticJob writes it.
    let tree = zk_tree(&zk.connect_string(), "shardcar-test").await;
    assert_eq!(tree["/shardcar-test/clean"].0, "SCRIPT");
    // Every execution that finished was completed by its sidecar.
    let finished = executions(&a, "clean").await;
    assert!(!finished.is_empty());
    assert!(
        finished
            .iter()
            .all(|e| e.outcome == ExecutionOutcome::Completed as i32),
        "{finished:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declared_script_job_reports_its_stderr_and_a_revoked_one_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let broken = script(&dir, "broken.sh", "echo it broke >&2\nexit 3");
    let settings = write_file(
        &dir,
        "shardcar.toml",
        &format!(
            "typed_jobs = \"declared\"\n\
             [[jobs]]\n\
             job_name = \"broken\"\n\
             type = \"SCRIPT\"\n\
             cron = \"0 0 0 1 1 ? 2099\"\n\
             sharding_total_count = 1\n\
             props = {{ \"script.command.line\" = \"{broken}\" }}\n"
        ),
    );
    let car = Sidecar::start(SidecarOptions {
        extra_args: vec!["--config".into(), settings],
        ..SidecarOptions::standalone()
    })
    .await;
    wait_joined(&car, "broken").await;
    trigger(&car, "broken").await;
    let failed = finished(&car, "broken", |_| true).await;
    assert_eq!(
        failed.outcome,
        ExecutionOutcome::Failed as i32,
        "{failed:#?}"
    );
    assert!(
        failed.error.contains("exit status: 3") && failed.error.contains("it broke"),
        "{failed:#?}"
    );

    // A script that ignores SIGTERM: a revoke terminates it, then kills it (its group too).
    let pid_file = dir.path().join("pid");
    let stubborn = script(
        &dir,
        "stubborn.sh",
        &format!(
            "trap '' TERM\necho $$ > {}\nsleep 60\ntrue",
            pid_file.display()
        ),
    );
    let mut job = typed_job(
        "broken",
        JobType::Script,
        1,
        &[("script.command.line", stubborn.as_str())],
    );
    job.description = "ignores SIGTERM".into();
    admin(&car)
        .await
        .put_job(PutJobRequest { config: Some(job) })
        .await
        .unwrap();
    trigger(&car, "broken").await;
    let pid: i32 = eventually(WAIT, || async {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    })
    .await
    .unwrap_or_else(|| panic!("the script did not start\n{}", car.log_tail(40)));
    let alive = |pid: i32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    assert!(alive(pid));
    let instance = instances(&car, "broken").await[0].instance_id.clone();
    admin(&car)
        .await
        .shutdown_instance(ShutdownInstanceRequest {
            job_name: "broken".into(),
            instance_id: instance.clone(),
        })
        .await
        .unwrap();
    let gone = eventually(WAIT, || async { (!alive(pid)).then_some(()) }).await;
    assert!(
        gone.is_some(),
        "the script outlived its revoke\n{}",
        car.log_tail(40)
    );
    finished(&car, "broken", |e| {
        e.outcome == ExecutionOutcome::Revoked as i32
    })
    .await;
    let log = car.log();
    assert!(
        log.contains("the script did not stop on SIGTERM: killing it"),
        "{log}"
    );
    // The stream of a remotely shut down instance ends once its revoked run is declined, so the
    // runner lets the job go just after the execution is recorded, not before.
    let let_go = eventually(WAIT, || async {
        car.log()
            .contains("no longer running the job on this sidecar")
            .then_some(())
    })
    .await;
    assert!(let_go.is_some(), "{}", car.log());
    // A shut-down instance stays down, as an ElasticJob process's would.
    assert!(instances(&car, "broken").await.is_empty());
}

/// A request as the test's HTTP server received it.
#[derive(Clone, Debug)]
struct Received {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: String,
}

/// A small HTTP/1.1 server: answers 200 `ok`, or 500 `nope` for paths under `/fail`.
async fn http_server() -> (
    String,
    Arc<Mutex<Vec<Received>>>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    let log = received.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at;
                    }
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                let mut lines = head.split("\r\n");
                let mut start = lines.next().unwrap_or_default().split(' ');
                let (method, path) = (
                    start.next().unwrap_or_default().to_string(),
                    start.next().unwrap_or_default().to_string(),
                );
                let headers: BTreeMap<String, String> = lines
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                    .collect();
                let length: usize = headers
                    .get("content-length")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(0);
                let mut body = buf[head_end + 4..].to_vec();
                while body.len() < length {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => body.extend_from_slice(&chunk[..n]),
                    }
                }
                let (status, text) = if path.starts_with("/fail") {
                    ("500 Internal Server Error", "nope")
                } else {
                    ("200 OK", "ok")
                };
                log.lock().unwrap().push(Received {
                    method,
                    path,
                    headers,
                    body: String::from_utf8_lossy(&body).into_owned(),
                });
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    (format!("http://{addr}"), received, task)
}

#[tokio::test(flavor = "multi_thread")]
async fn http_jobs_call_the_uri_with_elasticjobs_header_and_fail_on_an_error_status() {
    let (base, received, server) = http_server().await;
    let car = Sidecar::start(SidecarOptions::standalone()).await;
    let uri = format!("{base}/run");
    let job = typed_job(
        "ping",
        JobType::Http,
        2,
        &[
            ("http.uri", uri.as_str()),
            ("http.method", "POST"),
            ("http.data", "source=shardcar"),
            ("http.content.type", "application/x-www-form-urlencoded"),
        ],
    );
    admin(&car)
        .await
        .put_job(PutJobRequest { config: Some(job) })
        .await
        .unwrap();
    wait_joined(&car, "ping").await;
    trigger(&car, "ping").await;
    let done = finished(&car, "ping", |_| true).await;
    assert_eq!(
        done.outcome,
        ExecutionOutcome::Completed as i32,
        "{done:#?}"
    );
    let calls = received.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    let mut items = BTreeSet::new();
    for call in &calls {
        assert_eq!((call.method.as_str(), call.path.as_str()), ("POST", "/run"));
        assert_eq!(call.body, "source=shardcar");
        assert_eq!(
            call.headers["content-type"],
            "application/x-www-form-urlencoded"
        );
        let context: Value = serde_json::from_str(&call.headers["shardingcontext"]).unwrap();
        assert_eq!(context["jobName"], "ping");
        assert_eq!(context["shardingTotalCount"], 2);
        assert!(context.get("shardingParameter").is_none(), "{context}");
        items.insert(context["shardingItem"].as_i64().unwrap());
        assert!(
            call.headers["x-shardcar-fencing-token"]
                .parse::<i64>()
                .unwrap()
                > 0
        );
    }
    assert_eq!(items, [0, 1].into());

    // An error status fails the item, with the status and the body in the history.
    let fail = format!("{base}/fail");
    let job = typed_job(
        "ping",
        JobType::Http,
        2,
        &[("http.uri", fail.as_str()), ("http.method", "GET")],
    );
    admin(&car)
        .await
        .put_job(PutJobRequest { config: Some(job) })
        .await
        .unwrap();
    trigger(&car, "ping").await;
    let failed = finished(&car, "ping", |e| {
        e.outcome == ExecutionOutcome::Failed as i32
    })
    .await;
    assert!(
        failed.error.contains("500") && failed.error.contains("nope"),
        "{failed:#?}"
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn typed_jobs_with_bad_props_or_subscribed_by_a_worker_are_refused() {
    let car = Sidecar::start(SidecarOptions::standalone()).await;
    let refused = |job: JobConfig| {
        let car = &car;
        async move {
            admin(car)
                .await
                .put_job(PutJobRequest { config: Some(job) })
                .await
                .unwrap_err()
        }
    };
    let e = refused(typed_job("s", JobType::Script, 1, &[])).await;
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("script.command.line"), "{e:?}");
    let e = refused(typed_job(
        "h",
        JobType::Http,
        1,
        &[
            ("http.uri", "http://127.0.0.1:1/"),
            ("http.method", "FETCH"),
        ],
    ))
    .await;
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("http.method"), "{e:?}");
    let mut client = car.client().await;
    let mut request = subscribe_request(typed_job(
        "s",
        JobType::Script,
        1,
        &[("script.command.line", "/bin/true")],
    ));
    request.pid = std::process::id();
    let e = client.subscribe(request).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("job_type"), "{e:?}");
    // Nothing was written.
    let jobs = admin(&car)
        .await
        .list_jobs(shardcar::proto::ListJobsRequest {})
        .await
        .unwrap()
        .into_inner()
        .jobs;
    assert!(jobs.is_empty(), "{jobs:?}");
}
