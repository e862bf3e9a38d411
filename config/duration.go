package config

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// ParseDuration parses a Go duration ("90s", "1h30m") that may also use the
// unit "d" for 24 hours ("90d", "1d12h", "1.5d"). Negative durations are
// refused: every duration in the file is a length of time.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("empty duration")
	}
	if strings.HasPrefix(s, "-") {
		return 0, errors.New("negative duration")
	}
	if !strings.Contains(s, "d") {
		return time.ParseDuration(s)
	}
	// Split off every "<number>d" component; the rest is Go syntax.
	var (
		days float64
		rest strings.Builder
	)
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
			j++
		}
		if j == i {
			return 0, errors.New("expected a number")
		}
		num := s[i:j]
		k := j
		for k < len(s) && (s[k] < '0' || s[k] > '9') && s[k] != '.' {
			k++
		}
		unit := s[j:k]
		if unit == "d" {
			v, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, errors.New("bad number of days")
			}
			days += v
		} else {
			rest.WriteString(s[i:k])
		}
		i = k
	}
	const maxDays = float64(1<<63-1) / float64(24*time.Hour)
	if days > maxDays {
		return 0, errors.New("out of range")
	}
	d := time.Duration(days * float64(24*time.Hour))
	if rest.Len() > 0 {
		r, err := time.ParseDuration(rest.String())
		if err != nil {
			return 0, err
		}
		if r > 1<<63-1-d {
			return 0, errors.New("out of range")
		}
		d += r
	}
	return d, nil
}
