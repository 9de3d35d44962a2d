package reservation

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func wall(y int, mo time.Month, d, h, mi int) time.Time {
	return time.Date(y, mo, d, h, mi, 0, 0, time.UTC)
}

func utc(y int, mo time.Month, d, h, mi int) time.Time {
	return time.Date(y, mo, d, h, mi, 0, 0, time.UTC)
}

// A wall time that occurs twice is its first occurrence; one the clocks skip
// is read with the offset before the gap (RFC 5545 section 3.3.5), in zones
// with DST on either side of UTC, with a half-hour shift, and without DST.
func TestLocalToInstantTakesTheFirstOfTwoAndTheOffsetBeforeAGap(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		zone string
		wall time.Time
		want time.Time
		why  string
	}{
		{"Europe/Berlin", wall(2026, 3, 29, 2, 30), utc(2026, 3, 29, 1, 30), "skipped: +01:00 before the gap, 03:30 CEST"},
		{"Europe/Berlin", wall(2026, 3, 29, 2, 0), utc(2026, 3, 29, 1, 0), "the gap's first instant"},
		{"Europe/Berlin", wall(2026, 3, 29, 1, 59), utc(2026, 3, 29, 0, 59), "just before the gap"},
		{"Europe/Berlin", wall(2026, 3, 29, 3, 0), utc(2026, 3, 29, 1, 0), "just after the gap"},
		{"Europe/Berlin", wall(2026, 10, 25, 2, 30), utc(2026, 10, 25, 0, 30), "twice: the first, CEST"},
		{"Europe/Berlin", wall(2026, 10, 25, 2, 0), utc(2026, 10, 25, 0, 0), "twice: the first, CEST"},
		{"Europe/Berlin", wall(2026, 10, 25, 3, 0), utc(2026, 10, 25, 2, 0), "after the repeated hour, CET"},
		{"Europe/Berlin", wall(2026, 7, 1, 9, 0), utc(2026, 7, 1, 7, 0), "summer"},
		{"America/New_York", wall(2026, 3, 8, 2, 30), utc(2026, 3, 8, 7, 30), "skipped: -05:00 before the gap, 03:30 EDT"},
		{"America/New_York", wall(2026, 11, 1, 1, 30), utc(2026, 11, 1, 5, 30), "twice: the first, EDT"},
		{"America/New_York", wall(2026, 11, 1, 2, 30), utc(2026, 11, 1, 7, 30), "after the repeated hour, EST"},
		{"Australia/Lord_Howe", wall(2026, 10, 4, 2, 15), utc(2026, 10, 3, 15, 45), "a half-hour gap: +10:30 before it"},
		{"Australia/Lord_Howe", wall(2026, 4, 5, 1, 45), utc(2026, 4, 4, 14, 45), "a repeated half hour: the first, +11:00"},
		{"Asia/Tokyo", wall(2026, 3, 29, 2, 30), utc(2026, 3, 28, 17, 30), "no DST"},
		{"Asia/Tokyo", wall(2026, 10, 25, 2, 30), utc(2026, 10, 24, 17, 30), "no DST"},
	} {
		loc, err := time.LoadLocation(c.zone)
		require.NoError(t, err)
		got := LocalToInstant(c.wall, loc)
		require.Truef(t, got.Equal(c.want), "%s %s (%s): got %s, want %s", c.zone, FormatLocalTime(c.wall), c.why, got.UTC(), c.want)
		if got.In(loc).Format(LocalTimeLayout) == FormatLocalTime(c.wall) {
			continue
		}
		// Only a skipped wall time shows another wall clock, one gap later.
		require.Contains(t, c.why, "gap")
	}
}

// Every wall minute of the days around each transition of a year maps to
// an instant that shows it (or, in a gap, the offset before it), and
// consecutive wall minutes outside a gap map to instants a minute apart or
// an hour's repeat apart: exactly one instant per wall time.
func TestLocalToInstantIsTheFirstInstantShowingTheWallTime(t *testing.T) {
	t.Parallel()
	for _, zone := range []string{"Europe/Berlin", "America/New_York", "Australia/Sydney", "Asia/Tokyo"} {
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		for w := wall(2026, 1, 1, 0, 0); w.Before(wall(2027, 1, 1, 0, 0)); w = w.Add(15 * time.Minute) {
			got := LocalToInstant(w, loc)
			shown := got.In(loc)
			if shown.Format(LocalTimeLayout) == FormatLocalTime(w) {
				// Shown: and no earlier instant shows it.
				for back := 15 * time.Minute; back <= 2*time.Hour; back += 15 * time.Minute {
					require.NotEqualf(t, FormatLocalTime(w), got.Add(-back).In(loc).Format(LocalTimeLayout),
						"%s %s: an earlier instant shows it", zone, FormatLocalTime(w))
				}
				continue
			}
			_, before := got.Add(-3 * time.Hour).In(loc).Zone()
			require.Equalf(t, w.Add(-time.Duration(before)*time.Second), got, "%s %s: a gap reads the offset before it", zone, FormatLocalTime(w))
		}
	}
}

// A weekly series at 02:30 across both of Berlin's changes and New York's
// yields one occurrence per week, at the instants the rules name.
func TestWeeklySeriesAcrossDSTHasOneOccurrencePerWeek(t *testing.T) {
	t.Parallel()
	berlin, _ := time.LoadLocation("Europe/Berlin")
	r, err := parseRecurrence("FREQ=WEEKLY;BYDAY=SU;COUNT=3", wall(2026, 3, 22, 2, 30), berlin)
	require.NoError(t, err)
	got := r.next(time.Time{}, 10)
	require.Equal(t, []Occurrence{
		{wall(2026, 3, 22, 2, 30), utc(2026, 3, 22, 1, 30)}, // CET
		{wall(2026, 3, 29, 2, 30), utc(2026, 3, 29, 1, 30)}, // skipped hour: 03:30 CEST
		{wall(2026, 4, 5, 2, 30), utc(2026, 4, 5, 0, 30)},   // CEST
	}, got)

	ny, _ := time.LoadLocation("America/New_York")
	r, err = parseRecurrence("RRULE:FREQ=WEEKLY;BYDAY=SU;BYHOUR=1;BYMINUTE=30;UNTIL=20261108T013000", wall(2026, 10, 25, 1, 30), ny)
	require.NoError(t, err)
	require.Equal(t, []Occurrence{
		{wall(2026, 10, 25, 1, 30), utc(2026, 10, 25, 5, 30)}, // EDT
		{wall(2026, 11, 1, 1, 30), utc(2026, 11, 1, 5, 30)},   // twice: the first, EDT
		{wall(2026, 11, 8, 1, 30), utc(2026, 11, 8, 6, 30)},   // EST; UNTIL is inclusive
	}, r.next(time.Time{}, 10))
}

// BYMONTHDAY=31 skips the months without a 31st (RFC 5545); COUNT counts
// occurrences, UNTIL in UTC bounds the instants.
func TestMonthlyOn31stSkipsShortMonths(t *testing.T) {
	t.Parallel()
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	r, err := parseRecurrence("FREQ=MONTHLY;BYMONTHDAY=31;COUNT=4", wall(2026, 1, 31, 9, 0), tokyo)
	require.NoError(t, err)
	var months []time.Month
	for _, o := range r.next(time.Time{}, 10) {
		months = append(months, o.Local.Month())
		require.Equal(t, o.Local.Add(-9*time.Hour), o.At)
	}
	require.Equal(t, []time.Month{1, 3, 5, 7}, months)

	r, err = parseRecurrence("FREQ=MONTHLY;BYMONTHDAY=31;UNTIL=20260731T000000Z", wall(2026, 1, 31, 9, 0), tokyo)
	require.NoError(t, err)
	got := r.next(time.Time{}, 10)
	require.Len(t, got, 4, "July 31st 09:00 JST is 00:00 UTC: included")
	r, err = parseRecurrence("FREQ=MONTHLY;BYMONTHDAY=31;UNTIL=20260730T235959Z", wall(2026, 1, 31, 9, 0), tokyo)
	require.NoError(t, err)
	require.Len(t, r.next(time.Time{}, 10), 3)
	r, err = parseRecurrence("FREQ=MONTHLY;BYMONTHDAY=31;UNTIL=20260531", wall(2026, 1, 31, 9, 0), tokyo)
	require.NoError(t, err)
	require.Len(t, r.next(time.Time{}, 10), 3, "a date UNTIL includes its day")
}

func TestRulesOutsideTheSupportedSetAreRefusedByName(t *testing.T) {
	t.Parallel()
	loc := time.UTC
	start := wall(2026, 1, 1, 9, 0)
	for rule, want := range map[string]string{
		"FREQ=HOURLY":                       "FREQ=HOURLY is not supported",
		"FREQ=DAILY;BYEASTER=0":             "part BYEASTER is not supported",
		"FREQ=YEARLY;BYWEEKNO=3":            "part BYWEEKNO is not supported",
		"FREQ=DAILY;DTSTART=20260101":       "part DTSTART is not supported",
		"BYDAY=MO":                          "FREQ is required",
		"FREQ=DAILY;COUNT=0":                "COUNT must be an integer",
		"FREQ=DAILY;COUNT=2;UNTIL=20270101": "COUNT and UNTIL",
		"FREQ=DAILY;;":                      "is not NAME=VALUE",
		"FREQ=DAILY;BYDAY=XX":               "BYDAY=XX: undefined weekday",
		"FREQ=DAILY;UNTIL=2026":             "UNTIL",
		"FREQ=DAILY;FREQ=WEEKLY":            "more than once",
	} {
		_, err := parseRecurrence(rule, start, loc)
		var ve *ValidationError
		require.ErrorAsf(t, err, &ve, "%s", rule)
		require.Equal(t, "rrule", ve.Field)
		require.Containsf(t, ve.Reason, want, "%s", rule)
	}
}

func TestRuleChecksRefuseNoOccurrenceAndTooDense(t *testing.T) {
	t.Parallel()
	start := wall(2026, 1, 1, 9, 0)
	r, err := parseRecurrence("FREQ=DAILY;COUNT=3", start, time.UTC)
	require.NoError(t, err)
	requireReason := func(err error, want string) {
		t.Helper()
		var ve *ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, "rrule", ve.Field)
		require.Contains(t, ve.Reason, want)
	}
	requireReason(r.check(utc(2026, 2, 1, 0, 0), 7*24*time.Hour, 1000, maxRuleScan), "no occurrence")
	require.NoError(t, r.check(utc(2026, 1, 2, 0, 0), 7*24*time.Hour, 1000, maxRuleScan))

	r, err = parseRecurrence("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", start, time.UTC)
	require.NoError(t, err)
	requireReason(r.check(start, 7*24*time.Hour, 1000, maxRuleScan), "no occurrence")

	// 24 × 60 a day: 10,080 a week, over the limit; 24 a day is not.
	r, err = parseRecurrence("FREQ=DAILY;BYHOUR=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23;"+
		"BYMINUTE=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,"+
		"40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59", start, time.UTC)
	require.NoError(t, err)
	requireReason(r.check(start, 7*24*time.Hour, 1000, maxRuleScan), "more than 1000 occurrences")
	r, err = parseRecurrence("FREQ=DAILY;BYHOUR=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23", start, time.UTC)
	require.NoError(t, err)
	require.NoError(t, r.check(start, 7*24*time.Hour, 1000, maxRuleScan))
	requireReason(r.check(start, 7*24*time.Hour, 100, maxRuleScan), "more than 100 occurrences")
}

func TestISODurations(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]time.Duration{
		"PT2H": 2 * time.Hour, "P1D": 24 * time.Hour, "P1W": 7 * 24 * time.Hour, "PT30M": 30 * time.Minute,
		"P1DT12H": 36 * time.Hour, "PT90S": 90 * time.Second, "pt1h30m": 90 * time.Minute,
	} {
		got, err := parseISODuration(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "P", "PT", "2H", "PT2", "P1M", "P1Y", "PT1H2H", "PT1M1H", "P1DT", "P1.5D", "PTH"} {
		_, err := parseISODuration(s)
		require.Error(t, err, s)
	}
}

// A start far before now would make every check expand the rule through
// all the occurrences in between; such a start is refused, naming start,
// after a bounded expansion, whether the rule is dense or not.
func TestRuleCheckRefusesAStartSoFarBackThatExpandingItIsUnbounded(t *testing.T) {
	t.Parallel()
	now := utc(2026, 12, 5, 12, 0)
	hours := "BYHOUR=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23"
	minutes := "BYMINUTE=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39," +
		"40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59"
	for _, rule := range []string{"FREQ=DAILY;" + hours, "FREQ=DAILY;" + hours + ";" + minutes} {
		r, err := parseRecurrence(rule, wall(1740, 1, 1, 0, 0), time.UTC)
		require.NoError(t, err)
		err = r.check(now, 7*24*time.Hour, 1000, maxOccurrencesBefore)
		var ve *ValidationError
		require.ErrorAsf(t, err, &ve, "%s", rule)
		require.Equal(t, "start", ve.Field)
		require.Contains(t, ve.Reason, "too far before now")
		require.LessOrEqualf(t, r.drawn, maxOccurrencesBefore+1, "%s: wall times expanded", rule)
	}

	// A recent start, and a far one with few occurrences before now, are fine.
	r, err := parseRecurrence("FREQ=DAILY;"+hours, wall(2026, 1, 1, 0, 0), time.UTC)
	require.NoError(t, err)
	require.NoError(t, r.check(now, 7*24*time.Hour, 1000, maxOccurrencesBefore))
	r, err = parseRecurrence("FREQ=WEEKLY", wall(1900, 1, 1, 9, 0), time.UTC)
	require.NoError(t, err)
	require.NoError(t, r.check(now, 7*24*time.Hour, 1000, maxOccurrencesBefore), "a weekly series from 1900: a few thousand occurrences before now")
}

// A duration too long for a time.Duration is refused, not wrapped around:
// 30,501 weeks (585 years) would otherwise read as about 72 hours, and pass
// as a series' publishWithin while the series shows 30,501 weeks.
func TestISODurationTooLongToHoldIsRefused(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"P30501W", "P213504D", "PT5124096H", "P15251W", "P999999999W", "P106751DT23H47M17S", "P15250WT999999999H"} {
		d, err := parseISODuration(s)
		require.Errorf(t, err, "%s read as %s", s, d)
	}
	d, err := parseISODuration("P15250W")
	require.NoError(t, err, "15,250 weeks still fit")
	require.Equal(t, 15250*7*24*time.Hour, d)
	d, err = parseISODuration("P106751DT23H47M16S")
	require.NoError(t, err)
	require.Equal(t, 9223372036*time.Second, d)

	s := &Series{Title: "t", Content: "c", TimeZone: "UTC", StartLocal: wall(2030, 1, 1, 9, 0), RRule: "FREQ=DAILY"}
	within := "P30501W"
	s.PublishWithin = &within
	_, err = compileSeries(s)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "publishWithin", ve.Field)
}
