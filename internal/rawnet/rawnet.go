// Package rawnet reads and writes TCP sockets without telling Go's scheduler about each
// system call.
//
// A read or write on a non-blocking socket never waits in the kernel, yet the standard
// library makes it through syscall.Read and syscall.Write, which enter and leave the
// scheduler's "in a system call" state. On a busy ingress running on one processor
// (GOMAXPROCS=1, the benchmark's pinning, a container limited to one CPU) that state
// costs more than its bookkeeping: every call made while the runtime's monitor thread
// (sysmon) sleeps wakes it (a futex wake and a context switch on the same core), and the
// monitor then polls every 20 µs and hands the processor to another thread whenever one
// call outlasts a tick. Measured under `h2tls-64` on a two-core paravirtual machine:
// about 4,600 monitor wake-ups and 2,000 thread hand-offs per second, 13–16 % of the
// proxy's CPU (bench/README.md). Calls made with syscall.RawSyscall skip all of it.
//
// # Hot path
//
// [TCPConn.Read] and [TCPConn.Write]: one syscall.RawConn.Read or Write (the descriptor
// stays registered with Go's poller, so deadlines, Close and waiting for readiness work
// as for a *net.TCPConn) whose callback makes the raw call; no allocation. [Read],
// [Write] and [Peek] are the same raw calls for callers that run their own RawConn
// callbacks (the upstream exchange).
//
// # Limits
//
//   - Only for descriptors in non-blocking mode, as every socket of package net is. A raw
//     call that blocked would hold its processor.
//   - While the monitor sleeps it does not preempt a goroutine that runs for more than
//     10 ms; it sleeps only while every processor is idle, and any ordinary system call
//     (a log write, an accept, the relay session's socket) wakes it again.
//   - Race-detector builds use the syscall package's calls, which tell the detector
//     about the synchronization that socket traffic carries between goroutines.
//   - Elsewhere than on Linux, [Wrap] returns its argument.
package rawnet
