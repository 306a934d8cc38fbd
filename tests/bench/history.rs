//! Benchmark 3, History does not slow the default list: `GET /api/v1/alerts` for a user with 10,000
//! read or dismissed alerts and 5 active ones, against a user with only the 5 active ones.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, ReturnConsumedCapacity, WriteRequest};
use aws_sdk_dynamodb::Client;
use career_core::alerts::{Alert, Category, ListFilter, Severity};
use career_core::clock::Timestamp;
use career_core::ids::{AlertId, UserId};
use career_core::pagination::DEFAULT_PAGE_SIZE;
use career_core::store::alerts::AlertTable;
use career_service::pipeline::Pipeline;
use career_service::typed;
use careerctl::gateway::{lambda_request, ApiFunctions};
use lambda_http::http;
use tokio::task::JoinSet;

use crate::counting::{self, per_request, Calls};
use crate::report::{Row, Section};
use crate::stats::{ms, ratio, summarize};
use crate::{progress, Bench};

pub const TITLE: &str = "History does not slow the default list";
const HISTORY: usize = 10_000;
const ACTIVE: usize = 5;
const TARGET: f64 = 1.2;
const WARMUP: usize = 100;

type Item = HashMap<String, AttributeValue>;

/// An alert item exactly as the store writes it (`AlertTable::item`): the sparse index keys
/// are present only while the alert is active, unread, undismissed.
fn alert_item(user: &UserId, id: &AlertId, read: bool, dismissed: bool) -> Item {
    let created = Timestamp::from_millis(id.millis());
    let alert = Alert {
        id: id.clone(),
        category: Category::CareerHealth,
        severity: Severity::Warning,
        title: "Your skills profile needs attention".into(),
        message: "Two of your listed skills have not been assessed in the last twelve months.".into(),
        created_at: created.clone(),
        read,
        read_at: read.then(|| created.clone()),
        dismissed,
        dismissed_at: dismissed.then_some(created),
    };
    AlertTable::item(user, &alert).expect("an alert item")
}

async fn write_all(client: &Client, table: &str, items: Vec<Item>) -> Result<(), String> {
    let mut chunks = items.chunks(25).map(<[Item]>::to_vec).collect::<Vec<_>>().into_iter();
    let mut writers = JoinSet::new();
    loop {
        while writers.len() < 8 {
            let Some(chunk) = chunks.next() else { break };
            let (client, table) = (client.clone(), table.to_owned());
            writers.spawn(async move { write_chunk(&client, &table, chunk).await });
        }
        match writers.join_next().await {
            Some(done) => done.map_err(|e| e.to_string())??,
            None => return Ok(()),
        }
    }
}

async fn write_chunk(client: &Client, table: &str, chunk: Vec<Item>) -> Result<(), String> {
    let mut requests: Vec<WriteRequest> = chunk
        .into_iter()
        .map(|item| {
            let put = PutRequest::builder().set_item(Some(item)).build().expect("a put with an item");
            WriteRequest::builder().put_request(put).build()
        })
        .collect();
    for attempt in 0..30u64 {
        let output = client
            .batch_write_item()
            .request_items(table, requests)
            .send()
            .await
            .map_err(|e| format!("BatchWriteItem: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
        requests = output.unprocessed_items.and_then(|mut left| left.remove(table)).unwrap_or_default();
        if requests.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20 * (attempt + 1))).await;
    }
    Err("BatchWriteItem kept leaving items unprocessed".into())
}

/// The Query of `AlertTable::list` for the default filter, with its consumed capacity.
async fn list_query(
    alerts: &AlertTable,
    user: &UserId,
) -> Result<aws_sdk_dynamodb::operation::query::QueryOutput, String> {
    alerts
        .list_query(user, ListFilter::Active, DEFAULT_PAGE_SIZE, None)
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await
        .map_err(|e| format!("Query: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let pipeline = Pipeline::with_settings(false, |s| s.rate_limit_per_minute = 100_000_000).await;
    let table = pipeline.settings().tables.alerts.clone();
    let client = career_service::dynamodb();
    let (heavy, light) = (career_service::unique_user(), career_service::unique_user());
    let (heavy_id, light_id): (UserId, UserId) = (typed(&heavy), typed(&light));
    let alerts = AlertTable::new(client.clone(), &table);

    // The 5 active alerts are spread through the history (oldest, newest and between).
    let active_at: Vec<usize> = (0..ACTIVE).map(|k| k * (HISTORY + ACTIVE - 1) / (ACTIVE - 1)).collect();
    let mut items = Vec::with_capacity(HISTORY + 2 * ACTIVE);
    let (mut read_only, mut dismissed_only, mut both) = (0, 0, 0);
    for i in 0..HISTORY + ACTIVE {
        let id = AlertId::generate();
        if active_at.contains(&i) {
            items.push(alert_item(&heavy_id, &id, false, false));
            continue;
        }
        let (read, dismissed) = match i % 3 {
            0 => (true, false),
            1 => (false, true),
            _ => (true, true),
        };
        match (read, dismissed) {
            (true, false) => read_only += 1,
            (false, true) => dismissed_only += 1,
            _ => both += 1,
        }
        items.push(alert_item(&heavy_id, &id, read, dismissed));
    }
    for _ in 0..ACTIVE {
        items.push(alert_item(&light_id, &AlertId::generate(), false, false));
    }
    progress(format!("   writing {} alerts with BatchWriteItem", items.len()));
    let started = Instant::now();
    write_all(&client, &table, items).await?;
    let write_time = started.elapsed();

    let calls = Calls::default();
    let counted = counting::dynamodb(&bench.dynamodb_endpoint, &calls);
    let functions = ApiFunctions::new(&counted, &career_service::kms(), &career_service::sqs(), pipeline.settings())
        .map_err(|e| e.to_string())?;
    let (mut heavy_trips, mut light_trips) = (Vec::new(), Vec::new());
    let heavy_key = pipeline.api.key(&heavy, "read:alerts").await;
    let light_key = pipeline.api.key(&light, "read:alerts").await;
    let n = bench.requests;
    progress(format!("   {WARMUP} warm-up + {n} timed default lists per user, alternating"));
    let (mut heavy_times, mut light_times) = (Vec::new(), Vec::new());
    let (mut heavy_query, mut light_query) = (Vec::new(), Vec::new());
    let (mut heavy_table, mut light_table) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + n {
        let order = if i % 2 == 0 { [true, false] } else { [false, true] };
        for is_heavy in order {
            let key = if is_heavy { &heavy_key } else { &light_key };
            let (parts, ()) = http::Request::builder()
                .uri("/api/v1/alerts")
                .header("authorization", format!("Bearer {key}"))
                .body(())
                .expect("a request")
                .into_parts();
            let request = lambda_request(parts, Default::default());
            let mark = calls.len();
            let started = Instant::now();
            let response = functions.handle(request).await;
            let took = started.elapsed();
            let trips = calls.since(mark);
            let json: serde_json::Value = serde_json::from_slice(response.body().as_ref()).unwrap_or_default();
            let count = json["alerts"].as_array().map(Vec::len);
            if response.status() != 200 || count != Some(ACTIVE) || !json["nextCursor"].is_null() {
                return Err(format!("the default list answered {}: {json}", response.status()));
            }
            if i >= WARMUP {
                if is_heavy {
                    heavy_times.push(took);
                    heavy_trips.push(trips);
                } else {
                    light_times.push(took);
                    light_trips.push(trips);
                }
            }
        }
        // A Query of as many items on the table itself, newest first.
        for is_heavy in order {
            let started = Instant::now();
            client
                .query()
                .table_name(&table)
                .key_condition_expression("userId = :u")
                .expression_attribute_values(":u", AttributeValue::S(if is_heavy { &heavy } else { &light }.clone()))
                .scan_index_forward(false)
                .consistent_read(true)
                .limit(ACTIVE as i32)
                .send()
                .await
                .map_err(|e| format!("Query: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
            let took = started.elapsed();
            if i >= WARMUP {
                if is_heavy {
                    heavy_table.push(took)
                } else {
                    light_table.push(took)
                }
            }
        }
        // The list's own Query alone, same client, same order.
        for is_heavy in order {
            let started = Instant::now();
            list_query(&alerts, if is_heavy { &heavy_id } else { &light_id }).await?;
            let took = started.elapsed();
            if i >= WARMUP {
                if is_heavy {
                    heavy_query.push(took)
                } else {
                    light_query.push(took)
                }
            }
        }
    }
    let (h, l) = (summarize(&heavy_times), summarize(&light_times));
    let r = ratio(h.median, l.median);
    let (hq, lq) = (summarize(&heavy_query), summarize(&light_query));
    let (ht, lt) = (summarize(&heavy_table), summarize(&light_table));
    let (heavy_per, heavy_breakdown) = per_request(&heavy_trips);
    let (light_per, _) = per_request(&light_trips);

    // The list's query, with the capacity it consumes.
    let mut consumed = Vec::new();
    for user in [&heavy_id, &light_id] {
        let output = list_query(&alerts, user).await?;
        let units = output.consumed_capacity().and_then(|c| c.capacity_units());
        consumed.push((units, output.count(), output.scanned_count()));
    }
    let show = |units: Option<f64>| units.map_or("not reported".to_owned(), |u| format!("{u} RCU"));
    let same_capacity = consumed[0].0.is_some() && consumed[0].0 == consumed[1].0;

    let mut body = String::new();
    let _ = writeln!(
        body,
        "User A has {HISTORY} alerts that are read or dismissed ({read_only} read, {dismissed_only} dismissed, \
         {both} both) and {ACTIVE} active ones spread among them (oldest, newest and between); user B has \
         only the {ACTIVE} active ones. The items were written with `BatchWriteItem` in the item format of \
         shared/src/store/alerts.rs (sparse `activeKey`/`unreadKey`/`undismissedKey` present only while the \
         alert is active/unread/undismissed) in {:.1} s. Then {WARMUP} warm-up and {n} timed default \
         `GET /api/v1/alerts` per user through the alerts handler, alternating users; every answer held \
         exactly the {ACTIVE} active alerts and `nextCursor: null`.\n",
        write_time.as_secs_f64()
    );
    body.push_str(
        "| User | Handler median | p90 | p99 | Round trips | The list's `Query` alone, median | A `Query` of 5 on the table itself, median |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let _ = writeln!(
        body,
        "| A: {HISTORY} history + {ACTIVE} active | {} | {} | {} | {heavy_per:.0} ({heavy_breakdown}) | {} | {} |",
        ms(h.median),
        ms(h.p90),
        ms(h.p99),
        ms(hq.median),
        ms(ht.median)
    );
    let _ = writeln!(
        body,
        "| B: {ACTIVE} active | {} | {} | {} | {light_per:.0} | {} | {} |",
        ms(l.median),
        ms(l.p90),
        ms(l.p99),
        ms(lq.median),
        ms(lt.median)
    );
    let _ = writeln!(
        body,
        "\nLatency ratio A/B through the handler: median {r:.2}×, p99 {:.2}×. The list's `Query` alone (same \
         client, same DynamoDB Local, timed in the same loop): median {:.2}× — A's extra {} per request \
         through the handler is {} in the `Query` alone.\n",
        ratio(h.p99, l.p99),
        ratio(hq.median, lq.median),
        ms(h.median.saturating_sub(l.median)),
        ms(hq.median.saturating_sub(lq.median))
    );
    let _ = writeln!(
        body,
        "Consumed capacity of the list's query (`Query` on index `active`, `ScanIndexForward=false`, \
         `Limit=51`, `ConsistentRead=true`, `ReturnConsumedCapacity=TOTAL`):\n\n\
         | User | Consumed | Count | ScannedCount |\n|---|---|---|---|\n\
         | A | {} | {} | {} |\n| B | {} | {} | {} |\n\n\
         The sparse index holds only active alerts, so the query reads the same {ACTIVE} items for both users.\n",
        show(consumed[0].0),
        consumed[0].1,
        consumed[0].2,
        show(consumed[1].0),
        consumed[1].1,
        consumed[1].2
    );
    let rows = vec![
        Row::new(
            "Default list, 10,000 history vs none: latency",
            format!("median ratio ≤ {TARGET}"),
            format!("{} vs {} → {r:.2}×", ms(h.median), ms(l.median)),
            Some(r <= TARGET),
        ),
        Row::new(
            "Default list, 10,000 history vs none: read capacity",
            "the same",
            format!("{} vs {}", show(consumed[0].0), show(consumed[1].0)),
            Some(same_capacity),
        ),
    ];
    let share = hq.median.saturating_sub(lq.median).as_secs_f64()
        / h.median.saturating_sub(l.median).as_secs_f64().max(1e-9)
        * 100.0;
    let share = if share >= 95.0 { "All".to_owned() } else { format!("{share:.0}%") };
    let unmet_notes = vec![format!(
        "Distance: {r:.2}× against {TARGET}× — A's median is {} above B's. {share} of that is DynamoDB \
         Local answering the list's `Query` more slowly for A: timed alone in the same loop the `Query` is {} \
         slower for A ({:.2}×), although it returns the same {ACTIVE} items, reports the same consumed \
         capacity ({} vs {}) and the same ScannedCount ({} vs {}); the handler makes the same {heavy_per:.0} \
         round trips for both users. DynamoDB Local's query on a local secondary index gets slower with the \
         size of the partition behind it{} On DynamoDB the index holds only the items that have its sort key — here only \
         active alerts, since `activeKey` is removed when an alert is read or dismissed — and a query reads \
         (and is billed for) only those, which is what the equal consumed capacity shows. The service's \
         design is the one that keeps the default list independent of history; this figure is an artefact of \
         the emulator. The only change that would flatten it locally is to keep active alerts as a key range \
         of the table itself (for example a second item `active#<alertId>` per active alert, written in the \
         same transaction as the flags), which would make every PATCH a `TransactWriteItems` instead of one \
         conditional `UpdateItem` — not worth it for an emulator.",
        ms(h.median.saturating_sub(l.median)),
        ms(hq.median.saturating_sub(lq.median)),
        ratio(hq.median, lq.median),
        show(consumed[0].0),
        show(consumed[1].0),
        consumed[0].2,
        consumed[1].2,
        if ratio(ht.median, lt.median) <= TARGET {
            format!(
                ", while a `Query` of {ACTIVE} items on the table itself does not ({} vs {}, {:.2}×).",
                ms(ht.median),
                ms(lt.median),
                ratio(ht.median, lt.median)
            )
        } else {
            format!(
                " (a `Query` of {ACTIVE} items on the table itself: {} vs {}, {:.2}×).",
                ms(ht.median),
                ms(lt.median),
                ratio(ht.median, lt.median)
            )
        }
    )];
    Ok(Section { number: 3, title: TITLE, rows, body, unmet_notes })
}
