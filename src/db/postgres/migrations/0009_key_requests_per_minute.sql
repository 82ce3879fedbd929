DROP INDEX "api_keys_limited_idx";--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "requests_per_minute" bigint;--> statement-breakpoint
CREATE INDEX "api_keys_limited_idx" ON "api_keys" USING btree ("id") WHERE max_concurrency IS NOT NULL OR tokens_per_5h IS NOT NULL OR tokens_per_month IS NOT NULL OR requests_per_minute IS NOT NULL;