//! The alerts table: partition `userId`, sort `alertId` (time-sortable, so newest first is a
//! reverse query). Three local secondary indexes serve the list filters, so a list costs
//! what it returns and stays strongly consistent: `active` (neither read nor dismissed),
//! `unread` and `undismissed`. An index's key holds the alert id exactly while the alert
//! belongs in that list; every list reads only keys that start with the alert-id prefix.

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use aws_sdk_dynamodb::Client;
use serde::{Deserialize, Serialize};

use super::conditional::held;
use super::expression::{Condition, Conditional, Expression, Updates};
use super::{s, time, Item, StoreError};
use crate::alerts::{Alert, AlertAction, AlertFlag, Category, ListFilter, Severity};
use crate::clock::Timestamp;
use crate::ids::{AlertId, UserId};

const ACTIVE_KEY: &str = "activeKey";

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AlertItem {
    user_id: UserId,
    alert_id: AlertId,
    category: Category,
    severity: Severity,
    title: String,
    message: String,
    created_at: Timestamp,
    read: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    read_at: Option<Timestamp>,
    dismissed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dismissed_at: Option<Timestamp>,
    // The sparse index keys hold the alert id, or a timestamp that puts the item outside
    // every list's key range (see `apply`), so they stay text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    active_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unread_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    undismissed_key: Option<String>,
}

impl From<AlertItem> for Alert {
    fn from(item: AlertItem) -> Self {
        Alert {
            id: item.alert_id,
            category: item.category,
            severity: item.severity,
            title: item.title,
            message: item.message,
            created_at: item.created_at,
            read: item.read,
            read_at: item.read_at,
            dismissed: item.dismissed,
            dismissed_at: item.dismissed_at,
        }
    }
}

/// The attributes behind one flag: its value, its timestamp, and the sparse index key
/// present while the flag is off.
struct FlagColumns {
    flag: &'static str,
    at: &'static str,
    key_while_off: &'static str,
}

fn columns(flag: AlertFlag) -> FlagColumns {
    match flag {
        AlertFlag::Read => FlagColumns { flag: "read", at: "readAt", key_while_off: "unreadKey" },
        AlertFlag::Dismissed => FlagColumns { flag: "dismissed", at: "dismissedAt", key_while_off: "undismissedKey" },
    }
}

/// The index that serves a filter and its sort-key attribute (`None`: the table itself).
fn index_of(filter: ListFilter) -> (Option<&'static str>, &'static str) {
    match filter {
        ListFilter::Active => (Some("active"), ACTIVE_KEY),
        ListFilter::NotDismissed => (Some("undismissed"), "undismissedKey"),
        ListFilter::NotRead => (Some("unread"), "unreadKey"),
        ListFilter::All => (None, "alertId"),
    }
}

/// One page of a list and the id of its last alert when more follow.
pub struct AlertPage {
    pub alerts: Vec<Alert>,
    pub last_id_if_more: Option<AlertId>,
}

#[derive(Clone)]
pub struct AlertTable {
    client: Client,
    table: String,
}

impl AlertTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    pub async fn insert(&self, user_id: &UserId, alert: &Alert) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(Self::item(user_id, alert)?))
            .condition(Condition::absent("alertId"))
            .send()
            .await?;
        Ok(())
    }

    /// An alert as the table holds it, sparse index keys included (`insert` writes it; batch
    /// loads such as the benchmarks' history use it too).
    pub fn item(user_id: &UserId, alert: &Alert) -> Result<Item, StoreError> {
        let active = !alert.read && !alert.dismissed;
        let item = AlertItem {
            user_id: user_id.clone(),
            alert_id: alert.id.clone(),
            category: alert.category,
            severity: alert.severity,
            title: alert.title.clone(),
            message: alert.message.clone(),
            created_at: alert.created_at,
            read: alert.read,
            read_at: alert.read_at,
            dismissed: alert.dismissed,
            dismissed_at: alert.dismissed_at,
            active_key: active.then(|| alert.id.to_string()),
            unread_key: (!alert.read).then(|| alert.id.to_string()),
            undismissed_key: (!alert.dismissed).then(|| alert.id.to_string()),
        };
        Ok(serde_dynamo::to_item(item)?)
    }

    /// Newest first, `limit` alerts after `after` (an alert id from the previous page).
    pub async fn list(
        &self,
        user_id: &UserId,
        filter: ListFilter,
        limit: u32,
        after: Option<&AlertId>,
    ) -> Result<AlertPage, StoreError> {
        let output = self.list_query(user_id, filter, limit, after).send().await?;
        let items: Vec<AlertItem> = serde_dynamo::from_items(output.items.unwrap_or_default())?;
        let (alerts, last_id_if_more) = super::one_page(items.into_iter().map(Alert::from).collect(), limit, |a| &a.id);
        Ok(AlertPage { alerts, last_id_if_more })
    }

    /// The Query of one list page: `limit` + 1 items (the extra one tells whether another
    /// page follows), newest first, after `after`.
    pub fn list_query(
        &self,
        user_id: &UserId,
        filter: ListFilter,
        limit: u32,
        after: Option<&AlertId>,
    ) -> QueryFluentBuilder {
        let (index, sort_key) = index_of(filter);
        let start_key = after
            .map(|id| Item::from([("userId".into(), s(user_id)), ("alertId".into(), s(id)), (sort_key.into(), s(id))]));
        self.client
            .query()
            .table_name(&self.table)
            .set_index_name(index.map(Into::into))
            .key_condition_expression("userId = :u AND begins_with(#sort, :alert)")
            .expression_attribute_names("#sort", sort_key)
            .expression_attribute_values(":u", s(user_id))
            .expression_attribute_values(":alert", s(AlertId::PREFIX))
            .scan_index_forward(false)
            .consistent_read(true)
            .limit(i32::try_from(limit + 1).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start_key)
    }

    /// Applies `action` in one conditional update and returns the alert as it now is;
    /// `None` when the user has no such alert. Setting a flag keeps its first timestamp.
    /// Concurrent actions on one alert need no retry: each is a single atomic update whose
    /// result does not depend on what the caller last read.
    pub async fn apply(
        &self,
        user_id: &UserId,
        alert_id: &AlertId,
        action: AlertAction,
        now: Timestamp,
    ) -> Result<Option<Alert>, StoreError> {
        let own = columns(action.flag());
        let expression = if action.sets() {
            Expression::new()
                .set(own.flag, AttributeValue::Bool(true))
                .set_if_absent(own.at, time(now))
                .remove(own.key_while_off)
                .remove(ACTIVE_KEY)
        } else {
            // Clearing a flag makes the alert active only if the other flag is off too. The other
            // flag's timestamp exists exactly while that flag is set, so the active key becomes
            // that timestamp (outside every list's key range) or, if there is none, the alert id.
            Expression::new()
                .set(own.flag, AttributeValue::Bool(false))
                .set(own.key_while_off, s(alert_id))
                .set_from(ACTIVE_KEY, columns(action.flag().other()).at, s(alert_id))
                .remove(own.at)
        };
        let update = self.update(user_id, alert_id).expression(expression.when(Condition::exists("alertId")));
        held(update.send().await)?.map(|output| alert_of(output.attributes)).transpose()
    }

    fn update(
        &self,
        user_id: &UserId,
        alert_id: &AlertId,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .key("alertId", s(alert_id))
            .return_values(ReturnValue::AllNew)
    }
}

fn alert_of(attributes: Option<Item>) -> Result<Alert, StoreError> {
    let item: AlertItem = serde_dynamo::from_item(attributes.unwrap_or_default())?;
    Ok(item.into())
}
