package otelmongolock_test

import (
	"context"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/internal/testdb"
	"github.com/mongolock/mongolock/otelmongolock"
)

// BenchmarkAcquireTelemetry: what the OpenTelemetry hooks add to an
// Acquire and its Release against the server, one goroutine, one name, as
// mongolock's BenchmarkAcquireRelease. "none" is no WithTrace; "off" no-op
// providers; "global" the default, the global providers with no SDK
// installed; "sdk" the SDK, every span sampled and exported to nowhere in
// batches, every measurement aggregated.
func BenchmarkAcquireTelemetry(b *testing.B) {
	db := testdb.Database(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	setups := []struct {
		name string
		opts func(b *testing.B) []mongolock.Option
	}{
		{"none", func(*testing.B) []mongolock.Option { return nil }},
		{"off", func(*testing.B) []mongolock.Option {
			return []mongolock.Option{mongolock.WithTrace(otelmongolock.Trace(
				otelmongolock.WithTracerProvider(tracenoop.NewTracerProvider()), otelmongolock.WithMeterProvider(metricnoop.NewMeterProvider())))}
		}},
		{"global", func(*testing.B) []mongolock.Option {
			return []mongolock.Option{mongolock.WithTrace(otelmongolock.Trace())}
		}},
		{"sdk", func(b *testing.B) []mongolock.Option {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() {
				_ = tp.Shutdown(context.Background())
				_ = mp.Shutdown(context.Background())
			})
			return []mongolock.Option{mongolock.WithTrace(otelmongolock.Trace(
				otelmongolock.WithTracerProvider(tp), otelmongolock.WithMeterProvider(mp)))}
		}},
	}
	for _, s := range setups {
		b.Run("server/"+s.name, func(b *testing.B) {
			p, err := mongolock.NewProvider(db, s.opts(b)...)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = p.Close(context.Background()) }()
			l := p.Lock("bench")
			b.ReportAllocs()
			for b.Loop() {
				h, err := l.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }
