package faultproxy_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer echoes every connection until the test ends; it reports each
// connection's end (its read error) on ended.
type echoServer struct {
	ln    net.Listener
	ended chan error
	wg    sync.WaitGroup
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoServer{ln: ln, ended: make(chan error, 100)}
	var mu sync.Mutex
	var conns []net.Conn
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				_, err := io.Copy(c, c)
				if err == nil {
					err = io.EOF
				}
				s.ended <- err
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// echo sends msg and returns how long the echo took, or the read error.
func echo(c net.Conn, msg string, within time.Duration) (time.Duration, error) {
	start := time.Now()
	if _, err := c.Write([]byte(msg)); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(within))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return 0, err
	}
	if string(buf) != msg {
		return 0, errors.New("echo garbled: " + string(buf))
	}
	return time.Since(start), nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestForwardsBothWays(t *testing.T) {
	s := newEchoServer(t)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	for range 10 {
		_, err := echo(c, "hello", 2*time.Second)
		require.NoError(t, err)
	}
	st := p.Stats()
	require.Equal(t, 1, st.Accepted)
	require.EqualValues(t, 100, st.Forwarded)
}

func TestLatencyDelaysEachDirectionAndKeepsOrder(t *testing.T) {
	s := newEchoServer(t)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	const up, down = 40 * time.Millisecond, 60 * time.Millisecond
	p.SetLatency(up, down)
	took, err := echo(c, "slow", 2*time.Second)
	require.NoError(t, err)
	require.GreaterOrEqual(t, took, up+down)

	// Many small writes arrive whole and in order.
	var msg []byte
	for i := range 200 {
		b := []byte{byte('a' + i%26)}
		msg = append(msg, b...)
		_, err := c.Write(b)
		require.NoError(t, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	got := make([]byte, len(msg))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, string(msg), string(got))

	p.SetLatency(0, 0)
	took, err = echo(c, "fast", 2*time.Second)
	require.NoError(t, err)
	require.Less(t, took, up+down, "latency 0 again")
}

func TestBlackholeDropsBytesAndKeepsConnectionsOpen(t *testing.T) {
	s := newEchoServer(t)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	_, err := echo(c, "before", 2*time.Second)
	require.NoError(t, err)

	p.Blackhole()
	_, err = echo(c, "lost", 200*time.Millisecond)
	require.True(t, isTimeout(err), "a blackholed request neither succeeds nor fails: %v", err)
	// A new connection is accepted but carries nothing either.
	c2 := dial(t, p.Addr())
	_, err = echo(c2, "lost too", 200*time.Millisecond)
	require.True(t, isTimeout(err), "%v", err)
	require.Positive(t, p.Stats().Blackholed)
	select {
	case err := <-s.ended:
		require.FailNow(t, "a connection ended during the blackhole", "%v", err)
	default:
	}

	require.NoError(t, p.Restore())
	_, err = echo(c, "after", 2*time.Second)
	require.NoError(t, err, "the same connection carries bytes again")
}

func TestResetAbortsConnectionsWithRST(t *testing.T) {
	s := newEchoServer(t)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	_, err := echo(c, "before", 2*time.Second)
	require.NoError(t, err)

	p.Reset()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, syscall.ECONNRESET, "the client side sees a reset")
	select {
	case err := <-s.ended:
		require.ErrorIs(t, err, syscall.ECONNRESET, "the server side sees a reset")
	case <-time.After(2 * time.Second):
		require.FailNow(t, "the server's connection did not end")
	}
	require.Equal(t, 1, p.Stats().Resets)

	// New connections work as before.
	c2 := dial(t, p.Addr())
	_, err = echo(c2, "after", 2*time.Second)
	require.NoError(t, err)
}

func TestStopRefusesAndCloses_RestoreListensAgain(t *testing.T) {
	s := newEchoServer(t)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	_, err := echo(c, "before", 2*time.Second)
	require.NoError(t, err)

	p.Stop()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "an open connection is closed normally")
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "nothing listens while stopped")

	require.NoError(t, p.Restore())
	c2 := dial(t, p.Addr())
	_, err = echo(c2, "after", 2*time.Second)
	require.NoError(t, err)
}

func TestCloseEndsEverythingWhileBytesAreDelayed(t *testing.T) {
	s := newEchoServer(t)
	p, err := faultproxy.New(s.ln.Addr().String())
	require.NoError(t, err)
	c := dial(t, p.Addr())
	p.SetLatency(time.Hour, 0)
	_, err = c.Write([]byte("never delivered"))
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, p.Close())
	require.Less(t, time.Since(start), time.Second, "Close waited for delayed bytes")
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err)
	require.NoError(t, p.Restore(), "Restore after Close does nothing")
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err)
}
