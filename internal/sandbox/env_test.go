package sandbox_test

import (
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
)

func TestCheckEnv(t *testing.T) {
	tests := []struct {
		env      []string
		reserved []string
		bad      []string // what the error names, one each; none: nil
	}{
		{[]string{"A=1", "PATH=/x", "HOME=/h", "EMPTY="}, nil, nil},
		{[]string{"A"}, nil, []string{`"A": want KEY=VALUE`}},
		{[]string{"=1"}, nil, []string{`"=1": want KEY=VALUE`}},
		{[]string{"HTTP_PROXY=x", "https_proxy=x", "SSL_CERT_FILE=x"}, nil, []string{"HTTP_PROXY:", "https_proxy:", "SSL_CERT_FILE:"}},
		{[]string{"TOKEN=x", "OTHER=y"}, []string{"TOKEN"}, []string{"TOKEN: airlock sets it"}},
	}
	for _, tt := range tests {
		err := sandbox.CheckEnv(tt.env, tt.reserved...)
		if (err == nil) != (len(tt.bad) == 0) {
			t.Errorf("CheckEnv(%q, %q) = %v, want an error naming %q", tt.env, tt.reserved, err, tt.bad)
			continue
		}
		for _, b := range tt.bad {
			if !strings.Contains(err.Error(), b) {
				t.Errorf("CheckEnv(%q, %q) = %v, want it to say %q", tt.env, tt.reserved, err, b)
			}
		}
	}
}
