//! Identity tokens (contract section 21): IAM outbound identity federation as the local stack
//! emulates it (a role's `GetWebIdentityToken`, evaluated against its policy, answered with an
//! ES384 token that a JWT library verifies as a receiver does: the issuer's discovery document,
//! then its JWKS, fetched over loopback), and `identityToken` on HTTP subscriptions: a token on
//! every attempt, kept per subscription, bad values refused, a failed call a failed attempt.

use aws_sdk_sts::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sts::operation::get_web_identity_token::GetWebIdentityTokenError;
use aws_sdk_sts::types::Tag;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use career_core::delivery::log::DeliveryStatus;
use career_service::pipeline::Pipeline;
use career_service::receiver::{Received, Receiver};
use career_service::{unique_user, Api, DEADLINE};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use lambda_http::http::Method;
use local_aws::identity_token::{issuer_url, tokens_tagged, AWS_CLAIMS};
use local_aws::template::{function, Template, TEMPLATE};
use serde_json::{json, Value};

use crate::api_webhooks::{create, list, update, PATH};

const AUDIENCE: &str = "https://receiver.example/hooks";

/// The shipped template with `action` taken out of the delivery role's grant of tokens.
fn without_grant_of(action: &str) -> Template {
    let granted = "Action: [sts:GetWebIdentityToken, sts:TagGetWebIdentityToken]";
    assert!(TEMPLATE.contains(granted), "the delivery role's grant of tokens");
    let kept = match action {
        "sts:GetWebIdentityToken" => "Action: [sts:TagGetWebIdentityToken]",
        _ => "Action: [sts:GetWebIdentityToken]",
    };
    Template::parse(&TEMPLATE.replacen(granted, kept, 1)).expect("the changed template")
}

/// The delivery function's STS client in `pipeline`.
fn sts(pipeline: &Pipeline) -> aws_sdk_sts::Client {
    career_service::acting_as(function::DELIVER, pipeline.settings(), &career_service::clients()).sts().clone()
}

/// The JSON document at `url`, fetched as a receiver fetches the issuer's.
async fn published(url: String) -> Value {
    let text = tokio::task::spawn_blocking(move || ureq::get(&url).call().expect("the issuer answers").into_string());
    serde_json::from_str(&text.await.unwrap().expect("its body")).expect("a JSON document")
}

/// The token's claims, verified with the key its issuer publishes for its `kid`, for `audience`.
pub(crate) async fn verified(token: &str, audience: &str) -> Result<Value, jsonwebtoken::errors::Error> {
    let discovery = published(format!("{}/.well-known/openid-configuration", issuer_url())).await;
    assert_eq!(discovery["issuer"], issuer_url());
    let jwks: JwkSet =
        serde_json::from_value(published(discovery["jwks_uri"].as_str().unwrap().to_owned()).await).expect("a JWK set");
    let kid = jsonwebtoken::decode_header(token)?.kid.expect("the token names its key");
    let key = DecodingKey::from_jwk(jwks.find(&kid).expect("the issuer publishes the token's key"))?;
    let mut validation = Validation::new(Algorithm::ES384);
    validation.set_audience(&[audience]);
    validation.set_issuer(&[issuer_url()]);
    jsonwebtoken::decode::<Value>(token, &key, &validation).map(|data| data.claims)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_verifies_with_the_issuers_published_key_and_carries_its_audience_role_and_tags() {
    let pipeline = Pipeline::start(false).await;
    let tag = |key: &str, value: &str| Tag::builder().key(key).value(value).build().unwrap();
    let answer = sts(&pipeline)
        .get_web_identity_token()
        .audience(AUDIENCE)
        .signing_algorithm("ES384")
        .duration_seconds(300)
        .tags(tag("subscription", "whk_1"))
        .tags(tag("user", "alice"))
        .send()
        .await
        .expect("a token");
    let token = answer.web_identity_token().expect("the token");

    let claims = verified(token, AUDIENCE).await.expect("it verifies");
    // The webhooks function's SENDER_ROLE_ARN: the delivery role, as the template gives it.
    let shown = career_service::function_settings(function::WEBHOOKS, pipeline.settings()).sender_role_arn;
    let role = shown.expect("the delivery role").to_string();
    assert_eq!(claims["sub"].as_str(), Some(role.as_str()), "the delivery role is the subject");
    assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 300);
    let expiration = answer.expiration().expect("its expiration").secs() as u64;
    assert_eq!(expiration, claims["exp"].as_u64().unwrap(), "STS's expiration is the token's");
    let aws = &claims[AWS_CLAIMS];
    assert_eq!(
        (aws["request_tags"]["subscription"].as_str(), aws["request_tags"]["user"].as_str()),
        (Some("whk_1"), Some("alice"))
    );
    assert_eq!(aws["aws_account"], local_aws::template::ACCOUNT);

    assert!(verified(token, "https://someone-else.example").await.is_err(), "another audience refuses it");
    let [header, _, signature] = token.split('.').collect::<Vec<_>>()[..] else { panic!("a JWS: {token}") };
    let mut changed = claims.clone();
    changed["sub"] = "arn:aws:iam::111122223333:role/someone-else".into();
    let changed = URL_SAFE_NO_PAD.encode(changed.to_string());
    assert!(verified(&format!("{header}.{changed}.{signature}"), AUDIENCE).await.is_err(), "changed claims fail");
}

/// The error code STS answered a refused request with.
fn code(refused: SdkError<GetWebIdentityTokenError>) -> Option<String> {
    refused.into_service_error().code().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_not_granted_tokens_is_refused_and_a_malformed_request_is_invalid() {
    let ungranted = Pipeline::from_template(without_grant_of("sts:GetWebIdentityToken"), false, |_| {}).await;
    let denied = sts(&ungranted).get_web_identity_token().audience(AUDIENCE).signing_algorithm("ES384").send().await;
    assert_eq!(code(denied.unwrap_err()).as_deref(), Some("AccessDenied"), "no token without the grant");

    let granted = Pipeline::start(false).await;
    let request = || sts(&granted).get_web_identity_token().audience(AUDIENCE);
    let short = request().signing_algorithm("ES384").duration_seconds(30).send().await;
    assert_eq!(code(short.unwrap_err()).as_deref(), Some("ValidationError"), "60 s at least");
    let unknown = request().signing_algorithm("HS256").send().await;
    assert_eq!(code(unknown.unwrap_err()).as_deref(), Some("ValidationError"), "RS256 or ES384");
}

/// Creates `user`'s subscription to `profile.updated` at `url`, with `identity_token` unless
/// it is `None`; its id.
async fn subscribe(api: &Api, user: &str, url: &str, identity_token: Option<Value>) -> String {
    let key = api.key(user, "write:webhooks").await;
    let mut body = json!({"url": url, "events": ["profile.updated"]});
    if let Some(token) = &identity_token {
        body["identityToken"] = token.clone();
    }
    let created = create(api, &key, &body).await;
    let json = created.assert_status(201);
    assert_eq!(json["identityToken"], identity_token.unwrap_or(Value::Null), "{json}");
    json["id"].as_str().unwrap().to_owned()
}

/// The bearer token an attempt carried.
pub(crate) fn bearer(received: &Received) -> &str {
    let header = received.header("authorization");
    header.strip_prefix("Bearer ").unwrap_or_else(|| panic!("no bearer token: {header:?}"))
}

/// Waits until the delivery's record has `status`; the record.
async fn until_status(
    pipeline: &Pipeline,
    user: &str,
    delivery_id: &str,
    status: DeliveryStatus,
) -> career_core::delivery::log::DeliveryRecord {
    career_service::eventually(format!("{delivery_id} {status:?}"), || async {
        let stored = career_service::delivery_record(&pipeline.settings().tables, user, delivery_id).await;
        match stored {
            Some(stored) if stored.record.status == status => Ok(stored.record),
            other => Err(other.map(|s| s.record)),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_attempt_of_an_opted_in_subscription_carries_a_token_for_its_audience_and_no_other_does() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let opted_in = Receiver::start(&[500, 200], std::time::Duration::ZERO).await;
    let not_opted_in = Receiver::start(&[200], std::time::Duration::ZERO).await;
    let id = subscribe(&pipeline.api, &user, &opted_in.url, Some(json!({"audience": AUDIENCE}))).await;
    subscribe(&pipeline.api, &user, &not_opted_in.url, None).await;

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let (attempts, other) = (opted_in.wait_for(2, DEADLINE).await, not_opted_in.wait_for(1, DEADLINE).await);
    for attempt in &attempts {
        let claims = verified(bearer(attempt), AUDIENCE).await.expect("each attempt's token verifies");
        let tags = &claims[AWS_CLAIMS]["request_tags"];
        assert_eq!((tags["subscription"].as_str(), tags["user"].as_str()), (Some(id.as_str()), Some(user.as_str())));
        assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 300, "5 minutes");
        assert!(attempt.header("webhook-signature").starts_with("v1,"), "the signatures still bind the body");
    }
    assert!(!other[0].headers.contains_key("authorization"), "no token unasked");
    let delivery = attempts[1].header("x-webhook-delivery");
    until_status(&pipeline, &user, delivery, DeliveryStatus::Succeeded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscriptions_token_is_kept_for_its_attempts_and_a_new_audience_gets_its_own() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], std::time::Duration::ZERO).await;
    let id = subscribe(&pipeline.api, &user, &receiver.url, Some(json!({"audience": AUDIENCE}))).await;

    for round in 1..=3 {
        pipeline.api.admin.update_profile(&user).await.unwrap();
        receiver.wait_for(round, DEADLINE).await;
    }
    let received = receiver.received();
    let tokens: Vec<&str> = received.iter().map(bearer).collect();
    assert!(tokens.iter().all(|token| *token == tokens[0]), "one token for the three first attempts");
    assert_eq!(tokens_tagged(&id), 1, "one GetWebIdentityToken for them");

    let key = pipeline.api.key(&user, "write:webhooks").await;
    let other = "api://another-audience";
    let changed = update(&pipeline.api, &key, &id, &json!({"identityToken": {"audience": other}}).to_string()).await;
    assert_eq!(changed.assert_status(200)["identityToken"], json!({"audience": other}));
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let next = receiver.wait_for(4, DEADLINE).await.remove(3);
    verified(bearer(&next), other).await.expect("a token for the new audience");
    assert_eq!(tokens_tagged(&id), 2);

    let off = update(&pipeline.api, &key, &id, r#"{"identityToken": null}"#).await;
    assert_eq!(off.assert_status(200)["identityToken"], Value::Null);
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let last = receiver.wait_for(5, DEADLINE).await.remove(4);
    assert!(!last.headers.contains_key("authorization"), "off again");
    assert_eq!(tokens_tagged(&id), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_call_that_fails_is_a_failed_attempt_that_names_it_and_nothing_is_sent() {
    let pipeline = Pipeline::from_template(without_grant_of("sts:TagGetWebIdentityToken"), true, |_| {}).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], std::time::Duration::ZERO).await;
    let id = subscribe(&pipeline.api, &user, &receiver.url, Some(json!({"audience": AUDIENCE}))).await;

    let key = pipeline.api.key(&user, "write:webhooks").await;
    let ping = pipeline.api.request(Method::POST, &format!("{PATH}/ping?id={id}")).key(&key).send().await;
    let delivery = ping.assert_status(202)["id"].as_str().unwrap().to_owned();
    let record = until_status(&pipeline, &user, &delivery, DeliveryStatus::Failed).await;
    assert_eq!(record.attempts, 3, "every attempt failed: {record:?}");
    let error = record.last_error.as_deref().unwrap_or_default();
    assert!(error.starts_with("sts:GetWebIdentityToken refused:"), "{error}");
    assert!(error.contains("sts:TagGetWebIdentityToken"), "says what to grant: {error}");
    assert_eq!(record.last_response_status, None, "no answer: nothing was sent");
    assert!(receiver.received().is_empty(), "nothing reaches the receiver without its token");
}

#[tokio::test]
async fn identity_token_is_null_or_an_audience_and_bad_input_changes_nothing() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let url = format!("{}/token", career_service::sink_url());
    let invalid = "webhooks.invalid_identity_token";
    let bad = [
        json!("https://receiver.example"),
        json!(true),
        json!({}),
        json!({"audience": ""}),
        json!({"audience": null}),
        json!({"audience": 5}),
        json!({"audience": "a".repeat(257)}),
        json!({"audience": "a", "algorithm": "RS256"}),
    ];
    for value in &bad {
        let body = json!({"url": url, "events": ["profile.updated"], "identityToken": value});
        create(&api, &key, &body).await.assert_error(400, invalid);
    }
    // After maxDeliveriesPerSecond (contract section 5).
    let body = json!({"url": url, "events": ["profile.updated"], "maxDeliveriesPerSecond": 0, "identityToken": 1});
    create(&api, &key, &body).await.assert_error(400, "webhooks.invalid_rate_limit");
    let queue = "http://127.0.0.1:9/210987654321/q";
    let destination = json!({"type": "aws_sqs", "queueUrl": queue, "roleArn": "arn:aws:iam::210987654321:role/r"});
    let body = json!({"destination": destination, "events": ["profile.updated"], "identityToken": {"audience": "a"}});
    create(&api, &key, &body).await.assert_error(400, invalid);
    assert_eq!(list(&api, &key).await, Vec::<Value>::new(), "no refused create stored anything");

    let longest = "é".repeat(256);
    let body = json!({"url": url, "events": ["profile.updated"], "identityToken": {"audience": longest}});
    let id = create(&api, &key, &body).await.assert_status(201)["id"].as_str().unwrap().to_owned();
    let off = json!({"destination": destination, "events": ["profile.updated"], "identityToken": null});
    let on_destination = create(&api, &key, &off).await.assert_status(201)["id"].as_str().unwrap().to_owned();
    let before = list(&api, &key).await;
    for value in &bad {
        update(&api, &key, &id, &json!({"identityToken": value}).to_string()).await.assert_error(400, invalid);
    }
    for (body, code) in [
        (json!({"identityToken": {"audience": ""}, "url": null}), invalid),
        (json!({"identityToken": {"audience": "a"}, "maxDeliveriesPerSecond": 0}), "webhooks.invalid_rate_limit"),
        (json!({"identityToken": {"audience": "a"}, "url": "ftp://x/"}), "webhooks.invalid_url"),
    ] {
        update(&api, &key, &id, &body.to_string()).await.assert_error(400, code);
    }
    let token = json!({"identityToken": {"audience": "a"}}).to_string();
    update(&api, &key, &on_destination, &token).await.assert_error(400, invalid);
    let with_url = json!({"identityToken": {"audience": "a"}, "url": url}).to_string();
    update(&api, &key, &on_destination, &with_url).await.assert_error(400, invalid);
    assert_eq!(list(&api, &key).await, before, "no refused change applied");

    let listed = |all: Vec<Value>, id: &str| all.into_iter().find(|s| s["id"] == id).unwrap();
    assert_eq!(listed(before.clone(), &id)["identityToken"], json!({"audience": longest}));
    assert_eq!(listed(before, &on_destination)["identityToken"], Value::Null);
    let other = update(&api, &key, &id, r#"{"enabled": false}"#).await;
    assert_eq!(other.assert_status(200)["identityToken"], json!({"audience": longest}), "kept by other changes");
    let off = update(&api, &key, &on_destination, r#"{"identityToken": null}"#).await;
    assert_eq!(off.assert_status(200)["identityToken"], Value::Null, "turning off what is off is no error");
}
