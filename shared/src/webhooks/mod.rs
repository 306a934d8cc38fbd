//! Webhook subscriptions (contract sections 5, 9, 12, 13, 16, 17, 19 and 21): URL and event
//! validation, what an update may change, secrets, the subscription, where it delivers and
//! its health, and the subscription object the API shows.

pub mod destination;
pub mod disabled_reason;
pub mod health;
pub mod identity_token;
pub mod netguard;
pub mod rotation;
pub mod signing;
pub mod while_disabled;

use std::net::IpAddr;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::{Host, Url};

use crate::clock::Timestamp;
use crate::events::EventKind;
use crate::excerpt::Excerpt;
use crate::ids::{SubscriptionId, UserId};
use crate::random;
use crate::webhooks::rotation::PublicKeys;
use crate::webhooks::signing::PublicKey;
use destination::{AwsDestination, DestinationChange, DestinationFields, InvalidDestination, RoleArn};
pub use disabled_reason::DisabledReason;
use identity_token::{IdentityToken, InvalidIdentityToken};
pub use netguard::UrlPolicy;
pub use while_disabled::{InvalidWhileDisabled, WhileDisabled};

pub const MAX_URL_LEN: usize = 2048;
pub const MAX_SUBSCRIPTIONS_PER_USER: u32 = 25;
const SECRET_PREFIX: &str = "whsec_";
/// Length of the standard base64 (padded) text of [`random::TOKEN_BYTES`] bytes.
const SECRET_TEXT_LEN: usize = 44;

/// A delivery target that passed the create-time rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookUrl(String);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidUrl {
    #[error("url must be a string")]
    NotAString,
    #[error("url must be at most {MAX_URL_LEN} characters")]
    TooLong,
    #[error("url must be at most {MAX_URL_LEN} characters once normalised (it has {0})")]
    TooLongOnceNormalised(usize),
    #[error("url is not an absolute URL")]
    Unparsable,
    #[error("url must use https")]
    NotHttps,
    #[error("url must have a host")]
    NoHost,
    #[error("url must not contain user information")]
    UserInfo,
    #[error("url must not point at localhost or a private, loopback, link-local or reserved address")]
    PrivateTarget,
}

impl WebhookUrl {
    /// The URL as sent must have at most [`MAX_URL_LEN`] characters, and so must its WHATWG
    /// normalisation (what is stored). `policy` says whether `http` is taken and which
    /// private networks are.
    pub fn parse(value: &Value, policy: &UrlPolicy) -> Result<Self, InvalidUrl> {
        let text = value.as_str().ok_or(InvalidUrl::NotAString)?;
        if text.chars().count() > MAX_URL_LEN {
            return Err(InvalidUrl::TooLong);
        }
        let url = Url::parse(text).map_err(|_| InvalidUrl::Unparsable)?;
        match url.scheme() {
            "https" => {}
            "http" if policy.allow_http => {}
            _ => return Err(InvalidUrl::NotHttps),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(InvalidUrl::UserInfo);
        }
        let host = url.host().ok_or(InvalidUrl::NoHost)?;
        if is_refused_host(&host, &policy.guard) {
            return Err(InvalidUrl::PrivateTarget);
        }
        // Normalising can lengthen a URL up to ninefold (percent-encoded UTF-8), and the
        // normalised one is what is stored and sent.
        let normalised: String = url.into();
        if normalised.len() > MAX_URL_LEN {
            return Err(InvalidUrl::TooLongOnceNormalised(normalised.len()));
        }
        Ok(WebhookUrl(normalised))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A receiver URL as logs show it: scheme, host, port and path. The query string and the
/// user-info are left out everywhere, as they may carry a credential (`?token=…`).
pub struct LoggedUrl<'a>(pub &'a str);

impl std::fmt::Display for LoggedUrl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Ok(url) = Url::parse(self.0) else { return f.write_str("(unparsable URL)") };
        write!(f, "{}://{}", url.scheme(), url.host_str().unwrap_or_default())?;
        if let Some(port) = url.port() {
            write!(f, ":{port}")?;
        }
        f.write_str(url.path())
    }
}

/// A literal address the guard refuses, or a `localhost` name (RFC 6761: it is loopback)
/// unless the guard lets loopback through. Other names are judged when they are resolved,
/// at send.
fn is_refused_host(host: &Host<&str>, guard: &netguard::Guard) -> bool {
    match host {
        Host::Domain(name) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            let localhost = name == "localhost" || name.ends_with(".localhost");
            name.is_empty() || (localhost && guard.refuses(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)))
        }
        Host::Ipv4(ip) => guard.refuses(IpAddr::V4(*ip)),
        Host::Ipv6(ip) => guard.refuses(IpAddr::V6(*ip)),
    }
}

/// A non-empty list of known event kinds, duplicates collapsed, in the order first given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventKinds(Vec<EventKind>);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEvents {
    #[error("events must be a non-empty array")]
    NotANonEmptyArray,
    #[error("unknown event kind {} (GET /api/v1/webhooks/event-types lists them)", Excerpt(.0))]
    Unknown(String),
    /// A kind the catalog lists with `"subscribable": false` (`webhook.ping`, sent on request).
    #[error("event kind \"{0}\" is not subscribable (GET /api/v1/webhooks/event-types says which are)")]
    NotSubscribable(EventKind),
}

impl EventKinds {
    pub fn parse(value: &Value) -> Result<Self, InvalidEvents> {
        let items = value.as_array().filter(|items| !items.is_empty()).ok_or(InvalidEvents::NotANonEmptyArray)?;
        let mut kinds = Vec::new();
        for item in items {
            let kind =
                item.as_str().and_then(EventKind::parse).ok_or_else(|| InvalidEvents::Unknown(item.to_string()))?;
            if !kind.is_subscribable() {
                return Err(InvalidEvents::NotSubscribable(kind));
            }
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        Ok(EventKinds(kinds))
    }

    pub fn kinds(&self) -> &[EventKind] {
        &self.0
    }
}

/// `asymmetricSigning` on create and PATCH (contract section 16): a boolean, nothing else.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("asymmetricSigning must be true or false")]
pub struct InvalidAsymmetricSigning;

/// The `asymmetricSigning` of a create request: absent is off.
pub fn asymmetric_signing(value: Option<&Value>) -> Result<bool, InvalidAsymmetricSigning> {
    value.map_or(Ok(false), |value| value.as_bool().ok_or(InvalidAsymmetricSigning))
}

/// `traceContext` on create and PATCH (contract section 19): a boolean, nothing else.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("traceContext must be true or false")]
pub struct InvalidTraceContext;

/// The `traceContext` of a create request: absent is off.
pub fn trace_context(value: Option<&Value>) -> Result<bool, InvalidTraceContext> {
    value.map_or(Ok(false), |value| value.as_bool().ok_or(InvalidTraceContext))
}

/// `maxDeliveriesPerSecond` (contract section 18): at most this many attempts to the
/// subscription start in any one-second window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeliveryRate(u16);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("maxDeliveriesPerSecond must be an integer from 1 to 10000, or null")]
pub struct InvalidDeliveryRate;

impl DeliveryRate {
    pub const MAX: u16 = 10_000;

    /// An integer from 1 to [`DeliveryRate::MAX`], or `null` for no limit. An integer is
    /// what JSON Schema calls one: `5.0` is 5, as it is to the interface's schema.
    pub fn parse(value: &Value) -> Result<Option<Self>, InvalidDeliveryRate> {
        if value.is_null() {
            return Ok(None);
        }
        let number = value.as_f64().filter(|n| n.fract() == 0.0 && (1.0..=f64::from(Self::MAX)).contains(n));
        number.map(|n| Some(DeliveryRate(n as u16))).ok_or(InvalidDeliveryRate)
    }

    pub fn per_second(self) -> u32 {
        u32::from(self.0)
    }
}

/// What an update (PATCH) changes: any of the URL or the AWS destination, the kinds, whether it is enabled, whether
/// it is signed with a key pair as well, whether its deliveries carry trace context, its
/// rate limit (`Some(None)` removes it), what it does while disabled and its identity token
/// (`Some(None)` turns it off).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubscriptionChanges {
    pub url: Option<WebhookUrl>,
    /// Applied to the stored destination, under the same checks as on create (section 17).
    pub destination: Option<DestinationChange>,
    pub events: Option<EventKinds>,
    pub enabled: Option<bool>,
    pub asymmetric_signing: Option<bool>,
    pub trace_context: Option<bool>,
    pub max_deliveries_per_second: Option<Option<DeliveryRate>>,
    pub while_disabled: Option<WhileDisabled>,
    /// Taken only by a subscription with a URL (section 21): the write says so.
    pub identity_token: Option<Option<IdentityToken>>,
}

/// Why an update's body was refused; the API's error enum words each case.
#[derive(Debug, PartialEq, Eq)]
pub enum InvalidChanges {
    NoChanges,
    UnknownField(String),
    InvalidEnabled,
    AsymmetricSigning(InvalidAsymmetricSigning),
    TraceContext(InvalidTraceContext),
    DeliveryRate(InvalidDeliveryRate),
    WhileDisabled(InvalidWhileDisabled),
    IdentityToken(InvalidIdentityToken),
    Url(InvalidUrl),
    Destination(InvalidDestination),
    Events(InvalidEvents),
}

impl SubscriptionChanges {
    pub const FIELDS: [&str; 9] = [
        "url",
        "destination",
        "events",
        "enabled",
        "asymmetricSigning",
        "traceContext",
        "maxDeliveriesPerSecond",
        "whileDisabled",
        "identityToken",
    ];

    /// Reads an update's body in the contract's order (sections 13, 16, 17, 18, 19, 20 and 21):
    /// none of the fields, an unknown field, `enabled`, `asymmetricSigning`, `traceContext`,
    /// `maxDeliveriesPerSecond`, `whileDisabled`, `identityToken`, then `url` or `destination` (both are
    /// invalid) and `events` as on create (`null` is invalid).
    pub fn parse(body: &serde_json::Map<String, Value>, policy: &UrlPolicy) -> Result<Self, InvalidChanges> {
        if !Self::FIELDS.iter().any(|field| body.contains_key(*field)) {
            return Err(InvalidChanges::NoChanges);
        }
        if let Some(unknown) = body.keys().find(|name| !Self::FIELDS.contains(&name.as_str())) {
            return Err(InvalidChanges::UnknownField(unknown.clone()));
        }
        let enabled = match body.get("enabled") {
            Some(value) => Some(value.as_bool().ok_or(InvalidChanges::InvalidEnabled)?),
            None => None,
        };
        let asymmetric_signing = match body.get("asymmetricSigning") {
            Some(value) => Some(asymmetric_signing(Some(value)).map_err(InvalidChanges::AsymmetricSigning)?),
            None => None,
        };
        let trace_context = match body.get("traceContext") {
            Some(value) => Some(trace_context(Some(value)).map_err(InvalidChanges::TraceContext)?),
            None => None,
        };
        let max_deliveries_per_second = match body.get("maxDeliveriesPerSecond") {
            Some(value) => Some(DeliveryRate::parse(value).map_err(InvalidChanges::DeliveryRate)?),
            None => None,
        };
        let while_disabled = match body.get("whileDisabled") {
            Some(value) => Some(WhileDisabled::of(value).map_err(InvalidChanges::WhileDisabled)?),
            None => None,
        };
        let identity_token = match body.get("identityToken") {
            Some(value) => Some(IdentityToken::parse(value).map_err(InvalidChanges::IdentityToken)?),
            None => None,
        };
        if body.contains_key("url") && body.contains_key("destination") {
            return Err(InvalidChanges::Destination(InvalidDestination::WithUrl));
        }
        let url = body.get("url").map(|url| WebhookUrl::parse(url, policy)).transpose();
        let destination = body.get("destination").map(DestinationChange::parse).transpose();
        let events = body.get("events").map(EventKinds::parse).transpose();
        Ok(SubscriptionChanges {
            url: url.map_err(InvalidChanges::Url)?,
            destination: destination.map_err(InvalidChanges::Destination)?,
            events: events.map_err(InvalidChanges::Events)?,
            enabled,
            asymmetric_signing,
            trace_context,
            max_deliveries_per_second,
            while_disabled,
            identity_token,
        })
    }
}

/// A subscription: whose it is, where and what it delivers, its secrets as stored, and its
/// health. The store maps it to and from its item (`store::webhooks`).
#[derive(Clone, Debug, PartialEq)]
pub struct Subscription {
    pub user_id: UserId,
    pub id: SubscriptionId,
    pub target: Target,
    pub events: Vec<EventKind>,
    pub secrets: SecretsAtRest,
    /// The public halves of its Ed25519 keys, while asymmetric signing is on; in clear, as
    /// every read shows them (the private halves are in the sealed secrets).
    pub public_keys: Option<PublicKeys>,
    /// Whether its deliveries carry `traceparent` and `tracestate` (contract section 19).
    pub trace_context: bool,
    pub created_at: Timestamp,
    pub health: Health,
    /// `maxDeliveriesPerSecond` (contract section 18); `None` is no limit.
    pub max_deliveries_per_second: Option<DeliveryRate>,
    /// What becomes of its deliveries while it is disabled (contract section 20).
    pub while_disabled: WhileDisabled,
    /// The audience of the AWS-signed token each attempt carries (contract section 21), on a
    /// subscription with a URL only; `None` is off.
    pub identity_token: Option<IdentityToken>,
    /// Since when its receiver answers fast, while it does: its first attempts then spread
    /// over several groups of the main lane (`delivery::groups`, contract section 18).
    pub fast_since: Option<Timestamp>,
    /// When its receiver last stopped answering fast (an answer, or a send still open, at the
    /// slow mark): it does not spread again for a while after (`delivery::groups::SLOW_MEMORY`).
    pub slow_at: Option<Timestamp>,
    /// When a success last stopped its failure clock (section 15's `recovered`), if ever:
    /// since when it is healthy (section 20's health).
    pub recovered_at: Option<Timestamp>,
    /// While it is disabled for failing and probed (contract section 20), when the next probe
    /// goes; none once probing has ended.
    pub next_probe_at: Option<Timestamp>,
    /// The probes that went since it was disabled, all failed.
    pub probes: u32,
}

/// Where a subscription delivers: over HTTP (sections 5 to 16) or into its owner's AWS
/// account (section 17). Which of the two never changes. In the subscription's item (and
/// its stream images) it is the attribute `url` or the map `destination`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "TargetAttribute", into = "TargetAttribute")]
pub enum Target {
    /// The normalised URL ([`WebhookUrl`]).
    Url(String),
    Aws(AwsDestination),
}

/// [`Target`]'s attribute in an item.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum TargetAttribute {
    Url { url: String },
    Aws { destination: AwsDestination },
}

impl From<TargetAttribute> for Target {
    fn from(attribute: TargetAttribute) -> Self {
        match attribute {
            TargetAttribute::Url { url } => Target::Url(url),
            TargetAttribute::Aws { destination } => Target::Aws(destination),
        }
    }
}

impl From<Target> for TargetAttribute {
    fn from(target: Target) -> Self {
        match target {
            Target::Url(url) => TargetAttribute::Url { url },
            Target::Aws(destination) => TargetAttribute::Aws { destination },
        }
    }
}

impl From<&WebhookUrl> for Target {
    fn from(url: &WebhookUrl) -> Self {
        Target::Url(url.as_str().to_owned())
    }
}

impl Target {
    pub fn url(&self) -> Option<&str> {
        match self {
            Target::Url(url) => Some(url),
            Target::Aws(_) => None,
        }
    }

    pub fn aws(&self) -> Option<&AwsDestination> {
        match self {
            Target::Url(_) => None,
            Target::Aws(aws) => Some(aws),
        }
    }

    /// The receiver as logs and operational events name it: the URL as [`LoggedUrl`] shows
    /// it, or the queue URL or bus ARN (neither carries a credential).
    pub fn logged(&self) -> String {
        match self {
            Target::Url(url) => LoggedUrl(url).to_string(),
            Target::Aws(aws) => aws.destination.target().to_owned(),
        }
    }
}

/// Whether a subscription is sent its deliveries, and how they have been going.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Sent its deliveries, with no failure since the last success.
    Active,
    /// Sent its deliveries, failing since the first failure after the last success: the
    /// failure clock of section 9. Its deliveries go to the retry lane (section 12).
    Failing { since: Timestamp },
    /// Sent nothing until enabled again, which also stops the failure clock; its deliveries
    /// are kept `held` or recorded as `skipped`, as its [`WhileDisabled`] says (sections 9 and
    /// 20). A pause is [`DisabledReason::Manual`].
    Disabled { at: Timestamp, reason: DisabledReason },
}

impl Health {
    pub fn is_enabled(&self) -> bool {
        !matches!(self, Health::Disabled { .. })
    }

    /// When the failure clock started, while it runs.
    pub fn failing_since(&self) -> Option<Timestamp> {
        match self {
            Health::Failing { since } => Some(*since),
            _ => None,
        }
    }
}

/// A subscription's signing secrets as stored.
#[derive(Clone, Debug, PartialEq)]
pub enum SecretsAtRest {
    /// `rotation::SigningSecrets` as `store::sealing::Sealer` sealed them.
    Sealed(SealedSecrets),
    /// A plain-text secret stored before secrets were sealed, until `careerctl webhooks
    /// seal-secrets` (or a rotation) seals it.
    Plain(WebhookSecret),
}

/// Sealed secrets: the standard base64 of a nonce and the AES-256-GCM ciphertext.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedSecrets(pub String);

impl Subscription {
    /// A new subscription, active, created now, without trace context.
    pub fn new(
        user_id: UserId,
        id: SubscriptionId,
        target: Target,
        events: Vec<EventKind>,
        sealed: SealedSecrets,
        public_keys: Option<PublicKeys>,
    ) -> Self {
        Subscription {
            user_id,
            id,
            target,
            events,
            secrets: SecretsAtRest::Sealed(sealed),
            public_keys,
            trace_context: false,
            created_at: Timestamp::now(),
            health: Health::Active,
            max_deliveries_per_second: None,
            while_disabled: WhileDisabled::Hold,
            identity_token: None,
            fast_since: None,
            slow_at: None,
            recovered_at: None,
            next_probe_at: None,
            probes: 0,
        }
    }

    /// Whether a delivery of `kind` is for it now: a kind it lists, or one no subscription
    /// lists (a ping, sent whatever it lists).
    pub fn receives(&self, kind: EventKind) -> bool {
        !EventKind::SUBSCRIBABLE.contains(&kind) || self.events.contains(&kind)
    }

    /// The subscription object the API shows (contract sections 5, 16, 17, 19 and 21; never the
    /// secrets), the previous public key only while it still signs; `sender_role` is the
    /// delivery function's role, which a destination's owner trusts.
    pub fn public(&self, sender_role: Option<&RoleArn>) -> SubscriptionObject {
        let (disabled_at, disabled_reason) = match &self.health {
            Health::Disabled { at, reason } => (Some(*at), Some(*reason)),
            Health::Active | Health::Failing { .. } => (None, None),
        };
        SubscriptionObject {
            id: self.id.clone(),
            url: self.target.url().map(str::to_owned),
            destination: self
                .target
                .aws()
                .map(|aws| DestinationObject { fields: aws.clone().into(), sender_role_arn: sender_role.cloned() }),
            events: self.events.clone(),
            created_at: self.created_at,
            enabled: self.health.is_enabled(),
            disabled_at,
            disabled_reason,
            public_key: self.public_keys.as_ref().map(|keys| keys.current),
            previous_public_key: self
                .public_keys
                .as_ref()
                .and_then(|keys| keys.previous_at(Timestamp::now()))
                .map(|previous| previous.key),
            trace_context: self.trace_context,
            failing_since: self.health.failing_since(),
            max_deliveries_per_second: self.max_deliveries_per_second,
            while_disabled: self.while_disabled,
            identity_token: self.identity_token.clone(),
            next_probe_at: self.next_probe(),
        }
    }

    /// Its probes as its object and its health show them (section 20): only a subscription
    /// disabled for failing is probed.
    pub fn next_probe(&self) -> Option<NextProbe> {
        match &self.health {
            Health::Disabled { reason: DisabledReason::Failing, .. } => Some(NextProbe(self.next_probe_at)),
            Health::Disabled { .. } | Health::Active | Health::Failing { .. } => None,
        }
    }
}

/// The subscription object: a subscription as listed (the secret is never listed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionObject {
    pub id: SubscriptionId,
    /// `null` for a subscription with a destination.
    pub url: Option<String>,
    /// Absent for a subscription with a URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<DestinationObject>,
    pub events: Vec<EventKind>,
    pub created_at: Timestamp,
    pub enabled: bool,
    pub disabled_at: Option<Timestamp>,
    pub disabled_reason: Option<DisabledReason>,
    /// `whpk_…` while asymmetric signing is on, else `null`.
    pub public_key: Option<PublicKey>,
    /// The key the last rotation replaced, during its grace period; else `null`.
    pub previous_public_key: Option<PublicKey>,
    /// Whether deliveries carry `traceparent` and `tracestate` (contract section 19).
    pub trace_context: bool,
    /// While an enabled subscription is failing, since when (contract section 15: the
    /// portal shows it); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<Timestamp>,
    /// `null` when it has no rate limit (contract section 18).
    #[serde(default)]
    pub max_deliveries_per_second: Option<DeliveryRate>,
    /// `hold` or `skip` (contract section 20).
    #[serde(default)]
    pub while_disabled: WhileDisabled,
    /// `{"audience": "…"}` while each attempt carries an identity token (contract section
    /// 21), else `null`.
    #[serde(default)]
    pub identity_token: Option<IdentityToken>,
    /// While it is disabled for failing, when it is next probed (contract section 20), `null`
    /// once probing has ended; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_probe_at: Option<NextProbe>,
}

/// `nextProbeAt` of a subscription disabled for failing: a time, or `null` once probing ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NextProbe(pub Option<Timestamp>);

/// A destination as the subscription object shows it (contract section 17): its fields, the
/// external id among them, and the role its owner's trust policy names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationObject {
    #[serde(flatten)]
    pub fields: DestinationFields,
    pub sender_role_arn: Option<RoleArn>,
}

/// The create response: the subscription and, this once, its secret.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedSubscription {
    #[serde(flatten)]
    pub subscription: SubscriptionObject,
    pub secret: WebhookSecret,
}

/// The answer of an enable (POST enable, PATCH `enabled: true`): the subscription and how many
/// of its held deliveries the call released (contract section 20).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnabledSubscription {
    #[serde(flatten)]
    pub subscription: SubscriptionObject,
    pub released: usize,
}

/// A subscription's signing secret: `whsec_` + the standard base64 (with padding) of 32
/// random bytes, the format Standard Webhooks libraries read. `X-Webhook-Signature` is keyed
/// with the whole text, the Standard Webhooks signature with the 32 bytes.
///
/// Secrets issued before that format (`whsec_` + 43 base64url characters) still parse, so
/// their receivers keep verifying `X-Webhook-Signature` unchanged; their Standard Webhooks key
/// is the 32 bytes they encode. A rotation replaces them with a secret of the new format.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WebhookSecret {
    text: String,
    key: [u8; random::TOKEN_BYTES],
}

impl WebhookSecret {
    pub fn generate() -> Self {
        let key = random::random_bytes::<{ random::TOKEN_BYTES }>();
        WebhookSecret { text: format!("{SECRET_PREFIX}{}", STANDARD.encode(key)), key }
    }

    pub fn parse(text: &str) -> Option<Self> {
        let encoded = text.strip_prefix(SECRET_PREFIX)?;
        let decoded = match encoded.len() {
            SECRET_TEXT_LEN => STANDARD.decode(encoded).ok()?,
            random::TOKEN_TEXT_LEN if random::is_token(text, SECRET_PREFIX) => URL_SAFE_NO_PAD.decode(encoded).ok()?,
            _ => return None,
        };
        Some(WebhookSecret { text: text.to_owned(), key: decoded.try_into().ok()? })
    }

    /// The secret as the receiver knows it (and the key of `X-Webhook-Signature`).
    pub fn expose(&self) -> &str {
        &self.text
    }

    /// The key of the Standard Webhooks signature.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

/// Never prints the secret, so it cannot end up in a log line.
impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

impl TryFrom<String> for WebhookSecret {
    type Error = &'static str;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        WebhookSecret::parse(&text).ok_or("not a webhook secret")
    }
}

impl From<WebhookSecret> for String {
    fn from(secret: WebhookSecret) -> Self {
        secret.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(url: &str) -> Result<WebhookUrl, InvalidUrl> {
        WebhookUrl::parse(&json!(url), &UrlPolicy::default())
    }

    #[test]
    fn accepts_public_https_urls() {
        assert_eq!(
            parse("https://hooks.example.com/career?x=1").unwrap().as_str(),
            "https://hooks.example.com/career?x=1"
        );
        assert!(parse("https://93.184.216.34:8443/hook").is_ok());
    }

    #[test]
    fn refuses_each_broken_rule() {
        assert_eq!(WebhookUrl::parse(&json!(5), &UrlPolicy::default()), Err(InvalidUrl::NotAString));
        assert_eq!(parse(&format!("https://example.com/{}", "a".repeat(2048))), Err(InvalidUrl::TooLong));
        assert_eq!(parse("/relative"), Err(InvalidUrl::Unparsable));
        assert_eq!(parse("http://example.com/"), Err(InvalidUrl::NotHttps));
        assert_eq!(parse("ftp://example.com/"), Err(InvalidUrl::NotHttps));
        assert_eq!(parse("https://user:pw@example.com/"), Err(InvalidUrl::UserInfo));
        for private in [
            "https://localhost/",
            "https://LOCALHOST./",
            "https://api.localhost/",
            "https://127.0.0.1/",
            "https://127.1/",
            "https://10.0.0.1/",
            "https://169.254.169.254/latest",
            "https://[::1]/",
            "https://[fd00::1]/",
            "https://100.64.1.1/",
            "https://0.0.0.0/",
            "https://[::ffff:192.168.0.1]/",
            "https://224.0.0.1/",
            "https://255.255.255.255/",
            "https://0x7f000001/",
            "https://192.0.2.1/",
            "https://198.51.100.1/",
            "https://203.0.113.1/",
            "https://[::ffff:0:127.0.0.1]/",
            "https://[::ffff:0:c000:201]/",
        ] {
            assert_eq!(parse(private), Err(InvalidUrl::PrivateTarget), "{private}");
        }
    }

    /// What openapi.yaml says of `url`: WHATWG normalisation, and the length limit on the
    /// string as sent and on the normalised one (contract section 13, "URLs").
    #[test]
    fn urls_are_normalised_and_both_forms_are_limited() {
        for (sent, stored) in [
            ("HTTPS://Hooks.Example.COM:443/a/./b/../c", "https://hooks.example.com/a/c"),
            ("https://hooks.example.com", "https://hooks.example.com/"),
            ("  https://hooks.example.com/x y\t", "https://hooks.example.com/x%20y"),
            ("https://bücher.example/hook", "https://xn--bcher-kva.example/hook"),
        ] {
            assert_eq!(parse(sent).unwrap().as_str(), stored, "{sent}");
        }
        let spaced = format!("https://example.com/{}", " a".repeat(1014));
        assert_eq!(spaced.chars().count(), 2048);
        assert_eq!(parse(&spaced), Err(InvalidUrl::TooLongOnceNormalised(20 + 1014 * 4)));
        let non_ascii = format!("https://example.com/{}", "€".repeat(2048 - 20));
        assert_eq!(non_ascii.chars().count(), 2048);
        assert_eq!(parse(&non_ascii), Err(InvalidUrl::TooLongOnceNormalised(20 + 2028 * 9)));
        let longest = format!("https://example.com/{}", "a".repeat(2048 - 20));
        assert_eq!(parse(&longest).unwrap().as_str(), longest);
        let grows_to_the_limit = format!("https://example.com/{}€", "a".repeat(2048 - 20 - 9));
        assert_eq!(parse(&grows_to_the_limit).unwrap().as_str().len(), 2048);
        let grows_past_it = format!("https://example.com/{}€", "a".repeat(2048 - 20 - 8));
        assert_eq!(parse(&grows_past_it), Err(InvalidUrl::TooLongOnceNormalised(2049)));
    }

    #[test]
    fn changes_are_read_in_the_contracts_order() {
        let changes = |body: Value| SubscriptionChanges::parse(body.as_object().unwrap(), &UrlPolicy::default());
        let url = "https://hooks.example.com/new";
        assert_eq!(
            changes(json!({"url": url, "events": ["assessment.completed"], "enabled": false})),
            Ok(SubscriptionChanges {
                url: Some(parse(url).unwrap()),
                events: Some(EventKinds(vec![EventKind::AssessmentCompleted])),
                enabled: Some(false),
                ..SubscriptionChanges::default()
            })
        );
        assert_eq!(
            changes(json!({"enabled": true, "asymmetricSigning": false})),
            Ok(SubscriptionChanges { enabled: Some(true), asymmetric_signing: Some(false), ..Default::default() })
        );
        assert_eq!(
            changes(json!({"asymmetricSigning": true})),
            Ok(SubscriptionChanges { asymmetric_signing: Some(true), ..Default::default() })
        );
        assert_eq!(
            changes(json!({"traceContext": true, "enabled": false})),
            Ok(SubscriptionChanges { enabled: Some(false), trace_context: Some(true), ..Default::default() })
        );
        assert_eq!(
            changes(json!({"maxDeliveriesPerSecond": 2})),
            Ok(SubscriptionChanges { max_deliveries_per_second: Some(Some(DeliveryRate(2))), ..Default::default() })
        );
        assert_eq!(
            changes(json!({"maxDeliveriesPerSecond": null})),
            Ok(SubscriptionChanges { max_deliveries_per_second: Some(None), ..Default::default() })
        );
        assert_eq!(
            changes(json!({"whileDisabled": "skip"})),
            Ok(SubscriptionChanges { while_disabled: Some(WhileDisabled::Skip), ..Default::default() })
        );
        let audience = IdentityToken::parse(&json!({"audience": "api://receiver"})).unwrap();
        assert_eq!(
            changes(json!({"identityToken": {"audience": "api://receiver"}})),
            Ok(SubscriptionChanges { identity_token: Some(audience), ..Default::default() })
        );
        assert_eq!(
            changes(json!({"identityToken": null})),
            Ok(SubscriptionChanges { identity_token: Some(None), ..Default::default() })
        );
        for (body, refused) in [
            (json!({}), InvalidChanges::NoChanges),
            (json!({"secret": "x", "Url": url}), InvalidChanges::NoChanges),
            (json!({"url": url, "secret": "x"}), InvalidChanges::UnknownField("secret".into())),
            (json!({"enabled": "yes", "id": "whk_1"}), InvalidChanges::UnknownField("id".into())),
            (json!({"enabled": "true", "url": 5}), InvalidChanges::InvalidEnabled),
            (json!({"enabled": null}), InvalidChanges::InvalidEnabled),
            (json!({"enabled": 0, "events": []}), InvalidChanges::InvalidEnabled),
            (json!({"enabled": 1, "asymmetricSigning": 1}), InvalidChanges::InvalidEnabled),
            (json!({"asymmetricSigning": "true"}), InvalidChanges::AsymmetricSigning(InvalidAsymmetricSigning)),
            (json!({"asymmetricSigning": null}), InvalidChanges::AsymmetricSigning(InvalidAsymmetricSigning)),
            (
                json!({"asymmetricSigning": 1, "url": 5, "events": []}),
                InvalidChanges::AsymmetricSigning(InvalidAsymmetricSigning),
            ),
            (json!({"traceContext": "true"}), InvalidChanges::TraceContext(InvalidTraceContext)),
            (json!({"traceContext": null}), InvalidChanges::TraceContext(InvalidTraceContext)),
            (
                json!({"traceContext": 1, "asymmetricSigning": 1}),
                InvalidChanges::AsymmetricSigning(InvalidAsymmetricSigning),
            ),
            (json!({"traceContext": 1, "enabled": 1}), InvalidChanges::InvalidEnabled),
            (
                json!({"traceContext": [true], "url": 5, "events": []}),
                InvalidChanges::TraceContext(InvalidTraceContext),
            ),
            (json!({"maxDeliveriesPerSecond": 0, "url": 5}), InvalidChanges::DeliveryRate(InvalidDeliveryRate)),
            (
                json!({"asymmetricSigning": 1, "maxDeliveriesPerSecond": 0}),
                InvalidChanges::AsymmetricSigning(InvalidAsymmetricSigning),
            ),
            (
                json!({"identityToken": {"audience": ""}, "url": 5, "events": []}),
                InvalidChanges::IdentityToken(InvalidIdentityToken::Audience),
            ),
            (
                json!({"identityToken": "aud", "maxDeliveriesPerSecond": 0}),
                InvalidChanges::DeliveryRate(InvalidDeliveryRate),
            ),
            (
                json!({"whileDisabled": "drop", "maxDeliveriesPerSecond": 0}),
                InvalidChanges::DeliveryRate(InvalidDeliveryRate),
            ),
            (
                json!({"whileDisabled": null, "identityToken": "aud", "url": 5}),
                InvalidChanges::WhileDisabled(InvalidWhileDisabled),
            ),
            (json!({"url": null}), InvalidChanges::Url(InvalidUrl::NotAString)),
            (json!({"url": "http://hooks.example.com/", "events": []}), InvalidChanges::Url(InvalidUrl::NotHttps)),
            (json!({"events": null, "enabled": true}), InvalidChanges::Events(InvalidEvents::NotANonEmptyArray)),
            (
                json!({"events": ["webhook.ping"]}),
                InvalidChanges::Events(InvalidEvents::NotSubscribable(EventKind::WebhookPing)),
            ),
        ] {
            assert_eq!(changes(body.clone()), Err(refused), "{body}");
        }
    }

    #[test]
    fn a_rate_limit_is_an_integer_from_one_to_ten_thousand_or_null() {
        let cases = [
            (json!(null), Ok(None)),
            (json!(1), Ok(Some(DeliveryRate(1)))),
            (json!(10_000), Ok(Some(DeliveryRate(10_000)))),
            (json!(0), Err(InvalidDeliveryRate)),
            (json!(10_001), Err(InvalidDeliveryRate)),
            (json!(-2), Err(InvalidDeliveryRate)),
            (json!(2.5), Err(InvalidDeliveryRate)),
            (json!(5.0), Ok(Some(DeliveryRate(5)))),
            (json!(1e4), Ok(Some(DeliveryRate(10_000)))),
            (json!(0.5), Err(InvalidDeliveryRate)),
            (json!(70_000), Err(InvalidDeliveryRate)),
            (json!("2"), Err(InvalidDeliveryRate)),
            (json!(true), Err(InvalidDeliveryRate)),
        ];
        for (value, expected) in cases {
            assert_eq!(DeliveryRate::parse(&value), expected, "{value}");
        }
    }

    #[test]
    fn asymmetric_signing_on_create_is_a_boolean_or_absent() {
        assert_eq!(asymmetric_signing(None), Ok(false));
        assert_eq!(asymmetric_signing(Some(&json!(true))), Ok(true));
        assert_eq!(asymmetric_signing(Some(&json!(false))), Ok(false));
        for bad in [json!(null), json!("true"), json!(1), json!(0), json!([true]), json!({})] {
            assert_eq!(asymmetric_signing(Some(&bad)), Err(InvalidAsymmetricSigning), "{bad}");
        }
    }

    #[test]
    fn trace_context_on_create_is_a_boolean_or_absent() {
        assert_eq!(trace_context(None), Ok(false));
        assert_eq!(trace_context(Some(&json!(true))), Ok(true));
        assert_eq!(trace_context(Some(&json!(false))), Ok(false));
        for bad in [json!(null), json!("true"), json!(1), json!([true]), json!({})] {
            assert_eq!(trace_context(Some(&bad)), Err(InvalidTraceContext), "{bad}");
        }
    }

    #[test]
    fn logged_urls_keep_scheme_host_port_and_path_only() {
        let logged = |url: &str| LoggedUrl(url).to_string();
        assert_eq!(
            logged("https://hooks.example.com/career/hook?token=s3cret#frag"),
            "https://hooks.example.com/career/hook"
        );
        assert_eq!(logged("http://user:pass@127.0.0.1:4000/hook?x=1"), "http://127.0.0.1:4000/hook");
        assert_eq!(logged("https://[2001:db8::1]:8443/?key=k"), "https://[2001:db8::1]:8443/");
        assert_eq!(logged("not a url ?token=s3cret"), "(unparsable URL)");
    }

    #[test]
    fn http_and_the_allowed_networks_are_separate_settings() {
        let local = UrlPolicy::local_stack();
        let https_loopback = UrlPolicy { allow_http: false, ..local.clone() };
        let http_only = UrlPolicy { allow_http: true, ..UrlPolicy::default() };
        // url, then whether local, https_loopback and http_only take it
        let table = [
            ("http://127.0.0.1:8080/hook", Ok(()), Err(InvalidUrl::NotHttps), Err(InvalidUrl::PrivateTarget)),
            ("https://127.0.0.1:8443/hook", Ok(()), Ok(()), Err(InvalidUrl::PrivateTarget)),
            ("http://localhost/hook", Ok(()), Err(InvalidUrl::NotHttps), Err(InvalidUrl::PrivateTarget)),
            ("https://[::1]/hook", Ok(()), Ok(()), Err(InvalidUrl::PrivateTarget)),
            (
                "http://10.0.0.1/hook",
                Err(InvalidUrl::PrivateTarget),
                Err(InvalidUrl::NotHttps),
                Err(InvalidUrl::PrivateTarget),
            ),
            (
                "https://169.254.169.254/",
                Err(InvalidUrl::PrivateTarget),
                Err(InvalidUrl::PrivateTarget),
                Err(InvalidUrl::PrivateTarget),
            ),
            ("http://hooks.example.com/", Ok(()), Err(InvalidUrl::NotHttps), Ok(())),
            ("ftp://localhost/", Err(InvalidUrl::NotHttps), Err(InvalidUrl::NotHttps), Err(InvalidUrl::NotHttps)),
        ];
        for (url, by_local, by_https_loopback, by_http_only) in table {
            let taken = |policy: &UrlPolicy| WebhookUrl::parse(&json!(url), policy).map(|_| ());
            assert_eq!(taken(&local), by_local, "{url}, local stack");
            assert_eq!(taken(&https_loopback), by_https_loopback, "{url}, https and loopback");
            assert_eq!(taken(&http_only), by_http_only, "{url}, http without an allow-list");
        }
    }

    #[test]
    fn events_must_be_known_and_are_deduplicated() {
        let kinds = EventKinds::parse(&json!(["profile.updated", "assessment.completed", "profile.updated"])).unwrap();
        assert_eq!(kinds.kinds(), [EventKind::ProfileUpdated, EventKind::AssessmentCompleted]);
        for bad in [
            json!([]),
            json!("profile.updated"),
            json!({}),
            json!(["nope"]),
            json!([1]),
            json!(["profile.updated", null]),
        ] {
            assert!(
                matches!(EventKinds::parse(&bad), Err(InvalidEvents::NotANonEmptyArray | InvalidEvents::Unknown(_))),
                "{bad}"
            );
        }
        let ping = EventKinds::parse(&json!(["profile.updated", "webhook.ping"])).unwrap_err();
        assert_eq!(ping, InvalidEvents::NotSubscribable(EventKind::WebhookPing));
        assert_eq!(
            ping.to_string(),
            "event kind \"webhook.ping\" is not subscribable (GET /api/v1/webhooks/event-types says which are)"
        );
    }

    #[test]
    fn secrets_are_whsec_and_the_standard_base64_of_32_bytes() {
        let secret = WebhookSecret::generate();
        let text = secret.expose();
        let encoded = text.strip_prefix("whsec_").expect("the whsec_ prefix");
        assert_eq!(encoded.len(), 44, "{text}");
        assert!(encoded.ends_with('='), "padded: {text}");
        assert_eq!(STANDARD.decode(encoded).unwrap(), secret.key());
        assert_eq!(WebhookSecret::parse(text), Some(secret.clone()));
        assert_ne!(WebhookSecret::generate(), secret);
        assert_eq!(format!("{secret:?}"), "WebhookSecret(..)", "never printed");
    }

    #[test]
    fn secrets_of_the_earlier_format_still_parse() {
        let legacy = "whsec_Ab-_0123456789abcdefghijklmnopqrstuvwxyzABE";
        let secret = WebhookSecret::parse(legacy).expect("a secret issued before the base64 format");
        assert_eq!(secret.expose(), legacy);
        assert_eq!(secret.key(), URL_SAFE_NO_PAD.decode(&legacy[6..]).unwrap());
        for bad in [
            "whsec_",
            "whsec_abc",
            "cak_Ab-_0123456789abcdefghijklmnopqrstuvwxyzABE",
            "whsec_Ab+/0123456789abcdefghijklmnopqrstuvwxyzABE",
            &format!("whsec_!{}", &STANDARD.encode([7u8; 32])[1..]),
            &format!("whsec_{}", STANDARD.encode([7u8; 31])),
        ] {
            assert_eq!(WebhookSecret::parse(bad), None, "{bad}");
        }
    }
}
