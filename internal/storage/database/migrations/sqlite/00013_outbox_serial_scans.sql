-- +goose Up
-- The twin of postgres/00013_outbox_serial_scans.sql, which keeps
-- PostgreSQL's planner from giving the outbox's reads parallel workers.
-- Nothing to change here: the relay's reads are not planned with parallel
-- workers on this database. The version keeps the schema's numbers in step
-- on every database.
SELECT 1;

-- +goose Down
SELECT 1;
