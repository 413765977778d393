package routetable

// The wire types of contract §6. They are decoded with an exact-schema decoder (see
// decode.go), never with encoding/json's permissive defaults, and judged by Validate.

// Table is one IClusterIngressRouteTable.
type Table struct {
	Revision     int64         `json:"revision"`
	Routes       []Route       `json:"routes"`
	Certificates []Certificate `json:"certificates"`
}

// Route is one IClusterIngressRoute. TLS nil means the route is served over plain HTTP only.
type Route struct {
	Hostname string    `json:"hostname"`
	Targets  []Target  `json:"targets"`
	TLS      *RouteTLS `json:"tls"`
}

// RouteTLS is a route's TLS settings. Exactly one of CertificateID (relay tables and
// standalone files) and ACME (standalone files only) is set.
type RouteTLS struct {
	CertificateID string `json:"certificateId,omitempty"`
	ACME          bool   `json:"acme,omitempty"`
	RedirectHTTP  bool   `json:"redirectHttp"`
}

// Target is one IClusterIngressTarget: a workload lease address and its listening port.
type Target struct {
	LeaseID string `json:"leaseId"`
	Address string `json:"address"`
	Port    int    `json:"port"`
}

// Certificate is one IClusterIngressCertificate. PrivateKeyPEM is a secret: String and
// GoString never print it.
//
// In a standalone file (DecodeFile) the PEM may instead come from files named by
// certificateFile and privateKeyFile; CertificateFile and PrivateKeyFile then hold those
// names resolved against the file's directory, and the PEM fields what the files held.
// They are never part of the wire schema (relay tables, the persisted table).
type Certificate struct {
	ID             string `json:"id"`
	CertificatePEM string `json:"certificatePem"`
	PrivateKeyPEM  string `json:"privateKeyPem"`

	CertificateFile string `json:"-"`
	PrivateKeyFile  string `json:"-"`
}

// String names the certificate without its key (and without an id that is not a valid
// Id, which could be anything, a pasted key included).
func (c Certificate) String() string { return "certificate " + safeID(c.ID) }

// GoString names the certificate without its key, so %#v cannot leak it.
func (c Certificate) GoString() string {
	return "routetable.Certificate{ID:" + safeID(c.ID) + ", PrivateKeyPEM:[redacted]}"
}
