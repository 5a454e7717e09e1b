//! The job's state: its parts, and the one place that steps them. [`JobState::step`] hands each
//! input to the part it is for and then reconciles: it asks each part, in a fixed order, to
//! compare what is with what should be and act on the difference. Being level-triggered, it
//! needs no memory of events: a lost one is recovered by the next read.
//!
//! Each part owns its fields and changes only them; what it needs of the others it is given
//! as arguments: the [`Mirror`] of the subtree (read only, through [`Cx`]), the [`Io`] its
//! actions go through, the local [`Instances`], the [`Runs`] of their work, [`Leadership`] and
//! [`Failover`].

use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::failover::Failover;
use super::instances::Instances;
use super::io::{Io, Job, Pending};
use super::leadership::Leadership;
use super::mirror::{Mirror, Watched};
use super::runs::Runs;
use super::{Action, Env, Input, Settings};
use crate::elasticjob::paths::JobPaths;
use crate::schedule::CronSchedule;

/// How often to look again at the session's health while something waits on it.
const HEALTH_POLL: Duration = Duration::from_millis(100);

/// A step's [`Cx`] over the state's own parts, borrowed field by field so that the part being
/// stepped can be borrowed beside it.
macro_rules! cx {
    (ref $state:ident, $env:expr, $out:expr) => {
        &$crate::coordination::job::io::Cx {
            job: &$state.job,
            env: $env,
            mirror: &$state.mirror,
            io: &mut $state.io,
            out: $out,
        }
    };
    ($state:ident, $env:expr, $out:expr) => {
        &mut $crate::coordination::job::io::Cx {
            job: &$state.job,
            env: $env,
            mirror: &$state.mirror,
            io: &mut $state.io,
            out: $out,
        }
    };
}
pub(super) use cx;

/// The job's cron as configured, and parsed.
#[derive(Debug, Default)]
struct Cron {
    /// Expression and time zone, as the config has them.
    wanted: Option<(String, String)>,
    /// `wanted` parsed (`None` without a cron or with one that cannot be used): the timer
    /// fires on it, and the leader keeps its reshards off its instants.
    parsed: Option<CronSchedule>,
}

/// The state of one job on this sidecar; see the module docs.
pub(crate) struct JobState {
    pub(super) job: Job,
    pub(super) mirror: Mirror,
    pub(super) io: Io,
    pub(super) instances: Instances,
    pub(super) runs: Runs,
    pub(super) leadership: Leadership,
    pub(super) failover: Failover,
    cron: Cron,
    /// The wakeup last asked for: a step long after it means this process was paused.
    expected_wakeup: Option<Instant>,
    /// A step at a fire instant decided only what that instant needs; the rest of the reconcile
    /// is owed, and the driver asks for it once the instant's fires have all been taken up.
    reconcile_owed: bool,
}

impl JobState {
    pub(crate) fn new(name: &str, settings: Settings) -> JobState {
        let paths = JobPaths::new(name);
        JobState {
            mirror: Mirror::new(&paths),
            job: Job {
                name: name.to_string(),
                paths,
                settings,
            },
            io: Io::default(),
            instances: Instances::new(),
            runs: Runs::default(),
            leadership: Leadership::default(),
            failover: Failover::default(),
            cron: Cron::default(),
            expected_wakeup: None,
            reconcile_owed: false,
        }
    }

    /// The job's name.
    pub(crate) fn name(&self) -> &str {
        &self.job.name
    }

    /// Whether the state has nothing left to do: no local instance, nothing in flight. The
    /// driver retires the job then.
    pub(crate) fn idle(&self) -> bool {
        self.instances.idle() && self.io.is_idle() && self.runs.is_empty()
    }

    /// Whether a step at a fire instant left the rest of the reconcile to a later step.
    pub(crate) fn reconcile_owed(&self) -> bool {
        self.reconcile_owed
    }

    /// The one entry point: applies `input` at `env` and returns what to do.
    pub(crate) fn step(&mut self, input: Input, env: &Env) -> Vec<Action> {
        self.step_all([input], env)
    }

    /// Applies inputs that arrived together, in their order, and then reconciles once, on
    /// everything they tell.
    ///
    /// Reconciling is level-triggered, so deciding after the last input instead of after each
    /// loses nothing; it saves the work of deciding again after every result and event of a run
    /// (a run of many items brings hundreds), and no decision is made on a reading that the very
    /// next input already contradicts. Each input is handled on the view of everything mirrored
    /// before it, as it would be one step at a time, and every write is still conditional on the
    /// versions it was decided on.
    ///
    /// A cron fire alone decides only what its instant needs: its trigger (a run claimed ahead
    /// is sent, or one is started now), with every check that gates it (self-fencing, lapsed
    /// leases, the session). What the rest of the reconcile decides (membership, runs gone
    /// stale, failover, leadership, items to work on) is owed ([`JobState::reconcile_owed`])
    /// until the next step. When a thousand jobs fire at one instant, their triggers would
    /// otherwise wait for each other's whole reconcile on the sidecar's cores; the rest of each
    /// step moves after them, and a step a few milliseconds later decides on what is then, as a
    /// slower step would have.
    pub(crate) fn step_all(
        &mut self,
        inputs: impl IntoIterator<Item = Input>,
        env: &Env,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        self.notice_pause(env);
        // Before any input: an answer that comes first after this process was stopped past 2/3
        // of its session is handled on executions already taken back (and refused as such),
        // not on the state from before the pause.
        self.runs
            .check_self_fencing(cx!(self, env, &mut out), &self.instances);
        let mut whole = false;
        for input in inputs {
            whole |= !matches!(input, Input::Fire { .. });
            self.apply(input, env, &mut out);
        }
        let reads = self.mirror.take_event_reads();
        self.issue_event_reads(reads, &mut out);
        if self.instances.ready() {
            if whole {
                self.reconcile(env, &mut out);
            } else if self.reconcile_urgent(env, &mut out) {
                self.reconcile_owed = true;
            }
        }
        self.give_back_emptied();
        out
    }

    /// Frees the collections the step emptied: a sidecar has a thousand jobs, each idle between
    /// its runs with nothing in flight, and each would otherwise hold the room its last run
    /// needed.
    fn give_back_emptied(&mut self) {
        self.io.give_back_emptied();
        self.mirror.give_back_emptied();
        self.instances.give_back_emptied();
        self.runs.give_back_emptied();
    }

    /// Hands `input` to the part it is for; deciding what else to do is the reconcile's.
    fn apply(&mut self, input: Input, env: &Env, out: &mut Vec<Action>) {
        match input {
            Input::Join { .. } => self.instances.join(cx!(self, env, out), input),
            Input::StreamEnded { stream, end } => self.stream_ended(stream, end, env, out),
            Input::Answer {
                reply,
                instance_id,
                execution_id,
                outcomes,
            } => self.runs.answer(
                cx!(self, env, out),
                &mut self.instances,
                reply,
                &instance_id,
                &execution_id,
                outcomes,
            ),
            Input::Decline {
                reply,
                instance_id,
                execution_id,
                items,
                reason,
            } => self.runs.decline(
                cx!(self, env, out),
                &mut self.instances,
                reply,
                &instance_id,
                &execution_id,
                items,
                &reason,
            ),
            Input::Drain { reply, deadline } => self.drain(reply, deadline, env, out),
            Input::ContinueTrace { parent, for_ } => {
                if let Some(parent) = &parent {
                    debug!(job = %self.job.name, trace = %parent.trace_id_hex(),
                           "the trigger's manual executions continue the caller's trace");
                }
                self.runs
                    .continue_trace(parent, env.now + for_, &self.instances);
            }
            Input::Fire { fire_time } => {
                self.runs
                    .on_fire(cx!(self, env, out), &mut self.instances, fire_time)
            }
            Input::FireAhead { fire_time } => {
                self.runs
                    .on_fire_ahead(cx!(self, env, out), &mut self.instances, fire_time)
            }
            Input::Session(state) => self.session(state, env, out),
            Input::Watched(ev) => {
                if !self.instances.ready() {
                    return;
                }
                match self.mirror.on_watched(ev) {
                    Watched::Noted => {}
                    Watched::Reload => self.io.want_reload(),
                    Watched::Owners => self.io.want_owners(),
                    Watched::FailoverLatch(exists) => self.failover.latch_seen(exists),
                }
            }
            Input::WatchLost => {
                self.io.want_watch();
                self.mirror.forget_own_events();
            }
            Input::Done { op, result } => self.done(op, result, env, out),
            Input::Tick => {}
        }
    }

    /// Reads the nodes the step's events named, in one request, once its inputs are handled
    /// and before anything its reconcile decides: every answer is newer than what was mirrored
    /// when the events came.
    fn issue_event_reads(&mut self, mut paths: Vec<String>, out: &mut Vec<Action>) {
        match paths.len() {
            0 => {}
            1 => {
                let op = self.io.start_op(Pending::Read);
                let path = paths.pop().unwrap_or_default();
                out.push(Action::Read { op, path });
            }
            _ => {
                let op = self.io.start_op(Pending::Read);
                out.push(Action::ReadMany { op, paths });
            }
        }
    }

    /// A step long after the wakeup the state asked for means this process was paused (or
    /// starved): what it knows may be stale. Re-read everything before acting on it; the
    /// conditional writes keep anything decided meanwhile from landing on a changed state.
    fn notice_pause(&mut self, env: &Env) {
        if let Some(expected) = self.expected_wakeup.take() {
            let late = env.now.saturating_duration_since(expected);
            if late > self.job.settings.session_timeout / 4 && self.instances.ready() {
                warn!(job = %self.job.name, late_ms = late.as_millis() as u64,
                      "this process did not run for a while: re-reading the job before acting");
                self.io.want_reload();
            }
        }
    }

    /// When [`JobState::step`] wants a [`Input::Tick`] next (remembered, so a step far past
    /// it is noticed as a pause of this process).
    pub(crate) fn next_wakeup(&mut self, env: &Env) -> Option<Instant> {
        let at = self.wakeup(env);
        self.expected_wakeup = at;
        at
    }

    /// The earliest instant something is due. An instant that has passed was acted on by the
    /// step just taken; if it is still due, something in flight holds it up, whose result comes
    /// as an input: such instants only make the state look again a little later, never spin.
    fn wakeup(&self, env: &Env) -> Option<Instant> {
        let withheld = self.runs.withheld();
        let (mut due, mut waits_on_health) = self.io.due(self.reconcile_interval());
        let (instances, health) = self
            .instances
            .due(env.now, self.job.settings.lease, &withheld);
        due.extend(instances);
        waits_on_health |= health;
        let (runs, health) = self.runs.due(env, &self.job.settings);
        due.extend(runs);
        due.extend(self.runs.retries_due(
            env,
            self.mirror.view(),
            &self.instances,
            &self.job.settings.ip,
        ));
        waits_on_health |= health;
        due.extend(self.leadership.due(env.now));
        let soon = env.now + HEALTH_POLL;
        let held_up = due.iter().any(|t| *t <= env.now);
        due.retain(|t| *t > env.now);
        if waits_on_health || held_up {
            due.push(soon);
        }
        due.into_iter().min()
    }

    /// ElasticJob's `reconcileIntervalMinutes`: how often the whole job is read again anyway.
    fn reconcile_interval(&self) -> Option<Duration> {
        let minutes = self
            .mirror
            .view()
            .config
            .as_ref()?
            .reconcile_interval_minutes;
        (minutes > 0).then(|| Duration::from_secs(60 * minutes as u64))
    }

    /// Level-triggered: compares what is with what should be, and acts.
    fn reconcile(&mut self, env: &Env, out: &mut Vec<Action>) {
        self.reconcile_owed = false;
        if self.reconcile_urgent(env, out) {
            self.reconcile_rest(env, out);
        }
    }

    /// The reconcile's first part: the checks every step makes (self-fencing, lapsed leases,
    /// the session), the reads it owes, the schedule, the leases, and the runs claimed ahead
    /// whose instant has come. Returns whether the rest is to be decided on this view (not
    /// when disconnected, nor while a reload is wanted or in flight).
    fn reconcile_urgent(&mut self, env: &Env, out: &mut Vec<Action>) -> bool {
        self.io.retry_passed(env.now);
        self.runs
            .check_self_fencing(cx!(self, env, out), &self.instances);
        for (id, epoch) in self.instances.check_lapses(cx!(self, env, out)) {
            self.runs
                .lease_lapsed(cx!(self, env, out), &self.instances, &id, epoch);
        }
        if !super::io::connected(env, self.io.generation()) {
            return false;
        }
        let every = self.reconcile_interval();
        let mirror = &self.mirror;
        self.io
            .issue_reads(env.now, every, || mirror.owner_paths(), out);
        self.update_schedule(out);
        let withheld = self.runs.withheld();
        self.instances.renew(cx!(self, env, out), &withheld);
        self.runs
            .reconcile_held(cx!(self, env, out), &mut self.instances);
        if self.io.reloading() {
            // A write was refused or events may have been lost: decide nothing more on this
            // view; the reload comes first (after a short pause, see `Cx::write_failed`).
            self.instances.push_assignments(cx!(self, env, out));
            return false;
        }
        true
    }

    /// The rest of the reconcile: answers, membership, runs, failover, leadership, the items to
    /// work on, the workers' assignments.
    fn reconcile_rest(&mut self, env: &Env, out: &mut Vec<Action>) {
        self.runs.reconcile_answers(cx!(self, env, out));
        self.reconcile_membership(env, out);
        self.runs
            .reconcile_executions(cx!(self, env, out), &self.instances);
        // Interrupted items first: a job's writes go one after the other, and a claim sent
        // behind the leader's reshard (which the same crash often brings) would wait for it.
        self.failover
            .reconcile_adoptions(cx!(self, env, out), &mut self.runs, &mut self.instances);
        self.failover
            .reconcile_claims(cx!(self, env, out), &mut self.runs, &self.instances);
        self.leadership.reconcile(
            cx!(self, env, out),
            &mut self.runs,
            &self.instances,
            &self.failover,
            self.cron.parsed.as_ref(),
        );
        self.runs
            .reconcile_work(cx!(self, env, out), &mut self.instances);
        self.instances.push_assignments(cx!(self, env, out));
        self.leadership
            .observe(cx!(self, env, out), &self.instances);
    }

    /// Fires on the config's cron, parsed here once: the driver hands the parsed schedule to
    /// the timer.
    fn update_schedule(&mut self, out: &mut Vec<Action>) {
        // Compared borrowed: every step looks, and the schedule nearly never changes.
        let wanted = self
            .mirror
            .view()
            .config
            .as_ref()
            .map(|c| {
                (
                    c.cron.as_deref().unwrap_or_default(),
                    c.time_zone.as_deref().unwrap_or_default(),
                )
            })
            .filter(|(cron, _)| !cron.trim().is_empty());
        let same = match (wanted, &self.cron.wanted) {
            (None, None) => true,
            (Some((cron, tz)), Some((c, t))) => cron == c && tz == t,
            _ => false,
        };
        if same {
            return;
        }
        let wanted = wanted.map(|(cron, tz)| (cron.to_string(), tz.to_string()));
        self.cron.parsed = wanted.as_ref().and_then(|(cron, tz)| {
            CronSchedule::parse(cron, tz)
                .inspect_err(|e| {
                    warn!(job = %self.job.name, cron = %cron, error = %e,
                          "the job's cron cannot be used; the job will not fire")
                })
                .ok()
        });
        if let Some((cron, tz)) = &wanted {
            if self.cron.parsed.is_some() {
                tracing::info!(job = %self.job.name, cron = %cron, time_zone = %tz, "scheduled");
            }
        }
        self.cron.wanted = wanted;
        out.push(Action::Schedule(self.cron.parsed.clone()));
    }
}
