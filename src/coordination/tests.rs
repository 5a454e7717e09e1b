//! Fast tests of the coordination logic: several coordinators ("sidecars" on different
//! hosts) share one in-memory store, each with its own session, and workers are the event
//! receivers of `Coordinator::subscribe`. No gRPC, no ZooKeeper.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::elasticjob::config::JobConfiguration;
use crate::proto::worker_event::Event;
use crate::registry::MemoryStore;

struct TestCar {
    coordinator: Coordinator,
    registry: Registry,
    _cancel: CancellationToken,
}

fn car(store: &MemoryStore, ip: &str) -> TestCar {
    let registry = store.session();
    let cancel = CancellationToken::new();
    let leases = Leases::spawn(
        registry.clone(),
        Duration::from_secs(5),
        Duration::from_secs(10),
        cancel.clone(),
    );
    let coordinator = Coordinator::new(registry.clone(), Timer::spawn(), ip.to_string(), leases);
    TestCar {
        coordinator,
        registry,
        _cancel: cancel,
    }
}

struct TestWorker {
    id: String,
    rx: mpsc::Receiver<Result<WorkerEvent, Status>>,
    items: Vec<i32>,
    events: Vec<Event>,
}

impl TestWorker {
    /// Reads every event already sent.
    fn drain(&mut self) {
        while let Ok(Ok(event)) = self.rx.try_recv() {
            let event = event.event.expect("an event");
            if let Event::Assignment(a) = &event {
                self.items = a.items.iter().map(|i| i.item).collect();
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
        config: Some(config),
        overwrite: false,
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
            matches!(w.events.first(), Some(Event::Registered(_))),
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
