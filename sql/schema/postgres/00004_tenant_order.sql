-- +goose Up
-- A tenant's order (plan 038): every event has a tenant position, pos, 1
-- for the tenant's first event and one more for each later one, across
-- its topics, in commit order. The usage row, one per tenant incarnation
-- (deleted with the tenant), gets id, the order's key, never reused, and
-- pos, the position of the tenant's newest event, which the commit
-- advances under the tenant's lock. An event row (single or segment,
-- keyed by its last event) holds its order's key and its last event's
-- position: a segment's events are consecutive in both numbers.
ALTER TABLE usage ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY UNIQUE;
ALTER TABLE usage ADD COLUMN pos bigint NOT NULL DEFAULT 0;
INSERT INTO usage (tenant) SELECT DISTINCT tenant FROM topics ORDER BY tenant ON CONFLICT (tenant) DO NOTHING;

ALTER TABLE events ADD COLUMN tenant_key bigint, ADD COLUMN pos bigint;

-- The rows there are, numbered in commit order: a topic's in sequence
-- order, the topics' interleaved by commit time (a topic's time made
-- never to go back, so a clock that did cannot reorder its sequence).
-- The rows of deleted tenants that the purge has yet to remove have no
-- topic row and get no position.
WITH rows AS (
    SELECT topic_id, seq, n,
           max(time) OVER (PARTITION BY topic_id ORDER BY seq ROWS UNBOUNDED PRECEDING) AS at
    FROM events
), numbered AS (
    SELECT r.topic_id, r.seq, u.id AS tenant_key,
           sum(r.n) OVER (PARTITION BY u.id ORDER BY r.at, r.topic_id, r.seq ROWS UNBOUNDED PRECEDING) AS pos
    FROM rows r JOIN topics t ON t.id = r.topic_id JOIN usage u ON u.tenant = t.tenant
)
UPDATE events SET tenant_key = numbered.tenant_key, pos = numbered.pos
FROM numbered WHERE events.topic_id = numbered.topic_id AND events.seq = numbered.seq;
UPDATE usage SET pos = coalesce((SELECT max(e.pos) FROM events e WHERE e.tenant_key = usage.id), 0);

-- trimmed_pos is the tenant position of the topic's event trimmed (0:
-- none that has one): a reader of the tenant's order at a position below
-- it is owed a gap for the topic. Rows numbered above and not purged yet
-- give it; events purged before positions existed were never in the
-- order, and no reader is owed them.
ALTER TABLE topics ADD COLUMN trimmed_pos bigint NOT NULL DEFAULT 0;
UPDATE topics SET trimmed_pos = coalesce((SELECT e.pos - (e.seq - topics.trimmed) FROM events e
    WHERE e.topic_id = topics.id AND e.seq >= topics.trimmed AND e.seq - e.n < topics.trimmed
    ORDER BY e.seq LIMIT 1), 0)
WHERE trimmed > 0;
CREATE INDEX topics_trimmed_pos ON topics (tenant, trimmed_pos) WHERE trimmed_pos > 0;

-- A tenant read finds the rows after a position through this index, as a
-- topic read does through the primary key; unique, so that no two rows
-- can ever take one position.
CREATE UNIQUE INDEX events_tenant_pos ON events (tenant_key, pos);

-- +goose Down
SELECT 'no way down: topic and tenant ids must never be reused';
