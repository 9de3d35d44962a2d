package database

import (
	"context"
	"database/sql/driver"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// InsertMany inserts rows, a slice of a model's structs or pointers to them,
// through tx in statements of at most insertRows rows, and sets each row's
// primary key. Every creatable column of the model is written as the row
// holds it; on MySQL and SQLite a nullable one that is NULL in all the rows
// of a statement is left to its default, NULL.
//
// On PostgreSQL the rows go as one array a column through unnest, bound in
// binary (pgx's QueryExecModeDescribeExec): the statement stays a few
// hundred bytes whatever the number of rows, so the server neither parses
// thousands of placeholders nor thousands of timestamps written as text,
// which the pool's QueryExecModeExec would send. Elsewhere GORM writes each
// statement's rows as one multi-row INSERT. A taken unique key is
// gorm.ErrDuplicatedKey on every database. A statement that fails leaves the
// rows of those before it written: tx is to be a transaction, rolled back on
// an error.
func InsertMany(tx *gorm.DB, rows any) error {
	rv := reflect.ValueOf(rows)
	if rv.Kind() != reflect.Slice {
		return fmt.Errorf("insert many: rows must be a slice, got %T", rows)
	}
	d := DialectOf(tx)
	per := insertRows(d)
	for start := 0; start < rv.Len(); start += per {
		if err := insertStatement(tx, d, rv.Slice(start, min(start+per, rv.Len()))); err != nil {
			return err
		}
	}
	return nil
}

// insertRows bounds the rows of one statement of InsertMany. On MySQL and
// PostgreSQL 1,000: a batch of 1,000 small posts is one INSERT of posts and
// one of events, and four of 250 cost the database more (the API's batches
// wrote about 0.73 of the posts/s of raw 1,000-row INSERTs with them against
// 0.80 without). Sixteen columns a row keep 1,000 rows far below MySQL's
// 65,535 placeholders; PostgreSQL binds a column's rows as one array. On
// SQLite 50: its driver binds a statement's parameters in time quadratic in
// their number, and the API's batches wrote about 1.7 times the posts/s in
// statements of 50 rows as in statements of 250, the scheduler 1.6 to 2.0
// times the reservations as in statements of 1,000; 25 rows were no
// faster.
func insertRows(d Dialect) int {
	if d == SQLite {
		return 50
	}
	return 1000
}

// insertStatement is one statement of InsertMany on tx, of dialect d: rv,
// a slice of rows.
func insertStatement(tx *gorm.DB, d Dialect, rv reflect.Value) error {
	rows := rv.Interface()
	ctx := tx.Statement.Context
	if ctx == nil {
		ctx = context.Background()
	}
	stmt := &gorm.Statement{DB: tx}
	if err := stmt.Parse(rows); err != nil {
		return fmt.Errorf("insert many: %w", err)
	}
	if d != PostgreSQL {
		// A nullable column NULL in every row is left out, to its default
		// of NULL: the statement carries fewer values for GORM to convert,
		// the driver to quote and the server to parse. A batch of 1,000
		// untraced posts without publishBy leaves out 12 of the 31 columns
		// of its posts and events, and was written in about 0.9 of the
		// time on MariaDB and on SQLite.
		// On a session of its own: tx may be a chained handle (tx.Set,
		// tx.Clauses) whose statement is the caller's, and Omit there would
		// stay on it for the caller's later Creates. The caller's own
		// Omits are kept.
		if null := nullColumns(ctx, stmt.Schema, rv); len(null) > 0 {
			tx = tx.Session(&gorm.Session{})
			tx = tx.Omit(append(slices.Clone(tx.Statement.Omits), null...)...)
		}
		return tx.Create(rows).Error
	}
	err := unnestInsert(ctx, tx, stmt.Schema, rv)
	if err != nil && (postgresDriver{}).IsDuplicateKey(err) {
		return fmt.Errorf("%w: %w", gorm.ErrDuplicatedKey, err)
	}
	return err
}

// nullColumns names the creatable columns of s that are nil pointers in
// every row of rv. The tables InsertMany writes give each nullable column
// the default NULL (TestInsertManyLeavesNullColumnsNull holds them to it).
func nullColumns(ctx context.Context, s *schema.Schema, rv reflect.Value) []string {
	var null []string
	for _, f := range s.Fields {
		if f.DBName == "" || !f.Creatable || f.FieldType.Kind() != reflect.Pointer || f.HasDefaultValue {
			continue
		}
		allNil := true
		for i := 0; allNil && i < rv.Len(); i++ {
			_, allNil = f.ValueOf(ctx, reflect.Indirect(rv.Index(i))) // a pointer is zero when nil
		}
		if allNil {
			null = append(null, f.DBName)
		}
	}
	return null
}

// unnestInsert is InsertMany on PostgreSQL.
func unnestInsert(ctx context.Context, tx *gorm.DB, s *schema.Schema, rv reflect.Value) error {
	pk := s.PrioritizedPrimaryField
	if pk == nil {
		return fmt.Errorf("insert many into %s: no primary key", s.Table)
	}
	types, err := columnTypes(ctx, tx, s.Table)
	if err != nil {
		return err
	}
	n := rv.Len()
	var cols, arrays []string
	args := []any{pgx.QueryExecModeDescribeExec}
	for _, f := range s.Fields {
		if f.DBName == "" || !f.Creatable || f == pk {
			continue
		}
		typ, ok := types[f.DBName]
		if !ok {
			return fmt.Errorf("insert many into %s: the table has no column %s", s.Table, f.DBName)
		}
		values := make([]driver.Value, n)
		for i := range n {
			v, _ := f.ValueOf(ctx, reflect.Indirect(rv.Index(i)))
			if values[i], err = driver.DefaultParameterConverter.ConvertValue(v); err != nil {
				return fmt.Errorf("insert many into %s: column %s: %w", s.Table, f.DBName, err)
			}
		}
		array, err := columnArray(values)
		if err != nil {
			return fmt.Errorf("insert many into %s: column %s: %w", s.Table, f.DBName, err)
		}
		cols = append(cols, tx.Statement.Quote(f.DBName))
		arrays = append(arrays, "$"+strconv.Itoa(len(args))+"::"+typ+"[]")
		args = append(args, array)
	}
	q := "INSERT INTO " + tx.Statement.Quote(s.Table) + " (" + strings.Join(cols, ",") + ") SELECT * FROM unnest(" +
		strings.Join(arrays, ",") + ") RETURNING " + tx.Statement.Quote(pk.DBName)
	res, err := tx.Statement.ConnPool.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer res.Close()
	ids := make([]int64, 0, n)
	for res.Next() {
		var id int64
		if err := res.Scan(&id); err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if err := res.Err(); err != nil {
		return err
	}
	if len(ids) != n {
		return fmt.Errorf("insert many into %s: %d rows written, %d ids returned", s.Table, n, len(ids))
	}
	// The identity takes its values as unnest yields the rows, in order.
	slices.Sort(ids)
	for i, id := range ids {
		if err := pk.Set(ctx, reflect.Indirect(rv.Index(i)), id); err != nil {
			return err
		}
	}
	return nil
}

// columnArray is one column's values as a slice pgx binds as an array:
// its elements are pointers, nil for NULL, of the one kind the non-NULL
// values share.
func columnArray(values []driver.Value) (any, error) {
	var kind driver.Value
	for _, v := range values {
		if v != nil {
			kind = v
			break
		}
	}
	switch kind.(type) {
	case nil, string:
		return pointers[string](values)
	case int64:
		return pointers[int64](values)
	case bool:
		return pointers[bool](values)
	case time.Time:
		return pointers[time.Time](values)
	case float64:
		return pointers[float64](values)
	case []byte:
		return pointers[[]byte](values)
	}
	return nil, fmt.Errorf("values of type %T", kind)
}

func pointers[T any](values []driver.Value) ([]*T, error) {
	out := make([]*T, len(values))
	for i, v := range values {
		if v == nil {
			continue
		}
		t, ok := v.(T)
		if !ok {
			return nil, fmt.Errorf("value %d is a %T among values of type %T", i, v, *new(T))
		}
		out[i] = &t
	}
	return out, nil
}

// tableColumns caches columnTypes: a table's column types change only with
// a migration, which the process's own schema must match anyway.
var tableColumns sync.Map // table name -> map[string]string

// columnTypes returns the SQL type of each column of table, without its
// modifiers (character varying, not character varying(200)), so that the
// arrays unnest reads are cast to the columns' types and a value too long
// for its column is refused on insert, as a literal would be, rather than
// cut by the cast.
func columnTypes(ctx context.Context, tx *gorm.DB, table string) (map[string]string, error) {
	if m, ok := tableColumns.Load(table); ok {
		return m.(map[string]string), nil
	}
	rows, err := tx.Statement.ConnPool.QueryContext(ctx,
		"SELECT attname, format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped",
		table)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, fmt.Errorf("read the columns of %s: %w", table, err)
		}
		m[name] = typ
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	tableColumns.Store(table, m)
	return m, nil
}
