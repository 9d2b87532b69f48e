package main

import (
	"context"
	"fmt"
	"time"
)

// ceiling is cmd/edgeceiling: on a publish it makes the frame durable
// (an overwrite and an fdatasync, the cheapest this disk allows) and
// writes it to every stream of the topic. Its one-publisher rate and its
// fan-out are what this machine can do at all for a durable hub, and its
// 16-publisher rate what group commit (one fdatasync for every publish
// written while the last one ran) allows over HTTP; it takes part in
// those three scenarios only.
type ceiling struct {
	bin  string
	proc *process
	addr string
}

func (c *ceiling) Name() string { return "ceiling" }
func (c *ceiling) Supports(s string) bool {
	return s == "fanout" || s == "publish1" || s == "publish16"
}
func (c *ceiling) PID() int { return c.proc.pid() }

func (c *ceiling) Start(ctx context.Context, dir string) error {
	p, addr, err := startProcess(ctx, dir, c.bin, edgehubListening, "--addr", "127.0.0.1:0", "--data", dir)
	if err != nil {
		return err
	}
	c.proc, c.addr = p, addr
	return nil
}

func (c *ceiling) Stop() error {
	return c.proc.stop()
}

func (c *ceiling) Publish(ctx context.Context, topic string, data []byte) (int64, error) {
	b, err := post(ctx, "http://"+c.addr+"/topics/"+topic+"/publish", "application/json", nil, data)
	if err != nil {
		return 0, err
	}
	seq, _ := intField(b, `"seq":`)
	return seq, nil
}

func (c *ceiling) PublishBatch(context.Context, string, [][]byte) ([]int64, error) {
	return nil, errNoBatch
}

func (c *ceiling) Watch(ctx context.Context, topic string, _ bool, ready func(), deliver func(Delivery) error) error {
	return watchLoop(ctx, c.addr, "/topics/"+topic+"/watch", func(event, data []byte) error {
		if string(event) == "hello" {
			ready()
			return nil
		}
		at := time.Now().UnixNano()
		n, sent, ok := parsePayload(data)
		if !ok {
			return fmt.Errorf("unreadable frame %q", data)
		}
		return deliver(Delivery{N: n, Sent: sent, At: at})
	})
}
