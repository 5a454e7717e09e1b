//! The fires of an instant not yet taken up by their jobs, which answers wait behind.

use std::sync::Arc;
use std::time::Duration;

/// The fires of the instants just passed that their jobs have not taken up yet.
///
/// When many jobs fire at one instant, their triggers are the time-critical work of the moment,
/// and the workers' answers to the first triggers (each a write of its own, its watch events and
/// its reply) would otherwise share the two cores with the rest of the fires. An answer waits for
/// the burst to settle ([`Burst::settled`], at most [`ANSWER_WAIT_MAX`]) before its job sees it:
/// no answer is lost or reordered within its execution, it only comes after the instant's fires.
#[derive(Debug, Default)]
pub struct Burst {
    pending: std::sync::atomic::AtomicUsize,
    settled: tokio::sync::Notify,
}

/// The longest an answer waits for a burst of fires to settle: a job that cannot take its fire
/// up (a stall, a fire dropped with its retired job) holds no answer back for longer.
pub const ANSWER_WAIT_MAX: Duration = Duration::from_millis(100);

impl Burst {
    /// Counts one fire sent; it is taken up when the returned [`Taken`] is dropped.
    pub(super) fn count(self: &Arc<Self>) -> Taken {
        self.pending
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Taken(self.clone())
    }

    /// The fires sent and not yet taken up.
    pub fn pending(&self) -> usize {
        self.pending.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Returns once every fire sent so far has been taken up, or after `max`.
    pub async fn settled(&self, max: Duration) {
        // Every answer comes through here, nearly always with nothing pending: no waiter is
        // registered then. Otherwise the count is read again once registered, so that a last
        // place given back in between is not missed.
        if self.pending() == 0 {
            return;
        }
        let notified = self.settled.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.pending() == 0 {
            return;
        }
        let _ = tokio::time::timeout(max, notified).await;
    }
}

/// One fire's place in its timer's [`Burst`], given back when dropped.
#[derive(Debug)]
pub struct Taken(Arc<Burst>);

impl Drop for Taken {
    fn drop(&mut self) {
        if self
            .0
            .pending
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            self.0.settled.notify_waiters();
        }
    }
}

/// Any two places compare equal: a fire is told from another by its key, instant and kind.
impl PartialEq for Taken {
    fn eq(&self, _: &Taken) -> bool {
        true
    }
}

impl Eq for Taken {}
