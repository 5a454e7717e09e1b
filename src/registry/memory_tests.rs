//! ZooKeeper's rules, checked on the memory store (the same behaviours run against a real server
//! in `zk_tests`).

use std::time::Duration;

use super::latch::tests::{assert_cancel_safety, assert_mutual_exclusion};
use super::{
    CreateMode, Error, MemoryStore, Op, OpResult, Registry, SessionState, TreeCache, WatchEvent,
};

use WatchEvent::{Created, DataChanged, Deleted};

fn s(p: &str) -> String {
    p.to_string()
}

pub(crate) async fn drain(w: &mut super::Watch) -> Vec<WatchEvent> {
    let mut out = Vec::new();
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(250), w.next()).await {
        out.push(ev);
    }
    out
}

/// Behaviours shared by both stores; `reg` must see an empty `/t`-free tree.
pub(crate) async fn check_basic_rules(reg: &Registry) {
    use CreateMode::*;
    // create: parent must exist; duplicates fail; invalid paths fail.
    assert!(matches!(
        reg.create("/t/a", b"", Persistent).await,
        Err(Error::NoNode(_))
    ));
    let (p, st) = reg.create("/t", b"root", Persistent).await.unwrap();
    assert_eq!((p.as_str(), st.version, st.num_children), ("/t", 0, 0));
    assert!(st.czxid > 0 && st.czxid == st.mzxid && st.ctime > 0);
    assert!(matches!(
        reg.create("/t", b"", Persistent).await,
        Err(Error::NodeExists(_))
    ));
    assert!(matches!(
        reg.create("t", b"", Persistent).await,
        Err(Error::Other(_))
    ));
    assert!(matches!(
        reg.create("/t/", b"", Persistent).await,
        Err(Error::Other(_))
    ));

    // get / exists / set with versions.
    reg.create("/t/a", b"1", Persistent).await.unwrap();
    let n = reg.get("/t/a").await.unwrap().unwrap();
    assert_eq!((n.data.as_slice(), n.stat.version), (&b"1"[..], 0));
    assert!(reg.get("/t/missing").await.unwrap().is_none());
    assert!(reg.exists("/t/missing").await.unwrap().is_none());
    let st = reg.set("/t/a", b"2", Some(0)).await.unwrap();
    assert_eq!(st.version, 1);
    assert!(st.mzxid > st.czxid);
    assert!(matches!(
        reg.set("/t/a", b"3", Some(0)).await,
        Err(Error::BadVersion(_))
    ));
    assert_eq!(reg.set("/t/a", b"3", None).await.unwrap().version, 2);
    assert!(matches!(
        reg.set("/t/missing", b"", None).await,
        Err(Error::NoNode(_))
    ));

    // parent stat: cversion / num_children / pzxid.
    let parent = reg.exists("/t").await.unwrap().unwrap();
    assert_eq!((parent.cversion, parent.num_children), (1, 1));
    assert!(parent.pzxid > parent.czxid);

    // sequential names come from the parent's cversion (bumped by creates only).
    reg.create("/t/q", b"", Persistent).await.unwrap();
    let (a, _) = reg
        .create("/t/q/n-", b"", PersistentSequential)
        .await
        .unwrap();
    let (b, _) = reg
        .create("/t/q/n-", b"", PersistentSequential)
        .await
        .unwrap();
    reg.delete(&b, None).await.unwrap();
    let (c, _) = reg
        .create("/t/q/m-", b"", PersistentSequential)
        .await
        .unwrap();
    assert_eq!(
        (a.as_str(), b.as_str(), c.as_str()),
        (
            "/t/q/n-0000000000",
            "/t/q/n-0000000001",
            "/t/q/m-0000000002"
        )
    );
    assert_eq!(
        reg.children("/t/q").await.unwrap(),
        vec![s("m-0000000002"), s("n-0000000000")]
    );
    assert!(matches!(
        reg.children("/t/missing").await,
        Err(Error::NoNode(_))
    ));

    // delete: NotEmpty, BadVersion, NoNode.
    assert!(matches!(
        reg.delete("/t/q", None).await,
        Err(Error::NotEmpty(_))
    ));
    assert!(matches!(
        reg.delete("/t/a", Some(0)).await,
        Err(Error::BadVersion(_))
    ));
    reg.delete("/t/a", Some(2)).await.unwrap();
    assert!(matches!(
        reg.delete("/t/a", None).await,
        Err(Error::NoNode(_))
    ));

    // ephemerals: owned by the session, no children.
    let (e, st) = reg.create("/t/e", b"", Ephemeral).await.unwrap();
    assert_ne!(st.ephemeral_owner, 0);
    if let SessionState::Connected { session_id, .. } = &*reg.session().borrow() {
        assert_eq!(st.ephemeral_owner, *session_id);
    }
    assert!(reg
        .create(&format!("{e}/child"), b"", Persistent)
        .await
        .is_err());
    let (es, st) = reg
        .create("/t/es-", b"", EphemeralSequential)
        .await
        .unwrap();
    assert!(es.starts_with("/t/es-") && es.len() == "/t/es-".len() + 10 && st.ephemeral_owner != 0);

    // ensure_path, read_tree, delete_recursive.
    reg.ensure_path("/t/x/y/z").await.unwrap();
    reg.ensure_path("/t/x/y/z").await.unwrap();
    assert!(reg.get("/t/x/y/z").await.unwrap().unwrap().data.is_empty());
    reg.set("/t/x/y", b"why", None).await.unwrap();
    let tree = reg.read_tree("/t/x").await.unwrap();
    assert_eq!(
        tree.keys().cloned().collect::<Vec<_>>(),
        vec![s("/t/x"), s("/t/x/y"), s("/t/x/y/z")]
    );
    assert_eq!(tree["/t/x/y"].data, b"why");
    assert!(reg.read_tree("/t/none").await.unwrap().is_empty());
    reg.delete_recursive("/t/x").await.unwrap();
    reg.delete_recursive("/t/x").await.unwrap();
    assert!(reg.exists("/t/x").await.unwrap().is_none());
}

/// Multi is all-or-nothing and names the failed op.
pub(crate) async fn check_multi(reg: &Registry) {
    use CreateMode::*;
    reg.create("/m", b"", Persistent).await.unwrap();
    reg.create("/m/v", b"0", Persistent).await.unwrap();
    let ops = vec![
        Op::Create {
            path: s("/m/new"),
            data: b"n".to_vec(),
            mode: Persistent,
        },
        Op::SetData {
            path: s("/m/v"),
            data: b"1".to_vec(),
            version: Some(0),
        },
        Op::Check {
            path: s("/m/v"),
            version: 0,
        },
    ];
    match reg.multi(ops).await {
        Err(Error::MultiFailed { index: 2, source }) => {
            assert!(matches!(*source, Error::BadVersion(_)), "{source:?}")
        }
        other => panic!("expected MultiFailed at 2, got {other:?}"),
    }
    assert!(
        reg.exists("/m/new").await.unwrap().is_none(),
        "create rolled back"
    );
    assert_eq!(
        reg.get("/m/v").await.unwrap().unwrap().data,
        b"0",
        "set rolled back"
    );
    assert_eq!(reg.exists("/m").await.unwrap().unwrap().num_children, 1);

    let ops = vec![
        Op::Create {
            path: s("/m/new"),
            data: b"n".to_vec(),
            mode: Persistent,
        },
        Op::Create {
            path: s("/m/new/child"),
            data: vec![],
            mode: Persistent,
        },
        Op::SetData {
            path: s("/m/v"),
            data: b"1".to_vec(),
            version: Some(0),
        },
        Op::Check {
            path: s("/m/v"),
            version: 1,
        },
        Op::Delete {
            path: s("/m/new/child"),
            version: Some(0),
        },
    ];
    reg.multi(ops).await.unwrap();
    assert_eq!(reg.children("/m").await.unwrap(), vec![s("new"), s("v")]);
    assert!(reg.exists("/m/new/child").await.unwrap().is_none());
    match reg
        .multi(vec![Op::Delete {
            path: s("/m/nope"),
            version: None,
        }])
        .await
    {
        Err(Error::MultiFailed { index: 0, source }) => {
            assert!(matches!(*source, Error::NoNode(_)))
        }
        other => panic!("expected MultiFailed at 0, got {other:?}"),
    }
    reg.multi(vec![]).await.unwrap();
}

/// A recursive watch sees everything below it, in order, including multi-ops.
pub(crate) async fn check_watch_order(reg: &Registry, other: &Registry) {
    use CreateMode::*;
    let mut w = reg.watch_recursive("/w").await.unwrap();
    other.create("/w", b"", Persistent).await.unwrap();
    other.create("/w/a", b"", Persistent).await.unwrap();
    other.set("/w/a", b"x", None).await.unwrap();
    other.create("/wx", b"", Persistent).await.unwrap(); // a sibling with a common prefix: not ours
    other
        .multi(vec![
            Op::Create {
                path: s("/w/b"),
                data: vec![],
                mode: Persistent,
            },
            Op::SetData {
                path: s("/w"),
                data: b"y".to_vec(),
                version: None,
            },
            Op::Delete {
                path: s("/w/a"),
                version: None,
            },
        ])
        .await
        .unwrap();
    let (e, _) = other.create("/w/e", b"", Ephemeral).await.unwrap();
    other.delete(&e, None).await.unwrap();
    let want = vec![
        Created(s("/w")),
        Created(s("/w/a")),
        DataChanged(s("/w/a")),
        Created(s("/w/b")),
        DataChanged(s("/w")),
        Deleted(s("/w/a")),
        Created(s("/w/e")),
        Deleted(s("/w/e")),
    ];
    assert_eq!(drain(&mut w).await, want);
    drop(w);

    // TreeCache follows the events.
    let mut w = reg.watch_recursive("/w").await.unwrap();
    let mut cache = TreeCache::load(reg, "/w").await.unwrap();
    assert_eq!(cache.children("/w"), vec![s("b")]);
    assert_eq!(cache.data("/w"), Some(&b"y"[..]));
    other.create("/w/b/c", b"c", Persistent).await.unwrap();
    other.set("/w/b", b"bb", None).await.unwrap();
    other.create("/w/d", b"", Persistent).await.unwrap();
    for ev in drain(&mut w).await {
        cache.apply(reg, &ev).await.unwrap();
    }
    assert_eq!(cache.children("/w"), vec![s("b"), s("d")]);
    assert_eq!(cache.data("/w/b/c"), Some(&b"c"[..]));
    assert_eq!(cache.get("/w/b").unwrap().stat.version, 1);
    other.delete_recursive("/w/b").await.unwrap();
    for ev in drain(&mut w).await {
        cache.apply(reg, &ev).await.unwrap();
    }
    assert!(!cache.contains("/w/b") && !cache.contains("/w/b/c") && cache.contains("/w/d"));
    other.set("/w/d", b"dd", None).await.unwrap();
    cache.apply(reg, &WatchEvent::Resync).await.unwrap();
    assert_eq!(cache.data("/w/d"), Some(&b"dd"[..]));
    cache.apply(reg, &Created(s("/elsewhere"))).await.unwrap();
    assert!(!cache.contains("/elsewhere"));
}

/// Batched multi-ops submitted at once by `callers` callers, each creating and setting a node of
/// its own: each caller gets the results of its own operations; the failing caller's failure is
/// its own, with the index in its own operations, and undoes only its own writes, wherever it
/// falls in a shared request. Returns the mzxid of each successful caller's `SetData`.
pub(crate) async fn check_batched(
    reg: &Registry,
    callers: usize,
    failing: Option<usize>,
) -> Vec<i64> {
    use futures::future::join_all;
    use CreateMode::Persistent;
    let generation = reg.session().borrow().generation();
    let root = format!("/b{}", failing.map_or(0, |f| f + 1));
    reg.create(&root, b"", Persistent).await.unwrap();
    let ops = |i: usize| {
        let mut ops = vec![
            Op::create(format!("{root}/{i}"), "c", Persistent),
            Op::SetData {
                path: format!("{root}/{i}"),
                data: format!("own {i}").into_bytes(),
                version: Some(0),
            },
        ];
        if Some(i) == failing {
            // The root is at version 0.
            ops.push(Op::Check {
                path: root.clone(),
                version: 7,
            });
        }
        ops
    };
    let answers =
        join_all((0..callers).map(|i| reg.multi_at_batched(generation, ops(i).into()))).await;
    let mut zxids = Vec::new();
    for (i, answer) in answers.into_iter().enumerate() {
        let node = reg.get(&format!("{root}/{i}")).await.unwrap();
        if Some(i) == failing {
            match answer {
                Err(Error::MultiFailed { index: 2, source }) => {
                    assert!(matches!(*source, Error::BadVersion(_)), "{source:?}");
                }
                other => panic!("caller {i}: expected its own failure at 2, got {other:?}"),
            }
            assert!(node.is_none(), "caller {i}: its create was undone");
            continue;
        }
        let results = answer.unwrap_or_else(|e| panic!("caller {i}: {e:?}"));
        assert_eq!(results.len(), 2, "caller {i}: {results:?}");
        match &results[0] {
            OpResult::Created { path, .. } => assert_eq!(path, &format!("{root}/{i}")),
            other => panic!("caller {i}: {other:?}"),
        }
        match &results[1] {
            OpResult::DataSet { stat } => {
                assert_eq!(stat.version, 1, "caller {i}");
                zxids.push(stat.mzxid);
            }
            other => panic!("caller {i}: {other:?}"),
        }
        assert_eq!(node.unwrap().data, format!("own {i}").into_bytes());
    }
    zxids
}

#[tokio::test]
async fn memory_batched_multi_ops_answer_each_caller_alone() {
    let reg = Registry::standalone();
    assert_eq!(check_batched(&reg, 50, None).await.len(), 50);
    assert_eq!(check_batched(&reg, 50, Some(25)).await.len(), 49);
}

#[tokio::test]
async fn memory_basic_rules() {
    let reg = Registry::standalone();
    assert!(reg.is_standalone());
    check_basic_rules(&reg).await;
}

#[tokio::test]
async fn memory_multi() {
    check_multi(&Registry::standalone()).await;
}

#[tokio::test]
async fn memory_watch_order_and_cache() {
    let store = MemoryStore::new();
    check_watch_order(&store.session(), &store.session()).await;
}

#[tokio::test]
async fn memory_watches_at_every_depth_see_what_is_below_them_and_a_dropped_one_nothing() {
    use CreateMode::Persistent;
    let store = MemoryStore::new();
    let (reg, other) = (store.session(), store.session());
    let mut root = reg.watch_recursive("/").await.unwrap();
    let mut w = reg.watch_recursive("/w").await.unwrap();
    let mut wa = other.watch_recursive("/w/a").await.unwrap();
    let gone = other.watch_recursive("/w").await.unwrap();
    drop(gone);
    other.create("/w", b"", Persistent).await.unwrap();
    other.create("/w/a", b"", Persistent).await.unwrap();
    other.create("/w/a/b", b"", Persistent).await.unwrap();
    other.create("/wa", b"", Persistent).await.unwrap();
    let all = vec![
        Created(s("/w")),
        Created(s("/w/a")),
        Created(s("/w/a/b")),
        Created(s("/wa")),
    ];
    assert_eq!(drain(&mut root).await, all);
    assert_eq!(drain(&mut w).await, all[..3]);
    assert_eq!(drain(&mut wa).await, all[1..3]);
    // A new watch after a dropped one (which is let go of then) sees what follows.
    let mut again = reg.watch_recursive("/w").await.unwrap();
    other.set("/w/a/b", b"x", None).await.unwrap();
    assert_eq!(drain(&mut again).await, [DataChanged(s("/w/a/b"))]);
    assert_eq!(drain(&mut wa).await, [DataChanged(s("/w/a/b"))]);
}

#[tokio::test]
async fn memory_zxids_are_global_and_multi_shares_one() {
    let store = MemoryStore::new();
    let (a, b) = (store.session(), store.session());
    let (_, s1) = a.create("/a", b"", CreateMode::Persistent).await.unwrap();
    let (_, s2) = b.create("/b", b"", CreateMode::Persistent).await.unwrap();
    assert_eq!(s2.czxid, s1.czxid + 1);
    a.multi(vec![
        Op::Create {
            path: s("/a/1"),
            data: vec![],
            mode: CreateMode::Persistent,
        },
        Op::Create {
            path: s("/b/1"),
            data: vec![],
            mode: CreateMode::Persistent,
        },
    ])
    .await
    .unwrap();
    let (x, y) = (
        a.exists("/a/1").await.unwrap().unwrap(),
        a.exists("/b/1").await.unwrap().unwrap(),
    );
    assert_eq!((x.czxid, y.czxid), (s2.czxid + 1, s2.czxid + 1));
    // A failed operation consumes no zxid.
    let _ = a.create("/a", b"", CreateMode::Persistent).await;
    let (_, s3) = a.create("/c", b"", CreateMode::Persistent).await.unwrap();
    assert_eq!(s3.czxid, x.czxid + 1);
}

#[tokio::test]
async fn memory_ephemerals_vanish_on_close_and_expiry() {
    let store = MemoryStore::new();
    let (a, b) = (store.session(), store.session());
    a.create("/e", b"", CreateMode::Persistent).await.unwrap();
    let mut w = b.watch_recursive("/e").await.unwrap();
    let mut a_state = a.session();
    let first = a_state.borrow_and_update().clone();
    let SessionState::Connected {
        generation: 1,
        session_id: old_id,
    } = first
    else {
        panic!("{first:?}")
    };
    a.create("/e/one", b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    let mut aw = a.watch_recursive("/e").await.unwrap();

    store.expire(&a);
    assert_eq!(
        drain(&mut w).await,
        vec![Created(s("/e/one")), Deleted(s("/e/one"))]
    );
    assert_eq!(
        drain(&mut aw).await,
        vec![WatchEvent::Resync],
        "the expired session only learns to resync"
    );
    let now = a_state.borrow_and_update().clone();
    let SessionState::Connected {
        generation: 2,
        session_id: new_id,
    } = now
    else {
        panic!("{now:?}")
    };
    assert_ne!(new_id, old_id);

    // The renewed session works and owns new ephemerals; close removes them and ends watches.
    let (_, st) = a
        .create("/e/two", b"", CreateMode::Ephemeral)
        .await
        .unwrap();
    assert_eq!(st.ephemeral_owner, new_id);
    a.close().await;
    assert_eq!(*a.session().borrow(), SessionState::Closed);
    assert_eq!(
        drain(&mut w).await,
        vec![Created(s("/e/two")), Deleted(s("/e/two"))]
    );
    assert_eq!(
        drain(&mut aw).await,
        vec![Created(s("/e/two"))],
        "no events after close"
    );
    assert_eq!(aw.next().await, None);
    assert!(matches!(a.get("/e").await, Err(Error::Closed)));
    assert_eq!(b.children("/e").await.unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn memory_wait_deleted() {
    let store = MemoryStore::new();
    let (a, b) = (store.session(), store.session());
    a.wait_deleted("/absent").await.unwrap();
    a.create("/n", b"", CreateMode::Ephemeral).await.unwrap();
    let waiter = tokio::spawn(async move { b.wait_deleted("/n").await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished());
    a.set("/n", b"still here", None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished());
    a.close().await;
    tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn memory_latch_excludes_and_is_cancel_safe() {
    let store = MemoryStore::new();
    let regs: Vec<Registry> = (0..5).map(|_| store.session()).collect();
    assert_mutual_exclusion(regs.clone(), "/job/leader/election/latch", 4).await;
    assert_cancel_safety(&regs[0], &regs[1], "/job/leader/election/latch").await;
}

/// A failover claim's latch-free assertion ([`latch_free_ops`]): the claim's writes land
/// only while no one holds or waits for the latch, and nothing of a refused claim is applied.
/// `holder` takes the latch as any contender does (Curator's `LeaderLatch` children).
///
/// [`latch_free_ops`]: crate::coordination::job::writes::latch_free_ops
pub(crate) async fn check_latch_free_claims(reg: &Registry, holder: &Registry) {
    use crate::coordination::job::writes::latch_free_ops;
    use crate::elasticjob::paths::JobPaths;
    use CreateMode::Persistent;
    let paths = JobPaths::new("claims");
    let dir = paths.failover_latch();
    reg.ensure_path(&paths.failover_items()).await.unwrap();
    let claim = |name: &str, dir_exists: bool| {
        let mut ops = latch_free_ops(&paths, dir_exists);
        ops.push(Op::create(format!("/claims/{name}"), "x", Persistent));
        ops
    };
    let refused = |r: Result<(), Error>| match r {
        Err(Error::MultiFailed { index: 0, source }) => *source,
        other => panic!("expected a refusal at the latch, got {other:?}"),
    };
    // No latch directory: created and deleted in the claim's own write.
    reg.multi(claim("a", false)).await.unwrap();
    assert!(reg.exists("/claims/a").await.unwrap().is_some());
    assert!(
        reg.exists(&dir).await.unwrap().is_none(),
        "no directory is left"
    );
    // A wrong guess about the directory is refused, and says which way it was wrong.
    assert!(matches!(
        refused(reg.multi(claim("b", true)).await),
        Error::NoNode(_)
    ));
    // A contender holds the latch: every claim is refused, whatever the guess, and none lands.
    let latch = holder.acquire_latch(&dir).await.unwrap();
    assert!(matches!(
        refused(reg.multi(claim("c", true)).await),
        Error::NotEmpty(_)
    ));
    assert!(matches!(
        refused(reg.multi(claim("c", false)).await),
        Error::NodeExists(_)
    ));
    assert!(reg.exists("/claims/c").await.unwrap().is_none());
    assert!(
        reg.exists(&dir).await.unwrap().is_some(),
        "the holder's latch is untouched"
    );
    // Released (its directory stays, empty): the claim lands and takes the directory away.
    latch.release().await.unwrap();
    reg.multi(claim("d", true)).await.unwrap();
    assert!(reg.exists("/claims/d").await.unwrap().is_some());
    assert!(reg.exists(&dir).await.unwrap().is_none());
    // A contender that comes after the claim takes the latch as usual.
    let after = holder.acquire_latch(&dir).await.unwrap();
    after.release().await.unwrap();
}

#[tokio::test]
async fn memory_latch_free_claims_land_only_while_the_latch_is_free() {
    let store = MemoryStore::new();
    check_latch_free_claims(&store.session(), &store.session()).await;
}

#[tokio::test]
async fn memory_latch_follows_curator_order_and_survives_expiry() {
    let store = MemoryStore::new();
    let (java, a) = (store.session(), store.session());
    // A "Java" contender with another prefix queued first holds it (lowest sequence wins).
    java.ensure_path("/l").await.unwrap();
    let (jpath, _) = java
        .create("/l/_c_0f-latch-", b"", CreateMode::EphemeralSequential)
        .await
        .unwrap();
    let acquiring = tokio::spawn({
        let a = a.clone();
        async move { a.acquire_latch("/l").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!acquiring.is_finished(), "must wait for the Java holder");
    java.delete(&jpath, None).await.unwrap();
    let latch = tokio::time::timeout(Duration::from_secs(1), acquiring)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        latch.path().ends_with("-latch-0000000001"),
        "{}",
        latch.path()
    );
    assert_eq!(latch.generation(), 1);

    // Expiry takes the node; a new contender then gets it.
    store.expire(&a);
    let other = store.session();
    let l2 = tokio::time::timeout(Duration::from_secs(1), other.acquire_latch("/l"))
        .await
        .unwrap()
        .unwrap();
    drop(latch); // releasing a latch whose node is gone is harmless
    l2.release().await.unwrap();
}
