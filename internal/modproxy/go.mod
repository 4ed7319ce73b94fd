module github.com/mongolock/mongolock/internal/modproxy

go 1.25.0

require golang.org/x/mod v0.34.0
