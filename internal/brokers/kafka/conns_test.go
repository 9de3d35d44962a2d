package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// connsTestWire is a connection whose reads come from in, chunk bytes at a
// time, and whose writes go nowhere.
type connsTestWire struct {
	net.Conn
	in    *bytes.Reader
	chunk int
}

func (w *connsTestWire) Read(p []byte) (int, error)  { return w.in.Read(p[:min(len(p), w.chunk)]) }
func (w *connsTestWire) Write(p []byte) (int, error) { return len(p), nil }
func (w *connsTestWire) Close() error                { return nil }

// connsTestRequest is a request header: size, api key, version,
// correlation id, then a body.
func connsTestRequest(apiKey int16, corr int32) []byte {
	b := make([]byte, 12, 20)
	b = append(b, "bodybody"...)
	binary.BigEndian.PutUint32(b[0:4], uint32(len(b)-4))
	binary.BigEndian.PutUint16(b[4:6], uint16(apiKey))
	binary.BigEndian.PutUint16(b[6:8], 9)
	binary.BigEndian.PutUint32(b[8:12], uint32(corr))
	return b
}

// connsTestResponse is a response: size, correlation id, body.
func connsTestResponse(corr int32, body int) []byte {
	b := make([]byte, 8+body)
	binary.BigEndian.PutUint32(b[0:4], uint32(4+body))
	binary.BigEndian.PutUint32(b[4:8], uint32(corr))
	return b
}

// A connection set counts the produce requests (api key 0) that were
// written and whose response never began to come back, once their
// connection is closed, however the responses are cut into reads; other
// requests do not count.
func TestConnSetCountsUnansweredProduceRequests(t *testing.T) {
	t.Parallel()
	for _, chunk := range []int{1, 3, 7, 64} {
		var in bytes.Buffer
		in.Write(connsTestResponse(1, 10)) // metadata
		in.Write(connsTestResponse(2, 0))  // the first produce
		in.Write(connsTestResponse(4, 33)) // the third; the second gets none
		wire := &connsTestWire{in: bytes.NewReader(in.Bytes()), chunk: chunk}
		s := newConnSet(func(context.Context, string, string) (net.Conn, error) { return wire, nil }, time.Second)
		c, err := s.Dial("tcp", "broker:9092")
		require.NoError(t, err)
		for _, req := range [][]byte{connsTestRequest(3, 1), connsTestRequest(0, 2), connsTestRequest(0, 3), connsTestRequest(0, 4)} {
			_, err := c.Write(req)
			require.NoError(t, err)
		}
		buf := make([]byte, 1024)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		require.Zero(t, s.unansweredProduces(), "counted when the connection closes")
		s.tearDown()
		require.Equal(t, 1, s.unansweredProduces(), "chunk %d: the produce request 3 got no answer", chunk)
		require.NoError(t, c.Close(), "closed again by the client")
		require.Equal(t, 1, s.unansweredProduces(), "chunk %d: counted once", chunk)
	}
}
