// Package dockerfile reads the runtime stage of ttlproxy's Dockerfile: what
// release/image.sh assembles without a container engine, and what the
// deployment kit's manifests must agree with. It knows the instructions that
// Dockerfile uses and refuses the others, so that a new one cannot be left
// out of the assembled image unnoticed.
package dockerfile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Stage is the last stage of a Dockerfile, the image it builds.
type Stage struct {
	// From is the base image, "debian:bookworm-slim".
	From string
	// Args are the stage's ARG defaults.
	Args map[string]string
	// Runs are the RUN commands in order, shell form.
	Runs []string
	// Copies are the COPY instructions in order.
	Copies []Copy
	// User is USER's value, "" when not set (root).
	User string
	// Labels are LABEL's pairs, values unexpanded ("${VERSION}").
	Labels map[string]string
	// Expose are EXPOSE's ports, "6432" or "6432/tcp".
	Expose []string
	// Healthcheck is HEALTHCHECK; nil when not set.
	Healthcheck *Healthcheck
	// Entrypoint and Cmd are the exec forms.
	Entrypoint, Cmd []string
}

// Copy is one COPY instruction.
type Copy struct {
	// From is --from's stage, "" for the build context.
	From      string
	Src, Dest string
}

// Healthcheck is a HEALTHCHECK instruction with Docker's defaults filled
// in (30s, 30s, 0s, 3 retries).
type Healthcheck struct {
	// Test is the exec form, without Docker's leading "CMD".
	Test                           []string
	Interval, Timeout, StartPeriod time.Duration
	Retries                        int
}

// instruction is one logical line: a keyword and its arguments, line
// continuations joined.
type instruction struct {
	line    int
	keyword string // upper case
	args    string
}

// lines splits a Dockerfile into instructions: comment lines dropped
// (also inside a continuation, as Docker does), lines ending in a
// backslash joined to the next.
func lines(r io.Reader) ([]instruction, error) {
	var out []instruction
	sc := bufio.NewScanner(r)
	var cur strings.Builder
	start, n := 0, 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(text, "#") || (text == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		more := strings.HasSuffix(text, `\`)
		text = strings.TrimSuffix(text, `\`)
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(strings.TrimSpace(text))
		if more {
			continue
		}
		kw, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{line: start, keyword: strings.ToUpper(kw), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: the file ends inside a continuation", start)
	}
	return out, nil
}

// flags takes the leading --name=value flags off args.
func flags(args string) (map[string]string, string) {
	f := map[string]string{}
	for strings.HasPrefix(args, "--") {
		word, rest, _ := strings.Cut(args, " ")
		name, value, _ := strings.Cut(strings.TrimPrefix(word, "--"), "=")
		f[name] = value
		args = strings.TrimSpace(rest)
	}
	return f, args
}

// execForm parses the JSON array form of RUN, CMD, ENTRYPOINT and
// HEALTHCHECK CMD; ok is false for the shell form.
func execForm(args string) ([]string, bool) {
	if !strings.HasPrefix(args, "[") {
		return nil, false
	}
	var v []string
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		return nil, false
	}
	return v, true
}

// words splits LABEL's and EXPOSE's arguments as the shell does: white
// space separates, quotes group, a backslash escapes the next character
// (outside single quotes).
func words(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	var quote rune
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != '\'' && c == '\\' && i+1 < len(rs):
			i++
			cur.WriteRune(rs[i])
			inWord = true
		case quote != 0:
			cur.WriteRune(c)
		case c == '"' || c == '\'':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// ParseRuntime returns the last stage of the Dockerfile r. An instruction
// it does not know in that stage is an error, so that the Dockerfile
// cannot grow what image.sh would leave out.
func ParseRuntime(r io.Reader) (*Stage, error) {
	ins, err := lines(r)
	if err != nil {
		return nil, err
	}
	last := -1
	for i, in := range ins {
		if in.keyword == "FROM" {
			last = i
		}
	}
	if last < 0 {
		return nil, fmt.Errorf("no FROM")
	}
	st := &Stage{Args: map[string]string{}, Labels: map[string]string{}}
	for _, in := range ins[last:] {
		if err := st.apply(in); err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", in.line, in.keyword, err)
		}
	}
	return st, nil
}

func (st *Stage) apply(in instruction) error {
	switch in.keyword {
	case "FROM":
		f, args := flags(in.args)
		if len(f) > 0 {
			return fmt.Errorf("flags %v are not assembled", f)
		}
		image, _, _ := strings.Cut(args, " ")
		st.From = image
	case "ARG":
		name, def, _ := strings.Cut(in.args, "=")
		if v, err := strconv.Unquote(def); err == nil {
			def = v
		}
		st.Args[name] = def
	case "RUN":
		f, args := flags(in.args)
		if len(f) > 0 {
			return fmt.Errorf("flags %v are not assembled", f)
		}
		if _, ok := execForm(args); ok {
			return fmt.Errorf("the exec form is not assembled: write the shell form")
		}
		st.Runs = append(st.Runs, args)
	case "COPY":
		f, args := flags(in.args)
		for k := range f {
			if k != "from" {
				return fmt.Errorf("flag --%s is not assembled", k)
			}
		}
		w, err := words(args)
		if err != nil {
			return err
		}
		if len(w) != 2 {
			return fmt.Errorf("want one source and a destination, have %q", args)
		}
		st.Copies = append(st.Copies, Copy{From: f["from"], Src: w[0], Dest: w[1]})
	case "USER":
		st.User = in.args
	case "LABEL":
		w, err := words(in.args)
		if err != nil {
			return err
		}
		for _, kv := range w {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("%q is not key=value", kv)
			}
			st.Labels[k] = v
		}
	case "EXPOSE":
		w, err := words(in.args)
		if err != nil {
			return err
		}
		st.Expose = append(st.Expose, w...)
	case "HEALTHCHECK":
		return st.healthcheck(in.args)
	case "ENTRYPOINT", "CMD":
		v, ok := execForm(in.args)
		if !ok {
			return fmt.Errorf("write the exec form (a JSON array)")
		}
		if in.keyword == "ENTRYPOINT" {
			st.Entrypoint = v
		} else {
			st.Cmd = v
		}
	default:
		return fmt.Errorf("not assembled by release/image.sh: teach internal/dockerfile and release/dockerstage first")
	}
	return nil
}

func (st *Stage) healthcheck(args string) error {
	f, rest := flags(args)
	hc := &Healthcheck{Interval: 30 * time.Second, Timeout: 30 * time.Second, Retries: 3}
	for k, v := range f {
		var err error
		switch k {
		case "interval":
			hc.Interval, err = time.ParseDuration(v)
		case "timeout":
			hc.Timeout, err = time.ParseDuration(v)
		case "start-period":
			hc.StartPeriod, err = time.ParseDuration(v)
		case "retries":
			hc.Retries, err = strconv.Atoi(v)
		default:
			err = fmt.Errorf("flag not assembled")
		}
		if err != nil {
			return fmt.Errorf("--%s: %w", k, err)
		}
	}
	kw, cmd, _ := strings.Cut(rest, " ")
	if strings.ToUpper(kw) != "CMD" {
		return fmt.Errorf("want CMD [...], have %q", rest)
	}
	v, ok := execForm(strings.TrimSpace(cmd))
	if !ok {
		return fmt.Errorf("write the exec form (a JSON array)")
	}
	hc.Test = v
	st.Healthcheck = hc
	return nil
}

// Expand replaces ${NAME} and $NAME of the stage's ARGs in s with args'
// value, else the ARG's default.
func (st *Stage) Expand(s string, args map[string]string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		s = s[i+1:]
		var name string
		if rest, ok := strings.CutPrefix(s, "{"); ok {
			name, s, _ = strings.Cut(rest, "}")
		} else {
			j := 0
			for j < len(s) && (s[j] == '_' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			name, s = s[:j], s[j:]
		}
		if v, ok := args[name]; ok {
			b.WriteString(v)
		} else {
			b.WriteString(st.Args[name])
		}
	}
}
