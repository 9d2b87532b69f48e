-- +goose Up
-- Topic ids are never reused (AUTOINCREMENT): retention and the purge of a
-- deleted tenant act on ids, and an id that came back for another tenant's
-- new topic would let them trim or delete its answered events.
-- oldest is the commit time (Unix ns) of the oldest retained event
-- (seq trimmed+1), NULL when none is retained (head = trimmed): the age
-- pass finds what to trim through its index and costs what it removes,
-- not what the table holds. state_bytes is the size of the topic's state
-- (keys and data), which --max-state-bytes caps.
CREATE TABLE topics_new (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant      TEXT    NOT NULL,
    topic       TEXT    NOT NULL,
    head        INTEGER NOT NULL DEFAULT 0,
    trimmed     INTEGER NOT NULL DEFAULT 0,
    purged      INTEGER NOT NULL DEFAULT 0,
    oldest      INTEGER,
    state_bytes INTEGER NOT NULL DEFAULT 0,
    UNIQUE (tenant, topic)
);
INSERT INTO topics_new (id, tenant, topic, head, trimmed, purged, oldest, state_bytes)
SELECT t.id, t.tenant, t.topic, t.head, t.trimmed, t.purged,
       (SELECT e.time FROM events e WHERE e.topic_id = t.id AND e.seq = t.trimmed + 1),
       coalesce((SELECT sum(length(s.key) + length(s.data)) FROM state s WHERE s.topic_id = t.id), 0)
FROM topics t;
DROP TABLE topics;
ALTER TABLE topics_new RENAME TO topics;
-- Count trimming looks up only the topics over the limit; the purge only
-- the topics with trimmed rows left; the age pass only the topics whose
-- oldest event is old.
CREATE INDEX topics_over ON topics (head - trimmed);
CREATE INDEX topics_to_purge ON topics (id) WHERE trimmed > purged;
CREATE INDEX topics_oldest ON topics (oldest) WHERE oldest IS NOT NULL;

-- Topics of deleted tenants whose rows (events, state, idempotency keys)
-- are still to be removed, in small chunks, by the purge: deleting a
-- tenant takes one short transaction however much data it had.
CREATE TABLE doomed_topics (
    id INTEGER PRIMARY KEY
);

-- Tenants get an id that is never reused (an incarnation: a tenant created
-- again under a deleted one's name is another tenant) and a generation,
-- random, new at creation and at every rotation of its secrets. A publish
-- commits only if the tenant still has the generation it was authorized
-- against.
CREATE TABLE tenants_new (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT    NOT NULL UNIQUE,
    signing_secret TEXT    NOT NULL,
    webhook_secret TEXT    NOT NULL,
    generation     INTEGER NOT NULL,
    created        INTEGER NOT NULL
);
INSERT INTO tenants_new (name, signing_secret, webhook_secret, generation, created)
SELECT name, signing_secret, webhook_secret, abs(random()), created FROM tenants;
DROP TABLE tenants;
ALTER TABLE tenants_new RENAME TO tenants;

-- A webhook-id is remembered per tenant, with the request it came with
-- (topic, and the hash of body, type, key and op), because a Standard
-- Webhooks signature covers only id, timestamp and body. tenant_id is the
-- incarnation that used it (0 for a dev-mode tenant with no row): a row
-- of an earlier incarnation of the name counts as absent.
CREATE TABLE webhook_keys (
    tenant    TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    tenant_id INTEGER NOT NULL,
    topic     TEXT    NOT NULL,
    hash      BLOB    NOT NULL,
    first     INTEGER NOT NULL,
    last      INTEGER NOT NULL,
    batch     INTEGER NOT NULL,
    created   INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
CREATE INDEX webhook_keys_created ON webhook_keys (created);

-- What each tenant stores, for its quotas: bytes of events (data, type and
-- key of every row not yet purged) and of state, and its number of topics.
CREATE TABLE usage (
    tenant TEXT    PRIMARY KEY,
    bytes  INTEGER NOT NULL DEFAULT 0,
    topics INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
INSERT INTO usage (tenant, bytes, topics)
SELECT t.tenant,
       sum(t.state_bytes + coalesce((SELECT sum(length(e.data) + length(e.type) + length(e.key))
                                     FROM events e WHERE e.topic_id = t.id AND e.seq > t.purged), 0)),
       count(*)
FROM topics t GROUP BY t.tenant;

-- +goose Down
SELECT 'no way down: topic and tenant ids must never be reused';
