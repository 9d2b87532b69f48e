-- +goose Up
-- A row holds the events numbered seq-n+1 to seq. n is 1 for a single
-- event, whose columns are its own; a request that commits several events
-- stores them as one row, a segment: type, key and op empty, data the
-- events' types, keys, ops and data packed (backlog/segment.go), time the
-- commit's, and weight the sum of its events' length(data) +
-- length(type) + length(key), what they weigh in usage as rows (NULL for a
-- single event, whose weight is that of its row). Keying a row by its last
-- event keeps every "rows after a position" query right for both kinds.
ALTER TABLE events ADD COLUMN n integer NOT NULL DEFAULT 1;
ALTER TABLE events ADD COLUMN weight bigint;

-- +goose Down
ALTER TABLE events DROP COLUMN weight;
ALTER TABLE events DROP COLUMN n;
