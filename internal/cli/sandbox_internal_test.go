package cli

import (
	"reflect"
	"testing"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// TestBuiltinSandboxDefaults: the front end's defaults (it links no policy
// package) are the default policy's sandbox section.
func TestBuiltinSandboxDefaults(t *testing.T) {
	if got, want := sandboxDefaults(policy.Default()), sandboxcli.BuiltinDefaults; !reflect.DeepEqual(got, want) {
		t.Errorf("sandboxcli.BuiltinDefaults = %+v, the default policy's sandbox section is %+v", want, got)
	}
}
