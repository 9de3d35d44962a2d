//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd)

package migrations

import "os"

// tryLockFile does not lock where flock does not exist: the service is built
// for Linux (the Dockerfile) and macOS, and two processes migrating one SQLite
// file at the same moment elsewhere are not supported.
func tryLockFile(*os.File) (bool, error) { return true, nil }

func unlockFile(*os.File) error { return nil }
