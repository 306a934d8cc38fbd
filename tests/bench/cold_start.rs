//! Benchmark 1, Cold start: each function's release binary from exec to its first request for work
//! from a stand-in runtime API, against the hello-world binary, interleaved in one run.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use career_service::pipeline::Pipeline;
use careerctl::gateway::{lambda_request, ApiFunctions};
use lambda_http::http;
use tokio::net::TcpListener;

use crate::payloads::api_request;
use crate::report::{Row, Section};
use crate::runtime_api::{lambda_env, LambdaProcess};
use crate::stats::{mib, ms, ratio, summarize};
use crate::{progress, Bench, FUNCTIONS, HELLO};

pub const TITLE: &str = "Cold start";
const WARMUP_ROUNDS: usize = 3;
const ROUNDS: usize = 40;
const FIRST_REQUEST_SPAWNS: usize = 30;
const FIRST_REQUEST_WARMUP: usize = 2;
const WARM_DYNAMODB_LOCAL: usize = 200;
const TARGET: f64 = 1.5;
const SYSTEM_BUNDLES: [&str; 3] =
    ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

/// A TCP endpoint that accepts connections and never answers: it counts any network call
/// a function makes during init.
struct Sentinel {
    url: String,
    accepted: Arc<AtomicUsize>,
}

impl Sentinel {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        });
        Sentinel { url, accepted }
    }
}

/// One binary in one environment.
struct Variant {
    name: &'static str,
    binary: PathBuf,
    /// Run with the trust store reduced to one certificate (the diagnostic runs).
    reduced: bool,
    samples: Vec<Duration>,
    /// Page faults and resident set (KiB) when the process asked for work.
    faults: Vec<u64>,
    rss: Vec<u64>,
}

/// `SSL_CERT_FILE` (one certificate of the system bundle) and `SSL_CERT_DIR` (an empty
/// directory), which rustls-native-certs reads instead of the platform's store: with them a
/// function loads one root certificate at init instead of all of them.
fn trust_store_dir() -> PathBuf {
    std::env::temp_dir().join(format!("career-bench-trust-{}", std::process::id()))
}

fn reduced_trust_store() -> Option<Vec<(String, String)>> {
    let bundle = SYSTEM_BUNDLES.iter().find_map(|path| std::fs::read_to_string(path).ok())?;
    let end = bundle.find("-----END CERTIFICATE-----")? + "-----END CERTIFICATE-----\n".len();
    let start = bundle.find("-----BEGIN CERTIFICATE-----")?;
    let dir = trust_store_dir();
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).ok()?;
    let one = dir.join("one.pem");
    std::fs::write(&one, &bundle[start..end.min(bundle.len())]).ok()?;
    Some(vec![
        ("SSL_CERT_FILE".into(), one.display().to_string()),
        ("SSL_CERT_DIR".into(), empty.display().to_string()),
    ])
}

/// The median of counts.
fn middle(values: &[u64]) -> Option<u64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied()
}

/// How many files the platform's certificate directory holds (each is read at init).
fn certificate_files() -> usize {
    std::fs::read_dir("/etc/ssl/certs").map(|dir| dir.count()).unwrap_or(0)
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let pipeline = Pipeline::with_settings(false, |s| s.rate_limit_per_minute = 1_000_000).await;
    let (dynamodb, sqs) = (Sentinel::start().await, Sentinel::start().await);
    let reduced = reduced_trust_store();
    let mut variants = Vec::new();
    for name in std::iter::once(HELLO).chain(FUNCTIONS) {
        variants.push(Variant {
            name,
            binary: bench.binary(name)?,
            reduced: false,
            samples: vec![],
            faults: vec![],
            rss: vec![],
        });
    }
    if reduced.is_some() {
        for name in FUNCTIONS {
            variants.push(Variant {
                name,
                binary: bench.binary(name)?,
                reduced: true,
                samples: vec![],
                faults: vec![],
                rss: vec![],
            });
        }
    }

    progress(format!(
        "   {ROUNDS} spawns of each of {} variants ({WARMUP_ROUNDS} warm-up rounds not counted), interleaved",
        variants.len()
    ));
    let count = variants.len();
    for round in 0..WARMUP_ROUNDS + ROUNDS {
        for k in 0..count {
            // Rotate the order every round so no binary always follows the same one.
            let variant = &mut variants[(round + k) % count];
            let mut env = lambda_env(variant.name, pipeline.settings(), &dynamodb.url, &sqs.url);
            if variant.reduced {
                env.extend(reduced.clone().unwrap_or_default());
            }
            let mut process = LambdaProcess::spawn(&variant.binary, variant.name, &env).await?;
            let startup =
                process.first_poll(Duration::from_secs(10)).await.map_err(|e| format!("{}: {e}", variant.name))?;
            let (faults, rss) = (process.page_faults(), process.memory_kib().map(|(_, rss)| rss));
            drop(process);
            if round >= WARMUP_ROUNDS {
                variant.samples.push(startup);
                variant.faults.extend(faults);
                variant.rss.extend(rss);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let init_connections = dynamodb.accepted.load(Ordering::SeqCst) + sqs.accepted.load(Ordering::SeqCst);
    let hello = summarize(&variants[0].samples);
    let median_of = |name: &str, reduced: bool| {
        variants.iter().find(|v| v.name == name && v.reduced == reduced).map(|v| summarize(&v.samples).median)
    };

    let mut rows = Vec::new();
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Time from spawning the release binary to its first `GET /2018-06-01/runtime/invocation/next` on a \
         stand-in runtime API on loopback, over {ROUNDS} spawns per binary, interleaved (the order rotates \
         every round; {WARMUP_ROUNDS} warm-up rounds are not counted). Each process gets Lambda's environment \
         (`AWS_LAMBDA_*`, region, session credentials, `LAMBDA_TASK_ROOT`, `TZ`, …) and the service's \
         settings, and nothing else; it is killed once it asks for work. `hello-lambda` \
         (tests/bench/hello-lambda) is `lambda_runtime::run` on an echo handler, built in the same \
         `make bench` release build.\n"
    );
    body.push_str(
        "| Binary | Median | p90 | Min | Ratio to hello-world (median) | Page faults by then | RSS by then |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for variant in variants.iter().filter(|v| !v.reduced) {
        let s = summarize(&variant.samples);
        let r = ratio(s.median, hello.median);
        let _ = writeln!(
            body,
            "| `{}` | {} | {} | {} | {r:.2}× | {} | {} |",
            variant.name,
            ms(s.median),
            ms(s.p90),
            ms(s.min),
            middle(&variant.faults).map_or("—".into(), |f| f.to_string()),
            middle(&variant.rss).map_or("—".into(), mib)
        );
        if variant.name != HELLO {
            // On a busy machine the minimum is the least disturbed figure: shown next to the median.
            let measured = format!(
                "{} vs {} → {r:.2}× (min {} vs {} → {:.2}×)",
                ms(s.median),
                ms(hello.median),
                ms(s.min),
                ms(hello.min),
                ratio(s.min, hello.min)
            );
            rows.push(Row::new(
                format!("Cold start `{}`", variant.name),
                format!("≤ {TARGET}× hello-world"),
                measured,
                Some(r <= TARGET),
            ));
        }
    }
    let _ = writeln!(
        body,
        "\nNetwork calls during init: the DynamoDB and SQS endpoints pointed at listeners that count \
         connections and never answer; they saw **{init_connections}** connections over all {} spawns of the \
         functions, so the SDK clients are built without a network call at init.\n",
        (WARMUP_ROUNDS + ROUNDS) * (count - 1)
    );
    rows.push(Row::new(
        "Network connections during init (all spawns)",
        "0",
        init_connections.to_string(),
        Some(init_connections == 0),
    ));

    // Where the time goes: the same binaries with the trust store reduced to one certificate.
    let mut unmet_notes = Vec::new();
    let gaps: Vec<(Duration, Duration)> =
        FUNCTIONS.iter().filter_map(|name| Some((median_of(name, false)?, median_of(name, true)?))).collect();
    if gaps.is_empty() {
        body.push_str("No system CA bundle was found, so the trust-store diagnostic did not run.\n");
    } else {
        let files = certificate_files();
        let n = gaps.len() as u32;
        let full: Duration = gaps.iter().map(|g| g.0).sum::<Duration>() / n;
        let one: Duration = gaps.iter().map(|g| g.1).sum::<Duration>() / n;
        let gap = full.saturating_sub(hello.median);
        let certificates = full.saturating_sub(one);
        let share = certificates.as_secs_f64() / gap.as_secs_f64().max(1e-9) * 100.0;
        // Whether the platform's certificate store is (still) read at init.
        let certificates_matter = certificates > Duration::from_micros(500) && share >= 20.0;
        let _ = writeln!(
            body,
            "### Where the time goes\n\n\
             The AWS SDK's default HTTPS client (rustls, through aws-smithy-http-client) loads the platform's \
             root certificates with rustls-native-certs when it is built: here the CA bundle and every file of \
             `/etc/ssl/certs` ({files} entries). To see what that costs at init, the same binaries were also \
             spawned in the same rounds with `SSL_CERT_FILE` set to one certificate and `SSL_CERT_DIR` to an \
             empty directory, which rustls-native-certs reads instead:\n"
        );
        body.push_str(
            "| Function | Median | With one root certificate | Difference | Ratio to hello-world with one certificate | Page faults by then, one certificate |\n\
             |---|---|---|---|---|---|\n",
        );
        for name in FUNCTIONS {
            if let (Some(full), Some(one)) = (median_of(name, false), median_of(name, true)) {
                let faults = variants.iter().find(|v| v.name == name && v.reduced).and_then(|v| middle(&v.faults));
                let _ = writeln!(
                    body,
                    "| `{name}` | {} | {} | {} | {:.2}× | {} |",
                    ms(full),
                    ms(one),
                    ms(full.saturating_sub(one)),
                    ratio(one, hello.median),
                    faults.map_or("—".into(), |f| f.to_string())
                );
            }
        }
        let hello_faults = middle(&variants[0].faults).unwrap_or_default();
        let size = |name: &str| bench.binary(name).ok().and_then(|path| std::fs::metadata(path).ok()).map(|m| m.len());
        let function_size = FUNCTIONS.iter().filter_map(|name| size(name)).max().unwrap_or_default();
        let rest = format!(
            "the binary is up to {} against {} for hello-world and touches more of it (page faults above, \
             against {hello_faults} for hello-world), and building the SDK clients (the `SdkConfig` itself is \
             built by hand from Lambda's environment, with no profile file or provider chain), next to the \
             settings and the JSON logger",
            mib(function_size / 1024),
            mib(size(HELLO).unwrap_or_default() / 1024)
        );
        if certificates_matter {
            let _ = writeln!(
                body,
                "\nOn average over the five functions, loading the root certificates takes {} of the {} by \
                 which a function's start exceeds hello-world's ({share:.0}%); without it a function starts in \
                 {} ({:.2}× hello-world). The rest, which this bench does not split further, is the other work \
                 of init: {rest}.\n",
                ms(certificates),
                ms(gap),
                ms(one),
                ratio(one, hello.median)
            );
        } else {
            let _ = writeln!(
                body,
                "\nThe trust store makes no material difference ({} on average): the functions do not read the \
                 platform's certificate store at init. The {} by which a function's start exceeds \
                 hello-world's is the rest of init, which this bench does not split further: {rest}.\n",
                ms(certificates),
                ms(gap)
            );
        }
        let remaining = "The `SdkConfig` is already built by hand and the SDK crates are without their default \
             features; what is left is mostly the size of the AWS SDK's generated code that init maps and faults \
             in, and the first run of its client set-up. Section 10 measures what that costs under Lambda's CPU \
             share.";
        let distance = format!(
            "Distance: the functions start in {} (mean of the five medians) against {} for hello-world; the \
             target allows {}. Nothing is fetched over the network at init (0 connections).",
            ms(full),
            ms(hello.median),
            ms(hello.median.mul_f64(TARGET))
        );
        if certificates_matter {
            unmet_notes.push(format!(
                "{distance} {share:.0}% of the gap ({}) is the SDK's default HTTPS client loading the \
                 platform's root certificates at init (aws-smithy-http-client's rustls connector and \
                 rustls-native-certs, which read the CA bundle and every file in `/etc/ssl/certs`, {files} \
                 here). With the trust store reduced to one certificate the same binaries start at {:.2}× \
                 hello-world.\n\n\
                 What would close it, in the service code: where the functions build their SDK configuration \
                 at init, give it an HTTP client whose trust store is fixed instead of loaded from the platform \
                 — `aws_config::defaults(BehaviorVersion::latest()).http_client(…)` with an \
                 `aws_smithy_http_client::Builder` whose `TlsContext` has \
                 `TrustStore::empty().with_pem_certificate(…)` holding the Amazon Trust Services roots that \
                 DynamoDB and SQS endpoints chain to (compiled in with `include_bytes!`). That removes the \
                 directory scan and the parse of ~150 certificates from every cold start. (The layout differs \
                 on Lambda's Amazon Linux 2023 image, where the certificate directory holds bundle files rather \
                 than one file per certificate, so the absolute cost there differs; the bundle is still read \
                 and decoded at every cold start.) {}",
                ms(certificates),
                ratio(one, hello.median),
                if ratio(one, hello.median) <= TARGET {
                    "That alone brings the functions within the target.".to_owned()
                } else {
                    format!(
                        "That alone does not reach the target: {} would remain against {} allowed. {remaining}",
                        ms(one),
                        ms(hello.median.mul_f64(TARGET))
                    )
                }
            ));
        } else {
            unmet_notes.push(format!(
                "{distance} The platform's certificate store is not read at init (the trust-store diagnostic \
                 below shows no material difference), so the gap is the rest of init: {rest}. {remaining}"
            ));
        }
    }

    progress("   first requests of a fresh process (does warming a connection at init help?)");
    let first = first_requests(&bench, &pipeline, reduced.as_deref()).await?;
    body.push_str(&first);
    let _ = std::fs::remove_dir_all(trust_store_dir());
    Ok(Section { number: 1, title: TITLE, rows, body, unmet_notes })
}

/// The first three requests of fresh API function processes against DynamoDB Local:
/// 1st: new connection, key not cached; 2nd: another key (lookup again) on the now warm
/// connection; 3rd: the first key again (cached). 1st − 2nd is what a connection opened
/// during init could save.
async fn first_requests(
    bench: &Bench,
    pipeline: &Pipeline,
    reduced: Option<&[(String, String)]>,
) -> Result<String, String> {
    let user = career_service::unique_user();
    let (key_a, key_b) = (pipeline.api.full_key(&user).await, pipeline.api.full_key(&user).await);
    let mut body = String::new();
    let _ = writeln!(
        body,
        "### First requests of a fresh process\n\n\
         {FIRST_REQUEST_SPAWNS} fresh processes per API function against DynamoDB Local (after \
         {FIRST_REQUEST_WARMUP} warm-up rounds, and with DynamoDB Local's code paths warmed in process first), \
         each sent three GETs through the runtime API: the 1st opens the DynamoDB connection and looks its key up; the 2nd uses \
         another key (looked up too) on the now open connection; the 3rd repeats the first key (cached). \
         Medians of the invocation time (event handed over → response posted):\n"
    );
    body.push_str(
        "| Function | 1st (new connection, key lookup) | 2nd (open connection, key lookup) | 3rd (open connection, cached key) | 1st − 2nd (per process) |\n\
         |---|---|---|---|---|\n",
    );
    let mut cases: Vec<(&str, &str, bool)> = vec![
        ("career-alerts", "/api/v1/alerts", false),
        ("career-data-sharing", "/api/v1/data-sharing", false),
        ("career-webhooks", "/api/v1/webhooks", false),
    ];
    if reduced.is_some() {
        cases.push(("career-alerts", "/api/v1/alerts", true));
    }
    // DynamoDB Local compiles its code paths as they are first used: warm them (in process,
    // on the same tables) so the fresh processes' first requests do not pay for that.
    let warm = ApiFunctions::new(
        &career_service::dynamodb(),
        &career_service::kms(),
        &career_service::sqs(),
        pipeline.settings(),
    )
    .map_err(|e| e.to_string())?;
    for _ in 0..WARM_DYNAMODB_LOCAL {
        for (_, path, _) in &cases {
            let (parts, ()) = http::Request::builder()
                .uri(*path)
                .header("authorization", format!("Bearer {key_a}"))
                .body(())
                .expect("a request")
                .into_parts();
            warm.handle(lambda_request(parts, Default::default())).await;
        }
    }
    // Spawns outer, cases inner, so drift hits every case alike; the first rounds are warm-up.
    let mut times: Vec<[Vec<Duration>; 3]> = cases.iter().map(|_| Default::default()).collect();
    for spawn in 0..FIRST_REQUEST_WARMUP + FIRST_REQUEST_SPAWNS {
        for (case, (name, path, with_one_certificate)) in cases.iter().enumerate() {
            let mut env = lambda_env(name, pipeline.settings(), &bench.dynamodb_endpoint, &bench.sqs_endpoint);
            if *with_one_certificate {
                env.extend(reduced.unwrap_or_default().iter().cloned());
            }
            let mut process = LambdaProcess::spawn(&bench.binary(name)?, name, &env).await?;
            process.first_poll(Duration::from_secs(10)).await?;
            for (i, key) in [&key_a, &key_b, &key_a].into_iter().enumerate() {
                let event = api_request("GET", path, &[], key, None, (spawn * 3 + i) as u64);
                let (took, reply) = process.api.invoke(&event).await?;
                let status = reply.json()["statusCode"].as_u64().unwrap_or_default();
                if status != 200 {
                    let answer = String::from_utf8_lossy(&reply.body).into_owned();
                    return Err(format!("{name}: GET {path} answered {status}: {answer}"));
                }
                if spawn >= FIRST_REQUEST_WARMUP {
                    times[case][i].push(took);
                }
            }
        }
    }
    // 1st − 2nd is taken per process (paired), then the median over the processes.
    let mut deltas = Vec::new();
    for ((name, _, with_one_certificate), times) in cases.iter().zip(times) {
        let paired: Vec<Duration> = times[0].iter().zip(&times[1]).map(|(a, b)| a.saturating_sub(*b)).collect();
        let delta = summarize(&paired).median;
        let [a, b, c] = times.map(|t| summarize(&t).median);
        let label = if *with_one_certificate { format!("`{name}`, one root certificate") } else { format!("`{name}`") };
        let _ = writeln!(body, "| {label} | {} | {} | {} | {} |", ms(a), ms(b), ms(c), ms(delta));
        deltas.push((*name, *with_one_certificate, delta));
    }
    let full: Vec<Duration> = deltas.iter().filter(|d| !d.1).map(|d| d.2).collect();
    let mean = full.iter().sum::<Duration>() / full.len().max(1) as u32;
    let alerts = deltas.iter().find(|d| d.0 == "career-alerts" && !d.1).map(|d| d.2);
    let alerts_one = deltas.iter().find(|d| d.0 == "career-alerts" && d.1).map(|d| d.2);
    let cause = match (alerts, alerts_one) {
        (Some(full), Some(one)) if one.as_secs_f64() < 0.6 * full.as_secs_f64() => format!(
            "For `career-alerts` it is {} with the platform's root certificates and {} with one: about {} of \
             it goes with the certificates — the SDK client's HTTPS connector, and with it the rustls root \
             store (every loaded certificate parsed), is built on the first request — and the rest is other \
             first-use work (the connection, identity and endpoint resolution, the first run of every code \
             path).",
            ms(full),
            ms(one),
            ms(full.saturating_sub(one))
        ),
        (Some(full), Some(one)) => format!(
            "It does not depend clearly on the root store (for `career-alerts` it is {} with the platform's \
             root certificates and {} with one): it is first-use work in the process — the SDK's HTTPS connector, \
             the connection, identity and endpoint resolution, and the first run of every code path.",
            ms(full),
            ms(one)
        ),
        _ => "It is first-use work in the process: the SDK's HTTPS connector, the connection, identity and \
              endpoint resolution, and the first run of every code path."
            .to_owned(),
    };
    let _ = writeln!(
        body,
        "\nThe first request of a fresh process costs about {} more than the second, which also looks a key \
         up (median over the processes of each function's difference, mean of the three functions). On loopback the TCP handshake is a fraction of a millisecond. \
         {cause} Building the connector (or opening a connection) during init would move this out of the \
         first request; against real DynamoDB it would also move the TLS handshake, which loopback does not \
         have. With on-demand Lambda the first request waits for init anyway, so that pays off mainly with \
         provisioned concurrency or SnapStart, where init runs ahead of requests.\n",
        ms(mean)
    );
    Ok(body)
}
