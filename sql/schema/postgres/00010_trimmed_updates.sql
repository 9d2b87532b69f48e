-- +goose Up
-- (plan 050) An idempotency record keeps the tenant position of its
-- request's first event, so that a repeat is answered with the hub's id
-- of the update (#<pos>) after retention removed the event. NULL for
-- records written before.
ALTER TABLE idempotency ADD COLUMN pos bigint;
ALTER TABLE webhook_keys ADD COLUMN pos bigint;
-- The publisher ids of Mercure updates that retention removed, with the
-- position each had, so that a subscriber resuming after one resumes
-- where it was (and is told of the gap) for a while after its removal.
CREATE TABLE trimmed_updates (
    update_id text   NOT NULL,
    topic_id  bigint NOT NULL,
    pos       bigint NOT NULL,
    created   bigint NOT NULL,
    PRIMARY KEY (update_id, topic_id)
);
CREATE INDEX trimmed_updates_created ON trimmed_updates (created);
CREATE INDEX trimmed_updates_topic ON trimmed_updates (topic_id);

-- +goose Down
DROP TABLE trimmed_updates;
ALTER TABLE webhook_keys DROP COLUMN pos;
ALTER TABLE idempotency DROP COLUMN pos;
