// Command container runs the tests' MongoDB in Docker: a single-node replica
// set of the mongo image, started with testcontainers-go. It prints the
// server's connection string on one line of standard output once the server
// answers, and removes the container when its standard input closes (or at
// SIGINT or SIGTERM).
//
// It is a module of its own so that testcontainers-go and the Docker client
// stay out of the graph of every module that imports mongolock: the test
// harness (the package above) runs it with `go run` only where a Docker
// daemon answers.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/mongodb"
)

func main() {
	image := flag.String("image", "mongo:8.0", "the MongoDB image")
	flag.Parse()
	if err := run(*image); err != nil {
		fmt.Fprintln(os.Stderr, "container:", err)
		os.Exit(1)
	}
}

func run(image string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := mongodb.Run(ctx, image, mongodb.WithReplicaSet("rs0"))
	if err != nil {
		return err
	}
	// Ryuk also removes the container should this process die first.
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := testcontainers.TerminateContainer(c, testcontainers.StopContext(ctx)); err != nil {
			fmt.Fprintln(os.Stderr, "container: remove:", err)
		}
	}()
	uri, err := c.ConnectionString(ctx)
	if err != nil {
		return err
	}
	fmt.Println(uri)

	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-done:
	case <-sig:
	}
	return nil
}
