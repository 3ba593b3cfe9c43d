package tools_test

import (
	"os"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// executorPath is the airlock-exec binary built for these tests.
var executorPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m, &executorPath)) }
