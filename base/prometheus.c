#include "base/base.h"

const double HISTOGRAM_BOUNDS[HISTOGRAM_BUCKETS] = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,   0.05,     0.1,     0.25,   0.5,     1.0,    2.5,   5.0,    10.0,
};

void prom_family(byte_buffer *out, const char *name, const char *type, const char *help) {
    buffer_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void prom_u64(byte_buffer *out, const char *name, const char *type, const char *help, uint64_t value) {
    prom_family(out, name, type, help);
    buffer_printf(out, "%s %llu\n", name, (unsigned long long)value);
}

void histogram_observe(histogram *h, double seconds) {
    int lo = 0, hi = HISTOGRAM_BUCKETS; /* first bound >= seconds, or HISTOGRAM_BUCKETS for +Inf */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (HISTOGRAM_BOUNDS[mid] >= seconds) hi = mid;
        else lo = mid + 1;
    }
    h->buckets[lo]++;
    h->count++;
    h->sum += seconds;
}

void histogram_add(histogram *sum, const histogram *h) {
    for (int i = 0; i <= HISTOGRAM_BUCKETS; i++) sum->buckets[i] += h->buckets[i];
    sum->count += h->count;
    sum->sum += h->sum;
}

void prom_histogram(byte_buffer *out, const char *name, const char *labels, const histogram *h) {
    uint64_t cumulative = 0;
    const char *sep = labels[0] ? "," : "";
    for (int i = 0; i < HISTOGRAM_BUCKETS; i++) {
        cumulative += h->buckets[i];
        buffer_printf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, HISTOGRAM_BOUNDS[i],
                      (unsigned long long)cumulative);
    }
    cumulative += h->buckets[HISTOGRAM_BUCKETS];
    buffer_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)cumulative);
    if (labels[0]) {
        buffer_printf(out, "%s_sum{%s} %.9g\n", name, labels, h->sum);
        buffer_printf(out, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->count);
    } else {
        buffer_printf(out, "%s_sum %.9g\n", name, h->sum);
        buffer_printf(out, "%s_count %llu\n", name, (unsigned long long)h->count);
    }
}
