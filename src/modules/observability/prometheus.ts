// A small Prometheus registry in the text exposition format (version 0.0.4), rather than prom-client: that loads
// node:http, zlib and cluster at start-up for features Sluice does not use, more than the executable's start-up
// budget of 100 ms allows; this holds only what Sluice exports.

type Labels = Record<string, string>;

function escapeLabel(value: string): string {
  return value.replaceAll("\\", "\\\\").replaceAll("\n", "\\n").replaceAll('"', '\\"');
}

function labelText(names: readonly string[], values: readonly string[], extra = ""): string {
  const parts = names.map((name, index) => `${name}="${escapeLabel(values[index] ?? "")}"`);
  if (extra) parts.unshift(extra);
  return parts.length === 0 ? "" : `{${parts.join(",")}}`;
}

interface Metric {
  text(): string;
}

abstract class Labelled<Entry> implements Metric {
  protected readonly entries: { values: string[]; entry: Entry }[] = [];
  // One level of maps per label, the entry at the last: a lookup builds no key string and allocates nothing
  // (it runs several times per request).
  private readonly tree = new Map<string, unknown>();

  constructor(
    readonly name: string,
    private readonly help: string,
    private readonly type: string,
    protected readonly labelNames: readonly string[],
  ) {}

  protected abstract newEntry(): Entry;

  /** Forgets every series: for a gauge that describes what exists now (a model removed takes its series with it). */
  clear(): void {
    this.entries.length = 0;
    this.tree.clear();
  }

  protected entryFor(labels: Labels): Entry {
    let level = this.tree;
    const last = this.labelNames.length - 1;
    for (let index = 0; index < last; index++) {
      const value = labels[this.labelNames[index] as string] ?? "";
      let next = level.get(value) as Map<string, unknown> | undefined;
      if (!next) {
        next = new Map();
        level.set(value, next);
      }
      level = next;
    }
    const value = last < 0 ? "" : (labels[this.labelNames[last] as string] ?? "");
    let entry = level.get(value) as Entry | undefined;
    if (entry === undefined) {
      entry = this.newEntry();
      level.set(value, entry);
      this.entries.push({ values: this.labelNames.map((name) => labels[name] ?? ""), entry });
    }
    return entry;
  }

  text(): string {
    return `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} ${this.type}\n${this.lines().join("\n")}${this.entries.length ? "\n" : ""}`;
  }

  protected abstract lines(): string[];
}

/** One series of a counter or a gauge. */
export class Series {
  value = 0;

  inc(amount = 1): void {
    this.value += amount;
  }
}

/** A metric whose series each hold one number: counters and gauges. */
abstract class SingleValue extends Labelled<Series> {
  protected newEntry(): Series {
    return new Series();
  }

  protected lines(): string[] {
    return this.entries.map(({ values, entry }) => `${this.name}${labelText(this.labelNames, values)} ${entry.value}`);
  }
}

export class Counter extends SingleValue {
  constructor(
    registry: Registry,
    name: string,
    help: string,
    labelNames: readonly string[],
    /** Sets the totals as each scrape reads them, for counts kept elsewhere; without it, they are counted here. */
    private readonly collect: (counter: Counter) => void = () => {},
  ) {
    super(name, help, "counter", labelNames);
    registry.register(this);
  }

  /** A total kept elsewhere, as `collect` reads it. */
  set(labels: Labels, value: number): void {
    this.entryFor(labels).value = value;
  }

  override text(): string {
    this.collect(this);
    return super.text();
  }

  inc(labels: Labels, amount = 1): void {
    this.entryFor(labels).inc(amount);
  }

  /** The series of these labels, kept by a caller that counts on it often (as prom-client's `labels()`). */
  series(labels: Labels): Series {
    return this.entryFor(labels);
  }
}

export class Gauge extends SingleValue {
  constructor(
    registry: Registry,
    name: string,
    help: string,
    labelNames: readonly string[],
    /** Sets the gauge's values as each scrape reads them; without it, they are set from outside. */
    private readonly collect: (gauge: Gauge) => void = () => {},
  ) {
    super(name, help, "gauge", labelNames);
    registry.register(this);
  }

  set(labels: Labels, value: number): void {
    this.entryFor(labels).value = value;
  }

  override text(): string {
    this.collect(this);
    return super.text();
  }
}

export class Histogram extends Labelled<{ counts: number[]; sum: number; count: number }> {
  constructor(
    registry: Registry,
    name: string,
    help: string,
    labelNames: readonly string[],
    private readonly buckets: readonly number[],
  ) {
    super(name, help, "histogram", labelNames);
    registry.register(this);
  }

  observe(labels: Labels, value: number): void {
    const entry = this.entryFor(labels);
    for (let index = 0; index < this.buckets.length; index++) {
      if (value <= (this.buckets[index] as number)) {
        entry.counts[index] = (entry.counts[index] ?? 0) + 1;
        break;
      }
    }
    entry.sum += value;
    entry.count++;
  }

  protected newEntry(): { counts: number[]; sum: number; count: number } {
    return { counts: this.buckets.map(() => 0), sum: 0, count: 0 };
  }

  protected lines(): string[] {
    const lines: string[] = [];
    for (const { values, entry } of this.entries) {
      let cumulative = 0;
      this.buckets.forEach((bound, index) => {
        cumulative += entry.counts[index] ?? 0;
        lines.push(`${this.name}_bucket${labelText(this.labelNames, values, `le="${bound}"`)} ${cumulative}`);
      });
      lines.push(`${this.name}_bucket${labelText(this.labelNames, values, 'le="+Inf"')} ${entry.count}`);
      lines.push(`${this.name}_sum${labelText(this.labelNames, values)} ${entry.sum}`);
      lines.push(`${this.name}_count${labelText(this.labelNames, values)} ${entry.count}`);
    }
    return lines;
  }
}

export class Registry {
  readonly contentType = "text/plain; version=0.0.4; charset=utf-8";
  private readonly metrics: Metric[] = [];

  register(metric: Metric): void {
    this.metrics.push(metric);
  }

  text(): string {
    return this.metrics.map((metric) => metric.text()).join("\n");
  }
}
