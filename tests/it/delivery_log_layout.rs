//! The deliveries table's layout (issue 27): keyed by the subscription's log shards, sparse
//! keys-only global indexes.
//! A list of a status the status index does not hold pages on with short pages instead of
//! reading a whole history; a table of the old layout is replaced as CloudFormation replaces
//! it; `careerctl deliveries import` copies an old table's log into the new one, due index
//! included.

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
use career_core::clock::Timestamp;
use career_core::config::TableNames;
use career_core::delivery::log::DeliveryStatus;
use career_core::ids::{DeliveryId, EventId, SubscriptionId};
use career_core::store::deliveries::{DeliveryTable, DueShard};
use career_service::{dynamodb, typed, unique_user, Api};
use careerctl::admin::{Admin, Imported};
use futures_util::StreamExt;
use lambda_http::http::Method;
use serde_json::{json, Value};

/// A record as the layout before this one stored it: keyed by `userId` and `deliveryId`, with
/// the local indexes' sort keys, and (if it is from before the due index) no `dueShard`.
fn old_record(user: &str, subscription: &SubscriptionId, status: DeliveryStatus, created_at: Timestamp) -> Value {
    let id = DeliveryId::generate();
    let event = json!({"id": EventId::generate(), "type": "profile.updated", "createdAt": created_at,
                       "data": {"userId": user, "profileId": "prf_1"}});
    let mut record = json!({
        "userId": user, "deliveryId": id, "subscriptionId": subscription, "eventId": event["id"],
        "eventType": "profile.updated", "createdAt": created_at, "status": status.as_str(),
        "attempts": 1, "body": event.to_string(),
        "expiresAt": (created_at + Duration::from_secs(30 * 86_400)).unix_seconds(),
        "subscriptionKey": format!("{subscription}#{id}"),
        "statusKey": format!("{subscription}#{}#{id}", status.as_str()),
        "generation": 0, "roundAttempts": 1,
    });
    if status == DeliveryStatus::Pending {
        record["nextAttemptAt"] = json!(created_at);
    }
    record
}

fn item(record: &Value) -> career_core::store::Item {
    serde_dynamo::to_item(record).unwrap()
}

/// A table keyed as the deliveries table was before: `userId`, then `deliveryId`.
async fn create_old_layout_table(name: &str) {
    let key = |name: &str, kind| KeySchemaElement::builder().attribute_name(name).key_type(kind).build().unwrap();
    let string = |name: &str| {
        AttributeDefinition::builder().attribute_name(name).attribute_type(ScalarAttributeType::S).build().unwrap()
    };
    dynamodb()
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key("userId", KeyType::Hash))
        .key_schema(key("deliveryId", KeyType::Range))
        .attribute_definitions(string("userId"))
        .attribute_definitions(string("deliveryId"))
        .send()
        .await
        .unwrap();
}

fn ids_of(page: &Value) -> Vec<String> {
    page["deliveries"].as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_pending_list_over_a_long_history_goes_on_in_short_pages() {
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let created = api
        .send_json(
            Method::POST,
            "/api/v1/webhooks",
            &key,
            &json!({"url": career_service::sink_url(), "events": ["profile.updated"]}).to_string(),
        )
        .await;
    let subscription: SubscriptionId = typed(created.assert_status(201)["id"].as_str().unwrap());
    let table = DeliveryTable::new(dynamodb(), &api.settings.tables.deliveries);
    // The oldest record is pending; more succeeded ones follow than one call reads.
    let start = Timestamp::now() - Duration::from_secs(3600);
    let pending = old_record(&user, &subscription, DeliveryStatus::Pending, start);
    assert!(table.import(item(&pending)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(3)).await;
    let succeeded: Vec<Value> =
        (0..1000).map(|_| old_record(&user, &subscription, DeliveryStatus::Succeeded, start)).collect();
    // A few at a time, as DynamoDB Local takes them.
    let writes = futures_util::stream::iter(succeeded.iter().map(|record| table.import(item(record))));
    let written: Vec<_> = writes.buffer_unordered(8).collect().await;
    assert!(written.into_iter().all(|new| new.unwrap()));

    let base = format!("/api/v1/webhooks/deliveries?id={subscription}&status=pending&limit=10");
    let (mut found, mut pages, mut path) = (Vec::new(), 0, base.clone());
    loop {
        let page = api.get(&path, &key).await;
        page.assert_status(200);
        pages += 1;
        found.extend(ids_of(&page.json));
        match page.json["nextCursor"].as_str() {
            Some(cursor) => path = format!("{base}&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(found, [pending["deliveryId"].as_str().unwrap()]);
    assert!(pages > 1, "a call stops after 500 records with a cursor; {pages} pages");
    // The whole log, unfiltered, is still newest first in full pages.
    let first = api.get(&format!("/api/v1/webhooks/deliveries?id={subscription}&limit=100"), &key).await;
    assert_eq!(ids_of(&first.json).len(), 100);
    let mut newest: Vec<&str> = succeeded.iter().map(|r| r["deliveryId"].as_str().unwrap()).collect();
    newest.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(ids_of(&first.json), newest[..100]);
}

#[tokio::test]
async fn a_deliveries_table_of_the_old_layout_is_replaced_as_cloudformation_replaces_it() {
    let names = TableNames::with_prefix(&format!("{}-", unique_user()));
    create_old_layout_table(&names.deliveries).await;
    let template = local_aws::template::Template::shipped();
    let (created, _) = career_template::tables::create_tables(&template, &dynamodb(), &names).await.unwrap();
    assert!(created.contains(&names.deliveries), "replaced: {created:?}");
    let table = dynamodb().describe_table().table_name(&names.deliveries).send().await.unwrap().table.unwrap();
    let keys: Vec<_> = table.key_schema().iter().map(|k| k.attribute_name.as_str()).collect();
    assert_eq!(keys, ["logPartition", "deliveryId"]);
    let mut indexes: Vec<_> = table.global_secondary_indexes().iter().filter_map(|i| i.index_name.as_deref()).collect();
    indexes.sort();
    assert_eq!(indexes, ["byDue", "byStatus"]);
    assert!(table.local_secondary_indexes().is_empty());
    // Running it again keeps the new table.
    assert!(career_template::tables::create_tables(&template, &dynamodb(), &names).await.unwrap().0.is_empty());
}

#[tokio::test]
async fn careerctl_imports_the_log_of_an_old_layout_table_due_index_included() {
    let api = Api::loopback();
    let user = unique_user();
    let old = format!("{user}-old-deliveries");
    create_old_layout_table(&old).await;
    let subscription = SubscriptionId::generate();
    let an_hour_ago = Timestamp::now() - Duration::from_secs(3600);
    let records: Vec<Value> = [DeliveryStatus::Succeeded, DeliveryStatus::Failed, DeliveryStatus::Pending]
        .into_iter()
        .map(|status| old_record(&user, &subscription, status, an_hour_ago))
        .collect();
    for record in &records {
        dynamodb().put_item().table_name(&old).set_item(Some(item(record))).send().await.unwrap();
    }

    let admin = Admin::new(dynamodb(), api.settings.tables.clone());
    assert_eq!(admin.import_deliveries(&old).await.unwrap(), Imported { imported: 3, present: 0 });
    assert_eq!(admin.import_deliveries(&old).await.unwrap(), Imported { imported: 0, present: 3 });

    let table = DeliveryTable::new(dynamodb(), &api.settings.tables.deliveries);
    let id = |record: &Value| -> DeliveryId { typed(record["deliveryId"].as_str().unwrap()) };
    let all = table.list(&subscription, None, 10, None).await.unwrap();
    let mut expected: Vec<DeliveryId> = records.iter().map(id).collect();
    expected.reverse();
    assert_eq!(all.deliveries.iter().map(|d| d.id.clone()).collect::<Vec<_>>(), expected);
    let failed = table.list(&subscription, Some(DeliveryStatus::Failed), 10, None).await.unwrap();
    assert_eq!(failed.deliveries.iter().map(|d| d.id.clone()).collect::<Vec<_>>(), [id(&records[1])]);
    // The pending record, from before the due index, is now where the sweep looks.
    let mut overdue = Vec::new();
    for shard in DueShard::all() {
        overdue.extend(table.overdue(shard, Timestamp::now(), 1000, None).await.unwrap().items);
    }
    assert!(overdue.iter().any(|o| o.key.delivery_id == id(&records[2])), "the sweep finds it");
    assert!(!overdue.iter().any(|o| o.key.delivery_id == id(&records[0])));
    dynamodb().delete_table().table_name(&old).send().await.unwrap();
}
