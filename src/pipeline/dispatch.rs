//! Pulled records into batches on their way: decoded, split by bytes, each delivered in
//! its own task (upsert: in its keys' turn).

use super::key_order::{self, KeyOrder};
use super::{DeliveryTask, Pipeline};
use crate::record::Record;
use crate::write::delivery::{Batch, row_bytes};
use tokio_util::sync::CancellationToken;

impl Pipeline {
    /// Decodes records and starts their delivery (upsert: in its keys' turn): one batch, or
    /// several when their bytes exceed `sink.max_batch_bytes` (a larger record goes alone).
    /// Once `stop` fires, a batch only waiting to be retried is given up unacknowledged.
    pub(super) fn dispatch(
        &self,
        records: Vec<Record>,
        stop: CancellationToken,
    ) -> Vec<DeliveryTask> {
        let max_bytes = self.options.max_batch_bytes.unwrap_or(u64::MAX);
        let mut batches = vec![Batch::default()];
        let mut bytes = 0u64;
        for record in records {
            let position = record.position;
            match self.decoder.decode(record) {
                Ok(row) => {
                    let size = row_bytes(std::slice::from_ref(&row));
                    let batch = batches.last_mut().expect("never empty");
                    if !batch.rows.is_empty() && bytes + size > max_bytes {
                        batches.push(Batch::default());
                        bytes = 0;
                    }
                    bytes += size;
                    let batch = batches.last_mut().expect("never empty");
                    batch.positions.push(position);
                    batch.rows.push(row);
                }
                Err(letter) => {
                    let batch = batches.last_mut().expect("never empty");
                    batch.positions.push(position);
                    batch.dead.push(letter);
                }
            }
        }
        batches
            .into_iter()
            .map(|batch| {
                let delivery = self.delivery.clone();
                let stop = stop.clone();
                let turn = KeyOrder::enter_batch(self.key_order.as_ref(), &batch.rows);
                tokio::spawn(key_order::in_turn(turn, async move {
                    delivery.deliver_until(batch, stop).await
                }))
            })
            .collect()
    }
}
