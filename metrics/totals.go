package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Totals are the server-wide sums a scrape reads from the log: no tenant
// labels, so their number of series stays three however many tenants
// there are.
type Totals struct {
	Bytes, Topics, DatabaseBytes int64
}

// totalsTimeout bounds the read a scrape makes.
const totalsTimeout = 2 * time.Second

// totalsCollector reads the totals at each scrape; a read that fails
// leaves the series out of that scrape rather than report a wrong 0.
type totalsCollector struct {
	read                    func(context.Context) (Totals, error)
	bytes, topics, database *prometheus.Desc
}

// WatchTotals exports what read returns as edgehub_stored_bytes,
// edgehub_topics and edgehub_database_bytes, read at each scrape.
func (m *Metrics) WatchTotals(read func(context.Context) (Totals, error)) {
	m.Registry.MustRegister(&totalsCollector{read: read,
		bytes:    prometheus.NewDesc("edgehub_stored_bytes", "Bytes of events (data, type, key) and state stored, over every tenant, as the quotas count them.", nil, nil),
		topics:   prometheus.NewDesc("edgehub_topics", "Topics stored, over every tenant.", nil, nil),
		database: prometheus.NewDesc("edgehub_database_bytes", "Size of the database on disk, free pages included.", nil, nil),
	})
}

func (c *totalsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.bytes
	ch <- c.topics
	ch <- c.database
}

func (c *totalsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), totalsTimeout)
	defer cancel()
	t, err := c.read(ctx)
	if err != nil {
		return // the other series still answer
	}
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(t.Bytes))
	ch <- prometheus.MustNewConstMetric(c.topics, prometheus.GaugeValue, float64(t.Topics))
	ch <- prometheus.MustNewConstMetric(c.database, prometheus.GaugeValue, float64(t.DatabaseBytes))
}
