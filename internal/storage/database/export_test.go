package database

import (
	"net/url"

	"gorm.io/driver/mysql"
)

// OpenMySQLWithoutReturning opens rawURL, a mysql:// URL, as MySQL 8 is
// opened: GORM reads a multi-row INSERT's ids without RETURNING, which
// MySQL lacks, from the first id and the rows' count.
func OpenMySQLWithoutReturning(rawURL string) (*DB, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	dsn, err := MySQLDSN(u)
	if err != nil {
		return nil, err
	}
	return openMySQLConfig(mysql.Config{DSN: dsn, DisableWithReturning: true}, u.Host+u.Path, "")
}
