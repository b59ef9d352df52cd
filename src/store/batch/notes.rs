//! The processor's transaction noted on still-pending charges, batched: one UPDATE for every
//! post that answered at the same time.

use super::super::entities::charge_attempt;
use super::super::{Store, StoreError, StoreResult};
use super::TransactionNote;
use super::statements::{charge_case, still_pending};
use sea_orm::sea_query::Query;
use sea_orm::{ColumnTrait, ConnectionTrait};
use tokio::sync::oneshot;

impl Store {
    /// Keeps the transaction the processor made for a still-pending charge on its row, where
    /// every node reads it and every settlement is decided against it (`settle_charge_in`,
    /// `settle_pending`: a report naming another transaction moves no money), batched with the
    /// notes of the posts that answer at the same time: one UPDATE for all of them. A charge
    /// settled meanwhile is left as it is.
    pub async fn note_processor_transaction(&self, note: TransactionNote) -> StoreResult<()> {
        let (reply, answer) = oneshot::channel();
        if self.batches.notes.push((note, reply)) {
            let store = self.clone();
            self.start_writer(async move { store.write_notes().await });
        }
        answer
            .await
            .map_err(|_| StoreError::invariant("the batch writer stopped".into()))?
    }

    /// Writes batches of notes until none waits.
    async fn write_notes(self) {
        let _writer = self.batches.notes.writer();
        loop {
            let batch = self.batches.notes.next();
            if batch.is_empty() {
                return;
            }
            let (notes, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            metrics::histogram!("charge_note_batch_size").record(notes.len() as f64);
            let written = self.note_many(&notes).await;
            for reply in replies {
                let _ = reply.send(match &written {
                    Ok(()) => Ok(()),
                    Err(err) => Err(StoreError::invariant(format!(
                        "noting the processor's transactions: {err}"
                    ))),
                });
            }
        }
    }

    async fn note_many(&self, notes: &[TransactionNote]) -> StoreResult<()> {
        let txn = self.begin_batch().await?;
        let conn = txn.conn();
        let backend = conn.get_database_backend();
        let by_id = |value: fn(&TransactionNote) -> sea_orm::Value| {
            charge_case(notes, |note| note.charge_id.as_str(), value)
        };
        let mut update = Query::update();
        update
            .table(charge_attempt::Entity)
            .value(
                charge_attempt::Column::ProcessorTransactionId,
                by_id(|n| n.transaction_id.clone().into()),
            )
            .value(
                charge_attempt::Column::ProcessorStatus,
                by_id(|n| n.raw_status.clone().into()),
            )
            .value(
                charge_attempt::Column::UpdatedAt,
                by_id(|n| n.now_ms.into()),
            )
            .and_where(charge_attempt::Column::Id.is_in(notes.iter().map(|n| &n.charge_id)))
            .and_where(still_pending());
        conn.execute_raw(backend.build(&update)).await?;
        txn.commit().await
    }
}
