//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package migrations

import (
	"errors"
	"os"
	"syscall"
)

// tryLockFile takes an exclusive flock on f without blocking and reports
// whether it got it.
func tryLockFile(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			return false, err
		}
	}
}

func unlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
