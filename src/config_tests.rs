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
