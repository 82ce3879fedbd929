import { describe, expect, test } from "bun:test";
import { Counter, Gauge, Histogram, Registry } from "../../../src/modules/observability/prometheus";

describe("Prometheus registry", () => {
  test("each label combination is its own series, listed in order of first use, escaped", () => {
    const registry = new Registry();
    const requests = new Counter(registry, "requests_total", "Requests.", ["route", "status"]);
    requests.inc({ route: "chat", status: "200" });
    requests.inc({ route: "chat", status: "429" }, 2);
    requests.inc({ route: "chat", status: "200" }, 3);
    // Values that a joined key could confuse ("a" + "b c" vs "a b" + "c") stay apart.
    requests.inc({ route: "a", status: "b c" });
    requests.inc({ route: "a b", status: "c" });
    requests.inc({ route: 'quo"te\n', status: "" });
    expect(registry.text()).toBe(
      [
        "# HELP requests_total Requests.",
        "# TYPE requests_total counter",
        'requests_total{route="chat",status="200"} 4',
        'requests_total{route="chat",status="429"} 2',
        'requests_total{route="a",status="b c"} 1',
        'requests_total{route="a b",status="c"} 1',
        'requests_total{route="quo\\"te\\n",status=""} 1',
        "",
      ].join("\n"),
    );
  });

  test("a histogram counts into cumulative buckets per series; a metric without labels has one series", () => {
    const registry = new Registry();
    const duration = new Histogram(registry, "duration_seconds", "Duration.", ["model"], [0.1, 1]);
    duration.observe({ model: "m" }, 0.05);
    duration.observe({ model: "m" }, 0.5);
    duration.observe({ model: "m" }, 5);
    duration.observe({ model: "n" }, 1);
    const up = new Gauge(registry, "up", "Up.", [], (gauge) => gauge.set({}, 1));
    expect(up.name).toBe("up");
    expect(registry.text()).toBe(
      [
        "# HELP duration_seconds Duration.",
        "# TYPE duration_seconds histogram",
        'duration_seconds_bucket{le="0.1",model="m"} 1',
        'duration_seconds_bucket{le="1",model="m"} 2',
        'duration_seconds_bucket{le="+Inf",model="m"} 3',
        'duration_seconds_sum{model="m"} 5.55',
        'duration_seconds_count{model="m"} 3',
        'duration_seconds_bucket{le="0.1",model="n"} 0',
        'duration_seconds_bucket{le="1",model="n"} 1',
        'duration_seconds_bucket{le="+Inf",model="n"} 1',
        'duration_seconds_sum{model="n"} 1',
        'duration_seconds_count{model="n"} 1',
        "",
        "# HELP up Up.",
        "# TYPE up gauge",
        "up 1",
        "",
      ].join("\n"),
    );
  });
});
