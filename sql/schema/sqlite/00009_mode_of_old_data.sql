-- +goose Up
-- A data directory written before servers recorded their mode has no
-- 'mode' row, and the first server to open it would claim it. Topics whose
-- tenant has no row can only come from dev mode (production refuses a
-- tenant's routes until the admin API creates it, and a deletion removes
-- its topics), so such a directory is dev-mode data: a production server
-- refuses it rather than show those events to tenants created later under
-- the same names.
INSERT INTO meta (key, value)
SELECT 'mode', 'dev'
WHERE NOT EXISTS (SELECT 1 FROM meta WHERE key = 'mode')
  AND EXISTS (SELECT 1 FROM topics t WHERE NOT EXISTS (SELECT 1 FROM tenants WHERE name = t.tenant));

-- +goose Down
SELECT 1;
