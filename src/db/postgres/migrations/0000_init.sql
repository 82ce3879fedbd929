CREATE TABLE "api_keys" (
	"id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"name" text NOT NULL,
	"prefix" text NOT NULL,
	"hash" text NOT NULL,
	"created_at" bigint NOT NULL,
	"last_used_at" bigint,
	"expires_at" bigint,
	"revoked_at" bigint,
	CONSTRAINT "api_keys_hash_unique" UNIQUE("hash")
);
--> statement-breakpoint
CREATE TABLE "organizations" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"plan" text NOT NULL,
	"status" text NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "organizations_name_unique" UNIQUE("name")
);
--> statement-breakpoint
CREATE TABLE "sessions" (
	"token_hash" text PRIMARY KEY NOT NULL,
	"user_id" text NOT NULL,
	"csrf_token" text NOT NULL,
	"created_at" bigint NOT NULL,
	"expires_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "sign_in_failures" (
	"email" text PRIMARY KEY NOT NULL,
	"count" bigint NOT NULL,
	"since" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "usage_ledger" (
	"request_id" text PRIMARY KEY NOT NULL,
	"organization_id" text NOT NULL,
	"key_id" text NOT NULL,
	"model" text NOT NULL,
	"prompt_tokens" bigint NOT NULL,
	"completion_tokens" bigint NOT NULL,
	"reasoning_tokens" bigint NOT NULL,
	"outcome" text NOT NULL,
	"error_code" text,
	"rule_id" text,
	"usage_source" text NOT NULL,
	"started_at" bigint NOT NULL,
	"ended_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "usage_minutes" (
	"organization_id" text NOT NULL,
	"minute" bigint NOT NULL,
	"tokens" bigint NOT NULL,
	"last_time" bigint NOT NULL,
	CONSTRAINT "usage_minutes_organization_id_minute_pk" PRIMARY KEY("organization_id","minute")
);
--> statement-breakpoint
CREATE TABLE "usage_months" (
	"organization_id" text NOT NULL,
	"month" bigint NOT NULL,
	"tokens" bigint NOT NULL,
	CONSTRAINT "usage_months_organization_id_month_pk" PRIMARY KEY("organization_id","month")
);
--> statement-breakpoint
CREATE TABLE "usage_resets" (
	"organization_id" text PRIMARY KEY NOT NULL,
	"reset_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "users" (
	"id" text PRIMARY KEY NOT NULL,
	"email" text NOT NULL,
	"password_hash" text NOT NULL,
	"role" text NOT NULL,
	"organization_id" text,
	"created_at" bigint NOT NULL,
	CONSTRAINT "users_email_unique" UNIQUE("email")
);
--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sessions" ADD CONSTRAINT "sessions_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "users" ADD CONSTRAINT "users_organization_id_organizations_id_fk" FOREIGN KEY ("organization_id") REFERENCES "public"."organizations"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "api_keys_organization_idx" ON "api_keys" USING btree ("organization_id");--> statement-breakpoint
CREATE INDEX "sessions_user_idx" ON "sessions" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "usage_ledger_organization_time_idx" ON "usage_ledger" USING btree ("organization_id","ended_at");--> statement-breakpoint
CREATE INDEX "usage_minutes_minute_idx" ON "usage_minutes" USING btree ("minute");