//! A new registry session: everything decided in the old one is void, and the local instances
//! are registered again once the job has been read afresh.

use tracing::{info, warn};

use super::state::{JobState, Phase};
use super::{Action, Env};
use crate::coordination::events::StreamEnd;
use crate::coordination::failover;
use crate::registry::{Error as RegError, OpResult, SessionState};

impl JobState {
    pub(super) fn on_session(&mut self, state: SessionState, env: &Env, out: &mut Vec<Action>) {
        match state {
            SessionState::Connected { generation, .. }
                if self.phase == Phase::Ready && generation != self.generation =>
            {
                self.new_session(generation, env, out)
            }
            SessionState::Connected { .. } => self.reload_wanted = true,
            _ => {}
        }
    }

    /// The session expired and a new one is open: everything decided in the old one is void.
    /// The workers' leases ran out before the old session could expire (they are never longer
    /// than a quarter of a session past its last proof of life), so their items may be given
    /// back at once; the instances are registered again (expiry is not shutdown).
    fn new_session(&mut self, generation: u64, env: &Env, out: &mut Vec<Action>) {
        info!(job = %self.name, generation, "new registry session: everything from the old one is void; registering local instances again");
        self.generation = generation;
        self.reload_wanted = true;
        let executions: Vec<String> = self.executions.keys().cloned().collect();
        for exec in executions {
            // Answers held but not recorded cannot be any more: the session they were to be
            // written in is gone (and with it the execution).
            if let Some(e) = self.executions.get_mut(&exec) {
                e.held.release_all();
            }
            self.void(
                &exec,
                "the registry session expired",
                failover::Release::None,
                true,
                env,
                out,
            );
        }
        let gone: Vec<String> = self
            .locals
            .iter()
            .filter(|(_, l)| l.gone.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.forget_local(&id, env, out);
        }
        for local in self.locals.values_mut() {
            local.registered = false;
            local.seen = false;
            local.lease = crate::coordination::lease::WorkerLease::new();
            local.withheld = false;
        }
        // Pending writes of the old session fail on their own (they carry its generation).
    }

    pub(super) fn on_reregistered(
        &mut self,
        id: &str,
        result: Result<Vec<OpResult>, RegError>,
        env: &Env,
        out: &mut Vec<Action>,
    ) {
        let generation = self.generation;
        match result {
            Ok(_) => {
                if let Some(local) = self.locals.get_mut(id) {
                    local.registered = true;
                    local.generation = generation;
                    local.seen = true;
                    // Registering again waits for the fresh read of the job (`reconcile`
                    // decides nothing while a reload is wanted or in flight).
                    info!(job = %self.name, instance = %id, generation,
                          "registered again in the new session, on a fresh read of the job");
                }
            }
            Err(RegError::MultiFailed { source, .. })
                if matches!(*source, RegError::NodeExists(_)) =>
            {
                warn!(job = %self.name, instance = %id, "another process registered this instance id meanwhile; ending its stream");
                if let Some(local) = self.locals.get_mut(id) {
                    local.registered = true; // so it leaves through the normal path
                    local.generation = 0;
                }
                self.end_local(id, StreamEnd::BySidecar, env, out);
            }
            Err(e) => self.write_failed("registering an instance again", &e, env),
        }
    }
}
