package main

import (
	"syscall"

	"go.uber.org/zap"
)

// raiseFileLimit raises the soft limit of open files (RLIMIT_NOFILE) to
// the hard one and returns the limit in force, 0 when it cannot be read.
// Every client and backend connection takes a file: a soft limit below
// the hard one would only make the process run out of them sooner. Go's
// os package raises it at start as well; doing it here makes the limit
// the data plane checks its connection caps against (proxy.Options
// FileLimit) the one in force, and a failure to raise it visible.
func raiseFileLimit(log *zap.Logger) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("reading the open files limit", zap.Error(err))
		return 0
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			log.Warn("raising the open files limit to its hard limit", zap.Uint64("soft", lim.Cur), zap.Uint64("hard", lim.Max), zap.Error(err))
			return lim.Cur
		}
		lim = raised
	}
	log.Info("open files limit", zap.Uint64("limit", lim.Cur))
	return lim.Cur
}
