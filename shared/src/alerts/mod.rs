//! Career alerts (contract section 3): the alert object, the list filters and the actions.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::ids::AlertId;

/// The alert object as the API returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    pub id: AlertId,
    pub category: Category,
    pub severity: Severity,
    pub title: String,
    pub message: String,
    pub created_at: Timestamp,
    pub read: bool,
    pub read_at: Option<Timestamp>,
    pub dismissed: bool,
    pub dismissed_at: Option<Timestamp>,
}

crate::text::wire_names! {
    pub enum Category: "category" {
        CareerHealth = "career_health",
        RiskSignal = "risk_signal",
    }
}

crate::text::wire_names! {
    pub enum Severity: "severity" {
        Info = "info",
        Warning = "warning",
        Critical = "critical",
    }
}

/// One of the two independent flags of an alert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlertFlag {
    Read,
    Dismissed,
}

impl AlertFlag {
    pub fn other(self) -> AlertFlag {
        match self {
            AlertFlag::Read => AlertFlag::Dismissed,
            AlertFlag::Dismissed => AlertFlag::Read,
        }
    }
}

crate::text::wire_names! {
    /// What PATCH may do to an alert: set or clear one flag. The one list of the actions.
    pub enum AlertAction: "action" {
        Read = "read",
        Dismiss = "dismiss",
        Unread = "unread",
        Undismiss = "undismiss",
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct InvalidAction;

impl AlertAction {
    /// The action a PATCH body's `action` names (a JSON string).
    pub fn from_json(value: &serde_json::Value) -> Result<Self, InvalidAction> {
        value.as_str().and_then(Self::parse).ok_or(InvalidAction)
    }

    pub fn flag(self) -> AlertFlag {
        match self {
            AlertAction::Read | AlertAction::Unread => AlertFlag::Read,
            AlertAction::Dismiss | AlertAction::Undismiss => AlertFlag::Dismissed,
        }
    }

    /// The flag's value after the action.
    pub fn sets(self) -> bool {
        matches!(self, AlertAction::Read | AlertAction::Dismiss)
    }
}

/// Which alerts a list returns; each is served by its own sparse index, so a list costs
/// in proportion to what it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListFilter {
    /// Neither read nor dismissed (the default).
    Active,
    /// `includeRead=true`: not dismissed.
    NotDismissed,
    /// `includeDismissed=true`: not read.
    NotRead,
    /// Both: every alert.
    All,
}

impl ListFilter {
    pub fn new(include_read: bool, include_dismissed: bool) -> Self {
        match (include_read, include_dismissed) {
            (false, false) => ListFilter::Active,
            (true, false) => ListFilter::NotDismissed,
            (false, true) => ListFilter::NotRead,
            (true, true) => ListFilter::All,
        }
    }

    /// The list's name, bound into cursors so a cursor only continues the list it came from.
    pub fn name(self) -> &'static str {
        match self {
            ListFilter::Active => "alerts/active",
            ListFilter::NotDismissed => "alerts/notDismissed",
            ListFilter::NotRead => "alerts/notRead",
            ListFilter::All => "alerts/all",
        }
    }
}

/// A boolean query parameter: `true`/`1` mean true, anything else (or nothing) false.
pub fn query_flag(value: Option<&str>) -> bool {
    matches!(value, Some("true" | "1"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn actions_parse_only_the_four_literals() {
        assert_eq!(AlertAction::from_json(&json!("read")), Ok(AlertAction::Read));
        assert_eq!(AlertAction::from_json(&json!("dismiss")), Ok(AlertAction::Dismiss));
        assert_eq!(AlertAction::from_json(&json!("unread")), Ok(AlertAction::Unread));
        assert_eq!(AlertAction::from_json(&json!("undismiss")), Ok(AlertAction::Undismiss));
        for bad in [json!("READ"), json!("dismissed"), json!(""), json!(1), json!(null), json!(["read"])] {
            assert_eq!(AlertAction::from_json(&bad), Err(InvalidAction), "{bad}");
        }
        assert_eq!(AlertAction::Undismiss.flag(), AlertFlag::Dismissed);
        assert!(!AlertAction::Undismiss.sets());
    }

    #[test]
    fn filters_follow_the_two_query_flags() {
        assert_eq!(ListFilter::new(false, false), ListFilter::Active);
        assert_eq!(ListFilter::new(true, false), ListFilter::NotDismissed);
        assert_eq!(ListFilter::new(false, true), ListFilter::NotRead);
        assert_eq!(ListFilter::new(true, true), ListFilter::All);
    }

    #[test]
    fn query_flags_accept_true_and_1_only() {
        assert!(query_flag(Some("true")));
        assert!(query_flag(Some("1")));
        for other in [None, Some("false"), Some("0"), Some("yes"), Some("TRUE"), Some("")] {
            assert!(!query_flag(other), "{other:?}");
        }
    }

    #[test]
    fn alert_serializes_in_camel_case_with_nulls() {
        let alert = Alert {
            id: AlertId::generate(),
            category: Category::RiskSignal,
            severity: Severity::Critical,
            title: "t".into(),
            message: "m".into(),
            created_at: "2026-11-21T08:00:00.000Z".parse().unwrap(),
            read: false,
            read_at: None,
            dismissed: true,
            dismissed_at: Some("2026-11-21T09:00:00.000Z".parse().unwrap()),
        };
        let value = serde_json::to_value(&alert).unwrap();
        assert_eq!(value["category"], "risk_signal");
        assert_eq!(value["readAt"], serde_json::Value::Null);
        assert_eq!(value["dismissedAt"], "2026-11-21T09:00:00.000Z");
        assert_eq!(value["createdAt"], "2026-11-21T08:00:00.000Z");
    }
}
