//! The answer-aimed faults' hands: arming a sidecar's minimal workers (`ARM` on their stdin),
//! catching the first `armed` answer one of them announces, cutting or freezing the ZooKeeper
//! connections, and only then letting the answer go (`GO`), so that the answer's write meets
//! the fault however fast the sidecar is. A race arranged, not waited for.

use super::{lock, World};
use crate::history::Aim;
use crate::schedule::{Kind, ARM_FOR};
use crate::spec::{self, car_ip, wall_us};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// An answer a worker announced as armed (`armed` event), for the fault waiting on it.
pub(super) struct Armed {
    pid: u32,
    gen: u64,
    exec: String,
    items: Vec<i32>,
    kind: String,
    /// The worker's stdin, to say `GO`.
    cmd_tx: mpsc::UnboundedSender<String>,
}

/// Answer-aimed faults waiting for an armed answer, by worker pid.
pub(super) type Arms = Arc<Mutex<HashMap<u32, mpsc::UnboundedSender<Armed>>>>;

impl World {
    /// An answer-aimed fault: arms the minimal workers of its sidecar, and when one of them
    /// announces an answer, cuts (or freezes) the ZooKeeper connections before saying `GO`, so
    /// the answer's write meets the fault. `index`: the fault's record in the history.
    pub(super) async fn act_on_answer(
        self: Arc<Self>,
        kind: &Kind,
        index: usize,
    ) -> (String, Option<u32>) {
        let (car, hold, cut) = match kind {
            Kind::AnswerCut { car, hold } => (*car, *hold, true),
            Kind::AnswerFreeze { car, hold } => (*car, *hold, false),
            _ => unreachable!("not an answer-aimed fault: {kind}"),
        };
        let until = wall_us() + ARM_FOR.as_micros() as u64;
        let (armed_tx, mut armed_rx) = mpsc::unbounded_channel::<Armed>();
        let mut pids = Vec::new();
        for slot in spec::minimal_slots(car) {
            let s = lock(&self.slots[slot]);
            if let Some(tx) = &s.cmd_tx {
                lock(&self.arms).insert(s.pid, armed_tx.clone());
                let _ = tx.send(format!("ARM {until}\n"));
                pids.push(s.pid);
            }
        }
        drop(armed_tx);
        let armed = tokio::time::timeout(ARM_FOR, armed_rx.recv()).await;
        {
            let mut arms = lock(&self.arms);
            for pid in &pids {
                arms.remove(pid);
            }
        }
        // An answer announced while this was being undone: let it go at once.
        while let Ok(late) = armed_rx.try_recv() {
            let _ = late.cmd_tx.send(format!("GO {}\n", late.exec));
        }
        let Ok(Some(answer)) = armed else {
            return (
                format!(
                    "not fired: no answer from the minimal workers of {} (pids {pids:?}) within {:?}",
                    car_ip(car),
                    ARM_FOR
                ),
                None,
            );
        };
        {
            let mut net = lock(&self.net);
            if cut {
                net.cut[car] += 1;
            } else {
                net.frozen += 1;
            }
        }
        self.apply_net();
        let at = wall_us();
        let _ = answer.cmd_tx.send(format!("GO {}\n", answer.exec));
        tokio::time::sleep(hold).await;
        {
            let mut net = lock(&self.net);
            if cut {
                net.cut[car] -= 1;
            } else {
                net.frozen -= 1;
            }
        }
        self.apply_net();
        let healed = wall_us();
        let who = {
            let mut h = lock(&self.history);
            let who = h.who(answer.pid, answer.gen);
            let text = format!(
                "fired at {} on the {} of exec {} items {:?} by {who}",
                h.rel(at),
                answer.kind,
                answer.exec,
                answer.items
            );
            h.faults[index].fired = Some(Aim {
                at,
                until: healed,
                pid: answer.pid,
                gen: answer.gen,
                exec: answer.exec.clone(),
                items: answer.items.clone(),
                kind: answer.kind.clone(),
            });
            text
        };
        let what = if cut {
            format!("bytes from {} to ZooKeeper thrown away", car_ip(car))
        } else {
            "every sidecar's ZooKeeper connections frozen, then delivered".to_string()
        };
        (format!("{who}: {what}"), Some(answer.pid))
    }
}

/// Hands an `armed` answer to the fault waiting on its worker, or lets it go at once.
pub(super) fn on_armed(arms: &Arms, pid: u32, event: &str, go_tx: &mpsc::UnboundedSender<String>) {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(event) else {
        return;
    };
    let exec = v["exec"].as_str().unwrap_or_default().to_string();
    let waiting = lock(arms).remove(&pid);
    let armed = Armed {
        pid,
        gen: v["gen"].as_u64().unwrap_or(0),
        exec: exec.clone(),
        items: v["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|i| i.as_i64())
                    .map(|i| i as i32)
                    .collect()
            })
            .unwrap_or_default(),
        kind: v["kind"].as_str().unwrap_or_default().to_string(),
        cmd_tx: go_tx.clone(),
    };
    match waiting {
        Some(fault) => {
            if let Err(unsent) = fault.send(armed) {
                let _ = unsent.0.cmd_tx.send(format!("GO {exec}\n"));
            }
        }
        None => {
            let _ = go_tx.send(format!("GO {exec}\n"));
        }
    }
}
