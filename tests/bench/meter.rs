//! Metered clients and groups of their calls, shared by the sections that count what a
//! delivery, a sweep or a ping costs (12 and 13): DynamoDB and SQS clients that log every
//! call (tests/bench/counting.rs), the units each DynamoDB call consumed as DynamoDB reports
//! them (tests/bench/capacity.rs), and the billed size of each SQS request ([`SqsLog`]); an
//! item's size by DynamoDB's rules.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextRef,
};
use aws_sdk_sqs::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_sqs::error::BoxError;
use aws_sdk_sqs::operation::{
    change_message_visibility::ChangeMessageVisibilityInput,
    change_message_visibility_batch::ChangeMessageVisibilityBatchInput, delete_message::DeleteMessageInput,
    delete_message_batch::DeleteMessageBatchInput, get_queue_attributes::GetQueueAttributesInput,
    purge_queue::PurgeQueueInput, receive_message::ReceiveMessageInput, receive_message::ReceiveMessageOutput,
    send_message::SendMessageInput, send_message_batch::SendMessageBatchInput,
};
use aws_sdk_sqs::types::MessageAttributeValue;
use aws_smithy_types::config_bag::{Storable, StoreReplace};

use crate::capacity::{self, figure, Capacity, Consumed, Units};
use crate::counting::{self, per_request, Calls};
use crate::Bench;

/// SQS bills each 64 KB chunk of a request's payload as one request.
pub const SQS_CHUNK: usize = 64 * 1024;

// ---------------------------------------------------------------------------------------
// SQS requests as SQS bills them

/// One SQS request as billed: whether its queue is a FIFO queue (priced apart) and its
/// payload (the messages' bodies and attributes sent or received). The calls' names are the
/// meter's call log's.
#[derive(Clone, Debug)]
pub struct SqsRequest {
    pub fifo: bool,
    pub payload: usize,
}

impl SqsRequest {
    /// The requests SQS bills for it: one per 64 KB chunk of its payload, at least one.
    pub fn billed(&self) -> usize {
        self.payload.div_ceil(SQS_CHUNK).max(1)
    }
}

/// An interceptor that logs every SQS request a client makes, once per attempt that got an
/// answer, with its queue's kind and its payload: what is sent is read from the request's
/// input before it is serialized, what is received from `ReceiveMessage`'s output.
#[derive(Clone, Debug, Default)]
pub struct SqsLog(Arc<Mutex<Vec<SqsRequest>>>);

impl SqsLog {
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub fn since(&self, mark: usize) -> Vec<SqsRequest> {
        self.0.lock().unwrap()[mark..].to_vec()
    }
}

/// What the input said, kept in the operation's config bag until its answer.
#[derive(Clone, Debug)]
struct Sending(SqsRequest);

impl Storable for Sending {
    type Storer = StoreReplace<Self>;
}

fn attributes_size(attributes: Option<&HashMap<String, MessageAttributeValue>>) -> usize {
    attributes
        .into_iter()
        .flatten()
        .map(|(name, value)| {
            name.len()
                + value.data_type.len()
                + value.string_value.as_deref().map_or(0, str::len)
                + value.binary_value.as_ref().map_or(0, |b| b.as_ref().len())
        })
        .sum()
}

fn is_fifo(queue_url: Option<&str>) -> bool {
    queue_url.is_some_and(|url| url.ends_with(".fifo"))
}

/// The request an SQS input makes, for the inputs the service's and the bench's calls use.
fn sending(context: &BeforeSerializationInterceptorContextRef<'_>) -> Option<SqsRequest> {
    let input = context.input();
    let request = |queue_url: &Option<String>, payload| SqsRequest { fifo: is_fifo(queue_url.as_deref()), payload };
    if let Some(i) = input.downcast_ref::<SendMessageInput>() {
        let payload = i.message_body.as_deref().map_or(0, str::len) + attributes_size(i.message_attributes.as_ref());
        return Some(request(&i.queue_url, payload));
    }
    if let Some(i) = input.downcast_ref::<SendMessageBatchInput>() {
        let payload = i
            .entries
            .iter()
            .flatten()
            .map(|entry| entry.message_body.len() + attributes_size(entry.message_attributes.as_ref()))
            .sum();
        return Some(request(&i.queue_url, payload));
    }
    macro_rules! without_payload {
        ($($input:ty),+) => {
            $(if let Some(i) = input.downcast_ref::<$input>() {
                return Some(request(&i.queue_url, 0));
            })+
        };
    }
    without_payload!(
        ReceiveMessageInput,
        DeleteMessageInput,
        DeleteMessageBatchInput,
        ChangeMessageVisibilityInput,
        ChangeMessageVisibilityBatchInput,
        GetQueueAttributesInput,
        PurgeQueueInput
    );
    None
}

impl Intercept for SqsLog {
    fn name(&self) -> &'static str {
        "SqsRequestLog"
    }

    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(request) = sending(context) {
            cfg.interceptor_state().store_put(Sending(request));
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(Sending(mut request)) = cfg.load::<Sending>().cloned() else { return Ok(()) };
        if let Ok(output) = context.output_or_error() {
            if let Some(received) = output.downcast_ref::<ReceiveMessageOutput>() {
                request.payload += received
                    .messages
                    .iter()
                    .flatten()
                    .map(|m| m.body.as_deref().map_or(0, str::len) + attributes_size(m.message_attributes.as_ref()))
                    .sum::<usize>();
            }
        }
        self.0.lock().unwrap().push(request);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Metered clients

/// DynamoDB and SQS clients that log every call, what each DynamoDB call consumed and what
/// each SQS request is billed as. Their attempts may wait up to a minute (the functions'
/// own limit is 2 s): a call that a loaded DynamoDB Local answers late is then counted once,
/// not once per abandoned attempt.
pub struct Meter {
    pub dynamodb_calls: Calls,
    pub sqs_calls: Calls,
    pub capacity: Capacity,
    pub sqs_log: SqsLog,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
}

/// A position in a meter's logs: DynamoDB calls, SQS calls, units, SQS requests.
pub type Mark = (usize, usize, usize, usize);

/// The bench's own patience with a loaded DynamoDB Local or SQS emulator.
pub fn patient() -> aws_config::timeout::TimeoutConfig {
    aws_config::timeout::TimeoutConfig::builder()
        .operation_attempt_timeout(Duration::from_secs(60))
        .operation_timeout(Duration::from_secs(120))
        .build()
}

impl Meter {
    pub fn new(bench: &Bench) -> Self {
        let (dynamodb_calls, sqs_calls, capacity, sqs_log) =
            (Calls::default(), Calls::default(), Capacity::default(), SqsLog::default());
        let dynamodb = capacity::dynamodb(&bench.dynamodb_endpoint, &dynamodb_calls, &capacity);
        let dynamodb =
            aws_sdk_dynamodb::Client::from_conf(dynamodb.config().to_builder().timeout_config(patient()).build());
        let sqs = counting::sqs(&bench.sqs_endpoint, &sqs_calls);
        let sqs = aws_sdk_sqs::Client::from_conf(
            sqs.config().to_builder().interceptor(sqs_log.clone()).timeout_config(patient()).build(),
        );
        Meter { dynamodb_calls, sqs_calls, capacity, sqs_log, dynamodb, sqs }
    }

    pub fn mark(&self) -> Mark {
        (self.dynamodb_calls.len(), self.sqs_calls.len(), self.capacity.len(), self.sqs_log.len())
    }

    /// A function instance's clients, with the metered DynamoDB and SQS.
    pub fn clients(&self) -> career_core::aws::AwsClients {
        career_service::clients().with_dynamodb(self.dynamodb.clone()).with_sqs(self.sqs.clone())
    }
}

// ---------------------------------------------------------------------------------------
// Groups of calls and what they cost

/// The calls of several groups, one group per delivery (or sweep, or scan).
#[derive(Default)]
pub struct Groups {
    pub dynamodb: Vec<Vec<String>>,
    pub sqs: Vec<Vec<String>>,
    pub units: Vec<Vec<Consumed>>,
    pub sqs_requests: Vec<Vec<SqsRequest>>,
}

impl Groups {
    /// Closes a group: the calls since `mark`.
    pub fn push(&mut self, meter: &Meter, (dynamodb, sqs, units, requests): Mark) {
        self.dynamodb.push(meter.dynamodb_calls.since(dynamodb));
        self.sqs.push(meter.sqs_calls.since(sqs));
        self.units.push(meter.capacity.since(units));
        self.sqs_requests.push(meter.sqs_log.since(requests));
    }

    pub fn cost(&self) -> Cost {
        let (dynamodb_count, dynamodb) = per_request(&self.dynamodb);
        let (sqs_count, sqs) = per_request(&self.sqs);
        let (reads, writes): (Vec<Vec<Consumed>>, Vec<Vec<Consumed>>) = self
            .units
            .iter()
            .map(|group| group.iter().cloned().partition(|consumed| is_read(consumed.operation)))
            .unzip();
        let n = self.sqs_requests.len().max(1) as f64;
        let billed = |fifo: bool| {
            let requests = self.sqs_requests.iter().flatten().filter(|r| r.fifo == fifo);
            requests.map(SqsRequest::billed).sum::<usize>() as f64 / n
        };
        Cost {
            dynamodb_count,
            dynamodb,
            sqs_count,
            sqs,
            reads: Units::of(&reads),
            writes: Units::of(&writes),
            sqs_fifo_billed: billed(true),
            sqs_standard_billed: billed(false),
        }
    }
}

pub fn is_read(operation: &str) -> bool {
    matches!(operation, "GetItem" | "Query" | "Scan" | "BatchGetItem")
}

/// A group's calls and units, averaged over the groups.
pub struct Cost {
    pub dynamodb_count: f64,
    pub dynamodb: String,
    pub sqs_count: f64,
    pub sqs: String,
    pub reads: Units,
    pub writes: Units,
    /// SQS requests as billed (64 KB chunks), on FIFO queues and on standard ones.
    pub sqs_fifo_billed: f64,
    pub sqs_standard_billed: f64,
}

impl Cost {
    pub fn calls(&self) -> String {
        if self.dynamodb.is_empty() {
            "none".into()
        } else {
            format!("{}: {}", count(self.dynamodb_count), self.dynamodb)
        }
    }

    pub fn sqs_calls(&self) -> String {
        if self.sqs.is_empty() {
            "none".into()
        } else {
            format!("{}: {}", count(self.sqs_count), self.sqs)
        }
    }
}

/// A count averaged over groups: whole when it is.
pub fn count(value: f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        format!("{}", value.round())
    } else {
        format!("{value:.2}")
    }
}

/// `figure (where: table 1, byStatus 2)`, with the tables named without the run's prefix.
pub fn units(units: &Units, prefix: &str) -> String {
    if units.total == 0.0 && units.by_part.is_empty() {
        return "0".into();
    }
    format!("**{}** ({})", figure(units.total), units.parts().replace(prefix, ""))
}

// ---------------------------------------------------------------------------------------
// Sizes

/// An item's size as DynamoDB counts it (Developer Guide, "Item sizes and formats"): each
/// attribute's name in UTF-8 bytes plus its value: a string's UTF-8 bytes, a number's one byte
/// per two significant digits plus one. The records hold nothing else.
pub fn item_bytes(item: &HashMap<String, AttributeValue>) -> usize {
    let value = |value: &AttributeValue| match value {
        AttributeValue::S(text) => text.len(),
        AttributeValue::N(number) => {
            let digits = number.trim_start_matches('-').replace('.', "");
            digits.trim_matches('0').len().max(1).div_ceil(2) + 1
        }
        AttributeValue::B(bytes) => bytes.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        _ => 0,
    };
    item.iter().map(|(name, v)| name.len() + value(v)).sum()
}

/// `10,000`: a count with its thousands grouped.
pub fn grouped(count: usize) -> String {
    let digits = count.to_string();
    let mut text = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}
