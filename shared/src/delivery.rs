//! Webhook delivery (contract section 5, "Delivery").
