//! The scale model's DynamoDB (contract section 22): a loopback HTTP layer in front of DynamoDB
//! Local that throttles each partition key past its write or read units a second, as DynamoDB
//! does for a hot key (DynamoDB Local enforces no quota at all). The quota is
//! [`PartitionQuota`], set small so that a laptop can exceed it; a throttled request is
//! answered as DynamoDB answers it (HTTP 400, `ProvisionedThroughputExceededException` with
//! its `ThrottlingReasons`), and the SDK retries it as it does on AWS. Everything else
//! (DynamoDB Streams, table management, scans) passes through untouched.
//!
//! Units are counted as DynamoDB counts them, from what the layer sees:
//! - a write takes one unit per 1 KB of the item, estimated from the size of the request's
//!   JSON (a bit above the item's own size; an update counts its request, not the larger of
//!   the item before and after it, which only DynamoDB knows; a delete counts one unit);
//!   each write of a transaction counts twice, as DynamoDB's transactions do;
//! - a read takes one unit per 4 KB returned strongly consistent, half that eventually
//!   consistent, charged once its answer is known (so a key may run into debt, and is then
//!   throttled until it has paid it back, as DynamoDB does), and two per item in a
//!   transaction; a batch's reads count one unit per key before the call.
//!
//! A batch or transaction with any key past its units is throttled as a whole (DynamoDB
//! answers a batch's throttled items as unprocessed, and throttles the whole batch only
//! when every item is).
//! Index keys are counted for queries on an index, not for the index writes a table's write
//! causes. Each key's bucket holds one second of its units (no burst beyond that).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use aws_sdk_dynamodb::types::KeyType;
use career_core::store::PartitionQuota;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use lambda_http::http::{self, HeaderValue, StatusCode};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::template::{ACCOUNT, REGION};

/// The tables whose keys the layer throttles.
#[derive(Clone, Debug)]
pub enum Modelled {
    Every,
    /// These tables only (a test of one table's quota, beside others the model would
    /// throttle first).
    Only(Vec<String>),
}

impl Modelled {
    fn includes(&self, table: &str) -> bool {
        match self {
            Modelled::Every => true,
            Modelled::Only(tables) => tables.iter().any(|t| t == table),
        }
    }
}

/// The layer, listening on loopback until dropped.
pub struct ThrottlingLayer {
    /// Where clients send their DynamoDB calls instead of DynamoDB Local's endpoint.
    pub endpoint: String,
    task: JoinHandle<()>,
}

impl Drop for ThrottlingLayer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ThrottlingLayer {
    /// In front of the DynamoDB Local at `upstream`, whose tables' key schemas `tables`
    /// (a client of it) reads, each key held to `quota`.
    pub async fn start(
        upstream: &str,
        tables: aws_sdk_dynamodb::Client,
        quota: PartitionQuota,
        modelled: Modelled,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.context("binding the throttling layer")?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let layer = Arc::new(Layer {
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http(),
            tables,
            schemas: Mutex::default(),
            modelled,
            quota,
            buckets: Mutex::new(Buckets::default()),
        });
        let task = tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(err) => {
                        tracing::error!(error = %err, "the throttling layer stopped accepting connections");
                        return;
                    }
                };
                let layer = layer.clone();
                let service = hyper::service::service_fn(move |request| {
                    let layer = layer.clone();
                    async move { Ok::<_, Infallible>(layer.answer(request).await) }
                });
                tokio::spawn(async move {
                    let connection =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                    let _ = connection.await;
                });
            }
        });
        Ok(ThrottlingLayer { endpoint, task })
    }
}

struct Layer {
    upstream: String,
    client: hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>,
    tables: aws_sdk_dynamodb::Client,
    schemas: Mutex<HashMap<String, Schema>>,
    modelled: Modelled,
    quota: PartitionQuota,
    buckets: Mutex<Buckets>,
}

impl Layer {
    async fn answer(&self, request: http::Request<Incoming>) -> http::Response<Full<Bytes>> {
        let (parts, body) = request.into_parts();
        let body = match body.collect().await {
            Ok(body) => body.to_bytes(),
            Err(err) => return plain(StatusCode::BAD_REQUEST, format!("reading the request: {err}")),
        };
        let operation = parts
            .headers
            .get("x-amz-target")
            .and_then(|target| target.to_str().ok())
            .and_then(|target| target.strip_prefix("DynamoDB_20120810."))
            .map(str::to_owned);
        let call = match (&operation, serde_json::from_slice::<Value>(&body)) {
            (Some(operation), Ok(json)) => match self.charges(operation, &json).await {
                Ok(charges) => Some((operation.clone(), json, charges)),
                Err(err) => return plain(StatusCode::BAD_GATEWAY, format!("{err:#}")),
            },
            _ => None,
        };
        if let Some((_, _, charges)) = &call {
            let refused =
                self.buckets.lock().unwrap_or_else(|e| e.into_inner()).take(Instant::now(), charges, self.quota);
            if let Err(charge) = refused {
                return throttled(&charge);
            }
        }
        let mut forwarded = http::Request::from_parts(parts, Full::new(body));
        let uri = format!("{}{}", self.upstream, forwarded.uri().path_and_query().map_or("/", |p| p.as_str()));
        *forwarded.uri_mut() = match uri.parse() {
            Ok(uri) => uri,
            Err(err) => return plain(StatusCode::BAD_GATEWAY, format!("{uri}: {err}")),
        };
        let (parts, body) = match self.client.request(forwarded).await {
            Ok(response) => response.into_parts(),
            Err(err) => return plain(StatusCode::BAD_GATEWAY, format!("DynamoDB Local: {err}")),
        };
        let body = match body.collect().await {
            Ok(body) => body.to_bytes(),
            Err(err) => return plain(StatusCode::BAD_GATEWAY, format!("DynamoDB Local's answer: {err}")),
        };
        if let Some((operation, json, charges)) = &call {
            if parts.status.is_success() {
                let read = read_after(operation, json, charges, body.len());
                self.buckets.lock().unwrap_or_else(|e| e.into_inner()).charge(Instant::now(), &read, self.quota);
            }
        }
        http::Response::from_parts(parts, Full::new(body))
    }

    /// The units `operation` takes before it is sent, per key of a modelled table.
    async fn charges(&self, operation: &str, json: &Value) -> anyhow::Result<Vec<Charge>> {
        let mut schemas = HashMap::new();
        for table in tables_of(operation, json).into_iter().filter(|table| self.modelled.includes(table)) {
            let schema = self.schema(&table).await?;
            schemas.insert(table, schema);
        }
        Ok(charges_before(operation, json, &schemas))
    }

    /// `table`'s partition keys, read once.
    async fn schema(&self, table: &str) -> anyhow::Result<Schema> {
        if let Some(schema) = self.schemas.lock().unwrap_or_else(|e| e.into_inner()).get(table) {
            return Ok(schema.clone());
        }
        let described = self.tables.describe_table().table_name(table).send().await;
        let described = described.with_context(|| format!("the throttling layer describing {table}"))?;
        let description = described.table.context("DescribeTable answered no table")?;
        let hash_key = |keys: &[aws_sdk_dynamodb::types::KeySchemaElement]| {
            keys.iter().find(|key| key.key_type == KeyType::Hash).map(|key| key.attribute_name.clone())
        };
        let schema = Schema {
            partition_key: hash_key(description.key_schema()).context("a table has a partition key")?,
            indexes: description
                .global_secondary_indexes()
                .iter()
                .filter_map(|index| Some((index.index_name.clone()?, hash_key(index.key_schema())?)))
                .chain(description.local_secondary_indexes().iter().filter_map(|index| {
                    let table_key = hash_key(description.key_schema())?;
                    Some((index.index_name.clone()?, table_key))
                }))
                .collect(),
        };
        self.schemas.lock().unwrap_or_else(|e| e.into_inner()).insert(table.to_owned(), schema.clone());
        Ok(schema)
    }
}

/// A table's partition key attribute, and each index's.
#[derive(Clone, Debug, Default)]
pub struct Schema {
    pub partition_key: String,
    pub indexes: HashMap<String, String>,
}

/// One partition key of a table or of one of its indexes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub table: String,
    pub index: Option<String>,
    /// The key's value, as its JSON (`{"S":"…"}`).
    pub value: String,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Units {
    Write(f64),
    /// Read units, or, before a single read's answer is known, none: the key must only not be
    /// in debt.
    Read(f64),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Charge {
    pub key: Key,
    pub units: Units,
}

/// Each key's units left, refilled at its quota a second up to one second's worth.
#[derive(Default)]
pub struct Buckets {
    keys: HashMap<(Key, bool), (f64, Instant)>,
}

impl Buckets {
    /// Takes every charge's units, or none and the first charge its key cannot pay: a write
    /// needs its units there, a read needs its key out of debt.
    pub fn take(&mut self, now: Instant, charges: &[Charge], quota: PartitionQuota) -> Result<(), Charge> {
        for charge in charges {
            let (units, rate) = self.level(now, charge, quota);
            let enough = match charge.units {
                Units::Write(needed) => units >= needed.min(rate),
                Units::Read(_) => units > 0.0,
            };
            if !enough {
                return Err(charge.clone());
            }
        }
        self.charge(now, charges, quota);
        Ok(())
    }

    /// Takes every charge's units, into debt if need be.
    pub fn charge(&mut self, now: Instant, charges: &[Charge], quota: PartitionQuota) {
        for charge in charges {
            let (units, _) = self.level(now, charge, quota);
            let taken = match charge.units {
                Units::Write(units) | Units::Read(units) => units,
            };
            self.keys.insert(bucket_of(charge), (units - taken, now));
        }
        // Keys idle for a second are full again: forgetting them changes nothing.
        if self.keys.len() > 10_000 {
            self.keys.retain(|_, (_, at)| now.duration_since(*at).as_secs_f64() < 1.0);
        }
    }

    /// A charge's key's units now, and its quota a second.
    fn level(&self, now: Instant, charge: &Charge, quota: PartitionQuota) -> (f64, f64) {
        let is_write = matches!(charge.units, Units::Write(_));
        let rate = f64::from(if is_write { quota.write_units } else { quota.read_units });
        let units = match self.keys.get(&bucket_of(charge)) {
            Some((units, at)) => (units + now.duration_since(*at).as_secs_f64() * rate).min(rate),
            None => rate,
        };
        (units, rate)
    }
}

fn bucket_of(charge: &Charge) -> (Key, bool) {
    (charge.key.clone(), matches!(charge.units, Units::Write(_)))
}

/// The tables a call names.
pub fn tables_of(operation: &str, json: &Value) -> Vec<String> {
    let named = |value: &Value| value.get("TableName").and_then(Value::as_str).map(str::to_owned);
    match operation {
        "GetItem" | "PutItem" | "UpdateItem" | "DeleteItem" | "Query" => named(json).into_iter().collect(),
        "BatchGetItem" | "BatchWriteItem" => json
            .get("RequestItems")
            .and_then(Value::as_object)
            .map(|items| items.keys().cloned().collect())
            .unwrap_or_default(),
        "TransactWriteItems" | "TransactGetItems" => transact_items(json)
            .filter_map(|(_, action)| named(action))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

fn transact_items(json: &Value) -> impl Iterator<Item = (&str, &Value)> {
    json.get("TransactItems")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .flat_map(|item| item.iter().map(|(kind, action)| (kind.as_str(), action)))
}

/// Write units of `bytes` of JSON: one per 1 KB started.
fn write_units(bytes: usize) -> f64 {
    (bytes.max(1)).div_ceil(1024) as f64
}

fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(0, |bytes| bytes.len())
}

/// What a call takes before it is sent, on the keys of the tables in `schemas`.
pub fn charges_before(operation: &str, json: &Value, schemas: &HashMap<String, Schema>) -> Vec<Charge> {
    let key_of = |table: &str, index: Option<&str>, item: Option<&Value>| -> Option<Key> {
        let schema = schemas.get(table)?;
        let attribute = match index {
            Some(index) => schema.indexes.get(index)?,
            None => &schema.partition_key,
        };
        let value = item?.get(attribute)?;
        Some(Key { table: table.to_owned(), index: index.map(str::to_owned), value: value.to_string() })
    };
    let table = json.get("TableName").and_then(Value::as_str).unwrap_or_default();
    let charge = |key: Option<Key>, units: Units| key.map(|key| Charge { key, units });
    let consistent = |request: &Value| request.get("ConsistentRead").and_then(Value::as_bool).unwrap_or(false);
    let per_read = |request: &Value| if consistent(request) { 1.0 } else { 0.5 };
    match operation {
        "GetItem" | "Query" => {
            let index = json.get("IndexName").and_then(Value::as_str);
            let key = if operation == "GetItem" { json.get("Key").cloned() } else { query_key(json, schemas, table) };
            charge(key_of(table, index, key.as_ref()), Units::Read(0.0)).into_iter().collect()
        }
        "PutItem" => {
            let units = write_units(json.get("Item").map_or(0, json_len));
            charge(key_of(table, None, json.get("Item")), Units::Write(units)).into_iter().collect()
        }
        "UpdateItem" => charge(key_of(table, None, json.get("Key")), Units::Write(write_units(json_len(json))))
            .into_iter()
            .collect(),
        "DeleteItem" => charge(key_of(table, None, json.get("Key")), Units::Write(1.0)).into_iter().collect(),
        "BatchWriteItem" => batch(json)
            .flat_map(|(table, requests)| {
                requests.iter().map(move |request| match request.pointer("/PutRequest/Item") {
                    Some(item) => (key_of(table, None, Some(item)), write_units(json_len(item))),
                    None => (key_of(table, None, request.pointer("/DeleteRequest/Key")), 1.0),
                })
            })
            .filter_map(|(key, units)| charge(key, Units::Write(units)))
            .collect(),
        "BatchGetItem" => batch_gets(json)
            .flat_map(|(table, request)| {
                let units = per_read(request);
                let keys = request.get("Keys").and_then(Value::as_array).into_iter().flatten();
                keys.filter_map(move |key| charge(key_of(table, None, Some(key)), Units::Read(units)))
            })
            .collect(),
        "TransactWriteItems" => transact_items(json)
            .filter_map(|(kind, action)| {
                let table = action.get("TableName").and_then(Value::as_str)?;
                let (key, units) = match kind {
                    "Put" => (key_of(table, None, action.get("Item")), write_units(json_len(action.get("Item")?))),
                    "Update" => (key_of(table, None, action.get("Key")), write_units(json_len(action))),
                    _ => (key_of(table, None, action.get("Key")), 1.0),
                };
                charge(key, Units::Write(2.0 * units))
            })
            .collect(),
        "TransactGetItems" => transact_items(json)
            .filter_map(|(_, action)| {
                let table = action.get("TableName").and_then(Value::as_str)?;
                charge(key_of(table, None, action.get("Key")), Units::Read(2.0))
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn batch(json: &Value) -> impl Iterator<Item = (&str, &Vec<Value>)> {
    let items = json.get("RequestItems").and_then(Value::as_object).into_iter().flatten();
    items.filter_map(|(table, requests)| Some((table.as_str(), requests.as_array()?)))
}

fn batch_gets(json: &Value) -> impl Iterator<Item = (&str, &Value)> {
    json.get("RequestItems")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(table, request)| (table.as_str(), request))
}

/// The partition key a query reads, as an item holding only it: from its key condition
/// (`pk = :v`, the name maybe a `#placeholder`), or from the older `KeyConditions`.
fn query_key(json: &Value, schemas: &HashMap<String, Schema>, table: &str) -> Option<Value> {
    let schema = schemas.get(table)?;
    let attribute = match json.get("IndexName").and_then(Value::as_str) {
        Some(index) => schema.indexes.get(index)?,
        None => &schema.partition_key,
    };
    if let Some(conditions) = json.get("KeyConditions") {
        let value = conditions.pointer(&format!("/{attribute}/AttributeValueList/0"))?;
        return Some(json!({ attribute: value }));
    }
    let expression = json.get("KeyConditionExpression")?.as_str()?;
    let names = json.get("ExpressionAttributeNames");
    let values = json.get("ExpressionAttributeValues")?;
    expression.split(" AND ").chain(expression.split(" and ")).find_map(|part| {
        let (name, placeholder) = part.trim().trim_matches(['(', ')']).split_once('=')?;
        let (name, placeholder) = (name.trim(), placeholder.trim());
        let name = match name.strip_prefix('#') {
            Some(_) => names?.get(name)?.as_str()?,
            None => name,
        };
        let value = values.get(placeholder).filter(|_| name == attribute)?;
        Some(json!({ attribute: value }))
    })
}

/// What a call's reads take once its answer (`answered` bytes) is known: a single read's
/// units by the size of its answer.
pub fn read_after(operation: &str, json: &Value, before: &[Charge], answered: usize) -> Vec<Charge> {
    if !matches!(operation, "GetItem" | "Query") {
        return Vec::new();
    }
    let consistent = json.get("ConsistentRead").and_then(Value::as_bool).unwrap_or(false);
    let units = (answered.max(1)).div_ceil(4096) as f64 * if consistent { 1.0 } else { 0.5 };
    before.iter().map(|charge| Charge { key: charge.key.clone(), units: Units::Read(units) }).collect()
}

/// DynamoDB's answer to a request whose key `charge` is past its units.
fn throttled(charge: &Charge) -> http::Response<Full<Bytes>> {
    let resource = if charge.key.index.is_some() { "Index" } else { "Table" };
    let operation = if matches!(charge.units, Units::Write(_)) { "Write" } else { "Read" };
    let mut arn = format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{}", charge.key.table);
    if let Some(index) = &charge.key.index {
        arn.push_str(&format!("/index/{index}"));
    }
    let body = json!({
        "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
        "message": "The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API.",
        "ThrottlingReasons": [{"reason": format!("{resource}{operation}KeyRangeThroughputExceeded"), "resource": arn}],
    });
    let mut response = http::Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/x-amz-json-1.0"));
    if let Ok(id) = HeaderValue::from_str(&career_core::random::random_token("throttled_")) {
        response.headers_mut().insert("x-amzn-requestid", id);
    }
    response
}

fn plain(status: StatusCode, text: String) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn schemas() -> HashMap<String, Schema> {
        let deliveries = Schema {
            partition_key: "logPartition".into(),
            indexes: HashMap::from([("due".to_owned(), "dueShard".to_owned())]),
        };
        let limits = Schema { partition_key: "bucket".into(), indexes: HashMap::new() };
        HashMap::from([("deliveries".to_owned(), deliveries), ("limits".to_owned(), limits)])
    }

    fn key(table: &str, index: Option<&str>, value: &str) -> Key {
        Key { table: table.into(), index: index.map(Into::into), value: json!({"S": value}).to_string() }
    }

    #[test]
    fn each_call_is_charged_on_its_partition_keys() {
        let update = json!({"TableName": "limits", "Key": {"bucket": {"S": "b1"}}, "UpdateExpression": "ADD s1 :one"});
        let query = json!({
            "TableName": "deliveries", "IndexName": "due",
            "KeyConditionExpression": "#s = :s AND dueAt < :now",
            "ExpressionAttributeNames": {"#s": "dueShard"},
            "ExpressionAttributeValues": {":s": {"S": "3"}, ":now": {"S": "x"}}
        });
        let big_put = json!({"TableName": "limits", "Item": {"bucket": {"S": "b2"}, "blob": {"S": "x".repeat(2000)}}});
        let batch = json!({"RequestItems": {"limits": [
            {"PutRequest": {"Item": {"bucket": {"S": "b3"}}}},
            {"DeleteRequest": {"Key": {"bucket": {"S": "b4"}}}}
        ]}});
        let transact = json!({"TransactItems": [
            {"Put": {"TableName": "limits", "Item": {"bucket": {"S": "b5"}}}},
            {"ConditionCheck": {"TableName": "elsewhere", "Key": {"id": {"S": "x"}}}}
        ]});
        let scan = json!({"TableName": "limits"});
        let cases = [
            ("UpdateItem", update, vec![Charge { key: key("limits", None, "b1"), units: Units::Write(1.0) }]),
            ("Query", query, vec![Charge { key: key("deliveries", Some("due"), "3"), units: Units::Read(0.0) }]),
            ("PutItem", big_put, vec![Charge { key: key("limits", None, "b2"), units: Units::Write(2.0) }]),
            (
                "BatchWriteItem",
                batch,
                vec![
                    Charge { key: key("limits", None, "b3"), units: Units::Write(1.0) },
                    Charge { key: key("limits", None, "b4"), units: Units::Write(1.0) },
                ],
            ),
            ("TransactWriteItems", transact, vec![Charge { key: key("limits", None, "b5"), units: Units::Write(2.0) }]),
            ("Scan", scan, vec![]),
        ];
        for (operation, json, expected) in cases {
            assert_eq!(charges_before(operation, &json, &schemas()), expected, "{operation}");
        }
    }

    #[test]
    fn a_query_reads_the_key_its_condition_names() {
        let query = |expression: &str| {
            json!({"TableName": "deliveries", "KeyConditionExpression": expression,
                   "ExpressionAttributeValues": {":p": {"S": "p1"}, ":d": {"S": "d"}}})
        };
        let expected = Some(json!({"logPartition": {"S": "p1"}}));
        assert_eq!(query_key(&query("logPartition = :p"), &schemas(), "deliveries"), expected);
        assert_eq!(query_key(&query("deliveryId > :d AND logPartition = :p"), &schemas(), "deliveries"), expected);
        assert_eq!(query_key(&query("deliveryId = :d"), &schemas(), "deliveries"), None, "not the partition key");
    }

    #[test]
    fn a_key_past_its_units_is_refused_until_they_refill_and_another_key_is_not() {
        let quota = PartitionQuota { write_units: 10, read_units: 30 };
        let write = |value: &str| Charge { key: key("limits", None, value), units: Units::Write(1.0) };
        let (mut buckets, start) = (Buckets::default(), Instant::now());
        for n in 0..10 {
            assert_eq!(buckets.take(start, &[write("hot")], quota), Ok(()), "write {n} within the quota");
        }
        assert_eq!(buckets.take(start, &[write("hot")], quota), Err(write("hot")), "the eleventh in the second");
        assert_eq!(buckets.take(start, &[write("cold")], quota), Ok(()), "another key has its own units");
        let refused = buckets.take(start, &[write("cold"), write("hot")], quota);
        assert_eq!(refused, Err(write("hot")), "a batch with a key past its units");
        assert_eq!(buckets.take(start + Duration::from_millis(100), &[write("hot")], quota), Ok(()), "refilled");
        // Reads: charged after the answer, into debt; refused while in debt.
        let read = |units| Charge { key: key("limits", None, "hot"), units: Units::Read(units) };
        assert_eq!(buckets.take(start, &[read(0.0)], quota), Ok(()));
        buckets.charge(start, &[read(45.0)], quota);
        assert_eq!(buckets.take(start + Duration::from_millis(400), &[read(0.0)], quota), Err(read(0.0)), "in debt");
        assert_eq!(buckets.take(start + Duration::from_millis(600), &[read(0.0)], quota), Ok(()), "paid back");
    }

    #[test]
    fn a_single_reads_units_follow_its_answers_size_and_consistency() {
        let get = |consistent: bool| json!({"TableName": "limits", "Key": {"bucket": {"S": "b"}}, "ConsistentRead": consistent});
        let before = charges_before("GetItem", &get(true), &schemas());
        let units = |json: &Value, size| read_after("GetItem", json, &before, size)[0].units;
        assert_eq!(units(&get(true), 100), Units::Read(1.0));
        assert_eq!(units(&get(true), 4097), Units::Read(2.0));
        assert_eq!(units(&get(false), 4097), Units::Read(1.0));
        assert!(read_after("PutItem", &get(true), &before, 100).is_empty());
    }
}
