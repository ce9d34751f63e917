package natsstore

import (
	"errors"
	"strings"
)

// Storage keys (CertMagic paths such as
// "certificates/local/*.example.com/*.example.com.crt") are mapped to NATS
// key-value keys, which may only hold the characters [-/_=.A-Za-z0-9] and use
// "." as a token separator:
//
//   - leading, trailing and repeated "/" are dropped;
//   - each path segment becomes one token; "/" becomes ".";
//   - in a segment, A-Z a-z 0-9 "-" and "_" are kept, every other byte
//     (".", "*", "@", "=", spaces, UTF-8 bytes...) is written as "=" and two
//     upper-case hex digits: "example.com" -> "example=2Ecom".
//
// The mapping is one-to-one, so List can give back the original paths, and
// a path prefix is a token prefix, so a directory is listed with the subject
// filter "<dir>.>" on the server.

const hexDigits = "0123456789ABCDEF"

func keepByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// splitPath returns the non-empty segments of a slash-separated path.
func splitPath(p string) []string {
	parts := strings.Split(p, "/")
	out := parts[:0]
	for _, s := range parts {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// normalizePath returns p without leading, trailing or repeated slashes.
func normalizePath(p string) string { return strings.Join(splitPath(p), "/") }

// encodeKey maps a storage path to a NATS KV key. An empty path (after
// normalization) maps to "", which callers treat as the root.
func encodeKey(p string) string {
	segs := splitPath(p)
	var b strings.Builder
	for i, s := range segs {
		if i > 0 {
			b.WriteByte('.')
		}
		for j := 0; j < len(s); j++ {
			c := s[j]
			if keepByte(c) {
				b.WriteByte(c)
				continue
			}
			b.WriteByte('=')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xF])
		}
	}
	return b.String()
}

var errBadKey = errors.New("not a key written by this storage")

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// decodeKey is the inverse of encodeKey. Keys that encodeKey cannot produce
// (written to the bucket by something else) give errBadKey.
func decodeKey(k string) (string, error) {
	if k == "" {
		return "", errBadKey
	}
	var b strings.Builder
	b.Grow(len(k))
	segStart := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '.':
			if segStart {
				return "", errBadKey // empty token
			}
			b.WriteByte('/')
			segStart = true
			continue
		case c == '=':
			if i+2 >= len(k) {
				return "", errBadKey
			}
			hi, ok1 := unhex(k[i+1])
			lo, ok2 := unhex(k[i+2])
			if !ok1 || !ok2 {
				return "", errBadKey
			}
			v := hi<<4 | lo
			if keepByte(v) || v == '/' {
				return "", errBadKey // not canonical
			}
			b.WriteByte(v)
			i += 2
		case keepByte(c):
			b.WriteByte(c)
		default:
			return "", errBadKey
		}
		segStart = false
	}
	if segStart {
		return "", errBadKey // trailing "."
	}
	return b.String(), nil
}

// subtreeFilter is the KV key filter that matches every key below the
// encoded directory dir ("" is the root).
func subtreeFilter(dir string) string {
	if dir == "" {
		return ">"
	}
	return dir + ".>"
}
