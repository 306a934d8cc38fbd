//! Destinations in the receiver's own AWS account (contract section 17): an SQS queue, an
//! EventBridge bus or a Custom Event Bus (the eventsv2 API), and the role the service assumes to
//! send there, with an external id the service generates. Parsed once here, at the API; the sender reads the parts it needs.

use std::net::{IpAddr, Ipv4Addr};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use url::{Host, Url};

use crate::excerpt::Excerpt;
use crate::ids::SubscriptionId;
use crate::random;
use crate::text::{text_traits, wire_names};
use crate::webhooks::netguard::UrlPolicy;

/// The longest role ARN STS takes (`RoleArn` of `AssumeRole`).
const MAX_ARN_LEN: usize = 2048;
/// The longest IAM path, slashes included.
const MAX_ROLE_PATH_LEN: usize = 512;
const MAX_ROLE_NAME_LEN: usize = 64;
const MAX_QUEUE_NAME_LEN: usize = 80;
const MAX_BUS_NAME_LEN: usize = 256;
/// The longest Custom Event Bus ARN the eventsv2 API takes (its model's `EventBusArn`).
const MAX_BUS_V2_ARN_LEN: usize = 1011;
/// The random id that ends a Custom Event Bus ARN: lowercase letters and digits.
const BUS_V2_ID_LEN: usize = 25;
const FIFO_SUFFIX: &str = ".fifo";
/// The start of every assumed-role session's name; the subscription id follows.
const SESSION_PREFIX: &str = "career-webhooks-";

wire_names! {
    /// A destination's `type`.
    pub enum DestinationType: "destination type" {
        /// An SQS queue, standard or FIFO.
        AwsSqs = "aws_sqs",
        /// An EventBridge event bus.
        AwsEventBridge = "aws_eventbridge",
        /// A Custom Event Bus (the eventsv2 API): FIFO per event group, deduplication.
        AwsEventBus = "aws_eventbus",
    }
}

/// An AWS account id: twelve digits.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AccountId(String);

impl AccountId {
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == 12 && text.bytes().all(|b| b.is_ascii_digit())).then(|| AccountId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

text_traits!(AccountId, "an AWS account id (12 digits)");

/// An IAM role's ARN, `arn:<partition>:iam::<account>:role/<path/>name`.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RoleArn(String);

impl RoleArn {
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() > MAX_ARN_LEN {
            return None;
        }
        let [arn, partition, service, region, account, resource] = arn_parts(text)?;
        let path_and_name = resource.strip_prefix("role/")?;
        let (path, name) = path_and_name.rsplit_once('/').unwrap_or(("", path_and_name));
        let name_ok = (1..=MAX_ROLE_NAME_LEN).contains(&name.len()) && name.bytes().all(is_iam_name_byte);
        // The path between `role/` and the name, slashes around it included, as IAM counts it.
        let path_ok = path.len() + 2 <= MAX_ROLE_PATH_LEN
            && (path.is_empty()
                || path.split('/').all(|segment| !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_graphic())));
        let ok = arn == "arn"
            && Partition::named(partition).is_some()
            && service == "iam"
            && region.is_empty()
            && AccountId::parse(account).is_some()
            && name_ok
            && path_ok;
        ok.then(|| RoleArn(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn partition(&self) -> &str {
        arn_part(&self.0, 1)
    }

    pub fn account(&self) -> AccountId {
        AccountId(arn_part(&self.0, 4).to_owned())
    }
}

text_traits!(RoleArn, "an IAM role ARN (arn:<partition>:iam::<account>:role/<name>)");

/// An SQS queue's URL: `https://sqs.<region>.amazonaws.com/<account>/<name>` (the domain is
/// the region's partition's: `.amazonaws.com.cn` in China), or a local emulator's
/// `http://<address>:<port>/<account>/<name>`, which only [`DestinationPolicy`] decides whether
/// a deployment takes. A name ending in `.fifo` is a FIFO queue.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct QueueUrl(String);

/// Where a queue is: on AWS in a region, or at an address (an emulator).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueHost {
    Aws { region: String },
    Address { ip: IpAddr, https: bool },
}

impl QueueUrl {
    /// Checks the shape only, exactly as written: the URL must be its own normal form, with
    /// no user-info, query or fragment.
    pub fn parse(text: &str) -> Option<Self> {
        QueueUrl::parts(text).map(|_| QueueUrl(text.to_owned()))
    }

    /// Where the queue is and its account.
    fn parts(text: &str) -> Option<(QueueHost, AccountId)> {
        if text.len() > super::MAX_URL_LEN {
            return None;
        }
        let url = Url::parse(text).ok()?;
        let plain = url.as_str() == text
            && url.username().is_empty()
            && url.password().is_none()
            && url.query().is_none()
            && url.fragment().is_none();
        if !plain {
            return None;
        }
        let https = url.scheme() == "https";
        let by_address = https || url.scheme() == "http";
        let host = match url.host()? {
            Host::Domain(domain) if https && url.port().is_none() => QueueHost::Aws { region: aws_region(domain)? },
            Host::Ipv4(ip) if by_address => QueueHost::Address { ip: IpAddr::V4(ip), https },
            Host::Ipv6(ip) if by_address => QueueHost::Address { ip: IpAddr::V6(ip), https },
            _ => return None,
        };
        // The URL is its own normal form, so its path is `/<account>/<name>` as written.
        let (account, name) = url.path().strip_prefix('/')?.split_once('/')?;
        let account = AccountId::parse(account)?;
        is_queue_name(name).then_some((host, account))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn host(&self) -> QueueHost {
        QueueUrl::parts(&self.0).expect("checked by parse").0
    }

    /// The region of a queue on AWS; `None` for an emulator's (the deployment's region).
    pub fn region(&self) -> Option<String> {
        match self.host() {
            QueueHost::Aws { region } => Some(region),
            QueueHost::Address { .. } => None,
        }
    }

    /// `scheme://address:port` of an emulator's queue, the endpoint to send it to; `None` on AWS.
    pub fn local_endpoint(&self) -> Option<String> {
        let url = Url::parse(&self.0).expect("checked by parse");
        matches!(self.host(), QueueHost::Address { .. }).then(|| url.origin().ascii_serialization())
    }

    pub fn account(&self) -> AccountId {
        QueueUrl::parts(&self.0).expect("checked by parse").1
    }

    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().expect("checked by parse")
    }

    /// A FIFO queue: its messages need a group and a deduplication id.
    pub fn is_fifo(&self) -> bool {
        self.name().ends_with(FIFO_SUFFIX)
    }
}

text_traits!(QueueUrl, "an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)");

/// The text and the parts of a bus's ARN, of either API (each type's `parse` checked them).
macro_rules! bus_arn_parts {
    ($name:ident) => {
        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn partition(&self) -> &str {
                arn_part(&self.0, 1)
            }

            pub fn region(&self) -> &str {
                arn_part(&self.0, 3)
            }

            pub fn account(&self) -> AccountId {
                AccountId(arn_part(&self.0, 4).to_owned())
            }
        }
    };
}

/// An EventBridge bus's ARN, `arn:<partition>:events:<region>:<account>:event-bus/<name>`.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EventBusArn(String);

impl EventBusArn {
    pub fn parse(text: &str) -> Option<Self> {
        let name = events_resource(text)?.strip_prefix("event-bus/")?;
        let name_ok = (1..=MAX_BUS_NAME_LEN).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
        name_ok.then(|| EventBusArn(text.to_owned()))
    }
}

bus_arn_parts!(EventBusArn);
text_traits!(EventBusArn, "an EventBridge bus ARN (arn:<partition>:events:<region>:<account>:event-bus/<name>)");

/// A Custom Event Bus's ARN (the eventsv2 API),
/// `arn:<partition>:events:<region>:<account>:event-busv2/<name>/<id>`: as its model's pattern
/// says, a name of 1-256 letters, digits, `.`, `-` and `_` that starts with a letter or digit,
/// and an id of 25 lowercase letters and digits; and, as for [`EventBusArn`], a region of the
/// ARN's partition.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EventBusV2Arn(String);

impl EventBusV2Arn {
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() > MAX_BUS_V2_ARN_LEN {
            return None;
        }
        let (name, id) = events_resource(text)?.strip_prefix("event-busv2/")?.split_once('/')?;
        let name_ok = (1..=MAX_BUS_NAME_LEN).contains(&name.len())
            && name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        let id_ok = id.len() == BUS_V2_ID_LEN && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        (name_ok && id_ok).then(|| EventBusV2Arn(text.to_owned()))
    }

    /// Whether `text` names a Custom Event Bus rather than an EventBridge bus, well-formed or
    /// not: what a PATCH's `eventBusArn` changes when it gives no `type`.
    fn names_one(text: &str) -> bool {
        text.contains(":event-busv2/")
    }
}

bus_arn_parts!(EventBusV2Arn);
text_traits!(
    EventBusV2Arn,
    "a Custom Event Bus ARN (arn:<partition>:events:<region>:<account>:event-busv2/<name>/<id>)"
);

/// The external id of a subscription's role assumption (`sts:ExternalId`): generated by the
/// service when the subscription is created, 43 base64url characters, never taken from a
/// client and never changed.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ExternalId(String);

impl ExternalId {
    pub fn generate() -> Self {
        ExternalId(random::random_token(""))
    }

    pub fn parse(text: &str) -> Option<Self> {
        random::is_token(text, "").then(|| ExternalId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

text_traits!(ExternalId, "an external id");

/// Where a subscription delivers in its owner's AWS account, and the role that may send there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    AwsSqs { queue_url: QueueUrl, role_arn: RoleArn },
    AwsEventBridge { event_bus_arn: EventBusArn, role_arn: RoleArn },
    AwsEventBus { event_bus_arn: EventBusV2Arn, role_arn: RoleArn },
}

/// Why a `destination` (or its change) was refused: `webhooks.invalid_destination`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDestination {
    #[error("give either url or destination, not both")]
    WithUrl,
    #[error("destination must be an object")]
    NotAnObject,
    #[error("destination type must be one of {}", DestinationType::names())]
    UnknownType(String),
    #[error("destination takes {allowed}, not {}", Excerpt(.field))]
    UnknownField { field: String, allowed: &'static str },
    #[error("externalId is generated by the service, never given")]
    ExternalIdGiven,
    #[error("destination.{0} is required")]
    Missing(&'static str),
    #[error("destination.queueUrl must be an SQS queue URL, https://sqs.<region>.amazonaws.com/<account>/<name>")]
    QueueUrl,
    #[error("destination.eventBusArn must be an EventBridge bus ARN, arn:<partition>:events:<region>:<account>:event-bus/<name>")]
    EventBusArn,
    #[error(
        "destination.eventBusArn must be a Custom Event Bus ARN, \
         arn:<partition>:events:<region>:<account>:event-busv2/<name>/<25 lowercase letters and digits>"
    )]
    EventBusV2Arn,
    #[error("destination.roleArn must be an IAM role ARN, arn:<partition>:iam::<account>:role/<name>")]
    RoleArn,
    #[error("destination.queueUrl must be on AWS: this deployment does not deliver to a local queue")]
    LocalQueue,
    #[error("the role must be in the same account as its {target} (role in {role}, {target} in {target_account})")]
    OtherAccount { target: &'static str, role: String, target_account: String },
    #[error(
        "destination.{field} is in the AWS partition {partition}: this deployment delivers only within its own, \
         {deployment}"
    )]
    OtherPartition { field: &'static str, partition: String, deployment: String },
    #[error("the role must be in your own AWS account, not this service's")]
    OwnAccount,
    #[error("this deployment does not deliver to AWS accounts (its delivery role is not configured)")]
    NotOffered,
    #[error("a subscription's destination type cannot change (delete it and create another)")]
    TypeChange,
    #[error(
        "a subscription with a url cannot get a destination, nor the other way round (delete it and create another)"
    )]
    TargetChange,
}

/// What a destination may be in one deployment.
#[derive(Clone, Copy, Debug)]
pub struct DestinationPolicy<'a> {
    /// The delivery function's role (`SENDER_ROLE_ARN`): owners trust it, and its account and
    /// its partition are the deployment's own. `None`: the deployment takes no destination.
    pub sender_role: Option<&'a RoleArn>,
    /// The URL settings of section 5. A queue at an address (an emulator) needs that address
    /// in an allowed network (`WEBHOOK_ALLOWED_NETWORKS`), and `http` needs
    /// `ALLOW_HTTP_WEBHOOK_URLS`; a role in the deployment's own account is taken only where
    /// the allowed networks include loopback, as only the local stack's do.
    pub urls: &'a UrlPolicy,
}

impl Destination {
    /// A create's `destination`: its shape, then the deployment's rules.
    pub fn parse(value: &Value, policy: &DestinationPolicy<'_>) -> Result<Self, InvalidDestination> {
        let fields = value.as_object().ok_or(InvalidDestination::NotAnObject)?;
        let kind = destination_type(fields)?.ok_or(InvalidDestination::Missing("type"))?;
        let change = DestinationChange::read(fields, kind)?;
        let role_arn = change.role_arn.ok_or(InvalidDestination::Missing("roleArn"))?;
        let destination = match kind {
            DestinationType::AwsSqs => Destination::AwsSqs {
                queue_url: change.queue_url.ok_or(InvalidDestination::Missing("queueUrl"))?,
                role_arn,
            },
            DestinationType::AwsEventBridge => Destination::AwsEventBridge {
                event_bus_arn: change.event_bus_arn.ok_or(InvalidDestination::Missing("eventBusArn"))?,
                role_arn,
            },
            DestinationType::AwsEventBus => Destination::AwsEventBus {
                event_bus_arn: change.event_bus_v2_arn.ok_or(InvalidDestination::Missing("eventBusArn"))?,
                role_arn,
            },
        };
        destination.check(policy)?;
        Ok(destination)
    }

    /// This destination with `change` applied, under the same rules as on create.
    pub fn changed(
        &self,
        change: &DestinationChange,
        policy: &DestinationPolicy<'_>,
    ) -> Result<Self, InvalidDestination> {
        if change.kind.is_some_and(|kind| kind != self.kind()) {
            return Err(InvalidDestination::TypeChange);
        }
        let role_arn = change.role_arn.clone().unwrap_or_else(|| self.role_arn().clone());
        let changed = match self {
            Destination::AwsSqs { queue_url, .. } => Destination::AwsSqs {
                queue_url: change.queue_url.clone().unwrap_or_else(|| queue_url.clone()),
                role_arn,
            },
            Destination::AwsEventBridge { event_bus_arn, .. } => Destination::AwsEventBridge {
                event_bus_arn: change.event_bus_arn.clone().unwrap_or_else(|| event_bus_arn.clone()),
                role_arn,
            },
            Destination::AwsEventBus { event_bus_arn, .. } => Destination::AwsEventBus {
                event_bus_arn: change.event_bus_v2_arn.clone().unwrap_or_else(|| event_bus_arn.clone()),
                role_arn,
            },
        };
        changed.check(policy)?;
        Ok(changed)
    }

    pub fn kind(&self) -> DestinationType {
        match self {
            Destination::AwsSqs { .. } => DestinationType::AwsSqs,
            Destination::AwsEventBridge { .. } => DestinationType::AwsEventBridge,
            Destination::AwsEventBus { .. } => DestinationType::AwsEventBus,
        }
    }

    /// The role the service assumes to send.
    pub fn role_arn(&self) -> &RoleArn {
        match self {
            Destination::AwsSqs { role_arn, .. }
            | Destination::AwsEventBridge { role_arn, .. }
            | Destination::AwsEventBus { role_arn, .. } => role_arn,
        }
    }

    /// A FIFO queue (never a bus).
    pub fn is_fifo(&self) -> bool {
        matches!(self, Destination::AwsSqs { queue_url, .. } if queue_url.is_fifo())
    }

    /// The queue URL or the bus ARN: what logs and operational events name as the receiver.
    pub fn target(&self) -> &str {
        match self {
            Destination::AwsSqs { queue_url, .. } => queue_url.as_str(),
            Destination::AwsEventBridge { event_bus_arn, .. } => event_bus_arn.as_str(),
            Destination::AwsEventBus { event_bus_arn, .. } => event_bus_arn.as_str(),
        }
    }

    fn check(&self, policy: &DestinationPolicy<'_>) -> Result<(), InvalidDestination> {
        let sender = policy.sender_role.ok_or(InvalidDestination::NotOffered)?;
        let role = self.role_arn();
        // Each part's partition; an emulator's queue has none (it is the deployment's).
        let (target, target_field, target_account, target_partition) = match self {
            Destination::AwsSqs { queue_url, .. } => {
                let partition = match queue_url.host() {
                    QueueHost::Aws { region } => Some(Partition::of_region(&region).expect("checked by parse").name),
                    QueueHost::Address { ip, https } => {
                        let allowed = policy.urls.guard.allowed().iter().any(|network| network.contains(ip));
                        if !allowed || !(https || policy.urls.allow_http) {
                            return Err(InvalidDestination::LocalQueue);
                        }
                        None
                    }
                };
                ("queue", "queueUrl", queue_url.account(), partition)
            }
            Destination::AwsEventBridge { event_bus_arn, .. } => {
                ("bus", "eventBusArn", event_bus_arn.account(), Some(event_bus_arn.partition()))
            }
            Destination::AwsEventBus { event_bus_arn, .. } => {
                ("bus", "eventBusArn", event_bus_arn.account(), Some(event_bus_arn.partition()))
            }
        };
        // No role trusts, and no credentials reach, across partitions: the deployment's is
        // its delivery role's.
        let deployment = sender.partition();
        for (field, partition) in [("roleArn", Some(role.partition())), (target_field, target_partition)] {
            if let Some(partition) = partition.filter(|partition| *partition != deployment) {
                return Err(InvalidDestination::OtherPartition {
                    field,
                    partition: partition.to_owned(),
                    deployment: deployment.to_owned(),
                });
            }
        }
        if role.account() != target_account {
            return Err(InvalidDestination::OtherAccount {
                target,
                role: role.account().to_string(),
                target_account: target_account.to_string(),
            });
        }
        let local_stack = !policy.urls.guard.refuses(IpAddr::V4(Ipv4Addr::LOCALHOST));
        if role.account() == sender.account() && !local_stack {
            return Err(InvalidDestination::OwnAccount);
        }
        Ok(())
    }
}

/// A PATCH's `destination`: the queue URL or bus ARN and the role to change to, and the
/// `type`, which may only repeat the subscription's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DestinationChange {
    pub kind: Option<DestinationType>,
    pub queue_url: Option<QueueUrl>,
    pub event_bus_arn: Option<EventBusArn>,
    pub event_bus_v2_arn: Option<EventBusV2Arn>,
    pub role_arn: Option<RoleArn>,
}

impl DestinationChange {
    pub fn parse(value: &Value) -> Result<Self, InvalidDestination> {
        let fields = value.as_object().ok_or(InvalidDestination::NotAnObject)?;
        let given = destination_type(fields)?;
        // Without a type, the queue URL or bus ARN given says which kind it changes (both buses
        // take `eventBusArn`; their ARNs tell them apart); a role alone fits any.
        let kind = given.unwrap_or(match fields.get("eventBusArn") {
            Some(arn) if arn.as_str().is_some_and(EventBusV2Arn::names_one) => DestinationType::AwsEventBus,
            Some(_) => DestinationType::AwsEventBridge,
            None => DestinationType::AwsSqs,
        });
        let change = DestinationChange::read(fields, kind)?;
        let targeted =
            change.queue_url.is_some() || change.event_bus_arn.is_some() || change.event_bus_v2_arn.is_some();
        Ok(DestinationChange { kind: given.or(targeted.then_some(kind)), ..change })
    }

    /// The fields of a destination of `kind` in `fields`: an unknown or another kind's field,
    /// or a malformed value, is refused.
    fn read(fields: &Map<String, Value>, kind: DestinationType) -> Result<Self, InvalidDestination> {
        let (target, allowed) = match kind {
            DestinationType::AwsSqs => ("queueUrl", "type, queueUrl and roleArn"),
            DestinationType::AwsEventBridge | DestinationType::AwsEventBus => {
                ("eventBusArn", "type, eventBusArn and roleArn")
            }
        };
        for name in fields.keys() {
            match name.as_str() {
                "type" | "roleArn" => {}
                "externalId" => return Err(InvalidDestination::ExternalIdGiven),
                name if name == target => {}
                other => return Err(InvalidDestination::UnknownField { field: other.to_owned(), allowed }),
            }
        }
        let text = |name: &str| fields.get(name).map(|value| value.as_str().unwrap_or_default());
        let queue_url = match (kind, text("queueUrl")) {
            (DestinationType::AwsSqs, Some(url)) => Some(QueueUrl::parse(url).ok_or(InvalidDestination::QueueUrl)?),
            _ => None,
        };
        let event_bus_arn = match (kind, text("eventBusArn")) {
            (DestinationType::AwsEventBridge, Some(arn)) => {
                Some(EventBusArn::parse(arn).ok_or(InvalidDestination::EventBusArn)?)
            }
            _ => None,
        };
        let event_bus_v2_arn = match (kind, text("eventBusArn")) {
            (DestinationType::AwsEventBus, Some(arn)) => {
                Some(EventBusV2Arn::parse(arn).ok_or(InvalidDestination::EventBusV2Arn)?)
            }
            _ => None,
        };
        let role_arn = text("roleArn").map(|arn| RoleArn::parse(arn).ok_or(InvalidDestination::RoleArn)).transpose()?;
        Ok(DestinationChange { kind: Some(kind), queue_url, event_bus_arn, event_bus_v2_arn, role_arn })
    }
}

/// A subscription's destination and the external id its role assumption carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "DestinationFields", into = "DestinationFields")]
pub struct AwsDestination {
    pub destination: Destination,
    pub external_id: ExternalId,
}

impl AwsDestination {
    /// A new subscription's destination, with a fresh external id.
    pub fn new(destination: Destination) -> Self {
        AwsDestination { destination, external_id: ExternalId::generate() }
    }

    /// The destination `change` makes of this one ([`Destination::changed`]); the external id
    /// stays.
    pub fn changed(
        &self,
        change: &DestinationChange,
        policy: &DestinationPolicy<'_>,
    ) -> Result<Self, InvalidDestination> {
        let destination = self.destination.changed(change, policy)?;
        Ok(AwsDestination { destination, external_id: self.external_id.clone() })
    }
}

/// The name of a subscription's assumed-role sessions: it names the subscription, so the
/// owner's CloudTrail shows which subscription sent.
pub fn session_name(subscription: &SubscriptionId) -> String {
    format!("{SESSION_PREFIX}{subscription}")
}

/// A destination as stored and shown: `type`, the queue URL or bus ARN, `roleArn` and
/// `externalId`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationFields {
    #[serde(rename = "type")]
    pub kind: DestinationType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_url: Option<QueueUrl>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_bus_arn: Option<BusArn>,
    pub role_arn: RoleArn,
    pub external_id: ExternalId,
}

/// A stored or shown `eventBusArn`: an EventBridge bus's or a Custom Event Bus's, which the
/// destination's `type` must match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BusArn {
    EventBridge(EventBusArn),
    V2(EventBusV2Arn),
}

impl TryFrom<DestinationFields> for AwsDestination {
    type Error = &'static str;

    fn try_from(fields: DestinationFields) -> Result<Self, Self::Error> {
        let role_arn = fields.role_arn;
        let destination = match (fields.kind, fields.queue_url, fields.event_bus_arn) {
            (DestinationType::AwsSqs, Some(queue_url), None) => Destination::AwsSqs { queue_url, role_arn },
            (DestinationType::AwsEventBridge, None, Some(BusArn::EventBridge(event_bus_arn))) => {
                Destination::AwsEventBridge { event_bus_arn, role_arn }
            }
            (DestinationType::AwsEventBus, None, Some(BusArn::V2(event_bus_arn))) => {
                Destination::AwsEventBus { event_bus_arn, role_arn }
            }
            _ => return Err("a destination has the queue URL or the bus ARN of its type"),
        };
        Ok(AwsDestination { destination, external_id: fields.external_id })
    }
}

impl From<AwsDestination> for DestinationFields {
    fn from(aws: AwsDestination) -> Self {
        let kind = aws.destination.kind();
        let (queue_url, event_bus_arn, role_arn) = match aws.destination {
            Destination::AwsSqs { queue_url, role_arn } => (Some(queue_url), None, role_arn),
            Destination::AwsEventBridge { event_bus_arn, role_arn } => {
                (None, Some(BusArn::EventBridge(event_bus_arn)), role_arn)
            }
            Destination::AwsEventBus { event_bus_arn, role_arn } => (None, Some(BusArn::V2(event_bus_arn)), role_arn),
        };
        DestinationFields { kind, queue_url, event_bus_arn, role_arn, external_id: aws.external_id }
    }
}

/// The `type` of a destination object, when it has one.
fn destination_type(fields: &Map<String, Value>) -> Result<Option<DestinationType>, InvalidDestination> {
    fields
        .get("type")
        .map(|value| {
            value
                .as_str()
                .and_then(DestinationType::parse)
                .ok_or_else(|| InvalidDestination::UnknownType(value.to_string()))
        })
        .transpose()
}

/// The resource of an EventBridge ARN (a bus's, of either API): `None` unless the ARN is of
/// `events`, in a region of its partition (as a queue URL's is of its domain's), in an account.
fn events_resource(text: &str) -> Option<&str> {
    let [arn, partition, service, region, account, resource] = arn_parts(text)?;
    let ok = arn == "arn"
        && Partition::of_region(region).is_some_and(|of_region| of_region.name == partition)
        && service == "events"
        && AccountId::parse(account).is_some();
    ok.then_some(resource)
}

/// Part `index` of an ARN that parsed.
fn arn_part(arn: &str, index: usize) -> &str {
    arn.split(':').nth(index).expect("checked by parse")
}

/// The six parts of an ARN; the last (the resource) may hold colons.
fn arn_parts(text: &str) -> Option<[&str; 6]> {
    let mut parts = text.splitn(6, ':');
    Some([parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?])
}

/// An AWS partition: a set of regions whose ARNs name it and whose endpoints share a domain.
/// Roles trust, and credentials reach, only within one.
#[derive(Debug, PartialEq, Eq)]
pub struct Partition {
    /// As ARNs name it: `aws`, `aws-cn`, `aws-us-gov` …
    pub name: &'static str,
    /// The first words of its regions' names, `<first>-<word>-<number>`.
    region_starts: &'static [&'static str],
    /// The domain its endpoints end in (`sqs.<region>.<domain>`).
    domain: &'static str,
}

/// AWS's partitions as the SDKs' endpoint rules define them (`partitions.json`: each one's
/// `regionRegex` and `dnsSuffix`). A region of none of them does not exist. When AWS opens a
/// region under a new first word (`il` and `mx` came late), the SDKs' table gains it: so must
/// this one, or destinations there are refused as malformed.
const PARTITIONS: [Partition; 8] = [
    Partition {
        name: "aws",
        region_starts: &["us", "eu", "ap", "sa", "ca", "me", "af", "il", "mx"],
        domain: "amazonaws.com",
    },
    Partition { name: "aws-cn", region_starts: &["cn"], domain: "amazonaws.com.cn" },
    Partition { name: "aws-us-gov", region_starts: &["us-gov"], domain: "amazonaws.com" },
    Partition { name: "aws-iso", region_starts: &["us-iso"], domain: "c2s.ic.gov" },
    Partition { name: "aws-iso-b", region_starts: &["us-isob"], domain: "sc2s.sgov.gov" },
    Partition { name: "aws-iso-e", region_starts: &["eu-isoe"], domain: "cloud.adc-e.uk" },
    Partition { name: "aws-iso-f", region_starts: &["us-isof"], domain: "csp.hci.ic.gov" },
    Partition { name: "aws-eusc", region_starts: &["eusc-de"], domain: "amazonaws.eu" },
];

impl Partition {
    /// The partition ARNs call `name`.
    pub fn named(name: &str) -> Option<&'static Partition> {
        PARTITIONS.iter().find(|partition| partition.name == name)
    }

    /// The partition `region` belongs to; `None` for a region of none (one that does not exist).
    pub fn of_region(region: &str) -> Option<&'static Partition> {
        let word_and_number = |rest: &str| {
            rest.split_once('-').is_some_and(|(word, number)| {
                is_lower_word(word) && !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit())
            })
        };
        PARTITIONS.iter().find(|partition| {
            partition.region_starts.iter().any(|start| {
                region.strip_prefix(start).and_then(|rest| rest.strip_prefix('-')).is_some_and(word_and_number)
            })
        })
    }
}

fn is_lower_word(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_lowercase())
}

/// The region of an SQS endpoint's name, `sqs.<region>.<the domain of the region's partition>`
/// (`sqs.eu-west-1.amazonaws.com`, `sqs.cn-north-1.amazonaws.com.cn`).
fn aws_region(domain: &str) -> Option<String> {
    let (region, rest) = domain.strip_prefix("sqs.")?.split_once('.')?;
    (Partition::of_region(region)?.domain == rest).then(|| region.to_owned())
}

/// IAM role names: letters, digits and `+=,.@_-`.
fn is_iam_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b)
}

/// Letters, digits, `-` and `_`, at most 80 characters with the `.fifo` of a FIFO queue.
fn is_queue_name(name: &str) -> bool {
    let base = name.strip_suffix(FIFO_SUFFIX).unwrap_or(name);
    (1..=MAX_QUEUE_NAME_LEN).contains(&name.len())
        && !base.is_empty()
        && base.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SENDER: &str = "arn:aws:iam::111111111111:role/career-deliver";
    const QUEUE: &str = "https://sqs.eu-west-1.amazonaws.com/222222222222/career-events";
    const BUS: &str = "arn:aws:events:eu-west-1:222222222222:event-bus/career";
    const ROLE: &str = "arn:aws:iam::222222222222:role/career-sender";
    const BUS_V2: &str = "arn:aws:events:eu-west-1:222222222222:event-busv2/career.events-1/abcdefghij0123456789abcde";

    fn on_aws(value: Value) -> Result<Destination, InvalidDestination> {
        deployed_as(SENDER, value)
    }

    /// On AWS, for a deployment whose delivery role is `sender`.
    fn deployed_as(sender: &str, value: Value) -> Result<Destination, InvalidDestination> {
        let sender = RoleArn::parse(sender).unwrap();
        Destination::parse(&value, &DestinationPolicy { sender_role: Some(&sender), urls: &UrlPolicy::default() })
    }

    fn on_local_stack(value: Value) -> Result<Destination, InvalidDestination> {
        let sender = RoleArn::parse(SENDER).unwrap();
        Destination::parse(&value, &DestinationPolicy { sender_role: Some(&sender), urls: &UrlPolicy::local_stack() })
    }

    #[test]
    fn a_queue_and_a_bus_parse_with_their_parts() {
        let queue = on_aws(json!({"type": "aws_sqs", "queueUrl": QUEUE, "roleArn": ROLE})).unwrap();
        let Destination::AwsSqs { queue_url, role_arn } = &queue else { panic!("{queue:?}") };
        assert_eq!((queue_url.as_str(), role_arn.as_str()), (QUEUE, ROLE));
        assert_eq!(queue_url.region().as_deref(), Some("eu-west-1"));
        assert_eq!((queue_url.account().as_str(), queue_url.name()), ("222222222222", "career-events"));
        assert_eq!(queue_url.local_endpoint(), None);
        assert!(!queue.is_fifo());
        assert_eq!((queue.kind(), queue.target()), (DestinationType::AwsSqs, QUEUE));

        let fifo = "https://sqs.us-gov-west-1.amazonaws.com/222222222222/events.fifo";
        let gov_role = "arn:aws-us-gov:iam::222222222222:role/path/to/sender";
        let on_gov = deployed_as(
            "arn:aws-us-gov:iam::111111111111:role/d",
            json!({"type": "aws_sqs", "queueUrl": fifo, "roleArn": gov_role}),
        );
        assert!(on_gov.unwrap().is_fifo());

        let bus = on_aws(json!({"type": "aws_eventbridge", "eventBusArn": BUS, "roleArn": ROLE})).unwrap();
        let Destination::AwsEventBridge { event_bus_arn, .. } = &bus else { panic!("{bus:?}") };
        assert_eq!((event_bus_arn.region(), event_bus_arn.account().as_str()), ("eu-west-1", "222222222222"));
        assert!(!bus.is_fifo());
        assert_eq!((bus.kind(), bus.target(), bus.role_arn().as_str()), (DestinationType::AwsEventBridge, BUS, ROLE));

        let v2 = on_aws(json!({"type": "aws_eventbus", "eventBusArn": BUS_V2, "roleArn": ROLE})).unwrap();
        let Destination::AwsEventBus { event_bus_arn, .. } = &v2 else { panic!("{v2:?}") };
        assert_eq!((event_bus_arn.region(), event_bus_arn.account().as_str()), ("eu-west-1", "222222222222"));
        assert!(!v2.is_fifo(), "its ordering is the bus's event groups, not a FIFO queue's");
        assert_eq!((v2.kind(), v2.target(), v2.role_arn().as_str()), (DestinationType::AwsEventBus, BUS_V2, ROLE));
    }

    #[test]
    fn a_custom_event_bus_arn_is_as_its_model_says() {
        let with = |partition: &str, region: &str, account: &str, resource: &str| {
            EventBusV2Arn::parse(&format!("arn:{partition}:events:{region}:{account}:{resource}"))
        };
        let id = "abcdefghij0123456789abcde";
        assert!(with("aws", "eu-west-1", "222222222222", &format!("event-busv2/b/{id}")).is_some());
        assert!(with("aws-cn", "cn-north-1", "222222222222", &format!("event-busv2/B.b-_9/{id}")).is_some());
        let longest = format!("event-busv2/{}/{id}", "n".repeat(256));
        assert!(with("aws", "eu-west-1", "222222222222", &longest).is_some(), "a name of 256 characters");
        for (partition, region, account, resource) in [
            // The partition, the region of that partition, the service, the account.
            ("aws-mars", "eu-west-1", "222222222222", format!("event-busv2/b/{id}")),
            ("aws", "cn-north-1", "222222222222", format!("event-busv2/b/{id}")),
            ("aws-cn", "eu-west-1", "222222222222", format!("event-busv2/b/{id}")),
            ("aws", "zz-north-1", "222222222222", format!("event-busv2/b/{id}")),
            ("aws", "", "222222222222", format!("event-busv2/b/{id}")),
            ("aws", "eu-west-1", "2222222222", format!("event-busv2/b/{id}")),
            ("aws", "eu-west-1", "22222222222a", format!("event-busv2/b/{id}")),
            // The resource: the v2 kind, a name, the 25-character id.
            ("aws", "eu-west-1", "222222222222", format!("event-bus/b/{id}")),
            ("aws", "eu-west-1", "222222222222", format!("event-busv2/{id}")),
            ("aws", "eu-west-1", "222222222222", format!("event-busv2//{id}")),
            ("aws", "eu-west-1", "222222222222", format!("event-busv2/-b/{id}")),
            ("aws", "eu-west-1", "222222222222", format!("event-busv2/a b/{id}")),
            ("aws", "eu-west-1", "222222222222", format!("event-busv2/a/b/{id}")),
            ("aws", "eu-west-1", "222222222222", format!("event-busv2/{}/{id}", "n".repeat(257))),
            ("aws", "eu-west-1", "222222222222", "event-busv2/b/abcdefghij0123456789abcd".to_owned()),
            ("aws", "eu-west-1", "222222222222", "event-busv2/b/abcdefghij0123456789abcdef".to_owned()),
            ("aws", "eu-west-1", "222222222222", "event-busv2/b/ABCDEFGHIJ0123456789ABCDE".to_owned()),
            ("aws", "eu-west-1", "222222222222", "event-busv2/b/abcdefghij0123456789abcd-".to_owned()),
        ] {
            assert_eq!(with(partition, region, account, &resource), None, "{partition} {region} {account} {resource}");
        }
        assert_eq!(EventBusV2Arn::parse(&format!("arn:aws:sqs:eu-west-1:222222222222:event-busv2/b/{id}")), None);
        assert_eq!(EventBusV2Arn::parse(BUS), None, "an EventBridge bus is not a Custom Event Bus");
        assert_eq!(EventBusArn::parse(BUS_V2), None, "nor the other way round");
    }

    #[test]
    fn each_broken_rule_is_refused() {
        use InvalidDestination as E;
        let other_role = "arn:aws:iam::333333333333:role/career-sender";
        let own_role = "arn:aws:iam::111111111111:role/receiver";
        let cases = [
            (json!("aws_sqs"), E::NotAnObject),
            (json!({"type": "aws_sns", "queueUrl": QUEUE, "roleArn": ROLE}), E::UnknownType("\"aws_sns\"".into())),
            (json!({"type": 1}), E::UnknownType("1".into())),
            (json!({"queueUrl": QUEUE, "roleArn": ROLE}), E::Missing("type")),
            (json!({"type": "aws_sqs", "roleArn": ROLE}), E::Missing("queueUrl")),
            (json!({"type": "aws_sqs", "queueUrl": QUEUE}), E::Missing("roleArn")),
            (json!({"type": "aws_eventbridge", "roleArn": ROLE}), E::Missing("eventBusArn")),
            (
                json!({"type": "aws_sqs", "queueUrl": QUEUE, "eventBusArn": BUS, "roleArn": ROLE}),
                E::UnknownField { field: "eventBusArn".into(), allowed: "type, queueUrl and roleArn" },
            ),
            (json!({"type": "aws_sqs", "queueUrl": QUEUE, "roleArn": ROLE, "externalId": "x"}), E::ExternalIdGiven),
            (json!({"type": "aws_sqs", "queueUrl": 5, "roleArn": ROLE}), E::QueueUrl),
            (json!({"type": "aws_eventbridge", "eventBusArn": QUEUE, "roleArn": ROLE}), E::EventBusArn),
            (json!({"type": "aws_eventbridge", "eventBusArn": BUS_V2, "roleArn": ROLE}), E::EventBusArn),
            (json!({"type": "aws_eventbus", "eventBusArn": BUS, "roleArn": ROLE}), E::EventBusV2Arn),
            (json!({"type": "aws_eventbus", "roleArn": ROLE}), E::Missing("eventBusArn")),
            (
                json!({"type": "aws_eventbus", "eventBusArn": BUS_V2, "queueUrl": QUEUE, "roleArn": ROLE}),
                E::UnknownField { field: "queueUrl".into(), allowed: "type, eventBusArn and roleArn" },
            ),
            (
                json!({"type": "aws_eventbus", "eventBusArn": BUS_V2, "roleArn": other_role}),
                E::OtherAccount { target: "bus", role: "333333333333".into(), target_account: "222222222222".into() },
            ),
            (
                json!({"type": "aws_eventbus", "eventBusArn": BUS_V2.replace("222222222222", "111111111111"), "roleArn": own_role}),
                E::OwnAccount,
            ),
            (json!({"type": "aws_sqs", "queueUrl": QUEUE, "roleArn": BUS}), E::RoleArn),
            (
                json!({"type": "aws_sqs", "queueUrl": QUEUE, "roleArn": other_role}),
                E::OtherAccount { target: "queue", role: "333333333333".into(), target_account: "222222222222".into() },
            ),
            (
                json!({"type": "aws_eventbridge", "eventBusArn": BUS, "roleArn": "arn:aws-cn:iam::222222222222:role/r"}),
                E::OtherPartition { field: "roleArn", partition: "aws-cn".into(), deployment: "aws".into() },
            ),
            (
                json!({"type": "aws_sqs", "queueUrl": "https://sqs.eu-west-1.amazonaws.com/111111111111/q", "roleArn": own_role}),
                E::OwnAccount,
            ),
            (
                json!({"type": "aws_sqs", "queueUrl": "http://127.0.0.1:5000/222222222222/q", "roleArn": ROLE}),
                E::LocalQueue,
            ),
        ];
        for (value, refused) in cases {
            assert_eq!(on_aws(value.clone()), Err(refused), "{value}");
        }
        let none = Destination::parse(
            &json!({"type": "aws_sqs", "queueUrl": QUEUE, "roleArn": ROLE}),
            &DestinationPolicy { sender_role: None, urls: &UrlPolicy::default() },
        );
        assert_eq!(none, Err(E::NotOffered));
    }

    #[test]
    fn a_destination_is_in_the_deployments_partition() {
        use InvalidDestination as E;
        let china = |value: Value| deployed_as("arn:aws-cn:iam::111111111111:role/d", value);
        let cn_queue = "https://sqs.cn-north-1.amazonaws.com.cn/222222222222/q";
        let cn_role = "arn:aws-cn:iam::222222222222:role/r";
        let cn_bus = "arn:aws-cn:events:cn-northwest-1:222222222222:event-bus/b";
        let in_china = json!({"type": "aws_sqs", "queueUrl": cn_queue, "roleArn": cn_role});
        assert!(china(in_china.clone()).is_ok());
        assert!(china(json!({"type": "aws_eventbridge", "eventBusArn": cn_bus, "roleArn": cn_role})).is_ok());
        let other = |field, partition: &str, deployment: &str| E::OtherPartition {
            field,
            partition: partition.into(),
            deployment: deployment.into(),
        };
        assert_eq!(on_aws(in_china), Err(other("roleArn", "aws-cn", "aws")));
        let error = on_aws(json!({"type": "aws_eventbridge", "eventBusArn": cn_bus, "roleArn": cn_role})).unwrap_err();
        assert_eq!(
            error.to_string(),
            "destination.roleArn is in the AWS partition aws-cn: this deployment delivers only within its own, aws"
        );
        assert_eq!(
            on_aws(json!({"type": "aws_sqs", "queueUrl": cn_queue, "roleArn": ROLE})),
            Err(other("queueUrl", "aws-cn", "aws"))
        );
        assert_eq!(
            china(json!({"type": "aws_sqs", "queueUrl": QUEUE, "roleArn": cn_role})),
            Err(other("queueUrl", "aws", "aws-cn"))
        );
        assert_eq!(
            china(json!({"type": "aws_eventbridge", "eventBusArn": BUS, "roleArn": cn_role})),
            Err(other("eventBusArn", "aws", "aws-cn"))
        );
        let gov_bus = "arn:aws-us-gov:events:us-gov-west-1:222222222222:event-bus/b";
        assert_eq!(
            on_aws(json!({"type": "aws_eventbridge", "eventBusArn": gov_bus, "roleArn": ROLE})),
            Err(other("eventBusArn", "aws-us-gov", "aws"))
        );
        let cn_bus_v2 = "arn:aws-cn:events:cn-north-1:222222222222:event-busv2/b/abcdefghij0123456789abcde";
        assert!(china(json!({"type": "aws_eventbus", "eventBusArn": cn_bus_v2, "roleArn": cn_role})).is_ok());
        assert_eq!(
            on_aws(json!({"type": "aws_eventbus", "eventBusArn": cn_bus_v2, "roleArn": ROLE})),
            Err(other("eventBusArn", "aws-cn", "aws"))
        );
        assert_eq!(
            china(json!({"type": "aws_eventbus", "eventBusArn": BUS_V2, "roleArn": cn_role})),
            Err(other("eventBusArn", "aws", "aws-cn"))
        );
    }

    #[test]
    fn regions_belong_to_one_partition_each_and_no_other_exists() {
        let partition = |region| Partition::of_region(region).map(|partition| partition.name);
        for (region, name) in [
            ("eu-west-1", "aws"),
            ("il-central-1", "aws"),
            ("mx-central-1", "aws"),
            ("cn-northwest-1", "aws-cn"),
            ("us-gov-east-1", "aws-us-gov"),
            ("us-iso-east-1", "aws-iso"),
            ("us-isob-east-1", "aws-iso-b"),
            ("eu-isoe-west-1", "aws-iso-e"),
            ("us-isof-south-1", "aws-iso-f"),
            ("eusc-de-east-1", "aws-eusc"),
        ] {
            assert_eq!(partition(region), Some(name), "{region}");
            assert_eq!(Partition::named(name).map(|partition| partition.name), Some(name));
        }
        for nowhere in
            ["zz-north-1", "xyz-north-1", "eu-west", "eu-west-x", "eu-west-1-a", "EU-west-1", "eusc-fr-east-1", ""]
        {
            assert_eq!(partition(nowhere), None, "{nowhere}");
        }
        assert!(Partition::named("aws-mars").is_none());
    }

    #[test]
    fn malformed_queue_urls_and_arns() {
        for bad in [
            "http://sqs.eu-west-1.amazonaws.com/222222222222/q",
            "https://sqs.eu-west-1.amazonaws.com:443/222222222222/q",
            "https://sqs.eu-west-1.amazonaws.com/222222222222/q?x=1",
            "https://sqs.eu-west-1.amazonaws.com/222222222222/q#f",
            "https://u@sqs.eu-west-1.amazonaws.com/222222222222/q",
            "https://SQS.eu-west-1.amazonaws.com/222222222222/q",
            "https://sqs.eu-west-1.amazonaws.com/222222222222/q/extra",
            "https://sqs.eu-west-1.amazonaws.com/22222222222/q",
            "https://sqs.eu-west-1.amazonaws.com/222222222222/",
            "https://sqs.eu-west-1.amazonaws.com/222222222222/q.name",
            "https://sqs.eu-west-1.amazonaws.com/222222222222/.fifo",
            &format!("https://sqs.eu-west-1.amazonaws.com/222222222222/{}", "q".repeat(81)),
            "https://sqs.eu-west-1.evil.com/222222222222/q",
            "https://sqs.evil.amazonaws.com/222222222222/q",
            "https://sqs.cn-north-1.amazonaws.com/222222222222/q",
            "https://sqs.eu-west-1.amazonaws.com.cn/222222222222/q",
            "https://sqs.us-gov-west-1.amazonaws.com.cn/222222222222/q",
            "https://sqs.zz-north-1.amazonaws.com/222222222222/q",
            "https://queue.example.com/222222222222/q",
            "ftp://127.0.0.1/222222222222/q",
            "/222222222222/q",
        ] {
            assert_eq!(QueueUrl::parse(bad), None, "{bad}");
        }
        assert!(
            QueueUrl::parse(&format!("https://sqs.eu-west-1.amazonaws.com/222222222222/{}", "q".repeat(80))).is_some()
        );
        assert!(QueueUrl::parse("https://sqs.cn-north-1.amazonaws.com.cn/222222222222/q").is_some());
        assert!(QueueUrl::parse("https://sqs.us-iso-east-1.c2s.ic.gov/222222222222/q").is_some());
        for bad in [
            "arn:aws:iam::222222222222:user/sender",
            "arn:aws:iam:eu-west-1:222222222222:role/sender",
            "arn:aws:sts::222222222222:role/sender",
            "arn:aws:iam::2222:role/sender",
            "arn:AWS:iam::222222222222:role/sender",
            "arn:aws-mars:iam::222222222222:role/sender",
            "arn:aws:iam::222222222222:role/",
            "arn:aws:iam::222222222222:role/a//b",
            "arn:aws:iam::222222222222:role/bad name",
            &format!("arn:aws:iam::222222222222:role/{}", "r".repeat(65)),
            "aws:iam::222222222222:role/sender",
        ] {
            assert_eq!(RoleArn::parse(bad), None, "{bad}");
        }
        assert!(RoleArn::parse(&format!("arn:aws:iam::222222222222:role/team/{}", "r".repeat(64))).is_some());
        for bad in [
            "arn:aws:events:eu-west-1:222222222222:rule/career",
            "arn:aws:events::222222222222:event-bus/career",
            "arn:aws:events:eu-west-1:222222222222:event-bus/",
            "arn:aws:events:eu-west-1:222222222222:event-bus/a b",
            "arn:aws:sqs:eu-west-1:222222222222:event-bus/career",
            // A region of another partition than the ARN's, or of none: as a queue URL's domain.
            "arn:aws:events:cn-north-1:222222222222:event-bus/career",
            "arn:aws-cn:events:eu-west-1:222222222222:event-bus/career",
            "arn:aws:events:us-gov-west-1:222222222222:event-bus/career",
            "arn:aws:events:zz-north-1:222222222222:event-bus/career",
        ] {
            assert_eq!(EventBusArn::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_local_stack_takes_its_emulator_and_its_own_account() {
        let emulator = "http://127.0.0.1:5000/111111111111/receiver";
        let own_role = "arn:aws:iam::111111111111:role/receiver";
        let local = on_local_stack(json!({"type": "aws_sqs", "queueUrl": emulator, "roleArn": own_role})).unwrap();
        let Destination::AwsSqs { queue_url, .. } = &local else { panic!("{local:?}") };
        assert_eq!(queue_url.region(), None);
        assert_eq!(queue_url.local_endpoint().as_deref(), Some("http://127.0.0.1:5000"));
        assert_eq!(
            on_aws(json!({"type": "aws_sqs", "queueUrl": emulator, "roleArn": own_role})),
            Err(InvalidDestination::LocalQueue)
        );
        // Only the allowed networks: the emulator's address, not any address.
        let elsewhere =
            json!({"type": "aws_sqs", "queueUrl": "http://10.0.0.1:5000/111111111111/q", "roleArn": own_role});
        assert_eq!(on_local_stack(elsewhere), Err(InvalidDestination::LocalQueue));
        // `http` needs ALLOW_HTTP_WEBHOOK_URLS.
        let sender = RoleArn::parse(SENDER).unwrap();
        let https_only = UrlPolicy { allow_http: false, ..UrlPolicy::local_stack() };
        let policy = DestinationPolicy { sender_role: Some(&sender), urls: &https_only };
        let value = json!({"type": "aws_sqs", "queueUrl": emulator, "roleArn": own_role});
        assert_eq!(Destination::parse(&value, &policy), Err(InvalidDestination::LocalQueue));
        // Other accounts are still checked.
        let mismatch = json!({"type": "aws_sqs", "queueUrl": emulator, "roleArn": ROLE});
        assert!(matches!(on_local_stack(mismatch), Err(InvalidDestination::OtherAccount { .. })));
    }

    #[test]
    fn a_change_keeps_the_type_and_passes_the_same_checks() {
        let sender = RoleArn::parse(SENDER).unwrap();
        let policy = DestinationPolicy { sender_role: Some(&sender), urls: &UrlPolicy::default() };
        let queue = on_aws(json!({"type": "aws_sqs", "queueUrl": QUEUE, "roleArn": ROLE})).unwrap();
        let change = |value: Value| DestinationChange::parse(&value).and_then(|c| queue.changed(&c, &policy));
        let new_role = "arn:aws:iam::222222222222:role/new-sender";
        let changed = change(json!({"roleArn": new_role})).unwrap();
        assert_eq!((changed.role_arn().as_str(), changed.target()), (new_role, QUEUE));
        let fifo = "https://sqs.eu-west-1.amazonaws.com/222222222222/q.fifo";
        let changed = change(json!({"type": "aws_sqs", "queueUrl": fifo})).unwrap();
        assert_eq!((changed.role_arn().as_str(), changed.target()), (ROLE, fifo));
        assert_eq!(change(json!({"type": "aws_eventbridge"})), Err(InvalidDestination::TypeChange));
        assert_eq!(change(json!({"eventBusArn": BUS})), Err(InvalidDestination::TypeChange));
        assert_eq!(change(json!({"externalId": "mine"})), Err(InvalidDestination::ExternalIdGiven));
        assert_eq!(
            change(json!({"queueUrl": "https://sqs.eu-west-1.amazonaws.com/x/q"})),
            Err(InvalidDestination::QueueUrl)
        );
        assert!(matches!(
            change(json!({"roleArn": "arn:aws:iam::333333333333:role/r"})),
            Err(InvalidDestination::OtherAccount { .. })
        ));
        assert_eq!(
            change(
                json!({"roleArn": "arn:aws:iam::111111111111:role/r", "queueUrl": "https://sqs.eu-west-1.amazonaws.com/111111111111/q"})
            ),
            Err(InvalidDestination::OwnAccount)
        );
    }

    #[test]
    fn a_custom_event_bus_change_is_told_by_its_arn_and_keeps_the_type() {
        let sender = RoleArn::parse(SENDER).unwrap();
        let policy = DestinationPolicy { sender_role: Some(&sender), urls: &UrlPolicy::default() };
        let bus = on_aws(json!({"type": "aws_eventbus", "eventBusArn": BUS_V2, "roleArn": ROLE})).unwrap();
        let change = |value: Value| DestinationChange::parse(&value).and_then(|c| bus.changed(&c, &policy));
        let other = BUS_V2.replace("career.events-1", "other");
        let changed = change(json!({"eventBusArn": other})).unwrap();
        assert_eq!(
            (changed.kind(), changed.target(), changed.role_arn().as_str()),
            (DestinationType::AwsEventBus, other.as_str(), ROLE)
        );
        let new_role = "arn:aws:iam::222222222222:role/new-sender";
        assert_eq!(change(json!({"roleArn": new_role})).unwrap().role_arn().as_str(), new_role);
        assert_eq!(
            change(json!({"type": "aws_eventbus", "eventBusArn": "arn:x"})),
            Err(InvalidDestination::EventBusV2Arn)
        );
        let malformed_v2 = BUS_V2.replace("abcdefghij0123456789abcde", "short");
        assert_eq!(change(json!({"eventBusArn": malformed_v2})), Err(InvalidDestination::EventBusV2Arn));
        assert_eq!(change(json!({"eventBusArn": BUS})), Err(InvalidDestination::TypeChange), "an EventBridge bus");
        assert_eq!(change(json!({"type": "aws_eventbridge"})), Err(InvalidDestination::TypeChange));
        assert_eq!(change(json!({"queueUrl": QUEUE})), Err(InvalidDestination::TypeChange));
    }

    #[test]
    fn the_stored_form_round_trips_and_the_external_id_is_long_and_fresh() {
        let queue = on_aws(json!({"type": "aws_sqs", "queueUrl": QUEUE, "roleArn": ROLE})).unwrap();
        let aws = AwsDestination::new(queue);
        assert!(aws.external_id.as_str().len() >= 32);
        assert_ne!(AwsDestination::new(aws.destination.clone()).external_id, aws.external_id);
        let stored = serde_json::to_value(&aws).unwrap();
        assert_eq!(
            stored,
            json!({"type": "aws_sqs", "queueUrl": QUEUE, "roleArn": ROLE, "externalId": aws.external_id.as_str()})
        );
        assert_eq!(serde_json::from_value::<AwsDestination>(stored).unwrap(), aws);
        let mixed = json!({"type": "aws_eventbridge", "queueUrl": QUEUE, "roleArn": ROLE, "externalId": aws.external_id.as_str()});
        assert!(serde_json::from_value::<AwsDestination>(mixed).is_err());
        for (kind, bus) in [("aws_eventbridge", BUS), ("aws_eventbus", BUS_V2)] {
            let stored =
                json!({"type": kind, "eventBusArn": bus, "roleArn": ROLE, "externalId": aws.external_id.as_str()});
            let read = serde_json::from_value::<AwsDestination>(stored.clone()).unwrap();
            assert_eq!((read.destination.kind().as_str(), read.destination.target()), (kind, bus));
            assert_eq!(serde_json::to_value(&read).unwrap(), stored);
        }
        for (kind, bus) in [("aws_eventbridge", BUS_V2), ("aws_eventbus", BUS)] {
            let swapped =
                json!({"type": kind, "eventBusArn": bus, "roleArn": ROLE, "externalId": aws.external_id.as_str()});
            assert!(serde_json::from_value::<AwsDestination>(swapped).is_err(), "{kind} with {bus}");
        }
    }

    #[test]
    fn session_names_name_the_subscription_within_sts_limits() {
        let id = SubscriptionId::generate();
        let name = session_name(&id);
        assert!(name.ends_with(id.as_str()) && (2..=64).contains(&name.len()), "{name}");
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b)), "{name}");
    }
}
