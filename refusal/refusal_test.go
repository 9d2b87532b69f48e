package refusal

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Every code has the status the contract gives it.
func TestStatusOfEveryCode(t *testing.T) {
	for code, want := range map[Code]int{
		InvalidName: 400, InvalidType: 400, InvalidJSON: 400, InvalidPosition: 400,
		InvalidOp: 400, InvalidTTL: 400, InvalidIdempotencyKey: 400, InvalidBody: 400, InvalidSelector: 400,
		Unauthorized: 401, Forbidden: 403, UnknownTenant: 404, NotFound: 404,
		MethodNotAllowed: 405, TooLarge: 413, IdempotencyKeyReused: 422,
		TooManyStreams: 429, RateLimited: 429, Overloaded: 429, QuotaExceeded: 429,
		Internal: 500, Unavailable: 503, NotReady: 503,
	} {
		if got := code.Status(); got != want {
			t.Errorf("%s: status %d, want %d", code, got, want)
		}
	}
}

// A refusal wrapped on its way up is still found, with its fields.
func TestErrorThroughWrapping(t *testing.T) {
	e := &Error{Code: Overloaded, Message: "busy", RetryAfter: time.Second}
	var got *Error
	if err := fmt.Errorf("read: %w", e); !errors.As(err, &got) || got != e || got.Status() != 429 {
		t.Fatalf("got %+v", got)
	}
	if s := New(InvalidOp, "op must be %s", "upsert").Error(); s != "invalid_op: op must be upsert" {
		t.Fatalf("Error() = %q", s)
	}
}
