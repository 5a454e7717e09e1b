//! Tests of `config.rs`.

use super::*;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn durations() {
    assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
    assert!(parse_duration("ten").is_err());
    assert!(parse_duration("5 parsecs").is_err());
    assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
    assert!(parse_duration("99999999999999999999h")
        .unwrap_err()
        .contains("too long"));
}

#[test]
fn flags_win_over_env_and_defaults_apply() {
    let flags = Flags {
        zk: Some("a:1".into()),
        advertise_ip: Some("10.0.0.5".into()),
        ..Flags::default()
    };
    let s = Settings::resolve(
        flags,
        &env(&[("SHARDCAR_ZK", "b:2"), ("SHARDCAR_NAMESPACE", "ns")]),
    )
    .unwrap();
    assert_eq!(s.zk.as_deref(), Some("a:1"));
    assert_eq!(s.namespace, "ns");
    assert_eq!(s.listen, DEFAULT_LISTEN);
    assert_eq!(s.session_timeout, Duration::from_secs(10));
    assert_eq!(s.lease, Duration::from_secs(5));
}

#[test]
fn bad_settings_are_named() {
    let ip = || Some("10.0.0.5".to_string());
    let cases: Vec<(Flags, HashMap<String, String>, &str)> = vec![
        (
            Flags {
                listen: Some("nowhere".into()),
                advertise_ip: ip(),
                ..Flags::default()
            },
            env(&[]),
            "--listen",
        ),
        (
            Flags {
                advertise_ip: Some("x".into()),
                ..Flags::default()
            },
            env(&[]),
            "--advertise-ip",
        ),
        (
            Flags {
                advertise_ip: ip(),
                ..Flags::default()
            },
            env(&[("SHARDCAR_SESSION_TIMEOUT", "1s")]),
            "SHARDCAR_SESSION_TIMEOUT",
        ),
        (
            Flags {
                advertise_ip: ip(),
                ..Flags::default()
            },
            env(&[("SHARDCAR_ZK", "nohostport")]),
            "SHARDCAR_ZK",
        ),
        (
            Flags {
                advertise_ip: ip(),
                log_format: Some("xml".into()),
                ..Flags::default()
            },
            env(&[]),
            "--log-format",
        ),
    ];
    for (flags, env, setting) in cases {
        assert_eq!(Settings::resolve(flags, &env).unwrap_err().setting, setting);
    }
}

fn file(text: &str) -> Result<FileSettings, SettingsError> {
    FileSettings::parse("/etc/shardcar.toml", text, "--config")
}

#[test]
fn file_is_the_last_layer() {
    let f = file(
        "zk = \"f:1\"\nnamespace = \"fromfile\"\nsession_timeout = 6\nmetrics_listen = \"127.0.0.1:9100\"\nhistory_size = 5\nadvertise_ip = \"10.0.0.9\"\n",
    )
    .unwrap();
    let flags = Flags {
        namespace: Some("fromflag".into()),
        ..Flags::default()
    };
    let s = Settings::resolve_layers(flags, &env(&[("SHARDCAR_ZK", "e:2")]), Some(f)).unwrap();
    assert_eq!(s.zk.as_deref(), Some("e:2"));
    assert_eq!(s.namespace, "fromflag");
    assert_eq!(s.session_timeout, Duration::from_secs(6));
    assert_eq!(s.lease, Duration::from_secs(3));
    assert_eq!(s.metrics_listen, Some("127.0.0.1:9100".parse().unwrap()));
    assert_eq!(s.history_size, 5);
    assert_eq!(s.advertise_ip, "10.0.0.9");
    assert_eq!(s.log_level, "info");
}

#[test]
fn bad_files_are_named() {
    let msg = |r: Result<FileSettings, SettingsError>| r.unwrap_err().to_string();
    assert_eq!(
        msg(file("zk = \"a:1\"\nlisten = [1]\n")),
        "invalid setting listen in /etc/shardcar.toml: must be a string or a number, not array"
    );
    assert_eq!(
        msg(file("session-timeout = \"3s\"\n")),
        "invalid setting session-timeout in /etc/shardcar.toml: is not a setting; write it as session_timeout"
    );
    assert!(msg(file("color = 1\n")).contains("is not a setting; known settings: zk, namespace"));
    assert!(msg(file("zk = \n"))
        .starts_with("invalid setting --config: /etc/shardcar.toml is not valid TOML (line 1)"));
    let f = file("session_timeout = \"1s\"\n").unwrap();
    let ip = Flags {
        advertise_ip: Some("10.0.0.5".into()),
        ..Flags::default()
    };
    assert_eq!(
        Settings::resolve_layers(ip.clone(), &env(&[]), Some(f))
            .unwrap_err()
            .to_string(),
        "invalid setting session_timeout in /etc/shardcar.toml: must be between 2s and 120s"
    );
    let missing = Flags {
        config: Some("/nonexistent/shardcar.toml".into()),
        ..ip.clone()
    };
    assert!(Settings::resolve(missing, &env(&[]))
        .unwrap_err()
        .to_string()
        .starts_with("invalid setting --config: cannot read /nonexistent/shardcar.toml"));
    let metrics = Flags {
        metrics_listen: Some("9090".into()),
        ..ip.clone()
    };
    assert_eq!(
        Settings::resolve(metrics, &env(&[])).unwrap_err().setting,
        "--metrics-listen"
    );
    let history = Flags {
        history_file: Some("/nonexistent/dir/h.jsonl".into()),
        ..ip.clone()
    };
    assert_eq!(
        Settings::resolve(history, &env(&[]))
            .unwrap_err()
            .to_string(),
        "invalid setting --history-file: the directory /nonexistent/dir does not exist"
    );
    let level = Flags {
        log_level: Some("shardcar=loud".into()),
        ..ip
    };
    assert_eq!(
        Settings::resolve(level, &env(&[])).unwrap_err().setting,
        "--log-level"
    );
    assert_eq!(
        Settings::resolve(
            Flags::default(),
            &env(&[
                ("SHARDCAR_HISTORY_SIZE", "-1"),
                ("SHARDCAR_ADVERTISE_IP", "10.0.0.1")
            ])
        )
        .unwrap_err()
        .setting,
        "SHARDCAR_HISTORY_SIZE"
    );
}

#[test]
fn the_example_file_names_every_setting_and_each_example_is_valid() {
    let text = example_file();
    // As printed, everything is commented out: the defaults.
    let empty = FileSettings::parse("example", &text, "--config").unwrap();
    let defaults = Settings::resolve_layers(Flags::default(), &env(&[]), Some(empty)).unwrap();
    assert_eq!(
        defaults,
        Settings::resolve(Flags::default(), &env(&[])).unwrap()
    );
    // Every setting is there, and with every line uncommented the file is valid as a whole.
    let uncommented: String = text
        .lines()
        .map(|l| {
            let bare = l.strip_prefix("# ").unwrap_or(l);
            if SETTINGS
                .iter()
                .any(|(k, ..)| bare.starts_with(&format!("{k} = ")))
            {
                bare.to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    for (key, ..) in SETTINGS {
        assert!(
            uncommented
                .lines()
                .any(|l| l.starts_with(&format!("{key} = "))),
            "{key} is missing from the example file"
        );
    }
    // (The example history file's directory is the package's; here, one that exists.)
    let tmp = std::env::temp_dir().join("history.jsonl");
    let uncommented = uncommented.replace(
        "\"/var/lib/shardcar/history.jsonl\"",
        &format!("{:?}", tmp.display().to_string()),
    );
    let all = FileSettings::parse("example", &uncommented, "--config").unwrap();
    let s = Settings::resolve_layers(Flags::default(), &env(&[]), Some(all)).unwrap();
    assert_eq!(s.zk.as_deref(), Some("zk1:2181,zk2:2181,zk3:2181"));
    assert_eq!(s.lease, Duration::from_secs(5));
}

#[test]
fn the_packaged_settings_file_is_the_example_file() {
    let packaged = include_str!("../scripts/deb/shardcar.toml");
    assert!(
        packaged == example_file(),
        "scripts/deb/shardcar.toml differs from `shardcar config`: regenerate it with\n  cargo run -q -- config > scripts/deb/shardcar.toml"
    );
}

#[test]
fn the_otlp_endpoint_comes_from_its_setting_else_the_standard_variables() {
    let resolve = |flags: Flags, pairs: &[(&str, &str)]| Settings::resolve(flags, &env(pairs));
    let none = resolve(Flags::default(), &[]).unwrap();
    assert_eq!(none.telemetry, None, "no endpoint: nothing exported");
    let standard = resolve(
        Flags::default(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_SERVICE_NAME", "payments-sidecar"),
        ],
    )
    .unwrap()
    .telemetry
    .unwrap();
    assert_eq!(standard.endpoint, "http://collector:4317");
    assert_eq!(standard.service_name, "payments-sidecar");
    let traces_first = resolve(
        Flags::default(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317"),
        ],
    )
    .unwrap()
    .telemetry
    .unwrap();
    assert_eq!(traces_first.endpoint, "http://traces:4317");
    assert_eq!(traces_first.service_name, "shardcar");
    let own = resolve(
        Flags {
            otlp_endpoint: Some("https://mine:4317".into()),
            ..Flags::default()
        },
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:4317")],
    )
    .unwrap()
    .telemetry
    .unwrap();
    assert_eq!(own.endpoint, "https://mine:4317", "the setting wins");
    for (flags, pairs, named) in [
        (
            Flags {
                otlp_endpoint: Some("collector:4317".into()),
                ..Flags::default()
            },
            vec![],
            "--otlp-endpoint",
        ),
        (
            Flags::default(),
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://")],
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
    ] {
        let e = resolve(flags, &pairs).unwrap_err();
        assert_eq!(e.setting, named);
        assert!(e.message.contains("http://"), "{e}");
    }
}
