package redisstore

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Endpoint is a judged --acme-storage URL: redis://[user[:password]@]host[:port][/db], or
// rediss:// for TLS.
type Endpoint struct {
	TLS      bool
	Host     string
	Port     int
	Username string
	Password string
	DB       int
}

// maxDB bounds the database number (Redis has 16 by default; a server may have more).
const maxDB = 1 << 16

// ParseURL judges raw. Its errors never quote raw, which may hold the password (the url
// package's own errors quote the whole URL, so they are not passed on).
func ParseURL(raw string) (Endpoint, error) {
	const form = "redis://[user:password@]host:port/db or rediss://… (TLS)"
	u, err := url.Parse(raw)
	if err != nil {
		return Endpoint{}, errors.New("is not a URL of the form " + form)
	}
	var e Endpoint
	switch u.Scheme {
	case "redis":
	case "rediss":
		e.TLS = true
	default:
		return Endpoint{}, errors.New("must start with redis:// or rediss:// (" + form + ")")
	}
	if u.Opaque != "" || u.Host == "" {
		return Endpoint{}, errors.New("names no host (" + form + ")")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return Endpoint{}, errors.New("takes no query (?…) or fragment (#…): " + form)
	}
	e.Host = u.Hostname()
	if e.Host == "" {
		return Endpoint{}, errors.New("names no host (" + form + ")")
	}
	e.Port = 6379
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Endpoint{}, errors.New("has a port that is not from 1 to 65535")
		}
		e.Port = n
	} else if strings.HasSuffix(u.Host, ":") {
		return Endpoint{}, errors.New("has an empty port")
	}
	if u.User != nil {
		e.Username = u.User.Username()
		e.Password, _ = u.User.Password()
	}
	switch db := strings.Trim(u.Path, "/"); {
	case db == "":
	case strings.Contains(db, "/"):
		return Endpoint{}, errors.New("has a path other than /db (a database number)")
	default:
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 || n >= maxDB {
			return Endpoint{}, errors.New("has a database that is not a number from 0 (its path is /db)")
		}
		e.DB = n
	}
	return e, nil
}

// Addr is host:port.
func (e Endpoint) Addr() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// Redacted is the URL with the password as "xxxxx": what logs and errors show.
func (e Endpoint) Redacted() string {
	var b strings.Builder
	if e.TLS {
		b.WriteString("rediss://")
	} else {
		b.WriteString("redis://")
	}
	if e.Username != "" || e.Password != "" {
		b.WriteString(url.PathEscape(e.Username))
		if e.Password != "" {
			b.WriteString(":xxxxx")
		}
		b.WriteByte('@')
	}
	b.WriteString(e.Addr())
	b.WriteString("/" + strconv.Itoa(e.DB))
	return b.String()
}

// CheckPrefix judges a key prefix: 1 to 128 characters of letters, digits and . _ - : /
// (no glob character, no space).
func CheckPrefix(p string) error {
	if p == "" || len(p) > 128 {
		return errors.New("must be 1 to 128 characters")
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-:/", c) >= 0) {
			return errors.New("may hold only letters, digits and . _ - : /")
		}
	}
	return nil
}
