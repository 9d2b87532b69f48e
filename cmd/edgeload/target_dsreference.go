package main

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// dsReference is the Durable Streams protocol's reference server, the npm
// package @durable-streams/server (its DurableStreamTestServer), run with
// node from a directory whose node_modules holds it. File-backed (the
// default), it keeps each stream as an append-only log, fdatasync'd on
// each append, and its metadata in LMDB; in memory, it keeps nothing. It
// speaks only the Durable Streams protocol, so it takes part in the ds-*
// scenarios only.
type dsReference struct {
	node, dir string
	memory    bool
	proc      *process
	addr      string
}

//go:embed testdata/ds-reference.mjs
var dsReferenceScript []byte

var dsReferenceListening = regexp.MustCompile(`ds-reference listening http://(\S+)`)

func (d *dsReference) Name() string           { return "ds-reference" }
func (d *dsReference) Supports(s string) bool { return isDSScenario(s) }
func (d *dsReference) PID() int               { return d.proc.pid() }
func (d *dsReference) DSAddr() string         { return d.addr }

// mode is how the server keeps its streams, for the report.
func (d *dsReference) mode() string {
	if d.memory {
		return "in memory"
	}
	return "file-backed (an fdatasync per append)"
}

func (d *dsReference) Start(ctx context.Context, dir string) error {
	script := filepath.Join(dir, "ds-reference.mjs")
	if err := os.WriteFile(script, dsReferenceScript, 0o600); err != nil {
		return err
	}
	args := []string{script, d.dir}
	if !d.memory {
		args = append(args, filepath.Join(dir, "data"))
	}
	p, addr, err := startProcess(ctx, dir, d.node, dsReferenceListening, args...)
	if err != nil {
		return err
	}
	d.proc, d.addr = p, addr
	return nil
}

func (d *dsReference) Stop() error { return d.proc.stop() }

func (d *dsReference) Publish(context.Context, string, []byte) (int64, error) {
	return 0, fmt.Errorf("ds-reference serves only the ds-* scenarios")
}

func (d *dsReference) PublishBatch(context.Context, string, [][]byte) ([]int64, error) {
	return nil, errNoBatch
}

func (d *dsReference) Watch(context.Context, string, bool, func(), func(Delivery) error) error {
	return fmt.Errorf("ds-reference serves only the ds-* scenarios")
}
