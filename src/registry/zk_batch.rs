//! Group commit: multi-ops that many callers submit at about the same time (the start and end
//! multi-ops of many jobs, say) go to ZooKeeper as one multi-op.
//!
//! ZooKeeper spends much of a small multi-op on the request itself (queues between its threads,
//! one transaction, one answer), so a hundred jobs starting at one instant cost far less as one
//! request than as a hundred. One task sends the batched requests, a few at a time: what is queued
//! is sent at once as one request while fewer than `MAX_IN_FLIGHT` are in flight, and what comes
//! while that many are goes together when one of them is answered. A caller alone therefore waits
//! for nothing, and a crowd waits at most for the requests ahead of it.
//!
//! What each caller sees is what its own multi-op would have got:
//! - the requests of one batch are applied in the order they were submitted, as ZooKeeper applies
//!   one session's requests in order; but up to `MAX_IN_FLIGHT` batches are in flight at once,
//!   and a batch sent again after a failure lands after the ones sent meanwhile, so requests in
//!   different batches have no order: a caller whose requests must land in order submits the
//!   next when the one before is answered (the job driver does), and needs nothing else;
//! - each gets the results of its own operations;
//! - when an operation fails, the whole request is undone by ZooKeeper: the caller it belongs to
//!   gets `MultiFailed` with the index in its own operations, and the other callers' operations
//!   are sent again as one request (should one of those fail too, the rest go each as a request
//!   of its own, at once);
//! - an error of the request as a whole (connection loss, timeout, another session) is every
//!   caller's.
//!
//! Requests of different session generations never share a request.
//!
//! Likewise a batched request may be sent after a request the same caller made later by other
//! means: a caller that needs the order waits for the batched answer first.

use std::sync::Arc;

use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use zookeeper_client as zk;

use super::zk_session::{acls, call, lock, map_err, Shared};
use super::zookeeper::{answer, op_failed, op_results, send_multi};
use super::{Error, Op, OpResult, Result};

/// At most this many batched requests in flight at once (ZooKeeper works on one while it reads
/// the next and answers the one before).
const MAX_IN_FLIGHT: usize = 4;
/// At most this many operations in one request. Much larger requests ran fewer items a second in
/// `cargo bench --bench core -- scale` (ZooKeeper's JVM busy longer with each, less overlap).
const MAX_OPS: usize = 256;
/// At most about this many bytes of paths and data in one request (ZooKeeper refuses requests
/// over its `jute.maxbuffer`, 1 MB by default, and the answer grows with the operations too).
const MAX_BYTES: usize = 256 * 1024;

/// One caller's multi-op, waiting for its turn.
pub(super) struct Request {
    generation: u64,
    ops: Arc<[Op]>,
    bytes: usize,
    reply: oneshot::Sender<Result<Vec<OpResult>>>,
}

fn size_of(ops: &[Op]) -> usize {
    ops.iter()
        .map(|op| {
            16 + match op {
                Op::Create { path, data, .. } | Op::SetData { path, data, .. } => {
                    path.len() + data.len()
                }
                Op::Delete { path, .. } | Op::Check { path, .. } => path.len(),
            }
        })
        .sum()
}

/// Queues `ops` (paths already checked) for the batcher and waits for their results.
pub(super) async fn submit(
    shared: &Shared,
    generation: u64,
    ops: Arc<[Op]>,
) -> Result<Vec<OpResult>> {
    let (reply, answer) = oneshot::channel();
    let request = Request {
        generation,
        bytes: size_of(&ops),
        ops,
        reply,
    };
    if shared.is_closed() || shared.batch_tx.send(request).is_err() {
        return Err(Error::Closed);
    }
    answer.await.unwrap_or(Err(Error::Closed))
}

/// The batcher: until the session closes, takes what is queued and sends it, with at most
/// `MAX_IN_FLIGHT` requests in flight, and answers each caller.
pub(super) async fn run(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Request>) {
    let mut held: Option<Request> = None;
    let mut in_flight = FuturesUnordered::new();
    loop {
        let first = match held.take() {
            Some(r) if in_flight.len() < MAX_IN_FLIGHT => r,
            held_back => {
                held = held_back;
                tokio::select! {
                    biased;
                    () = shared.closing.cancelled() => break,
                    Some(()) = in_flight.next(), if !in_flight.is_empty() => continue,
                    r = rx.recv(), if held.is_none() && in_flight.len() < MAX_IN_FLIGHT => match r {
                        Some(r) => r,
                        None => break,
                    },
                }
            }
        };
        let (mut ops, mut bytes) = (first.ops.len(), first.bytes);
        let mut batch = vec![first];
        while let Ok(r) = rx.try_recv() {
            if r.reply.is_closed() {
                // Its caller is gone: as a multi-op dropped before it was sent, it is not sent.
                continue;
            }
            if r.generation != batch[0].generation
                || ops + r.ops.len() > MAX_OPS
                || bytes + r.bytes > MAX_BYTES
            {
                held = Some(r);
                break;
            }
            ops += r.ops.len();
            bytes += r.bytes;
            batch.push(r);
        }
        in_flight.push(send(shared.clone(), batch));
        // Poll it now, so that its request leaves at once, not when the loop next waits.
        while let Some(Some(())) = in_flight.next().now_or_never() {}
    }
    // Closing: what is in flight ends within the operation timeout; the rest is not sent.
    rx.close();
    for r in held
        .into_iter()
        .chain(std::iter::from_fn(|| rx.try_recv().ok()))
    {
        let _ = r.reply.send(Err(Error::Closed));
    }
    while in_flight.next().await.is_some() {}
}

/// Sends `batch` and answers each of its callers: as one multi-op; when an operation fails, the
/// others once more as one; when one of theirs fails too, each of the rest on its own.
async fn send(shared: Arc<Shared>, batch: Vec<Request>) {
    let generation = batch[0].generation;
    let Some(rest) = send_together(&shared, batch).await else {
        return;
    };
    let Some(rest) = send_together(&shared, rest).await else {
        return;
    };
    send_each(&shared, generation, rest).await;
}

/// Sends `batch` as one multi-op and answers its callers; when an operation failed, answers its
/// caller only and returns the others, whose operations ZooKeeper undid, in order.
async fn send_together(shared: &Shared, batch: Vec<Request>) -> Option<Vec<Request>> {
    if batch.is_empty() {
        return None;
    }
    let generation = batch[0].generation;
    let acls = acls(&shared.settings);
    let all = &batch;
    let got = call(shared, "multi", Some(generation), |c| async move {
        let ops = all.iter().flat_map(|r| r.ops.iter());
        match send_multi(&c, ops, acls)?.await {
            Err(zk::MultiWriteError::RequestFailed { source }) => Err(source),
            other => Ok(other),
        }
    })
    .await;
    match got {
        Err(e) => fail_all(batch, &e),
        Ok(Ok(results)) => {
            let mut results = results.into_iter();
            for r in batch {
                let own = results.by_ref().take(r.ops.len()).collect();
                let _ = r.reply.send(Ok(op_results(&r.ops, own)));
            }
        }
        Ok(Err(zk::MultiWriteError::OperationFailed { index, source })) => {
            let mut first = 0;
            let mut rest = Vec::with_capacity(batch.len() - 1);
            let mut source = Some(source);
            for r in batch {
                let own = first..first + r.ops.len();
                first = own.end;
                match source.take_if(|_| own.contains(&index)) {
                    Some(source) => {
                        let _ = r
                            .reply
                            .send(Err(op_failed(&r.ops, index - own.start, source)));
                    }
                    None => rest.push(r),
                }
            }
            return Some(rest);
        }
        // `call` maps this one to its error above.
        Ok(Err(zk::MultiWriteError::RequestFailed { source })) => {
            fail_all(batch, &map_err(source, "multi"))
        }
    }
    None
}

/// Answers every caller of `batch` with `e`.
fn fail_all(batch: Vec<Request>, e: &Error) {
    for r in batch {
        let _ = r.reply.send(Err(e.clone()));
    }
}

/// Sends each request of `batch` as a multi-op of its own, in order, all at once.
async fn send_each(shared: &Shared, generation: u64, batch: Vec<Request>) {
    if batch.is_empty() {
        return;
    }
    let acls = acls(&shared.settings);
    let all = &batch;
    let answers = call(shared, "multi", Some(generation), |c| async move {
        let mut sent = Vec::with_capacity(all.len());
        for r in all {
            sent.push(send_multi(&c, r.ops.iter(), acls)?);
        }
        let answers = join_all(sent).await;
        // A request that failed as a whole fails them all, as one request would: its error
        // proves nothing about the session, and the outcome of every one is then unknown.
        for answer in &answers {
            if let Err(zk::MultiWriteError::RequestFailed { source }) = answer {
                return Err(source.clone());
            }
        }
        Ok(answers)
    })
    .await;
    match answers {
        Err(e) => fail_all(batch, &e),
        Ok(answers) => {
            for (r, one) in batch.into_iter().zip(answers) {
                let _ = r.reply.send(answer(&r.ops, one));
            }
        }
    }
}

/// The sending half, kept in `Shared`, and the receiving half, taken by the task that `spawn`
/// starts.
pub(super) fn channel() -> (
    mpsc::UnboundedSender<Request>,
    std::sync::Mutex<Option<mpsc::UnboundedReceiver<Request>>>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, std::sync::Mutex::new(Some(rx)))
}

/// Starts the batcher of `shared` (once).
pub(super) fn spawn(shared: &Arc<Shared>) {
    if let Some(rx) = lock(&shared.batch_rx).take() {
        shared.tasks.spawn(run(shared.clone(), rx));
    }
}
