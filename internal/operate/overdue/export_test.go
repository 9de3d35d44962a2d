package overdue

// SetTestHookBeforeExplain makes List call f between its read of the posts
// and its reads of their events and publications, until the test ends.
func SetTestHookBeforeExplain(cleanup func(func()), f func()) {
	testHookBeforeExplain = f
	cleanup(func() { testHookBeforeExplain = nil })
}
