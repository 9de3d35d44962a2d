package bench

import (
	"context"
	"fmt"
	"runtime"

	"github.com/postingsvc/posting/internal/storage/database"
)

// Machine names what a figure was measured on.
type Machine struct {
	Cores           int
	GOOS, GOARCH    string
	GoVersion       string
	Database        database.Dialect
	DatabaseVersion string
}

// String is the machine on one line.
func (m Machine) String() string {
	return fmt.Sprintf("%d cores, %s/%s, %s, %s %s", m.Cores, m.GOOS, m.GOARCH, m.GoVersion, m.Database, m.DatabaseVersion)
}

// DescribeMachine reads the host's cores and Go, and the server's version
// from db.
func DescribeMachine(ctx context.Context, db *database.DB) (Machine, error) {
	m := Machine{Cores: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		GoVersion: runtime.Version(), Database: db.Dialect}
	q := "SELECT VERSION()"
	switch db.Dialect {
	case database.PostgreSQL:
		q = "SELECT version()"
	case database.SQLite:
		q = "SELECT 'SQLite ' || sqlite_version()"
	}
	if err := db.WithContext(ctx).Raw(q).Row().Scan(&m.DatabaseVersion); err != nil {
		return m, fmt.Errorf("read the database's version: %w", err)
	}
	return m, nil
}
