package otelmongolock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mongolock/mongolock"
	"github.com/mongolock/mongolock/otelmongolock"
)

func ExampleTrace() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(os.Getenv("MONGODB_DATABASE")) // the application's database
	_ = db.Collection("distributed_locks").Drop(ctx)     // start afresh (for the checked output)
	var spans bytes.Buffer                               // what the exporter writes (for the checked output)

	// Spans exported in batches (to stdout without WithWriter), metrics
	// read on demand; in production, OTLP exporters and a periodic reader.
	exporter, err := stdouttrace.New(stdouttrace.WithWriter(&spans))
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()

	// Without these options: the global providers (otel.SetTracerProvider,
	// otel.SetMeterProvider). Logs: mongolock.WithLogger.
	locks, err := mongolock.NewProvider(db, mongolock.WithTrace(otelmongolock.Trace(
		otelmongolock.WithTracerProvider(tp),
		otelmongolock.WithMeterProvider(mp),
	)))
	if err != nil {
		log.Fatal(err)
	}
	err = locks.Lock("nightly-report").Do(ctx, func(ctx context.Context) error {
		return nil // ctx carries the caller's span, if any
	})
	if err != nil {
		log.Fatal(err)
	}

	printTelemetry(ctx, tp, &spans, reader) // (for the checked output)
	// Output:
	// span mongolock.acquire acquired
	// span mongolock.release released
	// metric mongolock.acquire.duration
	// metric mongolock.acquire.attempts
	// metric mongolock.acquisitions
	// metric mongolock.handles.held
	// metric mongolock.acquire.pending
}

// printTelemetry prints the outcome of each span that tp exported to
// spans, and the name of each metric that reader finds.
func printTelemetry(ctx context.Context, tp *sdktrace.TracerProvider, spans *bytes.Buffer, reader *sdkmetric.ManualReader) {
	if err := tp.ForceFlush(ctx); err != nil {
		log.Fatal(err)
	}
	for dec := json.NewDecoder(spans); dec.More(); {
		var span struct {
			Name       string
			Attributes []struct {
				Key   string
				Value struct{ Value any }
			}
		}
		if err := dec.Decode(&span); err != nil {
			log.Fatal(err)
		}
		for _, kv := range span.Attributes {
			if kv.Key == "mongolock.outcome" {
				fmt.Println("span", span.Name, kv.Value.Value)
			}
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		fmt.Println("metric", m.Name)
	}
}
