// Package bench holds the measurements of `posting bench` (Run, which the
// command calls with its flags): the machine it runs on, the relay's drains
// beside raw SQL (internal/operate/bench/relaybench) and with several relays on one backlog,
// the API's create rate beside the same two-row transaction in raw SQL, the
// time from a post's commit to its event on the topic at one or more offered
// rates, taken from outside the service (its HTTP API and a consumer of the
// topic), and the lag of a spike of posts due in the same second
// (internal/operate/bench/spike), on the in-process broker and optionally through RabbitMQ. All measuring code lives under this folder; no domain
// package imports it.
//
// Every measurement takes its sizes from its arguments, so the command's
// test runs them small; none of them asserts a speed.
package bench
