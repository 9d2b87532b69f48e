-- +goose Up
-- (plan 050) Who is subscribed now, on every process: one row per
-- announced Mercure subscription, added and removed in the very commit
-- that announces its start and its end, so that the rows and the
-- announcements always agree. owner is the process that serves it; a
-- process renews its lease while it lives, and once the lease has
-- expired the others announce its subscriptions' ends and remove them.
-- The ids sort in byte order, as the subscriptions API lists them.
CREATE TABLE presence (
    tenant     text COLLATE "C" NOT NULL,
    id         text COLLATE "C" NOT NULL,
    subscriber text  NOT NULL,
    owner      text  NOT NULL,
    body       bytea NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX presence_subscriber ON presence (tenant, subscriber, owner);
CREATE INDEX presence_owner ON presence (owner);

CREATE TABLE leases (
    owner   text   NOT NULL PRIMARY KEY,
    expires bigint NOT NULL
);

-- +goose Down
DROP TABLE leases;
DROP TABLE presence;
