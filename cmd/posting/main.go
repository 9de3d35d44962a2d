// Command posting runs the scheduled-posting service: the HTTP API, the
// reservation scheduler, the outbox relay, the downstream worker and the
// operator tools. main only wires; every behaviour lives in its package.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	// The IANA zone database in the binary: a series' time zone reads the
	// same on a host without /usr/share/zoneinfo (a scratch image).
	_ "time/tzdata"
)

func main() {
	setDefaultGCPercent(os.LookupEnv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode prints err and maps it to the exit status: 2 for a bad setting or
// command line, 1 for any other failure.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "posting:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return 1
}
