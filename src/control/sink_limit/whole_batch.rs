//! Whole batches before the first push-back: a tick's worth of at least half a batch goes
//! as whole batches, banked across ticks — the same records in fewer requests, each sent
//! within two ticks. Told 400 rec/s with `sink.max_batch = 100` at a 200 ms tick, a
//! request per tick of 80 is 5 requests/s, and a gateway taking 4 refused one a second from
//! the moment its burst was spent; 100 every 250 ms is the same rate in 4.

use super::{Phase, SinkLimit};

/// How much larger than the largest request the sink has taken a whole batch may be: a
/// sink whose burst is smaller would never take it (told 3,200 rec/s, 640 a tick and a
/// 1,000-record batch against a sink with a burst of 800, every request was refused).
const OVER_TAKEN: f64 = 1.25;

impl SinkLimit {
    /// Records per request for a tick's worth of `natural` records in `parts`, `largest`
    /// allowed: a whole batch while the sink has not pushed back and slow start is over,
    /// the tick's worth otherwise (a learned limit shapes requests itself).
    pub(super) fn whole_batch(&self, natural: usize, largest: usize, parts: u32) -> usize {
        let free = self.phase == Phase::Free && parts == 1 && !self.first.is_ramping();
        let taken = largest as f64 <= OVER_TAKEN * self.taken.largest() as f64;
        if free && taken && natural < largest && 2 * natural >= largest {
            largest
        } else {
            natural
        }
    }
}
