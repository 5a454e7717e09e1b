//! Everything the soak observed, on one clock (the host's wall clock, microseconds): what each
//! worker process reported (streams, leases, assignments, runs, answers), every fencing-store
//! write, and every fault as it was injected. The checker ([`crate::check`]) reads only this.

use crate::schedule::{Kind, Scope};
use crate::spec::JOBS;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;

/// A worker (or joiner) process.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Proc {
    /// `None` for a joiner (a Subscribe-cancelled-mid-join process).
    pub slot: Option<usize>,
    pub car: usize,
    pub job: usize,
    /// When the nemesis sent it SIGKILL.
    pub killed: Option<u64>,
    /// When the nemesis saw it exit.
    pub exited: Option<u64>,
    /// SIGSTOP .. SIGCONT intervals (`None`: still stopped).
    pub pauses: Vec<(u64, Option<u64>)>,
    /// A minimal worker (`crate::worker`, [`crate::spec::MINIMAL_JOBS`]).
    #[serde(default)]
    pub minimal: bool,
}

impl Proc {
    /// When it stopped running for good (killed or exited), if it has.
    pub fn gone(&self) -> Option<u64> {
        match (self.killed, self.exited) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn paused_during(&self, a: u64, b: u64) -> bool {
        self.pauses
            .iter()
            .any(|(s, e)| *s <= b && e.is_none_or(|e| e >= a))
    }
}

/// One Subscribe stream, from `Registered` to its end.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StreamRec {
    pub pid: u32,
    pub gen: u64,
    pub slot: Option<usize>,
    pub car: usize,
    pub job: usize,
    pub instance: String,
    pub opened: u64,
    pub ended: Option<u64>,
    pub status: String,
    pub shutdown: Option<u64>,
    /// The `Shutdown`'s kind as the worker read it: "drain", "remote" or "unspecified".
    #[serde(default)]
    pub shutdown_kind: String,
    /// (received, valid until) per `Lease`, in order.
    pub leases: Vec<(u64, u64)>,
    /// (received, items) per `Assignment`, in order.
    pub assignments: Vec<(u64, Vec<i32>)>,
    /// (received, items) per `Revoke`.
    pub revokes: Vec<(u64, Vec<i32>)>,
}

impl StreamRec {
    /// When the lease held at `start` stopped covering the stream without a break: the earlier
    /// of the latest lease's end and the first gap between renewals (rule 1: the latest lease
    /// rules, even a shorter or void one). `start` itself when no lease was valid then.
    pub fn lease_cover_end(&self, start: u64) -> u64 {
        let Some(first) = self.leases.iter().rposition(|(t, _)| *t <= start) else {
            return start;
        };
        let mut until = self.leases[first].1;
        if until <= start {
            return start;
        }
        for (t, u) in &self.leases[first + 1..] {
            if *t >= until {
                break;
            }
            until = *u;
        }
        until.max(start)
    }

    /// Whether a lease was valid at `t`.
    pub fn lease_valid_at(&self, t: u64) -> bool {
        self.leases
            .iter()
            .rev()
            .find(|(r, _)| *r <= t)
            .is_some_and(|(_, u)| *u > t)
    }

    /// The items of the latest assignment received by `t`.
    pub fn items_at(&self, t: u64) -> &[i32] {
        self.assignments
            .iter()
            .rev()
            .find(|(r, _)| *r <= t)
            .map_or(&[], |(_, items)| items.as_slice())
    }

    pub fn open_at(&self, t: u64) -> bool {
        self.opened <= t && self.ended.is_none_or(|e| e > t)
    }
}

/// One item of one execution run by one worker.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Run {
    pub job: usize,
    pub item: i32,
    pub exec: String,
    pub pid: u32,
    pub gen: u64,
    pub slot: Option<usize>,
    pub car: usize,
    /// `TriggerSource` as sent (see [`source_name`]).
    pub source: i32,
    pub fire_us: u64,
    pub token: i64,
    /// The trigger's receipt.
    pub start: u64,
    /// Planned duration (-1: hanging, or a resident hold).
    pub plan_ms: i64,
    /// The worker stopped it without finishing (lease, revoke, stream end).
    pub stop: Option<(u64, String)>,
    /// The worker decided its answer (complete, fail, decline).
    pub answer: Option<(u64, String)>,
    /// The sidecar's reply to that answer: gRPC code, `None` when it was void (dropped).
    pub answer_code: Option<Option<i32>>,
    /// The worker's first Revoke naming the item, after the start.
    pub revoked: Option<u64>,
    /// A minimal worker's answer got UNAVAILABLE with the sidecar's details: accepted, not yet
    /// recorded (the sidecar goes on recording it).
    #[serde(default)]
    pub answer_held: bool,
    /// How long a minimal worker's answer call took, in ms.
    #[serde(default)]
    pub answer_ms: Option<u64>,
    /// When an answer-aimed fault's arm caught this run's answer (the `armed` event).
    #[serde(default)]
    pub armed: Option<u64>,
    /// The latest instant at which the nemesis's probe found the item's `running` node still
    /// carrying this run's token (the probe's send time: the node was there at or after it).
    #[serde(default)]
    pub held_seen: Option<u64>,
    /// When the probe first found the node gone or another's (its reply's receipt).
    #[serde(default)]
    pub gone_seen: Option<u64>,
}

impl Run {
    /// Completed: a `Complete` the sidecar accepted, recorded (OK) or, for a minimal worker's
    /// one call, held for recording (UNAVAILABLE with the sidecar's details). Whether a held
    /// answer lands or its execution is released otherwise is the execution-end invariant's
    /// business.
    pub fn completed(&self) -> bool {
        matches!(&self.answer, Some((_, k)) if k == "complete")
            && (self.answer_code == Some(Some(0))
                || (self.answer_held && self.answer_code == Some(Some(UNAVAILABLE))))
    }
}

/// gRPC's UNAVAILABLE.
pub const UNAVAILABLE: i32 = tonic::Code::Unavailable as i32;

pub fn source_name(source: i32) -> &'static str {
    match shardcar::proto::TriggerSource::try_from(source) {
        Ok(s) => {
            let name = s.as_str_name();
            name.strip_prefix("TRIGGER_SOURCE_").unwrap_or(name)
        }
        Err(_) => "?",
    }
}

/// A trigger declined at once (no lease, shutting down).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Declined {
    pub pid: u32,
    pub gen: u64,
    pub job: usize,
    pub exec: String,
    pub items: Vec<i32>,
    pub at: u64,
    pub why: String,
    pub source: i32,
}

/// One write the fencing store received.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoreWrite {
    pub recv: u64,
    pub job: usize,
    pub item: i32,
    pub token: i64,
    pub pid: u32,
    pub gen: u64,
    pub exec: String,
    /// The writer's lease end when it sent the write.
    pub until: u64,
    pub accepted: bool,
    /// The highest token accepted before this write (`i64::MIN`: none).
    pub last_before: i64,
}

/// One fault as injected.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultRec {
    pub id: usize,
    pub kind: Kind,
    pub start: u64,
    /// When its last action was done (restarted and ready, resumed, healed ...).
    pub end: Option<u64>,
    pub note: String,
    /// The worker process it killed, paused or shut down, if any.
    pub victim: Option<u32>,
    /// An answer-aimed fault: the answer that fired it (`None`: none came while it was armed).
    #[serde(default)]
    pub fired: Option<Aim>,
}

/// The answer an answer-aimed fault fired on, and when its cut or freeze was in place.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Aim {
    /// When the fault acted (the proxies' mode set), just before the worker's call went out.
    pub at: u64,
    /// When the fault was undone.
    pub until: u64,
    pub pid: u32,
    pub gen: u64,
    pub exec: String,
    pub items: Vec<i32>,
    pub kind: String,
}

impl FaultRec {
    /// The window in which fires may be disturbed (see [`Kind::settle`]).
    pub fn window(&self, now: u64) -> (u64, u64) {
        // A ZooKeeper node's restart disturbs no client: clients moved to the other nodes
        // when it died. Its window runs from the kill.
        // A sidecar fault lasts at least until its old session could expire (a killed
        // sidecar's session outlives a quick restart).
        let end = match self.kind.scope() {
            _ if matches!(self.kind, Kind::ZkKill { .. }) => self.start,
            Scope::Car(_) => self
                .end
                .unwrap_or(now)
                .max(self.start + crate::spec::SESSION.as_micros() as u64),
            _ => self.end.unwrap_or(now),
        };
        (
            self.start.saturating_sub(300_000),
            end + self.kind.settle().as_micros() as u64,
        )
    }

    pub fn scope(&self) -> Scope {
        self.kind.scope()
    }
}

/// A Subscribe of a joiner and how it ended.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Join {
    pub pid: u32,
    pub at: u64,
    pub delay_ms: u64,
    pub outcome: String,
}

#[derive(Default)]
pub struct History {
    /// Start of the soak (the schedule's offset 0).
    pub t0: u64,
    pub procs: HashMap<u32, Proc>,
    pub streams: BTreeMap<(u32, u64), StreamRec>,
    pub runs: Vec<Run>,
    pub run_index: HashMap<(u32, u64, String, i32), usize>,
    pub declined: Vec<Declined>,
    pub writes: Vec<StoreWrite>,
    /// The fencing store's state: highest accepted token per (job, item).
    pub store_last: HashMap<(usize, i32), i64>,
    pub faults: Vec<FaultRec>,
    pub joins: Vec<Join>,
    pub subscribe_failures: BTreeMap<String, usize>,
    /// The largest delay between a worker's stamp and the nemesis reading the line.
    pub max_report_lag_us: i64,
    /// Every line as read, for the output directory.
    pub log: Option<std::fs::File>,
    /// A fixed "now" (synthetic histories in tests); the wall clock otherwise.
    pub frozen_now: Option<u64>,
}

fn u(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn s(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn items(v: &Value, key: &str) -> Vec<i32> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|i| i.as_i64())
                .map(|i| i as i32)
                .collect()
        })
        .unwrap_or_default()
}

impl History {
    pub fn now(&self) -> u64 {
        self.frozen_now.unwrap_or_else(crate::spec::wall_us)
    }

    /// Microseconds since the start of the soak, as seconds, for messages.
    pub fn rel(&self, t: u64) -> String {
        format!("{:+.3}s", (t as f64 - self.t0 as f64) / 1e6)
    }

    /// Takes one `EV` line of process `pid`, read at `recv`.
    pub fn ingest(&mut self, pid: u32, recv: u64, line: &str) {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return;
        };
        if let Some(log) = self.log.as_mut() {
            let _ = writeln!(log, "{recv} {pid} {line}");
        }
        let t = u(&v, "t");
        self.max_report_lag_us = self.max_report_lag_us.max(recv as i64 - t as i64);
        let gen = u(&v, "gen");
        let Some(proc_) = self.procs.get(&pid).cloned() else {
            return;
        };
        let key = (pid, gen);
        match s(&v, "k").as_str() {
            "reg" => {
                self.streams.insert(
                    key,
                    StreamRec {
                        pid,
                        gen,
                        slot: proc_.slot,
                        car: proc_.car,
                        job: proc_.job,
                        instance: s(&v, "inst"),
                        opened: t,
                        ..Default::default()
                    },
                );
            }
            "subfail" => {
                let what = format!("{} ({})", s(&v, "msg"), v["code"]);
                *self.subscribe_failures.entry(what).or_default() += 1;
            }
            "asg" => {
                if let Some(st) = self.streams.get_mut(&key) {
                    st.assignments.push((t, items(&v, "items")));
                }
            }
            "lease" => {
                if let Some(st) = self.streams.get_mut(&key) {
                    st.leases.push((t, u(&v, "until")));
                }
            }
            "trig" => self.on_trigger(pid, &proc_, gen, t, &v),
            "revoke" => {
                let revoked = items(&v, "items");
                if let Some(st) = self.streams.get_mut(&key) {
                    st.revokes.push((t, revoked.clone()));
                }
                for run in self
                    .runs
                    .iter_mut()
                    .filter(|r| r.pid == pid && r.gen == gen)
                {
                    if revoked.contains(&run.item) && run.revoked.is_none() && run.start <= t {
                        run.revoked = Some(t);
                    }
                }
            }
            "stop" => {
                let k = (
                    pid,
                    gen,
                    s(&v, "exec"),
                    v["item"].as_i64().unwrap_or(-1) as i32,
                );
                if let Some(&i) = self.run_index.get(&k) {
                    self.runs[i].stop.get_or_insert((t, s(&v, "why")));
                }
            }
            "ans" => {
                let exec = s(&v, "exec");
                for item in items(&v, "items") {
                    if let Some(&i) = self.run_index.get(&(pid, gen, exec.clone(), item)) {
                        self.runs[i].answer.get_or_insert((t, s(&v, "kind")));
                    }
                }
            }
            "ansres" => {
                let exec = s(&v, "exec");
                let code = v.get("code").and_then(Value::as_i64).map(|c| c as i32);
                let kind = s(&v, "kind");
                let held = v.get("held").and_then(Value::as_bool).unwrap_or(false);
                let ms = v.get("ms").and_then(Value::as_u64);
                for item in items(&v, "items") {
                    if let Some(&i) = self.run_index.get(&(pid, gen, exec.clone(), item)) {
                        let run = &mut self.runs[i];
                        if run.answer.as_ref().is_some_and(|(_, k)| *k == kind) {
                            run.answer_code = Some(code);
                            run.answer_held = held;
                            run.answer_ms = ms;
                        }
                    }
                }
            }
            "armed" => {
                let exec = s(&v, "exec");
                for item in items(&v, "items") {
                    if let Some(&i) = self.run_index.get(&(pid, gen, exec.clone(), item)) {
                        self.runs[i].armed.get_or_insert(t);
                    }
                }
            }
            "end" => {
                if let Some(st) = self.streams.get_mut(&key) {
                    st.ended.get_or_insert(t);
                    st.status = s(&v, "status");
                }
            }
            "shutdown" => {
                if let Some(st) = self.streams.get_mut(&key) {
                    if st.shutdown.is_none() {
                        st.shutdown = Some(t);
                        st.shutdown_kind = s(&v, "kind");
                    }
                }
            }
            "join" => self.joins.push(Join {
                pid,
                at: t,
                delay_ms: u(&v, "delay_ms"),
                outcome: s(&v, "outcome"),
            }),
            _ => {}
        }
    }

    fn on_trigger(&mut self, pid: u32, proc_: &Proc, gen: u64, t: u64, v: &Value) {
        let exec = s(v, "exec");
        let source = v["src"].as_i64().unwrap_or(-1) as i32;
        let listed: Vec<(i32, i64, i64)> = v["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|i| {
                        (
                            i["i"].as_i64().unwrap_or(-1) as i32,
                            i["tok"].as_i64().unwrap_or(-1),
                            i["plan"].as_i64().unwrap_or(0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        if v["ok"].as_bool() != Some(true) {
            self.declined.push(Declined {
                pid,
                gen,
                job: proc_.job,
                exec,
                items: listed.iter().map(|(i, _, _)| *i).collect(),
                at: t,
                why: s(v, "why"),
                source,
            });
            return;
        }
        for (item, token, plan) in listed {
            self.run_index
                .insert((pid, gen, exec.clone(), item), self.runs.len());
            self.runs.push(Run {
                job: proc_.job,
                item,
                exec: exec.clone(),
                pid,
                gen,
                slot: proc_.slot,
                car: proc_.car,
                source,
                fire_us: u(v, "fire"),
                token,
                start: t,
                plan_ms: plan,
                ..Default::default()
            });
        }
    }

    /// The fencing store's decision for one write (accept iff the token is at least the last
    /// accepted one for the item), recorded at `recv`.
    #[allow(clippy::too_many_arguments)]
    pub fn store_write(
        &mut self,
        recv: u64,
        job: usize,
        item: i32,
        token: i64,
        pid: u32,
        gen: u64,
        exec: String,
        until: u64,
    ) -> (bool, i64) {
        let last = self
            .store_last
            .get(&(job, item))
            .copied()
            .unwrap_or(i64::MIN);
        let accepted = token >= last;
        if accepted {
            self.store_last.insert((job, item), token);
        }
        self.writes.push(StoreWrite {
            recv,
            job,
            item,
            token,
            pid,
            gen,
            exec,
            until,
            accepted,
            last_before: last,
        });
        (accepted, last)
    }

    /// When run `r` certainly stopped holding its item: the earliest of its answer, its stop,
    /// its process's death, its stream's end and the end of its lease cover. `None` while it
    /// may still run (then it is bounded by its lease: see [`History::run_end_or`]).
    pub fn run_end(&self, r: &Run) -> Option<u64> {
        let stream = self.streams.get(&(r.pid, r.gen));
        let lease_end = stream.map_or(r.start, |s| s.lease_cover_end(r.start));
        let mut end = [
            r.stop.as_ref().map(|(t, _)| *t),
            r.answer.as_ref().map(|(t, _)| *t),
            self.procs.get(&r.pid).and_then(Proc::gone),
            stream.and_then(|s| s.ended),
        ]
        .into_iter()
        .flatten()
        .filter(|t| *t >= r.start)
        .min();
        // The lease bounds the run even before anything else ends it, but only once it is
        // over (a lease that is still valid may yet be renewed).
        let now = self.now();
        if lease_end <= now || end.is_some() {
            end = Some(end.map_or(lease_end, |e| e.min(lease_end)));
        }
        end
    }

    /// [`History::run_end`], or `now` for a run still going.
    pub fn run_end_or(&self, r: &Run, now: u64) -> u64 {
        self.run_end(r).unwrap_or(now)
    }

    /// The name of a worker for messages: `slot 5 (nem-fo-2s on 127.0.0.3) pid 1234`.
    pub fn who(&self, pid: u32, gen: u64) -> String {
        let p = self.procs.get(&pid);
        let inst = self
            .streams
            .get(&(pid, gen))
            .map_or(String::new(), |s| s.instance.clone());
        match p {
            Some(p) => format!(
                "{} [{} on {}, slot {}]",
                inst,
                JOBS[p.job].name,
                crate::spec::car_ip(p.car),
                p.slot.map_or("joiner".into(), |s| s.to_string())
            ),
            None => format!("pid {pid}"),
        }
    }

    /// A one-line description of a run, times relative to the soak's start.
    pub fn describe(&self, r: &Run) -> String {
        let end = match self.run_end(r) {
            Some(e) => self.rel(e),
            None => "(running)".into(),
        };
        let how = if r.completed() {
            "completed".to_string()
        } else if let Some((_, why)) = &r.stop {
            format!("stopped ({why})")
        } else if let Some((_, k)) = &r.answer {
            format!("answered {k} -> {:?}", r.answer_code)
        } else {
            "no answer".to_string()
        };
        let lease_end = self
            .streams
            .get(&(r.pid, r.gen))
            .map(|s| self.rel(s.lease_cover_end(r.start)))
            .unwrap_or_default();
        let probe = match (r.held_seen, r.gone_seen) {
            (None, None) => String::new(),
            (held, gone) => format!(
                "; running node seen {}{}",
                held.map_or(String::new(), |t| format!("held at {}", self.rel(t))),
                gone.map_or(String::new(), |t| format!(
                    "{}gone at {}",
                    if held.is_some() { ", " } else { "" },
                    self.rel(t)
                ))
            ),
        };
        format!(
            "{} {} item {} exec {} token {} by {}: {} .. {} ({how}; lease cover to {lease_end}{probe})",
            JOBS[r.job].name,
            source_name(r.source),
            r.item,
            r.exec,
            r.token,
            self.who(r.pid, r.gen),
            self.rel(r.start),
            end
        )
    }
}

/// Everything the checks read, saved as `history.json` at the end of a soak, so that the
/// checker can be run again on it (`nemesis --recheck FILE`) without a cluster.
#[derive(Serialize, Deserialize)]
pub struct Snapshot {
    pub seed: u64,
    /// Faults injected.
    pub injected: usize,
    pub t0: u64,
    pub t_end: u64,
    pub last_fault_end: u64,
    pub live_since: Option<u64>,
    /// (key, at, text) of the liveness violations found online.
    pub liveness: Vec<(String, u64, String)>,
    pub procs: Vec<(u32, Proc)>,
    pub streams: Vec<StreamRec>,
    pub runs: Vec<Run>,
    pub declined: Vec<Declined>,
    pub writes: Vec<StoreWrite>,
    pub faults: Vec<FaultRec>,
    pub joins: Vec<Join>,
    pub subscribe_failures: BTreeMap<String, usize>,
    pub max_report_lag_us: i64,
}

impl History {
    pub fn snapshot(
        &self,
        t_end: u64,
        last_fault_end: u64,
        live_since: Option<u64>,
        liveness: Vec<(String, u64, String)>,
    ) -> Snapshot {
        let mut procs: Vec<(u32, Proc)> = self.procs.iter().map(|(k, v)| (*k, v.clone())).collect();
        procs.sort_by_key(|(k, _)| *k);
        Snapshot {
            seed: 0,
            injected: 0,
            t0: self.t0,
            t_end,
            last_fault_end,
            live_since,
            liveness,
            procs,
            streams: self.streams.values().cloned().collect(),
            runs: self.runs.clone(),
            declined: self.declined.clone(),
            writes: self.writes.clone(),
            faults: self.faults.clone(),
            joins: self.joins.clone(),
            subscribe_failures: self.subscribe_failures.clone(),
            max_report_lag_us: self.max_report_lag_us,
        }
    }

    pub fn from_snapshot(snap: Snapshot) -> History {
        let mut h = History {
            t0: snap.t0,
            frozen_now: Some(snap.t_end),
            procs: snap.procs.into_iter().collect(),
            streams: snap
                .streams
                .into_iter()
                .map(|s| ((s.pid, s.gen), s))
                .collect(),
            declined: snap.declined,
            writes: snap.writes,
            faults: snap.faults,
            joins: snap.joins,
            subscribe_failures: snap.subscribe_failures,
            max_report_lag_us: snap.max_report_lag_us,
            ..Default::default()
        };
        for run in snap.runs {
            h.run_index
                .insert((run.pid, run.gen, run.exec.clone(), run.item), h.runs.len());
            h.runs.push(run);
        }
        h
    }
}
