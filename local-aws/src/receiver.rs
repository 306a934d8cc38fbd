//! The receiver's side of contract section 17 in the local stack: an AWS account of the
//! receiver's own in moto (which keeps accounts apart), holding the role a subscription's
//! deliveries assume and the queue or bus they go to (an EventBridge bus, or a Custom Event
//! Bus, which moto_server.py emulates). `careerctl receiver` makes a sample one
//! for docs/receiving-webhooks.md's walk-through, and the integration tests make theirs here.
//!
//! Calls made in that account carry moto's account header (signed with the stack's own keys,
//! which the IAM enforcement does not evaluate: they are the receiver setting up its account).
//! The delivery function reaches it only with the credentials STS gives for the role.

use anyhow::Context;
use aws_sdk_eventbridge::types::Target;
use aws_sdk_sqs::types::MessageSystemAttributeName::All;
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use career_core::aws::AwsClients;
use serde_json::{json, Value};

use crate::template::REGION;

/// The receiver's account: not the deployment's (`template::ACCOUNT`), as on AWS.
pub const RECEIVER_ACCOUNT: &str = "111122223333";

/// moto's request header that names the account a call acts in.
pub const ACCOUNT_HEADER: &str = "x-moto-account-id";

/// The trust policy that lets `sender_role_arn` assume the role, with `external_id` only.
pub fn trust_policy(sender_role_arn: &str, external_id: &str) -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"AWS": sender_role_arn},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"sts:ExternalId": external_id}}
        }]
    })
}

/// The permissions policy that lets the role send to the queue `queue_arn`, or put events on
/// the bus `bus_arn`: nothing else.
pub fn permissions_policy(action: &str, resource_arn: &str) -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": action, "Resource": resource_arn}]
    })
}

/// The ARN of the queue at `queue_url` (`…/<account>/<name>`).
pub fn queue_arn(queue_url: &str) -> String {
    let mut parts = queue_url.rsplit('/');
    let name = parts.next().unwrap_or_default();
    let account = parts.next().unwrap_or_default();
    format!("arn:aws:sqs:{REGION}:{account}:{name}")
}

/// The receiver's account in the local stack's emulators.
pub struct ReceiverAccount {
    iam: aws_sdk_iam::Client,
    sqs: aws_sdk_sqs::Client,
    events: aws_sdk_eventbridge::Client,
    events_v2: aws_sdk_eventbridgev2::Client,
}

/// Names the receiver's account on a request to moto.
fn in_account(request: &mut HttpRequest) {
    request.headers_mut().insert(ACCOUNT_HEADER, RECEIVER_ACCOUNT);
}

impl ReceiverAccount {
    /// On the stack the SDK configuration of `clients` points at (its endpoints, its keys).
    pub fn new(clients: &AwsClients) -> Self {
        let sdk = clients.sdk();
        ReceiverAccount {
            iam: aws_sdk_iam::Client::new(sdk),
            sqs: aws_sdk_sqs::Client::new(sdk),
            events: aws_sdk_eventbridge::Client::new(sdk),
            events_v2: aws_sdk_eventbridgev2::Client::new(sdk),
        }
    }

    /// A role named `name` with these policies (the permissions as one inline policy, or
    /// none); its ARN.
    pub async fn create_role(&self, name: &str, trust: &Value, permissions: Option<&Value>) -> anyhow::Result<String> {
        let created = self.iam.create_role().role_name(name).assume_role_policy_document(trust.to_string());
        let created = created.customize().mutate_request(in_account).send().await.context("creating the role")?;
        let arn = created.role().map(|role| role.arn().to_owned()).context("a created role has an ARN")?;
        if let Some(permissions) = permissions {
            self.put_permissions(name, permissions).await?;
        }
        Ok(arn)
    }

    /// Sets the role's inline permissions policy, `deliveries`.
    pub async fn put_permissions(&self, role: &str, permissions: &Value) -> anyhow::Result<()> {
        let put = self.iam.put_role_policy().role_name(role).policy_name("deliveries");
        let put = put.policy_document(permissions.to_string()).customize().mutate_request(in_account);
        put.send().await.context("setting the role's permissions")?;
        Ok(())
    }

    /// The role `name` with these policies, made or, when it exists, changed to them.
    pub async fn replace_role(&self, name: &str, trust: &Value, permissions: &Value) -> anyhow::Result<()> {
        let update = self.iam.update_assume_role_policy().role_name(name).policy_document(trust.to_string());
        match update.customize().mutate_request(in_account).send().await {
            Ok(_) => self.put_permissions(name, permissions).await,
            Err(err) if err.as_service_error().is_some_and(|e| e.is_no_such_entity_exception()) => {
                self.create_role(name, trust, Some(permissions)).await.map(drop)
            }
            Err(err) => Err(err).context("changing the role's trust policy"),
        }
    }

    /// A queue named `name` (FIFO when it ends in `.fifo`); its URL.
    pub async fn create_queue(&self, name: &str) -> anyhow::Result<String> {
        let mut create = self.sqs.create_queue().queue_name(name);
        if name.ends_with(".fifo") {
            create = create.attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true");
        }
        let created = create.customize().mutate_request(in_account).send().await.context("creating the queue")?;
        created.queue_url.context("a created queue has a URL")
    }

    pub async fn delete_queue(&self, queue_url: &str) -> anyhow::Result<()> {
        let delete = self.sqs.delete_queue().queue_url(queue_url).customize().mutate_request(in_account);
        delete.send().await.context("deleting the queue")?;
        Ok(())
    }

    /// Takes the messages waiting on the queue (at most 10), with all their attributes (the
    /// system's too: a FIFO message's group and deduplication id).
    pub async fn take(&self, queue_url: &str) -> anyhow::Result<Vec<aws_sdk_sqs::types::Message>> {
        let receive = self.sqs.receive_message().queue_url(queue_url).max_number_of_messages(10);
        let receive = receive.message_attribute_names("All").message_system_attribute_names(All);
        let receive = receive.customize().mutate_request(in_account);
        let messages = receive.send().await.context("receiving")?.messages.unwrap_or_default();
        for message in &messages {
            let delete = self
                .sqs
                .delete_message()
                .queue_url(queue_url)
                .receipt_handle(message.receipt_handle().unwrap_or_default());
            delete.customize().mutate_request(in_account).send().await.context("deleting a message received")?;
        }
        Ok(messages)
    }

    /// A Custom Event Bus named `name` (the eventsv2 API), or the one made before; its ARN
    /// (whose last part the bus was given when made). What lands on it is read with
    /// `emulators::held_events`.
    pub async fn create_event_bus_v2(&self, name: &str) -> anyhow::Result<String> {
        let create = self.events_v2.create_event_bus().name(name).customize().mutate_request(in_account);
        let created = match create.send().await {
            Ok(created) => created,
            Err(err) if err.as_service_error().is_some_and(|e| e.is_resource_already_exists_exception()) => {
                let list = self.events_v2.list_event_buses().name_prefix(name).customize().mutate_request(in_account);
                let listed = list.send().await.context("listing the Custom Event Buses")?;
                let made = listed.event_buses().iter().find(|bus| bus.name() == Some(name));
                return made.and_then(|bus| bus.event_bus_arn()).map(str::to_owned).context("the bus made before");
            }
            Err(err) => return Err(err).context("creating the Custom Event Bus"),
        };
        created.event_bus_arn.context("a Custom Event Bus has an ARN")
    }

    pub async fn delete_event_bus_v2(&self, bus_arn: &str) -> anyhow::Result<()> {
        let delete = self.events_v2.delete_event_bus().event_bus_arn(bus_arn).customize().mutate_request(in_account);
        delete.send().await.context("deleting the Custom Event Bus")?;
        Ok(())
    }

    /// A bus named `name` with a rule that forwards every event of the service to the queue
    /// `queue_url` (how a receiver observes its bus), or the one made before; the bus's ARN.
    pub async fn create_bus_to(&self, name: &str, queue_url: &str) -> anyhow::Result<String> {
        let created = self.events.create_event_bus().name(name).customize().mutate_request(in_account).send().await;
        let arn = match created {
            Ok(created) => created.event_bus_arn.context("a bus has an ARN")?,
            // Made before (the rule and its target are put again, which changes nothing).
            Err(err) if err.as_service_error().is_some_and(|e| e.is_resource_already_exists_exception()) => {
                format!("arn:aws:events:{REGION}:{RECEIVER_ACCOUNT}:event-bus/{name}")
            }
            Err(err) => return Err(err).context("creating the bus"),
        };
        let pattern = json!({"source": [career_core::delivery::aws_destination::EVENT_SOURCE]}).to_string();
        let rule = self.events.put_rule().name(format!("{name}-to-queue")).event_bus_name(name).event_pattern(pattern);
        rule.customize().mutate_request(in_account).send().await.context("creating the rule")?;
        let target = Target::builder().id("queue").arn(queue_arn(queue_url)).build().context("a target")?;
        let targets = self.events.put_targets().rule(format!("{name}-to-queue")).event_bus_name(name).targets(target);
        targets.customize().mutate_request(in_account).send().await.context("targeting the queue")?;
        Ok(arn)
    }
}
