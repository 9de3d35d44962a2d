-- +goose Up
-- The W3C traceparent of the request that created the post or last edited
-- it (55 characters: version 00). The scheduler makes the post's reservation
-- event a child of it, so the post's publication lands in the trace of the
-- request that asked for it. NULL: none (posts created before this
-- migration; the reservation event then carries the scheduler run's trace).
-- A nullable column at the end is an instant ALTER on MariaDB 10.3+ and
-- MySQL 8.0.29+: no table copy.
ALTER TABLE posts ADD COLUMN traceparent VARCHAR(55) NULL;

-- +goose Down
ALTER TABLE posts DROP COLUMN traceparent;
