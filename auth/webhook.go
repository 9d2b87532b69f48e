package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WebhookTolerance is how far a webhook-timestamp may be from now.
const WebhookTolerance = 5 * time.Minute

// HasWebhook reports whether the request carries Standard Webhooks headers.
func HasWebhook(h http.Header) bool {
	return h.Get("webhook-signature") != "" || h.Get("webhook-timestamp") != ""
}

// Webhook verifies a Standard Webhooks signature: webhook-signature holds
// one or more space-separated "v1,<base64 HMAC-SHA256>" of
// "id.timestamp.body", keyed with the base64 part of the whsec_ secret.
// Any one matching signature is enough; comparison is constant-time.
func Webhook(secret string, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("%w: webhook-id, webhook-timestamp and webhook-signature are all required", ErrUnauthorized)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: webhook-timestamp is not a Unix time", ErrUnauthorized)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > WebhookTolerance || d < -WebhookTolerance {
		return fmt.Errorf("%w: webhook-timestamp is more than %v off", ErrUnauthorized, WebhookTolerance)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return fmt.Errorf("%w: tenant webhook secret is not base64", ErrUnauthorized)
	}
	want := Sign(key, id, ts, body)
	for _, sig := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no webhook signature matches", ErrUnauthorized)
}

// Sign computes the HMAC-SHA256 of "id.timestamp.body" with key.
func Sign(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}
