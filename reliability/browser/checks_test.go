package browser

// The page's checks: what runChecks is asked to do, what it reports, and the comparison
// with what the target served.

import (
	"testing"
)

// checkConfig is what the page's runChecks does.
type checkConfig struct {
	Images    int   `json:"images"`
	JSON      int   `json:"json"`
	Upload    int   `json:"upload"`
	WSSizes   []int `json:"wsSizes"` // one WebSocket message of each size
	SSEEvents int   `json:"sseEvents"`
}

var checks = checkConfig{
	Images:    100,
	JSON:      40,
	Upload:    2 << 20,
	WSSizes:   wsSizes(200),
	SSEEvents: 50,
}

// wsSizes are the sizes of n WebSocket messages: around each of the frame header's length
// boundaries (125/126, 65535/65536) in turn, with a 1 MiB one every hundred (about 6 MiB
// in all: enough to cross every boundary, small enough for a loaded CI machine under -race).
func wsSizes(n int) []int {
	cycle := []int{0, 1, 125, 126, 127, 1000, 4096, 16383, 16384, 65535, 65536, 65537, 100000}
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = cycle[i%len(cycle)]
		if i%100 == 99 {
			sizes[i] = 1 << 20
		}
	}
	return sizes
}

// maxSSEGap is the longest time in ms the page may wait for an event (sent every
// ssePeriod): generous for a loaded CI machine, shorter than a 4 KiB buffer takes to fill
// (over 3 s), so that a stream held back by a buffer fails.
const maxSSEGap = 2000

// settled is one check's outcome in the page: its facts, or the error it ended with.
type settled[T any] struct {
	OK    *T      `json:"ok"`
	Error string  `json:"error"`
	Ms    float64 `json:"ms"` // from the start of the checks to this one's end
}

type checkResults struct {
	ImagesRaw settled[[]struct {
		I     int  `json:"i"`
		W     int  `json:"w"`
		H     int  `json:"h"`
		Error bool `json:"error"`
	}] `json:"images"`
	JSON settled[[]struct {
		Status int    `json:"status"`
		Sent   int    `json:"sent"`
		I      int    `json:"i"`
		Square int    `json:"square"`
		PadLen int    `json:"padLen"`
		Method string `json:"method"`
	}] `json:"json"`
	Upload settled[struct {
		Status       int    `json:"status"`
		Size         int    `json:"size"`
		SHA256       string `json:"sha256"`
		TargetSize   int    `json:"targetSize"`
		TargetSHA256 string `json:"targetSha256"`
	}] `json:"upload"`
	Download settled[struct {
		Status int    `json:"status"`
		Size   int    `json:"size"`
		SHA256 string `json:"sha256"`
	}] `json:"download"`
	WebSocket settled[struct {
		Sent       int    `json:"sent"`
		Received   int    `json:"received"`
		Bytes      int64  `json:"bytes"`
		Mismatches []int  `json:"mismatches"`
		Whoami     string `json:"whoami"`
		Closed     closed `json:"closed"`
	}] `json:"websocket"`
	SSE settled[struct {
		IDs      []int   `json:"ids"`
		MaxGapMs float64 `json:"maxGapMs"`
		Errors   int     `json:"errors"`
	}] `json:"sse"`
}

// closed is a WebSocket's close event in the page.
type closed struct {
	Code   int    `json:"code"`
	Reason string `json:"reason"`
	Clean  bool   `json:"clean"`
}

// verifyChecks compares the page's facts with what the target served.
func verifyChecks(t *testing.T, r *checkResults) {
	t.Helper()
	for name, err := range map[string]string{"images": r.ImagesRaw.Error, "json": r.JSON.Error, "upload": r.Upload.Error,
		"download": r.Download.Error, "websocket": r.WebSocket.Error, "sse": r.SSE.Error} {
		if err != "" {
			t.Errorf("page check %s failed: %s", name, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	imgs := *r.ImagesRaw.OK
	if len(imgs) != checks.Images {
		t.Errorf("%d images reported, want %d", len(imgs), checks.Images)
	}
	for _, im := range imgs {
		if w, h := imageSize(im.I); im.Error || im.W != w || im.H != h {
			t.Errorf("image %d: error %t, %dx%d, want %dx%d", im.I, im.Error, im.W, im.H, w, h)
		}
	}
	js := *r.JSON.OK
	if len(js) != checks.JSON {
		t.Errorf("%d JSON answers, want %d", len(js), checks.JSON)
	}
	for _, j := range js {
		wantPad, wantMethod := 0, "GET"
		if j.Sent%2 == 1 {
			wantPad, wantMethod = j.Sent*100, "POST"
		}
		if j.Status != 200 || j.I != j.Sent || j.Square != j.Sent*j.Sent || j.PadLen != wantPad || j.Method != wantMethod {
			t.Errorf("JSON %d: %+v", j.Sent, j)
		}
	}
	if u := r.Upload.OK; u.Status != 200 || u.Size != checks.Upload || u.TargetSize != u.Size || u.TargetSHA256 != u.SHA256 {
		t.Errorf("upload: sent %d bytes (SHA-256 %s), the target got %d (%s), status %d", u.Size, u.SHA256, u.TargetSize, u.TargetSHA256, u.Status)
	}
	if d := r.Download.OK; d.Status != 200 || d.Size != downloadSize || d.SHA256 != downloadSHA256 {
		t.Errorf("download: %d bytes, SHA-256 %s, status %d; want %d bytes, %s", d.Size, d.SHA256, d.Status, downloadSize, downloadSHA256)
	}
	if w := r.WebSocket.OK; w.Sent != len(checks.WSSizes) || w.Received != w.Sent || len(w.Mismatches) > 0 || w.Whoami != "target:a" || w.Closed.Code != 1000 {
		t.Errorf("websocket: sent %d, %d echoes came back, mismatched %v, whoami %q, closed %+v", w.Sent, w.Received, w.Mismatches, w.Whoami, w.Closed)
	}
	s := r.SSE.OK
	if s.Errors != 0 {
		t.Errorf("SSE: %d errors in the page (a reconnect)", s.Errors)
	}
	if len(s.IDs) != checks.SSEEvents {
		t.Errorf("SSE: %d events, want %d", len(s.IDs), checks.SSEEvents)
	}
	if s.MaxGapMs > maxSSEGap {
		t.Errorf("SSE: waited %.0f ms for an event, want at most %d (one every %s; a buffered stream?)", s.MaxGapMs, maxSSEGap, ssePeriod)
	}
	for i, id := range s.IDs {
		if id != i {
			t.Errorf("SSE: event %d has id %d: a gap (ids %v)", i, id, s.IDs)
			break
		}
	}
}
