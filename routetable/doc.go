// Package routetable owns the route table of contract §6: its wire types and exact-schema
// decoder, the validator that judges every rule, the compiled immutable table the proxy
// routes with, the [Store] that swaps tables in whole (remembering applied and refused
// revisions and the last-known-good file), and the standalone file watcher of §7.
//
// The hot path starts at [Store.Load] (one atomic load) followed by [Compiled.Lookup] or
// [Compiled.GetCertificate]: no lock, no map write, no allocation. Everything else here
// (decode, validate, compile, persist, watch) is cold path and runs when a table changes.
package routetable
