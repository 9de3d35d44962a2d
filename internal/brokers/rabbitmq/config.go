package rabbitmq

import (
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/config"
)

// DefaultExchange is the exchange both event types go to unless
// POSTING_RABBITMQ_EXCHANGE says otherwise: the contract's topic name.
const DefaultExchange = event.DefaultTopic

// Config configures a Sender. The zero value of every field but URL means
// its default.
type Config struct {
	// URL is the broker, amqp://user:pass@host:5672/vhost (or amqps://).
	// Required.
	URL string
	// Exchange is the durable topic exchange that receives every event; the
	// sender declares it. Default DefaultExchange.
	Exchange string
	// SendTimeout bounds one Send, from the call until every message has
	// an outcome, including waiting for an earlier Send and connecting.
	// Default 30s; 1s to 10m, and at least DialTimeout.
	SendTimeout time.Duration
	// DialTimeout bounds opening the TCP connection. Default 3s; 100ms to 1m.
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat interval: a silent network is noticed
	// after about two of them. Default 10s; 1s to 1m.
	Heartbeat time.Duration
	// ProbeTimeout bounds Ping. Default 2s; 100ms to 1m.
	ProbeTimeout time.Duration
	// ReconnectBase is the first pause after a failed connection attempt,
	// doubling (jittered) up to ReconnectMax; during the pause Send and
	// Ping answer unavailable without dialing. Default 250ms; 1ms to 1m.
	ReconnectBase time.Duration
	// ReconnectMax caps that pause. Default 5s; ReconnectBase to 5m. Keep
	// it short: the relay has its own outage backoff, and the pause delays
	// the first send after the broker's return by up to this much.
	ReconnectMax time.Duration
	// Channels is how many confirm channels of the connection a batch is
	// spread over, by routing key (see Sender). Default 2; 1 to 16.
	Channels int
}

// DefaultConfig returns a Config with every field but URL at its default:
// the one place the defaults are written.
func DefaultConfig() Config {
	return Config{
		Exchange:      DefaultExchange,
		SendTimeout:   30 * time.Second,
		DialTimeout:   3 * time.Second,
		Heartbeat:     10 * time.Second,
		ProbeTimeout:  2 * time.Second,
		ReconnectBase: 250 * time.Millisecond,
		ReconnectMax:  5 * time.Second,
		Channels:      2,
	}
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (cfg Config) Validate() error {
	const f = "rabbitmq.Config."
	if err := validateEndpoint(f, cfg.URL, cfg.Exchange); err != nil {
		return err
	}
	if strings.HasPrefix(cfg.Exchange, "amq.") {
		return config.Invalid(f+"Exchange", cfg.Exchange, "the amq. prefix is reserved by the broker")
	}
	if err := config.CheckDurations(f, []config.Duration{
		{Name: "SendTimeout", Value: cfg.SendTimeout, Min: time.Second, Max: 10 * time.Minute},
		{Name: "DialTimeout", Value: cfg.DialTimeout, Min: 100 * time.Millisecond, Max: time.Minute},
		{Name: "Heartbeat", Value: cfg.Heartbeat, Min: time.Second, Max: time.Minute},
		{Name: "ProbeTimeout", Value: cfg.ProbeTimeout, Min: 100 * time.Millisecond, Max: time.Minute},
		{Name: "ReconnectBase", Value: cfg.ReconnectBase, Min: time.Millisecond, Max: time.Minute},
		{Name: "ReconnectMax", Value: cfg.ReconnectMax, Min: cfg.ReconnectBase, Max: 5 * time.Minute},
	}); err != nil {
		return err
	}
	if cfg.Channels < 1 || cfg.Channels > 16 {
		return config.Invalid(f+"Channels", cfg.Channels, "want 1 to 16")
	}
	if cfg.SendTimeout < cfg.DialTimeout {
		return config.Invalid(f+"SendTimeout", cfg.SendTimeout, "must be at least the dial timeout %s", cfg.DialTimeout)
	}
	return nil
}

// validateEndpoint checks what a sender and a consumer both name, the
// fields prefix+"URL" and prefix+"Exchange": the broker's URL (ValidateURL)
// and an exchange name of 1 to 255 characters.
func validateEndpoint(prefix, rawURL, exchange string) error {
	if err := ValidateURL(prefix+"URL", rawURL); err != nil {
		return err
	}
	if strings.TrimSpace(exchange) == "" || len(exchange) > 255 {
		return config.Invalid(prefix+"Exchange", exchange, "want 1 to 255 characters")
	}
	return nil
}

// ValidateURL checks a broker URL, the field named field: amqp:// or
// amqps:// with a host and a port in 1..65535, as the client reads it
// (amqp.ParseURI), so that a URL accepted here is one the client dials.
func ValidateURL(field, raw string) error {
	u, err := config.ParseURL(raw) // its error quotes no password
	if err != nil {
		return config.Invalid(field, config.RedactURL(raw), "%w", err)
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return config.Invalid(field, config.RedactURL(raw), "want amqp://user:pass@host:5672/vhost or amqps://")
	}
	if u.Host == "" {
		return config.Invalid(field, config.RedactURL(raw), "no host")
	}
	// ParseURI's errors quote nothing of the URL once url.Parse took it.
	uri, err := amqp.ParseURI(raw)
	if err != nil {
		return config.Invalid(field, config.RedactURL(raw), "%w", err)
	}
	if uri.Port < 1 || uri.Port > 65535 {
		return config.Invalid(field, config.RedactURL(raw), "port %d is outside 1..65535", uri.Port)
	}
	return nil
}
