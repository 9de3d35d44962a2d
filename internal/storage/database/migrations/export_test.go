package migrations

// UpWithLockWait is Up with a shorter wait for the lock, for tests.
var UpWithLockWait = up

// MySQLLockName is the name of the GET_LOCK Up takes on a database.
var MySQLLockName = mysqlLockName

// PostgresLockKey is the pg_advisory_lock key Up takes.
const PostgresLockKey = postgresLockKey
