package dockerfile_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/dockerfile"
)

func TestParse(t *testing.T) {
	src := `# syntax=docker/dockerfile:1
# a comment
ARG BASE=localhost/busybox:test
FROM $BASE

run echo one \
  # a comment inside a continuation
  && echo two
RUN ["/bin/sh", "-c", "echo exec"]
COPY --chown=1000:1000 a.txt b/ /app/
ADD ["x y", "/dst"]
ENV A=1 B="two words"
ENV LEGACY value with spaces
WORKDIR /app
USER 1000
LABEL org.example="a b" c=d
CMD ["/bin/sh"]
ENTRYPOINT /bin/run
`
	f, err := dockerfile.Parse(strings.NewReader(src))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	var got []string
	for _, in := range f.Instructions {
		got = append(got, fmt.Sprintf("%d %s", in.Line, in.String()))
	}
	want := []string{
		"3 ARG BASE=localhost/busybox:test",
		"4 FROM $BASE",
		"6 RUN echo one   && echo two",
		"9 RUN [\"/bin/sh\",\"-c\",\"echo exec\"]",
		"10 COPY --chown=1000:1000 a.txt b/ /app/",
		"11 ADD [\"x y\",\"/dst\"]",
		"12 ENV A=1 B=\"two words\"",
		"13 ENV LEGACY value with spaces",
		"14 WORKDIR /app",
		"15 USER 1000",
		"16 LABEL org.example=\"a b\" c=d",
		"17 CMD [\"/bin/sh\"]",
		"18 ENTRYPOINT /bin/run",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("instructions (-want +got):\n%s", diff)
	}
	if f.Escape != '\\' {
		t.Errorf("Escape = %q, want \\", f.Escape)
	}
}

func TestParseEscapeDirective(t *testing.T) {
	f, err := dockerfile.Parse(strings.NewReader("# escape=`\nFROM scratch\nRUN echo a `\n  b\\c\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Instructions[1].Args; got != "echo a   b\\c" || f.Escape != '`' {
		t.Errorf("RUN args = %q, escape %q; want the backtick continuation joined and \\ literal", got, f.Escape)
	}
}

// TestParseStages: stages, their names, and COPY --from of an earlier one
// or of an image.
func TestParseStages(t *testing.T) {
	src := "ARG V=1\nFROM golang:1.26 AS Build\nRUN go build\nFROM build AS test\nFROM busybox\nCOPY --from=build /out /bin/\nCOPY --from=1 /r /r\nCOPY --from=alpine:3 /etc/os-release /\n"
	f, err := dockerfile.Parse(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range f.Instructions {
		if in.Cmd == "FROM" {
			img, name, err := in.Stage()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, img+"|"+name)
		}
		if v, ok := in.Flags["from"]; ok {
			got = append(got, "from="+v)
		}
	}
	want := []string{"golang:1.26|build", "build|test", "busybox|", "from=build", "from=1", "from=alpine:3"}
	if !slices.Equal(got, want) {
		t.Errorf("stages and --from = %q, want %q", got, want)
	}
}

// TestParseRefused: what the builder does not build is refused with the
// line it is on and a message that says so.
func TestParseRefused(t *testing.T) {
	tests := []struct {
		name, src string
		line      int
		msg       string
	}{
		{"healthcheck", "FROM a\nHEALTHCHECK CMD true\n", 2, "HEALTHCHECK is not supported"},
		{"onbuild", "FROM a\n\nONBUILD RUN x\n", 3, "ONBUILD is not supported"},
		{"shell", "FROM a\nSHELL [\"bash\"]\n", 2, "SHELL is not supported"},
		{"expose", "FROM a\nEXPOSE 80\n", 2, "EXPOSE"},
		{"unknown", "FROM a\nFROB x\n", 2, `unknown instruction "FROB"`},
		{"from three words", "FROM a b c\n", 1, "AS NAME"},
		{"from two words", "FROM a AS\n", 1, "AS NAME"},
		{"bad stage name", "FROM a AS 1st\n", 1, "stage name"},
		{"stage named twice", "FROM a AS b\nFROM c AS B\n", 2, `a second stage named "b"`},
		{"copy from own stage", "FROM a AS b\nCOPY --from=b /x /y\n", 2, "the stage it is in"},
		{"copy from own index", "FROM a\nCOPY --from=0 /x /y\n", 2, "earlier stage"},
		{"copy from later index", "FROM a\nFROM b\nCOPY --from=2 /x /y\n", 3, "earlier stage"},
		{"copy from later stage", "FROM a\nCOPY --from=later /x /y\nFROM b AS later\n", 2, "a later stage"},
		{"copy from nothing", "FROM a\nCOPY --from= /x /y\n", 2, "needs a stage or an image"},
		{"add from", "FROM a\nADD --from=b /x /y\n", 2, "use COPY --from"},
		{"run mount", "FROM a\nRUN --mount=type=cache,target=/c make\n", 2, "RUN --mount"},
		{"run network", "FROM a\nRUN --network=host make\n", 2, "RUN --network"},
		{"unknown flag", "FROM a\nCOPY --frob=1 x y\n", 2, "does not take the option --frob"},
		{"heredoc", "FROM a\nRUN <<EOF\necho\nEOF\n", 2, "heredocs"},
		{"before from", "RUN x\nFROM a\n", 1, "before FROM"},
		{"no from", "ARG X\n", 1, "no FROM"},
		{"copy one word", "FROM a\nCOPY x\n", 2, "a source and a destination"},
		{"bad exec form", "FROM a\nCMD [\"a\", 1]\n", 2, "not a JSON array of strings"},
		{"empty run", "FROM a\nRUN\n", 2, "needs arguments"},
		{"bad escape", "# escape=x\nFROM a\n", 1, "escape directive"},
		{"not utf-8", "FROM a\nRUN \xff\n", 1, "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dockerfile.Parse(strings.NewReader(tt.src))
			var de *dockerfile.Error
			if !errors.As(err, &de) || de.Line != tt.line || !strings.Contains(de.Msg, tt.msg) {
				t.Errorf("Parse(%q) = %v, want line %d with %q", tt.src, err, tt.line, tt.msg)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "SP": "x y", "EMPTY": ""}
	e := dockerfile.Expander{Lookup: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}
	tests := []struct {
		in   string
		want []string
		err  string
	}{
		{"$A ${A}b", []string{"a", "ab"}, ""},
		{"$SP", []string{"x y"}, ""},
		{`"$SP z"`, []string{"x y z"}, ""},
		{`'$A'`, []string{"$A"}, ""},
		{`\$A`, []string{"$A"}, ""},
		{`"\$A \"q\" \n"`, []string{`$A "q" \n`}, ""},
		{"${UNSET:-def} ${EMPTY:-d2} ${EMPTY-d3}", []string{"def", "d2"}, ""},
		{"${A:+set} ${UNSET:+set}x", []string{"set", "x"}, ""},
		{"${UNSET:-${A}x}", []string{"ax"}, ""},
		{`""`, []string{""}, ""},
		{"$ $1 a$", []string{"$", "$1", "a$"}, ""},
		{"${UNSET:?need it}", nil, "UNSET: need it"},
		{"${A", nil, "missing }"},
		{"${A/x/y}", nil, "unsupported modifier"},
		{"${}", nil, "bad substitution"},
		{`"open`, nil, "unterminated double quote"},
		{`'open`, nil, "unterminated single quote"},
	}
	for _, tt := range tests {
		got, err := e.Words(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Words(%q) = %q, %v; want error %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || !cmp.Equal(got, tt.want) {
			t.Errorf("Words(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestPairs(t *testing.T) {
	e := dockerfile.Expander{Lookup: func(k string) (string, bool) { return "v" + k, true }}
	tests := []struct {
		cmd, in string
		want    []dockerfile.Pair
		err     string
	}{
		{"ENV", `A=1 B="two $X"`, []dockerfile.Pair{{"A", "1", true}, {"B", "two vX", true}}, ""},
		{"ENV", `LEGACY  a  $X`, []dockerfile.Pair{{"LEGACY", "a vX", true}}, ""},
		{"ARG", `N M=2`, []dockerfile.Pair{{"N", "", false}, {"M", "2", true}}, ""},
		{"LABEL", `org.x.y="a b"`, []dockerfile.Pair{{"org.x.y", "a b", true}}, ""},
		{"LABEL", `novalue`, nil, "want KEY=VALUE"},
		{"ENV", `1A=x`, nil, "not a valid name"},
		{"ENV", `ONLYKEY`, nil, "no value"},
	}
	for _, tt := range tests {
		got, err := e.Pairs(tt.cmd, tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Pairs(%s %q) = %v, %v; want error %q", tt.cmd, tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || !cmp.Equal(got, tt.want) {
			t.Errorf("Pairs(%s %q) = %v, %v; want %v", tt.cmd, tt.in, got, err, tt.want)
		}
	}
}

// FuzzParse: any input parses or is refused; nothing panics, and what
// parses expands without panicking.
func FuzzParse(f *testing.F) {
	f.Add("FROM a\nRUN x \\\n y\n")
	f.Add("# escape=`\nFROM a\nENV A=\"${B:-c}\" D=$E\nCOPY [\"a\", \"b\"]\n")
	f.Add("ARG X=1\nFROM $X\nLABEL a='b' \"c\"=d\n")
	f.Fuzz(func(t *testing.T, src string) {
		df, err := dockerfile.Parse(strings.NewReader(src))
		if err != nil {
			return
		}
		e := dockerfile.Expander{Escape: df.Escape, Lookup: func(k string) (string, bool) { return k, true }}
		for _, in := range df.Instructions {
			_, _ = e.Words(in.Args)
			_, _ = e.Pairs(in.Cmd, in.Args)
			_ = in.String()
		}
	})
}
