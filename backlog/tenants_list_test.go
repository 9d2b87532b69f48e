package backlog

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/edgehub/edgehub/pgtest"
)

// The tenant list (plan 049) is in byte order of the names on both stores,
// pages by after, holds only created tenants and forgets deleted ones.
func TestTenantsListInByteOrder(t *testing.T) {
	listInByteOrder(t, openTest(t))
}

// A PostgreSQL database whose default collation is not bytewise (ICU's
// English sorts "a" before "B") lists the tenants in byte order too: the
// names' column is collated "C".
func TestTenantsListInByteOrderUnderICU(t *testing.T) {
	url := pgtest.DatabaseWith(t, "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'")
	l, err := OpenPostgres(context.Background(), url, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	listInByteOrder(t, l)
}

func listInByteOrder(t *testing.T, l *Store) {
	ctx := context.Background()
	for _, name := range []string{"b", "B", "a", "a.b", "A~", "gone"} {
		if _, _, err := l.CreateTenant(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.DeleteTenant(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	var got []string
	after := ""
	for {
		page, err := l.Tenants(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 {
			t.Fatalf("a page of limit 2 held %d", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			if e.Created.IsZero() {
				t.Errorf("%s has no creation time", e.Name)
			}
			got = append(got, e.Name)
		}
		after = page[len(page)-1].Name
	}
	if want := []string{"A~", "B", "a", "a.b", "b"}; !slices.Equal(got, want) {
		t.Fatalf("listed %q, want %q (byte order, without the deleted tenant)", got, want)
	}
}
