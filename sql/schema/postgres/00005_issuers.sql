-- +goose Up
-- Token issuers a tenant trusts besides its signing secret, and the ids
-- of tokens revoked (plan 040). Both go with their tenant: DeleteTenant
-- removes them in its transaction. version changes with each
-- registration under a name, so a stream opened with an older one ends.
-- until is when a revoked token has expired for sure (0: never known).
CREATE TABLE issuers (
    tenant   text    NOT NULL,
    name     text    NOT NULL,
    issuer   text    NOT NULL,
    audience text    NOT NULL,
    jwks_url text    NOT NULL,
    alg      text    NOT NULL,
    key      text    NOT NULL,
    version  bigint  NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE revoked_tokens (
    tenant text    NOT NULL,
    jti    text    NOT NULL,
    until  bigint  NOT NULL,
    PRIMARY KEY (tenant, jti)
);

-- +goose Down
DROP TABLE revoked_tokens;
DROP TABLE issuers;
