//! #50: resident jobs. Workers that keep the contract to the letter hold an item from its
//! RESIDENT trigger until a `Revoke` or the end of their lease, then decline it. Across joins,
//! leaves, killed and frozen workers and a killed sidecar, no two holds of an item overlap, a
//! join moves only the items it must, and every item is held by a live worker again within
//! twice the session timeout after the last fault.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// Long enough that a strict worker holds its item until it is taken back.
const HOLD: Duration = Duration::from_secs(3600);
/// The harness's session timeout.
const SESSION: Duration = Duration::from_secs(4);

fn resident_job(name: &str, total: i32) -> JobConfig {
    JobConfig {
        resident: true,
        ..job_config(name, "", total)
    }
}

/// The items `w` holds now (its strict runs that have not ended).
fn held(w: &TestWorker) -> BTreeSet<i32> {
    w.strict_runs()
        .into_iter()
        .filter(|r| r.end.is_none() && r.outcome.is_none())
        .flat_map(|r| r.items)
        .collect()
}

async fn holder(car: &Sidecar, config: &JobConfig) -> TestWorker {
    TestWorker::subscribe_strict(&car.endpoint(), subscribe_request(config.clone()), HOLD)
        .await
        .expect("subscribed")
}

/// Whether every item `0..total` is held now, as ZooKeeper shows it: its `running` node names
/// its owner, a live instance.
async fn all_held(zk: &ZooKeeper, ns: &str, job: &str, total: i32) -> bool {
    let tree = zk_tree(&zk.connect_string(), ns).await;
    let node = |path: String| tree.get(&path).map(|(d, _)| d.clone());
    (0..total).all(|i| {
        let owner = node(format!("/{ns}/{job}/sharding/{i}/instance"));
        let running = node(format!("/{ns}/{job}/sharding/{i}/running"));
        match (owner, running) {
            (Some(o), Some(r)) => o == r && node(format!("/{ns}/{job}/instances/{o}")).is_some(),
            _ => false,
        }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_join_moves_only_what_it_must_and_each_moved_item_starts_after_its_holder_let_go() {
    let zk = ZooKeeper::start().await;
    let (a, b) = pair(&zk, "resident-join").await;
    let config = resident_job("hold", 6);
    let wa = holder(&a, &config).await;
    common::eventually(WAIT, || async { (held(&wa).len() == 6).then_some(()) })
        .await
        .unwrap_or_else(|| panic!("A never held all six\n{}", wa.summary()));
    for run in wa.strict_runs() {
        assert_eq!(run.source, TriggerSource::Resident as i32);
        assert_eq!(run.items.len(), 1, "one hold per item");
    }
    let joined = Instant::now();
    let wb = holder(&b, &config).await;
    common::eventually(WAIT, || async {
        (held(&wa).len() == 3 && held(&wb).len() == 3).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("no 3/3 split\n{}\n{}", wa.summary(), wb.summary()));
    // A kept three holds it never gave up, and started no new one.
    let a_runs = wa.strict_runs();
    assert_eq!(a_runs.len(), 6, "A's holds: {a_runs:?}");
    assert_eq!(a_runs.iter().filter(|r| r.end.is_none()).count(), 3);
    // Each item B holds started after A's hold of it ended, under a newer fencing token.
    let mut handoffs = Vec::new();
    for run in wb.strict_runs() {
        let item = run.items[0];
        let before = a_runs
            .iter()
            .find(|r| r.items == [item])
            .expect("A held it first");
        let ended = before.end.expect("A let it go");
        assert!(run.start >= ended, "B started item {item} before A stopped");
        assert!(run.tokens[&item] > before.tokens[&item]);
        handoffs.push(run.start.duration_since(joined));
    }
    eprintln!("a join: B held its three items {handoffs:?} after it subscribed");
    for took in &handoffs {
        assert!(
            *took <= Duration::from_secs(1),
            "a moved item is held by the joining worker within 1 s of its Subscribe: {handoffs:?}"
        );
    }
    let mut ledger = Ledger::new();
    ledger.record_strict("a", &wa.strict_runs(), &wa.events(), None);
    ledger.record_strict("b", &wb.strict_runs(), &wb.events(), None);
    ledger.assert_no_overlap();
}

#[tokio::test(flavor = "multi_thread")]
async fn holds_survive_leaves_kills_and_freezes_without_overlap() {
    let zk = ZooKeeper::start().await;
    let ns = "resident-faults";
    let a = car(&zk, ns, "127.0.0.2").await;
    let b = car(&zk, ns, "127.0.0.3").await;
    let mut c = car(&zk, ns, "127.0.0.4").await;
    let config = resident_job("hold", 6);
    let wa = holder(&a, &config).await;
    let mut wb = holder(&b, &config).await;
    let mut doomed = ChildWorker::spawn(&c.endpoint(), subscribe_request(config.clone())).await;
    let frozen = ChildWorker::spawn(&a.endpoint(), subscribe_request(config.clone())).await;
    let wc = holder(&c, &config).await;
    let settle = || async {
        common::eventually(WAIT, || async {
            all_held(&zk, ns, "hold", 6).await.then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("not every item is held\n{}", a.log_tail(30)));
    };
    settle().await;

    // A worker frozen, a leave, a worker killed, a worker joining, a sidecar killed.
    let froze = Instant::now();
    frozen.pause();
    tokio::time::sleep(Duration::from_millis(300)).await;
    wb.close().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    doomed.kill();
    let wd = holder(&b, &config).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sidecar_killed = Instant::now();
    c.kill();
    let last_fault = sidecar_killed;
    // Held again by the live workers, A's and D's (ZooKeeper alone would still show the killed
    // sidecar's holds until its session expires).
    let live_hold = || {
        let mut items = held(&wa);
        items.extend(held(&wd));
        items
    };
    common::eventually(WAIT, || async { (live_hold().len() == 6).then_some(()) })
        .await
        .unwrap_or_else(|| {
            panic!(
                "not every item is held again: {:?}\n{}",
                live_hold(),
                a.log_tail(40)
            )
        });
    let again = last_fault.elapsed();
    eprintln!("every item held by a live worker {again:?} after the last fault");
    assert!(
        again <= SESSION * 2,
        "held again only after {again:?}, more than twice the session timeout"
    );
    let holders: BTreeMap<&str, usize> = [("a", held(&wa).len()), ("d", held(&wd).len())].into();
    assert_eq!(holders.values().sum::<usize>(), 6, "{holders:?}");

    let mut ledger = Ledger::new();
    ledger.record_strict("a", &wa.strict_runs(), &wa.events(), None);
    ledger.record_strict("b", &wb.strict_runs(), &wb.events(), None);
    ledger.record_strict("d", &wd.strict_runs(), &wd.events(), None);
    ledger.record_strict(
        "c",
        &wc.strict_runs(),
        &wc.events(),
        Some(Stop::Sidecar(sidecar_killed)),
    );
    ledger.record("doomed", &doomed.events(), &[], Some(Stop::Worker(killed)));
    // A frozen worker holds what it held until its lease ran out, for all it knows.
    ledger.record("frozen", &frozen.events(), &[], Some(Stop::Frozen(froze)));
    ledger.assert_no_overlap();
    frozen.resume();
}
