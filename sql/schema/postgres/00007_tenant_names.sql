-- +goose Up
-- The admin API lists tenants in byte order of their names (plan 049), as
-- the topic list does: the names compare as bytes, so that a page's
-- "after" and its order are the same on SQLite and PostgreSQL whatever the
-- database's locale. Equality is unchanged (both collations are
-- deterministic); the unique index is rebuilt in the new order.
ALTER TABLE tenants ALTER COLUMN name TYPE text COLLATE "C";

-- +goose Down
ALTER TABLE tenants ALTER COLUMN name TYPE text COLLATE "default";
