//! What the emulated sink limits — records, requests or request-body bytes per second — and
//! how each strategy is told "the capacity" in that unit:
//!
//! - the baselines post batches of [`BATCH`] records whatever the unit; the token bucket
//!   (d) counts the sink's unit (a record, a request, or a body byte per token) at the
//!   sink's capacity with one second of burst, so it never needs a conversion;
//! - sluice (e) is told the record rate that fits: the capacity itself for records;
//!   requests/s × [`BATCH`] with `sink.max_batch = BATCH` for requests (what a user who
//!   knows the gateway's limit and picks the baselines' batch size would write); for bytes
//!   the capacity divided by the body bytes per record of sluice's own envelope, measured
//!   by a calibration drain of the same backlog;
//! - sluice (e′) is asked four times that record rate, with the same `sink.max_batch`.
//!
//! Every scenario is sized so that a client sending batches of 100 can deliver about the
//! same records per second in each unit.

use sluice::sim_sink::BucketUnit;

use crate::strategy::BATCH;

#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub unit: BucketUnit,
    /// Per second, in `unit`.
    pub capacity: f64,
    /// What sluice told the capacity is given: records per second that fit…
    pub records_per_second: f64,
    /// …and its `sink.max_batch` (None: the default).
    pub max_batch: Option<usize>,
}

impl Limit {
    pub fn records(capacity: f64) -> Limit {
        Limit {
            unit: BucketUnit::Records,
            capacity,
            records_per_second: capacity,
            max_batch: None,
        }
    }

    pub fn requests(capacity: f64) -> Limit {
        Limit {
            unit: BucketUnit::Requests,
            capacity,
            records_per_second: capacity * BATCH as f64,
            max_batch: Some(BATCH),
        }
    }

    /// `records_per_second` of sluice's envelope, `bytes_per_record` each.
    pub fn bytes(records_per_second: f64, bytes_per_record: f64) -> Limit {
        Limit {
            unit: BucketUnit::Bytes,
            capacity: (records_per_second * bytes_per_record).round(),
            records_per_second,
            max_batch: None,
        }
    }

    /// "records", "requests", "bytes": file names and the strategies' flags.
    pub fn name(&self) -> &'static str {
        match self.unit {
            BucketUnit::Records => "records",
            BucketUnit::Requests => "requests",
            BucketUnit::Bytes => "bytes",
        }
    }

    /// The capacity as a reader wants it: "800 rec/s", "4 requests/s (400 rec/s in
    /// batches of 100)".
    pub fn describe(&self) -> String {
        let told = self.records_per_second;
        match self.unit {
            BucketUnit::Records => format!("{} rec/s", self.capacity),
            BucketUnit::Requests => format!(
                "{} requests/s ({told} rec/s in batches of {BATCH})",
                self.capacity
            ),
            BucketUnit::Bytes => format!(
                "{} body bytes/s ({told:.0} rec/s in sluice's envelope)",
                self.capacity
            ),
        }
    }

    /// Strategy arguments for a baseline's process.
    pub fn args(&self) -> [String; 4] {
        [
            "--unit".into(),
            self.name().into(),
            "--capacity".into(),
            self.capacity.to_string(),
        ]
    }

    pub fn from_args(unit: &str, capacity: f64) -> Limit {
        let unit = match unit {
            "records" => BucketUnit::Records,
            "requests" => BucketUnit::Requests,
            "bytes" => BucketUnit::Bytes,
            other => panic!("unknown unit {other}"),
        };
        Limit {
            unit,
            capacity,
            records_per_second: 0.0,
            max_batch: None,
        }
    }
}
