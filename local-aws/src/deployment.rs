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
        // Every function's event sources and environment are read now, so that a setting the
        // pumps cannot evaluate, or a variable that resolves to nothing, stops the stack
        // before it serves.
        for function in template.resources_of("AWS::Serverless::Function") {
            deployment.stream_sources(function.logical_id)?;
            deployment.queue_sources(function.logical_id)?;
        }
        let queues = deployment.queues()?;
        local.delivery_queue_url = Some(queues.delivery);
        local.retry_queue_url = Some(queues.retry);
        local.dead_letter_queue_url = Some(queues.dead_letter);
        let key = deployment.resolver.resources.get("WebhookSecretsKey");
        local.secrets_kms_key_id = Some(key.context("the template has no WebhookSecretsKey")?.reference.clone());
        local.operator_topic_arn = Some(deployment.operator_topic()?.reference.clone());
        for function in template.resources_of("AWS::Serverless::Function") {
            deployment.settings_of(function.logical_id, local)?;
        }
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

    /// The settings `function` reads from the environment the template gives it in this
    /// stack ([`environment_of`]), on a local stack whose settings are `local`.
    pub fn settings_of(&self, function: &str, local: &Settings) -> anyhow::Result<Settings> {
        let local_values: HashMap<&str, String> = local.to_env().into_iter().collect();
        let environment = environment_of(&self.template, &self.resolver, function, &local_values)?;
        let mut settings = Settings::from_vars(&environment).with_context(|| format!("{function}'s environment"))?;
        // Not environment variables: tests shorten the window and the release's share, the
        // scale model shrinks the quota.
        settings.rate_limit_window = local.rate_limit_window;
        settings.partition_quota = local.partition_quota;
        settings.release_per_call = local.release_per_call;
        Ok(settings)
    }

    /// One instance of the template's function `function` (its logical id) on `clients`: its
    /// AWS clients, acting as its role, and its settings, from the environment the template
    /// gives it on a stack whose settings are `local`.
    pub fn instance(
        &self,
        function: &str,
        clients: &AwsClients,
        local: &Settings,
    ) -> anyhow::Result<(AwsClients, Settings)> {
        Ok((self.acting_as(function, clients), self.settings_of(function, local)?))
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

/// The variables the local stack sets whatever the template says: the template hard-codes
/// https only and no allowed private network for the cloud, and the local stack's receivers
/// listen on loopback without TLS.
const LOCAL_ONLY: &[&str] = &["ALLOW_HTTP_WEBHOOK_URLS", "WEBHOOK_ALLOWED_NETWORKS"];

/// The environment the template gives `function` in the stack `resolver` describes: the
/// global variables and its own, each the template's value resolved in this stack, as Lambda
/// would have it. Three kinds take the local stack's value (`local`) instead, as the local
/// stack stands in for what a deploy puts there:
/// - a stack parameter (`!Ref <Parameter>`): the local settings are the stack's parameter
///   values, as a deploy's parameter overrides are (a shorter retry base, say);
/// - a dynamic reference (`{{resolve:…}}`), which CloudFormation reads from Secrets Manager;
/// - the [`LOCAL_ONLY`] variables.
///
/// Every other value names the stack's resources as the template names them, so a variable
/// that names the wrong table or queue names it locally too. A variable the template does not
/// give the function is unset, as on AWS.
pub fn environment_of(
    template: &Template,
    resolver: &Resolver,
    function: &str,
    local: &HashMap<&str, String>,
) -> anyhow::Result<HashMap<String, String>> {
    let globals = template.function_globals().and_then(|g| g.get("Environment")).cloned();
    let own = template.resource(function)?.property("Environment").cloned();
    let mut environment = HashMap::new();
    for declared in [globals, own].into_iter().flatten() {
        let variables = declared.get("Variables").and_then(Value::as_mapping).cloned().unwrap_or_default();
        for (name, value) in variables {
            let name = name.as_str().context("a variable's name")?.to_owned();
            let local_value = || {
                let value = local.get(name.as_str()).cloned();
                value.with_context(|| format!("{function}'s {name}: the local stack has no value to give it"))
            };
            let value = if LOCAL_ONLY.contains(&name.as_str()) || parameter_of(template, &value).is_some() {
                local_value()?
            } else {
                let resolved = resolver.text(&value).with_context(|| format!("{function}'s {name}"))?;
                match resolved.contains("{{resolve:") {
                    true => local_value()?,
                    false => resolved,
                }
            };
            environment.insert(name, value);
        }
    }
    Ok(environment)
}

/// The parameter `value` is, when it is `!Ref <Parameter>` (short or long form).
fn parameter_of<'a>(template: &Template, value: &'a Value) -> Option<&'a str> {
    let name = match value {
        Value::Tagged(tagged) if tagged.tag == "Ref" => tagged.value.as_str(),
        Value::Mapping(map) if map.len() == 1 => map.get("Ref").and_then(Value::as_str),
        _ => None,
    }?;
    template.is_parameter(name).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::{function, TEMPLATE};
    use career_core::config::TableNames;

    const CURSOR_KEY: &str = "cursor_key_of_the_local_stack_0123456789";

    fn local() -> HashMap<&'static str, String> {
        let mut settings = crate::stack::settings_from_env().unwrap();
        settings.tables = TableNames::with_prefix("elsewhere-");
        settings.max_delivery_attempts = 4;
        settings.delivery_queue_url = Some("https://q/elsewhere".into());
        settings.cursor_signing_key = Some(career_core::config::SecretSetting::new(CURSOR_KEY.to_owned()));
        settings.to_env().into_iter().collect()
    }

    fn environment(template: &Template, function: &str) -> anyhow::Result<HashMap<String, String>> {
        let paper = crate::deploy_checks::resolved_on_paper(&TableNames::with_prefix("paper-"));
        environment_of(template, &paper, function, &local())
    }

    #[test]
    fn each_variable_is_the_templates_value_in_this_stack_and_parameters_are_the_local_settings() {
        let deliver = environment(&Template::shipped(), function::DELIVER).unwrap();
        let table = [
            ("DELIVERIES_TABLE", "paper-deliveries"),
            ("WEBHOOKS_TABLE", "paper-webhooks"),
            ("DELIVERY_QUEUE_URL", "https://q/DeliveryQueue"),
            ("DEAD_LETTER_QUEUE_URL", "https://q/DeliveryDeadLetterQueue"),
            ("METRICS_NAMESPACE", "paper/webhooks"),
            ("DELIVERY_MAX_ATTEMPTS", "4"),
            ("ALLOW_HTTP_WEBHOOK_URLS", "true"),
            ("WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128"),
            ("RUST_LOG", "info"),
        ];
        for (name, value) in table {
            assert_eq!(deliver.get(name).map(String::as_str), Some(value), "{name}");
        }
        assert!(!deliver.contains_key("ALERTS_TABLE"), "a variable the template does not give is unset");
        let alerts = environment(&Template::shipped(), function::ALERTS).unwrap();
        assert_eq!(alerts["CURSOR_SIGNING_KEY"], CURSOR_KEY, "Secrets Manager's part");
    }

    #[test]
    fn a_variable_that_names_the_wrong_resource_names_it_locally_too() {
        let start = TEMPLATE.find("  DeliverFunction:\n").unwrap();
        let at = TEMPLATE[start..].find("DELIVERIES_TABLE: !Ref DeliveriesTable").unwrap() + start;
        let right = "DELIVERIES_TABLE: !Ref DeliveriesTable";
        let wrong = format!("{}DELIVERIES_TABLE: !Ref WebhooksTable{}", &TEMPLATE[..at], &TEMPLATE[at + right.len()..]);
        let deliver = environment(&Template::parse(&wrong).unwrap(), function::DELIVER).unwrap();
        assert_eq!(deliver["DELIVERIES_TABLE"], "paper-webhooks");
        let unresolvable =
            wrong.replacen("DELIVERIES_TABLE: !Ref WebhooksTable", "DELIVERIES_TABLE: !Ref NoSuchTable", 1);
        let error = environment(&Template::parse(&unresolvable).unwrap(), function::DELIVER).unwrap_err();
        assert!(format!("{error:#}").contains("NoSuchTable"), "{error:#}");
    }
}
