// Package faultproxy is a TCP proxy for fault-injection tests: it forwards
// connections to a target (the test server) and, on the test's command,
// delays the bytes (per direction), drops them while keeping connections
// open (a blackhole, as in a network partition), resets every connection,
// or stops listening and closes everything (the server went away), and
// restores normal forwarding.
//
// A client that must see the faults connects to Addr only (for the MongoDB
// driver: SetHosts([]string{p.Addr()}).SetDirect(true)). Close ends every
// goroutine of the proxy; Close is the only method that waits.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Stats counts what the proxy did, for test reports.
type Stats struct {
	Accepted    int   // connections accepted
	Resets      int   // connections reset by Reset
	Closed      int   // connections closed by Stop
	Forwarded   int64 // bytes handed on to the other side
	Blackholed  int64 // bytes dropped by a blackhole
	Blackholes  int   // calls of Blackhole
	ResetCalls  int   // calls of Reset
	StopCalls   int   // calls of Stop
	LatencySets int   // calls of SetLatency with a non-zero latency
}

// Proxy forwards TCP connections from Addr to a target. It is safe for
// concurrent use.
type Proxy struct {
	target string
	addr   string // fixed at New: Restore listens on the same address

	mu        sync.Mutex
	ln        net.Listener // nil while stopped
	up, down  time.Duration
	blackhole bool
	closed    bool
	links     map[*link]struct{}
	stats     Stats
	wg        sync.WaitGroup // accept loops and pipes
}

// New listens on a free loopback port and forwards what it accepts to
// target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), ln: ln, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// Addr is the address clients connect to (host:port), the same for the
// proxy's whole life.
func (p *Proxy) Addr() string { return p.addr }

// Stats returns what the proxy did so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// SetLatency delays every byte by up on its way to the target and by down
// on its way back, from when the proxy reads it. Bytes keep their order; a
// change applies to bytes read afterwards.
func (p *Proxy) SetLatency(up, down time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up, p.down = up, down
	if up > 0 || down > 0 {
		p.stats.LatencySets++
	}
}

// Blackhole drops every byte in both directions, including bytes read but
// not yet delivered, while connections stay open and new ones are accepted:
// requests neither succeed nor fail, as in a network partition.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = true
	p.stats.Blackholes++
}

// Reset aborts every open connection on both sides with a TCP RST (linger
// 0), dropping bytes not yet delivered. New connections are accepted as
// before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.ResetCalls++
	for l := range p.links {
		l.abort(true)
		delete(p.links, l)
		p.stats.Resets++
	}
}

// Stop stops listening (connection attempts are refused) and closes every
// open connection normally (FIN), as a server that shut down would.
// Restore listens again on the same address.
func (p *Proxy) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.StopCalls++
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for l := range p.links {
		l.abort(false)
		delete(p.links, l)
		p.stats.Closed++
	}
}

// Restore ends every fault: no latency, no blackhole, and listening again
// after Stop. Connections that survived a blackhole carry bytes again
// (those dropped meanwhile stay lost).
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up, p.down, p.blackhole = 0, 0, false
	if p.closed || p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// Close stops the proxy for good: it stops listening, closes every
// connection, and waits until every goroutine of the proxy has ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for l := range p.links {
		l.abort(false)
		delete(p.links, l)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// faults returns the latency of a direction and whether bytes are dropped.
func (p *Proxy) faults(up bool) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if up {
		return p.up, p.blackhole
	}
	return p.down, p.blackhole
}

func (p *Proxy) count(forwarded, dropped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Forwarded += int64(forwarded)
	p.stats.Blackholed += int64(dropped)
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		in, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed by Stop or Close
		}
		out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		l := &link{client: in.(*net.TCPConn), server: out.(*net.TCPConn), done: make(chan struct{})}
		p.mu.Lock()
		if p.closed || p.ln != ln {
			p.mu.Unlock()
			l.abort(false)
			continue
		}
		p.links[l] = struct{}{}
		p.stats.Accepted++
		p.wg.Add(4)
		p.mu.Unlock()
		up, down := make(chan chunk, 256), make(chan chunk, 256)
		go p.read(l, l.client, up, true)
		go p.write(l, l.server, up, true)
		go p.read(l, l.server, down, false)
		go p.write(l, l.client, down, false)
	}
}

// A link is one proxied connection: the client's side and the target's.
type link struct {
	client, server *net.TCPConn
	once           sync.Once
	done           chan struct{} // closed by abort
}

// abort closes both sides, once; with rst, with a TCP RST.
func (l *link) abort(rst bool) {
	l.once.Do(func() {
		close(l.done)
		if rst {
			_ = l.client.SetLinger(0)
			_ = l.server.SetLinger(0)
		}
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// drop forgets l, closing both sides: one side ended.
func (p *Proxy) drop(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
	l.abort(false)
}

// A chunk is bytes read from one side, due on the other side at due.
type chunk struct {
	b   []byte
	due time.Time
}

// read reads src into chunks stamped with their delivery time, until src
// ends; then it closes q.
func (p *Proxy) read(l *link, src net.Conn, q chan<- chunk, up bool) {
	defer p.wg.Done()
	defer close(q)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			delay, hole := p.faults(up)
			if hole {
				p.count(0, n)
			} else {
				q <- chunk{b: buf[:n], due: time.Now().Add(delay)}
			}
		}
		if err != nil {
			return
		}
	}
}

// write delivers q's chunks to dst in order, each at its time, dropping
// them while blackholed; when q ends or dst fails, it closes the link.
func (p *Proxy) write(l *link, dst net.Conn, q <-chan chunk, up bool) {
	defer p.wg.Done()
	defer p.drop(l)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-l.done: // reset or closed: nothing more will be delivered
				for range q {
				}
				return
			}
		}
		if _, hole := p.faults(up); hole {
			p.count(0, len(c.b))
			continue
		}
		p.count(len(c.b), 0)
		if _, err := dst.Write(c.b); err != nil {
			// dst is gone: drain q until its reader ends (the link is
			// closed now, so it ends soon).
			p.drop(l)
			for range q {
			}
			return
		}
	}
}
