"""Drives every operation of the service through a client that openapi-python-client
generated from openapi.yaml (with one event kind left out of the document, so the client
meets a kind it does not know). Exits non-zero, saying why, on the first surprise.

Environment: CAREER_API_URL, CAREER_API_KEY, CAREER_WEBHOOK_URL (a loopback receiver),
CAREER_ALERT_ID (an alert of the key's user), CAREER_UNKNOWN_KIND (the kind left out).
"""
import datetime
import os
import sys
import time

import httpx
from career_client import AuthenticatedClient
from career_client.api.alerts import list_alerts, update_alert
from career_client.api.data_sharing import get_data_sharing_preferences, update_data_sharing_preferences
from career_client.api.webhooks import (
    create_webhook_subscription,
    delete_webhook_subscription,
    enable_webhook_subscription,
    get_webhook_health,
    list_webhook_deliveries,
    list_webhook_subscriptions,
    ping_webhook_subscription,
    cancel_webhook_deliveries,
    recover_webhook_deliveries,
    replay_webhook_deliveries,
    retry_webhook_delivery,
    list_webhook_event_types,
    list_webhook_signing_keys,
    rotate_webhook_secret,
    update_webhook_subscription,
)
from career_client.models import AlertAction, AlertActionAction, KnownEventType, PreferencesUpdate, SecretRotation
from career_client.models import CancelRequest, RecoverWindow, ReplayRequest, ReplayRequestStatusItem, SubscriptionCreate, SubscriptionUpdate

API, KEY = os.environ["CAREER_API_URL"], os.environ["CAREER_API_KEY"]
RECEIVER, ALERT = os.environ["CAREER_WEBHOOK_URL"], os.environ["CAREER_ALERT_ID"]
UNKNOWN_KIND = os.environ["CAREER_UNKNOWN_KIND"]
client = AuthenticatedClient(base_url=API, token=KEY, raise_on_unexpected_status=True)


def expect(what, response, status):
    if response.status_code != status or response.parsed is None:
        sys.exit(f"{what}: expected {status} and a parsed body, got {response.status_code}: {response.content!r}")
    print(f"{what}: {status}")
    return response.parsed


alerts = expect("list alerts", list_alerts.sync_detailed(client=client, include_read=True), 200)
if ALERT not in [alert.id for alert in alerts.alerts]:
    sys.exit(f"list alerts: {ALERT} is missing")
marked = expect("mark read", update_alert.sync_detailed(client=client, id=ALERT, body=AlertAction(AlertActionAction.READ)), 200)
assert marked.read, marked

expect("get preferences", get_data_sharing_preferences.sync_detailed(client=client), 200)
updated = expect("put preferences", update_data_sharing_preferences.sync_detailed(client=client, body=PreferencesUpdate(share_profile_data=True)), 200)

created = expect("create", create_webhook_subscription.sync_detailed(client=client, body=SubscriptionCreate(url=RECEIVER, events=[KnownEventType("profile.updated")])), 201)
rotated = expect("rotate", rotate_webhook_secret.sync_detailed(client=client, id=created.id, body=SecretRotation(grace_period_seconds=0)), 200)
assert rotated.secret != created.secret
ping = expect("ping", ping_webhook_subscription.sync_detailed(client=client, id=created.id), 202)
deadline = time.monotonic() + 20
while True:
    log = expect("list deliveries", list_webhook_deliveries.sync_detailed(client=client, id=created.id), 200)
    if any(record.id == ping.id and str(record.status) == "succeeded" for record in log.deliveries):
        break
    if time.monotonic() > deadline:
        sys.exit(f"the ping {ping.id} was not delivered: {log}")
    time.sleep(0.2)
expect("retry", retry_webhook_delivery.sync_detailed(client=client, id=ping.id), 202)
health = expect("health", get_webhook_health.sync_detailed(client=client, id=created.id), 200)
if str(health.state) not in ("healthy", "failing") or health.to_dict()["last24h"]["attempts"] < 1:
    sys.exit(f"health after a delivered ping: {health}")

signed = expect("create with a key pair", create_webhook_subscription.sync_detailed(client=client, body=SubscriptionCreate(url=RECEIVER, events=[KnownEventType("profile.updated")], asymmetric_signing=True)), 201)
keys = expect("signing keys", list_webhook_signing_keys.sync_detailed(client=client, id=signed.id), 200)
if [(key.public_key, str(key.status), key.expires_at) for key in keys.keys] != [(signed.public_key, "current", None)]:
    sys.exit(f"signing keys: {keys} for {signed}")
turned = expect("rotate with a key pair", rotate_webhook_secret.sync_detailed(client=client, id=signed.id), 200)
if turned.public_key == signed.public_key or turned.previous_public_key != signed.public_key:
    sys.exit(f"rotate with a key pair: {turned}")
off = expect("asymmetric signing off", update_webhook_subscription.sync_detailed(client=client, id=signed.id, body=SubscriptionUpdate(asymmetric_signing=False)), 200)
if off.public_key is not None or off.previous_public_key is not None:
    sys.exit(f"asymmetric signing off: {off}")
refused = expect("signing keys when off", list_webhook_signing_keys.sync_detailed(client=client, id=signed.id), 400)
if refused.error.code != "webhooks.asymmetric_signing_off":
    sys.exit(f"signing keys when off: {refused}")
expect("delete", delete_webhook_subscription.sync_detailed(client=client, id=signed.id), 200)

traced = expect("create with trace context", create_webhook_subscription.sync_detailed(client=client, body=SubscriptionCreate(url=RECEIVER, events=[KnownEventType("profile.updated")], trace_context=True)), 201)
if traced.trace_context is not True or created.trace_context is not False:
    sys.exit(f"trace context: {traced} and {created}")
untraced = expect("trace context off", update_webhook_subscription.sync_detailed(client=client, id=traced.id, body=SubscriptionUpdate(trace_context=False)), 200)
if untraced.trace_context is not False:
    sys.exit(f"trace context off: {untraced}")
expect("delete the traced one", delete_webhook_subscription.sync_detailed(client=client, id=traced.id), 200)

# A subscription to a kind this client does not know, made outside it: the client still reads it.
raw = httpx.post(f"{API}/api/v1/webhooks", headers={"Authorization": f"Bearer {KEY}"},
                 json={"url": RECEIVER, "events": [UNKNOWN_KIND]})
if raw.status_code != 201:
    sys.exit(f"create with {UNKNOWN_KIND}: {raw.status_code} {raw.text}")
unknown_id = raw.json()["id"]
listed = expect("list", list_webhook_subscriptions.sync_detailed(client=client), 200)
kinds = {subscription.id: [str(kind) for kind in subscription.events] for subscription in listed.webhooks}
if kinds.get(unknown_id) != [UNKNOWN_KIND]:
    sys.exit(f"list: the unknown kind did not come through: {kinds}")
expect("rotate the unknown kind's", rotate_webhook_secret.sync_detailed(client=client, id=unknown_id), 200)
expect("enable", enable_webhook_subscription.sync_detailed(client=client, id=unknown_id), 200)
paused = expect("pause", update_webhook_subscription.sync_detailed(client=client, id=created.id, body=SubscriptionUpdate(enabled=False)), 200)
if paused.enabled or str(paused.disabled_reason) != "manual":
    sys.exit(f"pause: {paused}")
skipped = expect("ping while paused", ping_webhook_subscription.sync_detailed(client=client, id=created.id), 202)
if str(skipped.status) != "skipped":
    sys.exit(f"ping while paused: {skipped}")
moved = expect("update", update_webhook_subscription.sync_detailed(client=client, id=created.id, body=SubscriptionUpdate(url=RECEIVER + "?moved=1", enabled=True)), 200)
if not moved.enabled or moved.url != RECEIVER + "?moved=1":
    sys.exit(f"update: {moved}")
an_hour_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
recovering = expect("recover", recover_webhook_deliveries.sync_detailed(client=client, id=created.id, body=RecoverWindow(since=an_hour_ago)), 202)
# The ping skipped while paused, at least (the first ping's retry may have met the pause too).
if recovering.recovering < 1 or recovering.more:
    sys.exit(f"recover: {recovering}")
# Nothing failed or skipped is left in the window: the recovery sent it again.
replay = ReplayRequest(since=an_hour_ago, subscription_ids=[created.id], dry_run=True)
matching = expect("replay, dry run", replay_webhook_deliveries.sync_detailed(client=client, body=replay), 200)
if matching.more or matching.by_subscription.additional_properties.get(created.id) != matching.matching:
    sys.exit(f"replay, dry run: {matching}")
replay = ReplayRequest(since=an_hour_ago, subscription_ids=[created.id], status=[ReplayRequestStatusItem("succeeded")])
replaying = expect("replay", replay_webhook_deliveries.sync_detailed(client=client, body=replay), 202)
if replaying.more or replaying.by_subscription.additional_properties.get(created.id) != replaying.replaying:
    sys.exit(f"replay: {replaying}")
cancelled = expect("cancel", cancel_webhook_deliveries.sync_detailed(client=client, id=created.id, body=CancelRequest()), 202)
if cancelled.more:
    sys.exit(f"cancel: {cancelled}")
catalog = expect("event types", list_webhook_event_types.sync_detailed(client=client), 200)
names = [str(event_type.name) for event_type in catalog.event_types]
if UNKNOWN_KIND not in names or "webhook.ping" not in names:
    sys.exit(f"event types: {names}")
for subscription in (created.id, unknown_id):
    expect("delete", delete_webhook_subscription.sync_detailed(client=client, id=subscription), 200)
print("every operation answered as documented")
