package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// poolFigures are the pool metrics of a running serve.
type poolFigures struct{ opened, max float64 }

// scrapePool reads posting_database_connections_opened_total and
// posting_database_connections_max from the /metrics of the serve at
// baseURL.
func scrapePool(ctx context.Context, baseURL string) (poolFigures, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return poolFigures{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return poolFigures{}, err
	}
	defer resp.Body.Close()
	var f poolFigures
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		for name, dst := range map[string]*float64{
			"posting_database_connections_opened_total": &f.opened,
			"posting_database_connections_max":          &f.max,
		} {
			if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
				fields := strings.Fields(line)
				v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
				if err != nil {
					return poolFigures{}, fmt.Errorf("metrics line %q: %w", line, err)
				}
				*dst = v
				found++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return poolFigures{}, err
	}
	if found != 2 {
		return poolFigures{}, fmt.Errorf("%s/metrics has no database pool figures", baseURL)
	}
	return f, nil
}
