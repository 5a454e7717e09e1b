//! ElasticJob's tracing tables on a real PostgreSQL (`tracing_db`): the tables and their index
//! are created as ElasticJob's PostgreSQL dialect creates them, a completed and a failed
//! execution leave the rows an ElasticJob executor would, a sidecar started while the database
//! is down coordinates anyway and writes once it is back (and exits within its grace if the
//! database is down at shutdown), and a URL or login that cannot be used exits with 64, naming
//! the setting. `ctl executions` lists from the database every sidecar's executions and those
//! an ElasticJob process wrote there (rows written with ElasticJob's own statements), and
//! this sidecar's own history while the database is down. The facts compared against are ElasticJob 3.0.4's
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
/// A worker of a new job of `total` items on `car` that answers every trigger at once, holding
/// all the items.
async fn answering_worker(car: &Sidecar, job: &str, total: i32) -> TestWorker {
    let w = TestWorker::subscribe(
        &car.endpoint(),
        subscribe_request(job_config(job, NEVER, total)),
    )
    .await
    .unwrap();
    w.set_auto_complete(true);
    w.wait_items(|items| items.len() == total as usize, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    w
}

async fn trigger(car: &Sidecar, w: &TestWorker, job: &str) -> Trigger {
    let mut admin = AdminServiceClient::connect(car.endpoint()).await.unwrap();
    admin
        .trigger_job(TriggerJobRequest {
            job_name: job.into(),
            job_parameter: None,
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
    let w = answering_worker(&car, "billing", 2).await;
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

/// An ElasticJob process writing its tracing rows, with ElasticJob's own statements (3.0.4,
/// `META-INF/sql/PostgreSQL.properties`) in the order `RDBJobEventStorage` runs them: an
/// item's row inserted as it starts (`JOB_EXECUTION_LOG.INSERT`), then updated when it ends
/// (`UPDATE`, `UPDATE_FAILURE`); status rows inserted as they happen.
struct ElasticJobProcess<'a> {
    client: &'a tokio_postgres::Client,
    job: &'a str,
    /// `{job}@-@{items}@-@READY@-@{ip}@-@{pid}`.
    task_id: String,
    ip: &'a str,
}

impl ElasticJobProcess<'_> {
    async fn status(&self, state: &str, message: &str, items: &str, at: NaiveDateTime) {
        self.client
            .execute(
                "INSERT INTO JOB_STATUS_TRACE_LOG (id, job_name, original_task_id, task_id, \
                 slave_id, source, execution_type, sharding_item,  state, message, creation_time) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                &[
                    &uuid::Uuid::new_v4().to_string(),
                    &self.job,
                    &"",
                    &self.task_id,
                    &self.ip,
                    &"LITE_EXECUTOR",
                    &"READY",
                    &items,
                    &state,
                    &message,
                    &at,
                ],
            )
            .await
            .unwrap();
    }

    /// The row of an item that starts; its id.
    async fn item_started(&self, item: i32, source: &str, at: NaiveDateTime) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        self.client
            .execute(
                "INSERT INTO JOB_EXECUTION_LOG (id, job_name, task_id, hostname, ip, \
                 sharding_item, execution_source, is_success, start_time) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &id,
                    &self.job,
                    &self.task_id,
                    &"ej-host",
                    &self.ip,
                    &item,
                    &source,
                    &false,
                    &at,
                ],
            )
            .await
            .unwrap();
        id
    }

    async fn item_succeeded(&self, id: &str, at: NaiveDateTime) {
        self.client
            .execute(
                "UPDATE JOB_EXECUTION_LOG SET is_success = $1, complete_time = $2 WHERE id = $3",
                &[&true, &at, &id],
            )
            .await
            .unwrap();
    }

    async fn item_failed(&self, id: &str, at: NaiveDateTime, cause: &str) {
        self.client
            .execute(
                "UPDATE JOB_EXECUTION_LOG SET is_success = $1, complete_time = $2, \
                 failure_cause = $3 WHERE id = $4",
                &[&false, &at, &cause, &id],
            )
            .await
            .unwrap();
    }
}

/// A table time (local wall-clock) as the instant it stands for.
fn instant_of(t: NaiveDateTime) -> chrono::DateTime<chrono::Utc> {
    use chrono::TimeZone;
    chrono::Local
        .from_local_datetime(&t)
        .earliest()
        .unwrap()
        .with_timezone(&chrono::Utc)
}

/// `startedAt` of an execution in `ctl --json` output.
fn started_at(e: &Value) -> chrono::DateTime<chrono::Utc> {
    let text = e["startedAt"].as_str().unwrap_or_else(|| panic!("{e}"));
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&chrono::Utc)
}

/// `ctl executions --json ARGS` on `car`, once it lists `n` executions.
async fn executions_listed(car: &Sidecar, args: &[&str], n: usize) -> Vec<Value> {
    let target = car.addr().to_string();
    let mut all = vec!["executions"];
    all.extend_from_slice(args);
    let last = std::sync::Mutex::new(Vec::new());
    let found = common::eventually(WAIT, || {
        let (target, all, last) = (&target, &all, &last);
        async move {
            let list = ctl_json(target, all).await["executions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            *last.lock().unwrap() = list.clone();
            (list.len() == n).then_some(list)
        }
    })
    .await;
    found.unwrap_or_else(|| {
        panic!(
            "ctl executions {args:?}: wanted {n}, have {:#?}",
            last.lock().unwrap()
        )
    })
}

/// The trace of an ElasticJob item that threw, as ElasticJob stores it (`printStackTrace`).
const STACK_TRACE: &str = "java.io.IOException: disk full\n\tat com.example.Ledger.execute(Ledger.java:42)\n\tat org.apache.shardingsphere.elasticjob.simple.executor.SimpleJobExecutor.process(SimpleJobExecutor.java:32)\n";

#[tokio::test(flavor = "multi_thread")]
async fn ctl_executions_lists_every_sidecars_and_elasticjobs_executions_from_the_database() {
    let pg = Postgres::start().await;
    let zk = ZooKeeper::start().await;
    let (a, b) = tokio::join!(
        Sidecar::start(options(&pg, Some(&zk), "127.0.0.2")),
        Sidecar::start(options(&pg, Some(&zk), "127.0.0.3"))
    );
    let client = pg.client().await;

    // An ElasticJob process on another host wrote, as it does: a run a minute ago whose item 1
    // failed (its items' start times a millisecond apart), and a misfire catch-up half a
    // minute ago that has not ended; and a run of another job.
    let ej = ElasticJobProcess {
        client: &client,
        job: "ledger",
        task_id: "ledger@-@0,1@-@READY@-@10.9.9.9@-@4242".into(),
        ip: "10.9.9.9",
    };
    let ms = chrono::TimeDelta::milliseconds;
    let t0 = local_now() - chrono::TimeDelta::seconds(60);
    ej.status("TASK_STAGING", "Job 'ledger' execute begin.", "[0, 1]", t0)
        .await;
    ej.status("TASK_RUNNING", "", "[0, 1]", t0 + ms(3)).await;
    let i0 = ej.item_started(0, "NORMAL_TRIGGER", t0 + ms(5)).await;
    let i1 = ej.item_started(1, "NORMAL_TRIGGER", t0 + ms(6)).await;
    ej.item_succeeded(&i0, t0 + ms(200)).await;
    ej.item_failed(&i1, t0 + ms(250), STACK_TRACE).await;
    ej.status(
        "TASK_ERROR",
        &format!("{{1={STACK_TRACE}}}"),
        "[0, 1]",
        t0 + ms(251),
    )
    .await;
    let t1 = local_now() - chrono::TimeDelta::seconds(30);
    ej.status("TASK_RUNNING", "", "[0, 1]", t1).await;
    ej.item_started(0, "MISFIRE", t1 + ms(1)).await;
    ej.item_started(1, "MISFIRE", t1 + ms(1)).await;
    let other = ElasticJobProcess {
        client: &client,
        job: "other",
        task_id: "other@-@0@-@READY@-@10.9.9.9@-@4242".into(),
        ip: "10.9.9.9",
    };
    let t2 = local_now() - chrono::TimeDelta::seconds(20);
    let o = other.item_started(0, "NORMAL_TRIGGER", t2).await;
    other.item_succeeded(&o, t2 + ms(10)).await;

    // One worker on each sidecar, an item each; one trigger runs both.
    let wa = TestWorker::subscribe(
        &a.endpoint(),
        subscribe_request(job_config("ledger", NEVER, 2)),
    )
    .await
    .unwrap();
    let wb = TestWorker::subscribe(
        &b.endpoint(),
        subscribe_request(job_config("ledger", NEVER, 2)),
    )
    .await
    .unwrap();
    for w in [&wa, &wb] {
        w.set_auto_complete(true);
        w.wait_items(|items| items.len() == 1, WAIT)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut admin = AdminServiceClient::connect(a.endpoint()).await.unwrap();
    admin
        .trigger_job(TriggerJobRequest {
            job_name: "ledger".into(),
            job_parameter: None,
        })
        .await
        .expect("TriggerJob");
    let ta = wa.next_trigger(WAIT).await.unwrap();
    let tb = wb.next_trigger(WAIT).await.unwrap();

    // On sidecar b: both sidecars' executions, newest first, then ElasticJob's.
    let list = executions_listed(&b, &[], 5).await;
    let (sidecars, rest) = list.split_at(2);
    let by_instance = |w: &TestWorker| {
        sidecars
            .iter()
            .find(|e| e["instanceId"] == w.instance_id())
            .unwrap_or_else(|| panic!("no execution of {} in {list:#?}", w.instance_id()))
    };
    for (w, t) in [(&wa, &ta), (&wb, &tb)] {
        let e = by_instance(w);
        assert_eq!(e["jobName"], "ledger");
        assert_eq!(e["taskId"], t.task_id);
        assert_eq!(
            e["items"],
            serde_json::json!(t.items.iter().map(|i| i.item).collect::<Vec<_>>())
        );
        assert_eq!(e["outcome"], "EXECUTION_OUTCOME_COMPLETED", "{e:#}");
    }
    // b's own execution as its history has it (execution id, source, events); a's as the
    // table has it: ElasticJob's NORMAL_TRIGGER (no source on the wire), the row's id.
    let own = by_instance(&wb);
    assert_eq!(own["executionId"], tb.execution_id);
    assert_eq!(own["source"], "TRIGGER_SOURCE_MANUAL");
    assert!(
        own["events"].as_array().is_some_and(|e| !e.is_empty()),
        "{own:#}"
    );
    let peer = by_instance(&wa);
    assert_ne!(peer["executionId"], ta.execution_id);
    assert_uuid(peer["executionId"].as_str().unwrap());
    assert!(peer.get("source").is_none(), "{peer:#}");
    assert!(peer.get("events").is_none(), "{peer:#}");
    assert_eq!(
        peer["itemResults"][0]["outcome"],
        "EXECUTION_OUTCOME_COMPLETED"
    );

    assert_eq!(rest[0]["jobName"], "other");
    assert_eq!(started_at(&rest[0]), instant_of(t2));
    let running = &rest[1];
    assert_eq!(running["instanceId"], "10.9.9.9@-@4242");
    assert_eq!(running["taskId"], "ledger@-@0,1@-@READY@-@10.9.9.9@-@4242");
    assert_eq!(running["source"], "TRIGGER_SOURCE_MISFIRE");
    assert_eq!(running["items"], serde_json::json!([0, 1]));
    assert!(
        running.get("outcome").is_none(),
        "no outcome yet: {running:#}"
    );
    assert!(running.get("duration").is_none(), "{running:#}");
    assert!(
        running["error"]
            .as_str()
            .unwrap()
            .starts_with("no outcome recorded"),
        "{running:#}"
    );
    let failed = &rest[2];
    assert_eq!(failed["outcome"], "EXECUTION_OUTCOME_FAILED", "{failed:#}");
    assert_eq!(failed["error"], STACK_TRACE);
    assert_eq!(failed["items"], serde_json::json!([0, 1]));
    assert_eq!(started_at(failed), instant_of(t0 + ms(5)));
    assert_eq!(failed["duration"], "0.245s");
    assert_eq!(failed["executionId"], i0);
    assert_eq!(
        failed["itemResults"][0]["outcome"],
        "EXECUTION_OUTCOME_COMPLETED"
    );
    assert_eq!(
        failed["itemResults"][1]["outcome"],
        "EXECUTION_OUTCOME_FAILED"
    );
    assert_eq!(failed["itemResults"][1]["error"], STACK_TRACE);
    assert!(
        list.windows(2)
            .all(|w| started_at(&w[0]) >= started_at(&w[1])),
        "newest first: {list:#?}"
    );

    // On sidecar a, the same executions, a's own now with its execution id.
    let on_a = executions_listed(&a, &[], 5).await;
    assert!(on_a
        .iter()
        .any(|e| e["executionId"] == ta.execution_id && e["source"] == "TRIGGER_SOURCE_MANUAL"));
    // A job, a limit.
    let only_other = executions_listed(&b, &["other"], 1).await;
    assert_eq!(only_other[0]["jobName"], "other");
    let newest = executions_listed(&b, &["ledger", "--limit", "2"], 2).await;
    assert!(newest
        .iter()
        .all(|e| e["jobName"] == "ledger" && e["outcome"] == "EXECUTION_OUTCOME_COMPLETED"));
    // The table says where the executions come from and ElasticJob's source.
    let table = ctl(&b.addr().to_string(), &["executions"]).await.stdout;
    assert!(
        table.contains("NORMAL_TRIGGER") && table.contains("MISFIRE"),
        "{table}"
    );
    assert!(
        table.contains("(from the tracing database: the executions of every sidecar and ElasticJob process writing there)"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ctl_executions_falls_back_to_the_sidecars_own_history_while_the_database_is_down() {
    let mut pg = Postgres::start().await;
    let car = Sidecar::start(options(&pg, None, "127.0.0.2")).await;
    let target = car.addr().to_string();
    let client = pg.client().await;
    let w = answering_worker(&car, "audit", 1).await;
    let t = trigger(&car, &w, "audit").await;
    // An ElasticJob process's run of the same job, earlier.
    let ej = ElasticJobProcess {
        client: &client,
        job: "audit",
        task_id: "audit@-@0@-@READY@-@10.9.9.9@-@4242".into(),
        ip: "10.9.9.9",
    };
    let id = ej
        .item_started(
            0,
            "NORMAL_TRIGGER",
            local_now() - chrono::TimeDelta::seconds(10),
        )
        .await;
    ej.item_succeeded(&id, local_now()).await;
    let list = executions_listed(&car, &[], 2).await;
    assert_eq!(list[0]["executionId"], t.execution_id);
    assert_eq!(list[1]["instanceId"], "10.9.9.9@-@4242");

    // The database goes away: this sidecar's own history answers, and says so.
    pg.stop().await;
    let list = executions_listed(&car, &[], 1).await;
    assert_eq!(list[0]["executionId"], t.execution_id);
    assert_eq!(list[0]["outcome"], "EXECUTION_OUTCOME_COMPLETED");
    let table = ctl(&target, &["executions"]).await.stdout;
    assert!(
        table.contains("(this sidecar's own executions only: the tracing database could not be read, see the sidecar's log)"),
        "{table}"
    );
    let warning = "cannot read the execution history from the tracing database";
    assert_eq!(
        car.log().matches(warning).count(),
        1,
        "{}",
        car.log_tail(20)
    );

    // Back: the database answers again.
    pg.start_again().await;
    let list = executions_listed(&car, &[], 2).await;
    assert_eq!(list[1]["instanceId"], "10.9.9.9@-@4242");
    assert!(
        car.log().contains("the tracing database answers again"),
        "{}",
        car.log_tail(20)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_consoles_recent_executions_come_from_the_database_else_from_the_sidecar() {
    let mut pg = Postgres::start().await;
    let http = format!("127.0.0.1:{}", free_port());
    let mut o = options(&pg, None, "127.0.0.2");
    o.extra_args.extend(["--http-listen".into(), http.clone()]);
    let car = Sidecar::start(o).await;
    let client = pg.client().await;
    // The job exists (a worker created it); an ElasticJob process on another host ran it.
    let _w = TestWorker::subscribe(
        &car.endpoint(),
        subscribe_request(job_config("ledger", NEVER, 2)),
    )
    .await
    .unwrap();
    let ej = ElasticJobProcess {
        client: &client,
        job: "ledger",
        task_id: "ledger@-@0,1@-@READY@-@10.9.9.9@-@4242".into(),
        ip: "10.9.9.9",
    };
    let ms = chrono::TimeDelta::milliseconds;
    let t0 = local_now() - chrono::TimeDelta::seconds(60);
    let i0 = ej.item_started(0, "NORMAL_TRIGGER", t0).await;
    let i1 = ej.item_started(1, "NORMAL_TRIGGER", t0 + ms(1)).await;
    ej.item_succeeded(&i0, t0 + ms(200)).await;
    ej.item_failed(&i1, t0 + ms(250), STACK_TRACE).await;
    let page = || async {
        let url = format!("http://{http}/jobs/ledger");
        let response = reqwest::get(&url).await.unwrap();
        assert!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
        response.text().await.unwrap()
    };
    let html = page().await;
    assert!(
        html.contains("from the tracing database"),
        "{}",
        &html[html.find("Recent executions").unwrap_or(0)..]
    );
    let row = html
        .lines()
        .flat_map(|l| l.split("<tr "))
        .find(|r| r.contains("10.9.9.9@-@4242"))
        .unwrap_or_else(|| panic!("ElasticJob's run is not on the page: {html}"));
    assert!(
        row.contains("NORMAL_TRIGGER") && row.contains("failed"),
        "{row}"
    );
    assert!(row.contains("java.io.IOException: disk full"), "{row}");
    // The database gone: the sidecar's own history, and the page says so.
    pg.stop().await;
    let html = page().await;
    assert!(
        html.contains("the tracing database cannot be read"),
        "{}",
        &html[html.find("Recent executions").unwrap_or(0)..]
    );
    assert!(!html.contains("10.9.9.9@-@4242"));
}

/// Values ElasticJob's console reads with `valueOf`: `JobExecutionEvent.ExecutionSource`,
/// `JobStatusTraceEvent.Source` and `State` (3.0.4).
const EXECUTION_SOURCES: [&str; 3] = ["NORMAL_TRIGGER", "MISFIRE", "FAILOVER"];
const STATES: [&str; 4] = [
    "TASK_STAGING",
    "TASK_RUNNING",
    "TASK_FINISHED",
    "TASK_ERROR",
];

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_is_read_back_from_the_tables_with_its_source_and_attempt() {
    let pg = Postgres::start().await;
    // Two standalone sidecars on one database: A runs the job, B lists what A wrote.
    let a = Sidecar::start(options(&pg, None, "127.0.0.2")).await;
    let b = Sidecar::start(options(&pg, None, "127.0.0.3")).await;
    let client = pg.client().await;
    let mut config = job_config("payments", NEVER, 1);
    config.retry = Some(shardcar::proto::RetryPolicy {
        max_attempts: 3,
        initial_backoff: Some(prost_types::Duration {
            seconds: 0,
            nanos: 100_000_000,
        }),
        max_backoff: None,
        multiplier: 1.0,
    });
    let w = TestWorker::subscribe(&a.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    w.wait_items(|items| items.len() == 1, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let task_id = format!("payments@-@0@-@READY@-@{}", w.instance_id());

    // The first run and its first retry fail; the second retry completes. All three have the
    // same task id: the reader must tell them apart.
    let t = trigger(&a, &w, "payments").await;
    assert_eq!(t.task_id, task_id);
    let mut executions = vec![t.execution_id.clone()];
    w.report_failure(&t.execution_id, 0, "card declined")
        .await
        .unwrap();
    for attempt in 1..=2 {
        let t = w.next_trigger(WAIT).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (t.source, t.attempt, t.task_id.as_str()),
            (TriggerSource::Retry as i32, attempt, task_id.as_str())
        );
        executions.push(t.execution_id.clone());
        if attempt == 1 {
            w.report_failure(&t.execution_id, 0, "card declined again")
                .await
                .unwrap();
        } else {
            w.complete(&t.execution_id, &[0]).await.unwrap();
        }
    }
    let (rows, statuses) = new_rows(&client, &task_id, &BTreeSet::new(), 3, 9).await;

    // ElasticJob's values only, so its console reads every row; a retry is a FAILOVER to it.
    for r in &rows {
        assert!(
            EXECUTION_SOURCES.contains(&r.execution_source.as_str()),
            "{r:?}"
        );
    }
    for s in &statuses {
        assert!(STATES.contains(&s.state.as_str()), "{s:?}");
        assert_eq!(
            (s.source.as_str(), s.execution_type.as_str()),
            ("LITE_EXECUTOR", "READY")
        );
    }
    let sources: Vec<&str> = rows.iter().map(|r| r.execution_source.as_str()).collect();
    assert_eq!(sources, ["NORMAL_TRIGGER", "FAILOVER", "FAILOVER"]);
    // The retries' RUNNING rows name their attempt; Lite's message (empty) is kept otherwise.
    let running: Vec<Option<&str>> = statuses
        .iter()
        .filter(|s| s.state == "TASK_RUNNING")
        .map(|s| s.message.as_deref())
        .collect();
    assert_eq!(
        running,
        [
            Some(""),
            Some("shardcar retry, attempt 1"),
            Some("shardcar retry, attempt 2")
        ]
    );
    let states: Vec<&str> = statuses.iter().map(|s| s.state.as_str()).collect();
    assert_eq!(
        states,
        [
            "TASK_STAGING",
            "TASK_RUNNING",
            "TASK_ERROR",
            "TASK_STAGING",
            "TASK_RUNNING",
            "TASK_ERROR",
            "TASK_STAGING",
            "TASK_RUNNING",
            "TASK_FINISHED"
        ]
    );

    // B has none of them in its own history: it lists them from the tables, each retry with
    // its source and attempt, newest first.
    let listed = executions_listed(&b, &["payments"], 3).await;
    let got: Vec<(String, u64, String)> = listed
        .iter()
        .map(|e| {
            (
                e["source"].as_str().unwrap_or("(none)").to_string(),
                e["attempt"].as_u64().unwrap_or(0),
                e["outcome"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "TRIGGER_SOURCE_RETRY".to_string(),
                2,
                "EXECUTION_OUTCOME_COMPLETED".to_string()
            ),
            (
                "TRIGGER_SOURCE_RETRY".to_string(),
                1,
                "EXECUTION_OUTCOME_FAILED".to_string()
            ),
            // Lite's NORMAL_TRIGGER: no source on the wire, a first run.
            (
                "(none)".to_string(),
                0,
                "EXECUTION_OUTCOME_FAILED".to_string()
            ),
        ],
        "{listed:#?}"
    );
    for (e, row) in listed.iter().zip(rows.iter().rev()) {
        assert_eq!(e["executionId"], row.id.as_str(), "the row's id: {e:#}");
        assert_eq!(e["taskId"], task_id.as_str());
    }
    assert_eq!(listed[1]["error"], "card declined again");
    // ctl's table says the same.
    let table = ctl(&b.addr().to_string(), &["executions", "payments"])
        .await
        .stdout;
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let at = |name: &str| lines[0].iter().position(|h| *h == name).unwrap();
    let shown: Vec<(&str, &str)> = lines[1..4]
        .iter()
        .map(|l| (l[at("SOURCE")], l[at("ATTEMPT")]))
        .collect();
    assert_eq!(
        shown,
        [("RETRY", "2"), ("RETRY", "1"), ("NORMAL_TRIGGER", "0")],
        "{table}"
    );
    // A, which ran them, answers from its own history: the same sources and attempts, with
    // the execution ids its worker was sent.
    let own = executions_listed(&a, &["payments"], 3).await;
    let ids: Vec<&str> = own
        .iter()
        .map(|e| e["executionId"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        executions
            .iter()
            .rev()
            .map(String::as_str)
            .collect::<Vec<_>>()
    );
    assert_eq!(own[0]["source"], "TRIGGER_SOURCE_RETRY");
    assert_eq!(own[0]["attempt"], 2);
}
