// Type declarations of edgehub.js: Edgehub's JavaScript client.

/** One committed event: its envelope as the server sends it. */
export interface Envelope<T = unknown> {
  /** The event's sequence number in its topic. */
  seq: number;
  /** The event's type: "message" unless the publish named one. */
  type: string;
  /** When it was committed, RFC 3339. */
  time: string;
  /** The published JSON; null for a delete. */
  data: T;
  /** Set on keyed events only. */
  key?: string;
  op?: 'upsert' | 'delete';
  /** Set on a tenant stream's (and a tenant read's) events: the event's topic. */
  topic?: string;
  /** Set on a tenant stream's events: the event's position in its tenant's order. */
  pos?: number;
}

/** Opens each connection of a stream. */
export interface Hello {
  /** The topic's (a tenant stream's: the tenant's) head when the stream registered. */
  head: number;
  /** The position the stream starts after. */
  position: number;
}

/** A topic stream's gap: events from..to were removed by retention before they could be sent. */
export interface TopicGap {
  from: number;
  to: number;
}

/** A tenant stream's gap: topic's events up to sequence to, some owed, were removed; it goes on with to+1. */
export interface TenantGap {
  topic: string;
  to: number;
}

/** A topic's state as of sequence seq: the latest data of every key not deleted since. */
export interface Snapshot<T = unknown> {
  seq: number;
  state: Record<string, T>;
}

/** Tells of a reconnect about to happen. */
export interface RetryInfo {
  /** Why the stream ended or was refused. */
  error: Error;
  /** How long the watch waits first, in milliseconds. */
  delay: number;
  /** The position it resumes after ("" for none). */
  lastEventId: string;
}

/** A token, or a function asked for one before every request and connection. */
export type TokenSource = string | (() => string | Promise<string>);

export interface ClientOptions {
  /** The server's base URL, e.g. http://127.0.0.1:8080. */
  server: string;
  /** The tenant every call is about. */
  tenant: string;
  /** The bearer token; none for a server in dev mode. */
  token?: TokenSource;
  /** How many times a call is sent again after a temporary refusal or no answer (default 3). Watches retry until closed. */
  retries?: number;
  /** The fetch to use; globalThis.fetch by default. */
  fetch?: typeof fetch;
}

export interface PublishOptions {
  /** The event type (default "message"). */
  type?: string;
  /** Makes the event an upsert (or, with op "delete", a delete) of this key. */
  key?: string;
  op?: 'upsert' | 'delete';
  /** The idempotency key of every attempt; one is made for the call when not given. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface PublishResult {
  seq: number;
  /** True when the key had been seen: nothing was appended, seq is the original's. */
  duplicate: boolean;
  /** The key the publish was sent with. */
  idempotencyKey: string;
}

export interface BatchResult {
  first: number;
  last: number;
  count: number;
  duplicate: boolean;
  idempotencyKey: string;
}

export interface WatchOptions<G = TopicGap> {
  /** Start after this position (0: the whole retained backlog); without it, live from now. */
  after?: number;
  /** Every event, whatever its type, in order, each once. */
  onEvent?: (event: Envelope) => void | Promise<void>;
  onHello?: (hello: Hello) => void | Promise<void>;
  onGap?: (gap: G) => void | Promise<void>;
  /** Hears of each reconnect before the watch waits for it. */
  onRetry?: (retry: RetryInfo) => void;
  /** Hears the error that ended the watch for good (done rejects with it too). */
  onError?: (error: unknown) => void;
  /** Reconnect when nothing, not even a heartbeat, arrived for this long (ms; default 45000; 0: never). */
  idleTimeout?: number;
  /** Aborting it closes the watch. */
  signal?: AbortSignal;
}

export interface TopicWatchOptions extends WatchOptions<TopicGap> {
  /** Without after: start with the topic's state (onSnapshot), then every event after it. */
  snapshot?: boolean;
  onSnapshot?: (snapshot: Snapshot) => void | Promise<void>;
}

export interface TenantWatchOptions extends WatchOptions<TenantGap> {
  /** Exact topic names. */
  topics?: string[];
  /** Patterns in which * matches any run of characters. */
  patterns?: string[];
}

export interface EventsPage {
  events: Envelope[];
  head: number;
  next_after: number;
  gap?: TopicGap;
}

export interface TenantEventsPage {
  events: Envelope[];
  head: number;
  next_after: number;
  gaps?: TenantGap[];
}

export interface TopicInfo {
  topic: string;
  head: number;
  first: number;
  streams: number;
}

export interface TopicsPage {
  topics: TopicInfo[];
  next_after: string;
}

/** A refusal from the server in the contract's error shape. */
export class EdgehubError extends Error {
  constructor(status: number, code: string, message: string, extra?: { retryAfter?: number; reason?: string });
  /** The HTTP status. */
  readonly status: number;
  /** The contract's error code, e.g. "invalid_name", "unauthorized", "rate_limited"; "unknown" when the answer was not in its shape. */
  readonly code: string;
  /** The server's Retry-After in milliseconds, 0 when none. */
  readonly retryAfter: number;
  /** For a 401: which check of the token failed, as far as this side can tell. */
  readonly reason: string;
  /** Whether retrying later may succeed (a 429 other than quota_exceeded, a 5xx). */
  readonly temporary: boolean;
}

/** One watch across its connections. */
export class Watch {
  /** The position the watch would resume after; null before any frame. */
  readonly position: number | null;
  /** Resolves when close() ended the watch; rejects with what ended it otherwise. */
  readonly done: Promise<void>;
  /** Ends the watch; no callback runs after it returns. */
  close(): void;
}

/** Reads Server-Sent Events as the HTML standard defines them. */
export class Parser {
  push(text: string): Array<{ event?: string; data?: string; id?: string; retry?: number }>;
}

export class Client {
  constructor(options: ClientOptions);
  readonly server: string;
  readonly tenant: string;
  token: TokenSource;
  publish(topic: string, data: unknown, options?: PublishOptions): Promise<PublishResult>;
  publishBatch(topic: string, events: unknown[], options?: PublishOptions): Promise<BatchResult>;
  events(topic: string, options?: { after?: number; limit?: number; signal?: AbortSignal }): Promise<EventsPage>;
  tenantEvents(options?: { topics?: string[]; patterns?: string[]; after?: number; limit?: number; signal?: AbortSignal }): Promise<TenantEventsPage>;
  state(topic: string, options?: { signal?: AbortSignal }): Promise<Snapshot>;
  topics(options?: { pattern?: string; after?: string; limit?: number; signal?: AbortSignal }): Promise<TopicsPage>;
  watch(topic: string, options?: TopicWatchOptions): Watch;
  watchTenant(options?: TenantWatchOptions): Watch;
}
