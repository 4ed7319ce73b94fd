package mongolock_test

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/faultproxy"
)

// dialProxied connects a client to the server at uri through a new fault
// proxy. closeAll ends every fault, disconnects the client and closes the
// proxy; it may be called more than once. It does not use
// t, so that trials running in goroutines can use it.
func dialProxied(uri string, opts ...*options.ClientOptions) (px *faultproxy.Proxy, c *mongo.Client, closeAll func(), err error) {
	target, err := firstHost(uri)
	if err != nil {
		return nil, nil, nil, err
	}
	px, err = faultproxy.New(target)
	if err != nil {
		return nil, nil, nil, err
	}
	all := append([]*options.ClientOptions{
		options.Client().ApplyURI(uri).SetHosts([]string{px.Addr()}).SetDirect(true).
			// Find the server again soon after a fault (the driver's
			// minimum; the default is 10s).
			SetHeartbeatInterval(500 * time.Millisecond),
	}, opts...)
	c, err = mongo.Connect(all...)
	if err != nil {
		_ = px.Close()
		return nil, nil, nil, err
	}
	closeAll = func() {
		// Disconnecting ends the client's sessions on the server: give it
		// fresh connections without faults for that (a blackholed one
		// would make it wait for its whole timeout), then close the proxy.
		px.Reset()
		_ = px.Restore()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
		_ = px.Close()
	}
	return px, c, closeAll, nil
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
