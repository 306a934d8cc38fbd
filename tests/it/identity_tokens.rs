//! IAM outbound identity federation as the local stack emulates it (contract section 21): a
//! role's `GetWebIdentityToken`, evaluated against its policy, answered with an ES384 token
//! that a JWT library verifies as a receiver does: the issuer's discovery document, then its
//! JWKS, fetched over loopback.

use aws_sdk_sts::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sts::operation::get_web_identity_token::GetWebIdentityTokenError;
use aws_sdk_sts::types::Tag;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use career_service::pipeline::Pipeline;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use local_aws::identity_token::{issuer_url, AWS_CLAIMS};
use local_aws::template::{function, Template, TEMPLATE};
use serde_json::Value;

const AUDIENCE: &str = "https://receiver.example/hooks";

/// The shipped template with the delivery role granted `sts:GetWebIdentityToken`.
fn granting_tokens() -> Template {
    let deny = "              - Sid: NoRolesOfThisAccount\n";
    let grant = "              - Sid: IdentityTokens\n                Effect: Allow\n                \
                 Action: sts:GetWebIdentityToken\n                Resource: \"*\"\n";
    assert!(TEMPLATE.contains(deny), "the delivery role's last statement, where the grant goes");
    Template::parse(&TEMPLATE.replacen(deny, &format!("{grant}{deny}"), 1)).expect("the changed template")
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
async fn verified(token: &str, audience: &str) -> Result<Value, jsonwebtoken::errors::Error> {
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
    let pipeline = Pipeline::from_template(granting_tokens(), false, |_| {}).await;
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
    let shipped = Pipeline::start(false).await;
    let denied = sts(&shipped).get_web_identity_token().audience(AUDIENCE).signing_algorithm("ES384").send().await;
    assert_eq!(code(denied.unwrap_err()).as_deref(), Some("AccessDenied"), "the shipped template grants none yet");

    let granted = Pipeline::from_template(granting_tokens(), false, |_| {}).await;
    let request = || sts(&granted).get_web_identity_token().audience(AUDIENCE);
    let short = request().signing_algorithm("ES384").duration_seconds(30).send().await;
    assert_eq!(code(short.unwrap_err()).as_deref(), Some("ValidationError"), "60 s at least");
    let unknown = request().signing_algorithm("HS256").send().await;
    assert_eq!(code(unknown.unwrap_err()).as_deref(), Some("ValidationError"), "RS256 or ES384");
}
