package acme

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	acmez "github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"
)

// Failure kinds: the label of ingress_acme_failures_total and the word Status uses.
const (
	KindCAUnreachable = "ca_unreachable" // no answer from the CA (connection, TLS, timeout)
	KindChallenge     = "challenge"      // the CA could not validate a challenge
	KindRateLimited   = "rate_limited"   // the CA's rate limits
	KindTerms         = "terms"          // the CA's terms of service were not agreed to
	KindCA            = "ca_refused"     // another problem document from the CA
	KindOther         = "other"          // anything else (storage, ...)
)

// failureKinds are every kind, so that each series exists from the start.
var failureKinds = []string{KindCAUnreachable, KindChallenge, KindRateLimited, KindTerms, KindCA, KindOther}

// shouldEmit keeps certmagic from building the per-handshake event nobody listens to.
func shouldEmit(name string) bool {
	switch name {
	case "cert_obtaining", "cert_obtained", "cert_failed", "cached_managed_cert":
		return true
	}
	return false
}

// onEvent is certmagic's event callback. It is synchronous: it only updates state, logs
// and counts. Returning an error from cert_obtaining stops that order: this is where a
// name that is not managed (any more) is refused.
func (m *Manager) onEvent(ctx context.Context, name string, data map[string]any) error {
	hostname, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	switch name {
	case "cert_obtaining":
		m.mu.Lock()
		h := m.hosts[hostname]
		if h != nil {
			h.obtaining = true
		}
		m.mu.Unlock()
		if h == nil {
			m.log.Info("acme: order refused: the hostname is not an ACME route of the table",
				zap.String("hostname", hostname), zap.Bool("renewal", renewal))
			m.emitLocal(event{Kind: "vetoed", Hostname: hostname, Renewal: renewal})
			return fmt.Errorf("acme: %s is not an ACME route of the table", hostname)
		}
		m.emitLocal(event{Kind: "obtaining", Hostname: hostname, Renewal: renewal})
	case "cert_obtained":
		m.mu.Lock()
		if h := m.hosts[hostname]; h != nil {
			h.obtaining, h.attempts, h.lastErr, h.lastKind = false, 0, "", ""
		}
		m.mu.Unlock()
		m.metrics.obtained(renewal)
		m.log.Info("acme: certificate obtained", zap.String("hostname", hostname), zap.Bool("renewal", renewal),
			zap.String("issuer", fmt.Sprint(data["issuer"])))
		m.emitLocal(event{Kind: "obtained", Hostname: hostname, Renewal: renewal})
	case "cert_failed":
		err, _ := data["error"].(error)
		if err == nil {
			err = errors.New("unknown error")
		}
		m.failed(ctx, hostname, renewal, err)
	case "cached_managed_cert":
		sans, _ := data["sans"].([]string)
		for _, s := range sans {
			m.emitLocal(event{Kind: "loaded", Hostname: s})
		}
	}
	return nil
}

// failed records, logs (once per attempt, with the CA's problem document) and counts a
// failed order.
func (m *Manager) failed(ctx context.Context, name string, renewal bool, err error) {
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		// The hostname left the table, or the ingress is stopping: not a failure.
		m.mu.Lock()
		if h := m.hosts[name]; h != nil {
			h.obtaining = false
		}
		m.mu.Unlock()
		return
	}
	kind, prob := classify(err)
	now := time.Now()
	attempt := 0
	m.mu.Lock()
	if h := m.hosts[name]; h != nil {
		h.obtaining = false
		h.attempts++
		attempt = h.attempts
		h.lastErr, h.lastKind, h.lastAt = summary(err, prob), kind, now
	}
	m.mu.Unlock()
	m.metrics.failure(kind)
	fields := []zap.Field{
		zap.String("hostname", name),
		zap.Bool("renewal", renewal),
		zap.Int("attempt", attempt),
		zap.String("kind", kind),
		zap.String("ca", m.opts.CA),
	}
	if prob != nil {
		fields = append(fields, zap.Any("problem", *prob))
	}
	fields = append(fields, zap.Error(err))
	m.log.Error("acme: certificate not obtained; certmagic retries with backoff", fields...)
	m.emitLocal(event{Kind: "failed", Hostname: name, Renewal: renewal, FailureKind: kind, Err: err})
}

// classify names a failure's kind and returns the CA's problem document when there is one.
func classify(err error) (string, *acmez.Problem) {
	var p acmez.Problem
	if errors.As(err, &p) {
		switch p.Type {
		case acmez.ProblemTypeRateLimited:
			return KindRateLimited, &p
		case acmez.ProblemTypeUnauthorized, acmez.ProblemTypeConnection, acmez.ProblemTypeDNS,
			acmez.ProblemTypeIncorrectResponse, acmez.ProblemTypeTLS, acmez.ProblemTypeCAA:
			return KindChallenge, &p
		case acmez.ProblemTypeUserActionRequired:
			return KindTerms, &p
		}
		return KindCA, &p
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, errTermsText):
		return KindTerms, nil
	case containsAny(msg, "connection refused", "no such host", "i/o timeout", "deadline exceeded",
		"network is unreachable", "connection reset", "EOF", "x509:", "tls:", "fetching the CA's directory",
		"fetching directory", "getting directory", "Client.Timeout"):
		return KindCAUnreachable, nil
	}
	return KindOther, nil
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// summary is a failure in one line for Status: the problem's type and detail when the CA
// sent one, else the error.
func summary(err error, p *acmez.Problem) string {
	if p == nil {
		return err.Error()
	}
	s := strings.TrimPrefix(p.Type, acmez.ProblemTypeNamespace)
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	for _, sp := range p.Subproblems {
		s += "; " + sp.Identifier.Value + ": " + strings.TrimPrefix(sp.Type, acmez.ProblemTypeNamespace) + ": " + sp.Detail
	}
	return s
}

// emitLocal hands e to the test hook, if any.
func (m *Manager) emitLocal(e event) {
	if f := m.notify; f != nil {
		e.at = time.Now()
		f(e)
	}
}
