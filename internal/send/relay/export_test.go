package relay

// testHooks returns r's hooks (see hooks), made on first use, for a test to
// set before r polls.
func (r *Relay) testHooks() *hooks {
	if r.hooks == nil {
		r.hooks = &hooks{}
	}
	return r.hooks
}
