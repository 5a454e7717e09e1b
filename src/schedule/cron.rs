//! Quartz cron expressions, as ElasticJob's `config.cron` holds them, evaluated in the job's
//! time zone (ElasticJob's `config.timeZone`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, FixedOffset, Local, TimeZone, Utc};
use croner::parser::{CronParser, Seconds};
use croner::Cron;

const FIELDS: [&str; 7] = [
    "second",
    "minute",
    "hour",
    "day-of-month",
    "month",
    "day-of-week",
    "year",
];

/// A cron expression or time zone that cannot be used; the message names the bad part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("cron expression {cron:?} has {count} fields; Quartz expects 6 or 7: second minute hour day-of-month month day-of-week [year], e.g. \"0/5 * * * * ?\"")]
    FieldCount { cron: String, count: usize },
    #[error("cron expression {cron:?}: {reason}")]
    DayFields { cron: String, reason: &'static str },
    #[error("cron expression {cron:?}: invalid {field} field {value:?}: {reason}")]
    Field {
        cron: String,
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("cron expression {cron:?} is invalid: {reason}")]
    Invalid { cron: String, reason: String },
    #[error("time zone {zone:?} is not valid: use GMT, GMT+08:00, GMT-5, UTC or an IANA name such as Asia/Shanghai (empty means the host's local time)")]
    TimeZone { zone: String },
}

/// The zone a schedule is evaluated in.
#[derive(Debug, Clone)]
enum Zone {
    Local,
    Fixed(FixedOffset),
    /// An IANA zone from the database compiled into the binary (jiff's bundled copy): the
    /// same rules on every host, whatever its own zoneinfo holds.
    Named(jiff::tz::TimeZone),
}

/// Parses a time zone as ElasticJob users write it: `""` (local), `GMT`, `UTC`,
/// `GMT±H`, `GMT±HH`, `GMT±H:MM`, `GMT±HH:MM`, `GMT±HHMM` (Java's custom ids), or an IANA name.
fn parse_zone(zone: &str) -> Result<Zone, CronError> {
    let bad = || CronError::TimeZone {
        zone: zone.to_owned(),
    };
    match zone {
        "" => return Ok(Zone::Local),
        "GMT" | "UTC" | "Z" => return Ok(Zone::Fixed(FixedOffset::east_opt(0).ok_or_else(bad)?)),
        _ => {}
    }
    if let Some(rest) = zone.strip_prefix("GMT") {
        let (sign, digits) = match rest.as_bytes().first() {
            Some(b'+') => (1, &rest[1..]),
            Some(b'-') => (-1, &rest[1..]),
            _ => return Err(bad()),
        };
        let (h, m) = match digits.split_once(':') {
            Some((h, m)) if m.len() == 2 => (h, m),
            Some(_) => return Err(bad()),
            None if digits.len() == 4 => (&digits[..2], &digits[2..]),
            None => (digits, "0"),
        };
        if h.is_empty() || h.len() > 2 || !h.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let h: i32 = h.parse().map_err(|_| bad())?;
        let m: i32 = m.parse().map_err(|_| bad())?;
        if h > 23 || m > 59 {
            return Err(bad());
        }
        return FixedOffset::east_opt(sign * (h * 3600 + m * 60))
            .map(Zone::Fixed)
            .ok_or_else(bad);
    }
    // The database finds names whatever their case; Java's (and so ElasticJob's) does not, and
    // neither does this: `asia/shanghai` is refused, not read as Asia/Shanghai.
    match jiff::tz::TimeZone::get(zone) {
        Ok(named) if named.iana_name() == Some(zone) => Ok(Zone::Named(named)),
        _ => Err(bad()),
    }
}

/// `t` as an instant of jiff's, seen in `zone`.
fn zoned(t: DateTime<Utc>, zone: &jiff::tz::TimeZone) -> Option<jiff::Zoned> {
    jiff::Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32)
        .ok()
        .map(|at| at.to_zoned(zone.clone()))
}

/// Checks a time zone without a cron expression.
///
/// # Errors
/// [`CronError::TimeZone`] for a zone that is neither empty, a `GMT`/`UTC` form, nor IANA.
pub fn validate_time_zone(zone: &str) -> Result<(), CronError> {
    parse_zone(zone).map(|_| ())
}

/// A parsed Quartz cron expression in its time zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expression: String,
    time_zone: String,
    /// Shared with every schedule of the same pattern (see [`shared_pattern`]).
    cron: Arc<Cron>,
    zone: Zone,
}

impl PartialEq for CronSchedule {
    fn eq(&self, o: &Self) -> bool {
        self.expression == o.expression && self.time_zone == o.time_zone
    }
}

/// The parsed `pattern`, shared by every schedule that has it: a parsed pattern holds a few
/// KiB of bit fields (the year's alone is 10,000 bytes), and a sidecar may run thousands of
/// jobs on a handful of patterns. Entries no schedule holds any more are dropped as new
/// patterns come.
fn shared_pattern(pattern: &str) -> Result<Arc<Cron>, croner::errors::CronError> {
    static PATTERNS: std::sync::OnceLock<Mutex<HashMap<String, std::sync::Weak<Cron>>>> =
        std::sync::OnceLock::new();
    let mut patterns = PATTERNS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(cron) = patterns.get(pattern).and_then(std::sync::Weak::upgrade) {
        return Ok(cron);
    }
    let cron = Arc::new(parser().parse(pattern)?);
    patterns.retain(|_, held| held.strong_count() > 0);
    patterns.insert(pattern.to_owned(), Arc::downgrade(&cron));
    Ok(cron)
}

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Required)
        .alternative_weekdays(true)
        .sloppy_ranges(true)
        .dom_and_dow(true)
        .build()
}

impl CronSchedule {
    /// Parses a Quartz expression, to be evaluated in `time_zone` (see [`validate_time_zone`]).
    ///
    /// Quartz's rules apply: 6 or 7 fields, and exactly one of day-of-month and day-of-week is
    /// `?` (Quartz, and so every Java peer, rejects anything else). `L-n` is not supported.
    ///
    /// # Errors
    /// [`CronError`] naming the field or the zone that is wrong.
    pub fn parse(cron: &str, time_zone: &str) -> Result<CronSchedule, CronError> {
        let zone = parse_zone(time_zone)?;
        let fields: Vec<&str> = cron.split_whitespace().collect();
        if !(6..=7).contains(&fields.len()) {
            return Err(CronError::FieldCount {
                cron: cron.to_owned(),
                count: fields.len(),
            });
        }
        let field_err = |i: usize, reason: String| CronError::Field {
            cron: cron.to_owned(),
            field: FIELDS[i],
            value: fields[i].to_owned(),
            reason,
        };
        for (i, f) in fields.iter().enumerate() {
            if f.contains('?') && i != 3 && i != 5 {
                return Err(field_err(
                    i,
                    "'?' is only allowed in day-of-month and day-of-week".into(),
                ));
            }
            if f.contains('?') && *f != "?" {
                return Err(field_err(i, "'?' must stand alone".into()));
            }
            if i == 3 && f.to_ascii_uppercase().starts_with("L-") {
                return Err(field_err(
                    i,
                    "'L-n' (n days before the last day) is not supported".into(),
                ));
            }
        }
        match (fields[3] == "?", fields[5] == "?") {
            (true, false) | (false, true) => {}
            (true, true) => {
                return Err(CronError::DayFields {
                    cron: cron.to_owned(),
                    reason: "only one of day-of-month and day-of-week may be '?'",
                })
            }
            (false, false) => {
                return Err(CronError::DayFields {
                    cron: cron.to_owned(),
                    reason: "one of day-of-month and day-of-week must be '?' (Quartz rule), e.g. \"0 0 12 * * ?\" or \"0 0 12 ? * MON\"",
                })
            }
        }
        // Quartz reads a lone `L` in day-of-week as the last day of the week, Saturday.
        let mut normalized: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
        if normalized[5].eq_ignore_ascii_case("L") {
            normalized[5] = "7".into();
        }
        let pattern = normalized.join(" ");
        let cron_parsed = shared_pattern(&pattern).map_err(|e| {
            // Name the first field that fails on its own.
            let base = ["0", "0", "0", "*", "*", "*", "*"];
            for i in 0..normalized.len() {
                let mut probe: Vec<&str> = base[..normalized.len()].to_vec();
                probe[i] = &normalized[i];
                if let Err(fe) = parser().parse(&probe.join(" ")) {
                    return field_err(i, fe.to_string());
                }
            }
            CronError::Invalid {
                cron: cron.to_owned(),
                reason: e.to_string(),
            }
        })?;
        Ok(CronSchedule {
            expression: cron.to_owned(),
            time_zone: time_zone.to_owned(),
            cron: cron_parsed,
            zone,
        })
    }

    /// The expression as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The time zone as given.
    pub fn time_zone(&self) -> &str {
        &self.time_zone
    }

    /// The first fire instant strictly after `t`, or `None` if there is none (e.g. a year in
    /// the past). Across a DST gap a wall-clock time that does not exist fires at the first
    /// instant after the gap; in a repeated hour a fixed time fires once.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        fn next<Z: TimeZone>(c: &Cron, t: DateTime<Z>) -> Option<DateTime<Utc>> {
            c.find_next_occurrence(&t, false)
                .ok()
                .map(|n| n.with_timezone(&Utc))
        }
        match &self.zone {
            Zone::Local => next(&self.cron, t.with_timezone(&Local)),
            Zone::Fixed(z) => next(&self.cron, t.with_timezone(z)),
            Zone::Named(z) => {
                let n = self.cron.find_next_occurrence(&zoned(t, z)?, false).ok()?;
                let at = n.timestamp();
                DateTime::from_timestamp(at.as_second(), at.subsec_nanosecond() as u32)
            }
        }
    }
}

impl CronSchedule {
    /// The next `n` fire instants strictly after `t` (fewer when the schedule ends).
    pub fn next_times(&self, t: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(n);
        let mut at = t;
        while out.len() < n {
            match self.next_after(at) {
                Some(next) => {
                    out.push(next);
                    at = next;
                }
                None => break,
            }
        }
        out
    }

    /// An instant as the wall clock of this schedule's time zone shows it.
    pub fn in_zone(&self, t: DateTime<Utc>) -> DateTime<FixedOffset> {
        match &self.zone {
            Zone::Local => t.with_timezone(&Local).fixed_offset(),
            Zone::Fixed(z) => t.with_timezone(z).fixed_offset(),
            // Every zone's offset is within a day of UTC, and jiff's instants span years
            // -9999 to 9999: UTC is shown only outside both.
            Zone::Named(z) => zoned(t, z)
                .and_then(|at| FixedOffset::east_opt(at.offset().seconds()))
                .map_or_else(|| t.fixed_offset(), |offset| t.with_timezone(&offset)),
        }
    }
}

#[cfg(test)]
mod tests;
