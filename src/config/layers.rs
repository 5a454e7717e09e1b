//! Where each setting's value comes from: its flag or `SHARDCAR_*` variable ([`Given`]), else the
//! settings file ([`FileSettings`]), else its default; each value with where it came from, as
//! errors name it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::catalog::SETTINGS;
use super::{bad, FileSettings, SettingsError};

/// Where a raw value came from, as it is named in errors.
pub(super) type Origin = String;

/// The flag a setting is given with.
pub(super) fn flag_of(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

/// Values given as flags or `SHARDCAR_*` variables, each with where it came from.
#[derive(Debug, Default, Clone)]
pub struct Given {
    pub(super) config: Option<(String, Origin)>,
    pub(super) values: BTreeMap<&'static str, (String, Origin)>,
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

    pub(super) fn get(&self, key: &str) -> Option<(String, Origin)> {
        self.values.get(key).cloned()
    }
}

/// Picks each setting from its flag or variable, else the file.
pub(super) struct Layers {
    pub(super) given: Given,
    pub(super) file: Option<FileSettings>,
}

impl Layers {
    pub(super) fn pick(&self, key: &str) -> Option<(String, Origin)> {
        self.given
            .get(key)
            .or_else(|| self.file.as_ref().and_then(|f| f.get(key)))
    }

    pub(super) fn duration(
        &self,
        key: &str,
        default: Duration,
    ) -> Result<(Duration, Origin), SettingsError> {
        match self.pick(key) {
            Some((v, origin)) => parse_duration(&v)
                .map(|d| (d, origin.clone()))
                .map_err(|m| bad(&origin, m)),
            None => Ok((default, flag_of(key))),
        }
    }
}

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
