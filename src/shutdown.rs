//! Shutdown is plumbed explicitly: whoever must stop holds a `Shutdown` and is told once.

use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// The sending side; dropping it does not trigger shutdown.
#[derive(Debug)]
pub struct ShutdownTrigger {
    tx: watch::Sender<bool>,
}

pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger { tx }, Shutdown { rx })
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        let _ = self.tx.send(true);
    }
}

impl Shutdown {
    /// A `Shutdown` that is never requested.
    pub fn never() -> Shutdown {
        channel().1
    }

    /// Resolves once shutdown was requested (at once if it already was).
    pub async fn requested(&mut self) {
        if self.rx.wait_for(|stop| *stop).await.is_err() {
            // The trigger is gone and never fired: never resolve.
            std::future::pending::<()>().await;
        }
    }
}

/// A `Shutdown` that fires when either of `a` and `b` does.
pub fn either(mut a: Shutdown, mut b: Shutdown) -> Shutdown {
    let (trigger, shutdown) = channel();
    tokio::spawn(async move {
        tokio::select! {
            _ = a.requested() => {}
            _ = b.requested() => {}
        }
        trigger.trigger();
    });
    shutdown
}

/// A `Shutdown` that fires on SIGINT or SIGTERM.
pub fn on_signals() -> Shutdown {
    on_signals_or_deadline(None, std::sync::Arc::default())
}

/// A `Shutdown` that fires on SIGINT or SIGTERM, or at `deadline` (`--deadline`: a
/// one-shot job stops pulling, finishes what is in flight and exits 0); `reached` is set
/// when it was the deadline.
pub fn on_signals_or_deadline(
    deadline: Option<tokio::time::Instant>,
    reached: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Shutdown {
    let (trigger, shutdown) = channel();
    tokio::spawn(async move {
        let deadline = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
                _ = deadline => {
                    reached.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        #[cfg(not(unix))]
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = deadline => {
                reached.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if reached.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::info!("deadline reached: no more pulls, finishing batches in flight");
        } else {
            tracing::info!("shutdown requested: no more pulls, finishing batches in flight");
        }
        trigger.trigger();
    });
    shutdown
}
