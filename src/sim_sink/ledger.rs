//! What the emulated database saw: counts of requests, records and body bytes by fate, the
//! keys it stored (a key stored twice counts as a duplicate, not as a second row), and what
//! it accepted in each 200 ms window since it started — the shape of the load in each unit a
//! sink may limit, for plots and for assertions such as "after the first seconds, fewer than
//! 5% throttled".

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::capacity::BucketUnit;

pub const WINDOW: Duration = Duration::from_millis(200);

#[derive(Debug, Default)]
pub struct Ledger {
    keys: HashSet<String>,
    stats: SimStats,
}

/// The `GET /stats` document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimStats {
    /// Requests to the ingest endpoint, whatever their fate.
    pub requests: u64,
    /// Records in requests that could be read (including throttled and rejected ones):
    /// what the clients sent.
    pub records_received: u64,
    /// Body bytes of the requests whose records were counted in `records_received`.
    #[serde(default)]
    pub bytes_received: u64,
    /// Records taken (newly stored or duplicates).
    pub accepted: u64,
    /// Requests taken (answered 200), and the bytes of their bodies.
    #[serde(default)]
    pub requests_accepted: u64,
    #[serde(default)]
    pub bytes_accepted: u64,
    /// Distinct keys stored.
    pub inserted: u64,
    /// Records whose key was already stored.
    pub duplicates: u64,
    /// Requests answered 429 (over capacity), and the records in them; with `--bulk`,
    /// requests of which some documents were answered 429, and those documents.
    pub rejected: u64,
    pub rejected_records: u64,
    /// Requests answered 400 or 422 (unreadable body, a record with `reject_field`).
    pub malformed: u64,
    /// `--bulk`: documents answered 400 for carrying `reject_field` (a mapping error).
    #[serde(default)]
    pub unmapped: u64,
    /// Requests that met an outage (answered 503, or held until it ended).
    pub unavailable: u64,
    /// Requests never answered: beyond the concurrency limit with `--drop-above`.
    #[serde(default)]
    pub dropped: u64,
    /// The most requests in progress at once.
    pub max_concurrency: u64,
    /// TCP connections accepted: what a client's pool opened.
    #[serde(default)]
    pub connections: u64,
    pub window_ms: u64,
    /// One entry per 200 ms window since the start.
    pub windows: Vec<LedgerWindow>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LedgerWindow {
    /// Records taken in this window.
    pub accepted: u64,
    pub requests: u64,
    /// Requests answered 429 in this window.
    pub rejected: u64,
    /// Requests taken (answered 200) in this window, and their body bytes.
    #[serde(default)]
    pub requests_accepted: u64,
    #[serde(default)]
    pub bytes_accepted: u64,
    /// Body bytes of the readable requests that arrived in this window, whatever their fate.
    #[serde(default)]
    pub bytes_received: u64,
}

impl LedgerWindow {
    /// What this window took, counted in `unit`.
    pub fn accepted_in(&self, unit: BucketUnit) -> u64 {
        match unit {
            BucketUnit::Records => self.accepted,
            BucketUnit::Requests => self.requests_accepted,
            BucketUnit::Bytes => self.bytes_accepted,
        }
    }
}

impl SimStats {
    /// Everything taken, counted in `unit`.
    pub fn accepted_in(&self, unit: BucketUnit) -> u64 {
        match unit {
            BucketUnit::Records => self.accepted,
            BucketUnit::Requests => self.requests_accepted,
            BucketUnit::Bytes => self.bytes_accepted,
        }
    }
}

impl Ledger {
    pub fn request(&mut self, now: Duration, concurrency: u64) {
        self.stats.requests += 1;
        self.stats.max_concurrency = self.stats.max_concurrency.max(concurrency);
        self.window(now).requests += 1;
    }

    /// A readable request of `records` records in `bytes` body bytes.
    pub fn received(&mut self, now: Duration, records: u64, bytes: u64) {
        self.stats.records_received += records;
        self.stats.bytes_received += bytes;
        self.window(now).bytes_received += bytes;
    }

    pub fn unavailable(&mut self) {
        self.stats.unavailable += 1;
    }

    pub fn dropped(&mut self) {
        self.stats.dropped += 1;
    }

    pub fn unmapped(&mut self, documents: u64) {
        self.stats.unmapped += documents;
    }

    pub fn malformed(&mut self) {
        self.stats.malformed += 1;
    }

    pub fn throttled(&mut self, now: Duration, records: u64) {
        self.stats.rejected += 1;
        self.stats.rejected_records += records;
        self.window(now).rejected += 1;
    }

    /// Takes a request of `bytes` body bytes: stores the keys not stored yet; returns
    /// (inserted, duplicates).
    pub fn accept<'a>(
        &mut self,
        now: Duration,
        bytes: u64,
        keys: impl IntoIterator<Item = &'a str>,
    ) -> (u64, u64) {
        let (mut inserted, mut duplicates) = (0, 0);
        for key in keys {
            if self.keys.insert(key.to_string()) {
                inserted += 1;
            } else {
                duplicates += 1;
            }
        }
        self.stats.accepted += inserted + duplicates;
        self.stats.inserted += inserted;
        self.stats.duplicates += duplicates;
        self.stats.requests_accepted += 1;
        self.stats.bytes_accepted += bytes;
        let window = self.window(now);
        window.accepted += inserted + duplicates;
        window.requests_accepted += 1;
        window.bytes_accepted += bytes;
        (inserted, duplicates)
    }

    pub fn stats(&self) -> SimStats {
        SimStats {
            window_ms: WINDOW.as_millis() as u64,
            ..self.stats.clone()
        }
    }

    pub fn connected(&mut self) {
        self.stats.connections += 1;
    }

    pub fn key_set(&self) -> &HashSet<String> {
        &self.keys
    }

    /// Every key stored, unsorted: sorted by the caller, after the ledger's lock is given
    /// back (sorting 100,000 keys under it stalled every request for a window).
    pub fn keys(&self) -> Vec<String> {
        self.keys.iter().cloned().collect()
    }

    fn window(&mut self, now: Duration) -> &mut LedgerWindow {
        let i = (now.as_millis() / WINDOW.as_millis()) as usize;
        if self.stats.windows.len() <= i {
            self.stats.windows.resize(i + 1, LedgerWindow::default());
        }
        &mut self.stats.windows[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedupes_by_key_and_buckets_by_window() {
        let mut l = Ledger::default();
        let ms = Duration::from_millis;
        l.request(ms(10), 1);
        l.received(ms(10), 2, 60);
        assert_eq!(l.accept(ms(10), 60, ["a", "b"]), (2, 0));
        l.request(ms(450), 3);
        l.received(ms(450), 2, 70);
        assert_eq!(l.accept(ms(450), 70, ["b", "c"]), (1, 1));
        l.request(ms(460), 2);
        l.received(ms(460), 7, 300);
        l.throttled(ms(460), 7);
        let s = l.stats();
        assert_eq!(
            (s.requests, s.accepted, s.inserted, s.duplicates),
            (3, 4, 3, 1)
        );
        assert_eq!(
            (s.rejected, s.rejected_records, s.max_concurrency),
            (1, 7, 3)
        );
        assert_eq!(
            (
                s.records_received,
                s.bytes_received,
                s.requests_accepted,
                s.bytes_accepted
            ),
            (11, 430, 2, 130)
        );
        assert_eq!(
            s.windows,
            vec![
                LedgerWindow {
                    accepted: 2,
                    requests: 1,
                    rejected: 0,
                    requests_accepted: 1,
                    bytes_accepted: 60,
                    bytes_received: 60,
                },
                LedgerWindow::default(),
                LedgerWindow {
                    accepted: 2,
                    requests: 2,
                    rejected: 1,
                    requests_accepted: 1,
                    bytes_accepted: 70,
                    bytes_received: 370,
                },
            ]
        );
        let units = [BucketUnit::Records, BucketUnit::Requests, BucketUnit::Bytes];
        assert_eq!(units.map(|u| s.windows[2].accepted_in(u)), [2, 1, 70]);
        assert_eq!(units.map(|u| s.accepted_in(u)), [4, 2, 130]);
        let mut keys = l.keys();
        keys.sort();
        assert_eq!(keys, ["a", "b", "c"]);
    }
}
