/**
 * What `tokens` of a model count against the token quotas: times the model's `quota_weight`, rounded up to a whole
 * token. The weight is read in thousandths (the configuration allows no finer), so the product is a whole number and
 * exact: 100 × 0.07 counts 7, where floating point would say 7.000000000000001 and round it up to 8.
 */
export function quotaTokens(tokens: number, weight: number): number {
  if (weight === 1) return tokens;
  return Math.ceil((tokens * Math.round(weight * 1000)) / 1000);
}
