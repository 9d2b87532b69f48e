-- +goose Up
-- An issuer's policy (plan 051): max_ttl caps its tokens' lifetime, a Go
-- duration as given ('' : the server's --max-token-ttl; '0s': no cap);
-- require_exp false accepts its tokens without exp; actions are what its
-- tokens may grant, space separated. Issuers registered before keep
-- what they had: the server's cap, exp required, both actions.
ALTER TABLE issuers ADD COLUMN max_ttl text NOT NULL DEFAULT '';
ALTER TABLE issuers ADD COLUMN require_exp boolean NOT NULL DEFAULT true;
ALTER TABLE issuers ADD COLUMN actions text NOT NULL DEFAULT 'publish subscribe';

-- +goose Down
ALTER TABLE issuers DROP COLUMN actions;
ALTER TABLE issuers DROP COLUMN require_exp;
ALTER TABLE issuers DROP COLUMN max_ttl;
