// docs/watch.html, the quickstart's browser page built on the JavaScript
// client (client/js), in Debian's chromium, served from the checkout's
// root on an origin of its own as the quickstart says: it shows the
// backlog and live events of every type, a gap that retention made, a
// snapshot, several topics through one tenant stream, and after the server
// is killed it reconnects by itself from the last event it showed,
// missing nothing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hub, launchChromium } from './harness.mjs';

const timeout = 20000;
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const served = { '/docs/watch.html': 'text/html; charset=utf-8', '/client/js/edgehub.js': 'text/javascript; charset=utf-8' };
let browser, site, origin, hub;

before(async () => {
  // What python3 -m http.server does from the checkout's root, for the
  // two files the page needs.
  site = createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    if (!served[path]) {
      res.writeHead(404);
      res.end();
      return;
    }
    res.writeHead(200, { 'Content-Type': served[path] });
    res.end(readFileSync(join(root, normalize(path))));
  });
  await new Promise((resolve) => site.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${site.address().port}`;
  hub = new Hub(['--cors-origins', origin, '--retention-events', '2']);
  await hub.start();
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await hub?.close();
  site?.close();
});

async function open(query) {
  const p = await browser.newPage();
  p.problems = [];
  p.on('pageerror', (e) => p.problems.push('pageerror: ' + e.message));
  await p.goto(`${origin}/docs/watch.html?server=${encodeURIComponent(hub.base)}&${query}`);
  return p;
}

const items = (p) => p.$$eval('#events li', (lis) => lis.map((li) => li.textContent));
const shows = (p, n) => p.waitForFunction((n) => document.querySelectorAll('#events li').length >= n, n, { timeout });
const status = (p, text) => p.waitForFunction((t) => document.getElementById('status').textContent === t, text, { timeout })
  .catch(async (e) => { throw new Error(`${e.message}: waited for "${text}", the page says "${await p.textContent('#status')}"`); });

async function post(topic, data, query = '') {
  const res = await fetch(hub.url(topic, 'notify') + query, { method: 'POST', body: JSON.stringify(data) });
  assert.equal(res.status, 201, await res.text());
}

test('the backlog, live events, and a reconnect after a restart', async () => {
  await post('orders', { id: 1 }, '?type=order.created');
  await post('orders', { id: 2 }, '?type=order.imported');
  const p = await open('topic=orders');
  await shows(p, 2);
  await status(p, 'subscribed after event 0 (the head is 2)');
  await post('orders', { id: 3 });
  await shows(p, 3);
  await hub.restart();
  await status(p, 'subscribed after event 3 (the head is 3)');
  await post('orders', { id: 4 });
  await shows(p, 4);
  assert.deepEqual(await items(p), [
    '#1 order.created {"id":1}', '#2 order.imported {"id":2}', '#3 message {"id":3}', '#4 message {"id":4}']);
  assert.deepEqual(p.problems, []);
});

test('a gap where retention removed events', async () => {
  for (let i = 1; i <= 4; i++) await post('trimmed', { i });
  await hub.waitTrimmed('trimmed');
  const p = await open('topic=trimmed');
  await shows(p, 3);
  assert.deepEqual(await items(p), ['events 1 to 2 were removed by retention', '#3 message {"i":3}', '#4 message {"i":4}']);
});

test('a snapshot, then the events after it', async () => {
  await post('sensors', { celsius: 21.5 }, '?key=sensor-1');
  const p = await open('topic=sensors&snapshot');
  await shows(p, 1);
  await post('sensors', { celsius: 22 }, '?key=sensor-1');
  await shows(p, 2);
  assert.deepEqual(await items(p), ['state as of event 1: {"sensor-1":{"celsius":21.5}}', '#2 message {"celsius":22}']);
});

test('every event type shows, with no list of types in the page', async () => {
  await post('kinds', { n: 1 }, '?type=light:switched&key=lamp-1');
  await post('kinds', null, '?key=lamp-1&op=delete');
  const p = await open('topic=kinds');
  await shows(p, 2);
  const res = await fetch(hub.url('kinds', 'notify') + '?type=bulk_loaded', {
    method: 'POST', headers: { 'Content-Type': 'application/x-ndjson' }, body: '{"n":3}\n{"n":4}\n',
  });
  assert.equal(res.status, 201);
  await shows(p, 4);
  assert.deepEqual(await items(p), ['#1 light:switched {"n":1}', '#2 message null', '#3 bulk_loaded {"n":3}', '#4 bulk_loaded {"n":4}']);
  assert.deepEqual(p.problems, []);
});

test('several topics through one tenant stream, resumed after a kill -9', async () => {
  const head = async () => (await (await fetch(`${hub.base}/v1/tenants/acme/events?after=0&limit=1`)).json()).head;
  const p = await open('topic=north&pattern=south-*');
  const start = await head();
  await status(p, `subscribed after position 0 (the tenant's head is ${start})`); // the whole backlog first
  await post('north', { n: 1 });
  await post('south-1', { n: 2 }, '?type=weather.changed');
  await post('east', { n: 0 }); // matches no selector
  await shows(p, 2);
  await hub.restart();
  await status(p, `subscribed after position ${start + 2} (the tenant's head is ${start + 3})`);
  await post('south-2', { n: 3 });
  await shows(p, 3);
  assert.deepEqual(await items(p), [
    `@${start + 1} north #1 message {"n":1}`, `@${start + 2} south-1 #1 weather.changed {"n":2}`, `@${start + 4} south-2 #1 message {"n":3}`]);
  assert.deepEqual(p.problems, []);
});

test('the client publishes from the page: an event and a batch with keys, refusals with their codes', async () => {
  const p = await open('topic=from-page');
  const got = await p.evaluate(async (server) => {
    const { Client, EdgehubError } = await import('/client/js/edgehub.js');
    const hub = new Client({ server, tenant: 'acme' });
    const one = await hub.publish('from-page', { n: 1 }, { type: 'page.event' });
    const batch = await hub.publishBatch('from-page', [{ n: 2 }, { n: 3 }]);
    const again = await hub.publishBatch('from-page', [{ n: 2 }, { n: 3 }], { idempotencyKey: batch.idempotencyKey });
    let refusal;
    try {
      await hub.publish('from-page', 1, { type: 'gap' });
    } catch (e) {
      refusal = { isError: e instanceof EdgehubError, status: e.status, code: e.code };
    }
    return { one: [one.seq, one.duplicate, one.idempotencyKey.length], batch: [batch.first, batch.last, batch.duplicate], again: [again.first, again.last, again.duplicate], refusal };
  }, hub.base);
  assert.deepEqual(got, {
    one: [1, false, 32], batch: [2, 3, false], again: [2, 3, true], refusal: { isError: true, status: 400, code: 'invalid_type' },
  });
  await shows(p, 3);
  assert.deepEqual(await items(p), ['#1 page.event {"n":1}', '#2 message {"n":2}', '#3 message {"n":3}']);
  assert.deepEqual(p.problems, []);
});
