//! A fixed limit: the number never moves. The baseline the adaptive ones are judged by.

use super::{ConcurrencyLimit, Sample};

#[derive(Debug, Clone)]
pub struct FixedLimit(pub usize);

impl ConcurrencyLimit for FixedLimit {
    fn limit(&self) -> usize {
        self.0
    }

    fn on_sample(&mut self, _sample: Sample) {}

    fn adapts(&self) -> bool {
        false
    }
}
