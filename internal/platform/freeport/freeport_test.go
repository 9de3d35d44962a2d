package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Ports handed out are distinct, below the ephemeral range, and free: a
// listener can bind each.
func TestPortsAreDistinctFreeAndBelowTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 300 {
		port, err := Port()
		require.NoError(t, err)
		require.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true
		require.GreaterOrEqual(t, port, Low)
		require.Less(t, port, High)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		require.NoError(t, err, "port %d is free", port)
		require.NoError(t, l.Close())
	}
}

// A port something listens on is never handed out.
func TestAPortInUseIsNotHandedOut(t *testing.T) {
	var held []net.Listener
	busy := map[int]bool{}
	for port := Low; port < Low+2000; port++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		held = append(held, l)
		busy[port] = true
	}
	t.Cleanup(func() {
		for _, l := range held {
			_ = l.Close()
		}
	})
	for range 200 {
		port, err := Port()
		require.NoError(t, err)
		require.False(t, busy[port], "port %d is in use", port)
	}
}
