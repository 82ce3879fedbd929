CREATE TABLE "usage_key_months" (
	"organization_id" text NOT NULL,
	"month" bigint NOT NULL,
	"key_id" text NOT NULL,
	"model" text NOT NULL,
	"tokens" bigint NOT NULL,
	CONSTRAINT "usage_key_months_organization_id_month_key_id_model_pk" PRIMARY KEY("organization_id","month","key_id","model")
);
--> statement-breakpoint
INSERT INTO "usage_key_months" ("organization_id", "month", "key_id", "model", "tokens")
SELECT "organization_id", (extract(year FROM utc) * 12 + extract(month FROM utc) - 1)::bigint, "key_id", "model", sum("tokens")
FROM (SELECT "organization_id", "key_id", "model", "tokens", to_timestamp("hour" * 3600) AT TIME ZONE 'UTC' AS utc FROM "usage_hours") AS hours
GROUP BY 1, 2, 3, 4;
