//! Creating the service's tables and queues, as the SAM template declares them, for the
//! local stack and the tests.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, KeySchemaElement, KeyType, LocalSecondaryIndex, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType, TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client as DynamoDb;
use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client as Sqs;
use career_core::config::TableNames;

struct TableSpec<'a> {
    name: &'a str,
    partition: &'static str,
    sort: Option<&'static str>,
    /// Local secondary indexes: `(name, sort key)`, projecting every attribute.
    local_indexes: &'static [(&'static str, &'static str)],
    /// Global secondary indexes: `(name, partition key)`, projecting only the keys.
    global_indexes: &'static [(&'static str, &'static str)],
    time_to_live: Option<&'static str>,
    stream: bool,
}

fn specs(names: &TableNames) -> [TableSpec<'_>; 8] {
    let plain = |name, partition, sort| TableSpec {
        name,
        partition,
        sort,
        local_indexes: &[],
        global_indexes: &[],
        time_to_live: None,
        stream: false,
    };
    [
        plain(&names.keys, "keyHash", None),
        plain(&names.rate_limits, "bucket", None),
        TableSpec {
            local_indexes: &[("active", "activeKey"), ("unread", "unreadKey"), ("undismissed", "undismissedKey")],
            ..plain(&names.alerts, "userId", Some("alertId"))
        },
        plain(&names.preferences, "userId", None),
        TableSpec {
            global_indexes: &[("bySubscription", "subscriptionId")],
            ..plain(&names.webhooks, "userId", Some("subscriptionId"))
        },
        TableSpec {
            local_indexes: &[("bySubscription", "subscriptionKey"), ("byStatus", "statusKey")],
            time_to_live: Some("expiresAt"),
            ..plain(&names.deliveries, "userId", Some("deliveryId"))
        },
        TableSpec { stream: true, ..plain(&names.profiles, "userId", Some("profileId")) },
        TableSpec { stream: true, ..plain(&names.assessments, "userId", Some("assessmentId")) },
    ]
}

/// Creates every table that does not exist yet, and the global indexes that tables kept
/// from an older version lack. Returns the names of the tables it created.
pub async fn create_tables(dynamodb: &DynamoDb, names: &TableNames) -> Result<Vec<String>, String> {
    let existing = dynamodb.list_tables().send().await.map_err(|e| describe("listing tables", e))?;
    let existing = existing.table_names.unwrap_or_default();
    let mut created = Vec::new();
    for spec in specs(names) {
        if existing.iter().any(|name| name == spec.name) {
            add_missing_global_indexes(dynamodb, &spec).await?;
            continue;
        }
        create_table(dynamodb, &spec).await?;
        created.push(spec.name.to_owned());
    }
    Ok(created)
}

/// A keys-only global index with this partition key.
fn global_index(index: &str, partition: &str) -> GlobalSecondaryIndex {
    let key = KeySchemaElement::builder().attribute_name(partition).key_type(KeyType::Hash).build().expect("complete");
    GlobalSecondaryIndex::builder()
        .index_name(index)
        .key_schema(key)
        .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
        .build()
        .expect("complete")
}

async fn add_missing_global_indexes(dynamodb: &DynamoDb, spec: &TableSpec<'_>) -> Result<(), String> {
    if spec.global_indexes.is_empty() {
        return Ok(());
    }
    let described = dynamodb
        .describe_table()
        .table_name(spec.name)
        .send()
        .await
        .map_err(|e| describe(&format!("describing table {}", spec.name), e))?;
    let present: Vec<String> = described
        .table
        .and_then(|table| table.global_secondary_indexes)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|index| index.index_name)
        .collect();
    for (index, partition) in spec.global_indexes.iter().filter(|(index, _)| !present.iter().any(|p| p == index)) {
        let wanted = global_index(index, partition);
        let create = CreateGlobalSecondaryIndexAction::builder()
            .index_name(*index)
            .set_key_schema(Some(wanted.key_schema))
            .set_projection(wanted.projection)
            .build()
            .expect("complete");
        let attribute = AttributeDefinition::builder()
            .attribute_name(*partition)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .expect("complete");
        dynamodb
            .update_table()
            .table_name(spec.name)
            .attribute_definitions(attribute)
            .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().create(create).build())
            .send()
            .await
            .map_err(|e| describe(&format!("adding index {index} to {}", spec.name), e))?;
    }
    Ok(())
}

async fn create_table(dynamodb: &DynamoDb, spec: &TableSpec<'_>) -> Result<(), String> {
    let key =
        |name: &str, kind| KeySchemaElement::builder().attribute_name(name).key_type(kind).build().expect("complete");
    let string_attribute = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .expect("complete")
    };
    let mut request = dynamodb
        .create_table()
        .table_name(spec.name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key(spec.partition, KeyType::Hash))
        .attribute_definitions(string_attribute(spec.partition));
    if let Some(sort) = spec.sort {
        request = request.key_schema(key(sort, KeyType::Range)).attribute_definitions(string_attribute(sort));
    }
    for (index, sort) in spec.local_indexes {
        let lsi = LocalSecondaryIndex::builder()
            .index_name(*index)
            .key_schema(key(spec.partition, KeyType::Hash))
            .key_schema(key(sort, KeyType::Range))
            .projection(Projection::builder().projection_type(ProjectionType::All).build())
            .build()
            .expect("complete");
        request = request.local_secondary_indexes(lsi).attribute_definitions(string_attribute(sort));
    }
    for (index, partition) in spec.global_indexes {
        request = request.global_secondary_indexes(global_index(index, partition));
        if Some(*partition) != spec.sort {
            request = request.attribute_definitions(string_attribute(partition));
        }
    }
    if spec.stream {
        let stream = StreamSpecification::builder()
            .stream_enabled(true)
            .stream_view_type(StreamViewType::NewAndOldImages)
            .build()
            .expect("complete");
        request = request.stream_specification(stream);
    }
    request.send().await.map_err(|e| describe(&format!("creating table {}", spec.name), e))?;
    if let Some(attribute) = spec.time_to_live {
        let ttl = TimeToLiveSpecification::builder().attribute_name(attribute).enabled(true).build().expect("complete");
        dynamodb
            .update_time_to_live()
            .table_name(spec.name)
            .time_to_live_specification(ttl)
            .send()
            .await
            .map_err(|e| describe(&format!("enabling TTL on {}", spec.name), e))?;
    }
    Ok(())
}

/// The delivery queue and its dead-letter queue.
#[derive(Clone, Debug)]
pub struct QueueUrls {
    pub delivery: String,
    pub dead_letter: String,
}

/// Creates (or finds) `{prefix}deliveries` and `{prefix}deliveries-dlq`, with a redrive
/// policy that moves a message to the dead-letter queue after `max_attempts` receives.
pub async fn create_queues(sqs: &Sqs, prefix: &str, max_attempts: u32) -> Result<QueueUrls, String> {
    let dead_letter = sqs
        .create_queue()
        .queue_name(format!("{prefix}deliveries-dlq"))
        .send()
        .await
        .map_err(|e| describe("creating the dead-letter queue", e))?
        .queue_url
        .unwrap_or_default();
    let dlq_arn = sqs
        .get_queue_attributes()
        .queue_url(&dead_letter)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| describe("reading the dead-letter queue", e))?
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .unwrap_or_default();
    let redrive = serde_json::json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_attempts.to_string()});
    let delivery = sqs
        .create_queue()
        .queue_name(format!("{prefix}deliveries"))
        .attributes(QueueAttributeName::RedrivePolicy, redrive.to_string())
        .attributes(QueueAttributeName::VisibilityTimeout, "60")
        .send()
        .await
        .map_err(|e| describe("creating the delivery queue", e))?
        .queue_url
        .unwrap_or_default();
    Ok(QueueUrls { delivery, dead_letter })
}

/// An SDK error with its whole chain of causes, for a person to read.
pub fn describe(doing: &str, err: impl std::error::Error) -> String {
    format!("{doing}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(err))
}
