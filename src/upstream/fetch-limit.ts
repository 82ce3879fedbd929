// Bun's fetch runs at most 256 requests at once unless BUN_CONFIG_MAX_HTTP_REQUESTS says otherwise; it reads the
// variable when its HTTP client starts (at the first fetch). Sluice's upstream concurrency is set by its
// configuration, not by that hidden default, so the limit is lifted before any fetch runs.
export const maxHttpRequests = 65_535;

if (!process.env.BUN_CONFIG_MAX_HTTP_REQUESTS) process.env.BUN_CONFIG_MAX_HTTP_REQUESTS = String(maxHttpRequests);
