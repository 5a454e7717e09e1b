//! Admin operations against the in-memory registry, checked node by node against ElasticJob's
//! layout (`docs/elasticjob-compat.md` §1, §8).

use std::collections::BTreeMap;

use super::*;
use crate::elasticjob::config::JobConfiguration;
use crate::elasticjob::extras::JobExtras;
use crate::elasticjob::paths::ServerStatus;
use crate::elasticjob::typed::JobType;
use crate::registry::{CreateMode, MemoryStore};

fn config(name: &str, cron: &str, total: i32) -> JobConfiguration {
    let mut c = JobConfiguration::new(name, total);
    c.cron = Some(cron.into());
    c
}

async fn job(reg: &Registry, name: &str, total: i32) {
    let mut c = config(name, "0 0 0 1 1 ? 2099", total);
    c.sharding_item_parameters = "0=a".into();
    assert!(put_job(reg, c, JobExtras::default(), None).await.unwrap());
}

async fn online(reg: &Registry, name: &str, ip: &str, pid: u32) -> String {
    let paths = JobPaths::new(name);
    let id = crate::elasticjob::instance_id(ip, pid);
    reg.ensure_path(&paths.servers()).await.unwrap();
    let _ = reg
        .create(&paths.server(ip), b"ENABLED", CreateMode::Persistent)
        .await;
    reg.ensure_path(&paths.instances()).await.unwrap();
    let data = crate::elasticjob::instance_yaml(&id, ip);
    reg.create(&paths.instance(&id), data.as_bytes(), CreateMode::Ephemeral)
        .await
        .unwrap();
    id
}

fn data(tree: &BTreeMap<String, Node>, path: &str) -> Option<String> {
    tree.get(path).map(text)
}

#[tokio::test]
async fn put_get_and_list() {
    let reg = MemoryStore::new().session();
    job(&reg, "orders", 3).await;
    let paths = JobPaths::new("orders");
    let tree = reg.read_tree("/orders").await.unwrap();
    assert_eq!(data(&tree, "/orders").as_deref(), Some(""));
    assert!(data(&tree, &paths.config())
        .unwrap()
        .contains("shardingTotalCount: 3\n"));
    assert_eq!(
        data(&tree, &paths.shardcar()).as_deref(),
        Some("executionTimeoutSeconds: 0\n")
    );

    let a = online(&reg, "orders", "10.0.0.1", 1).await;
    let b = online(&reg, "orders", "10.0.0.2", 2).await;
    reg.ensure_path(&paths.item(0)).await.unwrap();
    reg.ensure_path(&paths.item(1)).await.unwrap();
    reg.create(
        &paths.item_instance(0),
        a.as_bytes(),
        CreateMode::Persistent,
    )
    .await
    .unwrap();
    reg.create(
        &paths.item_instance(1),
        b.as_bytes(),
        CreateMode::Persistent,
    )
    .await
    .unwrap();
    reg.create(&paths.item_running(1), b.as_bytes(), CreateMode::Persistent)
        .await
        .unwrap();
    reg.create(&paths.item_misfire(1), b"", CreateMode::Persistent)
        .await
        .unwrap();
    reg.ensure_path(&paths.failover_item(0)).await.unwrap();
    reg.ensure_path(&paths.leader_election_latch())
        .await
        .unwrap();
    reg.create(
        &paths.leader_election_instance(),
        a.as_bytes(),
        CreateMode::Ephemeral,
    )
    .await
    .unwrap();

    let got = get_job(&reg, "orders").await.unwrap();
    assert_eq!(got.status, JobStatus::Ok);
    assert_eq!(got.leader, a);
    assert_eq!(got.config.sharding_total_count, 3);
    assert_eq!(got.servers.len(), 2);
    assert_eq!(got.servers[0].instance_count, 1);
    assert_eq!(got.instances[0].instance_id, a);
    assert!(got.instances[0].leader);
    assert_eq!(got.instances[0].items, [0]);
    assert_eq!(got.instances[1].items, [1]);
    assert_eq!(got.items.len(), 3);
    assert_eq!(got.items[0].parameter, "a");
    assert!(got.items[0].failover_pending);
    assert!(got.items[1].running && got.items[1].misfire);
    assert_eq!(got.items[1].running_instance, b);
    assert_eq!(got.items[2].owner, "");

    let jobs = list_jobs(&reg).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].instance_count, 2);
    assert_eq!(jobs[0].leader, a);

    // A job whose owner is gone needs resharding; one with no instance is crashed.
    reg.delete(&paths.instance(&b), None).await.unwrap();
    assert_eq!(
        get_job(&reg, "orders").await.unwrap().status,
        JobStatus::ShardingFlag
    );
    reg.delete(&paths.instance(&a), None).await.unwrap();
    assert_eq!(
        get_job(&reg, "orders").await.unwrap().status,
        JobStatus::Crashed
    );
}

#[tokio::test]
async fn put_keeps_java_only_settings_and_validates() {
    let reg = MemoryStore::new().session();
    let paths = JobPaths::new("j");
    reg.create("/j", b"com.example.MyJob", CreateMode::Persistent)
        .await
        .unwrap();
    let java = "cron: 0/5 * * * * ?\njobErrorHandlerType: THROW\njobName: j\nshardingTotalCount: 1\nstaticSharding: true\n";
    reg.create(&paths.config(), java.as_bytes(), CreateMode::Persistent)
        .await
        .unwrap();
    let wire = config("j", "0/10 * * * * ?", 4);
    assert!(!put_job(&reg, wire.clone(), JobExtras::default(), None)
        .await
        .unwrap());
    let yaml = text(&reg.get(&paths.config()).await.unwrap().unwrap());
    assert!(yaml.contains("jobErrorHandlerType: THROW\n"), "{yaml}");
    assert!(yaml.contains("staticSharding: true\n"), "{yaml}");
    assert!(yaml.contains("shardingTotalCount: 4\n"), "{yaml}");
    // The root written by Java is left alone.
    assert_eq!(
        text(&reg.get("/j").await.unwrap().unwrap()),
        "com.example.MyJob"
    );

    let field = |e: AdminError| match e {
        AdminError::InvalidArgument { field, .. } => field,
        other => panic!("{other:?}"),
    };
    let mut bad = wire.clone();
    bad.job_name = "a/b".into();
    assert_eq!(
        field(
            put_job(&reg, bad, JobExtras::default(), None)
                .await
                .unwrap_err()
        ),
        "config.job_name"
    );
}

#[tokio::test]
async fn operations_write_elasticjob_nodes() {
    let reg = MemoryStore::new().session();
    job(&reg, "orders", 3).await;
    let paths = JobPaths::new("orders");
    let a = online(&reg, "orders", "10.0.0.1", 1).await;
    let b = online(&reg, "orders", "10.0.0.2", 2).await;

    // Trigger: the old trigger nodes go, one per live instance is created.
    reg.ensure_path(&paths.trigger("stale@-@9")).await.unwrap();
    let triggered = trigger_job(&reg, "orders", None).await.unwrap();
    assert_eq!(triggered, [a.clone(), b.clone()]);
    assert_eq!(
        reg.children(&paths.triggers()).await.unwrap(),
        [a.clone(), b.clone()]
    );

    // Disable/enable the job: every server.
    assert_eq!(
        set_job_servers(&reg, "orders", ServerStatus::Disabled)
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        text(&reg.get(&paths.server("10.0.0.2")).await.unwrap().unwrap()),
        "DISABLED"
    );
    assert_eq!(
        get_job(&reg, "orders").await.unwrap().status,
        JobStatus::Disabled
    );
    set_job_servers(&reg, "orders", ServerStatus::Enabled)
        .await
        .unwrap();
    assert_eq!(
        text(&reg.get(&paths.server("10.0.0.2")).await.unwrap().unwrap()),
        "ENABLED"
    );

    // One server, in every job.
    assert_eq!(
        set_server(&reg, None, "10.0.0.1", ServerStatus::Disabled)
            .await
            .unwrap(),
        ["orders"]
    );
    assert_eq!(
        text(&reg.get(&paths.server("10.0.0.1")).await.unwrap().unwrap()),
        "DISABLED"
    );
    assert!(matches!(
        set_server(&reg, Some("orders"), "10.9.9.9", ServerStatus::Disabled).await,
        Err(AdminError::NotFound(_))
    ));

    // Items.
    set_items_disabled(&reg, "orders", &[2, 0], true)
        .await
        .unwrap();
    assert!(reg.exists(&paths.item_disabled(2)).await.unwrap().is_some());
    assert!(get_job(&reg, "orders").await.unwrap().items[0].disabled);
    set_items_disabled(&reg, "orders", &[2], false)
        .await
        .unwrap();
    assert!(reg.exists(&paths.item_disabled(2)).await.unwrap().is_none());
    assert!(
        matches!(set_items_disabled(&reg, "orders", &[3], true).await,
        Err(AdminError::InvalidArgument { field, .. }) if field == "items")
    );

    // Remote shutdown.
    assert_eq!(shutdown_instance(&reg, None, &a).await.unwrap(), ["orders"]);
    assert!(reg.exists(&paths.instance(&a)).await.unwrap().is_none());
    assert!(matches!(
        shutdown_instance(&reg, Some("orders"), &a).await,
        Err(AdminError::NotFound(_))
    ));

    // Remove: everything goes.
    assert_eq!(remove_job(&reg, "orders").await.unwrap(), [b]);
    assert!(reg.exists("/orders").await.unwrap().is_none());
    assert!(list_jobs(&reg).await.unwrap().is_empty());
    assert!(matches!(
        get_job(&reg, "orders").await,
        Err(AdminError::JobNotFound(_))
    ));
    assert!(matches!(
        trigger_job(&reg, "orders", None).await,
        Err(AdminError::JobNotFound(_))
    ));
}

#[tokio::test]
async fn trigger_without_instances_is_refused() {
    let reg = MemoryStore::new().session();
    job(&reg, "idle", 1).await;
    let err = trigger_job(&reg, "idle", None).await.unwrap_err();
    assert!(matches!(err, AdminError::FailedPrecondition(_)), "{err:?}");
}

#[tokio::test]
async fn a_typed_job_names_its_type_in_the_root_and_never_rewrites_another() {
    let reg = MemoryStore::new().session();
    let mut c = config("script", "0 0 0 1 1 ? 2099", 2);
    c.props
        .insert("script.command.line".into(), "/bin/true".into());
    assert!(
        put_job(&reg, c.clone(), JobExtras::default(), Some(JobType::Script))
            .await
            .unwrap()
    );
    let root = JobPaths::new("script").root();
    let root_data = |reg: Registry| {
        let root = root.clone();
        async move { text(&reg.get(&root).await.unwrap().unwrap()) }
    };
    assert_eq!(root_data(reg.clone()).await, "SCRIPT");
    assert_eq!(
        get_job(&reg, "script").await.unwrap().job_type,
        Some(JobType::Script)
    );
    // Putting it again as the same type, or without one, keeps the root as it is.
    put_job(&reg, c.clone(), JobExtras::default(), Some(JobType::Script))
        .await
        .unwrap();
    put_job(&reg, c.clone(), JobExtras::default(), None)
        .await
        .unwrap();
    assert_eq!(root_data(reg.clone()).await, "SCRIPT");
    // Another type, or a Java class in the root, is refused and nothing is written.
    let e = put_job(&reg, c.clone(), JobExtras::default(), Some(JobType::Http))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, AdminError::FailedPrecondition(m) if m.contains("\"SCRIPT\"")),
        "{e:?}"
    );
    let mut java = config("java", "0 0 0 1 1 ? 2099", 1);
    java.props.insert("script.command.line".into(), "x".into());
    put_job(&reg, java.clone(), JobExtras::default(), None)
        .await
        .unwrap();
    let java_root = JobPaths::new("java").root();
    reg.set(&java_root, b"com.example.OrderJob", None)
        .await
        .unwrap();
    let contents = |tree: BTreeMap<String, Node>| -> Vec<(String, String)> {
        tree.iter().map(|(p, n)| (p.clone(), text(n))).collect()
    };
    let before = contents(reg.read_tree(&java_root).await.unwrap());
    let e = put_job(&reg, java, JobExtras::default(), Some(JobType::Script))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, AdminError::FailedPrecondition(m) if m.contains("com.example.OrderJob")),
        "{e:?}"
    );
    assert_eq!(contents(reg.read_tree(&java_root).await.unwrap()), before);
    // A worker job's empty root takes the type.
    let mut plain = config("plain", "0 0 0 1 1 ? 2099", 1);
    put_job(&reg, plain.clone(), JobExtras::default(), None)
        .await
        .unwrap();
    plain
        .props
        .insert("script.command.line".into(), "/bin/true".into());
    put_job(&reg, plain, JobExtras::default(), Some(JobType::Script))
        .await
        .unwrap();
    assert_eq!(
        text(
            &reg.get(&JobPaths::new("plain").root())
                .await
                .unwrap()
                .unwrap()
        ),
        "SCRIPT"
    );
}

#[tokio::test]
async fn pending_retries_and_where_each_resident_item_stands_are_read() {
    use super::Hold;
    use crate::elasticjob::extras::PendingRetry;
    let reg = MemoryStore::new().session();
    let mut c = config("feeds", "", 5);
    c.cron = None;
    let extras = JobExtras {
        resident: true,
        ..JobExtras::default()
    };
    assert!(put_job(&reg, c, extras, None).await.unwrap());
    let paths = JobPaths::new("feeds");
    let a = online(&reg, "feeds", "10.0.0.1", 1).await;
    let b = online(&reg, "feeds", "10.0.0.2", 2).await;
    let put = |path: String, data: String| {
        let reg = reg.clone();
        async move {
            reg.ensure_path(&path).await.unwrap();
            reg.set(&path, data.as_bytes(), None).await.unwrap();
        }
    };
    // 0: held by its owner; 1: still held by A, now B's (handing off); 2: B's, waiting for a
    // restart backoff; 3: A's, not started yet; 4: A's but disabled.
    for (i, owner) in [(0, &a), (1, &b), (2, &b), (3, &a), (4, &a)] {
        put(paths.item_instance(i), owner.clone()).await;
    }
    put(paths.item_running(0), a.clone()).await;
    put(paths.item_running(1), a.clone()).await;
    put(paths.item_disabled(4), String::new()).await;
    let restart = PendingRetry {
        attempt: 2,
        due_ms: 1_764_388_800_123,
        parameter: None,
    };
    put(
        paths.retry(2),
        String::from_utf8(restart.to_data()).unwrap(),
    )
    .await;
    let got = get_job(&reg, "feeds").await.unwrap();
    assert_eq!(got.items[2].pending_retry.as_ref(), Some(&restart));
    assert!(got
        .items
        .iter()
        .filter(|i| i.item != 2)
        .all(|i| i.pending_retry.is_none()));
    let holds: Vec<Hold> = got.items.iter().map(|i| i.hold()).collect();
    assert_eq!(
        holds,
        [
            Hold::Held { by: &a },
            Hold::HandingOff { from: &a, to: &b },
            Hold::Waiting {
                owner: &b,
                restart: Some(&restart)
            },
            Hold::Waiting {
                owner: &a,
                restart: None
            },
            Hold::Disabled,
        ]
    );
    assert!(got.items[1].handoff && !got.items[0].handoff);
    // Data that is not a pending retry is no pending retry.
    put(paths.retry(3), "garbage".into()).await;
    assert_eq!(
        get_job(&reg, "feeds").await.unwrap().items[3].pending_retry,
        None
    );
}
