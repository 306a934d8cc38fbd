//! The event catalog (contract section 13): every kind a delivery can carry, with its
//! description, the JSON Schema (2020-12) of its delivery body and an example body.
//!
//! `catalog.json` is the one definition. It is compiled in, and openapi.yaml's
//! `webhooks` section must say the same (tests/it/openapi.rs compares the two, and checks
//! each example against its schema), so the API and the document cannot disagree.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::EventKind;

const CATALOG: &str = include_str!("catalog.json");

/// One kind as `GET /api/v1/webhooks/event-types` lists it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventType {
    pub name: EventKind,
    pub description: String,
    /// Whether a subscription can list it (`webhook.ping` is sent on request instead).
    pub subscribable: bool,
    pub schema: Value,
    pub example: Value,
}

/// An entry of the file: what is not known elsewhere (subscribable is `EventKind`'s fact).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: EventKind,
    description: String,
    schema: Value,
    example: Value,
}

/// Every kind, subscribable ones first, in the file's order. Read once per instance.
pub fn event_types() -> &'static [EventType] {
    static TYPES: OnceLock<Vec<EventType>> = OnceLock::new();
    TYPES.get_or_init(|| {
        // A unit test reads the same file, so a malformed one never gets this far.
        let entries: Vec<Entry> = serde_json::from_str(CATALOG).expect("catalog.json is a list of kinds");
        entries
            .into_iter()
            .map(|entry| EventType {
                subscribable: entry.name.is_subscribable(),
                name: entry.name,
                description: entry.description,
                schema: entry.schema,
                example: entry.example,
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Event;

    #[test]
    fn the_catalog_lists_every_kind_once_subscribable_ones_first() {
        let names: Vec<EventKind> = event_types().iter().map(|t| t.name).collect();
        let mut expected = EventKind::SUBSCRIBABLE.to_vec();
        expected.push(EventKind::WebhookPing);
        assert_eq!(names, expected);
        let subscribable: Vec<bool> = event_types().iter().map(|t| t.subscribable).collect();
        assert_eq!(subscribable, [true, true, true, true, true, true, false]);
    }

    /// Each example is a body the service could send for its kind (the schemas are checked
    /// against the examples with a JSON Schema validator in tests/it/openapi.rs).
    #[test]
    fn each_example_is_an_event_of_its_kind() {
        for event_type in event_types() {
            let event: Event = serde_json::from_value(event_type.example.clone())
                .unwrap_or_else(|e| panic!("{}: the example is no event: {e}", event_type.name.as_str()));
            assert_eq!(event.kind(), event_type.name);
            assert_eq!(serde_json::to_value(&event).unwrap(), event_type.example, "in the service's own form");
            assert_eq!(event_type.schema["properties"]["type"]["const"], event_type.name.as_str());
            assert!(!event_type.description.is_empty());
        }
    }
}
