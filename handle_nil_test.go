package mongolock_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mongolock/mongolock"
)

// handlesOfNothing are a value of each handle type that holds nothing: nil,
// and the zero value.
var handlesOfNothing = []any{
	(*mongolock.Handle)(nil), &mongolock.Handle{},
	(*mongolock.CompositeHandle)(nil), &mongolock.CompositeHandle{},
	(*mongolock.Leadership)(nil), &mongolock.Leadership{},
	(*mongolock.UpgradeableHandle)(nil), &mongolock.UpgradeableHandle{},
}

// Every exported method of a handle type, called on a nil handle or a
// zero one (a failed Acquire's, a deferred Release written before the
// error check), answers as for nothing held and never panics: Release
// returns nil, Context is done, Lost is closed, an error wraps
// ErrInvalidArgument. Methods are found by reflection, so that a new one
// is held to it too.
func TestEveryMethodOfAHandleOfNothingAnswersWithoutPanic(t *testing.T) {
	for _, h := range handlesOfNothing {
		v := reflect.ValueOf(h)
		for i := range v.NumMethod() {
			m := v.Type().Method(i)
			for _, ctx := range []context.Context{context.Background(), nil} {
				of := "nil"
				if !v.IsNil() {
					of = "zero"
				}
				name := fmt.Sprintf("%T %s.%s/ctx %v", h, of, m.Name, ctx != nil)
				t.Run(name, func(t *testing.T) {
					args := make([]reflect.Value, m.Type.NumIn()-1)
					for j := range args {
						in := m.Type.In(j + 1)
						switch {
						case in == reflect.TypeFor[context.Context]() && ctx != nil:
							args[j] = reflect.ValueOf(ctx)
						case in.Kind() == reflect.String:
							args[j] = reflect.ValueOf("v").Convert(in)
						default:
							args[j] = reflect.Zero(in)
						}
					}
					var out []reflect.Value
					require.NotPanics(t, func() { out = v.Method(i).Call(args) })
					checkAnswerOfNothing(t, m.Name, out)
				})
			}
		}
	}
}

// checkAnswerOfNothing checks what a method of a handle that holds nothing
// returned.
func checkAnswerOfNothing(t *testing.T, method string, out []reflect.Value) {
	t.Helper()
	for _, o := range out {
		if o.Type() == reflect.TypeFor[error]() {
			err, _ := o.Interface().(error)
			if method == "Release" {
				require.NoError(t, err, "a Release of nothing held")
				continue
			}
			require.ErrorIs(t, err, mongolock.ErrInvalidArgument)
			var e *mongolock.Error
			require.True(t, errors.As(err, &e), "an *Error: %v", err)
			continue
		}
		switch x := o.Interface().(type) {
		case context.Context:
			require.ErrorIs(t, x.Err(), context.Canceled, "the Context of nothing held is done")
			require.ErrorIs(t, context.Cause(x), mongolock.ErrInvalidArgument)
		case <-chan struct{}:
			select {
			case <-x:
			default:
				t.Fatal("the Lost of nothing held is not closed")
			}
		default:
			require.True(t, o.IsZero() || o.Kind() == reflect.Slice && o.Len() == 0, "%s of nothing held: %v", method, x)
		}
	}
}
