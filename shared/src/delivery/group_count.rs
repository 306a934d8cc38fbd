//! A main-lane message group's id, and the setting of how many message groups of the main lane one subscription may spread over
//! (`DELIVERY_GROUPS_PER_SUBSCRIPTION`, contract section 18), parsed once. A leaf, so that the
//! settings (`config`) hold it without reaching the delivery decisions (`groups`).

use crate::ids::{DeliveryId, SubscriptionId};

/// How many message groups a subscription's first attempts spread over: 1 to [`Groups::MAX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Groups(u8);

impl Groups {
    pub const ONE: Groups = Groups(1);
    /// The most the setting allows. SQS allows 300 receives a second per message group in
    /// high-throughput mode and no limit on groups; this bounds one subscription's share of
    /// the lane's consumers when its receiver keeps up.
    pub const MAX: u8 = 100;

    /// `Some` for 1 to [`Groups::MAX`].
    pub fn new(count: u8) -> Option<Self> {
        (1..=Self::MAX).contains(&count).then_some(Groups(count))
    }

    pub fn get(self) -> u8 {
        self.0
    }

    /// The group of `delivery` among these: from its id, so every copy of it gets the same one.
    pub fn index_of(self, delivery: &DeliveryId) -> u8 {
        // FNV-1a: the id's bytes are a hash already; any spread of them will do.
        let hash = delivery
            .as_str()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3));
        (hash % u64::from(self.0)) as u8
    }
}

/// A main-lane message group: `whk_…#k`.
pub fn group_id(subscription: &SubscriptionId, index: u8) -> String {
    format!("{}#{index}", subscription.as_str())
}

/// The index of a received message's group: what follows the last `#`, or 0 for a group
/// named by the subscription alone (a message queued before there were several).
pub fn index_in(group_id: &str) -> u8 {
    group_id.rsplit_once('#').and_then(|(_, index)| index.parse().ok()).unwrap_or(0)
}
