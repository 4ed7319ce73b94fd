// Package sample is apicheck's test input: one of each kind of feature.
package sample

import "context"

// Limit is a constant.
const Limit = 3

// ErrX is a variable.
var ErrX error

// T is a struct with an exported and an unexported field.
type T struct {
	Name string
	note string
}

// Get is a value method.
func (T) Get(ctx context.Context, key string) (value string, err error) { return "", nil }

// Set is a pointer method.
func (t *T) Set(values ...int) { _ = t.note }

// I is an interface with an unexported method.
type I interface {
	Do() error
	private()
}

// New is a function.
func New() *T { return nil }

type hidden int
