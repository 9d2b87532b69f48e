-- +goose Up
-- A topic's head is the sequence number of its newest event; trimmed is the
-- newest sequence number that retention has removed (0: nothing removed).
-- Events refer to their topic by id so that rows do not repeat the names.
CREATE TABLE topics (
    id      INTEGER PRIMARY KEY,
    tenant  TEXT    NOT NULL,
    topic   TEXT    NOT NULL,
    head    INTEGER NOT NULL DEFAULT 0,
    trimmed INTEGER NOT NULL DEFAULT 0,
    UNIQUE (tenant, topic)
);

-- time is Unix nanoseconds (UTC); op is '' for a plain event, else
-- 'upsert' or 'delete'; data is the compact JSON the publisher sent.
CREATE TABLE events (
    topic_id INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    type     TEXT    NOT NULL,
    time     INTEGER NOT NULL,
    key      TEXT    NOT NULL DEFAULT '',
    op       TEXT    NOT NULL DEFAULT '',
    data     BLOB    NOT NULL,
    PRIMARY KEY (topic_id, seq)
) WITHOUT ROWID;

-- The answer a request with an idempotency key got, and a hash of what it
-- asked, so that a repeat can be answered again or refused.
CREATE TABLE idempotency (
    topic_id INTEGER NOT NULL,
    key      TEXT    NOT NULL,
    hash     BLOB    NOT NULL,
    first    INTEGER NOT NULL,
    last     INTEGER NOT NULL,
    batch    INTEGER NOT NULL,
    created  INTEGER NOT NULL,
    PRIMARY KEY (topic_id, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_created ON idempotency (created);

-- +goose Down
DROP TABLE idempotency;
DROP TABLE events;
DROP TABLE topics;
