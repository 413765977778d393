package h2

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// The response encoder's dynamic table (Config.EncoderTableSize): what it saves on the
// wire against what it holds per connection.

// typicalAnswers is the head of each answer of a page load through the proxy: the
// document, style sheets, scripts, images and API calls, with the fields a target sends
// and the proxy adds (date, alt-svc).
func typicalAnswers() [][]hpack.HeaderField {
	type kind struct {
		ctype, cache string
		n            int
	}
	kinds := []kind{
		{"text/html; charset=utf-8", "no-cache", 1},
		{"text/css", "public, max-age=31536000, immutable", 2},
		{"application/javascript", "public, max-age=31536000, immutable", 3},
		{"image/webp", "public, max-age=86400", 6},
		{"application/json", "private, no-store", 8},
	}
	var out [][]hpack.HeaderField
	i := 0
	for _, k := range kinds {
		for range k.n {
			i++
			out = append(out, []hpack.HeaderField{
				{Name: ":status", Value: "200"},
				{Name: "content-type", Value: k.ctype},
				{Name: "cache-control", Value: k.cache},
				{Name: "etag", Value: fmt.Sprintf(`"5f3c%04x-%x"`, i*7919, i*104729)},
				{Name: "last-modified", Value: "Tue, 01 Dec 2026 10:00:00 GMT"},
				{Name: "vary", Value: "Accept-Encoding"},
				{Name: "x-content-type-options", Value: "nosniff"},
				{Name: "server", Value: "nginx"},
				{Name: "content-length", Value: strconv.Itoa(1000 + i*337)},
				{Name: "date", Value: "Thu, 03 Dec 2026 13:50:0" + strconv.Itoa(i/10) + " GMT"},
				{Name: "alt-svc", Value: `h3=":443"; ma=86400`},
			})
		}
	}
	return out
}

// encodeAnswers encodes answers with an encoder of the given table size, each field's
// strings in an arena of its answer's own, as the relay makes them (relay.fields);
// it returns the encoder and the header blocks' bytes.
func encodeAnswers(size uint32, answers [][]hpack.HeaderField) (*hpack.Encoder, int) {
	buf := new(countWriter)
	enc := hpack.NewEncoder(buf)
	if size < defaultEncoderTable {
		enc.SetMaxDynamicTableSize(size)
	}
	for _, a := range answers {
		var arena []byte
		for _, f := range a {
			arena = append(arena, f.Name...)
			arena = append(arena, f.Value...)
		}
		at := 0
		for _, f := range a {
			name := string(arena[at : at+len(f.Name)]) // a copy: stands in for the arena
			at += len(f.Name)
			value := string(arena[at : at+len(f.Value)])
			at += len(f.Value)
			_ = enc.WriteField(hpack.HeaderField{Name: name, Value: value})
		}
	}
	return enc, buf.n
}

// countWriter counts what is written to it, and keeps none of it.
type countWriter struct{ n int }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}

// TestEncoderTableCost measures, for the typical answers of a page load, the header
// blocks' bytes and the heap an encoder holds afterwards, by dynamic table size. It
// asserts what the choice of size rests on: no table holds nothing and costs bytes; a
// table saves bytes and holds memory.
func TestEncoderTableCost(t *testing.T) {
	answers := typicalAnswers()
	const encoders = 500
	held := func(size uint32) (perEncoder float64, wire int) {
		keep := make([]*hpack.Encoder, encoders)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range keep {
			keep[i], wire = encodeAnswers(size, answers)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(keep)
		return float64(after.HeapAlloc-before.HeapAlloc) / encoders, wire
	}
	type row struct {
		size uint32
		mem  float64
		wire int
	}
	var rows []row
	for _, size := range []uint32{4096, 1024, 256, 0} {
		mem, wire := held(size)
		rows = append(rows, row{size, mem, wire})
		t.Logf("table %4d B: %5d header bytes for %d answers (%.1f each), %6.0f B held per encoder",
			size, wire, len(answers), float64(wire)/float64(len(answers)), mem)
	}
	full, none := rows[0], rows[len(rows)-1]
	if none.wire <= full.wire {
		t.Errorf("without a table the answers took %d bytes, with 4096 %d: the table saves nothing?", none.wire, full.wire)
	}
	if full.mem <= none.mem {
		t.Errorf("an encoder with a 4096-byte table holds %.0f B, without one %.0f B", full.mem, none.mem)
	}
}
