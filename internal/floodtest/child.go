package floodtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// The attacker runs in a process of its own: attackers are other machines, or at least
// other processes, in the world the figures are about. Run in the measuring process, its
// frame writing took the processors of the very Go scheduler that wakes the bystanders'
// goroutines, which then waited on the attacker rather than on the server
// (reliability/h2flood_test.go found this first). The child is the measuring program run
// again with the attack in an environment variable.

// RunInChild runs a in a child process: exe (the calling program, os.Args[0]) run again
// with env set to a, which must call RunChild(env) first thing. It returns the child's
// Result.
func RunInChild(ctx context.Context, exe, env string, a Attack) (Result, error) {
	spec, err := json.Marshal(a)
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.OpenLimit+a.Duration+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), env+"="+string(spec))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("attacker process: %v\n%s%s", err, out.String(), errOut.String())
	}
	var res Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return Result{}, fmt.Errorf("attacker process said %q: %v", out.String(), err)
	}
	return res, nil
}

// RunChild is the child's side of RunInChild: when env is set, it runs the attack it
// holds, prints the Result as JSON on stdout and returns true (the caller then exits);
// otherwise it returns false at once.
func RunChild(env string) bool {
	spec := os.Getenv(env)
	if spec == "" {
		return false
	}
	var a Attack
	if err := json.Unmarshal([]byte(spec), &a); err != nil {
		fmt.Fprintln(os.Stderr, "bad", env, err)
		os.Exit(2)
	}
	res, err := Run(context.Background(), a)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(1)
	}
	return true
}
