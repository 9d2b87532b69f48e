-- +goose Up
-- An issuer's policy (plan 051): max_ttl caps its tokens' lifetime, a Go
-- duration as given ('' : the server's --max-token-ttl; '0s': no cap);
-- require_exp 0 accepts its tokens without exp; actions are what its
-- tokens may grant, space separated. Issuers registered before keep
-- what they had: the server's cap, exp required, both actions.
ALTER TABLE issuers ADD COLUMN max_ttl TEXT NOT NULL DEFAULT '';
ALTER TABLE issuers ADD COLUMN require_exp INTEGER NOT NULL DEFAULT 1;
ALTER TABLE issuers ADD COLUMN actions TEXT NOT NULL DEFAULT 'publish subscribe';

-- +goose Down
ALTER TABLE issuers DROP COLUMN actions;
ALTER TABLE issuers DROP COLUMN require_exp;
ALTER TABLE issuers DROP COLUMN max_ttl;
