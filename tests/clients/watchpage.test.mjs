// docs/watch.html, the quickstart's browser page, in Debian's chromium,
// served from an origin of its own as the quickstart says: it shows the
// backlog and live events, a gap that retention made, a snapshot, and
// after the server restarts it reconnects by itself from the last event
// it showed, missing nothing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hub, launchChromium } from './harness.mjs';

const timeout = 20000;
const page = readFileSync(join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'watch.html'));
let browser, site, origin, hub;

before(async () => {
  site = createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    res.end(page);
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
  await p.goto(`${origin}/watch.html?server=${encodeURIComponent(hub.base)}&${query}`);
  return p;
}

const items = (p) => p.$$eval('#events li', (lis) => lis.map((li) => li.textContent));
const shows = (p, n) => p.waitForFunction((n) => document.querySelectorAll('#events li').length >= n, n, { timeout });
const status = (p, text) => p.waitForFunction((t) => document.getElementById('status').textContent === t, text, { timeout });

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
