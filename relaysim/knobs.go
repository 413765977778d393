package relaysim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/serve-zone/ingress/relay"
)

// SetTable stores a table under revision; the newest revision held is served. It does not
// push a hint (see PushHint) and clears SetTableNull. The table is served as given, unjudged.
func (s *Server) SetTable(rawTable json.RawMessage, revision int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tables[revision] = append(json.RawMessage(nil), rawTable...)
	if !s.hasTable || revision > s.newest {
		s.newest = revision
	}
	s.hasTable = true
	s.tableNull = false
}

// SetTableNull makes the relay say it has computed no table: {"table":null} and accepted
// registrations with revision null, until the next SetTable.
func (s *Server) SetTableNull() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tableNull = true
}

// ExpectedBearer makes registrations with another bearer refused with bearer-refused
// (retryAfterMs 1000); "" accepts any.
func (s *Server) ExpectedBearer(b string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bearer = b
}

// RefuseRegistrations refuses the next count registrations with
// cluster-ingress-registration-refused {reason, retryAfterMs}; count < 0 refuses until
// cleared, count 0 clears. The values are sent as given, so tests can send out-of-range ones.
func (s *Server) RefuseRegistrations(reason string, retryAfterMs int64, count int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.regRefuse = set(refusal{reason, retryAfterMs}, count)
}

// RefuseProtocol answers the next count registrations with a protocol refusal carrying
// offer; count < 0 until cleared, 0 clears.
func (s *Server) RefuseProtocol(offer Offer, count int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.protoRef = set(offer, count)
}

// SetRegisterErrorData answers the next count registrations with an error whose data is raw
// (for malformed-refusal tests); count < 0 until cleared, 0 clears.
func (s *Server) SetRegisterErrorData(raw json.RawMessage, count int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.regData = set(append(json.RawMessage(nil), raw...), count)
}

// SetDelay delays every answer to method by d (0 or negative: no delay).
func (s *Server) SetDelay(method string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		delete(s.delays, method)
		return
	}
	s.delays[method] = d
}

// DropAnswers never answers the next count calls of method (count < 0: until cleared, 0
// clears). Only methods relaysim serves can be dropped.
func (s *Server) DropAnswers(method string, count int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if count == 0 {
		delete(s.drops, method)
		return
	}
	s.drops[method] = count
}

// CloseSessions closes every ingress socket (with a closing handshake); the ingress may
// connect again.
func (s *Server) CloseSessions() {
	for _, p := range s.peers() {
		_ = p.Close()
	}
}

// Connected returns the number of open ingress sockets.
func (s *Server) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

func (s *Server) peers() []*relay.Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*relay.Peer(nil), s.sessions...)
}

// PushHint sends pushClusterIngressRouteTableChanged {revision} to every connected ingress
// and returns their errors joined.
func (s *Server) PushHint(ctx context.Context, revision int64) error {
	peers := s.peers()
	if len(peers) == 0 {
		return ErrNoIngress
	}
	var errs []error
	for _, p := range peers {
		if _, err := p.Call(ctx, "pushClusterIngressRouteTableChanged", map[string]int64{"revision": revision}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// QueryStatistics calls getClusterTrafficStatistics with req on the first connected ingress
// and returns the raw response.
func (s *Server) QueryStatistics(ctx context.Context, req any) (json.RawMessage, error) {
	peers := s.peers()
	if len(peers) == 0 {
		return nil, ErrNoIngress
	}
	return peers[0].Call(ctx, "getClusterTrafficStatistics", req)
}

// Calls returns a copy of every call received so far, in arrival order.
func (s *Server) Calls() []RecordedCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RecordedCall(nil), s.calls...)
}

// WaitCalls waits until at least n calls of method were received, or ctx ends.
func (s *Server) WaitCalls(ctx context.Context, method string, n int) error {
	for {
		s.mu.Lock()
		got := 0
		for _, c := range s.calls {
			if c.Method == method {
				got++
			}
		}
		ch := s.callsCh
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("relaysim: %d of %d %s calls: %w", got, n, method, ctx.Err())
		}
	}
}

// register answers registerClusterIngress: a protocol refusal (forced or judged) first,
// then registration-invalid, then the error-data, refusal and bearer knobs, else acceptance.
func (s *Server) register(_ context.Context, req json.RawMessage) (any, error) {
	reg, offerOK, verr := judgeRegistration(req)
	s.mu.Lock()
	defer s.mu.Unlock()
	if offer, ok := take(&s.protoRef); ok {
		return nil, protocolRefusal(offer)
	}
	if offerOK && !shares(reg.Offer) {
		return nil, protocolRefusal(OwnOffer)
	}
	if verr.Len() > 0 {
		return nil, registrationRefusal(ReasonRegistrationInvalid, 1000)
	}
	if data, ok := take(&s.regData); ok {
		return nil, &relay.RemoteError{Text: registrationRefusedText, Data: data}
	}
	if r, ok := take(&s.regRefuse); ok {
		return nil, registrationRefusal(r.Reason, r.RetryAfterMs)
	}
	if s.bearer != "" && reg.Bearer != s.bearer {
		return nil, registrationRefusal(ReasonBearerRefused, 1000)
	}
	var revision *int64
	if s.hasTable && !s.tableNull {
		v := s.newest
		revision = &v
	}
	return struct {
		Accepted bool   `json:"accepted"`
		Revision *int64 `json:"revision"`
		Protocol Offer  `json:"protocol"`
	}{true, revision, OwnOffer}, nil
}

func protocolRefusal(offer Offer) *relay.RemoteError {
	data, _ := json.Marshal(struct {
		Code  string `json:"code"`
		Offer Offer  `json:"offer"`
	}{"protocol-refused", offer})
	return &relay.RemoteError{Text: protocolRefusedText, Data: data}
}

func registrationRefusal(reason string, retryAfterMs int64) *relay.RemoteError {
	data, _ := json.Marshal(struct {
		Code         string `json:"code"`
		Reason       string `json:"reason"`
		RetryAfterMs int64  `json:"retryAfterMs"`
	}{"cluster-ingress-registration-refused", reason, retryAfterMs})
	return &relay.RemoteError{Text: registrationRefusedText, Data: data}
}

// routeTable answers getClusterIngressRouteTable with the newest table, or null.
func (s *Server) routeTable(_ context.Context, req json.RawMessage) (any, error) {
	if errs := judgeTableRequest(req); len(errs) > 0 {
		return nil, relay.RequestInvalid(errs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.hasTable || s.tableNull {
		return json.RawMessage(`{"table":null}`), nil
	}
	t := s.tables[s.newest]
	out := make(json.RawMessage, 0, len(t)+10)
	out = append(out, `{"table":`...)
	out = append(out, t...)
	out = append(out, '}')
	return out, nil
}
