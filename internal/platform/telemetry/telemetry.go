// Package telemetry sets up OpenTelemetry tracing from the standard OTEL_*
// environment and holds the W3C traceparent helpers every traced part shares.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/postingsvc/posting/internal/platform/config"
)

// ScopeName is the instrumentation scope of the service's own spans.
const ScopeName = "github.com/postingsvc/posting"

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) names another.
const DefaultServiceName = "posting"

// The standard environment variables Setup reads.
const (
	EnvSDKDisabled           = "OTEL_SDK_DISABLED"
	EnvTracesExporter        = "OTEL_TRACES_EXPORTER"
	EnvEndpoint              = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint        = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol              = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol        = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	supportedOTLPProtocol    = "http/protobuf"
	supportedTracesExporters = "otlp or none"
)

// Config configures Setup. Zero fields take their defaults.
type Config struct {
	// ServiceName is the resource's service.name when the environment
	// names none. Default DefaultServiceName.
	ServiceName string
	// InstanceID is the resource's service.instance.id (the instance id of
	// claims and logs). Default: none.
	InstanceID string
	// LookupEnv reads the environment. Default os.LookupEnv; tests set it.
	LookupEnv func(string) (string, bool)
	// Exporter, if set, receives the spans instead of an OTLP exporter
	// built from the environment, and tracing is on whatever the
	// environment says (tests use an in-memory exporter). Spans are handed
	// to it synchronously.
	Exporter sdktrace.SpanExporter
}

// Provider is the process's tracer provider and what shuts it down.
type Provider struct {
	tp        trace.TracerProvider
	shutdown  func(context.Context) error
	exporting bool
	endpoint  string
}

// Setup returns the tracer provider the environment asks for: an SDK
// provider exporting with OTLP/HTTP, or the no-op provider. A setting it
// cannot honour (an unknown OTEL_TRACES_EXPORTER, a protocol other than
// http/protobuf) is a *config.Error naming the variable. Setup sets none of
// OpenTelemetry's global providers: the provider and the W3C Trace Context
// propagator are passed explicitly.
func Setup(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.ServiceName == "" {
		cfg.ServiceName = DefaultServiceName
	}
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	env := func(k string) string { v, _ := cfg.LookupEnv(k); return strings.TrimSpace(v) }
	if cfg.Exporter != nil {
		return sdkProvider(ctx, cfg, sdktrace.WithSyncer(cfg.Exporter), "")
	}
	if v := env(EnvSDKDisabled); v != "" {
		switch strings.ToLower(v) {
		case "true":
			return Disabled(), nil
		case "false":
		default:
			return nil, config.Invalid(EnvSDKDisabled, v, "want true or false")
		}
	}
	switch v := env(EnvTracesExporter); strings.ToLower(v) {
	case "none":
		return Disabled(), nil
	case "", "otlp":
	default:
		return nil, config.Invalid(EnvTracesExporter, v, "not supported: want %s", supportedTracesExporters)
	}
	endpoint := env(EnvTracesEndpoint)
	if endpoint == "" {
		endpoint = env(EnvEndpoint)
	}
	if endpoint == "" {
		return Disabled(), nil
	}
	// The endpoint may carry basic auth or a token: it is only ever shown
	// redacted.
	endpoint = config.RedactURL(endpoint)
	for _, k := range []string{EnvTracesProtocol, EnvProtocol} {
		if v := env(k); v != "" {
			if v != supportedOTLPProtocol {
				return nil, config.Invalid(k, v, "not supported: this build exports traces with %s only", supportedOTLPProtocol)
			}
			break // the signal-specific setting wins
		}
	}
	// The exporter reads the endpoint, headers, timeout, compression and
	// TLS settings from the same environment itself.
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter for %s: %s", endpoint, config.RedactError(err))
	}
	// The batcher reads OTEL_BSP_*, the provider OTEL_TRACES_SAMPLER and the
	// span limits.
	return sdkProvider(ctx, cfg, sdktrace.WithBatcher(exp), endpoint)
}

func sdkProvider(ctx context.Context, cfg Config, processor sdktrace.TracerProviderOption, endpoint string) (*Provider, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	if cfg.InstanceID != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.InstanceID))
	}
	// Later options win: OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
	// override the defaults above.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(processor, sdktrace.WithResource(res))
	return &Provider{tp: tp, shutdown: tp.Shutdown, exporting: true, endpoint: endpoint}, nil
}

// Disabled returns a provider that records and exports nothing.
func Disabled() *Provider {
	return &Provider{tp: noop.NewTracerProvider(), shutdown: func(context.Context) error { return nil }}
}

// TracerProvider is what traced components take in their Config.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Exporting reports whether spans are recorded and exported.
func (p *Provider) Exporting() bool { return p.exporting }

// Endpoint is the OTLP endpoint spans go to, its secrets hidden
// (config.RedactURL); "" when not exporting, or exporting to
// Config.Exporter.
func (p *Provider) Endpoint() string { return p.endpoint }

// Shutdown exports the spans still buffered and stops the exporter, within
// ctx. It is safe to call more than once.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("shut down tracing: %w", err)
	}
	return nil
}
