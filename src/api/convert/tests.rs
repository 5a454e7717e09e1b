//! Tests of the wire config's validation and conversion: ElasticJob's builder defaults, every
//! field kept through a round trip, and each bad field named, as INVALID_ARGUMENT on the wire.

use super::*;

fn base() -> proto::JobConfig {
    proto::JobConfig {
        cron: "0/5 * * * * ?".into(),
        sharding_total_count: 3,
        ..Default::default()
    }
}

#[test]
fn defaults_match_elasticjob_builder() {
    let (c, _) = from_proto("myJob", &base(), false).unwrap();
    let java = "cron: 0/5 * * * * ?\ndescription: ''\ndisabled: false\nfailover: false\njobName: myJob\njobParameter: ''\nmaxTimeDiffSeconds: -1\nmisfire: true\nmonitorExecution: true\noverwrite: false\nreconcileIntervalMinutes: 10\nshardingItemParameters: ''\nshardingTotalCount: 3\nstaticSharding: false\n";
    assert_eq!(c.to_yaml(), java);
}

#[test]
fn round_trip_keeps_every_field() {
    let mut p = base();
    p.sharding_item_parameters = [(0, "a".to_string()), (2, "c".to_string())].into();
    p.sharding_strategy = proto::ShardingStrategy::RoundRobin as i32;
    p.misfire = Some(false);
    p.max_time_diff_seconds = Some(5);
    p.job_parameter = "x".into();
    p.execution_timeout_seconds = 9;
    let (c, extras) = from_proto("j", &p, false).unwrap();
    assert_eq!(c.sharding_item_parameters, "0=a,2=c");
    let back = to_proto(&c, &extras);
    assert_eq!(back.execution_timeout_seconds, 9);
    assert_eq!(back.sharding_item_parameters, p.sharding_item_parameters);
    assert_eq!(back.sharding_strategy, p.sharding_strategy);
    assert_eq!(back.misfire, Some(false));
    assert_eq!(back.max_time_diff_seconds, Some(5));
    assert_eq!(back.job_parameter, "x");
}

#[test]
fn invalid_fields_are_named() {
    type Mutation = fn(&mut proto::JobConfig);
    let cases: Vec<(Mutation, &str)> = vec![
        (
            |c| c.sharding_total_count = 0,
            "config.sharding_total_count",
        ),
        (
            |c| c.sharding_total_count = 100_001,
            "config.sharding_total_count",
        ),
        (|c| c.cron = "not a cron".into(), "config.cron"),
        (|c| c.time_zone = "Mars/Base".into(), "config.time_zone"),
        (|c| c.job_name = "other".into(), "config.job_name"),
        (
            |c| {
                c.sharding_item_parameters.insert(5, "x".into());
            },
            "config.sharding_item_parameters",
        ),
        (
            |c| {
                c.sharding_item_parameters.insert(0, "a,b".into());
            },
            "config.sharding_item_parameters",
        ),
        (|c| c.sharding_strategy = 9, "config.sharding_strategy"),
        (
            |c| c.max_time_diff_seconds = Some(-2),
            "config.max_time_diff_seconds",
        ),
        (
            |c| {
                c.resident = true;
                c.cron = "0/5 * * * * ?".into();
            },
            "config.cron",
        ),
        (
            |c| {
                c.resident = true;
                c.cron.clear();
                c.failover = true;
            },
            "config.failover",
        ),
        (
            |c| {
                c.resident = true;
                c.cron.clear();
                c.execution_timeout_seconds = 30;
            },
            "config.execution_timeout_seconds",
        ),
        (
            |c| c.job_error_handler_type = "PAGER".into(),
            "config.job_error_handler_type",
        ),
        (
            |c| {
                c.job_error_handler_type = "WEBHOOK".into();
                c.props.insert("webhook.url".into(), "ftp://alerts".into());
            },
            "config.props[\"webhook.url\"]",
        ),
        (
            |c| {
                c.job_error_handler_type = "EMAIL".into();
                for (k, v) in [
                    ("email.port", "465"),
                    ("email.username", "u"),
                    ("email.password", "p"),
                    ("email.from", "a@example.com"),
                    ("email.to", "b@example.com"),
                ] {
                    c.props.insert(k.into(), v.into());
                }
            },
            "config.props[\"email.host\"]",
        ),
    ];
    for (mutate, field) in cases {
        let mut c = base();
        mutate(&mut c);
        match from_proto("j", &c, false) {
            Err(CoordError::InvalidArgument { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected an error naming {field}, got {other:?}"),
        }
    }
    assert!(check_job_name("job_name", "a/b").is_err());
    assert!(check_job_name("job_name", "").is_err());
}

fn ms(ms: u64) -> Option<prost_types::Duration> {
    prost_types::Duration::try_from(Duration::from_millis(ms)).ok()
}

/// A policy of 3 runs, 200 ms doubling up to 1 min, changed by `mutate`.
fn with_retry(mutate: impl FnOnce(&mut proto::RetryPolicy)) -> proto::JobConfig {
    let mut retry = proto::RetryPolicy {
        max_attempts: 3,
        initial_backoff: ms(200),
        max_backoff: ms(60_000),
        multiplier: 2.0,
    };
    mutate(&mut retry);
    proto::JobConfig {
        retry: Some(retry),
        ..base()
    }
}

/// Each bad retry policy and error handler is INVALID_ARGUMENT on the wire, its
/// `BadRequest` naming the field and the message saying what would do.
#[test]
fn bad_retry_policies_and_error_handlers_are_invalid_arguments_naming_the_field() {
    let day = 24 * 60 * 60 * 1000;
    let with_props = |kind: &str, props: &[(&str, &str)]| proto::JobConfig {
        job_error_handler_type: kind.into(),
        props: props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..base()
    };
    let email = [
        ("email.port", "465"),
        ("email.username", "u"),
        ("email.password", "p"),
        ("email.from", "a@example.com"),
        ("email.to", "b@example.com"),
    ];
    let cases: Vec<(proto::JobConfig, &str, &str)> = vec![
        (
            with_retry(|r| r.max_attempts = 101),
            "config.retry.max_attempts",
            "at most 100",
        ),
        (
            with_retry(|r| r.initial_backoff = ms(9)),
            "config.retry.initial_backoff",
            "between 10ms and 1 day, got 9ms",
        ),
        (
            with_retry(|r| r.initial_backoff = ms(day + 1)),
            "config.retry.initial_backoff",
            "between 10ms and 1 day",
        ),
        (
            with_retry(|r| {
                r.initial_backoff = ms(100);
                r.max_backoff = ms(5);
            }),
            "config.retry.max_backoff",
            "between 10ms and 1 day, got 5ms",
        ),
        (
            with_retry(|r| r.max_backoff = ms(2 * day)),
            "config.retry.max_backoff",
            "between 10ms and 1 day, got 2days",
        ),
        (
            with_retry(|r| {
                r.initial_backoff = ms(10_000);
                r.max_backoff = ms(1_000);
            }),
            "config.retry.max_backoff",
            "must not be below initial_backoff",
        ),
        (
            with_retry(|r| {
                r.initial_backoff = Some(prost_types::Duration {
                    seconds: -1,
                    nanos: 0,
                })
            }),
            "config.retry.initial_backoff",
            "must not be negative",
        ),
        (
            with_retry(|r| r.multiplier = 0.5),
            "config.retry.multiplier",
            "between 1 and 10, got 0.5",
        ),
        (
            with_retry(|r| r.multiplier = 10.5),
            "config.retry.multiplier",
            "between 1 and 10, got 10.5",
        ),
        (
            with_retry(|r| r.multiplier = f64::NAN),
            "config.retry.multiplier",
            "between 1 and 10",
        ),
        (
            with_props("PAGER", &[]),
            "config.job_error_handler_type",
            "PAGER",
        ),
        (
            with_props(
                "WEBHOOK",
                &[("webhook.url", "ftp://alerts.example.com/hook")],
            ),
            "config.props[\"webhook.url\"]",
            "must be an http:// or https:// URL",
        ),
        (
            with_props("WEBHOOK", &[]),
            "config.props[\"webhook.url\"]",
            "is required by the WEBHOOK error handler",
        ),
        (
            with_props(
                "DINGTALK",
                &[("dingtalk.webhook", "oapi.dingtalk.com/robot")],
            ),
            "config.props[\"dingtalk.webhook\"]",
            "must be an http:// or https:// URL",
        ),
        (
            with_props("EMAIL", &email),
            "config.props[\"email.host\"]",
            "is required by the EMAIL error handler",
        ),
    ];
    for (config, field, says) in cases {
        let e =
            from_proto("j", &config, false).expect_err(&format!("{field}: {config:?} was taken"));
        let status = tonic::Status::from(e);
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{field}: {status}"
        );
        assert!(status.message().contains(field), "{field}: {status}");
        assert!(status.message().contains(says), "{field}: {status}");
        use tonic_types::StatusExt;
        let details = status.get_error_details();
        let violations = &details
            .bad_request()
            .expect("a BadRequest")
            .field_violations;
        assert_eq!(violations.len(), 1, "{field}");
        assert_eq!(violations[0].field, field);
    }
    // The edges are taken: 100 runs, 10 ms and 1 day, a multiplier of 1 and 10, and 0 or 1
    // runs mean no policy.
    for ok in [
        with_retry(|r| r.max_attempts = 100),
        with_retry(|r| r.initial_backoff = ms(10)),
        with_retry(|r| r.max_backoff = ms(day)),
        with_retry(|r| r.multiplier = 1.0),
        with_retry(|r| r.multiplier = 10.0),
    ] {
        let (_, extras) = from_proto("j", &ok, false).unwrap();
        assert!(extras.retry.is_some(), "{ok:?}");
    }
    for none in [
        with_retry(|r| r.max_attempts = 0),
        with_retry(|r| r.max_attempts = 1),
    ] {
        assert_eq!(from_proto("j", &none, false).unwrap().1.retry, None);
    }
}
