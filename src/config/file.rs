//! The settings file (`--config`, `SHARDCAR_CONFIG`): TOML whose keys are the settings (any
//! other refused, named with a hint), each value taken as text, and the `[[jobs]]` tables it
//! declares, kept as written with where they are.

use std::collections::BTreeMap;

use super::catalog::{FileLayer, SETTINGS};
use super::{bad, Origin, SettingsError};

/// A settings file value: TOML strings, numbers and booleans are all taken as text
/// (`session_timeout = 6` and `= "6s"` both work); anything else is refused naming its TOML type.
#[derive(Debug)]
pub(super) struct FileValue(pub(super) String);

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

/// The settings read from a TOML file, by key, as text, and the jobs it declares.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct FileSettings {
    path: String,
    values: BTreeMap<String, String>,
    pub(super) jobs: Vec<JobTable>,
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

    pub(super) fn get(&self, key: &str) -> Option<(String, Origin)> {
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
