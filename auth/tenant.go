package auth

// Tenant is a tenant with its secrets, as the admin API returns it.
type Tenant struct {
	Name          string `json:"tenant"`
	SigningSecret string `json:"signing_secret"`
	WebhookSecret string `json:"webhook_secret"`
	// ID is the incarnation (never reused); Generation changes with every
	// rotation. A request authorized against one commits only while the
	// tenant still has it.
	ID         int64 `json:"-"`
	Generation int64 `json:"-"`
}
