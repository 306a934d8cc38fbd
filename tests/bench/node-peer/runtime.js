// A stand-in for the Node.js runtime's interface client: loads the handler (init), then
// asks the Lambda runtime API for work and posts each result, as a custom runtime does.
// It uses node:http like the runtime API client, so no fetch/undici load is added to init.
"use strict";

const http = require("node:http");
const { handler } = require("./handler.js");

const [host, port] = process.env.AWS_LAMBDA_RUNTIME_API.split(":");
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function call(method, path, body) {
  return new Promise((resolve, reject) => {
    const request = http.request({ host, port, method, path, agent }, (response) => {
      const chunks = [];
      response.on("data", (chunk) => chunks.push(chunk));
      response.on("end", () => resolve({ headers: response.headers, body: Buffer.concat(chunks).toString() }));
    });
    request.on("error", reject);
    request.end(body);
  });
}

(async () => {
  for (;;) {
    const next = await call("GET", "/2018-06-01/runtime/invocation/next");
    const id = next.headers["lambda-runtime-aws-request-id"];
    let path = `/2018-06-01/runtime/invocation/${id}/response`;
    let result;
    try {
      result = JSON.stringify(await handler(JSON.parse(next.body)));
    } catch (error) {
      path = `/2018-06-01/runtime/invocation/${id}/error`;
      result = JSON.stringify({ errorType: error.name, errorMessage: error.message });
    }
    await call("POST", path, result);
  }
})();
