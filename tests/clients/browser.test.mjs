// Debian's chromium, driven by playwright-core, as a real browser client:
// its EventSource, its reconnect with Last-Event-ID, its event listeners.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Hub, launchChromium } from './harness.mjs';

let browser;

before(async () => {
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
});

// page opens a same-origin page of the hub and an EventSource in it that
// records what it sees in window.seen.
async function page(hub, url) {
  const p = await browser.newPage();
  await p.goto(hub.base + '/healthz');
  await p.evaluate((u) => {
    window.seen = { messages: [], hellos: [], gaps: [], opens: 0 };
    const es = new EventSource(u);
    window.es = es;
    es.onopen = () => { window.seen.opens++; };
    es.addEventListener('message', (e) => window.seen.messages.push({ id: e.lastEventId, data: JSON.parse(e.data) }));
    es.addEventListener('hello', (e) => window.seen.hellos.push(JSON.parse(e.data)));
    es.addEventListener('gap', (e) => window.seen.gaps.push({ id: e.lastEventId, data: JSON.parse(e.data) }));
  }, url);
  return p;
}

const seen = (p) => p.evaluate(() => window.seen);

test('browser: publish right after onopen arrives', async () => {
  const hub = new Hub();
  await hub.start();
  try {
    const p = await browser.newPage();
    await p.goto(hub.base + '/healthz');
    // The page itself publishes in onopen, as a browser app would.
    const got = await p.evaluate((u) => new Promise((resolve, reject) => {
      const es = new EventSource(u + '/watch');
      es.onopen = () => {
        fetch(u + '/notify', { method: 'POST', body: JSON.stringify({ from: 'onopen' }) })
          .then((r) => r.json()).then((a) => { window.published = a.seq; }, reject);
      };
      es.onmessage = (e) => { es.close(); resolve({ id: e.lastEventId, env: JSON.parse(e.data), published: window.published }); };
      setTimeout(() => reject(new Error('no event')), 20000);
    }), hub.base + '/v1/tenants/acme/topics/b');
    assert.deepEqual(got.env.data, { from: 'onopen' });
    assert.equal(got.id, String(got.env.seq));
    await p.close();
  } finally {
    await hub.close();
  }
});

test('browser: survives a restart by reconnecting with Last-Event-ID, once', async () => {
  const hub = new Hub();
  await hub.start();
  try {
    const p = await page(hub, hub.url('r', 'watch') + '?after=0');
    await hub.publish('r', 1);
    await p.waitForFunction(() => window.seen.messages.length === 1, null, { timeout: 20000 });
    await hub.restart('SIGKILL');
    for (const n of [2, 3, 4]) await hub.publish('r', n);
    await p.waitForFunction(() => window.seen.messages.length >= 4, null, { timeout: 20000 });
    const s = await seen(p);
    assert.deepEqual(s.messages.map((m) => m.data.data), [1, 2, 3, 4]);
    assert.deepEqual(s.messages.map((m) => m.id), ['1', '2', '3', '4']);
    assert.ok(s.hellos.length >= 2, 'reconnected');
    assert.equal(s.hellos[1].position, 1, 'the reconnect carried Last-Event-ID 1 over after=0');
    await p.close();
  } finally {
    await hub.close();
  }
});

test('browser: a gap event reaches addEventListener', async () => {
  const hub = new Hub(['--retention-events', '5']);
  await hub.start();
  try {
    for (let i = 1; i <= 20; i++) await hub.publish('g', i);
    assert.deepEqual(await hub.waitTrimmed('g'), { from: 1, to: 15 });
    const p = await page(hub, hub.url('g', 'watch') + '?after=0');
    await p.waitForFunction(() => window.seen.messages.length === 5, null, { timeout: 20000 });
    const s = await seen(p);
    assert.deepEqual(s.gaps, [{ id: '15', data: { from: 1, to: 15 } }]);
    assert.deepEqual(s.messages.map((m) => m.data.seq), [16, 17, 18, 19, 20]);
    await p.close();
  } finally {
    await hub.close();
  }
});

test('browser: a live stream that drops before its first event misses nothing (hello carries id: P)', async () => {
  // A long retry leaves time to publish while the browser is away.
  const hub = new Hub(['--retry', '3s']);
  await hub.start();
  try {
    for (const n of [1, 2]) await hub.publish('h', n);
    const p = await page(hub, hub.url('h', 'watch')); // live from now: position 2
    await p.waitForFunction(() => window.seen.hellos.length === 1, null, { timeout: 20000 });
    await hub.restart('SIGKILL');
    for (const n of [3, 4]) await hub.publish('h', n); // while the browser waits to reconnect
    await p.waitForFunction(() => window.seen.messages.length >= 2, null, { timeout: 20000 });
    const s = await seen(p);
    assert.equal(s.hellos[0].position, 2);
    assert.equal(s.hellos[1].position, 2, 'the reconnect carried Last-Event-ID 2, the first hello\'s id');
    assert.deepEqual(s.messages.map((m) => m.data.data), [3, 4]);
    await p.close();
  } finally {
    await hub.close();
  }
});

test('browser over TLS: HTTP/2 lets one page hold more than six streams', async () => {
  const hub = new Hub([], { tls: true });
  await hub.start();
  const context = await browser.newContext({ ignoreHTTPSErrors: true });
  try {
    const p = await context.newPage();
    await p.goto(hub.base + '/healthz');
    const streams = 8; // HTTP/1.1 would stop at 6 per host
    const got = await p.evaluate(([u, n]) => new Promise((resolve, reject) => {
      let opened = 0;
      const seqs = [];
      for (let i = 0; i < n; i++) {
        const es = new EventSource(u + '/watch');
        es.onopen = () => {
          if (++opened === n) fetch(u + '/notify', { method: 'POST', body: '{"over":"h2"}' }).catch(reject);
        };
        es.onmessage = (e) => {
          es.close();
          seqs.push(JSON.parse(e.data).seq);
          if (seqs.length === n) {
            const proto = performance.getEntriesByType('navigation')[0].nextHopProtocol;
            resolve({ seqs, proto });
          }
        };
      }
      setTimeout(() => reject(new Error(`${opened} of ${n} streams opened, ${seqs.length} got the event`)), 20000);
    }), [hub.base + '/v1/tenants/acme/topics/tls', streams]);
    assert.deepEqual(got.seqs, Array(streams).fill(1));
    assert.equal(got.proto, 'h2');
  } finally {
    await context.close();
    await hub.close();
  }
});

test('browser: one tenant stream carries twelve topics in position order, and resumes across a kill -9', async () => {
  const hub = new Hub();
  await hub.start();
  try {
    // Twelve topics: six named exactly, six by one pattern. More than a
    // browser's six HTTP/1.1 connections to a server, in one EventSource.
    const exact = ['t0', 't1', 't2', 't3', 't4', 't5'];
    const rooms = ['room:0', 'room:1', 'room:2', 'room:3', 'room:4', 'room:5'];
    const q = exact.map((t) => 'topic=' + t).join('&') + '&pattern=' + encodeURIComponent('room:*');
    const p = await page(hub, `${hub.base}/v1/tenants/acme/watch?${q}&after=0`);
    const sent = [];
    for (const [i, topic] of [...exact, ...rooms].entries()) {
      await hub.publish(topic, i);
      sent.push(topic);
      await hub.publish('elsewhere', i); // not selected
    }
    await p.waitForFunction(() => window.seen.messages.length === 12, null, { timeout: 20000 });
    await hub.restart('SIGKILL');
    for (const topic of ['room:9', 'elsewhere', 't0']) {
      await hub.publish(topic, 'after');
      if (topic !== 'elsewhere') sent.push(topic);
    }
    await p.waitForFunction(() => window.seen.messages.length >= 14, null, { timeout: 20000 });
    const s = await seen(p);
    assert.deepEqual(s.messages.map((m) => m.data.topic), sent);
    const positions = s.messages.map((m) => m.data.pos);
    assert.deepEqual(s.messages.map((m) => m.id), positions.map(String), 'each id is the position');
    assert.deepEqual([...positions].sort((a, b) => a - b), positions, 'in position order');
    assert.equal(new Set(positions).size, positions.length, 'each once');
    assert.ok(s.hellos.length >= 2, 'reconnected');
    assert.equal(s.hellos[1].position, positions[11], 'the reconnect carried the last position');
    await p.close();
  } finally {
    await hub.close();
  }
});
