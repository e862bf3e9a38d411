package docs

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestChangelog: CHANGELOG.md keeps the release section format it
// describes: outside code blocks, every section is Unreleased or a version
// with its date, newest first, and every subsection one of Keep a
// Changelog's.
func TestChangelog(t *testing.T) {
	release := regexp.MustCompile(`^## \[(\d+)\.(\d+)\.(\d+)\] - \d{4}-\d{2}-\d{2}$`)
	kinds := []string{"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
	inCode, sections := false, 0
	var last []int
	for i, line := range strings.Split(read(t, "../CHANGELOG.md"), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		switch {
		case inCode:
		case line == "## [Unreleased]":
			if sections > 0 {
				t.Errorf("line %d: Unreleased must come first", i+1)
			}
			sections++
		case strings.HasPrefix(line, "## "):
			m := release.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("line %d: %q is not \"## [X.Y.Z] - YYYY-MM-DD\"", i+1, line)
				continue
			}
			v := make([]int, 3)
			for j := range v {
				v[j], _ = strconv.Atoi(m[j+1])
			}
			if last != nil && slices.Compare(last, v) <= 0 {
				t.Errorf("line %d: %s is not older than the section above", i+1, line)
			}
			last = v
			sections++
		case strings.HasPrefix(line, "### "):
			if !slices.Contains(kinds, strings.TrimPrefix(line, "### ")) {
				t.Errorf("line %d: %q is not one of %v", i+1, line, kinds)
			}
		}
	}
	if sections == 0 {
		t.Error("no section")
	}
}
