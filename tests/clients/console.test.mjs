// The console page at /console in Debian's chromium, driven by
// playwright-core: it lists a tenant's topics, watches several topics and
// a pattern through one tenant stream, counts that stream's frames from
// the first one, shows dates in UTC, shows errors without moving the
// page, shows event data as text only, and outside dev mode asks for the
// admin key and shows refusals where they happen.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hub, launchChromium, until } from './harness.mjs';

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

// open loads the console at hash and records the page's script errors,
// its console errors and the tenant streams it opens.
async function open(hub, hash, { init } = {}) {
  const p = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  p.problems = [];
  p.streams = [];
  p.on('pageerror', (e) => p.problems.push('pageerror: ' + e.message));
  p.on('console', (m) => { if (m.type() === 'error') p.problems.push('console: ' + m.text()); });
  p.on('request', (r) => { if (/\/v1\/tenants\/[^/]+\/watch\?/.test(r.url())) p.streams.push(new URL(r.url())); });
  if (init) await p.addInitScript(init);
  await p.goto(`${hub.base}/console#${hash}`);
  return p;
}

// post publishes one event over HTTP, as a publisher elsewhere would.
async function post(hub, topic, data, { type, token, key } = {}) {
  const headers = token ? { Authorization: 'Bearer ' + token } : {};
  const q = new URLSearchParams();
  if (type) q.set('type', type);
  if (key) q.set('key', key);
  const url = `${hub.base}/v1/tenants/acme/topics/${encodeURIComponent(topic)}/notify?${q}`;
  const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(data) });
  if (res.status !== 201) throw new Error(`publish: ${res.status} ${await res.text()}`);
  return (await res.json()).seq;
}

// tenantEvents reads the tenant's order as the read API has it.
async function tenantEvents(hub, token) {
  const headers = token ? { Authorization: 'Bearer ' + token } : {};
  const res = await fetch(`${hub.base}/v1/tenants/acme/events?after=0`, { headers });
  assert.equal(res.status, 200);
  return (await res.json()).events;
}

const live = (p) => p.waitForFunction(() => document.getElementById('conn').dataset.state === 'live', null, { timeout });
const text = (p, id) => p.evaluate((i) => document.getElementById(i).textContent, id);
const waitText = (p, id, want) => p.waitForFunction(([i, w]) => document.getElementById(i).textContent === w, [id, want], { timeout });
const series = (p) => p.evaluate(() => document.getElementById('chart').dataset.series.split(',').map(Number));

// rows are the events table's rows, top (newest) first, as their cells.
const rows = (p) => p.evaluate(() => [...document.querySelectorAll('#events tr')].map((tr) => {
  const cells = { kind: tr.className };
  for (const td of tr.cells) cells[td.className] = td.textContent;
  return cells;
}));

// withHub runs fn with a hub of its own, started, and closes the hub
// after, whatever fn did.
async function withHub(hub, fn) {
  await hub.start();
  try {
    await fn(hub);
  } finally {
    await hub.close();
  }
}

// row waits for the events table's row of tenant position pos.
async function row(p, pos) {
  await p.waitForSelector(`#events tr[data-pos="${pos}"]`, { state: 'attached', timeout });
  return (await rows(p)).find((r) => r.kind === 'event' && r.pos === String(pos));
}

const counts = (p) => p.evaluate(() => Object.fromEntries(['count-events', 'count-gaps', 'count-hellos', 'position', 'head']
  .map((id) => [id, document.getElementById(id).textContent])));

// listed waits for the topic list to hold names, in order.
async function listed(p, names) {
  await p.waitForFunction((n) => [...document.querySelectorAll('#topics tr')].map((tr) => tr.dataset.topic).join('\n') === n,
    names.join('\n'), { timeout });
}

test('console: the topic list, a click watches one topic, the chart, and publishing', async () => {
  await withHub(new Hub(), async (hub) => {
    await post(hub, 'orders', { order: 1 });
    await post(hub, 'users', { user: 1 });
    await post(hub, 'orders', { order: 2 });
    const p = await open(hub, 'tenant=acme');
    await listed(p, ['orders', 'users']);
    const list = await p.evaluate(() => [...document.querySelectorAll('#topics tr')].map((tr) =>
      [tr.dataset.topic, tr.querySelector('td.head').textContent, tr.querySelector('td.first').textContent]));
    assert.deepEqual(list, [['orders', '2', '1'], ['users', '1', '1']]);
    assert.equal(await p.isVisible('#topics tr[data-topic="orders"] td.name button'), true);

    // A click on a name watches that topic alone, through a tenant stream.
    await p.click('#topics tr[data-topic="orders"] td.name button');
    await live(p);
    await row(p, 3);
    assert.deepEqual((await rows(p)).filter((r) => r.kind === 'event').map((r) => [r.pos, r.topic, r.seq, r.data]),
      [['3', 'orders', '2', '{"order":2}'], ['1', 'orders', '1', '{"order":1}']]);
    assert.equal(p.streams.length, 1);
    assert.deepEqual(p.streams[0].searchParams.getAll('topic'), ['orders']);
    assert.deepEqual(p.streams[0].searchParams.getAll('pattern'), []);

    const pos = await post(hub, 'orders', { order: 17, total: '12.50' }, { type: 'order.created' });
    assert.equal(pos, 3);
    const cells = await row(p, 4);
    assert.equal(cells.seq, '3');
    assert.equal(cells.type, 'order.created');
    assert.equal(cells.data, '{"order":17,"total":"12.50"}');

    // The streams of the tenant, from the console's API, count the page's own.
    await waitText(p, 'streams-tenant', '1');

    // The chart counted the events, then moves on as the seconds pass.
    await p.waitForFunction(() => document.getElementById('chart').dataset.series.split(',').map(Number)
      .reduce((a, b) => a + b) === 3, null, { timeout });
    const before = await series(p);
    assert.equal(before.length, 60);
    await p.waitForFunction((b) => document.getElementById('chart').dataset.series !== b, before.join(','), { timeout });

    // The page's form publishes to the watched topic; the event is in the
    // log and on the page.
    await p.fill('#pub-type', 'from.page');
    await p.fill('#pub-data', '{"via": "form"}');
    await p.click('#publish-form button[type=submit]');
    await waitText(p, 'pub-result', 'published to orders, seq 4');
    const events = await tenantEvents(hub);
    assert.deepEqual(events.at(-1), { ...events.at(-1), topic: 'orders', pos: 5, seq: 4, type: 'from.page', data: { via: 'form' } });
    assert.equal((await row(p, 5)).type, 'from.page');
    await waitText(p, 'head', '5');

    await p.screenshot({ path: screenshotPath(), fullPage: true });
    assert.deepEqual(p.problems, []);
    await p.close();
  });
});

test('console: several topics and a pattern through one tenant stream, each row with its topic and position', async () => {
  await withHub(new Hub(), async (hub) => {
    for (const t of ['a', 'b', 'c-1', 'd', 'c-2', 'a']) await post(hub, t, { t });
    const p = await open(hub, 'tenant=acme');
    await listed(p, ['a', 'b', 'c-1', 'c-2', 'd']);
    await p.check('#topics tr[data-topic="a"] input[type=checkbox]');
    await p.check('#topics tr[data-topic="b"] input[type=checkbox]');
    await p.fill('#pattern', 'c-*');
    await p.click('#watch');
    await live(p);
    await row(p, 6);

    // One stream, with every selector.
    assert.equal(p.streams.length, 1);
    const q = p.streams[0].searchParams;
    assert.deepEqual(q.getAll('topic').sort(), ['a', 'b']);
    assert.deepEqual(q.getAll('pattern'), ['c-*']);

    // Every row is the read API's envelope of a selected topic: its topic,
    // its position, its sequence; d is not among them.
    const want = (await tenantEvents(hub)).filter((e) => e.topic !== 'd')
      .map((e) => [String(e.pos), e.topic, String(e.seq)]).reverse();
    const got = (await rows(p)).filter((r) => r.kind === 'event').map((r) => [r.pos, r.topic, r.seq]);
    assert.deepEqual(got, want);
    assert.deepEqual(got.map((r) => r[1]), ['a', 'c-2', 'c-1', 'b', 'a']);

    // Live: d's event comes first in the tenant's order, so had the
    // stream sent it, it would be on the page before c-3's.
    await post(hub, 'd', { late: true });
    await post(hub, 'c-3', { late: true }, { type: 'made.late', key: 'k1' });
    const late = await row(p, 8);
    assert.deepEqual([late.topic, late.seq, late.type, late.key], ['c-3', '1', 'made.late', 'k1 (upsert)']);
    assert.equal((await rows(p)).some((r) => r.topic === 'd'), false);
    assert.equal(p.streams.length, 1);
    assert.deepEqual(p.problems, []);
    await p.close();
  });
});

test('console: stream counts are right from the first frame', async () => {
  await withHub(new Hub(), async (hub) => {
    for (let i = 1; i <= 3; i++) await post(hub, 'orders', { i });
    // Every value the streams count shows is recorded, from the first.
    const init = () => {
      window.streamsShown = [];
      new MutationObserver(() => {
        const v = document.getElementById('streams-tenant')?.textContent;
        if (v !== undefined && window.streamsShown.at(-1) !== v) window.streamsShown.push(v);
      }).observe(document, { subtree: true, childList: true, characterData: true });
    };
    const p = await open(hub, 'tenant=acme&topic=orders', { init });
    await live(p);
    await row(p, 3);
    // The hello and the three events of the backlog came in the stream's
    // first frames: each is counted.
    assert.deepEqual(await counts(p), { 'count-events': '3', 'count-gaps': '0', 'count-hellos': '1', position: '3', head: '3' });
    await post(hub, 'orders', { i: 4 });
    await row(p, 4);
    assert.deepEqual(await counts(p), { 'count-events': '4', 'count-gaps': '0', 'count-hellos': '1', position: '4', head: '4' });
    // The open streams shown never leave out the page's own.
    await waitText(p, 'streams-tenant', '1');
    const shown = await p.evaluate(() => window.streamsShown.filter((v) => v !== '–'));
    assert.ok(shown.length > 0);
    assert.deepEqual(shown.filter((v) => !(Number(v) >= 1)), [], `streams shown: ${shown}`);

    // The server goes away and comes back: the page reconnects after its
    // last position, and counts the second hello and nothing twice.
    await hub.restart();
    await until(async () => (await counts(p))['count-hellos'] === '2', 'a second hello');
    await post(hub, 'orders', { i: 5 });
    await row(p, 5);
    assert.deepEqual(await counts(p), { 'count-events': '5', 'count-gaps': '0', 'count-hellos': '2', position: '5', head: '5' });
    assert.deepEqual((await rows(p)).filter((r) => r.kind === 'event').map((r) => r.pos), ['5', '4', '3', '2', '1']);
    // Every attempt to reconnect (one may find the server still away) starts after 4.
    const again = p.streams.slice(1).map((u) => u.searchParams.get('after'));
    assert.ok(again.length >= 1 && again.every((a) => a === '4'), `reconnects after ${again}`);

    // A new watch counts from zero again, its first frame included.
    await p.fill('#from', '3');
    await p.click('#watch');
    await until(async () => (await counts(p))['count-hellos'] === '1' && (await rows(p)).length === 3, 'the new stream counted');
    assert.deepEqual(await counts(p), { 'count-events': '2', 'count-gaps': '0', 'count-hellos': '1', position: '5', head: '5' });
    assert.deepEqual((await rows(p)).map((r) => [r.kind, r.pos]), [['event', '5'], ['event', '4'], ['hello', '3']]);
    assert.deepEqual(p.problems.filter((m) => !m.includes('ERR_')), []);
    await p.close();
  });
});

test('console: the topic list pages on with More until an empty answer', async () => {
  await withHub(new Hub(), async (hub) => {
    const names = Array.from({ length: 103 }, (_, i) => `t${String(i).padStart(3, '0')}`);
    await Promise.all(names.map((n) => post(hub, n, { n })));
    const p = await open(hub, 'tenant=acme');
    await listed(p, names.slice(0, 100));
    assert.equal(await text(p, 'topics-count'), '(100+)');
    assert.equal(await p.isEnabled('#topics-more'), true);
    await p.click('#topics-more');
    await listed(p, names);
    await waitText(p, 'topics-count', '(103)');
    assert.equal(await p.isDisabled('#topics-more'), true);
    assert.deepEqual(p.problems, []);
    await p.close();
  });
});

test('console: a gap is shown and counted', async () => {
  await withHub(new Hub(['--retention-events', '2']), async (hub) => {
    for (let i = 1; i <= 5; i++) await post(hub, 'orders', { i });
    await hub.waitTrimmed('orders');
    const p = await open(hub, 'tenant=acme&topic=orders');
    await live(p);
    await row(p, 5);
    const all = await rows(p);
    const gaps = all.filter((r) => r.kind === 'gap');
    assert.equal(gaps.length, 1);
    assert.equal(gaps[0].topic, 'orders');
    assert.equal(gaps[0].seq, '3');
    assert.match(gaps[0].data, /up to 3 removed by retention/);
    assert.deepEqual(all.filter((r) => r.kind === 'event').map((r) => r.seq), ['5', '4']);
    assert.deepEqual(all.map((r) => r.kind), ['event', 'event', 'gap', 'hello']);
    assert.deepEqual(await counts(p), { 'count-events': '2', 'count-gaps': '1', 'count-hellos': '1', position: '5', head: '5' });
    assert.deepEqual(p.problems, []);
    await p.close();
  });
});

test('console: heartbeats are counted and change nothing else', async () => {
  await withHub(new Hub(['--heartbeat', '200ms']), async (hub) => {
    await post(hub, 'orders', { n: 1 });
    const p = await open(hub, 'tenant=acme&topic=orders');
    await live(p);
    await row(p, 1);
    await p.waitForFunction(() => Number(document.getElementById('count-pings').textContent) >= 2, null, { timeout });
    assert.deepEqual(await counts(p), { 'count-events': '1', 'count-gaps': '0', 'count-hellos': '1', position: '1', head: '1' });
    assert.deepEqual((await rows(p)).map((r) => r.kind), ['event', 'hello']);
    assert.deepEqual(p.problems, []);
    await p.close();
  });
});

test('console: the time column shows the date and the time in UTC', async () => {
  await withHub(new Hub(), async (hub) => {
    await post(hub, 'orders', { n: 1 });
    // The browser's own zone is not UTC, so a local time would differ.
    const ctx = await browser.newContext({ timezoneId: 'Pacific/Kiritimati' });
    const p = await ctx.newPage();
    // The older form of the address, one topic, still opens it.
    await p.goto(`${hub.base}/console#acme/orders`);
    await live(p);
    const cells = await row(p, 1);
    assert.equal(cells.topic, 'orders');
    const [event] = await tenantEvents(hub);
    assert.match(cells.time, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$/);
    // The envelope's RFC 3339 time, to the millisecond, in UTC.
    assert.equal(cells.time, new Date(event.time).toISOString().slice(0, 23).replace('T', ' '));
    assert.equal(cells.time.slice(0, 10), event.time.slice(0, 10));
    await ctx.close();
  });
});

test('console: an error shows without moving the events table', async () => {
  await withHub(new Hub(), async (hub) => {
    await post(hub, 'orders', { n: 1 });
    const p = await open(hub, 'tenant=acme&topic=orders');
    await live(p);
    await row(p, 1);
    const box = () => p.locator('#events-table').boundingBox();
    const at = await box();

    // The stream refused: a pattern over 1024 bytes is 400 invalid_selector.
    await p.fill('#pattern', 'x'.repeat(1100));
    await p.click('#watch');
    await p.waitForFunction(() => document.getElementById('error').textContent.includes('400 invalid_selector'), null, { timeout });
    assert.equal(await p.isVisible('#error'), true);
    assert.equal((await box()).y, at.y, 'the events table stays where it was');
    assert.equal((await box()).x, at.x);

    // A publish refused (invalid JSON), with a long message beside the button.
    await p.fill('#pub-topic', 'orders');
    await p.fill('#pub-data', '{not json');
    await p.click('#publish-form button[type=submit]');
    await p.waitForFunction(() => document.getElementById('pub-result').textContent.startsWith('400 invalid_json'), null, { timeout });
    assert.equal((await box()).y, at.y);

    // The topic list refused, in its own line.
    await p.route('**/v1/tenants/acme/topics?*', (r) => r.fulfill({
      status: 403, contentType: 'application/json',
      body: JSON.stringify({ error: { code: 'forbidden', message: 'the token does not cover this tenant, and this message is long enough to fill the line and more' } }),
    }));
    await p.click('#topics-refresh');
    await p.waitForFunction(() => document.getElementById('topics-error').textContent.startsWith('403 forbidden'), null, { timeout });
    assert.equal((await box()).y, at.y);

    // And all of them cleared again.
    await p.unroute('**/v1/tenants/acme/topics?*');
    await p.fill('#pattern', '');
    await p.click('#watch');
    await live(p);
    await p.click('#topics-refresh');
    await waitText(p, 'topics-error', '');
    assert.equal(await text(p, 'error'), '');
    assert.equal((await box()).y, at.y);
    await p.close();
  });
});

test('console: event data is shown as text', async () => {
  await withHub(new Hub(), async (hub) => {
    const p = await open(hub, 'tenant=acme&topic=xss');
    await live(p);
    const markup = {
      img: '<img src=x onerror="window.pwned=1">',
      script: '<script>window.pwned=2</script>',
    };
    await post(hub, '<b>xss</b>', markup, { type: 'xss' });
    await post(hub, 'xss', markup, { type: 'xss' });
    const cells = await row(p, 2);
    await p.click('#topics-refresh');
    await listed(p, ['<b>xss</b>', 'xss']);
    const found = await p.evaluate(() => ({
      pwned: window.pwned,
      elements: document.querySelectorAll('#events img, #events script, #topics b').length,
    }));
    assert.deepEqual(found, { pwned: undefined, elements: 0 });
    assert.equal(cells.data, JSON.stringify(markup));
    assert.deepEqual(p.problems, []);
    await p.close();
  });
});

test('console: with an admin key, the page asks for it and shows refusals in place', async () => {
  const key = 'console-test-admin-key-0123456789abcdef';
  await withHub(new Hub(['--admin-key', key], { dev: false }), async (hub) => {
    const admin = { Authorization: 'Bearer ' + key };
    assert.equal((await fetch(`${hub.base}/v1/admin/tenants/acme`, { method: 'PUT', headers: admin })).status, 201);
    assert.equal((await fetch(`${hub.base}/v1/admin/tenants/Beta`, { method: 'PUT', headers: admin })).status, 201);
    const res = await fetch(`${hub.base}/v1/admin/tenants/acme/tokens`, {
      method: 'POST', headers: admin, body: JSON.stringify({ publish: ['*'], subscribe: ['*'], ttl: '10m' }),
    });
    const { token } = await res.json();
    await post(hub, 'orders', { n: 1 }, { token });
    await post(hub, 'users', { n: 1 }, { token });

    const p = await open(hub, 'tenant=acme');
    await p.waitForSelector('#key-form', { state: 'visible', timeout });
    assert.equal(await p.isHidden('#main'), true, 'no data before the key');

    await p.fill('#admin-key', 'not-the-key');
    await p.click('#key-form button[type=submit]');
    await p.waitForFunction(() => document.getElementById('auth-error').textContent.includes('401 unauthorized'), null, { timeout });
    assert.equal(await p.isHidden('#main'), true);
    assert.equal(await p.evaluate(() => sessionStorage.getItem('edgehub.console.adminKey')), null);

    await p.fill('#admin-key', key);
    await p.click('#key-form button[type=submit]');
    // The topic list, read with a token the page minted.
    await listed(p, ['orders', 'users']);
    assert.equal(await p.evaluate(() => sessionStorage.getItem('edgehub.console.adminKey')), key);
    // The tenants, from the admin API's list, in byte order.
    await p.waitForFunction(() => document.querySelectorAll('#tenants option').length === 3, null, { timeout });
    assert.deepEqual(await p.$$eval('#tenants option', (os) => os.map((o) => o.textContent)), ['2 tenants…', 'Beta', 'acme']);
    assert.equal(await p.isVisible('#tenants'), true);
    await p.selectOption('#tenants', 'Beta');
    await waitText(p, 'topics-count', '(0)');
    assert.equal(await p.inputValue('#tenant'), 'Beta');
    await p.selectOption('#tenants', 'acme');
    await listed(p, ['orders', 'users']);
    assert.equal(await p.evaluate(() => localStorage.length), 0, 'the key is kept for the tab only');

    // Both topics, one stream.
    await p.check('#topics tr[data-topic="orders"] input[type=checkbox]');
    await p.check('#topics tr[data-topic="users"] input[type=checkbox]');
    await p.click('#watch');
    await live(p);
    await row(p, 2);
    assert.equal(p.streams.length, 1);
    await post(hub, 'users', { n: 2 }, { token });
    assert.deepEqual([(await row(p, 3)).topic, (await row(p, 3)).data], ['users', '{"n":2}']);
    await p.fill('#pub-topic', 'orders');
    await p.fill('#pub-data', '{"n": 2}');
    await p.click('#publish-form button[type=submit]');
    await waitText(p, 'pub-result', 'published to orders, seq 2');
    assert.equal((await row(p, 4)).topic, 'orders');
    assert.equal(await text(p, 'mode'), 'admin key');

    // A tenant the admin API never created: 404 unknown_tenant beside it.
    await p.fill('#tenant', 'nobody');
    await p.click('#tenant-form button[type=submit]');
    await p.waitForFunction(() => document.getElementById('tenant-error').textContent.startsWith('404 unknown_tenant'), null, { timeout });
    assert.equal(await p.evaluate(() => document.querySelectorAll('#topics tr').length), 0);

    // A refused list shows its code in the list's own line.
    await p.fill('#tenant', 'acme');
    await p.route('**/v1/tenants/acme/topics?*', (r) => r.fulfill({
      status: 403, contentType: 'application/json',
      body: JSON.stringify({ error: { code: 'forbidden', message: 'the token does not cover this tenant' } }),
    }));
    await p.click('#tenant-form button[type=submit]');
    await waitText(p, 'topics-error', '403 forbidden: the token does not cover this tenant');
    assert.equal(await text(p, 'tenant-error'), '');
    await p.unroute('**/v1/tenants/acme/topics?*');

    // The tenant's secrets rotated: the page's token is refused (401) and
    // it mints another, once, by itself.
    assert.equal((await fetch(`${hub.base}/v1/admin/tenants/acme/rotate`, { method: 'POST', headers: admin })).status, 200);
    await p.click('#topics-refresh');
    await listed(p, ['orders', 'users']);
    assert.equal(await text(p, 'topics-error'), '');

    assert.deepEqual(p.problems.filter((m) => !/40[134]/.test(m)), []);
    await p.close();
  });
});
