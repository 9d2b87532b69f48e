package auth

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Whatever the webhook headers hold, the parser never panics and accepts
// only a request whose signature it could have made itself; a signature
// made for the body verifies, and fails for any other body.
func FuzzWebhookHeaders(f *testing.F) {
	f.Add("msg_1", "1700000000", "v1,AAAA v1,bm9wZQ==", []byte(`{"a":1}`))
	f.Add("", "", "", []byte(nil))
	f.Add("id", "-1", "v1,", []byte("x"))
	f.Add("id", "99999999999999999999", "v1 ,,, v1,====", []byte("x"))
	key := []byte("0123456789abcdef0123456789abcdef")
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	now := time.Unix(1700000000, 0)
	f.Fuzz(func(t *testing.T, id, ts, sigs string, body []byte) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sigs)
		if Webhook(secret, h, body, now) == nil {
			// Accepted: only possible if one of the signatures is ours.
			good := "v1," + base64.StdEncoding.EncodeToString(Sign(key, id, ts, body))
			if !slices.Contains(strings.Fields(sigs), good) {
				t.Fatalf("accepted a signature it did not make: %q", sigs)
			}
		}
		if id == "" {
			return
		}
		stamp := strconv.FormatInt(now.Unix(), 10)
		h.Set("webhook-timestamp", stamp)
		h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(Sign(key, id, stamp, body)))
		if err := Webhook(secret, h, body, now); err != nil {
			t.Fatalf("own signature refused: %v", err)
		}
		if err := Webhook(secret, h, append(body, 'x'), now); err == nil {
			t.Fatal("signature accepted for another body")
		}
	})
}

func TestPatterns(t *testing.T) {
	for _, c := range []struct {
		pattern, topic string
		want           bool
	}{
		{"*", "anything", true}, {"*", "", true}, {"orders-*", "orders-", true}, {"orders-*", "orders-12", true},
		{"orders-*", "order", false}, {"*-eu", "orders-eu", true}, {"a*b*c", "aXbYc", true}, {"a*b*c", "aXbY", false},
		{"exact", "exact", true}, {"exact", "exactly", false}, {"**", "x", true},
	} {
		if got := MatchAny([]string{c.pattern}, c.topic); got != c.want {
			t.Errorf("%q ~ %q = %v", c.pattern, c.topic, got)
		}
	}
}
