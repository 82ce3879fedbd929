ALTER TABLE "api_keys" ADD COLUMN "max_concurrency" bigint;--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "tokens_per_5h" bigint;--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "tokens_per_month" bigint;--> statement-breakpoint
CREATE INDEX "api_keys_limited_idx" ON "api_keys" USING btree ("id") WHERE max_concurrency IS NOT NULL OR tokens_per_5h IS NOT NULL OR tokens_per_month IS NOT NULL;