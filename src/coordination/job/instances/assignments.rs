//! What each worker is told of its items: its assignment, sent whenever its items, its leader
//! flag or the sharding's epoch change.

use tracing::debug;

use super::Instances;
use crate::coordination::events::WorkerEvent;
use crate::coordination::job::io::Cx;

impl Instances {
    /// Sends each live local instance its items if they, its leader flag or the epoch changed.
    /// Not while a sharding is being written or read (`unsettled`): what the mirror shows may
    /// be half of it, and a worker keeps its last assignment until then (its first goes out at
    /// once: it comes right after `Registered`).
    pub(in crate::coordination::job) fn push_assignments(&mut self, cx: &mut Cx) {
        let ids: Vec<String> = self.locals.keys().cloned().collect();
        for id in ids {
            self.push_assignment(cx, &id);
        }
    }

    pub(super) fn push_assignment(&mut self, cx: &mut Cx, id: &str) {
        let first = self.locals.get(id).is_some_and(|l| l.sent.is_none());
        if !first && (cx.view().processing || cx.io.owners_unsettled()) {
            return;
        }
        let view = cx.view();
        let items = view.items_of(id, &cx.settings().ip);
        let leader = view.leader.as_ref().is_some_and(|(l, _)| l == id);
        let mut epoch = view.epoch();
        let params = view.item_parameters();
        let Some(local) = self.locals.get_mut(id) else {
            return;
        };
        if !local.live() {
            return;
        }
        // The epoch never goes back, and grows whenever the items change: the owners' zxids
        // cannot show a change that only removed items (fewer items, a disabled item or
        // server), so such a change takes the next number after the last one sent.
        if let Some((sent_items, _, sent_epoch)) = &local.sent {
            epoch = if *sent_items != items {
                epoch.max(sent_epoch + 1)
            } else {
                epoch.max(*sent_epoch)
            };
        }
        let next = (items, leader, epoch);
        if local.sent.as_ref() == Some(&next) {
            return;
        }
        debug!(job = %cx.name(), instance = %id, items = ?next.0, leader = next.1, epoch = next.2,
               "assignment sent");
        let event = WorkerEvent::Assignment {
            items: next
                .0
                .iter()
                .map(|i| (*i, params.get(i).cloned().unwrap_or_default()))
                .collect(),
            leader,
            epoch,
        };
        cx.send(local.stream, event);
        local.sent = Some(next);
    }
}
