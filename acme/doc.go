// Package acme gives standalone routes whose tls is {"acme": true} (contract §7) their
// certificates: it obtains and renews them from an ACME CA through certmagic, keeps them
// and the account key under the state directory (certmagic's FileStorage), and answers the
// CA's challenges on the listeners the proxy already owns.
//
// What it manages is exactly the set of hostnames whose route has "tls.acme" true in the
// table being served (Compiled.Source), re-read whenever the Store swaps tables: a hostname
// that joins is obtained in the background, one that leaves stops being renewed and served.
// Nothing else is ever requested: certmagic's on-demand issuance stays off, so a handshake
// never triggers an order, and every order certmagic is about to place is vetoed unless its
// name is managed at that moment (the cert_obtaining event). A wildcard route cannot be
// proved without DNS-01, which the ingress does not answer; it is reported, not requested.
//
// The proxy sees three hooks (proxy.Config): GetCertificate for the TLS listener (a managed
// name's certificate, or certmagic's TLS-ALPN-01 answer for a hello that offers only
// acme-tls/1), NextProtos ("acme-tls/1") and HTTPChallenge (certmagic's HTTP-01 answer on
// the plain listener, asked before routing and redirects). A managed name without a
// certificate yet gets (nil, nil) from GetCertificate, which crypto/tls turns into the
// unrecognized_name alert, as for any name without a certificate.
//
// Failures never stop anything else: each attempt that fails is logged once with the CA's
// problem document, counted by kind (Collector) and described by Status (the admin
// listener's /readyz), and certmagic retries with its backoff (1, 2, 2, 5, 10 minutes and
// on up to 6 hours, for 30 days).
//
// # Hot path
//
// GetCertificate, per TLS handshake for a name the table has no certificate for: one atomic
// load and one map lookup for the managed set; for a managed name, certmagic's cache lookup
// (a read lock, a map lookup). HTTPChallenge runs only for /.well-known/acme-challenge/
// requests. Everything else is cold path.
//
// acme imports routetable (types only); it never imports proxy.
package acme
