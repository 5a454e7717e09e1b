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
