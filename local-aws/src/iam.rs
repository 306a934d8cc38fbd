//! IAM as the local stack enforces it: each function's AWS clients act as that function's
//! role from template.yaml, and every call they make is evaluated against the role's policy
//! before it reaches DynamoDB Local or moto. A call the role does not allow is answered as
//! AWS answers it (400 `AccessDeniedException` in JSON; 403 `AccessDeniedException` in the RPC
//! v2 CBOR protocol's; 403 `AccessDenied`, or SNS's `AuthorizationError`, in the Query
//! protocol's XML), so the function takes its own error path,
//! and the stack logs one line naming the function, the action and the resource.
//!
//! Emulation only, like DynamoDB Local: it lives in the local stack's HTTP client (see
//! [`enforcing`]), never in the functions' deployed path. The identity travels as on AWS, in
//! the request's signature: each role has access keys of its own ([`Roles::acting_as`]);
//! calls signed with the stack's own keys (careerctl's operator commands, a test's setup)
//! are not evaluated.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use anyhow::{bail, Context};
use aws_sdk_dynamodb::config::{Credentials, SharedCredentialsProvider};
use aws_smithy_runtime_api::client::http::{
    http_client_fn, HttpClient, HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::byte_stream::ByteStream;
use career_core::aws::AwsClients;
use serde_json::Value as Json;
use serde_yaml::Value;

use crate::template::{scalar, Resolver, Resource, Template, ACCOUNT};

/// One statement of a role's policy, resolved to the local resources.
#[derive(Clone, Debug)]
pub struct Statement {
    pub sid: String,
    allow: bool,
    actions: Patterns,
    resources: Patterns,
    conditions: Vec<Condition>,
}

/// A statement's `Action` or `Resource` (the patterns it names) or its `NotAction` or
/// `NotResource` (everything but them). AWS: "NotAction is an advanced policy element that
/// explicitly matches everything except the specified list of actions [...] such unlisted
/// actions or services are denied if you use the Deny effect"
/// (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_notaction.html);
/// NotResource likewise for resources.
#[derive(Clone, Debug)]
enum Patterns {
    Listed(Vec<String>),
    AllBut(Vec<String>),
}

impl Patterns {
    /// From the statement's positive element `name` or its `Not` form: exactly one of them,
    /// as IAM refuses a policy with both or neither.
    fn of(statement: &Value, name: &str) -> anyhow::Result<Self> {
        let not = format!("Not{name}");
        match (statement.get(name), statement.get(not.as_str())) {
            (Some(listed), None) => Ok(Patterns::Listed(list(listed)?)),
            (None, Some(excluded)) => Ok(Patterns::AllBut(list(excluded)?)),
            (Some(_), Some(_)) => bail!("a statement has both {name} and {not}"),
            (None, None) => bail!("a statement has neither {name} nor {not}"),
        }
    }

    fn matches(&self, text: &str, fold_case: bool) -> bool {
        let named = |patterns: &[String]| {
            patterns.iter().any(|p| match fold_case {
                // Action names are case-insensitive in IAM; resource ARNs are not.
                true => matches(&p.to_ascii_lowercase(), &text.to_ascii_lowercase()),
                false => matches(p, text),
            })
        };
        match self {
            Patterns::Listed(patterns) => named(patterns),
            Patterns::AllBut(patterns) => !named(patterns),
        }
    }
}

/// One condition of a statement: `operator: {key: values}`.
#[derive(Clone, Debug)]
struct Condition {
    operator: StringOperator,
    key: String,
    values: Vec<String>,
}

/// The condition operators this evaluator knows. Any other (a numeric or date operator, an
/// `…IfExists` form, a `ForAnyValue:`/`ForAllValues:` set operator) is refused when the
/// template is read, rather than evaluated wrongly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StringOperator {
    Equals,
    NotEquals,
    Like,
    NotLike,
}

impl StringOperator {
    fn parse(name: &str) -> anyhow::Result<Self> {
        Ok(match name {
            "StringEquals" => StringOperator::Equals,
            "StringNotEquals" => StringOperator::NotEquals,
            "StringLike" => StringOperator::Like,
            "StringNotLike" => StringOperator::NotLike,
            other => bail!("the condition operator {other}, which the local stack's IAM cannot evaluate"),
        })
    }
}

impl Condition {
    /// AWS: with several values for a key, the condition holds if any matches; a negated
    /// operator holds if none does. A key missing from the request matches no value, so a
    /// positive operator is false and a negated one true
    /// (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html).
    fn holds(&self, call: &Call) -> bool {
        let present = call.context.iter().find(|(k, _)| k.eq_ignore_ascii_case(&self.key)).map(|(_, v)| v);
        let equal = |v: &String| self.values.contains(v);
        let like = |v: &String| self.values.iter().any(|p| matches(p, v));
        match self.operator {
            StringOperator::Equals => present.is_some_and(equal),
            StringOperator::NotEquals => !present.is_some_and(equal),
            StringOperator::Like => present.is_some_and(like),
            StringOperator::NotLike => !present.is_some_and(like),
        }
    }
}

/// A role and its identity policy's statements: a function's, or a receiver's role that a
/// function assumed (contract section 17).
#[derive(Debug)]
pub struct Role {
    /// The function's logical id in the template; for a receiver's role, the session's name.
    pub function: String,
    /// The role's ARN.
    pub arn: String,
    pub statements: Vec<Statement>,
}

/// One AWS call as IAM sees it: an action on a resource, with the condition keys it sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub action: String,
    pub resource: String,
    pub context: Vec<(String, String)>,
}

/// What a role's statement allowed: `(function, statement id, action)`.
pub type Grant = (String, String, String);

/// A refused call: `(function, action, resource)`.
pub type Denial = (String, String, String);

/// The roles known to the local stacks of this process, by access key id, and what each
/// allowed and refused so far.
#[derive(Default)]
struct Registry {
    roles: RwLock<HashMap<String, Arc<Role>>>,
    /// The keys STS gave for receivers' roles (moto's, by access key id): the role's ARN and
    /// the session's name.
    assumed: RwLock<HashMap<String, (String, String)>>,
    used: Mutex<BTreeSet<Grant>>,
    denied: Mutex<Vec<Denial>>,
}

static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::default);

/// Where each grant is also written when first used (see [`record_grants_in`]).
static GRANTS_FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Writes every grant this process uses, when first used, as a line `function, statement id,
/// action` (tab-separated) to a file of its own in `dir`, so that grants used by all the test
/// binaries can be put together (tests/iam_grants.rs).
pub fn record_grants_in(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let _ = GRANTS_FILE.set(dir.join(format!("{}.tsv", std::process::id())));
    Ok(())
}

/// The grants written to the files of `dir` by [`record_grants_in`].
pub fn recorded_grants(dir: &std::path::Path) -> anyhow::Result<BTreeSet<Grant>> {
    let mut grants = BTreeSet::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let text = std::fs::read_to_string(entry?.path())?;
        for line in text.lines() {
            let mut fields = line.split('\t').map(str::to_owned);
            if let (Some(function), Some(sid), Some(action)) = (fields.next(), fields.next(), fields.next()) {
                grants.insert((function, sid, action));
            }
        }
    }
    Ok(grants)
}

/// The roles of one local stack's functions.
#[derive(Clone, Debug, Default)]
pub struct Roles {
    /// function logical id → access key id.
    keys: HashMap<String, String>,
}

impl Roles {
    /// Reads every function's role from `template`, resolved to this stack's resources.
    pub fn of(template: &Template, resolver: &Resolver) -> anyhow::Result<Self> {
        static NEXT_KEY: AtomicU64 = AtomicU64::new(1);
        let mut keys = HashMap::new();
        for function in template.resources_of("AWS::Serverless::Function") {
            let role_id = role_of(&function)?;
            let statements = role_statements(template, resolver, role_id)?;
            let arn = resolver.resources.get(role_id).and_then(|role| role.attributes.get("Arn")).cloned();
            let arn = arn.with_context(|| format!("{role_id} has no ARN in this stack"))?;
            let role = Role { function: function.logical_id.to_owned(), arn, statements };
            // DynamoDB Local takes access keys of letters and digits only.
            let key = format!("LOCALROLE{:010}", NEXT_KEY.fetch_add(1, Ordering::Relaxed));
            REGISTRY.roles.write().expect("registry").insert(key.clone(), Arc::new(role));
            keys.insert(function.logical_id.to_owned(), key);
        }
        Ok(Roles { keys })
    }

    /// `clients` acting as the role of the template's function `function` (its logical id):
    /// every call they make is evaluated against that role.
    pub fn acting_as(&self, function: &str, clients: &AwsClients) -> AwsClients {
        let key = self.keys.get(function).unwrap_or_else(|| panic!("template.yaml has no function {function}"));
        let credentials = Credentials::new(key.clone(), "local", None, None, "local stack role");
        clients.with_credentials(SharedCredentialsProvider::new(credentials))
    }
}

/// Every grant `template` declares: `(function, statement id, action)` for each action of each
/// statement of each function's role, with the statement's comment lines in the template
/// (the lines just above its `- Sid:`), which explain a grant that no test exercises.
pub fn declared_grants(template_text: &str) -> anyhow::Result<Vec<(Grant, String)>> {
    let template = Template::parse(template_text)?;
    let lines: Vec<&str> = template_text.lines().collect();
    let mut declared = Vec::new();
    for function in template.resources_of("AWS::Serverless::Function") {
        let role_id = role_of(&function)?;
        let role_line = lines.iter().position(|l| l.trim_end() == format!("  {role_id}:")).unwrap_or_default();
        let role = template.resource(role_id)?;
        let policies = role.property("Policies").and_then(Value::as_sequence).into_iter().flatten();
        for statement in policies.filter_map(|p| p.get("PolicyDocument")?.get("Statement")?.as_sequence()).flatten() {
            // Unresolved: only its id and its actions, which name no resource, are read here.
            let sid = statement.get("Sid").and_then(scalar).unwrap_or_default();
            // A Deny statement takes away; it grants nothing to exercise.
            if statement.get("Effect").and_then(Value::as_str) == Some("Deny") {
                continue;
            }
            let actions = match Patterns::of(statement, "Action")? {
                Patterns::Listed(actions) => actions,
                // Everything but some actions is no list of grants.
                Patterns::AllBut(_) => Vec::new(),
            };
            let sid_line = (role_line..lines.len()).find(|&i| lines[i].trim() == format!("- Sid: {sid}"));
            let comment: Vec<&str> = sid_line
                .map(|at| lines[..at].iter().rev().take_while(|l| l.trim_start().starts_with('#')).copied().collect())
                .unwrap_or_default();
            let comment = comment.iter().rev().map(|l| l.trim().trim_start_matches('#').trim()).collect::<Vec<_>>();
            for action in actions {
                let grant = (function.logical_id.to_owned(), sid.clone(), action);
                declared.push((grant, comment.join(" ")));
            }
        }
    }
    Ok(declared)
}

/// The logical id of the role a function runs as (`Role: !GetAtt <role>.Arn`).
fn role_of<'a>(function: &Resource<'a>) -> anyhow::Result<&'a str> {
    let role = match function.property("Role") {
        Some(Value::Tagged(tagged)) => tagged.value.as_str().and_then(|v| v.split('.').next()),
        _ => None,
    };
    role.with_context(|| format!("{}: Role is not !GetAtt <role>.Arn", function.logical_id))
}

fn role_statements(template: &Template, resolver: &Resolver, role_id: &str) -> anyhow::Result<Vec<Statement>> {
    let role = template.resource(role_id)?;
    let policies = resolver.resolve(role.property("Policies").context("a role without inline policies")?)?;
    let mut statements = Vec::new();
    for policy in policies.as_sequence().into_iter().flatten() {
        let listed = policy.get("PolicyDocument").and_then(|d| d.get("Statement")).and_then(Value::as_sequence);
        for statement in listed.into_iter().flatten() {
            statements.push(statement_of(statement).with_context(|| format!("a statement of {role_id}"))?);
        }
    }
    Ok(statements)
}

/// A policy element's value: one string or a list of them.
fn list(value: &Value) -> anyhow::Result<Vec<String>> {
    let items = match value {
        Value::Sequence(items) => items.iter().collect(),
        other => vec![other],
    };
    items.into_iter().map(|item| scalar(item).with_context(|| format!("not a string: {item:?}"))).collect()
}

/// The elements of an identity policy's statement that this evaluator reads. Any other
/// (`Principal`, `NotPrincipal`, a misspelling) is refused: evaluated as absent, it could
/// allow what AWS would not.
const STATEMENT_ELEMENTS: [&str; 7] = ["Sid", "Effect", "Action", "NotAction", "Resource", "NotResource", "Condition"];

fn statement_of(statement: &Value) -> anyhow::Result<Statement> {
    let elements = statement.as_mapping().context("a statement is not a mapping")?;
    for (element, _) in elements {
        let element = element.as_str().unwrap_or_default();
        if !STATEMENT_ELEMENTS.contains(&element) {
            bail!("the policy element {element:?}, which the local stack's IAM cannot evaluate");
        }
    }
    let mut conditions = Vec::new();
    if let Some(block) = statement.get("Condition") {
        for (operator, keys) in block.as_mapping().context("Condition is not a mapping")? {
            let operator = StringOperator::parse(operator.as_str().unwrap_or_default())?;
            for (key, values) in keys.as_mapping().context("a condition operator's keys are not a mapping")? {
                let key = scalar(key).context("a condition key is not a string")?;
                conditions.push(Condition { operator, key, values: list(values)? });
            }
        }
    }
    let allow = match statement.get("Effect").and_then(Value::as_str) {
        Some("Allow") => true,
        Some("Deny") => false,
        other => bail!("Effect is {other:?}, neither Allow nor Deny"),
    };
    Ok(Statement {
        sid: statement.get("Sid").and_then(scalar).unwrap_or_default(),
        allow,
        actions: Patterns::of(statement, "Action")?,
        resources: Patterns::of(statement, "Resource")?,
        conditions,
    })
}

/// IAM's wildcards: `*` any run of characters, `?` one.
fn matches(pattern: &str, text: &str) -> bool {
    fn go(p: &[u8], t: &[u8]) -> bool {
        match (p.first(), t.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], t) || (!t.is_empty() && go(p, &t[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &t[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &t[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), text.as_bytes())
}

impl Statement {
    fn applies(&self, call: &Call) -> bool {
        self.actions.matches(&call.action, true)
            && self.resources.matches(&call.resource, false)
            && self.conditions.iter().all(|condition| condition.holds(call))
    }
}

impl Role {
    /// The statement that allows `call`, or `None` when the role refuses it (no statement
    /// allows it, or one denies it).
    pub fn allows(&self, call: &Call) -> Option<&Statement> {
        if self.statements.iter().any(|s| !s.allow && s.applies(call)) {
            return None;
        }
        self.statements.iter().find(|s| s.allow && s.applies(call))
    }
}

/// The calls an AWS request makes, as IAM authorizes them: one per item of a transaction,
/// one per table of a batch. `None` for a request this emulation does not know (it is then
/// refused).
pub fn calls_of(target: &str, body: &Json) -> Option<Vec<Call>> {
    let (service, operation) = target.split_once('.')?;
    match service {
        "DynamoDB_20120810" => dynamodb_calls(operation, body),
        "DynamoDBStreams_20120810" => {
            let stream = match operation {
                "ListStreams" => "*".to_owned(),
                // An iterator names its stream before the first `|`, as DynamoDB's do.
                "GetRecords" => text(body, "ShardIterator")?.split('|').next()?.to_owned(),
                _ => text(body, "StreamArn")?.to_owned(),
            };
            Some(vec![call(format!("dynamodb:{operation}"), stream)])
        }
        "AmazonSQS" => {
            let action = operation.strip_suffix("Batch").unwrap_or(operation);
            // A queue URL ends in /<account>/<name>: a receiver's queue is in its own account.
            let (account, queue) = match text(body, "QueueUrl") {
                Some(url) => {
                    let mut parts = url.rsplit('/');
                    let queue = parts.next()?;
                    (parts.next()?, queue)
                }
                None => (ACCOUNT, text(body, "QueueName")?),
            };
            let arn = format!("arn:aws:sqs:{}:{account}:{queue}", crate::template::REGION);
            Some(vec![call(format!("sqs:{action}"), arn)])
        }
        "AWSEvents" if operation == "PutEvents" => {
            // One call per bus its entries name (an ARN, as the delivery function gives; a name
            // is a bus of the deployment's account).
            let mut buses: Vec<String> = body
                .get("Entries")?
                .as_array()?
                .iter()
                .map(|entry| match text(entry, "EventBusName").unwrap_or("default") {
                    arn if arn.starts_with("arn:") => arn.to_owned(),
                    name => format!("arn:aws:events:{}:{ACCOUNT}:event-bus/{name}", crate::template::REGION),
                })
                .collect();
            buses.dedup();
            Some(buses.into_iter().map(|bus| call("events:PutEvents".to_owned(), bus)).collect())
        }
        // The Custom Event Bus (eventsv2): its entries name no bus, the request does.
        "AWSEventsV2" if operation == "PutEvents" => {
            Some(vec![call("events:PutEvents".to_owned(), text(body, "EventBusArn")?.to_owned())])
        }
        "TrentService" => kms_calls(operation, body),
        _ => None,
    }
}

fn text<'a>(body: &'a Json, name: &str) -> Option<&'a str> {
    body.get(name).and_then(Json::as_str)
}

fn call(action: String, resource: String) -> Call {
    Call { action, resource, context: Vec::new() }
}

fn table(name: &str) -> String {
    format!("arn:aws:dynamodb:{}:{ACCOUNT}:table/{name}", crate::template::REGION)
}

/// DynamoDB's calls: one per table of a batch, one per item of a transaction (as the item's
/// own action), else one on the table or the index the request names.
fn dynamodb_calls(operation: &str, body: &Json) -> Option<Vec<Call>> {
    let action = format!("dynamodb:{operation}");
    Some(match operation {
        "BatchWriteItem" | "BatchGetItem" => {
            let tables = body.get("RequestItems")?.as_object()?;
            tables.keys().map(|name| call(action.clone(), table(name))).collect()
        }
        "TransactWriteItems" | "TransactGetItems" => body
            .get("TransactItems")?
            .as_array()?
            .iter()
            .filter_map(|item| {
                let (kind, request) = item.as_object()?.iter().next()?;
                let action = match kind.as_str() {
                    "ConditionCheck" => "ConditionCheckItem".to_owned(),
                    "Get" | "Put" | "Update" | "Delete" => format!("{kind}Item"),
                    _ => return None,
                };
                Some(call(format!("dynamodb:{action}"), table(request.get("TableName")?.as_str()?)))
            })
            .collect(),
        "ListTables" => vec![call(action, "*".to_owned())],
        _ => {
            let mut resource = table(text(body, "TableName")?);
            if let Some(index) = text(body, "IndexName") {
                resource = format!("{resource}/index/{index}");
            }
            vec![call(action, resource)]
        }
    })
}

/// KMS's call on the key the request names, with its encryption context as condition keys.
fn kms_calls(operation: &str, body: &Json) -> Option<Vec<Call>> {
    let key = text(body, "KeyId")?;
    let resource = match key.starts_with("arn:") {
        true => key.to_owned(),
        false => format!("arn:aws:kms:{}:{ACCOUNT}:key/{key}", crate::template::REGION),
    };
    let context = body.get("EncryptionContext").and_then(Json::as_object).into_iter().flatten();
    let context =
        context.filter_map(|(k, v)| Some((format!("kms:EncryptionContext:{k}"), v.as_str()?.to_owned()))).collect();
    Some(vec![Call { action: format!("kms:{operation}"), resource, context }])
}

/// The IAM calls of a request in AWS's Query protocol (SNS, STS): a form-encoded body naming
/// its `Action` and, for a topic's actions, the `TopicArn`; for `AssumeRole`, the role, with
/// the external id as the condition key `sts:ExternalId`. `None` for an action it does not map.
pub fn query_calls_of(body: &[u8]) -> Option<Vec<Call>> {
    let form: HashMap<String, String> = url::form_urlencoded::parse(body).into_owned().collect();
    let action = form.get("Action")?;
    if action == "AssumeRole" {
        let context = form.get("ExternalId").map(|id| ("sts:ExternalId".to_owned(), id.clone())).into_iter().collect();
        return Some(vec![Call {
            action: "sts:AssumeRole".to_owned(),
            resource: form.get("RoleArn")?.clone(),
            context,
        }]);
    }
    // A token with request tags is also authorized as sts:TagGetWebIdentityToken, as AWS does.
    if action == "GetWebIdentityToken" {
        let call = |action: &str| Call { action: action.to_owned(), resource: "*".to_owned(), context: Vec::new() };
        let tagged = form.keys().any(|key| key.starts_with("Tags.member."));
        let mut calls = vec![call("sts:GetWebIdentityToken")];
        calls.extend(tagged.then(|| call("sts:TagGetWebIdentityToken")));
        return Some(calls);
    }
    // PublishBatch is authorized as sns:Publish, as SendMessageBatch is as sqs:SendMessage.
    let action = match action.as_str() {
        "Publish" | "PublishBatch" => "Publish",
        _ => return None,
    };
    let topic = form.get("TopicArn")?.clone();
    Some(vec![Call { action: format!("sns:{action}"), resource: topic, context: Vec::new() }])
}

/// The access key id a signed request carries (`Credential=<key>/<date>/…`).
fn access_key(request: &HttpRequest) -> Option<&str> {
    let authorization = request.headers().get("authorization")?;
    authorization.split("Credential=").nth(1)?.split('/').next()
}

/// The calls `request` makes, as IAM authorizes them; `Err` with the operation's name for a
/// request this emulation does not map.
fn request_calls(request: &HttpRequest) -> Result<Vec<Call>, String> {
    let bytes = request.body().bytes().unwrap_or_default();
    match Protocol::of(request) {
        Protocol::Json(target) => {
            calls_of(target, &serde_json::from_slice(bytes).unwrap_or(Json::Null)).ok_or(target.to_owned())
        }
        Protocol::Cbor { service, operation } => {
            let target = format!("{service}.{operation}");
            let body: Json = ciborium::from_reader(bytes).unwrap_or(Json::Null);
            calls_of(&target, &body).ok_or(target)
        }
        Protocol::Query => query_calls_of(bytes)
            .ok_or_else(|| String::from_utf8_lossy(bytes).split('&').next().unwrap_or_default().to_owned()),
    }
}

/// The protocol a request speaks, and its refusal with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol<'a> {
    /// The JSON protocol (DynamoDB, SQS, KMS, EventBridge): the operation in `X-Amz-Target`.
    Json(&'a str),
    /// Smithy's RPC v2 CBOR protocol (the Custom Event Bus's eventsv2): the service and the
    /// operation in the path, `/service/<service>/operation/<operation>`, bodies in CBOR.
    Cbor { service: &'a str, operation: &'a str },
    /// The Query protocol (SNS, STS): the operation in the form body, errors in XML.
    Query,
}

impl<'a> Protocol<'a> {
    fn of(request: &'a HttpRequest) -> Self {
        if let Some(target) = request.headers().get("x-amz-target") {
            return Protocol::Json(target);
        }
        let cbor = request.headers().get("smithy-protocol") == Some("rpc-v2-cbor");
        let path = request.uri().split('?').next().unwrap_or_default();
        let named = path.split_once("/service/").and_then(|(_, rest)| rest.split_once("/operation/"));
        match named {
            Some((service, operation)) if cbor => Protocol::Cbor { service, operation },
            _ => Protocol::Query,
        }
    }
}

/// Evaluates `calls` against `role`: AWS's answer, in `protocol`, when the role refuses one. A
/// function's role records each grant it used (`record`).
fn evaluate(
    role: &Role,
    calls: Result<Vec<Call>, String>,
    protocol: Protocol<'_>,
    record: bool,
) -> Option<HttpResponse> {
    let calls = match calls {
        Ok(calls) => calls,
        Err(operation) => {
            let unknown = Call { action: operation, resource: "?".to_owned(), context: Vec::new() };
            return Some(refuse(role, &unknown, protocol));
        }
    };
    for call in &calls {
        match role.allows(call) {
            Some(statement) if record => {
                let grant = (role.function.clone(), statement.sid.clone(), call.action.clone());
                let line = format!("{}\t{}\t{}\n", grant.0, grant.1, grant.2);
                if REGISTRY.used.lock().expect("registry").insert(grant) {
                    if let Some(path) = GRANTS_FILE.get() {
                        use std::io::Write;
                        let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
                        let _ = file.and_then(|mut f| f.write_all(line.as_bytes()));
                    }
                }
            }
            Some(_) => {}
            None => return Some(refuse(role, call, protocol)),
        }
    }
    None
}

/// The session ARN of `role`'s calls, as AWS names the caller in a refusal.
fn session_arn(role: &Role) -> String {
    let account = role.arn.split(':').nth(4).unwrap_or(ACCOUNT);
    let name = role.arn.rsplit('/').next().unwrap_or_default();
    format!("arn:aws:sts::{account}:assumed-role/{name}/{}", role.function)
}

/// AWS's answer to a call the caller's policy refuses, in the request's protocol: the JSON
/// protocol's `AccessDeniedException` with HTTP 400; the Query protocol's XML error with HTTP
/// 403, `AccessDenied` (STS), or `AuthorizationError` (SNS), so each SDK reads the code as it
/// reads AWS's.
fn refuse(role: &Role, call: &Call, protocol: Protocol<'_>) -> HttpResponse {
    let Call { action, resource, .. } = call;
    eprintln!(
        "==> AccessDenied: {} called {action} on {resource}, which its role ({}) does not allow",
        role.function, role.arn
    );
    let denial = (role.function.clone(), action.clone(), resource.clone());
    REGISTRY.denied.lock().expect("registry").push(denial);
    let message = format!(
        "User: {} is not authorized to perform: {action} on resource: {resource} because no identity-based \
         policy allows the {action} action",
        session_arn(role)
    );
    match protocol {
        Protocol::Query => {
            let code = if action.starts_with("sns:") { "AuthorizationError" } else { "AccessDenied" };
            return query_error(code, &message);
        }
        Protocol::Cbor { .. } => return cbor_error("AccessDeniedException", 403, &message),
        Protocol::Json(_) => {}
    }
    let body = serde_json::json!({"__type": "com.amazon.coral.service#AccessDeniedException", "message": message});
    let mut response = HttpResponse::new(StatusCode::try_from(400).expect("a status"), SdkBody::from(body.to_string()));
    response.headers_mut().insert("content-type", "application/x-amz-json-1.0");
    response.headers_mut().insert("x-amzn-errortype", "AccessDeniedException");
    response.headers_mut().insert("x-amzn-query-error", "AccessDenied;Sender");
    response
}

/// STS's answer to an `AssumeRole` that the role's trust policy refuses.
fn refuse_assumption(role: &Role, call: &Call) -> HttpResponse {
    eprintln!(
        "==> AccessDenied: {} may not assume {}: its trust policy does not allow it",
        role.function, call.resource
    );
    REGISTRY.denied.lock().expect("registry").push((role.function.clone(), call.action.clone(), call.resource.clone()));
    let message = format!(
        "User: {} is not authorized to perform: sts:AssumeRole on resource: {}",
        session_arn(role),
        call.resource
    );
    query_error("AccessDenied", &message)
}

/// An RPC v2 CBOR service's error: `status` (the error's own, 403 for `AccessDeniedException`)
/// and the CBOR map naming `code` in `__type`, as the SDKs read it.
fn cbor_error(code: &str, status: u16, message: &str) -> HttpResponse {
    let mut body = Vec::new();
    let error = serde_json::json!({"__type": code, "Message": message});
    ciborium::into_writer(&error, &mut body).expect("a map of strings encodes");
    let mut response = HttpResponse::new(StatusCode::try_from(status).expect("a status"), SdkBody::from(body));
    response.headers_mut().insert("content-type", "application/cbor");
    response.headers_mut().insert("smithy-protocol", "rpc-v2-cbor");
    response
}

/// A Query protocol service's refusal: HTTP 403 and the XML error naming `code`.
fn query_error(code: &str, message: &str) -> HttpResponse {
    let body = format!(
        "<ErrorResponse><Error><Type>Sender</Type>\
         <Code>{code}</Code><Message>{message}</Message></Error><RequestId>local</RequestId></ErrorResponse>"
    );
    let mut response = HttpResponse::new(StatusCode::try_from(403).expect("a status"), SdkBody::from(body));
    response.headers_mut().insert("content-type", "text/xml");
    response
}

/// `inner`, with every request evaluated first against the role whose keys signed it.
pub fn enforcing(inner: SharedHttpClient) -> SharedHttpClient {
    http_client_fn(move |settings, components| {
        SharedHttpConnector::new(Enforcing {
            connector: inner.http_connector(settings, components),
            http: inner.clone(),
        })
    })
}

#[derive(Clone, Debug)]
struct Enforcing {
    connector: SharedHttpConnector,
    /// Unenforced, for reading receivers' roles from the IAM emulator.
    http: SharedHttpClient,
}

impl HttpConnector for Enforcing {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let Some(key) = access_key(&request).map(str::to_owned) else { return self.connector.call(request) };
        let role = REGISTRY.roles.read().expect("registry").get(&key).cloned();
        if let Some(role) = role {
            let calls = request_calls(&request);
            let assumption = calls.as_ref().ok().and_then(|calls| calls.iter().find(|c| c.action == "sts:AssumeRole"));
            let assumption = assumption.cloned();
            let token = calls.as_ref().is_ok_and(|calls| calls.iter().any(|c| c.action == "sts:GetWebIdentityToken"));
            if let Some(refused) = evaluate(&role, calls, Protocol::of(&request), true) {
                return HttpConnectorFuture::ready(Ok(refused));
            }
            // moto has no outbound identity federation: the stack's issuer answers.
            if token {
                let body = request.body().bytes().unwrap_or_default();
                return HttpConnectorFuture::ready(Ok(crate::identity_token::answer(&role.arn, body)));
            }
            return match assumption {
                Some(call) => HttpConnectorFuture::new(self.clone().assume(role, call, request)),
                None => self.connector.call(request),
            };
        }
        let assumed = REGISTRY.assumed.read().expect("registry").get(&key).cloned();
        match assumed {
            Some((arn, session)) => HttpConnectorFuture::new(self.clone().acting_as_receiver(arn, session, request)),
            None => self.connector.call(request),
        }
    }
}

impl Enforcing {
    /// A function's `AssumeRole` of a receiver's role: evaluated against that role's trust
    /// policy (principal, `sts:ExternalId`) as the IAM emulator holds it, then, allowed, sent
    /// to STS, whose keys are then known as that role's.
    async fn assume(self, caller: Arc<Role>, call: Call, request: HttpRequest) -> Result<HttpResponse, ConnectorError> {
        let endpoint = endpoint_of(&request)?;
        let receiver = receiver_role(&self.http, &endpoint, &call.resource, "").await?;
        if !receiver.is_some_and(|receiver| receiver.trusts(&caller.arn, &call)) {
            return Ok(refuse_assumption(&caller, &call));
        }
        let session = url::form_urlencoded::parse(request.body().bytes().unwrap_or_default())
            .find(|(name, _)| name == "RoleSessionName")
            .map(|(_, value)| value.into_owned())
            .unwrap_or_default();
        let mut response = self.connector.call(request).await?;
        let body = std::mem::replace(response.body_mut(), SdkBody::taken());
        let bytes = ByteStream::new(body).collect().await.map_err(|err| ConnectorError::io(err.into()))?.into_bytes();
        let text = String::from_utf8_lossy(&bytes);
        if let Some(key) = text.split("<AccessKeyId>").nth(1).and_then(|rest| rest.split('<').next()) {
            REGISTRY.assumed.write().expect("registry").insert(key.trim().to_owned(), (call.resource.clone(), session));
        }
        *response.body_mut() = SdkBody::from(bytes);
        Ok(response)
    }

    /// A call signed with a receiver's role's keys: evaluated against that role's permissions
    /// as the IAM emulator holds them now (AWS evaluates each call against the current policy).
    async fn acting_as_receiver(
        self,
        arn: String,
        session: String,
        request: HttpRequest,
    ) -> Result<HttpResponse, ConnectorError> {
        let endpoint = endpoint_of(&request)?;
        let Some(receiver) = receiver_role(&self.http, &endpoint, &arn, &session).await? else {
            let role = Role { function: session, arn, statements: Vec::new() };
            let anything = Call { action: "*".to_owned(), resource: "*".to_owned(), context: Vec::new() };
            return Ok(refuse(&role, &anything, Protocol::of(&request)));
        };
        match evaluate(&receiver.permissions, request_calls(&request), Protocol::of(&request), false) {
            Some(refused) => Ok(refused),
            None => self.connector.call(request).await,
        }
    }
}

/// `scheme://authority` of the emulator a request goes to.
fn endpoint_of(request: &HttpRequest) -> Result<String, ConnectorError> {
    let url = url::Url::parse(request.uri()).map_err(|err| ConnectorError::other(err.into(), None))?;
    Ok(url.origin().ascii_serialization())
}

/// A receiver's role as the IAM emulator holds it: its trust policy and its permissions
/// (inline policies).
struct ReceiverRole {
    /// Each statement with the AWS principals it names.
    trust: Vec<(Vec<String>, Statement)>,
    permissions: Role,
}

impl ReceiverRole {
    /// Whether the trust policy lets `caller` (a role's ARN) make `call` (`sts:AssumeRole`,
    /// with its `sts:ExternalId`): a statement naming it allows, none naming it denies.
    fn trusts(&self, caller: &str, call: &Call) -> bool {
        let applies = |(principals, statement): &&(Vec<String>, Statement)| {
            principals.iter().any(|principal| names(principal, caller)) && statement.applies(call)
        };
        let mut applying = self.trust.iter().filter(applies);
        !applying.clone().any(|(_, s)| !s.allow) && applying.any(|(_, s)| s.allow)
    }
}

/// Whether a trust policy's AWS principal names the role `caller`: its ARN, its account (as
/// `arn:aws:iam::<account>:root` or the bare id, which leaves the decision to the caller's
/// identity policy, evaluated before), or anyone.
fn names(principal: &str, caller: &str) -> bool {
    let account = caller.split(':').nth(4).unwrap_or_default();
    principal == "*"
        || principal == caller
        || principal == account
        || principal == format!("arn:aws:iam::{account}:root")
}

/// A trust policy's statement: the AWS principals it names, and the rest evaluated as an
/// identity statement on the role itself.
fn trust_statement(statement: &Value) -> anyhow::Result<(Vec<String>, Statement)> {
    let mut rest = statement.as_mapping().context("a statement is not a mapping")?.clone();
    let principal = rest.remove("Principal").context("a trust policy's statement has no Principal")?;
    let principals = match &principal {
        Value::String(anyone) if anyone == "*" => vec!["*".to_owned()],
        Value::Mapping(kinds) => kinds.get("AWS").map(list).transpose()?.unwrap_or_default(),
        other => bail!("a Principal the local stack's IAM cannot evaluate: {other:?}"),
    };
    rest.insert(Value::from("Resource"), Value::from("*"));
    Ok((principals, statement_of(&Value::Mapping(rest))?))
}

/// The role `arn` in the IAM emulator (in the account the ARN names), read now; `None` when
/// there is no such role (STS then refuses, as AWS does, without saying so).
async fn receiver_role(
    http: &SharedHttpClient,
    endpoint: &str,
    arn: &str,
    session: &str,
) -> Result<Option<ReceiverRole>, ConnectorError> {
    let failed = |err: anyhow::Error| ConnectorError::io(err.into());
    let account = arn.split(':').nth(4).unwrap_or_default().to_owned();
    let name = arn.rsplit('/').next().unwrap_or_default();
    let config = aws_sdk_iam::Config::builder()
        .behavior_version(aws_sdk_iam::config::BehaviorVersion::latest())
        .region(aws_sdk_iam::config::Region::new(crate::template::REGION))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("local", "local", None, None, "local stack"))
        .http_client(http.clone())
        .build();
    let iam = aws_sdk_iam::Client::from_conf(config);
    let in_account = |account: String| {
        move |request: &mut HttpRequest| {
            request.headers_mut().insert(crate::receiver::ACCOUNT_HEADER, account.clone());
        }
    };
    let role = match iam.get_role().role_name(name).customize().mutate_request(in_account(account.clone())).send().await
    {
        Ok(found) => found.role,
        Err(err) if err.as_service_error().is_some_and(|e| e.is_no_such_entity_exception()) => None,
        Err(err) => return Err(failed(anyhow::Error::new(err).context("reading a receiver's role"))),
    };
    let Some(role) = role.filter(|role| role.arn() == arn) else { return Ok(None) };
    let trust = policy_statements(role.assume_role_policy_document().unwrap_or_default())
        .map_err(failed)?
        .iter()
        .map(trust_statement)
        .collect::<anyhow::Result<_>>()
        .map_err(failed)?;
    let listed = iam.list_role_policies().role_name(name).customize().mutate_request(in_account(account.clone()));
    let listed = listed.send().await.map_err(|err| failed(anyhow::Error::new(err).context("listing its policies")))?;
    let mut statements = Vec::new();
    for policy in listed.policy_names() {
        let got = iam.get_role_policy().role_name(name).policy_name(policy);
        let got = got.customize().mutate_request(in_account(account.clone())).send().await;
        let got = got.map_err(|err| failed(anyhow::Error::new(err).context("reading its policy")))?;
        for statement in policy_statements(got.policy_document()).map_err(failed)? {
            statements.push(statement_of(&statement).map_err(failed)?);
        }
    }
    let permissions = Role { function: session.to_owned(), arn: arn.to_owned(), statements };
    Ok(Some(ReceiverRole { trust, permissions }))
}

/// The statements of a policy document as IAM returns it (URL-encoded, or as written).
fn policy_statements(document: &str) -> anyhow::Result<Vec<Value>> {
    let decoded = match document.trim_start().starts_with('{') {
        true => document.to_owned(),
        false => percent_encoding::percent_decode_str(document).decode_utf8()?.into_owned(),
    };
    let document: Json = serde_json::from_str(&decoded).context("a policy document is not JSON")?;
    let statements = match document.get("Statement") {
        Some(Json::Array(statements)) => statements.clone(),
        Some(one) => vec![one.clone()],
        None => Vec::new(),
    };
    statements.iter().map(|statement| Ok(serde_yaml::to_value(statement)?)).collect()
}

/// How many times STS gave keys for the receiver's role `arn` in this process so far.
pub fn assumptions_of(arn: &str) -> usize {
    REGISTRY.assumed.read().expect("registry").values().filter(|(role, _)| role == arn).count()
}

/// Every call refused in this process so far.
pub fn denials() -> Vec<Denial> {
    REGISTRY.denied.lock().expect("registry").clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role_result(statements: &str) -> anyhow::Result<Role> {
        let statements: Value = serde_yaml::from_str(statements).unwrap();
        let statements = statements.as_sequence().unwrap().iter().map(statement_of).collect::<Result<_, _>>()?;
        Ok(Role { function: "F".into(), arn: "arn:aws:iam::123456789012:role/R".into(), statements })
    }

    fn role(statements: &str) -> Role {
        role_result(statements).unwrap()
    }

    fn call(action: &str, resource: &str) -> Call {
        Call { action: action.into(), resource: resource.into(), context: Vec::new() }
    }

    #[test]
    fn an_action_is_allowed_only_on_the_resources_its_statement_names() {
        let role = role("[{Sid: Records, Effect: Allow, Action: [dynamodb:PutItem], Resource: 'arn:t/deliveries'}]");
        assert_eq!(role.allows(&call("dynamodb:PutItem", "arn:t/deliveries")).map(|s| s.sid.as_str()), Some("Records"));
        assert!(role.allows(&call("dynamodb:PutItem", "arn:t/deliveries/index/byDue")).is_none());
        assert!(role.allows(&call("dynamodb:UpdateItem", "arn:t/deliveries")).is_none());
        assert!(role.allows(&call("dynamodb:PutItem", "arn:t/webhooks")).is_none());
    }

    #[test]
    fn wildcards_deny_and_conditions_are_evaluated() {
        let role = role(
            "[{Effect: Allow, Action: 'kms:*', Resource: '*', Condition: {StringEquals: {'kms:EncryptionContext:purpose': webhook-secrets}}},
              {Effect: Deny, Action: kms:GenerateDataKey, Resource: 'arn:k/2'}]",
        );
        let mut decrypt = call("kms:Decrypt", "arn:k/1");
        assert!(role.allows(&decrypt).is_none(), "no encryption context");
        decrypt.context.push(("kms:EncryptionContext:purpose".into(), "webhook-secrets".into()));
        assert!(role.allows(&decrypt).is_some());
        let generate = Call { action: "kms:GenerateDataKey".into(), resource: "arn:k/2".into(), ..decrypt.clone() };
        assert!(role.allows(&generate).is_none(), "an explicit deny wins");
        assert!(matches("arn:l:log-group:/aws/lambda/x:*", "arn:l:log-group:/aws/lambda/x:log-stream:1"));
        assert!(!matches("a?c", "ac"));
    }

    #[test]
    fn not_action_and_not_resource_match_everything_but_what_they_name() {
        let role = role(
            "[{Sid: Tables, Effect: Allow, Action: 'dynamodb:*', Resource: 'arn:t/*'},
              {Sid: OnlyReads, Effect: Deny, NotAction: ['dynamodb:GetItem', 'dynamodb:Query'], Resource: 'arn:t/webhooks'},
              {Sid: OnlyDeliveries, Effect: Deny, Action: dynamodb:PutItem, NotResource: ['arn:t/deliveries']}]",
        );
        let allowed = |action: &str, resource: &str| role.allows(&call(action, resource)).map(|s| s.sid.clone());
        let table = [
            ("dynamodb:GetItem", "arn:t/webhooks", Some("Tables")),
            ("dynamodb:query", "arn:t/webhooks", Some("Tables")),
            ("dynamodb:UpdateItem", "arn:t/webhooks", None),
            ("dynamodb:DeleteItem", "arn:t/webhooks", None),
            ("dynamodb:UpdateItem", "arn:t/alerts", Some("Tables")),
            ("dynamodb:PutItem", "arn:t/deliveries", Some("Tables")),
            ("dynamodb:PutItem", "arn:t/alerts", None),
        ];
        for (action, resource, expected) in table {
            assert_eq!(allowed(action, resource).as_deref(), expected, "{action} on {resource}");
        }
        let everything_but_kms = role_result("[{Effect: Allow, NotAction: 'kms:*', NotResource: 'arn:k/*'}]").unwrap();
        assert!(everything_but_kms.allows(&call("sqs:SendMessage", "arn:q/1")).is_some());
        assert!(everything_but_kms.allows(&call("kms:Decrypt", "arn:q/1")).is_none());
        assert!(everything_but_kms.allows(&call("sqs:SendMessage", "arn:k/1")).is_none());
    }

    #[test]
    fn negated_conditions_hold_when_the_key_is_absent_as_aws_evaluates_them() {
        let role = role(
            "[{Effect: Allow, Action: 'kms:*', Resource: '*'},
              {Effect: Deny, Action: 'kms:*', Resource: '*', Condition: {StringNotLike: {'kms:EncryptionContext:purpose': 'webhook-*'}}}]",
        );
        let mut decrypt = call("kms:Decrypt", "arn:k/1");
        assert!(role.allows(&decrypt).is_none(), "no context: the negated condition holds, the deny applies");
        decrypt.context.push(("kms:EncryptionContext:purpose".into(), "webhook-secrets".into()));
        assert!(role.allows(&decrypt).is_some());
        decrypt.context[0].1 = "other".into();
        assert!(role.allows(&decrypt).is_none());
        let not_equals = role_result(
            "[{Effect: Allow, Action: 'kms:*', Resource: '*', Condition: {StringNotEquals: {'kms:EncryptionContext:purpose': [a, b]}}}]",
        )
        .unwrap();
        let with = |value: &str| Call {
            context: vec![("kms:EncryptionContext:purpose".into(), value.into())],
            ..call("kms:Decrypt", "k")
        };
        assert!(not_equals.allows(&with("c")).is_some());
        assert!(not_equals.allows(&with("b")).is_none());
        assert!(not_equals.allows(&call("kms:Decrypt", "k")).is_some());
    }

    #[test]
    fn what_the_evaluator_cannot_evaluate_is_refused_when_the_template_is_read() {
        let refused = [
            ("[{Effect: Allow, Action: 'sqs:*', Resource: '*', Condition: {NumericLessThan: {'aws:x': '1'}}}]", "NumericLessThan"),
            ("[{Effect: Allow, Action: 'sqs:*', Resource: '*', Condition: {StringEqualsIfExists: {'aws:x': a}}}]", "StringEqualsIfExists"),
            ("[{Effect: Allow, Action: 'sqs:*', Resource: '*', Condition: {'ForAnyValue:StringLike': {'aws:x': a}}}]", "ForAnyValue"),
            ("[{Effect: Allow, Principal: '*', Action: 'sqs:*', Resource: '*'}]", "Principal"),
            ("[{Effect: Allow, Action: 'sqs:*', NotAction: 'sqs:Send*', Resource: '*'}]", "both Action and NotAction"),
            ("[{Effect: Allow, Action: 'sqs:*'}]", "neither Resource nor NotResource"),
            ("[{Effect: allow, Action: 'sqs:*', Resource: '*'}]", "neither Allow nor Deny"),
        ];
        for (statements, why) in refused {
            let error = format!("{:#}", role_result(statements).unwrap_err());
            assert!(error.contains(why), "{statements}: {error}");
        }
        let paper = crate::deploy_checks::resolved_on_paper(&career_core::config::TableNames::with_prefix("p-"));
        let shipped = Template::shipped();
        for function in shipped.resources_of("AWS::Serverless::Function") {
            let statements = role_statements(&shipped, &paper, role_of(&function).unwrap());
            assert!(statements.is_ok(), "{}: every statement is one it evaluates: {statements:?}", function.logical_id);
        }
    }

    #[test]
    fn requests_become_the_calls_iam_authorizes() {
        let transact = serde_json::json!({"TransactItems": [
            {"Put": {"TableName": "d"}}, {"ConditionCheck": {"TableName": "w"}}]});
        let calls = calls_of("DynamoDB_20120810.TransactWriteItems", &transact).unwrap();
        let actions: Vec<_> =
            calls.iter().map(|c| (c.action.as_str(), c.resource.rsplit('/').next().unwrap())).collect();
        assert_eq!(actions, [("dynamodb:PutItem", "d"), ("dynamodb:ConditionCheckItem", "w")]);
        let query = serde_json::json!({"TableName": "d", "IndexName": "byDue"});
        assert!(calls_of("DynamoDB_20120810.Query", &query).unwrap()[0].resource.ends_with("table/d/index/byDue"));
        let batch = serde_json::json!({"QueueUrl": "http://127.0.0.1:1/123456789012/q.fifo", "Entries": []});
        let sqs = &calls_of("AmazonSQS.SendMessageBatch", &batch).unwrap()[0];
        assert_eq!(
            (sqs.action.as_str(), sqs.resource.as_str()),
            ("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:q.fifo")
        );
        assert!(calls_of("AWSLambda.Invoke", &Json::Null).is_none());
    }

    #[test]
    fn a_token_with_request_tags_is_also_a_tagging_call() {
        let actions = |body: &str| -> Vec<String> {
            query_calls_of(body.as_bytes()).unwrap().into_iter().map(|call| call.action).collect()
        };
        let plain = "Action=GetWebIdentityToken&Audience.member.1=a&SigningAlgorithm=ES384";
        assert_eq!(actions(plain), ["sts:GetWebIdentityToken"]);
        let tagged = format!("{plain}&Tags.member.1.Key=subscription&Tags.member.1.Value=whk_1");
        assert_eq!(actions(&tagged), ["sts:GetWebIdentityToken", "sts:TagGetWebIdentityToken"]);
        let untagging = role("[{Sid: Tokens, Effect: Allow, Action: sts:GetWebIdentityToken, Resource: '*'}]");
        let calls = query_calls_of(tagged.as_bytes()).unwrap();
        assert!(untagging.allows(&calls[0]).is_some() && untagging.allows(&calls[1]).is_none());
    }

    #[test]
    fn a_query_protocol_publish_is_sns_publish_on_its_topic() {
        let topic = "arn:aws:sns:us-east-1:123456789012:career-OperatorTopic";
        let body = format!("Action=Publish&Version=2010-03-31&TopicArn={}&Message=%7B%7D", topic.replace(':', "%3A"));
        let calls = query_calls_of(body.as_bytes()).unwrap();
        assert_eq!(calls, [Call { action: "sns:Publish".into(), resource: topic.into(), context: Vec::new() }]);
        let batch = format!("Action=PublishBatch&TopicArn={topic}");
        assert_eq!(query_calls_of(batch.as_bytes()).unwrap()[0].action, "sns:Publish");
        assert!(query_calls_of(b"Action=Subscribe&TopicArn=t").is_none(), "no function subscribes");
        assert!(query_calls_of(b"Action=Publish").is_none(), "a publish names its topic");
        let role = role(&format!("[{{Sid: Operator, Effect: Allow, Action: sns:Publish, Resource: \"{topic}\"}}]"));
        assert!(role.allows(&calls[0]).is_some());
        let other = Call { resource: format!("{topic}-other"), ..calls[0].clone() };
        assert!(role.allows(&other).is_none());
    }

    #[test]
    fn a_refusal_speaks_its_requests_protocol_with_the_code_aws_gives() {
        let role = role("[]");
        let refused = |action: &str, protocol| {
            let response =
                refuse(&role, &Call { action: action.into(), resource: "r".into(), context: Vec::new() }, protocol);
            (response.status().as_u16(), String::from_utf8_lossy(response.body().bytes().unwrap()).into_owned())
        };
        let (status, body) = refused("sts:AssumeRole", Protocol::Query);
        assert!(status == 403 && body.contains("<Code>AccessDenied</Code>"), "{status} {body}");
        let (status, body) = refused("sns:Publish", Protocol::Query);
        assert!(status == 403 && body.contains("<Code>AuthorizationError</Code>"), "{status} {body}");
        let (status, body) = refused("sqs:SendMessage", Protocol::Json("AmazonSQS.SendMessage"));
        assert!(status == 400 && body.contains("AccessDeniedException"), "{status} {body}");
        let (status, body) =
            refused("events:PutEvents", Protocol::Cbor { service: "AWSEventsV2", operation: "PutEvents" });
        assert!(status == 403 && body.contains("AccessDeniedException"), "{status} {body}");
    }

    #[test]
    fn a_custom_event_bus_request_is_read_from_its_path_and_cbor_body() {
        let bus = "arn:aws:events:us-east-1:111122223333:event-busv2/orders/abcdefghij0123456789abcde";
        let mut body = Vec::new();
        let put = serde_json::json!({"EventBusArn": bus, "Entries": [{"Source": "s", "DetailType": "d"}]});
        ciborium::into_writer(&put, &mut body).unwrap();
        let mut request = HttpRequest::new(SdkBody::from(body));
        request.set_uri("http://127.0.0.1:1/service/AWSEventsV2/operation/PutEvents").unwrap();
        request.headers_mut().insert("smithy-protocol", "rpc-v2-cbor");
        assert_eq!(Protocol::of(&request), Protocol::Cbor { service: "AWSEventsV2", operation: "PutEvents" });
        assert_eq!(request_calls(&request), Ok(vec![call("events:PutEvents", bus)]));
        let mut other = HttpRequest::new(SdkBody::from(Vec::new()));
        other.set_uri("http://127.0.0.1:1/service/AWSEventsV2/operation/DeleteEventBus").unwrap();
        other.headers_mut().insert("smithy-protocol", "rpc-v2-cbor");
        assert_eq!(request_calls(&other), Err("AWSEventsV2.DeleteEventBus".to_owned()), "no call it does not map");
    }

    fn assume(external_id: Option<&str>) -> Call {
        let context = external_id.map(|id| ("sts:ExternalId".to_owned(), id.to_owned())).into_iter().collect();
        Call { action: "sts:AssumeRole".into(), resource: "arn:aws:iam::111122223333:role/r".into(), context }
    }

    #[test]
    fn a_trust_policy_lets_only_its_principal_assume_and_only_with_its_external_id() {
        let sender = "arn:aws:iam::123456789012:role/career-DeliverFunctionRole";
        let document = crate::receiver::trust_policy(sender, "right").to_string();
        // IAM answers with the document URL-encoded; as written is read too.
        let encoded: String = url::form_urlencoded::byte_serialize(document.as_bytes()).collect();
        for document in [document.clone(), encoded.replace('+', "%20")] {
            let trust =
                policy_statements(&document).unwrap().iter().map(trust_statement).collect::<anyhow::Result<Vec<_>>>();
            let receiver = ReceiverRole { trust: trust.unwrap(), permissions: role("[]") };
            assert!(receiver.trusts(sender, &assume(Some("right"))));
            assert!(!receiver.trusts(sender, &assume(Some("wrong"))), "another external id");
            assert!(!receiver.trusts(sender, &assume(None)), "no external id");
            assert!(!receiver.trusts("arn:aws:iam::123456789012:role/career-Other", &assume(Some("right"))));
        }
        let account_wide = r#"{"Statement": [{"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
            "Action": "sts:AssumeRole"}, {"Effect": "Deny", "Principal": {"AWS": ["arn:aws:iam::123456789012:role/x"]},
            "Action": "sts:*"}]}"#;
        let trust =
            policy_statements(account_wide).unwrap().iter().map(trust_statement).collect::<anyhow::Result<Vec<_>>>();
        let receiver = ReceiverRole { trust: trust.unwrap(), permissions: role("[]") };
        assert!(receiver.trusts(sender, &assume(None)), "the account's root trusts its roles");
        assert!(!receiver.trusts("arn:aws:iam::123456789012:role/x", &assume(None)), "a deny wins");
        assert!(!receiver.trusts("arn:aws:iam::999999999999:role/y", &assume(None)));
        let service = r#"{"Statement": {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}}"#;
        let trust = policy_statements(service).unwrap().iter().map(trust_statement).collect::<anyhow::Result<Vec<_>>>();
        assert!(!ReceiverRole { trust: trust.unwrap(), permissions: role("[]") }.trusts(sender, &assume(None)));
    }

    #[test]
    fn assume_role_put_events_and_a_receivers_queue_are_the_calls_iam_authorizes() {
        let body = "Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A111122223333%3Arole%2Fr\
                    &RoleSessionName=s&DurationSeconds=900&ExternalId=right";
        assert_eq!(query_calls_of(body.as_bytes()).unwrap(), [assume(Some("right"))]);
        let send = serde_json::json!({"QueueUrl": "http://127.0.0.1:1/111122223333/orders", "MessageBody": "{}"});
        let sqs = &calls_of("AmazonSQS.SendMessage", &send).unwrap()[0];
        assert_eq!(sqs.resource, "arn:aws:sqs:us-east-1:111122223333:orders", "the queue's own account");
        let bus = "arn:aws:events:us-east-1:111122223333:event-bus/orders";
        let put = serde_json::json!({"Entries": [{"EventBusName": bus}, {"EventBusName": bus}, {"Source": "s"}]});
        let calls = calls_of("AWSEvents.PutEvents", &put).unwrap();
        let resources: Vec<&str> = calls.iter().map(|c| c.resource.as_str()).collect();
        assert_eq!(resources, [bus, "arn:aws:events:us-east-1:123456789012:event-bus/default"]);
        assert!(calls.iter().all(|c| c.action == "events:PutEvents"));
    }

    #[test]
    fn the_delivery_role_may_assume_receivers_roles_but_none_of_its_own_account() {
        let paper = crate::deploy_checks::resolved_on_paper(&career_core::config::TableNames::with_prefix("p-"));
        let statements = role_statements(&Template::shipped(), &paper, "DeliverFunctionRole").unwrap();
        let deliver =
            Role { function: "DeliverFunction".into(), arn: "arn:aws:iam::123456789012:role/d".into(), statements };
        let of = |account: &str| Call { resource: format!("arn:aws:iam::{account}:role/r"), ..assume(Some("x")) };
        assert_eq!(deliver.allows(&of("111122223333")).map(|s| s.sid.as_str()), Some("AssumeReceiverRoles"));
        assert!(deliver.allows(&of(ACCOUNT)).is_none(), "its own account's roles are denied");
        let declared = declared_grants(crate::template::TEMPLATE).unwrap();
        assert!(!declared.iter().any(|((_, sid, _), _)| sid == "NoRolesOfThisAccount"), "a deny grants nothing");
    }

    /// Contract section 17: a receiver's queue or bus is reached only with the credentials STS
    /// gives for the receiver's role. No role of the template may send there with its own
    /// credentials, and only the delivery role may assume a receiver's role.
    #[test]
    fn no_role_of_the_template_reaches_a_receivers_queue_or_bus_with_its_own_credentials() {
        let paper = crate::deploy_checks::resolved_on_paper(&career_core::config::TableNames::with_prefix("p-"));
        let template = Template::shipped();
        let receiver = "111122223333";
        let calls = [
            ("sqs:SendMessage", format!("arn:aws:sqs:us-east-1:{receiver}:orders")),
            ("sqs:SendMessage", format!("arn:aws:sqs:eu-west-1:{receiver}:orders.fifo")),
            ("events:PutEvents", format!("arn:aws:events:us-east-1:{receiver}:event-bus/orders")),
            ("events:PutEvents", "arn:aws:events:us-east-1:123456789012:event-bus/default".to_owned()),
        ];
        let mut roles = 0;
        for resource in template.resources().filter(|resource| resource.kind == "AWS::IAM::Role") {
            let role_id = resource.logical_id;
            let statements = role_statements(&template, &paper, role_id).unwrap();
            let role =
                Role { function: role_id.into(), arn: format!("arn:aws:iam::{ACCOUNT}:role/{role_id}"), statements };
            for (action, target) in &calls {
                let call = Call { action: (*action).to_owned(), resource: target.clone(), context: Vec::new() };
                assert!(role.allows(&call).is_none(), "{role_id} may {action} on {target} with its own credentials");
            }
            let assumption = Call { resource: format!("arn:aws:iam::{receiver}:role/r"), ..assume(Some("x")) };
            let may_assume = role.allows(&assumption).is_some();
            assert_eq!(may_assume, role_id == "DeliverFunctionRole", "{role_id} may assume a receiver's role");
            roles += 1;
        }
        assert!(roles >= 6, "the template's function roles were read: {roles}");
    }
}
