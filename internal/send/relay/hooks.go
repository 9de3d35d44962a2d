package relay

import "github.com/postingsvc/posting/internal/send/outbox"

// hooks are the points where the package's tests step into a poll. New
// leaves a relay's hooks nil, so a production relay runs none; only tests
// set them (testHooks, in export_test.go), before the relay polls.
type hooks struct {
	// afterClaim, if set, runs between claim and send (tests simulate a crash there).
	afterClaim func()
	// claimAnswer, if set, sees what each claim returned and may change it
	// (tests lose the answer of a committed claim there).
	claimAnswer func([]outbox.Message, error) ([]outbox.Message, error)
}

// claimed runs afterClaim, if any.
func (h *hooks) claimed() {
	if h != nil && h.afterClaim != nil {
		h.afterClaim()
	}
}

// answer is what the poll takes a claim to have returned: msgs and err,
// unless claimAnswer changes them.
func (h *hooks) answer(msgs []outbox.Message, err error) ([]outbox.Message, error) {
	if h == nil || h.claimAnswer == nil {
		return msgs, err
	}
	return h.claimAnswer(msgs, err)
}
