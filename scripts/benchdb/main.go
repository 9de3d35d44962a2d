// Command benchdb creates and drops the scratch MySQL/MariaDB database that
// `make bench` runs posting bench on.
package main

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postingsvc/posting/internal/storage/database"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchdb:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	base := os.Getenv("POSTING_TEST_MYSQL_URL")
	if base == "" {
		base = "mysql://root@127.0.0.1:3306/test"
	}
	switch {
	case len(args) == 1 && args[0] == "create":
		u, err := url.Parse(base)
		if err != nil {
			return fmt.Errorf("POSTING_TEST_MYSQL_URL: %w", err)
		}
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		name := "posting_bench_" + hex.EncodeToString(b)
		if err := admin(u, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
			return err
		}
		u.Path = "/" + name
		fmt.Println(u.String())
		return nil
	case len(args) == 2 && args[0] == "drop":
		u, err := url.Parse(args[1])
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(u.Path, "/")
		if !strings.HasPrefix(name, "posting_bench_") {
			return fmt.Errorf("refusing to drop %q: not a database benchdb created", name)
		}
		return admin(u, "DROP DATABASE IF EXISTS `"+name+"`")
	default:
		return fmt.Errorf("usage: benchdb create | benchdb drop URL")
	}
}

// admin runs stmt on the server of u, connected without a database.
func admin(u *url.URL, stmt string) error {
	dsn, err := database.MySQLDSN(u)
	if err != nil {
		return err
	}
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return err
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}
