package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/platform/telemetry"
)

// tracingShutdownTimeout bounds the export of the spans still buffered at
// shutdown.
const tracingShutdownTimeout = 5 * time.Second

// startTracing sets tracing up from the standard OTEL_* environment
// (telemetry.Setup) and registers its shutdown on st, so it runs after
// everything started later has stopped and the last spans are exported. A
// variable it cannot honour is a bad setting (exit 2).
func startTracing(ctx context.Context, s *settings, log *slog.Logger, st *startstop.Stack) (*telemetry.Provider, error) {
	p, err := telemetry.Setup(ctx, telemetry.Config{InstanceID: s.InstanceID})
	if cerr := (*config.Error)(nil); errors.As(err, &cerr) {
		return nil, badSetting(cerr.Field, fmt.Sprint(cerr.Value), cerr.Err)
	}
	if err != nil {
		return nil, err
	}
	st.OnStop(func() {
		sctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			log.Warn("spans not exported at shutdown", "component", "tracing", "err", config.RedactError(err))
		}
	})
	if p.Exporting() {
		log.Info("tracing on", "component", "tracing", "exporter", "otlp", "endpoint", p.Endpoint())
	}
	return p, nil
}

// exportingOnly is p's tracer provider when it exports spans, else nil (for
// api.Config.TracerProvider, which then only carries the trace context).
func exportingOnly(p *telemetry.Provider) trace.TracerProvider {
	if !p.Exporting() {
		return nil
	}
	return p.TracerProvider()
}
