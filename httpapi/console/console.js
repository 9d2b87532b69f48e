// Edgehub console: lists a tenant's topics, watches several of them (and
// patterns) through one tenant stream, shows every frame that stream sends
// with counts kept from its first frame, and publishes to a topic.
//
// Whatever comes from the server or a publisher is put into the page with
// textContent, never as markup. Outside dev mode the admin key is kept in
// this tab's sessionStorage only; the page's own list, watch and publish
// use a short-lived token of the tenant, minted with that key.
'use strict';

const KEY_STORE = 'edgehub.console.adminKey';
const TOKEN_TTL = '5m';
const TOKEN_USE_MS = 4 * 60 * 1000; // a token older than this is minted anew
const TENANTS_SHOWN = 1000; // the tenant picker's length; type a name for the others
const BACKLOG = 50; // tenant positions shown from before the page opened the stream
const MAX_ROWS = 500;
const TOPIC_PAGE = 100; // topics per page of the list
const SERIES = 60; // seconds of events per second in the chart
const FAR = '9007199254740991'; // a position beyond any head: a read there answers only the head

const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;

const state = {
  mode: '', // 'dev' or 'admin', once the server said which
  key: sessionStorage.getItem(KEY_STORE) || '',
  tenant: '', // the tenant open in the page
  autoWatch: false, // the address named a selection: watch it once the tenant is open
  token: '',
  tokenTenant: '',
  tokenAt: 0,
  topics: [], // the listed topics, in the server's order
  topicsNext: '', // where the next page of the list starts; '' when it is the last
  selected: new Set(), // topics chosen for the stream
  listGen: 0, // a new list (or tenant) drops the answers of the old one
  // The stream open now: its selectors and where it is.
  generation: 0, // a new watch (or a stop) ends the loops of the old one
  watching: false,
  abort: null,
  watched: { topics: [], patterns: [] },
  position: 0, // the stream's last position: a reconnect starts after it
  retry: 2000,
  head: 0,
  counts: { events: 0, gaps: 0, hellos: 0, pings: 0 },
  helloAt: 0, // when the stream's last hello arrived (performance.now())
  polling: false,
  tick: 0, // events received in the current second
  series: new Array(SERIES).fill(0),
};

// Refused is an answer that retrying would not change; where names the
// message line it belongs to.
class Refused extends Error {
  constructor(message, where = 'error') {
    super(message);
    this.where = where;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function call(url, { method = 'GET', headers = {}, body } = {}) {
  const res = await fetch(url, { method, headers, body, cache: 'no-store' });
  let data = null;
  try {
    data = await res.json();
  } catch {
    // not JSON: described by its status alone
  }
  return { status: res.status, data };
}

// describe names a refusal as the contract does: status, code, message.
function describe(r) {
  const e = r.data && r.data.error;
  return e ? `${r.status} ${e.code}: ${e.message}` : `HTTP ${r.status}`;
}

function adminHeaders() {
  return state.mode !== 'dev' && state.key ? { Authorization: 'Bearer ' + state.key } : {};
}

// show puts text on a message line, which keeps its place and its height
// when empty (see the slot class): a message never moves the page.
function show(id, text) {
  const el = $(id);
  el.textContent = text;
  el.title = text;
}

const tenantPath = () => `v1/tenants/${enc(state.tenant)}`;

// credentials are the headers of the page's own list, watch and publish:
// none in dev mode, else a token of the tenant for all its topics, minted
// when there is none, when it is old, or when fresh says the last one was
// refused. The admin key could read and publish all of them anyway.
async function credentials(fresh) {
  if (state.mode === 'dev') return {};
  const tenant = state.tenant;
  if (fresh || !state.token || state.tokenTenant !== tenant || Date.now() - state.tokenAt > TOKEN_USE_MS) {
    const r = await call(`v1/admin/tenants/${enc(tenant)}/tokens`, {
      method: 'POST',
      headers: { ...adminHeaders(), 'Content-Type': 'application/json' },
      body: JSON.stringify({ publish: ['*'], subscribe: ['*'], ttl: TOKEN_TTL }),
    });
    if (r.status === 401) {
      needKey('The admin key was refused: ' + describe(r));
      throw new Refused(describe(r), 'auth-error');
    }
    // 404 unknown_tenant: the admin API never created it.
    if (r.status !== 201) throw new Refused(describe(r), 'tenant-error');
    state.token = r.data.token;
    state.tokenTenant = tenant;
    state.tokenAt = Date.now();
  }
  return { Authorization: 'Bearer ' + state.token };
}

// authorized calls url with the page's credentials, minting a new token
// once if the one it had was refused (a rotation, an expiry).
async function authorized(url, opts = {}) {
  let r;
  for (let attempt = 0; attempt < 2; attempt++) {
    const headers = { ...(opts.headers || {}), ...(await credentials(attempt > 0)) };
    r = await call(url, { ...opts, headers });
    if (r.status !== 401 || state.mode === 'dev') break;
  }
  return r;
}

// listTenants fills the tenant picker from the admin API's list, up to
// TENANTS_SHOWN names, when the page has the admin key: outside dev mode
// always; in dev mode the page asks for none, and every tenant exists,
// so the picker stays hidden.
async function listTenants() {
  const pick = $('tenants');
  $('tenants-pick').hidden = true;
  if (state.mode === 'dev' && !state.key) return;
  const names = [];
  let after = '';
  while (names.length < TENANTS_SHOWN) {
    const q = new URLSearchParams({ limit: '100' });
    if (after) q.set('after', after);
    const r = await call(`v1/admin/tenants?${q}`, { headers: adminHeaders() });
    if (r.status !== 200) {
      if (state.mode !== 'dev') show('tenant-error', 'The tenants could not be listed: ' + describe(r));
      break;
    }
    if (r.data.tenants.length === 0) break;
    names.push(...r.data.tenants.map((t) => t.tenant));
    after = r.data.next_after;
  }
  const head = names.length >= TENANTS_SHOWN ? `the first ${names.length} tenants…` : `${names.length} tenant${names.length === 1 ? '' : 's'}…`;
  pick.replaceChildren(new Option(head, ''), ...names.map((n) => new Option(n, n)));
  $('tenants-pick').hidden = false;
}

function enter(mode) {
  state.mode = mode;
  $('mode').textContent = mode === 'dev' ? 'dev mode' : 'admin key';
  $('auth').hidden = true;
  $('main').hidden = false;
  $('forget').hidden = mode === 'dev';
  if ($('tenant').value.trim()) openTenant(state.autoWatch);
  state.autoWatch = false;
  listTenants();
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
  } else {
    show('auth-error', 'That key was refused: ' + describe(r));
  }
}

// openTenant shows the tenant in the form: it lists its topics (outside
// dev mode the token for that is refused if the admin API does not know
// the tenant); with watchAfter, it then opens the stream that the form's
// selection describes.
async function openTenant(watchAfter) {
  stop();
  const tenant = $('tenant').value.trim();
  state.tenant = tenant;
  state.token = '';
  state.topics = [];
  state.topicsNext = '';
  if (!watchAfter) state.selected.clear();
  const gen = ++state.listGen;
  show('tenant-error', '');
  show('topics-error', '');
  $('topics').replaceChildren();
  renderSelection();
  saveHash();
  await listTopics(gen, '');
  if (watchAfter && gen === state.listGen) watch();
}

// listTopics reads the tenant's topics after name ('' for the start) and
// shows them, TOPIC_PAGE at a time; a refusal shows in the list's own line.
// An answer may be shorter than its limit without being the last: only an
// empty one ends the list, so a short page is followed until the page is
// full or an answer is empty.
async function listTopics(gen, after) {
  const got = [];
  let next = after;
  let end = false;
  while (!end && got.length < TOPIC_PAGE) {
    let r;
    try {
      const q = new URLSearchParams({ limit: String(TOPIC_PAGE - got.length) });
      if (next) q.set('after', next);
      r = await authorized(`${tenantPath()}/topics?${q}`);
    } catch (err) {
      if (gen !== state.listGen) return;
      if (err instanceof Refused) show(err.where === 'error' ? 'topics-error' : err.where, err.message);
      else show('topics-error', 'The server cannot be reached: ' + err.message);
      return;
    }
    if (gen !== state.listGen) return;
    if (r.status !== 200) {
      show('topics-error', describe(r));
      return;
    }
    const page = r.data.topics || [];
    got.push(...page);
    end = page.length === 0;
    next = r.data.next_after;
  }
  show('topics-error', '');
  if (!after) state.topics = [];
  state.topics.push(...got);
  state.topicsNext = end ? '' : next;
  renderTopics();
}

function refreshTopics() {
  if (!state.tenant) return;
  const gen = ++state.listGen;
  show('topics-error', '');
  listTopics(gen, '');
}

function renderTopics() {
  const body = $('topics');
  body.replaceChildren();
  for (const t of state.topics) {
    const tr = document.createElement('tr');
    tr.dataset.topic = t.topic;
    if (state.selected.has(t.topic)) tr.className = 'selected';
    const pick = document.createElement('input');
    pick.type = 'checkbox';
    pick.checked = state.selected.has(t.topic);
    pick.setAttribute('aria-label', 'select ' + t.topic);
    pick.addEventListener('change', () => {
      if (pick.checked) state.selected.add(t.topic);
      else state.selected.delete(t.topic);
      tr.className = pick.checked ? 'selected' : '';
      renderSelection();
    });
    const name = document.createElement('button');
    name.type = 'button';
    name.textContent = t.topic;
    name.title = 'watch this topic alone';
    name.addEventListener('click', () => {
      state.selected = new Set([t.topic]);
      $('pattern').value = '';
      renderTopics();
      renderSelection();
      watch();
    });
    const cells = [pick, name, String(t.head), String(t.first), String(t.streams)];
    ['pick', 'name', 'head', 'first', 'streams'].forEach((cls, i) => {
      const td = document.createElement('td');
      td.className = cls;
      td.append(cells[i]);
      tr.append(td);
    });
    body.append(tr);
  }
  $('topics-count').textContent = `(${state.topics.length}${state.topicsNext ? '+' : ''})`;
  $('topics-more').disabled = !state.topicsNext;
}

// selection is what the form describes: the chosen topics and the pattern.
function selection() {
  const pattern = $('pattern').value.trim();
  return { topics: [...state.selected], patterns: pattern ? [pattern] : [] };
}

function renderSelection() {
  const { topics, patterns } = selection();
  const parts = [];
  if (topics.length) parts.push(`${topics.length} topic${topics.length > 1 ? 's' : ''}: ${topics.join(', ')}`);
  if (patterns.length) parts.push(`pattern ${patterns.join(', ')}`);
  show('selection', parts.length ? 'Selected: ' + parts.join('; ') : 'Nothing selected: the stream takes every topic of the tenant.');
  $('pub-topic').placeholder = topics[0] || 'orders';
}

function saveHash() {
  const q = new URLSearchParams();
  if (state.tenant) q.set('tenant', state.tenant);
  const { topics, patterns } = selection();
  for (const t of topics) q.append('topic', t);
  for (const p of patterns) q.append('pattern', p);
  history.replaceState(null, '', '#' + q);
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

function resetCounts() {
  state.counts = { events: 0, gaps: 0, hellos: 0, pings: 0 };
  state.head = 0;
  state.position = 0;
  state.helloAt = 0;
  state.tick = 0;
  state.series.fill(0);
  for (const id of ['position', 'head', 'streams-tenant', 'streams-all']) $(id).textContent = '–';
  showCounts();
}

function showCounts() {
  $('count-events').textContent = state.counts.events;
  $('count-gaps').textContent = state.counts.gaps;
  $('count-hellos').textContent = state.counts.hellos;
  $('count-pings').textContent = state.counts.pings;
}

// watch opens one tenant stream with the form's selectors, from the
// position in the form, or from BACKLOG positions before the tenant's head.
async function watch() {
  stop();
  const gen = state.generation;
  if (!state.tenant) {
    show('tenant-error', 'Open a tenant first.');
    return;
  }
  state.watched = selection();
  resetCounts();
  $('events').replaceChildren();
  show('error', '');
  show('pub-result', '');
  draw();
  saveHash();
  setConn('connecting');
  const from = $('from').value.trim();
  let position;
  if (from !== '') {
    if (!/^\d+$/.test(from)) {
      show('error', 'The position to start from is a whole number, 0 or more.');
      setConn('stopped');
      return;
    }
    position = Number(from);
  } else {
    try {
      // A read beyond the head answers no event, only the head.
      const r = await authorized(`${tenantPath()}/events?after=${FAR}&limit=1`);
      if (gen !== state.generation) return;
      if (r.status !== 200) throw new Refused('The tenant\'s head could not be read: ' + describe(r));
      position = Math.max(0, r.data.head - BACKLOG);
    } catch (err) {
      if (gen !== state.generation) return;
      show(err instanceof Refused ? err.where : 'error', err instanceof Refused ? err.message : 'The server cannot be reached: ' + err.message);
      setConn('stopped');
      return;
    }
  }
  state.position = position;
  state.watching = true;
  state.abort = new AbortController();
  stream(gen, state.abort.signal);
}

function streamURL() {
  const q = new URLSearchParams({ after: String(state.position) });
  for (const t of state.watched.topics) q.append('topic', t);
  for (const p of state.watched.patterns) q.append('pattern', p);
  return `${tenantPath()}/watch?${q}`;
}

// stream reads the tenant stream until a new watch or a stop, and
// reconnects after a dropped connection, after the retry the server asked
// for, from the last position it had.
async function stream(gen, signal) {
  let fresh = false;
  while (gen === state.generation) {
    setConn('connecting');
    let wait = state.retry;
    try {
      const headers = { Accept: 'text/event-stream', ...(await credentials(fresh)) };
      fresh = false;
      const res = await fetch(streamURL(), { headers, signal, cache: 'no-store' });
      if (res.status === 200) {
        setConn('live');
        await read(res.body, gen);
      } else {
        const r = { status: res.status, data: await res.json().catch(() => null) };
        if (res.status === 401 && state.mode !== 'dev' && !fresh) {
          fresh = true; // rotated, or too old: mint another, once
          wait = 0;
        } else if (res.status === 429 || res.status >= 500) {
          wait = Math.max(wait, 1000 * (Number(res.headers.get('Retry-After')) || 1));
        } else {
          throw new Refused('The watch was refused: ' + describe(r));
        }
      }
    } catch (err) {
      if (signal.aborted || gen !== state.generation) return;
      if (err instanceof Refused) {
        show(err.where, err.message);
        state.watching = false;
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
// it is dropped) and hands each whole frame to dispatch, the first one
// included, as soon as its blank line has arrived.
async function read(body, gen) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let frame = { id: null, event: '', data: [] };
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
        if (gen !== state.generation) return;
        dispatch(frame);
        frame = { id: null, event: '', data: [] };
        continue;
      }
      if (line.startsWith(':')) {
        state.counts.pings++; // a heartbeat
        showCounts();
        continue;
      }
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let v = colon < 0 ? '' : line.slice(colon + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'event') frame.event = v;
      else if (field === 'data') frame.data.push(v);
      else if (field === 'id') frame.id = v;
      else if (field === 'retry' && /^\d+$/.test(v)) state.retry = Number(v);
    }
  }
}

// dispatch handles one frame: every name the contract gives a tenant
// stream (hello, gap, and any event type), and a snapshot, which only a
// topic stream sends, should a server send one.
function dispatch(frame) {
  // The id is the stream's position after this frame, whatever its name:
  // a reconnect starts after it.
  if (frame.id !== null && /^\d+$/.test(frame.id)) setPosition(Number(frame.id));
  if (!frame.data.length) return;
  let d;
  try {
    d = JSON.parse(frame.data.join('\n'));
  } catch {
    return;
  }
  switch (frame.event) {
    case 'hello':
      state.counts.hellos++;
      state.helloAt = performance.now();
      if (typeof d.position === 'number') setPosition(d.position);
      setHead(d.head);
      addRow({ pos: String(d.position), topic: '', seq: '', type: 'hello', time: '', key: '',
        data: `connected after position ${d.position}; the tenant's head was ${d.head}` }, 'hello');
      poll(state.generation); // the stream counts, with this stream among them
      if (state.topics.length <= TOPIC_PAGE) refreshTopics(); // so do the list's
      break;
    case 'gap': {
      state.counts.gaps++;
      const range = d.from !== undefined ? `seq ${d.from}–${d.to}` : `seq up to ${d.to}`;
      addRow({ pos: '', topic: d.topic ?? '', seq: String(d.to), type: 'gap', time: '', key: '',
        data: `${range} removed by retention before this page could read them` }, 'gap');
      break;
    }
    case 'snapshot':
      addRow({ pos: '', topic: d.topic ?? '', seq: String(d.seq), type: 'snapshot', time: '', key: '',
        data: `state of ${Object.keys(d.state || {}).length} keys as of seq ${d.seq}` }, 'snapshot');
      break;
    default: // an event; its name is its type
      state.counts.events++;
      state.tick++;
      if (typeof d.pos === 'number') {
        setPosition(d.pos);
        setHead(d.pos);
      }
      addRow({
        pos: String(d.pos ?? ''),
        topic: d.topic ?? '',
        seq: String(d.seq),
        type: d.type ?? frame.event,
        time: when(d.time),
        key: d.key ? `${d.key} (${d.op})` : '',
        data: d.op === 'delete' ? '(deleted)' : preview(d.data),
      }, 'event');
  }
  showCounts();
}

function setPosition(p) {
  state.position = p;
  $('position').textContent = p;
}

function setHead(head) {
  if (typeof head !== 'number') return;
  state.head = Math.max(state.head, head);
  $('head').textContent = state.head;
}

// when shows an RFC 3339 time as a date and a time of day in UTC, to the
// millisecond: 2026-12-07 09:30:01.123.
function when(rfc3339) {
  const t = new Date(rfc3339);
  if (Number.isNaN(t.getTime())) return String(rfc3339 ?? '');
  return t.toISOString().slice(0, 23).replace('T', ' ');
}

function preview(data) {
  const s = JSON.stringify(data);
  return s.length > 2000 ? s.slice(0, 2000) + '…' : s;
}

// addRow puts a row on top of the events table, as text only.
function addRow(cells, kind) {
  const tr = document.createElement('tr');
  tr.className = kind;
  if (kind === 'event') tr.dataset.pos = cells.pos;
  for (const name of ['pos', 'topic', 'seq', 'type', 'time', 'key', 'data']) {
    const td = document.createElement('td');
    td.className = name;
    td.textContent = cells[name];
    tr.append(td);
  }
  const body = $('events');
  body.prepend(tr);
  while (body.rows.length > MAX_ROWS) body.lastElementChild.remove();
}

// poll reads the streams open on the tenant and on the server from the
// console's API (which names a topic: the first one watched or listed).
// An answer to a poll that began before the stream's last hello is
// dropped, so the counts shown always include the page's own stream.
async function poll(gen) {
  const topic = state.watched.topics[0] || (state.topics[0] && state.topics[0].topic);
  if (!topic || state.polling) return;
  state.polling = true;
  const began = performance.now();
  try {
    const r = await call(`console/api/topics/${enc(state.tenant)}/${enc(topic)}`, { headers: adminHeaders() });
    if (gen !== state.generation || began < state.helloAt) return;
    if (r.status === 401 && state.mode !== 'dev') {
      needKey('The admin key was refused: ' + describe(r));
      return;
    }
    if (r.status !== 200) return; // the stream's own line says what is wrong
    $('streams-tenant').textContent = r.data.streams.tenant;
    $('streams-all').textContent = r.data.streams.all;
  } catch {
    // the stream's reconnects show that the server is away
  } finally {
    state.polling = false;
    // A hello that came while this poll was out asks for a fresh one.
    if (gen === state.generation && began < state.helloAt && state.watching) poll(gen);
  }
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
  if (state.watching && state.helloAt) poll(state.generation);
}

async function publish(e) {
  e.preventDefault();
  if (!state.tenant) {
    show('pub-result', 'Open a tenant first.');
    return;
  }
  const topic = $('pub-topic').value.trim() || state.watched.topics[0] || [...state.selected][0] || '';
  if (!topic) {
    show('pub-result', 'Name a topic to publish to.');
    return;
  }
  const type = $('pub-type').value.trim();
  const url = `${tenantPath()}/topics/${enc(topic)}/notify` + (type ? `?type=${enc(type)}` : '');
  try {
    const r = await authorized(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: $('pub-data').value });
    show('pub-result', r.status === 201 ? `published to ${topic}, seq ${r.data.seq}` : describe(r));
  } catch (err) {
    show('pub-result', err instanceof Refused ? err.message : 'The server cannot be reached: ' + err.message);
  }
}

// readHash fills the form from the page's address: #tenant=acme&topic=a&
// topic=b&pattern=p, or the older #acme/orders.
function readHash() {
  const h = location.hash.slice(1);
  if (!h) return false;
  try {
    if (h.includes('=')) {
      const q = new URLSearchParams(h);
      $('tenant').value = q.get('tenant') || '';
      state.selected = new Set(q.getAll('topic'));
      $('pattern').value = q.get('pattern') || '';
    } else {
      const [tenant, topic] = h.split('/');
      $('tenant').value = decodeURIComponent(tenant || '');
      state.selected = new Set(topic ? [decodeURIComponent(topic)] : []);
    }
  } catch {
    return false; // a malformed hash: the form stays empty
  }
  return state.selected.size > 0 || $('pattern').value.trim() !== '';
}

async function init() {
  $('key-form').addEventListener('submit', useKey);
  $('tenant-form').addEventListener('submit', (e) => {
    e.preventDefault();
    openTenant(false);
  });
  $('watch-form').addEventListener('submit', (e) => {
    e.preventDefault();
    watch();
  });
  $('tenants').addEventListener('change', () => {
    if (!$('tenants').value) return;
    $('tenant').value = $('tenants').value;
    openTenant(false);
  });
  $('stop').addEventListener('click', stop);
  $('pattern').addEventListener('input', renderSelection);
  $('topics-refresh').addEventListener('click', refreshTopics);
  $('topics-more').addEventListener('click', () => {
    if (state.topicsNext) listTopics(state.listGen, state.topicsNext);
  });
  $('publish-form').addEventListener('submit', publish);
  $('forget').addEventListener('click', () => needKey(''));
  state.autoWatch = readHash();
  renderSelection();
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
  else if (r.status === 401) needKey(state.key ? 'The stored admin key was refused: ' + describe(r) : '');
  else show('error', describe(r));
}

init();
