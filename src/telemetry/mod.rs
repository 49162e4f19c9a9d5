//! What operators see: Prometheus metrics, liveness and readiness over HTTP.

pub mod control;
pub mod metrics;
pub mod server;
