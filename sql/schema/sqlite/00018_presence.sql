-- +goose Up
-- (plan 050) Who is subscribed now, on every process: one row per
-- announced Mercure subscription, added and removed in the very commit
-- that announces its start and its end, so that the rows and the
-- announcements always agree. owner is the process that serves it; a
-- process renews its lease while it lives, and once the lease has
-- expired the others announce its subscriptions' ends and remove them.
CREATE TABLE presence (
    tenant     TEXT NOT NULL,
    id         TEXT NOT NULL,
    subscriber TEXT NOT NULL,
    owner      TEXT NOT NULL,
    body       BLOB NOT NULL,
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
CREATE INDEX presence_subscriber ON presence (tenant, subscriber, owner);
CREATE INDEX presence_owner ON presence (owner);

CREATE TABLE leases (
    owner   TEXT    NOT NULL PRIMARY KEY,
    expires INTEGER NOT NULL
) WITHOUT ROWID;

-- +goose Down
DROP TABLE leases;
DROP TABLE presence;
