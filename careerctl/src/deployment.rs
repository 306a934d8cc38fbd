//! One stack of template.yaml on the emulators, as a deploy leaves it: the template, what it
//! resolves to in this stack, and its functions' roles. Each function runs as the template
//! declares it: acting as its role, with the environment the template gives it, fed by its
//! event sources.

use std::collections::HashMap;

use anyhow::Context;
use career_core::aws::AwsClients;
use career_core::config::Settings;
use serde_yaml::Value;

use crate::event_sources::{queue_sources, stream_sources, QueueSource, StreamSource};
use crate::iam::Roles;
use crate::resources::{create_stack, QueueUrls};
use crate::template::{Resolver, Template};

#[derive(Clone)]
pub struct Deployment {
    pub template: Template,
    pub resolver: Resolver,
    pub roles: Roles,
}

impl Deployment {
    /// Makes what `template` declares for the stack `stack_name` (tables named by
    /// `local.tables`; `local.max_delivery_attempts` and `local.delivery_groups` as the
    /// `DeliveryMaxAttempts` and `DeliveryGroupsPerSubscription` parameters)
    /// and reads its functions' roles; `local` then points at its queues and KMS key.
    pub async fn create(
        template: &Template,
        clients: &AwsClients,
        stack_name: &str,
        local: &mut Settings,
    ) -> anyhow::Result<Self> {
        let parameters = [
            ("DeliveryMaxAttempts".to_owned(), local.max_delivery_attempts.to_string()),
            ("DeliveryGroupsPerSubscription".to_owned(), local.delivery_groups.get().to_string()),
        ]
        .into();
        let resolver = create_stack(template, clients, stack_name, &local.tables, parameters).await?;
        let roles = Roles::of(template, &resolver)?;
        let deployment = Deployment { template: template.clone(), resolver, roles };
        let queues = deployment.queues()?;
        local.delivery_queue_url = Some(queues.delivery);
        local.retry_queue_url = Some(queues.retry);
        local.dead_letter_queue_url = Some(queues.dead_letter);
        let key = deployment.resolver.resources.get("WebhookSecretsKey");
        local.secrets_kms_key_id = Some(key.context("the template has no WebhookSecretsKey")?.reference.clone());
        local.operator_topic_arn = Some(deployment.operator_topic()?.reference.clone());
        Ok(deployment)
    }

    fn operator_topic(&self) -> anyhow::Result<&crate::template::Physical> {
        self.resolver.resources.get("OperatorTopic").context("the template has no OperatorTopic")
    }

    /// The queue subscribed to the operator topic: what was published to it.
    pub fn operator_inbox(&self) -> anyhow::Result<String> {
        let inbox = self.operator_topic()?.attributes.get(crate::resources::TOPIC_INBOX).cloned();
        inbox.context("the operator topic has no local inbox")
    }

    pub fn queues(&self) -> anyhow::Result<QueueUrls> {
        QueueUrls::of(&self.resolver)
    }

    /// `clients` acting as the role of the template's function `function`.
    pub fn acting_as(&self, function: &str, clients: &AwsClients) -> AwsClients {
        self.roles.acting_as(function, clients)
    }

    /// The settings `function` reads from the environment the template gives it: the global
    /// variables and its own, resolved in this stack. Where `local` sets a variable the
    /// template gives the function, `local`'s value is taken (the stack's parameters, such as
    /// a shorter retry base, and what a deploy resolves elsewhere, such as the cursor key from
    /// Secrets Manager); a variable the template does not give the function is unset, as on AWS.
    pub fn settings_of(&self, function: &str, local: &Settings) -> anyhow::Result<Settings> {
        let local_values: HashMap<&str, String> = local.to_env().into_iter().collect();
        let globals = self.template.function_globals().and_then(|g| g.get("Environment"));
        let own = self.template.resource(function)?.property("Environment").cloned();
        let mut environment = HashMap::new();
        for declared in [globals.cloned(), own].into_iter().flatten() {
            let variables = declared.get("Variables").and_then(Value::as_mapping).cloned().unwrap_or_default();
            for (name, value) in variables {
                let name = name.as_str().context("a variable's name")?.to_owned();
                let value = match local_values.get(name.as_str()) {
                    Some(local) => local.clone(),
                    None => self.resolver.text(&value).with_context(|| format!("{function}'s {name}"))?,
                };
                environment.insert(name, value);
            }
        }
        let mut settings = Settings::from_vars(&environment).with_context(|| format!("{function}'s environment"))?;
        // Not an environment variable: tests shorten it.
        settings.rate_limit_window = local.rate_limit_window;
        Ok(settings)
    }

    /// The template's stream event sources of `function`, in this stack.
    pub fn stream_sources(&self, function: &str) -> anyhow::Result<Vec<StreamSource>> {
        stream_sources(&self.template, &self.resolver, function)
    }

    /// The template's queue event sources of `function`, in this stack.
    pub fn queue_sources(&self, function: &str) -> anyhow::Result<Vec<QueueSource>> {
        queue_sources(&self.template, &self.resolver, function)
    }
}
