//! Every error the API answers with, and its status, code and headers: the contract's
//! table (section 1 and each operation's codes), here and nowhere else. `tests/it/openapi.rs`
//! checks it against `openapi.yaml` and the contract independently.

use lambda_http::http::header::{HeaderName, ALLOW, RETRY_AFTER, WWW_AUTHENTICATE};
use lambda_http::http::StatusCode;

use super::MAX_BODY_BYTES;
use crate::alerts::AlertAction;
use crate::credentials::Scope;
use crate::excerpt::Excerpt;
use crate::store::StoreError;

/// Every error the API answers with. `code()` and `status()` are the contract's table.
/// Messages quote client input only through [`Excerpt`].
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("No such resource.")]
    NotFound,
    #[error("Method not allowed; allowed: {allow}.")]
    MethodNotAllowed { allow: String },
    #[error("A valid API key is required: send 'Authorization: Bearer <key>'.")]
    Unauthorized,
    #[error("The API key lacks the scope '{0}'.")]
    Forbidden(Scope),
    #[error("Rate limit exceeded; retry in {retry_after} seconds.")]
    RateLimited { retry_after: u64 },
    #[error("The request body exceeds {MAX_BODY_BYTES} bytes.")]
    BodyTooLarge,
    #[error("{0}")]
    InvalidJson(&'static str),
    #[error("Send the body as application/json.")]
    UnsupportedMediaType,
    #[error("The cursor is not valid for this list.")]
    InvalidCursor,
    #[error("The query parameter 'id' is required.")]
    AlertMissingId,
    #[error("The action must be one of: {}.", AlertAction::names())]
    AlertInvalidAction,
    #[error("No alert with id '{}'.", Excerpt(.0))]
    AlertNotFound(String),
    #[error("Send at least one known preference with a boolean value.")]
    NoPreferencesProvided,
    #[error(
        "'{}' is not a known preference; send at least one of {} with a boolean value.",
        Excerpt(.0),
        crate::preferences::PREFERENCE_FLAGS.join(", ")
    )]
    NoKnownPreference(String),
    #[error("The preference '{0}' must be a boolean.")]
    InvalidPreference(&'static str),
    #[error("'{}' is not a known preference.", Excerpt(.0))]
    UnknownPreference(String),
    #[error("'events' and one of 'url' and 'destination' are required.")]
    WebhookMissingRequiredFields,
    #[error("Invalid url: {0}.")]
    WebhookInvalidUrl(crate::webhooks::InvalidUrl),
    #[error("Invalid destination: {0}.")]
    WebhookInvalidDestination(crate::webhooks::destination::InvalidDestination),
    #[error("Invalid events: {0}.")]
    WebhookInvalidEvents(crate::webhooks::InvalidEvents),
    #[error("A user can have at most {} webhook subscriptions.", crate::webhooks::MAX_SUBSCRIPTIONS_PER_USER)]
    WebhookLimitExceeded,
    #[error("The query parameter 'id' is required.")]
    WebhookMissingSubscriptionId,
    #[error("No webhook subscription with id '{}'.", Excerpt(.0))]
    WebhookNotFound(String),
    #[error("Invalid grace period: {0}.")]
    WebhookInvalidGracePeriod(crate::webhooks::rotation::InvalidGracePeriod),
    #[error("The status must be one of: pending, succeeded, failed, skipped, held, cancelled.")]
    WebhookInvalidStatus,
    #[error("The query parameter 'id' is required.")]
    WebhookMissingDeliveryId,
    #[error("No webhook delivery with id '{}'.", Excerpt(.0))]
    WebhookDeliveryNotFound(String),
    #[error("Invalid recovery window: {0}.")]
    WebhookInvalidRecoverWindow(crate::delivery::recovery::InvalidWindow),
    #[error("The subscription is disabled; enable it before recovering its deliveries.")]
    WebhookSubscriptionDisabled,
    #[error("Invalid replay: {0}.")]
    WebhookInvalidReplay(crate::delivery::replay::InvalidReplay),
    #[error("Invalid cancel: {0}.")]
    WebhookInvalidCancel(crate::delivery::cancel::InvalidCancel),
    #[error(
        "Nothing to change: send at least one of url, destination, events, enabled, asymmetricSigning, traceContext, maxDeliveriesPerSecond, whileDisabled and identityToken."
    )]
    WebhookNoChanges,
    #[error(
        "'{}' cannot be changed; send only url, destination, events, enabled, asymmetricSigning, traceContext, maxDeliveriesPerSecond, whileDisabled and identityToken.",
        Excerpt(.0)
    )]
    WebhookUnknownField(String),
    #[error("'enabled' must be true or false.")]
    WebhookInvalidEnabled,
    #[error("'asymmetricSigning' must be true or false.")]
    WebhookInvalidAsymmetricSigning,
    #[error("The subscription has no signing keys: turn asymmetricSigning on first.")]
    WebhookAsymmetricSigningOff,
    #[error("'traceContext' must be true or false.")]
    WebhookInvalidTraceContext,
    #[error("'maxDeliveriesPerSecond' must be an integer from 1 to 10000, or null.")]
    WebhookInvalidRateLimit,
    #[error("'whileDisabled' must be \"hold\" or \"skip\".")]
    WebhookInvalidWhileDisabled,
    #[error("Invalid identityToken: {0}.")]
    WebhookInvalidIdentityToken(crate::webhooks::identity_token::InvalidIdentityToken),
    #[error("Internal error.")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        ApiError::Internal(Box::new(err))
    }
}

impl From<crate::store::sealing::SealError> for ApiError {
    fn from(err: crate::store::sealing::SealError) -> Self {
        ApiError::Internal(Box::new(err))
    }
}

impl From<crate::aws::outbox::OutboxError> for ApiError {
    fn from(err: crate::aws::outbox::OutboxError) -> Self {
        ApiError::Internal(Box::new(err))
    }
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            NotFound | AlertNotFound(_) | WebhookNotFound(_) | WebhookDeliveryNotFound(_) => StatusCode::NOT_FOUND,
            MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Unauthorized => StatusCode::UNAUTHORIZED,
            Forbidden(_) => StatusCode::FORBIDDEN,
            RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            InvalidJson(_)
            | UnsupportedMediaType
            | InvalidCursor
            | AlertMissingId
            | AlertInvalidAction
            | NoPreferencesProvided
            | NoKnownPreference(_)
            | InvalidPreference(_)
            | UnknownPreference(_)
            | WebhookMissingRequiredFields
            | WebhookInvalidUrl(_)
            | WebhookInvalidDestination(_)
            | WebhookInvalidEvents(_)
            | WebhookLimitExceeded
            | WebhookMissingSubscriptionId
            | WebhookInvalidGracePeriod(_)
            | WebhookInvalidStatus
            | WebhookMissingDeliveryId
            | WebhookInvalidRecoverWindow(_)
            | WebhookSubscriptionDisabled
            | WebhookInvalidReplay(_)
            | WebhookInvalidCancel(_)
            | WebhookNoChanges
            | WebhookUnknownField(_)
            | WebhookInvalidEnabled
            | WebhookInvalidAsymmetricSigning
            | WebhookAsymmetricSigningOff
            | WebhookInvalidTraceContext
            | WebhookInvalidRateLimit
            | WebhookInvalidWhileDisabled
            | WebhookInvalidIdentityToken(_) => StatusCode::BAD_REQUEST,
        }
    }

    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            NotFound => "not_found",
            MethodNotAllowed { .. } => "method_not_allowed",
            Unauthorized => "auth.unauthorized",
            Forbidden(_) => "auth.forbidden",
            RateLimited { .. } => "rate_limited",
            BodyTooLarge => "request.body_too_large",
            InvalidJson(_) => "request.invalid_json",
            UnsupportedMediaType => "request.unsupported_media_type",
            InvalidCursor => "request.invalid_cursor",
            AlertMissingId => "alerts.missing_id",
            AlertInvalidAction => "alerts.invalid_action",
            AlertNotFound(_) => "alerts.not_found",
            NoPreferencesProvided | NoKnownPreference(_) => "data_sharing.no_preferences_provided",
            InvalidPreference(_) => "data_sharing.invalid_preference",
            UnknownPreference(_) => "data_sharing.unknown_preference",
            WebhookMissingRequiredFields => "webhooks.missing_required_fields",
            WebhookInvalidUrl(_) => "webhooks.invalid_url",
            WebhookInvalidDestination(_) => "webhooks.invalid_destination",
            WebhookInvalidEvents(_) => "webhooks.invalid_events",
            WebhookLimitExceeded => "webhooks.limit_exceeded",
            WebhookMissingSubscriptionId => "webhooks.missing_subscription_id",
            WebhookNotFound(_) => "webhooks.not_found",
            WebhookInvalidGracePeriod(_) => "webhooks.invalid_grace_period",
            WebhookInvalidStatus => "webhooks.invalid_status",
            WebhookMissingDeliveryId => "webhooks.missing_delivery_id",
            WebhookDeliveryNotFound(_) => "webhooks.delivery_not_found",
            WebhookInvalidRecoverWindow(_) => "webhooks.invalid_recover_window",
            WebhookSubscriptionDisabled => "webhooks.subscription_disabled",
            WebhookInvalidReplay(_) => "webhooks.invalid_replay",
            WebhookInvalidCancel(_) => "webhooks.invalid_cancel",
            WebhookNoChanges => "webhooks.no_changes",
            WebhookUnknownField(_) => "webhooks.unknown_field",
            WebhookInvalidEnabled => "webhooks.invalid_enabled",
            WebhookInvalidAsymmetricSigning => "webhooks.invalid_asymmetric_signing",
            WebhookAsymmetricSigningOff => "webhooks.asymmetric_signing_off",
            WebhookInvalidTraceContext => "webhooks.invalid_trace_context",
            WebhookInvalidRateLimit => "webhooks.invalid_rate_limit",
            WebhookInvalidWhileDisabled => "webhooks.invalid_while_disabled",
            WebhookInvalidIdentityToken(_) => "webhooks.invalid_identity_token",
            Internal(_) => "internal_error",
        }
    }

    /// The headers the error's status asks for (RFC 9110 `Allow`, RFC 6750
    /// `WWW-Authenticate`, `Retry-After`).
    pub(super) fn headers(&self) -> Vec<(HeaderName, String)> {
        match self {
            ApiError::MethodNotAllowed { allow } => vec![(ALLOW, allow.clone())],
            ApiError::Unauthorized => vec![(WWW_AUTHENTICATE, r#"Bearer realm="api""#.into())],
            ApiError::Forbidden(scope) => {
                vec![(WWW_AUTHENTICATE, format!(r#"Bearer realm="api", error="insufficient_scope", scope="{scope}""#))]
            }
            ApiError::RateLimited { retry_after } => vec![(RETRY_AFTER, retry_after.to_string())],
            _ => Vec::new(),
        }
    }
}

impl From<crate::webhooks::InvalidChanges> for ApiError {
    fn from(err: crate::webhooks::InvalidChanges) -> Self {
        use crate::webhooks::InvalidChanges::*;
        match err {
            NoChanges => ApiError::WebhookNoChanges,
            UnknownField(name) => ApiError::WebhookUnknownField(name),
            InvalidEnabled => ApiError::WebhookInvalidEnabled,
            AsymmetricSigning(_) => ApiError::WebhookInvalidAsymmetricSigning,
            TraceContext(_) => ApiError::WebhookInvalidTraceContext,
            DeliveryRate(_) => ApiError::WebhookInvalidRateLimit,
            WhileDisabled(_) => ApiError::WebhookInvalidWhileDisabled,
            IdentityToken(invalid) => ApiError::WebhookInvalidIdentityToken(invalid),
            Url(invalid) => ApiError::WebhookInvalidUrl(invalid),
            Destination(invalid) => ApiError::WebhookInvalidDestination(invalid),
            Events(invalid) => ApiError::WebhookInvalidEvents(invalid),
        }
    }
}

impl From<crate::webhooks::InvalidDeliveryRate> for ApiError {
    fn from(_: crate::webhooks::InvalidDeliveryRate) -> Self {
        ApiError::WebhookInvalidRateLimit
    }
}

impl From<crate::webhooks::InvalidWhileDisabled> for ApiError {
    fn from(_: crate::webhooks::InvalidWhileDisabled) -> Self {
        ApiError::WebhookInvalidWhileDisabled
    }
}

impl From<crate::webhooks::identity_token::InvalidIdentityToken> for ApiError {
    fn from(invalid: crate::webhooks::identity_token::InvalidIdentityToken) -> Self {
        ApiError::WebhookInvalidIdentityToken(invalid)
    }
}

impl From<crate::webhooks::InvalidAsymmetricSigning> for ApiError {
    fn from(_: crate::webhooks::InvalidAsymmetricSigning) -> Self {
        ApiError::WebhookInvalidAsymmetricSigning
    }
}

impl From<crate::webhooks::InvalidTraceContext> for ApiError {
    fn from(_: crate::webhooks::InvalidTraceContext) -> Self {
        ApiError::WebhookInvalidTraceContext
    }
}

impl From<crate::preferences::PreferenceError> for ApiError {
    fn from(err: crate::preferences::PreferenceError) -> Self {
        use crate::preferences::PreferenceError::*;
        match err {
            NoPreferencesProvided => ApiError::NoPreferencesProvided,
            NoKnownPreference(name) => ApiError::NoKnownPreference(name),
            InvalidPreference(name) => ApiError::InvalidPreference(name),
            UnknownPreference(name) => ApiError::UnknownPreference(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_carries_the_headers_its_status_asks_for() {
        let cases: [(ApiError, &[(HeaderName, &str)]); 6] = [
            (ApiError::MethodNotAllowed { allow: "GET, PATCH".into() }, &[(ALLOW, "GET, PATCH")]),
            (ApiError::Unauthorized, &[(WWW_AUTHENTICATE, r#"Bearer realm="api""#)]),
            (
                ApiError::Forbidden(Scope::WriteWebhooks),
                &[(WWW_AUTHENTICATE, r#"Bearer realm="api", error="insufficient_scope", scope="write:webhooks""#)],
            ),
            (ApiError::RateLimited { retry_after: 7 }, &[(RETRY_AFTER, "7")]),
            (ApiError::NotFound, &[]),
            (ApiError::BodyTooLarge, &[]),
        ];
        for (error, expected) in cases {
            let headers = error.headers();
            let headers: Vec<(HeaderName, &str)> =
                headers.iter().map(|(name, value)| (name.clone(), value.as_str())).collect();
            assert_eq!(headers, expected, "{error:?}");
        }
    }

    #[test]
    fn messages_quote_client_input_through_an_excerpt() {
        let long_id = format!("alr_{}", "x".repeat(500));
        let message = ApiError::AlertNotFound(long_id.clone()).to_string();
        assert!(message.len() < 200, "{message}");
        assert!(!message.contains(&long_id));
        assert_eq!(ApiError::BodyTooLarge.to_string(), "The request body exceeds 65536 bytes.");
    }

    #[test]
    fn an_internal_error_says_nothing_of_its_cause() {
        let error = ApiError::Internal(Box::new(std::io::Error::other("table career-alerts: connection refused")));
        assert_eq!((error.status(), error.code()), (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"));
        assert_eq!(error.to_string(), "Internal error.");
    }
}
