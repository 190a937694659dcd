// Package httpdate formats the Date field of answers at most once a second.
package httpdate

import (
	"net/http"
	"time"
)

// Cache keeps the Date field of the current second. One per connection:
// it is not safe for concurrent use, and a connection's writes are
// serialised already.
type Cache struct {
	sec int64
	b   []byte
	s   string
}

func (d *Cache) refresh(now time.Time) {
	if s := now.Unix(); s != d.sec || d.b == nil {
		d.sec = s
		d.b = now.UTC().AppendFormat(d.b[:0], http.TimeFormat)
		d.s = ""
	}
}

// Bytes is now's Date field, valid until the next call.
func (d *Cache) Bytes(now time.Time) []byte {
	d.refresh(now)
	return d.b
}

// String is now's Date field; made once a second, for callers that keep it.
func (d *Cache) String(now time.Time) string {
	d.refresh(now)
	if d.s == "" {
		d.s = string(d.b)
	}
	return d.s
}
