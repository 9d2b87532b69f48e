//go:build faults

package hub

import (
	"context"
	"sync"
	"time"

	"github.com/edgehub/edgehub/backlog"
	"github.com/edgehub/edgehub/faults"
)

// injectedFaults builds the hooks of the fault EDGEHUB_FAULT names:
//   - drop-slow: a full queue drops the event instead of demoting;
//   - replay-after-live: a stream is live at the head before it replays;
//   - answer-before-commit: a publish is answered with the numbers it is
//     expected to get, and its commit is slowed down.
func injectedFaults() faultHooks {
	var f faultHooks
	if faults.On("drop-slow") {
		f.overflow = func(s *stream, it *item) bool {
			s.through = it.Event.Seq // the event is dropped
			return true
		}
	}
	f.joinLive = faults.On("replay-after-live")
	if faults.On("answer-before-commit") {
		early := &earlyAnswers{next: map[string]int64{}}
		f.publish = early.publish
	}
	return f
}

// earlyAnswers numbers publishes ahead of their commits, per topic,
// starting from the head the log has when the first one comes.
type earlyAnswers struct {
	mu   sync.Mutex
	next map[string]int64
}

func (e *earlyAnswers) publish(r *Router, msg *publish) {
	key := Key(msg.req.Tenant, msg.req.Topic)
	e.mu.Lock()
	if e.next[key] == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		head, _ := r.opts.Log.Head(ctx, msg.req.Tenant, msg.req.Topic)
		cancel()
		e.next[key] = head + 1
	}
	first, n := e.next[key], int64(len(msg.req.Events))
	e.next[key] += n
	e.mu.Unlock()
	msg.reply <- publishReply{result: backlog.Result{First: first, Last: first + n - 1, Batch: msg.req.Batch}}
	late := &publish{req: msg.req, reply: make(chan publishReply, 1)}
	time.AfterFunc(50*time.Millisecond, func() { r.manager.Send(key, late) })
}
