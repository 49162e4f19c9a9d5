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

    pub fn is_requested(&self) -> bool {
        *self.rx.borrow()
    }
}

/// A `Shutdown` that fires on SIGINT or SIGTERM.
pub fn on_signals() -> Shutdown {
    let (trigger, shutdown) = channel();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutdown requested: no more pulls, finishing batches in flight");
        trigger.trigger();
    });
    shutdown
}
