//! The integration tests' harness: DynamoDB Local and the SQS emulator, started once per
//! test binary on free ports (by the same code as `careerctl local`), and helpers that
//! drive the functions' handlers with real requests.

pub mod calls;
pub mod local_run;
pub mod logs;
pub mod pipeline;
pub mod receiver;
pub mod scale_model;
pub mod script_receiver;
pub mod tls;

use std::fmt::{Debug, Display};
use std::future::Future;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use career_core::aws::AwsClients;
use career_core::config::{SecretSetting, Settings, TableNames};
use career_core::random;
use career_core::webhooks::destination::RoleArn;
use careerctl::admin::Admin;
use lambda_http::http::{self, HeaderMap, Method, StatusCode};
use local_aws::deployment::Deployment;
use local_aws::emulators::Installed;
use local_aws::gateway::{lambda_request, ApiFunctions};
use local_aws::resources::QueueUrls;
use local_aws::stack::LocalStack;
use serde_json::Value;

/// Where the services listen, and the settings every test starts from.
pub struct Services {
    pub dynamodb_endpoint: String,
    pub sqs_endpoint: String,
    pub queues: QueueUrls,
    pub settings: Settings,
    /// See [`sink_url`].
    pub sink_url: String,
    /// Asks the services' runtime for a fresh DynamoDB Local ([`fresh_dynamodb`]).
    fresh_dynamodb: tokio::sync::mpsc::UnboundedSender<tokio::sync::oneshot::Sender<Result<(), String>>>,
}

/// How long a test waits for a state that the service reaches by itself: a request arriving,
/// records settling, the lanes draining, a stack starting. Long, because `make test` often
/// shares its two cores with other builds, where DynamoDB Local's JVM and the emulators stall
/// for seconds; a wait ends as soon as its state is reached, so the figure costs nothing when
/// all goes well. A test of how long something takes (a timeout, a retry's schedule) says so
/// with its own figure.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Asks `state` again and again until it answers `Ok`, and returns that. After `within` the
/// test fails, saying what it waited for and the last `Err` it saw (the state it got stuck in).
pub async fn eventually_within<T, S, F>(within: Duration, what: impl Display, mut state: impl FnMut() -> F) -> T
where
    S: Debug,
    F: Future<Output = Result<T, S>>,
{
    let deadline = Instant::now() + within;
    loop {
        match state().await {
            Ok(reached) => return reached,
            Err(now) => assert!(Instant::now() < deadline, "{what}: not within {within:?}; still {now:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// [`eventually_within`] the [`DEADLINE`].
pub async fn eventually<T, S, F>(what: impl Display, state: impl FnMut() -> F) -> T
where
    S: Debug,
    F: Future<Output = Result<T, S>>,
{
    eventually_within(DEADLINE, what, state).await
}

/// The messages a queue holds: waiting, in flight and delayed (SQS's approximate counts;
/// the emulator's are exact).
pub async fn held(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> usize {
    use aws_sdk_sqs::types::QueueAttributeName;
    let output = sqs.get_queue_attributes().queue_url(queue_url).attribute_names(QueueAttributeName::All).send().await;
    let attributes = output.expect("the queue's attributes").attributes.unwrap_or_default();
    [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        QueueAttributeName::ApproximateNumberOfMessagesDelayed,
    ]
    .iter()
    .filter_map(|name| attributes.get(name)?.parse::<usize>().ok())
    .sum()
}

/// The most messages a queue held in flight, delayed, and waiting to be received, at one
/// moment: SQS's counts (the emulator's are exact) read every 50 ms from its start until it
/// is dropped.
pub struct QueueGauge {
    most: std::sync::Arc<[std::sync::atomic::AtomicUsize; 3]>,
    sampler: tokio::task::JoinHandle<()>,
}

impl QueueGauge {
    pub fn start(queue_url: &str) -> Self {
        use aws_sdk_sqs::types::QueueAttributeName::{
            ApproximateNumberOfMessages, ApproximateNumberOfMessagesDelayed, ApproximateNumberOfMessagesNotVisible,
        };
        let most: std::sync::Arc<[std::sync::atomic::AtomicUsize; 3]> = std::sync::Arc::default();
        let (seen, queue_url, sqs) = (most.clone(), queue_url.to_owned(), sqs());
        let sampler = tokio::spawn(async move {
            loop {
                let names = [
                    ApproximateNumberOfMessagesNotVisible,
                    ApproximateNumberOfMessagesDelayed,
                    ApproximateNumberOfMessages,
                ];
                let asked = sqs.get_queue_attributes().queue_url(&queue_url).set_attribute_names(Some(names.to_vec()));
                if let Ok(output) = asked.send().await {
                    let attributes = output.attributes.unwrap_or_default();
                    for (most, name) in seen.iter().zip(&names) {
                        let count = attributes.get(name).and_then(|n| n.parse().ok()).unwrap_or(0);
                        most.fetch_max(count, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        QueueGauge { most, sampler }
    }

    pub fn most_in_flight(&self) -> usize {
        self.most[0].load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn most_delayed(&self) -> usize {
        self.most[1].load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn most_waiting_to_be_received(&self) -> usize {
        self.most[2].load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for QueueGauge {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// Every stack of this test binary: its tables and its deployment of the template.
type Stack = (TableNames, Deployment);

static STACKS: std::sync::Mutex<Vec<Stack>> = std::sync::Mutex::new(Vec::new());

fn register(settings: &Settings, deployment: Deployment) {
    STACKS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((settings.tables.clone(), deployment));
}

/// The deployment of the stack whose tables `settings` name: the registered stack with the
/// most tables in common (a test that points one table elsewhere stays in its stack, and the
/// roles then refuse that table, as they would on AWS).
#[track_caller]
pub fn deployment(settings: &Settings) -> Deployment {
    services(); // the base stack registers itself when it starts
    let stacks = STACKS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let shared = |stack: &&Stack| stack.0.all().iter().zip(settings.tables.all()).filter(|(a, b)| a.1 == b.1).count();
    let best = stacks.iter().filter(|stack| shared(stack) > 0).max_by_key(shared);
    best.unwrap_or_else(|| panic!("no stack has any of the tables {:?}", settings.tables)).1.clone()
}

/// `clients` acting as the role of the template's function `function` in the stack whose
/// tables `settings` name: every call they make is evaluated against that role.
#[track_caller]
pub fn acting_as(function: &str, settings: &Settings, clients: &AwsClients) -> AwsClients {
    deployment(settings).acting_as(function, clients)
}

/// The settings of the template's function `function` in the stack whose settings are
/// `settings`: from the environment the template gives it.
#[track_caller]
pub fn function_settings(function: &str, settings: &Settings) -> Settings {
    deployment(settings).settings_of(function, settings).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The template's event sources of `function` in the stack whose tables `settings` name.
pub fn queue_sources(function: &str, settings: &Settings) -> Vec<local_aws::event_sources::QueueSource> {
    deployment(settings).queue_sources(function).expect("the template's queue sources")
}

/// The template's stream sources of `function` in the stack whose tables `settings` name.
pub fn stream_sources(function: &str, settings: &Settings) -> Vec<local_aws::event_sources::StreamSource> {
    deployment(settings).stream_sources(function).expect("the template's stream sources")
}

/// Where the functions of every test binary record the grants of their roles that they use
/// (tests/iam_grants.rs), below the workspace.
pub const GRANTS_DIR: &str = "target/iam-grants";

/// The services of this test binary, started on first use. They run on a runtime of their
/// own, so each `#[tokio::test]` runtime can come and go, and stop when the binary exits.
pub fn services() -> &'static Services {
    static SERVICES: OnceLock<Services> = OnceLock::new();
    SERVICES.get_or_init(|| {
        local_aws::iam::record_grants_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join(GRANTS_DIR))
            .unwrap_or_else(|e| panic!("{e:#}"));
        let (ready, started) = mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().expect("a runtime for the services");
            runtime.block_on(async move {
                let mut stack = LocalStack::start(&installed(), None, base_settings())
                    .await
                    .unwrap_or_else(|e| panic!("starting the local services: {e:#}"));
                let sink = receiver::Receiver::start(&[200], std::time::Duration::ZERO).await;
                register(&stack.settings, stack.deployment.clone());
                let (fresh_dynamodb, mut requests) = tokio::sync::mpsc::unbounded_channel();
                ready
                    .send(Services {
                        dynamodb_endpoint: stack.dynamodb.endpoint.clone(),
                        sqs_endpoint: stack.sqs.endpoint.clone(),
                        queues: stack.queues.clone(),
                        settings: stack.settings.clone(),
                        sink_url: sink.url.clone(),
                        fresh_dynamodb,
                    })
                    .expect("the test waits for the services");
                while let Some(done) = requests.recv().await {
                    let restarted = stack.restart_dynamodb(&installed()).await.map_err(|e| format!("{e:#}"));
                    let _ = done.send(restarted);
                }
                std::future::pending::<()>().await;
            });
        });
        started.recv().expect("the local services started")
    })
}

/// Replaces the services' DynamoDB Local with a new, empty one on the same endpoint, with
/// the base stack's tables made again (every other stack's tables are gone): for a
/// benchmark whose parts must not pay for the stream records of the parts before
/// ([`local_aws::stack::LocalStack::restart_dynamodb`] says why they would).
///
/// A new JVM answers its first few thousand requests slowly (its JIT compiler has not seen
/// them yet), so it is first warmed with the calls a delivery makes on the base stack's
/// delivery log: a conditional put, a query, an update and a delete of a scratch record.
pub async fn fresh_dynamodb() -> Result<(), String> {
    use aws_sdk_dynamodb::types::AttributeValue;
    const WARM_UP_RECORDS: usize = 250;
    let (done, restarted) = tokio::sync::oneshot::channel();
    services().fresh_dynamodb.send(done).map_err(|_| "the services' runtime has ended".to_owned())?;
    restarted.await.map_err(|_| "the services' runtime has ended".to_owned())??;
    let (dynamodb, table) = (dynamodb(), &services().settings.tables.deliveries);
    let partition = AttributeValue::S("whk_warmup#0".into());
    for n in 0..WARM_UP_RECORDS {
        let id = AttributeValue::S(format!("dlv_warmup{n}"));
        let key = [("logPartition".to_owned(), partition.clone()), ("deliveryId".to_owned(), id)];
        let warm_up = async {
            dynamodb
                .put_item()
                .table_name(table)
                .set_item(Some(key.clone().into()))
                .condition_expression("attribute_not_exists(deliveryId)")
                .send()
                .await?;
            dynamodb
                .query()
                .table_name(table)
                .key_condition_expression("logPartition = :p")
                .expression_attribute_values(":p", partition.clone())
                .limit(5)
                .send()
                .await?;
            dynamodb
                .update_item()
                .table_name(table)
                .set_key(Some(key.clone().into()))
                .update_expression("SET attempts = :n")
                .expression_attribute_values(":n", AttributeValue::N(n.to_string()))
                .send()
                .await?;
            dynamodb.delete_item().table_name(table).set_key(Some(key.into())).send().await?;
            Ok::<_, aws_sdk_dynamodb::Error>(())
        };
        warm_up.await.map_err(|e| format!("warming the fresh DynamoDB Local up: {e}"))?;
    }
    Ok(())
}

/// A receiver on loopback that answers 200 to every request (paths under it reach it too),
/// running as long as the services: where a test points the subscriptions it creates but
/// whose deliveries it does not look at. The house rule: no test creates a subscription
/// whose URL is not a loopback receiver it runs (see [`assert_subscriptions_on_loopback`]).
pub fn sink_url() -> &'static str {
    &services().sink_url
}

/// DynamoDB Local and the SQS emulator as `scripts/install-local-deps.sh` installed them.
pub fn installed() -> Installed {
    Installed::at(Path::new(env!("CARGO_MANIFEST_DIR")).join(".local")).unwrap_or_else(|e| panic!("{e:#}"))
}

/// The delivery function's role, as the local stack names template.yaml's
/// `DeliverFunctionRole`: the role owners of an AWS destination trust (contract section 17).
pub fn sender_role_arn() -> RoleArn {
    let template = local_aws::template::Template::shipped();
    let stack = local_aws::template::Resolver {
        stack_name: local_aws::stack::STACK_NAME.to_owned(),
        parameters: template.parameter_defaults(),
        ..Default::default()
    };
    let role = template.resource("DeliverFunctionRole").expect("the delivery function's role");
    let arn = local_aws::resources::role_arn(&role, &stack).expect("its name resolves");
    RoleArn::parse(&arn).expect("a role ARN")
}

/// The settings every test starts from (the services add the delivery queue's URL).
pub fn base_settings() -> Settings {
    Settings {
        tables: TableNames::with_prefix("career-"),
        rate_limit_per_minute: 600,
        rate_limit_window: std::time::Duration::from_secs(60),
        webhook_urls: career_core::webhooks::UrlPolicy::default(),
        cursor_signing_key: Some(SecretSetting::new(random::random_token("cursor_"))),
        delivery_queue_url: None,
        retry_queue_url: None,
        dead_letter_queue_url: None,
        sweep_after: std::time::Duration::from_secs(300),
        retry_base: std::time::Duration::from_millis(1000),
        max_delivery_attempts: 3,
        delivery_groups: career_core::delivery::groups::Groups::new(16).expect("a number of groups"),
        secrets_kms_key_id: None,
        webhook_disable_after: std::time::Duration::from_secs(432_000),
        probe_after: std::time::Duration::from_secs(600),
        probe_for: std::time::Duration::from_secs(604_800),
        metrics_namespace: "CareerService/Webhooks".into(),
        operator_topic_arn: None,
        sender_role_arn: Some(sender_role_arn()),
        partition_quota: career_core::store::PartitionQuota::DYNAMODB,
        release_per_call: career_core::config::RELEASE_PER_CALL,
    }
}

/// A fresh instance of the delivery function (new clients, connection pools and HTTP agent)
/// on the test's DynamoDB Local, SQS emulator and KMS.
pub fn deliver_instance(settings: &Settings) -> career_deliver::Deps {
    let function = local_aws::template::function::DELIVER;
    career_deliver::Deps::new(&acting_as(function, settings, &clients()), &function_settings(function, settings))
        .expect("delivery settings")
}

/// [`base_settings`] for functions whose KMS key and delivery queues lie at `unreachable`:
/// for tests in which no request touches a secret or a queue.
pub fn settings_without_kms_or_queues(unreachable: &str) -> Settings {
    let mut settings = base_settings();
    settings.secrets_kms_key_id = Some("alias/unused".into());
    settings.delivery_queue_url = Some(format!("{unreachable}/queue/unused.fifo"));
    settings.retry_queue_url = Some(format!("{unreachable}/queue/unused-retry"));
    settings.dead_letter_queue_url = Some(format!("{unreachable}/queue/unused-dlq"));
    settings
}

/// The SDK configuration of clients on the test's services: the one the local stack and
/// the functions build (static credentials, us-east-1, the functions' time limits), with a
/// new HTTP client and so connection pools of its own.
pub fn sdk_config() -> SdkConfig {
    local_aws::stack::sdk_config(&services().dynamodb_endpoint, &services().sqs_endpoint)
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// The AWS clients of a fresh function instance on the test's services.
pub fn clients() -> AwsClients {
    AwsClients::new(sdk_config())
}

/// [`clients`] whose calls may wait as long as a burst of writes queued on one item of a
/// CPU-starved DynamoDB Local takes: for a test of what contention does, not of how long it
/// takes. With the functions' limits (2 s an attempt, 4 s a call), a call that waits its turn
/// behind the burst for over 2 s is abandoned and sent again, its abandoned write still queued
/// ahead of it, and after 4 s the request is answered 500. Those limits are tested against a
/// paused DynamoDB Local (tests/paused_dynamodb.rs), and the deployed functions keep them.
pub fn patient_clients() -> AwsClients {
    let patient = aws_config::timeout::TimeoutConfig::builder()
        .operation_attempt_timeout(std::time::Duration::from_secs(60))
        .operation_timeout(std::time::Duration::from_secs(60))
        .build();
    AwsClients::new(sdk_config().to_builder().timeout_config(patient).build())
}

/// The AWS clients of a function instance whose DynamoDB is at `dynamodb` and whose SQS and
/// KMS are at `moto`.
pub fn clients_at(dynamodb: &str, moto: &str) -> AwsClients {
    AwsClients::new(local_aws::stack::sdk_config(dynamodb, moto).unwrap_or_else(|e| panic!("{e:#}")))
}

/// [`clients_at`] with `factor` times AWS's own time limits (1: AWS's), not the local
/// stack's (`local_aws::stack::TIMEOUT_FACTOR`): for a test of those limits.
pub fn clients_with_limits_at(dynamodb: &str, moto: &str, factor: u32) -> AwsClients {
    let sdk = local_aws::stack::sdk_config(dynamodb, moto).unwrap_or_else(|e| panic!("{e:#}"));
    AwsClients::new(sdk.to_builder().timeout_config(career_core::aws::runtime::aws_timeouts(factor)).build())
}

/// [`clients`] whose KMS client logs its calls in `calls`.
pub fn clients_logging_kms(calls: &calls::Calls) -> AwsClients {
    let config = aws_sdk_kms::config::Builder::from(&sdk_config()).interceptor(calls.clone()).build();
    clients().with_kms(aws_sdk_kms::Client::from_conf(config))
}

/// A DynamoDB client for the test's own runtime.
pub fn dynamodb() -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&sdk_config())
}

/// [`clients`] whose DynamoDB client logs its calls in `calls`.
pub fn clients_logging_dynamodb(calls: &calls::Calls) -> AwsClients {
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk_config()).interceptor(calls.clone()).build();
    clients().with_dynamodb(aws_sdk_dynamodb::Client::from_conf(config))
}

/// [`clients`] whose SQS client logs its calls in `calls`.
pub fn clients_logging_sqs(calls: &calls::Calls) -> AwsClients {
    let config = aws_sdk_sqs::config::Builder::from(&sdk_config()).interceptor(calls.clone()).build();
    clients().with_sqs(aws_sdk_sqs::Client::from_conf(config))
}

/// A DynamoDB Streams client for the test's own runtime.
pub fn streams() -> aws_sdk_dynamodbstreams::Client {
    aws_sdk_dynamodbstreams::Client::new(&sdk_config())
}

/// An SQS client for the test's own runtime.
pub fn sqs() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&sdk_config())
}

/// A user id no other test uses.
/// `count` messages of a queue with every attribute, as an event source mapping receives them
/// (left in flight: the caller deletes them).
pub async fn receive_messages(queue_url: &str, count: usize) -> Vec<aws_sdk_sqs::types::Message> {
    let (sqs, messages) = (sqs(), std::sync::Mutex::new(Vec::new()));
    let (sqs, taken) = (&sqs, &messages);
    eventually(format!("{count} messages received from {queue_url}"), || async move {
        let output = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        let mut taken = taken.lock().unwrap();
        taken.extend(output.messages.unwrap_or_default());
        if taken.len() >= count {
            Ok(())
        } else {
            Err(taken.len())
        }
    })
    .await;
    let messages = messages.into_inner().unwrap();
    assert_eq!(messages.len(), count, "messages received from {queue_url}");
    messages
}

/// A delivery's record, found as a manual retry finds it: among the logs of the user's
/// subscriptions (a delivery id alone does not say which log holds it).
pub async fn delivery_record(
    tables: &TableNames,
    user: &str,
    delivery_id: &str,
) -> Option<career_core::store::deliveries::StoredDelivery> {
    let user_id = typed(user);
    let webhooks = career_core::store::webhooks::WebhookTable::new(dynamodb(), &tables.webhooks);
    let subscriptions: Vec<_> = webhooks.list(&user_id).await.unwrap().into_iter().map(|s| s.id).collect();
    let deliveries = career_core::store::deliveries::DeliveryTable::new(dynamodb(), &tables.deliveries);
    deliveries.find(&user_id, &subscriptions, &typed(delivery_id)).await.unwrap()
}

pub fn unique_user() -> String {
    format!("user-{}", &random::random_token("")[..12])
}

/// Test text as the typed value the store takes (a user id, an id, a timestamp).
#[track_caller]
pub fn typed<T: std::str::FromStr<Err = String>>(text: impl AsRef<str>) -> T {
    text.as_ref().parse().unwrap_or_else(|e| panic!("{e}"))
}

/// Messages as the main lane takes them in their subscription's first group (what a queue
/// held before a subscription spread over several).
pub fn in_first_group(
    messages: &[career_core::delivery::DeliveryMessage],
) -> Vec<(&career_core::delivery::DeliveryMessage, career_core::delivery::plan::Place)> {
    messages.iter().map(|message| (message, career_core::delivery::plan::Place::Group(0))).collect()
}

/// An attempt at `at` that got no answer: what starts a subscription's failure clock.
pub fn failed_attempt(at: career_core::clock::Timestamp) -> career_core::delivery::log::AttemptRecord {
    career_core::delivery::log::AttemptRecord {
        at,
        status: career_core::delivery::log::DeliveryStatus::Pending,
        response: None,
        error: Some("connection refused".to_owned()),
        next_attempt_at: None,
        parked: false,
        advance_generation: false,
    }
}

/// The contract's time format: RFC 3339 in UTC with milliseconds and a `Z`.
#[track_caller]
pub fn assert_rfc3339_utc(text: impl AsRef<str>) {
    let text = text.as_ref();
    assert!(
        career_core::clock::Timestamp::parse(text).is_some(),
        "not an RFC 3339 UTC time with milliseconds: {text:?}"
    );
}

/// The three API functions as a fresh (cold) instance would run them.
pub struct Api {
    pub functions: Arc<ApiFunctions>,
    pub admin: Admin,
    pub settings: Settings,
}

impl Api {
    pub fn new() -> Self {
        Self::with_settings(|_| {})
    }

    pub fn with_settings(change: impl FnOnce(&mut Settings)) -> Self {
        Self::with_clients(clients(), change)
    }

    /// The functions as the local stack runs them: webhook URLs may be `http` and private,
    /// so that subscriptions can name a receiver on loopback ([`sink_url`]).
    pub fn loopback() -> Self {
        Self::with_settings(|s| s.webhook_urls = career_core::webhooks::UrlPolicy::local_stack())
    }

    /// The functions with clients of the test's choosing (a counted KMS, say).
    pub fn with_clients(clients: AwsClients, change: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = services().settings.clone();
        change(&mut settings);
        Self::on(clients, settings)
    }

    /// The functions on the services that these clients talk to.
    pub fn on(clients: AwsClients, settings: Settings) -> Self {
        let functions = ApiFunctions::new(&deployment(&settings), &clients, &settings).expect("valid settings");
        Self::serving(Arc::new(functions), clients, settings)
    }

    /// `functions` (a stack's, built already), with an admin on `clients`.
    pub fn serving(functions: Arc<ApiFunctions>, clients: AwsClients, settings: Settings) -> Self {
        Api { functions, admin: Admin::new(clients.dynamodb().clone(), settings.tables.clone()), settings }
    }

    /// Issues a key for `user` with the comma-separated `scopes`.
    pub async fn key(&self, user: impl AsRef<str>, scopes: &str) -> String {
        let scopes = career_core::credentials::Scopes::parse_list(scopes).expect("valid scopes");
        let issued = self.admin.create_key(user, scopes, None, None).await.expect("key issued");
        issued.key
    }

    /// A key with all six scopes.
    pub async fn full_key(&self, user: impl AsRef<str>) -> String {
        self.key(user, &career_core::credentials::Scopes::all().names().join(",")).await
    }

    pub async fn alert(&self, user: impl AsRef<str>, title: &str) -> String {
        let new = careerctl::admin::NewAlert {
            title: title.into(),
            message: format!("{title} details"),
            category: career_core::alerts::Category::CareerHealth,
            severity: career_core::alerts::Severity::Warning,
        };
        let alert = self.admin.create_alert(user, new).await.expect("alert created");
        alert.id.to_string()
    }

    /// Sends a request through the gateway's conversion and the owning function's handler.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder<'_> {
        RequestBuilder { api: self, builder: http::Request::builder().method(method).uri(path), body: Vec::new() }
    }

    pub async fn get(&self, path: &str, key: &str) -> Answer {
        self.request(Method::GET, path).key(key).send().await
    }

    pub async fn send_json(&self, method: Method, path: &str, key: &str, body: &str) -> Answer {
        self.request(method, path).key(key).json(body).send().await
    }
}

impl Default for Api {
    fn default() -> Self {
        Self::new()
    }
}

pub struct RequestBuilder<'a> {
    api: &'a Api,
    builder: http::request::Builder,
    body: Vec<u8>,
}

impl RequestBuilder<'_> {
    pub fn key(self, key: &str) -> Self {
        self.header("authorization", &format!("Bearer {key}"))
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.builder = self.builder.header(name, value);
        self
    }

    pub fn json(self, body: &str) -> Self {
        self.header("content-type", "application/json").body(body.as_bytes())
    }

    pub fn body(mut self, body: &[u8]) -> Self {
        self.body = body.to_vec();
        self
    }

    pub async fn send(self) -> Answer {
        let (parts, ()) = self.builder.body(()).expect("valid request").into_parts();
        // On the heap: the future of every function's handler is large in a debug build, and a
        // test runs it on its own thread's 2 MiB stack beside the test's own future.
        let response = Box::pin(self.api.functions.handle(lambda_request(parts, self.body.into()))).await;
        let (parts, body) = response.into_parts();
        let json =
            serde_json::from_slice(&body).unwrap_or_else(|e| panic!("response body is not JSON ({e}): {body:?}"));
        let answer = Answer { status: parts.status, headers: parts.headers, json };
        assert_subscriptions_on_loopback(&answer);
        answer
    }
}

/// The guard of the house rule that no test creates a subscription the delivery function
/// could send to another machine: every subscription that an answer shows (created, changed
/// or listed, so also one a test wrote straight to the table) must name a receiver on
/// loopback (or a queue of the local SQS emulator). A refused request shows none, so its
/// URL may be anything.
#[track_caller]
pub fn assert_subscriptions_on_loopback(answer: &Answer) {
    let listed = answer.json.get("webhooks").and_then(Value::as_array);
    let shown = listed.map_or_else(|| vec![&answer.json], |all| all.iter().collect());
    for subscription in shown {
        let is_subscription = subscription["id"].as_str().is_some_and(|id| id.starts_with("whk_"));
        if let (true, Some(url)) = (is_subscription, subscription["url"].as_str()) {
            assert!(is_loopback(url), "a subscription to {url}: tests may only create subscriptions to loopback receivers they run (sink_url, receiver::Receiver)");
        }
        // An AWS destination's queue is the local emulator's (a bus is reached through the
        // stack's EventBridge endpoint, which is local in every test).
        if let (true, Some(queue)) = (is_subscription, subscription["destination"]["queueUrl"].as_str()) {
            assert!(
                is_loopback(queue),
                "a subscription to the queue {queue}: tests may only use the local emulator's queues"
            );
        }
    }
}

/// Whether `url` names this machine: 127.0.0.0/8, [::1] or `localhost`.
pub fn is_loopback(url: &str) -> bool {
    match url::Url::parse(url).ok().as_ref().and_then(url::Url::host) {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// A function's answer, its body parsed as JSON.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub json: Value,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the status and error code, and the error body's shape.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!((self.status.as_u16(), self.json["error"]["code"].as_str()), (status, Some(code)), "{self:?}");
        assert!(self.json["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{self:?}");
        assert_eq!(self.json["error"]["requestId"].as_str(), self.header("x-request-id"), "{self:?}");
    }

    #[track_caller]
    pub fn assert_status(&self, status: u16) -> &Value {
        assert_eq!(self.status.as_u16(), status, "{self:?}");
        &self.json
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(json: Value) -> Answer {
        Answer { status: StatusCode::OK, headers: HeaderMap::new(), json }
    }

    #[test]
    fn loopback_is_127_0_0_0_8_and_1_and_localhost_only() {
        for url in ["http://127.0.0.1:3000/hook", "http://127.8.9.10/", "http://[::1]:80/x", "http://LocalHost:9/"] {
            assert!(is_loopback(url), "{url}");
        }
        for url in ["https://hooks.example.com/a", "https://10.0.0.5/", "https://localhost.example.com/", "/hook", ""] {
            assert!(!is_loopback(url), "{url}");
        }
    }

    #[test]
    fn subscriptions_on_loopback_and_answers_without_subscriptions_pass() {
        assert_subscriptions_on_loopback(&answer(serde_json::json!({"id": "whk_1", "url": "http://127.0.0.1:1/h"})));
        assert_subscriptions_on_loopback(&answer(
            serde_json::json!({"webhooks": [{"id": "whk_1", "url": "http://[::1]/"}]}),
        ));
        assert_subscriptions_on_loopback(&answer(serde_json::json!({"url": "https://example.com/portal#key=x"})));
        assert_subscriptions_on_loopback(&answer(serde_json::json!({"error": {"code": "webhooks.invalid_url"}})));
    }

    #[test]
    #[should_panic(expected = "a subscription to https://hooks.example.com/a")]
    fn a_created_subscription_elsewhere_fails_the_test() {
        assert_subscriptions_on_loopback(&answer(
            serde_json::json!({"id": "whk_1", "url": "https://hooks.example.com/a"}),
        ));
    }

    #[test]
    #[should_panic(expected = "a subscription to https://10.0.0.5/")]
    fn a_listed_subscription_elsewhere_fails_the_test() {
        let listed = serde_json::json!({"webhooks": [{"id": "whk_1", "url": "http://127.0.0.1/"}, {"id": "whk_2", "url": "https://10.0.0.5/"}]});
        assert_subscriptions_on_loopback(&answer(listed));
    }
}
