-- +goose Up
-- Tenants exist once the admin API creates them. The signing secret is the
-- HS256 key of their tokens, the webhook secret (whsec_...) signs Standard
-- Webhooks requests.
CREATE TABLE tenants (
    name           TEXT    PRIMARY KEY,
    signing_secret TEXT    NOT NULL,
    webhook_secret TEXT    NOT NULL,
    created        INTEGER NOT NULL
) WITHOUT ROWID;

-- +goose Down
DROP TABLE tenants;
