package config

import "time"

// SessionType is how a session is carried: in a cookie or a header.
type SessionType string

const (
	SessionCookie SessionType = "Cookie"
	SessionHeader SessionType = "Header"
)

// SessionPersistence is a route rule's sessionPersistence: a request
// carrying a valid session goes to the endpoint that answered the one
// that opened it, over any load balancing, while that endpoint is among
// the rule's and neither down nor ejected. The data plane seals the
// session's value (proxy/session.go): the endpoint is not named in clear,
// and a client can neither forge one nor extend its life.
type SessionPersistence struct {
	Type SessionType
	// Name is the cookie's name, or the header's canonical name.
	Name string
	// Path is the cookie's Path attribute.
	Path string
	// Permanent gives the cookie Max-Age and Expires of AbsoluteTimeout;
	// otherwise it is a session cookie.
	Permanent bool
	// AbsoluteTimeout, when not zero, ends a session that long after it
	// was opened, whatever its cookie's attributes say.
	AbsoluteTimeout time.Duration
}

// RetryBudget is an XBackendTrafficPolicy's retryConstraint: the retries
// Portico makes toward one Service (a route's retry policy, whatever
// failed: a status code or a connection) while, over the last Interval,
// they stay within Percent of the requests sent to it (retries
// included), and in any case MinRetries per MinInterval. A retry past
// both is not sent: the client gets 503.
type RetryBudget struct {
	// Policy is the XBackendTrafficPolicy, "namespace/name", for messages.
	Policy string
	// Percent is the share of the requests of the interval that retries
	// may be, 0 to 100.
	Percent int
	// Interval is the window the share is counted over.
	Interval time.Duration
	// MinRetries retries per MinInterval are allowed whatever the share.
	MinRetries  int
	MinInterval time.Duration
}
