// Package env reads and judges the SERVEZONE_* variables of contract §1.
//
// The bearer is held in a [Bearer], whose every printed form is "[redacted]"; only
// [Bearer.Reveal], called by the registration code, yields the value.
package env
