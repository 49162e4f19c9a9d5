//! What an operator changed at run time (`sluice ctl`): pause, the rate ceiling, the batch
//! size. Read by the pipeline at its next tick; never stored: the configuration is the
//! truth again on restart. Every change is logged with where it came from.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControlState {
    /// New writes are held until resumed.
    pub paused: bool,
    /// Records per second at most, below whatever else limits the rate; None: as configured.
    pub rate: Option<f64>,
    /// Records per batch at most; None: `sink.max_batch`.
    pub batch: Option<usize>,
}

#[derive(Debug, Default)]
pub struct Controls(Mutex<ControlState>);

impl Controls {
    pub fn get(&self) -> ControlState {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ControlState> {
        crate::lock::lock(&self.0)
    }

    pub fn pause(&self, origin: &str) {
        self.lock().paused = true;
        tracing::warn!(%origin, "operator: new writes paused");
    }

    pub fn resume(&self, origin: &str) {
        self.lock().paused = false;
        tracing::warn!(%origin, "operator: writes resumed");
    }

    /// `rate` takes the configuration's bounds, or 0 (holds everything); None goes back to
    /// the config.
    pub fn set_rate(&self, rate: Option<f64>, origin: &str) -> Result<(), String> {
        if let Some(problem) = rate.and_then(|r| crate::settings::bounds::rate_problem(r, true)) {
            return Err(format!("a rate {problem}"));
        }
        self.lock().rate = rate;
        match rate {
            Some(r) => tracing::warn!(%origin, "operator: rate ceiling set to {r} rec/s"),
            None => tracing::warn!(%origin, "operator: rate ceiling back to the configuration"),
        }
        Ok(())
    }

    /// `batch` must be between 1 and the most a batch may hold; None goes back to the config.
    pub fn set_batch(&self, batch: Option<usize>, origin: &str) -> Result<(), String> {
        let most = crate::settings::bounds::MOST_BATCH as usize;
        if let Some(b) = batch
            && !(1..=most).contains(&b)
        {
            return Err(format!("a batch holds 1 to {most} records, got {b}"));
        }
        self.lock().batch = batch;
        match batch {
            Some(b) => tracing::warn!(%origin, "operator: batch size set to {b} records"),
            None => tracing::warn!(%origin, "operator: batch size back to the configuration"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_the_pipeline_could_not_use() {
        let c = Controls::default();
        assert!(c.set_rate(Some(f64::NAN), "test").is_err());
        assert!(c.set_rate(Some(-1.0), "test").is_err());
        assert!(
            c.set_rate(Some(1e-20), "test").is_err(),
            "below the configuration's least"
        );
        c.set_rate(Some(0.0), "test").unwrap();
        assert!(c.set_batch(Some(0), "test").is_err());
        c.set_rate(Some(50.0), "test").unwrap();
        c.set_batch(Some(10), "test").unwrap();
        c.pause("test");
        assert_eq!(
            c.get(),
            ControlState {
                paused: true,
                rate: Some(50.0),
                batch: Some(10)
            }
        );
        c.set_rate(None, "test").unwrap();
        c.resume("test");
        assert_eq!(c.get().rate, None);
        assert!(!c.get().paused);
    }
}
