DROP INDEX `api_keys_limited_idx`;--> statement-breakpoint
ALTER TABLE `api_keys` ADD `requests_per_minute` integer;--> statement-breakpoint
CREATE INDEX `api_keys_limited_idx` ON `api_keys` (`id`) WHERE max_concurrency IS NOT NULL OR tokens_per_5h IS NOT NULL OR tokens_per_month IS NOT NULL OR requests_per_minute IS NOT NULL;--> statement-breakpoint
-- Added by hand (drizzle-kit has no triggers): a running server caches keys with their caps, so a change of this cap
-- raises change_counter like the other columns it caches (migrations 0006, 0008 and 0011).
DROP TRIGGER `api_keys_updated`;
--> statement-breakpoint
CREATE TRIGGER `api_keys_updated` AFTER UPDATE OF `hash`, `organization_id`, `expires_at`, `revoked_at`, `max_concurrency`, `tokens_per_5h`, `tokens_per_month`, `requests_per_minute`, `models` ON `api_keys` BEGIN UPDATE `change_counter` SET `version` = `version` + 1 WHERE `id` = 1; END;
