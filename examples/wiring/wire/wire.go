//go:build wireinject

package main

import "github.com/google/wire"

// initReport builds the report and its dependencies; cleanup undoes them
// in reverse order: the Provider closes before the client disconnects.
func initReport() (*report, func(), error) {
	wire.Build(newConfig, newClient, newDatabase, newLocks, newReport)
	return nil, nil, nil
}
