//! Client-side balancing over several sink endpoints: pick by measured load, prefer the
//! worker's own zone, and stop sending to an endpoint that fails or throttles.

pub mod balancer;
pub mod peak_ewma;
