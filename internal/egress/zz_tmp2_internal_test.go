package egress

import (
	"syscall"
	"time"
)

type rusage syscall.Rusage

func getrusage(r *rusage) { _ = syscall.Getrusage(syscall.RUSAGE_SELF, (*syscall.Rusage)(r)) }
func (r *rusage) total() time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
