// Package metrics holds the hub's Prometheus series. They live in a
// registry that main builds, not in the global one, so tests can run many
// servers in one process.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the series the hub updates as it runs. None has a tenant,
// topic, key or path among its labels: the series stay as few whatever
// clients do.
type Metrics struct {
	Registry *prometheus.Registry
	// EventsPublished and CommitEvents count the events commits appended,
	// whether or not their publishers waited for the answer.
	EventsPublished prometheus.Counter
	CommitSeconds   prometheus.Histogram
	CommitEvents    prometheus.Histogram
	// Appended and Duplicates are edgehub_publishes_total by result;
	// PublishBatch is each such publish's events (1, or an NDJSON batch's).
	Appended, Duplicates prometheus.Counter
	PublishBatch         prometheus.Histogram
	StreamsOpen          prometheus.Gauge
	// StreamsLive and StreamsCatchingUp are edgehub_streams by state: the
	// streams in the hubs' live sets, and in their catching-up sets.
	StreamsLive, StreamsCatchingUp prometheus.Gauge
	Deliveries                     prometheus.Counter
	// DeliveryLag is, per flush of a live stream, how long ago the process
	// learned that the oldest event pushed to it in the flush was durable.
	DeliveryLag prometheus.Histogram
	Demotions   prometheus.Counter
	HubsActive  prometheus.Gauge
	// HubsPassivated counts hubs stopped because they were idle.
	HubsPassivated prometheus.Counter
	Trimmed        prometheus.Counter
	Gaps           prometheus.Counter
	// HTTPRequests and HTTPSeconds are by route (the router's pattern, or
	// "unmatched") and status: a bounded set, whatever clients send.
	HTTPRequests *prometheus.CounterVec
	HTTPSeconds  *prometheus.HistogramVec
	// Refusals are by error code, the contract's short list.
	Refusals *prometheus.CounterVec
}

// New registers the series, with the Go runtime and process collectors.
// The children of the labelled series whose labels are known in advance
// are made here, so that they are exported, at 0, from the start.
func New() *Metrics {
	publishes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgehub_publishes_total", Help: "Publish requests answered, by result: appended, or duplicate (answered from an idempotency key).",
	}, []string{"result"})
	streams := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "edgehub_streams", Help: "Watch streams registered with their topics' hubs, by state: live (pushed each commit) or catching_up (reading the backlog).",
	}, []string{"state"})
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		EventsPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgehub_events_published_total", Help: "Events appended to the backlog by commits.",
		}),
		Appended:   publishes.WithLabelValues("appended"),
		Duplicates: publishes.WithLabelValues("duplicate"),
		PublishBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "edgehub_publish_batch_events", Help: "Events per publish request answered: 1 for one event, n for an NDJSON batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		StreamsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgehub_streams_open", Help: "Watch streams currently open.",
		}),
		StreamsLive:       streams.WithLabelValues("live"),
		StreamsCatchingUp: streams.WithLabelValues("catching_up"),
		Deliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgehub_deliveries_total", Help: "Event frames written to watch streams.",
		}),
		DeliveryLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "edgehub_delivery_lag_seconds",
			Help:    "Per flush of a live stream, time from the moment the process learned the oldest event in it was committed to the write's end.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
		}),
		Demotions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgehub_stream_demotions_total", Help: "Live streams sent back to the backlog because their queue was full.",
		}),
		CommitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "edgehub_commit_duration_seconds", Help: "Duration of backlog commit transactions.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		CommitEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "edgehub_commit_events", Help: "Events appended per backlog commit transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		HubsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgehub_hubs_active", Help: "Topic hub actors currently running.",
		}),
		HubsPassivated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgehub_hubs_passivated_total", Help: "Topic hub actors stopped because they were idle.",
		}),
		Trimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgehub_retention_removed_total", Help: "Event rows removed by retention.",
		}),
		Gaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgehub_gaps_total", Help: "Gap frames written to watch streams: events retention removed before a stream got them.",
		}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgehub_http_requests_total", Help: "HTTP requests answered, by route and status (a stream counts when its answer begins).",
		}, []string{"route", "status"}),
		HTTPSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "edgehub_http_request_duration_seconds", Help: "Time to answer an HTTP request, by route (a stream's until its answer begins).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"route"}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgehub_refusals_total", Help: "Error answers, by their code.",
		}, []string{"code"}),
	}
	m.Registry.MustRegister(m.EventsPublished, publishes, m.PublishBatch, m.StreamsOpen, streams, m.Deliveries,
		m.DeliveryLag, m.Demotions, m.CommitSeconds, m.CommitEvents, m.HubsActive, m.HubsPassivated, m.Trimmed, m.Gaps,
		m.HTTPRequests, m.HTTPSeconds, m.Refusals,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector())
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}
