// A webhook receiver for the tests, verifying with the `standardwebhooks` package from npm.
//
// For each request: verifies it against each secret in the file WEBHOOK_SECRETS_FILE (one per
// line, read anew for every request), prints one JSON line, and answers the next status of
// STATUSES (comma-separated; the last one repeats). Listens on 127.0.0.1:RECEIVER_PORT.
const fs = require("node:fs");
const http = require("node:http");
const { Webhook } = require("standardwebhooks");

const statuses = (process.env.STATUSES || "204").split(",").map(Number);
let answered = 0;

function verifies(secret, body, headers) {
  try {
    new Webhook(secret).verify(body, headers);
    return true;
  } catch {
    return false;
  }
}

http
  .createServer((req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const secrets = fs.readFileSync(process.env.WEBHOOK_SECRETS_FILE, "utf8").split("\n").filter(Boolean);
      const verified = secrets.map((secret) => verifies(secret.trim(), body, req.headers));
      const status = statuses[Math.min(answered, statuses.length - 1)];
      answered += 1;
      const line = {
        webhookId: req.headers["webhook-id"],
        timestamp: req.headers["webhook-timestamp"],
        verified,
        status,
      };
      console.log(JSON.stringify(line));
      res.writeHead(status).end();
    });
  })
  .listen(Number(process.env.RECEIVER_PORT), "127.0.0.1");
