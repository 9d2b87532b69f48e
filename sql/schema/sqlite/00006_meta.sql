-- +goose Up
-- Facts about the database itself. 'mode' is 'dev' or 'production', the
-- mode of the first server that opened it: dev mode takes any tenant name
-- with no credentials, so its data must never be served in production
-- (nor production data without credentials).
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- +goose Down
DROP TABLE meta;
