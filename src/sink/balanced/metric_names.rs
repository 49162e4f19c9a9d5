//! The names of the balanced sink's own metrics, recorded where it picks and judges its
//! endpoints; `telemetry::metrics` describes them.

pub const ENDPOINT_REQUESTS: &str = "sluice_endpoint_requests_total";
pub const ENDPOINT_LATENCY: &str = "sluice_endpoint_latency_seconds";
pub const ENDPOINT_UP: &str = "sluice_endpoint_up";
pub const APERTURE_SIZE: &str = "sluice_aperture_size";
