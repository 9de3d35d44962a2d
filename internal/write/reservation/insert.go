package reservation

import (
	"context"
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/postingsvc/posting/internal/storage/database"
)

// postInsert is the INSERT of a new post, built once from the Post model's
// GORM schema, so every column the model maps is written, as tx.Create would.
// A create runs it straight on the transaction's connection: GORM's create
// callbacks (statement building, reflection over the model, and on MariaDB
// an INSERT ... RETURNING read back as a result set) cost about as much CPU
// as the rest of the request, and on a small machine the API's rate is its
// CPU per create. The outbox row still goes through outbox.Append.
type postInsert struct {
	// ins is the statement in the database's form (database.Driver's
	// KeyInsert): the new id comes back as a row on PostgreSQL, whose driver
	// has no LastInsertId, and as the statement's LastInsertId elsewhere.
	ins    database.KeyInsert
	fields []*schema.Field
}

func newPostInsert(db *gorm.DB) (*postInsert, error) {
	stmt := &gorm.Statement{DB: db}
	if err := stmt.Parse(&Post{}); err != nil {
		return nil, fmt.Errorf("post schema: %w", err)
	}
	pk := stmt.Schema.PrioritizedPrimaryField
	if pk == nil {
		return nil, fmt.Errorf("post schema: no primary key")
	}
	ins := &postInsert{}
	var cols []string
	for _, f := range stmt.Schema.Fields {
		if f.DBName == "" || !f.Creatable || f == pk {
			continue
		}
		ins.fields = append(ins.fields, f)
		cols = append(cols, stmt.Quote(f.DBName))
	}
	ins.ins = database.DriverOf(db).KeyInsert(stmt.Quote(stmt.Schema.Table), stmt.Quote(pk.DBName), cols)
	return ins, nil
}

// exec inserts p through tx, a transaction, and sets p.ID.
func (ins *postInsert) exec(ctx context.Context, tx *gorm.DB, p *Post) error {
	rv := reflect.ValueOf(p).Elem()
	args := make([]any, len(ins.fields))
	for i, f := range ins.fields {
		args[i], _ = f.ValueOf(ctx, rv)
	}
	id, err := ins.ins.Exec(ctx, tx.Statement.ConnPool, args...)
	if err != nil {
		return err
	}
	p.ID = id
	return nil
}
