// The public API as the portal calls it: same origin, the key as a Bearer token, and every
// refusal turned into an ApiError that carries the API's own code and message.

/** A refused or failed call: the API's `code` and `message` (contract section 1). */
export class ApiError extends Error {
  constructor(status, code, message, requestId) {
    super(message);
    this.status = status;
    this.code = code;
    this.requestId = requestId;
  }

  /** The key itself was refused: unknown, revoked or expired (401). */
  get unauthorized() {
    return this.status === 401;
  }
}

export class Api {
  constructor(key) {
    this.key = key;
  }

  /** `method path` with `query` parameters and an optional JSON `body`; the parsed answer. */
  async call(method, path, { query = {}, body } = {}) {
    // Relative to the page, so a base path in front of /portal is kept.
    const url = new URL(path.replace(/^\//, ''), document.baseURI);
    for (const [name, value] of Object.entries(query)) {
      if (value !== undefined && value !== null && value !== '') url.searchParams.set(name, value);
    }
    const headers = { Authorization: `Bearer ${this.key}` };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response;
    try {
      response = await fetch(url, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: 'no-store',
        credentials: 'omit',
      });
    } catch (err) {
      throw new ApiError(0, 'network_error', `The API could not be reached (${err.message}).`, null);
    }
    const text = await response.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      // Not JSON: reported below with the status alone.
    }
    if (response.ok) return json;
    const error = json && json.error;
    if (error && typeof error.code === 'string') {
      throw new ApiError(response.status, error.code, error.message, error.requestId ?? null);
    }
    // An answer of the gateway itself ({"message": …}), not of the service.
    const message = (json && typeof json.message === 'string' && json.message) || response.statusText || 'No message';
    throw new ApiError(response.status, `http_${response.status}`, message, response.headers.get('x-request-id'));
  }

  listSubscriptions() {
    return this.call('GET', '/api/v1/webhooks');
  }

  eventTypes() {
    return this.call('GET', '/api/v1/webhooks/event-types');
  }

  /**
   * `target`: `{ url }`, or `{ destination }` in the owner's AWS account (section 17);
   * `maxDeliveriesPerSecond`: an integer, or `null` for no limit (section 18).
   */
  createSubscription(target, events, asymmetricSigning, traceContext, maxDeliveriesPerSecond) {
    return this.call('POST', '/api/v1/webhooks', {
      body: { ...target, events, asymmetricSigning, traceContext, maxDeliveriesPerSecond },
    });
  }

  /** `changes`: any of `url`, `events`, `enabled`, `asymmetricSigning`, `traceContext` and `maxDeliveriesPerSecond` (sections 13, 16, 18, 19). */
  updateSubscription(id, changes) {
    return this.call('PATCH', '/api/v1/webhooks', { query: { id }, body: changes });
  }

  deleteSubscription(id) {
    return this.call('DELETE', '/api/v1/webhooks', { query: { id } });
  }

  rotateSecret(id, gracePeriodSeconds) {
    return this.call('POST', '/api/v1/webhooks/rotate-secret', { query: { id }, body: { gracePeriodSeconds } });
  }

  ping(id) {
    return this.call('POST', '/api/v1/webhooks/ping', { query: { id } });
  }

  /** One page of the delivery log, newest first. */
  deliveries(id, { status, limit, cursor } = {}) {
    return this.call('GET', '/api/v1/webhooks/deliveries', { query: { id, status, limit, cursor } });
  }

  retryDelivery(id) {
    return this.call('POST', '/api/v1/webhooks/deliveries/retry', { query: { id } });
  }

  /** The subscription's state, last 24 hours and what waits (contract section 20). */
  health(id) {
    return this.call('GET', '/api/v1/webhooks/health', { query: { id } });
  }

  /** Sends again the failed and skipped deliveries created in [since, until). */
  recover(id, since, until) {
    const body = until ? { since, until } : { since };
    return this.call('POST', '/api/v1/webhooks/recover', { query: { id }, body });
  }

  /** Replays a window across subscriptions (contract section 20); `dryRun` only counts. */
  replay(body) {
    return this.call('POST', '/api/v1/webhooks/replay', { body });
  }

  /** Cancels the subscription's pending and held deliveries created until now. */
  cancelWaiting(id) {
    return this.call('POST', '/api/v1/webhooks/deliveries/cancel', { query: { id } });
  }
}
