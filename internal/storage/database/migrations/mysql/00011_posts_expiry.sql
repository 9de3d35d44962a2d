-- +goose Up
-- A post may carry a deadline, publish_by: past it, a post not yet published
-- becomes EXPIRED (terminal) and is never published afterwards.
-- publish_claimed_at is set by the worker, in one conditional UPDATE, before
-- it first calls a publisher for the post, and only while the post is
-- WORKING and its deadline has not passed; the expirer never expires a
-- claimed post, so a publication and an expiry racing at the deadline end
-- in exactly one of the two. reannounced counts the reservation events the
-- overdue check sent again for the post (at most POSTING_OVERDUE_REANNOUNCE).
-- idx_posts_status_publish_by serves the expirer: RESERVED or WORKING posts
-- whose deadline passed, without a scan of the other posts.
--
-- MySQL commits each statement on its own: a start killed part way runs the
-- whole migration again. So every statement but the last can run twice
-- (IF NOT EXISTS, a MODIFY to the same type), and the one that cannot, the
-- ALTER of posts, is one statement and comes last.

-- leases names one holder of a role among the instances on the database
-- (the overdue check, the embedded broker), until expires_at by the
-- database's clock; info is what the holder tells the others (an address).
CREATE TABLE IF NOT EXISTS leases (
    name       VARCHAR(100) NOT NULL,
    holder     VARCHAR(255) NOT NULL,
    info       VARCHAR(255) NOT NULL DEFAULT '',
    expires_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

ALTER TABLE publications
    MODIFY COLUMN status ENUM('PENDING','PUBLISHED','CANCELLED','FAILED','EXPIRED') NOT NULL DEFAULT 'PENDING';

ALTER TABLE posts
    MODIFY COLUMN status ENUM('RESERVED','WORKING','PUBLISHED','CANCELLED','EXPIRED') NOT NULL,
    ADD COLUMN publish_by DATETIME(6) NULL,
    ADD COLUMN publish_claimed_at DATETIME(6) NULL,
    ADD COLUMN reannounced INT NOT NULL DEFAULT 0,
    ADD INDEX idx_posts_status_publish_by (status, publish_by);

-- +goose Down
DROP TABLE IF EXISTS leases;
UPDATE publications SET status = 'CANCELLED' WHERE status = 'EXPIRED';
UPDATE posts SET status = 'CANCELLED' WHERE status = 'EXPIRED';
ALTER TABLE publications
    MODIFY COLUMN status ENUM('PENDING','PUBLISHED','CANCELLED','FAILED') NOT NULL DEFAULT 'PENDING';
ALTER TABLE posts
    DROP INDEX idx_posts_status_publish_by,
    DROP COLUMN reannounced,
    DROP COLUMN publish_claimed_at,
    DROP COLUMN publish_by,
    MODIFY COLUMN status ENUM('RESERVED','WORKING','PUBLISHED','CANCELLED') NOT NULL;
