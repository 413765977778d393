package upstream

import "time"

// Limits bound what the pools keep and what an exchange may take.
type Limits struct {
	// IdleTimeout closes a connection idle for longer (checked at Get and by Sweep).
	IdleTimeout time.Duration
	// MaxIdle is the number of idle connections kept per target address.
	MaxIdle int
	// MaxHeaderBytes is the largest response head read from a target.
	MaxHeaderBytes int64
	// HeaderTimeout is how long a target may take to start its answer.
	HeaderTimeout time.Duration
	// Max1xx is the number of interim answers accepted before the final one.
	Max1xx int
}

// DefaultLimits are the limits of both HTTP/1.1 paths; headerTimeout is the operator's
// --response-header-timeout.
func DefaultLimits(headerTimeout time.Duration) Limits {
	return Limits{
		IdleTimeout:    90 * time.Second,
		MaxIdle:        1024,
		MaxHeaderBytes: 1 << 20,
		HeaderTimeout:  headerTimeout,
		Max1xx:         5,
	}
}
