// The Durable Streams protocol's own TypeScript client
// (@durable-streams/client, pinned in package.json) against the real
// edgehub binary: in node, across a kill -9 of the server, and in Debian's
// chromium on another origin. A stream "x" is also the native topic
// streams/x, so a native SSE watcher must see what the client appended, in
// the same order.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { EventSource } from 'eventsource';
import { DurableStream, IdempotentProducer, stream } from '@durable-streams/client';
import { Hub, until, launchChromium } from './harness.mjs';

// Short retries, so that a reader that lost the server finds it again soon
// after the restart rather than after the defaults' growing backoff.
const backoff = { initialDelay: 50, maxDelay: 300, multiplier: 1.5 };

const offset = (seq) => String(seq).padStart(16, '0') + '_0000000000000000';
const streamURL = (hub, name) => `${hub.base}/v1/stream/${name}`;

function newHub() {
  return new Hub(['--cors-origins', '*']);
}

// countingFetch is fetch that counts the POSTs it sends.
function countingFetch() {
  const f = (input, init) => {
    if (init?.method === 'POST') f.posts++;
    return fetch(input, init);
  };
  f.posts = 0;
  return f;
}

// follow reads the stream with the client from offset, live in the given
// mode, and records every batch (JSON) or chunk (text) it hands over. A
// session that ends in an error (as the client's SSE session does when the
// server dies under it: the body read fails, and 0.2.7 reconnects only
// after a clean end) is opened again from the last offset it delivered,
// which is how an application resumes with this client; got.resumes
// counts those.
async function follow(url, live, { from = '-1', text = false } = {}) {
  const got = { items: [], text: '', offsets: [], upToDate: false, resumes: 0, errors: [] };
  const f = { got, live, cancelled: false };
  const open = async (offset) => {
    const res = await stream({ url, live, offset, backoffOptions: backoff, json: !text || undefined });
    f.res = res;
    const record = (b) => { got.offsets.push(b.offset); got.upToDate = b.upToDate; };
    if (text) res.subscribeText((c) => { got.text += c.text; record(c); });
    else res.subscribeJson((b) => { got.items.push(...b.items); record(b); });
    res.closed.catch((e) => {
      if (f.cancelled) return;
      got.errors.push(String(e));
      got.resumes++;
      reopen(got.offsets.at(-1) ?? offset);
    });
    return res;
  };
  const reopen = (offset) => open(offset).catch(() => setTimeout(() => !f.cancelled && reopen(offset), 100));
  await open(from);
  f.cancel = () => { f.cancelled = true; f.res?.cancel(); };
  return f;
}

// watchNative watches the stream's native topic streams/<name> from its
// start, as any native SSE client would.
function watchNative(hub, name) {
  const es = new EventSource(`${hub.base}/v1/tenants/streams/topics/${name}/watch?after=0`);
  const events = [];
  es.addEventListener('message', (e) => events.push({ id: e.lastEventId, env: JSON.parse(e.data) }));
  return { es, events };
}

// retryNetworkErrors is f retried, a bounded number of times, while it
// fails to get an answer at all (the server is down).
function retryNetworkErrors(f) {
  return async (input, init) => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await f(input, init);
      } catch (e) {
        if (!(e instanceof TypeError) || attempt >= 200) throw e;
        await new Promise((r) => setTimeout(r, 50)); // backoff, not synchronisation
      }
    }
  };
}

const range = (from, to) => Array.from({ length: to - from + 1 }, (_, i) => from + i);
const msg = (n) => ({ n, body: `message ${n}`, nested: { even: n % 2 === 0 } });

test('node: JSON stream, single, batched and idempotent-producer appends; catch-up, long-poll and SSE see each once, in order, as the native watcher does', async () => {
  const hub = newHub();
  await hub.start();
  const followers = [];
  let native;
  try {
    const url = streamURL(hub, 'orders');
    const counted = countingFetch();
    const handle = await DurableStream.create({ url, contentType: 'application/json', fetch: counted });
    assert.equal(handle.contentType, 'application/json');
    assert.equal((await handle.head()).offset, offset(0));
    native = watchNative(hub, 'orders');

    // One append, then five at once: the client batches those overlapping
    // in time into fewer POSTs (a JSON array the server flattens).
    await handle.append(JSON.stringify(msg(1)));
    const before = counted.posts;
    await Promise.all(range(2, 6).map((n) => handle.append(JSON.stringify(msg(n)))));
    assert.ok(counted.posts - before < 5, `5 overlapping appends took ${counted.posts - before} POSTs: no batching`);

    // An idempotent producer, batching and pipelining on its own.
    const errors = [];
    const producer = new IdempotentProducer(handle, 'orders-writer', { lingerMs: 10, onError: (e) => errors.push(e) });
    for (const n of range(7, 12)) producer.append(JSON.stringify(msg(n)));
    await producer.flush();
    assert.deepEqual(errors, []);
    assert.equal(producer.epoch, 0);
    // The producer's first batch sent again, as a retry after a lost answer
    // would: the server knows it and stores nothing.
    const dup = await fetch(url, {
      method: 'POST', body: JSON.stringify([{ duplicate: true }]),
      headers: { 'content-type': 'application/json', 'producer-id': 'orders-writer', 'producer-epoch': '0', 'producer-seq': '0' },
    });
    assert.equal(dup.status, 204, 'a replayed producer batch is a duplicate');

    // Catch-up only: exactly what was appended, and the stream's tail.
    const res = await stream({ url, live: false });
    assert.deepEqual(await res.json(), range(1, 12).map(msg));
    assert.equal(res.offset, offset(12));
    assert.equal(res.upToDate, true);
    assert.equal((await handle.head()).offset, offset(12));

    // Live: one follower per mode, from the start and from the middle.
    for (const [live, from] of [['long-poll', '-1'], ['sse', '-1'], ['long-poll', offset(6)], ['sse', offset(6)]]) {
      followers.push({ from, ...(await follow(url, live, { from })) });
    }
    await until(() => followers.every((f) => f.got.upToDate && f.got.items.length === (f.from === '-1' ? 12 : 6)), 'followers caught up');
    for (const n of range(13, 16)) await handle.append(JSON.stringify(msg(n))); // one by one, while they wait
    for (const n of range(17, 20)) producer.append(JSON.stringify(msg(n)));
    await producer.flush();
    await until(() => followers.every((f) => f.got.items.length >= (f.from === '-1' ? 20 : 14)), 'followers got the live appends');
    await until(() => native.events.length >= 20, 'the native watcher got every event');

    for (const f of followers) {
      assert.deepEqual(f.got.items, range(f.from === '-1' ? 1 : 7, 20).map(msg), `${f.live} from ${f.from}`);
      assert.equal(f.got.offsets.at(-1), offset(20), `${f.live} from ${f.from} ends at the tail`);
      assert.equal(f.res.live, f.live);
      assert.equal(f.got.resumes, 0);
    }
    // The native topic: the same 20 events, same order, seq = offset.
    assert.deepEqual(native.events.map((e) => e.env.data), range(1, 20).map(msg));
    assert.deepEqual(native.events.map((e) => e.env.seq), range(1, 20));
    assert.deepEqual(native.events.map((e) => e.id), range(1, 20).map(String));
    assert.ok(native.events.every((e) => e.env.type === 'message' && e.env.encoding === undefined));
  } finally {
    for (const f of followers) f.cancel();
    native?.es.close();
    await hub.close();
  }
});

test('node: text/plain stream, its bytes exact in catch-up, long-poll, SSE and (base64, one event per POST) the native watcher', async () => {
  const hub = newHub();
  await hub.start();
  const followers = [];
  let native;
  try {
    const url = streamURL(hub, 'log.txt');
    const counted = countingFetch();
    const handle = await DurableStream.create({ url, contentType: 'text/plain', fetch: counted });
    native = watchNative(hub, 'log.txt');
    const lines = range(1, 12).map((n) => `line ${n}: héllo, wörld ✓\n`);
    const posts = [];
    let p = counted.posts;
    await handle.append(lines[0]);
    posts.push(counted.posts - p);
    p = counted.posts;
    await Promise.all(lines.slice(1, 5).map((l) => handle.append(l))); // batched: bytes concatenated
    posts.push(counted.posts - p);
    const producer = new IdempotentProducer(handle, 'log-writer', { lingerMs: 10 });
    for (const l of lines.slice(5, 8)) producer.append(l);
    await producer.flush();

    const res = await stream({ url, live: false });
    assert.equal(await res.text(), lines.slice(0, 8).join(''));
    for (const live of ['long-poll', 'sse']) followers.push(await follow(url, live, { text: true }));
    await until(() => followers.every((f) => f.got.upToDate && f.got.text.length === lines.slice(0, 8).join('').length), 'text followers caught up');
    for (const l of lines.slice(8)) await handle.append(l);
    const all = lines.join('');
    await until(() => followers.every((f) => f.got.text.length >= all.length), 'text followers got the live appends');
    for (const f of followers) assert.equal(f.got.text, all, f.live);

    // Native: each POST is one event, its bytes in base64; together they
    // are the stream's bytes, in order.
    await until(async () => {
      const head = await (await fetch(`${hub.base}/v1/tenants/streams/topics/log.txt/events?after=0`)).json();
      return native.events.length === head.head;
    }, 'the native watcher at the head');
    assert.ok(native.events.length < lines.length, 'some appends were batched into one POST');
    assert.ok(native.events.every((e) => e.env.encoding === 'base64' && typeof e.env.data === 'string'));
    assert.deepEqual(native.events.map((e) => e.env.seq), range(1, native.events.length));
    assert.equal(native.events.map((e) => Buffer.from(e.env.data, 'base64').toString('utf8')).join(''), all);
    assert.equal(Buffer.from(native.events[0].env.data, 'base64').toString('utf8'), lines[0], 'the first POST alone');
    assert.ok(posts[1] < 4, `4 overlapping appends took ${posts[1]} POSTs: no batching`);
  } finally {
    for (const f of followers) f.cancel();
    native?.es.close();
    await hub.close();
  }
});

test('node: kill -9 while following and writing: after the restart every message is there once, in order, for readers and the native watcher', async (t) => {
  const hub = newHub();
  await hub.start();
  const followers = [];
  let native;
  try {
    const url = streamURL(hub, 'crash');
    const handle = await DurableStream.create({ url, contentType: 'application/json', backoffOptions: backoff });
    native = watchNative(hub, 'crash');
    for (const live of ['long-poll', 'sse']) followers.push(await follow(url, live));
    // The producer retries what the kill cut off (its fetch retries network
    // errors, bounded; it hands every answer, 409s included, to the
    // producer, which orders pipelined retries by them). Each message is a batch of its own (Producer-Seq
    // n-1), three in flight at a time. The answer to message 6 is the one
    // the kill loses: its POST committed, the server is killed -9 before
    // the client reads the answer, so the client must retry it, and the
    // server's producer state, stored with the data, must make the retry a
    // duplicate (204), not a second copy.
    const sent = [];
    let killed;
    const kill = new Promise((resolve) => { killed = resolve; });
    const retrying = retryNetworkErrors(async (input, init) => {
      const seq = new Headers(init?.headers).get('producer-seq');
      const r = await fetch(input, init);
      sent.push(`${seq}:${r.status}`);
      if (seq === '5' && r.status === 200 && !sent.includes('killed')) {
        sent.push('killed');
        await hub.stop('SIGKILL');
        killed();
        throw new TypeError('fetch failed: the answer was lost in the kill');
      }
      return r;
    });
    const errors = [];
    const producer = new IdempotentProducer(handle, 'crash-writer', { maxBatchBytes: 1, maxInFlight: 3, fetch: retrying, onError: (e) => errors.push(e) });

    for (const n of range(1, 5)) producer.append(JSON.stringify(msg(n)));
    await producer.flush(); // 1..5 acknowledged before the kill
    await until(() => followers.every((f) => f.got.items.length === 5) && native.events.length === 5, 'first five everywhere');

    for (const n of range(6, 10)) producer.append(JSON.stringify(msg(n)));
    await kill;
    await hub.start(); // same port, same data
    // Read before the producer's retries can add anything: what was
    // acknowledged is there, and so is message 6, whose answer was lost.
    const early = await (await stream({ url, live: false })).json();
    assert.deepEqual(early.slice(0, 6), range(1, 6).map(msg), 'acknowledged appends (and the unanswered commit) survived kill -9');
    await producer.flush();
    for (const n of range(11, 15)) producer.append(JSON.stringify(msg(n)));
    await producer.flush();
    assert.deepEqual(errors, []);
    t.diagnostic(`Producer-Seq:status of each answered POST: ${sent.join(' ')}`);
    const retried = sent.slice(sent.indexOf('killed'));
    assert.ok(retried.includes('5:204'), `the retry of the lost answer is a duplicate: ${retried.join(' ')}`);
    assert.ok(!retried.includes('5:200'), 'and stored nothing twice');

    const res = await stream({ url, live: false });
    assert.deepEqual(await res.json(), range(1, 15).map(msg), 'stored once each, in order');
    await until(() => followers.every((f) => f.got.items.length >= 15) && native.events.length >= 15, 'followers resumed after the restart');
    for (const f of followers) {
      assert.deepEqual(f.got.items, range(1, 15).map(msg), `${f.live} resumed from its offset`);
      assert.equal(f.got.offsets.at(-1), offset(15));
      t.diagnostic(`${f.live}: sessions the application reopened after the kill: ${f.got.resumes} ${f.got.errors.join(', ')}`);
    }
    // The client's long-poll rides out the kill on its own retries.
    assert.equal(followers.find((f) => f.live === 'long-poll').got.resumes, 0);
    assert.deepEqual(native.events.map((e) => e.env.data), range(1, 15).map(msg));
    assert.deepEqual(native.events.map((e) => e.env.seq), range(1, 15));
  } finally {
    for (const f of followers) f.cancel();
    native?.es.close();
    await hub.close();
  }
});

// A page on an origin of its own (loopback, another port) that imports the
// client's ESM build (it imports nothing itself) straight from node_modules.
function pageServer() {
  const require = createRequire(import.meta.url);
  const dist = require.resolve('@durable-streams/client').replace(/index\.cjs$/, 'index.js');
  const client = readFileSync(dist);
  const html = `<!doctype html><meta charset="utf-8"><title>ds</title>
<script type="importmap">{"imports":{"@durable-streams/client":"/client/index.js"}}</script>
<script type="module">
import * as ds from '@durable-streams/client';
window.ds = ds;
window.ready = true;
</script>`;
  const server = createServer((req, res) => {
    if (req.url === '/') { res.writeHead(200, { 'content-type': 'text/html' }); res.end(html); return; }
    if (req.url === '/client/index.js') { res.writeHead(200, { 'content-type': 'text/javascript' }); res.end(client); return; }
    res.writeHead(404); res.end();
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

let browser;
after(async () => { await browser?.close(); });

test('chromium: a page of another origin creates, appends, follows live (long-poll and SSE) and resumes after kill -9, each message once', async (t) => {
  browser ??= await launchChromium();
  const hub = newHub();
  await hub.start();
  const site = await pageServer();
  const page = await browser.newPage();
  try {
    const origin = `http://127.0.0.1:${site.address().port}`;
    assert.notEqual(origin, hub.base);
    await page.goto(origin + '/');
    await page.waitForFunction(() => window.ready === true, null, { timeout: 10000 });
    const url = streamURL(hub, 'browser');

    // The page creates the stream and appends (cross-origin PUT and POST,
    // preflighted for their headers), then follows it in both modes.
    const first = await page.evaluate(async ([url, backoff]) => {
      const { DurableStream, stream } = window.ds;
      const handle = await DurableStream.create({ url, contentType: 'application/json', warnOnHttp: false });
      for (let n = 1; n <= 3; n++) await handle.append(JSON.stringify({ n, from: 'page' }));
      // As in node (see follow): a session that ends in an error is
      // opened again from the last offset it delivered.
      window.seen = {};
      window.followers = [];
      const open = async (live, offset, got) => {
        const res = await stream({ url, live, offset, backoffOptions: backoff, warnOnHttp: false });
        got.live = res.live;
        window.followers.push(res);
        res.subscribeJson((b) => { got.items.push(...b.items); got.offsets.push(b.offset); });
        res.closed.catch((e) => {
          if (window.stopped) return;
          got.errors.push(String(e));
          const again = () => open(live, got.offsets.at(-1) ?? offset, got).catch(() => setTimeout(again, 100));
          again();
        });
      };
      for (const live of ['long-poll', 'sse']) {
        window.seen[live] = { items: [], offsets: [], errors: [] };
        await open(live, '-1', window.seen[live]);
      }
      return (await handle.head()).offset;
    }, [url, backoff]);
    assert.equal(first, offset(3));
    await page.waitForFunction(() => Object.values(window.seen).every((g) => g.items.length === 3), null, { timeout: 10000 });

    const handle = new DurableStream({ url, contentType: 'application/json', backoffOptions: backoff });
    for (const n of [4, 5]) await handle.append(JSON.stringify({ n, from: 'node' }));
    await page.waitForFunction(() => Object.values(window.seen).every((g) => g.items.length === 5), null, { timeout: 10000 });

    await hub.restart('SIGKILL');
    for (const n of [6, 7, 8]) await handle.append(JSON.stringify({ n, from: 'node' }));
    await page.waitForFunction(() => Object.values(window.seen).every((g) => g.items.length >= 8), null, { timeout: 20000 })
      .catch(async (e) => { throw new Error(`${e.message}: ${JSON.stringify(await page.evaluate(() => window.seen))}`); });

    const seen = await page.evaluate(() => window.seen);
    const want = [1, 2, 3].map((n) => ({ n, from: 'page' })).concat([4, 5, 6, 7, 8].map((n) => ({ n, from: 'node' })));
    for (const live of ['long-poll', 'sse']) {
      assert.equal(seen[live].live, live);
      assert.deepEqual(seen[live].items, want, `${live} in chromium`);
      assert.equal(seen[live].offsets.at(-1), offset(8));
    }
    assert.deepEqual(seen['long-poll'].errors, [], 'the long-poll rode out the kill on its own');
    t.diagnostic(`sse in chromium: sessions reopened after the kill: ${seen.sse.errors.length} ${seen.sse.errors.join(', ')}`);
    await page.evaluate(() => { window.stopped = true; window.followers.forEach((r) => r.cancel()); });
  } finally {
    await page.close();
    site.close();
    await hub.close();
  }
});

test('node: keyed compaction (Edgehub extension): a snapshot read gives each key its latest value, then the client follows live from it', async () => {
  const hub = newHub();
  await hub.start();
  let live;
  try {
    const url = streamURL(hub, 'prices');
    await DurableStream.create({ url, contentType: 'application/json' });
    const key = (k, op) => new DurableStream({ url, contentType: 'application/json', batching: false,
      headers: op ? { 'Stream-Key': k, 'Stream-Key-Op': op } : { 'Stream-Key': k } });
    await key('a').append(JSON.stringify({ k: 'a', v: 1 }));
    await key('b').append(JSON.stringify({ k: 'b', v: 1 }));
    await key('a').append(JSON.stringify({ k: 'a', v: 2 }));
    await key('c').append(JSON.stringify({ k: 'c', v: 1 }));
    await key('c', 'delete').append('null');

    // Without the snapshot, the whole history; with it, the latest values
    // in key order, at the position they fold.
    const all = await stream({ url, live: false });
    assert.equal((await all.json()).length, 5);
    const snap = await stream({ url, live: false, params: { snapshot: '1' } });
    assert.deepEqual(await snap.json(), [{ k: 'a', v: 2 }, { k: 'b', v: 1 }]);
    assert.equal(snap.offset, offset(5));

    // Live over SSE from the snapshot: it, then what comes after, once.
    const got = [];
    live = await stream({ url, live: 'sse', params: { snapshot: '1' }, backoffOptions: backoff });
    live.subscribeJson((b) => { got.push(...b.items); });
    await until(() => got.length === 2);
    await key('b').append(JSON.stringify({ k: 'b', v: 2 }));
    await until(() => got.length === 3);
    assert.deepEqual(got, [{ k: 'a', v: 2 }, { k: 'b', v: 1 }, { k: 'b', v: 2 }]);
    assert.equal(live.offset, offset(6));
  } finally {
    live?.cancel();
    await hub.stop();
  }
});
