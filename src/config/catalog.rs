//! Every setting, declared once (`settings!`): from the one list come `shardcar run`'s flags and
//! their `SHARDCAR_*` variables, the settings file's keys, and the table that `docs/operations.md`,
//! `--help` and `shardcar config` (the example file) show.

use super::file::FileValue;

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
        pub(super) struct FileLayer {
            $(
                #[serde(default)]
                $key: Option<FileValue>,
            )*
            /// Jobs to create at start (`[[jobs]]` tables, in a job file's keys).
            #[serde(default)]
            pub(super) jobs: Vec<serde_yaml_ng::Value>,
        }

        impl FileLayer {
            pub(super) fn into_values(self) -> Vec<(&'static str, String)> {
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
        default: "500ms",
        meaning: "the longest lead before a cron instant at which its fires' items are claimed in ZooKeeper (their running nodes written), so that each trigger reaches its worker at the instant instead of a write later; the sidecar sizes each instant's lead within it from the fires due then and what recent claims took (0s: claim at the instant; at most 500ms)",
        example: r#""500ms""#,
    }
    claim_lead {
        env: "SHARDCAR_CLAIM_LEAD",
        value_name: "auto|DURATION",
        default: "auto",
        meaning: "the lead itself: auto sizes it for each instant within claim_ahead; a duration (at most claim_ahead) fixes it for every instant, for tests and for hosts whose figures are known",
        example: r#""auto""#,
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
