//! `openapi.yaml` against the contract and against the handlers' real answers.
//!
//! (a) The document: OpenAPI 3.1, the contract's operations with exactly its statuses,
//!     scopes and error codes, every `$ref` resolvable, the documented headers, and every
//!     example valid against its own schema.
//! (b) The handlers: each operation is driven to every status and error code the document
//!     lists for it; each answer's body is validated against the documented schema and its
//!     headers against the documented headers. Webhook deliveries are checked against the
//!     document's `webhooks` section the same way.
//!
//! Schemas are checked with the `jsonschema` crate (JSON Schema 2020-12, formats included);
//! a test makes sure the document uses no keyword that a validator would silently ignore.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use career_core::credentials::Scopes;
use career_core::delivery::{DeliveryMessage, SignedDelivery};
use career_core::events::catalog::event_types;
use career_core::store::stream::event_from_record;
use career_core::trace::{SpanId, TraceContext};
use career_core::webhooks::rotation::ActiveSecrets;
use career_core::webhooks::signing::SigningKey;
use career_core::webhooks::{DisabledReason, WebhookSecret};
use career_service::typed;
use career_service::{sink_url, unique_user, Answer, Api};
use lambda_http::http::Method;
use serde_json::{json, Value};

// ------------------------------------------------------------------------------------------
// The contract (contract.md and the interface) as data.

/// Every error code the contract defines.
const CONTRACT_CODES: &[&str] = &[
    "request.invalid_json",
    "request.unsupported_media_type",
    "request.body_too_large",
    "request.invalid_cursor",
    "auth.unauthorized",
    "auth.forbidden",
    "not_found",
    "method_not_allowed",
    "rate_limited",
    "internal_error",
    "alerts.missing_id",
    "alerts.invalid_action",
    "alerts.not_found",
    "data_sharing.no_preferences_provided",
    "data_sharing.invalid_preference",
    "data_sharing.unknown_preference",
    "webhooks.missing_required_fields",
    "webhooks.invalid_url",
    "webhooks.invalid_destination",
    "webhooks.invalid_events",
    "webhooks.limit_exceeded",
    "webhooks.missing_subscription_id",
    "webhooks.not_found",
    "webhooks.invalid_grace_period",
    "webhooks.invalid_status",
    "webhooks.missing_delivery_id",
    "webhooks.delivery_not_found",
    "webhooks.invalid_recover_window",
    "webhooks.subscription_disabled",
    "webhooks.invalid_replay",
    "webhooks.invalid_cancel",
    "webhooks.no_changes",
    "webhooks.unknown_field",
    "webhooks.invalid_enabled",
    "webhooks.invalid_asymmetric_signing",
    "webhooks.asymmetric_signing_off",
    "webhooks.invalid_trace_context",
    "webhooks.invalid_rate_limit",
    "webhooks.invalid_while_disabled",
    "webhooks.invalid_identity_token",
];

/// One operation: where it is, its success status and, per error status, the codes the
/// contract allows. Every operation can also answer 401, 403, 413 (the body-size check runs
/// for every operation), 429 and 500. Its scope is the code's (the functions' resource
/// tables); the contract's table of operations is checked against both.
struct Op {
    method: &'static str,
    path: &'static str,
    success: u16,
    errors: &'static [(u16, &'static [&'static str])],
}

const COMMON_ERRORS: &[(u16, &str)] = &[
    (401, "auth.unauthorized"),
    (403, "auth.forbidden"),
    (413, "request.body_too_large"),
    (429, "rate_limited"),
    (500, "internal_error"),
];

const LIST_ALERTS: Op =
    Op { method: "get", path: "/api/v1/alerts", success: 200, errors: &[(400, &["request.invalid_cursor"])] };
const MARK_ALERT: Op = Op {
    method: "patch",
    path: "/api/v1/alerts",
    success: 200,
    errors: &[
        (
            400,
            &["alerts.missing_id", "request.unsupported_media_type", "request.invalid_json", "alerts.invalid_action"],
        ),
        (404, &["alerts.not_found"]),
    ],
};
const GET_PREFERENCES: Op = Op { method: "get", path: "/api/v1/data-sharing", success: 200, errors: &[] };
const PUT_PREFERENCES: Op = Op {
    method: "put",
    path: "/api/v1/data-sharing",
    success: 200,
    errors: &[(
        400,
        &[
            "request.unsupported_media_type",
            "request.invalid_json",
            "data_sharing.no_preferences_provided",
            "data_sharing.invalid_preference",
            "data_sharing.unknown_preference",
        ],
    )],
};
const LIST_WEBHOOKS: Op = Op { method: "get", path: "/api/v1/webhooks", success: 200, errors: &[] };
const CREATE_WEBHOOK: Op = Op {
    method: "post",
    path: "/api/v1/webhooks",
    success: 201,
    errors: &[(
        400,
        &[
            "request.unsupported_media_type",
            "request.invalid_json",
            "webhooks.missing_required_fields",
            "webhooks.invalid_url",
            "webhooks.invalid_destination",
            "webhooks.invalid_events",
            "webhooks.invalid_asymmetric_signing",
            "webhooks.invalid_trace_context",
            "webhooks.invalid_rate_limit",
            "webhooks.invalid_while_disabled",
            "webhooks.invalid_identity_token",
            "webhooks.limit_exceeded",
        ],
    )],
};
const UPDATE_WEBHOOK: Op = Op {
    method: "patch",
    path: "/api/v1/webhooks",
    success: 200,
    errors: &[
        (
            400,
            &[
                "webhooks.missing_subscription_id",
                "request.unsupported_media_type",
                "request.invalid_json",
                "webhooks.no_changes",
                "webhooks.unknown_field",
                "webhooks.invalid_enabled",
                "webhooks.invalid_asymmetric_signing",
                "webhooks.invalid_trace_context",
                "webhooks.invalid_rate_limit",
                "webhooks.invalid_while_disabled",
                "webhooks.invalid_identity_token",
                "webhooks.invalid_url",
                "webhooks.invalid_destination",
                "webhooks.invalid_events",
            ],
        ),
        (404, &["webhooks.not_found"]),
    ],
};
const DELETE_WEBHOOK: Op = Op {
    method: "delete",
    path: "/api/v1/webhooks",
    success: 200,
    errors: &[(400, &["webhooks.missing_subscription_id"]), (404, &["webhooks.not_found"])],
};

const ROTATE_SECRET: Op = Op {
    method: "post",
    path: "/api/v1/webhooks/rotate-secret",
    success: 200,
    errors: &[
        (
            400,
            &[
                "webhooks.missing_subscription_id",
                "request.unsupported_media_type",
                "request.invalid_json",
                "webhooks.invalid_grace_period",
            ],
        ),
        (404, &["webhooks.not_found"]),
    ],
};

const LIST_DELIVERIES: Op = Op {
    method: "get",
    path: "/api/v1/webhooks/deliveries",
    success: 200,
    errors: &[
        (400, &["webhooks.missing_subscription_id", "webhooks.invalid_status", "request.invalid_cursor"]),
        (404, &["webhooks.not_found"]),
    ],
};
const RETRY_DELIVERY: Op = Op {
    method: "post",
    path: "/api/v1/webhooks/deliveries/retry",
    success: 202,
    errors: &[(400, &["webhooks.missing_delivery_id"]), (404, &["webhooks.delivery_not_found"])],
};
const PING_WEBHOOK: Op = Op {
    method: "post",
    path: "/api/v1/webhooks/ping",
    success: 202,
    errors: &[(400, &["webhooks.missing_subscription_id"]), (404, &["webhooks.not_found"])],
};
const ENABLE_WEBHOOK: Op = Op {
    method: "post",
    path: "/api/v1/webhooks/enable",
    success: 200,
    errors: &[(400, &["webhooks.missing_subscription_id"]), (404, &["webhooks.not_found"])],
};

const RECOVER_DELIVERIES: Op = Op {
    method: "post",
    path: "/api/v1/webhooks/recover",
    success: 202,
    errors: &[
        (
            400,
            &[
                "webhooks.missing_subscription_id",
                "request.unsupported_media_type",
                "request.invalid_json",
                "webhooks.invalid_recover_window",
                "webhooks.subscription_disabled",
            ],
        ),
        (404, &["webhooks.not_found"]),
    ],
};

const REPLAY_DELIVERIES: Op = Op {
    method: "post",
    path: "/api/v1/webhooks/replay",
    success: 202,
    errors: &[
        (400, &["request.unsupported_media_type", "request.invalid_json", "webhooks.invalid_replay"]),
        (404, &["webhooks.not_found"]),
    ],
};

const CANCEL_DELIVERIES: Op = Op {
    method: "post",
    path: "/api/v1/webhooks/deliveries/cancel",
    success: 202,
    errors: &[
        (
            400,
            &[
                "webhooks.missing_subscription_id",
                "request.unsupported_media_type",
                "request.invalid_json",
                "webhooks.invalid_cancel",
            ],
        ),
        (404, &["webhooks.not_found"]),
    ],
};

/// The successes an operation answers beside its own (the contract's table names one):
/// `(path, status)`.
const OTHER_SUCCESSES: &[(&str, u16)] = &[
    // A dry run changes nothing: 200, not 202 (contract section 20).
    ("/api/v1/webhooks/replay", 200),
];

const EVENT_TYPES: Op = Op { method: "get", path: "/api/v1/webhooks/event-types", success: 200, errors: &[] };

const SIGNING_KEYS: Op = Op {
    method: "get",
    path: "/api/v1/webhooks/signing-keys",
    success: 200,
    errors: &[
        (400, &["webhooks.missing_subscription_id", "webhooks.asymmetric_signing_off"]),
        (404, &["webhooks.not_found"]),
    ],
};

const HEALTH: Op = Op {
    method: "get",
    path: "/api/v1/webhooks/health",
    success: 200,
    errors: &[(400, &["webhooks.missing_subscription_id"]), (404, &["webhooks.not_found"])],
};

/// Every operation the functions route: `(method, path, scope)`.
fn code_operations() -> Vec<(Method, &'static str, &'static str)> {
    fn of<Op: Copy>(resource: &career_core::aws::api::Resource<Op>) -> Vec<(Method, &'static str, &'static str)> {
        resource.operations.iter().map(|(method, scope, _)| (method.clone(), resource.path, scope.as_str())).collect()
    }
    let mut all = of(&career_alerts::RESOURCE);
    all.extend(of(&career_data_sharing::RESOURCE));
    all.extend(career_webhooks::RESOURCES.iter().flat_map(of));
    all
}

/// The contract's table of operations (docs/contract.md): `(method, path, scope, success)` for
/// every API operation (the portal's page, which needs no key, is left out).
fn contract_table() -> Vec<(String, String, String, u16)> {
    let contract = include_str!("../../docs/contract.md");
    let table = contract.lines().skip_while(|line| !line.starts_with("| method | path | scope |")).skip(2);
    let rows = table.take_while(|line| line.starts_with('|'));
    rows.filter_map(|row| {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let path = cells[1].trim_matches('`').split('?').next().unwrap().to_owned();
        (cells[2] != "none").then(|| (cells[0].to_owned(), path, cells[2].to_owned(), cells[3].parse().unwrap()))
    })
    .collect()
}

#[test]
fn the_contracts_table_of_operations_is_what_the_functions_route_with_their_scopes() {
    let mut contract = contract_table();
    contract.sort();
    let mut code: Vec<(String, String, String, u16)> = code_operations()
        .into_iter()
        .map(|(method, path, scope)| {
            let op = OPERATIONS.iter().find(|op| op.http_method() == method && op.path == path);
            let op = op.unwrap_or_else(|| panic!("{method} {path}: routed, but not in OPERATIONS"));
            (method.to_string(), path.to_owned(), scope.to_owned(), op.success)
        })
        .collect();
    code.sort();
    assert_eq!(contract, code, "docs/contract.md's table against the functions' resource tables");
    assert_eq!(code.len(), OPERATIONS.len(), "every operation of OPERATIONS is routed");
}

const OPERATIONS: [&Op; 19] = [
    &LIST_ALERTS,
    &MARK_ALERT,
    &GET_PREFERENCES,
    &PUT_PREFERENCES,
    &LIST_WEBHOOKS,
    &CREATE_WEBHOOK,
    &UPDATE_WEBHOOK,
    &DELETE_WEBHOOK,
    &ROTATE_SECRET,
    &LIST_DELIVERIES,
    &RETRY_DELIVERY,
    &PING_WEBHOOK,
    &ENABLE_WEBHOOK,
    &RECOVER_DELIVERIES,
    &REPLAY_DELIVERIES,
    &CANCEL_DELIVERIES,
    &EVENT_TYPES,
    &SIGNING_KEYS,
    &HEALTH,
];

impl Op {
    /// The scope the code asks for (its function's resource table).
    fn scope(&self) -> &'static str {
        let found =
            code_operations().into_iter().find(|(method, path, _)| *method == self.http_method() && *path == self.path);
        found.unwrap_or_else(|| panic!("{}: no function serves it", self.name())).2
    }

    fn name(&self) -> String {
        format!("{} {}", self.method.to_uppercase(), self.path)
    }

    fn http_method(&self) -> Method {
        self.method.to_uppercase().parse().unwrap()
    }

    /// Every success status: the contract's, and any other it answers ([`OTHER_SUCCESSES`]).
    fn successes(&self) -> Vec<u16> {
        let others = OTHER_SUCCESSES.iter().filter(|(path, _)| *path == self.path).map(|(_, status)| *status);
        std::iter::once(self.success).chain(others).collect()
    }

    /// Every error status and its codes, as the contract has them.
    fn contract_errors(&self) -> BTreeMap<u16, BTreeSet<&'static str>> {
        let mut errors: BTreeMap<u16, BTreeSet<&str>> = BTreeMap::new();
        for (status, code) in COMMON_ERRORS {
            errors.entry(*status).or_default().insert(code);
        }
        for (status, codes) in self.errors {
            errors.entry(*status).or_default().extend(codes.iter().copied());
        }
        errors
    }
}

// ------------------------------------------------------------------------------------------
// The document.

/// Where the document is registered for the JSON Schema validator; its `#/components/...`
/// references resolve against it.
const DOC_URI: &str = "urn:career:openapi";

struct Doc {
    root: Value,
    registry: jsonschema::Registry<'static>,
}

/// A place in the document: its JSON pointer and what is there.
struct Node<'a> {
    at: String,
    value: &'a Value,
}

fn doc() -> &'static Doc {
    static DOC: OnceLock<Doc> = OnceLock::new();
    DOC.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.yaml");
        let text = std::fs::read_to_string(&path).expect("openapi.yaml");
        let root: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("openapi.yaml is not valid YAML: {e}"));
        // OpenAPI 3.1 schemas are JSON Schema 2020-12.
        let registry = jsonschema::Registry::new()
            .draft(jsonschema::Draft::Draft202012)
            .add(DOC_URI, root.clone())
            .and_then(|builder| builder.prepare())
            .unwrap_or_else(|e| panic!("openapi.yaml as a JSON Schema resource: {e}"));
        Doc { root, registry }
    })
}

/// `pointer` with one more segment, escaped as RFC 6901 says.
fn child(pointer: &str, segment: &str) -> String {
    format!("{pointer}/{}", segment.replace('~', "~0").replace('/', "~1"))
}

impl Doc {
    /// The node at `pointer`, or a panic naming it.
    fn node(&self, pointer: String) -> Node<'_> {
        let value = self.root.pointer(&pointer).unwrap_or_else(|| panic!("openapi.yaml has nothing at {pointer}"));
        Node { at: pointer, value }
    }

    /// `node`, or what its `$ref` (a Reference Object) points at, followed to the end.
    fn deref<'a>(&'a self, mut node: Node<'a>) -> Node<'a> {
        for _ in 0..16 {
            match node.value.get("$ref").and_then(Value::as_str) {
                Some(reference) => {
                    let pointer =
                        reference.strip_prefix('#').unwrap_or_else(|| panic!("not a local $ref: {reference}"));
                    node = self.node(pointer.to_owned());
                }
                None => return node,
            }
        }
        panic!("a $ref chain that does not end at {}", node.at)
    }

    fn operation(&self, op: &Op) -> Node<'_> {
        let pointer = child(&child("/paths", op.path), op.method);
        assert!(self.root.pointer(&pointer).is_some(), "openapi.yaml has no operation {}", op.name());
        self.node(pointer)
    }

    fn response(&self, op: &Op, status: u16) -> Node<'_> {
        let pointer = child(&format!("{}/responses", self.operation(op).at), &status.to_string());
        assert!(self.root.pointer(&pointer).is_some(), "openapi.yaml documents no {status} for {}", op.name());
        self.deref(self.node(pointer))
    }

    /// The `application/json` media type of a response or request body.
    fn json_media<'a>(&'a self, owner: &Node<'a>) -> Node<'a> {
        let pointer = format!("{}/content/application~1json", owner.at);
        assert!(self.root.pointer(&pointer).is_some(), "no application/json content at {}", owner.at);
        self.node(pointer)
    }

    fn json_schema<'a>(&'a self, owner: &Node<'a>) -> Node<'a> {
        self.node(format!("{}/schema", self.json_media(owner).at))
    }

    /// Whether a response's body is the shared error schema.
    fn is_error(&self, response: &Node<'_>) -> bool {
        self.json_schema(response).value.get("$ref").and_then(Value::as_str) == Some("#/components/schemas/Error")
    }

    /// The error codes an error response documents: one named example per code, the name
    /// being the code its value carries.
    fn error_codes(&self, response: &Node<'_>) -> BTreeSet<String> {
        let media = self.json_media(response);
        let examples = media.value.get("examples").and_then(Value::as_object);
        let examples = examples.unwrap_or_else(|| panic!("{}: no examples naming the error codes", media.at));
        examples
            .iter()
            .map(|(name, example)| {
                let code = example.pointer("/value/error/code").and_then(Value::as_str);
                assert_eq!(code, Some(name.as_str()), "{}: the example {name} carries another code", media.at);
                name.clone()
            })
            .collect()
    }

    /// The response's documented headers, names in lower case, references resolved.
    fn headers<'a>(&'a self, response: &Node<'a>) -> BTreeMap<String, Node<'a>> {
        let names = response.value.get("headers").and_then(Value::as_object).into_iter().flatten();
        names
            .map(|(name, _)| {
                let header = self.deref(self.node(child(&format!("{}/headers", response.at), name)));
                (name.to_ascii_lowercase(), header)
            })
            .collect()
    }

    /// Validates `value` against the schema at `schema` (JSON Schema 2020-12, formats
    /// checked); the problems found, each with its JSON path.
    fn validate(&self, schema: &Node<'_>, value: &Value) -> Vec<String> {
        self.validate_at(&schema.at, value)
    }

    fn validate_at(&self, pointer: &str, value: &Value) -> Vec<String> {
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .with_registry(&self.registry)
            .build(&json!({"$ref": format!("{DOC_URI}#{pointer}")}))
            .unwrap_or_else(|e| panic!("the schema at {pointer}: {e}"));
        validator.iter_errors(value).map(|e| format!("{}: {e}", e.instance_path())).collect()
    }
}

/// Every `$ref` in the document, with where it is.
fn all_refs(value: &Value, at: &str, refs: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                let here = child(at, key);
                if key == "$ref" {
                    refs.push((here.clone(), value.as_str().unwrap_or_else(|| panic!("{here}: not a string")).into()));
                }
                all_refs(value, &here, refs);
            }
        }
        Value::Array(items) => {
            items.iter().enumerate().for_each(|(i, v)| all_refs(v, &child(at, &i.to_string()), refs))
        }
        _ => {}
    }
}

/// Every example of a media type, parameter or header (the objects that hold a `schema`
/// next to `example` or named `examples`), as (pointer of the schema, example).
fn all_examples<'a>(value: &'a Value, at: &str, found: &mut Vec<(String, &'a Value)>) {
    match value {
        Value::Object(map) => {
            if map.contains_key("schema") {
                let schema = child(at, "schema");
                if let Some(example) = map.get("example") {
                    found.push((schema.clone(), example));
                }
                for (name, example) in map.get("examples").and_then(Value::as_object).into_iter().flatten() {
                    let value = example.get("value").unwrap_or_else(|| panic!("{at}: example {name} has no value"));
                    found.push((schema.clone(), value));
                }
            }
            for (key, value) in map {
                all_examples(value, &child(at, key), found);
            }
        }
        Value::Array(items) => {
            items.iter().enumerate().for_each(|(i, v)| all_examples(v, &child(at, &i.to_string()), found))
        }
        _ => {}
    }
}

// ------------------------------------------------------------------------------------------
// The schemas: only keywords that JSON Schema 2020-12 and OpenAPI 3.1 define, since a
// validator ignores a keyword it does not know (a typo such as `minLenght` would check nothing).

const SCHEMA_KEYWORDS: &[&str] = &[
    // core
    "$schema",
    "$id",
    "$ref",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$vocabulary",
    "$comment",
    "$defs",
    // applicators
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "prefixItems",
    "items",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    // validation
    "type",
    "const",
    "enum",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    // annotations, formats and content
    "title",
    "description",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "examples",
    "format",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    // OpenAPI's own
    "discriminator",
    "xml",
    "externalDocs",
    "example",
];

/// Checks the keywords of the schema at `at`, and of every schema inside it.
fn check_schema_keywords(schema: &Value, at: &str, problems: &mut Vec<String>) {
    let Value::Object(map) = schema else { return }; // `true` and `false` are schemas too
    for (keyword, argument) in map {
        let here = child(at, keyword);
        if !SCHEMA_KEYWORDS.contains(&keyword.as_str()) && !keyword.starts_with("x-") {
            problems.push(format!("{here}: `{keyword}` is no JSON Schema or OpenAPI keyword"));
        }
        match keyword.as_str() {
            "properties" | "patternProperties" | "$defs" | "dependentSchemas" => {
                for (name, sub) in argument.as_object().into_iter().flatten() {
                    check_schema_keywords(sub, &child(&here, name), problems);
                }
            }
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                for (i, sub) in argument.as_array().into_iter().flatten().enumerate() {
                    check_schema_keywords(sub, &child(&here, &i.to_string()), problems);
                }
            }
            "not"
            | "if"
            | "then"
            | "else"
            | "items"
            | "contains"
            | "additionalProperties"
            | "propertyNames"
            | "unevaluatedItems"
            | "unevaluatedProperties"
            | "contentSchema" => check_schema_keywords(argument, &here, problems),
            _ => {}
        }
    }
}

#[test]
fn the_schemas_use_only_known_keywords() {
    let doc = doc();
    let mut roots: Vec<(String, &Value)> = Vec::new();
    for (name, schema) in doc.root["components"]["schemas"].as_object().unwrap() {
        roots.push((child("/components/schemas", name), schema));
    }
    let mut examples = Vec::new();
    all_examples(&doc.root, "", &mut examples);
    fn schemas_in<'a>(value: &'a Value, at: &str, found: &mut Vec<(String, &'a Value)>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    let here = child(at, key);
                    // The `schema` of a media type, parameter or header; components.schemas
                    // are walked as roots.
                    if key == "schema" && !at.starts_with("/components/schemas") {
                        found.push((here.clone(), value));
                    }
                    schemas_in(value, &here, found);
                }
            }
            Value::Array(items) => {
                items.iter().enumerate().for_each(|(i, v)| schemas_in(v, &child(at, &i.to_string()), found))
            }
            _ => {}
        }
    }
    schemas_in(&doc.root, "", &mut roots);
    assert!(roots.len() > 40, "schemas found: {}", roots.len());
    let mut problems = Vec::new();
    for (at, schema) in roots {
        check_schema_keywords(schema, &at, &mut problems);
    }
    assert!(problems.is_empty(), "{problems:#?}");

    let mut typo = Vec::new();
    check_schema_keywords(&json!({"properties": {"a": {"type": "string", "minLenght": 1}}}), "", &mut typo);
    assert_eq!(typo, vec!["/properties/a/minLenght: `minLenght` is no JSON Schema or OpenAPI keyword"]);
}

#[test]
fn the_schemas_reject_what_they_should() {
    let doc = doc();
    let alert = json!({"id": "alr_01JDQ3Z7K8M9N0P1Q2R3S4T5V6", "category": "career_health", "severity": "warning",
        "title": "t", "message": "m", "createdAt": "2026-11-21T08:00:00.123Z", "read": false, "readAt": null,
        "dismissed": false, "dismissedAt": null});
    let schema = "/components/schemas/Alert";
    assert_eq!(doc.validate_at(schema, &alert), Vec::<String>::new());
    let broken = [
        ("id", json!("whk_1")),
        ("category", json!("other")),
        ("read", json!("false")),
        ("readAt", json!(3)),
        ("readAt", json!("yesterday")),
        ("createdAt", json!("yesterday")),
        ("createdAt", json!("2026-11-21T08:00:00.123+01:00")),
        ("unexpected", json!(1)),
    ];
    for (field, value) in broken {
        let mut bad = alert.clone();
        bad[field] = value;
        assert!(!doc.validate_at(schema, &bad).is_empty(), "{field} = {}", bad[field]);
    }
    let mut missing = alert.clone();
    missing.as_object_mut().unwrap().remove("dismissedAt");
    assert!(!doc.validate_at(schema, &missing).is_empty());

    let error = "/components/schemas/Error";
    assert!(doc.validate_at(error, &json!({"error": {"code": "c", "message": "m", "requestId": "r"}})).is_empty());
    assert!(!doc.validate_at(error, &json!({"error": {"code": "c", "message": "m"}})).is_empty());
    assert!(!doc.validate_at(error, &json!({"code": "c", "message": "m", "requestId": "r"})).is_empty());

    let created = "/components/schemas/CreatedSubscription";
    let subscription = |secret: &str, events: Value| {
        json!({"id": "whk_1", "url": "https://a.example/x", "events": events,
               "createdAt": "2026-11-21T08:00:00.000Z", "enabled": true, "disabledAt": null,
               "disabledReason": null, "publicKey": null, "previousPublicKey": null, "traceContext": false,
               "maxDeliveriesPerSecond": null, "whileDisabled": "hold", "identityToken": null,
               "secret": secret})
    };
    let secret = format!("whsec_{}=", "a".repeat(43));
    assert!(doc.validate_at(created, &subscription(&secret, json!(["profile.updated"]))).is_empty());
    assert!(!doc.validate_at(created, &subscription("whsec_short", json!(["profile.updated"]))).is_empty());
    let unpadded = format!("whsec_{}", "a".repeat(43));
    assert!(!doc.validate_at(created, &subscription(&unpadded, json!(["profile.updated"]))).is_empty());
    assert!(!doc.validate_at(created, &subscription(&secret, json!([]))).is_empty());
    let twice = json!(["profile.updated", "profile.updated"]);
    assert!(!doc.validate_at(created, &subscription(&secret, twice)).is_empty());
    let mut disabled = subscription(&secret, json!(["profile.updated"]));
    disabled["disabledReason"] = json!("bored");
    assert!(!doc.validate_at(created, &disabled).is_empty());
    let mut limited = subscription(&secret, json!(["profile.updated"]));
    limited["maxDeliveriesPerSecond"] = json!(10_000);
    assert!(doc.validate_at(created, &limited).is_empty());
    for bad in [json!(0), json!(10_001), json!(2.5), json!("2")] {
        limited["maxDeliveriesPerSecond"] = bad;
        assert!(!doc.validate_at(created, &limited).is_empty(), "{}", limited["maxDeliveriesPerSecond"]);
    }
    let mut tokened = subscription(&secret, json!(["profile.updated"]));
    tokened["identityToken"] = json!({"audience": "a".repeat(256)});
    assert!(doc.validate_at(created, &tokened).is_empty());
    for bad in [json!({}), json!({"audience": ""}), json!({"audience": "a".repeat(257)}), json!("aud")] {
        tokened["identityToken"] = bad;
        assert!(!doc.validate_at(created, &tokened).is_empty(), "{}", tokened["identityToken"]);
    }
    tokened["identityToken"] = json!({"audience": "a", "alg": "RS256"});
    assert!(!doc.validate_at(created, &tokened).is_empty(), "audience only");
    let public_key = format!("whpk_{}=", "a".repeat(43));
    let mut keyed = subscription(&secret, json!(["profile.updated"]));
    keyed["publicKey"] = json!(public_key);
    assert!(doc.validate_at(created, &keyed).is_empty());
    for bad in [json!(format!("whsec_{}=", "a".repeat(43))), json!(format!("whpk_{}", "a".repeat(43))), json!(1)] {
        let mut broken = keyed.clone();
        broken["publicKey"] = bad;
        assert!(!doc.validate_at(created, &broken).is_empty(), "{}", broken["publicKey"]);
    }
    keyed.as_object_mut().unwrap().remove("previousPublicKey");
    assert!(!doc.validate_at(created, &keyed).is_empty(), "previousPublicKey is always present");
    let mut untraced = subscription(&secret, json!(["profile.updated"]));
    untraced.as_object_mut().unwrap().remove("traceContext");
    assert!(!doc.validate_at(created, &untraced).is_empty(), "traceContext is always present");
    let keys = "/components/schemas/SigningKeyList";
    let listed = |status: &str, expires: Value| json!({"keys": [{"publicKey": public_key, "status": status, "expiresAt": expires}]});
    assert!(doc.validate_at(keys, &listed("current", Value::Null)).is_empty());
    assert!(doc.validate_at(keys, &listed("previous", json!("2026-11-21T08:00:00.000Z"))).is_empty());
    assert!(!doc.validate_at(keys, &listed("expired", Value::Null)).is_empty());
    assert!(!doc.validate_at(keys, &json!({"keys": []})).is_empty());
    // Kinds are an open set in what the service reports, a closed one in what it accepts.
    assert!(doc.validate_at(created, &subscription(&secret, json!(["profile.deleted"]))).is_empty());
    let create = "/components/schemas/SubscriptionCreate";
    let body = |events: Value| json!({"url": "https://a.example/x", "events": events});
    assert!(doc.validate_at(create, &body(json!(["assessment.completed"]))).is_empty());
    assert!(!doc.validate_at(create, &body(json!(["profile.deleted"]))).is_empty());
    assert!(!doc.validate_at(create, &json!({"url": "x".repeat(2049), "events": ["profile.updated"]})).is_empty());
    let signed = json!({"url": "https://a.example/x", "events": ["profile.updated"], "asymmetricSigning": true});
    assert!(doc.validate_at(create, &signed).is_empty());
    let unsigned = json!({"url": "https://a.example/x", "events": ["profile.updated"], "asymmetricSigning": "yes"});
    assert!(!doc.validate_at(create, &unsigned).is_empty());
    let traced = json!({"url": "https://a.example/x", "events": ["profile.updated"], "traceContext": true});
    assert!(doc.validate_at(create, &traced).is_empty());
    let untraced = json!({"url": "https://a.example/x", "events": ["profile.updated"], "traceContext": null});
    assert!(!doc.validate_at(create, &untraced).is_empty());

    let record = "/components/schemas/DeliveryRecord";
    let pending = json!({"id": "dlv_1", "subscriptionId": "whk_1", "eventId": "evt_1", "eventType": "webhook.ping",
        "createdAt": "2026-11-21T08:00:00.000Z", "status": "pending", "attempts": 0, "lastAttemptAt": null,
        "lastResponseStatus": null, "lastResponseBody": null, "lastError": null, "nextAttemptAt": null,
        "succeededAt": null, "body": "{}"});
    assert_eq!(doc.validate_at(record, &pending), Vec::<String>::new());
    for (field, value) in [("status", json!("done")), ("attempts", json!(-1)), ("lastResponseStatus", json!("500"))] {
        let mut bad = pending.clone();
        bad[field] = value;
        assert!(!doc.validate_at(record, &bad).is_empty(), "{field} = {}", bad[field]);
    }

    let result = "/components/schemas/DeleteResult";
    assert!(!doc.validate_at(result, &json!({"id": "whk_1", "deleted": false})).is_empty());
}

// ------------------------------------------------------------------------------------------
// (a) The document itself.

#[test]
fn the_document_is_openapi_3_1_with_every_ref_resolving() {
    let doc = doc();
    let root = &doc.root;
    assert!(root["openapi"].as_str().is_some_and(|v| v.starts_with("3.1.")), "openapi: {}", root["openapi"]);
    assert!(root["info"]["title"].is_string() && root["info"]["version"].is_string(), "info.title and info.version");
    assert!(root["paths"].is_object() && root["components"]["schemas"].is_object());

    let mut refs = Vec::new();
    all_refs(root, "", &mut refs);
    assert!(refs.len() > 50, "the document uses references ({} found)", refs.len());
    for (at, reference) in &refs {
        assert!(reference.starts_with("#/"), "{at}: only local references are expected: {reference}");
        assert!(root.pointer(&reference[1..]).is_some(), "{at}: $ref {reference} does not resolve");
    }

    let mut examples = Vec::new();
    all_examples(root, "", &mut examples);
    assert!(examples.len() >= 30, "examples found: {}", examples.len());
    for (schema, example) in examples {
        let problems = doc.validate_at(&schema, example);
        assert!(problems.is_empty(), "{schema}: an example does not match this schema: {problems:?}");
    }
}

#[test]
fn the_document_has_exactly_the_contracts_operations_statuses_and_codes() {
    let doc = doc();
    let documented: BTreeSet<(String, String)> = doc.root["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            let methods = item
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| !["parameters", "summary", "description"].contains(&k.as_str()));
            methods.map(move |method| (path.clone(), method.clone()))
        })
        .collect();
    let expected: BTreeSet<(String, String)> =
        OPERATIONS.iter().map(|op| (op.path.to_owned(), op.method.to_owned())).collect();
    assert_eq!(documented, expected, "the contract's operations and no others");

    let mut every_code = BTreeSet::new();
    for op in OPERATIONS {
        let operation = doc.operation(op).value;
        assert_eq!(operation["security"], json!([{"bearerAuth": [op.scope()]}]), "{}: scope", op.name());

        let statuses: BTreeSet<u16> = operation["responses"]
            .as_object()
            .unwrap()
            .keys()
            .map(|s| s.parse().unwrap_or_else(|_| panic!("{}: status {s}", op.name())))
            .collect();
        let contract = op.contract_errors();
        let mut wanted: BTreeSet<u16> = contract.keys().copied().collect();
        wanted.extend(op.successes());
        assert_eq!(statuses, wanted, "{}: the documented statuses", op.name());

        for status in op.successes() {
            let success = doc.response(op, status);
            assert!(!doc.is_error(&success), "{} {status}: the success schema is no error", op.name());
            check_documented_headers(doc, op, status, &success);
        }

        for (status, codes) in &contract {
            let response = doc.response(op, *status);
            assert!(doc.is_error(&response), "{} {status}: the body is the shared Error schema", op.name());
            let documented = doc.error_codes(&response);
            let codes: BTreeSet<String> = codes.iter().map(|c| c.to_string()).collect();
            assert_eq!(documented, codes, "{} {status}: the error codes", op.name());
            every_code.extend(documented);
            check_documented_headers(doc, op, *status, &response);
        }
    }
    for code in &every_code {
        assert!(CONTRACT_CODES.contains(&code.as_str()), "{code} is not a code of the contract");
    }
}

/// The headers a response must document: X-Request-Id always; the RateLimit-* headers
/// wherever the request has passed the rate-limit check (every status but 401, 403 and
/// 500); WWW-Authenticate on 401 and 403; Retry-After on 429.
fn check_documented_headers(doc: &Doc, op: &Op, status: u16, response: &Node<'_>) {
    let headers = doc.headers(response);
    let required = |name: &str| headers.get(name).is_some_and(|h| h.value["required"] == true);
    let mut expected = vec!["x-request-id"];
    if ![401, 403, 500].contains(&status) {
        expected.extend(["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"]);
    }
    match status {
        401 | 403 => expected.push("www-authenticate"),
        429 => expected.push("retry-after"),
        _ => {}
    }
    for name in expected {
        assert!(required(name), "{} {status}: the required header {name} is not documented", op.name());
    }
    for (name, header) in &headers {
        assert!(header.value.get("schema").is_some(), "{} {status}: header {name} has no schema", op.name());
    }
}

// ------------------------------------------------------------------------------------------
// (b) The handlers' answers.

/// Validates answers of one operation and remembers which statuses and codes it saw.
struct Checker {
    op: &'static Op,
    seen: BTreeSet<(u16, Option<String>)>,
}

impl Checker {
    fn new(op: &'static Op) -> Self {
        Checker { op, seen: BTreeSet::new() }
    }

    /// Checks an answer against the document and, for an error, that it is `code`.
    #[track_caller]
    fn check(&mut self, answer: &Answer, status: u16, code: Option<&str>) {
        let (doc, op) = (doc(), self.op);
        let what = format!("{} answered {} {}", op.name(), answer.status, answer.json);
        assert_eq!(answer.status.as_u16(), status, "{what}");
        match code {
            Some(code) => answer.assert_error(status, code),
            None => assert!(answer.json.get("error").is_none(), "{what}"),
        }
        let response = doc.response(op, status);
        assert_eq!(answer.header("content-type"), Some("application/json"), "{what}");
        let problems = doc.validate(&doc.json_schema(&response), &answer.json);
        assert!(problems.is_empty(), "{what}: the body does not match openapi.yaml: {problems:#?}");
        if let Some(code) = code {
            assert!(doc.error_codes(&response).contains(code), "{what}: {code} is not documented for {status}");
        }

        for (name, header) in doc.headers(&response) {
            let value = answer.header(&name);
            if header.value["required"] == true {
                assert!(value.is_some(), "{what}: no {name} header; headers: {:?}", answer.headers);
            }
            if let Some(value) = value {
                let schema = doc.deref(doc.node(format!("{}/schema", header.at)));
                let typed = match schema.value["type"].as_str() {
                    Some("integer") => value.parse::<i64>().map(Value::from).unwrap_or_else(|_| json!(value)),
                    _ => json!(value),
                };
                let problems = doc.validate(&schema, &typed);
                assert!(problems.is_empty(), "{what}: header {name}: {value:?}: {problems:?}");
            }
        }
        if status == 403 {
            let expected = format!(r#"scope="{}""#, op.scope());
            assert!(answer.header("www-authenticate").is_some_and(|h| h.ends_with(&expected)), "{what}");
        }
        self.seen.insert((status, code.map(String::from)));
    }

    /// Every status and code the document lists for the operation was produced and checked.
    fn assert_complete(&self) {
        let (doc, op) = (doc(), self.op);
        let mut documented = BTreeSet::new();
        for status in doc.operation(op).value["responses"].as_object().unwrap().keys() {
            let status: u16 = status.parse().unwrap();
            let response = doc.response(op, status);
            if doc.is_error(&response) {
                documented.extend(doc.error_codes(&response).into_iter().map(|c| (status, Some(c))));
            } else {
                documented.insert((status, None));
            }
        }
        let missing: Vec<_> = documented.difference(&self.seen).collect();
        assert!(missing.is_empty(), "{}: documented but never produced: {missing:?}", op.name());
    }
}

/// A body just over the contract's 64 KiB.
fn oversized_body() -> Vec<u8> {
    let mut body = br#"{"padding":""#.to_vec();
    body.resize(64 * 1024 + 1, b'x');
    body.extend_from_slice(br#""}"#);
    body
}

/// The answers every operation shares: 401, 403, 413, 429 and 500. `valid` sends a request
/// that succeeds for the given key and Api (whose webhook URLs may be loopback ones); `breaks_storage` names the operation's table
/// (by renaming it, [`missing_table`]) so that deleting it makes the operation fail unexpectedly.
async fn common_errors(
    checker: &mut Checker,
    valid: &RequestSpec,
    breaks_storage: fn(&mut career_core::config::Settings),
) {
    let op = checker.op;
    let api = Api::loopback();
    let user = unique_user();

    // 401: no header, another scheme, a malformed key, an unknown key.
    let unknown = format!("cak_{}", "A".repeat(43));
    for authorization in
        [None, Some("Basic dXNlcjpwYXNz".to_owned()), Some("Bearer nope".into()), Some(format!("Bearer {unknown}"))]
    {
        let mut request = api.request(op.http_method(), &valid.path);
        if let Some(value) = &authorization {
            request = request.header("authorization", value);
        }
        if let Some(body) = &valid.body {
            request = request.json(body);
        }
        checker.check(&request.send().await, 401, Some("auth.unauthorized"));
    }

    // 403: every scope but the operation's.
    let others: Vec<_> = Scopes::all().names().into_iter().filter(|s| *s != op.scope()).collect();
    let key = api.key(&user, &others.join(",")).await;
    checker.check(&valid.send(&api, &key).await, 403, Some("auth.forbidden"));

    // 413, before anything looks at the query or the body.
    let key = api.key(&user, op.scope()).await;
    let big = api.request(op.http_method(), &valid.path).key(&key).header("content-type", "application/json");
    checker.check(&big.body(&oversized_body()).send().await, 413, Some("request.body_too_large"));

    // 429: one request a minute, so the second is refused (a few tries spare the sequence).
    let limited = Api::with_settings(|s| {
        s.webhook_urls = career_core::webhooks::UrlPolicy::local_stack();
        s.rate_limit_per_minute = 1;
    });
    let key = limited.key(&user, op.scope()).await;
    let mut answer = valid.send(&limited, &key).await;
    for _ in 0..3 {
        if answer.status.as_u16() == 429 {
            break;
        }
        answer = valid.send(&limited, &key).await;
    }
    checker.check(&answer, 429, Some("rate_limited"));
    let retry_after: u64 = answer.header("retry-after").unwrap().parse().unwrap();
    // The window counts the last 60 to 65 seconds.
    assert!((1..=65).contains(&retry_after), "Retry-After {retry_after}");

    // 500: the operation's table is missing. The functions name their tables as the template
    // gives them, so it is deleted from a stack of the test's own.
    let stack = career_service::pipeline::Pipeline::start(false).await;
    let mut settings = stack.settings().clone();
    settings.webhook_urls = career_core::webhooks::UrlPolicy::local_stack();
    let mut named = settings.clone();
    breaks_storage(&mut named);
    for ((_, table), (_, marked)) in settings.tables.all().into_iter().zip(named.tables.all()) {
        if table != marked {
            career_service::dynamodb().delete_table().table_name(table).send().await.expect("the table deleted");
        }
    }
    let broken = Api::on(career_service::clients(), settings);
    let key = broken.key(&user, op.scope()).await;
    let answer = valid.send(&broken, &key).await;
    checker.check(&answer, 500, Some("internal_error"));
    assert_eq!(answer.json["error"]["message"], "Internal error.", "no internals in the message");
}

/// A request of the operation: path with query, and an optional JSON body.
struct RequestSpec {
    method: Method,
    path: String,
    body: Option<String>,
}

impl RequestSpec {
    fn new(op: &Op, path: impl Into<String>, body: Option<&str>) -> Self {
        RequestSpec { method: op.http_method(), path: path.into(), body: body.map(String::from) }
    }

    async fn send(&self, api: &Api, key: &str) -> Answer {
        let request = api.request(self.method.clone(), &self.path).key(key);
        match &self.body {
            Some(body) => request.json(body).send().await,
            None => request.send().await,
        }
    }
}

/// Disables the subscription `id` of `user` as five days of failures would: its failure clock
/// started on November 1st, the subscription disabled on November 6th.
async fn disable_for_failing(api: &Api, user: &str, id: &str) {
    let webhooks =
        career_core::store::webhooks::WebhookTable::new(career_service::dynamodb(), &api.settings.tables.webhooks);
    let (user, id, since) = (typed(user), typed(id), typed("2026-11-01T00:00:00.000Z"));
    webhooks.start_failure_clock(&user, &id, &career_service::failed_attempt(since)).await.unwrap();
    let disabled_at = typed("2026-11-06T00:00:00.000Z");
    webhooks.disable(&user, &id, (DisabledReason::Failing, Some(since)), None, disabled_at).await.unwrap();
}

/// Marks the table `name` as the one [`common_errors`] deletes.
fn missing_table(name: &mut String) {
    *name = format!("career-missing-{}", &unique_user()[5..]);
}

#[tokio::test]
async fn list_alerts_answers_as_documented() {
    let mut checker = Checker::new(&LIST_ALERTS);
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    // An empty list, then one with a read alert (readAt set) and a next page.
    checker.check(&api.get("/api/v1/alerts", &key).await, 200, None);
    let first = api.alert(&user, "first").await;
    api.alert(&user, "second").await;
    let path = format!("/api/v1/alerts?id={first}");
    api.send_json(Method::PATCH, &path, &key, r#"{"action": "read"}"#).await.assert_status(200);
    let page = api.get("/api/v1/alerts?includeRead=true&limit=1", &key).await;
    checker.check(&page, 200, None);
    let cursor = page.json["nextCursor"].as_str().expect("a next page").to_owned();
    let next = api.get(&format!("/api/v1/alerts?includeRead=true&limit=1&cursor={cursor}"), &key).await;
    checker.check(&next, 200, None);
    assert_eq!(next.json["alerts"][0]["id"], first.as_str());
    assert!(next.json["alerts"][0]["readAt"].is_string());

    let bad = api.get("/api/v1/alerts?cursor=not-a-cursor", &key).await;
    checker.check(&bad, 400, Some("request.invalid_cursor"));

    let valid = RequestSpec::new(&LIST_ALERTS, "/api/v1/alerts?includeRead=true", None);
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.alerts)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn mark_alert_answers_as_documented() {
    let mut checker = Checker::new(&MARK_ALERT);
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let id = api.alert(&user, "to mark").await;
    let path = format!("/api/v1/alerts?id={id}");
    for action in ["read", "dismiss", "unread", "undismiss"] {
        let body = json!({"action": action}).to_string();
        checker.check(&api.send_json(Method::PATCH, &path, &key, &body).await, 200, None);
    }
    let read = api.send_json(Method::PATCH, &path, &key, r#"{"action": "read"}"#).await;
    checker.check(&read, 200, None);
    assert!(read.json["readAt"].is_string());

    let body = r#"{"action": "read"}"#;
    for missing in ["/api/v1/alerts", "/api/v1/alerts?id="] {
        checker.check(&api.send_json(Method::PATCH, missing, &key, body).await, 400, Some("alerts.missing_id"));
    }
    let text = api.request(Method::PATCH, &path).key(&key).header("content-type", "text/plain").body(body.as_bytes());
    checker.check(&text.send().await, 400, Some("request.unsupported_media_type"));
    for not_json in ["{", "[]", ""] {
        let answer = api.send_json(Method::PATCH, &path, &key, not_json).await;
        checker.check(&answer, 400, Some("request.invalid_json"));
    }
    for action in [r#"{"action": "archive"}"#, "{}", r#"{"action": null}"#] {
        checker.check(&api.send_json(Method::PATCH, &path, &key, action).await, 400, Some("alerts.invalid_action"));
    }
    let unknown = career_core::ids::new_id(career_core::ids::ALERT);
    for id in [unknown.as_str(), "alr_nonsense"] {
        let answer = api.send_json(Method::PATCH, &format!("/api/v1/alerts?id={id}"), &key, body).await;
        checker.check(&answer, 404, Some("alerts.not_found"));
    }
    let someone_elses = api.alert(&unique_user(), "not yours").await;
    let answer = api.send_json(Method::PATCH, &format!("/api/v1/alerts?id={someone_elses}"), &key, body).await;
    checker.check(&answer, 404, Some("alerts.not_found"));

    let valid = RequestSpec::new(&MARK_ALERT, path, Some(body));
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.alerts)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn get_preferences_answers_as_documented() {
    let mut checker = Checker::new(&GET_PREFERENCES);
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let fresh = api.get("/api/v1/data-sharing", &key).await;
    checker.check(&fresh, 200, None);
    assert_eq!(fresh.json["updatedAt"], Value::Null);
    api.send_json(Method::PUT, "/api/v1/data-sharing", &key, r#"{"shareProfileData": true}"#).await.assert_status(200);
    let updated = api.get("/api/v1/data-sharing", &key).await;
    checker.check(&updated, 200, None);
    assert!(updated.json["updatedAt"].is_string());

    let valid = RequestSpec::new(&GET_PREFERENCES, "/api/v1/data-sharing", None);
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.preferences)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn put_preferences_answers_as_documented() {
    let mut checker = Checker::new(&PUT_PREFERENCES);
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let path = "/api/v1/data-sharing";
    let all = r#"{"shareAssessmentResults": true, "shareProfileData": false, "shareActivityData": true}"#;
    for body in [r#"{"shareAssessmentResults": true}"#, all] {
        checker.check(&api.send_json(Method::PUT, path, &key, body).await, 200, None);
    }
    let body = r#"{"shareAssessmentResults": true}"#;
    let text = api.request(Method::PUT, path).key(&key).header("content-type", "text/plain").body(body.as_bytes());
    checker.check(&text.send().await, 400, Some("request.unsupported_media_type"));
    for not_json in ["{", "nope", ""] {
        checker.check(&api.send_json(Method::PUT, path, &key, not_json).await, 400, Some("request.invalid_json"));
    }
    let cases = [
        ("{}", "data_sharing.no_preferences_provided"),
        ("[]", "data_sharing.no_preferences_provided"),
        ("null", "data_sharing.no_preferences_provided"),
        (r#"{"somethingElse": true}"#, "data_sharing.no_preferences_provided"),
        (r#"{"shareAssessmentResults": "yes"}"#, "data_sharing.no_preferences_provided"),
        (r#"{"shareAssessmentResults": true, "shareProfileData": 1}"#, "data_sharing.invalid_preference"),
        (r#"{"shareAssessmentResults": true, "somethingElse": true}"#, "data_sharing.unknown_preference"),
    ];
    for (body, code) in cases {
        checker.check(&api.send_json(Method::PUT, path, &key, body).await, 400, Some(code));
    }

    let valid = RequestSpec::new(&PUT_PREFERENCES, path, Some(body));
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.preferences)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn list_webhooks_answers_as_documented() {
    let mut checker = Checker::new(&LIST_WEBHOOKS);
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    checker.check(&api.get("/api/v1/webhooks", &key).await, 200, None);
    let body = json!({"url": sink_url(), "events": ["profile.updated", "assessment.completed"]}).to_string();
    api.send_json(Method::POST, "/api/v1/webhooks", &key, &body).await.assert_status(201);
    let listed = api.get("/api/v1/webhooks", &key).await;
    checker.check(&listed, 200, None);
    assert_eq!(listed.json["webhooks"].as_array().map(Vec::len), Some(1));

    let valid = RequestSpec::new(&LIST_WEBHOOKS, "/api/v1/webhooks", None);
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn create_webhook_answers_as_documented() {
    let mut checker = Checker::new(&CREATE_WEBHOOK);
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let path = "/api/v1/webhooks";
    let body = &json!({"url": sink_url(), "events": ["profile.updated", "profile.updated"]}).to_string();
    checker.check(&api.send_json(Method::POST, path, &key, body).await, 201, None);
    let keyed = json!({"url": sink_url(), "events": ["profile.updated"], "asymmetricSigning": true}).to_string();
    let answer = api.send_json(Method::POST, path, &key, &keyed).await;
    checker.check(&answer, 201, None);
    assert!(answer.json["publicKey"].as_str().is_some_and(|key| key.starts_with("whpk_")), "{}", answer.json);
    let traced = json!({"url": sink_url(), "events": ["profile.updated"], "traceContext": true}).to_string();
    let answer = api.send_json(Method::POST, path, &key, &traced).await;
    checker.check(&answer, 201, None);
    assert_eq!(answer.json["traceContext"], true);
    let tokened = json!({"url": sink_url(), "events": ["profile.updated"], "identityToken": {"audience": "api://r"}});
    let answer = api.send_json(Method::POST, path, &key, &tokened.to_string()).await;
    checker.check(&answer, 201, None);
    assert_eq!(answer.json["identityToken"], json!({"audience": "api://r"}));
    for destination in [
        json!({"type": "aws_sqs", "queueUrl": EMULATOR_QUEUE, "roleArn": RECEIVER_ROLE}),
        json!({"type": "aws_eventbridge", "eventBusArn": RECEIVER_BUS, "roleArn": RECEIVER_ROLE}),
        json!({"type": "aws_eventbus", "eventBusArn": RECEIVER_BUS_V2, "roleArn": RECEIVER_ROLE}),
    ] {
        let body = json!({"destination": destination, "events": ["profile.updated"]}).to_string();
        let answer = api.send_json(Method::POST, path, &key, &body).await;
        checker.check(&answer, 201, None);
        assert_eq!(answer.json["url"], Value::Null, "{}", answer.json);
    }

    let text = api.request(Method::POST, path).key(&key).header("content-type", "text/plain").body(body.as_bytes());
    checker.check(&text.send().await, 400, Some("request.unsupported_media_type"));
    for not_json in ["{", "[1]", "\"text\"", ""] {
        checker.check(&api.send_json(Method::POST, path, &key, not_json).await, 400, Some("request.invalid_json"));
    }
    let cases = [
        (r#"{"url": "https://hooks.example.com/a"}"#, "webhooks.missing_required_fields"),
        (r#"{"url": null, "events": ["profile.updated"]}"#, "webhooks.missing_required_fields"),
        (r#"{"url": "http://hooks.example.com/a", "events": ["profile.updated"]}"#, "webhooks.invalid_url"),
        (r#"{"url": "https://169.254.169.254/", "events": ["profile.updated"]}"#, "webhooks.invalid_url"),
        (r#"{"url": 7, "events": ["profile.updated"]}"#, "webhooks.invalid_url"),
        (
            r#"{"url": "https://hooks.example.com/a", "destination": {"type": "aws_sqs"}, "events": ["profile.updated"]}"#,
            "webhooks.invalid_destination",
        ),
        (
            r#"{"destination": {"type": "aws_sns", "roleArn": "arn:aws:iam::210987654321:role/r"}, "events": []}"#,
            "webhooks.invalid_destination",
        ),
        (r#"{"url": "https://hooks.example.com/a", "events": []}"#, "webhooks.invalid_events"),
        (r#"{"url": "https://hooks.example.com/a", "events": ["profile.deleted"]}"#, "webhooks.invalid_events"),
        (
            r#"{"url": "https://hooks.example.com/a", "events": ["profile.updated"], "asymmetricSigning": "yes"}"#,
            "webhooks.invalid_asymmetric_signing",
        ),
        (
            r#"{"url": "https://hooks.example.com/a", "events": ["profile.updated"], "traceContext": "yes"}"#,
            "webhooks.invalid_trace_context",
        ),
        (
            r#"{"url": "https://hooks.example.com/a", "events": ["profile.updated"], "maxDeliveriesPerSecond": 0}"#,
            "webhooks.invalid_rate_limit",
        ),
        (
            r#"{"url": "https://hooks.example.com/a", "events": ["profile.updated"], "whileDisabled": "drop"}"#,
            "webhooks.invalid_while_disabled",
        ),
        (
            r#"{"url": "https://hooks.example.com/a", "events": ["profile.updated"], "identityToken": {}}"#,
            "webhooks.invalid_identity_token",
        ),
    ];
    // Refused under the production setting, so they create nothing.
    let strict = Api::new();
    for (body, code) in cases {
        checker.check(&strict.send_json(Method::POST, path, &key, body).await, 400, Some(code));
    }
    let crowded = unique_user();
    let crowded_key = api.key(&crowded, "write:webhooks").await;
    let mut statuses = Vec::new();
    for _ in 0..25 {
        statuses.push(api.send_json(Method::POST, path, &crowded_key, body).await.status.as_u16());
    }
    assert_eq!(statuses, vec![201; 25]);
    let answer = api.send_json(Method::POST, path, &crowded_key, body).await;
    checker.check(&answer, 400, Some("webhooks.limit_exceeded"));

    let valid = RequestSpec::new(&CREATE_WEBHOOK, path, Some(body));
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

/// A queue of the local SQS emulator, the role and a bus in the receiver's account (contract
/// section 17): what the local stack's settings take.
const EMULATOR_QUEUE: &str = "http://127.0.0.1:9/210987654321/receiver.fifo";
const RECEIVER_ROLE: &str = "arn:aws:iam::210987654321:role/career-webhooks-sender";
const RECEIVER_BUS: &str = "arn:aws:events:us-east-1:210987654321:event-bus/receiver";
const RECEIVER_BUS_V2: &str = "arn:aws:events:us-east-1:210987654321:event-busv2/receiver/abcdefghij0123456789abcde";

/// Creates a subscription for the owner of `key` and returns its id.
async fn create_subscription(api: &Api, key: &str) -> String {
    let body = json!({"url": sink_url(), "events": ["profile.updated"]}).to_string();
    let created = api.send_json(Method::POST, "/api/v1/webhooks", key, &body).await;
    created.assert_status(201)["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn delete_webhook_answers_as_documented() {
    let mut checker = Checker::new(&DELETE_WEBHOOK);
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let id = create_subscription(&api, &key).await;
    let path = format!("/api/v1/webhooks?id={id}");
    checker.check(&api.request(Method::DELETE, &path).key(&key).send().await, 200, None);

    for missing in ["/api/v1/webhooks", "/api/v1/webhooks?id="] {
        let answer = api.request(Method::DELETE, missing).key(&key).send().await;
        checker.check(&answer, 400, Some("webhooks.missing_subscription_id"));
    }
    let someone_elses = create_subscription(&api, &api.full_key(&unique_user()).await).await;
    for id in [id.as_str(), "whk_nonsense", someone_elses.as_str()] {
        let answer = api.request(Method::DELETE, &format!("/api/v1/webhooks?id={id}")).key(&key).send().await;
        checker.check(&answer, 404, Some("webhooks.not_found"));
    }

    // A well-formed id, so that the 500 request reaches the table.
    let id = create_subscription(&api, &key).await;
    let valid = RequestSpec::new(&DELETE_WEBHOOK, format!("/api/v1/webhooks?id={id}"), None);
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn rotate_secret_answers_as_documented() {
    let mut checker = Checker::new(&ROTATE_SECRET);
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let id = create_subscription(&api, &key).await;
    let path = format!("/api/v1/webhooks/rotate-secret?id={id}");
    checker.check(&api.request(Method::POST, &path).key(&key).send().await, 200, None);
    for body in [r#"{"gracePeriodSeconds": 0}"#, r#"{"gracePeriodSeconds": 604800}"#, "{}"] {
        checker.check(&api.send_json(Method::POST, &path, &key, body).await, 200, None);
    }

    for missing in ["/api/v1/webhooks/rotate-secret", "/api/v1/webhooks/rotate-secret?id="] {
        let answer = api.send_json(Method::POST, missing, &key, "{}").await;
        checker.check(&answer, 400, Some("webhooks.missing_subscription_id"));
    }
    let text = api.request(Method::POST, &path).key(&key).header("content-type", "text/plain").body(b"{}");
    checker.check(&text.send().await, 400, Some("request.unsupported_media_type"));
    for not_json in ["{", "[]", "60"] {
        checker.check(&api.send_json(Method::POST, &path, &key, not_json).await, 400, Some("request.invalid_json"));
    }
    for grace in ["-1", "604801", "1.5", "\"60\"", "true"] {
        let body = format!(r#"{{"gracePeriodSeconds": {grace}}}"#);
        let answer = api.send_json(Method::POST, &path, &key, &body).await;
        checker.check(&answer, 400, Some("webhooks.invalid_grace_period"));
    }
    let someone_elses = create_subscription(&api, &api.full_key(&unique_user()).await).await;
    for id in [career_core::ids::new_id(career_core::ids::SUBSCRIPTION), "whk_nonsense".into(), someone_elses] {
        let answer = api.send_json(Method::POST, &format!("/api/v1/webhooks/rotate-secret?id={id}"), &key, "{}").await;
        checker.check(&answer, 404, Some("webhooks.not_found"));
    }

    let valid = RequestSpec::new(&ROTATE_SECRET, path, Some("{}"));
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

/// A subscription of a fresh user with a key of all scopes: `(user, key, subscription id)`.
async fn subscribed(api: &Api) -> (String, String, String) {
    let user = unique_user();
    let key = api.full_key(&user).await;
    let id = create_subscription(api, &key).await;
    (user, key, id)
}

/// A delivery of the subscription with one failed attempt in the log; its id.
async fn failed_once(api: &Api, user: &str, subscription: &str) -> String {
    use career_core::delivery::attempt::{Answer as Received, Outcome};
    use career_core::delivery::log::AttemptRecord;
    let event = career_core::events::Event::ping(&typed(subscription));
    let message = DeliveryMessage::new(&event, &typed(user), &typed(subscription));
    let outcome = Outcome::Rejected(Received { status: 503, body: "down for maintenance".into(), retry_after: None });
    let now = career_core::clock::Timestamp::now();
    let attempt = AttemptRecord::failed(&outcome, Some(now + std::time::Duration::from_secs(30)), now);
    let table =
        career_core::store::deliveries::DeliveryTable::new(career_service::dynamodb(), &api.settings.tables.deliveries);
    table.record_attempt(&message, &message.body(), &attempt, None).await.unwrap();
    message.delivery_id.to_string()
}

#[tokio::test]
async fn list_deliveries_answers_as_documented() {
    let mut checker = Checker::new(&LIST_DELIVERIES);
    let api = Api::loopback();
    let (user, key, id) = subscribed(&api).await;
    let path = format!("/api/v1/webhooks/deliveries?id={id}");
    checker.check(&api.get(&path, &key).await, 200, None);
    failed_once(&api, &user, &id).await;
    let ping = api.request(Method::POST, &format!("/api/v1/webhooks/ping?id={id}")).key(&key).send().await;
    ping.assert_status(202);
    let page = api.get(&format!("{path}&limit=1"), &key).await;
    checker.check(&page, 200, None);
    let cursor = page.json["nextCursor"].as_str().expect("a next page").to_owned();
    let next = api.get(&format!("{path}&limit=1&cursor={cursor}"), &key).await;
    checker.check(&next, 200, None);
    assert_eq!(next.json["deliveries"][0]["lastResponseStatus"], 503);
    checker.check(&api.get(&format!("{path}&status=pending"), &key).await, 200, None);

    for missing in ["/api/v1/webhooks/deliveries", "/api/v1/webhooks/deliveries?id="] {
        checker.check(&api.get(missing, &key).await, 400, Some("webhooks.missing_subscription_id"));
    }
    checker.check(&api.get(&format!("{path}&status=done"), &key).await, 400, Some("webhooks.invalid_status"));
    checker.check(&api.get(&format!("{path}&cursor=nope"), &key).await, 400, Some("request.invalid_cursor"));
    let foreign = subscribed(&api).await.2;
    let unknown = career_core::ids::new_id(career_core::ids::SUBSCRIPTION);
    for id in [foreign.as_str(), unknown.as_str(), "whk_nonsense"] {
        let answer = api.get(&format!("/api/v1/webhooks/deliveries?id={id}"), &key).await;
        checker.check(&answer, 404, Some("webhooks.not_found"));
    }

    let valid = RequestSpec::new(&LIST_DELIVERIES, path, None);
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn retry_delivery_answers_as_documented() {
    let mut checker = Checker::new(&RETRY_DELIVERY);
    let api = Api::loopback();
    let (user, key, id) = subscribed(&api).await;
    let delivery = failed_once(&api, &user, &id).await;
    let path = format!("/api/v1/webhooks/deliveries/retry?id={delivery}");
    let answer = api.request(Method::POST, &path).key(&key).send().await;
    checker.check(&answer, 202, None);
    assert_eq!(answer.json["status"], "pending");

    for missing in ["/api/v1/webhooks/deliveries/retry", "/api/v1/webhooks/deliveries/retry?id="] {
        let answer = api.request(Method::POST, missing).key(&key).send().await;
        checker.check(&answer, 400, Some("webhooks.missing_delivery_id"));
    }
    let (other_user, _, other_id) = subscribed(&api).await;
    let foreign = failed_once(&api, &other_user, &other_id).await;
    let unknown = career_core::ids::new_id(career_core::ids::DELIVERY);
    for id in [foreign.as_str(), unknown.as_str(), "dlv_nonsense"] {
        let answer = api.request(Method::POST, &format!("/api/v1/webhooks/deliveries/retry?id={id}")).key(&key).send();
        checker.check(&answer.await, 404, Some("webhooks.delivery_not_found"));
    }

    let valid = RequestSpec::new(&RETRY_DELIVERY, path, None);
    // A retry first reads the user's subscriptions, whose logs may hold the delivery.
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn ping_webhook_answers_as_documented() {
    let mut checker = Checker::new(&PING_WEBHOOK);
    let api = Api::loopback();
    let (user, key, id) = subscribed(&api).await;
    let path = format!("/api/v1/webhooks/ping?id={id}");
    let answer = api.request(Method::POST, &path).key(&key).send().await;
    checker.check(&answer, 202, None);
    assert_eq!(answer.json["status"], "pending");
    disable_for_failing(&api, &user, &id).await;
    let skipped = api.request(Method::POST, &path).key(&key).send().await;
    checker.check(&skipped, 202, None);
    assert_eq!(skipped.json["status"], "skipped");

    for missing in ["/api/v1/webhooks/ping", "/api/v1/webhooks/ping?id="] {
        let answer = api.request(Method::POST, missing).key(&key).send().await;
        checker.check(&answer, 400, Some("webhooks.missing_subscription_id"));
    }
    let foreign = subscribed(&api).await.2;
    for id in [foreign.as_str(), "whk_nonsense"] {
        let answer = api.request(Method::POST, &format!("/api/v1/webhooks/ping?id={id}")).key(&key).send().await;
        checker.check(&answer, 404, Some("webhooks.not_found"));
    }

    let valid = RequestSpec::new(&PING_WEBHOOK, path, None);
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn enable_webhook_answers_as_documented() {
    let mut checker = Checker::new(&ENABLE_WEBHOOK);
    let api = Api::loopback();
    let (user, key, id) = subscribed(&api).await;
    disable_for_failing(&api, &user, &id).await;
    let listed = api.get("/api/v1/webhooks", &key).await;
    assert_eq!(listed.json["webhooks"][0]["enabled"], false);
    let problems = doc().validate(&doc().json_schema(&doc().response(&LIST_WEBHOOKS, 200)), &listed.json);
    assert!(problems.is_empty(), "a disabled subscription as listed: {problems:?}");
    let path = format!("/api/v1/webhooks/enable?id={id}");
    let answer = api.request(Method::POST, &path).key(&key).send().await;
    checker.check(&answer, 200, None);
    assert_eq!((&answer.json["enabled"], &answer.json["released"]), (&json!(true), &json!(0)));

    for missing in ["/api/v1/webhooks/enable", "/api/v1/webhooks/enable?id="] {
        let answer = api.request(Method::POST, missing).key(&key).send().await;
        checker.check(&answer, 400, Some("webhooks.missing_subscription_id"));
    }
    let foreign = subscribed(&api).await.2;
    for id in [foreign.as_str(), "whk_nonsense"] {
        let answer = api.request(Method::POST, &format!("/api/v1/webhooks/enable?id={id}")).key(&key).send().await;
        checker.check(&answer, 404, Some("webhooks.not_found"));
    }

    let valid = RequestSpec::new(&ENABLE_WEBHOOK, path, None);
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn recover_deliveries_answers_as_documented() {
    let mut checker = Checker::new(&RECOVER_DELIVERIES);
    let api = Api::loopback();
    let (user, key, id) = subscribed(&api).await;
    let path = format!("/api/v1/webhooks/recover?id={id}");
    let hour_ago = career_core::clock::Timestamp::now() - std::time::Duration::from_secs(3600);
    let window = json!({"since": hour_ago}).to_string();
    let answer = api.send_json(Method::POST, &path, &key, &window).await;
    checker.check(&answer, 202, None);
    assert_eq!(answer.json, json!({"recovering": 0, "more": false}));

    for missing in ["/api/v1/webhooks/recover", "/api/v1/webhooks/recover?id="] {
        let answer = api.send_json(Method::POST, missing, &key, &window).await;
        checker.check(&answer, 400, Some("webhooks.missing_subscription_id"));
    }
    let text = api.request(Method::POST, &path).key(&key).header("content-type", "text/plain").body(b"{}");
    checker.check(&text.send().await, 400, Some("request.unsupported_media_type"));
    for not_json in ["{", "[]", "60"] {
        checker.check(&api.send_json(Method::POST, &path, &key, not_json).await, 400, Some("request.invalid_json"));
    }
    let in_a_year = "2027-11-23T00:00:00Z";
    for bad in [
        json!({}),
        json!({"since": "yesterday"}),
        json!({"since": hour_ago, "until": 5}),
        json!({"since": in_a_year}),
        json!({"since": "2026-01-01T00:00:00Z", "until": "2026-01-02T00:00:00Z"}),
    ] {
        let answer = api.send_json(Method::POST, &path, &key, &bad.to_string()).await;
        checker.check(&answer, 400, Some("webhooks.invalid_recover_window"));
    }
    let someone_elses = subscribed(&api).await.2;
    for other in [someone_elses.as_str(), "whk_nonsense"] {
        let answer = api.send_json(Method::POST, &format!("/api/v1/webhooks/recover?id={other}"), &key, &window).await;
        checker.check(&answer, 404, Some("webhooks.not_found"));
    }
    let webhooks =
        career_core::store::webhooks::WebhookTable::new(career_service::dynamodb(), &api.settings.tables.webhooks);
    let at = typed("2026-11-06T00:00:00.000Z");
    webhooks.disable(&typed(&user), &typed(&id), (DisabledReason::Manual, None), None, at).await.unwrap();
    let disabled = api.send_json(Method::POST, &path, &key, &window).await;
    checker.check(&disabled, 400, Some("webhooks.subscription_disabled"));
    webhooks.enable(&typed(&user), &typed(&id)).await.unwrap();

    let valid = RequestSpec::new(&RECOVER_DELIVERIES, path, Some(&window));
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn replay_deliveries_answers_as_documented() {
    let mut checker = Checker::new(&REPLAY_DELIVERIES);
    let api = Api::loopback();
    let (user, key, id) = subscribed(&api).await;
    failed_once(&api, &user, &id).await;
    let path = "/api/v1/webhooks/replay";
    let hour_ago = career_core::clock::Timestamp::now() - std::time::Duration::from_secs(3600);
    let dry = json!({"since": hour_ago, "status": ["pending"], "dryRun": true});
    let refused = api.send_json(Method::POST, path, &key, &dry.to_string()).await;
    checker.check(&refused, 400, Some("webhooks.invalid_replay"));
    let dry = json!({"since": hour_ago, "dryRun": true}).to_string();
    let answer = api.send_json(Method::POST, path, &key, &dry).await;
    checker.check(&answer, 200, None);
    assert_eq!(answer.json, json!({"matching": 0, "more": false, "bySubscription": {id.clone(): 0}}));
    let window = json!({"since": hour_ago, "subscriptionIds": [id]}).to_string();
    let answer = api.send_json(Method::POST, path, &key, &window).await;
    checker.check(&answer, 202, None);

    let text = api.request(Method::POST, path).key(&key).header("content-type", "text/plain").body(b"{}");
    checker.check(&text.send().await, 400, Some("request.unsupported_media_type"));
    for not_json in ["{", "[]", "60"] {
        checker.check(&api.send_json(Method::POST, path, &key, not_json).await, 400, Some("request.invalid_json"));
    }
    let someone_elses = subscribed(&api).await.2;
    for other in [someone_elses.as_str(), "whk_nonsense"] {
        let body = json!({"since": hour_ago, "subscriptionIds": [id, other]}).to_string();
        checker.check(&api.send_json(Method::POST, path, &key, &body).await, 404, Some("webhooks.not_found"));
    }

    let valid = RequestSpec::new(&REPLAY_DELIVERIES, path, Some(&dry));
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn cancel_deliveries_answers_as_documented() {
    let mut checker = Checker::new(&CANCEL_DELIVERIES);
    let api = Api::loopback();
    let (user, key, id) = subscribed(&api).await;
    failed_once(&api, &user, &id).await;
    let path = format!("/api/v1/webhooks/deliveries/cancel?id={id}");
    let answer = api.request(Method::POST, &path).key(&key).send().await;
    checker.check(&answer, 202, None);
    assert_eq!(answer.json, json!({"cancelling": 1, "more": false}), "the delivery waiting for its retry");
    let before = json!({"createdBefore": career_core::clock::Timestamp::now()}).to_string();
    checker.check(&api.send_json(Method::POST, &path, &key, &before).await, 202, None);

    for missing in ["/api/v1/webhooks/deliveries/cancel", "/api/v1/webhooks/deliveries/cancel?id="] {
        let answer = api.send_json(Method::POST, missing, &key, &before).await;
        checker.check(&answer, 400, Some("webhooks.missing_subscription_id"));
    }
    let text = api.request(Method::POST, &path).key(&key).header("content-type", "text/plain").body(b"{}");
    checker.check(&text.send().await, 400, Some("request.unsupported_media_type"));
    for not_json in ["{", "[]", "60"] {
        checker.check(&api.send_json(Method::POST, &path, &key, not_json).await, 400, Some("request.invalid_json"));
    }
    for bad in [json!({"createdBefore": "now"}), json!({"before": "2026-11-23T00:00:00Z"})] {
        let answer = api.send_json(Method::POST, &path, &key, &bad.to_string()).await;
        checker.check(&answer, 400, Some("webhooks.invalid_cancel"));
    }
    let someone_elses = subscribed(&api).await.2;
    for other in [someone_elses.as_str(), "whk_nonsense"] {
        let answer =
            api.send_json(Method::POST, &format!("/api/v1/webhooks/deliveries/cancel?id={other}"), &key, &before).await;
        checker.check(&answer, 404, Some("webhooks.not_found"));
    }

    let valid = RequestSpec::new(&CANCEL_DELIVERIES, path, Some(&before));
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn update_webhook_answers_as_documented() {
    let mut checker = Checker::new(&UPDATE_WEBHOOK);
    let api = Api::loopback();
    let (_, key, id) = subscribed(&api).await;
    let path = format!("/api/v1/webhooks?id={id}");
    let moved = json!({"url": format!("{}/b", sink_url()), "events": ["assessment.completed"]}).to_string();
    let bodies = [
        moved.as_str(),
        r#"{"enabled": false}"#,
        r#"{"enabled": true}"#,
        r#"{"asymmetricSigning": true}"#,
        r#"{"asymmetricSigning": false}"#,
        r#"{"traceContext": true}"#,
        r#"{"traceContext": false}"#,
    ];
    for body in bodies {
        checker.check(&api.send_json(Method::PATCH, &path, &key, body).await, 200, None);
    }
    let paused = api.send_json(Method::PATCH, &path, &key, r#"{"enabled": false}"#).await;
    checker.check(&paused, 200, None);
    assert_eq!(paused.json["disabledReason"], "manual");
    // Boxed, so the test's future stays within a test thread's stack.
    Box::pin(update_destination(&mut checker, &api, &key)).await;

    let body = r#"{"enabled": true}"#;
    for missing in ["/api/v1/webhooks", "/api/v1/webhooks?id="] {
        let answer = api.send_json(Method::PATCH, missing, &key, body).await;
        checker.check(&answer, 400, Some("webhooks.missing_subscription_id"));
    }
    let text = api.request(Method::PATCH, &path).key(&key).header("content-type", "text/plain").body(body.as_bytes());
    checker.check(&text.send().await, 400, Some("request.unsupported_media_type"));
    for not_json in ["{", "[]", "true", ""] {
        checker.check(&api.send_json(Method::PATCH, &path, &key, not_json).await, 400, Some("request.invalid_json"));
    }
    let cases = [
        ("{}", "webhooks.no_changes"),
        (r#"{"secret": "whsec_x"}"#, "webhooks.no_changes"),
        (r#"{"enabled": true, "secret": "whsec_x"}"#, "webhooks.unknown_field"),
        (r#"{"enabled": "false"}"#, "webhooks.invalid_enabled"),
        (r#"{"asymmetricSigning": null}"#, "webhooks.invalid_asymmetric_signing"),
        (r#"{"traceContext": 1}"#, "webhooks.invalid_trace_context"),
        (r#"{"maxDeliveriesPerSecond": "2"}"#, "webhooks.invalid_rate_limit"),
        (r#"{"whileDisabled": null}"#, "webhooks.invalid_while_disabled"),
        (r#"{"identityToken": {"audience": ""}}"#, "webhooks.invalid_identity_token"),
        (r#"{"url": null}"#, "webhooks.invalid_url"),
        (r#"{"url": "http://hooks.example.com/a"}"#, "webhooks.invalid_url"),
        (r#"{"events": null}"#, "webhooks.invalid_events"),
        (r#"{"events": ["webhook.ping"]}"#, "webhooks.invalid_events"),
    ];
    // Under the production setting, which refuses the http URL.
    let strict = Api::new();
    for (body, code) in cases {
        checker.check(&strict.send_json(Method::PATCH, &path, &key, body).await, 400, Some(code));
    }
    let someone_elses = subscribed(&api).await.2;
    let unknown = career_core::ids::new_id(career_core::ids::SUBSCRIPTION);
    for id in [someone_elses.as_str(), unknown.as_str(), "whk_nonsense"] {
        let answer = api.send_json(Method::PATCH, &format!("/api/v1/webhooks?id={id}"), &key, body).await;
        checker.check(&answer, 404, Some("webhooks.not_found"));
    }

    let valid = RequestSpec::new(&UPDATE_WEBHOOK, path, Some(body));
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

/// PATCH of an AWS destination (contract section 17): a new role, and another type refused.
async fn update_destination(checker: &mut Checker, api: &Api, key: &str) {
    let to_queue = json!({"destination": {"type": "aws_sqs", "queueUrl": EMULATOR_QUEUE, "roleArn": RECEIVER_ROLE},
        "events": ["profile.updated"]});
    let created = api.send_json(Method::POST, "/api/v1/webhooks", key, &to_queue.to_string()).await;
    let path = format!("/api/v1/webhooks?id={}", created.assert_status(201)["id"].as_str().unwrap());
    let new_role = json!({"destination": {"roleArn": "arn:aws:iam::210987654321:role/another"}}).to_string();
    checker.check(&api.send_json(Method::PATCH, &path, key, &new_role).await, 200, None);
    let other_type = r#"{"destination": {"type": "aws_eventbridge"}}"#;
    let answer = api.send_json(Method::PATCH, &path, key, other_type).await;
    checker.check(&answer, 400, Some("webhooks.invalid_destination"));
}

#[tokio::test]
async fn signing_keys_answer_as_documented() {
    let mut checker = Checker::new(&SIGNING_KEYS);
    let api = Api::loopback();
    let (_, key, id) = subscribed(&api).await;
    let path = format!("/api/v1/webhooks/signing-keys?id={id}");
    checker.check(&api.get(&path, &key).await, 400, Some("webhooks.asymmetric_signing_off"));
    let update = format!("/api/v1/webhooks?id={id}");
    let on = api.send_json(Method::PATCH, &update, &key, r#"{"asymmetricSigning": true}"#).await;
    let current = on.assert_status(200)["publicKey"].clone();
    let answer = api.get(&path, &key).await;
    checker.check(&answer, 200, None);
    assert_eq!(answer.json, json!({"keys": [{"publicKey": current, "status": "current", "expiresAt": null}]}));
    let rotation = api.request(Method::POST, &format!("/api/v1/webhooks/rotate-secret?id={id}")).key(&key);
    let rotated = rotation.send().await;
    let rotated = rotated.assert_status(200);
    let answer = api.get(&path, &key).await;
    checker.check(&answer, 200, None);
    let statuses: Vec<(&Value, &Value)> =
        answer.json["keys"].as_array().unwrap().iter().map(|k| (&k["publicKey"], &k["status"])).collect();
    assert_eq!(statuses, [(&rotated["publicKey"], &json!("current")), (&current, &json!("previous"))]);

    for missing in ["/api/v1/webhooks/signing-keys", "/api/v1/webhooks/signing-keys?id="] {
        checker.check(&api.get(missing, &key).await, 400, Some("webhooks.missing_subscription_id"));
    }
    let foreign = subscribed(&api).await.2;
    for id in [foreign.as_str(), "whk_nonsense"] {
        let answer = api.get(&format!("/api/v1/webhooks/signing-keys?id={id}"), &key).await;
        checker.check(&answer, 404, Some("webhooks.not_found"));
    }

    let valid = RequestSpec::new(&SIGNING_KEYS, path, None);
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn health_answers_as_documented() {
    let mut checker = Checker::new(&HEALTH);
    let api = Api::loopback();
    let (_, key, id) = subscribed(&api).await;
    let path = format!("/api/v1/webhooks/health?id={id}");
    let answer = api.get(&path, &key).await;
    checker.check(&answer, 200, None);
    assert_eq!(answer.json["state"], "new");
    for missing in ["/api/v1/webhooks/health", "/api/v1/webhooks/health?id="] {
        checker.check(&api.get(missing, &key).await, 400, Some("webhooks.missing_subscription_id"));
    }
    let foreign = subscribed(&api).await.2;
    for id in [foreign.as_str(), "whk_nonsense"] {
        let answer = api.get(&format!("/api/v1/webhooks/health?id={id}"), &key).await;
        checker.check(&answer, 404, Some("webhooks.not_found"));
    }

    let valid = RequestSpec::new(&HEALTH, path, None);
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.webhooks)).await;
    checker.assert_complete();
}

#[tokio::test]
async fn event_types_answer_as_documented() {
    let mut checker = Checker::new(&EVENT_TYPES);
    let api = Api::loopback();
    let key = api.full_key(unique_user()).await;
    let answer = api.get("/api/v1/webhooks/event-types", &key).await;
    checker.check(&answer, 200, None);
    assert_eq!(answer.json["eventTypes"], serde_json::to_value(event_types()).unwrap());

    let valid = RequestSpec::new(&EVENT_TYPES, "/api/v1/webhooks/event-types", None);
    // The catalog is compiled in: the table every request needs is the rate limit's.
    common_errors(&mut checker, &valid, |s| missing_table(&mut s.tables.rate_limits)).await;
    checker.assert_complete();
}

// ------------------------------------------------------------------------------------------
// The event catalog is the document's `webhooks` section.

/// `value` with every `$ref` of the document replaced by what it points at.
fn inlined(doc: &Doc, value: &Value) -> Value {
    match value {
        Value::Object(map) => match map.get("$ref").and_then(Value::as_str) {
            Some(reference) => inlined(doc, doc.deref(doc.node(reference[1..].to_owned())).value),
            None => Value::Object(map.iter().map(|(k, v)| (k.clone(), inlined(doc, v))).collect()),
        },
        Value::Array(items) => Value::Array(items.iter().map(|v| inlined(doc, v)).collect()),
        other => other.clone(),
    }
}

/// Each kind of the catalog that the event-types operation serves has, in openapi.yaml's
/// `webhooks` section, the same schema (references inlined), the same example, and the
/// catalog's description as the first paragraph of its own; and the section has no other kind.
#[test]
fn the_event_catalog_is_the_documents_webhooks_section() {
    let doc = doc();
    let documented: BTreeSet<String> = doc.root["webhooks"].as_object().unwrap().keys().cloned().collect();
    let catalog: BTreeSet<String> = event_types().iter().map(|t| t.name.as_str().to_owned()).collect();
    assert_eq!(documented, catalog);
    for event_type in event_types() {
        let kind = event_type.name.as_str();
        let operation = doc.node(child(&child("/webhooks", kind), "post"));
        let media = doc.json_media(&doc.node(format!("{}/requestBody", operation.at)));
        let schema = inlined(doc, &media.value["schema"]);
        assert_eq!(schema, event_type.schema, "{kind}: openapi.yaml's schema, references inlined, is the catalog's");
        assert_eq!(media.value["example"], event_type.example, "{kind}: the example");
        let description = operation.value["description"].as_str().unwrap();
        let first_paragraph = description.split("\n\n").next().unwrap().split_whitespace().collect::<Vec<_>>();
        assert_eq!(first_paragraph.join(" "), event_type.description, "{kind}: the description");
    }
}

/// The catalog's schemas are JSON Schemas (2020-12, formats checked) that their examples meet,
/// and that refuse a body of another kind or without its data.
#[test]
fn each_catalog_example_validates_against_its_schema() {
    for event_type in event_types() {
        let kind = event_type.name.as_str();
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&event_type.schema)
            .unwrap_or_else(|e| panic!("{kind}: not a JSON Schema: {e}"));
        let problems: Vec<String> = validator.iter_errors(&event_type.example).map(|e| e.to_string()).collect();
        assert!(problems.is_empty(), "{kind}: the example does not meet the schema: {problems:?}");
        for other in event_types().iter().filter(|other| other.name != event_type.name) {
            assert!(!validator.is_valid(&other.example), "{kind}: the schema admits a {}", other.name.as_str());
        }
        let mut without_data = event_type.example.clone();
        without_data["data"] = json!({});
        assert!(!validator.is_valid(&without_data), "{kind}: the schema admits empty data");
        let mut local_time = event_type.example.clone();
        local_time["createdAt"] = json!("2026-11-21T09:10:00.000+01:00");
        assert!(!validator.is_valid(&local_time), "{kind}: the schema admits a time that is not UTC");
    }
}

// ------------------------------------------------------------------------------------------
// Webhook deliveries against the document's `webhooks` section.

#[test]
fn webhook_deliveries_match_the_documented_callbacks() {
    let doc = doc();
    let records = [
        (
            "INSERT",
            json!({"userId": {"S": "u1"}, "profileId": {"S": "prf_1"}}),
            json!(null),
            json!({"userId": {"S": "u1"}, "profileId": {"S": "prf_1"}, "updatedAt": {"S": "2026-11-27T08:00:05.250Z"}}),
        ),
        (
            "MODIFY",
            json!({"userId": {"S": "u1"}, "assessmentId": {"S": "asm_1"}}),
            json!({"userId": {"S": "u1"}, "assessmentId": {"S": "asm_1"}, "status": {"S": "in_progress"}}),
            json!({"userId": {"S": "u1"}, "assessmentId": {"S": "asm_1"}, "status": {"S": "completed"}}),
        ),
    ];
    let mut events: Vec<career_core::events::Event> = Vec::new();
    for (name, keys, old, new) in records {
        let record = serde_json::from_value(json!({
            "awsRegion": "us-east-1", "eventID": "e-1", "eventName": name, "eventSource": "aws:dynamodb",
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2026",
            "dynamodb": {"ApproximateCreationDateTime": 1795766400.0, "Keys": keys, "OldImage": old, "NewImage": new,
                         "SequenceNumber": "1", "SizeBytes": 10, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        }))
        .unwrap();
        events.push(event_from_record(&record).unwrap().expect("an event"));
    }
    events.push(career_core::events::Event::ping(&typed("whk_01JDQ40A1B2C3D4E5F6G7H8J9K")));
    events.extend(operational_events());
    let mut kinds = BTreeSet::new();
    for event in events {
        let kind = event.kind().as_str();
        kinds.insert(kind.to_owned());
        let message = DeliveryMessage::new(&event, &typed("u1"), &typed("whk_01JDQ40A1B2C3D4E5F6G7H8J9K"));
        let (current, previous) = (WebhookSecret::generate(), WebhookSecret::generate());
        let at = career_core::clock::Timestamp::from_unix_seconds(1_795_766_400);
        let signed = SignedDelivery::new(&message, &ActiveSecrets { secrets: vec![&current], keys: vec![] }, at);
        // During a rotation's grace period, both signature headers hold two signatures, and
        // with asymmetric signing on `webhook-signature` two `v1a` entries after them.
        let keys = (SigningKey::generate(), SigningKey::generate());
        let with_key =
            SignedDelivery::new(&message, &ActiveSecrets { secrets: vec![&current], keys: vec![&keys.0] }, at);
        let during_grace = SignedDelivery::new(
            &message,
            &ActiveSecrets { secrets: vec![&current, &previous], keys: vec![&keys.0, &keys.1] },
            at,
        );
        // With trace context on, the delivery function adds `traceparent` and `tracestate`.
        let mut traced = SignedDelivery::new(&message, &ActiveSecrets { secrets: vec![&current], keys: vec![] }, at);
        let trace = TraceContext::of(Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), Some("rojo=1"));
        traced.headers.extend(trace.expect("a trace").headers(SpanId::generate()));

        let operation = doc.node(child(&child("/webhooks", kind), "post"));
        let body: Value = serde_json::from_slice(&signed.body).unwrap();
        let problems = doc.validate(&doc.json_schema(&doc.node(format!("{}/requestBody", operation.at))), &body);
        assert!(problems.is_empty(), "{kind}: the delivery body does not match openapi.yaml: {problems:?}");

        let count = operation.value["parameters"].as_array().expect("documented headers").len();
        let parameters: Vec<Node<'_>> =
            (0..count).map(|i| doc.deref(doc.node(format!("{}/parameters/{i}", operation.at)))).collect();
        let documented: BTreeSet<String> =
            parameters.iter().map(|p| p.value["name"].as_str().unwrap().to_ascii_lowercase()).collect();
        for signed in [&signed, &with_key, &during_grace, &traced] {
            let header =
                |name: &str| signed.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
            assert_eq!(header("content-type"), Some("application/json"));
            for parameter in &parameters {
                assert_eq!(parameter.value["in"], "header");
                let name = parameter.value["name"].as_str().unwrap();
                let value = header(name);
                if parameter.value["required"] == true {
                    assert!(value.is_some(), "{kind}: no {name} header");
                }
                if let Some(value) = value {
                    let problems = doc.validate(&doc.node(format!("{}/schema", parameter.at)), &json!(value));
                    assert!(problems.is_empty(), "{kind}: header {name} {value:?}: {problems:?}");
                }
            }
            for (name, _) in &signed.headers {
                let name = name.to_ascii_lowercase();
                let known = name == "content-type" || documented.contains(&name);
                assert!(known, "{kind}: header {name} is not documented");
            }
        }
    }
    let documented: BTreeSet<String> = doc.root["webhooks"].as_object().unwrap().keys().cloned().collect();
    assert_eq!(documented, kinds, "one documented delivery per event kind");
}

/// One event of each operational kind, as the fan-out makes them from the webhooks and
/// deliveries tables' stream records (contract section 15).
fn operational_events() -> Vec<career_core::events::Event> {
    use career_core::store::stream::operational::{from_delivery_record, from_subscription_record};
    let modify = |old: Value, new: Value| -> aws_lambda_events::dynamodb::EventRecord {
        serde_json::from_value(json!({
            "awsRegion": "us-east-1", "eventID": "e-1", "eventName": "MODIFY", "eventSource": "aws:dynamodb",
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2026",
            "dynamodb": {"ApproximateCreationDateTime": 1795766400.0, "Keys": {}, "OldImage": old, "NewImage": new,
                         "SequenceNumber": "1", "SizeBytes": 10, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        }))
        .unwrap()
    };
    let subscription = |extra: Value| {
        let mut item = json!({"userId": {"S": "u1"}, "subscriptionId": {"S": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K"},
                              "url": {"S": "https://hooks.example.com/in"}});
        item.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        item
    };
    let failing = subscription(json!({"failingSince": {"S": "2026-11-27T08:00:00.000Z"},
                                      "failingError": {"S": "timed out after 10 s"}}));
    let disabled = subscription(json!({"failingSince": {"S": "2026-11-27T08:00:00.000Z"},
                                       "disabledAt": {"S": "2026-11-27T09:00:00.000Z"}, "disabledReason": {"S": "gone"}}));
    let recovered = subscription(json!({"recoveredAt": {"S": "2026-11-27T09:00:00.000Z"}}));
    // Its first attempt, answered 410, ends it: the attempt's write makes it failed.
    let delivery = |status: &str, attempts: &str| {
        json!({"userId": {"S": "u1"}, "deliveryId": {"S": "dlv_01JDQ41B2C3D4E5F6G7H8J9K0M"},
               "subscriptionId": {"S": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K"}, "eventId": {"S": "evt_01JDQ41B2C3D4E5F6G7H8J9K0M"},
               "eventType": {"S": "webhook.ping"}, "status": {"S": status}, "attempts": {"N": attempts},
               "lastError": {"S": "answered 410; subscription disabled"}})
    };
    [
        from_subscription_record(&modify(subscription(json!({})), failing.clone())),
        from_subscription_record(&modify(failing.clone(), disabled)),
        from_subscription_record(&modify(failing, recovered)),
        from_delivery_record(&modify(delivery("pending", "0"), delivery("failed", "1"))),
    ]
    .into_iter()
    .map(|event| event.unwrap().expect("an operational event"))
    .collect()
}
