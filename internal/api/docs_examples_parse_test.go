package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
)

// This file reads the curl examples of docs/api.md the way a user's shell
// and curl would, without running either: docs_examples_test.go sends them.
// The parser is small and strict on purpose: what it cannot read exactly is
// an error naming the line, never a skipped example.

// docExample is one curl command of a shell block in docs/api.md.
type docExample struct {
	line    int // line of docs/api.md where the command starts
	method  string
	url     string
	header  http.Header
	body    []byte // nil: curl sends no body
	hasBody bool
	// shown holds the answers the doc shows for the command: "# {...}"
	// comment lines under it ("# or {...}" adds an alternative), or a
	// json block right after its shell block. Empty when none is shown.
	shown []any
}

// shellCmd is one command of a shell block: its words after quote removal
// and variable expansion, and the comment lines right under it.
type shellCmd struct {
	line     int
	words    []string
	comments []string
}

// readDocExamples parses every sh block of the markdown file at path. vars
// is filled by the blocks' export lines; a curl command may only use a
// variable exported earlier in the document.
func readDocExamples(path string, vars map[string]string) ([]docExample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open doc: %w", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read doc: %w", err)
	}
	var out []docExample
	for i := 0; i < len(lines); i++ {
		lang, ok := strings.CutPrefix(lines[i], "```")
		if !ok || lang == "" {
			continue
		}
		start := i + 1
		end := start
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("docs line %d: code block never closed", i+1)
		}
		i = end
		if lang != "sh" {
			continue
		}
		cmds, err := splitShell(strings.Join(lines[start:end], "\n")+"\n", start+1, vars)
		if err != nil {
			return nil, err
		}
		n := len(out)
		for _, c := range cmds {
			switch c.words[0] {
			case "export":
				if err := doExport(c, vars); err != nil {
					return nil, err
				}
			case "curl":
				ex, err := parseCurl(c)
				if err != nil {
					return nil, err
				}
				out = append(out, ex)
			default:
				return nil, fmt.Errorf("docs line %d: command %q is neither curl nor export", c.line, c.words[0])
			}
		}
		// A json block after the shell block, with nothing but blank lines
		// or "Answer:" between, is the answer to the block's last curl.
		j := end + 1
		for j < len(lines) && (strings.TrimSpace(lines[j]) == "" || lines[j] == "Answer:") {
			j++
		}
		if j < len(lines) && lines[j] == "```json" && len(out) > n {
			k := j + 1
			for k < len(lines) && lines[k] != "```" {
				k++
			}
			var v any
			if err := json.Unmarshal([]byte(strings.Join(lines[j+1:k], "\n")), &v); err != nil {
				return nil, fmt.Errorf("docs line %d: answer shown is not JSON: %w", j+1, err)
			}
			last := &out[len(out)-1]
			if len(last.shown) > 0 {
				return nil, fmt.Errorf("docs line %d: curl at line %d shows two answers", j+1, last.line)
			}
			last.shown = []any{v}
		}
	}
	return out, nil
}

// doExport records "export NAME=VALUE".
func doExport(c shellCmd, vars map[string]string) error {
	if len(c.words) != 2 {
		return fmt.Errorf("docs line %d: export takes one NAME=VALUE", c.line)
	}
	name, val, ok := strings.Cut(c.words[1], "=")
	if !ok || !isVarName(name) {
		return fmt.Errorf("docs line %d: export %q is not NAME=VALUE", c.line, c.words[1])
	}
	vars[name] = val
	return nil
}

func isVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r != '_' && !(r >= 'A' && r <= 'Z') && !(r >= 'a' && r <= 'z') && (i == 0 || !(r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}

// splitShell splits a shell block into commands as a POSIX shell would for
// the subset the doc uses: words, '…' and "…" quotes, $NAME and ${NAME}
// (unquoted or in double quotes), backslash escapes, line continuations and
// # comments. Characters a shell would treat specially (& | ; < > ( ) `
// and the glob characters * ? [) outside quotes are errors: a user's shell
// would not pass them to curl as the doc means. first is the line number of
// the block's first line.
func splitShell(src string, first int, vars map[string]string) ([]shellCmd, error) {
	var (
		cmds    []shellCmd
		cur     *shellCmd
		word    strings.Builder
		inWord  bool
		line    = first
		lastCmd *shellCmd // the command the next comment lines belong to
	)
	endWord := func() {
		if inWord {
			if cur == nil {
				cmds = append(cmds, shellCmd{line: line})
				cur = &cmds[len(cmds)-1]
			}
			cur.words = append(cur.words, word.String())
			word.Reset()
			inWord = false
		}
	}
	expand := func(i int) (int, error) { // src[i] == '$'
		j := i + 1
		brace := j < len(src) && src[j] == '{'
		if brace {
			j++
		}
		k := j
		for k < len(src) && (src[k] == '_' || src[k] >= 'A' && src[k] <= 'Z' || src[k] >= 'a' && src[k] <= 'z' || k > j && src[k] >= '0' && src[k] <= '9') {
			k++
		}
		name := src[j:k]
		if brace {
			if k >= len(src) || src[k] != '}' {
				return 0, fmt.Errorf("docs line %d: ${ without a plain NAME}", line)
			}
			k++
		}
		if name == "" {
			return 0, fmt.Errorf("docs line %d: a $ that is not a variable", line)
		}
		v, ok := vars[name]
		if !ok {
			return 0, fmt.Errorf("docs line %d: $%s is not exported earlier in the doc", line, name)
		}
		word.WriteString(v)
		inWord = true
		return k, nil
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			endWord()
			if cur != nil {
				lastCmd = cur
			} else if i > 0 && src[i-1] == '\n' {
				lastCmd = nil // a blank line ends a command's comments
			}
			cur = nil
			line++
			i++
		case c == ' ' || c == '\t':
			endWord()
			i++
		case c == '#' && !inWord:
			j := strings.IndexByte(src[i:], '\n') + i
			if cur == nil && lastCmd != nil {
				lastCmd.comments = append(lastCmd.comments, strings.TrimSpace(src[i+1:j]))
			}
			i = j // a comment on a command's own line is only a remark
		case c == '\\':
			if i+1 < len(src) && src[i+1] == '\n' {
				line++
				i += 2
				continue
			}
			if i+1 >= len(src) {
				return nil, fmt.Errorf("docs line %d: trailing backslash", line)
			}
			word.WriteByte(src[i+1])
			inWord = true
			i += 2
		case c == '\'':
			j := strings.IndexByte(src[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("docs line %d: unclosed single quote", line)
			}
			s := src[i+1 : i+1+j]
			word.WriteString(s)
			inWord = true
			line += strings.Count(s, "\n")
			i += j + 2
		case c == '"':
			i++
			inWord = true
			for {
				if i >= len(src) {
					return nil, fmt.Errorf("docs line %d: unclosed double quote", line)
				}
				d := src[i]
				if d == '"' {
					i++
					break
				}
				switch {
				case d == '$':
					k, err := expand(i)
					if err != nil {
						return nil, err
					}
					i = k
				case d == '\\' && i+1 < len(src) && strings.IndexByte("$`\"\\\n", src[i+1]) >= 0:
					if src[i+1] == '\n' {
						line++
					} else {
						word.WriteByte(src[i+1])
					}
					i += 2
				case d == '`':
					return nil, fmt.Errorf("docs line %d: command substitution in double quotes", line)
				default:
					if d == '\n' {
						line++
					}
					word.WriteByte(d)
					i++
				}
			}
		case c == '$':
			k, err := expand(i)
			if err != nil {
				return nil, err
			}
			i = k
		case strings.IndexByte("&|;<>()`*?[", c) >= 0:
			return nil, fmt.Errorf("docs line %d: unquoted %q: a shell would not pass it to curl as written", line, c)
		default:
			word.WriteByte(c)
			inWord = true
			i++
		}
	}
	endWord()
	return cmds, nil
}

// parseCurl reads the curl options the doc uses, as curl does: -d sends
// the data as given (POST unless -X says otherwise, form-encoded unless a
// Content-Type header is given), -X sets the method.
func parseCurl(c shellCmd) (docExample, error) {
	ex := docExample{line: c.line, header: http.Header{}}
	fail := func(format string, a ...any) (docExample, error) {
		return docExample{}, fmt.Errorf("docs line %d: curl: %s", c.line, fmt.Sprintf(format, a...))
	}
	args := c.words[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func() (string, bool) {
			if i+1 >= len(args) {
				return "", false
			}
			i++
			return args[i], true
		}
		switch a {
		case "-s", "-S", "-sS", "-Ss", "--silent", "--show-error":
		case "-X", "--request":
			v, ok := val()
			if !ok || ex.method != "" {
				return fail("%s needs one method, given once", a)
			}
			ex.method = v
		case "-H", "--header":
			v, ok := val()
			name, value, found := strings.Cut(v, ":")
			if !ok || !found || strings.TrimSpace(name) != name || name == "" {
				return fail("header %q is not Name: value", v)
			}
			ex.header.Add(name, strings.TrimSpace(value))
		case "-d", "--data":
			v, ok := val()
			if !ok || ex.hasBody {
				return fail("%s needs one value, given once (curl joins repeated ones with &)", a)
			}
			if strings.HasPrefix(v, "@") {
				return fail("-d @file is not an inline example")
			}
			ex.body, ex.hasBody = []byte(v), true
		default:
			if strings.HasPrefix(a, "-") {
				return fail("option %q is not one this test knows", a)
			}
			if ex.url != "" {
				return fail("two URLs (%q and %q)", ex.url, a)
			}
			ex.url = a
		}
	}
	if ex.url == "" {
		return fail("no URL")
	}
	if ex.method == "" {
		ex.method = http.MethodGet
		if ex.hasBody {
			ex.method = http.MethodPost
		}
	}
	if ex.hasBody && ex.header.Get("Content-Type") == "" {
		ex.header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	var alt []string
	for _, cm := range c.comments {
		switch {
		case strings.HasPrefix(cm, "{"):
			alt = append(alt, cm)
		case strings.HasPrefix(cm, "or {"):
			alt = append(alt, strings.TrimPrefix(cm, "or "))
		case len(alt) > 0:
			alt[len(alt)-1] += " " + cm
		default:
			return fail("comment %q under the command is not an answer", cm)
		}
	}
	for _, s := range alt {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return fail("answer shown %q is not JSON: %v", s, err)
		}
		ex.shown = append(ex.shown, v)
	}
	return ex, nil
}

// TestDocExampleParserRefusesWhatItCannotRead checks that the docs parser
// fails, naming the line, on the shell and curl it does not model rather
// than passing them on.
func TestDocExampleParserRefusesWhatItCannotRead(t *testing.T) {
	vars := map[string]string{"RQ": "http://x"}
	for _, src := range []string{
		"curl -sS $RQ/v1/tasks?type=a\n",                // unquoted glob character
		"curl -sS \"$RQ/v1/tasks\"&limit=1\n",           // unquoted &
		"curl -sS $NOPE/v1/tasks\n",                     // variable never exported
		"curl --fail $RQ/v1/tasks\n",                    // unknown option
		"curl -sS -d '{}' -d '{}' $RQ/v1/tasks\n",       // repeated data
		"curl -sS $RQ/v1/tasks $RQ/v1/types\n",          // two URLs
		"curl -sS -d '{\"a\":1} $RQ/v1/tasks\n",         // unclosed quote
		"curl -sS $RQ/v1/stats\n# the stats\n",          // a comment that is not an answer
		"curl -sS $RQ/v1/stats\n# {\"total\": \n",       // an answer that is not JSON
		"wget $RQ/v1/stats\n",                           // not curl
		"curl -sS -H 'Authorization' $RQ/v1/stats\n",    // header without a colon
		"curl -sS -X POST $RQ/v1/tasks -d @body.json\n", // data from a file
	} {
		cmds, err := splitShell(src, 10, vars)
		if err == nil {
			for _, c := range cmds {
				if c.words[0] != "curl" {
					err = fmt.Errorf("docs line %d: not curl", c.line)
					break
				}
				if _, err = parseCurl(c); err != nil {
					break
				}
			}
		}
		if err == nil || !strings.Contains(err.Error(), "docs line 1") {
			t.Errorf("%q: got error %v, want one naming its docs line", src, err)
		}
	}
}
