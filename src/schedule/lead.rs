//! How long before an instant its claims go out ([`ClaimLead`]), sized from what the sidecar
//! measures.
//!
//! A job claims the run of a cron instant ahead of it (`docs/architecture.md`, "Claiming
//! ahead"), so that its trigger goes out at the instant itself rather than a ZooKeeper round
//! trip after it. The claims of an instant are only as useful as they are done by then: when a
//! thousand jobs fire at one instant, their thousand claims take hundreds of milliseconds of the
//! sidecar's CPU and of ZooKeeper's, and a fixed lead that suits one job (tens of milliseconds)
//! leaves most of them to land after the instant. The lead of each instant is therefore sized
//! from two things: how many fires are due at it, and how long the claims of recent instants
//! took, from the notice to the last claim's commit, per fire. It stays within
//! [`ClaimLead::MIN`] and the configured `claim_ahead`, which is the longest lead (zero: no claim
//! goes ahead of its instant).
//!
//! The timer asks for the lead of its next instant ([`ClaimLead::lead`]) and says when it sent
//! an instant's notices ([`ClaimLead::noticed`]); each job's driver says when a claim of that
//! instant was answered ([`ClaimLead::claimed`]). Nothing here decides a run: a lead that is too
//! short only makes some triggers late by their claim's commit; one that is too long claims on
//! an older reading, which the fenced writes make safe either way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

/// The claims of one instant: when its notices went out, and when its last claim was answered.
#[derive(Debug, Clone, Copy)]
struct Claims {
    /// When its notices went out.
    noticed: Instant,
    /// How many fires it had.
    fires: usize,
    /// When its last claim was answered, if any was.
    last_claim: Option<Instant>,
}

#[derive(Debug)]
struct Estimate {
    /// The longest lead.
    cap: Duration,
    /// Milliseconds of claim span per fire, for instants of many fires (smoothed).
    per_fire_ms: f64,
    /// Milliseconds of claim span of an instant of few fires: about one commit (smoothed).
    base_ms: f64,
    /// The instants whose claims are still being counted, by instant.
    recent: BTreeMap<DateTime<Utc>, Claims>,
    /// A lead fixed by the settings (`claim_lead`), given to every instant instead of a sized one.
    fixed: Option<Duration>,
    /// The lead last given, for the jobs' decisions that must know it (see [`ClaimLead::current`]).
    last: Duration,
}

/// The sized claim lead, shared by the timer and the jobs; cheap to clone.
#[derive(Debug, Clone)]
pub struct ClaimLead {
    inner: Arc<Mutex<Estimate>>,
}

/// Instants with at least this many fires teach the per-fire cost; smaller ones the base.
const MANY: usize = 16;
/// How much of a new measurement a smoothed figure takes.
const WEIGHT: f64 = 0.3;
/// The lead is this many times the span the claims are expected to take.
const MARGIN: f64 = 1.5;
/// The per-fire cost assumed before any instant of many fires was measured: on the 2-core
/// machine of `docs/benchmarks.md`, a thousand claims at one instant took about 300 ms.
const PER_FIRE_MS_AT_START: f64 = 0.3;
/// The base assumed before anything was measured: a commit on an idle ensemble.
const BASE_MS_AT_START: f64 = 5.0;
/// An instant whose claims are not all answered this long after its notice is counted as is.
const COUNT_FOR: Duration = Duration::from_secs(2);

impl ClaimLead {
    /// The shortest lead: room for one commit when ZooKeeper's disk is slow.
    pub const MIN: Duration = Duration::from_millis(50);

    /// A lead of at most `cap` (zero: claims never go ahead of their instant).
    pub fn new(cap: Duration) -> ClaimLead {
        ClaimLead {
            inner: Arc::new(Mutex::new(Estimate {
                cap,
                per_fire_ms: PER_FIRE_MS_AT_START,
                base_ms: BASE_MS_AT_START,
                recent: BTreeMap::new(),
                fixed: None,
                last: Self::MIN.min(cap),
            })),
        }
    }

    /// A lead of `lead` before every instant, whatever the fires due or the claims measured
    /// (`claim_lead` set to a duration).
    pub fn fixed(lead: Duration) -> ClaimLead {
        let this = ClaimLead::new(lead);
        {
            let mut e = this.lock();
            e.fixed = Some(lead);
            e.last = lead;
        }
        this
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Estimate> {
        // Figures only: a panic while holding the lock leaves at worst a stale estimate.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The longest lead; zero when claims never go ahead.
    pub fn cap(&self) -> Duration {
        self.lock().cap
    }

    /// The lead for an instant at which `fires` schedules fire.
    pub fn lead(&self, fires: usize) -> Duration {
        let mut e = self.lock();
        let lead = e.lead(fires);
        e.last = lead;
        lead
    }

    /// The lead given to the latest instant: what a job's decisions that depend on the lead
    /// (the leader's quiet time around fire instants) take it to be.
    pub fn current(&self) -> Duration {
        self.lock().last
    }

    /// The notices of `instant`, `fires` of them, went out at `at`.
    pub fn noticed(&self, instant: DateTime<Utc>, fires: usize, at: Instant) {
        let mut e = self.lock();
        if e.fixed.is_some() {
            return; // nothing to learn: the lead is the settings'
        }
        e.count_done(at);
        e.recent.insert(
            instant,
            Claims {
                noticed: at,
                fires,
                last_claim: None,
            },
        );
    }

    /// A claim of `instant` was answered (landed or refused), now.
    #[allow(
        clippy::disallowed_methods,
        reason = "the claims' timing is measured as they are answered: an I/O edge"
    )]
    pub fn claimed(&self, instant: DateTime<Utc>) {
        self.claimed_at(instant, Instant::now());
    }

    /// [`ClaimLead::claimed`] at `at`.
    pub fn claimed_at(&self, instant: DateTime<Utc>, at: Instant) {
        let mut e = self.lock();
        if let Some(i) = e.recent.get_mut(&instant) {
            i.last_claim = Some(i.last_claim.map_or(at, |l| l.max(at)));
        }
    }
}

impl Estimate {
    fn lead(&self, fires: usize) -> Duration {
        if let Some(lead) = self.fixed {
            return lead;
        }
        if self.cap.is_zero() {
            return Duration::ZERO;
        }
        let expected_ms = self.base_ms + self.per_fire_ms * fires as f64;
        // Whole milliseconds: finer would only be noise.
        let lead = Duration::from_millis((MARGIN * expected_ms).max(0.0) as u64);
        lead.clamp(ClaimLead::MIN.min(self.cap), self.cap)
    }

    /// Counts the instants noticed more than [`COUNT_FOR`] before `now`: each teaches the
    /// estimate what its claims took, from its notice to its last claim's answer.
    fn count_done(&mut self, now: Instant) {
        let done: Vec<DateTime<Utc>> = self
            .recent
            .iter()
            .filter(|(_, i)| now.saturating_duration_since(i.noticed) >= COUNT_FOR)
            .map(|(t, _)| *t)
            .collect();
        for t in done {
            let Some(i) = self.recent.remove(&t) else {
                continue;
            };
            let Some(last) = i.last_claim else {
                continue; // nothing was claimed ahead of it
            };
            let span_ms = last.saturating_duration_since(i.noticed).as_secs_f64() * 1000.0;
            if i.fires >= MANY {
                let per_fire = (span_ms - self.base_ms).max(0.0) / i.fires as f64;
                self.per_fire_ms += WEIGHT * (per_fire - self.per_fire_ms);
            } else {
                self.base_ms += WEIGHT * (span_ms - self.base_ms);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    fn instant(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).expect("an instant")
    }

    #[test]
    fn the_lead_grows_with_the_fires_due_within_its_bounds() {
        let lead = ClaimLead::new(Duration::from_millis(500));
        // (fires at the instant, the lead before anything was measured)
        let cases = [
            (1, 50),
            (10, 50),
            (100, 52),
            (500, 232),
            (1000, 457),
            (8000, 500),
        ];
        for (fires, ms) in cases {
            assert_eq!(lead.lead(fires).as_millis(), ms, "{fires} fires");
        }
        assert_eq!(
            lead.current(),
            Duration::from_millis(500),
            "the last lead given"
        );
        assert_eq!(ClaimLead::new(Duration::ZERO).lead(1000), Duration::ZERO);
        let small_cap = ClaimLead::new(Duration::from_millis(20));
        assert_eq!(small_cap.lead(1), Duration::from_millis(20), "the cap wins");
    }

    #[test]
    fn measured_spans_move_the_lead_to_what_the_claims_take() {
        let t0 = crate::testing::epoch();
        let lead = ClaimLead::new(Duration::from_millis(500));
        // Instants of 1000 fires whose claims all land 150 ms after their notice: 0.145 ms a
        // fire, half the guess; the lead comes down towards 1.5 × 150 ms.
        for s in 0..20u64 {
            let noticed = at(t0, s * 1000);
            lead.noticed(instant(s as i64), 1000, noticed);
            lead.claimed_at(instant(s as i64), at(t0, s * 1000 + 150));
        }
        lead.noticed(instant(99), 1000, at(t0, 30_000));
        let settled = lead.lead(1000).as_millis();
        assert!((220..=240).contains(&settled), "{settled} ms");
        // Then they take 400 ms: the lead goes up to the cap.
        for s in 100..120u64 {
            lead.noticed(instant(s as i64), 1000, at(t0, s * 1000));
            lead.claimed_at(instant(s as i64), at(t0, s * 1000 + 400));
        }
        lead.noticed(instant(999), 1000, at(t0, 200_000));
        assert_eq!(lead.lead(1000), Duration::from_millis(500));
        // A single job's instant stays at the floor.
        assert_eq!(lead.lead(1), ClaimLead::MIN);
    }

    #[test]
    fn an_instant_with_nothing_claimed_teaches_nothing() {
        let t0 = crate::testing::epoch();
        let lead = ClaimLead::new(Duration::from_millis(500));
        let before = lead.lead(1000);
        for s in 0..10u64 {
            lead.noticed(instant(s as i64), 1000, at(t0, s * 1000));
        }
        lead.noticed(instant(50), 1000, at(t0, 60_000));
        assert_eq!(lead.lead(1000), before);
    }

    #[test]
    fn a_fixed_lead_is_given_to_every_instant_whatever_is_measured() {
        let t0 = crate::testing::epoch();
        let lead = ClaimLead::fixed(Duration::from_millis(300));
        assert_eq!(lead.current(), Duration::from_millis(300));
        for s in 0..10u64 {
            lead.noticed(instant(s as i64), 1000, at(t0, s * 1000));
            lead.claimed_at(instant(s as i64), at(t0, s * 1000 + 20));
        }
        lead.noticed(instant(99), 1, at(t0, 30_000));
        for fires in [1, 10, 1000, 100_000] {
            assert_eq!(
                lead.lead(fires),
                Duration::from_millis(300),
                "{fires} fires"
            );
        }
        assert_eq!(lead.cap(), Duration::from_millis(300));
    }
}
