// The repository's JavaScript client (client/js) in Node.js against the
// real binary: every event type to one handler, resume across kill -9 on
// topic and tenant streams, typed gaps and snapshots, publishes whose lost
// answers are retried with their idempotency key, refusals with the
// contract's codes, and the package that npm pack makes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hub, until } from './harness.mjs';
import { Client, EdgehubError } from '../../client/js/edgehub.js';

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, '..', '..', 'client', 'js');
let hub, client;

before(async () => {
  hub = new Hub(['--retention-events', '6']);
  await hub.start();
  client = new Client({ server: hub.base, tenant: 'acme' });
});

after(async () => {
  await hub?.close();
});

// collect watches with every callback recording into one list, in order.
function collect(open) {
  const seen = [];
  const retries = [];
  const w = open({
    onHello: (h) => seen.push(['hello', h]),
    onEvent: (e) => seen.push(['event', e]),
    onGap: (g) => seen.push(['gap', g]),
    onSnapshot: (s) => seen.push(['snapshot', s]),
    onRetry: (r) => retries.push(r),
  });
  const events = () => seen.filter(([k]) => k === 'event').map(([, e]) => e);
  return { w, seen, retries, events };
}

test('every event type reaches the one handler, in order, with its envelope', async () => {
  await client.publish('types', { n: 1 });
  await client.publish('types', { n: 2 }, { type: 'order.created' });
  await client.publish('types', { on: true }, { type: 'light:switched', key: 'lamp-1' });
  await client.publish('types', undefined, { key: 'lamp-1', op: 'delete' });
  await client.publishBatch('types', [{ n: 5 }, { n: 6 }], { type: 'bulk_loaded' });
  const c = collect((o) => client.watch('types', { after: 0, ...o }));
  await until(() => c.events().length === 6, 'six events');
  c.w.close();
  await c.w.done;
  assert.deepEqual(c.seen[0], ['hello', { head: 6, position: 0 }]);
  assert.deepEqual(c.events().map((e) => [e.seq, e.type]),
    [[1, 'message'], [2, 'order.created'], [3, 'light:switched'], [4, 'message'], [5, 'bulk_loaded'], [6, 'bulk_loaded']]);
  assert.deepEqual(c.events()[2].data, { on: true });
  assert.equal(c.events()[2].key, 'lamp-1');
  assert.equal(c.events()[2].op, 'upsert');
  assert.equal(c.events()[3].op, 'delete');
  assert.equal(c.events()[3].data, null);
  assert.match(c.events()[0].time, /^\d{4}-\d\d-\d\dT/);
  assert.equal(c.w.position, 6);
});

test('a topic watch and a tenant watch resume across kill -9, each event once, in order', async () => {
  const topic = collect((o) => client.watch('resume', { after: 0, ...o }));
  const tenant = collect((o) => client.watchTenant({ topics: ['resume'], patterns: ['resume-*'], ...o }));
  await until(() => tenant.seen.length === 1, 'the tenant stream\'s hello');
  const start = tenant.seen[0][1].position;
  for (let i = 1; i <= 3; i++) {
    await client.publish('resume', { i });
    await client.publish('resume-b', { i });
  }
  await until(() => topic.events().length === 3 && tenant.events().length === 6, 'the events before the kill');
  await hub.restart('SIGKILL');
  // The client's publish retries while the server may still refuse
  // connections; the watches reconnect with Last-Event-ID by themselves.
  for (let i = 4; i <= 6; i++) {
    await client.publish('resume', { i });
    await client.publish('resume-b', { i });
  }
  await until(() => topic.events().length === 6 && tenant.events().length === 12, 'every event after the restart');
  topic.w.close();
  tenant.w.close();
  await Promise.all([topic.w.done, tenant.w.done]);
  assert.deepEqual(topic.events().map((e) => e.seq), [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(tenant.events().map((e) => e.pos), Array.from({ length: 12 }, (_, i) => start + 1 + i));
  assert.deepEqual(tenant.events().map((e) => [e.topic, e.data.i]),
    [1, 2, 3, 4, 5, 6].flatMap((i) => [['resume', { i }], ['resume-b', { i }]].map(([t, d]) => [t, d.i])));
  assert.ok(topic.retries.length >= 1 && tenant.retries.length >= 1, 'both reconnected');
  assert.equal(topic.retries[0].lastEventId, '3');
  assert.equal(tenant.seen.filter(([k]) => k === 'hello').length, 2, 'one hello per connection');
});

test('a stream that stays silent past idleTimeout is resumed, missing nothing', async () => {
  await client.publish('quiet', { n: 1 });
  const c = collect((o) => client.watch('quiet', { after: 0, idleTimeout: 300, ...o }));
  await until(() => c.retries.length >= 1, 'a reconnect after the silence');
  assert.match(c.retries[0].error.message, /nothing arrived for 300 ms/);
  assert.equal(c.retries[0].lastEventId, '1');
  await client.publish('quiet', { n: 2 });
  await until(() => c.events().length === 2, 'the event after the reconnect');
  c.w.close();
  assert.deepEqual(c.events().map((e) => e.seq), [1, 2]);
});

test('a gap and a snapshot are typed callbacks, on topic and tenant streams', async () => {
  for (let i = 1; i <= 8; i++) await client.publish('trimmed', { i });
  await hub.waitTrimmed('trimmed');
  const topic = collect((o) => client.watch('trimmed', { after: 0, ...o }));
  const tenant = collect((o) => client.watchTenant({ topics: ['trimmed'], after: 0, ...o }));
  await until(() => topic.events().length === 6 && tenant.events().length === 6, 'the retained events');
  assert.deepEqual(topic.seen.slice(1, 3), [['gap', { from: 1, to: 2 }], ['event', topic.events()[0]]]);
  assert.deepEqual(topic.events().map((e) => e.seq), [3, 4, 5, 6, 7, 8]);
  assert.deepEqual(tenant.seen[1], ['gap', { topic: 'trimmed', to: 2 }]);

  await client.publish('state', { celsius: 21 }, { key: 'sensor-1' });
  await client.publish('state', { celsius: 19 }, { key: 'sensor-2' });
  const snap = collect((o) => client.watch('state', { snapshot: true, ...o }));
  await until(() => snap.seen.length === 2, 'the snapshot');
  await client.publish('state', { celsius: 22 }, { key: 'sensor-1' });
  await until(() => snap.events().length === 1, 'the event after the snapshot');
  assert.deepEqual(snap.seen[1], ['snapshot', { seq: 2, state: { 'sensor-1': { celsius: 21 }, 'sensor-2': { celsius: 19 } } }]);
  assert.equal(snap.events()[0].seq, 3);
  for (const w of [topic.w, tenant.w, snap.w]) w.close();
  assert.throws(() => client.watchTenant({ snapshot: true }), TypeError);
});

// losingProxy forwards to the hub, and for the first publish it forwards
// it whole, waits for the hub's answer (so the event is committed) and
// then cuts the connection instead of passing the answer on.
async function losingProxy(target) {
  let lost = 0;
  const server = createServer((req, res) => {
    const up = request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (r) => {
      if (req.method === 'POST' && lost++ === 0) {
        r.resume();
        r.on('end', () => req.socket.destroy());
        return;
      }
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    req.pipe(up);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, base: `http://127.0.0.1:${server.address().port}`, lost: () => lost };
}

test('a publish whose answer was lost is sent again with its key and appends once', async () => {
  const proxy = await losingProxy(new URL(hub.base));
  try {
    const via = new Client({ server: proxy.base, tenant: 'acme' });
    const one = await via.publish('lost', { n: 1 });
    assert.equal(one.seq, 1);
    assert.equal(one.duplicate, true, 'the retry was answered as the duplicate of the committed first attempt');
    assert.match(one.idempotencyKey, /^[0-9a-f]{32}$/);
    const batch = await via.publishBatch('lost', [{ n: 2 }, { n: 3 }]);
    assert.deepEqual([batch.first, batch.last, batch.count, batch.duplicate], [2, 3, 2, false]);
    const page = await client.events('lost');
    assert.deepEqual(page.events.map((e) => e.data.n), [1, 2, 3]);
    // Without its key the same publish would have appended twice: each
    // call makes a key of its own.
    const again = await client.publish('lost', { n: 1 });
    assert.equal(again.duplicate, false);
    assert.notEqual(again.idempotencyKey, one.idempotencyKey);
    const mine = await client.publish('lost', { n: 1 }, { idempotencyKey: again.idempotencyKey });
    assert.deepEqual([mine.seq, mine.duplicate], [again.seq, true]);
  } finally {
    proxy.server.close();
  }
});

test('refusals carry the contract\'s codes, and a refused watch ends', async () => {
  await assert.rejects(client.publish('x', 1, { type: 'hello' }),
    (e) => e instanceof EdgehubError && e.status === 400 && e.code === 'invalid_type' && !e.temporary);
  await assert.rejects(client.publish('.hidden', 1), (e) => e.code === 'invalid_name');
  await assert.rejects(client.events('x', { after: -1 }), (e) => e.code === 'invalid_position');

  const admin = 'test-admin-key-0123456789abcdef';
  const secure = new Hub(['--admin-key', admin], { dev: false });
  await secure.start();
  try {
    const put = await fetch(`${secure.base}/v1/admin/tenants/acme`, { method: 'PUT', headers: { Authorization: `Bearer ${admin}` } });
    assert.equal(put.status, 201);
    const mint = async (claims) => {
      const res = await fetch(`${secure.base}/v1/admin/tenants/acme/tokens`, {
        method: 'POST', headers: { Authorization: `Bearer ${admin}` }, body: JSON.stringify(claims),
      });
      return (await res.json()).token;
    };
    const anonymous = new Client({ server: secure.base, tenant: 'acme' });
    const errors = [];
    const refused = anonymous.watch('orders', { onError: (e) => errors.push(e) });
    await assert.rejects(refused.done, (e) => e.status === 401 && e.code === 'unauthorized' && e.reason === 'no token was given');
    assert.equal(errors.length, 1);
    await assert.rejects(new Client({ server: secure.base, tenant: 'acme', token: 'not-a-jwt' }).publish('orders', 1),
      (e) => e.code === 'unauthorized' && e.reason === 'the token is not a JWT');

    const reader = new Client({ server: secure.base, tenant: 'acme', token: await mint({ subscribe: ['orders'] }) });
    await assert.rejects(reader.publish('orders', 1), (e) => e.status === 403 && e.code === 'forbidden');
    await assert.rejects(reader.watch('private').done, (e) => e.status === 403 && e.code === 'forbidden');

    // A token function is asked on every connection: after a rotation ends
    // the stream, the watch resumes with the token minted after it.
    let current = await mint({ subscribe: ['*'], publish: ['*'] });
    const rotating = new Client({ server: secure.base, tenant: 'acme', token: () => current });
    const c = collect((o) => rotating.watch('orders', { after: 0, ...o }));
    await rotating.publish('orders', { n: 1 });
    await until(() => c.events().length === 1, 'the first event');
    const rot = await fetch(`${secure.base}/v1/admin/tenants/acme/rotate`, { method: 'POST', headers: { Authorization: `Bearer ${admin}` } });
    assert.equal(rot.status, 200);
    current = await mint({ subscribe: ['*'], publish: ['*'] });
    await rotating.publish('orders', { n: 2 });
    await until(() => c.events().length === 2, 'the event after the rotation');
    assert.deepEqual(c.events().map((e) => e.seq), [1, 2]);
    assert.ok(c.retries.length >= 1);
    c.w.close();
    await c.w.done;
  } finally {
    await secure.close();
  }
});

test('npm pack makes a package that installs, imports and type-checks', () => {
  const dir = mkdtempSync(join(tmpdir(), 'edgehub-pack-'));
  try {
    const [packed] = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', dir], { cwd: pkg, encoding: 'utf8' }));
    assert.deepEqual(packed.files.map((f) => f.path).sort(), ['README.md', 'edgehub.d.ts', 'edgehub.js', 'package.json']);
    const app = join(dir, 'app');
    execFileSync('mkdir', ['-p', app]);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', join(dir, packed.filename)], { cwd: app });
    const out = execFileSync('node', ['--input-type=module', '-e',
      "import { Client, EdgehubError, Watch, Parser } from '@edgehub/client'; console.log([Client, EdgehubError, Watch, Parser].map((f) => typeof f).join(' '))"],
    { cwd: app, encoding: 'utf8' });
    assert.equal(out.trim(), 'function function function function');
    // The declarations describe what a TypeScript user writes, and refuse
    // what the client does not take.
    writeFileSync(join(app, 'use.ts'), `
import { Client, EdgehubError, type Envelope, type TenantGap } from '@edgehub/client';
const c = new Client({ server: 'http://127.0.0.1:8080', tenant: 'acme', token: async () => 'tok' });
const w = c.watchTenant({ topics: ['a'], patterns: ['b-*'], after: 0,
  onEvent: (e: Envelope) => { const n: number = e.seq; const p: number | undefined = e.pos; void n; void p; },
  onGap: (g: TenantGap) => { const t: string = g.topic; void t; } });
const pos: number | null = w.position;
void pos;
c.publish('a', { x: 1 }, { type: 't', idempotencyKey: 'k' }).then((r) => { const s: number = r.seq; void s; });
c.publishBatch('a', [1, 2]).then((r) => { const n: number = r.count; void n; });
try { throw new EdgehubError(429, 'rate_limited', 'slow down'); } catch (e) { if (e instanceof EdgehubError && e.temporary) { const code: string = e.code; void code; } }
// @ts-expect-error a topic watch's options have no topics
c.watch('a', { topics: ['b'] });
`);
    writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({
      compilerOptions: { strict: true, noEmit: true, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', lib: ['es2022', 'dom'], types: [] },
      files: ['use.ts'],
    }));
    execFileSync(join(here, 'node_modules', '.bin', 'tsc'), ['-p', app], { encoding: 'utf8' });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
