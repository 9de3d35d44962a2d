package telemetry_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/telemetry"
)

func TestSetupFollowsTheStandardEnvironment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		env       map[string]string
		exporting bool
		badVar    string
	}{
		{name: "nothing set", env: nil},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, exporting: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, exporting: true},
		{name: "sdk disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "http/protobuf", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, exporting: true},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, badVar: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "zipkin", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, badVar: "OTEL_TRACES_EXPORTER"},
		{name: "disabled maybe", env: map[string]string{"OTEL_SDK_DISABLED": "maybe"}, badVar: "OTEL_SDK_DISABLED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := telemetry.Setup(context.Background(), telemetry.Config{LookupEnv: func(k string) (string, bool) {
				v, ok := tc.env[k]
				return v, ok
			}})
			if tc.badVar != "" {
				var cerr *config.Error
				require.True(t, errors.As(err, &cerr), "err %v", err)
				require.Equal(t, tc.badVar, cerr.Field)
				return
			}
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
			require.Equal(t, tc.exporting, p.Exporting())
			_, span := p.TracerProvider().Tracer("test").Start(context.Background(), "s")
			require.Equal(t, tc.exporting, span.IsRecording())
			span.End()
		})
	}
}
