-- +goose Up
-- The twin of postgres/00013_outbox_serial_scans.sql, which keeps
-- PostgreSQL's planner from giving the outbox's reads parallel workers.
-- This database runs a statement in one thread: nothing to change. The
-- version keeps the schema's numbers in step on every database.
SELECT 1;

-- +goose Down
SELECT 1;
