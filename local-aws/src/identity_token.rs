//! IAM outbound identity federation as the local stack emulates it: STS `GetWebIdentityToken`
//! answered with an ES384 JSON Web Token signed by a key of the stack's own, and the issuer's
//! OIDC discovery document and JWKS served on loopback, so a receiver verifies a token the way
//! it verifies AWS's (a JWT library fetching the JWKS from the token's issuer).
//!
//! The token carries the claims AWS documents ("Understanding token claims" in the IAM user
//! guide): `iss`, `aud`, `sub` (the caller's role), `iat`, `exp`, `jti`, and under the
//! `https://sts.amazonaws.com/` namespace `aws_account`, `source_region` and the request's
//! tags as `request_tags`. Only `ES384` is signed here; an `RS256` request is refused, naming
//! the emulation's limit.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Mutex, OnceLock};

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use career_core::clock::Timestamp;
use http_body_util::Full;
use hyper::body::Bytes;
use lambda_http::http;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P384_SHA384_FIXED_SIGNING};
use serde_json::{json, Value};

use crate::template::{ACCOUNT, REGION};

/// The namespace of AWS's own claims in a token.
pub const AWS_CLAIMS: &str = "https://sts.amazonaws.com/";

/// `DurationSeconds`: STS's default, and its bounds.
const DEFAULT_SECONDS: u64 = 300;
const SECONDS: std::ops::RangeInclusive<u64> = 60..=3600;

/// The stack's issuer: its signing key, and the loopback origin that serves its discovery
/// document and JWKS (the `iss` of every token).
struct Issuer {
    key: EcdsaKeyPair,
    key_id: String,
    url: String,
}

/// The issuer, made and served on first use, for the process.
fn issuer() -> &'static Issuer {
    static ISSUER: OnceLock<Issuer> = OnceLock::new();
    ISSUER.get_or_init(|| {
        let random = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, &random).expect("a P-384 key");
        let key =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, pkcs8.as_ref(), &random).expect("its pair");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port for the issuer");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let issuer = Issuer { key, key_id: career_core::random::random_token("local-")[..22].to_owned(), url };
        let (discovery, jwks) = (issuer.discovery().to_string(), issuer.jwks().to_string());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("the issuer's listener");
                let _ = crate::gateway::connections::serve_connections(listener, None, move |request| {
                    let (discovery, jwks) = (discovery.clone(), jwks.clone());
                    async move { Ok::<_, Infallible>(well_known(request.uri().path(), &discovery, &jwks)) }
                })
                .await;
            });
        });
        issuer
    })
}

/// The issuer's two documents, at the paths AWS serves them; anything else is a 404.
fn well_known(path: &str, discovery: &str, jwks: &str) -> http::Response<Full<Bytes>> {
    let (status, body) = match path {
        "/.well-known/openid-configuration" => (http::StatusCode::OK, discovery),
        "/.well-known/jwks.json" => (http::StatusCode::OK, jwks),
        _ => (http::StatusCode::NOT_FOUND, "{}"),
    };
    let mut response = http::Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    response.headers_mut().insert("content-type", http::HeaderValue::from_static("application/json"));
    response
}

impl Issuer {
    fn discovery(&self) -> Value {
        json!({
            "issuer": self.url,
            "jwks_uri": format!("{}/.well-known/jwks.json", self.url),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES384"],
        })
    }

    /// The public key as a JWK: P-384's uncompressed point is `04 || x || y`.
    fn jwks(&self) -> Value {
        let point = self.key.public_key().as_ref();
        let (x, y) = point[1..].split_at(point.len() / 2);
        json!({"keys": [{
            "kty": "EC", "crv": "P-384", "alg": "ES384", "use": "sig", "kid": self.key_id,
            "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y),
        }]})
    }

    fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES384", "typ": "JWT", "kid": self.key_id});
        let encode = |part: &Value| URL_SAFE_NO_PAD.encode(part.to_string());
        let message = format!("{}.{}", encode(&header), encode(claims));
        let signature = self.key.sign(&SystemRandom::new(), message.as_bytes()).expect("an ES384 signature");
        format!("{message}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }
}

/// How many tokens STS gave in this process, by the value of their `subscription` request tag
/// (what a test reads as CloudTrail would show the calls).
static ISSUED: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

/// How many tokens tagged `subscription` = `id` STS gave in this process so far.
pub fn tokens_tagged(id: &str) -> usize {
    ISSUED.lock().expect("issued").get(id).copied().unwrap_or(0)
}

/// The issuer URL of the stack's tokens (its discovery document is under it).
pub fn issuer_url() -> &'static str {
    &issuer().url
}

/// STS's answer to `caller`'s `GetWebIdentityToken` (its Query protocol form `body`), which
/// the caller's policy allowed.
pub fn answer(caller: &str, body: &[u8]) -> HttpResponse {
    let form: Vec<(String, String)> = url::form_urlencoded::parse(body).into_owned().collect();
    let field = |name: &str| form.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str());
    let members = |prefix: &str| {
        let mut numbered: Vec<(usize, &str)> = form
            .iter()
            .filter_map(|(key, value)| Some((key.strip_prefix(prefix)?.parse().ok()?, value.as_str())))
            .collect();
        numbered.sort();
        numbered.into_iter().map(|(_, value)| value.to_owned()).collect::<Vec<_>>()
    };
    let audiences = members("Audience.member.");
    if audiences.is_empty() || audiences.len() > 10 || audiences.iter().any(|a| a.is_empty() || a.len() > 1000) {
        return invalid("Audience must be 1 to 10 values of 1 to 1000 characters");
    }
    let seconds = match field("DurationSeconds").map(str::parse::<u64>) {
        None => DEFAULT_SECONDS,
        Some(Ok(seconds)) if SECONDS.contains(&seconds) => seconds,
        Some(_) => return invalid("DurationSeconds must be 60 to 3600"),
    };
    match field("SigningAlgorithm") {
        Some("ES384") => {}
        Some("RS256") => return invalid("the local stack signs ES384 only (AWS also signs RS256)"),
        _ => return invalid("SigningAlgorithm must be RS256 or ES384"),
    }
    // `Tags.member.N.Key` and `.Value`, numbered from 1.
    let tags: BTreeMap<String, String> = (1..)
        .map_while(|n| {
            let tag = |part: &str| field(&format!("Tags.member.{n}.{part}")).map(str::to_owned);
            Some((tag("Key")?, tag("Value").unwrap_or_default()))
        })
        .collect();
    let issued = Timestamp::now().unix_seconds();
    let expires = issued + seconds;
    let audience = match audiences.as_slice() {
        [one] => json!(one),
        many => json!(many),
    };
    let claims = json!({
        "iss": issuer_url(),
        "aud": audience,
        "sub": caller,
        "iat": issued,
        "exp": expires,
        "jti": career_core::random::random_token(""),
        AWS_CLAIMS: {"aws_account": caller.split(':').nth(4).unwrap_or(ACCOUNT), "source_region": REGION, "request_tags": tags},
    });
    let token = issuer().sign(&claims);
    if let Some(subscription) = tags.get("subscription") {
        *ISSUED.lock().expect("issued").entry(subscription.clone()).or_default() += 1;
    }
    let expiration = Timestamp::from_unix_seconds(expires);
    let body = format!(
        "<GetWebIdentityTokenResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><GetWebIdentityTokenResult>\
         <WebIdentityToken>{token}</WebIdentityToken><Expiration>{expiration}</Expiration></GetWebIdentityTokenResult>\
         <ResponseMetadata><RequestId>local</RequestId></ResponseMetadata></GetWebIdentityTokenResponse>"
    );
    let mut response = HttpResponse::new(StatusCode::try_from(200).expect("a status"), SdkBody::from(body));
    response.headers_mut().insert("content-type", "text/xml");
    response
}

/// STS's refusal of a malformed request.
fn invalid(message: &str) -> HttpResponse {
    let body = format!(
        "<ErrorResponse><Error><Type>Sender</Type><Code>ValidationError</Code><Message>{message}</Message></Error>\
         <RequestId>local</RequestId></ErrorResponse>"
    );
    let mut response = HttpResponse::new(StatusCode::try_from(400).expect("a status"), SdkBody::from(body));
    response.headers_mut().insert("content-type", "text/xml");
    response
}
