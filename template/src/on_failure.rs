//! What a stream event source sends its on-failure destination: the record of a batch that
//! ran out of retries, as the local stream pump writes it and `careerctl streams replay`
//! reads it.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

/// A DynamoDB stream sequence number: decimal digits (kept as written, leading zeros and
/// all, since the stream is asked for it so), ordered as the numbers they write.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SequenceNumber(String);

impl TryFrom<String> for SequenceNumber {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        match !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            true => Ok(SequenceNumber(text)),
            false => Err(format!("not a sequence number: {text:?}")),
        }
    }
}

impl From<SequenceNumber> for String {
    fn from(sequence: SequenceNumber) -> String {
        sequence.0
    }
}

impl SequenceNumber {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn digits(&self) -> &str {
        self.0.trim_start_matches('0')
    }
}

impl Ord for SequenceNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        let (mine, theirs) = (self.digits(), other.digits());
        mine.len().cmp(&theirs.len()).then_with(|| mine.cmp(theirs))
    }
}

impl PartialOrd for SequenceNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for SequenceNumber {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for SequenceNumber {}

/// What Lambda sends a stream event source's on-failure destination for a batch it gave up
/// on: AWS's documented invocation record of a DynamoDB stream ("Retaining discarded
/// batches"). The local stream pump writes the same.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OnFailureRecord {
    #[serde(rename = "requestContext")]
    pub request_context: RequestContext,
    #[serde(rename = "responseContext")]
    pub response_context: ResponseContext,
    pub version: String,
    /// When it was written, RFC 3339 (kept as text: the replay needs only where the batch is).
    pub timestamp: String,
    #[serde(rename = "DDBStreamBatchInfo")]
    pub batch: BatchInfo,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestContext {
    pub request_id: String,
    pub function_arn: String,
    /// `RetryAttemptsExhausted`, `RecordAgeExceeded` (or `MaximumPayloadSizeExceeded`).
    pub condition: String,
    pub approximate_invoke_count: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseContext {
    pub status_code: u16,
    pub executed_version: String,
    /// `Unhandled` when the invocation failed; absent when the function answered with
    /// batch item failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_error: Option<String>,
}

/// Where the batch is in the stream: all the records from `start` to `end` of one shard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchInfo {
    pub shard_id: String,
    pub start_sequence_number: SequenceNumber,
    pub end_sequence_number: SequenceNumber,
    /// RFC 3339, to the second (DynamoDB's creation times are).
    pub approximate_arrival_of_first_record: String,
    pub approximate_arrival_of_last_record: String,
    pub batch_size: usize,
    pub stream_arn: String,
}
