package executor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// eventBinDir is airlock-event's directory, the last of every command's
// PATH.
var eventBinDir = filepath.Dir(execproto.EventHelper)

// eventUsage is airlock-event's help.
const eventUsage = `usage: airlock-event COMMAND ...
  progress [--pct N] MESSAGE
  log [--level debug|info|warn|error] MESSAGE
  metric NAME VALUE [--unit UNIT]
  artifact PATH [--type MEDIA-TYPE] [--name NAME]
  test --name NAME --status pass|fail|skip [--duration SECONDS|GO-DURATION]
  emit KIND JSON
  lines            (forward JSON lines from stdin as they are)
Sends an event to the host through ` + execproto.EventSocket + `. The host decides
what it records; a line it refuses or that comes too fast is dropped.
`

// eventCommand is airlock-event: the executor's binary called by that name
// inside the sandbox. It builds one JSON line from its arguments (or
// forwards stdin's lines) and writes it to the event socket. It exits 0 once
// the line is written, whatever the host makes of it, 1 when the socket
// cannot be reached, and 2 on bad usage.
func eventCommand(args []string, stdin io.Reader, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, eventUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "lines" {
		if len(args) != 1 {
			fmt.Fprint(stderr, eventUsage)
			return 2
		}
		return sendEventLines(stdin, stderr)
	}
	line, err := eventLine(args)
	if err != nil {
		fmt.Fprintf(stderr, "airlock-event: %v\n%s", err, eventUsage)
		return 2
	}
	return sendEventLines(strings.NewReader(string(line)+"\n"), stderr)
}

// eventLine builds the JSON line of a command.
func eventLine(args []string) ([]byte, error) {
	cmd := args[0]
	allowed := map[string][]string{
		"progress": {"pct"},
		"log":      {"level"},
		"metric":   {"unit"},
		"artifact": {"type", "name"},
		"test":     {"name", "status", "duration"},
		"emit":     nil,
	}
	names, ok := allowed[cmd]
	if !ok {
		return nil, fmt.Errorf("unknown command %q", cmd)
	}
	flags, pos, err := parseEventArgs(args[1:], names)
	if err != nil {
		return nil, err
	}
	ev := map[string]any{"kind": cmd}
	switch cmd {
	case "progress", "log":
		if len(pos) != 1 {
			return nil, fmt.Errorf("%s: want one MESSAGE (quote it)", cmd)
		}
		ev["message"] = pos[0]
		if v, ok := flags["pct"]; ok {
			pct, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("progress: --pct %q: want a number", v)
			}
			ev["pct"] = pct
		}
		if v, ok := flags["level"]; ok {
			ev["level"] = v
		}
	case "metric":
		if len(pos) != 2 {
			return nil, errors.New("metric: want NAME VALUE")
		}
		v, err := strconv.ParseFloat(pos[1], 64)
		if err != nil {
			return nil, fmt.Errorf("metric: value %q: want a number", pos[1])
		}
		ev["name"], ev["value"] = pos[0], v
		if u, ok := flags["unit"]; ok {
			ev["unit"] = u
		}
	case "artifact":
		if len(pos) != 1 {
			return nil, errors.New("artifact: want one PATH")
		}
		p := pos[0]
		if !filepath.IsAbs(p) {
			// The host does not know this command's directory.
			wd, err := os.Getwd()
			if err != nil {
				return nil, fmt.Errorf("artifact: %w", err)
			}
			p = filepath.Join(wd, p)
		}
		ev["path"] = p
		if v, ok := flags["type"]; ok {
			ev["type"] = v
		}
		if v, ok := flags["name"]; ok {
			ev["name"] = v
		}
	case "test":
		if len(pos) != 0 || flags["name"] == "" || flags["status"] == "" {
			return nil, errors.New("test: want --name NAME --status pass|fail|skip")
		}
		ev["name"], ev["status"] = flags["name"], flags["status"]
		if v, ok := flags["duration"]; ok {
			sec, err := strconv.ParseFloat(v, 64)
			if err != nil {
				d, derr := time.ParseDuration(v)
				if derr != nil {
					return nil, fmt.Errorf("test: --duration %q: want seconds or a duration such as 1.5s", v)
				}
				sec = d.Seconds()
			}
			ev["duration_s"] = sec
		}
	case "emit":
		if len(pos) != 2 {
			return nil, errors.New("emit: want KIND JSON")
		}
		if !json.Valid([]byte(pos[1])) {
			return nil, errors.New("emit: the data is not JSON")
		}
		ev["kind"], ev["data"] = pos[0], json.RawMessage(pos[1])
	}
	return json.Marshal(ev)
}

// parseEventArgs splits "--name value" and "--name=value" flags, anywhere
// among the arguments, from positional ones; "--" ends the flags.
func parseEventArgs(args, names []string) (map[string]string, []string, error) {
	flags := map[string]string{}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		known := false
		for _, n := range names {
			known = known || n == name
		}
		if !known {
			return nil, nil, fmt.Errorf("unknown flag %q", a)
		}
		if !hasVal {
			if i+1 >= len(args) {
				return nil, nil, fmt.Errorf("flag %q needs a value", a)
			}
			i++
			val = args[i]
		}
		flags[name] = val
	}
	return flags, pos, nil
}

// sendEventLines copies r to the event socket.
func sendEventLines(r io.Reader, stderr io.Writer) int {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: execproto.EventSocket})
	}
	if err != nil {
		fmt.Fprintf(stderr, "airlock-event: connect to %s: %v\n", execproto.EventSocket, err)
		return 1
	}
	c := os.NewFile(uintptr(fd), "events")
	defer c.Close()
	w := bufio.NewWriter(c)
	if _, err := io.Copy(w, r); err != nil {
		fmt.Fprintf(stderr, "airlock-event: %v\n", err)
		return 1
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "airlock-event: %v\n", err)
		return 1
	}
	// The executor closes the connection once it has taken every line
	// (queued or counted them): waiting for that means a line is with the
	// executor when the command exits, so a host that drains the channel
	// after the command gets it.
	if err := unix.Shutdown(fd, unix.SHUT_WR); err != nil {
		fmt.Fprintf(stderr, "airlock-event: %v\n", err)
		return 1
	}
	_, _ = io.Copy(io.Discard, c)
	return 0
}
