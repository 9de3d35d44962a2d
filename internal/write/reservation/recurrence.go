package reservation

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/teambition/rrule-go"
)

// LocalTimeLayout is how a local date-time (a series' start, an
// occurrence) is written: RFC 3339 without an offset, to the second.
const LocalTimeLayout = "2006-01-02T15:04:05"

// FormatLocalTime writes a wall time (its fields as a UTC time) in
// LocalTimeLayout.
func FormatLocalTime(wall time.Time) string { return wall.UTC().Format(LocalTimeLayout) }

// ParseLocalTime reads a local date-time in LocalTimeLayout into a wall time
// (its fields as a UTC time).
func ParseLocalTime(s string) (time.Time, error) {
	return time.ParseInLocation(LocalTimeLayout, s, time.UTC)
}

// LocalToInstant returns the instant at which the clocks of loc show wall,
// a wall time whose fields are given as a UTC time, by the rules of RFC 5545
// section 3.3.5: a wall time that occurs twice (the hour repeated when the
// clocks go back) is its first occurrence, and one that does not occur (the
// hour skipped when the clocks go forward) is read with the UTC offset in
// effect before the gap, so 02:30 on the day Berlin skips from 02:00 to
// 03:00 is 01:30 UTC (03:30 CEST). time.Date leaves both cases unspecified.
func LocalToInstant(wall time.Time, loc *time.Location) time.Time {
	u := wall.UTC()
	y, mo, d := u.Date()
	h, mi, s := u.Clock()
	guess := time.Date(y, mo, d, h, mi, s, u.Nanosecond(), loc)
	// The offsets that may apply: the guess's zone and the zones on each
	// side of it. Real zones change their offset at most once in a day.
	start, end := guess.ZoneBounds()
	var transitions []time.Time
	offsets := []int{offsetAt(guess)}
	if !start.IsZero() {
		transitions = append(transitions, start)
		offsets = append(offsets, offsetAt(start.Add(-time.Nanosecond)))
	}
	if !end.IsZero() {
		transitions = append(transitions, end)
		offsets = append(offsets, offsetAt(end))
	}
	var best time.Time
	for _, off := range offsets {
		c := u.Add(-time.Duration(off) * time.Second)
		if offsetAt(c.In(loc)) == off && (best.IsZero() || c.Before(best)) {
			best = c // the earliest instant that shows wall: the first occurrence
		}
	}
	if !best.IsZero() {
		return best
	}
	// A gap: the clocks jumped from T+before to T+after at the transition T,
	// and wall lies between. It is read with the offset before the gap.
	for _, t := range transitions {
		before, after := offsetAt(t.Add(-time.Nanosecond)), offsetAt(t)
		if after <= before {
			continue
		}
		gapStart := t.Add(time.Duration(before) * time.Second).UTC() // wall clock at T, old offset
		gapEnd := t.Add(time.Duration(after) * time.Second).UTC()    // wall clock at T, new offset
		if !u.Before(gapStart) && u.Before(gapEnd) {
			return u.Add(-time.Duration(before) * time.Second)
		}
	}
	return guess.UTC() // unreachable for real zones; Go's own choice
}

func offsetAt(t time.Time) int {
	_, off := t.Zone()
	return off
}

// Occurrence is one occurrence of a series: its wall time in the series'
// zone (fields as a UTC time) and the instant it stands for.
type Occurrence struct {
	Local, At time.Time
}

// The rule parts and frequencies a series accepts. A part or frequency
// outside them is refused by name rather than half-supported.
var (
	supportedRuleParts = []string{"FREQ", "INTERVAL", "COUNT", "UNTIL", "BYDAY", "BYMONTHDAY", "BYMONTH",
		"BYHOUR", "BYMINUTE", "BYSECOND", "BYSETPOS", "WKST"}
	supportedFreqs = []string{"DAILY", "WEEKLY", "MONTHLY", "YEARLY"}
)

// MaxRuleLength bounds an rrule, in bytes.
const MaxRuleLength = 1000

// maxRuleScan bounds the occurrences a rule is expanded to when it is
// checked (MaxSeriesOccurrences per horizon, or its first occurrence).
const maxRuleScan = 200_000

// maxOccurrencesBefore bounds the occurrences a new start or rule may have
// before now. Every view, list and materialization of a series expands its
// rule from its start (about 100 ns an occurrence), so a list of 100 series
// each this far back costs about 0.2 s; a weekly series may start 380 years
// back, one of 24 a day 2 years back.
const maxOccurrencesBefore = 20_000

// recurrence is a parsed series rule: rrule-go expands it in floating time
// (wall times as UTC, so no zone and no DST enters the expansion), and
// LocalToInstant turns each wall time into its instant in loc.
type recurrence struct {
	rule *rrule.RRule
	loc  *time.Location
	// until is the instant bound of an UNTIL written in UTC (with Z);
	// zero when UNTIL is absent or local, which rrule-go applies itself.
	until time.Time
	// drawn counts the wall times drawn from the rule, for tests.
	drawn int
}

// loadZone reads an IANA zone name; the binary embeds the zone database
// (time/tzdata), so it does not depend on the host's.
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return nil, invalidField("timeZone", "is required")
	}
	if name == "Local" || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, invalidField("timeZone", fmt.Sprintf("must be an IANA time zone name such as Europe/Berlin, got %q", name))
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, invalidField("timeZone", fmt.Sprintf("unknown time zone %q; want an IANA name such as Europe/Berlin", name))
	}
	return loc, nil
}

// parseRecurrence reads rule, an RFC 5545 RRULE value (with or without the
// "RRULE:" prefix), for a series that starts at the wall time start in loc.
// A refusal is a *ValidationError on rrule naming the part.
func parseRecurrence(rule string, start time.Time, loc *time.Location) (*recurrence, error) {
	bad := func(format string, args ...any) error { return invalidField("rrule", fmt.Sprintf(format, args...)) }
	if len(rule) > MaxRuleLength {
		return nil, bad("must be at most %d bytes", MaxRuleLength)
	}
	body := strings.TrimPrefix(strings.TrimSpace(rule), "RRULE:")
	if body == "" {
		return nil, bad("is required, such as FREQ=WEEKLY;BYDAY=MO")
	}
	var until time.Time
	kept := make([]string, 0, 8)
	seen := map[string]bool{}
	for part := range strings.SplitSeq(body, ";") {
		name, value, ok := strings.Cut(part, "=")
		if !ok || name == "" || value == "" {
			return nil, bad("part %q is not NAME=VALUE", part)
		}
		name = strings.ToUpper(name)
		if seen[name] {
			return nil, bad("part %s appears more than once", name)
		}
		seen[name] = true
		if !slices.Contains(supportedRuleParts, name) {
			return nil, bad("part %s is not supported; supported: %s", name, strings.Join(supportedRuleParts, ", "))
		}
		value = strings.ToUpper(value)
		switch name {
		case "FREQ":
			if !slices.Contains(supportedFreqs, value) {
				return nil, bad("FREQ=%s is not supported; supported: %s", value, strings.Join(supportedFreqs, ", "))
			}
		case "INTERVAL", "COUNT":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 || n > 100_000 {
				return nil, bad("%s must be an integer from 1 to 100000, got %q", name, value)
			}
		case "UNTIL":
			switch {
			case len(value) == len("20060102"):
				d, err := time.ParseInLocation("20060102", value, time.UTC)
				if err != nil {
					return nil, bad("UNTIL %q is not a date (YYYYMMDD) or date-time (YYYYMMDDTHHMMSS, Z for UTC)", value)
				}
				// A date bounds the series by the whole day.
				value = d.Add(24*time.Hour - time.Second).Format("20060102T150405")
			case strings.HasSuffix(value, "Z"):
				t, err := time.ParseInLocation("20060102T150405Z", value, time.UTC)
				if err != nil {
					return nil, bad("UNTIL %q is not a date (YYYYMMDD) or date-time (YYYYMMDDTHHMMSS, Z for UTC)", value)
				}
				until = t
				continue // an instant: applied to the occurrences' instants, below
			default:
				if _, err := time.ParseInLocation("20060102T150405", value, time.UTC); err != nil {
					return nil, bad("UNTIL %q is not a date (YYYYMMDD) or date-time (YYYYMMDDTHHMMSS, Z for UTC)", value)
				}
			}
		}
		kept = append(kept, name+"="+value)
	}
	if !seen["FREQ"] {
		return nil, bad("FREQ is required (%s)", strings.Join(supportedFreqs, ", "))
	}
	if seen["COUNT"] && seen["UNTIL"] {
		return nil, bad("COUNT and UNTIL must not both be given (RFC 5545)")
	}
	// time.UTC: a local UNTIL is read as a wall time, like start.
	opt, err := rrule.StrToROptionInLocation(strings.Join(kept, ";"), time.UTC)
	if err != nil {
		// rrule-go's message does not say which part it refused: find it.
		for _, part := range kept {
			if _, perr := rrule.StrToROptionInLocation("FREQ=YEARLY;"+part, time.UTC); perr != nil && !strings.HasPrefix(part, "FREQ=") {
				return nil, bad("%s: %v", part, perr)
			}
		}
		return nil, bad("%v", err)
	}
	opt.Dtstart = start.UTC()
	r, err := rrule.NewRRule(*opt)
	if err != nil {
		return nil, bad("%v", err)
	}
	return &recurrence{rule: r, loc: loc, until: until}, nil
}

// each calls fn with the occurrences in order, from the first, until fn
// returns false or the rule ends; it converts at most limit wall times.
// Occurrences whose instants lie well before from (more than any UTC offset
// apart) are passed over unconverted: a series is expanded from its start
// each time, for COUNT. It passes over at most maxSkip of them, and reports
// false when it stopped there, before reaching from.
func (r *recurrence) each(limit, maxSkip int, from time.Time, fn func(Occurrence) bool) bool {
	next := r.rule.Iterator()
	skip := time.Time{}
	if !from.IsZero() {
		skip = from.Add(-30 * time.Hour)
	}
	skipped := 0
	for n := 0; n < limit; {
		wall, ok := next()
		if !ok {
			return true
		}
		r.drawn++
		if wall.Before(skip) {
			if skipped++; skipped > maxSkip {
				return false
			}
			continue
		}
		n++
		o := Occurrence{Local: wall, At: LocalToInstant(wall, r.loc)}
		if !r.until.IsZero() && o.At.After(r.until) {
			return true
		}
		if !fn(o) {
			return true
		}
	}
	return true
}

// between returns the occurrences whose instants lie in [from, to), at most
// limit+1 of them (so a caller sees when there are more than limit).
func (r *recurrence) between(from, to time.Time, limit int) []Occurrence {
	var out []Occurrence
	// No scan bound: the expansion stops at to, and a rule was checked to
	// have occurrences, not too far after its start, when it was stored.
	r.each(math.MaxInt, math.MaxInt, from, func(o Occurrence) bool {
		if !o.At.Before(to) {
			// Instants follow wall times except across a fall-back
			// transition, where two wall times an hour apart can map to
			// instants in either order; an hour's slack keeps them.
			return o.At.Before(to.Add(time.Hour))
		}
		if !o.At.Before(from) {
			out = append(out, o)
		}
		return len(out) <= limit
	})
	out = slices.DeleteFunc(out, func(o Occurrence) bool { return !o.At.Before(to) })
	return out
}

// check refuses a rule that has no occurrence at or after from, or more
// than limit occurrences within some span of horizon in the year after
// from (the rule is then too dense for the materializer's bound). It also
// refuses, naming start, a rule with more than maxSkip occurrences before
// from (maxOccurrencesBefore for a new start or rule): every later
// expansion of the series would draw them all again, and a start centuries
// back with a dense rule costs minutes of CPU.
func (r *recurrence) check(from time.Time, horizon time.Duration, limit, maxSkip int) error {
	end := from.Add(max(horizon, 366*24*time.Hour))
	var window []time.Time // the instants of the last limit+1 occurrences
	var first bool
	var dense error
	reached := r.each(maxRuleScan, maxSkip, from, func(o Occurrence) bool {
		if o.At.Before(from) {
			return true
		}
		first = true
		if !o.At.Before(end) {
			return false
		}
		window = append(window, o.At)
		if len(window) > limit {
			if o.At.Sub(window[0]) < horizon {
				dense = invalidField("rrule", fmt.Sprintf("has more than %d occurrences within the series horizon of %s (from %s); "+
					"at most %d per horizon are made into posts", limit, daysOrDuration(horizon), FormatJSONTime(window[0]), limit))
				return false
			}
			window = window[1:]
		}
		return true
	})
	if !reached {
		return invalidField("start", fmt.Sprintf("lies too far before now for this rule: it has more than %d occurrences "+
			"before now, which every expansion of the series would go through; move start forward to a recent occurrence", maxSkip))
	}
	if dense != nil {
		return dense
	}
	if !first {
		return invalidField("rrule", "has no occurrence from now on (check start, COUNT and UNTIL)")
	}
	return nil
}

// next returns up to n occurrences at or after from.
func (r *recurrence) next(from time.Time, n int) []Occurrence {
	out := []Occurrence{}
	if n <= 0 {
		return out
	}
	r.each(maxRuleScan, math.MaxInt, from, func(o Occurrence) bool {
		if !o.At.Before(from) {
			out = append(out, o)
		}
		return len(out) < n
	})
	return out
}

// parseISODuration reads an ISO 8601 duration of weeks, days, hours,
// minutes and seconds (P1W, P1D, PT2H30M, P1DT12H). A day is 24 hours and a
// week 7 days, exactly: the duration is added to an instant, not to a wall
// time. Years and months, whose length varies, are refused.
func parseISODuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("must be an ISO 8601 duration of weeks, days, hours, minutes and seconds, such as PT2H or P1DT12H, got %q", s)
	rest, ok := strings.CutPrefix(strings.ToUpper(s), "P")
	if !ok || rest == "" || rest == "T" {
		return 0, bad
	}
	var total time.Duration
	inTime := false
	units := "WD"
	for rest != "" {
		if rest[0] == 'T' {
			if inTime {
				return 0, bad
			}
			inTime, units, rest = true, "HMS", rest[1:]
			if rest == "" {
				return 0, bad
			}
			continue
		}
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 || i == len(rest) || i > 9 {
			return 0, bad
		}
		n, _ := strconv.ParseInt(rest[:i], 10, 64)
		unit := rest[i]
		pos := strings.IndexByte(units, unit)
		if pos < 0 {
			if unit == 'Y' || (unit == 'M' && !inTime) {
				return 0, fmt.Errorf("years and months are not supported (their length varies); use weeks, days or hours, got %q", s)
			}
			return 0, bad
		}
		units = units[pos+1:] // each unit once, in order
		var d time.Duration
		switch unit {
		case 'W':
			d = 7 * 24 * time.Hour
		case 'D':
			d = 24 * time.Hour
		case 'H':
			d = time.Hour
		case 'M':
			d = time.Minute
		case 'S':
			d = time.Second
		}
		if time.Duration(n) > (math.MaxInt64-total)/d {
			// It would wrap around: 30501W would read as about 72 hours.
			return 0, fmt.Errorf("is too long, got %q", s)
		}
		total += time.Duration(n) * d
		rest = rest[i+1:]
	}
	return total, nil
}
