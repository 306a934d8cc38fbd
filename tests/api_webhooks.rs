//! `/api/v1/webhooks` through the function's handler against DynamoDB Local: create, list
//! and delete, every validation code of contract section 5 in its order (and that a
//! refused create stores nothing), the per-user limit, scopes and isolation.

use std::sync::Arc;

use base64::Engine;

use career_service::{assert_rfc3339_utc, unique_user, Answer, Api};
use lambda_http::http::Method;
use serde_json::{json, Value};

const PATH: &str = "/api/v1/webhooks";
const URL: &str = "https://hooks.example.com/career?x=1";

fn url(n: usize) -> String {
    format!("https://hooks.example.com/career/{n}")
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

async fn create(api: &Api, key: &str, body: &Value) -> Answer {
    api.send_json(Method::POST, PATH, key, &body.to_string()).await
}

/// Creates a subscription and returns the create answer (checked to be a 201).
async fn created(api: &Api, key: &str, url: &str, events: &[&str]) -> Value {
    let answer = create(api, key, &json!({"url": url, "events": events})).await;
    answer.assert_status(201).clone()
}

/// The list answer's `webhooks` array (checked to be a 200 of the documented shape).
async fn list(api: &Api, key: &str) -> Vec<Value> {
    let answer = api.get(PATH, key).await;
    let body = answer.assert_status(200);
    assert_eq!(body.as_object().map(|o| o.len()), Some(1), "{body}");
    body["webhooks"].as_array().unwrap_or_else(|| panic!("no webhooks array: {body}")).clone()
}

async fn delete(api: &Api, key: &str, query: &str) -> Answer {
    api.request(Method::DELETE, &format!("{PATH}{query}")).key(key).send().await
}

fn without_secret(created: &Value) -> Value {
    let mut public = created.clone();
    public.as_object_mut().expect("an object").remove("secret");
    public
}

/// Posts `body`, expects the 400 `code`, and checks that the list did not change.
async fn refused(api: &Api, key: &str, body: &Value, code: &str, before: &[Value]) {
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
    let api = Api::new();
    let key = api.full_key(&unique_user()).await;
    let answer = create(&api, &key, &json!({"url": URL, "events": ["profile.updated"]})).await;
    let body = answer.assert_status(201).clone();
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let mut fields: Vec<_> = body.as_object().expect("an object").keys().cloned().collect();
    fields.sort();
    assert_eq!(
        fields,
        ["createdAt", "disabledAt", "disabledReason", "enabled", "events", "id", "secret", "url"],
        "{body}"
    );
    assert_subscription_id(body["id"].as_str().expect("id"));
    assert_eq!(
        (&body["enabled"], &body["disabledAt"], &body["disabledReason"]),
        (&json!(true), &Value::Null, &Value::Null)
    );
    assert_eq!(body["url"], URL);
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
    let api = Api::new();
    let key = api.full_key(&unique_user()).await;
    let body = created(
        &api,
        &key,
        URL,
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
    let api = Api::new();
    let (key, before) = user_with_one(&api).await;
    for body in [json!([]), json!(null), json!("x"), json!(5), json!([{"url": URL, "events": ["profile.updated"]}])] {
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
        .body(json!({"url": URL, "events": ["profile.updated"]}).to_string().as_bytes())
        .send()
        .await;
    answer.assert_error(400, "request.unsupported_media_type");
    assert_eq!(list(&api, &key).await, before);
}

#[tokio::test]
async fn a_missing_or_null_url_or_events_is_missing_required_fields() {
    let api = Api::new();
    let (key, before) = user_with_one(&api).await;
    for body in [
        json!({}),
        json!({"url": URL}),
        json!({"events": ["profile.updated"]}),
        json!({"url": null, "events": ["profile.updated"]}),
        json!({"url": URL, "events": null}),
        json!({"url": null, "events": null}),
        json!({"Url": URL, "Events": ["profile.updated"]}),
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
    let api = Api::new();
    let (key, before) = user_with_one(&api).await;
    let too_long = format!("https://hooks.example.com/{}", "a".repeat(2048 - "https://hooks.example.com/".len() + 1));
    assert_eq!(too_long.len(), 2049);
    let invalid: Vec<Value> = vec![
        json!(5),
        json!(true),
        json!({"href": URL}),
        json!([URL]),
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
        refused(&api, &key, &json!({"url": url, "events": ["profile.updated"]}), "webhooks.invalid_url", &before).await;
    }
}

#[tokio::test]
async fn a_url_of_2048_characters_is_accepted() {
    let api = Api::new();
    let key = api.full_key(&unique_user()).await;
    let longest = format!("https://hooks.example.com/{}", "a".repeat(2048 - "https://hooks.example.com/".len()));
    assert_eq!(longest.len(), 2048);
    let body = created(&api, &key, &longest, &["profile.updated"]).await;
    assert_eq!(body["url"], longest);
    let public = created(&api, &key, "https://93.184.216.34:8443/hook", &["profile.updated"]).await;
    assert_eq!(public["url"], "https://93.184.216.34:8443/hook");
    assert_eq!(list(&api, &key).await.len(), 2);
}

#[tokio::test]
async fn insecure_urls_are_accepted_only_with_the_insecure_setting() {
    let strict = Api::new();
    assert!(!strict.settings.allow_insecure_webhook_urls, "insecure URLs are off by default");
    let user = unique_user();
    let key = strict.full_key(&user).await;
    for target in ["http://127.0.0.1:8080/hook", "https://127.0.0.1:8080/hook", "http://localhost:3000/hook"] {
        refused(&strict, &key, &json!({"url": target, "events": ["profile.updated"]}), "webhooks.invalid_url", &[])
            .await;
    }

    let insecure = Api::with_settings(|s| s.allow_insecure_webhook_urls = true);
    let mut expected = Vec::new();
    for target in ["http://127.0.0.1:8080/hook", "https://10.0.0.5/hook", "http://localhost:3000/hook"] {
        let body = created(&insecure, &key, target, &["profile.updated"]).await;
        assert_eq!(body["url"], target);
        expected.push(without_secret(&body));
    }
    assert_eq!(list(&insecure, &key).await, expected);
    // The setting allows http and private targets, nothing else.
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

#[tokio::test]
async fn invalid_events_are_refused() {
    let api = Api::new();
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
        refused(&api, &key, &json!({"url": URL, "events": events}), "webhooks.invalid_events", &before).await;
    }
}

#[tokio::test]
async fn when_url_and_events_are_both_invalid_the_url_error_wins() {
    let api = Api::new();
    let (key, before) = user_with_one(&api).await;
    for body in [
        json!({"url": "http://hooks.example.com/", "events": []}),
        json!({"url": 5, "events": ["unknown.kind"]}),
        json!({"url": "https://127.0.0.1/", "events": "profile.updated"}),
    ] {
        refused(&api, &key, &body, "webhooks.invalid_url", &before).await;
    }
}

#[tokio::test]
async fn at_most_25_subscriptions_per_user() {
    let api = Api::new();
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
    let api = Arc::new(Api::new());
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
    let api = Api::new();
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
    let api = Api::new();
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
    let api = Api::new();
    let (a, b) = (api.full_key(&unique_user()).await, api.full_key(&unique_user()).await);
    let subscription = created(&api, &a, URL, &["profile.updated"]).await;
    let a_before = list(&api, &a).await;
    assert_eq!(a_before, [without_secret(&subscription)]);

    assert_eq!(list(&api, &b).await, Vec::<Value>::new());
    let id = subscription["id"].as_str().expect("id");
    delete(&api, &b, &format!("?id={id}")).await.assert_error(404, "webhooks.not_found");
    assert_eq!(list(&api, &a).await, a_before);

    let own = created(&api, &b, URL, &["profile.updated"]).await;
    assert_eq!(list(&api, &b).await, [without_secret(&own)]);
    assert_eq!(list(&api, &a).await, a_before);
    let answer = delete(&api, &a, &format!("?id={id}")).await;
    assert_eq!(answer.assert_status(200), &json!({"id": id, "deleted": true}));
    assert_eq!(list(&api, &b).await, [without_secret(&own)]);
}

#[tokio::test]
async fn list_needs_read_webhooks_and_create_and_delete_need_write_webhooks() {
    let api = Api::new();
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
        let answer = create(&api, key, &json!({"url": URL, "events": ["profile.updated"]})).await;
        answer.assert_error(403, "auth.forbidden");
        assert_eq!(answer.header("www-authenticate"), Some(insufficient("write:webhooks").as_str()));
        assert_eq!(list(&api, &reader).await, Vec::<Value>::new(), "a refused create stores nothing");
    }

    let subscription = created(&api, &writer, URL, &["profile.updated"]).await;
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
    let api = Arc::new(Api::new());
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
