//! What every operation shares: routing answers, authentication, keys, the rate limit,
//! body limits, the error body and the response headers.

use std::time::{Duration, Instant};

use career_core::auth::UNKNOWN_KEY_CACHE_TTL;
use career_core::clock::Timestamp;
use career_core::credentials::{ApiKey, KeyRecord, Scope, Scopes};
use career_core::store::keys::KeyTable;
use career_service::calls::{Call, Calls};
use career_service::{sink_url, unique_user, Api};
use lambda_http::http::Method;

const OPERATIONS: [(Method, &str); 9] = [
    (Method::GET, "/api/v1/alerts"),
    (Method::PATCH, "/api/v1/alerts?id=alr_01JD0000000000000000000000"),
    (Method::GET, "/api/v1/data-sharing"),
    (Method::PUT, "/api/v1/data-sharing"),
    (Method::GET, "/api/v1/webhooks"),
    (Method::POST, "/api/v1/webhooks"),
    (Method::PATCH, "/api/v1/webhooks?id=whk_01JD0000000000000000000000"),
    (Method::DELETE, "/api/v1/webhooks?id=whk_01JD0000000000000000000000"),
    (Method::GET, "/api/v1/webhooks/event-types"),
];

#[tokio::test]
async fn every_operation_refuses_missing_malformed_and_unknown_keys() {
    let api = Api::new();
    let unknown = format!("cak_{}", "A".repeat(43));
    let valid = api.full_key(&unique_user()).await;
    for (method, path) in OPERATIONS {
        let headers = [
            None,
            Some(format!("Basic {valid}")),
            Some("Bearer".to_owned()),
            Some("Bearer cak_short".to_owned()),
            Some(format!("Bearer {unknown}")),
            Some(valid.clone()),
        ];
        for header in headers {
            let mut request = api.request(method.clone(), path);
            if let Some(header) = &header {
                request = request.header("authorization", header);
            }
            let answer = request.send().await;
            answer.assert_error(401, "auth.unauthorized");
            assert_eq!(answer.header("www-authenticate"), Some(r#"Bearer realm="api""#), "{method} {path} {header:?}");
            assert_eq!(answer.header("ratelimit-limit"), None);
        }
    }
}

#[tokio::test]
async fn the_bearer_scheme_word_is_case_insensitive() {
    let api = Api::new();
    let key = api.full_key(&unique_user()).await;
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let answer =
            api.request(Method::GET, "/api/v1/alerts").header("authorization", &format!("{scheme} {key}")).send().await;
        answer.assert_status(200);
    }
}

#[tokio::test]
async fn every_operation_needs_exactly_its_own_scope() {
    let api = Api::new();
    let user = unique_user();
    let scopes =
        ["read:alerts", "write:alerts", "read:data_sharing", "write:data_sharing", "read:webhooks", "write:webhooks"];
    let needed = [
        "read:alerts",
        "write:alerts",
        "read:data_sharing",
        "write:data_sharing",
        "read:webhooks",
        "write:webhooks",
        "write:webhooks",
        "write:webhooks",
        "read:webhooks",
    ];
    for ((method, path), scope) in OPERATIONS.into_iter().zip(needed) {
        let others: Vec<_> = scopes.iter().copied().filter(|s| *s != scope).collect();
        let without = api.key(&user, &others.join(",")).await;
        let answer = api.request(method.clone(), path).key(&without).json("{}").send().await;
        answer.assert_error(403, "auth.forbidden");
        let challenge = format!(r#"Bearer realm="api", error="insufficient_scope", scope="{scope}""#);
        assert_eq!(answer.header("www-authenticate"), Some(challenge.as_str()));

        let only = api.key(&user, scope).await;
        let answer = api.request(method.clone(), path).key(&only).json("{}").send().await;
        assert_ne!(answer.status.as_u16(), 403, "{method} {path} with only {scope}: {answer:?}");
        assert_ne!(answer.status.as_u16(), 401, "{method} {path} with only {scope}: {answer:?}");
    }
}

#[tokio::test]
async fn unknown_paths_and_methods_are_answered_before_authentication() {
    let api = Api::new();
    for path in ["/", "/api/v2/alerts", "/api/v1/alerts/", "/api/v1/alert", "/api/v1/webhooks/whk_1", "/api/v1"] {
        api.request(Method::GET, path).send().await.assert_error(404, "not_found");
    }
    for (path, method, allow) in [
        ("/api/v1/alerts", Method::POST, "GET, PATCH"),
        ("/api/v1/alerts", Method::DELETE, "GET, PATCH"),
        ("/api/v1/data-sharing", Method::PATCH, "GET, PUT"),
        ("/api/v1/webhooks", Method::PUT, "GET, POST, PATCH, DELETE"),
        ("/api/v1/webhooks/event-types", Method::POST, "GET"),
        ("/api/v1/webhooks/event-types", Method::DELETE, "GET"),
    ] {
        let answer = api.request(method, path).send().await;
        answer.assert_error(405, "method_not_allowed");
        assert_eq!(answer.header("allow"), Some(allow));
    }
}

#[tokio::test]
async fn a_revoked_key_is_refused_by_an_instance_that_has_not_cached_it() {
    let warm = Api::new();
    let key = warm.full_key(&unique_user()).await;
    warm.get("/api/v1/alerts", &key).await.assert_status(200);
    assert!(warm.admin.revoke_key(&key).await.unwrap().revoked);
    // The warm instance trusts its cached lookup for at most 60 s; a new instance asks again.
    Api::new().get("/api/v1/alerts", &key).await.assert_error(401, "auth.unauthorized");
    assert!(warm.admin.revoke_key(&format!("cak_{}", "B".repeat(43))).await.is_err());
}

/// Contract section 2: past its expiry a key gets 401 at once, also from an instance that
/// looked it up a moment before (and would trust that lookup for 60 s): the refusal below
/// reads nothing, so it comes from the cached lookup's expiry.
#[tokio::test]
async fn an_expired_key_is_refused_at_once_even_by_an_instance_that_cached_it() {
    let calls = Calls::default();
    let api = Api::on(career_service::clients_logging_dynamodb(&calls), career_service::services().settings.clone());
    let user = unique_user();
    let scopes = Scopes::parse_list("read:webhooks").unwrap();
    // A key that lives 3 s, or longer where the machine is too busy to use it that soon.
    let mut lifetimes = [3, 10, 30].into_iter().map(Duration::from_secs);
    let (issued, expires_at) = loop {
        let lifetime = lifetimes.next().expect("a first request before the key's expiry");
        let issued = api.admin.create_key(&user, scopes, None, Some(Timestamp::now() + lifetime)).await.unwrap();
        let expires_at = issued.expires_at.expect("an expiry");
        let first = api.get("/api/v1/webhooks", &issued.key).await;
        if Timestamp::now() < expires_at {
            first.assert_status(200);
            break (issued, expires_at);
        }
    };
    while Timestamp::now() < expires_at {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mark = calls.len();
    let refused = api.get("/api/v1/webhooks", &issued.key).await;
    refused.assert_error(401, "auth.unauthorized");
    assert_eq!(refused.header("www-authenticate"), Some(r#"Bearer realm="api""#));
    assert_eq!(calls.since(mark), Vec::<String>::new(), "refused from the cache, with no lookup");
    Api::new().get("/api/v1/webhooks", &issued.key).await.assert_error(401, "auth.unauthorized");

    // A key without an expiry, and one that expires later, keep working.
    let lasting = api.admin.create_key(&user, scopes, None, None).await.unwrap();
    assert!(lasting.expires_at.is_none());
    let later =
        api.admin.create_key(&user, scopes, None, Some(Timestamp::now() + Duration::from_secs(3600))).await.unwrap();
    for key in [&lasting.key, &later.key] {
        api.get("/api/v1/webhooks", key).await.assert_status(200);
    }
}

/// `careerctl portal-link`: a link to the portal below the API URL carrying a key that can
/// read and change the user's webhooks and nothing else, and that expires when it says.
#[tokio::test]
async fn a_portal_link_carries_a_webhooks_key_that_expires() {
    let api = Api::loopback();
    let user = unique_user();
    let before = Timestamp::now();
    let link = api.admin.portal_link(&user, "http://127.0.0.1:3000/", 90).await.unwrap();
    let after = Timestamp::now();
    assert_eq!(link.user_id.as_str(), user);
    let key = link.url.strip_prefix("http://127.0.0.1:3000/portal#key=").expect("the portal URL and the key");
    assert!(ApiKey::parse(key).is_some(), "{}", link.url);
    let expires = link.expires_at;
    let (earliest, latest) = (before + Duration::from_secs(90 * 60), after + Duration::from_secs(90 * 60));
    assert!(earliest <= expires && expires <= latest, "{expires} not within {earliest}..={latest}");
    api.get("/api/v1/webhooks", key).await.assert_status(200);
    api.get("/api/v1/webhooks/event-types", key).await.assert_status(200);
    let body = serde_json::json!({"url": sink_url(), "events": ["profile.updated"]}).to_string();
    api.send_json(Method::POST, "/api/v1/webhooks", key, &body).await.assert_status(201);
    for path in ["/api/v1/alerts", "/api/v1/data-sharing"] {
        api.get(path, key).await.assert_error(403, "auth.forbidden");
    }
    let printed = serde_json::to_value(&link).unwrap();
    let mut fields: Vec<_> = printed.as_object().unwrap().keys().cloned().collect();
    fields.sort();
    assert_eq!(fields, ["expiresAt", "url", "userId"]);
    career_service::assert_rfc3339_utc(printed["expiresAt"].as_str().unwrap());

    for bad in ["", "127.0.0.1:3000", "ftp://example.com", "http://127.0.0.1:3000/?x=1"] {
        assert!(api.admin.portal_link(&user, bad, 60).await.is_err(), "{bad:?}");
    }
    assert!(api.admin.portal_link("", "http://127.0.0.1:3000", 60).await.is_err());
}

#[tokio::test]
async fn the_rate_limit_is_shared_by_instances_and_reported_in_headers() {
    let limited = |_: ()| Api::with_settings(|s| s.rate_limit_per_minute = 3);
    let (first, second) = (limited(()), limited(()));
    let user = unique_user();
    let key = first.full_key(&user).await;

    let mut remaining = Vec::new();
    for api in [&first, &second, &first] {
        let answer = api.get("/api/v1/alerts", &key).await;
        answer.assert_status(200);
        assert_eq!(answer.header("ratelimit-limit"), Some("3"));
        let reset: u64 = answer.header("ratelimit-reset").unwrap().parse().unwrap();
        // The window counts the last 60 to 65 seconds (12 slots of 5 s and the current one).
        assert!((60..=65).contains(&reset), "{reset}");
        remaining.push(answer.header("ratelimit-remaining").unwrap().to_owned());
    }
    assert_eq!(remaining, ["2", "1", "0"]);
    let refused = second.send_json(Method::PUT, "/api/v1/data-sharing", &key, r#"{"shareProfileData":true}"#).await;
    refused.assert_error(429, "rate_limited");
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(Some(retry_after.to_string().as_str()), refused.header("ratelimit-reset"));
    // The refused PUT changed nothing.
    let other_key = Api::new().full_key(&user).await;
    assert_eq!(Api::new().get("/api/v1/data-sharing", &other_key).await.json["preferences"]["shareProfileData"], false);
    // Another key of the same user has its own budget.
    Api::new().get("/api/v1/alerts", &other_key).await.assert_status(200);
}

#[tokio::test]
async fn a_missing_scope_is_reported_before_the_rate_limit_and_is_not_counted() {
    let api = Api::with_settings(|s| s.rate_limit_per_minute = 1);
    let key = api.key(&unique_user(), "read:alerts").await;
    for _ in 0..3 {
        let answer = api.get("/api/v1/webhooks", &key).await;
        answer.assert_error(403, "auth.forbidden");
        assert_eq!((answer.header("ratelimit-limit"), answer.header("ratelimit-remaining")), (Some("1"), Some("1")));
    }
    let allowed = api.get("/api/v1/alerts", &key).await;
    assert!(allowed.assert_status(200).is_object());
    assert_eq!(allowed.header("ratelimit-remaining"), Some("0"));
    api.get("/api/v1/alerts", &key).await.assert_error(429, "rate_limited");
    let forbidden = api.get("/api/v1/webhooks", &key).await;
    forbidden.assert_error(403, "auth.forbidden");
    assert_eq!(forbidden.header("ratelimit-remaining"), Some("0"));
}

#[tokio::test]
async fn a_get_reads_while_it_is_counted_and_a_write_waits_for_the_count() {
    let calls = Calls::default();
    let api = Api::on(career_service::clients_logging_dynamodb(&calls), career_service::services().settings.clone());
    let key = api.full_key(&unique_user()).await;
    let sent = |name: &str| Call::Sent(name.to_owned());
    for (path, read) in
        [("/api/v1/alerts", "Query"), ("/api/v1/data-sharing", "GetItem"), ("/api/v1/webhooks", "Query")]
    {
        api.get(path, &key).await.assert_status(200); // the function caches the key
        let mark = calls.len();
        api.get(path, &key).await.assert_status(200);
        // Both requests are out before either answer is in.
        let mut log = calls.log_since(mark);
        assert_eq!(log.split_off(2), [Call::Answered, Call::Answered], "{path}");
        log.sort_by_key(|call| format!("{call:?}"));
        let mut expected = [sent("UpdateItem"), sent(read)];
        expected.sort_by_key(|call| format!("{call:?}"));
        assert_eq!(log, expected, "{path}");
    }
    let mark = calls.len();
    api.send_json(Method::PUT, "/api/v1/data-sharing", &key, r#"{"shareProfileData":true}"#).await.assert_status(200);
    assert_eq!(calls.log_since(mark), [sent("UpdateItem"), Call::Answered, sent("UpdateItem"), Call::Answered]);
}

#[tokio::test]
async fn a_get_over_the_limit_drops_its_read_and_an_instance_that_knows_skips_it() {
    let calls = Calls::default();
    let mut settings = career_service::services().settings.clone();
    settings.rate_limit_per_minute = 1;
    let api = Api::on(career_service::clients_logging_dynamodb(&calls), settings.clone());
    let key = api.full_key(&unique_user()).await;
    api.get("/api/v1/alerts", &key).await.assert_status(200);
    let mark = calls.len();
    let refused = api.get("/api/v1/alerts", &key).await;
    refused.assert_error(429, "rate_limited");
    assert_eq!((refused.header("ratelimit-remaining"), refused.json.get("alerts")), (Some("0"), None));
    let refused_calls = calls.since(mark);
    assert!(refused_calls.iter().any(|call| call == "Query"), "counted and read at once: {refused_calls:?}");
    let mark = calls.len();
    api.get("/api/v1/alerts", &key).await.assert_error(429, "rate_limited");
    assert_eq!(calls.since(mark), Vec::<String>::new(), "known to be refused: answered from memory, not read");
    // Another instance does not know yet: it reads along, and drops the read.
    let other = Api::on(career_service::clients_logging_dynamodb(&calls), settings);
    other.get("/api/v1/alerts", &key).await.assert_error(429, "rate_limited");
}

#[tokio::test]
async fn bodies_over_64_kib_are_refused_and_change_nothing() {
    let api = Api::new();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let padding = "x".repeat(64 * 1024);
    let big = format!(r#"{{"shareProfileData":true,"note":"{padding}"}}"#);
    api.send_json(Method::PUT, "/api/v1/data-sharing", &key, &big).await.assert_error(413, "request.body_too_large");
    let big = format!(r#"{{"url":"https://example.com/{padding}","events":["profile.updated"]}}"#);
    api.send_json(Method::POST, "/api/v1/webhooks", &key, &big).await.assert_error(413, "request.body_too_large");
    let id = api.alert(&user, "a").await;
    let big = format!(r#"{{"action":"read","note":"{padding}"}}"#);
    api.send_json(Method::PATCH, &format!("/api/v1/alerts?id={id}"), &key, &big)
        .await
        .assert_error(413, "request.body_too_large");
    // Exactly 64 KiB is still read (and then judged on its content).
    let exact = format!(r#"{{"action":"read","note":"{}"}}"#, "x".repeat(64 * 1024 - 27));
    assert_eq!(exact.len(), 64 * 1024);
    api.send_json(Method::PATCH, &format!("/api/v1/alerts?id={id}"), &key, &exact).await.assert_status(200);

    assert_eq!(api.get("/api/v1/data-sharing", &key).await.json["preferences"]["shareProfileData"], false);
    assert_eq!(api.get("/api/v1/webhooks", &key).await.json["webhooks"], serde_json::json!([]));
}

#[tokio::test]
async fn every_answer_carries_a_fresh_request_id_that_matches_its_error_body() {
    let api = Api::new();
    let key = api.full_key(&unique_user()).await;
    let a = api.get("/api/v1/alerts", &key).await;
    let b = api.get("/api/v1/alerts", &key).await;
    let (a, b) = (a.header("x-request-id").unwrap().to_owned(), b.header("x-request-id").unwrap().to_owned());
    assert!(!a.is_empty() && a != b);
    let error = api.request(Method::GET, "/nowhere").send().await;
    assert!(error.header("x-request-id").is_some());
    error.assert_error(404, "not_found");
}

#[tokio::test]
async fn duplicate_json_keys_anywhere_are_invalid_json_and_change_nothing() {
    let api = Api::new();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let alert = api.alert(&user, "a").await;
    let hook = r#""url":"https://hooks.example.com/x","events":["profile.updated"]"#;
    for (method, path, body) in [
        (Method::PATCH, format!("/api/v1/alerts?id={alert}"), r#"{"action":"read","action":"bogus"}"#.to_owned()),
        (Method::PATCH, format!("/api/v1/alerts?id={alert}"), r#"{"action":"read","x":{"a":1,"a":2}}"#.to_owned()),
        (Method::PUT, "/api/v1/data-sharing".into(), r#"{"shareProfileData":true,"shareProfileData":true}"#.into()),
        (Method::PUT, "/api/v1/data-sharing".into(), r#"{"shareProfileData":true,"x":[{"b":1,"b":1}]}"#.into()),
        (Method::POST, "/api/v1/webhooks".into(), format!(r#"{{{hook},"url":"https://hooks.example.com/y"}}"#)),
        (Method::POST, "/api/v1/webhooks".into(), format!(r#"{{{hook},"x":{{"y":{{"z":1,"z":1}}}}}}"#)),
    ] {
        let answer = api.send_json(method.clone(), &path, &key, &body).await;
        answer.assert_error(400, "request.invalid_json");
    }
    assert_eq!(api.get("/api/v1/alerts", &key).await.json["alerts"][0]["read"], false);
    assert_eq!(api.get("/api/v1/data-sharing", &key).await.json["preferences"]["shareProfileData"], false);
    assert_eq!(api.get("/api/v1/webhooks", &key).await.json["webhooks"], serde_json::json!([]));
    // The same keys in different objects are fine.
    let body = r#"{"action":"read","x":{"action":1},"y":[{"action":2},{"action":3}]}"#;
    api.send_json(Method::PATCH, &format!("/api/v1/alerts?id={alert}"), &key, body).await.assert_status(200);
}

#[tokio::test]
async fn two_authorization_headers_are_unauthorized() {
    let api = Api::new();
    let key = api.full_key(&unique_user()).await;
    let other = api.full_key(&unique_user()).await;
    for second in [format!("Bearer {key}"), format!("Bearer {other}"), "Basic eDp5".to_owned()] {
        for (method, path) in OPERATIONS {
            let answer = api
                .request(method.clone(), path)
                .header("authorization", &format!("Bearer {key}"))
                .header("authorization", &second)
                .json("{}")
                .send()
                .await;
            answer.assert_error(401, "auth.unauthorized");
        }
    }
    // As API Gateway passes repeated headers: one value, joined with a comma.
    let joined = format!("Bearer {key},Bearer {other}");
    api.request(Method::GET, "/api/v1/alerts")
        .header("authorization", &joined)
        .send()
        .await
        .assert_error(401, "auth.unauthorized");
}

#[tokio::test]
async fn error_messages_quote_at_most_100_characters_of_the_input() {
    let api = Api::new();
    let key = api.full_key(&unique_user()).await;
    let long = |prefix: &str| format!("{prefix}{}", "x".repeat(5000));
    let cases = [
        (Method::PATCH, format!("/api/v1/alerts?id={}", long("alr_")), r#"{"action":"read"}"#.to_owned()),
        (Method::DELETE, format!("/api/v1/webhooks?id={}", long("whk_")), String::new()),
        (Method::PUT, "/api/v1/data-sharing".into(), format!(r#"{{"shareProfileData":true,"{}":true}}"#, long("u"))),
        (
            Method::POST,
            "/api/v1/webhooks".into(),
            format!(r#"{{"url":"https://hooks.example.com/","events":["{}"]}}"#, long("e")),
        ),
    ];
    for (method, path, body) in cases {
        let answer = api.send_json(method.clone(), &path, &key, &body).await;
        let message = answer.json["error"]["message"].as_str().unwrap_or_else(|| panic!("{method} {answer:?}"));
        assert!(message.contains(&"x".repeat(50)), "{method} {path:.40}: the message quotes the input: {message}");
        assert!(!message.contains(&"x".repeat(101)), "{method} {path:.40}: {message}");
        assert!(message.chars().count() < 250, "{method} {path:.40}: {message}");
    }
}

/// With the window shortened to 3 s: as many requests as can be sent for three windows, and
/// no 3 s span ever holds more accepted ones than the limit; a refused request uses none of
/// the budget, so waiting `Retry-After` is enough to be accepted again.
#[tokio::test]
async fn the_sliding_window_holds_in_every_span_and_refusals_do_not_count() {
    const LIMIT: u32 = 5;
    const WINDOW: Duration = Duration::from_secs(3);
    let api = Api::with_settings(|s| {
        s.rate_limit_per_minute = LIMIT;
        s.rate_limit_window = WINDOW;
    });
    let key = api.full_key(&unique_user()).await;
    let started = Instant::now();
    let mut accepted = Vec::new();
    let mut refused = 0;
    while started.elapsed() < 3 * WINDOW {
        let sent = Instant::now();
        let answer = api.get("/api/v1/alerts", &key).await;
        match answer.status.as_u16() {
            200 => accepted.push((sent, Instant::now())),
            429 => refused += 1,
            other => panic!("{other}: {answer:?}"),
        }
    }
    // Each request was decided between its sending and its answer, so requests sent from `a`
    // on and answered less than a window after `a` was sent were all decided within one window.
    let most = accepted
        .iter()
        .map(|(a, _)| accepted.iter().filter(|(sent, answered)| sent >= a && *answered - *a < WINDOW).count())
        .max();
    assert_eq!(most, Some(LIMIT as usize), "accepted at {accepted:?}");
    assert!(accepted.len() >= 2 * LIMIT as usize && refused > 0, "{} accepted, {refused} refused", accepted.len());

    let refusal = loop {
        let answer = api.get("/api/v1/alerts", &key).await;
        if answer.status == 429 {
            break answer;
        }
    };
    let retry_after: u64 = refusal.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(refusal.header("ratelimit-remaining"), Some("0"));
    assert!((1..=4).contains(&retry_after), "{retry_after}");
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    api.get("/api/v1/alerts", &key).await.assert_status(200);
}

/// An instance remembers an unknown key for a few seconds, so repeating it costs no
/// DynamoDB read: a key stored in the meantime is still refused there, until that expires.
#[tokio::test]
async fn an_unknown_key_is_remembered_briefly_without_a_read_per_request() {
    let api = Api::new();
    let key = ApiKey::generate();
    for _ in 0..3 {
        api.get("/api/v1/alerts", key.expose()).await.assert_error(401, "auth.unauthorized");
    }
    let stored = KeyRecord {
        hash: key.hash(),
        user_id: career_service::typed(unique_user()),
        scopes: [Scope::ReadAlerts].into_iter().collect(),
        label: None,
        created_at: career_service::typed("2026-01-01T00:00:00.000Z"),
        revoked_at: None,
        expires_at: None,
    };
    KeyTable::new(career_service::dynamodb(), &api.settings.tables.keys).insert(&stored).await.unwrap();
    api.get("/api/v1/alerts", key.expose()).await.assert_error(401, "auth.unauthorized");
    Api::new().get("/api/v1/alerts", key.expose()).await.assert_status(200);
    tokio::time::sleep(UNKNOWN_KEY_CACHE_TTL).await;
    api.get("/api/v1/alerts", key.expose()).await.assert_status(200);
}

/// The SDK configuration the functions build on Lambda (shared/src/aws/runtime.rs), against
/// DynamoDB Local behind a TLS terminator whose root is made at run time.
async fn list_tables_through(environment: Vec<(String, String)>) -> Result<(), String> {
    let sdk = career_core::aws::runtime::sdk_config(environment).map_err(|e| e.to_string())?;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    client.list_tables().limit(1).send().await.map(|_| ()).map_err(|e| format!("{e:?}"))
}

#[tokio::test]
async fn on_lambda_only_aws_roots_are_trusted_unless_the_test_hook_names_another() {
    let terminator =
        career_service::tls::TlsTerminator::start(&career_service::services().dynamodb_endpoint).await.unwrap();
    let environment = |extra: Option<(&str, String)>| {
        let mut vars: Vec<(String, String)> = [
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_ACCESS_KEY_ID", "test".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
            ("AWS_ENDPOINT_URL_DYNAMODB", terminator.url.clone()),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
        vars.extend(extra.map(|(name, value)| (name.to_owned(), value)));
        vars
    };
    let refused = list_tables_through(environment(None)).await.expect_err("the run-time root is not trusted");
    assert!(refused.to_lowercase().contains("certificate") || refused.contains("Tls"), "{refused}");
    let root = terminator.root_pem.display().to_string();
    list_tables_through(environment(Some((career_core::aws::runtime::EXTRA_ROOT_CERT_VAR, root))))
        .await
        .expect("trusted through the test hook");
}
