// The npm eventsource package (4.1.1) as a real client nobody here wrote.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventSource } from 'eventsource';
import { Hub, until } from './harness.mjs';

function open(url) {
  const es = new EventSource(url);
  const seen = { messages: [], hellos: [], gaps: [], opens: 0 };
  es.onopen = () => { seen.opens++; };
  es.addEventListener('message', (e) => seen.messages.push({ id: e.lastEventId, data: JSON.parse(e.data) }));
  es.addEventListener('hello', (e) => seen.hellos.push(JSON.parse(e.data)));
  es.addEventListener('gap', (e) => seen.gaps.push({ id: e.lastEventId, data: JSON.parse(e.data) }));
  return { es, seen };
}

test('eventsource: publish right after onopen arrives', async () => {
  const hub = new Hub();
  await hub.start();
  try {
    const { es, seen } = open(hub.url('t', 'watch'));
    await new Promise((resolve) => { es.onopen = resolve; });
    const seq = await hub.publish('t', { hello: 'world' });
    await until(() => seen.messages.length === 1, 'the event');
    assert.equal(seen.messages[0].id, String(seq));
    assert.deepEqual(seen.messages[0].data.data, { hello: 'world' });
    es.close();
  } finally {
    await hub.close();
  }
});

test('eventsource: survives a restart and gets what was published meanwhile, once', async () => {
  const hub = new Hub();
  await hub.start();
  try {
    const { es, seen } = open(hub.url('r', 'watch') + '?after=0');
    await hub.publish('r', 1);
    await until(() => seen.messages.length === 1, 'the first event');
    await hub.restart('SIGKILL');
    for (const n of [2, 3, 4]) await hub.publish('r', n);
    await until(() => seen.messages.length >= 4, 'events published while away');
    assert.deepEqual(seen.messages.map((m) => m.data.data), [1, 2, 3, 4]);
    assert.deepEqual(seen.messages.map((m) => m.id), ['1', '2', '3', '4']);
    assert.ok(seen.hellos.length >= 2, 'reconnected');
    assert.equal(seen.hellos[1].position, 1, 'the reconnect carried Last-Event-ID 1 over after=0');
    es.close();
  } finally {
    await hub.close();
  }
});

test('eventsource: a gap event reaches addEventListener', async () => {
  const hub = new Hub(['--retention-events', '5']);
  await hub.start();
  try {
    for (let i = 1; i <= 20; i++) await hub.publish('g', i);
    assert.deepEqual(await hub.waitTrimmed('g'), { from: 1, to: 15 });
    const { es, seen } = open(hub.url('g', 'watch') + '?after=0');
    await until(() => seen.messages.length === 5, 'the retained events');
    assert.deepEqual(seen.gaps, [{ id: '15', data: { from: 1, to: 15 } }]);
    assert.deepEqual(seen.messages.map((m) => m.data.seq), [16, 17, 18, 19, 20]);
    es.close();
  } finally {
    await hub.close();
  }
});
