package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// MaxEncodedSize is the largest JSON text Decode accepts: room for a
// maximal payload with generous formatting.
const MaxEncodedSize = 2*MaxPayloadSize + 4096

// ErrDecode is wrapped by every Decode error.
var ErrDecode = errors.New("event: decode")

// JSON field names of an event, in MarshalJSON order.
var fieldNames = [...]string{"run_id", "seq", "type", "time", "payload", "prev_hash", "hash"}

// Decode parses one event in the JSON form MarshalJSON writes, strictly: a
// single object with exactly the fields run_id, seq, type, time, payload,
// prev_hash and hash (no other, none twice, none null), nothing after it,
// and field values that pass Event.Validate. Insignificant space inside the
// payload is removed and HTML characters in it are escaped, which leaves a
// stored payload as it was, so a log that went through a JSON pretty-printer
// still verifies; any other change to a payload shows up in Verify.
//
// Decode does not check the hash chain; Verify does.
func Decode(b []byte) (Event, error) {
	var e Event
	if len(b) > MaxEncodedSize {
		return e, fmt.Errorf("%w: %d bytes, limit %d", ErrDecode, len(b), MaxEncodedSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return e, fmt.Errorf("%w: not a JSON object", ErrDecode)
	}
	var seen [len(fieldNames)]bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return e, fmt.Errorf("%w: %w", ErrDecode, err)
		}
		key, _ := tok.(string)
		i := fieldIndex(key)
		if i < 0 {
			return e, fmt.Errorf("%w: unknown field %q", ErrDecode, truncate(key))
		}
		if seen[i] {
			return e, fmt.Errorf("%w: field %q appears twice", ErrDecode, key)
		}
		seen[i] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return e, fmt.Errorf("%w: field %q: %w", ErrDecode, key, err)
		}
		if bytes.Equal(raw, []byte("null")) {
			return e, fmt.Errorf("%w: field %q is null", ErrDecode, key)
		}
		if err := decodeField(&e, key, raw); err != nil {
			return e, fmt.Errorf("%w: field %q: %w", ErrDecode, key, err)
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return e, fmt.Errorf("%w: unterminated object", ErrDecode)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return e, fmt.Errorf("%w: data after the event", ErrDecode)
	}
	for i, ok := range seen {
		if !ok {
			return e, fmt.Errorf("%w: field %q is missing", ErrDecode, fieldNames[i])
		}
	}
	if err := e.Validate(); err != nil {
		return e, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	return e, nil
}

func fieldIndex(key string) int {
	for i, f := range fieldNames {
		if f == key {
			return i
		}
	}
	return -1
}

func decodeField(e *Event, key string, raw json.RawMessage) error {
	switch key {
	case "run_id":
		return json.Unmarshal(raw, &e.RunID)
	case "seq":
		return json.Unmarshal(raw, &e.Seq)
	case "type":
		return json.Unmarshal(raw, &e.Type)
	case "time":
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return errors.New("not an RFC 3339 time")
		}
		e.Time = t.UTC()
		return nil
	case "payload":
		if raw[0] != '{' {
			return errors.New("not a JSON object")
		}
		p, err := compactPayload(raw)
		if err != nil {
			return err
		}
		e.Payload = p
		return nil
	case "prev_hash":
		return unmarshalHash(raw, &e.PrevHash)
	case "hash":
		return unmarshalHash(raw, &e.Hash)
	}
	return errors.New("unknown field")
}

func unmarshalHash(raw json.RawMessage, h *Hash) error {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	v, err := ParseHash(s)
	if err != nil {
		return err
	}
	*h = v
	return nil
}
