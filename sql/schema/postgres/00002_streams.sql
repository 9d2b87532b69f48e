-- +goose Up
-- Durable Streams: as SQLite's 00010_streams.sql, which says what each
-- column means.
CREATE TABLE streams (
    topic_id     bigint  PRIMARY KEY,
    content_type text    NOT NULL,
    ttl          bigint,
    expires_at   bigint,
    closed       boolean NOT NULL DEFAULT false,
    closed_by    text    NOT NULL DEFAULT '',
    start        bigint  NOT NULL,
    writer_seq   text COLLATE "C" NOT NULL DEFAULT '',
    fork_of      bigint,
    fork_offset  bigint  NOT NULL DEFAULT 0,
    fork_sub     bigint  NOT NULL DEFAULT 0,
    forks        bigint  NOT NULL DEFAULT 0,
    deleted      boolean NOT NULL DEFAULT false,
    touched      bigint  NOT NULL
);

CREATE TABLE producers (
    topic_id bigint NOT NULL,
    producer text   NOT NULL,
    epoch    bigint NOT NULL,
    seq      bigint NOT NULL,
    PRIMARY KEY (topic_id, producer)
);

ALTER TABLE events ADD COLUMN raw boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE events DROP COLUMN raw;
DROP TABLE producers;
DROP TABLE streams;
