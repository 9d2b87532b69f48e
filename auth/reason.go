package auth

import (
	"errors"
	"fmt"
)

// Reason is which check of a credential failed. A client is told it (the
// HTTP surface words it once), so that a token that is refused can be
// fixed without the server's log; no reason depends on whether the
// tenant exists.
type Reason int

// The checks, in the order a token meets them: presence, form, a key
// that verifies it (its iss names a trusted issuer, whose keys can be
// had), then its claims; and a webhook signature's own three.
const (
	// Missing: the request presents no credential at all.
	Missing Reason = iota + 1
	// Malformed: not a JWT, or claims that are not as the contract
	// spells them (names, JSON numbers, grants).
	Malformed
	// BadSignature: no key tried verifies the token, or its alg is not
	// one that is accepted.
	BadSignature
	// UnknownIssuer: no key is for the token: no issuer is registered
	// for its iss (or for tokens without one).
	UnknownIssuer
	// KeysUnavailable: the keys of the token's issuer cannot be had now
	// (its JWKS could not be fetched).
	KeysUnavailable
	Expired
	// NotYetValid: its nbf lies ahead, beyond the leeway.
	NotYetValid
	// NoExp: it has no exp, and its issuer (or the tenant) requires one.
	NoExp
	// TooLong: its exp lies further ahead than its issuer's cap.
	TooLong
	// Revoked: its jti was revoked, or its issuer's registration or the
	// tenant's secret changed while the request was served.
	Revoked
	// Audience: its aud does not hold the audience expected.
	Audience
	// WebhookMalformed: a webhook signature's headers are incomplete or
	// its timestamp is not a Unix time.
	WebhookMalformed
	// WebhookSignature: no webhook signature matches the secret.
	WebhookSignature
	// WebhookTimestamp: the webhook's timestamp is more than
	// WebhookTolerance from the server's clock.
	WebhookTimestamp
)

// Refusal is a credential refused: why (Reason, for the client) and the
// detail (for the server's log, never holding a credential). It is an
// ErrUnauthorized.
type Refusal struct {
	Reason Reason
	detail error
}

func (r *Refusal) Error() string { return "unauthorized: " + r.detail.Error() }

// Unwrap lets errors.Is find ErrUnauthorized and what the detail wraps.
func (r *Refusal) Unwrap() []error { return []error{ErrUnauthorized, r.detail} }

// Refuse is a refusal for reason, its detail formatted as by fmt.Errorf.
func Refuse(reason Reason, format string, args ...any) error {
	return &Refusal{Reason: reason, detail: fmt.Errorf(format, args...)}
}

// ReasonOf is the reason of a refused credential, 0 for an error that is
// no refusal of one (ErrForbidden, a store's failure).
func ReasonOf(err error) Reason {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	return 0
}

// afterSignature says whether a refusal for reason was reached only once
// a key verified the token: the key that verified it decides, and no
// other key is tried.
func afterSignature(reason Reason) bool {
	switch reason {
	case Malformed, Expired, NotYetValid, NoExp, TooLong, Revoked, Audience:
		return true
	}
	return false
}
