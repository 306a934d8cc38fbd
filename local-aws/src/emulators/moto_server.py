"""moto's server as the local stack runs it, standing in for SQS and KMS, with seven changes
made on moto's internals (pinned by scripts/install-local-deps.sh), and an emulation of its own
of the Custom Event Bus (the eventsv2 API), which moto does not have.

- With --kms-state DIR, its KMS keys are made of a key id and key material kept in DIR, so
  what the local stack encrypted under its key still decrypts after a restart (moto keeps
  all its state in memory: this is the KMS counterpart of DynamoDB Local's -dbPath).
- One more route, /_careerctl/messages. SQS has no call that lists the messages in flight
  or delayed. `careerctl local` uses this route to save every message of a queue, with its
  receive count and remaining wait, when it stops, and to put them back when it starts:
  GET ?queue=<queue URL> lists them, POST ?queue=<queue URL> with such a list adds them.
- A long poll that behaves as SQS's does on a FIFO queue. moto's decides once, when it
  starts, which message groups are busy, so a message of a group freed meanwhile waits for
  the poll to end (up to a second per delivery to one subscription); and while the only
  visible messages are in busy groups it spins. This one asks again whenever the queue
  changes (a message added, deleted or made visible) and sleeps otherwise.
- A receive from a FIFO queue that takes as many messages of one group as it can, as SQS's
  does ("FIFO queue delivery logic" in the SQS Developer Guide: it returns as many messages
  with the same message group ID as possible, and messages of other groups only to fill the
  rest). moto takes the visible messages in the order they were sent, whatever their group,
  so a batch from a backlog spread over a subscription's groups held one message of each of
  several groups, and every one of those groups waited for the whole batch (Lambda deletes
  a batch as its invocation returns): a subscription spread over 16 groups had two or three
  batches in flight where SQS gives it one per group.
- SQS's quota of messages in flight, for the scale model (contract section 22): POST
  /_careerctl/in-flight-quota?queue=<queue URL>&quota=<n> sets it for one queue (SQS's is about
  120,000 a standard queue and 120,000 a FIFO queue; none is set otherwise). A receive then
  takes at most what the quota leaves, and nothing while the queue holds that many in flight:
  as on SQS, a long poll simply returns nothing.
- SQS's 12-hour limit on a message's visibility as SQS counts it: from the message's latest
  receive (moto counts from its send, and so refuses a retry lane's late waits that SQS takes).
- Requests whose cost does not grow with the queue's depth, as on SQS. moto reads one
  attribute (the retention period, the content-based de-duplication flag) by computing all
  of them, which counts the queue's messages three times over with a clock read per message:
  for every message it receives, and for every message sent. With a few hundred messages
  waiting (a hanging receiver's retries) each receive held the queue's lock and the GIL for
  tens of milliseconds, and every other request, another user's included, waited behind it.
  Here the retention period is read directly, and each count reads the clock once.

- The Custom Event Bus (contract section 17's `aws_eventbus`): CreateEventBus, ListEventBuses
  (by name prefix, one page), DeleteEventBus and PutEvents of the eventsv2 API, in its RPC v2 CBOR protocol (POST
  /service/AWSEventsV2/operation/<name>), read and answered with botocore's own CBOR parser and
  serializer and its eventbridgev2 model (botocore comes with moto: nothing hand-written, no
  other package). A bus belongs to the account of moto's account header (its ARN
  `arn:aws:events:<region>:<account>:event-busv2/<name>/<25 lowercase letters and digits>`), a
  PutEvents to one that does not exist is a ResourceNotFoundException, and the bus keeps every
  entry it was put, each with its event group and deduplication id (nothing is dropped as a
  duplicate). As a bus retains its events, GET /_careerctl/event-bus?arn=<bus ARN> lists them,
  for the receiver's tests. IAM is the local stack's: it evaluates each PutEvents signed by a
  receiver's role before it arrives here (local-aws/src/iam.rs).

Unlike moto_server it leaves SIGINT as it finds it (ignored, under careerctl's watchdog): a
Ctrl-C in the terminal must not end it before careerctl has saved the queues.
"""

import argparse
import base64
import json
import os
import secrets
import string
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import botocore.session
from botocore.parsers import RpcV2CBORParser
from botocore.serialize import RpcV2CBORSerializer

import moto.kms.models as kms
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.sqs.exceptions import InvalidParameterValue, ReceiptHandleIsInvalid
from moto.sqs.models import Message, Queue, SQSBackend, sqs_backends
from werkzeug.serving import run_simple
from werkzeug.wrappers import Request, Response

ROUTE = "/_careerctl/messages"
QUOTA_ROUTE = "/_careerctl/in-flight-quota"
# Each queue's in-flight quota, by queue name, where the scale model set one.
IN_FLIGHT_QUOTAS = {}
REGION = "us-east-1"


def backend_and_name(queue_url):
    """A queue URL ends in /<account>/<name>."""
    account, name = queue_url.rstrip("/").split("/")[-2:]
    return sqs_backends[account][REGION], name


def list_messages(queue_url):
    backend, name = backend_and_name(queue_url)
    now = time.time() * 1000
    return [
        {
            "body": message.body,
            "groupId": message.group_id,
            "receiveCount": message.approximate_receive_count,
            "waitMillis": int(max(0, message.visible_at - now, message.delayed_until - now)),
        }
        for message in list(backend.get_queue(name)._messages)
    ]


def add_messages(queue_url, saved):
    backend, name = backend_and_name(queue_url)
    for entry in saved:
        group = entry.get("groupId")
        message = backend.send_message(
            name, entry["body"], group_id=group, deduplication_id=uuid.uuid4().hex if group else None
        )
        message.approximate_receive_count = entry["receiveCount"]
        message.delayed_until = time.time() * 1000 + entry["waitMillis"]
    return len(saved)


moto_receive = SQSBackend.receive_message
moto_delete = Queue.delete_message
moto_mark_received = Message.mark_received

# SQS keeps a message in flight at most this long after it was received.
MAX_IN_FLIGHT_MILLIS = 43200 * 1000


def seconds_until_next_change(queue, longest):
    """Until the next message of `queue` becomes visible or its delay ends, at most `longest`."""
    now = time.time() * 1000
    times = [t for m in queue._messages for t in (m.visible_at, m.delayed_until) if t > now]
    if not times:
        return longest
    return min(longest, (min(times) - now) / 1000 + 0.001)


def in_flight(message, now):
    return not now > message.visible_at


def receive_message(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None):
    queue = self.get_queue(queue_name)
    deadline = time.time() + (wait_seconds_timeout or 0)
    quota = IN_FLIGHT_QUOTAS.get(queue_name)
    # Holding the queue's condition from the check to the wait, no change goes unnoticed.
    with queue._messages_lock:
        while True:
            allowed = count if quota is None else min(count, quota - queue.approximate_number_of_messages_not_visible)
            received = []
            if allowed > 0:
                received = moto_receive(self, queue_name, allowed, 0, visibility_timeout, message_attribute_names)
            remaining = deadline - time.time()
            if received or remaining <= 0:
                return received
            queue._messages_lock.wait(timeout=seconds_until_next_change(queue, remaining))


def delete_message(self, receipt_handle):
    with self._messages_lock:
        moto_delete(self, receipt_handle)
        self._messages_lock.notify_all()


def mark_received(self, visibility_timeout=None):
    self.received_at_millis = time.time() * 1000
    moto_mark_received(self, visibility_timeout)


def change_message_visibility(self, queue_name, receipt_handle, visibility_timeout):
    queue = self.get_queue(queue_name)
    message = next((m for m in queue._messages if m.had_receipt_handle(receipt_handle)), None)
    if message is None:
        raise ReceiptHandleIsInvalid
    received_at = getattr(message, "received_at_millis", message.sent_timestamp)
    if time.time() * 1000 + int(visibility_timeout) * 1000 - received_at > MAX_IN_FLIGHT_MILLIS:
        raise InvalidParameterValue(
            f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
            "VisibilityTimeout for the message is beyond the limit [43200 seconds]"
        )
    message.change_visibility(visibility_timeout)
    with queue._messages_lock:
        if message.visible and message in queue.pending_messages:
            queue.pending_messages.remove(message)
        queue._messages_lock.notify_all()


def valid_for_retention_period(self, queue_name, message):
    retention_seconds = int(self.get_queue(queue_name).message_retention_period)
    return message.sent_timestamp / 1000 + retention_seconds > time.time()


def counted(test):
    """A count of the queue's messages for which `test(message, now in ms)` holds."""

    def count(queue):
        now = time.time() * 1000
        return sum(1 for message in queue._messages if test(message, now))

    return property(count)


def receivable(message, now):
    return now > message.visible_at and not now < message.delayed_until


def visible_messages(queue):
    """The messages a receive may take, in the order it takes them: on a FIFO queue each
    group's together, the groups in the order of their oldest visible message (a group's own
    messages keep theirs), so moto's receive, which skips the groups in flight, fills its batch
    from one group before it takes another's."""
    now = time.time() * 1000
    visible = [message for message in queue._messages if receivable(message, now)]
    if not queue.fifo_queue:
        return visible
    first = {}
    for position, message in enumerate(visible):
        first.setdefault(message.group_id, position)
    return sorted(visible, key=lambda message: first[message.group_id])


SQSBackend.receive_message = receive_message
SQSBackend.is_message_valid_based_on_retention_period = valid_for_retention_period
Queue.messages = property(visible_messages)
Queue.approximate_number_of_messages = counted(receivable)
Queue.approximate_number_of_messages_delayed = counted(lambda message, now: now < message.delayed_until)
Queue.approximate_number_of_messages_not_visible = counted(in_flight)
Queue.delete_message = delete_message
SQSBackend.change_message_visibility = change_message_visibility
Message.mark_received = mark_received


EVENTSV2_PATH = "/service/AWSEventsV2/operation/"
EVENT_BUS_ROUTE = "/_careerctl/event-bus"
EVENTSV2 = botocore.session.get_session().get_service_model("eventbridgev2")
DEFAULT_ACCOUNT = "123456789012"
# Each Custom Event Bus by ARN: the entries it was put, in order.
BUSES = {}
BUSES_LOCK = threading.Lock()


def cbor_answer(value, shape, status=200):
    """`value` encoded as the model's `shape`, as the service answers."""
    body = bytearray()
    RpcV2CBORSerializer()._serialize_data_item(body, value, shape)
    return Response(bytes(body), status=status, content_type="application/cbor", headers={"smithy-protocol": "rpc-v2-cbor"})


def cbor_error(code, message):
    """The error `code` of the model (its HTTP status), its `__type` naming it."""
    text = EVENTSV2.shape_for("String")
    pairs = SimpleNamespace(type_name="map", key=text, value=text)
    status = EVENTSV2.shape_for(code).metadata["error"]["httpStatusCode"]
    return cbor_answer({"__type": code, "Message": message}, pairs, status)


def eventsv2(request):
    operation = request.path[len(EVENTSV2_PATH) :]
    parser = RpcV2CBORParser()
    body = request.get_data()
    given = parser.parse_data_item(parser.get_peekable_stream_from_bytes(body)) if body else {}
    output = EVENTSV2.operation_model(operation).output_shape if operation in EVENTSV2.operation_names else None
    account = request.headers.get("x-moto-account-id", DEFAULT_ACCOUNT)
    in_account = f"arn:aws:events:{REGION}:{account}:event-busv2/"
    with BUSES_LOCK:
        if operation == "CreateEventBus":
            prefix = f"{in_account}{given['Name']}/"
            if any(arn.startswith(prefix) for arn in BUSES):
                return cbor_error("ResourceAlreadyExistsException", f"Event bus {given['Name']} already exists.")
            arn = prefix + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(25))
            BUSES[arn] = []
            return cbor_answer({"EventBusArn": arn, "Name": given["Name"], "State": "ACTIVE"}, output)
        if operation == "ListEventBuses":
            named = in_account + given.get("NamePrefix", "")
            buses = [
                {"Name": arn.split("/")[1], "EventBusArn": arn, "State": "ACTIVE"}
                for arn in BUSES
                if arn.startswith(named)
            ]
            return cbor_answer({"EventBuses": buses}, output)
        arn = given.get("EventBusArn", "")
        if operation not in ("DeleteEventBus", "PutEvents"):
            return cbor_error("InvalidInputException", f"The local stack does not emulate {operation}.")
        if arn not in BUSES:
            return cbor_error("ResourceNotFoundException", f"Event bus {arn} does not exist.")
        if operation == "DeleteEventBus":
            del BUSES[arn]
            return cbor_answer({}, output)
        results = []
        for entry in given.get("Entries", []):
            metadata = entry.get("SystemMetadata", {})
            held = {
                "eventId": str(uuid.uuid4()),
                "source": entry["Source"],
                "detailType": entry["DetailType"],
                "detail": entry.get("Detail"),
                "eventGroupId": metadata.get("EventGroupId"),
                "deduplicationId": metadata.get("DeduplicationId"),
                "sequenceNumber": str(len(BUSES[arn]) + 1),
            }
            BUSES[arn].append(held)
            results.append(
                {"EventId": held["eventId"], "SequenceNumber": held["sequenceNumber"], "SuccessCode": "PUBLISHED"}
            )
        return cbor_answer({"FailedEntryCount": 0, "Entries": results}, output)


def held_events(request):
    with BUSES_LOCK:
        held = BUSES.get(request.args["arn"])
    if held is None:
        return Response(json.dumps({"error": "no such bus"}), status=404, mimetype="application/json")
    return Response(json.dumps(held), mimetype="application/json")


class WithSavedMessages:
    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path.startswith(EVENTSV2_PATH):
            return eventsv2(Request(environ))(environ, start_response)
        if path == EVENT_BUS_ROUTE:
            return held_events(Request(environ))(environ, start_response)
        if environ.get("PATH_INFO") == QUOTA_ROUTE:
            request = Request(environ)
            _, name = backend_and_name(request.args["queue"])
            IN_FLIGHT_QUOTAS[name] = int(request.args["quota"])
            return Response("{}", mimetype="application/json")(environ, start_response)
        if environ.get("PATH_INFO") != ROUTE:
            return self.app(environ, start_response)
        request = Request(environ)
        queue_url = request.args["queue"]
        if request.method == "POST":
            result = add_messages(queue_url, json.loads(request.get_data()))
        else:
            result = list_messages(queue_url)
        return Response(json.dumps(result), mimetype="application/json")(environ, start_response)


def keep_kms_keys_in(state):
    state.mkdir(parents=True, exist_ok=True)
    kept = state / "kms-key.json"
    if not kept.exists():
        fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"keyId": str(uuid.uuid4()), "material": base64.b64encode(os.urandom(32)).decode()}, out)
    key = json.loads(kept.read_text())
    kms.generate_key_id = lambda multi_region=False: key["keyId"]
    kms.generate_master_key = lambda: base64.b64decode(key["material"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    parser.add_argument("--kms-state", type=Path)
    args = parser.parse_args()
    if args.kms_state:
        keep_kms_keys_in(args.kms_state)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = WithSavedMessages(DomainDispatcherApplication(create_backend_app))
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
