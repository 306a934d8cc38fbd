// The portal in a real browser: Debian's Chromium driven by playwright-core, every view
// checked by axe-core. tests/it/portal.rs starts the stack and a loopback receiver, issues the
// links and runs this script; it prints progress on stderr and, when every step passed, one
// JSON object on stdout for the Rust test to check against the receiver and the API.
//
// Environment: PORTAL_NODE_MODULES (where playwright-core and axe-core are installed),
// CHROMIUM (the browser), PORTAL_LINK and EXPIRED_LINK (`…/portal#key=cak_…`), RECEIVER_URL
// (the loopback receiver), QUEUE_URL and ROLE_ARN (a queue of the receiver's AWS account in the
// local emulators, and the role, not made yet, to name for it), BUS_ARN and BUS_ROLE_ARN (a
// Custom Event Bus of that account, and its role, not made yet either), TOKEN_AUDIENCE (the
// identity token's audience to ask for), SCREENSHOT (where to save the picture) and PROFILE_DIR
// (a fresh, empty directory for the browser's profile).

import { createRequire } from 'node:module';
import path from 'node:path';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const require = createRequire(path.join(env('PORTAL_NODE_MODULES'), 'package.json'));
const { chromium } = require('playwright-core');
const axe = require('axe-core');

const PORTAL_LINK = env('PORTAL_LINK');
const EXPIRED_LINK = env('EXPIRED_LINK');
const RECEIVER_URL = env('RECEIVER_URL');
const QUEUE_URL = env('QUEUE_URL');
const ROLE_ARN = env('ROLE_ARN');
const BUS_ARN = env('BUS_ARN');
const BUS_ROLE_ARN = env('BUS_ROLE_ARN');
const TOKEN_AUDIENCE = env('TOKEN_AUDIENCE');
const ORIGIN = new URL(PORTAL_LINK).origin;
/** How long a wait for the page or a delivery may take before the step fails. */
const PATIENCE_MS = 30_000;
/** Pings sent to fill more than one page of the log at 10 a page (with the three before). */
const EXTRA_PINGS = 8;

const log = (message) => process.stderr.write(`portal test: ${message}\n`);
function check(condition, message) {
  if (!condition) throw new Error(message);
}

const context = await chromium.launchPersistentContext(env('PROFILE_DIR'), {
  executablePath: env('CHROMIUM'),
  headless: true,
  // No network beyond loopback: nothing of Chromium's own (updates, sync, field trials,
  // safe browsing) starts, and QUIC is off.
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
  viewport: { width: 1280, height: 900 },
  locale: 'en-GB',
  timezoneId: 'UTC',
});
context.setDefaultTimeout(PATIENCE_MS);
await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: ORIGIN });

const foreign = [];
const consoleErrors = [];
context.on('request', (request) => {
  if (new URL(request.url()).origin !== ORIGIN) foreign.push(request.url());
});
const page = context.pages()[0] ?? await context.newPage();
page.on('console', (message) => {
  // The API's refusals are answers the page shows; Chromium also logs each as an error.
  if (message.type() === 'error' && !/^Failed to load resource: the server responded with a status of 4\d\d/.test(message.text())) {
    consoleErrors.push(message.text());
  }
});
page.on('pageerror', (error) => consoleErrors.push(`uncaught: ${error.message}`));

const axeViolations = {};
/** axe-core on the page as it is now; `view` names it in the report. */
async function accessible(view) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) {
    // Evaluated through the DevTools protocol, which the page's CSP does not govern.
    await page.evaluate(axe.source);
  }
  const result = await page.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  axeViolations[view] = result.violations.length;
  const described = result.violations.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join('; ')})`);
  check(result.violations.length === 0, `axe-core found violations in ${view}:\n${described.join('\n')}`);
  log(`axe-core: no violation in ${view}`);
}

const visible = (selector) => page.locator(selector).waitFor({ state: 'visible' });
const text = (selector) => page.locator(selector).innerText();
const problemWith = (code) => page.locator('#problem').filter({ hasText: code }).waitFor();
const notice = (words) => page.locator('#notice').filter({ hasText: words }).waitFor();
const keyInStorage = () => page.evaluate(() => sessionStorage.getItem('career-portal-key'));
const rowStatus = (id) => page.locator(`#log tr[data-id="${id}"]`).getAttribute('data-status');
async function waitForRow(id, status, attempts) {
  await page.waitForFunction(([id, status, attempts]) => {
    const row = document.querySelector(`#log tr[data-id="${id}"]`);
    return row && row.dataset.status === status && (attempts === undefined || row.children[3].textContent === String(attempts));
  }, [id, status, attempts], { timeout: PATIENCE_MS });
}
async function fact(list, name) {
  return page.locator(`${list} dt:text-is("${name}") + dd`).innerText();
}

const summary = {};

/**
 * Creates a subscription to `profile.updated` in the receiver's AWS account: the form's target
 * `label`, with `fields` (selector → value) filled, which show no URL or identity token field;
 * its secret, shown once, and the page opens it for its role's policies.
 */
async function createDestination(label, fields) {
  const create = page.locator('#create-form');
  await create.getByLabel(label).check();
  check(await page.locator('#create-url').isHidden(), `no URL field for ${label}`);
  check(await page.locator('#create-token').isHidden(), `no identity token for ${label}`);
  for (const [selector, value] of Object.entries(fields)) await page.fill(selector, value);
  await create.getByLabel('profile.updated').check();
  await create.getByRole('button', { name: 'Create subscription' }).click();
  await visible('#secret-dialog');
  const secret = await page.inputValue('#secret-value');
  await page.getByRole('button', { name: 'I have stored it' }).click();
  await page.locator('#secret-dialog').waitFor({ state: 'hidden' });
  await notice('give your role the policies below');
  return secret;
}

/** Every step, in order, in the one browser session. */
async function steps() {

  // An expired link: the sign-in view, with the API's message and code, and no key kept.
  log('expired link');
  await page.goto(EXPIRED_LINK);
  await visible('#sign-in-view');
  await problemWith('auth.unauthorized');
  summary.expiredProblem = await text('#problem');
  check(!page.url().includes('#'), `the fragment is still in the address: ${page.url()}`);
  check((await keyInStorage()) === null, 'a refused key is not kept');
  await accessible('sign-in after an expired link');

  // The portal link signs in; the key moves from the address into sessionStorage at once.
  log('signing in through the portal link');
  await page.goto(PORTAL_LINK);
  await visible('#list-view');
  check(!page.url().includes('#'), `the fragment is still in the address: ${page.url()}`);
  check((await keyInStorage()) === new URL(PORTAL_LINK).hash.slice('#key='.length), 'the key is in sessionStorage');
  check((await page.evaluate(() => localStorage.length)) === 0, 'nothing is in localStorage');
  await page.locator('#subscriptions .empty').waitFor();
  await page.locator('#create-form input[name="events"]').first().waitFor();
  await accessible('subscriptions (none yet)');
  const hints = await page.locator('#create-form .kind .hint').allTextContents();
  check(hints.length > 0 && hints.every((hint) => !hint.includes('`')), 'kind descriptions show no Markdown backticks');
  check(await page.locator('#create-form .kind .hint code').count() > 0, 'their code spans are code elements');

  // A refused creation shows the API's code; a good one shows the secret once.
  log('creating a subscription');
  const create = page.locator('#create-form');
  await page.fill('#create-url', 'ftp://127.0.0.1/hook');
  for (const kind of ['webhook.endpoint.failing', 'webhook.endpoint.disabled', 'webhook.endpoint.recovered',
    'webhook.delivery.exhausted']) {
    check(await create.getByLabel(kind).count() === 1, `the operational kind ${kind} is offered`);
  }
  await create.getByLabel('profile.updated').check();
  await create.getByRole('button', { name: 'Create subscription' }).click();
  await problemWith('webhooks.invalid_url');
  await page.fill('#create-url', RECEIVER_URL);
  await page.fill('#create-token', TOKEN_AUDIENCE);
  await create.getByLabel('Send trace context').check();
  await create.getByRole('button', { name: 'Create subscription' }).click();
  await visible('#secret-dialog');
  summary.secret = await page.inputValue('#secret-value');
  check(/^whsec_[A-Za-z0-9+/]{43}=$/.test(summary.secret), `a secret: ${summary.secret}`);
  await accessible('the new secret');
  await page.getByRole('button', { name: 'Copy' }).click();
  await page.locator('#copy-result').filter({ hasText: 'Copied' }).waitFor();
  check((await page.evaluate(() => navigator.clipboard.readText())) === summary.secret, 'the secret was copied');
  await page.getByRole('button', { name: 'I have stored it' }).click();
  await page.locator('#secret-dialog').waitFor({ state: 'hidden' });
  check((await page.inputValue('#secret-value')) === '', 'the secret leaves the page with its dialog');
  await notice('Created the subscription');
  check((await text('#subscriptions tbody')).includes('Healthy'), 'the new subscription is healthy');
  await accessible('subscriptions');

  // Opened from the keyboard.
  log('opening it');
  await page.getByRole('button', { name: `Manage ${RECEIVER_URL}` }).focus();
  await page.keyboard.press('Enter');
  await visible('#detail-view');
  summary.subscriptionId = await fact('#summary', 'ID');
  check((await fact('#summary', 'Trace context')) === 'On', 'created with trace context on');
  await page.locator('#log .empty').waitFor();
  // Its health before any attempt (contract section 20): new, nothing waiting, no chart yet.
  await page.locator('#health [data-state="new"]').waitFor();
  check((await fact('#health', 'Held')) === '0' && (await fact('#health', 'Pending')) === '0', 'nothing waits');
  check((await text('#health-chart figcaption')) === 'No attempts in the last 24 hours.', 'no attempts yet');
  await accessible('a subscription without deliveries');

  // A ping reaches the receiver and succeeds in the log; its details; a retry of it.
  log('pinging it');
  await page.getByRole('button', { name: 'Send a test ping' }).click();
  await notice('Test ping queued as delivery');
  summary.pingDelivery = (await text('#notice')).match(/dlv_[0-9A-Za-z]+/)[0];
  await waitForRow(summary.pingDelivery, 'succeeded', 1);
  await page.getByRole('button', { name: `Details of delivery ${summary.pingDelivery}` }).click();
  await visible('#delivery-view');
  check((await fact('#delivery-facts', 'Event kind')) === 'webhook.ping', 'a ping');
  check((await fact('#delivery-facts', 'Status')) === 'succeeded', 'succeeded');
  summary.answerStatus = await fact('#delivery-facts', 'Last answer status');
  summary.answerShown = await text('#delivery-answer');
  summary.bodyShown = await page.locator('#delivery-body').textContent();
  await accessible('a delivery\'s details');
  log('retrying it');
  await page.getByRole('button', { name: 'Retry this delivery' }).click();
  await notice('queued again');
  await waitForRow(summary.pingDelivery, 'succeeded', 2);
  await page.locator('#delivery-facts dd').filter({ hasText: /^2$/ }).waitFor();

  // Paused, a ping is skipped; resumed, recovering the window sends it.
  log('pausing, pinging, resuming and recovering');
  await page.getByRole('button', { name: 'Pause' }).click();
  await notice('Paused');
  check((await fact('#summary', 'State')).startsWith('Paused'), 'paused');
  await page.getByRole('button', { name: 'Send a test ping' }).click();
  await notice('and skipped: the subscription is paused or disabled');
  summary.skippedDelivery = (await text('#notice')).match(/dlv_[0-9A-Za-z]+/)[0];
  check((await rowStatus(summary.skippedDelivery)) === 'skipped', 'a ping to a paused subscription is skipped');
  await page.getByRole('button', { name: 'Resume' }).click();
  await notice('Resumed');
  check((await fact('#summary', 'State')) === 'Healthy', 'enabled again');
  await page.getByRole('button', { name: 'Recover deliveries' }).click();
  await notice('Recovering 1 delivery.');
  await waitForRow(summary.skippedDelivery, 'succeeded', 1);

  // Paused again, a ping is skipped; a replay of the window, its count shown first, sends it.
  // Then nothing waits, so a cancel cancels nothing.
  log('replaying and cancelling');
  await page.getByRole('button', { name: 'Pause' }).click();
  await notice('Paused');
  await page.getByRole('button', { name: 'Send a test ping' }).click();
  await notice('and skipped: the subscription is paused or disabled');
  summary.replayedDelivery = (await text('#notice')).match(/dlv_[0-9A-Za-z]+/)[0];
  await page.getByRole('button', { name: 'Resume' }).click();
  await notice('Resumed');
  check(await page.locator('#replay-run').isDisabled(), 'no replay before its count');
  await page.getByRole('button', { name: 'Count deliveries to replay' }).click();
  await page.locator('#replay-matching').filter({ hasText: '1 delivery to replay.' }).waitFor();
  await accessible('a replay counted');
  await page.getByRole('button', { name: 'Replay 1 delivery' }).click();
  await notice('Replaying 1 delivery.');
  await waitForRow(summary.replayedDelivery, 'succeeded', 1);
  check(await page.locator('#replay-run').isDisabled(), 'a count is used once');
  await page.getByRole('button', { name: 'Cancel waiting deliveries' }).click();
  await notice('Cancelled 0 deliveries.');

  // URL and kinds changed; a save that changes nothing shows the API's code.
  log('changing its URL and kinds');
  summary.editedUrl = RECEIVER_URL.replace(/\/hook$/, '/hook-edited');
  await page.fill('#edit-url', summary.editedUrl);
  await page.locator('#edit-form').getByLabel('assessment.completed').check();
  await page.getByRole('button', { name: 'Save changes' }).click();
  await notice('Changes saved.');
  check((await fact('#summary', 'Receiver URL')) === summary.editedUrl, 'the new URL');
  check((await fact('#summary', 'Event kinds')).includes('assessment.completed'), 'the new kind');
  await page.getByRole('button', { name: 'Save changes' }).click();
  await problemWith('webhooks.no_changes');

  // More than one page of deliveries: the pages, the filter, the chart.
  log('filling the log');
  for (let n = 0; n < EXTRA_PINGS; n += 1) {
    await page.getByRole('button', { name: 'Send a test ping' }).click();
    await notice('Test ping queued as delivery');
  }
  const sent = EXTRA_PINGS + 3;
  await page.waitForFunction((count) => {
    const rows = [...document.querySelectorAll('#log tbody tr')];
    return rows.length === count && rows.every((row) => row.dataset.status === 'succeeded');
  }, sent, { timeout: PATIENCE_MS });
  await page.selectOption('#page-size', '10');
  await page.waitForFunction(() => document.querySelectorAll('#log tbody tr').length === 10);
  check(await page.locator('#newer').isDisabled(), 'no newer page on the first');
  await page.getByRole('button', { name: 'Older →' }).click();
  await page.locator('#page-number').filter({ hasText: 'Page 2' }).waitFor();
  await page.waitForFunction(() => document.querySelectorAll('#log tbody tr').length === 1);
  check(await page.locator('#older').isDisabled(), 'no older page on the last');
  await page.getByRole('button', { name: '← Newer' }).click();
  await page.locator('#page-number').filter({ hasText: 'Page 1' }).waitFor();
  await page.selectOption('#status-filter', 'skipped');
  await page.locator('#log .empty').filter({ hasText: 'No skipped deliveries.' }).waitFor();
  await page.selectOption('#status-filter', 'failed');
  await page.locator('#log .empty').filter({ hasText: 'No failed deliveries.' }).waitFor();
  await page.selectOption('#status-filter', 'succeeded');
  await page.waitForFunction(() => document.querySelectorAll('#log tbody tr[data-status="succeeded"]').length === 10);
  await page.selectOption('#status-filter', '');
  await page.waitForFunction(() => document.querySelectorAll('#log tbody tr').length === 10);
  summary.chart = await page.locator('#chart figcaption').innerText();
  check(summary.chart.endsWith(`: ${sent} succeeded.`), `the chart counts every delivery: ${summary.chart}`);
  check((await page.locator('#chart rect.bar[data-outcome="succeeded"]').count()) > 0, 'the chart has bars');
  // Its health after them: healthy, and the last 24 hours' attempts charted, none failed.
  await page.getByRole('button', { name: 'Send a test ping' }).click();
  await notice('Test ping queued as delivery');
  await page.locator('#health [data-state="healthy"]').waitFor();
  summary.healthChart = await page.locator('#health-chart figcaption').innerText();
  check(/^Last 24 hours: \d+ attempts, \d+ succeeded, 0 failed; latency \d+ ms at the median, \d+ ms at the 95th percentile\.$/
    .test(summary.healthChart), `the health chart: ${summary.healthChart}`);
  check((await page.locator('#health-chart rect.bar[data-outcome="succeeded"]').count()) === 1, 'one bar of attempts');
  check((await page.locator('#health-chart rect.bar[data-outcome="failed"]').count()) === 0, 'no failure to show');
  await accessible('a subscription with its deliveries');

  // Asymmetric signing turned on: the public key shown and copied, and a ping signed with it
  // (tests/it/portal.rs verifies its v1a entry with the key the page showed).
  log('turning asymmetric signing on');
  check((await text('#signing-state')).startsWith('Off'), 'asymmetric signing is off at first');
  await page.getByRole('button', { name: 'Turn asymmetric signing on' }).click();
  await notice('Asymmetric signing is on');
  summary.publicKey = await page.inputValue('#public-key');
  check(/^whpk_[A-Za-z0-9+/]{43}=$/.test(summary.publicKey), `a public key: ${summary.publicKey}`);
  await page.getByRole('button', { name: 'Copy public key' }).click();
  await page.locator('#copy-key-result').filter({ hasText: 'Copied' }).waitFor();
  check((await page.evaluate(() => navigator.clipboard.readText())) === summary.publicKey, 'the public key was copied');
  await accessible('asymmetric signing on');
  await page.getByRole('button', { name: 'Send a test ping' }).click();
  await notice('Test ping queued as delivery');
  summary.signedPing = (await text('#notice')).match(/dlv_[0-9A-Za-z]+/)[0];
  await waitForRow(summary.signedPing, 'succeeded', 1);

  // Rotated without a grace period: a new secret, shown once, and a new key pair.
  log('rotating its secret');
  await page.selectOption('#grace', '0');
  await page.getByRole('button', { name: 'Rotate secret' }).click();
  await visible('#secret-dialog');
  summary.rotatedSecret = await page.inputValue('#secret-value');
  check(/^whsec_/.test(summary.rotatedSecret) && summary.rotatedSecret !== summary.secret, 'a new secret');
  check((await text('#secret-expiry')).includes('no longer signs'), 'no grace period');
  await page.keyboard.press('Escape');
  await page.locator('#secret-dialog').waitFor({ state: 'hidden' });
  await page.waitForFunction(() => document.getElementById('secret-value').value === '');
  summary.rotatedPublicKey = await page.inputValue('#public-key');
  check(/^whpk_/.test(summary.rotatedPublicKey) && summary.rotatedPublicKey !== summary.publicKey, 'a new public key');
  check((await text('#previous-key')) === '', 'no previous key without a grace period');

  // The picture for the README: the subscription with its chart, log and one delivery
  // (down to the delivery's details; the forms below are left out).
  const latest = await page.locator('#log tbody tr').first().getAttribute('data-id');
  await page.getByRole('button', { name: `Details of delivery ${latest}` }).click();
  await visible('#delivery-view');
  const bottom = await page.evaluate(() => {
    const details = document.getElementById('delivery-view').getBoundingClientRect();
    return Math.ceil(details.bottom + window.scrollY + 16);
  });
  await page.screenshot({ path: env('SCREENSHOT'), fullPage: true, clip: { x: 0, y: 0, width: 1280, height: bottom } });

  // Asymmetric signing turned off: the key pair is gone.
  log('turning asymmetric signing off');
  await page.getByRole('button', { name: 'Turn asymmetric signing off' }).click();
  await notice('Asymmetric signing is off');
  await page.locator('#public-key-block').waitFor({ state: 'hidden' });
  check((await text('#signing-state')).startsWith('Off'), 'off again');

  // Deleted after a confirmation.
  log('deleting it');
  await page.getByRole('button', { name: 'Delete…' }).click();
  await visible('#delete-dialog');
  await accessible('the delete confirmation');
  await page.getByRole('button', { name: 'Delete subscription' }).click();
  await visible('#list-view');
  await notice('Deleted the subscription');
  await page.locator('#subscriptions .empty').waitFor();

  // A subscription into the receiver's own AWS account (contract section 17): the form's
  // queue and role, then straight to the role's policies, ready to copy. tests/it/portal.rs
  // gives the role exactly the policies copied here and checks that a ping then arrives.
  log('creating a subscription to an SQS queue');
  check(await page.locator('#create-queue').isHidden(), 'no queue field for a URL');
  summary.destinationSecret = await createDestination('An SQS queue in your AWS account',
    { '#create-queue': QUEUE_URL, '#create-role': ROLE_ARN });
  check(/^whsec_/.test(summary.destinationSecret), `a secret: ${summary.destinationSecret}`);
  await visible('#aws-panel');
  summary.destinationId = await fact('#summary', 'ID');
  check((await fact('#summary', 'Destination')) === QUEUE_URL, 'the queue is the destination');
  check((await fact('#summary', 'Role')) === ROLE_ARN, 'the role');
  summary.externalId = await fact('#summary', 'External ID');
  summary.senderRoleArn = await fact('#summary', 'Sender role');
  check(/^[A-Za-z0-9_-]{43}$/.test(summary.externalId), `an external id: ${summary.externalId}`);
  check(await page.locator('#edit-url').isDisabled(), 'a destination has no URL to change');
  const copied = {};
  for (const [name, button, result] of [['trustPolicy', 'Copy trust policy', '#copy-trust-result'],
    ['permissionsPolicy', 'Copy permissions policy', '#copy-permissions-result'],
    ['kmsStatement', 'Copy KMS statement', '#copy-kms-result']]) {
    await page.getByRole('button', { name: button }).click();
    await page.locator(result).filter({ hasText: 'Copied' }).waitFor();
    copied[name] = await page.evaluate(() => navigator.clipboard.readText());
  }
  summary.trustPolicy = copied.trustPolicy;
  summary.permissionsPolicy = copied.permissionsPolicy;
  const trust = JSON.parse(copied.trustPolicy).Statement[0];
  check(trust.Principal.AWS === summary.senderRoleArn, `the trust policy names the sender role: ${copied.trustPolicy}`);
  check(trust.Condition.StringEquals['sts:ExternalId'] === summary.externalId, 'and the external id shown');
  const kms = JSON.parse(copied.kmsStatement);
  check(kms.Principal.AWS === ROLE_ARN && kms.Action.includes('kms:GenerateDataKey'), `the KMS statement: ${copied.kmsStatement}`);
  await accessible('an AWS destination with its role\'s policies');
  await page.getByRole('button', { name: '← All subscriptions' }).click();
  await visible('#list-view');
  check((await text('#subscriptions tbody')).includes(QUEUE_URL), 'the list shows the queue');

  // One onto a Custom Event Bus (eventsv2): the bus's ARN and its role, then its policies.
  log('creating a subscription to a Custom Event Bus');
  await createDestination('A Custom Event Bus (eventsv2) in your AWS account',
    { '#create-bus': BUS_ARN, '#create-role': BUS_ROLE_ARN });
  summary.busSubscriptionId = await fact('#summary', 'ID');
  check((await fact('#summary', 'Destination type')) === 'Custom Event Bus', 'a Custom Event Bus');
  check((await fact('#summary', 'Destination')) === BUS_ARN, 'the bus is the destination');
  check(await page.locator('#kms-block').isHidden(), 'no KMS statement for a bus');
  for (const [name, button, result] of [['busTrustPolicy', 'Copy trust policy', '#copy-trust-result'],
    ['busPermissionsPolicy', 'Copy permissions policy', '#copy-permissions-result']]) {
    await page.getByRole('button', { name: button }).click();
    await page.locator(result).filter({ hasText: 'Copied' }).waitFor();
    summary[name] = await page.evaluate(() => navigator.clipboard.readText());
  }
  const put = JSON.parse(summary.busPermissionsPolicy).Statement[0];
  check(put.Action === 'events:PutEvents' && put.Resource === BUS_ARN, `the permissions policy: ${summary.busPermissionsPolicy}`);
  await accessible('a Custom Event Bus destination with its role\'s policies');
  await page.getByRole('button', { name: '← All subscriptions' }).click();
  await visible('#list-view');

  // Signing out forgets the key; signing in again by typing it (keyboard only).
  log('signing out and in again');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await visible('#sign-in-view');
  check((await keyInStorage()) === null, 'signing out forgets the key');
  await page.locator('#key-input').focus();
  await page.keyboard.type(new URL(PORTAL_LINK).hash.slice('#key='.length));
  await page.keyboard.press('Enter');
  await visible('#list-view');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await visible('#sign-in-view');
  await accessible('sign-in');
}

try {
  await steps();
} catch (err) {
  // The page as the failing step left it, next to where the picture would have been.
  await page.screenshot({ path: env('SCREENSHOT').replace(/\.png$/, '.failed.png'), fullPage: true }).catch(() => {});
  await context.close();
  throw err;
}

check(foreign.length === 0, `the page contacted other origins: ${foreign.join(', ')}`);
check(consoleErrors.length === 0, `the page logged errors: ${consoleErrors.join(' | ')}`);
summary.axeViolations = axeViolations;
await context.close();
process.stdout.write(`${JSON.stringify(summary)}\n`);
