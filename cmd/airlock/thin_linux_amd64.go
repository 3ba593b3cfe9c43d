//go:build airlock_thin

package main

// The pre-runtime thin client for a warm sandbox run: linked only in the
// front end scripts/build-thin.sh builds, which also makes it the entry.
import _ "github.com/airlockrun/airlock/internal/thinentry"
