package server

import (
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/api"
)

// TestOpenAPIMatchesRoutes: the committed OpenAPI document describes
// every route the server serves, with the scopes it enforces, and nothing
// else.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi = %q, want 3.x", doc.OpenAPI)
	}
	s := &Server{}
	served := map[string]route{}
	rest := regexp.MustCompile(`\{(\w+)\.\.\.\}`)
	for _, rt := range s.table() {
		served[strings.ToLower(rt.method)+" "+rest.ReplaceAllString(rt.pattern, "{$1}")] = rt
	}
	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for m, raw := range ops {
			if m == "parameters" {
				continue
			}
			key := m + " " + p
			documented[key] = true
			rt, ok := served[key]
			if !ok {
				t.Errorf("openapi.json documents %s, which the server does not serve", key)
				continue
			}
			var op struct {
				Security *[]any   `json:"security"`
				Scopes   []string `json:"x-airlock-scopes"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			public := op.Security != nil && len(*op.Security) == 0
			if public != rt.public {
				t.Errorf("%s: documented public=%v, served public=%v", key, public, rt.public)
			}
			if !rt.public && !slices.Equal(op.Scopes, rt.scopes) && !(len(op.Scopes) == 0 && len(rt.scopes) == 0) {
				t.Errorf("%s: documented scopes %v, enforced %v", key, op.Scopes, rt.scopes)
			}
		}
	}
	for key := range served {
		if !documented[key] {
			t.Errorf("the server serves %s, which openapi.json does not document", key)
		}
	}
}

// TestOpenAPISchemasMatchTypes: each schema of the OpenAPI document has
// exactly the JSON fields of the internal/api type the server writes or
// reads for it.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	for schema, v := range map[string]any{
		"Error": api.ErrorBody{}, "Run": api.Run{}, "RunList": api.RunList{}, "CreateRunRequest": api.CreateRunRequest{},
		"Verify": api.VerifySpec{}, "ForkRequest": api.ForkRequest{}, "ActionRequest": api.ActionRequest{},
		"DecisionRequest": api.DecisionRequest{}, "Decision": api.Decision{}, "Upload": api.Upload{}, "EventPage": api.EventPage{},
		"Artifact": api.Artifact{}, "Approval": api.Approval{}, "PolicyVersion": api.PolicyVersion{}, "PolicyCheck": api.PolicyCheck{},
		"Credits": api.Credits{}, "LedgerEntry": api.LedgerEntry{}, "GrantRequest": api.GrantRequest{}, "Grant": api.Grant{},
		"Secret": api.Secret{}, "SecretList": api.SecretList{}, "SecretRequest": api.SecretRequest{},
		"Template": api.Template{}, "Deletion": api.Deletion{}, "DeletionList": api.DeletionList{}, "Sandbox": api.Sandbox{}, "SandboxPorts": api.SandboxPorts{}, "SandboxList": api.SandboxList{}, "SandboxExposure": api.SandboxExposure{}, "ExposureList": api.ExposureList{}, "SandboxEvent": api.SandboxEvent{}, "SandboxEventList": api.SandboxEventList{},
	} {
		s, ok := doc.Components.Schemas[schema]
		if !ok {
			t.Errorf("openapi.json has no schema %s", schema)
			continue
		}
		var documented []string
		for p := range s.Properties {
			documented = append(documented, p)
		}
		var fields []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			fields = append(fields, name)
		}
		slices.Sort(documented)
		slices.Sort(fields)
		if !slices.Equal(documented, fields) {
			t.Errorf("schema %s documents %v; %T has %v", schema, documented, v, fields)
		}
	}
}
