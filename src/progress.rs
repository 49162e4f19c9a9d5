//! Progress for people: a bar with records/s and ETA in a terminal, a log line every
//! ten seconds otherwise (containers, CI, redirected output).

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::stats::Stats;

pub struct Progress {
    task: JoinHandle<()>,
    bar: Option<ProgressBar>,
}

impl Progress {
    pub fn start(stats: Arc<Stats>) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(5));
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} {percent:>3}% eta {eta} · {msg}",
                )
                .expect("valid template"),
            );
            bar
        });
        let task_bar = bar.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut last_log = Instant::now();
            let mut ticker = tokio::time::interval(Duration::from_millis(200));
            loop {
                ticker.tick().await;
                let pulled = stats.pulled.load(Relaxed);
                let written = stats.written.load(Relaxed);
                let rate = pulled as f64 / started.elapsed().as_secs_f64().max(1e-3);
                let total = stats.source_total.load(Relaxed);
                let done = stats.source_done.load(Relaxed);
                match &task_bar {
                    Some(bar) => {
                        if total > 0 {
                            bar.set_length(total);
                            bar.set_position(done.min(total));
                        }
                        bar.set_message(format!(
                            "{pulled} pulled, {written} written, {} dead-lettered, {rate:.0} rec/s",
                            stats.dead_lettered.load(Relaxed)
                        ));
                    }
                    None if last_log.elapsed() >= Duration::from_secs(10) => {
                        last_log = Instant::now();
                        let percent = (total > 0).then(|| {
                            format!(", {:.1}% of input", done as f64 * 100.0 / total as f64)
                        });
                        tracing::info!(
                            "progress: {pulled} pulled, {written} written, {} dead-lettered, {rate:.0} rec/s{}",
                            stats.dead_lettered.load(Relaxed),
                            percent.unwrap_or_default()
                        );
                    }
                    None => {}
                }
            }
        });
        Progress { task, bar }
    }

    pub fn finish(self) {
        self.task.abort();
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
