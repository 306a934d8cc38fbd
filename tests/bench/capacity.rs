//! An interceptor that asks DynamoDB what each call consumed (`ReturnConsumedCapacity` set
//! to `INDEXES` on the request, as a caller would) and logs the answer's `ConsumedCapacity`,
//! the table's and each index's units. The benchmarks read write and read units from it as
//! DynamoDB (here DynamoDB Local) reports them, instead of computing them from item sizes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::{
    batch_get_item::{BatchGetItemInput, BatchGetItemOutput},
    batch_write_item::{BatchWriteItemInput, BatchWriteItemOutput},
    delete_item::{DeleteItemInput, DeleteItemOutput},
    get_item::{GetItemInput, GetItemOutput},
    put_item::{PutItemInput, PutItemOutput},
    query::{QueryInput, QueryOutput},
    scan::{ScanInput, ScanOutput},
    transact_write_items::{TransactWriteItemsInput, TransactWriteItemsOutput},
    update_item::{UpdateItemInput, UpdateItemOutput},
};
use aws_sdk_dynamodb::types::{AttributeValue, ConsumedCapacity, ReturnConsumedCapacity};
use aws_smithy_types::config_bag::{Storable, StoreReplace};

use crate::counting::{self, Calls};

/// The units one answered call consumed, by where they were spent.
#[derive(Clone, Debug, Default)]
pub struct Consumed {
    pub operation: &'static str,
    /// `CapacityUnits` of the whole call.
    pub total: f64,
    /// The base table's units and each index's, by the table's or the index's name.
    pub parts: BTreeMap<String, f64>,
}

impl Consumed {
    fn add(&mut self, capacity: &ConsumedCapacity) {
        self.total += capacity.capacity_units.unwrap_or_default();
        let mut part = |name: &str, units: Option<f64>| {
            if let Some(units) = units {
                *self.parts.entry(name.to_owned()).or_default() += units;
            }
        };
        let table = capacity.table_name.as_deref().unwrap_or("table");
        part(table, capacity.table.as_ref().and_then(|t| t.capacity_units));
        for (name, index) in capacity.local_secondary_indexes.iter().chain(&capacity.global_secondary_indexes).flatten()
        {
            part(name, index.capacity_units);
        }
    }
}

/// The log of the clients it is installed on: one entry per answered call.
#[derive(Clone, Debug, Default)]
pub struct Capacity(Arc<Mutex<Vec<Consumed>>>);

impl Capacity {
    /// A mark for [`Capacity::since`].
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// What the calls answered since `mark` consumed.
    pub fn since(&self, mark: usize) -> Vec<Consumed> {
        self.0.lock().unwrap()[mark..].to_vec()
    }
}

/// Units of a group of calls (one delivery, one sweep), added up per operation and per
/// table or index, averaged over `groups`.
pub struct Units {
    pub total: f64,
    pub by_part: BTreeMap<String, f64>,
}

impl Units {
    pub fn of(groups: &[Vec<Consumed>]) -> Self {
        let n = groups.len().max(1) as f64;
        let mut units = Units { total: 0.0, by_part: BTreeMap::new() };
        for consumed in groups.iter().flatten() {
            units.total += consumed.total / n;
            for (part, value) in &consumed.parts {
                *units.by_part.entry(part.clone()).or_default() += value / n;
            }
        }
        units
    }

    /// `deliveries 1, byStatus 2`: where the units went (tables by name, indexes by name).
    pub fn parts(&self) -> String {
        let parts: Vec<String> = self
            .by_part
            .iter()
            .filter(|(_, units)| **units > 0.0)
            .map(|(name, units)| format!("{name} {}", figure(*units)))
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

/// Units as DynamoDB reports them: whole, halves (eventually consistent reads) or finer.
pub fn figure(units: f64) -> String {
    if (units - units.round()).abs() < 1e-9 {
        // `+ 0.0` turns a negative zero (the sum of no units is one) into 0, printed without a sign.
        format!("{}", units.round() + 0.0)
    } else {
        format!("{units:.1}")
    }
}

/// Where a write to a subscription's health figures (contract section 20) is counted: apart
/// from the deliveries table they live in, so the records' writes are what they were, and the
/// figures' cost is a part of its own.
pub const HEALTH_FIGURES: &str = "health figures";

/// A write of the health figures' items (partition `whk_…#health`), marked in the operation's
/// config bag until its answer.
#[derive(Clone, Debug)]
struct HealthWrite;

impl Storable for HealthWrite {
    type Storer = StoreReplace<Self>;
}

/// Sets `ReturnConsumedCapacity` on a request of any of these operations.
macro_rules! ask_for_capacity {
    ($input:expr, $($operation:ty),+) => {{
        let input = $input;
        $(if let Some(request) = input.downcast_mut::<$operation>() {
            request.return_consumed_capacity = Some(ReturnConsumedCapacity::Indexes);
        })+
    }};
}

impl Intercept for Capacity {
    fn name(&self) -> &'static str {
        "ConsumedCapacityLog"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let health = context.input_mut().downcast_ref::<UpdateItemInput>().is_some_and(|update| {
            let partition = update.key.as_ref().and_then(|key| key.get("logPartition"));
            matches!(partition, Some(AttributeValue::S(partition)) if partition.ends_with("#health"))
        });
        if health {
            cfg.interceptor_state().store_put(HealthWrite);
        }
        ask_for_capacity!(
            context.input_mut(),
            PutItemInput,
            UpdateItemInput,
            DeleteItemInput,
            GetItemInput,
            QueryInput,
            ScanInput,
            BatchWriteItemInput,
            BatchGetItemInput,
            TransactWriteItemsInput
        );
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // A refused call (a failed condition) consumes units too, but its error does not say
        // how many; the benchmarks' calls succeed.
        let Ok(output) = context.output_or_error() else { return Ok(()) };
        let mut consumed = Consumed::default();
        let one = |consumed: &mut Consumed, name, capacity: Option<&ConsumedCapacity>| {
            consumed.operation = name;
            capacity.into_iter().for_each(|c| consumed.add(c));
        };
        let many = |consumed: &mut Consumed, name, capacities: Option<&Vec<ConsumedCapacity>>| {
            consumed.operation = name;
            capacities.into_iter().flatten().for_each(|c| consumed.add(c));
        };
        if let Some(o) = output.downcast_ref::<PutItemOutput>() {
            one(&mut consumed, "PutItem", o.consumed_capacity.as_ref());
        } else if let Some(o) = output.downcast_ref::<UpdateItemOutput>() {
            one(&mut consumed, "UpdateItem", o.consumed_capacity.as_ref());
        } else if let Some(o) = output.downcast_ref::<DeleteItemOutput>() {
            one(&mut consumed, "DeleteItem", o.consumed_capacity.as_ref());
        } else if let Some(o) = output.downcast_ref::<GetItemOutput>() {
            one(&mut consumed, "GetItem", o.consumed_capacity.as_ref());
        } else if let Some(o) = output.downcast_ref::<QueryOutput>() {
            one(&mut consumed, "Query", o.consumed_capacity.as_ref());
        } else if let Some(o) = output.downcast_ref::<ScanOutput>() {
            one(&mut consumed, "Scan", o.consumed_capacity.as_ref());
        } else if let Some(o) = output.downcast_ref::<BatchWriteItemOutput>() {
            many(&mut consumed, "BatchWriteItem", o.consumed_capacity.as_ref());
        } else if let Some(o) = output.downcast_ref::<BatchGetItemOutput>() {
            many(&mut consumed, "BatchGetItem", o.consumed_capacity.as_ref());
        } else if let Some(o) = output.downcast_ref::<TransactWriteItemsOutput>() {
            many(&mut consumed, "TransactWriteItems", o.consumed_capacity.as_ref());
        } else {
            return Ok(());
        }
        if cfg.load::<HealthWrite>().is_some() {
            let units = consumed.parts.values().sum();
            consumed.parts = BTreeMap::from([(HEALTH_FIGURES.to_owned(), units)]);
        }
        self.0.lock().unwrap().push(consumed);
        Ok(())
    }
}

/// A DynamoDB client that logs its calls in `calls` and what they consumed in `capacity`.
pub fn dynamodb(endpoint: &str, calls: &Calls, capacity: &Capacity) -> aws_sdk_dynamodb::Client {
    let counted = counting::dynamodb(endpoint, calls);
    aws_sdk_dynamodb::Client::from_conf(counted.config().to_builder().interceptor(capacity.clone()).build())
}
