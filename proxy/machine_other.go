//go:build !linux

package proxy

// machineMemory is unknown here: the defaults fall back to their least (bounds.go).
func machineMemory() uint64 { return 0 }

// descriptorLimit is unknown here.
func descriptorLimit() uint64 { return 0 }
