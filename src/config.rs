//! Sidecar settings: each one taken from its flag, else its `SHARDCAR_*` environment variable,
//! else the TOML file given by `--config` (or `SHARDCAR_CONFIG`), else its default; all validated
//! before anything binds, an error naming the setting where it came from (`--listen`,
//! `SHARDCAR_LISTEN`, `listen in /etc/shardcar.toml`). The environment is passed in as a map so
//! tests never mutate the process environment.

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
    /// `host:port` for the Prometheus `/metrics` endpoint; `None`: no endpoint.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Finished executions kept in memory for `ListExecutions`.
    pub history_size: usize,
    /// Where finished executions are appended as JSON lines, if anywhere.
    pub history_file: Option<std::path::PathBuf>,
    /// Where execution spans are exported (OTLP/gRPC), if anywhere.
    pub telemetry: Option<crate::ops::telemetry::TelemetrySettings>,
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

fn bad(setting: &str, message: impl Into<String>) -> SettingsError {
    SettingsError {
        setting: setting.to_string(),
        message: message.into(),
    }
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

/// Raw values as given by flags (each `None` when the flag was absent).
#[derive(Debug, Default, Clone)]
pub struct Flags {
    pub config: Option<String>,
    pub zk: Option<String>,
    pub namespace: Option<String>,
    pub listen: Option<String>,
    pub advertise_ip: Option<String>,
    pub session_timeout: Option<String>,
    pub connection_timeout: Option<String>,
    pub digest: Option<String>,
    pub lease: Option<String>,
    pub keepalive_interval: Option<String>,
    pub keepalive_timeout: Option<String>,
    pub shutdown_grace: Option<String>,
    pub log_level: Option<String>,
    pub log_format: Option<String>,
    pub metrics_listen: Option<String>,
    pub history_size: Option<String>,
    pub history_file: Option<String>,
    pub otlp_endpoint: Option<String>,
}

/// Every setting: its TOML key (the flag is the key with `-`, the variable `SHARDCAR_` + the
/// key in upper case), the default, what it means, and an example value (as TOML). The README's
/// table is this list; so is the file `shardcar config` prints.
pub const SETTINGS: &[(&str, &str, &str, &str)] = &[
    ("zk", "(none: standalone)", "ZooKeeper connect string host:port[,host:port...]; without it the sidecar runs standalone (in-memory, one host)", r#""zk1:2181,zk2:2181,zk3:2181""#),
    ("namespace", "shardcar", "ZooKeeper namespace (ElasticJob's registry-center namespace), may contain '/'", r#""shardcar""#),
    ("listen", DEFAULT_LISTEN, "gRPC listen address: host:port or unix:///path", r#""127.0.0.1:50061""#),
    ("advertise_ip", "(detected)", "IPv4 address this sidecar registers as its server (servers/{ip}, instance ids)", r#""10.0.0.5""#),
    ("session_timeout", "10s", "ZooKeeper session timeout (2s to 120s)", r#""10s""#),
    ("connection_timeout", "15s", "how long to wait for ZooKeeper at start", r#""15s""#),
    ("digest", "(none)", "ZooKeeper digest credentials user:password; nodes then get creator-only ACLs", r#""user:password""#),
    ("lease", "half the session timeout", "worker lease length (capped at half the session timeout)", r#""5s""#),
    ("keepalive_interval", "1s", "HTTP/2 keepalive ping interval on worker connections", r#""1s""#),
    ("keepalive_timeout", "3s", "a worker that does not answer a ping within this long is dead", r#""3s""#),
    ("shutdown_grace", "10s", "SIGTERM: how long the drain may take (at least the lease); the process exits by then", r#""10s""#),
    ("log_level", "info", "log filter in RUST_LOG syntax (RUST_LOG is used when neither the flag is given)", r#""info""#),
    ("log_format", "text", "text or json", r#""text""#),
    ("metrics_listen", "(none: no endpoint)", "host:port of the Prometheus endpoint (GET /metrics)", r#""127.0.0.1:9464""#),
    ("history_size", "1000", "finished executions kept in memory for ListExecutions (0 to 1000000)", "1000"),
    ("history_file", "(none)", "file to append finished executions to, one JSON object per line", r#""/var/lib/shardcar/history.jsonl""#),
    ("otlp_endpoint", "(none: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else no export)", "OTLP/gRPC endpoint execution spans are exported to (service name: OTEL_SERVICE_NAME, else shardcar)", r#""http://127.0.0.1:4317""#),
];

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
    for (key, default, meaning, example) in SETTINGS {
        out.push_str(&format!(
            "\n# {meaning}.\n# Default: {default}.\n# {key} = {example}\n"
        ));
    }
    out
}

/// Where a raw value came from, as it is named in errors.
type Origin = String;

/// The settings read from a TOML file, by key, as text.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FileSettings {
    path: String,
    values: BTreeMap<String, String>,
}

impl FileSettings {
    /// Parses a TOML settings file's text; `path` is only used in messages.
    ///
    /// # Errors
    /// Invalid TOML (named as `setting`), an unknown key, or a value that is not a string or a
    /// number (named as `key in path`).
    pub fn parse(path: &str, text: &str, setting: &str) -> Result<FileSettings, SettingsError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
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
        let mut values = BTreeMap::new();
        for (key, value) in table {
            let origin = format!("{key} in {path}");
            if !SETTINGS.iter().any(|(k, ..)| *k == key) {
                let hint = if SETTINGS.iter().any(|(k, ..)| *k == key.replace('-', "_")) {
                    format!("; write it as {}", key.replace('-', "_"))
                } else {
                    let known: Vec<&str> = SETTINGS.iter().map(|(k, ..)| *k).collect();
                    format!("; known settings: {}", known.join(", "))
                };
                return Err(bad(&origin, format!("is not a setting{hint}")));
            }
            let text = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                other => {
                    return Err(bad(
                        &origin,
                        format!("must be a string or a number, not {}", other.type_str()),
                    ))
                }
            };
            values.insert(key, text);
        }
        Ok(FileSettings {
            path: path.to_string(),
            values,
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

/// Picks each setting from its flag, its variable, the file, in that order.
struct Layers<'a> {
    env: &'a HashMap<String, String>,
    file: Option<FileSettings>,
}

impl Layers<'_> {
    fn pick(&self, flag: Option<String>, key: &str) -> Option<(String, Origin)> {
        let var = format!("SHARDCAR_{}", key.to_ascii_uppercase());
        flag.map(|v| (v, format!("--{}", key.replace('_', "-"))))
            .or_else(|| {
                self.env
                    .get(&var)
                    .filter(|v| !v.is_empty())
                    .map(|v| (v.clone(), var))
            })
            .or_else(|| self.file.as_ref().and_then(|f| f.get(key)))
    }

    fn duration(
        &self,
        flag: Option<String>,
        key: &str,
        default: Duration,
    ) -> Result<(Duration, Origin), SettingsError> {
        match self.pick(flag, key) {
            Some((v, origin)) => parse_duration(&v)
                .map(|d| (d, origin.clone()))
                .map_err(|m| bad(&origin, m)),
            None => Ok((default, format!("--{}", key.replace('_', "-")))),
        }
    }
}

impl Settings {
    /// Resolves flags over environment variables over the settings file (`--config` or
    /// `SHARDCAR_CONFIG`) over defaults, and validates the result.
    ///
    /// # Errors
    /// The first setting that cannot be used, named where it came from.
    pub fn resolve(flags: Flags, env: &HashMap<String, String>) -> Result<Settings, SettingsError> {
        let config = flags
            .config
            .clone()
            .map(|v| (v, "--config".to_string()))
            .or_else(|| {
                env.get("SHARDCAR_CONFIG")
                    .filter(|v| !v.is_empty())
                    .map(|v| (v.clone(), "SHARDCAR_CONFIG".to_string()))
            });
        let file = config
            .map(|(path, origin)| FileSettings::load(&path, &origin))
            .transpose()?;
        Settings::resolve_layers(flags, env, file)
    }

    /// [`Settings::resolve`] with the file already read.
    ///
    /// # Errors
    /// The first setting that cannot be used, named where it came from.
    pub fn resolve_layers(
        flags: Flags,
        env: &HashMap<String, String>,
        file: Option<FileSettings>,
    ) -> Result<Settings, SettingsError> {
        let layers = Layers { env, file };
        let zk = match layers.pick(flags.zk, "zk") {
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
        let namespace = match layers.pick(flags.namespace, "namespace") {
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
        let listen = match layers.pick(flags.listen, "listen") {
            Some((v, origin)) => {
                check_listen(&v).map_err(|m| bad(&origin, m))?;
                v
            }
            None => DEFAULT_LISTEN.to_string(),
        };
        let advertise_ip = match layers.pick(flags.advertise_ip, "advertise_ip") {
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
        let (session_timeout, origin) = layers.duration(
            flags.session_timeout,
            "session_timeout",
            Duration::from_secs(10),
        )?;
        if session_timeout < Duration::from_secs(2) || session_timeout > Duration::from_secs(120) {
            return Err(bad(&origin, "must be between 2s and 120s"));
        }
        let (connection_timeout, origin) = layers.duration(
            flags.connection_timeout,
            "connection_timeout",
            Duration::from_secs(15),
        )?;
        if connection_timeout.is_zero() {
            return Err(bad(&origin, "must be longer than zero"));
        }
        let digest = match layers.pick(flags.digest, "digest") {
            Some((v, _)) if v.contains(':') => Some(v),
            Some((_, origin)) => return Err(bad(&origin, "must be user:password")),
            None => None,
        };
        let (lease, origin) = layers.duration(flags.lease, "lease", session_timeout / 2)?;
        if lease.is_zero() {
            return Err(bad(&origin, "must be longer than zero"));
        }
        let (keepalive_interval, origin) = layers.duration(
            flags.keepalive_interval,
            "keepalive_interval",
            Duration::from_secs(1),
        )?;
        if keepalive_interval.is_zero() {
            return Err(bad(&origin, "must be longer than zero"));
        }
        let (keepalive_timeout, origin) = layers.duration(
            flags.keepalive_timeout,
            "keepalive_timeout",
            Duration::from_secs(3),
        )?;
        if keepalive_timeout.is_zero() {
            return Err(bad(&origin, "must be longer than zero"));
        }
        let (shutdown_grace, origin) = layers.duration(
            flags.shutdown_grace,
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
        let log_level = match flags
            .log_level
            .map(|v| (v, "--log-level".to_string()))
            .or_else(|| {
                env.get("RUST_LOG")
                    .filter(|v| !v.is_empty())
                    .map(|v| (v.clone(), "RUST_LOG".to_string()))
            }) {
            Some(picked) => Some(picked),
            None => layers.pick(None, "log_level"),
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
        let log_format = match layers.pick(flags.log_format, "log_format") {
            None => LogFormat::Text,
            Some((v, _)) if v == "text" => LogFormat::Text,
            Some((v, _)) if v == "json" => LogFormat::Json,
            Some((v, origin)) => return Err(bad(&origin, format!("{v:?} must be text or json"))),
        };
        let metrics_listen = match layers.pick(flags.metrics_listen, "metrics_listen") {
            Some((v, origin)) => Some(v.trim().parse().map_err(|_| {
                bad(
                    &origin,
                    format!("{v:?} must be host:port, e.g. 127.0.0.1:9090"),
                )
            })?),
            None => None,
        };
        let history_size = match layers.pick(flags.history_size, "history_size") {
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
        let history_file = match layers.pick(flags.history_file, "history_file") {
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
        let endpoint = layers
            .pick(flags.otlp_endpoint, "otlp_endpoint")
            .or_else(|| {
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
        let telemetry = match endpoint {
            Some((v, origin)) => {
                let v = v.trim().to_string();
                let host = v
                    .strip_prefix("http://")
                    .or_else(|| v.strip_prefix("https://"))
                    .map(|rest| rest.split(['/', ':']).next().unwrap_or_default());
                if host.is_none_or(str::is_empty) {
                    return Err(bad(
                        &origin,
                        format!(
                            "{v:?} must be an http:// or https:// URL, e.g. http://127.0.0.1:4317"
                        ),
                    ));
                }
                let service_name = env
                    .get("OTEL_SERVICE_NAME")
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "shardcar".to_string());
                Some(crate::ops::telemetry::TelemetrySettings {
                    endpoint: v,
                    service_name,
                })
            }
            None => None,
        };
        Ok(Settings {
            zk,
            namespace,
            listen,
            advertise_ip,
            session_timeout,
            connection_timeout,
            digest,
            lease,
            keepalive_interval,
            keepalive_timeout,
            shutdown_grace,
            log_level,
            log_format,
            metrics_listen,
            history_size,
            history_file,
            telemetry,
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

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
