//! Creating the service's tables and queues, as the SAM template declares them, for the
//! local stack and the tests.

use anyhow::Context;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, KeySchemaElement, KeyType, LocalSecondaryIndex, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType, TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client as DynamoDb;
use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client as Sqs;
use career_core::config::TableNames;
use career_core::store::deliveries::BY_DUE;

struct TableSpec<'a> {
    name: &'a str,
    partition: &'static str,
    sort: Option<&'static str>,
    /// Local secondary indexes: `(name, sort key)`, projecting every attribute.
    local_indexes: &'static [(&'static str, &'static str)],
    /// Global secondary indexes: `(name, partition key, sort key)`, projecting only the keys.
    global_indexes: &'static [(&'static str, &'static str, Option<&'static str>)],
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
            global_indexes: &[("bySubscription", "subscriptionId", None)],
            ..plain(&names.webhooks, "userId", Some("subscriptionId"))
        },
        TableSpec {
            local_indexes: &[("bySubscription", "subscriptionKey"), ("byStatus", "statusKey")],
            global_indexes: &[(BY_DUE, "dueShard", Some("nextAttemptAt"))],
            time_to_live: Some("expiresAt"),
            ..plain(&names.deliveries, "userId", Some("deliveryId"))
        },
        TableSpec { stream: true, ..plain(&names.profiles, "userId", Some("profileId")) },
        TableSpec { stream: true, ..plain(&names.assessments, "userId", Some("assessmentId")) },
    ]
}

/// Creates every table that does not exist yet, and the global indexes that tables kept
/// from an older version lack. Returns the names of the tables it created.
pub async fn create_tables(dynamodb: &DynamoDb, names: &TableNames) -> anyhow::Result<Vec<String>> {
    let existing = dynamodb.list_tables().send().await.context("listing tables")?;
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

/// A keys-only global index with this partition key and, if given, sort key.
fn global_index(index: &str, partition: &str, sort: Option<&str>) -> GlobalSecondaryIndex {
    let key =
        |name: &str, kind| KeySchemaElement::builder().attribute_name(name).key_type(kind).build().expect("complete");
    GlobalSecondaryIndex::builder()
        .index_name(index)
        .set_key_schema(Some(
            std::iter::once(key(partition, KeyType::Hash)).chain(sort.map(|sort| key(sort, KeyType::Range))).collect(),
        ))
        .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
        .build()
        .expect("complete")
}

async fn add_missing_global_indexes(dynamodb: &DynamoDb, spec: &TableSpec<'_>) -> anyhow::Result<()> {
    if spec.global_indexes.is_empty() {
        return Ok(());
    }
    let described = dynamodb
        .describe_table()
        .table_name(spec.name)
        .send()
        .await
        .with_context(|| format!("describing table {}", spec.name))?;
    let present: Vec<String> = described
        .table
        .and_then(|table| table.global_secondary_indexes)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|index| index.index_name)
        .collect();
    for (index, partition, sort) in spec.global_indexes.iter().filter(|(index, ..)| !present.iter().any(|p| p == index))
    {
        let wanted = global_index(index, partition, *sort);
        let create = CreateGlobalSecondaryIndexAction::builder()
            .index_name(*index)
            .set_key_schema(Some(wanted.key_schema))
            .set_projection(wanted.projection)
            .build()
            .expect("complete");
        let attributes = std::iter::once(*partition).chain(*sort).map(|name| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("complete")
        });
        dynamodb
            .update_table()
            .table_name(spec.name)
            .set_attribute_definitions(Some(attributes.collect()))
            .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().create(create).build())
            .send()
            .await
            .with_context(|| format!("adding index {index} to {}", spec.name))?;
    }
    Ok(())
}

async fn create_table(dynamodb: &DynamoDb, spec: &TableSpec<'_>) -> anyhow::Result<()> {
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
    for (index, partition, sort) in spec.global_indexes {
        request = request.global_secondary_indexes(global_index(index, partition, *sort));
        for attribute in std::iter::once(*partition).chain(*sort).filter(|name| Some(*name) != spec.sort) {
            request = request.attribute_definitions(string_attribute(attribute));
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
    request.send().await.with_context(|| format!("creating table {}", spec.name))?;
    if let Some(attribute) = spec.time_to_live {
        let ttl = TimeToLiveSpecification::builder().attribute_name(attribute).enabled(true).build().expect("complete");
        dynamodb
            .update_time_to_live()
            .table_name(spec.name)
            .time_to_live_specification(ttl)
            .send()
            .await
            .with_context(|| format!("enabling TTL on {}", spec.name))?;
    }
    Ok(())
}

/// The delivery lanes (career_core::queue) and their dead-letter queues.
#[derive(Clone, Debug, Default)]
pub struct QueueUrls {
    /// The main lane: FIFO, one message group per subscription.
    pub delivery: String,
    /// The retry lane.
    pub retry: String,
    /// Where a delivery goes after its last attempt.
    pub dead_letter: String,
    /// The main lane's own dead-letter queue (SQS wants a FIFO one for a FIFO queue): only
    /// messages the delivery function could not process at all land there.
    pub delivery_dead_letter: String,
}

impl QueueUrls {
    /// Every queue: `(what it is, for people, URL)`.
    pub fn all(&self) -> [(&'static str, &str); 4] {
        [
            ("main lane", &self.delivery),
            ("retry lane", &self.retry),
            ("dead letters", &self.dead_letter),
            ("main lane dead letters", &self.delivery_dead_letter),
        ]
    }
}

/// Creates (or finds) the queues as the SAM template declares them: `{prefix}deliveries.fifo`
/// and `{prefix}retries`, whose redrive policies move a message to `{prefix}deliveries-dlq.fifo`
/// and `{prefix}deliveries-dlq` after `max_attempts` receives.
pub async fn create_queues(sqs: &Sqs, prefix: &str, max_attempts: u32) -> anyhow::Result<QueueUrls> {
    let fifo = [
        (QueueAttributeName::FifoQueue, "true"),
        (QueueAttributeName::DeduplicationScope, "messageGroup"),
        (QueueAttributeName::FifoThroughputLimit, "perMessageGroupId"),
    ];
    let dead_letter = create_queue(sqs, &format!("{prefix}deliveries-dlq"), &[], None).await?;
    let delivery_dead_letter = create_queue(sqs, &format!("{prefix}deliveries-dlq.fifo"), &fifo, None).await?;
    let redrive_to = |dead_letter: &QueueUrl| Some((dead_letter.arn.clone(), max_attempts));
    let delivery =
        create_queue(sqs, &format!("{prefix}deliveries.fifo"), &fifo, redrive_to(&delivery_dead_letter)).await?;
    let retry = create_queue(sqs, &format!("{prefix}retries"), &[], redrive_to(&dead_letter)).await?;
    Ok(QueueUrls {
        delivery: delivery.url,
        retry: retry.url,
        dead_letter: dead_letter.url,
        delivery_dead_letter: delivery_dead_letter.url,
    })
}

struct QueueUrl {
    url: String,
    arn: String,
}

async fn create_queue(
    sqs: &Sqs,
    name: &str,
    attributes: &[(QueueAttributeName, &str)],
    redrive: Option<(String, u32)>,
) -> anyhow::Result<QueueUrl> {
    let mut request = sqs.create_queue().queue_name(name).attributes(QueueAttributeName::VisibilityTimeout, "60");
    for (attribute, value) in attributes {
        request = request.attributes(attribute.clone(), *value);
    }
    if let Some((dead_letter_arn, max_receives)) = redrive {
        let policy =
            serde_json::json!({"deadLetterTargetArn": dead_letter_arn, "maxReceiveCount": max_receives.to_string()});
        request = request.attributes(QueueAttributeName::RedrivePolicy, policy.to_string());
    }
    let url = request.send().await.with_context(|| format!("creating queue {name}"))?.queue_url.unwrap_or_default();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .with_context(|| format!("reading queue {name}"))?
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .unwrap_or_default();
    Ok(QueueUrl { url, arn })
}
