//! `/api/v1/webhooks` through the function's handler against DynamoDB Local: create, list,
//! update and delete, every validation code of contract sections 5 and 13 in its order (and
//! that a refused request stores nothing), the per-user limit, scopes, isolation, concurrent
//! changes, and the event catalog.

use std::sync::Arc;

use base64::Engine;

use career_core::clock::Timestamp;
use career_core::store::webhooks::WebhookTable;
use career_core::webhooks::netguard::Guard;
use career_core::webhooks::{DisabledReason, Health, UrlPolicy, WebhookUrl};
use career_service::DEADLINE;
use career_service::{assert_rfc3339_utc, eventually, sink_url, typed, unique_user, Answer, Api};
use lambda_http::http::Method;
use serde_json::{json, Value};

pub(crate) const PATH: &str = "/api/v1/webhooks";
/// Subscriptions go to the test binary's receiver on loopback (never to another machine),
/// and so are created through functions that allow `http` and private targets
/// ([`Api::loopback`]); the production setting's refusals are checked with [`Api::new`].
fn hook() -> String {
    format!("{}/career?x=1", sink_url())
}

fn url(n: usize) -> String {
    format!("{}/career/{n}", sink_url())
}

/// `whk_` and a 26-character Crockford base32 ULID.
#[track_caller]
fn assert_subscription_id(id: &str) {
    let ulid = id.strip_prefix("whk_").unwrap_or_else(|| panic!("not a whk_ id: {id:?}"));
    assert_eq!(ulid.len(), 26, "{id:?}");
    assert!(ulid.bytes().all(|b| b"0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(&b)), "{id:?}");
}

/// `whsec_` and the standard base64 (with padding) of 32 bytes: 44 characters.
#[track_caller]
fn assert_secret(secret: &str) {
    let token = secret.strip_prefix("whsec_").unwrap_or_else(|| panic!("not a whsec_ secret: {secret:?}"));
    assert_eq!(token.len(), 44, "{secret:?}");
    let bytes = base64::engine::general_purpose::STANDARD.decode(token);
    assert_eq!(bytes.map(|b| b.len()), Ok(32), "{secret:?}");
}

pub(crate) async fn create(api: &Api, key: &str, body: &Value) -> Answer {
    api.send_json(Method::POST, PATH, key, &body.to_string()).await
}

/// Creates a subscription and returns the create answer (checked to be a 201).
async fn created(api: &Api, key: &str, url: &str, events: &[&str]) -> Value {
    let answer = create(api, key, &json!({"url": url, "events": events})).await;
    answer.assert_status(201).clone()
}

/// The list answer's `webhooks` array (checked to be a 200 of the documented shape).
pub(crate) async fn list(api: &Api, key: &str) -> Vec<Value> {
    let answer = api.get(PATH, key).await;
    let body = answer.assert_status(200);
    assert_eq!(body.as_object().map(|o| o.len()), Some(1), "{body}");
    body["webhooks"].as_array().unwrap_or_else(|| panic!("no webhooks array: {body}")).clone()
}

async fn delete(api: &Api, key: &str, query: &str) -> Answer {
    api.request(Method::DELETE, &format!("{PATH}{query}")).key(key).send().await
}

pub(crate) fn without_secret(created: &Value) -> Value {
    let mut public = created.clone();
    public.as_object_mut().expect("an object").remove("secret");
    public
}

/// Posts `body`, expects the 400 `code`, and checks that the list did not change.
pub(crate) async fn refused(api: &Api, key: &str, body: &Value, code: &str, before: &[Value]) {
    let answer = create(api, key, body).await;
    assert_eq!(answer.json["error"]["code"].as_str(), Some(code), "{body}: {answer:?}");
    answer.assert_error(400, code);
    assert_eq!(list(api, key).await, before, "after {body}");
}

/// A user with a key of all scopes and one subscription, so that "nothing stored" is
/// checked against a list that is not empty.
async fn user_with_one(api: &Api) -> (String, Vec<Value>) {
    let key = api.full_key(&unique_user()).await;
    let first = created(api, &key, &url(0), &["profile.updated"]).await;
    let before = vec![without_secret(&first)];
    assert_eq!(list(api, &key).await, before);
    (key, before)
}

#[tokio::test]
async fn create_returns_the_subscription_and_its_secret_once() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let answer = create(&api, &key, &json!({"url": hook(), "events": ["profile.updated"]})).await;
    let body = answer.assert_status(201).clone();
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let mut fields: Vec<_> = body.as_object().expect("an object").keys().cloned().collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "createdAt",
            "disabledAt",
            "disabledReason",
            "enabled",
            "events",
            "id",
            "identityToken",
            "maxDeliveriesPerSecond",
            "previousPublicKey",
            "publicKey",
            "secret",
            "traceContext",
            "url",
            "whileDisabled"
        ],
        "{body}"
    );
    assert_eq!((&body["publicKey"], &body["previousPublicKey"]), (&Value::Null, &Value::Null), "off by default");
    assert_eq!(body["traceContext"], false, "off by default");
    assert_eq!(body["maxDeliveriesPerSecond"], Value::Null, "no rate limit by default");
    assert_eq!(body["identityToken"], Value::Null, "no identity token by default");
    assert_eq!(body["whileDisabled"], "hold", "holds by default (contract section 20)");
    assert_subscription_id(body["id"].as_str().expect("id"));
    assert_eq!(
        (&body["enabled"], &body["disabledAt"], &body["disabledReason"]),
        (&json!(true), &Value::Null, &Value::Null)
    );
    assert_eq!(body["url"], hook());
    assert_eq!(body["events"], json!(["profile.updated"]));
    assert_rfc3339_utc(body["createdAt"].as_str().expect("createdAt"));
    let secret = body["secret"].as_str().expect("secret").to_owned();
    assert_secret(&secret);

    let listed = list(&api, &key).await;
    assert_eq!(listed, [without_secret(&body)]);
    assert!(listed[0].get("secret").is_none(), "{listed:?}");
    let text = api.get(PATH, &key).await.json.to_string();
    assert!(!text.contains(&secret) && !text.contains("whsec_"), "{text}");

    let second = created(&api, &key, &url(2), &["assessment.completed"]).await;
    assert_ne!(second["id"], body["id"]);
    assert_ne!(second["secret"].as_str(), Some(secret.as_str()), "each subscription has its own secret");
    assert_secret(second["secret"].as_str().expect("secret"));
    assert_eq!(list(&api, &key).await, [without_secret(&body), without_secret(&second)], "oldest first");
}

#[tokio::test]
async fn events_are_deduplicated_in_the_order_first_given() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let body = created(
        &api,
        &key,
        &hook(),
        &["assessment.completed", "profile.updated", "assessment.completed", "profile.updated"],
    )
    .await;
    assert_eq!(body["events"], json!(["assessment.completed", "profile.updated"]));
    let single = created(&api, &key, &url(1), &["profile.updated", "profile.updated"]).await;
    assert_eq!(single["events"], json!(["profile.updated"]));
    let listed = list(&api, &key).await;
    assert_eq!(
        listed.iter().map(|s| s["events"].clone()).collect::<Vec<_>>(),
        [json!(["assessment.completed", "profile.updated"]), json!(["profile.updated"])]
    );
}

#[tokio::test]
async fn a_body_that_is_not_a_json_object_is_invalid_json() {
    let api = Api::loopback();
    let (key, before) = user_with_one(&api).await;
    for body in [json!([]), json!(null), json!("x"), json!(5), json!([{"url": hook(), "events": ["profile.updated"]}])]
    {
        refused(&api, &key, &body, "request.invalid_json", &before).await;
    }
    for broken in [r#"{"url": "https://hooks.example.com/", "events": ["profile.updated"]"#, "{url: 1}", ""] {
        api.send_json(Method::POST, PATH, &key, broken).await.assert_error(400, "request.invalid_json");
        assert_eq!(list(&api, &key).await, before, "after {broken:?}");
    }
    let answer = api
        .request(Method::POST, PATH)
        .key(&key)
        .header("content-type", "text/plain")
        .body(json!({"url": hook(), "events": ["profile.updated"]}).to_string().as_bytes())
        .send()
        .await;
    answer.assert_error(400, "request.unsupported_media_type");
    assert_eq!(list(&api, &key).await, before);
}

/// Contract section 18: `maxDeliveriesPerSecond` at create, shown on the subscription.
#[tokio::test]
async fn a_rate_limit_is_declared_at_create_and_shown() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let body = json!({"url": hook(), "events": ["profile.updated"], "maxDeliveriesPerSecond": 10_000});
    let answer = create(&api, &key, &body).await;
    assert_eq!(answer.assert_status(201)["maxDeliveriesPerSecond"], json!(10_000));
    let listed = api.get(PATH, &key).await;
    assert_eq!(listed.assert_status(200)["webhooks"][0]["maxDeliveriesPerSecond"], json!(10_000));
    for bad in [json!(0), json!(10_001), json!(1.5), json!("5"), json!(true)] {
        let body = json!({"url": hook(), "events": ["profile.updated"], "maxDeliveriesPerSecond": bad});
        create(&api, &key, &body).await.assert_error(400, "webhooks.invalid_rate_limit");
    }
}

#[tokio::test]
async fn a_missing_or_null_url_or_events_is_missing_required_fields() {
    let api = Api::loopback();
    let (key, before) = user_with_one(&api).await;
    for body in [
        json!({}),
        json!({"url": hook()}),
        json!({"events": ["profile.updated"]}),
        json!({"url": null, "events": ["profile.updated"]}),
        json!({"url": hook(), "events": null}),
        json!({"url": null, "events": null}),
        json!({"Url": hook(), "Events": ["profile.updated"]}),
        // Missing fields come before an invalid url or invalid events.
        json!({"url": 5, "events": null}),
        json!({"url": "http://localhost/", "events": null}),
        json!({"url": null, "events": []}),
        json!({"events": "nope"}),
    ] {
        refused(&api, &key, &body, "webhooks.missing_required_fields", &before).await;
    }
}

#[tokio::test]
async fn each_kind_of_invalid_url_is_refused() {
    let strict = Api::new();
    let (key, before) = user_with_one(&Api::loopback()).await;
    let too_long = format!("https://hooks.example.com/{}", "a".repeat(2048 - "https://hooks.example.com/".len() + 1));
    assert_eq!(too_long.len(), 2049);
    let invalid: Vec<Value> = vec![
        json!(5),
        json!(true),
        json!({"href": hook()}),
        json!([hook()]),
        json!(too_long),
        json!(""),
        json!("/career/hook"),
        json!("hooks.example.com/career"),
        json!("https://"),
        json!("http://hooks.example.com/career"),
        json!("ftp://hooks.example.com/career"),
        json!("javascript:alert(1)"),
        json!("https://user:secret@hooks.example.com/career"),
        json!("https://user@hooks.example.com/career"),
        json!("https://localhost/career"),
        json!("https://LOCALHOST./career"),
        json!("https://api.localhost/career"),
        json!("https://127.0.0.1/career"),
        json!("https://192.0.2.10/career"),
        json!("https://198.51.100.7/career"),
        json!("https://203.0.113.200/career"),
        json!("https://[::ffff:0:127.0.0.1]/career"),
        json!("https://[::ffff:0:a9fe:a9fe]/career"),
        json!("https://[::ffff:0:192.0.2.1]/career"),
        json!("https://127.0.0.1:8443/career"),
        json!("https://10.0.0.1/career"),
        json!("https://10.20.30.40/career"),
        json!("https://172.16.0.1/career"),
        json!("https://192.168.1.1/career"),
        json!("https://169.254.169.254/latest/meta-data/"),
        json!("https://100.64.0.1/career"),
        json!("https://0.0.0.0/career"),
        json!("https://224.0.0.1/career"),
        json!("https://255.255.255.255/career"),
        json!("https://[::1]/career"),
        json!("https://[::]/career"),
        json!("https://[fd00::1]/career"),
        json!("https://[fe80::1]/career"),
        json!("https://[::ffff:127.0.0.1]/career"),
        json!("https://0x7f000001/career"),
        json!("https://2130706433/career"),
    ];
    for url in invalid {
        refused(&strict, &key, &json!({"url": url, "events": ["profile.updated"]}), "webhooks.invalid_url", &before)
            .await;
    }
}

#[tokio::test]
async fn a_url_of_2048_characters_is_accepted() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let prefix = format!("{}/", sink_url());
    let longest = format!("{prefix}{}", "a".repeat(2048 - prefix.len()));
    assert_eq!(longest.len(), 2048);
    let body = created(&api, &key, &longest, &["profile.updated"]).await;
    assert_eq!(body["url"], longest);
    assert_eq!(list(&api, &key).await.len(), 1);
}

/// What the production setting accepts, shown where the URL is parsed: a subscription to a
/// public host would be one the delivery function tries to reach, so none is created.
#[test]
fn the_production_setting_accepts_public_https_urls_of_2048_characters() {
    let prefix = "https://hooks.example.com/";
    let longest = format!("{prefix}{}", "a".repeat(2048 - prefix.len()));
    for public in [longest.as_str(), "https://93.184.216.34:8443/hook", "https://hooks.example.com/career?x=1"] {
        let parsed =
            WebhookUrl::parse(&json!(public), &UrlPolicy::default()).unwrap_or_else(|e| panic!("{public}: {e}"));
        assert_eq!(parsed.as_str(), public);
    }
}

#[tokio::test]
async fn http_and_loopback_urls_are_accepted_only_with_the_local_stacks_settings() {
    let strict = Api::new();
    assert_eq!(strict.settings.webhook_urls, Default::default(), "https only and no allowed network by default");
    let user = unique_user();
    let key = strict.full_key(&user).await;
    for target in ["http://127.0.0.1:8080/hook", "https://127.0.0.1:8080/hook", "http://localhost:3000/hook"] {
        refused(&strict, &key, &json!({"url": target, "events": ["profile.updated"]}), "webhooks.invalid_url", &[])
            .await;
    }

    let insecure = Api::loopback();
    let mut expected = Vec::new();
    // Loopback receivers only (the test binary's): http, and a loopback address or name.
    let by_name = sink_url().replace("127.0.0.1", "localhost");
    for target in [sink_url(), by_name.as_str()] {
        let body = created(&insecure, &key, target, &["profile.updated"]).await;
        assert_eq!(body["url"], target);
        expected.push(without_secret(&body));
    }
    assert_eq!(list(&insecure, &key).await, expected);
    // The settings allow http and loopback targets, nothing else.
    for target in ["ftp://127.0.0.1/hook", "https://user:pw@127.0.0.1/hook", "/relative", "127.0.0.1:8080"] {
        refused(
            &insecure,
            &key,
            &json!({"url": target, "events": ["profile.updated"]}),
            "webhooks.invalid_url",
            &expected,
        )
        .await;
    }
}

/// A private target that is not this machine is refused with the local stack's settings
/// too (they allow loopback only), and taken once its network is on the allow-list: shown
/// where the URL is parsed, as a subscription to it would be one the delivery function tries
/// to reach.
#[test]
fn the_allow_list_admits_private_targets_only_in_its_networks() {
    let local = UrlPolicy::local_stack();
    let listed = UrlPolicy {
        guard: Guard::allowing(vec!["10.0.0.0/8".parse().unwrap(), "192.168.1.1".parse().unwrap()]),
        ..local.clone()
    };
    for private in ["https://10.0.0.5/hook", "http://192.168.1.1:8080/hook"] {
        assert!(WebhookUrl::parse(&json!(private), &local).is_err(), "{private}");
        let parsed = WebhookUrl::parse(&json!(private), &listed).unwrap_or_else(|e| panic!("{private}: {e}"));
        assert_eq!(parsed.as_str(), private);
    }
    assert!(
        WebhookUrl::parse(&json!("http://192.168.1.2/hook"), &listed).is_err(),
        "one host listed, not its neighbour"
    );
}

#[tokio::test]
async fn invalid_events_are_refused() {
    let api = Api::loopback();
    let (key, before) = user_with_one(&api).await;
    for events in [
        json!([]),
        json!(["unknown.kind"]),
        json!(["profile.updated", "unknown.kind"]),
        json!(["Profile.Updated"]),
        json!(["profile.updated", null]),
        json!([1]),
        json!([["profile.updated"]]),
        json!("profile.updated"),
        json!({"profile.updated": true}),
        json!(5),
        json!(true),
    ] {
        refused(&api, &key, &json!({"url": hook(), "events": events}), "webhooks.invalid_events", &before).await;
    }
}

/// `webhook.ping` is a kind the catalog lists, so the answer says it cannot be listed rather
/// than that it is unknown.
#[tokio::test]
async fn a_ping_in_events_is_refused_as_not_subscribable() {
    let api = Api::loopback();
    let (key, before) = user_with_one(&api).await;
    let body = json!({"url": hook(), "events": ["profile.updated", "webhook.ping"]});
    let answer = create(&api, &key, &body).await;
    answer.assert_error(400, "webhooks.invalid_events");
    assert_eq!(
        answer.json["error"]["message"],
        "Invalid events: event kind \"webhook.ping\" is not subscribable (GET /api/v1/webhooks/event-types says \
         which are)."
    );
    assert_eq!(list(&api, &key).await, before);
}

#[tokio::test]
async fn when_url_and_events_are_both_invalid_the_url_error_wins() {
    let strict = Api::new();
    let (key, before) = user_with_one(&Api::loopback()).await;
    for body in [
        json!({"url": "http://hooks.example.com/", "events": []}),
        json!({"url": 5, "events": ["unknown.kind"]}),
        json!({"url": "https://127.0.0.1/", "events": "profile.updated"}),
    ] {
        refused(&strict, &key, &body, "webhooks.invalid_url", &before).await;
    }
}

#[tokio::test]
async fn at_most_25_subscriptions_per_user() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let mut ids = Vec::new();
    for n in 0..25 {
        ids.push(created(&api, &key, &url(n), &["profile.updated"]).await["id"].as_str().expect("id").to_owned());
    }
    let before = list(&api, &key).await;
    assert_eq!(before.len(), 25);
    for _ in 0..2 {
        refused(
            &api,
            &key,
            &json!({"url": url(25), "events": ["profile.updated"]}),
            "webhooks.limit_exceeded",
            &before,
        )
        .await;
    }

    let answer = delete(&api, &key, &format!("?id={}", ids[3])).await;
    assert_eq!(answer.assert_status(200), &json!({"id": ids[3], "deleted": true}));
    assert_eq!(list(&api, &key).await.len(), 24);
    let replacement = created(&api, &key, &url(26), &["assessment.completed"]).await;
    let full = list(&api, &key).await;
    assert_eq!(full.len(), 25);
    assert!(full.contains(&without_secret(&replacement)), "{full:?}");
    refused(&api, &key, &json!({"url": url(27), "events": ["profile.updated"]}), "webhooks.limit_exceeded", &full)
        .await;

    // The limit is per user.
    let other = api.full_key(&unique_user()).await;
    created(&api, &other, &url(0), &["profile.updated"]).await;
    assert_eq!(list(&api, &key).await, full);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_never_exceed_the_limit() {
    let api = Arc::new(Api::loopback());
    let key = api.full_key(&unique_user()).await;
    for n in 0..20 {
        created(&api, &key, &url(n), &["profile.updated"]).await;
    }
    let tasks: Vec<_> = (100..115)
        .map(|n| {
            let (api, key) = (api.clone(), key.clone());
            tokio::spawn(
                async move { create(&api, &key, &json!({"url": url(n), "events": ["profile.updated"]})).await },
            )
        })
        .collect();
    let mut created_ids = Vec::new();
    for task in tasks {
        let answer = task.await.expect("task");
        match answer.status.as_u16() {
            201 => created_ids.push(answer.json["id"].clone()),
            _ => answer.assert_error(400, "webhooks.limit_exceeded"),
        }
    }
    assert_eq!(created_ids.len(), 5, "exactly the 5 free places are taken");
    let listed = list(&api, &key).await;
    assert_eq!(listed.len(), 25);
    for id in &created_ids {
        assert!(listed.iter().any(|s| &s["id"] == id), "{id} listed");
    }

    // A burst on an empty account: at most 25 are created, and the list shows exactly those.
    let key = api.full_key(&unique_user()).await;
    let tasks: Vec<_> = (0..32)
        .map(|n| {
            let (api, key) = (api.clone(), key.clone());
            tokio::spawn(
                async move { create(&api, &key, &json!({"url": url(n), "events": ["profile.updated"]})).await },
            )
        })
        .collect();
    let mut created = 0;
    for task in tasks {
        let answer = task.await.expect("task");
        match answer.status.as_u16() {
            201 => created += 1,
            _ => answer.assert_error(400, "webhooks.limit_exceeded"),
        }
    }
    assert_eq!(created, 25);
    assert_eq!(list(&api, &key).await.len(), 25);
}

#[tokio::test]
async fn delete_removes_the_subscription_once() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let keep = created(&api, &key, &url(1), &["profile.updated"]).await;
    let gone = created(&api, &key, &url(2), &["assessment.completed"]).await;
    let id = gone["id"].as_str().expect("id");

    let answer = delete(&api, &key, &format!("?id={id}")).await;
    assert_eq!(answer.assert_status(200), &json!({"id": id, "deleted": true}));
    assert_eq!(list(&api, &key).await, [without_secret(&keep)]);

    delete(&api, &key, &format!("?id={id}")).await.assert_error(404, "webhooks.not_found");
    assert_eq!(list(&api, &key).await, [without_secret(&keep)]);
}

#[tokio::test]
async fn delete_without_an_id_or_with_an_unknown_one_changes_nothing() {
    let api = Api::loopback();
    let (key, before) = user_with_one(&api).await;
    for query in ["", "?id=", "?ID=whk_01ARZ3NDEKTSV4RRFFQ69G5FAV", "?subscriptionId=x", "?id=&other=1"] {
        delete(&api, &key, query).await.assert_error(400, "webhooks.missing_subscription_id");
        assert_eq!(list(&api, &key).await, before, "after {query:?}");
    }
    let own = before[0]["id"].as_str().expect("id");
    for garbage in [
        "nope".to_owned(),
        "whk_".to_owned(),
        "whk_01ARZ3NDEKTSV4RRFFQ69G5FAV".to_owned(),
        own.to_lowercase(),
        format!("{own}X"),
        "%23count".to_owned(),
        "alr_01ARZ3NDEKTSV4RRFFQ69G5FAV".to_owned(),
    ] {
        delete(&api, &key, &format!("?id={garbage}")).await.assert_error(404, "webhooks.not_found");
        assert_eq!(list(&api, &key).await, before, "after {garbage:?}");
    }
    // The count of subscriptions is intact: 24 more fit, the 26th does not.
    for n in 1..25 {
        created(&api, &key, &url(n), &["profile.updated"]).await;
    }
    let full = list(&api, &key).await;
    refused(&api, &key, &json!({"url": url(99), "events": ["profile.updated"]}), "webhooks.limit_exceeded", &full)
        .await;
}

#[tokio::test]
async fn another_user_can_neither_see_nor_delete_a_subscription() {
    let api = Api::loopback();
    let (a, b) = (api.full_key(&unique_user()).await, api.full_key(&unique_user()).await);
    let subscription = created(&api, &a, &hook(), &["profile.updated"]).await;
    let a_before = list(&api, &a).await;
    assert_eq!(a_before, [without_secret(&subscription)]);

    assert_eq!(list(&api, &b).await, Vec::<Value>::new());
    let id = subscription["id"].as_str().expect("id");
    delete(&api, &b, &format!("?id={id}")).await.assert_error(404, "webhooks.not_found");
    assert_eq!(list(&api, &a).await, a_before);

    let own = created(&api, &b, &hook(), &["profile.updated"]).await;
    assert_eq!(list(&api, &b).await, [without_secret(&own)]);
    assert_eq!(list(&api, &a).await, a_before);
    let answer = delete(&api, &a, &format!("?id={id}")).await;
    assert_eq!(answer.assert_status(200), &json!({"id": id, "deleted": true}));
    assert_eq!(list(&api, &b).await, [without_secret(&own)]);
}

#[tokio::test]
async fn list_needs_read_webhooks_and_create_and_delete_need_write_webhooks() {
    let api = Api::loopback();
    let user = unique_user();
    let reader = api.key(&user, "read:webhooks").await;
    let writer = api.key(&user, "write:webhooks").await;
    let all_but_read =
        api.key(&user, "read:alerts,write:alerts,read:data_sharing,write:data_sharing,write:webhooks").await;
    let all_but_write =
        api.key(&user, "read:alerts,write:alerts,read:data_sharing,write:data_sharing,read:webhooks").await;
    let insufficient = |scope: &str| format!(r#"Bearer realm="api", error="insufficient_scope", scope="{scope}""#);

    assert_eq!(list(&api, &reader).await, Vec::<Value>::new());
    for key in [&all_but_read, &writer] {
        let answer = api.get(PATH, key).await;
        answer.assert_error(403, "auth.forbidden");
        assert_eq!(answer.header("www-authenticate"), Some(insufficient("read:webhooks").as_str()));
    }

    for key in [&all_but_write, &reader] {
        let answer = create(&api, key, &json!({"url": hook(), "events": ["profile.updated"]})).await;
        answer.assert_error(403, "auth.forbidden");
        assert_eq!(answer.header("www-authenticate"), Some(insufficient("write:webhooks").as_str()));
        assert_eq!(list(&api, &reader).await, Vec::<Value>::new(), "a refused create stores nothing");
    }

    let subscription = created(&api, &writer, &hook(), &["profile.updated"]).await;
    let id = subscription["id"].as_str().expect("id");
    assert_eq!(list(&api, &reader).await, [without_secret(&subscription)]);

    for key in [&all_but_write, &reader] {
        let answer = delete(&api, key, &format!("?id={id}")).await;
        answer.assert_error(403, "auth.forbidden");
        assert_eq!(answer.header("www-authenticate"), Some(insufficient("write:webhooks").as_str()));
        assert_eq!(list(&api, &reader).await, [without_secret(&subscription)]);
    }
    let answer = delete(&api, &writer, &format!("?id={id}")).await;
    assert_eq!(answer.assert_status(200), &json!({"id": id, "deleted": true}));
    assert_eq!(list(&api, &reader).await, Vec::<Value>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_deletes_of_one_subscription_succeed_once() {
    let api = Arc::new(Api::loopback());
    let key = api.full_key(&unique_user()).await;
    let mut ids = Vec::new();
    for n in 0..25 {
        ids.push(created(&api, &key, &url(n), &["profile.updated"]).await["id"].as_str().expect("id").to_owned());
    }
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (api, key, id) = (api.clone(), key.clone(), ids[7].clone());
            tokio::spawn(async move { delete(&api, &key, &format!("?id={id}")).await })
        })
        .collect();
    let mut deleted = 0;
    for task in tasks {
        let answer = task.await.expect("task");
        match answer.status.as_u16() {
            200 => {
                assert_eq!(answer.json, json!({"id": ids[7], "deleted": true}));
                deleted += 1;
            }
            _ => answer.assert_error(404, "webhooks.not_found"),
        }
    }
    assert_eq!(deleted, 1);
    assert_eq!(list(&api, &key).await.len(), 24);
    // The place was freed once: one create fits, the next does not.
    created(&api, &key, &url(30), &["profile.updated"]).await;
    let full = list(&api, &key).await;
    assert_eq!(full.len(), 25);
    refused(&api, &key, &json!({"url": url(31), "events": ["profile.updated"]}), "webhooks.limit_exceeded", &full)
        .await;
}

// ------------------------------------------------------------------------------------------
// Updates (contract section 13): PATCH /api/v1/webhooks?id=…

pub(crate) async fn update(api: &Api, key: &str, id: &str, body: &str) -> Answer {
    api.send_json(Method::PATCH, &format!("{PATH}?id={id}"), key, body).await
}

/// The subscription as listed, found by id.
pub(crate) async fn listed(api: &Api, key: &str, id: &str) -> Value {
    let all = list(api, key).await;
    all.into_iter().find(|s| s["id"] == id).unwrap_or_else(|| panic!("{id} is not listed"))
}

#[tokio::test]
async fn update_changes_url_and_kinds_and_keeps_id_secret_and_creation_time() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let first = created(&api, &key, &hook(), &["profile.updated"]).await;
    let id = first["id"].as_str().unwrap();

    // The production setting's normalisation (scheme and host lower-cased, the default port
    // and dot segments dropped) is shown where the URL is parsed; what is stored is the same
    // normalisation of a loopback URL.
    let public = WebhookUrl::parse(&json!("HTTPS://Hooks.Example.COM:443/v2/./in"), &UrlPolicy::default()).unwrap();
    assert_eq!(public.as_str(), "https://hooks.example.com/v2/in");
    let sent = format!("{}/v2/./in", sink_url().replace("http://", "HTTP://"));
    let body = json!({"url": sent, "events": ["assessment.completed", "profile.updated", "assessment.completed"]});
    let answer = update(&api, &key, id, &body.to_string()).await;
    let body = answer.assert_status(200).clone();
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let mut expected = without_secret(&first);
    expected["url"] = json!(format!("{}/v2/in", sink_url()));
    expected["events"] = json!(["assessment.completed", "profile.updated"]);
    assert_eq!(body, expected, "the normalised URL, the kinds deduplicated, the rest as it was");
    assert!(body.get("secret").is_none());
    assert_eq!(list(&api, &key).await, [expected.clone()]);

    // One field at a time; the others stay.
    let answer = update(&api, &key, id, r#"{"events": ["profile.updated"]}"#).await;
    expected["events"] = json!(["profile.updated"]);
    assert_eq!(answer.assert_status(200), &expected);
    let answer = update(&api, &key, id, &json!({"url": hook()}).to_string()).await;
    expected["url"] = json!(hook());
    assert_eq!(answer.assert_status(200), &expected);
    assert_eq!(list(&api, &key).await, [expected]);

    // The secret is the one create showed: a rotation's grace period still signs with it.
    let rotated = api.request(Method::POST, &format!("{PATH}/rotate-secret?id={id}")).key(&key).send().await;
    assert_ne!(rotated.assert_status(200)["secret"], first["secret"]);
}

#[tokio::test]
async fn pause_and_resume_set_and_clear_the_manual_reason() {
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let first = created(&api, &key, &hook(), &["profile.updated"]).await;
    let id = first["id"].as_str().unwrap();

    let paused = update(&api, &key, id, r#"{"enabled": false}"#).await.assert_status(200).clone();
    assert_eq!((&paused["enabled"], &paused["disabledReason"]), (&json!(false), &json!("manual")));
    assert_rfc3339_utc(paused["disabledAt"].as_str().expect("disabledAt"));
    assert_eq!(listed(&api, &key, id).await, paused);
    // Pausing again is harmless and keeps the first time.
    assert_eq!(update(&api, &key, id, r#"{"enabled": false}"#).await.assert_status(200), &paused);
    // A change of URL leaves it paused.
    let moved = update(&api, &key, id, &json!({"url": url(9)}).to_string()).await.assert_status(200).clone();
    assert_eq!(
        (&moved["enabled"], &moved["disabledAt"], &moved["url"]),
        (&json!(false), &paused["disabledAt"], &json!(url(9)))
    );

    let resumed = update(&api, &key, id, r#"{"enabled": true}"#).await.assert_status(200).clone();
    assert_eq!(
        (&resumed["enabled"], &resumed["disabledAt"], &resumed["disabledReason"]),
        (&json!(true), &Value::Null, &Value::Null)
    );
    assert_eq!(update(&api, &key, id, r#"{"enabled": true}"#).await.assert_status(200), &resumed);

    // A subscription disabled for failing: a pause makes the reason manual and keeps the
    // time; a resume turns it on and resets its failure clock, as enable does.
    let webhooks = WebhookTable::new(career_service::dynamodb(), &api.settings.tables.webhooks);
    let (user_id, subscription_id) = (typed(&user), typed(id));
    let since: Timestamp = typed("2026-11-01T00:00:00.000Z");
    webhooks.start_failure_clock(&user_id, &subscription_id, &career_service::failed_attempt(since)).await.unwrap();
    let at: Timestamp = typed("2026-11-06T00:00:00.000Z");
    assert!(webhooks
        .disable(&user_id, &subscription_id, (DisabledReason::Failing, Some(since)), None, at)
        .await
        .unwrap());
    let paused = update(&api, &key, id, r#"{"enabled": false}"#).await.assert_status(200).clone();
    assert_eq!((&paused["disabledReason"], &paused["disabledAt"]), (&json!("manual"), &json!(at)));
    let resumed = update(&api, &key, id, r#"{"enabled": true, "events": ["assessment.completed"]}"#).await;
    assert_eq!(resumed.assert_status(200)["enabled"], true);
    let stored = webhooks.get(&user_id, &subscription_id).await.unwrap().unwrap();
    assert_eq!(stored.health, Health::Active);
    assert_eq!(stored.events, [career_core::events::EventKind::AssessmentCompleted]);
}

/// Each refused body, in the contract's order of checks, leaves the subscription as it was.
#[tokio::test]
async fn update_checks_come_in_the_contracts_order_and_a_refusal_changes_nothing() {
    let api = Api::new();
    let (key, before) = user_with_one(&Api::loopback()).await;
    let id = before[0]["id"].as_str().unwrap().to_owned();
    let too_long = format!("https://hooks.example.com/{}", "a".repeat(2048 - "https://hooks.example.com/".len() + 1));
    let cases: Vec<(Value, &str)> = vec![
        (json!({}), "webhooks.no_changes"),
        (json!({"secret": "whsec_x", "id": "whk_1"}), "webhooks.no_changes"),
        (json!({"Enabled": false}), "webhooks.no_changes"),
        (json!({"enabled": false, "secret": "whsec_x"}), "webhooks.unknown_field"),
        (json!({"url": 5, "createdAt": "2026-01-01T00:00:00.000Z"}), "webhooks.unknown_field"),
        (json!({"enabled": "false"}), "webhooks.invalid_enabled"),
        (json!({"enabled": null}), "webhooks.invalid_enabled"),
        (json!({"enabled": 0, "url": 5, "events": []}), "webhooks.invalid_enabled"),
        (json!({"enabled": 1, "asymmetricSigning": true}), "webhooks.invalid_enabled"),
        (json!({"asymmetricSigning": "true"}), "webhooks.invalid_asymmetric_signing"),
        (json!({"asymmetricSigning": null}), "webhooks.invalid_asymmetric_signing"),
        (json!({"asymmetricSigning": 1, "enabled": false}), "webhooks.invalid_asymmetric_signing"),
        (json!({"asymmetricSigning": [true], "url": 5, "events": []}), "webhooks.invalid_asymmetric_signing"),
        (json!({"asymmetricSigning": true, "url": null}), "webhooks.invalid_url"),
        (json!({"url": null}), "webhooks.invalid_url"),
        (json!({"url": "http://hooks.example.com/"}), "webhooks.invalid_url"),
        (json!({"url": "https://127.0.0.1/"}), "webhooks.invalid_url"),
        (json!({"url": too_long}), "webhooks.invalid_url"),
        (json!({"url": "https://u:p@hooks.example.com/", "events": []}), "webhooks.invalid_url"),
        (json!({"url": "https://hooks.example.com/", "enabled": true, "events": null}), "webhooks.invalid_events"),
        (json!({"events": []}), "webhooks.invalid_events"),
        (json!({"events": ["webhook.ping"]}), "webhooks.invalid_events"),
        (json!({"events": "profile.updated"}), "webhooks.invalid_events"),
    ];
    for (body, code) in cases {
        let answer = update(&api, &key, &id, &body.to_string()).await;
        assert_eq!(answer.json["error"]["code"].as_str(), Some(code), "{body}: {answer:?}");
        answer.assert_error(400, code);
        assert_eq!(list(&api, &key).await, before, "after {body}");
    }
    for not_an_object in ["[]", "null", "true", "\"enabled\"", "{", ""] {
        update(&api, &key, &id, not_an_object).await.assert_error(400, "request.invalid_json");
    }
    let text = api
        .request(Method::PATCH, &format!("{PATH}?id={id}"))
        .key(&key)
        .header("content-type", "text/plain")
        .body(br#"{"enabled": false}"#)
        .send()
        .await;
    text.assert_error(400, "request.unsupported_media_type");
    // The id is checked before the body, its existence after it.
    for query in ["", "?id=", "?ID=x"] {
        let answer = api.send_json(Method::PATCH, &format!("{PATH}{query}"), &key, "nope").await;
        answer.assert_error(400, "webhooks.missing_subscription_id");
    }
    let unknown = career_core::ids::new_id(career_core::ids::SUBSCRIPTION);
    update(&api, &key, &unknown, "{}").await.assert_error(400, "webhooks.no_changes");
    update(&api, &key, "nonsense", r#"{"enabled": 1}"#).await.assert_error(400, "webhooks.invalid_enabled");
    for id in [unknown.as_str(), "nonsense", "%23count", &id.to_lowercase()] {
        update(&api, &key, id, r#"{"enabled": false}"#).await.assert_error(404, "webhooks.not_found");
    }
    assert_eq!(list(&api, &key).await, before);
}

/// Contract section 13, "URLs": 2048 characters as sent and once normalised, on create and
/// on update alike; what is stored is the normalised URL.
#[tokio::test]
async fn a_url_that_normalises_past_2048_characters_is_refused_on_create_and_update() {
    let api = Api::loopback();
    let (key, before) = user_with_one(&api).await;
    let id = before[0]["id"].as_str().unwrap().to_owned();
    let prefix = &format!("{}/", sink_url());
    let non_ascii = format!("{prefix}{}", "é".repeat(2048 - prefix.len()));
    assert_eq!(non_ascii.chars().count(), 2048);
    let spaced = format!("{prefix}{}", " a".repeat((2048 - prefix.len()) / 2));
    for url in [&non_ascii, &spaced] {
        let body = json!({"url": url, "events": ["profile.updated"]});
        let answer = create(&api, &key, &body).await;
        answer.assert_error(400, "webhooks.invalid_url");
        assert!(answer.json["error"]["message"].as_str().unwrap().contains("once normalised"), "{answer:?}");
        update(&api, &key, &id, &json!({"url": url}).to_string()).await.assert_error(400, "webhooks.invalid_url");
    }
    assert_eq!(list(&api, &key).await, before);
    // "é" becomes "%C3%A9": 227 of them make 2048 characters, 228 one too many.
    let fits = format!("{prefix}{}{}", "a".repeat(2048 - prefix.len() - 227 * 6), "é".repeat(227));
    let stored = update(&api, &key, &id, &json!({"url": fits}).to_string()).await.assert_status(200).clone();
    assert_eq!(stored["url"].as_str().map(str::len), Some(2048));
    let over = format!("{prefix}{}{}", "a".repeat(2048 - prefix.len() - 227 * 6), "é".repeat(228));
    update(&api, &key, &id, &json!({"url": over}).to_string()).await.assert_error(400, "webhooks.invalid_url");
    assert_eq!(listed(&api, &key, &id).await, stored);
}

#[tokio::test]
async fn another_user_cannot_update_a_subscription() {
    let api = Api::loopback();
    let (a, b) = (api.full_key(&unique_user()).await, api.full_key(&unique_user()).await);
    let subscription = created(&api, &a, &hook(), &["profile.updated"]).await;
    let id = subscription["id"].as_str().unwrap();
    for body in [r#"{"enabled": false}"#, r#"{"url": "https://hooks.example.com/stolen"}"#] {
        update(&api, &b, id, body).await.assert_error(404, "webhooks.not_found");
    }
    assert_eq!(list(&api, &a).await, [without_secret(&subscription)]);
    assert_eq!(list(&api, &b).await, Vec::<Value>::new());
}

#[tokio::test]
async fn update_needs_write_webhooks_and_the_event_catalog_read_webhooks() {
    let api = Api::loopback();
    let user = unique_user();
    let writer = api.key(&user, "write:webhooks").await;
    let reader = api.key(&user, "read:webhooks").await;
    let all_but_write =
        api.key(&user, "read:alerts,write:alerts,read:data_sharing,write:data_sharing,read:webhooks").await;
    let subscription = created(&api, &writer, &hook(), &["profile.updated"]).await;
    let id = subscription["id"].as_str().unwrap();
    let insufficient = |scope: &str| format!(r#"Bearer realm="api", error="insufficient_scope", scope="{scope}""#);
    for key in [&reader, &all_but_write] {
        let answer = update(&api, key, id, r#"{"enabled": false}"#).await;
        answer.assert_error(403, "auth.forbidden");
        assert_eq!(answer.header("www-authenticate"), Some(insufficient("write:webhooks").as_str()));
    }
    assert_eq!(list(&api, &reader).await, [without_secret(&subscription)]);
    update(&api, &writer, id, r#"{"enabled": false}"#).await.assert_status(200);

    let catalog = "/api/v1/webhooks/event-types";
    let answer = api.get(catalog, &writer).await;
    answer.assert_error(403, "auth.forbidden");
    assert_eq!(answer.header("www-authenticate"), Some(insufficient("read:webhooks").as_str()));
    let answer = api.get(catalog, &reader).await;
    let types = answer.assert_status(200)["eventTypes"].as_array().unwrap().clone();
    let names: Vec<_> =
        types.iter().map(|t| (t["name"].as_str().unwrap(), t["subscribable"].as_bool().unwrap())).collect();
    assert_eq!(
        names,
        [
            ("profile.updated", true),
            ("assessment.completed", true),
            ("webhook.endpoint.failing", true),
            ("webhook.endpoint.disabled", true),
            ("webhook.endpoint.recovered", true),
            ("webhook.delivery.exhausted", true),
            ("webhook.ping", false)
        ]
    );
    // The operational kinds (contract section 15) are listed on update as on create.
    let operational = r#"{"events": ["webhook.endpoint.failing", "webhook.delivery.exhausted"]}"#;
    let updated = update(&api, &writer, id, operational).await;
    assert_eq!(updated.assert_status(200)["events"], json!(["webhook.endpoint.failing", "webhook.delivery.exhausted"]));
    for event_type in &types {
        let mut fields: Vec<_> = event_type.as_object().unwrap().keys().cloned().collect();
        fields.sort();
        assert_eq!(fields, ["description", "example", "name", "schema", "subscribable"]);
        assert_eq!(event_type["example"]["type"], event_type["name"]);
    }
    assert!(answer.header("ratelimit-remaining").is_some());
    api.get(catalog, "cak_nonsense").await.assert_error(401, "auth.unauthorized");
}

/// Updates, rotations, enables and deletes of one subscription at the same moment: none is
/// a 500; each applies (200) or, once the subscription is deleted, finds it gone (404).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_rotations_enables_and_deletes_never_fail() {
    let api = Arc::new(Api::loopback());
    let user = unique_user();
    let key = api.full_key(&user).await;
    // Other subscriptions of the user, created meanwhile, hold the counter item in transactions.
    for round in 0..2 {
        let id = created(&api, &key, &hook(), &["profile.updated"]).await["id"].as_str().unwrap().to_owned();
        let tasks: Vec<_> = (0..24)
            .map(|n| {
                let (api, key, id) = (api.clone(), key.clone(), id.clone());
                tokio::spawn(async move {
                    let answer = match n % 6 {
                        0 => {
                            update(
                                &api,
                                &key,
                                &id,
                                &json!({"url": url(n), "events": ["assessment.completed"]}).to_string(),
                            )
                            .await
                        }
                        1 => update(&api, &key, &id, r#"{"enabled": false}"#).await,
                        2 => update(&api, &key, &id, &json!({"enabled": true, "url": url(n)}).to_string()).await,
                        3 => {
                            api.send_json(
                                Method::POST,
                                &format!("{PATH}/rotate-secret?id={id}"),
                                &key,
                                r#"{"gracePeriodSeconds": 60}"#,
                            )
                            .await
                        }
                        4 => api.request(Method::POST, &format!("{PATH}/enable?id={id}")).key(&key).send().await,
                        _ if round == 1 && n == 11 => delete(&api, &key, &format!("?id={id}")).await,
                        _ => create(&api, &key, &json!({"url": url(n), "events": ["profile.updated"]})).await,
                    };
                    (n, answer)
                })
            })
            .collect();
        let mut deleted = false;
        for task in tasks {
            let (n, answer) = task.await.unwrap();
            match answer.status.as_u16() {
                200 | 201 => deleted |= answer.json.get("deleted") == Some(&json!(true)),
                _ if round == 1 => answer.assert_error(404, "webhooks.not_found"),
                _ => panic!("request {n}: {answer:?}"),
            }
        }
        let shown = list(&api, &key).await;
        match round {
            0 => {
                let subscription = shown.iter().find(|s| s["id"] == id.as_str()).expect("still there");
                assert_eq!(
                    subscription["enabled"].as_bool(),
                    Some(subscription["disabledAt"].is_null()),
                    "{subscription}"
                );
            }
            _ => {
                assert!(deleted, "the delete applied");
                assert!(shown.iter().all(|s| s["id"] != id.as_str()), "a change after the delete brought nothing back");
            }
        }
        for old in shown {
            delete(&api, &key, &format!("?id={}", old["id"].as_str().unwrap())).await.assert_status(200);
        }
    }
}

/// Through the whole pipeline (streams, fan-out, queue, delivery function) to receivers on
/// loopback: after a change of URL and kinds the next event goes to the new receiver, for
/// the new kind, signed with the secret create showed; while paused, an event is logged
/// `skipped` and sent nowhere; resumed, it is sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn updates_reach_the_delivery_and_a_pause_skips() {
    use career_core::webhooks::signing::verify_hex;
    use career_service::pipeline::Pipeline;
    use career_service::receiver::Receiver;
    use std::time::Duration;

    let pipeline = Pipeline::start(true).await;
    let api = &pipeline.api;
    let user = unique_user();
    let key = api.full_key(&user).await;
    let (old, new) = (Receiver::start(&[200], Duration::ZERO).await, Receiver::start(&[200], Duration::ZERO).await);
    let first = created(api, &key, &old.url, &["profile.updated"]).await;
    let (id, secret) = (first["id"].as_str().unwrap(), first["secret"].as_str().unwrap());
    let changed = update(api, &key, id, &json!({"url": new.url, "events": ["assessment.completed"]}).to_string()).await;
    changed.assert_status(200);

    api.admin.complete_assessment(&user, None).await.unwrap();
    let delivered = new.wait_for(1, DEADLINE).await.remove(0);
    assert_eq!(delivered.json()["type"], "assessment.completed");
    assert!(verify_hex(secret, &delivered.body, delivered.header("x-webhook-signature")), "the secret create showed");
    assert_eq!(old.received().len(), 0, "nothing for the old URL");

    // Paused, skipping what comes meanwhile: the next event is logged skipped and sent nowhere.
    update(api, &key, id, r#"{"enabled": false, "whileDisabled": "skip"}"#).await.assert_status(200);
    api.admin.complete_assessment(&user, None).await.unwrap();
    let skipped_path = format!("{PATH}/deliveries?id={id}&status=skipped");
    let skipped = eventually("a skipped delivery", || async {
        let listed = api.get(&skipped_path, &key).await.assert_status(200)["deliveries"].clone();
        listed.as_array().is_some_and(|d| !d.is_empty()).then_some(listed.clone()).ok_or(listed)
    })
    .await;
    assert_eq!((&skipped[0]["eventType"], &skipped[0]["attempts"]), (&json!("assessment.completed"), &json!(0)));
    assert_eq!(new.received().len(), 1, "a paused subscription is sent nothing");

    // Resumed: sent again (a ping goes the same way as any event).
    update(api, &key, id, r#"{"enabled": true}"#).await.assert_status(200);
    api.request(Method::POST, &format!("{PATH}/ping?id={id}")).key(&key).send().await.assert_status(202);
    let ping = new.wait_for(2, DEADLINE).await.remove(1);
    assert_eq!(ping.json()["type"], "webhook.ping");
    assert!(verify_hex(secret, &ping.body, ping.header("x-webhook-signature")));
    assert_eq!((old.received().len(), new.received().len()), (0, 2));
}

// ------------------------------------------------------------------------------------------
// Asymmetric signing (contract section 16): asymmetricSigning, publicKey and signing-keys.

const SIGNING_KEYS: &str = "/api/v1/webhooks/signing-keys";

/// `whpk_` and the standard base64 (with padding) of 32 bytes.
#[track_caller]
fn assert_public_key(key: &Value) -> String {
    let text = key.as_str().unwrap_or_else(|| panic!("no public key: {key}"));
    let encoded = text.strip_prefix("whpk_").unwrap_or_else(|| panic!("not a whpk_ key: {text:?}"));
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded);
    assert_eq!((encoded.len(), bytes.map(|b| b.len())), (44, Ok(32)), "{text:?}");
    text.to_owned()
}

/// Creates a subscription with asymmetric signing on and returns the create answer.
async fn create_signed(api: &Api, key: &str, url: &str) -> Value {
    let body = json!({"url": url, "events": ["profile.updated"], "asymmetricSigning": true});
    create(api, key, &body).await.assert_status(201).clone()
}

async fn signing_keys(api: &Api, key: &str, id: &str) -> Answer {
    api.get(&format!("{SIGNING_KEYS}?id={id}"), key).await
}

#[tokio::test]
async fn asymmetric_signing_gives_a_public_key_that_every_read_shows() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let signed = create_signed(&api, &key, &hook()).await;
    let public_key = assert_public_key(&signed["publicKey"]);
    assert_eq!(signed["previousPublicKey"], Value::Null);
    let id = signed["id"].as_str().unwrap();
    let off = created(&api, &key, &url(1), &["profile.updated"]).await;
    let body = json!({"url": url(2), "events": ["profile.updated"], "asymmetricSigning": false});
    let explicit = create(&api, &key, &body).await.assert_status(201).clone();
    assert_eq!((&off["publicKey"], &explicit["publicKey"]), (&Value::Null, &Value::Null), "off unless asked for");

    // Every read shows the same key; signing-keys lists it as the current one.
    assert_eq!(list(&api, &key).await, [without_secret(&signed), without_secret(&off), without_secret(&explicit)]);
    let keys = signing_keys(&api, &key, id).await;
    assert_eq!(
        keys.assert_status(200),
        &json!({"keys": [{"publicKey": public_key, "status": "current", "expiresAt": null}]})
    );
    let paused = update(&api, &key, id, r#"{"enabled": false}"#).await;
    assert_eq!(paused.assert_status(200)["publicKey"], public_key.as_str(), "other changes keep the key");
    // Another subscription's key is its own.
    assert_ne!(assert_public_key(&create_signed(&api, &key, &url(3)).await["publicKey"]), public_key);
}

#[tokio::test]
async fn create_refuses_an_asymmetric_signing_that_is_no_boolean_and_stores_nothing() {
    let api = Api::loopback();
    let (key, before) = user_with_one(&api).await;
    for value in [json!(null), json!("true"), json!(1), json!(0), json!([true]), json!({"on": true})] {
        let body = json!({"url": hook(), "events": ["profile.updated"], "asymmetricSigning": value});
        refused(&api, &key, &body, "webhooks.invalid_asymmetric_signing", &before).await;
    }
    // The URL and the kinds are checked first.
    let body = json!({"url": "ftp://x/", "events": ["profile.updated"], "asymmetricSigning": 1});
    refused(&api, &key, &body, "webhooks.invalid_url", &before).await;
    let body = json!({"url": hook(), "events": [], "asymmetricSigning": 1});
    refused(&api, &key, &body, "webhooks.invalid_events", &before).await;
}

#[tokio::test]
async fn patch_turns_asymmetric_signing_on_and_off() {
    let api = Api::loopback();
    let (key, before) = user_with_one(&api).await;
    let id = before[0]["id"].as_str().unwrap().to_owned();
    signing_keys(&api, &key, &id).await.assert_error(400, "webhooks.asymmetric_signing_off");

    let on = update(&api, &key, &id, r#"{"asymmetricSigning": true}"#).await;
    let first = assert_public_key(&on.assert_status(200)["publicKey"]);
    assert_eq!(listed(&api, &key, &id).await["publicKey"], first.as_str());
    let again = update(&api, &key, &id, r#"{"asymmetricSigning": true, "enabled": false}"#).await;
    let again = again.assert_status(200);
    assert_eq!((&again["publicKey"], &again["disabledReason"]), (&json!(first), &json!("manual")), "on stays on");

    let off = update(&api, &key, &id, r#"{"asymmetricSigning": false, "enabled": true}"#).await;
    let off = off.assert_status(200);
    assert_eq!(
        (&off["publicKey"], &off["previousPublicKey"], &off["enabled"]),
        (&Value::Null, &Value::Null, &json!(true))
    );
    signing_keys(&api, &key, &id).await.assert_error(400, "webhooks.asymmetric_signing_off");
    let still_off = update(&api, &key, &id, r#"{"asymmetricSigning": false}"#).await;
    assert_eq!(still_off.assert_status(200)["publicKey"], Value::Null);

    let back_on = update(&api, &key, &id, r#"{"asymmetricSigning": true}"#).await;
    let second = assert_public_key(&back_on.assert_status(200)["publicKey"]);
    assert_ne!(second, first, "turning it on again makes a new key pair");
    let mut expected = before[0].clone();
    expected["publicKey"] = json!(second);
    assert_eq!(list(&api, &key).await, [expected], "the rest of the subscription stays");
}

#[tokio::test]
async fn a_rotation_replaces_the_key_pair_and_lists_the_previous_one_for_its_grace_period() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let signed = create_signed(&api, &key, &hook()).await;
    let (id, first) = (signed["id"].as_str().unwrap(), assert_public_key(&signed["publicKey"]));
    let rotate = |body: &'static str| {
        let request = api.request(Method::POST, &format!("/api/v1/webhooks/rotate-secret?id={id}")).key(&key);
        async move { request.json(body).send().await }
    };
    let rotated = rotate(r#"{"gracePeriodSeconds": 600}"#).await;
    let rotated = rotated.assert_status(200).clone();
    let second = assert_public_key(&rotated["publicKey"]);
    assert_ne!(second, first);
    assert_eq!(rotated["previousPublicKey"], first.as_str());
    let shown = listed(&api, &key, id).await;
    assert_eq!((&shown["publicKey"], &shown["previousPublicKey"]), (&json!(second), &json!(first)));
    let keys = signing_keys(&api, &key, id).await;
    let expires = &rotated["previousSecretExpiresAt"];
    assert_eq!(
        keys.assert_status(200),
        &json!({"keys": [
            {"publicKey": second, "status": "current", "expiresAt": null},
            {"publicKey": first, "status": "previous", "expiresAt": expires},
        ]})
    );

    // Without a grace period the previous key is gone at once; off drops both pairs.
    let immediate = rotate(r#"{"gracePeriodSeconds": 0}"#).await;
    let third = assert_public_key(&immediate.assert_status(200)["publicKey"]);
    assert_eq!(immediate.json["previousPublicKey"], Value::Null);
    assert_eq!(signing_keys(&api, &key, id).await.assert_status(200)["keys"].as_array().map(Vec::len), Some(1));
    rotate("{}").await.assert_status(200);
    assert!(listed(&api, &key, id).await["previousPublicKey"] == third.as_str());
    let off = update(&api, &key, id, r#"{"asymmetricSigning": false}"#).await;
    assert_eq!((&off.json["publicKey"], &off.json["previousPublicKey"]), (&Value::Null, &Value::Null));
    // A rotation while it is off makes no key pair.
    let plain = rotate("{}").await;
    assert_eq!((&plain.json["publicKey"], &plain.json["previousPublicKey"]), (&Value::Null, &Value::Null));
}

#[tokio::test]
async fn signing_keys_needs_read_webhooks_an_id_and_a_subscription_of_ones_own() {
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let body = json!({"url": hook(), "events": ["profile.updated"], "asymmetricSigning": true});
    let id = create(&api, &key, &body).await.assert_status(201)["id"].as_str().unwrap().to_owned();
    let reader = api.key(&user, "read:webhooks").await;
    signing_keys(&api, &reader, &id).await.assert_status(200);
    let writer = api.key(&user, "write:webhooks").await;
    let refused = signing_keys(&api, &writer, &id).await;
    refused.assert_error(403, "auth.forbidden");
    for query in ["", "?id=", "?ID=x"] {
        api.get(&format!("{SIGNING_KEYS}{query}"), &reader).await.assert_error(400, "webhooks.missing_subscription_id");
    }
    let stranger = api.full_key(&unique_user()).await;
    let unknown = career_core::ids::new_id(career_core::ids::SUBSCRIPTION);
    for (key, id) in [(&stranger, id.as_str()), (&reader, unknown.as_str()), (&reader, "nonsense")] {
        signing_keys(&api, key, id).await.assert_error(404, "webhooks.not_found");
    }
}
