-- +goose Up
-- Mercure updates (plan 041): an event that a Mercure publish made keeps
-- what the protocol lets a publisher say beyond its data (its other
-- topics, private, retry, its id) in attrs, compact JSON, NULL for
-- every other event. update_id is the publisher's id again, so that a
-- subscriber resuming after it finds its position through the index.
ALTER TABLE events ADD COLUMN attrs BLOB;
ALTER TABLE events ADD COLUMN update_id TEXT;
CREATE INDEX events_update_id ON events (tenant_key, update_id, pos) WHERE update_id IS NOT NULL;

-- +goose Down
DROP INDEX events_update_id;
ALTER TABLE events DROP COLUMN update_id;
ALTER TABLE events DROP COLUMN attrs;
