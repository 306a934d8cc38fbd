//! Why a subscription was disabled: a leaf of its own, since the operational events
//! (crate::events) name it too and the subscription (the parent module) names the event kinds.

crate::text::wire_names! {
    /// Why a subscription was disabled (contract section 12, "What the receiver says").
    pub enum DisabledReason: "disabled reason" {
        /// Its deliveries kept failing for longer than the disable-after setting (section 9).
        Failing = "failing",
        /// The receiver answered `410 Gone` (section 12).
        Gone = "gone",
        /// Its owner paused it (section 13).
        Manual = "manual",
    }
}
