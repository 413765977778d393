package relaysim

import (
	"testing"
)

func FuzzJudgeRegistration(f *testing.F) {
	f.Add([]byte(`{"bearer":"b","version":"1.0.0","nodeId":"node-1","capabilities":["http1","websocket"],"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1}}`))
	f.Add([]byte(`{"bearer":"b","version":"1.0.0-rc.1","nodeId":"n","protocol":{"name":"serve.zone/cluster-ingress","minVersion":2,"maxVersion":3}}`))
	f.Add([]byte(`{"protocol":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		reg, offerOK, e := judgeRegistration(body)
		if offerOK && (reg.Offer.MinVersion < 1 || reg.Offer.MinVersion > reg.Offer.MaxVersion) {
			t.Fatalf("offer judged well formed: %+v", reg.Offer)
		}
		if e.Len() == 0 && (!offerOK || reg.NodeID == "" || reg.Bearer == "") {
			t.Fatal("body without violations lacks a judged field")
		}
	})
}
