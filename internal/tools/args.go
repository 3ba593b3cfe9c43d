package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// jsonSpace is the whitespace JSON allows between tokens.
const jsonSpace = " \t\r\n"

// paramType is the JSON type of a tool argument.
type paramType string

const (
	typeString  paramType = "string"
	typeInteger paramType = "integer"
	typeBoolean paramType = "boolean"
)

// param declares one argument: both the JSON Schema sent to the model and the
// strict decoder are built from it, so they cannot disagree.
type param struct {
	Name     string
	Type     paramType
	Desc     string
	Required bool
	Min, Max int64 // integers only; both 0 means unbounded
}

// ArgError says a tool call's arguments are malformed.
type ArgError struct {
	Tool string
	Msg  string
}

func (e *ArgError) Error() string { return e.Tool + ": invalid arguments: " + e.Msg }

// schema returns the JSON Schema of params.
func schema(params []param) json.RawMessage {
	props := map[string]any{}
	req := []string{}
	for _, p := range params {
		prop := map[string]any{"type": string(p.Type), "description": p.Desc}
		if p.Type == typeInteger && (p.Min != 0 || p.Max != 0) {
			prop["minimum"] = p.Min
			prop["maximum"] = p.Max
		}
		props[p.Name] = prop
		if p.Required {
			req = append(req, p.Name)
		}
	}
	b, err := json.Marshal(map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             req,
		"additionalProperties": false,
	})
	if err != nil {
		panic(err) // maps of strings and numbers always marshal
	}
	return b
}

// decodeArgs decodes raw, which must be a JSON object whose keys are exactly
// among params (case-sensitive) with values of the declared types, every
// required one present and not null, into dst (a pointer to a struct whose
// json tags name the params).
func decodeArgs(tool string, params []param, raw json.RawMessage, dst any) error {
	bad := func(format string, a ...any) error {
		return &ArgError{Tool: tool, Msg: fmt.Sprintf(format, a...)}
	}
	raw = bytes.Trim(raw, jsonSpace) // not bytes.TrimSpace: \v is no JSON space
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	if raw[0] != '{' {
		return bad("want a JSON object, got %s", describe(raw))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return bad("not a valid JSON object: %v", err)
	}
	known := map[string]param{}
	for _, p := range params {
		known[p.Name] = p
	}
	var unknown []string
	for k := range m {
		if _, ok := known[k]; !ok {
			unknown = append(unknown, fmt.Sprintf("%q", k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return bad("unknown argument(s) %s; allowed: %s", strings.Join(unknown, ", "), paramNames(params))
	}
	clean := map[string]json.RawMessage{}
	for _, p := range params {
		v, ok := m[p.Name]
		if ok && string(bytes.Trim(v, jsonSpace)) == "null" {
			ok = false
		}
		if !ok {
			if p.Required {
				return bad("missing required argument %q (%s)", p.Name, p.Type)
			}
			continue
		}
		v, err := checkType(p, v)
		if err != nil {
			return bad("argument %q: %v", p.Name, err)
		}
		clean[p.Name] = v
	}
	b, err := json.Marshal(clean)
	if err != nil {
		return bad("%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return bad("%v", err)
	}
	return nil
}

// checkType checks v against p's type and returns it normalised (an
// integer written as 1e2 or 3.0 becomes 100 or 3).
func checkType(p param, v json.RawMessage) (json.RawMessage, error) {
	v = bytes.Trim(v, jsonSpace)
	switch p.Type {
	case typeString:
		var s string
		if v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return nil, fmt.Errorf("want a string, got %s", describe(v))
		}
	case typeBoolean:
		if s := string(v); s != "true" && s != "false" {
			return nil, fmt.Errorf("want true or false, got %s", describe(v))
		}
	case typeInteger:
		var f float64
		if json.Unmarshal(v, &f) != nil || v[0] == '"' {
			return nil, fmt.Errorf("want an integer, got %s", describe(v))
		}
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return nil, fmt.Errorf("want an integer, got %s", clip(string(v)))
		}
		if p.Min != 0 || p.Max != 0 {
			if int64(f) < p.Min || int64(f) > p.Max {
				return nil, fmt.Errorf("%s is out of range [%d, %d]", clip(string(v)), p.Min, p.Max)
			}
		}
		return json.RawMessage(strconv.FormatInt(int64(f), 10)), nil
	}
	return v, nil
}

// describe names the JSON type of v for an error message.
func describe(v []byte) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

func paramNames(params []param) string {
	n := make([]string, len(params))
	for i, p := range params {
		n[i] = p.Name
	}
	return strings.Join(n, ", ")
}
