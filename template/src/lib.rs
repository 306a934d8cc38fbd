//! `career-template`: template.yaml as the stacks read it, the one declaration of the
//! infrastructure. The local stack (local-aws) creates the tables and queues it declares, gives
//! each function the role and event sources it declares, and resolves `Ref`, `Fn::GetAtt` and
//! `Fn::Sub` (short or long form) to the local resources, as CloudFormation resolves them to
//! the deployed ones. What careerctl needs of it against AWS lives here too, so that it does
//! not link the emulator: the tables (tables), the stream filters (filters), the record of a
//! stream batch given up on (on_failure) and the event Lambda builds from stream records
//! (stream_event).

pub mod filters;
pub mod on_failure;
pub mod stream_event;
pub mod tables;

use std::collections::HashMap;

use anyhow::{anyhow, bail, Context};
use serde_yaml::value::Tag;
use serde_yaml::{Mapping, Value};

/// The template the workspace ships, as `make deploy` deploys it.
pub const TEMPLATE: &str = include_str!("../../template.yaml");

/// The account moto answers as; the local ARNs and the pseudo parameter carry it.
pub const ACCOUNT: &str = "123456789012";

/// The region the local stack's clients and ARNs name.
pub const REGION: &str = "us-east-1";

/// The template's functions, by logical id.
pub mod function {
    pub const ALERTS: &str = "AlertsFunction";
    pub const DATA_SHARING: &str = "DataSharingFunction";
    pub const WEBHOOKS: &str = "WebhooksFunction";
    pub const FANOUT: &str = "FanoutFunction";
    pub const DELIVER: &str = "DeliverFunction";
    pub const SWEEP: &str = "SweepFunction";
}

#[derive(Clone)]
pub struct Template {
    document: Mapping,
}

/// A resource of the template: its logical id, type, properties (unresolved) and what
/// becomes of the old resource when an update replaces it.
pub struct Resource<'a> {
    pub logical_id: &'a str,
    pub kind: &'a str,
    pub properties: Option<&'a Mapping>,
    /// `UpdateReplacePolicy`: CloudFormation deletes a replaced resource unless it is `Retain`.
    pub update_replace_policy: Option<&'a str>,
}

impl<'a> Resource<'a> {
    pub fn property(&self, name: &str) -> Option<&'a Value> {
        self.properties?.get(name)
    }
}

impl Template {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let document: Value = serde_yaml::from_str(text).context("template.yaml is not YAML")?;
        match document {
            Value::Mapping(document) => Ok(Template { document }),
            _ => bail!("template.yaml is not a mapping"),
        }
    }

    /// The template the workspace ships.
    pub fn shipped() -> Self {
        Self::parse(TEMPLATE).expect("the shipped template parses (its unit test below)")
    }

    /// Every resource, in the template's order.
    pub fn resources(&self) -> impl Iterator<Item = Resource<'_>> {
        let resources = self.document.get("Resources").and_then(Value::as_mapping);
        resources.into_iter().flatten().filter_map(|(id, resource)| {
            Some(Resource {
                logical_id: id.as_str()?,
                kind: resource.get("Type")?.as_str()?,
                properties: resource.get("Properties").and_then(Value::as_mapping),
                update_replace_policy: resource.get("UpdateReplacePolicy").and_then(Value::as_str),
            })
        })
    }

    pub fn resources_of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = Resource<'a>> + 'a {
        self.resources().filter(move |r| r.kind == kind)
    }

    pub fn resource(&self, logical_id: &str) -> anyhow::Result<Resource<'_>> {
        self.resources().find(|r| r.logical_id == logical_id).with_context(|| format!("no resource {logical_id}"))
    }

    /// Each parameter's default, as a deploy without overrides takes it.
    pub fn parameter_defaults(&self) -> HashMap<String, String> {
        let parameters = self.document.get("Parameters").and_then(Value::as_mapping);
        parameters
            .into_iter()
            .flatten()
            .filter_map(|(name, parameter)| Some((name.as_str()?.to_owned(), scalar(parameter.get("Default")?)?)))
            .collect()
    }

    /// Whether the template declares the parameter `name`.
    pub fn is_parameter(&self, name: &str) -> bool {
        self.document.get("Parameters").and_then(|parameters| parameters.get(name)).is_some()
    }

    /// This template with `value` as the parameter `name`'s default, as a deploy's parameter
    /// override would set it (a scale model's fewer consumers, say).
    pub fn with_parameter_default(mut self, name: &str, value: impl ToString) -> anyhow::Result<Self> {
        let parameter = self
            .document
            .get_mut("Parameters")
            .and_then(|parameters| parameters.get_mut(name))
            .and_then(Value::as_mapping_mut)
            .with_context(|| format!("no parameter {name}"))?;
        parameter.insert("Default".into(), Value::String(value.to_string()));
        Ok(self)
    }

    /// The `Properties` of `function`'s events of type `kind`, by event name, as the template
    /// writes them (unresolved).
    pub fn events(&self, function: &str, kind: &str) -> anyhow::Result<Vec<(&str, &Value)>> {
        let resource = self.resource(function)?;
        let events =
            resource.properties.and_then(|p| p.get("Events")).and_then(Value::as_mapping).into_iter().flatten();
        let mut declared = Vec::new();
        for (name, event) in events.filter(|(_, event)| event.get("Type").and_then(Value::as_str) == Some(kind)) {
            let name = name.as_str().unwrap_or_default();
            let properties =
                event.get("Properties").with_context(|| format!("{function}'s event {name}: no Properties"))?;
            declared.push((name, properties));
        }
        Ok(declared)
    }

    /// The input each of `function`'s schedules (`ScheduleV2` events) passes it, as JSON
    /// (`null` for a schedule without one), in the template's order.
    pub fn schedule_inputs(&self, function: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        let mut inputs = Vec::new();
        for (name, properties) in self.events(function, "ScheduleV2")? {
            let input = match properties.get("Input").and_then(Value::as_str) {
                Some(text) => serde_json::from_str(text).with_context(|| format!("{function}'s schedule {name}"))?,
                None => serde_json::Value::Null,
            };
            inputs.push(input);
        }
        Ok(inputs)
    }

    /// The global function properties (`Globals.Function`).
    pub fn function_globals(&self) -> Option<&Mapping> {
        self.document.get("Globals")?.get("Function")?.as_mapping()
    }

    /// The timeout of the function `function` (its own, or the global one).
    pub fn function_timeout(&self, function: &str) -> anyhow::Result<std::time::Duration> {
        let own = self.resource(function)?.property("Timeout").cloned();
        let timeout = own.or_else(|| self.function_globals()?.get("Timeout").cloned());
        let timeout = timeout.with_context(|| format!("{function} has no Timeout, nor a global one"))?;
        let seconds = scalar(&timeout).and_then(|text| text.parse().ok());
        Ok(std::time::Duration::from_secs(seconds.with_context(|| format!("{function}'s Timeout: {timeout:?}"))?))
    }
}

/// A scalar's text, as CloudFormation passes numbers and booleans on: as strings.
pub fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// What the template's intrinsic functions resolve to in one stack: its name, parameters and
/// the physical resources made so far.
#[derive(Clone, Debug, Default)]
pub struct Resolver {
    pub stack_name: String,
    pub region: String,
    pub parameters: HashMap<String, String>,
    /// logical id → what `Ref` gives and each `Fn::GetAtt` attribute.
    pub resources: HashMap<String, Physical>,
}

#[derive(Clone, Debug, Default)]
pub struct Physical {
    pub reference: String,
    pub attributes: HashMap<String, String>,
}

impl Resolver {
    /// Resolves every intrinsic function in `value`.
    pub fn resolve(&self, value: &Value) -> anyhow::Result<Value> {
        Ok(match value {
            Value::Tagged(tagged) => self.intrinsic(&tagged.tag, &tagged.value)?,
            Value::Mapping(map) if map.len() == 1 => {
                let (key, inner) = map.iter().next().expect("one entry");
                match key.as_str().and_then(long_form_tag) {
                    Some(tag) => self.intrinsic(&Tag::new(tag), inner)?,
                    None => Value::Mapping(self.resolve_map(map)?),
                }
            }
            Value::Mapping(map) => Value::Mapping(self.resolve_map(map)?),
            Value::Sequence(items) => Value::Sequence(items.iter().map(|v| self.resolve(v)).collect::<Result<_, _>>()?),
            other => other.clone(),
        })
    }

    /// Resolves `value` to text (a string, number or boolean).
    pub fn text(&self, value: &Value) -> anyhow::Result<String> {
        let resolved = self.resolve(value)?;
        scalar(&resolved).with_context(|| format!("expected a scalar, found {resolved:?}"))
    }

    fn resolve_map(&self, map: &Mapping) -> anyhow::Result<Mapping> {
        map.iter().map(|(k, v)| Ok((k.clone(), self.resolve(v)?))).collect()
    }

    fn intrinsic(&self, tag: &Tag, argument: &Value) -> anyhow::Result<Value> {
        let name = tag.to_string();
        let name = name.trim_start_matches('!');
        Ok(Value::String(match name {
            "Ref" => self.reference(argument.as_str().context("Ref takes a name")?)?,
            "GetAtt" => {
                let (id, attribute) = match argument {
                    Value::String(dotted) => dotted.split_once('.').context("GetAtt takes Resource.Attribute")?,
                    Value::Sequence(parts) if parts.len() == 2 => (
                        parts[0].as_str().context("GetAtt's resource")?,
                        parts[1].as_str().context("GetAtt's attribute")?,
                    ),
                    _ => bail!("GetAtt takes Resource.Attribute"),
                };
                self.attribute(id, attribute)?
            }
            "Sub" => match argument {
                Value::String(text) => self.substitute(text, &HashMap::new())?,
                Value::Sequence(parts) if parts.len() == 2 => {
                    let text = parts[0].as_str().context("Sub's text")?;
                    let variables = parts[1].as_mapping().context("Sub's variables")?;
                    let variables = variables
                        .iter()
                        .map(|(k, v)| Ok((k.as_str().context("a variable name")?.to_owned(), self.text(v)?)))
                        .collect::<anyhow::Result<_>>()?;
                    self.substitute(text, &variables)?
                }
                _ => bail!("Sub takes a string or [string, variables]"),
            },
            other => bail!("the local stack does not resolve the intrinsic function {other}"),
        }))
    }

    fn reference(&self, name: &str) -> anyhow::Result<String> {
        match name {
            "AWS::StackName" => Ok(self.stack_name.clone()),
            "AWS::Region" => Ok(self.region.clone()),
            "AWS::AccountId" => Ok(ACCOUNT.to_owned()),
            "AWS::Partition" => Ok("aws".to_owned()),
            "AWS::URLSuffix" => Ok("amazonaws.com".to_owned()),
            _ => self
                .parameters
                .get(name)
                .or_else(|| self.resources.get(name).map(|r| &r.reference))
                .cloned()
                .ok_or_else(|| anyhow!("Ref {name}: no such parameter, or the resource is not created locally")),
        }
    }

    fn attribute(&self, id: &str, attribute: &str) -> anyhow::Result<String> {
        let resource =
            self.resources.get(id).with_context(|| format!("GetAtt {id}.{attribute}: not created locally"))?;
        resource
            .attributes
            .get(attribute)
            .cloned()
            .with_context(|| format!("GetAtt {id}.{attribute}: no such attribute"))
    }

    fn substitute(&self, text: &str, variables: &HashMap<String, String>) -> anyhow::Result<String> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find('}').context("Sub: unclosed ${")? + start;
            let name = &rest[start + 2..end];
            if let Some(literal) = name.strip_prefix('!') {
                out.push_str("${");
                out.push_str(literal);
                out.push('}');
            } else if let Some(value) = variables.get(name) {
                out.push_str(value);
            } else if let Some((id, attribute)) = name.split_once('.').filter(|_| !name.starts_with("AWS::")) {
                out.push_str(&self.attribute(id, attribute)?);
            } else {
                out.push_str(&self.reference(name)?);
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

fn long_form_tag(key: &str) -> Option<&'static str> {
    match key {
        "Ref" => Some("Ref"),
        "Fn::GetAtt" => Some("GetAtt"),
        "Fn::Sub" => Some("Sub"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_default_is_overridden_and_only_a_declared_one() {
        let changed = Template::shipped().with_parameter_default("DeliveryRetryMaxConcurrency", 3).unwrap();
        let mut expected = Template::shipped().parameter_defaults();
        expected.insert("DeliveryRetryMaxConcurrency".into(), "3".into());
        assert_eq!(changed.parameter_defaults(), expected, "that default and no other");
        assert!(Template::shipped().with_parameter_default("NoSuchParameter", 3).is_err());
    }

    fn resolver() -> Resolver {
        let table = Physical {
            reference: "s-deliveries".into(),
            attributes: [("Arn".to_owned(), "arn:aws:dynamodb:r:1:table/s-deliveries".to_owned())].into(),
        };
        Resolver {
            stack_name: "s".into(),
            region: "us-east-1".into(),
            parameters: [("Max".to_owned(), "9".to_owned())].into(),
            resources: [("DeliveriesTable".to_owned(), table)].into(),
        }
    }

    #[test]
    fn short_and_long_forms_resolve_alike() {
        let r = resolver();
        let short: Value = serde_yaml::from_str("[!Ref DeliveriesTable, !GetAtt DeliveriesTable.Arn, !Ref Max, !Sub '${AWS::StackName}-x.fifo', !Sub '${DeliveriesTable.Arn}/index/byDue']").unwrap();
        let long: Value = serde_yaml::from_str("[{Ref: DeliveriesTable}, {'Fn::GetAtt': [DeliveriesTable, Arn]}, {Ref: Max}, {'Fn::Sub': '${AWS::StackName}-x.fifo'}, {'Fn::Sub': ['${T}/index/byDue', {T: {'Fn::GetAtt': [DeliveriesTable, Arn]}}]}]").unwrap();
        let expected: Value = serde_yaml::from_str(
            "[s-deliveries, 'arn:aws:dynamodb:r:1:table/s-deliveries', '9', s-x.fifo, 'arn:aws:dynamodb:r:1:table/s-deliveries/index/byDue']",
        )
        .unwrap();
        assert_eq!(r.resolve(&short).unwrap(), expected);
        assert_eq!(r.resolve(&long).unwrap(), expected);
    }

    #[test]
    fn what_cannot_be_resolved_is_an_error_naming_it() {
        let r = resolver();
        let unknown: Value = serde_yaml::from_str("!GetAtt HttpApi.Arn").unwrap();
        assert!(format!("{:#}", r.resolve(&unknown).unwrap_err()).contains("HttpApi"));
        let literal: Value = serde_yaml::from_str("!Sub '${!Literal}'").unwrap();
        assert_eq!(r.text(&literal).unwrap(), "${Literal}");
    }

    #[test]
    fn the_shipped_template_lists_its_resources_and_defaults() {
        let template = Template::shipped();
        assert!(template.resources_of("AWS::DynamoDB::Table").count() >= 8);
        assert_eq!(template.parameter_defaults().get("DeliveryMaxAttempts").map(String::as_str), Some("9"));
    }
}
