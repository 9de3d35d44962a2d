package reservation

import "context"

// A Charge spends writes of the caller's write limit: the API puts one into
// a request's context (WithCharge) for a request whose cost the service
// learns only once it has checked the input, such as a series, which makes
// one post per occurrence within its horizon. It returns an error when the
// caller has fewer writes left; the service then writes nothing and
// returns that error.
type Charge func(writes int) error

type chargeKey struct{}

// WithCharge returns ctx whose series creates and edits spend through c.
func WithCharge(ctx context.Context, c Charge) context.Context {
	return context.WithValue(ctx, chargeKey{}, c)
}

// charge spends writes through ctx's Charge; without one it spends nothing.
func charge(ctx context.Context, writes int) error {
	if c, ok := ctx.Value(chargeKey{}).(Charge); ok && c != nil {
		return c(writes)
	}
	return nil
}
