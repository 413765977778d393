package main

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
)

// goFixed is, per Go release line, the first release in which .ci/run's govulncheck gate
// (its pinned vulnerability database, VULNDB_VERSION) finds no called standard-library
// vulnerability; older lines than these cannot build the module (go.mod). Keep it in
// step with .ci/run's GOTOOLCHAIN and VULNDB_VERSION.
var goFixed = map[int]int{26: 10, 27: 3}

// goToolchain is the release the README's commands and .ci/run pin (GOTOOLCHAIN).
const goToolchain = "go1.27.3"

// goVersion is the Go release the binary was built with (a variable for the tests).
var goVersion = runtime.Version

// vulnerableGo says, for a binary built with the Go release v, why that release is one
// .ci/run's gate would refuse, or "" when it is not (newer lines, development builds).
func vulnerableGo(v string) string {
	rest, ok := strings.CutPrefix(v, "go1.")
	if !ok {
		return "" // a development build ("devel go1.28-…"): not judged
	}
	minorText, patchText, _ := strings.Cut(rest, ".")
	if i := strings.IndexAny(minorText, "rcbeta"); i >= 0 { // go1.27rc1: before go1.27.0
		minorText, patchText = minorText[:i], "-1"
	}
	minor, err := strconv.Atoi(minorText)
	if err != nil {
		return ""
	}
	patch := 0
	if patchText != "" {
		if patch, err = strconv.Atoi(patchText); err != nil {
			return ""
		}
	}
	newest := 0
	for line := range goFixed {
		newest = max(newest, line)
	}
	fixed, known := goFixed[minor]
	if minor > newest || (known && patch >= fixed) {
		return ""
	}
	var fixes []string
	for line := minor; line <= newest; line++ {
		if p, ok := goFixed[line]; ok {
			fixes = append(fixes, fmt.Sprintf("go1.%d.%d", line, p))
		}
	}
	return fmt.Sprintf("built with %s, which has known vulnerabilities in standard-library code the ingress calls (fixed in %s); "+
		"rebuild it with GOTOOLCHAIN=%s (see docs/deployment.md)", v, strings.Join(fixes, " and "), goToolchain)
}
