//! The two enums of `control/` that `[sink.balance]` names, described for the schema:
//! `control/` is pure and knows nothing of it, so their shape is written out here once, and
//! a test holds each copy to what the real type reads.

use schemars::JsonSchema;
use serde::Deserialize;

// `control::balance::balancer::StrategySchema` as written.
/// How each write picks one of the sink's endpoints.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[schemars(rename = "Strategy")]
pub enum StrategySchema {
    /// Each endpoint in turn.
    RoundRobin,
    /// The endpoint with the fewest requests in flight.
    LeastLoaded,
    /// The less loaded of two endpoints picked at random.
    P2c,
    /// The faster of two endpoints picked at random, by peak-EWMA latency (the default).
    P2cEwma,
    /// P2C by requests in flight within a subset sized by load (`aperture`).
    Aperture,
}

// `control::balance::aperture::Mode` as written.
/// How the aperture's subset of endpoints is chosen.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[schemars(rename = "ApertureMode")]
pub enum ApertureMode {
    /// The first endpoints of an order of this worker's own (a seeded shuffle): workers
    /// pick independently, so some endpoints may serve more workers than others.
    Random,
    /// An arc of the ring by the worker's index and the number of workers.
    Deterministic,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Each value a copy above accepts, the type it describes accepts too.
    fn both_read<Copy: for<'de> Deserialize<'de>, Real: for<'de> Deserialize<'de>>(v: Value) {
        assert!(serde_json::from_value::<Copy>(v.clone()).is_ok(), "{v}");
        assert!(serde_json::from_value::<Real>(v.clone()).is_ok(), "{v}");
    }

    fn variants<T: JsonSchema>() -> Vec<Value> {
        let schema = schemars::schema_for!(T).to_value();
        let mut names = Vec::new();
        for one in schema["oneOf"].as_array().into_iter().flatten() {
            names.extend(one["enum"].as_array().into_iter().flatten().cloned());
            names.extend(one.get("const").cloned());
        }
        names.extend(schema["enum"].as_array().into_iter().flatten().cloned());
        assert!(!names.is_empty(), "{schema}");
        names
    }

    #[test]
    fn the_copies_name_what_the_real_types_read() {
        use crate::control::balance::{aperture::Mode, balancer::Strategy as Real};
        for name in variants::<StrategySchema>() {
            both_read::<StrategySchema, Real>(name);
        }
        for name in variants::<ApertureMode>() {
            both_read::<ApertureMode, Mode>(name);
        }
    }
}
