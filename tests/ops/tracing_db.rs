//! ElasticJob's tracing tables on a real PostgreSQL (`tracing_db`): the tables and their index
//! are created as ElasticJob's PostgreSQL dialect creates them, a completed and a failed
//! execution leave the rows an ElasticJob executor would, a sidecar started while the database
//! is down coordinates anyway and writes once it is back (and exits within its grace if the
//! database is down at shutdown), and a URL or login that cannot be used exits with 64, naming
//! the setting. The facts compared against are ElasticJob 3.0.4's
//! (`elasticjob-tracing-rdb`: `META-INF/sql/PostgreSQL.properties`, `RDBJobEventStorage`;
//! `ElasticJobExecutor`, `LiteJobFacade`), listed in `docs/elasticjob-compat.md` §12.

use std::collections::BTreeSet;

use chrono::{NaiveDateTime, Timelike};
use common::postgres::{DATABASE, PASSWORD, USER};
use common::Postgres;
use shardcar::proto::{Trigger, TriggerJobRequest};

use super::*;

/// A standalone (or ZooKeeper, when `zk` is given) sidecar writing into `pg`.
fn options(pg: &Postgres, zk: Option<&ZooKeeper>, ip: &str) -> SidecarOptions {
    let mut o = match zk {
        Some(zk) => SidecarOptions::zk(zk.connect_string(), ip),
        None => SidecarOptions {
            advertise_ip: ip.into(),
            ..SidecarOptions::standalone()
        },
    };
    o.extra_args = vec!["--tracing-db".into(), pg.url()];
    o
}

/// The catalog of the public schema: tables, columns (name, type, length, nullable), primary
/// keys and indexes.
async fn catalog(client: &tokio_postgres::Client) -> Vec<String> {
    let mut out = Vec::new();
    for row in client
        .query(
            "SELECT table_name::text, column_name::text, data_type::text, \
             character_maximum_length, is_nullable::text \
             FROM information_schema.columns WHERE table_schema = 'public' \
             ORDER BY table_name, ordinal_position",
            &[],
        )
        .await
        .unwrap()
    {
        let length: Option<i32> = row.get(3);
        let length = length.map(|n| format!("({n})")).unwrap_or_default();
        let null = if row.get::<_, String>(4) == "YES" {
            "NULL"
        } else {
            "NOT NULL"
        };
        out.push(format!(
            "{}.{} {}{length} {null}",
            row.get::<_, String>(0),
            row.get::<_, String>(1),
            row.get::<_, String>(2)
        ));
    }
    for row in client
        .query(
            "SELECT tc.table_name::text, kcu.column_name::text \
             FROM information_schema.table_constraints tc \
             JOIN information_schema.key_column_usage kcu \
               ON kcu.constraint_schema = tc.constraint_schema \
              AND kcu.constraint_name = tc.constraint_name \
             WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = 'public' \
             ORDER BY 1, kcu.ordinal_position",
            &[],
        )
        .await
        .unwrap()
    {
        out.push(format!(
            "{} PRIMARY KEY ({})",
            row.get::<_, String>(0),
            row.get::<_, String>(1)
        ));
    }
    for row in client
        .query(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname",
            &[],
        )
        .await
        .unwrap()
    {
        out.push(row.get(0));
    }
    out
}

/// ElasticJob's PostgreSQL DDL (3.0.4, `META-INF/sql/PostgreSQL.properties`) as PostgreSQL's
/// catalog shows it: unquoted names folded to lower case, `VARCHAR(n)` as `character
/// varying(n)`, `INT` as `integer`, `TIMESTAMP` as `timestamp without time zone`.
fn elasticjob_catalog() -> Vec<String> {
    let varchar = |n: u32| format!("character varying({n})");
    let mut want = Vec::new();
    let execution_log = [
        ("id", varchar(40), false),
        ("job_name", varchar(100), false),
        ("task_id", varchar(255), false),
        ("hostname", varchar(255), false),
        ("ip", varchar(50), false),
        ("sharding_item", "integer".into(), false),
        ("execution_source", varchar(20), false),
        ("failure_cause", varchar(4000), true),
        ("is_success", "boolean".into(), false),
        ("start_time", "timestamp without time zone".into(), true),
        ("complete_time", "timestamp without time zone".into(), true),
    ];
    let status_trace_log = [
        ("id", varchar(40), false),
        ("job_name", varchar(100), false),
        ("original_task_id", varchar(255), false),
        ("task_id", varchar(255), false),
        ("slave_id", varchar(50), false),
        ("source", varchar(50), false),
        ("execution_type", varchar(20), false),
        ("sharding_item", varchar(100), false),
        ("state", varchar(20), false),
        ("message", varchar(4000), true),
        ("creation_time", "timestamp without time zone".into(), true),
    ];
    for (table, columns) in [
        ("job_execution_log", &execution_log),
        ("job_status_trace_log", &status_trace_log),
    ] {
        for (name, kind, nullable) in columns.iter() {
            let null = if *nullable { "NULL" } else { "NOT NULL" };
            want.push(format!("{table}.{name} {kind} {null}"));
        }
    }
    want.push("job_execution_log PRIMARY KEY (id)".into());
    want.push("job_status_trace_log PRIMARY KEY (id)".into());
    want.push(
        "CREATE UNIQUE INDEX job_execution_log_pkey ON public.job_execution_log USING btree (id)"
            .into(),
    );
    want.push(
        "CREATE UNIQUE INDEX job_status_trace_log_pkey ON public.job_status_trace_log USING btree (id)"
            .into(),
    );
    want.push(
        "CREATE INDEX task_id_state_index ON public.job_status_trace_log USING btree (task_id, state)"
            .into(),
    );
    want
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tables_and_index_are_created_as_elasticjobs_postgresql_dialect_creates_them() {
    let pg = Postgres::start().await;
    let client = pg.client().await;
    assert!(catalog(&client).await.is_empty(), "a fresh database");
    // Two sidecars start together on the empty database: both come up (each connects and
    // creates what is absent before it serves), and the tables are there once.
    let (mut a, _b) = tokio::join!(
        Sidecar::start(options(&pg, None, "127.0.0.2")),
        Sidecar::start(options(&pg, None, "127.0.0.3"))
    );
    let want = elasticjob_catalog();
    assert_eq!(catalog(&client).await, want);
    // Present tables are left as they are, rows included.
    client
        .execute(
            "INSERT INTO job_status_trace_log VALUES ('x', 'j', '', 't', 's', 'LITE_EXECUTOR', \
             'READY', '[0]', 'TASK_STAGING', NULL, NULL)",
            &[],
        )
        .await
        .unwrap();
    a.restart().await;
    assert_eq!(catalog(&client).await, want);
    let kept = client
        .query_one("SELECT count(*) FROM job_status_trace_log", &[])
        .await
        .unwrap();
    assert_eq!(kept.get::<_, i64>(0), 1);
    assert!(
        a.log()
            .contains("writing execution history into ElasticJob's tracing tables"),
        "{}",
        a.log_tail(20)
    );
}

/// A row of `JOB_EXECUTION_LOG`.
#[derive(Debug, Clone, PartialEq)]
struct ExecutionRow {
    id: String,
    job_name: String,
    task_id: String,
    hostname: String,
    ip: String,
    sharding_item: i32,
    execution_source: String,
    failure_cause: Option<String>,
    is_success: bool,
    start_time: Option<NaiveDateTime>,
    complete_time: Option<NaiveDateTime>,
}

/// A row of `JOB_STATUS_TRACE_LOG`.
#[derive(Debug, Clone, PartialEq)]
struct StatusRow {
    id: String,
    job_name: String,
    original_task_id: String,
    task_id: String,
    slave_id: String,
    source: String,
    execution_type: String,
    sharding_item: String,
    state: String,
    message: Option<String>,
    creation_time: Option<NaiveDateTime>,
}

/// The execution rows of `task_id`; empty while the table does not exist yet (a sidecar
/// creates it once it reaches the database).
async fn execution_rows(client: &tokio_postgres::Client, task_id: &str) -> Vec<ExecutionRow> {
    client
        .query(
            "SELECT id, job_name, task_id, hostname, ip, sharding_item, execution_source, \
             failure_cause, is_success, start_time, complete_time \
             FROM job_execution_log WHERE task_id = $1 ORDER BY start_time, sharding_item",
            &[&task_id],
        )
        .await
        .or_else(missing_table)
        .unwrap()
        .iter()
        .map(|r| ExecutionRow {
            id: r.get(0),
            job_name: r.get(1),
            task_id: r.get(2),
            hostname: r.get(3),
            ip: r.get(4),
            sharding_item: r.get(5),
            execution_source: r.get(6),
            failure_cause: r.get(7),
            is_success: r.get(8),
            start_time: r.get(9),
            complete_time: r.get(10),
        })
        .collect()
}

/// No rows from a table that does not exist (yet); any other error stands.
fn missing_table(
    e: tokio_postgres::Error,
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) {
        Ok(Vec::new())
    } else {
        Err(e)
    }
}

/// The status rows of `task_id` in the order they were written (rows of one millisecond in
/// the order of their states); empty while the table does not exist yet.
async fn status_rows(client: &tokio_postgres::Client, task_id: &str) -> Vec<StatusRow> {
    let mut rows: Vec<StatusRow> = client
        .query(
            "SELECT id, job_name, original_task_id, task_id, slave_id, source, execution_type, \
             sharding_item, state, message, creation_time \
             FROM job_status_trace_log WHERE task_id = $1 ORDER BY creation_time",
            &[&task_id],
        )
        .await
        .or_else(missing_table)
        .unwrap()
        .iter()
        .map(|r| StatusRow {
            id: r.get(0),
            job_name: r.get(1),
            original_task_id: r.get(2),
            task_id: r.get(3),
            slave_id: r.get(4),
            source: r.get(5),
            execution_type: r.get(6),
            sharding_item: r.get(7),
            state: r.get(8),
            message: r.get(9),
            creation_time: r.get(10),
        })
        .collect();
    let rank = |state: &str| {
        [
            "TASK_STAGING",
            "TASK_RUNNING",
            "TASK_FINISHED",
            "TASK_ERROR",
        ]
        .iter()
        .position(|s| *s == state)
    };
    rows.sort_by_key(|r| (r.creation_time, rank(&r.state)));
    rows
}

/// The rows of `task_id` not in `seen`, once there are `executions` execution rows and
/// `statuses` status rows of them.
async fn new_rows(
    client: &tokio_postgres::Client,
    task_id: &str,
    seen: &BTreeSet<String>,
    executions: usize,
    statuses: usize,
) -> (Vec<ExecutionRow>, Vec<StatusRow>) {
    let found = common::eventually(WAIT, || async {
        let e: Vec<ExecutionRow> = execution_rows(client, task_id)
            .await
            .into_iter()
            .filter(|r| !seen.contains(&r.id))
            .collect();
        let s: Vec<StatusRow> = status_rows(client, task_id)
            .await
            .into_iter()
            .filter(|r| !seen.contains(&r.id))
            .collect();
        (e.len() == executions && s.len() == statuses).then_some((e, s))
    })
    .await;
    match found {
        Some(rows) => rows,
        None => panic!(
            "task {task_id}: wanted {executions} new execution rows and {statuses} status rows; \
             have {:#?}\n{:#?}",
            execution_rows(client, task_id).await,
            status_rows(client, task_id).await
        ),
    }
}

/// Runs `job` once through the Admin API; the trigger the worker got.
async fn trigger(car: &Sidecar, w: &TestWorker, job: &str) -> Trigger {
    let mut admin = AdminServiceClient::connect(car.endpoint()).await.unwrap();
    admin
        .trigger_job(TriggerJobRequest {
            job_name: job.into(),
        })
        .await
        .expect("TriggerJob");
    w.next_trigger(WAIT).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Local wall-clock time now, at millisecond precision (as the tables keep it).
fn local_now() -> NaiveDateTime {
    let t = chrono::Local::now().naive_local();
    t.with_nanosecond(t.nanosecond() / 1_000_000 * 1_000_000)
        .unwrap()
}

fn hostname() -> String {
    nix::unistd::gethostname().unwrap().into_string().unwrap()
}

/// Checks a time: present, at millisecond precision, within `[from, to]`.
fn within(t: Option<NaiveDateTime>, from: NaiveDateTime, to: NaiveDateTime) -> NaiveDateTime {
    let t = t.expect("a time");
    assert_eq!(
        t.nanosecond() % 1_000_000,
        0,
        "{t}: milliseconds, as Java's Date"
    );
    assert!(from <= t && t <= to, "{t} not within [{from}, {to}]");
    t
}

fn assert_uuid(id: &str) {
    assert_eq!(id.len(), 36, "{id}");
    assert_eq!(
        id.split('-').map(str::len).collect::<Vec<_>>(),
        [8, 4, 4, 4, 12],
        "{id}"
    );
    assert_eq!(id, id.to_lowercase());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completed_and_a_failed_execution_leave_elasticjobs_rows() {
    let pg = Postgres::start().await;
    let car = Sidecar::start(options(&pg, None, "127.0.0.2")).await;
    let client = pg.client().await;
    let w = TestWorker::subscribe(
        &car.endpoint(),
        subscribe_request(job_config("orders", NEVER, 2)),
    )
    .await
    .unwrap();
    w.wait_items(|items| items.len() == 2, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let task_id = format!("orders@-@0,1@-@READY@-@{}", w.instance_id());

    // A completed execution.
    let from = local_now();
    let t = trigger(&car, &w, "orders").await;
    assert_eq!(t.task_id, task_id);
    w.complete(&t.execution_id, &[0, 1]).await.unwrap();
    let (executions, statuses) = new_rows(&client, &task_id, &BTreeSet::new(), 2, 3).await;
    let to = local_now();
    for (row, item) in executions.iter().zip([0, 1]) {
        assert_uuid(&row.id);
        let start = within(row.start_time, from, to);
        let complete = within(row.complete_time, start, to);
        assert_eq!(
            row,
            &ExecutionRow {
                id: row.id.clone(),
                job_name: "orders".into(),
                task_id: task_id.clone(),
                hostname: hostname(),
                ip: "127.0.0.2".into(),
                sharding_item: item,
                execution_source: "NORMAL_TRIGGER".into(),
                failure_cause: None,
                is_success: true,
                start_time: Some(start),
                complete_time: Some(complete),
            }
        );
    }
    let status = |row: &StatusRow, state: &str, message: &str| StatusRow {
        id: row.id.clone(),
        job_name: "orders".into(),
        original_task_id: String::new(),
        task_id: task_id.clone(),
        slave_id: "127.0.0.2".into(),
        source: "LITE_EXECUTOR".into(),
        execution_type: "READY".into(),
        sharding_item: "[0, 1]".into(),
        state: state.into(),
        message: Some(message.into()),
        creation_time: row.creation_time,
    };
    let want = [
        ("TASK_STAGING", "Job 'orders' execute begin."),
        ("TASK_RUNNING", ""),
        ("TASK_FINISHED", ""),
    ];
    let mut previous = from;
    for (row, (state, message)) in statuses.iter().zip(want) {
        assert_uuid(&row.id);
        previous = within(row.creation_time, previous, to);
        assert_eq!(row, &status(row, state, message));
    }
    // The items ran between RUNNING and FINISHED.
    assert!(statuses[1].creation_time <= executions[0].start_time);
    assert!(executions[1].complete_time <= statuses[2].creation_time);

    // A failed execution: item 1 fails, item 0 completes.
    let seen: BTreeSet<String> = executions
        .iter()
        .map(|r| r.id.clone())
        .chain(statuses.iter().map(|r| r.id.clone()))
        .collect();
    let from = local_now();
    let t = trigger(&car, &w, "orders").await;
    w.complete(&t.execution_id, &[0]).await.unwrap();
    w.report_failure(&t.execution_id, 1, "java.io.IOException: disk full")
        .await
        .unwrap();
    let (executions, statuses) = new_rows(&client, &task_id, &seen, 2, 3).await;
    let to = local_now();
    let by_item = |item: i32| executions.iter().find(|r| r.sharding_item == item).unwrap();
    let ok = by_item(0);
    assert!(ok.is_success);
    assert_eq!(ok.failure_cause, None);
    let failed = by_item(1);
    let start = within(failed.start_time, from, to);
    let complete = within(failed.complete_time, start, to);
    assert_eq!(
        failed,
        &ExecutionRow {
            id: failed.id.clone(),
            job_name: "orders".into(),
            task_id: task_id.clone(),
            hostname: hostname(),
            ip: "127.0.0.2".into(),
            sharding_item: 1,
            execution_source: "NORMAL_TRIGGER".into(),
            failure_cause: Some("java.io.IOException: disk full".into()),
            is_success: false,
            start_time: Some(start),
            complete_time: Some(complete),
        }
    );
    let want = [
        ("TASK_STAGING", "Job 'orders' execute begin."),
        ("TASK_RUNNING", ""),
        ("TASK_ERROR", "{1=java.io.IOException: disk full}"),
    ];
    let mut previous = from;
    for (row, (state, message)) in statuses.iter().zip(want) {
        previous = within(row.creation_time, previous, to);
        assert_eq!(row, &status(row, state, message));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sidecar_started_while_postgresql_is_down_coordinates_and_writes_once_it_is_back() {
    let mut pg = Postgres::start().await;
    pg.stop().await;
    let zk = ZooKeeper::start().await;
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let mut o = options(&pg, Some(&zk), "127.0.0.2");
    o.extra_args.extend([
        "--metrics-listen".into(),
        metrics_addr.clone(),
        "--shutdown-grace".into(),
        "3s".into(),
    ]);
    let mut car = Sidecar::start(o).await;
    assert!(
        car.log().contains("the tracing database is unreachable"),
        "{}",
        car.log_tail(20)
    );
    let w = TestWorker::subscribe(
        &car.endpoint(),
        subscribe_request(job_config("billing", NEVER, 2)),
    )
    .await
    .unwrap();
    w.set_auto_complete(true);
    w.wait_items(|items| items.len() == 2, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Work goes on: two executions, each answered and recorded in ZooKeeper.
    for _ in 0..2 {
        let t = trigger(&car, &w, "billing").await;
        common::eventually(WAIT, || async {
            w.auto_completed()
                .iter()
                .any(|(id, r)| *id == t.execution_id && r.is_ok())
                .then_some(())
        })
        .await
        .expect("the execution was completed");
    }
    let m = scrape(&metrics_addr).await;
    assert_eq!(
        metric(&m, "shardcar_tracing_rows_total{outcome=\"written\"}"),
        0.0
    );
    assert_eq!(
        metric(&m, "shardcar_tracing_rows_total{outcome=\"dropped\"}"),
        0.0
    );

    // PostgreSQL comes back: the queued executions are written (tables created first).
    pg.start_again().await;
    let client = pg.client().await;
    let task_id = format!("billing@-@0,1@-@READY@-@{}", w.instance_id());
    let (executions, statuses) = new_rows(&client, &task_id, &BTreeSet::new(), 4, 6).await;
    assert!(executions.iter().all(|r| r.is_success));
    let states: Vec<&str> = statuses.iter().map(|s| s.state.as_str()).collect();
    assert_eq!(
        states.iter().filter(|s| **s == "TASK_FINISHED").count(),
        2,
        "{states:?}"
    );
    let m = common::eventually(WAIT, || async {
        let m = scrape(&metrics_addr).await;
        (metric(&m, "shardcar_tracing_rows_total{outcome=\"written\"}") == 10.0).then_some(m)
    })
    .await
    .expect("10 rows counted as written");
    assert_eq!(
        metric(&m, "shardcar_tracing_rows_total{outcome=\"dropped\"}"),
        0.0
    );
    assert_eq!(
        metric(&m, "shardcar_tracing_rows_total{outcome=\"rejected\"}"),
        0.0
    );
    assert!(
        car.log().contains("the tracing database is back"),
        "{}",
        car.log_tail(20)
    );

    // Down again at shutdown: the sidecar does not wait for it beyond its grace.
    pg.stop().await;
    let t = trigger(&car, &w, "billing").await;
    common::eventually(WAIT, || async {
        w.auto_completed()
            .iter()
            .any(|(id, _)| *id == t.execution_id)
            .then_some(())
    })
    .await
    .expect("the execution was completed");
    let stopping = std::time::Instant::now();
    car.terminate();
    let status = car
        .wait_exit(Duration::from_secs(8))
        .await
        .unwrap_or_else(|| panic!("no exit within 8 s of SIGTERM\n{}", car.log_tail(30)));
    assert!(status.success(), "{status}\n{}", car.log_tail(30));
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "exit took {:?} with a 3 s grace",
        stopping.elapsed()
    );
    assert!(
        car.log().contains("tracing rows not written"),
        "{}",
        car.log_tail(30)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tracing_db_that_cannot_be_used_exits_64_naming_the_setting() {
    let pg = Postgres::start().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let run = |url: String| {
        vec![
            "run".to_string(),
            "--listen".into(),
            listen.clone(),
            "--tracing-db".into(),
            url,
        ]
    };
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        &dir,
        "shardcar.toml",
        "tracing_db = \"postgresql://shardcar@/elasticjob\"\n",
    );
    let wrong_password = pg.url_for(USER, "not-the-password", DATABASE);
    let no_database = pg.url_for(USER, PASSWORD, "nosuch");
    /// Arguments, variables, and the last line of stderr.
    type Case<'a> = (Vec<String>, Vec<(&'a str, String)>, String);
    let cases: Vec<Case> = vec![
        (
            run("mysql://shardcar:hunter2@db:3306/elasticjob".into()),
            vec![],
            "shardcar: invalid setting --tracing-db: must be a PostgreSQL URL like \
             postgres://user:password@host:5432/db\n"
                .into(),
        ),
        (
            vec!["run".into(), "--listen".into(), listen.clone()],
            vec![(
                "SHARDCAR_TRACING_DB",
                "postgres://shardcar:hunter2@127.0.0.1:notaport/db".into(),
            )],
            "shardcar: invalid setting SHARDCAR_TRACING_DB: \
             postgres://shardcar:***@127.0.0.1:notaport/db is not a PostgreSQL URL like \
             postgres://user:password@host:5432/db: invalid connection string: invalid value for option `port`\n"
                .into(),
        ),
        (
            vec!["run".into(), "--listen".into(), listen.clone(), "--config".into(), file.clone()],
            vec![],
            format!(
                "shardcar: invalid setting tracing_db in {file}: postgresql://shardcar@/elasticjob \
                 names no host; write it like postgres://user:password@host:5432/db\n"
            ),
        ),
        (
            run(wrong_password),
            vec![],
            format!(
                "shardcar: invalid setting --tracing-db: PostgreSQL at 127.0.0.1:{} refused \
                 user shardcar: password authentication failed for user \"shardcar\"\n",
                pg.port()
            ),
        ),
        (
            run(no_database),
            vec![],
            format!(
                "shardcar: invalid setting --tracing-db: PostgreSQL at 127.0.0.1:{} refused \
                 user shardcar: database \"nosuch\" does not exist\n",
                pg.port()
            ),
        ),
    ];
    for (args, env, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = shardcar(&args, &env).await;
        assert_eq!(out.code, 64, "{args:?}: {}", out.stderr);
        // The last line is the message (a log line may come before it).
        let last = out.stderr.lines().last().unwrap_or_default();
        assert_eq!(format!("{last}\n"), want, "{args:?}: {}", out.stderr);
        for secret in ["hunter2", "not-the-password", PASSWORD] {
            assert!(!out.stderr.contains(secret), "{args:?}: {}", out.stderr);
        }
    }
}
