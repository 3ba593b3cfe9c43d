package event

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Bounds of a run's metadata (RunCreated.Metadata): the client's own
// labels, kept in the run's first event.
const (
	// MaxMetadataKeys bounds how many keys a run's metadata has.
	MaxMetadataKeys = 32
	// MaxMetadataKeyLen bounds a key, in bytes.
	MaxMetadataKeyLen = 64
	// MaxMetadataValueLen bounds a value, in bytes.
	MaxMetadataValueLen = 1024
)

// CheckMetadata reports the first problem of a run's metadata: more than
// MaxMetadataKeys keys, a key that is not 1 to MaxMetadataKeyLen of A-Z,
// a-z, 0-9, '_', '.' and '-' starting with a letter or digit, or a value
// that is not UTF-8 text of at most MaxMetadataValueLen bytes without NUL
// (which the stores' text columns cannot all hold). Its text names the
// key, never the value.
func CheckMetadata(md map[string]string) error {
	if len(md) > MaxMetadataKeys {
		return fmt.Errorf("event: metadata: %d keys, at most %d", len(md), MaxMetadataKeys)
	}
	for k, v := range md {
		if !metadataKey(k) {
			return fmt.Errorf("event: metadata key %q: want 1 to %d of A-Z, a-z, 0-9, '_', '.', '-', starting with a letter or digit",
				truncate(k), MaxMetadataKeyLen)
		}
		if len(v) > MaxMetadataValueLen || !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("event: metadata %s: want UTF-8 text without NUL of at most %d bytes", k, MaxMetadataValueLen)
		}
	}
	return nil
}

func metadataKey(k string) bool {
	if k == "" || len(k) > MaxMetadataKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}
