//! Upsert mode: the writes of one key reach the sink in source order.
//!
//! The sink's guard lets a record apply over a stored one of the same version (a tie goes
//! to the later write), so the later record in source order wins a tie only if it is also
//! written later. Batches finish out of order (several in flight, retries, halves, a slow
//! connection): a batch therefore waits, before its first write, until every batch
//! dispatched before it that holds one of its keys is settled (written or dead-lettered, or
//! given up). Within a batch the pieces already go one after the other in source order.
//! Batches without a key in common run side by side as before; batches sharing keys
//! already waited for each other's row locks in the database, so little is lost.
//!
//! Order is taken when a batch is dispatched — in source order, by the pipeline alone —
//! and a batch only ever waits for earlier ones, so waits cannot form a circle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::Shared;
use tokio::sync::oneshot;

use crate::lock::lock;
use crate::record::Row;

/// Resolves once a batch is settled: its sender is dropped then (also if its task ends
/// any other way).
type Settled = Shared<oneshot::Receiver<()>>;

/// The keys of the batches in flight, each with the last batch dispatched that holds it.
#[derive(Default)]
pub struct KeyOrder {
    state: Mutex<Holders>,
}

#[derive(Default)]
struct Holders {
    next_batch: u64,
    by_key: HashMap<String, (u64, Settled)>,
}

/// A batch's place in the order of its keys: wait for it, then write; dropped when the
/// batch is settled.
pub struct Turn {
    order: Arc<KeyOrder>,
    batch: u64,
    keys: Vec<String>,
    before: Vec<Settled>,
    _settled: oneshot::Sender<()>,
}

impl KeyOrder {
    /// Takes the next place for a batch holding `keys`; called in source order.
    pub fn enter<'a>(self: &Arc<Self>, keys: impl IntoIterator<Item = &'a str>) -> Turn {
        let (settled_tx, settled_rx) = oneshot::channel();
        let settled = settled_rx.shared();
        let mut state = lock(&self.state);
        let batch = state.next_batch;
        state.next_batch += 1;
        let mut own = Vec::new();
        let mut before: Vec<(u64, Settled)> = Vec::new();
        for key in keys {
            match state
                .by_key
                .insert(key.to_string(), (batch, settled.clone()))
            {
                Some((earlier, _)) if earlier == batch => continue,
                Some((earlier, s)) if !before.iter().any(|(b, _)| *b == earlier) => {
                    before.push((earlier, s));
                }
                _ => {}
            }
            own.push(key.to_string());
        }
        Turn {
            order: self.clone(),
            batch,
            keys: own,
            before: before.into_iter().map(|(_, s)| s).collect(),
            _settled: settled_tx,
        }
    }

    /// A place for `rows`' batch when there is an order to keep (upsert mode).
    pub fn enter_batch(order: Option<&Arc<Self>>, rows: &[Row]) -> Option<Turn> {
        order.map(|o| o.enter(rows.iter().map(|r| r.key.as_str())))
    }
}

/// Runs `work` once `turn` (if any) comes, and gives the turn up when it is done.
pub async fn in_turn<T>(mut turn: Option<Turn>, work: impl Future<Output = T>) -> T {
    if let Some(turn) = &mut turn {
        turn.wait().await;
    }
    let done = work.await;
    drop(turn);
    done
}

impl Turn {
    /// Waits until every batch dispatched earlier that holds one of these keys is settled.
    /// Cancel-safe: an earlier batch is forgotten only once it is settled.
    pub async fn wait(&mut self) {
        while let Some(earlier) = self.before.last() {
            // An error only says the earlier batch's task ended without settling: it is
            // over all the same.
            let _ = earlier.clone().await;
            self.before.pop();
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut state = lock(&self.order.state);
        for key in self.keys.drain(..) {
            if state
                .by_key
                .get(&key)
                .is_some_and(|(b, _)| *b == self.batch)
            {
                state.by_key.remove(&key);
            }
        }
        // `_settled` drops after this: the batches waiting for this one go on.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ready<F: std::future::Future + Unpin>(f: &mut F) -> bool {
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        std::pin::Pin::new(f).poll(&mut cx).is_ready()
    }

    #[tokio::test]
    async fn a_batch_waits_only_for_earlier_batches_sharing_a_key() {
        let order = Arc::new(KeyOrder::default());
        let first = order.enter(["a", "b"]);
        let mut unrelated = order.enter(["c"]);
        let mut second = order.enter(["b", "d", "b"]);
        let mut third = order.enter(["a", "d"]);
        assert!(ready(&mut Box::pin(unrelated.wait())), "no key in common");
        assert!(
            !ready(&mut Box::pin(second.wait())),
            "b is held by the first"
        );
        drop(first);
        assert!(ready(&mut Box::pin(second.wait())));
        assert!(
            !ready(&mut Box::pin(third.wait())),
            "d is held by the second (a was the first's, now settled)"
        );
        drop(second);
        assert!(ready(&mut Box::pin(third.wait())));
        drop((third, unrelated));
        assert!(lock(&order.state).by_key.is_empty(), "every key released");
    }

    #[tokio::test(start_paused = true)]
    async fn writes_of_a_key_follow_dispatch_order_whatever_their_speed() {
        let order = Arc::new(KeyOrder::default());
        let applied = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // The earlier batch is the slow one: without the order the later would land first.
        for (i, slow) in [(0, 50), (1, 1), (2, 20), (3, 1)] {
            let mut turn = order.enter(["k"]);
            let applied = applied.clone();
            tasks.push(tokio::spawn(async move {
                turn.wait().await;
                tokio::time::sleep(Duration::from_millis(slow)).await;
                lock(&applied).push(i);
                drop(turn);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*lock(&applied), [0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn a_batch_whose_task_ended_unsettled_releases_the_next() {
        let order = Arc::new(KeyOrder::default());
        let first = order.enter(["k"]);
        let mut second = order.enter(["k"]);
        let task = tokio::spawn(async move {
            let _held = first;
            std::future::pending::<()>().await
        });
        task.abort();
        let _ = task.await;
        tokio::time::timeout(Duration::from_secs(5), second.wait())
            .await
            .expect("the aborted batch's place is given up");
    }
}
