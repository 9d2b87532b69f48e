package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
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
// Any one matching signature is enough; comparison is constant-time. The
// signature is checked before the timestamp it covers, so that only a
// signed request learns of its clock. An empty secret, a tenant's that
// does not exist, verifies nothing, by the same steps.
func Webhook(secret string, h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return Refuse(WebhookMalformed, "webhook-id, webhook-timestamp and webhook-signature are all required")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Refuse(WebhookMalformed, "webhook-timestamp is not a Unix time")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return Refuse(WebhookSignature, "tenant webhook secret is not base64")
	}
	if !signed(key, id, ts, sigs, body) || secret == "" {
		return Refuse(WebhookSignature, "no webhook signature matches")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > WebhookTolerance || d < -WebhookTolerance {
		return Refuse(WebhookTimestamp, "webhook-timestamp is more than %v off", WebhookTolerance)
	}
	return nil
}

// signed says whether one of sigs is the v1 signature of id, ts and body
// with key.
func signed(key []byte, id, ts, sigs string, body []byte) bool {
	want := Sign(key, id, ts, body)
	for _, sig := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
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
