package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/mongolock/mongolock"
)

// connFlags say where the locks are.
type connFlags struct {
	uri, db, collection string
	timeout             time.Duration
}

// register adds the connection flags to fs. Every FlagSet is registered
// before any is parsed: registering sets the defaults.
func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.uri, "uri", "", "the server's connection string `URI` (default $MONGOLOCK_URI, else $MONGODB_URI)")
	fs.StringVar(&c.db, "db", "", "the database `NAME` (default: the URI's, as in mongodb://host/NAME)")
	fs.StringVar(&c.collection, "collection", mongolock.DefaultCollection, "the locks' collection `NAME`; semaphores and reader-writer locks are in NAME_semaphores")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up reaching the server after `DURATION`; also the limit of each request (at most 1h)")
}

// sample is a FlagSet of the connection flags alone, for the help.
func (c *connFlags) sample() *flag.FlagSet {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	new(connFlags).register(fs)
	return fs
}

// A session is a client that answered, and a Provider on it.
type session struct {
	client  *mongo.Client
	p       *mongolock.Provider
	db      string
	timeout time.Duration
	lost    bool // a lock was lost
}

// open connects, and pings the server within --timeout: one line and
// exitUnavailable if it does not answer, exitUsage for a bad URI or
// option. opts are the Provider's, after WithCollection.
func (c *connFlags) open(opts ...mongolock.Option) (*session, error) {
	uri := cmp.Or(c.uri, os.Getenv("MONGODB_URI"))
	if uri == "" {
		return nil, fail(exitUsage, "no server: give --uri or set MONGOLOCK_URI or MONGODB_URI")
	}
	cs, err := connstring.ParseAndValidate(uri)
	if err != nil {
		if errors.As(err, new(*net.DNSError)) { // a mongodb+srv:// name that does not resolve
			return nil, fail(exitUnavailable, "could not look up the server: %s", oneLine(err))
		}
		return nil, fail(exitUsage, "invalid URI: %s", oneLine(err))
	}
	db := cmp.Or(c.db, cs.Database)
	if db == "" {
		return nil, fail(exitUsage, "no database: give --db or name it in the URI (mongodb://host/DB)")
	}
	co := options.Client().ApplyURI(uri)
	if !cs.ServerSelectionTimeoutSet {
		co.SetServerSelectionTimeout(c.timeout)
	}
	if !cs.ConnectTimeoutSet {
		co.SetConnectTimeout(c.timeout)
	}
	client, err := mongo.Connect(co)
	if err != nil {
		return nil, fail(exitUnavailable, "could not connect: %s", oneLine(err))
	}
	s := &session{client: client, db: db, timeout: c.timeout}
	s.p, err = mongolock.NewProvider(client.Database(db), append([]mongolock.Option{mongolock.WithCollection(c.collection)}, opts...)...)
	if err != nil {
		s.disconnect()
		return nil, fail(exitUsage, "%s", oneLine(err))
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := client.Ping(ctx, readpref.Primary()); err != nil {
		s.close()
		return nil, fail(exitUnavailable, "could not reach the server (%s) within %v: %s", strings.Join(cs.Hosts, ","), c.timeout, reason(err))
	}
	return s, nil
}

// ctx bounds one request by --timeout.
func (s *session) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

// close releases what the provider still holds and disconnects, within
// --timeout, or within a second once a lock was lost: there is nothing
// left to release then, and a server that could not be reached is likely
// still out of reach.
func (s *session) close() {
	limit := s.timeout
	if s.lost {
		limit = min(limit, time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	_ = s.p.Close(ctx)
	_ = s.client.Disconnect(ctx)
}

func (s *session) disconnect() {
	ctx, cancel := s.ctx()
	defer cancel()
	_ = s.client.Disconnect(ctx)
}

// reason is why a request failed, in a few words: for a server that was
// not found, the last error seen from a server, not the whole topology.
func reason(err error) string {
	var se topology.ServerSelectionError
	if errors.As(err, &se) {
		for _, s := range se.Desc.Servers {
			if s.LastError != nil {
				return oneLine(s.LastError)
			}
		}
		if se.Wrapped != nil {
			return oneLine(se.Wrapped)
		}
	}
	return oneLine(err)
}

// serverError is err, from a request to the server, as an exit: the
// server's, the network's or the timeout's.
func serverError(err error) error {
	var le *mongolock.Error
	if errors.As(err, &le) {
		return fail(exitUnavailable, "%s %q: %s", le.Op, le.Name, reason(le.Err))
	}
	return fail(exitUnavailable, "%s", reason(err))
}
