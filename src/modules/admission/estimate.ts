/** Before any answer is known, expect this many output tokens (capped at the request's max_tokens). */
const initialExpectedOutput = 1024;
/** Weight of the newest answer in the running average of output tokens per model. */
const averageWeight = 0.2;

/** The output a model usually gives: a running average per model (per process), for reservations. */
export class OutputEstimate {
  private readonly averages = new Map<string, number>();

  /** The usual output of this model, never more than the request's max_tokens. */
  expected(modelId: string, maxTokens: number): number {
    return Math.min(maxTokens, Math.ceil(this.averages.get(modelId) ?? initialExpectedOutput));
  }

  observe(modelId: string, completionTokens: number): void {
    const previous = this.averages.get(modelId);
    this.averages.set(modelId, previous === undefined ? completionTokens : previous + averageWeight * (completionTokens - previous));
  }
}
