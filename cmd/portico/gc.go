package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// gcFlags are the garbage collector's two settings: the memory limit the
// heap grows to before the collector works harder (GOMEMLIMIT's), and how
// much the heap may grow over what is live between collections (GOGC's).
// A flag left out keeps what the environment variable says, and the
// runtime's default without either.
type gcFlags struct {
	memoryLimit string
	gcPercent   string
}

func newGCFlags(fs *flag.FlagSet) *gcFlags {
	g := &gcFlags{}
	fs.StringVar(&g.memoryLimit, "memory-limit", "", `soft limit of the process's memory, such as 512MiB or 2GiB ("off": none): past it the garbage collector runs as often as it must to stay below (default: $GOMEMLIMIT, else off)`)
	fs.StringVar(&g.gcPercent, "gc-percent", "", `heap growth over the live heap before a collection, in percent ("off": collect only near --memory-limit); higher trades memory for CPU (default: $GOGC, else 100)`)
	return g
}

// gcSettings are what the flags resolve to: a memory limit in bytes
// (math.MaxInt64: none) and a GC percentage (negative: off).
type gcSettings struct {
	memoryLimit int64
	gcPercent   int
}

// resolve checks the flags and reads the environment for those left out.
func (g *gcFlags) resolve(getenv func(string) string) (gcSettings, error) {
	s := gcSettings{memoryLimit: math.MaxInt64, gcPercent: 100}
	limit, percent := g.memoryLimit, g.gcPercent
	if limit == "" {
		limit = getenv("GOMEMLIMIT")
	}
	if percent == "" {
		percent = getenv("GOGC")
	}
	var err error
	if limit != "" {
		if s.memoryLimit, err = parseMemoryLimit(limit); err != nil {
			return s, fmt.Errorf("--memory-limit: %w", err)
		}
	}
	switch {
	case percent == "":
	case percent == "off":
		s.gcPercent = -1
	default:
		if s.gcPercent, err = strconv.Atoi(percent); err != nil || s.gcPercent <= 0 {
			return s, fmt.Errorf("--gc-percent: %q is not a positive whole number or off", percent)
		}
	}
	if s.gcPercent < 0 && s.memoryLimit == math.MaxInt64 {
		return s, errors.New("--gc-percent off needs a --memory-limit: without either the heap would grow without bound")
	}
	return s, nil
}

// apply sets s in the runtime and logs it.
func (s gcSettings) apply(log *zap.Logger) {
	debug.SetMemoryLimit(s.memoryLimit)
	debug.SetGCPercent(s.gcPercent)
	limit := "off"
	if s.memoryLimit != math.MaxInt64 {
		limit = strconv.FormatInt(s.memoryLimit, 10)
	}
	log.Info("garbage collection", zap.String("memoryLimitBytes", limit), zap.Int("gcPercent", s.gcPercent))
}

// parseMemoryLimit reads a size as GOMEMLIMIT writes it: a whole number of
// bytes with an optional unit B, KiB, MiB, GiB or TiB, or "off".
func parseMemoryLimit(v string) (int64, error) {
	if v == "off" {
		return math.MaxInt64, nil
	}
	num, unit := v, int64(1)
	for _, u := range []struct {
		suffix string
		scale  int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			num, unit = n, u.scale
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("%q is not a size such as 512MiB, 2GiB or 1073741824 (bytes), or off", v)
	}
	return n * unit, nil
}

// environ is os.Getenv, for resolve.
func environ(name string) string { return os.Getenv(name) }
