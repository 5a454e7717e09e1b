//! Tests of the integration-test harness itself (`tests/common`), most without a working sidecar:
//! ZooKeeper single node and ensemble, process cleanup, the namespace dump, and `TestWorker`
//! against an in-test fake of the `Worker` service.
#![allow(
    clippy::disallowed_methods,
    reason = "tests, benchmarks and examples run against real time and real processes"
)]
mod common;

use common::{free_port, job_config, subscribe_request, zk_tree, StreamEnd, TestWorker, ZooKeeper};
use shardcar::proto::worker_service_server::{WorkerService, WorkerServiceServer};
use shardcar::proto::{
    subscribe_response::Event, Assignment, CompleteRequest, CompleteResponse, DeclineRequest,
    DeclineResponse, Registered, ReportFailureRequest, ReportFailureResponse, ShardItem,
    SubscribeRequest, SubscribeResponse, Trigger, TriggerSource,
};
use std::collections::HashSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use zookeeper_client::{Acls, Client, CreateMode};

const WAIT: Duration = Duration::from_secs(10);

fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

async fn connect(connect: &str) -> Client {
    tokio::time::timeout(WAIT, Client::connect(connect))
        .await
        .expect("ZooKeeper session within 10 s")
        .expect("connect to ZooKeeper")
}

#[test]
fn free_ports_are_distinct_and_bindable() {
    let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
    let unique: HashSet<u16> = ports.iter().copied().collect();
    assert_eq!(
        unique.len(),
        ports.len(),
        "free_port handed out a port twice: {ports:?}"
    );
    for port in ports {
        if let Err(e) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            // Say who holds it. It failed so (AddrInUse, a listener with no holder left) when
            // free_port's check listened: a child forked by a parallel test held a copy until
            // its exec. The check no longer listens (`bindable` in tests/common/mod.rs).
            panic!(
                "free port {port} cannot be bound ({e}); sockets on it (/proc/net/tcp: local, remote, state, uid, inode):\n{}",
                sockets_on(port)
            );
        }
    }
}

/// The lines of `/proc/net/tcp` whose local port is `port`, with the pids whose descriptors hold
/// each socket's inode.
fn sockets_on(port: u16) -> String {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let mut out = String::new();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let local_port = f
            .get(1)
            .and_then(|a| a.rsplit_once(':'))
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        if local_port != Some(port) || f.len() < 10 {
            continue;
        }
        let inode = f[9];
        let holders: Vec<String> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|pid| {
                pid.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .filter_map(|pid| {
                let fds = std::fs::read_dir(pid.path().join("fd")).ok()?;
                let socket = format!("socket:[{inode}]");
                fds.flatten()
                    .any(|fd| {
                        std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == socket)
                    })
                    .then(|| {
                        let cmd =
                            std::fs::read_to_string(pid.path().join("cmdline")).unwrap_or_default();
                        format!(
                            "{} {}",
                            pid.file_name().to_string_lossy(),
                            cmd.replace('\0', " ")
                        )
                    })
            })
            .collect();
        out.push_str(&format!(
            "  {} {} state {} uid {} inode {inode} held by {holders:?}\n",
            f[1], f[2], f[3], f[7]
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn single_zookeeper_serves_pauses_and_dies_on_drop() {
    let mut zk = ZooKeeper::start().await;
    assert_eq!(zk.mode(0).await.as_deref(), Some("standalone"));
    let pid = zk.pid(0).expect("running");
    assert!(process_exists(pid));

    let client = connect(&zk.connect_string()).await;
    let create = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client
        .create("/smoke", b"hello", &create)
        .await
        .expect("create");
    let (data, _) = client.get_data("/smoke").await.expect("read back");
    assert_eq!(data, b"hello");
    drop(client);

    zk.pause(0);
    assert_eq!(zk.mode(0).await, None, "a paused node answers nothing");
    zk.resume(0);
    zk.wait_ready(0, WAIT).await;

    drop(zk);
    assert!(
        !process_exists(pid),
        "ZooKeeper pid {pid} survived the drop"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ensemble_forms_a_quorum_and_survives_losing_its_leader() {
    let mut zk = ZooKeeper::ensemble(3).await;
    let mut modes = Vec::new();
    for i in 0..3 {
        modes.push(zk.mode(i).await.expect("every node serves"));
    }
    modes.sort();
    assert_eq!(modes, ["follower", "follower", "leader"]);
    let ports: HashSet<u16> = (0..3).map(|i| zk.client_port(i)).collect();
    assert_eq!(ports.len(), 3);

    let client = connect(&zk.connect_string()).await;
    let create = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client
        .create("/before", b"1", &create)
        .await
        .expect("create");
    drop(client);

    let leader = zk.leader().await.expect("a leader");
    zk.stop(leader).await;
    assert_eq!(zk.pid(leader), None);
    let survivors: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    // The two survivors elect a new leader among themselves.
    let elected = common::eventually(Duration::from_secs(30), || async {
        for &i in &survivors {
            if zk.mode(i).await.as_deref() == Some("leader") {
                return Some(i);
            }
        }
        None
    })
    .await;
    assert!(elected.is_some(), "no new leader among {survivors:?}");

    let client = connect(&zk.connect_string()).await;
    client
        .create("/after", b"2", &create)
        .await
        .expect("write without the old leader");
    assert_eq!(client.get_data("/before").await.expect("read").0, b"1");
    drop(client);

    // The stopped node comes back as a follower and catches up.
    zk.start_node(leader).await;
    assert_eq!(zk.mode(leader).await.as_deref(), Some("follower"));
    let direct = connect(&format!("127.0.0.1:{}", zk.client_port(leader))).await;
    direct.sync("/").await.expect("sync");
    assert_eq!(direct.get_data("/after").await.expect("read").0, b"2");
}

#[tokio::test(flavor = "multi_thread")]
async fn zk_tree_dumps_a_namespace_with_ephemeral_flags() {
    let zk = ZooKeeper::start().await;
    let client = connect(&zk.connect_string()).await;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    client
        .create("/ns", b"", &persistent)
        .await
        .expect("create");
    client
        .create("/ns/job", b"cfg", &persistent)
        .await
        .expect("create");
    client
        .create("/ns/job/eph", b"me", &ephemeral)
        .await
        .expect("create");
    client
        .create("/other", b"x", &persistent)
        .await
        .expect("create");

    let tree = zk_tree(&zk.connect_string(), "ns").await;
    let expected: Vec<(&str, (&str, bool))> = vec![
        ("/ns", ("", false)),
        ("/ns/job", ("cfg", false)),
        ("/ns/job/eph", ("me", true)),
    ];
    let got: Vec<(&str, (&str, bool))> = tree
        .iter()
        .map(|(p, (d, e))| (p.as_str(), (d.as_str(), *e)))
        .collect();
    assert_eq!(got, expected);
    assert!(zk_tree(&zk.connect_string(), "/missing").await.is_empty());
}

/// What the fake `Worker` service saw.
#[derive(Default)]
struct Seen {
    completes: Vec<CompleteRequest>,
    failures: Vec<ReportFailureRequest>,
}

/// A fake sidecar: Registered, an Assignment of items 0 and 1, then one Trigger per second;
/// it records answers and notes when the worker drops its stream.
#[derive(Clone, Default)]
struct FakeWorkerService {
    seen: Arc<Mutex<Seen>>,
    dropped_tx: Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>,
}

type EventStream = Pin<Box<dyn futures::Stream<Item = Result<SubscribeResponse, Status>> + Send>>;

#[tonic::async_trait]
impl WorkerService for FakeWorkerService {
    type SubscribeStream = EventStream;

    async fn subscribe(
        &self,
        request: Request<SubscribeRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let request = request.into_inner();
        if request.job_name.is_empty() {
            return Err(Status::invalid_argument("job_name is empty"));
        }
        let instance_id = format!("127.0.0.9@-@{}", request.pid);
        let (tx, rx) = mpsc::channel(16);
        let dropped_tx = self.dropped_tx.lock().unwrap().take();
        tokio::spawn(async move {
            let event = |e| Ok(SubscribeResponse { event: Some(e) });
            let items = vec![
                ShardItem {
                    item: 0,
                    parameter: "a".into(),
                },
                ShardItem {
                    item: 1,
                    parameter: "b".into(),
                },
            ];
            let _ = tx
                .send(event(Event::Registered(Registered {
                    instance_id,
                    config: request.config,
                })))
                .await;
            let _ = tx
                .send(event(Event::Assignment(Assignment {
                    items: items.clone(),
                    leader: true,
                    epoch: 1,
                })))
                .await;
            for n in 1.. {
                let trigger = Trigger {
                    execution_id: format!("exec-{n}"),
                    items: items.clone(),
                    source: TriggerSource::Manual as i32,
                    sharding_total_count: 2,
                    ..Default::default()
                };
                tokio::select! {
                    _ = tx.closed() => break,
                    sent = tx.send(event(Event::Trigger(trigger))) => if sent.is_err() { break },
                }
                tokio::select! {
                    _ = tx.closed() => break,
                    _ = tokio::time::sleep(Duration::from_millis(300)) => {}
                }
            }
            if let Some(dropped_tx) = dropped_tx {
                let _ = dropped_tx.send(());
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn complete(
        &self,
        request: Request<CompleteRequest>,
    ) -> Result<Response<CompleteResponse>, Status> {
        self.seen
            .lock()
            .unwrap()
            .completes
            .push(request.into_inner());
        Ok(Response::new(CompleteResponse {}))
    }

    async fn report_failure(
        &self,
        request: Request<ReportFailureRequest>,
    ) -> Result<Response<ReportFailureResponse>, Status> {
        self.seen
            .lock()
            .unwrap()
            .failures
            .push(request.into_inner());
        Ok(Response::new(ReportFailureResponse {}))
    }

    async fn decline(
        &self,
        _request: Request<DeclineRequest>,
    ) -> Result<Response<DeclineResponse>, Status> {
        Ok(Response::new(DeclineResponse {}))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn test_worker_records_events_answers_and_closes() {
    let service = FakeWorkerService::default();
    let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel();
    *service.dropped_tx.lock().unwrap() = Some(dropped_tx);
    let port = free_port();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind");
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WorkerServiceServer::new(service.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let endpoint = format!("http://127.0.0.1:{port}");

    let rejected = TestWorker::subscribe(&endpoint, Default::default()).await;
    assert_eq!(
        rejected.err().map(|s| s.code()),
        Some(tonic::Code::InvalidArgument)
    );

    let request = subscribe_request(job_config("smokeJob", "0/5 * * * * ?", 2));
    let pid = request.pid;
    let mut worker = TestWorker::subscribe(&endpoint, request)
        .await
        .expect("subscribe");
    assert_eq!(worker.instance_id(), format!("127.0.0.9@-@{pid}"));
    let registered = worker.registered().expect("registered");
    assert_eq!(
        registered
            .config
            .expect("config echoed")
            .sharding_total_count,
        2
    );
    assert_eq!(
        worker
            .wait_items(|items| items == [0, 1], WAIT)
            .await
            .unwrap(),
        [0, 1]
    );
    assert!(worker.is_leader());

    let first = worker.next_trigger(WAIT).await.unwrap();
    let second = worker.next_trigger(WAIT).await.unwrap();
    assert_eq!(
        (first.execution_id.as_str(), second.execution_id.as_str()),
        ("exec-1", "exec-2")
    );
    worker
        .complete(&first.execution_id, &[0, 1])
        .await
        .expect("complete");
    worker
        .report_failure(&second.execution_id, 1, "boom")
        .await
        .expect("report");
    worker.set_auto_complete(true);
    worker
        .wait_for(|_| !worker.auto_completed().is_empty(), WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A condition that never holds times out with the events in the message.
    let err = worker
        .wait_items(|items| items.is_empty(), Duration::from_millis(200))
        .await
        .expect_err("items never become empty");
    assert!(err.to_string().contains("Assignment items=[0, 1]"), "{err}");

    worker.close().await;
    assert!(worker.stream_ended());
    assert!(matches!(worker.end(), Some(StreamEnd::Closed)));
    tokio::time::timeout(WAIT, dropped_rx)
        .await
        .expect("the server noticed the stream was dropped")
        .expect("sender kept");
    {
        let seen = service.seen.lock().unwrap();
        assert_eq!(seen.completes[0].instance_id, worker.instance_id());
        assert_eq!(seen.completes[0].items, [0, 1]);
        assert_eq!(seen.failures.len(), 1);
        assert_eq!(seen.failures[0].error, "boom");
    }
    server.abort();
}

/// A real standalone sidecar and a worker subscribed to it.
/// Ignored until `shardcar run` is implemented (the lead un-ignores it).
#[tokio::test(flavor = "multi_thread")]
async fn standalone_sidecar_registers_a_worker() {
    let mut sidecar = common::Sidecar::start(common::SidecarOptions::standalone()).await;
    let request = subscribe_request(job_config("smokeJob", "", 3));
    let pid = request.pid;
    let worker = TestWorker::subscribe(&sidecar.endpoint(), request)
        .await
        .expect("subscribe");
    assert_eq!(worker.instance_id(), format!("{}@-@{pid}", sidecar.ip()));
    let items = worker
        .wait_items(|items| items == [0, 1, 2], WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n--- sidecar log ---\n{}", sidecar.log_tail(40)));
    assert_eq!(items, [0, 1, 2]);
    drop(worker);

    let pid = sidecar.pid();
    sidecar.terminate();
    assert!(
        sidecar.wait_exit(WAIT).await.is_some(),
        "no exit within 10 s of SIGTERM"
    );
    drop(sidecar);
    assert!(!process_exists(pid));
}

/// The ledger of the failure scenarios catches what it is there to catch.
#[test]
fn ledger_catches_overlaps_and_missing_reruns() {
    use common::ledger::{Ledger, Stop};
    use shardcar::proto::subscribe_response::Event;
    use shardcar::proto::{ShardItem, SubscribeResponse, Trigger, TriggerSource};
    use std::time::{Duration, Instant};

    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let trigger = |ms: u64, exec: &str, source: TriggerSource| {
        let t = Trigger {
            execution_id: exec.into(),
            items: vec![ShardItem {
                item: 3,
                parameter: String::new(),
            }],
            source: source as i32,
            ..Default::default()
        };
        (
            at(ms),
            SubscribeResponse {
                event: Some(Event::Trigger(t)),
            },
        )
    };
    let caught = |f: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();

    // A killed worker's run (0..100 ms), then a FAILOVER run elsewhere from 150 ms: fine.
    let mut good = Ledger::new();
    good.record(
        "a",
        &[trigger(0, "e1", TriggerSource::Cron)],
        &[],
        Some(Stop::Worker(at(100))),
    );
    good.record(
        "b",
        &[trigger(150, "e2", TriggerSource::Failover)],
        &[("e2".into(), at(200))],
        None,
    );
    good.assert_no_overlap();
    good.assert_interrupted_reran();

    // The second run starts before the first one stopped: an overlap.
    let mut overlap = Ledger::new();
    overlap.record(
        "a",
        &[trigger(0, "e1", TriggerSource::Cron)],
        &[],
        Some(Stop::Worker(at(100))),
    );
    overlap.record(
        "b",
        &[trigger(50, "e2", TriggerSource::Failover)],
        &[("e2".into(), at(200))],
        None,
    );
    assert!(
        caught(&|| overlap.assert_no_overlap()),
        "an overlap must be caught"
    );

    // An interrupted run with no FAILOVER run after it.
    let mut lost = Ledger::new();
    lost.record(
        "a",
        &[trigger(0, "e1", TriggerSource::Cron)],
        &[],
        Some(Stop::Worker(at(100))),
    );
    assert!(
        caught(&|| lost.assert_interrupted_reran()),
        "a lost item must be caught"
    );
}

/// The fencing store of the ledger refuses a write under a token lower than one it already
/// accepted for the item, and the check reports it.
#[test]
fn ledger_fencing_store_catches_a_write_under_an_older_token() {
    use common::ledger::Ledger;
    use common::worker::{RunEnd, StrictRun};
    use shardcar::proto::TriggerSource;
    use std::time::Instant;

    let t0 = Instant::now();
    let run = |exec: &str, token: i64, start: u64, end: u64| StrictRun {
        execution_id: exec.into(),
        items: vec![3],
        source: TriggerSource::Cron as i32,
        tokens: [(3, token)].into_iter().collect(),
        start: t0 + Duration::from_millis(start),
        end: Some(t0 + Duration::from_millis(end)),
        outcome: Some(RunEnd::Completed),
        reply: Some(Ok(())),
    };
    let caught = |f: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();

    // Token 5 writes, then token 6: both accepted.
    let mut good = Ledger::new();
    good.record_strict("a", &[run("e1", 5, 0, 100)], &[], None);
    good.record_strict("b", &[run("e2", 6, 150, 250)], &[], None);
    assert_eq!(good.assert_fencing_store_accepts_every_write(), 2);

    // Token 6 has written when the holder of token 5 writes: refused, and reported.
    let mut stale = Ledger::new();
    stale.record_strict("a", &[run("e1", 5, 0, 300)], &[], None);
    stale.record_strict("b", &[run("e2", 6, 100, 200)], &[], None);
    assert!(
        caught(&|| {
            stale.assert_fencing_store_accepts_every_write();
        }),
        "a refused write must be caught"
    );
}
