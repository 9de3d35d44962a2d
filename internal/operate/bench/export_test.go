package bench

// CreatedToSent is createdToSent, for the tests of package bench_test.
var CreatedToSent = createdToSent
