package host

import (
	"strings"
	"testing"
	"time"
)

func TestRetentionRules(t *testing.T) {
	rr := RetentionRules{
		Default: Retention{Events: 720 * time.Hour},
		Tenants: map[string]Retention{"acme": {Events: time.Hour, Runs: 2 * time.Hour}},
	}
	if got := rr.For("acme"); got.Events != time.Hour || got.Runs != 2*time.Hour {
		t.Errorf("For(acme) = %+v, want its own rule", got)
	}
	if got := rr.For("other"); got.Events != 720*time.Hour || got.Runs != 0 {
		t.Errorf("For(other) = %+v, want the default", got)
	}
	tests := []struct {
		name string
		rr   RetentionRules
		want string // in the error; "" for none
	}{
		{"zero", RetentionRules{}, ""},
		{"ok", rr, ""},
		{"negative", RetentionRules{Default: Retention{Events: -time.Hour}}, "default: durations must not be negative"},
		{"runs before events", RetentionRules{Tenants: map[string]Retention{"acme": {Events: 2 * time.Hour, Runs: time.Hour}}}, "tenant acme: runs 1h0m0s is shorter than events 2h0m0s"},
		{"every too often", RetentionRules{Every: time.Second}, "every 1s: want 0 (never) or 1m to 168h"},
		{"negative audit", RetentionRules{Tenants: map[string]Retention{"acme": {Audit: -time.Hour}}}, "tenant acme: durations must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rr.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}
