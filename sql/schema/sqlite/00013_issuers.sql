-- +goose Up
-- Token issuers a tenant trusts besides its signing secret, and the ids
-- of tokens revoked (plan 040). Both go with their tenant: DeleteTenant
-- removes them in its transaction. version changes with each
-- registration under a name, so a stream opened with an older one ends.
-- until is when a revoked token has expired for sure (0: never known).
CREATE TABLE issuers (
    tenant   TEXT    NOT NULL,
    name     TEXT    NOT NULL,
    issuer   TEXT    NOT NULL,
    audience TEXT    NOT NULL,
    jwks_url TEXT    NOT NULL,
    alg      TEXT    NOT NULL,
    key      TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;

CREATE TABLE revoked_tokens (
    tenant TEXT    NOT NULL,
    jti    TEXT    NOT NULL,
    until  INTEGER NOT NULL,
    PRIMARY KEY (tenant, jti)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE revoked_tokens;
DROP TABLE issuers;
