-- +goose Up
-- The SQLite twin of mysql/00010_inbox_sequences.sql: the highest event
-- sequence each consumer applied per post.
CREATE TABLE IF NOT EXISTS inbox_sequences (
    consumer TEXT    NOT NULL,
    post_id  INTEGER NOT NULL,
    sequence INTEGER NOT NULL,
    PRIMARY KEY (consumer, post_id)
);

-- +goose Down
DROP TABLE inbox_sequences;
