//! The HTTP boundary shared by the three API functions, one job per module:
//!
//! - [`error`]: every error the API answers with, and its status, code and headers (the
//!   contract's table, in one place);
//! - [`reply`]: what goes back: a successful [`Reply`], the error body, the JSON response;
//! - [`route`]: the [`Resource`] tables the functions declare, and finding a request's
//!   operation in them;
//! - [`call`]: an admitted request as an operation sees it ([`Call`]);
//! - [`strict_json`]: reading a request body as JSON, strictly;
//! - [`metering`]: how a request is metered against its key's rate limit;
//! - [`front`]: [`Front::serve`], the checks in the contract's order, and the request log;
//! - `trace`: the trace context of a request's headers ([`crate::trace::TraceContext::of_request`]).

mod call;
mod error;
mod front;
mod metering;
mod reply;
mod route;
mod strict_json;
mod trace;

pub use call::Call;
pub use error::ApiError;
pub use front::{serve_without_key, Front};
pub use reply::Reply;
pub use route::Resource;

/// The largest request body an operation reads (contract section 1): a larger one is 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
