package reservation

import (
	"context"

	"gorm.io/gorm"
)

// Scope is whom a request acts for: the API puts it into the request's
// context (WithScope) after it authenticated the caller, and the Service
// reads it on every call. A context without a Scope acts for the service
// itself (the scheduler, the worker, tests, and the API when it runs
// without authentication): it sees every post and creates posts with
// OwnerID "".
type Scope struct {
	// OwnerID is the caller (a JWT's sub). It is the OwnerID of the posts
	// the caller creates, and, unless All, the only owner whose posts the
	// caller can see, list, change or cancel: another owner's post is
	// ErrNotFound, as if it did not exist.
	OwnerID string
	// All lets the caller act on every post (an administrator).
	All bool
}

type scopeKey struct{}

// WithScope returns ctx acting for s.
func WithScope(ctx context.Context, s Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// ScopeFrom returns the Scope of ctx, and false when ctx has none.
func ScopeFrom(ctx context.Context) (Scope, bool) {
	s, ok := ctx.Value(scopeKey{}).(Scope)
	return s, ok
}

// ownerOf is the OwnerID of a post created with ctx.
func ownerOf(ctx context.Context) string {
	s, _ := ScopeFrom(ctx)
	return s.OwnerID
}

// visibleTo limits a query on posts to those ctx's caller may see: its own
// posts, or every post for an administrator or without a Scope.
func visibleTo(ctx context.Context) func(*gorm.DB) *gorm.DB {
	return func(db *gorm.DB) *gorm.DB {
		s, ok := ScopeFrom(ctx)
		if !ok || s.All {
			return db
		}
		return db.Where("owner_id = ?", s.OwnerID)
	}
}
