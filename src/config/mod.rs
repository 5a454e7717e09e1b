//! Sidecar settings: each one taken from its flag, else its `SHARDCAR_*` environment variable,
//! else the TOML file given by `--config` (or `SHARDCAR_CONFIG`), else its default; all validated
//! before anything binds, an error naming the setting where it came from (`--listen`,
//! `SHARDCAR_LISTEN`, `listen in /etc/shardcar.toml`).
//!
//! Each setting is declared once, in `settings!` (`catalog`): clap reads its flag and variable
//! (and says which it was), serde reads the file through figment and refuses unknown keys
//! (`file`), and the same list is the settings table of `docs/operations.md` and `shardcar
//! config`. Each value is picked from those layers with where it came from (`layers`), and
//! resolved and checked here (`access`: the HTTP listener and who may operate). The standard
//! variables (`RUST_LOG`, `OTEL_*`) are passed in as a map so tests never mutate the process
//! environment.
//!
//! The settings are plain values (text, numbers, durations, paths, enums of this module's own,
//! the file's `[[jobs]]` tables as written), each with where it came from when a subsystem may
//! still refuse it: this layer knows none of the subsystems it configures. Each of them builds
//! its own config from these values (`sidecar::Config::prepare`), still before anything binds,
//! and a value it refuses is named the same way, as a [`SettingsError`].

mod access;
mod catalog;
mod file;
mod layers;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

pub use access::{check_unix_socket, world_accessible};
pub use catalog::{example_file, RunArgs, Setting, SETTINGS};
pub use file::{FileSettings, JobTable};
pub use layers::{parse_duration, Given};

use layers::{flag_of, Layers, Origin};

/// The longest claim lead, and `claim_ahead`'s default: the lead of each instant is sized from
/// what the sidecar measures, within it (`schedule::ClaimLead`).
pub const CLAIM_AHEAD_DEFAULT: Duration = Duration::from_millis(500);

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
    /// A lead fixed for every instant (at most `claim_ahead`); `None`: sized for each instant.
    pub claim_lead: Option<Duration>,
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

/// The default number of finished executions kept in memory.
pub const DEFAULT_HISTORY_SIZE: usize = 1000;
/// The largest `history_size` accepted.
pub const MAX_HISTORY_SIZE: usize = 1_000_000;

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
        let (claim_ahead, origin) = layers.duration("claim_ahead", CLAIM_AHEAD_DEFAULT)?;
        if claim_ahead > CLAIM_AHEAD_DEFAULT {
            return Err(bad(
                &origin,
                "must be at most 500ms: a leader keeps its reshards off the claim lead before each fire instant, and a longer lead would leave jobs that fire every second hardly a moment to reshard in",
            ));
        }
        let claim_lead = match layers.pick("claim_lead") {
            None => None,
            Some((v, _)) if v.trim() == "auto" => None,
            Some((v, origin)) => {
                let lead = layers::parse_duration(&v)
                    .map_err(|e| bad(&origin, format!("must be auto or a duration: {e}")))?;
                if lead > claim_ahead {
                    return Err(bad(
                        &origin,
                        format!(
                            "must be at most claim_ahead ({}): raise claim_ahead or lower the lead",
                            humantime::format_duration(claim_ahead)
                        ),
                    ));
                }
                Some(lead)
            }
        };
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
            claim_lead,
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
