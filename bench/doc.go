// Package bench holds the measurements of `posting bench`: the machine it
// runs on, the API's create rate beside the same two-row transaction in raw
// SQL, and the time from a post's commit to its event on the topic, taken
// from outside the service (its HTTP API and a consumer of the topic).
//
// Every measurement takes its sizes from its arguments, so the command's
// test runs them small; none of them asserts a speed.
package bench
