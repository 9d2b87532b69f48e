// Package pgtest gives tests a PostgreSQL database of their own, on the
// throwaway cluster that scripts/test starts (scripts/postgres) and names
// in EDGEHUB_TEST_POSTGRES. With EDGEHUB_TEST_STORE=postgres the suites
// that run on either store run on Postgres.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Enabled says the suites run on Postgres.
func Enabled() bool { return os.Getenv("EDGEHUB_TEST_STORE") == "postgres" }

// Database creates an empty database for the test, dropped when it ends,
// and returns its URL. With no cluster named it skips the test, unless
// the suite runs on Postgres (then it fails): scripts/test always names
// one.
func Database(t testing.TB) string {
	t.Helper()
	return DatabaseWith(t, "")
}

// DatabaseWith is Database with options for CREATE DATABASE, such as a
// collation other than the cluster's C: what a store must not depend on.
func DatabaseWith(t testing.TB, options string) string {
	t.Helper()
	base := os.Getenv("EDGEHUB_TEST_POSTGRES")
	if base == "" && Enabled() {
		t.Fatal("EDGEHUB_TEST_POSTGRES names no cluster: run the tests with scripts/test, which starts one")
	}
	if base == "" {
		t.Skip("no PostgreSQL cluster (EDGEHUB_TEST_POSTGRES): scripts/test starts one")
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("EDGEHUB_TEST_POSTGRES: %v", err)
	}
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := "t_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to the test cluster: %v", err)
	}
	defer admin.Close(ctx) //nolint:errcheck // an administrative connection
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" "+options); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("connect to the test cluster: %v", err)
			return
		}
		defer admin.Close(ctx) //nolint:errcheck // an administrative connection
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}
