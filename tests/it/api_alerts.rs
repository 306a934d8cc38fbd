//! GET and PATCH /api/v1/alerts against DynamoDB Local.

use career_service::{unique_user, Api};
use lambda_http::http::Method;
use serde_json::Value;

fn ids(page: &Value) -> Vec<String> {
    page["alerts"].as_array().expect("alerts array").iter().map(|a| a["id"].as_str().unwrap().to_owned()).collect()
}

async fn patch(api: &Api, key: &str, id: &str, action: &str) -> career_service::Answer {
    api.send_json(Method::PATCH, &format!("/api/v1/alerts?id={id}"), key, &format!(r#"{{"action":"{action}"}}"#)).await
}

#[tokio::test]
async fn lists_active_alerts_newest_first_with_the_documented_shape() {
    let api = Api::new();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let first = api.alert(&user, "first").await;
    let second = api.alert(&user, "second").await;

    let page = api.get("/api/v1/alerts", &key).await;
    let body = page.assert_status(200);
    assert_eq!(ids(body), [second.clone(), first]);
    assert_eq!(body["nextCursor"], Value::Null);
    let alert = &body["alerts"][0];
    let fields: Vec<_> = alert.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        fields,
        ["id", "category", "severity", "title", "message", "createdAt", "read", "readAt", "dismissed", "dismissedAt"]
    );
    assert_eq!(alert["title"], "second");
    assert_eq!(alert["category"], "career_health");
    assert_eq!(alert["severity"], "warning");
    assert!(alert["createdAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!((alert["read"].clone(), alert["readAt"].clone()), (Value::Bool(false), Value::Null));
    assert_eq!(page.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn filters_follow_include_read_and_include_dismissed() {
    let api = Api::new();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let active = api.alert(&user, "active").await;
    let read = api.alert(&user, "read").await;
    let dismissed = api.alert(&user, "dismissed").await;
    let both = api.alert(&user, "both").await;
    patch(&api, &key, &read, "read").await.assert_status(200);
    patch(&api, &key, &dismissed, "dismiss").await.assert_status(200);
    patch(&api, &key, &both, "read").await.assert_status(200);
    patch(&api, &key, &both, "dismiss").await.assert_status(200);

    let list = |query: &'static str| {
        let api = &api;
        let key = &key;
        async move { ids(api.get(&format!("/api/v1/alerts{query}"), key).await.assert_status(200)) }
    };
    assert_eq!(list("").await, std::slice::from_ref(&active));
    assert_eq!(list("?includeRead=true").await, [read.clone(), active.clone()]);
    assert_eq!(list("?includeRead=1").await, [read.clone(), active.clone()]);
    assert_eq!(list("?includeDismissed=true").await, [dismissed.clone(), active.clone()]);
    assert_eq!(list("?includeRead=true&includeDismissed=1").await, [both, dismissed, read, active.clone()]);
    // Any other value counts as false: this operation has no 400.
    assert_eq!(list("?includeRead=yes&includeDismissed=TRUE").await, [active]);
}

#[tokio::test]
async fn actions_set_and_clear_independent_flags_and_keep_the_first_timestamp() {
    let api = Api::new();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let id = api.alert(&user, "a").await;

    let read = patch(&api, &key, &id, "read").await;
    let read_at = read.assert_status(200)["readAt"].as_str().expect("readAt set").to_owned();
    assert_eq!(read.json["read"], true);
    assert_eq!(read.json["dismissed"], false);

    let again = patch(&api, &key, &id, "read").await;
    assert_eq!(again.assert_status(200)["readAt"], read_at.as_str(), "repeating keeps the first timestamp");

    let dismissed = patch(&api, &key, &id, "dismiss").await;
    let body = dismissed.assert_status(200);
    assert_eq!((body["read"].as_bool(), body["dismissed"].as_bool()), (Some(true), Some(true)));
    assert!(body["dismissedAt"].is_string());

    let unread = patch(&api, &key, &id, "unread").await;
    let body = unread.assert_status(200);
    assert_eq!(
        (body["read"].as_bool(), body["readAt"].is_null(), body["dismissed"].as_bool()),
        (Some(false), true, Some(true))
    );
    // Unread but still dismissed: not active.
    assert!(ids(api.get("/api/v1/alerts", &key).await.assert_status(200)).is_empty());

    let undismissed = patch(&api, &key, &id, "undismiss").await;
    let body = undismissed.assert_status(200);
    assert_eq!((body["dismissed"].as_bool(), body["dismissedAt"].is_null()), (Some(false), true));
    assert_eq!(ids(api.get("/api/v1/alerts", &key).await.assert_status(200)), [id]);
}

#[tokio::test]
async fn patch_errors_come_in_the_contract_order_and_change_nothing() {
    let api = Api::new();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let id = api.alert(&user, "a").await;

    patch(&api, &key, "", "read").await.assert_error(400, "alerts.missing_id");
    api.send_json(Method::PATCH, "/api/v1/alerts", &key, r#"{"action":"read"}"#)
        .await
        .assert_error(400, "alerts.missing_id");
    // A missing id is reported before a bad body.
    api.send_json(Method::PATCH, "/api/v1/alerts", &key, "{nope").await.assert_error(400, "alerts.missing_id");
    let path = format!("/api/v1/alerts?id={id}");
    api.send_json(Method::PATCH, &path, &key, "{nope").await.assert_error(400, "request.invalid_json");
    api.send_json(Method::PATCH, &path, &key, r#"["read"]"#).await.assert_error(400, "request.invalid_json");
    api.request(Method::PATCH, &path)
        .key(&key)
        .header("content-type", "text/plain")
        .body(br#"{"action":"read"}"#)
        .send()
        .await
        .assert_error(400, "request.unsupported_media_type");
    for action in [r#"{"action":"archive"}"#, r#"{"action":"READ"}"#, r#"{"action":1}"#, "{}"] {
        api.send_json(Method::PATCH, &path, &key, action).await.assert_error(400, "alerts.invalid_action");
    }
    // Validation comes before existence.
    patch(&api, &key, "alr_01JD0000000000000000000000", "archive").await.assert_error(400, "alerts.invalid_action");
    patch(&api, &key, "alr_01JD0000000000000000000000", "read").await.assert_error(404, "alerts.not_found");
    patch(&api, &key, "not-an-alert-id", "read").await.assert_error(404, "alerts.not_found");

    let listed = api.get("/api/v1/alerts", &key).await;
    assert_eq!(ids(listed.assert_status(200)), std::slice::from_ref(&id));
    assert_eq!(listed.json["alerts"][0]["read"], false);

    // A missing Content-Type is read as JSON; a charset parameter is fine.
    api.request(Method::PATCH, &path).key(&key).body(br#"{"action":"read"}"#).send().await.assert_status(200);
    api.request(Method::PATCH, &path)
        .key(&key)
        .header("content-type", "application/json; charset=utf-8")
        .body(br#"{"action":"dismiss"}"#)
        .send()
        .await
        .assert_status(200);
}

#[tokio::test]
async fn another_users_alert_is_not_found_and_stays_unchanged() {
    let api = Api::new();
    let owner = unique_user();
    let owner_key = api.full_key(&owner).await;
    let id = api.alert(&owner, "private").await;
    let other_key = api.full_key(&unique_user()).await;

    patch(&api, &other_key, &id, "read").await.assert_error(404, "alerts.not_found");
    patch(&api, &other_key, &id, "unread").await.assert_error(404, "alerts.not_found");
    assert!(
        ids(api.get("/api/v1/alerts?includeRead=1&includeDismissed=1", &other_key).await.assert_status(200)).is_empty()
    );
    let owners = api.get("/api/v1/alerts", &owner_key).await;
    assert_eq!(ids(owners.assert_status(200)), [id]);
    assert_eq!(owners.json["alerts"][0]["read"], false);
}

#[tokio::test]
async fn pages_follow_cursors_to_the_end_without_gaps_or_repeats() {
    let api = Api::new();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let mut created = Vec::new();
    for i in 0..7 {
        created.push(api.alert(&user, &format!("alert {i}")).await);
    }
    created.reverse();

    let mut seen = Vec::new();
    let mut path = "/api/v1/alerts?limit=3".to_owned();
    let mut pages = 0;
    loop {
        let page = api.get(&path, &key).await;
        let body = page.assert_status(200).clone();
        seen.extend(ids(&body));
        pages += 1;
        match body["nextCursor"].as_str() {
            Some(cursor) => path = format!("/api/v1/alerts?limit=3&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, created);

    // An exact multiple of the page size ends without an empty extra page.
    let six = api.get("/api/v1/alerts?limit=7", &key).await;
    assert_eq!(six.json["nextCursor"], Value::Null);
    assert_eq!(ids(&six.json).len(), 7);

    // Out-of-range limits are clamped.
    let one = api.get("/api/v1/alerts?limit=0", &key).await;
    assert_eq!(ids(one.assert_status(200)).len(), 1);
    assert!(one.json["nextCursor"].is_string());
}

#[tokio::test]
async fn tampered_foreign_or_mismatched_cursors_are_refused() {
    let api = Api::new();
    let user = unique_user();
    let key = api.full_key(&user).await;
    api.alert(&user, "a").await;
    api.alert(&user, "b").await;
    let page = api.get("/api/v1/alerts?limit=1", &key).await;
    let cursor = page.json["nextCursor"].as_str().expect("a second page").to_owned();

    let mut tampered = cursor.clone().into_bytes();
    tampered[3] = if tampered[3] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for bad in [tampered.as_str(), "garbage", "%%%"] {
        api.get(&format!("/api/v1/alerts?cursor={bad}"), &key).await.assert_error(400, "request.invalid_cursor");
    }
    // Bound to the filter it came from and to its user.
    api.get(&format!("/api/v1/alerts?includeRead=true&cursor={cursor}"), &key)
        .await
        .assert_error(400, "request.invalid_cursor");
    let other_key = api.full_key(&unique_user()).await;
    api.get(&format!("/api/v1/alerts?cursor={cursor}"), &other_key).await.assert_error(400, "request.invalid_cursor");
    // And still good for its own list.
    assert_eq!(
        ids(api.get(&format!("/api/v1/alerts?limit=1&cursor={cursor}"), &key).await.assert_status(200)).len(),
        1
    );
}

/// 200 concurrent PATCHes cycling the four actions on one alert: every one is answered 200
/// with the action applied, and the alert ends in the state of the last one applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_patches_on_one_alert_all_succeed_and_converge() {
    // Each PATCH writes two hot items, the key's rate-limit counter and the alert: 400 writes
    // queue in DynamoDB Local at once. On a loaded machine the counter's writes wait there
    // longer than the functions' 2 s attempt limit, so the instance waits as long as they take.
    let api = std::sync::Arc::new(Api::with_clients(career_service::patient_clients(), |_| {}));
    let user = unique_user();
    let key = api.full_key(&user).await;
    let id = api.alert(&user, "contested").await;
    // A warm instance, as any is after its first request: 200 key lookups at once would time
    // DynamoDB Local's queue on a busy machine, not the contention on the alert.
    api.get("/api/v1/alerts", &key).await.assert_status(200);
    let cycle = ["read", "unread", "dismiss", "undismiss"];
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let (api, key, id) = (api.clone(), key.clone(), id.clone());
            let action = cycle[n % cycle.len()];
            tokio::spawn(async move { (action, patch(&api, &key, &id, action).await) })
        })
        .collect();
    let mut states = Vec::new();
    for task in tasks {
        let (action, answer) = task.await.unwrap();
        let alert = answer.assert_status(200);
        // Each answer is the alert right after its own action, so it shows that action.
        let (flag, value) = match action {
            "read" => ("read", true),
            "unread" => ("read", false),
            "dismiss" => ("dismissed", true),
            _ => ("dismissed", false),
        };
        assert_eq!(alert[flag], value, "{action}: {alert}");
        assert_consistent(alert);
        states.push(alert.clone());
    }
    let all = api.get("/api/v1/alerts?includeRead=1&includeDismissed=1&limit=100", &key).await;
    let last = all.json["alerts"].as_array().unwrap().iter().find(|a| a["id"] == id.as_str()).unwrap().clone();
    assert_consistent(&last);
    // Updates are applied one after another, so the stored alert is what the last one answered.
    assert!(states.contains(&last), "final state {last} was no answer's");
    assert_listed_as_flagged(&api, &key, &id, &last).await;
    // Nothing is wedged: each action still applies.
    for action in cycle {
        let alert = patch(&api, &key, &id, action).await.assert_status(200).clone();
        assert_listed_as_flagged(&api, &key, &id, &alert).await;
    }
}

#[track_caller]
fn assert_consistent(alert: &Value) {
    assert_eq!(alert["readAt"].is_null(), !alert["read"].as_bool().unwrap(), "{alert}");
    assert_eq!(alert["dismissedAt"].is_null(), !alert["dismissed"].as_bool().unwrap(), "{alert}");
}

/// Each list holds the alert exactly when its flags say so.
async fn assert_listed_as_flagged(api: &Api, key: &str, id: &str, alert: &Value) {
    let (read, dismissed) = (alert["read"].as_bool().unwrap(), alert["dismissed"].as_bool().unwrap());
    for (query, expected) in [("", !read && !dismissed), ("?includeRead=1", !dismissed), ("?includeDismissed=1", !read)]
    {
        let listed = ids(&api.get(&format!("/api/v1/alerts{query}"), key).await.json);
        assert_eq!(
            listed.iter().any(|listed| listed == id),
            expected,
            "{query} with read={read} dismissed={dismissed}"
        );
    }
}

#[tokio::test]
async fn scopes_are_checked_per_operation() {
    let api = Api::new();
    let user = unique_user();
    let id = api.alert(&user, "a").await;
    let path = format!("/api/v1/alerts?id={id}");
    let everything_but_read =
        api.key(&user, "write:alerts,read:data_sharing,write:data_sharing,read:webhooks,write:webhooks").await;
    let denied = api.get("/api/v1/alerts", &everything_but_read).await;
    denied.assert_error(403, "auth.forbidden");
    assert_eq!(
        denied.header("www-authenticate"),
        Some(r#"Bearer realm="api", error="insufficient_scope", scope="read:alerts""#)
    );
    let only_read = api.key(&user, "read:alerts").await;
    api.get("/api/v1/alerts", &only_read).await.assert_status(200);
    let denied = api.send_json(Method::PATCH, &path, &only_read, r#"{"action":"read"}"#).await;
    denied.assert_error(403, "auth.forbidden");
    assert!(denied.header("www-authenticate").unwrap().ends_with(r#"scope="write:alerts""#));
    // Nothing changed by the refused PATCH.
    assert_eq!(api.get("/api/v1/alerts", &only_read).await.json["alerts"][0]["read"], false);
    let only_write = api.key(&user, "write:alerts").await;
    api.send_json(Method::PATCH, &path, &only_write, r#"{"action":"read"}"#).await.assert_status(200);
}
