ALTER TABLE `api_keys` ADD `networks` text;--> statement-breakpoint
-- Added by hand (drizzle-kit has no triggers): a running server caches keys with the networks they may be used from,
-- so a change of them raises change_counter like the other columns it caches (migrations 0006, 0008, 0011 and 0016).
DROP TRIGGER `api_keys_updated`;
--> statement-breakpoint
CREATE TRIGGER `api_keys_updated` AFTER UPDATE OF `hash`, `organization_id`, `expires_at`, `revoked_at`, `max_concurrency`, `tokens_per_5h`, `tokens_per_month`, `requests_per_minute`, `models`, `networks` ON `api_keys` BEGIN UPDATE `change_counter` SET `version` = `version` + 1 WHERE `id` = 1; END;
