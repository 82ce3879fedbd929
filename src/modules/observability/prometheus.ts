// A small Prometheus registry in the text exposition format (version 0.0.4). prom-client did the same job, but
// loading it took longer than loading Elysia (it pulls in node:http, zlib and cluster for features Sluice does not
// use), which kept the executable's start-up over 100 ms; this keeps only what Sluice exports.

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
  protected readonly entries = new Map<string, { values: string[]; entry: Entry }>();

  constructor(
    readonly name: string,
    private readonly help: string,
    private readonly type: string,
    protected readonly labelNames: readonly string[],
  ) {}

  protected entryFor(labels: Labels, create: () => Entry): Entry {
    // Called several times per request: the key is built without intermediate arrays.
    let key = "";
    for (const name of this.labelNames) key += `${labels[name] ?? ""}\u0000`;
    let found = this.entries.get(key);
    if (!found) {
      found = { values: this.labelNames.map((name) => labels[name] ?? ""), entry: create() };
      this.entries.set(key, found);
    }
    return found.entry;
  }

  text(): string {
    return `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} ${this.type}\n${this.lines().join("\n")}${this.entries.size ? "\n" : ""}`;
  }

  protected abstract lines(): string[];
}

export class Counter extends Labelled<{ value: number }> {
  constructor(registry: Registry, name: string, help: string, labelNames: readonly string[]) {
    super(name, help, "counter", labelNames);
    registry.register(this);
  }

  inc(labels: Labels, amount = 1): void {
    this.entryFor(labels, () => ({ value: 0 })).value += amount;
  }

  protected lines(): string[] {
    return [...this.entries.values()].map(({ values, entry }) => `${this.name}${labelText(this.labelNames, values)} ${entry.value}`);
  }
}

export class Gauge extends Labelled<{ value: number }> {
  constructor(
    registry: Registry,
    name: string,
    help: string,
    labelNames: readonly string[],
    private readonly collect: (gauge: Gauge) => void,
  ) {
    super(name, help, "gauge", labelNames);
    registry.register(this);
  }

  set(labels: Labels, value: number): void {
    this.entryFor(labels, () => ({ value: 0 })).value = value;
  }

  override text(): string {
    this.collect(this);
    return super.text();
  }

  protected lines(): string[] {
    return [...this.entries.values()].map(({ values, entry }) => `${this.name}${labelText(this.labelNames, values)} ${entry.value}`);
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
    const entry = this.entryFor(labels, () => ({ counts: this.buckets.map(() => 0), sum: 0, count: 0 }));
    const index = this.buckets.findIndex((bound) => value <= bound);
    if (index !== -1) entry.counts[index] = (entry.counts[index] ?? 0) + 1;
    entry.sum += value;
    entry.count++;
  }

  protected lines(): string[] {
    const lines: string[] = [];
    for (const { values, entry } of this.entries.values()) {
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
