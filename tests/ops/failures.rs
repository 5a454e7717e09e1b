//! Failure handling at the surfaces (#49, #50), with real ZooKeeper and sidecars: a retry
//! policy or an error handler that is out of range is refused wherever a job's config comes in
//! — `PutJob` (INVALID_ARGUMENT naming the field), `ctl job put` (exit 64) and the settings
//! file's `[[jobs]]` (exit 64 naming the setting) — and nothing reaches ZooKeeper.

use shardcar::proto::{JobConfig, PutJobRequest, RetryPolicy};
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
