//! Tests of the `config` codec against Java's exact output.

use super::*;
use crate::elasticjob::vectors;

/// What Java writes for `newBuilder("myJob", 3).cron("0/5 * * * * ?")`.
const TYPICAL: &str = "cron: 0/5 * * * * ?\ndescription: ''\ndisabled: false\nfailover: false\n\
jobName: myJob\njobParameter: ''\nmaxTimeDiffSeconds: -1\nmisfire: true\nmonitorExecution: true\n\
overwrite: false\nreconcileIntervalMinutes: 10\nshardingItemParameters: ''\nshardingTotalCount: 3\n\
staticSharding: false\n";

/// ElasticJob's `JobConfigurationPOJOTest` fixture.
const POJO_TEST: &str = "cron: 0/1 * * * * ?\ndescription: Job description\ndisabled: false\n\
failover: false\njobErrorHandlerType: IGNORE\njobExecutorServiceHandlerType: CPU\njobName: test_job\n\
jobParameter: param\njobShardingStrategyType: AVG_ALLOCATION\nmaxTimeDiffSeconds: -1\nmisfire: false\n\
monitorExecution: false\noverwrite: false\nprops:\n  key: value\nreconcileIntervalMinutes: 0\n\
shardingItemParameters: 0=A,1=B,2=C\nshardingTotalCount: 3\nstaticSharding: false\n";

const POJO_TEST_WITH_NULL: &str = "cron: 0/1 * * * * ?\ndisabled: false\nfailover: false\n\
jobName: test_job\nmaxTimeDiffSeconds: -1\nmisfire: false\nmonitorExecution: false\noverwrite: false\n\
reconcileIntervalMinutes: 0\nshardingTotalCount: 3\nstaticSharding: false\n";

#[test]
fn typical_java_output() {
    let mut c = JobConfiguration::new("myJob", 3);
    c.cron = Some("0/5 * * * * ?".into());
    assert_eq!(c.to_yaml(), TYPICAL);
    assert_eq!(JobConfiguration::from_yaml(TYPICAL.as_bytes()).unwrap(), c);
}

#[test]
fn every_vector_config_round_trips_and_rebuilds() {
    let mut seen = 0;
    for d in vectors::all_dumps() {
        let data = d.data(&format!("/{}/config", d.job)).expect("config node");
        let parsed = JobConfiguration::from_yaml(data.as_bytes()).unwrap();
        assert_eq!(
            parsed.to_yaml(),
            data,
            "{}: re-emitted config differs",
            d.file
        );

        let mut built = JobConfiguration::new(d.job.as_str(), d.total);
        built.cron = Some(
            if d.job == "runJob" {
                "0/10 * * * * ?"
            } else {
                "0/2 * * * * ?"
            }
            .into(),
        );
        built.job_sharding_strategy_type = d.strategy.clone();
        built.sharding_item_parameters = d.params.clone();
        built.failover = d.failover;
        assert_eq!(built.to_yaml(), data, "{}: built config differs", d.file);
        assert_eq!(built, parsed, "{}", d.file);
        assert_eq!(
            parsed.strategy().unwrap().as_str(),
            d.strategy.as_deref().unwrap_or("AVG_ALLOCATION")
        );
        seen += 1;
    }
    assert!(seen >= 10);
}

#[test]
fn elasticjob_pojo_fixture_round_trips() {
    let c = JobConfiguration::from_yaml(POJO_TEST.as_bytes()).unwrap();
    assert_eq!(c.description, "Job description");
    assert_eq!(c.job_error_handler_type.as_deref(), Some("IGNORE"));
    assert_eq!(
        c.job_executor_handler,
        Some(ExecutorHandler {
            key: ExecutorHandlerKey::ServiceHandler,
            value: "CPU".into()
        })
    );
    assert_eq!(c.props.get("key").map(String::as_str), Some("value"));
    assert!(!c.misfire && !c.monitor_execution);
    assert_eq!(c.reconcile_interval_minutes, 0);
    assert_eq!(c.to_yaml(), POJO_TEST);
}

#[test]
fn lenient_read_defaults() {
    let c = JobConfiguration::from_yaml(POJO_TEST_WITH_NULL.as_bytes()).unwrap();
    assert_eq!(c.job_parameter, "");
    assert_eq!(c.sharding_item_parameters, "");
    assert_eq!(c.description, "");
    assert!(c.job_sharding_strategy_type.is_none() && c.job_executor_handler.is_none());
    assert!(c.props.is_empty());

    let c = JobConfiguration::from_yaml(b"jobName: j\n").unwrap();
    assert!(!c.misfire && !c.monitor_execution && !c.failover && !c.disabled);
    assert_eq!(c.reconcile_interval_minutes, 0);
    assert_eq!(c.max_time_diff_seconds, -1);
    assert_eq!(c.sharding_total_count, 0);
    assert_eq!(c.cron, None);
    assert_eq!(c.cron_expression(), None);

    // '' in *Type keys (3.0.0, the UI) means "use the default"; unknown keys are dropped.
    let c = JobConfiguration::from_yaml(
        b"jobName: j\njobShardingStrategyType: ''\njobErrorHandlerType: ''\n\
          jobExecutorThreadPoolSizeProviderType: ''\nsomethingNew: 1\nmisfire: yes\nfailover: On\n\
          shardingTotalCount: '0x10'\ncron: ''\n",
    )
    .unwrap();
    assert_eq!(c.job_sharding_strategy_type, None);
    assert_eq!(c.job_error_handler_type, None);
    assert_eq!(c.job_executor_handler, None);
    assert_eq!(c.strategy().unwrap(), StrategyType::AvgAllocation);
    assert!(c.misfire && c.failover);
    assert_eq!(c.sharding_total_count, 16);
    assert_eq!(c.cron.as_deref(), Some(""));
    assert_eq!(c.cron_expression(), None);
    assert!(!c.to_yaml().contains("somethingNew"));
    assert!(c.to_yaml().starts_with("cron: ''\n"));

    // Plain scalars keep their text in string keys.
    let c = JobConfiguration::from_yaml(b"jobName: 123\njobParameter: 0o17\ndescription: true\n")
        .unwrap();
    assert_eq!(c.job_name, "123");
    assert_eq!(c.job_parameter, "0o17");
    assert_eq!(c.description, "true");
    assert!(c.to_yaml().contains("jobName: '123'\n"));
    assert!(c.to_yaml().contains("description: 'true'\n"));
}

#[test]
fn read_errors_name_the_problem() {
    let e = JobConfiguration::from_yaml(b"cron: x\n").unwrap_err();
    assert!(e.to_string().contains("jobName"), "{e}");
    let e = JobConfiguration::from_yaml(b"- a\n").unwrap_err();
    assert!(matches!(e, LayoutError::Yaml { .. }), "{e}");
    let e = JobConfiguration::from_yaml(b"jobName: j\nfailover: maybe\n").unwrap_err();
    assert!(
        e.to_string().contains("failover") && e.to_string().contains("maybe"),
        "{e}"
    );
    let e = JobConfiguration::from_yaml(b"jobName: j\nshardingTotalCount: many\n").unwrap_err();
    assert!(e.to_string().contains("shardingTotalCount"), "{e}");
    let e =
        JobConfiguration::from_yaml(b"jobName: j\nshardingTotalCount: 99999999999\n").unwrap_err();
    assert!(e.to_string().contains("32-bit"), "{e}");
    let e = JobConfiguration::from_yaml(&[0xff, 0xfe]).unwrap_err();
    assert!(matches!(e, LayoutError::Yaml { .. }), "{e}");
}

#[test]
fn executor_key_is_written_back_as_read() {
    for key in [
        "jobExecutorServiceHandlerType",
        "jobExecutorThreadPoolSizeProviderType",
    ] {
        let mut c = JobConfiguration::new("j", 1);
        c.cron = Some("0 * * * * ?".into());
        let text = c.to_yaml().replace(
            "jobName: j\n",
            &format!("{key}: SINGLE_THREAD\njobName: j\n"),
        );
        let parsed = JobConfiguration::from_yaml(text.as_bytes()).unwrap();
        assert_eq!(
            parsed.job_executor_handler.as_ref().unwrap().key.yaml_key(),
            key
        );
        assert_eq!(parsed.to_yaml(), text);
    }
}

#[test]
fn extra_configurations_and_listeners_are_kept_verbatim() {
    let text = "cron: 0/2 * * * * ?\ndescription: ''\ndisabled: false\nfailover: false\n\
jobErrorHandlerType: LOG\n\
jobExtraConfigurations:\n\
- !!org.apache.shardingsphere.elasticjob.tracing.yaml.YamlTracingConfiguration\n\
\x20 tracingStorageConfiguration:\n\
\x20   dataSourceClassName: com.zaxxer.hikari.HikariDataSource\n\
\x20   props:\n\
\x20     jdbcUrl: jdbc:h2:mem:job_event_storage\n\
\x20 type: RDB\n\
jobListenerTypes:\n- LOG\n- 'x: y'\n\
jobName: j\njobParameter: ''\nmaxTimeDiffSeconds: -1\nmisfire: true\nmonitorExecution: true\n\
overwrite: false\nreconcileIntervalMinutes: 10\nshardingItemParameters: ''\nshardingTotalCount: 1\n\
staticSharding: false\ntimeZone: GMT+08:00\n";
    let c = JobConfiguration::from_yaml(text.as_bytes()).unwrap();
    assert_eq!(c.job_listener_types, ["LOG", "x: y"]);
    assert!(c
        .job_extra_configurations
        .as_deref()
        .unwrap()
        .contains("type: RDB\n"));
    assert_eq!(c.time_zone.as_deref(), Some("GMT+08:00"));
    assert_eq!(c.to_yaml(), text);
}

#[test]
fn values_are_quoted_as_snakeyaml_does_and_read_back() {
    let cases = [
        ("a: b", "'a: b'"),
        ("x #y", "'x #y'"),
        ("true", "'true'"),
        ("null", "'null'"),
        ("42", "'42'"),
        ("3.5", "'3.5'"),
        ("*star", "'*star'"),
        ("它的描述", "它的描述"),
        ("it's", "it's"),
        ("'q'", "'''q'''"),
        ("tab\tx", "\"tab\\tx\""),
        ("two\nlines", "|-\n  two\n  lines"),
    ];
    for (value, written) in cases {
        let mut c = JobConfiguration::new("j", 1);
        c.description = value.to_owned();
        c.job_parameter = value.to_owned();
        let yaml = c.to_yaml();
        assert!(
            yaml.contains(&format!("description: {written}\n")),
            "{value:?}:\n{yaml}"
        );
        let back = JobConfiguration::from_yaml(yaml.as_bytes()).unwrap();
        assert_eq!(back.description, value);
        assert_eq!(back.job_parameter, value);
        assert_eq!(back, c);
    }
}

#[test]
fn props_follow_javas_hash_order() {
    let mut c = JobConfiguration::new("j", 1);
    for (k, v) in [("a", "1"), ("p", "2"), ("z", "3")] {
        c.props.insert(k.into(), v.into());
    }
    // buckets: "p" 112 & 15 = 0, "a" 97 & 15 = 1, "z" 122 & 15 = 10
    assert!(
        c.to_yaml()
            .contains("props:\n  p: '2'\n  a: '1'\n  z: '3'\n"),
        "{}",
        c.to_yaml()
    );
    let back = JobConfiguration::from_yaml(c.to_yaml().as_bytes()).unwrap();
    assert_eq!(back.to_yaml(), c.to_yaml());

    // Colliding keys keep the order they were read in.
    let colliding = "jobName: j\nprops:\n  q: x\n  a: y\n"; // 113 & 15 = 1 = 97 & 15
    let c = JobConfiguration::from_yaml(colliding.as_bytes()).unwrap();
    assert!(
        c.to_yaml().contains("props:\n  q: x\n  a: y\n"),
        "{}",
        c.to_yaml()
    );

    // Many keys force resizes; every key is still written once.
    let mut c = JobConfiguration::new("j", 1);
    for i in 0..40 {
        c.props.insert(format!("key{i}"), format!("v{i}"));
    }
    let back = JobConfiguration::from_yaml(c.to_yaml().as_bytes()).unwrap();
    assert_eq!(back.props, c.props);
    assert_eq!(back.to_yaml(), c.to_yaml());
}

#[test]
fn item_parameters_follow_elasticjob_rules() {
    let parse = |s: &str| {
        let mut c = JobConfiguration::new("j", 3);
        c.sharding_item_parameters = s.to_owned();
        c.item_parameters()
    };
    let ok = |pairs: &[(i32, &str)]| -> BTreeMap<i32, String> {
        pairs.iter().map(|(i, p)| (*i, p.to_string())).collect()
    };
    assert_eq!(parse("").unwrap(), ok(&[]));
    assert_eq!(
        parse("0=A,1=B,2=C").unwrap(),
        ok(&[(0, "A"), (1, "B"), (2, "C")])
    );
    assert_eq!(parse(" 0 = A , 1=B ").unwrap(), ok(&[(0, "A"), (1, "B")]));
    assert_eq!(parse("0=a,").unwrap(), ok(&[(0, "a")]));
    assert_eq!(parse("0=a,0=b").unwrap(), ok(&[(0, "b")]));
    assert_eq!(parse("+1=x,-1=y").unwrap(), ok(&[(-1, "y"), (1, "x")]));
    for (bad, entry) in [
        ("0=a,,1=b", ""),
        ("0=", "0="),
        ("=a", "=a"),
        ("0=a=b", "0=a=b"),
        ("x=1", "x=1"),
        ("0:a", "0:a"),
        ("99999999999=a", "99999999999=a"),
    ] {
        match parse(bad) {
            Err(LayoutError::ItemParameters { entry: e, .. }) => assert_eq!(e, entry, "{bad}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    let err = parse("0=a,x=1").unwrap_err().to_string();
    assert!(err.contains("\"x=1\"") && err.contains("integer"), "{err}");
    let params = ok(&[(0, "a"), (1, "b"), (10, "c")]);
    assert_eq!(format_item_parameters(&params), "0=a,1=b,10=c");
    assert_eq!(parse(&format_item_parameters(&params)).unwrap(), params);
}

#[test]
fn strategies() {
    let mut c = JobConfiguration::new("j", 1);
    assert_eq!(c.strategy().unwrap(), StrategyType::AvgAllocation);
    c.job_sharding_strategy_type = Some("ROUND_ROBIN".into());
    assert_eq!(c.strategy().unwrap(), StrategyType::RoundRobin);
    c.job_sharding_strategy_type = Some("SINGLE_SHARDING_BALANCE".into());
    let err = c.strategy().unwrap_err();
    assert!(matches!(err, LayoutError::UnknownStrategy(_)));
    assert!(err.to_string().contains("SINGLE_SHARDING_BALANCE"));
}
