//! `/api/v1/webhooks` with an AWS destination instead of a URL (contract section 17), through
//! the function's handler against DynamoDB Local: what create, list and PATCH show, that the
//! external id stays, and every validation case with its code, changing nothing.
//!
//! Queues are the local SQS emulator's form (`http://127.0.0.1:<port>/<account>/<name>`), so
//! no subscription names a queue on another machine; the production setting's refusals are
//! checked with [`Api::new`].

use career_service::{sender_role_arn, unique_user, Api};
use serde_json::{json, Value};

use crate::api_webhooks::{create, list, listed, refused, update, without_secret};

/// The receiver's account, another than the deployment's (`local_aws::template::ACCOUNT`).
const ACCOUNT: &str = "210987654321";
const INVALID: &str = "webhooks.invalid_destination";
const MISSING: &str = "webhooks.missing_required_fields";

fn queue(name: &str) -> String {
    format!("http://127.0.0.1:9/{ACCOUNT}/{name}")
}

fn role(name: &str) -> String {
    format!("arn:aws:iam::{ACCOUNT}:role/{name}")
}

fn bus(name: &str) -> String {
    format!("arn:aws:events:us-east-1:{ACCOUNT}:event-bus/{name}")
}

fn sqs(queue_url: &str, role_arn: &str) -> Value {
    json!({"type": "aws_sqs", "queueUrl": queue_url, "roleArn": role_arn})
}

fn subscribing(destination: Value) -> Value {
    json!({"destination": destination, "events": ["profile.updated"]})
}

/// Creates a subscription with `destination`; its create answer (checked to be a 201).
async fn created(api: &Api, key: &str, destination: Value) -> Value {
    create(api, key, &subscribing(destination)).await.assert_status(201).clone()
}

/// The service-generated external id: at least 32 characters that `sts:ExternalId` takes.
#[track_caller]
fn external_id(subscription: &Value) -> String {
    let id = subscription["destination"]["externalId"].as_str().unwrap_or_else(|| panic!("{subscription}"));
    assert!(id.len() >= 32, "{id}");
    assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b"+=,.@:/-_".contains(&b)), "{id}");
    id.to_owned()
}

#[tokio::test]
async fn create_and_list_show_the_destination_its_external_id_and_the_sender_role() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let fifo = created(&api, &key, sqs(&queue("events.fifo"), &role("career-sender"))).await;
    assert_eq!(fifo["url"], Value::Null, "{fifo}");
    assert!(fifo["secret"].as_str().is_some_and(|secret| secret.starts_with("whsec_")), "{fifo}");
    let id = external_id(&fifo);
    assert_eq!(
        fifo["destination"],
        json!({"type": "aws_sqs", "queueUrl": queue("events.fifo"), "roleArn": role("career-sender"),
            "externalId": id, "senderRoleArn": sender_role_arn().as_str()})
    );
    let eventbridge = json!({"type": "aws_eventbridge", "eventBusArn": bus("career"), "roleArn": role("bus-sender")});
    // `"url": null` is as absent, so a client may send the object's shape back.
    let body = json!({"url": null, "destination": eventbridge, "events": ["profile.updated"]});
    let on_bus = create(&api, &key, &body).await.assert_status(201).clone();
    assert_eq!(on_bus["destination"]["eventBusArn"], bus("career"));
    assert_eq!(on_bus["destination"]["senderRoleArn"], sender_role_arn().as_str());
    assert_ne!(external_id(&on_bus), id, "unique per subscription");
    assert_eq!(list(&api, &key).await, [without_secret(&fifo), without_secret(&on_bus)]);
}

#[tokio::test]
async fn each_invalid_destination_is_refused_and_creates_nothing() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let first = created(&api, &key, sqs(&queue("first"), &role("sender"))).await;
    let before = [without_secret(&first)];
    let events = json!(["profile.updated"]);
    for body in [
        json!({"events": events}),
        json!({"url": null, "destination": null, "events": events}),
        // Missing fields come first, as for a url.
        json!({"destination": sqs(&queue("q"), &role("r"))}),
        json!({"destination": "aws_sqs", "events": null}),
    ] {
        refused(&api, &key, &body, MISSING, &before).await;
    }
    let other_account = "arn:aws:iam::333333333333:role/sender";
    let with_external_id =
        json!({"type": "aws_sqs", "queueUrl": queue("q"), "roleArn": role("r"), "externalId": "x".repeat(43)});
    for destination in [
        json!("aws_sqs"),
        json!({"type": "aws_sns", "queueUrl": queue("q"), "roleArn": role("r")}),
        json!({"queueUrl": queue("q"), "roleArn": role("r")}),
        json!({"type": "aws_sqs", "roleArn": role("r")}),
        json!({"type": "aws_sqs", "queueUrl": queue("q")}),
        sqs("https://sqs.example.com/210987654321/q", &role("r")),
        sqs(&format!("http://127.0.0.1:9/{ACCOUNT}/q?x=1"), &role("r")),
        sqs(&format!("http://127.0.0.1:9/{ACCOUNT}/bad.name"), &role("r")),
        sqs("http://127.0.0.1:9/2109/q", &role("r")),
        sqs(&queue("q"), &format!("arn:aws:iam::{ACCOUNT}:user/r")),
        sqs(&queue("q"), "arn:aws:iam::21098765432:role/r"),
        sqs(&queue("q"), other_account),
        sqs(&format!("http://10.0.0.1:9/{ACCOUNT}/q"), &role("r")),
        json!({"type": "aws_eventbridge", "eventBusArn": queue("q"), "roleArn": role("r")}),
        json!({"type": "aws_eventbridge", "eventBusArn": format!("arn:aws:events:us-east-1:{ACCOUNT}:rule/x"), "roleArn": role("r")}),
        json!({"type": "aws_eventbridge", "eventBusArn": bus("b"), "roleArn": other_account}),
        json!({"type": "aws_eventbridge", "eventBusArn": bus("b"), "queueUrl": queue("q"), "roleArn": role("r")}),
        with_external_id,
    ] {
        refused(&api, &key, &subscribing(destination), INVALID, &before).await;
    }
    let both = json!({"url": "http://127.0.0.1:9/hook", "destination": sqs(&queue("q"), &role("r")), "events": events});
    refused(&api, &key, &both, INVALID, &before).await;
}

/// On AWS (https only, no allowed network) an emulator's queue and a role in the deployment's
/// own account are refused; the local stack takes both, so the whole path runs locally.
#[tokio::test]
async fn local_queues_and_the_deployments_own_account_only_in_the_local_stack() {
    let own_account = sender_role_arn().account();
    let own_role = format!("arn:aws:iam::{own_account}:role/receiver");
    let own_bus = format!("arn:aws:events:us-east-1:{own_account}:event-bus/receiver");
    let own_queue = format!("http://127.0.0.1:9/{own_account}/receiver");
    let on_aws = Api::new();
    let key = on_aws.full_key(&unique_user()).await;
    let own = json!({"type": "aws_eventbridge", "eventBusArn": own_bus, "roleArn": own_role});
    for destination in [own.clone(), sqs(&queue("q"), &role("r")), sqs(&own_queue, &own_role)] {
        refused(&on_aws, &key, &subscribing(destination), INVALID, &[]).await;
    }
    let local = Api::loopback();
    let key = local.full_key(&unique_user()).await;
    let taken = created(&local, &key, sqs(&own_queue, &own_role)).await;
    assert_eq!(taken["destination"]["roleArn"], own_role);
    created(&local, &key, own).await;
}

#[tokio::test]
async fn patch_changes_the_queue_and_role_under_the_same_checks_and_keeps_the_external_id() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let first = created(&api, &key, sqs(&queue("first"), &role("sender"))).await;
    let (id, external) = (first["id"].as_str().unwrap(), external_id(&first));

    let answer = update(&api, &key, id, &json!({"destination": {"roleArn": role("new-sender")}}).to_string()).await;
    let changed = answer.assert_status(200).clone();
    assert_eq!(changed["destination"]["roleArn"], role("new-sender"));
    assert_eq!(changed["destination"]["queueUrl"], queue("first"));
    let body = json!({"destination": {"type": "aws_sqs", "queueUrl": queue("second.fifo")}, "enabled": false});
    let changed = update(&api, &key, id, &body.to_string()).await.assert_status(200).clone();
    assert_eq!(changed["destination"]["queueUrl"], queue("second.fifo"));
    assert_eq!(
        (changed["destination"]["roleArn"].clone(), changed["enabled"].clone()),
        (json!(role("new-sender")), json!(false))
    );
    assert_eq!(external_id(&changed), external, "the external id never changes");
    assert_eq!(changed["destination"]["senderRoleArn"], sender_role_arn().as_str());
    assert_eq!(listed(&api, &key, id).await, changed);

    for body in [
        json!({"destination": {"type": "aws_eventbridge"}}),
        json!({"destination": {"eventBusArn": bus("b")}}),
        json!({"destination": {"roleArn": "arn:aws:iam::333333333333:role/r"}}),
        json!({"destination": {"queueUrl": "http://127.0.0.1:9/333333333333/q"}}),
        json!({"destination": {"queueUrl": "https://sqs.example.com/210987654321/q"}}),
        json!({"destination": {"externalId": "x".repeat(43)}}),
        json!({"destination": "aws_sqs"}),
        json!({"url": "http://127.0.0.1:9/hook"}),
        json!({"url": "http://127.0.0.1:9/hook", "destination": {"roleArn": role("r")}}),
    ] {
        let answer = update(&api, &key, id, &body.to_string()).await;
        answer.assert_error(400, INVALID);
        assert_eq!(listed(&api, &key, id).await, changed, "after {body}");
    }

    // A subscription with a url gets no destination.
    let hook = create(&api, &key, &json!({"url": "http://127.0.0.1:9/hook", "events": ["profile.updated"]})).await;
    let hook = without_secret(hook.assert_status(201));
    let hook_id = hook["id"].as_str().unwrap();
    let body = json!({"destination": {"roleArn": role("r")}}).to_string();
    update(&api, &key, hook_id, &body).await.assert_error(400, INVALID);
    assert_eq!(listed(&api, &key, hook_id).await, hook);
}

/// No role trusts a principal of another partition: a destination in one is refused at create
/// and at PATCH with a message naming it, and changes nothing.
#[tokio::test]
async fn a_destination_in_another_partition_is_refused_naming_it_and_changes_nothing() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let first = created(&api, &key, sqs(&queue("first"), &role("sender"))).await;
    let before = [without_secret(&first)];
    let cn_role = format!("arn:aws-cn:iam::{ACCOUNT}:role/r");
    let cn_queue = format!("https://sqs.cn-north-1.amazonaws.com.cn/{ACCOUNT}/q");
    let cn_bus = format!("arn:aws-cn:events:cn-north-1:{ACCOUNT}:event-bus/b");
    let gov_queue = format!("https://sqs.us-gov-west-1.amazonaws.com/{ACCOUNT}/q");
    for (destination, partition) in [
        (sqs(&cn_queue, &cn_role), "aws-cn"),
        (json!({"type": "aws_eventbridge", "eventBusArn": cn_bus, "roleArn": cn_role}), "aws-cn"),
        (json!({"type": "aws_eventbridge", "eventBusArn": cn_bus, "roleArn": role("r")}), "aws-cn"),
        (sqs(&gov_queue, &role("r")), "aws-us-gov"),
    ] {
        let body = subscribing(destination);
        let answer = create(&api, &key, &body).await;
        answer.assert_error(400, INVALID);
        let message = answer.json["error"]["message"].as_str().unwrap();
        let names = message.contains(&format!("partition {partition}")) && message.contains("its own, aws");
        assert!(names, "the destination's partition and the deployment's: {body}: {message}");
        assert_eq!(list(&api, &key).await, before, "after {body}");
    }

    let id = first["id"].as_str().unwrap();
    for change in [
        json!({"roleArn": cn_role}),
        json!({"queueUrl": cn_queue, "roleArn": cn_role}),
        json!({"type": "aws_sqs", "queueUrl": gov_queue}),
    ] {
        let answer = update(&api, &key, id, &json!({"destination": change}).to_string()).await;
        answer.assert_error(400, INVALID);
        assert!(answer.json["error"]["message"].as_str().unwrap().contains("partition"), "{change}: {answer:?}");
        assert_eq!(listed(&api, &key, id).await, before[0], "after {change}");
    }
}

/// A bus's region must be one of its ARN's partition, as a queue URL's is of its domain's: one
/// check of region and partition for both kinds.
#[tokio::test]
async fn an_event_bus_in_a_region_of_another_partition_or_of_none_is_refused_as_a_queue_is() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let first =
        created(&api, &key, json!({"type": "aws_eventbridge", "eventBusArn": bus("b"), "roleArn": role("r")})).await;
    let before = [without_secret(&first)];
    for region in ["cn-north-1", "us-gov-west-1", "zz-north-1"] {
        let on_bus = json!({"type": "aws_eventbridge",
            "eventBusArn": format!("arn:aws:events:{region}:{ACCOUNT}:event-bus/b"), "roleArn": role("r")});
        let in_queue = sqs(&format!("https://sqs.{region}.amazonaws.com/{ACCOUNT}/q"), &role("r"));
        for destination in [on_bus, in_queue] {
            refused(&api, &key, &subscribing(destination), INVALID, &before).await;
        }
        let id = first["id"].as_str().unwrap();
        let change = json!({"destination": {"eventBusArn": format!("arn:aws:events:{region}:{ACCOUNT}:event-bus/b")}});
        update(&api, &key, id, &change.to_string()).await.assert_error(400, INVALID);
        assert_eq!(listed(&api, &key, id).await, before[0], "after {change}");
    }
}

/// A Custom Event Bus's ARN (the eventsv2 API): `event-busv2/<name>/<25-character id>`.
fn bus_v2(name: &str) -> String {
    format!("arn:aws:events:us-east-1:{ACCOUNT}:event-busv2/{name}/abcdefghij0123456789abcde")
}

fn eventbus(bus_arn: &str, role_arn: &str) -> Value {
    json!({"type": "aws_eventbus", "eventBusArn": bus_arn, "roleArn": role_arn})
}

/// A Custom Event Bus destination is created, shown and changed as an EventBridge bus is, its
/// ARN checked as the eventsv2 model's pattern says, and each broken rule refused with
/// `webhooks.invalid_destination`, changing nothing.
#[tokio::test]
async fn a_custom_event_bus_is_created_and_changed_and_each_malformed_arn_refused() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let first = created(&api, &key, eventbus(&bus_v2("orders"), &role("sender"))).await;
    let id = first["id"].as_str().unwrap();
    assert_eq!(
        first["destination"],
        json!({"type": "aws_eventbus", "eventBusArn": bus_v2("orders"), "roleArn": role("sender"),
            "externalId": external_id(&first), "senderRoleArn": sender_role_arn().as_str()})
    );
    let before = [without_secret(&first)];
    let id_25 = "abcdefghij0123456789abcde";
    let arn = |partition: &str, region: &str, account: &str, resource: &str| {
        format!("arn:{partition}:events:{region}:{account}:{resource}")
    };
    for bus_arn in [
        bus("orders"),
        arn("aws", "us-east-1", ACCOUNT, &format!("event-busv2/orders/{}", &id_25[1..])),
        arn("aws", "us-east-1", ACCOUNT, &format!("event-busv2/orders/{id_25}f")),
        arn("aws", "us-east-1", ACCOUNT, "event-busv2/orders/ABCDEFGHIJ0123456789ABCDE"),
        arn("aws", "us-east-1", ACCOUNT, &format!("event-busv2/orders/{}", &id_25.replace('a', "-"))),
        arn("aws", "us-east-1", ACCOUNT, &format!("event-busv2/{id_25}")),
        arn("aws", "us-east-1", ACCOUNT, &format!("event-busv2/.orders/{id_25}")),
        arn("aws", "us-east-1", ACCOUNT, &format!("event-busv2/or ders/{id_25}")),
        arn("aws", "us-east-1", ACCOUNT, &format!("event-busv2/{}/{id_25}", "n".repeat(257))),
        arn("aws", "us-east-1", "2109876543", &format!("event-busv2/orders/{id_25}")),
        arn("aws-mars", "us-east-1", ACCOUNT, &format!("event-busv2/orders/{id_25}")),
        arn("aws", "cn-north-1", ACCOUNT, &format!("event-busv2/orders/{id_25}")),
        arn("aws", "zz-north-1", ACCOUNT, &format!("event-busv2/orders/{id_25}")),
        arn("aws", "", ACCOUNT, &format!("event-busv2/orders/{id_25}")),
        format!("arn:aws:sqs:us-east-1:{ACCOUNT}:event-busv2/orders/{id_25}"),
    ] {
        refused(&api, &key, &subscribing(eventbus(&bus_arn, &role("r"))), INVALID, &before).await;
    }
    for destination in [
        json!({"type": "aws_eventbus", "roleArn": role("r")}),
        json!({"type": "aws_eventbus", "eventBusArn": bus_v2("b"), "queueUrl": queue("q"), "roleArn": role("r")}),
        eventbus(&bus_v2("b"), "arn:aws:iam::333333333333:role/r"),
        json!({"type": "aws_eventbridge", "eventBusArn": bus_v2("b"), "roleArn": role("r")}),
    ] {
        refused(&api, &key, &subscribing(destination), INVALID, &before).await;
    }

    let change = json!({"destination": {"eventBusArn": bus_v2("payments")}}).to_string();
    let changed = update(&api, &key, id, &change).await.assert_status(200).clone();
    assert_eq!(
        (changed["destination"]["type"].as_str(), changed["destination"]["eventBusArn"].as_str()),
        (Some("aws_eventbus"), Some(bus_v2("payments").as_str()))
    );
    assert_eq!(external_id(&changed), external_id(&first), "the external id never changes");
    for body in [
        json!({"destination": {"eventBusArn": bus("b")}}),
        json!({"destination": {"type": "aws_eventbridge"}}),
        json!({"destination": {"eventBusArn": format!("{}x", bus_v2("b"))}}),
    ] {
        update(&api, &key, id, &body.to_string()).await.assert_error(400, INVALID);
        assert_eq!(listed(&api, &key, id).await, changed, "after {body}");
    }
}

/// A Custom Event Bus in another partition is refused naming it, as a queue or an EventBridge
/// bus is.
#[tokio::test]
async fn a_custom_event_bus_in_another_partition_is_refused_naming_it() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let cn_bus = format!("arn:aws-cn:events:cn-north-1:{ACCOUNT}:event-busv2/orders/abcdefghij0123456789abcde");
    let cn_role = format!("arn:aws-cn:iam::{ACCOUNT}:role/r");
    for destination in [eventbus(&cn_bus, &cn_role), eventbus(&cn_bus, &role("r"))] {
        let answer = create(&api, &key, &subscribing(destination.clone())).await;
        answer.assert_error(400, INVALID);
        let message = answer.json["error"]["message"].as_str().unwrap();
        assert!(message.contains("partition aws-cn") && message.contains("its own, aws"), "{destination}: {message}");
        assert_eq!(list(&api, &key).await, Vec::<Value>::new());
    }
}
