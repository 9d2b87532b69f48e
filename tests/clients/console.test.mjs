// The console page at /console in Debian's chromium, driven by
// playwright-core: it shows events published from elsewhere, the head and
// the chart, publishes from its form, shows event data as text only, and
// outside dev mode asks for the admin key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hub, launchChromium } from './harness.mjs';

const timeout = 20000;
let browser;

before(async () => {
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
});

// screenshotPath is where the run keeps its picture of the console.
function screenshotPath() {
  const dir = process.env.EDGEHUB_ARTIFACTS || join(dirname(fileURLToPath(import.meta.url)), 'artifacts');
  mkdirSync(dir, { recursive: true });
  return join(dir, 'console.png');
}

// open loads the console on tenant/topic and records the page's script
// errors and console errors.
async function open(hub, hash) {
  const p = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  p.problems = [];
  p.on('pageerror', (e) => p.problems.push('pageerror: ' + e.message));
  p.on('console', (m) => { if (m.type() === 'error') p.problems.push('console: ' + m.text()); });
  await p.goto(`${hub.base}/console#${hash}`);
  return p;
}

// post publishes one event over HTTP, as a publisher elsewhere would.
async function post(hub, topic, data, { type, token } = {}) {
  const headers = token ? { Authorization: 'Bearer ' + token } : {};
  const url = hub.url(topic, 'notify') + (type ? `?type=${encodeURIComponent(type)}` : '');
  const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(data) });
  if (res.status !== 201) throw new Error(`publish: ${res.status} ${await res.text()}`);
  return (await res.json()).seq;
}

async function readAll(hub, topic, token) {
  const headers = token ? { Authorization: 'Bearer ' + token } : {};
  const res = await fetch(hub.url(topic, 'events') + '?after=0', { headers });
  assert.equal(res.status, 200);
  return (await res.json()).events;
}

const live = (p) => p.waitForFunction(() => document.getElementById('conn').dataset.state === 'live', null, { timeout });

// row waits for the events table's row of seq and returns its cells.
async function row(p, seq) {
  await p.waitForFunction((s) => document.querySelector(`#events tr[data-seq="${s}"]`), seq, { timeout });
  return p.evaluate((s) => {
    const cells = {};
    for (const td of document.querySelector(`#events tr[data-seq="${s}"]`).cells) cells[td.className] = td.textContent;
    return cells;
  }, seq);
}

const text = (p, id) => p.evaluate((i) => document.getElementById(i).textContent, id);
const series = (p) => p.evaluate(() => document.getElementById('chart').dataset.series.split(',').map(Number));

test('console: dev mode shows events live, the head, the chart, and publishes', async () => {
  const hub = new Hub();
  await hub.start();
  try {
    const p = await open(hub, 'acme/orders');
    await live(p);
    const seq = await post(hub, 'orders', { order: 17, total: '12.50' }, { type: 'order.created' });
    assert.equal(seq, 1);
    const cells = await row(p, 1);
    assert.equal(cells.seq, '1');
    assert.equal(cells.type, 'order.created');
    assert.equal(cells.data, '{"order":17,"total":"12.50"}');

    // The head and the stream counts come from the console's API, which
    // the page asks once a second; its own stream is the one open.
    await p.waitForFunction(() => document.getElementById('head').textContent === '1' &&
      document.getElementById('streams-topic').textContent === '1', null, { timeout });

    // The chart counted the event, then moves on as the seconds pass.
    await p.waitForFunction(() => document.getElementById('chart').dataset.series.split(',').some((n) => n !== '0'),
      null, { timeout });
    const before = await series(p);
    assert.equal(before.length, 60);
    assert.equal(before.reduce((a, b) => a + b), 1, 'one event received');
    await p.waitForFunction((b) => document.getElementById('chart').dataset.series !== b, before.join(','), { timeout });

    // The page's form publishes; the event is in the log and on the page.
    await p.fill('#pub-type', 'from.page');
    await p.fill('#pub-data', '{"via": "form"}');
    await p.click('#publish-form button[type=submit]');
    await p.waitForFunction(() => document.getElementById('pub-result').textContent === 'published, seq 2', null, { timeout });
    const events = await readAll(hub, 'orders');
    assert.deepEqual(events.map((e) => [e.seq, e.type, e.data]),
      [[1, 'order.created', { order: 17, total: '12.50' }], [2, 'from.page', { via: 'form' }]]);
    assert.equal((await row(p, 2)).type, 'from.page');
    await p.waitForFunction(() => document.getElementById('head').textContent === '2', null, { timeout });
    await p.waitForFunction(() => document.getElementById('chart').dataset.series.split(',').map(Number)
      .reduce((a, b) => a + b) === 2, null, { timeout });

    await p.screenshot({ path: screenshotPath(), fullPage: true });
    assert.deepEqual(p.problems, []);
    await p.close();
  } finally {
    await hub.close();
  }
});

test('console: event data is shown as text', async () => {
  const hub = new Hub();
  await hub.start();
  try {
    const p = await open(hub, 'acme/xss');
    await live(p);
    const markup = {
      img: '<img src=x onerror="window.pwned=1">',
      script: '<script>window.pwned=2</script>',
    };
    await post(hub, 'xss', markup, { type: 'xss' });
    const cells = await row(p, 1);
    const found = await p.evaluate(() => ({
      pwned: window.pwned,
      elements: document.querySelectorAll('#events img, #events script').length,
    }));
    assert.deepEqual(found, { pwned: undefined, elements: 0 });
    assert.equal(cells.data, JSON.stringify(markup));
    assert.deepEqual(p.problems, []);
    await p.close();
  } finally {
    await hub.close();
  }
});

test('console: with an admin key, the page asks for it', async () => {
  const key = 'console-test-admin-key-0123456789abcdef';
  const hub = new Hub(['--admin-key', key], { dev: false });
  await hub.start();
  try {
    const admin = { Authorization: 'Bearer ' + key };
    assert.equal((await fetch(`${hub.base}/v1/admin/tenants/acme`, { method: 'PUT', headers: admin })).status, 201);
    const res = await fetch(`${hub.base}/v1/admin/tenants/acme/tokens`, {
      method: 'POST', headers: admin, body: JSON.stringify({ publish: ['orders'], subscribe: ['orders'], ttl: '10m' }),
    });
    const { token } = await res.json();

    const p = await open(hub, 'acme/orders');
    await p.waitForSelector('#key-form', { state: 'visible', timeout });
    assert.equal(await p.isHidden('#main'), true, 'no data before the key');

    await p.fill('#admin-key', 'not-the-key');
    await p.click('#key-form button[type=submit]');
    await p.waitForFunction(() => document.getElementById('auth-error').textContent.includes('401'), null, { timeout });
    assert.equal(await p.isHidden('#main'), true);
    assert.equal(await p.evaluate(() => sessionStorage.getItem('edgehub.console.adminKey')), null);

    await p.fill('#admin-key', key);
    await p.click('#key-form button[type=submit]');
    await live(p);
    assert.equal(await p.evaluate(() => sessionStorage.getItem('edgehub.console.adminKey')), key);
    assert.equal(await p.evaluate(() => localStorage.length), 0, 'the key is kept for the tab only');

    await post(hub, 'orders', { n: 1 }, { token });
    assert.equal((await row(p, 1)).data, '{"n":1}');
    await p.fill('#pub-data', '{"n": 2}');
    await p.click('#publish-form button[type=submit]');
    await p.waitForFunction(() => document.getElementById('pub-result').textContent === 'published, seq 2', null, { timeout });
    assert.deepEqual((await readAll(hub, 'orders', token)).map((e) => e.data), [{ n: 1 }, { n: 2 }]);
    await p.waitForFunction(() => document.getElementById('head').textContent === '2', null, { timeout });
    assert.equal(await text(p, 'mode'), 'admin key');
    assert.deepEqual(p.problems.filter((m) => !m.includes('401')), []);
    await p.close();
  } finally {
    await hub.close();
  }
});
