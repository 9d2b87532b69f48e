-- +goose Up
-- Tenants deleted whose webhook keys are still to be removed by the purge
-- of doomed data, with the incarnation (id, 0 for a dev-mode tenant with
-- no row) and the time (Unix ns) of the deletion: a tenant created again
-- under the name keeps the keys it uses itself, which carry its own id or
-- a later time.
CREATE TABLE doomed_tenants (
    name    TEXT    NOT NULL,
    id      INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    PRIMARY KEY (name, id, deleted)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE doomed_tenants;
