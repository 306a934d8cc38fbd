"""A webhook receiver for the tests, verifying with the `standardwebhooks` package from PyPI.

For each request: verifies it against each secret in the file WEBHOOK_SECRETS_FILE (one per
line, read anew for every request), prints one JSON line, and answers the next status of
STATUSES (comma-separated; the last one repeats). Listens on 127.0.0.1:RECEIVER_PORT.
"""
import http.server
import json
import os

from standardwebhooks import Webhook

statuses = [int(status) for status in os.environ.get("STATUSES", "204").split(",")]
answered = 0


def verifies(secret, body, headers):
    try:
        Webhook(secret).verify(body, headers)
        return True
    except Exception:
        return False


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        global answered
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open(os.environ["WEBHOOK_SECRETS_FILE"]) as secrets:
            verified = [verifies(line.strip(), body, dict(self.headers)) for line in secrets if line.strip()]
        status = statuses[min(answered, len(statuses) - 1)]
        answered += 1
        line = {"webhookId": self.headers["webhook-id"], "timestamp": self.headers["webhook-timestamp"],
                "verified": verified, "status": status}
        print(json.dumps(line), flush=True)
        self.send_response(status)
        self.end_headers()


http.server.HTTPServer(("127.0.0.1", int(os.environ["RECEIVER_PORT"])), Receiver).serve_forever()
