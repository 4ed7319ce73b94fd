package mongolock

import "time"

// Test-only access to internals.

// WaitBackground waits for the provider's background work (TTL index
// creation, cleanup of orphaned acquisitions) to end.
func WaitBackground(p *Provider) { p.shared.bg.Wait() }

// KeeperDone is closed when the handle's extension goroutine has ended.
func KeeperDone(h *Handle) <-chan struct{} { return h.keeperDone }

// SafetyMargin is the margin by which the client's lease ends before the
// server's.
func SafetyMargin(p *Provider) time.Duration { return p.opts.safetyMargin() }

// CollectionName is the provider's collection.
func CollectionName(p *Provider) string { return p.coll.Name() }
