//! The template's DynamoDB tables, made as CloudFormation makes them: every property the
//! template gives passes on, and one this code cannot make is an error rather than silently
//! dropped. The local stack makes them on DynamoDB Local; `careerctl tables create` makes the
//! missing ones in the account it is given.

use std::collections::HashMap;

use anyhow::{bail, Context};
use aws_sdk_dynamodb::types as ddb;
use aws_sdk_dynamodb::Client as DynamoDb;
use career_core::config::TableNames;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_yaml::Value;

use crate::{Physical, Resolver, Template, ACCOUNT};

/// A table's properties as the template gives them. Those the emulator has no part of
/// (backups, encryption at rest) are read and left; any other is an error until the local
/// stack makes it.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct TableProperties {
    billing_mode: Option<String>,
    attribute_definitions: Vec<AttributeDefinition>,
    key_schema: Vec<KeyElement>,
    #[serde(default)]
    local_secondary_indexes: Vec<Index>,
    #[serde(default)]
    global_secondary_indexes: Vec<Index>,
    stream_specification: Option<StreamSpecification>,
    time_to_live_specification: Option<TimeToLive>,
    #[serde(rename = "PointInTimeRecoverySpecification")]
    _backups: Option<IgnoredAny>,
    #[serde(rename = "SSESpecification")]
    _encryption: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct AttributeDefinition {
    attribute_name: String,
    attribute_type: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct KeyElement {
    attribute_name: String,
    key_type: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct Index {
    index_name: String,
    key_schema: Vec<KeyElement>,
    projection: Projection,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct Projection {
    projection_type: String,
    #[serde(default)]
    non_key_attributes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct StreamSpecification {
    stream_view_type: String,
}

impl StreamSpecification {
    fn sdk(&self) -> ddb::StreamSpecification {
        ddb::StreamSpecification::builder()
            .stream_enabled(true)
            .stream_view_type(ddb::StreamViewType::from(self.stream_view_type.as_str()))
            .build()
            .expect("complete")
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct TimeToLive {
    attribute_name: String,
    enabled: bool,
}

impl KeyElement {
    fn sdk(&self) -> ddb::KeySchemaElement {
        ddb::KeySchemaElement::builder()
            .attribute_name(&self.attribute_name)
            .key_type(ddb::KeyType::from(self.key_type.as_str()))
            .build()
            .expect("complete")
    }
}

impl Projection {
    fn sdk(&self) -> ddb::Projection {
        let attributes = Some(self.non_key_attributes.clone()).filter(|a| !a.is_empty());
        ddb::Projection::builder()
            .projection_type(ddb::ProjectionType::from(self.projection_type.as_str()))
            .set_non_key_attributes(attributes)
            .build()
    }
}

impl Index {
    fn keys(&self) -> Vec<ddb::KeySchemaElement> {
        self.key_schema.iter().map(KeyElement::sdk).collect()
    }

    fn global(&self) -> ddb::GlobalSecondaryIndex {
        ddb::GlobalSecondaryIndex::builder()
            .index_name(&self.index_name)
            .set_key_schema(Some(self.keys()))
            .projection(self.projection.sdk())
            .build()
            .expect("complete")
    }

    fn local(&self) -> ddb::LocalSecondaryIndex {
        ddb::LocalSecondaryIndex::builder()
            .index_name(&self.index_name)
            .set_key_schema(Some(self.keys()))
            .projection(self.projection.sdk())
            .build()
            .expect("complete")
    }
}

impl TableProperties {
    fn attribute_definitions(&self, used_by: &[&KeyElement]) -> Vec<ddb::AttributeDefinition> {
        let used = |name: &str| used_by.iter().any(|key| key.attribute_name == name);
        (self.attribute_definitions.iter().filter(|a| used(&a.attribute_name)))
            .map(|a| {
                ddb::AttributeDefinition::builder()
                    .attribute_name(&a.attribute_name)
                    .attribute_type(ddb::ScalarAttributeType::from(a.attribute_type.as_str()))
                    .build()
                    .expect("complete")
            })
            .collect()
    }

    fn all_keys(&self) -> Vec<&KeyElement> {
        let indexes = self.local_secondary_indexes.iter().chain(&self.global_secondary_indexes);
        self.key_schema.iter().chain(indexes.flat_map(|i| &i.key_schema)).collect()
    }
}

/// The local name of the template's table `logical_id`: the entry of `tables` (the one list
/// of table names, config.rs) whose name ends in the logical id in kebab case without
/// "Table" (`ApiKeysTable` → `…api-keys`).
pub fn table_name<'a>(logical_id: &str, tables: &'a TableNames) -> anyhow::Result<&'a str> {
    let stem = logical_id.strip_suffix("Table").unwrap_or(logical_id);
    let mut kebab = String::new();
    for (i, c) in stem.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            kebab.push('-');
        }
        kebab.push(c.to_ascii_lowercase());
    }
    let bare = TableNames::with_prefix("");
    let position = bare.all().iter().position(|(_, name)| *name == kebab);
    position.map(|i| tables.all()[i].1).with_context(|| {
        format!("the template's table {logical_id} has no name in career_core::config::TableNames ({kebab})")
    })
}

/// Makes the template's tables that do not exist yet, and the global indexes that tables kept
/// from an older version lack. Returns the names it created, and each table's `Ref` and
/// attributes by logical id.
pub async fn create_tables(
    template: &Template,
    dynamodb: &DynamoDb,
    tables: &TableNames,
) -> anyhow::Result<(Vec<String>, Vec<(String, Physical)>)> {
    let existing = existing_tables(dynamodb).await?;
    let (mut created, mut physical) = (Vec::new(), Vec::new());
    let no_parameters = Resolver::default();
    for table in template.resources_of("AWS::DynamoDB::Table") {
        let name = table_name(table.logical_id, tables)?;
        let properties = table.properties.cloned().unwrap_or_default();
        let properties = no_parameters.resolve(&Value::Mapping(properties))?;
        let properties: TableProperties = serde_yaml::from_value(properties)
            .with_context(|| format!("the template's table {} (template/src/tables.rs)", table.logical_id))?;
        let kept = existing.iter().any(|n| n == name)
            && !replaced(dynamodb, name, &properties, table.update_replace_policy == Some("Retain")).await?;
        if kept {
            add_missing_global_indexes(dynamodb, name, &properties).await?;
            add_missing_stream(dynamodb, name, &properties).await?;
        } else {
            create_table(dynamodb, name, &properties).await?;
            created.push(name.to_owned());
        }
        let described = dynamodb.describe_table().table_name(name).send().await.context("describing a table")?;
        let mut attributes =
            HashMap::from([("Arn".to_owned(), format!("arn:aws:dynamodb:{}:{ACCOUNT}:table/{name}", crate::REGION))]);
        if let Some(stream) = described.table.and_then(|t| t.latest_stream_arn) {
            attributes.insert("StreamArn".to_owned(), stream);
        }
        physical.push((table.logical_id.to_owned(), Physical { reference: name.to_owned(), attributes }));
    }
    Ok((created, physical))
}

/// The names of every table, page after page (a page holds at most 100).
async fn existing_tables(dynamodb: &DynamoDb) -> anyhow::Result<Vec<String>> {
    let (mut names, mut after) = (Vec::new(), None);
    loop {
        let page = dynamodb.list_tables().set_exclusive_start_table_name(after).send().await;
        let page = page.context("listing tables")?;
        names.extend(page.table_names.unwrap_or_default());
        after = page.last_evaluated_table_name;
        if after.is_none() {
            return Ok(names);
        }
    }
}

/// Whether a table kept from an older version had to go, as CloudFormation replaces a table
/// whose key schema or local indexes changed: the old one is deleted (the template's
/// `UpdateReplacePolicy`, `Delete` unless said) and the caller makes the new one. A table the
/// template retains is an error: on AWS the new table would get a new name beside it.
async fn replaced(dynamodb: &DynamoDb, name: &str, table: &TableProperties, retained: bool) -> anyhow::Result<bool> {
    let described = dynamodb.describe_table().table_name(name).send().await;
    let described = described.with_context(|| format!("describing table {name}"))?.table;
    let described = described.with_context(|| format!("table {name} has no description"))?;
    let keys = |schema: &[ddb::KeySchemaElement]| -> Vec<(String, String)> {
        schema.iter().map(|k| (k.attribute_name.clone(), k.key_type.as_str().to_owned())).collect()
    };
    let wanted: Vec<ddb::KeySchemaElement> = table.key_schema.iter().map(KeyElement::sdk).collect();
    let local = |mut names: Vec<String>| {
        names.sort();
        names
    };
    let local_now = local(described.local_secondary_indexes().iter().filter_map(|i| i.index_name.clone()).collect());
    let local_wanted = local(table.local_secondary_indexes.iter().map(|i| i.index_name.clone()).collect());
    if keys(described.key_schema()) == keys(&wanted) && local_now == local_wanted {
        return Ok(false);
    }
    if retained {
        bail!(
            "table {name}: the template changes its key or local indexes, which replaces it, and retains the old one"
        );
    }
    eprintln!("==> table {name}: its key or local indexes changed; replaced, as CloudFormation replaces it");
    dynamodb.delete_table().table_name(name).send().await.with_context(|| format!("deleting table {name}"))?;
    Ok(true)
}

async fn create_table(dynamodb: &DynamoDb, name: &str, table: &TableProperties) -> anyhow::Result<()> {
    let request = dynamodb
        .create_table()
        .table_name(name)
        .billing_mode(ddb::BillingMode::from(table.billing_mode.as_deref().unwrap_or("PROVISIONED")))
        .set_key_schema(Some(table.key_schema.iter().map(KeyElement::sdk).collect()))
        .set_attribute_definitions(Some(table.attribute_definitions(&table.all_keys())))
        .set_local_secondary_indexes(
            Some(table.local_secondary_indexes.iter().map(Index::local).collect()).filter(|i: &Vec<_>| !i.is_empty()),
        )
        .set_global_secondary_indexes(
            Some(table.global_secondary_indexes.iter().map(Index::global).collect()).filter(|i: &Vec<_>| !i.is_empty()),
        )
        .set_stream_specification(table.stream_specification.as_ref().map(StreamSpecification::sdk));
    match request.send().await {
        Ok(_) => {}
        // Made since the tables were listed: by an attempt of this very call that DynamoDB
        // answered after the SDK's attempt limit (a busy machine), whose retry then finds it,
        // or by another creator at the same moment. Either way the table now exists.
        Err(err) if err.as_service_error().is_some_and(|e| e.is_resource_in_use_exception()) => {}
        Err(err) => return Err(err).with_context(|| format!("creating table {name}")),
    }
    if let Some(ttl) = &table.time_to_live_specification {
        let specification = ddb::TimeToLiveSpecification::builder()
            .attribute_name(&ttl.attribute_name)
            .enabled(ttl.enabled)
            .build()
            .expect("complete");
        (dynamodb.update_time_to_live().table_name(name).time_to_live_specification(specification).send().await)
            .with_context(|| format!("enabling TTL on {name}"))?;
    }
    Ok(())
}

/// Turns on the stream the template gives a table kept from a version without it (the
/// webhooks and deliveries tables got theirs for the operational events).
async fn add_missing_stream(dynamodb: &DynamoDb, name: &str, table: &TableProperties) -> anyhow::Result<()> {
    let Some(stream) = &table.stream_specification else { return Ok(()) };
    let described = dynamodb.describe_table().table_name(name).send().await;
    let described = described.with_context(|| format!("describing table {name}"))?;
    if described.table.and_then(|t| t.stream_specification).is_some_and(|s| s.stream_enabled) {
        return Ok(());
    }
    let update = dynamodb.update_table().table_name(name).stream_specification(stream.sdk());
    update.send().await.with_context(|| format!("turning on the stream of {name}"))?;
    Ok(())
}

async fn add_missing_global_indexes(dynamodb: &DynamoDb, name: &str, table: &TableProperties) -> anyhow::Result<()> {
    if table.global_secondary_indexes.is_empty() {
        return Ok(());
    }
    let described = dynamodb.describe_table().table_name(name).send().await;
    let described = described.with_context(|| format!("describing table {name}"))?;
    let present: Vec<String> = (described.table.and_then(|t| t.global_secondary_indexes).unwrap_or_default())
        .into_iter()
        .filter_map(|index| index.index_name)
        .collect();
    for index in table.global_secondary_indexes.iter().filter(|i| !present.contains(&i.index_name)) {
        let create = ddb::CreateGlobalSecondaryIndexAction::builder()
            .index_name(&index.index_name)
            .set_key_schema(Some(index.keys()))
            .projection(index.projection.sdk())
            .build()
            .expect("complete");
        dynamodb
            .update_table()
            .table_name(name)
            .set_attribute_definitions(Some(table.attribute_definitions(&index.key_schema.iter().collect::<Vec<_>>())))
            .global_secondary_index_updates(ddb::GlobalSecondaryIndexUpdate::builder().create(create).build())
            .send()
            .await
            .with_context(|| format!("adding index {} to {name}", index.index_name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_of_the_template_has_a_name_in_the_one_list() {
        let names = TableNames::with_prefix("s-");
        let template = Template::shipped();
        let mut named: Vec<&str> = template
            .resources_of("AWS::DynamoDB::Table")
            .map(|table| table_name(table.logical_id, &names).unwrap())
            .collect();
        named.sort_unstable();
        let mut all: Vec<&str> = names.all().iter().map(|(_, name)| *name).collect();
        all.sort_unstable();
        assert_eq!(named, all);
    }

    #[test]
    fn every_table_of_the_template_is_one_the_local_stack_can_make() {
        for table in Template::shipped().resources_of("AWS::DynamoDB::Table") {
            let properties = Value::Mapping(table.properties.cloned().unwrap_or_default());
            let parsed = serde_yaml::from_value::<TableProperties>(Resolver::default().resolve(&properties).unwrap());
            assert!(parsed.is_ok(), "{}: {:?}", table.logical_id, parsed.err());
        }
    }
}
