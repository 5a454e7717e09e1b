//! Sidecar settings: parsed from flags, then `SHARDCAR_*` environment variables, and
//! validated before anything binds. The environment is passed in as a map so tests never
//! mutate the process environment.

use std::collections::HashMap;
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
    pub log_level: String,
    pub log_format: LogFormat,
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

/// Parses `10s`, `500ms`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(pos) => t.split_at(pos),
        None => (t, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 10s, 500ms or 2m"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("{text:?} has an unknown unit (use ms, s, m or h)")),
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("{text:?} is not a positive duration"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Raw values as given by flags (each `None` when the flag was absent).
#[derive(Debug, Default, Clone)]
pub struct Flags {
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
    pub log_level: Option<String>,
    pub log_format: Option<String>,
}

impl Settings {
    /// Resolves flags over environment variables over defaults, and validates the result.
    ///
    /// # Errors
    /// The first setting that cannot be used, named as `--flag` (or the variable it came from).
    pub fn resolve(flags: Flags, env: &HashMap<String, String>) -> Result<Settings, SettingsError> {
        let pick = |flag: Option<String>, name: &str, var: &str| -> Option<(String, String)> {
            flag.map(|v| (v, format!("--{name}"))).or_else(|| {
                env.get(var)
                    .filter(|v| !v.is_empty())
                    .map(|v| (v.clone(), var.to_string()))
            })
        };
        let duration = |value: Option<(String, String)>,
                        default: Duration|
         -> Result<Duration, SettingsError> {
            match value {
                Some((v, origin)) => parse_duration(&v).map_err(|m| bad(&origin, m)),
                None => Ok(default),
            }
        };
        let zk = pick(flags.zk, "zk", "SHARDCAR_ZK").map(|(v, origin)| {
            let v = v.trim().to_string();
            if v.split(',')
                .any(|h| h.trim().is_empty() || !h.contains(':'))
            {
                Err(bad(
                    &origin,
                    format!("{v:?} must be ZooKeeper's connect string, host:port[,host:port...]"),
                ))
            } else {
                Ok(v)
            }
        });
        let zk = zk.transpose()?;
        let namespace = match pick(flags.namespace, "namespace", "SHARDCAR_NAMESPACE") {
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
        let listen = match pick(flags.listen, "listen", "SHARDCAR_LISTEN") {
            Some((v, origin)) => {
                if let Some(path) = v.strip_prefix("unix://") {
                    if path.is_empty() {
                        return Err(bad(
                            &origin,
                            "unix:// needs a socket path, e.g. unix:///run/shardcar.sock",
                        ));
                    }
                } else if v.parse::<std::net::SocketAddr>().is_err() {
                    return Err(bad(
                        &origin,
                        format!("{v:?} must be host:port (e.g. 127.0.0.1:50061) or unix:///path"),
                    ));
                }
                v
            }
            None => DEFAULT_LISTEN.to_string(),
        };
        let advertise_ip = match pick(flags.advertise_ip, "advertise-ip", "SHARDCAR_ADVERTISE_IP") {
            Some((v, origin)) => {
                let ip: Ipv4Addr = v
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
        let session_timeout = duration(
            pick(
                flags.session_timeout,
                "session-timeout",
                "SHARDCAR_SESSION_TIMEOUT",
            ),
            Duration::from_secs(10),
        )?;
        if session_timeout < Duration::from_secs(2) || session_timeout > Duration::from_secs(120) {
            return Err(bad("--session-timeout", "must be between 2s and 120s"));
        }
        let connection_timeout = duration(
            pick(
                flags.connection_timeout,
                "connection-timeout",
                "SHARDCAR_CONNECTION_TIMEOUT",
            ),
            Duration::from_secs(15),
        )?;
        let digest = pick(flags.digest, "digest", "SHARDCAR_DIGEST")
            .map(|(v, origin)| {
                if v.contains(':') {
                    Ok(v)
                } else {
                    Err(bad(&origin, "must be user:password"))
                }
            })
            .transpose()?;
        let lease = duration(
            pick(flags.lease, "lease", "SHARDCAR_LEASE"),
            session_timeout / 2,
        )?;
        if lease.is_zero() {
            return Err(bad("--lease", "must be longer than zero"));
        }
        let keepalive_interval = duration(
            pick(
                flags.keepalive_interval,
                "keepalive-interval",
                "SHARDCAR_KEEPALIVE_INTERVAL",
            ),
            Duration::from_secs(1),
        )?;
        let keepalive_timeout = duration(
            pick(
                flags.keepalive_timeout,
                "keepalive-timeout",
                "SHARDCAR_KEEPALIVE_TIMEOUT",
            ),
            Duration::from_secs(3),
        )?;
        let log_level = pick(flags.log_level, "log-level", "SHARDCAR_LOG_LEVEL")
            .map(|(v, _)| v)
            .unwrap_or_else(|| "info".into());
        let log_format = match pick(flags.log_format, "log-format", "SHARDCAR_LOG_FORMAT") {
            None => LogFormat::Text,
            Some((v, _)) if v == "text" => LogFormat::Text,
            Some((v, _)) if v == "json" => LogFormat::Json,
            Some((v, origin)) => return Err(bad(&origin, format!("{v:?} must be text or json"))),
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
            log_level,
            log_format,
        })
    }
}

#[cfg(test)]
mod tests {
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
        assert!(parse_duration("5y").is_err());
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
                "--session-timeout",
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
}
