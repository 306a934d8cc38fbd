//! The template's tables (career_template::tables), queues and KMS key made on the emulators,
//! as CloudFormation makes them on AWS: every property the template gives passes on, so a setting added to the
//! template exists in the local stack with no other change, and one the local stack cannot
//! make is an error rather than silently dropped. What comes back is the [`Resolver`] that
//! resolves the rest of the template (roles, environments, event sources) to these resources.

use std::collections::HashMap;

use anyhow::{bail, Context};
use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client as Sqs;
use career_core::aws::AwsClients;
use career_core::config::TableNames;
use career_template::tables::create_tables;
use serde_yaml::Value;

use crate::template::{scalar, Physical, Resolver, Resource, Template, ACCOUNT};

/// The delivery lanes (career_core::aws::queue) and their dead-letter queues.
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
    /// The stream event sources' on-failure destination.
    pub stream_failures: String,
}

impl QueueUrls {
    /// The template's queues, by logical id, in a stack the resolver describes.
    pub fn of(resolver: &Resolver) -> anyhow::Result<Self> {
        let url = |id: &str| resolver.resources.get(id).map(|q| q.reference.clone()).context(format!("no queue {id}"));
        Ok(QueueUrls {
            delivery: url("DeliveryQueue")?,
            retry: url("DeliveryRetryQueue")?,
            dead_letter: url("DeliveryDeadLetterQueue")?,
            delivery_dead_letter: url("DeliveryMainLaneDeadLetterQueue")?,
            stream_failures: url("StreamFailuresQueue")?,
        })
    }

    /// Every queue: `(what it is, for people, URL)`.
    pub fn all(&self) -> [(&'static str, &str); 5] {
        [
            ("main lane", &self.delivery),
            ("retry lane", &self.retry),
            ("dead letters", &self.dead_letter),
            ("main lane dead letters", &self.delivery_dead_letter),
            ("stream failures", &self.stream_failures),
        ]
    }
}

/// Makes every table, queue and KMS key of `template` that does not exist yet, for the stack
/// `stack_name` whose tables are `tables`, with the operator's `clients` (no function's role).
pub async fn create_stack(
    template: &Template,
    clients: &AwsClients,
    stack_name: &str,
    tables: &TableNames,
    parameters: HashMap<String, String>,
) -> anyhow::Result<Resolver> {
    let mut resolver = Resolver {
        stack_name: stack_name.to_owned(),
        region: crate::template::REGION.to_owned(),
        parameters: template.parameter_defaults().into_iter().chain(parameters).collect(),
        resources: HashMap::new(),
    };
    for (logical_id, table) in create_tables(template, clients.dynamodb(), tables).await?.1 {
        resolver.resources.insert(logical_id, table);
    }
    for key in template.resources_of("AWS::KMS::Key") {
        let physical = create_kms_key(clients.kms()).await?;
        resolver.resources.insert(key.logical_id.to_owned(), physical);
    }
    for resource in template.resources() {
        let physical = match resource.kind {
            "AWS::Logs::LogGroup" => {
                let name = resolver.text(resource.property("LogGroupName").context("a log group's name")?)?;
                named(name.clone(), format!("arn:aws:logs:{}:{ACCOUNT}:log-group:{name}:*", resolver.region))
            }
            "AWS::SNS::Topic" => create_topic(clients, stack_name, resource.logical_id).await?,
            "AWS::SecretsManager::Secret" => {
                let name = format!("{stack_name}-{}", resource.logical_id);
                let arn = format!("arn:aws:secretsmanager:{}:{ACCOUNT}:{name}", resolver.region);
                named(arn.clone(), arn)
            }
            "AWS::IAM::Role" => {
                let arn = role_arn(&resource, &resolver)?;
                named(arn.rsplit('/').next().expect("a role's ARN names it").to_owned(), arn)
            }
            _ => continue,
        };
        resolver.resources.insert(resource.logical_id.to_owned(), physical);
    }
    create_queues(template, clients.sqs(), &mut resolver).await?;
    Ok(resolver)
}

/// The ARN a role of the template has in the stack `resolver` resolves (owners of an AWS
/// destination trust the delivery function's, which the webhooks function shows them): no
/// region, and its `RoleName` where the template fixes one, as CloudFormation names it; else
/// `<stack>-<logical id>` (CloudFormation adds a random suffix, which the local stack needs not).
pub fn role_arn(role: &Resource<'_>, resolver: &Resolver) -> anyhow::Result<String> {
    let name = match role.property("RoleName") {
        Some(name) => resolver.text(name)?,
        None => format!("{}-{}", resolver.stack_name, role.logical_id),
    };
    Ok(format!("arn:aws:iam::{ACCOUNT}:role/{name}"))
}

fn named(reference: String, arn: String) -> Physical {
    Physical { reference, attributes: [("Arn".to_owned(), arn)].into() }
}

/// Makes the template's queues, each after the queues its properties name (a dead-letter
/// queue before the queue that redrives to it). Every property but the name is an SQS
/// attribute of the same name.
async fn create_queues(template: &Template, sqs: &Sqs, resolver: &mut Resolver) -> anyhow::Result<()> {
    let mut waiting: Vec<_> = template.resources_of("AWS::SQS::Queue").collect();
    while !waiting.is_empty() {
        let before = waiting.len();
        let mut still_waiting = Vec::new();
        for queue in waiting {
            let properties = Value::Mapping(queue.properties.cloned().unwrap_or_default());
            let Ok(properties) = resolver.resolve(&properties) else {
                still_waiting.push(queue);
                continue;
            };
            let physical = create_queue(sqs, &resolver.stack_name, queue.logical_id, &properties).await?;
            resolver.resources.insert(queue.logical_id.to_owned(), physical);
        }
        if still_waiting.len() == before {
            let ids: Vec<_> = still_waiting.iter().map(|q| q.logical_id).collect();
            bail!("the template's queues {ids:?} name something the local stack does not make");
        }
        waiting = still_waiting;
    }
    Ok(())
}

async fn create_queue(sqs: &Sqs, stack: &str, logical_id: &str, properties: &Value) -> anyhow::Result<Physical> {
    let properties = properties.as_mapping().cloned().unwrap_or_default();
    let fifo = properties.get("FifoQueue").and_then(Value::as_bool) == Some(true);
    // CloudFormation names an unnamed queue after the stack and the logical id.
    let name = match properties.get("QueueName").and_then(scalar) {
        Some(name) => name,
        None => format!("{stack}-{logical_id}{}", if fifo { ".fifo" } else { "" }),
    };
    let mut request = sqs.create_queue().queue_name(&name);
    for (property, value) in &properties {
        let property = property.as_str().unwrap_or_default();
        if matches!(property, "QueueName" | "Tags") {
            continue;
        }
        let value = match value {
            Value::Mapping(_) => serde_json::to_string(&serde_yaml::from_value::<serde_json::Value>(value.clone())?)?,
            other => scalar(other).with_context(|| format!("queue {logical_id}: {property} is not a scalar"))?,
        };
        request = request.attributes(QueueAttributeName::from(property), value);
    }
    let url = request.send().await.with_context(|| format!("creating queue {name}"))?.queue_url.unwrap_or_default();
    let arn = format!("arn:aws:sqs:{}:{ACCOUNT}:{name}", crate::template::REGION);
    Ok(Physical {
        reference: url.clone(),
        attributes: [("Arn".to_owned(), arn), ("QueueName".to_owned(), name), ("QueueUrl".to_owned(), url.clone())]
            .into(),
    })
}

/// The attribute of a topic's [`Physical`] that holds the URL of the queue subscribed to it:
/// what `careerctl notifications` and the tests read what was published from.
pub const TOPIC_INBOX: &str = "LocalInboxUrl";

/// A topic, named as CloudFormation names it, and a queue subscribed to it that stands for
/// its subscribers (an operator's e-mail, say), so what is published can be read back.
async fn create_topic(clients: &AwsClients, stack: &str, logical_id: &str) -> anyhow::Result<Physical> {
    let name = format!("{stack}-{logical_id}");
    let created =
        clients.sns().create_topic().name(&name).send().await.with_context(|| format!("creating topic {name}"))?;
    let arn = created.topic_arn.context("CreateTopic returned no ARN")?;
    let inbox = format!("{name}-inbox");
    let queue = clients.sqs().create_queue().queue_name(&inbox).send().await;
    let inbox_url = queue.with_context(|| format!("creating queue {inbox}"))?.queue_url.unwrap_or_default();
    let inbox_arn = format!("arn:aws:sqs:{}:{ACCOUNT}:{inbox}", crate::template::REGION);
    let subscribed = clients.sns().subscribe().topic_arn(&arn).protocol("sqs").endpoint(&inbox_arn).send().await;
    subscribed.with_context(|| format!("subscribing {inbox} to {name}"))?;
    Ok(Physical {
        reference: arn.clone(),
        attributes: [("TopicArn".to_owned(), arn), ("TopicName".to_owned(), name), (TOPIC_INBOX.to_owned(), inbox_url)]
            .into(),
    })
}

/// The KMS key that protects the webhook secrets' data key. With kept KMS state, moto hands
/// out the same key, id and material, on every start.
async fn create_kms_key(kms: &aws_sdk_kms::Client) -> anyhow::Result<Physical> {
    let created = kms.create_key().description("career webhook secrets (local stack)").send().await;
    let metadata = created.context("creating the KMS key")?.key_metadata.context("CreateKey returned no key")?;
    let arn = metadata.arn.clone().context("CreateKey returned no ARN")?;
    Ok(Physical { reference: metadata.key_id, attributes: [("Arn".to_owned(), arn)].into() })
}
