//! Failure handling at the surfaces (#49, #50), with real ZooKeeper and sidecars: a retry
//! policy or an error handler that is out of range is refused wherever a job's config comes in
//! — `PutJob` (INVALID_ARGUMENT naming the field), `ctl job put` (exit 64) and the settings
//! file's `[[jobs]]` (exit 64 naming the setting) — and nothing reaches ZooKeeper; a failed
//! item's retries show in `ctl executions` with their attempt and move the retry metrics; a
//! resident job's holds and its hand-off on a join show in `ctl job show` and move the hold
//! metrics.

use shardcar::proto::{DeclineRequest, JobConfig, PutJobRequest, RetryPolicy};
use tonic_types::StatusExt;

use super::*;

fn millis(ms: u64) -> Option<prost_types::Duration> {
    prost_types::Duration::try_from(Duration::from_millis(ms)).ok()
}

/// `max_attempts` runs in all, the first retry after `initial_ms`, then the same.
fn policy(max_attempts: u32, initial_ms: u64) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_backoff: millis(initial_ms),
        max_backoff: None,
        multiplier: 1.0,
    }
}

/// The nodes of `jobs` in `ns`, with their data.
async fn nodes_of(zk: &ZooKeeper, ns: &str, jobs: &[&str]) -> BTreeMap<String, String> {
    zk_tree(&zk.connect_string(), ns)
        .await
        .into_iter()
        .filter(|(path, _)| {
            jobs.iter().any(|job| {
                let root = format!("/{ns}/{job}");
                *path == root || path.starts_with(&format!("{root}/"))
            })
        })
        .map(|(path, (data, _))| (path, data))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_retry_policies_and_handlers_are_refused_everywhere_and_nothing_is_written() {
    let zk = ZooKeeper::start().await;
    let ns = "ops-refused";
    let car = Sidecar::start(SidecarOptions {
        namespace: ns.into(),
        ..SidecarOptions::zk(zk.connect_string(), "127.0.0.2")
    })
    .await;
    let mut admin = AdminServiceClient::connect(car.endpoint()).await.unwrap();
    // A job with a good policy: what a refused change must leave as it is.
    let mut good = job_config("payments", NEVER, 2);
    good.retry = Some(policy(3, 200));
    admin
        .put_job(PutJobRequest {
            config: Some(good.clone()),
        })
        .await
        .expect("a good policy is taken");
    let before = nodes_of(&zk, ns, &["payments", "fresh"]).await;
    assert!(
        before[&format!("/{ns}/payments/shardcar")].contains("maxAttempts: 3"),
        "{before:#?}"
    );

    // PutJob: each mistake is INVALID_ARGUMENT naming its field, for a job that exists and
    // for a new one.
    type Mutation = fn(&mut JobConfig);
    let cases: Vec<(Mutation, &str)> = vec![
        (
            |c| c.retry = Some(policy(101, 200)),
            "config.retry.max_attempts",
        ),
        (
            |c| c.retry = Some(policy(3, 5)),
            "config.retry.initial_backoff",
        ),
        (
            |c| c.retry = Some(policy(3, 25 * 60 * 60 * 1000)),
            "config.retry.initial_backoff",
        ),
        (
            |c| {
                c.retry = Some(RetryPolicy {
                    max_backoff: millis(100),
                    ..policy(3, 1000)
                })
            },
            "config.retry.max_backoff",
        ),
        (
            |c| {
                c.retry = Some(RetryPolicy {
                    multiplier: 11.0,
                    ..policy(3, 200)
                })
            },
            "config.retry.multiplier",
        ),
        (
            |c| c.job_error_handler_type = "PAGER".into(),
            "config.job_error_handler_type",
        ),
        (
            |c| {
                c.job_error_handler_type = "WEBHOOK".into();
                c.props
                    .insert("webhook.url".into(), "ftp://alerts.example.com".into());
            },
            "config.props[\"webhook.url\"]",
        ),
        (
            |c| {
                c.job_error_handler_type = "EMAIL".into();
                c.props.insert("email.from".into(), "a@example.com".into());
                c.props.insert("email.to".into(), "b@example.com".into());
            },
            "config.props[\"email.host\"]",
        ),
    ];
    for (mutate, field) in &cases {
        for job in ["payments", "fresh"] {
            let mut config = good.clone();
            config.job_name = job.into();
            mutate(&mut config);
            let refused = admin
                .put_job(PutJobRequest {
                    config: Some(config),
                })
                .await
                .expect_err(&format!("{job}: {field} was taken"));
            assert_eq!(
                refused.code(),
                tonic::Code::InvalidArgument,
                "{job} {field}: {refused}"
            );
            let details = refused.get_error_details();
            let violations = &details
                .bad_request()
                .unwrap_or_else(|| panic!("{field}: no BadRequest in {refused}"))
                .field_violations;
            assert_eq!(violations[0].field, *field, "{refused}");
            assert!(refused.message().contains(field), "{refused}");
        }
    }
    assert_eq!(
        nodes_of(&zk, ns, &["payments", "fresh"]).await,
        before,
        "a refused PutJob wrote to ZooKeeper"
    );

    // `ctl job put`: a bad policy in the YAML is a usage error (64) naming the field.
    let dir = tempfile::tempdir().unwrap();
    let target = car.addr().to_string();
    let files = [
        (
            "retry:\n  max_attempts: 101\n",
            "config.retry.max_attempts: must be at most 100",
        ),
        (
            "retry:\n  max_attempts: 3\n  initial_backoff: 5ms\n",
            "config.retry.initial_backoff: must be between 10ms and 1 day, got 5ms",
        ),
        (
            "retry:\n  max_attempts: 3\n  initial_backoff: soon\n",
            "retry.initial_backoff: \"soon\" is not a duration like 200ms or 1s",
        ),
        (
            "retry:\n  max_attempts: 3\n  initial_backoff: 10s\n  max_backoff: 1s\n",
            "config.retry.max_backoff: must not be below initial_backoff",
        ),
        (
            "retry:\n  max_attempts: 3\n  multiplier: 0.5\n",
            "config.retry.multiplier: must be between 1 and 10, got 0.5",
        ),
        (
            "retry:\n  max_attempts: 3\n  jitter: 1\n",
            "unknown field `jitter`",
        ),
        (
            "job_error_handler_type: DINGTALK\nprops:\n  dingtalk.webhook: file:///etc/passwd\n",
            "config.props[\"dingtalk.webhook\"]",
        ),
    ];
    for (i, (extra, says)) in files.iter().enumerate() {
        for job in ["payments", "fresh"] {
            let file = write_file(
                &dir,
                &format!("{job}-{i}.yaml"),
                &format!("job_name: {job}\ncron: \"{NEVER}\"\nsharding_total_count: 2\n{extra}"),
            );
            let out = shardcar(&["ctl", "--target", &target, "job", "put", &file], &[]).await;
            assert_eq!(out.code, 64, "{extra}: {}{}", out.stdout, out.stderr);
            assert!(out.stderr.contains(says), "{extra}: {}", out.stderr);
        }
    }
    assert_eq!(
        nodes_of(&zk, ns, &["payments", "fresh"]).await,
        before,
        "a refused job file was written"
    );

    // The settings file: a `[[jobs]]` table with a bad policy or handler stops the sidecar
    // before it starts (64), naming the table and the field; nothing is written.
    let tables = [
        (
            "[jobs.retry]\nmax_attempts = 3\ninitial_backoff = \"48h\"\n",
            "config.retry.initial_backoff: must be between 10ms and 1 day, got 2days",
        ),
        (
            "[jobs.retry]\nmax_attempts = 1000\n",
            "config.retry.max_attempts: must be at most 100 (runs in all, the first included), got 1000",
        ),
        (
            "job_error_handler_type = \"DINGTALK\"\n",
            "config.props[\"dingtalk.webhook\"]: is required by the DINGTALK error handler",
        ),
        (
            "job_error_handler_type = \"LOUD\"\n",
            "config.job_error_handler_type: \"LOUD\" is not an error handler type",
        ),
    ];
    for (i, (extra, says)) in tables.iter().enumerate() {
        let settings = write_file(
            &dir,
            &format!("shardcar-{i}.toml"),
            &format!(
                "[[jobs]]\njob_name = \"nightly\"\ncron = \"{NEVER}\"\nsharding_total_count = 2\n{extra}"
            ),
        );
        let out = shardcar(
            &[
                "run",
                "--zk",
                &zk.connect_string(),
                "--namespace",
                ns,
                "--advertise-ip",
                "127.0.0.3",
                "--listen",
                &format!("127.0.0.1:{}", free_port()),
                "--config",
                &settings,
            ],
            &[],
        )
        .await;
        assert_eq!(out.code, 64, "{extra}: {}", out.stderr);
        let last = out.stderr.lines().last().unwrap_or_default();
        let want = format!("shardcar: invalid setting jobs[0] (nightly) in {settings}: {says}");
        assert!(last.starts_with(&want), "{extra}:\n{last}\nwanted {want}");
    }
    assert!(
        nodes_of(&zk, ns, &["nightly"]).await.is_empty(),
        "a refused settings file created its job"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn retries_show_their_attempt_in_ctl_and_move_the_retry_metrics() {
    let http = format!("127.0.0.1:{}", free_port());
    let car = Sidecar::start(SidecarOptions {
        extra_args: vec!["--http-listen".into(), http.clone()],
        ..SidecarOptions::standalone()
    })
    .await;
    let target = car.addr().to_string();
    let mut config = job_config("flaky", NEVER, 1);
    config.retry = Some(policy(3, 50));
    let w = TestWorker::subscribe(&car.endpoint(), subscribe_request(config))
        .await
        .unwrap();
    w.wait_items(|i| i.len() == 1, WAIT).await.unwrap();

    // Twice: a run fails, its first retry fails, its second retry completes; then a run whose
    // three runs all fail.
    ctl(&target, &["trigger", "flaky"]).await;
    for (attempt, fails) in [(0, true), (1, true), (2, false)] {
        let t = w.next_trigger(WAIT).await.unwrap();
        assert_eq!(t.attempt, attempt);
        let source = if attempt == 0 {
            TriggerSource::Manual
        } else {
            TriggerSource::Retry
        };
        assert_eq!(t.source, source as i32);
        if fails {
            w.report_failure(&t.execution_id, 0, &format!("run {attempt} failed"))
                .await
                .unwrap();
        } else {
            w.complete(&t.execution_id, &[0]).await.unwrap();
        }
    }
    ctl(&target, &["trigger", "flaky"]).await;
    for attempt in 0..3 {
        let t = w.next_trigger(WAIT).await.unwrap();
        assert_eq!(t.attempt, attempt);
        w.report_failure(&t.execution_id, 0, "still failing")
            .await
            .unwrap();
    }
    let listed = common::eventually(WAIT, || async {
        let list = ctl_json(&target, &["executions", "flaky"]).await["executions"].clone();
        (list.as_array().map_or(0, Vec::len) == 6).then_some(list)
    })
    .await
    .expect("six executions in the history");
    // Newest first; a first run's attempt is 0, left out of the JSON as proto3 leaves zeros.
    let attempts: Vec<u64> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["attempt"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(attempts, [2, 1, 0, 2, 1, 0], "{listed:#}");
    let table = ctl(&target, &["executions", "flaky"]).await.stdout;
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let column = |name: &str| rows[0].iter().position(|h| *h == name).unwrap();
    let (source, attempt) = (column("SOURCE"), column("ATTEMPT"));
    let shown: Vec<(&str, &str)> = rows[1..].iter().map(|r| (r[source], r[attempt])).collect();
    assert_eq!(
        shown,
        [
            ("RETRY", "2"),
            ("RETRY", "1"),
            ("MANUAL", "0"),
            ("RETRY", "2"),
            ("RETRY", "1"),
            ("MANUAL", "0")
        ],
        "{table}"
    );

    // Four retries scheduled, one failure whose attempts ran out; four retries sent.
    let m = scrape(&http).await;
    assert_eq!(
        metric(&m, "shardcar_retries_total{job_name=\"flaky\"}"),
        4.0
    );
    assert_eq!(
        metric(&m, "shardcar_retries_exhausted_total{job_name=\"flaky\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &m,
            "shardcar_triggers_total{job_name=\"flaky\",source=\"RETRY\"}"
        ),
        4.0
    );
    assert_eq!(
        metric(&m, "shardcar_failures_total{job_name=\"flaky\"}"),
        5.0
    );
}

/// `ctl job show NAME` on `car`, once `check` accepts it.
async fn shown_when(car: &Sidecar, job: &str, check: impl Fn(&str) -> bool) -> String {
    let target = car.addr().to_string();
    let last = std::sync::Mutex::new(String::new());
    let found = common::eventually(WAIT, || {
        let (target, last, check) = (&target, &last, &check);
        async move {
            let text = ctl(target, &["job", "show", job]).await.stdout;
            *last.lock().unwrap() = text.clone();
            check(&text).then_some(text)
        }
    })
    .await;
    found.unwrap_or_else(|| {
        panic!(
            "ctl job show {job} never showed what was wanted:\n{}",
            last.lock().unwrap()
        )
    })
}

/// The `HELD BY` cell of item `item` in `ctl job show` output.
fn held_by(show: &str, item: i32) -> String {
    let items = show.split("\nItems\n").nth(1).unwrap_or_default();
    let mut lines = items.lines();
    let header = lines.next().unwrap_or_default();
    let at = header.find("HELD BY").unwrap_or_else(|| panic!("{show}"));
    let end = header.find("MISFIRE").unwrap_or(header.len());
    lines
        .find(|l| l.split_whitespace().next() == Some(&item.to_string()))
        .map(|l| {
            l.get(at..end.min(l.len()))
                .unwrap_or_default()
                .trim()
                .to_string()
        })
        .unwrap_or_else(|| panic!("no item {item} in\n{show}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resident_hand_off_shows_in_ctl_and_moves_the_hold_metrics() {
    let zk = ZooKeeper::start().await;
    let ns = "ops-resident";
    // A long session, so a revoked holder that does not let go keeps its lease (half the
    // session) long enough to be seen handing off.
    let start = |ip: &str| {
        let http = format!("127.0.0.1:{}", free_port());
        let options = SidecarOptions {
            namespace: ns.into(),
            session_timeout: Duration::from_secs(10),
            extra_args: vec!["--http-listen".into(), http.clone()],
            ..SidecarOptions::zk(zk.connect_string(), ip)
        };
        async move { (Sidecar::start(options).await, http) }
    };
    let (a, a_http) = start("127.0.0.2").await;
    let (b, b_http) = start("127.0.0.3").await;
    // Two items; a hold that its worker ends restarts after a minute (the retry policy's
    // backoff), long enough to be seen waiting.
    let config = JobConfig {
        resident: true,
        retry: Some(policy(3, 60_000)),
        ..job_config("feeds", "", 2)
    };
    // A's worker holds what it is given and answers nothing unless told to.
    let wa = TestWorker::subscribe(&a.endpoint(), subscribe_request(config.clone()))
        .await
        .unwrap();
    let held = common::eventually(WAIT, || async {
        let t = wa.triggers();
        (t.len() == 2).then_some(t)
    })
    .await
    .unwrap_or_else(|| panic!("A never held both items\n{}", wa.summary()));
    assert!(held
        .iter()
        .all(|(_, t)| t.source == TriggerSource::Resident as i32));
    let show = shown_when(&a, "feeds", |s| {
        held_by(s, 0) == wa.instance_id() && held_by(s, 1) == wa.instance_id()
    })
    .await;
    assert!(show.contains("  resident:    each item is held"), "{show}");
    let m = scrape(&a_http).await;
    assert_eq!(
        metric(&m, "shardcar_holds_started_total{job_name=\"feeds\"}"),
        2.0
    );
    assert_eq!(
        metric(&m, "shardcar_handoff_seconds_count{job_name=\"feeds\"}"),
        2.0
    );

    // B's worker joins: one item moves. A is revoked and, until it lets go, ctl shows the
    // hand-off; B holds the item once A has declined it.
    let wb = TestWorker::subscribe_strict(
        &b.endpoint(),
        subscribe_request(config.clone()),
        Duration::from_secs(3600),
    )
    .await
    .unwrap();
    let revoked = common::eventually(WAIT, || async {
        wa.revokes().first().map(|(_, r)| r.items.clone())
    })
    .await
    .unwrap_or_else(|| panic!("A was never revoked\n{}", wa.summary()));
    assert_eq!(revoked.len(), 1, "a join moves one of two items");
    let moved = revoked[0];
    let kept = 1 - moved;
    let handing_off = format!("{} (handing off to {})", wa.instance_id(), wb.instance_id());
    let show = shown_when(&b, "feeds", |s| held_by(s, moved) == handing_off).await;
    assert_eq!(held_by(&show, kept), wa.instance_id(), "{show}");
    assert!(wb.strict_runs().is_empty(), "B held it before A let go");
    let execution = held
        .iter()
        .find(|(_, t)| t.items.iter().any(|i| i.item == moved))
        .map(|(_, t)| t.execution_id.clone())
        .unwrap();
    wa.client()
        .decline(DeclineRequest {
            instance_id: wa.instance_id().into(),
            execution_id: execution,
            items: vec![moved],
            reason: "revoked".into(),
        })
        .await
        .expect("the decline is taken");
    shown_when(&a, "feeds", |s| held_by(s, moved) == wb.instance_id()).await;
    let runs = wb.strict_runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].items, [moved]);
    let m = scrape(&b_http).await;
    assert_eq!(
        metric(&m, "shardcar_holds_started_total{job_name=\"feeds\"}"),
        1.0
    );
    assert_eq!(
        metric(&m, "shardcar_handoff_seconds_count{job_name=\"feeds\"}"),
        1.0
    );
    assert!(metric(&m, "shardcar_handoff_seconds_sum{job_name=\"feeds\"}") > 0.0);

    // A's worker ends its other hold itself: the item is A's and not held until its restart
    // backoff has passed, and ctl says so instead of showing it held.
    let execution = held
        .iter()
        .find(|(_, t)| t.items.iter().any(|i| i.item == kept))
        .map(|(_, t)| t.execution_id.clone())
        .unwrap();
    wa.complete(&execution, &[kept]).await.unwrap();
    let show = shown_when(&a, "feeds", |s| held_by(s, kept) == "not held yet").await;
    assert!(
        show.contains("(not held yet: its hold starts on its owner at once, or once a restart backoff after its last hold has passed)"),
        "{show}"
    );
    let tree = zk_tree(&zk.connect_string(), ns).await;
    let restart = tree
        .get(&format!("/{ns}/feeds/shardcar/retries/{kept}"))
        .map(|(d, _)| d.clone())
        .unwrap_or_else(|| panic!("no pending restart in {tree:#?}"));
    assert!(restart.starts_with("attempt: 1\n"), "{restart}");
    assert_eq!(
        metric(
            &scrape(&a_http).await,
            "shardcar_holds_started_total{job_name=\"feeds\"}"
        ),
        2.0,
        "the restart waits for its backoff"
    );
}
