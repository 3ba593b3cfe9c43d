package report

import (
	"encoding/json"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/secret/scan"
)

// Redact replaces what sc finds in the text of ev (a sandbox's event, as
// in a tool's result) by its marker, and sets ev.Secrets to the ids of
// the rules that found something. Data that holds a finding is kept as
// the JSON string of its redacted text (a marker may not keep the JSON
// around it whole). A nil sc (scanning off) changes nothing.
func Redact(sc *scan.Scanner, ev *event.SandboxEvent) {
	var all []scan.Finding
	for _, s := range []*string{&ev.Message, &ev.Name, &ev.Unit, &ev.Path} {
		var fs []scan.Finding
		*s, fs = sc.Redact(*s)
		all = append(all, fs...)
	}
	if len(ev.Data) > 0 {
		red, fs := sc.Redact(string(ev.Data))
		if len(fs) > 0 {
			b, err := json.Marshal(red)
			if err != nil {
				b = []byte(`"[redacted]"`)
			}
			ev.Data = b
			all = append(all, fs...)
		}
	}
	ev.Secrets = scan.IDs(all)
}
