//! What a metric family is apart from its values: its name, type, help and
//! labels ([`Family`], declared once each in [`super::catalog`]), and the
//! `prometheus` crate's objects a writer fills from that declaration, so no
//! writer spells a name, a help text, a type or a label of its own.

use prometheus::core::Collector as _;
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{CounterVec, GaugeVec, IntCounterVec, IntGaugeVec, Opts};

/// A family's Prometheus type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    /// The type as `# TYPE` writes it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric family as declared: everything about it but its values.
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// Label names, in the order a writer gives their values.
    pub labels: &'static [&'static str],
}

impl Family {
    /// The family's series with integer values.
    pub fn ints(&self) -> Ints {
        Ints::new(self.name, self.help, self.kind, self.labels)
    }

    /// The family's series with values in floating point.
    pub fn floats(&self) -> Floats {
        let opts = Opts::new(self.name, self.help);
        // Declarations are constants; the catalogue's tests build each one.
        match self.kind {
            Kind::Counter => Floats::Counter(
                CounterVec::new(opts, self.labels).expect("valid metric declaration"),
            ),
            Kind::Gauge => {
                Floats::Gauge(GaugeVec::new(opts, self.labels).expect("valid metric declaration"))
            }
            Kind::Histogram => panic!("{} is a histogram", self.name),
        }
    }

    /// The unlabelled family holding `v`.
    pub fn int(&self, v: u64) -> Vec<MetricFamily> {
        let s = self.ints();
        s.put(&[], v);
        s.collect()
    }

    /// The unlabelled family holding `v`.
    pub fn float(&self, v: f64) -> Vec<MetricFamily> {
        let s = self.floats();
        s.put(&[], v);
        s.collect()
    }

    /// The unlabelled histogram family of `counts` per bucket of `bounds`
    /// (not cumulative; one more count than bounds, for the observations
    /// above the last bound) whose observations sum to `sum`.
    pub fn histogram(&self, bounds: &[f64], counts: &[u64], sum: f64) -> MetricFamily {
        assert_eq!(self.kind, Kind::Histogram, "{} is no histogram", self.name);
        let mut cumulative = 0;
        let buckets = bounds
            .iter()
            .zip(counts)
            .map(|(&ub, &n)| {
                cumulative += n;
                let mut b = proto::Bucket::default();
                b.set_upper_bound(ub);
                b.set_cumulative_count(cumulative);
                b
            })
            .collect();
        let mut histogram = proto::Histogram::default();
        histogram.set_sample_count(counts.iter().sum());
        histogram.set_sample_sum(sum);
        histogram.set_bucket(buckets);
        let mut m = proto::Metric::default();
        m.set_histogram(histogram);
        let mut f = MetricFamily::default();
        f.set_name(self.name.into());
        f.set_help(self.help.into());
        f.set_field_type(MetricType::HISTOGRAM);
        f.set_metric(vec![m]);
        f
    }
}

/// A family's integer series being filled: counted (a counter) or set (a
/// gauge), as its type says.
pub enum Ints {
    Counter(IntCounterVec),
    Gauge(IntGaugeVec),
}

impl Ints {
    /// Series of a family declared here (`name`, `help`, `kind`, `labels`);
    /// [`Family::ints`] for those of the catalogue.
    pub fn new(name: &str, help: &str, kind: Kind, labels: &[&str]) -> Self {
        let opts = Opts::new(name, help);
        // Names and labels are constants, each built by the tests.
        match kind {
            Kind::Counter => {
                Ints::Counter(IntCounterVec::new(opts, labels).expect("valid metric declaration"))
            }
            Kind::Gauge => {
                Ints::Gauge(IntGaugeVec::new(opts, labels).expect("valid metric declaration"))
            }
            Kind::Histogram => panic!("{name} is a histogram"),
        }
    }

    /// Adds `v` to the series of `labels` (a counter), or sets it (a
    /// gauge); label values in the declaration's order.
    pub fn put(&self, labels: &[&str], v: u64) {
        match self {
            Ints::Counter(c) => c.with_label_values(labels).inc_by(v),
            Ints::Gauge(g) => g
                .with_label_values(labels)
                .set(i64::try_from(v).unwrap_or(i64::MAX)),
        }
    }

    pub fn collect(&self) -> Vec<MetricFamily> {
        match self {
            Ints::Counter(c) => c.collect(),
            Ints::Gauge(g) => g.collect(),
        }
    }
}

/// A family's floating-point series being filled.
pub enum Floats {
    Counter(CounterVec),
    Gauge(GaugeVec),
}

impl Floats {
    /// Adds `v` to the series of `labels` (a counter), or sets it (a
    /// gauge).
    pub fn put(&self, labels: &[&str], v: f64) {
        match self {
            Floats::Counter(c) => c.with_label_values(labels).inc_by(v),
            Floats::Gauge(g) => g.with_label_values(labels).set(v),
        }
    }

    pub fn collect(&self) -> Vec<MetricFamily> {
        match self {
            Floats::Counter(c) => c.collect(),
            Floats::Gauge(g) => g.collect(),
        }
    }
}
