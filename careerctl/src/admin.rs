//! The admin commands of contract section 8. Each returns a typed result; `main` prints it
//! as the JSON object the contract shows.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use aws_sdk_dynamodb::Client as DynamoDb;
use aws_sdk_sqs::types::{BatchResultErrorEntry, Message, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client as Sqs;
use career_core::alerts::{Alert, Category, Severity};
use career_core::clock::Timestamp;
use career_core::config::{Settings, TableNames};
use career_core::credentials::{ApiKey, KeyRecord, Scope, Scopes};
use career_core::delivery::log::{DeliveryRecord, DeliveryStatus};
use career_core::delivery::plan::{ProbeSchedule, SubscriptionTask};
use career_core::delivery::DeliveryMessage;
use career_core::ids::{AlertId, AssessmentId, DeliveryId, ProfileId, SubscriptionId, UserId, MAX_PLATFORM_ID_LEN};
use career_core::store::alerts::AlertTable;
use career_core::store::deliveries::DeliveryTable;
use career_core::store::keys::KeyTable;
use career_core::store::profiles_assessments::PlatformTables;
use career_core::store::sealing::Sealer;
use career_core::store::webhooks::{NewSecrets, Replaced, WebhookTable};
use career_core::webhooks::rotation::SigningSecrets;
use career_core::webhooks::{Health, SecretsAtRest};
use futures_util::StreamExt;
use serde::Serialize;

pub struct Admin {
    dynamodb: DynamoDb,
    tables: TableNames,
}

/// `keys create`: the key, shown this once.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedKey {
    pub key: String,
    pub user_id: UserId,
    pub scopes: Vec<&'static str>,
    /// Only for a key that expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
}

/// How long a portal link works by default, and at most (contract section 14), in minutes.
pub const PORTAL_LINK_DEFAULT_MINUTES: u32 = 60;
pub const PORTAL_LINK_MAX_MINUTES: u32 = 1440;
/// The longest lifetime `keys create --expires-in-minutes` gives a key: a year.
pub const MAX_KEY_LIFETIME_MINUTES: u32 = 365 * 24 * 60;

/// `portal-link`: a link that signs its holder in to the webhook portal.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortalLink {
    pub url: String,
    pub user_id: UserId,
    pub expires_at: Timestamp,
}

/// `keys revoke`.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Revoked {
    pub revoked: bool,
}

/// `profiles update`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileUpdate {
    pub user_id: UserId,
    pub profile_id: ProfileId,
}

/// `assessments complete`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AssessmentCompletion {
    pub user_id: UserId,
    pub assessment_id: AssessmentId,
}

/// The probes' schedule the settings give (`WEBHOOK_PROBE_AFTER_SECONDS`, `WEBHOOK_PROBE_FOR_SECONDS`).
pub fn probe_schedule(settings: &Settings) -> ProbeSchedule {
    ProbeSchedule { after: settings.probe_after, lasting: settings.probe_for }
}

/// `webhooks arm-probes`: how many subscriptions disabled for failing before probes got their
/// probes, and how many were disabled longer ago than probing lasts (never probed).
#[derive(Debug, Default, Serialize)]
pub struct ArmedProbes {
    pub armed: usize,
    pub ended: usize,
}

/// `webhooks seal-secrets`: how many plain-text secrets were sealed.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Sealed {
    pub sealed: usize,
}

/// `deliveries list`: one page of a subscription's delivery log.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryLog {
    pub user_id: UserId,
    pub subscription_id: SubscriptionId,
    pub deliveries: Vec<DeliveryRecord>,
    /// The `--after` of the next page, if there is one.
    pub next_after: Option<DeliveryId>,
}

/// `tables create`: the tables that were missing.
#[derive(Debug, Serialize)]
pub struct CreatedTables {
    pub created: Vec<String>,
}

/// `deliveries import`: how many records were copied, and how many deliveries had one already.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Imported {
    pub imported: usize,
    pub present: usize,
}

/// How many records `deliveries import` writes at once.
const IMPORTS_AT_ONCE: usize = 16;

/// `deliveries redrive`: how many dead-lettered deliveries went back, and how many were
/// dropped because their delivery had moved on since (retried by hand, recovered, or gone).
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Redriven {
    pub moved: usize,
    pub dropped: usize,
}

pub struct NewAlert {
    pub title: String,
    pub message: String,
    pub category: Category,
    pub severity: Severity,
}

impl Admin {
    pub fn new(dynamodb: DynamoDb, tables: TableNames) -> Self {
        Self { dynamodb, tables }
    }

    fn keys(&self) -> KeyTable {
        KeyTable::new(self.dynamodb.clone(), &self.tables.keys)
    }

    fn platform(&self) -> PlatformTables {
        PlatformTables::new(self.dynamodb.clone(), &self.tables.profiles, &self.tables.assessments)
    }

    /// Issues a key; with `expires_at`, one that is refused from then on.
    pub async fn create_key(
        &self,
        user_id: impl AsRef<str>,
        scopes: Scopes,
        label: Option<String>,
        expires_at: Option<Timestamp>,
    ) -> anyhow::Result<IssuedKey> {
        let user_id = user(user_id.as_ref())?;
        let key = ApiKey::generate();
        let stored = KeyRecord {
            hash: key.hash(),
            user_id: user_id.clone(),
            scopes,
            label,
            created_at: Timestamp::now(),
            revoked_at: None,
            expires_at,
        };
        self.keys().insert(&stored).await.context("storing the key")?;
        Ok(IssuedKey { key: key.expose().to_owned(), user_id, scopes: scopes.names(), expires_at })
    }

    /// Issues a key with `read:webhooks` and `write:webhooks` that expires after `minutes`,
    /// and the portal link at `api_url` that carries it (in the fragment, which browsers do
    /// not send to the server).
    pub async fn portal_link(
        &self,
        user_id: impl AsRef<str>,
        api_url: &str,
        minutes: u32,
    ) -> anyhow::Result<PortalLink> {
        let portal = portal_url(api_url)?;
        let scopes = [Scope::ReadWebhooks, Scope::WriteWebhooks].into_iter().collect();
        let expires_at = minutes_from_now(minutes);
        let issued = self.create_key(user_id, scopes, Some("portal link".into()), Some(expires_at)).await?;
        Ok(PortalLink { url: format!("{portal}#key={}", issued.key), user_id: issued.user_id, expires_at })
    }

    pub async fn revoke_key(&self, key: &str) -> anyhow::Result<Revoked> {
        let key = ApiKey::parse(key.trim()).context("--key is not an API key (cak_ followed by 43 characters)")?;
        match self.keys().revoke(&key.hash(), Timestamp::now()).await.context("revoking the key")? {
            true => Ok(Revoked { revoked: true }),
            false => bail!("no such key"),
        }
    }

    pub async fn create_alert(&self, user_id: impl AsRef<str>, new: NewAlert) -> anyhow::Result<Alert> {
        let user_id = user(user_id.as_ref())?;
        let alert = Alert {
            id: AlertId::generate(),
            category: new.category,
            severity: new.severity,
            title: non_empty("--title", &new.title)?.to_owned(),
            message: new.message,
            created_at: Timestamp::now(),
            read: false,
            read_at: None,
            dismissed: false,
            dismissed_at: None,
        };
        let table = AlertTable::new(self.dynamodb.clone(), &self.tables.alerts);
        table.insert(&user_id, &alert).await.context("storing the alert")?;
        Ok(alert)
    }

    /// Changes the user's profile (creating one on first use), so a `profile.updated` follows.
    pub async fn update_profile(&self, user_id: impl AsRef<str>) -> anyhow::Result<ProfileUpdate> {
        self.update_profile_in_trace(user_id, None).await
    }

    /// [`Admin::update_profile`] as a write made in the trace `traceparent` (set on the item as
    /// given, for the event's deliveries to continue: contract section 19).
    pub async fn update_profile_in_trace(
        &self,
        user_id: impl AsRef<str>,
        traceparent: Option<&str>,
    ) -> anyhow::Result<ProfileUpdate> {
        let user_id = user(user_id.as_ref())?;
        let platform = self.platform();
        let existing = platform.first_profile_id(&user_id).await.context("reading the profile")?;
        let profile_id = existing.unwrap_or_else(ProfileId::generate);
        let touched = platform.touch_profile(&user_id, &profile_id, Timestamp::now(), traceparent).await;
        touched.context("updating the profile")?;
        Ok(ProfileUpdate { user_id, profile_id })
    }

    /// Completes an assessment (a new one unless `assessment_id` is given).
    pub async fn complete_assessment(
        &self,
        user_id: impl AsRef<str>,
        assessment_id: Option<String>,
    ) -> anyhow::Result<AssessmentCompletion> {
        let user_id = user(user_id.as_ref())?;
        let assessment_id = match assessment_id {
            Some(text) => AssessmentId::parse(text.trim()).with_context(|| {
                format!(
                    "--assessment must be an assessment id: not empty, at most {MAX_PLATFORM_ID_LEN} bytes, no control characters"
                )
            })?,
            None => AssessmentId::generate(),
        };
        self.platform()
            .complete_assessment(&user_id, &assessment_id, Timestamp::now())
            .await
            .context("completing the assessment")?;
        Ok(AssessmentCompletion { user_id, assessment_id })
    }

    /// Seals every webhook secret still stored in plain text (subscriptions created before
    /// secrets were sealed), each in one conditional write; the secret itself is unchanged.
    pub async fn seal_plain_secrets(&self, sealer: &Sealer) -> anyhow::Result<Sealed> {
        let webhooks = WebhookTable::new(self.dynamodb.clone(), &self.tables.webhooks);
        let plain = webhooks.plain_secrets().await.context("finding plain-text secrets")?;
        let mut sealed = 0;
        for subscription in plain {
            let SecretsAtRest::Plain(secret) = &subscription.secrets else { continue };
            let secrets = SigningSecrets::new(secret.clone(), false);
            let (user, id) = (&subscription.user_id, &subscription.id);
            let new_sealed =
                sealer.seal(user, id, &secrets).await.with_context(|| format!("sealing the secret of {id}"))?;
            let new = NewSecrets { expected: &subscription.secrets, sealed: &new_sealed, public_keys: None };
            let replaced = webhooks.replace_secrets(user, id, &new).await;
            // A rotation in the meantime sealed it already.
            if let Replaced::Yes(_) = replaced.with_context(|| format!("storing the sealed secret of {id}"))? {
                sealed += 1;
            }
        }
        Ok(Sealed { sealed })
    }

    /// Arms the probes of every subscription disabled for failing before this version probed
    /// them (contract section 20): each gets its schedule's next slot from `now` (one
    /// conditional write, then its probe marker in its due shard, as a disabling writes them),
    /// unless probing would have ended by now. One Scan of the webhooks table: an upgrade's
    /// step, never a scheduled one.
    pub async fn arm_probes(&self, schedule: &ProbeSchedule, now: Timestamp) -> anyhow::Result<ArmedProbes> {
        let webhooks = WebhookTable::new(self.dynamodb.clone(), &self.tables.webhooks);
        let deliveries = DeliveryTable::new(self.dynamodb.clone(), &self.tables.deliveries);
        let found = webhooks.unprobed_failing().await.context("finding subscriptions disabled for failing")?;
        let mut armed = ArmedProbes::default();
        for subscription in found {
            let Health::Disabled { at: disabled_at, .. } = subscription.health else { continue };
            let Some(slot) = schedule.resumed(disabled_at, now) else {
                armed.ended += 1;
                continue;
            };
            let (user, id) = (&subscription.user_id, &subscription.id);
            let arming = webhooks.arm_probe(user, id, disabled_at, slot).await;
            // Armed meanwhile by another run, or enabled, deleted or disabled again since.
            if arming.with_context(|| format!("arming the probes of {id}"))? {
                let marked = deliveries.mark_task((user, id), SubscriptionTask::Probe, slot.0).await;
                marked.with_context(|| format!("marking the probe of {id}"))?;
                armed.armed += 1;
            }
        }
        Ok(armed)
    }

    /// A subscription's delivery log, newest first: `limit` records (of one `status`, if
    /// given) after the delivery `after`.
    pub async fn list_deliveries(
        &self,
        subscription_id: &str,
        status: Option<DeliveryStatus>,
        limit: u32,
        after: Option<&str>,
    ) -> anyhow::Result<DeliveryLog> {
        let no_subscription = || anyhow!("no subscription {subscription_id}");
        let subscription_id = SubscriptionId::parse(subscription_id.trim()).ok_or_else(no_subscription)?;
        let after = match after {
            Some(id) => {
                Some(DeliveryId::parse(id.trim()).with_context(|| format!("--after {id} is not a delivery id"))?)
            }
            None => None,
        };
        let webhooks = WebhookTable::new(self.dynamodb.clone(), &self.tables.webhooks);
        let owner = webhooks.owner_of(&subscription_id).await.context("finding the subscription")?;
        let user_id = owner.ok_or_else(no_subscription)?;
        let deliveries = DeliveryTable::new(self.dynamodb.clone(), &self.tables.deliveries);
        let page =
            deliveries.list(&subscription_id, status, limit, after.as_ref()).await.context("listing the deliveries")?;
        Ok(DeliveryLog { user_id, subscription_id, deliveries: page.deliveries, next_after: page.last_id_if_more })
    }

    /// Copies the records of `from`, a deliveries table of the layout before the log was keyed
    /// by delivery (a backup restored into a table), into the stack's deliveries table; a
    /// delivery that has a record there already keeps it. Progress on stderr.
    pub async fn import_deliveries(&self, from: &str) -> anyhow::Result<Imported> {
        let deliveries = DeliveryTable::new(self.dynamodb.clone(), &self.tables.deliveries);
        let (mut imported, mut start) = (Imported { imported: 0, present: 0 }, None);
        loop {
            let page = self.dynamodb.scan().table_name(from).set_exclusive_start_key(start).send().await;
            let page = page.with_context(|| format!("reading {from}"))?;
            let writes = page.items.unwrap_or_default().into_iter().map(|item| deliveries.import(item));
            let written: Vec<_> = futures_util::stream::iter(writes).buffer_unordered(IMPORTS_AT_ONCE).collect().await;
            for new in written {
                match new.context("writing a record")? {
                    true => imported.imported += 1,
                    false => imported.present += 1,
                }
            }
            eprintln!("==> {} records imported, {} present already", imported.imported, imported.present);
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(imported);
            }
        }
    }

    pub async fn create_tables(&self) -> anyhow::Result<CreatedTables> {
        let template = career_template::Template::shipped();
        let (created, _) = career_template::tables::create_tables(&template, &self.dynamodb, &self.tables).await?;
        Ok(CreatedTables { created })
    }
}

impl Admin {
    /// Moves every message of the dead-letter queue `from` back to the retry lane `to`, where
    /// each starts the retry schedule again in its record's next generation (contract section
    /// 12). A message whose record moved on since it was dead-lettered (a manual retry or a
    /// recovery, or the record is gone) is dropped unsent. A message leaves `from` only once
    /// `to` has it, or once it is known to be stale.
    pub async fn redrive(&self, sqs: &Sqs, from: &str, to: &str) -> anyhow::Result<Redriven> {
        let deliveries = DeliveryTable::new(self.dynamodb.clone(), &self.tables.deliveries);
        let mut redriven = Redriven { moved: 0, dropped: 0 };
        loop {
            let messages = receive_dead_letters(sqs, from).await?;
            if messages.is_empty() {
                return Ok(redriven);
            }
            let (mut going, mut stale) = (Vec::new(), Vec::new());
            for message in &messages {
                match restarted(&deliveries, message.body.as_deref().unwrap_or_default()).await? {
                    Some(restarted) => going.push((message, restarted)),
                    None => stale.push(message),
                }
            }
            let (moved, refused) = send_restarted(sqs, to, &going).await?;
            delete_messages(sqs, from, moved.iter().chain(&stale).copied()).await?;
            redriven.moved += moved.len();
            redriven.dropped += stale.len();
            if let Some(refused_first) = refused.first() {
                let reason = refused_first.message.as_deref().unwrap_or_default();
                bail!("moved {}; the --to queue refused {} messages: {reason}", redriven.moved, refused.len());
            }
        }
    }
}

/// Up to ten messages of the dead-letter queue `from`, out of sight long enough to be moved
/// and back in sight if the move fails.
async fn receive_dead_letters(sqs: &Sqs, from: &str) -> anyhow::Result<Vec<Message>> {
    let received = sqs
        .receive_message()
        .queue_url(from)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .visibility_timeout(60)
        .send()
        .await
        .context("receiving from the dead-letter queue")?;
    Ok(received.messages.unwrap_or_default())
}

/// Sends each restarted delivery to the retry lane `to`. Returns the messages whose delivery
/// the lane took, and the entries it refused.
async fn send_restarted<'m>(
    sqs: &Sqs,
    to: &str,
    going: &[(&'m Message, DeliveryMessage)],
) -> anyhow::Result<(Vec<&'m Message>, Vec<BatchResultErrorEntry>)> {
    if going.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let entries: Vec<SendMessageBatchRequestEntry> = going
        .iter()
        .enumerate()
        .map(|(i, (_, restarted))| {
            SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(serde_json::to_string(restarted).expect("messages serialize"))
                .build()
                .expect("entry has id and body")
        })
        .collect();
    let output = sqs
        .send_message_batch()
        .queue_url(to)
        .set_entries(Some(entries))
        .send()
        .await
        .context("sending to the --to queue (the retry lane)")?;
    let moved = output.successful.iter().filter_map(|entry| going.get(entry.id.parse::<usize>().ok()?));
    Ok((moved.map(|(message, _)| *message).collect(), output.failed))
}

/// Deletes `messages` (moved, or known to be stale) from the queue `from`.
async fn delete_messages<'m>(sqs: &Sqs, from: &str, messages: impl Iterator<Item = &'m Message>) -> anyhow::Result<()> {
    let done = career_core::aws::queue::delete_entries(messages.map(|message| message.receipt_handle.as_deref()));
    if done.is_empty() {
        return Ok(());
    }
    sqs.delete_message_batch()
        .queue_url(from)
        .set_entries(Some(done))
        .send()
        .await
        .context("deleting moved messages")?;
    Ok(())
}

/// The message that sends a dead-lettered delivery again: its record restarted in the next
/// generation. `None` when the message is unreadable or its record moved on since.
async fn restarted(deliveries: &DeliveryTable, body: &str) -> anyhow::Result<Option<DeliveryMessage>> {
    let Ok(message) = serde_json::from_str::<DeliveryMessage>(body) else { return Ok(None) };
    let stored = deliveries.get(&message.subscription_id, &message.delivery_id).await;
    let stored = stored.context("reading the delivery record")?;
    let Some(stored) =
        stored.filter(|s| s.generation == message.generation && s.record.status == DeliveryStatus::Failed)
    else {
        return Ok(None);
    };
    let restarted = deliveries
        .restart(&stored, Some(DeliveryStatus::Failed), Timestamp::now())
        .await
        .context("restarting the delivery record")?;
    restarted.map(|r| r.message().context("reading the delivery record's body")).transpose()
}

/// The moment `minutes` from now: when a key issued now for that long expires.
pub fn minutes_from_now(minutes: u32) -> Timestamp {
    Timestamp::now() + Duration::from_secs(u64::from(minutes) * 60)
}

/// The portal's address below the API's base URL (`--api-url`, `CAREER_API_URL`), which may
/// have a path (an API Gateway stage) but no query, fragment or user-info.
fn portal_url(api_url: &str) -> anyhow::Result<String> {
    let refused = |why: &str| anyhow!("--api-url (or CAREER_API_URL) {why}: {:?}", api_url);
    let url = url::Url::parse(api_url.trim()).map_err(|e| refused(&format!("is not an absolute URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(refused("must be an http or https URL with a host"));
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
        return Err(refused("must have no query, fragment or user-info"));
    }
    Ok(format!("{}/portal", url.as_str().trim_end_matches('/')))
}

/// `--user` as a user id (surrounding blanks dropped).
fn user(text: &str) -> anyhow::Result<UserId> {
    UserId::parse(text.trim()).with_context(|| {
        format!(
            "--user must be a user id: not empty, at most {} bytes, no control characters, not starting with #",
            UserId::MAX_LEN
        )
    })
}

fn non_empty<'a>(flag: &str, value: &'a str) -> anyhow::Result<&'a str> {
    let value = value.trim();
    if value.is_empty() {
        bail!("{flag} must not be empty");
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_portal_lies_below_the_api_url() {
        for (api, portal) in [
            ("http://127.0.0.1:3000", "http://127.0.0.1:3000/portal"),
            ("http://127.0.0.1:3000/", "http://127.0.0.1:3000/portal"),
            (
                "https://abc.execute-api.us-east-1.amazonaws.com/prod/",
                "https://abc.execute-api.us-east-1.amazonaws.com/prod/portal",
            ),
            (" https://API.example.com ", "https://api.example.com/portal"),
        ] {
            assert_eq!(portal_url(api).unwrap(), portal, "{api}");
        }
        for bad in [
            "",
            "127.0.0.1:3000",
            "ftp://example.com",
            "https://example.com/?x=1",
            "https://example.com/#f",
            "https://u:p@example.com",
        ] {
            let refused = portal_url(bad).expect_err(bad).to_string();
            assert!(refused.starts_with("--api-url (or CAREER_API_URL) "), "{refused}");
        }
    }
}
