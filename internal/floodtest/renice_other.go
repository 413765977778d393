//go:build !linux

package floodtest

// renice does nothing here: the flood runs at the niceness the process has.
func renice(int) error { return nil }
