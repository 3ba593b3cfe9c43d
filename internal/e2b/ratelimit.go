package e2b

import (
	"strconv"
	"time"

	"github.com/airlockrun/airlock/internal/ratelimit"
)

// retryAfter is a wait as Retry-After's whole seconds, at least 1: the
// SDK retries a 429 whose Retry-After is an integer.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(ratelimit.RetryAfter(d))
}
