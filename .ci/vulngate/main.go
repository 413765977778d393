// Command vulngate reads govulncheck's JSON stream (-format json) on standard input and
// decides CI's verdict: a vulnerability the code calls in a required module fails it
// (exit status 1), since go.mod can pin the fixed version; one in the standard library
// fails it only with -stdlib=fail, since its fix is a newer Go toolchain, which the CI
// machine provides. Every called finding is listed with where it is fixed.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
}

type message struct {
	Finding *struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	} `json:"finding"`
	OSV *struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	} `json:"osv"`
}

func main() {
	stdlib := flag.String("stdlib", "warn", "what a called standard-library vulnerability does: warn or fail")
	flag.Parse()
	if *stdlib != "warn" && *stdlib != "fail" {
		fmt.Fprintln(os.Stderr, "vulngate: -stdlib is warn or fail")
		os.Exit(2)
	}
	type key struct{ id, module string }
	called := map[key]string{} // → fixed version
	summary := map[string]string{}
	dec := json.NewDecoder(os.Stdin)
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "vulngate: reading govulncheck's output:", err)
			os.Exit(2)
		}
		if m.OSV != nil {
			summary[m.OSV.ID] = m.OSV.Summary
		}
		if f := m.Finding; f != nil && len(f.Trace) > 0 && f.Trace[0].Function != "" {
			called[key{f.OSV, f.Trace[0].Module}] = f.FixedVersion
		}
	}
	keys := make([]key, 0, len(called))
	for k := range called {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].module+keys[i].id < keys[j].module+keys[j].id
	})
	fail := false
	for _, k := range keys {
		verdict := "FAIL"
		if k.module == "stdlib" && *stdlib == "warn" {
			verdict = "warn (fixed by a newer Go toolchain)"
		} else {
			fail = true
		}
		fmt.Printf("%s  %s in %s, fixed in %s: %s\n", verdict, k.id, k.module, called[k], summary[k.id])
	}
	if len(keys) == 0 {
		fmt.Println("vulngate: no vulnerability the code calls")
	}
	if fail {
		os.Exit(1)
	}
}
