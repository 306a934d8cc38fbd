//! Data-sharing preferences (contract section 4).

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::clock::Timestamp;

/// Every known preference flag. Adding a flag is a one-line change here.
pub const PREFERENCE_FLAGS: &[&str] = &["shareAssessmentResults", "shareProfileData", "shareActivityData"];

/// A user's preferences: the GET and PUT response. The store maps them from their item.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preferences {
    /// Every known flag, in [`PREFERENCE_FLAGS`]' order; a flag never set is off.
    #[serde(rename = "preferences", serialize_with = "flags_as_object")]
    pub flags: Vec<(&'static str, bool)>,
    /// When a flag last changed; `None` before the first change.
    pub updated_at: Option<Timestamp>,
}

fn flags_as_object<S: Serializer>(flags: &[(&'static str, bool)], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(flags.iter().copied())
}

/// A validated PUT body: at least one known flag with a boolean value, nothing else.
#[derive(Debug, PartialEq, Eq)]
pub struct PreferenceUpdate(Vec<(&'static str, bool)>);

#[derive(Debug, PartialEq, Eq)]
pub enum PreferenceError {
    /// No field at all that could be a flag.
    NoPreferencesProvided,
    /// No known flag with a boolean value, and this unknown field (the first): most often a
    /// misspelt flag, which the answer names.
    NoKnownPreference(String),
    InvalidPreference(&'static str),
    UnknownPreference(String),
}

impl PreferenceUpdate {
    pub fn parse(body: &Value) -> Result<Self, PreferenceError> {
        let empty = Map::new();
        let fields = body.as_object().unwrap_or(&empty);
        let mut valid = Vec::new();
        let mut not_boolean = None;
        let mut unknown = None;
        for (name, value) in fields {
            match (known_flag(name), value) {
                (Some(flag), Value::Bool(on)) => valid.push((flag, *on)),
                (Some(flag), _) => not_boolean = not_boolean.or(Some(flag)),
                (None, _) => unknown = unknown.or_else(|| Some(name.clone())),
            }
        }
        if valid.is_empty() {
            return Err(unknown.map_or(PreferenceError::NoPreferencesProvided, PreferenceError::NoKnownPreference));
        }
        if let Some(flag) = not_boolean {
            return Err(PreferenceError::InvalidPreference(flag));
        }
        if let Some(name) = unknown {
            return Err(PreferenceError::UnknownPreference(name));
        }
        Ok(PreferenceUpdate(valid))
    }

    pub fn flags(&self) -> &[(&'static str, bool)] {
        &self.0
    }
}

fn known_flag(name: &str) -> Option<&'static str> {
    PREFERENCE_FLAGS.iter().copied().find(|flag| *flag == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn preferences_are_shown_as_an_object_of_flags_in_their_order() {
        let preferences = Preferences {
            flags: PREFERENCE_FLAGS.iter().map(|flag| (*flag, *flag == "shareProfileData")).collect(),
            updated_at: None,
        };
        assert_eq!(
            serde_json::to_string(&preferences).unwrap(),
            r#"{"preferences":{"shareAssessmentResults":false,"shareProfileData":true,"shareActivityData":false},"updatedAt":null}"#
        );
    }

    #[test]
    fn applies_known_boolean_flags() {
        let update = PreferenceUpdate::parse(&json!({"shareProfileData": true, "shareActivityData": false})).unwrap();
        assert_eq!(update.flags(), [("shareProfileData", true), ("shareActivityData", false)]);
    }

    #[test]
    fn nothing_usable_is_no_preferences_provided() {
        for body in [json!({}), json!([]), json!(null), json!("x"), json!({"shareProfileData": "yes"})] {
            assert_eq!(PreferenceUpdate::parse(&body), Err(PreferenceError::NoPreferencesProvided), "{body}");
        }
        for body in
            [json!({"shareAssesmentResults": true}), json!({"shareProfileData": 1, "shareAssesmentResults": true})]
        {
            let named = PreferenceError::NoKnownPreference("shareAssesmentResults".into());
            assert_eq!(PreferenceUpdate::parse(&body), Err(named), "{body}");
        }
    }

    #[test]
    fn a_bad_field_next_to_a_valid_one_refuses_the_whole_update() {
        assert_eq!(
            PreferenceUpdate::parse(&json!({"shareProfileData": true, "shareActivityData": 1})),
            Err(PreferenceError::InvalidPreference("shareActivityData"))
        );
        assert_eq!(
            PreferenceUpdate::parse(&json!({"shareProfileData": true, "shareEverything": true})),
            Err(PreferenceError::UnknownPreference("shareEverything".into()))
        );
    }
}
