//! Core scenarios against a real ZooKeeper and real `shardcar` processes: sharing a job's
//! items, eager resharding, leader failure, triggers and answers, invalid requests, the
//! standalone mode, and ElasticJob's exact layout.
#![allow(
    clippy::disallowed_methods,
    reason = "tests, benchmarks and examples run against real time and real processes"
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{
    job_config, subscribe_request, zk_tree, Sidecar, SidecarOptions, TestWorker, ZooKeeper,
};
use shardcar::proto::{JobConfig, ShardingStrategy, SubscribeRequest, TriggerSource};
use tonic::Code;

const WAIT: Duration = Duration::from_secs(30);
/// A cron that never fires during a test (1 January 2099).
const NEVER: &str = "0 0 0 1 1 ? 2099";
const EVERY_SECOND: &str = "* * * * * ?";

async fn sidecars(zk: &ZooKeeper, namespace: &str, ips: &[&str]) -> Vec<Sidecar> {
    let mut out = Vec::new();
    for ip in ips {
        let options = SidecarOptions {
            namespace: namespace.to_string(),
            ..SidecarOptions::zk(zk.connect_string(), *ip)
        };
        out.push(Sidecar::start(options).await);
    }
    out
}

/// Every item `0..total` is held by exactly one of `workers` (by their latest assignments).
fn partition(workers: &[&TestWorker], total: i32) -> Result<(), String> {
    let mut owners: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for w in workers {
        for i in w.current_items() {
            owners
                .entry(i)
                .or_default()
                .push(w.instance_id().to_string());
        }
    }
    let all: BTreeSet<i32> = owners.keys().copied().collect();
    let doubles: Vec<_> = owners.iter().filter(|(_, o)| o.len() > 1).collect();
    if all == (0..total).collect() && doubles.is_empty() {
        Ok(())
    } else {
        Err(format!("items held: {owners:?}"))
    }
}

async fn wait_partition(workers: &[&TestWorker], total: i32) {
    let ok = common::eventually(WAIT, || async { partition(workers, total).ok() }).await;
    if ok.is_none() {
        let detail: Vec<String> = workers.iter().map(|w| w.summary()).collect();
        panic!(
            "items never partitioned: {}\n{}",
            partition(workers, total).unwrap_err(),
            detail.join("\n")
        );
    }
}

fn data(tree: &common::ZkTree, path: &str) -> Option<String> {
    tree.get(path).map(|(d, _)| d.clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn three_sidecars_and_five_workers_share_ten_items() {
    let zk = ZooKeeper::start().await;
    let ns = "core-share";
    let cars = sidecars(&zk, ns, &["127.0.0.2", "127.0.0.3", "127.0.0.4"]).await;
    let config = job_config("orders", NEVER, 10);
    let mut workers = Vec::new();
    for i in 0..5 {
        let car = &cars[i % 3];
        workers.push(
            TestWorker::subscribe(&car.endpoint(), subscribe_request(config.clone()))
                .await
                .unwrap(),
        );
    }
    let refs: Vec<&TestWorker> = workers.iter().collect();
    wait_partition(&refs, 10).await;

    // ZooKeeper agrees: every item names one of the live instances, and exactly one leader.
    let tree = zk_tree(&zk.connect_string(), ns).await;
    let ids: BTreeSet<String> = workers
        .iter()
        .map(|w| w.instance_id().to_string())
        .collect();
    for i in 0..10 {
        let owner =
            data(&tree, &format!("/{ns}/orders/sharding/{i}/instance")).expect("item has an owner");
        assert!(
            ids.contains(&owner),
            "item {i} owned by {owner}, not a live instance"
        );
    }
    let leader = data(&tree, &format!("/{ns}/orders/leader/election/instance")).expect("a leader");
    assert!(ids.contains(&leader));
    assert_eq!(
        workers.iter().filter(|w| w.is_leader()).count(),
        1,
        "exactly one worker is told it leads"
    );
    for car in &cars {
        assert_eq!(
            data(&tree, &format!("/{ns}/orders/servers/{}", car.ip())).as_deref(),
            Some("ENABLED")
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_the_leaders_sidecar_elects_a_new_leader_that_reshards() {
    let zk = ZooKeeper::start().await;
    let ns = "core-leader";
    let mut cars = sidecars(&zk, ns, &["127.0.0.2", "127.0.0.3", "127.0.0.4"]).await;
    let config = job_config("reports", NEVER, 9);
    let mut workers = Vec::new();
    for car in &cars {
        workers.push(
            TestWorker::subscribe(&car.endpoint(), subscribe_request(config.clone()))
                .await
                .unwrap(),
        );
    }
    let refs: Vec<&TestWorker> = workers.iter().collect();
    wait_partition(&refs, 9).await;
    let tree = zk_tree(&zk.connect_string(), ns).await;
    let leader = data(&tree, &format!("/{ns}/reports/leader/election/instance")).unwrap();
    let dead = workers
        .iter()
        .position(|w| w.instance_id() == leader)
        .unwrap();

    cars[dead].kill();
    let survivors: Vec<&TestWorker> = workers
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != dead)
        .map(|(_, w)| w)
        .collect();
    wait_partition(&survivors, 9).await;
    let tree = zk_tree(&zk.connect_string(), ns).await;
    let new_leader =
        data(&tree, &format!("/{ns}/reports/leader/election/instance")).expect("a new leader");
    assert_ne!(new_leader, leader);
    assert!(survivors.iter().any(|w| w.instance_id() == new_leader));
    assert!(!tree.contains_key(&format!("/{ns}/reports/instances/{leader}")));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_joining_worker_updates_every_assignment_without_a_fire() {
    let zk = ZooKeeper::start().await;
    let ns = "core-join";
    let cars = sidecars(&zk, ns, &["127.0.0.2", "127.0.0.3"]).await;
    let config = job_config("billing", NEVER, 6);
    let a = TestWorker::subscribe(&cars[0].endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let b = TestWorker::subscribe(&cars[1].endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    wait_partition(&[&a, &b], 6).await;
    let c = TestWorker::subscribe(&cars[1].endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    wait_partition(&[&a, &b, &c], 6).await;
    // Assignments arrive one by one; wait for the final one of each worker.
    let settled = common::eventually(WAIT, || async {
        (partition(&[&a, &b, &c], 6).is_ok()
            && [&a, &b, &c].iter().all(|w| w.current_items().len() == 2))
        .then_some(())
    })
    .await;
    assert!(
        settled.is_some(),
        "{}\n{}\n{}",
        a.summary(),
        b.summary(),
        c.summary()
    );
    for w in [&a, &b, &c] {
        assert_eq!(
            w.current_items().len(),
            2,
            "6 items over 3 workers: {}",
            w.summary()
        );
        assert!(
            w.triggers().is_empty(),
            "no fire happened, yet: {}",
            w.summary()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_disconnects_gives_its_items_to_the_others() {
    let zk = ZooKeeper::start().await;
    let ns = "core-leave";
    let cars = sidecars(&zk, ns, &["127.0.0.2", "127.0.0.3"]).await;
    let config = job_config("mail", NEVER, 5);
    let a = TestWorker::subscribe(&cars[0].endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let b = TestWorker::subscribe(&cars[1].endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let mut c = TestWorker::subscribe(&cars[1].endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    wait_partition(&[&a, &b, &c], 5).await;
    let gone = c.instance_id().to_string();
    c.close().await;
    wait_partition(&[&a, &b], 5).await;
    let tree = zk_tree(&zk.connect_string(), ns).await;
    assert!(
        !tree.contains_key(&format!("/{ns}/mail/instances/{gone}")),
        "instance node removed at once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn triggers_reach_the_owners_and_complete_clears_running() {
    let zk = ZooKeeper::start().await;
    let ns = "core-trigger";
    let cars = sidecars(&zk, ns, &["127.0.0.2", "127.0.0.3"]).await;
    let mut config = job_config("ship", EVERY_SECOND, 4);
    config.sharding_item_parameters = [(0, "north".to_string()), (3, "west".to_string())].into();
    config.job_parameter = "express".into();
    let a = TestWorker::subscribe(&cars[0].endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let b = TestWorker::subscribe(&cars[1].endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    wait_partition(&[&a, &b], 4).await;

    for w in [&a, &b] {
        // Skip any trigger sent before the final assignment, and a catch-up: a fire decided
        // while the reshard was in flight is refused by the owner check and caught up as
        // MISFIRE on a fresh read.
        let trigger = loop {
            let t = w.next_trigger(WAIT).await.unwrap();
            let items: Vec<i32> = t.items.iter().map(|i| i.item).collect();
            if items == w.current_items() && t.source == TriggerSource::Cron as i32 {
                break t;
            }
            w.complete(&t.execution_id, &items).await.unwrap();
        };
        let items: Vec<i32> = trigger.items.iter().map(|i| i.item).collect();
        assert_eq!(trigger.source, TriggerSource::Cron as i32);
        assert_eq!(trigger.job_parameter, "express");
        assert_eq!(trigger.sharding_total_count, 4);
        for item in &trigger.items {
            let expected = config
                .sharding_item_parameters
                .get(&item.item)
                .cloned()
                .unwrap_or_default();
            assert_eq!(item.parameter, expected);
        }
        let pid = w.instance_id().split("@-@").nth(1).unwrap();
        let joined: Vec<String> = items.iter().map(|i| i.to_string()).collect();
        assert_eq!(
            trigger.task_id,
            format!(
                "ship@-@{}@-@READY@-@{}@-@{pid}",
                joined.join(","),
                w.instance_id().split("@-@").next().unwrap()
            )
        );
        assert_eq!(
            trigger
                .fencing_tokens
                .keys()
                .copied()
                .collect::<BTreeSet<_>>(),
            items.iter().copied().collect()
        );

        // While unanswered, the items are marked running by this instance.
        let tree = zk_tree(&zk.connect_string(), ns).await;
        for i in &items {
            let (owner, ephemeral) = tree
                .get(&format!("/{ns}/ship/sharding/{i}/running"))
                .expect("running node")
                .clone();
            assert_eq!(owner, w.instance_id());
            assert!(ephemeral, "running is ephemeral when failover is off");
        }
        w.complete(&trigger.execution_id, &items).await.unwrap();
        // A repeated Complete is idempotent.
        w.complete(&trigger.execution_id, &items).await.unwrap();
        // This execution's running nodes are removed: each item's node is gone or is a later
        // run's (the job fires every second, and the next fire may write it again before a
        // read here; a running node's czxid is its run's fencing token).
        let client = zookeeper_client::Client::connect(&zk.connect_string())
            .await
            .expect("zookeeper");
        let cleared = common::eventually(WAIT, || async {
            for i in &items {
                let path = format!("/{ns}/ship/sharding/{i}/running");
                let stat = client.check_stat(&path).await.expect("zookeeper");
                if stat.is_some_and(|s| Some(&s.czxid) == trigger.fencing_tokens.get(i)) {
                    return None;
                }
            }
            Some(())
        })
        .await;
        assert!(
            cleared.is_some(),
            "running nodes of {} not removed after Complete",
            trigger.execution_id
        );
    }

    // Answers for unknown or foreign executions are refused.
    let err = a.complete("no-such-execution", &[0]).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let t = b.next_trigger(WAIT).await.unwrap();
    let mut foreign =
        shardcar::proto::worker_service_client::WorkerServiceClient::connect(cars[1].endpoint())
            .await
            .unwrap();
    let err = foreign
        .complete(shardcar::proto::CompleteRequest {
            instance_id: "127.0.0.9@-@1".into(),
            execution_id: t.execution_id.clone(),
            items: t.items.iter().map(|i| i.item).collect(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    b.report_failure(&t.execution_id, t.items[0].item, "disk full")
        .await
        .unwrap();
}

/// A sidecar listening on a Unix socket (`--listen unix:///…`) serves its workers as one on TCP
/// does: assignments shared with a TCP sidecar's worker, triggers answered, and a worker whose
/// connection closes leaves at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_sidecar_on_a_unix_socket_serves_its_workers_as_over_tcp() {
    let zk = ZooKeeper::start().await;
    let ns = "core-unix";
    let on_socket = Sidecar::start(SidecarOptions {
        namespace: ns.into(),
        unix_socket: true,
        ..SidecarOptions::zk(zk.connect_string(), "127.0.0.2")
    })
    .await;
    let on_tcp = Sidecar::start(SidecarOptions {
        namespace: ns.into(),
        ..SidecarOptions::zk(zk.connect_string(), "127.0.0.3")
    })
    .await;
    assert!(on_socket.endpoint().starts_with("unix:///"));
    let config = job_config("post", EVERY_SECOND, 4);
    let mut a = TestWorker::subscribe(&on_socket.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let b = TestWorker::subscribe(&on_tcp.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    wait_partition(&[&a, &b], 4).await;
    // A trigger for exactly the items it holds (an earlier one may predate the last reshard).
    let trigger = loop {
        let t = a.next_trigger(WAIT).await.unwrap();
        let items: Vec<i32> = t.items.iter().map(|i| i.item).collect();
        a.complete(&t.execution_id, &items).await.unwrap();
        if items == a.current_items() {
            break t;
        }
    };
    assert!(trigger.execution_id.len() == 32, "{trigger:?}");
    // Closed over the socket: its items go to the worker on the other sidecar.
    let gone = a.instance_id().to_string();
    a.close().await;
    wait_partition(&[&b], 4).await;
    let tree = zk_tree(&zk.connect_string(), ns).await;
    assert!(
        !tree.contains_key(&format!("/{ns}/post/instances/{gone}")),
        "the instance node of the worker that left is removed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_subscribe_is_refused_naming_the_field_and_leaves_zookeeper_untouched() {
    let zk = ZooKeeper::start().await;
    let ns = "core-invalid";
    let cars = sidecars(&zk, ns, &["127.0.0.2"]).await;
    let cases: Vec<(SubscribeRequest, &str)> = vec![
        (
            subscribe_request(job_config("bad", "every tuesday", 3)),
            "config.cron",
        ),
        (
            subscribe_request(job_config("bad", EVERY_SECOND, 0)),
            "config.sharding_total_count",
        ),
        (
            subscribe_request(JobConfig {
                time_zone: "Mars/Olympus".into(),
                ..job_config("bad", EVERY_SECOND, 2)
            }),
            "config.time_zone",
        ),
        (
            SubscribeRequest {
                job_name: "a/b".into(),
                ..subscribe_request(job_config("a/b", EVERY_SECOND, 2))
            },
            "job_name",
        ),
        (
            SubscribeRequest {
                pid: 0,
                ..subscribe_request(job_config("bad", EVERY_SECOND, 2))
            },
            "pid",
        ),
    ];
    for (request, field) in cases {
        let err = TestWorker::subscribe(&cars[0].endpoint(), request)
            .await
            .err()
            .expect("refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
        assert!(
            err.message().contains(field),
            "message {:?} should name {field}",
            err.message()
        );
        // The rich details say the same without parsing: BadRequest names the field.
        let details = tonic_types::StatusExt::get_error_details(&err);
        let info = details.error_info().expect("an ErrorInfo");
        assert_eq!(
            (info.reason.as_str(), info.domain.as_str()),
            ("INVALID_ARGUMENT", "shardcar.v1")
        );
        let violations = &details
            .bad_request()
            .expect("a BadRequest")
            .field_violations;
        assert_eq!(
            violations
                .iter()
                .map(|v| v.field.as_str())
                .collect::<Vec<_>>(),
            [field]
        );
    }
    let missing = SubscribeRequest {
        job_name: "nojob".into(),
        pid: 7,
        ..Default::default()
    };
    let err = TestWorker::subscribe(&cars[0].endpoint(), missing)
        .await
        .err()
        .expect("refused");
    assert_eq!(err.code(), Code::NotFound);
    let details = tonic_types::StatusExt::get_error_details(&err);
    assert_eq!(
        details.error_info().map(|i| i.reason.as_str()),
        Some("NOT_FOUND")
    );
    let tree = zk_tree(&zk.connect_string(), ns).await;
    let touched: Vec<&String> = tree
        .keys()
        .filter(|p| p.starts_with(&format!("/{ns}/bad")) || p.contains("nojob"))
        .collect();
    assert!(
        touched.is_empty(),
        "nothing written for refused requests: {touched:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn standalone_mode_serves_a_worker_end_to_end() {
    let car = Sidecar::start(SidecarOptions::standalone()).await;
    let w = TestWorker::subscribe(
        &car.endpoint(),
        subscribe_request(job_config("solo", EVERY_SECOND, 2)),
    )
    .await
    .unwrap();
    w.wait_items(|items| items == [0, 1], WAIT).await.unwrap();
    assert!(w.is_leader());
    w.wait_for(
        |events| {
            events.iter().any(|(_, e)| {
                matches!(
                    e.event,
                    Some(shardcar::proto::subscribe_response::Event::Lease(_))
                )
            })
        },
        WAIT,
    )
    .await
    .unwrap();
    let t = w.next_trigger(WAIT).await.unwrap();
    assert_eq!(
        t.items.iter().map(|i| i.item).collect::<Vec<_>>(),
        vec![0, 1]
    );
    w.complete(&t.execution_id, &[0, 1]).await.unwrap();
    let next = w.next_trigger(WAIT).await.unwrap();
    assert_ne!(next.execution_id, t.execution_id);
    // Only the same instance id may hold a stream once.
    let dup = SubscribeRequest {
        instance_id: w.instance_id().to_string(),
        ..subscribe_request(job_config("solo", EVERY_SECOND, 2))
    };
    let err = TestWorker::subscribe(&car.endpoint(), dup)
        .await
        .err()
        .expect("refused");
    assert_eq!(err.code(), Code::AlreadyExists);
}

/// Containers sharing one sidecar all have pid 1: an `instance_suffix` per process keeps their
/// instances apart, in ElasticJob's `{ip}@-@{suffix}` form; a pid alone collides.
#[tokio::test(flavor = "multi_thread")]
async fn workers_with_the_same_pid_join_apart_with_an_instance_suffix() {
    let zk = ZooKeeper::start().await;
    let ns = "core-suffix";
    let cars = sidecars(&zk, ns, &["127.0.0.2"]).await;
    let request = |suffix: &str| SubscribeRequest {
        pid: 1,
        instance_suffix: suffix.into(),
        ..subscribe_request(job_config("boxed", EVERY_SECOND, 4))
    };
    let a = TestWorker::subscribe(&cars[0].endpoint(), request("1-5f0c2a"))
        .await
        .unwrap();
    let b = TestWorker::subscribe(&cars[0].endpoint(), request("1-9e77d1"))
        .await
        .unwrap();
    assert_eq!(a.instance_id(), "127.0.0.2@-@1-5f0c2a");
    assert_eq!(b.instance_id(), "127.0.0.2@-@1-9e77d1");
    wait_partition(&[&a, &b], 4).await;
    let tree = zk_tree(&zk.connect_string(), ns).await;
    for id in [a.instance_id(), b.instance_id()] {
        let node = data(&tree, &format!("/{ns}/boxed/instances/{id}")).expect("instance node");
        assert_eq!(node, format!("jobInstanceId: {id}\nserverIp: 127.0.0.2\n"));
    }
    // Without a suffix, a second pid 1 is the same instance id: refused, not merged.
    let first = TestWorker::subscribe(&cars[0].endpoint(), request(""))
        .await
        .unwrap();
    assert_eq!(first.instance_id(), "127.0.0.2@-@1");
    let err = TestWorker::subscribe(&cars[0].endpoint(), request(""))
        .await
        .err()
        .expect("the second pid-1 worker is refused");
    assert_eq!(err.code(), Code::AlreadyExists);
    for bad in ["a@-@b", "has space", &"x".repeat(65)] {
        let err = TestWorker::subscribe(&cars[0].endpoint(), request(bad))
            .await
            .err()
            .expect("refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{bad}");
        assert!(
            err.message().contains("instance_suffix"),
            "{}",
            err.message()
        );
    }
}

/// shardcar writes what ElasticJob 3.0.4 writes: compare with the vectors, node for node.
#[tokio::test(flavor = "multi_thread")]
async fn layout_matches_elasticjob_vectors() {
    let zk = ZooKeeper::start().await;
    for (file, strategy) in [
        ("default-2x3.json", ShardingStrategy::AvgAllocation),
        ("odevity-3x2-orderJob.json", ShardingStrategy::Odevity),
        ("roundrobin-3x5-orderJob.json", ShardingStrategy::RoundRobin),
    ] {
        let path = format!("{}/tests/vectors/{file}", env!("CARGO_MANIFEST_DIR"));
        let vector: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let job = vector["job"].as_str().unwrap();
        let total = vector["sharding_total_count"].as_i64().unwrap() as i32;
        let ns = format!("vec{}", file.len());
        let options = SidecarOptions {
            namespace: ns.clone(),
            ..SidecarOptions::zk(zk.connect_string(), "192.0.2.2")
        };
        let car = Sidecar::start(options).await;
        let mut config = job_config(job, "0/2 * * * * ?", total);
        config.description = String::new();
        config.sharding_strategy = strategy as i32;
        let params = vector["params"].as_str().unwrap_or("");
        for entry in params.split(',').filter(|e| !e.is_empty()) {
            let (k, v) = entry.split_once('=').unwrap();
            config
                .sharding_item_parameters
                .insert(k.parse().unwrap(), v.to_string());
        }
        let instances = vector["instances"].as_array().unwrap().len();
        let mut workers = Vec::new();
        for k in 0..instances {
            let request = SubscribeRequest {
                pid: 1001 + k as u32,
                ..subscribe_request(config.clone())
            };
            workers.push(
                TestWorker::subscribe(&car.endpoint(), request)
                    .await
                    .unwrap(),
            );
        }
        let expected: BTreeMap<String, (String, bool)> = vector["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                let p = n["path"]
                    .as_str()
                    .unwrap()
                    .replacen("/vec", &format!("/{ns}"), 1);
                (
                    p,
                    (
                        n["data"].as_str().unwrap().to_string(),
                        n["ephemeral"].as_bool().unwrap(),
                    ),
                )
            })
            .collect();
        let owners = |tree: &common::ZkTree| -> Vec<Option<String>> {
            (0..total)
                .map(|i| data(tree, &format!("/{ns}/{job}/sharding/{i}/instance")))
                .collect()
        };
        let want = owners(&expected);
        let seen = common::eventually(WAIT, || async {
            let tree = zk_tree(&zk.connect_string(), &ns).await;
            (owners(&tree) == want).then_some(tree)
        })
        .await
        .unwrap_or_else(|| panic!("{file}: owners never matched {want:?}"));
        for (path, (value, ephemeral)) in &expected {
            let relative = path.trim_start_matches(&format!("/{ns}/{job}"));
            if path == &format!("/{ns}/{job}") || relative.starts_with("/leader") {
                continue; // root data is the Java class; the leader is whoever won
            }
            let got = seen
                .get(path)
                .unwrap_or_else(|| panic!("{file}: {path} missing"));
            assert_eq!(&got.0, value, "{file}: data of {path}");
            assert_eq!(got.1, *ephemeral, "{file}: ephemeral flag of {path}");
        }
        drop(workers);
    }
}
