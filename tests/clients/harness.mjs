// Starts the real edgehub binary (EDGEHUB_BIN) on loopback for the client
// tests, restarts it on the same port and data, and publishes over HTTP.
import { spawn, execFileSync } from 'node:child_process';
import { chromium } from 'playwright-core';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const bin = process.env.EDGEHUB_BIN;
if (!bin) throw new Error('EDGEHUB_BIN must name the edgehub binary (scripts/test sets it)');

// With EDGEHUB_TEST_STORE=postgres each hub gets a database of its own on
// the cluster EDGEHUB_TEST_POSTGRES names (scripts/test starts one).
const cluster = process.env.EDGEHUB_TEST_STORE === 'postgres' ? process.env.EDGEHUB_TEST_POSTGRES : '';
if (process.env.EDGEHUB_TEST_STORE === 'postgres' && !cluster) throw new Error('EDGEHUB_TEST_POSTGRES names no cluster');

function psql(sql) {
  execFileSync('psql', ['--quiet', '--no-psqlrc', '--command', sql, cluster], { stdio: ['ignore', 'ignore', 'inherit'] });
}

export class Hub {
  // With tls, the hub serves HTTPS (and so HTTP/2) with a throwaway
  // self-signed certificate for 127.0.0.1 made by openssl. With dev
  // false, it runs without --dev: give it --admin-key in args.
  constructor(args = [], { tls = false, dev = true } = {}) {
    this.args = args;
    this.mode = dev ? ['--dev'] : [];
    if (cluster) {
      this.database = 'c_' + randomBytes(6).toString('hex');
      psql(`CREATE DATABASE ${this.database}`);
      const store = new URL(cluster);
      store.pathname = '/' + this.database;
      this.args = [...this.args, '--store', store.toString()];
    }
    this.dir = mkdtempSync(join(tmpdir(), 'edgehub-clients-'));
    this.data = join(this.dir, 'data');
    this.addr = '127.0.0.1:0';
    this.log = '';
    this.scheme = 'http';
    if (tls) {
      const cert = join(this.dir, 'cert.pem');
      const key = join(this.dir, 'key.pem');
      execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
        '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'],
      { stdio: 'ignore' });
      this.args = [...this.args, '--tls-cert', cert, '--tls-key', key];
      this.scheme = 'https';
    }
  }

  async start() {
    this.proc = spawn(bin, ['serve', ...this.mode, '--addr', this.addr, '--data', this.data, '--retry', '500ms', ...this.args],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    this.exited = new Promise((resolve) => this.proc.on('exit', resolve));
    const addr = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`edgehub did not start:\n${this.log}`)), 30000);
      this.proc.stderr.on('data', (chunk) => {
        this.log += chunk;
        const m = /msg=listening addr=(\S+)/.exec(this.log);
        if (m) { clearTimeout(timer); resolve(m[1]); }
      });
      this.proc.on('exit', (code) => reject(new Error(`edgehub exited ${code}:\n${this.log}`)));
    });
    this.addr = addr; // a restart keeps the port, so clients reconnect to the same URL
    this.base = `${this.scheme}://${addr}`;
    this.log = '';
  }

  async stop(signal = 'SIGTERM') {
    this.proc.kill(signal);
    return this.exited;
  }

  async restart(signal = 'SIGKILL') {
    await this.stop(signal);
    await this.start();
  }

  async close() {
    if (this.proc && this.proc.exitCode === null) await this.stop('SIGKILL');
    rmSync(this.dir, { recursive: true, force: true });
    if (this.database) psql(`DROP DATABASE IF EXISTS ${this.database} WITH (FORCE)`);
  }

  url(topic, route) {
    return `${this.base}/v1/tenants/acme/topics/${topic}/${route}`;
  }

  async publish(topic, data) {
    const res = await fetch(this.url(topic, 'notify'), { method: 'POST', body: JSON.stringify(data) });
    if (res.status !== 201) throw new Error(`publish: ${res.status} ${await res.text()}`);
    return (await res.json()).seq;
  }

  // waitTrimmed polls the read API until retention has trimmed the topic.
  async waitTrimmed(topic) {
    for (let i = 0; i < 300; i++) {
      const res = await fetch(this.url(topic, 'events') + '?after=0');
      const body = await res.json();
      if (body.gap) return body.gap;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error('retention did not trim');
  }
}

// until resolves when check() holds, polling a client's received events.
export async function until(check, what, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

// launchChromium starts Debian's chromium (or CHROMIUM), headless, with
// nothing of its own going to the network.
export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}
