package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The file is read into a yaml.Node tree and walked by hand rather than
// decoded into structs: yaml.v3's own strict mode (KnownFields) reports
// "line 7: field colum not found in type ...", while users need the key path
// ("tables[1].colum: unknown key") and the same for wrong value types.

// field is one mapping entry as found in the file.
type field struct {
	path string
	val  *yaml.Node
}

// fields is what mapping found: present keys only.
type fields map[string]field

func (f fields) has(key string) bool { _, ok := f[key]; return ok }

// join builds a key path: join("", "tls") = "tls", join("tls", "key_file") =
// "tls.key_file".
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// mapping reads a mapping node whose keys must be among known. Unknown and
// repeated keys are errors naming the key.
func mapping(n *yaml.Node, path string, known ...string) (fields, error) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: expected a mapping, got %s", pathOrTop(path), describe(n))
	}
	out := make(fields, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s: keys must be plain names (line %d)", pathOrTop(path), k.Line)
		}
		kp := join(path, k.Value)
		if !slices.Contains(known, k.Value) {
			return nil, fmt.Errorf("%s: unknown key (line %d)", kp, k.Line)
		}
		if _, dup := out[k.Value]; dup {
			return nil, fmt.Errorf("%s: key given twice (line %d)", kp, k.Line)
		}
		out[k.Value] = field{path: kp, val: resolve(v)}
	}
	return out, nil
}

func pathOrTop(path string) string {
	if path == "" {
		return "configuration"
	}
	return path
}

// describe names a node's shape for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "an unsupported value"
}

func (f field) scalar() (*yaml.Node, error) {
	if f.val.Kind != yaml.ScalarNode || isNull(f.val) {
		return nil, fmt.Errorf("%s: expected a value, got %s", f.path, describe(f.val))
	}
	return f.val, nil
}

// str returns a non-empty string value. Numbers are accepted as their text.
func (f field) str() (string, error) {
	n, err := f.scalar()
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(n.Value) == "" {
		return "", fmt.Errorf("%s: must not be empty", f.path)
	}
	return n.Value, nil
}

func (f field) integer() (int, error) {
	n, err := f.scalar()
	if err != nil {
		return 0, err
	}
	var v int
	if n.Tag != "!!int" || n.Decode(&v) != nil {
		return 0, fmt.Errorf("%s: expected an integer, got %q", f.path, n.Value)
	}
	return v, nil
}

func (f field) positiveInt() (int, error) {
	v, err := f.integer()
	if err == nil && v <= 0 {
		err = fmt.Errorf("%s: must be positive, got %d", f.path, v)
	}
	return v, err
}

func (f field) nonNegativeInt() (int, error) {
	v, err := f.integer()
	if err == nil && v < 0 {
		err = fmt.Errorf("%s: must not be negative, got %d", f.path, v)
	}
	return v, err
}

func (f field) boolean() (bool, error) {
	n, err := f.scalar()
	if err != nil {
		return false, err
	}
	var v bool
	if n.Tag != "!!bool" || n.Decode(&v) != nil {
		return false, fmt.Errorf("%s: expected true or false, got %q", f.path, n.Value)
	}
	return v, nil
}

func (f field) duration() (time.Duration, error) {
	n, err := f.scalar()
	if err != nil {
		return 0, err
	}
	d, perr := ParseDuration(n.Value)
	if perr != nil {
		return 0, fmt.Errorf("%s: invalid duration %q", f.path, n.Value)
	}
	return d, nil
}

func (f field) positiveDuration() (time.Duration, error) {
	d, err := f.duration()
	if err == nil && d <= 0 {
		err = fmt.Errorf("%s: must be positive, got %q", f.path, f.val.Value)
	}
	return d, err
}

// strings returns a list of non-empty strings (an empty list is allowed).
func (f field) strings() ([]string, error) {
	items, err := f.list()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(items))
	for i, item := range items {
		if out[i], err = item.str(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// list returns the items of a list, each with its indexed path.
func (f field) list() ([]field, error) {
	if f.val.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s: expected a list, got %s", f.path, describe(f.val))
	}
	out := make([]field, len(f.val.Content))
	for i, item := range f.val.Content {
		out[i] = field{path: fmt.Sprintf("%s[%d]", f.path, i), val: resolve(item)}
	}
	return out, nil
}
