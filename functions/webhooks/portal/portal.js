// The webhook portal (contract section 14): signing in with a key, the subscriptions, and
// one subscription's actions, chart and delivery log. Every change goes through the public
// API (api.js); every refusal shows the API's message and code. Nothing here writes HTML
// from data: text goes in with textContent, so a URL or an answer's body stays text.

import { Api, ApiError } from './api.js';
import { drawHealth, drawOutcomes } from './chart.js';

/** The key lives in this tab's sessionStorage only (contract section 14). */
const KEY_STORAGE = 'career-portal-key';
/** While a shown delivery is pending, the log is read again this often, this many times. */
const REFRESH_EVERY_MS = 2000;
const REFRESHES_PER_ACTION = 30;
/** How many of the newest deliveries the chart counts. */
const CHART_DELIVERIES = 100;

const $ = (id) => document.getElementById(id);

const state = {
  api: null,
  kinds: [],
  current: null,
  log: { cursors: [null], page: 0, nextCursor: null, deliveries: [] },
  delivery: null,
  refreshTimer: null,
  refreshesLeft: 0,
};

// ------------------------------------------------------------------ small helpers

function el(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    element.setAttribute(name, value === true ? '' : String(value));
  }
  element.append(...children.filter((child) => child !== undefined && child !== null));
  return element;
}

function time(iso) {
  if (!iso) return '—';
  return el('time', { datetime: iso, title: iso }, new Date(iso).toLocaleString());
}

function localInputValue(date) {
  const pad = (n) => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`
    + `T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

function showProblem(context, err) {
  const parts = [el('strong', {}, `${context}: `), err.message, ' '];
  if (err instanceof ApiError) {
    parts.push(el('code', { class: 'error-code' }, err.code));
    if (err.requestId) parts.push(el('span', { class: 'request-id' }, ` (request ${err.requestId})`));
  }
  $('notice').replaceChildren();
  $('problem').replaceChildren(el('p', {}, ...parts));
}

/** `text` with its Markdown code spans (`…`) as code elements, the rest as text. */
function withCodeSpans(text) {
  return text.split('`').map((part, i) => (i % 2 === 1 ? el('code', {}, part) : part));
}

/**
 * Why a delivery just recorded was skipped. A queued one's later status is the log's to show,
 * so a notice does not repeat the status it had when it was queued.
 */
const SKIPPED = 'the subscription is paused or disabled, so nothing is sent.';

function showNotice(text) {
  $('problem').replaceChildren();
  $('notice').replaceChildren(el('p', {}, text));
}

function clearMessages() {
  $('problem').replaceChildren();
  $('notice').replaceChildren();
}

/**
 * Runs `work` for `context` with `button` disabled meanwhile. A refused key signs out; any
 * other failure is shown with the API's message and code.
 */
async function act(context, work, button) {
  if (button) button.disabled = true;
  try {
    return await work();
  } catch (err) {
    if (err instanceof ApiError && err.unauthorized) {
      signOut({ context: 'Your key is no longer accepted (it may have expired); sign in again', err });
    } else {
      showProblem(context, err);
    }
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

function showView(id) {
  for (const view of ['sign-in-view', 'list-view', 'detail-view']) $(view).hidden = view !== id;
  $('sign-out').hidden = id === 'sign-in-view';
  const title = $(id).querySelector('h1');
  title.focus();
}

/** Keeps keyboard focus on the same control when a part of the page is drawn again. */
function keepingFocus(draw) {
  const key = document.activeElement?.dataset?.focusKey;
  draw();
  if (key) document.querySelector(`[data-focus-key="${CSS.escape(key)}"]`)?.focus();
}

// ------------------------------------------------------------------ signing in and out

/** A `#key=cak_…` fragment is taken into sessionStorage and removed from the address at once. */
function takeKeyFromFragment() {
  if (!location.hash) return false;
  const key = new URLSearchParams(location.hash.slice(1)).get('key');
  history.replaceState(history.state, '', location.pathname + location.search);
  if (!key) return false;
  sessionStorage.setItem(KEY_STORAGE, key);
  return true;
}

async function enter() {
  const key = sessionStorage.getItem(KEY_STORAGE);
  if (!key) {
    showView('sign-in-view');
    return;
  }
  state.api = new Api(key);
  try {
    const { webhooks } = await state.api.listSubscriptions();
    clearMessages();
    renderSubscriptions(webhooks);
    showView('list-view');
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
      const why = err.status === 401
        ? 'That key is not accepted: paste the whole key (it starts with cak_), and check that it has not expired or been revoked'
        : 'That key cannot manage webhooks: it needs the scopes read:webhooks and write:webhooks';
      signOut({ context: why, err });
    } else {
      showView('list-view');
      showProblem('Could not load your subscriptions', err);
    }
    return;
  }
  await loadEventKinds();
}

function signOut(reason) {
  sessionStorage.removeItem(KEY_STORAGE);
  stopRefreshing();
  Object.assign(state, { api: null, kinds: [], current: null, delivery: null });
  $('subscriptions').replaceChildren();
  $('log').replaceChildren();
  $('chart').replaceChildren();
  $('health').replaceChildren();
  $('health-chart').replaceChildren();
  for (const dialog of document.querySelectorAll('dialog[open]')) dialog.close();
  showView('sign-in-view');
  if (reason) {
    showProblem(reason.context, reason.err);
  } else {
    showNotice('Signed out: this tab no longer holds your key.');
  }
}

// ------------------------------------------------------------------ event kinds

async function loadEventKinds() {
  const types = await act('Could not load the event kinds', () => state.api.eventTypes());
  if (!types) return;
  state.kinds = types.eventTypes.filter((type) => type.subscribable);
  for (const fieldset of document.querySelectorAll('fieldset[data-kinds]')) {
    const prefix = fieldset.dataset.kinds;
    const boxes = state.kinds.map((kind) => {
      const id = `${prefix}-kind-${kind.name}`;
      const hint = `${id}-hint`;
      return el('div', { class: 'kind' },
        el('input', { type: 'checkbox', id, name: 'events', value: kind.name, 'aria-describedby': hint }),
        el('label', { for: id }, el('code', {}, kind.name)),
        el('span', { id: hint, class: 'hint' }, ...withCodeSpans(kind.description)));
    });
    fieldset.replaceChildren(fieldset.querySelector('legend'), ...boxes);
  }
  if (state.current) fillEditForm(state.current);
}

function checkedKinds(form) {
  return [...form.querySelectorAll('input[name="events"]:checked')].map((box) => box.value);
}

// ------------------------------------------------------------------ the list

function describeState(subscription) {
  if (subscription.enabled && subscription.failingSince) {
    return `Failing since ${new Date(subscription.failingSince).toLocaleString()}`;
  }
  if (subscription.enabled) return 'Healthy';
  const since = subscription.disabledAt ? ` since ${new Date(subscription.disabledAt).toLocaleString()}` : '';
  switch (subscription.disabledReason) {
    case 'manual':
      return `Paused${since}`;
    case 'failing':
      return `Disabled${since}: its deliveries kept failing`;
    case 'gone':
      return `Disabled${since}: the receiver answered 410 Gone`;
    default:
      return `Disabled${since}`;
  }
}

function stateBadge(subscription) {
  const tone = !subscription.enabled ? (subscription.disabledReason === 'manual' ? 'quiet' : 'bad')
    : subscription.failingSince ? 'warn' : 'good';
  return el('span', { class: `badge ${tone}` }, describeState(subscription));
}

/** Whether deliveries carry `traceparent` (contract section 19). */
function traceContext(subscription) {
  return subscription.traceContext ? 'On' : 'Off';
}

/** Where a subscription delivers: its URL, or its AWS destination's queue URL or bus ARN (contract section 17). */
function receiver(subscription) {
  return subscription.url ?? subscription.destination.queueUrl ?? subscription.destination.eventBusArn;
}

function renderSubscriptions(webhooks) {
  const container = $('subscriptions');
  if (webhooks.length === 0) {
    container.replaceChildren(el('p', { class: 'empty' }, 'No subscriptions yet: create one below.'));
    return;
  }
  const rows = webhooks.map((subscription) => {
    const open = el('button', { type: 'button', 'data-focus-key': `open-${subscription.id}`,
      'aria-label': `Manage ${receiver(subscription)}` }, 'Manage');
    open.addEventListener('click', () => openSubscription(subscription));
    return el('tr', { 'data-id': subscription.id },
      el('td', { class: 'url' }, receiver(subscription)),
      el('td', {}, subscription.events.join(', ')),
      el('td', {}, stateBadge(subscription)),
      el('td', {}, traceContext(subscription)),
      el('td', {}, open));
  });
  const columns = ['Receiver', 'Event kinds', 'State', 'Trace context', 'Actions'];
  const head = el('tr', {}, ...columns.map((name) => el('th', { scope: 'col' }, name)));
  keepingFocus(() => container.replaceChildren(el('table', {}, el('thead', {}, head), el('tbody', {}, ...rows))));
}

async function showList(notice) {
  stopRefreshing();
  state.current = null;
  const answer = await act('Could not load your subscriptions', () => state.api.listSubscriptions());
  if (!answer) return;
  renderSubscriptions(answer.webhooks);
  showView('list-view');
  if (notice) showNotice(notice);
  else clearMessages();
}

// ------------------------------------------------------------------ creating

/** Which target the create form is set to: `url`, `aws_sqs`, `aws_eventbridge` or `aws_eventbus`. */
function createTargetType() {
  return $('create-form').querySelector('input[name="target"]:checked').value;
}

/** Shows (and requires) the create form's fields for its target only. */
function showCreateTarget() {
  const type = createTargetType();
  const bus = type === 'aws_eventbridge' || type === 'aws_eventbus';
  const fields = { 'create-url': type === 'url', 'create-queue': type === 'aws_sqs',
    'create-bus': bus, 'create-role': type !== 'url' };
  for (const [id, shown] of Object.entries(fields)) {
    $(`${id}-field`).hidden = !shown;
    $(id).required = shown;
  }
  // An identity token is for HTTP deliveries only (contract section 21), and optional.
  $('create-token-field').hidden = type !== 'url';
  $('create-bus').placeholder = type === 'aws_eventbus'
    ? 'arn:aws:events:eu-west-1:111122223333:event-busv2/webhooks/<its 25-character id>'
    : 'arn:aws:events:eu-west-1:111122223333:event-bus/webhooks';
}

/** The names the portal gives the destination types. */
const DESTINATION_TYPES = { aws_sqs: 'SQS queue', aws_eventbridge: 'EventBridge bus', aws_eventbus: 'Custom Event Bus' };

/** The create form's target as the API takes it: `{ url }` or `{ destination }` (contract section 17). */
function createTarget() {
  const type = createTargetType();
  if (type === 'url') {
    const audience = $('create-token').value.trim();
    return { url: $('create-url').value.trim(), ...(audience && { identityToken: { audience } }) };
  }
  const where = type === 'aws_sqs' ? { queueUrl: $('create-queue').value.trim() } : { eventBusArn: $('create-bus').value.trim() };
  return { destination: { type, ...where, roleArn: $('create-role').value.trim() } };
}

// ------------------------------------------------------------------ secrets

function showSecret(title, secret, expiry) {
  $('secret-title').textContent = title;
  $('secret-value').value = secret;
  $('secret-expiry').textContent = expiry;
  $('copy-result').textContent = '';
  $('secret-dialog').showModal();
  $('copy-secret').focus();
}

/** Copies the value of the input `inputId` (`what` it holds), saying how in `resultId`. */
async function copyValue(inputId, resultId, what) {
  const input = $(inputId);
  try {
    await navigator.clipboard.writeText(input.value);
    $(resultId).textContent = 'Copied to the clipboard.';
  } catch {
    input.select();
    $(resultId).textContent = `The browser refused the clipboard: the ${what} is selected, copy it with Ctrl+C.`;
  }
}

// ------------------------------------------------------------------ one subscription

function renderSummary(subscription) {
  const facts = [
    ['ID', el('code', {}, subscription.id)],
    [subscription.url === null ? 'Destination' : 'Receiver URL', el('span', { class: 'url' }, receiver(subscription))],
    ...destinationFacts(subscription.destination),
    ['Event kinds', subscription.events.join(', ')],
    ['State', stateBadge(subscription)],
    ['Trace context', traceContext(subscription)],
    ['Rate limit', subscription.maxDeliveriesPerSecond === null
      ? 'None' : `At most ${subscription.maxDeliveriesPerSecond} deliveries a second`],
    ['Created', time(subscription.createdAt)],
  ];
  $('summary').replaceChildren(...facts.flatMap(([name, value]) => [el('dt', {}, name), el('dd', {}, value)]));
  $('detail-title').textContent = `Subscription ${receiver(subscription)}`;
  $('pause').hidden = !subscription.enabled;
  $('resume').hidden = subscription.enabled;
  renderSigning(subscription);
  renderAwsPanel(subscription);
}

/** Asymmetric signing (contract section 16): the public key to pin, and the switch. */
function renderSigning(subscription) {
  const on = subscription.publicKey !== null;
  $('signing-state').textContent = on
    ? 'On: deliveries carry a v1a signature. Give your receiver this public key (it is not a secret).'
    : 'Off: deliveries are signed with the secret only.';
  $('public-key-block').hidden = !on;
  $('public-key').value = subscription.publicKey ?? '';
  $('previous-key').replaceChildren(...(subscription.previousPublicKey
    ? ['Until the grace period of the last rotation ends, deliveries also carry a v1a signature of the previous key ',
      el('code', {}, subscription.previousPublicKey), '.']
    : []));
  $('copy-key-result').textContent = '';
  $('signing-toggle').textContent = on ? 'Turn asymmetric signing off' : 'Turn asymmetric signing on';
}

async function toggleSigning(event) {
  const on = state.current.publicKey === null;
  await update(`Could not turn asymmetric signing ${on ? 'on' : 'off'}`, { asymmetricSigning: on }, event.currentTarget,
    on ? 'Asymmetric signing is on: copy the public key to your receiver.' : 'Asymmetric signing is off: the key pair is gone.');
}

/** The facts of an AWS destination that its owner's role trusts (none for a URL). */
function destinationFacts(destination) {
  if (!destination) return [];
  return [
    ['Destination type', DESTINATION_TYPES[destination.type] ?? destination.type],
    ['Role', el('code', {}, destination.roleArn)],
    ['External ID', el('code', {}, destination.externalId)],
    ['Sender role', el('code', {}, destination.senderRoleArn ?? 'not configured')],
  ];
}

/**
 * The policies a destination's owner gives its role (contract section 17), as JSON to paste:
 * the trust policy (the sender role, with this subscription's external id only), the
 * permissions policy (the one action on the queue or bus), and, for a queue, the statement an
 * encrypted queue's key policy needs.
 */
function destinationPolicies(destination) {
  const policy = (...statements) => ({ Version: '2012-10-17', Statement: statements });
  const trust = policy({
    Effect: 'Allow',
    Principal: { AWS: destination.senderRoleArn },
    Action: 'sts:AssumeRole',
    Condition: { StringEquals: { 'sts:ExternalId': destination.externalId } },
  });
  const queue = destination.type === 'aws_sqs';
  const permissions = policy({
    Effect: 'Allow',
    Action: queue ? 'sqs:SendMessage' : 'events:PutEvents',
    Resource: queue ? queueArn(destination.queueUrl, destination.roleArn) : destination.eventBusArn,
  });
  const kms = queue ? {
    Sid: 'WebhooksSenderRole',
    Effect: 'Allow',
    Principal: { AWS: destination.roleArn },
    Action: ['kms:GenerateDataKey', 'kms:Decrypt'],
    Resource: '*',
  } : null;
  const text = (value) => JSON.stringify(value, null, 2);
  return { trust: text(trust), permissions: text(permissions), kms: kms && text(kms) };
}

/**
 * The ARN of the queue at `queueUrl` (`https://sqs.<region>.amazonaws.com/<account>/<name>`),
 * in the role's partition (the API checked they match). A local emulator's URL names no region:
 * `*` stands for it.
 */
function queueArn(queueUrl, roleArn) {
  const url = new URL(queueUrl);
  const [account, name] = url.pathname.split('/').slice(1);
  const region = url.hostname.match(/^sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$/)?.[1] ?? '*';
  return `arn:${roleArn.split(':')[1]}:sqs:${region}:${account}:${name}`;
}

/** The panel of a destination's role policies, ready to copy (hidden for a URL). */
function renderAwsPanel(subscription) {
  const { destination } = subscription;
  $('aws-panel').hidden = !destination;
  for (const result of ['copy-trust-result', 'copy-permissions-result', 'copy-kms-result']) $(result).textContent = '';
  if (!destination) return;
  const policies = destinationPolicies(destination);
  $('aws-role').textContent = destination.roleArn;
  $('aws-target-kind').textContent = destination.type === 'aws_sqs' ? 'queue' : 'event bus';
  $('trust-policy').value = policies.trust;
  $('permissions-policy').value = policies.permissions;
  $('kms-block').hidden = !policies.kms;
  $('kms-statement').value = policies.kms ?? '';
}

function fillEditForm(subscription) {
  // A destination's queue and role change through the API; its URL field stays empty.
  $('edit-url').value = subscription.url ?? '';
  $('edit-url').disabled = subscription.url === null;
  $('edit-rate').value = subscription.maxDeliveriesPerSecond ?? '';
  for (const box of $('edit-form').querySelectorAll('input[name="events"]')) {
    box.checked = subscription.events.includes(box.value);
  }
}

function setCurrent(subscription) {
  state.current = subscription;
  renderSummary(subscription);
}

async function openSubscription(subscription) {
  clearMessages();
  setCurrent(subscription);
  fillEditForm(subscription);
  $('recover-since').value = localInputValue(new Date(Date.now() - 3_600_000));
  $('recover-until').value = '';
  resetReplayForm();
  $('delivery-view').hidden = true;
  state.delivery = null;
  state.log = { cursors: [null], page: 0, nextCursor: null, deliveries: [] };
  showView('detail-view');
  state.refreshesLeft = REFRESHES_PER_ACTION;
  await refreshDeliveries();
}

async function update(context, changes, button, notice) {
  const updated = await act(context, () => state.api.updateSubscription(state.current.id, changes), button);
  if (!updated) return;
  setCurrent(updated);
  fillEditForm(updated);
  showNotice(notice);
}

async function saveEdit(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const changes = {};
  const url = $('edit-url').value.trim();
  if (state.current.url !== null && url !== state.current.url) changes.url = url;
  const events = checkedKinds(form);
  const same = events.length === state.current.events.length && events.every((kind) => state.current.events.includes(kind));
  if (!same) changes.events = events;
  const rate = rateLimit($('edit-rate'));
  if (rate !== state.current.maxDeliveriesPerSecond) changes.maxDeliveriesPerSecond = rate;
  // Sent even when nothing changed: the API's answer (webhooks.no_changes) says so.
  await update('Could not save the changes', changes, form.querySelector('button[type="submit"]'), 'Changes saved.');
}

/**
 * A rate-limit field's value as the API takes it: `null` when empty (no limit), else the
 * number typed, which the API checks (webhooks.invalid_rate_limit).
 */
function rateLimit(input) {
  return input.value.trim() === '' ? null : Number(input.value);
}

async function rotate(event) {
  event.preventDefault();
  const grace = Number($('grace').value);
  const rotated = await act('Could not rotate the secret',
    () => state.api.rotateSecret(state.current.id, grace), event.currentTarget.querySelector('button'));
  if (!rotated) return;
  clearMessages();
  // The subscription as it now is (a new public key with asymmetric signing on); the secret
  // stays in the dialog only.
  const { secret, previousSecretExpiresAt, ...subscription } = rotated;
  setCurrent(subscription);
  const expiry = previousSecretExpiresAt
    ? `The previous secret keeps signing until ${new Date(previousSecretExpiresAt).toLocaleString()}.`
    : 'The previous secret no longer signs anything.';
  showSecret('Your new signing secret', secret, expiry);
}

async function ping(event) {
  const record = await act('Could not send a ping', () => state.api.ping(state.current.id), event.currentTarget);
  if (!record) return;
  showNotice(record.status === 'skipped'
    ? `Test ping recorded as delivery ${record.id} and skipped: ${SKIPPED}`
    : `Test ping queued as delivery ${record.id}; the log below shows how it goes.`);
  await restartLog();
}

async function recover(event) {
  event.preventDefault();
  const since = new Date($('recover-since').value);
  const untilText = $('recover-until').value;
  const until = untilText ? new Date(untilText).toISOString() : undefined;
  const answer = await act('Could not recover the window',
    () => state.api.recover(state.current.id, since.toISOString(), until), event.currentTarget.querySelector('button'));
  if (!answer) return;
  const more = answer.more ? ' More than that matched: recover again from the last one sent.' : '';
  showNotice(`Recovering ${answer.recovering} ${answer.recovering === 1 ? 'delivery' : 'deliveries'}.${more}`);
  await restartLog();
}

// ------------------------------------------------------------------ replay and cancel (section 20)

function plural(count) {
  return `${count} ${count === 1 ? 'delivery' : 'deliveries'}`;
}

/** The replay asked for by the form, of the open subscription; `dryRun` only counts. */
function replayRequest(dryRun) {
  const statuses = [...document.querySelectorAll('#replay-form input[name="replay-status"]:checked')];
  const untilText = $('replay-until').value;
  return {
    since: new Date($('replay-since').value).toISOString(),
    ...(untilText ? { until: new Date(untilText).toISOString() } : {}),
    subscriptionIds: [state.current.id],
    status: statuses.map((box) => box.value),
    dryRun,
  };
}

/** A count stands only for the form it was made for: any change asks for a new one. */
function forgetReplayCount() {
  $('replay-run').disabled = true;
  $('replay-run').textContent = 'Replay';
  $('replay-matching').textContent = '';
}

function resetReplayForm() {
  $('replay-since').value = localInputValue(new Date(Date.now() - 3_600_000));
  $('replay-until').value = '';
  forgetReplayCount();
}

async function countReplay(event) {
  event.preventDefault();
  forgetReplayCount();
  const answer = await act('Could not count the deliveries to replay',
    () => state.api.replay(replayRequest(true)), $('replay-count'));
  if (!answer) return;
  const more = answer.more ? ' More matched: a replay takes the oldest 1,000, replay again for the rest.' : '';
  $('replay-matching').textContent = `${plural(answer.matching)} to replay.${more}`;
  $('replay-run').textContent = `Replay ${plural(answer.matching)}`;
  $('replay-run').disabled = answer.matching === 0;
}

async function runReplay() {
  const answer = await act('Could not replay the window', () => state.api.replay(replayRequest(false)), $('replay-run'));
  forgetReplayCount();
  if (!answer) return;
  const more = answer.more ? ' More matched: replay again from the last one sent.' : '';
  showNotice(`Replaying ${plural(answer.replaying)}.${more}`);
  await restartLog();
}

async function cancelWaiting(event) {
  const answer = await act('Could not cancel the waiting deliveries',
    () => state.api.cancelWaiting(state.current.id), event.currentTarget);
  if (!answer) return;
  const more = answer.more ? ' More were waiting: cancel again for the rest.' : '';
  showNotice(`Cancelled ${plural(answer.cancelling)}.${more}`);
  await restartLog();
}

async function confirmDelete() {
  const { id } = state.current;
  const target = receiver(state.current);
  const deleted = await act('Could not delete the subscription', () => state.api.deleteSubscription(id), $('confirm-delete'));
  $('delete-dialog').close();
  if (deleted) await showList(`Deleted the subscription to ${target}.`);
}

// ------------------------------------------------------------------ deliveries

function logQuery() {
  return { status: $('status-filter').value, limit: $('page-size').value, cursor: state.log.cursors[state.log.page] };
}

async function restartLog() {
  state.log = { cursors: [null], page: 0, nextCursor: null, deliveries: [] };
  state.refreshesLeft = REFRESHES_PER_ACTION;
  await refreshDeliveries();
}

/** The health's state as a badge (contract section 20). */
function healthBadge(health) {
  const tone = { healthy: 'good', failing: 'warn', disabled: 'bad', new: 'quiet' }[health.state];
  return el('span', { class: `badge ${tone}`, 'data-state': health.state }, health.state);
}

/** The subscription's health: its state and since when, what waits, and its last 24 hours. */
function renderHealth(health) {
  const facts = [
    ['State', el('span', {}, healthBadge(health), ' since ', time(health.since))],
    ['Last success', time(health.lastSuccessAt)],
    ['Last failure', time(health.lastFailureAt)],
    ['Held', el('span', { 'data-count': 'held' }, String(health.held))],
    ['Pending', el('span', { 'data-count': 'pending' }, String(health.pending))],
    ['Rate limited', health.rateLimited ? 'Yes: its limit held a delivery back in the last minute' : 'No'],
  ];
  if (health.nextProbeAt) facts.push(['Next probe', time(health.nextProbeAt)]);
  $('health').replaceChildren(...facts.flatMap(([name, value]) => [el('dt', {}, name), el('dd', {}, value)]));
  drawHealth($('health-chart'), health);
}

/** Reads the log's page, the chart's records and the health again, then the shown delivery. */
async function refreshDeliveries() {
  stopRefreshing();
  const subscription = state.current;
  const loaded = await act('Could not load the delivery log', () => Promise.all([
    state.api.deliveries(subscription.id, logQuery()),
    state.api.deliveries(subscription.id, { limit: CHART_DELIVERIES }),
    state.api.health(subscription.id),
  ]));
  if (!loaded || state.current !== subscription) return;
  const [page, recent, health] = loaded;
  state.log.nextCursor = page.nextCursor;
  state.log.deliveries = page.deliveries;
  renderLog(page.deliveries);
  drawOutcomes($('chart'), recent.deliveries);
  renderHealth(health);
  if (state.delivery) {
    const fresh = [...page.deliveries, ...recent.deliveries].find((d) => d.id === state.delivery.id);
    if (fresh) renderDelivery(fresh, false);
  }
  const pending = [...page.deliveries, ...recent.deliveries].some((d) => d.status === 'pending');
  if (pending && state.refreshesLeft > 0) {
    state.refreshesLeft -= 1;
    state.refreshTimer = setTimeout(refreshDeliveries, REFRESH_EVERY_MS);
  }
}

function stopRefreshing() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = null;
}

function statusBadge(status) {
  const tone = { succeeded: 'good', failed: 'bad', pending: 'warn', skipped: 'quiet', held: 'warn', cancelled: 'quiet' }[status] ?? 'quiet';
  return el('span', { class: `badge ${tone}` }, status);
}

function renderLog(deliveries) {
  $('newer').disabled = state.log.page === 0;
  $('older').disabled = !state.log.nextCursor;
  $('page-number').textContent = `Page ${state.log.page + 1}`;
  if (deliveries.length === 0) {
    const filter = $('status-filter').value;
    // A filtered page reads a bounded stretch of the log, so it can be empty with older ones after it.
    const text = state.log.nextCursor
      ? `No ${filter} deliveries in this stretch of the log; Older looks further back.`
      : filter ? `No ${filter} deliveries.` : 'No deliveries yet.';
    $('log').replaceChildren(el('p', { class: 'empty' }, text));
    return;
  }
  const head = el('tr', {}, ...['Created', 'Event', 'Status', 'Attempts', 'Last answer', 'Details']
    .map((name) => el('th', { scope: 'col' }, name)));
  const rows = deliveries.map((delivery) => {
    const open = el('button', { type: 'button', 'data-focus-key': `delivery-${delivery.id}`,
      'aria-label': `Details of delivery ${delivery.id}` }, 'Details');
    open.addEventListener('click', () => {
      renderDelivery(delivery, true);
    });
    return el('tr', { 'data-id': delivery.id, 'data-status': delivery.status },
      el('td', {}, time(delivery.createdAt)),
      el('td', {}, el('code', {}, delivery.eventType)),
      el('td', {}, statusBadge(delivery.status)),
      el('td', {}, String(delivery.attempts)),
      el('td', {}, delivery.lastResponseStatus === null ? delivery.lastError ?? '—' : String(delivery.lastResponseStatus)),
      el('td', {}, open));
  });
  keepingFocus(() => $('log').replaceChildren(el('table', {}, el('thead', {}, head), el('tbody', {}, ...rows))));
}

function renderDelivery(delivery, focus) {
  state.delivery = delivery;
  const facts = [
    ['Delivery', el('code', {}, delivery.id)],
    ['Event', el('code', {}, delivery.eventId)],
    ['Event kind', el('code', {}, delivery.eventType)],
    ['Status', statusBadge(delivery.status)],
    ['Created', time(delivery.createdAt)],
    ['Attempts', String(delivery.attempts)],
    ['Last attempt', time(delivery.lastAttemptAt)],
    ['Last answer status', delivery.lastResponseStatus === null ? 'no answer' : String(delivery.lastResponseStatus)],
    ['Last error', delivery.lastError ?? '—'],
    ['Next attempt', time(delivery.nextAttemptAt)],
    ['Succeeded', time(delivery.succeededAt)],
  ];
  $('delivery-facts').replaceChildren(...facts.flatMap(([name, value]) => [el('dt', {}, name), el('dd', {}, value)]));
  $('delivery-title').textContent = `Delivery ${delivery.id}`;
  $('delivery-answer').textContent = delivery.lastResponseBody || '(empty)';
  $('delivery-body').textContent = delivery.body;
  $('delivery-view').hidden = false;
  if (focus) $('delivery-title').focus();
}

async function retry(event) {
  const { id } = state.delivery;
  const record = await act('Could not retry the delivery', () => state.api.retryDelivery(id), event.currentTarget);
  if (!record) return;
  renderDelivery(record, false);
  showNotice(record.status === 'skipped'
    ? `Delivery ${record.id} recorded as skipped again: ${SKIPPED}`
    : `Delivery ${record.id} queued again; the log below shows how it goes.`);
  state.refreshesLeft = REFRESHES_PER_ACTION;
  await refreshDeliveries();
}

async function turnPage(step) {
  if (step > 0) {
    state.log.cursors[state.log.page + 1] = state.log.nextCursor;
  }
  state.log.page += step;
  state.refreshesLeft = REFRESHES_PER_ACTION;
  await refreshDeliveries();
}

// ------------------------------------------------------------------ wiring

function wire() {
  $('sign-in-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const input = $('key-input');
    sessionStorage.setItem(KEY_STORAGE, input.value.trim());
    input.value = '';
    clearMessages();
    enter();
  });
  $('sign-out').addEventListener('click', () => signOut());
  for (const choice of $('create-form').querySelectorAll('input[name="target"]')) {
    choice.addEventListener('change', showCreateTarget);
  }
  $('create-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const form = event.currentTarget;
    const created = await act('Could not create the subscription',
      () => state.api.createSubscription(createTarget(), checkedKinds(form), $('create-asymmetric').checked,
        $('create-trace').checked, rateLimit($('create-rate'))),
      form.querySelector('button[type="submit"]'));
    if (!created) return;
    form.reset();
    showCreateTarget();
    const { secret, ...subscription } = created;
    const target = receiver(subscription);
    if (subscription.destination) {
      // Straight to its role's policies: nothing arrives until the role has them.
      await openSubscription(subscription);
      showNotice(`Created the subscription to ${target}: give your role the policies below.`);
    } else {
      await showList(`Created the subscription to ${target}.`);
    }
    showSecret('Your signing secret', secret, `It signs every delivery to ${target}.`);
  });
  $('back').addEventListener('click', () => showList());
  $('ping').addEventListener('click', ping);
  $('pause').addEventListener('click', (event) => update('Could not pause the subscription', { enabled: false },
    event.currentTarget, 'Paused: new deliveries are recorded as skipped and not sent.'));
  $('resume').addEventListener('click', (event) => update('Could not resume the subscription', { enabled: true },
    event.currentTarget, 'Resumed: new deliveries are sent again. Recover a window to send the skipped ones.'));
  $('delete').addEventListener('click', () => {
    $('delete-url').textContent = receiver(state.current);
    $('delete-dialog').showModal();
    $('cancel-delete').focus();
  });
  $('confirm-delete').addEventListener('click', confirmDelete);
  $('cancel-delete').addEventListener('click', () => $('delete-dialog').close());
  $('edit-form').addEventListener('submit', saveEdit);
  $('rotate-form').addEventListener('submit', rotate);
  $('recover-form').addEventListener('submit', recover);
  $('replay-form').addEventListener('submit', countReplay);
  $('replay-form').addEventListener('input', forgetReplayCount);
  $('replay-run').addEventListener('click', runReplay);
  $('cancel-waiting').addEventListener('click', cancelWaiting);
  $('status-filter').addEventListener('change', restartLog);
  $('page-size').addEventListener('change', restartLog);
  $('refresh').addEventListener('click', () => {
    state.refreshesLeft = REFRESHES_PER_ACTION;
    refreshDeliveries();
  });
  $('newer').addEventListener('click', () => turnPage(-1));
  $('older').addEventListener('click', () => turnPage(1));
  $('retry').addEventListener('click', retry);
  $('close-delivery').addEventListener('click', () => {
    const { id } = state.delivery;
    $('delivery-view').hidden = true;
    state.delivery = null;
    document.querySelector(`[data-focus-key="delivery-${CSS.escape(id)}"]`)?.focus();
  });
  $('copy-secret').addEventListener('click', () => copyValue('secret-value', 'copy-result', 'secret'));
  $('copy-public-key').addEventListener('click', () => copyValue('public-key', 'copy-key-result', 'public key'));
  $('copy-trust-policy').addEventListener('click', () => copyValue('trust-policy', 'copy-trust-result', 'trust policy'));
  $('copy-permissions-policy').addEventListener('click',
    () => copyValue('permissions-policy', 'copy-permissions-result', 'permissions policy'));
  $('copy-kms-statement').addEventListener('click', () => copyValue('kms-statement', 'copy-kms-result', 'KMS statement'));
  $('signing-toggle').addEventListener('click', toggleSigning);
  // The secret leaves the page with the dialog, however it is closed (Escape included).
  const forgetSecret = () => {
    $('secret-value').value = '';
  };
  $('close-secret').addEventListener('click', () => {
    forgetSecret();
    $('secret-dialog').close();
  });
  $('secret-dialog').addEventListener('close', forgetSecret);
  window.addEventListener('hashchange', () => {
    if (takeKeyFromFragment()) enter();
  });
}

takeKeyFromFragment();
wire();
enter();
