//! The file a learned limit is kept in across runs (`throttle.remember`), in one place:
//! the write path reads and writes it, and the configuration's check reads it to tell a
//! file of ours from one it must not overwrite. Pure: time comes in as an argument.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::Unit;

/// A limit learned longer ago than this says too little about the sink now.
pub const KEPT_FOR: Duration = Duration::from_secs(24 * 3600);

/// A remembered limit is a line of JSON; a larger file is something else.
pub const LARGEST: u64 = 64 * 1024;

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RememberedLimit {
    /// Which sink: its kind, URL without credentials or query, and table.
    sink: String,
    /// "records", "requests" or "bytes".
    unit: String,
    /// The limit, in `unit` per second.
    per_second: f64,
    /// When it was learned, seconds since the Unix epoch.
    learned_at: u64,
}

impl RememberedLimit {
    /// `per_second` in `unit` for `sink`, learned at `now`: the file's one line.
    pub fn line(
        sink: &str,
        unit: Unit,
        per_second: f64,
        now: SystemTime,
    ) -> serde_json::Result<String> {
        let learned_at = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let kept = RememberedLimit {
            sink: sink.to_string(),
            unit: unit.name().to_string(),
            per_second,
            learned_at,
        };
        Ok(serde_json::to_string(&kept)? + "\n")
    }

    /// The limit `text` holds for `sink`, if it is usable at `now`: the same sink, a known
    /// unit, a positive finite rate, learned within [`KEPT_FOR`]. Whatever the bytes, no
    /// panic.
    pub fn read(text: &str, sink: &str, now: SystemTime) -> Option<(Unit, f64)> {
        let found: RememberedLimit = serde_json::from_str(text).ok()?;
        let unit = Unit::ALL.into_iter().find(|u| u.name() == found.unit)?;
        let age = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()?
            .saturating_sub(Duration::from_secs(found.learned_at));
        let usable = found.sink == sink
            && found.per_second.is_finite()
            && found.per_second > 0.0
            && age <= KEPT_FOR;
        usable.then_some((unit, found.per_second))
    }

    /// `bytes` are a remembered limit (of any sink, unit or age), or blank.
    pub fn is_one_or_blank(bytes: &[u8]) -> bool {
        bytes.iter().all(u8::is_ascii_whitespace)
            || serde_json::from_slice::<RememberedLimit>(bytes).is_ok()
    }
}
