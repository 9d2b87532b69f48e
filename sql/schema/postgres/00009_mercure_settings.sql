-- +goose Up
-- Each tenant's Mercure settings (plan 050), off by default as in
-- Mercure's own hub: anonymous subscribers, active subscriptions, and
-- the origins whose pages may publish with a cookie's token (a JSON
-- array). On the tenant's row, so that the check of a request reads them
-- with the secrets it reads anyway.
ALTER TABLE tenants ADD COLUMN mercure_anonymous boolean NOT NULL DEFAULT false;
ALTER TABLE tenants ADD COLUMN mercure_subscriptions boolean NOT NULL DEFAULT false;
ALTER TABLE tenants ADD COLUMN mercure_publish_origins text NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE tenants DROP COLUMN mercure_publish_origins;
ALTER TABLE tenants DROP COLUMN mercure_subscriptions;
ALTER TABLE tenants DROP COLUMN mercure_anonymous;
