package ttl

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseTTLSetting parses the text of current_setting('ttlproxy.ttl', true)
// into a session lifetime (Session.TTL). "" (and NULL read as "" or "null")
// mean no override and return nil. Accepted: Go durations ("90s", "1h30m"),
// days ("7d", "1.5d"), PostgreSQL interval text with units ("10 minutes",
// "1 day 02:00:00", "2 hours 30 mins", "@ 1 day", "1 week", a bare number of
// seconds), clock forms ("00:10:00", "10:30" as hours:minutes, "-00:10:00")
// and ISO 8601 ("PT10M", "P1DT2H"). Months and years are rejected: their
// length varies. A negative result is an error; 0 means no stamping.
func ParseTTLSetting(value string) (*time.Duration, error) {
	d, err := ParseTTLValue(value)
	if err != nil {
		return nil, fmt.Errorf("ttlproxy.ttl %q: %w", value, err)
	}
	return d, nil
}

// ParseTTLValue is ParseTTLSetting with errors that do not repeat the value,
// for callers that name the value themselves.
func ParseTTLValue(value string) (*time.Duration, error) {
	v := strings.TrimSpace(value)
	if v == "" || strings.EqualFold(v, "null") {
		return nil, nil
	}
	d, err := parseLifetime(v)
	if err != nil {
		return nil, err
	}
	if d < 0 {
		return nil, errors.New("negative lifetime")
	}
	return &d, nil
}

func parseLifetime(v string) (time.Duration, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	low := strings.ToLower(v)
	if strings.HasPrefix(low, "p") {
		return parseISOInterval(low)
	}
	low = strings.TrimSpace(strings.TrimPrefix(low, "@"))
	neg := false
	if rest, ok := strings.CutSuffix(low, " ago"); ok {
		neg, low = true, strings.TrimSpace(rest)
	}
	var total float64 // seconds
	fields := splitInterval(low)
	if len(fields) == 0 {
		return 0, fmt.Errorf("empty interval")
	}
	bare := false // the field before was a number without a unit
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.Contains(f, ":") {
			s, err := parseClock(f)
			if err != nil {
				return 0, err
			}
			total += s
			bare = false
			continue
		}
		num, unit := splitNumber(f)
		if num == "" {
			if _, err := unitSeconds(f); bare && err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("expected a number at %q", f)
		}
		n, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("bad number %q", num)
		}
		if unit == "" && i+1 < len(fields) && isUnit(fields[i+1]) {
			i++
			unit = fields[i]
		}
		bare = unit == ""
		per, err := unitSeconds(unit)
		if err != nil {
			return 0, err
		}
		total += n * per
	}
	if neg {
		total = -total
	}
	return seconds(total)
}

// seconds converts a number of seconds to a Duration, checking its range.
func seconds(total float64) (time.Duration, error) {
	if math.IsNaN(total) || math.Abs(total) > float64(math.MaxInt64/int64(time.Second)) {
		return 0, fmt.Errorf("interval out of range")
	}
	return time.Duration(math.Round(total * float64(time.Second))), nil
}

// splitInterval splits on spaces and commas.
func splitInterval(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' })
}

// splitNumber splits "10min" into "10" and "min"; a sign belongs to the
// number.
func splitNumber(f string) (string, string) {
	i := 0
	if i < len(f) && (f[i] == '+' || f[i] == '-') {
		i++
	}
	for i < len(f) && (f[i] == '.' || ('0' <= f[i] && f[i] <= '9')) {
		i++
	}
	if i == 0 || (i == 1 && (f[0] == '+' || f[0] == '-')) {
		return "", f
	}
	return f[:i], f[i:]
}

func isUnit(f string) bool {
	_, err := unitSeconds(f)
	return err == nil && f != ""
}

// unitSeconds returns the length of a PostgreSQL interval unit in seconds.
func unitSeconds(u string) (float64, error) {
	switch u {
	case "", "s", "sec", "secs", "second", "seconds":
		return 1, nil
	case "us", "usec", "usecs", "microsecond", "microseconds":
		return 1e-6, nil
	case "ms", "msec", "msecs", "millisecond", "milliseconds":
		return 1e-3, nil
	case "m", "min", "mins", "minute", "minutes":
		return 60, nil
	case "h", "hr", "hrs", "hour", "hours":
		return 3600, nil
	case "d", "day", "days":
		return 86400, nil
	case "w", "week", "weeks":
		return 7 * 86400, nil
	case "mon", "mons", "month", "months", "y", "yr", "yrs", "year", "years":
		return 0, fmt.Errorf("unit %q has no fixed length", u)
	}
	return 0, fmt.Errorf("unknown unit %q", u)
}

// parseClock parses [-]h:mm[:ss[.frac]] (PostgreSQL reads h:mm as hours and
// minutes).
func parseClock(f string) (float64, error) {
	neg := strings.HasPrefix(f, "-")
	f = strings.TrimLeft(f, "+-")
	parts := strings.Split(f, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, fmt.Errorf("bad time %q", f)
	}
	var s float64
	for i, p := range parts {
		n, err := strconv.ParseFloat(p, 64)
		if err != nil || n < 0 || (i < len(parts)-1 && strings.Contains(p, ".")) {
			return 0, fmt.Errorf("bad time %q", f)
		}
		s += n * []float64{3600, 60, 1}[i]
	}
	if neg {
		s = -s
	}
	return s, nil
}

// parseISOInterval parses ISO 8601 durations without years and months:
// P[nW][nD][T[nH][nM][nS]].
func parseISOInterval(s string) (time.Duration, error) {
	rest := s[1:]
	var total float64
	inTime, parts := false, 0
	if rest == "" {
		return 0, fmt.Errorf("empty ISO 8601 interval")
	}
	for rest != "" {
		if rest[0] == 't' {
			inTime = true
			rest = rest[1:]
			continue
		}
		num, after := splitNumber(rest)
		if num == "" || after == "" {
			return 0, fmt.Errorf("bad ISO 8601 interval %q", s)
		}
		n, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("bad ISO 8601 interval %q", s)
		}
		var per float64
		switch u := after[0]; {
		case u == 'w' && !inTime:
			per = 7 * 86400
		case u == 'd' && !inTime:
			per = 86400
		case u == 'h' && inTime:
			per = 3600
		case u == 'm' && inTime:
			per = 60
		case u == 's' && inTime:
			per = 1
		case u == 'y' || u == 'm':
			return 0, fmt.Errorf("ISO 8601 years and months have no fixed length")
		default:
			return 0, fmt.Errorf("bad ISO 8601 interval %q", s)
		}
		total += n * per
		parts++
		rest = after[1:]
	}
	if parts == 0 {
		return 0, fmt.Errorf("empty ISO 8601 interval")
	}
	return seconds(total)
}
