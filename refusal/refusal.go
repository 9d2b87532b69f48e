// Package refusal is the one table of the contract's error codes and
// their HTTP statuses, and the error that carries a code. Parsers and
// limits refuse with a code and a message and never pick a status; the
// HTTP surface answers {"error": {"code": ..., "message": ...}} with the
// status this table gives the code, and the client decodes the same
// shape. A code's status is therefore written down once, here, and cannot
// drift between the package that refuses and the one that answers.
package refusal

import (
	"fmt"
	"net/http"
	"time"
)

// Code is one of the contract's error codes: a short snake_case word.
type Code string

// The contract's codes (sections Names to Limits, and Errors), with the
// status of each in Status.
const (
	InvalidName           Code = "invalid_name"
	InvalidType           Code = "invalid_type"
	InvalidJSON           Code = "invalid_json"
	InvalidPosition       Code = "invalid_position"
	InvalidOp             Code = "invalid_op"
	InvalidTTL            Code = "invalid_ttl"
	InvalidIdempotencyKey Code = "invalid_idempotency_key"
	// InvalidSelector is a tenant stream's or read's selectors: too many,
	// too long, or empty.
	InvalidSelector Code = "invalid_selector"
	// InvalidIssuer is an issuer's registration that could not verify
	// tokens (or one past the tenant's number of issuers).
	InvalidIssuer Code = "invalid_issuer"
	// InvalidSettings is a tenant's Mercure settings that the server
	// could not apply (a field it does not know, an origin that is none).
	InvalidSettings Code = "invalid_settings"
	// InvalidBody is a publish body that could not be read whole (it
	// came too slowly or the connection failed), which is not a JSON
	// error: nothing was there to parse.
	InvalidBody          Code = "invalid_body"
	TooLarge             Code = "too_large"
	IdempotencyKeyReused Code = "idempotency_key_reused"
	Unauthorized         Code = "unauthorized"
	Forbidden            Code = "forbidden"
	UnknownTenant        Code = "unknown_tenant"
	UnknownIssuer        Code = "unknown_issuer"
	NotFound             Code = "not_found"
	MethodNotAllowed     Code = "method_not_allowed"
	// The limits' codes: each is answered with a Retry-After.
	TooManyStreams Code = "too_many_streams"
	RateLimited    Code = "rate_limited"
	Overloaded     Code = "overloaded"
	QuotaExceeded  Code = "quota_exceeded"
	Unavailable    Code = "unavailable"
	NotReady       Code = "not_ready"
	Internal       Code = "internal"
	// Durable Streams' (docs/api.md): a header it does not take, a write
	// that conflicts with the stream (closed, another content type, a
	// sequence number not above the last), a stream deleted while its
	// forks still read it.
	InvalidHeader Code = "invalid_header"
	Conflict      Code = "conflict"
	Gone          Code = "gone"
)

// Unknown is no code the server sends: it is what a client calls an
// answer that did not come in the contract's shape (a proxy's page, Go's
// own plain-text answer to malformed HTTP). It has no row in the table.
const Unknown Code = "unknown"

// Status is the HTTP status the contract gives the code. A code outside
// the table would be a bug of the server, so it is answered as one: 500.
func (c Code) Status() int {
	switch c {
	case InvalidName, InvalidType, InvalidJSON, InvalidPosition, InvalidOp,
		InvalidTTL, InvalidIdempotencyKey, InvalidBody, InvalidHeader, InvalidSelector, InvalidIssuer, InvalidSettings:
		return http.StatusBadRequest
	case Conflict:
		return http.StatusConflict
	case Gone:
		return http.StatusGone
	case Unauthorized:
		return http.StatusUnauthorized
	case Forbidden:
		return http.StatusForbidden
	case UnknownTenant, UnknownIssuer, NotFound:
		return http.StatusNotFound
	case MethodNotAllowed:
		return http.StatusMethodNotAllowed
	case TooLarge:
		return http.StatusRequestEntityTooLarge
	case IdempotencyKeyReused:
		return http.StatusUnprocessableEntity
	case TooManyStreams, RateLimited, Overloaded, QuotaExceeded:
		return http.StatusTooManyRequests
	case Unavailable, NotReady:
		return http.StatusServiceUnavailable
	default: // Internal, and any code that is not in the table
		return http.StatusInternalServerError
	}
}

// Error is a refusal: its code, the message for the client, and, for a
// refusal by a limit, when to try again. A refusal met deep inside a read
// (a budget) comes back through the read as this error, found with
// errors.As.
type Error struct {
	Code    Code
	Message string
	// RetryAfter, when set, is how long the client should wait before it
	// tries again; the HTTP surface sends it as Retry-After.
	RetryAfter time.Duration
}

// New is a refusal with code and a message formatted as by fmt.Sprintf.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Status is the HTTP status of the refusal's code.
func (e *Error) Status() int { return e.Code.Status() }
