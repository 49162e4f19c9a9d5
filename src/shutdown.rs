//! Shutdown is plumbed explicitly: whoever must stop holds a clone of one
//! `CancellationToken` (tokio_util's) and is told once; this module cancels it on a signal
//! or at the deadline.

use tokio_util::sync::CancellationToken;

/// A token cancelled on SIGINT or SIGTERM.
pub fn on_signals() -> CancellationToken {
    on_signals_or_deadline(None, std::sync::Arc::default())
}

/// A token cancelled on SIGINT or SIGTERM, or at `deadline` (`--deadline`: a
/// one-shot job stops pulling, finishes what is in flight and exits 0); `reached` is set
/// when it was the deadline.
pub fn on_signals_or_deadline(
    deadline: Option<tokio::time::Instant>,
    reached: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> CancellationToken {
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
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
        trigger.cancel();
    });
    shutdown
}
