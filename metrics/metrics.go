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

// Metrics are the series the hub updates as it runs.
type Metrics struct {
	Registry        *prometheus.Registry
	EventsPublished prometheus.Counter
	Duplicates      prometheus.Counter
	StreamsOpen     prometheus.Gauge
	Deliveries      prometheus.Counter
	Demotions       prometheus.Counter
	CommitSeconds   prometheus.Histogram
	CommitEvents    prometheus.Histogram
	HubsActive      prometheus.Gauge
	Trimmed         prometheus.Counter
	Gaps            prometheus.Counter
	// HTTPRequests and HTTPSeconds are by route (the router's pattern, or
	// "unmatched") and status: a bounded set, whatever clients send.
	HTTPRequests *prometheus.CounterVec
	HTTPSeconds  *prometheus.HistogramVec
	// Refusals are by error code, the contract's short list.
	Refusals *prometheus.CounterVec
}

// New registers the series, with the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		EventsPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgehub_events_published_total", Help: "Events committed to the backlog.",
		}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgehub_publish_duplicates_total", Help: "Publishes answered from an idempotency key.",
		}),
		StreamsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgehub_streams_open", Help: "Watch streams currently open.",
		}),
		Deliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgehub_deliveries_total", Help: "Event frames written to watch streams.",
		}),
		Demotions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgehub_stream_demotions_total", Help: "Live streams sent back to the backlog because their queue was full.",
		}),
		CommitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "edgehub_commit_duration_seconds", Help: "Duration of backlog commit transactions.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		CommitEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "edgehub_commit_events", Help: "Events per backlog commit transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		HubsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgehub_hubs_active", Help: "Topic hub actors currently running.",
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
	m.Registry.MustRegister(m.EventsPublished, m.Duplicates, m.StreamsOpen, m.Deliveries, m.Demotions,
		m.CommitSeconds, m.CommitEvents, m.HubsActive, m.Trimmed, m.Gaps, m.HTTPRequests, m.HTTPSeconds, m.Refusals,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector())
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}
