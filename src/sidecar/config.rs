//! A sidecar's configuration: the settings as `config` resolved them (plain values), and each
//! subsystem's own config built from them here, where the subsystems are composed. Each
//! subsystem checks what only it knows (`ops::telemetry` the endpoint, `ops::tracing_db` the
//! URL, `api` the declared jobs, `exec` which typed jobs to run), still before anything binds;
//! what it refuses is named as the settings name it, a [`SettingsError`] (exit 64).

use crate::api::jobfile::{self, DeclaredJob};
use crate::config::{Settings, SettingsError, TypedJobsSetting};
use crate::exec::TypedJobs;
use crate::ops::telemetry::TelemetrySettings;
use crate::ops::tracing_db::TracingDbSettings;

/// What [`super::run`] needs: the settings, and the configs of the subsystems built from them.
#[derive(Debug, Clone)]
pub struct Config {
    /// The settings, as resolved; the subsystems' configs below are built from their plain
    /// values.
    pub settings: Settings,
    /// Where execution spans are exported, if anywhere.
    pub telemetry: Option<TelemetrySettings>,
    /// ElasticJob's tracing tables on PostgreSQL, if configured.
    pub tracing_db: Option<TracingDbSettings>,
    /// Which SCRIPT and HTTP jobs this sidecar runs itself.
    pub typed_jobs: TypedJobs,
    /// The jobs the settings file declares, read and validated, created at start.
    pub jobs: Vec<DeclaredJob>,
}

impl Config {
    /// Builds each subsystem's config from `settings`.
    ///
    /// # Errors
    /// The first value a subsystem refuses, named where it came from (`jobs[0] (clean) in
    /// /etc/shardcar.toml`, `--otlp-endpoint`, `SHARDCAR_TRACING_DB`).
    pub fn prepare(settings: Settings) -> Result<Config, SettingsError> {
        let jobs = settings
            .jobs
            .iter()
            .map(|job| {
                jobfile::declared(&job.place, job.table.clone(), job.overwrite)
                    .map_err(|message| SettingsError::new(&job.place, message))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let telemetry = settings
            .telemetry
            .as_ref()
            .map(|otlp| {
                TelemetrySettings::new(&otlp.endpoint, &otlp.service_name)
                    .map_err(|message| SettingsError::new(&otlp.origin, message))
            })
            .transpose()?;
        let tracing_db = settings
            .tracing_db
            .as_ref()
            .map(|db| {
                TracingDbSettings::parse(&db.url, &db.origin)
                    .map_err(|message| SettingsError::new(&db.origin, message))
            })
            .transpose()?;
        let typed_jobs = match settings.typed_jobs {
            TypedJobsSetting::All => TypedJobs::All,
            TypedJobsSetting::None => TypedJobs::None,
            TypedJobsSetting::Declared => {
                TypedJobs::Declared(jobs.iter().map(|j| j.config.job_name.clone()).collect())
            }
        };
        Ok(Config {
            settings,
            telemetry,
            tracing_db,
            typed_jobs,
            jobs,
        })
    }
}

#[cfg(test)]
mod tests;
