//! The registry against a real ZooKeeper: the same rules as the memory store, namespaces,
//! digest ACLs, reconnect and session expiry.

use std::time::{Duration, Instant};

use super::latch::tests::{assert_cancel_safety, assert_mutual_exclusion};
use super::memory_tests::{
    check_basic_rules, check_batched, check_latch_free_claims, check_multi, check_watch_order,
    drain,
};
use super::zk_server::ZkServer;
use super::{CreateMode, Error, Registry, SessionState, WatchEvent, ZkSettings};

fn settings(server: &ZkServer, namespace: &str, session_timeout: Duration) -> ZkSettings {
    ZkSettings {
        connect: server.connect_string(),
        namespace: namespace.to_string(),
        session_timeout,
        connection_timeout: session_timeout * 2 / 5,
        digest: None,
        op_timeout: Duration::from_secs(2),
    }
}

async fn connect(server: &ZkServer, namespace: &str) -> Registry {
    Registry::zookeeper(settings(server, namespace, Duration::from_secs(6)))
        .await
        .expect("connect")
}

/// Waits for a session state matching `want`, returning it.
async fn wait_state(
    reg: &Registry,
    within: Duration,
    want: impl Fn(&SessionState) -> bool,
) -> SessionState {
    let mut rx = reg.session();
    let got = tokio::time::timeout(within, rx.wait_for(|s| want(s)))
        .await
        .map(|r| r.map(|s| s.clone()));
    let got = got.unwrap_or_else(|_| {
        panic!(
            "state not reached within {within:?}; now {:?}",
            *reg.session().borrow()
        )
    });
    got.expect("state channel")
}

async fn next_event(w: &mut super::Watch, within: Duration) -> WatchEvent {
    tokio::time::timeout(within, w.next())
        .await
        .expect("event in time")
        .expect("watch open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_batched_multi_ops_share_requests_and_answer_each_caller_alone() {
    let server = ZkServer::start();
    let reg = connect(&server, "batched").await;
    let zxids = check_batched(&reg, 50, None).await;
    assert_eq!(zxids.len(), 50);
    // Submitted at once, they did not go as one request each: callers that came while another
    // request was in flight shared one.
    let mut distinct = zxids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(
        distinct.len() < zxids.len(),
        "50 callers, {} transactions: {zxids:?}",
        distinct.len()
    );
    // One caller's failure is its own, wherever it falls in a shared request.
    for failing in [0, 1, 25, 49] {
        assert_eq!(check_batched(&reg, 50, Some(failing)).await.len(), 49);
    }
    reg.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_latch_free_claims_land_only_while_the_latch_is_free() {
    let server = ZkServer::start();
    let (reg, holder) = (
        connect(&server, "claims").await,
        connect(&server, "claims").await,
    );
    check_latch_free_claims(&reg, &holder).await;
    reg.close().await;
    holder.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_store_semantics() {
    let server = ZkServer::start();
    let reg = connect(&server, "shardcar/it").await;
    assert!(!reg.is_standalone());
    let first = reg.session().borrow().clone();
    assert!(
        matches!(first, SessionState::Connected { generation: 1, session_id } if session_id != 0),
        "{first:?}"
    );

    check_basic_rules(&reg).await;
    check_multi(&reg).await;
    let other = connect(&server, "shardcar/it").await;
    check_watch_order(&reg, &other).await;

    // The namespace (with '/') was created and everything lives below it.
    let raw = connect(&server, "").await;
    assert!(raw.exists("/shardcar/it/t").await.unwrap().is_some());
    assert!(raw.exists("/t").await.unwrap().is_none());

    // Latch: strict mutual exclusion and cancel safety, with separate sessions.
    let mut regs = vec![reg.clone(), other.clone()];
    for _ in 0..2 {
        regs.push(connect(&server, "shardcar/it").await);
    }
    assert_mutual_exclusion(regs.clone(), "/job/leader/election/latch", 3).await;
    assert_cancel_safety(&regs[0], &regs[1], "/job/leader/election/latch").await;
    // Curator creates the latch parents as containers.
    let dir = raw
        .exists("/shardcar/it/job/leader/election/latch")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dir.ephemeral_owner, 0);

    // wait_deleted returns when another session's ephemeral goes with its closed session.
    let (e, _) = other
        .create("/t/gone-soon", b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let reg = reg.clone();
        async move { reg.wait_deleted(&e).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    let t0 = Instant::now();
    other.close().await;
    assert_eq!(*other.session().borrow(), SessionState::Closed);
    tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("deleted at close")
        .unwrap()
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "ephemerals must go at close, not at expiry"
    );
    assert!(matches!(other.get("/t").await, Err(Error::Closed)));

    // last_proof stays fresh while idle (heartbeat every session_timeout / 8).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(reg.last_proof().expect("proven alive").elapsed() < Duration::from_millis(1500));
    for r in regs.iter().chain([&reg, &raw]) {
        r.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_digest_acl() {
    let server = ZkServer::start();
    let mut s = settings(&server, "secure", Duration::from_secs(6));
    s.digest = Some("alice:secret".into());
    let alice = Registry::zookeeper(s.clone())
        .await
        .expect("connect with digest");
    alice
        .create("/private", b"x", CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(alice.get("/private").await.unwrap().unwrap().data, b"x");

    let anonymous = connect(&server, "secure").await;
    assert!(matches!(anonymous.get("/private").await, Err(Error::NoAuth(p)) if p == "/private"));
    assert!(matches!(
        anonymous
            .create("/other", b"", CreateMode::Persistent)
            .await,
        Err(Error::NoAuth(_))
    ));

    s.digest = Some("mallory:guess".into());
    let mallory = Registry::zookeeper(s)
        .await
        .expect("connect with other digest");
    assert!(matches!(
        mallory.set("/private", b"y", None).await,
        Err(Error::NoAuth(_))
    ));
    for r in [alice, anonymous, mallory] {
        r.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_reconnect_and_expiry() {
    let server = ZkServer::start();
    let mut s = settings(&server, "shardcar", Duration::from_secs(4));
    s.op_timeout = Duration::from_secs(1);
    let reg = Registry::zookeeper(s).await.expect("connect");
    let observer = connect(&server, "shardcar").await;
    reg.ensure_path("/r").await.unwrap();
    let mut w = reg.watch_recursive("/r").await.unwrap();
    let SessionState::Connected {
        generation: 1,
        session_id,
    } = reg.session().borrow().clone()
    else {
        panic!("not connected")
    };

    // 1. Server frozen for ~3 s (< 4 s session): Disconnected, then Connected in the same session,
    //    and a Resync on the watch (events may have been lost, ZOOKEEPER-4698).
    server.pause();
    let frozen = Instant::now();
    let state = wait_state(&reg, Duration::from_secs(4), |s| {
        matches!(s, SessionState::Disconnected { .. })
    })
    .await;
    assert!(
        matches!(state, SessionState::Disconnected { generation: 1, .. }),
        "{state:?}"
    );
    let t0 = Instant::now();
    assert!(
        matches!(reg.get("/r").await, Err(Error::Timeout(_))),
        "calls are bounded while disconnected"
    );
    assert!(t0.elapsed() < Duration::from_millis(1500));
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(frozen.elapsed())).await;
    server.resume();
    let state = wait_state(&reg, Duration::from_secs(5), |s| {
        matches!(s, SessionState::Connected { .. })
    })
    .await;
    assert_eq!(
        state,
        SessionState::Connected {
            generation: 1,
            session_id
        }
    );
    assert_eq!(
        next_event(&mut w, Duration::from_secs(3)).await,
        WatchEvent::Resync
    );
    // A proof comes from a request sent after the reconnect (the heartbeat's, within a
    // heartbeat period).
    let deadline = Instant::now() + Duration::from_secs(3);
    while reg
        .last_proof()
        .is_none_or(|p| p < t0 + Duration::from_secs(1))
    {
        assert!(
            Instant::now() < deadline,
            "no proof of life after the reconnect"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // 2. Expiry: the server frozen for longer than 7/5 of the session timeout, after which the
    //    client declares the session expired itself; the server expires it when it resumes.
    let (eph, _) = reg
        .create("/r/mine", b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut w, Duration::from_secs(3)).await,
        WatchEvent::Created(eph.clone())
    );
    server.pause();
    let state = wait_state(&reg, Duration::from_secs(10), |s| {
        matches!(s, SessionState::Expired { .. })
    })
    .await;
    assert_eq!(state, SessionState::Expired { generation: 1 });
    server.resume();
    let state = wait_state(&reg, Duration::from_secs(10), |s| {
        matches!(s, SessionState::Connected { .. })
    })
    .await;
    let SessionState::Connected {
        generation: 2,
        session_id: new_id,
    } = state
    else {
        panic!("{state:?}")
    };
    assert_ne!(new_id, session_id);
    // The old session's ephemeral is gone; the watch was re-added and says so first.
    let deadline = Instant::now() + Duration::from_secs(5);
    // The frozen server may have expired the observer's session too; it recovers by itself.
    while !matches!(observer.exists(&eph).await, Ok(None)) {
        assert!(
            Instant::now() < deadline,
            "the expired session's ephemeral must go"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        next_event(&mut w, Duration::from_secs(3)).await,
        WatchEvent::Resync
    );
    wait_state(&observer, Duration::from_secs(10), |s| {
        matches!(s, SessionState::Connected { .. })
    })
    .await;
    observer
        .create("/r/after", b"", CreateMode::Persistent)
        .await
        .unwrap();
    observer.set("/r/after", b"v", None).await.unwrap();
    let seen = drain(&mut w).await;
    assert!(
        seen.ends_with(&[
            WatchEvent::Created("/r/after".into()),
            WatchEvent::DataChanged("/r/after".into())
        ]),
        "{seen:?}"
    );
    // The renewed session owns new ephemerals.
    let (_, st) = reg
        .create("/r/mine", b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    assert_eq!(st.ephemeral_owner, new_id);

    // 3. Close is terminal: the watch ends, calls fail, and the session's tasks (its loop, the
    // heartbeat, the watch's forwarder) have ended when it returns.
    assert!(reg.tasks_running() >= 3, "{}", reg.tasks_running());
    reg.close().await;
    assert_eq!(reg.tasks_running(), 0, "the session's tasks outlive close");
    assert_eq!(*reg.session().borrow(), SessionState::Closed);
    let end = tokio::time::timeout(Duration::from_secs(3), async {
        while w.next().await.is_some() {}
    })
    .await;
    assert!(end.is_ok(), "the watch must end when the registry closes");
    assert!(matches!(reg.exists("/r").await, Err(Error::Closed)));
    observer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_warm_up_sends_the_heartbeat_at_once() {
    assert!(Registry::standalone().warm_up_hook().is_none());
    let server = ZkServer::start();
    // A 60 s session: the periodic heartbeat comes only every 7.5 s.
    let reg = Registry::zookeeper(settings(&server, "warm", Duration::from_secs(60)))
        .await
        .expect("connect");
    reg.exists("/").await.unwrap();
    let before = reg.last_proof().expect("proven alive");
    let hook = reg.warm_up_hook().expect("a hook on ZooKeeper");
    let called = Instant::now();
    hook();
    let deadline = called + Duration::from_secs(5);
    while reg.last_proof().is_none_or(|p| p <= before) {
        assert!(
            Instant::now() < deadline,
            "no request went out after the warm-up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(reg.last_proof().unwrap() >= called);
    reg.close().await;
}
