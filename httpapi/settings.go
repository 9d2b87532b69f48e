package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/edgehub/edgehub/auth"
	"github.com/edgehub/edgehub/refusal"
)

// maxSettingsBody bounds a settings request: a hundred origins of a few
// hundred bytes.
const maxSettingsBody = 64 << 10

// mercureSettingsPatch is a PUT's body: any of the settings, the others
// kept as they are.
type mercureSettingsPatch struct {
	Anonymous      *bool     `json:"anonymous"`
	Subscriptions  *bool     `json:"subscriptions"`
	PublishOrigins *[]string `json:"publish_origins"`
}

// getMercureSettings answers the tenant's Mercure settings.
func (s *Server) getMercureSettings(w http.ResponseWriter, r *http.Request, tenant string) {
	if t, ok := s.adminTenant(w, r, tenant); ok {
		writeJSON(w, http.StatusOK, t.Mercure)
	}
}

// putMercureSettings changes the settings a body names and answers them
// all. A body that is not such an object, names a field the server does
// not know, or an origin that is none, is 400 invalid_settings and
// changes nothing.
func (s *Server) putMercureSettings(w http.ResponseWriter, r *http.Request, tenant string) {
	var patch mercureSettingsPatch
	if err := decodeObject(r, maxSettingsBody, &patch); err != nil {
		writeError(w, refusal.New(refusal.InvalidSettings,
			`the body must be a JSON object of at most %d bytes with any of "anonymous" (a boolean), "subscriptions" (a boolean) and "publish_origins" (a list of origins)`, maxSettingsBody))
		return
	}
	m, err := s.deps.Tenants.UpdateMercureSettings(r.Context(), tenant, func(m *auth.MercureSettings) error {
		if patch.Anonymous != nil {
			m.Anonymous = *patch.Anonymous
		}
		if patch.Subscriptions != nil {
			m.Subscriptions = *patch.Subscriptions
		}
		if patch.PublishOrigins != nil {
			m.PublishOrigins = *patch.PublishOrigins
		}
		return m.Check()
	})
	if errors.Is(err, auth.ErrInvalidSettings) {
		writeError(w, refusal.New(refusal.InvalidSettings, "%s", err.Error()))
		return
	}
	if s.refuseAdmin(w, err, "given its settings", tenant) {
		return
	}
	s.adminAction(r, "Mercure settings changed", tenant, slog.Bool("anonymous", m.Anonymous),
		slog.Bool("subscriptions", m.Subscriptions), slog.Any("publish_origins", m.PublishOrigins))
	writeJSON(w, http.StatusOK, m)
}

// AllowCredentials lets the pages of the origins --cors-origins lists
// (by name, not by "*") call the paths match accepts (escaped, as the
// request sent them) with their cookies.
func (g *Gate) AllowCredentials(match func(path string) bool) {
	g.s.credentialed = append(g.s.credentialed, match)
}

// MercureSettings are the Mercure settings of a's tenant, as its check
// read them; in dev mode, where no check reads the tenant's row, those
// of the row if the admin API made one, else Mercure's defaults.
func (g *Gate) MercureSettings(r *http.Request, a Access) auth.MercureSettings {
	if !g.s.cfg.Dev {
		return a.Tenant.Mercure
	}
	t, err := g.s.deps.Tenants.Tenant(r.Context(), a.Tenant.Name)
	if err != nil {
		return auth.MercureSettings{}
	}
	return t.Mercure
}

// decodeObject reads an admin request's body into v: one JSON object of
// at most limit bytes, with no field v does not have and nothing after
// it.
func decodeObject(r *http.Request, limit int64, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	switch {
	case err != nil:
		return fmt.Errorf("read the body: %w", err)
	case int64(len(body)) > limit:
		return errors.New("the body is too large")
	case !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")):
		return errors.New("the body is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode the body: %w", err)
	}
	if dec.More() {
		return errors.New("the body has more after its object")
	}
	return nil
}
