// Package browser holds the suite that drives a real browser through the real ingress:
// Debian's chromium, headless, over the DevTools protocol (chromedp), against the ingress
// binary in standalone mode, with a target of its own that serves a page of checks
// (parallel images, JSON fetches, an upload and a download checked by hash, WebSocket
// messages each way, Server-Sent Events) and a CA of its own that chromium trusts through
// an NSS database in a temporary profile (never by ignoring certificate errors). It
// asserts the protocol the browser used, from the DevTools Network events and the
// ingress's access log, on HTTP/1.1, HTTP/2 and HTTP/3, WebSockets over each, a WebSocket
// that stays open through route-table changes, and the redirect from http://.
//
// Without chromium (or certutil) the tests skip with the reason, unless CI is set: then
// they fail. There is no hot path here: the package has only tests.
package browser
