//! Benchmark 8, Secrets at rest: what sealing the webhook secrets adds to a function instance's
//! first delivery (reading and decrypting the data key) and to every delivery (opening the
//! sealed secrets and signing both headers), how many KMS calls that takes, and what an
//! Ed25519 key pair (the `v1a` signature of contract section 16) adds beside the HMACs.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use career_core::clock::Timestamp;
use career_core::config::Settings;
use career_core::delivery::{DeliveryMessage, SignedDelivery};
use career_core::events::Event;
use career_core::ids::{SubscriptionId, UserId};
use career_core::store::sealing::Sealer;
use career_core::store::webhooks::WebhookTable;
use career_core::webhooks::rotation::{GracePeriod, SigningSecrets};
use career_core::webhooks::signing;
use career_core::webhooks::{SecretsAtRest, Subscription, WebhookSecret};
use career_service::pipeline::Pipeline;
use career_service::{clients_logging_kms, typed};

use crate::counting::Calls;
use crate::report::{Row, Section};
use crate::stats::{fine, ratio, summarize, time_each, Summary};
use crate::{progress, Bench};

pub const TITLE: &str = "Secrets at rest";
const COLD_STARTS: usize = 30;

/// A fresh instance's first opening of the secrets, against the `GetItem` every delivery makes.
struct FirstOpenings {
    first: Summary,
    get: Summary,
    most_kms_calls: usize,
}

/// One warm instance's openings, of secrets without and with a key pair.
struct WarmOpenings {
    secrets: SigningSecrets,
    open: Summary,
    open_with_key: Summary,
    kms_calls: usize,
}

/// Signing one delivery, as the seed did and as now, without and with `v1a`.
struct Signing {
    seed_only: Summary,
    one: Summary,
    both: Summary,
    ed25519_only: Summary,
    one_with_key: Summary,
    both_with_keys: Summary,
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let pipeline = Pipeline::start(false).await;
    let settings = pipeline.settings().clone();
    let (user, id): (UserId, SubscriptionId) = {
        let user = career_service::unique_user();
        // Created through the webhooks function: the data key exists and the secrets are sealed.
        let (id, _) =
            pipeline.subscribe(&user, &format!("{}/unused", career_service::sink_url()), &["profile.updated"]).await;
        (typed(user), typed(id))
    };
    let table = WebhookTable::new(career_service::dynamodb(), &settings.tables.webhooks);
    let stored = table.get(&user, &id).await.map_err(|e| e.to_string())?.ok_or("the subscription is missing")?;

    progress(format!("   {COLD_STARTS} fresh instances: first opening of a subscription's secrets"));
    let cold = first_openings(&settings, &table, &stored).await?;
    let warm_n = bench.requests * 10;
    progress(format!("   {warm_n} warm openings and signings"));
    let warm = warm_openings(&settings, &stored, warm_n).await?;
    let message = DeliveryMessage::new(&event(&user), &user, &id);
    let signing = time_signing(&message, &warm.secrets, warm_n);
    Ok(render(&cold, &warm, &signing, warm_n))
}

async fn first_openings(
    settings: &Settings,
    table: &WebhookTable,
    stored: &Subscription,
) -> Result<FirstOpenings, String> {
    let (mut first_opens, mut gets, mut kms_calls) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..COLD_STARTS {
        // The GetItem of the subscription that every delivery makes anyway: the baseline.
        let started = Instant::now();
        table.get(&stored.user_id, &stored.id).await.map_err(|e| e.to_string())?;
        gets.push(started.elapsed());
        let calls = Calls::default();
        let clients = clients_logging_kms(&calls);
        let sealer = Sealer::new(&clients, settings).map_err(|e| e.to_string())?;
        let started = Instant::now();
        sealer.open(stored).await.map_err(|e| e.to_string())?;
        first_opens.push(started.elapsed());
        kms_calls.push(calls.since(0).len());
    }
    Ok(FirstOpenings {
        first: summarize(&first_opens),
        get: summarize(&gets),
        most_kms_calls: kms_calls.iter().copied().max().unwrap_or_default(),
    })
}

/// `n` openings by one instance after its first, of the stored secrets and of the same with a
/// key pair (sealed by this instance, as the webhooks function does when the option is turned
/// on), with the KMS calls they make.
async fn warm_openings(settings: &Settings, stored: &Subscription, n: usize) -> Result<WarmOpenings, String> {
    let calls = Calls::default();
    let clients = clients_logging_kms(&calls);
    let sealer = Sealer::new(&clients, settings).map_err(|e| e.to_string())?;
    let secrets = sealer.open(stored).await.map_err(|e| e.to_string())?;
    let keyed = secrets.with_asymmetric_signing(true);
    let sealed = sealer.seal(&stored.user_id, &stored.id, &keyed).await.map_err(|e| e.to_string())?;
    let with_key =
        Subscription { secrets: SecretsAtRest::Sealed(sealed), public_keys: keyed.public_keys(), ..stored.clone() };
    let after_first = calls.since(0).len();
    let (mut opens, mut keyed_opens) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let started = Instant::now();
        sealer.open(stored).await.map_err(|e| e.to_string())?;
        opens.push(started.elapsed());
        let started = Instant::now();
        sealer.open(&with_key).await.map_err(|e| e.to_string())?;
        keyed_opens.push(started.elapsed());
    }
    Ok(WarmOpenings {
        secrets,
        open: summarize(&opens),
        open_with_key: summarize(&keyed_opens),
        kms_calls: calls.since(0).len() - after_first,
    })
}

fn time_signing(message: &DeliveryMessage, secrets: &SigningSecrets, n: usize) -> Signing {
    let time = |run: &dyn Fn()| time_each(n, run);
    let body = serde_json::to_vec(&message.event).expect("events serialize");
    let (at, epoch) = (Timestamp::from_unix_seconds(1_795_766_400), Timestamp::from_unix_seconds(0));
    let one = SigningSecrets::new(secrets.current.clone(), false);
    let rotated = one.rotated(WebhookSecret::generate(), epoch, GracePeriod::DEFAULT);
    let keyed = one.with_asymmetric_signing(true);
    let keyed_rotated = keyed.rotated(WebhookSecret::generate(), epoch, GracePeriod::DEFAULT);
    let key = keyed.current_key.as_ref().expect("a key pair");
    let id = message.delivery_id.as_str();
    Signing {
        seed_only: time(&|| {
            std::hint::black_box(signing::sign_hex(secrets.current.expose(), &body));
        }),
        one: time(&|| {
            std::hint::black_box(SignedDelivery::new(message, &one.active_at(epoch), at));
        }),
        both: time(&|| {
            std::hint::black_box(SignedDelivery::new(message, &rotated.active_at(epoch), at));
        }),
        ed25519_only: time(&|| {
            std::hint::black_box(signing::sign_asymmetric(key, id, at.unix_seconds(), &body));
        }),
        one_with_key: time(&|| {
            std::hint::black_box(SignedDelivery::new(message, &keyed.active_at(epoch), at));
        }),
        both_with_keys: time(&|| {
            std::hint::black_box(SignedDelivery::new(message, &keyed_rotated.active_at(epoch), at));
        }),
    }
}

fn render(cold: &FirstOpenings, warm: &WarmOpenings, signing: &Signing, warm_n: usize) -> Section {
    let (first, get, open, one) = (&cold.first, &cold.get, &warm.open, &signing.one);
    let (most_kms_calls, warm_kms_calls) = (cold.most_kms_calls, warm.kms_calls);
    let per_delivery = open.median + one.median;
    let per_delivery_v1a = warm.open_with_key.median + signing.one_with_key.median;
    let rows = vec![
        Row::new(
            "KMS calls per cold start (first use of a secret)",
            "≤ 1",
            format!("{most_kms_calls} (most over {COLD_STARTS} fresh instances)"),
            Some(most_kms_calls <= 1),
        ),
        Row::new(
            "KMS calls per delivery once warm",
            "0",
            format!("{warm_kms_calls} over {} openings (half with a key pair)", 2 * warm_n),
            Some(warm_kms_calls == 0),
        ),
        Row::new(
            "Extra cost of an instance's first delivery",
            "(reported)",
            format!(
                "{} (GetItem + KMS Decrypt) vs {} for the GetItem every delivery makes",
                fine(first.median),
                fine(get.median)
            ),
            None,
        ),
        Row::new(
            "Extra cost per delivery",
            "(reported)",
            format!(
                "{} ({} open + {} signing both headers), {:.1} % of that GetItem",
                fine(per_delivery),
                fine(open.median),
                fine(one.median),
                100.0 * ratio(per_delivery, get.median)
            ),
            None,
        ),
        Row::new(
            "Extra cost per delivery with v1a (asymmetric signing on)",
            "(reported)",
            format!(
                "{} ({} open + {} signing v1 and v1a), {} more than without; the Ed25519 signature alone {}",
                fine(per_delivery_v1a),
                fine(warm.open_with_key.median),
                fine(signing.one_with_key.median),
                fine(per_delivery_v1a.saturating_sub(per_delivery)),
                fine(signing.ed25519_only.median)
            ),
            None,
        ),
    ];
    let mut md = String::new();
    let _ = writeln!(
        md,
        "The data key of the sealed secrets is decrypted once per function instance, on its first use of a \
         secret (`career_core::store::sealing::Sealer`). Measured in-process against DynamoDB Local and moto's KMS on \
         loopback, with KMS clients that count their calls (`tests/support/calls.rs`).\n"
    );
    let _ = writeln!(md, "| What | Median | p90 | Min |\n|---|---|---|---|");
    let mut line = |what: &str, s: &Summary| {
        let _ = writeln!(md, "| {what} | {} | {} | {} |", fine(s.median), fine(s.p90), fine(s.min));
    };
    line(&format!("First opening in a fresh instance: GetItem of the data key + KMS Decrypt + AES-GCM ({COLD_STARTS} instances)"), first);
    line("GetItem of the subscription (every delivery makes it; the baseline)", get);
    line(&format!("Warm opening: AES-256-GCM and JSON ({warm_n})"), open);
    line(&format!("Signing, seed header only (what the seed did) ({warm_n})"), &signing.seed_only);
    line(&format!("Signing, seed and Standard Webhooks headers, one secret ({warm_n})"), one);
    line(&format!("Signing, both headers, two secrets (a grace period) ({warm_n})"), &signing.both);
    line(&format!("Warm opening of secrets with an Ed25519 key pair ({warm_n})"), &warm.open_with_key);
    line(&format!("Ed25519 `v1a` signature alone, beside the HMAC above ({warm_n})"), &signing.ed25519_only);
    line(&format!("Signing, both headers and v1a, one secret and key ({warm_n})"), &signing.one_with_key);
    line(
        &format!("Signing, both headers and v1a, two secrets and keys (a grace period) ({warm_n})"),
        &signing.both_with_keys,
    );
    let _ = writeln!(
        md,
        "\nKMS calls: at most {most_kms_calls} per fresh instance (a `Decrypt`; the webhooks function's very first \
         use in a deployment makes a `GenerateDataKey` instead), and {warm_kms_calls} over {} warm openings. \
         Reading: an instance pays one GetItem and one KMS round trip once, {} here (on AWS a KMS `Decrypt` in the \
         same region takes a few milliseconds); every delivery then pays {} of CPU for its secrets, next to the \
         {} GetItem it makes anyway and the receiver's round trip. With asymmetric signing on, the key pair is \
         sealed in the same item as the secrets, so a delivery makes the same calls (one GetItem, no KMS call once \
         warm) and pays {} instead of {}: opening expands each sealed seed into its Ed25519 key pair (a scalar \
         multiplication, about the work of a signature), then each key signs once.",
        2 * warm_n,
        fine(first.median),
        fine(per_delivery),
        fine(get.median),
        fine(per_delivery_v1a),
        fine(per_delivery)
    );
    Section { number: 8, title: TITLE, rows, body: md, unmet_notes: Vec::new() }
}

fn event(user: &UserId) -> Event {
    let data = career_core::events::EventData::ProfileUpdated {
        user_id: user.clone(),
        profile_id: "prf_bench".parse().unwrap(),
    };
    Event { id: career_core::ids::EventId::generate(), created_at: typed("2026-11-27T08:00:00.000Z"), data }
}
