package interp

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"
)

// Limits bound what Decode keeps of a server's answer, which the sandbox
// wrote and the host must not trust: zero fields take the defaults.
type Limits struct {
	// Line is the longest NDJSON line read (an image's is long); a longer
	// one is skipped and counted in Execution.Dropped. Default 16 MiB.
	Line int
	// Text is the most bytes of stdout, of stderr, of an error's
	// traceback and of a result's text kept (the head). Default 1 MiB.
	Text int
	// Results is the most results kept. Default 64.
	Results int
	// Images is the most bytes of decoded images kept over all results.
	// Default 32 MiB.
	Images int
}

func (l Limits) withDefaults() Limits {
	if l.Line <= 0 {
		l.Line = 16 << 20
	}
	if l.Text <= 0 {
		l.Text = 1 << 20
	}
	if l.Results <= 0 {
		l.Results = 64
	}
	if l.Images <= 0 {
		l.Images = 32 << 20
	}
	return l
}

// Execution is what one execution of code produced, as Decode read it.
type Execution struct {
	Stdout, Stderr string
	Results        []Result
	// Error is the code's exception, nil when it raised none.
	Error *Error
	// Count is the kernel's execution count of the cell (0 when the
	// server did not say).
	Count int
	// Ended says the server sent end_of_execution: the execution ran to
	// its end (with or without Error) and the answer is whole.
	Ended bool
	// Dropped counts the bytes Decode left out (over a limit, or lines
	// that were not the wire's).
	Dropped int64
}

// Error is an exception the code raised.
type Error struct {
	Name, Value, Traceback string
}

// Result is one result of an execution: the cell's value (Main) or a
// display (a chart, say).
type Result struct {
	Main bool
	// Text is the plain-text form; HTML and Markdown others the model or
	// a person may read.
	Text, HTML, Markdown string
	// PNG and JPEG are the decoded images; SVG is text.
	PNG, JPEG []byte
	SVG       string
	// Formats lists every form the server sent, by its wire name (text,
	// html, png, ..., and extra MIME types).
	Formats []string
}

// line is one NDJSON line of the wire; fields the host does not use are
// not decoded.
type line struct {
	Type      string          `json:"type"`
	Text      json.RawMessage `json:"text"`
	Name      string          `json:"name"`
	Value     string          `json:"value"`
	Traceback string          `json:"traceback"`
	Count     int             `json:"execution_count"`
	Main      bool            `json:"is_main_result"`
	HTML      string          `json:"html"`
	Markdown  string          `json:"markdown"`
	SVG       string          `json:"svg"`
	PNG       string          `json:"png"`
	JPEG      string          `json:"jpeg"`
	Extra     map[string]any  `json:"extra"`
}

// resultFields are the wire's result forms, in the order Formats lists
// them.
var resultFields = []string{"text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript", "data", "chart"}

// Decode reads a server's NDJSON answer to /execute from r until its end,
// keeping what l allows. A line that is not JSON or not of the wire is
// skipped (counted in Dropped); only a read error is an error.
func Decode(r io.Reader, l Limits) (Execution, error) {
	l = l.withDefaults()
	var ex Execution
	images := 0
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		raw, tooLong, err := readLine(br, l.Line)
		if tooLong > 0 {
			ex.Dropped += tooLong
		} else if len(bytes.TrimSpace(raw)) > 0 {
			ex.add(raw, l, &images)
		}
		if errors.Is(err, io.EOF) {
			return ex, nil
		}
		if err != nil {
			return ex, fmt.Errorf("interp: read the answer: %w", err)
		}
	}
}

// add decodes one line into ex.
func (ex *Execution) add(raw []byte, l Limits, images *int) {
	var m line
	if err := json.Unmarshal(raw, &m); err != nil {
		ex.Dropped += int64(len(raw))
		return
	}
	switch m.Type {
	case "stdout":
		ex.Stdout = ex.appendText(ex.Stdout, textOf(m.Text), l.Text)
	case "stderr":
		ex.Stderr = ex.appendText(ex.Stderr, textOf(m.Text), l.Text)
	case "number_of_executions":
		ex.Count = m.Count
	case "error":
		if ex.Error == nil {
			ex.Error = &Error{Name: ex.clip(m.Name, 1<<10), Value: ex.clip(m.Value, l.Text), Traceback: ex.clip(m.Traceback, l.Text)}
		}
	case "end_of_execution":
		ex.Ended = true
	case "result":
		if len(ex.Results) >= l.Results {
			ex.Dropped += int64(len(raw))
			return
		}
		ex.Results = append(ex.Results, ex.result(raw, m, l, images))
	case "keepalive":
	default:
		ex.Dropped += int64(len(raw))
	}
}

func (ex *Execution) result(raw []byte, m line, l Limits, images *int) Result {
	r := Result{
		Main: m.Main, Text: ex.clip(textOf(m.Text), l.Text), HTML: ex.clip(m.HTML, l.Text),
		Markdown: ex.clip(m.Markdown, l.Text), SVG: ex.clip(m.SVG, l.Text),
	}
	r.PNG = ex.image(m.PNG, l, images)
	r.JPEG = ex.image(m.JPEG, l, images)
	var present map[string]json.RawMessage
	_ = json.Unmarshal(raw, &present) // raw decoded once already
	for _, f := range resultFields {
		if v, ok := present[f]; ok && string(v) != "null" {
			r.Formats = append(r.Formats, f)
		}
	}
	var extra []string
	for k := range m.Extra {
		if len(k) <= 128 && utf8.ValidString(k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	r.Formats = append(r.Formats, extra...)
	return r
}

// image decodes a base64 image, within what is left of l.Images.
func (ex *Execution) image(s string, l Limits, images *int) []byte {
	if s == "" {
		return nil
	}
	if base64.StdEncoding.DecodedLen(len(s)) > l.Images-*images {
		ex.Dropped += int64(len(s))
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		ex.Dropped += int64(len(s))
		return nil
	}
	*images += len(b)
	return b
}

// textOf is a text field: a string, else nothing (E2B's wire has only
// strings there).
func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func (ex *Execution) appendText(have, s string, limit int) string {
	if room := limit - len(have); len(s) > room {
		ex.Dropped += int64(len(s) - max(room, 0))
		s = s[:max(room, 0)]
	}
	return have + s
}

func (ex *Execution) clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	ex.Dropped += int64(len(s) - limit)
	return s[:limit]
}

// readLine reads one line of at most limit bytes (without its newline).
// A longer one is consumed whole and reported by its length, with no
// bytes.
func readLine(br *bufio.Reader, limit int) ([]byte, int64, error) {
	var buf []byte
	var skipped int64
	for {
		chunk, err := br.ReadSlice('\n')
		if skipped == 0 && len(buf)+len(chunk) <= limit+1 {
			buf = append(buf, chunk...)
		} else {
			skipped += int64(len(buf) + len(chunk))
			buf = nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if skipped > 0 {
			return nil, skipped, err
		}
		return bytes.TrimSuffix(buf, []byte("\n")), 0, err
	}
}
