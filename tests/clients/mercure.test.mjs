// Debian's chromium as a Mercure subscriber: its EventSource on the hub's
// Mercure URL with several selectors of both revisions, the cookie a
// Mercure app sets for it, and its reconnect with Last-Event-ID across a
// kill -9 of the hub.
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

// publish posts a Mercure update (a form) and returns its id.
async function publish(hub, fields, token) {
  const form = new URLSearchParams();
  for (const [k, v] of fields) form.append(k, v);
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const res = await fetch(`${hub.base}/.well-known/mercure`, { method: 'POST', body: form, headers });
  const body = await res.text();
  if (res.status !== 200) throw new Error(`publish: ${res.status} ${body}`);
  return body;
}

// subscriber opens, in a fresh browser context (its own cookies), a
// same-origin page of the hub, sets the cookie if given, and an
// EventSource on the hub's Mercure URL with query q that records what it
// sees in window.seen.
async function subscriber(hub, q, cookie) {
  const context = await browser.newContext();
  const p = await context.newPage();
  await p.goto(hub.base + '/healthz');
  await p.evaluate(([u, c]) => {
    if (c) document.cookie = `mercureAuthorization=${c}; path=/`;
    window.seen = { updates: [], opens: 0 };
    const es = new EventSource(u);
    es.onopen = () => { window.seen.opens++; };
    es.onmessage = (e) => window.seen.updates.push({ id: e.lastEventId, data: e.data });
  }, [`${hub.base}/.well-known/mercure?${q}`, cookie]);
  return { page: p, context };
}

const updates = (s) => s.page.evaluate(() => window.seen.updates);

test('mercure: one EventSource, several selectors of both revisions, resumed across a kill -9', async () => {
  const hub = new Hub(['--mercure-tenant', 'acme']);
  await hub.start();
  try {
    const q = new URLSearchParams([
      ['match', 'https://example.com/books/1'],
      ['match', 'orders'],
      ['match_urlpattern', 'https://example.com/reviews/:id'],
      ['topic', 'https://example.com/authors/{id}'],
    ]);
    const s = await subscriber(hub, q.toString());
    await s.page.waitForFunction(() => window.seen.opens === 1, null, { timeout: 20000 });
    const ids = [];
    // The first update asks subscribers to reconnect after 500 ms.
    ids.push(await publish(hub, [['topic', 'https://example.com/books/1'], ['data', 'book 1'], ['retry', '500']]));
    await publish(hub, [['topic', 'https://example.com/books/2'], ['data', 'not selected']]);
    ids.push(await publish(hub, [['topic', 'orders'], ['data', 'order'], ['id', 'urn:order:1']]));
    ids.push(await publish(hub, [['topic', 'https://example.com/reviews/9'], ['data', 'review']]));
    ids.push(await publish(hub, [['topic', 'https://example.com/other'], ['topic', 'https://example.com/authors/7'], ['data', 'by its other topic']]));
    await s.page.waitForFunction(() => window.seen.updates.length >= 4, null, { timeout: 20000 });

    await hub.restart('SIGKILL');
    // Published while the browser is away: it gets exactly what it
    // selects after the last id it saw, once.
    ids.push(await publish(hub, [['topic', 'orders'], ['data', 'while away']]));
    await publish(hub, [['topic', 'https://example.com/books/3'], ['data', 'not selected either']]);
    await s.page.waitForFunction(() => window.seen.opens >= 2, null, { timeout: 20000 });
    ids.push(await publish(hub, [['topic', 'https://example.com/books/1'], ['data', 'after the reconnect']]));
    await s.page.waitForFunction(() => window.seen.updates.length >= 6, null, { timeout: 20000 });

    const got = await updates(s);
    assert.deepEqual(got.map((u) => u.data), ['book 1', 'order', 'review', 'by its other topic', 'while away', 'after the reconnect']);
    assert.deepEqual(got.map((u) => u.id), ids);
    assert.equal(ids[1], 'urn:order:1', "the publisher's id is the update's id");
    await s.context.close();
  } finally {
    await hub.close();
  }
});

test('mercure: a private update reaches the subscriber whose cookie grants it, never an anonymous one', async () => {
  const key = 'k-' + 'x'.repeat(40);
  const hub = new Hub(['--admin-key', key, '--mercure-tenant', 'acme'], { dev: false });
  await hub.start();
  try {
    const admin = { Authorization: `Bearer ${key}` };
    let res = await fetch(`${hub.base}/v1/admin/tenants/acme`, { method: 'PUT', headers: admin });
    assert.equal(res.status, 201);
    // Anonymous subscribers are off until the tenant turns them on.
    res = await fetch(`${hub.base}/v1/admin/tenants/acme/mercure`, { method: 'PUT', headers: admin, body: '{"anonymous": true}' });
    assert.equal(res.status, 200);
    const mint = async (grants) => {
      const r = await fetch(`${hub.base}/v1/admin/tenants/acme/tokens`, { method: 'POST', headers: admin, body: JSON.stringify({ ...grants, ttl: '10m' }) });
      assert.equal(r.status, 201);
      return (await r.json()).token;
    };
    const publisher = await mint({ publish: ['*'] });
    const reader = await mint({ subscribe: ['https://example.com/books/*'] });

    const q = 'match_urlpattern=' + encodeURIComponent('https://example.com/books/:id');
    const anonymous = await subscriber(hub, q);
    const granted = await subscriber(hub, q, reader);
    for (const s of [anonymous, granted]) await s.page.waitForFunction(() => window.seen.opens === 1, null, { timeout: 20000 });

    await publish(hub, [['topic', 'https://example.com/books/1'], ['data', 'private'], ['private', 'on']], publisher);
    await publish(hub, [['topic', 'https://example.com/books/2'], ['data', 'public']], publisher);
    await granted.page.waitForFunction(() => window.seen.updates.length >= 2, null, { timeout: 20000 });
    await anonymous.page.waitForFunction(() => window.seen.updates.length >= 1, null, { timeout: 20000 });

    assert.deepEqual((await updates(granted)).map((u) => u.data), ['private', 'public']);
    // The public update came after the private one: had the anonymous
    // subscriber been sent the private one, it would have come first.
    assert.deepEqual((await updates(anonymous)).map((u) => u.data), ['public']);
    for (const s of [anonymous, granted]) await s.context.close();
  } finally {
    await hub.close();
  }
});
