//! Tests of the subsystems' configs built from the settings: what a subsystem refuses is named
//! as the settings name it, before anything binds.

use super::*;
use crate::config::tests::{env, example_uncommented, file, given, TWO_JOBS};
use crate::config::FileSettings;
use crate::elasticjob::typed::JobType;

/// The settings of these flags, `SHARDCAR_*` variables and standard variables, prepared.
fn prepare(
    flags: &[&str],
    vars: &[(&str, &str)],
    standard: &[(&str, &str)],
) -> Result<Config, SettingsError> {
    Config::prepare(Settings::resolve(given(flags, vars), &env(standard))?)
}

/// The settings of this file (and these flags), prepared.
fn prepare_file(flags: &[&str], text: &str) -> Result<Config, SettingsError> {
    Config::prepare(Settings::resolve_layers(
        given(flags, &[]),
        &env(&[]),
        Some(file(text)?),
    )?)
}

#[test]
fn the_defaults_and_every_example_prepare() {
    let c = prepare(&[], &[], &[]).unwrap();
    assert_eq!(c.telemetry, None);
    assert_eq!(c.tracing_db, None);
    assert_eq!(c.typed_jobs, TypedJobs::All);
    assert!(c.jobs.is_empty());
    let all = FileSettings::parse("example", &example_uncommented(), "--config").unwrap();
    let c =
        Config::prepare(Settings::resolve_layers(given(&[], &[]), &env(&[]), Some(all)).unwrap())
            .unwrap();
    assert_eq!(
        c.telemetry.unwrap().endpoint,
        "http://127.0.0.1:4317",
        "the example otlp_endpoint"
    );
    assert_eq!(
        c.tracing_db.unwrap().shown,
        "postgres://shardcar:***@127.0.0.1:5432/elasticjob"
    );
}

#[test]
fn the_otlp_endpoint_must_be_a_url_named_where_it_came_from() {
    let t = prepare(
        &[],
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_SERVICE_NAME", "payments-sidecar"),
        ],
    )
    .unwrap()
    .telemetry
    .unwrap();
    assert_eq!(
        t,
        TelemetrySettings {
            endpoint: "http://collector:4317".into(),
            service_name: "payments-sidecar".into(),
        }
    );
    for (flags, pairs, named) in [
        (
            vec!["--otlp-endpoint", "collector:4317"],
            vec![],
            "--otlp-endpoint",
        ),
        (
            vec![],
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://")],
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
    ] {
        let e = prepare(&flags, &[], &pairs).unwrap_err();
        assert_eq!(e.setting, named);
        assert!(e.message.contains("http://"), "{e}");
    }
}

#[test]
fn the_tracing_db_is_a_postgresql_url_named_where_it_came_from() {
    let db = prepare(
        &[],
        &[("SHARDCAR_TRACING_DB", "postgres://app:pw@db:5433/history")],
        &[],
    )
    .unwrap()
    .tracing_db
    .unwrap();
    assert_eq!(db.origin, "SHARDCAR_TRACING_DB");
    assert_eq!(db.config.get_dbname(), Some("history"));
    assert_eq!(db.shown, "postgres://app:***@db:5433/history");
    let e = prepare(
        &["--tracing-db", "jdbc:postgresql://db/history"],
        &[("SHARDCAR_TRACING_DB", "postgres://app:pw@db/history")],
        &[],
    )
    .unwrap_err();
    assert_eq!(e.setting, "--tracing-db", "the flag wins and is named");
    assert!(
        e.message.contains("postgres://user:password@host:5432/db"),
        "{e}"
    );
    let e = prepare_file(&[], "tracing_db = \"postgres://app:pw@/history\"\n").unwrap_err();
    assert!(e.setting.starts_with("tracing_db in "), "{e}");
    assert!(!e.to_string().contains(":pw@"), "{e}");
}

#[test]
fn declared_jobs_are_read_with_a_job_files_keys_and_mistakes_named() {
    let c = prepare_file(&["--advertise-ip", "10.0.0.5"], TWO_JOBS).unwrap();
    assert_eq!(c.jobs.len(), 2);
    assert_eq!(c.jobs[0].config.job_name, "clean");
    assert_eq!(c.jobs[0].job_type, Some(JobType::Script));
    assert!(c.jobs[0].config.overwrite);
    assert_eq!(c.jobs[1].config.job_name, "orders");
    assert_eq!(c.jobs[1].config.sharding_total_count, 3);
    assert_eq!(c.jobs[1].job_type, None);
    assert!(!c.jobs[1].config.overwrite);
    assert_eq!(
        c.typed_jobs,
        TypedJobs::Declared(["clean".to_string(), "orders".to_string()].into())
    );
    let msg = |text: &str| prepare_file(&[], text).unwrap_err().to_string();
    assert_eq!(
        msg("[[jobs]]\njob_name = \"clean\"\ntype = \"SCRIPT\"\nsharding_total_count = 1\n"),
        "invalid setting jobs[0] (clean) in /etc/shardcar.toml: config.props: props[script.command.line] is required for a SCRIPT job: the command to run, e.g. \"/opt/jobs/clean.sh --fast\""
    );
    assert_eq!(
        msg("[[jobs]]\njob_name = \"x\"\nsharding_total_count = 1\ncolour = 1\n"),
        "invalid setting jobs[0] (x) in /etc/shardcar.toml: unknown key \"colour\" (see `shardcar ctl job put --help` for the keys)"
    );
    assert_eq!(
        msg("[[jobs]]\njob_name = \"x\"\nsharding_total_count = 1\ntype = \"BATCH\"\n"),
        "invalid setting jobs[0] (x) in /etc/shardcar.toml: type: \"BATCH\" is not SCRIPT or HTTP (leave it out for a job run by workers)"
    );
}
