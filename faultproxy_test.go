package mongolock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/faultproxy"
	"github.com/mongolock/mongolock/internal/testdb"
)

// proxiedClient returns a client of its own that reaches the test server
// only through a fault proxy (internal/faultproxy) that the test controls:
// latency, blackhole, reset, stop. When the test ends, the proxy is closed
// first (every connection cut), then the client is disconnected, so that
// the disconnect never waits on a blackholed connection.
func proxiedClient(t *testing.T, opts ...*options.ClientOptions) (*faultproxy.Proxy, *mongo.Client) {
	t.Helper()
	return proxiedClientTo(t, testdb.Info(t).URI, opts...)
}

// proxiedClientTo is proxiedClient for the server at uri (its first host).
func proxiedClientTo(t *testing.T, uri string, opts ...*options.ClientOptions) (*faultproxy.Proxy, *mongo.Client) {
	t.Helper()
	target, err := firstHost(uri)
	require.NoError(t, err)
	px, err := faultproxy.New(target)
	require.NoError(t, err)
	all := append([]*options.ClientOptions{
		options.Client().ApplyURI(uri).SetHosts([]string{px.Addr()}).SetDirect(true).
			// Find the server again soon after a fault (the driver's
			// minimum; the default is 10s).
			SetHeartbeatInterval(500 * time.Millisecond),
	}, opts...)
	c, err := mongo.Connect(all...)
	if err != nil {
		_ = px.Close()
		require.NoError(t, err)
	}
	// Cleanups run last-in first-out: the proxy closes before the client
	// disconnects.
	t.Cleanup(func() {
		ctx, cancel := contextWithTimeout(10 * time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	t.Cleanup(func() { _ = px.Close() })
	return px, c
}

// firstHost returns the first host of a connection string.
func firstHost(uri string) (string, error) {
	o := options.Client().ApplyURI(uri)
	if err := o.Validate(); err != nil {
		return "", err
	}
	if len(o.Hosts) == 0 {
		return "", errors.New("no host in the test server's URI")
	}
	return o.Hosts[0], nil
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
