// Package archtest holds one test, TestImportRules, that keeps the package graph the
// shape docs/architecture.md draws: data flows one way (env, relay and stats are leaves;
// the data plane never sees the session), protocol codecs and upstream pools under
// proxy/internal import nothing of ours but domain-free internal packages, and test
// support never reaches a shipped package. It reads import clauses with go/parser; it
// builds nothing.
package archtest
