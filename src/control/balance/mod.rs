//! Client-side balancing over several sink endpoints: pick by measured load, prefer the
//! worker's own zone, stop sending to an endpoint that fails or throttles, and with many
//! endpoints keep to a subset of them (aperture).

pub mod aperture;
pub(crate) mod balancer;
pub(crate) mod peak_ewma;
pub mod ring;
