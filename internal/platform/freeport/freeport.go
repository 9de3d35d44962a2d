// Package freeport hands tests loopback ports that nothing listens on, for
// the servers they start as separate processes.
package freeport

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// Low and High bound the ports: above the well-known and most registered
// services' ports, below Linux's ephemeral range (32768 and up). The kernel
// gives a port just closed to the next listener that asks for any port (in
// this process or in another package's test process running beside it)
// and to outgoing connections, so a port asked of the kernel, closed and
// handed to a child process, can be taken before the child binds it.
const Low, High = 20000, 32000

var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// Port returns a loopback port that nothing listens on now and that it has
// not returned before in this process, drawn at random from [Low, High).
func Port() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 1000 {
		port := Low + rand.IntN(High-Low)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken
		}
		if err := l.Close(); err != nil {
			return 0, err
		}
		handedOut.ports[port] = true
		return port, nil
	}
	return 0, errors.New("freeport: no free loopback port in 1000 tries")
}

// Addr is Port as a loopback address, host:port.
func Addr() (string, error) {
	port, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}
