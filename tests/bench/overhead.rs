//! Benchmark 2, Request overhead: each of the seven operations through its handler (in process, on a
//! warm instance whose key lookup is cached) against the bare DynamoDB calls the operation
//! cannot avoid, issued with the same SDK client to the same DynamoDB Local.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use career_core::alerts::{AlertAction, ListFilter};
use career_core::clock::Timestamp;
use career_core::config::Settings;
use career_core::credentials::{ApiKey, KeyHash};
use career_core::events::EventKind;
use career_core::ids::{AlertId, SubscriptionId, UserId};
use career_core::pagination::DEFAULT_PAGE_SIZE;
use career_core::preferences::PreferenceUpdate;
use career_core::ratelimit::RateLimiter;
use career_core::store::alerts::AlertTable;
use career_core::store::preferences::PreferenceTable;
use career_core::store::rate_limits::RateLimitTable;
use career_core::store::webhooks::WebhookTable;
use career_core::webhooks::{SealedSecrets, Subscription, WebhookSecret, WebhookUrl, MAX_SUBSCRIPTIONS_PER_USER};
use career_service::pipeline::Pipeline;
use career_service::{sink_url, typed};
use hyper::body::Bytes;
use lambda_http::http::{self, Method};
use local_aws::gateway::{lambda_request, ApiFunctions};

use crate::counting::{self, per_request, Calls};
use crate::report::{Row, Section};
use crate::stats::{ms, ratio, summarize, Summary};
use crate::{progress, Bench};

pub const TITLE: &str = "Request overhead";
const TARGET: f64 = 1.2;
const WARMUP: usize = 100;

#[derive(Clone, Copy, PartialEq)]
enum Op {
    ListAlerts,
    MarkAlert,
    GetPreferences,
    PutPreferences,
    ListWebhooks,
    CreateWebhook,
    DeleteWebhook,
}

impl Op {
    /// A GET: its read goes out with the rate-limit count, so its floor is the slower of
    /// the two bare calls rather than their sum.
    fn is_read(self) -> bool {
        matches!(self, Op::ListAlerts | Op::GetPreferences | Op::ListWebhooks)
    }

    fn label(self) -> &'static str {
        match self {
            Op::ListAlerts => "GET /api/v1/alerts",
            Op::MarkAlert => "PATCH /api/v1/alerts",
            Op::GetPreferences => "GET /api/v1/data-sharing",
            Op::PutPreferences => "PUT /api/v1/data-sharing",
            Op::ListWebhooks => "GET /api/v1/webhooks",
            Op::CreateWebhook => "POST /api/v1/webhooks",
            Op::DeleteWebhook => "DELETE /api/v1/webhooks",
        }
    }

    fn bare(self) -> &'static str {
        match self {
            Op::ListAlerts => "UpdateItem (rate limit) + Query (index `active`, Limit 51)",
            Op::MarkAlert => "UpdateItem (rate limit) + conditional UpdateItem (ALL_NEW)",
            Op::GetPreferences => "UpdateItem (rate limit) + GetItem",
            Op::PutPreferences => "UpdateItem (rate limit) + UpdateItem (ALL_NEW)",
            Op::ListWebhooks => "UpdateItem (rate limit) + Query",
            Op::CreateWebhook => "UpdateItem (rate limit) + TransactWriteItems (counter + Put)",
            Op::DeleteWebhook => "UpdateItem (rate limit) + TransactWriteItems (Delete + counter)",
        }
    }
}

struct Fixture {
    functions: ApiFunctions,
    store: Store,
    calls: Calls,
    user: UserId,
    key: String,
    key_hash: KeyHash,
    handler_alert: String,
    bare_alert: AlertId,
}

/// The store types the handlers use, on the same counted client, for the bare calls.
struct Store {
    limiter: RateLimiter,
    alerts: AlertTable,
    preferences: PreferenceTable,
    webhooks: WebhookTable,
}

impl Store {
    fn new(client: &Client, settings: &Settings) -> Self {
        let tables = &settings.tables;
        let counters = RateLimitTable::new(client.clone(), &tables.rate_limits);
        Store {
            limiter: RateLimiter::new(counters, settings.rate_limit_per_minute, settings.rate_limit_window),
            alerts: AlertTable::new(client.clone(), &tables.alerts),
            preferences: PreferenceTable::new(client.clone(), &tables.preferences),
            webhooks: WebhookTable::new(client.clone(), &tables.webhooks),
        }
    }
}

/// Timings and round trips of one operation.
struct Measured {
    handler: Vec<Duration>,
    bare: Vec<Duration>,
    /// The two bare calls, each timed on its own (the rate-limit count, then the operation's).
    bare_count: Vec<Duration>,
    bare_operation: Vec<Duration>,
    handler_calls: Vec<Vec<String>>,
    bare_calls: Vec<Vec<String>>,
    unexpected: Vec<String>,
}

impl Measured {
    fn new() -> Self {
        Measured {
            handler: vec![],
            bare: vec![],
            bare_count: vec![],
            bare_operation: vec![],
            handler_calls: vec![],
            bare_calls: vec![],
            unexpected: vec![],
        }
    }
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let pipeline = Pipeline::with_settings(false, |s| s.rate_limit_per_minute = 100_000_000).await;
    let calls = Calls::default();
    let client = counting::dynamodb(&bench.dynamodb_endpoint, &calls);
    let settings = pipeline.settings().clone();
    let user = career_service::unique_user();
    let key = pipeline.api.full_key(&user).await;
    let key_hash = ApiKey::parse(&key).expect("a well-formed key").hash();
    for i in 0..5 {
        pipeline.api.alert(&user, &format!("Alert {i}")).await;
    }
    let handler_alert = pipeline.api.alert(&user, "Marked through the handler").await;
    let bare_alert = pipeline.api.alert(&user, "Marked by the bare calls").await;
    for i in 0..3 {
        pipeline.subscribe(&user, &format!("{}/career/{i}", sink_url()), &["profile.updated"]).await;
    }
    let fixture = Fixture {
        functions: ApiFunctions::new(
            &career_service::deployment(&settings),
            &career_service::clients().with_dynamodb(client.clone()),
            &settings,
        )
        .map_err(|e| e.to_string())?,
        store: Store::new(&client, &settings),
        calls,
        user: typed(&user),
        key,
        key_hash,
        handler_alert,
        bare_alert: typed(&bare_alert),
    };

    // The round trips of a first request, before the key is cached.
    let mark = fixture.calls.len();
    fixture.handler(Op::ListAlerts, 0, None).await.1?;
    let (cold_trips, cold_breakdown) = per_request(&[fixture.calls.since(mark)]);

    let n = bench.requests;
    let mut results: Vec<(Op, Measured)> = Vec::new();
    for op in [Op::ListAlerts, Op::MarkAlert, Op::PutPreferences, Op::GetPreferences, Op::ListWebhooks] {
        progress(format!(
            "   {}: {WARMUP} warm-up + {n} timed requests, handler and bare calls alternating",
            op.label()
        ));
        let mut measured = Measured::new();
        for i in 0..WARMUP + n {
            let record = i >= WARMUP;
            // Alternate which goes first, so neither always follows the other.
            if i % 2 == 0 {
                fixture.time_handler(op, i, None, record, &mut measured).await;
                fixture.time_bare(op, i, None, record, &mut measured).await;
            } else {
                fixture.time_bare(op, i, None, record, &mut measured).await;
                fixture.time_handler(op, i, None, record, &mut measured).await;
            }
        }
        results.push((op, measured));
    }
    progress(format!(
        "   POST and DELETE /api/v1/webhooks: {WARMUP} warm-up + {n} timed create-delete pairs, alternating"
    ));
    let (mut create, mut delete) = (Measured::new(), Measured::new());
    for i in 0..WARMUP + n {
        let record = i >= WARMUP;
        for handler_first in [i % 2 == 0, i % 2 == 1] {
            if handler_first {
                let id = fixture.time_handler(Op::CreateWebhook, i, None, record, &mut create).await;
                fixture.time_handler(Op::DeleteWebhook, i, id.as_deref(), record, &mut delete).await;
            } else {
                let id = fixture.time_bare(Op::CreateWebhook, i, None, record, &mut create).await;
                fixture.time_bare(Op::DeleteWebhook, i, id.as_deref(), record, &mut delete).await;
            }
        }
    }
    results.push((Op::CreateWebhook, create));
    results.push((Op::DeleteWebhook, delete));

    Ok(render(n, &results, cold_trips, &cold_breakdown))
}

impl Fixture {
    async fn time_handler(&self, op: Op, i: usize, id: Option<&str>, record: bool, m: &mut Measured) -> Option<String> {
        let mark = self.calls.len();
        let (took, outcome) = self.handler(op, i, id).await;
        if record {
            m.handler.push(took);
            m.handler_calls.push(self.calls.since(mark));
            if let Err(unexpected) = &outcome {
                m.unexpected.push(unexpected.clone());
            }
        }
        outcome.ok().flatten()
    }

    async fn time_bare(&self, op: Op, i: usize, id: Option<&str>, record: bool, m: &mut Measured) -> Option<String> {
        let mark = self.calls.len();
        let started = Instant::now();
        self.bare_count().await;
        let counted = started.elapsed();
        let created = self.bare_operation(op, i, id).await;
        let took = started.elapsed();
        if record {
            m.bare.push(took);
            m.bare_count.push(counted);
            m.bare_operation.push(took - counted);
            m.bare_calls.push(self.calls.since(mark));
        }
        created
    }

    /// One request through the handler: its time, and the created subscription's id (or
    /// what was unexpected about the answer).
    async fn handler(&self, op: Op, i: usize, id: Option<&str>) -> (Duration, Result<Option<String>, String>) {
        let flag = i.is_multiple_of(2);
        let (method, path, body, expected) = match op {
            Op::ListAlerts => (Method::GET, "/api/v1/alerts".to_owned(), None, 200),
            Op::MarkAlert => {
                let action = if flag { "read" } else { "unread" };
                let path = format!("/api/v1/alerts?id={}", self.handler_alert);
                (Method::PATCH, path, Some(format!(r#"{{"action":"{action}"}}"#)), 200)
            }
            Op::GetPreferences => (Method::GET, "/api/v1/data-sharing".to_owned(), None, 200),
            Op::PutPreferences => {
                (Method::PUT, "/api/v1/data-sharing".to_owned(), Some(format!(r#"{{"shareProfileData":{flag}}}"#)), 200)
            }
            Op::ListWebhooks => (Method::GET, "/api/v1/webhooks".to_owned(), None, 200),
            Op::CreateWebhook => {
                let body = serde_json::json!({"url": new_subscription_url(), "events": ["profile.updated"]});
                (Method::POST, "/api/v1/webhooks".to_owned(), Some(body.to_string()), 201)
            }
            Op::DeleteWebhook => {
                (Method::DELETE, format!("/api/v1/webhooks?id={}", id.unwrap_or("whk_missing")), None, 200)
            }
        };
        let mut builder =
            http::Request::builder().method(method).uri(&path).header("authorization", format!("Bearer {}", self.key));
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        let (parts, ()) = builder.body(()).expect("a valid request").into_parts();
        let request = lambda_request(parts, body.map(Bytes::from).unwrap_or_default());
        let started = Instant::now();
        let response = self.functions.handle(request).await;
        let took = started.elapsed();
        let status = response.status().as_u16();
        let text = String::from_utf8_lossy(response.body().as_ref()).into_owned();
        if status != expected {
            return (took, Err(format!("{} answered {status}: {text}", op.label())));
        }
        let created = (op == Op::CreateWebhook)
            .then(|| serde_json::from_str::<serde_json::Value>(&text).ok()?["id"].as_str().map(String::from))
            .flatten();
        (took, Ok(created))
    }

    /// The rate-limit count every operation cannot avoid, through the limiter the handler uses.
    async fn bare_count(&self) {
        self.store.limiter.count(&self.key_hash).await.expect("rate-limit count");
    }

    /// The operation's own call, through the store the handler uses (its item layout and key
    /// names are the store's, so the bench cannot drift from them).
    async fn bare_operation(&self, op: Op, i: usize, id: Option<&str>) -> Option<String> {
        let store = &self.store;
        let flag = i.is_multiple_of(2);
        match op {
            Op::ListAlerts => {
                store.alerts.list(&self.user, ListFilter::Active, DEFAULT_PAGE_SIZE, None).await.expect("list");
            }
            Op::MarkAlert => {
                let action = if flag { AlertAction::Read } else { AlertAction::Unread };
                store.alerts.apply(&self.user, &self.bare_alert, action, Timestamp::now()).await.expect("mark");
            }
            Op::GetPreferences => {
                store.preferences.get(&self.user).await.expect("get preferences");
            }
            Op::PutPreferences => {
                let update =
                    PreferenceUpdate::parse(&serde_json::json!({"shareProfileData": flag})).expect("an update");
                store.preferences.update(&self.user, &update, Timestamp::now()).await.expect("update preferences");
            }
            Op::ListWebhooks => {
                store.webhooks.list(&self.user).await.expect("list subscriptions");
            }
            Op::CreateWebhook => {
                let url =
                    WebhookUrl::parse(&new_subscription_url().into(), &career_core::webhooks::UrlPolicy::local_stack())
                        .expect("a URL");
                // As long as a sealed secret; the bare baseline needs no KMS.
                let sealed = SealedSecrets(WebhookSecret::generate().expose().repeat(3));
                let subscription = Subscription::new(
                    self.user.clone(),
                    SubscriptionId::generate(),
                    (&url).into(),
                    vec![EventKind::ProfileUpdated],
                    sealed,
                    None,
                );
                store.webhooks.insert(&subscription, MAX_SUBSCRIPTIONS_PER_USER).await.expect("create");
                return Some(subscription.id.to_string());
            }
            Op::DeleteWebhook => {
                let id: SubscriptionId = id.and_then(SubscriptionId::parse).expect("a created subscription");
                store.webhooks.delete(&self.user, &id).await.expect("delete");
            }
        }
        None
    }
}

fn render(n: usize, results: &[(Op, Measured)], cold_trips: f64, cold_breakdown: &str) -> Section {
    let mut rows = Vec::new();
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Each operation in process through its function's handler (`local_aws::gateway::ApiFunctions`, the \
         functions' own `Deps` and `handle`, request log on as on Lambda) against the bare DynamoDB calls \
         the operation cannot avoid — the rate-limit `UpdateItem` and the operation's own call, issued with \
         the same SDK client to the same DynamoDB Local, one after the other, each also timed on its own. \
         {WARMUP} warm-up requests (which also cache the key \
         lookup), then {n} timed requests of each, handler and bare calls alternating (and alternating which \
         goes first). Calls are counted by an interceptor on that client (`read_before_transmit`, so \
         retries would count).\n"
    );
    body.push_str(
        "| Operation | Handler median | Handler p99 | Bare median (both calls) | Bare p99 | Rate-limit call alone | Operation's call alone | Median ratio (GET: to the slower call) | p99 ratio | DynamoDB calls per request (warm) | Bare calls |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut unexpected = Vec::new();
    for (op, m) in results {
        let (h, b): (Summary, Summary) = (summarize(&m.handler), summarize(&m.bare));
        let (count, operation) = (summarize(&m.bare_count).median, summarize(&m.bare_operation).median);
        // A GET is held to the slower of its two bare calls; a write to their sum.
        let floor = if op.is_read() { count.max(operation) } else { b.median };
        let r = ratio(h.median, floor);
        let (trips, breakdown) = per_request(&m.handler_calls);
        let (bare_trips, _) = per_request(&m.bare_calls);
        let _ = writeln!(
            body,
            "| `{}` | {} | {} | {} | {} | {} | {} | {r:.2}× | {:.2}× | {trips:.2} ({breakdown}) | {bare_trips:.0}: {} |",
            op.label(),
            ms(h.median),
            ms(h.p99),
            ms(b.median),
            ms(b.p99),
            ms(count),
            ms(operation),
            ratio(h.p99, b.p99),
            op.bare()
        );
        let (target, measured) = if op.is_read() {
            (
                format!("median ≤ {TARGET}× the slower bare call"),
                format!("{} vs {} → {r:.2}×, {trips:.0} calls at once", ms(h.median), ms(floor)),
            )
        } else {
            (
                format!("median ≤ {TARGET}× bare"),
                format!("{} vs {} → {r:.2}×, {trips:.0} round trips", ms(h.median), ms(floor)),
            )
        };
        rows.push(Row::new(format!("Overhead `{}`", op.label()), target, measured, Some(r <= TARGET)));
        if !m.unexpected.is_empty() {
            unexpected.push(format!(
                "`{}`: {} unexpected answers, e.g. {}",
                op.label(),
                m.unexpected.len(),
                m.unexpected[0]
            ));
        }
    }
    let p99_ratios: Vec<f64> =
        results.iter().map(|(_, m)| ratio(summarize(&m.handler).p99, summarize(&m.bare).p99)).collect();
    let (low, high) = p99_ratios.iter().fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    let _ = writeln!(
        body,
        "\nThe p99 ratios range from {low:.2}× to {high:.2}×: the tails are DynamoDB Local's own pauses (a JVM), \
         which fall on handler and bare calls alike and move between runs; the medians are what the target \
         compares."
    );
    let all_minimal = results.iter().all(|(_, m)| (per_request(&m.handler_calls).0 - 2.0).abs() < 1e-9);
    if all_minimal {
        let _ = writeln!(
            body,
            "\nOn a warm instance every operation makes exactly its two unavoidable DynamoDB calls: the key lookup \
             is served from the per-instance cache (60 s), and nothing else is read or written. A GET issues \
             its two at the same time (shared/src/aws/api/metering.rs `Metering::CountAlongside`: the read does \
             not wait for the rate-limit count, and a 429 drops it), so it waits for one round trip; its \
             target is the slower of the two bare calls timed alone. A write waits for the count before it \
             writes, because a refused write must change nothing: its target is the two bare calls in sequence."
        );
    } else {
        let _ = writeln!(body, "\nSome operations make more than the two unavoidable round trips; see the table.");
    }
    let _ = writeln!(body, "A first request with a key not yet cached makes {cold_trips:.0} ({cold_breakdown}).\n");
    if unexpected.is_empty() {
        let _ = writeln!(body, "Every timed request got its expected status (200, or 201 for the create).\n");
    } else {
        let _ = writeln!(body, "Unexpected answers: {}\n", unexpected.join("; "));
    }
    let unmet_notes =
        vec!["The handler's extra time over the bare calls is its own CPU work (routing, key hashing, JSON, the \
         request log) and any round trip beyond the two unavoidable ones; the round-trip column says which."
            .to_owned()];
    Section { number: 2, title: TITLE, rows, body, unmet_notes }
}

/// Where the subscriptions that the handler and the bare calls create point: the bench's
/// receiver on loopback, as no bench creates a subscription the delivery function could
/// send to another machine.
fn new_subscription_url() -> String {
    format!("{}/career/new", sink_url())
}
