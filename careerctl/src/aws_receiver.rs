//! `careerctl demo aws-receiver` and `demo aws-messages`: a sample receiver in its own AWS
//! account for a subscription with a `destination` (contract section 17), in the local
//! stack's emulators, as docs/receiving-webhooks.md's walk-through uses it.

use anyhow::Context;
use career_core::aws::AwsClients;
use local_aws::receiver::{permissions_policy, queue_arn, trust_policy, ReceiverAccount, RECEIVER_ACCOUNT};
use serde_json::{json, Value};

/// The role the sample receiver's subscription names: `<name>-sender` in the receiver's account.
fn role_name(name: &str) -> String {
    format!("{name}-sender")
}

/// Where the sample receiver takes its deliveries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Queue,
    /// An EventBridge bus with a rule forwarding to the queue.
    EventBridge,
    /// A Custom Event Bus (eventsv2), which keeps what it is put.
    EventBus,
}

/// Makes (again: every call is idempotent) the queue `name`, with `kind` the bus `name`, and,
/// given the subscription's `senderRoleArn` and `externalId`, the role that lets the service
/// send there. Prints the `destination` to create the subscription with.
pub async fn set_up(
    clients: &AwsClients,
    name: &str,
    kind: Kind,
    sender: Option<(String, String)>,
) -> anyhow::Result<Value> {
    let account = ReceiverAccount::new(clients);
    let queue_url = account.create_queue(name).await?;
    let role_arn = format!("arn:aws:iam::{RECEIVER_ACCOUNT}:role/{}", role_name(name));
    let on_bus = |kind: &str, bus_arn: &str| {
        let destination = json!({"type": kind, "eventBusArn": bus_arn, "roleArn": role_arn});
        (destination, permissions_policy("events:PutEvents", bus_arn))
    };
    let (destination, permissions) = match kind {
        Kind::Queue => (
            json!({"type": "aws_sqs", "queueUrl": queue_url, "roleArn": role_arn}),
            permissions_policy("sqs:SendMessage", &queue_arn(&queue_url)),
        ),
        Kind::EventBridge => on_bus("aws_eventbridge", &account.create_bus_to(name, &queue_url).await?),
        Kind::EventBus => on_bus("aws_eventbus", &account.create_event_bus_v2(name).await?),
    };
    let mut made = json!({"destination": destination, "queueUrl": queue_url, "permissionsPolicy": permissions});
    if let Some((sender_role_arn, external_id)) = sender {
        let trust = trust_policy(&sender_role_arn, &external_id);
        account.replace_role(&role_name(name), &trust, &permissions).await.context("making the receiver's role")?;
        made["trustPolicy"] = trust;
    }
    Ok(made)
}

/// Takes up to 10 messages from the sample receiver's queue `name`: each one's body and
/// message attributes.
pub async fn messages(clients: &AwsClients, name: &str) -> anyhow::Result<Value> {
    let account = ReceiverAccount::new(clients);
    let queue_url = account.create_queue(name).await?;
    let mut messages = Vec::new();
    for message in account.take(&queue_url).await? {
        let attributes: serde_json::Map<String, Value> = message
            .message_attributes()
            .into_iter()
            .flatten()
            .map(|(name, value)| (name.clone(), json!(value.string_value())))
            .collect();
        messages.push(json!({"body": message.body(), "attributes": attributes}));
    }
    Ok(json!({"messages": messages}))
}
