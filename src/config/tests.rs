//! Tests of the settings; [`given`], [`env`] and [`file`] also serve the tests of the
//! subsystems' configs built from them (`sidecar::config`).

use super::*;

/// What clap gives `shardcar run` for these flags and `SHARDCAR_*` variables: a variable counts
/// only where its flag is absent, and an empty one not at all. (Clap's own reading of the
/// process environment is switched off here; the binary's tests in `tests/ops.rs` run it.)
pub(crate) fn given(flags: &[&str], vars: &[(&str, &str)]) -> Given {
    use clap::Args as _;
    let run = RunArgs::augment_args(clap::Command::new("run")).mut_args(|a| a.env(None::<&str>));
    let matches = run
        .try_get_matches_from(std::iter::once("run").chain(flags.iter().copied()))
        .unwrap();
    let mut given = Given::from_matches(&matches);
    for (var, value) in vars.iter().filter(|(_, v)| !v.is_empty()) {
        let picked = (value.to_string(), var.to_string());
        if *var == "SHARDCAR_CONFIG" {
            given.config.get_or_insert(picked);
        } else {
            let setting = SETTINGS.iter().find(|s| s.env == *var).unwrap();
            given.values.entry(setting.key).or_insert(picked);
        }
    }
    given
}

/// The standard variables (`RUST_LOG`, `OTEL_*`) as `resolve` is given them.
pub(crate) fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
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
    let s = Settings::resolve(
        given(
            &["--zk", "a:1", "--advertise-ip", "10.0.0.5"],
            &[("SHARDCAR_ZK", "b:2"), ("SHARDCAR_NAMESPACE", "ns")],
        ),
        &env(&[]),
    )
    .unwrap();
    assert_eq!(s.zk.as_deref(), Some("a:1"));
    assert_eq!(s.namespace, "ns");
    assert_eq!(s.listen, DEFAULT_LISTEN);
    assert_eq!(s.session_timeout, Duration::from_secs(10));
    assert_eq!(s.lease, Duration::from_secs(5));
    assert_eq!(s.zk_warm_up, Duration::from_millis(2));
    assert_eq!(s.claim_ahead, Duration::from_millis(500));
}

#[test]
fn claim_ahead_may_be_off_and_is_bounded() {
    let resolve = |value: &str| {
        Settings::resolve(
            given(&["--advertise-ip", "10.0.0.5", "--claim-ahead", value], &[]),
            &env(&[]),
        )
    };
    assert_eq!(resolve("0s").unwrap().claim_ahead, Duration::ZERO);
    assert_eq!(
        resolve("500ms").unwrap().claim_ahead,
        Duration::from_millis(500)
    );
    let err = resolve("501ms").unwrap_err().to_string();
    assert!(
        err.starts_with("invalid setting --claim-ahead: must be at most 500ms"),
        "{err}"
    );
}

#[test]
fn claim_lead_is_auto_or_a_duration_within_claim_ahead() {
    let resolve = |args: &[&str]| {
        let mut all = vec!["--advertise-ip", "10.0.0.5"];
        all.extend_from_slice(args);
        Settings::resolve(given(&all, &[]), &env(&[]))
    };
    assert_eq!(resolve(&[]).unwrap().claim_lead, None);
    assert_eq!(resolve(&["--claim-lead", "auto"]).unwrap().claim_lead, None);
    assert_eq!(
        resolve(&["--claim-lead", "200ms"]).unwrap().claim_lead,
        Some(Duration::from_millis(200))
    );
    let err = resolve(&["--claim-ahead", "100ms", "--claim-lead", "200ms"])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("invalid setting --claim-lead: must be at most claim_ahead (100ms)"),
        "{err}"
    );
    let err = resolve(&["--claim-lead", "soon"]).unwrap_err().to_string();
    assert!(
        err.starts_with("invalid setting --claim-lead: must be auto or a duration"),
        "{err}"
    );
}

#[test]
fn zk_warm_up_may_be_off_and_is_bounded() {
    let resolve = |value: &str| {
        Settings::resolve(
            given(&["--advertise-ip", "10.0.0.5", "--zk-warm-up", value], &[]),
            &env(&[]),
        )
    };
    assert_eq!(resolve("0s").unwrap().zk_warm_up, Duration::ZERO);
    assert_eq!(
        resolve("100ms").unwrap().zk_warm_up,
        Duration::from_millis(100)
    );
    assert_eq!(
        resolve("101ms").unwrap_err().to_string(),
        "invalid setting --zk-warm-up: must be at most 100ms: by then ZooKeeper's threads have gone back to sleep"
    );
}

#[test]
fn every_setting_is_declared_once_with_its_flag_and_variable() {
    use clap::CommandFactory as _;
    #[derive(clap::Parser)]
    struct Run {
        #[command(flatten)]
        args: RunArgs,
    }
    let run = Run::command();
    for s in SETTINGS {
        assert_eq!(s.env, format!("SHARDCAR_{}", s.key.to_ascii_uppercase()));
        let arg = run
            .get_arguments()
            .find(|a| a.get_id() == s.key)
            .unwrap_or_else(|| panic!("{} has no flag", s.key));
        assert_eq!(arg.get_long(), Some(&flag_of(s.key)[2..]));
        assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(s.env));
    }
    let keys: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
    let mut unique = keys.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), keys.len(), "a key declared twice: {keys:?}");
    // Every key of the file is a setting, and every setting a key of the file.
    for s in SETTINGS {
        let f = file(&format!("{} = 1\n", s.key)).unwrap();
        assert!(
            f.get(s.key).is_some(),
            "{} is not read from the file",
            s.key
        );
    }
}

#[test]
fn bad_settings_are_named() {
    let ip = "10.0.0.5";
    // Flags, SHARDCAR_* variables, the setting named.
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec!["--listen", "nowhere", "--advertise-ip", ip],
            vec![],
            "--listen",
        ),
        (vec!["--advertise-ip", "x"], vec![], "--advertise-ip"),
        (
            vec!["--advertise-ip", ip],
            vec![("SHARDCAR_SESSION_TIMEOUT", "1s")],
            "SHARDCAR_SESSION_TIMEOUT",
        ),
        (
            vec!["--advertise-ip", ip],
            vec![("SHARDCAR_ZK", "nohostport")],
            "SHARDCAR_ZK",
        ),
        (
            vec!["--advertise-ip", ip, "--log-format", "xml"],
            vec![],
            "--log-format",
        ),
        (
            // The flag wins, and is the one named.
            vec!["--advertise-ip", ip, "--session-timeout", "1x"],
            vec![("SHARDCAR_SESSION_TIMEOUT", "1s")],
            "--session-timeout",
        ),
    ];
    for (flags, vars, setting) in cases {
        let e = Settings::resolve(given(&flags, &vars), &env(&[])).unwrap_err();
        assert_eq!(e.setting, setting, "{flags:?} {vars:?}: {e}");
    }
}

/// A settings file at `/etc/shardcar.toml`, given by `--config`.
pub(crate) fn file(text: &str) -> Result<FileSettings, SettingsError> {
    FileSettings::parse("/etc/shardcar.toml", text, "--config")
}

#[test]
fn file_is_the_last_layer() {
    let f = file(
        "zk = \"f:1\"\nnamespace = \"fromfile\"\nsession_timeout = 6\nmetrics_listen = \"127.0.0.1:9100\"\nhistory_size = 5\nadvertise_ip = \"10.0.0.9\"\n",
    )
    .unwrap();
    let s = Settings::resolve_layers(
        given(&["--namespace", "fromflag"], &[("SHARDCAR_ZK", "e:2")]),
        &env(&[]),
        Some(f),
    )
    .unwrap();
    assert_eq!(s.zk.as_deref(), Some("e:2"));
    assert_eq!(s.namespace, "fromflag");
    assert_eq!(s.session_timeout, Duration::from_secs(6));
    assert_eq!(s.lease, Duration::from_secs(3));
    // metrics_listen is the older name of http_listen.
    assert_eq!(s.http_listen, Some("127.0.0.1:9100".parse().unwrap()));
    assert_eq!(s.history_size, 5);
    assert_eq!(s.advertise_ip, "10.0.0.9");
    assert_eq!(s.log_level, "info");
}

#[test]
fn bad_files_are_named() {
    let msg = |r: Result<FileSettings, SettingsError>| r.unwrap_err().to_string();
    assert_eq!(
        msg(file("zk = \"a:1\"\nlisten = [1]\n")),
        "invalid setting listen in /etc/shardcar.toml: must be a string, a number or a boolean, not array"
    );
    for (value, kind) in [("{ a = 1 }", "table"), ("1979-05-27T07:32:00Z", "datetime")] {
        assert_eq!(
            msg(file(&format!("listen = {value}\n"))),
            format!("invalid setting listen in /etc/shardcar.toml: must be a string, a number or a boolean, not {kind}")
        );
    }
    assert_eq!(
        msg(file("session-timeout = \"3s\"\n")),
        "invalid setting session-timeout in /etc/shardcar.toml: is not a setting; write it as session_timeout"
    );
    assert!(msg(file("color = 1\n")).contains("is not a setting; known settings: zk, namespace"));
    assert!(msg(file("zk = \n"))
        .starts_with("invalid setting --config: /etc/shardcar.toml is not valid TOML (line 1)"));
    let f = file("session_timeout = \"1s\"\n").unwrap();
    let ip = ["--advertise-ip", "10.0.0.5"];
    let with_ip = |more: &[&'static str]| given(&[&ip[..], more].concat(), &[]);
    assert_eq!(
        Settings::resolve_layers(with_ip(&[]), &env(&[]), Some(f))
            .unwrap_err()
            .to_string(),
        "invalid setting session_timeout in /etc/shardcar.toml: must be between 2s and 120s"
    );
    assert!(Settings::resolve(
        with_ip(&["--config", "/nonexistent/shardcar.toml"]),
        &env(&[])
    )
    .unwrap_err()
    .to_string()
    .starts_with("invalid setting --config: cannot read /nonexistent/shardcar.toml"));
    assert!(Settings::resolve(
        given(&[], &[("SHARDCAR_CONFIG", "/nonexistent/shardcar.toml")]),
        &env(&[])
    )
    .unwrap_err()
    .to_string()
    .starts_with("invalid setting SHARDCAR_CONFIG: cannot read /nonexistent/shardcar.toml"));
    assert_eq!(
        Settings::resolve(with_ip(&["--metrics-listen", "9090"]), &env(&[]))
            .unwrap_err()
            .setting,
        "--metrics-listen"
    );
    assert_eq!(
        Settings::resolve(
            with_ip(&["--history-file", "/nonexistent/dir/h.jsonl"]),
            &env(&[])
        )
        .unwrap_err()
        .to_string(),
        "invalid setting --history-file: the directory /nonexistent/dir does not exist"
    );
    assert_eq!(
        Settings::resolve(with_ip(&["--log-level", "shardcar=loud"]), &env(&[]))
            .unwrap_err()
            .setting,
        "--log-level"
    );
    assert_eq!(
        Settings::resolve(
            given(
                &[],
                &[
                    ("SHARDCAR_HISTORY_SIZE", "-1"),
                    ("SHARDCAR_ADVERTISE_IP", "10.0.0.1")
                ]
            ),
            &env(&[])
        )
        .unwrap_err()
        .setting,
        "SHARDCAR_HISTORY_SIZE"
    );
}

#[test]
fn the_log_level_is_the_flag_else_rust_log_else_the_variable_or_file() {
    let ip = ["--advertise-ip", "10.0.0.5"];
    let level = |flags: &[&str], vars: &[(&str, &str)], standard: &[(&str, &str)]| {
        Settings::resolve(given(&[&ip[..], flags].concat(), vars), &env(standard))
            .unwrap()
            .log_level
    };
    assert_eq!(level(&[], &[], &[]), "info");
    assert_eq!(level(&[], &[("SHARDCAR_LOG_LEVEL", "warn")], &[]), "warn");
    assert_eq!(
        level(
            &[],
            &[("SHARDCAR_LOG_LEVEL", "warn")],
            &[("RUST_LOG", "debug")]
        ),
        "debug"
    );
    assert_eq!(
        level(&["--log-level", "error"], &[], &[("RUST_LOG", "debug")]),
        "error"
    );
    let f = file("log_level = \"trace\"\n").unwrap();
    let from_file = |standard: &[(&str, &str)]| {
        Settings::resolve_layers(given(&ip, &[]), &env(standard), Some(f.clone()))
            .unwrap()
            .log_level
    };
    assert_eq!(from_file(&[]), "trace");
    assert_eq!(from_file(&[("RUST_LOG", "debug")]), "debug");
}

#[test]
fn the_example_file_names_every_setting_and_each_example_is_valid() {
    let text = example_file();
    // As printed, everything is commented out: the defaults.
    let empty = FileSettings::parse("example", &text, "--config").unwrap();
    let defaults = Settings::resolve_layers(given(&[], &[]), &env(&[]), Some(empty)).unwrap();
    assert_eq!(
        defaults,
        Settings::resolve(given(&[], &[]), &env(&[])).unwrap()
    );
    // Every setting is there, and with every line uncommented the file is valid as a whole.
    for s in SETTINGS {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("# {} = ", s.key))),
            "{} is missing from the example file",
            s.key
        );
    }
    let uncommented = example_uncommented();
    let all = FileSettings::parse("example", &uncommented, "--config").unwrap();
    let s = Settings::resolve_layers(given(&[], &[]), &env(&[]), Some(all)).unwrap();
    assert_eq!(s.zk.as_deref(), Some("zk1:2181,zk2:2181,zk3:2181"));
    assert_eq!(s.lease, Duration::from_secs(5));
}

/// The example file with every setting uncommented, as valid as a whole (the token given inline
/// only, the history file in a directory that exists).
pub(crate) fn example_uncommented() -> String {
    let uncommented: String = example_file()
        .lines()
        .map(|l| {
            let bare = l.strip_prefix("# ").unwrap_or(l);
            if SETTINGS
                .iter()
                .any(|s| bare.starts_with(&format!("{} = ", s.key)))
            {
                bare.to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    // (The example history file's directory is the package's; here, one that exists.)
    let tmp = std::env::temp_dir().join("history.jsonl");
    let uncommented = uncommented.replace(
        "\"/var/lib/shardcar/history.jsonl\"",
        &format!("{:?}", tmp.display().to_string()),
    );
    // The token is given one way: inline here, so the file's line goes.
    uncommented
        .lines()
        .filter(|l| !l.starts_with("admin_token_file = "))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn the_packaged_settings_file_is_the_example_file() {
    let packaged = include_str!("../../scripts/deb/shardcar.toml");
    assert!(
        packaged == example_file(),
        "scripts/deb/shardcar.toml differs from `shardcar config`: regenerate it with\n  cargo run -q -- config > scripts/deb/shardcar.toml"
    );
}

#[test]
fn the_otlp_endpoint_comes_from_its_setting_else_the_standard_variables() {
    let resolve =
        |flags: &[&str], pairs: &[(&str, &str)]| Settings::resolve(given(flags, &[]), &env(pairs));
    let none = resolve(&[], &[]).unwrap();
    assert_eq!(none.telemetry, None, "no endpoint: nothing exported");
    let standard = resolve(
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_SERVICE_NAME", "payments-sidecar"),
        ],
    )
    .unwrap()
    .telemetry
    .unwrap();
    assert_eq!(standard.endpoint, "http://collector:4317");
    assert_eq!(standard.origin, "OTEL_EXPORTER_OTLP_ENDPOINT");
    assert_eq!(standard.service_name, "payments-sidecar");
    let traces_first = resolve(
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317"),
        ],
    )
    .unwrap()
    .telemetry
    .unwrap();
    assert_eq!(traces_first.endpoint, "http://traces:4317");
    assert_eq!(traces_first.origin, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    assert_eq!(traces_first.service_name, "shardcar");
    let own = resolve(
        &["--otlp-endpoint", "https://mine:4317"],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:4317")],
    )
    .unwrap()
    .telemetry
    .unwrap();
    assert_eq!(own.endpoint, "https://mine:4317", "the setting wins");
    assert_eq!(own.origin, "--otlp-endpoint");
    // Its form is checked by the exporter's config (`sidecar::config`'s tests).
}

#[test]
fn the_tracing_db_is_a_url_named_where_it_came_from_and_never_shown() {
    let resolve =
        |flags: &[&str], vars: &[(&str, &str)]| Settings::resolve(given(flags, vars), &env(&[]));
    assert_eq!(resolve(&[], &[]).unwrap().tracing_db, None);
    let s = resolve(
        &[],
        &[("SHARDCAR_TRACING_DB", "postgres://app:pw@db:5433/history")],
    )
    .unwrap();
    let db = s.tracing_db.clone().unwrap();
    assert_eq!(db.origin, "SHARDCAR_TRACING_DB");
    assert_eq!(db.url, "postgres://app:pw@db:5433/history");
    assert!(
        !format!("{s:?}").contains(":pw@"),
        "the password is never shown"
    );
    let db = resolve(
        &["--tracing-db", "jdbc:postgresql://db/history"],
        &[("SHARDCAR_TRACING_DB", "postgres://app:pw@db/history")],
    )
    .unwrap()
    .tracing_db
    .unwrap();
    assert_eq!(db.origin, "--tracing-db", "the flag wins and is named");
    // The URL itself is read by `ops::tracing_db` (`sidecar::config`'s tests).
}

#[test]
fn the_operations_guide_has_a_row_per_setting() {
    let guide = include_str!("../../docs/operations.md");
    for s in SETTINGS {
        let start = format!("| {} | `{}` | ", s.key, flag_of(s.key));
        let row = guide
            .lines()
            .find(|l| l.starts_with(&start))
            .unwrap_or_else(|| panic!("docs/operations.md has no row starting {start:?}"));
        assert!(row.contains(&format!("`{}`", s.env)), "{row}");
    }
}

/// Two `[[jobs]]` tables, the first a SCRIPT job to overwrite, and `typed_jobs = "declared"`.
pub(crate) const TWO_JOBS: &str = "typed_jobs = \"declared\"\n\
     [[jobs]]\n\
     job_name = \"clean\"\n\
     type = \"SCRIPT\"\n\
     cron = \"0/5 * * * * ?\"\n\
     shardingTotalCount = 2\n\
     overwrite = true\n\
     props = { \"script.command.line\" = \"/opt/clean.sh\" }\n\
     [[jobs]]\n\
     job_name = \"orders\"\n\
     sharding_total_count = 3\n";

#[test]
fn declared_jobs_are_kept_as_written_with_where_they_are() {
    let s = Settings::resolve_layers(
        given(&["--advertise-ip", "10.0.0.5"], &[]),
        &env(&[]),
        Some(file(TWO_JOBS).unwrap()),
    )
    .unwrap();
    assert_eq!(s.jobs.len(), 2);
    assert_eq!(s.jobs[0].place, "jobs[0] (clean) in /etc/shardcar.toml");
    assert!(s.jobs[0].overwrite);
    assert_eq!(
        s.jobs[0].table.get("overwrite"),
        None,
        "overwrite is the settings file's, not a job file's key"
    );
    assert_eq!(
        s.jobs[0].table.get("type").and_then(|t| t.as_str()),
        Some("SCRIPT")
    );
    assert_eq!(s.jobs[1].place, "jobs[1] (orders) in /etc/shardcar.toml");
    assert!(!s.jobs[1].overwrite);
    assert_eq!(s.typed_jobs, TypedJobsSetting::Declared);
    // A table without a name is named by its place alone.
    let f = file("[[jobs]]\nsharding_total_count = 1\n").unwrap();
    assert_eq!(f.jobs[0].place, "jobs[0] in /etc/shardcar.toml");
    let msg = |text: &str| file(text).unwrap_err().to_string();
    assert_eq!(
        msg("[[jobs]]\njob_name = \"x\"\noverwrite = \"yes\"\n"),
        "invalid setting jobs[0] (x) in /etc/shardcar.toml: overwrite must be true or false"
    );
    // What the tables hold is read and checked as a job file (`sidecar::config`'s tests).
    let resolve = |flags: &[&str]| Settings::resolve(given(flags, &[]), &env(&[]));
    assert_eq!(resolve(&[]).unwrap().typed_jobs, TypedJobsSetting::All);
    assert_eq!(
        resolve(&["--typed-jobs", "none"]).unwrap().typed_jobs,
        TypedJobsSetting::None
    );
    assert_eq!(
        resolve(&["--advertise-ip", "10.0.0.5", "--typed-jobs", "some"])
            .unwrap_err()
            .to_string(),
        "invalid setting --typed-jobs: \"some\" must be all, declared or none"
    );
}

#[test]
fn the_http_listener_and_its_older_name() {
    let resolve =
        |flags: &[&str], vars: &[(&str, &str)]| Settings::resolve(given(flags, vars), &env(&[]));
    let s = resolve(&["--http-listen", "127.0.0.1:8080"], &[]).unwrap();
    assert_eq!(s.http_listen, Some("127.0.0.1:8080".parse().unwrap()));
    let s = resolve(&[], &[("SHARDCAR_METRICS_LISTEN", "127.0.0.1:9464")]).unwrap();
    assert_eq!(s.http_listen, Some("127.0.0.1:9464".parse().unwrap()));
    // Both, the same: fine; different: the older name is refused.
    let s = resolve(
        &[
            "--http-listen",
            "127.0.0.1:8080",
            "--metrics-listen",
            "127.0.0.1:8080",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(s.http_listen, Some("127.0.0.1:8080".parse().unwrap()));
    let e = resolve(
        &["--http-listen", "127.0.0.1:8080"],
        &[("SHARDCAR_METRICS_LISTEN", "127.0.0.1:9464")],
    )
    .unwrap_err();
    assert_eq!(e.setting, "SHARDCAR_METRICS_LISTEN");
    assert!(e.message.contains("keep only http_listen"), "{e}");
    let e = resolve(&["--http-listen", "8080"], &[]).unwrap_err();
    assert_eq!(e.setting, "--http-listen");
}

#[test]
fn an_address_other_hosts_reach_needs_the_admin_token() {
    let resolve =
        |flags: &[&str], vars: &[(&str, &str)]| Settings::resolve(given(flags, vars), &env(&[]));
    let token = "0123456789abcdef-token";
    // Loopback: open unless a token is given.
    let s = resolve(&[], &[]).unwrap();
    assert_eq!(s.access, crate::access::Access::default());
    for (flags, vars, setting, what) in [
        (
            vec!["--listen", "0.0.0.0:50061"],
            vec![],
            "--listen",
            "Admin API",
        ),
        (
            vec![],
            vec![("SHARDCAR_LISTEN", "10.0.0.5:50061")],
            "SHARDCAR_LISTEN",
            "Admin API",
        ),
        (
            vec!["--http-listen", "0.0.0.0:8080"],
            vec![],
            "--http-listen",
            "console",
        ),
        (
            vec![],
            vec![("SHARDCAR_METRICS_LISTEN", "[::]:9464")],
            "SHARDCAR_METRICS_LISTEN",
            "console",
        ),
    ] {
        let e = resolve(&flags, &vars).unwrap_err();
        assert_eq!(e.setting, setting, "{e}");
        assert!(
            e.message.contains("is not a loopback address")
                && e.message.contains(what)
                && e.message
                    .contains("admin_token (--admin-token, SHARDCAR_ADMIN_TOKEN)"),
            "{e}"
        );
        // With a token, the same is fine.
        let mut with_token = flags.clone();
        with_token.extend(["--admin-token", token]);
        let s = resolve(&with_token, &vars).unwrap();
        assert!(s.access.token.as_ref().unwrap().matches(token));
    }
    // From a file, whitespace trimmed.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    let path = path.display().to_string();
    let s = resolve(
        &["--listen", "0.0.0.0:1", "--admin-token-file", &path],
        &[("SHARDCAR_CONSOLE_READ_ONLY_OPEN", "true")],
    )
    .unwrap();
    assert!(s.access.token.as_ref().unwrap().matches(token));
    assert!(s.access.read_only_open);
    // Mistakes are named.
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (
            vec!["--admin-token", "short"],
            "--admin-token",
            "at least 16",
        ),
        (
            vec!["--admin-token", token, "--admin-token-file", &path],
            "--admin-token-file",
            "one way",
        ),
        (
            vec!["--admin-token-file", "/nonexistent/token"],
            "--admin-token-file",
            "cannot read /nonexistent/token",
        ),
        (
            vec!["--console-read-only-open", "yes"],
            "--console-read-only-open",
            "true or false",
        ),
    ];
    for (flags, setting, says) in cases {
        let e = resolve(&flags, &[]).unwrap_err();
        assert_eq!(e.setting, setting, "{e}");
        assert!(e.message.contains(says), "{e}");
    }
    // The file's boolean.
    let f =
        file("console_read_only_open = true\nadmin_token = \"0123456789abcdef-token\"\n").unwrap();
    let s = Settings::resolve_layers(given(&[], &[]), &env(&[]), Some(f)).unwrap();
    assert!(s.access.read_only_open);
    assert!(
        !format!("{s:?}").contains(token),
        "the token is never shown"
    );
}

#[test]
fn a_unix_socket_others_can_use_needs_the_admin_token() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let open = crate::access::Access::default();
    let chmod = |p: &std::path::Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    chmod(&socket, 0o777);
    // The temp dir is the owner's only: nobody else reaches the socket.
    chmod(dir.path(), 0o700);
    assert!(!world_accessible(&socket));
    chmod(dir.path(), 0o755);
    assert!(world_accessible(&socket));
    let listen = format!("unix://{}", socket.display());
    let e = check_unix_socket(&listen, &socket, &open).unwrap_err();
    assert_eq!(e.setting, "listen");
    assert!(e.message.contains("world-accessible"), "{e}");
    let token = crate::access::Access {
        token: Some(crate::access::AdminToken::new("0123456789abcdef-token").unwrap()),
        read_only_open: false,
    };
    assert!(check_unix_socket(&listen, &socket, &token).is_ok());
    chmod(&socket, 0o770);
    assert!(check_unix_socket(&listen, &socket, &open).is_ok());
}
