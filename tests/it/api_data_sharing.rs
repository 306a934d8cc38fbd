//! `/api/v1/data-sharing` through the function's handler against DynamoDB Local:
//! defaults, partial updates, every refusal of contract section 4 (and that a refused
//! request changes nothing), the request-level checks, concurrency, scopes and isolation.

use std::sync::Arc;

use career_service::{assert_rfc3339_utc, unique_user, Answer, Api};
use lambda_http::http::Method;
use serde_json::{json, Value};

const PATH: &str = "/api/v1/data-sharing";
const FLAGS: [&str; 3] = ["shareAssessmentResults", "shareProfileData", "shareActivityData"];

/// The GET/PUT body for the given flag values (in `FLAGS` order) and `updatedAt`.
fn body(values: [bool; 3], updated_at: Value) -> Value {
    let preferences: serde_json::Map<String, Value> =
        FLAGS.iter().zip(values).map(|(name, on)| (name.to_string(), Value::Bool(on))).collect();
    json!({"preferences": preferences, "updatedAt": updated_at})
}

fn flags_of(answer: &Value) -> [bool; 3] {
    FLAGS.map(|name| answer["preferences"][name].as_bool().unwrap_or_else(|| panic!("flag {name} in {answer}")))
}

async fn get(api: &Api, key: &str) -> Value {
    let answer = api.get(PATH, key).await;
    answer.assert_status(200).clone()
}

async fn put(api: &Api, key: &str, body: &str) -> Answer {
    api.send_json(Method::PUT, PATH, key, body).await
}

/// A user with a key of all scopes whose preferences are not the defaults
/// (`shareProfileData` on), so that a refused request that changed anything shows.
async fn user_with_state(api: &Api) -> (String, Value) {
    let user = unique_user();
    let key = api.full_key(&user).await;
    put(api, &key, r#"{"shareProfileData": true}"#).await.assert_status(200);
    let state = get(api, &key).await;
    assert_eq!(flags_of(&state), [false, true, false], "{state}");
    (key, state)
}

#[tokio::test]
async fn get_returns_every_known_flag_false_and_no_update_time_by_default() {
    let api = Api::new();
    let key = api.key(&unique_user(), "read:data_sharing").await;
    let answer = api.get(PATH, &key).await;
    assert_eq!(answer.assert_status(200), &body([false; 3], Value::Null));
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert!(answer.header("x-request-id").is_some_and(|id| !id.is_empty()), "{answer:?}");
}

#[tokio::test]
async fn put_applies_only_the_sent_flags_and_keeps_the_others() {
    let api = Api::new();
    let key = api.full_key(&unique_user()).await;

    let first = put(&api, &key, r#"{"shareProfileData": true}"#).await;
    let first = first.assert_status(200).clone();
    assert_eq!(flags_of(&first), [false, true, false], "{first}");
    let first_at = first["updatedAt"].as_str().expect("updatedAt after a PUT").to_owned();
    assert_rfc3339_utc(&first_at);
    assert_eq!(first, body([false, true, false], json!(first_at)));

    let second = put(&api, &key, r#"{"shareActivityData": true, "shareAssessmentResults": false}"#).await;
    let second = second.assert_status(200).clone();
    assert_eq!(flags_of(&second), [false, true, true], "{second}");
    let second_at = second["updatedAt"].as_str().expect("updatedAt after a PUT").to_owned();
    assert_rfc3339_utc(&second_at);
    assert!(second_at >= first_at, "{first_at} then {second_at}");
    assert_eq!(get(&api, &key).await, second);

    let third = put(&api, &key, r#"{"shareProfileData": false}"#).await;
    assert_eq!(flags_of(third.assert_status(200)), [false, false, true], "{third:?}");
    assert_eq!(flags_of(&get(&api, &key).await), [false, false, true]);

    let all =
        put(&api, &key, r#"{"shareAssessmentResults": true, "shareProfileData": true, "shareActivityData": false}"#)
            .await;
    assert_eq!(flags_of(all.assert_status(200)), [true, true, false], "{all:?}");
    assert_eq!(flags_of(&get(&api, &key).await), [true, true, false]);
}

#[tokio::test]
async fn put_answers_with_exactly_what_get_shows_afterwards() {
    let api = Api::new();
    let key = api.full_key(&unique_user()).await;
    for update in [r#"{"shareAssessmentResults": true}"#, r#"{"shareActivityData": true, "shareProfileData": false}"#] {
        let answer = put(&api, &key, update).await;
        let answer = answer.assert_status(200).clone();
        let object = answer.as_object().expect("an object");
        let mut keys: Vec<_> = object.keys().collect();
        keys.sort();
        assert_eq!(keys, ["preferences", "updatedAt"], "{answer}");
        assert_eq!(answer["preferences"].as_object().map(|p| p.len()), Some(FLAGS.len()), "{answer}");
        assert_eq!(get(&api, &key).await, answer);
    }
}

#[tokio::test]
async fn no_usable_preference_is_refused_and_changes_nothing() {
    let api = Api::new();
    let (key, before) = user_with_state(&api).await;
    for refused in [
        "{}",
        "[]",
        "null",
        "true",
        r#""shareAssessmentResults""#,
        r#"[{"shareAssessmentResults": true}]"#,
        r#"{"shareEverything": true}"#,
        r#"{"ShareAssessmentResults": true, "share_activity_data": true}"#,
        r#"{"shareAssessmentResults": "true"}"#,
        r#"{"shareAssessmentResults": 1, "shareActivityData": null, "shareProfileData": "false"}"#,
        r#"{"shareAssessmentResults": {"value": true}, "other": true}"#,
    ] {
        put(&api, &key, refused).await.assert_error(400, "data_sharing.no_preferences_provided");
        assert_eq!(get(&api, &key).await, before, "after {refused}");
    }
}

/// A misspelt flag sent alone is still `no_preferences_provided` (no known flag came), and the
/// answer names it beside the flags it could have meant.
#[tokio::test]
async fn a_misspelt_flag_alone_is_named_in_the_answer() {
    let api = Api::new();
    let (key, before) = user_with_state(&api).await;
    let answer = put(&api, &key, r#"{"shareAssesmentResults": true}"#).await;
    answer.assert_error(400, "data_sharing.no_preferences_provided");
    assert_eq!(
        answer.json["error"]["message"],
        "'shareAssesmentResults' is not a known preference; send at least one of shareAssessmentResults, \
         shareProfileData, shareActivityData with a boolean value."
    );
    assert_eq!(get(&api, &key).await, before);
}

#[tokio::test]
async fn a_bad_field_next_to_a_valid_flag_refuses_the_whole_update() {
    let api = Api::new();
    let (key, before) = user_with_state(&api).await;
    for (refused, code) in [
        (r#"{"shareAssessmentResults": true, "shareActivityData": "yes"}"#, "data_sharing.invalid_preference"),
        (r#"{"shareActivityData": 1, "shareAssessmentResults": true}"#, "data_sharing.invalid_preference"),
        (r#"{"shareProfileData": false, "shareActivityData": null}"#, "data_sharing.invalid_preference"),
        (r#"{"shareAssessmentResults": true, "shareEverything": true}"#, "data_sharing.unknown_preference"),
        (r#"{"shareEverything": false, "shareProfileData": false}"#, "data_sharing.unknown_preference"),
        (r#"{"shareActivityData": true, "updatedAt": "2020-01-01T00:00:00.000Z"}"#, "data_sharing.unknown_preference"),
    ] {
        put(&api, &key, refused).await.assert_error(400, code);
        assert_eq!(get(&api, &key).await, before, "after {refused}");
    }
}

#[tokio::test]
async fn broken_json_is_invalid_json_and_changes_nothing() {
    let api = Api::new();
    let (key, before) = user_with_state(&api).await;
    for broken in [
        r#"{"shareAssessmentResults": true"#,
        r#"{"shareAssessmentResults": tru}"#,
        r#"{"shareAssessmentResults": true,}"#,
        r#"{shareAssessmentResults: true}"#,
        r#"{"shareAssessmentResults": true} {"shareActivityData": true}"#,
        "",
    ] {
        put(&api, &key, broken).await.assert_error(400, "request.invalid_json");
        assert_eq!(get(&api, &key).await, before, "after {broken:?}");
    }
}

#[tokio::test]
async fn only_json_media_types_are_accepted() {
    let api = Api::new();
    let (key, before) = user_with_state(&api).await;
    let valid = br#"{"shareAssessmentResults": true}"#;
    for media_type in ["text/plain", "application/x-www-form-urlencoded", "application/jsonp", "text/json"] {
        let answer =
            api.request(Method::PUT, PATH).key(&key).header("content-type", media_type).body(valid).send().await;
        answer.assert_error(400, "request.unsupported_media_type");
        assert_eq!(get(&api, &key).await, before, "after {media_type}");
    }

    let answer = api
        .request(Method::PUT, PATH)
        .key(&key)
        .header("content-type", "application/json; charset=utf-8")
        .body(valid)
        .send()
        .await;
    assert_eq!(flags_of(answer.assert_status(200)), [true, true, false], "{answer:?}");

    let answer = api.request(Method::PUT, PATH).key(&key).body(br#"{"shareActivityData": true}"#).send().await;
    assert_eq!(flags_of(answer.assert_status(200)), [true, true, true], "{answer:?}");
    assert_eq!(flags_of(&get(&api, &key).await), [true, true, true]);
}

#[tokio::test]
async fn a_body_over_64_kib_is_refused_and_changes_nothing() {
    let api = Api::new();
    let (key, before) = user_with_state(&api).await;
    let valid = r#"{"shareAssessmentResults": true}"#;
    let padded = |len: usize| format!("{valid}{}", " ".repeat(len - valid.len()));

    let over = padded(64 * 1024 + 1);
    put(&api, &key, &over).await.assert_error(413, "request.body_too_large");
    assert_eq!(get(&api, &key).await, before);

    // The size check comes before the media type.
    let answer = api
        .request(Method::PUT, PATH)
        .key(&key)
        .header("content-type", "text/plain")
        .body(over.as_bytes())
        .send()
        .await;
    answer.assert_error(413, "request.body_too_large");
    assert_eq!(get(&api, &key).await, before);

    // Exactly 64 KiB is still accepted.
    let answer = put(&api, &key, &padded(64 * 1024)).await;
    assert_eq!(flags_of(answer.assert_status(200)), [true, true, false], "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_puts_of_different_flags_lose_nothing() {
    let api = Arc::new(Api::new());
    let key = api.full_key(&unique_user()).await;
    let mut expected = [false; 3];
    for round in 0..8usize {
        // Every flag changes its value in every round, so a lost update shows.
        let values: [bool; 3] = std::array::from_fn(|i| (round + i) % 2 == 0);
        let tasks: Vec<_> = FLAGS
            .iter()
            .zip(values)
            .map(|(flag, on)| {
                let (api, key) = (api.clone(), key.clone());
                let update = json!({ *flag: on }).to_string();
                tokio::spawn(async move { put(&api, &key, &update).await })
            })
            .collect();
        for task in tasks {
            task.await.expect("task").assert_status(200);
        }
        expected = values;
        assert_eq!(flags_of(&get(&api, &key).await), expected, "round {round}");
    }
    assert_eq!(expected, [false, true, false], "the last round ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_puts_with_join_lose_nothing() {
    let api = Api::new();
    let key = api.full_key(&unique_user()).await;
    for round in 0..6usize {
        let on = round % 2 == 0;
        let updates = [
            json!({"shareAssessmentResults": on}).to_string(),
            json!({"shareProfileData": !on}).to_string(),
            json!({"shareActivityData": on}).to_string(),
        ];
        let (a, b, c) =
            tokio::join!(put(&api, &key, &updates[0]), put(&api, &key, &updates[1]), put(&api, &key, &updates[2]));
        for answer in [a, b, c] {
            answer.assert_status(200);
        }
        assert_eq!(flags_of(&get(&api, &key).await), [on, !on, on], "round {round}");
    }
}

const ALL_BUT_READ: &str = "read:alerts,write:alerts,write:data_sharing,read:webhooks,write:webhooks";
const ALL_BUT_WRITE: &str = "read:alerts,write:alerts,read:data_sharing,read:webhooks,write:webhooks";

#[tokio::test]
async fn get_needs_exactly_read_data_sharing() {
    let api = Api::new();
    let user = unique_user();
    let others = api.key(&user, ALL_BUT_READ).await;
    let answer = api.get(PATH, &others).await;
    answer.assert_error(403, "auth.forbidden");
    assert_eq!(
        answer.header("www-authenticate"),
        Some(r#"Bearer realm="api", error="insufficient_scope", scope="read:data_sharing""#)
    );

    let only = api.key(&user, "read:data_sharing").await;
    assert_eq!(api.get(PATH, &only).await.assert_status(200), &body([false; 3], Value::Null));
}

#[tokio::test]
async fn put_needs_exactly_write_data_sharing_and_a_refused_put_changes_nothing() {
    let api = Api::new();
    let user = unique_user();
    let reader = api.key(&user, "read:data_sharing").await;
    let others = api.key(&user, ALL_BUT_WRITE).await;
    for update in [r#"{"shareAssessmentResults": true}"#, "{not json"] {
        let answer = put(&api, &others, update).await;
        answer.assert_error(403, "auth.forbidden");
        assert_eq!(
            answer.header("www-authenticate"),
            Some(r#"Bearer realm="api", error="insufficient_scope", scope="write:data_sharing""#)
        );
        assert_eq!(get(&api, &reader).await, body([false; 3], Value::Null));
    }

    let only = api.key(&user, "write:data_sharing").await;
    let answer = put(&api, &only, r#"{"shareAssessmentResults": true}"#).await;
    assert_eq!(flags_of(answer.assert_status(200)), [true, false, false], "{answer:?}");
    // write:data_sharing does not grant reading.
    let answer = api.get(PATH, &only).await;
    answer.assert_error(403, "auth.forbidden");
    assert_eq!(flags_of(&get(&api, &reader).await), [true, false, false]);
}

#[tokio::test]
async fn one_users_update_does_not_touch_another_users_preferences() {
    let api = Api::new();
    let (a, b) = (api.full_key(&unique_user()).await, api.full_key(&unique_user()).await);
    put(&api, &a, r#"{"shareProfileData": true}"#).await.assert_status(200);
    let a_before = get(&api, &a).await;
    assert_eq!(get(&api, &b).await, body([false; 3], Value::Null));

    let answer =
        put(&api, &b, r#"{"shareAssessmentResults": true, "shareProfileData": false, "shareActivityData": true}"#)
            .await;
    assert_eq!(flags_of(answer.assert_status(200)), [true, false, true], "{answer:?}");
    assert_eq!(get(&api, &a).await, a_before);
    assert_eq!(flags_of(&get(&api, &b).await), [true, false, true]);
}
