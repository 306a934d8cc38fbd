//! Update and condition expressions with generated placeholders. Every attribute name is
//! written as `#nN` and every value as `:vN`, numbered as they are added, so no expression is
//! assembled from text by hand, a reserved word (`status`, `url`, `body`) needs no care, and
//! no placeholder is declared that the expression does not use (which DynamoDB refuses).
//! Queries' key conditions, filters and projections, and reads' projections, are built the
//! same way ([`KeyQuery`], [`Projection`]).

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::get_item::builders::GetItemFluentBuilder;
use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::builders::{DeleteBuilder, KeysAndAttributesBuilder, PutBuilder, UpdateBuilder};
use aws_sdk_dynamodb::types::AttributeValue;

/// A condition on the item as it is before the write.
#[derive(Clone, Debug)]
pub(crate) enum Condition {
    Exists(String),
    Absent(String),
    Equals(String, AttributeValue),
    Below(String, AttributeValue),
    Above(String, AttributeValue),
    All(Vec<Condition>),
    Any(Vec<Condition>),
}

impl Condition {
    /// The item exists and has the attribute `name`.
    pub fn exists(name: impl Into<String>) -> Self {
        Condition::Exists(name.into())
    }

    /// The item does not exist, or has no attribute `name`.
    pub fn absent(name: impl Into<String>) -> Self {
        Condition::Absent(name.into())
    }

    pub fn equals(name: impl Into<String>, value: AttributeValue) -> Self {
        Condition::Equals(name.into(), value)
    }

    /// The attribute `name` is less than `value`.
    pub fn below(name: impl Into<String>, value: AttributeValue) -> Self {
        Condition::Below(name.into(), value)
    }

    /// The attribute `name` is greater than `value`.
    pub fn above(name: impl Into<String>, value: AttributeValue) -> Self {
        Condition::Above(name.into(), value)
    }

    pub fn and(self, other: Condition) -> Self {
        match self {
            Condition::All(mut all) => {
                all.push(other);
                Condition::All(all)
            }
            single => Condition::All(vec![single, other]),
        }
    }

    pub fn or(self, other: Condition) -> Self {
        match self {
            Condition::Any(mut any) => {
                any.push(other);
                Condition::Any(any)
            }
            single => Condition::Any(vec![single, other]),
        }
    }
}

/// An update expression (`SET`, `REMOVE` and `ADD` clauses), its condition, and the
/// placeholders both use.
#[derive(Debug, Default)]
pub(crate) struct Expression {
    set: Vec<String>,
    remove: Vec<String>,
    add: Vec<String>,
    condition: Option<String>,
    placeholders: Placeholders,
}

impl Expression {
    pub fn new() -> Self {
        Self::default()
    }

    /// `SET name = value`.
    pub fn set(mut self, name: impl Into<String>, value: AttributeValue) -> Self {
        let (name, value) = (self.placeholders.name(name), self.placeholders.value(value));
        self.set.push(format!("{name} = {value}"));
        self
    }

    /// `SET name = value` unless the item has `name` already (a first time is kept).
    pub fn set_if_absent(self, name: impl Into<String>, value: AttributeValue) -> Self {
        let name = name.into();
        self.set_from(name.clone(), name, value)
    }

    /// `SET name` to the attribute `source` if the item has it, else to `fallback`.
    pub fn set_from(mut self, name: impl Into<String>, source: impl Into<String>, fallback: AttributeValue) -> Self {
        let (name, source) = (self.placeholders.name(name), self.placeholders.name(source));
        let fallback = self.placeholders.value(fallback);
        self.set.push(format!("{name} = if_not_exists({source}, {fallback})"));
        self
    }

    /// `ADD name by`: a number attribute grows by `by` (from zero if the item has none).
    pub fn add(mut self, name: impl Into<String>, by: i64) -> Self {
        let (name, by) = (self.placeholders.name(name), self.placeholders.value(AttributeValue::N(by.to_string())));
        self.add.push(format!("{name} {by}"));
        self
    }

    /// `REMOVE name`.
    pub fn remove(mut self, name: impl Into<String>) -> Self {
        let name = self.placeholders.name(name);
        self.remove.push(name);
        self
    }

    /// The write applies only while `condition` holds.
    pub fn when(mut self, condition: Condition) -> Self {
        self.condition = Some(self.placeholders.condition(condition));
        self
    }

    /// The update expression's text (`None` when it changes nothing: a condition alone).
    fn update_text(&self) -> Option<String> {
        let clauses = [("SET", &self.set), ("REMOVE", &self.remove), ("ADD", &self.add)];
        let text: Vec<String> = clauses
            .iter()
            .filter(|(_, parts)| !parts.is_empty())
            .map(|(keyword, parts)| format!("{keyword} {}", parts.join(", ")))
            .collect();
        (!text.is_empty()).then(|| text.join(" "))
    }
}

/// A query's key condition (one partition, and a range of its sort key), its filter and its
/// projection, and the placeholders they use.
#[derive(Clone, Debug)]
pub(crate) struct KeyQuery {
    key: String,
    filter: Option<String>,
    projection: Option<String>,
    placeholders: Placeholders,
}

impl KeyQuery {
    /// The items of the partition `name = value`.
    pub fn partition(name: impl Into<String>, value: AttributeValue) -> Self {
        let mut placeholders = Placeholders::default();
        let key = format!("{} = {}", placeholders.name(name), placeholders.value(value));
        KeyQuery { key, filter: None, projection: None, placeholders }
    }

    /// Those whose sort key `name` is below `value`.
    pub fn sort_below(mut self, name: impl Into<String>, value: AttributeValue) -> Self {
        let (name, value) = (self.placeholders.name(name), self.placeholders.value(value));
        self.key = format!("{} AND {name} < {value}", self.key);
        self
    }

    /// Those whose sort key `name` is in `[low, high]`.
    pub fn sort_between(mut self, name: impl Into<String>, low: AttributeValue, high: AttributeValue) -> Self {
        let name = self.placeholders.name(name);
        let (low, high) = (self.placeholders.value(low), self.placeholders.value(high));
        self.key = format!("{} AND {name} BETWEEN {low} AND {high}", self.key);
        self
    }

    /// Only the items that `condition` keeps come back (a filter: what is read costs the same).
    pub fn filter(mut self, condition: Condition) -> Self {
        self.filter = Some(self.placeholders.condition(condition));
        self
    }

    /// Only the attributes `names` come back.
    pub fn project(mut self, names: &[&str]) -> Self {
        self.projection = Some(self.placeholders.projection(names));
        self
    }
}

/// The attributes a read returns, and the placeholders that name them.
#[derive(Debug)]
pub(crate) struct Projection {
    text: String,
    names: Names,
}

impl Projection {
    /// Only the attributes `names`.
    pub fn of(names: &[&str]) -> Self {
        let mut placeholders = Placeholders::default();
        let text = placeholders.projection(names);
        Projection { text, names: placeholders.names }
    }
}

/// Placeholder to attribute name, and placeholder to value, as a request declares them.
type Names = HashMap<String, String>;
type Values = HashMap<String, AttributeValue>;

/// The placeholders of one request: a name used twice keeps its first placeholder.
#[derive(Clone, Debug, Default)]
struct Placeholders {
    names: Names,
    values: Values,
}

impl Placeholders {
    fn name(&mut self, name: impl Into<String>) -> String {
        let name = name.into();
        if let Some((placeholder, _)) = self.names.iter().find(|(_, known)| **known == name) {
            return placeholder.clone();
        }
        let placeholder = format!("#n{}", self.names.len());
        self.names.insert(placeholder.clone(), name);
        placeholder
    }

    fn value(&mut self, value: AttributeValue) -> String {
        let placeholder = format!(":v{}", self.values.len());
        self.values.insert(placeholder.clone(), value);
        placeholder
    }

    fn condition(&mut self, condition: Condition) -> String {
        match condition {
            Condition::Exists(name) => format!("attribute_exists({})", self.name(name)),
            Condition::Absent(name) => format!("attribute_not_exists({})", self.name(name)),
            Condition::Equals(name, value) => format!("{} = {}", self.name(name), self.value(value)),
            Condition::Below(name, value) => format!("{} < {}", self.name(name), self.value(value)),
            Condition::Above(name, value) => format!("{} > {}", self.name(name), self.value(value)),
            Condition::All(all) => self.joined(all, " AND "),
            Condition::Any(any) => self.joined(any, " OR "),
        }
    }

    fn projection(&mut self, names: &[&str]) -> String {
        let names: Vec<String> = names.iter().map(|name| self.name(*name)).collect();
        names.join(", ")
    }

    fn joined(&mut self, conditions: Vec<Condition>, operator: &str) -> String {
        let parts: Vec<String> = conditions.into_iter().map(|condition| self.condition(condition)).collect();
        format!("({})", parts.join(operator))
    }

    /// The maps as a request takes them: absent when empty (DynamoDB refuses empty maps).
    fn into_maps(self) -> (Option<Names>, Option<Values>) {
        ((!self.names.is_empty()).then_some(self.names), (!self.values.is_empty()).then_some(self.values))
    }
}

/// A request builder that takes an update expression and its condition.
pub(crate) trait Updates: Sized {
    fn expression(self, expression: Expression) -> Self;
}

/// A request builder that takes a condition alone (a put or a delete).
pub(crate) trait Conditional: Sized {
    fn condition(self, condition: Condition) -> Self;
}

/// A request builder that takes a query's key condition, filter and projection.
pub(crate) trait Queries: Sized {
    fn key_query(self, query: KeyQuery) -> Self;
}

impl Queries for QueryFluentBuilder {
    fn key_query(self, query: KeyQuery) -> Self {
        let (names, values) = query.placeholders.into_maps();
        self.key_condition_expression(query.key)
            .set_filter_expression(query.filter)
            .set_projection_expression(query.projection)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
    }
}

/// A read's request builder that takes a projection.
pub(crate) trait Projects: Sized {
    fn projection(self, projection: Projection) -> Self;
}

macro_rules! projection_setters {
    ($($builder:ty),+) => {$(
        impl Projects for $builder {
            fn projection(self, projection: Projection) -> Self {
                self.projection_expression(projection.text).set_expression_attribute_names(Some(projection.names))
            }
        }
    )+};
}

projection_setters!(GetItemFluentBuilder, KeysAndAttributesBuilder);

macro_rules! expression_setters {
    (Updates for $($builder:ty),+) => {$(
        impl Updates for $builder {
            fn expression(self, expression: Expression) -> Self {
                let update = expression.update_text();
                let (names, values) = expression.placeholders.into_maps();
                self.set_update_expression(update)
                    .set_condition_expression(expression.condition)
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
            }
        }
    )+};
    (Conditional for $($builder:ty),+) => {$(
        impl Conditional for $builder {
            fn condition(self, condition: Condition) -> Self {
                let mut placeholders = Placeholders::default();
                let condition = placeholders.condition(condition);
                let (names, values) = placeholders.into_maps();
                self.condition_expression(condition)
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
            }
        }
    )+};
}

expression_setters!(Updates for UpdateItemFluentBuilder, UpdateBuilder);
expression_setters!(Conditional for PutItemFluentBuilder, PutBuilder, DeleteBuilder);

#[cfg(test)]
mod tests {
    use super::*;

    fn text(value: &str) -> AttributeValue {
        AttributeValue::S(value.into())
    }

    #[test]
    fn clauses_come_in_order_with_numbered_placeholders() {
        let expression = Expression::new()
            .set("status", text("pending"))
            .remove("succeededAt")
            .add("attempts", 1)
            .set_if_absent("createdAt", text("t"))
            .when(Condition::exists("deliveryId").and(
                Condition::absent("generation").or(Condition::equals("generation", AttributeValue::N("2".into()))),
            ));
        assert_eq!(
            expression.update_text().as_deref(),
            Some("SET #n0 = :v0, #n3 = if_not_exists(#n3, :v2) REMOVE #n1 ADD #n2 :v1")
        );
        assert_eq!(
            expression.condition.as_deref(),
            Some("(attribute_exists(#n4) AND (attribute_not_exists(#n5) OR #n5 = :v3))")
        );
        let (names, values) = expression.placeholders.into_maps();
        let names = names.unwrap();
        assert_eq!(names.len(), 6);
        assert_eq!(names["#n0"], "status");
        assert_eq!(names["#n5"], "generation");
        let values = values.unwrap();
        assert_eq!(values.len(), 4);
        assert_eq!(values[":v1"], AttributeValue::N("1".into()));
        assert_eq!(values[":v3"], AttributeValue::N("2".into()));
    }

    #[test]
    fn a_name_used_twice_keeps_one_placeholder_and_nothing_unused_is_declared() {
        let expression = Expression::new().set_from("activeKey", "readAt", text("alr_1")).remove("readAt");
        assert_eq!(expression.update_text().as_deref(), Some("SET #n0 = if_not_exists(#n1, :v0) REMOVE #n1"));
        assert_eq!(expression.condition, None);
        let (names, values) = expression.placeholders.into_maps();
        assert_eq!(names.unwrap().len(), 2);
        assert_eq!(values.unwrap().len(), 1);

        let only_removes = Expression::new().remove("s1");
        assert_eq!(only_removes.placeholders.into_maps().1, None, "no empty map of values");
    }

    #[test]
    fn a_query_names_its_key_range_filter_and_projection_once_each() {
        let query = KeyQuery::partition("logPartition", text("whk_1#0"))
            .sort_between("deliveryId", text("dlv_a"), text("dlv_b"))
            .filter(Condition::equals("status", text("pending")))
            .project(&["logPartition", "deliveryId"]);
        assert_eq!(query.key, "#n0 = :v0 AND #n1 BETWEEN :v1 AND :v2");
        assert_eq!(query.filter.as_deref(), Some("#n2 = :v3"));
        assert_eq!(query.projection.as_deref(), Some("#n0, #n1"));
        let (names, values) = query.placeholders.into_maps();
        assert_eq!(names.unwrap().len(), 3);
        assert_eq!(values.unwrap()[":v3"], text("pending"));

        let below = KeyQuery::partition("dueShard", text("3")).sort_below("nextAttemptAt", text("t"));
        assert_eq!(below.key, "#n0 = :v0 AND #n1 < :v1");
        assert_eq!((below.filter, below.projection), (None, None));

        let projection = Projection::of(&["generation", "status"]);
        assert_eq!(projection.text, "#n0, #n1");
        assert_eq!(projection.names["#n1"], "status");
    }
}
