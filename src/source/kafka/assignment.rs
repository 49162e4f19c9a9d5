//! The partitions this worker holds and how far each one is settled. Shared by the source
//! (pulls, acks, commits) and the consumer context (rebalance callbacks, statistics); both
//! run on whichever thread polls the consumer, so a plain mutex around it never contends.
//!
//! Time comes in as an argument: the rules here are tested without a clock.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::source::watermark::Watermark;

#[derive(Debug)]
pub struct Assignment {
    /// Bumped on every rebalance: records fetched under an older epoch are not handed out.
    epoch: u64,
    /// `None` while the group has not (or no longer) given this worker an assignment; an
    /// empty map is a real answer (more workers than partitions).
    lanes: Option<BTreeMap<i32, Lane>>,
    /// Since when the worker has had no assignment.
    unassigned_since: Instant,
    /// The last record or (re)assignment: "caught up" also needs a quiet spell after it.
    last_activity: Instant,
    /// `--until-empty`: each partition stops at its end offset as first seen in this
    /// run; records at or past it are left for the next run.
    bounded: bool,
    /// Those end offsets, kept across rebalances.
    bounds: BTreeMap<i32, u64>,
}

#[derive(Debug, Default)]
struct Lane {
    /// The epoch this lane was (re)assigned in.
    assigned_in: u64,
    /// Starts at the first fetched offset: after an assignment the consumer fetches from
    /// the committed offset, so everything before the first record is settled already
    /// (or is a gap such as a transaction marker).
    watermark: Option<Watermark>,
    /// The offset the group's store holds (or will hold once an async commit lands).
    stored: Option<u64>,
    /// The consumer reached the end of the partition and fetched nothing since.
    at_end: bool,
    /// The end offset the run stops at, if it has one.
    bound: Option<u64>,
    /// Everything below the bound was fetched: nothing more is taken from here.
    at_bound: bool,
    /// The consumer was told to stop fetching this partition.
    paused: bool,
    /// Watermarks and committed offset as the client's statistics last reported them.
    high: Option<u64>,
    low: Option<u64>,
    reported_committed: Option<u64>,
}

impl Lane {
    /// Where the settled prefix ends: our own watermark, else the group's committed
    /// offset, else (a group that never committed here starts at the beginning) the low
    /// watermark.
    fn committed(&self) -> Option<u64> {
        self.watermark
            .as_ref()
            .map(Watermark::committed)
            .or(self.reported_committed)
            .or(self.low)
    }

    fn outstanding(&self) -> usize {
        self.watermark.as_ref().map_or(0, Watermark::outstanding)
    }

    /// Nothing more to fetch now: at the partition's end, or at the run's bound.
    fn finished(&self) -> bool {
        self.at_end || self.at_bound
    }

    /// The settled offset, when the offset store lags behind it.
    fn due(&self) -> Option<u64> {
        let committed = self.watermark.as_ref()?.committed();
        self.stored
            .is_none_or(|stored| stored < committed)
            .then_some(committed)
    }
}

impl Assignment {
    pub fn new(now: Instant) -> Self {
        Assignment {
            epoch: 0,
            lanes: None,
            unassigned_since: now,
            last_activity: now,
            bounded: false,
            bounds: BTreeMap::new(),
        }
    }

    /// Starts afresh (a new subscription), keeping the run's bounds.
    pub fn restart(&mut self, now: Instant) {
        *self = Assignment {
            bounded: self.bounded,
            bounds: std::mem::take(&mut self.bounds),
            ..Assignment::new(now)
        };
    }

    /// Each partition is to stop at its end offset as first seen (`--until-empty`).
    pub fn bound_each_partition(&mut self) {
        self.bounded = true;
    }

    /// Whether `partition` still needs its bound: the run is bounded and none is set.
    pub fn wants_bound(&self, partition: i32) -> bool {
        self.bounded && !self.bounds.contains_key(&partition)
    }

    /// Held partitions that still need their bound.
    pub fn unbounded(&self) -> Vec<i32> {
        if !self.bounded {
            return Vec::new();
        }
        self.lanes
            .iter()
            .flatten()
            .map(|(&p, _)| p)
            .filter(|p| !self.bounds.contains_key(p))
            .collect()
    }

    /// `partition` stops at `end` for the rest of the run (held now or assigned later).
    pub fn set_bound(&mut self, partition: i32, end: u64) {
        self.bounds.insert(partition, end);
        if let Some(lane) = self.lanes.as_mut().and_then(|l| l.get_mut(&partition)) {
            lane.bound = Some(end);
        }
    }

    /// Partitions the group gives this worker now (0 before the first assignment).
    pub fn assigned(&self) -> usize {
        self.lanes.as_ref().map_or(0, BTreeMap::len)
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The group handed these partitions over (all of them, or an increment).
    pub fn assign(&mut self, partitions: &[i32], now: Instant) {
        self.epoch += 1;
        self.last_activity = now;
        let lanes = self.lanes.get_or_insert_with(BTreeMap::new);
        for &p in partitions {
            lanes.insert(
                p,
                Lane {
                    assigned_in: self.epoch,
                    bound: self.bounds.get(&p).copied(),
                    ..Lane::default()
                },
            );
        }
    }

    /// The group takes these partitions away. Returns the settled offsets the store does
    /// not hold yet: commit them now, before another worker resumes from the store.
    /// Records of these partitions still in flight are written by their delivery, but
    /// their acks no longer count here: the next owner fetches them again from the store,
    /// and the sink absorbs the repeat.
    pub fn revoke(&mut self, partitions: &[i32], now: Instant) -> Vec<(i32, u64)> {
        self.epoch += 1;
        let Some(lanes) = self.lanes.as_mut() else {
            return Vec::new();
        };
        let mut due = Vec::new();
        for p in partitions {
            if let Some(lane) = lanes.remove(p)
                && let Some(offset) = lane.due()
            {
                due.push((*p, offset));
            }
        }
        if lanes.is_empty() {
            self.lanes = None;
            self.unassigned_since = now;
        }
        due
    }

    /// Registers a fetched record; false when its partition is not ours (any more) or
    /// the record lies past the run's bound.
    pub fn admit(&mut self, partition: i32, offset: u64) -> bool {
        let Some(lane) = self.lanes.as_mut().and_then(|l| l.get_mut(&partition)) else {
            return false;
        };
        if let Some(bound) = lane.bound {
            if offset >= bound {
                lane.at_bound = true;
                return false;
            }
            lane.at_bound = offset + 1 >= bound;
        }
        let watermark = lane.watermark.get_or_insert_with(|| Watermark::new(offset));
        lane.stored.get_or_insert(offset);
        watermark.pulled(offset, offset + 1);
        lane.at_end = false;
        true
    }

    /// Records arrived at `now`: the quiet spell starts again.
    pub fn active(&mut self, now: Instant) {
        self.last_activity = now;
    }

    /// Whether `partition` is held under the same assignment as at `epoch`: a record
    /// admitted then may still be handed out.
    pub fn held_since(&self, partition: i32, epoch: u64) -> bool {
        self.lanes
            .as_ref()
            .and_then(|l| l.get(&partition))
            .is_some_and(|lane| lane.assigned_in <= epoch)
    }

    /// The record at `offset` is written or dead-lettered; true when that moved the
    /// settled offset. Acks of records fetched before
    /// a rebalance may refer to offsets this epoch has not fetched or already settled:
    /// they change nothing.
    pub fn ack(&mut self, partition: i32, offset: u64) -> bool {
        let Some(watermark) = self
            .lanes
            .as_mut()
            .and_then(|l| l.get_mut(&partition))
            .and_then(|lane| lane.watermark.as_mut())
        else {
            return false;
        };
        offset >= watermark.committed() && watermark.ack(offset).is_some()
    }

    /// The consumer reached the end of `partition`.
    pub fn reached_end(&mut self, partition: i32) {
        if let Some(lane) = self.lanes.as_mut().and_then(|l| l.get_mut(&partition)) {
            lane.at_end = true;
        }
    }

    /// Every held partition's settled offset, where records were fetched from it: what a
    /// final commit writes, whether or not an earlier commit seemed to.
    pub fn settled_offsets(&self) -> Vec<(i32, u64)> {
        self.lanes
            .iter()
            .flatten()
            .filter_map(|(&p, lane)| Some((p, lane.watermark.as_ref()?.committed())))
            .collect()
    }

    /// Settled offsets the store does not hold yet.
    pub fn due(&self) -> Vec<(i32, u64)> {
        self.lanes
            .iter()
            .flatten()
            .filter_map(|(&p, lane)| lane.due().map(|o| (p, o)))
            .collect()
    }

    /// These offsets were committed (or handed to an async commit).
    pub fn stored(&mut self, offsets: &[(i32, u64)]) {
        for (p, offset) in offsets {
            if let Some(lane) = self.lanes.as_mut().and_then(|l| l.get_mut(p)) {
                lane.stored = Some(lane.stored.map_or(*offset, |s| s.max(*offset)));
            }
        }
    }

    /// An async commit of these partitions failed: commit them again next time.
    pub fn commit_failed(&mut self, partitions: &[i32]) {
        for p in partitions {
            if let Some(lane) = self.lanes.as_mut().and_then(|l| l.get_mut(p)) {
                lane.stored = None;
            }
        }
    }

    /// What the client's statistics say about a partition (negative = unknown).
    pub fn reported(&mut self, partition: i32, high: i64, low: i64, committed: i64) {
        if let Some(lane) = self.lanes.as_mut().and_then(|l| l.get_mut(&partition)) {
            lane.high = u64::try_from(high).ok().or(lane.high);
            lane.low = u64::try_from(low).ok().or(lane.low);
            lane.reported_committed = u64::try_from(committed).ok().or(lane.reported_committed);
        }
    }

    /// Every held partition is at its end or its bound: nothing more to fetch right now.
    pub fn all_at_end(&self) -> bool {
        self.lanes
            .as_ref()
            .is_some_and(|lanes| lanes.values().all(Lane::finished))
    }

    /// Partitions at their bound that the consumer still fetches: pause them. Marks them
    /// paused.
    pub fn to_pause(&mut self) -> Vec<i32> {
        let mut out = Vec::new();
        for (&p, lane) in self.lanes.iter_mut().flatten() {
            if lane.at_bound && !lane.paused {
                lane.paused = true;
                out.push(p);
            }
        }
        out
    }

    /// Nothing left: every held partition is at its end (or its bound), nothing handed
    /// out is unsettled, and — unless every partition is at its bound, which no late
    /// record can change — no record or rebalance came for `quiet`. No assignment yet is
    /// not empty.
    pub fn caught_up(&self, now: Instant, quiet: Duration) -> bool {
        let Some(lanes) = &self.lanes else {
            return false;
        };
        lanes
            .values()
            .all(|lane| lane.finished() && lane.outstanding() == 0)
            && (lanes.values().all(|lane| lane.at_bound)
                || now.saturating_duration_since(self.last_activity) >= quiet)
    }

    /// Each held partition with the offset the group's store holds, where a next run
    /// resumes: what this run committed (or the offset it started from), else what the
    /// client last reported, else the low watermark; None where unknown, and without an
    /// assignment. Records settled and not committed are not counted as done.
    pub fn committed_offsets(&self) -> Option<Vec<(i32, Option<u64>)>> {
        let lanes = self.lanes.as_ref()?;
        Some(
            lanes
                .iter()
                .map(|(&p, lane)| (p, lane.stored.or(lane.reported_committed).or(lane.low)))
                .collect(),
        )
    }

    /// How long the worker has been waiting for partitions, if it holds none.
    pub fn unassigned_for(&self, now: Instant) -> Option<Duration> {
        self.lanes
            .is_none()
            .then(|| now.saturating_duration_since(self.unassigned_since))
    }

    /// Records not yet settled: Σ(high watermark − committed) over the held partitions;
    /// `None` while a partition's figures are unknown.
    pub fn backlog(&self) -> Option<u64> {
        let lanes = self.lanes.as_ref()?;
        let mut total = 0;
        for lane in lanes.values() {
            match (lane.high, lane.committed()) {
                (Some(high), Some(committed)) => total += high.saturating_sub(committed),
                _ if lane.at_end && lane.outstanding() == 0 => {}
                _ => return None,
            }
        }
        Some(total)
    }
}

#[cfg(test)]
mod tests;
