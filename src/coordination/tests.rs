//! Fast tests of the coordination logic end to end (state machines and drivers together):
//! several coordinators ("sidecars" on different hosts) share one in-memory store, each with
//! its own session, and workers are the event receivers of `Coordinator::subscribe`. No gRPC,
//! no ZooKeeper. The decisions themselves are tested step by step in `job/tests.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use super::*;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::registry::MemoryStore;
use crate::schedule::ClaimLead;

type Event = WorkerEvent;

struct TestCar {
    coordinator: Coordinator,
    registry: Registry,
}

const CLAIM_AHEAD: Duration = crate::config::CLAIM_AHEAD_DEFAULT;

fn car(store: &MemoryStore, ip: &str) -> TestCar {
    let registry = store.session();
    let coordinator = Coordinator::new(
        registry.clone(),
        // The sidecar's default claim lead, so that these runs are claimed ahead as in
        // production.
        Timer::spawn_with(&TaskTracker::new(), ClaimLead::new(CLAIM_AHEAD), None),
        CoordinatorSettings {
            ip: ip.to_string(),
            lease: Duration::from_secs(5),
            session_timeout: Duration::from_secs(10),
        },
        Arc::new(NoObserver),
        TaskTracker::new(),
    );
    TestCar {
        coordinator,
        registry,
    }
}

struct TestWorker {
    id: String,
    rx: mpsc::Receiver<Box<WorkerEvent>>,
    items: Vec<i32>,
    events: Vec<Event>,
}

impl TestWorker {
    /// Reads every event already sent.
    fn drain(&mut self) {
        while let Ok(event) = self.rx.try_recv() {
            let event = *event;
            if let Event::Assignment { items, .. } = &event {
                self.items = items.iter().map(|(i, _)| *i).collect();
            }
            self.events.push(event);
        }
    }
}

async fn subscribe(car: &TestCar, job: &str, total: i32, pid: u32) -> TestWorker {
    let mut config = JobConfiguration::new(job, total);
    config.cron = Some("0 0 0 1 1 ? 2099".into());
    let id = format!("{}@-@{pid}", car.coordinator.ip());
    let sub = Subscription {
        job_name: job.into(),
        instance_id: id.clone(),
        config: Some((config, JobExtras::default())),
        overwrite: false,
        max_concurrent: 1,
        connection: Arc::new(InProcess),
    };
    let (_, rx) = car.coordinator.subscribe(sub).await.expect("subscribed");
    TestWorker {
        id,
        rx,
        items: Vec::new(),
        events: Vec::new(),
    }
}

/// Waits until the workers' latest assignments partition `0..total`.
async fn settle(workers: &mut [TestWorker], total: i32) -> BTreeMap<i32, String> {
    for _ in 0..400 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let mut owners = BTreeMap::new();
        let mut double = false;
        for w in workers.iter_mut() {
            w.drain();
            for i in &w.items {
                double |= owners.insert(*i, w.id.clone()).is_some();
            }
        }
        if !double && owners.keys().copied().collect::<BTreeSet<_>>() == (0..total).collect() {
            return owners;
        }
    }
    let held: Vec<(String, Vec<i32>)> = workers
        .iter()
        .map(|w| (w.id.clone(), w.items.clone()))
        .collect();
    panic!("never partitioned: {held:?}");
}

#[tokio::test]
async fn workers_on_three_hosts_share_items_and_follow_joins_and_leaves() {
    let store = MemoryStore::new();
    let cars: Vec<TestCar> = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
        .iter()
        .map(|ip| car(&store, ip))
        .collect();
    let mut workers = Vec::new();
    for (k, c) in cars.iter().enumerate() {
        workers.push(subscribe(c, "orders", 10, 100 + k as u32).await);
    }
    let owners = settle(&mut workers, 10).await;
    // AVG over descending ids [10.0.0.3, 10.0.0.2, 10.0.0.1] with T=10.
    let expected: Vec<&str> = vec!["3", "3", "3", "2", "2", "2", "1", "1", "1", "3"];
    for (i, host) in expected.iter().enumerate() {
        assert!(
            owners[&(i as i32)].starts_with(&format!("10.0.0.{host}@")),
            "item {i}: {owners:?}"
        );
    }
    for w in &workers {
        assert!(
            matches!(w.events.first(), Some(Event::Registered { .. })),
            "Registered comes first"
        );
    }
    // A fourth worker joins: everyone is updated without any fire.
    workers.push(subscribe(&cars[0], "orders", 10, 200).await);
    let owners = settle(&mut workers, 10).await;
    assert_eq!(owners.values().collect::<BTreeSet<_>>().len(), 4);
    // A worker leaves: its items move at once.
    let gone = workers.remove(1);
    drop(gone);
    let owners = settle(&mut workers, 10).await;
    assert_eq!(owners.values().collect::<BTreeSet<_>>().len(), 3);
    assert!(workers
        .iter()
        .all(|w| w.events.iter().all(|e| !matches!(e, Event::Trigger(_)))));
}

#[tokio::test]
async fn a_lost_session_takes_its_leader_and_instances_away_and_peers_reshard() {
    let store = MemoryStore::new();
    let a = car(&store, "10.0.0.1");
    let b = car(&store, "10.0.0.2");
    let mut wa = subscribe(&a, "mail", 4, 1).await;
    settle(std::slice::from_mut(&mut wa), 4).await;
    let mut wb = subscribe(&b, "mail", 4, 2).await;
    let mut both = vec![wa, wb];
    settle(&mut both, 4).await;
    // The first host's session ends (a crashed sidecar): the second takes every item.
    a.registry.close().await;
    wb = both.pop().unwrap();
    let owners = settle(std::slice::from_mut(&mut wb), 4).await;
    assert!(owners.values().all(|id| id.starts_with("10.0.0.2@")));
}

#[tokio::test]
async fn a_disabled_server_loses_its_items_and_leadership() {
    let store = MemoryStore::new();
    let a = car(&store, "10.0.0.1");
    let b = car(&store, "10.0.0.2");
    let mut workers = vec![
        subscribe(&a, "pay", 4, 1).await,
        subscribe(&b, "pay", 4, 2).await,
    ];
    settle(&mut workers, 4).await;
    let admin = store.session();
    admin
        .set("/pay/servers/10.0.0.1", b"DISABLED", None)
        .await
        .unwrap();
    let owners = settle(&mut workers, 4).await;
    assert!(
        owners.values().all(|id| id.starts_with("10.0.0.2@")),
        "{owners:?}"
    );
    let leader = admin
        .get("/pay/leader/election/instance")
        .await
        .unwrap()
        .expect("a leader");
    assert_eq!(String::from_utf8(leader.data).unwrap(), workers[1].id);
    assert!(workers[0].items.is_empty());
}

async fn subscribe_with(
    car: &TestCar,
    config: JobConfiguration,
    extras: JobExtras,
    pid: u32,
) -> TestWorker {
    let id = format!("{}@-@{pid}", car.coordinator.ip());
    let sub = Subscription {
        job_name: config.job_name.clone(),
        instance_id: id.clone(),
        config: Some((config, extras)),
        overwrite: false,
        max_concurrent: 1,
        connection: Arc::new(InProcess),
    };
    let (_, rx) = car.coordinator.subscribe(sub).await.expect("subscribed");
    TestWorker {
        id,
        rx,
        items: Vec::new(),
        events: Vec::new(),
    }
}

/// Waits for the next event matching `pick`.
async fn next_matching<T>(w: &mut TestWorker, mut pick: impl FnMut(&Event) -> Option<T>) -> T {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), w.rx.recv())
            .await
            .expect("event in time")
            .expect("stream open");
        let event = *event;
        if let Event::Assignment { items, .. } = &event {
            w.items = items.iter().map(|(i, _)| *i).collect();
        }
        if let Some(found) = pick(&event) {
            return found;
        }
    }
}

fn trigger(e: &Event) -> Option<Trigger> {
    match e {
        Event::Trigger(t) => Some(t.as_ref().clone()),
        _ => None,
    }
}

#[tokio::test]
async fn trigger_once_runs_now_and_complete_clears_running() {
    let store = MemoryStore::new();
    let a = car(&store, "10.0.0.1");
    let mut config = JobConfiguration::new("once", 2);
    config.cron = None;
    let mut w = subscribe_with(&a, config, JobExtras::default(), 1).await;
    settle(std::slice::from_mut(&mut w), 2).await;
    let admin = store.session();
    admin.ensure_path("/once/trigger").await.unwrap();
    admin
        .create(
            &format!("/once/trigger/{}", w.id),
            b"",
            crate::registry::CreateMode::Persistent,
        )
        .await
        .unwrap();
    let t = next_matching(&mut w, trigger).await;
    assert_eq!(t.source, Source::Manual);
    assert_eq!(t.items.len(), 2);
    assert!(admin
        .exists("/once/sharding/0/running")
        .await
        .unwrap()
        .is_some());
    assert!(
        admin
            .exists(&format!("/once/trigger/{}", w.id))
            .await
            .unwrap()
            .is_none(),
        "request consumed"
    );
    // Fencing tokens are the running nodes' czxids.
    let czxid = admin
        .exists("/once/sharding/1/running")
        .await
        .unwrap()
        .unwrap()
        .czxid;
    assert_eq!(t.fencing_tokens[&1], czxid);
    a.coordinator
        .answer(
            &w.id,
            &t.execution_id,
            vec![(0, ItemOutcome::Completed), (1, ItemOutcome::Completed)],
        )
        .await
        .unwrap();
    assert!(admin
        .exists("/once/sharding/0/running")
        .await
        .unwrap()
        .is_none());
    assert!(admin
        .exists("/once/sharding/1/running")
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn an_unanswered_item_times_out_is_revoked_and_its_late_answer_refused() {
    let store = MemoryStore::new();
    let a = car(&store, "10.0.0.1");
    let mut config = JobConfiguration::new("slow", 1);
    config.cron = None;
    let mut w = subscribe_with(
        &a,
        config,
        JobExtras {
            execution_timeout_seconds: 1,
            retry: None,
            resident: false,
        },
        1,
    )
    .await;
    settle(std::slice::from_mut(&mut w), 1).await;
    let admin = store.session();
    admin.ensure_path("/slow/trigger").await.unwrap();
    admin
        .create(
            &format!("/slow/trigger/{}", w.id),
            b"",
            crate::registry::CreateMode::Persistent,
        )
        .await
        .unwrap();
    let t = next_matching(&mut w, trigger).await;
    let (items, reason) = next_matching(&mut w, |e| match e {
        Event::Revoke { items, reason } => Some((items.clone(), reason.clone())),
        _ => None,
    })
    .await;
    assert_eq!(items, vec![0]);
    assert!(reason.contains("timeout"), "{reason}");
    assert!(
        admin
            .exists("/slow/sharding/0/running")
            .await
            .unwrap()
            .is_some(),
        "kept until the worker acknowledges (or its lease runs out)"
    );
    a.coordinator
        .decline(&w.id, &t.execution_id, vec![0], "revoked")
        .await
        .unwrap();
    for _ in 0..100 {
        if admin
            .exists("/slow/sharding/0/running")
            .await
            .unwrap()
            .is_none()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        admin
            .exists("/slow/sharding/0/running")
            .await
            .unwrap()
            .is_none(),
        "running removed once acknowledged"
    );
    let late = a
        .coordinator
        .answer(&w.id, &t.execution_id, vec![(0, ItemOutcome::Completed)])
        .await;
    assert!(
        matches!(late, Err(CoordError::FailedPrecondition(_))),
        "{late:?}"
    );
}

#[tokio::test]
async fn a_fire_while_busy_flags_misfire_and_one_catch_up_run_follows() {
    let store = MemoryStore::new();
    let a = car(&store, "10.0.0.1");
    let mut config = JobConfiguration::new("busy", 1);
    config.cron = Some("* * * * * ?".into());
    let mut w = subscribe_with(&a, config, JobExtras::default(), 1).await;
    let first = next_matching(&mut w, trigger).await;
    let admin = store.session();
    // Stay busy across the next fire: the item is flagged misfire.
    for _ in 0..40 {
        if admin
            .exists("/busy/sharding/0/misfire")
            .await
            .unwrap()
            .is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(admin
        .exists("/busy/sharding/0/misfire")
        .await
        .unwrap()
        .is_some());
    a.coordinator
        .answer(
            &w.id,
            &first.execution_id,
            vec![(0, ItemOutcome::Completed)],
        )
        .await
        .unwrap();
    let catch_up = next_matching(&mut w, trigger).await;
    assert_eq!(catch_up.source, Source::Misfire);
    assert!(
        admin
            .exists("/busy/sharding/0/misfire")
            .await
            .unwrap()
            .is_none(),
        "misfire cleared"
    );
}

#[tokio::test]
async fn a_cron_changed_in_the_registry_reschedules_the_job() {
    let store = MemoryStore::new();
    let a = car(&store, "10.0.0.1");
    let mut config = JobConfiguration::new("resched", 1);
    config.cron = Some("0 0 0 1 1 ? 2099".into());
    let mut w = subscribe_with(&a, config.clone(), JobExtras::default(), 1).await;
    settle(std::slice::from_mut(&mut w), 1).await;
    // Another process (the console, a Java peer) rewrites the config with a new cron.
    config.cron = Some("* * * * * ?".into());
    let admin = store.session();
    admin
        .set("/resched/config", config.to_yaml().as_bytes(), None)
        .await
        .unwrap();
    let t = next_matching(&mut w, trigger).await;
    assert_eq!(t.source, Source::Cron);
}
