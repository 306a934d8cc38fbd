//! What a disabled subscription does with the deliveries whose turn comes (contract section
//! 20): a leaf of its own, as the delivery plan reads it beside the subscription's health.

use serde_json::Value;

crate::text::wire_names! {
    /// `whileDisabled` (contract section 20).
    #[derive(Default)]
    pub enum WhileDisabled: "whileDisabled" {
        /// Its deliveries are kept `held`, unsent, until it is enabled, which releases them.
        #[default]
        Hold = "hold",
        /// Its deliveries end `skipped`, or `failed` if sent before (sections 9 and 13).
        Skip = "skip",
    }
}

/// `whileDisabled` on create and PATCH: one of its names, nothing else.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("whileDisabled must be \"hold\" or \"skip\"")]
pub struct InvalidWhileDisabled;

impl WhileDisabled {
    /// The `whileDisabled` of a request's body.
    pub fn of(value: &Value) -> Result<Self, InvalidWhileDisabled> {
        value.as_str().and_then(Self::parse).ok_or(InvalidWhileDisabled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn while_disabled_is_hold_or_skip_and_holds_by_default() {
        assert_eq!(WhileDisabled::default(), WhileDisabled::Hold);
        assert_eq!(WhileDisabled::of(&json!("hold")), Ok(WhileDisabled::Hold));
        assert_eq!(WhileDisabled::of(&json!("skip")), Ok(WhileDisabled::Skip));
        for bad in [json!(null), json!("Hold"), json!("drop"), json!(true), json!(["skip"]), json!({})] {
            assert_eq!(WhileDisabled::of(&bad), Err(InvalidWhileDisabled), "{bad}");
        }
    }
}
