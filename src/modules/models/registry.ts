import type { Config, ModelConfig, PlanConfig } from "../../config/schema";
import { SluiceError } from "../../errors";
import { DemoBackend } from "../../upstream/demo-backend";
import { UpstreamPool } from "../../upstream/pool";
import type { Backend } from "../../upstream/types";

export interface ModelEntry {
  config: ModelConfig;
  backend: Backend;
}

/** The configured models with their backends, and which of them a plan may use. */
export class ModelRegistry {
  private readonly entries = new Map<string, ModelEntry>();
  /** Every name a model answers to (its id and its aliases). */
  private readonly byName = new Map<string, ModelEntry>();
  /** The `created` time of every model: when this configuration was loaded. */
  readonly created = Math.floor(Date.now() / 1000);

  constructor(config: Config, environment: Record<string, string | undefined> = process.env) {
    const demo = new DemoBackend();
    for (const model of config.models) {
      const backend = model.backend === "demo" ? demo : new UpstreamPool(model, model.apiKeyEnv ? environment[model.apiKeyEnv] : undefined);
      const entry = { config: model, backend };
      this.entries.set(model.id, entry);
      for (const name of [model.id, ...model.aliases]) this.byName.set(name, entry);
    }
  }

  /** The enabled models of a plan, in configuration order. */
  listFor(plan: PlanConfig): ModelConfig[] {
    return [...this.entries.values()].map((entry) => entry.config).filter((model) => model.enabled && this.inPlan(plan, model.id));
  }

  /**
   * A model the plan may see, by its id or an alias; 404 model_not_found otherwise (also for disabled models, which
   * are not listed).
   */
  visible(plan: PlanConfig, name: string): ModelConfig {
    const entry = this.byName.get(name);
    if (!entry?.config.enabled || !this.inPlan(plan, entry.config.id)) throw modelNotFound(name);
    return entry.config;
  }

  /**
   * A model the plan may call, by its id or an alias: 404 model_not_found if unknown or outside the plan, 503
   * model_unavailable if disabled.
   */
  callable(plan: PlanConfig, name: string): ModelEntry {
    const entry = this.byName.get(name);
    if (!entry || !this.inPlan(plan, entry.config.id)) throw modelNotFound(name);
    if (!entry.config.enabled) {
      throw new SluiceError("model_unavailable", `The model '${name}' is temporarily unavailable.`, { retryAfterSeconds: 60 });
    }
    return entry;
  }

  /** The id of the model a name (id or alias) reaches; undefined for an unknown name. */
  idOf(name: string): string | undefined {
    return this.byName.get(name)?.config.id;
  }

  all(): ModelConfig[] {
    return [...this.entries.values()].map((entry) => entry.config);
  }

  private inPlan(plan: PlanConfig, modelId: string): boolean {
    return plan.models.includes("*") || plan.models.includes(modelId);
  }
}

function modelNotFound(modelId: string): SluiceError {
  return new SluiceError("model_not_found", `The model '${modelId}' does not exist or you do not have access to it.`, { param: "model" });
}
