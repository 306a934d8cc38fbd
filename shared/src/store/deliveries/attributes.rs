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
pub(super) mod tests {
    use super::*;
    use crate::store::Item;

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

    /// The attributes of `item` that this module does not name.
    pub(in crate::store::deliveries) fn unnamed(item: &Item) -> Vec<&str> {
        let known = |name: &str| NAMED.contains(&name) || SERDE_ONLY.contains(&name);
        item.keys().map(String::as_str).filter(|name| !known(name)).collect()
    }
}
