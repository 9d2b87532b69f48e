-- +goose Up
-- The latest data of every key of a topic not deleted since, written in the
-- transaction that commits the event, so state and log never disagree.
-- seq is the event that last set the key.
CREATE TABLE state (
    topic_id INTEGER NOT NULL,
    key      TEXT    NOT NULL,
    seq      INTEGER NOT NULL,
    data     BLOB    NOT NULL,
    PRIMARY KEY (topic_id, key)
) WITHOUT ROWID;

-- Retention first moves trimmed (what readers may see), then deletes rows
-- in small transactions; purged is how far the rows are really gone.
ALTER TABLE topics ADD COLUMN purged INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE topics DROP COLUMN purged;
DROP TABLE state;
