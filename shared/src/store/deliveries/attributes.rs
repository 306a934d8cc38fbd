//! Every attribute and index of the deliveries table, named once. The items are written by
//! serde (their fields in camelCase, checked against these names by the tests); every
//! expression, key condition, filter and projection names its attributes from here. The
//! table's keys and TTL are also those of the health figures' items (`store::health`).

/// The table's partition key: a subscription's log shard (`whk_…#k`), or a marker's partition.
pub(in crate::store) const LOG_PARTITION: &str = "logPartition";
/// The table's sort key: a record's delivery id, or a marker's `<time>#<id>`.
pub(in crate::store) const DELIVERY_ID: &str = "deliveryId";
/// DynamoDB's TTL attribute, in Unix seconds.
pub(in crate::store) const EXPIRES_AT: &str = "expiresAt";

/// A record's identity, written once.
pub(super) const USER_ID: &str = "userId";
pub(super) const SUBSCRIPTION_ID: &str = "subscriptionId";
pub(super) const EVENT_ID: &str = "eventId";
pub(super) const EVENT_TYPE: &str = "eventType";
pub(super) const CREATED_AT: &str = "createdAt";
/// The body sent: as text, or deflated (`store::body::KeptBody`).
pub(super) const BODY: &str = "body";
pub(super) const BODY_DEFLATED: &str = "bodyDeflated";
/// A record's state, as its attempts and the sweep move it.
pub(super) const STATUS: &str = "status";
pub(super) const ATTEMPTS: &str = "attempts";
pub(super) const ROUND_ATTEMPTS: &str = "roundAttempts";
pub(super) const GENERATION: &str = "generation";
pub(super) const NEXT_ATTEMPT_AT: &str = "nextAttemptAt";
pub(super) const LEASE_UNTIL: &str = "leaseUntil";
pub(super) const LAST_ATTEMPT_AT: &str = "lastAttemptAt";
pub(super) const LAST_ERROR: &str = "lastError";
pub(super) const LAST_RESPONSE_STATUS: &str = "lastResponseStatus";
pub(super) const LAST_RESPONSE_BODY: &str = "lastResponseBody";
/// Written by no attempt since 2026-11-27, removed by each.
pub(super) const SUCCEEDED_AT: &str = "succeededAt";

/// The status index, `byStatus`, and its partition key, present only on the records it holds.
pub(super) const BY_STATUS: &str = "byStatus";
pub(super) const STATUS_KEY: &str = "statusKey";
/// The sweep's index: only `pending` records carry its partition key, `dueShard`; its sort
/// key is `nextAttemptAt`.
pub const BY_DUE: &str = "byDue";
pub(super) const DUE_SHARD: &str = "dueShard";

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;

    /// What serde alone writes and reads: no expression names them.
    const SERDE_ONLY: &[&str] = &["traceparent", "tracestate", "probe", "records", "fate"];
    const NAMED: &[&str] = &[
        LOG_PARTITION,
        DELIVERY_ID,
        EXPIRES_AT,
        USER_ID,
        SUBSCRIPTION_ID,
        EVENT_ID,
        EVENT_TYPE,
        CREATED_AT,
        BODY,
        BODY_DEFLATED,
        STATUS,
        ATTEMPTS,
        ROUND_ATTEMPTS,
        GENERATION,
        NEXT_ATTEMPT_AT,
        LEASE_UNTIL,
        LAST_ATTEMPT_AT,
        LAST_ERROR,
        LAST_RESPONSE_STATUS,
        LAST_RESPONSE_BODY,
        SUCCEEDED_AT,
        STATUS_KEY,
        DUE_SHARD,
    ];

    fn unnamed(item: &Item) -> Vec<&str> {
        let known = |name: &str| NAMED.contains(&name) || SERDE_ONLY.contains(&name);
        item.keys().map(String::as_str).filter(|name| !known(name)).collect()
    }

    #[test]
    fn every_attribute_of_a_record_and_of_a_marker_is_named_here() {
        let at = Timestamp::from_unix_seconds(1_795_766_400);
        let mut message = DeliveryMessage::new(
            &crate::events::Event::ping(&SubscriptionId::generate()),
            &"u1".parse().unwrap(),
            &SubscriptionId::generate(),
        );
        message.claimed_until = Some(at);
        message.trace = TraceContext::of(Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), Some("k=v"));
        let item = DeliveryItem::new(&message, &message.body(), DeliveryStatus::Pending, at);
        let summary = RecordSummary { last_attempt_at: Some(at), last_error: Some("503".into()), ..item.summary };
        let record = DeliveryItem {
            summary,
            last_response_status: Some(503),
            last_response_body: Some("busy".into()),
            succeeded_at: Some(at),
            ..item
        };
        let record: Item = serde_dynamo::to_item(&record).unwrap();
        assert!(record.len() >= 24, "every optional attribute written: {:?}", record.keys());
        let deflated = DeliveryItem::new(&message, &message.body(), DeliveryStatus::Held, at)
            .keeping(KeptBody::Deflated(b"x".to_vec()));
        let marker = MarkerItem {
            log_partition: LOG_PARTITION.into(),
            delivery_id: DELIVERY_ID.into(),
            records: vec![],
            expires_at: at,
        };
        let task = TaskMarkerItem {
            log_partition: LOG_PARTITION.into(),
            delivery_id: DELIVERY_ID.into(),
            user_id: message.user_id.clone(),
            subscription_id: message.subscription_id.clone(),
            fate: SubscriptionTask::Release,
            expires_at: at,
        };
        for item in [
            record,
            serde_dynamo::to_item(&deflated).unwrap(),
            serde_dynamo::to_item(&marker).unwrap(),
            serde_dynamo::to_item(&task).unwrap(),
        ] {
            assert_eq!(unnamed(&item), Vec::<&str>::new());
        }
    }
}
