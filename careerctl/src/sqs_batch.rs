//! Deleting received SQS messages in one call, for the local queue pump and `deliveries redrive`.

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;

/// One `DeleteMessageBatch` entry per receipt handle, numbered from 0.
pub fn delete_entries<'a>(
    receipt_handles: impl IntoIterator<Item = Option<&'a str>>,
) -> Vec<DeleteMessageBatchRequestEntry> {
    receipt_handles
        .into_iter()
        .enumerate()
        .map(|(i, receipt_handle)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(receipt_handle.unwrap_or_default())
                .build()
                .expect("entry has id and receipt handle")
        })
        .collect()
}
