//! Which of the two delivery lanes a delivery waits in (contract section 5); the queues
//! themselves are `aws::queue`'s.

crate::text::wire_names! {
    /// Which of the two queues a delivery waits in (its name in log lines).
    pub enum Lane: "lane" {
        /// First attempts to subscriptions that are not failing.
        Main = "main",
        /// Retries, and every delivery to a subscription that is currently failing.
        Retry = "retry",
    }
}
