// The Node.js peer of GET /api/v1/alerts for the cold-request bench: the same three
// DynamoDB calls as the Rust function (key lookup, rate-limit count, the list's query),
// written as a Node.js Lambda handler usually is: the client is built at module load,
// during init, and the SDK reads AWS_ENDPOINT_URL_DYNAMODB and NODE_EXTRA_CA_CERTS itself.
"use strict";

const crypto = require("node:crypto");
const { DynamoDBClient, GetItemCommand, UpdateItemCommand, QueryCommand } = require("@aws-sdk/client-dynamodb");

const dynamodb = new DynamoDBClient({});
const limitPerMinute = Number(process.env.RATE_LIMIT_PER_MINUTE || 600);

function answer(statusCode, body) {
  return { statusCode, headers: { "content-type": "application/json" }, body: JSON.stringify(body) };
}

exports.handler = async (event) => {
  const header = event.headers?.authorization || "";
  const key = header.replace(/^bearer\s+/i, "");
  const keyHash = crypto.createHash("sha256").update(key).digest("hex");
  const stored = await dynamodb.send(
    new GetItemCommand({ TableName: process.env.KEYS_TABLE, Key: { keyHash: { S: keyHash } }, ConsistentRead: true }),
  );
  const item = stored.Item;
  if (!item || item.revokedAt || !(item.scopes?.L || []).some((s) => s.S === "read:alerts")) {
    return answer(401, { error: { code: "auth.unauthorized" } });
  }
  const now = Math.floor(Date.now() / 1000);
  const window = Math.floor(now / 60);
  const counted = await dynamodb.send(
    new UpdateItemCommand({
      TableName: process.env.RATE_LIMIT_TABLE,
      Key: { bucket: { S: `${keyHash}#${window}` } },
      UpdateExpression: "ADD requests :one SET expiresAt = if_not_exists(expiresAt, :exp)",
      ExpressionAttributeValues: { ":one": { N: "1" }, ":exp": { N: String((window + 2) * 60) } },
      ReturnValues: "UPDATED_NEW",
    }),
  );
  if (Number(counted.Attributes.requests.N) > limitPerMinute) {
    return answer(429, { error: { code: "rate_limited" } });
  }
  const page = await dynamodb.send(
    new QueryCommand({
      TableName: process.env.ALERTS_TABLE,
      IndexName: "active",
      KeyConditionExpression: "userId = :u",
      ExpressionAttributeValues: { ":u": { S: item.userId.S } },
      ScanIndexForward: false,
      ConsistentRead: true,
      Limit: 51,
    }),
  );
  const alerts = (page.Items || []).slice(0, 50).map((a) => ({
    id: a.alertId.S,
    category: a.category.S,
    severity: a.severity.S,
    title: a.title.S,
    message: a.message.S,
    createdAt: a.createdAt.S,
    read: a.read.BOOL,
    readAt: a.readAt?.S ?? null,
    dismissed: a.dismissed.BOOL,
    dismissedAt: a.dismissedAt?.S ?? null,
  }));
  return answer(200, { alerts, nextCursor: null });
};
