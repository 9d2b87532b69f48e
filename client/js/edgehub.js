// Edgehub's JavaScript client, for browsers and Node.js 18 and later: watch
// a topic or several (a tenant stream) with every event reaching one
// handler, resuming after any break from the last position it handed out;
// publish events and batches, each with an idempotency key so that a retry
// never appends twice; read pages, state and the topic list. No runtime
// dependency: it uses fetch, streams and TextDecoder, which both have.

const DEFAULT_RETRY = 2000; // the server's retry hint until it sends its own
const MAX_BACKOFF = 30000; // a client comes back within a minute of an outage
const MAX_FRAME = 64 << 20; // guard against a peer that is no Edgehub

/**
 * A refusal from the server in its error shape: status is the HTTP status,
 * code and message the answer's error (code "unknown" when the answer was
 * not in that shape, as a proxy's page is not), retryAfter the server's
 * Retry-After in milliseconds (0 when none), and for a 401, reason says
 * which check of the token this side can tell failed, since the server's
 * answer is the same for all of them and for a tenant that does not exist.
 */
export class EdgehubError extends Error {
  constructor(status, code, message, { retryAfter = 0, reason = '' } = {}) {
    super(reason ? `${status} ${code}: ${message} (${reason})` : `${status} ${code}: ${message}`);
    this.name = 'EdgehubError';
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
    this.reason = reason;
  }

  /**
   * Whether the refusal is one to retry later: a limit's 429 (a quota is
   * not: room comes back only when retention or the tenant frees it) or a
   * server or proxy that could not serve the request now (5xx). A 5xx on a
   * publish may have stored it, which is why every publish carries an
   * idempotency key: the retry is then answered as a duplicate.
   */
  get temporary() {
    return (this.status === 429 && this.code !== 'quota_exceeded') || this.status >= 500;
  }
}

/** Client talks to one tenant of one Edgehub server. */
export class Client {
  constructor({ server, tenant, token = '', retries = 3, fetch: fetchFn } = {}) {
    if (!server) throw new TypeError('edgehub: server is required, e.g. http://127.0.0.1:8080');
    if (!tenant) throw new TypeError('edgehub: tenant is required');
    this.server = new URL(server).toString().replace(/\/+$/, '');
    this.tenant = tenant;
    this.token = token;
    this.retries = retries;
    this.fetch = fetchFn || globalThis.fetch.bind(globalThis);
  }

  /** Publishes one event; resolves to {seq, duplicate, idempotencyKey}. */
  async publish(topic, data, options = {}) {
    let body = JSON.stringify(data);
    if (body === undefined) {
      if (options.op !== 'delete') throw new TypeError('edgehub: publish needs data that JSON can encode');
      body = '';
    }
    return this.#publish(topic, body, 'application/json', options);
  }

  /**
   * Publishes events as one batch, committed atomically and numbered in
   * order; resolves to {first, last, count, duplicate, idempotencyKey}.
   */
  async publishBatch(topic, events, options = {}) {
    if (!Array.isArray(events) || events.length === 0) throw new TypeError('edgehub: a batch needs at least one event');
    const lines = events.map((e) => {
      const line = JSON.stringify(e);
      if (line === undefined) throw new TypeError('edgehub: every event of a batch needs data that JSON can encode');
      return line;
    });
    return this.#publish(topic, lines.join('\n') + '\n', 'application/x-ndjson', options);
  }

  async #publish(topic, body, contentType, { type, key, op, idempotencyKey, signal } = {}) {
    const q = new URLSearchParams();
    if (type) q.set('type', type);
    if (key !== undefined) q.set('key', key);
    if (op) q.set('op', op);
    const ik = idempotencyKey || newKey();
    const answer = await this.#call('POST', this.#topicPath(topic, 'notify'), q, {
      body, signal, headers: { 'Content-Type': contentType, 'Idempotency-Key': ik },
    });
    return { ...answer, idempotencyKey: ik };
  }

  /** A page of a topic's events: {events, head, next_after, gap?}. */
  events(topic, { after = 0, limit, signal } = {}) {
    const q = new URLSearchParams({ after: String(after) });
    if (limit) q.set('limit', String(limit));
    return this.#call('GET', this.#topicPath(topic, 'events'), q, { signal });
  }

  /** A page of the tenant's events over topics and patterns: {events, head, next_after, gaps?}. */
  tenantEvents({ topics = [], patterns = [], after = 0, limit, signal } = {}) {
    const q = selectors(topics, patterns);
    q.set('after', String(after));
    if (limit) q.set('limit', String(limit));
    return this.#call('GET', `${this.#tenantPath()}/events`, q, { signal });
  }

  /** A topic's state: {seq, state}. */
  state(topic, { signal } = {}) {
    return this.#call('GET', this.#topicPath(topic, 'state'), new URLSearchParams(), { signal });
  }

  /** A page of the tenant's topics: {topics: [{topic, head, first, streams}], next_after}. */
  topics({ pattern, after, limit, signal } = {}) {
    const q = new URLSearchParams();
    if (pattern) q.set('pattern', pattern);
    if (after) q.set('after', after);
    if (limit) q.set('limit', String(limit));
    return this.#call('GET', `${this.#tenantPath()}/topics`, q, { signal });
  }

  /** Watches one topic; see Watch. */
  watch(topic, options = {}) {
    return new Watch(this, `${this.#topicPath(topic, 'watch')}`, new URLSearchParams(), options);
  }

  /**
   * Watches several topics through one tenant stream, in the tenant's
   * order: positions are tenant positions (pos), events carry their topic,
   * gaps are per topic. With no topics and no patterns, every topic the
   * token may subscribe to.
   */
  watchTenant({ topics = [], patterns = [], ...options } = {}) {
    if (options.snapshot) throw new TypeError('edgehub: a tenant stream has no snapshot');
    return new Watch(this, `${this.#tenantPath()}/watch`, selectors(topics, patterns), options);
  }

  #tenantPath() {
    return `/v1/tenants/${encodeURIComponent(this.tenant)}`;
  }

  #topicPath(topic, route) {
    return `${this.#tenantPath()}/topics/${encodeURIComponent(topic)}/${route}`;
  }

  /** @internal the URL of path with query q. */
  url(path, q) {
    const s = q.toString();
    return this.server + path + (s ? '?' + s : '');
  }

  /** @internal the token of the next request: a function is asked each time. */
  async bearer() {
    return typeof this.token === 'function' ? (await this.token()) || '' : this.token;
  }

  // #call sends one request and reads its JSON answer, again after a
  // temporary refusal or a failure that left it unanswered, up to retries
  // times: a read changes nothing, and a publish carries its idempotency
  // key in every attempt.
  async #call(method, path, q, { body, headers = {}, signal } = {}) {
    const backoff = new Backoff(500);
    for (let attempt = 0; ; attempt++) {
      let error;
      try {
        const token = await this.bearer();
        const h = { Accept: 'application/json', ...headers };
        if (token) h.Authorization = `Bearer ${token}`;
        const res = await this.fetch(this.url(path, q), { method, headers: h, body, signal });
        const text = await res.text();
        if (res.ok) return text ? JSON.parse(text) : {};
        error = refusal(res, text, token);
      } catch (e) {
        // fetch fails with a TypeError when it got no whole answer: the
        // connection was refused, reset or cut.
        if (signal?.aborted || !(e instanceof TypeError)) throw e;
        error = e;
      }
      if (error instanceof EdgehubError && !error.temporary) throw error;
      if (attempt >= this.retries) throw error;
      await sleep(backoff.next(error.retryAfter || 0), signal);
    }
  }
}

/**
 * Watch is one watch across its connections: every event after its start,
 * in order, each once, to onEvent; the hub's own frames to onHello,
 * onSnapshot and onGap. A stream that ends (the network failed, the server
 * restarted or ended it, nothing arrived for idleTimeout) is resumed with
 * Last-Event-ID set to the last position handed out, after the server's
 * retry hint, doubled on each failed attempt (at most 30 s; a 429's
 * Retry-After if longer), with jitter. A refusal that a retry would not
 * mend (a bad token, a bad name, a 403) ends the watch: done rejects with
 * its EdgehubError. close() ends it too; done then resolves.
 *
 * A callback that returns a promise is awaited before the next frame, so
 * events are handled one at a time, in order. A callback that throws ends
 * the watch: done rejects with what it threw, and position stays at the
 * frame before.
 */
export class Watch {
  #client; #path; #query; #o;
  #lastId = ''; #needSnapshot; #closed = false; #conn = null; #wake = null;
  #backoff = new Backoff(DEFAULT_RETRY);

  constructor(client, path, query, options) {
    this.#client = client;
    this.#path = path;
    this.#query = query;
    this.#o = { idleTimeout: 45000, ...options };
    if (this.#o.after !== undefined && this.#o.after !== null) {
      if (!Number.isSafeInteger(this.#o.after) || this.#o.after < 0) throw new TypeError('edgehub: after must be a non-negative integer');
      query.set('after', String(this.#o.after));
    }
    this.#needSnapshot = !!this.#o.snapshot;
    if (this.#needSnapshot) query.set('snapshot', '1');
    this.#o.signal?.addEventListener('abort', () => this.close(), { once: true });
    this.done = this.#run();
    this.done.catch(() => {}); // a caller that never looks at done sees onError
  }

  /** The position the watch would resume after: the last event's, gap's or hello's id; null before any. */
  get position() {
    return this.#lastId === '' ? null : Number(this.#lastId);
  }

  /** Ends the watch: its stream closes, no callback runs after this returns, done resolves. */
  close() {
    this.#closed = true;
    this.#conn?.abort();
    this.#wake?.();
  }

  async #run() {
    try {
      if (this.#o.signal?.aborted) return;
      for (;;) {
        let error;
        try {
          await this.#stream();
          error = new Error('the server ended the stream');
        } catch (e) {
          error = e;
        }
        if (this.#closed) return;
        if (error instanceof Fatal) throw error.cause;
        if (error instanceof EdgehubError && !error.temporary) throw error;
        const delay = this.#backoff.next(error.retryAfter || 0);
        this.#o.onRetry?.({ error, delay, lastEventId: this.#lastId });
        await new Promise((resolve) => {
          const t = setTimeout(resolve, delay);
          this.#wake = () => { clearTimeout(t); resolve(); };
        });
        this.#wake = null;
        if (this.#closed) return;
      }
    } catch (e) {
      this.#closed = true;
      this.#o.onError?.(e);
      throw e;
    }
  }

  // #stream runs one connection until it ends, and throws why.
  async #stream() {
    const conn = new AbortController();
    this.#conn = conn;
    const client = this.#client;
    const token = await client.bearer();
    const headers = { Accept: 'text/event-stream' };
    if (this.#lastId !== '') headers['Last-Event-ID'] = this.#lastId;
    if (token) headers.Authorization = `Bearer ${token}`;
    let idle;
    const arm = () => {
      clearTimeout(idle);
      if (this.#o.idleTimeout > 0) idle = setTimeout(() => conn.abort(new StreamBreak('nothing arrived for ' + this.#o.idleTimeout + ' ms')), this.#o.idleTimeout);
    };
    arm();
    try {
      if (this.#closed) return;
      const res = await client.fetch(client.url(this.#path, this.#query), { headers, signal: conn.signal, cache: 'no-store' });
      if (!res.ok) throw refusal(res, await res.text(), token);
      if (!(res.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
        throw new Fatal(new Error(`edgehub: not an event stream: ${res.headers.get('Content-Type')}`));
      }
      const parser = new Parser();
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        let chunk;
        try {
          chunk = await reader.read();
        } catch (e) {
          throw conn.signal.reason instanceof StreamBreak ? conn.signal.reason : new StreamBreak(`read the stream: ${e.message}`);
        }
        if (chunk.done) return;
        clearTimeout(idle); // a slow callback is no silent server
        let frames;
        try {
          frames = parser.push(decoder.decode(chunk.value, { stream: true }));
        } catch (e) {
          throw new Fatal(e);
        }
        for (const f of frames) {
          if (f.retry !== undefined) this.#backoff.base = f.retry;
          if (f.event === undefined) continue;
          if (this.#closed) return;
          await this.#frame(f);
        }
        arm();
      }
    } finally {
      clearTimeout(idle);
      conn.abort();
    }
  }

  // #frame hands one frame to its callback and keeps the position the
  // next connection resumes from.
  async #frame(f) {
    if (f.event !== 'hello') this.#backoff.failures = 0; // the stream delivers: back off afresh next time
    const v = decode(f);
    switch (f.event) {
      case 'hello':
        await call(this.#o.onHello, v);
        if (!this.#needSnapshot && f.id !== undefined) this.#lastId = f.id;
        return;
      case 'snapshot':
        await call(this.#o.onSnapshot, v);
        this.#needSnapshot = false;
        this.#lastId = f.id;
        return;
      case 'gap':
        await call(this.#o.onGap, v);
        this.#lastId = f.id;
        return;
      default:
        await call(this.#o.onEvent, v);
        this.#lastId = f.id;
    }
  }
}

// StreamBreak is a stream that broke off (cut, or idle for too long):
// reconnecting may mend it.
class StreamBreak extends Error {}

// Fatal carries what ends a watch for good although it is no refusal: a
// callback that threw, or a peer that is no Edgehub.
class Fatal extends Error {
  constructor(cause) {
    super(cause?.message, { cause });
  }
}

// call runs a callback, marking what it throws as the end of the watch.
async function call(fn, v) {
  try {
    await fn?.(v);
  } catch (e) {
    throw new Fatal(e);
  }
}

function decode(f) {
  try {
    return JSON.parse(f.data);
  } catch {
    throw new Fatal(new Error(`edgehub: not an Edgehub stream: ${f.event} frame ${f.data.slice(0, 200)}`));
  }
}

/**
 * Parser reads Server-Sent Events as the HTML standard defines them: lines
 * end with CRLF, LF or CR; a blank line ends a frame; "data" lines join
 * with LF; a leading space after the colon is dropped; comments are
 * skipped. push returns the frames a chunk of text completed; a frame's id
 * is undefined when it had no id line, and a frame that only set retry
 * carries retry and no event.
 */
export class Parser {
  #buf = ''; #data = []; #size = 0; #event = ''; #id; #retry;

  push(text) {
    const frames = [];
    this.#buf += text;
    let start = 0;
    for (;;) {
      const lf = this.#buf.indexOf('\n', start);
      const cr = this.#buf.indexOf('\r', start);
      let end, next;
      if (cr !== -1 && (lf === -1 || cr < lf)) {
        if (cr === this.#buf.length - 1) break; // a CRLF may be split across chunks
        end = cr;
        next = this.#buf[cr + 1] === '\n' ? cr + 2 : cr + 1;
      } else if (lf !== -1) {
        end = lf;
        next = lf + 1;
      } else {
        break;
      }
      const f = this.#line(this.#buf.slice(start, end));
      if (f) frames.push(f);
      start = next;
    }
    this.#buf = this.#buf.slice(start);
    if (this.#buf.length > MAX_FRAME) throw new Error('edgehub: a stream line is over 64 MiB');
    return frames;
  }

  #line(line) {
    if (line === '') {
      const f = this.#data.length > 0 ? { event: this.#event || 'message', data: this.#data.join('\n'), id: this.#id } : null;
      const retry = this.#retry;
      this.#data = []; this.#size = 0; this.#event = ''; this.#id = undefined; this.#retry = undefined;
      if (retry !== undefined) return { ...(f || {}), retry };
      return f;
    }
    if (line[0] === ':') return null;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value[0] === ' ') value = value.slice(1);
    switch (field) {
      case 'data':
        this.#data.push(value);
        this.#size += value.length;
        if (this.#size > MAX_FRAME) throw new Error('edgehub: a stream frame is over 64 MiB');
        break;
      case 'event': this.#event = value; break;
      case 'id': if (!value.includes('\0')) this.#id = value; break;
      case 'retry': if (/^\d+$/.test(value)) this.#retry = Number(value); break;
    }
    return null;
  }
}

// Backoff is the wait before the next attempt: base doubled per failure
// up to MAX_BACKOFF (or base, if the server asked for more), never less
// than a Retry-After, plus up to 50% jitter.
class Backoff {
  constructor(base) {
    this.base = base;
    this.failures = 0;
  }

  next(retryAfter) {
    const ceiling = Math.max(MAX_BACKOFF, this.base);
    let d = this.base;
    for (let i = 0; i < this.failures && d < ceiling; i++) d *= 2;
    this.failures++;
    d = Math.max(Math.min(d, ceiling), retryAfter);
    return d + Math.floor(Math.random() * (d / 2 + 1));
  }
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => { clearTimeout(t); reject(signal.reason); }, { once: true });
  });
}

function selectors(topics, patterns) {
  const q = new URLSearchParams();
  for (const t of topics) q.append('topic', t);
  for (const p of patterns) q.append('pattern', p);
  return q;
}

// refusal reads an error answer into an EdgehubError.
function refusal(res, text, token) {
  let code = 'unknown';
  let message = text.trim().slice(0, 1000);
  try {
    const e = JSON.parse(text).error;
    if (e && e.code) ({ code, message } = e);
  } catch { /* not the error shape: a proxy's page, say */ }
  return new EdgehubError(res.status, code, message, {
    retryAfter: retryAfterMs(res.headers.get('Retry-After')),
    reason: res.status === 401 ? credentialCheck(token) : '',
  });
}

// retryAfterMs reads a Retry-After in either form, seconds or an HTTP date.
function retryAfterMs(v) {
  if (!v) return 0;
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? 0 : Math.max(0, at - Date.now());
}

// credentialCheck says which check of a refused token this side can tell
// failed: none given, not a JWT, expired (with the server's 30 s of
// leeway), or none of those.
function credentialCheck(token) {
  if (!token) return 'no token was given';
  const parts = token.split('.');
  let claims;
  try {
    if (parts.length !== 3) throw new Error();
    const b64 = parts[1].replace(/-/g, '+').replace(/_/g, '/');
    claims = JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))));
  } catch {
    return 'the token is not a JWT';
  }
  if (typeof claims.exp === 'number' && Date.now() > (claims.exp + 30) * 1000) {
    return `the token expired at ${new Date(claims.exp * 1000).toISOString().replace('.000Z', 'Z')}`;
  }
  return 'the token is a JWT and unexpired, and the server does not accept it: ' +
    "another tenant's or an old secret's, revoked, or of an issuer it does not trust";
}

// newKey makes an idempotency key: 128 random bits as hex. getRandomValues
// is there in every browser context (randomUUID only in secure ones) and
// in Node.js's globalThis.crypto from version 19; 18 has it as webcrypto.
function newKey() {
  const bytes = new Uint8Array(16);
  (globalThis.crypto || nodeCrypto()).getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

let webcrypto;
function nodeCrypto() {
  if (!webcrypto) throw new Error('edgehub: no crypto.getRandomValues here; pass idempotencyKey');
  return webcrypto;
}
if (!globalThis.crypto && typeof process !== 'undefined' && process.versions?.node) {
  webcrypto = (await import('node:crypto')).webcrypto;
}
