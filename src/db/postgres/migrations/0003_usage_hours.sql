CREATE TABLE "usage_hours" (
	"organization_id" text NOT NULL,
	"hour" bigint NOT NULL,
	"key_id" text NOT NULL,
	"model" text NOT NULL,
	"tokens" bigint NOT NULL,
	CONSTRAINT "usage_hours_organization_id_hour_key_id_model_pk" PRIMARY KEY("organization_id","hour","key_id","model")
);
--> statement-breakpoint
CREATE INDEX "usage_hours_key_hour_idx" ON "usage_hours" USING btree ("key_id","hour");--> statement-breakpoint
INSERT INTO "usage_hours" ("organization_id", "hour", "key_id", "model", "tokens")
SELECT "organization_id", "ended_at" / 3600000, "key_id", "model", sum("prompt_tokens" + "completion_tokens")
FROM "usage_ledger" WHERE "prompt_tokens" + "completion_tokens" > 0
GROUP BY 1, 2, 3, 4;
