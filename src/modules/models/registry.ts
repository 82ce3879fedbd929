import type { Config, ModelConfig, PlanConfig } from "../../config/schema";
import { readSecret } from "../../config/secrets";
import { SluiceError } from "../../errors";
import { DemoBackend } from "../../upstream/demo-backend";
import { UpstreamPool } from "../../upstream/pool";
import type { Backend, ServerHealth } from "../../upstream/types";

export interface ModelEntry {
  config: ModelConfig;
  backend: Backend;
  /** The upstream's key as read when the entry was made (see src/config/secrets.ts). */
  apiKey: string | undefined;
}

/** Who asks for a model: a key's plan, and the models the key itself is limited to, if it is. */
export interface ModelAccess {
  plan: PlanConfig;
  keyModels?: ReadonlySet<string>;
}

/**
 * The longest name a prefix model takes after its prefix. Hosted APIs' names are under a hundred characters; each name
 * under a prefix becomes the ledger's model, so a caller must not be able to write a megabyte of it into every row.
 */
const maxNameAfterPrefix = 256;

/** The configured models with their backends, and which of them a plan (and a key limited to some) may use. */
export class ModelRegistry {
  private entries = new Map<string, ModelEntry>();
  /** Every name a model answers to (its id and its aliases). */
  private byName = new Map<string, ModelEntry>();
  /** The prefix models (ids ending in `/*`), the longest prefix first: a name takes the most specific one. */
  private prefixed: ModelEntry[] = [];
  /** The `created` time of every model: when this configuration was loaded. */
  readonly created = Math.floor(Date.now() / 1000);
  private readonly demo = new DemoBackend();

  constructor(
    config: Config,
    private readonly environment: Record<string, string | undefined> = process.env,
  ) {
    this.reconfigure(config);
  }

  /**
   * Serves a new configuration's models from now on. A model whose settings did not change keeps its backend (its
   * servers' circuit breakers, what it learned of their parameters) unless its key file now holds another key;
   * requests already under way keep the entry they were given. Returns the ids of the models whose key alone changed.
   */
  reconfigure(config: Config): string[] {
    const rotated: string[] = [];
    const entries = new Map<string, ModelEntry>();
    const byName = new Map<string, ModelEntry>();
    for (const [index, model] of config.models.entries()) {
      const before = this.entries.get(model.id);
      // A key file is read again at each reload: a rotated key makes a new backend, as a changed setting does.
      const apiKey = readSecret({ env: model.apiKeyEnv, file: model.apiKeyFile }, `models[${index}].api_key_file`, this.environment);
      const same = before !== undefined && Bun.deepEquals(before.config, model);
      if (same && before.apiKey !== apiKey) rotated.push(model.id);
      const entry = same && before.apiKey === apiKey ? before : { config: model, backend: this.backendOf(model, apiKey), apiKey };
      entries.set(model.id, entry);
      for (const name of [model.id, ...model.aliases]) byName.set(name, entry);
    }
    this.entries = entries;
    this.byName = byName;
    this.prefixed = [...entries.values()]
      .filter((entry) => entry.config.prefix !== undefined)
      .sort((one, other) => (other.config.prefix as string).length - (one.config.prefix as string).length);
    return rotated;
  }

  private backendOf(model: ModelConfig, apiKey: string | undefined): Backend {
    return model.backend === "demo" ? this.demo : new UpstreamPool(model, apiKey);
  }

  /** The enabled models a key may use, in configuration order. */
  listFor(access: ModelAccess): ModelConfig[] {
    return [...this.entries.values()].map((entry) => entry.config).filter((model) => model.enabled && this.allowed(access, model.id));
  }

  /**
   * A model the plan may see, by its id or an alias; 404 model_not_found otherwise (also for disabled models, which
   * are not listed).
   */
  visible(access: ModelAccess, name: string): ModelConfig {
    const entry = this.named(name);
    if (!entry?.config.enabled || !this.allowed(access, entry.config.id)) throw modelNotFound(name);
    return entry.config;
  }

  /**
   * A model the plan may call, by its id or an alias: 404 model_not_found if unknown or outside the plan. A disabled
   * model hands its requests to its first fallback the caller may use (unless `allowFallback` is false), and is 503
   * model_unavailable without one.
   */
  callable(access: ModelAccess, name: string, allowFallback = true): ModelEntry {
    const entry = this.named(name);
    if (!entry || !this.allowed(access, entry.config.id)) throw modelNotFound(name);
    if (!entry.config.enabled) {
      const fallback = allowFallback ? this.fallbacksOf(access, entry)[0] : undefined;
      if (fallback) return fallback;
      throw new SluiceError("model_unavailable", `The model '${name}' is temporarily unavailable.`, { retryAfterSeconds: 60 });
    }
    return entry;
  }

  /**
   * A model's fallbacks (or, given, its context fallbacks), in their configured order, that are enabled and that the
   * caller may use: a fallback never reaches a model the caller's plan or key leaves out.
   */
  fallbacksOf(access: ModelAccess, entry: ModelEntry, ids: readonly string[] = entry.config.fallbacks): ModelEntry[] {
    const fallbacks: ModelEntry[] = [];
    for (const id of ids) {
      const fallback = this.entries.get(id);
      if (fallback?.config.enabled && this.allowed(access, id)) fallbacks.push(fallback);
    }
    return fallbacks;
  }

  /** The ids of the models a plan includes, enabled or not: what a key of it may be limited to. */
  idsIn(plan: PlanConfig): string[] {
    return [...this.entries.keys()].filter((id) => this.allowed({ plan }, id));
  }

  /**
   * The model a name reaches, whoever asks: the model of that id or alias, or else the prefix model with the longest
   * prefix the name begins with and goes on after; undefined for an unknown name.
   */
  named(name: string): ModelEntry | undefined {
    const entry = this.byName.get(name);
    if (entry !== undefined || this.prefixed.length === 0) return entry;
    for (const candidate of this.prefixed) {
      const prefix = candidate.config.prefix as string;
      if (name.length > prefix.length && name.length <= prefix.length + maxNameAfterPrefix && name.startsWith(prefix)) return candidate;
    }
    return undefined;
  }

  /** The id of the model a name reaches (see `named`); undefined for an unknown name. */
  idOf(name: string): string | undefined {
    return this.named(name)?.config.id;
  }

  all(): ModelConfig[] {
    return [...this.entries.values()].map((entry) => entry.config);
  }

  /** Each configured model's upstream servers and their health (none for the demo). */
  servers(): { model: string; servers: ServerHealth[] }[] {
    return [...this.entries.values()].map((entry) => ({ model: entry.config.id, servers: entry.backend.servers?.() ?? [] }));
  }

  /** In the plan, and among the key's own models when it names some: a key narrows its plan, never widens it. */
  private allowed(access: ModelAccess, modelId: string): boolean {
    const { plan, keyModels } = access;
    return (plan.models.includes("*") || plan.models.includes(modelId)) && (keyModels === undefined || keyModels.has(modelId));
  }
}

function modelNotFound(modelId: string): SluiceError {
  return new SluiceError("model_not_found", `The model '${modelId}' does not exist or you do not have access to it.`, { param: "model" });
}
