// Package reliability holds the reliability and security suite: tests that build the real
// ingress binary once (without -race, so its timing is real) and attack it over loopback
// with relay faults, target faults, table swaps under load, restarts, hostile clients and
// secrets, asserting after each that it still serves, counted every failure once with the
// right kind, and came back to its baseline of goroutines and memory.
//
// The long soaks run with -reliability.long (see bench/README.md for their figures). There
// is no hot path here: the package has only tests.
package reliability
