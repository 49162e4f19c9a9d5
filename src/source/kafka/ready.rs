//! Polling the consumer's stream once, without waiting: what is ready now, the events
//! queued ahead of it served on the way.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::{Stream, StreamExt};

/// Most events (rebalances, statistics, commit results) served in a row while looking for
/// a message without waiting; far more than ever queue up between two ticks.
const MAX_EVENTS_IN_A_ROW: usize = 1024;

/// Sets a flag when woken: tells an event served (the stream wakes itself at once) from an
/// empty queue (it waits for a wake-up from librdkafka).
struct WakeFlag(AtomicBool);

impl Wake for WakeFlag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The next message or error ready in the consumer's queue, serving the events queued
/// before it; `None` once nothing is ready. `now_or_never` alone cannot do this: a served
/// event polls as pending just like an empty queue, so a slow pull that met the statistics
/// event first every time returned nothing, again and again.
pub(super) fn ready_now<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    let flag = Arc::new(WakeFlag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    for _ in 0..MAX_EVENTS_IN_A_ROW {
        flag.0.store(false, Ordering::SeqCst);
        match stream.poll_next_unpin(&mut cx) {
            Poll::Ready(item) => return item,
            Poll::Pending if flag.0.load(Ordering::SeqCst) => continue,
            Poll::Pending => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls as a MessageStream does: a queued event is served and the stream wakes
    /// itself; an empty queue stores the waker and stays pending.
    struct Queue(Vec<Option<u32>>);

    impl Stream for Queue {
        type Item = u32;

        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<u32>> {
            if self.0.is_empty() {
                return Poll::Pending;
            }
            match self.0.remove(0) {
                Some(message) => Poll::Ready(Some(message)),
                None => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            }
        }
    }

    #[test]
    fn events_ahead_of_a_message_do_not_hide_it() {
        let mut queue = Queue(vec![None, None, Some(7), None, Some(8)]);
        assert_eq!(ready_now(&mut queue), Some(7));
        assert_eq!(ready_now(&mut queue), Some(8));
        assert_eq!(ready_now(&mut queue), None);
        let mut only_events = Queue(vec![None; 3]);
        assert_eq!(ready_now(&mut only_events), None);
        assert!(only_events.0.is_empty(), "every event was served");
    }
}
