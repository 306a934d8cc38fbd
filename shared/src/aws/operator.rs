//! The operator's channel (contract section 15): every operational event is also published
//! to the deployment's SNS topic, whatever subscriptions its user has, so an operator sees a
//! failing receiver even when its owner has nowhere else to be told.

use crate::aws::AwsClients;
use crate::config::{ConfigError, Settings};
use crate::events::Event;

#[derive(Debug, thiserror::Error)]
#[error("publishing to the operator topic failed: {0}")]
pub struct PublishError(String);

/// The topic, with the clients to reach it (the SNS client is made on first publish, so a
/// batch without operational events builds none).
pub struct OperatorTopic {
    clients: AwsClients,
    topic_arn: String,
}

impl OperatorTopic {
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self { clients: clients.clone(), topic_arn: settings.require_operator_topic_arn()?.to_owned() })
    }

    /// Publishes the event's body, exactly as a receiver gets it; the subject names its kind
    /// and subscription for an e-mail subscriber. Standard topics may deliver twice, so a
    /// reader de-duplicates on the body's `id`.
    pub async fn publish(&self, event: &Event) -> Result<(), PublishError> {
        let body = serde_json::to_string(event).expect("events serialize");
        let about = event.about().map(|id| format!(" ({id})")).unwrap_or_default();
        self.clients
            .sns()
            .publish()
            .topic_arn(&self.topic_arn)
            .subject(format!("{}{about}", event.kind()))
            .message(body)
            .send()
            .await
            .map_err(|err| PublishError(aws_sdk_sns::error::DisplayErrorContext(&err).to_string()))?;
        Ok(())
    }
}
