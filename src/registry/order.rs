//! The order of one caller's requests around group-committed writes.
//!
//! Requests a caller sends directly reach ZooKeeper in the order they are sent, on its one
//! session. A group-committed write ([`super::Registry::multi_at_batched`]) does not: it waits
//! for a batch, and requests made meanwhile may overtake it. A caller whose results must come
//! back in the order ZooKeeper applied them (a job's driver feeds them to its state machine so)
//! sends each request in its turn: a commit once every request before it is answered, and every
//! request after a commit once that commit is answered. Reads between two commits still go
//! together.

use futures::future::{BoxFuture, Shared};
use futures::FutureExt;
use tokio::sync::oneshot;

/// Resolves when a request is answered (or dropped).
type Answered = Shared<oneshot::Receiver<()>>;

/// One caller's requests in flight, as far as their order needs; see the module docs.
#[derive(Default)]
pub struct RequestOrder {
    /// The latest commit not yet answered.
    last_commit: Option<Answered>,
    /// The requests issued since the latest commit, not yet answered.
    since_commit: Vec<Answered>,
}

/// A request's turn: wait for `before`, send the request, then tell `answered`.
pub struct Turn {
    pub before: BoxFuture<'static, ()>,
    pub answered: oneshot::Sender<()>,
}

impl RequestOrder {
    /// The turn of the next request (`commit`: a group-committed write).
    pub fn next(&mut self, commit: bool) -> Turn {
        let (answered, done) = oneshot::channel();
        let done = done.shared();
        self.forget_answered();
        let mut before: Vec<Answered> = self.last_commit.iter().cloned().collect();
        if commit {
            before.append(&mut self.since_commit);
            self.last_commit = Some(done);
        } else {
            self.since_commit.push(done);
        }
        Turn {
            before: async move {
                futures::future::join_all(before).await;
            }
            .boxed(),
            answered,
        }
    }

    /// Lets go of the requests already answered: nothing after them has to wait for them, and
    /// a caller idle between its runs holds nothing.
    pub fn forget_answered(&mut self) {
        let answered = |r: &Answered| r.clone().now_or_never().is_some();
        self.last_commit.take_if(|c| answered(c));
        self.since_commit.retain(|r| !answered(r));
        if self.since_commit.is_empty() {
            self.since_commit = Vec::new();
        }
    }

    /// Runs `request` in its turn (see [`RequestOrder::next`]).
    pub fn in_turn<T: Send + 'static>(
        &mut self,
        commit: bool,
        request: impl std::future::Future<Output = T> + Send + 'static,
    ) -> BoxFuture<'static, T> {
        let turn = self.next(commit);
        async move {
            turn.before.await;
            let result = request.await;
            let _ = turn.answered.send(());
            result
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_commit_waits_for_what_came_before_and_holds_what_comes_after() {
        let mut order = RequestOrder::default();
        let read = order.next(false);
        let commit = order.next(true);
        let after = order.next(false);
        let mut commit_before = commit.before;
        assert!(
            (&mut commit_before).now_or_never().is_none(),
            "the commit waits for the read before it"
        );
        let _ = read.answered.send(());
        assert!(commit_before.now_or_never().is_some());
        let mut after_before = after.before;
        assert!(
            (&mut after_before).now_or_never().is_none(),
            "a read after the commit waits for it"
        );
        let _ = commit.answered.send(());
        assert!(after_before.now_or_never().is_some());
        let _ = after.answered.send(());
        order.forget_answered();
        assert!(order.last_commit.is_none() && order.since_commit.is_empty());
    }
}
