-- +goose Up
-- The shared log, as SQLite's migrations leave a data directory, for
-- several processes at once. Every write transaction runs SERIALIZABLE
-- (the store retries those that PostgreSQL aborts), so two processes that
-- commit to one topic serialise on its row: a number is assigned inside
-- the transaction that commits it, and no higher number becomes visible
-- before a lower one.
--
-- A topic's head is the sequence number of its newest event; trimmed is
-- the newest that retention has removed (readers see none at or below it);
-- purged is how far its rows are really gone. Ids are never reused:
-- retention and the purge of a deleted tenant act on ids. oldest is the
-- commit time (Unix ns) of the oldest retained event, NULL when none is;
-- state_bytes the size of its state (keys and data). Names sort bytewise.
CREATE TABLE topics (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant      text COLLATE "C" NOT NULL,
    topic       text COLLATE "C" NOT NULL,
    head        bigint NOT NULL DEFAULT 0,
    trimmed     bigint NOT NULL DEFAULT 0,
    purged      bigint NOT NULL DEFAULT 0,
    oldest      bigint,
    state_bytes bigint NOT NULL DEFAULT 0,
    UNIQUE (tenant, topic)
);
CREATE INDEX topics_over ON topics ((head - trimmed));
CREATE INDEX topics_to_purge ON topics (id) WHERE trimmed > purged;
CREATE INDEX topics_oldest ON topics (oldest) WHERE oldest IS NOT NULL;

-- time is Unix nanoseconds (UTC); op is '' for a plain event, else
-- 'upsert' or 'delete'; data is the compact JSON the publisher sent.
CREATE TABLE events (
    topic_id bigint NOT NULL,
    seq      bigint NOT NULL,
    type     text   NOT NULL,
    time     bigint NOT NULL,
    key      text   NOT NULL DEFAULT '',
    op       text   NOT NULL DEFAULT '',
    data     bytea  NOT NULL,
    PRIMARY KEY (topic_id, seq)
);

-- The answer a request with an idempotency key got, and a hash of what it
-- asked, so that a repeat can be answered again or refused.
CREATE TABLE idempotency (
    topic_id bigint  NOT NULL,
    key      text    NOT NULL,
    hash     bytea   NOT NULL,
    first    bigint  NOT NULL,
    last     bigint  NOT NULL,
    batch    boolean NOT NULL,
    created  bigint  NOT NULL,
    PRIMARY KEY (topic_id, key)
);
CREATE INDEX idempotency_created ON idempotency (created);

-- The latest data of every key of a topic not deleted since, written in
-- the transaction that commits the event; seq is the event that set it.
CREATE TABLE state (
    topic_id bigint NOT NULL,
    key      text COLLATE "C" NOT NULL,
    seq      bigint NOT NULL,
    data     bytea  NOT NULL,
    PRIMARY KEY (topic_id, key)
);

-- Tenants exist once the admin API creates them. id is the incarnation
-- (never reused), generation is new at creation and at every rotation: a
-- publish commits only if the tenant still has the one it was authorized
-- against.
CREATE TABLE tenants (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text   NOT NULL UNIQUE,
    signing_secret text   NOT NULL,
    webhook_secret text   NOT NULL,
    generation     bigint NOT NULL,
    created        bigint NOT NULL
);

-- Facts about the database itself: 'mode' is 'dev' or 'production', the
-- mode of the first server that opened it; the two never mix.
CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- Topics of deleted tenants whose rows are still to be purged, and the
-- deleted incarnations whose webhook keys are.
CREATE TABLE doomed_topics (
    id bigint PRIMARY KEY
);
CREATE TABLE doomed_tenants (
    name    text   NOT NULL,
    id      bigint NOT NULL,
    deleted bigint NOT NULL,
    PRIMARY KEY (name, id, deleted)
);

-- A webhook-id is remembered per tenant with the request it came with;
-- tenant_id is the incarnation that used it (0 for a dev-mode tenant).
CREATE TABLE webhook_keys (
    tenant    text    NOT NULL,
    key       text    NOT NULL,
    tenant_id bigint  NOT NULL,
    topic     text    NOT NULL,
    hash      bytea   NOT NULL,
    first     bigint  NOT NULL,
    last      bigint  NOT NULL,
    batch     boolean NOT NULL,
    created   bigint  NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX webhook_keys_created ON webhook_keys (created);

-- What each tenant stores, for its quotas.
CREATE TABLE usage (
    tenant text   PRIMARY KEY,
    bytes  bigint NOT NULL DEFAULT 0,
    topics bigint NOT NULL DEFAULT 0
);

-- +goose Down
SELECT 'no way down: topic and tenant ids must never be reused';
