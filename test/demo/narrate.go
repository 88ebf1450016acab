package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// narrator writes the demo's story: headings, ✔ lines, dim notes, indented output and tables,
// in colour only on a terminal and not with NO_COLOR (https://no-color.org).
type narrator struct {
	w                                     io.Writer
	bold, dim, green, red, cyan, resetSGR string
	start                                 time.Time
	step                                  string // the current heading: a failure names it
}

func newNarrator(f *os.File) *narrator {
	n := &narrator{w: f, start: time.Now()}
	if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 && os.Getenv("NO_COLOR") == "" {
		n.bold, n.dim, n.green, n.red, n.cyan, n.resetSGR = "\x1b[1m", "\x1b[2m", "\x1b[32m", "\x1b[31m", "\x1b[36m", "\x1b[0m"
	}
	return n
}

func (n *narrator) heading(title string) {
	n.step = title
	fmt.Fprintf(n.w, "\n%s%s━━ %s%s\n", n.bold, n.cyan, title, n.resetSGR)
}

// say writes a plain line.
func (n *narrator) say(format string, args ...any) { fmt.Fprintf(n.w, format+"\n", args...) }

// command shows what the demo does, as the line a user would type or call.
func (n *narrator) command(format string, args ...any) { n.say("$ "+format, args...) }

func (n *narrator) note(format string, args ...any) {
	fmt.Fprintf(n.w, "%s%s%s\n", n.dim, fmt.Sprintf(format, args...), n.resetSGR)
}

func (n *narrator) ok(format string, args ...any) {
	fmt.Fprintf(n.w, "  %s✔%s %s\n", n.green, n.resetSGR, fmt.Sprintf(format, args...))
}

// dimmed is s in the dim style, for a comment inside a line.
func (n *narrator) dimmed(s string) string { return n.dim + s + n.resetSGR }

// indent writes text with every line indented by four spaces.
func (n *narrator) indent(text string) {
	text = strings.TrimRight(text, "\n")
	if text == "" {
		return
	}
	for _, line := range strings.Split(text, "\n") {
		fmt.Fprintf(n.w, "    %s\n", line)
	}
}

// table writes rows under header, columns aligned; a column whose header starts with '>' is
// right-aligned (the '>' is not shown).
func (n *narrator) table(header []string, rows [][]string) {
	widths := make([]int, len(header))
	right := make([]bool, len(header))
	for i, h := range header {
		if strings.HasPrefix(h, ">") {
			header[i], right[i] = h[1:], true
		}
		widths[i] = len([]rune(header[i]))
	}
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			pad := strings.Repeat(" ", widths[i]-len([]rune(c)))
			if i > 0 {
				b.WriteString("  ")
			}
			if right[i] {
				b.WriteString(pad + c)
			} else if i < len(cells)-1 {
				b.WriteString(c + pad)
			} else {
				b.WriteString(c)
			}
		}
		n.indent(b.String())
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
}

// progress is a writer for a build's progress lines: shown indented, as they come.
func (n *narrator) progress() io.Writer { return &indenter{w: n.w, atStart: true} }

type indenter struct {
	w       io.Writer
	atStart bool
}

func (in *indenter) Write(p []byte) (int, error) {
	for _, c := range p {
		if in.atStart {
			if _, err := io.WriteString(in.w, "    "); err != nil {
				return 0, err
			}
		}
		if _, err := in.w.Write([]byte{c}); err != nil {
			return 0, err
		}
		in.atStart = c == '\n'
	}
	return len(p), nil
}

// since is the time since t, as the demo prints it ("1.2s").
func since(t time.Time) string { return fmt.Sprintf("%.1fs", time.Since(t).Seconds()) }

// failed writes the one line of a failure, and the tail of every log the demo keeps.
func (n *narrator) failed(err error, logs []namedLog) {
	fmt.Fprintf(os.Stderr, "\n%s%s✘ demo failed%s during %q: %v\n", n.bold, n.red, n.resetSGR, cmp.Or(n.step, "start"), err)
	for _, l := range logs {
		tailLog(os.Stderr, n, l)
	}
}

// namedLog is a log file the demo tails when it fails.
type namedLog struct{ name, path string }

// tailLog writes the last 25 lines of a log, PEM blocks left out (istiod logs its self-signed
// certificates).
func tailLog(w io.Writer, n *narrator, l namedLog) {
	data, err := os.ReadFile(l.path)
	if err != nil || len(data) == 0 {
		return
	}
	var lines []string
	inPEM := false
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		switch {
		case strings.Contains(line, "-----BEGIN "):
			inPEM = true
			lines = append(lines, "[PEM block omitted]")
		case strings.Contains(line, "-----END "):
			inPEM = false
		case !inPEM:
			lines = append(lines, line)
		}
	}
	lines = lines[max(0, len(lines)-25):]
	fmt.Fprintf(w, "%s--- last lines of %s (%s) ---%s\n", n.dim, l.name, l.path, n.resetSGR)
	for _, line := range lines {
		fmt.Fprintf(w, "    %s\n", line)
	}
}
