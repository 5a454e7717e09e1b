//! Sidecar settings: each one taken from its flag, else its `SHARDCAR_*` environment variable,
//! else the TOML file given by `--config` (or `SHARDCAR_CONFIG`), else its default; all validated
//! before anything binds, an error naming the setting where it came from (`--listen`,
//! `SHARDCAR_LISTEN`, `listen in /etc/shardcar.toml`).
//!
//! Each setting is declared once, in `settings!`: clap reads its flag and variable (and says
//! which it was), serde reads the file through figment and refuses unknown keys, and the same
//! list is the settings table of `docs/operations.md` and `shardcar config`. The standard
//! variables (`RUST_LOG`, `OTEL_*`) are passed in as a map so tests never mutate the process
//! environment.
//!
//! The settings are plain values (text, numbers, durations, paths, enums of this module's own,
//! the file's `[[jobs]]` tables as written), each with where it came from when a subsystem may
//! still refuse it: this layer knows none of the subsystems it configures. Each of them builds
//! its own config from these values (`sidecar::Config::prepare`), still before anything binds,
//! and a value it refuses is named the same way, as a [`SettingsError`].

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::time::Duration;

/// Everything `shardcar run` needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// ZooKeeper connect string; `None` runs standalone with the in-memory registry.
    pub zk: Option<String>,
    pub namespace: String,
    /// `host:port` or `unix:///path`.
    pub listen: String,
    pub advertise_ip: String,
    pub session_timeout: Duration,
    pub connection_timeout: Duration,
    /// How long before a cron instant the ZooKeeper session's heartbeat is sent; zero: not at
    /// all.
    pub zk_warm_up: Duration,
    /// How long before a cron instant a fire's run is claimed (its `running` nodes written), so
    /// that its trigger goes out at the instant itself; zero: claimed at the instant.
    pub claim_ahead: Duration,
    /// `user:pass` for ZooKeeper digest auth.
    pub digest: Option<String>,
    /// Worker lease length (capped at half the session timeout).
    pub lease: Duration,
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// How long a graceful shutdown (SIGTERM) may take before the process exits anyway.
    pub shutdown_grace: Duration,
    pub log_level: String,
    pub log_format: LogFormat,
    /// `host:port` of the HTTP listener (the console, `/metrics`, `/healthz`, `/readyz`), from
    /// `http_listen` or its alias `metrics_listen`; `None`: no HTTP listener.
    pub http_listen: Option<std::net::SocketAddr>,
    /// Who may operate the namespace: the admin token, and whether the console's read-only
    /// pages are open without it.
    pub access: crate::access::Access,
    /// Finished executions kept in memory for `ListExecutions`.
    pub history_size: usize,
    /// Where finished executions are appended as JSON lines, if anywhere.
    pub history_file: Option<std::path::PathBuf>,
    /// Where execution spans are exported (OTLP/gRPC), if anywhere.
    pub telemetry: Option<Otlp>,
    /// ElasticJob's tracing tables on PostgreSQL, if configured: the URL as given.
    pub tracing_db: Option<TracingDbUrl>,
    /// Which SCRIPT and HTTP jobs this sidecar runs itself.
    pub typed_jobs: TypedJobsSetting,
    /// Jobs the settings file declares, created at start: its `[[jobs]]` tables as written.
    pub jobs: Vec<JobTable>,
}

/// Where execution spans go: the OTLP endpoint as given (its form is checked by
/// `ops::telemetry`), and the service name (`OTEL_SERVICE_NAME`, else `shardcar`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Otlp {
    pub endpoint: String,
    /// Where the endpoint came from: `--otlp-endpoint`, `OTEL_EXPORTER_OTLP_ENDPOINT`, ...
    pub origin: String,
    pub service_name: String,
}

/// The `tracing_db` setting: a PostgreSQL URL as given (read by `ops::tracing_db`). Its `Debug`
/// never shows the URL, which may hold a password.
#[derive(Clone, PartialEq, Eq)]
pub struct TracingDbUrl {
    pub url: String,
    /// Where it came from: `--tracing-db`, `SHARDCAR_TRACING_DB` or `tracing_db in FILE`.
    pub origin: String,
}

impl std::fmt::Debug for TracingDbUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracingDbUrl")
            .field("url", &"<hidden>")
            .field("origin", &self.origin)
            .finish()
    }
}

/// Which SCRIPT and HTTP jobs this sidecar runs itself (`typed_jobs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypedJobsSetting {
    /// Every one in the namespace.
    All,
    /// Those the settings file declares under `[[jobs]]`.
    Declared,
    None,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// A setting that cannot be used, named as the user wrote it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid setting {setting}: {message}")]
pub struct SettingsError {
    pub setting: String,
    pub message: String,
}

impl SettingsError {
    /// `setting` (as it is named where it came from: `--listen`, `tracing_db in FILE`) cannot be
    /// used, for the reason `message` gives.
    pub fn new(setting: &str, message: impl Into<String>) -> SettingsError {
        SettingsError {
            setting: setting.to_string(),
            message: message.into(),
        }
    }
}

fn bad(setting: &str, message: impl Into<String>) -> SettingsError {
    SettingsError::new(setting, message)
}

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50061";

/// Parses a duration: `10s`, `500ms`, `2m`, `1h 30m` (humantime's syntax) or a bare number of
/// seconds (`3`, `0.5`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        let seconds: f64 = t
            .parse()
            .map_err(|_| format!("{text:?} is not a duration like 10s, 500ms or 2m"))?;
        return Duration::try_from_secs_f64(seconds)
            .map_err(|_| format!("{text:?} is too long to be a duration"));
    }
    humantime::parse_duration(t).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => {
            format!("{text:?} is too long to be a duration")
        }
        humantime::DurationError::UnknownUnit { unit, .. } => {
            format!("{text:?} has an unknown unit {unit:?} (use ms, s, m or h)")
        }
        _ => format!("{text:?} is not a duration like 10s, 500ms or 2m"),
    })
}

/// The default number of finished executions kept in memory.
pub const DEFAULT_HISTORY_SIZE: usize = 1000;
/// The largest `history_size` accepted.
pub const MAX_HISTORY_SIZE: usize = 1_000_000;

/// One setting as the table of `docs/operations.md`, `--help` and the example file describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The TOML key; the flag is the key with `-` for `_`.
    pub key: &'static str,
    /// The environment variable: `SHARDCAR_` and the key in upper case.
    pub env: &'static str,
    /// The default, as text (some are computed: "half the session timeout").
    pub default: &'static str,
    /// What it means.
    pub meaning: &'static str,
    /// An example value, as TOML.
    pub example: &'static str,
}

/// Declares every setting once. From the one list come the `run` flags and their
/// `SHARDCAR_*` variables (clap, which reads both), the file's keys (serde, unknown keys
/// refused), and [`SETTINGS`] (the table of `docs/operations.md` and `shardcar config`).
macro_rules! settings {
    ($( $key:ident {
        env: $env:literal,
        value_name: $value_name:literal,
        default: $default:literal,
        meaning: $meaning:literal,
        example: $example:literal $(,)?
    } )*) => {
        /// `shardcar run`'s flags; each one may also come from its `SHARDCAR_*` variable.
        #[derive(clap::Args, Debug, Default, Clone)]
        pub struct RunArgs {
            /// TOML settings file; flags and SHARDCAR_* variables override it
            #[arg(long, env = "SHARDCAR_CONFIG", value_name = "FILE")]
            pub config: Option<String>,
            $(
                #[arg(
                    long,
                    env = $env,
                    value_name = $value_name,
                    help = concat!($meaning, " [default: ", $default, "]")
                )]
                pub $key: Option<String>,
            )*
        }

        /// The settings file's keys: every one optional, any other key refused.
        #[derive(serde::Deserialize, Debug, Default)]
        #[serde(deny_unknown_fields)]
        struct FileLayer {
            $(
                #[serde(default)]
                $key: Option<FileValue>,
            )*
            /// Jobs to create at start (`[[jobs]]` tables, in a job file's keys).
            #[serde(default)]
            jobs: Vec<serde_yaml_ng::Value>,
        }

        impl FileLayer {
            fn into_values(self) -> Vec<(&'static str, String)> {
                let mut values = Vec::new();
                $(
                    if let Some(FileValue(v)) = self.$key {
                        values.push((stringify!($key), v));
                    }
                )*
                values
            }
        }

        /// Every setting, in the order of `--help`, `docs/operations.md` and the example file.
        pub const SETTINGS: &[Setting] = &[
            $(
                Setting {
                    key: stringify!($key),
                    env: $env,
                    default: $default,
                    meaning: $meaning,
                    example: $example,
                },
            )*
        ];
    };
}

settings! {
    zk {
        env: "SHARDCAR_ZK",
        value_name: "HOSTS",
        default: "(none: standalone)",
        meaning: "ZooKeeper connect string host:port[,host:port...]; without it the sidecar runs standalone (in-memory, one host)",
        example: r#""zk1:2181,zk2:2181,zk3:2181""#,
    }
    namespace {
        env: "SHARDCAR_NAMESPACE",
        value_name: "NS",
        default: "shardcar",
        meaning: "ZooKeeper namespace (ElasticJob's registry-center namespace), may contain '/'",
        example: r#""shardcar""#,
    }
    listen {
        env: "SHARDCAR_LISTEN",
        value_name: "ADDR",
        default: "127.0.0.1:50061",
        meaning: "gRPC listen address: host:port or unix:///path",
        example: r#""127.0.0.1:50061""#,
    }
    advertise_ip {
        env: "SHARDCAR_ADVERTISE_IP",
        value_name: "IP",
        default: "(detected)",
        meaning: "IPv4 address this sidecar registers as its server (servers/{ip}, instance ids)",
        example: r#""10.0.0.5""#,
    }
    session_timeout {
        env: "SHARDCAR_SESSION_TIMEOUT",
        value_name: "DURATION",
        default: "10s",
        meaning: "ZooKeeper session timeout (2s to 120s)",
        example: r#""10s""#,
    }
    connection_timeout {
        env: "SHARDCAR_CONNECTION_TIMEOUT",
        value_name: "DURATION",
        default: "15s",
        meaning: "how long to wait for ZooKeeper at start",
        example: r#""15s""#,
    }
    zk_warm_up {
        env: "SHARDCAR_ZK_WARM_UP",
        value_name: "DURATION",
        default: "2ms",
        meaning: "how long before each cron instant the ZooKeeper session's heartbeat read is sent, so that the fire's first write meets a server already awake (0s: off; at most 100ms)",
        example: r#""2ms""#,
    }
    claim_ahead {
        env: "SHARDCAR_CLAIM_AHEAD",
        value_name: "DURATION",
        default: "100ms",
        meaning: "how long before each cron instant the fire's items are claimed in ZooKeeper (their running nodes written), so that the trigger reaches the worker at the instant instead of a write later; raise it when many jobs fire at the same instant (0s: claim at the instant; at most 500ms)",
        example: r#""100ms""#,
    }
    digest {
        env: "SHARDCAR_DIGEST",
        value_name: "USER:PASS",
        default: "(none)",
        meaning: "ZooKeeper digest credentials user:password; nodes then get creator-only ACLs",
        example: r#""user:password""#,
    }
    lease {
        env: "SHARDCAR_LEASE",
        value_name: "DURATION",
        default: "half the session timeout",
        meaning: "worker lease length (capped at half the session timeout)",
        example: r#""5s""#,
    }
    keepalive_interval {
        env: "SHARDCAR_KEEPALIVE_INTERVAL",
        value_name: "DURATION",
        default: "1s",
        meaning: "HTTP/2 keepalive ping interval on worker connections",
        example: r#""1s""#,
    }
    keepalive_timeout {
        env: "SHARDCAR_KEEPALIVE_TIMEOUT",
        value_name: "DURATION",
        default: "3s",
        meaning: "a worker that does not answer a ping within this long is dead",
        example: r#""3s""#,
    }
    shutdown_grace {
        env: "SHARDCAR_SHUTDOWN_GRACE",
        value_name: "DURATION",
        default: "10s",
        meaning: "SIGTERM: how long the drain may take (at least the lease); the process exits by then",
        example: r#""10s""#,
    }
    log_level {
        env: "SHARDCAR_LOG_LEVEL",
        value_name: "FILTER",
        default: "info",
        meaning: "log filter in RUST_LOG syntax (RUST_LOG is used when neither the flag is given)",
        example: r#""info""#,
    }
    log_format {
        env: "SHARDCAR_LOG_FORMAT",
        value_name: "FORMAT",
        default: "text",
        meaning: "text or json",
        example: r#""text""#,
    }
    http_listen {
        env: "SHARDCAR_HTTP_LISTEN",
        value_name: "ADDR",
        default: "(none: no HTTP listener)",
        meaning: "host:port of the HTTP listener: the web console at /, Prometheus metrics at /metrics, probes at /healthz (live) and /readyz (ZooKeeper connected, not draining)",
        example: r#""127.0.0.1:8080""#,
    }
    metrics_listen {
        env: "SHARDCAR_METRICS_LISTEN",
        value_name: "ADDR",
        default: "(none)",
        meaning: "older name of http_listen, still read (it serves the console too); prefer http_listen",
        example: r#""127.0.0.1:8080""#,
    }
    admin_token {
        env: "SHARDCAR_ADMIN_TOKEN",
        value_name: "TOKEN",
        default: "(none)",
        meaning: "bearer token the Admin API and the console's actions require (at least 16 characters); required when listen or http_listen is not a loopback address or the Unix socket is world-accessible",
        example: r#""change-me-to-a-long-random-token""#,
    }
    admin_token_file {
        env: "SHARDCAR_ADMIN_TOKEN_FILE",
        value_name: "FILE",
        default: "(none)",
        meaning: "file holding admin_token (surrounding whitespace ignored); give one of the two",
        example: r#""/etc/shardcar/admin-token""#,
    }
    console_read_only_open {
        env: "SHARDCAR_CONSOLE_READ_ONLY_OPEN",
        value_name: "BOOL",
        default: "false",
        meaning: "true: the console's read-only pages need no token (its actions and the Admin API still do)",
        example: "false",
    }
    history_size {
        env: "SHARDCAR_HISTORY_SIZE",
        value_name: "N",
        default: "1000",
        meaning: "finished executions kept in memory for ListExecutions (0 to 1000000)",
        example: "1000",
    }
    history_file {
        env: "SHARDCAR_HISTORY_FILE",
        value_name: "FILE",
        default: "(none)",
        meaning: "file to append finished executions to, one JSON object per line",
        example: r#""/var/lib/shardcar/history.jsonl""#,
    }
    typed_jobs {
        env: "SHARDCAR_TYPED_JOBS",
        value_name: "WHICH",
        default: "all",
        meaning: "which SCRIPT and HTTP jobs this sidecar runs itself: all (every one in the namespace), declared (those under [[jobs]] in this file) or none",
        example: r#""all""#,
    }
    otlp_endpoint {
        env: "SHARDCAR_OTLP_ENDPOINT",
        value_name: "URL",
        default: "(none: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else no export)",
        meaning: "OTLP/gRPC endpoint execution spans are exported to (service name: OTEL_SERVICE_NAME, else shardcar)",
        example: r#""http://127.0.0.1:4317""#,
    }
    tracing_db {
        env: "SHARDCAR_TRACING_DB",
        value_name: "URL",
        default: "(none)",
        meaning: "PostgreSQL URL postgres://user:password@host:port/db (no TLS) of ElasticJob's event-tracing tables, JOB_EXECUTION_LOG and JOB_STATUS_TRACE_LOG (created if absent): every execution is written there as ElasticJob writes its own",
        example: r#""postgres://shardcar:secret@127.0.0.1:5432/elasticjob""#,
    }
}

/// A settings file with every setting commented out: its meaning, default and an example
/// (what `shardcar config` prints, and what the Debian package installs as
/// `/etc/shardcar/shardcar.toml`).
pub fn example_file() -> String {
    let mut out = String::from(
        "# shardcar settings (TOML), read by `shardcar run --config FILE` (or SHARDCAR_CONFIG=FILE).\n\
         # Each setting may also be given as a flag (--session-timeout) or an environment variable\n\
         # (SHARDCAR_SESSION_TIMEOUT); both override this file. Durations: 10s, 500ms, 2m.\n\
         # Uncomment a line to change its default.\n",
    );
    for s in SETTINGS {
        out.push_str(&format!(
            "\n# {}.\n# Default: {}.\n# {} = {}\n",
            s.meaning, s.default, s.key, s.example
        ));
    }
    out.push_str(
        "\n# Jobs to create at start, one [[jobs]] table each, with the keys of a job file\n\
         # (`shardcar ctl job put --help`). An existing job keeps the registry's config unless\n\
         # the table says overwrite = true. SCRIPT and HTTP jobs are run by the sidecars\n\
         # themselves (see typed_jobs).\n\
         # [[jobs]]\n\
         # job_name = \"cleanup\"\n\
         # type = \"SCRIPT\"\n\
         # cron = \"0 0/5 * * * ?\"\n\
         # sharding_total_count = 2\n\
         # props = { \"script.command.line\" = \"/opt/jobs/cleanup.sh --quiet\" }\n",
    );
    out
}

/// A settings file value: TOML strings, numbers and booleans are all taken as text
/// (`session_timeout = 6` and `= "6s"` both work); anything else is refused naming its TOML type.
#[derive(Debug)]
struct FileValue(String);

impl<'de> serde::Deserialize<'de> for FileValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> serde::de::Visitor<'de> for Text {
            type Value = FileValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string, a number or a boolean")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<FileValue, E> {
                Ok(FileValue(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<FileValue, E> {
                Ok(FileValue(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<FileValue, E> {
                Ok(FileValue(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<FileValue, E> {
                Ok(FileValue(v.to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<FileValue, E> {
                Ok(FileValue(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<FileValue, A::Error> {
                Err(serde::de::Error::invalid_type(
                    serde::de::Unexpected::Other("array"),
                    &self,
                ))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<FileValue, A::Error> {
                // TOML's dates reach serde as a map with one private key.
                let kind = match map.next_key::<String>()? {
                    Some(k) if k.contains("toml_private_datetime") => "datetime",
                    _ => "table",
                };
                Err(serde::de::Error::invalid_type(
                    serde::de::Unexpected::Other(kind),
                    &self,
                ))
            }
        }
        d.deserialize_any(Text)
    }
}

/// Where a raw value came from, as it is named in errors.
type Origin = String;

/// The flag a setting is given with.
fn flag_of(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

/// Values given as flags or `SHARDCAR_*` variables, each with where it came from.
#[derive(Debug, Default, Clone)]
pub struct Given {
    config: Option<(String, Origin)>,
    values: BTreeMap<&'static str, (String, Origin)>,
}

impl Given {
    /// The values of `shardcar run`'s matches; an empty variable counts as not set.
    pub fn from_matches(matches: &clap::ArgMatches) -> Given {
        let pick = |id: &str, env: &str| -> Option<(String, Origin)> {
            let value = matches.get_one::<String>(id)?.clone();
            match matches.value_source(id) {
                Some(clap::parser::ValueSource::EnvVariable) if value.is_empty() => None,
                Some(clap::parser::ValueSource::EnvVariable) => Some((value, env.to_string())),
                _ => Some((value, flag_of(id))),
            }
        };
        Given {
            config: pick("config", "SHARDCAR_CONFIG"),
            values: SETTINGS
                .iter()
                .filter_map(|s| pick(s.key, s.env).map(|v| (s.key, v)))
                .collect(),
        }
    }

    fn get(&self, key: &str) -> Option<(String, Origin)> {
        self.values.get(key).cloned()
    }
}

/// The settings read from a TOML file, by key, as text, and the jobs it declares.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct FileSettings {
    path: String,
    values: BTreeMap<String, String>,
    jobs: Vec<JobTable>,
}

/// A job the settings file declares (`[[jobs]]`), as written: created at start when absent, its
/// config replaced when `overwrite = true` (ElasticJob's rule). Its keys are a job file's, read
/// and checked as `PutJob` would by the gRPC layer (`api::jobfile::declared`).
#[derive(Debug, Clone, PartialEq)]
pub struct JobTable {
    /// Where it is, as errors name it: `jobs[0] (clean) in /etc/shardcar.toml`.
    pub place: String,
    /// The table without `overwrite`.
    pub table: serde_yaml_ng::Value,
    pub overwrite: bool,
}

impl FileSettings {
    /// Parses a TOML settings file's text; `path` is only used in messages.
    ///
    /// # Errors
    /// Invalid TOML (named as `setting`), an unknown key, or a value that is not a string or a
    /// number (named as `key in path`).
    pub fn parse(path: &str, text: &str, setting: &str) -> Result<FileSettings, SettingsError> {
        // The syntax first, to name the line of a mistake.
        text.parse::<toml::Table>().map_err(|e| {
            let message = e.message().to_string();
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            bad(setting, format!("{path} is not valid TOML{at}: {message}"))
        })?;
        use figment::providers::Format as _;
        let mut layer: FileLayer = figment::Figment::from(figment::providers::Toml::string(text))
            .extract()
            .map_err(|e| file_error(path, setting, e))?;
        let jobs = std::mem::take(&mut layer.jobs)
            .into_iter()
            .enumerate()
            .map(|(i, job)| job_table(path, i, job))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(FileSettings {
            path: path.to_string(),
            jobs,
            values: layer
                .into_values()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        })
    }

    /// Reads and parses a settings file.
    ///
    /// # Errors
    /// As [`FileSettings::parse`], or the file cannot be read (named as `setting`).
    pub fn load(path: &str, setting: &str) -> Result<FileSettings, SettingsError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(setting, format!("cannot read {path}: {e}")))?;
        FileSettings::parse(path, &text, setting)
    }

    fn get(&self, key: &str) -> Option<(String, Origin)> {
        self.values
            .get(key)
            .map(|v| (v.clone(), format!("{key} in {}", self.path)))
    }
}

/// The `index`th `[[jobs]]` table of the file at `path`, named, its `overwrite` taken out.
fn job_table(
    path: &str,
    index: usize,
    mut table: serde_yaml_ng::Value,
) -> Result<JobTable, SettingsError> {
    let mut place = format!("jobs[{index}] in {path}");
    let mut overwrite = false;
    if let serde_yaml_ng::Value::Mapping(table) = &mut table {
        if let Some(name) = table.get("job_name").or_else(|| table.get("jobName")) {
            if let Some(name) = name.as_str() {
                place = format!("jobs[{index}] ({name}) in {path}");
            }
        }
        match table.remove("overwrite") {
            None => {}
            Some(serde_yaml_ng::Value::Bool(b)) => overwrite = b,
            Some(_) => return Err(bad(&place, "overwrite must be true or false")),
        }
    }
    Ok(JobTable {
        place,
        table,
        overwrite,
    })
}

/// A file the serde layer refused, named as `key in path` where a key is to blame.
fn file_error(path: &str, setting: &str, e: figment::Error) -> SettingsError {
    let key = e.path.last().cloned().unwrap_or_default();
    match e.kind {
        figment::error::Kind::UnknownField(key, _) => {
            let hint = if SETTINGS.iter().any(|s| s.key == key.replace('-', "_")) {
                format!("; write it as {}", key.replace('-', "_"))
            } else {
                let known: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
                format!("; known settings: {}", known.join(", "))
            };
            bad(
                &format!("{key} in {path}"),
                format!("is not a setting{hint}"),
            )
        }
        figment::error::Kind::InvalidType(actual, _) if !key.is_empty() => bad(
            &format!("{key} in {path}"),
            format!("must be a string, a number or a boolean, not {actual}"),
        ),
        kind => bad(setting, format!("{path}: {kind}")),
    }
}

/// Picks each setting from its flag or variable, else the file.
struct Layers {
    given: Given,
    file: Option<FileSettings>,
}

impl Layers {
    fn pick(&self, key: &str) -> Option<(String, Origin)> {
        self.given
            .get(key)
            .or_else(|| self.file.as_ref().and_then(|f| f.get(key)))
    }

    fn duration(&self, key: &str, default: Duration) -> Result<(Duration, Origin), SettingsError> {
        match self.pick(key) {
            Some((v, origin)) => parse_duration(&v)
                .map(|d| (d, origin.clone()))
                .map_err(|m| bad(&origin, m)),
            None => Ok((default, flag_of(key))),
        }
    }
}

impl Settings {
    /// Resolves flags and `SHARDCAR_*` variables (as `given`) over the settings file
    /// (`--config` or `SHARDCAR_CONFIG`) over defaults, and validates the result. `env` is read
    /// for the standard variables only (`RUST_LOG`, `OTEL_*`).
    ///
    /// # Errors
    /// The first setting that cannot be used, named where it came from.
    pub fn resolve(given: Given, env: &HashMap<String, String>) -> Result<Settings, SettingsError> {
        let file = given
            .config
            .clone()
            .map(|(path, origin)| FileSettings::load(&path, &origin))
            .transpose()?;
        Settings::resolve_layers(given, env, file)
    }

    /// [`Settings::resolve`] with the file already read.
    ///
    /// # Errors
    /// The first setting that cannot be used, named where it came from.
    pub fn resolve_layers(
        given: Given,
        env: &HashMap<String, String>,
        file: Option<FileSettings>,
    ) -> Result<Settings, SettingsError> {
        let layers = Layers { given, file };
        let zk = match layers.pick("zk") {
            Some((v, origin)) => {
                let v = v.trim().to_string();
                if v.split(',')
                    .any(|h| h.trim().is_empty() || !h.contains(':'))
                {
                    return Err(bad(
                        &origin,
                        format!(
                            "{v:?} must be ZooKeeper's connect string, host:port[,host:port...]"
                        ),
                    ));
                }
                Some(v)
            }
            None => None,
        };
        let namespace = match layers.pick("namespace") {
            Some((v, origin)) => {
                let v = v.trim_matches('/').to_string();
                if v.is_empty() || v.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
                    return Err(bad(
                        &origin,
                        "must be a non-empty ZooKeeper path like shardcar or apps/jobs",
                    ));
                }
                v
            }
            None => "shardcar".to_string(),
        };
        let listen = match layers.pick("listen") {
            Some((v, origin)) => {
                check_listen(&v).map_err(|m| bad(&origin, m))?;
                v
            }
            None => DEFAULT_LISTEN.to_string(),
        };
        let advertise_ip = match layers.pick("advertise_ip") {
            Some((v, origin)) => {
                let ip: Ipv4Addr = v
                    .trim()
                    .parse()
                    .map_err(|_| bad(&origin, format!("{v:?} must be an IPv4 address")))?;
                if ip.is_unspecified() {
                    return Err(bad(
                        &origin,
                        "0.0.0.0 cannot identify a server; give this host's address",
                    ));
                }
                ip.to_string()
            }
            None => crate::net::detect_ip(),
        };
        let (session_timeout, origin) =
            layers.duration("session_timeout", Duration::from_secs(10))?;
        if session_timeout < Duration::from_secs(2) || session_timeout > Duration::from_secs(120) {
            return Err(bad(&origin, "must be between 2s and 120s"));
        }
        let (connection_timeout, origin) =
            layers.duration("connection_timeout", Duration::from_secs(15))?;
        if connection_timeout.is_zero() {
            return Err(bad(&origin, "must be longer than zero"));
        }
        let (zk_warm_up, origin) = layers.duration("zk_warm_up", Duration::from_millis(2))?;
        if zk_warm_up > Duration::from_millis(100) {
            return Err(bad(
                &origin,
                "must be at most 100ms: by then ZooKeeper's threads have gone back to sleep",
            ));
        }
        let (claim_ahead, origin) = layers.duration("claim_ahead", Duration::from_millis(100))?;
        if claim_ahead > Duration::from_millis(500) {
            return Err(bad(
                &origin,
                "must be at most 500ms: a leader keeps its reshards off the claim lead before each fire instant, and a longer lead would leave jobs that fire every second hardly a moment to reshard in",
            ));
        }
        let digest = match layers.pick("digest") {
            Some((v, _)) if v.contains(':') => Some(v),
            Some((_, origin)) => return Err(bad(&origin, "must be user:password")),
            None => None,
        };
        let (lease, origin) = layers.duration("lease", session_timeout / 2)?;
        if lease.is_zero() {
            return Err(bad(&origin, "must be longer than zero"));
        }
        let (keepalive_interval, origin) =
            layers.duration("keepalive_interval", Duration::from_secs(1))?;
        if keepalive_interval.is_zero() {
            return Err(bad(&origin, "must be longer than zero"));
        }
        let (keepalive_timeout, origin) =
            layers.duration("keepalive_timeout", Duration::from_secs(3))?;
        if keepalive_timeout.is_zero() {
            return Err(bad(&origin, "must be longer than zero"));
        }
        let (shutdown_grace, origin) = layers.duration(
            "shutdown_grace",
            Duration::from_secs(10).max(lease.min(session_timeout / 2)),
        )?;
        let effective_lease = lease.min(session_timeout / 2);
        if shutdown_grace < effective_lease {
            return Err(bad(
                &origin,
                format!(
                    "must be at least the lease ({} ms): a drain waits for its workers' leases to run out",
                    effective_lease.as_millis()
                ),
            ));
        }
        // --log-level, else RUST_LOG, else SHARDCAR_LOG_LEVEL or the file.
        let flag = flag_of("log_level");
        let log_level = match layers.pick("log_level") {
            Some(picked) if picked.1 == flag => Some(picked),
            picked => env
                .get("RUST_LOG")
                .filter(|v| !v.is_empty())
                .map(|v| (v.clone(), "RUST_LOG".to_string()))
                .or(picked),
        };
        let log_level = match log_level {
            Some((v, origin)) => {
                tracing_subscriber::EnvFilter::try_new(&v).map_err(|e| {
                    bad(
                        &origin,
                        format!("{v:?} is not a log filter like info or shardcar=debug,info: {e}"),
                    )
                })?;
                v
            }
            None => "info".to_string(),
        };
        let log_format = match layers.pick("log_format") {
            None => LogFormat::Text,
            Some((v, _)) if v == "text" => LogFormat::Text,
            Some((v, _)) if v == "json" => LogFormat::Json,
            Some((v, origin)) => return Err(bad(&origin, format!("{v:?} must be text or json"))),
        };
        let http_listen = access::http_listen(&layers)?;
        let access = access::access(&layers, &listen, http_listen.as_ref())?;
        let history_size = match layers.pick("history_size") {
            Some((v, origin)) => v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n <= MAX_HISTORY_SIZE)
                .ok_or_else(|| {
                    bad(
                        &origin,
                        format!("{v:?} must be a number from 0 to {MAX_HISTORY_SIZE}"),
                    )
                })?,
            None => DEFAULT_HISTORY_SIZE,
        };
        let history_file = match layers.pick("history_file") {
            Some((v, origin)) => {
                let path = std::path::PathBuf::from(&v);
                let dir = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                    _ => std::path::PathBuf::from("."),
                };
                if v.is_empty() || path.is_dir() {
                    return Err(bad(&origin, format!("{v:?} must be a file path")));
                }
                if !dir.is_dir() {
                    return Err(bad(
                        &origin,
                        format!("the directory {} does not exist", dir.display()),
                    ));
                }
                Some(path)
            }
            None => None,
        };
        let endpoint = layers.pick("otlp_endpoint").or_else(|| {
            [
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ]
            .into_iter()
            .find_map(|var| {
                env.get(var)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| (v.clone(), Origin::from(var.to_string())))
            })
        });
        let telemetry = endpoint.map(|(v, origin)| Otlp {
            endpoint: v.trim().to_string(),
            origin,
            service_name: env
                .get("OTEL_SERVICE_NAME")
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "shardcar".to_string()),
        });
        let tracing_db = layers
            .pick("tracing_db")
            .map(|(url, origin)| TracingDbUrl { url, origin });
        let jobs = layers
            .file
            .as_ref()
            .map(|f| f.jobs.clone())
            .unwrap_or_default();
        let typed_jobs = match layers.pick("typed_jobs") {
            None => TypedJobsSetting::All,
            Some((v, origin)) => match v.trim() {
                "all" => TypedJobsSetting::All,
                "none" => TypedJobsSetting::None,
                "declared" => TypedJobsSetting::Declared,
                _ => return Err(bad(&origin, format!("{v:?} must be all, declared or none"))),
            },
        };
        Ok(Settings {
            typed_jobs,
            jobs,
            zk,
            namespace,
            listen,
            advertise_ip,
            session_timeout,
            connection_timeout,
            zk_warm_up,
            claim_ahead,
            digest,
            lease,
            keepalive_interval,
            keepalive_timeout,
            shutdown_grace,
            log_level,
            log_format,
            http_listen: http_listen.map(|(addr, _)| addr),
            access,
            history_size,
            history_file,
            telemetry,
            tracing_db,
        })
    }
}

/// Checks a gRPC listen address: `host:port` or `unix:///path`.
fn check_listen(v: &str) -> Result<(), String> {
    if let Some(path) = v.strip_prefix("unix://") {
        if path.is_empty() {
            return Err("unix:// needs a socket path, e.g. unix:///run/shardcar.sock".into());
        }
        Ok(())
    } else if v.parse::<std::net::SocketAddr>().is_err() {
        Err(format!(
            "{v:?} must be host:port (e.g. 127.0.0.1:50061) or unix:///path"
        ))
    } else {
        Ok(())
    }
}

#[path = "config_access.rs"]
mod access;
pub use access::{check_unix_socket, world_accessible};

#[cfg(test)]
#[path = "config_tests.rs"]
pub(crate) mod tests;
