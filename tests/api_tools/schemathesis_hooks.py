"""Schemathesis hooks for tests/it/api_tools.rs: the one place that names what Schemathesis is
told beyond openapi.yaml, each with the reason the document cannot say it.

1. Webhook targets. The fuzzer must never make the stack call a host other than the test's
   loopback receiver, so every `url` it sends on create or update that the service could accept
   (a string of at most 2048 characters) becomes the receiver's URL. A `url` that is too long or
   no string is sent as generated (rejected either way), so negative cases keep their meaning.
   URL validation itself is covered by tests/it/api_webhooks.rs.
2. The subscription limit. A user has at most 25 subscriptions (400 `webhooks.limit_exceeded`),
   which no schema can express; before a create, the oldest subscriptions beyond 15 are deleted.
3. The opaque cursor. `cursor` is a string the service signed; any other string gets 400
   `request.invalid_cursor`, which a schema cannot express. The failure "positive data
   rejected" is dropped for exactly that answer to a request that carried a generated cursor.
   Real cursors are exercised through the `nextPage` link in the stateful phase.
4. Integral floats. JSON Schema counts `285.0` as an integer, so `gracePeriodSeconds: 285.0`
   is schema-valid; the service reads the number as written and answers 400
   `webhooks.invalid_grace_period` (contract: "an integer 0–604800"). No schema can tell `285`
   from `285.0`, so that failure is dropped for exactly that answer to such a body.
5. The recovery window. `since` must lie within the last 30 days (the delivery log's
   retention) and before `until`: relative to the time of the call, which no schema can say.
   The failure "positive data rejected" is dropped for exactly 400
   `webhooks.invalid_recover_window` to a recover call. Windows are covered by
   tests/it/self_healing.rs and tests/it/openapi.rs.
6. Signing keys. GET /api/v1/webhooks/signing-keys answers 400 `webhooks.asymmetric_signing_off`
   for a subscription whose `asymmetricSigning` is off: state, which no schema of the request can
   say. The failure "positive data rejected" is dropped for exactly that answer to that call.
   The keys are covered by tests/it/receivers.rs and tests/it/openapi.rs.
7. Where a subscription delivers. A create needs exactly one of `url` and `destination`;
   SubscriptionCreate says so in its description only, being one object (a `oneOf` of two
   would give a generated client no class for the body), so a body with neither is
   schema-valid. The failure "positive data rejected" is dropped for exactly 400
   `webhooks.missing_required_fields` to a create whose `events` is given and whose `url`
   and `destination` are both absent or `null`.
8. Destination rules across fields and state. A destination's role must be in its queue's
   or bus's account and partition, with an IAM name and path; on PATCH, `url` is taken only
   by a subscription with a URL and `destination` only by one with a destination. No schema
   of the request can say these (QueueUrl also describes the local emulator's queue URLs the
   responses carry), so that failure is dropped for exactly 400 `webhooks.invalid_destination`
   to a create carrying a `destination` object, or to a PATCH carrying `url` or
   `destination`. The rules are covered by tests/it/destinations_api.rs and the unit tests
   of webhooks::destination.
9. Identity tokens on destinations. `identityToken` is only for a subscription with a `url`
   (contract section 21): a create with a `destination` and a token, or a PATCH setting a token
   on a subscription that has a destination (state), gets 400
   `webhooks.invalid_identity_token`. SubscriptionCreate says so in its description only (a
   cross-field rule beside (7)'s), so that failure is dropped for exactly that answer to a
   create carrying a `destination` object and an `identityToken` object, or to a PATCH
   carrying an `identityToken` object. The rule is covered by tests/it/identity_tokens.rs.
10. The replay window. As (5) for a replay (contract section 20): `since` within the last 30
   days and before `until`, relative to the time of the call. The failure "positive data
   rejected" is dropped for exactly 400 `webhooks.invalid_replay` to a replay call whose message
   names `since` or `until` (the body's other rules are the schema's). Replays are covered by
   tests/it/lifecycle_replay.rs and tests/it/openapi.rs.
"""

import os

import requests
import schemathesis

API = os.environ["CAREER_API_URL"]
KEY = os.environ["CAREER_API_KEY"]
RECEIVER = os.environ["CAREER_WEBHOOK_URL"]
KEEP = 15


def _is_create(case):
    return case.operation.method.upper() == "POST" and case.operation.path == "/api/v1/webhooks"


def _sets_url(case):
    return case.operation.method.upper() in ("POST", "PATCH") and case.operation.path == "/api/v1/webhooks"


def _make_room():
    auth = {"Authorization": f"Bearer {KEY}"}
    listed = requests.get(f"{API}/api/v1/webhooks", headers=auth, timeout=10)
    listed.raise_for_status()
    subscriptions = sorted(listed.json()["webhooks"], key=lambda s: s["createdAt"])
    for old in subscriptions[: max(0, len(subscriptions) - KEEP)]:
        requests.delete(f"{API}/api/v1/webhooks", params={"id": old["id"]}, headers=auth, timeout=10)


@schemathesis.hook
def before_call(context, case, kwargs):
    if not _sets_url(case):
        return
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("url"), str) and len(body["url"]) <= 2048:
        body["url"] = RECEIVER  # (1)
    if _is_create(case):
        _make_room()  # (2)


def _integral_float_grace(case):
    grace = case.body.get("gracePeriodSeconds") if isinstance(case.body, dict) else None
    return isinstance(grace, float) and grace.is_integer()


def _targets_nothing(body):
    return (
        isinstance(body, dict)
        and body.get("events") is not None
        and body.get("url") is None
        and body.get("destination") is None
    )


def _names_a_destination(case):
    body = case.body if isinstance(case.body, dict) else {}
    if case.operation.method.upper() == "PATCH":
        return "url" in body or "destination" in body
    return isinstance(body.get("destination"), dict)


def _sets_a_token_maybe_on_a_destination(case):
    body = case.body if isinstance(case.body, dict) else {}
    if not isinstance(body.get("identityToken"), dict):
        return False
    return case.operation.method.upper() == "PATCH" or isinstance(body.get("destination"), dict)


def _names_the_window(response):
    message = response.json()["error"]["message"]
    return "'since'" in message or "'until'" in message


@schemathesis.hook
def filter_failure(context, failure, case, response):
    if response.status_code != 400:
        return True
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return True
    if code == "request.invalid_cursor" and "cursor" in (case.query or {}):
        return False  # (3)
    if code == "webhooks.invalid_grace_period" and _integral_float_grace(case):
        return False  # (4)
    if code == "webhooks.invalid_recover_window" and case.operation.path == "/api/v1/webhooks/recover":
        return False  # (5)
    if code == "webhooks.asymmetric_signing_off" and case.operation.path == "/api/v1/webhooks/signing-keys":
        return False  # (6)
    if code == "webhooks.missing_required_fields" and _is_create(case) and _targets_nothing(case.body):
        return False  # (7)
    if code == "webhooks.invalid_destination" and _sets_url(case) and _names_a_destination(case):
        return False  # (8)
    if code == "webhooks.invalid_identity_token" and _sets_url(case) and _sets_a_token_maybe_on_a_destination(case):
        return False  # (9)
    if code == "webhooks.invalid_replay" and case.operation.path == "/api/v1/webhooks/replay" and _names_the_window(response):
        return False  # (10)
    return True
