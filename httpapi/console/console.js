// Edgehub console: watches one topic of one tenant, shows its events, its
// head, the streams open on it and events per second, and publishes to it.
//
// Whatever comes from the server or a publisher is put into the page with
// textContent, never as markup. Outside dev mode the admin key is kept in
// this tab's sessionStorage only; the page's own watch and publish use a
// short-lived token for the chosen topic, minted with that key.
'use strict';

const KEY_STORE = 'edgehub.console.adminKey';
const TOKEN_TTL = '5m';
const TOKEN_USE_MS = 4 * 60 * 1000; // a token older than this is minted anew
const BACKLOG = 50; // events shown from before the page opened the topic
const MAX_ROWS = 500;
const SERIES = 60; // seconds of events per second in the chart

const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;

const state = {
  mode: '', // 'dev' or 'admin', once the server said which
  key: sessionStorage.getItem(KEY_STORE) || '',
  tenant: '',
  topic: '',
  token: '',
  tokenAt: 0,
  generation: 0, // a new watch (or a stop) ends the loops of the old one
  watching: false,
  abort: null,
  position: 0, // the stream's last position: a reconnect starts after it
  retry: 2000,
  head: 0,
  polling: false,
  pollFailed: false,
  tick: 0, // events received in the current second
  series: new Array(SERIES).fill(0),
};

// Refused is an answer that retrying would not change.
class Refused extends Error {}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function call(url, { method = 'GET', headers = {}, body } = {}) {
  const res = await fetch(url, { method, headers, body, cache: 'no-store' });
  let data = null;
  try {
    data = await res.json();
  } catch {
    // not JSON: described by its status alone
  }
  return { status: res.status, data, retryAfter: Number(res.headers.get('Retry-After')) || 0 };
}

function describe(r) {
  const e = r.data && r.data.error;
  return e ? `${r.status} ${e.code}: ${e.message}` : `HTTP ${r.status}`;
}

function adminHeaders() {
  return state.mode !== 'dev' && state.key ? { Authorization: 'Bearer ' + state.key } : {};
}

function show(id, text) {
  const el = $(id);
  el.textContent = text;
  el.hidden = !text;
}

const topicPath = () => `v1/tenants/${enc(state.tenant)}/topics/${enc(state.topic)}`;

// credentials are the headers of the page's own watch and publish: none in
// dev mode, else a token for the topic, minted when there is none, when it
// is old, or when fresh says the last one was refused.
async function credentials(fresh) {
  if (state.mode === 'dev') return {};
  if (fresh || !state.token || Date.now() - state.tokenAt > TOKEN_USE_MS) {
    const r = await call(`v1/admin/tenants/${enc(state.tenant)}/tokens`, {
      method: 'POST',
      headers: { ...adminHeaders(), 'Content-Type': 'application/json' },
      body: JSON.stringify({ publish: [state.topic], subscribe: [state.topic], ttl: TOKEN_TTL }),
    });
    if (r.status === 401) {
      needKey('The admin key was refused.');
      throw new Refused(describe(r));
    }
    if (r.status !== 201) throw new Refused('No token for the topic: ' + describe(r));
    state.token = r.data.token;
    state.tokenAt = Date.now();
  }
  return { Authorization: 'Bearer ' + state.token };
}

function enter(mode) {
  state.mode = mode;
  $('mode').textContent = mode === 'dev' ? 'dev mode' : 'admin key';
  $('auth').hidden = true;
  $('main').hidden = false;
  $('forget').hidden = mode === 'dev';
  if ($('tenant').value && $('topic').value) watch();
}

function needKey(message) {
  stop();
  state.key = '';
  state.token = '';
  sessionStorage.removeItem(KEY_STORE);
  $('main').hidden = true;
  $('forget').hidden = true;
  $('auth').hidden = false;
  show('auth-error', message);
  $('admin-key').focus();
}

async function useKey(e) {
  e.preventDefault();
  const key = $('admin-key').value.trim();
  let r;
  try {
    r = await call('console/api/mode', { headers: { Authorization: 'Bearer ' + key } });
  } catch (err) {
    show('auth-error', 'The server cannot be reached: ' + err.message);
    return;
  }
  if (r.status === 200) {
    state.key = key;
    sessionStorage.setItem(KEY_STORE, key);
    $('admin-key').value = '';
    show('auth-error', '');
    enter(r.data.mode);
  } else if (r.status === 401) {
    show('auth-error', 'That key was refused (401 unauthorized).');
  } else {
    show('auth-error', describe(r));
  }
}

function stop() {
  state.generation++;
  state.watching = false;
  if (state.abort) state.abort.abort();
  state.abort = null;
  setConn('idle');
}

function setConn(text) {
  $('conn').textContent = text;
  $('conn').dataset.state = text;
}

// watch starts the topic in the form: its head first (which also checks
// the names and the key), then a stream from BACKLOG events before it.
async function watch() {
  stop();
  const gen = state.generation;
  state.tenant = $('tenant').value.trim();
  state.topic = $('topic').value.trim();
  state.token = '';
  state.head = 0;
  state.tick = 0;
  state.series.fill(0);
  $('events').replaceChildren();
  for (const id of ['head', 'last-seq', 'streams-topic', 'streams-tenant', 'streams-all']) $(id).textContent = '–';
  show('error', '');
  show('pub-result', '');
  draw();
  history.replaceState(null, '', `#${enc(state.tenant)}/${enc(state.topic)}`);
  const info = await poll(gen);
  if (!info || gen !== state.generation) return;
  state.watching = true;
  state.position = Math.max(0, info.head - BACKLOG);
  state.abort = new AbortController();
  stream(gen, state.abort.signal);
}

// poll reads the topic's head and stream counts from the console API.
async function poll(gen) {
  state.polling = true;
  try {
    const r = await call(`console/api/topics/${enc(state.tenant)}/${enc(state.topic)}`, { headers: adminHeaders() });
    if (gen !== state.generation) return null;
    if (r.status === 401 && state.mode !== 'dev') {
      needKey('The admin key was refused.');
      return null;
    }
    if (r.status !== 200) {
      show('error', describe(r));
      state.pollFailed = true;
      return null;
    }
    if (state.pollFailed) show('error', '');
    state.pollFailed = false;
    setHead(r.data.head);
    $('streams-topic').textContent = r.data.streams.topic;
    $('streams-tenant').textContent = r.data.streams.tenant;
    $('streams-all').textContent = r.data.streams.all;
    return r.data;
  } catch (err) {
    if (gen === state.generation) {
      show('error', 'The server cannot be reached: ' + err.message);
      state.pollFailed = true;
    }
    return null;
  } finally {
    state.polling = false;
  }
}

function setHead(head) {
  state.head = Math.max(state.head, head);
  $('head').textContent = state.head;
}

// stream reads the topic's watch until a new watch or a stop, and
// reconnects after a dropped connection, after the retry the server asked
// for, from the last position it had.
async function stream(gen, signal) {
  while (gen === state.generation) {
    setConn('connecting');
    let wait = state.retry;
    try {
      const headers = { Accept: 'text/event-stream', ...(await credentials(false)) };
      const res = await fetch(`${topicPath()}/watch?after=${state.position}`, { headers, signal, cache: 'no-store' });
      if (res.status === 200) {
        setConn('live');
        await read(res.body, gen);
      } else {
        const r = { status: res.status, data: await res.json().catch(() => null) };
        if (res.status === 401 && state.mode !== 'dev') {
          state.token = ''; // rotated, or too old: mint another
        } else if (res.status === 429 || res.status >= 500) {
          wait = Math.max(wait, 1000 * (Number(res.headers.get('Retry-After')) || 1));
        } else {
          throw new Refused('The watch was refused: ' + describe(r));
        }
      }
    } catch (err) {
      if (signal.aborted || gen !== state.generation) return;
      if (err instanceof Refused) {
        show('error', err.message);
        setConn('stopped');
        return;
      }
    }
    if (gen !== state.generation) return;
    setConn('reconnecting');
    await sleep(wait);
  }
}

// read parses Server-Sent Events (the hub ends lines with LF; a CR before
// it is dropped) and hands each whole frame to dispatch.
async function read(body, gen) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let frame = { event: '', data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done || gen !== state.generation) return;
    buf += value;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        dispatch(frame);
        frame = { event: '', data: [] };
        continue;
      }
      if (line.startsWith(':')) continue; // a heartbeat
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let v = colon < 0 ? '' : line.slice(colon + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'event') frame.event = v;
      else if (field === 'data') frame.data.push(v);
      else if (field === 'retry' && /^\d+$/.test(v)) state.retry = Number(v);
    }
  }
}

function dispatch(frame) {
  if (!frame.data.length) return;
  let d;
  try {
    d = JSON.parse(frame.data.join('\n'));
  } catch {
    return;
  }
  switch (frame.event) {
    case 'hello':
      state.position = d.position;
      setHead(d.head);
      break;
    case 'gap':
      state.position = d.to;
      addRow({ seq: `${d.from}–${d.to}`, type: 'gap', time: '', key: '', data: 'removed by retention before this page could read them' }, 'gap');
      break;
    case 'snapshot':
      break; // never asked for
    default:
      state.position = d.seq;
      state.tick++;
      setHead(d.seq);
      $('last-seq').textContent = d.seq;
      addRow({
        seq: d.seq,
        type: d.type,
        time: clock(d.time),
        key: d.key ? `${d.key} (${d.op})` : '',
        data: d.op === 'delete' ? '(deleted)' : preview(d.data),
      });
  }
}

function clock(rfc3339) {
  const t = new Date(rfc3339);
  if (Number.isNaN(t.getTime())) return String(rfc3339);
  return t.toTimeString().slice(0, 8) + '.' + String(t.getMilliseconds()).padStart(3, '0');
}

function preview(data) {
  const s = JSON.stringify(data);
  return s.length > 2000 ? s.slice(0, 2000) + '…' : s;
}

// addRow puts a row on top of the events table, as text only.
function addRow(cells, kind) {
  const tr = document.createElement('tr');
  tr.dataset.seq = cells.seq;
  if (kind) tr.className = kind;
  for (const name of ['seq', 'type', 'time', 'key', 'data']) {
    const td = document.createElement('td');
    td.className = name;
    td.textContent = cells[name];
    tr.append(td);
  }
  const body = $('events');
  body.prepend(tr);
  while (body.rows.length > MAX_ROWS) body.lastElementChild.remove();
}

// draw shows the last SERIES seconds of events per second as bars, and
// keeps the series on the canvas's data-series attribute.
function draw() {
  const c = $('chart');
  const g = c.getContext('2d');
  const { width: w, height: h } = c;
  g.clearRect(0, 0, w, h);
  const top = Math.max(1, ...state.series);
  const bar = w / SERIES;
  g.fillStyle = '#2f6fd6';
  state.series.forEach((n, i) => {
    const bh = (n / top) * (h - 20);
    g.fillRect(i * bar + 1, h - bh, Math.max(1, bar - 2), bh);
  });
  g.fillStyle = '#666';
  g.font = '12px sans-serif';
  g.fillText(`${top}/s`, 4, 14);
  c.dataset.series = state.series.join(',');
}

function everySecond() {
  state.series.push(state.tick);
  state.series.shift();
  $('eps').textContent = state.tick;
  state.tick = 0;
  draw();
  if (state.watching && !state.polling) poll(state.generation);
}

async function publish(e) {
  e.preventDefault();
  if (!state.watching) {
    show('pub-result', 'Watch a topic first.');
    return;
  }
  const type = $('pub-type').value.trim();
  const url = `${topicPath()}/notify` + (type ? `?type=${enc(type)}` : '');
  const body = $('pub-data').value;
  try {
    let r;
    for (let attempt = 0; attempt < 2; attempt++) {
      const headers = { 'Content-Type': 'application/json', ...(await credentials(attempt > 0)) };
      r = await call(url, { method: 'POST', headers, body });
      if (r.status !== 401 || state.mode === 'dev') break;
    }
    show('pub-result', r.status === 201 ? `published, seq ${r.data.seq}` : describe(r));
  } catch (err) {
    show('pub-result', err instanceof Refused ? err.message : 'The server cannot be reached: ' + err.message);
  }
}

async function init() {
  $('key-form').addEventListener('submit', useKey);
  $('topic-form').addEventListener('submit', (e) => {
    e.preventDefault();
    watch();
  });
  $('publish-form').addEventListener('submit', publish);
  $('forget').addEventListener('click', () => needKey(''));
  const [tenant, topic] = location.hash.slice(1).split('/');
  try {
    $('tenant').value = decodeURIComponent(tenant || '');
    $('topic').value = decodeURIComponent(topic || '');
  } catch {
    // a malformed hash: the form stays empty
  }
  draw();
  setInterval(everySecond, 1000);
  let r;
  try {
    r = await call('console/api/mode', { headers: state.key ? { Authorization: 'Bearer ' + state.key } : {} });
  } catch (err) {
    show('error', 'The server cannot be reached: ' + err.message);
    return;
  }
  if (r.status === 200) enter(r.data.mode);
  else if (r.status === 401) needKey(state.key ? 'The stored admin key was refused.' : '');
  else show('error', describe(r));
}

init();
