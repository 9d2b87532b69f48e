// Debian's chromium on pages of other origins than the hub (other ports
// of 127.0.0.1: same site, so the browser sends the hub's cookie, but
// cross-origin, so CORS decides): a listed origin's EventSource with
// withCredentials sends the mercureAuthorization cookie and receives a
// private update, and its cookie-authorised publish is taken; a page of
// an origin the tenant did not list cannot publish with the cookie.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { Hub, launchChromium } from './harness.mjs';

let browser;

before(async () => {
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
});

// pageServer serves a blank page on a port of its own: another origin.
async function pageServer() {
  const srv = createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html' });
    res.end('<!doctype html><title>app</title>');
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return { srv, origin: `http://127.0.0.1:${srv.address().port}` };
}

test('mercure: a listed origin subscribes and publishes with the cookie across origins; another cannot publish with it', async () => {
  const app = await pageServer();
  const stranger = await pageServer();
  const key = 'k-' + 'c'.repeat(40);
  const hub = new Hub(['--admin-key', key, '--mercure-tenant', 'acme', '--cors-origins', app.origin], { dev: false });
  await hub.start();
  try {
    const admin = { Authorization: `Bearer ${key}` };
    let res = await fetch(`${hub.base}/v1/admin/tenants/acme`, { method: 'PUT', headers: admin });
    assert.equal(res.status, 201);
    res = await fetch(`${hub.base}/v1/admin/tenants/acme/mercure`, { method: 'PUT', headers: admin,
      body: JSON.stringify({ publish_origins: [app.origin] }) });
    assert.equal(res.status, 200);
    const mint = async (grants) => {
      const r = await fetch(`${hub.base}/v1/admin/tenants/acme/tokens`, { method: 'POST', headers: admin, body: JSON.stringify({ ...grants, ttl: '10m' }) });
      assert.equal(r.status, 201);
      return (await r.json()).token;
    };
    const cookieToken = await mint({ publish: ['https://example.com/private/*'], subscribe: ['https://example.com/private/*'] });
    const server = await mint({ publish: ['*'], subscribe: ['*'] });
    const topic = 'https://example.com/private/1';

    // page opens, in a fresh context, a page of origin with the hub's
    // cookie set for 127.0.0.1 (cookies do not tell ports apart).
    const page = async (origin) => {
      const context = await browser.newContext();
      const p = await context.newPage();
      await p.goto(origin + '/');
      await p.evaluate((c) => { document.cookie = `mercureAuthorization=${c}; path=/; SameSite=Strict`; }, cookieToken);
      return { p, context };
    };

    const a = await page(app.origin);
    await a.p.evaluate((u) => {
      window.seen = { updates: [], opens: 0, errors: 0 };
      const es = new EventSource(u, { withCredentials: true });
      es.onopen = () => { window.seen.opens++; };
      es.onerror = () => { window.seen.errors++; };
      es.onmessage = (e) => window.seen.updates.push(e.data);
    }, `${hub.base}/.well-known/mercure?topic=${encodeURIComponent(topic)}`);
    await a.p.waitForFunction(() => window.seen.opens === 1, null, { timeout: 20000 });

    const form = new URLSearchParams([['topic', topic], ['data', 'private line'], ['private', 'on']]);
    res = await fetch(`${hub.base}/.well-known/mercure`, { method: 'POST', body: form, headers: { Authorization: `Bearer ${server}` } });
    assert.equal(res.status, 200);
    await a.p.waitForFunction(() => window.seen.updates.length >= 1, null, { timeout: 20000 });
    assert.deepEqual(await a.p.evaluate(() => window.seen.updates), ['private line']);

    // The listed origin publishes with its cookie (and may read the answer).
    const fromApp = await a.p.evaluate(async ([u, t]) => {
      const r = await fetch(u, { method: 'POST', credentials: 'include', body: new URLSearchParams([['topic', t], ['data', 'from the app']]) });
      return { status: r.status, body: await r.text() };
    }, [`${hub.base}/.well-known/mercure`, topic]);
    assert.equal(fromApp.status, 200, JSON.stringify(fromApp));
    await a.p.waitForFunction(() => window.seen.updates.length >= 2, null, { timeout: 20000 });

    // A page of another origin sends the same cookie (same site) with a
    // form's POST, which needs no preflight: the hub refuses it.
    const b = await page(stranger.origin);
    await b.p.evaluate(async ([u, t]) => {
      try {
        await fetch(u, { method: 'POST', credentials: 'include', mode: 'no-cors', body: new URLSearchParams([['topic', t], ['data', 'forged']]) });
      } catch { /* an opaque answer, whatever it is */ }
    }, [`${hub.base}/.well-known/mercure`, topic]);

    res = await fetch(`${hub.base}/v1/tenants/acme/topics/${encodeURIComponent(topic)}/events?after=0`, { headers: { Authorization: `Bearer ${server}` } });
    const stored = (await res.json()).events.map((e) => e.data);
    assert.deepEqual(stored, ['private line', 'from the app'], 'the stranger\'s page stored nothing');
    assert.match(hub.log, /status=403 code=forbidden/, 'the hub refused the stranger\'s publish');
    for (const s of [a, b]) await s.context.close();
  } finally {
    await hub.close();
    app.srv.close();
    stranger.srv.close();
  }
});
