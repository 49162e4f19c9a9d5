//! The pipeline under tokio's paused clock: exact per-tick cadence, rate changes without a
//! burst, the in-flight bound, and slow start (off in the cadence's own tests, which check
//! it from the first tick). The sink here records *when* it was written to.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sluice::config::{ConcurrencySettings, ThrottleSettings};
use sluice::control::cadence::Cadence;
use sluice::decode::Decoder;
use sluice::pipeline::clock::TokioClock;
use sluice::pipeline::{Pipeline, RunOptions};
use sluice::record::{DeadLetter, Position, Record, Row};
use sluice::sink::{Sink, WriteOutcome};
use sluice::source::{Backlog, Pulled, Source, SourceError};
use sluice::stats::Stats;
use sluice::write::{WritePath, WriteSettings};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

struct CountingSource {
    next: u64,
    total: u64,
    acked: Arc<AtomicUsize>,
}

#[async_trait]
impl Source for CountingSource {
    async fn pull(&mut self, max: usize) -> Result<Pulled, SourceError> {
        let n = (max as u64).min(self.total - self.next);
        let records = (self.next..self.next + n)
            .map(|i| Record {
                position: Position {
                    lane: 0,
                    start: i,
                    end: i + 1,
                },
                origin: format!("mem:{i}"),
                fallback_key: format!("mem:{i}"),
                payload: format!("{{\"id\":{i}}}").into_bytes(),
                oversize: None,
                undecodable: None,
                context: Default::default(),
            })
            .collect();
        self.next += n;
        Ok(Pulled {
            records,
            caught_up: self.next == self.total,
        })
    }
    async fn ack(&mut self, positions: &[Position]) -> Result<(), SourceError> {
        self.acked.fetch_add(positions.len(), Ordering::SeqCst);
        Ok(())
    }
    async fn backlog(&mut self) -> Result<Backlog, SourceError> {
        Ok(Backlog::Records(self.total - self.next))
    }
    async fn close(&mut self, _drained: bool) -> Result<(), SourceError> {
        Ok(())
    }
}

/// Every row taken, none a duplicate.
fn written(rows: usize) -> WriteOutcome {
    WriteOutcome::Written {
        inserted: rows as u64,
        duplicates: 0,
    }
}

/// Records (time since start, rows) of every write; optionally takes `latency` per write.
struct TimingSink {
    start: Instant,
    latency: Duration,
    writes: Mutex<Vec<(Duration, usize)>>,
    in_flight: AtomicUsize,
    peak_in_flight: AtomicUsize,
}

#[async_trait]
impl Sink for TimingSink {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        self.writes
            .lock()
            .unwrap()
            .push((self.start.elapsed(), rows.len()));
        tokio::time::sleep(self.latency).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        written(rows.len())
    }
    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        written(letters.len())
    }
}

fn pipeline(
    rate: f64,
    total: u64,
    latency: Duration,
    max_in_flight: usize,
    max_batch: usize,
) -> (Pipeline, Arc<TimingSink>, Arc<AtomicUsize>) {
    pipeline_meeting(rate, total, latency, max_in_flight, max_batch, false)
}

/// As [`pipeline`], meeting the sink with slow start when `slow_start`.
fn pipeline_meeting(
    rate: f64,
    total: u64,
    latency: Duration,
    max_in_flight: usize,
    max_batch: usize,
    slow_start: bool,
) -> (Pipeline, Arc<TimingSink>, Arc<AtomicUsize>) {
    let sink = Arc::new(TimingSink {
        start: Instant::now(),
        latency,
        writes: Mutex::new(Vec::new()),
        in_flight: AtomicUsize::new(0),
        peak_in_flight: AtomicUsize::new(0),
    });
    let (p, acked) = drain_into(
        sink.clone(),
        rate,
        total,
        max_in_flight,
        max_batch,
        slow_start,
    );
    (p, sink, acked)
}

/// A pipeline draining `total` records into `sink` at `rate` (200 ms ticks), at most
/// `max_in_flight` batches of `max_batch`, meeting the sink with slow start when
/// `slow_start`; with the count of what the source acknowledged.
fn drain_into(
    sink: Arc<dyn Sink>,
    rate: f64,
    total: u64,
    max_in_flight: usize,
    max_batch: usize,
    slow_start: bool,
) -> (Pipeline, Arc<AtomicUsize>) {
    let acked = Arc::new(AtomicUsize::new(0));
    let stats = Arc::new(Stats::default());
    let p = Pipeline::new(
        Box::new(CountingSource {
            next: 0,
            total,
            acked: acked.clone(),
        }),
        Decoder::new(Some("/id".into())),
        Cadence::new(rate, Duration::from_millis(200), TokioClock::default()),
        write_path(sink, max_in_flight, slow_start, stats.clone()),
        stats,
        drain_options(max_in_flight, max_batch),
    );
    (p, acked)
}

/// The write path as the worker builds it, with a fixed limit of `max_in_flight`.
fn write_path(
    sink: Arc<dyn Sink>,
    max_in_flight: usize,
    slow_start: bool,
    stats: Arc<Stats>,
) -> WritePath {
    let settings = WriteSettings {
        concurrency: ConcurrencySettings {
            max: max_in_flight,
            ..ConcurrencySettings::default()
        },
        throttle: ThrottleSettings {
            slow_start,
            ..ThrottleSettings::default()
        },
        ..WriteSettings::default()
    };
    WritePath::new(sink, &settings, stats)
}

/// A drain to the end of the source, at most `max_in_flight` batches of `max_batch`.
fn drain_options(max_in_flight: usize, max_batch: usize) -> RunOptions {
    RunOptions {
        until_empty: true,
        max_records: None,
        max_batch,
        max_batch_bytes: None,
        max_in_flight,
        grace: Duration::from_secs(30),
        capacity_by_share: None,
        rate_ceiling: None,
    }
}

/// Records written in each 200 ms window, indexed by window (window k ends at k × 200 ms).
fn per_window(sink: &TimingSink) -> Vec<usize> {
    let writes = sink.writes.lock().unwrap();
    let last = writes
        .iter()
        .map(|(t, _)| t.as_millis() / 200)
        .max()
        .unwrap_or(0) as usize;
    let mut windows = vec![0; last + 1];
    for (t, n) in writes.iter() {
        windows[(t.as_millis() / 200) as usize] += n;
    }
    windows
}

#[tokio::test(start_paused = true)]
async fn exactly_twenty_per_window_at_100_per_second() {
    let (p, sink, acked) = pipeline(100.0, 500, Duration::ZERO, 4, 1000);
    let summary = p.run(CancellationToken::new()).await.unwrap();
    assert_eq!(summary.written, 500);
    assert_eq!(acked.load(Ordering::SeqCst), 500);
    let windows = per_window(&sink);
    assert_eq!(
        windows, [20; 25],
        "5 s at 100/s with a 200 ms tick, the first tick's worth at once"
    );
}

/// A sink that has not pushed back is met from an eighth of the rate at once, doubling as
/// each tick's first write is answered (the rest of that tick goes at the doubled rate),
/// and a tick's worth of 200 records or more goes in four parts, 50 ms apart; two seconds
/// at the whole rate without a push-back, and each tick goes at once again.
#[tokio::test(start_paused = true)]
async fn a_new_sink_is_met_by_slow_start_in_parts_then_whole_ticks() {
    let (p, sink, _) = pipeline_meeting(2_000.0, 10_000, Duration::ZERO, 4, 1000, true);
    p.run(CancellationToken::new()).await.unwrap();
    let windows = per_window(&sink);
    assert_eq!(&windows[..4], &[50, 100, 200, 400], "{windows:?}");
    assert!(
        windows[4..windows.len() - 1].iter().all(|&n| n == 400),
        "{windows:?}"
    );
    let writes = sink.writes.lock().unwrap().clone();
    let in_window = |k: u128| -> Vec<(u128, usize)> {
        writes
            .iter()
            .filter(|(t, _)| t.as_millis() / 200 == k)
            .map(|(t, n)| (t.as_millis() % 200, *n))
            .collect()
    };
    // 50 records: one part; 100: two, 50 ms apart (the second at the rate the first's
    // answer doubled, with the bucket's token of slack a millisecond sooner); 400: four.
    assert_eq!(in_window(0), [(0, 50)]);
    assert_eq!(in_window(1), [(0, 50), (49, 50)]);
    let parts = in_window(3);
    assert_eq!(parts.len(), 4, "{parts:?}");
    assert!(
        parts.windows(2).all(|w| w[1].0 - w[0].0 >= 45),
        "spread across the tick: {parts:?}"
    );
    // The whole rate from the fourth tick (0.6 s), two seconds of it: whole ticks later.
    let whole = in_window(20);
    assert!(whole.len() == 1 && whole[0].1 == 400, "{writes:?}");
}

#[tokio::test(start_paused = true)]
async fn a_rate_change_applies_at_the_next_tick_without_a_burst() {
    let (p, sink, _) = pipeline(100.0, 1_000, Duration::ZERO, 4, 1000);
    let rate = p.target_rate();
    let run = tokio::spawn(p.run(CancellationToken::new()));
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    rate.set(200.0);
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    rate.set(50.0);
    run.await.unwrap().unwrap();
    let w = per_window(&sink);
    assert_eq!(&w[..=11], &[20; 12][..], "100/s until the change");
    assert_eq!(&w[12..=21], &[40; 10][..], "200/s from the next tick on");
    assert!(
        w[22..w.len() - 1].iter().all(|&n| n == 10),
        "50/s after the second change: {:?}",
        &w[22..]
    );
}

#[tokio::test(start_paused = true)]
async fn batches_in_flight_never_exceed_the_limit() {
    // 1,000/s wants 200 per tick; batches of 50 taking 1 s each, at most 2 at once.
    let (p, sink, acked) = pipeline(1_000.0, 2_000, Duration::from_secs(1), 2, 50);
    let summary = p.run(CancellationToken::new()).await.unwrap();
    assert_eq!(summary.written, 2_000);
    assert_eq!(acked.load(Ordering::SeqCst), 2_000);
    assert_eq!(sink.peak_in_flight.load(Ordering::SeqCst), 2);
    assert!(sink.writes.lock().unwrap().iter().all(|&(_, n)| n <= 50));
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_pulling_and_settles_what_is_in_flight() {
    let (p, sink, acked) = pipeline(100.0, 10_000, Duration::from_millis(300), 4, 1000);
    let stats = p.stats();
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let run = tokio::spawn(p.run(shutdown));
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    trigger.cancel();
    let summary = run.await.unwrap().unwrap();
    let written: usize = sink.writes.lock().unwrap().iter().map(|(_, n)| n).sum();
    assert_eq!(
        summary.pulled, 120,
        "six ticks of 20 before the stop, the first at once"
    );
    assert_eq!(written, 120);
    assert_eq!(
        acked.load(Ordering::SeqCst),
        120,
        "everything pulled was acknowledged"
    );
    assert_eq!(stats.batches_in_flight.load(Ordering::SeqCst), 0);
}

/// Every write answered "429, Retry-After: 30 s".
struct ThrottlingSink {
    writes: AtomicUsize,
}

#[async_trait]
impl Sink for ThrottlingSink {
    async fn write(&self, _rows: &[Row]) -> WriteOutcome {
        self.writes.fetch_add(1, Ordering::SeqCst);
        WriteOutcome::Throttled {
            retry_after: Some(Duration::from_secs(30)),
            unit: None,
            reason: "HTTP 429".into(),
        }
    }
    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        written(letters.len())
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_a_retry_after_pause_stops_at_once_and_acknowledges_nothing() {
    let sink = Arc::new(ThrottlingSink {
        writes: AtomicUsize::new(0),
    });
    let (p, acked) = drain_into(sink.clone(), 100.0, 1_000, 4, 1000, false);
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    let run = tokio::spawn(p.run(shutdown));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = sink.writes.load(Ordering::SeqCst);
    assert!(sent >= 1, "a write went out and was throttled");
    let asked = Instant::now();
    trigger.cancel();
    let summary = run
        .await
        .unwrap()
        .expect("a clean stop, not a grace-period failure");
    assert!(
        asked.elapsed() < Duration::from_millis(10),
        "waited {:?}",
        asked.elapsed()
    );
    assert_eq!(summary.written, 0);
    assert_eq!(acked.load(Ordering::SeqCst), 0, "nothing acknowledged");
    assert_eq!(
        sink.writes.load(Ordering::SeqCst),
        sent,
        "nothing sent after"
    );
}

/// A source whose records show up only when it is polled, as a Kafka consumer's do.
struct WatchedSource {
    watched: Arc<AtomicUsize>,
    inner: CountingSource,
}

#[async_trait]
impl Source for WatchedSource {
    async fn pull(&mut self, max: usize) -> Result<Pulled, SourceError> {
        self.inner.pull(max).await
    }
    async fn ack(&mut self, positions: &[Position]) -> Result<(), SourceError> {
        self.inner.ack(positions).await
    }
    async fn backlog(&mut self) -> Result<Backlog, SourceError> {
        Ok(Backlog::Unknown)
    }
    async fn watch(&mut self) -> Result<bool, SourceError> {
        self.watched.fetch_add(1, Ordering::SeqCst);
        Ok(self.inner.next < self.inner.total)
    }
    async fn close(&mut self, _drained: bool) -> Result<(), SourceError> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_worker_granted_nothing_still_watches_its_source() {
    let sink = Arc::new(TimingSink {
        start: Instant::now(),
        latency: Duration::ZERO,
        writes: Mutex::new(Vec::new()),
        in_flight: AtomicUsize::new(0),
        peak_in_flight: AtomicUsize::new(0),
    });
    let watched = Arc::new(AtomicUsize::new(0));
    let stats = Arc::new(Stats::default());
    // As after a drain: the last pull caught up, and the worker holds no capacity.
    stats.source_caught_up.store(true, Ordering::SeqCst);
    let p = Pipeline::new(
        Box::new(WatchedSource {
            watched: watched.clone(),
            inner: CountingSource {
                next: 0,
                total: 100,
                acked: Arc::new(AtomicUsize::new(0)),
            },
        }),
        Decoder::new(Some("/id".into())),
        Cadence::new(0.0, Duration::from_millis(200), TokioClock::default()),
        write_path(sink.clone(), 4, false, stats.clone()),
        stats.clone(),
        drain_options(4, 1000),
    );
    let rate = p.target_rate();
    rate.set(0.0);
    let run = tokio::spawn(p.run(CancellationToken::new()));
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    assert_eq!(
        watched.load(Ordering::SeqCst),
        6,
        "watched once a tick: six in 1.05 s, the first at once"
    );
    assert!(sink.writes.lock().unwrap().is_empty(), "nothing granted");
    assert!(stats.has_backlog(), "the records it saw count as a backlog");
    // What a lease keeper does on seeing that backlog.
    rate.set(100.0);
    let summary = run.await.unwrap().unwrap();
    assert_eq!(summary.written, 100);
}

/// A batch slot that frees is refilled at once while the cadence holds tokens, not at the
/// next tick; and where the cadence binds, no 200 ms window gets more than its quantum.
/// Batches of 10 taking 70 ms (not a divisor of the tick), 4 slots: at most 571 rec/s.
#[tokio::test(start_paused = true)]
async fn freed_slots_are_refilled_at_once_while_tokens_allow() {
    let latency = Duration::from_millis(70);
    let (p, sink, _) = pipeline(1_000.0, 2_000, latency, 4, 10);
    p.run(CancellationToken::new()).await.unwrap();
    let writes = sink.writes.lock().unwrap().clone();
    let first = writes.first().unwrap().0;
    let span = writes.last().unwrap().0 + latency - first;
    let busy = latency * writes.len() as u32;
    let share = busy.as_secs_f64() / (span.as_secs_f64() * 4.0);
    eprintln!("slots busy {:.2}% of the time", share * 100.0);
    assert!(share > 0.99, "slots busy {:.1}% of the time", share * 100.0);

    // 300 rec/s: the cadence binds, 60 records per window at most.
    let (p, sink, _) = pipeline(300.0, 1_200, latency, 4, 10);
    p.run(CancellationToken::new()).await.unwrap();
    let windows = per_window(&sink);
    assert!(windows.iter().all(|&n| n <= 60), "{windows:?}");
    assert!(
        windows[1..windows.len() - 1].iter().all(|&n| n == 60),
        "{windows:?}"
    );
}

/// A slot that frees while the bucket is short of a batch is filled as the bucket refills,
/// not at the next tick: at 1,000 rec/s, batches of 10 and 2 slots, a batch goes every
/// 10 ms (waiting for the tick sent each tick's 200 records in the same instant, 20
/// batches at once). Two seconds' worth, less the first tick's, granted at once: 1.8 s.
#[tokio::test(start_paused = true)]
async fn a_slot_waiting_for_the_bucket_is_filled_as_it_refills() {
    let (p, sink, acked) = pipeline(1_000.0, 2_000, Duration::ZERO, 2, 10);
    let started = Instant::now();
    let summary = p.run(CancellationToken::new()).await.unwrap();
    let took = started.elapsed();
    assert_eq!(summary.written, 2_000);
    assert_eq!(acked.load(Ordering::SeqCst), 2_000);
    assert!(
        took >= Duration::from_millis(1_700) && took <= Duration::from_millis(2_100),
        "took {took:?}"
    );
    let writes = sink.writes.lock().unwrap();
    let mut at_once = std::collections::BTreeMap::<Duration, usize>::new();
    for (at, _) in writes.iter() {
        *at_once.entry(*at).or_default() += 1;
    }
    let most = at_once.values().max().copied().unwrap_or(0);
    assert!(most <= 2, "{most} writes in one instant: {at_once:?}");
}

/// Refuses one write, the `refuse`-th (from 0), answering `retry_after`; takes the rest.
struct RefusesOnce {
    start: Instant,
    refuse: usize,
    retry_after: Option<Duration>,
    seen: AtomicUsize,
    writes: Mutex<Vec<(Duration, usize)>>,
}

impl RefusesOnce {
    fn new(refuse: usize, retry_after: Option<Duration>) -> Self {
        RefusesOnce {
            start: Instant::now(),
            refuse,
            retry_after,
            seen: AtomicUsize::new(0),
            writes: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl Sink for RefusesOnce {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        if self.seen.fetch_add(1, Ordering::SeqCst) == self.refuse {
            return WriteOutcome::Throttled {
                retry_after: self.retry_after,
                unit: None,
                reason: "HTTP 429".into(),
            };
        }
        self.writes
            .lock()
            .unwrap()
            .push((self.start.elapsed(), rows.len()));
        written(rows.len())
    }
    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        written(letters.len())
    }
}

/// Drains 3,000 records at 2,000 rec/s into `sink`, met by slow start (4 slots, batches
/// of up to 1,000); returns every write but the last that carried fewer than 10 records.
async fn writes_alone(sink: Arc<RefusesOnce>) -> Vec<(Duration, usize)> {
    let (p, acked) = drain_into(sink.clone(), 2_000.0, 3_000, 4, 1000, true);
    let summary = p.run(CancellationToken::new()).await.unwrap();
    assert_eq!(summary.written, 3_000);
    assert_eq!(acked.load(Ordering::SeqCst), 3_000);
    let writes = sink.writes.lock().unwrap().clone();
    writes[..writes.len() - 1]
        .iter()
        .filter(|(_, n)| *n < 10)
        .copied()
        .collect()
}

/// Slow start at 2,000 rec/s meets a refusal, then the learned limit moves a record a tick
/// up or down as the worker probes: a tick granted at the old rate and accruing at the new
/// one sent its last record alone a few ms after the rest (25 + 1, six times in a drain).
#[tokio::test(start_paused = true)]
async fn a_rate_change_sends_no_record_alone() {
    let sink = Arc::new(RefusesOnce::new(0, None));
    let alone = writes_alone(sink.clone()).await;
    let sizes: std::collections::BTreeSet<usize> = sink
        .writes
        .lock()
        .unwrap()
        .iter()
        .map(|(_, n)| *n)
        .collect();
    assert!(sizes.len() > 2, "the rate moved: {sizes:?}");
    assert!(alone.is_empty(), "{alone:?}");
}

/// A refusal anywhere in slow start's climb, with any pause: no record goes alone after it.
/// Two ways one did: the rate cut at the refusal left records taken at the old rate to go
/// with the next tick's worth (35 + 47 at 48 a tick), and a tick's worth that accrued just
/// before the next tick went with it, its last record alone 10 ms later (23 + 1).
#[tokio::test(start_paused = true)]
async fn a_refusal_in_slow_start_leaves_no_record_to_go_alone() {
    for refuse in 1..8 {
        for retry_after in [60, 90, 130, 170, 230, 410] {
            let sink = Arc::new(RefusesOnce::new(
                refuse,
                Some(Duration::from_millis(retry_after)),
            ));
            let alone = writes_alone(sink).await;
            assert!(
                alone.is_empty(),
                "refusing write {refuse}, {retry_after} ms: {alone:?}"
            );
        }
    }
}

/// The scenario bench's records-limited sink in the process: a token bucket of 800 records
/// a second that refuses a write it cannot take whole with the time until it could, after
/// `latency`.
struct RecordsLimited {
    start: Instant,
    latency: Duration,
    bucket: Mutex<sluice::sim_sink::capacity::Capacity>,
    taken: AtomicUsize,
    refused: Mutex<Vec<(Duration, usize)>>,
}

#[async_trait]
impl Sink for RecordsLimited {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        tokio::time::sleep(self.latency).await;
        let at = self.start.elapsed();
        let fits = self.bucket.lock().unwrap().try_take(rows.len() as u64, at);
        match fits {
            Ok(()) => {
                self.taken.fetch_add(rows.len(), Ordering::SeqCst);
                written(rows.len())
            }
            Err(wait) => {
                self.refused.lock().unwrap().push((at, rows.len()));
                WriteOutcome::Throttled {
                    retry_after: Some(wait),
                    unit: None,
                    reason: "HTTP 429".into(),
                }
            }
        }
    }
    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        written(letters.len())
    }
}

/// The bench's (e′) on a paused clock, with the sink's burst anywhere from 700 to 960
/// records and answering in 8 ms or at once: asked 4× an 800 rec/s sink it has never met,
/// the worker sends at most 3% more records than the sink takes. Slow start's climb costs
/// a part of a tick (160 records); the first guess, above the capacity, a part of its tick
/// (90–110), which measures the sink. Before, 497–695 were refused at 8 ms, each of these
/// alone costing 40 to 200 records more:
/// - the first guess's tick went whole (196 at a burst of 700);
/// - slow start's next part went 150 ms after the first refusal, too near it to measure
///   anything (burst 823: 160 more);
/// - the guess barely over the capacity was refused again 2.1 s after, too late for a
///   sample: cut by 5%, it stayed over (bursts of 780–795: 169 more);
/// - records granted before the resend of the write that closed the sample followed it
///   into the sink it had emptied (66 more, 80 ms later), or went at the guess the sample
///   corrected until the next tick (88 more).
#[tokio::test(start_paused = true)]
async fn first_contact_four_times_over_costs_under_three_percent() {
    let latencies = [Duration::from_millis(8), Duration::from_micros(8)];
    for latency in latencies {
        for burst in 700..=960 {
            let sink = Arc::new(RecordsLimited {
                start: Instant::now(),
                latency,
                bucket: Mutex::new(sluice::sim_sink::capacity::Capacity::new(800.0, burst)),
                taken: AtomicUsize::new(0),
                refused: Mutex::new(Vec::new()),
            });
            let (p, acked) = drain_into(sink.clone(), 3_200.0, 10_000, 4, 1000, true);
            let summary = p.run(CancellationToken::new()).await.unwrap();
            assert_eq!(summary.written, 10_000);
            assert_eq!(acked.load(Ordering::SeqCst), 10_000);
            assert_eq!(sink.taken.load(Ordering::SeqCst), 10_000);
            let refused = sink.refused.lock().unwrap().clone();
            let lost: usize = refused.iter().map(|(_, n)| n).sum();
            assert!(
                lost <= 300,
                "burst {burst}, {latency:?}: {lost} records refused: {refused:?}"
            );
        }
    }
}
