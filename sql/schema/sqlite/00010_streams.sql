-- +goose Up
-- A topic that is a Durable Streams stream has a row here: its content
-- type, its lifetime (ttl in seconds, NULL for none, sliding from touched,
-- Unix ns; or expires_at, Unix ns), whether it is closed (closed_by is the
-- producer request that closed it, 'id epoch seq', or ''), start, the
-- sequence number after which its data begins (a stream created again on
-- a name keeps numbering after the old one's), writer_seq, the last
-- Stream-Seq it took, and its fork's source (fork_of, a topic id, with
-- the offset it forked at), how many live forks it has (forks) and
-- whether it was deleted while it had some (deleted).
CREATE TABLE streams (
    topic_id     INTEGER PRIMARY KEY,
    content_type TEXT    NOT NULL,
    ttl          INTEGER,
    expires_at   INTEGER,
    closed       INTEGER NOT NULL DEFAULT 0,
    closed_by    TEXT    NOT NULL DEFAULT '',
    start        INTEGER NOT NULL,
    writer_seq   TEXT    NOT NULL DEFAULT '',
    fork_of      INTEGER,
    fork_offset  INTEGER NOT NULL DEFAULT 0,
    fork_sub     INTEGER NOT NULL DEFAULT 0,
    forks        INTEGER NOT NULL DEFAULT 0,
    deleted      INTEGER NOT NULL DEFAULT 0,
    touched      INTEGER NOT NULL
);

-- The idempotent producers of a stream: the epoch each declared last and
-- the last Producer-Seq it took in that epoch.
CREATE TABLE producers (
    topic_id INTEGER NOT NULL,
    producer TEXT    NOT NULL,
    epoch    INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    PRIMARY KEY (topic_id, producer)
) WITHOUT ROWID;

-- raw says data holds the bytes a Durable Streams append sent, not JSON.
ALTER TABLE events ADD COLUMN raw INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE events DROP COLUMN raw;
DROP TABLE producers;
DROP TABLE streams;
