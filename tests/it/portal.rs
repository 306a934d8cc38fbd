//! The webhook portal (contract section 14). Its files as a browser gets them from the local
//! gateway: no key needed, the security headers on every answer. Then the page itself in
//! headless Chromium (tests/portal/portal_test.mjs, with playwright-core and axe-core from
//! `scripts/install-local-deps.sh --browser`) against the pipeline, a loopback receiver and
//! a queue and a Custom Event Bus in the receiver's own AWS account, and what it did checked
//! against the receiver, the queue, the bus and the API.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use career_core::clock::Timestamp;
use career_core::credentials::Scopes;
use career_core::webhooks::signing::{self, PublicKey};
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::{settings_without_kms_or_queues, unique_user};
use lambda_http::http::Method;
use local_aws::gateway::{self, ApiFunctions};
use local_aws::receiver::ReceiverAccount;
use serde_json::Value;

use crate::{destinations, identity_tokens};

/// The identity token's audience the page asks for its HTTP subscription (contract section 21).
const TOKEN_AUDIENCE: &str = "api://portal-test";

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The portal's files, their media types and their text in the repository.
const FILES: [(&str, &str, &str); 6] = [
    ("/portal", "text/html; charset=utf-8", include_str!("../../functions/webhooks/portal/index.html")),
    ("/portal/portal.js", "text/javascript; charset=utf-8", include_str!("../../functions/webhooks/portal/portal.js")),
    ("/portal/api.js", "text/javascript; charset=utf-8", include_str!("../../functions/webhooks/portal/api.js")),
    ("/portal/chart.js", "text/javascript; charset=utf-8", include_str!("../../functions/webhooks/portal/chart.js")),
    ("/portal/portal.css", "text/css; charset=utf-8", include_str!("../../functions/webhooks/portal/portal.css")),
    ("/portal/icon.svg", "image/svg+xml", include_str!("../../functions/webhooks/portal/icon.svg")),
];

/// `functions` behind the local gateway on a free loopback port; its base URL.
async fn gateway_on(functions: ApiFunctions) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway::serve(listener, Arc::new(functions), gateway::IDLE_TIMEOUT));
    base
}

/// One HTTP answer: status, headers by lower-case name, body.
struct Fetched {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Fetched {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

async fn fetch(method: &'static str, url: String) -> Fetched {
    tokio::task::spawn_blocking(move || {
        let response = match ureq::request(method, &url).call() {
            Ok(response) => response,
            Err(ureq::Error::Status(_, response)) => response,
            Err(err) => panic!("{method} {url}: {err}"),
        };
        let headers =
            response.headers_names().iter().map(|n| (n.clone(), response.header(n).unwrap().to_owned())).collect();
        let status = response.status();
        Fetched { status, headers, body: response.into_string().unwrap() }
    })
    .await
    .unwrap()
}

fn assert_security_headers(what: &str, answer: &Fetched) {
    assert_eq!(answer.header("content-security-policy"), Some(CSP), "{what}");
    assert_eq!(answer.header("x-content-type-options"), Some("nosniff"), "{what}");
    assert_eq!(answer.header("referrer-policy"), Some("no-referrer"), "{what}");
    assert!(answer.header("x-request-id").is_some_and(|id| !id.is_empty()), "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portal_files_need_no_key_and_carry_the_security_headers() {
    // Serving a file touches no storage, so the clients point where nothing listens.
    let unreachable = "http://127.0.0.1:9";
    let settings = settings_without_kms_or_queues(unreachable);
    let functions = ApiFunctions::new(
        &career_service::deployment(&settings),
        &career_service::clients_at(unreachable, unreachable),
        &settings,
    )
    .unwrap();
    let base = gateway_on(functions).await;

    for (path, content_type, text) in FILES {
        let answer = fetch("GET", format!("{base}{path}")).await;
        assert_eq!(answer.status, 200, "{path}");
        assert_eq!(answer.header("content-type"), Some(content_type), "{path}");
        assert_eq!(answer.header("cache-control"), Some("no-cache"), "{path}");
        assert_security_headers(path, &answer);
        assert!(answer.body == text, "{path} is served as it is in the repository");
    }
    let head = fetch("HEAD", format!("{base}/portal")).await;
    assert_eq!((head.status, head.header("content-type"), head.body.as_str()), (200, Some(FILES[0].1), ""));
    assert_security_headers("HEAD /portal", &head);

    // (`/portal/` is no path of the portal's: `/portal/{proxy+}` takes one segment or more, so
    // the gateway hands it to `$default`, as local_gateway's tests show.)
    for (method, path, status, code) in [
        ("POST", "/portal", 405, "method_not_allowed"),
        ("DELETE", "/portal/portal.js", 405, "method_not_allowed"),
        ("GET", "/portal/secrets.txt", 404, "not_found"),
        ("GET", "/portal/portal.js/x", 404, "not_found"),
    ] {
        let answer = fetch(method, format!("{base}{path}")).await;
        let what = format!("{method} {path}");
        assert_eq!(answer.status, status, "{what}");
        let body: Value = serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(body["error"]["code"], code, "{what}");
        assert_eq!(body["error"]["requestId"].as_str(), answer.header("x-request-id"), "{what}");
        assert_security_headers(&what, &answer);
        if status == 405 {
            assert_eq!(answer.header("allow"), Some("GET, HEAD"), "{what}");
        }
    }
    // Only the page is open: the API beside it still wants a key.
    assert_eq!(fetch("GET", format!("{base}/api/v1/webhooks")).await.status, 401);
}

fn local(path: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(".local").join(path);
    assert!(path.exists(), "{} is missing: run scripts/install-local-deps.sh --browser", path.display());
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_portal_manages_a_subscription_in_headless_chromium() {
    let chromium = Path::new("/usr/bin/chromium");
    assert!(chromium.exists(), "no Chromium: run scripts/install-local-deps.sh --browser");
    let pipeline = Pipeline::start(true).await;
    let receiver = Receiver::answering(&[200], "thanks", Duration::ZERO).await;
    let base = gateway_on(
        ApiFunctions::new(
            &career_service::deployment(pipeline.settings()),
            &career_service::clients(),
            pipeline.settings(),
        )
        .expect("valid settings"),
    )
    .await;
    let user = unique_user();
    // The link `careerctl portal-link` prints, and one whose key expired a minute ago.
    let link = pipeline.api.admin.portal_link(&user, &base, 60).await.unwrap().url;
    let key = link.split_once("#key=").expect("the key in the fragment").1.to_owned();
    let scopes = Scopes::parse_list("read:webhooks,write:webhooks").unwrap();
    let a_minute_ago = Some(Timestamp::now() - Duration::from_secs(60));
    let expired = pipeline.api.admin.create_key(&user, scopes, None, a_minute_ago).await.unwrap().key;

    let artefacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("portal");
    std::fs::create_dir_all(&artefacts).unwrap();
    let screenshot = artefacts.join("portal.png");
    let _ = std::fs::remove_file(&screenshot);
    // A queue in the receiver's own AWS account for the page's destination subscription, and
    // the role to name for it (made below, with the policies the page showed).
    let account = ReceiverAccount::new(&career_service::clients());
    let queue_name = format!("portal-{}", &user[user.len() - 8..]);
    let queue_url = account.create_queue(&queue_name).await.expect("the receiver's queue");
    // And a Custom Event Bus, with a role of its own (each subscription's external id is its own).
    let bus_role = format!("{queue_name}-bus");
    let bus_arn = account.create_event_bus_v2(&bus_role).await.expect("the receiver's Custom Event Bus");
    let profile = std::env::temp_dir().join(format!("career-portal-chromium-{}", unique_user()));
    std::fs::create_dir_all(&profile).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/portal/portal_test.mjs");
    let output = tokio::process::Command::new("node")
        .arg(&script)
        .env("PORTAL_NODE_MODULES", local("portal-node/node_modules"))
        .env("CHROMIUM", chromium)
        .env("PORTAL_LINK", &link)
        .env("EXPIRED_LINK", link.replace(&key, &expired))
        .env("RECEIVER_URL", &receiver.url)
        .env("QUEUE_URL", &queue_url)
        .env("ROLE_ARN", destinations::role_arn(&queue_name))
        .env("BUS_ARN", &bus_arn)
        .env("BUS_ROLE_ARN", destinations::role_arn(&bus_role))
        .env("TOKEN_AUDIENCE", TOKEN_AUDIENCE)
        .env("SCREENSHOT", &screenshot)
        .env("PROFILE_DIR", &profile)
        .kill_on_drop(true)
        .output()
        .await
        .expect("node runs");
    let _ = std::fs::remove_dir_all(&profile);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the browser test failed (screenshot in {}):\n{stderr}", artefacts.display());
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let text = |name: &str| summary[name].as_str().unwrap_or_else(|| panic!("no {name} in {summary}")).to_owned();

    // The sign-in error is the API's own message and code for that key.
    let refusal = pipeline.api.get("/api/v1/webhooks", &expired).await;
    let refusal = &refusal.assert_status(401)["error"];
    let shown = text("expiredProblem");
    assert!(shown.contains(refusal["message"].as_str().unwrap()) && shown.contains("auth.unauthorized"), "{shown}");

    // The ping and its retry reached the receiver: one delivery id, twice, signed with the
    // secret the page showed at creation; the page showed the receiver's answer.
    let ping = text("pingDelivery");
    let sent: Vec<_> = receiver.received().into_iter().filter(|r| r.header("webhook-id") == ping).collect();
    assert_eq!(sent.len(), 2, "{summary}");
    for delivery in &sent {
        assert!(signing::verify_hex(&text("secret"), &delivery.body, delivery.header("x-webhook-signature")));
        assert_eq!(delivery.json()["type"], "webhook.ping");
        // Created with the identity token the page asked for, for its audience.
        let token = identity_tokens::bearer(delivery);
        identity_tokens::verified(token, TOKEN_AUDIENCE).await.expect("a token for the page's audience");
    }
    assert_eq!((text("answerStatus"), text("answerShown")), ("200".to_owned(), "thanks".to_owned()));
    assert_eq!(text("bodyShown").as_bytes(), sent[0].body, "the page shows the exact body sent");
    // The one sent while paused was recovered, and the pings that filled the log came too.
    let recovered = text("skippedDelivery");
    assert_eq!(receiver.received().iter().filter(|r| r.header("webhook-id") == recovered).count(), 1);
    // The one sent while paused again was replayed, once.
    let replayed = text("replayedDelivery");
    assert_eq!(receiver.received().iter().filter(|r| r.header("webhook-id") == replayed).count(), 1);
    assert!(receiver.received().len() >= 12, "{}", receiver.received().len());

    // The ping sent with asymmetric signing on carries a v1a entry that the key the page
    // showed verifies, over the Standard Webhooks message.
    let signed_ping = text("signedPing");
    let delivery = receiver.received().into_iter().find(|r| r.header("webhook-id") == signed_ping).expect("sent");
    let public_key = PublicKey::parse(&text("publicKey")).expect("a whpk_ key");
    let message = [
        format!("{}.{}.", delivery.header("webhook-id"), delivery.header("webhook-timestamp")).as_bytes(),
        &delivery.body,
    ]
    .concat();
    let v1a: Vec<&str> =
        delivery.header("webhook-signature").split(' ').filter_map(|e| e.strip_prefix("v1a,")).collect();
    assert_eq!(v1a.len(), 1, "{}", delivery.header("webhook-signature"));
    let signature = base64::engine::general_purpose::STANDARD.decode(v1a[0]).unwrap();
    let verifier = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public_key.bytes());
    assert!(verifier.verify(&message, &signature).is_ok(), "the page's public key verifies the v1a entry");

    // The health chart counted the URL subscription's attempts, all succeeded, at most the 13
    // the page had made by then (two of the first ping, the recovered one, ten more pings).
    let charted = text("healthChart");
    let count = |after: &str| -> u64 {
        let rest = charted.split(after).nth(1).unwrap_or_else(|| panic!("{after:?} in {charted}"));
        rest.split(' ').next().unwrap().parse().unwrap()
    };
    let (attempts, succeeded) = (count("Last 24 hours: "), count("attempts, "));
    assert!((1..=13).contains(&attempts) && succeeded == attempts, "{charted}");

    // Every view was checked, without a violation; the picture was taken.
    let views = summary["axeViolations"].as_object().unwrap();
    assert!(views.len() >= 8 && views.values().all(|count| count == 0), "{views:?}");
    let png = std::fs::read(&screenshot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");

    // The receiver's role given exactly the two policies the page let them copy is enough: a
    // ping of the destination subscription arrives on the queue, signed with the secret the
    // page showed.
    let policy = |name: &str| serde_json::from_str::<Value>(&text(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (trust, permissions) = (policy("trustPolicy"), policy("permissionsPolicy"));
    account.replace_role(&queue_name, &trust, &permissions).await.expect("the receiver's role");
    let destination = text("destinationId");
    let ping = pipeline.api.request(Method::POST, &format!("/api/v1/webhooks/ping?id={destination}")).key(&key).send();
    ping.await.assert_status(202);
    let pinged = destinations::take(&account, &queue_url, 1).await.remove(0);
    assert_eq!(destinations::attribute(&pinged, "X-Webhook-Event"), "webhook.ping");
    let headers = destinations::STANDARD_HEADERS.map(|name| (name, destinations::attribute(&pinged, name)));
    assert!(destinations::verifies(&text("destinationSecret"), &headers, pinged.body().unwrap()), "{headers:?}");
    let deleted = pipeline.api.request(Method::DELETE, &format!("/api/v1/webhooks?id={destination}")).key(&key).send();
    deleted.await.assert_status(200);

    // So are the two the page showed for the Custom Event Bus: a ping lands on the bus in the
    // subscription's event group.
    let (trust, permissions) = (policy("busTrustPolicy"), policy("busPermissionsPolicy"));
    account.replace_role(&bus_role, &trust, &permissions).await.expect("the bus's role");
    let on_bus = text("busSubscriptionId");
    let ping = pipeline.api.request(Method::POST, &format!("/api/v1/webhooks/ping?id={on_bus}")).key(&key).send();
    ping.await.assert_status(202);
    let landed = destinations::landed(&bus_arn, 1).await.remove(0);
    assert_eq!(
        (landed.detail_type.as_str(), landed.event_group_id.as_deref()),
        ("webhook.ping", Some(on_bus.as_str()))
    );
    let deleted = pipeline.api.request(Method::DELETE, &format!("/api/v1/webhooks?id={on_bus}")).key(&key).send();
    deleted.await.assert_status(200);

    // The page deleted the URL subscription through the API.
    let listed = pipeline.api.get("/api/v1/webhooks", &key).await;
    assert_eq!(listed.assert_status(200)["webhooks"], serde_json::json!([]));
}
