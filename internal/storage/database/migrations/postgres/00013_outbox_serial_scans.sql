-- +goose Up
-- A relay reads the outbox as the first rows of an index, a batch at a
-- time. Over a backlog of tens of thousands of rows (a spike of posts due
-- at once) PostgreSQL's planner chose two parallel workers for the claim's
-- read of due heads, and starting them cost several times the read itself:
-- 1,000 heads of a 100,000-row outbox took 50-60 ms with the workers and
-- 7-13 ms without. parallel_workers = 0 keeps every scan of the outbox in
-- the backend that runs it. A storage parameter rather than a session
-- setting: it costs no statement and holds through a pooler in transaction
-- mode (PgBouncer), which also refuses unknown startup parameters.
ALTER TABLE outbox SET (parallel_workers = 0);

-- +goose Down
ALTER TABLE outbox RESET (parallel_workers);
