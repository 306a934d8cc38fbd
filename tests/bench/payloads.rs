//! The events Lambda hands the functions: API Gateway HTTP API (payload 2.0) requests,
//! DynamoDB stream batches and SQS batches, as JSON.

use serde_json::{json, Map, Value};

/// An API Gateway v2 event for `method path?query` with the key, as API Gateway builds it.
pub fn api_request(method: &str, path: &str, query: &[(&str, &str)], key: &str, body: Option<&str>, n: u64) -> Value {
    let raw_query = query.iter().map(|(name, value)| format!("{name}={value}")).collect::<Vec<_>>().join("&");
    let mut headers = json!({
        "accept": "application/json",
        "authorization": format!("Bearer {key}"),
        "host": "bench.execute-api.us-east-1.amazonaws.com",
        "user-agent": "career-bench",
        "x-amzn-trace-id": format!("Root=1-6b093881-{n:024x}"),
        "x-forwarded-for": "203.0.113.24",
        "x-forwarded-port": "443",
        "x-forwarded-proto": "https"
    });
    if let Some(body) = body {
        headers["content-type"] = "application/json".into();
        headers["content-length"] = body.len().to_string().into();
    }
    let mut event = json!({
        "version": "2.0",
        "routeKey": format!("ANY {path}"),
        "rawPath": path,
        "rawQueryString": raw_query,
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "bench",
            "domainName": "bench.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "bench",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "203.0.113.24",
                     "userAgent": "career-bench"},
            "requestId": format!("bench-{n}"),
            "routeKey": format!("ANY {path}"),
            "stage": "$default",
            "time": "27/Nov/2026:08:00:01 +0000",
            "timeEpoch": 1_795_766_401_000u64
        },
        "isBase64Encoded": false
    });
    if !query.is_empty() {
        let params: Map<String, Value> = query.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect();
        event["queryStringParameters"] = Value::Object(params);
    }
    if let Some(body) = body {
        event["body"] = body.into();
    }
    event
}

/// A stream record of a profile change (MODIFY with a new revision), numbered `sequence`.
pub fn profile_record(user: &str, profile_id: &str, sequence: u64) -> Value {
    let keys = json!({"userId": {"S": user}, "profileId": {"S": profile_id}});
    let image = |revision: u64| {
        json!({"userId": {"S": user}, "profileId": {"S": profile_id}, "revision": {"N": revision.to_string()},
               "updatedAt": {"S": career_core::clock::Timestamp::now().to_string()}})
    };
    json!({
        "awsRegion": "us-east-1",
        "eventID": format!("bench-{sequence}"),
        "eventName": "MODIFY",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/bench-profiles/stream/2026-01-01T00:00:00.000",
        "dynamodb": {"ApproximateCreationDateTime": 1_795_766_400.0, "Keys": keys, "OldImage": image(sequence),
                     "NewImage": image(sequence + 1), "SequenceNumber": format!("{sequence:021}"), "SizeBytes": 160,
                     "StreamViewType": "NEW_AND_OLD_IMAGES"}
    })
}

/// An SQS record carrying `body`, numbered `n`.
pub fn sqs_record(body: &str, n: u64) -> Value {
    json!({
        "messageId": format!("00000000-0000-4000-8000-{n:012}"),
        "receiptHandle": format!("bench-receipt-{n}"),
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1795766420555",
                       "SenderId": "AROA3XFRBF535PLBIFPI4:career-fanout", "ApproximateFirstReceiveTimestamp": "1795766420590"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:bench-deliveries",
        "awsRegion": "us-east-1"
    })
}

pub fn batch(records: Vec<Value>) -> Value {
    json!({"Records": records})
}
