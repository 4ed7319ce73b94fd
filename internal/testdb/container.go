package testdb

import (
	"context"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/mongodb"
)

// containerImage is the MongoDB image the harness starts where Docker answers.
const containerImage = "mongo:7.0"

// startContainer starts a single-node replica set and returns its URI and a
// function that removes the container (Ryuk also removes it when the process
// exits).
func startContainer() (string, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := mongodb.Run(ctx, containerImage, mongodb.WithReplicaSet("rs0"))
	if err != nil {
		return "", nil, err
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = testcontainers.TerminateContainer(c, testcontainers.StopContext(ctx))
	}
	uri, err := c.ConnectionString(ctx)
	if err != nil {
		stop()
		return "", nil, err
	}
	return uri, stop, nil
}
